/* SIGTRAPs the program raises itself, with the dispositions a program can leave, while threads race.
 * argv[1] = "raise":     default disposition, raise(SIGTRAP): the process dies of SIGTRAP.
 * argv[1] = "int3":      default disposition, an int3 instruction: the same.
 * argv[1] = "int3-ignored", "int3-blocked", "int3-blocked-handler": SIGTRAP ignored, or blocked (with
 *                        or without a handler), then an int3: the kernel forces the trap an instruction
 *                        raised, the process dies of SIGTRAP all the same.
 * argv[1] = "resethand": an SA_RESETHAND handler runs once, then the default kills on the second raise.
 * argv[1] = "blocked":   SIGTRAP blocked, raised: it waits pending, sigwaitinfo takes it (si_code as sent), and
 *                        the mask still reports SIGTRAP blocked. */
static atomic_int handled;

static void on_trap(int sig) {
  (void)sig;
  atomic_fetch_add(&handled, 1);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "raise";
  rw_start(2, 0.6, 0);
  rw_race_until(rw_now() + 0.3);
  if (strcmp(mode, "resethand") == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_trap;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGTRAP, &sa, NULL);
    raise(SIGTRAP);
    struct sigaction old;
    sigaction(SIGTRAP, NULL, &old);
    printf("handled: %d, reset to default: %d\n", atomic_load(&handled), old.sa_handler == SIG_DFL);
  } else if (strcmp(mode, "blocked") == 0) {
    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    pthread_sigmask(SIG_BLOCK, &trap, NULL);
    raise(SIGTRAP);
    sigset_t pending;
    sigpending(&pending);
    printf("pending: %d\n", sigismember(&pending, SIGTRAP));
    siginfo_t info;
    int sig = sigwaitinfo(&trap, &info);
    printf("sigwaitinfo: %d, si_code: %d\n", sig, info.si_code);
    sigset_t now;
    pthread_sigmask(SIG_SETMASK, NULL, &now);
    printf("still blocked: %d\n", sigismember(&now, SIGTRAP));
    rw_join();
    return 0;
  }
  rw_join();
  if (strncmp(mode, "int3-", 5) == 0) {
    if (strcmp(mode, "int3-ignored") == 0) {
      signal(SIGTRAP, SIG_IGN);
    } else {
      if (strcmp(mode, "int3-blocked-handler") == 0) signal(SIGTRAP, on_trap);
      sigset_t trap;
      sigemptyset(&trap);
      sigaddset(&trap, SIGTRAP);
      pthread_sigmask(SIG_BLOCK, &trap, NULL);
    }
    mode = "int3";
  }
  printf("raising\n");
  if (strcmp(mode, "int3") == 0) {
    __asm__ volatile("int3");
  } else {
    raise(SIGTRAP);
  }
  printf("survived\n");
  return 0;
}
