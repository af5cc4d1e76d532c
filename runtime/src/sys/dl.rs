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

/// A symbol of a loaded module's dynamic symbol table (already mapped: no file is read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamicSymbol {
    /// The symbol's name as the table spells it (mangled).
    pub name: String,
    /// Its run-time address and size.
    pub address: u64,
    pub size: u64,
}

/// The dynamic symbol whose extent holds `addr` (`dladdr1` finds the nearest one at or below it; a
/// symbol that ends before `addr` names other code and is not returned).
pub fn dynamic_symbol_at(addr: u64) -> Option<DynamicSymbol> {
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let mut sym: *const libc::Elf64_Sym = std::ptr::null();
    const RTLD_DL_SYMENT: libc::c_int = 1;
    // SAFETY: `info` and `sym` are valid out-pointers; with RTLD_DL_SYMENT, `sym` receives a pointer into
    // the module's mapped symbol table, which stays mapped while the module is loaded (read at once here).
    let found = unsafe {
        libc::dladdr1(
            addr as *const libc::c_void,
            &mut info,
            (&mut sym as *mut *const libc::Elf64_Sym).cast(),
            RTLD_DL_SYMENT,
        )
    };
    if found == 0 || info.dli_sname.is_null() || sym.is_null() {
        return None;
    }
    // SAFETY: non-null results of a successful dladdr1: a NUL-terminated name and a symbol table entry.
    let (name, size) = unsafe { (CStr::from_ptr(info.dli_sname).to_string_lossy().into_owned(), (*sym).st_size) };
    let address = info.dli_saddr as u64;
    (addr >= address && addr - address < size.max(1)).then_some(DynamicSymbol { name, address, size })
}

/// The address of `name` in the process's global scope (the executable, then the libraries in load
/// order): `dlsym(RTLD_DEFAULT)`. Not from a signal handler (it takes the loader's lock).
pub fn global_symbol(name: &CStr) -> Option<u64> {
    // SAFETY: RTLD_DEFAULT is a valid pseudo-handle and `name` is NUL-terminated.
    let addr = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) } as u64;
    (addr != 0).then_some(addr)
}
