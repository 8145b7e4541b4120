//! The throttled reqwest client: pace before send, adapt to the server,
//! retry with async sleeps.
//!
//! The flow is one-way: a request's keys (one per [`Scope`]) pick its
//! buckets; it waits for each bucket; it is sent; the response's
//! [`RateLimitSignal`](crate::headers::RateLimitSignal) adjusts the
//! buckets; the [`RetryRules`] decides whether to sleep and try again.
//! [`Pacer`] (the `engine` module) runs that loop over any way of sending
//! an attempt; [`ThrottledClient`] is a `Pacer` with a `reqwest::Client`.

mod adapt;
mod autothrottle;
mod breaker;
mod builder;
pub(crate) mod concurrency;
mod engine;
mod events;
mod headerless;
mod infer;
mod learn;
mod memory;
#[cfg(feature = "metrics")]
mod metrics;
mod priority;
mod reconcile;
mod request;
#[cfg(feature = "robots")]
mod robots;
mod scope;
mod server_clock;
mod spacing;
pub(crate) mod tuning;
mod wait;

use std::time::Duration;

use reqwest::{Request, RequestBuilder, Response, StatusCode};

#[cfg(feature = "metrics")]
pub use self::metrics::describe_metrics;
pub use autothrottle::AutoThrottle;
pub use breaker::{CircuitBreaker, CircuitState};
pub use builder::{PaceBuilder, ThrottledClientBuilder};
pub use engine::Pacer;
pub use events::Event;
pub use priority::Priority;
pub use reconcile::{Charge, FromHeaders, Reconcile, UsageBody};
pub use request::PacedRequestBuilder;
#[cfg(feature = "robots")]
pub use robots::Robots;
pub use scope::{host_key, Scope};

use crate::headers::Dimension;
use crate::retry::RetryRules;
use crate::Error;

/// `wait` after `at`; a wait past what the clock can hold (a configured
/// `Duration::MAX`) is a century: nothing the key will live to see.
pub(crate) fn later_by(at: tokio::time::Instant, wait: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);
    at.checked_add(wait).unwrap_or_else(|| at + CENTURY)
}

/// What a request spends from the buckets it passes through: one request by
/// default, plus any amount in other dimensions (tokens for a
/// token-metered API). A scope spends the amount of its own
/// [`dimension`](Scope::dimension); a scope whose dimension the cost does
/// not name is not charged.
///
/// **An estimate.** What a call really costs is often known only after
/// it (an LLM call's output): pace on an estimate, and let a
/// [`Reconcile`] settle the difference from the response's headers or
/// body (see [`Charge`]). A scope whose key learns its burst holds the
/// heaviest call in use, so any weight is one acquisition; a weight above
/// the `limit` the key's server states in the dimension fails at once with
/// [`Error::WeightExceedsCapacity`], as one above a configured
/// [`burst`](Scope::burst) does. A weight of 0 in a dimension (requests
/// included) charges no scope of that dimension.
///
/// A call carries it as a [`TimeLimit`] does: [`PacedRequestBuilder::cost`]
/// on the client's own builder, or in the request's extensions
/// (`reqwest-middleware`'s for [`PaceMiddleware`](crate::PaceMiddleware),
/// an `http::Request`'s for the tower service and
/// [`ThrottledClient::send`]).
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
    /// The amount in requests, apart: every call has one, and the default
    /// cost of one request then allocates nothing.
    requests: u64,
    /// The amounts in other dimensions.
    others: Vec<(Dimension, u64)>,
}

impl Default for Cost {
    /// One request.
    fn default() -> Self {
        Cost {
            requests: 1,
            others: Vec::new(),
        }
    }
}

impl Cost {
    /// Spend `amount` in `dimension` (replacing any earlier amount).
    pub fn with(mut self, dimension: Dimension, amount: u64) -> Self {
        if dimension == Dimension::Requests {
            self.requests = amount;
        } else {
            self.others.retain(|(d, _)| d != &dimension);
            self.others.push((dimension, amount));
        }
        self
    }

    /// Whether the cost names `dimension` (requests always).
    pub(crate) fn names(&self, dimension: &Dimension) -> bool {
        *dimension == Dimension::Requests || self.others.iter().any(|(d, _)| d == dimension)
    }

    /// Whether the cost is one request and nothing else.
    pub(crate) fn is_one_request(&self) -> bool {
        self.requests == 1 && self.others.is_empty()
    }

    /// The amount spent in `dimension` (0 if not named).
    pub fn get(&self, dimension: &Dimension) -> u64 {
        if *dimension == Dimension::Requests {
            return self.requests;
        }
        self.others
            .iter()
            .find(|(d, _)| d == dimension)
            .map_or(0, |(_, n)| *n)
    }
}

/// A time limit for one call, from when it is sent (a duration, where
/// tokio's deadline is an instant), in a request's
/// extensions: `reqwest-middleware`'s for
/// [`PaceMiddleware`](crate::PaceMiddleware)
/// (`.with_extension(TimeLimit(..))`), an `http::Request`'s for the tower
/// service and for [`ThrottledClient::send`]; a [`ThrottledClient`]'s own
/// builder takes [`PacedRequestBuilder::time_limit`]. It overrides the
/// client's [`time_limit`](ThrottledClientBuilder::time_limit). A [`Cost`] and
/// a [`Priority`] in the same extensions are honoured the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeLimit(pub Duration);

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
    /// The key's cap on requests in flight: the one set
    /// ([`Scope::max_in_flight`]) or the one its server's concurrency
    /// refusals taught, whichever is less; `None` without either.
    pub max_in_flight: Option<usize>,
    /// How many requests hold one of the key's in-flight permits now
    /// (counted for a learning scope's key without a cap too; always 0
    /// for another scope without one).
    pub in_flight: usize,
    /// How many requests wait for their turn at the key now, by priority
    /// ([`Priority`]): for the key's buckets, and for the fleet's slot where
    /// the cap on calls in flight is shared (`Scope::shared_in_flight`,
    /// feature `redis`); the call each turn is with aside.
    pub queued: usize,
    /// The key's circuit breaker ([`Scope::circuit_breaker`]); `None`
    /// without one.
    pub circuit: Option<CircuitState>,
    /// The least time between two requests that the robots.txt of the
    /// key's origin asks for (its `Crawl-delay` or `Request-rate`), while
    /// it is cached (feature `robots`; the key is an origin's for the
    /// host scope).
    pub crawl_delay: Option<Duration>,
    /// The delay between the key's sends that its measured latency sets
    /// ([`Scope::auto_throttle`]); `None` without it.
    pub auto_throttle_delay: Option<Duration>,
}

/// Something that can become a [`reqwest::Request`]: a `Request`, a
/// `RequestBuilder`, a [`PacedRequestBuilder`] (with its cost, time limit
/// and priority), or an `http::Request` (with the [`Cost`], [`TimeLimit`]
/// and [`Priority`] in its extensions).
pub trait IntoRequest {
    /// Build the request.
    fn into_request(self) -> Result<Request, reqwest::Error>;

    /// The priority class the call carries (a [`PacedRequestBuilder`]'s,
    /// an `http::Request`'s extensions'; none for a plain request or
    /// builder, which is then [`Priority::NORMAL`]).
    ///
    /// Plumbing the client reads, hidden from the docs (issue 20: a small
    /// public surface): a type of a user's own implements
    /// [`into_request`](Self::into_request) and keeps the defaults.
    #[doc(hidden)]
    fn call_priority(&self) -> Option<Priority> {
        None
    }

    /// Build the request with the cost and time limit it carries (a
    /// [`PacedRequestBuilder`]'s; none for a plain request or builder).
    /// Hidden from the docs, as [`call_priority`](Self::call_priority).
    #[doc(hidden)]
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

/// An `http::Request`: its extensions' [`Cost`], [`TimeLimit`] and
/// [`Priority`] are the call's, as a middleware chain's are.
impl<B: Into<reqwest::Body>> IntoRequest for http::Request<B> {
    fn into_request(self) -> Result<Request, reqwest::Error> {
        Request::try_from(self)
    }

    fn call_priority(&self) -> Option<Priority> {
        self.extensions().get::<Priority>().copied()
    }

    fn into_call(self) -> Result<(Request, Option<Cost>, Option<Duration>), reqwest::Error> {
        let options = from_extensions(self.extensions());
        Ok((Request::try_from(self)?, options.cost, options.deadline))
    }
}

/// What a request's extensions say of its call: its [`Cost`],
/// [`TimeLimit`] and [`Priority`].
pub(crate) struct CallOptions {
    pub(crate) cost: Option<Cost>,
    pub(crate) deadline: Option<Duration>,
    /// Read by the middleware and the tower service (a client's
    /// `http::Request` gives its own through `call_priority`).
    #[cfg_attr(not(any(feature = "middleware", feature = "tower")), allow(dead_code))]
    pub(crate) priority: Priority,
}

/// The [`Cost`], [`TimeLimit`] and [`Priority`] a request's extensions
/// carry.
pub(crate) fn from_extensions(extensions: &http::Extensions) -> CallOptions {
    CallOptions {
        cost: extensions.get::<Cost>().cloned(),
        deadline: extensions.get::<TimeLimit>().map(|d| d.0),
        priority: extensions.get::<Priority>().copied().unwrap_or_default(),
    }
}

/// A failure of one attempt's transport, as the retry loop sees it.
pub(crate) enum SendFailure {
    /// reqwest's own error: classified by the policy.
    Reqwest(reqwest::Error),
    /// Another middleware's error (one further down the chain): final.
    #[cfg_attr(not(feature = "middleware"), allow(dead_code))]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// A `reqwest::Client` that paces, learns and retries: a [`Pacer`] whose
/// attempts the `reqwest::Client` sends.
///
/// Cheap to clone (an `Arc` inside) and safe to share across tasks: all
/// clones share the same buckets, learned rates and retry budget.
///
/// ```no_run
/// use reqwest_pace::{RequestRate, ThrottledClient};
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let client = ThrottledClient::builder(reqwest::Client::new())
///     .rate(RequestRate::per_second(10)?) // a ceiling per host; omit it to learn
///     .build()?;
/// let response = client.get("https://api.example.com/items").send().await?;
/// println!("{}", response.status());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ThrottledClient {
    pacer: Pacer,
    client: reqwest::Client,
}

impl ThrottledClient {
    /// Start building a client around `client`, with one adaptive bucket per
    /// host, the default [`RetryRules`] and the default
    /// [`RetryBudget`](crate::retry::RetryBudget).
    pub fn builder(client: reqwest::Client) -> ThrottledClientBuilder {
        PaceBuilder::new(client)
    }

    /// A client with every default: adaptive per-host pacing, default
    /// retries.
    pub fn new(client: reqwest::Client) -> Result<Self, Error> {
        ThrottledClient::builder(client).build()
    }

    /// The wrapped `reqwest::Client`.
    pub fn inner(&self) -> &reqwest::Client {
        &self.client
    }

    /// The engine: scopes, learned rates, policy and budget. A
    /// [`PaceMiddleware`](crate::PaceMiddleware) made from it shares them
    /// with this client.
    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    /// Start a request on this client; its
    /// [`send`](PacedRequestBuilder::send) paces, learns and retries (as
    /// does passing it to [`send`](Self::send)).
    pub fn request(
        &self,
        method: reqwest::Method,
        url: impl reqwest::IntoUrl,
    ) -> PacedRequestBuilder {
        PacedRequestBuilder::new(self.clone(), self.client.request(method, url))
    }

    /// A GET request; `client.get(url).send()` paces, learns and retries.
    pub fn get(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::GET, url)
    }

    /// A POST request; `client.post(url).send()` paces and learns (and
    /// retries only with
    /// [`RetryRules::with_retry_non_idempotent`](crate::retry::RetryRules::with_retry_non_idempotent)).
    pub fn post(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::POST, url)
    }

    /// A PUT request.
    pub fn put(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::PUT, url)
    }

    /// A PATCH request.
    pub fn patch(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::PATCH, url)
    }

    /// A DELETE request.
    pub fn delete(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::DELETE, url)
    }

    /// A HEAD request.
    pub fn head(&self, url: impl reqwest::IntoUrl) -> PacedRequestBuilder {
        self.request(reqwest::Method::HEAD, url)
    }

    /// The retry rules in force.
    pub fn retry_rules(&self) -> &RetryRules {
        self.pacer.retry_rules()
    }

    /// See [`Pacer::current_rate`].
    pub fn current_rate(&self, scope: &str, key: &str) -> Option<f64> {
        self.pacer.current_rate(scope, key)
    }

    /// See [`Pacer::key_status`].
    pub fn key_status(&self, scope: &str, key: &str) -> Option<KeyStatus> {
        self.pacer.key_status(scope, key)
    }

    /// See [`Pacer::clear_key`].
    pub async fn clear_key(&self, scope: &str, key: &str) -> bool {
        self.pacer.clear_key(scope, key).await
    }

    /// Send a request (a `Request` or a `RequestBuilder`), paced, adapted
    /// and retried. Spends one request from each bucket it passes.
    ///
    /// Returns the final response for successes and for failures that are
    /// not retryable (a 404 is `Ok`); a retryable failure that could not be
    /// retried to success is an [`Error`] naming why, with the last
    /// response's status, headers and first bytes of body
    /// ([`Error::last_response`]).
    pub async fn send(&self, request: impl IntoRequest) -> Result<Response, Error> {
        let priority = request.call_priority().unwrap_or_default();
        let (request, cost, deadline) = request.into_call()?;
        self.send_with(request, &cost.unwrap_or_default(), deadline, priority)
            .await
    }

    /// [`send`](Self::send), spending `cost` instead of one request (or
    /// the cost a [`PacedRequestBuilder`] carries).
    pub async fn send_with_cost(
        &self,
        request: impl IntoRequest,
        cost: &Cost,
    ) -> Result<Response, Error> {
        let priority = request.call_priority().unwrap_or_default();
        let (request, _, deadline) = request.into_call()?;
        self.send_with(request, cost, deadline, priority).await
    }

    /// [`send_with_cost`](Self::send_with_cost) by a deadline of its own,
    /// queued at its key in `priority`'s class.
    pub(crate) async fn send_with(
        &self,
        request: Request,
        cost: &Cost,
        deadline: Option<Duration>,
        priority: Priority,
    ) -> Result<Response, Error> {
        let client = &self.client;
        self.pacer
            .run(request, cost, deadline, priority, |r| async move {
                client.execute(r).await.map_err(SendFailure::Reqwest)
            })
            .await
    }
}

impl From<ThrottledClient> for Pacer {
    fn from(client: ThrottledClient) -> Pacer {
        client.pacer
    }
}
