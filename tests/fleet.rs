//! A fleet of worker processes sharing one Redis budget for one server key
//! against the embedded rate-limited server.
//!
//! The workers are this test binary run again (`current_exe`) with
//! `PACE_FLEET_WORKER` set: the `fleet_worker` entry below returns at once
//! unless it is set (`tests/fleet_support` holds the worker). Each worker
//! builds its own `ThrottledClient` and its own Redis connection, as a
//! separate process of a real fleet would, runs 8 tasks of GETs until a
//! common deadline and prints its counts.
//!
//! The tests run on the real clock with other builds on the machine, so
//! they assert only what load cannot change: the server's refusals stay
//! within 1 % of the requests, every request a worker sent reached the
//! server once, every call ended, and a `Retry-After` seen by one worker
//! holds the others. Throughput is in the bench (`benches/fleet.rs`).
#![cfg(all(feature = "redis", feature = "testing"))]

mod fleet_support;
mod redis_support;

use std::time::Duration;

use fleet_support::{Job, Tally, TASKS, WORKERS};
use redis_support::RedisServer;
use reqwest_pace::testing::{Answer, Dialect, Fault, RateLimitedServer, RetryAfter};
use reqwest_pace::RequestRate;

/// The worker process: returns at once in a normal test run.
#[test]
fn fleet_worker() {
    fleet_support::work_from_env();
}

/// [`fleet_support::run_fleet`] with this binary's worker entry, the
/// workers starting together half a second from now.
async fn run_fleet(job: Job) -> Tally {
    let args = ["--exact", "fleet_worker", "--nocapture", "--test-threads=1"];
    fleet_support::run_fleet(job, &args, Duration::from_millis(500)).await
}

fn job(redis: &RedisServer, server: &RateLimitedServer, rate: u64, run_ms: u64) -> Job {
    Job {
        redis: redis.url(),
        server: server.url(),
        rate,
        shared: true,
        start_ms: 0,
        run_ms,
    }
}

async fn server(limit: u64, burst: u64, dialect: Dialect) -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(RequestRate::per_second(limit).unwrap())
        .burst(burst)
        .dialect(dialect)
        .start()
        .await
        .unwrap()
}

/// Every attempt a worker sent reached the server once, every call ended
/// in a 200 or a counted error, and the server agrees on the 200s and 429s.
fn assert_accounted(server: &RateLimitedServer, fleet: Tally) {
    let stats = server.stats().total;
    assert_eq!(stats.requests, fleet.sent, "{fleet:?} {stats:?}");
    assert_eq!(stats.ok, fleet.ok, "{fleet:?} {stats:?}");
    assert_eq!(
        stats.throttled + stats.faults,
        fleet.throttled,
        "{fleet:?} {stats:?}"
    );
    assert_eq!(fleet.calls, fleet.ok + fleet.failed, "{fleet:?}");
    assert!(fleet.ok > 0, "{fleet:?}");
}

/// The server refused at most 1 % of what it was sent.
fn assert_few_refused(server: &RateLimitedServer, what: &str) {
    let stats = server.stats().total;
    assert!(
        stats.throttled * 100 <= stats.requests,
        "{what}: {} of {} refused",
        stats.throttled,
        stats.requests
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_shares_a_configured_rate_without_over_admitting() {
    let redis = RedisServer::start();
    let server = server(100, 10, Dialect::XRateLimit).await;
    let fleet = run_fleet(job(&redis, &server, 100, 2_000)).await;
    eprintln!("configured: {fleet:?} {:?}", server.stats().total);
    assert_accounted(&server, fleet);
    // One shared bucket at the server's own rate: the server refuses
    // (almost) nothing. Four local buckets would have sent four times over.
    assert_few_refused(&server, "configured");
    assert_eq!(fleet.failed, 0, "{fleet:?}");
    server.shutdown().await;
}

/// A fleet of 20/s against a server that lets everything through, until
/// one request 1.5 s in (1 s of sending), whichever worker's it is, is
/// answered with a 429 asking for a wait of `seconds`; the fleet runs for
/// `run_ms`. Returns the server, the fleet's tally (checked against the
/// server's), where the 429 is among the server's requests, and how long
/// the whole run took.
async fn told_to_wait(seconds: u64, run_ms: u64) -> (RateLimitedServer, Tally, usize, Duration) {
    let redis = RedisServer::start();
    let server = server(10_000, 10_000, Dialect::None).await;
    let started = std::time::Instant::now();
    let run = tokio::spawn(run_fleet(job(&redis, &server, 20, run_ms)));
    // Let the fleet get going (it starts 0.5 s after the spawn).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.inject(
        Fault::too_many_requests()
            .times(1)
            .retry_after(RetryAfter::Seconds(seconds)),
    );
    let fleet = run.await.unwrap();
    let took = started.elapsed();
    assert_accounted(&server, fleet);
    let refused = server
        .requests()
        .iter()
        .position(|r| r.outcome == Answer::Fault)
        .expect("the fault was answered");
    (server, fleet, refused, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_obeys_a_retry_after_seen_by_one_worker() {
    let (server, fleet, refused, _) = told_to_wait(1, 3_500).await;
    let requests = server.requests();
    let at = requests[refused].at;
    // Within the second it asked for, only requests already admitted by
    // the shared bucket before the block reached Redis may arrive: at 20/s
    // shared by 32 tasks that is a few, at most one per task. After them,
    // nothing until the block ends.
    let inside: Vec<Duration> = requests[refused + 1..]
        .iter()
        .map(|r| r.at - at)
        .take_while(|&d| d < Duration::from_millis(980))
        .collect();
    eprintln!("retry-after: {fleet:?}; inside the block: {inside:?}");
    assert!(inside.len() <= WORKERS * TASKS, "{inside:?}");
    assert_eq!(fleet.failed, 0, "{fleet:?}");
    // And the fleet went on after it.
    assert!(
        requests.last().unwrap().at > at + Duration::from_millis(980),
        "nothing after the block"
    );
    server.shutdown().await;
}

/// Nothing configured: each worker learns the server's rate from its
/// headers and writes it to the shared bucket, so all four pace as one:
/// from the IETF headers, which state the window, and from bare
/// `X-RateLimit` ones, where each worker reads `remaining` against the
/// fleet's count of grants (its own admissions alone would show the server
/// drained four times faster than it spends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_learns_with_nothing_configured() {
    for dialect in [Dialect::Ietf, Dialect::XRateLimit] {
        let redis = RedisServer::start();
        let server = server(100, 10, dialect).await;
        let fleet = run_fleet(job(&redis, &server, 0, 3_000)).await;
        let stats = server.stats().total;
        eprintln!("learning, {dialect} headers: {fleet:?} {stats:?}");
        assert_accounted(&server, fleet);
        assert_few_refused(&server, dialect.as_str());
        assert_eq!(fleet.failed, 0, "{dialect}: {fleet:?}");
        server.shutdown().await;
    }
}

/// A `Retry-After` beyond the retry cap seen by one worker closes the key
/// for every worker: after it, only requests the shared bucket had already
/// granted reach the server, and every call ends at once (none sleeps
/// through the hour), so the run ends on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_fails_fast_on_a_wait_beyond_the_cap_seen_by_one_worker() {
    let (server, fleet, refused, took) = told_to_wait(3_600, 3_000).await;
    let requests = server.requests();
    let after = requests.len() - refused - 1;
    eprintln!("closed: {fleet:?}; {after} requests after the 429; took {took:?}");
    assert!(after <= WORKERS * TASKS, "{after} requests after the close");
    assert!(fleet.failed > 0, "{fleet:?}");
    // Nobody sat through the hour: the run (3 s, from half a second on)
    // ended within a minute of its end, however loaded the machine.
    assert!(took < Duration::from_secs(60), "{took:?}");
    server.shutdown().await;
}
