//! Scopes: which buckets a request belongs to, and how each is made.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use http::HeaderName;
use reqwest::Request;

use super::adapt::{Adaptive, Learned};
use super::autothrottle::{AutoThrottle, Politeness};
use super::breaker::{Breaker, CircuitBreaker, CircuitState};
use super::concurrency::{InFlight, SharedInFlight};
use super::memory::Memory;
use super::priority::Turns;
use crate::headers::Dimension;
use crate::limiter::{Evictable, KeyedLimiter, Limiter, RequestRate, ServerBlock, TokenBucket};
use crate::Error;

type KeyFn = Arc<dyn Fn(&Request) -> Option<String> + Send + Sync>;
type Factory = Arc<dyn Fn(&str) -> Result<Arc<dyn Limiter>, Error> + Send + Sync>;
/// Makes a key's cap on calls in flight shared by a fleet, given the key
/// and the scope's configured cap.
type SharedFactory =
    Arc<dyn Fn(&str, Option<usize>) -> Result<Arc<dyn SharedInFlight>, Error> + Send + Sync>;

/// How a scope names the key of a request. The crate's own rules write it
/// into a buffer, so that a call whose key is held already allocates no
/// key; a caller's function makes a `String`.
#[derive(Clone)]
enum KeyRule {
    /// Scheme, host and port ([`host_key`]).
    Origin,
    /// The same key for every request.
    Every(&'static str),
    /// The header's name and a hash of its value (see
    /// [`Scope::per_header`]); requests without it are not in the scope.
    Header(HeaderName),
    /// The caller's function.
    Function(KeyFn),
}

impl KeyRule {
    /// The key of `request`, written into `buffer` (emptied first) where
    /// the rule is the crate's own; `None` when the request is not in the
    /// scope.
    fn key<'b>(&self, request: &Request, buffer: &'b mut String) -> Option<Cow<'b, str>> {
        buffer.clear();
        match self {
            KeyRule::Origin => write_origin(request.url(), buffer)?,
            KeyRule::Every(key) => return Some(Cow::Borrowed(key)),
            KeyRule::Header(header) => {
                let value = request.headers().get(header)?;
                // Writing to a `String` cannot fail.
                let _ = write!(
                    buffer,
                    "{}#{:016x}",
                    header.as_str(),
                    fnv1a(value.as_bytes())
                );
            }
            KeyRule::Function(key) => return key(request).map(Cow::Owned),
        }
        Some(Cow::Borrowed(buffer.as_str()))
    }

    /// The key of `request`, as a `String` of its own.
    #[cfg(test)]
    fn of(&self, request: &Request) -> Option<String> {
        self.key(request, &mut String::new()).map(Cow::into_owned)
    }
}

thread_local! {
    /// Where a call's keys are written: one buffer per thread, as long as
    /// the longest key it wrote.
    static KEY_BUFFER: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Run `f` with this thread's key buffer (a fresh one, should `f` itself
/// ask for it).
pub(crate) fn with_key_buffer<R>(f: impl FnOnce(&mut String) -> R) -> R {
    KEY_BUFFER.with(|buffer| match buffer.try_borrow_mut() {
        Ok(mut buffer) => f(&mut buffer),
        Err(_) => f(&mut String::new()),
    })
}

/// Rate used for a key whose rate is neither configured nor learned yet:
/// effectively unlimited, so the client starts permissively.
const OPEN_RATE_PER_SECOND: u64 = 1_000_000;
const OPEN_CAPACITY: u64 = 1_000_000;
/// How long a key's state is kept once idle: the same as a bare
/// [`KeyedLimiter`]'s.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long what a key learned is kept after its state is dropped.
const DEFAULT_REMEMBER_FOR: Duration = Duration::from_secs(3_600);
/// How many of a process's calls may hold a turn booked on a limiter of
/// the caller's at once.
const BOOKINGS_PER_PROCESS: usize = 1;
/// Share of a learned rate that is used, to stay clear of the server's
/// edge (clock rounding, requests in flight).
pub(crate) const DEFAULT_HEADROOM: f64 = 0.97;

/// One family of buckets: a key function that says which bucket of the
/// family a request belongs to (or none), and how a bucket is made.
///
/// A request must pass every scope it belongs to, in the order the scopes
/// were added: for example a global bucket for all traffic plus one per
/// API credential.
///
/// ```
/// use reqwest_pace::{Scope, RequestRate};
///
/// // At most 100/s in all, and 10/s per API token (by the Authorization
/// // header; requests without one are not in this scope).
/// let global = Scope::global().rate(RequestRate::per_second(100)?);
/// let per_token = Scope::per_header("token", "authorization").rate(RequestRate::per_second(10)?);
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone)]
pub struct Scope {
    /// Shared with every event of the scope's keys.
    pub(crate) name: Arc<str>,
    key: KeyRule,
    breadth: Breadth,
    rate: Option<RequestRate>,
    burst: Option<u64>,
    dimension: Dimension,
    /// `None`: by the default rule (see [`Scope::adaptive`]).
    adaptive: Option<bool>,
    probe: bool,
    headroom: f64,
    factory: Option<Factory>,
    max_keys: usize,
    idle_timeout: Duration,
    remember_for: Duration,
    /// The most requests of one key in flight at once (`None`: no cap).
    max_in_flight: Option<usize>,
    /// Whether a learned cap on calls in flight is probed above what the
    /// server was seen to admit ([`Scope::probe_cap`]).
    probe_cap: bool,
    /// Each key's cap on calls in flight kept for the fleet, in place of
    /// the process's own (`Scope::shared_in_flight`).
    shared_in_flight: Option<SharedFactory>,
    /// Each key's circuit breaker (`None`: none).
    breaker: Option<CircuitBreaker>,
    /// Each key's latency-aware politeness (`None`: none).
    auto_throttle: Option<AutoThrottle>,
    /// What one priority class is worth of waiting in a key's queue.
    aging: Duration,
    /// Why the scope cannot be built, found while it was set up.
    invalid: Option<String>,
}

/// How much of the traffic one key of a scope covers: a server's limit
/// teaches the narrowest adaptive scope a request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Breadth {
    /// Every request ([`Scope::global`]).
    Global,
    /// One host ([`Scope::per_host`]).
    Host,
    /// One partition within a host: a credential, a tenant, any custom key
    /// ([`Scope::per_header`], [`Scope::keyed`]).
    Partition,
}

/// The default key: scheme, host and port of the URL.
pub fn host_key(request: &Request) -> Option<String> {
    origin(request.url())
}

/// Scheme, host and port of `url`; `None` without a host.
pub(crate) fn origin(url: &reqwest::Url) -> Option<String> {
    let mut origin = String::new();
    write_origin(url, &mut origin)?;
    Some(origin)
}

/// [`origin`], written at the end of `into`.
pub(crate) fn write_origin(url: &reqwest::Url, into: &mut String) -> Option<()> {
    let host = url.host_str()?;
    let port = url.port_or_known_default().unwrap_or(0);
    // Writing to a `String` cannot fail.
    let _ = write!(into, "{}://{}:{}", url.scheme(), host, port);
    Some(())
}

/// 64-bit FNV-1a: stable across processes and builds (unlike std's
/// hashers), which a key shared through Redis needs.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Scope {
    /// A scope keyed by `key`: requests for which it returns `None` are not
    /// in this scope.
    pub fn keyed(
        name: impl Into<String>,
        key: impl Fn(&Request) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        Scope::with_rule(name.into(), KeyRule::Function(Arc::new(key)))
    }

    fn with_rule(name: String, key: KeyRule) -> Self {
        Scope {
            name: Arc::from(name),
            key,
            breadth: Breadth::Partition,
            rate: None,
            burst: None,
            dimension: Dimension::Requests,
            adaptive: None,
            probe: true,
            headroom: DEFAULT_HEADROOM,
            factory: None,
            max_keys: 100_000,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            remember_for: DEFAULT_REMEMBER_FOR,
            max_in_flight: None,
            probe_cap: false,
            shared_in_flight: None,
            breaker: None,
            auto_throttle: None,
            aging: super::priority::DEFAULT_AGING,
            invalid: None,
        }
    }

    /// One bucket per host (scheme + host + port): the default scope.
    pub fn per_host() -> Self {
        Scope {
            breadth: Breadth::Host,
            ..Scope::with_rule("host".to_owned(), KeyRule::Origin)
        }
    }

    /// One bucket for every request. A cap: responses never lower it unless
    /// [`adaptive(true)`](Self::adaptive) is asked for.
    pub fn global() -> Self {
        Scope {
            breadth: Breadth::Global,
            ..Scope::with_rule("global".to_owned(), KeyRule::Every("*"))
        }
    }

    /// One bucket per value of a request header (an API token, a tenant
    /// id); requests without the header are not in this scope.
    ///
    /// `header` is a [`HeaderName`] or anything that converts into one (a
    /// `&str` such as `"x-api-key"`); a name that is not a valid header
    /// name fails [`build`](crate::PaceBuilder::build) instead of never
    /// matching.
    ///
    /// The value is not used as the key itself: the key is
    /// `header#<64-bit FNV-1a of the value, in hex>`, so a credential does not
    /// appear in events, logs or (with a shared limiter) Redis key names,
    /// while every process still computes the same key for the same value.
    pub fn per_header<H>(name: impl Into<String>, header: H) -> Self
    where
        H: TryInto<HeaderName>,
        H::Error: fmt::Display,
    {
        match header.try_into() {
            Ok(header) => Scope::with_rule(name.into(), KeyRule::Header(header)),
            Err(e) => Scope {
                invalid: Some(format!("not a header name: {e}")),
                ..Scope::keyed(name, |_| None)
            },
        }
    }

    /// Rename the scope (the name [`key_status`](crate::Pacer::key_status)
    /// and events know it by): two scopes of one kind, such as a host
    /// scope of requests and one of tokens, each by a name of its own.
    ///
    /// ```
    /// use reqwest_pace::{headers::Dimension, Pacer, Scope};
    ///
    /// let pacer = Pacer::builder()
    ///     .scope(Scope::per_host().named("tokens").dimension(Dimension::Tokens))
    ///     .build()?;
    /// assert_eq!(pacer.key_status("tokens", "https://api.example.com:443"), None);
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Arc::from(name.into());
        self
    }

    /// A cap: the scope never goes faster than this. A scope with a rate
    /// does not learn from responses unless [`adaptive(true)`](Self::adaptive)
    /// is asked for (then the rate is a ceiling on what it learns). Without
    /// a rate the scope starts permissively and learns.
    pub fn rate(mut self, rate: RequestRate) -> Self {
        self.rate = Some(rate);
        self
    }

    /// The burst allowed (bucket capacity). Defaults to one second of the
    /// configured rate, at least 1.
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst.max(1));
        self
    }

    /// What this scope's buckets count (requests by default; `Tokens` for a
    /// token-metered API). A request spends its [`Cost`](super::Cost) in
    /// this dimension; server limits of this dimension adjust the bucket.
    ///
    /// Scopes of several dimensions learn from the same responses, each
    /// its own: a host scope of requests and one of tokens (named apart
    /// with [`named`](Self::named)) against an API that states both
    /// (OpenAI's `x-ratelimit-*-requests` and `-tokens`, Anthropic's
    /// `anthropic-ratelimit-*`), and a call waits for both. A learning
    /// scope of another dimension than requests reads its server's limits
    /// as the refilling buckets those APIs document, and holds the
    /// heaviest call in use, so that a call of 1 200 tokens is one
    /// acquisition, not 1 200. Its call fails at once with
    /// [`Error::WeightExceedsCapacity`] when it weighs more than the
    /// server's stated `limit`, which no wait would ever admit.
    ///
    /// ```
    /// use reqwest_pace::{headers::Dimension, Cost, Pacer, Scope};
    ///
    /// // Requests per host (the default host scope), and tokens per host.
    /// let pacer = Pacer::builder()
    ///     .scope(Scope::per_host().named("tokens").dimension(Dimension::Tokens))
    ///     .build()?;
    /// let call = Cost::default().with(Dimension::Tokens, 1_200);
    /// # let _ = (pacer, call);
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn dimension(mut self, dimension: Dimension) -> Self {
        self.dimension = dimension;
        self
    }

    /// Whether responses adjust this scope's buckets.
    ///
    /// By default a scope learns unless it is a cap: [`global`](Self::global)
    /// scopes and scopes with a [`rate`](Self::rate) do not. Of the scopes a
    /// request belongs to that learn, only the narrowest of each
    /// [`dimension`](Self::dimension) the response describes is taught (of
    /// equally narrow ones, the last added): a
    /// per-credential scope ([`per_header`](Self::per_header),
    /// [`keyed`](Self::keyed)) before the host scope, the host scope before
    /// a global one. A server's limit describes one partition (a token, a
    /// client address), so what one key's responses say must not cap every
    /// other key that shares a wider bucket.
    pub fn adaptive(mut self, adaptive: bool) -> Self {
        self.adaptive = Some(adaptive);
        self
    }

    /// Whether the server's waits (`Retry-After` on a throttled response)
    /// block this scope's key: every learning scope, and a capped scope
    /// narrower than global unless `adaptive(false)` was asked for.
    pub(crate) fn heeds_server(&self) -> bool {
        self.learns() || (self.adaptive.is_none() && self.breadth != Breadth::Global)
    }

    /// Whether responses adjust this scope, by the rule in
    /// [`adaptive`](Self::adaptive).
    pub(crate) fn learns(&self) -> bool {
        self.adaptive
            .unwrap_or(self.breadth != Breadth::Global && self.rate.is_none())
    }

    /// Whether a key's first request goes alone, so that the others wait
    /// for its response headers before they burst (default: yes for
    /// adaptive scopes). Turning it off lets the first burst go at once.
    pub fn probe_first(mut self, probe: bool) -> Self {
        self.probe = probe;
        self
    }

    /// The share (0 to 1] of a learned rate that is used (default 0.97).
    ///
    /// A moving window (a sliding log or counter whose readings have shown
    /// its length for as long as it is) that one process spends is paced
    /// from an upper bound on that length, clear of its edge already: at
    /// its whole rate by default, and at `headroom / 0.97` of it where a
    /// lower headroom is set. Shared with other processes, it is paced at
    /// `headroom`.
    pub fn headroom(mut self, headroom: f64) -> Self {
        self.headroom = headroom;
        self
    }

    /// Make each key's limiter with `factory` instead of a local token
    /// bucket: a sliding window, or a Redis-shared limiter so that a whole
    /// fleet shares one budget per key.
    pub fn limiter(
        mut self,
        factory: impl Fn(&str) -> Result<Arc<dyn Limiter>, Error> + Send + Sync + 'static,
    ) -> Self {
        self.factory = Some(Arc::new(factory));
        self
    }

    /// Keep at most this many keys (default 100 000); see [`KeyedLimiter`].
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// Drop a key's state after it has been idle this long (default 60 s,
    /// as [`KeyedLimiter`]'s). What it learned outlives it: see
    /// [`remember_for`](Self::remember_for).
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// How long what a key learned (its rate, its burst) is kept after its
    /// state is dropped (default one hour; zero keeps nothing): a key used
    /// again within it starts at the learned pace, without a probe, instead
    /// of learning from scratch. At most [`max_keys`](Self::max_keys) keys
    /// are remembered, 32 bytes each. Only a scope's own token buckets
    /// remember here; a [`limiter`](Self::limiter) of the caller's keeps
    /// its state where it lives: a Redis limiter keeps a learned rate for
    /// its backend's learned TTL (an hour by default, see
    /// `RedisBackend::with_learned_ttl`), and a key made again there goes
    /// on from the rate the fleet learned.
    pub fn remember_for(mut self, keep: Duration) -> Self {
        self.remember_for = keep;
        self
    }

    /// At most `max` requests of one key in flight at once (default: no
    /// cap): a per-host rate of 2/s still lets 16 tasks hold 16
    /// connections open to one slow host; with `max_in_flight(2)` two do,
    /// and the others queue.
    ///
    /// **What it covers.** A request takes one of its key's `max` permits
    /// before anything else on the key (before the wait for the key's first
    /// response and for its bucket) and gives it back as soon as its
    /// response headers are in and learned from, or its attempt fails, or
    /// its call is dropped (cancelled) or fails before it is sent. The
    /// permit does not cover reading the response body, which the caller
    /// does after the call returns, nor a retry's sleep: each retry takes a
    /// permit again, behind the requests already queued.
    ///
    /// **Guarantees.** The queue is fair: permits go in the order of the
    /// key's queue, which is the order requests asked for them among calls
    /// of one [`Priority`](crate::Priority) class (see its guarantees for
    /// how classes are ordered), and a call dropped while it waits leaves
    /// the queue without taking a permit. A request in several scopes with caps takes them in the
    /// order the scopes were added (the host scope first). A call's
    /// [`time_limit`](crate::PaceBuilder::time_limit) bounds the wait for a
    /// permit, as it bounds every wait. A key with a request in flight is
    /// never dropped as idle, so the cap holds however many keys come and
    /// go.
    ///
    /// The cap is generic: a crawler's politeness per host (Scrapy's
    /// `CONCURRENT_REQUESTS_PER_DOMAIN` is 8; 1 to 4 is kinder to small
    /// sites), or an SDK's limit on concurrent requests per credential.
    /// [`key_status`](crate::Pacer::key_status) reports a key's cap and
    /// how many requests hold a permit. Zero fails the build.
    ///
    /// **Learned.** A learning scope of requests (see
    /// [`adaptive`](Self::adaptive)) needs no cap set to keep under its
    /// server's: a refusal that says the limit is concurrency, not rate (a
    /// 429 naming no wait, with every limit it states holding room for the
    /// call, while other calls of the key are in flight; a 503 is overload,
    /// read by the rate model) caps the key at the calls it had in flight
    /// less the refused one, no lower than half of what was in flight at
    /// the first refusal of a round (at least 1), and is not read as a rate
    /// refusal (the rate is not cut). A call whose last permit was taken
    /// before the cap went down takes it again before it is sent, so the
    /// cap holds from the next send on (a permit of an earlier scope goes
    /// with that one send: taking it again while holding a later one could
    /// make two calls wait for each other). Below the most calls in flight
    /// the server was seen to admit, the cap climbs one call per cap's
    /// worth of calls answered at it (a cap an outage of 429s cut is back
    /// in seconds); it goes no higher, so that after its first concurrency
    /// refusal the key never has more calls in flight than the server was
    /// seen to admit ([`probe_cap`](Self::probe_cap) trades that for
    /// finding a cap that grew). The permit covers a call until its response's
    /// headers, not its body: against a server that counts a streamed
    /// response until its end, the cap learned is below its own. A
    /// cap set here is lowered so, never raised above what was set.
    ///
    /// ```
    /// use reqwest_pace::{Pacer, Scope};
    ///
    /// let pacer = Pacer::builder()
    ///     .host_scope(Scope::per_host().max_in_flight(2))
    ///     .build()?;
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.max_in_flight = Some(max);
        self
    }

    /// Whether a learned cap on calls in flight (see
    /// [`max_in_flight`](Self::max_in_flight)) is probed one call above the
    /// most the server was seen to admit (default: no).
    ///
    /// Off, a learned cap climbs back after an episode of refusals no
    /// higher than what the server admitted: from the first concurrency
    /// refusal on, the key keeps under the server's cap, and a server whose
    /// cap grows later (a plan upgraded mid-run) is not found until the
    /// key is dropped ([`idle_timeout`](Self::idle_timeout)) or cleared
    /// ([`clear_key`](crate::Pacer::clear_key)). On, the cap is probed one
    /// call higher after 256 calls answered at it, a run that doubles (up
    /// to 65 536) each time a probe is refused: a grown cap is found again,
    /// at one refused call, and one call above the server's cap, per probe.
    ///
    /// ```
    /// use reqwest_pace::{Pacer, Scope};
    ///
    /// // A cap learned from the server's refusals, probed now and then
    /// // in case the server's grew.
    /// let pacer = Pacer::builder()
    ///     .host_scope(Scope::per_host().probe_cap(true))
    ///     .build()?;
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn probe_cap(mut self, probe: bool) -> Self {
        self.probe_cap = probe;
        self
    }

    /// Keep each key's cap on calls in flight for a whole fleet, in Redis
    /// (feature `redis`), in place of this process's own: `factory` makes
    /// the key's [`RedisInFlight`](crate::redis::RedisInFlight) (usually
    /// `backend.in_flight(key)`).
    ///
    /// Every process's calls of the key then hold a slot there, taken
    /// after the key's bucket grants the call and given back when its
    /// response is read. Within the process, the calls granted ask for a
    /// slot one at a time by [`Priority`](crate::Priority), as they waited
    /// for the bucket: a call of a higher class goes before the ones of
    /// lower classes granted earlier, and the one asking gives its turn up
    /// to it. The cap is [`max_in_flight`](Self::max_in_flight)
    /// for the fleet where one is set (each process's own cap is not
    /// kept), and, in a learning scope, lowered by the concurrency
    /// refusals any process reads, with the arithmetic of a single
    /// process's learned cap on the fleet's count: from the first
    /// refusal on, the fleet keeps under the server's cap. It is not
    /// probed above what the fleet was seen to admit
    /// ([`probe_cap`](Self::probe_cap) does not apply); what was learned
    /// lasts the backend's learned TTL. [`clear_key`](crate::Pacer::clear_key)
    /// does not forget it (it is the fleet's).
    ///
    /// ```no_run
    /// use reqwest_pace::redis::RedisBackend;
    /// use reqwest_pace::{ThrottledClient, Scope};
    ///
    /// # async fn run() -> Result<(), reqwest_pace::Error> {
    /// let backend = RedisBackend::connect("redis://127.0.0.1:6380/").await?;
    /// let client = ThrottledClient::builder(reqwest::Client::new())
    ///     .host_scope(Scope::per_host().shared_in_flight(move |key| backend.in_flight(key)))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "redis")]
    pub fn shared_in_flight(
        mut self,
        factory: impl Fn(&str) -> Result<crate::redis::RedisInFlight, Error> + Send + Sync + 'static,
    ) -> Self {
        self.shared_in_flight = Some(Arc::new(move |key, max| {
            let mut in_flight = factory(key)?;
            if let Some(max) = max {
                in_flight = in_flight.with_max_in_flight(max)?;
            }
            Ok(Arc::new(in_flight) as Arc<dyn SharedInFlight>)
        }));
        self
    }

    /// A circuit breaker per key (default: none): after
    /// [`failures`](CircuitBreaker::failures) consecutive failures of a
    /// key's sends (no connection, a timeout, a 5xx other than 503), its
    /// calls fail at once with [`Error::CircuitOpen`] for a cool-down;
    /// then exactly one call goes as a probe, and its success closes the
    /// breaker while its failure opens it again for twice as long (up to
    /// [`max_cool_down`](CircuitBreaker::max_cool_down)). A 429 or a 503 is
    /// a server asking to slow down, which the key's pacing already does:
    /// it is no failure, and like any answer it sets the count back to
    /// zero. A retry is a send like any other: it goes while the breaker
    /// is closed and fails the call once it is open.
    ///
    /// **Why it is off by default.** A breaker fails calls a caller may
    /// want answered, and how many failures mean "down" depends on how
    /// the caller's traffic spreads over keys; the retry budget already
    /// keeps a failing host's load to a share of the regular traffic. A
    /// crawler, which has other hosts to visit meanwhile, turns it on:
    /// [`CircuitBreaker::default`] is tuned for that (5 failures, a 5 s
    /// cool-down doubling up to 5 minutes). Put it on a scope whose key is
    /// what fails together, a host ([`per_host`](Self::per_host)); on a
    /// [`global`](Self::global) scope one dead host would stop every call.
    ///
    /// The state is in [`key_status`](crate::Pacer::key_status), each
    /// change is an [`Event::Circuit`](crate::Event::Circuit) (and with
    /// feature `metrics`, counted), and [`clear_key`](crate::Pacer::clear_key)
    /// closes it.
    ///
    /// ```
    /// use reqwest_pace::{CircuitBreaker, Pacer, Scope};
    ///
    /// let pacer = Pacer::builder()
    ///     .host_scope(Scope::per_host().circuit_breaker(CircuitBreaker::default()))
    ///     .build()?;
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Latency-aware politeness per key, for hosts that send no rate-limit
    /// headers (default: none): each key's sends are spaced by a delay that
    /// its responses' latency sets, so that about
    /// [`target_in_flight`](AutoThrottle::target_in_flight) of its
    /// requests are in flight at once, as Scrapy's AutoThrottle does. A
    /// host that slows down under load then gets fewer requests, before it
    /// falls over. The delay only adds to the key's waits: the key never
    /// goes faster than its bucket allows (its configured ceiling, or what
    /// its server's headers taught), nor than a
    /// [`max_in_flight`](Self::max_in_flight) or a robots.txt allows.
    /// Latency is measured from the send to the response headers.
    /// [`key_status`](crate::Pacer::key_status) reports the delay.
    ///
    /// Opt-in: against a server that states its limit the headers are the
    /// better guide, and the delay would only slow it down.
    pub fn auto_throttle(mut self, politeness: AutoThrottle) -> Self {
        self.auto_throttle = Some(politeness);
        self
    }

    /// How much of a head start each [`Priority`](crate::Priority) class
    /// is worth over the class below it in a key's queue (default: 10 s):
    /// a call of class `c` arriving at `t` is ordered as if it had arrived
    /// at `t − c × aging`. So an
    /// [`INTERACTIVE`](crate::Priority::INTERACTIVE) call goes before the
    /// [`BATCH`](crate::Priority::BATCH) calls that have waited less than
    /// `2 × aging`, and no call is overtaken by one that arrives more than
    /// `2 × aging` after it: the bound on how long a low class can be
    /// passed over. Longer favours the high classes over a deeper backlog;
    /// shorter serves the low ones sooner. `Duration::ZERO` turns
    /// priorities off for the scope (every call in arrival order).
    ///
    /// ```
    /// use reqwest_pace::{Pacer, Scope};
    /// use std::time::Duration;
    ///
    /// // A batch call is never passed over by calls arriving more than a
    /// // minute after it.
    /// let pacer = Pacer::builder()
    ///     .host_scope(Scope::per_host().aging(Duration::from_secs(30)))
    ///     .build()?;
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn aging(mut self, aging: Duration) -> Self {
        self.aging = aging;
        self
    }

    pub(crate) fn dimension_ref(&self) -> &Dimension {
        &self.dimension
    }

    /// Validate and build the scope's keyed state.
    pub(crate) fn build(self) -> Result<BuiltScope, Error> {
        if let Some(invalid) = &self.invalid {
            return Err(Error::config(format!("scope {:?}: {invalid}", self.name)));
        }
        if !(self.headroom > 0.0 && self.headroom <= 1.0) {
            return Err(Error::config(format!(
                "scope {:?}: headroom must be in (0, 1], not {}",
                self.name, self.headroom
            )));
        }
        if let Some(max) = self.max_in_flight {
            if max == 0 || max > tokio::sync::Semaphore::MAX_PERMITS {
                return Err(Error::config(format!(
                    "scope {:?}: max_in_flight must be from 1 to {}, not {max}",
                    self.name,
                    tokio::sync::Semaphore::MAX_PERMITS
                )));
            }
        }
        if let Some(politeness) = &self.auto_throttle {
            politeness
                .validate()
                .map_err(|e| Error::config(format!("scope {:?}: {e}", self.name)))?;
        }
        let capacity = match (self.rate, self.burst) {
            (_, Some(b)) => b,
            (Some(r), None) => {
                let per_second = r.per_second_f64().ceil();
                if per_second >= 1.0 && per_second.is_finite() {
                    (per_second as u64).max(1)
                } else {
                    1
                }
            }
            (None, None) => OPEN_CAPACITY,
        };
        let rate = match self.rate {
            Some(r) => r,
            None => RequestRate::per_second(OPEN_RATE_PER_SECOND)?,
        };
        // Fail now, not on the first request.
        TokenBucket::new(rate, capacity)?;
        let config = Arc::new(self);
        let template = Arc::clone(&config);
        let memory = Arc::new(Memory::new(config.remember_for, config.max_keys));
        let recall = Arc::clone(&memory);
        let keyed = KeyedLimiter::new(move |key: &String| {
            let learned = template.factory.is_none().then(|| recall.recall(key));
            KeyState::new(&template, key, (rate, capacity), learned.flatten())
        })
        .with_max_keys(config.max_keys)
        .with_idle_timeout(config.idle_timeout);
        Ok(BuiltScope {
            config,
            keyed,
            buckets: RwLock::new(Buckets::default()),
            routes_elsewhere: AtomicBool::new(false),
            memory,
        })
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("name", &self.name)
            .field("rate", &self.rate)
            .field("burst", &self.burst)
            .field("dimension", &self.dimension)
            .field("adaptive", &self.adaptive)
            .field("probe", &self.probe)
            .field("custom_limiter", &self.factory.is_some())
            .field("max_in_flight", &self.max_in_flight)
            .field("shared_in_flight", &self.shared_in_flight.is_some())
            .field("circuit_breaker", &self.breaker)
            .field("auto_throttle", &self.auto_throttle)
            .field("aging", &self.aging)
            .finish_non_exhaustive()
    }
}

pub(crate) struct BuiltScope {
    pub(crate) config: Arc<Scope>,
    pub(crate) keyed: KeyedLimiter<String, KeyState>,
    /// Which server bucket (GitHub's resource, Discord's bucket) each route
    /// of each key was last counted in. Read by every call, written only
    /// by a response that names a bucket: behind a read-write lock, looked
    /// up by borrowed key and route.
    buckets: RwLock<Buckets>,
    /// Whether some key has a route counted in a bucket of its own: until
    /// one has (most servers name none, or one for everything), a call
    /// does not look at `buckets`.
    routes_elsewhere: AtomicBool,
    /// What the scope's keys learned, kept after their state is dropped.
    pub(crate) memory: Arc<Memory>,
}

/// The most routes remembered per scope; past it the memory starts afresh
/// (each route's next response names its bucket again).
const MAX_ROUTES: usize = 10_000;

/// A request's route, as far as server buckets go: method and path.
pub(crate) fn route(request: &Request) -> String {
    route_of(request.method(), request.url())
}

/// The route of a request of `method` to `url`.
pub(crate) fn route_of(method: &reqwest::Method, url: &reqwest::Url) -> String {
    format!("{} {}", method, url.path())
}

/// The server buckets of a scope's keys: per key, the bucket its first
/// response named (its default, which the key itself paces) and the
/// routes counted in another.
#[derive(Default)]
struct Buckets {
    keys: HashMap<String, KeyBuckets>,
    /// Routes remembered across all keys (a key's default counting as
    /// one), bounded by [`MAX_ROUTES`].
    routes: usize,
    /// Of those, the routes counted in another bucket than their key's
    /// default.
    elsewhere: usize,
}

#[derive(Default)]
struct KeyBuckets {
    default: Option<String>,
    routes: HashMap<String, String>,
}

impl BuiltScope {
    /// The request's key in this scope (`None`: not in the scope), written
    /// into `buffer` where the scope's rule is the crate's own.
    pub(crate) fn key<'b>(
        &self,
        request: &Request,
        buffer: &'b mut String,
    ) -> Option<Cow<'b, str>> {
        self.config.key.key(request, buffer)
    }

    /// The server bucket the request's route on `key` is counted in, when
    /// it is not the key's default bucket. Takes no lock until some key
    /// has a route in a bucket of its own, and allocates nothing unless
    /// this one has.
    pub(crate) fn bucket(&self, key: &str, request: &Request) -> Option<String> {
        if !self.routes_elsewhere.load(Ordering::Acquire) {
            return None;
        }
        let buckets = crate::sync::read(&self.buckets);
        let routes = &buckets.keys.get(key)?.routes;
        if routes.is_empty() {
            return None;
        }
        routes.get(&route(request)).cloned()
    }

    /// Remember that `route` of `key` is counted in `bucket`. The first
    /// bucket a key's responses name is its default, paced by the key
    /// itself; only routes counted in another bucket get a key of their own
    /// (`key~bucket`), so a server that names one bucket for everything
    /// (GitHub's `core`) costs nothing.
    pub(crate) fn remember_bucket(&self, key: &str, route: &str, bucket: &str) {
        {
            // Every response of a server that names its bucket names it
            // again: most change nothing, which a read lock sees.
            let buckets = crate::sync::read(&self.buckets);
            let known = buckets.keys.get(key).is_some_and(|k| {
                k.default.as_deref() == Some(bucket) && !k.routes.contains_key(route)
            });
            if known && buckets.routes < MAX_ROUTES {
                return;
            }
        }
        let mut buckets = crate::sync::write(&self.buckets);
        if buckets.routes >= MAX_ROUTES {
            *buckets = Buckets::default();
        }
        let Buckets {
            keys,
            routes,
            elsewhere,
        } = &mut *buckets;
        let entry = keys.entry(key.to_owned()).or_default();
        if entry.default.is_none() {
            *routes += 1;
        }
        let default = entry.default.get_or_insert_with(|| bucket.to_owned());
        if default == bucket {
            if entry.routes.remove(route).is_some() {
                *routes -= 1;
                *elsewhere -= 1;
            }
        } else if entry
            .routes
            .insert(route.to_owned(), bucket.to_owned())
            .is_none()
        {
            *routes += 1;
            *elsewhere += 1;
        }
        self.routes_elsewhere
            .store(buckets.elsewhere > 0, Ordering::Release);
    }

    /// Whether a request of `route` paced in `paced_in` (`None`: the key's
    /// default bucket) was counted in `named`.
    pub(crate) fn paced_in(&self, key: &str, paced_in: Option<&str>, named: &str) -> bool {
        match paced_in {
            Some(bucket) => bucket == named,
            None => {
                let buckets = crate::sync::read(&self.buckets);
                buckets
                    .keys
                    .get(key)
                    .and_then(|k| k.default.as_deref())
                    .is_some_and(|default| default == named)
            }
        }
    }

    pub(crate) fn adaptive(&self) -> bool {
        self.config.learns()
    }

    pub(crate) fn breadth(&self) -> Breadth {
        self.config.breadth
    }

    pub(crate) fn heeds_server(&self) -> bool {
        self.config.heeds_server()
    }

    /// The configured rate, a ceiling on what the scope learns.
    pub(crate) fn ceiling(&self) -> Option<RequestRate> {
        self.config.rate
    }

    /// The configured share of a learned rate that is used.
    pub(crate) fn headroom(&self) -> f64 {
        self.config.headroom
    }

    /// Whether the bucket's capacity comes from the server rather than the
    /// configuration.
    pub(crate) fn learns_burst(&self) -> bool {
        self.adaptive() && self.config.burst.is_none()
    }

    pub(crate) fn probes(&self) -> bool {
        self.adaptive() && self.config.probe
    }
}

/// A rate of one send per `delay` (no delay: one a nanosecond, as good as
/// none; never fails below 584 years).
fn spacing(delay: Duration) -> Result<RequestRate, Error> {
    let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX).max(1);
    RequestRate::every(Duration::from_nanos(nanos))
}

/// One key's limiter and what has been learned about it.
pub(crate) struct KeyState {
    /// Shared with every event of the key.
    pub(crate) key: Arc<str>,
    pub(crate) limiter: Result<Arc<dyn Limiter>, String>,
    /// The key's own token bucket (the same as `limiter`), unless its
    /// scope makes limiters of the caller's.
    pub(crate) local: Option<Arc<TokenBucket>>,
    pub(crate) adapt: Mutex<Adaptive>,
    /// Held by a key's first request until its response is in.
    pub(crate) probe: tokio::sync::Mutex<()>,
    pub(crate) seen_response: AtomicBool,
    /// The latest wait a server asked of this key, and what asked for it
    /// (its limiter holds the block itself). The wait step reads it: a
    /// call does not sit through a block longer than the retry cap.
    server_block: Mutex<Option<ServerBlock>>,
    /// Whether `server_block` may hold a block: a key no server held (most
    /// keys, most of the time) is read without its lock.
    maybe_blocked: AtomicBool,
    /// Woken when `server_block` changes, so that calls already waiting on
    /// the limiter look at it again.
    pub(crate) block_changed: tokio::sync::Notify,
    /// For a limiter of the caller's (a shared one): this process's calls
    /// book a turn on it one at a time, the others waiting here, where
    /// what the next response says still reaches them (a turn booked in a
    /// shared bucket is granted, whatever the server says meanwhile).
    pub(crate) booking: Option<tokio::sync::Semaphore>,
    /// The key's permits of calls in flight, capped by
    /// [`Scope::max_in_flight`] or by what concurrency refusals taught,
    /// for a scope that has one or learns, and keeps no cap for the fleet.
    pub(crate) in_flight: Option<Arc<InFlight>>,
    /// The key's cap on calls in flight kept for the fleet, in place of
    /// `in_flight` (`Scope::shared_in_flight`).
    pub(crate) shared_in_flight: Option<Box<FleetCap>>,
    /// The key's calls by priority, in front of everything else a call
    /// waits for on the key.
    pub(crate) turns: Turns,
    /// The key's circuit breaker, when its scope has one.
    pub(crate) breaker: Option<Mutex<Breaker>>,
    /// The key's latency-aware delay, and the bucket of one that spaces
    /// its sends by it, when its scope has one.
    pub(crate) politeness: Option<(Mutex<Politeness>, Arc<TokenBucket>)>,
    /// The rate and capacity the key's bucket was made with.
    made_with: (RequestRate, u64),
    /// What the key's calls spend in its dimension, and what its server
    /// allows of it (see [`Weights`]).
    pub(crate) weights: Mutex<Weights>,
    /// Whether `weights` has seen a call of at least one unit: a call of
    /// one (most calls) then changes nothing there, nor in the key's
    /// bucket (see `Pacer::fit_learned_capacity`), and takes no lock.
    pub(crate) holds_a_unit: AtomicBool,
}

/// What one key's calls spend in its scope's dimension, kept so that a
/// learned bucket holds what its calls weigh and follows what its server
/// counts.
#[derive(Debug, Default)]
pub(crate) struct Weights {
    /// The heaviest call seen: a learned bucket's capacity is at least
    /// this, so that a call of any weight in use is one acquisition.
    pub(crate) heaviest: u64,
    /// The largest `limit` the server stated for the dimension (of each
    /// response's least): no call heavier than it can ever be admitted.
    pub(crate) server_limit: Option<u64>,
    /// The key's calls sent and not yet answered: send number and weight,
    /// in the order sent.
    in_flight: std::collections::VecDeque<(u64, u64)>,
    /// Whether absurd usage was reported for the key (warned once).
    pub(crate) warned_usage: bool,
    /// Per limit the server states in the dimension: what its readings
    /// show (see [`Weights::read`]).
    refills: Vec<Refill>,
    /// The rate the readings set on the key's bucket, per second, once
    /// there is one: it replaces the requests-counting model's.
    pub(crate) applied: Option<f64>,
    /// The latest call whose answer the bucket followed (see
    /// `follow_headers`): an older call's answer, come back after it,
    /// states an older `remaining`.
    pub(crate) followed: u64,
}

/// One limit of a dimension other than requests, read as a refilling
/// bucket.
#[derive(Debug)]
struct Refill {
    name: String,
    /// The quota: the bucket's capacity.
    limit: u64,
    /// The refill is at least this, per second.
    lower: f64,
    /// What the latest reading said remains.
    remaining: u64,
    /// While the readings are within the reset's precision (the bucket is
    /// nearly full): the probing pace, per second.
    probe: Option<f64>,
}

impl Refill {
    fn new(name: &str, limit: u64) -> Refill {
        Refill {
            name: name.to_owned(),
            limit,
            lower: 0.0,
            remaining: limit,
            probe: None,
        }
    }
}

/// The most limits of one dimension a key reads (a server naming a new one
/// on every response must not grow it).
const MAX_LIMITS_READ: usize = 8;

/// Calls unanswered beyond this many are forgotten, oldest first (their
/// caller gave up without telling).
const MAX_WEIGHTS_IN_FLIGHT: usize = 4_096;

impl Weights {
    /// A call of `weight` was sent as `seq`.
    pub(crate) fn sent(&mut self, seq: u64, weight: u64) {
        if self.in_flight.len() >= MAX_WEIGHTS_IN_FLIGHT {
            self.in_flight.pop_front();
        }
        self.in_flight.push_back((seq, weight));
    }

    /// Read a limit of a dimension other than requests as the refilling
    /// bucket the LLM APIs document (Anthropic's and OpenAI's `reset` is
    /// the time until the bucket is full again): `limit − remaining` over
    /// `reset` is its refill, less when `reset` was rounded up, so each
    /// reading is a lower bound and the key keeps the highest (afresh when
    /// the quota changes). `precision` is how finely `reset` is known (a
    /// whole second for Anthropic's): a reading within it says only that
    /// the bucket is nearly full, and the pace then doubles on each such
    /// reading (up to the quota per precision), until the deficit
    /// outgrows the precision and the bound is within half of the truth
    /// (see [`Weights::pace`]). A fixed window of
    /// tokens read so would be paced by the pace of its window's end (a
    /// known limit of this reading). A `refused` reading replaces the
    /// bound instead of raising it, and ends the probe: the server refused
    /// the pace the bounds set, so an earlier reading that set it was
    /// high (a reset rounded down, a window's end).
    pub(crate) fn read(
        &mut self,
        name: &str,
        (limit, remaining): (u64, u64),
        reset: Duration,
        precision: Duration,
        refused: bool,
    ) {
        let deficit = limit.saturating_sub(remaining);
        if deficit == 0 || reset.is_zero() || reset >= crate::headers::MAX_WAIT {
            return;
        }
        let lower = deficit as f64 / reset.as_secs_f64();
        let full = self.refills.len() >= MAX_LIMITS_READ;
        let index = match self.refills.iter().position(|r| r.name == name) {
            Some(i) if self.refills[i].limit == limit => i,
            Some(i) => {
                self.refills[i] = Refill::new(name, limit);
                i
            }
            None if !full => {
                self.refills.push(Refill::new(name, limit));
                self.refills.len() - 1
            }
            None => return,
        };
        let r = &mut self.refills[index];
        r.remaining = remaining;
        if refused {
            r.lower = lower;
            r.probe = None;
            return;
        }
        r.lower = r.lower.max(lower);
        // At most the quota per precision: the readings cannot tell a
        // faster refill apart, and a probe that outran it could spend the
        // whole bucket before the next reading.
        let most = limit as f64 / precision.as_secs_f64().max(1e-3);
        r.probe = (reset <= precision)
            .then(|| (r.probe.unwrap_or(r.lower).max(r.lower) * 2.0).min(most.max(r.lower)));
    }

    /// The pace of the key's calls, per second, under the least of its
    /// limits read so far: each limit's refill (at least its lower bound)
    /// times `headroom`, plus what it holds beyond two of the heaviest
    /// calls spread over the time an empty bucket takes to fill (a bucket
    /// can spend what it holds at any pace on top of its refill, so the
    /// first minute does not leave it full; the bonus shrinks as it
    /// empties), or its doubling probe while it is nearly full.
    ///
    /// With `spend` above 1 what a bucket holds is spread over `1 / spend`
    /// of that time instead (a shared limiter's pace, see
    /// `Tuning::shared_spend`).
    pub(crate) fn pace(&self, headroom: f64, spend: f64) -> Option<f64> {
        let reserve = self.heaviest.saturating_mul(2);
        self.refills
            .iter()
            .map(|r| {
                let spare =
                    spend * r.remaining.saturating_sub(reserve) as f64 / r.limit.max(1) as f64;
                let paced = r.lower * (headroom + spare);
                r.probe.map_or(paced, |p| p.max(paced))
            })
            .reduce(f64::min)
    }

    /// The call `seq` was answered, or went nowhere.
    pub(crate) fn answered(&mut self, seq: u64) {
        self.in_flight.retain(|&(s, _)| s != seq);
    }

    /// What the key's calls sent after `seq` and still unanswered weigh:
    /// what a server's `remaining` in answer to `seq` may not count yet.
    pub(crate) fn after(&self, seq: u64) -> u64 {
        self.in_flight
            .iter()
            .filter(|&&(s, _)| s > seq)
            .fold(0, |sum, &(_, w)| sum.saturating_add(w))
    }
}

impl KeyState {
    /// The state of `key`, made with the scope's `(rate, capacity)`, or
    /// resumed from what the key `learned` before its last state was
    /// dropped: its bucket then starts at the learned rate and capacity,
    /// full, and no probe goes first.
    fn new(
        config: &Scope,
        key: &str,
        made_with: (RequestRate, u64),
        learned: Option<Learned>,
    ) -> Self {
        let (rate, capacity) = learned
            .and_then(|l| {
                Some((
                    RequestRate::from_per_second_f64(l.per_second).ok()?,
                    l.capacity,
                ))
            })
            .unwrap_or(made_with);
        let (limiter, local) = match &config.factory {
            Some(factory) => (factory(key).map_err(|e| e.to_string()), None),
            None => {
                let bucket = Arc::new(TokenBucket::from_algorithm(crate::limiter::Gcra::new(
                    rate, capacity, capacity,
                )));
                let dynamic: Arc<dyn Limiter> = bucket.clone();
                (Ok(dynamic), Some(bucket))
            }
        };
        let mut adapt = Adaptive::new(
            config.dimension.clone(),
            config.rate,
            config.burst,
            config.headroom,
        );
        if let Some(learned) = learned {
            adapt.resume(learned);
        }
        let booking = local
            .is_none()
            .then(|| tokio::sync::Semaphore::new(BOOKINGS_PER_PROCESS));
        KeyState {
            key: Arc::from(key),
            limiter,
            local,
            adapt: Mutex::new(adapt),
            probe: tokio::sync::Mutex::new(()),
            seen_response: AtomicBool::new(learned.is_some()),
            server_block: Mutex::new(None),
            maybe_blocked: AtomicBool::new(false),
            block_changed: tokio::sync::Notify::new(),
            booking,
            // A learning scope of requests learns a cap on its calls in
            // flight; one of tokens (or another unit) counts what calls
            // weigh, not how many are out, and a second learned cap on
            // the same calls would be an earlier member's permit the
            // settling before a send cannot take again (see
            // `settle_permits`).
            in_flight: (config.shared_in_flight.is_none()
                && (config.max_in_flight.is_some()
                    || (config.learns() && *config.dimension_ref() == Dimension::Requests)))
                .then(|| Arc::new(InFlight::new(config.max_in_flight, config.probe_cap))),
            shared_in_flight: config.shared_in_flight.as_ref().map(|make| {
                Box::new(FleetCap {
                    cap: make(key, config.max_in_flight).map_err(|e| e.to_string()),
                    turns: Turns::new(config.aging),
                })
            }),
            turns: Turns::new(config.aging),
            breaker: config.breaker.map(|b| Mutex::new(Breaker::new(b))),
            politeness: config.auto_throttle.and_then(|tuning| {
                let politeness = Politeness::new(tuning);
                let rate = spacing(politeness.delay).ok()?;
                let gate = TokenBucket::from_algorithm(crate::limiter::Gcra::new(rate, 1, 1));
                Some((Mutex::new(politeness), Arc::new(gate)))
            }),
            made_with,
            weights: Mutex::new(Weights::default()),
            holds_a_unit: AtomicBool::new(false),
        }
    }

    /// Forget what was learned and any server block: the key starts again
    /// as it was made. The limiter's own block is lifted by the caller
    /// (it may take a round trip).
    pub(crate) fn reset(&self, config: &Scope) {
        self.set_server_block(None);
        if let (Some(breaker), Some(tuning)) = (&self.breaker, config.breaker) {
            *crate::sync::lock(breaker) = Breaker::new(tuning);
        }
        *self.weights() = Weights::default();
        self.holds_a_unit.store(false, Ordering::Release);
        if let Some(in_flight) = &self.in_flight {
            in_flight.reset();
        }
        *self.adapt() = Adaptive::new(
            config.dimension.clone(),
            config.rate,
            config.burst,
            config.headroom,
        );
        if let Some(bucket) = &self.local {
            let (rate, capacity) = self.made_with;
            bucket.set_rate(rate);
            // Within range: the bucket was made with this capacity.
            let _ = bucket.set_capacity(capacity);
        }
    }

    pub(crate) fn weights(&self) -> std::sync::MutexGuard<'_, Weights> {
        crate::sync::lock(&self.weights)
    }

    /// The rate the key's bucket applies, per second: the bucket reading's
    /// for a key of tokens (see [`Weights::read`]), else the learning's.
    pub(crate) fn applied_rate(&self) -> Option<f64> {
        let read = self.weights().applied;
        read.or_else(|| self.adapt().applied_rate())
    }

    pub(crate) fn adapt(&self) -> std::sync::MutexGuard<'_, Adaptive> {
        crate::sync::lock(&self.adapt)
    }

    /// The server's block in force at `now`, if any.
    pub(crate) fn server_block(&self, now: tokio::time::Instant) -> Option<ServerBlock> {
        if !self.maybe_blocked.load(Ordering::Acquire) {
            return None;
        }
        let mut block = crate::sync::lock(&self.server_block);
        if block.is_some_and(|b| b.until <= now) {
            *block = None;
            self.maybe_blocked.store(false, Ordering::Release);
        }
        *block
    }

    /// Note a wait the server asked for (the later one of two that
    /// overlap), or none, and wake the calls waiting on the key.
    pub(crate) fn set_server_block(&self, block: Option<ServerBlock>) {
        {
            let mut current = crate::sync::lock(&self.server_block);
            match block {
                Some(b) if current.is_some_and(|c| c.until >= b.until) => return,
                _ => *current = block,
            }
            self.maybe_blocked.store(block.is_some(), Ordering::Release);
        }
        self.block_changed.notify_waiters();
    }

    /// Whether a server's block may be in force: `false` for a key no
    /// server held, read without a lock (nor the clock).
    pub(crate) fn may_be_blocked(&self) -> bool {
        self.maybe_blocked.load(Ordering::Acquire)
    }

    pub(crate) fn has_seen_response(&self) -> bool {
        self.seen_response.load(Ordering::Acquire)
    }

    /// The key's breaker, when its scope has one.
    pub(crate) fn breaker(&self) -> Option<std::sync::MutexGuard<'_, Breaker>> {
        self.breaker.as_ref().map(crate::sync::lock)
    }

    /// The state of the key's breaker at `now`, when its scope has one.
    pub(crate) fn circuit(&self, now: tokio::time::Instant) -> Option<CircuitState> {
        self.breaker().map(|b| b.state(now))
    }

    /// The delay between sends that the key's latency sets, when its scope
    /// is [`auto_throttle`](Scope::auto_throttle)d.
    pub(crate) fn politeness_delay(&self) -> Option<Duration> {
        let (politeness, _) = self.politeness.as_ref()?;
        Some(crate::sync::lock(politeness).delay)
    }

    /// A response came `latency` after its send (`ok`: a 2xx or 3xx):
    /// space the key's sends by the delay it sets.
    pub(crate) fn measured(&self, latency: Duration, ok: bool) -> Option<Duration> {
        let (politeness, gate) = self.politeness.as_ref()?;
        let delay = crate::sync::lock(politeness).on_response(latency, ok)?;
        if let Ok(rate) = spacing(delay) {
            gate.set_rate(rate);
        }
        Some(delay)
    }

    /// How many requests hold one of the key's in-flight permits (of the
    /// fleet's, the ones this process holds).
    pub(crate) fn in_flight(&self) -> usize {
        match self.shared_in_flight.as_deref().map(|fleet| &fleet.cap) {
            Some(Ok(shared)) => shared.held(),
            _ => self.in_flight.as_ref().map_or(0, |f| f.held()),
        }
    }

    /// How many calls wait for a turn at the key: for its turn by priority,
    /// and, with a fleet's cap, for its turn to ask for the fleet's slot
    /// (the calls holding either turn aside).
    pub(crate) fn queued(&self) -> usize {
        let at_the_slot = self.shared_in_flight.as_ref();
        self.turns.queued() + at_the_slot.map_or(0, |fleet| fleet.turns.queued())
    }

    /// The key's cap on calls in flight, configured or learned (the
    /// fleet's as last read, where it is kept for the fleet).
    pub(crate) fn max_in_flight(&self) -> Option<usize> {
        match self.shared_in_flight.as_deref().map(|fleet| &fleet.cap) {
            Some(Ok(shared)) => shared.cap(),
            _ => self.in_flight.as_ref().and_then(|f| f.cap()),
        }
    }
}

/// A key's cap on calls in flight kept for a fleet
/// (`Scope::shared_in_flight`).
pub(crate) struct FleetCap {
    /// The fleet's cap, or why it could not be made.
    pub(crate) cap: Result<Arc<dyn SharedInFlight>, String>,
    /// The key's calls granted by its buckets, by priority, in front of
    /// the fleet's slot (a call waits for the slot after the buckets,
    /// where the key's `turns` no longer order it).
    pub(crate) turns: Turns,
}

impl Evictable for KeyState {
    fn is_idle(&self) -> bool {
        // Only a local bucket can say it is back to full; a custom limiter's
        // state lives elsewhere and is kept until the bound. What was learned
        // (a rate) is forgotten with the entry, after the idle timeout: a key
        // that comes back probes and learns again.
        let bucket_idle = self.local.as_ref().is_some_and(|b| b.is_idle());
        let blocked = self.server_block(tokio::time::Instant::now()).is_some();
        let breaker_fresh = self.breaker().is_none_or(|b| b.is_fresh());
        // What the latency taught is dropped with the key, once its gate is
        // full again (as what a bucket learned is).
        let politeness_idle = self.politeness.as_ref().is_none_or(|(_, g)| g.is_idle());
        // A call in the key's queue (between two of its waits) keeps it.
        let unqueued = self.turns.is_idle();
        bucket_idle
            && !blocked
            && self.in_flight() == 0
            && breaker_fresh
            && politeness_idle
            && unqueued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_refilling_limit_is_read_from_its_deficit_over_its_reset() {
        let mut w = Weights {
            heaviest: 200,
            ..Weights::default()
        };
        assert_eq!(w.pace(0.97, 1.0), None);
        // 60 000 a minute: 168 short, full again in 168 ms: 1 000 a second.
        w.read("tokens", (60_000, 59_832), 168 * MS, MS, false);
        // The refill times the headroom, plus what it holds beyond two
        // calls (59 432 of 60 000) spread over a fill.
        let pace = w.pace(0.97, 1.0).unwrap();
        assert!(
            (pace - 1_000.0 * (0.97 + 59_432.0 / 60_000.0)).abs() < 1e-6,
            "{pace}"
        );
        // Spread over a twentieth of a fill (a shared limiter's).
        let pace = w.pace(0.97, 20.0).unwrap();
        assert!(
            (pace - 1_000.0 * (0.97 + 20.0 * 59_432.0 / 60_000.0)).abs() < 1e-6,
            "{pace}"
        );
        // Nearly empty, the refill alone (and a full bucket says nothing).
        w.read("tokens", (60_000, 300), 59_700 * MS, MS, false);
        w.read("tokens", (60_000, 60_000), Duration::ZERO, MS, false);
        assert!((w.pace(0.97, 1.0).unwrap() - 970.0).abs() < 1e-6);
        // A reset rounded up reads less, which the highest reading keeps.
        w.read("tokens", (60_000, 300), 60 * 1_000 * MS, MS, false);
        assert!((w.pace(0.97, 1.0).unwrap() - 970.0).abs() < 1e-6);
        // A new quota starts afresh; the least limit paces.
        w.read("tokens", (30_000, 0), 60 * 1_000 * MS, MS, false);
        assert!((w.pace(1.0, 1.0).unwrap() - 500.0).abs() < 1e-6);
    }

    /// A reading with a reset far too short (1 ms for 1 000 tokens short)
    /// sets a bound of a million a second; the refusal that pace earns
    /// replaces it with its own reading (nothing left, full in a minute:
    /// 1 000 a second) and ends the probe, where the bound only rose.
    #[test]
    fn a_refusal_replaces_a_bound_a_reading_set_too_high() {
        let mut w = Weights::default();
        let ms = Duration::from_millis(1);
        w.read("tokens", (60_000, 59_000), ms, ms, false);
        assert!(w.pace(1.0, 1.0).unwrap() > 1_000_000.0);
        w.read("tokens", (60_000, 0), Duration::from_secs(60), ms, true);
        assert!((w.pace(1.0, 1.0).unwrap() - 1_000.0).abs() < 1e-6);
    }

    #[test]
    fn a_reset_within_its_precision_doubles_the_pace_until_it_is_not() {
        let mut w = Weights::default();
        // Whole seconds: 200 short and full "in 1 s" says only "at least
        // 200 a second".
        let second = Duration::from_secs(1);
        w.read("tokens", (600_000, 599_800), second, second, false);
        // The probe doubles it, above the reading's own 200 × 1.97.
        assert_eq!(w.pace(0.97, 1.0), Some(400.0));
        w.read("tokens", (600_000, 599_800), second, second, false);
        assert_eq!(w.pace(0.97, 1.0), Some(800.0));
        // Never past the quota per precision.
        for _ in 0..20 {
            w.read("tokens", (600_000, 599_800), second, second, false);
        }
        assert_eq!(w.pace(0.97, 1.0), Some(600_000.0));
        // 30 000 short, full in 4 s: at least 7 500 a second, and no probe.
        w.read("tokens", (600_000, 570_000), 4 * second, second, false);
        let pace = w.pace(1.0, 1.0).unwrap();
        assert!(
            (pace - 7_500.0 * (1.0 + 570_000.0 / 600_000.0)).abs() < 1e-6,
            "{pace}"
        );
    }

    #[test]
    fn weights_in_flight_after_a_call_are_what_its_remaining_may_not_count() {
        let mut w = Weights::default();
        w.sent(1, 100);
        w.sent(2, 1_200);
        w.sent(3, 50);
        assert_eq!(w.after(1), 1_250);
        w.answered(2);
        assert_eq!(w.after(1), 50);
        assert_eq!(w.after(3), 0);
    }

    /// The crate's key rules write into one buffer, call after call: each
    /// key is the whole of what its rule writes, never a leftover of a
    /// longer one before it.
    #[test]
    fn keys_written_into_one_buffer_are_each_their_own() {
        let client = reqwest::Client::new();
        let long = client
            .get("https://a-long-host-name.example:8443/x")
            .build()
            .unwrap();
        let short = client.get("http://b.test/").build().unwrap();
        let host = Scope::per_host();
        let mut buffer = String::new();
        for request in [&long, &short, &long] {
            let written = host.key.key(request, &mut buffer).map(Cow::into_owned);
            assert_eq!(written, host_key(request));
        }
        assert_eq!(
            host_key(&short).as_deref(),
            Some("http://b.test:80"),
            "scheme, host and port"
        );
        let global = Scope::global();
        assert_eq!(global.key.of(&short).as_deref(), Some("*"));
        let custom = Scope::keyed("tenant", |_| Some("t-1".to_owned()));
        assert_eq!(custom.key.of(&long).as_deref(), Some("t-1"));
    }

    /// Until a key has a route in a bucket of its own, no call looks at
    /// the routes; once one has, the route is paced there, and a response
    /// naming the key's default again changes nothing.
    #[test]
    fn routes_are_looked_at_once_one_is_counted_elsewhere() {
        let scope = Scope::per_host().build().unwrap();
        let client = reqwest::Client::new();
        let search = client.get("http://h.test/search").build().unwrap();
        let key = "http://h.test:80";
        scope.remember_bucket(key, &route(&search), "core");
        assert!(!scope.routes_elsewhere.load(Ordering::Acquire));
        assert_eq!(scope.bucket(key, &search), None);
        scope.remember_bucket(key, &route(&search), "search");
        assert!(scope.routes_elsewhere.load(Ordering::Acquire));
        assert_eq!(scope.bucket(key, &search).as_deref(), Some("search"));
        assert!(scope.paced_in(key, None, "core"));
        // Counted in the default again: back to no route elsewhere.
        scope.remember_bucket(key, &route(&search), "core");
        assert!(!scope.routes_elsewhere.load(Ordering::Acquire));
        assert_eq!(scope.bucket(key, &search), None);
    }

    /// A block is seen while it lasts and gone after it, whether it ends
    /// by its time or is lifted; a key never blocked reads none.
    #[tokio::test(start_paused = true)]
    async fn a_server_block_is_read_while_it_lasts() {
        let scope = Scope::per_host().build().unwrap();
        let state = scope.keyed.get(&"http://h.test:80".to_owned());
        let now = tokio::time::Instant::now();
        assert!(!state.may_be_blocked());
        assert_eq!(state.server_block(now), None);
        let block = ServerBlock::new(now + Duration::from_secs(2), 429, false);
        state.set_server_block(Some(block));
        assert!(state.may_be_blocked());
        assert_eq!(state.server_block(now), Some(block));
        // An earlier block does not shorten it.
        state.set_server_block(Some(ServerBlock::new(
            now + Duration::from_secs(1),
            429,
            false,
        )));
        assert_eq!(state.server_block(now), Some(block));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(state.server_block(tokio::time::Instant::now()), None);
        assert!(!state.may_be_blocked());
        state.set_server_block(Some(ServerBlock::new(
            tokio::time::Instant::now() + Duration::from_secs(5),
            503,
            true,
        )));
        state.set_server_block(None);
        assert_eq!(state.server_block(tokio::time::Instant::now()), None);
        assert!(!state.may_be_blocked());
    }

    #[test]
    fn header_keys_hide_the_value() {
        // The reference vectors of FNV-1a 64.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let scope = Scope::per_header("token", "authorization");
        let request = reqwest::Client::new()
            .get("http://example.test/")
            .header("authorization", "Bearer s3cret")
            .build()
            .unwrap();
        let key = scope.key.of(&request).unwrap();
        assert!(!key.contains("s3cret"), "{key}");
        assert_eq!(
            key,
            format!("authorization#{:016x}", fnv1a(b"Bearer s3cret"))
        );
        let without = reqwest::Client::new()
            .get("http://example.test/")
            .build()
            .unwrap();
        assert_eq!(scope.key.of(&without), None);
    }

    #[test]
    fn header_names_are_typed_and_an_invalid_one_fails_the_build() {
        // A typed name and a string name make the same key.
        let typed = Scope::per_header("token", http::header::AUTHORIZATION);
        let named = Scope::per_header("token", "Authorization");
        let request = reqwest::Client::new()
            .get("http://example.test/")
            .header("authorization", "t")
            .build()
            .unwrap();
        assert_eq!(typed.key.of(&request), named.key.of(&request));
        assert!(typed.key.of(&request).is_some());
        // A name with a space is no header name: the build says so.
        let invalid = Scope::per_header("token", "x api key");
        match invalid.build() {
            Err(Error::InvalidConfig(message)) => {
                assert!(message.contains("not a header name"), "{message}")
            }
            Err(other) => panic!("unexpected error {other:?}"),
            Ok(_) => panic!("an invalid header name must fail the build"),
        }
    }
}
