//! The sampling signal: pick an access to watch.
