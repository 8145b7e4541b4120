//! The default client on a shared bucket, against the generated space of
//! servers (`reqwest_pace::testing::space`), on tokio's paused clock: one
//! process alone, and a fleet of four, each process with its own learning
//! and its own lessons, all through the shared Redis bucket's twin in
//! process (`tests/twin_support`; `tests/lua_mirror.rs` checks that it
//! answers as the real script does).
//!
//! The goal is the one client's (`tests/server_space.rs`): at least 0.95
//! of the true limit, at most 1 % of the responses refused, no failed
//! call, over 60 s with 16 tasks (four per process in the fleet).
//! `SPACE_SEED` and `SPACE_COUNT` move the seeds of the space runs, as in
//! `tests/server_space.rs`:
//!
//! ```text
//! SPACE_SEED=100 SPACE_COUNT=300 cargo test --release --all-features --test fleet_space \
//!     -- --include-ignored --nocapture
//! ```
#![cfg(feature = "testing")]

mod twin_support;
mod zoo_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use reqwest_pace::testing::space::{RunFigures, ServerSpec, Workload};
use reqwest_pace::testing::ServerService;
use reqwest_pace::{PaceLayer, PaceService, RequestRate};
use tower_layer::Layer;
use tower_service::Service;
use twin_support::{TwinBucket, TwinProcess};
use zoo_support::space::{self, env_u64, meets_goal};

/// The processes of a fleet, each handed out to the tasks in turn: a task
/// sends through the process its clone was handed.
struct Fleet {
    processes: Arc<Vec<PaceService<ServerService>>>,
    next: Arc<AtomicUsize>,
    mine: PaceService<ServerService>,
}

impl Fleet {
    /// `processes` processes of the default client, nothing configured but
    /// fixed jitter draws, each with its own scopes and lessons, sharing
    /// one bucket (open at first, as a learning scope's is), in front of
    /// `server`.
    fn new(processes: usize, server: ServerService) -> Result<Fleet, reqwest_pace::Error> {
        let shared = Arc::new(TwinBucket::new(RequestRate::per_second(10_000)?, 1)?);
        let processes: Vec<_> = (0..processes.max(1))
            .map(|_| Ok(PaceLayer::new(TwinProcess::client(&shared)?).layer(server.clone())))
            .collect::<Result<_, reqwest_pace::Error>>()?;
        let mine = processes[0].clone();
        Ok(Fleet {
            processes: Arc::new(processes),
            next: Arc::new(AtomicUsize::new(0)),
            mine,
        })
    }
}

impl Clone for Fleet {
    /// The next process in turn.
    fn clone(&self) -> Self {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.processes.len();
        Fleet {
            processes: Arc::clone(&self.processes),
            next: Arc::clone(&self.next),
            mine: self.processes[i].clone(),
        }
    }
}

impl Service<reqwest::Request> for Fleet {
    type Response = reqwest::Response;
    type Error = <PaceService<ServerService> as Service<reqwest::Request>>::Error;
    type Future = <PaceService<ServerService> as Service<reqwest::Request>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.mine.poll_ready(cx)
    }

    fn call(&mut self, request: reqwest::Request) -> Self::Future {
        self.mine.call(request)
    }
}

/// `processes` on one shared bucket, 16 tasks for 60 s on `spec`'s server.
async fn run(spec: &ServerSpec, processes: usize) -> RunFigures {
    spec.run(&Workload::default(), |server| Fleet::new(processes, server))
        .await
        .expect("the server starts")
}

/// `processes` on one shared bucket meet the goal on the server of space
/// seed `seed`, which `described` describes.
async fn meets_goal_on_seed(seed: u64, described: &str, processes: usize) {
    let spec = ServerSpec::generate(seed);
    assert_eq!(spec.to_string(), described);
    let figures = run(&spec, processes).await;
    assert!(meets_goal(&figures), "{figures:?}");
}

/// Seed 88 of the space: a leaky bucket of 177 a second that states its
/// burst and a reset in seconds, behind a header-less sliding counter of
/// 5,646 a minute (94 a second) that refuses with a bare 429.
fn behind_a_front() -> ServerSpec {
    let spec = ServerSpec::generate(88);
    assert_eq!(
        spec.to_string(),
        "leaky 177/s b16 | xrl limit=burst reset=delta | ra=ceil | 503 \
         | front counter 5646/60s 429"
    );
    spec
}

/// A process alone on a shared bucket, its server speaking but a limiter
/// in front refusing without a word: the bare refusals slow it down, as
/// they do a client on its own bucket. (Read as congestion only where the
/// key's count was its own, the process went on at the server's stated
/// pace once the front's minute was spent, and was refused 4,845 times,
/// 46 % of its requests, with 597 calls failed.)
#[tokio::test(start_paused = true)]
async fn a_process_on_a_shared_bucket_slows_for_a_header_less_limiter_in_front() {
    let figures = run(&behind_a_front(), 1).await;
    assert!(meets_goal(&figures), "{figures:?}");
}

/// The same server and a fleet of four processes: each reads the front's
/// bare refusals as congestion, and the fleet's shared rate comes down.
/// (Before: 46 % refused, 587 calls failed; 0.23 % refused now.)
#[tokio::test(start_paused = true)]
async fn a_fleet_slows_for_a_header_less_limiter_in_front() {
    let figures = run(&behind_a_front(), 4).await;
    assert!(meets_goal(&figures), "{figures:?}");
}

/// Seed 30 of the space: a bucket of one at 36 a second that counts the
/// requests it refuses, stating a quota of one with a fractional epoch
/// reset, which a `Date` in whole seconds places up to a second late. A
/// process alone on a shared bucket waits that second out, then is
/// refused once, sending past the refill; its cut starts from the rate it
/// was granted, not from the few sends since the block averaged over a
/// quarter second (16 a second, which held it at 15.5 a second for the
/// rest of the minute: 0.43 of the limit).
#[tokio::test(start_paused = true)]
async fn a_process_on_a_shared_bucket_cuts_from_its_rate_after_a_block() {
    let described =
        "bucket 36/s b1 | xrl limit=quota reset=epoch-frac | ra=frac | counts-refusals | 429";
    meets_goal_on_seed(30, described, 1).await;
}

/// Seed 260 of the space: a bucket of one (a leaky bucket of 103 a second
/// with no burst) that counts refused requests and states its burst with
/// a fractional epoch reset. A process alone on a shared bucket sees its
/// grants follow one another in the shared turns, so the gaps between its
/// sends are the server's: they pace it, as they pace a client on its own
/// bucket. (Read as a fleet's, they paced nothing, and the process held
/// 55 a second: 0.62 of the limit.)
#[tokio::test(start_paused = true)]
async fn a_process_alone_on_a_shared_bucket_paces_a_bucket_of_one_by_its_gaps() {
    let described =
        "leaky 103/s b0 | xrl limit=burst reset=epoch-frac | ra=ceil | counts-refusals | 429";
    meets_goal_on_seed(260, described, 1).await;
}

/// Seed 314 of the space: a leaky bucket of 78 a second with a burst of 4
/// and no headers. A process alone on a shared bucket cuts from what the
/// server admitted of its own requests, as a client on its own bucket
/// does: they are all the key spends. (Read as a share of a fleet's, they
/// measured nothing, and the cuts went by the rate sent alone: 0.910 of
/// the limit; 0.956 now, 0.970 for a client on its own bucket.)
#[tokio::test(start_paused = true)]
async fn a_process_alone_on_a_shared_bucket_cuts_from_its_admissions() {
    meets_goal_on_seed(314, "leaky 78/s b4 | no headers | 429", 1).await;
}

/// The goal on every server of seeds `SPACE_SEED..+SPACE_COUNT` (0..500)
/// for `processes` on one shared bucket; prints the distribution, the
/// misses and the mean goodput (each run's capped at 1) and share refused.
fn assert_goal_on_space(processes: usize) {
    let first = env_u64("SPACE_SEED", 0);
    let count = env_u64("SPACE_COUNT", 500);
    let runs = space::run_seeds(
        first..first + count,
        std::time::Duration::ZERO,
        Workload::default(),
        space::threads(),
        |server| Fleet::new(processes, server),
    );
    let n = runs.len().max(1) as f64;
    let goodput = runs.iter().map(|(_, f)| f.goodput.min(1.0)).sum::<f64>() / n;
    let refused = runs.iter().map(|(_, f)| f.refused).sum::<f64>() / n;
    let failed: u64 = runs.iter().map(|(_, f)| f.failed).sum();
    let misses: Vec<String> = runs
        .iter()
        .filter(|(_, f)| !meets_goal(f))
        .map(|(spec, f)| format!("#{} {spec}: {f:?}", spec.seed))
        .collect();
    println!(
        "{processes} process(es), seeds {first}..{}: {} of {count} miss the goal; mean goodput \
         {goodput:.4}, mean refused {:.2} %, {failed} failed calls",
        first + count,
        misses.len(),
        refused * 100.0
    );
    assert!(misses.is_empty(), "{}", misses.join("\n"));
}

/// One process on a shared bucket, over the space: what a client on its
/// own bucket meets (`tests/server_space.rs`) it should meet through the
/// shared one.
#[test]
#[ignore = "known gap: 112 of seeds 0..500 miss the goal (the client on its own bucket: 101), \
            mean goodput 0.969, 0.59 % refused, no failed call (114, 0.968 and 0.65 % before \
            a spacer's bracket stepped down from its top; 123 before a process alone \
            measured its admissions; 136, 0.964 and 0.61 % before a \
            process whose grants follow one another in the shared turns read its gaps as the \
            server's; 137 before a refusal's wait \
            stopped growing a bucket's pace and measuring its refill, 142 before a second rounded up \
            was read as a bucket's next unit, 145 before a window of one \
            was bounded by the admissions the shared count put in it; 3 failed calls before a \
            call refused by a lockout's probe kept its place; seeds 500..1000: 131, 0.969, 2 \
            failed calls (0.968 before the bracket stepped from its top); 143 and 0.966 before a process alone measured its admissions, 156 \
            and 0.961 before the turns): the header-less \
            regime on a shared rate reads slow servers less well (before a bare refusal was \
            read as a limiter in front and a lockout held a shared bucket: 167 missed, 2.84 % \
            refused, 2,916 failed calls)"]
fn the_space_through_a_shared_bucket() {
    assert_goal_on_space(1);
}

/// A fleet of four processes on a shared bucket, over the space.
#[test]
#[ignore = "known gap: 202 of seeds 0..500 miss the goal, mean goodput 0.9404, 1.56 % \
            refused, 8 failed calls (0.940 and 1.61 % before a spacer's bracket stepped down \
            from its top; 0.941 and 1.53 % before a process alone on the key for a \
            while, as one of a fleet on a slow server can be, was paced by its gaps; 201 before a refused probe's first echo kept the \
            target; 1.50 % before a refusal's wait stopped growing a \
            bucket's pace and measuring its refill; 203 before a small window whose readings agree for long \
            was read as one, 204 and 0.938 before a second rounded up was read as a \
            bucket's next unit, 0.937 before a block measured the fleet's grants, not \
            the process's own admissions; 209, 0.929 and 19 failed calls before a window of one \
            read by a process was bounded by the fleet's admissions in it, a bucket of one of \
            2 a second read as one window per 8 s; 210 and 0.924 before a bucket stating its \
            burst was no longer read as a window by a process that reads a quarter of its \
            answers; 22 failed calls before a call refused by a lockout's probe kept its \
            place; seeds 500..1000: 202, 0.9425, 1.66 %, 5 failed calls (0.942 and 1.68 % before the \
            bracket stepped from its top; 0.943 and 1.63 % before a \
            process alone was paced by its gaps; 1.64 % before a \
            refused probe's first echo kept the target; 203, 1.65 % and 7 \
            before a refusal's wait stopped growing a bucket's pace; 202 and 1.64 % before a \
            small window whose readings agree for long was read as one), 554 before a process \
            never admitted itself no longer read the server as failing and went on at the \
            fleet's rate into a GCRA that counts refusals, 490 of them there): each process \
            reads its quarter of the answers (the \
            fleet's readings are not pooled), and the processes' cuts of the one shared rate \
            compound (before a bare refusal was read as a limiter in front and a lockout held \
            a shared bucket: 228 missed, 3.95 % refused, 2,765 failed calls)"]
fn the_space_through_a_shared_bucket_for_a_fleet() {
    assert_goal_on_space(4);
}
