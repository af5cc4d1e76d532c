//! Reading a whole ELF file: every PC-keyed table, at link-time addresses.
