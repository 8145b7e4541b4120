//! The token bucket, written as GCRA arithmetic on integer nanoseconds.
//!
//! The bucket is kept as one instant, `full_at`: when the bucket would be full
//! again if nothing more were taken. With `T` the time per token and `C` the
//! capacity, the tokens available at `now` are `C - (full_at - now) / T`, and
//! taking `n` tokens moves `full_at` to `max(full_at, now) + n·T`, which is
//! allowed when the result is at most `now + C·T`. One integer of state, no
//! floating point, no drift: refusal times are exact to the nanosecond.

use super::algorithm::{Algorithm, Nanos};
use super::bucket::BucketWord;
use super::RequestRate;

/// Token-bucket state: capacity (burst) and refill rate (sustained rate)
/// kept apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gcra {
    rate: RequestRate,
    capacity: u64,
    /// When the bucket is full again, in nanoseconds since the origin.
    full_at: u128,
    /// Nothing is admitted before this instant (server Retry-After).
    blocked_until: Nanos,
}

pub(super) fn wide(n: u64) -> u128 {
    u128::from(n)
}

pub(super) fn narrow(n: u128) -> Nanos {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The integers the GCRA step runs on: `u64` for a bare `full_at` decided
/// outside a [`Gcra`] (a keyed map's compact entries, a limiter's lock-free
/// word), `u128` inside one, whose products of a weight and an interval
/// cannot overflow.
pub(crate) trait Tick: Copy + Ord + std::ops::Sub<Output = Self> {
    /// `self + rhs`, at most the type's largest value.
    fn saturating_add(self, rhs: Self) -> Self;
}

impl Tick for u64 {
    fn saturating_add(self, rhs: u64) -> u64 {
        u64::saturating_add(self, rhs)
    }
}

impl Tick for u128 {
    fn saturating_add(self, rhs: u128) -> u128 {
        u128::saturating_add(self, rhs)
    }
}

/// The GCRA step, the one admission arithmetic of the token bucket: take
/// `need` (the weight times the interval) from a bucket full again at
/// `full_at`, at `now`, when the bucket spans `span` (the capacity times
/// the interval). Returns the new `full_at`, or the instant the weight
/// would be admitted, which is then later than `now`. `need` must be at
/// most `span` (a weight within the capacity).
///
/// [`Gcra::try_admit`] and [`Gcra::earliest`] run it on `u128`; a keyed
/// map's compact entries and a limiter's lock-free word on `u64`. The Lua
/// script of the shared bucket (`src/redis/lua/token_bucket.lua`) writes
/// the same step relative to `now`; `tests/lua_mirror.rs` checks that the
/// two agree. The testing module's model of an LLM API runs it on `u64`
/// for each of its token buckets.
#[inline]
pub(crate) fn admit<N: Tick>(full_at: N, now: N, need: N, span: N) -> Result<N, N> {
    debug_assert!(need <= span, "a weight over the capacity");
    let next = full_at.max(now).saturating_add(need);
    if next - now <= span {
        Ok(next)
    } else {
        // Then full_at > now (need alone fits the span), so this is later
        // than now, and written so that no step overflows: span - need is
        // at least 0, and full_at - (span - need) is above now.
        Err(full_at - (span - need))
    }
}

impl Gcra {
    /// A bucket holding `initial` tokens (clamped to `capacity`) at instant 0.
    /// `capacity` must be at least 1; [`QueuedLimiter`](super::QueuedLimiter)
    /// constructors check it.
    pub fn new(rate: RequestRate, capacity: u64, initial: u64) -> Gcra {
        let capacity = capacity.max(1);
        let missing = capacity - initial.min(capacity);
        Gcra {
            rate,
            capacity,
            full_at: wide(missing) * wide(rate.interval_nanos()),
            blocked_until: 0,
        }
    }

    /// A bucket that is full again at `full_at`, for a keyed map's
    /// compact entry made whole.
    pub(super) fn with_full_at(rate: RequestRate, capacity: u64, full_at: Nanos) -> Gcra {
        Gcra {
            rate,
            capacity: capacity.max(1),
            full_at: wide(full_at),
            blocked_until: 0,
        }
    }

    fn t(&self) -> u128 {
        wide(self.rate.interval_nanos())
    }

    /// `C·T`: how long an empty bucket takes to fill.
    fn span(&self) -> u128 {
        wide(self.capacity) * self.t()
    }

    /// Nanoseconds of refill still owed at `now` (0 when full).
    fn deficit(&self, now: Nanos) -> u128 {
        self.full_at.saturating_sub(wide(now))
    }
}

impl Algorithm for Gcra {
    type FastPath = BucketWord;

    fn capacity(&self) -> u64 {
        self.capacity
    }

    #[inline]
    fn try_admit(&mut self, now: Nanos, weight: u64) -> Result<(), Nanos> {
        let need = wide(weight) * self.t();
        if now < self.blocked_until || need > self.span() {
            // Blocked, or more than the bucket holds (which the callers
            // never ask): `earliest` is then later than now.
            return Err(self.earliest(now, weight));
        }
        match admit(self.full_at, wide(now), need, self.span()) {
            Ok(next) => {
                self.full_at = next;
                Ok(())
            }
            Err(ready) => Err(narrow(ready)),
        }
    }

    fn earliest(&self, now: Nanos, weight: u64) -> Nanos {
        // Smallest t >= now with max(full_at, t) + w·T - t <= C·T.
        let need = wide(weight) * self.t();
        let by_tokens = if need <= self.span() {
            match admit(self.full_at, wide(now), need, self.span()) {
                Ok(_) => wide(now),
                Err(ready) => ready,
            }
        } else {
            // More than the capacity (a queue's sum): when that many tokens
            // will have flowed through an empty-then-refilling bucket.
            self.full_at.max(wide(now)) + need - self.span()
        };
        narrow(by_tokens).max(now).max(self.blocked_until)
    }

    fn set_rate(&mut self, now: Nanos, rate: RequestRate) {
        // Keep the earned tokens: the deficit in tokens is unchanged, only
        // the time it takes to make it up changes. Time inside a block is
        // not owed tokens: it is measured from the block's end, so a block
        // keeps its length whatever the new rate.
        let base = wide(now.max(self.blocked_until));
        let deficit = self.full_at.saturating_sub(base);
        let scaled = deficit * wide(rate.interval_nanos()) / self.t();
        self.rate = rate;
        self.full_at = base + scaled;
    }

    fn set_capacity(&mut self, now: Nanos, capacity: u64) {
        let capacity = capacity.max(1);
        // Measured from the end of any block, as above. A deficit beyond
        // one full bucket is time already promised (a block's resume
        // schedule): it is kept as it is, and only the bucket part changes.
        let base = wide(now.max(self.blocked_until));
        let deficit = self.full_at.saturating_sub(base);
        let owed = deficit.saturating_sub(self.span());
        let tokens_ns = self.span().saturating_sub(deficit);
        self.capacity = capacity;
        let kept = tokens_ns.min(self.span());
        self.full_at = base + owed + (self.span() - kept);
    }

    fn limit_remaining(&mut self, now: Nanos, remaining: u64) {
        let wanted = wide(now) + wide(self.capacity - remaining.min(self.capacity)) * self.t();
        self.full_at = self.full_at.max(wanted);
    }

    fn limit_remaining_at(&mut self, now: Nanos, at: Nanos, remaining: u64) {
        self.limit_remaining(at.min(now), remaining);
    }

    fn set_remaining(&mut self, now: Nanos, remaining: u64) {
        self.full_at = wide(now) + wide(self.capacity - remaining.min(self.capacity)) * self.t();
    }

    fn charge(&mut self, now: Nanos, weight: u64) {
        // A debt: the bucket is full again that much later, whatever it
        // holds now.
        let base = self.full_at.max(wide(now));
        self.full_at = base.saturating_add(wide(weight) * self.t());
    }

    fn refund(&mut self, now: Nanos, weight: u64) {
        // Never past full, and never into a block's resume schedule
        // (`full_at` below `blocked_until + (C-1)·T` would let the
        // block's end burst), while it runs: after the block's end too,
        // until the bucket is full again.
        let resumed = if self.blocked_until > 0 {
            wide(self.blocked_until) + wide(self.capacity - 1) * self.t()
        } else {
            0
        };
        let floor = wide(now).max(resumed);
        let back = self.full_at.saturating_sub(wide(weight) * self.t());
        self.full_at = back.max(floor).min(self.full_at);
    }

    fn block_until(&mut self, now: Nanos, until: Nanos) {
        let until = until.max(now);
        self.blocked_until = self.blocked_until.max(until);
        // One token at `until`, then the rate: full again (C-1)·T later.
        let resume = wide(until) + wide(self.capacity - 1) * self.t();
        self.full_at = self.full_at.max(resume);
    }

    fn unblock(&mut self, now: Nanos) {
        if self.blocked_until <= now {
            return;
        }
        self.blocked_until = 0;
        // The block's resume schedule, moved to now.
        let resume = wide(now) + wide(self.capacity - 1) * self.t();
        self.full_at = self.full_at.min(resume);
    }

    fn is_idle(&self, now: Nanos) -> bool {
        self.full_at <= wide(now) && self.blocked_until <= now
    }

    fn rate(&self) -> RequestRate {
        self.rate
    }

    fn available(&self, now: Nanos) -> u64 {
        if now < self.blocked_until {
            return 0;
        }
        let tokens_ns = self.span().saturating_sub(self.deficit(now));
        narrow(tokens_ns / self.t())
    }
}

impl Gcra {
    /// The state at `now` as a bare `full_at`, when it is no more than
    /// that (no block in force) and fits a `u64`: what a keyed map keeps of
    /// a compact key, and a limiter's lock-free word holds.
    #[inline]
    pub(super) fn plain_full_at(&self, now: Nanos) -> Option<Nanos> {
        if self.blocked_until > now {
            return None;
        }
        u64::try_from(self.full_at).ok()
    }

    /// Take back a `full_at` given out by
    /// [`plain_full_at`](Gcra::plain_full_at), after decisions made on it
    /// with [`admit`] moved it.
    #[inline]
    pub(super) fn set_full_at(&mut self, full_at: Nanos) {
        self.full_at = wide(full_at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    fn bucket(per_second: u64, capacity: u64) -> Gcra {
        Gcra::new(
            RequestRate::per_second(per_second).unwrap(),
            capacity,
            capacity,
        )
    }

    #[test]
    fn a_charge_is_a_debt_and_a_refund_stops_at_full() {
        // 100/s (10 ms a token), 5 of burst, full at 0.
        let mut g = bucket(100, 5);
        g.charge(0, 8);
        // 3 owed: nothing for 30 ms, then one token each 10 ms.
        assert_eq!(g.available(0), 0);
        assert_eq!(g.earliest(0, 1), 40 * MS);
        g.refund(0, 5);
        // 2 left of the 5.
        assert_eq!(g.available(0), 2);
        g.refund(0, 100);
        assert_eq!(g.available(0), 5, "never past full");
        // A refund does not cut into a block's resume schedule.
        g.block_until(0, 100 * MS);
        g.refund(0, 5);
        assert_eq!(g.earliest(0, 1), 100 * MS);
        assert_eq!(g.earliest(0, 2), 110 * MS);
        // Nor just after the block's end, while the schedule runs: one
        // token at 100 ms, the next at 110 ms, not all five at 101 ms.
        g.refund(101 * MS, 5);
        assert_eq!(g.available(101 * MS), 1);
        assert_eq!(g.earliest(101 * MS, 2), 110 * MS);
    }

    #[test]
    fn burst_then_rate() {
        let mut g = bucket(100, 5);
        for _ in 0..5 {
            assert_eq!(g.try_admit(0, 1), Ok(()));
        }
        assert_eq!(g.try_admit(0, 1), Err(10 * MS));
        assert_eq!(g.try_admit(10 * MS - 1, 1), Err(10 * MS));
        assert_eq!(g.try_admit(10 * MS, 1), Ok(()));
        assert_eq!(g.try_admit(10 * MS, 2), Err(30 * MS));
    }

    #[test]
    fn starts_at_initial() {
        let mut g = Gcra::new(RequestRate::per_second(10).unwrap(), 4, 0);
        assert_eq!(g.available(0), 0);
        assert_eq!(g.try_admit(0, 1), Err(100 * MS));
        assert_eq!(g.available(400 * MS), 4);
    }

    #[test]
    fn block_resumes_at_rate() {
        let mut g = bucket(10, 10);
        g.block_until(0, 1_000 * MS);
        assert_eq!(g.try_admit(0, 1), Err(1_000 * MS));
        assert_eq!(g.try_admit(1_000 * MS, 1), Ok(()));
        assert_eq!(g.try_admit(1_000 * MS, 1), Err(1_100 * MS));
        assert!(!g.is_idle(1_000 * MS));
    }

    #[test]
    fn unblock_resumes_at_rate_from_now() {
        let mut g = bucket(10, 10);
        g.block_until(0, 60_000 * MS);
        g.unblock(500 * MS);
        // As if the block had ended at 500 ms: one token then, then one
        // per 100 ms, not the whole burst.
        assert_eq!(g.try_admit(500 * MS, 1), Ok(()));
        assert_eq!(g.try_admit(500 * MS, 1), Err(600 * MS));
        // Without a block in force it changes nothing.
        let mut h = bucket(10, 10);
        h.try_admit(0, 10).unwrap();
        h.unblock(0);
        assert_eq!(h.try_admit(0, 1), Err(100 * MS));
    }

    #[test]
    fn remaining_only_lowers() {
        let mut g = bucket(10, 10);
        g.limit_remaining(0, 3);
        assert_eq!(g.available(0), 3);
        g.limit_remaining(0, 8);
        assert_eq!(g.available(0), 3);
        g.set_remaining(0, 8);
        assert_eq!(g.available(0), 8);
        g.set_remaining(0, 80);
        assert_eq!(g.available(0), 10);
    }

    /// Nothing left as a server counted it 30 ms ago, at 100 a second:
    /// the token refilled since is available now, the next comes 10 ms
    /// after that one, and an instant in the future counts as now.
    #[test]
    fn remaining_placed_in_the_past_keeps_the_refill_since() {
        let mut g = bucket(100, 1);
        g.limit_remaining_at(35 * MS, 5 * MS, 0);
        assert_eq!(g.available(35 * MS), 1);
        assert_eq!(g.try_admit(35 * MS, 1), Ok(()));
        assert_eq!(g.earliest(35 * MS, 1), 45 * MS);
        // Never raised: what the bucket holds now stays.
        let mut g = bucket(100, 5);
        g.limit_remaining(0, 0);
        g.limit_remaining_at(20 * MS, 0, 4);
        assert_eq!(g.available(20 * MS), 2);
        // An instant after now is read as now.
        let mut g = bucket(100, 1);
        g.limit_remaining_at(10 * MS, 50 * MS, 0);
        assert_eq!(g.earliest(10 * MS, 1), 20 * MS);
    }

    #[test]
    fn rate_change_keeps_tokens() {
        let mut g = bucket(10, 10);
        g.limit_remaining(0, 5); // 5 tokens missing: 500 ms to refill
        g.set_rate(0, RequestRate::per_second(100).unwrap());
        assert_eq!(g.available(0), 5);
        assert_eq!(g.available(50 * MS), 10);
    }

    #[test]
    fn capacity_change_keeps_tokens() {
        let mut g = bucket(10, 10);
        g.limit_remaining(0, 4);
        g.set_capacity(0, 2);
        assert_eq!(g.available(0), 2);
        g.set_capacity(0, 20);
        assert_eq!(g.available(0), 2);
        assert_eq!(g.available(1_800 * MS), 20);
    }

    #[test]
    fn a_rate_change_during_a_block_keeps_the_block() {
        let mut g = bucket(10, 10);
        g.block_until(0, 1_000 * MS);
        g.set_rate(0, RequestRate::per_second(1).unwrap());
        assert_eq!(g.try_admit(0, 1), Err(1_000 * MS));
        assert_eq!(g.try_admit(1_000 * MS, 1), Ok(()));
        // Then the new rate: one per second.
        assert_eq!(g.try_admit(1_000 * MS, 1), Err(2_000 * MS));
    }

    #[test]
    fn a_capacity_change_during_a_block_still_resumes_at_the_rate() {
        let mut g = bucket(10, 10);
        g.block_until(0, 1_000 * MS);
        g.set_capacity(0, 5);
        assert_eq!(g.try_admit(1_000 * MS, 1), Ok(()));
        assert_eq!(g.try_admit(1_000 * MS, 1), Err(1_100 * MS));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Advance(u64),
        Take(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..50 * MS).prop_map(Op::Advance),
            (1u64..=8).prop_map(Op::Take),
        ]
    }

    proptest! {
        /// Over any sequence of acquisitions and clock advances, admitted
        /// tokens never exceed capacity + rate × elapsed.
        #[test]
        fn never_over_admits(
            per_second in 1u64..10_000,
            capacity in 1u64..=8,
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let rate = RequestRate::per_second(per_second).unwrap();
            let mut g = Gcra::new(rate, capacity, capacity);
            let mut now = 0u64;
            let mut admitted = 0u128;
            for op in ops {
                match op {
                    Op::Advance(d) => now += d,
                    Op::Take(n) => {
                        if n <= capacity && g.try_admit(now, n).is_ok() {
                            admitted += u128::from(n);
                        }
                    }
                }
                let allowance = u128::from(capacity)
                    + u128::from(now) / u128::from(rate.interval_nanos());
                prop_assert!(admitted <= allowance, "{admitted} > {allowance}");
            }
        }

        /// The compact step of a keyed map decides exactly as the bucket.
        #[test]
        fn the_compact_step_is_the_bucket(
            per_second in 1u64..100_000,
            capacity in 1u64..=16,
            steps in proptest::collection::vec((0u64..20 * MS, 1u64..=16), 1..100),
        ) {
            let rate = RequestRate::per_second(per_second).unwrap();
            let t = rate.interval_nanos();
            let mut g = Gcra::new(rate, capacity, capacity);
            let mut full_at = 0;
            let mut now = 0;
            for (advance, weight) in steps {
                now += advance;
                let weight = weight.min(capacity);
                let compact = admit(full_at, now, weight * t, capacity * t);
                prop_assert_eq!(compact.map(|_| ()), g.try_admit(now, weight));
                if let Ok(next) = compact {
                    full_at = next;
                }
                prop_assert_eq!(g.plain_full_at(now), Some(full_at));
            }
        }

        /// A refusal's instant is exact: not admitted a nanosecond before,
        /// admitted at it.
        #[test]
        fn refusal_times_are_exact(
            per_second in 1u64..100_000,
            capacity in 1u64..=16,
            taken in 0u64..=16,
            at in 0u64..1_000 * MS,
            weight in 1u64..=16,
        ) {
            let rate = RequestRate::per_second(per_second).unwrap();
            let mut g = Gcra::new(rate, capacity, capacity);
            for _ in 0..taken.min(capacity) {
                prop_assert!(g.try_admit(0, 1).is_ok());
            }
            let weight = weight.min(capacity);
            match g.clone().try_admit(at, weight) {
                Ok(()) => {}
                Err(ready) => {
                    prop_assert!(ready > at);
                    prop_assert!(g.clone().try_admit(ready - 1, weight).is_err());
                    prop_assert_eq!(g.try_admit(ready, weight), Ok(()));
                }
            }
        }
    }
}
