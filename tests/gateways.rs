//! The default client, with nothing configured, against the limiters of
//! widely used gateways as `reqwest_pace::testing` models their headers
//! (`Dialect::{Kong, Envoy, Traefik, SpringGateway}`): each speaks a
//! dialect of its own, and a client that misreads it falls back to what a
//! server without headers teaches. Each run is 16 closed-loop tasks for 60
//! virtual seconds, at every phase of the server's wall clock within a
//! second, and asserts the goal of the generated space: at least 0.95 of
//! the limit, at most 1 % refused, no failed call.
#![cfg(feature = "testing")]

mod zoo_support;

use zoo_support::space::assert_goal_at_every_phase;

use std::time::Duration;

use reqwest_pace::testing::{
    Dialect, RateLimitedServer, ResetFormat, ServerAlgorithm, ServerBuilder,
};
use reqwest_pace::RequestRate;

/// The goal on a server of `dialect` with each of `algorithms`.
async fn assert_goal_on(dialect: Dialect, algorithms: &[ServerAlgorithm]) {
    for &algorithm in algorithms {
        println!("{dialect} {algorithm:?}");
        assert_goal_at_every_phase(|| {
            RateLimitedServer::builder()
                .algorithm(algorithm)
                .dialect(dialect)
        })
        .await;
    }
}

fn fixed(limit: u64, secs: u64) -> ServerAlgorithm {
    ServerAlgorithm::FixedWindow {
        limit,
        window: Duration::from_secs(secs),
    }
}

fn bucket(per_second: u64, burst: u64) -> ServerAlgorithm {
    ServerAlgorithm::TokenBucket {
        rate: RequestRate::per_second(per_second).expect("a rate"),
        burst,
    }
}

/// Kong's rate-limiting plugin as older versions (and its
/// response-ratelimiting plugin) write it: `X-RateLimit-Limit-Minute` and
/// `-Remaining-Minute`, no reset, windows aligned to the clock's minutes.
fn kong_units_only(algorithm: ServerAlgorithm) -> ServerBuilder {
    RateLimitedServer::builder()
        .algorithm(algorithm)
        .dialect(Dialect::Kong)
        .reset_format(ResetFormat::Omitted)
        .aligned_windows(true)
}

/// 100 a minute. Read as a limit of an unknown unit named `minute`, the
/// key was paced as a server without headers is: one call failed and
/// 0.86 % were refused.
#[tokio::test(start_paused = true)]
async fn kong_stating_a_minute_by_its_unit_alone() {
    assert_goal_at_every_phase(|| kong_units_only(fixed(100, 60))).await;
}

/// 3,000 an hour. Read as a limit of an unknown unit, the whole hour's
/// quota went in the first seconds and every call after it failed on a
/// wait of most of an hour (88,576 failed calls in the minute).
#[tokio::test(start_paused = true)]
async fn kong_stating_an_hour_by_its_unit_alone() {
    assert_goal_at_every_phase(|| kong_units_only(fixed(3_000, 3_600))).await;
}

/// 10 a second, aligned to the clock's seconds, stated by its unit alone:
/// the window's length is known, its edges are not. The first calls, two
/// of them sent together before any reading, overrun the first window
/// once; that refusal, with the whole quota admitted in the second before
/// it, keeps the quota stated. (Read as the server allowing less than it
/// states, it cut the pace to 8.7 a second for good: 0.862 of the limit.)
#[tokio::test(start_paused = true)]
async fn kong_stating_a_second_by_its_unit_alone() {
    assert_goal_at_every_phase(|| kong_units_only(fixed(10, 1))).await;
}

/// Kong as it writes today: the unit's fields and `RateLimit-*` with the
/// reset.
#[tokio::test(start_paused = true)]
async fn kong_with_its_reset() {
    assert_goal_at_every_phase(|| {
        RateLimitedServer::builder()
            .algorithm(fixed(100, 60))
            .dialect(Dialect::Kong)
            .aligned_windows(true)
    })
    .await;
}

/// Envoy's `x-ratelimit-limit: 10, 10;w=1` (IETF draft 03 in an `X-`
/// field), a 429 without `Retry-After`.
#[tokio::test(start_paused = true)]
async fn envoy_stating_its_quota_policy() {
    assert_goal_on(Dialect::Envoy, &[fixed(10, 1), fixed(100, 60)]).await;
}

/// Traefik's token bucket: nothing on a 200; a 429's `Retry-After` is
/// rounded up to whole seconds and its `X-Retry-In` is exact. Read from
/// `Retry-After` alone: 0.922 of 20 a second with a burst of 5, and 0.912
/// of 100 a second with a burst of 1.
#[tokio::test(start_paused = true)]
async fn traefik_saying_its_exact_wait() {
    assert_goal_on(Dialect::Traefik, &[bucket(20, 5), bucket(100, 1)]).await;
}

/// Traefik with small buckets: a burst twice the rate, and a bucket of
/// one at 2 a second.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: 5 a second with a burst of 10: 1.02 of the limit with 3.9 % refused \
            (4.2 % before `X-Retry-In` was read); 2 a second with a burst of 1: 0.900 with \
            7.5 % refused (0.858 and 7.8 %). Without headers on a 200, the refusals are all \
            the key learns from"]
async fn traefik_with_small_buckets() {
    assert_goal_on(Dialect::Traefik, &[bucket(5, 10), bucket(2, 1)]).await;
}

/// Spring Cloud Gateway's `RedisRateLimiter`: what remains, the refill
/// rate and the bucket's size on every response, a 429 without a wait.
#[tokio::test(start_paused = true)]
async fn spring_gateway_stating_its_bucket() {
    assert_goal_on(
        Dialect::SpringGateway,
        &[bucket(10, 20), bucket(50, 50), bucket(20, 1)],
    )
    .await;
}

/// A bucket of one refilling once a second, which states so: its
/// replenish rate is a window the server states, paced at its word. (Read
/// as a quota of one whose whole-second reset says nothing of the pace, it
/// was paced as a server without headers is: 0.817 of the limit with 15.6 %
/// refused.)
#[tokio::test(start_paused = true)]
async fn spring_gateway_with_a_bucket_of_one() {
    assert_goal_on(Dialect::SpringGateway, &[bucket(1, 1)]).await;
}
