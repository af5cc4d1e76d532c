/* racewatch.h: tag inline-assembly atomics for racewatch.
 *
 * The compiler pass (-fexperimental-sanitize-metadata=atomics) tags atomic
 * IR instructions; an atomic written as inline assembly is invisible to it,
 * and racewatch would report two threads using it as racing. Wrap the
 * instruction's text in RACEWATCH_ATOMIC to add the same sanmd_atomics2
 * entry the pass writes:
 *
 *     asm volatile(RACEWATCH_ATOMIC("movq (%1), %0") : "=r"(v) : "r"(p) : "memory");
 *
 * Only the first instruction of the string is tagged. */
#ifndef RACEWATCH_H
#define RACEWATCH_H

#define RACEWATCH_ATOMIC(insn)                                   \
    "998:\n\t" insn "\n\t"                                       \
    ".pushsection sanmd_atomics2,\"aR\",@progbits\n\t"          \
    ".long 998b - .\n\t"                                         \
    ".popsection\n\t"

#endif
