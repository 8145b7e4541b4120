//! A fleet of worker processes sharing one Redis budget for one server key
//! against the embedded rate-limited server.
//!
//! The workers are this test binary run again (`current_exe`) with
//! `PACE_FLEET_WORKER` set: the `fleet_worker` entry below returns at once
//! unless it is set. Each worker builds its own `ThrottledClient` and its own
//! Redis connection, as a separate process of a real fleet would, runs 8
//! tasks of GETs until a common deadline and prints its counts.
//!
//! The tests run on the real clock with other builds on the machine, so
//! they assert only what load cannot change: the server's refusals stay
//! within 1 % of the requests, every request a worker sent reached the
//! server once, every call ended, and a `Retry-After` seen by one worker
//! holds the others. Throughput is in the bench (`benches/fleet.rs`).
#![cfg(all(feature = "redis", feature = "testing"))]

mod redis_support;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_support::RedisServer;
use reqwest_pace::redis::RedisBackend;
use reqwest_pace::testing::{Dialect, Fault, Outcome, RateLimitedServer, RetryAfter};
use reqwest_pace::{Event, Limiter, Rate, Scope, ThrottledClient};

const WORKER_ENV: &str = "PACE_FLEET_WORKER";
const WORKERS: usize = 4;
const TASKS: usize = 8;

/// What a worker is told: `redis_url server_url rate start_ms run_ms`,
/// with `rate` 0 for nothing configured (the scope learns).
struct Job {
    redis: String,
    server: String,
    rate: u64,
    start_ms: u64,
    run_ms: u64,
}

impl Job {
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.redis, self.server, self.rate, self.start_ms, self.run_ms
        )
    }

    fn decode(s: &str) -> Job {
        let f: Vec<&str> = s.split_whitespace().collect();
        Job {
            redis: f[0].to_string(),
            server: f[1].to_string(),
            rate: f[2].parse().unwrap(),
            start_ms: f[3].parse().unwrap(),
            run_ms: f[4].parse().unwrap(),
        }
    }
}

/// One worker's counts: attempts sent, calls made, calls that ended in
/// 200, responses that were 429, calls that ended in an error.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    sent: u64,
    calls: u64,
    ok: u64,
    throttled: u64,
    failed: u64,
}

impl Tally {
    fn add(self, o: Tally) -> Tally {
        Tally {
            sent: self.sent + o.sent,
            calls: self.calls + o.calls,
            ok: self.ok + o.ok,
            throttled: self.throttled + o.throttled,
            failed: self.failed + o.failed,
        }
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The worker process: returns at once in a normal test run.
#[test]
fn fleet_worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let job = Job::decode(&spec);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tally = runtime.block_on(work(job));
    println!(
        "FLEET {} {} {} {} {}",
        tally.sent, tally.calls, tally.ok, tally.throttled, tally.failed
    );
}

async fn work(job: Job) -> Tally {
    let backend = RedisBackend::connect(job.redis.as_str()).await.unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let throttled = Arc::new(AtomicU64::new(0));
    let scope = if job.rate > 0 {
        let rate = Rate::per_second(job.rate).unwrap();
        Scope::per_host().rate(rate).burst(1).limiter(move |key| {
            let bucket = backend.token_bucket(key, rate, 1)?;
            Ok(Arc::new(bucket) as Arc<dyn Limiter>)
        })
    } else {
        // Nothing configured: the bucket starts wide open and the scope
        // learns; what it learns is written to the shared bucket.
        let open = Rate::per_second(10_000).unwrap();
        Scope::per_host().limiter(move |key| {
            let bucket = backend.token_bucket(key, open, 1)?;
            Ok(Arc::new(bucket) as Arc<dyn Limiter>)
        })
    };
    let client = {
        let (sent, throttled) = (sent.clone(), throttled.clone());
        ThrottledClient::builder(reqwest::Client::new())
            .host_scope(scope)
            .on_event(move |event| match event {
                Event::Sent { .. } => {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                Event::Received { status: 429, .. } => {
                    throttled.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            })
            .build()
            .unwrap()
    };
    let start = job.start_ms;
    let end = start + job.run_ms;
    if let Some(wait) = start.checked_sub(epoch_ms()) {
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = client.clone();
        let url = job.server.clone();
        tasks.push(tokio::spawn(async move {
            let mut t = Tally::default();
            while epoch_ms() < end {
                t.calls += 1;
                match client.send(client.get(&url)).await {
                    Ok(r) if r.status() == 200 => t.ok += 1,
                    Ok(_) | Err(_) => t.failed += 1,
                }
            }
            t
        }));
    }
    let mut tally = Tally::default();
    for task in tasks {
        tally = tally.add(task.await.unwrap());
    }
    tally.sent = sent.load(Ordering::Relaxed);
    tally.throttled = throttled.load(Ordering::Relaxed);
    tally
}

/// Run `WORKERS` worker processes on `job` (its start is set here, a
/// moment ahead, so that they begin together) and sum their tallies.
async fn run_fleet(mut job: Job) -> Tally {
    job.start_ms = epoch_ms() + 500;
    let exe = std::env::current_exe().unwrap();
    let spec = job.encode();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "fleet_worker", "--nocapture", "--test-threads=1"])
                .env(WORKER_ENV, &spec)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a fleet worker")
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut total = Tally::default();
    for out in outputs {
        assert!(out.status.success(), "a worker failed: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("FLEET ").map(|(_, n)| n))
            .unwrap_or_else(|| panic!("no tally from a worker: {stdout}"));
        let n: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        total = total.add(Tally {
            sent: n[0],
            calls: n[1],
            ok: n[2],
            throttled: n[3],
            failed: n[4],
        });
    }
    total
}

async fn server(limit: u64, burst: u64, dialect: Dialect) -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(Rate::per_second(limit).unwrap())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_shares_a_configured_rate_without_over_admitting() {
    let redis = RedisServer::start();
    let server = server(100, 10, Dialect::XRateLimit).await;
    let fleet = run_fleet(Job {
        redis: redis.url(),
        server: server.url(),
        rate: 100,
        start_ms: 0,
        run_ms: 2_000,
    })
    .await;
    eprintln!("configured: {fleet:?} {:?}", server.stats().total);
    assert_accounted(&server, fleet);
    // One shared bucket at the server's own rate: the server refuses
    // (almost) nothing. Four local buckets would have sent four times over.
    let stats = server.stats().total;
    assert!(
        stats.throttled * 100 <= stats.requests,
        "{} of {} refused",
        stats.throttled,
        stats.requests
    );
    assert_eq!(fleet.failed, 0, "{fleet:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_obeys_a_retry_after_seen_by_one_worker() {
    let redis = RedisServer::start();
    let server = server(10_000, 10_000, Dialect::None).await;
    let run = {
        let job = Job {
            redis: redis.url(),
            server: server.url(),
            rate: 20,
            start_ms: 0,
            run_ms: 3_500,
        };
        tokio::spawn(run_fleet(job))
    };
    // Let the fleet get going (it starts 0.5 s after the spawn), then one
    // request, whichever worker's it is, is told to wait a second.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.inject(
        Fault::too_many_requests()
            .times(1)
            .retry_after(RetryAfter::Seconds(1)),
    );
    let fleet = run.await.unwrap();
    assert_accounted(&server, fleet);
    let requests = server.requests();
    let refused = requests
        .iter()
        .position(|r| r.outcome == Outcome::Fault)
        .expect("the fault was answered");
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

/// Nothing configured: each worker learns the server's rate from the IETF
/// headers and writes it to the shared bucket, so all four pace as one.
/// (With bare `X-RateLimit` headers, which state no window, each worker
/// infers the refill from its own admissions while the whole fleet drains
/// the server's bucket: it stays under the limit but holds calls for up to
/// a minute; see BENCHMARKS.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_learns_with_nothing_configured() {
    let redis = RedisServer::start();
    let server = server(100, 10, Dialect::Ietf).await;
    let fleet = run_fleet(Job {
        redis: redis.url(),
        server: server.url(),
        rate: 0,
        start_ms: 0,
        run_ms: 3_000,
    })
    .await;
    let stats = server.stats().total;
    eprintln!("learning: {fleet:?} {stats:?}");
    assert_accounted(&server, fleet);
    assert!(
        stats.throttled * 100 <= stats.requests,
        "{} of {} refused",
        stats.throttled,
        stats.requests
    );
    server.shutdown().await;
}
