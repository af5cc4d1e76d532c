/* Case 3: every thread blocks SIGHUP; a dedicated thread collects it with sigwait(). */
static atomic_int hups;

static void *waiter(void *arg) {
  sigset_t *set = arg;
  while (atomic_load(&hups) < 3) {
    int sig;
    if (sigwait(set, &sig) == 0 && sig == SIGHUP) atomic_fetch_add(&hups, 1);
  }
  return NULL;
}

int main(void) {
  static sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  rw_start(2, 1.0, 0);
  pthread_t t;
  pthread_create(&t, NULL, waiter, &set);
  for (int i = 0; i < 3; i++) {
    rw_sleep(0.2);
    kill(getpid(), SIGHUP);
    double end = rw_now() + 5;
    while (atomic_load(&hups) < i + 1 && rw_now() < end) rw_sleep(0.001);
    printf("SIGHUP %d counted: %d\n", i + 1, atomic_load(&hups) == i + 1);
  }
  if (atomic_load(&hups) < 3) {
    printf("lost SIGHUP\n");
    fflush(stdout);
    _exit(3);
  }
  pthread_join(t, NULL);
  rw_join();
  printf("SIGHUP count: %d\n", atomic_load(&hups));
  return 0;
}
