//! A fixed pool of iced `InstructionInfoFactory`s, created at init and claimed per call without blocking.
//!
//! `InstructionInfoFactory::new` allocates two vectors, and `info()` grows them when an instruction uses more
//! registers or memory locations than they hold. So the factories are created by [`fill`] (called from
//! `decode::warm_up`), and each one is fed the widest instructions iced knows (SKINIT: 33 used registers;
//! ENTER with nesting level 31: 62 memory locations) so its vectors never grow again. On the signal path,
//! [`claim`] try-locks the slots in turn: a slot held by an interrupted frame is skipped, never waited for.

use iced_x86::{Decoder, DecoderOptions, InstructionInfoFactory};
use spin::{Mutex, MutexGuard};

/// Number of factories: the number of signal handlers that can decode at the same moment.
pub(super) const POOL_SIZE: usize = 64;

/// Instructions that make a factory's vectors grow to their largest size (checked by fuzzing iced 1.22):
/// `skinit` (f3 0f 01 de, 33 registers), `enter 0xffff, 31` (c8 ff ff 1f, 62 memory locations),
/// `vzeroupper` (c5 f8 77, 32 registers), `fnsave [rax]` (dd 30).
const GROW: &[&[u8]] = &[b"\xf3\x0f\x01\xde", b"\xc8\xff\xff\x1f", b"\xc5\xf8\x77", b"\xdd\x30"];

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Mutex<Option<InstructionInfoFactory>> = Mutex::new(None);
static POOL: [Mutex<Option<InstructionInfoFactory>>; POOL_SIZE] = [EMPTY; POOL_SIZE];

/// Creates every factory of the pool (allocates; call at init, not from a signal handler). Idempotent.
/// A slot that is held is in use, so filled already: skipped, never waited for (in a forked child, a
/// slot its parent's thread held at the fork stays held for good).
pub(super) fn fill() {
    for slot in POOL.iter() {
        let Some(mut guard) = slot.try_lock() else { continue };
        if guard.is_none() {
            let mut factory = InstructionInfoFactory::new();
            for bytes in GROW {
                if let Ok(mut decoder) = Decoder::try_with_ip(64, bytes, 0, DecoderOptions::NONE) {
                    let insn = decoder.decode();
                    let _ = factory.info(&insn);
                }
            }
            *guard = Some(factory);
        }
    }
}

/// A claimed factory; released on drop.
pub(super) struct Claimed(MutexGuard<'static, Option<InstructionInfoFactory>>);

impl Claimed {
    pub(super) fn factory(&mut self) -> Option<&mut InstructionInfoFactory> {
        self.0.as_mut()
    }
}

/// Claims a free, initialised factory without blocking. `hint` spreads concurrent callers over the pool.
/// `None` when every slot is busy or [`fill`] has not run.
pub(super) fn claim(hint: usize) -> Option<Claimed> {
    for i in 0..POOL_SIZE {
        let slot = POOL.get(hint.wrapping_add(i) % POOL_SIZE)?;
        if let Some(guard) = slot.try_lock() {
            if guard.is_some() {
                return Some(Claimed(guard));
            }
            return None; // not initialised: the pool is filled as a whole
        }
    }
    None
}
