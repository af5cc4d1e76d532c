/* Signals the program sends to one of its threads while it races: 300 rounds, each one of SIGUSR1,
 * SIGUSR2 and SIGRTMIN by pthread_kill or pthread_sigqueue (payload 7) to a busy worker, waited for
 * before the next. The handler notes which thread ran it: always the worker, as without racewatch
 * (before, racewatch handed a pthread_sigqueue'd SIGUSR1/SIGUSR2, whose SI_QUEUE looks like a
 * sigqueue to the process, over to the main thread: 100 of 100, set 31 p25). */
#include <sys/syscall.h>

static volatile pid_t worker_tid;
static atomic_long handled, elsewhere, wrong_payload;
static atomic_int stop;

static void on_signal(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  (void)ctx;
  if ((pid_t)syscall(SYS_gettid) != worker_tid) atomic_fetch_add(&elsewhere, 1);
  if (info->si_code == SI_QUEUE && info->si_value.sival_int != 7) atomic_fetch_add(&wrong_payload, 1);
  atomic_fetch_add(&handled, 1);
}

static void *busy(void *arg) {
  (void)arg;
  worker_tid = (pid_t)syscall(SYS_gettid);
  while (!atomic_load(&stop)) rw_race_iterations(1000);
  return NULL;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  int sigs[3] = {SIGUSR1, SIGUSR2, SIGRTMIN};
  for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, NULL);
  /* A second racer that takes none of them. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  rw_start(1, 30.0, 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_t worker;
  pthread_create(&worker, NULL, busy, NULL);
  while (!worker_tid) rw_sleep(0.001);
  long lost = 0;
  for (int round = 0; round < 300; round++) {
    long before = atomic_load(&handled);
    if (round % 2) pthread_sigqueue(worker, sigs[round % 3], (union sigval){.sival_int = 7});
    else pthread_kill(worker, sigs[round % 3]);
    double until = rw_now() + 5.0;
    while (atomic_load(&handled) == before && rw_now() < until) sched_yield();
    if (atomic_load(&handled) == before) lost++;
  }
  atomic_store(&stop, 1);
  pthread_join(worker, NULL);
  rw_stop_racing();
  rw_join();
  printf("handled %ld, on another thread %ld, wrong payload %ld, lost %ld\n", atomic_load(&handled),
         atomic_load(&elsewhere), atomic_load(&wrong_payload), lost);
  return 0;
}
