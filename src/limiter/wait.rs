//! The waiting around an [`Algorithm`]: a clock, a lock and a FIFO queue.
//!
//! Waiters queue in arrival order. Only the waiter at the head of the queue
//! holds a timer, set to the exact instant its algorithm says it can go;
//! everyone behind it sleeps on its waker alone. When the head is admitted
//! (or dropped) it wakes exactly the next waiter, so one admission costs one
//! wake-up, whatever the length of the queue. An adjustment (new rate,
//! Retry-After block) wakes only the head, which recomputes its instant.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use tokio::time::{Instant, Sleep};

use super::algorithm::{Algorithm, FastPath, Nanos};
use super::gcra::Gcra;
use super::RequestRate;
use crate::sync::{lock_model as lock, AtomicU64, Mutex, MutexGuard};
use crate::Error;

/// A limiter: one [`Algorithm`]'s state behind a lock, a tokio clock and a
/// fair queue of waiters.
///
/// Guarantees, whatever the algorithm:
/// - **FIFO.** Waiters are admitted in the order they first polled
///   [`acquire`](QueuedLimiter::acquire); a later arrival never barges ahead
///   (and [`try_acquire`](QueuedLimiter::try_acquire) refuses while anyone
///   waits).
/// - **One wake-up per admission.** Only the head of the queue holds a timer;
///   N waiters do not all wake for one token.
/// - **Cancel safety.** Dropping an `acquire` future before it completes
///   gives its place back; it has taken no tokens, so nobody loses any.
/// - **Tokio time.** Time is [`tokio::time::Instant`], so tests under
///   `#[tokio::test(start_paused = true)]` run instantly and exactly.
///   Waiting needs a Tokio runtime with the time driver enabled.
/// - **Lock-free when it can be.** A token bucket that nobody waits on, with
///   no block in force and still on the rate and capacity it was made with,
///   keeps its state in one atomic word ([`BucketWord`](super::BucketWord),
///   the bucket's [`FastPath`]): calls are then decided by one
///   compare-and-swap, and refused by a plain load, without the lock. Every
///   other case (waiting, adjusting, a bucket whose rate the server changed,
///   the window algorithms) takes the lock, which first takes the word back.
///
/// The token bucket is [`TokenBucket`], this type over [`Gcra`].
pub struct QueuedLimiter<A: Algorithm> {
    origin: Instant,
    state: Mutex<State<A>>,
    /// While nobody is queued: the earliest instant (nanoseconds since the
    /// origin) at which a weight of 1 could be admitted, or 0 when it could
    /// be now or nobody knows. Written under the lock by every change,
    /// read without it, so `try_acquire(1)` can refuse with an exact wait
    /// without taking the lock. A stale read can only refuse a call that a
    /// change made a moment later would have let through, never admit one.
    /// 0 while the fast path decides.
    hint: AtomicU64,
    /// The algorithm's way of deciding calls without the lock, if it has
    /// one: taken back as the lock is taken, handed over as it is released
    /// with nobody queued.
    fast: A::FastPath,
}

/// The state, locked at `now`; on release it hands the state over to the
/// fast path or publishes the refusal hint.
struct Locked<'a, A: Algorithm> {
    state: MutexGuard<'a, State<A>>,
    limiter: &'a QueuedLimiter<A>,
    now: Nanos,
}

impl<A: Algorithm> Deref for Locked<'_, A> {
    type Target = State<A>;
    fn deref(&self) -> &State<A> {
        &self.state
    }
}

impl<A: Algorithm> DerefMut for Locked<'_, A> {
    fn deref_mut(&mut self) -> &mut State<A> {
        &mut self.state
    }
}

impl<A: Algorithm> Drop for Locked<'_, A> {
    fn drop(&mut self) {
        // Still under the lock here: the guard field drops after this body.
        let limiter = self.limiter;
        if self.state.queue.is_empty() && limiter.fast.hand_over(&self.state.algorithm, self.now) {
            limiter.hint.store(0, Ordering::Release);
            return;
        }
        let hint = if self.state.queue.is_empty() {
            let ready = self.state.algorithm.earliest(self.now, 1);
            if ready > self.now {
                ready
            } else {
                0
            }
        } else {
            0
        };
        limiter.hint.store(hint, Ordering::Release);
    }
}

struct State<A> {
    algorithm: A,
    queue: VecDeque<Waiter>,
    queued_weight: u64,
    next_id: u64,
    /// The instant the last waiter was admitted at, when that was earlier
    /// than the instant it was admitted (its timer fired late): the next
    /// head goes at its own instant from there, if that has passed too.
    /// Cleared by any other admission.
    caught_up: Option<Nanos>,
}

impl<A: Algorithm> State<A> {
    /// The instant a head that set no timer of its own (it moved up when
    /// the waiter before it was admitted) is admitted at: its own instant
    /// after the one the waiter before it went at, when the timer that
    /// admitted that one fired late and this one's instant has passed
    /// too; else `now`. Without it a bucket of one faster than the timer
    /// (above 1 000/s) would admit one waiter per timer tick, and lose the
    /// rest; with it the admissions keep to the algorithm's instants,
    /// at most [`TIMER_RESOLUTION`] before the instant they are made, as
    /// [`admitted_at`] keeps the head's.
    fn catch_up(&self, now: Nanos, weight: u64) -> Nanos {
        let Some(floor) = self
            .caught_up
            .filter(|&at| at <= now && now - at <= TIMER_RESOLUTION)
        else {
            return now;
        };
        let due = self.algorithm.earliest(floor, weight).max(floor);
        if due <= now {
            due
        } else {
            now
        }
    }
}

impl<A> State<A> {
    /// Wake the waiter at the head of the queue, if any: the one wake-up an
    /// admission, a departure or an adjustment owes.
    fn wake_head(&mut self) {
        if let Some(waker) = self.queue.front_mut().and_then(|w| w.waker.take()) {
            waker.wake();
        }
    }

    /// Remove the waiter at `pos`; if it was the head, pass the baton.
    fn leave(&mut self, pos: usize) {
        if let Some(waiter) = self.queue.remove(pos) {
            self.queued_weight -= waiter.weight;
        }
        if pos == 0 {
            self.wake_head();
        }
    }
}

struct Waiter {
    id: u64,
    weight: u64,
    waker: Option<Waker>,
}

/// A token bucket: capacity (the burst) and rate (the sustained refill)
/// kept apart, FIFO waiting, exact refusal times.
///
/// A new bucket starts **full**: a client that has not sent anything yet may
/// send a burst of `capacity` at once, which is what a client-side limiter
/// usually wants (the server's own limit also starts full). Use
/// [`TokenBucket::with_initial`] to start lower, for example empty after a
/// restart that must not burst.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::{RequestRate, TokenBucket};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), reqwest_pace::Error> {
/// // 10 per second sustained, bursts of up to 5.
/// let bucket = TokenBucket::new(RequestRate::per_second(10)?, 5)?;
/// let start = tokio::time::Instant::now();
/// for _ in 0..5 {
///     bucket.try_acquire(1)?; // the burst goes at once
/// }
/// // The sixth has to wait one interval; try_acquire says exactly how long.
/// match bucket.try_acquire(1) {
///     Err(reqwest_pace::Error::NotYet { wait, .. }) => {
///         assert_eq!(wait, Duration::from_millis(100))
///     }
///     other => panic!("unexpected {other:?}"),
/// }
/// bucket.acquire(1).await?; // waits its turn
/// assert_eq!(start.elapsed(), Duration::from_millis(100));
/// # Ok(())
/// # }
/// ```
pub type TokenBucket = QueuedLimiter<Gcra>;

impl QueuedLimiter<Gcra> {
    /// A full bucket of `capacity` tokens refilling at `rate`.
    ///
    /// Fails on a zero capacity.
    pub fn new(rate: RequestRate, capacity: u64) -> Result<Self, Error> {
        Self::with_initial(rate, capacity, capacity)
    }

    /// A bucket of `capacity` tokens refilling at `rate`, holding `initial`
    /// tokens (clamped to `capacity`) at creation.
    pub fn with_initial(rate: RequestRate, capacity: u64, initial: u64) -> Result<Self, Error> {
        if capacity == 0 {
            return Err(Error::config("a token bucket needs a capacity above zero"));
        }
        Ok(Self::from_algorithm(Gcra::new(rate, capacity, initial)))
    }
}

impl QueuedLimiter<Gcra> {
    /// The bucket as a keyed map's compact entry on the map's `origin` at
    /// `now` (nanoseconds since it): its `full_at`, when nothing else about
    /// it differs from a bucket of `rate` and `capacity` (nobody queued, no
    /// block in force).
    pub(crate) fn compact_state(
        &self,
        rate: RequestRate,
        capacity: u64,
        origin: Instant,
        now: Nanos,
    ) -> Option<Nanos> {
        if self.origin != origin {
            return None;
        }
        let state = self.lock_at(now);
        if !state.queue.is_empty() || state.algorithm.rate() != rate {
            return None;
        }
        let full_at = state.algorithm.plain_full_at(now)?;
        (state.algorithm.capacity() == capacity).then_some(full_at)
    }
}

impl<A: Algorithm> QueuedLimiter<A> {
    /// Wrap an algorithm whose instant 0 is now.
    pub fn from_algorithm(algorithm: A) -> Self {
        Self::from_algorithm_at(algorithm, Instant::now())
    }

    /// Wrap an algorithm whose instant 0 is `origin` (a keyed map's, so
    /// that its compact entries and full limiters share one time line).
    pub(crate) fn from_algorithm_at(algorithm: A, origin: Instant) -> Self {
        let fast = A::FastPath::new(&algorithm);
        QueuedLimiter {
            fast,
            origin,
            state: Mutex::new(State {
                algorithm,
                queue: VecDeque::new(),
                queued_weight: 0,
                next_id: 0,
                caught_up: None,
            }),
            hint: AtomicU64::new(0),
        }
    }

    /// Lock the state, taking back what the fast path decided first.
    fn lock_at(&self, now: Nanos) -> Locked<'_, A> {
        let mut state = lock(&self.state);
        self.fast.take_back(&mut state.algorithm);
        Locked {
            state,
            limiter: self,
            now,
        }
    }

    /// Lock the state at the instant the lock is taken. An adjustment reads
    /// the clock only under the lock, so that no decision the lock has taken
    /// back was made at a later instant than the adjustment: a rate change
    /// scales the deficit it sees, and a deficit measured from a stale
    /// `now` would be scaled with the skew in it.
    fn lock_now(&self) -> Locked<'_, A> {
        let mut locked = self.lock_at(0);
        locked.now = self.now();
        locked
    }

    /// Decide without the lock when the fast path can: `None` when the
    /// lock must decide (a weight over the capacity included, whose error
    /// the locked path gives).
    fn try_fast(&self, now: Nanos, weight: u64) -> Option<Result<(), Nanos>> {
        self.fast.try_decide(now, weight)
    }

    fn nanos(&self, at: Instant) -> Nanos {
        let d = at.saturating_duration_since(self.origin);
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    fn instant(&self, at: Nanos) -> Instant {
        self.origin + std::time::Duration::from_nanos(at)
    }

    fn now(&self) -> Nanos {
        self.nanos(Instant::now())
    }

    fn check_weight(algorithm: &A, weight: u64) -> Result<(), Error> {
        let capacity = algorithm.capacity();
        if weight > capacity {
            return Err(Error::WeightExceedsCapacity { weight, capacity });
        }
        Ok(())
    }

    /// Take `weight` tokens now, or say how long until they would be there.
    ///
    /// Refuses with [`Error::NotYet`] while other callers are queued in
    /// [`acquire`](Self::acquire), so it never barges ahead of them; the wait
    /// is then an estimate that counts the queue ahead. With nobody queued
    /// the wait is exact: a call after exactly that long succeeds if nothing
    /// else changed. A weight of 0 always succeeds; a weight over the
    /// capacity is [`Error::WeightExceedsCapacity`].
    pub fn try_acquire(&self, weight: u64) -> Result<(), Error> {
        self.try_acquire_at(Instant::now(), weight)
    }

    /// [`try_acquire`](Self::try_acquire) at an instant the caller has just
    /// read (so a keyed map reads the clock once per decision).
    pub(crate) fn try_acquire_at(&self, at: Instant, weight: u64) -> Result<(), Error> {
        if weight == 0 {
            return Ok(());
        }
        let now = self.nanos(at);
        if let Some(decided) = self.try_fast(now, weight) {
            return decided.map_err(|ready| Error::not_yet_at(ready, now));
        }
        if weight == 1 {
            let hint = self.hint.load(Ordering::Acquire);
            if now < hint {
                return Err(Error::not_yet_at(hint, now));
            }
        }
        let mut state = self.lock_at(now);
        Self::check_weight(&state.algorithm, weight)?;
        let outcome = if state.queue.is_empty() {
            state.caught_up = None;
            state.algorithm.try_admit(now, weight)
        } else {
            Err(state.algorithm.earliest(now, state.queued_weight + weight))
        };
        outcome.map_err(|ready| Error::not_yet_at(ready, now))
    }

    /// Wait until `weight` tokens can be taken, in FIFO order, then take
    /// them.
    ///
    /// Cancel-safe: dropping the future before it completes takes nothing
    /// and lets the next waiter move up. A weight over the capacity fails at
    /// once with [`Error::WeightExceedsCapacity`], and so does a waiter whose
    /// weight the capacity is lowered below while it waits (when it reaches
    /// the head of the queue), so that it cannot hold the queue for ever.
    pub fn acquire(&self, weight: u64) -> Acquire<'_, A> {
        Acquire {
            limiter: self,
            weight,
            id: None,
            sleep: None,
            scheduled: None,
            yields: 0,
        }
    }

    /// Change the sustained rate. Tokens already earned are kept.
    pub fn set_rate(&self, rate: RequestRate) {
        self.with_state(|algorithm, now| algorithm.set_rate(now, rate));
    }

    /// Raise the sustained rate by `parts_per_million` millionths of
    /// itself, up to `at_most` (see [`Adjustment::GrowRate`](super::Adjustment::GrowRate)).
    /// Tokens already earned are kept; the rate is never lowered.
    pub fn grow_rate(&self, parts_per_million: u32, at_most: RequestRate) {
        self.with_state(|algorithm, now| {
            if let Some(rate) = super::grown(algorithm.rate(), parts_per_million, at_most) {
                algorithm.set_rate(now, rate);
            }
        });
    }

    /// Change the capacity (burst). Tokens already earned are kept, up to
    /// the new capacity. Fails on a zero capacity.
    pub fn set_capacity(&self, capacity: u64) -> Result<(), Error> {
        if capacity == 0 {
            return Err(Error::config("a limiter needs a capacity above zero"));
        }
        self.with_state(|algorithm, now| algorithm.set_capacity(now, capacity));
        Ok(())
    }

    /// Lower the tokens available now to at most `remaining` (what a server
    /// says is left). Never raises them.
    pub fn limit_remaining(&self, remaining: u64) {
        self.with_state(|algorithm, now| algorithm.limit_remaining(now, remaining));
    }

    /// Lower the tokens available at `at` (a past instant: when a server
    /// counted what it says is left) to at most `remaining`, keeping what
    /// the rate has given back since (a token bucket; other algorithms
    /// apply it now, see [`Algorithm::limit_remaining_at`]). Never raises
    /// them.
    pub fn limit_remaining_at(&self, remaining: u64, at: Instant) {
        let at = self.nanos(at);
        self.with_state(|algorithm, now| algorithm.limit_remaining_at(now, at, remaining));
    }

    /// Set the tokens available now to `remaining`, raising them if need be.
    /// Meant for the start of a new server window; within a window use
    /// [`limit_remaining`](Self::limit_remaining).
    pub fn set_remaining(&self, remaining: u64) {
        self.with_state(|algorithm, now| algorithm.set_remaining(now, remaining));
    }

    /// Take `weight` more tokens at once, without waiting and even below
    /// nothing (a token bucket then owes them, and the refill pays the
    /// debt first): a call that cost more than it was charged. See
    /// [`Algorithm::charge`].
    pub fn charge(&self, weight: u64) {
        if weight > 0 {
            self.with_state(|algorithm, now| algorithm.charge(now, weight));
        }
    }

    /// Give back `weight` tokens (up to the capacity): a call that cost
    /// less than it was charged. A token bucket gives them back; a window
    /// keeps its count (see [`Algorithm::refund`]).
    pub fn refund(&self, weight: u64) {
        if weight > 0 {
            self.with_state(|algorithm, now| algorithm.refund(now, weight));
        }
    }

    /// Admit nothing before `until` (a server's Retry-After), then resume at
    /// the rate: one token at `until`, the next an interval later, and so on,
    /// rather than releasing every waiter at once. Blocks only ever extend.
    pub fn block_until(&self, until: Instant) {
        let until = self.nanos(until);
        self.with_state(|algorithm, now| algorithm.block_until(now, until));
    }

    /// Lift any block (a Retry-After the caller no longer believes): the
    /// limiter resumes at its rate from now, as it would have at the
    /// block's end.
    pub fn unblock(&self) {
        self.with_state(|algorithm, now| algorithm.unblock(now));
    }

    /// The current sustained rate.
    pub fn rate(&self) -> RequestRate {
        lock(&self.state).algorithm.rate()
    }

    /// The most that can be taken at once.
    pub fn capacity(&self) -> u64 {
        lock(&self.state).algorithm.capacity()
    }

    /// Whole tokens available now (0 while blocked).
    pub fn available(&self) -> u64 {
        let state = self.lock_now();
        state.algorithm.available(state.now)
    }

    /// How many callers are waiting in [`acquire`](Self::acquire).
    pub fn waiting(&self) -> usize {
        lock(&self.state).queue.len()
    }

    /// Whether this limiter is indistinguishable from a fresh one: nobody
    /// waiting and the algorithm back at its starting state.
    pub fn is_idle(&self) -> bool {
        let state = self.lock_now();
        state.queue.is_empty() && state.algorithm.is_idle(state.now)
    }

    /// Run an adjustment, then wake the head waiter so it recomputes its
    /// instant (the adjustment may have made it earlier). One wake-up.
    fn with_state(&self, f: impl FnOnce(&mut A, Nanos)) {
        let mut state = self.lock_now();
        let now = state.now;
        f(&mut state.algorithm, now);
        state.wake_head();
    }
}

impl<A> fmt::Debug for QueuedLimiter<A>
where
    A: Algorithm + fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock_at(self.now());
        f.debug_struct("QueuedLimiter")
            .field("algorithm", &state.algorithm)
            .field("waiting", &state.queue.len())
            .finish()
    }
}

/// The future returned by [`QueuedLimiter::acquire`].
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<'a, A: Algorithm> {
    limiter: &'a QueuedLimiter<A>,
    weight: u64,
    /// Our place in the queue, once we have one.
    id: Option<u64>,
    /// Our timer, while we are the head and must wait.
    sleep: Option<Pin<Box<Sleep>>>,
    /// The instant our timer was set for, while we are the head.
    scheduled: Option<Nanos>,
    /// How many times we yielded instead of setting a timer, as the head.
    yields: u32,
}

/// How late tokio's timer may fire: it counts whole milliseconds, so a
/// sleep until an instant wakes up to a millisecond after it.
const TIMER_RESOLUTION: Nanos = 1_000_000;

/// How many times the head yields to the runtime, instead of setting a
/// timer, for a wait shorter than [`TIMER_RESOLUTION`]: the timer would
/// wake it up to a millisecond late, and a bucket of one at thousands a
/// second (a rate learned from a fast server) would hold every request
/// behind it that long; each yield lets the runtime's other tasks run,
/// and the head tries again when they have (a few microseconds later on a
/// busy runtime). After that many it sets the timer: on a paused clock,
/// which does not move while the runtime is busy, the wait then ends as it
/// would have.
const MAX_YIELDS: u32 = 16;

/// The instant the head is admitted at: the one its timer was set for when
/// the timer fired at most [`TIMER_RESOLUTION`] after it, else `now`. A
/// limiter that paced from the instant the timer fired would lose up to a
/// millisecond per admission (a bucket of one at 137/s would go at 125/s);
/// admitting at the scheduled instant keeps the rate exact and never admits
/// earlier than the algorithm allows.
fn admitted_at(scheduled: Option<Nanos>, now: Nanos) -> Nanos {
    match scheduled {
        Some(at) if at <= now && now - at <= TIMER_RESOLUTION => at,
        _ => now,
    }
}

impl<A: Algorithm> Acquire<'_, A> {
    fn position(state: &State<A>, id: u64) -> Option<usize> {
        // Ids are handed out in increasing order and the queue keeps that
        // order, so a binary search finds any waiter.
        state.queue.binary_search_by_key(&id, |w| w.id).ok()
    }
}

impl<A: Algorithm> Future for Acquire<'_, A> {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let limiter = this.limiter;
        if this.weight == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            let now = limiter.now();
            if this.id.is_none() && limiter.try_fast(now, this.weight) == Some(Ok(())) {
                this.weight = 0;
                return Poll::Ready(Ok(()));
            }
            let mut state = limiter.lock_at(now);
            let id = match this.id {
                Some(id) => id,
                None => {
                    if let Err(e) = QueuedLimiter::check_weight(&state.algorithm, this.weight) {
                        return Poll::Ready(Err(e));
                    }
                    if state.queue.is_empty() && state.algorithm.try_admit(now, this.weight).is_ok()
                    {
                        state.caught_up = None;
                        return Poll::Ready(Ok(()));
                    }
                    let id = state.next_id;
                    state.next_id += 1;
                    state.queue.push_back(Waiter {
                        id,
                        weight: this.weight,
                        waker: None,
                    });
                    state.queued_weight += this.weight;
                    this.id = Some(id);
                    id
                }
            };
            let is_head = state.queue.front().map(|w| w.id) == Some(id);
            if !is_head {
                if let Some(pos) = Self::position(&state, id) {
                    state.queue[pos].waker = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            // The capacity may have been lowered below our weight while we
            // queued: say so rather than wait for ever (and hold the queue).
            let at = match this.scheduled {
                Some(_) => admitted_at(this.scheduled, now),
                None => state.catch_up(now, this.weight),
            };
            let outcome = match QueuedLimiter::check_weight(&state.algorithm, this.weight) {
                Err(e) => Err(e),
                Ok(()) => match state.algorithm.try_admit(at, this.weight) {
                    Ok(()) => {
                        state.caught_up = (at < now).then_some(at);
                        Ok(())
                    }
                    Err(ready) => {
                        this.scheduled = Some(ready);
                        if let Some(head) = state.queue.front_mut() {
                            head.waker = Some(cx.waker().clone());
                        }
                        drop(state);
                        if ready.saturating_sub(now) < TIMER_RESOLUTION && this.yields < MAX_YIELDS
                        {
                            this.yields += 1;
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        let deadline = limiter.instant(ready);
                        match this.sleep.as_mut() {
                            Some(sleep) => sleep.as_mut().reset(deadline),
                            None => this.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
                        }
                        if let Some(sleep) = this.sleep.as_mut() {
                            if sleep.as_mut().poll(cx).is_pending() {
                                return Poll::Pending;
                            }
                        }
                        // The deadline has already passed: try again.
                        continue;
                    }
                },
            };
            // Admitted or refused for good: leave the head and pass the
            // baton; mark done so Drop does nothing.
            state.leave(0);
            this.id = None;
            this.sleep = None;
            this.scheduled = None;
            this.weight = 0;
            return Poll::Ready(outcome);
        }
    }
}

impl<A: Algorithm> Drop for Acquire<'_, A> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut state = self.limiter.lock_at(self.limiter.now());
        let Some(pos) = Self::position(&state, id) else {
            return;
        };
        state.leave(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn armed(limiter: &TokenBucket) -> bool {
        limiter.fast.is_armed()
    }

    /// A bucket of one at 10 000/s, faster than tokio's millisecond timer:
    /// 50 queued waiters go at the bucket's rate (the last 4.9 ms after
    /// the first), not one or two per timer tick (25 ms and more), and
    /// none before its own instant.
    #[tokio::test(start_paused = true)]
    async fn a_bucket_faster_than_the_timer_keeps_its_rate() {
        let bucket = std::sync::Arc::new(
            TokenBucket::with_initial(RequestRate::per_second(10_000).unwrap(), 1, 0).unwrap(),
        );
        let start = Instant::now();
        let waiters: Vec<_> = (0..50)
            .map(|_| {
                let bucket = std::sync::Arc::clone(&bucket);
                tokio::spawn(async move {
                    bucket.acquire(1).await.unwrap();
                    start.elapsed()
                })
            })
            .collect();
        let mut times = Vec::new();
        for waiter in waiters {
            times.push(waiter.await.unwrap());
        }
        times.sort();
        let interval = Duration::from_micros(100);
        for (i, t) in times.iter().enumerate() {
            let due = interval * (i as u32 + 1);
            assert!(*t >= due, "waiter {i} went at {t:?}, before {due:?}");
            assert!(
                *t <= due + Duration::from_millis(1),
                "waiter {i} went at {t:?}, more than the timer's millisecond after {due:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_word_is_armed_only_while_the_bucket_is_as_made() {
        let rate = RequestRate::per_second(10).unwrap();
        let bucket = TokenBucket::new(rate, 2).unwrap();
        assert!(armed(&bucket));
        bucket.try_acquire(2).unwrap();
        assert!(armed(&bucket), "decisions keep it armed");

        bucket.set_rate(RequestRate::per_second(5).unwrap());
        assert!(!armed(&bucket), "another rate is decided under the lock");
        bucket.set_rate(rate);
        assert!(armed(&bucket));

        bucket.block_until(Instant::now() + Duration::from_secs(1));
        assert!(!armed(&bucket), "a block is decided under the lock");
        tokio::time::advance(Duration::from_secs(1)).await;
        bucket.try_acquire(1).unwrap();
        assert!(armed(&bucket), "the first call after the block re-arms");

        let waiter = bucket.acquire(1);
        tokio::pin!(waiter);
        assert!(futures::poll!(waiter.as_mut()).is_pending());
        assert!(!armed(&bucket), "a queue is decided under the lock");
        assert!(bucket.try_acquire(1).is_err(), "no barging past the queue");
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(waiter.await.is_ok());
        assert!(armed(&bucket), "the queue is empty again");
    }

    #[tokio::test(start_paused = true)]
    async fn window_limiters_never_arm() {
        let log = crate::SlidingLogLimiter::from_algorithm(
            crate::limiter::SlidingLog::new(RequestRate::per_second(10).unwrap()).unwrap(),
        );
        log.try_acquire(1).unwrap();
        // Its fast path is the one that never decides: every call, this
        // one included, takes the lock.
        let lock_only: &crate::limiter::LockOnly = &log.fast;
        let decided = FastPath::<crate::limiter::SlidingLog>::try_decide(lock_only, log.now(), 1);
        assert_eq!(decided, None);
    }
}
