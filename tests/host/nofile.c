/* Case 15: how many descriptors the program can open under RLIMIT_NOFILE 16.
 * argv[1] = "before":  setrlimit({16,16}) while single-threaded, count, then race;
 *           "after":   race, setrlimit({16,16}), count while racing;
 *           "inherit": the limit comes from the shell (ulimit -n 16); count while racing. */
static void count_opens(void) {
  int fds[64], n = 0, err = 0;
  while (n < 64) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      err = errno;
      break;
    }
    fds[n++] = fd;
  }
  printf("opened %d descriptors, then %s\n", n, err ? rw_errname(err) : "stopped");
  for (int i = 0; i < n; i++) close(fds[i]);
}

static void limit(void) {
  struct rlimit rl = {16, 16};
  printf("setrlimit: %s\n", setrlimit(RLIMIT_NOFILE, &rl) == 0 ? "ok" : rw_errname(errno));
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "before";
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (strcmp(mode, "inherit") == 0) printf("RLIMIT_NOFILE %ld/%ld\n", (long)rl.rlim_cur, (long)rl.rlim_max);
  if (strcmp(mode, "before") == 0) {
    limit();
    count_opens();
  }
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.2);
  if (strcmp(mode, "after") == 0) limit();
  if (strcmp(mode, "before") != 0) count_opens();
  rw_join();
  count_opens();
  printf("done\n");
  return 0;
}
