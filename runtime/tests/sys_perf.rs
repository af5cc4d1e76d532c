//! Real-kernel tests of the perf wrappers and the SIGTRAP dispatcher: hardware
//! watchpoints trap in threads created after the open, `MODIFY_ATTRIBUTES`
//! moves them in running threads, the task-clock sampler fires about once
//! per period of CPU time, and bad attributes come back as errors.

use racewatch::sys::perf::{self, PerfEventAttr, SampleTimer, WatchKind, Watchpoint};
use racewatch::sys::signal::{self, PerfSignal};
use racewatch::sys::thread;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// The handler is process-wide: tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

static TRAPS: AtomicU32 = AtomicU32::new(0);
static LAST_DATA: AtomicU64 = AtomicU64::new(0);
static LAST_ADDR: AtomicU64 = AtomicU64::new(0);
static LAST_RIP: AtomicU64 = AtomicU64::new(0);
static LAST_TID: AtomicI32 = AtomicI32::new(0);
static SAMPLES: AtomicU32 = AtomicU32::new(0);
static SAMPLE_TID: AtomicI32 = AtomicI32::new(0);
static SAMPLES_IN_TID: AtomicU32 = AtomicU32::new(0);

fn on_perf(signal: &PerfSignal) {
    // Samples are told apart by sig_data: on 6.18 the task clock is its own PMU and
    // si_perf_type may read 7 rather than PERF_TYPE_SOFTWARE.
    match signal.kind {
        _ if signal.data == perf::SAMPLE_SIG_DATA => {
            SAMPLES.fetch_add(1, Ordering::SeqCst);
            if thread::gettid() == SAMPLE_TID.load(Ordering::SeqCst) {
                SAMPLES_IN_TID.fetch_add(1, Ordering::SeqCst);
            }
        }
        perf::PERF_TYPE_BREAKPOINT => {
            LAST_DATA.store(signal.data, Ordering::SeqCst);
            LAST_ADDR.store(signal.addr, Ordering::SeqCst);
            LAST_RIP.store(signal.regs.rip, Ordering::SeqCst);
            LAST_TID.store(thread::gettid(), Ordering::SeqCst);
            TRAPS.fetch_add(1, Ordering::SeqCst);
        }
        _ => {}
    }
}

/// A thread the runtime knows (its signals reach the callback), as the interposed `pthread_create`
/// makes them in a preloaded program.
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        thread::register_current();
        f()
    })
}

fn setup() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    thread::register_current();
    signal::install(|_| true, on_perf).expect("install SIGTRAP handler");
    TRAPS.store(0, Ordering::SeqCst);
    LAST_DATA.store(0, Ordering::SeqCst);
    LAST_TID.store(0, Ordering::SeqCst);
    guard
}

fn addr_of(x: &AtomicU64) -> u64 {
    x.as_ptr() as u64
}

/// Address of the instruction after the store in [`plain_write`].
static AFTER_STORE: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn plain_write(x: &AtomicU64, v: u64) {
    let after: u64;
    // A plain 8-byte store, as racy code would do it; `after` is the address the
    // CPU reports for a data breakpoint on it.
    // SAFETY: the pointer comes from a live AtomicU64; the asm only stores to it.
    unsafe {
        std::arch::asm!("mov qword ptr [{p}], {v}", "2:", "lea {a}, [rip + 2b]",
            p = in(reg) x.as_ptr(), v = in(reg) v, a = out(reg) after)
    };
    AFTER_STORE.store(after, Ordering::SeqCst);
}

#[inline(never)]
fn plain_read(x: &AtomicU64) -> u64 {
    let v: u64;
    // SAFETY: the pointer comes from a live AtomicU64; the asm only loads from it.
    unsafe { std::arch::asm!("mov {v}, qword ptr [{p}]", p = in(reg) x.as_ptr(), v = out(reg) v) };
    v
}

#[test]
fn write_watchpoint_traps_writes_not_reads_in_threads_created_later() {
    let _g = setup();
    static VAR: AtomicU64 = AtomicU64::new(0);
    let wp = Watchpoint::open(0).expect("perf_event_open breakpoint");
    wp.arm(addr_of(&VAR), 8, WatchKind::Write, 0xabc1).expect("arm");

    let reader = spawn(|| plain_read(&VAR)).join().unwrap();
    assert_eq!(reader, 0);
    assert_eq!(TRAPS.load(Ordering::SeqCst), 0, "a read must not trip a write watchpoint");

    let writer_tid = spawn(|| {
        plain_write(&VAR, 7);
        thread::gettid()
    })
    .join()
    .unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 1, "the write must trap exactly once");
    assert_eq!(LAST_DATA.load(Ordering::SeqCst), 0xabc1);
    assert_eq!(LAST_ADDR.load(Ordering::SeqCst), addr_of(&VAR));
    assert_eq!(LAST_TID.load(Ordering::SeqCst), writer_tid, "delivered to the writing thread");
    // A data breakpoint traps after the access: RIP is the next instruction.
    assert_eq!(LAST_RIP.load(Ordering::SeqCst), AFTER_STORE.load(Ordering::SeqCst));

    wp.disarm().unwrap();
    spawn(|| plain_write(&VAR, 8)).join().unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 1, "a disarmed watchpoint must not trap");
}

#[test]
fn read_write_watchpoint_traps_reads_and_only_its_bytes() {
    let _g = setup();
    static WORDS: [AtomicU64; 2] = [AtomicU64::new(1), AtomicU64::new(2)];
    let wp = Watchpoint::open(1).expect("open");
    wp.arm(addr_of(&WORDS[0]), 8, WatchKind::ReadWrite, 0x77).expect("arm");
    spawn(|| plain_read(&WORDS[1])).join().unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 0, "the neighbouring word is not watched");
    spawn(|| plain_read(&WORDS[0])).join().unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 1, "a read of the watched word traps");
    assert_eq!(LAST_DATA.load(Ordering::SeqCst), 0x77);
    wp.disarm().unwrap();
}

#[test]
fn modify_attributes_moves_the_watchpoint_in_running_threads() {
    let _g = setup();
    static A: AtomicU64 = AtomicU64::new(0);
    static B: AtomicU64 = AtomicU64::new(0);
    let wp = Watchpoint::open(2).expect("open");
    let (go_tx, go_rx) = mpsc::channel::<u32>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    // The worker exists before either arm.
    let worker = spawn(move || {
        while let Ok(step) = go_rx.recv() {
            plain_write(if step == 0 { &A } else { &B }, u64::from(step) + 1);
            done_tx.send(()).unwrap();
        }
    });
    wp.arm(addr_of(&A), 8, WatchKind::Write, 1).unwrap();
    go_tx.send(0).unwrap();
    done_rx.recv().unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 1);
    assert_eq!(LAST_DATA.load(Ordering::SeqCst), 1);

    wp.arm(addr_of(&B), 8, WatchKind::Write, 2).unwrap();
    go_tx.send(0).unwrap(); // writes A: no longer watched
    done_rx.recv().unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 1, "old address must not trap after the move");
    go_tx.send(1).unwrap(); // writes B
    done_rx.recv().unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 2, "new address traps in the running thread");
    assert_eq!(LAST_DATA.load(Ordering::SeqCst), 2, "sig_data follows the modification");
    wp.disarm().unwrap();
    drop(go_tx);
    worker.join().unwrap();
}

#[test]
fn task_clock_sampler_fires_about_once_per_period_of_cpu() {
    let _g = setup();
    let timer = SampleTimer::open(1_000_000).expect("open task-clock sampler");
    timer.enable().unwrap();
    let (samples, cpu_ns) = spawn(|| {
        SAMPLE_TID.store(thread::gettid(), Ordering::SeqCst);
        let before = SAMPLES_IN_TID.load(Ordering::SeqCst);
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < 200_000_000 {
            for i in 0..1000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        (SAMPLES_IN_TID.load(Ordering::SeqCst) - before, thread_cpu_ns() - start)
    })
    .join()
    .unwrap();
    timer.disable().unwrap();
    let expected = cpu_ns / 1_000_000;
    eprintln!("sampler: {samples} signals in {} ms of CPU", cpu_ns / 1_000_000);
    assert!(
        samples as u64 >= expected * 7 / 10 && samples as u64 <= expected * 13 / 10,
        "{samples} signals for {expected} ms of CPU at a 1 ms period"
    );
    // Disabled: no more signals.
    let after = SAMPLES.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(SAMPLES.load(Ordering::SeqCst), after);
}

#[test]
fn bad_attributes_are_errors_not_crashes() {
    let _g = setup();
    let mut attr = perf::sample_timer_attr(1000);
    attr.type_ = 0x7fff_0000; // no such PMU
    assert!(perf::open_raw(&attr).is_err());
    let mut attr = perf::sample_timer_attr(1000);
    attr.flags &= !perf::flag::REMOVE_ON_EXEC; // sigtrap requires remove_on_exec
    let err = perf::open_raw(&attr).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    let attr = PerfEventAttr { size: 1, ..perf::sample_timer_attr(1000) };
    assert!(perf::open_raw(&attr).is_err());

    static VAR: AtomicU64 = AtomicU64::new(0);
    let wp = Watchpoint::open(3).expect("open");
    assert!(wp.arm(addr_of(&VAR), 3, WatchKind::Write, 0).is_err(), "length 3 is invalid");
    assert!(wp.arm(addr_of(&VAR) + 2, 8, WatchKind::Write, 0).is_err(), "misaligned window");
    // A failed arm leaves the watchpoint usable.
    wp.arm(addr_of(&VAR), 8, WatchKind::Write, 9).expect("arm after failures");
    spawn(|| plain_write(&VAR, 1)).join().unwrap();
    assert_eq!(TRAPS.load(Ordering::SeqCst), 1);
    wp.disarm().unwrap();
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
