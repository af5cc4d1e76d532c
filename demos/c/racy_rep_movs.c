/* Racy: a writer stores a 512-byte snapshot into a shared slot while a reader
 * copies it out, without a lock. The copies are inline `rep movsq`
 * instructions (what compilers emit for fixed-size block copies), so both
 * accesses are string instructions in covered code, watched as byte ranges. */
#include "demo.h"

struct snapshot { long values[64]; };
static struct snapshot slot;
static double deadline;

__attribute__((noinline)) void store(const struct snapshot *s) {
  __builtin_memcpy_inline(&slot, s, sizeof slot);  /* racewatch: racy */
}

__attribute__((noinline)) long load(struct snapshot *out) {
  __builtin_memcpy_inline(out, &slot, sizeof slot);  /* racewatch: racy */
  return out->values[7];
}

static void *writer(void *arg) {
  struct snapshot s = {{0}};
  while (demo_now() < deadline)
    for (long i = 0; i < 1000; i++) {
      s.values[i & 63] = i;
      store(&s);
    }
  return arg;
}

static void *reader(void *arg) {
  struct snapshot s;
  long sum = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) sum += load(&s);
  return (void *)sum;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t w, r;
  demo_spawn(&w, writer, NULL);
  demo_spawn(&r, reader, NULL);
  pthread_join(w, NULL);
  pthread_join(r, NULL);
  printf("racy_rep_movs: %ld\n", slot.values[7]);
  return 0;
}
