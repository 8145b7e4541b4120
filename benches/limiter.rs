//! The limiter core beside `governor`, on the same work in the same run.
//!
//! Prints the bytes each idle key costs first (measured from the resident
//! set of a fresh child process per library and key count, so one map's
//! freed memory cannot hide another's), then runs criterion:
//! - `uncontended`: `try_acquire(1)` on one bucket that always admits (a
//!   huge rate and burst) and on one that always refuses (1 per hour, empty);
//! - `contended_2_threads`: the same two buckets hammered by two OS threads
//!   at once; the time is wall time over decisions made by both;
//! - `keyed_100k`: lookup and decision over 100 000 pre-populated keys,
//!   strided and random, on one thread and on two;
//! - `parts`: what one decision is made of (clock reads, the lock, the pure
//!   GCRA step, a keyed `get`, a small key set that stays in cache), to
//!   explain the totals above, and a sketch of a lock-free bucket built from
//!   tokio's clock and one compare-and-swap (bench code only, not the
//!   library).
//!
//! Every group runs governor twice: with its default clock (quanta, reading
//! the TSC) and with `std::time::Instant` (`governor-std-clock`), the clock
//! reqwest-pace's tokio clock reads when it is not paused.
//!
//! `cargo bench --bench limiter -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use governor::clock::{Clock, MonotonicClock, QuantaClock};
use governor::{Quota, RateLimiter as Governor};
use reqwest_pace::limiter::{Algorithm, Gcra};
use reqwest_pace::{KeyedLimiter, RequestRate, TokenBucket};

/// Set in the child process that measures one map's memory.
const MEMORY_CHILD: &str = "REQWEST_PACE_BENCH_MEMORY";

/// governor on `std::time::Instant` (its `MonotonicClock`): the clock
/// reqwest-pace reads when tokio's is not paused, so the ratio against it is
/// the cost of everything but the clock.
const GOVERNOR_STD: &str = "governor-std-clock";

const KEYS: u64 = 100_000;
/// A prime, so `i · STRIDE mod KEYS` visits every key before repeating.
const STRIDE: u64 = 7_919;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("a non-zero constant")
}

// ---------------------------------------------------------------------------
// The buckets under test, built the same way for both libraries

/// 10⁹ per second (one token per nanosecond) with a burst of 10⁶: no
/// benchmark loop can drain it, so every call is admitted.
fn admitting_pace() -> TokenBucket {
    TokenBucket::new(RequestRate::per_second(1_000_000_000).unwrap(), 1_000_000).unwrap()
}

fn admitting_quota() -> Quota {
    Quota::per_second(nz(1_000_000_000)).allow_burst(nz(1_000_000))
}

/// 1 per hour, burst 1, emptied: every call within the hour is refused.
fn refusing_pace() -> TokenBucket {
    let bucket = TokenBucket::new(RequestRate::per_hour(1).unwrap(), 1).unwrap();
    bucket.try_acquire(1).unwrap();
    assert!(bucket.try_acquire(1).is_err());
    bucket
}

fn refusing_governor() -> governor::DefaultDirectRateLimiter {
    let limiter = Governor::direct(Quota::per_hour(nz(1)));
    limiter.check().unwrap();
    assert!(limiter.check().is_err());
    limiter
}

/// One keyed map per library, every key present, each key's bucket always
/// admitting. The idle timeout is an hour so no sweep changes the key count
/// mid-run; the bound is above the key count so nothing is evicted.
fn keyed_pace() -> KeyedLimiter<u64> {
    let keyed =
        KeyedLimiter::token_buckets(RequestRate::per_second(1_000_000_000).unwrap(), 1_000_000)
            .unwrap()
            .with_max_keys(2 * KEYS as usize)
            .with_idle_timeout(Duration::from_secs(3_600));
    for key in 0..KEYS {
        keyed.try_acquire(&key, 1).unwrap();
    }
    assert_eq!(keyed.len(), KEYS as usize);
    keyed
}

fn keyed_governor() -> governor::DefaultKeyedRateLimiter<u64> {
    let keyed = Governor::keyed(admitting_quota());
    for key in 0..KEYS {
        keyed.check_key(&key).unwrap();
    }
    assert_eq!(keyed.len(), KEYS as usize);
    keyed
}

/// A deterministic stream of numbers (splitmix64).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const RANDOM_LEN: usize = 1 << 20;

/// Random keys in `0..KEYS`, read in a cycle (precomputed so that drawing
/// them costs the same for both libraries: one load).
fn random_keys() -> Vec<u64> {
    let mut state = 42;
    (0..RANDOM_LEN)
        .map(|_| splitmix(&mut state) % KEYS)
        .collect()
}

// ---------------------------------------------------------------------------
// Timing helpers

/// Run `iters` decisions split over `threads` OS threads that start
/// together; returns the wall time from the first start to the last finish,
/// so criterion's per-iteration figure is wall time per decision.
fn on_threads(threads: u64, iters: u64, decide: &(dyn Fn(u64) + Sync)) -> Duration {
    let per_thread = iters.div_ceil(threads);
    let barrier = Barrier::new(threads as usize);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..per_thread {
                        decide(t * per_thread + i);
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let first = spans.iter().map(|s| s.0).min().expect("a thread");
    let last = spans.iter().map(|s| s.1).max().expect("a thread");
    // Scale to exactly `iters` decisions when they did not split evenly.
    (last - first).mul_f64(iters as f64 / (per_thread * threads) as f64)
}

// ---------------------------------------------------------------------------
// Bytes per idle key

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

/// In the child: insert `keys` idle keys into one library's map and print
/// the growth of the resident set per key.
fn memory_child(spec: &str) {
    let (library, keys) = spec.split_once(':').expect("library:keys");
    let keys: u64 = keys.parse().expect("a key count");
    let before = rss_bytes();
    let len = match library {
        "reqwest-pace" | "reqwest-pace-get" => {
            let keyed: KeyedLimiter<u64> =
                KeyedLimiter::token_buckets(RequestRate::per_second(10).unwrap(), 10)
                    .unwrap()
                    .with_max_keys(2 * keys as usize);
            for key in 0..keys {
                if library == "reqwest-pace" {
                    // One decision per key, as governor's entries below are
                    // made: the entry stays compact.
                    let _ = keyed.try_acquire(&key, 1);
                } else {
                    // `get` hands back the key's full limiter: the entry
                    // keeps it until a sweep folds it back.
                    drop(keyed.get(&key));
                }
            }
            let after = rss_bytes();
            let len = keyed.len();
            print_child(after - before, keys, len);
            black_box(keyed);
            len
        }
        "governor" => {
            let keyed = Governor::keyed(Quota::per_second(nz(10)));
            for key in 0..keys {
                let _ = keyed.check_key(&key);
            }
            let after = rss_bytes();
            let len = keyed.len();
            print_child(after - before, keys, len);
            black_box(keyed);
            len
        }
        other => panic!("unknown library {other}"),
    };
    assert_eq!(len as u64, keys, "every key must be live");
}

fn print_child(grown: u64, keys: u64, len: usize) {
    println!("{} {}", grown as f64 / keys as f64, len);
}

fn bytes_per_key(library: &str, keys: u64) -> f64 {
    let exe = std::env::current_exe().expect("the bench binary");
    let out = Command::new(exe)
        .env(MEMORY_CHILD, format!("{library}:{keys}"))
        .output()
        .expect("the memory child runs");
    assert!(out.status.success(), "memory child failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected child output {text:?}"))
}

fn memory_table() {
    println!("\n### Bytes per idle key (resident set growth / keys, u64 keys)");
    println!("| keys | reqwest-pace | governor (dashmap) | ratio | reqwest-pace, full limiters (`get`) |");
    println!("|---:|---:|---:|---:|---:|");
    for keys in [100_000, 1_000_000] {
        let pace = bytes_per_key("reqwest-pace", keys);
        let governor = bytes_per_key("governor", keys);
        let full = bytes_per_key("reqwest-pace-get", keys);
        println!(
            "| {keys} | {pace:.1} | {governor:.1} | {:.2} | {full:.1} |",
            pace / governor
        );
    }
    println!(
        "(size_of: reqwest-pace TokenBucket {} B, behind an Arc only while a caller needs it; \
         governor InMemoryState {} B inline; Result<(), reqwest_pace::Error> {} B)\n",
        std::mem::size_of::<TokenBucket>(),
        std::mem::size_of::<governor::state::InMemoryState>(),
        std::mem::size_of::<Result<(), reqwest_pace::Error>>(),
    );
}

// ---------------------------------------------------------------------------
// Criterion groups

fn uncontended(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncontended");

    let pace = admitting_pace();
    group.bench_function(BenchmarkId::new("reqwest-pace", "admit"), |b| {
        b.iter(|| black_box(pace.try_acquire(black_box(1))).is_ok())
    });
    let governor = Governor::direct(admitting_quota());
    group.bench_function(BenchmarkId::new("governor", "admit"), |b| {
        b.iter(|| black_box(governor.check()).is_ok())
    });
    let std_clock = Governor::direct_with_clock(admitting_quota(), MonotonicClock);
    group.bench_function(BenchmarkId::new(GOVERNOR_STD, "admit"), |b| {
        b.iter(|| black_box(std_clock.check()).is_ok())
    });
    assert!(pace.try_acquire(1).is_ok() && governor.check().is_ok() && std_clock.check().is_ok());

    let pace = refusing_pace();
    group.bench_function(BenchmarkId::new("reqwest-pace", "refuse"), |b| {
        b.iter(|| black_box(pace.try_acquire(black_box(1))).is_err())
    });
    let governor = refusing_governor();
    group.bench_function(BenchmarkId::new("governor", "refuse"), |b| {
        b.iter(|| black_box(governor.check()).is_err())
    });
    let std_clock = Governor::direct_with_clock(Quota::per_hour(nz(1)), MonotonicClock);
    std_clock.check().unwrap();
    group.bench_function(BenchmarkId::new(GOVERNOR_STD, "refuse"), |b| {
        b.iter(|| black_box(std_clock.check()).is_err())
    });
    assert!(
        pace.try_acquire(1).is_err() && governor.check().is_err() && std_clock.check().is_err()
    );

    group.finish();
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended_2_threads");

    let pace = admitting_pace();
    group.bench_function(BenchmarkId::new("reqwest-pace", "admit"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|_| {
                black_box(pace.try_acquire(black_box(1)).is_ok());
            })
        })
    });
    let governor = Governor::direct(admitting_quota());
    group.bench_function(BenchmarkId::new("governor", "admit"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|_| {
                black_box(governor.check().is_ok());
            })
        })
    });
    let std_clock = Governor::direct_with_clock(admitting_quota(), MonotonicClock);
    group.bench_function(BenchmarkId::new(GOVERNOR_STD, "admit"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|_| {
                black_box(std_clock.check().is_ok());
            })
        })
    });
    assert!(pace.try_acquire(1).is_ok() && governor.check().is_ok());

    let pace = refusing_pace();
    group.bench_function(BenchmarkId::new("reqwest-pace", "refuse"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|_| {
                black_box(pace.try_acquire(black_box(1)).is_err());
            })
        })
    });
    let governor = refusing_governor();
    group.bench_function(BenchmarkId::new("governor", "refuse"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|_| {
                black_box(governor.check().is_err());
            })
        })
    });
    let std_clock = Governor::direct_with_clock(Quota::per_hour(nz(1)), MonotonicClock);
    std_clock.check().unwrap();
    group.bench_function(BenchmarkId::new(GOVERNOR_STD, "refuse"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|_| {
                black_box(std_clock.check().is_err());
            })
        })
    });

    group.finish();
}

fn keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_100k");
    let pace = keyed_pace();
    let governor = keyed_governor();
    let std_clock = Governor::dashmap_with_clock(admitting_quota(), MonotonicClock);
    for key in 0..KEYS {
        std_clock.check_key(&key).unwrap();
    }
    let random = random_keys();
    let strided = |i: u64| i.wrapping_mul(STRIDE) % KEYS;
    let random_at = |i: u64| random[i as usize & (RANDOM_LEN - 1)];

    group.bench_function(BenchmarkId::new("reqwest-pace", "strided"), |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(pace.try_acquire(&strided(i), 1)).is_ok()
        })
    });
    group.bench_function(BenchmarkId::new("governor", "strided"), |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(governor.check_key(&strided(i))).is_ok()
        })
    });
    group.bench_function(BenchmarkId::new(GOVERNOR_STD, "strided"), |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(std_clock.check_key(&strided(i))).is_ok()
        })
    });

    group.bench_function(BenchmarkId::new("reqwest-pace", "random"), |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(pace.try_acquire(&random_at(i), 1)).is_ok()
        })
    });
    group.bench_function(BenchmarkId::new("governor", "random"), |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(governor.check_key(&random_at(i))).is_ok()
        })
    });
    group.bench_function(BenchmarkId::new(GOVERNOR_STD, "random"), |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(std_clock.check_key(&random_at(i))).is_ok()
        })
    });

    group.bench_function(BenchmarkId::new("reqwest-pace", "random_2_threads"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|i| {
                black_box(pace.try_acquire(&random_at(i), 1).is_ok());
            })
        })
    });
    group.bench_function(BenchmarkId::new("governor", "random_2_threads"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|i| {
                black_box(governor.check_key(&random_at(i)).is_ok());
            })
        })
    });
    group.bench_function(BenchmarkId::new(GOVERNOR_STD, "random_2_threads"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, &|i| {
                black_box(std_clock.check_key(&random_at(i)).is_ok());
            })
        })
    });

    group.finish();
    // Nothing was evicted or added: both maps still hold exactly the keys.
    assert_eq!(pace.len(), KEYS as usize);
    assert_eq!(governor.len(), KEYS as usize);
    assert_eq!(std_clock.len(), KEYS as usize);
}

/// Sketch: the GCRA step as one compare-and-swap on `full_at`, with
/// tokio's clock; what a lock-free fast path (nobody queued) would cost.
struct AtomicGcra {
    origin: tokio::time::Instant,
    full_at: std::sync::atomic::AtomicU64,
    interval: u64,
    span: u64,
}

impl AtomicGcra {
    fn try_admit(&self) -> Result<(), u64> {
        use std::sync::atomic::Ordering;
        let now = self.origin.elapsed().as_nanos() as u64;
        let mut full_at = self.full_at.load(Ordering::Relaxed);
        loop {
            let next = full_at.max(now) + self.interval;
            if next - now > self.span {
                return Err(next - self.span);
            }
            match self.full_at.compare_exchange_weak(
                full_at,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(seen) => full_at = seen,
            }
        }
    }
}

fn parts(c: &mut Criterion) {
    let mut group = c.benchmark_group("parts");

    group.bench_function("clock/tokio::time::Instant::now", |b| {
        b.iter(tokio::time::Instant::now)
    });
    group.bench_function("clock/std::time::Instant::now", |b| {
        b.iter(std::time::Instant::now)
    });
    let quanta = QuantaClock::default();
    group.bench_function("clock/governor QuantaClock::now", |b| {
        b.iter(|| quanta.now())
    });

    let mutex = std::sync::Mutex::new(0u64);
    group.bench_function("std Mutex lock+unlock", |b| {
        b.iter(|| *mutex.lock().unwrap() += 1)
    });

    let mut gcra = Gcra::new(
        RequestRate::per_second(1_000_000_000).unwrap(),
        1_000_000,
        1_000_000,
    );
    let mut now = 0u64;
    group.bench_function("Gcra::try_admit (pure, no clock, no lock)", |b| {
        b.iter(|| {
            now += 1;
            black_box(gcra.try_admit(black_box(now), black_box(1))).is_ok()
        })
    });

    let pace = keyed_pace();
    let random = random_keys();
    let random_at = |i: u64| random[i as usize & (RANDOM_LEN - 1)];
    // `get` hands out the key's full limiter: the entries turn from compact
    // into whole buckets as the run touches them.
    group.bench_function("keyed_100k/reqwest-pace get (random)", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(pace.get(&random_at(i)));
        })
    });
    drop(pace);

    let sketch = AtomicGcra {
        origin: tokio::time::Instant::now(),
        full_at: std::sync::atomic::AtomicU64::new(0),
        interval: 1,
        span: 1_000_000,
    };
    group.bench_function("sketch: lock-free GCRA, tokio clock (admit)", |b| {
        b.iter(|| black_box(sketch.try_admit()).is_ok())
    });
    let small = 1_000;
    let pace_small =
        KeyedLimiter::token_buckets(RequestRate::per_second(1_000_000_000).unwrap(), 1_000_000)
            .unwrap()
            .with_idle_timeout(Duration::from_secs(3_600));
    let governor_small = Governor::keyed(admitting_quota());
    for key in 0..small {
        pace_small.try_acquire(&key, 1).unwrap();
        governor_small.check_key(&key).unwrap();
    }
    group.bench_function("keyed_1k/reqwest-pace (random)", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(pace_small.try_acquire(&(random_at(i) % small), 1)).is_ok()
        })
    });
    group.bench_function("keyed_1k/governor (random)", |b| {
        let mut i = 0;
        b.iter(|| {
            i += 1;
            black_box(governor_small.check_key(&(random_at(i) % small))).is_ok()
        })
    });

    group.finish();
}

fn main() {
    if let Ok(spec) = std::env::var(MEMORY_CHILD) {
        memory_child(&spec);
        return;
    }
    memory_table();
    let mut criterion = Criterion::default().configure_from_args();
    uncontended(&mut criterion);
    contended(&mut criterion);
    keyed(&mut criterion);
    parts(&mut criterion);
    criterion.final_summary();
}
