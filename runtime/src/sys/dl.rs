//! Symbols of an already loaded library, by `dlopen(RTLD_NOLOAD)` and `dlsym`.

use std::ffi::CStr;

/// A library that was loaded already (never loaded, and never unloaded, by this handle).
pub struct Loaded(*mut libc::c_void);

impl Loaded {
    /// The loaded library `name` (`libc.so.6`), or `None` when it is not loaded. The handle is never
    /// closed: it holds one more reference to a library that stays anyway, and `dlclose` is interposed by
    /// racewatch itself.
    pub fn find(name: &CStr) -> Option<Loaded> {
        // SAFETY: a NUL-terminated name; RTLD_NOLOAD only returns a handle to a library already loaded.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        (!handle.is_null()).then_some(Loaded(handle))
    }

    /// The address `symbol` resolves to in this library's scope (the library's own definition first; an
    /// IFUNC resolves to the implementation it picks for this CPU).
    pub fn symbol(&self, symbol: &CStr) -> Option<u64> {
        // SAFETY: a live handle from `dlopen` and a NUL-terminated name.
        let addr = unsafe { libc::dlsym(self.0, symbol.as_ptr()) } as u64;
        (addr != 0).then_some(addr)
    }
}
