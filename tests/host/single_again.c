/* A tool that runs a threaded phase, joins every thread, and then needs the process to be
 * single-threaded again: unshare(CLONE_NEWUSER) fails with EINVAL in a multithreaded process, and
 * /proc/self/task lists every thread (with its name). Three rounds, so the second and third phases
 * start threads again after the process was single-threaded. */
#include <dirent.h>
#include <sched.h>

static int tasks(void) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}

int main(void) {
  for (int round = 1; round <= 3; round++) {
    rw_start(2, 0.4, 0);
    rw_join();
    printf("round %d: tasks after join %d\n", round, tasks());
  }
  int r = unshare(CLONE_NEWUSER);
  printf("unshare(CLONE_NEWUSER) after the threads: %s\n", r == 0 ? "ok" : rw_errname(errno));
  return 0;
}
