/* Cases 13 and 14: descriptors closed or reused under the runtime's feet while threads race.
 * argv[1] = "close":       close() every fd 3..100;
 *           "close_range": close_range(3, ~0U, 0);
 *           "dup2":        dup2() a data file's fd over every fd 3..100.
 * Then 64 KiB through a pipe (writer thread, reader main, checksum printed) and 16 KiB of a known
 * pattern written to the data file argv[2] in 1 KiB chunks while the threads race. */
static int pipe_fds[2];

static void *pipe_writer(void *arg) {
  (void)arg;
  if (rw_write_pattern(pipe_fds[1], 65536, 0) != 0) printf("pipe write failed: %s\n", rw_errname(errno));
  close(pipe_fds[1]);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *mode = argv[1];
  const char *path = argv[2];
  rw_start(2, 1.2, 0);
  rw_race_until(rw_now() + 0.1);
  int datafd = -1;
  if (strcmp(mode, "close") == 0) {
    for (int fd = 3; fd <= 100; fd++) close(fd);
  } else if (strcmp(mode, "close_range") == 0) {
    if (close_range(3, ~0U, 0) != 0) printf("close_range: %s\n", rw_errname(errno));
  } else {
    datafd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (datafd < 0) {
      printf("open %s\n", rw_errname(errno));
      return 1;
    }
    int failed = 0;
    for (int fd = 3; fd <= 100; fd++)
      if (fd != datafd && dup2(datafd, fd) != fd) failed++;
    printf("dup2 failures: %d\n", failed);
  }
  printf("%s done\n", mode);
  /* Races reported from here on are reported after the descriptors changed. */
  rw_vary_races();

  if (pipe(pipe_fds) != 0) {
    printf("pipe: %s\n", rw_errname(errno));
    return 1;
  }
  pthread_t writer;
  pthread_create(&writer, NULL, pipe_writer, NULL);
  unsigned char buf[4096];
  size_t total = 0, mismatches = 0;
  uint32_t sum = 0;
  for (;;) {
    ssize_t n = read(pipe_fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != rw_pattern(total + (size_t)i)) mismatches++;
      sum = sum * 31 + buf[i];
    }
    total += (size_t)n;
  }
  pthread_join(writer, NULL);
  close(pipe_fds[0]);
  printf("pipe: %zu bytes, %zu mismatches, checksum %08x\n", total, mismatches, sum);

  if (datafd < 0) datafd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (datafd < 0) {
    printf("open %s\n", rw_errname(errno));
    return 1;
  }
  if (rw_write_pattern(datafd, 16384, 0.02) != 0) printf("data write failed: %s\n", rw_errname(errno));
  rw_join();
  /* Like a daemon, the data file stays open until exit: anything written to its number lands in it. */
  printf("data file written\n");
  return 0;
}
