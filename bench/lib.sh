# Shared by the bench scripts: source it after `cd "$ROOT"` (the repository root).

# Builds the racewatch CLI (release, embedding the runtime) and sets RACEWATCH to its absolute path.
build_racewatch() {
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
