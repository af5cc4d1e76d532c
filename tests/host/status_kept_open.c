/* A monitor that keeps its own /proc files open and reads them again as threads come and go: status by
 * a descriptor (lseek + read, pread) and by a stream (rewind + fgets), statm by pread; and what the
 * descriptor looks like (fstat, fstatfs, fstatat with AT_EMPTY_PATH, its /proc/self/fd link, its fdinfo
 * flags). Racing threads run between the reads. With argv[1] == "late" the files are opened while the
 * threads race (racewatch's detector running). */
#include <sys/mman.h>
#include <sys/vfs.h>

static int field_from(const char *text, const char *key) {
  const char *p = strstr(text, key);
  return p ? atoi(p + strlen(key)) : -1;
}

static int threads_by_fd(int fd, int use_pread) {
  char buf[8192];
  ssize_t n;
  if (use_pread) {
    n = pread(fd, buf, sizeof buf - 1, 0);
  } else {
    lseek(fd, 0, SEEK_SET);
    n = read(fd, buf, sizeof buf - 1);
  }
  if (n <= 0) return -1;
  buf[n] = 0;
  return field_from(buf, "\nThreads:");
}

static int threads_by_stream(FILE *f) {
  char line[256];
  int threads = -1;
  rewind(f);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Threads:", 8)) threads = atoi(line + 8);
  return threads;
}

static long statm_size(int fd) {
  char buf[256];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  return atol(buf);
}

static void report(const char *when, int fd, FILE *f, int statm, long statm_before) {
  long size = statm_size(statm);
  printf("%s: threads %d by read, %d by pread, %d by stream; statm size grew: %s\n", when, threads_by_fd(fd, 0),
         threads_by_fd(fd, 1), threads_by_stream(f), size > statm_before ? "yes" : "no");
}

/* After the threads are joined: reads once more, closes everything. */
static int finish(int fd, FILE *f, int statm, long statm_before) {
  rw_join();
  rw_sleep(0.05);
  report("joined", fd, f, statm, statm_before);
  fclose(f);
  close(fd);
  close(statm);
  printf("done\n");
  return 0;
}

/* A forked child reads the status descriptor it inherited: its parent's file, by pread and by its link. */
static void forked_child_reads(int fd) {
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    char buf[8192], link[64], target[256], want[64];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    printf("forked child reads its parent's Pid: %d\n", field_from(buf, "\nPid:") == getppid());
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, target, sizeof target - 1);
    target[k > 0 ? k : 0] = 0;
    snprintf(want, sizeof want, "/proc/%d/status", getppid());
    printf("forked child's link names its parent's file: %d\n", !strcmp(target, want));
    fflush(stdout);
    _exit(0);
  }
  int status;
  waitpid(child, &status, 0);
}

static int late(void) {
  rw_start(3, 1.0, 0);
  int fd = open("/proc/self/status", O_RDONLY);
  int statm = open("/proc/self/statm", O_RDONLY);
  FILE *f = fopen("/proc/self/status", "r");
  long statm_before = statm_size(statm);
  report("opened while racing", fd, f, statm, statm_before);
  return finish(fd, f, statm, statm_before);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "late")) return late();
  int fd = open("/proc/self/status", O_RDONLY);
  int statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  FILE *f = fopen("/proc/self/status", "r");
  struct stat st;
  struct statfs sf;
  fstat(fd, &st);
  fstatfs(fd, &sf);
  printf("fstat: size %lld, mode %o, regular %d; on proc: %d\n", (long long)st.st_size, st.st_mode & 0777,
         S_ISREG(st.st_mode), sf.f_type == 0x9fa0);
  struct stat by_empty;
  printf("fstatat AT_EMPTY_PATH same inode: %d\n",
         fstatat(fd, "", &by_empty, AT_EMPTY_PATH) == 0 && by_empty.st_ino == st.st_ino);
  char link[64], target[256], want[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t k = readlink(link, target, sizeof target - 1);
  target[k > 0 ? k : 0] = 0;
  snprintf(want, sizeof want, "/proc/%d/status", getpid());
  printf("link names the file: %d\n", !strcmp(target, want));
  snprintf(link, sizeof link, "/proc/self/fdinfo/%d", statm);
  FILE *info = fopen(link, "r");
  char line[256];
  while (info && fgets(line, sizeof line, info))
    if (!strncmp(line, "flags:", 6)) printf("statm fdinfo %s", line);
  if (info) fclose(info);
  long statm_before = statm_size(statm);
  report("alone", fd, f, statm, statm_before);
  forked_child_reads(fd);
  int copy = dup(fd);
  rw_start(3, 1.0, 0);
  void *block = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  printf("a dup of the descriptor reads %d threads\n", threads_by_fd(copy, 1));
  close(copy);
  report("with 3 racing threads", fd, f, statm, statm_before);
  munmap(block, 64 << 20);
  return finish(fd, f, statm, statm_before);
}
