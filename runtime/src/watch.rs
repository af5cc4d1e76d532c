//! Watchpoint slots: arm, wait, disarm, collect traps.
