/* Clean: a word shared through hand-written assembly atomics (aligned 8-byte
 * MOVs are atomic on x86-64), as lock-free libraries write them. The pass
 * cannot see inline assembly; RACEWATCH_ATOMIC (instrument/include/racewatch.h)
 * tags each instruction in sanmd_atomics2, so the two threads are not racing. */
#include "../../instrument/include/racewatch.h"
#include "demo.h"

static long word;
static double deadline;

__attribute__((noinline)) long asm_load(long *p) {
  long v;
  __asm__ volatile(RACEWATCH_ATOMIC("movq (%1), %0") : "=r"(v) : "r"(p) : "memory");
  return v;
}

__attribute__((noinline)) void asm_store(long *p, long v) {
  __asm__ volatile(RACEWATCH_ATOMIC("movq %1, (%0)") : : "r"(p), "r"(v) : "memory");
}

static void *writer(void *arg) {
  long *stores = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) asm_store(&word, ++*stores);
  return NULL;
}

static void *reader(void *arg) {
  long *seen = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) *seen += asm_load(&word) != 0;
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  long stores = 0, seen = 0;
  pthread_t a, b;
  demo_spawn(&a, writer, &stores);
  demo_spawn(&b, reader, &seen);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("clean_asm_atomics: done (%d)\n", stores > 0);
  return 0;
}
