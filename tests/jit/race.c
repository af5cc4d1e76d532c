/* JIT'd by tests/jit/host.cpp (and stock lli-19): two threads bump a counter through one of three
 * functions for a given time: racy_bump (a plain read-modify-write: a data race), relaxed_bump (a
 * relaxed atomic: no race) and guarded_bump (a mutex: the clean twin). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

long racy_total;
atomic_long relaxed_total;
long guarded_total;
pthread_mutex_t guard = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) void racy_bump(long i) {
  racy_total += i; /* racewatch: racy */
}

__attribute__((noinline)) void relaxed_bump(long i) {
  atomic_fetch_add_explicit(&relaxed_total, i, memory_order_relaxed);
}

__attribute__((noinline)) void guarded_bump(long i) {
  pthread_mutex_lock(&guard);
  guarded_total += i;
  pthread_mutex_unlock(&guard);
}

struct job {
  void (*bump)(long);
  double until;
};

static void *worker(void *arg) {
  struct job *job = arg;
  long i = 0;
  while (now() < job->until)
    for (int k = 0; k < 1000; k++)
      job->bump(i++);
  return 0;
}

static int run(void (*bump)(long), double seconds) {
  struct job job = {bump, now() + seconds};
  pthread_t threads[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&threads[i], 0, worker, &job);
  for (int i = 0; i < 2; i++)
    pthread_join(threads[i], 0);
  return 0;
}

int racy_main(double seconds) { return run(racy_bump, seconds); }
int relaxed_main(double seconds) { return run(relaxed_bump, seconds); }
int clean_main(double seconds) { return run(guarded_bump, seconds); }

/* For lli: race for argv[1] seconds (default 1). */
int main(int argc, char **argv) {
  racy_main(argc > 1 ? atof(argv[1]) : 1);
  printf("done\n");
  return 0;
}
