/* Memory budgets as a program sets and reads them: RLIMIT_AS and RLIMIT_DATA, absolute (a supervisor's
 * setrlimit, `ulimit -v`) and relative to the program's own VmSize, counted in 64 KiB mappings until the
 * kernel refuses; the limits read back (getrlimit, prlimit, /proc/self/limits) and as children see them
 * (fork + exec of a shell, posix_spawn, system). Racing threads run meanwhile. */
#include <spawn.h>
#include <sys/mman.h>

extern char **environ;

#define CHUNK (64ul << 10)

static unsigned long statm_pages(int field) {
  unsigned long v[7] = {0};
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%lu %lu %lu %lu %lu %lu %lu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) != 7)
    printf("cannot read statm\n");
  if (f) fclose(f);
  return v[field] * 4096ul;
}

/* 64 KiB private writable mappings until one fails; all unmapped again. */
static int count_chunks(void) {
  static void *maps[100000];
  int n = 0;
  while (n < 100000) {
    void *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) break;
    maps[n++] = p;
  }
  for (int i = 0; i < n; i++) munmap(maps[i], CHUNK);
  return n;
}

/* In a forked child: sets `resource` to `limit` (or the program's own figure + `limit` when relative) and
 * counts chunks twice (racewatch may map between the rounds). */
static void budget(const char *name, int resource, unsigned long limit, int relative) {
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    if (relative) limit += statm_pages(resource == RLIMIT_AS ? 0 : 5);
    struct rlimit rl = {limit, limit};
    if (setrlimit(resource, &rl)) printf("%s: setrlimit: %s\n", name, rw_errname(errno));
    int first = count_chunks();
    int second = count_chunks();
    printf("%s: %d then %d chunks of 64 KiB\n", name, first, second);
    fflush(stdout);
    _exit(0);
  }
  int status;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status)) printf("%s: child status %#x\n", name, status);
}

static void show_limits(const char *who) {
  struct rlimit as, data, old;
  getrlimit(RLIMIT_AS, &as);
  getrlimit(RLIMIT_DATA, &data);
  prlimit(0, RLIMIT_AS, NULL, &old);
  printf("%s: getrlimit AS %lu/%lu DATA %lu/%lu prlimit AS %lu/%lu\n", who, (unsigned long)as.rlim_cur,
         (unsigned long)as.rlim_max, (unsigned long)data.rlim_cur, (unsigned long)data.rlim_max,
         (unsigned long)old.rlim_cur, (unsigned long)old.rlim_max);
  FILE *f = fopen("/proc/self/limits", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Max address space", 17) || !strncmp(line, "Max data size", 13)) printf("%s: %s", who, line);
  if (f) fclose(f);
}

static const char *SHELL_LINES = "echo \"$0: ulimit -v $(ulimit -v) -Hv $(ulimit -Hv) -d $(ulimit -d)\"; "
                                 "grep -E 'Max (address|data)' /proc/self/limits | sed \"s/^/$0: /\"";

static void children(void) {
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c", SHELL_LINES, "exec", (char *)NULL);
    _exit(127);
  }
  int status;
  waitpid(child, &status, 0);
  char *argv[] = {"sh", "-c", (char *)SHELL_LINES, "spawn", NULL};
  pid_t spawned;
  if (posix_spawn(&spawned, "/bin/sh", NULL, NULL, argv, environ) == 0) waitpid(spawned, &status, 0);
  char command[512];
  snprintf(command, sizeof command, "sh -c '%s' system", "echo \"$0: ulimit -v $(ulimit -v) -Hv $(ulimit -Hv)\"");
  fflush(stdout);
  if (system(command) != 0) printf("system failed\n");
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  rw_start(2, 1.0, 0);
  budget("AS 256 MiB", RLIMIT_AS, 256ul << 20, 0);
  budget("DATA 64 MiB", RLIMIT_DATA, 64ul << 20, 0);
  budget("AS VmSize + 64 MiB", RLIMIT_AS, 64ul << 20, 1);
  budget("DATA VmData + 32 MiB", RLIMIT_DATA, 32ul << 20, 1);
  struct rlimit as = {1ul << 30, 2ul << 30}, data = {512ul << 20, RLIM_INFINITY};
  printf("setrlimit AS: %s\n", setrlimit(RLIMIT_AS, &as) ? rw_errname(errno) : "ok");
  printf("setrlimit DATA: %s\n", setrlimit(RLIMIT_DATA, &data) ? rw_errname(errno) : "ok");
  show_limits("main");
  struct rlimit higher = {1ul << 30, 3ul << 30}, wrong = {2ul << 30, 1ul << 30};
  printf("raise hard AS: %s\n", setrlimit(RLIMIT_AS, &higher) ? rw_errname(errno) : "ok");
  printf("soft above hard: %s\n", setrlimit(RLIMIT_AS, &wrong) ? rw_errname(errno) : "ok");
  children();
  rw_race_until(rw_now() + 0.5);
  rw_join();
  printf("done\n");
  return 0;
}
