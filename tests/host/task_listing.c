/* A program that counts its threads by listing /proc/self/task right after starting them, and compares
 * the count with Threads: in its status, round after round: three workers wait on a barrier while main
 * lists (and takes the task directory's link count); then they end, so each round starts from one thread (racewatch's reporter thread rests when the
 * program is single-threaded, and starts again with the round's first pthread_create). Prints the rounds
 * whose counts differ; the task directory is listed twice, with opendir/readdir and with scandir (libuv's, so
 * node's, way). Then, while workers still race, its descriptors listed both ways must agree, and both
 * listings read raw (getdents64 through syscall(), and glibc's getdents64(), as fd-closing loops in
 * sandboxes and runtimes do) count what readdir counts. argv[1]: rounds (default 100). */
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>

/* Entries of `path` other than . and .., read with raw getdents64 records (through syscall() when
 * `through_syscall`, else glibc's getdents64), 64 bytes at a time; -1 if it cannot be opened. */
static int raw_entries(const char *path, int through_syscall) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0;
  if (fd < 0) return -1;
  char buf[64] __attribute__((aligned(8)));
  for (;;) {
    long got = through_syscall ? syscall(SYS_getdents64, fd, buf, sizeof buf) : getdents64(fd, buf, sizeof buf);
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      struct dirent64 *entry = (struct dirent64 *)(buf + at);
      if (entry->d_name[0] != '.') n++;
      at += entry->d_reclen;
    }
  }
  close(fd);
  return n;
}

static pthread_barrier_t barrier;

static int not_dots(const struct dirent *entry) { return entry->d_name[0] != '.'; }

/* Entries of `path` other than . and .., listed with scandir (-1 if it fails). */
static int scanned(const char *path) {
  struct dirent **list;
  int n = scandir(path, &list, not_dots, alphasort);
  for (int i = 0; i < n; i++) free(list[i]);
  if (n >= 0) free(list);
  return n;
}

/* The same with opendir/readdir. */
static int listed_entries(const char *path) {
  DIR *dir = opendir(path);
  int n = 0;
  struct dirent *entry;
  while (dir && (entry = readdir(dir)))
    if (entry->d_name[0] != '.') n++;
  if (dir) closedir(dir);
  return dir ? n : -1;
}

static void *worker(void *arg) {
  rw_race_iterations(20000);
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  return arg;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 100, differ = 0;
  for (int round = 0; round < rounds; round++) {
    pthread_t t[3];
    pthread_barrier_init(&barrier, NULL, 4);
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, NULL);
    pthread_barrier_wait(&barrier);
    int listed = listed_entries("/proc/self/task");
    int scans = scanned("/proc/self/task");
    int counted = (int)rw_status_field("/proc/self/status", "Threads");
    /* The directory's link count: its threads + 2 (a quick count some programs take). */
    struct stat st;
    int linked = stat("/proc/self/task", &st) == 0 ? (int)st.st_nlink - 2 : -1;
    if (listed != 4 || scans != 4 || counted != 4 || linked != 4) {
      if (differ < 3)
        printf("round %d: listed %d, scandir %d, status %d, links %d\n", round, listed, scans, counted, linked);
      differ++;
    }
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
  }
  printf("rounds with a count other than 4: %d\n", differ);
  rw_start(2, 0.5, 0);
  usleep(200 * 1000);
  int fds_listed = listed_entries("/proc/self/fd"), fds_scanned = scanned("/proc/self/fd");
  /* Each listing counts its own directory descriptor, open as it reads. */
  int fds_raw = raw_entries("/proc/self/fd", 1), fds_glibc = raw_entries("/proc/self/fd", 0);
  int tasks_listed = listed_entries("/proc/self/task"), tasks_raw = raw_entries("/proc/self/task", 1);
  struct stat task_dir;
  int tasks_linked = stat("/proc/self/task", &task_dir) == 0 ? (int)task_dir.st_nlink - 2 : -1;
  rw_join();
  printf("descriptors listed with readdir and scandir agree: %d\n", fds_listed == fds_scanned);
  printf("descriptors read raw agree: %d %d\n", fds_raw == fds_listed, fds_glibc == fds_listed);
  printf("threads read raw agree: %d\n", tasks_raw == tasks_listed);
  printf("threads by the directory's link count agree: %d\n", tasks_linked == tasks_listed);
  return 0;
}
