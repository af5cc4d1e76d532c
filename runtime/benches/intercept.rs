//! Cost of racewatch's interposed libc functions against the plain libc call: each pair runs in one
//! process, the interposer first with the runtime owning `SIGTRAP` (the virtualising path, as in a
//! program whose detector runs).
//!
//! Run: `cargo bench -p racewatch-runtime --bench intercept`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use racewatch::intercept;
use racewatch::sys::signal;

extern "C" fn noop(arg: *mut libc::c_void) -> *mut libc::c_void {
    arg
}

fn empty_set() -> libc::sigset_t {
    signal::from_bits(0)
}

fn bench(c: &mut Criterion) {
    signal::install(|_| false, |_| {}).expect("install the SIGTRAP handler");
    let mut g = c.benchmark_group("intercept");

    let set = empty_set();
    let mut old = empty_set();
    g.bench_function("pthread_sigmask/libc", |b| {
        // SAFETY: blocks nothing; `old` is a live out-parameter.
        b.iter(|| unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, black_box(&set), &mut old) })
    });
    g.bench_function("pthread_sigmask/racewatch", |b| {
        b.iter(|| intercept::pthread_sigmask(libc::SIG_BLOCK, black_box(&set), &mut old))
    });

    // SAFETY: zeroed sigaction is a valid out-parameter.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    g.bench_function("sigaction/libc", |b| {
        // SAFETY: only reads SIGUSR1's disposition into a live out-parameter.
        b.iter(|| unsafe { libc::sigaction(black_box(libc::SIGUSR1), std::ptr::null(), &mut action) })
    });
    g.bench_function("sigaction/racewatch", |b| {
        b.iter(|| intercept::sigaction(black_box(libc::SIGUSR1), std::ptr::null(), &mut action))
    });

    g.bench_function("close/libc", |b| {
        // SAFETY: closing an invalid descriptor only returns EBADF.
        b.iter(|| unsafe { libc::close(black_box(-1)) })
    });
    g.bench_function("close/racewatch", |b| b.iter(|| intercept::close(black_box(-1))));

    // Any other file: one prefix test. The process's own status: a snapshot with the program's values.
    for (name, path) in [("open+close /dev/null", c"/dev/null"), ("open+close /proc/self/status", c"/proc/self/status")]
    {
        g.bench_function(format!("{name}/libc"), |b| {
            b.iter(|| {
                // SAFETY: opens a NUL-terminated path for reading and closes the descriptor it returns.
                unsafe { libc::close(libc::open(black_box(path.as_ptr()), libc::O_RDONLY)) }
            })
        });
        g.bench_function(format!("{name}/racewatch"), |b| {
            b.iter(|| intercept::close(intercept::open(black_box(path.as_ptr()), libc::O_RDONLY, 0)))
        });
    }

    let create = |interposed: bool| {
        let mut thread: libc::pthread_t = 0;
        let rc = if interposed {
            intercept::pthread_create(&mut thread, std::ptr::null(), noop, std::ptr::null_mut())
        } else {
            // SAFETY: creates a thread running `noop`, joined right below.
            unsafe { libc::pthread_create(&mut thread, std::ptr::null(), noop, std::ptr::null_mut()) }
        };
        assert_eq!(rc, 0);
        // SAFETY: `thread` was just created and is joined once.
        unsafe { libc::pthread_join(thread, std::ptr::null_mut()) };
    };
    g.bench_function("pthread_create+join/libc", |b| b.iter(|| create(false)));
    g.bench_function("pthread_create+join/racewatch", |b| b.iter(|| create(true)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
