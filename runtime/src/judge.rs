//! The race rule: do two recorded accesses race?
