//! `ThrottledClient` with nothing configured, against every server of the
//! zoo (`reqwest_pace::testing::zoo`): fixed windows in four header
//! conventions, a leaky bucket answering bare 429s or 503s, a moving window,
//! and a token bucket whose `limit` is its burst.
//!
//! The workload is the one of `benches/contenders.rs`: 16 tasks each run a
//! closed loop of logical requests for 10 s, on tokio's paused clock, so
//! every figure is exact and the run takes no real time. Each test pins the
//! goal: at least 95 % of the server's true sustained limit, at most 1 % of
//! responses refused where the server sends rate-limit headers and 2 % where
//! it sends none, and no failed logical request, at five phases of the
//! server's wall clock within a second.
#![cfg(feature = "testing")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use reqwest_pace::testing::{zoo, Algorithm, Outcome, ServerBuilder};
use reqwest_pace::ThrottledClient;
use tokio::time::Instant;

const TASKS: usize = 16;
const RUN: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Figures {
    /// Admitted in the run ÷ (true sustained limit × run).
    goodput: f64,
    /// Share of responses refused by the limiter.
    refused: f64,
    /// Logical requests that ended in an error.
    failed: u64,
}

async fn run(builder: ServerBuilder) -> Figures {
    let server = builder.start().await.expect("zoo server starts");
    let sustained = server.algorithm().sustained_per_second();
    // The jitter's draws fixed, so that every run is the same.
    let client = ThrottledClient::builder(reqwest::Client::new())
        .random(|| 0.5)
        .build()
        .expect("default client");
    let failed = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (client, url, failed) = (client.clone(), server.url(), Arc::clone(&failed));
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < RUN {
                if client.send(client.get(&url)).await.is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task ends");
    }
    let records = server.requests();
    let admitted = records
        .iter()
        .filter(|r| r.at <= RUN && r.outcome == Outcome::Admitted)
        .count() as f64;
    let refused = records
        .iter()
        .filter(|r| r.outcome == Outcome::Throttled)
        .count() as f64;
    Figures {
        goodput: admitted / (sustained * RUN.as_secs_f64()),
        refused: refused / records.len().max(1) as f64,
        failed: failed.load(Ordering::Relaxed),
    }
}

/// Runs the zoo server `name` at every phase (see [`check_phases`]).
async fn check(name: &str, min_goodput: f64, max_refused: f64) {
    let preset = || {
        zoo::all()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, builder)| builder)
            .expect("zoo server by name")
    };
    check_phases(name, preset, min_goodput, max_refused).await;
}

/// Runs the server `make` builds with its wall clock starting at each of
/// several points of a second (whole-second `Date`s and epoch resets make
/// the client's view depend on it) and checks every run.
async fn check_phases(
    name: &str,
    make: impl Fn() -> ServerBuilder,
    min_goodput: f64,
    max_refused: f64,
) {
    for millis in [0, 250, 500, 750, 999] {
        let wall = UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + millis);
        let figures = run(make().wall_clock(wall)).await;
        println!("{name} (+{millis} ms): {figures:?}");
        assert!(
            figures.goodput >= min_goodput,
            "{name} +{millis} ms: {figures:?}"
        );
        assert!(
            figures.refused <= max_refused,
            "{name} +{millis} ms: {figures:?}"
        );
        assert_eq!(figures.failed, 0, "{name} +{millis} ms: {figures:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn zoo_fixed_window_draft6() {
    check("fixed-window-draft6", 0.95, 0.01).await;
}

#[tokio::test(start_paused = true)]
async fn zoo_fixed_window_draft7() {
    check("fixed-window-draft7", 0.95, 0.01).await;
}

#[tokio::test(start_paused = true)]
async fn zoo_fixed_window_draft8() {
    check("fixed-window-draft8", 0.95, 0.01).await;
}

/// Epoch-second resets rounded up, against a `Date` truncated to the
/// second, place a 2 s window's end only to within a second: the window's
/// length is bracketed by what the client saw (still running, started
/// again) and taken as the whole number of seconds in that bracket.
#[tokio::test(start_paused = true)]
async fn zoo_fixed_window_legacy_epoch_resets() {
    check("fixed-window-legacy", 0.95, 0.01).await;
}

/// A window of a fractional number of seconds: the whole-second guess of
/// its length is proved wrong once, and the client falls back to what it
/// measured, without a refusal storm. Measured: 84 % to 100 % of the limit
/// across phases (a window's end is then known only to within a second),
/// under 1 % refused; pinned at 80 %.
#[tokio::test(start_paused = true)]
async fn zoo_fixed_window_of_fractional_seconds_with_epoch_resets() {
    let make = || {
        zoo::fixed_window_legacy().algorithm(Algorithm::FixedWindow {
            limit: 25,
            window: Duration::from_millis(2_500),
        })
    };
    check_phases("2.5 s window", make, 0.80, 0.01).await;
}

#[tokio::test(start_paused = true)]
async fn zoo_leaky_bucket_bare_429() {
    check("leaky-bucket-429", 0.95, 0.02).await;
}

#[tokio::test(start_paused = true)]
async fn zoo_leaky_bucket_bare_503() {
    check("leaky-bucket-503", 0.95, 0.02).await;
}

#[tokio::test(start_paused = true)]
async fn zoo_moving_window() {
    check("moving-window", 0.95, 0.01).await;
}

#[tokio::test(start_paused = true)]
async fn zoo_token_bucket_reporting_its_burst() {
    check("token-bucket-github", 0.95, 0.01).await;
}
