//! What counts as retryable, and the limits on retrying.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, Response, StatusCode};

use super::Backoff;

/// What to do with one attempt's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// A success: return it (and count it as success for the budget and
    /// for additive rate increase).
    Success,
    /// A transient failure: retry if the policy and budget allow.
    Retryable,
    /// A final failure: return it as is (a response is returned as `Ok`, a
    /// transport error as `Err`), no retry.
    Fatal,
}

/// Decides whether an attempt's result is retried.
///
/// Any `Fn(Result<&Response, &reqwest::Error>) -> Outcome` is a classifier.
pub trait Classifier: Send + Sync + 'static {
    /// Classify one attempt's result.
    fn classify(&self, result: Result<&Response, &reqwest::Error>) -> Outcome;
}

impl<F> Classifier for F
where
    F: Fn(Result<&Response, &reqwest::Error>) -> Outcome + Send + Sync + 'static,
{
    fn classify(&self, result: Result<&Response, &reqwest::Error>) -> Outcome {
        self(result)
    }
}

/// The default classification: 2xx/3xx succeed; 429, 502, 503 and 504 are
/// retryable, and so is a 403 that is a rate limit by
/// [`RateLimitSignal::is_throttled`](crate::headers::RateLimitSignal::is_throttled)
/// (GitHub's secondary limit: a `Retry-After`, or nothing remaining), and
/// so are connect errors and timeouts; everything else is final.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultClassifier;

impl DefaultClassifier {
    /// Classify a status code by the default rules.
    pub fn status(status: StatusCode) -> Outcome {
        match status.as_u16() {
            429 | 502 | 503 | 504 => Outcome::Retryable,
            _ if status.is_success() || status.is_redirection() || status.is_informational() => {
                Outcome::Success
            }
            _ => Outcome::Fatal,
        }
    }
}

impl Classifier for DefaultClassifier {
    fn classify(&self, result: Result<&Response, &reqwest::Error>) -> Outcome {
        match result {
            Ok(response) if response.status() == StatusCode::FORBIDDEN => {
                if crate::headers::RateLimitSignal::from_response(response).is_throttled() {
                    Outcome::Retryable
                } else {
                    Outcome::Fatal
                }
            }
            Ok(response) => DefaultClassifier::status(response.status()),
            Err(e) if e.is_connect() || e.is_timeout() => Outcome::Retryable,
            Err(_) => Outcome::Fatal,
        }
    }
}

/// How, and how far, failed requests are retried.
///
/// Defaults: 4 attempts in all, at most 60 s from the first send, a
/// server-requested wait (Retry-After) of at most 60 s (longer is returned at
/// once as [`Error::RetryAfterTooLong`](crate::Error::RetryAfterTooLong)),
/// [`Backoff::default`] (100 ms doubling, full jitter, 20 s cap) when the
/// server gives no wait, the [`DefaultClassifier`], and only idempotent
/// methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) are retried.
///
/// A server's Retry-After always takes precedence over the backoff.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::retry::{Backoff, BackoffJitter, RetryRules};
///
/// let policy = RetryRules::default()
///     .with_max_attempts(6)
///     .with_max_elapsed(Duration::from_secs(30))
///     .with_backoff(Backoff::exponential(Duration::from_millis(50)).with_jitter(BackoffJitter::Equal))
///     .with_retry_non_idempotent(true);
/// assert_eq!(policy.max_attempts(), 6);
/// ```
#[derive(Clone)]
pub struct RetryRules {
    max_attempts: u32,
    max_elapsed: Option<Duration>,
    max_retry_after: Duration,
    backoff: Backoff,
    retry_non_idempotent: bool,
    classifier: Arc<dyn Classifier>,
}

impl Default for RetryRules {
    fn default() -> Self {
        RetryRules {
            max_attempts: 4,
            max_elapsed: Some(Duration::from_secs(60)),
            max_retry_after: Duration::from_secs(60),
            backoff: Backoff::default(),
            retry_non_idempotent: false,
            classifier: Arc::new(DefaultClassifier),
        }
    }
}

impl RetryRules {
    /// Never retry: every request is sent once (it is still paced).
    pub fn never() -> Self {
        RetryRules::default().with_max_attempts(1)
    }

    /// Attempts in all, the first included (at least 1). A client that
    /// paces (`ThrottledClient`, `PaceMiddleware`, the tower layer) does
    /// not count a refusal its key's model paces (a 429 or 503 from a
    /// server that admitted the key before, after which the key goes
    /// slower): that is the pacing's miss, not the call's failure. Such
    /// refusals are free up to this many again; the call's time limit
    /// bounds them as it bounds every wait.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// No retry is scheduled whose sleep would end later than this after
    /// the first send; `None` for no time limit. It bounds the sleeps, not
    /// the pacing: a retry that then waits for its bucket may go later.
    pub fn with_max_elapsed(mut self, limit: impl Into<Option<Duration>>) -> Self {
        self.max_elapsed = limit.into();
        self
    }

    /// The longest server-requested wait the client will sleep for.
    pub fn with_max_retry_after(mut self, cap: Duration) -> Self {
        self.max_retry_after = cap;
        self
    }

    /// The schedule used when the server does not say how long to wait.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Retry POST, PATCH and other non-idempotent methods too. Only do this
    /// when the server deduplicates (an idempotency key) or a duplicate is
    /// harmless.
    pub fn with_retry_non_idempotent(mut self, yes: bool) -> Self {
        self.retry_non_idempotent = yes;
        self
    }

    /// Replace the classification.
    pub fn with_classifier(mut self, classifier: impl Classifier) -> Self {
        self.classifier = Arc::new(classifier);
        self
    }

    /// Attempts in all.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Time limit for starting retries.
    pub fn max_elapsed(&self) -> Option<Duration> {
        self.max_elapsed
    }

    /// The longest server-requested wait honoured.
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// The backoff schedule.
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// Classify an attempt's result.
    pub fn classify(&self, result: Result<&Response, &reqwest::Error>) -> Outcome {
        self.classifier.classify(result)
    }

    /// Whether a request with this method may be retried.
    pub fn allows_method(&self, method: &Method) -> bool {
        self.retry_non_idempotent || is_idempotent(method)
    }
}

/// Idempotent per RFC 9110 §9.2.2.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

impl fmt::Debug for RetryRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryRules")
            .field("max_attempts", &self.max_attempts)
            .field("max_elapsed", &self.max_elapsed)
            .field("max_retry_after", &self.max_retry_after)
            .field("backoff", &self.backoff)
            .field("retry_non_idempotent", &self.retry_non_idempotent)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_statuses() {
        for code in [429, 502, 503, 504] {
            let s = StatusCode::from_u16(code).unwrap();
            assert_eq!(DefaultClassifier::status(s), Outcome::Retryable, "{code}");
        }
        for code in [200, 201, 204, 304] {
            let s = StatusCode::from_u16(code).unwrap();
            assert_eq!(DefaultClassifier::status(s), Outcome::Success, "{code}");
        }
        for code in [400, 401, 403, 404, 500, 501] {
            let s = StatusCode::from_u16(code).unwrap();
            assert_eq!(DefaultClassifier::status(s), Outcome::Fatal, "{code}");
        }
    }

    #[test]
    fn only_idempotent_methods_by_default() {
        let p = RetryRules::default();
        assert!(p.allows_method(&Method::GET));
        assert!(p.allows_method(&Method::PUT));
        assert!(!p.allows_method(&Method::POST));
        assert!(!p.allows_method(&Method::PATCH));
        assert!(RetryRules::default()
            .with_retry_non_idempotent(true)
            .allows_method(&Method::POST));
    }
}
