//! Seeing a program thread end without a frame of racewatch's on its stack: a thread-specific data key
//! of glibc's whose destructor runs [`super::thread::thread_ending`].
//!
//! glibc runs the destructors of a thread's keys after its start routine returned, after `pthread_exit`
//! and after cancellation, once the thread-local destructors ran and before it takes the thread off its
//! count (the thread whose end brings that count to 0 then ends the process with `exit(0)`). So a start
//! routine returns straight into glibc's `start_thread`, and a backtrace taken inside a thread (glibc's
//! `backtrace`, Rust's `Backtrace`, a debugger) has the frames it has without racewatch.
//!
//! The key: the last of the 32 that glibc keeps inside each thread's descriptor (no allocation when a
//! thread sets its value; a higher key would `calloc` a block per thread from the program's heap),
//! claimed in glibc's table of keys (`__pthread_keys`, exported to libthread_db as `GLIBC_PRIVATE`)
//! the way `pthread_key_create` claims one, so the program's own keys are numbered from 0 as without
//! racewatch. A program that uses all 31 keys below it gets this one next ([`make_room`]), in the order
//! glibc would give it: its threads then end unseen, and what they held is taken back by later threads
//! once the kernel says they are gone, as for a thread that ended before racewatch knew it.

use std::sync::atomic::{AtomicUsize, Ordering};

/// glibc's keys kept inside a thread's descriptor (`PTHREAD_KEY_2NDLEVEL_SIZE`).
const FIRST_LEVEL_KEYS: usize = 32;

/// One entry of glibc's `__pthread_keys`: `struct pthread_key_struct { uintptr_t seq; void (*destr)(void *); }`.
/// `seq` is odd while the key is in use.
#[repr(C)]
struct KeySlot {
    seq: AtomicUsize,
    destr: AtomicUsize,
}

/// Not tried yet.
const UNTRIED: usize = 0;
/// No key: none free among the first 32, glibc's table not found, or given back to the program.
const NONE: usize = 1;
/// Being claimed by another thread.
const CLAIMING: usize = 2;
/// `KEY_BASE + key` once claimed.
const KEY_BASE: usize = 3;

static STATE: AtomicUsize = AtomicUsize::new(UNTRIED);

fn keys() -> Option<&'static [KeySlot]> {
    // SAFETY: dlvsym with NUL-terminated literals; the result is only an address.
    let addr =
        unsafe { libc::dlvsym(libc::RTLD_DEFAULT, c"__pthread_keys".as_ptr(), c"GLIBC_PRIVATE".as_ptr()) } as usize;
    if addr == 0 || addr % std::mem::align_of::<KeySlot>() != 0 {
        return None;
    }
    // SAFETY: a non-null result is glibc's `struct pthread_key_struct __pthread_keys[PTHREAD_KEYS_MAX]`
    // (1024 entries, at least the 32 read here), a static that lives as long as the process and whose
    // `seq` glibc only changes with compare-and-exchange.
    Some(unsafe { std::slice::from_raw_parts(addr as *const KeySlot, FIRST_LEVEL_KEYS) })
}

/// Claims the highest free key among glibc's first 32 for [`ended`], as `pthread_key_create` does.
fn claim() -> Option<usize> {
    let keys = keys()?;
    (0..FIRST_LEVEL_KEYS).rev().find(|&key| {
        let slot = &keys[key];
        let seq = slot.seq.load(Ordering::Acquire);
        let usable = seq & 1 == 0 && seq.checked_add(2).is_some();
        if usable && slot.seq.compare_exchange(seq, seq + 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            slot.destr.store(ended as *const () as usize, Ordering::Release);
            return true;
        }
        false
    })
}

fn key() -> Option<usize> {
    loop {
        match STATE.compare_exchange(UNTRIED, CLAIMING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                let key = claim();
                STATE.store(key.map_or(NONE, |k| KEY_BASE + k), Ordering::Release);
                return key;
            }
            Err(CLAIMING) => std::hint::spin_loop(),
            Err(state) => return state.checked_sub(KEY_BASE),
        }
    }
}

/// Makes [`super::thread::thread_ending`] run in the calling thread when it ends (returns from its start
/// routine, calls `pthread_exit` or is cancelled). No system call, no allocation; the first call looks
/// glibc's table up.
pub fn watch_current() {
    if let Some(key) = key() {
        // SAFETY: `key` is a key claimed in glibc's table, below 32: setting it writes the calling
        // thread's descriptor only. The value is never read, only tested for non-null by glibc.
        unsafe {
            libc::pthread_setspecific(key as libc::pthread_key_t, std::ptr::NonNull::<u8>::dangling().as_ptr().cast())
        };
    }
}

/// The program is about to create a key: when every key below racewatch's is in use, glibc would hand
/// it the one after racewatch's, so racewatch's goes back to glibc's table first, and the program's keys
/// are numbered as without racewatch (its threads end unseen from then on). No system call.
pub fn make_room() {
    let Some(key) = STATE.load(Ordering::Acquire).checked_sub(KEY_BASE) else { return };
    let Some(keys) = keys() else { return };
    if keys[..key].iter().any(|slot| slot.seq.load(Ordering::Acquire) & 1 == 0) {
        return;
    }
    if STATE.compare_exchange(KEY_BASE + key, NONE, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    let slot = &keys[key];
    slot.destr.store(0, Ordering::Release);
    // As `pthread_key_delete`: the values threads set keep the old `seq`, which no longer matches, so
    // glibc runs no destructor for them.
    let seq = slot.seq.load(Ordering::Acquire);
    let _ = slot.seq.compare_exchange(seq, seq + 1, Ordering::AcqRel, Ordering::Relaxed);
}

/// The key's destructor, called by glibc in an ending thread with the value [`watch_current`] set.
extern "C" fn ended(_value: *mut libc::c_void) {
    super::thread::thread_ending();
}
