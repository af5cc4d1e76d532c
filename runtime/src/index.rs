//! The immutable PC index: classify(pc) -> Uncovered | Plain | Atomic.
