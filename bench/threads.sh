#!/usr/bin/env bash
# What each profile costs as the thread count grows, on a clean streaming workload (bench/threads.c:
# each thread streams over its own 1 MiB buffer and takes a mutex once per round; nothing to race on;
# the same work per thread at every thread count).
#
# For each thread count, every round runs every configuration once, in a rotating order (drifting
# machine load hits all alike): without racewatch, at the default options, at the debug rate
# (sample_period_us=1000) and with the test profile (sample_period_us=250:watchpoints=4:cold_bias=0).
# Prints per thread count and configuration the median wall and CPU time (user+sys, and sys alone)
# and their ratios to the run without racewatch of the same thread count, plus the watches armed per
# run and the mean cost of one watch (stats=1).
#
# Usage (from the repo root):  bash bench/threads.sh
# Environment: THREADS="1 2 4"  thread counts (the issue's figures: 1, 4 and 16 on 16 cores)
#              ROUNDS=N         timed rounds per thread count (default 5)
#              WORK=N           stream rounds per thread (default 4000: ~0.5 s of CPU per thread here)
#              CONFIGS="…"      default "plain default debug test"; NAME=K=V:K=V[@RUNTIME.so] adds one
#              EXTRA_OPTS=K=V:..  extra options for every racewatch configuration
#              RACEWATCH_BIN=PATH, THREADS_BIN=PATH  prebuilt CLI and bench/threads.c (no cargo or clang then)
# Needs: clang-19, cargo, awk, sort.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
THREADS=${THREADS:-1 2 4}
ROUNDS=${ROUNDS:-5}
WORK=${WORK:-4000}
CONFIGS=${CONFIGS:-plain default debug test}
EXTRA_OPTS=${EXTRA_OPTS:-}

cd "$ROOT"
echo "== building racewatch (release) and bench/threads.c" >&2
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# shellcheck disable=SC2046
if [ -n "${THREADS_BIN:-}" ]; then
    cp "$THREADS_BIN" "$TMP/threads"
else
    clang-19 -O2 $("$RACEWATCH" flags --c) -pthread bench/threads.c -o "$TMP/threads"
fi

declare -a LABEL OPTS RUNTIME
for spec in $CONFIGS; do
    case $spec in
        plain) LABEL+=(plain) OPTS+=("") RUNTIME+=("") ;;
        default) LABEL+=(default) OPTS+=("stats=1") RUNTIME+=("") ;;
        debug) LABEL+=(debug) OPTS+=("stats=1:sample_period_us=1000") RUNTIME+=("") ;;
        test) LABEL+=(test) OPTS+=("stats=1:sample_period_us=250:watchpoints=4:cold_bias=0") RUNTIME+=("") ;;
        *=*)
            rest=${spec#*=} runtime=""
            if [[ $rest == *@* ]]; then runtime=$(realpath "${rest#*@}") rest=${rest%%@*}; fi
            LABEL+=("${spec%%=*}") OPTS+=("stats=1:$rest") RUNTIME+=("$runtime")
            ;;
        *) echo "threads.sh: unknown configuration $spec" >&2; exit 2 ;;
    esac
done
NC=${#LABEL[@]}

# run I THREADS R: one timed run of configuration I; appends "wall cpu sys" to $TMP/I.THREADS.times.
run() {
    local i=$1 n=$2 r=$3 out="$TMP/$1.$2.$3"
    local -a cmd=("$TMP/threads" "$n" "$WORK") env=()
    if [ "${LABEL[$i]}" != plain ]; then
        local -a rw=("$RACEWATCH" run -o fail_on_race=0)
        local kv
        for kv in ${OPTS[$i]//:/ } ${EXTRA_OPTS//:/ }; do rw+=(-o "$kv"); done
        cmd=("${rw[@]}" -- "${cmd[@]}")
        [ -n "${RUNTIME[$i]}" ] && env=("RACEWATCH_RUNTIME=${RUNTIME[$i]}")
    fi
    local TIMEFORMAT='%3R %3U %3S'
    { time env "${env[@]}" "${cmd[@]}" > "$out.out" 2> "$out.err"; } 2> "$out.time"
    awk '{ printf "%s %.3f %s\n", $1, $2 + $3, $3 }' "$out.time" >> "$TMP/$i.$n.times"
    if grep -q 'WARNING: racewatch' "$out.err"; then
        echo "threads.sh: a race report on the clean workload ($out.err)" >&2
        cat "$out.err" >&2
        exit 1
    fi
}

median() { cut -d' ' -f"$1" "$2" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
stat() { cat "$TMP/$1.$2".[0-9]*.err 2> /dev/null | awk -v label="racewatch: stats: $3: " 'index($0, label) == 1 { s += substr($0, length(label) + 1) } END { print s + 0 }'; }

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $THREADS; do
    echo "== $n thread(s): $ROUNDS rounds x $NC configurations" >&2
    for ((r = 0; r < ROUNDS; r++)); do
        for ((k = 0; k < NC; k++)); do run $(((r + k) % NC)) "$n" "$r"; done
        printf '.' >&2
    done
    echo >&2
done

echo
echo "bench/threads.c, $WORK rounds per thread over 1 MiB each, $ROUNDS runs per cell, $(nproc) CPUs, load average" \
    "at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
printf '| %7s | %-10s | %7s | %6s | %7s | %6s | %6s | %9s | %9s | %13s |\n' threads config "wall s" ratio "CPU s" ratio "sys s" \
    "watches" "us/watch" "us arm+disarm"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' --------- ------------ --------- -------- --------- -------- -------- ----------- ----------- ---------------
for n in $THREADS; do
    base_wall=$(median 1 "$TMP/0.$n.times")
    base_cpu=$(median 2 "$TMP/0.$n.times")
    for ((i = 0; i < NC; i++)); do
        wall=$(median 1 "$TMP/$i.$n.times")
        cpu=$(median 2 "$TMP/$i.$n.times")
        sys=$(median 3 "$TMP/$i.$n.times")
        watches=$(stat "$i" "$n" "watches armed")
        watch_ns=$(stat "$i" "$n" "ns in armed watch windows")
        arm_ns=$(stat "$i" "$n" "ns arming and disarming watchpoints")
        awk -v n="$n" -v l="${LABEL[$i]}" -v w="$wall" -v bw="$base_wall" -v c="$cpu" -v bc="$base_cpu" -v s="$sys" \
            -v wa="$watches" -v wn="$watch_ns" -v an="$arm_ns" -v rounds="$ROUNDS" 'BEGIN {
            printf "| %7d | %-10s | %7.2f | %6.2f | %7.2f | %6.2f | %6.2f | %9.0f | %9s | %13s |\n", n, l, w, w / bw, c, c / bc, s,
                wa / rounds, (wa > 0 ? sprintf("%.0f", wn / wa / 1000) : "-"), (wa > 0 ? sprintf("%.1f", an / wa / 1000) : "-")
        }'
    done
done
echo
for ((i = 0; i < NC; i++)); do
    [ "${LABEL[$i]}" = plain ] || echo "${LABEL[$i]}: -o ${OPTS[$i]//:/ -o }${EXTRA_OPTS:+ (+ $EXTRA_OPTS)}${RUNTIME[$i]:+ with ${RUNTIME[$i]}}"
done
