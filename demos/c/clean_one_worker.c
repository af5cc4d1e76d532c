/* Clean: main starts one worker and waits for it in pthread_join; the worker streams over its own
 * buffer. Only one thread ever runs, so nothing can race: the sampler declines to watch (issue 24). */
#include <stdint.h>
#include "demo.h"

static double deadline;

__attribute__((noinline)) uint64_t stream(uint64_t *buf, long n, uint64_t acc) {
  for (long i = 0; i < n; i++) {
    buf[i] = buf[i] * 6364136223846793005ull + (acc ^ (uint64_t)i);
    acc = (acc << 5 | acc >> 59) ^ buf[i];
  }
  return acc;
}

static void *worker(void *arg) {
  static uint64_t buf[1 << 14];
  uint64_t acc = 0;
  while (demo_now() < deadline) acc = stream(buf, 1 << 14, acc);
  return (void *)(uintptr_t)acc;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t t;
  void *acc;
  demo_spawn(&t, worker, NULL);
  pthread_join(t, &acc);
  printf("clean_one_worker: done\n");
  return acc == (void *)1;
}
