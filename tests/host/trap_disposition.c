/* The program's SIGTRAP disposition honoured in full, while threads race. argv[1]:
 *   "no_restart":  a handler without SA_RESTART; a thread blocked in read() on an empty pipe gets
 *                  pthread_kill(SIGTRAP): read returns -1 with EINTR (a byte is written after 3 s, in case);
 *   "ignored":     SIGTRAP set to SIG_IGN; kill(), pthread_kill(), tgkill() and a raw tgkill system call
 *                  send SIGTRAP at a thread in a 1 s nanosleep, which is not interrupted (returns 0);
 *   "ignored_exec": SIGTRAP set to SIG_IGN while threads race; a child started by posix_spawn, one by
 *                  fork + execv and one by system() each report SIGTRAP ignored (sigaction and
 *                  /proc/self/status SigIgn) and survive raise(SIGTRAP);
 *   "unknown_flags": SIGTRAP and SIGUSR1 handlers set with SA_UNSUPPORTED and an undefined bit (0x200),
 *                  which the kernel clears: read back without them, as a program probing for flag
 *                  support expects;
 *   "exec_from_handler": a racing worker's SA_ONSTACK SIGUSR2 handler execs this program again, which
 *                  prints whether it started with SIGTRAP blocked (it must not: nobody blocked it);
 *   "no_onstack":  handlers with and without SA_ONSTACK in a thread that has an alternate stack: only the
 *                  SA_ONSTACK one runs on it (sigaltstack's SS_ONSTACK and a local's address);
 *   "sigtimedwait": SIGTRAP blocked in every thread, kill(getpid(), SIGTRAP): the thread waiting in
 *                  sigtimedwait for it gets it;
 *   "sigqueue":    the same with sigqueue(getpid(), SIGTRAP, 4242): the waiting thread gets the payload;
 *   "int3_altstack": an SA_ONSTACK SIGUSR1 handler on a 16 KiB alternate stack executes int3; the program's
 *                  SIGTRAP handler runs and the program continues;
 *   "wait_rounds <call> <waiter>": SIGTRAP and SIGUSR2 blocked in every thread; <waiter> ("main" or
 *                  "worker") takes 300 SIGTRAPs sent to the process one at a time, with <call>
 *                  ("sigtimedwait", "sigwaitinfo", "sigwait" or "raw", the rt_sigtimedwait system call),
 *                  while threads race; the sender (a thread, or every fifth time a forked child) waits for
 *                  each to arrive, then ends the rounds with SIGUSR2. Prints what arrived, what looked
 *                  wrong (a siginfo from another sender, a payload out of order), EINTRs and timeouts;
 *   "wait_interrupted <call> <by>": a worker waits for a blocked SIGTRAP with <call> while threads race;
 *                  main interrupts it (<by>: "usr1", a SIGUSR1 handler; "setxid", setuid(getuid()), whose
 *                  glibc signal runs in every thread), then sends SIGTRAP: the first wait ends with EINTR
 *                  (sigwait goes on by itself), the next one takes SIGTRAP;
 *   "raise_in_handler": a SIGTRAP handler (no SA_NODEFER) does racy work and raises SIGTRAP again, 3 times
 *                  per outer raise, 100 outer raises while two threads race: each nested one waits until
 *                  the handler returns, and the handler runs 400 times;
 *   "ignore_pending": main blocks SIGTRAP while two threads race, raises it (pending on main), then sets it
 *                  to SIG_IGN, which discards it: sigpending and SigPnd show it before and not after;
 *   "ping <call>":  main sends SIGTRAP to a busy racing worker 300 times, one at a time, with <call>
 *                  ("pthread_kill", "tgkill" or "tkill", the raw system call), and waits up to 0.5 s for
 *                  the worker's handler to count each; prints how many were handled, with a siginfo that
 *                  was not the kernel's for the call or on another thread, and lost. Main blocks SIGTRAP;
 *                  only the worker lets it through. With <call> "both", each round also sends the process
 *                  SIGTRAP (kill) just before the pthread_kill: the kernel keeps the two in the process's
 *                  and the thread's queues, and the worker's handler runs twice. */
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static atomic_int traps;
static atomic_int in_call;
static int trap_pipe[2];

static void on_trap(int sig) {
  (void)sig;
  atomic_fetch_add(&traps, 1);
}

static void set_handler(int sig, void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

static void set_trap(void (*handler)(int), int flags) { set_handler(SIGTRAP, handler, flags); }

/* The set of `a` and `b` (0: none). */
static sigset_t signal_set(int a, int b) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, a);
  if (b) sigaddset(&set, b);
  return set;
}

/* Blocks `a` and `b` (0: none) in this thread, and so in the threads it creates. */
static void block(int a, int b) {
  sigset_t set = signal_set(a, b);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* ---- no_restart ---- */

static void *reader(void *arg) {
  (void)arg;
  char c;
  atomic_store(&in_call, 1);
  ssize_t n = read(trap_pipe[0], &c, 1);
  int err = errno;
  atomic_store(&in_call, 2);
  if (n < 0)
    printf("read: -1 %s\n", rw_errname(err));
  else
    printf("read: %zd byte(s)\n", n);
  return NULL;
}

static int no_restart(void) {
  set_trap(on_trap, 0);
  if (pipe(trap_pipe) != 0) return 1;
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);
  while (atomic_load(&in_call) == 0) rw_sleep(0.001);
  rw_race_until(rw_now() + 0.2);
  /* Again every 50 ms until read returns (a signal sent before the thread was in read() interrupts nothing). */
  double give_up = rw_now() + 3.0;
  while (atomic_load(&in_call) == 1 && rw_now() < give_up) {
    pthread_kill(t, SIGTRAP);
    rw_race_until(rw_now() + 0.05);
  }
  if (atomic_load(&in_call) == 1) rw_write_all(trap_pipe[1], "x", 1);
  pthread_join(t, NULL);
  printf("handler ran: %s\n", atomic_load(&traps) > 0 ? "yes" : "no");
  return 0;
}

/* ---- ignored ---- */

static atomic_int sleeper_id;

static void *sleeper(void *arg) {
  (void)arg;
  atomic_store(&sleeper_id, gettid());
  struct timespec ts = {1, 0}, rem;
  atomic_store(&in_call, 1);
  int rc = nanosleep(&ts, &rem);
  int err = errno;
  atomic_store(&in_call, 2);
  printf("nanosleep: %d%s\n", rc, rc ? (err == EINTR ? " EINTR" : rw_errname(err)) : "");
  return NULL;
}

static int ignored(void) {
  set_trap(SIG_IGN, 0);
  pthread_t t;
  pthread_create(&t, NULL, sleeper, NULL);
  while (atomic_load(&in_call) == 0) rw_sleep(0.001);
  rw_race_until(rw_now() + 0.1);
  pid_t sleeper_tid = 0;
  while ((sleeper_tid = atomic_load(&sleeper_id)) == 0) rw_sleep(0.001);
  for (int i = 0; i < 5 && atomic_load(&in_call) == 1; i++) {
    pthread_kill(t, SIGTRAP);
    kill(getpid(), SIGTRAP);
    tgkill(getpid(), sleeper_tid, SIGTRAP);
    syscall(SYS_tgkill, getpid(), sleeper_tid, SIGTRAP);
    rw_race_until(rw_now() + 0.05);
  }
  pthread_join(t, NULL);
  struct sigaction old;
  sigaction(SIGTRAP, NULL, &old);
  printf("SIGTRAP ignored: %d\n", old.sa_handler == SIG_IGN);
  return 0;
}

/* ---- ignored_exec ---- */

/* In a started child: what it inherited. */
static int report_inherited(const char *how) {
  struct sigaction old;
  sigaction(SIGTRAP, NULL, &old);
  unsigned long ignored = 0;
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "SigIgn:", 7) == 0) ignored = strtoul(line + 7, NULL, 16);
  if (f) fclose(f);
  raise(SIGTRAP);
  printf("%s child: SIGTRAP ignored %d, SigIgn has it %d, survived raise\n", how, old.sa_handler == SIG_IGN,
         (int)((ignored >> (SIGTRAP - 1)) & 1));
  return 0;
}

static int ignored_exec(const char *self) {
  set_trap(SIG_IGN, 0);
  rw_race_until(rw_now() + 0.1);
  char *spawn_argv[] = {(char *)self, "inherited", "posix_spawn", NULL};
  pid_t pid;
  int status = -1;
  if (posix_spawn(&pid, self, NULL, NULL, spawn_argv, environ) == 0) waitpid(pid, &status, 0);
  rw_print_status("posix_spawn child", status);
  pid = fork();
  if (pid == 0) {
    char *exec_argv[] = {(char *)self, "inherited", "fork+execv", NULL};
    execv(self, exec_argv);
    _exit(127);
  }
  waitpid(pid, &status, 0);
  rw_print_status("fork+execv child", status);
  char command[512];
  snprintf(command, sizeof command, "'%s' inherited system", self);
  status = system(command);
  rw_print_status("system child", status);
  return 0;
}

/* ---- unknown_flags ---- */

#ifndef SA_UNSUPPORTED
#define SA_UNSUPPORTED 0x400
#endif

static void on_probe(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  (void)info;
  (void)ctx;
}

static int unknown_flags(void) {
  int sigs[] = {SIGTRAP, SIGUSR1};
  for (int i = 0; i < 2; i++) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_probe;
    sa.sa_flags = SA_SIGINFO | SA_UNSUPPORTED | 0x200;
    sigaction(sigs[i], &sa, NULL);
    sigaction(sigs[i], NULL, &old);
    printf("signal %d: unknown flags cleared %d, SA_SIGINFO kept %d\n", sigs[i], (old.sa_flags & 0x600) == 0,
           (old.sa_flags & SA_SIGINFO) != 0);
  }
  return 0;
}

/* ---- exec_from_handler ---- */

static const char *self_path;

static void on_usr2_exec(int sig) {
  (void)sig;
  char *again[] = {(char *)self_path, "exec_child", NULL};
  execv(self_path, again);
  _exit(127);
}

static void *exec_worker(void *arg) {
  (void)arg;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr2_exec;
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGUSR2, &sa, NULL);
  atomic_store(&in_call, 1);
  rw_race_until(rw_now() + 5);
  return NULL;
}

static int exec_from_handler(void) {
  pthread_t t;
  pthread_create(&t, NULL, exec_worker, NULL);
  while (atomic_load(&in_call) == 0) rw_sleep(0.001);
  rw_sleep(0.05);
  pthread_kill(t, SIGUSR2);
  pthread_join(t, NULL);
  printf("not reached\n");
  return 1;
}

static int exec_child(void) {
  sigset_t mask;
  sigprocmask(SIG_BLOCK, NULL, &mask);
  printf("exec'd from a handler: SIGTRAP blocked %d, SIGUSR2 blocked %d\n", sigismember(&mask, SIGTRAP),
         sigismember(&mask, SIGUSR2));
  return 0;
}

/* ---- no_onstack ---- */

static char *alt_low;
static size_t alt_size;
static atomic_int on_alt_flag, on_alt_addr;

static void on_trap_where(int sig) {
  (void)sig;
  stack_t ss;
  sigaltstack(NULL, &ss);
  char here;
  atomic_store(&on_alt_flag, (ss.ss_flags & SS_ONSTACK) != 0);
  atomic_store(&on_alt_addr, &here >= alt_low && &here < alt_low + alt_size);
  atomic_fetch_add(&traps, 1);
}

static void *where(void *arg) {
  (void)arg;
  alt_size = 65536;
  alt_low = malloc(alt_size);
  stack_t ss = {.ss_sp = alt_low, .ss_size = alt_size, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  const int flags[2] = {0, SA_ONSTACK};
  const char *names[2] = {"without SA_ONSTACK", "with SA_ONSTACK"};
  for (int i = 0; i < 2; i++) {
    set_trap(on_trap_where, flags[i] | SA_RESTART);
    for (int k = 0; k < 3; k++) {
      rw_race_until(rw_now() + 0.1);
      raise(SIGTRAP);
      printf("handler %s: SS_ONSTACK %d, on the alternate stack %d\n", names[i], atomic_load(&on_alt_flag),
             atomic_load(&on_alt_addr));
    }
  }
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  free(alt_low);
  return NULL;
}

static int no_onstack(void) {
  pthread_t t;
  pthread_create(&t, NULL, where, NULL);
  pthread_join(t, NULL);
  printf("handler ran: %d\n", atomic_load(&traps));
  return 0;
}

/* ---- sigtimedwait ---- */

static void *waiter(void *arg) {
  (void)arg;
  sigset_t set = signal_set(SIGTRAP, 0);
  siginfo_t info;
  struct timespec ts = {3, 0};
  atomic_store(&in_call, 1);
  int sig = sigtimedwait(&set, &info, &ts);
  int err = errno;
  if (sig < 0)
    printf("sigtimedwait: -1 %s\n", err == EAGAIN ? "EAGAIN (timed out)" : rw_errname(err));
  else
    printf("sigtimedwait: %d, si_code SI_USER: %d, SI_QUEUE: %d, value %d, from us: %d\n", sig,
           info.si_code == SI_USER, info.si_code == SI_QUEUE, info.si_code == SI_QUEUE ? info.si_value.sival_int : 0,
           info.si_pid == getpid());
  return NULL;
}

static int timedwait(int queued) {
  set_trap(on_trap, SA_RESTART);
  block(SIGTRAP, 0);
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.2);
  pthread_t t;
  pthread_create(&t, NULL, waiter, NULL);
  while (atomic_load(&in_call) == 0) rw_sleep(0.001);
  rw_race_until(rw_now() + 0.2);
  if (queued) {
    union sigval value = {.sival_int = 4242};
    sigqueue(getpid(), SIGTRAP, value);
  } else {
    kill(getpid(), SIGTRAP);
  }
  pthread_join(t, NULL);
  rw_join();
  sigset_t pending;
  sigpending(&pending);
  printf("handler ran: %d, still pending: %d\n", atomic_load(&traps), sigismember(&pending, SIGTRAP));
  return 0;
}

/* ---- wait_rounds ---- */

enum { ROUNDS = 300 };
static atomic_int arrived;
static const char *wait_call;
static char waited[160];
static int lost;

/* One wait for `set` with `call`; -1 with errno on failure. */
static int wait_once(const sigset_t *set, siginfo_t *info) {
  struct timespec ts = {2, 0};
  if (strcmp(wait_call, "sigtimedwait") == 0) return sigtimedwait(set, info, &ts);
  if (strcmp(wait_call, "sigwaitinfo") == 0) return sigwaitinfo(set, info);
  if (strcmp(wait_call, "raw") == 0) return (int)syscall(SYS_rt_sigtimedwait, set, info, &ts, 8);
  int sig = 0;
  int err = sigwait(set, &sig);
  info->si_code = SI_USER - 100; /* sigwait gives no siginfo */
  if (err == 0) return sig;
  errno = err;
  return -1;
}

static void *round_waiter(void *arg) {
  (void)arg;
  sigset_t set = signal_set(SIGTRAP, SIGUSR2);
  int wrong = 0, eintr = 0, timeouts = 0, other = 0;
  for (;;) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    int sig = wait_once(&set, &info);
    if (sig == SIGUSR2) break;
    if (sig < 0) {
      if (errno == EINTR) eintr++;
      else if (errno == EAGAIN) timeouts++;
      else other++;
      continue;
    }
    int n = atomic_load(&arrived);
    int queued = n % 2 == 1;
    if (info.si_code != SI_USER - 100) {
      if (queued && (info.si_code != SI_QUEUE || info.si_value.sival_int != n)) wrong++;
      if (!queued && info.si_code != SI_USER) wrong++;
      if (n % 5 != 4 && info.si_pid != getpid()) wrong++;
    }
    atomic_store(&arrived, n + 1);
  }
  snprintf(waited, sizeof waited, "%s: %d of %d arrived, %d wrong, %d EINTR, %d timed out, %d other errors", wait_call,
           atomic_load(&arrived), ROUNDS, wrong, eintr, timeouts, other);
  return NULL;
}

/* Round `i`: SIGTRAP to this process, by kill (even) or with payload `i` (odd); every fifth from a child. */
static void send_round(int i) {
  pid_t self = getpid();
  if (i % 5 == 4) {
    pid_t child = fork();
    if (child == 0) {
      if (i % 2) sigqueue(self, SIGTRAP, (union sigval){.sival_int = i});
      else kill(self, SIGTRAP);
      _exit(0);
    }
    waitpid(child, NULL, 0);
  } else if (i % 2) {
    sigqueue(self, SIGTRAP, (union sigval){.sival_int = i});
  } else {
    kill(self, SIGTRAP);
  }
}

static void *round_sender(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    send_round(i);
    double until = rw_now() + 1.0;
    while (atomic_load(&arrived) <= i && rw_now() < until) rw_sleep(0.0002);
    if (atomic_load(&arrived) <= i) {
      lost++;
      atomic_store(&arrived, i + 1); /* the next round's checks stay in step */
    }
  }
  kill(getpid(), SIGUSR2);
  return NULL;
}

static int wait_rounds(const char *call, const char *waiter) {
  wait_call = call;
  set_trap(on_trap, SA_RESTART);
  block(SIGTRAP, SIGUSR2);
  rw_start(2, 1.5, 0);
  pthread_t sender, worker;
  if (strcmp(waiter, "main") == 0) {
    pthread_create(&sender, NULL, round_sender, NULL);
    round_waiter(NULL);
    pthread_join(sender, NULL);
  } else {
    pthread_create(&worker, NULL, round_waiter, NULL);
    round_sender(NULL);
    pthread_join(worker, NULL);
  }
  rw_join();
  sigset_t pending;
  sigpending(&pending);
  printf("%s\nsender: %d lost\n", waited, lost);
  printf("handler ran: %d, still pending: %d\n", atomic_load(&traps), sigismember(&pending, SIGTRAP));
  return 0;
}

/* ---- wait_interrupted ---- */

static atomic_int usr1_seen;

static void on_usr1_count(int sig) {
  (void)sig;
  atomic_fetch_add(&usr1_seen, 1);
}

static void *interrupted_waiter(void *arg) {
  (void)arg;
  sigset_t set = signal_set(SIGTRAP, 0);
  for (int i = 0; i < 2; i++) {
    siginfo_t info;
    atomic_store(&in_call, 1);
    int sig = wait_once(&set, &info);
    int err = errno;
    if (sig < 0) {
      printf("wait %d: -1 %s\n", i, rw_errname(err));
    } else {
      printf("wait %d: %d\n", i, sig);
      break;
    }
  }
  return NULL;
}

static int wait_interrupted(const char *call, const char *by) {
  wait_call = call;
  set_handler(SIGUSR1, on_usr1_count, SA_RESTART);
  block(SIGTRAP, 0);
  rw_start(2, 1.0, 0);
  pthread_t t;
  pthread_create(&t, NULL, interrupted_waiter, NULL);
  while (atomic_load(&in_call) == 0) rw_sleep(0.001);
  rw_race_until(rw_now() + 0.3);
  if (strcmp(by, "usr1") == 0)
    pthread_kill(t, SIGUSR1);
  else if (setuid(getuid()) != 0)
    printf("setuid: %s\n", rw_errname(errno));
  rw_race_until(rw_now() + 0.3);
  kill(getpid(), SIGTRAP);
  pthread_join(t, NULL);
  rw_join();
  sigset_t pending;
  sigpending(&pending);
  printf("SIGUSR1 handled: %d, still pending: %d\n", atomic_load(&usr1_seen), sigismember(&pending, SIGTRAP));
  return 0;
}

/* ---- int3_altstack ---- */

static atomic_int usr1;

static void on_usr1(int sig) {
  (void)sig;
  rw_race_iterations(1000);
  __asm__ volatile("int3");
  rw_race_iterations(1000);
  atomic_fetch_add(&usr1, 1);
}

static void *int3_thread(void *arg) {
  (void)arg;
  size_t size = 16384;
  void *alt = malloc(size);
  stack_t ss = {.ss_sp = alt, .ss_size = size, .ss_flags = 0};
  sigaltstack(&ss, NULL);
  for (int i = 0; i < 50; i++) {
    rw_race_until(rw_now() + 0.015);
    raise(SIGUSR1);
  }
  stack_t off = {.ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  free(alt);
  return NULL;
}

static int int3_altstack(void) {
  set_trap(on_trap, SA_RESTART);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, int3_thread, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("SIGUSR1 handled: %d, SIGTRAP handled: %d\n", atomic_load(&usr1), atomic_load(&traps));
  return 0;
}

/* ---- ping ---- */

static atomic_int pinged, ping_wrong, ping_tid;
static int ping_both;

static void on_ping(int sig, siginfo_t *info, void *ctx) {
  (void)sig, (void)ctx;
  int code_ok = info->si_code == SI_TKILL || (ping_both && info->si_code == SI_USER);
  int ours = code_ok && info->si_pid == getpid() && info->si_uid == getuid();
  if (!ours || (int)syscall(SYS_gettid) != atomic_load(&ping_tid)) atomic_fetch_add(&ping_wrong, 1);
  atomic_fetch_add(&pinged, 1);
}

static void *ping_target(void *arg) {
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  pthread_sigmask(SIG_UNBLOCK, &trap, NULL);
  atomic_store(&ping_tid, (int)syscall(SYS_gettid));
  rw_race_until(rw_now() + 120);
  return arg;
}

static int ping(const char *call) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_ping;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
  /* Only the target lets SIGTRAP through (it unblocks it itself), so a SIGTRAP sent to the process goes
   * there too. */
  ping_both = strcmp(call, "both") == 0;
  sigset_t trap;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &trap, NULL);
  rw_start(1, 120, 0);
  pthread_t target;
  pthread_create(&target, NULL, ping_target, NULL);
  while (atomic_load(&ping_tid) == 0) rw_sleep(0.001);
  int tid = atomic_load(&ping_tid), lost = 0;
  for (int i = 0; i < ROUNDS; i++) {
    int before = atomic_load(&pinged);
    if (ping_both) kill(getpid(), SIGTRAP);
    if (strcmp(call, "pthread_kill") == 0 || ping_both) pthread_kill(target, SIGTRAP);
    else if (strcmp(call, "tgkill") == 0) tgkill(getpid(), tid, SIGTRAP);
    else syscall(SYS_tkill, tid, SIGTRAP);
    int expected = before + 1 + ping_both;
    double until = rw_now() + 0.5;
    while (atomic_load(&pinged) < expected && rw_now() < until) rw_sleep(0.0001);
    if (atomic_load(&pinged) < expected) lost += expected - atomic_load(&pinged);
  }
  rw_stop_racing();
  pthread_join(target, NULL);
  rw_join();
  printf("%s: %d sent, %d handled, %d wrong, %d lost\n", call, ROUNDS * (1 + ping_both), atomic_load(&pinged),
         atomic_load(&ping_wrong), lost);
  return 0;
}

/* ---- raise_in_handler ---- */

static int nested_budget;
static atomic_int nested_calls;

static void on_trap_raising(int sig) {
  (void)sig;
  atomic_fetch_add(&nested_calls, 1);
  rw_race_iterations(3000); /* racy work in the handler, where SIGTRAP is blocked */
  if (nested_budget > 0) {
    nested_budget--;
    raise(SIGTRAP); /* pending until the handler returns, then it runs again */
  }
}

static int raise_in_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_trap_raising;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
  rw_start(2, 30, 0);
  for (int i = 0; i < 100; i++) {
    nested_budget = 3;
    raise(SIGTRAP);
    rw_race_iterations(3000);
  }
  rw_stop_racing();
  rw_join();
  printf("raised 100, 3 more from each handler: handler ran %d times\n", atomic_load(&nested_calls));
  return 0;
}

/* ---- ignore_pending ---- */

/* Whether /proc/thread-self/status shows SIGTRAP in this thread's SigPnd. */
static int trap_in_sigpnd(void) {
  FILE *f = fopen("/proc/thread-self/status", "r");
  char line[256];
  unsigned long long bits = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "SigPnd: %llx", &bits) == 1) break;
  if (f) fclose(f);
  return (bits >> (SIGTRAP - 1)) & 1;
}

static int ignore_pending(void) {
  sigset_t trap, pending;
  sigemptyset(&trap);
  sigaddset(&trap, SIGTRAP);
  pthread_sigmask(SIG_BLOCK, &trap, NULL);
  rw_start(2, 0.3, 0);
  rw_race_until(rw_now() + 0.05);
  raise(SIGTRAP);
  sigpending(&pending);
  printf("raised while blocked: pending %d, SigPnd %d\n", sigismember(&pending, SIGTRAP), trap_in_sigpnd());
  signal(SIGTRAP, SIG_IGN);
  sigpending(&pending);
  printf("after SIG_IGN: pending %d, SigPnd %d\n", sigismember(&pending, SIGTRAP), trap_in_sigpnd());
  rw_join();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "ignore_pending") == 0) return ignore_pending();
  if (strcmp(mode, "raise_in_handler") == 0) return raise_in_handler();
  if (strcmp(mode, "sigtimedwait") == 0) return timedwait(0);
  if (strcmp(mode, "sigqueue") == 0) return timedwait(1);
  if (strcmp(mode, "wait_rounds") == 0 && argc > 3) return wait_rounds(argv[2], argv[3]);
  if (strcmp(mode, "wait_interrupted") == 0 && argc > 3) return wait_interrupted(argv[2], argv[3]);
  if (strcmp(mode, "ping") == 0 && argc > 2) return ping(argv[2]);
  if (strcmp(mode, "inherited") == 0) return report_inherited(argc > 2 ? argv[2] : "");
  if (strcmp(mode, "exec_child") == 0) return exec_child();
  self_path = argv[0];
  rw_start(2, 1.0, 0);
  rw_sleep(0.05);
  int rc;
  if (strcmp(mode, "no_restart") == 0)
    rc = no_restart();
  else if (strcmp(mode, "ignored") == 0)
    rc = ignored();
  else if (strcmp(mode, "unknown_flags") == 0)
    rc = unknown_flags();
  else if (strcmp(mode, "exec_from_handler") == 0)
    rc = exec_from_handler();
  else if (strcmp(mode, "ignored_exec") == 0)
    rc = ignored_exec(argv[0]);
  else if (strcmp(mode, "no_onstack") == 0)
    rc = no_onstack();
  else if (strcmp(mode, "int3_altstack") == 0)
    rc = int3_altstack();
  else {
    printf("unknown mode %s\n", mode);
    return 2;
  }
  rw_join();
  return rc;
}
