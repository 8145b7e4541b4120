//! The shared bucket's Lua script mirrors the Rust token bucket: driven
//! over seeded random sequences (rates, capacities, clock advances,
//! weights, reservations, blocks), the real script, run by `EVALSHA` on a
//! real `redis-server`, makes every decision the Rust [`Gcra`] makes, with
//! the same retry instant to the nanosecond, and keeps the same state;
//! bounded reservations (a latest grant, a longest block) refuse exactly
//! what the Rust bucket's answers say they must, and lifting a block
//! leaves the state `Gcra::unblock` leaves.
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

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Script;
use redis_support::RedisServer;
use reqwest_pace::limiter::{Algorithm, Gcra};
use reqwest_pace::Rate;

/// The script the shared bucket runs, as it is shipped.
const TOKEN_BUCKET: &str = include_str!("../src/redis/lua/token_bucket.lua");

/// A `t` (microseconds since 1970) after any real `TIME` (about the year
/// 2255) and still an exact integer in a Lua number.
const FUTURE_US: u64 = 9_000_000_000_000_000;

const KEY: &str = "mirror";

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
    let rate = Rate::every(Duration::from_nanos(interval)).expect("a rate");
    assert_eq!(rate.interval_nanos(), interval);
    let initial = seq.range(0, capacity);
    let mut gcra = Gcra::new(rate, capacity, initial);
    let mut bucket = (interval, capacity);
    let mut now = 0u64;
    let _: i64 = redis::cmd("DEL")
        .arg(KEY)
        .query_async(conn)
        .await
        .expect("DEL");
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
        store(conn, bucket, d.saturating_sub(advance), block_left).await;
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
                if faster < interval {
                    let rate = Rate::every(Duration::from_nanos(faster)).expect("a rate");
                    gcra.set_rate(now, rate);
                    interval = faster;
                    bucket = (interval, capacity);
                    seen.grown += 1;
                }
            }
            Step::Rate(t) => {
                let reply = call(conn, script, bucket, "rate", [t, 0, 0]).await;
                assert_eq!(reply, vec![3, 0], "{at}");
                gcra.set_rate(now, Rate::every(Duration::from_nanos(t)).expect("a rate"));
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

#[tokio::test(flavor = "current_thread")]
async fn the_script_decides_as_the_rust_bucket_over_random_sequences() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).expect("a Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let script = Script::new(TOKEN_BUCKET);
    let mut seen = Seen::default();
    for seed in 0..400 {
        mirror(&mut conn, &script, seed, 40, &mut seen).await;
    }
    eprintln!("{seen:?}");
    for (outcome, count) in [
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
    ] {
        assert!(count >= 50, "only {count} steps {outcome}: {seen:?}");
    }
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
