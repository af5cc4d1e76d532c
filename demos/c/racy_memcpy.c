/* Racy: a writer publishes a record into a shared buffer with memcpy while a
 * reader copies it out with memcpy, without a lock. Both accesses are inside
 * libc's memcpy: the report shows `memcpy` and the lines that called it. */
#include <string.h>
#include "demo.h"

struct record { char name[40]; long values[12]; };
static struct record shared;
static double deadline;
/* Not a constant: the copies stay calls to libc's memcpy. */
static volatile size_t record_size = sizeof(struct record);

__attribute__((noinline)) void publish(const struct record *r, size_t n) {
  memcpy(&shared, r, n);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) long fetch(struct record *out, size_t n) {
  memcpy(out, &shared, n);  /* racewatch: racy */
  __asm__ volatile("" ::: "memory");
  return out->values[3];
}

static void *writer(void *arg) {
  struct record r = {"writer", {0}};
  while (demo_now() < deadline)
    for (long i = 0; i < 1000; i++) {
      r.values[i % 12] = i;
      publish(&r, record_size);
    }
  return arg;
}

static void *reader(void *arg) {
  struct record r;
  long sum = 0;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++) sum += fetch(&r, record_size);
  return (void *)sum;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 10);
  pthread_t w, r;
  demo_spawn(&w, writer, NULL);
  demo_spawn(&r, reader, NULL);
  pthread_join(w, NULL);
  pthread_join(r, NULL);
  printf("racy_memcpy: %s\n", shared.name);
  return 0;
}
