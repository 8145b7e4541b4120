//! Latency-aware politeness for hosts that say nothing of their limit:
//! keep a key's requests in flight near a target, from its measured
//! latency, as Scrapy's AutoThrottle does.
//!
//! By Little's law a host answering in `L` that receives one request every
//! `L / n` has `n` requests in flight. So each response moves the key's
//! delay between sends toward `latency / target_in_flight`: a host that
//! slows down under load (latency climbing with the requests it holds)
//! gets fewer requests at once, and one that speeds up gets more. The
//! delay is the average of the old one and the new target, but never
//! below the target (a slowing host is slowed at once); an error answer
//! (any status but 2xx and 3xx) may raise it, never lower it. Pure
//! arithmetic; the wait step spaces the key's sends by the delay, after
//! its bucket, so the key never goes faster than its bucket allows
//! either (a configured ceiling, or what the server's headers taught).

use std::time::Duration;

/// Latency-aware politeness: see [`Scope::auto_throttle`](crate::Scope::auto_throttle).
///
/// Defaults: a target of 1 request in flight per key, a first delay of
/// 1 s (until the first response), between 0 and 60 s.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::{AutoThrottle, Pacer, Scope};
///
/// let politeness = AutoThrottle::default()
///     .target_in_flight(2.0)
///     .max_delay(Duration::from_secs(10));
/// let pacer = Pacer::builder()
///     .host_scope(Scope::per_host().auto_throttle(politeness))
///     .build()?;
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoThrottle {
    target_in_flight: f64,
    start_delay: Duration,
    min_delay: Duration,
    max_delay: Duration,
}

impl Default for AutoThrottle {
    fn default() -> Self {
        AutoThrottle {
            target_in_flight: 1.0,
            start_delay: Duration::from_secs(1),
            min_delay: Duration::ZERO,
            max_delay: Duration::from_secs(60),
        }
    }
}

impl AutoThrottle {
    /// How many requests of a key to keep in flight on average (default
    /// 1.0; above 0). Higher is faster and harder on a host that slows
    /// down under load.
    pub fn target_in_flight(mut self, target: f64) -> Self {
        self.target_in_flight = target;
        self
    }

    /// The delay between a key's sends until its first response is in
    /// (default 1 s); the first response then sets it to its target.
    pub fn start_delay(mut self, delay: Duration) -> Self {
        self.start_delay = delay;
        self
    }

    /// The shortest delay (default none).
    pub fn min_delay(mut self, delay: Duration) -> Self {
        self.min_delay = delay;
        self
    }

    /// The longest delay (default 60 s): a host that takes a minute to
    /// answer still gets a request a minute.
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(self.target_in_flight.is_finite() && self.target_in_flight > 0.0) {
            return Err(format!(
                "auto_throttle: target_in_flight must be above 0, not {}",
                self.target_in_flight
            ));
        }
        if self.min_delay > self.max_delay {
            return Err("auto_throttle: min_delay is above max_delay".to_owned());
        }
        Ok(())
    }

    pub(crate) fn first_delay(&self) -> Duration {
        self.clamp(self.start_delay)
    }

    fn clamp(&self, delay: Duration) -> Duration {
        delay.clamp(self.min_delay, self.max_delay)
    }
}

/// A key's delay between sends, and whether a response has set it yet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Politeness {
    tuning: AutoThrottle,
    pub(crate) delay: Duration,
    measured: bool,
}

impl Politeness {
    pub(crate) fn new(tuning: AutoThrottle) -> Self {
        Politeness {
            tuning,
            delay: tuning.first_delay(),
            measured: false,
        }
    }

    /// A response came `latency` after its send; `ok` when its status is
    /// a 2xx or 3xx. Returns the new delay when it changed.
    pub(crate) fn on_response(&mut self, latency: Duration, ok: bool) -> Option<Duration> {
        // A quotient past what a duration holds (a tiny target) is the
        // longest delay allowed.
        let target =
            Duration::try_from_secs_f64(latency.as_secs_f64() / self.tuning.target_in_flight)
                .unwrap_or(self.tuning.max_delay);
        let next = if self.measured {
            ((self.delay + target) / 2).max(target)
        } else {
            target
        };
        let next = self.tuning.clamp(next);
        if (!ok && next < self.delay) || next == self.delay {
            return None;
        }
        self.measured = true;
        self.delay = next;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_delay_follows_latency_over_the_target() {
        let mut p = Politeness::new(AutoThrottle::default().target_in_flight(2.0));
        assert_eq!(p.delay, Duration::from_secs(1));
        // The first response sets the target outright.
        assert_eq!(p.on_response(ms(400), true), Some(ms(200)));
        // Faster answers lower it by halves.
        assert_eq!(p.on_response(ms(100), true), Some(ms(125)));
        assert_eq!(
            p.on_response(ms(100), true),
            Some(ms(87) + Duration::from_micros(500))
        );
        // A slower one raises it to its target at once.
        assert_eq!(p.on_response(ms(1_000), true), Some(ms(500)));
    }

    #[test]
    fn errors_never_lower_it_and_the_bounds_hold() {
        let tuning = AutoThrottle::default()
            .min_delay(ms(50))
            .max_delay(ms(2_000));
        let mut p = Politeness::new(tuning);
        assert_eq!(p.on_response(ms(10), true), Some(ms(50)));
        assert_eq!(p.on_response(ms(800), false), Some(ms(800)));
        assert_eq!(
            p.on_response(ms(10), false),
            None,
            "an error lowers nothing"
        );
        assert_eq!(p.on_response(ms(60_000), true), Some(ms(2_000)));
        assert!(AutoThrottle::default()
            .target_in_flight(0.0)
            .validate()
            .is_err());
        assert!(tuning.max_delay(ms(10)).validate().is_err());
    }
}
