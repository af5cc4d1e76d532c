/* Clean: a table behind a pthread rwlock, one writer and two readers. */
#include "demo.h"

static long table[64];
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static double deadline;

__attribute__((noinline)) void update(long i) {
  pthread_rwlock_wrlock(&lock);
  table[i % 64]++;
  pthread_rwlock_unlock(&lock);
}

__attribute__((noinline)) long total(void) {
  long sum = 0;
  pthread_rwlock_rdlock(&lock);
  for (int i = 0; i < 64; i++) sum += table[i];
  pthread_rwlock_unlock(&lock);
  return sum;
}

static void *writer(void *arg) {
  long *n = arg;
  while (demo_now() < deadline) update((*n)++);
  return NULL;
}

static void *reader(void *arg) {
  (void)arg;
  while (demo_now() < deadline) total();
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  long updates = 0;
  pthread_t w, r1, r2;
  demo_spawn(&w, writer, &updates);
  demo_spawn(&r1, reader, NULL);
  demo_spawn(&r2, reader, NULL);
  pthread_join(w, NULL);
  pthread_join(r1, NULL);
  pthread_join(r2, NULL);
  if (total() != updates) return 1;
  printf("clean_rwlock: %ld updates\n", updates);
  return 0;
}
