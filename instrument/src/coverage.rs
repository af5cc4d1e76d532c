//! The per-function coverage model and its text, JSON and HTML renderings.
