//! The throttled client against the embedded rate-limited server, both in
//! one runtime on tokio's paused clock: exact virtual schedules.
#![cfg(feature = "testing")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_pace::retry::{Backoff, BackoffJitter, ReleaseJitter, RetryRules};
use reqwest_pace::testing::{Dialect, Fault, RateLimitedServer, RetryAfter};
use reqwest_pace::{Error, ErrorKind, Event, RequestRate, Scope, ThrottledClient};

fn no_jitter() -> RetryRules {
    RetryRules::default().with_backoff(
        Backoff::exponential(Duration::from_millis(100)).with_jitter(BackoffJitter::None),
    )
}

/// A client allowed one request an hour, which it has just spent on
/// `server`: its next pacing wait is an hour.
async fn one_per_hour_spent(server: &RateLimitedServer) -> ThrottledClient {
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_hour(1).unwrap())
        .burst(1)
        .build()
        .unwrap();
    client.get(server.url()).send().await.unwrap();
    client
}

/// A client whose every wait is exact: no backoff jitter, no release
/// jitter, so times can be asserted to the millisecond.
fn exact_client() -> ThrottledClient {
    ThrottledClient::builder(reqwest::Client::new())
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap()
}

fn times(server: &RateLimitedServer) -> Vec<Duration> {
    server.requests().iter().map(|r| r.at).collect()
}

/// `tasks` concurrent tasks, each sending `each` GETs one after the other;
/// every call must end in a 200.
async fn load(client: &ThrottledClient, server: &RateLimitedServer, tasks: usize, each: usize) {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let client = client.clone();
            let url = server.url();
            tokio::spawn(async move {
                for _ in 0..each {
                    let response = client.send(client.get(&url)).await.unwrap();
                    assert_eq!(response.status(), 200);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
}

fn ms(v: &[u64]) -> Vec<Duration> {
    v.iter().map(|&m| Duration::from_millis(m)).collect()
}

async fn server(dialect: Dialect, per_second: u64, burst: u64) -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(RequestRate::per_second(per_second).unwrap())
        .burst(burst)
        .dialect(dialect)
        .start()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn retry_after_in_seconds_spaces_the_attempts_exactly() {
    let server = server(Dialect::XRateLimit, 50, 10).await;
    server.inject(
        Fault::service_unavailable()
            .times(2)
            .retry_after(RetryAfter::Seconds(3)),
    );
    let client = exact_client();
    let response = client.send(client.get(server.url())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(times(&server), ms(&[0, 3_000, 6_000]));
}

#[tokio::test(start_paused = true)]
async fn retry_after_as_an_http_date_is_measured_against_the_date_header() {
    let server = server(Dialect::XRateLimit, 50, 10).await;
    server
        .inject(Fault::too_many_requests().retry_after(RetryAfter::DateIn(Duration::from_secs(4))));
    let client = exact_client();
    let response = client.send(client.get(server.url())).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(times(&server), ms(&[0, 4_000]));
}

#[tokio::test(start_paused = true)]
async fn backoff_without_retry_after_follows_the_schedule() {
    let server = server(Dialect::XRateLimit, 50, 10).await;
    server.inject(Fault::service_unavailable().times(3));
    let client = exact_client();
    client.send(client.get(server.url())).await.unwrap();
    // 100 ms doubling, no jitter.
    assert_eq!(times(&server), ms(&[0, 100, 300, 700]));
}

#[tokio::test(start_paused = true)]
async fn a_configured_rate_paces_exactly() {
    let server = server(Dialect::None, 1000, 1000).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(20).unwrap())
        .burst(1)
        .build()
        .unwrap();
    for _ in 0..10 {
        client.send(client.get(server.url())).await.unwrap();
    }
    assert_eq!(
        times(&server),
        ms(&[0, 50, 100, 150, 200, 250, 300, 350, 400, 450])
    );
}

/// The first response's 429 blocks the whole key: the other 49 tasks, which
/// had not sent yet, wait for the same instant instead of each finding out
/// by itself, and after it the key resumes at its rate, not all at once.
#[tokio::test(start_paused = true)]
async fn a_429_storm_on_one_key_makes_one_pause() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(
        Fault::too_many_requests()
            .times(1)
            .retry_after(RetryAfter::Seconds(2)),
    );
    let log: Arc<Mutex<Vec<Event>>> = Arc::default();
    let sink = Arc::clone(&log);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(100).unwrap())
        .burst(1)
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .on_event(move |e| sink.lock().unwrap().push(e.clone()))
        .build()
        .unwrap();
    load(&client, &server, 50, 1).await;
    let at = times(&server);
    assert_eq!(at.len(), 51);
    assert_eq!(
        server.stats().total.throttled + server.stats().total.faults,
        1
    );
    assert_eq!(at[0], Duration::ZERO);
    // Then nothing until the pause ends, and from there one every 10 ms.
    let expected: Vec<Duration> = (0..50)
        .map(|i| Duration::from_millis(2_000 + 10 * i))
        .collect();
    assert_eq!(&at[1..], &expected[..]);
    let retries = log
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::Retrying { .. }))
        .count();
    assert_eq!(retries, 1, "one task was throttled, one pause for all");
}

/// With no rate configured, the client probes once, reads the server's
/// headers and paces itself: after the first response no request is
/// refused, and the whole run goes at the server's rate.
async fn learns_the_rate(dialect: Dialect) {
    let server = server(dialect, 50, 10).await;
    let client = exact_client();
    let start = tokio::time::Instant::now();
    load(&client, &server, 32, 10).await;
    assert_eq!(server.stats().total.throttled, 0, "{dialect}");
    // 320 requests: 10 from the burst, the rest at the server's 50/s or,
    // with the 0.97 headroom, a little slower.
    let elapsed = start.elapsed();
    assert!(
        (Duration::from_millis(6_200)..=Duration::from_millis(6_800)).contains(&elapsed),
        "{dialect}: {elapsed:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn learned_pacing_from_x_ratelimit_headers_gets_no_429() {
    learns_the_rate(Dialect::XRateLimit).await;
}

#[tokio::test(start_paused = true)]
async fn learned_pacing_from_github_headers_gets_no_429() {
    learns_the_rate(Dialect::GitHub).await;
}

#[tokio::test(start_paused = true)]
async fn learned_pacing_from_ietf_headers_gets_no_429() {
    learns_the_rate(Dialect::Ietf).await;
}

#[tokio::test(start_paused = true)]
async fn without_headers_429s_shrink_the_rate_and_success_grows_it() {
    let server = server(Dialect::None, 50, 10).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .retry(no_jitter().with_max_attempts(10))
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    load(&client, &server, 32, 20).await;
    let stats = server.stats().total;
    assert_eq!(stats.ok, 640);
    // Far fewer refusals than requests: the rate was found and kept.
    assert!(stats.throttled * 10 < stats.ok, "{stats:?}");
    let rate = client.current_rate("host", &host_key(&server)).unwrap();
    assert!((25.0..=75.0).contains(&rate), "settled at {rate}/s");
}

fn host_key(server: &RateLimitedServer) -> String {
    format!("http://{}", server.addr())
}

#[tokio::test(start_paused = true)]
async fn layered_limits_apply_the_tightest() {
    use reqwest_pace::testing::ClientKey;
    let server = server(Dialect::None, 1000, 1000).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(100).unwrap())
        .burst(1)
        .scope(
            Scope::per_header("token", "x-api-key")
                .rate(RequestRate::per_second(10).unwrap())
                .burst(1),
        )
        .build()
        .unwrap();
    // Two tokens, five requests each, at once: each token is held to
    // 10/s, the host (both together) to 100/s.
    let mut tasks = Vec::new();
    for token in ["a", "b"] {
        let client = client.clone();
        let url = server.url();
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                client
                    .send(client.get(&url).header("x-api-key", token))
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let records = server.requests();
    for token in ["a", "b"] {
        let at: Vec<Duration> = records
            .iter()
            .filter(|r| r.key == ClientKey::ApiKey(token.to_owned()))
            .map(|r| r.at)
            .collect();
        assert_eq!(at.len(), 5);
        let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, vec![Duration::from_millis(100); 4], "token {token}");
    }
    // Both tokens share the host bucket: no two requests closer than 10 ms.
    assert!(records
        .windows(2)
        .all(|w| w[1].at - w[0].at >= Duration::from_millis(10)));
    // A request without a token passes only the host scope: no 100 ms wait.
    let t0 = tokio::time::Instant::now();
    client.send(client.get(server.url())).await.unwrap();
    assert!(t0.elapsed() <= Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn weighted_calls_spend_from_the_matching_dimension() {
    use reqwest_pace::headers::Dimension;
    use reqwest_pace::Cost;
    let server = server(Dialect::None, 1000, 1000).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .without_host_scope()
        .scope(
            Scope::global()
                .dimension(Dimension::Tokens)
                .rate(RequestRate::per_second(1_000).unwrap())
                .burst(1_000),
        )
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let cost = Cost::default().with(Dimension::Tokens, 500);
    for _ in 0..4 {
        client
            .send_with_cost(client.get(server.url()), &cost)
            .await
            .unwrap();
    }
    // 1000 tokens of burst, then 500 tokens per half second.
    assert_eq!(times(&server), ms(&[0, 0, 500, 1_000]));
    assert_eq!(start.elapsed(), Duration::from_millis(1_000));
    // A cost over the configured capacity is an error, not a hang.
    let too_big = Cost::default().with(Dimension::Tokens, 5_000);
    let err = client
        .send_with_cost(client.get(server.url()), &too_big)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::WeightExceedsCapacity { weight: 5_000, .. }),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_first_request_holds_the_others_for_five_seconds_at_most() {
    let server = RateLimitedServer::builder()
        .limit(RequestRate::per_second(1000).unwrap())
        .burst(1000)
        .latency(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let client = ThrottledClient::builder(reqwest::Client::new())
        .build()
        .unwrap();
    let probe = {
        let client = client.clone();
        let url = server.url();
        tokio::spawn(async move { client.send(client.get(url)).await })
    };
    tokio::task::yield_now().await;
    let start = tokio::time::Instant::now();
    let second = {
        let client = client.clone();
        let url = server.url();
        tokio::spawn(async move {
            client.send(client.get(url)).await.unwrap();
            start.elapsed()
        })
    };
    // The second request went after 5 s, then took the server's 60 s.
    assert_eq!(second.await.unwrap(), Duration::from_secs(65));
    probe.await.unwrap().unwrap();
}

/// Fifty requests in flight on a key that already knows its pace all get
/// a 429 with Retry-After: they wait out one pause together, then resume at
/// the key's rate.
#[tokio::test(start_paused = true)]
async fn fifty_requests_in_flight_throttled_at_once_resume_together_at_the_rate() {
    let server = server(Dialect::None, 10_000, 10_000).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(1000).unwrap())
        .burst(50)
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    // Learn the server first, so the burst is not held by the probe.
    client.send(client.get(server.url())).await.unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    server.inject(
        Fault::too_many_requests()
            .times(50)
            .retry_after(RetryAfter::Seconds(1)),
    );
    load(&client, &server, 50, 1).await;
    let records = server.requests();
    assert_eq!(records.len(), 1 + 50 + 50);
    let storm: Vec<Duration> = records[1..51].iter().map(|r| r.at).collect();
    assert!(storm.iter().all(|&t| t == storm[0]), "the 50 went at once");
    let retries: Vec<Duration> = records[51..].iter().map(|r| r.at - storm[0]).collect();
    // One pause of exactly the Retry-After, then one per millisecond.
    let expected: Vec<Duration> = (0..50).map(|i| Duration::from_millis(1_000 + i)).collect();
    assert_eq!(retries, expected);
}

#[tokio::test(start_paused = true)]
async fn the_last_status_survives_later_connection_errors() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(Fault::service_unavailable());
    let client = ThrottledClient::builder(reqwest::Client::new())
        .retry(no_jitter().with_max_attempts(3))
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    let url = server.url();
    let call = tokio::spawn(async move { client.send(client.get(url)).await });
    while server.requests().is_empty() {
        tokio::task::yield_now().await;
    }
    // The first attempt got a 503; the server goes away before the retries.
    server.shutdown().await;
    match call.await.unwrap() {
        Err(Error::RetriesExhausted {
            attempts: 3,
            last_status: Some(status),
            source: Some(source),
            // The last attempt got no response to keep.
            last_response: None,
            ..
        }) => {
            assert_eq!(status, 503);
            assert!(source.is_connect(), "{source}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_sliding_log_layer_keeps_the_learned_pace_exactly() {
    use reqwest_pace::{Limiter, SlidingLogLimiter};
    let server = server(Dialect::XRateLimit, 50, 10).await;
    let scope = Scope::per_host().limiter(|_| {
        let log = SlidingLogLimiter::sliding_log(RequestRate::per_second(1_000)?)?;
        Ok(Arc::new(log) as Arc<dyn Limiter>)
    });
    let client = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(scope)
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    load(&client, &server, 16, 10).await;
    let stats = server.stats().total;
    assert_eq!(stats.ok, 160);
    // The learned 48.5/s becomes 48 per one-second window, and the log holds
    // the client to it exactly: no second of the run saw more than those 48
    // plus the probe, whatever the server answered. (A log allows its 48 as
    // a burst, which this server's burst of 10 refuses: for a bucket-shaped
    // server the bucket is the better fit, and the 429s here are retried.)
    let at: Vec<Duration> = server.requests().iter().map(|r| r.at).collect();
    for (i, &from) in at.iter().enumerate() {
        let in_window = at[i..]
            .iter()
            .take_while(|&&t| t < from + Duration::from_secs(1))
            .count();
        assert!(
            in_window <= 49,
            "{in_window} requests in the second from {from:?}"
        );
    }
}

/// GitHub's secondary limit: a 403 with `Retry-After`. It is throttled by
/// the one definition: retried after the wait, and the whole key waits with
/// it (the other tasks do not find out one by one).
#[tokio::test(start_paused = true)]
async fn a_403_with_retry_after_is_retried_and_blocks_the_key() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(
        Fault::new(reqwest::StatusCode::FORBIDDEN)
            .times(1)
            .retry_after(RetryAfter::Seconds(2)),
    );
    let client = exact_client();
    load(&client, &server, 4, 1).await;
    let at = times(&server);
    // The probe got the 403; the three waiting tasks and the retry all go
    // after the 2 s wait, none before it.
    assert_eq!(at.len(), 5);
    assert_eq!(at[0], Duration::ZERO);
    assert!(
        at[1..].iter().all(|&t| t >= Duration::from_secs(2)),
        "{at:?}"
    );
    assert_eq!(server.stats().total.faults, 1);
}

/// A bare 403 (no `Retry-After`, nothing exhausted) is an answer, not a
/// rate limit: returned at once, not retried.
#[tokio::test(start_paused = true)]
async fn a_bare_403_is_not_retried() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(Fault::new(reqwest::StatusCode::FORBIDDEN));
    let client = exact_client();
    let response = client.send(client.get(server.url())).await.unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(times(&server), ms(&[0]));
}

/// reqwest's own shape: `client.get(url)…send()` is paced and retried like
/// `client.send(…)`, with no way around the buckets.
#[tokio::test(start_paused = true)]
async fn get_then_send_is_paced_and_retried() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(
        Fault::service_unavailable()
            .times(1)
            .retry_after(RetryAfter::Seconds(1)),
    );
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(20).unwrap())
        .burst(1)
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    for _ in 0..3 {
        let response = client
            .get(server.url())
            .header("x-test", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    // The 503 at 0 is retried after its Retry-After; then one every 50 ms.
    assert_eq!(times(&server), ms(&[0, 1_000, 1_050, 1_100]));
}

/// The first response carries no rate-limit headers: the tasks that waited
/// for it are released at the cold-start rate (10/s, doubling every 500 ms
/// of sending), not all at once.
#[tokio::test(start_paused = true)]
async fn a_header_less_first_response_does_not_release_every_waiting_task_at_once() {
    let server = server(Dialect::None, 1000, 1000).await;
    let client = exact_client();
    load(&client, &server, 20, 1).await;
    let at = times(&server);
    assert_eq!(at.len(), 20);
    // The probe goes alone, and the next a whole interval of the cold start
    // after it (a server whose bucket holds one would refuse it at once).
    assert_eq!(at.iter().filter(|t| t.is_zero()).count(), 1, "{at:?}");
    assert_eq!(at[1], Duration::from_millis(100));
    // Growth: the gaps shrink, never widen.
    let gaps: Vec<Duration> = at[1..].windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[1] <= g[0]), "{gaps:?}");
    assert!(*at.last().unwrap() < Duration::from_secs(1), "{at:?}");
}

/// Fifty calls at once against a host that answers nothing but bare 429s:
/// with a 5 s deadline every call ends by it, whatever the pacing queue,
/// the backoff and the congestion control would otherwise make it wait.
#[tokio::test(start_paused = true)]
async fn a_429_storm_ends_every_call_by_its_deadline() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(Fault::too_many_requests().times(100_000));
    let client = ThrottledClient::builder(reqwest::Client::new())
        .time_limit(Duration::from_secs(5))
        .build()
        .unwrap();
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let (client, url) = (client.clone(), server.url());
            tokio::spawn(async move {
                let start = tokio::time::Instant::now();
                let result = client.get(url).send().await;
                (start.elapsed(), result)
            })
        })
        .collect();
    for call in calls {
        let (took, result) = call.await.unwrap();
        assert!(took <= Duration::from_secs(5), "{took:?}");
        match result {
            Err(Error::TimeLimitExceeded { limit, .. }) => {
                assert_eq!(limit, Duration::from_secs(5))
            }
            Err(Error::RetriesExhausted { last_status, .. })
            | Err(Error::BudgetExhausted { last_status, .. }) => {
                assert_eq!(last_status.map(|s| s.as_u16()), Some(429))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A pacing wait that would end past the request's deadline fails at
/// once, with the wait it would have been.
#[tokio::test(start_paused = true)]
async fn a_pacing_wait_past_the_deadline_fails_at_once_with_the_wait() {
    let server = server(Dialect::None, 1000, 1000).await;
    let client = one_per_hour_spent(&server).await;
    let start = tokio::time::Instant::now();
    let err = client
        .get(server.url())
        .time_limit(Duration::from_secs(1))
        .send()
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    match err {
        Error::TimeLimitExceeded {
            wait,
            limit,
            attempts,
            ..
        } => {
            assert_eq!(wait, Some(Duration::from_secs(3600)));
            assert_eq!(limit, Duration::from_secs(1));
            assert_eq!(attempts, 0);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
}

/// The retry policy's `max_elapsed` bounds every wait after the first
/// send, the pacing wait of a retry included: a retry that would wait an
/// hour for its bucket fails at once instead (deadline from `max_elapsed`).
#[tokio::test(start_paused = true)]
async fn max_elapsed_is_a_deadline_for_every_wait_after_the_first_send() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(Fault::service_unavailable());
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_hour(1).unwrap())
        .burst(1)
        .retry(no_jitter().with_max_elapsed(Duration::from_secs(1)))
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let err = client.get(server.url()).send().await.unwrap_err();
    // The 503 at 0, the backoff of 100 ms, then the bucket's hour: refused
    // at once, 100 ms in.
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    match err {
        Error::TimeLimitExceeded {
            wait,
            limit,
            attempts,
            last_status,
            last_response: None,
            ..
        } => {
            assert_eq!(limit, Duration::from_secs(1));
            assert_eq!(attempts, 1);
            assert_eq!(last_status.map(|s| s.as_u16()), Some(503));
            assert!(
                wait.is_some_and(|w| w > Duration::from_secs(3000)),
                "{wait:?}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Two clients (two processes, say) told the same `Retry-After: 2` retry
/// apart, each after the server's instant, never before: the release jitter
/// adds `draw × min(10 % of the wait, 1 s)`, with the draws injected.
#[tokio::test(start_paused = true)]
async fn release_jitter_spreads_clients_told_the_same_instant_and_is_never_early() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(
        Fault::too_many_requests()
            .times(2)
            .retry_after(RetryAfter::Seconds(2)),
    );
    let client = |draw: f64| {
        ThrottledClient::builder(reqwest::Client::new())
            .retry(no_jitter())
            .random(move || draw)
            .build()
            .unwrap()
    };
    let (a, b) = (client(0.25), client(0.75));
    let (ra, rb) = tokio::join!(a.get(server.url()).send(), b.get(server.url()).send());
    assert_eq!(ra.unwrap().status(), 200);
    assert_eq!(rb.unwrap().status(), 200);
    // Both refused at 0; then 2 s + 0.25 × 0.2 s and 2 s + 0.75 × 0.2 s.
    assert_eq!(times(&server), ms(&[0, 0, 2_050, 2_150]));
}

/// A spent quota whose reset is beyond the retry cap closes the key, and
/// the error says what the server said (a 200 with nothing remaining), not
/// an invented 429; `key_status` shows it and `clear_key` opens it again.
#[tokio::test(start_paused = true)]
async fn a_spent_quota_closes_the_key_with_the_servers_status_and_clear_key_reopens_it() {
    let server = RateLimitedServer::builder()
        .algorithm(reqwest_pace::testing::ServerAlgorithm::FixedWindow {
            limit: 2,
            window: Duration::from_secs(7_200),
        })
        .start()
        .await
        .unwrap();
    let client = exact_client();
    for _ in 0..2 {
        assert_eq!(client.get(server.url()).send().await.unwrap().status(), 200);
    }
    let spent = client.get(server.url()).send().await.unwrap_err();
    match &spent {
        Error::QuotaExhausted { wait, status, .. } => {
            assert_eq!(status.as_u16(), 200);
            assert!(*wait > Duration::from_secs(7_000), "{wait:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // Found spent before it sent: none of its own attempts.
    assert_eq!(spent.attempts(), Some(0));
    assert!(matches!(spent.kind(), ErrorKind::ServerWait { .. }));
    let status = client.key_status("host", &server.url()).unwrap();
    assert_eq!(status.closed_by.map(|s| s.as_u16()), Some(200));
    assert!(status.closed_for.is_some());
    assert_eq!(server.requests().len(), 2, "the closed key sent nothing");
    // Cleared, the key sends again; the server, still spent, says so with
    // a 429 and its Retry-After.
    assert!(client.clear_key("host", &server.url()).await);
    assert!(matches!(
        client.get(server.url()).send().await,
        Err(Error::RetryAfterTooLong { .. })
    ));
    assert_eq!(server.requests().len(), 3);
}

/// A server's wait beyond the retry cap ends the calls already queued on
/// the key at once: not at their turns, and not after the hour the key's
/// bucket, which holds the block, would keep them.
#[tokio::test(start_paused = true)]
async fn calls_waiting_on_a_key_fail_at_once_when_a_response_closes_it() {
    let server = server(Dialect::XRateLimit, 1000, 1000).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(1).unwrap())
        .burst(1)
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    // The burst of one, spent at 0: the next turns are at 1 s, 2 s, 3 s.
    client.get(server.url()).send().await.unwrap();
    server.inject(
        Fault::too_many_requests()
            .times(1)
            .retry_after(RetryAfter::Seconds(3_600)),
    );
    let start = tokio::time::Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            let url = server.url();
            tokio::spawn(async move {
                let result = client.get(&url).send().await;
                (result.map(|r| r.status()), start.elapsed())
            })
        })
        .collect();
    let mut ended = Vec::new();
    for call in calls {
        let (result, at) = call.await.unwrap();
        match result {
            Err(Error::RetryAfterTooLong { wait, status, .. }) => {
                assert_eq!(status, 429);
                assert!(wait > Duration::from_secs(3_590), "{wait:?}");
            }
            other => panic!("unexpected {other:?}"),
        }
        ended.push(at);
    }
    // The first turn's 429 closes the key; the two queued behind it end
    // with it, having sent nothing.
    assert_eq!(ended, ms(&[1_000, 1_000, 1_000]));
    assert_eq!(times(&server), ms(&[0, 1_000]));
    let status = client.key_status("host", &host_key(&server)).unwrap();
    assert!(status
        .closed_for
        .is_some_and(|w| w > Duration::from_secs(3_590)));
}

/// `client.send(builder)` keeps what the builder carries: its deadline
/// here, as `builder.send()` would.
#[tokio::test(start_paused = true)]
async fn send_keeps_the_deadline_a_builder_carries() {
    let server = server(Dialect::None, 1000, 1000).await;
    let client = one_per_hour_spent(&server).await;
    let err = client
        .send(client.get(server.url()).time_limit(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimeLimitExceeded { .. }), "{err:?}");
    assert_eq!(server.requests().len(), 1);
}

/// The default retry budget against a host answering nothing but bare
/// 503s: fifty calls at once retry at most half the budget's ten tokens in
/// all, instead of three times each, and none waits for long.
#[tokio::test(start_paused = true)]
async fn the_default_retry_budget_stops_a_storm_of_bare_503s() {
    let server = server_none_503().await;
    let client = ThrottledClient::new(reqwest::Client::new()).unwrap();
    let start = tokio::time::Instant::now();
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let (client, url) = (client.clone(), server.url());
            tokio::spawn(async move { client.get(url).send().await })
        })
        .collect();
    let mut budget_errors = 0;
    for call in calls {
        match call.await.unwrap() {
            Err(Error::BudgetExhausted { .. }) => budget_errors += 1,
            Err(Error::RetriesExhausted { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let requests = server.requests().len();
    assert!((50..=55).contains(&requests), "{requests}");
    assert!(budget_errors >= 45, "{budget_errors}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    // Without the budget each call is retried three times.
    let server = server_none_503().await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .without_retry_budget()
        .build()
        .unwrap();
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let (client, url) = (client.clone(), server.url());
            tokio::spawn(async move { client.get(url).send().await })
        })
        .collect();
    for call in calls {
        assert!(call.await.unwrap().is_err());
    }
    assert_eq!(server.requests().len(), 200);
}

async fn server_none_503() -> RateLimitedServer {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(Fault::service_unavailable().times(100_000));
    server
}

/// `tasks` concurrent tasks, each sending `each` GETs one after the other;
/// returns how many calls failed.
async fn failures(
    client: &ThrottledClient,
    server: &RateLimitedServer,
    tasks: usize,
    each: usize,
) -> usize {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let client = client.clone();
            let url = server.url();
            tokio::spawn(async move {
                let mut failed = 0;
                for _ in 0..each {
                    failed += usize::from(client.get(&url).send().await.is_err());
                }
                failed
            })
        })
        .collect();
    let mut failed = 0;
    for handle in handles {
        failed += handle.await.unwrap();
    }
    failed
}

/// Learn a header-less server's rate, stay away past the idle timeout (the
/// key's state is dropped), then come back: returns the rate learned before,
/// the rate right after the first call back, and the refusals and failed
/// calls after coming back.
async fn come_back_after_idle(remember_for: Duration) -> (f64, f64, u64, usize) {
    let server = server(Dialect::None, 5, 1).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(Scope::per_host().remember_for(remember_for))
        .retry(no_jitter().with_max_attempts(10))
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    let key = host_key(&server);
    load(&client, &server, 4, 20).await;
    let learned = client.current_rate("host", &key).unwrap();
    let before = server.stats().total.throttled;
    // Twice the idle timeout: the next request's sweep drops the key.
    tokio::time::advance(Duration::from_secs(120)).await;
    client.get(server.url()).send().await.unwrap();
    let back = client.current_rate("host", &key).unwrap();
    let failed = failures(&client, &server, 4, 10).await;
    let refused = server.stats().total.throttled - before;
    (learned, back, refused, failed)
}

/// A host revisited after the idle timeout starts at the pace it had, not
/// blind: what a key learned outlives its state.
#[tokio::test(start_paused = true)]
async fn a_key_dropped_after_the_idle_timeout_comes_back_at_its_learned_rate() {
    let (learned, back, refused, failed) = come_back_after_idle(Duration::from_secs(3_600)).await;
    assert_eq!(back, learned, "resumed at the learned rate");
    assert_eq!(failed, 0, "no call failed on coming back");
    // Remembering nothing, the same key starts again from the cold start
    // (10/s against a server allowing 5/s) and pays for it.
    let (_, blind, blind_refused, _) = come_back_after_idle(Duration::ZERO).await;
    assert_eq!(blind, 10.0, "started blind, at the cold start");
    assert!(
        refused < blind_refused,
        "{refused} refusals against {blind_refused}"
    );
}

/// `sweep` drops an idle key's state at once; what it learned comes back
/// with its next request.
#[tokio::test(start_paused = true)]
async fn sweep_drops_idle_state_and_keeps_what_it_learned() {
    let server = server(Dialect::None, 5, 1).await;
    let client = exact_client();
    let key = host_key(&server);
    load(&client, &server, 4, 5).await;
    let learned = client.current_rate("host", &key).unwrap();
    // Busy until its bucket is full again: then idle.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(client.pacer().sweep(), 1);
    assert_eq!(client.key_status("host", &key), None, "its state is gone");
    client.get(server.url()).send().await.unwrap();
    assert_eq!(client.current_rate("host", &key), Some(learned));
}

/// A refusal the key's model paces (its server admitted the key before,
/// and the key goes slower after it) is the pacing's miss, not the call's:
/// it costs no attempt. A call with a time limit (the policy's
/// `max_elapsed`, a minute by default) has that limit bound such
/// refusals: one that five or eight `Retry-After: 0` refusals in a row
/// fall on, after the key was admitted, is sent a sixth or a ninth time
/// and succeeds, and one refused without end is sent at the key's pace
/// until the next send would pass its minute. Without a time limit, a
/// call takes as many such refusals as it has attempts: eight spend its
/// four attempts and the four free ones. A server that has never admitted
/// the key is failing, not limiting: its refusals cost an attempt each.
#[tokio::test(start_paused = true)]
async fn a_refusal_the_key_paces_costs_the_call_no_attempt() {
    let refusals = |n| {
        Fault::too_many_requests()
            .times(n)
            .retry_after(RetryAfter::Seconds(0))
    };
    let server = server(Dialect::None, 1000, 1000).await;
    let client = exact_client();
    assert_eq!(client.get(server.url()).send().await.unwrap().status(), 200);
    for n in [5, 8] {
        let before = server.requests().len();
        server.inject(refusals(n));
        let response = client.get(server.url()).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(server.requests().len() - before, n as usize + 1);
    }

    let before = server.requests().len();
    server.inject(refusals(100_000));
    let error = client.get(server.url()).send().await.unwrap_err();
    assert!(
        matches!(error.kind(), reqwest_pace::ErrorKind::TimeLimit { .. }),
        "{error}"
    );
    let sends = times(&server).split_off(before);
    let (first, last) = (sends[0], sends[sends.len() - 1]);
    assert!(last - first <= Duration::from_secs(60), "{sends:?}");
    assert!(
        sends.windows(2).all(|w| w[1] > w[0]),
        "one send at a time, at the key's pace: {sends:?}"
    );

    let unlimited = RateLimitedServer::builder()
        .dialect(Dialect::None)
        .start()
        .await
        .unwrap();
    let client = ThrottledClient::builder(reqwest::Client::new())
        .retry(no_jitter().with_max_elapsed(None))
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    assert_eq!(
        client.get(unlimited.url()).send().await.unwrap().status(),
        200
    );
    unlimited.inject(refusals(8));
    let error = client.get(unlimited.url()).send().await.unwrap_err();
    assert_eq!(error.kind(), reqwest_pace::ErrorKind::AttemptsExhausted);
    assert_eq!(unlimited.requests().len(), 1 + 8);

    let never = RateLimitedServer::builder()
        .dialect(Dialect::None)
        .start()
        .await
        .unwrap();
    never.inject(refusals(8));
    let error = exact_client().get(never.url()).send().await.unwrap_err();
    assert_eq!(error.kind(), reqwest_pace::ErrorKind::AttemptsExhausted);
    assert_eq!(never.requests().len(), 4);
}

/// Every event of a call carries the call's number (`Event::call`), its
/// retries' included, and calls running at once have numbers of their
/// own: four calls at once, the server's first two answers 503s, each call
/// sent, received and completed under one number, the two refused ones
/// sent twice with a `Retrying` between.
#[tokio::test(start_paused = true)]
async fn each_call_s_events_carry_its_number() {
    let server = server(Dialect::None, 1000, 1000).await;
    server.inject(Fault::service_unavailable().times(2));
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&recorded);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .retry(no_jitter())
        .on_event(move |event| log.lock().unwrap().push(event.clone()))
        .build()
        .unwrap();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            let url = server.url();
            tokio::spawn(async move { client.get(&url).send().await.map(|r| r.status()) })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 200);
    }
    let events = std::mem::take(&mut *recorded.lock().unwrap());
    let mut by_call: std::collections::BTreeMap<u64, Vec<&Event>> = Default::default();
    for event in &events {
        match event.call() {
            Some(call) => by_call.entry(call).or_default().push(event),
            None => assert!(matches!(event, Event::Paced { .. }), "{event:?}"),
        }
    }
    assert_eq!(by_call.len(), 4, "{events:#?}");
    let count = |of: &[&Event], f: fn(&Event) -> bool| of.iter().filter(|e| f(e)).count();
    let mut sends: Vec<usize> = by_call
        .values()
        .map(|of| {
            let sent = count(of, |e| matches!(e, Event::Sent { .. }));
            assert_eq!(count(of, |e| matches!(e, Event::Received { .. })), sent);
            assert_eq!(count(of, |e| matches!(e, Event::Retrying { .. })), sent - 1);
            assert_eq!(count(of, |e| matches!(e, Event::Completed { .. })), 1);
            assert!(
                matches!(of.last(), Some(Event::Completed { attempts, .. }) if *attempts as usize == sent),
                "{of:#?}"
            );
            sent
        })
        .collect();
    sends.sort_unstable();
    assert_eq!(sends, [1, 1, 2, 2], "{events:#?}");

    // A refusal with a wait, then a call that gives up: their throttles,
    // retries and give-up carry the number of the call they belong to.
    let of_next_call = || {
        let events = std::mem::take(&mut *recorded.lock().unwrap());
        let calls: std::collections::BTreeSet<u64> =
            events.iter().filter_map(Event::call).collect();
        assert_eq!(calls.len(), 1, "{events:#?}");
        events
    };
    server.inject(Fault::too_many_requests().retry_after(RetryAfter::Seconds(1)));
    assert_eq!(client.get(server.url()).send().await.unwrap().status(), 200);
    let told_to_wait = of_next_call();
    for kind in [
        |e: &Event| matches!(e, Event::Refused { status: 429, .. }),
        |e: &Event| {
            matches!(
                e,
                Event::Retrying {
                    from_server: true,
                    ..
                }
            )
        },
        |e: &Event| matches!(e, Event::Completed { attempts: 2, .. }),
    ] {
        assert_eq!(
            told_to_wait.iter().filter(|e| kind(e)).count(),
            1,
            "{told_to_wait:#?}"
        );
    }
    server.inject(Fault::service_unavailable().times(1_000));
    assert!(client.get(server.url()).send().await.is_err());
    let failed = of_next_call();
    assert!(
        matches!(failed.last(), Some(Event::GaveUp { .. })),
        "{failed:#?}"
    );
    assert!(
        failed
            .iter()
            .filter(|e| matches!(e, Event::Sent { .. }))
            .count()
            >= 2
    );
}
