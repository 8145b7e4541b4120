//! The circuit breaker of a key: stop sending to a host that is down.
//!
//! A breaker is three named states and the evidence that moves between
//! them, as a pure function of that evidence and `now` (no clock, no I/O
//! here; the wait step asks it before a send, the adjust step tells it how
//! the send went):
//!
//! - **Closed**: calls go; consecutive failures are counted, and any
//!   answer from a working server sets the count back to zero.
//! - **Open**: calls fail at once, until the cool-down ends.
//! - **Half-open**: the cool-down is over; exactly one call (the probe)
//!   goes. Its success closes the breaker; its failure opens it again for
//!   a cool-down twice as long, up to a cap; a probe that ends with no
//!   verdict (its call dropped, an error that says nothing of the server)
//!   leaves the next call to probe.
//!
//! A failure is what says the server cannot serve: no connection, a
//! timeout, a 5xx other than 503. A 429 or a 503 is a server that is up
//! and asks to slow down, which the key's pacing already does, so it
//! counts as an answer, not a failure.

use std::time::Duration;

use tokio::time::Instant;

/// When a key's circuit breaker opens and how long it stays open: see
/// [`Scope::circuit_breaker`](crate::Scope::circuit_breaker).
///
/// The defaults suit a crawl: open after 5 consecutive failures, a first
/// cool-down of 5 s, doubled after each failed probe, up to 5 minutes.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::{CircuitBreaker, Pacer, Scope};
///
/// let breaker = CircuitBreaker::default()
///     .failures(3)
///     .cool_down(Duration::from_secs(10))
///     .max_cool_down(Duration::from_secs(600));
/// let pacer = Pacer::builder()
///     .host_scope(Scope::per_host().circuit_breaker(breaker))
///     .build()?;
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitBreaker {
    failures: u32,
    cool_down: Duration,
    max_cool_down: Duration,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        CircuitBreaker {
            failures: 5,
            cool_down: Duration::from_secs(5),
            max_cool_down: Duration::from_secs(300),
        }
    }
}

impl CircuitBreaker {
    /// Open after this many consecutive failures (default 5; at least 1).
    /// Fewer stop sooner to a dead host, at the cost of opening on a
    /// healthy one's short run of errors.
    pub fn failures(mut self, n: u32) -> Self {
        self.failures = n.max(1);
        self
    }

    /// The first cool-down, how long the breaker stays open before a probe
    /// (default 5 s). Each failed probe doubles it.
    pub fn cool_down(mut self, cool_down: Duration) -> Self {
        self.cool_down = cool_down;
        self
    }

    /// The longest cool-down (default 5 minutes): a host down for hours is
    /// still probed this often.
    pub fn max_cool_down(mut self, max: Duration) -> Self {
        self.max_cool_down = max;
        self
    }

    /// The consecutive failures that open the breaker.
    pub fn failures_to_open(&self) -> u32 {
        self.failures
    }

    /// The first cool-down.
    pub fn first_cool_down(&self) -> Duration {
        self.cool_down
    }

    /// The cool-down after `cool_down` when a probe fails: twice as long,
    /// at most the cap (never shorter than the first).
    fn next_cool_down(&self, cool_down: Duration) -> Duration {
        cool_down
            .saturating_mul(2)
            .min(self.max_cool_down)
            .max(self.cool_down)
    }
}

/// A key's circuit breaker state, as [`KeyStatus`](crate::KeyStatus) and
/// [`Event::Circuit`](crate::Event::Circuit) report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CircuitState {
    /// Calls go; `failures` in a row so far.
    #[non_exhaustive]
    Closed {
        /// Consecutive failures counted.
        failures: u32,
    },
    /// Calls fail at once with [`Error::CircuitOpen`](crate::Error::CircuitOpen)
    /// until the cool-down ends (`retry_in` from now: when reported by an
    /// event, the whole cool-down).
    #[non_exhaustive]
    Open {
        /// Time until a probe may go.
        retry_in: Duration,
    },
    /// The cool-down is over: one call probes the server (or will: the
    /// next one), the others fail at once.
    HalfOpen,
}

impl CircuitState {
    /// A short, stable name: `closed`, `open` or `half_open` (the `state`
    /// label of the breaker's metrics).
    pub fn label(&self) -> &'static str {
        match self {
            CircuitState::Closed { .. } => "closed",
            CircuitState::Open { .. } => "open",
            CircuitState::HalfOpen => "half_open",
        }
    }
}

/// How one send went, as far as the breaker is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// The server answered as a working server does (any status but a
    /// failing 5xx, a 429 and a 503 included).
    Answered,
    /// No connection, a timeout, or a 5xx other than 503.
    Failed,
    /// Nothing to say of the server (another kind of transport error).
    Unknown,
}

impl Health {
    /// The health a response of `status` shows.
    pub(crate) fn of_status(status: u16) -> Health {
        match status {
            503 => Health::Answered,
            500..=599 => Health::Failed,
            _ => Health::Answered,
        }
    }

    /// The health a transport error shows.
    pub(crate) fn of_error(error: &reqwest::Error) -> Health {
        if error.is_connect() || error.is_timeout() {
            Health::Failed
        } else {
            Health::Unknown
        }
    }
}

/// What the breaker says to a call about to be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Go, as usual.
    Pass,
    /// Go as the one probe of a half-open breaker.
    Probe,
    /// Fail at once; a probe may go after `retry_in` (`None`: a probe is
    /// in flight, and its verdict decides).
    Refuse { retry_in: Option<Duration> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant, cool_down: Duration },
    Probing { cool_down: Duration },
}

/// One key's breaker: its tuning and its state.
#[derive(Clone, Debug)]
pub(crate) struct Breaker {
    tuning: CircuitBreaker,
    state: State,
}

/// A change of state, for the events: from, to.
pub(crate) type Transition = (CircuitState, CircuitState);

impl Breaker {
    pub(crate) fn new(tuning: CircuitBreaker) -> Breaker {
        Breaker {
            tuning,
            state: State::Closed { failures: 0 },
        }
    }

    /// The state at `now`, as reported.
    pub(crate) fn state(&self, now: Instant) -> CircuitState {
        match self.state {
            State::Closed { failures } => CircuitState::Closed { failures },
            State::Open { until, .. } if until > now => CircuitState::Open {
                retry_in: until - now,
            },
            State::Open { .. } | State::Probing { .. } => CircuitState::HalfOpen,
        }
    }

    /// Whether the breaker is back where a new one starts (closed, no
    /// failure counted): its key's state may then be dropped.
    pub(crate) fn is_fresh(&self) -> bool {
        self.state == State::Closed { failures: 0 }
    }

    /// What a call about to be sent at `now` may do, without taking the
    /// probe: the wait step asks it before waiting for the key's bucket.
    pub(crate) fn peek(&self, now: Instant) -> Admission {
        match self.state {
            State::Closed { .. } => Admission::Pass,
            State::Open { until, .. } if until > now => Admission::Refuse {
                retry_in: Some(until - now),
            },
            State::Open { .. } => Admission::Probe,
            State::Probing { .. } => Admission::Refuse { retry_in: None },
        }
    }

    /// Admit a call sent at `now`: the first call after a cool-down takes
    /// the probe (the breaker is then half-open until its verdict).
    pub(crate) fn admit(&mut self, now: Instant) -> (Admission, Option<Transition>) {
        let admission = self.peek(now);
        let mut transition = None;
        if admission == Admission::Probe {
            if let State::Open { cool_down, .. } = self.state {
                self.state = State::Probing { cool_down };
                // Reported as it was: open, with no time left.
                let from = CircuitState::Open {
                    retry_in: Duration::ZERO,
                };
                transition = Some((from, CircuitState::HalfOpen));
            }
        }
        (admission, transition)
    }

    /// What a send admitted as `admission` showed at `now`. Sends admitted
    /// while closed count only while it stays closed; once open, only the
    /// probe's verdict moves the breaker.
    pub(crate) fn record(
        &mut self,
        now: Instant,
        admission: Admission,
        health: Health,
    ) -> Option<Transition> {
        let from = self.state(now);
        self.state = match (self.state, admission, health) {
            (State::Closed { failures }, Admission::Pass, Health::Failed) => {
                let failures = failures.saturating_add(1);
                if failures >= self.tuning.failures {
                    self.open(now, self.tuning.cool_down)
                } else {
                    State::Closed { failures }
                }
            }
            (State::Closed { .. }, Admission::Pass, Health::Answered) => {
                State::Closed { failures: 0 }
            }
            (State::Probing { .. }, Admission::Probe, Health::Answered) => {
                State::Closed { failures: 0 }
            }
            (State::Probing { cool_down }, Admission::Probe, Health::Failed) => {
                self.open(now, self.tuning.next_cool_down(cool_down))
            }
            (State::Probing { cool_down }, Admission::Probe, Health::Unknown) => State::Open {
                until: now,
                cool_down,
            },
            (state, _, _) => state,
        };
        let to = self.state(now);
        // A failure counted while closed is no change of state.
        (to.label() != from.label()).then_some((from, to))
    }

    /// The probe admitted as `admission` ended with no verdict (its call
    /// dropped before an answer): the next call probes.
    pub(crate) fn abandon(&mut self, now: Instant, admission: Admission) -> Option<Transition> {
        self.record(now, admission, Health::Unknown)
    }

    fn open(&self, now: Instant, cool_down: Duration) -> State {
        State::Open {
            until: super::later_by(now, cool_down),
            cool_down,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn breaker() -> Breaker {
        Breaker::new(CircuitBreaker::default().failures(3).cool_down(5 * S))
    }

    /// Send at `now` and record `health`; returns the admission.
    fn send(b: &mut Breaker, now: Instant, health: Health) -> Admission {
        let (admission, _) = b.admit(now);
        if !matches!(admission, Admission::Refuse { .. }) {
            b.record(now, admission, health);
        }
        admission
    }

    #[test]
    fn opens_after_the_consecutive_failures_and_an_answer_resets_the_count() {
        let t = Instant::now();
        let mut b = breaker();
        send(&mut b, t, Health::Failed);
        send(&mut b, t, Health::Failed);
        assert_eq!(b.state(t), CircuitState::Closed { failures: 2 });
        // A 429 or a 503 is an answer: the count starts again.
        send(&mut b, t, Health::of_status(503));
        assert_eq!(b.state(t), CircuitState::Closed { failures: 0 });
        send(&mut b, t, Health::of_status(500));
        send(&mut b, t, Health::of_status(502));
        assert_eq!(b.state(t), CircuitState::Closed { failures: 2 });
        let (admission, _) = b.admit(t);
        assert_eq!(
            b.record(t, admission, Health::Failed),
            Some((
                CircuitState::Closed { failures: 2 },
                CircuitState::Open { retry_in: 5 * S }
            ))
        );
        assert_eq!(
            b.admit(t + S).0,
            Admission::Refuse {
                retry_in: Some(4 * S)
            }
        );
    }

    #[test]
    fn one_probe_after_the_cool_down_and_its_success_closes() {
        let t = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            send(&mut b, t, Health::Failed);
        }
        assert_eq!(b.state(t + 5 * S), CircuitState::HalfOpen);
        let (probe, transition) = b.admit(t + 5 * S);
        assert_eq!(probe, Admission::Probe);
        assert_eq!(
            transition,
            Some((
                CircuitState::Open {
                    retry_in: Duration::ZERO
                },
                CircuitState::HalfOpen
            ))
        );
        // Every other call fails while the probe is out.
        assert_eq!(b.admit(t + 6 * S).0, Admission::Refuse { retry_in: None });
        assert_eq!(
            b.record(t + 7 * S, probe, Health::Answered),
            Some((CircuitState::HalfOpen, CircuitState::Closed { failures: 0 }))
        );
        assert!(b.is_fresh());
        assert_eq!(b.admit(t + 7 * S).0, Admission::Pass);
    }

    #[test]
    fn each_failed_probe_doubles_the_cool_down_up_to_the_cap() {
        let t = Instant::now();
        let mut b = Breaker::new(
            CircuitBreaker::default()
                .failures(1)
                .cool_down(5 * S)
                .max_cool_down(30 * S),
        );
        send(&mut b, t, Health::Failed);
        let mut now = t;
        let mut cool_downs = Vec::new();
        for _ in 0..5 {
            let CircuitState::Open { retry_in } = b.state(now) else {
                panic!("open");
            };
            cool_downs.push(retry_in.as_secs());
            now += retry_in;
            // Nothing goes a moment before the end.
            assert!(matches!(
                b.peek(now - Duration::from_millis(1)),
                Admission::Refuse { .. }
            ));
            assert_eq!(send(&mut b, now, Health::Failed), Admission::Probe);
        }
        assert_eq!(cool_downs, [5, 10, 20, 30, 30]);
    }

    #[test]
    fn sends_from_before_it_opened_do_not_move_it() {
        let t = Instant::now();
        let mut b = breaker();
        let late: Vec<_> = (0..4).map(|_| b.admit(t).0).collect();
        for &a in &late[..3] {
            b.record(t, a, Health::Failed);
        }
        // The fourth, sent while closed, answers once it is open.
        assert_eq!(b.record(t + S, late[3], Health::Answered), None);
        assert_eq!(b.state(t + S), CircuitState::Open { retry_in: 4 * S });
        let (probe, _) = b.admit(t + 5 * S);
        // A send admitted before the probe fails after it: no change.
        assert_eq!(b.record(t + 5 * S, late[0], Health::Failed), None);
        assert_eq!(b.state(t + 5 * S), CircuitState::HalfOpen);
        assert_eq!(probe, Admission::Probe);
    }

    #[test]
    fn an_abandoned_probe_leaves_the_next_call_to_probe() {
        let t = Instant::now();
        let mut b = breaker();
        for _ in 0..3 {
            send(&mut b, t, Health::Failed);
        }
        let (probe, _) = b.admit(t + 5 * S);
        assert_eq!(b.abandon(t + 6 * S, probe), None, "still half-open");
        assert_eq!(b.admit(t + 6 * S).0, Admission::Probe);
    }

    #[test]
    fn health_of_statuses() {
        assert_eq!(Health::of_status(200), Health::Answered);
        assert_eq!(Health::of_status(404), Health::Answered);
        assert_eq!(Health::of_status(429), Health::Answered);
        assert_eq!(Health::of_status(503), Health::Answered);
        assert_eq!(Health::of_status(500), Health::Failed);
        assert_eq!(Health::of_status(502), Health::Failed);
        assert_eq!(Health::of_status(504), Health::Failed);
    }
}
