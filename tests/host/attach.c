/* A tracer attaching in the middle of a run, as `strace -p` and a debugger's attach do: the parent forks
 * a child whose two workers compute on their own memory for 0.8 s and then race until 2.5 s; at 0.2 s the
 * parent seizes the child's main thread (PTRACE_SEIZE), passes every signal on for 0.4 s, interrupts it
 * and detaches. Prints how the child ended. Under racewatch the child pauses sampling while traced (its
 * signals would stop it for the tracer) and samples again once the tracer is gone. With argv[1] == "busy"
 * the child's main thread, the one traced, computes too until 0.8 s; the parent prints on stderr how many
 * SIGTRAP stops it saw (racewatch's sampling signals until it paused: the first is inherent). */
#include <sys/ptrace.h>

static double child_start;

__attribute__((noinline)) long at_own_work(long n) {
  volatile long own = 0;
  for (long i = 0; i < n; i++) own += i;
  return own;
}

static void *worker(void *arg) {
  while (rw_now() < child_start + 0.8) at_own_work(1000);
  rw_race_until(child_start + 2.5);
  return arg;
}

int main(int argc, char **argv) {
  int busy = argc > 1 && !strcmp(argv[1], "busy");
  pid_t pid = fork();
  if (pid == 0) {
    child_start = rw_now();
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
    while (busy && rw_now() < child_start + 0.8) at_own_work(1000);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    exit(0);
  }
  rw_sleep(0.2);
  if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) != 0) {
    printf("PTRACE_SEIZE: %s\n", rw_errname(errno));
    return 1;
  }
  int status, stopped = 0, traps = 0;
  double end = rw_now() + 0.4;
  for (;;) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid && WIFSTOPPED(status)) {
      int sig = WSTOPSIG(status);
      if (stopped) break; /* the stop our PTRACE_INTERRUPT asked for (or one with it): detach there */
      traps += !(status >> 16) && sig == SIGTRAP;
      ptrace(PTRACE_CONT, pid, NULL, (void *)(intptr_t)((status >> 16) ? 0 : sig));
    } else if (got == pid) {
      printf("child ended while traced\n");
      return 1;
    }
    if (!stopped && rw_now() >= end) {
      ptrace(PTRACE_INTERRUPT, pid, NULL, NULL);
      stopped = 1;
    }
    rw_sleep(0.001);
  }
  int sig = WSTOPSIG(status);
  ptrace(PTRACE_DETACH, pid, NULL, (void *)(intptr_t)((status >> 16) || sig == SIGTRAP ? 0 : sig));
  if (waitpid(pid, &status, 0) != pid) return 1;
  fprintf(stderr, "SIGTRAP stops seen by the tracer: %d\n", traps);
  printf("child: %s\n", WIFEXITED(status) ? (WEXITSTATUS(status) == 0 ? "exit 0" : "exit other") : "signal");
  return 0;
}
