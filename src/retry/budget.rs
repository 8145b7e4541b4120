//! A retry budget, so a failing upstream is not hit by a retry storm.

use std::fmt;
use std::sync::Mutex;

/// Retry throttling as gRPC specifies it (gRFC A6, "retry throttling"),
/// shared by every request of a client.
///
/// The budget holds tokens, starting full at `max_tokens`. Every failed
/// attempt (a retryable status or transport error) takes one token; every
/// success gives back `token_ratio`. Retries are allowed only while more than
/// half of `max_tokens` is left. When an upstream fails outright, the budget
/// drains after `max_tokens / 2` failures and from then on a retry is only
/// possible after `1 / token_ratio` successes: retries are capped at about
/// `token_ratio` of regular traffic, so a fleet of clients cannot multiply
/// an outage. When the upstream recovers, successes refill the budget and
/// retries resume.
///
/// ```
/// use reqwest_pace::retry::RetryBudget;
///
/// let budget = RetryBudget::new(10.0, 0.1)?;
/// for _ in 0..5 {
///     budget.record_failure();
/// }
/// assert!(!budget.can_retry(), "half the tokens are gone");
/// for _ in 0..10 {
///     budget.record_success();
/// }
/// assert!(budget.can_retry(), "ten successes earned one retry");
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
pub struct RetryBudget {
    max_tokens: f64,
    token_ratio: f64,
    tokens: Mutex<f64>,
}

impl Default for RetryBudget {
    /// gRPC's usual settings: 10 tokens, a tenth of a token back per
    /// success; the client's default budget.
    fn default() -> Self {
        RetryBudget {
            max_tokens: 10.0,
            token_ratio: 0.1,
            tokens: Mutex::new(10.0),
        }
    }
}

impl RetryBudget {
    /// A budget of `max_tokens` (gRPC allows 0 < max ≤ 1000), refilled by
    /// `token_ratio` per success (0 < ratio ≤ 1).
    pub fn new(max_tokens: f64, token_ratio: f64) -> Result<Self, crate::Error> {
        if !(max_tokens > 0.0 && max_tokens <= 1000.0) {
            return Err(crate::Error::config(format!(
                "retry budget max_tokens must be in (0, 1000], not {max_tokens}"
            )));
        }
        if !(token_ratio > 0.0 && token_ratio <= 1.0) {
            return Err(crate::Error::config(format!(
                "retry budget token_ratio must be in (0, 1], not {token_ratio}"
            )));
        }
        Ok(RetryBudget {
            max_tokens,
            token_ratio,
            tokens: Mutex::new(max_tokens),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut f64) -> R) -> R {
        f(&mut crate::sync::lock(&self.tokens))
    }

    /// A failed attempt: one token less.
    pub fn record_failure(&self) {
        self.with(|t| *t = (*t - 1.0).max(0.0));
    }

    /// A successful response: `token_ratio` back.
    pub fn record_success(&self) {
        let (max, ratio) = (self.max_tokens, self.token_ratio);
        self.with(|t| *t = (*t + ratio).min(max));
    }

    /// Whether a retry may go now (more than half the tokens are left).
    pub fn can_retry(&self) -> bool {
        let half = self.max_tokens / 2.0;
        self.with(|t| *t > half)
    }

    /// Tokens left.
    pub fn tokens(&self) -> f64 {
        self.with(|t| *t)
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("max_tokens", &self.max_tokens)
            .field("token_ratio", &self.token_ratio)
            .field("tokens", &self.tokens())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_errors() {
        assert!(RetryBudget::new(0.0, 0.1).is_err());
        assert!(RetryBudget::new(f64::NAN, 0.1).is_err());
        assert!(RetryBudget::new(10.0, 0.0).is_err());
        assert!(RetryBudget::new(10.0, 1.5).is_err());
    }

    #[test]
    fn a_total_outage_caps_retries_to_the_ratio_of_successes() {
        let budget = RetryBudget::new(10.0, 0.1).unwrap();
        let mut retries = 0;
        // 1000 requests, all failing, each wanting to retry.
        for _ in 0..1000 {
            budget.record_failure();
            if budget.can_retry() {
                retries += 1;
                budget.record_failure();
            }
        }
        // Only the initial allowance: 10 tokens, retries stop at 5.
        assert_eq!(retries, 2);
        assert_eq!(budget.tokens(), 0.0);
    }
}
