/* Racy: two threads copy into and out of one shared 4 KiB page with memcpy, without a lock. Nearly
 * every sample lands inside libc's memcpy (no metadata there): the sampler watches the bytes the call
 * is about to touch, and the cold-code bias keys each 64-byte line of the page apart, so the one hot
 * call site is not declined after its first watches (issue 24). */
#include <string.h>
#include "demo.h"

static char page[4096];
static double deadline;
/* Not a constant: the copies stay calls to libc's memcpy. */
static volatile size_t page_size = sizeof page;

__attribute__((noinline)) void fill(const char *src, size_t n) {
  memcpy(page, src, n);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) char drain(char *dst, size_t n) {
  memcpy(dst, page, n);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
  return dst[n / 2];
}

static void *filler(void *arg) {
  static char src[4096];
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) {
      src[i % sizeof src] = (char)i;
      fill(src, page_size);
    }
  return arg;
}

static void *drainer(void *arg) {
  static char dst[4096];
  long sum = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) sum += drain(dst, page_size);
  return (void *)sum;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t a, b;
  demo_spawn(&a, filler, NULL);
  demo_spawn(&b, drainer, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_memcpy_page: %d\n", page[0]);
  return 0;
}
