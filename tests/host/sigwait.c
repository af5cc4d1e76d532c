/* Case 1: SIGTERM blocked, sent to the process with kill(), collected with sigwait().
 * argv[1] = "before": single-threaded, collect SIGTERM, then race.
 * argv[1] = "after":  race first (threads inherit the mask), then send and collect in main. */
static void collect_sigterm(void) {
  if (kill(getpid(), SIGTERM) != 0) printf("kill: %s\n", rw_errname(errno));
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  int err = sigwait(&set, &sig);
  printf("sigwait: %s, signal %d\n", err ? rw_errname(err) : "ok", sig);
  fflush(stdout);
}

int main(int argc, char **argv) {
  int after = argc > 1 && strcmp(argv[1], "after") == 0;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, NULL);
  if (!after) collect_sigterm();
  rw_start(2, 1.0, 0);
  if (after) {
    rw_sleep(0.3);
    collect_sigterm();
  }
  rw_race_until(rw_now() + 0.3);
  rw_join();
  sigset_t pending;
  sigpending(&pending);
  printf("SIGTERM still pending: %d\n", sigismember(&pending, SIGTERM));
  printf("done\n");
  return 0;
}
