/* Case 2: SIGCHLD blocked and read through a signalfd; five children, one after another.
 *
 * With "trap": SIGTRAP and SIGUSR1 blocked in every thread from the start and read only through a signalfd,
 * as event-loop servers do; right after four workers are created (each starts and joins two short racing
 * threads of its own), main sends the process SIGUSR1 and SIGTRAP, then reads the signalfd once the workers
 * are done: exactly those two, and nothing left pending. Before (set 17 p14), the SIGTRAP could reach a
 * thread racewatch did not know yet, or no longer, and take the default action (10 runs in 30 at the debug
 * rate). */
#include <poll.h>
#include <sys/signalfd.h>

static void *trap_inner(void *arg) {
  (void)arg;
  rw_race_iterations(20000);
  return NULL;
}

static void *trap_worker(void *arg) {
  (void)arg;
  for (int round = 0; round < 3; round++) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, trap_inner, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  }
  return NULL;
}

static int trap_mode(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, trap_worker, NULL);
  kill(getpid(), SIGUSR1);
  kill(getpid(), SIGTRAP);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  struct signalfd_siginfo si;
  int trap = 0, usr1 = 0, other = 0;
  while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
    int from_us = si.ssi_code == SI_USER && si.ssi_pid == (uint32_t)getpid();
    /* A signal of racewatch's own (TRAP_PERF, 6) that fired just as racewatch stepped aside and waited on a
     * thread whose mask had become real is a limitation docs/src/guarantees.md lists ("Not yet promised");
     * it is left out of the count here, which is about the program's own signals. */
    if (si.ssi_signo == SIGTRAP && si.ssi_code == 6) continue;
    if (si.ssi_signo == SIGTRAP && from_us) trap++;
    else if (si.ssi_signo == SIGUSR1 && from_us) usr1++;
    else other++;
  }
  sigset_t pending;
  sigpending(&pending);
  printf("read: SIGTRAP %d, SIGUSR1 %d, other %d; still pending: %d\n", trap, usr1, other,
         sigismember(&pending, SIGTRAP) + sigismember(&pending, SIGUSR1));
  return 0;
}

/* With "child-trap": SIGTRAP blocked everywhere and read through a signalfd by a reader thread, while two
 * threads race; main leaves with pthread_exit (so no thread's id is the pid), and a forked child sends the
 * process SIGTRAP. The reader names the sender: the child, as without racewatch. Before (set 31 p02b), the
 * SIGTRAP that reached a racing thread was sent to the process again by kill, naming the process itself. */
static int child_trap_sfd;
static pid_t child_trap_pid;

static void *child_trap_reader(void *arg) {
  (void)arg;
  struct pollfd p = {child_trap_sfd, POLLIN, 0};
  int ready = poll(&p, 1, 5000);
  struct signalfd_siginfo si;
  if (ready != 1 || read(child_trap_sfd, &si, sizeof si) != (ssize_t)sizeof si) {
    printf("no SIGTRAP read within 5 s\n");
    return NULL;
  }
  int status;
  rw_wait_child(child_trap_pid, 3.0, &status);
  printf("read: signal %u, code %d, sent by the child: %d\n", si.ssi_signo, si.ssi_code,
         si.ssi_pid == (uint32_t)child_trap_pid);
  return NULL;
}

static void child_trap_mode(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  child_trap_sfd = signalfd(-1, &set, SFD_CLOEXEC);
  rw_start(2, 0.8, 0);
  fflush(stdout);
  child_trap_pid = fork();
  if (child_trap_pid == 0) {
    rw_sleep(0.3);
    kill(getppid(), SIGTRAP);
    _exit(0);
  }
  pthread_t reader;
  pthread_create(&reader, NULL, child_trap_reader, NULL);
  pthread_detach(reader);
  pthread_exit(NULL);
}

/* With "raise": an event loop reads SIGTRAP, SIGCHLD and SIGRTMIN from a signalfd, all blocked everywhere,
 * while two threads race; main, in 60 rounds, raises SIGTRAP, queues itself SIGRTMIN with a payload, or
 * forks a child that exits 3, in turn, and reads each back. Every read is the program's own. Before
 * (set 33 p03), once the first raised SIGTRAP had waited there with SIGTRAP blocked for real, a sample
 * of racewatch's taken in main waited beside the next one, and the program read it (code TRAP_PERF) in
 * place of one of its own, 2 to 3 runs of 5 at the debug rate. */
static int raise_mode(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGRTMIN);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC);
  rw_start(2, 30, 0);
  int trap = 0, chld = 0, rt = 0, wrong = 0, missing = 0;
  for (int i = 0; i < 60; i++) {
    if (i % 3 == 0) {
      raise(SIGTRAP);
    } else if (i % 3 == 1) {
      union sigval v = {.sival_int = 7};
      sigqueue(getpid(), SIGRTMIN, v);
    } else {
      fflush(stdout);
      if (fork() == 0) _exit(3);
    }
    struct pollfd p = {sfd, POLLIN, 0};
    struct signalfd_siginfo si;
    if (poll(&p, 1, 2000) != 1 || read(sfd, &si, sizeof si) != (ssize_t)sizeof si) {
      missing++;
      continue;
    }
    if (si.ssi_signo == SIGTRAP && i % 3 == 0 && si.ssi_code == SI_TKILL) {
      trap++;
    } else if ((int)si.ssi_signo == SIGRTMIN && i % 3 == 1 && si.ssi_int == 7) {
      rt++;
    } else if (si.ssi_signo == SIGCHLD && i % 3 == 2 && si.ssi_status == 3) {
      chld++;
      while (waitpid(-1, NULL, WNOHANG) > 0) continue;
    } else {
      wrong++;
    }
  }
  rw_stop_racing();
  rw_join();
  printf("read: SIGTRAP %d, SIGRTMIN %d, SIGCHLD %d, out of turn %d, missing %d\n", trap, rt, chld, wrong, missing);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "trap")) return trap_mode();
  if (argc > 1 && !strcmp(argv[1], "raise")) return raise_mode();
  if (argc > 1 && !strcmp(argv[1], "child-trap")) child_trap_mode();
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
