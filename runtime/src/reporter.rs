//! The reporter thread: drains the queue, symbolizes, deduplicates and prints.
