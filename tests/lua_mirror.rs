//! The shared bucket's Lua script mirrors the Rust token bucket: driven
//! over seeded random sequences (rates, capacities, clock advances,
//! weights, reservations, blocks), the real script, run by `EVALSHA` on a
//! real `redis-server`, makes every decision the Rust [`Gcra`] makes, with
//! the same retry instant to the nanosecond, and keeps the same state;
//! bounded reservations (a latest grant, a longest block) refuse exactly
//! what the Rust bucket's answers say they must, and lifting a block
//! leaves the state `Gcra::unblock` leaves.
//!
//! Rate changes part from `Gcra` where turns are booked beyond one bucket:
//! the script keeps them where they are, for the waiters of every process
//! that sleep until them, and counts only the bucket behind the last of
//! them at the new rate; `Gcra` has no booked turns (the local bucket
//! queues its waiters and admits them when they wake) and rescales its
//! whole deficit. A sequence that changes the rate with turns booked checks
//! the script's state against that arithmetic and ends there, the two
//! buckets no longer the same.
//!
//! The fleet tests on the paused clock share a twin of the script in
//! process (`tests/twin_support`): driven over seeded random sequences of
//! every operation `RedisTokenBucket` sends (reservations within bounds,
//! refunds, rates, growth, cuts, capacities, remaining counts, blocks and
//! their lifting, uncounting) and clock advances long enough for keys to
//! expire, the twin gives the script's every reply and keeps its hash
//! field for field, with the same lifetime for the key.
//!
//! The script reads the clock with Redis `TIME`, which a test cannot set.
//! It counts time from the instant stored with the state (`t`), and a clock
//! that steps back counts as no time passed: so before each call the test
//! stores a `t` far in the future, and the script decides at exactly the
//! instant the stored state describes. The test advances that instant
//! itself, by taking the time elapsed off the stored deficit and block as
//! the script would.
#![cfg(feature = "redis")]

mod redis_support;
mod twin_support;

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Script;
use redis_support::RedisServer;
use reqwest_pace::limiter::{Algorithm, Gcra};
use reqwest_pace::RequestRate;
use twin_support::{Op as TwinOp, Reply, Script as Twin};

/// The script the shared bucket runs, as it is shipped.
const TOKEN_BUCKET: &str = include_str!("../src/redis/lua/token_bucket.lua");

/// A `t` (microseconds since 1970) after any real `TIME` (about the year
/// 2255) and still an exact integer in a Lua number.
const FUTURE_US: u64 = 9_000_000_000_000_000;

const KEY: &str = "mirror";

/// `key` gone, as if never written.
async fn clear(conn: &mut MultiplexedConnection, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("DEL");
}

/// Every outcome a random sequence was meant to reach came up at least
/// 50 times (`seen` is the tally, printed on failure).
fn assert_each_seen(outcomes: &[(&str, u64)], seen: &impl std::fmt::Debug) {
    for &(outcome, count) in outcomes {
        assert!(count >= 50, "only {count} steps {outcome}: {seen:?}");
    }
}

/// A small seeded generator (splitmix64), so that a failure names its seed.
struct Seq(u64);

impl Seq {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// "No bound", as the script reads a bound in nanoseconds.
const UNBOUNDED: u64 = 1 << 62;

/// One call of the script on the bucket's key, with its three operands.
async fn call(
    conn: &mut MultiplexedConnection,
    script: &Script,
    bucket: (u64, u64),
    op: &str,
    operands: [u64; 3],
) -> Vec<i64> {
    let (interval, capacity) = bucket;
    script
        .key(KEY)
        .arg(op)
        .arg(60_000)
        .arg(interval)
        .arg(capacity)
        .arg(operands[0])
        .arg(operands[1])
        .arg(operands[2])
        .invoke_async(conn)
        .await
        .expect("the script runs")
}

/// `try` or `reserve` of `weight` with no bound.
fn take(weight: u64) -> [u64; 3] {
    [weight, UNBOUNDED, UNBOUNDED]
}

/// The stored deficit and block left (`d`, `b`), in nanoseconds.
async fn stored(conn: &mut MultiplexedConnection) -> (u64, u64) {
    let (d, b): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
        .arg(KEY)
        .arg("d")
        .arg("b")
        .query_async(conn)
        .await
        .expect("HMGET");
    (d.unwrap_or(0), b.unwrap_or(0))
}

/// Store the state the script will decide on: `d` and `b` as given, `t`
/// in the future (so no time passes for the script), `T` and `C`.
async fn store(conn: &mut MultiplexedConnection, bucket: (u64, u64), d: u64, b: u64) {
    let (interval, capacity) = bucket;
    let _: i64 = redis::cmd("HSET")
        .arg(KEY)
        .arg("t")
        .arg(FUTURE_US)
        .arg("d")
        .arg(d)
        .arg("b")
        .arg(b)
        .arg("T")
        .arg(interval)
        .arg("C")
        .arg(capacity)
        .query_async(conn)
        .await
        .expect("HSET");
}

/// What a sequence is made of.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `try` with this weight.
    Try(u64),
    /// `reserve` with this weight.
    Reserve(u64),
    /// `reserve` with this weight, booking no later than `max_wait` from
    /// now and waiting out no block longer than `max_block`.
    ReserveWithin {
        weight: u64,
        max_wait: u64,
        max_block: u64,
    },
    /// `block` for this many nanoseconds from now.
    Block(u64),
    /// `unblock`.
    Unblock,
    /// `grow` by this many millionths, to at most one token per `at_most`
    /// ns.
    Grow { ppm: u64, at_most: u64 },
    /// `rate`: one token per this many ns.
    Rate(u64),
}

/// A time per token and a capacity whose refill stays well within what a
/// Lua number holds exactly (2^40 ns, under 20 minutes), so that a
/// sequence's booked reservations do too.
fn bucket_params(seq: &mut Seq) -> (u64, u64) {
    let interval = match seq.range(0, 3) {
        0 => seq.range(1, 1_000),
        1 => seq.range(1_000, 1_000_000),
        2 => seq.range(1_000_000, 1_000_000_000),
        _ => 1_000_000 * seq.range(1, 1_000),
    };
    let capacity = match seq.range(0, 2) {
        0 => 1,
        1 => seq.range(1, 10),
        _ => seq.range(1, 1_000),
    };
    (interval, capacity.min((1 << 40) / interval).max(1))
}

fn step(seq: &mut Seq, interval: u64, capacity: u64) -> Step {
    let weight = if seq.range(0, 19) == 0 {
        // Now and then more than the bucket holds.
        capacity + seq.range(1, 3)
    } else {
        seq.range(1, capacity)
    };
    match seq.range(0, 25) {
        0..=11 => Step::Try(weight),
        12..=16 => Step::Reserve(weight),
        17..=19 => Step::ReserveWithin {
            weight,
            max_wait: seq.range(0, 2 * capacity * interval),
            max_block: seq.range(0, 2 * capacity * interval),
        },
        20 => Step::Unblock,
        22 => Step::Rate(seq.range(1, 4 * interval)),
        21 => Step::Grow {
            ppm: seq.range(1_000_000, 3_000_000),
            at_most: seq.range(1, 2 * interval),
        },
        _ => Step::Block(seq.range(0, 3 * capacity * interval)),
    }
}

/// How often each outcome came up, so that the test shows it met them all.
#[derive(Debug, Default)]
struct Seen {
    admitted: u64,
    refused: u64,
    refused_in_a_block: u64,
    booked_later: u64,
    too_heavy: u64,
    refused_past_the_bound: u64,
    held_by_a_block: u64,
    unblocked: u64,
    grown: u64,
    rate_changed: u64,
    rate_changed_with_turns_booked: u64,
}

/// Run one sequence; panics with its seed and step on the first mismatch.
async fn mirror(
    conn: &mut MultiplexedConnection,
    script: &Script,
    seed: u64,
    steps: usize,
    seen: &mut Seen,
) {
    let mut seq = Seq(seed);
    let (mut interval, capacity) = bucket_params(&mut seq);
    let rate = RequestRate::every(Duration::from_nanos(interval)).expect("a rate");
    assert_eq!(rate.interval_nanos(), interval);
    let initial = seq.range(0, capacity);
    let mut gcra = Gcra::new(rate, capacity, initial);
    let mut bucket = (interval, capacity);
    let mut now = 0u64;
    clear(conn, KEY).await;
    store(conn, bucket, (capacity - initial) * interval, 0).await;
    for i in 0..steps {
        // Advance the clock: often not at all, else up to three refills.
        let advance = match seq.range(0, 3) {
            0 => 0,
            1 => seq.range(0, interval),
            _ => seq.range(0, 3 * interval * capacity),
        };
        now += advance;
        let (d, b) = stored(conn).await;
        let block_left = b.saturating_sub(advance);
        let owed = d.saturating_sub(advance);
        store(conn, bucket, owed, block_left).await;
        // Past the block, what is owed beyond one bucket: turns booked.
        let booked = owed
            .saturating_sub(block_left)
            .saturating_sub(capacity * interval);
        let step = step(&mut seq, interval, capacity);
        let at =
            format!("seed {seed}, step {i}: {step:?} at {now} ns on T {interval} ns, C {capacity}");
        match step {
            Step::Try(w) | Step::Reserve(w) | Step::ReserveWithin { weight: w, .. }
                if w > capacity =>
            {
                let op = if matches!(step, Step::Try(_)) {
                    "try"
                } else {
                    "reserve"
                };
                let reply = call(conn, script, bucket, op, take(w)).await;
                assert_eq!(reply, vec![2, capacity as i64], "{at}");
                seen.too_heavy += 1;
            }
            Step::Try(w) => {
                let reply = call(conn, script, bucket, "try", take(w)).await;
                match gcra.try_admit(now, w) {
                    Ok(()) => {
                        assert_eq!(&reply[..2], &[0, 0], "{at}: Rust admits");
                        seen.admitted += 1;
                    }
                    Err(ready) => {
                        assert_eq!(reply, vec![1, (ready - now) as i64], "{at}: Rust refuses");
                        seen.refused += 1;
                        seen.refused_in_a_block += u64::from(block_left > 0);
                    }
                }
            }
            Step::Reserve(w) => {
                let reply = call(conn, script, bucket, "reserve", take(w)).await;
                let ready = gcra.earliest(now, w);
                seen.booked_later += u64::from(ready > now);
                assert_eq!(
                    &reply[..2],
                    &[0, (ready - now) as i64],
                    "{at}: the turn booked"
                );
                assert_eq!(
                    gcra.try_admit(ready, w),
                    Ok(()),
                    "{at}: admitted at its turn"
                );
            }
            Step::ReserveWithin {
                weight: w,
                max_wait,
                max_block,
            } => {
                let reply = call(conn, script, bucket, "reserve", [w, max_wait, max_block]).await;
                let ready = gcra.earliest(now, w);
                if block_left > max_block {
                    // Held, with what asked for the block (the mirror's
                    // blocks name status 429, a Retry-After: 858).
                    let cause = if block_left > 0 { 858 } else { 0 };
                    assert_eq!(reply, vec![4, block_left as i64, cause], "{at}");
                    seen.held_by_a_block += 1;
                } else if ready - now > max_wait {
                    assert_eq!(reply, vec![1, (ready - now) as i64], "{at}: past the bound");
                    seen.refused_past_the_bound += 1;
                } else {
                    assert_eq!(&reply[..2], &[0, (ready - now) as i64], "{at}");
                    assert_eq!(gcra.try_admit(ready, w), Ok(()), "{at}");
                }
            }
            Step::Block(u) => {
                let reply = call(conn, script, bucket, "block", [u, 858, 0]).await;
                assert_eq!(reply, vec![3, 0], "{at}");
                gcra.block_until(now, now + u);
            }
            Step::Grow { ppm, at_most } => {
                let reply = call(conn, script, bucket, "grow", [ppm, at_most, 0]).await;
                assert_eq!(reply, vec![3, 0], "{at}");
                // The faster of the two, never slower than now: the same
                // time per token as the script's, and Gcra's rate change.
                let faster = (interval * 1_000_000 / ppm).max(at_most).max(1);
                if faster < interval && booked > 0 {
                    kept_turns(conn, (owed, block_left), bucket, faster, &at).await;
                    seen.rate_changed_with_turns_booked += 1;
                    return;
                }
                if faster < interval {
                    let rate = RequestRate::every(Duration::from_nanos(faster)).expect("a rate");
                    gcra.set_rate(now, rate);
                    interval = faster;
                    bucket = (interval, capacity);
                    seen.grown += 1;
                }
            }
            Step::Rate(t) => {
                let reply = call(conn, script, bucket, "rate", [t, 0, 0]).await;
                assert_eq!(reply, vec![3, 0], "{at}");
                if booked > 0 {
                    kept_turns(conn, (owed, block_left), bucket, t, &at).await;
                    seen.rate_changed_with_turns_booked += 1;
                    return;
                }
                gcra.set_rate(
                    now,
                    RequestRate::every(Duration::from_nanos(t)).expect("a rate"),
                );
                interval = t;
                bucket = (interval, capacity);
                seen.rate_changed += 1;
            }
            Step::Unblock => {
                let reply = call(conn, script, bucket, "unblock", [0, 0, 0]).await;
                assert_eq!(reply, vec![3, 0], "{at}");
                seen.unblocked += u64::from(block_left > 0);
                gcra.unblock(now);
            }
        }
        // The same state: when the whole bucket is back (or the block is
        // over, whichever is later), counted from now.
        let (d, b) = stored(conn).await;
        assert_eq!(
            d.max(b),
            gcra.earliest(now, capacity) - now,
            "{at}: the state after the step"
        );
    }
}

/// After a rate change from `(d, b)` on `bucket` to one token per `to` ns,
/// with turns booked beyond one bucket: they are kept, and the bucket
/// behind them is scaled.
async fn kept_turns(
    conn: &mut MultiplexedConnection,
    (d, b): (u64, u64),
    bucket: (u64, u64),
    to: u64,
    at: &str,
) {
    let (interval, capacity) = bucket;
    let span = capacity * interval;
    let booked = d - b - span;
    let scaled = (u128::from(span) * u128::from(to) / u128::from(interval)) as u64;
    let (after, _) = stored(conn).await;
    assert_eq!(
        after,
        b + booked + scaled.min(1 << 52),
        "{at}: the booked turns kept"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_script_decides_as_the_rust_bucket_over_random_sequences() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let script = Script::new(TOKEN_BUCKET);
    let mut seen = Seen::default();
    for seed in 0..400 {
        mirror(&mut conn, &script, seed, 40, &mut seen).await;
    }
    eprintln!("{seen:?}");
    assert_each_seen(
        &[
            ("admitted", seen.admitted),
            ("refused", seen.refused),
            ("refused in a block", seen.refused_in_a_block),
            ("booked for later", seen.booked_later),
            ("over the capacity", seen.too_heavy),
            ("refused past the bound", seen.refused_past_the_bound),
            ("held by a block", seen.held_by_a_block),
            ("unblocked", seen.unblocked),
            ("grown", seen.grown),
            ("rate changed", seen.rate_changed),
            (
                "rate changed with turns booked",
                seen.rate_changed_with_turns_booked,
            ),
        ],
        &seen,
    );
    // Every call above went by EVALSHA: the script is loaded once, by the
    // first call's NOSCRIPT fallback.
    let exists: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(script.get_hash())
        .query_async(&mut conn)
        .await
        .expect("SCRIPT EXISTS");
    assert_eq!(exists, vec![1]);
}

/// The key the twin's sequences run on, apart from the mirror's.
const TWIN_KEY: &str = "twin";
/// The key lifetimes the twin's sequences send (ARGV[2], ARGV[8]): short
/// enough that long clock advances let keys expire.
const IDLE_MS: u64 = 60_000;
const LEARNED_MS: u64 = 600_000;

/// One call of the script on the twin's key, as `Core` sends it.
async fn call_as_core(
    conn: &mut MultiplexedConnection,
    script: &Script,
    twin: &Twin,
    op: TwinOp,
) -> Vec<i64> {
    let (name, operands) = op.script_args();
    let (per_token, capacity) = twin.defaults();
    script
        .key(TWIN_KEY)
        .arg(name)
        .arg(IDLE_MS)
        .arg(per_token)
        .arg(capacity)
        .arg(operands[0])
        .arg(operands[1])
        .arg(operands[2])
        .arg(LEARNED_MS)
        .invoke_async(conn)
        .await
        .expect("the script runs")
}

/// Give the script the key the twin holds at `now_us`: none once it has
/// expired, else its hash with what is owed and blocked counted from now
/// and `t` in the future (so that no time passes for the script).
async fn hand_over(conn: &mut MultiplexedConnection, twin: &Twin, now_us: u64) {
    let Some(hash) = twin.hash(now_us) else {
        clear(conn, TWIN_KEY).await;
        return;
    };
    let hash = hash.at(now_us);
    let _: i64 = redis::cmd("HSET")
        .arg(TWIN_KEY)
        .arg("t")
        .arg(FUTURE_US)
        .arg("d")
        .arg(hash.owed)
        .arg("b")
        .arg(hash.blocked)
        .arg("u")
        .arg(hash.block_end)
        .arg("v")
        .arg(hash.block_end_of)
        .arg("w")
        .arg(hash.window_end)
        .query_async(conn)
        .await
        .expect("HSET");
}

/// The hash's fields but `t` as the script left them (all `None` for no
/// key), and the key's time to live in milliseconds (negative for none).
async fn script_key(conn: &mut MultiplexedConnection) -> (Vec<Option<i64>>, i64) {
    let fields: Vec<Option<i64>> = redis::cmd("HMGET")
        .arg(TWIN_KEY)
        .arg(&[
            "d", "b", "T", "C", "n", "e", "a", "c", "L", "F", "u", "v", "w", "g",
        ])
        .query_async(conn)
        .await
        .expect("HMGET");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(TWIN_KEY)
        .query_async(conn)
        .await
        .expect("PTTL");
    (fields, ttl)
}

/// A random operation on a key of `per_token` and `capacity`, with the
/// reservations granted so far (`id`, weight) to refund one of.
fn twin_op(seq: &mut Seq, per_token: u64, capacity: u64, granted: &[(u64, u64)]) -> TwinOp {
    let weight = if seq.range(0, 19) == 0 {
        capacity + seq.range(1, 3)
    } else {
        seq.range(1, capacity)
    };
    let span = per_token * capacity;
    // Rates and capacities whose refill stays within 2^44 ns, where the
    // sequence's bookings stay exact in a Lua number.
    let most = 1u64 << 44;
    match seq.range(0, 31) {
        0..=7 => TwinOp::Try { weight },
        30..=31 => {
            // A turn woken after a block: late by up to a refill, past the
            // block's end or inside it.
            let (id, weight) = match granted.len() {
                0 => (seq.range(0, 5), weight),
                n => granted[n - 1 - (seq.range(0, 2) as usize).min(n - 1)],
            };
            let late = match seq.range(0, 2) {
                0 => 0,
                _ => seq.range(0, span),
            };
            TwinOp::Confirm { id, weight, late }
        }
        8..=11 => TwinOp::Reserve {
            weight,
            max_wait: UNBOUNDED,
            max_block: UNBOUNDED,
        },
        12..=13 => TwinOp::Reserve {
            weight,
            max_wait: seq.range(0, 2 * span),
            max_block: seq.range(0, 2 * span),
        },
        14 => TwinOp::Book {
            weight,
            max_wait: seq.range(0, 2 * span),
            max_block: seq.range(0, 2 * span),
        },
        15..=16 => {
            // The last reservation (its turn back when nothing was written
            // since), an earlier one, or an id never given.
            let (id, weight) = match granted.len() {
                0 => (seq.range(0, 5), weight),
                n => granted[n - 1 - (seq.range(0, 2) as usize).min(n - 1)],
            };
            TwinOp::Refund { id, weight }
        }
        17 => TwinOp::Rate {
            per_token: seq.range(1, 4 * per_token).min(most / capacity).max(1),
            too_fast: if seq.range(0, 1) == 0 {
                0
            } else {
                seq.range(1, 2 * per_token)
            },
        },
        18 => TwinOp::Grow {
            ppm: seq.range(1_000_000, 3_000_000),
            at_most: seq.range(1, 2 * per_token),
        },
        19 => TwinOp::Capacity(seq.range(0, 2 * capacity).min(most / per_token)),
        20 => TwinOp::Limit(seq.range(0, capacity + 2)),
        21 => TwinOp::Remaining(seq.range(0, capacity + 2)),
        22..=24 => TwinOp::Block {
            for_ns: seq.range(0, 3 * span),
            cause: [0, 858, 859, 1006][seq.range(0, 3) as usize],
        },
        25 => TwinOp::Unblock,
        26 => TwinOp::Edge {
            for_ns: seq.range(0, 3 * span),
            leap: seq.range(0, span),
        },
        _ => TwinOp::Uncount(seq.range(0, 2 * capacity)),
    }
}

/// How often each outcome came up in the twin's sequences.
#[derive(Debug, Default)]
struct TwinSeen {
    granted_now: u64,
    booked_later: u64,
    throttled: u64,
    held: u64,
    too_heavy: u64,
    turn_given_back: u64,
    refund_counted_only: u64,
    turn_stands: u64,
    confirmed_inside_a_block: u64,
    expired: u64,
    learned: u64,
    cut: u64,
}

/// Run one sequence on the twin and the script; panics with its seed and
/// step on the first difference.
async fn twin_agrees(
    conn: &mut MultiplexedConnection,
    script: &Script,
    seed: u64,
    steps: usize,
    seen: &mut TwinSeen,
) {
    let mut seq = Seq(seed);
    let (per_token, capacity) = bucket_params(&mut seq);
    let mut twin = Twin::new(per_token, capacity, IDLE_MS, LEARNED_MS);
    let mut now_us = seq.range(0, 1_000_000);
    let mut granted = Vec::new();
    let mut live = false;
    for i in 0..steps {
        let (per_token, capacity) = (twin.per_token(now_us), twin.capacity(now_us));
        let span_us = per_token * capacity / 1_000;
        now_us += match seq.range(0, 3) {
            0 => 0,
            1 => seq.range(0, per_token / 1_000 + 1),
            _ => seq.range(0, 3 * span_us + 1),
        };
        seen.expired += u64::from(live && twin.hash(now_us).is_none());
        hand_over(conn, &twin, now_us).await;
        let op = twin_op(&mut seq, per_token, capacity, &granted);
        let at = format!(
            "seed {seed}, step {i}: {op:?} at {now_us} us on {:?}",
            twin.hash(now_us)
        );
        let expected = twin.run(now_us, op);
        let reply = call_as_core(conn, script, &twin, op).await;
        assert_eq!(reply, expected.to_script(), "{at}: the reply");
        match expected {
            Reply::Granted {
                wait,
                id,
                interval,
                too_fast,
                ..
            } => {
                granted.push((id, op_weight(op)));
                seen.granted_now += u64::from(wait == 0);
                seen.booked_later += u64::from(wait > 0);
                seen.learned += u64::from(interval > 0);
                seen.cut += u64::from(too_fast > 0);
            }
            Reply::Throttled { .. } => seen.throttled += 1,
            Reply::Held { .. } => seen.held += 1,
            Reply::TooHeavy { .. } => seen.too_heavy += 1,
            Reply::Done(2) => seen.turn_stands += 1,
            Reply::Done(x) if matches!(op, TwinOp::Confirm { .. }) => {
                seen.confirmed_inside_a_block += 1;
                seen.turn_given_back += x;
            }
            Reply::Done(1) => seen.turn_given_back += 1,
            Reply::Done(_) => {
                seen.refund_counted_only += u64::from(matches!(op, TwinOp::Refund { .. }))
            }
        }
        let (fields, ttl) = script_key(conn).await;
        let hash = twin.hash(now_us);
        let expected_fields: Vec<Option<i64>> = match hash {
            // Counted from now, as the script's is: a refund that only
            // takes units off the count leaves what `hand_over` wrote.
            Some(h) => h.at(now_us).fields().map(Some).to_vec(),
            None => vec![None; 14],
        };
        assert_eq!(fields, expected_fields, "{at}: the hash after the step");
        // The key's lifetime where the script set it now, less the little
        // real time since (Redis counts it down on its own clock, which
        // the sequence does not move).
        match twin.ttl_ms(now_us) {
            Some(_) if hash.is_some_and(|h| h.t != now_us) => {}
            Some(expected) => assert!(
                ttl <= expected as i64 && ttl + 1_000 >= expected as i64,
                "{at}: lives {ttl} ms, the twin's {expected} ms"
            ),
            None => assert_eq!(ttl, -2, "{at}: no key"),
        }
        live = hash.is_some();
    }
}

fn op_weight(op: TwinOp) -> u64 {
    match op {
        TwinOp::Reserve { weight, .. } | TwinOp::Book { weight, .. } | TwinOp::Try { weight } => {
            weight
        }
        _ => 0,
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_fleet_tests_twin_answers_as_the_script_over_random_sequences() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let script = Script::new(TOKEN_BUCKET);
    let mut seen = TwinSeen::default();
    for seed in 0..400 {
        clear(&mut conn, TWIN_KEY).await;
        twin_agrees(&mut conn, &script, seed, 40, &mut seen).await;
    }
    eprintln!("{seen:?}");
    assert_each_seen(
        &[
            ("granted at once", seen.granted_now),
            ("booked for later", seen.booked_later),
            ("throttled", seen.throttled),
            ("held by a block", seen.held),
            ("over the capacity", seen.too_heavy),
            ("refunded with the turn back", seen.turn_given_back),
            ("refunded off the count only", seen.refund_counted_only),
            ("confirmed past a block", seen.turn_stands),
            ("confirmed inside a block", seen.confirmed_inside_a_block),
            ("expired", seen.expired),
            ("granted on a learned rate", seen.learned),
            ("granted after a cut", seen.cut),
        ],
        &seen,
    );
}

/// The key of the tests that pin a booked turn's instant.
const TURNS_KEY: &str = "turns";

/// One call of the script on [`TURNS_KEY`] at the instant its state
/// describes (its `t` moved to the future first, so that no time passes).
async fn at_rest(
    conn: &mut MultiplexedConnection,
    script: &Script,
    bucket: (u64, u64),
    op: &str,
    operands: [u64; 3],
) -> Vec<i64> {
    let _: i64 = redis::cmd("HSET")
        .arg(TURNS_KEY)
        .arg("t")
        .arg(FUTURE_US)
        .query_async(conn)
        .await
        .expect("HSET");
    script
        .key(TURNS_KEY)
        .arg(op)
        .arg(IDLE_MS)
        .arg(bucket.0)
        .arg(bucket.1)
        .arg(operands[0])
        .arg(operands[1])
        .arg(operands[2])
        .arg(LEARNED_MS)
        .invoke_async(conn)
        .await
        .expect("the script runs")
}

/// Let `ns` pass for the key, as the script counts time from `t`.
async fn pass(conn: &mut MultiplexedConnection, ns: i64) {
    let (d, b, u): (i64, i64, i64) = redis::cmd("HMGET")
        .arg(TURNS_KEY)
        .arg(&["d", "b", "u"])
        .query_async(conn)
        .await
        .expect("HMGET");
    let _: i64 = redis::cmd("HSET")
        .arg(TURNS_KEY)
        .arg("d")
        .arg((d - ns).max(0))
        .arg("b")
        .arg((b - ns).max(0))
        .arg("u")
        .arg(u - ns)
        .query_async(conn)
        .await
        .expect("HSET");
}

const MS: u64 = 1_000_000;

/// The wait a `reserve` of one token was booked for, in ms.
fn booked_ms(reply: &[i64]) -> i64 {
    assert_eq!(reply[0], 0, "granted: {reply:?}");
    reply[1] / MS as i64
}

/// A connection to `server`.
async fn connect(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection")
}

/// `n` turns of one token booked on `bucket`, in ms.
async fn book(
    conn: &mut MultiplexedConnection,
    script: &Script,
    bucket: (u64, u64),
    n: usize,
) -> Vec<i64> {
    let mut turns = Vec::new();
    for _ in 0..n {
        turns.push(booked_ms(
            &at_rest(conn, script, bucket, "reserve", take(1)).await,
        ));
    }
    turns
}

#[tokio::test(flavor = "current_thread")]
async fn a_rate_change_keeps_the_turns_booked_and_the_next_follows_the_last() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let script = Script::new(TOKEN_BUCKET);
    // A cut: turns at 0, 10 and 20 ms stay there; the next comes one new
    // interval (100 ms) after the last, at 120 ms, not after the rescaled
    // deficit (300 ms, with nothing sent from 20 ms on).
    let bucket = (10 * MS, 1);
    let turns = book(&mut conn, &script, bucket, 3).await;
    assert_eq!(turns, [0, 10, 20]);
    let reply = at_rest(&mut conn, &script, bucket, "rate", [100 * MS, 0, 0]).await;
    assert_eq!(reply, [3, 0]);
    let next = at_rest(&mut conn, &script, bucket, "reserve", take(1)).await;
    assert_eq!(booked_ms(&next), 120, "the next turn after a cut");
    // A raise: turns at 0, 100 and 200 ms; the next at 210 ms, not among
    // them at 30 ms.
    clear(&mut conn, TURNS_KEY).await;
    let bucket = (100 * MS, 1);
    let turns = book(&mut conn, &script, bucket, 3).await;
    assert_eq!(turns, [0, 100, 200]);
    let reply = at_rest(&mut conn, &script, bucket, "grow", [10_000_000, 10 * MS, 0]).await;
    assert_eq!(reply, [3, 0]);
    let next = at_rest(&mut conn, &script, bucket, "reserve", take(1)).await;
    assert_eq!(booked_ms(&next), 210, "the next turn after a raise");
    // A bucket of 4 holds its burst: with nothing booked, the tokens at
    // hand are kept whatever the rate.
    clear(&mut conn, TURNS_KEY).await;
    let bucket = (10 * MS, 4);
    for _ in 0..2 {
        at_rest(&mut conn, &script, bucket, "reserve", take(1)).await;
    }
    at_rest(&mut conn, &script, bucket, "rate", [100 * MS, 0, 0]).await;
    let reply = at_rest(&mut conn, &script, bucket, "try", take(2)).await;
    assert_eq!(&reply[..2], &[0, 0], "two tokens still at hand");
    let reply = at_rest(&mut conn, &script, bucket, "try", take(1)).await;
    assert_eq!(reply, [1, 100 * MS as i64], "then one per new interval");
}

#[tokio::test(flavor = "current_thread")]
async fn a_turn_booked_past_a_blocks_end_stands() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let script = Script::new(TOKEN_BUCKET);
    let bucket = (10 * MS, 1);
    // Turns at 0, 10, 20, 30 and 40 ms, ids 1 to 5.
    let mut ids = Vec::new();
    for _ in 0..5 {
        let reply = at_rest(&mut conn, &script, bucket, "reserve", take(1)).await;
        ids.push(reply[2] as u64);
    }
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    // A block until 25 ms, written at 5 ms.
    pass(&mut conn, 5 * MS as i64).await;
    let reply = at_rest(&mut conn, &script, bucket, "block", [20 * MS, 858, 0]).await;
    assert_eq!(reply, [3, 0]);
    // The turn at 10 ms falls inside the block: handed back (not the
    // key's last write, so off the count only) and booked again.
    pass(&mut conn, 5 * MS as i64).await;
    let reply = at_rest(&mut conn, &script, bucket, "confirm", [2, 1, 0]).await;
    assert_eq!(reply, [3, 0], "the turn at 10 ms");
    let again = at_rest(&mut conn, &script, bucket, "reserve", take(1)).await;
    assert_eq!(
        booked_ms(&again),
        40,
        "booked after the last turn, at 50 ms"
    );
    // The turn at 30 ms falls after the block's end (25 ms): it stands,
    // and its waiter goes, even woken 4 ms late.
    pass(&mut conn, 24 * MS as i64).await;
    let reply = at_rest(&mut conn, &script, bucket, "confirm", [4, 1, 4 * MS]).await;
    assert_eq!(reply, [3, 2], "the turn at 30 ms");
    // Woken 10 ms late, a turn due at 24 ms was inside it.
    let reply = at_rest(&mut conn, &script, bucket, "confirm", [4, 1, 10 * MS]).await;
    assert_eq!(reply, [3, 0], "a turn due at 24 ms");
    // Lifting a block drops every turn booked from the deficit: none
    // stands, not even one past the block's end.
    clear(&mut conn, TURNS_KEY).await;
    for _ in 0..5 {
        at_rest(&mut conn, &script, bucket, "reserve", take(1)).await;
    }
    at_rest(&mut conn, &script, bucket, "block", [5 * MS, 858, 0]).await;
    at_rest(&mut conn, &script, bucket, "unblock", [0, 0, 0]).await;
    pass(&mut conn, 30 * MS as i64).await;
    let reply = at_rest(&mut conn, &script, bucket, "confirm", [4, 1, 0]).await;
    assert_eq!(reply, [3, 0], "the turn at 30 ms, dropped by an unblock");
    // A block counted by a script that keeps no end (an older version's,
    // during an upgrade) may cover any turn: none stands.
    clear(&mut conn, TURNS_KEY).await;
    for _ in 0..5 {
        at_rest(&mut conn, &script, bucket, "reserve", take(1)).await;
    }
    at_rest(&mut conn, &script, bucket, "block", [5 * MS, 858, 0]).await;
    pass(&mut conn, 30 * MS as i64).await;
    let reply = at_rest(&mut conn, &script, bucket, "confirm", [4, 1, 0]).await;
    assert_eq!(reply, [3, 2], "the turn at 30 ms, past the block");
    let _: i64 = redis::cmd("HINCRBY")
        .arg(TURNS_KEY)
        .arg("e")
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("HINCRBY");
    let reply = at_rest(&mut conn, &script, bucket, "confirm", [4, 1, 0]).await;
    assert_eq!(
        reply,
        [3, 0],
        "the turn at 30 ms, after a block of unknown end"
    );
}

/// The adjustments a response can teach, with random operands scaled to a
/// bucket of `interval` ns per token and `capacity`.
fn adjustment(seq: &mut Seq, interval: u64, capacity: u64) -> (&'static str, [u64; 3]) {
    match seq.range(0, 8) {
        0 => (
            "rate",
            [seq.range(1, 4 * interval), 0, seq.range(0, 1) * interval],
        ),
        1 => (
            "grow",
            [
                seq.range(1_000_000, 3_000_000),
                seq.range(1, 2 * interval),
                0,
            ],
        ),
        2 => ("capacity", [seq.range(1, 2 * capacity), 0, 0]),
        3 => ("limit", [seq.range(0, capacity), 0, 0]),
        4 => ("remaining", [seq.range(0, capacity), 0, 0]),
        5 => (
            "block",
            [
                seq.range(0, 3 * capacity * interval),
                858 + seq.range(0, 1),
                0,
            ],
        ),
        6 => ("uncount", [seq.range(0, 3), 0, 0]),
        7 => (
            "edge",
            [
                seq.range(0, 3 * capacity * interval),
                seq.range(0, capacity * interval),
                0,
            ],
        ),
        _ => ("unblock", [0, 0, 0]),
    }
}

/// One call of `script` on `keys`: `op` and its operands, after the
/// adjustments `batch` (their count, then four arguments each), as `Core`
/// sends them.
async fn invoke(
    conn: &mut MultiplexedConnection,
    script: &Script,
    keys: &[&str],
    bucket: (u64, u64),
    (op, operands): (&str, [u64; 3]),
    batch: &[(&str, [u64; 3])],
) -> Vec<i64> {
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    call.arg(op).arg(IDLE_MS).arg(bucket.0).arg(bucket.1);
    call.arg(operands[0]).arg(operands[1]).arg(operands[2]);
    call.arg(LEARNED_MS);
    if !batch.is_empty() {
        call.arg(batch.len());
    }
    for (name, operands) in batch {
        call.arg(*name)
            .arg(operands[0])
            .arg(operands[1])
            .arg(operands[2]);
    }
    call.invoke_async(conn).await.expect("the script runs")
}

/// Every field of a hash but those named in `skip`, sorted.
async fn fields(
    conn: &mut MultiplexedConnection,
    key: &str,
    skip: &[&str],
) -> Vec<(String, String)> {
    let all: std::collections::BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HGETALL");
    all.into_iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .collect()
}

/// What responses teach is written in one call, on its own (`batch`) or
/// carried by the next reservation, and leaves the bucket exactly as the
/// same adjustments sent one by one before it: driven over seeded random
/// states, batches and carriers, with no time passing for the script (`t`
/// in the future before each call), the reservation gets the same answer
/// and every field is the same but the write counter, which a batch moves
/// once. A refused reservation still keeps the lessons it carried.
#[tokio::test(flavor = "current_thread")]
async fn a_batch_of_adjustments_leaves_the_bucket_as_the_same_sent_one_by_one() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let script = Script::new(TOKEN_BUCKET);
    let (one_by_one, batched) = ("one-by-one", "batched");
    let mut seq = Seq(19);
    // How often the carrier was a batch alone, a grant, a refusal.
    let mut seen = [0u32; 3];
    let carrier_index = |replies: &[Vec<i64>]| match replies.last().map(|r| r[0]) {
        Some(5) => 0,
        Some(0) => 1,
        _ => 2,
    };
    for trial in 0..400 {
        let bucket = bucket_params(&mut seq);
        let (interval, capacity) = bucket;
        clear(&mut conn, one_by_one).await;
        clear(&mut conn, batched).await;
        let start = seq.range(0, (2 * capacity).min(40));
        let mut batch = Vec::new();
        for _ in 0..seq.range(1, 6) {
            batch.push(adjustment(&mut seq, interval, capacity));
        }
        for key in [one_by_one, batched] {
            for _ in 0..start {
                freeze(&mut conn, key).await;
                invoke(
                    &mut conn,
                    &script,
                    &[key],
                    bucket,
                    ("reserve", take(1)),
                    &[],
                )
                .await;
            }
        }
        // The lessons on their own, or carried by a reservation (`try`,
        // `reserve` within bounds, or one too heavy for the bucket).
        let carrier = match seq.range(0, 3) {
            0 => ("batch", [0, 0, 0]),
            1 => ("try", take(seq.range(1, capacity))),
            2 => (
                "reserve",
                [
                    seq.range(1, capacity),
                    seq.range(0, 2 * capacity * interval),
                    seq.range(0, 2 * capacity * interval),
                ],
            ),
            _ => ("reserve", take(capacity + 1)),
        };
        for &step in &batch {
            freeze(&mut conn, one_by_one).await;
            let reply = invoke(&mut conn, &script, &[one_by_one], bucket, step, &[]).await;
            assert_eq!(reply, [3, 0], "trial {trial}: {step:?}");
        }
        let what = format!(
            "trial {trial}: {bucket:?} after {start} reservations, {batch:?}, then {carrier:?}"
        );
        let mut replies = Vec::new();
        if carrier.0 != "batch" {
            freeze(&mut conn, one_by_one).await;
            replies.push(invoke(&mut conn, &script, &[one_by_one], bucket, carrier, &[]).await);
        }
        freeze(&mut conn, batched).await;
        replies.push(invoke(&mut conn, &script, &[batched], bucket, carrier, &batch).await);
        if carrier.0 == "batch" {
            // Applied, with the block counter the lessons left.
            let e: i64 = redis::cmd("HGET")
                .arg(one_by_one)
                .arg("e")
                .query_async(&mut conn)
                .await
                .expect("HGET");
            assert_eq!(replies[0], [5, e], "{what}");
        } else {
            // The same decision; a grant's id (the write counter) aside.
            for reply in &mut replies {
                if reply[0] == 0 {
                    reply[2] = 0;
                }
            }
            assert_eq!(replies[0], replies[1], "{what}");
        }
        assert_eq!(
            fields(&mut conn, one_by_one, &["t", "n"]).await,
            fields(&mut conn, batched, &["t", "n"]).await,
            "{what}"
        );
        seen[carrier_index(&replies)] += 1;
    }
    assert!(seen.iter().all(|&n| n >= 20), "{seen:?}");
    // An unknown operation anywhere in a batch is refused before any is
    // applied.
    clear(&mut conn, batched).await;
    let bucket = (MS, 5);
    let bad = [("limit", [0, 0, 0]), ("nonsense", [0, 0, 0])];
    let mut call = script.prepare_invoke();
    call.key(batched)
        .arg("batch")
        .arg(IDLE_MS)
        .arg(bucket.0)
        .arg(bucket.1);
    call.arg(0).arg(0).arg(0).arg(LEARNED_MS).arg(2);
    for (name, operands) in bad {
        call.arg(name)
            .arg(operands[0])
            .arg(operands[1])
            .arg(operands[2]);
    }
    let refused: redis::RedisResult<Vec<i64>> = call.invoke_async(&mut conn).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(
        fields(&mut conn, batched, &[]).await.is_empty(),
        "nothing written"
    );
}

/// `t` far ahead for `key`, so that the script's next call sees no time
/// pass since the state was written.
async fn freeze(conn: &mut MultiplexedConnection, key: &str) {
    let _: i64 = redis::cmd("HSET")
        .arg(key)
        .arg("t")
        .arg(FUTURE_US)
        .query_async(conn)
        .await
        .expect("HSET");
}

/// The sliding log's script as it is shipped.
const SLIDING_LOG: &str = include_str!("../src/redis/lua/sliding_log.lua");

/// The same for the sliding log, whose state is in absolute times (Redis
/// `TIME`, which a test cannot hold still): over seeded random logs and
/// batches of the adjustments whose effect does not hang on the instant
/// (all but `remaining`, which drops what is older than now), a batch
/// leaves the same limit, counters, cause and members as the same
/// adjustments one by one, and a block's end within the time the calls
/// took apart.
#[tokio::test(flavor = "current_thread")]
async fn a_batch_of_adjustments_leaves_the_log_as_the_same_sent_one_by_one() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let script = Script::new(SLIDING_LOG);
    let keys =
        |name: &'static str| -> [String; 2] { [format!("{name}:log"), format!("{name}:meta")] };
    let mut seq = Seq(23);
    for trial in 0..200 {
        let limit = seq.range(1, 50);
        let window_us = 1_000_000 * seq.range(1, 10);
        let interval = window_us * 1_000 / limit;
        let mut batch = Vec::new();
        for _ in 0..seq.range(1, 6) {
            let (name, mut operands) = adjustment(&mut seq, interval, limit);
            match name {
                "remaining" | "capacity" => continue,
                // The largest count a rate or a growth may give.
                "rate" => operands[1] = 1_000,
                "grow" => operands[2] = 1_000,
                _ => {}
            }
            batch.push((name, operands));
        }
        if batch.is_empty() {
            // `Core` never sends an empty batch.
            continue;
        }
        let start = seq.range(0, limit);
        let mut states = Vec::new();
        let started = std::time::Instant::now();
        for (name, batched) in [("one-by-one", false), ("batched", true)] {
            let [log, meta] = keys(name);
            clear(&mut conn, &log).await;
            clear(&mut conn, &meta).await;
            let keys = [log.as_str(), meta.as_str()];
            let bucket = (limit, window_us);
            for _ in 0..start {
                invoke(&mut conn, &script, &keys, bucket, ("reserve", take(1)), &[]).await;
            }
            if batched {
                let count = batch.len() as u64;
                let reply = invoke(
                    &mut conn,
                    &script,
                    &keys,
                    bucket,
                    ("batch", [count, 0, 0]),
                    &batch,
                )
                .await;
                assert_eq!(reply[0], 5, "trial {trial}: {batch:?}");
            } else {
                for &step in &batch {
                    let reply = invoke(&mut conn, &script, &keys, bucket, step, &[]).await;
                    assert_eq!(reply, [3, 0], "trial {trial}: {step:?}");
                }
            }
            let members: Vec<String> = redis::cmd("ZRANGE")
                .arg(&log)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .expect("ZRANGE");
            let mut members = members;
            members.sort();
            let end: Option<u64> = redis::cmd("HGET")
                .arg(&meta)
                .arg("b")
                .query_async(&mut conn)
                .await
                .expect("HGET");
            states.push((
                fields(&mut conn, &meta, &["b"]).await,
                members,
                end.unwrap_or(0),
            ));
        }
        let took_us = started.elapsed().as_micros() as u64;
        let (one, both) = (&states[0], &states[1]);
        let what =
            format!("trial {trial}: {limit} per {window_us} us after {start} grants, {batch:?}");
        assert_eq!(one.0, both.0, "{what}");
        assert_eq!(one.1, both.1, "{what}");
        assert!(
            one.2.abs_diff(both.2) <= took_us,
            "{what}: blocks end at {} and {}",
            one.2,
            both.2
        );
    }
}

/// The turns of both scripts (the last figure of a grant): a refund takes
/// a turn back only with the latest grant's slot; a turn with a grant
/// behind it keeps its number, so that no two grants share one.
#[tokio::test(flavor = "current_thread")]
async fn a_refund_takes_a_turn_back_only_with_the_latest_grant() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let cases = [
        (TOKEN_BUCKET, ["turns:bucket"].to_vec(), (1_000_000, 10)),
        (
            SLIDING_LOG,
            ["turns:log", "turns:meta"].to_vec(),
            (10, 1_000_000),
        ),
    ];
    for (source, keys, bucket) in cases {
        let script = Script::new(source);
        let mut call =
            async |op: (&str, [u64; 3])| invoke(&mut conn, &script, &keys, bucket, op, &[]).await;
        let grant = |reply: Vec<i64>| {
            assert_eq!(reply[0], 0, "granted: {reply:?}");
            (reply[2] as u64, reply[7])
        };
        let (first, turns) = grant(call(("reserve", take(1))).await);
        assert_eq!(turns, 1);
        assert_eq!(grant(call(("reserve", take(1))).await).1, 2);
        // The first grant handed back, a grant behind it: its turn stays.
        call(("refund", [first, 1, 0])).await;
        let (latest, turns) = grant(call(("reserve", take(1))).await);
        assert_eq!(turns, 3, "{keys:?}");
        // The latest handed back: its turn goes with its slot.
        call(("refund", [latest, 1, 0])).await;
        assert_eq!(grant(call(("reserve", take(1))).await).1, 3, "{keys:?}");
    }
}

/// The field a key's hash holds, as an integer (0 for none).
async fn field(conn: &mut MultiplexedConnection, name: &str) -> i64 {
    let value: Option<i64> = redis::cmd("HGET")
        .arg(TURNS_KEY)
        .arg(name)
        .query_async(conn)
        .await
        .expect("HGET");
    value.unwrap_or(0)
}

/// The earliest end of a window any process read (`edge`) shortens a spent
/// quota's block to it, and nothing else: a tighter bound of the same
/// window replaces it, one more than the leap later is a later window's
/// (the earlier window ended with no block to shorten, and its bound is
/// no bound on this one), and a block for another cause keeps its length.
#[tokio::test(flavor = "current_thread")]
async fn a_window_end_read_by_any_process_ends_a_spent_quotas_block() {
    let server = RedisServer::start();
    let mut conn = connect(&server).await;
    let script = Script::new(TOKEN_BUCKET);
    let bucket = (10 * MS, 1);
    let leap = 500 * MS;
    let edge = |ns: u64| [ns, leap, 0];
    at_rest(&mut conn, &script, bucket, "edge", edge(2_000 * MS)).await;
    assert_eq!(field(&mut conn, "w").await, 2_000 * MS as i64);
    at_rest(&mut conn, &script, bucket, "edge", edge(1_800 * MS)).await;
    assert_eq!(
        field(&mut conn, "w").await,
        1_800 * MS as i64,
        "a tighter bound"
    );
    at_rest(&mut conn, &script, bucket, "edge", edge(2_200 * MS)).await;
    assert_eq!(
        field(&mut conn, "w").await,
        1_800 * MS as i64,
        "a looser one"
    );
    at_rest(&mut conn, &script, bucket, "edge", edge(3_000 * MS)).await;
    assert_eq!(
        field(&mut conn, "w").await,
        3_000 * MS as i64,
        "a later window's"
    );
    // A Retry-After's block (cause 858: a 429, no spent quota) keeps its
    // length; a spent quota's (859) ends at the window's end.
    at_rest(&mut conn, &script, bucket, "block", [1_000 * MS, 858, 0]).await;
    assert_eq!(field(&mut conn, "b").await, 1_000 * MS as i64);
    at_rest(&mut conn, &script, bucket, "block", [5_000 * MS, 859, 0]).await;
    assert_eq!(
        field(&mut conn, "b").await,
        3_000 * MS as i64,
        "ends at the window's end"
    );
    at_rest(&mut conn, &script, bucket, "block", [5_000 * MS, 858, 0]).await;
    assert_eq!(
        field(&mut conn, "b").await,
        5_000 * MS as i64,
        "a Retry-After is kept"
    );
}
