/* The signal mask after jumps, for SIGTRAP as for any signal, while threads race: in main and in a
 * worker (argv[1] "main" or "worker"), each step printing whether SIGTRAP is blocked afterwards and
 * whether a raise(SIGTRAP) then runs the handler:
 *   restore:   sigsetjmp(env, 1) with SIGTRAP let through, SIGTRAP blocked, siglongjmp: let through
 *              again (the saved mask), and a raise runs the handler;
 *   reblock:   sigsetjmp(env, 1) with SIGTRAP blocked, unblocked, siglongjmp: blocked again, a raise
 *              waits pending (the process lives on) until unblocked;
 *   handler:   longjmp (no mask restored) out of the program's SIGTRAP handler: the handler's mask
 *              stays, SIGTRAP blocked; a raise waits until unblocked;
 *   nodefer:   the same with SA_NODEFER: SIGTRAP let through after the jump;
 *   plain:     setjmp/longjmp with SIGTRAP blocked in between: it stays blocked (no mask is saved).
 * Every line is the same without racewatch. */
#include <setjmp.h>

static sigjmp_buf env;
static jmp_buf plain_env;
static atomic_int counted;
static int rw_trap_was_blocked;

static void count(int sig) {
  (void)sig;
  atomic_fetch_add(&counted, 1);
}

static void jump_out(int sig) {
  (void)sig;
  longjmp(plain_env, 1);
}

static void set_handler(void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTRAP, &sa, NULL);
}

static int trap_blocked(void) {
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  return sigismember(&now, SIGTRAP);
}

static void trap_mask(int how) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  pthread_sigmask(how, &set, NULL);
}

/* A raise(SIGTRAP) with the counting handler: how many ran at once, and after unblocking. */
static void raise_and_count(const char *step) {
  set_handler(count, 0);
  atomic_store(&counted, 0);
  raise(SIGTRAP);
  int at_once = atomic_load(&counted);
  trap_mask(SIG_UNBLOCK);
  printf("%s: blocked after the jump %d, handler at once %d, after unblocking %d\n", step, rw_trap_was_blocked,
         at_once, atomic_load(&counted));
}

static void steps(void) {
  trap_mask(SIG_UNBLOCK);
  if (sigsetjmp(env, 1) == 0) {
    trap_mask(SIG_BLOCK);
    siglongjmp(env, 1);
  }
  rw_trap_was_blocked = trap_blocked();
  raise_and_count("restore");

  trap_mask(SIG_BLOCK);
  if (sigsetjmp(env, 1) == 0) {
    trap_mask(SIG_UNBLOCK);
    siglongjmp(env, 1);
  }
  rw_trap_was_blocked = trap_blocked();
  raise_and_count("reblock");

  for (int nodefer = 0; nodefer <= 1; nodefer++) {
    trap_mask(SIG_UNBLOCK);
    set_handler(jump_out, nodefer ? SA_NODEFER : 0);
    if (setjmp(plain_env) == 0) raise(SIGTRAP);
    rw_trap_was_blocked = trap_blocked();
    raise_and_count(nodefer ? "nodefer" : "handler");
  }

  trap_mask(SIG_UNBLOCK);
  if (setjmp(plain_env) == 0) {
    trap_mask(SIG_BLOCK);
    longjmp(plain_env, 1);
  }
  rw_trap_was_blocked = trap_blocked();
  raise_and_count("plain");
}

static void *worker(void *arg) {
  (void)arg;
  steps();
  return NULL;
}

int main(int argc, char **argv) {
  const char *where = argc > 1 ? argv[1] : "main";
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.2);
  if (!strcmp(where, "worker")) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
  } else {
    steps();
  }
  rw_join();
  printf("done\n");
  return 0;
}
