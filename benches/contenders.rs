//! Goodput against a rate-limited server: this crate beside what a user
//! would otherwise reach for, on the same workload, in one process and one
//! run.
//!
//! For every header dialect the embedded [`RateLimitedServer`] is started
//! afresh for each contender (50 requests per second, burst 10, one bucket:
//! every contender sends from 127.0.0.1) and halves its limit to 25 per
//! second half-way through. 32 tasks each run a closed loop of *logical
//! requests* (one `GET /`, retried as the contender's policy says) until
//! the run ends; in-flight requests may then finish, within a grace period,
//! so that every one ends as a success or a failure.
//!
//! The contenders, each on a fresh `reqwest::Client` with its defaults:
//!
//! - `reqwest` — plain `send()`; a 429 is a failed request.
//! - `reqwest-retry` — `RetryTransientMiddleware` with
//!   `ExponentialBackoff::builder().build_with_max_retries(3)` (its
//!   defaults: 1 s base, doubling, full jitter, 30 min cap; it retries
//!   429s and 5xx and does not read `Retry-After`).
//! - `governor` — a direct `governor` limiter at the server's true quota
//!   (50 per second, burst 10, not told about the halving); every attempt
//!   waits `until_ready`, and a 429 is retried at once through the limiter,
//!   up to 3 retries.
//! - `reqwest-pace` — `ThrottledClient` with no rate configured (it learns
//!   from the headers, or by AIMD on `none`) and its default retry policy
//!   (4 attempts, so 3 retries, as for the others).
//!
//! Every figure is computed from the server's own request log, except the
//! attempts (counted where each contender sends) and the final outcomes
//! (counted by the tasks). Real time, loopback only.
//!
//! `cargo bench --bench contenders --features testing [-- FILTER...]` runs
//! the scenarios whose name (`dialect/contender`, as `--list` prints them)
//! contains one of the filters; `--timeline` prints each run's server log
//! in 250 ms slots; `--quick` runs each scenario for 3 s instead of 15 s; `--list`
//! lists the scenarios. Run by `cargo test` (which does not pass
//! `--bench`), it is a quick smoke run of the `x-ratelimit` dialect.

use std::error::Error;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota};
use reqwest::StatusCode;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use reqwest_pace::testing::{Dialect, Outcome, RateLimitedServer, RequestRecord};
use reqwest_pace::{Event, Rate, ThrottledClient};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use tokio::task::JoinSet;
use tokio::time::Instant;

type BoxError = Box<dyn Error + Send + Sync>;

/// The server's limit before and after the change, per second, and burst.
const LIMIT: u64 = 50;
const HALVED: u64 = 25;
const BURST: u64 = 10;
/// Retries allowed by every contender that retries.
const RETRIES: u32 = 3;

/// A re-adapted 1 s window: under 1 % of its requests answered 429 ...
const READAPT_MAX_429_SHARE: f64 = 0.01;
/// ... and at least 95 % of the new limit admitted.
const READAPT_MIN_GOODPUT: f64 = 0.95;
const WINDOW: Duration = Duration::from_secs(1);
const WINDOW_STEP: Duration = Duration::from_millis(50);

/// How long a scenario runs, and with how many tasks.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// At the full limit, from the server's start.
    before: Duration,
    /// At the halved limit, until the end of the run.
    after: Duration,
    /// After the end, how long requests in flight may take to finish.
    grace: Duration,
    concurrency: usize,
}

impl Plan {
    const FULL: Plan = Plan {
        before: Duration::from_secs(8),
        after: Duration::from_secs(7),
        grace: Duration::from_secs(10),
        concurrency: 32,
    };
    const QUICK: Plan = Plan {
        before: Duration::from_millis(1500),
        after: Duration::from_millis(1500),
        grace: Duration::from_secs(2),
        concurrency: 32,
    };
    const SMOKE: Plan = Plan {
        before: Duration::from_secs(1),
        after: Duration::from_secs(1),
        grace: Duration::from_secs(1),
        concurrency: 32,
    };

    fn total(&self) -> Duration {
        self.before + self.after
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Plain,
    ReqwestRetry,
    Governor,
    Pace,
}

impl Contender {
    const ALL: [Contender; 4] = [
        Contender::Plain,
        Contender::ReqwestRetry,
        Contender::Governor,
        Contender::Pace,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Plain => "reqwest",
            Contender::ReqwestRetry => "reqwest-retry",
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
    attempts: AtomicU64,
}

impl Tally {
    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts every attempt that goes down the middleware chain (installed
/// inside the retry middleware, so each retry passes it).
struct CountAttempts(Arc<Tally>);

type MiddlewareFuture<'a> =
    Pin<Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>>;

// Written out rather than with `#[async_trait]`, which is not a
// dependency of this crate's benches: this is what the macro expands to.
impl Middleware for CountAttempts {
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
        Box::pin(async move {
            Tally::add(&self.0.attempts);
            next.run(req, extensions).await
        })
    }
}

/// What the reqwest-pace client reported, with the time since the run
/// started.
type EventLog = Arc<Mutex<Vec<(Duration, Event)>>>;

enum Sender {
    Plain(reqwest::Client),
    ReqwestRetry(ClientWithMiddleware),
    Governor(reqwest::Client, Arc<DefaultDirectRateLimiter>),
    Pace(ThrottledClient),
}

impl Sender {
    fn new(
        contender: Contender,
        tally: &Arc<Tally>,
        events: &EventLog,
        start: Instant,
    ) -> Result<Sender, BoxError> {
        let client = reqwest::Client::new();
        Ok(match contender {
            Contender::Plain => Sender::Plain(client),
            Contender::ReqwestRetry => {
                let policy = ExponentialBackoff::builder().build_with_max_retries(RETRIES);
                Sender::ReqwestRetry(
                    ClientBuilder::new(client)
                        .with(RetryTransientMiddleware::new_with_policy(policy))
                        .with(CountAttempts(Arc::clone(tally)))
                        .build(),
                )
            }
            Contender::Governor => {
                let per_second = NonZeroU32::new(LIMIT as u32).ok_or("zero limit")?;
                let burst = NonZeroU32::new(BURST as u32).ok_or("zero burst")?;
                let quota = Quota::per_second(per_second).allow_burst(burst);
                Sender::Governor(client, Arc::new(DefaultDirectRateLimiter::direct(quota)))
            }
            Contender::Pace => {
                let (tally, events) = (Arc::clone(tally), Arc::clone(events));
                let pace = ThrottledClient::builder(client)
                    .on_event(move |event: &Event| {
                        if let Event::Sent { .. } = event {
                            Tally::add(&tally.attempts);
                        }
                        if matches!(
                            event,
                            Event::Paced { .. } | Event::Throttled { .. } | Event::Retrying { .. }
                        ) {
                            let mut log = events.lock().unwrap_or_else(|p| p.into_inner());
                            log.push((start.elapsed(), event.clone()));
                        }
                    })
                    .build()?;
                Sender::Pace(pace)
            }
        })
    }

    /// One logical request: `true` when it finally got a 2xx.
    async fn call(&self, url: &str, tally: &Tally) -> bool {
        match self {
            Sender::Plain(client) => {
                Tally::add(&tally.attempts);
                match client.get(url).send().await {
                    Ok(response) => finish(response).await,
                    Err(_) => false,
                }
            }
            Sender::ReqwestRetry(client) => match client.get(url).send().await {
                Ok(response) => finish(response).await,
                Err(_) => false,
            },
            Sender::Governor(client, limiter) => {
                for _ in 0..=RETRIES {
                    limiter.until_ready().await;
                    Tally::add(&tally.attempts);
                    let Ok(response) = client.get(url).send().await else {
                        return false;
                    };
                    if response.status() != StatusCode::TOO_MANY_REQUESTS {
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
    response.bytes().await.is_ok() && ok
}

/// One contender against one dialect.
struct Run {
    dialect: Dialect,
    contender: Contender,
    plan: Plan,
    begun: u64,
    ok: u64,
    failed: u64,
    attempts: u64,
    unfinished: u64,
    records: Vec<RequestRecord>,
    events: Vec<(Duration, Event)>,
    final_rate: Option<f64>,
    wall: Duration,
}

async fn run(dialect: Dialect, contender: Contender, plan: Plan) -> Result<Run, BoxError> {
    let server = RateLimitedServer::builder()
        .limit(Rate::per_second(LIMIT)?)
        .burst(BURST)
        .dialect(dialect)
        .change_limit_at(plan.before, Rate::per_second(HALVED)?)
        .start()
        .await?;
    let start = Instant::now();
    let url = format!("{}/", server.url());
    let tally = Arc::new(Tally::default());
    let events: EventLog = Arc::default();
    let sender = Arc::new(Sender::new(contender, &tally, &events, start)?);
    let deadline = start + plan.total();

    let mut tasks = JoinSet::new();
    for _ in 0..plan.concurrency {
        let (sender, tally, url) = (Arc::clone(&sender), Arc::clone(&tally), url.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                Tally::add(&tally.begun);
                if sender.call(&url, &tally).await {
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
    let wall = start.elapsed();

    let final_rate = match &*sender {
        Sender::Pace(client) => client.current_rate("host", &server.url()),
        _ => None,
    };
    let records = server.requests();
    server.shutdown().await;
    let events = events.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (begun, ok, failed) = (
        Tally::get(&tally.begun),
        Tally::get(&tally.ok),
        Tally::get(&tally.failed),
    );
    Ok(Run {
        dialect,
        contender,
        plan,
        begun,
        ok,
        failed,
        attempts: Tally::get(&tally.attempts),
        unfinished: begun - ok - failed,
        records,
        events,
        final_rate,
        wall,
    })
}

/// Admitted and refused requests in one span of the server's log.
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    requests: u64,
    ok: u64,
    throttled: u64,
}

impl Span {
    fn goodput(&self, limit: u64, length: Duration) -> f64 {
        self.ok as f64 / (limit as f64 * length.as_secs_f64())
    }

    fn throttled_per_mille(&self) -> f64 {
        if self.requests == 0 {
            return 0.0;
        }
        1000.0 * self.throttled as f64 / self.requests as f64
    }
}

/// The figures of one run, from the server's log.
struct Analysis {
    before: Span,
    after: Span,
    total: Span,
    /// From the change to the first good 1 s window.
    readapt_first: Option<Duration>,
    /// From the change to the first good window after which every window
    /// to the end of the run is good.
    readapt_settled: Option<Duration>,
}

fn analyse(run: &Run) -> Analysis {
    let (change, end) = (run.plan.before, run.plan.total());
    let mut before = Span::default();
    let mut after = Span::default();
    let mut total = Span::default();
    let mut ok_at = Vec::new();
    let mut all_at = Vec::new();
    for r in &run.records {
        total.requests += 1;
        match r.outcome {
            Outcome::Admitted => total.ok += 1,
            Outcome::Throttled => total.throttled += 1,
            _ => {}
        }
        if r.at >= end {
            continue;
        }
        let span = if r.at < change {
            &mut before
        } else {
            &mut after
        };
        span.requests += 1;
        match r.outcome {
            Outcome::Admitted => span.ok += 1,
            Outcome::Throttled => span.throttled += 1,
            _ => {}
        }
        if r.at >= change {
            all_at.push(r.at);
            if r.outcome == Outcome::Admitted {
                ok_at.push(r.at);
            }
        }
    }
    ok_at.sort_unstable();
    all_at.sort_unstable();
    let count = |times: &[Duration], from: Duration| {
        times.partition_point(|&t| t < from + WINDOW) - times.partition_point(|&t| t < from)
    };
    let mut good = Vec::new();
    let mut from = change;
    while from + WINDOW <= end {
        let (ok, all) = (count(&ok_at, from), count(&all_at, from));
        let refused = all - ok;
        let is_good = all > 0
            && (refused as f64) < READAPT_MAX_429_SHARE * all as f64
            && ok as f64 >= READAPT_MIN_GOODPUT * HALVED as f64 * WINDOW.as_secs_f64();
        good.push((from - change, is_good));
        from += WINDOW_STEP;
    }
    let readapt_first = good.iter().find(|(_, g)| *g).map(|(at, _)| *at);
    let settled_from = good.iter().rposition(|(_, g)| !*g).map_or(0, |i| i + 1);
    let readapt_settled = good.get(settled_from).map(|(at, _)| *at);
    Analysis {
        before,
        after,
        total,
        readapt_first,
        readapt_settled,
    }
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or_else(
        || "never".to_owned(),
        |d| format!("{:.2} s", d.as_secs_f64()),
    )
}

/// The table row of one run.
fn row(run: &Run, a: &Analysis) -> String {
    let retries = run.attempts.saturating_sub(run.begun);
    let unfinished = if run.unfinished > 0 {
        format!(" (+{} cut off)", run.unfinished)
    } else {
        String::new()
    };
    format!(
        "| {} | {:.3} | {:.3} | {:.1} | {:.1} | {} | {} | {} | {}{} | {} / {} |",
        run.contender.name(),
        a.before.goodput(LIMIT, run.plan.before),
        a.after.goodput(HALVED, run.plan.after),
        a.before.throttled_per_mille(),
        a.after.throttled_per_mille(),
        run.begun,
        run.attempts,
        retries,
        run.failed,
        unfinished,
        seconds(a.readapt_first),
        seconds(a.readapt_settled),
    )
}

const HEADER: &str = "| contender | goodput ÷ 50/s | goodput ÷ 25/s | 429s ‰ at 50/s | 429s ‰ at 25/s | requests | attempts | retries | errors | re-adapt (first / settled) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|";

/// What reqwest-pace's events say about its pacing, in one line.
fn pace_summary(run: &Run) -> String {
    let change = run.plan.before;
    let paced: Vec<(Duration, f64)> = run
        .events
        .iter()
        .filter_map(|(at, e)| match e {
            Event::Paced { per_second, .. } => Some((*at, *per_second)),
            _ => None,
        })
        .collect();
    let before = paced.iter().rev().find(|(at, _)| *at < change);
    let first_after = paced.iter().find(|(at, _)| *at >= change);
    let throttled = |early: bool| {
        run.events
            .iter()
            .filter(|(at, e)| matches!(e, Event::Throttled { .. }) && (*at < change) == early)
            .count()
    };
    let from_server = run
        .events
        .iter()
        .filter(|(_, e)| {
            matches!(
                e,
                Event::Retrying {
                    from_server: true,
                    ..
                }
            )
        })
        .count();
    let rate = |r: Option<f64>| r.map_or_else(|| "unpaced".to_owned(), |r| format!("{r:.2}/s"));
    format!(
        "reqwest-pace on {}: {} re-pacings; rate {} before the change, first re-paced to {} at +{} after it, {} at the end; throttled {} times before and {} after the change; {} retries waited a Retry-After.",
        run.dialect,
        paced.len(),
        rate(before.map(|p| p.1)),
        rate(first_after.map(|p| p.1)),
        first_after.map_or_else(|| "-".to_owned(), |p| format!("{:.3} s", (p.0 - change).as_secs_f64())),
        rate(run.final_rate),
        throttled(true),
        throttled(false),
        from_server,
    )
}

/// The server's log in slots: admitted and refused per slot, the tokens
/// that refilled into a full bucket (capacity nobody used), and for
/// reqwest-pace its retries and the rate it applied at the end of the slot.
fn timeline(run: &Run) -> String {
    const SLOT: Duration = Duration::from_millis(250);
    let slots = (run.plan.total() + run.plan.grace).as_millis() / SLOT.as_millis();
    let slot_of = |at: Duration| (at.as_millis() / SLOT.as_millis()) as usize;
    let mut counts = vec![(0u64, 0u64); slots as usize + 1];
    for r in &run.records {
        if let Some(c) = counts.get_mut(slot_of(r.at)) {
            match r.outcome {
                Outcome::Admitted => c.0 += 1,
                Outcome::Throttled => c.1 += 1,
                _ => {}
            }
        }
    }
    // Replay the server's bucket from the admitted requests: a token that
    // refills into a full bucket is capacity no client used.
    let mut wasted = vec![0f64; counts.len()];
    let (change, end_of_run) = (run.plan.before, run.plan.total());
    let mut admitted: Vec<Duration> = run
        .records
        .iter()
        .filter(|r| r.outcome == Outcome::Admitted)
        .map(|r| r.at)
        .collect();
    admitted.sort_unstable();
    let (mut tokens, mut now) = (BURST as f64, Duration::ZERO);
    let mut advance = |to: Duration, tokens: &mut f64, now: &mut Duration| {
        while *now < to {
            let (until, rate) = if *now < change {
                (to.min(change), LIMIT)
            } else {
                (to, HALVED)
            };
            *tokens += rate as f64 * (until - *now).as_secs_f64();
            if *tokens > BURST as f64 {
                if let Some(w) = wasted.get_mut(slot_of(until)) {
                    *w += *tokens - BURST as f64;
                }
                *tokens = BURST as f64;
            }
            *now = until;
        }
    };
    for at in admitted.into_iter().filter(|&at| at < end_of_run) {
        advance(at, &mut tokens, &mut now);
        tokens = (tokens - 1.0).max(0.0);
    }
    advance(end_of_run, &mut tokens, &mut now);

    let mut rate = None;
    let mut events = run.events.iter().peekable();
    let mut out = format!("  timeline {}/{}:\n", run.dialect, run.contender.name());
    for (i, ((ok, refused), wasted)) in counts.iter().zip(&wasted).enumerate() {
        let end = SLOT * (i as u32 + 1);
        let mut retries = 0;
        while let Some((_, event)) = events.next_if(|(at, _)| *at < end) {
            match event {
                Event::Paced { per_second, .. } => rate = Some(*per_second),
                Event::Retrying { .. } => retries += 1,
                _ => {}
            }
        }
        if *ok + *refused == 0 && retries == 0 {
            continue;
        }
        out.push_str(&format!(
            "    {:>5.2} s  ok {ok:>3}  429 {refused:>5}  unused {wasted:>4.1}  retries {retries:>3}  rate {}\n",
            (end - SLOT).as_secs_f64(),
            rate.map_or_else(|| "-".to_owned(), |r: f64| format!("{r:.2}")),
        ));
    }
    out
}

/// Arguments as cargo passes them: `--bench` from `cargo bench`, nothing
/// from `cargo test`, then whatever follows `--`.
struct Args {
    quick: bool,
    /// Run by `cargo test`: a smoke run of one dialect.
    smoke: bool,
    list: bool,
    /// Print each run's server log in 250 ms slots (to stderr).
    timeline: bool,
    filters: Vec<String>,
}

fn args() -> Args {
    let mut bench = false;
    let mut quick = false;
    let mut list = false;
    let mut timeline = false;
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
        quick: quick || !bench,
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
    let wanted = |d: Dialect, c: Contender| {
        if args.smoke {
            return d == Dialect::XRateLimit;
        }
        args.filters.is_empty()
            || args
                .filters
                .iter()
                .any(|f| format!("{d}/{}", c.name()).contains(f.as_str()))
    };
    let scenarios: Vec<(Dialect, Contender)> = Dialect::ALL
        .into_iter()
        .flat_map(|d| Contender::ALL.into_iter().map(move |c| (d, c)))
        .filter(|&(d, c)| wanted(d, c))
        .collect();
    if args.list {
        for (d, c) in &scenarios {
            println!("{d}/{}: benchmark", c.name());
        }
        return Ok(());
    }

    println!(
        "# contenders: {} tasks, {:.1} s at {LIMIT}/s then {:.1} s at {HALVED}/s (burst {BURST}), {} cores{}",
        plan.concurrency,
        plan.before.as_secs_f64(),
        plan.after.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if args.quick { ", quick mode" } else { "" },
    );
    let mut goals = Vec::new();
    let mut notes = Vec::new();
    let mut current = None;
    let mut best_on_none: Vec<(Contender, f64)> = Vec::new();
    for (dialect, contender) in scenarios {
        if current != Some(dialect) {
            current = Some(dialect);
            println!("\n### `{dialect}`\n\n{HEADER}");
        }
        let run = run(dialect, contender, plan).await?;
        let a = analyse(&run);
        println!("{}", row(&run, &a));
        eprintln!(
            "  {dialect}/{}: {:.1} s wall, {} of {} requests ok; server saw {} requests ({} ok, {} throttled) in all",
            contender.name(),
            run.wall.as_secs_f64(),
            run.ok,
            run.begun,
            a.total.requests,
            a.total.ok,
            a.total.throttled,
        );
        if run.attempts != a.total.requests {
            eprintln!(
                "  warning: {} attempts counted by the client, {} requests seen by the server",
                run.attempts, a.total.requests
            );
        }
        if args.timeline {
            eprint!("{}", timeline(&run));
        }
        let goodput = a.before.goodput(LIMIT, plan.before);
        if dialect == Dialect::None {
            best_on_none.push((contender, goodput));
        }
        if contender == Contender::Pace {
            notes.push(pace_summary(&run));
            if dialect != Dialect::None {
                let share = a.before.throttled_per_mille() / 10.0;
                let met = goodput >= 0.95 && share <= 1.0;
                goals.push(format!(
                    "{dialect}: goodput {:.1} % of the limit, {share:.2} % answered 429 → {}",
                    100.0 * goodput,
                    if met { "met" } else { "MISSED" }
                ));
            }
        }
    }
    if let Some((best, _)) = best_on_none
        .iter()
        .copied()
        .max_by(|a, b| a.1.total_cmp(&b.1))
    {
        let pace = best_on_none.iter().find(|(c, _)| *c == Contender::Pace);
        // Only a comparison when every contender ran.
        if let (Some((_, g)), true) = (pace, best_on_none.len() == Contender::ALL.len()) {
            goals.push(format!(
                "none: reqwest-pace goodput {:.1} %, best is {} → {}",
                100.0 * g,
                best.name(),
                if best == Contender::Pace {
                    "met"
                } else {
                    "MISSED"
                }
            ));
        }
    }
    if !notes.is_empty() {
        println!();
        for note in notes {
            println!("- {note}");
        }
    }
    if !goals.is_empty() {
        println!("\nGoals (at the full limit, 50/s):");
        for goal in goals {
            println!("- {goal}");
        }
    }
    Ok(())
}
