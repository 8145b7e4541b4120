//! Window limiters: "at most N per window W", in three strengths.
//!
//! All three implement [`Algorithm`], so [`QueuedLimiter`] gives each of them
//! the same FIFO, cancel-safe, one-wake-up-per-admission waiting as the token
//! bucket, and [`KeyedLimiter`] holds one per key with idle eviction. They are
//! configured by a [`RequestRate`] read as a quota: `RequestRate::per_minute(60)` is "60 in
//! any minute", and the largest weight one call may take is that N.
//!
//! | algorithm | in any window of length W | state per key |
//! |---|---|---|
//! | [`FixedWindow`] | up to **2N** (N either side of a boundary) | one counter |
//! | [`SlidingWindowCounter`] | at most **2N − 1**, about N on smooth traffic | two counters |
//! | [`SlidingLog`] | at most **N**, exactly | one entry per admission still in the window (≤ N) |
//!
//! - The **fixed window** counts admissions in windows aligned to the
//!   limiter's creation (`[0, W)`, `[W, 2W)`, ...). It is the cheapest and
//!   the weakest: a limit of 60 per minute admits 60 at 0:59 and 60 more at
//!   1:00, 120 in two seconds.
//! - The **sliding log** remembers every admission still inside the window
//!   and admits only if the last W nanoseconds hold at most N − weight. It is
//!   exact, in both directions: it never admits an N+1st call into any
//!   window, and never refuses one the quota allows. What that costs is
//!   memory proportional to N per active key (16 bytes per stored admission;
//!   see [`SlidingLog::memory_bytes`]).
//! - The **sliding window counter** keeps the fixed window's count and the
//!   previous window's, and estimates the last W as
//!   `previous × (1 − elapsed/W) + current`, as if the previous window's
//!   calls had been spread evenly. Two integers per key. The estimate is
//!   wrong when they were not: calls bunched at the end of the previous window
//!   are under-counted, so in the worst case a window of length W holds
//!   `N + previous × elapsed/W`, less than 2N; calls bunched at its start are
//!   over-counted, so it can refuse calls the exact log would admit.
//!
//! Every refusal is exact: [`Algorithm::try_admit`] says the first nanosecond
//! at which the same weight would pass, and it passes then. The comparison is
//! done on integers (the counter compares `previous × (W − elapsed) +
//! (current + weight) × W` with `N × W` in 128 bits), so there is no rounding
//! to drift.
//!
//! Server feedback maps onto a window as follows: a new [`RequestRate`] keeps the
//! window length and makes the limit the rate's share of it (`W / T` whole
//! calls, at least one; the current window and its counts are kept), so a
//! rate learned by the client means the same to a window as to a bucket; a
//! new capacity is ignored, since a window's burst is its limit,
//! "only `r` remain" counts the missing calls as admitted now, and a
//! Retry-After block admits nothing before its end and then resumes at the
//! quota's average pace (one call at the end of the block, one per W/N after
//! it) through a small pacing bucket that lives only until it is full again.

mod counter;
mod fixed;
mod log;

use std::hash::Hash;
use std::time::Duration;

pub use counter::{SlidingCounterLimiter, SlidingWindowCounter};
pub use fixed::{FixedWindow, FixedWindowLimiter};
pub use log::{SlidingLog, SlidingLogLimiter};

use super::algorithm::{Algorithm, LockOnly, Nanos};
use super::gcra::Gcra;
use super::{KeyedLimiter, QueuedLimiter, RequestRate};
use crate::Error;

/// What the three windows share: the quota, its window length in
/// nanoseconds, and the pacing bucket that exists only after a block.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Quota {
    rate: RequestRate,
    window: Nanos,
    /// After [`block_until`](Algorithm::block_until): a token bucket of
    /// capacity N refilling at N per W, which admits one call at the end of
    /// the block and then one per W/N. Dropped once it is full again, so
    /// normal traffic never pays for it. Boxed: one pointer per key when
    /// absent.
    pace: Option<Box<Gcra>>,
}

fn window_nanos(rate: RequestRate) -> Option<Nanos> {
    u64::try_from(rate.per().as_nanos()).ok()
}

impl Quota {
    fn new(limit: RequestRate, what: &str) -> Result<Quota, Error> {
        let window = window_nanos(limit).ok_or_else(|| {
            Error::config(format!(
                "a {what} of {limit} has a window longer than 2^64 nanoseconds (584 years)"
            ))
        })?;
        Ok(Quota {
            rate: limit,
            window,
            pace: None,
        })
    }

    /// N: the most admitted in one window, and the largest single weight.
    fn limit(&self) -> u64 {
        self.rate.count()
    }

    /// Keep the window; make the limit the rate's share of it (`W / T`
    /// whole calls, at least 1). A rate is "how fast", and a window
    /// limiter's burst is its limit: so server feedback learned as a rate
    /// means the same to a window as to a bucket.
    fn set_rate(&mut self, now: Nanos, rate: RequestRate) {
        let limit = (self.window / rate.interval_nanos()).max(1);
        let Ok(rate) = RequestRate::new(limit, Duration::from_nanos(self.window)) else {
            return;
        };
        self.rate = rate;
        if let Some(pace) = &mut self.pace {
            pace.set_rate(now, rate);
            pace.set_capacity(now, rate.count());
        }
    }

    fn block_until(&mut self, now: Nanos, until: Nanos) {
        let (rate, limit) = (self.rate, self.limit());
        self.pace
            .get_or_insert_with(|| Box::new(Gcra::new(rate, limit, limit)))
            .block_until(now, until);
    }

    /// End the pacing bucket's block now; it resumes at the pace from now.
    fn unblock(&mut self, now: Nanos) {
        if let Some(pace) = &mut self.pace {
            pace.unblock(now);
        }
        self.settle(now);
    }

    /// Forget the pacing bucket once it is full: from then on it would admit
    /// whatever the window admits, so keeping it would only cost memory.
    fn settle(&mut self, now: Nanos) {
        if self.pace.as_ref().is_some_and(|pace| pace.is_idle(now)) {
            self.pace = None;
        }
    }

    /// The earliest instant `weight` passes, given `window_ready`: the
    /// window's own exact answer for a weight of at most N. A heavier weight
    /// (the sum of a queue) is estimated as its remainder's instant plus one
    /// window per further N.
    fn earliest(&self, now: Nanos, weight: u64, window_ready: impl Fn(u64) -> Nanos) -> Nanos {
        let limit = self.limit();
        let by_window = if weight <= limit {
            window_ready(weight)
        } else {
            let further = (weight - 1) / limit;
            window_ready(weight - further * limit)
                .saturating_add(further.saturating_mul(self.window))
        };
        let by_pace = self
            .pace
            .as_ref()
            .map_or(now, |pace| pace.earliest(now, weight));
        by_window.max(by_pace).max(now)
    }

    /// Shared front half of `try_admit`: `Ok` if `weight` may go now (the
    /// caller then records it and calls [`take`](Self::take)), else the
    /// exact instant it would.
    fn check(&mut self, now: Nanos, weight: u64, ready: Nanos) -> Result<(), Nanos> {
        if weight > self.limit() || ready > now {
            // Never `now` itself: the waiting loop retries at the instant it
            // is given, and must not spin.
            return Err(ready.max(now.saturating_add(1)));
        }
        Ok(())
    }

    fn take(&mut self, now: Nanos, weight: u64) {
        if let Some(pace) = &mut self.pace {
            // Checked by `earliest` just before: this succeeds.
            let _ = pace.try_admit(now, weight);
        }
    }

    fn pace_available(&self, now: Nanos) -> u64 {
        self.pace
            .as_ref()
            .map_or(u64::MAX, |pace| pace.available(now))
    }

    fn pace_idle(&self, now: Nanos) -> bool {
        self.pace.as_ref().is_none_or(|pace| pace.is_idle(now))
    }

    fn heap_bytes(&self) -> usize {
        self.pace
            .as_ref()
            .map_or(0, |_| std::mem::size_of::<Gcra>())
    }
}

impl<K> KeyedLimiter<K, FixedWindowLimiter>
where
    K: Hash + Eq + Clone,
{
    /// One fixed window of `limit` per key (see [`FixedWindow`]).
    ///
    /// Fails on a window longer than 584 years, checked once here.
    pub fn fixed_windows(limit: RequestRate) -> Result<Self, Error> {
        let template = FixedWindow::new(limit)?;
        Ok(Self::new(move |_| {
            QueuedLimiter::from_algorithm(template.clone())
        }))
    }
}

impl<K> KeyedLimiter<K, SlidingLogLimiter>
where
    K: Hash + Eq + Clone,
{
    /// One exact sliding log of `limit` per key (see [`SlidingLog`]). Each
    /// active key holds up to N timestamps; idle keys are evicted.
    ///
    /// ```
    /// use reqwest_pace::{KeyedLimiter, RequestRate};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), reqwest_pace::Error> {
    /// // A billed quota per API key: never more than 1000 in any minute.
    /// let per_key = KeyedLimiter::sliding_logs(RequestRate::per_minute(1000)?)?;
    /// per_key.acquire(&"key-a", 10).await?;
    /// per_key.try_acquire(&"key-b", 1000)?; // its own quota
    /// assert!(per_key.try_acquire(&"key-b", 1).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn sliding_logs(limit: RequestRate) -> Result<Self, Error> {
        let template = SlidingLog::new(limit)?;
        Ok(Self::new(move |_| {
            QueuedLimiter::from_algorithm(template.clone())
        }))
    }
}

impl<K> KeyedLimiter<K, SlidingCounterLimiter>
where
    K: Hash + Eq + Clone,
{
    /// One sliding window counter of `limit` per key (see
    /// [`SlidingWindowCounter`]).
    ///
    /// Fails on a window longer than 584 years, checked once here.
    pub fn sliding_counters(limit: RequestRate) -> Result<Self, Error> {
        let template = SlidingWindowCounter::new(limit)?;
        Ok(Self::new(move |_| {
            QueuedLimiter::from_algorithm(template.clone())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn windows_longer_than_u64_nanoseconds_are_config_errors() {
        let huge = RequestRate::new(u64::MAX, Duration::from_secs(u64::MAX)).unwrap();
        assert!(matches!(
            FixedWindow::new(huge),
            Err(Error::InvalidConfig(_))
        ));
        assert!(SlidingLog::new(huge).is_err());
        assert!(SlidingWindowCounter::new(huge).is_err());
    }

    #[test]
    fn heavier_than_the_limit_is_estimated_a_window_per_further_n() {
        let q = Quota::new(RequestRate::per_second(10).unwrap(), "test").unwrap();
        // 25 = 5 now, then 10 at each of the next two windows.
        assert_eq!(q.earliest(0, 25, |_| 0), 2 * S);
        assert_eq!(q.earliest(0, 10, |_| 0), 0);
        assert_eq!(q.earliest(0, 11, |_| 0), S);
    }

    #[test]
    fn a_rate_keeps_the_window_and_rescales_the_limit() {
        let mut q = Quota::new(RequestRate::per_minute(60).unwrap(), "test").unwrap();
        q.set_rate(0, RequestRate::per_second(2).unwrap());
        assert_eq!(q.rate, RequestRate::per_minute(120).unwrap());
        // Slower than one per window: at least one.
        q.set_rate(0, RequestRate::per_hour(1).unwrap());
        assert_eq!(q.limit(), 1);
        assert_eq!(q.window, 60 * S);
    }

    #[test]
    fn the_pacing_bucket_goes_once_full() {
        let mut q = Quota::new(RequestRate::per_second(10).unwrap(), "test").unwrap();
        q.block_until(0, S);
        assert_eq!(q.earliest(0, 1, |_| 0), S);
        assert_eq!(q.earliest(0, 2, |_| 0), S + S / 10);
        q.settle(S);
        assert!(q.pace.is_some());
        // Full again (N−1)·W/N after the end of the block.
        q.settle(S + 9 * S / 10);
        assert!(q.pace.is_none());
    }
}
