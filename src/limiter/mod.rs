//! The limiter core: clock-driven arithmetic, fair waiting, keyed maps.
//!
//! The split follows governor's: an [`Algorithm`] is the pure arithmetic of
//! one key's state as a function of `now` (in [`gcra`](Gcra) for the token
//! bucket); [`RateLimiter`] adds the tokio clock, a lock and a FIFO queue of
//! waiters; [`KeyedLimiter`] holds one limiter per key. The token bucket's
//! two speed-ups (deciding without the lock, and keeping a keyed map's
//! idle keys as one instant each) live beside it in `bucket.rs`, reached
//! through the bucket's [`FastPath`] and the map's template, not through
//! the generic [`Algorithm`]. The [`Limiter`]
//! trait is the object-safe face the client uses, so that a local bucket and
//! a shared Redis limiter are interchangeable per key.
//!
//! Time is `tokio::time::Instant` throughout: under `tokio::time::pause()`
//! every wait is exact and instant.

mod algorithm;
mod bucket;
mod gcra;
mod keyed;
mod rate;
mod wait;
mod window;

use futures::future::BoxFuture;
use tokio::time::Instant;

pub use algorithm::{Algorithm, FastPath, LockOnly, Nanos};
pub use bucket::BucketWord;
pub use gcra::Gcra;
pub use keyed::{Evictable, KeyedLimiter};
pub use rate::Rate;
pub use wait::{Acquire, RateLimiter, TokenBucket};
pub use window::{
    FixedWindow, FixedWindowLimiter, SlidingCounterLimiter, SlidingLog, SlidingLogLimiter,
    SlidingWindowCounter,
};

use crate::Error;

/// A change the server's feedback asks of a limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Adjustment {
    /// Change the sustained rate, keeping tokens already earned.
    SetRate(Rate),
    /// Change the capacity (burst), keeping tokens already earned.
    SetCapacity(u64),
    /// Lower what is available now to at most this many tokens.
    LimitRemaining(u64),
    /// Set what is available now (start of a new server window).
    SetRemaining(u64),
    /// Admit nothing before this instant, then resume at the rate.
    BlockUntil(Instant),
}

/// The object-safe limiter interface: what the throttled client needs from
/// any limiter, local or shared.
///
/// Methods return boxed futures so that `Arc<dyn Limiter>` works and a
/// backend that needs I/O (Redis) fits the same shape as a local bucket,
/// whose futures are ready at once except while waiting.
pub trait Limiter: Send + Sync + 'static {
    /// Wait until `weight` tokens are granted.
    fn acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>>;

    /// Take `weight` tokens now or fail with [`Error::Throttled`] saying how
    /// long to wait.
    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>>;

    /// Apply server feedback.
    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>>;
}

impl<A: Algorithm> RateLimiter<A> {
    /// Apply an [`Adjustment`].
    pub fn apply(&self, adjustment: Adjustment) -> Result<(), Error> {
        match adjustment {
            Adjustment::SetRate(rate) => self.set_rate(rate),
            Adjustment::SetCapacity(capacity) => self.set_capacity(capacity)?,
            Adjustment::LimitRemaining(n) => self.limit_remaining(n),
            Adjustment::SetRemaining(n) => self.set_remaining(n),
            Adjustment::BlockUntil(until) => self.block_until(until),
        }
        Ok(())
    }
}

impl<A: Algorithm> Limiter for RateLimiter<A> {
    fn acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(RateLimiter::acquire(self, weight))
    }

    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(std::future::ready(RateLimiter::try_acquire(self, weight)))
    }

    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(std::future::ready(self.apply(adjustment)))
    }
}
