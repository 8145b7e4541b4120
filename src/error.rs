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
    #[non_exhaustive]
    WeightExceedsCapacity {
        /// The weight asked for.
        weight: u64,
        /// The most the limiter can admit at once.
        capacity: u64,
    },

    /// A non-blocking acquisition was refused; `wait` is how long until the
    /// same request would be admitted if nothing else changes.
    #[error("not yet: retry in {wait:?}")]
    #[non_exhaustive]
    NotYet {
        /// Time until the request would be admitted.
        wait: Duration,
    },

    /// A limiter is held by a server's wait (a `Retry-After`, a quota
    /// spent until its reset) that ends further away than the caller would
    /// wait ([`Bounds::max_block`](crate::limiter::Bounds::max_block)):
    /// nothing was taken. A throttled client reports it as
    /// `RetryAfterTooLong` or `QuotaExhausted`.
    #[error("held by the server for {wait:?} more (status {status}), longer than {max:?}")]
    #[non_exhaustive]
    Blocked {
        /// Time until the block ends.
        wait: Duration,
        /// The longest block the caller would wait out.
        max: Duration,
        /// The status of the response that asked for the block.
        status: u16,
        /// Whether a spent quota asked for it (rather than a `Retry-After`).
        spent_quota: bool,
    },

    /// A shared limiter's backend (Redis) could not give a decision and its
    /// fault policy says to fail closed.
    #[error("limiter backend unavailable: {message}")]
    #[non_exhaustive]
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
    #[non_exhaustive]
    RetryAfterTooLong {
        /// The wait the server asked for (after the parser's own clamp).
        wait: Duration,
        /// The policy's cap.
        cap: Duration,
        /// The status of the response that asked for it.
        status: reqwest::StatusCode,
        /// Attempts this call made before it, the first included (0: the
        /// key was held before the call sent anything).
        attempts: u32,
        /// The last response (status, headers, the first bytes of its
        /// body), when an attempt of this call got one.
        last_response: Option<Box<LastResponse>>,
    },

    /// A wait (for a bucket, a key's first response, a server's
    /// `Retry-After`, a retry's backoff) would end past the call's time limit
    /// or the retry policy's `max_elapsed`: the call failed at once instead
    /// of waiting and failing later.
    #[cfg(feature = "client")]
    #[error("the wait{} would pass the time limit of {limit:?} (after {attempts} attempt(s); last status {})", show_wait(*.wait), show_status(*.last_status))]
    #[non_exhaustive]
    TimeLimitExceeded {
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
        /// The last response (status, headers, the first bytes of its
        /// body), when an attempt of this call got one.
        last_response: Option<Box<LastResponse>>,
    },

    /// The key's quota is spent until a reset further away than the
    /// policy's cap (`remaining: 0` on a response, with its reset): the
    /// client returned at once instead of sleeping. `status` is what the
    /// server answered when it said so (a 200 with nothing remaining is
    /// reported as a 200).
    #[cfg(feature = "client")]
    #[error("quota spent for {wait:?} more (the server said so with status {status}), longer than the cap of {cap:?}")]
    #[non_exhaustive]
    QuotaExhausted {
        /// Time until the quota resets.
        wait: Duration,
        /// The policy's cap.
        cap: Duration,
        /// The status of the response that said the quota was spent.
        status: reqwest::StatusCode,
        /// Attempts this call made before it, the first included (0: the
        /// key was held before the call sent anything).
        attempts: u32,
    },

    /// A priority class outside the classes there are
    /// ([`Priority::new`](crate::Priority::new) takes 0 to
    /// [`Priority::MAX_CLASS`](crate::Priority::MAX_CLASS);
    /// [`Priority::saturating`](crate::Priority::saturating) clamps
    /// instead).
    #[cfg(feature = "client")]
    #[error(
        "priority class {class} is out of range: classes go from 0 (batch) to {max} (interactive)"
    )]
    #[non_exhaustive]
    PriorityOutOfRange {
        /// The class asked for.
        class: u8,
        /// The highest class.
        max: u8,
    },

    /// The key's circuit breaker is open: its host failed too many sends
    /// in a row (no connection, a timeout, a 5xx other than 503), and the
    /// call failed at once instead of sending (see
    /// [`Scope::circuit_breaker`](crate::Scope::circuit_breaker)).
    #[cfg(feature = "client")]
    #[error("circuit open for {key}{} (after {attempts} attempt(s); last status {})", show_retry_in(*.retry_in), show_status(*.last_status))]
    #[non_exhaustive]
    CircuitOpen {
        /// The scope's key whose breaker is open (a host's
        /// `scheme://host:port`).
        key: String,
        /// Time until a probe may go; `None` while a probe is in flight.
        retry_in: Option<Duration>,
        /// Attempts this call made before it, the first included (0: it
        /// sent nothing).
        attempts: u32,
        /// The last response's status, if an attempt of this call got one.
        last_status: Option<reqwest::StatusCode>,
    },

    /// The host's robots.txt disallows the URL for the client's
    /// user-agent, or could not be read (a 429 or 5xx, no answer) and
    /// disallows every path for a while (feature `robots`; see
    /// [`Robots`](crate::Robots)). Nothing was sent.
    #[cfg(feature = "robots")]
    #[error("{url} is disallowed by its host's robots.txt{}", if *.unavailable { " (which could not be read)" } else { "" })]
    #[non_exhaustive]
    RobotsDisallowed {
        /// The URL refused.
        url: String,
        /// Whether the robots.txt could not be read (then every path is
        /// disallowed until it is fetched again).
        unavailable: bool,
    },

    /// Every allowed attempt failed, or the time limit for retries was
    /// reached.
    #[cfg(feature = "client")]
    #[error("gave up after {attempts} attempt(s); last status {}", show_status(*.last_status))]
    #[non_exhaustive]
    RetriesExhausted {
        /// Attempts made, the first included.
        attempts: u32,
        /// The last response's status, if the last attempt got a response.
        last_status: Option<reqwest::StatusCode>,
        /// The last transport error, if the last attempt got none.
        #[source]
        source: Option<reqwest::Error>,
        /// The last response (status, headers, the first bytes of its
        /// body), when an attempt of this call got one.
        last_response: Option<Box<LastResponse>>,
    },

    /// A retry was due but the retry budget is spent: the upstream is
    /// failing for many requests, and retrying would add to its load.
    #[cfg(feature = "client")]
    #[error("retry budget exhausted after {attempts} attempt(s); last status {}", show_status(*.last_status))]
    #[non_exhaustive]
    BudgetExhausted {
        /// Attempts made, the first included.
        attempts: u32,
        /// The last response's status, if the last attempt got a response.
        last_status: Option<reqwest::StatusCode>,
        /// The last transport error, if the last attempt got none.
        #[source]
        source: Option<reqwest::Error>,
        /// The last response (status, headers, the first bytes of its
        /// body), when an attempt of this call got one.
        last_response: Option<Box<LastResponse>>,
    },

    /// The attempt failed in a retryable way, but the request may not be
    /// retried.
    #[cfg(feature = "client")]
    #[error("not retried: {reason}; last status {}", show_status(*.last_status))]
    #[non_exhaustive]
    NotRetried {
        /// Why it could not be retried.
        reason: NotRetriedReason,
        /// Attempts made, the first included.
        attempts: u32,
        /// The response's status, if there was a response.
        last_status: Option<reqwest::StatusCode>,
        /// The transport error, if there was no response.
        #[source]
        source: Option<reqwest::Error>,
        /// The last response (status, headers, the first bytes of its
        /// body), when an attempt of this call got one.
        last_response: Option<Box<LastResponse>>,
    },

    /// The request could not be built or sent, and the failure is not one
    /// that is retried (or the classifier said it is final).
    #[cfg(feature = "client")]
    #[error("request failed after {attempts} attempt(s)")]
    #[non_exhaustive]
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
    #[non_exhaustive]
    Middleware {
        /// Attempts made, the first included.
        attempts: u32,
        /// The middleware's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// What kind of failure an [`Error`] is, in the few terms a caller acts on
/// ([`Error::kind`]): the situations several of `Error`'s variants share
/// (a server's wait beyond the cap comes as `RetryAfterTooLong`,
/// `QuotaExhausted` or, from a limiter, `Blocked`), so that a `match`
/// on the kind stays right when a release adds a variant for one of them.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::{Error, ErrorKind};
///
/// let refused = Error::blocked(Duration::from_secs(90), Duration::from_secs(60), 429, true);
/// match refused.kind() {
///     ErrorKind::ServerWait { wait, cap, .. } => {
///         assert_eq!((wait, cap), (Duration::from_secs(90), Duration::from_secs(60)))
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A setting is out of range, or a call asked for what can never be
    /// given (a weight over a limiter's capacity, configured or stated by
    /// the server; a priority class that does not exist). Retrying does
    /// not help.
    Config,
    /// A limiter refused a call that would not wait
    /// ([`Limiter::try_acquire`](crate::Limiter::try_acquire)), or not
    /// past the instant it was given
    /// ([`Bounds::by`](crate::limiter::Bounds::by)): it would be admitted
    /// after `wait` if nothing else changed.
    #[non_exhaustive]
    NotYet {
        /// Time until the call would be admitted.
        wait: Duration,
    },
    /// The server said to come back later (a `Retry-After`, a quota spent
    /// until its reset) at a wait longer than the caller waits (the retry
    /// policy's `max_retry_after`, a limiter's
    /// [`Bounds::max_block`](crate::limiter::Bounds::max_block)): the
    /// call returned at once instead of sleeping.
    #[non_exhaustive]
    ServerWait {
        /// The wait the server asked for.
        wait: Duration,
        /// The longest wait the caller would have waited out.
        cap: Duration,
    },
    /// Every attempt the retry policy allows was made and failed.
    AttemptsExhausted,
    /// A retry was due, but the retry budget is spent.
    BudgetExhausted,
    /// A wait would have ended past the call's time limit (its
    /// `TimeLimit` or the policy's `max_elapsed`).
    #[non_exhaustive]
    TimeLimit {
        /// How long the wait would have been, when known.
        wait: Option<Duration>,
        /// The limit it would have passed.
        limit: Duration,
    },
    /// An attempt failed in a way that is retried, but the request cannot
    /// be sent again (a method that is not idempotent, a streamed body).
    #[non_exhaustive]
    NotRetried {
        /// Why it could not be sent again.
        reason: NotRetriedReason,
    },
    /// The client's own policy kept the call from being sent: its key's
    /// circuit breaker is open, or robots.txt disallows the URL.
    Withheld,
    /// A shared limiter's store (Redis) could not decide, and its fault
    /// policy fails closed.
    Backend,
    /// The request could not be built or sent (or a middleware further
    /// down the chain failed), and the failure is not retried.
    Transport,
}

impl ErrorKind {
    /// A short, stable name for the kind, without its fields: the `reason`
    /// label of the `reqwest_pace_gave_up_total` metric (feature
    /// `metrics`), and a key to count failures by.
    ///
    /// ```
    /// use reqwest_pace::ErrorKind;
    ///
    /// assert_eq!(ErrorKind::AttemptsExhausted.label(), "attempts_exhausted");
    /// ```
    pub fn label(&self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::NotYet { .. } => "not_yet",
            ErrorKind::ServerWait { .. } => "server_wait",
            ErrorKind::AttemptsExhausted => "attempts_exhausted",
            ErrorKind::BudgetExhausted => "budget_exhausted",
            ErrorKind::TimeLimit { .. } => "time_limit",
            ErrorKind::NotRetried { .. } => "not_retried",
            ErrorKind::Withheld => "withheld",
            ErrorKind::Backend => "backend",
            ErrorKind::Transport => "transport",
        }
    }
}

/// Why a retryable failure was not retried.
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

/// The last response of a call that failed after one: what a caller
/// needs to see what the server said (its status, its headers, the first
/// bytes of its body) without the connection it came on.
#[cfg(feature = "client")]
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LastResponse {
    /// The response's status.
    pub status: reqwest::StatusCode,
    /// The response's headers.
    pub headers: http::HeaderMap,
    /// The first [`LastResponse::MAX_BODY`] bytes of its body, or fewer
    /// when the body was shorter or did not arrive within
    /// [`LastResponse::BODY_TIME`].
    pub body: Vec<u8>,
    /// Whether the body went on past what `body` holds (or could not be
    /// read to its end in time).
    pub truncated: bool,
}

#[cfg(feature = "client")]
impl LastResponse {
    /// The most of a failed response's body that is kept.
    pub const MAX_BODY: usize = 8 * 1024;
    /// The longest the body is read for.
    pub const BODY_TIME: Duration = Duration::from_secs(1);

    /// Keep `response`'s status and headers, and read at most
    /// [`MAX_BODY`](Self::MAX_BODY) bytes of its body for at most
    /// [`BODY_TIME`](Self::BODY_TIME) (or less, `time`).
    pub(crate) async fn read(mut response: reqwest::Response, time: Duration) -> LastResponse {
        let mut last = LastResponse {
            status: response.status(),
            headers: std::mem::take(response.headers_mut()),
            body: Vec::new(),
            truncated: false,
        };
        let read = async {
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => {
                        let room = Self::MAX_BODY - last.body.len();
                        last.body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                        if chunk.len() > room {
                            return true;
                        }
                    }
                    Ok(None) => return false,
                    Err(_) => return true,
                }
            }
        };
        last.truncated = tokio::time::timeout(time.min(Self::BODY_TIME), read)
            .await
            .unwrap_or(true);
        last
    }
}

#[cfg(feature = "client")]
fn show_wait(wait: Option<Duration>) -> String {
    wait.map_or_else(String::new, |w| format!(" of {w:?}"))
}

#[cfg(feature = "client")]
fn show_retry_in(retry_in: Option<Duration>) -> String {
    retry_in.map_or_else(
        || ", a probe in flight".to_string(),
        |w| format!(", a probe in {w:?}"),
    )
}

#[cfg(feature = "client")]
fn show_status(status: Option<reqwest::StatusCode>) -> String {
    status.map_or_else(|| "none".to_string(), |s| s.as_u16().to_string())
}

impl Error {
    /// What kind of failure this is ([`ErrorKind`]): the situation,
    /// whichever variant reports it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidConfig(_) | Error::WeightExceedsCapacity { .. } => ErrorKind::Config,
            Error::NotYet { wait } => ErrorKind::NotYet { wait: *wait },
            Error::Blocked { wait, max, .. } => ErrorKind::ServerWait {
                wait: *wait,
                cap: *max,
            },
            Error::Backend { .. } => ErrorKind::Backend,
            #[cfg(feature = "client")]
            Error::PriorityOutOfRange { .. } => ErrorKind::Config,
            #[cfg(feature = "client")]
            Error::RetryAfterTooLong { wait, cap, .. }
            | Error::QuotaExhausted { wait, cap, .. } => ErrorKind::ServerWait {
                wait: *wait,
                cap: *cap,
            },
            #[cfg(feature = "client")]
            Error::TimeLimitExceeded { wait, limit, .. } => ErrorKind::TimeLimit {
                wait: *wait,
                limit: *limit,
            },
            #[cfg(feature = "client")]
            Error::RetriesExhausted { .. } => ErrorKind::AttemptsExhausted,
            #[cfg(feature = "client")]
            Error::BudgetExhausted { .. } => ErrorKind::BudgetExhausted,
            #[cfg(feature = "client")]
            Error::NotRetried { reason, .. } => ErrorKind::NotRetried { reason: *reason },
            #[cfg(feature = "client")]
            Error::CircuitOpen { .. } => ErrorKind::Withheld,
            #[cfg(feature = "robots")]
            Error::RobotsDisallowed { .. } => ErrorKind::Withheld,
            #[cfg(feature = "client")]
            Error::Transport { .. } => ErrorKind::Transport,
            #[cfg(feature = "middleware")]
            Error::Middleware { .. } => ErrorKind::Transport,
        }
    }

    /// The attempts the call made before it failed, the first included
    /// (0: nothing was sent), for every error a call returns; `None` for
    /// a limiter's errors and the configuration's, which no call counts.
    #[cfg(feature = "client")]
    pub fn attempts(&self) -> Option<u32> {
        match self {
            Error::RetryAfterTooLong { attempts, .. }
            | Error::QuotaExhausted { attempts, .. }
            | Error::NotRetried { attempts, .. }
            | Error::TimeLimitExceeded { attempts, .. }
            | Error::CircuitOpen { attempts, .. }
            | Error::RetriesExhausted { attempts, .. }
            | Error::BudgetExhausted { attempts, .. }
            | Error::Transport { attempts, .. } => Some(*attempts),
            #[cfg(feature = "middleware")]
            Error::Middleware { attempts, .. } => Some(*attempts),
            _ => None,
        }
    }

    /// The status of the last response, when the error came after one.
    #[cfg(feature = "client")]
    pub fn last_status(&self) -> Option<reqwest::StatusCode> {
        match self {
            Error::RetryAfterTooLong { status, .. } | Error::QuotaExhausted { status, .. } => {
                Some(*status)
            }
            Error::RetriesExhausted { last_status, .. }
            | Error::TimeLimitExceeded { last_status, .. }
            | Error::CircuitOpen { last_status, .. }
            | Error::BudgetExhausted { last_status, .. }
            | Error::NotRetried { last_status, .. } => *last_status,
            _ => None,
        }
    }

    /// The last response (status, headers, the first bytes of its body),
    /// when the error came after one.
    #[cfg(feature = "client")]
    pub fn last_response(&self) -> Option<&LastResponse> {
        match self {
            Error::RetryAfterTooLong { last_response, .. }
            | Error::RetriesExhausted { last_response, .. }
            | Error::TimeLimitExceeded { last_response, .. }
            | Error::BudgetExhausted { last_response, .. }
            | Error::NotRetried { last_response, .. } => last_response.as_deref(),
            _ => None,
        }
    }

    /// The kind of this error where it ends a call that gave up retrying
    /// (what its [`Event::GaveUp`](crate::Event::GaveUp) says); `None` for
    /// an error that ends a call before or beside the retries (a setting,
    /// the circuit breaker, robots.txt, the shared limiter's store).
    #[cfg(feature = "client")]
    pub(crate) fn gave_up(&self) -> Option<ErrorKind> {
        let gave_up = match self {
            Error::RetryAfterTooLong { .. }
            | Error::QuotaExhausted { .. }
            | Error::TimeLimitExceeded { .. }
            | Error::RetriesExhausted { .. }
            | Error::BudgetExhausted { .. }
            | Error::NotRetried { .. } => true,
            Error::Transport { attempts, .. } => *attempts > 0,
            _ => false,
        };
        gave_up.then(|| self.kind())
    }

    /// The error a call that gave up, as the retry decision said (`kind`),
    /// returns after `attempts` attempts, with what its last attempt left
    /// (`source`: the transport error when the last attempt got no
    /// response). Its [`kind`](Error::kind) is `kind`, but for a kind no
    /// retry decision gives (a setting, "not yet", a call withheld, the
    /// store) and a transport failure without its error: those read as
    /// attempts exhausted.
    #[cfg(feature = "client")]
    pub(crate) fn giving_up(
        kind: ErrorKind,
        attempts: u32,
        last_status: Option<reqwest::StatusCode>,
        last_response: Option<LastResponse>,
        source: Option<reqwest::Error>,
    ) -> Error {
        let last_response = last_response.map(Box::new);
        match (kind, source) {
            (ErrorKind::Transport, Some(source)) => Error::Transport { attempts, source },
            (ErrorKind::ServerWait { wait, cap }, _) => Error::RetryAfterTooLong {
                wait,
                cap,
                status: last_status.unwrap_or(reqwest::StatusCode::TOO_MANY_REQUESTS),
                attempts,
                last_response,
            },
            (ErrorKind::TimeLimit { wait, limit }, _) => Error::TimeLimitExceeded {
                wait,
                limit,
                attempts,
                last_status,
                last_response,
            },
            (ErrorKind::BudgetExhausted, source) => Error::BudgetExhausted {
                attempts,
                last_status,
                source,
                last_response,
            },
            (ErrorKind::NotRetried { reason }, source) => Error::NotRetried {
                reason,
                attempts,
                last_status,
                source,
                last_response,
            },
            (_, source) => Error::RetriesExhausted {
                attempts,
                last_status,
                source,
                last_response,
            },
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::InvalidConfig(message.into())
    }

    /// The same error, counting `made` attempts where it counts them and
    /// was made before the count was known (a server's wait beyond the
    /// cap, found in the wait step).
    #[cfg(feature = "client")]
    pub(crate) fn after_attempts(mut self, made: u32) -> Self {
        if let Error::RetryAfterTooLong { attempts, .. } | Error::QuotaExhausted { attempts, .. } =
            &mut self
        {
            *attempts = made;
        }
        self
    }

    /// [`Error::NotYet`]: refused now, and admitted after `wait` if
    /// nothing else changes. The limiter-side variants' fields may grow
    /// (they are `#[non_exhaustive]`), so a [`Limiter`](crate::Limiter) of
    /// your own builds them with this and the three constructors below.
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest_pace::Error;
    ///
    /// let refused = Error::not_yet(Duration::from_millis(250));
    /// assert!(matches!(refused, Error::NotYet { wait, .. } if wait == Duration::from_millis(250)));
    /// ```
    pub fn not_yet(wait: Duration) -> Self {
        Error::NotYet { wait }
    }

    /// [`Error::WeightExceedsCapacity`]: `weight` asked of a limiter that
    /// can never hold more than `capacity`.
    pub fn weight_exceeds_capacity(weight: u64, capacity: u64) -> Self {
        Error::WeightExceedsCapacity { weight, capacity }
    }

    /// [`Error::Blocked`]: held by a server's wait of `wait` more, longer
    /// than the caller's `max`, asked for by a response of `status` (a
    /// spent quota when `spent_quota`, else a `Retry-After`).
    pub fn blocked(wait: Duration, max: Duration, status: u16, spent_quota: bool) -> Self {
        Error::Blocked {
            wait,
            max,
            status,
            spent_quota,
        }
    }

    /// [`Error::Backend`]: a shared limiter's backend could not decide
    /// (`message`, in a few words), with its own error as the `source`.
    pub fn backend(
        message: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Backend {
            message: message.into(),
            source,
        }
    }

    /// A refusal at `now` of a call that could go at `ready` (nanoseconds
    /// on one limiter's time line).
    pub(crate) fn not_yet_at(ready: u64, now: u64) -> Self {
        Error::NotYet {
            wait: std::time::Duration::from_nanos(ready.saturating_sub(now)),
        }
    }
}

/// A request that could not be built or sent before any attempt (an invalid
/// URL, say): [`Error::Transport`] with no attempts, so `?` works on
/// reqwest's own results in code that returns this crate's error.
#[cfg(feature = "client")]
impl From<reqwest::Error> for Error {
    fn from(source: reqwest::Error) -> Self {
        Error::Transport {
            attempts: 0,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// Every variant reports its situation's kind, and the variants that
    /// share a situation report the same one.
    #[test]
    fn each_variant_reports_its_kind() {
        assert_eq!(Error::config("a zero rate").kind(), ErrorKind::Config);
        assert_eq!(
            Error::weight_exceeds_capacity(5, 2).kind(),
            ErrorKind::Config
        );
        assert_eq!(Error::not_yet(S).kind(), ErrorKind::NotYet { wait: S });
        assert_eq!(
            Error::blocked(90 * S, 60 * S, 429, false).kind(),
            ErrorKind::ServerWait {
                wait: 90 * S,
                cap: 60 * S
            }
        );
        assert_eq!(Error::backend("down", None).kind(), ErrorKind::Backend);
    }

    #[cfg(feature = "client")]
    #[test]
    fn a_call_that_gave_up_reports_the_kind_it_gave_up_for_and_its_attempts() {
        let status = Some(reqwest::StatusCode::SERVICE_UNAVAILABLE);
        let gave_up = |kind| Error::giving_up(kind, 3, status, None, None);
        let server_wait = ErrorKind::ServerWait {
            wait: 90 * S,
            cap: 60 * S,
        };
        // Every kind a retry decision gives comes back from the error
        // built for it, and the error says it gave up.
        for kind in [
            server_wait,
            ErrorKind::TimeLimit {
                wait: Some(2 * S),
                limit: 5 * S,
            },
            ErrorKind::AttemptsExhausted,
            ErrorKind::BudgetExhausted,
            ErrorKind::NotRetried {
                reason: NotRetriedReason::NonIdempotent,
            },
            ErrorKind::NotRetried {
                reason: NotRetriedReason::BodyNotCloneable,
            },
        ] {
            let error = gave_up(kind);
            assert_eq!(error.kind(), kind, "{error:?}");
            assert_eq!(error.gave_up(), Some(kind), "{error:?}");
            assert_eq!(error.attempts(), Some(3), "{error:?}");
        }
        // A kind no decision gives reads as attempts exhausted.
        assert_eq!(
            gave_up(ErrorKind::Withheld).kind(),
            ErrorKind::AttemptsExhausted
        );
        // A spent quota beyond the cap is the same situation as a
        // `Retry-After` beyond it.
        let quota = Error::QuotaExhausted {
            wait: 90 * S,
            cap: 60 * S,
            status: reqwest::StatusCode::OK,
            attempts: 0,
        }
        .after_attempts(2);
        assert_eq!(quota.kind(), gave_up(server_wait).kind());
        assert_eq!(quota.attempts(), Some(2));
        let open = Error::CircuitOpen {
            key: "https://api.example.com:443".into(),
            retry_in: Some(S),
            attempts: 0,
            last_status: None,
        };
        assert_eq!(
            (open.kind(), open.attempts(), open.gave_up()),
            (ErrorKind::Withheld, Some(0), None)
        );
        assert_eq!(
            Error::PriorityOutOfRange { class: 9, max: 2 }.kind(),
            ErrorKind::Config
        );
        assert_eq!(Error::not_yet(S).attempts(), None);
    }
}
