#!/usr/bin/env bash
# Ingest speed of `racewatch triage`: LINES report lines (default 1,000,000) derived from one real JSON
# report of the racy_counter demo in the production profile (report_format=json, symbolize=0), as a
# fleet writes them: processes (host, pid, start_time) that each report 1-4 of RACES (default 2,000)
# distinct races (race_key and source_key varied per race, two race_keys per source_key), and a
# race_count line for some of those. Ingests the log into a fresh SQLite store and, when PostgreSQL's
# binaries are installed, into a fresh PostgreSQL server started for the run; prints lines/s, MB/s and
# the store's size. Then lists the races once (the view's time over the whole store).
#
# Usage (from the repo root):  bash bench/triage_ingest.sh [LINES [RACES]]
# Environment: KEEP=1 keeps the work directory (printed).
# Needs: cargo, rustc, and for PostgreSQL /usr/lib/postgresql/*/bin (initdb, pg_ctl).

set -euo pipefail

LINES=${1:-1000000}
RACES=${2:-2000}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch
build_demos --bin racy_counter

WORK=$(mktemp -d /tmp/racewatch-triage-bench.XXXXXX)
PG_DATA=""
cleanup() {
    if [ -n "$PG_DATA" ] && [ -f "$PG_DATA/postmaster.pid" ]; then
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate stop > /dev/null 2>&1 || true
    fi
    if [ "${KEEP:-0}" = 1 ]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# PostgreSQL refuses to run as root: then its commands run as nobody.
as_pg() {
    if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; else "$@"; fi
}

# 1. One real report of the production profile (retried: detection is sampling).
for attempt in 1 2 3 4 5 6; do
    "$RACEWATCH" run -o sample_period_us=1000 -o report_format=json -o symbolize=0 -- \
        demos/target/release/racy_counter 2 > /dev/null 2> "$WORK/real.log" || true
    grep -q '"kind":"data_race"' "$WORK/real.log" && break
done
grep -q '"kind":"data_race"' "$WORK/real.log" || { echo "no report from racy_counter after 6 runs" >&2; exit 1; }

# 2. The fleet's log.
rustc -O --edition 2021 -o "$WORK/triage_gen" bench/triage_gen.rs
start=$(date +%s.%N)
"$WORK/triage_gen" "$LINES" "$RACES" < "$WORK/real.log" > "$WORK/fleet.log"
end=$(date +%s.%N)
bytes=$(stat -c %s "$WORK/fleet.log")
printf 'generated %d lines (%d MB, template report %d bytes) in %.1f s\n' "$LINES" $((bytes >> 20)) \
    "$(grep -m1 '"kind":"data_race"' "$WORK/real.log" | wc -c)" "$(echo "$end - $start" | bc)"
cat "$WORK/fleet.log" > /dev/null # in the page cache: the disk is not measured

ingest() { # name db
    local name=$1 db=$2
    local start end secs
    start=$(date +%s.%N)
    "$RACEWATCH" triage --quiet --db "$db" "$WORK/fleet.log" 2> "$WORK/$name.err" || { cat "$WORK/$name.err" >&2; exit 1; }
    end=$(date +%s.%N)
    secs=$(echo "$end - $start" | bc)
    printf '%-10s ingest: %8.0f lines/s  %6.1f MB/s  (%.2f s)   %s\n' "$name" "$(echo "$LINES / $secs" | bc -l)" \
        "$(echo "$bytes / 1048576 / $secs" | bc -l)" "$secs" "$(tail -1 "$WORK/$name.err")"
    start=$(date +%s.%N)
    "$RACEWATCH" triage --db "$db" > "$WORK/$name.races"
    end=$(date +%s.%N)
    printf '%-10s view:   %d races listed in %.2f s\n' "$name" $(($(wc -l < "$WORK/$name.races") - 1)) \
        "$(echo "$end - $start" | bc)"
    start=$(date +%s.%N)
    "$RACEWATCH" triage --quiet --db "$db" "$WORK/fleet.log" 2> "$WORK/$name.err2"
    end=$(date +%s.%N)
    printf '%-10s again:  %.2f s (idempotent: %s)\n' "$name" "$(echo "$end - $start" | bc)" "$(tail -1 "$WORK/$name.err2")"
}

# 3. SQLite.
ingest sqlite "$WORK/bench.db"
size=$(du -cb "$WORK"/bench.db* | tail -1 | cut -f1)
printf 'sqlite     store: %d MB (%d bytes per line)\n' $((size >> 20)) $((size / LINES))

# 4. PostgreSQL, when installed.
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2> /dev/null | sort -V | tail -1 || true)
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
    echo "postgresql: not installed (apt-get install postgresql); skipped"
    exit 0
fi
PG_DATA="$WORK/pg"
mkdir -p "$PG_DATA"
[ "$(id -u)" = 0 ] && chown -R 65534:65534 "$WORK" && chmod 755 "$WORK"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U racewatch -A trust > "$WORK/initdb.log"
as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$WORK/pg.log" -w \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$PG_DATA -c fsync=on" start > /dev/null
ingest postgres "postgres://racewatch@127.0.0.1:$port/postgres"
size=$(as_pg "$(command -v psql || echo "$PG_BIN/psql")" -h 127.0.0.1 -p "$port" -U racewatch -d postgres -Atc \
    "SELECT pg_database_size('postgres')" 2> /dev/null || echo 0)
printf 'postgres   store: %d MB (%d bytes per line)\n' $((size >> 20)) $((size / LINES))
