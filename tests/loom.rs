//! A model check of the token bucket's lock-free path: every interleaving
//! (up to loom's preemption bound) of decisions made by compare-and-swap on
//! the armed word with the lock that takes the word back, adjusts the
//! bucket and arms it again.
//!
//! Built only with the `pace_loom` cfg, which swaps the limiter's mutex and
//! atomics for loom's:
//!
//! ```text
//! RUSTFLAGS="--cfg pace_loom" CARGO_TARGET_DIR=target/loom \
//!     cargo test --release --test loom
//! ```
//!
//! The rate is one token an hour, so no token is earned while a model runs:
//! every bucket below is decided at one instant as far as its arithmetic
//! can tell, and the counts are exact.
#![cfg(pace_loom)]

use std::sync::atomic::{AtomicU64, Ordering};

use loom::sync::Arc;
use loom::thread;
use reqwest_pace::{RequestRate, TokenBucket};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

fn hourly(capacity: u64) -> Arc<TokenBucket> {
    let rate = RequestRate::per_hour(1).expect("one an hour is a rate");
    Arc::new(TokenBucket::new(rate, capacity).expect("a capacity above zero"))
}

/// `tries` single-token calls on another thread; returns how many were
/// admitted.
fn taker(bucket: &Arc<TokenBucket>, tries: u64) -> thread::JoinHandle<u64> {
    let bucket = bucket.clone();
    thread::spawn(move || {
        (0..tries)
            .map(|_| u64::from(bucket.try_acquire(1).is_ok()))
            .sum()
    })
}

/// Two threads decide by compare-and-swap while a third takes the lock
/// (an adjustment that changes nothing, so the word is armed again as it
/// is released). Every token is admitted once: three calls on a bucket of
/// two admit exactly two, and the bucket then holds none. A lock that read
/// the word instead of taking it back, or armed it again from a stale
/// state, would lose a decision and admit three.
#[test]
fn compare_and_swap_and_the_lock_admit_each_token_once() {
    model(|| {
        let bucket = hourly(2);
        let a = taker(&bucket, 2);
        let b = taker(&bucket, 1);
        bucket.set_capacity(2).expect("above zero");
        let admitted = a.join().expect("thread a") + b.join().expect("thread b");
        assert_eq!(admitted, 2);
        assert_eq!(bucket.available(), 0);
    });
}

/// A rate change takes the word back for good (the bucket is no longer the
/// one the word was armed for): decisions on either side of it still admit
/// exactly what the bucket held. The new rate is slower, so a word armed
/// again and decided with the old interval would refuse a token the bucket
/// still has (a token's deficit, scaled to a day, no longer fits an hour's
/// span).
#[test]
fn a_rate_change_racing_compare_and_swap_admits_each_token_once() {
    model(|| {
        let bucket = hourly(2);
        let a = taker(&bucket, 2);
        let b = taker(&bucket, 1);
        let daily = RequestRate::every(std::time::Duration::from_secs(86_400)).expect("a rate");
        bucket.set_rate(daily);
        let admitted = a.join().expect("thread a") + b.join().expect("thread b");
        assert_eq!(admitted, 2);
        assert_eq!(bucket.available(), 0);
    });
}

/// A server's "remaining: 0" racing the lock-free path: whatever was
/// admitted before it, nothing is admitted after it, and nothing that was
/// admitted is given back.
#[test]
fn remaining_zero_racing_compare_and_swap_closes_the_bucket() {
    model(|| {
        let bucket = hourly(3);
        let after = Arc::new(AtomicU64::new(0));
        let a = taker(&bucket, 2);
        let closer = {
            let (bucket, after) = (bucket.clone(), after.clone());
            thread::spawn(move || {
                bucket.limit_remaining(0);
                after.store(u64::from(bucket.try_acquire(1).is_ok()), Ordering::SeqCst);
            })
        };
        let admitted = a.join().expect("thread a");
        closer.join().expect("closer");
        assert_eq!(after.load(Ordering::SeqCst), 0);
        assert!(admitted <= 2);
        assert_eq!(bucket.available(), 0);
    });
}
