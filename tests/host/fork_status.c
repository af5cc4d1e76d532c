/* A racing parent forks a child that reads its own signal state from /proc/self/status (as `ps s`
 * does), as a supervisor's worker logs it at start, then raises SIGTRAP with its disposition left at
 * SIG_DFL (killed by it, as without racewatch). */
#include <sys/resource.h>
static void print_status_line(const char *who, const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, strlen(field))) printf("%s %s", who, line);
  if (f) fclose(f);
}

int main(void) {
  rw_start(2, 1.0, 0);
  rw_sleep(0.3);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    print_status_line("child", "SigBlk:");
    print_status_line("child", "SigCgt:");
    fflush(stdout);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    raise(SIGTRAP);
    _exit(0);
  }
  int status = 0;
  if (rw_wait_child(pid, 5.0, &status) != 0)
    printf("child hung\n");
  else
    rw_print_status("child", status);
  rw_join();
  printf("done\n");
  return 0;
}
