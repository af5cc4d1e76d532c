//! Shared bits of the demo programs.

/// How long a demo runs, in seconds: the first command-line argument, else `default`.
pub fn run_seconds(default: f64) -> f64 {
    std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(default)
}
