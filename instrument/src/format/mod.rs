//! Binary formats of PC-keyed metadata. Dependency-free: the runtime uses
//! this module too.

pub mod leb128;
pub mod pcsections;
pub mod stackmap;
