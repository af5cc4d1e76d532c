#!/usr/bin/env bash
# Recall and false reports on LLNL's DataRaceBench (the C micro-benchmarks), racewatch side by side
# with ThreadSanitizer, in one run.
#
# Builds every C micro-benchmark of a DataRaceBench checkout except GPU offload (`omp target`,
# `teams`) and SIMD-only programs (no parallel, task or worksharing construct): 87 racy (`-yes`) and
# 85 race-free (`-no`) programs at LLNL/dataracebench e1bffc5. Each program's `main` is renamed
# (`-Dmain=drb_main`) and called in a loop by a small driver until SECONDS have passed (the process
# is started again when the program exits by itself before that); OMP_NUM_THREADS=2. Programs run
# one at a time (JOBS=N: up to N at once), and for each program every configuration runs in turn
# (drifting machine load hits all alike). A racy program counts as found by a configuration when it printed at least one report
# within SECONDS (the run stops at the first: halt_on_error=1); a race-free program with a report is a
# false report. Prints one row per program, then per configuration: recall (racy programs with a
# report / racy programs), false reports (race-free programs with a report / race-free programs), the
# median time to the first report, and the cost: main() calls completed per second on the race-free
# programs, relative to `plain` (geometric mean of the per-program ratios).
#
# Usage (from the repo root):  bash bench/dataracebench.sh DRB_CHECKOUT [SECONDS [PATTERN…]]
#   DRB_CHECKOUT  a DataRaceBench checkout (its micro-benchmarks/ directory is used)
#   SECONDS       time per program and configuration (default 2; the figures in issue 24 used 10 s
#                 on a 16-core machine, 12 programs at once; this project's VM has 2 cores)
#   PATTERN       only programs whose file name contains one of them (e.g. DRB001 antidep -yes)
# Environment:
#   CONFIGS="…"   configurations, in order (default "plain test tsan"):
#                   plain   the racewatch build without the runtime (the cost baseline)
#                   test    racewatch run, the test profile: sample_period_us=250:watchpoints=4:cold_bias=0
#                   debug   racewatch run -o sample_period_us=1000 (one watchpoint, the bias on)
#                   tsan    clang-19 -fsanitize=thread -fopenmp, with Archer (libarcher.so as the OMPT
#                           tool) when it is found; without it TSan reports libomp's synchronisation as
#                           races (false reports), which the summary notes
#                   NAME=OPTS[@RUNTIME.so]   racewatch run with these options (K=V:K=V), optionally with
#                           another build of the runtime (RACEWATCH_RUNTIME), labelled NAME
#   OPTS=K=V:..   extra runtime options for every racewatch configuration
#   CFLAGS_OPT    optimisation flags for every build (default "-O2"); the same for racewatch and TSan
#   BUILD=DIR     where the programs are built (default /tmp/racewatch-drb-build; reused when the
#                 source and flags did not change)
#   RESULTS=DIR   keep each run's stderr (first 400 lines) and the table there (default: a temp dir,
#                 removed at the end)
#   ARCHER=PATH   libarcher.so (default: found under /usr/lib/llvm-19)
#   JOBS=N        run up to N programs at once (default 1); rows still come out in program order
#   PREBUILT=1    use the programs already in BUILD (BUILD/rw/NAME, BUILD/tsan/NAME) as they are, without
#                 a compiler; a program missing there counts as not built. With RACEWATCH_BIN (a
#                 prebuilt CLI, see bench/lib.sh) this runs on a machine without clang or cargo;
#                 libomp.so.5 must be on the library path (LD_LIBRARY_PATH), libarcher.so given as ARCHER
# Needs: clang-19 (libclang-rt-19-dev for TSan, libomp-19-dev), cargo, awk, timeout.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
DRB=$(cd "$1" && pwd)/micro-benchmarks
shift
SECONDS_PER=${1:-2}
[ $# -ge 1 ] && shift
PATTERNS=("$@")
CONFIGS=${CONFIGS:-plain test tsan}
OPTS=${OPTS:-}
CFLAGS_OPT=${CFLAGS_OPT:--O2}
BUILD=${BUILD:-/tmp/racewatch-drb-build}
CC=${CC:-clang-19}
JOBS=${JOBS:-1}
PREBUILT=${PREBUILT:-0}
[ -d "$DRB" ] || { echo "dataracebench.sh: no micro-benchmarks/ in the checkout" >&2; exit 2; }
[ "$PREBUILT" = 1 ] || command -v "$CC" > /dev/null || { echo "dataracebench.sh: $CC not found" >&2; exit 2; }

cd "$ROOT"
echo "== building racewatch (release)" >&2
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch || exit 1
read -r -a RW_CFLAGS <<< "$("$RACEWATCH" flags --c)"

if [ -n "${RESULTS:-}" ]; then
    mkdir -p "$RESULTS"
    OUT=$(cd "$RESULTS" && pwd)
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
else
    TMP=$(mktemp -d)
    OUT=$TMP
    trap 'rm -rf "$TMP"' EXIT
fi

ARCHER=${ARCHER:-$(ls /usr/lib/llvm-19/lib/libarcher.so 2> /dev/null || true)}
# A snapshot of the CLI and its runtime: a rebuild while this runs does not change what is measured.
cp "$RACEWATCH" "$TMP/racewatch"
cp "$("$RACEWATCH" runtime-path)" "$TMP/libracewatch.so"
RACEWATCH=$TMP/racewatch
RUNTIME_DEFAULT=$TMP/libracewatch.so

# The selection: C programs, no offload, not SIMD-only.
select_programs() {
    local f name
    for f in "$DRB"/DRB*.c; do
        name=$(basename "$f" .c)
        case $name in *-yes | *-no) ;; *) continue ;; esac
        grep -Eq 'omp[[:space:]]+(target|teams|declare[[:space:]]+target)' "$f" && continue
        grep -Eq 'omp[[:space:]]+(parallel|task|for|sections|single)' "$f" || continue
        if [ ${#PATTERNS[@]} -gt 0 ]; then
            local p hit=0
            for p in "${PATTERNS[@]}"; do [[ $name == *"$p"* ]] && hit=1; done
            [ $hit = 1 ] || continue
        fi
        echo "$name"
    done
}
mapfile -t PROGRAMS < <(select_programs)
[ ${#PROGRAMS[@]} -gt 0 ] || { echo "dataracebench.sh: no program selected" >&2; exit 2; }

# The driver: calls the program's main until the time is up, then appends the number of calls to
# $DRB_LOOP_COUNT_FILE.
mkdir -p "$BUILD"
cat > "$BUILD/driver.c" << 'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int drb_main(int, char **);
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    const char *s = getenv("DRB_LOOP_SECONDS");
    double end = now() + (s ? atof(s) : 0);
    long calls = 0;
    int rc;
    do {
        rc = drb_main(argc, argv);
        calls++;
    } while (now() < end);
    const char *f = getenv("DRB_LOOP_COUNT_FILE");
    FILE *o = f ? fopen(f, "a") : NULL;
    if (o) {
        fprintf(o, "%ld\n", calls);
        fclose(o);
    }
    return rc;
}
EOF

# build KIND NAME: builds $BUILD/KIND/NAME (KIND rw or tsan) unless it is up to date; false on failure.
build() {
    local kind=$1 name=$2 dir="$BUILD/$1" src="$DRB/$2.c" bin="$BUILD/$1/$2"
    [ "$PREBUILT" = 1 ] && { [ -x "$bin" ]; return; }
    local -a flags
    if [ "$kind" = rw ]; then flags=("${RW_CFLAGS[@]}"); else flags=(-g -fsanitize=thread); fi
    # shellcheck disable=SC2206
    flags+=($CFLAGS_OPT -fopenmp)
    local stamp="${flags[*]}"
    mkdir -p "$dir"
    if [ ! -f "$dir/driver.o" ] || [ "$(cat "$dir/flags" 2> /dev/null)" != "$stamp" ]; then
        "$CC" "${flags[@]}" -c "$BUILD/driver.c" -o "$dir/driver.o" || return 1
        echo "$stamp" > "$dir/flags"
        rm -f "$dir"/DRB*
    fi
    [ -x "$bin" ] && [ "$bin" -nt "$src" ] && return 0
    local -a extra=()
    grep -q PolyBench "$src" && extra=("$DRB/utilities/polybench.c" -I "$DRB" -I "$DRB/utilities"
        -DPOLYBENCH_NO_FLUSH_CACHE -DPOLYBENCH_TIME -D_POSIX_C_SOURCE=200112L)
    "$CC" "${flags[@]}" -w -Dmain=drb_main -I "$DRB" "$src" "${extra[@]}" "$dir/driver.o" -o "$bin" -lm \
        > "$dir/$name.log" 2>&1
}

# Configurations: label, kind (plain, rw, tsan), racewatch options, runtime.
declare -a C_LABEL C_KIND C_OPTS C_RUNTIME
for spec in $CONFIGS; do
    case $spec in
        plain) C_LABEL+=(plain) C_KIND+=(plain) C_OPTS+=("") C_RUNTIME+=("") ;;
        test) C_LABEL+=(test) C_KIND+=(rw) C_OPTS+=("sample_period_us=250:watchpoints=4:cold_bias=0") C_RUNTIME+=("") ;;
        debug) C_LABEL+=(debug) C_KIND+=(rw) C_OPTS+=("sample_period_us=1000") C_RUNTIME+=("") ;;
        tsan) C_LABEL+=(tsan) C_KIND+=(tsan) C_OPTS+=("") C_RUNTIME+=("") ;;
        *=*)
            label=${spec%%=*} rest=${spec#*=} runtime=""
            if [[ $rest == *@* ]]; then runtime=$(realpath "${rest#*@}") rest=${rest%%@*}; fi
            C_LABEL+=("$label") C_KIND+=(rw) C_OPTS+=("$rest") C_RUNTIME+=("$runtime")
            ;;
        *) echo "dataracebench.sh: unknown configuration $spec" >&2; exit 2 ;;
    esac
done
NC=${#C_LABEL[@]}
need_tsan=0
for k in "${C_KIND[@]}"; do [ "$k" = tsan ] && need_tsan=1; done

if [ "$PREBUILT" = 1 ]; then
    echo "== ${#PROGRAMS[@]} programs prebuilt in $BUILD" >&2
else
    echo "== building ${#PROGRAMS[@]} programs ($CC ${RW_CFLAGS[*]} $CFLAGS_OPT -fopenmp; TSan: -g -fsanitize=thread)" >&2
fi
declare -A BUILT
for name in "${PROGRAMS[@]}"; do
    build rw "$name" && BUILT[rw.$name]=1
    [ $need_tsan = 1 ] && build tsan "$name" && BUILT[tsan.$name]=1
    printf '.' >&2
done
echo >&2

# run_config I NAME: runs program NAME under configuration I for SECONDS_PER seconds, restarting it when
# it exits early; prints "found seconds-to-first-report calls" (found 1/0, or "nobuild").
run_config() {
    local i=$1 name=$2 kind=${C_KIND[$1]} bin log="$OUT/$2.${C_LABEL[$1]}.err" count="$TMP/$2.${C_LABEL[$1]}.count"
    bin="$BUILD/rw/$name"
    [ "$kind" = tsan ] && bin="$BUILD/tsan/$name"
    [ "$kind" = tsan ] && [ -z "${BUILT[tsan.$name]:-}" ] && { echo "nobuild - -"; return; }
    [ "$kind" != tsan ] && [ -z "${BUILT[rw.$name]:-}" ] && { echo "nobuild - -"; return; }
    local -a cmd=("$bin") env=(OMP_NUM_THREADS=2 "DRB_LOOP_COUNT_FILE=$count")
    case $kind in
        rw)
            cmd=("$RACEWATCH" run -o halt_on_error=1 -o stats=1)
            local kv
            for kv in ${C_OPTS[$i]//:/ } ${OPTS//:/ }; do cmd+=(-o "$kv"); done
            cmd+=(-- "$bin")
            env+=("RACEWATCH_RUNTIME=${C_RUNTIME[$i]:-$RUNTIME_DEFAULT}")
            ;;
        tsan)
            env+=("TSAN_OPTIONS=halt_on_error=1 exitcode=66 ignore_noninstrumented_modules=1")
            [ -n "$ARCHER" ] && env+=("OMP_TOOL_LIBRARIES=$ARCHER")
            ;;
    esac
    : > "$count"
    : > "$log.full"
    local start now left found=0 first=- starts=0
    start=$(date +%s.%N)
    while :; do
        now=$(date +%s.%N)
        left=$(awk -v s="$start" -v n="$now" -v t="$SECONDS_PER" 'BEGIN { l = t - (n - s); print (l > 0.05) ? l : 0 }')
        [ "$left" = 0 ] && break
        [ $starts -ge 2000 ] && break
        starts=$((starts + 1))
        env "${env[@]}" "DRB_LOOP_SECONDS=$left" timeout -k 2 "$(awk -v l="$left" 'BEGIN { print int(l + 10) }')" \
            "${cmd[@]}" > /dev/null 2>> "$log.full" < /dev/null
        if grep -Eq 'WARNING: (racewatch|ThreadSanitizer): data race' "$log.full"; then
            found=1
            first=$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN { printf "%.2f", n - s }')
            break
        fi
    done
    head -n 400 "$log.full" > "$log"
    rm -f "$log.full"
    [ "$OUT" = "$TMP" ] && rm -f "$log"
    # Calls completed: only meaningful for a run that went the whole time.
    local calls
    calls=$(awk '{ s += $1 } END { print s + 0 }' "$count")
    [ $found = 1 ] && calls=-
    echo "$found $first $calls"
}

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== ${#PROGRAMS[@]} programs x $NC configurations x ${SECONDS_PER} s" >&2
TABLE="$OUT/table.tsv"
{
    printf 'program\tracy'
    for ((i = 0; i < NC; i++)); do printf '\t%s.found\t%s.first_s\t%s.calls' "${C_LABEL[$i]}" "${C_LABEL[$i]}" "${C_LABEL[$i]}"; done
    printf '\n'
} > "$TABLE"
printf '%-44s %5s' program racy
for ((i = 0; i < NC; i++)); do printf ' %16s' "${C_LABEL[$i]}"; done
printf '\n'
# run_program NAME ROWS: runs program NAME under every configuration in turn, prints its row and
# appends its table row to the file ROWS.
run_program() {
    local name=$1 racy=0 row i found first calls cell
    [[ $name == *-yes ]] && racy=1
    printf '%-44s %5s' "$name" "$([ $racy = 1 ] && echo yes || echo no)"
    row="$name	$racy"
    for ((i = 0; i < NC; i++)); do
        read -r found first calls < <(run_config "$i" "$name")
        row="$row	$found	$first	$calls"
        if [ "${C_KIND[$i]}" = plain ]; then
            cell="$calls calls"
        elif [ "$found" = 1 ]; then
            cell="RACE $first s"
        elif [ "$found" = nobuild ]; then
            cell="(no build)"
        else
            cell="- $calls"
        fi
        printf ' %16s' "$cell"
    done
    printf '\n'
    echo "$row" >> "$2"
}
if [ "$JOBS" -le 1 ]; then
    for name in "${PROGRAMS[@]}"; do run_program "$name" "$TABLE"; done
else
    # Up to JOBS programs at once, each in its own files; rows come out in program order.
    next=0
    flush_rows() {
        while [ $next -lt ${#PROGRAMS[@]} ] && [ -f "$TMP/row.$next.done" ]; do
            cat "$TMP/row.$next.out"
            cat "$TMP/row.$next.tsv" >> "$TABLE"
            next=$((next + 1))
        done
    }
    for ((k = 0; k < ${#PROGRAMS[@]}; k++)); do
        while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
            wait -n
            flush_rows
        done
        { run_program "${PROGRAMS[$k]}" "$TMP/row.$k.tsv" > "$TMP/row.$k.out"; touch "$TMP/row.$k.done"; } &
        flush_rows
    done
    wait
    flush_rows
fi

echo
echo "DataRaceBench $(git -C "$DRB/.." rev-parse --short HEAD 2> /dev/null || echo "(checkout)"): ${#PROGRAMS[@]} programs," \
    "${SECONDS_PER} s per program and configuration, OMP_NUM_THREADS=2, $(nproc) CPUs, load average at start:" \
    "$LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[ $need_tsan = 1 ] && { [ -n "$ARCHER" ] && echo "TSan with Archer ($ARCHER)" ||
    echo "TSan WITHOUT Archer (libarcher.so not found): libomp's synchronisation is invisible to it, expect false reports"; }
echo
printf '| %-10s | %-14s | %-14s | %-16s | %-30s |\n' configuration recall "false reports" "median first s" "main() calls/s vs plain (race-free)"
printf '|%s|%s|%s|%s|%s|\n' ------------ ---------------- ---------------- ------------------ --------------------------------
for ((i = 0; i < NC; i++)); do
    col=$((3 + 3 * i))
    plain_col=0
    for ((j = 0; j < NC; j++)); do [ "${C_KIND[$j]}" = plain ] && plain_col=$((5 + 3 * j)); done
    med=$(awk -F'\t' -v c="$col" 'NR > 1 && $2 == 1 && $c == 1 { print $(c + 1) }' "$TABLE" | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    awk -F'\t' -v c="$col" -v pc="$plain_col" -v label="${C_LABEL[$i]}" -v kind="${C_KIND[$i]}" -v med="$med" 'NR > 1 {
        if ($c == "nobuild") next
        if ($2 == 1) { racy++; if ($c == 1) found++ }
        else {
            free++; if ($c == 1) falsep++
            if (pc > 0 && $(c + 2) != "-" && $(c + 2) > 0 && $pc != "-" && $pc > 0) { lr += log($(c + 2) / $pc); n++ }
        }
    } END {
        if (kind == "plain") { printf "| %-10s | %-14s | %-14s | %-16s | %-30s |\n", label, "-", "-", "-", "1 (baseline)"; exit }
        cost = n ? sprintf("%.3f (%d programs)", exp(lr / n), n) : "-"
        printf "| %-10s | %-14s | %-14s | %-16s | %-30s |\n", label, sprintf("%d/%d", found + 0, racy + 0), sprintf("%d/%d", falsep + 0, free + 0), med, cost
    }' "$TABLE"
done
for ((i = 0; i < NC; i++)); do
    [ "${C_KIND[$i]}" = rw ] && echo "${C_LABEL[$i]}: racewatch run -o ${C_OPTS[$i]//:/ -o }${OPTS:+ (+ $OPTS)}${C_RUNTIME[$i]:+ with ${C_RUNTIME[$i]}}"
done
[ "$OUT" != "$TMP" ] && echo "per-run stderr and the table: $OUT"
exit 0
