//! Goodput against real servers: this crate beside what a user would
//! otherwise reach for, on the same workload, in one run.
//!
//! The servers, in this order, each started afresh for each contender:
//!
//! - every server of [`reqwest_pace::testing::zoo`] (fixed windows in four
//!   header conventions, nginx's leaky bucket answering bare 429s or 503s,
//!   a moving window, a token bucket whose `limit` is its burst);
//! - the three limiters that defeated the client before its one
//!   header-less regime, `zoo::defeating` (the presets
//!   `tests/defeating_limiters.rs` runs too): `gcra-burst-no-reset` (a GCRA of 20/s, burst 5, whose
//!   `x-ratelimit-limit` is the burst, with no reset and `Retry-After`
//!   rounded down to whole seconds), `log-retry-after-only` (a sliding log
//!   of 20 per 1 s that sends only `Retry-After`, rounded up, on a 429) and
//!   `counts-refusals` (a header-less sliding log of 20 per 1 s that counts
//!   the requests it refuses);
//! - with `--count M`, the generated servers `space-N` … `space-(N+M-1)`
//!   of [`reqwest_pace::testing::space::ServerSpec::generate`], N given by
//!   `--seed N` (0 when absent). Their specs are printed after the table.
//!
//! 16 tasks each run a closed loop of *logical requests* (one `GET /`,
//! retried as the contender's policy says) for 10 s; in-flight requests may
//! then finish within a grace period, so every one ends as a success or a
//! failure.
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
//!   refusal is retried through the limiter, up to 3 retries. For a
//!   generated server with a front limiter, the rate is
//!   [`ServerSpec::sustained_per_second`] (the lower of the two) and the
//!   burst is that of the *binding* limiter, the one whose sustained rate
//!   that is (the main one on a tie): the burst a client paced at that rate
//!   can spend.
//! - `reqwest-pace` — `ThrottledClient` with nothing configured and its
//!   default retry policy (4 attempts, so 3 retries, as for the others).
//!
//! Figures, from the server's own log: **goodput** is the requests admitted
//! within the run ÷ (the server's true sustained limit × the run's length),
//! so what a server admits at once at the start (a fixed window's first
//! full quota, a bucket's burst) can lift it above 1, the more so the
//! shorter the run beside the server's window; **refused** is the share of
//! all responses that were refusals (429 or 503, by the main limiter or
//! the front one); **failed** counts logical requests that did not end in a
//! 2xx (from the tasks).
//!
//! After the table, one line per contender sums up the generated servers:
//! how many meet the goal (goodput ≥ 0.95, refused ≤ 1 % where the server
//! sends rate-limit headers and ≤ 2 % where it sends none or only
//! `Retry-After`, no failed logical request), the least and the median
//! goodput, and the most refused.
//!
//! `cargo bench -p reqwest-pace-benches --bench contenders --features testing
//! [-- [FILTER...] [--quick] [--timeline] [--seed N] [--count M] [--list]]`
//! runs the scenarios whose name (`server/contender`, as `--list` prints
//! them) contains one of the filters; `--quick` runs each for 3 s instead
//! of 10 s; `--timeline` prints each run's admitted and refused requests
//! per second. Run by `cargo test -p reqwest-pace-benches --features
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
use reqwest_pace::testing::space::ServerSpec;
use reqwest_pace::testing::{zoo, Answer, RequestRecord, ServerAlgorithm, ServerBuilder};
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

/// Whether a status is a limiter refusal of the servers here.
fn refused(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS
        || status == reqwest::StatusCode::SERVICE_UNAVAILABLE
}

impl Sender {
    fn new(contender: Contender, truth: Truth) -> Result<Sender, BoxError> {
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
                let per_second = truth.sustained.round().max(1.0) as u32;
                let per_second = NonZeroU32::new(per_second).ok_or("zero limit")?;
                let burst = NonZeroU32::new(truth.burst.clamp(1, u64::from(u32::MAX)) as u32)
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
            .filter(|r| r.at <= plan.run && r.outcome == Answer::Admitted)
            .count();
        admitted as f64 / (self.sustained * plan.run.as_secs_f64())
    }

    fn refused(&self) -> f64 {
        let refused = self
            .records
            .iter()
            .filter(|r| matches!(r.outcome, Answer::Throttled | Answer::FrontRefused))
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
                Answer::Admitted => seconds[s].0 += 1,
                Answer::Throttled | Answer::FrontRefused => seconds[s].1 += 1,
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

/// What the governor contender is told of a server: its true sustained
/// rate per second and the burst it may spend at once.
#[derive(Clone, Copy, Debug)]
struct Truth {
    sustained: f64,
    burst: u64,
}

impl Truth {
    /// A server whose one limiter is `algorithm`.
    fn of(algorithm: ServerAlgorithm) -> Truth {
        Truth {
            sustained: algorithm.sustained_per_second(),
            burst: algorithm.burst(),
        }
    }

    /// A generated server: its true limit
    /// ([`ServerSpec::sustained_per_second`], the lower of its main and
    /// front limiters' rates) and the burst of the binding limiter, the one
    /// whose rate that is (the main one on a tie).
    fn of_spec(spec: &ServerSpec) -> Truth {
        let binding = match spec.front {
            Some(front)
                if front.algorithm.sustained_per_second()
                    < spec.algorithm.sustained_per_second() =>
            {
                front.algorithm
            }
            _ => spec.algorithm,
        };
        Truth {
            sustained: spec.sustained_per_second(),
            burst: binding.burst(),
        }
    }
}

/// A server of the run, started afresh for each contender.
struct Server {
    name: String,
    builder: ServerBuilder,
    /// What it was drawn as, for a generated server.
    spec: Option<ServerSpec>,
}

/// The zoo, the three limiters that defeated a client tuned to it
/// (`zoo::defeating`, which `tests/defeating_limiters.rs` pins at the goal
/// on the paused clock), then the generated servers asked for.
fn servers(args: &Args) -> Result<Vec<Server>, BoxError> {
    let mut servers: Vec<Server> = zoo::all()
        .into_iter()
        .chain(zoo::defeating())
        .map(|(name, builder)| Server {
            name: name.to_owned(),
            builder,
            spec: None,
        })
        .collect();
    for seed in args.seed..args.seed.saturating_add(args.count) {
        let spec = ServerSpec::generate(seed);
        servers.push(Server {
            name: format!("space-{seed}"),
            builder: spec.builder(),
            spec: Some(spec),
        });
    }
    Ok(servers)
}

async fn run(server: &Server, contender: Contender, plan: Plan) -> Result<Run, BoxError> {
    let started = server.builder.clone().start().await?;
    let truth = match &server.spec {
        Some(spec) => Truth::of_spec(spec),
        None => Truth::of(started.algorithm()),
    };
    let url = format!("{}/", started.url());
    let tally = Arc::new(Tally::default());
    let sender = Arc::new(Sender::new(contender, truth)?);
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
    let records = started.requests();
    started.shutdown().await;
    Ok(Run {
        sustained: truth.sustained,
        begun: Tally::get(&tally.begun),
        ok: Tally::get(&tally.ok),
        failed: Tally::get(&tally.failed),
        records,
    })
}

/// One contender's figures on one generated server.
struct Figures {
    goodput: f64,
    refused: f64,
    failed: u64,
    sends_headers: bool,
}

impl Figures {
    /// The goal: at least 95 % of the true sustained limit, at most 1 % of
    /// responses refused where the server sends rate-limit headers and 2 %
    /// where it sends none (or only `Retry-After`), no failed logical
    /// request.
    fn meets_goal(&self) -> bool {
        let most_refused = if self.sends_headers { 0.01 } else { 0.02 };
        self.goodput >= 0.95 && self.refused <= most_refused && self.failed == 0
    }
}

/// The median of `values`, which it sorts (the mean of the middle two for
/// an even count); `None` for none.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// Arguments as cargo passes them: `--bench` from `cargo bench`, nothing
/// from `cargo test`, then whatever follows `--`.
struct Args {
    quick: bool,
    /// Run by `cargo test`: a smoke run of one server.
    smoke: bool,
    list: bool,
    timeline: bool,
    /// The first generated server's seed.
    seed: u64,
    /// How many generated servers: none unless `--count` is given.
    count: u64,
    filters: Vec<String>,
}

fn args() -> Result<Args, BoxError> {
    let (mut bench, mut quick, mut list, mut timeline) = (false, false, false, false);
    let (mut seed, mut count) = (0, 0);
    let mut filters = Vec::new();
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        // `--seed N` or `--seed=N`, and the same for `--count`.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg.clone(), None),
        };
        match flag.as_str() {
            "--seed" | "--count" => {
                let value = match inline {
                    Some(value) => value,
                    None => given
                        .next()
                        .ok_or_else(|| format!("{flag} needs a number"))?,
                };
                let n: u64 = value.parse().map_err(|e| format!("{flag} {value}: {e}"))?;
                if flag == "--seed" {
                    seed = n;
                } else {
                    count = n;
                }
            }
            _ => match arg.as_str() {
                "--bench" => bench = true,
                "--quick" => quick = true,
                "--list" => list = true,
                "--timeline" => timeline = true,
                other if other.starts_with('-') => {} // other harness flags
                other => filters.push(other.to_owned()),
            },
        }
    }
    Ok(Args {
        quick,
        smoke: !bench && filters.is_empty(),
        list,
        timeline,
        seed,
        count,
        filters,
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = args()?;
    let plan = match (args.smoke, args.quick) {
        (true, _) => Plan::SMOKE,
        (false, true) => Plan::QUICK,
        (false, false) => Plan::FULL,
    };
    let servers = servers(&args)?;
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
            for c in Contender::ALL
                .into_iter()
                .filter(|&c| wanted(&server.name, c))
            {
                println!("{}/{}: benchmark", server.name, c.name());
            }
        }
        return Ok(());
    }
    println!(
        "# contenders: {} tasks, {:.0} s per run, {} cores{}{}",
        plan.concurrency,
        plan.run.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if args.quick { ", quick mode" } else { "" },
        if args.count > 0 {
            format!(
                ", generated servers of seeds {}..{}",
                args.seed,
                args.seed.saturating_add(args.count)
            )
        } else {
            String::new()
        },
    );
    println!("\ncells: goodput ÷ true sustained limit / share of responses refused (429 or 503) / failed logical requests\n");
    let header: Vec<&str> = Contender::ALL.iter().map(|c| c.name()).collect();
    println!("| server | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(header.len()));
    // Per contender, its figures on the generated servers it ran.
    let mut generated: Vec<Vec<Figures>> = Contender::ALL.iter().map(|_| Vec::new()).collect();
    for server in &servers {
        let mut cells = Vec::new();
        for (i, contender) in Contender::ALL.into_iter().enumerate() {
            if !wanted(&server.name, contender) {
                cells.push("-".to_owned());
                continue;
            }
            let run = run(server, contender, plan).await?;
            eprintln!(
                "  {}/{}: {} of {} logical requests ok, {} failed; server saw {} requests",
                server.name,
                contender.name(),
                run.ok,
                run.begun,
                run.failed,
                run.records.len(),
            );
            if args.timeline {
                eprintln!("    per second (ok/refused): {}", run.timeline());
            }
            let (goodput, refused) = (run.goodput(plan), run.refused());
            cells.push(format!(
                "{goodput:.3} / {:.1} % / {}",
                100.0 * refused,
                run.failed
            ));
            if let (Some(spec), Some(figures)) = (&server.spec, generated.get_mut(i)) {
                figures.push(Figures {
                    goodput,
                    refused,
                    failed: run.failed,
                    sends_headers: spec.sends_headers(),
                });
            }
        }
        println!("| {} | {} |", server.name, cells.join(" | "));
    }
    if generated.iter().all(Vec::is_empty) {
        return Ok(());
    }
    println!(
        "\ngenerated servers, per contender: how many meet the goal (goodput ≥ 0.95, \
         refused ≤ 1 % with rate-limit headers and ≤ 2 % without, 0 failed), goodput \
         least and median, most refused\n"
    );
    println!("| contender | goal met | goodput min | goodput median | refused max |");
    println!("|---|---:|---:|---:|---:|");
    for (contender, figures) in Contender::ALL.into_iter().zip(&generated) {
        if figures.is_empty() {
            continue;
        }
        let met = figures.iter().filter(|f| f.meets_goal()).count();
        let mut goodputs: Vec<f64> = figures.iter().map(|f| f.goodput).collect();
        let least = goodputs.iter().copied().fold(f64::INFINITY, f64::min);
        let middle = median(&mut goodputs).unwrap_or(f64::NAN);
        let most_refused = figures.iter().map(|f| f.refused).fold(0.0, f64::max);
        println!(
            "| {} | {met} of {} | {least:.3} | {middle:.3} | {:.1} % |",
            contender.name(),
            figures.len(),
            100.0 * most_refused,
        );
    }
    println!("\ngenerated servers (true sustained limit; what the governor contender is told):\n");
    for server in &servers {
        if let Some(spec) = &server.spec {
            let truth = Truth::of_spec(spec);
            println!(
                "- `{}` ({:.1}/s; governor {:.0}/s burst {}): `{spec}`",
                server.name,
                spec.sustained_per_second(),
                truth.sustained.round().max(1.0),
                truth.burst.max(1),
            );
        }
    }
    Ok(())
}
