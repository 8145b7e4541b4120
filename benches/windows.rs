//! Window limiters beside the token bucket.
//!
//! Prints two deterministic measurements first, then runs criterion:
//! - the sliding window counter's error against the exact sliding log (and
//!   the fixed window's), on uniform, bursty and adversarial traffic, found
//!   by checking every window position;
//! - bytes per key for each algorithm;
//! - `try_acquire` on the admit and the refuse paths, for the token bucket
//!   and the three windows.
//!
//! `cargo bench -p reqwest-pace-benches --bench windows -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use reqwest_pace::limiter::{
    Algorithm, FixedWindow, FixedWindowLimiter, Gcra, Nanos, SlidingCounterLimiter, SlidingLog,
    SlidingLogLimiter, SlidingWindowCounter,
};
use reqwest_pace::{QueuedLimiter, RequestRate, TokenBucket};

const S: u64 = 1_000_000_000;

// ---------------------------------------------------------------------------
// Error of the approximations, over every window position

/// A deterministic stream of numbers (splitmix64).
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Arrival instants (weight 1 each), in order.
type Traffic = Vec<Nanos>;

const N: u64 = 100;
const W: u64 = S;
const WINDOWS: u64 = 1_000;

/// Offered at `factor`× the quota, evenly spaced.
fn uniform(factor: u64) -> Traffic {
    let gap = W / (N * factor);
    (0..WINDOWS * N * factor).map(|i| i * gap).collect()
}

/// Single calls at random gaps (uniform in `[0, 2W/(N·factor))`):
/// `factor`× the quota on average, smooth but not even.
fn random(factor: u64, seed: u64) -> Traffic {
    let mut stream = Stream(seed);
    let mut out = Vec::new();
    let mut now = 0;
    while now < WINDOWS * W {
        out.push(now);
        now += stream.below(2 * W / (N * factor));
    }
    out
}

/// Bursts of 1 to N/2 calls at one instant, random gaps; `factor`× the
/// quota on average.
fn bursty(factor: u64, seed: u64) -> Traffic {
    let mut stream = Stream(seed);
    let mut out = Vec::new();
    let mut now = 0;
    // Mean burst N/4, mean gap W/(4·factor): factor·N per W.
    while now < WINDOWS * W {
        for _ in 0..=stream.below(N / 2) {
            out.push(now);
        }
        now += stream.below(W / (2 * factor));
    }
    out
}

/// The counter's worst case, every three windows: an empty window, N calls
/// in the last nanosecond of the next, then a stream at 4× through the
/// third.
fn adversarial() -> Traffic {
    let mut out = Vec::new();
    for cycle in 0..WINDOWS / 3 {
        let base = cycle * 3 * W;
        out.extend(std::iter::repeat_n(base + 2 * W - 1, N as usize));
        out.extend((0..4 * N).map(|i| base + 2 * W + i * (W / (4 * N))));
    }
    out
}

/// What an algorithm admits of `traffic`, refused calls being dropped.
fn admitted(mut algorithm: impl Algorithm, traffic: &Traffic) -> Vec<Nanos> {
    traffic
        .iter()
        .copied()
        .filter(|&at| algorithm.try_admit(at, 1).is_ok())
        .collect()
}

/// The most admissions in any window `[s, s + W)`, over every start `s`
/// (the windows starting at each admission are the only candidates).
fn max_in_any_window(admitted: &[Nanos]) -> u64 {
    let mut end = 0;
    let mut max = 0;
    for (start, &at) in admitted.iter().enumerate() {
        while end < admitted.len() && admitted[end] < at + W {
            end += 1;
        }
        max = max.max(end - start);
    }
    max as u64
}

fn error_table() {
    let limit = RequestRate::new(N, Duration::from_nanos(W)).expect("a valid quota");
    let patterns: [(&str, Traffic); 8] = [
        ("uniform, offered 1×", uniform(1)),
        ("uniform, offered 2×", uniform(2)),
        ("random gaps, offered 1×", random(1, 4)),
        ("random gaps, offered 2×", random(2, 5)),
        ("bursty, offered 1×", bursty(1, 1)),
        ("bursty, offered 2×", bursty(2, 2)),
        ("bursty, offered 4×", bursty(4, 3)),
        ("adversarial (counter's worst case)", adversarial()),
    ];
    println!("\n### Error against the exact log: N = {N} per 1 s, {WINDOWS} windows");
    println!();
    println!("Most admitted in any 1 s window (every window position checked), and total admitted relative to the exact log.");
    println!();
    println!("| traffic | log max | counter max | fixed max | counter total vs log | fixed total vs log |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, traffic) in &patterns {
        let log = admitted(SlidingLog::new(limit).expect("valid"), traffic);
        let counter = admitted(SlidingWindowCounter::new(limit).expect("valid"), traffic);
        let fixed = admitted(FixedWindow::new(limit).expect("valid"), traffic);
        let pct = |n: usize| 100.0 * (n as f64 - log.len() as f64) / log.len() as f64;
        let over = |m: u64| {
            let o = 100.0 * (m as f64 - N as f64) / N as f64;
            format!("{m} ({o:+.0} %)")
        };
        println!(
            "| {name} | {} | {} | {} | {:+.2} % | {:+.2} % |",
            max_in_any_window(&log),
            over(max_in_any_window(&counter)),
            over(max_in_any_window(&fixed)),
            pct(counter.len()),
            pct(fixed.len()),
        );
    }
}

// ---------------------------------------------------------------------------
// Bytes per key

fn memory_table() {
    println!("\n### Bytes per key");
    println!();
    println!("| algorithm | state (inline) | heap, N = 100 full | heap, N = 1000 full | `QueuedLimiter<_>` (what a keyed map holds per key, behind its `Arc`) |");
    println!("|---|---:|---:|---:|---:|");
    let full_log = |n: u64| {
        let mut log = SlidingLog::new(RequestRate::new(n, Duration::from_secs(1)).expect("valid"))
            .expect("valid");
        // N admissions at N distinct instants: the most a log holds.
        for i in 0..n {
            log.try_admit(i, 1).expect("room for N");
        }
        log.memory_bytes() - std::mem::size_of::<SlidingLog>()
    };
    let rows: [(&str, usize, String, String, usize); 4] = [
        (
            "token bucket (`Gcra`)",
            std::mem::size_of::<Gcra>(),
            "0".into(),
            "0".into(),
            std::mem::size_of::<QueuedLimiter<Gcra>>(),
        ),
        (
            "fixed window",
            std::mem::size_of::<FixedWindow>(),
            "0".into(),
            "0".into(),
            std::mem::size_of::<QueuedLimiter<FixedWindow>>(),
        ),
        (
            "sliding window counter",
            std::mem::size_of::<SlidingWindowCounter>(),
            "0".into(),
            "0".into(),
            std::mem::size_of::<QueuedLimiter<SlidingWindowCounter>>(),
        ),
        (
            "sliding log",
            std::mem::size_of::<SlidingLog>(),
            full_log(100).to_string(),
            full_log(1000).to_string(),
            std::mem::size_of::<QueuedLimiter<SlidingLog>>(),
        ),
    ];
    for (name, inline, h100, h1000, wrapped) in rows {
        println!("| {name} | {inline} | {h100} | {h1000} | {wrapped} |");
    }
    println!();
}

// ---------------------------------------------------------------------------
// try_acquire

/// A quota that is never reached at benchmark speed: one per nanosecond.
fn open_rate() -> RequestRate {
    RequestRate::new(1_000_000, Duration::from_millis(1)).expect("valid")
}

/// A quota filled once, then refused for an hour: 1000 per hour.
fn full<A: Algorithm>(limiter: QueuedLimiter<A>) -> QueuedLimiter<A> {
    for _ in 0..1000 {
        let _ = limiter.try_acquire(1);
    }
    assert!(limiter.try_acquire(1).is_err());
    limiter
}

fn try_acquire(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_acquire_admit");
    let rate = open_rate();
    let bucket = TokenBucket::new(rate, rate.count()).expect("valid");
    let fixed = FixedWindowLimiter::fixed_window(rate).expect("valid");
    let log = SlidingLogLimiter::sliding_log(rate).expect("valid");
    let counter = SlidingCounterLimiter::sliding_counter(rate).expect("valid");
    group.bench_function("token_bucket", |b| {
        b.iter(|| black_box(bucket.try_acquire(black_box(1))))
    });
    group.bench_function("fixed_window", |b| {
        b.iter(|| black_box(fixed.try_acquire(black_box(1))))
    });
    group.bench_function("sliding_log", |b| {
        b.iter(|| black_box(log.try_acquire(black_box(1))))
    });
    group.bench_function("sliding_counter", |b| {
        b.iter(|| black_box(counter.try_acquire(black_box(1))))
    });
    group.finish();

    let mut group = c.benchmark_group("try_acquire_refuse");
    let rate = RequestRate::per_hour(1000).expect("valid");
    let bucket = full(TokenBucket::new(rate, 1000).expect("valid"));
    let fixed = full(FixedWindowLimiter::fixed_window(rate).expect("valid"));
    // Up to 1000 entries (one per distinct instant): the refusal's instant
    // is a binary search over them.
    let log = full(SlidingLogLimiter::sliding_log(rate).expect("valid"));
    let counter = full(SlidingCounterLimiter::sliding_counter(rate).expect("valid"));
    group.bench_function("token_bucket", |b| {
        b.iter(|| black_box(bucket.try_acquire(black_box(1))))
    });
    group.bench_function("fixed_window", |b| {
        b.iter(|| black_box(fixed.try_acquire(black_box(1))))
    });
    group.bench_function("sliding_log", |b| {
        b.iter(|| black_box(log.try_acquire(black_box(1))))
    });
    group.bench_function("sliding_counter", |b| {
        b.iter(|| black_box(counter.try_acquire(black_box(1))))
    });
    group.finish();
}

fn main() {
    error_table();
    memory_table();
    let mut criterion = Criterion::default().configure_from_args();
    try_acquire(&mut criterion);
    criterion.final_summary();
}
