/* RLIMIT_NPROC: the program takes a user id of its own (so that no other process counts against its
 * limit), limits itself to 8 tasks, starts two racing threads and then threads that wait, until
 * pthread_create fails. How many it could start must not depend on racewatch. */

static atomic_int release_waiters;

static void *waiter(void *arg) {
  (void)arg;
  while (!atomic_load(&release_waiters)) rw_sleep(0.002);
  return NULL;
}

int main(void) {
  uid_t uid = 20000 + (uid_t)(getpid() % 20000);
  if (setgid(uid) || setuid(uid)) {
    printf("setuid: %s\n", rw_errname(errno));
    return 1;
  }
  struct rlimit limit = {8, 8};
  if (setrlimit(RLIMIT_NPROC, &limit)) return 1;
  rw_start(2, 0.6, 0);
  pthread_t waiters[64];
  int n = 0, err = 0;
  while (n < 64 && !(err = pthread_create(&waiters[n], NULL, waiter, NULL))) n++;
  printf("waiting threads started: %d, then %s\n", n, err ? rw_errname(err) : "stopped");
  atomic_store(&release_waiters, 1);
  for (int i = 0; i < n; i++) pthread_join(waiters[i], NULL);
  rw_join();
  printf("done\n");
  return 0;
}
