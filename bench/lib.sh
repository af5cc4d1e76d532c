# Shared by the bench scripts: source it after `cd "$ROOT"` (the repository root).

# Builds the racewatch CLI (release, embedding the runtime) and sets RACEWATCH to its absolute path;
# with RACEWATCH_BIN set (a CLI built elsewhere, e.g. carried to a machine without cargo), uses that.
build_racewatch() {
    if [ -n "${RACEWATCH_BIN:-}" ]; then
        RACEWATCH=$(realpath "$RACEWATCH_BIN")
        return
    fi
    cargo build --release --quiet --bin racewatch
    RACEWATCH="${CARGO_TARGET_DIR:-$ROOT/target}/release/racewatch"
    case $RACEWATCH in /*) ;; *) RACEWATCH="$ROOT/$RACEWATCH" ;; esac
}

# Builds demos/ in release with the arguments given (`--bins`, `--bin NAME`). The demos are their own
# workspace with their own target dir and metadata flags: nothing inherited may override them.
build_demos() {
    (cd "$ROOT/demos" && env -u CARGO_TARGET_DIR -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS -u CARGO_BUILD_RUSTFLAGS \
        cargo build --release --quiet "$@")
}
