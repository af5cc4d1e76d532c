/* Case 2: SIGCHLD blocked and read through a signalfd; five children, one after another. */
#include <poll.h>
#include <sys/signalfd.h>

int main(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC);
  if (sfd < 0) {
    printf("signalfd: %s\n", rw_errname(errno));
    return 1;
  }
  rw_start(2, 1.0, 0);
  rw_sleep(0.2);
  int got = 0;
  for (int i = 0; i < 5; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      rw_race_iterations(100000);
      _exit(10 + i);
    }
    struct pollfd p = {sfd, POLLIN, 0};
    int ready = poll(&p, 1, 2000);
    if (ready == 1) {
      struct signalfd_siginfo si;
      ssize_t n = read(sfd, &si, sizeof si);
      if (n == (ssize_t)sizeof si && si.ssi_signo == SIGCHLD && si.ssi_pid == (uint32_t)pid) {
        got++;
        printf("child %d: SIGCHLD code %d status %d\n", i, si.ssi_code, si.ssi_status);
      } else {
        printf("child %d: bad signalfd read (%zd bytes, signo %u)\n", i, n, n > 0 ? si.ssi_signo : 0);
      }
    } else {
      printf("child %d: no SIGCHLD on the signalfd within 2 s\n", i);
    }
    int status;
    if (rw_wait_child(pid, 3.0, &status) != 0) printf("child %d: hung\n", i);
    char what[32];
    snprintf(what, sizeof what, "child %d", i);
    rw_print_status(what, status);
    rw_sleep(0.1);
  }
  rw_join();
  printf("SIGCHLD read: %d\n", got);
  return 0;
}
