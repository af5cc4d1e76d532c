/* Dying of a signal while threads race (racewatch with stats=1 prints its counters first, and the
 * process must still die of the same signal).
 * argv[1] = "abort":  abort() (SIGABRT).
 * argv[1] = "segv":   a write through a null pointer (a real fault, SIGSEGV).
 * argv[1] = "term":   kill(getpid(), SIGTERM).
 * argv[1] = "query":  the program sees SIG_DFL for the terminating signals, installs its own SIGINT
 *                     handler (sigaction) and SIGUSR1 handler (signal(), which returns SIG_DFL), and both run. */
static atomic_int handled;

static void on_signal(int sig) {
  (void)sig;
  atomic_fetch_add(&handled, 1);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "abort";
  rw_start(2, 0.6, 0);
  rw_race_until(rw_now() + 0.3);
  printf("dying by %s\n", mode);
  fflush(stdout);
  if (strcmp(mode, "abort") == 0) {
    abort();
  } else if (strcmp(mode, "segv") == 0) {
    volatile int *nowhere = (volatile int *)(uintptr_t)(rw_now() < 0);
    *nowhere = 1;
  } else if (strcmp(mode, "term") == 0) {
    kill(getpid(), SIGTERM);
    rw_sleep(5);
  } else {
    int defaults = 0;
    const int sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGABRT, SIGSEGV, SIGBUS, SIGTERM, SIGUSR1};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
      struct sigaction old;
      sigaction(sigs[i], NULL, &old);
      defaults += old.sa_handler == SIG_DFL && old.sa_flags == 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    struct sigaction previous;
    sigaction(SIGINT, &sa, &previous);
    void (*was)(int) = signal(SIGUSR1, on_signal);
    raise(SIGINT);
    raise(SIGUSR1);
    struct sigaction now;
    sigaction(SIGINT, NULL, &now);
    printf("defaults: %d of 8, previous SIGINT default: %d, signal() returned default: %d\n", defaults,
           previous.sa_handler == SIG_DFL, was == SIG_DFL);
    printf("handled: %d, SIGINT handler is ours: %d\n", atomic_load(&handled), now.sa_handler == on_signal);
  }
  rw_join();
  return 0;
}
