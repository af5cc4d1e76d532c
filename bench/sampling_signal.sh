#!/usr/bin/env bash
# Why sampling stays on the perf task-clock event's SIGTRAP (`sigtrap=1`) rather than a real-time
# signal of racewatch's own through the event's descriptor (`F_SETSIG` + `F_SETOWN_EX`, `O_ASYNC`):
# such a signal goes to the descriptor's owner, not to the thread whose CPU time ran the period. With
# one inherited event for the whole process (racewatch's one sampling descriptor) every signal lands on
# the owner, whatever it is doing (here the main thread, waiting in pthread_join); only an event per
# thread, each with itself as owner, samples the running thread, at one descriptor per thread.
# Companion of bench/cpu_timer_rate.sh (the POSIX CPU-timer alternative).
#
# Usage: bash bench/sampling_signal.sh     Needs: cc, perf_event_open (perf_event_paranoid <= 2).
set -euo pipefail
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/fasync.c" <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define THREADS 4
static __thread int me = -1;
static _Atomic long got[THREADS + 2];
static void on_signal(int sig) { (void)sig; got[me < 0 ? THREADS + 1 : me]++; }
static double cpu_now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static int per_thread;
static _Atomic int fds_open;
static int open_event(int inherit);
static void *spin(void *arg) {
  me = (int)(long)arg;
  int own = per_thread ? open_event(0) : -1;
  if (own >= 0) fds_open++;
  double start = cpu_now();
  while (cpu_now() - start < 0.5) for (volatile int i = 0; i < 1000; i++) {}
  if (own >= 0) close(own);
  return NULL;
}
static int open_event(int inherit) {
  int sig = SIGRTMIN + 3;
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = 1000000;
  a.wakeup_events = 1;
  a.inherit = inherit;
  a.inherit_thread = inherit;
  a.exclude_kernel = 1;
  a.disabled = 1;
  int fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) { perror("perf_event_open"); return -1; }
  struct f_owner_ex owner = {F_OWNER_TID, (pid_t)syscall(SYS_gettid)};
  if (fcntl(fd, F_SETOWN_EX, &owner) || fcntl(fd, F_SETSIG, sig) || fcntl(fd, F_SETFL, O_ASYNC)) { perror("fcntl"); return -1; }
  ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  return fd;
}
static void run(int each) {
  per_thread = each;
  fds_open = 0;
  for (int i = 0; i < THREADS + 2; i++) got[i] = 0;
  int fd = each ? -1 : open_event(1);
  pthread_t t[THREADS];
  for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, spin, (void *)i);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0), close(fd), fds_open = 1;
  long workers = 0;
  for (int i = 0; i < THREADS; i++) workers += got[i];
  printf("%-44s %8ld %12ld %12d\n", each ? "one event per thread, its own owner" : "one inherited event, owner the main thread", workers, got[THREADS], (int)fds_open);
}
int main(void) {
  signal(SIGRTMIN + 3, on_signal);
  me = THREADS;
  printf("task-clock, 1 ms periods, fasync on SIGRTMIN+3; %d workers spin 0.5 CPU s each, main waits in pthread_join\n", THREADS);
  printf("%-44s %8s %12s %12s\n", "", "workers", "main (join)", "descriptors");
  run(0);
  run(1);
  return 0;
}
C
cc -O2 -pthread "$TMP/fasync.c" -o "$TMP/fasync"
"$TMP/fasync"
