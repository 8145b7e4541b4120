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
}

impl Error {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::InvalidConfig(message.into())
    }
}
