/* Signal masks set where the interposers do not see them, while threads race. argv[1]:
 *   "exec":        SIGTRAP blocked (sigprocmask), threads race, execve of itself: the new image (argv[1]
 *                  "child") prints whether SIGTRAP is blocked (it is: the mask survives exec);
 *   "attr_sigmask": threads created with pthread_attr_setsigmask_np(every signal) race and poll
 *                  sigtimedwait(every signal, 10 ms): nothing is sent to the process, nothing may be dequeued;
 *   "contexts":    main switches with swapcontext between two contexts that race, one with SIGTRAP blocked
 *                  (in its uc_sigmask) and one without, while 2 threads race;
 *   "raw_sigprocmask": 2 racing threads block SIGTRAP with the raw rt_sigprocmask system call, main races.
 *   In both, where SIGTRAP is blocked sigpending and sigtimedwait(SIGTRAP, 0) find nothing. */
#include <ucontext.h>

static int trap_blocked(void) {
  sigset_t cur;
  sigprocmask(SIG_SETMASK, NULL, &cur);
  return sigismember(&cur, SIGTRAP);
}

static sigset_t trap_set(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  return set;
}

/* 1 if SIGTRAP is pending or can be dequeued (it must not be: nobody sends it). */
static int trap_found(void) {
  sigset_t pending;
  sigpending(&pending);
  int found = sigismember(&pending, SIGTRAP);
  sigset_t set = trap_set();
  struct timespec zero = {0, 0};
  siginfo_t info;
  if (sigtimedwait(&set, &info, &zero) == SIGTRAP) found = 1;
  return found;
}

/* ---- exec ---- */

static int exec_self(char **argv) {
  sigset_t set = trap_set();
  sigprocmask(SIG_BLOCK, &set, NULL);
  rw_start(2, 30.0, 0);
  rw_race_until(rw_now() + 0.5);
  printf("exec\n");
  fflush(stdout);
  char *args[] = {argv[0], "child", NULL};
  extern char **environ;
  execve("/proc/self/exe", args, environ);
  printf("execve: %s\n", rw_errname(errno));
  return 1;
}

/* ---- attr_sigmask ---- */

static atomic_int dequeued;
static atomic_int first_sig;

static void *poller(void *arg) {
  (void)arg;
  sigset_t all;
  sigfillset(&all);
  double end = rw_now() + 1.0;
  while (rw_now() < end) {
    rw_race_iterations(20000);
    siginfo_t info;
    struct timespec ts = {0, 10000000};
    int sig = sigtimedwait(&all, &info, &ts);
    if (sig > 0 && atomic_fetch_add(&dequeued, 1) == 0) atomic_store(&first_sig, sig);
  }
  sigset_t cur;
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  int blocked = 0;
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP && (s < 32 || s >= SIGRTMIN)) blocked += sigismember(&cur, s) == 1;
  return (void *)(intptr_t)blocked;
}

static int attr_sigmask(void) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  sigset_t all;
  sigfillset(&all);
  int err = pthread_attr_setsigmask_np(&attr, &all);
  if (err) printf("pthread_attr_setsigmask_np: %s\n", rw_errname(err));
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], &attr, poller, NULL);
  pthread_attr_destroy(&attr);
  int all_blocked = 1, expected = 0;
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP && (s < 32 || s >= SIGRTMIN)) expected++;
  for (int i = 0; i < 2; i++) {
    void *blocked;
    pthread_join(t[i], &blocked);
    if ((intptr_t)blocked != expected) all_blocked = 0;
  }
  printf("every signal blocked in the threads: %d\n", all_blocked);
  printf("signals dequeued: %d", atomic_load(&dequeued));
  if (atomic_load(&dequeued)) printf(" (first: %d)", atomic_load(&first_sig));
  printf("\n");
  return 0;
}

/* ---- contexts ---- */

static ucontext_t main_ctx, ctx[2];
static atomic_int found_in_blocked, wrong_mask;
static double contexts_end;

static void context_body(int which) {
  for (;;) {
    rw_race_iterations(20000);
    if (trap_blocked() != (which == 0)) atomic_fetch_add(&wrong_mask, 1);
    if (which == 0 && trap_found()) atomic_fetch_add(&found_in_blocked, 1);
    swapcontext(&ctx[which], which == 0 ? &ctx[1] : &main_ctx);
  }
}

static void *raw_blocker(void *arg) {
  (void)arg;
  sigset_t set = trap_set();
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, NULL, 8);
  double end = rw_now() + 1.0;
  while (rw_now() < end) {
    rw_race_iterations(20000);
    if (trap_found()) atomic_fetch_add(&found_in_blocked, 1);
  }
  return NULL;
}

static int raw_sigprocmask(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, raw_blocker, NULL);
  rw_race_until(rw_now() + 1.0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("SIGTRAP found where blocked: %d\n", atomic_load(&found_in_blocked));
  return 0;
}

static int contexts(void) {
  rw_start(2, 1.0, 0);
  static char stacks[2][65536];
  for (int i = 0; i < 2; i++) {
    getcontext(&ctx[i]);
    ctx[i].uc_stack.ss_sp = stacks[i];
    ctx[i].uc_stack.ss_size = sizeof stacks[i];
    ctx[i].uc_link = &main_ctx;
    sigemptyset(&ctx[i].uc_sigmask);
    if (i == 0) sigaddset(&ctx[i].uc_sigmask, SIGTRAP);
    makecontext(&ctx[i], (void (*)(void))context_body, 1, i);
  }
  contexts_end = rw_now() + 1.0;
  int switches = 0;
  while (rw_now() < contexts_end) {
    /* main -> 0 (SIGTRAP blocked) -> 1 (not blocked) -> main */
    swapcontext(&main_ctx, &ctx[0]);
    switches++;
  }
  rw_join();
  printf("context switches: at least 10: %d\n", switches >= 10);
  printf("wrong masks: %d\n", atomic_load(&wrong_mask));
  printf("SIGTRAP found where blocked: %d\n", atomic_load(&found_in_blocked));
  printf("main blocks SIGTRAP: %d\n", trap_blocked());
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "child") == 0) {
    printf("child: SIGTRAP blocked: %d\n", trap_blocked());
    return 0;
  }
  if (strcmp(mode, "exec") == 0) return exec_self(argv);
  if (strcmp(mode, "attr_sigmask") == 0) return attr_sigmask();
  if (strcmp(mode, "contexts") == 0) return contexts();
  if (strcmp(mode, "raw_sigprocmask") == 0) return raw_sigprocmask();
  printf("unknown mode %s\n", mode);
  return 2;
}
