/* RLIMIT_NOFILE soft = hard = 1024, the way a server caps its connections (memcached -c 1024), then as
 * many descriptors as the limit allows. argv[1]:
 *   "before": setrlimit while single-threaded, count, then race 1 s;
 *   "after":  race, setrlimit and count while racing.
 * Without CAP_SYS_RESOURCE nobody can raise the hard limit again (the program prints whether it could). */
static void count_opens(void) {
  static int fds[2048];
  int n = 0, err = 0;
  while (n < 2048) {
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
  struct rlimit rl = {1024, 1024};
  printf("setrlimit: %s\n", setrlimit(RLIMIT_NOFILE, &rl) == 0 ? "ok" : rw_errname(errno));
  getrlimit(RLIMIT_NOFILE, &rl);
  printf("RLIMIT_NOFILE %ld/%ld\n", (long)rl.rlim_cur, (long)rl.rlim_max);
  /* Whether the process could raise it again (CAP_SYS_RESOURCE); if it could, back to 1024. */
  struct rlimit more = {1024, 2048};
  int raised = setrlimit(RLIMIT_NOFILE, &more) == 0;
  printf("raising the hard limit again: %s\n", raised ? "ok" : rw_errname(errno));
  if (raised) setrlimit(RLIMIT_NOFILE, &rl);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "before";
  int before = strcmp(mode, "before") == 0;
  if (before) {
    limit();
    count_opens();
  }
  rw_start(2, 1.0, 0);
  rw_race_until(rw_now() + 0.2);
  if (!before) {
    limit();
    count_opens();
  }
  rw_race_until(rw_now() + 0.8);
  rw_join();
  count_opens();
  printf("done\n");
  return 0;
}
