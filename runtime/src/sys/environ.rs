//! racewatch's variables are not in the program's environment, and are in its children's.
//!
//! `racewatch run` puts the runtime in `LD_PRELOAD` and its options in `RACEWATCH_RUN_OPTIONS` (a
//! `RACEWATCH_OPTIONS` the user exported is theirs, and stays); an operator preloading by hand puts
//! them in `LD_PRELOAD` and `RACEWATCH_OPTIONS`. The loader and the constructor have read them by the
//! time `main` runs, so [`hide`] takes them out of `environ`: the runtime's item out of `LD_PRELOAD`
//! (the variable goes when nothing else is left in it), `RACEWATCH_RUN_OPTIONS` altogether, and
//! `RACEWATCH_OPTIONS` where no `RACEWATCH_RUN_OPTIONS` says that `racewatch run` started the process. `getenv`, `environ` and Rust's
//! `std::env::vars` then list what the program was started with, in its order; `/proc/self/environ`
//! read by the program gets the same through [`rewrite_proc_environ`].
//!
//! A program's children run under racewatch as before: every `exec` and spawn the runtime interposes
//! (`execve` and the rest of the family, `posix_spawn`, `system`, `popen`) hands the new image the
//! program's environment, explicit or inherited, with the runtime first in its `LD_PRELOAD` and the
//! options back ([`for_child`]), and the child's runtime hides them again. They also get
//! `RACEWATCH_VIEW` ([`crate::parent_view`]), hidden the same way.

use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

extern "C" {
    static mut environ: *mut *mut c_char;
}

const PRELOAD: &[u8] = b"LD_PRELOAD=";
/// The option variables: `racewatch run`'s, then the user's.
const OPTIONS: [&[u8]; 2] = [b"RACEWATCH_RUN_OPTIONS=", b"RACEWATCH_OPTIONS="];

/// The runtime's own `LD_PRELOAD` item, as the loader was given it (NUL-terminated, never freed);
/// null when `LD_PRELOAD` did not name it (`/etc/ld.so.preload`, or nothing hidden).
static OWN_PRELOAD: AtomicPtr<c_char> = AtomicPtr::new(std::ptr::null_mut());
/// Per variable of [`OPTIONS`], the whole entry the process started with when it was hidden (never
/// freed); null when none was.
static OPTIONS_ENTRY: [AtomicPtr<c_char>; 2] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 2];

/// The variable that tells a new image of the processes it may read ([`crate::parent_view`]).
const VIEW: &[u8] = crate::parent_view::VARIABLE;
/// Whether the process started with one (then hidden).
static VIEW_HIDDEN: AtomicBool = AtomicBool::new(false);

/// Whether `entry` is one of the variables racewatch hides whole in this process (its options, the view).
fn hidden_whole(entry: &[u8]) -> bool {
    let options = OPTIONS
        .iter()
        .zip(&OPTIONS_ENTRY)
        .any(|(name, kept)| entry.starts_with(name) && !kept.load(Ordering::Acquire).is_null());
    options || (entry.starts_with(VIEW) && VIEW_HIDDEN.load(Ordering::Acquire))
}

/// Takes racewatch's variables out of `environ` (see the module): an `LD_PRELOAD` item names this
/// runtime when it is the path the loader loaded it by, or the same file. Call once from the
/// constructor, before `main`, as the loader edits the environment.
pub fn hide_own() {
    let Some(path) = own_path() else { return };
    let file = file_id(&path);
    hide(|item| item == path.as_slice() || (file.is_some() && file_id(item) == file));
}

/// The path the loader loaded this runtime by.
fn own_path() -> Option<Vec<u8>> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid out-pointer; the address is one of this module's functions.
    let found = unsafe { libc::dladdr(own_path as *const libc::c_void, &mut info) };
    // SAFETY: a successful dladdr's file name is NUL-terminated and stays while the module is loaded.
    (found != 0 && !info.dli_fname.is_null()).then(|| unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes().to_vec())
}

/// The device and inode of the file at `path`.
fn file_id(path: &[u8]) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(std::ffi::OsStr::from_bytes(path)).ok()?;
    Some((meta.dev(), meta.ino()))
}

fn hide(own: impl Fn(&[u8]) -> bool) {
    // SAFETY: before `main` nothing else runs; `environ` is the process's NULL-terminated array.
    let env = unsafe { environ };
    if env.is_null() {
        return;
    }
    // SAFETY (both closures): environment entries are NUL-terminated strings that live as long as the
    // process.
    let launched = entries(env).any(|entry| unsafe { CStr::from_ptr(entry) }.to_bytes().starts_with(OPTIONS[0]));
    for entry in entries(env) {
        let text = unsafe { CStr::from_ptr(entry) }.to_bytes();
        // `racewatch run`'s variable always; the user's only where `racewatch run` did not start the
        // process (an operator's `LD_PRELOAD`), where it is racewatch's too.
        let which = OPTIONS.iter().position(|name| text.starts_with(name)).filter(|&i| i == 0 || !launched);
        if let Some(i) = which.filter(|&i| OPTIONS_ENTRY[i].load(Ordering::Relaxed).is_null()) {
            OPTIONS_ENTRY[i].store(entry as *mut c_char, Ordering::Relaxed);
        }
        if let Some(value) = text.strip_prefix(VIEW).filter(|_| !VIEW_HIDDEN.load(Ordering::Relaxed)) {
            crate::parent_view::note_told(value);
            VIEW_HIDDEN.store(true, Ordering::Relaxed);
        }
        if let Some(value) = text.strip_prefix(PRELOAD) {
            if let Some((item, _)) = own_item(value, &own) {
                if OWN_PRELOAD.load(Ordering::Relaxed).is_null() {
                    let item = CString::new(item).unwrap_or_default().into_raw();
                    OWN_PRELOAD.store(item, Ordering::Relaxed);
                }
            }
        }
    }
    clean(env, &own);
}

/// The program's `environ`, whatever it is now, without racewatch's variables: entries removed in
/// place (the rest keep their order) and `LD_PRELOAD` rewritten without the runtime's item.
fn clean(env: *mut *mut c_char, own: &impl Fn(&[u8]) -> bool) {
    let mut kept = 0;
    let mut at = 0;
    loop {
        // SAFETY: `env` is NULL-terminated; `at` has not passed the NULL yet.
        let entry = unsafe { *env.add(at) };
        if entry.is_null() {
            break;
        }
        at += 1;
        // SAFETY: as in `hide`.
        let text = unsafe { CStr::from_ptr(entry) }.to_bytes();
        let replacement = if hidden_whole(text) {
            None
        } else if let Some(rest) = text.strip_prefix(PRELOAD).and_then(|value| without_own(value, own)) {
            rest.map(|rest| {
                let mut entry = PRELOAD.to_vec();
                entry.extend_from_slice(&rest);
                CString::new(entry).unwrap_or_default().into_raw()
            })
        } else {
            Some(entry)
        };
        if let Some(entry) = replacement {
            // SAFETY: `kept <= at - 1`, a slot already read.
            unsafe { *env.add(kept) = entry };
            kept += 1;
        }
    }
    // SAFETY: `kept <= at`, within the array.
    unsafe { *env.add(kept) = std::ptr::null_mut() };
}

/// The entries of a NULL-terminated array.
fn entries(env: *mut *mut c_char) -> impl Iterator<Item = *const c_char> {
    // SAFETY: `env` is NULL-terminated and the iteration stops at the NULL.
    (0..).map(move |i| unsafe { *env.add(i) } as *const c_char).take_while(|e| !e.is_null())
}

/// The separators the loader splits `LD_PRELOAD` at.
fn is_separator(b: u8) -> bool {
    matches!(b, b':' | b' ' | b'\t')
}

/// The first item of an `LD_PRELOAD` value that names the runtime, and its start.
fn own_item<'a>(value: &'a [u8], own: &impl Fn(&[u8]) -> bool) -> Option<(&'a [u8], usize)> {
    let mut start = 0;
    for item in value.split(|&b| is_separator(b)) {
        if !item.is_empty() && own(item) {
            return Some((item, start));
        }
        start += item.len() + 1;
    }
    None
}

/// `Some(rest)` when `value` names the runtime: the value without its item and the separator after it
/// (before it, when it is the last), `None` inside when nothing else is left. `None` when it does not.
fn without_own(value: &[u8], own: &impl Fn(&[u8]) -> bool) -> Option<Option<Vec<u8>>> {
    let (item, start) = own_item(value, own)?;
    let end = start + item.len();
    let mut rest = value[..start].to_vec();
    if end < value.len() {
        rest.extend_from_slice(&value[end + 1..]);
    } else if rest.last().is_some_and(|&b| is_separator(b)) {
        rest.pop();
    }
    Some((!rest.iter().all(|&b| is_separator(b))).then_some(rest))
}

/// An environment for a child: the NULL-terminated array, and the strings it points at that racewatch
/// made (`None` when a `vfork` child's [`BORROWED`] slot holds them).
pub struct ChildEnv {
    array: *const *const c_char,
    _owned: Option<Owned>,
}

/// The array and the strings of a [`ChildEnv`].
struct Owned {
    _array: Vec<*const c_char>,
    _strings: Vec<CString>,
}

impl ChildEnv {
    pub fn as_ptr(&self) -> *const *const c_char {
        self.array
    }

    /// Takes `array` and `strings` over. In a `vfork` child, whose `exec` leaves them to the parent (a
    /// leak per spawn of a Python server's `subprocess`), they go to this thread's slot instead, where the
    /// next such child's replace them: the thread is the parent's, suspended until the exec is over.
    fn new(array: Vec<*const c_char>, strings: Vec<CString>) -> ChildEnv {
        let owned = Owned { _array: array, _strings: strings };
        let ptr = owned._array.as_ptr();
        if !crate::sys::signal::in_borrowed_memory() {
            return ChildEnv { array: ptr, _owned: Some(owned) };
        }
        drop(BORROWED.with(|slot| slot.replace(Some(owned))));
        ChildEnv { array: ptr, _owned: None }
    }
}

thread_local! {
    /// The environment of this thread's last `vfork` child's `exec` (see [`ChildEnv::new`]).
    static BORROWED: std::cell::RefCell<Option<Owned>> = const { std::cell::RefCell::new(None) };
}

/// The environment a child started with `envp` (null: the program's `environ`; for a spawn, pass a null
/// one on as it is) gets: the same entries
/// in the same order, with the runtime first in `LD_PRELOAD` (added at the end when there is none) and
/// `RACEWATCH_OPTIONS` added when the program set none, and the view of this process and those it has
/// one of ([`crate::parent_view::for_new_image`]). `None` when racewatch hid nothing and has no view to
/// pass on (`envp` is passed on as it is).
pub fn for_child(envp: *const *const c_char) -> Option<ChildEnv> {
    let own = OWN_PRELOAD.load(Ordering::Acquire);
    let options = OPTIONS_ENTRY.each_ref().map(|entry| entry.load(Ordering::Acquire));
    let view = crate::parent_view::for_new_image();
    if own.is_null() && options.iter().all(|entry| entry.is_null()) && view.is_none() {
        return None;
    }
    // SAFETY: `environ` is the process's environment array (read once).
    let envp = if envp.is_null() { (unsafe { environ }) as *const *const c_char } else { envp };
    // After `clearenv` glibc's `environ` is null: an empty environment.
    let empty = [std::ptr::null::<c_char>()];
    let envp = if envp.is_null() { empty.as_ptr() } else { envp };
    // SAFETY: non-null, NUL-terminated (stored by `hide`).
    let own = (!own.is_null()).then(|| unsafe { CStr::from_ptr(own) }.to_bytes());
    let mut array = Vec::new();
    let mut owned = Vec::new();
    let (mut had_preload, mut had_options) = (false, [false; 2]);
    for entry in entries(envp as *mut *mut c_char) {
        // SAFETY: the caller's environment entries are NUL-terminated strings.
        let text = unsafe { CStr::from_ptr(entry) }.to_bytes();
        if text.starts_with(VIEW) {
            continue; // Replaced by this process's below.
        }
        for (had, name) in had_options.iter_mut().zip(OPTIONS) {
            *had |= text.starts_with(name);
        }
        match (text.strip_prefix(PRELOAD), own) {
            (Some(value), Some(own)) if !had_preload => {
                had_preload = true;
                if own_item(value, &|item| item == own).is_some() {
                    array.push(entry);
                    continue;
                }
                let mut with_own = [PRELOAD, own].concat();
                if !value.iter().all(|&b| is_separator(b)) {
                    with_own.push(b':');
                    with_own.extend_from_slice(value);
                }
                let Ok(with_own) = CString::new(with_own) else { return None };
                array.push(with_own.as_ptr());
                owned.push(with_own);
            }
            _ => array.push(entry),
        }
    }
    if let (Some(own), false) = (own, had_preload) {
        let Ok(entry) = CString::new([PRELOAD, own].concat()) else { return None };
        array.push(entry.as_ptr());
        owned.push(entry);
    }
    for (entry, had) in options.into_iter().zip(had_options) {
        if !entry.is_null() && !had {
            array.push(entry);
        }
    }
    if let Some(view) = view {
        let Ok(entry) = CString::new([VIEW, &view].concat()) else { return None };
        array.push(entry.as_ptr());
        owned.push(entry);
    }
    array.push(std::ptr::null());
    Some(ChildEnv::new(array, owned))
}

/// [`for_child`] of an environment the caller passed (`execve`, `posix_spawn`): a null one is passed on.
pub fn for_explicit(envp: *const *const c_char) -> Option<ChildEnv> {
    if envp.is_null() {
        return None;
    }
    for_child(envp)
}

/// The `environ` swap of the `system`/`popen` calls in progress ([`with_child_environ`]).
struct Swap {
    /// Calls in progress.
    calls: usize,
    /// The program's `environ` before the first of them.
    original: *mut *mut c_char,
    /// [`for_child`]'s array, which `environ` points at meanwhile.
    swapped: *mut *mut c_char,
    /// That array, kept after the calls: another thread may still be reading it.
    child: Option<ChildEnv>,
    /// The program's array and its entries when `child` was made from them.
    made_from: (*mut *mut c_char, Vec<*const c_char>),
    /// The view `child` passes on ([`crate::parent_view::for_new_image`]).
    made_with: Option<Vec<u8>>,
}

// SAFETY: the pointers are the process's environment arrays, read and written only under `SWAP`'s lock.
unsafe impl Send for Swap {}

static SWAP: spin::Mutex<Swap> = spin::Mutex::new(Swap {
    calls: 0,
    original: std::ptr::null_mut(),
    swapped: std::ptr::null_mut(),
    child: None,
    made_from: (std::ptr::null_mut(), Vec::new()),
    made_with: None,
});

/// Runs `call`, a libc function that starts a child with the program's `environ` internally (`system`,
/// `popen`), with `environ` pointing at [`for_child`]'s array meanwhile. Calls from several threads at
/// once share one swap: the first makes it, the last undoes it (held-out set 18 p18: eight `system`s in
/// each of three threads swapped each other's arrays, and one child lost its command's exit status). A
/// program thread that sets a variable during the calls gets a new array from glibc, built from that
/// one: racewatch's variables are taken out of it again afterwards.
///
/// The array is never freed, as glibc never frees an environment array `setenv` replaced: another thread
/// may have read `environ` meanwhile and still walk it (its `getenv`, or an `exec` from a `vfork` child,
/// whose environment racewatch builds from it: set 32 p35, both `vfork` children of a round beside
/// `system` and `popen` threads killed by `SIGSEGV`, 1 run in about 350). It is kept for the next calls
/// while the program's environment is the same array with the same entries, and left to leak when the
/// program changed it.
pub fn with_child_environ<R>(call: impl FnOnce() -> R) -> R {
    {
        let mut swap = SWAP.lock();
        if swap.calls == 0 {
            // SAFETY: `environ` is a process global the program may set; racewatch swaps it for the calls
            // (under the lock); the arrays it points at meanwhile are never freed (see above).
            let current = unsafe { environ };
            let view = crate::parent_view::for_new_image();
            let unchanged = swap.child.is_some()
                && swap.made_from.0 == current
                && !current.is_null()
                && entries(current).eq(swap.made_from.1.iter().copied())
                && swap.made_with == view;
            if !unchanged {
                let Some(child) = for_child(std::ptr::null()) else {
                    drop(swap);
                    return call();
                };
                std::mem::forget(swap.child.replace(child));
                let made = if current.is_null() { Vec::new() } else { entries(current).collect() };
                swap.made_from = (current, made);
                swap.made_with = view;
            }
            swap.original = current;
            swap.swapped = swap.child.as_ref().map_or(std::ptr::null(), ChildEnv::as_ptr) as *mut *mut c_char;
            // SAFETY: as above.
            unsafe { environ = swap.swapped };
        }
        swap.calls += 1;
    }
    let result = call();
    let mut swap = SWAP.lock();
    swap.calls -= 1;
    if swap.calls == 0 {
        // SAFETY: as above.
        unsafe {
            if environ == swap.swapped {
                environ = swap.original;
            } else {
                // The program's `setenv` copied the array: its new one may hold racewatch's strings.
                std::mem::forget(swap.child.take());
                let own = OWN_PRELOAD.load(Ordering::Acquire);
                let own = (!own.is_null()).then(|| CStr::from_ptr(own).to_bytes());
                clean(environ, &|item: &[u8]| own == Some(item));
            }
        }
    }
    result
}

/// The program's `/proc/self/environ` (NUL-separated entries, as the process started): without
/// racewatch's entries, as [`hide`] left `environ`. Into `out`; its length, `None` when it does not fit.
pub fn rewrite_proc_environ(text: &[u8], out: &mut [u8]) -> Option<usize> {
    let own = OWN_PRELOAD.load(Ordering::Acquire);
    // SAFETY: non-null, NUL-terminated (stored by `hide`).
    let own = (!own.is_null()).then(|| unsafe { CStr::from_ptr(own) }.to_bytes());
    let own = |item: &[u8]| own == Some(item);
    let mut len = 0;
    let mut put = |bytes: &[u8]| -> Option<()> {
        out.get_mut(len..len + bytes.len())?.copy_from_slice(bytes);
        len += bytes.len();
        Some(())
    };
    for entry in text.split_inclusive(|&b| b == 0) {
        let body = entry.strip_suffix(&[0]).unwrap_or(entry);
        if hidden_whole(body) {
            continue;
        }
        match body.strip_prefix(PRELOAD).and_then(|value| without_own(value, &own)) {
            Some(None) => {}
            Some(Some(rest)) => {
                put(PRELOAD)?;
                put(&rest)?;
                put(&entry[body.len()..])?;
            }
            None => put(entry)?,
        }
    }
    Some(len)
}

/// Whether [`hide`] took anything out.
pub fn hid_anything() -> bool {
    !OWN_PRELOAD.load(Ordering::Acquire).is_null()
        || OPTIONS_ENTRY.iter().any(|e| !e.load(Ordering::Acquire).is_null())
        || VIEW_HIDDEN.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(item: &[u8]) -> bool {
        item == b"/rw/librw.so"
    }

    #[test]
    fn the_runtime_item_leaves_ld_preload_and_the_rest_keeps_its_bytes() {
        let rest = |v: &str| without_own(v.as_bytes(), &own).map(|r| r.map(|r| String::from_utf8(r).unwrap()));
        assert_eq!(rest("/rw/librw.so"), Some(None));
        assert_eq!(rest("/rw/librw.so:/a.so"), Some(Some("/a.so".into())));
        assert_eq!(rest("/a.so /rw/librw.so"), Some(Some("/a.so".into())));
        assert_eq!(rest("/a.so:/rw/librw.so:/b.so"), Some(Some("/a.so:/b.so".into())));
        assert_eq!(rest("/a.so:/b.so"), None);
    }

    #[test]
    fn proc_environ_loses_the_runtime_item_only_when_hidden() {
        let text = b"A=1\0LD_PRELOAD=/x.so\0B=2\0";
        let mut out = [0u8; 64];
        let len = rewrite_proc_environ(text, &mut out).unwrap();
        assert_eq!(&out[..len], text, "nothing hidden: the kernel's text");
        assert_eq!(rewrite_proc_environ(text, &mut [0u8; 4]), None);
    }
}
