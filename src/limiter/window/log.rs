//! The sliding window log: exact, at the cost of one entry per admission.
//!
//! Admissions are kept oldest first in a ring buffer ([`VecDeque`]), each as
//! its instant and the running total of weight admitted up to and including
//! it. The weight inside the window is then one subtraction, and the instant
//! a refused weight would pass is a binary search for the entry whose expiry
//! frees enough: O(log n), no scan. Expired entries leave from the front in
//! O(1); admissions at the same instant share one entry.

use std::collections::VecDeque;

use super::{Algorithm, LockOnly, Nanos, QueuedLimiter, Quota, RequestRate};
use crate::Error;

/// Sliding-log state: the admissions of the last W, so that no window of
/// length W ever holds more than N.
///
/// **Exact.** An admission at `t` counts against every window containing
/// `t`; a call of weight `w` at `now` passes if and only if the admissions
/// in `(now − W, now]` weigh at most `N − w`. So every half-open window
/// `[s, s + W)` holds at most N, and nothing the quota allows is refused.
/// A weighted admission of `w` counts `w`.
///
/// **Memory is proportional to N per active key:** one 16-byte entry per
/// distinct admission instant still inside the window, so at most N entries
/// (16·N bytes, plus the ring buffer's inline part; the buffer grows by
/// doubling but never past N entries, and shrinks when mostly empty). A key
/// whose window is empty is idle and a [`KeyedLimiter`] evicts it. Use
/// [`memory_bytes`](Self::memory_bytes) to see what one key holds now, and
/// [`SlidingWindowCounter`] when 16·N bytes per key is too much.
///
/// **Adjustments.** "Only `r` remain" is recorded as a phantom admission of
/// the missing weight at `now`, which frees a window later (the server's
/// calls are assumed as late as possible, so the log never runs ahead of
/// it). A new window ([`set_remaining`](Algorithm::set_remaining)) forgets
/// the log and starts from one phantom of `N − r`. Lowering the limit keeps
/// at most N entries by folding the oldest into their successors: their
/// weight is then counted as if admitted a little later, which can only
/// delay, never over-admit.
///
/// ```
/// use reqwest_pace::limiter::{Algorithm, SlidingLog};
/// use reqwest_pace::RequestRate;
///
/// const S: u64 = 1_000_000_000;
/// let mut log = SlidingLog::new(RequestRate::per_minute(60)?)?;
/// // 60 at 0:59; unlike a fixed window, 1:00 brings nothing back...
/// assert_eq!(log.try_admit(59 * S, 60), Ok(()));
/// assert_eq!(log.try_admit(60 * S, 1), Err(119 * S));
/// // ...the first call frees exactly a minute after it was admitted.
/// assert_eq!(log.try_admit(119 * S, 60), Ok(()));
/// assert_eq!(log.stored(), 1); // one entry per instant, whatever the weight
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
///
/// [`KeyedLimiter`]: crate::KeyedLimiter
/// [`SlidingWindowCounter`]: super::SlidingWindowCounter
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
    /// Oldest first; instants non-decreasing, totals increasing.
    entries: VecDeque<Entry>,
    /// The running total before the first entry. Totals wrap (they would
    /// need 584 years at one per nanosecond to do so); only differences
    /// between them are ever used, and those are at most N apart.
    base: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    at: Nanos,
    /// Weight admitted from the log's creation up to and including this entry.
    total: u64,
}

/// An exact sliding-log limiter with FIFO waiting: [`QueuedLimiter`] over
/// [`SlidingLog`].
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::limiter::SlidingLogLimiter;
/// use reqwest_pace::{Error, RequestRate};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Error> {
/// // At most 3 in any second.
/// let limiter = SlidingLogLimiter::sliding_log(RequestRate::per_second(3)?)?;
/// let start = tokio::time::Instant::now();
/// limiter.try_acquire(1)?;
/// tokio::time::advance(Duration::from_millis(400)).await;
/// limiter.try_acquire(2)?;
/// // The window is full until the first call is a second old.
/// match limiter.try_acquire(1) {
///     Err(Error::NotYet { wait, .. }) => assert_eq!(wait, Duration::from_millis(600)),
///     other => panic!("unexpected {other:?}"),
/// }
/// // Two more have to wait for the two taken at 400 ms.
/// limiter.acquire(1).await?;
/// limiter.acquire(2).await?;
/// assert_eq!(start.elapsed(), Duration::from_millis(1400));
/// # Ok(())
/// # }
/// ```
pub type SlidingLogLimiter = QueuedLimiter<SlidingLog>;

impl QueuedLimiter<SlidingLog> {
    /// An exact sliding log admitting at most `limit.count()` in any
    /// `limit.per()`, starting empty.
    ///
    /// Fails on a window longer than 584 years (a zero count or period is
    /// already refused by [`RequestRate`]).
    pub fn sliding_log(limit: RequestRate) -> Result<Self, Error> {
        SlidingLog::new(limit).map(Self::from_algorithm)
    }
}

fn as_len(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl SlidingLog {
    /// An empty log admitting at most `limit.count()` in any `limit.per()`.
    ///
    /// Fails on a window longer than 584 years.
    pub fn new(limit: RequestRate) -> Result<SlidingLog, Error> {
        Ok(SlidingLog {
            quota: Quota::new(limit, "sliding log")?,
            entries: VecDeque::new(),
            base: 0,
        })
    }

    /// Bytes this key's state occupies now, inline and on the heap: at most
    /// `size_of::<SlidingLog>() + 16·N` (88 + 16·N on 64-bit targets), plus
    /// the 64-byte pacing bucket while a block is being paced out.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.quota.heap_bytes()
    }

    /// How many entries are stored: distinct admission instants not yet
    /// dropped, at most N.
    pub fn stored(&self) -> usize {
        self.entries.len()
    }

    fn total(&self) -> u64 {
        self.entries.back().map_or(self.base, |e| e.total)
    }

    /// Index of the first entry still inside the window at `now`.
    fn first_live(&self, now: Nanos) -> usize {
        let window = self.quota.window;
        self.entries
            .partition_point(|e| e.at.saturating_add(window) <= now)
    }

    /// The running total just before entry `i`.
    fn total_before(&self, i: usize) -> u64 {
        match i.checked_sub(1).and_then(|j| self.entries.get(j)) {
            Some(e) => e.total,
            None => self.base,
        }
    }

    /// Weight admitted in `(now − W, now]`.
    fn live(&self, now: Nanos) -> u64 {
        self.total()
            .wrapping_sub(self.total_before(self.first_live(now)))
    }

    /// Exact for `weight` ≤ N: the first instant at which the window holds
    /// at most `N − weight`.
    fn ready(&self, now: Nanos, weight: u64) -> Nanos {
        let first = self.first_live(now);
        let start = self.total_before(first);
        let live = self.total().wrapping_sub(start);
        let excess = u128::from(live) + u128::from(weight);
        let Some(excess) = excess
            .checked_sub(u128::from(self.quota.limit()))
            .filter(|&e| e > 0)
        else {
            return now;
        };
        // The first entry whose expiry frees `excess`: the first whose
        // running total reaches `start + excess`. Totals are compared as
        // offsets from `base`, which increase along the whole log.
        let offset = |total: u64| u128::from(total.wrapping_sub(self.base));
        let target = offset(start) + excess;
        let i = self.entries.partition_point(|e| offset(e.total) < target);
        // With weight ≤ N, `excess` ≤ `live`, so such an entry exists; if it
        // did not, the last expiry is a safe answer.
        let entry = self.entries.get(i).or(self.entries.back());
        entry.map_or(now, |e| e.at.saturating_add(self.quota.window))
    }

    /// Drop the entries that have left the window.
    fn prune(&mut self, now: Nanos) {
        let window = self.quota.window;
        while let Some(front) = self.entries.front() {
            if front.at.saturating_add(window) > now {
                break;
            }
            self.base = front.total;
            self.entries.pop_front();
        }
        self.quota.settle(now);
        self.fit();
    }

    /// Keep at most N entries and no more than twice the needed room.
    fn fit(&mut self) {
        let limit = as_len(self.quota.limit());
        // Folding the oldest entry into the next (dropping it without moving
        // `base`) counts its weight at the next one's instant: later, so
        // never more permissive.
        while self.entries.len() > limit {
            self.entries.pop_front();
        }
        let len = self.entries.len();
        if self.entries.capacity() > 16 && self.entries.capacity() > 4 * len {
            self.entries.shrink_to(2 * len);
        }
    }

    /// Record `weight` as admitted at `now` (or at the newest entry's
    /// instant, should `now` be earlier, to keep the log in order).
    fn record(&mut self, now: Nanos, weight: u64) {
        let total = self.total().wrapping_add(weight);
        match self.entries.back_mut() {
            Some(back) if back.at >= now => back.total = total,
            _ => {
                let len = self.entries.len();
                if len == self.entries.capacity() {
                    // Double, but never past N entries.
                    let room = as_len(self.quota.limit()).saturating_sub(len);
                    self.entries.reserve_exact(len.max(4).min(room).max(1));
                }
                self.entries.push_back(Entry { at: now, total });
            }
        }
        self.fit();
    }
}

impl Algorithm for SlidingLog {
    type FastPath = LockOnly;

    /// N: a whole window's worth.
    fn capacity(&self) -> u64 {
        self.quota.limit()
    }

    fn try_admit(&mut self, now: Nanos, weight: u64) -> Result<(), Nanos> {
        self.prune(now);
        self.quota.check(now, weight, self.earliest(now, weight))?;
        self.record(now, weight);
        self.quota.take(now, weight);
        Ok(())
    }

    fn earliest(&self, now: Nanos, weight: u64) -> Nanos {
        self.quota.earliest(now, weight, |w| self.ready(now, w))
    }

    /// Keep the window and make the limit the rate's share of it (see the
    /// module docs), judging the admissions already logged by it.
    fn set_rate(&mut self, now: Nanos, rate: RequestRate) {
        self.quota.set_rate(now, rate);
        self.prune(now);
    }

    /// Ignored: a window's burst is its limit, which comes with the rate
    /// ([`set_rate`](Algorithm::set_rate)).
    fn set_capacity(&mut self, _now: Nanos, _capacity: u64) {}

    /// Log the missing weight as a phantom admission at `now`.
    fn limit_remaining(&mut self, now: Nanos, remaining: u64) {
        self.prune(now);
        let used = self.quota.limit() - remaining.min(self.quota.limit());
        let live = self.live(now);
        if used > live {
            self.record(now, used - live);
        }
    }

    /// Forget the log; log `N − remaining` as admitted at `now`.
    fn set_remaining(&mut self, now: Nanos, remaining: u64) {
        self.base = self.total();
        self.entries.clear();
        self.prune(now);
        let used = self.quota.limit() - remaining.min(self.quota.limit());
        if used > 0 {
            self.record(now, used);
        }
    }

    /// Nothing before `until`; then one call at `until` and one per W/N
    /// after it, until the pace catches up with the quota. The log still
    /// applies on top.
    fn block_until(&mut self, now: Nanos, until: Nanos) {
        self.prune(now);
        self.quota.block_until(now, until);
    }

    fn unblock(&mut self, now: Nanos) {
        self.prune(now);
        self.quota.unblock(now);
    }

    /// Nothing admitted in the last W, and no block.
    fn is_idle(&self, now: Nanos) -> bool {
        self.live(now) == 0 && self.quota.pace_idle(now)
    }

    fn rate(&self) -> RequestRate {
        self.quota.rate
    }

    fn available(&self, now: Nanos) -> u64 {
        self.quota
            .limit()
            .saturating_sub(self.live(now))
            .min(self.quota.pace_available(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000 * MS;

    fn log(n: u64, seconds: u64) -> SlidingLog {
        SlidingLog::new(RequestRate::new(n, Duration::from_secs(seconds)).unwrap()).unwrap()
    }

    #[test]
    fn each_admission_frees_exactly_one_window_later() {
        let mut l = log(3, 1);
        assert_eq!(l.try_admit(0, 1), Ok(()));
        assert_eq!(l.try_admit(100 * MS, 1), Ok(()));
        assert_eq!(l.try_admit(200 * MS, 1), Ok(()));
        assert_eq!(l.try_admit(300 * MS, 1), Err(S));
        assert_eq!(l.try_admit(300 * MS, 2), Err(S + 100 * MS));
        assert_eq!(l.try_admit(300 * MS, 3), Err(S + 200 * MS));
        assert_eq!(l.try_admit(S - 1, 1), Err(S));
        assert_eq!(l.try_admit(S, 1), Ok(()));
        assert_eq!(l.available(S), 0);
        assert_eq!(l.available(S + 100 * MS), 1);
    }

    #[test]
    fn weights_count_in_full_and_share_an_entry_per_instant() {
        let mut l = log(10, 1);
        assert_eq!(l.try_admit(0, 4), Ok(()));
        assert_eq!(l.try_admit(0, 4), Ok(()));
        assert_eq!(l.stored(), 1);
        assert_eq!(l.try_admit(10 * MS, 2), Ok(()));
        assert_eq!(l.try_admit(20 * MS, 1), Err(S));
        // Freeing 3 needs the 8 admitted at 0 to go.
        assert_eq!(l.try_admit(20 * MS, 3), Err(S));
        assert_eq!(l.try_admit(S, 8), Ok(()));
        assert_eq!(l.try_admit(S, 1), Err(S + 10 * MS));
    }

    #[test]
    fn memory_stays_within_n_entries() {
        let mut l = log(100, 1);
        for i in 0..10_000u64 {
            let _ = l.try_admit(i * MS, 1);
            assert!(l.stored() <= 100);
            assert!(l.entries.capacity() <= 100);
        }
        assert!(l.memory_bytes() <= std::mem::size_of::<SlidingLog>() + 16 * 100);
        // Mostly empty again: the buffer gives its room back.
        l.try_admit(100 * S, 1).unwrap();
        assert!(l.entries.capacity() <= 16);
    }

    #[test]
    fn remaining_is_a_phantom_admission_at_now() {
        let mut l = log(10, 1);
        l.try_admit(0, 2).unwrap();
        l.limit_remaining(500 * MS, 3);
        assert_eq!(l.available(500 * MS), 3);
        l.limit_remaining(500 * MS, 8);
        assert_eq!(l.available(500 * MS), 3);
        // The real 2 free at 1 s, the phantom 5 at 1.5 s.
        assert_eq!(l.available(S), 5);
        assert_eq!(l.available(1_500 * MS), 10);
        l.set_remaining(1_500 * MS, 0);
        assert_eq!(l.try_admit(1_500 * MS, 1), Err(2_500 * MS));
        l.set_remaining(1_600 * MS, 7);
        assert_eq!(l.available(1_600 * MS), 7);
        l.set_remaining(1_600 * MS, 70);
        assert_eq!(l.available(1_600 * MS), 10);
        assert!(l.is_idle(1_600 * MS));
    }

    #[test]
    fn lowering_the_limit_folds_old_entries_forward() {
        let mut l = log(10, 10);
        for i in 0..10 {
            l.try_admit(i * S / 2, 1).unwrap();
        }
        // One per 3 s: 3 per the 10 s window. Only 3 entries are kept; the 7
        // oldest count at 3.5 s.
        l.set_rate(
            5 * S,
            RequestRate::every(std::time::Duration::from_secs(3)).unwrap(),
        );
        assert_eq!(l.stored(), 3);
        assert_eq!(l.available(13 * S), 0);
        assert_eq!(l.try_admit(13 * S, 1), Err(13 * S + S / 2));
        assert_eq!(l.try_admit(13 * S, 2), Err(14 * S));
        assert_eq!(l.available(14 * S + S / 2), 3);
        l.set_rate(15 * S, RequestRate::per_second(20).unwrap());
        assert_eq!(l.capacity(), 200);
        assert_eq!(l.available(15 * S), 200);
        l.set_capacity(15 * S, 3);
        assert_eq!(l.capacity(), 200);
    }

    #[test]
    fn a_block_resumes_at_the_pace() {
        let mut l = log(4, 1);
        l.block_until(0, 2 * S);
        assert_eq!(l.try_admit(S, 1), Err(2 * S));
        assert_eq!(l.try_admit(2 * S, 1), Ok(()));
        assert_eq!(l.try_admit(2 * S, 1), Err(2 * S + 250 * MS));
        assert_eq!(l.try_admit(2 * S + 250 * MS, 1), Ok(()));
        assert!(!l.is_idle(2 * S + 250 * MS));
        assert!(l.is_idle(4 * S));
    }

    #[test]
    fn unblock_resumes_at_the_pace_from_now() {
        let mut l = log(4, 1);
        l.block_until(0, 60 * S);
        l.unblock(S);
        assert_eq!(l.try_admit(S, 1), Ok(()));
        assert_eq!(l.try_admit(S, 1), Err(S + 250 * MS));
        assert!(l.is_idle(3 * S));
    }

    #[test]
    fn an_earlier_now_is_recorded_in_order() {
        let mut l = log(5, 1);
        l.try_admit(S, 1).unwrap();
        l.try_admit(S / 2, 1).unwrap();
        assert_eq!(l.stored(), 1);
        assert_eq!(l.available(2 * S), 5);
    }
}
