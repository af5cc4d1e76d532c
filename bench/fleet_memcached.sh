#!/usr/bin/env bash
# A small fleet: N memcached processes, each on its own "host" (the runtime's host= option),
# under load from loopback clients, all with the production profile (symbolize=0,
# log_path=DIR/, JSON reports), then one `racewatch triage` over the logs. Prints the
# samples and watches the fleet spent and the distinct races the store ranks.
#
# Usage (from the repo root):
#   bash bench/fleet_memcached.sh MEMCACHED [PROCESSES=4] [SECONDS=120] [SAMPLE_PERIOD_US=100000]
#   MEMCACHED: a memcached binary built with racewatch's metadata, e.g. in a memcached 1.6
#   checkout: ./configure CC=clang-19 CFLAGS="$(racewatch flags c)" && make
# Environment: DB=PATH|postgres://… (default: a fresh SQLite file in the output directory),
#   OUT=DIR (default: a temporary directory), DEBUG_DIR=DIR (separate debug files).
# Needs: python3, a built racewatch (cargo build --release), perf events with breakpoints.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MEMCACHED=${1:?usage: bench/fleet_memcached.sh MEMCACHED [PROCESSES] [SECONDS] [SAMPLE_PERIOD_US]}
PROCESSES=${2:-4}
SECONDS_EACH=${3:-120}
PERIOD=${4:-100000}
OUT=${OUT:-$(mktemp -d /tmp/racewatch-fleet.XXXXXX)}
DB=${DB:-$OUT/racewatch.db}
cd "$ROOT"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch
RUNTIME=$("$RACEWATCH" runtime-path)
mkdir -p "$OUT/logs"
# memcached started as root runs as `nobody`: the log directory must be writable for it.
chmod 1777 "$OUT/logs"

# One loopback client load: 4 connections doing set/get/multi-get/incr for SECONDS_EACH.
cat > "$OUT/load.py" <<'PY'
import socket, threading, time, sys
port, secs = int(sys.argv[1]), float(sys.argv[2])
def worker(i):
    s = socket.create_connection(("127.0.0.1", port)); f = s.makefile("rb")
    end, n = time.time() + secs, 0
    while time.time() < end:
        k = f"k{i}_{n % 500}"
        s.sendall(f"set {k} 0 0 5\r\nhello\r\n".encode()); f.readline()
        s.sendall(f"get {k} k{(i + 1) % 4}_{n % 500}\r\n".encode())
        while f.readline() != b"END\r\n":
            pass
        s.sendall(b"incr ctr 1\r\n"); f.readline()
        n += 1
s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"set ctr 0 0 1\r\n0\r\n"); s.recv(100)
ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
PY

pids=()
for i in $(seq 1 "$PROCESSES"); do
    port=$((21210 + i))
    RACEWATCH_OPTIONS="symbolize=0:report_format=json:log_path=$OUT/logs/:host=host-$i:stats=1:sample_period_us=$PERIOD" \
        LD_PRELOAD="$RUNTIME" "$MEMCACHED" -U 0 -p "$port" -t 4 -u nobody > /dev/null 2>&1 &
    pids+=($!)
done
sleep 1
for i in $(seq 1 "$PROCESSES"); do
    python3 "$OUT/load.py" $((21210 + i)) "$SECONDS_EACH" &
done
wait_for_clients() { while [ "$(jobs -rp | wc -l)" -gt "$PROCESSES" ]; do sleep 1; done; }
wait_for_clients
kill -TERM "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true

sum() { cat "$OUT"/logs/* 2>/dev/null | awk -v l="$1" -F': ' 'index($0, "racewatch: stats: " l ": ") == 1 { s += $NF } END { print s + 0 }'; }
echo "fleet: $PROCESSES processes x ${SECONDS_EACH} s, sample_period_us=$PERIOD"
echo "fleet: samples $(sum samples), watches armed $(sum 'watches armed'), reports $(cat "$OUT"/logs/* 2>/dev/null | grep -c '"kind":"data_race"' || true)"
debug=()
[ -n "${DEBUG_DIR:-}" ] && debug=(--debug-dir "$DEBUG_DIR")
"$RACEWATCH" triage --db "$DB" "${debug[@]}" "$OUT/logs"
echo "fleet: logs and store in $OUT"
