//! `ThrottledClient` with nothing configured against the widely used
//! limiters that defeated it before the one header-less regime and the
//! bucket-of-one reading: a GCRA whose headers give the burst and no reset
//! and answer `retry-after: 0`, a sliding log that sends only
//! `Retry-After` (rounded up to a second), and a header-less limiter that
//! counts refusals; a bucket of one whose whole-second reset reads as
//! one request a second; and a bucket of one without headers (at 20 a
//! second; at 2 a second, a known gap that says why); and windows of one
//! second stated with whole-second resets (a known gap). Each runs 16
//! closed-loop tasks for 60 s on the paused clock, in process (`RateLimitedServer::service`), and asserts the goal:
//! at least 95 % of the true sustained limit, at most 1 % of responses
//! refused, no failed logical request.
#![cfg(feature = "testing")]

mod zoo_support;

use std::time::Duration;

use zoo_support::space::assert_goal_at_every_phase;

use reqwest::StatusCode;
use reqwest_pace::testing::space::RunFigures;
use reqwest_pace::testing::{
    zoo, Dialect, RateLimitedServer, ResetFormat, RetryAfterPrecision, ServerAlgorithm,
    ServerBuilder,
};
use reqwest_pace::RequestRate;

async fn run(builder: ServerBuilder) -> RunFigures {
    let figures =
        zoo_support::space::default_client_in_process(builder, 16, Duration::from_secs(60)).await;
    println!("{figures:?}");
    figures
}

fn assert_goal(figures: &RunFigures) {
    assert!(figures.goodput >= 0.95, "{figures:?}");
    assert!(figures.refused <= 0.01, "{figures:?}");
    assert_eq!(figures.failed, 0, "{figures:?}");
}

fn twenty() -> RequestRate {
    RequestRate::per_second(20).expect("a rate")
}

/// GCRA at 20/s, burst 5: `x-ratelimit-limit: 5` (the burst) and
/// `x-ratelimit-remaining` on every response, no reset, and on a refusal
/// `retry-after: 0` (whole seconds, rounded down).
#[tokio::test(start_paused = true)]
async fn a_gcra_stating_its_burst_without_a_reset() {
    let figures = run(zoo::gcra_burst_no_reset().expect("a preset")).await;
    assert_goal(&figures);
}

/// A sliding log of 20 per second: no header on a 200, and a 429 carries
/// only `Retry-After`, a wait of a few milliseconds rounded up to 1.
#[tokio::test(start_paused = true)]
async fn a_sliding_log_that_sends_only_retry_after() {
    let figures = run(zoo::log_retry_after_only()).await;
    assert_goal(&figures);
}

/// No headers at all, and refused requests count in the rate: a burst of
/// refusals keeps the client locked out longer.
#[tokio::test(start_paused = true)]
async fn a_header_less_limiter_that_counts_refusals() {
    let figures = run(zoo::counts_refusals()).await;
    assert_goal(&figures);
}

/// A token bucket of one at 20/s whose headers say `limit: 1`,
/// `remaining: 0` and a reset in whole seconds (`1`) on every response:
/// read literally, one request a second. Such a window of one says nothing
/// of how fast the bucket refills, and the key is paced by what the server
/// admits, as a server without headers is.
fn a_bucket_of_one_whose_reset_names_the_next_second() -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::TokenBucket {
            rate: twenty(),
            burst: 1,
        })
        .dialect(Dialect::XRateLimit)
        .limit_is_burst(true)
        .reset_format(ResetFormat::DeltaSeconds)
}

#[tokio::test(start_paused = true)]
async fn a_bucket_of_one_paced_by_what_it_admits() {
    assert_goal_at_every_phase(a_bucket_of_one_whose_reset_names_the_next_second).await;
}

/// Whatever the regime's cost, the key is not held to the one request a
/// second its headers read literally would allow.
#[tokio::test(start_paused = true)]
async fn a_bucket_of_one_is_not_held_to_one_request_a_second() {
    let figures = run(a_bucket_of_one_whose_reset_names_the_next_second()).await;
    assert!(figures.goodput > 2.0 / 20.0, "{figures:?}");
    assert_eq!(figures.failed, 0, "{figures:?}");
}

/// A token bucket of one at 50/s whose `x-ratelimit-reset` is the epoch
/// millisecond it is full again (20 ms away), read against a `Date` in
/// whole seconds: taken alone, the `Date` places the server's "now"
/// anywhere in a second, and the reset reads as up to a second away. The
/// responses' `Date`s, at different phases of the server's second, place
/// its clock to within about the time between two responses.
#[tokio::test(start_paused = true)]
async fn a_bucket_of_one_with_an_epoch_millisecond_reset() {
    assert_goal_at_every_phase(|| {
        RateLimitedServer::builder()
            .algorithm(ServerAlgorithm::TokenBucket {
                rate: RequestRate::per_second(50).expect("a rate"),
                burst: 1,
            })
            .dialect(Dialect::XRateLimit)
            .limit_is_burst(true)
            .reset_format(ResetFormat::EpochMillis)
    })
    .await;
}

/// A GCRA of 9,439 a minute with a burst of 3,204 whose GitHub headers
/// state the minute's quota as `x-ratelimit-limit` and the burst's level as
/// `remaining`, full again within the second: read as a window, 9,439 a
/// second. Each refusal halves the pace the headers primed, down to what
/// the server was seen to admit, instead of a storm of refusals (42 % of
/// responses, 558 failed calls, before).
#[tokio::test(start_paused = true)]
async fn a_bucket_stating_a_minutes_quota_as_its_limit() {
    let figures = run(RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::Gcra {
            rate: RequestRate::per_minute(9_439).expect("a rate"),
            burst: 3_204,
        })
        .dialect(Dialect::GitHub)
        .retry_after_precision(RetryAfterPrecision::Fractional))
    .await;
    assert_goal(&figures);
}

/// A sliding counter of 9 a second (Cloudflare's weighted estimate, which
/// sustains 2 in 3 of that) whose IETF draft-6 policy states `q=9;w=1`,
/// refusing with 503 and counting its refusals: the stated pace is refused
/// every few requests. Two refusals at the stated pace disprove the claim
/// and the shape is inferred from the readings instead: no storm of
/// refusals (80 % of responses and 69 failed calls before).
fn a_counter_stating_more_than_it_sustains() -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::SlidingCounter {
            limit: 9,
            window: Duration::from_secs(1),
        })
        .dialect(Dialect::IetfDraft6)
        .retry_after_precision(RetryAfterPrecision::Floor)
        .refusal_status(StatusCode::SERVICE_UNAVAILABLE)
        .counts_refusals(true)
}

#[tokio::test(start_paused = true)]
async fn a_stated_window_refusing_its_own_pace_is_not_followed_into_a_storm() {
    let figures = run(a_counter_stating_more_than_it_sustains()).await;
    assert!(figures.refused <= 0.01, "{figures:?}");
    assert_eq!(figures.failed, 0, "{figures:?}");
}

#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.86 of the limit, 0.7 % refused, over 60 s: the shape inferred once the \
            stated window is disproved (refused at its quota, then a unit short of it, as the \
            refusals it counts hold its estimate over) paces below the counter's weighted \
            estimate"]
async fn a_stated_window_refusing_its_own_pace() {
    assert_goal(&run(a_counter_stating_more_than_it_sustains()).await);
}

/// A sliding counter of 556 per 8 s with IETF draft-7 headers, behind an
/// nginx-like leaky bucket of 52/s (burst 1) that refuses with a bare 503:
/// the front refuses the headers' pace (67/s) within the first requests.
/// Too few sends have been made to measure a rate, and the rate the key
/// was paced at is the one refused (before, the cut took a rate of two
/// sends and held the key at 23/s for fifteen seconds: 0.83 of the limit).
#[tokio::test(start_paused = true)]
async fn a_front_limiter_refusing_the_headers_pace_at_once() {
    let builder = RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::SlidingCounter {
            limit: 556,
            window: Duration::from_secs(8),
        })
        .dialect(Dialect::IetfDraft7)
        .retry_after_precision(RetryAfterPrecision::Floor)
        .front_limiter(
            ServerAlgorithm::LeakyBucket {
                rate: RequestRate::per_second(52).expect("a rate"),
                burst: 1,
            },
            StatusCode::SERVICE_UNAVAILABLE,
        );
    // The front's 52/s binds, not the counter's 69.5/s.
    let figures = zoo_support::space::default_client_in_process_against(
        builder,
        16,
        Duration::from_secs(60),
        Some(52.0),
    )
    .await;
    println!("{figures:?}");
    assert_goal(&figures);
}

/// A bucket of one without headers, as nginx's `limit_req` without a
/// `burst` (`rate=20r/s`): a request is admitted 50 ms after the last one
/// admitted, never sooner, and a refusal says nothing else. The gaps
/// between the key's sends bracket the interval, and once refusals and
/// admissions agree the key is paced at a gap the server admitted.
fn a_header_less_spacer(per_second: u64) -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::LeakyBucket {
            rate: RequestRate::per_second(per_second).expect("a rate"),
            burst: 0,
        })
        .dialect(Dialect::None)
}

#[tokio::test(start_paused = true)]
async fn a_header_less_bucket_of_one_is_paced_at_its_interval() {
    assert_goal(&run(a_header_less_spacer(20)).await);
}

/// Past its slow start, a header-less bucket of one is refused at most
/// once a minute: the bracket's probes are 32 s apart and more.
#[tokio::test(start_paused = true)]
async fn a_header_less_bucket_of_one_is_probed_rarely() {
    let server = a_header_less_spacer(20)
        .start()
        .await
        .expect("server starts");
    let figures =
        zoo_support::space::default_client_in_process_on(&server, 16, Duration::from_secs(120))
            .await;
    let late_refusals = server
        .requests()
        .iter()
        .filter(|r| r.at >= Duration::from_secs(20) && r.status != StatusCode::OK)
        .count();
    assert!(
        late_refusals <= 2,
        "{late_refusals} refused after 20 s: {figures:?}"
    );
}

/// A token bucket of 20/s and `burst` whose `x-ratelimit-limit` is the
/// burst and `x-ratelimit-remaining` what is left, answering 80 ms after
/// each request arrives (more than an interval: every answer comes back
/// after the next request left).
fn a_bucket_a_round_trip_away(burst: u64) -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::TokenBucket {
            rate: twenty(),
            burst,
        })
        .dialect(Dialect::XRateLimit)
        .limit_is_burst(true)
        .latency(Duration::from_millis(80))
}

/// Burst 5.
#[tokio::test(start_paused = true)]
async fn a_bucket_a_round_trip_away_is_paced_at_its_rate() {
    assert_goal(&run(a_bucket_a_round_trip_away(5)).await);
}

/// A bucket of one: `remaining: 0` after every admission.
#[tokio::test(start_paused = true)]
async fn a_bucket_of_one_a_round_trip_away_is_paced_at_its_rate() {
    assert_goal_at_every_phase(|| a_bucket_a_round_trip_away(1)).await;
}

/// A token bucket of 3 refilling 5 a second whose `x-ratelimit-limit` is
/// the burst and whose reset is "full in" whole seconds (`1` on every
/// response), without `Retry-After`: its first second reads as a fixed
/// window, whose predicted end it is past when it admits one more request
/// and still says nothing is left (read as a window for good: 0.64).
#[tokio::test(start_paused = true)]
async fn a_small_bucket_stating_its_burst_and_whole_second_resets() {
    let builder = || {
        RateLimitedServer::builder()
            .algorithm(ServerAlgorithm::TokenBucket {
                rate: RequestRate::per_second(5).expect("a rate"),
                burst: 3,
            })
            .dialect(Dialect::XRateLimit)
            .limit_is_burst(true)
            .reset_format(ResetFormat::DeltaSeconds)
            .retry_after(false)
    };
    assert_goal_at_every_phase(builder).await;
}

/// A token bucket of 2 refilling 6 a second whose `x-ratelimit-limit` is
/// its rate (6), whose reset is an epoch in whole seconds, and whose 503s
/// say `Retry-After: 1` (rounded up): each refusal blocks the key for a
/// second, which fills the bucket (0.38 of the limit, a refusal every
/// 1.3 s, when the full bucket after a block grew the pace). Run at every
/// phase of the server's clock within a second, as the zoo's are: an
/// unpinned clock made the run depend on the time of day.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.958-0.986 of the limit, at most 0.3 % refused, with the server's clock \
            started 0, 250, 500 or 750 ms past a second, but 0.942 at 999 ms: where the epoch \
            reset in whole seconds falls decides how soon the key is refused and blocked"]
async fn a_small_bucket_stating_its_rate_and_blocking_a_second_per_refusal() {
    let builder = || {
        RateLimitedServer::builder()
            .algorithm(ServerAlgorithm::TokenBucket {
                rate: RequestRate::per_second(6).expect("a rate"),
                burst: 2,
            })
            .dialect(Dialect::XRateLimit)
            .limit_is_burst(false)
            .reset_format(ResetFormat::EpochSeconds)
            .retry_after(true)
            .retry_after_precision(RetryAfterPrecision::Ceil)
            .refusal_status(StatusCode::SERVICE_UNAVAILABLE)
    };
    assert_goal_at_every_phase(builder).await;
}

/// A fixed window of 3,000 a minute without headers, spent in its first
/// seconds: the calls refused then wait for the window to open again, a
/// minute after it began. Probing with doubling waits (up to 8 s) found it
/// open up to 8 s late, and those calls ran out of their minute.
#[tokio::test(start_paused = true)]
async fn a_minute_quota_without_headers_spent_early() {
    let builder = || {
        RateLimitedServer::builder()
            .algorithm(ServerAlgorithm::FixedWindow {
                limit: 3_000,
                window: Duration::from_secs(60),
            })
            .dialect(Dialect::None)
            .retry_after(false)
    };
    assert_goal_at_every_phase(builder).await;
}

/// A sliding log of 3 a second whose `x-ratelimit-reset` is the delta to
/// its oldest request's leaving, in whole seconds (`1` on every response),
/// refusing with 503 and a `Retry-After` rounded down. Read as a window
/// of 3, then as a bucket (its `remaining` sits where the pace puts it),
/// it got 0.60–0.68; told as a moving window once its readings span the
/// fillings a quota of 3 can show (one to three inside), 0.93.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.93 of the limit, 0.5 % refused: read as a window, then a bucket, for \
            its first seconds, then paced at its quota over the upper bound of its length (3 \
            every 1.06 s: 2 admitted one second in six)"]
async fn a_sliding_log_of_three_with_whole_second_resets() {
    let builder = || {
        RateLimitedServer::builder()
            .algorithm(ServerAlgorithm::SlidingLog {
                limit: 3,
                window: Duration::from_secs(1),
            })
            .dialect(Dialect::XRateLimit)
            .reset_format(ResetFormat::DeltaSeconds)
            .retry_after_precision(RetryAfterPrecision::Floor)
            .refusal_status(StatusCode::SERVICE_UNAVAILABLE)
    };
    assert_goal_at_every_phase(builder).await;
}

/// A header-less bucket of one at 2 a second (nginx's `limit_req` at
/// `rate=2r/s`): over 60 s the key sends about 120 requests, so the goal's
/// 1 % is a single refusal, and the first refusal ends slow start. That
/// refusal says only that the cold start (10 a second) is too fast; nothing
/// but further refusals narrows the rate below it (the server admits any
/// slower pace alike), and finding a rate within 5 % in a bracket five
/// times as wide takes about five halvings of its logarithm, a refusal
/// each. No client that starts faster than the server can meet both
/// bounds here.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 0.950 of the limit with 5.1 % refused (7 of 137 requests; 0.917 and 9 \
            of 135, 8 of them in the first 10 s, before the spacing's bracket stepped down \
            from its top): a slow header-less server's 1 % is one refusal a minute, and \
            bracketing its rate from refusals alone costs several"]
async fn a_header_less_bucket_of_two_a_second() {
    assert_goal(&run(a_header_less_spacer(2)).await);
}

/// Windows of one second counting 2 or 5 requests, as a limiter configured
/// "2 per second" or "5 per second" counts them (express-rate-limit's
/// fixed windows, Flask-Limiter's moving window and sliding-window
/// counter), stating them in `X-RateLimit-*` with an epoch reset in whole
/// seconds and `Retry-After`: the reset's rounding is as long as the
/// window, so the reading of where a window ends, or how long it is, is
/// off by up to its whole length. The goal at every phase of the server's
/// second.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: a fixed window of 2 a second reads 0.917 of the limit at +250 to \
            +750 ms (none refused) and 0.75 with 19 % refused at +999 ms (after each window's \
            start it is paced at 3.9 a second and refused within the window); logs of 2 a \
            second read 0.61-0.89 (the reset, two seconds from a Date rounded down, reads as \
            a window of two seconds); logs of 5 a second meet it at +0 and +250 ms (0.967, \
            0.957) and read 0.91 with 0.7-1.0 % refused at the other phases, misread as a \
            fixed window and then a bucket for their first ten seconds (0.79-0.91 at every \
            phase before a small window whose readings agree for long was read as one); \
            counters of 2 a second are refused 2.5-3.9 % at +0, +750 and +999 ms and 1.3 % \
            at +500 ms (21-27 % at three phases before a full reading after a refusal's wait \
            stopped growing the pace or measuring the refill), counters of 5 a second read \
            0.83-0.92"]
async fn one_second_windows_with_whole_second_resets() {
    let second = Duration::from_secs(1);
    let limiters = [
        ServerAlgorithm::FixedWindow {
            limit: 2,
            window: second,
        },
        ServerAlgorithm::SlidingLog {
            limit: 2,
            window: second,
        },
        ServerAlgorithm::SlidingLog {
            limit: 5,
            window: second,
        },
        ServerAlgorithm::SlidingCounter {
            limit: 2,
            window: second,
        },
        ServerAlgorithm::SlidingCounter {
            limit: 5,
            window: second,
        },
    ];
    let mut misses = Vec::new();
    for algorithm in limiters {
        for (millis, wall) in zoo_support::phases() {
            let builder = RateLimitedServer::builder()
                .algorithm(algorithm)
                .dialect(Dialect::XRateLimit)
                .reset_format(ResetFormat::EpochSeconds)
                .wall_clock(wall);
            let f = run(builder).await;
            if f.goodput < 0.95 || f.refused > 0.01 || f.failed > 0 {
                misses.push(format!("{algorithm:?} +{millis} ms: {f:?}"));
            }
        }
    }
    assert!(misses.is_empty(), "{}", misses.join("\n"));
}
