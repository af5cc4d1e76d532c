#!/usr/bin/env bash
# Overhead of racewatch on a multi-threaded, memory-heavy workload
# (demos/src/bin/workload.rs: 2 threads streaming over 8 MiB each, fixed work).
#
# Builds racewatch and the demos (release), then runs the workload without the
# runtime, with it but sampling off (a control for the noise floor), at the
# default sampling rate, at the debug rate (sample_period_us=1000), with the
# profile `racewatch cargo` gives test programs (sample_period_us=250,
# watchpoints=4, cold_bias=0), and at the debug rate with run-time coverage
# counting (coverage_path=…),
# interleaved: every round runs all six, in a
# rotating order, so drifting machine load hits every configuration alike.
# Prints the median wall time per configuration, its ratio to the baseline and
# min/max, and the cost of one sample and one armed watch measured by the
# runtime itself (stats=1 counters, summed over all runs).
#
# Usage (from the repo root):  bash bench/overhead.sh
# Environment: ROUNDS=N       timed rounds (default 10)
#              WORK=N         workload rounds argument (default: the demo's own, 1500)
#              EXTRA_OPTS=..  extra runtime options for both racewatch configurations,
#                             KEY=VALUE separated by ':', e.g. EXTRA_OPTS="delay_us=50"
# Needs: cargo, bash, awk, sort. CARGO_TARGET_DIR is honoured for racewatch.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-10}
WORK=${WORK:-}
EXTRA_OPTS=${EXTRA_OPTS:-}
DEBUG_PERIOD_US=1000
# What `racewatch cargo` sets for the programs it runs (src/commands/cargo.rs, TEST_PROFILE).
TEST_PROFILE="sample_period_us=250 watchpoints=4 cold_bias=0"

cd "$ROOT"
echo "== building racewatch (release)" >&2
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch

echo "== building the demos (release, metadata flags from demos/.cargo/config.toml)" >&2
build_demos --bin workload
WORKLOAD="$ROOT/demos/target/release/workload"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

CONFIGS=(baseline control default debug tests coverage)
# The control preloads racewatch with sampling effectively off: what it costs
# over the baseline is the noise floor of this machine, not sampling.
CONTROL_PERIOD_US=60000000
# Runtime options of a configuration, one KEY=VALUE per word.
opts_for() {
    local opts="stats=1"
    [ "$1" = debug ] && opts="$opts sample_period_us=$DEBUG_PERIOD_US"
    [ "$1" = tests ] && opts="$opts $TEST_PROFILE"
    [ "$1" = coverage ] && opts="$opts sample_period_us=$DEBUG_PERIOD_US coverage_path=$TMP/profile"
    [ "$1" = control ] && opts="$opts sample_period_us=$CONTROL_PERIOD_US"
    echo "$opts ${EXTRA_OPTS//:/ }"
}

# run CONFIG I: one timed run; appends "wall user+sys" to $TMP/CONFIG.times,
# keeps stdout (checksum) and stderr (stats) per run.
run() {
    local config=$1 i=$2 out="$TMP/$1.$2"
    local -a cmd=("$WORKLOAD")
    [ -n "$WORK" ] && cmd+=("$WORK")
    if [ "$config" != baseline ]; then
        local -a rw=("$RACEWATCH" run)
        for opt in $(opts_for "$config"); do rw+=(-o "$opt"); done
        cmd=("${rw[@]}" -- "${cmd[@]}")
    fi
    local TIMEFORMAT='%3R %3U %3S'
    { time "${cmd[@]}" >"$out.out" 2>"$out.err"; } 2>"$out.time"
    awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$out.time" >>"$TMP/$config.times"
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== warm-up" >&2
run baseline warm >/dev/null
: >"$TMP/baseline.times"

echo "== $ROUNDS rounds x ${#CONFIGS[@]} configurations, interleaved" >&2
for ((i = 0; i < ROUNDS; i++)); do
    for ((k = 0; k < ${#CONFIGS[@]}; k++)); do
        run "${CONFIGS[$(((i + k) % ${#CONFIGS[@]}))]}" "$i"
    done
    printf '.' >&2
done
echo >&2

# The program's output must not change under racewatch.
expected=$(cat "$TMP/baseline.0.out")
for f in "$TMP"/*.out; do
    if [ "$(cat "$f")" != "$expected" ]; then
        echo "overhead.sh: output differs under racewatch: $f: $(cat "$f") vs $expected" >&2
        exit 1
    fi
done

# median COLUMN FILE
median() { cut -d' ' -f"$1" "$2" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minmax() { cut -d' ' -f"$1" "$2" | sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f / %.2f", lo, hi }'; }
# stat CONFIG LABEL: sum of one stats counter over that configuration's runs
stat() { cat "$TMP/$1".[0-9]*.err | awk -v label="racewatch: stats: $2: " 'index($0, label) == 1 { s += substr($0, length(label) + 1) } END { print s + 0 }'; }

base_wall=$(median 1 "$TMP/baseline.times")
base_cpu=$(median 2 "$TMP/baseline.times")
echo
echo "workload: $WORKLOAD ${WORK:-(default rounds)}, $ROUNDS runs per configuration, $(nproc) CPUs," \
    "load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '| %-34s | %8s | %7s | %13s | %9s | %7s |\n' configuration "median s" ratio "min / max s" "median CPU s" "CPU ratio"
printf '|%s|%s|%s|%s|%s|%s|\n' ------------------------------------ ---------- --------- --------------- -------------- -----------
for config in "${CONFIGS[@]}"; do
    case $config in
        baseline) label="without racewatch" ;;
        control) label="racewatch, sampling off (control)" ;;
        default) label="racewatch, default options" ;;
        debug) label="racewatch, sample_period_us=$DEBUG_PERIOD_US" ;;
        tests) label="racewatch cargo's test profile" ;;
        coverage) label="the same + coverage_path" ;;
    esac
    [ -n "$EXTRA_OPTS" ] && [ "$config" != baseline ] && label="$label:$EXTRA_OPTS"
    wall=$(median 1 "$TMP/$config.times")
    cpu=$(median 2 "$TMP/$config.times")
    printf '| %-34s | %8.2f | %7.3f | %13s | %12.2f | %9.3f |\n' "$label" "$wall" \
        "$(awk -v a="$wall" -v b="$base_wall" 'BEGIN { print a / b }')" "$(minmax 1 "$TMP/$config.times")" \
        "$cpu" "$(awk -v a="$cpu" -v b="$base_cpu" 'BEGIN { print a / b }')"
done
echo
echo "cost measured inside the runtime (stats=1, summed over each configuration's runs):"
for config in default debug tests coverage; do
    samples=$(stat "$config" samples)
    watches=$(stat "$config" "watches armed")
    sample_ns=$(stat "$config" "ns in sample handlers (with windows)")
    watch_ns=$(stat "$config" "ns in armed watch windows")
    arm_ns=$(stat "$config" "ns arming and disarming watchpoints")
    awk -v c="$config" -v n="$ROUNDS" -v s="$samples" -v w="$watches" -v sn="$sample_ns" -v wn="$watch_ns" -v an="$arm_ns" \
        -v bw="$base_wall" -v bc="$base_cpu" 'BEGIN {
        if (s == 0) { printf "  %-8s no samples\n", c; exit }
        printf "  %-8s %6.0f samples/run (%4.0f per CPU-second), %3.0f%% armed; one sample %6.1f us outside its window;",
            c, s / n, s / n / bc, 100 * w / s, (sn - wn) / s / 1000
        if (w > 0) printf " one armed watch %7.1f us (arm+disarm ioctls %6.1f us)", wn / w / 1000, an / w / 1000
        printf "\n"
    }'
done

# All-in CPU cost of one sample (signal delivery, thinned-out signals, handler, ioctls and their IPIs, cache
# refills after the stall), from the debug rate where it stands out of the noise; scaled to the default rate.
debug_samples=$(stat debug samples)
default_samples=$(stat default samples)
awk -v n="$ROUNDS" -v ds="$debug_samples" -v fs="$default_samples" -v dc="$(median 2 "$TMP/debug.times")" \
    -v bc="$base_cpu" 'BEGIN {
    if (ds == 0) exit
    per = (dc - bc) / (ds / n)
    printf "all-in CPU cost of one sample at the debug rate: (median CPU with - without) / samples = %.0f us\n", per * 1e6
    printf "=> predicted CPU overhead at the default rate (%.0f samples per CPU-second): %.2f%%\n", fs / n / bc, 100 * per * fs / n / bc
}'
