//! Exponential backoff with jitter.

use std::time::Duration;

/// How a backoff delay is randomised, after the AWS Architecture Blog's
/// "Exponential Backoff And BackoffJitter" (Brooker, 2015).
///
/// With `cap` the largest delay and `base · 2^n` the exponential step for
/// retry `n` (0-based), `step = min(cap, base · 2^n)`:
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BackoffJitter {
    /// `step` exactly: synchronised clients retry in lock-step. For tests
    /// and for schedules that must be predictable.
    None,
    /// Uniform in `[0, step]`: the least total work under contention; the
    /// default.
    #[default]
    Full,
    /// `step/2 + uniform [0, step/2]`: never retries almost at once.
    Equal,
    /// `min(cap, uniform [base, previous · 3])`: spreads like full jitter
    /// but grows from the previous delay rather than the attempt number.
    Decorrelated,
}

/// An exponential backoff schedule: `base`, doubling per retry, capped, with
/// [`BackoffJitter`].
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::retry::{Backoff, BackoffJitter};
///
/// let b = Backoff::exponential(Duration::from_millis(100))
///     .with_max_delay(Duration::from_secs(1))
///     .with_jitter(BackoffJitter::None);
/// let schedule: Vec<_> = (0..5).map(|n| b.delay(n, None, 0.5)).collect();
/// assert_eq!(
///     schedule,
///     [100, 200, 400, 800, 1000].map(Duration::from_millis).to_vec()
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max_delay: Duration,
    jitter: BackoffJitter,
}

impl Default for Backoff {
    /// 100 ms base, 20 s cap, full jitter.
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            max_delay: Duration::from_secs(20),
            jitter: BackoffJitter::Full,
        }
    }
}

impl Backoff {
    /// Exponential backoff from `base`, with the default cap (20 s) and full
    /// jitter.
    pub fn exponential(base: Duration) -> Self {
        Backoff {
            base,
            ..Backoff::default()
        }
    }

    /// The largest delay, whatever the attempt.
    pub fn with_max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// The jitter kind.
    pub fn with_jitter(mut self, jitter: BackoffJitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The base delay.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The cap.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The jitter kind.
    pub fn jitter(&self) -> BackoffJitter {
        self.jitter
    }

    /// The un-jittered step for retry `n` (0 is the first retry):
    /// `min(cap, base · 2^n)`, without overflow.
    pub fn step(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max_delay)
    }

    /// The delay before retry `n`, given the previous delay (for
    /// decorrelated jitter) and a uniform random draw `unit` in `[0, 1]`.
    /// Out-of-range draws are clamped.
    pub fn delay(&self, n: u32, previous: Option<Duration>, unit: f64) -> Duration {
        let unit = if unit.is_nan() {
            0.0
        } else {
            unit.clamp(0.0, 1.0)
        };
        let step = self.step(n);
        match self.jitter {
            BackoffJitter::None => step,
            BackoffJitter::Full => step.mul_f64(unit),
            BackoffJitter::Equal => step / 2 + (step / 2).mul_f64(unit),
            BackoffJitter::Decorrelated => {
                let low = self.base.min(self.max_delay);
                let high = previous
                    .unwrap_or(self.base)
                    .saturating_mul(3)
                    .min(self.max_delay)
                    .max(low);
                (low + (high - low).mul_f64(unit)).min(self.max_delay)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn equal_jitter_is_half_to_full_step() {
        let b = Backoff::exponential(100 * MS).with_jitter(BackoffJitter::Equal);
        assert_eq!(b.delay(1, None, 0.0), 100 * MS);
        assert_eq!(b.delay(1, None, 1.0), 200 * MS);
    }

    #[test]
    fn decorrelated_grows_from_the_previous_delay() {
        let b = Backoff::exponential(100 * MS)
            .with_max_delay(10_000 * MS)
            .with_jitter(BackoffJitter::Decorrelated);
        assert_eq!(b.delay(0, None, 1.0), 300 * MS);
        assert_eq!(b.delay(5, Some(300 * MS), 1.0), 900 * MS);
        assert_eq!(b.delay(5, Some(300 * MS), 0.0), 100 * MS);
        assert_eq!(b.delay(9, Some(9_000 * MS), 1.0), 10_000 * MS);
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow() {
        let b = Backoff::exponential(Duration::from_secs(1_000_000));
        assert_eq!(b.step(u32::MAX), b.max_delay());
        assert_eq!(
            b.delay(u32::MAX, Some(Duration::MAX), f64::NAN),
            Duration::ZERO
        );
    }

    proptest! {
        #[test]
        fn every_delay_is_within_its_bounds(
            base_ms in 1u64..10_000,
            cap_ms in 1u64..100_000,
            n in 0u32..100,
            unit in 0.0f64..=1.0,
            prev_ms in proptest::option::of(0u64..1_000_000),
        ) {
            let prev = prev_ms.map(Duration::from_millis);
            for jitter in [BackoffJitter::None, BackoffJitter::Full, BackoffJitter::Equal, BackoffJitter::Decorrelated] {
                let b = Backoff::exponential(Duration::from_millis(base_ms))
                    .with_max_delay(Duration::from_millis(cap_ms))
                    .with_jitter(jitter);
                let d = b.delay(n, prev, unit);
                prop_assert!(d <= b.max_delay());
                if matches!(jitter, BackoffJitter::None | BackoffJitter::Full | BackoffJitter::Equal) {
                    prop_assert!(d <= b.step(n));
                }
                if jitter == BackoffJitter::Equal {
                    prop_assert!(d >= b.step(n) / 2);
                }
            }
        }
    }
}
