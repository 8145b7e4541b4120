//! The window limiters: their guarantees over every window position, exact
//! refusal instants, and FIFO waiting through `QueuedLimiter` on tokio's paused
//! clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use reqwest_pace::limiter::{
    Algorithm, FixedWindow, FixedWindowLimiter, Nanos, SlidingCounterLimiter, SlidingLog,
    SlidingLogLimiter, SlidingWindowCounter,
};
use reqwest_pace::{
    Adjustment, Error, KeyedLimiter, Limiter, QueuedLimiter, RequestRate, TokenBucket,
};
use tokio::time::Instant;

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The most weight admitted in any half-open window `[s, s + window)`.
/// Checking the windows that start at each admission is enough: any window
/// holds no more than the one starting at its own first admission.
fn max_in_any_window(admitted: &[(Nanos, u64)], window: Nanos) -> u64 {
    let mut sorted = admitted.to_vec();
    sorted.sort_by_key(|&(at, _)| at);
    let (mut end, mut sum, mut max) = (0, 0u64, 0u64);
    for (start, &(at, _)) in sorted.iter().enumerate() {
        while end < sorted.len() && sorted[end].0 < at.saturating_add(window) {
            sum += sorted[end].1;
            end += 1;
        }
        max = max.max(sum);
        sum -= sorted[start].1;
    }
    max
}

/// A deterministic stream of numbers (splitmix64), so traffic is repeatable.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------
// The guarantees, over every window position

#[tokio::test(start_paused = true)]
async fn the_fixed_window_admits_twice_its_limit_across_a_boundary() {
    let limit = RequestRate::per_minute(60).unwrap();
    let fixed = FixedWindowLimiter::fixed_window(limit).unwrap();
    let log = SlidingLogLimiter::sliding_log(limit).unwrap();
    let start = Instant::now();
    let mut admitted = Vec::new();

    tokio::time::advance(Duration::from_secs(59)).await;
    for _ in 0..60 {
        fixed.try_acquire(1).unwrap();
        log.try_acquire(1).unwrap();
        admitted.push((start.elapsed().as_nanos() as u64, 1));
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    for _ in 0..60 {
        fixed.try_acquire(1).unwrap();
        admitted.push((start.elapsed().as_nanos() as u64, 1));
    }
    // 120 within two seconds (0:59 to 1:00), twice the quota.
    assert_eq!(max_in_any_window(&admitted, 60 * S), 120);
    assert!(fixed.try_acquire(1).is_err());

    // The exact log refuses the 61st until the first of the 60 is a minute
    // old, and says so to the nanosecond.
    match log.try_acquire(1) {
        Err(Error::NotYet { wait, .. }) => assert_eq!(wait, Duration::from_secs(59)),
        other => panic!("unexpected {other:?}"),
    }
    log.acquire(60).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(119));
}

#[tokio::test(start_paused = true)]
async fn the_sliding_log_admits_at_most_n_in_every_window_under_contention() {
    let limit = RequestRate::per_second(10).unwrap();
    let log = Arc::new(SlidingLogLimiter::sliding_log(limit).unwrap());
    let start = Instant::now();
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let mut stream = Stream(5);
    let mut tasks = Vec::new();
    for _ in 0..300 {
        let (log, admitted) = (Arc::clone(&log), Arc::clone(&admitted));
        let weight = 1 + stream.below(3);
        let delay = ms(stream.below(20_000));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            log.acquire(weight).await.unwrap();
            let at = start.elapsed().as_nanos() as u64;
            admitted.lock().unwrap().push((at, weight));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let admitted = admitted.lock().unwrap();
    assert_eq!(admitted.len(), 300);
    // Offered ~600 over 20 s against 10/s: the log runs full, and exactly
    // full, in the busiest windows.
    assert_eq!(max_in_any_window(&admitted, S), 10);
}

#[test]
fn the_log_is_exact_and_the_counter_bounded_on_a_long_bursty_run() {
    let limit = RequestRate::per_second(50).unwrap();
    let mut log = SlidingLog::new(limit).unwrap();
    let mut counter = SlidingWindowCounter::new(limit).unwrap();
    let (mut by_log, mut by_counter) = (Vec::new(), Vec::new());
    let mut stream = Stream(11);
    let mut now = 0;
    for _ in 0..50_000 {
        // Bursts of up to 20 calls at one instant, gaps of up to 40 ms.
        now += stream.below(40 * MS);
        for _ in 0..stream.below(20) {
            let weight = 1 + stream.below(4);
            if log.try_admit(now, weight).is_ok() {
                by_log.push((now, weight));
            }
            if counter.try_admit(now, weight).is_ok() {
                by_counter.push((now, weight));
            }
        }
    }
    assert_eq!(max_in_any_window(&by_log, S), 50);
    let counter_max = max_in_any_window(&by_counter, S);
    assert!(counter_max < 100, "{counter_max} ≥ 2N");
}

// ---------------------------------------------------------------------------
// Properties

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Take(u64),
    LimitRemaining(u64),
    SetRemaining(u64),
    Block(u64),
    SetCapacity(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u64..2_000).prop_map(Op::Advance),
        6 => (0u64..3 * S).prop_map(Op::Advance),
        12 => (1u64..=8).prop_map(Op::Take),
        1 => (0u64..=8).prop_map(Op::LimitRemaining),
        1 => (0u64..=8).prop_map(Op::SetRemaining),
        1 => (0u64..2 * S).prop_map(Op::Block),
        1 => (1u64..=8).prop_map(Op::SetCapacity),
    ]
}

/// Run `ops`; at every refusal check that the instant given is exact: the
/// same weight is refused a nanosecond before it and admitted at it, and
/// `earliest` agrees with it.
fn refusals_are_exact<A: Algorithm + Clone>(
    mut algorithm: A,
    ops: &[Op],
    adjust: bool,
) -> Result<(), TestCaseError> {
    let mut now = 0u64;
    for op in ops {
        match *op {
            Op::Advance(d) => now += d,
            Op::Take(weight) => {
                let weight = weight.min(algorithm.capacity());
                let before = algorithm.clone();
                match algorithm.try_admit(now, weight) {
                    Ok(()) => prop_assert_eq!(before.earliest(now, weight), now),
                    Err(ready) => {
                        prop_assert!(ready > now);
                        prop_assert_eq!(before.earliest(now, weight), ready);
                        prop_assert!(before.clone().try_admit(ready - 1, weight).is_err());
                        prop_assert_eq!(before.clone().try_admit(ready, weight), Ok(()));
                        prop_assert!(before.available(ready) >= weight);
                        prop_assert!(before.available(ready - 1) < weight);
                    }
                }
            }
            _ if !adjust => {}
            Op::LimitRemaining(r) => algorithm.limit_remaining(now, r),
            Op::SetRemaining(r) => algorithm.set_remaining(now, r),
            Op::Block(d) => algorithm.block_until(now, now + d),
            Op::SetCapacity(c) => algorithm.set_capacity(now, c),
        }
    }
    Ok(())
}

fn quota(limit: u64, window: u64) -> RequestRate {
    RequestRate::new(limit, Duration::from_nanos(window)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The log admits exactly what a brute-force reference admits (every
    /// admission of the last W summed), refuses with the reference's
    /// earliest instant, and never holds more than N in any window.
    #[test]
    fn the_log_is_exact(
        limit in 1u64..=8,
        window in 1_000u64..=2 * S,
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let mut log = SlidingLog::new(quota(limit, window)).unwrap();
        let mut reference: Vec<(Nanos, u64)> = Vec::new();
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Advance(d) => now += d,
                Op::Take(weight) => {
                    let weight = weight.min(limit);
                    let live = |t: Nanos| -> u64 {
                        reference.iter().filter(|&&(at, _)| at + window > t).map(|&(_, w)| w).sum()
                    };
                    let expected = if live(now) + weight <= limit {
                        Ok(())
                    } else {
                        // The first expiry after which the weight fits.
                        let ready = reference
                            .iter()
                            .map(|&(at, _)| at + window)
                            .filter(|&t| t > now && live(t) + weight <= limit)
                            .min();
                        Err(ready.unwrap())
                    };
                    prop_assert_eq!(log.try_admit(now, weight), expected);
                    if expected.is_ok() {
                        reference.push((now, weight));
                    }
                    prop_assert!(log.stored() as u64 <= limit);
                }
                _ => {}
            }
        }
        prop_assert!(max_in_any_window(&reference, window) <= limit);
    }

    /// Refusal instants are exact for all three windows, in any state the
    /// adjustments can put them in.
    #[test]
    fn refusal_instants_are_exact(
        limit in 1u64..=8,
        window in 1_000u64..=2 * S,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let rate = quota(limit, window);
        refusals_are_exact(FixedWindow::new(rate).unwrap(), &ops, true)?;
        refusals_are_exact(SlidingLog::new(rate).unwrap(), &ops, true)?;
        refusals_are_exact(SlidingWindowCounter::new(rate).unwrap(), &ops, true)?;
    }

    /// Under a fixed configuration the counter never lets 2N into a window
    /// and the fixed window never lets more than 2N.
    #[test]
    fn the_counter_stays_below_twice_the_limit(
        limit in 1u64..=8,
        window in 1_000u64..=2 * S,
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let rate = quota(limit, window);
        let mut fixed = FixedWindow::new(rate).unwrap();
        let mut counter = SlidingWindowCounter::new(rate).unwrap();
        let (mut by_fixed, mut by_counter) = (Vec::new(), Vec::new());
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Advance(d) => now += d,
                Op::Take(weight) => {
                    let weight = weight.min(limit);
                    if fixed.try_admit(now, weight).is_ok() {
                        by_fixed.push((now, weight));
                    }
                    if counter.try_admit(now, weight).is_ok() {
                        by_counter.push((now, weight));
                    }
                }
                _ => {}
            }
        }
        prop_assert!(max_in_any_window(&by_counter, window) < 2 * limit);
        prop_assert!(max_in_any_window(&by_fixed, window) <= 2 * limit);
    }
}

// ---------------------------------------------------------------------------
// Waiting through QueuedLimiter, on the paused clock

/// Spawn one waiter per weight, in order, each enqueued before the next is
/// spawned; return when each was admitted, in admission order, with its
/// index.
async fn wait_in_line<A: Algorithm>(
    limiter: &Arc<QueuedLimiter<A>>,
    weights: &[u64],
) -> Vec<(usize, Duration)> {
    let start = Instant::now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, &weight) in weights.iter().enumerate() {
        let (limiter, order) = (Arc::clone(limiter), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            limiter.acquire(weight).await.unwrap();
            order.lock().unwrap().push((i, start.elapsed()));
        }));
        tokio::task::yield_now().await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    order
}

fn in_order(times: &[Duration]) -> Vec<(usize, Duration)> {
    times.iter().copied().enumerate().collect()
}

#[tokio::test(start_paused = true)]
async fn fixed_window_waiters_go_in_order_at_each_boundary() {
    let limiter =
        Arc::new(FixedWindowLimiter::fixed_window(RequestRate::per_second(2).unwrap()).unwrap());
    let got = wait_in_line(&limiter, &[1, 1, 1, 1, 1, 1]).await;
    let want = [0, 0, 1000, 1000, 2000, 2000].map(ms);
    assert_eq!(got, in_order(&want));
    assert_eq!(limiter.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn sliding_log_waiters_go_in_order_as_admissions_expire() {
    let limiter =
        Arc::new(SlidingLogLimiter::sliding_log(RequestRate::per_second(3).unwrap()).unwrap());
    // The last 1 would fit at 1 s, but waits behind the 2 ahead of it.
    let got = wait_in_line(&limiter, &[1, 2, 1, 1, 2, 1]).await;
    let want = [0, 0, 1000, 1000, 2000, 2000].map(ms);
    assert_eq!(got, in_order(&want));
}

#[tokio::test(start_paused = true)]
async fn sliding_counter_waiters_go_in_order_as_the_previous_window_fades() {
    let limiter = Arc::new(
        SlidingCounterLimiter::sliding_counter(RequestRate::per_second(4).unwrap()).unwrap(),
    );
    let got = wait_in_line(&limiter, &[1; 8]).await;
    let want = [0, 0, 0, 0, 1250, 1500, 1750, 2000].map(ms);
    assert_eq!(got, in_order(&want));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_window_waiter_passes_its_place_on() {
    let limiter =
        Arc::new(SlidingLogLimiter::sliding_log(RequestRate::per_second(1).unwrap()).unwrap());
    let start = Instant::now();
    limiter.try_acquire(1).unwrap();
    let head = {
        let l = Arc::clone(&limiter);
        tokio::spawn(async move { l.acquire(1).await })
    };
    tokio::task::yield_now().await;
    let next = {
        let l = Arc::clone(&limiter);
        tokio::spawn(async move {
            l.acquire(1).await.unwrap();
            start.elapsed()
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(limiter.waiting(), 2);
    tokio::time::sleep(ms(100)).await;
    head.abort();
    assert_eq!(next.await.unwrap(), ms(1000));
    assert_eq!(limiter.waiting(), 0);
    // Only one of the two was admitted: the second slot is free a second on.
    assert!(limiter.try_acquire(1).is_err());
    tokio::time::sleep(ms(1000)).await;
    assert!(limiter.try_acquire(1).is_ok());
}

/// Block a fresh limiter for 2 s, then queue five waiters of weight 1.
async fn after_a_block<A: Algorithm>(limiter: QueuedLimiter<A>) -> Vec<(usize, Duration)> {
    let limiter = Arc::new(limiter);
    limiter.block_until(Instant::now() + Duration::from_secs(2));
    wait_in_line(&limiter, &[1; 5]).await
}

#[tokio::test(start_paused = true)]
async fn after_a_block_windows_resume_at_the_pace_not_in_a_burst() {
    let rate = RequestRate::per_second(4).unwrap();
    let paced = in_order(&[2000, 2250, 2500, 2750, 3000].map(ms));
    let fixed = after_a_block(FixedWindowLimiter::fixed_window(rate).unwrap()).await;
    assert_eq!(fixed, paced);
    let log = after_a_block(SlidingLogLimiter::sliding_log(rate).unwrap()).await;
    assert_eq!(log, paced);
    // The counter paces too, but its fifth also waits for the four in the
    // window [2 s, 3 s) to fade to three.
    let counter = after_a_block(SlidingCounterLimiter::sliding_counter(rate).unwrap()).await;
    assert_eq!(counter, in_order(&[2000, 2250, 2500, 2750, 3250].map(ms)));
}

#[tokio::test(start_paused = true)]
async fn a_weight_over_the_limit_is_an_error_not_a_hang() {
    let limiter = SlidingLogLimiter::sliding_log(RequestRate::per_second(3).unwrap()).unwrap();
    assert!(matches!(
        limiter.acquire(4).await,
        Err(Error::WeightExceedsCapacity {
            weight: 4,
            capacity: 3,
            ..
        })
    ));
    assert!(matches!(
        FixedWindowLimiter::fixed_window(RequestRate::per_second(3).unwrap())
            .unwrap()
            .try_acquire(4),
        Err(Error::WeightExceedsCapacity { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn every_algorithm_fits_behind_the_same_limiter_interface() {
    let rate = RequestRate::per_second(5).unwrap();
    let limiters: Vec<Arc<dyn Limiter>> = vec![
        Arc::new(TokenBucket::new(rate, 5).unwrap()),
        Arc::new(FixedWindowLimiter::fixed_window(rate).unwrap()),
        Arc::new(SlidingLogLimiter::sliding_log(rate).unwrap()),
        Arc::new(SlidingCounterLimiter::sliding_counter(rate).unwrap()),
    ];
    for limiter in &limiters {
        let start = Instant::now();
        limiter.acquire(5).await.unwrap();
        limiter.adjust(Adjustment::LimitRemaining(0)).await.unwrap();
        assert!(matches!(
            limiter.try_acquire(1).await,
            Err(Error::NotYet { .. })
        ));
        limiter.adjust(Adjustment::SetRemaining(5)).await.unwrap();
        limiter.try_acquire(5).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}

// ---------------------------------------------------------------------------
// Keyed, with idle eviction

async fn idle_keys_are_evicted<A: Algorithm>(keyed: KeyedLimiter<u32, QueuedLimiter<A>>) {
    let keyed = keyed
        .with_shards(1)
        .with_idle_timeout(Duration::from_secs(5));
    for key in 0..100 {
        keyed.try_acquire(&key, 1).unwrap();
        assert!(
            keyed.try_acquire(&key, 2).is_err(),
            "each key has its own quota"
        );
    }
    assert_eq!(keyed.len(), 100);
    // Every window has emptied within 2 s, but the keys were used too
    // recently to go.
    tokio::time::advance(Duration::from_secs(2)).await;
    keyed.get(&1000);
    assert_eq!(keyed.len(), 101);
    // Past the idle timeout the next lookup sweeps the shard.
    tokio::time::advance(Duration::from_secs(5)).await;
    let held = keyed.get(&7);
    assert_eq!(keyed.len(), 1);
    drop(held);
    assert_eq!(keyed.sweep(), 1);
    assert!(keyed.is_empty());
}

#[tokio::test(start_paused = true)]
async fn keyed_windows_evict_idle_keys() {
    let rate = RequestRate::new(2, Duration::from_millis(500)).unwrap();
    idle_keys_are_evicted(KeyedLimiter::fixed_windows(rate).unwrap()).await;
    idle_keys_are_evicted(KeyedLimiter::sliding_logs(rate).unwrap()).await;
    idle_keys_are_evicted(KeyedLimiter::sliding_counters(rate).unwrap()).await;
}

#[tokio::test(start_paused = true)]
async fn keyed_windows_keep_keys_whose_window_is_not_empty() {
    let rate = RequestRate::per_minute(10).unwrap();
    let fixed = KeyedLimiter::fixed_windows(rate).unwrap();
    let log = KeyedLimiter::sliding_logs(rate).unwrap();
    let counter = KeyedLimiter::sliding_counters(rate).unwrap();
    fixed.try_acquire(&"a", 1).unwrap();
    log.try_acquire(&"a", 1).unwrap();
    counter.try_acquire(&"a", 1).unwrap();
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!((fixed.sweep(), log.sweep(), counter.sweep()), (0, 0, 0));
    // A minute on, the fixed window and the log are empty; the counter still
    // carries the previous minute's call.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!((fixed.sweep(), log.sweep(), counter.sweep()), (1, 1, 0));
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(counter.sweep(), 1);
}
