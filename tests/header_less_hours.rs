//! The header-less regime over an hour: `ThrottledClient` with nothing
//! configured, 16 closed-loop tasks, against servers of 20 a second that
//! say nothing of their limit (no rate-limit header, no `Retry-After`), on
//! the paused clock, in process.
//!
//! The goal (issue "One model of the server…", item 3): slow start that
//! cannot overshoot a 20/s server threefold; once the ceiling has been
//! found, a steady state that probes rarely, **at most one refusal a
//! minute** against a steady server, while still sending at least 95 % of
//! what it allows; and a prompt probe when the server's capacity grows.
//! A 60-second run (`tests/server_space.rs`) cannot show the steady state:
//! these runs are an hour long.
#![cfg(feature = "testing")]

mod zoo_support;

use std::time::Duration;

use reqwest_pace::testing::space::RunFigures;
use reqwest_pace::testing::{Dialect, RateLimitedServer, ServerAlgorithm, ServerBuilder};
use reqwest_pace::RequestRate;

const HOUR: Duration = Duration::from_secs(3_600);
const MINUTE: u64 = 60;
/// Minutes the key is given to find its ceiling before the steady state
/// is judged.
const SETTLING: usize = 5;

/// What a run of an hour showed, minute by minute.
struct Hour {
    figures: RunFigures,
    /// Refused and admitted requests in each minute of the run.
    refused: Vec<u64>,
    admitted: Vec<u64>,
    /// Requests that reached the server in each of the first ten seconds.
    first_seconds: Vec<u64>,
}

fn twenty() -> RequestRate {
    RequestRate::per_second(20).expect("a positive rate")
}

fn header_less(algorithm: ServerAlgorithm) -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(algorithm)
        .dialect(Dialect::None)
        .retry_after(false)
}

async fn hour(builder: ServerBuilder) -> Hour {
    let server = builder.start().await.expect("server starts");
    let figures = zoo_support::space::default_client_in_process_on(&server, 16, HOUR).await;
    let minutes = (HOUR.as_secs() / MINUTE) as usize;
    let (mut refused, mut admitted) = (vec![0; minutes], vec![0; minutes]);
    let mut first_seconds = vec![0; 10];
    for record in server.requests() {
        let second = record.at.as_secs();
        if let Some(count) = first_seconds.get_mut(second as usize) {
            *count += 1;
        }
        let Some(minute) = usize::try_from(second / MINUTE)
            .ok()
            .filter(|&m| m < minutes)
        else {
            continue;
        };
        if record.status.is_success() {
            admitted[minute] += 1;
        } else {
            refused[minute] += 1;
        }
    }
    println!("{figures:?}\n  first seconds {first_seconds:?}\n  refused a minute {refused:?}");
    Hour {
        figures,
        refused,
        admitted,
        first_seconds,
    }
}

/// The goal on a steady server of 20 a second: slow start sends fewer
/// than 60 in any of its first seconds; after [`SETTLING`] minutes, at
/// most one refusal a minute and at least 95 % of the limit; no failed
/// call.
fn assert_polite(hour: &Hour) {
    let peak = hour.first_seconds.iter().copied().max().unwrap_or(0);
    assert!(
        peak < 60,
        "slow start sent {peak} in a second to a 20/s server"
    );
    assert_settled(hour);
}

/// What [`assert_polite`] asks of the minutes after settling, alone: a
/// window refuses nothing until its count is spent, so slow start spends
/// the first one in its first seconds whatever it does.
fn assert_settled(hour: &Hour) {
    let steady = &hour.refused[SETTLING..];
    let refusals: u64 = steady.iter().sum();
    assert!(
        refusals <= steady.len() as u64,
        "{refusals} refusals over the {} steady minutes: {steady:?}",
        steady.len()
    );
    let admitted: u64 = hour.admitted[SETTLING..].iter().sum();
    let allowed = 20 * MINUTE * steady.len() as u64;
    assert!(
        admitted as f64 >= 0.95 * allowed as f64,
        "{admitted} admitted of {allowed} allowed in the steady minutes"
    );
    assert_eq!(hour.figures.failed, 0, "{:?}", hour.figures);
}

#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_without_burst_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::LeakyBucket {
        rate: twenty(),
        burst: 0,
    });
    assert_polite(&hour(server).await);
}

/// nginx's `limit_req` with a burst: it lets a probe run past its rate
/// before refusing, and the refusal reads as a ceiling above the rate.
/// Each such reading raised the target above the limit, refused again a
/// few seconds later: 7–10 refusals a minute for as long as the key ran.
#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_with_a_burst_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::LeakyBucket {
        rate: twenty(),
        burst: 10,
    });
    assert_polite(&hour(server).await);
}

#[tokio::test(start_paused = true)]
async fn a_token_bucket_with_a_burst_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::TokenBucket {
        rate: twenty(),
        burst: 5,
    });
    assert_polite(&hour(server).await);
}

#[tokio::test(start_paused = true)]
async fn a_fixed_window_of_a_second_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::FixedWindow {
        limit: 20,
        window: Duration::from_secs(1),
    });
    assert_polite(&hour(server).await);
}

/// A window of 200 in ten seconds that begins with the first request
/// after the last one ended (a counter with an expiry). As with the
/// minute's quota, slow start spends the first window in its first
/// seconds (a window refuses nothing until its count is spent), and the
/// steady state is what is judged.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: refused 6 times a minute (0.52 % of the requests, 0.967 of the \
            limit): each probe past the target held runs into the window the lockouts \
            showed, spends its quota early and is refused with the requests behind it, and \
            the hold stays at 12 s; doubling it as after a probe refused outside a shown \
            window (3 refusals every 70 s, 0.979) cost windows of a minute 1 to 2 % of \
            the limit"]
async fn a_fixed_window_of_ten_seconds_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::FixedWindow {
        limit: 200,
        window: Duration::from_secs(10),
    });
    assert_settled(&hour(server).await);
}

/// Windows of a few seconds at a few a second, beginning with the first
/// request after the last one ended or aligned to whole multiples of
/// their length, over ten minutes: the goal of the
/// generated space (at least 0.95 of the limit, at most 1 % refused, no
/// failed call). A probe accelerating into such a window spends its
/// quota early, and the lockout right after its refusal says the ceiling
/// held before stands; read as a new ceiling, every probe started the
/// holds over, and 50 in 10 s was probed, and refused four times, every
/// 23 s (0.890 of the limit, 4.1 % refused; aligned, 0.973 and 2.0 %).
#[tokio::test(start_paused = true)]
async fn short_windows_of_a_few_a_second_meet_the_goal_over_ten_minutes() {
    for ((limit, secs), aligned) in [(50, 10), (100, 5)]
        .into_iter()
        .flat_map(|w| [(w, false), (w, true)])
    {
        let builder = header_less(ServerAlgorithm::FixedWindow {
            limit,
            window: Duration::from_secs(secs),
        })
        .aligned_windows(aligned);
        let figures = zoo_support::space::default_client_in_process(
            builder,
            16,
            Duration::from_secs(10 * MINUTE),
        )
        .await;
        assert!(
            zoo_support::space::meets_goal(&figures),
            "{limit} per {secs} s, aligned {aligned}: {figures:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_sliding_log_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::SlidingLog {
        limit: 20,
        window: Duration::from_secs(1),
    });
    assert_polite(&hour(server).await);
}

#[tokio::test(start_paused = true)]
async fn a_sliding_log_counting_refusals_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::SlidingLog {
        limit: 20,
        window: Duration::from_secs(1),
    })
    .counts_refusals(true);
    assert_polite(&hour(server).await);
}

/// A sliding counter of 21 a second sustains 20 (its previous window
/// still weighs something at the very end of the current one).
#[tokio::test(start_paused = true)]
async fn a_sliding_counter_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::SlidingCounter {
        limit: 21,
        window: Duration::from_secs(1),
    });
    assert_polite(&hour(server).await);
}

#[tokio::test(start_paused = true)]
async fn a_gcra_counting_refusals_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::Gcra {
        rate: twenty(),
        burst: 5,
    })
    .counts_refusals(true);
    assert_polite(&hour(server).await);
}

/// A quota of 1,200 a minute: slow start, which only a refusal stops,
/// spends it in the first seconds of the first minute (a window admits
/// everything until it is spent), and that much is unavoidable; but each
/// later probe, accelerating while the window absorbs it, spends the
/// quota early again and is locked out for the rest of the minute: the
/// probe stops at twice the target, and the lockout waits for the end of
/// the window it is in, whichever of the windows since the cycle began.
#[tokio::test(start_paused = true)]
async fn a_minute_quota_is_refused_at_most_once_a_minute() {
    let server = header_less(ServerAlgorithm::FixedWindow {
        limit: 1_200,
        window: Duration::from_secs(60),
    });
    // Slow start's first window is unavoidable here; the steady state is
    // what is judged.
    assert_settled(&hour(server).await);
}

/// The server's capacity doubles half an hour in: within two minutes the
/// key sends at least 95 % of the new limit, and it is still refused at
/// most once a minute after.
async fn assert_finds_growth(algorithm: ServerAlgorithm) {
    let server = header_less(algorithm)
        .change_limit_at(HOUR / 2, RequestRate::per_second(40).expect("positive"));
    let hour = hour(server).await;
    let grown = 30 + 2;
    for (minute, &admitted) in hour.admitted.iter().enumerate().skip(grown) {
        assert!(
            admitted as f64 >= 0.95 * (40 * MINUTE) as f64,
            "minute {minute}: {admitted} admitted of {} allowed",
            40 * MINUTE
        );
    }
    let after = &hour.refused[grown..];
    let refusals: u64 = after.iter().sum();
    assert!(refusals <= after.len() as u64, "{after:?}");
    assert_eq!(hour.figures.failed, 0);
}

#[tokio::test(start_paused = true)]
async fn a_token_bucket_whose_rate_doubles_is_found_within_two_minutes() {
    assert_finds_growth(ServerAlgorithm::TokenBucket {
        rate: twenty(),
        burst: 5,
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_whose_rate_doubles_is_found_within_two_minutes() {
    assert_finds_growth(ServerAlgorithm::LeakyBucket {
        rate: twenty(),
        burst: 10,
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_sliding_log_whose_quota_doubles_is_found_within_two_minutes() {
    assert_finds_growth(ServerAlgorithm::SlidingLog {
        limit: 20,
        window: Duration::from_secs(1),
    })
    .await;
}

/// A lockout's wait is the client's own guess, not the server's: a user
/// who caps the server's waits at 5 s (`max_retry_after`, past which a
/// block fails every call at once) has no call fail on a quota of a
/// minute spent early, whose lockouts last most of the minute and which
/// the lockouts read as a window to wait out.
#[tokio::test(start_paused = true)]
async fn a_lockout_never_holds_a_key_past_the_retry_cap() {
    use reqwest_pace::retry::RetryRules;
    use reqwest_pace::{PaceLayer, ThrottledClient};
    use tower_layer::Layer;

    let server = header_less(ServerAlgorithm::FixedWindow {
        limit: 1_200,
        window: Duration::from_secs(60),
    })
    .start()
    .await
    .expect("server starts");
    let client = ThrottledClient::builder(reqwest::Client::new())
        .retry(RetryRules::default().with_max_retry_after(Duration::from_secs(5)))
        .random(|| 0.5)
        .build()
        .expect("a client");
    let figures = reqwest_pace::testing::space::Workload::new(16, Duration::from_secs(600))
        .run(
            &server,
            20.0,
            PaceLayer::new(client).layer(server.service()),
        )
        .await
        .expect("runs");
    println!("{figures:?}");
    assert_eq!(figures.failed, 0, "{figures:?}");
    assert!(figures.goodput >= 0.95, "{figures:?}");
}
