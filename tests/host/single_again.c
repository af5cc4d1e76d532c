/* A tool that runs a threaded phase, joins every thread, and then needs the process to be
 * single-threaded again: unshare(CLONE_NEWUSER) fails with EINVAL in a multithreaded process, and
 * /proc/self/task lists every thread (with its name). Three rounds, so the second and third phases
 * start threads again after the process was single-threaded. argv[1] "churn": 200 short rounds first
 * (two workers started and joined, as a thread churn does: racewatch keeps its reporter through them);
 * "churn-raw": the same, and the unshare made as glibc's syscall(SYS_unshare). */
#include <dirent.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>

static int tasks(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

static int threads_line(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
  if (f) fclose(f);
  return n;
}

/* The threads' count once the kernel has let the joined ones go: a join returns when a thread's id is
 * cleared, a moment before the kernel takes it out of the listing (a loaded machine showed 2 without
 * racewatch). Waits up to 100 ms for one thread, as a tool that needs a single-threaded process would;
 * one of racewatch's that outlived the join would still be counted then. */
static int tasks_after_join(void) {
  int n = tasks();
  for (int waited = 0; n != 1 && waited < 100; waited++) {
    usleep(1000);
    n = tasks();
  }
  return n;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strncmp(mode, "churn", 5)) {
    for (int round = 0; round < 200; round++) {
      rw_start(2, 0.002, 0);
      rw_join();
    }
    printf("after the churn: tasks %d, Threads: %d\n", tasks_after_join(), threads_line());
  }
  for (int round = 1; round <= 3; round++) {
    rw_start(2, 0.4, 0);
    rw_join();
    printf("round %d: tasks after join %d\n", round, tasks_after_join());
  }
  int r = strcmp(mode, "churn-raw") ? unshare(CLONE_NEWUSER) : syscall(SYS_unshare, CLONE_NEWUSER);
  printf("unshare(CLONE_NEWUSER) after the threads: %s\n", r == 0 ? "ok" : rw_errname(errno));
  return 0;
}
