//! Stack capture by frame pointers with non-faulting reads.
