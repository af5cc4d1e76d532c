//! Walking the loaded modules and reading their PC sections.
