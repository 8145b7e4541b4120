//! The retry decision: one pure function of what an attempt left behind.
//!
//! The send loop asks one question after every attempt, as reqwest-retry
//! asks its policy `should_retry` and tower its `Policy::retry`: given the
//! attempt, its outcome, what the server asked for, the time left and the
//! budget, retry after which delay, or give up for which reason? Nothing
//! here sleeps, reads a clock or draws a random number: the draw is an
//! input, so every row of the decision table is a plain test.

use std::time::Duration;

use reqwest::Method;

use super::{Outcome, ReleaseJitter, RetryPolicy};

/// Why a call stopped retrying: the one reason type of
/// [`Event::GaveUp`](crate::Event::GaveUp) and of the [`Error`](crate::Error)
/// the call returns (see [`Error::gave_up`](crate::Error::gave_up)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GiveUp {
    /// The classifier said the failure is final (a transport error that
    /// retrying will not mend).
    #[error("the failure is not retryable")]
    NotRetryable,
    /// The server asked for a wait longer than the policy's
    /// [`max_retry_after`](RetryPolicy::max_retry_after).
    #[error("the server asked for {wait:?}, over the cap of {cap:?}")]
    #[non_exhaustive]
    ServerWaitTooLong {
        /// The wait the server asked for.
        wait: Duration,
        /// The policy's cap.
        cap: Duration,
    },
    /// The method is not idempotent and the policy does not retry such
    /// methods.
    #[error("the method is not idempotent")]
    NotIdempotent,
    /// Every attempt the policy allows has been made.
    #[error("attempts exhausted")]
    AttemptsExhausted,
    /// The body is a stream, which cannot be sent again.
    #[error("the body cannot be cloned")]
    BodyNotCloneable,
    /// A wait (a retry's delay, a bucket's, a server's block) would end
    /// past the call's time limit (its deadline, or the policy's
    /// `max_elapsed` from the first send).
    #[error("a wait would pass the time limit of {limit:?}")]
    #[non_exhaustive]
    TimeLimit {
        /// How long the wait would have been, when known.
        wait: Option<Duration>,
        /// The limit it would have passed.
        limit: Duration,
    },
    /// The retry budget is spent: many calls are failing, and retrying
    /// would add to the upstream's load.
    #[error("the retry budget is spent")]
    BudgetExhausted,
}

impl GiveUp {
    /// A short, stable name for the reason, without its fields: the
    /// `reason` label of the `reqwest_pace_gave_up_total` metric (feature
    /// `metrics`), and a key to count give-ups by.
    ///
    /// ```
    /// use reqwest_pace::retry::GiveUp;
    ///
    /// assert_eq!(GiveUp::AttemptsExhausted.label(), "attempts_exhausted");
    /// ```
    pub fn label(&self) -> &'static str {
        match self {
            GiveUp::NotRetryable => "not_retryable",
            GiveUp::ServerWaitTooLong { .. } => "server_wait_too_long",
            GiveUp::NotIdempotent => "not_idempotent",
            GiveUp::AttemptsExhausted => "attempts_exhausted",
            GiveUp::BodyNotCloneable => "body_not_cloneable",
            GiveUp::TimeLimit { .. } => "time_limit",
            GiveUp::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// `Retry-After` counts whole seconds: a shorter wait says only that the
/// server's own wait ends within a second.
const RETRY_AFTER_RESOLUTION: Duration = Duration::from_secs(1);

/// What the decision knows of one attempt.
#[derive(Clone, Copy, Debug)]
pub struct Attempted<'a> {
    /// The attempt's number, the first being 1.
    pub number: u32,
    /// How the policy classified its result.
    pub outcome: Outcome,
    /// The request's method.
    pub method: &'a Method,
    /// Whether the request can be sent again (its body can be cloned).
    pub replayable: bool,
    /// The wait the server asked for (a believable `Retry-After`), if any.
    pub server_wait: Option<Duration>,
    /// The time left before the call's time limit, and that limit.
    pub time_left: Option<(Duration, Duration)>,
    /// Whether the retry budget would pay for a retry on the backoff
    /// schedule; `None` when no budget applies. A retry the server invited
    /// (with `server_wait`) spends none.
    pub budget_allows: Option<bool>,
    /// The delay slept before this attempt, for decorrelated jitter.
    pub previous_delay: Option<Duration>,
    /// A uniform draw in `[0, 1)` for the backoff's or the release's
    /// jitter.
    pub draw: f64,
}

/// What to do after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Return the attempt's result as it is: a success, or a failure the
    /// classifier says is final (a 404 is returned as a response, a final
    /// transport error gives up with [`GiveUp::NotRetryable`]).
    Return,
    /// Sleep `delay`, then send again.
    #[non_exhaustive]
    Retry {
        /// How long to sleep.
        delay: Duration,
        /// Whether the server named the delay (`Retry-After`) rather than
        /// the backoff schedule.
        from_server: bool,
    },
    /// Stop, and fail the call for this reason.
    GiveUp(GiveUp),
}

impl RetryPolicy {
    /// The retry decision after `attempt`, releasing a server's wait with
    /// `jitter`: a pure function of its inputs.
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest::Method;
    /// use reqwest_pace::retry::{Attempted, Decision, GiveUp, Outcome, ReleaseJitter, RetryPolicy};
    ///
    /// let policy = RetryPolicy::default();
    /// let attempt = Attempted {
    ///     number: 1,
    ///     outcome: Outcome::Retryable,
    ///     method: &Method::GET,
    ///     replayable: true,
    ///     server_wait: Some(Duration::from_secs(2)),
    ///     time_left: None,
    ///     budget_allows: None,
    ///     previous_delay: None,
    ///     draw: 0.0,
    /// };
    /// assert!(matches!(
    ///     policy.decide(&attempt, ReleaseJitter::default()),
    ///     Decision::Retry { delay, from_server: true, .. } if delay == Duration::from_secs(2)
    /// ));
    /// let last = Attempted { number: 4, ..attempt };
    /// assert_eq!(
    ///     policy.decide(&last, ReleaseJitter::default()),
    ///     Decision::GiveUp(GiveUp::AttemptsExhausted)
    /// );
    /// ```
    pub fn decide(&self, attempt: &Attempted<'_>, jitter: ReleaseJitter) -> Decision {
        if attempt.outcome != Outcome::Retryable {
            return Decision::Return;
        }
        if let Some(reason) = self.refusal(attempt) {
            return Decision::GiveUp(reason);
        }
        let backoff = || {
            self.backoff().delay(
                attempt.number.saturating_sub(1),
                attempt.previous_delay,
                attempt.draw,
            )
        };
        let delay = match attempt.server_wait {
            // A wait under a second is below `Retry-After`'s resolution of
            // whole seconds (a `0` is a wait rounded down, not an
            // invitation to retry at once): no sooner than the backoff.
            Some(wait) if wait < RETRY_AFTER_RESOLUTION => {
                (wait + jitter.extra(wait, attempt.draw)).max(backoff())
            }
            Some(wait) => wait + jitter.extra(wait, attempt.draw),
            None => backoff(),
        };
        if let Some((left, limit)) = attempt.time_left {
            if delay > left {
                return Decision::GiveUp(GiveUp::TimeLimit {
                    wait: Some(delay),
                    limit,
                });
            }
        }
        if attempt.server_wait.is_none() && attempt.budget_allows == Some(false) {
            return Decision::GiveUp(GiveUp::BudgetExhausted);
        }
        Decision::Retry {
            delay,
            from_server: attempt.server_wait.is_some(),
        }
    }

    /// The reasons to give up that do not depend on the delay.
    fn refusal(&self, attempt: &Attempted<'_>) -> Option<GiveUp> {
        let cap = self.max_retry_after();
        if let Some(wait) = attempt.server_wait.filter(|w| *w > cap) {
            return Some(GiveUp::ServerWaitTooLong { wait, cap });
        }
        if !self.allows_method(attempt.method) {
            return Some(GiveUp::NotIdempotent);
        }
        if attempt.number >= self.max_attempts() {
            return Some(GiveUp::AttemptsExhausted);
        }
        if !attempt.replayable {
            return Some(GiveUp::BodyNotCloneable);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{Backoff, Jitter};

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    fn failed(number: u32) -> Attempted<'static> {
        Attempted {
            number,
            outcome: Outcome::Retryable,
            method: &Method::GET,
            replayable: true,
            server_wait: None,
            time_left: None,
            budget_allows: None,
            previous_delay: None,
            draw: 0.5,
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
            .with_backoff(Backoff::exponential(100 * MS).with_jitter(Jitter::None))
            .with_max_retry_after(60 * S)
    }

    fn retry(delay: Duration, from_server: bool) -> Decision {
        Decision::Retry { delay, from_server }
    }

    /// The decision table, row by row: each input that changes the answer,
    /// against the plain retryable failure of the first row.
    #[test]
    fn the_decision_table() {
        let p = policy();
        let none = ReleaseJitter::none();
        let post = Method::POST;
        let rows: Vec<(&str, Attempted<'_>, Decision)> = vec![
            ("backoff", failed(1), retry(100 * MS, false)),
            ("backoff grows", failed(3), retry(400 * MS, false)),
            (
                "success",
                Attempted {
                    outcome: Outcome::Success,
                    ..failed(1)
                },
                Decision::Return,
            ),
            (
                "final",
                Attempted {
                    outcome: Outcome::Fatal,
                    ..failed(1)
                },
                Decision::Return,
            ),
            (
                "server's wait first",
                Attempted {
                    server_wait: Some(2 * S),
                    ..failed(1)
                },
                retry(2 * S, true),
            ),
            (
                "server's wait over the cap",
                Attempted {
                    server_wait: Some(61 * S),
                    ..failed(1)
                },
                Decision::GiveUp(GiveUp::ServerWaitTooLong {
                    wait: 61 * S,
                    cap: 60 * S,
                }),
            ),
            (
                "not idempotent",
                Attempted {
                    method: &post,
                    ..failed(1)
                },
                Decision::GiveUp(GiveUp::NotIdempotent),
            ),
            (
                "last attempt",
                failed(4),
                Decision::GiveUp(GiveUp::AttemptsExhausted),
            ),
            (
                "stream body",
                Attempted {
                    replayable: false,
                    ..failed(1)
                },
                Decision::GiveUp(GiveUp::BodyNotCloneable),
            ),
            (
                "delay past the limit",
                Attempted {
                    time_left: Some((99 * MS, 5 * S)),
                    ..failed(1)
                },
                Decision::GiveUp(GiveUp::TimeLimit {
                    wait: Some(100 * MS),
                    limit: 5 * S,
                }),
            ),
            (
                "delay exactly to the limit",
                Attempted {
                    time_left: Some((100 * MS, 5 * S)),
                    ..failed(1)
                },
                retry(100 * MS, false),
            ),
            (
                "budget spent",
                Attempted {
                    budget_allows: Some(false),
                    ..failed(1)
                },
                Decision::GiveUp(GiveUp::BudgetExhausted),
            ),
            (
                "budget spent, but the server invited the retry",
                Attempted {
                    budget_allows: Some(false),
                    server_wait: Some(S),
                    ..failed(1)
                },
                retry(S, true),
            ),
        ];
        for (name, attempt, expected) in rows {
            assert_eq!(p.decide(&attempt, none), expected, "{name}");
        }
    }

    /// Every reason has its own label, and a reason's fields do not change
    /// it (a metric's label set stays small).
    #[test]
    fn each_reason_has_its_own_label() {
        let reasons = [
            GiveUp::NotRetryable,
            GiveUp::ServerWaitTooLong { wait: S, cap: S },
            GiveUp::NotIdempotent,
            GiveUp::AttemptsExhausted,
            GiveUp::BodyNotCloneable,
            GiveUp::TimeLimit {
                wait: None,
                limit: S,
            },
            GiveUp::BudgetExhausted,
        ];
        let labels: std::collections::HashSet<_> = reasons.iter().map(GiveUp::label).collect();
        assert_eq!(labels.len(), reasons.len());
        let longer = GiveUp::ServerWaitTooLong {
            wait: 9 * S,
            cap: 2 * S,
        };
        assert_eq!(longer.label(), "server_wait_too_long");
    }

    /// The release jitter lengthens a server's wait by the draw's share and
    /// never shortens it; the backoff's own jitter is the policy's.
    #[test]
    fn the_jitter_lengthens_only_the_servers_wait() {
        let p = policy();
        let jitter = ReleaseJitter::new(0.1, S).unwrap();
        let told = Attempted {
            server_wait: Some(2 * S),
            draw: 0.5,
            ..failed(1)
        };
        assert_eq!(p.decide(&told, jitter), retry(2 * S + 100 * MS, true));
        let zero = Attempted { draw: 0.0, ..told };
        assert_eq!(p.decide(&zero, jitter), retry(2 * S, true));
        // The backoff delay has no release jitter.
        assert_eq!(p.decide(&failed(1), jitter), retry(100 * MS, false));
    }

    /// The jittered delay is what is checked against the time limit.
    #[test]
    fn the_jittered_delay_is_held_to_the_time_limit() {
        let p = policy();
        let jitter = ReleaseJitter::new(0.1, S).unwrap();
        let attempt = Attempted {
            server_wait: Some(2 * S),
            draw: 0.5,
            time_left: Some((2 * S, 10 * S)),
            ..failed(1)
        };
        assert_eq!(
            p.decide(&attempt, jitter),
            Decision::GiveUp(GiveUp::TimeLimit {
                wait: Some(2 * S + 100 * MS),
                limit: 10 * S
            })
        );
    }

    /// A `Retry-After: 0` (a wait under a second, rounded down) is waited
    /// no sooner than the backoff: the retries are not spent at once.
    #[test]
    fn a_server_wait_under_its_resolution_is_no_sooner_than_the_backoff() {
        let p = policy();
        let jitter = ReleaseJitter::new(0.1, S).unwrap();
        for number in 1..4 {
            let told = Attempted {
                server_wait: Some(Duration::ZERO),
                ..failed(number)
            };
            let backoff = p.decide(&failed(number), jitter);
            let Decision::Retry { delay, .. } = backoff else {
                panic!("retried: {backoff:?}");
            };
            assert!(delay >= 100 * MS);
            assert_eq!(p.decide(&told, jitter), retry(delay, true));
        }
        // A whole second or more is the server's, as it said.
        let second = Attempted {
            server_wait: Some(S),
            draw: 0.0,
            ..failed(3)
        };
        assert_eq!(p.decide(&second, jitter), retry(S, true));
    }
}
