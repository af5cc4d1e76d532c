//! Function names from the symbol table and DWARF, demangled.
