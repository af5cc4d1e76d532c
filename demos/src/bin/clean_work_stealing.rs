//! Clean: an owner pushes tasks into a crossbeam-deque `Worker` in bursts and pops some back (the
//! buffer grows and shrinks) while two stealers take the rest. A stealer reads a task with
//! `read_volatile` while the owner may be overwriting that slot with `write_volatile`, and throws the
//! value away when its compare-exchange fails: a race crossbeam makes on purpose and marks volatile,
//! not reported by default (`report_volatile_races=1` reports it: see the detection tests). Every task
//! is taken exactly once (each has a plain counter only its taker bumps).

use crossbeam_deque::{Steal, Worker};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const TASKS: usize = 1 << 18;
const STEALERS: usize = 2;

struct Claims(Vec<UnsafeCell<u32>>);

// SAFETY: each task's counter is bumped only by the one thread that took the task.
unsafe impl Sync for Claims {}

impl Claims {
    fn take(&self, task: usize) {
        // SAFETY: see the Sync impl.
        unsafe { *self.0[task].get() += 1 }
    }
}

fn round(worker: Worker<usize>, claims: &Claims) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..STEALERS {
            let stealer = worker.stealer();
            let done = &done;
            s.spawn(move || {
                let local = Worker::new_fifo();
                loop {
                    match stealer.steal() {
                        Steal::Success(task) => claims.take(task),
                        Steal::Retry => {}
                        Steal::Empty if done.load(Ordering::Acquire) => break,
                        Steal::Empty => {}
                    }
                    if let Steal::Success(task) = stealer.steal_batch_and_pop(&local) {
                        claims.take(task);
                        while let Some(task) = local.pop() {
                            claims.take(task);
                        }
                    }
                }
            });
        }
        let mut next = 0;
        while next < TASKS {
            for _ in 0..(next % 61) + 1 {
                if next == TASKS {
                    break;
                }
                worker.push(next);
                next += 1;
            }
            for _ in 0..(next % 37) {
                match worker.pop() {
                    Some(task) => claims.take(task),
                    None => break,
                }
            }
        }
        while let Some(task) = worker.pop() {
            claims.take(task);
        }
        done.store(true, Ordering::Release);
    });
}

fn main() {
    let seconds = racewatch_demos::run_seconds(5.0);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut rounds, mut twice, mut lost) = (0u64, 0u64, 0u64);
    while rounds == 0 || Instant::now() < until {
        let claims = Claims((0..TASKS).map(|_| UnsafeCell::new(0)).collect());
        let worker = if rounds % 2 == 0 { Worker::new_lifo() } else { Worker::new_fifo() };
        round(worker, &claims);
        for counter in &claims.0 {
            // SAFETY: the round's threads have ended.
            match unsafe { *counter.get() } {
                1 => {}
                0 => lost += 1,
                n => twice += u64::from(n - 1),
            }
        }
        rounds += 1;
    }
    println!("clean_work_stealing: tasks taken twice {twice}, lost {lost}");
}
