/* Child processes started the usual ways while threads race: system(), posix_spawn(), popen().
 * Their output and statuses are the program's stdout. */
#include <spawn.h>
extern char **environ;

int main(void) {
  rw_start(2, 1.0, 0);
  for (int i = 0; i < 3; i++) {
    int status = system("echo from system");
    rw_print_status("system", status);
    pid_t pid;
    char *args[] = {"/bin/sh", "-c", "echo from posix_spawn; exit 3", NULL};
    if (posix_spawn(&pid, "/bin/sh", NULL, NULL, args, environ) == 0 && waitpid(pid, &status, 0) == pid) {
      rw_print_status("posix_spawn", status);
    }
    FILE *pipe = popen("echo from popen", "r");
    char line[64] = "";
    if (pipe && fgets(line, sizeof line, pipe)) printf("popen read: %s", line);
    if (pipe) rw_print_status("pclose", pclose(pipe));
  }
  rw_join();
  return 0;
}
