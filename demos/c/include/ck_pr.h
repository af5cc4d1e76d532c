/* A stand-in for Concurrency Kit's `gcc/x86_64/ck_pr.h`, in the same place of the include tree and with
 * the same kind of primitives: loads and stores written as inline-assembly MOVs (atomic when aligned on
 * x86-64), an increment with a LOCK prefix. The compiler pass cannot tag any of them; racewatch knows
 * a file named ck_pr.h holds atomic primitives (instrument/src/tags.rs, ASM_ATOMIC_CODE). */
#ifndef RACEWATCH_DEMO_CK_PR_H
#define RACEWATCH_DEMO_CK_PR_H
#include <stdint.h>

static inline uint64_t ck_pr_load_64(const uint64_t *target) {
  uint64_t r;
  __asm__ __volatile__("movq %1, %0" : "=r"(r) : "m"(*(const volatile uint64_t *)target) : "memory");
  return r;
}

static inline void ck_pr_store_64(uint64_t *target, uint64_t v) {
  __asm__ __volatile__("movq %1, %0" : "=m"(*(volatile uint64_t *)target) : "r"(v) : "memory");
}

static inline void ck_pr_inc_64(uint64_t *target) {
  __asm__ __volatile__("lock incq %0" : "+m"(*(volatile uint64_t *)target) : : "memory", "cc");
}
#endif
