//! The sliding window counter: two fixed-window counts, weighted by overlap.
//!
//! With `p` the previous window's count, `c` the current one's and `e` the
//! time elapsed in the current window, the last W is estimated to hold
//! `p × (W − e)/W + c`. A weight `w` passes when that plus `w` is at most N,
//! compared exactly as `p × (W − e) + (c + w) × W ≤ N × W` in 128-bit
//! integers. The estimate never rises as time passes (at a boundary it is
//! `c` on both sides), so a refusal's instant can be solved for directly:
//! `e = W − ⌊(N − c − w) × W / p⌋`.

use super::{Algorithm, LockOnly, Nanos, QueuedLimiter, Quota, RequestRate};
use crate::limiter::gcra::{narrow, wide};
use crate::Error;

/// Sliding-window-counter state: the fixed window's count and the previous
/// window's, the previous one weighted by how much of it the sliding window
/// still covers. Two integers per key (besides the configuration).
///
/// **Approximate.** The weighting assumes the previous window's calls were
/// spread evenly. When they were bunched at its end, the estimate counts
/// too few of them, and a sliding window of length W that reaches `a` into
/// the current window can hold up to `N + p × a/W` (p ≤ N the previous
/// count): **at most 2N − 1, never 2N**, in the worst case, against the
/// exact [`SlidingLog`]'s N. (The [`FixedWindow`] reaches 2N in two
/// nanoseconds; the counter needs the whole window to get near it, since its
/// current count can only grow as the previous one's weight fades.) When
/// the previous calls were bunched at its start, the estimate counts too
/// many and the counter refuses calls the log would admit. On smooth
/// traffic both errors are small; `BENCHMARKS.md` has measured figures.
///
/// Adjustments: "only `r` remain" raises the current count so that `r`
/// are available now (the missing calls then age like real ones); a new
/// server window ([`set_remaining`](Algorithm::set_remaining)) forgets the
/// previous count and sets the current one to `N − r`.
///
/// ```
/// use reqwest_pace::limiter::{Algorithm, SlidingWindowCounter};
/// use reqwest_pace::RequestRate;
///
/// const S: u64 = 1_000_000_000;
/// let mut counter = SlidingWindowCounter::new(RequestRate::per_second(4)?)?;
/// assert_eq!(counter.try_admit(0, 4), Ok(()));
/// // At 1 s those 4 still weigh 4 × (1 − 0/1): the fifth waits until the
/// // previous window's weight has faded to 3, a quarter second in.
/// assert_eq!(counter.try_admit(S, 1), Err(S + S / 4));
/// assert_eq!(counter.try_admit(S + S / 4, 1), Ok(()));
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
///
/// [`SlidingLog`]: super::SlidingLog
/// [`FixedWindow`]: super::FixedWindow
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingWindowCounter {
    quota: Quota,
    /// Start of the window `current` belongs to.
    start: Nanos,
    previous: u64,
    current: u64,
}

/// A sliding-window-counter limiter with FIFO waiting: [`QueuedLimiter`] over
/// [`SlidingWindowCounter`].
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::limiter::SlidingCounterLimiter;
/// use reqwest_pace::RequestRate;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), reqwest_pace::Error> {
/// let limiter = SlidingCounterLimiter::sliding_counter(RequestRate::per_second(4)?)?;
/// let start = tokio::time::Instant::now();
/// limiter.acquire(4).await?; // at once
/// limiter.acquire(1).await?; // when the first window's 4 weigh 3
/// limiter.acquire(1).await?; // ... and then 2
/// assert_eq!(start.elapsed(), Duration::from_millis(1500));
/// # Ok(())
/// # }
/// ```
pub type SlidingCounterLimiter = QueuedLimiter<SlidingWindowCounter>;

impl QueuedLimiter<SlidingWindowCounter> {
    /// A sliding window counter admitting about `limit.count()` per
    /// `limit.per()` (at most twice that minus one in the worst case),
    /// starting empty, its first window beginning now.
    ///
    /// Fails on a window longer than 584 years (a zero count or period is
    /// already refused by [`RequestRate`]).
    pub fn sliding_counter(limit: RequestRate) -> Result<Self, Error> {
        SlidingWindowCounter::new(limit).map(Self::from_algorithm)
    }
}

impl SlidingWindowCounter {
    /// An empty counter admitting about `limit.count()` per `limit.per()`,
    /// its first window starting at instant 0.
    ///
    /// Fails on a window longer than 584 years.
    pub fn new(limit: RequestRate) -> Result<SlidingWindowCounter, Error> {
        Ok(SlidingWindowCounter {
            quota: Quota::new(limit, "sliding window counter")?,
            start: 0,
            previous: 0,
            current: 0,
        })
    }

    /// Bytes this state occupies, inline and on the heap (the heap part is
    /// only the pacing bucket, while a block is being paced out).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.quota.heap_bytes()
    }

    /// `(start, previous, current)` as seen at `now`.
    fn view(&self, now: Nanos) -> (Nanos, u64, u64) {
        let window = self.quota.window;
        let passed = now.saturating_sub(self.start) / window;
        match passed {
            0 => (self.start, self.previous, self.current),
            1 => (self.start + window, self.current, 0),
            _ => (self.start + passed * window, 0, 0),
        }
    }

    fn advance(&mut self, now: Nanos) {
        (self.start, self.previous, self.current) = self.view(now);
        self.quota.settle(now);
    }

    /// The previous window's weight at elapsed `e`, rounded up:
    /// `⌈p × (W − e)/W⌉`.
    fn carried(&self, previous: u64, elapsed: Nanos) -> u64 {
        let window = wide(self.quota.window);
        let left = window - wide(elapsed.min(self.quota.window));
        narrow((wide(previous) * left).div_ceil(window))
    }

    /// Exact for `weight` ≤ N.
    fn ready(&self, now: Nanos, weight: u64) -> Nanos {
        let (start, previous, current) = self.view(now);
        let window = wide(self.quota.window);
        let limit = wide(self.quota.limit());
        let (current, weight) = (wide(current), wide(weight));
        if current + weight <= limit {
            // Within this window, once p × (W − e) ≤ (N − c − w) × W.
            let room = (limit - current - weight) * window;
            let elapsed = wide(now.saturating_sub(start));
            let previous = wide(previous);
            if previous * window.saturating_sub(elapsed) <= room {
                return now;
            }
            // previous > 0 here, or the test above would have passed.
            let at = window - room / previous.max(1);
            narrow(wide(start) + at)
        } else {
            // Not before the next window, where this window's count becomes
            // the previous one: c × (W − e) ≤ (N − w) × W. c > N − w ≥ 0.
            let room = (limit - weight.min(limit)) * window;
            let at = window - room / current.max(1);
            narrow(wide(start) + window + at)
        }
    }
}

impl Algorithm for SlidingWindowCounter {
    type FastPath = LockOnly;

    /// N: a whole window's worth.
    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn try_admit(&mut self, now: Nanos, weight: u64) -> Result<(), Nanos> {
        self.advance(now);
        self.quota.check(now, weight, self.earliest(now, weight))?;
        self.current += weight;
        self.quota.take(now, weight);
        Ok(())
    }

    fn earliest(&self, now: Nanos, weight: u64) -> Nanos {
        self.quota.earliest(now, weight, |w| self.ready(now, w))
    }

    /// Keep the window and make the limit the rate's share of it (see
    /// the module docs). The current window and its counts are kept.
    fn set_rate(&mut self, now: Nanos, rate: RequestRate) {
        self.advance(now);
        self.quota.set_rate(now, rate);
    }

    /// Ignored: a window's burst is its limit, which comes with the rate
    /// ([`set_rate`](Algorithm::set_rate)).
    fn set_capacity(&mut self, _now: Nanos, _capacity: u64) {}

    /// Raise the current count until at most `remaining` are available.
    fn limit_remaining(&mut self, now: Nanos, remaining: u64) {
        self.advance(now);
        let carried = self.carried(self.previous, now.saturating_sub(self.start));
        let used = self
            .quota
            .limit()
            .saturating_sub(carried)
            .saturating_sub(remaining);
        self.current = self.current.max(used);
    }

    /// Forget the previous window; count `N − remaining` in the current one.
    fn set_remaining(&mut self, now: Nanos, remaining: u64) {
        self.advance(now);
        self.previous = 0;
        self.current = self.quota.limit() - remaining.min(self.quota.limit());
    }

    /// Nothing before `until`; then one call at `until` and one per W/N
    /// after it, until the pace catches up with the quota. The counts still
    /// apply on top.
    fn block_until(&mut self, now: Nanos, until: Nanos) {
        self.advance(now);
        self.quota.block_until(now, until);
    }

    fn unblock(&mut self, now: Nanos) {
        self.advance(now);
        self.quota.unblock(now);
    }

    /// Both counts zero at `now` (two windows after the last admission), and
    /// no block.
    fn is_idle(&self, now: Nanos) -> bool {
        let (_, previous, current) = self.view(now);
        previous == 0 && current == 0 && self.quota.pace_idle(now)
    }

    fn rate(&self) -> RequestRate {
        self.quota.rate
    }

    fn available(&self, now: Nanos) -> u64 {
        let (start, previous, current) = self.view(now);
        let carried = self.carried(previous, now.saturating_sub(start));
        self.quota
            .limit()
            .saturating_sub(current)
            .saturating_sub(carried)
            .min(self.quota.pace_available(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;

    fn counter(n: u64, seconds: u64) -> SlidingWindowCounter {
        SlidingWindowCounter::new(RequestRate::new(n, Duration::from_secs(seconds)).unwrap())
            .unwrap()
    }

    #[test]
    fn the_previous_window_fades_linearly() {
        let mut c = counter(4, 1);
        assert_eq!(c.try_admit(0, 4), Ok(()));
        assert_eq!(c.try_admit(S - 1, 1), Err(S + 250 * MS));
        assert_eq!(c.try_admit(S, 2), Err(S + 500 * MS));
        assert_eq!(c.available(S), 0);
        assert_eq!(c.available(S + 250 * MS), 1);
        assert_eq!(c.available(S + 250 * MS - 1), 0);
        assert_eq!(c.available(S + 750 * MS), 3);
        assert_eq!(c.try_admit(S + 250 * MS, 1), Ok(()));
        // 4 × (1 − e) + 1 + 1 ≤ 4 at e = 0.5.
        assert_eq!(c.try_admit(S + 250 * MS, 1), Err(S + 500 * MS));
        assert_eq!(c.available(2 * S), 3);
        assert_eq!(c.available(3 * S), 4);
        assert!(c.is_idle(3 * S));
        assert!(!c.is_idle(3 * S - 1));
    }

    #[test]
    fn a_full_current_window_waits_into_the_next() {
        let mut c = counter(10, 1);
        assert_eq!(c.try_admit(900 * MS, 10), Ok(()));
        // Next window: 10 × (1 − e) + 4 ≤ 10 at e = 0.4.
        assert_eq!(c.try_admit(900 * MS, 4), Err(S + 400 * MS));
        assert_eq!(c.try_admit(S + 400 * MS - 1, 4), Err(S + 400 * MS));
        assert_eq!(c.try_admit(S + 400 * MS, 4), Ok(()));
        // Rounding: 3 of 10 per 1 s after 10 → e ≥ 1 − 7/10, exactly.
        let mut c = counter(10, 1);
        c.try_admit(0, 10).unwrap();
        assert_eq!(c.try_admit(0, 3), Err(S + 300 * MS));
    }

    #[test]
    fn refusal_instants_round_up_to_the_nanosecond() {
        // 3 per second: the previous 3 weigh 2 at e = 1/3 s, which is not a
        // whole nanosecond: the first admissible nanosecond is above it.
        let mut c = counter(3, 1);
        c.try_admit(0, 3).unwrap();
        let ready = c.try_admit(0, 1).unwrap_err();
        assert_eq!(ready, S + 333_333_334);
        assert_eq!(c.clone().try_admit(ready - 1, 1), Err(ready));
        assert_eq!(c.try_admit(ready, 1), Ok(()));
    }

    #[test]
    fn remaining_raises_the_current_count() {
        let mut c = counter(10, 1);
        c.try_admit(0, 8).unwrap();
        // At 1.5 s the 8 weigh 4: 6 available; lower to 2.
        assert_eq!(c.available(1_500 * MS), 6);
        c.limit_remaining(1_500 * MS, 2);
        assert_eq!(c.available(1_500 * MS), 2);
        c.limit_remaining(1_500 * MS, 5);
        assert_eq!(c.available(1_500 * MS), 2);
        c.set_remaining(1_500 * MS, 9);
        assert_eq!(c.available(1_500 * MS), 9);
        c.set_remaining(1_500 * MS, 90);
        assert_eq!(c.available(1_500 * MS), 10);
        c.set_remaining(1_500 * MS, 0);
        assert_eq!(c.try_admit(1_500 * MS, 1), Err(2 * S + 100 * MS));
    }

    #[test]
    fn a_block_resumes_at_the_pace() {
        let mut c = counter(10, 1);
        c.block_until(0, 3 * S);
        assert_eq!(c.try_admit(0, 1), Err(3 * S));
        assert_eq!(c.available(2 * S), 0);
        assert_eq!(c.try_admit(3 * S, 1), Ok(()));
        assert_eq!(c.try_admit(3 * S, 1), Err(3 * S + 100 * MS));
        assert_eq!(c.available(3 * S + 100 * MS), 1);
    }

    #[test]
    fn a_new_rate_keeps_the_counts() {
        let mut c = counter(10, 1);
        c.try_admit(0, 10).unwrap();
        // 10 per second per se: the window stays 1 s, the limit becomes 20.
        c.set_rate(S / 2, RequestRate::new(20, Duration::from_secs(1)).unwrap());
        assert_eq!(c.capacity(), 20);
        assert_eq!(c.available(S / 2), 10);
        // A capacity changes nothing: the limit comes with the rate.
        c.set_capacity(S / 2, 5);
        assert_eq!(c.available(S / 2), 10);
        assert_eq!(c.rate(), RequestRate::per_second(20).unwrap());
    }
}
