//! What a run against a zoo server (`reqwest_pace::testing::zoo`) got, and
//! the goal checked at several phases of the server's wall clock: for
//! `tests/zoo.rs` (one client) and `tests/fleet_paused.rs` (a fleet).
#![allow(dead_code)]

pub mod space;

use std::future::Future;
use std::time::{Duration, UNIX_EPOCH};

use reqwest_pace::testing::{zoo, Answer, RateLimitedServer, ServerBuilder};

/// What a run got from a server.
#[derive(Debug)]
pub struct Figures {
    /// Admitted in the run ÷ (true sustained limit × run).
    pub goodput: f64,
    /// Share of responses refused by the limiter.
    pub refused: f64,
    /// Logical requests that ended in an error.
    pub failed: u64,
}

impl Figures {
    /// The figures of a run of `run` on `server` (started with it), with
    /// `failed` logical requests.
    pub fn of(server: &RateLimitedServer, run: Duration, failed: u64) -> Figures {
        let sustained = server.algorithm().sustained_per_second();
        let records = server.requests();
        let admitted = records
            .iter()
            .filter(|r| r.at <= run && r.outcome == Answer::Admitted)
            .count() as f64;
        let refused = records
            .iter()
            .filter(|r| r.outcome == Answer::Throttled)
            .count() as f64;
        Figures {
            goodput: admitted / (sustained * run.as_secs_f64()),
            refused: refused / records.len().max(1) as f64,
            failed,
        }
    }
}

/// The zoo preset `name`.
pub fn preset(name: &str) -> ServerBuilder {
    zoo::all()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, builder)| builder)
        .expect("zoo server by name")
}

/// Points of a second for a server's wall clock to start at, as
/// milliseconds past a whole second and the instant: whole-second `Date`s
/// and epoch resets make the client's view depend on the phase.
pub fn phases() -> impl Iterator<Item = (u64, std::time::SystemTime)> {
    [0, 250, 500, 750, 999].into_iter().map(|millis| {
        (
            millis,
            UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + millis),
        )
    })
}

/// Runs `run` on the server `make` builds with its wall clock starting at
/// each of several points of a second (whole-second `Date`s and epoch
/// resets make the client's view depend on it) and checks every run
/// against the goal.
pub async fn check_phases<F, Fut>(
    name: &str,
    make: impl Fn() -> ServerBuilder,
    run: F,
    min_goodput: f64,
    max_refused: f64,
) where
    F: Fn(ServerBuilder) -> Fut,
    Fut: Future<Output = Figures>,
{
    for (millis, wall) in phases() {
        let figures = run(make().wall_clock(wall)).await;
        println!("{name} (+{millis} ms): {figures:?}");
        let at = format!("{name} +{millis} ms: {figures:?}");
        assert!(figures.goodput >= min_goodput, "{at}");
        assert!(figures.refused <= max_refused, "{at}");
        assert_eq!(figures.failed, 0, "{at}");
    }
}
