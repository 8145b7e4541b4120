//! The limiter core: clock-driven arithmetic, fair waiting, keyed maps.
//!
//! The split follows governor's: an [`Algorithm`] is the pure arithmetic of
//! one key's state as a function of `now` (in [`gcra`](Gcra) for the token
//! bucket); [`QueuedLimiter`] adds the tokio clock, a lock and a FIFO queue of
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
use std::time::Duration;

use tokio::time::Instant;

pub use algorithm::{Algorithm, FastPath, LockOnly, Nanos};
pub use bucket::BucketWord;
/// The GCRA step, for the testing module's token buckets of many tokens.
#[cfg(feature = "testing")]
pub(crate) use gcra::admit;
pub use gcra::Gcra;
pub use keyed::{Evictable, KeyedLimiter};
pub use rate::RequestRate;
pub use wait::{Acquire, QueuedLimiter, TokenBucket};
pub use window::{
    FixedWindow, FixedWindowLimiter, SlidingCounterLimiter, SlidingLog, SlidingLogLimiter,
    SlidingWindowCounter,
};

use crate::Error;

/// How much later than the window's end held a bound must be to be a later
/// window's ([`Adjustment::WindowEndsBy`]); the inference tells a new
/// window by the same leap of its reset.
pub const WINDOW_LEAP: Duration = Duration::from_millis(500);

/// A change the server's feedback asks of a limiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Adjustment {
    /// Change the sustained rate, keeping tokens already earned.
    SetRate(RequestRate),
    /// Change the capacity (burst), keeping tokens already earned.
    SetCapacity(u64),
    /// Lower what is available now to at most this many tokens.
    LimitRemaining(u64),
    /// Lower what was available at this instant (a past one: when the
    /// server counted what it says remains) to at most this many tokens,
    /// keeping what the rate has given back since. A response that says
    /// nothing remains arrives a round trip after the server counted it;
    /// applied as it arrives, the next token would come that much late. A
    /// limiter that cannot place it in the past applies it now, as
    /// [`LimitRemaining`](Adjustment::LimitRemaining).
    LimitRemainingAt(u64, Instant),
    /// Set what is available now (start of a new server window).
    SetRemaining(u64),
    /// Admit nothing before this instant, then resume at the rate.
    BlockUntil(Instant),
    /// [`BlockUntil`](Adjustment::BlockUntil) the block's end, keeping what
    /// asked for it where the state is shared (a Redis limiter), so that
    /// every process can refuse to sit through it as the one that saw the
    /// response did (see [`Bounds::max_block`]). A local limiter keeps the
    /// block alone.
    Block(ServerBlock),
    /// Lift any block, as if it ended now: resume at the rate from now.
    Unblock,
    /// A cut on a server's refusal: [`SetRate`](Adjustment::SetRate) to
    /// `to`, naming `too_fast`, the rate the server refused. Where the
    /// state is shared it keeps `too_fast` for the processes that did not
    /// see the refusal ([`Grant::shared_too_fast`]); a local limiter sets
    /// the rate alone.
    #[non_exhaustive]
    Cut {
        /// The rate to go on at.
        to: RequestRate,
        /// The rate that was too fast.
        too_fast: RequestRate,
    },
    /// Raise the sustained rate by a factor (in parts per million: a
    /// million keeps it), up to `at_most`, keeping tokens already earned.
    /// The factor applies to the rate the limiter holds when it applies
    /// it: where several processes share the limiter, each one's growth
    /// adds to the others' instead of one overwriting another's. Never
    /// lowers the rate. See [`Adjustment::grow_rate`].
    #[non_exhaustive]
    GrowRate {
        /// The factor, in millionths.
        parts_per_million: u32,
        /// The ceiling the growth stops at.
        at_most: RequestRate,
    },
    /// The server refused this many of the units granted (a 429): a
    /// limiter that counts its grants for every process sharing it
    /// ([`Grant::shared_count`]) takes them off its count, so that the
    /// count stays what the server counted. Nothing else changes.
    Uncount(u64),
    /// The server's current window ends no later than this instant: an
    /// upper bound read from its resets. Where the state is shared, the
    /// tightest bound any process sent stands until it passes or a bound
    /// more than [`WINDOW_LEAP`] later comes (a later window's), and a block
    /// for a spent quota ([`ServerBlock::spent_quota`]) written meanwhile
    /// ends no later than it: every process waits for the end the best
    /// informed one knows, not for its own. A local limiter, whose one
    /// process reads every response, has nothing to learn from it.
    WindowEndsBy(Instant),
}

impl Adjustment {
    /// [`Cut`](Adjustment::Cut) to `to` after a server refused `too_fast`
    /// (the variant's fields may grow, so a caller outside the crate builds
    /// it here).
    ///
    /// ```
    /// use reqwest_pace::{Adjustment, RequestRate};
    ///
    /// let cut = Adjustment::cut(RequestRate::per_second(7)?, RequestRate::per_second(10)?);
    /// assert!(matches!(cut, Adjustment::Cut { to, .. } if to == RequestRate::per_second(7)?));
    /// # Ok::<(), reqwest_pace::Error>(())
    /// ```
    pub fn cut(to: RequestRate, too_fast: RequestRate) -> Adjustment {
        Adjustment::Cut { to, too_fast }
    }

    /// [`GrowRate`](Adjustment::GrowRate) by `factor` (at least 1, at most
    /// about 4 294), up to `at_most`.
    pub fn grow_rate(factor: f64, at_most: RequestRate) -> Adjustment {
        let ppm = (factor * 1e6).clamp(1e6, f64::from(u32::MAX));
        Adjustment::GrowRate {
            parts_per_million: ppm as u32,
            at_most,
        }
    }
}

/// `rate` grown by `parts_per_million`, up to `at_most`; `None` when that
/// does not raise it.
pub(crate) fn grown(
    rate: RequestRate,
    parts_per_million: u32,
    at_most: RequestRate,
) -> Option<RequestRate> {
    let target =
        (rate.per_second_f64() * f64::from(parts_per_million) / 1e6).min(at_most.per_second_f64());
    RequestRate::from_per_second_f64(target)
        .ok()
        .filter(|r| r.per_second_f64() > rate.per_second_f64())
}

/// A wait a server asked for, and what asked for it: a `Retry-After` on a
/// throttled response, or a quota a response said was spent until its
/// reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerBlock {
    /// Nothing is admitted before this instant.
    pub until: Instant,
    /// The status of the response that asked for it.
    pub status: u16,
    /// Whether a spent quota asked for it (rather than a `Retry-After`).
    pub spent_quota: bool,
}

impl ServerBlock {
    /// A block until `until`, asked for by a response of `status`.
    pub fn new(until: Instant, status: u16, spent_quota: bool) -> Self {
        ServerBlock {
            until,
            status,
            spent_quota,
        }
    }
}

/// What an acquisition with [`Limiter::acquire_within`] may not pass.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::limiter::Bounds;
///
/// let bounds = Bounds::default()
///     .by(tokio::time::Instant::now() + Duration::from_secs(5))
///     .max_block(Duration::from_secs(60));
/// assert_eq!(bounds.max_block, Some(Duration::from_secs(60)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bounds {
    /// Refuse at once, taking nothing, when the grant would come later than
    /// this: [`Error::NotYet`] with the wait.
    pub by: Option<Instant>,
    /// Refuse at once, taking nothing, when the limiter is held by a
    /// server's [`Block`](Adjustment::Block) that ends further away than
    /// this: [`Error::Blocked`]. Only a limiter that keeps what asked for a
    /// block can tell (the Redis ones, for blocks any process wrote);
    /// others wait it out.
    pub max_block: Option<std::time::Duration>,
}

impl Bounds {
    /// Refuse a grant later than `at`.
    pub fn by(mut self, at: Instant) -> Self {
        self.by = Some(at);
        self
    }

    /// Refuse to wait out a server's block longer than `max`.
    pub fn max_block(mut self, max: std::time::Duration) -> Self {
        self.max_block = Some(max);
        self
    }
}

/// What a limiter says of a grant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// For a limiter whose state several processes share: how many units
    /// it had granted, to all of them, up to and including this grant,
    /// less those a server refused ([`Adjustment::Uncount`]). A
    /// learning client compares it with what a server says remains, to
    /// tell the fleet's spending from a server's refill. `None` for a
    /// limiter that only this process uses, whose grants the client
    /// counts itself.
    pub shared_count: Option<u64>,
    /// For such a limiter: the rate its shared state had learned when it
    /// granted (set through [`Adjustment::SetRate`] or
    /// [`GrowRate`](Adjustment::GrowRate), by whichever process); `None`
    /// while it holds the rate it was made with. A learning client that
    /// slows down for a server that sends no headers grows from the fleet's
    /// rate, not its own, sees when another process slowed the fleet, and
    /// joins a fleet at its rate instead of a cold start.
    pub shared_rate: Option<RequestRate>,
    /// For such a limiter: the rate a server last refused, as the process
    /// that saw it named it ([`Adjustment::Cut`]); `None` while none has.
    pub shared_too_fast: Option<RequestRate>,
    /// For such a limiter: how many units it had granted, to all
    /// processes, up to and including this grant, those a server refused
    /// included (the latest grant given back unused with its slot is not:
    /// it was never sent; one given back with later grants behind it
    /// keeps its turns, so that no two grants share a number). Two grants
    /// of one process whose turns differ by the later one's weight had no
    /// other grant between them: the gap between the two sends is the one
    /// the server saw, unless something held one of them back after its
    /// grant (a fleet's cap on calls in flight). `None` where the limiter
    /// does not keep it; a learning client then takes every gap as
    /// shared.
    pub shared_turns: Option<u64>,
}

impl Grant {
    /// A grant counted in shared state, at `count`.
    pub fn counted(count: u64) -> Self {
        Grant {
            shared_count: Some(count),
            shared_rate: None,
            shared_too_fast: None,
            shared_turns: None,
        }
    }

    /// The same grant, with the turns its shared state had granted.
    pub fn with_turns(mut self, turns: Option<u64>) -> Self {
        self.shared_turns = turns;
        self
    }

    /// The same grant, with the rate a server last refused.
    pub fn with_too_fast(mut self, too_fast: Option<RequestRate>) -> Self {
        self.shared_too_fast = too_fast;
        self
    }

    /// The same grant, with the rate its shared state held.
    pub fn with_rate(mut self, rate: Option<RequestRate>) -> Self {
        self.shared_rate = rate;
        self
    }
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

    /// Take `weight` tokens now or fail with [`Error::NotYet`] saying how
    /// long to wait.
    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>>;

    /// Apply server feedback.
    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>>;

    /// Take what one response taught: these adjustments, in order, with
    /// the meaning [`adjust`](Limiter::adjust) gives each, and the first
    /// error (the others still taken). The default applies them at once,
    /// one by one. A limiter whose writes cost a round trip may keep them
    /// for its next call to carry, and so not hold the response for it
    /// (the Redis limiters send them with the next reservation or the look
    /// a sleeping call takes when it wakes, in the same script call, or on
    /// their own 5 to 105 ms later); a server's block and a cut or growth
    /// of the rate are written before it returns.
    fn learn(&self, adjustments: Vec<Adjustment>) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(adjust_in_turn(self, adjustments))
    }

    /// Wait until `weight` tokens are granted, within `bounds`: refused at
    /// once, taking nothing, with [`Error::NotYet`] when the grant would
    /// come after [`Bounds::by`], or with [`Error::Blocked`] when a server's
    /// block longer than [`Bounds::max_block`] holds the limiter (where the
    /// limiter can tell). The grant says where it falls in a shared count.
    ///
    /// The default asks [`try_acquire`](Limiter::try_acquire) first when
    /// there is a `by`, then [`acquire`](Limiter::acquire); a limiter whose
    /// calls cost a round trip (Redis) does it in one.
    fn acquire_within(&self, weight: u64, bounds: Bounds) -> BoxFuture<'_, Result<Grant, Error>> {
        Box::pin(async move {
            if let Some(by) = bounds.by {
                match self.try_acquire(weight).await {
                    Ok(()) => return Ok(Grant::default()),
                    Err(Error::NotYet { wait }) if Instant::now() + wait > by => {
                        return Err(Error::NotYet { wait })
                    }
                    Err(Error::NotYet { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            self.acquire(weight).await.map(|()| Grant::default())
        })
    }
}

/// Apply `adjustments` to `limiter` one by one, each after the last is
/// applied; the first error, the others still applied.
pub(crate) async fn adjust_in_turn<L: Limiter + ?Sized>(
    limiter: &L,
    adjustments: Vec<Adjustment>,
) -> Result<(), Error> {
    let mut first = None;
    for adjustment in adjustments {
        if let Err(e) = limiter.adjust(adjustment).await {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

impl<A: Algorithm> QueuedLimiter<A> {
    /// Apply an [`Adjustment`].
    pub fn apply(&self, adjustment: Adjustment) -> Result<(), Error> {
        match adjustment {
            Adjustment::SetRate(rate) | Adjustment::Cut { to: rate, .. } => self.set_rate(rate),
            Adjustment::SetCapacity(capacity) => self.set_capacity(capacity)?,
            Adjustment::LimitRemaining(n) => self.limit_remaining(n),
            Adjustment::LimitRemainingAt(n, at) => self.limit_remaining_at(n, at),
            Adjustment::SetRemaining(n) => self.set_remaining(n),
            Adjustment::BlockUntil(until) => self.block_until(until),
            Adjustment::Block(block) => self.block_until(block.until),
            Adjustment::Unblock => self.unblock(),
            Adjustment::GrowRate {
                parts_per_million,
                at_most,
            } => self.grow_rate(parts_per_million, at_most),
            // A local limiter's grants are counted by the one process that
            // uses it.
            Adjustment::Uncount(_) | Adjustment::WindowEndsBy(_) => {}
        }
        Ok(())
    }
}

impl<A: Algorithm> Limiter for QueuedLimiter<A> {
    fn acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(QueuedLimiter::acquire(self, weight))
    }

    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(std::future::ready(QueuedLimiter::try_acquire(self, weight)))
    }

    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(std::future::ready(self.apply(adjustment)))
    }
}
