//! The fixed window counter: the simple baseline.
//!
//! One count for the current window, reset at each boundary. Boundaries are
//! multiples of W from the limiter's creation, so a refusal's instant is
//! simply the next boundary.

use super::{Algorithm, LockOnly, Nanos, QueuedLimiter, Quota, RequestRate};
use crate::Error;

/// Fixed-window state: at most N admitted between consecutive boundaries,
/// the boundaries being multiples of W from the limiter's creation.
///
/// **Edge effect.** The count knows nothing of the previous window, so N
/// calls just before a boundary and N just after it all pass: a limit of 60
/// per minute admits 120 between 0:59 and 1:00. Use [`SlidingLog`] where
/// that would breach a quota.
///
/// Memory: the configuration, one window start and one count (see
/// [`memory_bytes`](Self::memory_bytes)).
///
/// ```
/// use reqwest_pace::limiter::{Algorithm, FixedWindow};
/// use reqwest_pace::RequestRate;
///
/// const S: u64 = 1_000_000_000;
/// let mut window = FixedWindow::new(RequestRate::per_minute(60)?)?;
/// // 60 at 0:59 fill the first minute; the 61st waits for 1:00...
/// assert_eq!(window.try_admit(59 * S, 60), Ok(()));
/// assert_eq!(window.try_admit(59 * S, 1), Err(60 * S));
/// // ...where 60 more go at once: 120 in one second.
/// assert_eq!(window.try_admit(60 * S, 60), Ok(()));
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
///
/// [`SlidingLog`]: super::SlidingLog
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    quota: Quota,
    /// Start of the window `count` belongs to.
    start: Nanos,
    count: u64,
}

/// A fixed-window limiter with FIFO waiting: [`QueuedLimiter`] over
/// [`FixedWindow`].
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::limiter::FixedWindowLimiter;
/// use reqwest_pace::{Error, RequestRate};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Error> {
/// let limiter = FixedWindowLimiter::fixed_window(RequestRate::per_second(2)?)?;
/// let start = tokio::time::Instant::now();
/// limiter.try_acquire(2)?;
/// // The window is full until its end, one second after creation.
/// match limiter.try_acquire(1) {
///     Err(Error::NotYet { wait, .. }) => assert_eq!(wait, Duration::from_secs(1)),
///     other => panic!("unexpected {other:?}"),
/// }
/// limiter.acquire(2).await?;
/// assert_eq!(start.elapsed(), Duration::from_secs(1));
/// # Ok(())
/// # }
/// ```
pub type FixedWindowLimiter = QueuedLimiter<FixedWindow>;

impl QueuedLimiter<FixedWindow> {
    /// A fixed window admitting `limit.count()` per `limit.per()`, starting
    /// empty, its first window beginning now.
    ///
    /// Fails on a window longer than 584 years (a zero count or period is
    /// already refused by [`RequestRate`]).
    pub fn fixed_window(limit: RequestRate) -> Result<Self, Error> {
        FixedWindow::new(limit).map(Self::from_algorithm)
    }
}

impl FixedWindow {
    /// An empty fixed window admitting `limit.count()` per `limit.per()`,
    /// its first window starting at instant 0.
    ///
    /// Fails on a window longer than 584 years.
    pub fn new(limit: RequestRate) -> Result<FixedWindow, Error> {
        Ok(FixedWindow {
            quota: Quota::new(limit, "fixed window")?,
            start: 0,
            count: 0,
        })
    }

    /// Bytes this state occupies, inline and on the heap (the heap part is
    /// only the pacing bucket, while a block is being paced out).
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.quota.heap_bytes()
    }

    /// The window start and count as seen at `now`.
    fn view(&self, now: Nanos) -> (Nanos, u64) {
        let window = self.quota.window;
        if now.saturating_sub(self.start) < window {
            return (self.start, self.count);
        }
        let passed = (now - self.start) / window;
        (self.start + passed * window, 0)
    }

    fn advance(&mut self, now: Nanos) {
        (self.start, self.count) = self.view(now);
        self.quota.settle(now);
    }

    /// Exact for `weight` ≤ N: now, or the next boundary.
    fn ready(&self, now: Nanos, weight: u64) -> Nanos {
        let (start, count) = self.view(now);
        if u128::from(count) + u128::from(weight) <= u128::from(self.quota.limit()) {
            now
        } else {
            start.saturating_add(self.quota.window)
        }
    }
}

impl Algorithm for FixedWindow {
    type FastPath = LockOnly;

    /// N: a whole window's worth.
    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn try_admit(&mut self, now: Nanos, weight: u64) -> Result<(), Nanos> {
        self.advance(now);
        self.quota.check(now, weight, self.earliest(now, weight))?;
        self.count += weight;
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

    /// Count the missing calls as admitted in the current window; they come
    /// back at its end.
    fn limit_remaining(&mut self, now: Nanos, remaining: u64) {
        self.advance(now);
        let used = self.quota.limit() - remaining.min(self.quota.limit());
        self.count = self.count.max(used);
    }

    /// Make the current window's count `N − remaining`, raising what is
    /// available if need be.
    fn set_remaining(&mut self, now: Nanos, remaining: u64) {
        self.advance(now);
        self.count = self.quota.limit() - remaining.min(self.quota.limit());
    }

    /// Nothing before `until`; then one call at `until` and one per W/N
    /// after it, however empty the window, until the pace catches up with
    /// the quota.
    fn block_until(&mut self, now: Nanos, until: Nanos) {
        self.advance(now);
        self.quota.block_until(now, until);
    }

    fn unblock(&mut self, now: Nanos) {
        self.advance(now);
        self.quota.unblock(now);
    }

    /// Nothing counted in the window containing `now`, and no block.
    fn is_idle(&self, now: Nanos) -> bool {
        self.view(now).1 == 0 && self.quota.pace_idle(now)
    }

    fn rate(&self) -> RequestRate {
        self.quota.rate
    }

    fn available(&self, now: Nanos) -> u64 {
        let (_, count) = self.view(now);
        self.quota
            .limit()
            .saturating_sub(count)
            .min(self.quota.pace_available(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn window(n: u64, seconds: u64) -> FixedWindow {
        FixedWindow::new(RequestRate::new(n, std::time::Duration::from_secs(seconds)).unwrap())
            .unwrap()
    }

    #[test]
    fn counts_reset_at_boundaries_aligned_to_the_origin() {
        let mut w = window(3, 10);
        assert_eq!(w.try_admit(4 * S, 2), Ok(()));
        assert_eq!(w.try_admit(9 * S, 2), Err(10 * S));
        assert_eq!(w.try_admit(10 * S - 1, 1), Ok(()));
        assert_eq!(w.try_admit(10 * S - 1, 1), Err(10 * S));
        assert_eq!(w.available(10 * S - 1), 0);
        assert_eq!(w.available(10 * S), 3);
        // Skipping whole windows lands on the right boundary.
        assert_eq!(w.try_admit(47 * S, 3), Ok(()));
        assert_eq!(w.try_admit(47 * S, 1), Err(50 * S));
    }

    #[test]
    fn edge_effect_admits_twice_the_limit_across_a_boundary() {
        let mut w = window(60, 60);
        assert_eq!(w.try_admit(60 * S - 1, 60), Ok(()));
        assert_eq!(w.try_admit(60 * S, 60), Ok(()));
    }

    #[test]
    fn remaining_lowers_then_sets_within_the_window() {
        let mut w = window(10, 1);
        w.try_admit(0, 2).unwrap();
        w.limit_remaining(0, 5);
        assert_eq!(w.available(0), 5);
        w.limit_remaining(0, 9);
        assert_eq!(w.available(0), 5);
        w.set_remaining(0, 9);
        assert_eq!(w.available(0), 9);
        w.set_remaining(0, 90);
        assert_eq!(w.available(0), 10);
        w.limit_remaining(0, 0);
        assert_eq!(w.try_admit(0, 1), Err(S));
        assert_eq!(w.available(S), 10);
    }

    #[test]
    fn a_block_resumes_at_the_pace_not_with_a_full_window() {
        let mut w = window(10, 1);
        w.block_until(0, 5 * S);
        assert_eq!(w.available(S), 0);
        assert_eq!(w.try_admit(S, 1), Err(5 * S));
        assert_eq!(w.try_admit(5 * S, 1), Ok(()));
        assert_eq!(w.try_admit(5 * S, 1), Err(5 * S + S / 10));
        assert!(!w.is_idle(5 * S));
        // Paced out and a window later, the state is fresh again.
        assert!(w.is_idle(7 * S));
        assert_eq!(w.try_admit(7 * S, 10), Ok(()));
    }

    #[test]
    fn a_new_rate_keeps_the_window_and_the_count() {
        let mut w = window(10, 10);
        w.try_admit(S, 8).unwrap();
        // 4 per 5 s is 0.8 per second: 8 per the same 10 s window.
        w.set_rate(
            2 * S,
            RequestRate::new(4, std::time::Duration::from_secs(5)).unwrap(),
        );
        assert_eq!(w.capacity(), 8);
        assert_eq!(w.available(2 * S), 0);
        assert_eq!(w.try_admit(2 * S, 1), Err(10 * S));
        // A capacity changes nothing.
        w.set_capacity(5 * S, 5);
        assert_eq!(w.capacity(), 8);
        assert_eq!(w.try_admit(10 * S, 8), Ok(()));
    }

    #[test]
    fn heavier_than_the_limit_never_passes_and_never_spins() {
        let mut w = window(2, 1);
        assert_eq!(w.try_admit(0, 3), Err(S));
        assert_eq!(w.earliest(0, 5), 2 * S);
    }
}
