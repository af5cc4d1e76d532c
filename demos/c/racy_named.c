/* Racy: a writer and a reader thread, each named with pthread_setname_np, race on a global. The
   report names both threads, shows where main created them and names the global. */
#define _GNU_SOURCE
#include "demo.h"

long shared_total; /* the raced-on global */
static double deadline;

__attribute__((noinline)) void add(long v) { shared_total += v; }               /* racewatch: racy */
__attribute__((noinline)) long peek(void) { return *(volatile long *)&shared_total; } /* racewatch: racy */

static void *writer(void *arg) {
  pthread_setname_np(pthread_self(), "rw-writer");
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) add(1);
  return arg;
}

static void *reader(void *arg) {
  pthread_setname_np(pthread_self(), "rw-reader");
  long seen = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) seen += peek();
  return (void *)seen;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t w, r;
  if (pthread_create(&w, NULL, writer, NULL) != 0) /* racewatch: creates a thread */
    return 1;
  if (pthread_create(&r, NULL, reader, NULL) != 0) /* racewatch: creates a thread */
    return 1;
  pthread_join(w, NULL);
  pthread_join(r, NULL);
  printf("racy_named: %ld\n", shared_total);
  return 0;
}
