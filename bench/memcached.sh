#!/usr/bin/env bash
# A real C server under load, racewatch's profiles side by side with ThreadSanitizer: memcached
# built three ways from one checkout (plain `clang-19 -O2 -g`; with `racewatch flags --c`; with
# `-fsanitize=thread`), 4 worker threads, driven over loopback by 8 client connections (90% gets,
# 10% sets over 1,000 keys). Every round runs every configuration once, in a rotating order
# (drifting machine load hits all alike). Prints per configuration the server's CPU time per
# operation (median over the rounds, user+system from /proc), its ratio to the plain build, the
# distinct races reported over all rounds (distinct SUMMARY lines), and the peak RSS.
#
# Usage (from the repo root):  bash bench/memcached.sh MEMCACHED_CHECKOUT [SECONDS [ROUNDS]]
#   MEMCACHED_CHECKOUT  a memcached source tree (git checkout or release tarball; copied, not built in place)
#   SECONDS             load per run (default 15)
#   ROUNDS              rounds (default 3)
# Environment: CONFIGS="…"  default "plain default debug test tsan"; NAME=K=V:K=V[@RUNTIME.so] adds one
#              BUILD=DIR    where the three builds go (default /tmp/racewatch-memcached-build; reused)
#              RESULTS=DIR  keep each run's stderr there (CONFIG.ROUND.err), for reading the reports
# Needs: clang-19 (libclang-rt-19-dev for TSan), autoconf, automake, libevent-dev, python3.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
SRC=$(cd "$1" && pwd)
SECONDS_EACH=${2:-15}
ROUNDS=${3:-3}
CONFIGS=${CONFIGS:-plain default debug test tsan}
BUILD=${BUILD:-/tmp/racewatch-memcached-build}

cd "$ROOT"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch
TMP=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$TMP"' EXIT

# build NAME CFLAGS...: memcached into $BUILD/NAME (skipped when built already).
build() {
    local name=$1 dir="$BUILD/$1"
    shift
    [ -x "$dir/memcached" ] && return
    echo "== building memcached ($name): $*" >&2
    rm -rf "$dir" && mkdir -p "$dir"
    (cd "$SRC" && git archive HEAD 2> /dev/null || tar -c --exclude=.git .) | tar -x -C "$dir"
    (cd "$dir" && { [ -x configure ] || ./autogen.sh; } && ./configure CC=clang-19 CFLAGS="$*" LDFLAGS="$*" \
        && make -j"$(nproc)" memcached) > "$dir.log" 2>&1 || { echo "memcached.sh: build failed, see $dir.log" >&2; exit 1; }
}
build plain -O2 -g
# shellcheck disable=SC2046
build racewatch -O2 $("$RACEWATCH" flags --c)
build tsan -O2 -g -fsanitize=thread

cat > "$TMP/load.py" << 'PY'
import socket, sys, threading, time, random
port, seconds = int(sys.argv[1]), float(sys.argv[2])
done = [0] * 8
def worker(i):
    s = socket.create_connection(("127.0.0.1", port)); f = s.makefile("rb")
    rng = random.Random(i); end = time.time() + seconds; n = 0
    while time.time() < end:
        k = f"key{rng.randrange(1000)}"
        if rng.random() < 0.1:
            s.sendall(f"set {k} 0 0 8\r\nvalue{n % 100:03d}\r\n".encode()); f.readline()
        else:
            s.sendall(f"get {k}\r\n".encode())
            while f.readline() != b"END\r\n":
                pass
        n += 1
    done[i] = n
ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(done))
PY

declare -a LABEL CMD
for spec in $CONFIGS; do
    case $spec in
        plain) LABEL+=(plain) CMD+=("$BUILD/plain/memcached") ;;
        default) LABEL+=(default) CMD+=("$RACEWATCH run -o fail_on_race=0 -- $BUILD/racewatch/memcached") ;;
        debug) LABEL+=(debug) CMD+=("$RACEWATCH run -o fail_on_race=0 -o sample_period_us=1000 -- $BUILD/racewatch/memcached") ;;
        test) LABEL+=(test) CMD+=("$RACEWATCH run -o fail_on_race=0 -o sample_period_us=250 -o watchpoints=4 -o cold_bias=0 -- $BUILD/racewatch/memcached") ;;
        tsan) LABEL+=(tsan) CMD+=("env TSAN_OPTIONS=report_signal_unsafe=0 $BUILD/tsan/memcached") ;;
        *=*)
            rest=${spec#*=} env=""
            if [[ $rest == *@* ]]; then env="env RACEWATCH_RUNTIME=$(realpath "${rest#*@}") " rest=${rest%%@*}; fi
            LABEL+=("${spec%%=*}")
            CMD+=("$env$RACEWATCH run -o fail_on_race=0 $(sed 's/^/-o /; s/:/ -o /g' <<< "$rest") -- $BUILD/racewatch/memcached")
            ;;
        *) echo "memcached.sh: unknown configuration $spec" >&2; exit 2 ;;
    esac
done
NC=${#LABEL[@]}

# run I R: one run of configuration I; appends "cpu_us_per_op peak_kb" to $TMP/I.runs.
run() {
    local i=$1 r=$2 port=$((22200 + $1 * 10 + $2)) err="$TMP/$1.$2.err"
    # shellcheck disable=SC2086
    ${CMD[$i]} -U 0 -l 127.0.0.1 -p "$port" -t 4 -u nobody > /dev/null 2> "$err" &
    local launcher=$!
    # Wait until it accepts; the server is the newest process with these arguments (a child of
    # `racewatch run`), or the launcher itself (plain and TSan builds).
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2> /dev/null && break
        sleep 0.1
    done
    local server
    server=$(pgrep -n -f -- "-p $port -t 4" | grep -v "^$launcher$" | head -1 || true)
    [ -n "$server" ] || server=$launcher
    local ops
    ops=$(python3 "$TMP/load.py" "$port" "$SECONDS_EACH")
    local ticks hz peak
    ticks=$(awk '{ print $14 + $15 }' "/proc/$server/stat")
    peak=$(awk '/VmHWM/ { print $2 }' "/proc/$server/status")
    hz=$(getconf CLK_TCK)
    kill -TERM "$server" 2> /dev/null || true
    wait "$launcher" 2> /dev/null || true
    awk -v t="$ticks" -v hz="$hz" -v ops="$ops" -v peak="$peak" 'BEGIN { printf "%.3f %d\n", t / hz * 1e6 / ops, peak }' >> "$TMP/$i.runs"
}

for ((r = 0; r < ROUNDS; r++)); do
    for ((k = 0; k < NC; k++)); do run $(((r + k) % NC)) "$r"; done
    printf '.' >&2
done
echo >&2

median() { cut -d' ' -f"$1" "$2" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
summaries() { cat "$TMP/$1".*.err | grep -E '^SUMMARY: (racewatch|ThreadSanitizer): data race' || true; }
races() { summaries "$1" | sort -u | wc -l; }
# The source lines the SUMMARY lines name (racewatch names both accesses of a race, TSan one access per
# report): the racy places found, comparable between the two.
places() { summaries "$1" | grep -oE '[A-Za-z0-9_.-]+\.c:[0-9]+' | sort -u | wc -l; }
if [ -n "${RESULTS:-}" ]; then
    mkdir -p "$RESULTS"
    for ((i = 0; i < NC; i++)); do
        for f in "$TMP/$i".*.err; do [ -f "$f" ] && cp "$f" "$RESULTS/${LABEL[$i]}.$(basename "$f" | cut -d. -f2).err"; done
    done
fi
base=$(median 1 "$TMP/0.runs")
echo
echo "memcached ($(cd "$SRC" && git describe --tags 2> /dev/null || echo "source tree")), 4 worker threads, 8 loopback" \
    "connections (90% gets), $ROUNDS rounds x $SECONDS_EACH s per configuration, $(nproc) CPUs"
echo
printf '| %-8s | %12s | %6s | %15s | %14s | %12s |\n' config "CPU µs/op" ratio "distinct races" "source lines" "peak RSS MB"
printf '|%s|%s|%s|%s|%s|%s|\n' ---------- -------------- -------- ----------------- ---------------- --------------
for ((i = 0; i < NC; i++)); do
    cpu=$(median 1 "$TMP/$i.runs")
    peak=$(sort -n -k2 "$TMP/$i.runs" | tail -1 | cut -d' ' -f2)
    printf '| %-8s | %12s | %6.2f | %15s | %14s | %12.1f |\n' "${LABEL[$i]}" "$cpu" "$(awk -v c="$cpu" -v b="$base" 'BEGIN { print c / b }')" \
        "$(races "$i")" "$(places "$i")" "$(awk -v p="$peak" 'BEGIN { print p / 1024 }')"
done
