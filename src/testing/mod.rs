//! A stateful, rate-limited HTTP server for tests, demos and benchmarks
//! (feature `testing`).
//!
//! [`RateLimitedServer`] is a real HTTP/1.1 server on a loopback port that
//! keeps a token bucket per client key and answers `429 Too Many Requests`
//! with `Retry-After` and the rate-limit headers of a chosen [`Dialect`].
//! A static mock can only replay canned responses; this one refuses a
//! client exactly when a real limiter would, so a test can check that a
//! client's backoff actually stays under the limit, re-adapts when the
//! limit changes ([`ServerBuilder::change_limit_at`]) and survives
//! [`Fault`]s.
//!
//! The design keeps the decision apart from the I/O: the per-key buckets
//! are the crate's own [`Gcra`](crate::limiter::Gcra) arithmetic driven by
//! the tokio clock, and the headers are pure functions of the bucket's
//! figures and the response's wall-clock instant. The trade-off is that the
//! server shares the runtime of the test that starts it: that is what makes
//! paused-clock tests exact at both ends, and it means a busy client slows
//! the server down just as it slows itself.
//!
//! [`RateLimitedServer::service`] answers in process, as a tower `Service`
//! of reqwest requests, through the same decision and header code as the
//! HTTP handler: a [`PaceLayer`](crate::PaceLayer) around it runs the
//! client's engine against the server with no sockets. [`space`] generates
//! servers from seeds (algorithm, parameters, headers, `Retry-After`
//! precision, counted refusals, status, a front limiter) and measures a
//! client's run on one; [`zoo`] names one per family of real servers.
//! [`llm`] models an LLM API: requests, tokens and calls in flight limited
//! together, in OpenAI's or Anthropic's headers, with a `usage` body.
//!
//! Paused-clock tests: run client and server in one
//! `#[tokio::test(start_paused = true)]` (the default current-thread
//! flavour). Tokio advances a paused clock only when every task is idle,
//! and loopback I/O is delivered by the time `write` returns, so a request
//! in flight does not let the clock jump: times recorded by the server are
//! exactly those of the client's `sleep`s.

mod algorithm;
mod dialect;
mod fault;
mod key;
mod server;
mod state;

pub mod llm;
pub mod space;
pub mod zoo;

pub use algorithm::ServerAlgorithm;
pub use dialect::{Dialect, ResetFormat, RetryAfterPrecision};
pub use fault::{Fault, RetryAfter};
pub use key::ClientKey;
pub use server::{RateLimitedServer, ServerBuilder, ServerService};
pub use state::{Answer, Counts, RequestRecord, ServerStats};
