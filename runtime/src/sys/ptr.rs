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

/// A C string argument (a path, a mode): null or NUL-terminated, as the libc function requires.
pub fn opt_cstr<'a>(ptr: *const std::ffi::c_char) -> Option<&'a std::ffi::CStr> {
    // SAFETY: as in `opt_ref`: a non-null string argument of a libc function is NUL-terminated and
    // lives for the duration of the call.
    (!ptr.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(ptr) })
}

/// The name of a directory entry `readdir` returned (null or valid until the next `readdir`).
pub fn dirent_name<'a>(entry: *const libc::dirent64) -> Option<&'a [u8]> {
    // SAFETY: a non-null entry from the real `readdir` holds a NUL-terminated `d_name`.
    let entry = unsafe { entry.as_ref() }?;
    // SAFETY: `d_name` is NUL-terminated within the record.
    Some(unsafe { std::ffi::CStr::from_ptr(entry.d_name.as_ptr()) }.to_bytes())
}

/// Whether the C string at `ptr` (null or NUL-terminated) starts with `prefix`, read no further than
/// the first difference (no `strlen` of a long path).
pub fn cstr_starts_with(ptr: *const std::ffi::c_char, prefix: &[u8]) -> bool {
    !ptr.is_null()
        && prefix.iter().enumerate().all(|(i, &want)| {
            // SAFETY: the string is NUL-terminated and every byte before index `i` matched a non-NUL
            // byte of `prefix`, so byte `i` is within it.
            unsafe { *ptr.add(i) as u8 == want }
        })
}

/// Drops the entries of a `scandir` list (`count` pointers at `*list`, each from `malloc`) whose names
/// `hidden` says, freeing each, and closes the gap: returns the new count. The list keeps its allocation.
pub fn drop_scanned(
    list: *mut *mut *mut libc::dirent64,
    count: libc::c_int,
    hidden: impl Fn(&[u8]) -> bool,
) -> libc::c_int {
    // SAFETY: `list` is the out-pointer the program gave scandir, which filled it with a malloc'd
    // array of `count` entries (count > 0 checked by the caller's contract below).
    let Some(array) = (unsafe { list.as_ref() }).copied().filter(|a| !a.is_null() && count > 0) else { return count };
    let mut kept = 0usize;
    for i in 0..count as usize {
        // SAFETY: `i < count`, within the array scandir returned.
        let entry = unsafe { *array.add(i) };
        if dirent_name(entry).is_some_and(&hidden) {
            // SAFETY: each entry was allocated with malloc by scandir; nothing else refers to it.
            unsafe { libc::free(entry.cast()) };
            continue;
        }
        // SAFETY: `kept <= i < count`.
        unsafe { *array.add(kept) = entry };
        kept += 1;
    }
    kept as libc::c_int
}

/// The descriptor of a stream (`None` for a null or descriptor-less stream).
pub fn fileno(file: *mut libc::FILE) -> Option<i32> {
    if file.is_null() {
        return None;
    }
    // SAFETY: a non-null stream from the program's `fopen`, as its C contract requires.
    let fd = unsafe { libc::fileno(file) };
    (fd >= 0).then_some(fd)
}

/// The descriptor of a directory stream (`None` for a null one).
pub fn dir_fd(dir: *mut libc::DIR) -> Option<i32> {
    if dir.is_null() {
        return None;
    }
    // SAFETY: a non-null directory stream from the program's `opendir`, as its C contract requires.
    let fd = unsafe { libc::dirfd(dir) };
    (fd >= 0).then_some(fd)
}
