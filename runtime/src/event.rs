//! Fixed-size records of accesses and races handed from signal handlers to the reporter.
//!
//! Plain `Copy` data, no heap: signal handlers build these on their stack and
//! push them through [`crate::queue`].

/// Most frames kept per stack (the accessing PC plus return addresses).
pub const MAX_FRAMES: usize = 24;

/// A captured call stack: `pcs[0]` is the accessing instruction's PC, then return addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Number of valid entries in `pcs`.
    pub len: usize,
    /// The frames, innermost first; only `pcs[..len]` is meaningful.
    pub pcs: [u64; MAX_FRAMES],
}

impl Stack {
    /// A stack with no frames.
    pub const EMPTY: Stack = Stack { len: 0, pcs: [0; MAX_FRAMES] };

    /// Builds a stack from up to [`MAX_FRAMES`] PCs (the rest are dropped).
    pub fn from_pcs(pcs: &[u64]) -> Stack {
        let mut stack = Stack::EMPTY;
        for &pc in pcs {
            if !stack.push(pc) {
                break;
            }
        }
        stack
    }

    /// Appends a frame; false (and no change) when the stack is full.
    pub fn push(&mut self, pc: u64) -> bool {
        if self.len >= MAX_FRAMES {
            return false;
        }
        self.pcs[self.len] = pc;
        self.len += 1;
        true
    }

    /// The valid frames, innermost first.
    pub fn frames(&self) -> &[u64] {
        &self.pcs[..self.len.min(MAX_FRAMES)]
    }
}

impl Default for Stack {
    fn default() -> Self {
        Stack::EMPTY
    }
}

/// One memory access seen by the runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessRecord {
    /// Kernel thread id of the accessing thread.
    pub tid: i32,
    /// PC of the accessing instruction.
    pub pc: u64,
    /// First byte accessed.
    pub addr: u64,
    /// Bytes accessed.
    pub size: u8,
    /// A store (or read-modify-write).
    pub is_write: bool,
    /// An atomic instruction according to the index (its PC is tagged), or LOCK-prefixed.
    pub is_atomic: bool,
    /// LOCK-prefixed or XCHG with memory: atomic whatever the tags say.
    pub locked: bool,
    /// The thread's stack at the access.
    pub stack: Stack,
}

/// A judged race, ready to be reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaceEvent {
    /// The access that hit the watchpoint (thread B).
    pub current: AccessRecord,
    /// The sampled, watched access (thread A).
    pub previous: AccessRecord,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_keeps_at_most_max_frames() {
        let pcs: Vec<u64> = (1..=30).collect();
        let stack = Stack::from_pcs(&pcs);
        assert_eq!(stack.len, MAX_FRAMES);
        assert_eq!(stack.frames(), &pcs[..MAX_FRAMES]);
        let mut full = stack;
        assert!(!full.push(99));
        assert_eq!(full, stack);
    }
}
