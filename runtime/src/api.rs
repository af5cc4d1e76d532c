//! Exported C symbols: the constructor and the __sanitizer_metadata_* callbacks.
