//! Raw pointers handed to the runtime by C callers, turned into references.
// The pointers here are a C caller's, passed on under the libc function's own contract (null
// or valid); making these functions `unsafe` would only move the same promise into the callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

/// `ptr` as a reference: the C caller passes null or a valid pointer, as the
/// libc function it calls requires.
pub fn opt_ref<'a, T>(ptr: *const T) -> Option<&'a T> {
    // SAFETY: non-null pointers from a C caller of an interposed libc function point to a live
    // value of the documented type for the duration of the call.
    unsafe { ptr.as_ref() }
}

/// `ptr` as a mutable reference (an out-parameter of a libc function): null or valid, as above.
pub fn opt_mut<'a, T>(ptr: *mut T) -> Option<&'a mut T> {
    // SAFETY: as in `opt_ref`; out-parameters are not aliased by the caller during the call.
    unsafe { ptr.as_mut() }
}

/// A value the runtime leaked with `Box::leak` and published as a raw pointer (never freed).
pub fn leaked_ref<T>(ptr: *mut T) -> Option<&'static T> {
    // SAFETY: the only pointers passed here come from `Box::leak`, which are valid forever.
    unsafe { ptr.as_ref() }
}
