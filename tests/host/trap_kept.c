/* A SIGTRAP sent to the process while every thread blocks it waits, pending for the process, until a thread
 * lets it through, while threads race. argv[1]:
 *   "unblock":    main sends it (kill); a worker that blocked it too unblocks it later: the handler runs in
 *                 that worker, with the kill's siginfo;
 *   "sigsuspend": main sends it, then waits in sigsuspend with a mask that lets it through: the handler
 *                 runs there and sigsuspend returns EINTR;
 *   "sigsuspend_from_child": the same, sent by a forked child: the handler reads the child's pid;
 *   "from_child": a forked child sends it (sigqueue, payload 77); main takes it with sigwaitinfo: the
 *                 child's pid and payload;
 *   "fork":       main sends it, then forks: the child starts with nothing pending, the parent keeps it;
 *   "ignore":     main sends it, then sets SIGTRAP to SIG_IGN: it is discarded (nothing pending; a handler
 *                 installed and SIGTRAP unblocked afterwards does not run);
 *   "exec":       main sends it, then execs this program ("exec_child"), which finds it pending and takes
 *                 it with sigwaitinfo.
 * Each prints what it saw; every line is the same without racewatch. */
#include <sys/wait.h>

static atomic_int handled;
static atomic_int handled_tid;
static atomic_int handled_code;
static atomic_int handled_pid;

static void on_trap(int sig, siginfo_t *info, void *ctx) {
  (void)sig;
  (void)ctx;
  atomic_store(&handled_tid, (int)gettid());
  atomic_store(&handled_code, info->si_code);
  atomic_store(&handled_pid, info->si_pid);
  atomic_fetch_add(&handled, 1);
}

static void set_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_trap;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
}

static sigset_t trap_set(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  return set;
}

static int trap_pending(void) {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGTRAP);
}

/* ---- unblock ---- */

static atomic_int may_unblock;
static atomic_int unblocker_tid;

static void *unblocker(void *arg) {
  (void)arg;
  atomic_store(&unblocker_tid, (int)gettid());
  while (!atomic_load(&may_unblock)) rw_race_iterations(1000);
  sigset_t set = trap_set();
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  rw_race_iterations(1000);
  return NULL;
}

static int unblock(void) {
  pthread_t t;
  pthread_create(&t, NULL, unblocker, NULL);
  rw_race_until(rw_now() + 0.2);
  kill(getpid(), SIGTRAP);
  rw_race_until(rw_now() + 0.2);
  printf("pending before: %d, handled before: %d\n", trap_pending(), atomic_load(&handled));
  atomic_store(&may_unblock, 1);
  pthread_join(t, NULL);
  printf("handled: %d, in the thread that unblocked it: %d, SI_USER from us: %d\n", atomic_load(&handled),
         atomic_load(&handled_tid) == atomic_load(&unblocker_tid),
         atomic_load(&handled_code) == SI_USER && atomic_load(&handled_pid) == getpid());
  printf("still pending: %d\n", trap_pending());
  return 0;
}

/* ---- sigsuspend ---- */

/* Sends the process SIGTRAP from a forked child (sigqueue, payload `value`); returns the child's pid. */
static pid_t send_from_child(int value) {
  pid_t parent = getpid();
  pid_t child = fork();
  if (child == 0) {
    sigqueue(parent, SIGTRAP, (union sigval){.sival_int = value});
    _exit(0);
  }
  waitpid(child, NULL, 0);
  return child;
}

static int suspend(int from_child) {
  pid_t sender = from_child ? send_from_child(78) : getpid();
  if (!from_child) kill(getpid(), SIGTRAP);
  rw_race_until(rw_now() + 0.2);
  printf("pending before: %d\n", trap_pending());
  sigset_t none;
  sigemptyset(&none);
  int rc = sigsuspend(&none);
  printf("sigsuspend: %d %s, handled: %d in main: %d, from the sender: %d\n", rc, rw_errname(errno),
         atomic_load(&handled), atomic_load(&handled_tid) == getpid(), atomic_load(&handled_pid) == sender);
  printf("still pending: %d\n", trap_pending());
  return 0;
}

/* ---- from_child ---- */

static int from_child(void) {
  pid_t child = send_from_child(77);
  rw_race_until(rw_now() + 0.2);
  printf("pending before: %d\n", trap_pending());
  sigset_t set = trap_set();
  siginfo_t info;
  int sig = sigwaitinfo(&set, &info);
  printf("sigwaitinfo: %d, from the child: %d, SI_QUEUE: %d, value %d\n", sig, info.si_pid == child,
         info.si_code == SI_QUEUE, info.si_value.sival_int);
  printf("handled: %d, still pending: %d\n", atomic_load(&handled), trap_pending());
  return 0;
}

/* ---- fork ---- */

static int forked(void) {
  kill(getpid(), SIGTRAP);
  rw_race_until(rw_now() + 0.2);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    printf("child: pending %d\n", trap_pending());
    fflush(stdout);
    _exit(0);
  }
  waitpid(child, NULL, 0);
  printf("parent: pending %d\n", trap_pending());
  return 0;
}

/* ---- ignore ---- */

static int ignore(void) {
  kill(getpid(), SIGTRAP);
  rw_race_until(rw_now() + 0.2);
  printf("pending before: %d\n", trap_pending());
  signal(SIGTRAP, SIG_IGN);
  printf("pending once ignored: %d\n", trap_pending());
  set_handler();
  sigset_t set = trap_set();
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  rw_race_until(rw_now() + 0.1);
  printf("handled: %d\n", atomic_load(&handled));
  return 0;
}

/* ---- exec ---- */

static int exec_child(void) {
  printf("after exec: pending %d\n", trap_pending());
  sigset_t set = trap_set();
  siginfo_t info;
  struct timespec ts = {1, 0};
  int sig = sigtimedwait(&set, &info, &ts);
  printf("after exec: sigtimedwait %d, SI_USER: %d\n", sig, info.si_code == SI_USER);
  return 0;
}

static int exec_self(const char *self) {
  kill(getpid(), SIGTRAP);
  rw_race_until(rw_now() + 0.2);
  printf("pending before: %d\n", trap_pending());
  fflush(stdout);
  rw_stop_racing();
  rw_join();
  execl(self, self, "exec_child", (char *)NULL);
  printf("execl: %s\n", rw_errname(errno));
  return 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "exec_child") == 0) return exec_child();
  set_handler();
  sigset_t set = trap_set();
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.1);
  int rc;
  if (strcmp(mode, "unblock") == 0)
    rc = unblock();
  else if (strcmp(mode, "sigsuspend") == 0)
    rc = suspend(0);
  else if (strcmp(mode, "sigsuspend_from_child") == 0)
    rc = suspend(1);
  else if (strcmp(mode, "from_child") == 0)
    rc = from_child();
  else if (strcmp(mode, "fork") == 0)
    rc = forked();
  else if (strcmp(mode, "ignore") == 0)
    rc = ignore();
  else if (strcmp(mode, "exec") == 0)
    return exec_self(argv[0]);
  else {
    printf("unknown mode %s\n", mode);
    return 2;
  }
  rw_join();
  return rc;
}
