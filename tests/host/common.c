/* Shared by every host-suite program (the test prepends this file to each source).
 *
 * Racing threads: rw_start(n, seconds, stack) runs n threads that increment one
 * plain global with no synchronisation (`rw_counter++` in a covered function),
 * until the deadline or rw_stop_racing(). The racy counter's value is never
 * printed: only facts that do not depend on timing are.
 *
 * A program built with its own feature macros (-std=c11 -D_XOPEN_SOURCE=700: strict, no GNU or BSD
 * extensions) does not get _GNU_SOURCE. */
#if !defined(_XOPEN_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RW_MAX_THREADS 8
#define RW_FN static __attribute__((unused))

long rw_counter;
static double rw_deadline;
static atomic_int rw_stopping;
static pthread_t rw_threads[RW_MAX_THREADS];
static int rw_nthreads;

__attribute__((noinline)) void rw_bump(void) { rw_counter++; }

/* stdout line-buffered: what a killed (or hung) run printed is still seen, and no unflushed buffer is
 * copied into a forked child. */
__attribute__((constructor)) static void rw_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

RW_FN double rw_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

RW_FN void rw_sleep(double seconds) {
  struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Sixteen more racy functions: distinct racy PCs, so distinct reports (racewatch reports a pair once). */
#define RW_VARIED(n) \
  long rw_varied_counter##n; \
  __attribute__((noinline)) void rw_varied##n(void) { rw_varied_counter##n++; }
RW_VARIED(0) RW_VARIED(1) RW_VARIED(2) RW_VARIED(3) RW_VARIED(4) RW_VARIED(5) RW_VARIED(6) RW_VARIED(7)
RW_VARIED(8) RW_VARIED(9) RW_VARIED(10) RW_VARIED(11) RW_VARIED(12) RW_VARIED(13) RW_VARIED(14) RW_VARIED(15)
static void (*const rw_varied[16])(void) = {
    rw_varied0, rw_varied1, rw_varied2,  rw_varied3,  rw_varied4,  rw_varied5,  rw_varied6,  rw_varied7,
    rw_varied8, rw_varied9, rw_varied10, rw_varied11, rw_varied12, rw_varied13, rw_varied14, rw_varied15};
static atomic_int rw_varying;

/* From now on the racing threads use the sixteen other racy functions: new reports come after this point. */
RW_FN void rw_vary_races(void) { atomic_store(&rw_varying, 1); }

/* Racy increments until `deadline` or rw_stop_racing(). */
__attribute__((noinline)) void rw_race_until(double deadline) {
  while (!atomic_load_explicit(&rw_stopping, memory_order_relaxed) && rw_now() < deadline) {
    if (atomic_load_explicit(&rw_varying, memory_order_relaxed))
      for (int i = 0; i < 1000; i++) rw_varied[(i >> 4) & 15]();
    else
      for (int i = 0; i < 1000; i++) rw_bump();
  }
}

/* Exactly `n` racy increments, with no system call (for sandboxed threads). */
__attribute__((noinline)) void rw_race_iterations(long n) {
  for (long i = 0; i < n; i++) rw_bump();
}

/* How many racy increments take `seconds` on this thread now (measured with the clock). */
RW_FN long rw_calibrate(double seconds) {
  double start = rw_now();
  long n = 0;
  while (rw_now() - start < 0.05) {
    rw_race_iterations(10000);
    n += 10000;
  }
  return (long)(n * (seconds / (rw_now() - start)));
}

RW_FN void *rw_racer(void *arg) {
  (void)arg;
  rw_race_until(rw_deadline);
  return NULL;
}

RW_FN const char *rw_errname(int err) {
  switch (err) {
  case EPERM: return "EPERM";
  case EINVAL: return "EINVAL";
  case ENODEV: return "ENODEV";
  case EAGAIN: return "EAGAIN";
  case ENOMEM: return "ENOMEM";
  case EMFILE: return "EMFILE";
  case EEXIST: return "EEXIST";
  case ENOSYS: return "ENOSYS";
  case EACCES: return "EACCES";
  case ELOOP: return "ELOOP";
  case ENOENT: return "ENOENT";
  case EBADF: return "EBADF";
  case EINTR: return "EINTR";
  case ENOTTY: return "ENOTTY";
  case 0: return "ok";
  default: return "errno?";
  }
}

/* Starts `n` racing threads for `seconds` (stack size `stack`, 0 for the default); exits 1 on failure. */
RW_FN void rw_start(int n, double seconds, size_t stack) {
  rw_deadline = rw_now() + seconds;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack) pthread_attr_setstacksize(&attr, stack);
  for (int i = 0; i < n && rw_nthreads < RW_MAX_THREADS; i++) {
    int err = pthread_create(&rw_threads[rw_nthreads], &attr, rw_racer, NULL);
    if (err) {
      printf("pthread_create failed: %s\n", rw_errname(err));
      fflush(stdout);
      exit(1);
    }
    rw_nthreads++;
  }
  pthread_attr_destroy(&attr);
}

RW_FN void rw_stop_racing(void) { atomic_store(&rw_stopping, 1); }

/* Waits for the racing threads (they stop at their deadline or after rw_stop_racing()). */
RW_FN void rw_join(void) {
  for (int i = 0; i < rw_nthreads; i++) pthread_join(rw_threads[i], NULL);
  rw_nthreads = 0;
}

/* Waits for child `pid` for up to `seconds`; kills it and returns -1 if it is still running then. */
RW_FN int rw_wait_child(pid_t pid, double seconds, int *status) {
  double end = rw_now() + seconds;
  for (;;) {
    pid_t got = waitpid(pid, status, WNOHANG);
    if (got == pid) return 0;
    if (got < 0 && errno != EINTR) return -1;
    if (rw_now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, status, 0);
      return -1;
    }
    rw_sleep(0.001);
  }
}

/* The number after "FIELD:" in a /proc status file (-1 when absent or unreadable). */
RW_FN long rw_status_field(const char *path, const char *field) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  long value = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') value = atol(line + n + 1);
  fclose(f);
  return value;
}

/* "exit N" or "signal N" for a wait status. */
RW_FN void rw_print_status(const char *what, int status) {
  if (WIFEXITED(status))
    printf("%s: exit %d\n", what, WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    printf("%s: signal %d\n", what, WTERMSIG(status));
  else
    printf("%s: status %#x\n", what, status);
}

/* Writes all of buf to fd; returns 0 or -1. */
RW_FN int rw_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The byte at offset i of the data files the programs write (the test computes the same pattern). */
RW_FN unsigned char rw_pattern(size_t i) { return (unsigned char)((i * 131 + i / 251 + 7) & 0xff); }

/* Writes `len` bytes of rw_pattern to fd in chunks of 1 KiB, sleeping `pause` seconds between chunks. */
RW_FN int rw_write_pattern(int fd, size_t len, double pause) {
  unsigned char chunk[1024];
  for (size_t off = 0; off < len; off += sizeof chunk) {
    size_t n = len - off < sizeof chunk ? len - off : sizeof chunk;
    for (size_t i = 0; i < n; i++) chunk[i] = rw_pattern(off + i);
    if (rw_write_all(fd, chunk, n) != 0) return -1;
    if (pause > 0) rw_sleep(pause);
  }
  return 0;
}
