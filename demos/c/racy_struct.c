/* Racy: two threads update the fields of one shared struct without a lock. */
#include "demo.h"

struct stats { long hits; long last; };
static struct stats shared;
static double deadline;

__attribute__((noinline)) void record(struct stats *s, long value) {
  s->hits++;  /* racewatch: racy */
  s->last = value;  /* racewatch: racy */
}

static void *worker(void *arg) {
  long id = (long)arg;
  while (demo_now() < deadline)
    for (long i = 0; i < 1000; i++) record(&shared, id * 1000000 + i);
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t a, b;
  demo_spawn(&a, worker, (void *)1);
  demo_spawn(&b, worker, (void *)2);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_struct: %ld hits\n", shared.hits);
  return 0;
}
