//! `reqwest-pace`: client-side throttling and retries for `reqwest`.
//!
//! Every call made through a [`ThrottledClient`] waits for a local token
//! bucket before it is sent; every response's rate-limit signal (`429`,
//! `Retry-After`, `X-RateLimit-*`, the IETF `RateLimit` fields and vendor
//! dialects, read by [`headers`]) re-paces that bucket to what the server
//! allows; failures are retried on a schedule of tokio sleeps ([`retry`]).
//! With feature `redis`, a fleet of processes shares one budget per key
//! ([`redis`]); with feature `testing`, a stateful
//! rate-limited server lets you test your own backoff ([`testing`]).
//! A crawler caps each host's requests in flight
//! ([`Scope::max_in_flight`]), stops sending to a failing one
//! ([`Scope::circuit_breaker`]), spaces a header-less one by its latency
//! ([`Scope::auto_throttle`]) and, with feature `robots`, obeys its
//! robots.txt (`Robots`).
//!
//! The layout follows the data, one way: a request's keys pick its buckets
//! ([`Scope`]), it waits for them ([`limiter`]), it is sent, the response
//! is parsed ([`headers`]), the buckets are adjusted, and the retry policy
//! decides ([`retry`], a pure [`RetryRules::decide`](retry::RetryRules::decide)).
//! One engine, [`Pacer`], runs that loop over any way of sending an
//! attempt: [`ThrottledClient`] is a `Pacer` with a `reqwest::Client`;
//! `PaceMiddleware` (feature `middleware`) and `PaceLayer` (feature
//! `tower`) are a `Pacer` around a `reqwest-middleware` chain or a tower
//! service.
//!
//! ```
//! use reqwest_pace::{RequestRate, ThrottledClient};
//! # use reqwest_pace::testing::RateLimitedServer;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = RateLimitedServer::builder().limit(RequestRate::per_second(1000)?).burst(1000).start().await?;
//! # let url = server.url();
//! let client = ThrottledClient::builder(reqwest::Client::new())
//!     .rate(RequestRate::per_second(10)?) // a ceiling per host; omit it to learn from the server
//!     .burst(1)
//!     .build()?;
//! let start = tokio::time::Instant::now();
//! for _ in 0..3 {
//!     client.get(&url).send().await?;
//! }
//! assert_eq!(start.elapsed(), std::time::Duration::from_millis(200));
//! # Ok(())
//! # }
//! ```
//!
//! Time is tokio's clock throughout, so tests under
//! `#[tokio::test(start_paused = true)]` see exact waits.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod limiter;
mod sync;

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
pub mod headers;
#[cfg(feature = "middleware")]
mod middleware;
#[cfg(feature = "client")]
pub mod retry;
#[cfg(feature = "tower")]
mod tower;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "tower")]
pub use crate::tower::{PaceHttpService, PaceLayer, PaceService};
#[cfg(feature = "metrics")]
pub use client::describe_metrics;
#[cfg(feature = "robots")]
pub use client::Robots;
#[cfg(feature = "client")]
pub use client::{
    host_key, AutoThrottle, Charge, CircuitBreaker, CircuitState, Cost, Event, FromHeaders,
    IntoRequest, KeyStatus, PaceBuilder, PacedRequestBuilder, Pacer, Priority, Reconcile, Scope,
    ThrottledClient, ThrottledClientBuilder, TimeLimit, UsageBody,
};
#[cfg(feature = "client")]
pub use error::LastResponse;
pub use error::{Error, ErrorKind, NotRetriedReason};
pub use limiter::{
    Adjustment, FixedWindowLimiter, KeyedLimiter, Limiter, QueuedLimiter, RequestRate,
    SlidingCounterLimiter, SlidingLogLimiter, TokenBucket,
};
#[cfg(feature = "middleware")]
pub use middleware::PaceMiddleware;

// The README's examples are compiled and run as doc tests, with the
// default features as with every feature: `cargo test` checks the first
// screen's example as a user with default features builds it (the tests'
// dev-dependency turns on `testing`, which the quick start's server needs),
// and the few blocks that need another feature (`robots`, `redis`) are
// behind a hidden `#[cfg(feature = ..)]`, so `cargo test --all-features`
// checks them too.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
