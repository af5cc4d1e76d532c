//! `execl`, `execle` and `execlp`: C variadic functions, which Rust cannot define. A small assembly
//! entry for each lays the argument registers next to the caller's stack arguments and hands both to
//! [`exec_list`], which reads the list up to its NULL (and, for `execle`, the environment after it)
//! and calls the `execv`-family function of the same meaning, through the runtime's interposers, so a
//! `SIGTRAP` the program blocked stays blocked in the new image as with `execve` (see
//! [`crate::intercept`]). Exported only by the preloaded library.

// Without the `preload` feature (the rlib of the tests) nothing calls the list reader.
#![cfg_attr(not(feature = "preload"), allow(dead_code))]

use std::ffi::{c_char, c_int};

/// Which function the list came to.
const EXECL: c_int = 0;
const EXECLE: c_int = 1;
const EXECLP: c_int = 2;

/// Arguments read into a fixed array on the stack; a longer list goes to a mapping of its own.
const ON_STACK: usize = 256;

/// The `execv` family: `(path or file, argv, envp)`; envp is null for `execv`/`execvp`.
pub type ExecVector = fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;

static TARGETS: std::sync::OnceLock<[ExecVector; 3]> = std::sync::OnceLock::new();

/// Sets the functions the lists are handed to: `execv`, `execve`, `execvp` (the interposers).
pub fn set_targets(execv: ExecVector, execve: ExecVector, execvp: ExecVector) {
    let _ = TARGETS.set([execv, execve, execvp]);
}

/// `regs`: the caller's arguments 2 to 6 (rsi, rdx, rcx, r8, r9); `stack`: its 7th onwards.
extern "C" fn exec_list(
    path: *const c_char,
    regs: *const *const c_char,
    stack: *const *const c_char,
    kind: c_int,
) -> c_int {
    // SAFETY: a variadic exec call's arguments are pointers, the list ends with a NULL (and execle's
    // environment follows it), as the C contract of these functions requires of the caller: reading
    // them in order stays within what the caller passed.
    let arg = |i: usize| unsafe {
        if i < 5 {
            *regs.add(i)
        } else {
            *stack.add(i - 5)
        }
    };
    let mut count = 0;
    while !arg(count).is_null() {
        count += 1;
    }
    let envp = if kind == EXECLE { arg(count + 1) as *const *const c_char } else { std::ptr::null() };
    let Some(targets) = TARGETS.get() else {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    let target = targets[kind.clamp(EXECL, EXECLP) as usize];
    let mut small = [std::ptr::null::<c_char>(); ON_STACK];
    if count < ON_STACK {
        for (i, slot) in small.iter_mut().enumerate().take(count) {
            *slot = arg(i);
        }
        return target(path, small.as_ptr(), envp);
    }
    let bytes = (count + 1) * std::mem::size_of::<*const c_char>();
    // Written below and unmapped after a failed exec (a successful one never returns).
    let Some(map) = super::mem::map_private(bytes) else {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::E2BIG };
        return -1;
    };
    let argv = map as *mut *const c_char;
    for i in 0..=count {
        // SAFETY: `i <= count` lies inside the mapping of `count + 1` pointers.
        unsafe { *argv.add(i) = if i < count { arg(i) } else { std::ptr::null() } };
    }
    let rc = target(path, argv, envp);
    // Our own mapping; a raw call leaves the exec's errno as it is.
    crate::sys::raw::munmap(map as usize, bytes);
    rc
}

/// One entry: saves rsi..r9 below its frame, then calls `exec_list(path, regs, stack_args, kind)`.
macro_rules! entry {
    ($name:ident, $kind:expr) => {
        /// The interposed variadic function (see the module comment).
        #[cfg_attr(feature = "preload", unsafe(no_mangle))]
        #[unsafe(naked)]
        pub extern "C" fn $name() {
            std::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "push r9",
                "push r8",
                "push rcx",
                "push rdx",
                "push rsi",
                "mov rsi, rsp",
                "lea rdx, [rbp + 16]",
                "mov ecx, {kind}",
                "sub rsp, 8",
                "call {list}",
                "leave",
                "ret",
                kind = const $kind,
                list = sym exec_list,
            )
        }
    };
}

entry!(execl, EXECL);
entry!(execle, EXECLE);
entry!(execlp, EXECLP);
