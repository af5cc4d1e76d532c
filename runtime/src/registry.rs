//! Registered PC tables (module walk and callbacks) and publication of the index.
