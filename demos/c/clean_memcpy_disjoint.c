/* Clean: two threads fill adjacent parts of one buffer with memcpy and memset,
 * for the whole run. The parts meet inside one 8-byte word (13 + 11 bytes), so
 * a watched word of one part's copy also covers the other part's first bytes:
 * only exact byte ranges on both sides (the sampled call's, the trapped store's
 * inside libc) keep this silent. */
#include <string.h>
#include "demo.h"

static unsigned char buf[24];
static double deadline;
static volatile size_t lens[2] = {13, 11};

__attribute__((noinline)) void fill(size_t offset, size_t len, const unsigned char *src, int round) {
  if (round & 1)
    memcpy(buf + offset, src, len);
  else
    memset(buf + offset, round, len);
  __asm__ volatile("" ::: "memory");
}

static void *worker(void *arg) {
  long id = (long)arg;
  size_t offset = id ? lens[0] : 0, len = lens[id];
  unsigned char src[16] = {0};
  int round = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) {
      src[i & 15]++;
      fill(offset, len, src, ++round & 0xff);
    }
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  pthread_t t[2];
  for (long i = 0; i < 2; i++) demo_spawn(&t[i], worker, (void *)i);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("clean_memcpy_disjoint: done %d\n", buf[0] + buf[23]);
  return 0;
}
