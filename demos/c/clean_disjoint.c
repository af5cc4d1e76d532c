/* Clean: threads write disjoint 3-byte slices of one buffer. Each slice's
 * unaligned 2-byte word is watched through an aligned window that covers the
 * neighbours' bytes too; only an exact byte-range check keeps this silent. */
#include <string.h>
#include "demo.h"

#define CHUNKS 4
static unsigned char buf[3 * CHUNKS];
static double deadline;

__attribute__((noinline)) void scribble(unsigned char *chunk, unsigned char round) {
  unsigned short word;
  memcpy(&word, chunk, 2);
  word += round;
  memcpy(chunk, &word, 2);
  chunk[2] += round;
}

static void *worker(void *arg) {
  unsigned char *chunk = arg, round = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) scribble(chunk, ++round);
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  pthread_t t[CHUNKS];
  for (int i = 0; i < CHUNKS; i++) demo_spawn(&t[i], worker, buf + 3 * i);
  for (int i = 0; i < CHUNKS; i++) pthread_join(t[i], NULL);
  printf("clean_disjoint: done\n");
  return 0;
}
