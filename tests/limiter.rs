//! Behaviour of the token bucket's waiting, on tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_pace::{Error, RequestRate, TokenBucket};
use tokio::time::Instant;

fn empty_bucket(per_second: u64, capacity: u64) -> Arc<TokenBucket> {
    Arc::new(
        TokenBucket::with_initial(RequestRate::per_second(per_second).unwrap(), capacity, 0)
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_thousand_waiters_at_100_per_second_take_ten_seconds_in_fifo_order() {
    let bucket = empty_bucket(100, 1);
    let start = Instant::now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..1000u32 {
        let bucket = Arc::clone(&bucket);
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            bucket.acquire(1).await.unwrap();
            order.lock().unwrap().push((i, start.elapsed()));
        }));
        // Let each task enqueue before the next is spawned, so arrival order
        // is the spawn order.
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    let order = order.lock().unwrap();
    for (pos, (i, at)) in order.iter().enumerate() {
        assert_eq!(*i as usize, pos, "served out of order");
        assert_eq!(*at, Duration::from_millis(10 * (pos as u64 + 1)));
    }
}

/// tokio's timer fires on whole milliseconds: a bucket of one whose
/// interval is not a whole number of them (137/s, 7.3 ms) still admits at
/// its rate, never faster, instead of at one per 8 ms (125/s).
#[tokio::test(start_paused = true)]
async fn a_rate_between_whole_milliseconds_is_kept_exactly() {
    let bucket = empty_bucket(137, 1);
    let start = Instant::now();
    let mut at = Vec::new();
    for _ in 0..1370 {
        bucket.acquire(1).await.unwrap();
        at.push(start.elapsed());
    }
    // The 1370th token is earned at exactly 10 s; the timer fires within a
    // millisecond of it.
    let last = at[at.len() - 1];
    assert!(last >= Duration::from_secs(10), "{last:?}");
    assert!(last <= Duration::from_millis(10_001), "{last:?}");
    // Never two admissions closer than the whole milliseconds below the
    // interval, and never ahead of the rate.
    for (k, t) in at.iter().enumerate() {
        let earned = Duration::from_secs_f64((k + 1) as f64 / 137.0);
        assert!(
            *t + Duration::from_nanos(1) >= earned,
            "{k}: {t:?} before {earned:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_half_the_waiters_does_not_slow_the_others() {
    let bucket = empty_bucket(100, 1);
    let start = Instant::now();
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for i in 0..200u32 {
        let b = Arc::clone(&bucket);
        let task = tokio::spawn(async move {
            b.acquire(1).await.unwrap();
            start.elapsed()
        });
        tokio::task::yield_now().await;
        if i % 2 == 1 {
            dropped.push(task);
        } else {
            kept.push(task);
        }
    }
    // Half a second in: 50 admitted (25 of each group). Cancel the rest of
    // the odd ones.
    tokio::time::sleep(Duration::from_millis(505)).await;
    for t in &dropped {
        t.abort();
    }
    let mut done = Vec::new();
    for t in kept {
        done.push(t.await.unwrap());
    }
    // The first 50 went at 10 ms steps; the remaining 75 even ones follow at
    // the same rate with no gaps where the cancelled ones stood.
    assert_eq!(done[24], Duration::from_millis(490));
    assert_eq!(done[25], Duration::from_millis(510));
    assert_eq!(*done.last().unwrap(), Duration::from_millis(500 + 75 * 10));
    assert_eq!(bucket.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_head_passes_its_place_on_without_taking_tokens() {
    let bucket = empty_bucket(10, 1);
    let start = Instant::now();
    let head = {
        let b = Arc::clone(&bucket);
        tokio::spawn(async move { b.acquire(1).await })
    };
    tokio::task::yield_now().await;
    let next = {
        let b = Arc::clone(&bucket);
        tokio::spawn(async move {
            b.acquire(1).await.unwrap();
            start.elapsed()
        })
    };
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    head.abort();
    // The token that the head was waiting for goes to the next waiter.
    assert_eq!(next.await.unwrap(), Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_blocked_bucket_releases_waiters_at_its_rate_after_the_block() {
    let bucket = Arc::new(TokenBucket::new(RequestRate::per_second(10).unwrap(), 10).unwrap());
    let start = Instant::now();
    bucket.block_until(start + Duration::from_secs(3));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let b = Arc::clone(&bucket);
        tasks.push(tokio::spawn(async move {
            b.acquire(1).await.unwrap();
            start.elapsed()
        }));
        tokio::task::yield_now().await;
    }
    let mut at = Vec::new();
    for t in tasks {
        at.push(t.await.unwrap());
    }
    let expected: Vec<Duration> = (0..5)
        .map(|i| Duration::from_millis(3000 + 100 * i))
        .collect();
    assert_eq!(at, expected, "a full bucket must not burst after a block");
}

#[tokio::test(start_paused = true)]
async fn raising_the_rate_wakes_the_head_early() {
    let bucket = empty_bucket(1, 1);
    let start = Instant::now();
    let waiter = {
        let b = Arc::clone(&bucket);
        tokio::spawn(async move {
            b.acquire(1).await.unwrap();
            start.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // 100 ms of 1/s earned a tenth of a token; the other nine tenths take
    // 90 ms at 10/s, not the 900 ms the head was sleeping for.
    bucket.set_rate(RequestRate::per_second(10).unwrap());
    assert_eq!(waiter.await.unwrap(), Duration::from_millis(190));
}

#[tokio::test(start_paused = true)]
async fn lowering_the_rate_slows_the_waiting_head() {
    let bucket = empty_bucket(10, 1);
    let start = Instant::now();
    let waiter = {
        let b = Arc::clone(&bucket);
        tokio::spawn(async move {
            b.acquire(1).await.unwrap();
            start.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Half a token earned at 10/s; the other half takes 500 ms at 1/s.
    bucket.set_rate(RequestRate::per_second(1).unwrap());
    assert_eq!(waiter.await.unwrap(), Duration::from_millis(550));
}

#[tokio::test(start_paused = true)]
async fn weight_over_capacity_is_an_error_not_a_hang() {
    let bucket = TokenBucket::new(RequestRate::per_second(10).unwrap(), 4).unwrap();
    match bucket.acquire(5).await {
        Err(Error::WeightExceedsCapacity {
            weight: 5,
            capacity: 4,
            ..
        }) => {}
        other => panic!("unexpected {other:?}"),
    }
    assert!(matches!(
        bucket.try_acquire(5),
        Err(Error::WeightExceedsCapacity { .. })
    ));
    assert!(TokenBucket::new(RequestRate::per_second(10).unwrap(), 0).is_err());
}

#[tokio::test(start_paused = true)]
async fn try_acquire_does_not_barge_past_waiters() {
    let bucket = empty_bucket(10, 1);
    let b = Arc::clone(&bucket);
    let waiter = tokio::spawn(async move { b.acquire(1).await });
    tokio::task::yield_now().await;
    tokio::time::advance(Duration::from_millis(100)).await;
    // The token is there, but it belongs to the queued waiter.
    match bucket.try_acquire(1) {
        Err(Error::NotYet { wait, .. }) => assert_eq!(wait, Duration::from_millis(100)),
        other => panic!("unexpected {other:?}"),
    }
    waiter.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn weighted_waiters_are_served_in_order() {
    let bucket = empty_bucket(10, 5);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for weight in [5u64, 1, 3] {
        let b = Arc::clone(&bucket);
        tasks.push(tokio::spawn(async move {
            b.acquire(weight).await.unwrap();
            start.elapsed()
        }));
        tokio::task::yield_now().await;
    }
    let mut at = Vec::new();
    for t in tasks {
        at.push(t.await.unwrap());
    }
    assert_eq!(
        at,
        vec![
            Duration::from_millis(500),
            Duration::from_millis(600),
            Duration::from_millis(900)
        ]
    );
}

/// Several OS threads hammer one bucket on the real clock; the admitted
/// total never exceeds capacity + rate × elapsed.
/// A multi-thread runtime whose handle the hammering threads enter (the
/// bucket reads tokio's clock, here the real one).
fn real_clock_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

/// One OS thread per weight, each calling `try_acquire(weight)` on `bucket`
/// until `run_for` has passed since `start`; returns the tokens admitted.
fn hammer(
    rt: &tokio::runtime::Runtime,
    bucket: &Arc<TokenBucket>,
    weights: &[u64],
    start: std::time::Instant,
    run_for: Duration,
) -> Vec<std::thread::JoinHandle<u64>> {
    weights
        .iter()
        .map(|&weight| {
            let bucket = Arc::clone(bucket);
            let handle = rt.handle().clone();
            std::thread::spawn(move || {
                let _guard = handle.enter();
                // At least MIN_ATTEMPTS, however busy the machine (a thread
                // may be scheduled only after `run_for` has passed).
                let (mut admitted, mut attempts) = (0, 0);
                while attempts < MIN_ATTEMPTS || start.elapsed() < run_for {
                    if bucket.try_acquire(weight).is_ok() {
                        admitted += weight;
                    }
                    attempts += 1;
                }
                admitted
            })
        })
        .collect()
}

/// Attempts each hammering thread makes at the least.
const MIN_ATTEMPTS: u64 = 1_000;

/// Join the threads and check that they were admitted no more than
/// `capacity + rate × elapsed`, and not merely refused: the bucket starts
/// full and refuses only when empty, so the first `capacity` tokens of
/// every thread's attempts (at least `MIN_ATTEMPTS` each) are admitted,
/// whatever the machine's load. No floor depends on throughput.
fn assert_within_bound(
    threads: Vec<std::thread::JoinHandle<u64>>,
    start: std::time::Instant,
    capacity: u64,
    per_second: u64,
) {
    let got: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // Read the elapsed time after the last admission: the bound can only
    // grow with it.
    let elapsed = start.elapsed();
    let bound = capacity + (elapsed.as_nanos() as u64 * per_second) / 1_000_000_000;
    assert!(got <= bound, "admitted {got} > bound {bound}");
    // (Less one: a weight-2 attempt is refused with one token left.)
    assert!(got + 1 >= capacity, "admitted only {got}");
}

#[test]
fn threads_hammering_one_bucket_never_over_admit() {
    let rt = real_clock_runtime();
    let (per_second, capacity) = (20_000, 100);
    let bucket = Arc::new(rt.block_on(async {
        TokenBucket::new(RequestRate::per_second(per_second).unwrap(), capacity).unwrap()
    }));
    let start = std::time::Instant::now();
    let threads = hammer(
        &rt,
        &bucket,
        &[1, 1, 1, 1],
        start,
        Duration::from_millis(300),
    );
    assert_within_bound(threads, start, capacity, per_second);
}

/// Adjustments take the bucket's lock-free word back and re-arm it, over
/// and over, while other threads decide by compare-and-swap: no decision
/// may slip through with a stale state.
#[test]
fn adjustments_racing_lock_free_decisions_never_over_admit() {
    let rt = real_clock_runtime();
    let (per_second, capacity) = (20_000, 50);
    let rate = RequestRate::per_second(per_second).unwrap();
    let bucket = Arc::new(rt.block_on(async { TokenBucket::new(rate, capacity).unwrap() }));
    let start = std::time::Instant::now();
    let run_for = Duration::from_millis(300);
    let threads = hammer(&rt, &bucket, &[1, 2, 1], start, run_for);
    let adjuster = {
        let bucket = Arc::clone(&bucket);
        let handle = rt.handle().clone();
        std::thread::spawn(move || {
            let _guard = handle.enter();
            let mut adjustments = 0u64;
            while adjustments < MIN_ATTEMPTS || start.elapsed() < run_for {
                // None of these changes the bucket; each disarms and re-arms.
                bucket.set_rate(rate);
                bucket.limit_remaining(capacity);
                bucket.set_capacity(capacity).unwrap();
                assert!(bucket.available() <= capacity);
                adjustments += 1;
            }
            adjustments
        })
    };
    assert_within_bound(threads, start, capacity, per_second);
    adjuster.join().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_waiter_heavier_than_a_lowered_capacity_fails_and_frees_the_queue() {
    let bucket = empty_bucket(10, 8);
    let heavy = {
        let b = Arc::clone(&bucket);
        tokio::spawn(async move { b.acquire(8).await })
    };
    tokio::task::yield_now().await;
    let light = {
        let b = Arc::clone(&bucket);
        tokio::spawn(async move { b.acquire(1).await })
    };
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    bucket.set_capacity(4).unwrap();
    match heavy.await.unwrap() {
        Err(Error::WeightExceedsCapacity {
            weight: 8,
            capacity: 4,
            ..
        }) => {}
        other => panic!("unexpected {other:?}"),
    }
    // The light waiter behind it is served at the rate, not stuck.
    light.await.unwrap().unwrap();
    assert_eq!(bucket.waiting(), 0);
}

/// `try_acquire(1)` refuses from a published hint without the lock; its
/// waits must be the exact ones, through every kind of change.
#[tokio::test(start_paused = true)]
async fn lock_free_refusals_follow_every_change_exactly() {
    let bucket = TokenBucket::new(RequestRate::per_second(10).unwrap(), 1).unwrap();
    let wait = |b: &TokenBucket| match b.try_acquire(1) {
        Err(Error::NotYet { wait, .. }) => Some(wait),
        Ok(()) => None,
        Err(e) => panic!("unexpected {e:?}"),
    };
    assert_eq!(wait(&bucket), None);
    assert_eq!(wait(&bucket), Some(Duration::from_millis(100)));
    tokio::time::advance(Duration::from_millis(30)).await;
    assert_eq!(wait(&bucket), Some(Duration::from_millis(70)));
    // 0.7 of a token still owed, at 20/s: 35 ms.
    bucket.set_rate(RequestRate::per_second(20).unwrap());
    assert_eq!(wait(&bucket), Some(Duration::from_millis(35)));
    let until = Instant::now() + Duration::from_secs(1);
    bucket.block_until(until);
    assert_eq!(wait(&bucket), Some(Duration::from_secs(1)));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(wait(&bucket), None);
    // A heavier weight takes the locked path and is just as exact.
    bucket.set_capacity(3).unwrap();
    match bucket.try_acquire(3) {
        Err(Error::NotYet { wait, .. }) => assert_eq!(wait, Duration::from_millis(150)),
        other => panic!("unexpected {other:?}"),
    }
}
