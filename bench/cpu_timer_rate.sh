#!/usr/bin/env bash
# Why sampling stays on the perf task-clock event (whose signal is SIGTRAP): the alternative that
# would spare SIGTRAP, a POSIX per-thread CPU-time timer (timer_create(CLOCK_THREAD_CPUTIME_ID,
# SIGEV_THREAD_ID) on a real-time signal), fires at most once per scheduler tick. This prints how many
# signals such a timer delivers per second of CPU for a few periods, beside the ideal count; the
# debug rate (sample_period_us=1000, 4 timer signals per kept sample) needs 4000 per CPU second.
#
# Usage: bash bench/cpu_timer_rate.sh     Needs: cc.
set -euo pipefail
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat > "$TMP/rate.c" <<'C'
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static volatile long signals;
static void on_signal(int sig) { (void)sig; signals++; }
int main(int argc, char **argv) {
  long period_us = argc > 1 ? atol(argv[1]) : 250;
  signal(SIGRTMIN + 3, on_signal);
  struct sigevent ev = {0};
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGRTMIN + 3;
  ev._sigev_un._tid = syscall(SYS_gettid);
  timer_t timer;
  timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &timer);
  struct itimerspec spec = {{0, period_us * 1000}, {0, period_us * 1000}};
  timer_settime(timer, 0, &spec, NULL);
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  do {
    for (volatile int i = 0; i < 10000; i++) {
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  } while ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec) < 1e9);
  printf("%8ld us period: %6ld signals per CPU second (ideal %ld)\n", period_us, signals, 1000000 / period_us);
  return 0;
}
C
cc -O2 "$TMP/rate.c" -o "$TMP/rate"
echo "POSIX thread CPU-time timer ($(getconf CLK_TCK) clock ticks/s reported to user space; the kernel's tick decides):"
for us in 250 1000 4000 10000; do "$TMP/rate" "$us"; done
