//! The Redis limiters' decision cost against a raw PING round trip on the
//! same connection, on a `redis-server` this bench starts itself.
//!
//! `latency/*`: one call at a time. `in_flight_64/*`: 64 calls multiplexed
//! on the one connection, reported as decisions per second.
//!
//! Run: `cargo bench --no-default-features --features redis --bench redis`

#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::future::join_all;
use redis::aio::ConnectionManager;
use redis_support::RedisServer;
use reqwest_pace::redis::{RedisBackend, RedisSlidingLog, RedisTokenBucket};
use reqwest_pace::{Error, Rate};

struct Fixture {
    conn: ConnectionManager,
    granted: RedisTokenBucket,
    refused: RedisTokenBucket,
    log: RedisSlidingLog,
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
        Err(Error::Throttled { .. })
    ));
}

async fn logged(log: &RedisSlidingLog) {
    log.try_acquire(1).await.unwrap();
}

fn bench(c: &mut Criterion) {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let fixture = rt.block_on(async {
        let backend = RedisBackend::connect(server.url()).await.unwrap();
        // One token per nanosecond, a burst of a million: always granted.
        let fast = Rate::new(1_000_000_000, Duration::from_secs(1)).unwrap();
        let granted = backend.token_bucket("granted", fast, 1_000_000).unwrap();
        // One per hour, already taken: always refused.
        let refused = backend
            .token_bucket("refused", Rate::per_hour(1).unwrap(), 1)
            .unwrap();
        refused.try_acquire(1).await.unwrap();
        // A window that stays a few hundred members long under the bench.
        let log = backend
            .sliding_log(
                "log",
                Rate::new(100_000, Duration::from_millis(10)).unwrap(),
            )
            .unwrap();
        Fixture {
            conn: backend.connection().clone(),
            granted,
            refused,
            log,
        }
    });
    let f = &fixture;

    let mut group = c.benchmark_group("latency");
    group.bench_function("ping", |b| b.to_async(&rt).iter(|| ping(&f.conn)));
    group.bench_function("token_bucket_granted", |b| {
        b.to_async(&rt).iter(|| granted(&f.granted))
    });
    group.bench_function("token_bucket_refused", |b| {
        b.to_async(&rt).iter(|| refused(&f.refused))
    });
    group.bench_function("token_bucket_acquire", |b| {
        b.to_async(&rt).iter(|| f.granted.acquire(1))
    });
    group.bench_function("sliding_log_granted", |b| {
        b.to_async(&rt).iter(|| logged(&f.log))
    });
    group.finish();

    const N: usize = 64;
    let mut group = c.benchmark_group("in_flight_64");
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function("ping", |b| {
        b.to_async(&rt)
            .iter(|| join_all((0..N).map(|_| ping(&f.conn))))
    });
    group.bench_function("token_bucket_granted", |b| {
        b.to_async(&rt)
            .iter(|| join_all((0..N).map(|_| granted(&f.granted))))
    });
    group.bench_function("token_bucket_refused", |b| {
        b.to_async(&rt)
            .iter(|| join_all((0..N).map(|_| refused(&f.refused))))
    });
    group.bench_function("sliding_log_granted", |b| {
        b.to_async(&rt)
            .iter(|| join_all((0..N).map(|_| logged(&f.log))))
    });
    group.finish();
    drop(fixture);
    drop(server);
}

criterion_group!(benches, bench);
criterion_main!(benches);
