/* Started with soft = hard RLIMIT_NOFILE (8192) and no right to raise it, as a shell's `ulimit -n`
 * leaves a server: no number above the limit is free for anyone. While threads race, the program opens
 * descriptors until EMFILE (argv[1] "open": open(2); "pipe": pipe(2)) and checks it got every number its
 * limit allows, then closes them and races on. */
static int open_now(int soft) {
  int n = 0;
  for (int fd = 0; fd < soft; fd++) n += fcntl(fd, F_GETFD) >= 0;
  return n;
}

int main(int argc, char **argv) {
  int pipes = argc > 1 && !strcmp(argv[1], "pipe");
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  int soft = (int)rl.rlim_cur;
  printf("soft = hard: %d\n", rl.rlim_cur == rl.rlim_max);
  rw_start(2, 1.5, 0);
  rw_race_until(rw_now() + 0.3);
  int before = open_now(soft);
  static int fds[1 << 16];
  int n = 0, err = 0;
  while (n < (1 << 16) - 1) {
    if (pipes) {
      if (pipe(&fds[n]) != 0) {
        err = errno;
        break;
      }
      n += 2;
      continue;
    }
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      err = errno;
      break;
    }
    fds[n++] = fd;
  }
  /* A pipe takes two numbers: one may stay free. */
  printf("stopped by %s, every number the limit allows: %d\n", rw_errname(err), soft - before - n <= pipes);
  for (int i = 0; i < n; i++) close(fds[i]);
  int p[2];
  printf("a pipe after closing them: %d\n", pipe(p) == 0);
  rw_join();
  printf("done\n");
  return 0;
}
