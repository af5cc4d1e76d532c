//! Fixed-size records of accesses and races handed from signal handlers to the reporter.
//!
//! Plain `Copy` data, no heap: signal handlers build these on their stack and
//! push them through [`crate::queue`].

/// Frames the sampler's frame-pointer walk follows (it only bounds the thread's own stack).
pub const MAX_FRAMES: usize = 24;
/// Most PCs a captured [`Stack`] keeps: all of a stack up to this depth; of a deeper one the innermost
/// `STACK_FRAMES - OUTER_FRAMES` and the outermost [`OUTER_FRAMES`], with the number left out between
/// them (a test's own frames sit near the outer end of a deep stack, the access at the inner end).
pub const STACK_FRAMES: usize = 64;
/// The outermost frames a stack deeper than [`STACK_FRAMES`] keeps: thread start-up (libc, std's
/// thread entry, a test harness's) takes about ten of them, the rest reach into the program's code.
pub const OUTER_FRAMES: usize = 24;
/// How deep the unwinder walks a stack when a race is found (a deeper one ends at this frame).
pub const UNWIND_FRAMES: usize = 256;

/// A captured call stack: `pcs[0]` is the accessing instruction's PC, then return addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stack {
    /// Number of valid entries in `pcs`.
    pub len: usize,
    /// Frames left out between `pcs[STACK_FRAMES - OUTER_FRAMES - 1]` and the next entry (0: none).
    pub elided: usize,
    /// The frames, innermost first; only `pcs[..len]` is meaningful.
    pub pcs: [u64; STACK_FRAMES],
}

impl Stack {
    /// A stack with no frames.
    pub const EMPTY: Stack = Stack { len: 0, elided: 0, pcs: [0; STACK_FRAMES] };

    /// Builds a stack from `pcs`, innermost first: all of them when they fit, else the innermost and the
    /// outermost [`OUTER_FRAMES`] with the count of those left out between.
    pub fn from_pcs(pcs: &[u64]) -> Stack {
        let mut stack = Stack::EMPTY;
        if pcs.len() <= STACK_FRAMES {
            stack.pcs[..pcs.len()].copy_from_slice(pcs);
            stack.len = pcs.len();
        } else {
            let inner = STACK_FRAMES - OUTER_FRAMES;
            stack.pcs[..inner].copy_from_slice(&pcs[..inner]);
            stack.pcs[inner..].copy_from_slice(&pcs[pcs.len() - OUTER_FRAMES..]);
            stack.len = STACK_FRAMES;
            stack.elided = pcs.len() - STACK_FRAMES;
        }
        stack
    }

    /// Appends a frame; false (and no change) when the stack is full.
    pub fn push(&mut self, pc: u64) -> bool {
        if self.len >= STACK_FRAMES {
            return false;
        }
        self.pcs[self.len] = pc;
        self.len += 1;
        true
    }

    /// The valid frames, innermost first.
    pub fn frames(&self) -> &[u64] {
        &self.pcs[..self.len.min(STACK_FRAMES)]
    }

    /// Where frames were left out: `(index, count)`: `count` frames are missing before `frames()[index]`.
    pub fn elision(&self) -> Option<(usize, usize)> {
        (self.elided > 0 && self.len == STACK_FRAMES).then_some((STACK_FRAMES - OUTER_FRAMES, self.elided))
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
    fn shallow_stacks_are_kept_whole() {
        let pcs: Vec<u64> = (1..=STACK_FRAMES as u64).collect();
        let stack = Stack::from_pcs(&pcs);
        assert_eq!(stack.frames(), &pcs[..]);
        assert_eq!(stack.elision(), None);
        let mut full = stack;
        assert!(!full.push(99));
        assert_eq!(full, stack);
        let mut short = Stack::from_pcs(&[7, 8]);
        assert!(short.push(9));
        assert_eq!(short.frames(), &[7, 8, 9]);
    }

    #[test]
    fn deep_stacks_keep_the_innermost_and_outermost_frames() {
        let pcs: Vec<u64> = (0..200).collect();
        let stack = Stack::from_pcs(&pcs);
        let inner = STACK_FRAMES - OUTER_FRAMES;
        assert_eq!(stack.len, STACK_FRAMES);
        assert_eq!(&stack.frames()[..inner], &pcs[..inner]);
        assert_eq!(&stack.frames()[inner..], &pcs[200 - OUTER_FRAMES..]);
        assert_eq!(stack.elision(), Some((inner, 200 - STACK_FRAMES)));
        // The access and `main` (or the thread's start) are both there.
        assert_eq!(stack.frames()[0], 0);
        assert_eq!(*stack.frames().last().unwrap(), 199);
    }
}
