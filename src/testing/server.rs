//! The HTTP side: an axum service on a loopback port, spawned on the
//! caller's tokio runtime.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State as Shared};
use axum::response::Response;
use axum::Router;
use futures::StreamExt;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, StatusCode};
use reqwest::ResponseBuilderExt as _;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::algorithm::ServerAlgorithm;
use super::dialect::{self, http_date, Dialect, ResetFormat, RetryAfterPrecision, Style};
use super::fault::{Fault, RetryAfter};
use super::key::{client_key, ClientKey};
use super::state::{Front, Policy, RequestRecord, Seen, ServerStats, State, Verdict};
use crate::{Error, RequestRate};

/// A real HTTP/1.1 server on a loopback port that limits each client with a
/// token bucket and answers `429 Too Many Requests` with the rate-limit
/// headers of a chosen [`Dialect`].
///
/// Built for tests of client backoff: unlike a static mock, it keeps state,
/// so a client that sends too fast is refused, one that waits what the
/// headers say is admitted, and both can be checked after the fact with
/// [`stats`](Self::stats) and [`requests`](Self::requests).
///
/// - **Per-client buckets.** Each [`ClientKey`](super::ClientKey) has a
///   bucket of `burst` tokens refilling at `limit`, starting full. The key
///   is the API key header (`x-api-key` unless configured) when present,
///   else the client IP: the peer's, or with
///   [`trusted_proxy_hops`](ServerBuilder::trusted_proxy_hops) the entry
///   that many places from the right of `X-Forwarded-For`.
/// - **Any method, any path.** The body is read and discarded, then the
///   request takes one token: `200 OK` with body `ok` when there was one,
///   else `429` with body `rate limited`. Injected [`Fault`]s answer first.
/// - **Headers.** See [`Dialect`] for exactly what each dialect writes.
///   Every response carries a `Date` set by the server from the same
///   wall-clock instant as any epoch value in it.
/// - **Other servers.** [`algorithm`](ServerBuilder::algorithm) swaps the
///   token bucket for a fixed window, a moving window, a sliding window
///   counter, a GCRA or nginx's leaky bucket;
///   [`counts_refusals`](ServerBuilder::counts_refusals) makes it count what
///   it refuses; [`front_limiter`](ServerBuilder::front_limiter) puts a
///   header-less proxy limiter in front;
///   [`reset_format`](ServerBuilder::reset_format),
///   [`limit_is_burst`](ServerBuilder::limit_is_burst),
///   [`refusal_status`](ServerBuilder::refusal_status),
///   [`retry_after`](ServerBuilder::retry_after) and
///   [`retry_after_precision`](ServerBuilder::retry_after_precision) write
///   the headers as other servers do; [`zoo`](super::zoo) has one preset
///   per real server family, and [`space`](super::space) generates them.
/// - **In process.** [`service`](Self::service) answers without a socket,
///   through the same decision and header code.
/// - **Tokio time.** Buckets, [`latency`](ServerBuilder::latency),
///   [`change_limit_at`](ServerBuilder::change_limit_at) and
///   [`RequestRecord::at`] run on tokio's clock, and the server is spawned
///   on the runtime that calls [`start`](ServerBuilder::start). A test that
///   runs client and server in one `#[tokio::test(start_paused = true)]`
///   sees exact virtual times at both ends. The server's wall clock (its
///   `Date`, epoch resets, `Retry-After` dates) is the system time at
///   `start` plus the tokio time since, so under a paused clock it moves
///   with virtual time too; `Date` is truncated to the second, as HTTP
///   dates are.
/// - **Lifetime.** Handles are cheap clones of one server. It stops when
///   [`shutdown`](Self::shutdown) is called or the last handle is dropped.
///
/// ```
/// use reqwest_pace::testing::{Dialect, RateLimitedServer};
/// use reqwest_pace::RequestRate;
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let server = RateLimitedServer::builder()
///         .limit(RequestRate::per_second(10)?)
///         .burst(2)
///         .dialect(Dialect::XRateLimit)
///         .start()
///         .await?;
///
///     let client = reqwest::Client::new();
///     let mut statuses = Vec::new();
///     for _ in 0..3 {
///         let response = client.get(server.url()).send().await?;
///         statuses.push(response.status().as_u16());
///         if response.status() == 429 {
///             assert_eq!(response.headers()["retry-after"], "1");
///             assert_eq!(response.headers()["x-ratelimit-remaining"], "0");
///         }
///     }
///     assert_eq!(statuses, [200, 200, 429]);
///     assert_eq!(server.stats().total.throttled, 1);
///     server.shutdown().await;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct RateLimitedServer {
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

/// What the request handler shares with the handles.
struct App {
    origin: Instant,
    /// The system time at `origin`: the server's wall clock runs from it on
    /// the tokio clock.
    wall_origin: SystemTime,
    style: Style,
    api_key: HeaderName,
    hops: usize,
    latency: Duration,
    latency_per_in_flight: Duration,
    state: Mutex<State>,
    /// Requests being served now (from when their body is read to when
    /// their answer is written), and the most there ever were at once.
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
    /// The body of an admitted `GET /robots.txt`, when one is served.
    robots_txt: Option<String>,
}

/// One request counted as in flight at the server while it lives.
struct Serving<'a>(&'a App);

impl<'a> Serving<'a> {
    fn start(app: &'a App) -> Self {
        let now = app.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        app.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        Serving(app)
    }

    /// Serve for the server's latency, plus what the requests already in
    /// flight when this one arrived add; returns how long it took.
    async fn serve(&self) -> Duration {
        let app = self.0;
        let others = app.in_flight.load(Ordering::SeqCst).saturating_sub(1);
        let others = u32::try_from(others).unwrap_or(u32::MAX);
        let latency = app
            .latency
            .saturating_add(app.latency_per_in_flight.saturating_mul(others));
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        latency
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl App {
    fn state(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    fn elapsed(&self) -> Duration {
        Instant::now().saturating_duration_since(self.origin)
    }

    /// The server's wall clock: start time plus tokio time since.
    fn wall(&self) -> SystemTime {
        let elapsed = self.elapsed();
        self.wall_origin
            .checked_add(elapsed)
            .unwrap_or(self.wall_origin)
    }

    /// Decides one request, counts and logs it, and writes its answer:
    /// the one path from a request to a response, for HTTP and in-process
    /// calls alike.
    fn answer(
        &self,
        key: ClientKey,
        method: http::Method,
        path: &str,
        latency: Duration,
    ) -> Answer {
        let seen = Seen {
            key,
            method,
            path: path.to_owned(),
            latency,
        };
        let now = self.elapsed();
        let (verdict, resource) = {
            let mut state = self.state();
            let resource = state.resource_name(&seen.path).to_owned();
            (state.decide(now, seen), resource)
        };
        let mut answer = respond(&self.style, &verdict, &resource, self.wall());
        if let (Some(robots), Verdict::Admitted(_)) = (&self.robots_txt, &verdict) {
            if path == "/robots.txt" {
                answer.body = robots.clone();
            }
        }
        answer
    }
}

/// A response as the server writes it, before it becomes an axum or a
/// reqwest response.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl std::fmt::Debug for RateLimitedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.app.state();
        f.debug_struct("RateLimitedServer")
            .field("addr", &self.inner.addr)
            .field("algorithm", &state.algorithm())
            .field("style", &self.inner.app.style)
            .finish_non_exhaustive()
    }
}

impl RateLimitedServer {
    /// A builder with the defaults: 50 per second, burst 10, dialect
    /// `x-ratelimit`, API key header `x-api-key`, `X-Forwarded-For`
    /// ignored, no added latency, bound to `127.0.0.1:0` (a free port).
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            limit: None,
            burst: None,
            algorithm: None,
            dialect: Dialect::XRateLimit,
            reset_format: None,
            limit_is_burst: false,
            refusal_status: StatusCode::TOO_MANY_REQUESTS,
            retry_after: None,
            precision: RetryAfterPrecision::Ceil,
            counts_refusals: false,
            aligned_windows: false,
            front: None,
            wall_clock: None,
            routes: Vec::new(),
            api_key_header: "x-api-key".to_owned(),
            hops: 0,
            changes: Vec::new(),
            latency: Duration::ZERO,
            latency_per_in_flight: Duration::ZERO,
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            robots_txt: None,
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

    /// The header dialect.
    pub fn dialect(&self) -> Dialect {
        self.inner.app.style.dialect
    }

    /// The limiter algorithm now in force.
    pub fn algorithm(&self) -> ServerAlgorithm {
        self.inner.app.state().algorithm()
    }

    /// The current limit: the sustained rate of the algorithm.
    pub fn limit(&self) -> RequestRate {
        self.inner.app.state().limit()
    }

    /// How many requests a fresh key may send at once.
    pub fn burst(&self) -> u64 {
        self.algorithm().burst()
    }

    /// Change the limit now, for every key: existing buckets keep the
    /// tokens they hold and refill at the new rate from now on, new keys
    /// start full at the new rate, and the headers report the new limit.
    pub fn set_limit(&self, rate: RequestRate) {
        let now = self.inner.app.elapsed();
        self.inner.app.state().set_limit(now, rate);
    }

    /// Queue a fault: the next [`Fault::times`] requests, from any client,
    /// get its status (and `Retry-After`) whatever their bucket holds, and
    /// take no token. Faults are served in the order injected.
    pub fn inject(&self, fault: Fault) {
        self.inner.app.state().inject(fault);
    }

    /// The counts so far, in total and per client key.
    pub fn stats(&self) -> ServerStats {
        self.inner.app.state().stats()
    }

    /// Every request answered so far, in the order decided. The log grows
    /// without bound: meant for tests, not for long soaks.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.inner.app.state().records()
    }

    /// The most requests the server was serving at once so far: from when
    /// a request's head arrived (or an in-process call began) to when its
    /// answer was decided, its [`latency`](ServerBuilder::latency)
    /// included. A client's cap on requests in flight per host is checked
    /// against it.
    pub fn peak_in_flight(&self) -> usize {
        self.inner.app.peak_in_flight.load(Ordering::SeqCst)
    }

    /// How many requests the server is serving now (see
    /// [`peak_in_flight`](Self::peak_in_flight)).
    pub fn in_flight(&self) -> usize {
        self.inner.app.in_flight.load(Ordering::SeqCst)
    }

    /// A [`tower_service::Service`] that answers `reqwest::Request`s in
    /// process, without a socket: the same decision, counting, log and
    /// headers as the HTTP server, as if the request had come over
    /// loopback (the client key is the API key header, else `127.0.0.1`),
    /// in a fraction of the time. The request's body is not read.
    ///
    /// It never fails; its error type is `reqwest::Error` so that a
    /// [`PaceLayer`](crate::PaceLayer) can wrap it as it wraps a
    /// `reqwest::Client`, and run the client's pacing, learning and
    /// retries against the server with no I/O at all:
    ///
    /// ```
    /// use reqwest_pace::testing::RateLimitedServer;
    /// use reqwest_pace::{PaceLayer, ThrottledClient};
    /// use tower_layer::Layer;
    /// use tower_service::Service;
    ///
    /// #[tokio::main(flavor = "current_thread")]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     let server = RateLimitedServer::builder().start().await?;
    ///     let client = ThrottledClient::new(reqwest::Client::new())?;
    ///     let mut paced = PaceLayer::new(client).layer(server.service());
    ///     let request = reqwest::Request::new(reqwest::Method::GET, server.url().parse()?);
    ///     let response = paced.call(request).await?;
    ///     assert_eq!(response.status(), 200);
    ///     assert_eq!(server.stats().total.ok, 1);
    ///     Ok(())
    /// }
    /// ```
    pub fn service(&self) -> ServerService {
        ServerService {
            app: Arc::clone(&self.inner.app),
        }
    }

    /// Stop accepting, let requests in flight finish, close idle keep-alive
    /// connections, and return when the server task has ended. Other
    /// handles to the same server see it stopped.
    pub async fn shutdown(self) {
        self.inner.stop.cancel();
        self.inner.stopped.cancelled().await;
    }
}

/// Configures and starts a [`RateLimitedServer`].
///
/// Settings are checked once, in [`start`](Self::start).
#[derive(Clone, Debug)]
pub struct ServerBuilder {
    limit: Option<RequestRate>,
    burst: Option<u64>,
    algorithm: Option<ServerAlgorithm>,
    dialect: Dialect,
    reset_format: Option<ResetFormat>,
    limit_is_burst: bool,
    refusal_status: StatusCode,
    retry_after: Option<bool>,
    precision: RetryAfterPrecision,
    counts_refusals: bool,
    aligned_windows: bool,
    front: Option<(ServerAlgorithm, StatusCode)>,
    wall_clock: Option<SystemTime>,
    routes: Vec<(String, String, ServerAlgorithm)>,
    api_key_header: String,
    hops: usize,
    changes: Vec<(Duration, RequestRate)>,
    latency: Duration,
    latency_per_in_flight: Duration,
    bind: SocketAddr,
    robots_txt: Option<String>,
}

impl ServerBuilder {
    /// The sustained rate per client key of the default token bucket
    /// (default 50 per second). With a non-bucket
    /// [`algorithm`](Self::algorithm) it is an error at `start`.
    pub fn limit(mut self, rate: RequestRate) -> Self {
        self.limit = Some(rate);
        self
    }

    /// The bucket capacity per client key of the default token bucket
    /// (default 10); at least 1. With a non-bucket
    /// [`algorithm`](Self::algorithm) it is an error at `start`.
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The limiter each client key meets (default: the token bucket of
    /// [`limit`](Self::limit) and [`burst`](Self::burst)).
    pub fn algorithm(mut self, algorithm: ServerAlgorithm) -> Self {
        self.algorithm = Some(algorithm);
        self
    }

    /// How the `X-RateLimit` family writes its reset (default: seconds for
    /// [`Dialect::XRateLimit`], the epoch second for [`Dialect::GitHub`]).
    pub fn reset_format(mut self, format: ResetFormat) -> Self {
        self.reset_format = Some(format);
        self
    }

    /// Whether a bucket states its burst as the limit instead of its rate
    /// per second (default: no): a token bucket whose `limit` is the burst
    /// and whose reset is when it is full again.
    pub fn limit_is_burst(mut self, yes: bool) -> Self {
        self.limit_is_burst = yes;
        self
    }

    /// The status of a limiter refusal (default 429; nginx's `limit_req`
    /// answers 503 unless told otherwise). A 4xx or 5xx.
    pub fn refusal_status(mut self, status: StatusCode) -> Self {
        self.refusal_status = status;
        self
    }

    /// Count the paths that start with `prefix` apart, in a resource named
    /// `name` with its own `algorithm` per client key, as GitHub counts
    /// `/search` apart from its `core` API (the GitHub dialect writes the
    /// name in `x-ratelimit-resource`; the others write the resource's
    /// figures without its name). The first matching route wins; other
    /// paths are the `core` resource.
    pub fn route(mut self, prefix: &str, name: &str, algorithm: ServerAlgorithm) -> Self {
        self.routes
            .push((prefix.to_owned(), name.to_owned(), algorithm));
        self
    }

    /// The server's wall clock at `start` (default: the system time then).
    /// Whole-second `Date`s and epoch resets make a client's behaviour
    /// depend on where in a second the server starts; a test that must be
    /// exact pins it.
    pub fn wall_clock(mut self, at: SystemTime) -> Self {
        self.wall_clock = Some(at);
        self
    }

    /// Whether refusals carry `Retry-After` (default: yes, except with
    /// [`Dialect::None`], which stays bare).
    pub fn retry_after(mut self, yes: bool) -> Self {
        self.retry_after = Some(yes);
        self
    }

    /// How a refusal's `Retry-After` writes its wait (default
    /// [`RetryAfterPrecision::Ceil`]: whole seconds rounded up, at least
    /// 1). Whether it is written at all is [`retry_after`](Self::retry_after).
    pub fn retry_after_precision(mut self, precision: RetryAfterPrecision) -> Self {
        self.precision = precision;
        self
    }

    /// Whether the main limiter counts the requests it refuses as it
    /// counts admitted ones (default: no). A bucket then takes a token it
    /// does not have, pushing the next admission one interval further; a
    /// moving window logs the refusal; a window counter counts it. A client
    /// that keeps sending while refused stays locked out, as behind
    /// limiters that count every request they see. In a fixed window it
    /// changes nothing but the count.
    pub fn counts_refusals(mut self, yes: bool) -> Self {
        self.counts_refusals = yes;
        self
    }

    /// Whether the main limiter's fixed windows
    /// ([`ServerAlgorithm::FixedWindow`]) begin at whole multiples of their
    /// length on the server's clock, counted from its start (default: no).
    /// Kong's rate-limiting plugin, django-ratelimit, and a Redis key
    /// named after `now / window` count so: every key's windows end
    /// together, whenever its first request came. By default a window
    /// begins with the first request after the last one ended, as a
    /// counter that expires a window after it was created
    /// (express-rate-limit, `INCR` and `EXPIRE`).
    pub fn aligned_windows(mut self, yes: bool) -> Self {
        self.aligned_windows = yes;
        self
    }

    /// Put a second limiter in front of the main one (default: none), as a
    /// proxy or WAF stands in front of an API: per client key, it decides
    /// first with `algorithm`, and what it refuses is answered `status`
    /// (a 4xx or 5xx) with no rate-limit headers and no `Retry-After`, and
    /// never reaches the main limiter ([`Answer::FrontRefused`]).
    ///
    /// [`Answer::FrontRefused`]: super::Answer::FrontRefused
    pub fn front_limiter(mut self, algorithm: ServerAlgorithm, status: StatusCode) -> Self {
        self.front = Some((algorithm, status));
        self
    }

    /// The rate-limit headers to write (default [`Dialect::XRateLimit`]).
    pub fn dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// The header whose value, when present and not blank, is the client
    /// key (default `x-api-key`; matched case-insensitively).
    pub fn api_key_header(mut self, name: &str) -> Self {
        self.api_key_header = name.to_owned();
        self
    }

    /// How many trusted proxies stand in front of the server (default 0).
    ///
    /// With 0, `X-Forwarded-For` is ignored and the client IP is the peer
    /// address. With `n`, the client IP is the `n`-th entry from the
    /// **right** of `X-Forwarded-For` (repeated header lines joined in
    /// order): each trusted proxy appends the address it saw, so the
    /// entries to the left of that are whatever the client wrote and are
    /// never used. If the list has fewer than `n` entries or the entry is
    /// not an IP address (optionally with a port, IPv6 optionally in
    /// brackets), the peer address is used.
    pub fn trusted_proxy_hops(mut self, hops: usize) -> Self {
        self.hops = hops;
        self
    }

    /// At `after` past [`start`](Self::start), change the limit to `rate`
    /// as [`RateLimitedServer::set_limit`] would (on the tokio clock).
    /// May be called several times; changes apply in time order.
    pub fn change_limit_at(mut self, after: Duration, rate: RequestRate) -> Self {
        self.changes.push((after, rate));
        self
    }

    /// Service time added to every request after its body is read and
    /// before the limiter decides (a tokio sleep; default none). The
    /// headers therefore describe the bucket as the response leaves.
    pub fn latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Service time added for each other request the server is serving
    /// when one arrives (default none): a server that slows down under
    /// load, whose latency is [`latency`](Self::latency) alone and grows
    /// by this much per request it already holds. Each request's is in
    /// [`RequestRecord::latency`](super::RequestRecord::latency).
    pub fn latency_per_in_flight(mut self, extra: Duration) -> Self {
        self.latency_per_in_flight = extra;
        self
    }

    /// Serve `body` as `/robots.txt` (default: none, and `/robots.txt` is
    /// answered `ok` like any path). The request is decided like any other
    /// (it takes a token, an injected [`Fault`] answers it first, it is
    /// logged): only an admitted one gets the body, so a test scripts a
    /// robots.txt that fails with a fault.
    pub fn robots_txt(mut self, body: impl Into<String>) -> Self {
        self.robots_txt = Some(body.into());
        self
    }

    /// The address to listen on (default `127.0.0.1:0`, a free loopback
    /// port).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// Bind and start serving, on a task spawned on the current tokio
    /// runtime.
    ///
    /// Fails with [`Error::InvalidConfig`] on a zero burst, limit, rate
    /// or window (of the main or the front limiter), a refusal status that
    /// is not a 4xx or 5xx, an invalid header name, a bind failure (the
    /// message names the address and the I/O error), or when not called
    /// from within a tokio runtime.
    pub async fn start(self) -> Result<RateLimitedServer, Error> {
        let (algorithm, rate) = self.checked_algorithm()?;
        refusal_status(self.refusal_status)?;
        let front = match self.front {
            Some((front, status)) => {
                checked(front)?;
                refusal_status(status)?;
                Some(Front::new(front, status))
            }
            None => None,
        };
        let mut style = Style::of(self.dialect);
        if let Some(format) = self.reset_format {
            style.reset = format;
        }
        if let Some(yes) = self.retry_after {
            style.retry_after = yes;
        }
        style.precision = self.precision;
        let api_key = HeaderName::from_bytes(self.api_key_header.as_bytes()).map_err(|_| {
            Error::config(format!(
                "{:?} is not a valid header name",
                self.api_key_header
            ))
        })?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::config(
                "the test server must be started within a tokio runtime",
            ));
        }
        let bind = self.bind;
        let cannot = |what: &str, e: std::io::Error| {
            Error::config(format!("cannot {what} the test server at {bind}: {e}"))
        };
        let listener = TcpListener::bind(bind)
            .await
            .map_err(|e| cannot("bind", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| cannot("find the port of", e))?;

        let policy = Policy {
            limit_is_burst: self.limit_is_burst,
            refusal: self.refusal_status,
            counts_refusals: self.counts_refusals,
            aligned_windows: self.aligned_windows,
        };
        let mut state = State::new(algorithm, rate, policy, front);
        for (prefix, name, algorithm) in self.routes {
            state.add_route(prefix, name, algorithm);
        }
        let origin = Instant::now();
        let app = Arc::new(App {
            origin,
            wall_origin: self.wall_clock.unwrap_or_else(SystemTime::now),
            style,
            api_key,
            hops: self.hops,
            latency: self.latency,
            latency_per_in_flight: self.latency_per_in_flight,
            state: Mutex::new(state),
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
            robots_txt: self.robots_txt,
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
            // Dropped with the task, even if the runtime shuts down first.
            let _done = done.drop_guard();
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "test server stopped with an error");
            }
        });

        let mut changes = self.changes;
        if !changes.is_empty() {
            changes.sort_by_key(|(after, _)| *after);
            let (app, stop) = (Arc::clone(&app), stop.clone());
            tokio::spawn(async move {
                for (after, rate) in changes {
                    tokio::select! {
                        () = tokio::time::sleep_until(origin + after) => {}
                        () = stop.cancelled() => return,
                    }
                    let now = app.elapsed();
                    app.state().set_limit(now, rate);
                }
            });
        }

        Ok(RateLimitedServer {
            inner: Arc::new(Inner {
                addr,
                app,
                stop,
                stopped,
            }),
        })
    }
}

impl ServerBuilder {
    /// The algorithm to run: the explicit one, or the token bucket of
    /// `limit` and `burst`; an error when both are given or a value is out
    /// of range.
    fn checked_algorithm(&self) -> Result<(ServerAlgorithm, RequestRate), Error> {
        let algorithm = match self.algorithm {
            Some(algorithm) => {
                if self.limit.is_some() || self.burst.is_some() {
                    return Err(Error::config(
                        "the test server takes either an algorithm or limit/burst, not both",
                    ));
                }
                algorithm
            }
            None => ServerAlgorithm::TokenBucket {
                rate: match self.limit {
                    Some(rate) => rate,
                    None => RequestRate::per_second(50)?,
                },
                burst: self.burst.unwrap_or(10),
            },
        };
        let rate = checked(algorithm)?;
        Ok((algorithm, rate))
    }
}

/// The sustained rate of `algorithm`, or an error when a burst, limit or
/// window is zero.
fn checked(algorithm: ServerAlgorithm) -> Result<RequestRate, Error> {
    let valid = match algorithm {
        ServerAlgorithm::TokenBucket { burst, .. } | ServerAlgorithm::Gcra { burst, .. } => {
            burst > 0
        }
        ServerAlgorithm::LeakyBucket { .. } => true,
        ServerAlgorithm::FixedWindow { limit, window }
        | ServerAlgorithm::SlidingLog { limit, window }
        | ServerAlgorithm::SlidingCounter { limit, window } => limit > 0 && !window.is_zero(),
    };
    if !valid {
        return Err(Error::config(format!(
            "the test server needs a burst, limit and window above zero ({algorithm})"
        )));
    }
    match algorithm {
        ServerAlgorithm::TokenBucket { rate, .. }
        | ServerAlgorithm::LeakyBucket { rate, .. }
        | ServerAlgorithm::Gcra { rate, .. } => Ok(rate),
        ServerAlgorithm::FixedWindow { limit, window }
        | ServerAlgorithm::SlidingLog { limit, window }
        | ServerAlgorithm::SlidingCounter { limit, window } => RequestRate::new(limit, window),
    }
}

fn refusal_status(status: StatusCode) -> Result<(), Error> {
    if status.is_client_error() || status.is_server_error() {
        Ok(())
    } else {
        Err(Error::config(format!(
            "a refusal status must be a 4xx or 5xx, not {status}"
        )))
    }
}

async fn handle(
    Shared(app): Shared<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let serving = Serving::start(&app);
    let (parts, body) = request.into_parts();
    let key = client_key(&parts.headers, peer.ip(), &app.api_key, app.hops);
    // Read the body to the end so the connection can be reused; a broken
    // body still gets an answer.
    let mut frames = body.into_data_stream();
    while let Some(Ok(_)) = frames.next().await {}
    let latency = serving.serve().await;
    let answer = app.answer(key, parts.method, parts.uri.path(), latency);
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() = answer.status;
    *response.headers_mut() = answer.headers;
    response
}

fn respond(style: &Style, verdict: &Verdict, resource: &str, wall: SystemTime) -> Answer {
    let status = verdict.status();
    let mut headers = HeaderMap::new();
    dialect::write_date(&mut headers, wall);
    let body: &str = match verdict {
        Verdict::Admitted(figures) => {
            dialect::write(style, figures, wall, resource, &mut headers);
            "ok\n"
        }
        Verdict::Throttled(figures, _) => {
            dialect::write(style, figures, wall, resource, &mut headers);
            "rate limited\n"
        }
        Verdict::Fault { retry_after, .. } => {
            let value = retry_after.map(|r| match r {
                RetryAfter::Seconds(secs) => secs.to_string(),
                RetryAfter::Date(at) => http_date(at),
                RetryAfter::DateIn(d) => http_date(wall.checked_add(d).unwrap_or(wall)),
            });
            if let Some(Ok(value)) = value.map(HeaderValue::try_from) {
                headers.insert(RETRY_AFTER, value);
            }
            "injected fault\n"
        }
        Verdict::Front(_) => "rate limited\n",
    };
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// A [`RateLimitedServer`] called in process: see
/// [`RateLimitedServer::service`].
#[derive(Clone)]
pub struct ServerService {
    app: Arc<App>,
}

impl std::fmt::Debug for ServerService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerService")
            .field("style", &self.app.style)
            .finish_non_exhaustive()
    }
}

/// The peer an in-process request is taken to come from.
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

impl tower_service::Service<reqwest::Request> for ServerService {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, reqwest::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: reqwest::Request) -> Self::Future {
        let app = Arc::clone(&self.app);
        Box::pin(async move {
            let serving = Serving::start(&app);
            let key = client_key(request.headers(), LOOPBACK, &app.api_key, app.hops);
            let latency = serving.serve().await;
            let answer = app.answer(key, request.method().clone(), request.url().path(), latency);
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
