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

use super::{Outcome, ReleaseJitter, RetryRules};
use crate::error::{ErrorKind, NotRetriedReason};

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
    /// transport error gives up with [`ErrorKind::Transport`]).
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
    /// Stop, and fail the call with an error of this kind (its
    /// [`Error::kind`](crate::Error::kind), and what the call's
    /// [`Event::GaveUp`](crate::Event::GaveUp) says).
    GiveUp(ErrorKind),
}

impl RetryRules {
    /// The retry decision after `attempt`, releasing a server's wait with
    /// `jitter`: a pure function of its inputs.
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest::Method;
    /// use reqwest_pace::ErrorKind;
    /// use reqwest_pace::retry::{Attempted, Decision, Outcome, ReleaseJitter, RetryRules};
    ///
    /// let policy = RetryRules::default();
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
    ///     Decision::GiveUp(ErrorKind::AttemptsExhausted)
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
                return Decision::GiveUp(ErrorKind::TimeLimit {
                    wait: Some(delay),
                    limit,
                });
            }
        }
        if attempt.server_wait.is_none() && attempt.budget_allows == Some(false) {
            return Decision::GiveUp(ErrorKind::BudgetExhausted);
        }
        Decision::Retry {
            delay,
            from_server: attempt.server_wait.is_some(),
        }
    }

    /// The reasons to give up that do not depend on the delay.
    fn refusal(&self, attempt: &Attempted<'_>) -> Option<ErrorKind> {
        let cap = self.max_retry_after();
        if let Some(wait) = attempt.server_wait.filter(|w| *w > cap) {
            return Some(ErrorKind::ServerWait { wait, cap });
        }
        if !self.allows_method(attempt.method) {
            return Some(ErrorKind::NotRetried {
                reason: NotRetriedReason::NonIdempotent,
            });
        }
        if attempt.number >= self.max_attempts() {
            return Some(ErrorKind::AttemptsExhausted);
        }
        if !attempt.replayable {
            return Some(ErrorKind::NotRetried {
                reason: NotRetriedReason::BodyNotCloneable,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::{Backoff, BackoffJitter};

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

    fn policy() -> RetryRules {
        RetryRules::default()
            .with_backoff(Backoff::exponential(100 * MS).with_jitter(BackoffJitter::None))
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
                Decision::GiveUp(ErrorKind::ServerWait {
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
                Decision::GiveUp(ErrorKind::NotRetried {
                    reason: NotRetriedReason::NonIdempotent,
                }),
            ),
            (
                "last attempt",
                failed(4),
                Decision::GiveUp(ErrorKind::AttemptsExhausted),
            ),
            (
                "stream body",
                Attempted {
                    replayable: false,
                    ..failed(1)
                },
                Decision::GiveUp(ErrorKind::NotRetried {
                    reason: NotRetriedReason::BodyNotCloneable,
                }),
            ),
            (
                "delay past the limit",
                Attempted {
                    time_left: Some((99 * MS, 5 * S)),
                    ..failed(1)
                },
                Decision::GiveUp(ErrorKind::TimeLimit {
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
                Decision::GiveUp(ErrorKind::BudgetExhausted),
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

    /// Every kind a decision gives has its own label, and a kind's fields
    /// do not change it (a metric's label set stays small).
    #[test]
    fn each_kind_given_up_for_has_its_own_label() {
        let kinds = [
            ErrorKind::Transport,
            ErrorKind::ServerWait { wait: S, cap: S },
            ErrorKind::NotRetried {
                reason: NotRetriedReason::NonIdempotent,
            },
            ErrorKind::AttemptsExhausted,
            ErrorKind::TimeLimit {
                wait: None,
                limit: S,
            },
            ErrorKind::BudgetExhausted,
        ];
        let labels: std::collections::HashSet<_> = kinds.iter().map(ErrorKind::label).collect();
        assert_eq!(labels.len(), kinds.len());
        let longer = ErrorKind::ServerWait {
            wait: 9 * S,
            cap: 2 * S,
        };
        assert_eq!(longer.label(), "server_wait");
        let stream = ErrorKind::NotRetried {
            reason: NotRetriedReason::BodyNotCloneable,
        };
        assert_eq!(stream.label(), "not_retried");
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
            Decision::GiveUp(ErrorKind::TimeLimit {
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
