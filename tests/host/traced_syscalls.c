/* A system-call tracer (strace-like): while two threads race, the parent forks a child that asks to be
 * traced and stops itself, then does a fixed workload of ordinary file work: open /dev/null, 20 getppid
 * through syscall(), 5 writes, dup, dup2 onto 9, fcntl(F_DUPFD), close of each, an open of a file under
 * /tmp and its unlink, then exit_group. The parent follows it with PTRACE_SYSCALL and prints how many
 * system calls of each kind the child entered (set 41 p14: racewatch's own getpid calls around an open and
 * a close showed as 4 calls the program never made). The tracer is the process under racewatch, and so
 * is the traced child. */
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>

static void workload(void) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/rw-traced-%d", (int)getpid());
  int fd = open("/dev/null", O_WRONLY);
  for (int i = 0; i < 20; i++) syscall(SYS_getppid);
  for (int i = 0; i < 5; i++)
    if (write(fd, "x", 1) != 1) _exit(4);
  int copy = dup(fd), nine = dup2(fd, 9), high = fcntl(fd, F_DUPFD, 20);
  close(high);
  close(nine);
  close(copy);
  close(fd);
  int file = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  close(file);
  unlink(path);
  syscall(SYS_exit_group, 0);
}

int main(void) {
  rw_start(2, 2.0, 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    ptrace(PTRACE_TRACEME, 0, NULL, NULL);
    raise(SIGSTOP);
    workload();
  }
  int status;
  if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) return 1;
  ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)(PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL));
  /* Entries by number; a syscall stop alternates entry and exit. */
  static long entered[512];
  int in_call = 0, other_stops = 0;
  for (;;) {
    if (ptrace(PTRACE_SYSCALL, pid, NULL, NULL) != 0) break;
    if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status)) break;
    if (WSTOPSIG(status) != (SIGTRAP | 0x80)) {
      other_stops++;
      continue;
    }
    if (!in_call) {
      long nr = ptrace(PTRACE_PEEKUSER, pid, (void *)offsetof(struct user_regs_struct, orig_rax), NULL);
      if (nr >= 0 && nr < 512) entered[nr]++;
    }
    in_call = !in_call;
  }
  rw_join();
  printf("child: %s %d\n", WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  long total = 0;
  for (int nr = 0; nr < 512; nr++) total += entered[nr];
  printf("system calls entered: %ld; other stops: %d\n", total, other_stops);
  for (int nr = 0; nr < 512; nr++)
    if (entered[nr]) printf("  call %d: %ld\n", nr, entered[nr]);
  return 0;
}
