#!/usr/bin/env bash
# Speed and size of `racewatch coverage` on big real binaries: racewatch's own CLI built with the
# metadata flags (`racewatch cargo build`, debug), and the Rust toolchain's own librustc_driver and
# libLLVM shared libraries (150-200 MB, ~90k-250k functions, no metadata). Times each output
# format (median of RUNS runs), prints each binary's size and function count, and the size of each
# report; with Chromium installed, also times a headless load of each HTML page (a screenshot at
# 1400 px).
#
# Usage (from the repo root):  bash bench/coverage.sh
# Environment: RUNS=N (default 5), BIG="path…" to use other binaries instead.
# Needs: cargo, awk, sort; chromium optional.

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-5}
cd "$ROOT"
echo "== building racewatch (release)" >&2
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
build_racewatch

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ -z "${BIG:-}" ]; then
    echo "== building a binary with metadata: racewatch's CLI (racewatch cargo build, debug)" >&2
    "$RACEWATCH" cargo build --quiet --bin racewatch --target-dir "$ROOT/target/bench-coverage" >&2
    BIG="$ROOT/target/bench-coverage/debug/racewatch"
    sysroot=$(rustc --print sysroot)
    for lib in "$sysroot"/lib/librustc_driver-*.so "$sysroot"/lib/libLLVM.so.*; do
        [ -f "$lib" ] && BIG="$BIG $lib"
    done
fi

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
now() { date +%s.%N; }

for big in $BIG; do
    functions=$("$RACEWATCH" coverage --format json "$big" | awk -F: '/"functions":/ { gsub(/[ ,]/, "", $2); print $2; exit }')
    echo
    echo "binary: $big, $(du -m "$big" | cut -f1) MB, $functions functions, $(nproc) CPUs"
    echo
    printf '| %-6s | %14s | %12s |\n' format "median s ($RUNS)" "output size"
    printf '|%s|%s|%s|\n' -------- ---------------- --------------
    for format in text json lcov html; do
        : >"$TMP/$format.times"
        for ((i = 0; i < RUNS; i++)); do
            start=$(now)
            "$RACEWATCH" coverage --format "$format" -o "$TMP/report.$format" "$big" 2>/dev/null
            end=$(now)
            awk -v a="$start" -v b="$end" 'BEGIN { print b - a }' >>"$TMP/$format.times"
        done
        printf '| %-6s | %16.2f | %11s |\n' "$format" "$(median <"$TMP/$format.times")" \
            "$(du -h "$TMP/report.$format" | cut -f1)"
    done
    if command -v chromium >/dev/null; then
        start=$(now)
        chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
            --disable-component-update --disable-sync --user-data-dir="$TMP/chromium" --window-size=1400,1000 \
            --screenshot="$TMP/page.png" "file://$TMP/report.html" >/dev/null 2>&1
        end=$(now)
        echo
        echo "headless Chromium: load and screenshot of the HTML page in" \
            "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s"
    fi
done
