#!/usr/bin/env bash
# Sample yield: of the samples that land in covered code, how many arm a watch, and why
# the others do not. Runs each program once under racewatch at the debug rate with the
# cold-code bias off (every sample in covered code tries to watch), stats=1, and prints
# one row per program from the runtime's own counters.
#
# Usage (from the repo root):  bash bench/yield.sh [PROGRAM [ARGS…]]…
#   Without arguments: every demo (Rust and C), 2 seconds each. With arguments: each
#   argument is one program run as is (quote a program with its arguments: "bin --arg").
# Environment: OPTS=K=V:..   extra runtime options
# Needs: cargo, clang-19 (for the C demos), bash, awk.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OPTS=${OPTS:-}
cd "$ROOT"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch

programs=("$@")
if [ ${#programs[@]} -eq 0 ]; then
    build_demos --bins
    for src in demos/src/bin/*.rs; do
        name=$(basename "$src" .rs)
        [ "$name" = workload ] || programs+=("demos/target/release/$name 2")
    done
    if command -v clang-19 > /dev/null; then
        out=$(mktemp -d)
        for src in demos/c/*.c; do
            name=$(basename "$src" .c)
            # shellcheck disable=SC2046
            clang-19 $("$RACEWATCH" flags --c) -O2 -pthread "$src" -o "$out/$name"
            programs+=("$out/$name 2")
        done
    fi
fi

options=(-o sample_period_us=1000 -o cold_bias=0 -o stats=1)
for kv in ${OPTS//:/ }; do options+=(-o "$kv"); done

printf '%-28s %8s %7s %7s  %s\n' program covered armed yield "not armed: own stack / no access / not emulated / address unknown / left covered / busy"
for program in "${programs[@]}"; do
    # shellcheck disable=SC2086
    "$RACEWATCH" run "${options[@]}" -- $program > /dev/null 2> /tmp/racewatch-yield.$$ || true
    awk -v name="$(basename "${program%% *}")" '
        /stats: samples: / { samples = $NF }
        /samples in uncovered code/ { uncovered = $NF }
        /watches armed:/ { armed = $NF }
        /only own-stack/ { own = $NF }
        /no memory access within reach/ { none = $NF }
        /not emulated/ { unemulated = $NF }
        /unknown address/ { unknown = $NF }
        /left covered code/ { left = $NF }
        /every watchpoint busy/ { busy = $NF }
        END {
            covered = samples - uncovered
            y = covered ? sprintf("%.1f%%", 100 * armed / covered) : "-"
            printf "%-28s %8d %7d %7s  %d / %d / %d / %d / %d / %d\n", name, covered, armed, y, own, none, unemulated, unknown, left, busy
        }' /tmp/racewatch-yield.$$
done
rm -f /tmp/racewatch-yield.$$
