//! The shared sliding window log.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::backend::Link;
use super::scripts;
use super::shared::{unsupported, Core, Fallback, Op};
use crate::limiter::{Adjustment, Bounds, Grant, Limiter, RequestRate};
use crate::Error;

/// The script's source, for `EVAL` where Redis lacks it (the same file
/// as [`scripts::SLIDING_LOG`]).
const SOURCE: &str = include_str!("lua/sliding_log.lua");

/// The largest count per window a sliding log accepts: the log keeps one
/// sorted-set member per token, and a Retry-After block writes up to this
/// many placeholders in one script run. Larger quotas belong in a
/// [`RedisTokenBucket`](super::RedisTokenBucket).
pub const MAX_LOG_LIMIT: u64 = 100_000;

fn window_micros(limit: RequestRate) -> u64 {
    // Round up: a window a hair longer is never more permissive.
    u64::try_from(limit.per().as_nanos().div_ceil(1_000)).unwrap_or(u64::MAX)
}

fn check_limit(limit: u64) -> Result<(), Error> {
    if limit > MAX_LOG_LIMIT {
        return Err(Error::config(format!(
            "a sliding log holds at most {MAX_LOG_LIMIT} per window, not {limit}"
        )));
    }
    Ok(())
}

/// An exact shared quota: at most `limit.count()` tokens in any window of
/// `limit.per()`, counted in a Redis sorted set that the script trims and
/// counts in the same atomic step.
///
/// Where a token bucket allows a burst of its capacity at any time, the
/// log never admits more than the quota in any window, which is what an
/// API with a hard "100 per minute" counter wants. It costs one sorted-set
/// member per token granted within the window.
///
/// - **Reservations**: [`acquire`](Self::acquire) books the earliest instant
///   at which its tokens fit (a member scored in the future) and sleeps
///   once until then.
/// - **Cancel safety is exact**: a dropped `acquire` removes its members,
///   which can never let a window exceed the quota, whatever was booked
///   after it.
/// - **Shared feedback**: a Retry-After block holds back every process; the
///   log then resumes at the rate (one token at the end of the block, then
///   one per `per / count`) by filling the window with placeholders that
///   leave it one by one. Remaining counts from a server become
///   placeholders too.
/// - **Time** is Redis `TIME` in microseconds; windows are rounded up to
///   whole microseconds.
///
/// ```no_run
/// use reqwest_pace::redis::RedisBackend;
/// use reqwest_pace::RequestRate;
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6380/").await?;
/// // At most 100 calls in any minute, across the fleet.
/// let quota = backend.sliding_log("search-api", RequestRate::per_minute(100)?)?;
/// quota.acquire(1).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisSlidingLog {
    core: Arc<Core>,
    limit: RequestRate,
}

impl RedisSlidingLog {
    pub(crate) fn new(
        backend: Link,
        key: &str,
        limit: RequestRate,
    ) -> Result<RedisSlidingLog, Error> {
        backend.validate(key)?;
        check_limit(limit.count())?;
        let fallback = Fallback::new(backend.fault_policy(), limit, limit.count())?;
        let keys = vec![backend.key(key, "log"), backend.key(key, "log:meta")];
        Ok(RedisSlidingLog {
            core: Arc::new(Core {
                backend,
                script: &scripts::SLIDING_LOG,
                source: SOURCE,
                keys,
                epoch_key: 1,
                confirms: false,
                defaults: [limit.count(), window_micros(limit)],
                fallback,
                spell,
                lessons: Default::default(),
                counter: Default::default(),
            }),
            limit,
        })
    }

    /// Wait until `weight` tokens fit in the window: one Redis call books
    /// the turn, then a single sleep. A weight over the count per window is
    /// [`Error::WeightExceedsCapacity`].
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
    /// wait until they would fit.
    pub async fn try_acquire(&self, weight: u64) -> Result<(), Error> {
        self.core.try_acquire(weight).await
    }

    /// Write server feedback to the shared state. As for the local window
    /// limiters, [`Adjustment::SetRate`] keeps the window and makes the
    /// count per window the rate's share of it (`W / T` calls, at least 1,
    /// at most [`MAX_LOG_LIMIT`]); [`Adjustment::SetCapacity`] is ignored,
    /// since a window's burst is its count. [`Adjustment::Unblock`] takes
    /// every stand-in out of the window, those for tokens a server said were
    /// spent included (its next answer says again what it counts), and
    /// [`Adjustment::GrowRate`] raises the count by whole calls (a growth of
    /// less than one call per window is lost).
    pub async fn adjust(&self, adjustment: Adjustment) -> Result<(), Error> {
        self.core.adjust(&[adjustment]).await
    }

    /// The Redis keys: the sorted set, then its meta hash.
    pub fn redis_keys(&self) -> [&str; 2] {
        [&self.core.keys[0], &self.core.keys[1]]
    }

    /// The limit this log was built with (the shared state may hold a
    /// learned one).
    pub fn limit(&self) -> RequestRate {
        self.limit
    }
}

/// How the script spells `adjustment` (see `Core::spell`).
fn spell(adjustment: Adjustment) -> Result<Option<Op>, Error> {
    Ok(Some(match adjustment {
        Adjustment::SetRate(rate) => Op::new("rate", rate.interval_nanos()).with(MAX_LOG_LIMIT, 0),
        Adjustment::Cut { to, too_fast } => {
            Op::new("rate", to.interval_nanos()).with(MAX_LOG_LIMIT, too_fast.interval_nanos())
        }
        Adjustment::SetCapacity(0) => {
            return Err(Error::config("a limiter needs a capacity above zero"))
        }
        // A log's burst is its count, and it is told of blocks, not
        // of windows.
        Adjustment::SetCapacity(_) | Adjustment::WindowEndsBy(_) => return Ok(None),
        Adjustment::GrowRate {
            parts_per_million,
            at_most,
        } => Op::new("grow", u64::from(parts_per_million))
            .with(at_most.interval_nanos(), MAX_LOG_LIMIT),
        other => Op::common(other).ok_or_else(|| unsupported(other))?,
    }))
}

impl Limiter for RedisSlidingLog {
    fn acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(RedisSlidingLog::acquire(self, weight))
    }

    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(RedisSlidingLog::try_acquire(self, weight))
    }

    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(RedisSlidingLog::adjust(self, adjustment))
    }

    fn learn(&self, adjustments: Vec<Adjustment>) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { self.core.learn(&adjustments).await })
    }

    fn acquire_within(&self, weight: u64, bounds: Bounds) -> BoxFuture<'_, Result<Grant, Error>> {
        Box::pin(RedisSlidingLog::acquire_within(self, weight, bounds))
    }
}

impl fmt::Debug for RedisSlidingLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSlidingLog")
            .field("keys", &self.redis_keys())
            .field("limit", &self.limit)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn windows_round_up_to_microseconds() {
        assert_eq!(
            window_micros(RequestRate::per_minute(1).unwrap()),
            60_000_000
        );
        let odd = RequestRate::new(1, Duration::from_nanos(1_500)).unwrap();
        assert_eq!(window_micros(odd), 2);
    }

    #[test]
    fn eval_sends_the_script_evalsha_names() {
        assert_eq!(
            redis::Script::new(SOURCE).get_hash(),
            scripts::SLIDING_LOG.get_hash()
        );
    }
}
