/* Clean: the racy_memcpy and racy_strcpy pair, with every copy, strcpy,
 * strlen and strcmp of the shared data under one mutex. */
#include <string.h>
#include "demo.h"

struct record { char name[40]; long values[12]; };
static struct record shared;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double deadline;
static volatile size_t record_size = sizeof(struct record);
static const char *const names[] = {"alpha", "a considerably longer name", "gamma-ray", "delta"};

__attribute__((noinline)) void publish(const struct record *r, size_t n, const char *name) {
  pthread_mutex_lock(&lock);
  memcpy(&shared, r, n);
  strcpy(shared.name, name);
  pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) long fetch(struct record *out, size_t n) {
  pthread_mutex_lock(&lock);
  memcpy(out, &shared, n);
  long len = (long)strlen(shared.name) + (strcmp(shared.name, "delta") == 0);
  pthread_mutex_unlock(&lock);
  return out->values[3] + len;
}

static void *writer(void *arg) {
  struct record r = {"writer", {0}};
  while (demo_now() < deadline)
    for (long i = 0; i < 1000; i++) {
      r.values[i % 12] = i;
      publish(&r, record_size, names[i & 3]);
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
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  pthread_t w, r;
  demo_spawn(&w, writer, NULL);
  demo_spawn(&r, reader, NULL);
  pthread_join(w, NULL);
  pthread_join(r, NULL);
  printf("clean_memcpy_locked: %s\n", shared.name);
  return 0;
}
