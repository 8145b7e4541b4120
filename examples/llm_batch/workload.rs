//! The workload of the `llm_batch` example, shared with its goal test
//! (`tests/llm_batch.rs` includes this file by path), so that what the
//! test asserts on tokio's paused clock is what the example shows on the
//! real one.
//!
//! The embedded model of an LLM API (`testing::llm`) on a loopback port
//! limits each key to 6 000 requests and 1 500 000 tokens a minute and 32
//! calls in flight, each held 200 ms. A `ThrottledClient` with nothing
//! configured but the reconciler (a scope of tokens with no rate, the
//! headers followed and the `usage` bodies settled, POSTs retried) sends
//! 2 000 calls: 1 980 batch calls of 200 to 2 500 estimated tokens from 64
//! tasks, and 20 interactive ones, one a second from 1 s, while the batch
//! saturates the key.
//!
//! A minute's bucket of tokens is more than a run of half a minute
//! refills, so the run has two stretches: the first bucket spent at the
//! cap on calls in flight (160 calls a second), then the tokens' refill
//! (about 22 calls a second). The share of the binding limit is counted,
//! as the crate's LLM tests count it, beyond the server's first full
//! buckets: what the run used less the first bucket, over what the limit
//! refilled in the run's time.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use reqwest_pace::headers::Dimension;
use reqwest_pace::retry::RetryRules;
use reqwest_pace::testing::llm::{LlmDialect, LlmLimit, LlmServer, LlmServerBuilder, LlmStats};
use reqwest_pace::{Charge, Cost, Event, FromHeaders, Priority, Scope, ThrottledClient, UsageBody};
use tokio::time::Instant;

/// How long the server holds each admitted call: one request's service
/// time, the unit of the interactive calls' goal.
pub const SERVICE: Duration = Duration::from_millis(200);
/// The server's cap on calls in flight per key.
pub const MAX_IN_FLIGHT: usize = 32;
/// The server's tokens a minute per key: about 22 calls a second.
pub const TOKENS_PER_MINUTE: u64 = 1_500_000;
/// The server's requests a minute per key: more than the run sends, so
/// tokens (and at first the cap) are what bind.
pub const REQUESTS_PER_MINUTE: u64 = 6_000;
/// Every call, the interactive ones among them.
pub const CALLS: usize = 2_000;
/// The interactive calls, one every [`INTERACTIVE_EVERY`] from
/// [`INTERACTIVE_FIRST`].
pub const INTERACTIVE: usize = 20;
/// When the first interactive call comes, after the batch has started.
pub const INTERACTIVE_FIRST: Duration = Duration::from_secs(1);
/// The time between two interactive calls.
pub const INTERACTIVE_EVERY: Duration = Duration::from_secs(1);
/// The batch's tasks: twice the server's cap, so that the cap is met and
/// learned.
pub const WORKERS: usize = 64;

/// The server: [`LlmServer`] in `dialect`, its usage draws from `seed`,
/// its wall clock at `wall` when given (Anthropic's resets are whole
/// seconds of it, so a test pins it and the example runs on the system's).
pub fn server(dialect: LlmDialect, seed: u64, wall: Option<SystemTime>) -> LlmServerBuilder {
    let builder = LlmServer::builder()
        .dialect(dialect)
        .requests_per_minute(REQUESTS_PER_MINUTE)
        .tokens_per_minute(TOKENS_PER_MINUTE)
        .max_in_flight(MAX_IN_FLIGHT)
        .service_time(SERVICE)
        .seed(seed);
    match wall {
        Some(wall) => builder.wall_clock(wall),
        None => builder,
    }
}

/// What the client put on the wire, read from its own events: an attempt
/// is in flight from its `Sent` to its `Received`.
#[derive(Clone, Debug, Default)]
pub struct Watch {
    /// Attempts in flight now.
    now: usize,
    /// Responses 429 so far (rate or concurrency).
    pub refusals: u64,
    /// When the first refusal was read and learned from (its `Throttled`
    /// event), since the run started.
    pub first_refusal: Option<Duration>,
    /// The most attempts in flight at once (the new one among them).
    pub peak: usize,
    /// After the first refusal: the most attempts in flight as one was
    /// sent (itself among them).
    pub peak_after: usize,
    /// After the first refusal: the attempts sent with more in flight
    /// than the server's cap, themselves among them.
    pub over_after: usize,
}

/// One run's figures.
#[derive(Clone, Debug)]
pub struct Run {
    /// From the first call to the last answer.
    pub elapsed: Duration,
    /// The server's counters at the end.
    pub stats: LlmStats,
    /// For each limit the server enforces, the share of it the run used
    /// beyond the server's first full bucket (for the cap: the calls
    /// admitted over what the cap lets through in the run's time).
    pub shares: Vec<(LlmLimit, f64)>,
    /// Calls that did not end in a 200.
    pub failed: usize,
    /// Each interactive call's wait before it was served: its time less
    /// the server's hold.
    pub interactive_waits: Vec<Duration>,
    /// Each batch call's wait, the same way.
    pub batch_waits: Vec<Duration>,
    /// When the last interactive call was sent and when the last batch
    /// call was answered, since the start: the first before the second
    /// means every interactive call met a saturated key.
    pub last_interactive_start: Duration,
    /// See [`last_interactive_start`](Self::last_interactive_start).
    pub batch_end: Duration,
    /// The cap on calls in flight the client learned.
    pub learned_cap: Option<usize>,
    /// What the client put on the wire.
    pub watch: Watch,
}

impl Run {
    /// The limit whose share is highest (the one that binds) and its share.
    pub fn binding(&self) -> (LlmLimit, f64) {
        self.shares
            .iter()
            .copied()
            .fold((LlmLimit::Tokens, f64::MIN), |best, (limit, share)| {
                if share > best.1 {
                    (limit, share)
                } else {
                    best
                }
            })
    }

    /// The share of the server's answers that were refusals.
    pub fn refused(&self) -> f64 {
        self.stats.refused_total() as f64 / self.stats.requests.max(1) as f64
    }
}

/// The nearest-rank percentile `p` of `waits` (zero when there are none).
pub fn percentile(waits: &[Duration], p: f64) -> Duration {
    let mut sorted = waits.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// The lock of the watch; a hook that panicked while holding it left
/// counts that are still the best there are.
fn lock(watch: &Mutex<Watch>) -> MutexGuard<'_, Watch> {
    watch.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The client: a host scope of requests and one of tokens, neither with a
/// rate, the server's `remaining` followed and its `usage` bodies settled;
/// POSTs retried (the default policy does not retry a call that is not
/// idempotent, and an LLM call is a POST). Its random draws come from
/// `seed` when given, so that a test's run is the same every time.
fn client(
    seed: Option<u64>,
    watch: Arc<Mutex<Watch>>,
    start: Instant,
    fleet: Option<&Fleet>,
) -> Result<ThrottledClient, reqwest_pace::Error> {
    let tokens = Scope::per_host()
        .named("tokens")
        .dimension(Dimension::Tokens);
    let (host, tokens) = match fleet {
        Some(fleet) => fleet.scopes(tokens),
        None => (Scope::per_host(), tokens),
    };
    let builder = ThrottledClient::builder(reqwest::Client::new())
        .retry(RetryRules::default().with_retry_non_idempotent(true))
        .host_scope(host)
        .scope(tokens)
        .reconcile((FromHeaders, UsageBody))
        .on_event(move |event| {
            let mut watch = lock(&watch);
            match event {
                Event::Sent { .. } => {
                    watch.now += 1;
                    watch.peak = watch.peak.max(watch.now);
                    if watch.first_refusal.is_some() {
                        watch.peak_after = watch.peak_after.max(watch.now);
                        watch.over_after += usize::from(watch.now > MAX_IN_FLIGHT);
                    }
                }
                Event::Received { status, .. } => {
                    watch.now = watch.now.saturating_sub(1);
                    watch.refusals += u64::from(*status == 429);
                }
                // The refusal read and learned from: a fleet's shared cap
                // is lowered in Redis before this event.
                Event::Refused { status: 429, .. } => {
                    watch.first_refusal.get_or_insert_with(|| start.elapsed());
                }
                _ => {}
            }
        });
    let builder = match seed {
        Some(seed) => {
            let state = AtomicU64::new(seed.max(1));
            builder.random(move || {
                // xorshift64*: a fixed sequence of draws in [0, 1).
                let mut x = state.load(Ordering::Relaxed);
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                state.store(x, Ordering::Relaxed);
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
            })
        }
        None => builder,
    };
    builder.build()
}

/// A fleet's shared state: each process's own connection to one Redis,
/// for the key's tokens (a shared bucket, which the rate each process
/// reads from the headers paces) and its cap on calls in flight (learned
/// for the fleet from any process's concurrency refusals).
pub struct Fleet {
    #[cfg(feature = "redis")]
    backend: reqwest_pace::redis::RedisBackend,
}

impl Fleet {
    /// One process's connection to the Redis at `url` (the example's; the
    /// goal test runs one client).
    #[cfg(feature = "redis")]
    #[allow(dead_code)]
    pub async fn connect(url: &str) -> Result<Fleet, reqwest_pace::Error> {
        let backend = reqwest_pace::redis::RedisBackend::connect(url).await?;
        Ok(Fleet { backend })
    }

    /// The host scope and the tokens scope, shared.
    #[cfg(feature = "redis")]
    fn scopes(&self, tokens: Scope) -> (Scope, Scope) {
        let (a, b) = (self.backend.clone(), self.backend.clone());
        let host = Scope::per_host().shared_in_flight(move |key| a.in_flight(key));
        let tokens = tokens.limiter(move |key| {
            let open = reqwest_pace::RequestRate::per_second(1_000_000)?;
            let bucket = b.token_bucket(format!("tokens:{key}"), open, 1_000_000)?;
            Ok(Arc::new(bucket) as Arc<dyn reqwest_pace::Limiter>)
        });
        (host, tokens)
    }

    #[cfg(not(feature = "redis"))]
    fn scopes(&self, tokens: Scope) -> (Scope, Scope) {
        (Scope::per_host(), tokens)
    }
}

/// One call of `input` prompt tokens and `max_tokens`, paced on their sum
/// at `priority`: its wait (its time less the server's hold) and whether
/// it was answered 200. Its usage is settled from the body.
async fn call(
    client: &ThrottledClient,
    url: &str,
    input: u64,
    max_tokens: u64,
    priority: Priority,
) -> (Duration, bool) {
    let start = Instant::now();
    let sent = client
        .post(url)
        .body(format!(
            r#"{{"input_tokens": {input}, "max_tokens": {max_tokens}}}"#
        ))
        .cost(Cost::default().with(Dimension::Tokens, input + max_tokens))
        .priority(priority)
        .send()
        .await;
    let wait = start.elapsed().saturating_sub(SERVICE);
    let response = match sent {
        Ok(response) if response.status() == 200 => response,
        _ => return (wait, false),
    };
    let charge = Charge::of(&response);
    let Ok(body) = response.bytes().await else {
        return (wait, false);
    };
    if let Some(charge) = charge {
        charge.settle_body(&body);
    }
    (wait, true)
}

/// A batch call's prompt and `max_tokens`: 100 to 1 500 and 100 to 1 000,
/// spread over the run and the same on every run.
fn batch_cost(i: usize) -> (u64, u64) {
    let i = i as u64;
    (100 + (i * 7_919) % 1_401, 100 + (i * 104_729) % 901)
}

/// An interactive call's: a shorter prompt and answer, 200 to 800 and 100
/// to 500.
fn interactive_cost(i: usize) -> (u64, u64) {
    let i = i as u64;
    (200 + (i * 389) % 601, 100 + (i * 211) % 401)
}

/// Run the workload against `server`, calling `progress` after each call
/// with the client's watch so far (the goal test's entry; the example
/// runs [`run_by`]).
#[allow(dead_code)]
pub async fn run(
    server: &LlmServer,
    seed: Option<u64>,
    progress: impl Fn(&Watch) + Send + Sync + 'static,
) -> Result<Run, Box<dyn StdError>> {
    run_by(server, seed, &[], progress).await
}

/// Run the workload against `server` from as many clients as `fleet`
/// holds processes' connections (one when it is empty), the batch's tasks
/// and the interactive calls dealt among them in turn; one watch counts
/// all their calls.
pub async fn run_by(
    server: &LlmServer,
    seed: Option<u64>,
    fleet: &[Fleet],
    progress: impl Fn(&Watch) + Send + Sync + 'static,
) -> Result<Run, Box<dyn StdError>> {
    let start = Instant::now();
    let watch = Arc::new(Mutex::new(Watch::default()));
    let mut clients = Vec::new();
    for (i, process) in fleet.iter().map(Some).enumerate() {
        let seed = seed.map(|s| s + i as u64);
        clients.push(client(seed, Arc::clone(&watch), start, process)?);
    }
    if clients.is_empty() {
        clients.push(client(seed, Arc::clone(&watch), start, None)?);
    }
    let url = format!("{}/v1/chat/completions", server.url());
    let progress = Arc::new(move |watch: &Mutex<Watch>| progress(&lock(watch)));

    let batch_calls = CALLS - INTERACTIVE;
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let client = clients[w % clients.len()].clone();
        let (url, next) = (url.clone(), Arc::clone(&next));
        let (watch, progress) = (Arc::clone(&watch), Arc::clone(&progress));
        workers.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            let mut failed = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= batch_calls {
                    return (waits, failed, start.elapsed());
                }
                let (input, max_tokens) = batch_cost(i);
                let (wait, ok) = call(&client, &url, input, max_tokens, Priority::BATCH).await;
                waits.push(wait);
                failed += usize::from(!ok);
                progress(&watch);
            }
        }));
    }

    let mut interactive = Vec::new();
    let mut last_interactive_start = Duration::ZERO;
    for i in 0..INTERACTIVE {
        let at = INTERACTIVE_FIRST + INTERACTIVE_EVERY * i as u32;
        tokio::time::sleep_until(start + at).await;
        last_interactive_start = start.elapsed();
        let (client, url) = (clients[i % clients.len()].clone(), url.clone());
        let (watch, progress) = (Arc::clone(&watch), Arc::clone(&progress));
        interactive.push(tokio::spawn(async move {
            let (input, max_tokens) = interactive_cost(i);
            let done = call(&client, &url, input, max_tokens, Priority::INTERACTIVE).await;
            progress(&watch);
            done
        }));
    }

    let mut failed = 0;
    let mut batch_waits = Vec::new();
    let mut batch_end = Duration::ZERO;
    for worker in workers {
        let (waits, worker_failed, end) = worker.await?;
        batch_waits.extend(waits);
        failed += worker_failed;
        batch_end = batch_end.max(end);
    }
    let mut interactive_waits = Vec::new();
    for call in interactive {
        let (wait, ok) = call.await?;
        interactive_waits.push(wait);
        failed += usize::from(!ok);
    }
    let elapsed = start.elapsed();

    let stats = server.stats();
    let seconds = elapsed.as_secs_f64();
    let minutes = seconds / 60.0;
    let tokens = (stats.input_tokens_charged + stats.output_tokens_charged) as f64;
    let beyond_first_bucket = |used: f64, per_minute: u64| {
        let limit = per_minute as f64;
        (used - limit) / (limit * minutes)
    };
    let mut shares = Vec::new();
    if let Some(limit) = server.per_minute(LlmLimit::Tokens) {
        shares.push((LlmLimit::Tokens, beyond_first_bucket(tokens, limit)));
    }
    if let Some(limit) = server.per_minute(LlmLimit::Requests) {
        let admitted = stats.admitted as f64;
        shares.push((LlmLimit::Requests, beyond_first_bucket(admitted, limit)));
    }
    if let Some(cap) = server.max_in_flight() {
        let allowed = cap as f64 / SERVICE.as_secs_f64() * seconds;
        shares.push((LlmLimit::Concurrency, stats.admitted as f64 / allowed));
    }
    let learned_cap = clients[0]
        .key_status("host", &server.url())
        .and_then(|status| status.max_in_flight);
    let watch = lock(&watch).clone();
    Ok(Run {
        elapsed,
        stats,
        shares,
        failed,
        interactive_waits,
        batch_waits,
        last_interactive_start,
        batch_end,
        learned_cap,
        watch,
    })
}
