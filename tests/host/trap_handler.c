/* Case 7: the program's own SIGTRAP handler; main raises SIGTRAP 3 times while threads race.
 * argv[1] = "after":  sigaction(SA_SIGINFO) installed after the threads started.
 * argv[1] = "before": sigaction(SA_SIGINFO) installed before any thread.
 * argv[1] = "signal": signal(SIGTRAP, handler) after the threads started.
 * argv[1] = "routed": SIGTRAP blocked in main and the racing threads; three workers in turn are the only
 *                     thread letting it through, and each sends its process 100 SIGTRAPs with kill and 100
 *                     with sigqueue (a payload): the kernel gives every one to the sender before the call
 *                     returns, with its siginfo. Before (set 17 p37), they reached blocking threads first:
 *                     racewatch stepped aside and 4 to 64 of 100 went missing. */
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

#define ROUTED_WORKERS 3
#define ROUTED_SIGNALS 100
static _Thread_local int routed_me = -1;
static atomic_int routed_kill[ROUTED_WORKERS], routed_queue[ROUTED_WORKERS], routed_payload[ROUTED_WORKERS];
static atomic_int routed_elsewhere;

static void on_routed(int sig, siginfo_t *info, void *ctx) {
  (void)sig, (void)ctx;
  int me = routed_me;
  if (me < 0 || info->si_pid != getpid()) {
    atomic_fetch_add(&routed_elsewhere, 1);
    return;
  }
  if (info->si_code == SI_USER) atomic_fetch_add(&routed_kill[me], 1);
  if (info->si_code == SI_QUEUE) {
    atomic_fetch_add(&routed_queue[me], 1);
    if (info->si_value.sival_int == 1000 + me) atomic_fetch_add(&routed_payload[me], 1);
  }
}

static void *routed_worker(void *arg) {
  routed_me = (int)(long)arg;
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  pthread_sigmask(SIG_UNBLOCK, &trap, NULL);
  for (int i = 0; i < ROUTED_SIGNALS; i++) {
    kill(getpid(), SIGTRAP);
    union sigval value = {.sival_int = 1000 + routed_me};
    sigqueue(getpid(), SIGTRAP, value);
    if (i % 20 == 0) rw_race_iterations(5000);
  }
  pthread_sigmask(SIG_BLOCK, &trap, NULL);
  return NULL;
}

static int routed(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_routed;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGTRAP, &sa, NULL);
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &trap, NULL);
  rw_start(2, 30.0, 0);
  for (long i = 0; i < ROUTED_WORKERS; i++) {
    pthread_t t;
    pthread_create(&t, NULL, routed_worker, (void *)i);
    pthread_join(t, NULL);
  }
  rw_stop_racing();
  rw_join();
  for (int i = 0; i < ROUTED_WORKERS; i++)
    printf("worker %d: kill %d, sigqueue %d (payload right %d)\n", i, atomic_load(&routed_kill[i]),
           atomic_load(&routed_queue[i]), atomic_load(&routed_payload[i]));
  printf("taken by another thread: %d\n", atomic_load(&routed_elsewhere));
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "after";
  if (strcmp(mode, "routed") == 0) return routed();
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
