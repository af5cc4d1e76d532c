/* `main` ends with pthread_exit(NULL) so that its workers finish (a POSIX idiom): the process ends,
 * with status 0 and its atexit handlers run, when the last worker returns. argv[1]:
 *   "workers": two racing threads return at their deadline;
 *   "exiting-workers": the workers end with pthread_exit themselves, one after the other;
 *   "late-workers": two threads that start racing 0.2 s after main called pthread_exit;
 *   "buffered-late-workers": the same with stdout fully buffered, so that what main and the atexit
 *                  handler print is written only as the process exits;
 *   "churn-workers", "churn-exiting-workers": the same after 200 short rounds of two workers. */

static void at_exit(void) { printf("atexit handler ran\n"); }

static void *exiting_racer(void *arg) {
  double seconds = *(double *)arg;
  rw_race_until(rw_now() + seconds);
  pthread_exit(NULL);
}

static void *late_racer(void *arg) {
  (void)arg;
  rw_sleep(0.2);
  rw_race_until(rw_now() + 0.8);
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  atexit(at_exit);
  if (!strncmp(mode, "churn-", 6)) {
    /* 200 short rounds of two workers first: racewatch keeps its reporter through such a churn. */
    for (int round = 0; round < 200; round++) {
      rw_start(2, 0.002, 0);
      rw_join();
    }
    mode += 6;
  }
  if (!strcmp(mode, "workers")) {
    rw_start(2, 0.8, 0);
  } else if (!strcmp(mode, "late-workers") || !strcmp(mode, "buffered-late-workers")) {
    if (mode[0] == 'b') setvbuf(stdout, NULL, _IOFBF, 4096);
    pthread_t t;
    for (int i = 0; i < 2; i++)
      if (pthread_create(&t, NULL, late_racer, NULL)) return 1;
  } else if (!strcmp(mode, "exiting-workers")) {
    static double seconds[2] = {0.5, 0.9};
    pthread_t t;
    for (int i = 0; i < 2; i++)
      if (pthread_create(&t, NULL, exiting_racer, &seconds[i])) return 1;
  } else {
    return 2;
  }
  printf("main calls pthread_exit\n");
  pthread_exit(NULL);
}
