//! Rendering race reports (text and JSON).
