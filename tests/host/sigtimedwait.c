/* Case 8: workers block every signal and poll with sigtimedwait(full set, 1 ms) between racy work:
 * nothing is ever sent to this process, so nothing may be dequeued. */
static atomic_int dequeued;
static atomic_int sigs[8];
static atomic_int codes[8];

static void *worker(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  double end = rw_now() + 1.0;
  while (rw_now() < end) {
    rw_race_iterations(20000);
    siginfo_t info;
    struct timespec ts = {0, 1000000};
    int sig = sigtimedwait(&all, &info, &ts);
    if (sig > 0) {
      int n = atomic_fetch_add(&dequeued, 1);
      if (n < 8) {
        atomic_store(&sigs[n], sig);
        atomic_store(&codes[n], info.si_code);
      }
    }
  }
  return NULL;
}

int main(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  int n = atomic_load(&dequeued);
  printf("signals dequeued: %d\n", n);
  for (int i = 0; i < n && i < 8; i++) {
    printf("  signal %d si_code %d\n", atomic_load(&sigs[i]), atomic_load(&codes[i]));
  }
  return 0;
}
