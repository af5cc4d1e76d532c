//! Fixed-size lock-free queue from signal handlers to the reporter thread.
