/* racewatch's reporter thread exists only while it has work: a process that reports no race never has
 * it, and one that reported races loses it again a second after the last. Two workers run while main
 * counts the process's threads the ways a program cannot be lied to: getdents64 of /proc/self/task
 * itself, and Threads: of its status read by another process (a child). argv[1]:
 *   quiet           the workers compute on their own memory for 1.2 s; prints the largest counts seen.
 *   race-then-quiet the workers race for 0.6 s, then compute on their own memory for 2.4 s; prints the
 *                   largest counts seen in the last 0.3 s.
 * It also prints whether its maps grew by about two lines per worker (a stack and its guard page), as
 * they do without racewatch: racewatch's stacks share one mapping, and the module files a report read
 * are let go with the reporter thread. */
#include <dirent.h>

static atomic_int phase; /* 0: racing, 1: quiet, 2: done */

__attribute__((noinline)) long rod_own_work(long n) {
  volatile long own = 0;
  for (long i = 0; i < n; i++) own += i;
  return own;
}

static void *worker(void *arg) {
  for (int p; (p = atomic_load_explicit(&phase, memory_order_relaxed)) != 2;) {
    if (p == 0)
      rw_race_iterations(1000);
    else
      rod_own_work(1000);
  }
  return arg;
}

/* Entries of /proc/self/task other than . and .., listed with the raw system call. */
static int raw_tasks(void) {
  char buf[4096];
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int n = 0;
  long got;
  while (fd >= 0 && (got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
    for (long at = 0; at < got;) {
      struct dirent64 *entry = (struct dirent64 *)(buf + at);
      if (entry->d_name[0] != '.') n++;
      at += entry->d_reclen;
    }
  if (fd >= 0) close(fd);
  return n;
}

/* Threads: of this process's status, as a child process reads it (its exit status). */
static int threads_seen_by_a_child(void) {
  pid_t parent = getpid(), pid = fork();
  if (pid == 0) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)parent);
    _exit((int)rw_status_field(path, "Threads") & 0xff);
  }
  int status = 0;
  if (pid < 0 || rw_wait_child(pid, 10, &status) < 0 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

static int maps_lines(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  int n = 0;
  for (int c; f && (c = fgetc(f)) != EOF;) n += c == '\n';
  if (f) fclose(f);
  return n;
}

int main(int argc, char **argv) {
  int racing = argc > 1 && strcmp(argv[1], "race-then-quiet") == 0;
  atomic_store(&phase, racing ? 0 : 1);
  int lines_before = maps_lines();
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, NULL);
  if (racing) {
    rw_sleep(0.6);
    atomic_store(&phase, 1);
    rw_sleep(2.1);
  }
  int tasks = 0, threads = 0;
  double end = rw_now() + (racing ? 0.3 : 1.2);
  while (rw_now() < end) {
    int n = raw_tasks(), m = threads_seen_by_a_child();
    if (n > tasks) tasks = n;
    if (m > threads) threads = m;
    rw_sleep(0.02);
  }
  int grew = maps_lines() - lines_before;
  atomic_store(&phase, 2);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("largest task count: %d\nthreads another process saw: %d\n", tasks, threads);
  /* Two thread stacks, each with its guard page. */
  printf("maps grew by 2 per thread, give or take 8: %d\n", grew >= -4 && grew <= 12);
  return 0;
}
