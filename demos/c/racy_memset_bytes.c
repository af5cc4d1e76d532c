/* Racy: one thread clears a shared 4 KiB buffer with memset while another stores single bytes into
 * it, without a lock. The memset side is sampled inside libc's memset; the byte stores are one hot PC
 * (issue 24). */
#include <string.h>
#include "demo.h"

static unsigned char buffer[4096];
static double deadline;
static volatile size_t buffer_size = sizeof buffer;

__attribute__((noinline)) void clear(int round, size_t n) {
  memset(buffer, round, n);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void mark(size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i += 64) buffer[i] = v;  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
}

static void *clearer(void *arg) {
  int round = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) clear(++round & 0xff, buffer_size);
  return arg;
}

static void *marker(void *arg) {
  unsigned char v = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) mark(buffer_size, ++v);
  return arg;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t a, b;
  demo_spawn(&a, clearer, NULL);
  demo_spawn(&b, marker, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_memset_bytes: %d\n", buffer[0]);
  return 0;
}
