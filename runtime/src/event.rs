//! Fixed-size records of accesses and races handed from signal handlers to the reporter.
