//! The AVX-512 opmask registers (`k0`–`k7`) of an interrupted context, read from the XSAVE area of its
//! signal frame: a masked store or load (`vmovdqu8 [rdi]{k1}, zmm16`, glibc's short `memset` and
//! `memcpy`) touches only the bytes its mask selects.
//!
//! The kernel writes a signal frame's extended state with XSAVE, in the standard (non-compacted)
//! layout: the 512-byte FXSAVE image (its software-reserved bytes at 464 carry `FP_XSTATE_MAGIC1` and
//! the frame's size), the XSAVE header at 512 (`XSTATE_BV`: which components are not in their initial,
//! all-zero state), and component 5 (the opmask registers, 8 × 8 bytes) at the offset
//! `CPUID.(EAX=0DH, ECX=5):EBX` gives.

use std::sync::atomic::{AtomicU64, Ordering};

/// Offset of the opmask component in the standard XSAVE layout (0: the CPU has none).
static OPMASK_OFFSET: AtomicU64 = AtomicU64::new(0);

const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const SW_RESERVED: u64 = 464;
const XSTATE_BV: u64 = 512;
const OPMASK_COMPONENT: u32 = 5;

/// Looks the opmask component up (once, at start-up; harmless to repeat).
pub fn init() {
    // SAFETY: CPUID is available on every x86-64 CPU; leaf 0xD is defined whenever XSAVE is (and reads
    // as zeros otherwise).
    #[allow(unused_unsafe)]
    let (max_leaf, component) = unsafe {
        let max = core::arch::x86_64::__cpuid(0).eax;
        (
            max,
            if max >= 0xd {
                core::arch::x86_64::__cpuid_count(0xd, OPMASK_COMPONENT)
            } else {
                core::arch::x86_64::__cpuid(0)
            },
        )
    };
    // EAX: the component's size (64 with AVX-512), EBX: its offset.
    if max_leaf >= 0xd && component.eax >= 64 && component.ebx >= 576 {
        OPMASK_OFFSET.store(u64::from(component.ebx), Ordering::Relaxed);
    }
}

/// The value of opmask register `k` (0–7) in the XSAVE area at `fpstate`, read without faulting;
/// `None` when the frame has no extended state, or the CPU no opmask registers. Async-signal-safe.
pub fn opmask(fpstate: u64, k: u32) -> Option<u64> {
    let offset = OPMASK_OFFSET.load(Ordering::Relaxed);
    if fpstate == 0 || offset == 0 || k > 7 {
        return None;
    }
    let mut sw = [0u8; 16];
    if super::mem::read_into(fpstate + SW_RESERVED, &mut sw) != sw.len() {
        return None;
    }
    let magic = u32::from_ne_bytes(sw[0..4].try_into().ok()?);
    let xstate_size = u32::from_ne_bytes(sw[12..16].try_into().ok()?);
    if magic != FP_XSTATE_MAGIC1 || u64::from(xstate_size) < offset + 64 {
        return None;
    }
    let present = super::mem::read_u64(fpstate + XSTATE_BV)?;
    if present & (1 << OPMASK_COMPONENT) == 0 {
        return Some(0); // initial state: every opmask register is zero
    }
    super::mem::read_u64(fpstate + offset + 8 * u64::from(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opmask_is_read_from_a_frame_laid_out_like_the_kernels() {
        init();
        OPMASK_OFFSET.store(1088, Ordering::Relaxed);
        let mut frame = vec![0u8; 2048];
        frame[464..468].copy_from_slice(&FP_XSTATE_MAGIC1.to_ne_bytes());
        frame[476..480].copy_from_slice(&2048u32.to_ne_bytes());
        frame[1088 + 8..1088 + 16].copy_from_slice(&0x1fffu64.to_ne_bytes());
        let at = frame.as_ptr() as u64;
        // Component 5 in its initial state: zero whatever the bytes say.
        assert_eq!(opmask(at, 1), Some(0));
        frame[512] = 1 << 5;
        let at = frame.as_ptr() as u64;
        assert_eq!(opmask(at, 1), Some(0x1fff));
        assert_eq!(opmask(at, 2), Some(0));
        assert_eq!(opmask(at, 8), None);
        assert_eq!(opmask(0, 1), None);
        frame[464] = 0;
        assert_eq!(opmask(frame.as_ptr() as u64, 1), None, "no XSAVE magic");
    }
}
