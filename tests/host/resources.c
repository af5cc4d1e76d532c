/* Resources the program counts, while threads race. argv[1]:
 *   "keys":        pthread_key_create until it fails (PTHREAD_KEYS_MAX, 1024, without racewatch);
 *   "breakpoints": 4 hardware breakpoints on 4 globals (perf_event_open, PERF_TYPE_BREAKPOINT,
 *                  HW_BREAKPOINT_W, 8 bytes, exclude_kernel) on main, 10 times while racing: how many open
 *                  (a debugger or a profiler the program embeds does this);
 *   "breakpoints_threads": 3 threads, released together, each open 4 breakpoints of its own at once
 *                  (each thread's debug registers are its own): how many each opened;
 *   "rlimit":      a thread sets the soft RLIMIT_NOFILE to a new value and reads it back, over and over from
 *                  before the racing threads start until after they varied their races (new reports): the
 *                  value read is the value set;
 *   "sigpending":  in a user namespace of its own (its own count of queued signals), RLIMIT_SIGPENDING 40,
 *                  a blocked realtime signal queued with sigqueue until EAGAIN, then taken back, 30 rounds
 *                  beside two busy (race-free) workers: whether at least 25 rounds queued exactly 40 (a
 *                  sampling signal on its way to a thread, or pending while its handler runs, holds a
 *                  slot for a moment: 29 of 30 in some runs at the debug rate). */
#include <sched.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>

static int keys(void) {
  int n = 0, err = 0;
  pthread_key_t key;
  while (n < 100000) {
    err = pthread_key_create(&key, NULL);
    if (err) break;
    n++;
  }
  printf("keys created: %d, then %s\n", n, err ? rw_errname(err) : "stopped");
  return 0;
}

volatile long bp_target[4][8];

static int open_breakpoint(volatile long *addr) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.type = PERF_TYPE_BREAKPOINT;
  attr.size = sizeof attr;
  attr.bp_type = HW_BREAKPOINT_W;
  attr.bp_addr = (uintptr_t)addr;
  attr.bp_len = HW_BREAKPOINT_LEN_8;
  attr.sample_period = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static int breakpoints(void) {
  int fewest = 4, first_err = 0;
  for (int round = 0; round < 10; round++) {
    int fds[4], opened = 0;
    for (int i = 0; i < 4; i++) {
      fds[i] = open_breakpoint(&bp_target[i][0]);
      if (fds[i] >= 0)
        opened++;
      else if (!first_err)
        first_err = errno;
    }
    if (opened < fewest) fewest = opened;
    rw_race_until(rw_now() + 0.08);
    for (int i = 0; i < 4; i++)
      if (fds[i] >= 0) close(fds[i]);
  }
  printf("fewest breakpoints opened in a round: %d of 4", fewest);
  if (first_err) printf(" (first failure: %s)", first_err == ENOSPC ? "ENOSPC" : rw_errname(first_err));
  printf("\n");
  return 0;
}

static pthread_barrier_t bp_start;
static volatile long bp_own[3][4][8];
static atomic_int bp_fewest = 4;

static void *breakpoint_thread(void *arg) {
  long id = (long)arg;
  int fds[4], opened = 0;
  pthread_barrier_wait(&bp_start);
  for (int i = 0; i < 4; i++)
    if ((fds[i] = open_breakpoint(&bp_own[id][i][0])) >= 0) opened++;
  rw_race_until(rw_now() + 0.1);
  for (int i = 0; i < 4; i++)
    if (fds[i] >= 0) close(fds[i]);
  int seen = atomic_load(&bp_fewest);
  while (opened < seen && !atomic_compare_exchange_weak(&bp_fewest, &seen, opened)) {
  }
  return NULL;
}

static int breakpoints_threads(void) {
  pthread_barrier_init(&bp_start, NULL, 3);
  pthread_t t[3];
  for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, breakpoint_thread, (void *)i);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("fewest breakpoints a thread opened: %d of 4\n", atomic_load(&bp_fewest));
  return 0;
}

static atomic_int mismatches;

static void *limit_setter(void *arg) {
  (void)arg;
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rlim_t hard = rl.rlim_max;
  double end = rw_now() + 0.8;
  for (int i = 0; rw_now() < end; i++) {
    rlim_t want = 64 + (rlim_t)(i % 512);
    if (want > hard) want = hard;
    struct rlimit set = {want, hard}, got;
    if (setrlimit(RLIMIT_NOFILE, &set) != 0) atomic_fetch_add(&mismatches, 1);
    rw_race_iterations(5000);
    getrlimit(RLIMIT_NOFILE, &got);
    if (got.rlim_cur != want || got.rlim_max != hard) atomic_fetch_add(&mismatches, 1);
  }
  return NULL;
}

static int rlimit(void) {
  pthread_t t;
  pthread_create(&t, NULL, limit_setter, NULL);
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.3);
  rw_vary_races();
  pthread_join(t, NULL);
  printf("RLIMIT_NOFILE mismatches: %d\n", atomic_load(&mismatches));
  return 0;
}

static atomic_int own_work_stop;

/* Work on the thread's own memory (no race: no report, no reporter thread), sampled all the same. */
static void *own_work(void *arg) {
  volatile long own[64] = {0};
  for (long i = 0; !atomic_load(&own_work_stop); i++) own[i & 63] += i;
  return arg;
}

static int queue_to_the_limit(void) {
  if (unshare(CLONE_NEWUSER) != 0) {
    printf("unshare: %s\n", rw_errname(errno));
    return 1;
  }
  struct rlimit limit = {40, 40};
  if (setrlimit(RLIMIT_SIGPENDING, &limit) != 0) printf("setrlimit: %s\n", rw_errname(errno));
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGRTMIN + 3);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  /* Single-threaded until here: unshare(CLONE_NEWUSER) refuses a multithreaded process. */
  pthread_t workers[2];
  for (int i = 0; i < 2; i++) pthread_create(&workers[i], NULL, own_work, NULL);
  int exact = 0;
  for (int round = 0; round < 30; round++) {
    int queued = 0;
    while (queued < 100 && sigqueue(getpid(), SIGRTMIN + 3, (union sigval){.sival_int = queued}) == 0) queued++;
    exact += queued == 40 && errno == EAGAIN;
    struct timespec none = {0, 0};
    while (sigtimedwait(&set, NULL, &none) > 0) {
    }
    rw_sleep(0.01);
  }
  atomic_store(&own_work_stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(workers[i], NULL);
  printf("rounds that queued 40 signals, then EAGAIN: at least 25 of 30: %s\n", exact >= 25 ? "yes" : "no");
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "rlimit") != 0 && strcmp(mode, "sigpending") != 0) {
    rw_start(2, 1.0, 0);
    rw_race_until(rw_now() + 0.1);
  }
  int rc;
  if (strcmp(mode, "keys") == 0)
    rc = keys();
  else if (strcmp(mode, "breakpoints") == 0)
    rc = breakpoints();
  else if (strcmp(mode, "breakpoints_threads") == 0)
    rc = breakpoints_threads();
  else if (strcmp(mode, "rlimit") == 0)
    rc = rlimit();
  else if (strcmp(mode, "sigpending") == 0)
    rc = queue_to_the_limit();
  else {
    printf("unknown mode %s\n", mode);
    return 2;
  }
  rw_join();
  return rc;
}
