//! A sustained rate: "N per duration".

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::Error;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// A sustained rate, written as `count` tokens per `per`.
///
/// Sub-Hz rates (`1` per minute) and high rates (`100_000` per second) are
/// both exact as long as the time per token is a whole number of
/// nanoseconds; otherwise the time per token is rounded *up* to the next
/// nanosecond, so the limiter may run a hair slower than asked but never
/// faster. Rates faster than one token per nanosecond are refused.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::RequestRate;
///
/// let api = RequestRate::per_second(100)?;
/// assert_eq!(api.interval(), Duration::from_millis(10));
///
/// let slow = RequestRate::per_minute(1)?;
/// assert_eq!(slow.interval(), Duration::from_secs(60));
///
/// assert!(RequestRate::per_second(0).is_err());
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestRate {
    count: u64,
    per: Duration,
    interval_nanos: u64,
}

impl RequestRate {
    /// `count` tokens every `per`.
    ///
    /// Fails on a zero count, a zero duration, or a rate above one token per
    /// nanosecond.
    pub fn new(count: u64, per: Duration) -> Result<RequestRate, Error> {
        if count == 0 {
            return Err(Error::config("a rate needs a count above zero"));
        }
        if per.is_zero() {
            return Err(Error::config("a rate needs a period above zero"));
        }
        let per_nanos = per.as_nanos();
        let count_wide = u128::from(count);
        if per_nanos < count_wide {
            return Err(Error::config(format!(
                "{count} per {per:?} is faster than one token per nanosecond"
            )));
        }
        let interval = per_nanos.div_ceil(count_wide);
        let interval_nanos = u64::try_from(interval).map_err(|_| {
            Error::config(format!(
                "{count} per {per:?} is slower than one token per 584 years"
            ))
        })?;
        Ok(RequestRate {
            count,
            per,
            interval_nanos,
        })
    }

    /// `count` tokens per second.
    pub fn per_second(count: u64) -> Result<RequestRate, Error> {
        RequestRate::new(count, Duration::from_secs(1))
    }

    /// `count` tokens per minute.
    pub fn per_minute(count: u64) -> Result<RequestRate, Error> {
        RequestRate::new(count, Duration::from_secs(60))
    }

    /// `count` tokens per hour.
    pub fn per_hour(count: u64) -> Result<RequestRate, Error> {
        RequestRate::new(count, Duration::from_secs(3600))
    }

    /// `count` tokens per second, in a `const` (the form of governor's
    /// `Quota::per_second`): a count that is not zero cannot fail.
    /// The fastest rate is one token per nanosecond, so a count above
    /// 10⁹ is 10⁹ per second, where [`per_second`](RequestRate::per_second)
    /// refuses it.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use reqwest_pace::RequestRate;
    ///
    /// const API: RequestRate = RequestRate::per_second_nonzero(NonZeroU32::new(10).unwrap());
    /// assert_eq!(API.interval(), Duration::from_millis(100));
    /// assert_eq!(API, RequestRate::per_second(10)?);
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub const fn per_second_nonzero(count: NonZeroU32) -> RequestRate {
        let count = count.get() as u64;
        let most = NANOS_PER_SECOND;
        RequestRate::exact(if count > most { most } else { count }, 1)
    }

    /// `count` tokens per minute, in a `const`; it cannot fail.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use reqwest_pace::RequestRate;
    ///
    /// const SEARCH: RequestRate = RequestRate::per_minute_nonzero(NonZeroU32::new(30).unwrap());
    /// assert_eq!(SEARCH.interval(), Duration::from_secs(2));
    /// ```
    pub const fn per_minute_nonzero(count: NonZeroU32) -> RequestRate {
        RequestRate::exact(count.get() as u64, 60)
    }

    /// `count` tokens per hour, in a `const`; it cannot fail.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use reqwest_pace::RequestRate;
    ///
    /// const HOURLY: RequestRate = RequestRate::per_hour_nonzero(NonZeroU32::new(5_000).unwrap());
    /// assert_eq!(HOURLY.interval(), Duration::from_micros(720_000));
    /// ```
    pub const fn per_hour_nonzero(count: NonZeroU32) -> RequestRate {
        RequestRate::exact(count.get() as u64, 3600)
    }

    /// `count` per `seconds`, for a count from 1 to one per nanosecond of
    /// the period, which the callers ensure: the interval is at least
    /// 1 ns and fits a `u64` (`seconds` is at most an hour).
    const fn exact(count: u64, seconds: u64) -> RequestRate {
        RequestRate {
            count,
            per: Duration::from_secs(seconds),
            interval_nanos: (seconds * NANOS_PER_SECOND).div_ceil(count),
        }
    }

    /// One token every `interval`.
    pub fn every(interval: Duration) -> Result<RequestRate, Error> {
        RequestRate::new(1, interval)
    }

    /// The largest rate at or below `per_second` tokens per second that this
    /// type can express with nanosecond intervals; used when a rate is
    /// computed (from a server's figures) rather than configured.
    ///
    /// Fails on a rate that is not finite and positive.
    pub fn from_per_second_f64(per_second: f64) -> Result<RequestRate, Error> {
        if !per_second.is_finite() || per_second <= 0.0 {
            return Err(Error::config(format!(
                "a rate of {per_second} per second is not positive and finite"
            )));
        }
        let nanos = (1e9 / per_second).ceil();
        if nanos >= u64::MAX as f64 {
            return Err(Error::config(format!(
                "a rate of {per_second} per second is too slow"
            )));
        }
        // `nanos` is finite, positive and below u64::MAX here.
        let nanos = (nanos as u64).max(1);
        RequestRate::new(1, Duration::from_nanos(nanos))
    }

    /// The count in "count per period".
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period in "count per period".
    pub fn per(&self) -> Duration {
        self.per
    }

    /// Time for one token to refill (rounded up to whole nanoseconds).
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_nanos)
    }

    /// Time for one token to refill, in nanoseconds.
    pub fn interval_nanos(&self) -> u64 {
        self.interval_nanos
    }

    /// The rate as tokens per second.
    pub fn per_second_f64(&self) -> f64 {
        1e9 / self.interval_nanos as f64
    }
}

impl fmt::Debug for RequestRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestRate({} per {:?})", self.count, self.per)
    }
}

impl fmt::Display for RequestRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {:?}", self.count, self.per)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_round_up() {
        let r = RequestRate::per_second(3).unwrap();
        assert_eq!(r.interval_nanos(), 333_333_334);
        let r = RequestRate::per_second(100_000).unwrap();
        assert_eq!(r.interval_nanos(), 10_000);
        let r = RequestRate::new(1, Duration::from_secs(86_400)).unwrap();
        assert_eq!(r.interval(), Duration::from_secs(86_400));
    }

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).expect("a test count above zero")
    }

    #[test]
    fn const_rates_are_the_fallible_ones() {
        const TEN: RequestRate = RequestRate::per_second_nonzero(NonZeroU32::MIN.saturating_add(9));
        assert_eq!(TEN, RequestRate::per_second(10).unwrap());
        assert_eq!(TEN.interval(), Duration::from_millis(100));
        for n in [1, 3, 7, 1_000, 999_999_999, 1_000_000_000] {
            assert_eq!(
                RequestRate::per_second_nonzero(nz(n)),
                RequestRate::per_second(u64::from(n)).unwrap()
            );
        }
        // Rounded up, as `new` rounds: a third of a second is 333_333_334 ns.
        assert_eq!(
            RequestRate::per_second_nonzero(nz(3)).interval_nanos(),
            333_333_334
        );
        // Above one per nanosecond, where `per_second` refuses, the const
        // form is the fastest rate there is.
        assert!(RequestRate::per_second(1_000_000_001).is_err());
        assert_eq!(
            RequestRate::per_second_nonzero(nz(u32::MAX)),
            RequestRate::per_second(1_000_000_000).unwrap()
        );
        assert_eq!(
            RequestRate::per_second_nonzero(nz(u32::MAX)).interval_nanos(),
            1
        );
    }

    proptest::proptest! {
        #[test]
        fn every_const_rate_equals_its_fallible_twin(n in 1..=u32::MAX) {
            let count = u64::from(n);
            proptest::prop_assert_eq!(
                RequestRate::per_second_nonzero(nz(n)),
                RequestRate::per_second(count.min(1_000_000_000)).unwrap()
            );
            proptest::prop_assert_eq!(RequestRate::per_minute_nonzero(nz(n)), RequestRate::per_minute(count).unwrap());
            proptest::prop_assert_eq!(RequestRate::per_hour_nonzero(nz(n)), RequestRate::per_hour(count).unwrap());
        }
    }

    #[test]
    fn bad_rates_are_errors() {
        assert!(RequestRate::per_second(0).is_err());
        assert!(RequestRate::new(1, Duration::ZERO).is_err());
        assert!(RequestRate::new(2_000_000_000, Duration::from_secs(1)).is_err());
        assert!(RequestRate::new(1, Duration::MAX).is_err());
        assert!(RequestRate::from_per_second_f64(f64::NAN).is_err());
        assert!(RequestRate::from_per_second_f64(-1.0).is_err());
        assert!(RequestRate::from_per_second_f64(0.0).is_err());
        assert!(RequestRate::from_per_second_f64(1e-30).is_err());
        assert_eq!(
            RequestRate::from_per_second_f64(50.0).unwrap().interval(),
            Duration::from_millis(20)
        );
    }
}
