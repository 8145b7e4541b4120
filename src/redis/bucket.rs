//! The shared token bucket.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::backend::Link;
use super::scripts;
use super::shared::{unsupported, Core, Fallback, Op};
use crate::limiter::{Adjustment, Bounds, Grant, Limiter, RequestRate};
use crate::Error;

/// The script's source, for `EVAL` where Redis lacks it (the same file
/// as [`scripts::TOKEN_BUCKET`]).
const SOURCE: &str = include_str!("lua/token_bucket.lua");

/// The longest refill (capacity × time per token) the script keeps exact:
/// 2^52 ns, about 52 days, leaving a factor of two of headroom under the
/// 2^53 up to which a Lua number holds every integer.
pub const MAX_REFILL_NANOS: u64 = 1 << 52;

/// A token bucket whose state lives in Redis, shared by every process that
/// names the same key: capacity (the burst) and rate (the refill) kept
/// apart, the same GCRA arithmetic as the local
/// [`TokenBucket`](crate::TokenBucket), so the two behave alike.
///
/// - **One atomic step per decision**: a Lua script run with `EVALSHA`,
///   timed by Redis `TIME`.
/// - **Reservations**: [`acquire`](Self::acquire) asks once and is told how
///   long until its turn, already booked; it sleeps that long and goes.
///   Waiters are served in the order Redis saw them, across processes.
/// - **Shared feedback**: [`adjust`](Self::adjust) writes to the shared
///   state, so a Retry-After seen by one process holds back all of them,
///   including those already asleep on a reservation (they check for a
///   new block when they wake: a turn inside it queues again behind it,
///   one booked past its end stands).
/// - **Rate changes**: a turn already booked keeps its instant; the rate
///   applies from the last turn booked on.
/// - **Cancel safety**: a dropped `acquire` hands its reservation back if
///   nothing was written to the key since; otherwise its slot goes unused
///   (tokens are lost for that key, never granted twice).
/// - **Faults**: decided by the backend's [`FaultPolicy`](super::FaultPolicy)
///   within its timeout.
///
/// Figures learned through `adjust` (rate, capacity) are stored with the
/// key and take precedence over the ones this value was built with, for
/// every process, until the key expires.
///
/// ```no_run
/// use std::time::Duration;
/// use reqwest_pace::redis::RedisBackend;
/// use reqwest_pace::{Adjustment, RequestRate};
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6380/").await?;
/// let bucket = backend.token_bucket("api.example.com", RequestRate::per_second(5)?, 10)?;
/// bucket.acquire(1).await?;
/// // A 429 with Retry-After: 30 seen here holds back every process.
/// let until = tokio::time::Instant::now() + Duration::from_secs(30);
/// bucket.adjust(Adjustment::BlockUntil(until)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisTokenBucket {
    core: Arc<Core>,
    rate: RequestRate,
    capacity: u64,
}

impl RedisTokenBucket {
    pub(crate) fn new(
        backend: Link,
        key: &str,
        rate: RequestRate,
        capacity: u64,
    ) -> Result<RedisTokenBucket, Error> {
        backend.validate(key)?;
        if capacity == 0 {
            return Err(Error::config("a token bucket needs a capacity above zero"));
        }
        let refill = u128::from(capacity) * u128::from(rate.interval_nanos());
        if refill > u128::from(MAX_REFILL_NANOS) {
            return Err(Error::config(format!(
                "a shared bucket of {capacity} at {rate} takes too long to refill \
                 (at most 2^52 ns, about 52 days)"
            )));
        }
        let fallback = Fallback::new(backend.fault_policy(), rate, capacity)?;
        let keys = vec![backend.key(key, "bucket")];
        Ok(RedisTokenBucket {
            core: Arc::new(Core {
                backend,
                script: &scripts::TOKEN_BUCKET,
                source: SOURCE,
                keys,
                epoch_key: 0,
                confirms: true,
                defaults: [rate.interval_nanos(), capacity],
                fallback,
                spell,
                lessons: Default::default(),
                counter: Default::default(),
            }),
            rate,
            capacity,
        })
    }

    /// Wait until `weight` tokens are granted: one Redis call books the
    /// earliest turn, then a single sleep until it. A weight over the
    /// capacity is [`Error::WeightExceedsCapacity`]; a weight of 0 is
    /// granted without asking Redis.
    pub async fn acquire(&self, weight: u64) -> Result<(), Error> {
        self.core
            .acquire(weight, Bounds::default())
            .await
            .map(|_| ())
    }

    /// [`acquire`](Self::acquire) within `bounds`, in one Redis call: a
    /// grant later than [`Bounds::by`] or a block longer than
    /// [`Bounds::max_block`] is refused without booking anything. The grant
    /// carries the count of units every process was granted.
    pub async fn acquire_within(&self, weight: u64, bounds: Bounds) -> Result<Grant, Error> {
        self.core.acquire(weight, bounds).await
    }

    /// Take `weight` tokens now or fail with [`Error::NotYet`] and the
    /// exact wait (counting reservations already booked by any process).
    pub async fn try_acquire(&self, weight: u64) -> Result<(), Error> {
        self.core.try_acquire(weight).await
    }

    /// Write server feedback to the shared state, with the same meaning as
    /// on the local bucket. A zero capacity is [`Error::InvalidConfig`].
    pub async fn adjust(&self, adjustment: Adjustment) -> Result<(), Error> {
        self.core.adjust(&[adjustment]).await
    }

    /// The Redis key holding the bucket.
    pub fn redis_key(&self) -> &str {
        &self.core.keys[0]
    }

    /// The rate this bucket was built with (the shared state may hold a
    /// learned one).
    pub fn rate(&self) -> RequestRate {
        self.rate
    }

    /// The capacity this bucket was built with (likewise).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// How the script spells `adjustment` (see `Core::spell`).
fn spell(adjustment: Adjustment) -> Result<Option<Op>, Error> {
    Ok(Some(match adjustment {
        Adjustment::SetRate(rate) => Op::new("rate", rate.interval_nanos()),
        Adjustment::SetCapacity(0) => {
            return Err(Error::config("a limiter needs a capacity above zero"))
        }
        Adjustment::SetCapacity(c) => Op::new("capacity", c),
        other => Op::common(other).ok_or_else(|| unsupported(other))?,
    }))
}

impl Limiter for RedisTokenBucket {
    fn acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(RedisTokenBucket::acquire(self, weight))
    }

    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(RedisTokenBucket::try_acquire(self, weight))
    }

    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(RedisTokenBucket::adjust(self, adjustment))
    }

    fn learn(&self, adjustments: Vec<Adjustment>) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { self.core.learn(&adjustments).await })
    }

    fn acquire_within(&self, weight: u64, bounds: Bounds) -> BoxFuture<'_, Result<Grant, Error>> {
        Box::pin(RedisTokenBucket::acquire_within(self, weight, bounds))
    }
}

impl fmt::Debug for RedisTokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTokenBucket")
            .field("key", &self.redis_key())
            .field("rate", &self.rate)
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_sends_the_script_evalsha_names() {
        assert_eq!(
            redis::Script::new(SOURCE).get_hash(),
            scripts::TOKEN_BUCKET.get_hash()
        );
    }
}
