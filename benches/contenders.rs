//! Goodput against the real servers of the zoo: this crate beside what a
//! user would otherwise reach for, on the same workload, in one run.
//!
//! Every server of [`reqwest_pace::testing::zoo`] (fixed windows in four
//! header conventions, nginx's leaky bucket answering bare 429s or 503s, a
//! moving window, a token bucket whose `limit` is its burst) is started
//! afresh for each contender. 16 tasks each run a closed loop of *logical
//! requests* (one `GET /`, retried as the contender's policy says) for 10 s;
//! in-flight requests may then finish within a grace period, so every one
//! ends as a success or a failure.
//!
//! The contenders, each on a fresh `reqwest::Client`:
//!
//! - `reqwest` — plain `send()`; a refusal is a failed request.
//! - `reqwest-retry` — `RetryTransientMiddleware` with
//!   `ExponentialBackoff::builder().build_with_max_retries(3)` (1 s base,
//!   doubling, jitter; it retries 429 and 5xx and does not read
//!   `Retry-After`).
//! - `reqwest::retry` — reqwest 0.13's own retry policy,
//!   `retry::for_host("127.0.0.1")` classifying 429 and 503 as retryable,
//!   3 retries, its default budget of 20 % extra load; it retries at once.
//! - `governor` — a direct `governor` limiter told the server's true
//!   sustained rate and burst; every attempt waits `until_ready`, and a
//!   refusal is retried through the limiter, up to 3 retries.
//! - `reqwest-pace` — `ThrottledClient` with nothing configured and its
//!   default retry policy (4 attempts, so 3 retries, as for the others).
//!
//! Figures, from the server's own log: **goodput** is the requests admitted
//! within the run ÷ (the server's true sustained limit × the run's length),
//! so a fixed window's first full quota can lift it a little above 1;
//! **refused** is the share of all responses that were limiter refusals
//! (429 or 503); **failed** counts logical requests that did not end in a
//! 2xx (from the tasks).
//!
//! `cargo bench -p reqwest-pace-benches --bench contenders --features testing
//! [-- FILTER...]` runs the scenarios whose name (`server/contender`, as
//! `--list` prints them) contains one of the filters; `--quick` runs each for
//! 3 s instead of 10 s; `--timeline` prints each run's admitted and refused
//! requests per second. Run by `cargo test -p reqwest-pace-benches --features
//! testing --benches` (which does not pass `--bench`), it is a 1 s smoke run
//! of one server that asserts nothing about speed.

use std::error::Error;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_pace::testing::{zoo, Algorithm, Outcome, RequestRecord, ServerBuilder};
use reqwest_pace::ThrottledClient;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use tokio::task::JoinSet;
use tokio::time::Instant;

type BoxError = Box<dyn Error + Send + Sync>;

/// Retries allowed by every contender that retries.
const RETRIES: u32 = 3;

/// How long a scenario runs, and with how many tasks.
#[derive(Clone, Copy, Debug)]
struct Plan {
    run: Duration,
    /// After the run, how long requests in flight may take to finish.
    grace: Duration,
    concurrency: usize,
}

impl Plan {
    const FULL: Plan = Plan {
        run: Duration::from_secs(10),
        grace: Duration::from_secs(10),
        concurrency: 16,
    };
    const QUICK: Plan = Plan {
        run: Duration::from_secs(3),
        grace: Duration::from_secs(5),
        concurrency: 16,
    };
    const SMOKE: Plan = Plan {
        run: Duration::from_secs(1),
        grace: Duration::from_secs(2),
        concurrency: 16,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Plain,
    ReqwestRetry,
    ReqwestRetryModule,
    Governor,
    Pace,
}

impl Contender {
    const ALL: [Contender; 5] = [
        Contender::Plain,
        Contender::ReqwestRetry,
        Contender::ReqwestRetryModule,
        Contender::Governor,
        Contender::Pace,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Plain => "reqwest",
            Contender::ReqwestRetry => "reqwest-retry",
            Contender::ReqwestRetryModule => "reqwest::retry",
            Contender::Governor => "governor",
            Contender::Pace => "reqwest-pace",
        }
    }
}

/// What the tasks count as they go.
#[derive(Default)]
struct Tally {
    begun: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
}

impl Tally {
    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A middleware that does nothing: the retry middleware needs a chain.
struct Pass;

type MiddlewareFuture<'a> =
    Pin<Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>>;

// Written out rather than with `#[async_trait]`, which is not a
// dependency of this crate's benches: this is what the macro expands to.
impl Middleware for Pass {
    fn handle<'s, 'e, 'n, 'f>(
        &'s self,
        req: reqwest::Request,
        extensions: &'e mut http::Extensions,
        next: Next<'n>,
    ) -> MiddlewareFuture<'f>
    where
        's: 'f,
        'e: 'f,
        'n: 'f,
        Self: 'f,
    {
        Box::pin(next.run(req, extensions))
    }
}

enum Sender {
    Plain(reqwest::Client),
    ReqwestRetry(ClientWithMiddleware),
    Governor(reqwest::Client, Arc<DefaultDirectRateLimiter>),
    Pace(ThrottledClient),
}

/// Whether a status is a limiter refusal of the zoo's servers.
fn refused(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || status == reqwest::StatusCode::SERVICE_UNAVAILABLE
}

impl Sender {
    fn new(contender: Contender, algorithm: Algorithm) -> Result<Sender, BoxError> {
        Ok(match contender {
            Contender::Plain => Sender::Plain(reqwest::Client::new()),
            Contender::ReqwestRetry => {
                let policy = ExponentialBackoff::builder().build_with_max_retries(RETRIES);
                Sender::ReqwestRetry(
                    ClientBuilder::new(reqwest::Client::new())
                        .with(RetryTransientMiddleware::new_with_policy(policy))
                        .with(Pass)
                        .build(),
                )
            }
            Contender::ReqwestRetryModule => {
                let policy = reqwest::retry::for_host("127.0.0.1")
                    .max_retries_per_request(RETRIES)
                    .classify_fn(|rr| match rr.status() {
                        Some(status) if refused(status) => rr.retryable(),
                        _ => rr.success(),
                    });
                Sender::Plain(reqwest::Client::builder().retry(policy).build()?)
            }
            Contender::Governor => {
                let per_second = algorithm.sustained_per_second().round().max(1.0) as u32;
                let per_second = NonZeroU32::new(per_second).ok_or("zero limit")?;
                let burst = NonZeroU32::new(algorithm.burst().clamp(1, u64::from(u32::MAX)) as u32)
                    .ok_or("zero burst")?;
                let quota = Quota::per_second(per_second).allow_burst(burst);
                Sender::Governor(
                    reqwest::Client::new(),
                    Arc::new(DefaultDirectRateLimiter::direct(quota)),
                )
            }
            Contender::Pace => Sender::Pace(ThrottledClient::new(reqwest::Client::new())?),
        })
    }

    /// One logical request: `true` when it finally got a 2xx.
    async fn call(&self, url: &str) -> bool {
        match self {
            Sender::Plain(client) => match client.get(url).send().await {
                Ok(response) => finish(response).await,
                Err(_) => false,
            },
            Sender::ReqwestRetry(client) => match client.get(url).send().await {
                Ok(response) => finish(response).await,
                Err(_) => false,
            },
            Sender::Governor(client, limiter) => {
                for _ in 0..=RETRIES {
                    limiter.until_ready().await;
                    let Ok(response) = client.get(url).send().await else {
                        return false;
                    };
                    if !refused(response.status()) {
                        return finish(response).await;
                    }
                    // Read the body so the connection goes back to the pool.
                    let _ = response.bytes().await;
                }
                false
            }
            Sender::Pace(client) => match client.send(client.get(url)).await {
                Ok(response) => finish(response).await,
                Err(_) => false,
            },
        }
    }
}

/// Reads the body (so the connection is reused) and says whether the
/// response was a success.
async fn finish(response: reqwest::Response) -> bool {
    let ok = response.status().is_success();
    let _ = response.bytes().await;
    ok
}

/// What one run left behind.
struct Run {
    sustained: f64,
    begun: u64,
    ok: u64,
    failed: u64,
    records: Vec<RequestRecord>,
}

impl Run {
    fn goodput(&self, plan: Plan) -> f64 {
        let admitted = self
            .records
            .iter()
            .filter(|r| r.at <= plan.run && r.outcome == Outcome::Admitted)
            .count();
        admitted as f64 / (self.sustained * plan.run.as_secs_f64())
    }

    fn refused(&self) -> f64 {
        let refused = self
            .records
            .iter()
            .filter(|r| r.outcome == Outcome::Throttled)
            .count();
        refused as f64 / self.records.len().max(1) as f64
    }

    fn timeline(&self) -> String {
        let mut seconds: Vec<(u32, u32)> = Vec::new();
        for r in &self.records {
            let s = r.at.as_secs() as usize;
            if seconds.len() <= s {
                seconds.resize(s + 1, (0, 0));
            }
            match r.outcome {
                Outcome::Admitted => seconds[s].0 += 1,
                Outcome::Throttled => seconds[s].1 += 1,
                _ => {}
            }
        }
        seconds
            .iter()
            .map(|(ok, refused)| format!("{ok}/{refused}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

async fn run(builder: ServerBuilder, contender: Contender, plan: Plan) -> Result<Run, BoxError> {
    let server = builder.start().await?;
    let algorithm = server.algorithm();
    let url = format!("{}/", server.url());
    let tally = Arc::new(Tally::default());
    let sender = Arc::new(Sender::new(contender, algorithm)?);
    let start = Instant::now();
    let deadline = start + plan.run;

    let mut tasks = JoinSet::new();
    for _ in 0..plan.concurrency {
        let (sender, tally, url) = (Arc::clone(&sender), Arc::clone(&tally), url.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                Tally::add(&tally.begun);
                if sender.call(&url).await {
                    Tally::add(&tally.ok);
                } else {
                    Tally::add(&tally.failed);
                }
            }
        });
    }
    let cutoff = deadline + plan.grace;
    loop {
        match tokio::time::timeout_at(cutoff, tasks.join_next()).await {
            Ok(Some(joined)) => joined?,
            Ok(None) => break,
            Err(_) => {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                break;
            }
        }
    }
    let records = server.requests();
    server.shutdown().await;
    Ok(Run {
        sustained: algorithm.sustained_per_second(),
        begun: Tally::get(&tally.begun),
        ok: Tally::get(&tally.ok),
        failed: Tally::get(&tally.failed),
        records,
    })
}

/// Arguments as cargo passes them: `--bench` from `cargo bench`, nothing
/// from `cargo test`, then whatever follows `--`.
struct Args {
    quick: bool,
    /// Run by `cargo test`: a smoke run of one server.
    smoke: bool,
    list: bool,
    timeline: bool,
    filters: Vec<String>,
}

fn args() -> Args {
    let (mut bench, mut quick, mut list, mut timeline) = (false, false, false, false);
    let mut filters = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--bench" => bench = true,
            "--quick" => quick = true,
            "--list" => list = true,
            "--timeline" => timeline = true,
            other if other.starts_with('-') => {} // other harness flags
            other => filters.push(other.to_owned()),
        }
    }
    Args {
        quick,
        smoke: !bench && filters.is_empty(),
        list,
        timeline,
        filters,
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = args();
    let plan = match (args.smoke, args.quick) {
        (true, _) => Plan::SMOKE,
        (false, true) => Plan::QUICK,
        (false, false) => Plan::FULL,
    };
    let servers: Vec<&'static str> = zoo::all().into_iter().map(|(name, _)| name).collect();
    let wanted = |server: &str, c: Contender| {
        if args.smoke {
            return server == "fixed-window-draft7" && c == Contender::Pace;
        }
        args.filters.is_empty()
            || args
                .filters
                .iter()
                .any(|f| format!("{server}/{}", c.name()).contains(f.as_str()))
    };
    if args.list {
        for server in &servers {
            for c in Contender::ALL.into_iter().filter(|&c| wanted(server, c)) {
                println!("{server}/{}: benchmark", c.name());
            }
        }
        return Ok(());
    }
    println!(
        "# contenders: {} tasks, {:.0} s per run, {} cores{}",
        plan.concurrency,
        plan.run.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if args.quick { ", quick mode" } else { "" },
    );
    println!("\ncells: goodput ÷ true sustained limit / share of responses refused (429 or 503) / failed logical requests\n");
    let header: Vec<&str> = Contender::ALL.iter().map(|c| c.name()).collect();
    println!("| server | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(header.len()));
    for server in servers {
        let mut cells = Vec::new();
        for contender in Contender::ALL {
            if !wanted(server, contender) {
                cells.push("-".to_owned());
                continue;
            }
            let builder = zoo::all()
                .into_iter()
                .find(|(name, _)| *name == server)
                .map(|(_, b)| b)
                .ok_or("unknown zoo server")?;
            let run = run(builder, contender, plan).await?;
            eprintln!(
                "  {server}/{}: {} of {} logical requests ok, {} failed; server saw {} requests",
                contender.name(),
                run.ok,
                run.begun,
                run.failed,
                run.records.len(),
            );
            if args.timeline {
                eprintln!("    per second (ok/refused): {}", run.timeline());
            }
            cells.push(format!(
                "{:.3} / {:.1} % / {}",
                run.goodput(plan),
                100.0 * run.refused(),
                run.failed
            ));
        }
        println!("| {server} | {} |", cells.join(" | "));
    }
    Ok(())
}
