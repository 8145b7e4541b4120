//! An in-process twin of the shared token bucket (`RedisTokenBucket`), for
//! the fleet tests on tokio's paused clock (`tests/fleet_paused.rs`,
//! `tests/fleet_space.rs`), where a real Redis cannot follow the test's
//! clock.
//!
//! It has two layers, as the real bucket has:
//!
//! - [`Script`] is `src/redis/lua/token_bucket.lua` written again in Rust:
//!   the same hash (its fields, kept relative to the instant `t` of the last
//!   write), the same operations on it with the same integer arithmetic,
//!   the same replies, and the key's expiry as the script sets it. It is
//!   not [`Gcra`](reqwest_pace::limiter::Gcra): the script decides as
//!   `Gcra` does (`tests/lua_mirror.rs` checks that), but some operations
//!   differ from their `Gcra` counterparts (`remaining` keeps what is booked
//!   beyond one bucket, a refund undoes only the last write, and the count
//!   of grants, the learned rate and the too-fast rate are the script's
//!   alone), so the twin follows the script, not the local bucket.
//!   `tests/lua_mirror.rs` drives this twin and the real script through the
//!   same seeded sequences of every operation and checks that they give the
//!   same replies and keep the same hash.
//! - [`TwinBucket`] is `src/redis/shared.rs`'s `Core` on that script: the
//!   [`Limiter`] methods spelled as the same operations, and the same
//!   reserve, sleep, confirm flow (a block written while a reservation
//!   sleeps makes it confirm its turn: one inside the block is handed back
//!   and queues again, one past the block's end stands; a reservation
//!   dropped while it sleeps is handed back).
//! - [`TwinProcess`] is one process's `Core` over a [`TwinBucket`] the
//!   fleet shares: what its responses teach waits, as `Core`'s lessons do,
//!   for the process's next call to the script to carry (a reservation, or
//!   the look a sleeping turn takes when it wakes), or goes on its own
//!   `SEND_LESSONS_AFTER` later (after the next look, where one comes
//!   within `LESSONS_WAIT_AT_MOST`); a block, a cut and a growth go at
//!   once. A fleet of `TwinBucket`s alone applies every lesson as it is
//!   learned, which the real fleet does not.
//!
//! The clock is tokio's, read as whole microseconds since the twin was made,
//! as the script reads Redis `TIME`. What the twin does not model: Redis
//! round trips (its decisions take no time), faults and the fault policy's
//! local fallback (its state cannot be lost or unreachable), and the
//! spawned task that hands a dropped reservation back (the twin hands it
//! back in the drop itself).
#![allow(dead_code)]

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest_pace::limiter::{Bounds, Grant};
use reqwest_pace::{Adjustment, Error, Limiter, RequestRate};
use tokio::time::Instant;

/// "No bound", as the script reads a bound in nanoseconds.
pub const UNBOUNDED: u64 = 1 << 62;

/// `shared::BOOK_AHEAD_AT_MOST`: the furthest ahead a waiter books its
/// turn.
pub const BOOK_AHEAD_AT_MOST: Duration = Duration::from_millis(100);

/// `shared::SEND_LESSONS_AFTER`: how long a lesson waits for this
/// process's next call to the script before it goes on its own.
pub const SEND_LESSONS_AFTER: Duration = Duration::from_millis(5);

/// `shared::LESSONS_WAIT_AT_MOST`: the longest a lesson waits for a
/// sleeping turn's look.
pub const LESSONS_WAIT_AT_MOST: Duration = Duration::from_millis(100);

/// Where the script keeps a rescaled deficit once a rate change would push
/// it further: 2^52 ns, below which a Lua number holds every integer.
const MAX_EXACT_NANOS: u64 = 1 << 52;

/// How far back the script keeps the end of a block that is past
/// (`u`): 2^52 ns, likewise.
const LONG_AGO: i64 = -(1 << 52);

/// The default time a key outlives its return to a fresh bucket, and the
/// least time a key that learned a rate lives, as `RedisBackend` sends
/// them (`DEFAULT_IDLE_TTL`, `DEFAULT_LEARNED_TTL`), in milliseconds.
pub const IDLE_TTL_MS: u64 = 60_000;
pub const LEARNED_TTL_MS: u64 = 3_600_000;

/// The bucket's hash, field for field as the script keeps it (the script's
/// names in brackets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hash {
    /// When the hash was written, microseconds on the clock (`t`).
    pub t: u64,
    /// Nanoseconds of refill still owed at `t` (`d`).
    pub owed: u64,
    /// Nanoseconds of a server's block left at `t` (`b`).
    pub blocked: u64,
    /// Nanoseconds per token (`T`).
    pub per_token: u64,
    /// The capacity (`C`).
    pub capacity: u64,
    /// The write counter, a reservation's id (`n`).
    pub writes: u64,
    /// The block counter (`e`).
    pub blocks: u64,
    /// Units granted to every process, less those uncounted (`a`).
    pub granted: u64,
    /// What asked for the block: its status times 2, plus 1 for a spent
    /// quota (`c`).
    pub cause: u64,
    /// Whether the rate was learned rather than the one the bucket was
    /// made with (`L`).
    pub learned: bool,
    /// Nanoseconds per token of the rate a server last refused, 0 for none
    /// (`F`).
    pub too_fast: u64,
    /// Nanoseconds from `t` to the end of the latest block, below zero once
    /// it is past, no further back than [`LONG_AGO`] (`u`).
    pub block_end: i64,
    /// The block counter when `block_end` was written, -1 for never (`v`).
    pub block_end_of: i64,
    /// Nanoseconds from `t` to the earliest end of the server's window any
    /// process read, 0 for none known (`w`).
    pub window_end: u64,
    /// Units granted to every process, those uncounted included, less
    /// those of the last grant refunded with its slot (`g`).
    pub turns: u64,
}

impl Hash {
    /// The fields as `HMGET key d b T C n e a c L F u v w g` reads them.
    pub fn fields(&self) -> [i64; 14] {
        let i = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        [
            i(self.owed),
            i(self.blocked),
            i(self.per_token),
            i(self.capacity),
            i(self.writes),
            i(self.blocks),
            i(self.granted),
            i(self.cause),
            i64::from(self.learned),
            i(self.too_fast),
            self.block_end,
            self.block_end_of,
            i(self.window_end),
            i(self.turns),
        ]
    }

    /// `C·T`: how long an empty bucket takes to fill.
    fn span(&self) -> u64 {
        self.capacity * self.per_token
    }

    /// The hash after an adjustment (any operation but `reserve`, `try`
    /// and `refund`), as the script's branch for it leaves it.
    fn adjusted(mut self, op: Op) -> Hash {
        match op {
            Op::Rate {
                per_token,
                too_fast,
            } => {
                self.rescale(per_token, MAX_EXACT_NANOS);
                if too_fast > 0 {
                    self.too_fast = too_fast;
                }
            }
            Op::Grow { ppm, at_most } => {
                // In doubles, as the script divides.
                let grown = (self.per_token as f64 * 1e6 / ppm as f64).floor() as u64;
                let per_token = grown.max(at_most).max(1);
                if per_token < self.per_token {
                    self.rescale(per_token, u64::MAX);
                }
                self.learned = true;
            }
            Op::Capacity(capacity) => self.resize(capacity),
            Op::Limit(remaining) => {
                let missing = self.capacity - remaining.min(self.capacity);
                self.owed = self.owed.max(missing * self.per_token);
            }
            Op::Remaining(remaining) => {
                let booked = self.owed.saturating_sub(self.span());
                let missing = self.capacity - remaining.min(self.capacity);
                self.owed = booked + missing * self.per_token;
            }
            Op::Block { for_ns, cause } => self.block(for_ns, cause),
            Op::Unblock => {
                if self.blocked > 0 {
                    // Every turn booked so far is dropped: none stands.
                    self.block_end = self.block_end.max(to_signed(self.owed));
                    self.owed = self.owed.min((self.capacity - 1) * self.per_token);
                    self.blocked = 0;
                    self.cause = 0;
                    self.blocks += 1;
                    self.block_end_of = to_signed(self.blocks);
                }
            }
            Op::Uncount(n) => self.granted = self.granted.saturating_sub(n),
            Op::Edge { for_ns, leap } => {
                if for_ns > 0 {
                    self.window_end = match self.window_end {
                        w if w > 0 && for_ns <= w.saturating_add(leap) => w.min(for_ns),
                        _ => for_ns,
                    };
                }
            }
            Op::Reserve { .. }
            | Op::Book { .. }
            | Op::Try { .. }
            | Op::Refund { .. }
            | Op::Confirm { .. } => {}
        }
        self
    }

    /// A new time per token, as the learned rate: past the block, the
    /// turns booked beyond one bucket keep their instants, and the bucket
    /// behind them is scaled to the new rate (to at most `most`).
    fn rescale(&mut self, per_token: u64, most: u64) {
        let owed = self.owed.saturating_sub(self.blocked);
        let booked = owed.saturating_sub(self.span());
        let bucket = mul_div(owed - booked, per_token, self.per_token).min(most);
        self.owed = self.blocked + booked + bucket;
        self.per_token = per_token;
        self.learned = true;
    }

    /// A new capacity: past the block, what is booked beyond one bucket
    /// stays, the tokens at hand are kept up to the new capacity.
    fn resize(&mut self, capacity: u64) {
        let owed = self.owed.saturating_sub(self.blocked);
        let booked = owed.saturating_sub(self.span());
        let tokens = self.span().saturating_sub(owed);
        self.capacity = capacity.max(1);
        self.owed = self.blocked + booked + self.span() - tokens.min(self.span());
    }

    /// A block of `for_ns` from now: nothing before its end, then one token,
    /// then the rate.
    fn block(&mut self, for_ns: u64, cause: u64) {
        // A spent quota's block ends no later than the window's earliest
        // end known.
        let for_ns = match (cause % 2, self.window_end) {
            (1, w) if w > 0 => for_ns.min(w),
            _ => for_ns,
        };
        if for_ns > self.blocked {
            self.cause = cause;
        }
        self.blocked = self.blocked.max(for_ns);
        let resumed = for_ns.saturating_add((self.capacity - 1) * self.per_token);
        self.owed = self.owed.max(resumed);
        self.block_end = self.block_end.max(to_signed(for_ns));
        self.blocks += 1;
        self.block_end_of = to_signed(self.blocks);
    }

    /// The hash as the script reads it at `now_us`: what is owed and
    /// blocked counted from now, a clock that stepped back counting as no
    /// time passed.
    pub fn at(mut self, now_us: u64) -> Hash {
        let elapsed = now_us.saturating_sub(self.t).saturating_mul(1_000);
        self.owed = self.owed.saturating_sub(elapsed);
        self.blocked = self.blocked.saturating_sub(elapsed);
        self.block_end = self
            .block_end
            .saturating_sub(to_signed(elapsed))
            .max(LONG_AGO);
        self.window_end = self.window_end.saturating_sub(elapsed);
        self
    }
}

/// Nanoseconds as the script's signed `u` holds them.
fn to_signed(ns: u64) -> i64 {
    i64::try_from(ns).unwrap_or(i64::MAX)
}

/// `bounds` as `Core` spells them: the longest wait and the longest block,
/// in ns.
fn spelled(bounds: Bounds) -> (u64, u64) {
    let max_wait = bounds.by.map_or(UNBOUNDED, nanos_until).min(UNBOUNDED);
    let max_block = bounds.max_block.map_or(UNBOUNDED, |d| {
        u64::try_from(d.as_nanos())
            .unwrap_or(UNBOUNDED)
            .min(UNBOUNDED)
    });
    (max_wait, max_block)
}

/// Which of the script's three takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Take {
    Reserve,
    Book,
    Try,
}

/// An operation and its operands, as `Core` sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `reserve` of `weight`, booking no later than `max_wait` ns from now
    /// and waiting out no block longer than `max_block` ns.
    Reserve {
        weight: u64,
        max_wait: u64,
        max_block: u64,
    },
    /// `book` of `weight`: a `reserve` whose `max_wait` bounds the wait
    /// for its first token, as `Core` books within its horizon.
    Book {
        weight: u64,
        max_wait: u64,
        max_block: u64,
    },
    /// `try` of `weight`, unbounded as `Core::try_acquire` sends it.
    Try { weight: u64 },
    /// `refund` of reservation `id`, of `weight`.
    Refund { id: u64, weight: u64 },
    /// `confirm` of reservation `id`, of `weight`, whose turn came `late`
    /// ns ago, after a block was written while it slept.
    Confirm { id: u64, weight: u64, late: u64 },
    /// `rate`: one token per `per_token` ns, naming the rate a server
    /// refused when `too_fast` (ns per token) is not 0.
    Rate { per_token: u64, too_fast: u64 },
    /// `grow` by `ppm` millionths, to at most one token per `at_most` ns.
    Grow { ppm: u64, at_most: u64 },
    /// `capacity`.
    Capacity(u64),
    /// `limit`: at most this many tokens at hand.
    Limit(u64),
    /// `remaining`: this many tokens at hand.
    Remaining(u64),
    /// `block` for `for_ns` from now, asked for by `cause`.
    Block { for_ns: u64, cause: u64 },
    /// `unblock`.
    Unblock,
    /// `uncount` this many units.
    Uncount(u64),
    /// `edge`: the server's window ends within `for_ns`; a bound more than
    /// `leap` ns later than the one held is a later window's.
    Edge { for_ns: u64, leap: u64 },
}

impl Op {
    /// `reserve` of `weight` within `bounds`, as `Core` spells the bounds.
    pub fn reserve(weight: u64, bounds: Bounds) -> Op {
        let (max_wait, max_block) = spelled(bounds);
        Op::Reserve {
            weight,
            max_wait,
            max_block,
        }
    }

    /// `book` of `weight` within `bounds`, as `Core` spells the bounds.
    pub fn book(weight: u64, bounds: Bounds) -> Op {
        let (max_wait, max_block) = spelled(bounds);
        Op::Book {
            weight,
            max_wait,
            max_block,
        }
    }

    /// The script's name for the operation and its operands (ARGV[5..7]).
    pub fn script_args(&self) -> (&'static str, [u64; 3]) {
        match *self {
            Op::Reserve {
                weight,
                max_wait,
                max_block,
            } => ("reserve", [weight, max_wait, max_block]),
            Op::Book {
                weight,
                max_wait,
                max_block,
            } => ("book", [weight, max_wait, max_block]),
            Op::Try { weight } => ("try", [weight, UNBOUNDED, UNBOUNDED]),
            Op::Refund { id, weight } => ("refund", [id, weight, 0]),
            Op::Confirm { id, weight, late } => ("confirm", [id, weight, late]),
            Op::Rate {
                per_token,
                too_fast,
            } => ("rate", [per_token, 0, too_fast]),
            Op::Grow { ppm, at_most } => ("grow", [ppm, at_most, 0]),
            Op::Capacity(c) => ("capacity", [c, 0, 0]),
            Op::Limit(r) => ("limit", [r, 0, 0]),
            Op::Remaining(r) => ("remaining", [r, 0, 0]),
            Op::Block { for_ns, cause } => ("block", [for_ns, cause, 0]),
            Op::Unblock => ("unblock", [0, 0, 0]),
            Op::Uncount(n) => ("uncount", [n, 0, 0]),
            Op::Edge { for_ns, leap } => ("edge", [for_ns, leap, 0]),
        }
    }
}

/// What the script answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Granted after `wait` ns, booked as write `id` while the block
    /// counter stood at `epoch`; `count` units granted so far, `interval`
    /// the learned time per token (0: none), `too_fast` the refused one,
    /// `turns` the units granted so far, refused ones included.
    Granted {
        wait: u64,
        id: u64,
        epoch: u64,
        count: u64,
        interval: u64,
        too_fast: u64,
        turns: u64,
    },
    /// Refused: the grant would come after `wait` ns.
    Throttled { wait: u64 },
    /// The weight is over the capacity.
    TooHeavy { capacity: u64 },
    /// Applied; 1 for a refund that gave its turn back, 2 for a confirmed
    /// turn that stands, else 0.
    Done(u64),
    /// Held by a block of `wait` ns more, asked for by `cause`.
    Held { wait: u64, cause: u64 },
}

impl Reply {
    /// The reply as the script spells it.
    pub fn to_script(self) -> Vec<i64> {
        let i = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        match self {
            Reply::Granted {
                wait,
                id,
                epoch,
                count,
                interval,
                too_fast,
                turns,
            } => [0, wait, id, epoch, count, interval, too_fast, turns]
                .map(i)
                .to_vec(),
            Reply::Throttled { wait } => vec![1, i(wait)],
            Reply::TooHeavy { capacity } => vec![2, i(capacity)],
            Reply::Done(x) => vec![3, i(x)],
            Reply::Held { wait, cause } => vec![4, i(wait), i(cause)],
        }
    }
}

/// `floor(a·b / c)`, which the script forms bit by bit to stay exact in
/// doubles.
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    let q = u128::from(a) * u128::from(b) / u128::from(c.max(1));
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// One key of the script: its hash while the key lives, and the figures
/// each call sends along (ARGV[2], ARGV[3], ARGV[4], ARGV[8]).
#[derive(Clone, Debug)]
pub struct Script {
    /// The configured time per token and capacity, used while the key
    /// holds none.
    defaults: (u64, u64),
    idle_ms: u64,
    learned_ms: u64,
    hash: Option<Hash>,
    /// When the key expires, microseconds on the clock.
    expires_at_us: u64,
}

impl Script {
    /// A key not written yet.
    pub fn new(per_token: u64, capacity: u64, idle_ms: u64, learned_ms: u64) -> Script {
        Script {
            defaults: (per_token, capacity),
            idle_ms,
            learned_ms,
            hash: None,
            expires_at_us: 0,
        }
    }

    /// The hash at `now_us`, as stored (not counted from now); `None` once
    /// the key expired.
    pub fn hash(&self, now_us: u64) -> Option<Hash> {
        self.hash.filter(|_| now_us < self.expires_at_us)
    }

    /// Milliseconds the key has left to live at `now_us`.
    pub fn ttl_ms(&self, now_us: u64) -> Option<u64> {
        self.hash(now_us)
            .map(|_| (self.expires_at_us - now_us).div_ceil(1_000))
    }

    /// The time per token the key holds, or the configured one.
    pub fn per_token(&self, now_us: u64) -> u64 {
        self.hash(now_us).map_or(self.defaults.0, |h| h.per_token)
    }

    /// The capacity the key holds, or the configured one.
    pub fn capacity(&self, now_us: u64) -> u64 {
        self.hash(now_us).map_or(self.defaults.1, |h| h.capacity)
    }

    /// The configured time per token and capacity (ARGV[3], ARGV[4]).
    pub fn defaults(&self) -> (u64, u64) {
        self.defaults
    }

    fn fresh(&self) -> Hash {
        Hash {
            per_token: self.defaults.0,
            capacity: self.defaults.1,
            block_end: LONG_AGO,
            block_end_of: -1,
            ..Hash::default()
        }
    }

    /// Write `hash` at `now_us` as the script's `save` does, with the
    /// expiry it sets; returns the write's id.
    fn save(&mut self, now_us: u64, mut hash: Hash) -> u64 {
        hash.writes += 1;
        hash.t = now_us;
        let mut ttl = hash.owed.max(hash.blocked).div_ceil(1_000_000) + self.idle_ms;
        if hash.learned {
            ttl = ttl.max(self.learned_ms);
        }
        self.expires_at_us = now_us + ttl.max(1) * 1_000;
        self.hash = Some(hash);
        hash.writes
    }

    /// Run `op` at `now_us`, as one `EVALSHA` of the script.
    pub fn run(&mut self, now_us: u64, op: Op) -> Reply {
        let stored = self.hash(now_us);
        let h = stored.map_or_else(|| self.fresh(), |h| h.at(now_us));
        match op {
            Op::Reserve {
                weight,
                max_wait,
                max_block,
            } => self.take(now_us, h, weight, (max_wait, max_block), Take::Reserve),
            Op::Book {
                weight,
                max_wait,
                max_block,
            } => self.take(now_us, h, weight, (max_wait, max_block), Take::Book),
            Op::Try { weight } => self.take(now_us, h, weight, (UNBOUNDED, UNBOUNDED), Take::Try),
            Op::Refund { id, weight } => self.refund(now_us, stored, h, id, weight),
            // A turn at or after the latest block's end stands, as does any
            // on a key gone; one inside the block, or after a block whose
            // end the key does not hold, is refunded.
            Op::Confirm { id, weight, late } => {
                let described = h.block_end_of == to_signed(h.blocks);
                if stored.is_none() || (described && h.block_end <= -to_signed(late)) {
                    Reply::Done(2)
                } else {
                    self.refund(now_us, stored, h, id, weight)
                }
            }
            adjustment => {
                self.save(now_us, h.adjusted(adjustment));
                Reply::Done(0)
            }
        }
    }

    /// `reserve`, `book` or `try`.
    fn take(
        &mut self,
        now_us: u64,
        mut h: Hash,
        weight: u64,
        (max_wait, max_block): (u64, u64),
        kind: Take,
    ) -> Reply {
        if weight > h.capacity {
            return Reply::TooHeavy {
                capacity: h.capacity,
            };
        }
        if h.blocked > max_block {
            return Reply::Held {
                wait: h.blocked,
                cause: h.cause,
            };
        }
        let need = weight * h.per_token;
        // The earliest instant (ns from now) with max(d, t) + w·T - t <= C·T.
        let ready = (h.owed + need).saturating_sub(h.span()).max(h.blocked);
        // `book` bounds the wait for the turn's first token.
        let bounded = match kind {
            Take::Book => (h.owed + h.per_token)
                .saturating_sub(h.span())
                .max(h.blocked),
            Take::Reserve | Take::Try => ready,
        };
        if (kind == Take::Try && ready > 0) || bounded > max_wait {
            return Reply::Throttled { wait: bounded };
        }
        h.owed = h.owed.max(ready) + need;
        h.granted += weight;
        h.turns += weight;
        let id = self.save(now_us, h);
        Reply::Granted {
            wait: ready,
            id,
            epoch: h.blocks,
            count: h.granted,
            interval: if h.learned { h.per_token } else { 0 },
            too_fast: h.too_fast,
            turns: h.turns,
        }
    }

    /// `refund`: the units off the count, and the turn given back only
    /// when it was the key's last write. The count alone is written
    /// otherwise, leaving the rest of the hash (and its `t`) as it was.
    fn refund(
        &mut self,
        now_us: u64,
        stored: Option<Hash>,
        h: Hash,
        id: u64,
        weight: u64,
    ) -> Reply {
        let granted = h.granted.saturating_sub(weight);
        match stored {
            Some(_) if h.writes == id => {
                let owed = h.owed.saturating_sub(weight.saturating_mul(h.per_token));
                // Off the turns only with the slot given back.
                let turns = h.turns.saturating_sub(weight);
                self.save(
                    now_us,
                    Hash {
                        owed,
                        granted,
                        turns,
                        ..h
                    },
                );
                Reply::Done(1)
            }
            Some(old) => {
                self.hash = Some(Hash { granted, ..old });
                Reply::Done(0)
            }
            None => Reply::Done(0),
        }
    }
}

/// A shared token bucket in process: what `RedisTokenBucket` does, on a
/// [`Script`] behind a lock, for every client given the same `Arc`.
#[derive(Debug)]
pub struct TwinBucket {
    script: Mutex<Script>,
    /// The clock's zero; microseconds are counted from it.
    origin: Instant,
}

impl TwinBucket {
    /// A bucket of `capacity` refilled at `rate` (the figures learned ones
    /// take precedence over), with `RedisBackend`'s default key lifetimes.
    /// Refused as `RedisTokenBucket::new` refuses.
    pub fn new(rate: RequestRate, capacity: u64) -> Result<TwinBucket, Error> {
        if capacity == 0 {
            return Err(Error::InvalidConfig(
                "a token bucket needs a capacity above zero".into(),
            ));
        }
        let refill = u128::from(capacity) * u128::from(rate.interval_nanos());
        if refill > u128::from(MAX_EXACT_NANOS) {
            return Err(Error::InvalidConfig(format!(
                "a shared bucket of {capacity} at {rate} takes too long to refill"
            )));
        }
        Ok(TwinBucket {
            script: Mutex::new(Script::new(
                rate.interval_nanos(),
                capacity,
                IDLE_TTL_MS,
                LEARNED_TTL_MS,
            )),
            origin: Instant::now(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The clock as the script reads `TIME`: whole microseconds.
    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn run(&self, op: Op) -> Reply {
        self.run_after(&[], op)
    }

    /// The rate the shared state holds now (learned, or the one it was
    /// made with).
    pub fn rate(&self) -> RequestRate {
        let per_token = self.lock().per_token(self.now_us());
        RequestRate::every(Duration::from_nanos(per_token)).expect("a rate the state holds")
    }

    /// Whether the block counter moved since `epoch`, read after `first`
    /// (the lessons the look carries) in the same call; an expired key
    /// counts as no, as a failed read does for `Core`.
    fn blocked_since(&self, first: &[Op], epoch: u64) -> bool {
        self.after(first, |script, now| {
            script.hash(now).is_some_and(|h| h.blocks != epoch)
        })
    }

    /// `Core::acquire`: reserve within `bounds`, sleep once until the
    /// turn, and queue again behind a block that came meanwhile.
    async fn reserve(&self, weight: u64, bounds: Bounds) -> Result<Grant, Error> {
        self.reserve_for(None, weight, bounds).await
    }

    /// `op` at one instant, after `first` (the lessons a call carries), as
    /// one script call.
    fn run_after(&self, first: &[Op], op: Op) -> Reply {
        self.after(first, |script, now| script.run(now, op))
    }

    /// `first` run at one instant, then `then` on the script at that
    /// instant, under one lock: one script call.
    fn after<R>(&self, first: &[Op], then: impl FnOnce(&mut Script, u64) -> R) -> R {
        let now = self.now_us();
        let mut script = self.lock();
        for &lesson in first {
            script.run(now, lesson);
        }
        then(&mut script, now)
    }

    /// `ops` in order at one instant, as one script call.
    fn run_all(&self, ops: &[Op]) {
        if let Some((&last, first)) = ops.split_last() {
            self.run_after(first, last);
        }
    }

    /// `try` of `weight` after `first`, as `Core::try_acquire` sends it.
    fn try_after(&self, first: &[Op], weight: u64) -> Result<(), Error> {
        if weight == 0 {
            return Ok(());
        }
        match self.run_after(first, Op::Try { weight }) {
            Reply::Granted { .. } => Ok(()),
            refused => Err(refusal(refused, weight, Bounds::default())),
        }
    }

    /// `adjustment` written now, after `first`, as `Core::adjust` writes
    /// it.
    fn adjust_after(&self, mut first: Vec<Op>, adjustment: Adjustment) -> Result<(), Error> {
        first.push(TwinBucket::op_of(adjustment)?);
        self.run_all(&first);
        Ok(())
    }

    /// [`reserve`](Self::reserve) for `process`, whose lessons ride on
    /// each call it makes (none: a process that keeps none).
    async fn reserve_for(
        &self,
        process: Option<&Lessons>,
        weight: u64,
        bounds: Bounds,
    ) -> Result<Grant, Error> {
        if weight == 0 {
            return Ok(Grant::default());
        }
        let carried = || process.map(Lessons::take).unwrap_or_default();
        loop {
            let sent = Instant::now();
            // `Core`'s horizon: a turn further than it is not booked, and
            // asked for again when it would be this close.
            let horizon = sent + BOOK_AHEAD_AT_MOST;
            let own = bounds.by.is_none_or(|by| by > horizon);
            let booking = if own { bounds.by(horizon) } else { bounds };
            // Within the horizon, booked once the queue ahead is.
            let op = if own {
                Op::book(weight, booking)
            } else {
                Op::reserve(weight, booking)
            };
            let (wait, id, epoch, grant) = match self.run_after(&carried(), op) {
                Reply::Throttled { wait }
                    if own
                        && bounds
                            .by
                            .is_none_or(|by| sent + Duration::from_nanos(wait) <= by) =>
                {
                    let nap = Duration::from_nanos(wait).saturating_sub(BOOK_AHEAD_AT_MOST);
                    tokio::time::sleep(nap).await;
                    continue;
                }
                Reply::Granted {
                    wait,
                    id,
                    epoch,
                    count,
                    interval,
                    too_fast,
                    turns,
                } => (wait, id, epoch, grant(count, interval, too_fast, turns)),
                refused => return Err(refusal(refused, weight, bounds)),
            };
            if wait == 0 {
                return Ok(grant);
            }
            let due = sent + Duration::from_nanos(wait);
            let refund = Refund {
                twin: Some(self),
                id,
                weight,
            };
            // Booked by the queue ahead, past the caller's own bound:
            // handed back (dropped armed).
            if bounds.by.is_some_and(|by| due > by) {
                return Err(Error::not_yet(Duration::from_nanos(wait)));
            }
            if let Some(lessons) = process {
                lessons.sleeps_until(due, sent);
            }
            tokio::time::sleep(Duration::from_nanos(wait)).await;
            refund.disarm();
            // The look carries the lessons waiting, in the same call.
            if !self.blocked_since(&carried(), epoch) {
                return Ok(grant);
            }
            // A block came while the turn slept: it stands past the block's
            // end, else it is given up and queues again.
            let late = u64::try_from(Instant::now().saturating_duration_since(due).as_nanos())
                .unwrap_or(UNBOUNDED)
                .min(UNBOUNDED);
            if self.run(Op::Confirm { id, weight, late }) == Reply::Done(2) {
                return Ok(grant);
            }
        }
    }

    /// The operation `RedisTokenBucket::adjust` sends for `adjustment`.
    fn op_of(adjustment: Adjustment) -> Result<Op, Error> {
        Ok(match adjustment {
            Adjustment::SetRate(rate) => Op::Rate {
                per_token: rate.interval_nanos(),
                too_fast: 0,
            },
            Adjustment::Cut { to, too_fast, .. } => Op::Rate {
                per_token: to.interval_nanos(),
                too_fast: too_fast.interval_nanos(),
            },
            Adjustment::GrowRate {
                parts_per_million,
                at_most,
                ..
            } => Op::Grow {
                ppm: u64::from(parts_per_million),
                at_most: at_most.interval_nanos(),
            },
            Adjustment::SetCapacity(0) => {
                return Err(Error::InvalidConfig(
                    "a limiter needs a capacity above zero".into(),
                ))
            }
            Adjustment::SetCapacity(c) => Op::Capacity(c),
            Adjustment::LimitRemaining(n) | Adjustment::LimitRemainingAt(n, _) => Op::Limit(n),
            Adjustment::SetRemaining(n) => Op::Remaining(n),
            Adjustment::BlockUntil(until) => Op::Block {
                for_ns: nanos_until(until),
                cause: 0,
            },
            Adjustment::Block(block) => Op::Block {
                for_ns: nanos_until(block.until),
                cause: u64::from(block.status) * 2 + u64::from(block.spent_quota),
            },
            Adjustment::Unblock => Op::Unblock,
            Adjustment::Uncount(n) => Op::Uncount(n),
            Adjustment::WindowEndsBy(at) => Op::Edge {
                for_ns: nanos_until(at),
                leap: reqwest_pace::limiter::WINDOW_LEAP.as_nanos() as u64,
            },
            other => {
                return Err(Error::InvalidConfig(format!(
                    "a shared limiter cannot apply {other:?}"
                )))
            }
        })
    }
}

impl Limiter for TwinBucket {
    fn acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { self.reserve(weight, Bounds::default()).await.map(|_| ()) })
    }

    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(std::future::ready(self.try_after(&[], weight)))
    }

    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(std::future::ready(
            self.adjust_after(Vec::new(), adjustment),
        ))
    }

    fn acquire_within(&self, weight: u64, bounds: Bounds) -> BoxFuture<'_, Result<Grant, Error>> {
        Box::pin(self.reserve(weight, bounds))
    }
}

/// Hands a reservation back when the future sleeping on it is dropped.
struct Refund<'a> {
    twin: Option<&'a TwinBucket>,
    id: u64,
    weight: u64,
}

impl Refund<'_> {
    fn disarm(mut self) {
        self.twin = None;
    }
}

impl Drop for Refund<'_> {
    fn drop(&mut self) {
        if let Some(twin) = self.twin.take() {
            twin.run(Op::Refund {
                id: self.id,
                weight: self.weight,
            });
        }
    }
}

/// A grant at `count`, as `Core` reads the script's figures.
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

/// The error for a reservation the script did not grant, as `Core` reads
/// the reply.
fn refusal(reply: Reply, weight: u64, bounds: Bounds) -> Error {
    match reply {
        Reply::Throttled { wait } => Error::not_yet(Duration::from_nanos(wait)),
        Reply::Held { wait, cause } => held(wait, cause, bounds),
        Reply::TooHeavy { capacity } => Error::weight_exceeds_capacity(weight, capacity),
        other => Error::backend(format!("unexpected script reply {other:?}"), None),
    }
}

/// The error for a block longer than the call's bound, as `Core` builds it.
fn held(wait: u64, cause: u64, bounds: Bounds) -> Error {
    let status = u16::try_from(cause / 2)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(429);
    Error::blocked(
        Duration::from_nanos(wait),
        bounds.max_block.unwrap_or_default(),
        status,
        cause % 2 == 1,
    )
}

/// Nanoseconds from now until `until`.
fn nanos_until(until: Instant) -> u64 {
    let left = until.saturating_duration_since(Instant::now());
    u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)
}

/// One process of a fleet sharing a [`TwinBucket`]: `Core`'s handling of
/// what this process's responses teach (see the module docs). Every
/// process of the fleet is made from the same bucket with
/// [`TwinProcess::of`].
#[derive(Debug, Clone)]
pub struct TwinProcess {
    twin: Arc<TwinBucket>,
    lessons: Arc<Lessons>,
}

impl TwinProcess {
    /// A process of the fleet that shares `twin`.
    pub fn of(twin: &Arc<TwinBucket>) -> TwinProcess {
        TwinProcess {
            twin: Arc::clone(twin),
            lessons: Arc::new(Lessons::default()),
        }
    }

    /// The default client of a process of the fleet that shares `twin`:
    /// its own scopes and learning, and lessons kept as a process's
    /// `Core` keeps them; nothing configured but the jitter's draws,
    /// fixed so that every run is the same.
    #[allow(dead_code)] // Not every test binary that shares this module uses it.
    pub fn client(twin: &Arc<TwinBucket>) -> Result<reqwest_pace::ThrottledClient, Error> {
        let process = TwinProcess::of(twin);
        let scope = reqwest_pace::Scope::per_host()
            .limiter(move |_| Ok(Arc::new(process.clone()) as Arc<dyn Limiter>));
        reqwest_pace::ThrottledClient::builder(reqwest::Client::new())
            .host_scope(scope)
            .random(|| 0.5)
            .build()
    }

    /// `Core::learn`: a block, a cut or a growth is written at once, with
    /// the lessons still waiting before it; anything else waits for a
    /// call to carry it, or goes on its own (see [`Lessons::send_at`]).
    fn learn_now_or_later(&self, adjustments: Vec<Adjustment>) -> Result<(), Error> {
        let mut spelled = Vec::with_capacity(adjustments.len());
        let mut refused = None;
        for adjustment in adjustments {
            match TwinBucket::op_of(adjustment) {
                Ok(op) => spelled.push((adjustment, op)),
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        if spelled.is_empty() {
            return refused.map_or(Ok(()), Err);
        }
        let urgent = spelled.iter().any(|(a, _)| {
            matches!(
                a,
                Adjustment::Block(_)
                    | Adjustment::BlockUntil(_)
                    | Adjustment::Cut { .. }
                    | Adjustment::GrowRate { .. }
            )
        });
        if urgent {
            let mut ops = self.lessons.take();
            ops.extend(spelled.iter().map(|&(_, op)| op));
            self.twin.run_all(&ops);
            return refused.map_or(Ok(()), Err);
        }
        if let Some(number) = self.lessons.keep(&spelled) {
            let (twin, lessons) = (Arc::clone(&self.twin), Arc::clone(&self.lessons));
            tokio::spawn(async move {
                let at = lessons.send_at(Instant::now());
                tokio::time::sleep_until(at).await;
                twin.run_all(&lessons.take_for(number));
            });
        }
        refused.map_or(Ok(()), Err)
    }
}

impl Limiter for TwinProcess {
    fn acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            self.twin
                .reserve_for(Some(&self.lessons), weight, Bounds::default())
                .await
                .map(|_| ())
        })
    }

    fn try_acquire(&self, weight: u64) -> BoxFuture<'_, Result<(), Error>> {
        let first = if weight == 0 {
            Vec::new()
        } else {
            self.lessons.take()
        };
        Box::pin(std::future::ready(self.twin.try_after(&first, weight)))
    }

    /// `Core::adjust`: written now, after the lessons still waiting.
    fn adjust(&self, adjustment: Adjustment) -> BoxFuture<'_, Result<(), Error>> {
        let result = self.twin.adjust_after(self.lessons.take(), adjustment);
        Box::pin(std::future::ready(result))
    }

    fn learn(&self, adjustments: Vec<Adjustment>) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(std::future::ready(self.learn_now_or_later(adjustments)))
    }

    fn acquire_within(&self, weight: u64, bounds: Bounds) -> BoxFuture<'_, Result<Grant, Error>> {
        Box::pin(self.twin.reserve_for(Some(&self.lessons), weight, bounds))
    }
}

/// `shared::Lessons`: what a process's responses taught and the shared
/// bucket does not have yet.
#[derive(Debug, Default)]
pub struct Lessons {
    state: Mutex<LessonsState>,
}

#[derive(Debug, Default)]
struct LessonsState {
    /// The operations, each with the instant it names where it names one
    /// (a window's end), counted from when it is sent.
    ops: Vec<(Op, Option<Instant>)>,
    /// The sender armed to send them on their own, by its number; none
    /// once a call carried them.
    sender: Option<u64>,
    senders: u64,
    /// When the soonest of this process's sleeping turns wakes to look.
    next_look: Option<Instant>,
}

impl LessonsState {
    fn take(&mut self) -> Vec<Op> {
        self.sender = None;
        self.ops
            .drain(..)
            .map(|(op, at)| match (op, at) {
                (Op::Edge { leap, .. }, Some(at)) => Op::Edge {
                    for_ns: nanos_until(at),
                    leap,
                },
                (op, _) => op,
            })
            .collect()
    }
}

impl Lessons {
    fn lock(&self) -> MutexGuard<'_, LessonsState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep `spelled` for a call to carry; the number of the sender to
    /// arm, when none is armed.
    fn keep(&self, spelled: &[(Adjustment, Op)]) -> Option<u64> {
        let mut state = self.lock();
        state
            .ops
            .extend(spelled.iter().map(|&(adjustment, op)| match adjustment {
                Adjustment::WindowEndsBy(at) => (op, Some(at)),
                _ => (op, None),
            }));
        if state.sender.is_some() {
            return None;
        }
        state.senders += 1;
        state.sender = Some(state.senders);
        state.sender
    }

    /// Every lesson waiting, for a call to carry: the armed sender stands
    /// down.
    fn take(&self) -> Vec<Op> {
        self.lock().take()
    }

    /// What sender `number` sends when it wakes: nothing once a call
    /// carried the lessons it was armed for.
    fn take_for(&self, number: u64) -> Vec<Op> {
        let mut state = self.lock();
        if state.sender == Some(number) {
            state.take()
        } else {
            Vec::new()
        }
    }

    /// When the lessons waiting now go on their own: shortly, or just
    /// after the next look, if that comes within
    /// [`LESSONS_WAIT_AT_MOST`].
    fn send_at(&self, now: Instant) -> Instant {
        let soon = now + SEND_LESSONS_AFTER;
        match self.lock().next_look {
            Some(look) if look > now && look <= now + LESSONS_WAIT_AT_MOST => {
                soon.max(look + SEND_LESSONS_AFTER)
            }
            _ => soon,
        }
    }

    /// A turn of this process sleeps until `due`, then looks.
    fn sleeps_until(&self, due: Instant, now: Instant) {
        let mut state = self.lock();
        state.next_look = Some(match state.next_look {
            Some(look) if look > now => look.min(due),
            _ => due,
        });
    }
}
