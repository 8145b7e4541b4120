//! The token bucket's two speed-ups, kept here beside it rather than in the
//! generic [`Algorithm`] contract:
//!
//! - **The lock-free word** ([`BucketWord`]): a [`TokenBucket`] that nobody
//!   waits on, with no block in force and on the rate and capacity it was
//!   made with, is its `full_at` alone, held in one atomic word and decided
//!   by compare-and-swap. It is the bucket's [`FastPath`].
//! - **The compact keyed entry** ([`Template`]): a map of token buckets made
//!   from one template keeps such a key as one `full_at` beside the key,
//!   decided in place, and makes its whole limiter only when a caller needs
//!   it.
//!
//! Both decide with [`admit`], the same GCRA step as [`Gcra::try_admit`],
//! on `u64` where the bucket runs it on `u128`.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::algorithm::{sealed, Algorithm, FastPath, Nanos};
use super::gcra::{admit, Gcra};
use super::keyed::Fold;
use super::{QueuedLimiter, RequestRate, TokenBucket};
use crate::sync::AtomicU64;
use crate::Error;

/// The value of the word when the lock decides.
const DISARMED: u64 = u64::MAX;

/// A bucket's fixed parameters, for decisions made without the lock.
#[derive(Clone, Copy, Debug)]
struct Params {
    interval: Nanos,
    capacity: u64,
    /// `capacity × interval`.
    span: Nanos,
}

/// The token bucket's [`FastPath`]: while armed, one atomic word holding
/// the bucket's `full_at`, which then is the whole state, decided by
/// compare-and-swap without the lock.
///
/// It is armed (under the lock, as the lock is released) only while nobody
/// is queued, no block is in force and the bucket is still on the rate and
/// capacity it was made with; taking the lock disarms it first. A decision
/// made without the lock therefore always uses the parameters the state
/// really has: whatever happened between its load and its compare-and-swap,
/// a word that compares equal is a `full_at` of the same bucket.
#[derive(Debug)]
pub struct BucketWord {
    /// The bucket the limiter was made as: the only parameters `word` is
    /// ever decided with. `None` when its span overflows a `u64` (the lock
    /// then decides every call).
    params: Option<Params>,
    /// The bucket's `full_at` while armed; [`DISARMED`] otherwise.
    word: AtomicU64,
}

impl BucketWord {
    /// Whether calls are decided without the lock now.
    #[cfg(test)]
    pub(super) fn is_armed(&self) -> bool {
        self.word.load(Ordering::Acquire) != DISARMED
    }
}

impl sealed::Sealed for BucketWord {}

impl FastPath<Gcra> for BucketWord {
    fn new(bucket: &Gcra) -> Self {
        let interval = bucket.rate().interval_nanos();
        let capacity = bucket.capacity();
        let params = interval.checked_mul(capacity).map(|span| Params {
            interval,
            capacity,
            span,
        });
        // Armed at once, when there are parameters to decide with.
        let word = params.and(bucket.plain_full_at(0)).unwrap_or(DISARMED);
        BucketWord {
            params,
            word: AtomicU64::new(word),
        }
    }

    #[inline]
    fn try_decide(&self, now: Nanos, weight: u64) -> Option<Result<(), Nanos>> {
        let params = self.params?;
        if weight > params.capacity {
            // The lock gives the error.
            return None;
        }
        let need = weight * params.interval;
        let mut word = self.word.load(Ordering::Acquire);
        while word != DISARMED {
            let next = match admit(word, now, need, params.span) {
                Ok(next) => next,
                // A refusal writes nothing.
                Err(ready) => return Some(Err(ready)),
            };
            if next == DISARMED {
                // 584 years from the origin: leave it to the lock.
                return None;
            }
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(Ok(())),
                Err(seen) => word = seen,
            }
        }
        None
    }

    #[inline]
    fn take_back(&self, bucket: &mut Gcra) {
        if self.params.is_some() {
            let word = self.word.swap(DISARMED, Ordering::AcqRel);
            if word != DISARMED {
                bucket.set_full_at(word);
            }
        }
    }

    #[inline]
    fn hand_over(&self, bucket: &Gcra, now: Nanos) -> bool {
        let Some(params) = self.params else {
            return false;
        };
        if bucket.rate().interval_nanos() != params.interval || bucket.capacity() != params.capacity
        {
            return false;
        }
        match bucket.plain_full_at(now) {
            Some(full_at) if full_at != DISARMED => {
                self.word.store(full_at, Ordering::Release);
                true
            }
            _ => false,
        }
    }
}

/// The template of a keyed map of token buckets
/// ([`KeyedLimiter::token_buckets`](super::KeyedLimiter::token_buckets)),
/// which decides its compact entries.
#[derive(Clone, Copy, Debug)]
pub(super) struct Template {
    rate: RequestRate,
    capacity: u64,
    /// `capacity × interval`: how long an empty bucket takes to fill.
    span: Nanos,
}

impl Template {
    /// The template of buckets of `capacity` at `rate`, when their keys can
    /// be kept compact.
    ///
    /// A compact entry's `full_at` is a `u64` of nanoseconds: a bucket whose
    /// span is over half of that range (292 years) stays a whole limiter
    /// per key (its arithmetic is 128-bit), so that `full_at`, at most
    /// `now + span`, cannot saturate within 292 years of the map's life.
    pub(super) fn new(rate: RequestRate, capacity: u64) -> Option<Template> {
        rate.interval_nanos()
            .checked_mul(capacity)
            .filter(|span| *span <= u64::MAX / 2)
            .map(|span| Template {
                rate,
                capacity,
                span,
            })
    }

    /// The template's capacity.
    #[inline]
    pub(super) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Decide a compact entry at `now`, as its whole bucket would, for a
    /// weight of at least 1.
    #[inline]
    pub(super) fn decide(&self, full_at: &mut Nanos, now: Nanos, weight: u64) -> Result<(), Error> {
        if weight > self.capacity {
            return Err(Error::WeightExceedsCapacity {
                weight,
                capacity: self.capacity,
            });
        }
        // weight ≤ capacity, so weight × interval ≤ span fits.
        let need = weight * self.rate.interval_nanos();
        match admit(*full_at, now, need, self.span) {
            Ok(next) => {
                *full_at = next;
                Ok(())
            }
            Err(ready) => Err(Error::not_yet_at(ready, now)),
        }
    }
}

/// How a map of token buckets moves a key between its compact entry and
/// its whole [`TokenBucket`].
pub(super) struct BucketFold;

impl Fold<TokenBucket> for BucketFold {
    fn expand(&self, template: &Template, full_at: Nanos, origin: Instant) -> TokenBucket {
        QueuedLimiter::from_algorithm_at(
            Gcra::with_full_at(template.rate, template.capacity, full_at),
            origin,
        )
    }

    fn shrink(
        &self,
        template: &Template,
        bucket: &TokenBucket,
        origin: Instant,
        now: Nanos,
    ) -> Option<Nanos> {
        bucket.compact_state(template.rate, template.capacity, origin, now)
    }
}
