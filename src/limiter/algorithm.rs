//! The contract between the waiting machinery and a limiting algorithm.

use super::Rate;

/// Nanoseconds since a limiter's origin (its creation instant). Algorithms
/// see time only as this number, passed in by the caller, so their arithmetic
/// is a pure function of `now` and can be tested without a clock.
pub type Nanos = u64;

/// A limiting algorithm: the pure, clock-free arithmetic of one key's state.
///
/// [`RateLimiter`](super::RateLimiter) wraps an `Algorithm` with a clock, a
/// lock and a FIFO queue of waiters; the algorithm itself only answers "may
/// `weight` go at `now`, and if not, when?". Implementations must be exact:
/// when [`try_admit`](Algorithm::try_admit) refuses with `ready_at`, a call at
/// `ready_at` with no change in between must succeed.
pub trait Algorithm: Send + 'static {
    /// The largest weight that can ever be admitted in one call.
    fn capacity(&self) -> u64;

    /// Admit `weight` at `now`, or say the earliest instant it would be
    /// admitted if nothing else changes. `weight` is at most
    /// [`capacity`](Algorithm::capacity) and at least 1.
    fn try_admit(&mut self, now: Nanos, weight: u64) -> Result<(), Nanos>;

    /// The earliest instant at which `weight` could be admitted, without
    /// admitting it. `weight` may exceed the capacity (it is then the sum of
    /// a queue); the answer is then a best estimate.
    fn earliest(&self, now: Nanos, weight: u64) -> Nanos;

    /// Change the sustained rate, keeping the tokens already earned.
    fn set_rate(&mut self, now: Nanos, rate: Rate);

    /// Change the capacity (the burst), keeping the tokens already earned
    /// (clamped to the new capacity).
    fn set_capacity(&mut self, now: Nanos, capacity: u64);

    /// Lower what is available now to at most `remaining`; never raises it.
    fn limit_remaining(&mut self, now: Nanos, remaining: u64);

    /// Set what is available now to `remaining` (clamped to the capacity),
    /// raising it if need be: for the start of a new server window.
    fn set_remaining(&mut self, now: Nanos, remaining: u64);

    /// Admit nothing before `until`; from `until` on, resume at the rate
    /// (one token at `until`, then one per interval), not with a full burst.
    fn block_until(&mut self, now: Nanos, until: Nanos);

    /// Whether the state is indistinguishable from a freshly created one
    /// at `now`, so that a keyed map may drop it.
    fn is_idle(&self, now: Nanos) -> bool;

    /// The current sustained rate.
    fn rate(&self) -> Rate;

    /// What is available at `now`, in whole tokens.
    fn available(&self, now: Nanos) -> u64;

    /// The state at `now` as a plain token bucket, when it is no more than
    /// that (no block in force): what lets [`RateLimiter`](super::RateLimiter)
    /// decide calls without its lock, and a keyed map keep a key compact.
    /// `None`, the default, decides every call under the lock.
    fn as_bucket(&self, now: Nanos) -> Option<BucketState> {
        let _ = now;
        None
    }

    /// Take back the `full_at` of a state given out by
    /// [`as_bucket`](Algorithm::as_bucket), after decisions made without the
    /// lock moved it. Called only on algorithms that gave one out.
    fn set_bucket_full_at(&mut self, full_at: Nanos) {
        let _ = full_at;
    }
}

/// A token bucket's whole state between adjustments: see
/// [`Algorithm::as_bucket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketState {
    /// Nanoseconds per token.
    pub interval: Nanos,
    /// The most tokens held at once.
    pub capacity: u64,
    /// When the bucket is full again, in nanoseconds since the origin.
    pub full_at: Nanos,
}
