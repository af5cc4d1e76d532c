/* A server that prints its own state from /proc while its threads run, as `ps s` and monitoring
 * endpoints do: its signal masks and dispositions (SigBlk, SigIgn, SigCgt), its thread count (status,
 * stat, the task listing) and its descriptors (the fd listing), read through fopen, open and opendir,
 * for the process, the main thread by id and the calling thread, and by other names of the same files
 * (openat and fdopendir in /proc/self, "..", a relative path), and its memory as status's VmSize and
 * statm give it (the same pages). With "blocked" it blocks SIGTRAP and
 * SIGUSR1 before its threads start (they inherit the mask). Also stat's signal sets (fields 31-34) and
 * the SigBlk a handler whose sa_mask has SIGTRAP reads of its thread (set 17 p28 and p42: racewatch's
 * SIGTRAP showed in stat's caught set, and the handler's SIGTRAP was missing from SigBlk). With "parent",
 * a child forked after a second of racing prints the parent's (SIGTRAP and SIGUSR1 blocked, SIGHUP
 * ignored, SIGUSR2 caught); with "new-images", shells started by system() and by fork and exec do.
 * Read raw too: opened by syscall(SYS_openat) and syscall(SYS_openat2) (set 42: openat2 read the kernel's
 * SigCgt, racewatch's SIGTRAP handler in it). */
#include <dirent.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/statvfs.h>

static void print_memory(void) {
  long vm_kb = rw_status_field("/proc/self/status", "VmSize");
  long pages = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%ld", &pages) != 1) pages = -1;
  if (f) fclose(f);
  printf("status VmSize is statm's size: %d\n", vm_kb == pages * (sysconf(_SC_PAGESIZE) / 1024));
}
static void on_usr2(int sig) { (void)sig; }

static void print_fields(const char *who, const char *path) {
  FILE *f = fopen(path, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "Sig", 3) && strncmp(line, "SigQ", 4) && strncmp(line, "SigPnd", 6))
      printf("%s %s", who, line);
    else if (!strncmp(line, "Threads:", 8))
      printf("%s %s", who, line);
  if (f) fclose(f);
  if (!f) printf("%s: cannot open %s\n", who, path);
}

static void print_blocked_by_open(const char *who, const char *path) {
  char text[8192];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) {
    printf("%s: cannot read %s\n", who, path);
    return;
  }
  text[n] = 0;
  char *line = strstr(text, "SigBlk:");
  if (line) printf("%s %.*s\n", who, (int)strcspn(line, "\n"), line);
}

static int count_entries(const char *path) {
  DIR *dir = opendir(path);
  if (!dir) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(dir));)
    if (e->d_name[0] != '.') n++;
  closedir(dir);
  return n;
}

static void print_stat_signals(const char *who, const char *path) {
  char text[2048];
  int fd = open(path, O_RDONLY);
  ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) return;
  text[n] = 0;
  char *p = strrchr(text, ')');
  for (int field = 2; p && field < 31; field++) p = strchr(p + 1, ' ');
  unsigned long blocked = 0, ignored = 0, caught = 0;
  if (p && sscanf(p + 1, "%*u %lu %lu %lu", &blocked, &ignored, &caught) == 3)
    printf("%sstat signal sets: blocked %lu, ignored %lu, caught %lu\n", who, blocked, ignored, caught);
}

static char handler_sigblk[64];

static void on_urg(int sig) {
  (void)sig;
  FILE *f = fopen("/proc/thread-self/status", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "SigBlk:", 7)) snprintf(handler_sigblk, sizeof handler_sigblk, "%s", line + 7);
  if (f) fclose(f);
}

static void print_handler_mask(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_urg;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTRAP);
  sigaction(SIGURG, &sa, NULL);
  raise(SIGURG);
  printf("SigBlk in a handler whose sa_mask has SIGTRAP:%s", handler_sigblk);
}

/* The same through libc's syscall() (set 17 p51): the status file opened and read raw, and glibc's internal
 * signals' dispositions read raw (glibc's sigaction refuses 32 and 33; the kernel answers). */
static void print_raw_views(void) {
  for (int how = 0; how < 2; how++) {
    char text[8192];
    /* openat2 (set 42): struct open_how {flags, mode, resolve}, no glibc function for it. */
    unsigned long long open_how[3] = {O_RDONLY | O_CLOEXEC, 0, 0};
    long fd = how == 0 ? syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC)
                       : syscall(SYS_openat2, AT_FDCWD, "/proc/self/status", open_how, sizeof open_how);
    long n = fd < 0 ? -1 : syscall(SYS_read, fd, text, sizeof text - 1);
    if (fd >= 0) close((int)fd);
    text[n > 0 ? n : 0] = 0;
    for (const char *key = "SigBlk:"; key; key = strcmp(key, "SigBlk:") ? NULL : "SigCgt:") {
      char *line = strstr(text, key);
      if (line) printf("%s %.*s\n", how == 0 ? "raw" : "openat2", (int)strcspn(line, "\n"), line);
    }
  }
  for (int sig = 32; sig <= 33; sig++) {
    unsigned long old[4] = {0};
    long rc = syscall(SYS_rt_sigaction, sig, NULL, old, 8);
    printf("raw rt_sigaction(%d): %s\n", sig, rc == 0 ? "ok" : rw_errname(errno));
  }
}

/* Its own status treated as any file (set 42 p29: a generic file helper): seeks to the end or to data,
 * a mapping, seals, sendfile, fsync, the status flags it was opened with, O_DIRECT, the file by its
 * /proc/self/fd and /dev/fd links, fstatvfs, FIONREAD and FS_IOC_GETFLAGS. The kernel makes such a file
 * as it is read. */
static void print_as_a_file(void) {
  int fd = open("/proc/self/status", O_RDONLY | O_NONBLOCK | O_NOATIME);
  if (fd < 0) return;
  errno = 0;
  long end = (long)lseek(fd, 0, SEEK_END);
  printf("as a file: lseek SEEK_END %ld %s", end, rw_errname(errno));
  errno = 0;
  long data = (long)lseek(fd, 0, SEEK_DATA);
  printf(", SEEK_DATA %ld %s", data, rw_errname(errno));
  errno = 0;
  void *map = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
  printf(", mmap %s\n", map == MAP_FAILED ? rw_errname(errno) : "mapped");
  errno = 0;
  int seals = fcntl(fd, F_GET_SEALS);
  printf("as a file: seals %d %s", seals, rw_errname(errno));
  int pipe_fds[2];
  if (pipe(pipe_fds) == 0) {
    errno = 0;
    long sent = (long)sendfile(pipe_fds[1], fd, NULL, 16);
    printf(", sendfile %ld %s", sent, rw_errname(errno));
    close(pipe_fds[0]);
    close(pipe_fds[1]);
  }
  errno = 0;
  int synced = fsync(fd);
  printf(", fsync %d %s", synced, rw_errname(errno));
  printf(", flags %#o\n", fcntl(fd, F_GETFL) & ~O_LARGEFILE);
  struct stat by_fd, by_link, by_dev;
  char link[64], dev[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  snprintf(dev, sizeof dev, "/dev/fd/%d", fd);
  fstat(fd, &by_fd);
  stat(link, &by_link);
  stat(dev, &by_dev);
  printf("as a file: its links are the file: %d %d, mode %o size %ld\n",
         by_link.st_ino == by_fd.st_ino && by_link.st_dev == by_fd.st_dev,
         by_dev.st_ino == by_fd.st_ino && by_dev.st_dev == by_fd.st_dev, by_link.st_mode, (long)by_link.st_size);
  struct statvfs vfs;
  printf("as a file: fstatvfs flag %#lx namemax %lu\n", fstatvfs(fd, &vfs) == 0 ? vfs.f_flag : 0UL, vfs.f_namemax);
  /* ioctls: FIONREAD is the kernel's size for /proc (0) less the position; file attributes are not
   * there (ENOTTY; a memory file behind the view had flags). */
  int unread = 12345;
  long flags = -1;
  char head[8];
  lseek(fd, 0, SEEK_SET);
  read(fd, head, sizeof head);
  errno = 0;
  int rc = ioctl(fd, FIONREAD, &unread);
  printf("as a file: FIONREAD %d %s %d", rc, rw_errname(errno), unread);
  errno = 0;
  rc = ioctl(fd, FS_IOC_GETFLAGS, &flags);
  printf(", FS_IOC_GETFLAGS %d %s\n", rc, rw_errname(errno));
  close(fd);
  errno = 0;
  int direct = open("/proc/self/status", O_RDONLY | O_DIRECT);
  printf("as a file: O_DIRECT %s\n", direct >= 0 ? "opened" : rw_errname(errno));
  if (direct >= 0) close(direct);
}

static long stat_threads(const char *path) {
  char text[2048];
  int fd = open(path, O_RDONLY);
  ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) return -1;
  text[n] = 0;
  char *p = strrchr(text, ')');
  for (int field = 2; p && field < 20; field++) p = strchr(p + 1, ' ');
  return p ? strtol(p + 1, NULL, 10) : -1;
}

/* The same files by other names: relative to a descriptor of /proc/self (openat, then fdopendir for
 * the listings), through "..", and relative to the working directory after chdir. */
static void print_by_other_names(void) {
  int self = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int fd = openat(self, "status", O_RDONLY);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "SigCgt", 6) || !strncmp(line, "SigBlk", 6) || !strncmp(line, "Threads:", 8))
      printf("openat %s", line);
  if (f) fclose(f);
  print_fields("dotdot", "/proc/self/../self/status");
  int task = openat(self, "task", O_RDONLY | O_DIRECTORY);
  DIR *dir = task < 0 ? NULL : fdopendir(task);
  int n = 0;
  for (struct dirent *e; dir && (e = readdir(dir));)
    if (e->d_name[0] != '.') n++;
  if (dir) closedir(dir);
  printf("fdopendir task entries: %d\n", n);
  printf("dotdot fd entries: %d\n", count_entries("/proc/self/../self/fd"));
  char cwd[4096];
  if (getcwd(cwd, sizeof cwd) && chdir("/proc/self") == 0) {
    print_fields("relative", "status");
    printf("relative fd entries: %d\n", count_entries("fd"));
    if (chdir(cwd) != 0) printf("cannot go back\n");
  }
  close(self);
}

/* A forked child reporting on its parent (a supervisor's helper, a test of the parent's state): the
 * parent's status and stat (signal sets, thread count) and its task listing, through opendir and raw. */
static void print_parents_state(void) {
  pid_t parent = getppid();
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", (int)parent);
  print_fields("parent", path);
  snprintf(path, sizeof path, "/proc/%d/stat", (int)parent);
  printf("parent stat threads: %ld\n", stat_threads(path));
  print_stat_signals("parent ", path);
  snprintf(path, sizeof path, "/proc/%d/task", (int)parent);
  printf("parent task entries: %d\n", count_entries(path));
  int fd = open(path, O_RDONLY | O_DIRECTORY);
  char buf[4096];
  long n;
  int raw = 0;
  while (fd >= 0 && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
    for (long at = 0; at < n; at += *(unsigned short *)(buf + at + 16)) raw += buf[at + 19] != '.';
  if (fd >= 0) close(fd);
  printf("parent task entries read raw: %d\n", raw);
}

static void block_trap_and_usr1(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTRAP);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
}

/* New images reporting on the process that started them: a shell run by system() (its grep and ls are
 * the process's grandchildren) and one forked and exec'd, reading $PPID's status, stat and task listing.
 * The shell of system() waits a little first: glibc's spawn blocks every signal in the caller until it
 * gets the CPU back after the child's exec, which a loaded machine may delay past the read. */
static void print_state_from_new_images(void) {
  char command[512];
  snprintf(command, sizeof command,
           "sleep 0.2; grep -E '^(SigBlk|SigIgn|SigCgt|Threads)' /proc/%d/status | sed 's/^/system: /'; "
           "echo \"system: task entries $(ls /proc/%d/task | wc -l)\"",
           (int)getpid(), (int)getpid());
  fflush(stdout);
  printf("system: exit %d\n", system(command));
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    execl("/bin/sh", "sh", "-c",
          "grep -E '^(SigBlk|SigIgn|SigCgt|Threads)' /proc/$PPID/status | sed 's/^/exec: /'; "
          "echo \"exec: stat threads $(cut -d' ' -f20 /proc/$PPID/stat)\"; "
          "echo \"exec: racewatch view in env $(env | grep -c ^RACEWATCH_VIEW)\"",
          (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("exec: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(int argc, char **argv) {
  signal(SIGUSR2, on_usr2);
  if (argc > 1 && !strcmp(argv[1], "new-images")) {
    signal(SIGHUP, SIG_IGN);
    block_trap_and_usr1();
    rw_start(2, 2.0, 0);
    rw_sleep(1.0);
    print_state_from_new_images();
    rw_join();
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "parent")) {
    signal(SIGHUP, SIG_IGN);
    block_trap_and_usr1();
    rw_start(2, 2.0, 0);
    rw_sleep(1.0);
    pid_t child = fork();
    if (child == 0) {
      print_parents_state();
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    rw_join();
    printf("child: exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "blocked")) block_trap_and_usr1();
  rw_start(2, 1.0, 0);
  rw_sleep(0.3);
  print_memory();
  char path[64];
  print_fields("process", "/proc/self/status");
  snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)getpid(), (int)getpid());
  print_blocked_by_open("main by id", path);
  print_blocked_by_open("calling thread", "/proc/thread-self/status");
  printf("stat threads: %ld\n", stat_threads("/proc/self/stat"));
  print_stat_signals("", "/proc/self/stat");
  print_handler_mask();
  print_raw_views();
  print_as_a_file();
  snprintf(path, sizeof path, "/proc/%d/task", (int)getpid());
  printf("task entries: %d\n", count_entries(path));
  printf("fd entries: %d\n", count_entries("/proc/self/fd"));
  print_by_other_names();
  rw_join();
  printf("done\n");
  return 0;
}
