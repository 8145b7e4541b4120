//! The reserve, sleep, confirm flow and the fault policy, common to both
//! shared limiters. What differs between them (the script, its keys and
//! how an adjustment is spelled) is data in [`Core`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Script;

use super::backend::{FaultPolicy, Link};
use super::scripts::Reply;
use crate::limiter::{Adjustment, Bounds, Grant, RequestRate, ServerBlock, TokenBucket};
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
    /// How the script spells an adjustment: its operation, `None` for one
    /// it has nothing to write for, an error for one it cannot apply.
    pub(crate) spell: fn(Adjustment) -> Result<Option<Op>, Error>,
    /// What responses taught and Redis does not have yet: sent with this
    /// process's next reservation or look, or on its own (see
    /// [`Lessons::send_at`]) when none comes first.
    pub(crate) lessons: Mutex<Lessons>,
    /// The latest block counter a call of this process read (see
    /// [`Counter`]): a waiter that wakes soon after it sends without a
    /// look of its own.
    pub(crate) counter: Mutex<Counter>,
}

/// The key's block counter (`e`) as this process last read it, and from
/// when. Every script call that answers it (a reservation, a batch) is a
/// reading as fresh as the instant the call was sent. A write of this
/// process's own (a block among it, perhaps) makes every reading sent
/// before it stale: the write may have moved the counter.
#[derive(Debug, Default)]
pub(crate) struct Counter {
    read: Option<(i64, tokio::time::Instant)>,
    stale_before: Option<tokio::time::Instant>,
}

impl Counter {
    /// A reading `epoch`, from a call sent at `sent`.
    fn read(&mut self, epoch: i64, sent: tokio::time::Instant) {
        let stale = self.stale_before.is_some_and(|before| sent < before);
        let older = self.read.is_some_and(|(_, at)| sent < at);
        if !stale && !older {
            self.read = Some((epoch, sent));
        }
    }

    /// A write sent at `sent`: what was read before it is stale.
    fn written(&mut self, sent: tokio::time::Instant) {
        self.read = None;
        self.stale_before = Some(sent);
    }

    /// Whether a block came since a turn was booked at `booked` with the
    /// counter at `epoch`, where a reading sent since then, and no longer
    /// than `fresh` before `now`, tells; `None` where none does.
    fn blocked_since(
        &self,
        epoch: i64,
        booked: tokio::time::Instant,
        fresh: Duration,
        now: tokio::time::Instant,
    ) -> Option<bool> {
        let (read, at) = self.read?;
        let tells = at >= booked && now.saturating_duration_since(at) <= fresh;
        // -1: the key was gone, with no block since.
        tells.then_some(read >= 0 && read != epoch)
    }
}

/// The operations that move the block counter (the scripts' `e`).
const MOVE_THE_COUNTER: [&str; 2] = ["block", "unblock"];

/// The longest a reading of the block counter stands for a look at it,
/// and never longer than two intervals of the key's rate: a waiter that
/// wakes within this of a call of this process that read the counter
/// (its own booking among them) sends without a look of its own. It
/// trades round trips against how soon a block another process records
/// reaches this one's waiters: within two intervals of the key's rate, so
/// that about two turns per process go out into it, where every turn
/// looked before (one interval is about as long as a paced waiter sleeps,
/// and saved few looks). Measured on 2026-12-06 (BENCHMARKS.md, Redis
/// limiter): a process of 8 tasks paced at 40 a second, learning from
/// `X-RateLimit-*`, went from 2.6-2.95 calls of Redis a request to
/// 1.06-1.36, with the lessons waiting for the next booking.
const FRESH_READING_AT_MOST: Duration = Duration::from_millis(50);

/// Adjustments waiting for a call to carry them, and whether a task is
/// already set to send them on their own.
#[derive(Default)]
pub(crate) struct Lessons {
    /// The operations, each with the instant it names where it names one
    /// (a window's end), counted from when it is sent rather than from
    /// when it was learned.
    ops: Vec<(Op, Option<tokio::time::Instant>)>,
    /// The task set to send the lessons on their own, by its number; none
    /// once a call carried them.
    sender: Option<u64>,
    senders: u64,
    /// The armed sender's task: one that ended without sending (its
    /// runtime shut down) no longer holds the place of the next.
    sender_task: Option<tokio::task::JoinHandle<()>>,
    /// When the soonest of this process's sleeping waiters wakes to look
    /// for a block (a call that carries the lessons).
    next_look: Option<tokio::time::Instant>,
    /// When this process last booked a turn (or took one at once), and the
    /// gap before that booking: a busy process books its next about as
    /// long after.
    booked: Option<(tokio::time::Instant, Option<Duration>)>,
}

impl Lessons {
    /// Every lesson waiting, for the booking of a turn at `now` to carry.
    fn take_booking(&mut self, now: tokio::time::Instant) -> Vec<Op> {
        let gap = self
            .booked
            .map(|(last, _)| now.saturating_duration_since(last));
        self.booked = Some((now, gap));
        self.take()
    }

    /// When this process's next booking is due, at the gap between its
    /// last two.
    fn next_booking(&self) -> Option<tokio::time::Instant> {
        let (last, gap) = self.booked?;
        last.checked_add(gap?)
    }

    /// Keep `ops` for a call to carry; the number of the sender to arm,
    /// when none is.
    fn keep(&mut self, adjustments: &[(Adjustment, Op)]) -> Option<u64> {
        self.ops.extend(
            adjustments
                .iter()
                .map(|&(adjustment, op)| match adjustment {
                    Adjustment::WindowEndsBy(at) => (op, Some(at)),
                    _ => (op, None),
                }),
        );
        let gone = self.sender_task.as_ref().is_some_and(|t| t.is_finished());
        if self.sender.is_some() && !gone {
            return None;
        }
        self.senders += 1;
        self.sender = Some(self.senders);
        self.sender
    }

    /// Every lesson waiting, for a call to carry: the sender armed for
    /// them stands down.
    fn take(&mut self) -> Vec<Op> {
        self.sender = None;
        let at_send = |(op, at): (Op, Option<tokio::time::Instant>)| match at {
            Some(at) => Op {
                a: nanos_until(at),
                ..op
            },
            None => op,
        };
        self.ops.drain(..).map(at_send).collect()
    }

    /// What sender `number` is to send when it wakes: nothing, once a call
    /// carried the lessons it was armed for.
    fn take_for(&mut self, number: u64) -> Vec<Op> {
        if self.sender == Some(number) {
            self.take()
        } else {
            Vec::new()
        }
    }

    /// When the lessons waiting now are to be sent on their own: shortly,
    /// or just after the call that is to carry them, the next booking (at
    /// the gap between the last two) or a sleeping waiter's look, if one
    /// comes within [`LESSONS_WAIT_AT_MOST`]. Of the two, the later: a
    /// waiter that wakes to a fresh reading looks no further (see
    /// [`Counter`]), and the booking after it carries them.
    fn send_at(&self, now: tokio::time::Instant) -> tokio::time::Instant {
        let soon = now + SEND_LESSONS_AFTER;
        let within = |at: &tokio::time::Instant| *at > now && *at <= now + LESSONS_WAIT_AT_MOST;
        let carrier = [self.next_look, self.next_booking()]
            .into_iter()
            .flatten()
            .filter(within)
            .max();
        carrier.map_or(soon, |at| soon.max(at + SEND_LESSONS_AFTER))
    }

    /// A waiter of this process sleeps until `due`, then looks.
    fn sleeps_until(&mut self, due: tokio::time::Instant, now: tokio::time::Instant) {
        self.next_look = Some(match self.next_look {
            Some(look) if look > now => look.min(due),
            _ => due,
        });
    }
}

/// How long a response's lesson waits for this process's next reservation
/// to carry it before it is sent on its own, where none is due sooner
/// than [`LESSONS_WAIT_AT_MOST`] (see [`Lessons::send_at`]), and how long
/// after the one due it waits for it. It trades round trips against how
/// soon the other processes see it: in a busy process the next
/// reservation comes within microseconds and the lesson costs no call of
/// its own; in an idle one, the others read the key 5 ms later than they
/// could have, far less than any server's window or refill. A block is
/// never kept waiting (see [`Core::learn`]).
pub(crate) const SEND_LESSONS_AFTER: Duration = Duration::from_millis(5);

/// The longest a lesson waits for a call of this process to carry it (a
/// booking due at the gap between the last two, or a sleeping waiter's
/// look): a paced key's next call comes one interval later, and carries
/// the lesson for nothing; past this, the others would read a key the
/// server has moved on from, and the lesson goes alone.
pub(crate) const LESSONS_WAIT_AT_MOST: Duration = Duration::from_millis(100);

/// The furthest ahead a waiter books its turn: the wait for its first
/// token, the queue ahead of it (a turn of many tokens is booked as soon as
/// one of one token would be, and waits its own refill beyond it; bounded
/// by the whole turn, a call of 2,400 tokens among lighter ones asked
/// again twenty times a second for up to 13 s while the lighter ones kept
/// the queue longer than the horizon less its refill, and its process,
/// whose calls queue behind the one asking, sent nothing meanwhile). A turn keeps the instant
/// the rate of its booking gave it, through later raises and cuts alike
/// (see the script): booked far ahead while the key's rate was slow (a
/// key that has just begun to learn), it holds its process back, and the
/// queue behind it, after the rate was raised; booked before a cut, it is
/// sent at the rate the server just refused. A process's own local bucket
/// queues its waiters and books nothing, so neither happens there. A
/// waiter whose turn would come later than this books nothing, sleeps
/// until it would be this close, and asks again, at the rate the key
/// holds by then. It trades round trips against how soon a change of rate
/// reaches a waiter: a waiter whose turn is further away than this costs
/// one more call; a key whose queue is shorter (a fast key's), none.
/// Measured on 2026-12-05 (BENCHMARKS.md, fleet): a limiter that counts
/// refusals, one process through Redis, 28.5 % of its limit with 7.1 %
/// refused → 78.5 % with 3.5 %; four processes, 39.5–45.5 % → 61–73.5 %;
/// the GitHub-style bucket (four processes, paused clock) 0.70 → 0.88–0.90,
/// but 41–85 % on the real clock, against 53.5–78.5 % booking at once.
pub(crate) const BOOK_AHEAD_AT_MOST: Duration = Duration::from_millis(100);

/// The bounds a reservation is sent with at `now`: the caller's, or the
/// horizon ([`BOOK_AHEAD_AT_MOST`]) where the caller's reach further; and
/// whether the horizon is the bound, so that a wait past it is slept and
/// asked again, not a refusal.
fn within_horizon(bounds: Bounds, now: tokio::time::Instant) -> (Bounds, bool) {
    let horizon = now + BOOK_AHEAD_AT_MOST;
    match bounds.by {
        Some(by) if by <= horizon => (bounds, false),
        _ => (bounds.by(horizon), true),
    }
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
            // The scripts place what remains now: a past instant is read
            // as now (the safe side).
            Adjustment::LimitRemaining(n) | Adjustment::LimitRemainingAt(n, _) => {
                Op::new("limit", n)
            }
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
            Adjustment::WindowEndsBy(at) => Op::new("edge", nanos_until(at)).with(
                u64::try_from(crate::limiter::WINDOW_LEAP.as_nanos()).unwrap_or(UNBOUNDED),
                0,
            ),
            Adjustment::GrowRate {
                parts_per_million,
                at_most,
            } => Op::new("grow", u64::from(parts_per_million)).with(at_most.interval_nanos(), 0),
            _ => return None,
        })
    }
}

/// Say that the lessons a failed call carried are lost (the local fallback
/// has them, and the server's next answer teaches them again).
fn lost(lessons: &[Op], error: &Error) {
    if !lessons.is_empty() {
        tracing::warn!(error = %error, lessons = lessons.len(), "what responses taught did not reach Redis");
    }
}

/// A grant at `count` of the shared count and `turns` of the shared
/// turns, under a learned rate of one token per `interval` nanoseconds,
/// the one last refused one per `too_fast` (each 0 when none).
fn grant(count: u64, interval: u64, too_fast: u64, turns: u64) -> Grant {
    let rate = |ns: u64| {
        (ns > 0)
            .then(|| RequestRate::every(Duration::from_nanos(ns)).ok())
            .flatten()
    };
    Grant::counted(count)
        .with_rate(rate(interval))
        .with_too_fast(rate(too_fast))
        .with_turns(Some(turns))
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
pub(crate) fn share_of_rate(rate: RequestRate, processes: u32) -> Result<RequestRate, Error> {
    let per = rate.per().checked_mul(processes).ok_or_else(|| {
        Error::config(format!(
            "{rate} divided by {processes} processes is too slow"
        ))
    })?;
    RequestRate::new(rate.count(), per)
}

/// `n` spread over `processes`, at least 1 for a capacity.
pub(crate) fn share_of(n: u64, processes: u32) -> u64 {
    n / u64::from(processes.max(1))
}

impl Fallback {
    pub(crate) fn new(
        policy: FaultPolicy,
        rate: RequestRate,
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
            Adjustment::LimitRemainingAt(n, at) => Adjustment::LimitRemainingAt(share_of(n, p), at),
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
        Err(Error::NotYet {
            wait: interval.saturating_mul(excess),
        })
    }
}

impl Core {
    async fn run(&self, op: Op) -> Result<Reply, Error> {
        self.run_with(op, &[]).await
    }

    /// Run `op` after the adjustments `first` (their count in ARGV[9], then
    /// four arguments each), in one call.
    async fn run_with(&self, op: Op, first: &[Op]) -> Result<Reply, Error> {
        let sent = tokio::time::Instant::now();
        let moves_counter = std::iter::once(&op)
            .chain(first)
            .any(|op| MOVE_THE_COUNTER.contains(&op.name));
        if moves_counter {
            crate::sync::lock(&self.counter).written(sent);
        }
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(9 + 4 * first.len());
        args.push(op.name.as_bytes().to_vec());
        for n in [
            self.backend.idle_ttl_ms(),
            self.defaults[0],
            self.defaults[1],
            op.a,
            op.b,
            op.c,
            self.backend.learned_ttl_ms(),
        ] {
            args.push(n.to_string().into_bytes());
        }
        if !first.is_empty() {
            args.push(first.len().to_string().into_bytes());
        }
        for op in first {
            args.push(op.name.as_bytes().to_vec());
            for n in [op.a, op.b, op.c] {
                args.push(n.to_string().into_bytes());
            }
        }
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let reply = self
            .backend
            .eval(self.script, self.source, &self.keys, &args)
            .await?;
        let reply = Reply::parse(&reply)?;
        if let Reply::Granted { epoch, .. } | Reply::Applied { epoch } = reply {
            crate::sync::lock(&self.counter).read(epoch, sent);
        }
        Ok(reply)
    }

    fn unexpected(reply: Reply) -> Error {
        Error::Backend {
            message: format!("unexpected script reply {reply:?}"),
            source: None,
        }
    }

    /// Reserve within `bounds`, sleep once until the reserved instant, and
    /// check that no Retry-After block arrived meanwhile (if one did,
    /// reserve again after it, within the same bounds): by a fresh reading
    /// of the block counter where this process has one (see [`Counter`]),
    /// else by a look. A turn further
    /// away than [`BOOK_AHEAD_AT_MOST`] is not booked: the waiter sleeps
    /// until it nears and asks again. A dropped future
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
            let (booking, own) = within_horizon(bounds, sent);
            let lessons = crate::sync::lock(&self.lessons).take_booking(sent);
            // Within the horizon, the turn is booked once the queue ahead
            // of it is (see `BOOK_AHEAD_AT_MOST`); within the caller's own
            // bound, once all of it is.
            let op = if own { "book" } else { "reserve" };
            let reply = match self.run_with(Op::take(op, weight, booking), &lessons).await {
                Ok(reply) => reply,
                Err(e) => {
                    lost(&lessons, &e);
                    return self.acquire_on_fault(weight, bounds, e).await;
                }
            };
            match reply {
                Reply::Granted {
                    wait,
                    count,
                    interval,
                    too_fast,
                    turns,
                    ..
                } if wait.is_zero() => return Ok(grant(count, interval, too_fast, turns)),
                Reply::Granted {
                    wait,
                    id,
                    epoch,
                    count,
                    interval,
                    too_fast,
                    turns,
                } => {
                    let refund = Refund {
                        core: Some(Arc::clone(self)),
                        id,
                        weight,
                    };
                    // Booked by the queue ahead of it, past the caller's
                    // own bound: handed back (dropped armed), as a turn
                    // that bound refused.
                    if bounds.by.is_some_and(|by| sent + wait > by) {
                        return Err(Error::NotYet { wait });
                    }
                    {
                        let mut lessons = crate::sync::lock(&self.lessons);
                        lessons.sleeps_until(sent + wait, sent);
                    }
                    tokio::time::sleep(wait).await;
                    refund.disarm();
                    if !self.blocked_since(epoch, sent, interval).await
                        || self.stands(id, weight, sent + wait).await
                    {
                        return Ok(grant(count, interval, too_fast, turns));
                    }
                }
                // Past the horizon, not past the caller's bound: nothing
                // is booked; look again when the turn would be within it.
                Reply::Throttled { wait }
                    if own && bounds.by.is_none_or(|by| sent + wait <= by) =>
                {
                    tokio::time::sleep(wait.saturating_sub(BOOK_AHEAD_AT_MOST)).await;
                }
                Reply::Throttled { wait } => return Err(Error::NotYet { wait }),
                Reply::Held { wait, cause } => return Err(held(wait, cause, bounds)),
                Reply::TooHeavy { capacity } => {
                    return Err(Error::WeightExceedsCapacity { weight, capacity })
                }
                other => return Err(Self::unexpected(other)),
            }
        }
    }

    /// Whether the key's block counter moved since `epoch`, read with the
    /// turn booked at `booked` for a key of `interval` ns a token: by this
    /// process's reading of it where one is fresh (two intervals, and
    /// [`FRESH_READING_AT_MOST`] at most; see [`Counter`]), else by a
    /// look, on which the lessons waiting ride, in the same call. A
    /// failure to read it counts as no: the reservation stands.
    async fn blocked_since(&self, epoch: i64, booked: tokio::time::Instant, interval: u64) -> bool {
        let fresh = Duration::from_nanos(interval)
            .saturating_mul(2)
            .min(FRESH_READING_AT_MOST);
        let now = tokio::time::Instant::now();
        let read = crate::sync::lock(&self.counter).blocked_since(epoch, booked, fresh, now);
        if let Some(blocked) = read {
            return blocked;
        }
        let lessons = self.take_lessons();
        if !lessons.is_empty() {
            return match self.run_with(Op::new("batch", 0), &lessons).await {
                // -1: the key was gone, with no block since.
                Ok(Reply::Applied { epoch: now }) => now >= 0 && now != epoch,
                Ok(other) => {
                    tracing::debug!(error = %Self::unexpected(other), "carrying lessons to Redis");
                    false
                }
                Err(e) => {
                    lost(&lessons, &e);
                    false
                }
            };
        }
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
                        Err(Error::NotYet { wait }) if tokio::time::Instant::now() + wait > by => {
                            return Err(Error::NotYet { wait })
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
        let lessons = crate::sync::lock(&self.lessons).take_booking(tokio::time::Instant::now());
        match self
            .run_with(Op::take("try", weight, Bounds::default()), &lessons)
            .await
        {
            Ok(Reply::Granted { .. }) => Ok(()),
            Ok(Reply::Throttled { wait }) => Err(Error::NotYet { wait }),
            Ok(Reply::TooHeavy { capacity }) => {
                Err(Error::WeightExceedsCapacity { weight, capacity })
            }
            Ok(other) => Err(Self::unexpected(other)),
            Err(error) => {
                lost(&lessons, &error);
                match (&self.fallback, self.backend.fault_policy()) {
                    (Some(fallback), _) => fallback.try_acquire(weight),
                    (None, FaultPolicy::FailOpen) => Ok(()),
                    (None, _) => Err(error),
                }
            }
        }
    }

    /// Write adjustments to the shared state in one script call, applied
    /// in order and saved once, after the lessons still waiting (and to
    /// the local fallback, so that they hold during an outage that starts
    /// right after). A failure of the call is an error only under
    /// [`FaultPolicy::FailClosed`].
    /// One that cannot be applied (a zero capacity) is left out and its
    /// error returned; the others are written.
    pub(crate) async fn adjust(&self, adjustments: &[Adjustment]) -> Result<(), Error> {
        let (adjustments, refused) = self.spelled(adjustments);
        self.write_now(&adjustments).await?;
        refused.map_or(Ok(()), Err)
    }

    /// Write `adjustments` in one script call now, after the lessons still
    /// waiting (which came first), and to the local fallback.
    async fn write_now(&self, adjustments: &[(Adjustment, Op)]) -> Result<(), Error> {
        self.apply_to_fallback(adjustments);
        let mut ops = self.take_lessons();
        ops.extend(adjustments.iter().map(|&(_, op)| op));
        self.write(&ops).await
    }

    /// The operations of `adjustments`, each with what it was made from;
    /// the first that cannot be spelled is left out and its error given
    /// back beside them.
    fn spelled(&self, adjustments: &[Adjustment]) -> (Vec<(Adjustment, Op)>, Option<Error>) {
        let mut ops = Vec::with_capacity(adjustments.len());
        let mut refused = None;
        for &adjustment in adjustments {
            match (self.spell)(adjustment) {
                Ok(Some(op)) => ops.push((adjustment, op)),
                Ok(None) => {}
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        (ops, refused)
    }

    fn apply_to_fallback(&self, adjustments: &[(Adjustment, Op)]) {
        if let Some(fallback) = &self.fallback {
            for &(adjustment, _) in adjustments {
                if let Err(e) = fallback.apply(adjustment) {
                    tracing::warn!(error = %e, "cannot apply {adjustment:?} to the local fallback");
                }
            }
        }
    }

    /// Write `ops` in one script call, by the fault policy.
    async fn write(&self, ops: &[Op]) -> Result<(), Error> {
        let reply = match ops {
            [] => return Ok(()),
            [op] => self.run(*op).await,
            ops => self.run_with(Op::new("batch", 0), ops).await,
        };
        match reply {
            Ok(Reply::Done | Reply::Applied { .. }) => Ok(()),
            Ok(other) => Err(Self::unexpected(other)),
            Err(error) => match self.backend.fault_policy() {
                FaultPolicy::FailClosed => Err(error),
                _ => Ok(()),
            },
        }
    }

    /// Take what one response taught. A batch that holds a server's block
    /// or a cut on a refusal is written at once, with the lessons still
    /// waiting before it, and waited for: the block must be in the shared
    /// state before this process's retry and before another process asks,
    /// and every process sends too fast until the cut is in. Any other is kept
    /// for the next reservation to carry, in the same script call, or sent
    /// on its own [`SEND_LESSONS_AFTER`] later: the response goes back to
    /// its caller without waiting for Redis. The local fallback has every
    /// lesson at once. Lessons keep their order. One lost with the call
    /// that carried it (Redis failing, or the call dropped while Redis had
    /// it) is lost, as an adjustment written alone was: the key learns on
    /// from the server's next answers, and says so in a warning where it
    /// can.
    pub(crate) async fn learn(self: &Arc<Self>, adjustments: &[Adjustment]) -> Result<(), Error> {
        let (adjustments, refused) = self.spelled(adjustments);
        self.keep_or_write(&adjustments).await?;
        refused.map_or(Ok(()), Err)
    }

    async fn keep_or_write(
        self: &Arc<Self>,
        adjustments: &[(Adjustment, Op)],
    ) -> Result<(), Error> {
        if adjustments.is_empty() {
            return Ok(());
        }
        // A block is urgent, and so are the header-less regime's cut and
        // growth, which act on the rate every process holds (a growth
        // applied after another's cut would undo it).
        let urgent = adjustments.iter().any(|(a, _)| {
            matches!(
                a,
                Adjustment::Block(_)
                    | Adjustment::BlockUntil(_)
                    | Adjustment::Cut { .. }
                    | Adjustment::GrowRate { .. }
            )
        });
        let runtime = tokio::runtime::Handle::try_current();
        if urgent || runtime.is_err() {
            return self.write_now(adjustments).await;
        }
        self.apply_to_fallback(adjustments);
        let sender = {
            let mut lessons = crate::sync::lock(&self.lessons);
            lessons.keep(adjustments)
        };
        if let (Some(number), Ok(runtime)) = (sender, runtime) {
            let core = Arc::clone(self);
            let task = runtime.spawn(async move {
                let at = {
                    let lessons = crate::sync::lock(&core.lessons);
                    lessons.send_at(tokio::time::Instant::now())
                };
                tokio::time::sleep_until(at).await;
                let ops = {
                    let mut lessons = crate::sync::lock(&core.lessons);
                    lessons.take_for(number)
                };
                if let Err(e) = core.write(&ops).await {
                    lost(&ops, &e);
                }
            });
            let mut lessons = crate::sync::lock(&self.lessons);
            if lessons.sender == Some(number) {
                lessons.sender_task = Some(task);
            }
        }
        Ok(())
    }

    /// The lessons waiting, for a call to carry.
    fn take_lessons(&self) -> Vec<Op> {
        let mut lessons = crate::sync::lock(&self.lessons);
        lessons.take()
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
        let rate = RequestRate::per_second(100).unwrap();
        let share = share_of_rate(rate, 4).unwrap();
        assert_eq!(share.interval(), Duration::from_millis(40));
        assert_eq!(share_of(10, 4), 2);
        assert_eq!(share_of(3, 4), 0);
    }

    /// A reservation is sent bounded by the horizon unless the caller's
    /// own bound is nearer; only the horizon's refusal is slept through.
    #[tokio::test(start_paused = true)]
    async fn a_turn_is_booked_no_further_than_the_horizon() {
        let now = tokio::time::Instant::now();
        let (bounds, own) = within_horizon(Bounds::default(), now);
        assert_eq!(bounds.by, Some(now + BOOK_AHEAD_AT_MOST));
        assert!(own);
        let far = Bounds::default().by(now + Duration::from_secs(5));
        assert_eq!(
            within_horizon(far, now),
            (far.by(now + BOOK_AHEAD_AT_MOST), true)
        );
        let near = Bounds::default().by(now + Duration::from_millis(30));
        assert_eq!(within_horizon(near, now), (near, false));
    }

    fn lesson(n: u64) -> (Adjustment, Op) {
        (Adjustment::LimitRemaining(n), Op::new("limit", n))
    }

    /// Lessons keep their order; one sender is armed for them, and stands
    /// down once a call carried them; a later lesson arms the next.
    #[test]
    fn lessons_are_carried_once_in_order() {
        let mut lessons = Lessons::default();
        let first = lessons.keep(&[lesson(1), lesson(2)]);
        assert_eq!(first, Some(1));
        assert_eq!(lessons.keep(&[lesson(3)]), None, "one sender at a time");
        let carried: Vec<u64> = lessons.take().iter().map(|op| op.a).collect();
        assert_eq!(carried, [1, 2, 3]);
        // The sender armed for them wakes to nothing.
        assert!(lessons.take_for(1).is_empty());
        let second = lessons.keep(&[lesson(4)]);
        assert_eq!(second, Some(2));
        assert!(
            lessons.take_for(1).is_empty(),
            "a stale sender sends nothing"
        );
        let sent: Vec<u64> = lessons.take_for(2).iter().map(|op| op.a).collect();
        assert_eq!(sent, [4]);
        assert!(lessons.take().is_empty());
    }

    /// A sender whose task ended without sending (its runtime shut down)
    /// no longer holds the place of the next: lessons kept after it arm
    /// another, instead of waiting for a call to carry them.
    #[tokio::test]
    async fn a_sender_gone_without_sending_is_replaced() {
        let mut lessons = Lessons::default();
        assert_eq!(lessons.keep(&[lesson(1)]), Some(1));
        assert_eq!(lessons.keep(&[lesson(2)]), None, "armed, and alive");
        let gone = tokio::spawn(async {});
        while !gone.is_finished() {
            tokio::task::yield_now().await;
        }
        lessons.sender_task = Some(gone);
        assert_eq!(lessons.keep(&[lesson(3)]), Some(2));
        let sent: Vec<u64> = lessons.take_for(2).iter().map(|op| op.a).collect();
        assert_eq!(sent, [1, 2, 3], "nothing lost");
    }

    /// A window's end is counted from when it is sent, not from when it
    /// was learned.
    #[tokio::test(start_paused = true)]
    async fn a_window_end_is_counted_from_when_it_is_sent() {
        let mut lessons = Lessons::default();
        let end = tokio::time::Instant::now() + Duration::from_secs(2);
        let adjustment = Adjustment::WindowEndsBy(end);
        let op = Op::common(adjustment).unwrap();
        lessons.keep(&[(adjustment, op)]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sent = lessons.take();
        assert_eq!(sent[0].name, "edge");
        assert_eq!(sent[0].a, 1_700_000_000);
    }

    /// Lessons wait for a sleeping waiter's look due within 100 ms, and go
    /// alone 5 ms after it; with none due, or one due later, 5 ms after
    /// they came.
    #[tokio::test(start_paused = true)]
    async fn lessons_wait_for_a_look_due_soon() {
        let now = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let mut lessons = Lessons::default();
        assert_eq!(lessons.send_at(now), now + ms(5));
        lessons.sleeps_until(now + ms(40), now);
        assert_eq!(lessons.send_at(now), now + ms(45));
        // A sooner look comes first; a later one does not move it.
        lessons.sleeps_until(now + ms(20), now);
        lessons.sleeps_until(now + ms(60), now);
        assert_eq!(lessons.send_at(now), now + ms(25));
        // Past, it is forgotten; too far, it is not waited for.
        assert_eq!(lessons.send_at(now + ms(30)), now + ms(35));
        lessons.sleeps_until(now + ms(500), now + ms(30));
        assert_eq!(lessons.send_at(now + ms(30)), now + ms(35));
    }

    /// Lessons wait for the next booking, due at the gap between the last
    /// two, where it comes within 100 ms; the later of it and a look.
    #[tokio::test(start_paused = true)]
    async fn lessons_wait_for_the_next_booking_due_soon() {
        let now = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let mut lessons = Lessons::default();
        // One booking says nothing of the next.
        assert!(lessons.take_booking(now).is_empty());
        assert_eq!(lessons.send_at(now + ms(1)), now + ms(6));
        lessons.take_booking(now + ms(25));
        assert_eq!(lessons.send_at(now + ms(26)), now + ms(55));
        lessons.sleeps_until(now + ms(40), now + ms(26));
        assert_eq!(lessons.send_at(now + ms(26)), now + ms(55));
        lessons.sleeps_until(now + ms(30), now + ms(26));
        lessons.take_booking(now + ms(30));
        // Overdue, or a gap too long to wait for: sent shortly.
        assert_eq!(lessons.send_at(now + ms(36)), now + ms(41));
        lessons.take_booking(now + ms(230));
        assert_eq!(lessons.send_at(now + ms(231)), now + ms(236));
    }

    /// A reading of the block counter sent since the turn was booked, and
    /// no longer ago than `fresh`, tells whether a block came; an older
    /// one, one from before the booking, or one a write of this process
    /// made stale does not.
    #[tokio::test(start_paused = true)]
    async fn a_fresh_reading_tells_whether_a_block_came() {
        let now = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let fresh = ms(50);
        let mut counter = Counter::default();
        assert_eq!(counter.blocked_since(3, now, fresh, now), None);
        counter.read(3, now + ms(10));
        assert_eq!(
            counter.blocked_since(3, now, fresh, now + ms(60)),
            Some(false)
        );
        assert_eq!(counter.blocked_since(3, now, fresh, now + ms(61)), None);
        assert_eq!(
            counter.blocked_since(3, now + ms(11), fresh, now + ms(20)),
            None
        );
        counter.read(4, now + ms(20));
        assert_eq!(
            counter.blocked_since(3, now, fresh, now + ms(30)),
            Some(true)
        );
        // The key gone: no block since.
        counter.read(-1, now + ms(25));
        assert_eq!(
            counter.blocked_since(3, now, fresh, now + ms(30)),
            Some(false)
        );
        // An older reading answered late does not replace a newer one.
        counter.read(9, now + ms(22));
        assert_eq!(
            counter.blocked_since(3, now, fresh, now + ms(30)),
            Some(false)
        );
        // A block of this process's own, sent at 40 ms: a reading sent
        // before it is stale, one sent after it tells.
        counter.written(now + ms(40));
        assert_eq!(counter.blocked_since(3, now, fresh, now + ms(45)), None);
        counter.read(4, now + ms(39));
        assert_eq!(counter.blocked_since(3, now, fresh, now + ms(45)), None);
        counter.read(5, now + ms(41));
        assert_eq!(
            counter.blocked_since(3, now, fresh, now + ms(45)),
            Some(true)
        );
    }
}
