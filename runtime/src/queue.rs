//! Fixed-size lock-free queue from signal handlers to the reporter thread.
//!
//! A bounded ring in the style of Vyukov's MPMC queue: every slot carries a
//! sequence number telling whose turn it is. A producer claims a position
//! with one compare-and-swap on the tail, fills the slot and publishes it by
//! storing the next sequence number (release). It never waits on anybody:
//! when the slot at the tail has not been consumed yet the queue is full and
//! `push` returns false. So a signal handler that interrupts a producer (even
//! on the same thread) cannot deadlock; at worst the consumer sees that one
//! slot later.
//!
//! Events are stored as atomic 64-bit words, so the queue needs no `unsafe`
//! and no allocation; the static instance lives in `.bss`.

use crate::event::{AccessRecord, RaceEvent, Stack, STACK_FRAMES};
use crate::sys::wake;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Slots of the process-wide queue.
pub const CAPACITY: usize = 64;

/// Words per encoded access: tid, pc, addr, flags, stack length (and frames elided, high half), frames.
const RECORD_WORDS: usize = 5 + STACK_FRAMES;
/// Words per encoded race event.
const EVENT_WORDS: usize = 2 * RECORD_WORDS;

struct Slot {
    seq: AtomicUsize,
    words: [AtomicU64; EVENT_WORDS],
}

impl Slot {
    const fn new(seq: usize) -> Slot {
        Slot { seq: AtomicUsize::new(seq), words: [const { AtomicU64::new(0) }; EVENT_WORDS] }
    }
}

/// A bounded multi-producer queue of [`RaceEvent`]s; `push` is async-signal-safe.
pub struct Queue<const N: usize> {
    slots: [Slot; N],
    head: AtomicUsize,
    tail: AtomicUsize,
}

impl<const N: usize> Queue<N> {
    /// An empty queue (usable in a `static`).
    pub const fn new() -> Self {
        let mut slots = [const { Slot::new(0) }; N];
        let mut i = 0;
        while i < N {
            slots[i] = Slot::new(i);
            i += 1;
        }
        Queue { slots, head: AtomicUsize::new(0), tail: AtomicUsize::new(0) }
    }

    /// Enqueues a copy of `event`; false when the queue is full.
    /// Async-signal-safe: no allocation, no locks, no waiting.
    pub fn push(&self, event: &RaceEvent) -> bool {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos % N];
            let seq = slot.seq.load(Ordering::Acquire);
            let lag = seq.wrapping_sub(pos) as isize;
            if lag == 0 {
                match self.tail.compare_exchange_weak(pos, pos.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        encode(event, &slot.words);
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return true;
                    }
                    Err(now) => pos = now,
                }
            } else if lag < 0 {
                return false;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Back to empty. Only while no other thread uses the queue.
    pub fn reset(&self) {
        for (i, slot) in self.slots.iter().enumerate() {
            slot.seq.store(i, Ordering::Release);
        }
        self.head.store(0, Ordering::Release);
        self.tail.store(0, Ordering::Release);
    }

    /// Whether nothing is queued: no published event and no push under way.
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst) == self.tail.load(Ordering::SeqCst)
    }

    /// Dequeues the oldest published event, if any.
    pub fn pop(&self) -> Option<RaceEvent> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos % N];
            let seq = slot.seq.load(Ordering::Acquire);
            let lag = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if lag == 0 {
                match self.head.compare_exchange_weak(pos, pos.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        let event = decode(&slot.words);
                        slot.seq.store(pos.wrapping_add(N), Ordering::Release);
                        return Some(event);
                    }
                    Err(now) => pos = now,
                }
            } else if lag < 0 {
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }
}

impl<const N: usize> Default for Queue<N> {
    fn default() -> Self {
        Self::new()
    }
}

static QUEUE: Queue<CAPACITY> = Queue::new();

/// Enqueues a race for the reporter; false when full (the caller counts `ReportsDropped`).
/// Async-signal-safe.
pub fn push(event: &RaceEvent) -> bool {
    let pushed = QUEUE.push(event);
    if pushed {
        wake::notify();
    }
    pushed
}

/// Empties the queue, slots half-written by threads that no longer exist included. Only while a single
/// thread runs (a forked child).
pub fn reset_after_fork() {
    QUEUE.reset();
}

/// Whether no race is pending (nor being pushed).
pub fn is_empty() -> bool {
    QUEUE.is_empty()
}

/// Takes the oldest pending race (reporter thread and exit path).
pub fn pop() -> Option<RaceEvent> {
    QUEUE.pop()
}

fn encode(event: &RaceEvent, words: &[AtomicU64; EVENT_WORDS]) {
    encode_record(&event.current, &words[..RECORD_WORDS]);
    encode_record(&event.previous, &words[RECORD_WORDS..]);
}

fn decode(words: &[AtomicU64; EVENT_WORDS]) -> RaceEvent {
    RaceEvent { current: decode_record(&words[..RECORD_WORDS]), previous: decode_record(&words[RECORD_WORDS..]) }
}

fn encode_record(record: &AccessRecord, words: &[AtomicU64]) {
    let flags = u64::from(record.size)
        | u64::from(record.is_write) << 8
        | u64::from(record.is_atomic) << 9
        | u64::from(record.locked) << 10;
    let len = record.stack.len.min(STACK_FRAMES) as u64 | (record.stack.elided.min(u32::MAX as usize) as u64) << 32;
    let head = [record.tid as u32 as u64, record.pc, record.addr, flags, len];
    for (word, value) in words.iter().zip(head.iter().chain(record.stack.pcs.iter())) {
        word.store(*value, Ordering::Relaxed);
    }
}

fn decode_record(words: &[AtomicU64]) -> AccessRecord {
    let word = |i: usize| words[i].load(Ordering::Relaxed);
    let flags = word(3);
    let len = word(4);
    let mut stack =
        Stack { len: (len as u32 as usize).min(STACK_FRAMES), elided: (len >> 32) as usize, pcs: [0; STACK_FRAMES] };
    for (i, pc) in stack.pcs.iter_mut().enumerate() {
        *pc = word(5 + i);
    }
    AccessRecord {
        tid: word(0) as u32 as i32,
        pc: word(1),
        addr: word(2),
        size: flags as u8,
        is_write: flags & (1 << 8) != 0,
        is_atomic: flags & (1 << 9) != 0,
        locked: flags & (1 << 10) != 0,
        stack,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn event(producer: u64, n: u64) -> RaceEvent {
        let frames: Vec<u64> = (0..(n % (STACK_FRAMES as u64 + 40))).map(|i| producer << 32 | n << 8 | i).collect();
        RaceEvent {
            current: AccessRecord {
                tid: -(producer as i32) - 1,
                pc: producer,
                addr: n,
                size: 8,
                is_write: n % 2 == 0,
                is_atomic: n % 3 == 0,
                locked: n % 7 == 0,
                stack: Stack::from_pcs(&frames),
            },
            previous: AccessRecord {
                tid: i32::MAX,
                pc: u64::MAX - n,
                addr: !producer,
                size: (n % 9) as u8,
                is_write: n % 5 == 0,
                is_atomic: false,
                locked: false,
                stack: Stack::from_pcs(&[n]),
            },
        }
    }

    fn push_with_retries<const N: usize>(queue: &Queue<N>, event: &RaceEvent) -> bool {
        for _ in 0..1000 {
            if queue.push(event) {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    #[test]
    fn round_trips_every_field_in_order() {
        let queue: Queue<4> = Queue::new();
        assert!(queue.pop().is_none() && queue.is_empty());
        for n in 0..4 {
            assert!(queue.push(&event(1, n)));
            assert!(!queue.is_empty());
        }
        assert!(!queue.push(&event(1, 4)), "a full queue refuses");
        for n in 0..4 {
            assert!(!queue.is_empty());
            assert_eq!(queue.pop(), Some(event(1, n)));
        }
        assert!(queue.pop().is_none() && queue.is_empty());
        // Positions wrap around the ring many times.
        for n in 0..100 {
            assert!(queue.push(&event(2, n)));
            assert_eq!(queue.pop(), Some(event(2, n)));
        }
    }

    #[test]
    fn concurrent_producers_lose_nothing_and_keep_each_producers_order() {
        const PRODUCERS: u64 = 4;
        const PER_PRODUCER: u64 = 20_000;
        let queue: Arc<Queue<8>> = Arc::new(Queue::new());
        let done = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let queue = Arc::clone(&queue);
                std::thread::spawn(move || {
                    let mut dropped = 0u64;
                    for n in 0..PER_PRODUCER {
                        // Retry a few times, then count a drop like the signal path does.
                        if !push_with_retries(&queue, &event(p, n)) {
                            dropped += 1;
                        }
                    }
                    dropped
                })
            })
            .collect();
        let consumer = {
            let queue = Arc::clone(&queue);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut last = vec![None::<u64>; PRODUCERS as usize];
                let mut received = 0u64;
                loop {
                    match queue.pop() {
                        Some(got) => {
                            let p = got.current.pc;
                            let n = got.current.addr;
                            assert_eq!(got, event(p, n), "event torn or corrupted");
                            if let Some(prev) = last[p as usize] {
                                assert!(n > prev, "producer {p}: {n} after {prev}");
                            }
                            last[p as usize] = Some(n);
                            received += 1;
                        }
                        None if done.load(Ordering::Acquire) => break,
                        None => std::thread::yield_now(),
                    }
                }
                while let Some(got) = queue.pop() {
                    assert_eq!(got, event(got.current.pc, got.current.addr));
                    received += 1;
                }
                received
            })
        };
        let dropped: u64 = producers.into_iter().map(|h| h.join().unwrap()).sum();
        done.store(true, Ordering::Release);
        let received = consumer.join().unwrap();
        assert_eq!(received + dropped, PRODUCERS * PER_PRODUCER);
        assert!(received > 0);
    }

    #[test]
    fn full_queue_push_returns_false_without_blocking() {
        let queue: Queue<2> = Queue::new();
        assert!(queue.push(&event(0, 0)));
        assert!(queue.push(&event(0, 1)));
        assert!(!queue.push(&event(0, 2)));
        assert_eq!(queue.pop(), Some(event(0, 0)));
        assert!(queue.push(&event(0, 2)));
    }
}
