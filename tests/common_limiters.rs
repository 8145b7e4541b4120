//! The default client against the limiters people configure most, with no
//! rate-limit headers (with `Retry-After` on a refusal, and without), over
//! ten virtual minutes each: round quotas (20 a second, 100 in 10 s, 1,200 a
//! minute) in fixed windows (each beginning with the first request after
//! the last one ended, as a counter with an expiry does, and aligned to
//! whole multiples of their length, as Kong and django-ratelimit count),
//! sliding logs and sliding counters, and buckets of 2 to 100 a second with small and large
//! bursts. The generated space (`tests/server_space.rs`) draws odd
//! parameters from a grammar; this grid holds the round ones a user meets
//! first, where a miss is one every user of such a server sees.
//!
//! ```text
//! cargo test --release --all-features --test common_limiters -- --include-ignored --nocapture
//! ```
//!
//! About 15 s on two threads in release.
#![cfg(feature = "testing")]

mod zoo_support;

use zoo_support::space::{self, meets_goal};

use std::time::Duration;

use reqwest_pace::testing::space::RunFigures;
use reqwest_pace::testing::{Dialect, RateLimitedServer, ServerAlgorithm};
use reqwest_pace::RequestRate;

/// The windows' quotas and lengths in seconds, and the buckets' rates and
/// bursts (a leaky bucket's burst is the excess over its first request).
const WINDOWS: [(u64, u64); 9] = [
    (5, 1),
    (10, 1),
    (20, 1),
    (100, 5),
    (50, 10),
    (100, 10),
    (300, 60),
    (600, 60),
    (1_200, 60),
];
const BUCKETS: [(u64, u64); 6] = [(2, 2), (5, 10), (10, 1), (20, 5), (50, 50), (100, 1)];

/// A limiter of the grid: its algorithm, and whether its fixed windows
/// are aligned ([`ServerBuilder::aligned_windows`]).
///
/// [`ServerBuilder::aligned_windows`]: reqwest_pace::testing::ServerBuilder::aligned_windows
type Limiter = (ServerAlgorithm, bool);

/// Every limiter of the grid.
fn limiters() -> Vec<Limiter> {
    let mut all = Vec::new();
    for (limit, secs) in WINDOWS {
        let window = Duration::from_secs(secs);
        all.push((ServerAlgorithm::FixedWindow { limit, window }, false));
        all.push((ServerAlgorithm::FixedWindow { limit, window }, true));
        all.push((ServerAlgorithm::SlidingLog { limit, window }, false));
        all.push((ServerAlgorithm::SlidingCounter { limit, window }, false));
    }
    for (rate, burst) in BUCKETS {
        let Ok(rate) = RequestRate::per_second(rate) else {
            continue;
        };
        all.push((ServerAlgorithm::Gcra { rate, burst }, false));
        all.push((ServerAlgorithm::TokenBucket { rate, burst }, false));
        let burst = burst.saturating_sub(1);
        all.push((ServerAlgorithm::LeakyBucket { rate, burst }, false));
    }
    all
}

/// The figures of the default client (16 tasks, fixed jitter draws) on a
/// header-less `limiter`, with `Retry-After` on a refusal or not, over
/// ten virtual minutes on a paused clock of its own.
fn run((algorithm, aligned): Limiter, retry_after: bool) -> RunFigures {
    space::paused().block_on(space::default_client_in_process(
        RateLimitedServer::builder()
            .algorithm(algorithm)
            .dialect(Dialect::None)
            .aligned_windows(aligned)
            .retry_after(retry_after),
        16,
        Duration::from_secs(600),
    ))
}

#[test]
#[ignore = "known gap: 11 of the 108 miss the goal, none with a failed call, all without \
            Retry-After: fixed windows of 300 a minute (both kinds, 1.24 % refused), a log \
            of 300 a minute (0.903 of the limit, 2.12 %) and a counter (1.62 %), a log of 600 \
            a minute (1.40 %), buckets of 2 a second (1.57 %, most of it slow start's) and of 5 \
            a second with a burst of 10 (1.31 %: a probe runs far past the rate on the burst \
            and reads as a new ceiling), as measured on 2026-12-08, the same before and \
            after a spacer's bracket stepped down from its top (this text had kept older \
            figures: 0.906 and 1.65 % for the log, 1.6 %, 1.3 %, 1.6 % and 1.7 %). (15 when first measured: with Retry-After, a log of \
            5 a second at 0.949 of the limit and the buckets of 2 a second at 1.65 % refused, \
            which meet it now.)"]
fn common_limiters_meet_the_goal_over_ten_minutes() {
    let cases: Vec<(Limiter, bool)> = limiters()
        .into_iter()
        .flat_map(|a| [(a, false), (a, true)])
        .collect();
    let runs = space::on_threads(&cases, space::threads(), |&(limiter, retry_after)| {
        run(limiter, retry_after)
    });
    let mut misses = Vec::new();
    for (((algorithm, aligned), retry_after), f) in cases.iter().zip(&runs) {
        let line = format!(
            "{} goodput {:.3} refused {:.2} % failed {} | {algorithm:?}{}{}",
            if meets_goal(f) { "  " } else { "XX" },
            f.goodput,
            f.refused * 100.0,
            f.failed,
            if *aligned { " | aligned" } else { "" },
            if *retry_after { " | retry-after" } else { "" },
        );
        println!("{line}");
        if !meets_goal(f) {
            misses.push(line);
        }
    }
    println!("{} of {} miss the goal", misses.len(), runs.len());
    assert!(misses.is_empty(), "{}", misses.join("\n"));
}

/// A window of 300 a minute, spent in slow start's first seconds, loses
/// no call while it is locked out. With `Retry-After`, the call refused
/// then is told to wait out most of the minute, and its retry queues in the
/// call's place, ahead of the calls that queued while it waited (queued
/// behind the fifteen others at the window's new pace, about 5 a second,
/// it passed the policy's time limit of a minute and failed). Without it,
/// the key holds its calls and probes the lockout one request at a time;
/// the probes' refusals cost no attempt while the call's time limit runs,
/// so the call refused keeps its place and takes the next probe (kept at
/// the front when each refusal cost an attempt, one call took every
/// probe's refusal and ran out of attempts).
///
/// A window of 100 a minute paces the key at an interval of 0.6 s: the
/// call told to wait 59 s of its minute has a second left when the wait
/// ends, and goes first only if it overtakes the call that took the key's
/// turn while it waited (a higher class would too), and is back at its key
/// when the key's block ends rather than after its own release jitter.
/// (Second behind that call, it passed its time limit by the interval.)
#[tokio::test(start_paused = true)]
async fn a_window_of_a_minute_spent_early_loses_no_call() {
    for limit in [300, 100] {
        let window = ServerAlgorithm::FixedWindow {
            limit,
            window: Duration::from_secs(60),
        };
        for retry_after in [true, false] {
            let server = RateLimitedServer::builder()
                .algorithm(window)
                .dialect(Dialect::None)
                .retry_after(retry_after)
                .start()
                .await
                .expect("server starts");
            let f = two_minutes_spent_early(&server).await;
            assert_eq!(f.failed, 0, "{limit}, retry-after {retry_after}: {f:?}");
        }
    }
}

/// The default client's figures over two minutes on `server`, whose limit
/// it spent (a refusal) in its first 10 s.
async fn two_minutes_spent_early(server: &RateLimitedServer) -> RunFigures {
    let f = space::default_client_in_process_on(server, 16, Duration::from_secs(120)).await;
    println!("{:?}: {f:?}", server.algorithm());
    let refused_early = server
        .requests()
        .iter()
        .any(|r| !r.status.is_success() && r.at < Duration::from_secs(10));
    assert!(refused_early, "the limit was spent early: {f:?}");
    f
}

/// A sliding counter of 131 a 58 s without headers, spent by slow start in
/// its first two seconds, locks the key out for most of a minute; the
/// probes of that lockout fall on the calls already refused, which keep
/// their place and take the next probe at once, and no call fails. (Each
/// probe sent as a new arrival's first request started that call's time
/// limit; at the lockout's end, a little over one send a second, three of
/// them passed their minute and failed.)
#[tokio::test(start_paused = true)]
async fn a_counter_spent_in_slow_start_loses_no_call() {
    let server = RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::SlidingCounter {
            limit: 131,
            window: Duration::from_secs(58),
        })
        .dialect(Dialect::None)
        .refusal_status(reqwest::StatusCode::SERVICE_UNAVAILABLE)
        .start()
        .await
        .expect("server starts");
    let f = two_minutes_spent_early(&server).await;
    assert_eq!(f.failed, 0, "{f:?}");
}

/// Limiters whose refusal carries `Retry-After`, which holds the key for
/// the whole wait: each probe refused costs that wait's traffic besides
/// the refusal (a log of 10 a second answers `Retry-After: 1`, a second
/// of its traffic). The hold a block brings grows with the block and with
/// each sighting of the same ceiling up to the header-less regime's
/// longest hold (256 s) rather than the 64 s of a probe refused without
/// one: capped at 64 s, a probe every minute held the log at 0.949 of its
/// limit, and refused 1.1–1.3 % of the requests to a log and a counter of
/// 300 a minute and to an aligned window of 50 in 10 s.
#[test]
fn a_probe_refused_with_a_wait_is_made_rarely() {
    let aligned_window = |limit, secs| {
        let window = Duration::from_secs(secs);
        (ServerAlgorithm::FixedWindow { limit, window }, true)
    };
    let window = |algorithm: fn(u64, Duration) -> ServerAlgorithm, limit, secs| {
        (algorithm(limit, Duration::from_secs(secs)), false)
    };
    let log = |limit, window| ServerAlgorithm::SlidingLog { limit, window };
    let counter = |limit, window| ServerAlgorithm::SlidingCounter { limit, window };
    let cases = [
        window(log, 10, 1),
        window(log, 300, 60),
        window(counter, 300, 60),
        aligned_window(50, 10),
    ];
    assert_goal_with_retry_after(&cases);
}

/// The goal on each of `limiters`, answering `Retry-After`, over ten
/// minutes each.
fn assert_goal_with_retry_after(limiters: &[Limiter]) {
    let runs = space::on_threads(limiters, space::threads(), |&limiter| run(limiter, true));
    for ((algorithm, aligned), f) in limiters.iter().zip(&runs) {
        println!("{algorithm:?} aligned {aligned}: {f:?}");
        assert!(meets_goal(f), "{algorithm:?} aligned {aligned}: {f:?}");
    }
}

/// A log of 100 in 5 s answering `Retry-After` in whole seconds: slow start
/// spends it, and the block after the next quota measures two quotas over
/// the cycle. Counted with the second the key was held past the first
/// block's shortest end (a wait rounded up, and the release's jitter), the
/// cycle read 18.9 a second, and the key held 0.92 of the limit until its
/// first probe: 0.950 over ten minutes.
#[test]
fn a_log_spent_twice_is_measured_without_the_keys_own_wait() {
    let window = Duration::from_secs(5);
    assert_goal_with_retry_after(&[(ServerAlgorithm::SlidingLog { limit: 100, window }, false)]);
}

/// A sliding counter of 5 a second answering `Retry-After`: its second's
/// admissions, a handful at that rate, read 3.8 a second when the key was
/// refused holding 4.3, and that reading capped every later probe's rise
/// (a rate refused while held), for as long as the key ran: 0.913 of the
/// limit over ten minutes. Sent at that rate or above for longer than the
/// refused hold had lasted, with no refusal, the key has disproved it.
#[test]
fn a_ceiling_misread_at_a_slow_rate_is_disproved() {
    let window = Duration::from_secs(1);
    assert_goal_with_retry_after(&[(ServerAlgorithm::SlidingCounter { limit: 5, window }, false)]);
}
