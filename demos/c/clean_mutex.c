/* Clean: a counter protected by a mutex. */
#include "demo.h"

static long counter;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double deadline;

__attribute__((noinline)) void bump(void) {
  pthread_mutex_lock(&lock);
  counter++;
  pthread_mutex_unlock(&lock);
}

static void *worker(void *arg) {
  long *calls = arg;
  while (demo_now() < deadline)
    for (int i = 0; i < 1000; i++, ++*calls) bump();
  return NULL;
}

int main(int argc, char **argv) {
  deadline = demo_now() + demo_seconds(argc, argv, 5);
  long ca = 0, cb = 0;
  pthread_t a, b;
  demo_spawn(&a, worker, &ca);
  demo_spawn(&b, worker, &cb);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  if (counter != ca + cb) return 1;
  printf("clean_mutex: %ld\n", counter);
  return 0;
}
