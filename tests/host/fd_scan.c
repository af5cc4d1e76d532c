/* A server's descriptor habits while its threads race: it counts its descriptors with an `fcntl(F_GETFD)`
 * scan up to its limit, closes every number with `close` (counting the successes), `closefrom` and
 * `close_range`, `dup`s every number, then parks a pipe at the 48 highest numbers of its range with
 * `dup2` and writes through each. Every count must be what it is without racewatch (racewatch's
 * descriptors are not there for these calls), and detection goes on after all of it: the racing threads
 * switch to other racy functions (rw_vary_races) once the descriptors are done, and a race between
 * those is reported. The limit is set to 4200/4200 first, so that the runtime's descriptors sit in the
 * program's range when the process may not raise its hard limit. */
#include <dirent.h>
#include <poll.h>

static int scan(int limit) {
  int n = 0;
  for (int fd = 0; fd < limit; fd++)
    if (fcntl(fd, F_GETFD) >= 0) n++;
  return n;
}

/* The other ways a program looks at its descriptors: fstat, statx, poll and readlink of /proc/self/fd/<n>
 * for every number, the size of its /proc/self/fd directory (the kernel's count), its fdinfo listing, and
 * the table size in its status. */
static void views(const char *when, int limit) {
  int by_fstat = 0, by_poll = 0, by_statx = 0, by_link = 0;
  struct stat st;
  struct statx stx;
  for (int fd = 0; fd < limit; fd++) {
    char link[64], target[256];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    if (readlink(link, target, sizeof target) >= 0) by_link++;
    if (fstat(fd, &st) == 0) by_fstat++;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &stx) == 0) by_statx++;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 0) >= 0 && !(p.revents & POLLNVAL)) by_poll++;
  }
  long long size = stat("/proc/self/fd", &st) == 0 ? (long long)st.st_size : -1;
  int fdinfo = 0;
  DIR *d = opendir("/proc/self/fdinfo");
  for (struct dirent *e; d && (e = readdir(d));) fdinfo += e->d_name[0] != '.';
  if (d) closedir(d);
  char line[256], table[64] = "?";
  FILE *f = fopen("/proc/self/status", "r");
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "FDSize:", 7)) snprintf(table, sizeof table, "%s", line + 8);
  if (f) fclose(f);
  table[strcspn(table, "\n")] = 0;
  printf("%s: fstat %d, statx %d, poll %d, readlink %d, fd dir size %lld, fdinfo %d, FDSize %s\n", when, by_fstat,
         by_statx, by_poll, by_link, size, fdinfo, table);
}

/* A shell's way of parking descriptors high: F_DUPFD from 40 below the limit, 40 times, then one more.
 * Each gets the next number, in order, as without racewatch. */
static void park_with_dupfd(int limit) {
  int in_order = 0, last = limit - 41;
  for (int i = 0; i < 40; i++) {
    int fd = fcntl(0, F_DUPFD, limit - 40);
    if (fd == last + 1) in_order++;
    if (fd >= 0) last = fd;
  }
  int more = fcntl(0, F_DUPFD, limit - 40);
  printf("F_DUPFD high: %d in order, one more: %s\n", in_order, more < 0 ? rw_errname(errno) : "made");
  close_range(limit - 40, limit - 1, 0);
}

int main(void) {
  struct rlimit rl = {4200, 4200};
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) printf("setrlimit: %s\n", rw_errname(errno));
  int limit = (int)rl.rlim_cur;
  rw_start(2, 2.5, 0);
  rw_race_until(rw_now() + 0.2);
  printf("scan: %d\n", scan(limit));
  views("views", limit);
  park_with_dupfd(limit);
  views("views after F_DUPFD", limit);
  int closed = 0;
  for (int fd = 3; fd < limit; fd++)
    if (close(fd) == 0) closed++;
  printf("closed: %d\n", closed);
  closefrom(3);
  printf("close_range: %d\n", close_range(3, ~0U, 0));
  int duped = 0;
  for (int fd = 3; fd < limit; fd++) {
    int d = dup(fd);
    if (d >= 0) {
      duped++;
      close(d);
    }
  }
  printf("dup: %d\n", duped);
  printf("scan after closing: %d\n", scan(limit));
  int p[2];
  if (pipe(p) != 0) return 1;
  fcntl(p[0], F_SETFL, O_NONBLOCK);
  int parked = 0, written = 0;
  for (int i = 1; i <= 48; i++)
    if (dup2(p[1], limit - i) == limit - i) parked++;
  for (int i = 1; i <= 48; i++)
    if (write(limit - i, "x", 1) == 1) written++;
  char buf[64];
  ssize_t got = read(p[0], buf, sizeof buf);
  printf("parked: %d, written: %d, read: %zd\n", parked, written, got);
  printf("scan with parked: %d\n", scan(limit));
  close_range(3, ~0U, 0);
  printf("scan at the end: %d\n", scan(limit));
  rw_vary_races();
  rw_join();
  printf("done\n");
  return 0;
}
