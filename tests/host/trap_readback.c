/* sigaction(SIGTRAP, NULL, &old) reads back what the kernel would report, like any other signal: the
 * program installs the same handler for SIGTRAP and SIGUSR1 (before and while its threads race) and
 * compares what each reads back (flags, restorer, mask). */

static void on_signal(int sig) { (void)sig; }

static void compare(const char *when) {
  struct sigaction trap, usr1;
  sigaction(SIGTRAP, NULL, &trap);
  sigaction(SIGUSR1, NULL, &usr1);
  printf("%s: flags equal: %d, restorer equal: %d, handler equal: %d\n", when, trap.sa_flags == usr1.sa_flags,
         trap.sa_restorer == usr1.sa_restorer, trap.sa_handler == usr1.sa_handler);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTRAP, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  compare("before threads");
  rw_start(2, 0.5, 0);
  sa.sa_flags = SA_NODEFER;
  sigaction(SIGTRAP, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  compare("while racing");
  sa.sa_handler = SIG_DFL;
  sa.sa_flags = 0;
  sigaction(SIGTRAP, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  compare("back to default");
  rw_join();
  return 0;
}
