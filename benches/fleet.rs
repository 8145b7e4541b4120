//! A fleet of worker processes against one rate-limited server, three ways:
//! one shared Redis bucket with the server's rate configured, one shared
//! Redis bucket with nothing configured (the fleet learns from the
//! headers), and one local bucket per process with the rate configured
//! (which over-sends by the number of processes).
//!
//! Each worker is this bench binary run again with `FLEET_CHILD` set: its
//! own `ThrottledClient`, its own Redis connection, 8 tasks of GETs until a
//! common deadline. The parent starts a `redis-server` and the embedded
//! server afresh for each way, sums the workers' counts and prints a
//! markdown table. Goodput is the server's 200s over `limit x seconds`
//! (its bucket starts full, so a perfect fleet slightly exceeds 100 %);
//! "run took" is from the common start to the last worker's exit, which
//! exceeds the set length when a call is held past it.
//!
//! Run: `cargo bench -p reqwest-pace-benches --features redis,testing --bench fleet`
//! (`FLEET_SECONDS`, default 10, sets the length of each run).

#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_support::RedisServer;
use reqwest_pace::redis::RedisBackend;
use reqwest_pace::testing::{Dialect, RateLimitedServer};
use reqwest_pace::{Event, Limiter, Rate, Scope, ThrottledClient};

const FLEET_CHILD: &str = "REQWEST_PACE_BENCH_FLEET";
const WORKERS: usize = 4;
const TASKS: usize = 8;
const LIMIT: u64 = 200;
const BURST: u64 = 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    SharedRate,
    SharedLearning,
    LocalRate,
}

impl Way {
    const ALL: [Way; 3] = [Way::SharedRate, Way::SharedLearning, Way::LocalRate];

    fn name(self) -> &'static str {
        match self {
            Way::SharedRate => "shared-rate",
            Way::SharedLearning => "shared-learning",
            Way::LocalRate => "local-rate",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Way::SharedRate => "shared Redis bucket, rate configured",
            Way::SharedLearning => "shared Redis bucket, nothing configured",
            Way::LocalRate => "local bucket per process, rate configured",
        }
    }

    fn parse(s: &str) -> Way {
        Way::ALL.into_iter().find(|w| w.name() == s).unwrap()
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    sent: u64,
    calls: u64,
    ok: u64,
    throttled: u64,
    failed: u64,
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn scope(way: Way, backend: RedisBackend) -> Scope {
    let rate = Rate::per_second(LIMIT).unwrap();
    match way {
        Way::SharedRate => Scope::per_host().rate(rate).burst(1).limiter(move |key| {
            let bucket = backend.token_bucket(key, rate, 1)?;
            Ok(Arc::new(bucket) as Arc<dyn Limiter>)
        }),
        Way::SharedLearning => {
            let open = Rate::per_second(10_000).unwrap();
            Scope::per_host().limiter(move |key| {
                let bucket = backend.token_bucket(key, open, 1)?;
                Ok(Arc::new(bucket) as Arc<dyn Limiter>)
            })
        }
        Way::LocalRate => Scope::per_host().rate(rate).burst(1),
    }
}

/// The worker: `way redis_url server_url start_ms run_ms`.
async fn child(spec: &str) -> Tally {
    let f: Vec<&str> = spec.split_whitespace().collect();
    let way = Way::parse(f[0]);
    let backend = RedisBackend::connect(f[1]).await.unwrap();
    let url = f[2].to_string();
    let start: u64 = f[3].parse().unwrap();
    let end = start + f[4].parse::<u64>().unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let throttled = Arc::new(AtomicU64::new(0));
    let client = {
        let (sent, throttled) = (sent.clone(), throttled.clone());
        ThrottledClient::builder(reqwest::Client::new())
            .host_scope(scope(way, backend))
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
    if let Some(wait) = start.checked_sub(epoch_ms()) {
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = client.clone();
        let url = url.clone();
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
        let t = task.await.unwrap();
        tally.calls += t.calls;
        tally.ok += t.ok;
        tally.failed += t.failed;
    }
    tally.sent = sent.load(Ordering::Relaxed);
    tally.throttled = throttled.load(Ordering::Relaxed);
    tally
}

/// One run of the fleet: the workers' summed tally and the server's
/// requests, 200s and 429s.
async fn run(way: Way, dialect: Dialect, seconds: u64) -> (Tally, u64, u64, u64) {
    let redis = RedisServer::start();
    let server = RateLimitedServer::builder()
        .limit(Rate::per_second(LIMIT).unwrap())
        .burst(BURST)
        .dialect(dialect)
        .start()
        .await
        .unwrap();
    let spec = format!(
        "{} {} {} {} {}",
        way.name(),
        redis.url(),
        server.url(),
        epoch_ms() + 1_000,
        seconds * 1_000
    );
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(&exe)
                .env(FLEET_CHILD, &spec)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
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
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let n: Vec<u64> = stdout
            .lines()
            .find_map(|l| l.split_once("FLEET ").map(|(_, n)| n))
            .unwrap()
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        total.sent += n[0];
        total.calls += n[1];
        total.ok += n[2];
        total.throttled += n[3];
        total.failed += n[4];
    }
    let stats = server.stats().total;
    server.shutdown().await;
    (total, stats.requests, stats.ok, stats.throttled)
}

fn main() {
    if let Ok(spec) = std::env::var(FLEET_CHILD) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let t = runtime.block_on(child(&spec));
        println!(
            "FLEET {} {} {} {} {}",
            t.sent, t.calls, t.ok, t.throttled, t.failed
        );
        return;
    }
    // Criterion's flags (`--bench`) are not ours; only the length is.
    let seconds: u64 = std::env::var("FLEET_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!(
        "{WORKERS} processes x {TASKS} tasks, {seconds} s, server limit {LIMIT}/s burst {BURST}\n"
    );
    println!("| fleet | requests | 200s | goodput / limit | 429s | failed calls | run took |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    // The learning fleet twice: with the IETF headers (a window in the
    // policy) and with bare X-RateLimit ones.
    let runs = [
        (Way::SharedRate, Dialect::Ietf),
        (Way::SharedLearning, Dialect::Ietf),
        (Way::SharedLearning, Dialect::XRateLimit),
        (Way::LocalRate, Dialect::Ietf),
    ];
    for (way, dialect) in runs {
        let begun = std::time::Instant::now();
        let (fleet, requests, ok, throttled) = runtime.block_on(run(way, dialect, seconds));
        let took = begun.elapsed().as_secs_f64() - 1.0;
        assert_eq!(requests, fleet.sent, "a request lost or doubled");
        let goodput = ok as f64 / (LIMIT * seconds) as f64;
        let refused = 100.0 * throttled as f64 / requests.max(1) as f64;
        println!(
            "| {}, {dialect} headers | {requests} | {ok} | {:.1} % | {refused:.2} % | {} of {} | {took:.1} s |",
            way.label(),
            100.0 * goodput,
            fleet.failed,
            fleet.calls
        );
    }
}
