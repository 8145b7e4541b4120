//! The contract between the waiting machinery and a limiting algorithm.

use super::RequestRate;

/// Nanoseconds since a limiter's origin (its creation instant). Algorithms
/// see time only as this number, passed in by the caller, so their arithmetic
/// is a pure function of `now` and can be tested without a clock.
pub type Nanos = u64;

/// A limiting algorithm: the pure, clock-free arithmetic of one key's state.
///
/// [`QueuedLimiter`](super::QueuedLimiter) wraps an `Algorithm` with a clock, a
/// lock and a FIFO queue of waiters; the algorithm itself only answers "may
/// `weight` go at `now`, and if not, when?". Implementations must be exact:
/// when [`try_admit`](Algorithm::try_admit) refuses with `ready_at`, a call at
/// `ready_at` with no change in between must succeed.
///
/// Every call is decided under the limiter's lock unless the algorithm names
/// a [`FastPath`] of its own: only the token bucket ([`Gcra`](super::Gcra))
/// does, with the lock-free word of [`BucketWord`](super::BucketWord);
/// others name [`LockOnly`].
pub trait Algorithm: Send + 'static {
    /// How a [`QueuedLimiter`](super::QueuedLimiter) of this algorithm decides
    /// calls without its lock: [`LockOnly`] when it never does.
    type FastPath: FastPath<Self>;

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
    fn set_rate(&mut self, now: Nanos, rate: RequestRate);

    /// Change the capacity (the burst), keeping the tokens already earned
    /// (clamped to the new capacity).
    fn set_capacity(&mut self, now: Nanos, capacity: u64);

    /// Lower what is available now to at most `remaining`; never raises it.
    fn limit_remaining(&mut self, now: Nanos, remaining: u64);

    /// Lower what was available at `at` (at or before `now`: when a server
    /// counted what it says remains) to at most `remaining`, keeping what
    /// the rate has given back since; never raises what is available now.
    /// The default keeps nothing back: as
    /// [`limit_remaining`](Self::limit_remaining) now; the token bucket
    /// keeps the refill since `at`.
    fn limit_remaining_at(&mut self, now: Nanos, at: Nanos, remaining: u64) {
        let _ = at;
        self.limit_remaining(now, remaining);
    }

    /// Set what is available now to `remaining` (clamped to the capacity),
    /// raising it if need be: for the start of a new server window.
    fn set_remaining(&mut self, now: Nanos, remaining: u64);

    /// Take `weight` more than was admitted, at once and without waiting:
    /// a call that turned out to cost more than it was charged. What is
    /// available may go below nothing (a debt the refill pays first),
    /// where the algorithm can hold one; the default lowers what is
    /// available by `weight`, down to nothing.
    fn charge(&mut self, now: Nanos, weight: u64) {
        let available = self.available(now);
        self.limit_remaining(now, available.saturating_sub(weight));
    }

    /// Give back `weight` of what was admitted: a call that turned out to
    /// cost less than it was charged. Never more than the capacity is
    /// available after it. The default gives nothing back: a window's
    /// count cannot be lowered through [`set_remaining`](Self::set_remaining)
    /// without moving when its entries leave (a sliding log's would all
    /// leave a window from now, a charge rather than a refund); the token
    /// bucket gives back exactly.
    fn refund(&mut self, now: Nanos, weight: u64) {
        let _ = (now, weight);
    }

    /// Admit nothing before `until`; from `until` on, resume at the rate
    /// (one token at `until`, then one per interval), not with a full burst.
    fn block_until(&mut self, now: Nanos, until: Nanos);

    /// Lift any block, as if it ended at `now`: from `now` on, resume at
    /// the rate as [`block_until`](Algorithm::block_until) would at its end
    /// (one token now, then one per interval). Without a block in force it
    /// changes nothing.
    fn unblock(&mut self, now: Nanos);

    /// Whether the state is indistinguishable from a freshly created one
    /// at `now`, so that a keyed map may drop it.
    fn is_idle(&self, now: Nanos) -> bool;

    /// The current sustained rate.
    fn rate(&self) -> RequestRate;

    /// What is available at `now`, in whole tokens.
    fn available(&self, now: Nanos) -> u64;
}

/// What a [`QueuedLimiter`](super::QueuedLimiter) keeps beside its lock to
/// decide some calls of algorithm `A` without taking it.
///
/// The limiter calls it at three points, and the last two always under its
/// lock: before taking the lock for a call ([`try_decide`]), as the lock is
/// taken ([`take_back`], which must give the algorithm back every decision
/// made without the lock, so that the lock sees the whole state), and as
/// it is released with nobody queued ([`hand_over`]). Sealed: the crate's
/// token bucket has the only fast path other than [`LockOnly`].
///
/// [`try_decide`]: FastPath::try_decide
/// [`take_back`]: FastPath::take_back
/// [`hand_over`]: FastPath::hand_over
pub trait FastPath<A: ?Sized>: Send + Sync + Sized + sealed::Sealed {
    /// The fast path of a limiter made with `algorithm`, at instant 0.
    fn new(algorithm: &A) -> Self;

    /// Decide `weight` (at least 1) at `now` without the lock: `Ok` when
    /// admitted, `Err` with the instant it would be, `None` when the lock
    /// must decide.
    fn try_decide(&self, now: Nanos, weight: u64) -> Option<Result<(), Nanos>>;

    /// Under the lock, as it is taken: stop deciding without it, and give
    /// `algorithm` the state those decisions left.
    fn take_back(&self, algorithm: &mut A);

    /// Under the lock, as it is released with nobody queued: decide without
    /// the lock from now on if `algorithm` at `now` allows it. Returns
    /// whether it does.
    fn hand_over(&self, algorithm: &A, now: Nanos) -> bool;
}

/// The fast path of an algorithm that has none: every call takes the lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockOnly;

impl<A: ?Sized> FastPath<A> for LockOnly {
    fn new(_: &A) -> Self {
        LockOnly
    }

    fn try_decide(&self, _: Nanos, _: u64) -> Option<Result<(), Nanos>> {
        None
    }

    fn take_back(&self, _: &mut A) {}

    fn hand_over(&self, _: &A, _: Nanos) -> bool {
        false
    }
}

pub(super) mod sealed {
    /// Keeps [`FastPath`](super::FastPath) to this crate's implementations.
    pub trait Sealed {}

    impl Sealed for super::LockOnly {}
}
