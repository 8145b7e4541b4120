//! The reserve, sleep, confirm flow and the fault policy, common to both
//! shared limiters. What differs between them (the script, its keys and
//! how an adjustment is spelled) is data in [`Core`].

use std::sync::Arc;
use std::time::Duration;

use redis::Script;

use super::backend::{FaultPolicy, Link};
use super::scripts::Reply;
use crate::limiter::{Adjustment, Bounds, Grant, Rate, ServerBlock, TokenBucket};
use crate::Error;

/// One shared limiter: its script, its keys, and its local fallback.
pub(crate) struct Core {
    pub(crate) backend: Link,
    pub(crate) script: &'static Script,
    /// The script's source, sent with `EVAL` where Redis lacks the script.
    pub(crate) source: &'static str,
    /// Every key the script touches, in KEYS order.
    pub(crate) keys: Vec<String>,
    /// Which of `keys` holds the block counter `e`.
    pub(crate) epoch_key: usize,
    /// Whether the script answers `confirm`: tells a turn a block came over
    /// while it slept from one booked past the block's end, which stands.
    /// Without it every such turn is handed back and booked again.
    pub(crate) confirms: bool,
    /// The configured figures (ARGV[3], ARGV[4]), used while Redis holds
    /// none for the key.
    pub(crate) defaults: [u64; 2],
    /// Present under [`FaultPolicy::LocalFallback`].
    pub(crate) fallback: Option<Fallback>,
}

/// The local bucket used while Redis is down, with its share of the budget.
pub(crate) struct Fallback {
    pub(crate) bucket: TokenBucket,
    pub(crate) processes: u32,
}

/// An operation and its operands, as the scripts take them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Op {
    pub(crate) name: &'static str,
    pub(crate) a: u64,
    pub(crate) b: u64,
    pub(crate) c: u64,
}

/// "No bound", as the scripts read a bound in nanoseconds: 2^62, beyond
/// any wait (146 years) and exact in a Lua double.
const UNBOUNDED: u64 = 1 << 62;

impl Op {
    pub(crate) fn new(name: &'static str, a: u64) -> Op {
        Op {
            name,
            a,
            b: 0,
            c: 0,
        }
    }

    pub(crate) fn with(mut self, b: u64, c: u64) -> Op {
        self.b = b;
        self.c = c;
        self
    }

    /// `reserve` or `try` of `weight` within `bounds`, as operands.
    fn take(name: &'static str, weight: u64, bounds: Bounds) -> Op {
        let max_wait = bounds.by.map_or(UNBOUNDED, nanos_until);
        let max_block = bounds.max_block.map_or(UNBOUNDED, |d| {
            u64::try_from(d.as_nanos()).unwrap_or(UNBOUNDED)
        });
        Op::new(name, weight).with(max_wait.min(UNBOUNDED), max_block.min(UNBOUNDED))
    }

    /// The operation of an adjustment both scripts spell the same way
    /// (what remains, a block, its lifting); `None` for a rate or a
    /// capacity, which each limiter reads in its own terms.
    pub(crate) fn common(adjustment: Adjustment) -> Option<Op> {
        Some(match adjustment {
            Adjustment::LimitRemaining(n) => Op::new("limit", n),
            Adjustment::SetRemaining(n) => Op::new("remaining", n),
            Adjustment::BlockUntil(until) => Op::new("block", nanos_until(until)),
            Adjustment::Block(block) => {
                Op::new("block", nanos_until(block.until)).with(cause(&block), 0)
            }
            Adjustment::Unblock => Op::new("unblock", 0),
            Adjustment::Cut { to, too_fast } => {
                return Some(
                    Op::new("rate", to.interval_nanos()).with(0, too_fast.interval_nanos()),
                )
            }
            Adjustment::Uncount(n) => Op::new("uncount", n),
            Adjustment::GrowRate {
                parts_per_million,
                at_most,
            } => Op::new("grow", u64::from(parts_per_million)).with(at_most.interval_nanos(), 0),
            _ => return None,
        })
    }
}

/// A grant at `count` of the shared count, under a learned rate of one
/// token per `interval` nanoseconds, the one last refused one per
/// `too_fast` (each 0 when none).
fn grant(count: u64, interval: u64, too_fast: u64) -> Grant {
    let rate = |ns: u64| {
        (ns > 0)
            .then(|| Rate::every(Duration::from_nanos(ns)).ok())
            .flatten()
    };
    Grant::counted(count)
        .with_rate(rate(interval))
        .with_too_fast(rate(too_fast))
}

/// An adjustment a shared limiter has no operation for.
pub(crate) fn unsupported(adjustment: Adjustment) -> Error {
    Error::config(format!("a shared limiter cannot apply {adjustment:?}"))
}

/// What asked for a block, as the scripts keep it: the status times two,
/// plus one for a spent quota (0: a block that said nothing of its cause).
fn cause(block: &ServerBlock) -> u64 {
    u64::from(block.status) * 2 + u64::from(block.spent_quota)
}

/// A block the scripts held a call back for, as the error the caller gets.
fn held(wait: Duration, cause: u64, bounds: Bounds) -> Error {
    Error::Blocked {
        wait,
        max: bounds.max_block.unwrap_or_default(),
        status: u16::try_from(cause / 2)
            .ok()
            .filter(|&s| s > 0)
            .unwrap_or(429),
        spent_quota: cause % 2 == 1,
    }
}

/// `rate` spread over `processes`: the same count over a period that many
/// times longer.
pub(crate) fn share_of_rate(rate: Rate, processes: u32) -> Result<Rate, Error> {
    let per = rate.per().checked_mul(processes).ok_or_else(|| {
        Error::config(format!(
            "{rate} divided by {processes} processes is too slow"
        ))
    })?;
    Rate::new(rate.count(), per)
}

/// `n` spread over `processes`, at least 1 for a capacity.
pub(crate) fn share_of(n: u64, processes: u32) -> u64 {
    n / u64::from(processes.max(1))
}

impl Fallback {
    pub(crate) fn new(
        policy: FaultPolicy,
        rate: Rate,
        capacity: u64,
    ) -> Result<Option<Fallback>, Error> {
        let FaultPolicy::LocalFallback { processes } = policy else {
            return Ok(None);
        };
        let bucket = TokenBucket::new(
            share_of_rate(rate, processes)?,
            share_of(capacity, processes).max(1),
        )?;
        Ok(Some(Fallback { bucket, processes }))
    }

    /// The local counterpart of a shared adjustment: figures for the whole
    /// fleet become this process's share.
    fn apply(&self, adjustment: Adjustment) -> Result<(), Error> {
        let p = self.processes;
        let local = match adjustment {
            Adjustment::SetRate(rate) | Adjustment::Cut { to: rate, .. } => {
                Adjustment::SetRate(share_of_rate(rate, p)?)
            }
            Adjustment::GrowRate {
                parts_per_million,
                at_most,
            } => Adjustment::GrowRate {
                parts_per_million,
                at_most: share_of_rate(at_most, p)?,
            },
            Adjustment::SetCapacity(c) => Adjustment::SetCapacity(share_of(c, p).max(1)),
            Adjustment::LimitRemaining(n) => Adjustment::LimitRemaining(share_of(n, p)),
            Adjustment::SetRemaining(n) => Adjustment::SetRemaining(share_of(n, p)),
            other => other,
        };
        self.bucket.apply(local)
    }

    /// Take `weight` locally, in pieces when it is over the local share of
    /// the capacity (the rate still applies to every token).
    async fn acquire(&self, weight: u64) -> Result<(), Error> {
        let piece = self.bucket.capacity();
        let mut left = weight;
        while left > 0 {
            let take = left.min(piece);
            self.bucket.acquire(take).await?;
            left -= take;
        }
        Ok(())
    }

    fn try_acquire(&self, weight: u64) -> Result<(), Error> {
        let capacity = self.bucket.capacity();
        if weight <= capacity {
            return self.bucket.try_acquire(weight);
        }
        // More than the local share can ever hold at once: say how long
        // the excess takes to refill, and admit nothing now.
        let interval = self.bucket.rate().interval();
        let excess = u32::try_from(weight - capacity).unwrap_or(u32::MAX);
        Err(Error::Throttled {
            wait: interval.saturating_mul(excess),
        })
    }
}

impl Core {
    async fn run(&self, op: Op) -> Result<Reply, Error> {
        let idle = self.backend.idle_ttl_ms().to_string();
        let d0 = self.defaults[0].to_string();
        let d1 = self.defaults[1].to_string();
        let a = op.a.to_string();
        let b = op.b.to_string();
        let c = op.c.to_string();
        let learned = self.backend.learned_ttl_ms().to_string();
        let args: [&[u8]; 8] = [
            op.name.as_bytes(),
            idle.as_bytes(),
            d0.as_bytes(),
            d1.as_bytes(),
            a.as_bytes(),
            b.as_bytes(),
            c.as_bytes(),
            learned.as_bytes(),
        ];
        let reply = self
            .backend
            .eval(self.script, self.source, &self.keys, &args)
            .await?;
        Reply::parse(&reply)
    }

    fn unexpected(reply: Reply) -> Error {
        Error::Backend {
            message: format!("unexpected script reply {reply:?}"),
            source: None,
        }
    }

    /// Reserve within `bounds`, sleep once until the reserved instant, and
    /// check that no Retry-After block arrived meanwhile (if one did,
    /// reserve again after it, within the same bounds). A dropped future
    /// hands its reservation back (see the module docs for when that is
    /// possible).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        weight: u64,
        bounds: Bounds,
    ) -> Result<Grant, Error> {
        if weight == 0 {
            return Ok(Grant::default());
        }
        loop {
            // The earliest the script can have booked the turn: counting
            // from it never takes a turn for later than it is.
            let sent = tokio::time::Instant::now();
            let reply = match self.run(Op::take("reserve", weight, bounds)).await {
                Ok(reply) => reply,
                Err(e) => return self.acquire_on_fault(weight, bounds, e).await,
            };
            match reply {
                Reply::Granted {
                    wait,
                    count,
                    interval,
                    too_fast,
                    ..
                } if wait.is_zero() => return Ok(grant(count, interval, too_fast)),
                Reply::Granted {
                    wait,
                    id,
                    epoch,
                    count,
                    interval,
                    too_fast,
                } => {
                    let refund = Refund {
                        core: Some(Arc::clone(self)),
                        id,
                        weight,
                    };
                    tokio::time::sleep(wait).await;
                    refund.disarm();
                    if !self.blocked_since(epoch).await
                        || self.stands(id, weight, sent + wait).await
                    {
                        return Ok(grant(count, interval, too_fast));
                    }
                }
                Reply::Throttled { wait } => return Err(Error::Throttled { wait }),
                Reply::Held { wait, cause } => return Err(held(wait, cause, bounds)),
                Reply::TooHeavy { capacity } => {
                    return Err(Error::WeightExceedsCapacity { weight, capacity })
                }
                other => return Err(Self::unexpected(other)),
            }
        }
    }

    /// Whether the key's block counter moved since `epoch`. A failure to
    /// read it counts as no: the reservation stands.
    async fn blocked_since(&self, epoch: i64) -> bool {
        let key = &self.keys[self.epoch_key];
        match self.backend.hget_i64(key, "e").await {
            Some(now) => now != epoch,
            None => false,
        }
    }

    /// Whether a turn due at `due` that a block (or its lifting) came over
    /// while it slept still stands. A turn inside the block is given up
    /// (the refund takes it off the count, and out of a log) and its
    /// waiter queues again behind the block. The bucket keeps a turn
    /// booked past the block's end, which the block left in its deficit;
    /// the log cannot tell one from the other and gives every such turn
    /// up. A failed `confirm` counts as no, as before it: the turn is
    /// booked again.
    async fn stands(&self, id: i64, weight: u64, due: tokio::time::Instant) -> bool {
        let id = u64::try_from(id).unwrap_or(0);
        if !self.confirms {
            self.refund_id(id, weight).await;
            return false;
        }
        let late = tokio::time::Instant::now().saturating_duration_since(due);
        let late = u64::try_from(late.as_nanos()).unwrap_or(UNBOUNDED);
        let op = Op::new("confirm", id).with(weight, late.min(UNBOUNDED));
        match self.run(op).await {
            Ok(Reply::Stands) => true,
            Ok(_) => false,
            Err(e) => {
                tracing::debug!(error = %e, "confirming a turn after a block failed");
                false
            }
        }
    }

    /// Decide by the fault policy. The local fallback keeps the bound on
    /// the grant's instant; it counts nothing shared.
    async fn acquire_on_fault(
        &self,
        weight: u64,
        bounds: Bounds,
        error: Error,
    ) -> Result<Grant, Error> {
        match (&self.fallback, self.backend.fault_policy()) {
            (Some(fallback), _) => {
                if let Some(by) = bounds.by {
                    match fallback.try_acquire(weight) {
                        Ok(()) => return Ok(Grant::default()),
                        Err(Error::Throttled { wait })
                            if tokio::time::Instant::now() + wait > by =>
                        {
                            return Err(Error::Throttled { wait })
                        }
                        Err(_) => {}
                    }
                }
                fallback.acquire(weight).await.map(|()| Grant::default())
            }
            (None, FaultPolicy::FailOpen) => Ok(Grant::default()),
            (None, _) => Err(error),
        }
    }

    pub(crate) async fn try_acquire(&self, weight: u64) -> Result<(), Error> {
        if weight == 0 {
            return Ok(());
        }
        match self.run(Op::take("try", weight, Bounds::default())).await {
            Ok(Reply::Granted { .. }) => Ok(()),
            Ok(Reply::Throttled { wait }) => Err(Error::Throttled { wait }),
            Ok(Reply::TooHeavy { capacity }) => {
                Err(Error::WeightExceedsCapacity { weight, capacity })
            }
            Ok(other) => Err(Self::unexpected(other)),
            Err(error) => match (&self.fallback, self.backend.fault_policy()) {
                (Some(fallback), _) => fallback.try_acquire(weight),
                (None, FaultPolicy::FailOpen) => Ok(()),
                (None, _) => Err(error),
            },
        }
    }

    /// Write an adjustment to the shared state (and to the local fallback,
    /// so that it holds during an outage that starts right after).
    pub(crate) async fn adjust(&self, adjustment: Adjustment, op: Op) -> Result<(), Error> {
        if let Some(fallback) = &self.fallback {
            if let Err(e) = fallback.apply(adjustment) {
                tracing::warn!(error = %e, "cannot apply {adjustment:?} to the local fallback");
            }
        }
        match self.run(op).await {
            Ok(Reply::Done) => Ok(()),
            Ok(other) => Err(Self::unexpected(other)),
            Err(error) => match self.backend.fault_policy() {
                FaultPolicy::FailClosed => Err(error),
                _ => Ok(()),
            },
        }
    }

    async fn refund(&self, id: i64, weight: u64) {
        self.refund_id(u64::try_from(id).unwrap_or(0), weight).await;
    }

    async fn refund_id(&self, id: u64, weight: u64) {
        if let Err(e) = self.run(Op::new("refund", id).with(weight, 0)).await {
            tracing::debug!(error = %e, "refund of a dropped reservation failed");
        }
    }
}

/// Hands a reservation back if the waiting future is dropped before its
/// turn. The refund runs as a spawned task (a drop cannot wait), and only
/// when there is a Tokio runtime to run it.
struct Refund {
    core: Option<Arc<Core>>,
    id: i64,
    weight: u64,
}

impl Refund {
    fn disarm(mut self) {
        self.core = None;
    }
}

impl Drop for Refund {
    fn drop(&mut self) {
        let Some(core) = self.core.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (id, weight) = (self.id, self.weight);
        runtime.spawn(async move { core.refund(id, weight).await });
    }
}

/// Nanoseconds from now until `until`, for a block.
pub(crate) fn nanos_until(until: tokio::time::Instant) -> u64 {
    let left: Duration = until.saturating_duration_since(tokio::time::Instant::now());
    u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares() {
        let rate = Rate::per_second(100).unwrap();
        let share = share_of_rate(rate, 4).unwrap();
        assert_eq!(share.interval(), Duration::from_millis(40));
        assert_eq!(share_of(10, 4), 2);
        assert_eq!(share_of(3, 4), 0);
    }
}
