#!/usr/bin/env bash
# Two builds of the runtime side by side, in one run: time to the first race report on each racy
# demo (halt_on_error=1, as bench/detect.sh), the mean handler time per kept sample and the sample
# yield (stats=1), with runs of A and B interleaved (ABAB…, B first on odd rounds) so that whatever
# else the machine does weighs on both alike.
#
# Usage (from the repo root):  bash bench/compare.sh OLD.so NEW.so
#   e.g. build the runtime of another commit with
#   git worktree add /tmp/old REV && (cd /tmp/old && cargo build --release -p racewatch-runtime \
#       --lib --features preload) && bash bench/compare.sh /tmp/old/target/release/libracewatch.so \
#       "$(target/release/racewatch runtime-path)"
# Environment: RUNS=N (default 6) rounds per demo, LIMIT=S (default 30) seconds before a miss,
#              OPTS=K=V:.. extra options, DEMOS="a b" (default: every racy_*.rs demo).
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: bash bench/compare.sh A.so B.so" >&2; exit 2; }
A=$(realpath "$1") B=$(realpath "$2")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-6}
LIMIT=${LIMIT:-30}
OPTS=${OPTS:-}

cd "$ROOT"
echo "== building racewatch and the demos (release)" >&2
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch
build_demos --bins
DEMOS=${DEMOS:-$(ls demos/src/bin | sed -n 's/^\(racy_.*\)\.rs$/\1/p')}

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
options=(-o halt_on_error=1 -o stats=1 -o fail_on_race=0)
for kv in ${OPTS//:/ }; do options+=(-o "$kv"); done

# One run of $demo under runtime $1 (A or B): appends "seconds" (or "miss"), "ns per sample" and
# "armed covered" to $TMP/$demo.$1.
run_one() {
    local which=$1 so=$A start end
    [ "$which" = B ] && so=$B
    start=$(date +%s.%N)
    RACEWATCH_RUNTIME="$so" "$RACEWATCH" run "${options[@]}" -- "demos/target/release/$demo" "$LIMIT" \
        > /dev/null 2> "$TMP/err" || true
    end=$(date +%s.%N)
    if grep -q 'WARNING: racewatch: data race' "$TMP/err"; then
        awk -v s="$start" -v e="$end" 'BEGIN { printf "time %.3f\n", e - s }' >> "$TMP/$demo.$which"
    else
        echo "time miss" >> "$TMP/$demo.$which"
    fi
    awk '/mean ns per sample:/ { print "ns", $NF }
         /sample yield:/ { gsub(/[()]/, ""); print "yield", $6, $10 }' "$TMP/err" >> "$TMP/$demo.$which"
}

summary() {
    local median
    median=$(awk '$1 == "time" && $2 != "miss" { print $2 }' "$1" | sort -n | awk '
        { t[NR] = $1 } END { if (NR == 0) print "-"; else printf "%.2f", NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }')
    awk -v label="$2" -v demo="$3" -v median="$median" '
        $1 == "time" && $2 == "miss" { missed++ }
        $1 == "ns" { ns += $2; k++ }
        $1 == "yield" { armed += $2; covered += $3 }
        END {
            yield = covered ? sprintf("%.1f%%", 100 * armed / covered) : "-"
            printf "%-20s %-3s %9s %7d %12s %8s\n", demo, label, median, missed, k ? sprintf("%.0f", ns / k) : "-", yield
        }' "$1"
}

printf '%-20s %-3s %9s %7s %12s %8s\n' demo rt "median s" missed "ns/sample" yield
for demo in $DEMOS; do
    : > "$TMP/$demo.A"
    : > "$TMP/$demo.B"
    for round in $(seq "$RUNS"); do
        if [ $((round % 2)) = 1 ]; then run_one B; run_one A; else run_one A; run_one B; fi
    done
    summary "$TMP/$demo.A" A "$demo"
    summary "$TMP/$demo.B" B "$demo"
done
echo "A = $A"
echo "B = $B"
