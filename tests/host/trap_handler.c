/* Case 7: the program's own SIGTRAP handler; main raises SIGTRAP 3 times while threads race.
 * argv[1] = "after":  sigaction(SA_SIGINFO) installed after the threads started.
 * argv[1] = "before": sigaction(SA_SIGINFO) installed before any thread.
 * argv[1] = "signal": signal(SIGTRAP, handler) after the threads started. */
static atomic_int traps;
static atomic_int other_codes;

static void on_trap_info(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  (void)ctx;
  atomic_fetch_add(&traps, 1);
  if (info->si_code != SI_TKILL) atomic_fetch_add(&other_codes, 1);
}

static void on_trap(int sig) {
  (void)sig;
  atomic_fetch_add(&traps, 1);
}

static void install(int use_signal) {
  if (use_signal) {
    signal(SIGTRAP, on_trap);
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_trap_info;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "after";
  int use_signal = strcmp(mode, "signal") == 0;
  if (strcmp(mode, "before") == 0) install(0);
  rw_start(2, 1.2, 0);
  rw_sleep(0.1);
  if (strcmp(mode, "before") != 0) install(use_signal);
  for (int i = 0; i < 3; i++) {
    rw_race_until(rw_now() + 0.25);
    raise(SIGTRAP);
  }
  rw_race_until(rw_now() + 0.2);
  rw_join();
  struct sigaction old;
  sigaction(SIGTRAP, NULL, &old);
  int ours = use_signal ? old.sa_handler == on_trap : old.sa_sigaction == on_trap_info && (old.sa_flags & SA_SIGINFO);
  printf("handler ran: %d\n", atomic_load(&traps));
  printf("SIGTRAPs with another si_code: %d\n", atomic_load(&other_codes));
  printf("sigaction returns our handler: %d\n", ours);
  return 0;
}
