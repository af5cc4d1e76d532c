/* The environment is the program's: racewatch's variables (the runtime in LD_PRELOAD, RACEWATCH_OPTIONS)
 * are read before main and taken out again, so environ, getenv and /proc/self/environ list what the
 * program was started with, in its order; its children (system(), posix_spawn(), execv(), popen(),
 * after a setenv too) see the environment they would see without racewatch, and run under racewatch.
 *
 *   environ            prints what it sees, then starts the children, each printing what it sees; the
 *                      last, started by system(), races for 1.5 s (a report from it shows that it ran
 *                      under racewatch)
 *   environ child W    one child, started by W
 *   environ racer      the racing child
 *   environ concurrent three threads call system() 8 times each at once ("exit N": each status checked)
 *                      and popen() 4 times each, while two threads race; then what main sees. Before
 *                      (held-out set 18 p18), concurrent calls swapped each other's environment arrays:
 *                      one command lost its exit status in 11 runs of 30.
 */
#include <spawn.h>
extern char **environ;

static unsigned long digest(const char *bytes, size_t len, unsigned long h) {
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)bytes[i]) * 1099511628211ul;
  return h;
}

static void show(const char *who) {
  unsigned long h = 14695981039346656037ul;
  int n = 0;
  for (char **e = environ; *e; e++, n++) h = digest(*e, strlen(*e) + 1, h);
  static char text[1 << 17];
  size_t len = 0;
  FILE *f = fopen("/proc/self/environ", "r");
  if (f) {
    len = fread(text, 1, sizeof text, f);
    fclose(f);
  }
  printf("%s: %d variables, environ %016lx, /proc/self/environ %zu bytes %016lx, LD_PRELOAD %s, RACEWATCH_OPTIONS %s\n",
         who, n, h, len, digest(text, len, 14695981039346656037ul), getenv("LD_PRELOAD") ? "set" : "unset",
         getenv("RACEWATCH_OPTIONS") ? "set" : "unset");
  fflush(stdout);
}

static void *system_caller(void *arg) {
  long id = (long)arg, right = 0;
  for (int i = 0; i < 8; i++) {
    char command[64];
    snprintf(command, sizeof command, "exit %ld", id * 10 + i);
    int status = system(command);
    right += WIFEXITED(status) && WEXITSTATUS(status) == id * 10 + i;
  }
  for (int i = 0; i < 4; i++) {
    FILE *p = popen("echo $((6 * 7))", "r");
    char line[32] = "";
    if (p && fgets(line, sizeof line, p)) right += !strcmp(line, "42\n");
    if (p) pclose(p);
  }
  return (void *)right;
}

static int concurrent(void) {
  rw_start(2, 30.0, 0);
  pthread_t t[3];
  for (long i = 0; i < 3; i++) pthread_create(&t[i], NULL, system_caller, (void *)(i + 1));
  for (int i = 0; i < 3; i++) {
    void *right;
    pthread_join(t[i], &right);
    printf("thread %d: %ld of 12 commands right\n", i, (long)right);
  }
  rw_stop_racing();
  rw_join();
  show("main after the calls");
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "concurrent")) return concurrent();
  if (argc > 2 && !strcmp(argv[1], "child")) {
    show(argv[2]);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "racer")) {
    rw_start(2, 1.5, 0);
    rw_join();
    printf("racer done\n");
    return 0;
  }
  rw_start(1, 0.2, 0);
  rw_join();
  show("program");
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "'%s' child system", self);
  rw_print_status("system", system(cmd));
  pid_t pid;
  int status;
  char *spawned[] = {self, "child", "posix_spawn", NULL};
  if (posix_spawn(&pid, self, NULL, NULL, spawned, environ) == 0 && waitpid(pid, &status, 0) == pid)
    rw_print_status("posix_spawn", status);
  setenv("SET_BY_THE_PROGRAM", "1", 1);
  if ((pid = fork()) == 0) {
    char *args[] = {self, "child", "execv after setenv", NULL};
    execv(self, args);
    _exit(127);
  }
  if (waitpid(pid, &status, 0) == pid) rw_print_status("execv", status);
  snprintf(cmd, sizeof cmd, "'%s' child popen", self);
  FILE *pipe = popen(cmd, "r");
  char line[512];
  while (pipe && fgets(line, sizeof line, pipe)) fputs(line, stdout);
  if (pipe) rw_print_status("pclose", pclose(pipe));
  show("program after its children");
  snprintf(cmd, sizeof cmd, "'%s' racer", self);
  rw_print_status("racer", system(cmd));
  return 0;
}
