/* Racy: one thread clears a shared scratch buffer with memset while another
 * scans it with plain loads, without a lock. */
#include <string.h>
#include "demo.h"

static unsigned char scratch[256];
static double deadline;
static volatile size_t scratch_size = sizeof scratch;

__attribute__((noinline)) void clear(int round, size_t n) {
  memset(scratch, round, n);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) long scan(size_t n) {
  long sum = 0;
  for (size_t i = 0; i < n; i += 8) sum += *(volatile long *)&scratch[i];  /* racewatch: racy */
  return sum;
}

static void *clearer(void *arg) {
  int round = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) clear(++round & 0xff, scratch_size);
  return arg;
}

static void *scanner(void *arg) {
  long sum = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) sum += scan(scratch_size);
  return (void *)sum;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t a, b;
  demo_spawn(&a, clearer, NULL);
  demo_spawn(&b, scanner, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_memset: done\n");
  return 0;
}
