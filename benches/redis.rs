//! The Redis limiters' decision cost against a raw PING round trip on the
//! same connection, on a `redis-server` this bench starts itself.
//!
//! `latency/*`: one call at a time. `in_flight_64/*`: 64 calls multiplexed
//! on the one connection, reported as decisions per second.
//!
//! Before criterion runs, an interleaved pass (PING, then each decision,
//! round after round) prints medians and ratios to PING measured under the
//! same conditions, which a busy machine skews far less than back-to-back
//! criterion groups.
//!
//! Run: `cargo bench -p reqwest-pace-benches --no-default-features --features redis --bench redis`

#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use futures::future::join_all;
use redis::aio::ConnectionManager;
use redis_support::RedisServer;
use reqwest_pace::redis::{RedisBackend, RedisSlidingLog, RedisTokenBucket};
use reqwest_pace::{Adjustment, Error, Limiter, RequestRate};

struct Fixture {
    conn: ConnectionManager,
    granted: RedisTokenBucket,
    refused: RedisTokenBucket,
    log: RedisSlidingLog,
    /// A bucket that is taught a response's lessons before each
    /// reservation (always granted).
    taught: RedisTokenBucket,
}

/// What one response with `X-RateLimit-*` headers typically teaches a
/// learning key: what remains, the burst, the rate.
fn lessons() -> Vec<Adjustment> {
    vec![
        Adjustment::SetRemaining(1_000_000),
        Adjustment::SetCapacity(1_000_000),
        Adjustment::SetRate(RequestRate::new(1_000_000_000, Duration::from_secs(1)).unwrap()),
    ]
}

/// A response's lessons and the next reservation as the client sent them
/// before lessons rode on reservations: one awaited call per adjustment,
/// on the response's path, then the reservation.
async fn taught_one_by_one(bucket: &RedisTokenBucket) {
    for lesson in lessons() {
        bucket.adjust(lesson).await.unwrap();
    }
    bucket.try_acquire(1).await.unwrap();
}

/// The same as the client sends them now: the lessons kept
/// (`Limiter::learn`, no round trip), carried by the reservation.
async fn taught_and_carried(bucket: &RedisTokenBucket) {
    Limiter::learn(bucket, lessons()).await.unwrap();
    bucket.try_acquire(1).await.unwrap();
}

async fn ping(conn: &ConnectionManager) {
    let mut conn = conn.clone();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

async fn granted(bucket: &RedisTokenBucket) {
    bucket.try_acquire(1).await.unwrap();
}

async fn refused(bucket: &RedisTokenBucket) {
    assert!(matches!(
        bucket.try_acquire(1).await,
        Err(Error::NotYet { .. })
    ));
}

async fn logged(log: &RedisSlidingLog) {
    log.try_acquire(1).await.unwrap();
}

async fn fixture(server: &RedisServer) -> Fixture {
    {
        let backend = RedisBackend::connect(server.url()).await.unwrap();
        // One token per nanosecond, a burst of a million: always granted.
        let fast = RequestRate::new(1_000_000_000, Duration::from_secs(1)).unwrap();
        let granted = backend.token_bucket("granted", fast, 1_000_000).unwrap();
        // One per hour, already taken: always refused.
        let refused = backend
            .token_bucket("refused", RequestRate::per_hour(1).unwrap(), 1)
            .unwrap();
        refused.try_acquire(1).await.unwrap();
        // A window that stays a few hundred members long under the bench.
        let log = backend
            .sliding_log(
                "log",
                RequestRate::new(100_000, Duration::from_millis(10)).unwrap(),
            )
            .unwrap();
        let taught = backend.token_bucket("taught", fast, 1_000_000).unwrap();
        Fixture {
            conn: backend.connection().clone(),
            granted,
            refused,
            log,
            taught,
        }
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn p99(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() * 99 / 100]
}

/// PING and the three decisions in turn, `ROUNDS` times, one call at a
/// time and then 64 in flight; prints medians and ratios to PING. One at
/// a time, also a response's lessons and the next reservation, sent as
/// the client sent them before and as it sends them now.
async fn interleaved(f: &Fixture) {
    const ROUNDS: usize = 2_000;
    const BATCHES: usize = 200;
    const N: usize = 64;
    let names = [
        "ping",
        "token_bucket_granted",
        "token_bucket_refused",
        "sliding_log_granted",
        "lessons_then_try_before",
        "lessons_carried_by_try",
    ];
    let mut one: [Vec<Duration>; 6] = Default::default();
    let mut many: [Vec<Duration>; 4] = Default::default();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        ping(&f.conn).await;
        one[0].push(t.elapsed());
        let t = Instant::now();
        granted(&f.granted).await;
        one[1].push(t.elapsed());
        let t = Instant::now();
        refused(&f.refused).await;
        one[2].push(t.elapsed());
        let t = Instant::now();
        logged(&f.log).await;
        one[3].push(t.elapsed());
        let t = Instant::now();
        taught_one_by_one(&f.taught).await;
        one[4].push(t.elapsed());
        let t = Instant::now();
        taught_and_carried(&f.taught).await;
        one[5].push(t.elapsed());
    }
    for _ in 0..BATCHES {
        let t = Instant::now();
        join_all((0..N).map(|_| ping(&f.conn))).await;
        many[0].push(t.elapsed());
        let t = Instant::now();
        join_all((0..N).map(|_| granted(&f.granted))).await;
        many[1].push(t.elapsed());
        let t = Instant::now();
        join_all((0..N).map(|_| refused(&f.refused))).await;
        many[2].push(t.elapsed());
        let t = Instant::now();
        join_all((0..N).map(|_| logged(&f.log))).await;
        many[3].push(t.elapsed());
    }
    let ping_one = median(&mut one[0]);
    let ping_many = median(&mut many[0]);
    println!("interleaved: {ROUNDS} rounds one at a time, {BATCHES} batches of {N} in flight");
    println!(
        "{:<24} {:>10} {:>10} {:>8} {:>14} {:>8}",
        "op", "median", "p99", "x PING", "calls/s (64)", "x PING"
    );
    for i in 0..6 {
        let med = median(&mut one[i]);
        let tail = p99(&mut one[i]);
        let (per_second, ratio) = match many.get_mut(i) {
            Some(batches) => {
                let batch = median(batches);
                let per_second = N as f64 / batch.as_secs_f64();
                let ratio = ping_many.as_secs_f64() / batch.as_secs_f64();
                (format!("{per_second:.0}"), format!("{ratio:.2}"))
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<24} {:>8.1}us {:>8.1}us {:>8.2} {:>14} {:>8}",
            names[i],
            med.as_secs_f64() * 1e6,
            tail.as_secs_f64() * 1e6,
            med.as_secs_f64() / ping_one.as_secs_f64(),
            per_second,
            ratio,
        );
    }
}

fn bench(c: &mut Criterion, rt: &tokio::runtime::Runtime, f: &Fixture) {
    let mut group = c.benchmark_group("latency");
    group.bench_function("ping", |b| b.to_async(rt).iter(|| ping(&f.conn)));
    group.bench_function("token_bucket_granted", |b| {
        b.to_async(rt).iter(|| granted(&f.granted))
    });
    group.bench_function("token_bucket_refused", |b| {
        b.to_async(rt).iter(|| refused(&f.refused))
    });
    group.bench_function("token_bucket_acquire", |b| {
        b.to_async(rt).iter(|| f.granted.acquire(1))
    });
    group.bench_function("sliding_log_granted", |b| {
        b.to_async(rt).iter(|| logged(&f.log))
    });
    group.finish();

    const N: usize = 64;
    let mut group = c.benchmark_group("in_flight_64");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("ping", |b| {
        b.to_async(rt)
            .iter(|| join_all((0..N).map(|_| ping(&f.conn))))
    });
    group.bench_function("token_bucket_granted", |b| {
        b.to_async(rt)
            .iter(|| join_all((0..N).map(|_| granted(&f.granted))))
    });
    group.bench_function("token_bucket_refused", |b| {
        b.to_async(rt)
            .iter(|| join_all((0..N).map(|_| refused(&f.refused))))
    });
    group.bench_function("sliding_log_granted", |b| {
        b.to_async(rt)
            .iter(|| join_all((0..N).map(|_| logged(&f.log))))
    });
    group.finish();
}

fn main() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fixture = rt.block_on(fixture(&server));
    // Only under `cargo bench` (which passes --bench), not `cargo test`.
    if std::env::args().any(|a| a == "--bench") {
        rt.block_on(interleaved(&fixture));
    }
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, &rt, &fixture);
    criterion.final_summary();
}
