/* Racy: a plain store racing an atomic read-modify-write of the same word. */
#include <stdatomic.h>
#include "demo.h"

static _Atomic long counter;
static double deadline;

__attribute__((noinline)) void count(void) { atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed); }  /* racewatch: racy */
__attribute__((noinline)) void reset(void) { *(volatile long *)&counter = 0; }  /* racewatch: racy */

static void *counting(void *arg) {
  (void)arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) count();
  return NULL;
}

static void *resetting(void *arg) {
  long *resets = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++, ++*resets) reset();
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  long resets = 0;
  pthread_t a, b;
  demo_spawn(&a, counting, NULL);
  demo_spawn(&b, resetting, &resets);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_atomic_mix: %ld resets\n", resets);
  return 0;
}
