/* Racy: two threads increment a plain global counter. */
#include "demo.h"

static long counter;
static double deadline;

__attribute__((noinline)) void bump(void) { counter++; }  /* racewatch: racy */

static void *worker(void *arg) {
  (void)arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) bump();
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t a, b;
  demo_spawn(&a, worker, NULL);
  demo_spawn(&b, worker, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_counter: %ld\n", counter);
  return 0;
}
