//! A generated space of rate-limited servers, and a closed-loop workload
//! to run a client against any of them.
//!
//! The [`zoo`](super::zoo) names eight servers; a client tuned on eight
//! points may be right by fitting. A [`ServerSpec`] is one point of the
//! product of what real limiters vary in:
//!
//! - the **algorithm**: fixed window, moving window (sliding log), sliding
//!   window counter, GCRA, token bucket, nginx's leaky bucket;
//! - its **parameters**: a sustained rate of about 2 to 200 per second,
//!   windows of 1 to 60 s, bursts from 1 to the limit;
//! - the **headers**: none at all, `Retry-After` alone, `X-RateLimit-*`
//!   with the reset as delta seconds, epoch seconds, epoch milliseconds, a
//!   fractional epoch or missing and the limit stated as the quota or the
//!   burst, GitHub's, and the IETF drafts;
//! - the **`Retry-After`** precision: rounded up, rounded down (so `0` is
//!   possible), fractional, or absent;
//! - whether **refusals count** against the limit;
//! - the **refusal status**, 429 or 503;
//! - an optional **front limiter** (a proxy or WAF) that refuses with a bare
//!   429 or 503 at a rate somewhat below or above the main one.
//!
//! [`ServerSpec::generate`] draws one from a seed, deterministically (the
//! server's wall clock included), so a failure is reproduced by its seed.
//! [`Workload`] runs a client as `tasks` closed loops for a while and
//! reports [`RunFigures`]: the goodput against the spec's
//! [true sustained limit](ServerSpec::sustained_per_second), the share of
//! responses refused, and the logical requests that failed.
//!
//! The client is any tower service of reqwest requests. With the server's
//! [in-process service](super::RateLimitedServer::service) wrapped in a
//! [`PaceLayer`](crate::PaceLayer), a minute of virtual time costs no
//! sockets at all, which is what makes hundreds of servers per test run
//! affordable:
//!
//! ```
//! use std::time::Duration;
//! use reqwest_pace::testing::space::{ServerSpec, Workload};
//! use reqwest_pace::{PaceLayer, ThrottledClient};
//! use tower_layer::Layer;
//!
//! #[tokio::main(flavor = "current_thread", start_paused = true)]
//! async fn main() -> Result<(), reqwest_pace::Error> {
//!     let spec = ServerSpec::generate(7);
//!     println!("{spec}");
//!     let workload = Workload::new(4, Duration::from_secs(5));
//!     let figures = spec
//!         .run(&workload, |server| {
//!             let client = ThrottledClient::new(reqwest::Client::new())?;
//!             Ok(PaceLayer::new(client).layer(server))
//!         })
//!         .await?;
//!     assert!(figures.requests > 0);
//!     Ok(())
//! }
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use tokio::time::Instant;
use tower_service::Service;

use super::{
    Answer, Dialect, RateLimitedServer, ResetFormat, RetryAfterPrecision, ServerAlgorithm,
    ServerBuilder, ServerService,
};
use crate::{Error, RequestRate};

/// Which rate-limit headers a generated server writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeaderConvention {
    /// Nothing: a bare refusal, not even `Retry-After`.
    None,
    /// No rate-limit header on any response; a refusal carries only
    /// `Retry-After`.
    RetryAfterOnly,
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset` written as `reset`.
    XRateLimit {
        /// How the reset is written (or that it is not).
        reset: ResetFormat,
        /// What `X-RateLimit-Limit` states.
        limit: StatedLimit,
    },
    /// GitHub's `x-ratelimit-*`, the reset an epoch second.
    GitHub {
        /// What `x-ratelimit-limit` states.
        limit: StatedLimit,
    },
    /// The IETF `RateLimit` and `RateLimit-Policy` structured fields.
    Ietf,
    /// The IETF draft 06 fields.
    IetfDraft6,
    /// The IETF draft 07 `RateLimit` dictionary.
    IetfDraft7,
}

/// What a limit header states for a bucket: its quota (the rate per
/// second, or the count per period of a GCRA), or its burst. Windows state
/// their quota either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatedLimit {
    /// The quota per window (per second for a bucket).
    Quota,
    /// The burst (the capacity of a bucket).
    Burst,
}

/// A second, header-less limiter in front of a generated server's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FrontSpec {
    /// How it counts, per client key.
    pub algorithm: ServerAlgorithm,
    /// The status of its bare refusals.
    pub status: StatusCode,
}

/// One server of the generated space: see the [module docs](self).
///
/// ```
/// use reqwest_pace::testing::space::ServerSpec;
///
/// let spec = ServerSpec::generate(42);
/// assert_eq!(spec, ServerSpec::generate(42));
/// assert!(spec.sustained_per_second() > 1.0);
/// assert!(!spec.to_string().is_empty());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerSpec {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The main limiter, per client key.
    pub algorithm: ServerAlgorithm,
    /// The headers it writes.
    pub headers: HeaderConvention,
    /// How refusals write `Retry-After`, or `None` for not at all.
    pub retry_after: Option<RetryAfterPrecision>,
    /// Whether the main limiter counts the requests it refuses.
    pub counts_refusals: bool,
    /// The main limiter's refusal status.
    pub refusal_status: StatusCode,
    /// The limiter in front, if any.
    pub front: Option<FrontSpec>,
    /// The server's wall clock at its start (pinned, so that a run is
    /// reproduced by its seed).
    pub wall_clock: SystemTime,
    /// How long after a request arrives the server decides it, answering
    /// at once (its [`latency`](super::ServerBuilder::latency)): what it
    /// says remains, and the wait it asks for, run from a decision that
    /// long after the key sent the request. None in the generated space;
    /// a test of round trips sets it.
    pub latency: Duration,
}

/// A draw uniform in `[low, high)` on a log scale.
fn log_uniform(rng: &mut fastrand::Rng, low: f64, high: f64) -> f64 {
    (low.ln() + rng.f64() * (high.ln() - low.ln())).exp()
}

/// A whole number in `[low, high]`, uniform on a log scale.
fn log_int(rng: &mut fastrand::Rng, low: u64, high: u64) -> u64 {
    if high <= low {
        return low;
    }
    let x = log_uniform(rng, low as f64, high as f64 + 1.0).floor() as u64;
    x.clamp(low, high)
}

fn pick<T: Copy>(rng: &mut fastrand::Rng, items: &[T]) -> T {
    items[rng.usize(..items.len())]
}

/// A rate of `per_second` rounded to whole requests per second (at least
/// 1): what bucket headers can state exactly.
fn whole_rate(per_second: f64) -> Result<RequestRate, Error> {
    RequestRate::per_second((per_second.round() as u64).max(1))
}

/// `count` per `window`, or one per second for a degenerate draw.
fn windowed(per_second: f64, window: Duration) -> u64 {
    ((per_second * window.as_secs_f64()).round() as u64).max(1)
}

fn status(rng: &mut fastrand::Rng) -> StatusCode {
    if rng.u8(..4) == 0 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::TOO_MANY_REQUESTS
    }
}

impl ServerSpec {
    /// The server of seed `seed`: the same seed always gives the same
    /// server, wall clock included.
    pub fn generate(seed: u64) -> ServerSpec {
        let mut rng = fastrand::Rng::with_seed(seed);
        // Every rate drawn is at least 1 per second and at most a few
        // hundred: `RequestRate` takes them all, so the fallbacks are never used.
        let per_second = log_uniform(&mut rng, 2.0, 200.0);
        let window = Duration::from_secs(log_int(&mut rng, 1, 60));
        let algorithm = match rng.u8(..6) {
            0 => ServerAlgorithm::FixedWindow {
                limit: windowed(per_second, window),
                window,
            },
            1 => ServerAlgorithm::SlidingLog {
                limit: windowed(per_second, window),
                window,
            },
            2 => ServerAlgorithm::SlidingCounter {
                limit: windowed(per_second, window),
                window,
            },
            3 => {
                let period = Duration::from_secs(pick(&mut rng, &[1, 10, 60]));
                let limit = windowed(per_second, period);
                match RequestRate::new(limit, period) {
                    Ok(rate) => ServerAlgorithm::Gcra {
                        rate,
                        burst: log_int(&mut rng, 1, limit),
                    },
                    Err(_) => ServerAlgorithm::FixedWindow { limit, window },
                }
            }
            kind => match whole_rate(per_second) {
                Ok(rate) => {
                    let most = rate.count();
                    if kind == 4 {
                        ServerAlgorithm::TokenBucket {
                            rate,
                            burst: log_int(&mut rng, 1, most),
                        }
                    } else {
                        // nginx's burst is the excess over the first one.
                        ServerAlgorithm::LeakyBucket {
                            rate,
                            burst: log_int(&mut rng, 1, most) - 1,
                        }
                    }
                }
                Err(_) => ServerAlgorithm::SlidingLog {
                    limit: windowed(per_second, window),
                    window,
                },
            },
        };
        let bucket = matches!(
            algorithm,
            ServerAlgorithm::TokenBucket { .. }
                | ServerAlgorithm::LeakyBucket { .. }
                | ServerAlgorithm::Gcra { .. }
        );
        let stated = |rng: &mut fastrand::Rng| {
            if bucket && rng.bool() {
                StatedLimit::Burst
            } else {
                StatedLimit::Quota
            }
        };
        let headers = match rng.u8(..9) {
            0 => HeaderConvention::None,
            1 => HeaderConvention::RetryAfterOnly,
            2..=4 => HeaderConvention::XRateLimit {
                reset: pick(
                    &mut rng,
                    &[
                        ResetFormat::DeltaSeconds,
                        ResetFormat::EpochSeconds,
                        ResetFormat::EpochMillis,
                        ResetFormat::EpochFractional,
                        ResetFormat::Omitted,
                    ],
                ),
                limit: stated(&mut rng),
            },
            5 => HeaderConvention::GitHub {
                limit: stated(&mut rng),
            },
            6 => HeaderConvention::Ietf,
            7 => HeaderConvention::IetfDraft6,
            _ => HeaderConvention::IetfDraft7,
        };
        let precisions = [
            RetryAfterPrecision::Ceil,
            RetryAfterPrecision::Floor,
            RetryAfterPrecision::Fractional,
        ];
        let retry_after = match headers {
            HeaderConvention::None => None,
            HeaderConvention::RetryAfterOnly => Some(pick(&mut rng, &precisions)),
            _ => (rng.u8(..4) != 0).then(|| pick(&mut rng, &precisions)),
        };
        // A fixed window is locked until its end whatever it counts.
        let counts_refusals =
            !matches!(algorithm, ServerAlgorithm::FixedWindow { .. }) && rng.u8(..4) == 0;
        let refusal_status = status(&mut rng);
        let front = (rng.u8(..5) == 0)
            .then(|| Self::front(&mut rng, algorithm.sustained_per_second()))
            .flatten();
        let wall_clock = UNIX_EPOCH
            + Duration::from_secs(1_800_000_000 + rng.u64(..86_400))
            + Duration::from_millis(rng.u64(..1000));
        ServerSpec {
            seed,
            algorithm,
            headers,
            retry_after,
            counts_refusals,
            refusal_status,
            front,
            wall_clock,
            latency: Duration::ZERO,
        }
    }

    /// A proxy's limiter at 0.5–0.9 or 1.1–2 times `main` per second.
    fn front(rng: &mut fastrand::Rng, main: f64) -> Option<FrontSpec> {
        let factor = if rng.bool() {
            0.5 + 0.4 * rng.f64()
        } else {
            1.1 + 0.9 * rng.f64()
        };
        let per_second = main * factor;
        let algorithm = match rng.u8(..3) {
            0 => {
                let rate = whole_rate(per_second).ok()?;
                ServerAlgorithm::LeakyBucket {
                    burst: log_int(rng, 1, rate.count()) - 1,
                    rate,
                }
            }
            1 => {
                let window = Duration::from_secs(pick(rng, &[1, 10]));
                ServerAlgorithm::FixedWindow {
                    limit: windowed(per_second, window),
                    window,
                }
            }
            _ => {
                let window = Duration::from_secs(60);
                ServerAlgorithm::SlidingCounter {
                    limit: windowed(per_second, window),
                    window,
                }
            }
        };
        Some(FrontSpec {
            algorithm,
            status: status(rng),
        })
    }

    /// The true sustained limit in requests per second: the main
    /// limiter's long-run rate, or the front's when it is lower. A limiter
    /// that counts refusals is taken at the rate of a client it never
    /// refuses.
    pub fn sustained_per_second(&self) -> f64 {
        let main = self.algorithm.sustained_per_second();
        match self.front {
            Some(front) => main.min(front.algorithm.sustained_per_second()),
            None => main,
        }
    }

    /// Whether its responses carry rate-limit headers (a `Retry-After` on
    /// refusals alone does not count: it says when, not how much).
    pub fn sends_headers(&self) -> bool {
        !matches!(
            self.headers,
            HeaderConvention::None | HeaderConvention::RetryAfterOnly
        )
    }

    /// A builder of this server (start it with
    /// [`start`](ServerBuilder::start)).
    pub fn builder(&self) -> ServerBuilder {
        let burst = |limit: StatedLimit| limit == StatedLimit::Burst;
        let mut builder = RateLimitedServer::builder()
            .algorithm(self.algorithm)
            .refusal_status(self.refusal_status)
            .counts_refusals(self.counts_refusals)
            .wall_clock(self.wall_clock)
            .latency(self.latency);
        builder = match self.headers {
            HeaderConvention::None | HeaderConvention::RetryAfterOnly => {
                builder.dialect(Dialect::None)
            }
            HeaderConvention::XRateLimit { reset, limit } => builder
                .dialect(Dialect::XRateLimit)
                .reset_format(reset)
                .limit_is_burst(burst(limit)),
            HeaderConvention::GitHub { limit } => builder
                .dialect(Dialect::GitHub)
                .limit_is_burst(burst(limit)),
            HeaderConvention::Ietf => builder.dialect(Dialect::Ietf),
            HeaderConvention::IetfDraft6 => builder.dialect(Dialect::IetfDraft6),
            HeaderConvention::IetfDraft7 => builder.dialect(Dialect::IetfDraft7),
        };
        builder = match self.retry_after {
            Some(precision) => builder.retry_after(true).retry_after_precision(precision),
            None => builder.retry_after(false),
        };
        match self.front {
            Some(front) => builder.front_limiter(front.algorithm, front.status),
            None => builder,
        }
    }

    /// Starts this server and runs `workload` with the client `client`
    /// makes around the server's [in-process service](RateLimitedServer::service),
    /// then stops the server.
    pub async fn run<S, F>(&self, workload: &Workload, client: F) -> Result<RunFigures, Error>
    where
        F: FnOnce(ServerService) -> Result<S, Error>,
        S: Service<reqwest::Request, Response = reqwest::Response> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Send + 'static,
    {
        let server = self.builder().start().await?;
        let client = client(server.service())?;
        let figures = workload
            .run(&server, self.sustained_per_second(), client)
            .await;
        server.shutdown().await;
        figures
    }
}

/// A compact algorithm: `fixed 20/2s`, `gcra 600/60s b5`, `bucket 20/s b5`,
/// `leaky 20/s b5` (nginx's burst: the excess over the first request).
struct Short(ServerAlgorithm);

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = |rate: RequestRate| rate.per_second_f64().round() as u64;
        match self.0 {
            ServerAlgorithm::FixedWindow { limit, window } => {
                write!(f, "fixed {limit}/{}s", window.as_secs_f64())
            }
            ServerAlgorithm::SlidingLog { limit, window } => {
                write!(f, "log {limit}/{}s", window.as_secs_f64())
            }
            ServerAlgorithm::SlidingCounter { limit, window } => {
                write!(f, "counter {limit}/{}s", window.as_secs_f64())
            }
            ServerAlgorithm::Gcra { rate, burst } => write!(
                f,
                "gcra {}/{}s b{burst}",
                rate.count(),
                rate.per().as_secs_f64()
            ),
            ServerAlgorithm::TokenBucket { rate, burst } => {
                write!(f, "bucket {}/s b{burst}", per(rate))
            }
            ServerAlgorithm::LeakyBucket { rate, burst } => {
                write!(f, "leaky {}/s b{burst}", per(rate))
            }
        }
    }
}

impl fmt::Display for HeaderConvention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = |l: StatedLimit| match l {
            StatedLimit::Quota => "quota",
            StatedLimit::Burst => "burst",
        };
        match *self {
            HeaderConvention::None => f.write_str("no headers"),
            HeaderConvention::RetryAfterOnly => f.write_str("ra only"),
            HeaderConvention::XRateLimit { reset, limit: l } => {
                let reset = match reset {
                    ResetFormat::DeltaSeconds => "delta",
                    ResetFormat::EpochSeconds => "epoch",
                    ResetFormat::EpochMillis => "epoch-ms",
                    ResetFormat::EpochFractional => "epoch-frac",
                    ResetFormat::Omitted => "none",
                };
                write!(f, "xrl limit={} reset={reset}", limit(l))
            }
            HeaderConvention::GitHub { limit: l } => write!(f, "github limit={}", limit(l)),
            HeaderConvention::Ietf => f.write_str("ietf"),
            HeaderConvention::IetfDraft6 => f.write_str("ietf-draft6"),
            HeaderConvention::IetfDraft7 => f.write_str("ietf-draft7"),
        }
    }
}

/// `gcra 20/1s b5 | xrl limit=burst reset=none | ra=floor | counts-refusals | 429 | front leaky 15/s b3 503`.
impl fmt::Display for ServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} | {}", Short(self.algorithm), self.headers)?;
        if self.headers != HeaderConvention::None {
            let ra = match self.retry_after {
                Some(RetryAfterPrecision::Ceil) => "ceil",
                Some(RetryAfterPrecision::Floor) => "floor",
                Some(RetryAfterPrecision::Fractional) => "frac",
                None => "none",
            };
            write!(f, " | ra={ra}")?;
        }
        if self.counts_refusals {
            f.write_str(" | counts-refusals")?;
        }
        write!(f, " | {}", self.refusal_status.as_u16())?;
        if let Some(front) = self.front {
            write!(
                f,
                " | front {} {}",
                Short(front.algorithm),
                front.status.as_u16()
            )?;
        }
        if !self.latency.is_zero() {
            write!(f, " | latency {:?}", self.latency)?;
        }
        Ok(())
    }
}

/// A closed-loop workload: `tasks` tasks each send one logical request
/// after another, each waiting for the last to end, until `duration` has
/// passed since the start (on the tokio clock: run it under a paused clock
/// and a minute takes no real time).
///
/// A logical request that fails (an error, or a final answer that is not a
/// success) is followed by a pause of 10 ms, so that a client that fails
/// at once cannot spin a paused clock forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Workload {
    /// The concurrent closed loops.
    pub tasks: usize,
    /// How long they run.
    pub duration: Duration,
}

impl Default for Workload {
    /// 16 tasks for 60 s.
    fn default() -> Self {
        Workload {
            tasks: 16,
            duration: Duration::from_secs(60),
        }
    }
}

/// After a failed logical request, before the next.
const FAILURE_PAUSE: Duration = Duration::from_millis(10);

impl Workload {
    /// `tasks` closed loops for `duration`.
    pub fn new(tasks: usize, duration: Duration) -> Workload {
        Workload { tasks, duration }
    }

    /// Runs the workload with `client` against `server` (which it calls,
    /// in process or over HTTP, at the server's URL) and measures it
    /// against `sustained_per_second`, the server's true limit.
    ///
    /// Fails only when the server's URL does not parse; a panic in a task
    /// is resumed here.
    pub async fn run<S>(
        &self,
        server: &RateLimitedServer,
        sustained_per_second: f64,
        client: S,
    ) -> Result<RunFigures, Error>
    where
        S: Service<reqwest::Request, Response = reqwest::Response> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Send + 'static,
    {
        let url = reqwest::Url::parse(&server.url())
            .map_err(|e| Error::config(format!("the server's URL does not parse: {e}")))?;
        let logical = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let duration = self.duration;
        let mut tasks = Vec::with_capacity(self.tasks);
        for _ in 0..self.tasks {
            let (mut client, url) = (client.clone(), url.clone());
            let (logical, failed) = (Arc::clone(&logical), Arc::clone(&failed));
            tasks.push(tokio::spawn(async move {
                while start.elapsed() < duration {
                    let request = reqwest::Request::new(http::Method::GET, url.clone());
                    let ready = futures::future::poll_fn(|cx| client.poll_ready(cx)).await;
                    let ok = match ready {
                        Ok(()) => matches!(
                            client.call(request).await,
                            Ok(response) if response.status().is_success()
                        ),
                        Err(_) => false,
                    };
                    logical.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(FAILURE_PAUSE).await;
                    }
                }
            }));
        }
        for task in tasks {
            if let Err(e) = task.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
        Ok(RunFigures::of(
            server,
            sustained_per_second,
            duration,
            logical.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
        ))
    }
}

/// What a [`Workload`] got from a server.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct RunFigures {
    /// Requests the main limiter admitted within the run ÷ (true
    /// sustained limit × the run's duration). The run is `[0, duration)`:
    /// a 60 s window that opens again at exactly 60 s is not counted
    /// twice.
    pub goodput: f64,
    /// Share of responses refused, by the main limiter or the front one.
    pub refused: f64,
    /// Responses answered in all (attempts, not logical requests).
    pub requests: u64,
    /// Of those, admitted by the main limiter within the run.
    pub admitted: u64,
    /// Logical requests ended.
    pub logical: u64,
    /// Logical requests that ended in an error or a final refusal.
    pub failed: u64,
}

impl RunFigures {
    /// The figures of a run of `run` on `server` (started with it), whose
    /// true limit is `sustained_per_second`, with `logical` logical
    /// requests of which `failed` failed.
    pub fn of(
        server: &RateLimitedServer,
        sustained_per_second: f64,
        run: Duration,
        logical: u64,
        failed: u64,
    ) -> RunFigures {
        let records = server.requests();
        let admitted = records
            .iter()
            .filter(|r| r.at < run && r.outcome == Answer::Admitted)
            .count() as u64;
        let refused = records
            .iter()
            .filter(|r| matches!(r.outcome, Answer::Throttled | Answer::FrontRefused))
            .count();
        let expected = sustained_per_second * run.as_secs_f64();
        RunFigures {
            goodput: admitted as f64 / expected.max(f64::MIN_POSITIVE),
            refused: refused as f64 / records.len().max(1) as f64,
            requests: records.len() as u64,
            admitted,
            logical,
            failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_draws_within_the_grammar() {
        for seed in 0..2_000 {
            let spec = ServerSpec::generate(seed);
            assert_eq!(spec, ServerSpec::generate(seed));
            let rate = spec.algorithm.sustained_per_second();
            assert!((0.9..=260.0).contains(&rate), "{seed}: {spec} at {rate}");
            assert!(spec.sustained_per_second() <= rate);
            let burst = spec.algorithm.burst();
            assert!(burst >= 1, "{seed}: {spec}");
            if spec.headers == HeaderConvention::None {
                assert_eq!(spec.retry_after, None);
            }
            if spec.headers == HeaderConvention::RetryAfterOnly {
                assert!(spec.retry_after.is_some());
            }
        }
    }
}
