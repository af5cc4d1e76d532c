/* The descriptor table size (FDSize in /proc/self/status) of the programs a racing server starts: a
 * forked child that execs grep, a posix_spawn'd grep, a shell from system() and one from popen(). Each
 * reads its own status; without racewatch their tables are sized for the server's highest descriptor
 * (64 for a few), and racewatch's descriptors high up must not show there (a table the kernel grew for
 * them is inherited across fork and exec). Every line is the same without racewatch. */
#include <spawn.h>

extern char **environ;

int main(void) {
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.2);
  char *grep[] = {"/bin/grep", "FDSize", "/proc/self/status", NULL};
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execv(grep[0], grep);
    _exit(127);
  }
  waitpid(pid, NULL, 0);
  if (posix_spawn(&pid, grep[0], NULL, NULL, grep, environ) == 0) waitpid(pid, NULL, 0);
  fflush(stdout);
  if (system("grep FDSize /proc/self/status") != 0) printf("system failed\n");
  FILE *child = popen("grep FDSize /proc/self/status", "r");
  char line[128];
  while (child && fgets(line, sizeof line, child)) printf("popen: %s", line);
  if (child) pclose(child);
  rw_join();
  printf("done\n");
  return 0;
}
