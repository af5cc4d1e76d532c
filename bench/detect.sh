#!/usr/bin/env bash
# Time to detection: for each racy demo, how long until the first race report at
# the default options (plus any OPTS), over N runs each, with halt_on_error=1 so a
# run ends at its first report. Prints, per demo, the median, min and max time to
# the first report and how many runs found nothing within the time limit, and the
# sample yield the runtime measured (stats=1) over those runs.
#
# Usage (from the repo root):  bash bench/detect.sh
# Environment: RUNS=N        runs per demo (default 10)
#              LIMIT=S       seconds a run may race before it counts as a miss (default 30)
#              OPTS=K=V:..   extra runtime options (e.g. OPTS=sample_period_us=100000)
#              DEMOS="a b"   which racy demos (default: every demos/src/bin/racy_*.rs)
# Needs: cargo, bash, awk, sort, date.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-10}
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

options=(-o halt_on_error=1 -o stats=1)
for kv in ${OPTS//:/ }; do options+=(-o "$kv"); done

printf '%-18s %6s %9s %9s %9s %7s %8s\n' demo runs "median s" "min s" "max s" missed yield
for demo in $DEMOS; do
    : > "$TMP/$demo.times"
    missed=0 armed=0 covered=0
    for i in $(seq "$RUNS"); do
        start=$(date +%s.%N)
        status=0
        "$RACEWATCH" run "${options[@]}" -- "demos/target/release/$demo" "$LIMIT" \
            > /dev/null 2> "$TMP/err" || status=$?
        end=$(date +%s.%N)
        if grep -q 'WARNING: racewatch: data race' "$TMP/err"; then
            awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f\n", e - s }' >> "$TMP/$demo.times"
        else
            missed=$((missed + 1))
        fi
        read -r a c < <(awk '/sample yield:/ { gsub(/[()]/, ""); print $6, $10 }' "$TMP/err")
        armed=$((armed + ${a:-0})) covered=$((covered + ${c:-0}))
        [ "$status" = 66 ] || [ "$status" = 0 ] || echo "   $demo run $i: exit status $status" >&2
    done
    sort -n "$TMP/$demo.times" | awk -v demo="$demo" -v runs="$RUNS" -v missed="$missed" \
        -v armed="$armed" -v covered="$covered" '
        { t[NR] = $1 }
        END {
            yield = covered ? sprintf("%.1f%%", 100 * armed / covered) : "-"
            if (NR == 0) { printf "%-18s %6d %9s %9s %9s %7d %8s\n", demo, runs, "-", "-", "-", missed, yield; exit }
            median = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
            printf "%-18s %6d %9.2f %9.2f %9.2f %7d %8s\n", demo, runs, median, t[1], t[NR], missed, yield
        }'
done
