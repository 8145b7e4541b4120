//! A fleet of worker processes against one rate-limited server: one shared
//! Redis bucket with the server's rate configured, one shared Redis bucket
//! with nothing configured (the fleet learns from the responses), and one
//! local bucket per process with the rate configured (which over-sends by
//! the number of processes); then the learning fleet against every server
//! of the zoo.
//!
//! Each worker is this bench binary run again with `PACE_FLEET_WORKER`
//! set (`tests/fleet_support`, shared with `tests/fleet.rs`): its own
//! `ThrottledClient`, its own Redis connection, 8 tasks of GETs until a
//! common deadline. The parent starts a `redis-server` and the server
//! afresh for each row, sums the workers' counts and prints a markdown
//! table. Goodput is the server's 200s within the run over its true
//! sustained limit times the run (a server that starts full lets a perfect
//! fleet exceed 100 % a little); "run took" is from the common start to the
//! last worker's exit, which exceeds the set length when a call is held
//! past it.
//!
//! Then, beside one client (one worker process of the same 8 tasks on the
//! same shared bucket, nothing configured), the fleet against the three
//! limiters of `zoo::defeating`, and against the first `FLEET_SPACE`
//! (default none) servers of the generated space (`testing::space`), or the
//! seeds `FLEET_SEEDS` lists (`FLEET_SEEDS=30,88`): many
//! have windows of tens of seconds, which a run of 10 s cannot measure
//! (set `FLEET_SECONDS` to 60 or more for them).
//!
//! Run: `cargo bench -p reqwest-pace-benches --features redis,testing --bench fleet`
//! (`FLEET_SECONDS`, default 10, sets the length of each run; `FLEET_ROWS`
//! runs only the rows whose label contains it).

#[path = "../tests/fleet_support/mod.rs"]
mod fleet_support;
#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use std::time::Duration;

use fleet_support::{Job, TASKS, WORKERS};
use redis_support::RedisServer;
use reqwest_pace::testing::{space, zoo, Answer, Dialect, RateLimitedServer, ServerBuilder};
use reqwest_pace::RequestRate;

const LIMIT: u64 = 200;
const BURST: u64 = 20;

/// How the fleet's buckets are set up.
#[derive(Clone, Copy)]
enum Way {
    SharedRate,
    SharedLearning,
    LocalRate,
    /// One worker alone, learning on a shared bucket: the client the fleet
    /// is measured beside.
    OneLearning,
}

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::SharedRate => "shared Redis bucket, rate configured",
            Way::SharedLearning => "shared Redis bucket, nothing configured",
            Way::LocalRate => "local bucket per process, rate configured",
            Way::OneLearning => "one process, nothing configured",
        }
    }
}

/// The server of the first rows: a token bucket of `LIMIT`/s, burst
/// `BURST`, in `dialect`.
fn bucket(dialect: Dialect) -> ServerBuilder {
    RateLimitedServer::builder()
        .limit(RequestRate::per_second(LIMIT).unwrap())
        .burst(BURST)
        .dialect(dialect)
}

/// One run of the fleet against the server `builder` makes: a table row.
async fn row(label: &str, way: Way, builder: ServerBuilder, seconds: u64) -> String {
    row_of(label, way, builder, None, seconds).await
}

/// [`row`], the server's true sustained limit given where its algorithm
/// does not tell it all (a generated server's front limiter).
async fn row_of(
    label: &str,
    way: Way,
    builder: ServerBuilder,
    truth: Option<f64>,
    seconds: u64,
) -> String {
    let redis = RedisServer::start();
    let server = builder.start().await.unwrap();
    let sustained = truth.unwrap_or_else(|| server.algorithm().sustained_per_second());
    let job = Job {
        redis: redis.url(),
        server: server.url(),
        rate: match way {
            Way::SharedLearning | Way::OneLearning => 0,
            Way::SharedRate | Way::LocalRate => LIMIT,
        },
        shared: !matches!(way, Way::LocalRate),
        start_ms: 0,
        run_ms: seconds * 1_000,
    };
    let lead = Duration::from_secs(1);
    let begun = std::time::Instant::now();
    // Criterion's flags (`--bench`) mean nothing to the worker: the
    // environment variable makes it one.
    let workers = match way {
        Way::OneLearning => 1,
        _ => WORKERS,
    };
    let fleet = fleet_support::run_processes(job, &[], lead, workers).await;
    let took = begun.elapsed().saturating_sub(lead).as_secs_f64();
    let stats = server.stats().total;
    let records = server.requests();
    server.shutdown().await;
    assert_eq!(stats.requests, fleet.sent, "a request lost or doubled");
    // The run, on the server's clock: from the fleet's first request.
    let start = records.first().map_or(Duration::ZERO, |r| r.at);
    let end = start + Duration::from_secs(seconds);
    let ok = records
        .iter()
        .filter(|r| r.at <= end && r.outcome == Answer::Admitted)
        .count();
    let goodput = ok as f64 / (sustained * seconds as f64);
    // Refused by the server's own limiter or by one in front of it.
    let refused = records
        .iter()
        .filter(|r| matches!(r.outcome, Answer::Throttled | Answer::FrontRefused))
        .count();
    let refused = 100.0 * refused as f64 / stats.requests.max(1) as f64;
    format!(
        "| {label} | {} | {ok} | {:.1} % | {refused:.2} % | {} of {} | {took:.1} s |",
        stats.requests,
        100.0 * goodput,
        fleet.failed,
        fleet.calls
    )
}

fn main() {
    if fleet_support::work_from_env() {
        return;
    }
    let seconds: u64 = std::env::var("FLEET_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!(
        "{WORKERS} processes x {TASKS} tasks, {seconds} s per row; the first rows' server: \
         a token bucket of {LIMIT}/s, burst {BURST}\n"
    );
    println!("| fleet and server | requests | 200s in the run | goodput / limit | refused | failed calls | run took |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut rows: Vec<(String, Way, ServerBuilder)> = vec![
        (
            format!("{}, ietf headers", Way::SharedRate.label()),
            Way::SharedRate,
            bucket(Dialect::Ietf),
        ),
        (
            format!("{}, ietf headers", Way::SharedLearning.label()),
            Way::SharedLearning,
            bucket(Dialect::Ietf),
        ),
        (
            format!("{}, x-ratelimit headers", Way::SharedLearning.label()),
            Way::SharedLearning,
            bucket(Dialect::XRateLimit),
        ),
        (
            format!("{}, ietf headers", Way::LocalRate.label()),
            Way::LocalRate,
            bucket(Dialect::Ietf),
        ),
    ];
    for (name, builder) in zoo::all() {
        rows.push((
            format!("{}, zoo `{name}`", Way::SharedLearning.label()),
            Way::SharedLearning,
            builder,
        ));
    }
    // `FLEET_ROWS` runs only the rows whose label contains it.
    let only = std::env::var("FLEET_ROWS").unwrap_or_default();
    for (label, way, builder) in rows {
        if label.contains(&only) {
            println!("{}", runtime.block_on(row(&label, way, builder, seconds)));
        }
    }
    // One client beside the fleet, on servers nobody tuned it for.
    let space: u64 = std::env::var("FLEET_SPACE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut beside: Vec<(String, ServerBuilder, Option<f64>, ServerBuilder)> = Vec::new();
    // One builder for the client alone, one for the fleet.
    for ((name, one), (_, fleet)) in zoo::defeating().into_iter().zip(zoo::defeating()) {
        beside.push((format!("`{name}`"), one, None, fleet));
    }
    // `FLEET_SEEDS` (a comma-separated list) names the seeds instead.
    let seeds: Vec<u64> = match std::env::var("FLEET_SEEDS") {
        Ok(list) => list
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect(),
        Err(_) => (0..space).collect(),
    };
    for seed in seeds {
        let spec = space::ServerSpec::generate(seed);
        let truth = Some(spec.sustained_per_second());
        beside.push((
            // A table cell: the spec's fields without the bars between them.
            format!("#{seed} {spec}").replace(" | ", "; "),
            spec.builder(),
            truth,
            spec.builder(),
        ));
    }
    for (name, one, truth, fleet) in beside {
        for (way, builder) in [(Way::OneLearning, one), (Way::SharedLearning, fleet)] {
            let label = format!("{}, {name}", way.label());
            if label.contains(&only) {
                println!(
                    "{}",
                    runtime.block_on(row_of(&label, way, builder, truth, seconds))
                );
            }
        }
    }
}
