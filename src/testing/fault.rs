//! Injected faults: canned answers that bypass the limiter.

use std::time::{Duration, SystemTime};

use http::StatusCode;

/// A `Retry-After` value for an injected [`Fault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryAfter {
    /// `Retry-After: <n>`, a delay in seconds.
    Seconds(u64),
    /// `Retry-After: <HTTP-date>` for this fixed instant.
    Date(SystemTime),
    /// `Retry-After: <HTTP-date>` this long after the response's `Date`.
    /// The written date is truncated to the second like `Date` is, so for a
    /// whole number of seconds the two headers differ by exactly that.
    DateIn(Duration),
}

/// A canned response for the next requests, whatever the limiter would
/// have said: a 503 from an overloaded backend, a 500, a 429 from some other
/// layer.
///
/// Faults queue up in [`RateLimitedServer::inject`] order; each answers
/// its next [`times`](Fault::times) requests (from any client). A faulted
/// request takes no token from its bucket and its response carries only
/// `Date`, the fault's `Retry-After` if any, and a short text body: no
/// rate-limit headers.
///
/// ```
/// use std::time::Duration;
/// use reqwest::StatusCode;
/// use reqwest_pace::testing::{Fault, RetryAfter};
///
/// // The next two requests get a 503 asking to come back in 2 seconds.
/// let outage = Fault::new(StatusCode::SERVICE_UNAVAILABLE)
///     .times(2)
///     .retry_after(RetryAfter::Seconds(2));
/// assert_eq!(outage.remaining(), 2);
/// ```
///
/// [`RateLimitedServer::inject`]: super::RateLimitedServer::inject
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub(crate) status: StatusCode,
    pub(crate) times: u64,
    pub(crate) retry_after: Option<RetryAfter>,
}

impl Fault {
    /// Answer the next request with `status`, without `Retry-After`.
    pub fn new(status: StatusCode) -> Fault {
        Fault {
            status,
            times: 1,
            retry_after: None,
        }
    }

    /// A `503 Service Unavailable`.
    pub fn service_unavailable() -> Fault {
        Fault::new(StatusCode::SERVICE_UNAVAILABLE)
    }

    /// A `500 Internal Server Error`.
    pub fn internal_server_error() -> Fault {
        Fault::new(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// A `429 Too Many Requests` that the limiter did not decide.
    pub fn too_many_requests() -> Fault {
        Fault::new(StatusCode::TOO_MANY_REQUESTS)
    }

    /// Answer the next `n` requests this way instead of one. Zero makes the
    /// fault a no-op.
    pub fn times(mut self, n: u64) -> Fault {
        self.times = n;
        self
    }

    /// Add a `Retry-After` header.
    pub fn retry_after(mut self, retry_after: RetryAfter) -> Fault {
        self.retry_after = Some(retry_after);
        self
    }

    /// The status answered.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// How many more requests this fault will answer.
    pub fn remaining(&self) -> u64 {
        self.times
    }
}
