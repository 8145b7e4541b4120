//! Presets of real servers' rate limiting: one [`ServerBuilder`] per family
//! a client meets in the wild, so that a test can check a client against
//! each of them.
//!
//! | name | what it models |
//! |---|---|
//! | `fixed-window-draft6` | express-rate-limit, 20 per 2 s, `standardHeaders: 'draft-6'` |
//! | `fixed-window-draft7` | the same, `'draft-7'` (`RateLimit: limit=20, remaining=19, reset=2`) |
//! | `fixed-window-draft8` | the same, structured fields (`RateLimit-Policy: "default";q=20;w=2`) |
//! | `fixed-window-legacy` | the same, `legacyHeaders` (`X-RateLimit-Reset` an epoch second, rounded up) |
//! | `leaky-bucket-429` | nginx `limit_req rate=20r/s burst=5 nodelay`, `limit_req_status 429`: no headers |
//! | `leaky-bucket-503` | the same with nginx's default refusal, a bare 503 |
//! | `moving-window` | Python `limits`' moving window, 100 per 5 s, `X-RateLimit-*` with a fractional epoch reset and `Retry-After` |
//! | `token-bucket-github` | a token bucket, 20/s burst 5, GitHub's headers with `limit` = the burst and the reset the epoch second it is full |
//!
//! [`defeating`] holds three more, not in [`all`]: widely used limiters that
//! defeated a client tuned to the ones above (`gcra-burst-no-reset`,
//! `log-retry-after-only`, `counts-refusals`).
//!
//! ```
//! use reqwest_pace::testing::zoo;
//!
//! let names: Vec<&str> = zoo::all().into_iter().map(|(name, _)| name).collect();
//! assert_eq!(names.len(), 8);
//! assert_eq!(names[0], "fixed-window-draft6");
//! ```

use std::time::Duration;

use http::StatusCode;

use super::{
    Dialect, RateLimitedServer, ResetFormat, RetryAfterPrecision, ServerAlgorithm, ServerBuilder,
};
use crate::RequestRate;

const FIXED: ServerAlgorithm = ServerAlgorithm::FixedWindow {
    limit: 20,
    window: Duration::from_secs(2),
};

fn leaky() -> Result<ServerAlgorithm, crate::Error> {
    Ok(ServerAlgorithm::LeakyBucket {
        rate: RequestRate::per_second(20)?,
        burst: 5,
    })
}

/// express-rate-limit's fixed window, 20 per 2 s, in `dialect`.
pub fn fixed_window(dialect: Dialect) -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(FIXED)
        .dialect(dialect)
}

/// express-rate-limit's legacy headers: `X-RateLimit-Reset` an epoch
/// second, rounded up.
pub fn fixed_window_legacy() -> ServerBuilder {
    fixed_window(Dialect::XRateLimit).reset_format(ResetFormat::EpochSeconds)
}

/// nginx's `limit_req` at 20 per second, burst 5, refusing with `status`
/// and no headers at all.
pub fn leaky_bucket(status: StatusCode) -> Result<ServerBuilder, crate::Error> {
    Ok(RateLimitedServer::builder()
        .algorithm(leaky()?)
        .dialect(Dialect::None)
        .refusal_status(status))
}

/// A moving window of 100 per 5 s with `X-RateLimit-*` headers, the reset a
/// fractional epoch, and `Retry-After` on a refusal.
pub fn moving_window() -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::SlidingLog {
            limit: 100,
            window: Duration::from_secs(5),
        })
        .dialect(Dialect::XRateLimit)
        .reset_format(ResetFormat::EpochFractional)
}

/// A token bucket of 20 per second, burst 5, whose GitHub-style headers
/// state the burst as the limit and the reset as the epoch second it is
/// full again.
pub fn token_bucket_github() -> Result<ServerBuilder, crate::Error> {
    Ok(RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::TokenBucket {
            rate: RequestRate::per_second(20)?,
            burst: 5,
        })
        .dialect(Dialect::GitHub)
        .limit_is_burst(true))
}

/// Every preset, by name, in the order of the module's table.
pub fn all() -> Vec<(&'static str, ServerBuilder)> {
    let mut zoo = vec![
        ("fixed-window-draft6", fixed_window(Dialect::IetfDraft6)),
        ("fixed-window-draft7", fixed_window(Dialect::IetfDraft7)),
        ("fixed-window-draft8", fixed_window(Dialect::Ietf)),
        ("fixed-window-legacy", fixed_window_legacy()),
    ];
    // The rates below are constants in range: these never fail.
    let fallible = [
        (
            "leaky-bucket-429",
            leaky_bucket(StatusCode::TOO_MANY_REQUESTS),
        ),
        (
            "leaky-bucket-503",
            leaky_bucket(StatusCode::SERVICE_UNAVAILABLE),
        ),
        ("moving-window", Ok(moving_window())),
        ("token-bucket-github", token_bucket_github()),
    ];
    for (name, builder) in fallible {
        if let Ok(builder) = builder {
            zoo.push((name, builder));
        }
    }
    zoo
}

/// A GCRA of 20/s, burst 5, whose `x-ratelimit-limit` is the burst, with
/// `x-ratelimit-remaining` on every response, no reset, and on a refusal a
/// `retry-after` floored to whole seconds (so `0`).
pub fn gcra_burst_no_reset() -> Result<ServerBuilder, crate::Error> {
    Ok(RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::Gcra {
            rate: RequestRate::per_second(20)?,
            burst: 5,
        })
        .dialect(Dialect::XRateLimit)
        .limit_is_burst(true)
        .reset_format(ResetFormat::Omitted)
        .retry_after_precision(RetryAfterPrecision::Floor))
}

/// A sliding log of 20 per second with no header on a 200; a 429 carries
/// only `Retry-After`, a wait of a few milliseconds rounded up to 1.
pub fn log_retry_after_only() -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::SlidingLog {
            limit: 20,
            window: Duration::from_secs(1),
        })
        .dialect(Dialect::None)
        .retry_after(true)
        .retry_after_precision(RetryAfterPrecision::Ceil)
}

/// A sliding log of 20 per second with no headers at all, counting the
/// requests it refuses: a burst of refusals keeps a client locked out
/// longer.
pub fn counts_refusals() -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::SlidingLog {
            limit: 20,
            window: Duration::from_secs(1),
        })
        .dialect(Dialect::None)
        .refusal_status(StatusCode::TOO_MANY_REQUESTS)
        .counts_refusals(true)
}

/// The three limiters that defeated a client tuned to [`all`], by name.
pub fn defeating() -> Vec<(&'static str, ServerBuilder)> {
    let mut limiters = Vec::new();
    // The rate is a constant in range: this never fails.
    if let Ok(builder) = gcra_burst_no_reset() {
        limiters.push(("gcra-burst-no-reset", builder));
    }
    limiters.push(("log-retry-after-only", log_retry_after_only()));
    limiters.push(("counts-refusals", counts_refusals()));
    limiters
}
