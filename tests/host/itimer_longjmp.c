/* Case 4: ITIMER_REAL every 50 ms; the SIGALRM handler siglongjmps out of racy work in main, 20 times.
 * The workers block SIGALRM, so it lands on main. */
#include <setjmp.h>
#include <sys/time.h>

static sigjmp_buf env;

static void on_alarm(int sig) {
  (void)sig;
  siglongjmp(env, 1);
}

int main(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  rw_start(2, 30.0, 0);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  volatile int jumps = 0;
  double start = rw_now();
  while (jumps < 20) {
    if (sigsetjmp(env, 1) == 0) {
      struct itimerval it = {{0, 0}, {0, 50000}};
      setitimer(ITIMER_REAL, &it, NULL);
      while (rw_now() - start < 20) rw_race_iterations(1000);
      printf("no SIGALRM within 20 s\n");
      break;
    } else {
      jumps = jumps + 1;
    }
  }
  rw_stop_racing();
  rw_join();
  printf("jumps: %d\n", jumps);
  return 0;
}
