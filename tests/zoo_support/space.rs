//! Runs a client on many servers of the generated space
//! (`reqwest_pace::testing::space`), each on a paused clock of its own,
//! spread over threads: for `tests/server_space.rs`, and for a bench that
//! wants the same figures for a seed and a count.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use reqwest_pace::testing::space::{RunFigures, ServerSpec, Workload};
use reqwest_pace::testing::ServerService;
use tower_service::Service;

/// The figures of the client `client` makes, on the server of each seed in
/// `seeds`, answering `latency` after each request, in seed order. Each
/// server runs in a current-thread runtime of its own with a paused clock,
/// so a run's figures do not depend on the runs before it nor on how many
/// `threads` share the work.
pub fn run_seeds<S, F>(
    seeds: Range<u64>,
    latency: std::time::Duration,
    workload: Workload,
    threads: usize,
    client: F,
) -> Vec<(ServerSpec, RunFigures)>
where
    F: Fn(ServerService) -> Result<S, reqwest_pace::Error> + Sync,
    S: Service<reqwest::Request, Response = reqwest::Response> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
{
    let seeds: Vec<u64> = seeds.collect();
    on_threads(&seeds, threads, |&seed| {
        let mut spec = ServerSpec::generate(seed);
        spec.latency = latency;
        let figures = paused()
            .block_on(spec.run(&workload, &client))
            .unwrap_or_else(|e| panic!("seed {seed} ({spec}) runs: {e}"));
        (spec, figures)
    })
}

/// `run` on every one of `items`, shared out over `threads`; the results in
/// the items' order.
pub fn on_threads<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    run: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else {
                    break;
                };
                let result = run(item);
                done.lock().expect("no run panicked").push((i, result));
            });
        }
    });
    let mut done = done.into_inner().expect("no run panicked");
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, result)| result).collect()
}

/// A current-thread runtime of its own with a paused clock, so that a
/// run's figures depend neither on the runs before it nor on how many
/// threads share the work.
pub fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a paused runtime")
}

/// The goal of the generated space on one run: at least 0.95 of the
/// limit, at most 1 % refused, no failed logical request.
pub fn meets_goal(f: &RunFigures) -> bool {
    meets_goal_refusing_at_most(f, 0.01)
}

/// The same goal with at most `refused` of the responses refused (2 %
/// over ten seconds where the server sends no rate-limit header).
pub fn meets_goal_refusing_at_most(f: &RunFigures, refused: f64) -> bool {
    meets_floors(f, 0.95, refused)
}

/// At least `goodput` of the limit, at most `refused` of the responses
/// refused, no failed logical request.
pub fn meets_floors(f: &RunFigures, goodput: f64, refused: f64) -> bool {
    f.goodput >= goodput && f.refused <= refused && f.failed == 0
}

/// The goal ([`meets_goal`]'s bounds, each asserted on its own) of the
/// default client, 16 tasks for 60 s, on the server `make` builds, its
/// wall clock started at each phase of a second ([`super::phases`]).
#[allow(dead_code)] // Not every test binary that shares this module uses it.
pub async fn assert_goal_at_every_phase(make: impl Fn() -> reqwest_pace::testing::ServerBuilder) {
    for (millis, wall) in super::phases() {
        let builder = make().wall_clock(wall);
        let f = default_client_in_process(builder, 16, std::time::Duration::from_secs(60)).await;
        println!("+{millis} ms: {f:?}");
        assert!(f.goodput >= 0.95, "+{millis} ms: {f:?}");
        assert!(f.refused <= 0.01, "+{millis} ms: {f:?}");
        assert_eq!(f.failed, 0, "+{millis} ms: {f:?}");
    }
}

/// The whole number in the environment variable `name`, else `default`
/// (`SPACE_SEED`, `SPACE_COUNT` and the like).
#[allow(dead_code)] // Not every test binary that shares this module uses it.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// `SPACE_THREADS`, else the machine's parallelism.
pub fn threads() -> usize {
    std::env::var("SPACE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The figures of the default client (nothing configured but fixed jitter
/// draws) on the server `builder` makes, called in process by `tasks`
/// closed loops for `run`.
pub async fn default_client_in_process(
    builder: reqwest_pace::testing::ServerBuilder,
    tasks: usize,
    run: std::time::Duration,
) -> RunFigures {
    default_client_in_process_against(builder, tasks, run, None).await
}

/// The same, measured against `sustained` per second where a limiter in
/// front is slower than the server's own (else the server's own limit).
pub async fn default_client_in_process_against(
    builder: reqwest_pace::testing::ServerBuilder,
    tasks: usize,
    run: std::time::Duration,
    sustained: Option<f64>,
) -> RunFigures {
    let server = builder.start().await.expect("server starts");
    let sustained = sustained.unwrap_or_else(|| server.algorithm().sustained_per_second());
    default_client_against(&server, tasks, run, sustained).await
}

/// The figures of the default client on `server`, already started (to
/// read its records after), measured against its own limit.
#[allow(dead_code)] // Not every test binary that shares this module uses it.
pub async fn default_client_in_process_on(
    server: &reqwest_pace::testing::RateLimitedServer,
    tasks: usize,
    run: std::time::Duration,
) -> RunFigures {
    let sustained = server.algorithm().sustained_per_second();
    default_client_against(server, tasks, run, sustained).await
}

async fn default_client_against(
    server: &reqwest_pace::testing::RateLimitedServer,
    tasks: usize,
    run: std::time::Duration,
    sustained: f64,
) -> RunFigures {
    use reqwest_pace::{PaceLayer, ThrottledClient};
    use tower_layer::Layer;

    let client = ThrottledClient::builder(reqwest::Client::new())
        .random(|| 0.5)
        .build()
        .expect("default client");
    Workload::new(tasks, run)
        .run(
            server,
            sustained,
            PaceLayer::new(client).layer(server.service()),
        )
        .await
        .expect("runs")
}
