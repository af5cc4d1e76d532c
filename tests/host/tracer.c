/* A tracer: the parent forks a child that asks to be traced (PTRACE_TRACEME), stops itself with SIGSTOP,
 * then races with 2 threads for about 1 s and exits 0. The parent sets PTRACE_O_TRACECLONE (the threads are
 * traced too) and PTRACE_O_EXITKILL, and continues every stop, passing signals through the way a debugger
 * that is not interested in them does; it counts the signal-delivery stops by signal and prints them
 * (without racewatch: none besides the first SIGSTOP and the new threads' SIGSTOPs), and the clone events
 * and new threads' first stops. A process under racewatch is the child (the parent never starts a
 * thread). */
#include <sys/ptrace.h>

static void child(void) {
  if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) {
    printf("PTRACE_TRACEME: %s\n", rw_errname(errno));
    fflush(stdout);
    _exit(3);
  }
  raise(SIGSTOP);
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 1.0);
  rw_join();
  exit(0);
}

int main(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) child();
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status) || WSTOPSIG(status) != SIGSTOP) {
    rw_print_status("first stop", status);
    return 1;
  }
  if (ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)(PTRACE_O_TRACECLONE | PTRACE_O_EXITKILL)) != 0) {
    printf("PTRACE_SETOPTIONS: %s\n", rw_errname(errno));
    return 1;
  }
  ptrace(PTRACE_CONT, pid, NULL, NULL);
  int counts[65] = {0}, clones = 0, thread_stops = 0;
  int child_status = -1;
  double end = rw_now() + 20.0;
  while (child_status == -1) {
    pid_t got = waitpid(-1, &status, __WALL | WNOHANG);
    if (got == 0) {
      if (rw_now() > end) {
        printf("child hung (killed after 20 s)\n");
        kill(pid, SIGKILL);
        waitpid(pid, &status, __WALL);
        child_status = status;
        break;
      }
      rw_sleep(0.0005);
      continue;
    }
    if (got < 0) {
      printf("waitpid: %s\n", rw_errname(errno));
      break;
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      if (got == pid) child_status = status;
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    int sig = WSTOPSIG(status);
    int event = status >> 16;
    if (event == PTRACE_EVENT_CLONE) {
      clones++;
      ptrace(PTRACE_CONT, got, NULL, NULL);
    } else if (event != 0) {
      ptrace(PTRACE_CONT, got, NULL, NULL);
    } else if (sig == SIGSTOP && got != pid) {
      /* A new thread's first stop (auto-attached). */
      thread_stops++;
      ptrace(PTRACE_CONT, got, NULL, NULL);
    } else {
      if (sig > 0 && sig <= 64) counts[sig]++;
      ptrace(PTRACE_CONT, got, NULL, (void *)(long)sig);
    }
  }
  rw_print_status("child", child_status);
  /* A process traced from its start gets no thread of racewatch's: exactly the program's two clones. */
  printf("clone events: %d, new threads' first stops: %d\n", clones, thread_stops);
  int any = 0;
  for (int s = 1; s <= 64; s++)
    if (counts[s]) {
      printf("signal-delivery stops for signal %d: %d\n", s, counts[s]);
      any = 1;
    }
  if (!any) printf("signal-delivery stops: none\n");
  return 0;
}
