//! The throttled reqwest client: pace before send, adapt to the server,
//! retry with async sleeps.
//!
//! The flow is one-way: a request's keys (one per [`Layer`]) pick its
//! buckets; it waits for each bucket; it is sent; the response's
//! [`RateLimitSignal`] adjusts the buckets; the [`RetryPolicy`] decides
//! whether to sleep and try again.

mod adapt;
mod events;
mod infer;
mod layer;
mod request;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Request, RequestBuilder, Response, StatusCode};
use tokio::time::Instant;
use tracing::Instrument;

pub use events::Event;
pub use layer::{host_key, Layer};
pub use request::PacedRequestBuilder;

use crate::error::NotRetriedReason;
use crate::headers::{Dimension, RateLimitSignal};
use crate::limiter::{Adjustment, Limiter};
use crate::retry::{Outcome, ReleaseJitter, RetryBudget, RetryPolicy};
use crate::Error;
use events::{emit, Hook};
use layer::{BuiltLayer, Closed, KeyState};

/// How long a request waits for its key's first response (the probe)
/// before it goes anyway.
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What a request spends from the buckets it passes through: one request by
/// default, plus any amount in other dimensions (tokens for a
/// token-metered API). A layer spends the amount of its own
/// [`dimension`](Layer::dimension); a layer whose dimension the cost does
/// not name is not charged.
///
/// ```
/// use reqwest_pace::{headers::Dimension, Cost};
///
/// let cost = Cost::default().with(Dimension::Tokens, 1_200);
/// assert_eq!(cost.get(&Dimension::Requests), 1);
/// assert_eq!(cost.get(&Dimension::Tokens), 1_200);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cost {
    weights: Vec<(Dimension, u64)>,
}

impl Default for Cost {
    /// One request.
    fn default() -> Self {
        Cost {
            weights: vec![(Dimension::Requests, 1)],
        }
    }
}

impl Cost {
    /// Spend `amount` in `dimension` (replacing any earlier amount).
    pub fn with(mut self, dimension: Dimension, amount: u64) -> Self {
        self.weights.retain(|(d, _)| d != &dimension);
        self.weights.push((dimension, amount));
        self
    }

    /// The amount spent in `dimension` (0 if not named).
    pub fn get(&self, dimension: &Dimension) -> u64 {
        self.weights
            .iter()
            .find(|(d, _)| d == dimension)
            .map_or(0, |(_, n)| *n)
    }
}

/// A deadline for one call, for [`PaceMiddleware`](crate::PaceMiddleware):
/// put it in the request's `reqwest-middleware` extensions
/// (`.with_extension(Deadline(..))`); a [`ThrottledClient`]'s own requests
/// take [`PacedRequestBuilder::deadline`] instead. It overrides the
/// client's [`deadline`](ThrottledClientBuilder::deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline(pub Duration);

/// What a key has learned and whether it is closed; see
/// [`ThrottledClient::key_status`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct KeyStatus {
    /// The rate the key's bucket applies, in requests (or units) per
    /// second: `None` while nothing is configured or learned.
    pub rate: Option<f64>,
    /// How long calls on the key still fail at once: a server's wait beyond
    /// the retry cap.
    pub closed_for: Option<Duration>,
    /// The status of the response that closed it.
    pub closed_by: Option<StatusCode>,
}

/// Something that can become a [`reqwest::Request`]: a `Request` or a
/// `RequestBuilder`.
pub trait IntoRequest {
    /// Build the request.
    fn into_request(self) -> Result<Request, reqwest::Error>;

    /// Build the request with the cost and deadline it carries (a
    /// [`PacedRequestBuilder`]'s; none for a plain request or builder).
    fn into_call(self) -> Result<(Request, Option<Cost>, Option<Duration>), reqwest::Error>
    where
        Self: Sized,
    {
        Ok((self.into_request()?, None, None))
    }
}

impl IntoRequest for Request {
    fn into_request(self) -> Result<Request, reqwest::Error> {
        Ok(self)
    }
}

impl IntoRequest for RequestBuilder {
    fn into_request(self) -> Result<Request, reqwest::Error> {
        self.build()
    }
}

/// A failure of one attempt's transport, as the retry loop sees it.
pub(crate) enum SendFailure {
    /// reqwest's own error: classified by the policy.
    Reqwest(reqwest::Error),
    /// Another layer's error (a middleware further down the chain): final.
    #[cfg_attr(not(feature = "middleware"), allow(dead_code))]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// A `reqwest::Client` that paces, learns and retries.
///
/// Cheap to clone (an `Arc` inside) and safe to share across tasks: all
/// clones share the same buckets, learned rates and retry budget.
///
/// ```no_run
/// use reqwest_pace::{Rate, ThrottledClient};
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let client = ThrottledClient::builder(reqwest::Client::new())
///     .rate(Rate::per_second(10)?) // a ceiling per host; omit it to learn
///     .build()?;
/// let response = client.get("https://api.example.com/items").send().await?;
/// println!("{}", response.status());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ThrottledClient {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    layers: Vec<BuiltLayer>,
    policy: RetryPolicy,
    budget: Option<Arc<RetryBudget>>,
    hook: Option<Hook>,
    deadline: Option<Duration>,
    jitter: ReleaseJitter,
    random: Random,
}

/// A source of uniform draws in `[0, 1)`.
type Random = Arc<dyn Fn() -> f64 + Send + Sync>;

/// Builds a [`ThrottledClient`]; see [`ThrottledClient::builder`].
#[must_use]
pub struct ThrottledClientBuilder {
    client: reqwest::Client,
    host_layer: Option<Layer>,
    layers: Vec<Layer>,
    policy: RetryPolicy,
    budget: Option<RetryBudget>,
    hook: Option<Hook>,
    deadline: Option<Duration>,
    jitter: ReleaseJitter,
    random: Option<Random>,
}

impl ThrottledClientBuilder {
    /// A ceiling for each host's bucket. Without it, each host starts
    /// permissively and paces itself from what its responses say.
    pub fn rate(mut self, rate: crate::Rate) -> Self {
        self.host_layer = self.host_layer.map(|l| l.rate(rate));
        self
    }

    /// The burst allowed per host (default: one second of the rate).
    pub fn burst(mut self, burst: u64) -> Self {
        self.host_layer = self.host_layer.map(|l| l.burst(burst));
        self
    }

    /// Replace the default per-host layer.
    pub fn host_layer(mut self, layer: Layer) -> Self {
        self.host_layer = Some(layer);
        self
    }

    /// Drop the default per-host layer (only the added layers pace).
    pub fn without_host_layer(mut self) -> Self {
        self.host_layer = None;
        self
    }

    /// Add a layer; a request must pass every layer it belongs to, the
    /// per-host layer first, then these in the order added.
    pub fn layer(mut self, layer: Layer) -> Self {
        self.layers.push(layer);
        self
    }

    /// How failures are retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Cap retries to a share of regular traffic. On by default with
    /// [`RetryBudget::default`] (10 tokens, a tenth back per success).
    ///
    /// The budget counts failures retried on the backoff schedule (a bare
    /// 503, a connect error); a retry the server invited with a
    /// `Retry-After` spends nothing, since the key's pacing already spaces
    /// it. Measured: 50 calls at once against a host answering nothing but
    /// bare 503s send 54 requests and end in 154 ms with the default
    /// budget, and 200 requests over 48 s without one.
    pub fn retry_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Retry without a budget: each call up to the policy's attempts,
    /// however many other calls fail.
    pub fn without_retry_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Receive every [`Event`] (waits, sends, throttles, retries, give-ups).
    /// The hook runs inline: keep it short.
    pub fn on_event(mut self, hook: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// A deadline for every call, from when it starts: pacing waits, the
    /// wait for a key's first response, `Retry-After` blocks and retries
    /// all end by it, and a wait that would end past it fails at once with
    /// [`Error::DeadlineExceeded`]. Off by default (the retry policy's
    /// `max_elapsed` still bounds every wait after the first send); a
    /// request can set its own with [`PacedRequestBuilder::deadline`].
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Positive-only jitter after every instant a server names
    /// (`Retry-After`, the end of a spent window), so that tasks and
    /// processes told the same instant do not arrive together (default: up
    /// to 10 % of the wait, at most 1 s; [`ReleaseJitter::none`] for exact
    /// releases).
    pub fn release_jitter(mut self, jitter: ReleaseJitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The source of uniform draws in `[0, 1)` for the backoff's and the
    /// release's jitter (default: `fastrand`); a test injects its own.
    pub fn random(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.random = Some(Arc::new(random));
        self
    }

    /// Validate the configuration and build the client.
    pub fn build(self) -> Result<ThrottledClient, Error> {
        let layers = self
            .host_layer
            .into_iter()
            .chain(self.layers)
            .map(Layer::build)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ThrottledClient {
            inner: Arc::new(Inner {
                client: self.client,
                layers,
                policy: self.policy,
                budget: self.budget.map(Arc::new),
                hook: self.hook,
                deadline: self.deadline,
                jitter: self.jitter,
                random: self.random.unwrap_or_else(|| Arc::new(fastrand::f64)),
            }),
        })
    }
}

struct Member {
    layer: usize,
    state: Arc<KeyState>,
    weight: u64,
    /// The layer's key before any server bucket, and the request's route.
    base: String,
    route: String,
    /// The server bucket this request is paced in, when known for its route.
    bucket: Option<String>,
}

impl ThrottledClient {
    /// Start building a client around `client`, with one adaptive bucket per
    /// host and the default [`RetryPolicy`].
    pub fn builder(client: reqwest::Client) -> ThrottledClientBuilder {
        ThrottledClientBuilder {
            client,
            host_layer: Some(Layer::per_host()),
            layers: Vec::new(),
            policy: RetryPolicy::default(),
            budget: Some(RetryBudget::default()),
            hook: None,
            deadline: None,
            jitter: ReleaseJitter::default(),
            random: None,
        }
    }

    /// A client with every default: adaptive per-host pacing, default
    /// retries.
    pub fn new(client: reqwest::Client) -> Result<Self, Error> {
        ThrottledClient::builder(client).build()
    }

    /// The wrapped `reqwest::Client`.
    pub fn inner(&self) -> &reqwest::Client {
        &self.inner.client
    }

    /// Start a request on this client; its
    /// [`send`](PacedRequestBuilder::send) paces, learns and retries (as
    /// does passing it to [`send`](Self::send)).
    pub fn request(
        &self,
        method: reqwest::Method,
        url: impl reqwest::IntoUrl,
    ) -> PacedRequestBuilder {
        PacedRequestBuilder::new(self.clone(), self.inner.client.request(method, url))
    }

    /// A GET request; `client.get(url).send()` paces, learns and retries.
    pub fn get(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::GET, url)
    }

    /// A POST request; `client.post(url).send()` paces and learns (and
    /// retries only with
    /// [`RetryPolicy::retry_non_idempotent`](crate::retry::RetryPolicy::retry_non_idempotent)).
    pub fn post(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::POST, url)
    }

    /// A PUT request.
    pub fn put(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::PUT, url)
    }

    /// A DELETE request.
    pub fn delete(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::DELETE, url)
    }

    /// A HEAD request.
    pub fn head(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::HEAD, url)
    }

    /// The retry policy in force.
    pub fn policy(&self) -> &RetryPolicy {
        &self.inner.policy
    }

    /// The rate a layer's bucket for `key` currently applies, in tokens per
    /// second: `None` while it is unconstrained (nothing configured or
    /// learned) or the key is unknown.
    pub fn current_rate(&self, layer: &str, key: &str) -> Option<f64> {
        let built = self.inner.layers.iter().find(|l| l.config.name == layer)?;
        let state = built.keyed.peek(&key.to_owned())?;
        let rate = state.adapt().applied_rate();
        rate
    }

    /// What a layer's key has learned, and whether it is closed: `None`
    /// when the key is unknown (never used, or evicted).
    ///
    /// The key is the layer's key for a request: for the host layer
    /// `scheme://host:port`, for a route counted in a bucket of its own
    /// `scheme://host:port~bucket`.
    pub fn key_status(&self, layer: &str, key: &str) -> Option<KeyStatus> {
        let built = self.inner.layers.iter().find(|l| l.config.name == layer)?;
        let state = built.keyed.peek(&key.to_owned())?;
        let rate = state.adapt().applied_rate();
        let now = Instant::now();
        let closed = (*state.closed()).filter(|c| c.until > now);
        Some(KeyStatus {
            rate,
            closed_for: closed.map(|c| c.until - now),
            closed_by: closed.map(|c| c.status),
        })
    }

    /// Forget what a layer's key has learned and clear its close, so that
    /// calls go again and the key learns afresh (a server that closed it
    /// for a day by mistake need not lock a caller out). Returns whether the
    /// key was known. A block within the retry cap ends by itself.
    pub fn clear_key(&self, layer: &str, key: &str) -> bool {
        let Some(built) = self.inner.layers.iter().find(|l| l.config.name == layer) else {
            return false;
        };
        let Some(state) = built.keyed.peek(&key.to_owned()) else {
            return false;
        };
        state.reset(&built.config);
        true
    }

    /// Send a request (a `Request` or a `RequestBuilder`), paced, adapted
    /// and retried. Spends one request from each bucket it passes.
    ///
    /// Returns the final response for successes and for failures that are
    /// not retryable (a 404 is `Ok`); a retryable failure that could not be
    /// retried to success is an [`Error`] naming why, with the last status.
    pub async fn send(&self, request: impl IntoRequest) -> Result<Response, Error> {
        let (request, cost, deadline) = request.into_call().map_err(|source| Error::Transport {
            attempts: 0,
            source,
        })?;
        self.send_with(request, &cost.unwrap_or_default(), deadline)
            .await
    }

    /// [`send`](Self::send), spending `cost` instead of one request (or
    /// the cost a [`PacedRequestBuilder`] carries).
    pub async fn send_with_cost(
        &self,
        request: impl IntoRequest,
        cost: &Cost,
    ) -> Result<Response, Error> {
        let (request, _, deadline) = request.into_call().map_err(|source| Error::Transport {
            attempts: 0,
            source,
        })?;
        self.send_with(request, cost, deadline).await
    }

    /// [`send_with_cost`](Self::send_with_cost) by a deadline of its own.
    pub(crate) async fn send_with(
        &self,
        request: Request,
        cost: &Cost,
        deadline: Option<Duration>,
    ) -> Result<Response, Error> {
        let client = &self.inner.client;
        self.run(request, cost, deadline, |r| async move {
            client.execute(r).await.map_err(SendFailure::Reqwest)
        })
        .await
    }

    fn members(&self, request: &Request, cost: &Cost) -> Vec<Member> {
        self.inner
            .layers
            .iter()
            .enumerate()
            .filter_map(|(i, layer)| {
                let weight = cost.get(layer.config.dimension_ref());
                if weight == 0 {
                    return None;
                }
                let base = layer.key(request)?;
                let route = layer::route(request);
                let bucket = layer.bucket(&base, &route);
                let key = match &bucket {
                    Some(bucket) => format!("{base}~{bucket}"),
                    None => base.clone(),
                };
                Some(Member {
                    layer: i,
                    state: layer.keyed.get(&key),
                    weight,
                    base,
                    route,
                    bucket,
                })
            })
            .collect()
    }

    fn emit(&self, event: Event) {
        emit(self.inner.hook.as_ref(), event);
    }

    /// Fail fast when a key is closed by a server wait beyond the cap.
    fn check_closed(&self, members: &[Member]) -> Result<(), Error> {
        let now = Instant::now();
        for m in members {
            let mut closed = m.state.closed();
            if let Some(c) = *closed {
                if c.until > now {
                    let (wait, cap, status) =
                        (c.until - now, self.inner.policy.max_retry_after(), c.status);
                    return Err(if c.by_quota {
                        Error::QuotaExhausted { wait, cap, status }
                    } else {
                        Error::RetryAfterTooLong { wait, cap, status }
                    });
                }
                *closed = None;
            }
        }
        Ok(())
    }

    /// The retry loop, over any way of sending one attempt.
    ///
    /// Runs inside a `reqwest_pace.send` span carrying the method and URL,
    /// so every event of one call is grouped under it.
    pub(crate) async fn run<F, Fut>(
        &self,
        request: Request,
        cost: &Cost,
        deadline: Option<Duration>,
        send: F,
    ) -> Result<Response, Error>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        let span = tracing::debug_span!(
            target: "reqwest_pace",
            "reqwest_pace.send",
            method = %request.method(),
            url = %request.url()
        );
        let deadline = deadline.or(self.inner.deadline);
        self.attempts(request, cost, deadline, send)
            .instrument(span)
            .await
    }

    async fn attempts<F, Fut>(
        &self,
        request: Request,
        cost: &Cost,
        deadline: Option<Duration>,
        mut send: F,
    ) -> Result<Response, Error>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        let inner = &*self.inner;
        let policy = &inner.policy;
        let members = self.members(&request, cost);
        let method_ok = policy.allows_method(request.method());
        let method = request.method().to_string();
        let url = request.url().to_string();
        let start = Instant::now();
        // The call's deadline, and from the first send on the retry
        // policy's `max_elapsed`: no wait may end past the earlier.
        let call_until = deadline.map(|d| (start + d, d));
        let mut first_send: Option<Instant> = None;
        let mut current = request;
        let mut attempt = 0u32;
        let mut previous_delay = None;
        // The last status any attempt got, kept across later attempts that
        // got none (a 503, then connect errors, still reports the 503).
        let mut last_status: Option<StatusCode> = None;
        loop {
            attempt += 1;
            let wants_retry = method_ok && attempt < policy.max_attempts();
            let replay = if wants_retry {
                current.try_clone()
            } else {
                None
            };

            self.check_closed(&members)?;
            let until = time_limit(call_until, first_send, policy.max_elapsed());
            let (probes, seqs) = self
                .wait_for_members(&members, until)
                .await
                .map_err(|e| e.into_error(attempt - 1, last_status))?;
            first_send.get_or_insert_with(Instant::now);
            // A wait may have outlasted a close set by another task.
            if let Err(closed) = self.check_closed(&members) {
                for (m, &seq) in members.iter().zip(&seqs) {
                    m.state.adapt().on_no_response(seq);
                }
                return Err(closed);
            }

            self.emit(Event::Sent {
                attempt,
                method: method.clone(),
                url: url.clone(),
            });
            let result = match send(current).await {
                Ok(response) => Ok(response),
                Err(SendFailure::Reqwest(e)) => Err(e),
                Err(SendFailure::Other(source)) => {
                    for (m, &seq) in members.iter().zip(&seqs) {
                        m.state.seen_response.store(true, Ordering::Release);
                        m.state.adapt().on_no_response(seq);
                    }
                    return Err(other_failure(attempt, source));
                }
            };
            if let Ok(response) = &result {
                self.emit(Event::Received {
                    attempt,
                    status: response.status().as_u16(),
                });
            }
            let outcome = policy.classify(result.as_ref());
            let signal = result.as_ref().ok().map(RateLimitSignal::from_response);
            self.learn(&members, &seqs, signal.as_ref(), outcome).await;
            drop(probes);

            let status = result.as_ref().ok().map(Response::status).or(last_status);
            last_status = status;
            match outcome {
                Outcome::Success | Outcome::Fatal => {
                    if let Some(budget) = &inner.budget {
                        if outcome == Outcome::Success {
                            budget.record_success();
                        }
                    }
                    return match result {
                        Ok(response) => {
                            self.emit(Event::Completed {
                                attempts: attempt,
                                status: response.status().as_u16(),
                            });
                            Ok(response)
                        }
                        Err(source) => {
                            self.give_up(attempt, "transport error", None);
                            Err(Error::Transport {
                                attempts: attempt,
                                source,
                            })
                        }
                    };
                }
                _ => {}
            }

            // Retryable.
            let error_source = result.err();
            let retry_after = signal
                .as_ref()
                .and_then(RateLimitSignal::believable_retry_after);
            // A retry the server invited (a `Retry-After`) spends no budget.
            let budget = inner.budget.as_ref().filter(|_| retry_after.is_none());
            if let Some(budget) = budget {
                budget.record_failure();
            }
            if let (Some(wait), Some(status)) = (retry_after, status) {
                if wait > policy.max_retry_after() {
                    self.give_up(attempt, "server wait over the cap", Some(status));
                    return Err(Error::RetryAfterTooLong {
                        wait,
                        cap: policy.max_retry_after(),
                        status,
                    });
                }
            }
            if !method_ok {
                self.give_up(attempt, "method not idempotent", status);
                return Err(Error::NotRetried {
                    reason: NotRetriedReason::NonIdempotent,
                    last_status: status,
                    source: error_source,
                });
            }
            if attempt >= policy.max_attempts() {
                self.give_up(attempt, "attempts exhausted", status);
                return Err(Error::RetriesExhausted {
                    attempts: attempt,
                    last_status: status,
                    source: error_source,
                });
            }
            let Some(next) = replay else {
                self.give_up(attempt, "body cannot be cloned", status);
                return Err(Error::NotRetried {
                    reason: NotRetriedReason::BodyNotCloneable,
                    last_status: status,
                    source: error_source,
                });
            };
            let from_server = retry_after.is_some();
            let delay = match retry_after {
                Some(wait) => wait + inner.jitter.extra(wait, (inner.random)()),
                None => policy
                    .backoff()
                    .delay(attempt - 1, previous_delay, (inner.random)()),
            };
            if let Some(limit) = policy.max_elapsed() {
                if start.elapsed() + delay > limit {
                    self.give_up(attempt, "retry time limit reached", status);
                    return Err(Error::RetriesExhausted {
                        attempts: attempt,
                        last_status: status,
                        source: error_source,
                    });
                }
            }
            if let Some((at, limit)) = time_limit(call_until, first_send, policy.max_elapsed()) {
                if Instant::now() + delay > at {
                    self.give_up(attempt, "deadline", status);
                    return Err(Error::DeadlineExceeded {
                        wait: Some(delay),
                        limit,
                        attempts: attempt,
                        last_status: status,
                    });
                }
            }
            if let Some(budget) = budget {
                if !budget.can_retry() {
                    self.give_up(attempt, "retry budget exhausted", status);
                    return Err(Error::BudgetExhausted {
                        attempts: attempt,
                        last_status: status,
                        source: error_source,
                    });
                }
            }
            self.emit(Event::Retrying {
                attempt,
                delay,
                from_server,
                status: status.map(|s| s.as_u16()),
            });
            tokio::time::sleep(delay).await;
            previous_delay = Some(delay);
            current = next;
        }
    }

    /// Wait for every bucket of the request (and for each key's first
    /// response, when it learns), then count the request as sent on each.
    /// Returns the probe guards held and each member's send number; on an
    /// error, no member counts the request as in flight.
    async fn wait_for_members<'m>(
        &self,
        members: &'m [Member],
        until: Option<(Instant, Duration)>,
    ) -> Result<(Vec<ProbeGuard<'m>>, Vec<u64>), WaitError> {
        let mut probes = Vec::new();
        let mut seqs = Vec::with_capacity(members.len());
        for m in members {
            if let Err(e) = self.wait_for_member(m, until, &mut probes).await {
                for (m, &seq) in members.iter().zip(&seqs) {
                    m.state.adapt().on_no_response(seq);
                }
                return Err(e);
            }
            seqs.push(m.state.adapt().on_send(Instant::now()));
        }
        Ok((probes, seqs))
    }

    async fn wait_for_member<'m>(
        &self,
        m: &'m Member,
        until: Option<(Instant, Duration)>,
        probes: &mut Vec<ProbeGuard<'m>>,
    ) -> Result<(), WaitError> {
        let layer = &self.inner.layers[m.layer];
        if layer.probes() && !m.state.has_seen_response() {
            // Wait for the key's first response, but not forever: a probe
            // that hangs must not hold every caller (nor pass the deadline).
            let probe_until = Instant::now() + PROBE_WAIT;
            let cap = until.map_or(probe_until, |(at, _)| at.min(probe_until));
            match tokio::time::timeout_at(cap, m.state.probe.lock()).await {
                Ok(guard) if !m.state.has_seen_response() => probes.push(guard),
                Ok(_) => {}
                Err(_) => match until.filter(|(at, _)| *at <= probe_until) {
                    Some((_, limit)) => return Err(WaitError::Deadline { wait: None, limit }),
                    None => tracing::debug!(
                        target: "reqwest_pace",
                        key = m.state.key,
                        "no first response yet; not waiting for the probe any longer"
                    ),
                },
            }
        }
        let limiter = match &m.state.limiter {
            Ok(l) => Arc::clone(l),
            Err(message) => {
                return Err(WaitError::Failed(Error::Backend {
                    message: format!("could not make the limiter for {}: {message}", m.state.key),
                    source: None,
                }))
            }
        };
        let t0 = Instant::now();
        acquire(limiter.as_ref(), m.weight, layer.learns_burst(), until).await?;
        let waited = t0.elapsed();
        if !waited.is_zero() {
            self.emit(Event::Waited {
                layer: layer.config.name.clone(),
                key: m.state.key.clone(),
                waited,
            });
        }
        Ok(())
    }

    /// A block until an instant the server named (a `Retry-After`, the end
    /// of a spent window), released a little later by the
    /// [`ReleaseJitter`]; other adjustments as they are.
    fn jittered(&self, adjustment: Adjustment, now: Instant) -> Adjustment {
        match adjustment {
            Adjustment::BlockUntil(until) => {
                let wait = until.saturating_duration_since(now);
                let extra = self.inner.jitter.extra(wait, (self.inner.random)());
                Adjustment::BlockUntil(until + extra)
            }
            other => other,
        }
    }

    fn give_up(&self, attempts: u32, reason: &str, status: Option<StatusCode>) {
        self.emit(Event::GaveUp {
            attempts,
            reason: reason.to_owned(),
            status: status.map(|s| s.as_u16()),
        });
    }

    async fn learn(
        &self,
        members: &[Member],
        seqs: &[u64],
        signal: Option<&RateLimitSignal>,
        outcome: Outcome,
    ) {
        let now = Instant::now();
        let cap = self.inner.policy.max_retry_after();
        // A server's limit belongs to one partition: only the narrowest
        // layer of this request that heeds the server is taught, and of
        // several equally narrow ones the last added.
        let target = members
            .iter()
            .filter(|m| self.inner.layers[m.layer].heeds_server())
            .max_by_key(|m| (self.inner.layers[m.layer].scope(), m.layer))
            .map(|m| m.layer);
        for (m, &seq) in members.iter().zip(seqs) {
            m.state.seen_response.store(true, Ordering::Release);
            let layer = &self.inner.layers[m.layer];
            let taught = Some(m.layer) == target;
            let (Some(signal), true) = (signal, taught) else {
                // In flight no more, and nothing to learn here (or no
                // response: a transport error).
                m.state.adapt().on_no_response(seq);
                continue;
            };
            if !layer.adaptive() {
                m.state.adapt().on_no_response(seq);
            }
            if let Some(named) = signal.bucket.as_deref() {
                // The server counts this route in a bucket of its own: pace
                // it there from the next request on. What the response says
                // describes that bucket, so it teaches the key only when the
                // request was paced in it (the first response of a key names
                // its default bucket, which the key itself paces).
                layer.remember_bucket(&m.base, &m.route, named);
                if !layer.paced_in(&m.base, m.bucket.as_deref(), named) {
                    m.state.adapt().on_no_response(seq);
                    continue;
                }
            }
            let adjustments = if layer.adaptive() {
                m.state
                    .adapt()
                    .on_response(now, seq, signal, outcome == Outcome::Success)
            } else {
                // A cap is not lowered, but the server's wait is kept.
                signal
                    .believable_retry_after()
                    .filter(|_| signal.is_throttled())
                    .map(|wait| Adjustment::BlockUntil(now + wait))
                    .into_iter()
                    .collect()
            };
            if signal.is_throttled() {
                self.emit(Event::Throttled {
                    layer: layer.config.name.clone(),
                    key: m.state.key.clone(),
                    status: signal.status,
                    retry_after: signal.retry_after,
                });
            }
            let Ok(limiter) = &m.state.limiter else {
                continue;
            };
            // The block a `Retry-After` asks for, to tell it from a spent
            // quota's.
            let asked = signal
                .believable_retry_after()
                .filter(|_| signal.is_throttled())
                .map(|wait| now + wait);
            for adjustment in adjustments {
                if let Adjustment::BlockUntil(until) = adjustment {
                    if until.saturating_duration_since(now) > cap {
                        // Do not park every caller behind a wait nobody
                        // will sit through: close the key, fail fast, and
                        // say what the server said (a 200 with nothing
                        // remaining is a spent quota, not a 429).
                        let closed = Closed {
                            until,
                            status: StatusCode::from_u16(signal.status)
                                .unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                            by_quota: asked != Some(until),
                        };
                        let mut current = m.state.closed();
                        if current.is_none_or(|c| c.until < until) {
                            *current = Some(closed);
                        }
                        continue;
                    }
                }
                let adjustment = self.jittered(adjustment, now);
                if let Adjustment::SetRate(rate) = adjustment {
                    self.emit(Event::Paced {
                        layer: layer.config.name.clone(),
                        key: m.state.key.clone(),
                        per_second: rate.per_second_f64(),
                    });
                }
                if let Err(e) = limiter.adjust(adjustment).await {
                    tracing::warn!(target: "reqwest_pace", key = m.state.key, error = %e, "could not adjust limiter");
                }
            }
        }
    }
}

/// A wait that did not end well.
enum WaitError {
    /// It would end past `limit` (the deadline or `max_elapsed`).
    Deadline {
        wait: Option<Duration>,
        limit: Duration,
    },
    /// The limiter failed.
    Failed(Error),
}

impl WaitError {
    fn into_error(self, attempts: u32, last_status: Option<StatusCode>) -> Error {
        match self {
            WaitError::Deadline { wait, limit } => Error::DeadlineExceeded {
                wait,
                limit,
                attempts,
                last_status,
            },
            WaitError::Failed(e) => e,
        }
    }
}

/// A key's probe lock, held until its first response is learned from.
type ProbeGuard<'m> = tokio::sync::MutexGuard<'m, ()>;

/// The instant no wait of a call may pass, with the limit it comes from:
/// the call's deadline, or from the first send on `max_elapsed`, whichever
/// ends first.
fn time_limit(
    call_until: Option<(Instant, Duration)>,
    first_send: Option<Instant>,
    max_elapsed: Option<Duration>,
) -> Option<(Instant, Duration)> {
    let retry_until = first_send
        .zip(max_elapsed)
        .map(|(at, limit)| (at + limit, limit));
    match (call_until, retry_until) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Acquire `weight`, by `until` if given: a wait the limiter says would
/// end past it fails at once, and one that turns out longer fails at it.
/// For a layer whose burst is learned (not configured) and smaller than the
/// weight, the weight is paid in pieces of at most the burst, one after the
/// other, so a big request waits for all its tokens instead of failing (or
/// being undercharged).
async fn acquire(
    limiter: &dyn Limiter,
    weight: u64,
    learned_burst: bool,
    until: Option<(Instant, Duration)>,
) -> Result<(), WaitError> {
    let mut left = weight;
    let mut piece = weight;
    while left > 0 {
        let take = piece.min(left);
        match acquire_by(limiter, take, until).await? {
            Ok(()) => left -= take,
            Err(Error::WeightExceedsCapacity { capacity, .. }) if learned_burst && capacity > 0 => {
                piece = capacity;
            }
            Err(e) => return Err(WaitError::Failed(e)),
        }
    }
    Ok(())
}

/// One acquisition by `until`: the outer error is the deadline, the inner
/// one the limiter's.
async fn acquire_by(
    limiter: &dyn Limiter,
    weight: u64,
    until: Option<(Instant, Duration)>,
) -> Result<Result<(), Error>, WaitError> {
    let Some((at, limit)) = until else {
        return Ok(limiter.acquire(weight).await);
    };
    match limiter.try_acquire(weight).await {
        Err(Error::Throttled { wait }) => {
            if Instant::now() + wait > at {
                return Err(WaitError::Deadline {
                    wait: Some(wait),
                    limit,
                });
            }
            tokio::time::timeout_at(at, limiter.acquire(weight))
                .await
                .map_err(|_| WaitError::Deadline { wait: None, limit })
        }
        other => Ok(other),
    }
}

#[cfg(feature = "middleware")]
fn other_failure(attempts: u32, source: Box<dyn std::error::Error + Send + Sync>) -> Error {
    Error::Middleware { attempts, source }
}

#[cfg(not(feature = "middleware"))]
fn other_failure(_attempts: u32, source: Box<dyn std::error::Error + Send + Sync>) -> Error {
    Error::Backend {
        message: source.to_string(),
        source: Some(source),
    }
}

impl std::fmt::Debug for ThrottledClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottledClient")
            .field(
                "layers",
                &self
                    .inner
                    .layers
                    .iter()
                    .map(|l| &l.config)
                    .collect::<Vec<_>>(),
            )
            .field("policy", &self.inner.policy)
            .field("budget", &self.inner.budget)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Rate, TokenBucket};

    #[tokio::test(start_paused = true)]
    async fn a_weight_over_a_learned_burst_is_paid_in_full_in_pieces() {
        let bucket = TokenBucket::with_initial(Rate::per_second(10).unwrap(), 4, 0).unwrap();
        let start = Instant::now();
        assert!(acquire(&bucket, 10, true, None).await.is_ok());
        // Ten tokens at 10/s from empty: a full second, not 0.4 s.
        assert_eq!(start.elapsed(), std::time::Duration::from_secs(1));
        assert_eq!(bucket.available(), 0);
        // With a configured burst the same weight is an error.
        assert!(matches!(
            acquire(&bucket, 10, false, None).await,
            Err(WaitError::Failed(Error::WeightExceedsCapacity {
                weight: 10,
                capacity: 4
            }))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_deadline_fails_at_once_with_the_wait() {
        let bucket = TokenBucket::with_initial(Rate::per_second(1).unwrap(), 1, 0).unwrap();
        let start = Instant::now();
        let limit = Duration::from_millis(500);
        let until = Some((start + limit, limit));
        // One token in a second, by a deadline half a second away.
        match acquire(&bucket, 1, false, until).await {
            Err(WaitError::Deadline { wait, limit: l }) => {
                assert_eq!(wait, Some(Duration::from_secs(1)));
                assert_eq!(l, limit);
            }
            _ => panic!("expected the deadline"),
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "failed at once");
        // Within the deadline the same wait is served.
        let until = Some((start + Duration::from_secs(2), Duration::from_secs(2)));
        assert!(acquire(&bucket, 1, false, until).await.is_ok());
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
