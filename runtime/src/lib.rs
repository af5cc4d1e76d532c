//! libracewatch.so: the preloaded runtime of the racewatch race detector.
