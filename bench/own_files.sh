#!/usr/bin/env bash
# Cost of the program's reads of its own /proc files under racewatch: each is a view (a read-only
# memory file with the program's values, racewatch's footprint left out of the memory figures), made
# at the open and again at every seek or pread. Times, in one small C program, 2000 of each of:
#   open+read+close of /proc/self/status, of /proc/self/statm, of /dev/null (no view: the control),
#   a pread of a /proc/self/status descriptor kept open.
# Runs it without racewatch and with the runtime preloaded (default options), interleaved ROUNDS times,
# and prints the median microseconds per operation for each side and their ratio.
#
# Usage (from the repo root):  bash bench/own_files.sh
# Environment: ROUNDS=N  rounds (default 7)
# Needs: cargo, clang-19 (or cc), bash, awk, sort.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-7}
cd "$ROOT"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch
RUNTIME=$("$RACEWATCH" runtime-path)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/own_files.c" << 'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#define N 2000
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static void whole(const char *name, const char *path) {
  char buf[8192];
  double start = now();
  for (int i = 0; i < N; i++) {
    int fd = open(path, O_RDONLY);
    if (read(fd, buf, sizeof buf) < 0) return;
    close(fd);
  }
  printf("%s %.2f\n", name, (now() - start) / N);
}
int main(void) {
  whole("open+read+close_/dev/null", "/dev/null");
  whole("open+read+close_status", "/proc/self/status");
  whole("open+read+close_statm", "/proc/self/statm");
  char buf[8192];
  int fd = open("/proc/self/status", O_RDONLY);
  double start = now();
  for (int i = 0; i < N; i++)
    if (pread(fd, buf, sizeof buf, 0) < 0) return 1;
  printf("pread_status_kept_open %.2f\n", (now() - start) / N);
  close(fd);
  return 0;
}
EOF
CC=$(command -v clang-19 || command -v cc)
"$CC" -O2 "$work/own_files.c" -o "$work/own_files"

for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then order="plain racewatch"; else order="racewatch plain"; fi
    for side in $order; do
        if [ "$side" = plain ]; then
            env -u LD_PRELOAD "$work/own_files"
        else
            env LD_PRELOAD="$RUNTIME" "$work/own_files"
        fi | sed "s/^/$side /"
    done
done > "$work/times"

printf '%-28s %12s %12s %7s\n' operation "plain (us)" "racewatch" ratio
for op in $(awk '{print $2}' "$work/times" | sort -u); do
    median() { awk -v s="$1" -v o="$op" '$1 == s && $2 == o {print $3}' "$work/times" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
    plain=$(median plain)
    with=$(median racewatch)
    printf '%-28s %12s %12s %7s\n' "$op" "$plain" "$with" "$(awk -v a="$plain" -v b="$with" 'BEGIN {printf "%.1fx", b / a}')"
done
