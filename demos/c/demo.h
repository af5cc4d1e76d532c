/* Shared bits of the C demos: run time from argv[1], a deadline clock. */
#ifndef RACEWATCH_DEMO_H
#define RACEWATCH_DEMO_H
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double demo_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds to run: argv[1] if given, else `def`. */
static double demo_seconds(int argc, char **argv, double def) {
  return argc > 1 ? atof(argv[1]) : def;
}

static void demo_spawn(pthread_t *t, void *(*fn)(void *), void *arg) {
  if (pthread_create(t, NULL, fn, arg) != 0) {
    perror("pthread_create");
    exit(1);
  }
}
#endif
