/* Racy: data published through a plain volatile flag (volatile is not atomic). */
#include "demo.h"

static volatile long data;
static volatile int ready;
static double deadline;

__attribute__((noinline)) void publish(long value) {
  data = value;  /* racewatch: racy */
  ready = 1;  /* racewatch: racy */
}

__attribute__((noinline)) int consume(long *out) {
  if (!ready) return 0;  /* racewatch: racy */
  *out = data;  /* racewatch: racy */
  ready = 0;  /* racewatch: racy */
  return 1;
}

static void *producer(void *arg) {
  long *sent = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) publish(++*sent);
  return NULL;
}

static void *consumer(void *arg) {
  long *seen = arg, v;
  while (demo_now() < deadline)
    for (int i = 0; i < 100; i++) *seen += consume(&v);
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  long sent = 0, seen = 0;
  pthread_t a, b;
  demo_spawn(&a, producer, &sent);
  demo_spawn(&b, consumer, &seen);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("racy_flag: published %ld, consumed %ld\n", sent, seen < sent ? seen : sent);
  return 0;
}
