//! A model of an LLM API: requests, tokens and calls in flight limited
//! together, spoken in OpenAI's or Anthropic's headers.
//!
//! [`LlmServer`] is a real HTTP/1.1 server on a loopback port (and, with
//! [`LlmServer::service`], a tower `Service` answering in process) that
//! limits each client key as the large LLM APIs document they do:
//!
//! - **Each limit is a token bucket refilled continuously.** Requests per
//!   minute, tokens per minute (OpenAI counts input and output together)
//!   or input and output tokens per minute apart (Anthropic), each a
//!   bucket whose capacity is its limit per minute and which refills at
//!   that rate, so a key is never cut off for the rest of a fixed minute.
//!   Anthropic documents a token bucket whose capacity is replenished
//!   continuously up to the limit rather than reset at fixed intervals
//!   (<https://docs.anthropic.com/en/api/rate-limits>). OpenAI states the
//!   reset of each limit as "the time until the rate limit … resets to its
//!   initial state" (<https://platform.openai.com/docs/guides/rate-limits>):
//!   the time until the bucket is full.
//! - **A cap on calls in flight** ([`max_in_flight`](LlmServerBuilder::max_in_flight)),
//!   a third limit of another kind: a call is in flight from its admission
//!   until its answer is written, [`service_time`](LlmServerBuilder::service_time)
//!   later.
//! - **Estimate, then usage.** A call is admitted on its estimate, the
//!   prompt's tokens plus its `max_tokens`, and each token bucket takes
//!   the estimate at once; when the call completes the server reports what
//!   it really used (drawn from a seeded distribution) in a `usage` body and
//!   gives back what the estimate took beyond it, so every limit ends up
//!   charged the usage. Anthropic documents this for output tokens:
//!   estimated from `max_tokens` when a request starts, adjusted to the
//!   tokens really produced when it ends (same page).
//! - **Every refusal names its limit** (see [`LlmLimit`]): the limit whose
//!   wait is longest when several would refuse, and concurrency only when
//!   every rate limit would admit. A refusal takes nothing from any limit.
//!
//! Time is tokio's, as for [`RateLimitedServer`](super::RateLimitedServer):
//! under `#[tokio::test(start_paused = true)]` refusal waits, service
//! times and the log's instants are exact.

mod model;
mod wire;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State as Shared};
use axum::response::Response;
use axum::Router;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, StatusCode};
use reqwest::ResponseBuilderExt as _;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::dialect::write_date;
use super::key::{client_key, ClientKey};
use crate::Error;
use model::{Config, Decision, Model, Ticket};

/// Which vendor's headers and bodies the server speaks.
///
/// | | [`OpenAi`](Self::OpenAi) | [`Anthropic`](Self::Anthropic) |
/// |---|---|---|
/// | every response, per limit enforced | `x-ratelimit-limit-<l>`, `x-ratelimit-remaining-<l>`, `x-ratelimit-reset-<l>` as a Go duration until full (`1s`, `6m0s`, `59.5s`; rounded up to the millisecond) | `anthropic-ratelimit-<l>-limit`, `-remaining`, `-reset` as the RFC 3339 instant it is full (`2025-01-01T00:01:00Z`; rounded up to the second), and `anthropic-ratelimit-tokens-*` for the token limit with least left |
/// | a rate refusal also | `retry-after-ms` and `retry-after` (seconds, rounded up, at least 1) | `retry-after` (seconds, rounded up, at least 1) |
/// | `<l>` is | `requests`, `tokens`, `input-tokens`, `output-tokens` | the same |
/// | refusal body | `{"error": {"type": "<limit>", "code": "rate_limit_exceeded", "message": "Rate limit reached for tokens per min: Limit …, Used …, Requested …. Please try again in 1.5s."}}` | `{"type": "error", "error": {"type": "rate_limit_error", "message": "This request would exceed the rate limit for your organization of … input tokens per minute. …"}}` |
/// | admitted body | `{"usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}` | `{"usage": {"input_tokens", "output_tokens"}}` |
///
/// Every response also carries `Date`. The limit is the limit per minute.
/// The real OpenAI API sends `requests` and `tokens` only and Anthropic's
/// `requests`, `input-tokens`, `output-tokens` and `tokens`: the model
/// writes whichever limits it is told to enforce, each under its own name.
/// A concurrency refusal is a 429 with the headers of the rate limits (all
/// with room) and no `retry-after`: waiting a time does not help, a call
/// completing does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LlmDialect {
    /// OpenAI's headers and bodies.
    #[default]
    OpenAi,
    /// Anthropic's headers and bodies.
    Anthropic,
}

/// A limit the model enforces, and names when it refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LlmLimit {
    /// Requests per minute: each call takes one.
    Requests,
    /// Tokens per minute, input and output together.
    Tokens,
    /// Input (prompt) tokens per minute.
    InputTokens,
    /// Output (completion) tokens per minute.
    OutputTokens,
    /// Calls in flight at once.
    Concurrency,
}

impl LlmLimit {
    /// Every limit, in the order a refusal names one of equal waits.
    pub const ALL: [LlmLimit; 5] = [
        LlmLimit::Requests,
        LlmLimit::Tokens,
        LlmLimit::InputTokens,
        LlmLimit::OutputTokens,
        LlmLimit::Concurrency,
    ];

    /// The limit's name: `requests`, `tokens`, `input_tokens`,
    /// `output_tokens` or `concurrency` (as the crate's header parser
    /// names the first four, and OpenAI's refusal bodies their `type`).
    pub fn as_str(&self) -> &'static str {
        match self {
            LlmLimit::Requests => "requests",
            LlmLimit::Tokens => "tokens",
            LlmLimit::InputTokens => "input_tokens",
            LlmLimit::OutputTokens => "output_tokens",
            LlmLimit::Concurrency => "concurrency",
        }
    }

    fn index(self) -> usize {
        match self {
            LlmLimit::Requests => 0,
            LlmLimit::Tokens => 1,
            LlmLimit::InputTokens => 2,
            LlmLimit::OutputTokens => 3,
            LlmLimit::Concurrency => 4,
        }
    }
}

impl std::fmt::Display for LlmLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tokens of one call: what it used, or (in [`LlmRecord::estimate`]) what
/// it stated it might.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens; in an estimate, `max_tokens`.
    pub output_tokens: u64,
}

impl Usage {
    /// Input and output together.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// What the server has answered so far, over every client key.
///
/// `requests == admitted + refused_total() + invalid`, and once nothing is
/// in flight `admitted == completed + abandoned`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LlmStats {
    /// Every call answered or being served.
    pub requests: u64,
    /// Calls admitted (answered 200 once served).
    pub admitted: u64,
    /// Admitted calls served to the end.
    pub completed: u64,
    /// Admitted calls whose client went away before the answer: their
    /// estimate stays charged.
    pub abandoned: u64,
    /// Calls whose body was not a request (answered 400).
    pub invalid: u64,
    /// The most calls one client key had in flight at once.
    pub peak_in_flight: usize,
    /// Input tokens the limits are charged: what admitted calls used.
    pub input_tokens_charged: u64,
    /// Output tokens the limits are charged: what completed calls used,
    /// plus the `max_tokens` of calls still in flight or abandoned.
    pub output_tokens_charged: u64,
    refused: [u64; 5],
}

impl LlmStats {
    /// Calls refused because of `limit`.
    pub fn refused(&self, limit: LlmLimit) -> u64 {
        self.refused[limit.index()]
    }

    /// Calls refused, whichever the limit.
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }

    fn count_refusal(&mut self, limit: LlmLimit) {
        self.refused[limit.index()] += 1;
    }
}

/// One call as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LlmRecord {
    /// When it was decided, since the server started, on the tokio clock.
    pub at: Duration,
    /// Whose limits it met.
    pub key: ClientKey,
    /// What it stated: its prompt's tokens and its `max_tokens`.
    pub estimate: Usage,
    /// The limit that refused it, if one did.
    pub refused: Option<LlmLimit>,
    /// On a rate refusal, how long until it would have been admitted (what
    /// `retry-after-ms` says, before rounding); `None` when waiting does
    /// not help (concurrency, or a call above a limit's capacity).
    pub retry_after: Option<Duration>,
    /// What an admitted call used (drawn when it is admitted).
    pub usage: Option<Usage>,
    /// When an admitted call's answer was written.
    pub completed_at: Option<Duration>,
}

/// A stateful model of an LLM API on a loopback port: requests per minute,
/// tokens per minute (or input and output tokens per minute apart) and a
/// cap on calls in flight, enforced together per client key, in OpenAI's
/// or Anthropic's headers (see [`LlmDialect`] and the
/// [module docs](self)).
///
/// - **A call** is any method on any path. Its body is empty or a JSON
///   object: `input_tokens` is the prompt's size (standing for the
///   server's tokenizer; without it, the body's length in bytes over 4,
///   rounded up), `max_tokens` caps its output (without it,
///   [`default_max_tokens`](LlmServerBuilder::default_max_tokens)). It
///   takes 1 request, `input_tokens` input tokens, `max_tokens` output
///   tokens and their sum in tokens. Anything else is answered `400`.
/// - **Usage.** An admitted call's output is drawn uniformly between two
///   shares of its `max_tokens` ([`output_share`](LlmServerBuilder::output_share),
///   default 20 % to 100 %) from a generator seeded by
///   [`seed`](LlmServerBuilder::seed), in the order calls are admitted:
///   the same calls in the same order get the same usage. The call is held
///   for [`service_time`](LlmServerBuilder::service_time) plus
///   [`time_per_output_token`](LlmServerBuilder::time_per_output_token)
///   for each token it produces, then answered `200` with its usage; its
///   limits give back what the estimate took beyond the usage.
/// - **Refusals** are `429`, decided when the call arrives (it is not
///   held), and name the limit hit. A call above a limit's capacity is
///   refused by that limit with no `retry-after`: it never fits.
/// - **Client keys** are the API key header (`authorization` for
///   OpenAI, `x-api-key` for Anthropic, or
///   [`api_key_header`](LlmServerBuilder::api_key_header)), else the peer
///   address; each has its own limits, starting full.
/// - **Counters and log**: [`stats`](Self::stats), [`requests`](Self::requests),
///   [`in_flight`](Self::in_flight).
///
/// ```
/// use reqwest_pace::testing::llm::{LlmDialect, LlmLimit, LlmServer};
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let server = LlmServer::builder()
///         .dialect(LlmDialect::OpenAi)
///         .requests_per_minute(60)
///         .tokens_per_minute(1_000)
///         .seed(7)
///         .start()
///         .await?;
///     let client = reqwest::Client::new();
///     let call = || {
///         client
///             .post(format!("{}/v1/chat/completions", server.url()))
///             .body(r#"{"input_tokens": 300, "max_tokens": 400}"#)
///             .send()
///     };
///
///     let first = call().await?;
///     assert_eq!(first.status(), 200);
///     assert_eq!(first.headers()["x-ratelimit-limit-tokens"], "1000");
///     let body: serde_json::Value = serde_json::from_str(&first.text().await?)?;
///     let used = body["usage"]["total_tokens"].as_u64().unwrap_or(0);
///     assert!((300 + 80..=300 + 400).contains(&used));
///
///     // 700 tokens each: the second call finds at most 620 left.
///     let second = call().await?;
///     assert_eq!(second.status(), 429);
///     assert!(second.headers().contains_key("retry-after-ms"));
///     assert!(second.text().await?.contains(r#""type":"tokens""#));
///
///     let stats = server.stats();
///     assert_eq!((stats.admitted, stats.refused(LlmLimit::Tokens)), (1, 1));
///     assert_eq!(stats.input_tokens_charged + stats.output_tokens_charged, used);
///     server.shutdown().await;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct LlmServer {
    inner: Arc<Inner>,
}

struct Inner {
    addr: SocketAddr,
    app: Arc<App>,
    stop: CancellationToken,
    stopped: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for LlmServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmServer")
            .field("addr", &self.inner.addr)
            .field("dialect", &self.inner.app.dialect)
            .finish_non_exhaustive()
    }
}

/// What the request handler shares with the handles.
struct App {
    origin: Instant,
    wall_origin: SystemTime,
    dialect: LlmDialect,
    api_key: HeaderName,
    default_max_tokens: u64,
    service_time: Duration,
    time_per_output_token: Duration,
    model: Mutex<Model>,
}

/// A response as the model writes it, before it becomes an axum or a
/// reqwest response.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

/// An admitted call, held until it completes; dropped before, it is
/// abandoned (its client went away), and leaves the calls in flight.
struct Held<'a> {
    app: &'a App,
    ticket: Option<Ticket>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.app.model().abandon(&ticket);
        }
    }
}

impl App {
    fn model(&self) -> MutexGuard<'_, Model> {
        crate::sync::lock(&self.model)
    }

    fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
    }

    fn wall(&self) -> SystemTime {
        self.wall_origin
            .checked_add(self.elapsed())
            .unwrap_or(self.wall_origin)
    }

    fn answer_with(&self, status: StatusCode, body: String, mut headers: HeaderMap) -> Answer {
        write_date(&mut headers, self.wall());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Answer {
            status,
            headers,
            body,
        }
    }

    /// The one path from a call to its answer, for HTTP and in-process
    /// calls alike: decide, hold an admitted call for its service time,
    /// complete it.
    async fn answer(&self, key: ClientKey, body: &[u8]) -> Answer {
        let estimate = match wire::estimate(body, self.default_max_tokens) {
            Ok(estimate) => estimate,
            Err(reason) => {
                self.model().count_invalid();
                let body = wire::invalid_body(self.dialect, &reason);
                return self.answer_with(StatusCode::BAD_REQUEST, body, HeaderMap::new());
            }
        };
        let decision = {
            let mut model = self.model();
            let decision = model.decide(self.elapsed(), key, estimate);
            (decision, model.max_in_flight())
        };
        let ticket = match decision {
            (Decision::Admitted(ticket), _) => ticket,
            (
                Decision::Refused {
                    limit,
                    wait,
                    requested,
                    figures,
                },
                max_in_flight,
            ) => {
                let mut headers = HeaderMap::new();
                wire::write_limits(self.dialect, &figures, self.wall(), &mut headers);
                if let Some(wait) = wait {
                    wire::write_retry(self.dialect, wait, &mut headers);
                }
                let refusal = wire::Refusal {
                    limit,
                    wait,
                    requested,
                    figure: figures.iter().find(|f| f.limit == limit),
                    max_in_flight,
                };
                let body = wire::refusal_body(self.dialect, &refusal);
                return self.answer_with(StatusCode::TOO_MANY_REQUESTS, body, headers);
            }
        };
        let usage = ticket.usage;
        let mut held = Held {
            app: self,
            ticket: Some(ticket),
        };
        let per_token = u32::try_from(usage.output_tokens).unwrap_or(u32::MAX);
        let hold = self
            .service_time
            .saturating_add(self.time_per_output_token.saturating_mul(per_token));
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let (figures, id) = match held.ticket.take() {
            Some(ticket) => {
                let mut model = self.model();
                (
                    model.complete(self.elapsed(), &ticket),
                    model.stats().completed,
                )
            }
            None => (Vec::new(), 0),
        };
        let mut headers = HeaderMap::new();
        wire::write_limits(self.dialect, &figures, self.wall(), &mut headers);
        let id = usize::try_from(id).unwrap_or(usize::MAX);
        self.answer_with(
            StatusCode::OK,
            wire::ok_body(self.dialect, id, usage),
            headers,
        )
    }
}

impl LlmServer {
    /// A builder with the defaults: the OpenAI dialect, 60 requests and
    /// 150 000 tokens a minute (the figures of OpenAI's own header
    /// example), no cap on calls in flight, no service time, `max_tokens`
    /// 1 024 when a call states none, output 20 % to 100 % of it, seed 0,
    /// bound to `127.0.0.1:0`.
    pub fn builder() -> LlmServerBuilder {
        LlmServerBuilder {
            dialect: LlmDialect::OpenAi,
            per_minute: [Some(60), Some(150_000), None, None],
            max_in_flight: None,
            service_time: Duration::ZERO,
            time_per_output_token: Duration::ZERO,
            default_max_tokens: 1_024,
            output_percent: (20, 100),
            seed: 0,
            api_key_header: None,
            wall_clock: None,
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        }
    }

    /// The base URL, `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The dialect it speaks.
    pub fn dialect(&self) -> LlmDialect {
        self.inner.app.dialect
    }

    /// The limit per minute it enforces on `limit`, if it enforces one
    /// (never for [`LlmLimit::Concurrency`]: see
    /// [`max_in_flight`](Self::max_in_flight)).
    pub fn per_minute(&self, limit: LlmLimit) -> Option<u64> {
        self.inner.app.model().per_minute(limit)
    }

    /// The cap on calls in flight per key, if there is one.
    pub fn max_in_flight(&self) -> Option<usize> {
        self.inner.app.model().max_in_flight()
    }

    /// Calls in flight now, over every key.
    pub fn in_flight(&self) -> usize {
        self.inner.app.model().in_flight()
    }

    /// The counters so far.
    pub fn stats(&self) -> LlmStats {
        self.inner.app.model().stats()
    }

    /// Every call decided so far, in the order decided. The log grows
    /// without bound: meant for tests.
    pub fn requests(&self) -> Vec<LlmRecord> {
        self.inner.app.model().records()
    }

    /// A [`tower_service::Service`] that answers `reqwest::Request`s in
    /// process, without a socket, through the same decision, hold, counting
    /// and headers as the HTTP server; the client key is the API key
    /// header, else `127.0.0.1`. The body is read when it is held in memory
    /// (a streamed body counts as empty). It never fails.
    pub fn service(&self) -> LlmService {
        LlmService {
            app: Arc::clone(&self.inner.app),
        }
    }

    /// Stop accepting, let calls in flight finish, and return when the
    /// server task has ended.
    pub async fn shutdown(self) {
        self.inner.stop.cancel();
        self.inner.stopped.cancelled().await;
    }
}

/// Configures and starts an [`LlmServer`]. Settings are checked once, in
/// [`start`](Self::start).
#[derive(Clone, Debug)]
pub struct LlmServerBuilder {
    dialect: LlmDialect,
    per_minute: [Option<u64>; 4],
    max_in_flight: Option<usize>,
    service_time: Duration,
    time_per_output_token: Duration,
    default_max_tokens: u64,
    output_percent: (u64, u64),
    seed: u64,
    api_key_header: Option<String>,
    wall_clock: Option<SystemTime>,
    bind: SocketAddr,
}

impl LlmServerBuilder {
    /// The headers and bodies to speak (default [`LlmDialect::OpenAi`]).
    pub fn dialect(mut self, dialect: LlmDialect) -> Self {
        self.dialect = dialect;
        self
    }

    fn set(mut self, limit: LlmLimit, per_minute: Option<u64>) -> Self {
        self.per_minute[limit.index()] = per_minute;
        self
    }

    /// Requests a minute per key (default 60); at least 1.
    pub fn requests_per_minute(self, n: u64) -> Self {
        self.set(LlmLimit::Requests, Some(n))
    }

    /// Tokens a minute per key, input and output together (default
    /// 150 000); at least 1.
    pub fn tokens_per_minute(self, n: u64) -> Self {
        self.set(LlmLimit::Tokens, Some(n))
    }

    /// Input tokens a minute per key (default: not limited apart); at
    /// least 1.
    pub fn input_tokens_per_minute(self, n: u64) -> Self {
        self.set(LlmLimit::InputTokens, Some(n))
    }

    /// Output tokens a minute per key (default: not limited apart); at
    /// least 1.
    pub fn output_tokens_per_minute(self, n: u64) -> Self {
        self.set(LlmLimit::OutputTokens, Some(n))
    }

    /// Stop enforcing `limit` (a rate limit, or with
    /// [`LlmLimit::Concurrency`] the cap on calls in flight). Anthropic's
    /// limits are requests, input and output tokens:
    /// `.without(LlmLimit::Tokens).input_tokens_per_minute(..)
    /// .output_tokens_per_minute(..)`.
    pub fn without(mut self, limit: LlmLimit) -> Self {
        if limit == LlmLimit::Concurrency {
            self.max_in_flight = None;
            return self;
        }
        self.set(limit, None)
    }

    /// At most `n` calls in flight per key (default: no cap); at least 1.
    /// A call past it is refused as [`LlmLimit::Concurrency`].
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = Some(n);
        self
    }

    /// How long an admitted call is held before its answer (default none):
    /// the time it is in flight.
    pub fn service_time(mut self, time: Duration) -> Self {
        self.service_time = time;
        self
    }

    /// Time added to an admitted call's hold for each output token it
    /// produces (default none): long answers take longer, as generation
    /// does.
    pub fn time_per_output_token(mut self, time: Duration) -> Self {
        self.time_per_output_token = time;
        self
    }

    /// The `max_tokens` of a call whose body states none (default 1 024).
    pub fn default_max_tokens(mut self, n: u64) -> Self {
        self.default_max_tokens = n;
        self
    }

    /// A call's output is drawn uniformly from `low` % to `high` % of its
    /// `max_tokens`, rounded down, both ends included (default 20 to 100);
    /// `low ≤ high ≤ 100`. `(100, 100)` makes every call use its
    /// `max_tokens`.
    pub fn output_share(mut self, low: u64, high: u64) -> Self {
        self.output_percent = (low, high);
        self
    }

    /// The seed of the usage draws (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The header whose value, when present and not blank, is the client
    /// key (default `authorization` for OpenAI, `x-api-key` for
    /// Anthropic).
    pub fn api_key_header(mut self, name: &str) -> Self {
        self.api_key_header = Some(name.to_owned());
        self
    }

    /// The server's wall clock at `start` (default: the system time then):
    /// Anthropic's resets are instants to the second, and `Date` too, so a
    /// test that checks them exactly pins it.
    pub fn wall_clock(mut self, at: SystemTime) -> Self {
        self.wall_clock = Some(at);
        self
    }

    /// The address to listen on (default `127.0.0.1:0`, a free port).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// Bind and start serving, on a task spawned on the current tokio
    /// runtime.
    ///
    /// Fails with [`Error::InvalidConfig`] on a limit of zero, a cap of
    /// zero calls in flight, an output share outside `low ≤ high ≤ 100`, an
    /// invalid header name, a bind failure, or outside a tokio runtime.
    pub async fn start(self) -> Result<LlmServer, Error> {
        let model = Model::new(&Config {
            per_minute: self.per_minute,
            max_in_flight: self.max_in_flight,
            output_percent: self.output_percent,
            seed: self.seed,
        })?;
        let api_key = self.api_key_header.unwrap_or_else(|| {
            match self.dialect {
                LlmDialect::OpenAi => "authorization",
                LlmDialect::Anthropic => "x-api-key",
            }
            .to_owned()
        });
        let api_key = HeaderName::from_bytes(api_key.as_bytes())
            .map_err(|_| Error::config(format!("{api_key:?} is not a valid header name")))?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::config(
                "the LLM server must be started within a tokio runtime",
            ));
        }
        let bind = self.bind;
        let cannot = |what: &str, e: std::io::Error| {
            Error::config(format!("cannot {what} the LLM server at {bind}: {e}"))
        };
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|e| cannot("bind", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| cannot("find the port of", e))?;
        let app = Arc::new(App {
            origin: Instant::now(),
            wall_origin: self.wall_clock.unwrap_or_else(SystemTime::now),
            dialect: self.dialect,
            api_key,
            default_max_tokens: self.default_max_tokens,
            service_time: self.service_time,
            time_per_output_token: self.time_per_output_token,
            model: Mutex::new(model),
        });
        let stop = CancellationToken::new();
        let stopped = CancellationToken::new();
        let router = Router::new().fallback(handle).with_state(Arc::clone(&app));
        let serve = axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop.clone().cancelled_owned());
        let done = stopped.clone();
        tokio::spawn(async move {
            let _done = done.drop_guard();
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "LLM server stopped with an error");
            }
        });
        Ok(LlmServer {
            inner: Arc::new(Inner {
                addr,
                app,
                stop,
                stopped,
            }),
        })
    }
}

/// The most of a body the HTTP server reads (a larger one is a 400).
const MAX_BODY: usize = 1 << 20;

async fn handle(
    Shared(app): Shared<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let key = client_key(&parts.headers, peer.ip(), &app.api_key, 0);
    // An unreadable or oversized body is answered as an invalid call.
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_else(|_| axum::body::Bytes::from_static(b"\xff"));
    let answer = app.answer(key, &body).await;
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    response
}

/// An [`LlmServer`] called in process: see [`LlmServer::service`].
#[derive(Clone)]
pub struct LlmService {
    app: Arc<App>,
}

impl std::fmt::Debug for LlmService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmService")
            .field("dialect", &self.app.dialect)
            .finish_non_exhaustive()
    }
}

/// The peer an in-process call is taken to come from.
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

impl tower_service::Service<reqwest::Request> for LlmService {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, reqwest::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: reqwest::Request) -> Self::Future {
        let app = Arc::clone(&self.app);
        Box::pin(async move {
            let key = client_key(request.headers(), LOOPBACK, &app.api_key, 0);
            let body = request
                .body()
                .and_then(|b| b.as_bytes())
                .unwrap_or_default()
                .to_vec();
            let answer = app.answer(key, &body).await;
            // A builder with nothing but the URL in it cannot fail.
            let mut response = http::Response::builder()
                .url(request.url().clone())
                .body(())
                .unwrap_or_default()
                .map(|()| answer.body);
            *response.status_mut() = answer.status;
            *response.headers_mut() = answer.headers;
            Ok(reqwest::Response::from(response))
        })
    }
}
