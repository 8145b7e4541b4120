//! The crate's one error type.

use std::time::Duration;

/// Everything that can go wrong in `reqwest-pace`.
///
/// Variants are named for the situation, carry the figures that explain it
/// and keep the underlying error as their [`source`](std::error::Error::source).
/// Configuration is validated once, when a limiter or client is built, so the
/// configuration variants only come out of constructors and builders.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rate, capacity or other setting is out of range (a zero rate, a zero
    /// capacity, a rate finer than the clock can express...).
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A request asked for more tokens than the limiter can ever hold, so it
    /// could never be admitted. Waiting for it would hang forever.
    #[error("weight {weight} exceeds the limiter's capacity {capacity}")]
    WeightExceedsCapacity {
        /// The weight asked for.
        weight: u64,
        /// The most the limiter can admit at once.
        capacity: u64,
    },

    /// A non-blocking acquisition was refused; `wait` is how long until the
    /// same request would be admitted if nothing else changes.
    #[error("throttled: retry in {wait:?}")]
    Throttled {
        /// Time until the request would be admitted.
        wait: Duration,
    },

    /// A shared limiter's backend (Redis) could not give a decision and its
    /// fault policy says to fail closed.
    #[error("limiter backend unavailable: {message}")]
    Backend {
        /// What failed, in a few words.
        message: String,
        /// The backend's own error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },

    /// The server asked for a wait (Retry-After, or a spent quota until its
    /// reset) longer than the policy's cap, so the client returned at once
    /// instead of sleeping.
    #[cfg(feature = "client")]
    #[error("server asked to wait {wait:?} (status {status}), longer than the cap of {cap:?}")]
    RetryAfterTooLong {
        /// The wait the server asked for (after the parser's own clamp).
        wait: Duration,
        /// The policy's cap.
        cap: Duration,
        /// The status of the response that asked for it.
        status: reqwest::StatusCode,
    },

    /// A wait (for a bucket, a key's first response, a server's
    /// `Retry-After`, a retry's backoff) would end past the call's deadline
    /// or the retry policy's `max_elapsed`: the call failed at once instead
    /// of waiting and failing later.
    #[cfg(feature = "client")]
    #[error("the wait{} would pass the time limit of {limit:?} (after {attempts} attempt(s); last status {})", show_wait(*.wait), show_status(*.last_status))]
    DeadlineExceeded {
        /// How long the wait would have been, when it is known (a bucket's
        /// queue or a key's first response may not say).
        wait: Option<Duration>,
        /// The limit that would have been passed: the call's deadline, or
        /// the retry policy's `max_elapsed`.
        limit: Duration,
        /// Attempts made before it, the first included.
        attempts: u32,
        /// The last response's status, if an attempt got one.
        last_status: Option<reqwest::StatusCode>,
    },

    /// The key's quota is spent until a reset further away than the
    /// policy's cap (`remaining: 0` on a response, with its reset): the
    /// client returned at once instead of sleeping. `status` is what the
    /// server answered when it said so (a 200 with nothing remaining is
    /// reported as a 200).
    #[cfg(feature = "client")]
    #[error("quota spent for {wait:?} more (the server said so with status {status}), longer than the cap of {cap:?}")]
    QuotaExhausted {
        /// Time until the quota resets.
        wait: Duration,
        /// The policy's cap.
        cap: Duration,
        /// The status of the response that said the quota was spent.
        status: reqwest::StatusCode,
    },

    /// Every allowed attempt failed, or the time limit for retries was
    /// reached.
    #[cfg(feature = "client")]
    #[error("gave up after {attempts} attempt(s); last status {}", show_status(*.last_status))]
    RetriesExhausted {
        /// Attempts made, the first included.
        attempts: u32,
        /// The last response's status, if the last attempt got a response.
        last_status: Option<reqwest::StatusCode>,
        /// The last transport error, if the last attempt got none.
        #[source]
        source: Option<reqwest::Error>,
    },

    /// A retry was due but the retry budget is spent: the upstream is
    /// failing for many requests, and retrying would add to its load.
    #[cfg(feature = "client")]
    #[error("retry budget exhausted after {attempts} attempt(s); last status {}", show_status(*.last_status))]
    BudgetExhausted {
        /// Attempts made, the first included.
        attempts: u32,
        /// The last response's status, if the last attempt got a response.
        last_status: Option<reqwest::StatusCode>,
        /// The last transport error, if the last attempt got none.
        #[source]
        source: Option<reqwest::Error>,
    },

    /// The attempt failed in a retryable way, but the request may not be
    /// retried.
    #[cfg(feature = "client")]
    #[error("not retried: {reason}; last status {}", show_status(*.last_status))]
    NotRetried {
        /// Why it could not be retried.
        reason: NotRetriedReason,
        /// The response's status, if there was a response.
        last_status: Option<reqwest::StatusCode>,
        /// The transport error, if there was no response.
        #[source]
        source: Option<reqwest::Error>,
    },

    /// The request could not be built or sent, and the failure is not one
    /// that is retried (or the classifier said it is final).
    #[cfg(feature = "client")]
    #[error("request failed after {attempts} attempt(s)")]
    Transport {
        /// Attempts made, the first included.
        attempts: u32,
        /// reqwest's error.
        #[source]
        source: reqwest::Error,
    },

    /// A middleware further down a `reqwest-middleware` chain failed; its
    /// errors are passed through, not retried.
    #[cfg(feature = "middleware")]
    #[error("middleware failed after {attempts} attempt(s)")]
    Middleware {
        /// Attempts made, the first included.
        attempts: u32,
        /// The middleware's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// Why a retryable failure was not retried.
#[cfg(feature = "client")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotRetriedReason {
    /// The method is not idempotent (POST, PATCH...) and the policy does not
    /// opt in to retrying such methods.
    #[error("the method is not idempotent")]
    NonIdempotent,
    /// The body is a stream, which cannot be replayed.
    #[error("the body cannot be cloned (a stream)")]
    BodyNotCloneable,
}

#[cfg(feature = "client")]
fn show_wait(wait: Option<Duration>) -> String {
    wait.map_or_else(String::new, |w| format!(" of {w:?}"))
}

#[cfg(feature = "client")]
fn show_status(status: Option<reqwest::StatusCode>) -> String {
    status.map_or_else(|| "none".to_string(), |s| s.as_u16().to_string())
}

impl Error {
    /// The status of the last response, when the error came after one.
    #[cfg(feature = "client")]
    pub fn last_status(&self) -> Option<reqwest::StatusCode> {
        match self {
            Error::RetryAfterTooLong { status, .. } | Error::QuotaExhausted { status, .. } => {
                Some(*status)
            }
            Error::RetriesExhausted { last_status, .. }
            | Error::DeadlineExceeded { last_status, .. }
            | Error::BudgetExhausted { last_status, .. }
            | Error::NotRetried { last_status, .. } => *last_status,
            _ => None,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::InvalidConfig(message.into())
    }

    /// A refusal at `now` of a call that could go at `ready` (nanoseconds
    /// on one limiter's time line).
    pub(crate) fn throttled(ready: u64, now: u64) -> Self {
        Error::Throttled {
            wait: std::time::Duration::from_nanos(ready.saturating_sub(now)),
        }
    }
}
