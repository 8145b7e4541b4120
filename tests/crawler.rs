//! A polite crawler's rules, against the embedded server on tokio's paused
//! clock: a cap on requests in flight per host, a circuit breaker per
//! host, and (feature `robots`) a site's robots.txt.
#![cfg(feature = "testing")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_pace::retry::{Backoff, BackoffJitter, ReleaseJitter, RetryRules};
use reqwest_pace::testing::{Dialect, Fault, RateLimitedServer};
use reqwest_pace::{
    AutoThrottle, CircuitBreaker, CircuitState, Error, Event, RequestRate, Scope, ThrottledClient,
};
use tokio::time::Instant;

fn ms(v: &[u64]) -> Vec<Duration> {
    v.iter().map(|&m| Duration::from_millis(m)).collect()
}

fn times(server: &RateLimitedServer) -> Vec<Duration> {
    server.requests().iter().map(|r| r.at).collect()
}

fn no_jitter() -> RetryRules {
    RetryRules::default().with_backoff(
        Backoff::exponential(Duration::from_millis(100)).with_jitter(BackoffJitter::None),
    )
}

/// A server that admits everything and answers each request after
/// `latency`, with no rate-limit headers.
async fn slow_server(latency: Duration) -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(RequestRate::per_second(100_000).unwrap())
        .burst(100_000)
        .dialect(Dialect::None)
        .latency(latency)
        .start()
        .await
        .unwrap()
}

/// A host scope with a rate far above what the tests send (so it neither
/// learns, probes nor waits).
fn fast_host() -> Scope {
    Scope::per_host()
        .rate(RequestRate::per_second(100_000).unwrap())
        .burst(100_000)
}

/// A client whose host scope caps requests in flight at `max`, with
/// exact retry delays.
fn capped_client(max: usize) -> ThrottledClient {
    ThrottledClient::builder(reqwest::Client::new())
        .host_scope(fast_host().max_in_flight(max))
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap()
}

fn spawn_get(
    client: &ThrottledClient,
    url: &str,
) -> tokio::task::JoinHandle<Result<reqwest::Response, Error>> {
    let (client, url) = (client.clone(), url.to_owned());
    tokio::spawn(async move { client.get(url).send().await })
}

/// Lets every spawned task run until it waits on something.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn host_key(server: &RateLimitedServer) -> String {
    format!("http://{}", server.addr())
}

/// Ten calls at once through a cap of two on a host that takes 100 ms per
/// request: the server never serves more than two, and they go two by two,
/// each pair as soon as the one before it is answered.
#[tokio::test(start_paused = true)]
async fn the_cap_holds_requests_in_flight_per_host_two_by_two() {
    let server = slow_server(Duration::from_millis(100)).await;
    let client = capped_client(2);
    let calls: Vec<_> = (0..10).map(|_| spawn_get(&client, &server.url())).collect();
    settle().await;
    let status = client.key_status("host", &host_key(&server)).unwrap();
    assert_eq!((status.max_in_flight, status.in_flight), (Some(2), 2));
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().status(), 200);
    }
    assert_eq!(server.peak_in_flight(), 2);
    // Answered at the end of each 100 ms of service.
    assert_eq!(
        times(&server),
        ms(&[100, 100, 200, 200, 300, 300, 400, 400, 500, 500])
    );
    let status = client.key_status("host", &host_key(&server)).unwrap();
    assert_eq!(status.in_flight, 0, "every permit went back");
}

/// The cap is per key: two hosts each get their own two.
#[tokio::test(start_paused = true)]
async fn each_host_has_a_cap_of_its_own() {
    let (a, b) = (
        slow_server(Duration::from_millis(100)).await,
        slow_server(Duration::from_millis(100)).await,
    );
    let client = capped_client(2);
    let calls: Vec<_> = (0..4)
        .flat_map(|_| [spawn_get(&client, &a.url()), spawn_get(&client, &b.url())])
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    for server in [&a, &b] {
        assert_eq!(server.peak_in_flight(), 2);
        assert_eq!(times(server), ms(&[100, 100, 200, 200]));
    }
}

/// A call dropped while its request is in flight gives its permit back at
/// once, and a call dropped while it waits for one leaves the queue: the
/// next in line goes then, and nothing is held afterwards.
#[tokio::test(start_paused = true)]
async fn a_cancelled_call_gives_its_permit_back_on_every_path() {
    let server = slow_server(Duration::from_secs(10)).await;
    let client = capped_client(1);
    let start = Instant::now();
    let in_flight = spawn_get(&client, &server.url());
    settle().await;
    let waiting = spawn_get(&client, &server.url());
    settle().await;
    let next = {
        let client = client.clone();
        let url = server.url();
        tokio::spawn(async move {
            client.get(url).send().await.unwrap();
            start.elapsed()
        })
    };
    settle().await;
    assert_eq!(server.in_flight(), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Dropped in the queue: it never takes a permit.
    waiting.abort();
    settle().await;
    assert_eq!(server.in_flight(), 1);
    // Dropped in flight: its permit goes to the next in line at once.
    in_flight.abort();
    settle().await;
    // `next` was sent at 1 s and answered after 10 s of service.
    assert_eq!(next.await.unwrap(), Duration::from_secs(11));
    assert_eq!(server.peak_in_flight(), 1);
    let status = client.key_status("host", &host_key(&server)).unwrap();
    assert_eq!(status.in_flight, 0);
}

/// A retry does not keep its permit through its backoff: the call queued
/// behind it goes in between, and the retry takes a permit again.
#[tokio::test(start_paused = true)]
async fn a_retry_gives_its_permit_back_and_takes_one_again() {
    let server = slow_server(Duration::from_millis(100)).await;
    server.inject(Fault::new(reqwest::StatusCode::BAD_GATEWAY));
    let client = capped_client(1);
    let first = spawn_get(&client, &server.url());
    settle().await;
    let second = spawn_get(&client, &server.url());
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
    let statuses: Vec<u16> = server
        .requests()
        .iter()
        .map(|r| r.status.as_u16())
        .collect();
    // The 502 at 100 ms; the second call from 100 to 200 ms, while the
    // first sleeps its 100 ms backoff; the retry from 200 to 300 ms.
    assert_eq!(statuses, [502, 200, 200]);
    assert_eq!(times(&server), ms(&[100, 200, 300]));
    assert_eq!(server.peak_in_flight(), 1);
}

/// A call's deadline bounds its wait for a permit; the call that gave up
/// holds nothing.
#[tokio::test(start_paused = true)]
async fn a_deadline_bounds_the_wait_for_a_permit() {
    let server = slow_server(Duration::from_secs(5)).await;
    let client = capped_client(1);
    let first = spawn_get(&client, &server.url());
    settle().await;
    let start = Instant::now();
    let late = client
        .get(server.url())
        .time_limit(Duration::from_secs(1))
        .send()
        .await;
    assert!(
        matches!(late, Err(Error::TimeLimitExceeded { attempts: 0, .. })),
        "{late:?}"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    first.await.unwrap().unwrap();
    let status = client.key_status("host", &host_key(&server)).unwrap();
    assert_eq!(status.in_flight, 0);
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_cap_of_zero_fails_the_build() {
    let built = ThrottledClient::builder(reqwest::Client::new())
        .max_in_flight(0)
        .build();
    assert!(
        matches!(&built, Err(Error::InvalidConfig(m)) if m.contains("max_in_flight")),
        "{built:?}"
    );
    let built = ThrottledClient::builder(reqwest::Client::new())
        .without_host_scope()
        .max_in_flight(2)
        .build();
    assert!(matches!(&built, Err(Error::InvalidConfig(m)) if m.contains("max_in_flight")));
}

fn events_into(log: &Arc<Mutex<Vec<Event>>>) -> impl Fn(&Event) + Send + Sync + 'static {
    let log = Arc::clone(log);
    move |e| log.lock().unwrap().push(e.clone())
}

/// Opens after 3 failures, for 1 s first, doubling up to 8 s.
fn breaker() -> CircuitBreaker {
    CircuitBreaker::default()
        .failures(3)
        .cool_down(Duration::from_secs(1))
        .max_cool_down(Duration::from_secs(8))
}

fn breaking_client(log: &Arc<Mutex<Vec<Event>>>) -> ThrottledClient {
    ThrottledClient::builder(reqwest::Client::new())
        .host_scope(fast_host().circuit_breaker(breaker()))
        .retry(no_jitter())
        .release_jitter(ReleaseJitter::none())
        .on_event(events_into(log))
        .build()
        .unwrap()
}

/// `tasks` workers, each calling `url` every 100 ms for `duration` (the
/// first at once); returns each call's result, as a status or an error.
async fn crawl_for(
    client: &ThrottledClient,
    url: &str,
    tasks: usize,
    duration: Duration,
) -> Vec<Result<u16, Error>> {
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move {
                let mut results = Vec::new();
                let mut tick = tokio::time::interval_at(start, Duration::from_millis(100));
                while start.elapsed() < duration {
                    tick.tick().await;
                    let result = client.get(&url).send().await;
                    results.push(result.map(|r| r.status().as_u16()));
                }
                results
            })
        })
        .collect();
    let mut results = Vec::new();
    for handle in handles {
        results.extend(handle.await.unwrap());
    }
    results
}

/// The circuit changes reported, as (state left, state entered) labels.
fn circuit_changes(log: &Arc<Mutex<Vec<Event>>>) -> Vec<(&'static str, &'static str)> {
    log.lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Circuit { from, to, .. } => Some((from.label(), to.label())),
            _ => None,
        })
        .collect()
}

/// Eight workers crawl a host answering 500s: once its breaker is open the
/// host receives exactly one probe per cool-down (1, 2, 4, 8, 8 s) however
/// many calls are made; the probe after the failures stop closes it, and
/// calls go again.
#[tokio::test(start_paused = true)]
async fn a_failing_host_receives_one_probe_per_cool_down() {
    let server = slow_server(Duration::ZERO).await;
    // The first 8 calls (at once) and four probes fail.
    server.inject(Fault::internal_server_error().times(8 + 4));
    let log = Arc::default();
    let client = breaking_client(&log);
    let results = crawl_for(&client, &server.url(), 8, Duration::from_millis(15_050)).await;
    let at = times(&server);
    // 8 at once at 0 (all sent while closed), then one probe at 1 s, 3 s,
    // 7 s and 15 s; the last is answered 200 and the workers go again.
    assert_eq!(&at[..8], ms(&[0; 8]).as_slice());
    assert_eq!(&at[8..12], ms(&[1_000, 3_000, 7_000, 15_000]).as_slice());
    assert_eq!(at.len(), 12, "{at:?}");
    let statuses: Vec<u16> = server
        .requests()
        .iter()
        .map(|r| r.status.as_u16())
        .collect();
    assert_eq!(statuses[11], 500);
    let refused = results
        .iter()
        .filter(|r| matches!(r, Err(Error::CircuitOpen { attempts: 0, .. })))
        .count();
    assert_eq!(refused + 12, results.len());
    assert_eq!(
        circuit_changes(&log),
        [
            ("closed", "open"),
            ("open", "half_open"),
            ("half_open", "open"),
            ("open", "half_open"),
            ("half_open", "open"),
            ("open", "half_open"),
            ("half_open", "open"),
            ("open", "half_open"),
            ("half_open", "open"),
        ]
    );
    let key = host_key(&server);
    let status = client.key_status("host", &key).unwrap();
    match status.circuit {
        // The workers' last tick was at 15.1 s.
        Some(CircuitState::Open { retry_in, .. }) => {
            assert_eq!(retry_in, Duration::from_millis(8_000 - 100))
        }
        other => panic!("unexpected {other:?}"),
    }
    // The failures stop; the probe at 23 s succeeds and closes it.
    tokio::time::sleep(Duration::from_millis(7_900)).await;
    assert_eq!(client.get(server.url()).send().await.unwrap().status(), 200);
    assert!(matches!(
        client.key_status("host", &key).unwrap().circuit,
        Some(CircuitState::Closed { failures: 0, .. })
    ));
    assert_eq!(circuit_changes(&log).last(), Some(&("half_open", "closed")));
    assert_eq!(client.get(server.url()).send().await.unwrap().status(), 200);
}

/// A retryable 5xx is retried as before while the breaker stays closed;
/// the attempt that opens it ends the call at once, with the breaker's
/// error and the last status.
#[tokio::test(start_paused = true)]
async fn retries_go_on_until_the_breaker_opens() {
    let server = slow_server(Duration::ZERO).await;
    server.inject(Fault::new(reqwest::StatusCode::BAD_GATEWAY).times(100));
    let log = Arc::default();
    let client = breaking_client(&log);
    let start = Instant::now();
    match client.get(server.url()).send().await {
        Err(Error::CircuitOpen {
            attempts: 3,
            last_status: Some(status),
            retry_in: Some(retry_in),
            ..
        }) => {
            assert_eq!(status, 502);
            assert_eq!(retry_in, Duration::from_secs(1));
        }
        other => panic!("unexpected {other:?}"),
    }
    // 100 and 200 ms of backoff, then no sleep: the breaker opened.
    assert_eq!(times(&server), ms(&[0, 100, 300]));
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    // Without a breaker, the same host gets the policy's four attempts.
    let plain = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(fast_host())
        .retry(no_jitter())
        .build()
        .unwrap();
    let error = plain.get(server.url()).send().await.unwrap_err();
    assert!(
        matches!(error, Error::RetriesExhausted { attempts: 4, .. }),
        "{error:?}"
    );
}

/// 429s and 503s are the pacing's business: however many, they never open
/// the breaker, and they set the count of failures back to zero.
#[tokio::test(start_paused = true)]
async fn throttling_never_opens_the_breaker() {
    let server = slow_server(Duration::ZERO).await;
    for _ in 0..5 {
        server.inject(Fault::internal_server_error().times(2));
        server.inject(Fault::service_unavailable());
        server.inject(Fault::too_many_requests());
    }
    let log = Arc::default();
    let client = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(fast_host().circuit_breaker(breaker()))
        .retry(no_jitter().with_max_attempts(1))
        .on_event(events_into(&log))
        .build()
        .unwrap();
    for _ in 0..20 {
        let result = client.get(server.url()).send().await;
        assert!(
            !matches!(result, Err(Error::CircuitOpen { .. })),
            "{result:?}"
        );
    }
    assert_eq!(server.requests().len(), 20);
    assert!(circuit_changes(&log).is_empty());
}

/// A host that refuses connections: each call is retried until the
/// breaker opens, then calls fail at once; the host gets one connection
/// attempt per cool-down.
#[tokio::test(start_paused = true)]
async fn a_dead_host_gets_one_connection_attempt_per_cool_down() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/");
    let start = Instant::now();
    let sends: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let sink = Arc::clone(&sends);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(fast_host().circuit_breaker(breaker()))
        .retry(no_jitter())
        .without_retry_budget()
        .on_event(move |e| {
            if matches!(e, Event::Sent { .. }) {
                sink.lock().unwrap().push(start.elapsed());
            }
        })
        .build()
        .unwrap();
    let results = crawl_for(&client, &url, 4, Duration::from_millis(7_050)).await;
    // 4 at once at 0 (the third failure opens the breaker), then one probe
    // at 1 s, 3 s and 7 s; nothing else reaches the host.
    assert_eq!(
        *sends.lock().unwrap(),
        ms(&[0, 0, 0, 0, 1_000, 3_000, 7_000])
    );
    // Every call ends in the breaker's error: the first ones when their
    // retry finds it open, the probes as soon as they fail.
    let other: Vec<_> = results
        .iter()
        .filter(|r| !matches!(r, Err(Error::CircuitOpen { .. })))
        .collect();
    assert!(other.is_empty(), "{other:#?}");
}

/// `clear_key` closes an open breaker.
#[tokio::test(start_paused = true)]
async fn clearing_a_key_closes_its_breaker() {
    let server = slow_server(Duration::ZERO).await;
    server.inject(Fault::internal_server_error().times(3));
    let log = Arc::default();
    let client = breaking_client(&log);
    for _ in 0..3 {
        assert_eq!(client.get(server.url()).send().await.unwrap().status(), 500);
    }
    let key = host_key(&server);
    assert!(matches!(
        client.key_status("host", &key).unwrap().circuit,
        Some(CircuitState::Open { .. })
    ));
    assert!(client.clear_key("host", &key).await);
    assert_eq!(client.get(server.url()).send().await.unwrap().status(), 200);
    assert_eq!(
        circuit_changes(&log),
        [("closed", "open"), ("open", "closed")]
    );
}

#[cfg(feature = "robots")]
mod robots {
    use super::*;
    use reqwest_pace::Robots;

    async fn site(robots_txt: &str) -> RateLimitedServer {
        RateLimitedServer::builder()
            .limit(RequestRate::per_second(100_000).unwrap())
            .burst(100_000)
            .dialect(Dialect::None)
            .robots_txt(robots_txt)
            .start()
            .await
            .unwrap()
    }

    fn polite_client(robots: Robots) -> ThrottledClient {
        ThrottledClient::builder(reqwest::Client::new())
            .host_scope(fast_host())
            .retry(no_jitter())
            .release_jitter(ReleaseJitter::none())
            .robots(robots)
            .build()
            .unwrap()
    }

    fn paths(server: &RateLimitedServer) -> Vec<String> {
        server.requests().into_iter().map(|r| r.path).collect()
    }

    /// A disallowed path fails at once and never reaches the host; the
    /// robots.txt is fetched once for every call.
    #[tokio::test(start_paused = true)]
    async fn a_disallowed_path_is_never_sent() {
        let server = site("User-agent: *\nDisallow: /private\nAllow: /private/open\n").await;
        let client = polite_client(Robots::new("pacebot"));
        for path in ["/a", "/private/x", "/b", "/private", "/private/open?q=1"] {
            let result = client.get(format!("{}{path}", server.url())).send().await;
            match (path, result) {
                (
                    "/private/x" | "/private",
                    Err(Error::RobotsDisallowed {
                        url, unavailable, ..
                    }),
                ) => {
                    assert!(url.ends_with(path), "{url}");
                    assert!(!unavailable);
                }
                (_, Ok(response)) => assert_eq!(response.status(), 200, "{path}"),
                (_, other) => panic!("{path}: unexpected {other:?}"),
            }
        }
        assert_eq!(paths(&server), ["/robots.txt", "/a", "/b", "/private/open"]);
    }

    /// Sixteen calls at once to a host whose robots.txt asks a Crawl-delay
    /// of 2 s: one fetch of the robots.txt, then one page every 2 s exactly
    /// (the fetch counts as a request), whatever the host scope allows.
    #[tokio::test(start_paused = true)]
    async fn crawl_delay_spaces_every_send_exactly() {
        let server = site("User-agent: *\nCrawl-delay: 2\n").await;
        let client = ThrottledClient::builder(reqwest::Client::new())
            .robots(Robots::new("pacebot"))
            .build()
            .unwrap();
        let calls: Vec<_> = (0..16)
            .map(|i| spawn_get(&client, &format!("{}/page/{i}", server.url())))
            .collect();
        for call in calls {
            assert_eq!(call.await.unwrap().unwrap().status(), 200);
        }
        let at = times(&server);
        let expected: Vec<Duration> = (0..17).map(|i| Duration::from_secs(2 * i)).collect();
        assert_eq!(at, expected);
        assert_eq!(paths(&server)[0], "/robots.txt");
        let status = client.key_status("host", &host_key(&server)).unwrap();
        assert_eq!(status.crawl_delay, Some(Duration::from_secs(2)));
    }

    /// Our group's Request-rate applies to us (the longer of it and
    /// Crawl-delay); another agent falls to the `*` group, which shuts it
    /// out.
    #[tokio::test(start_paused = true)]
    async fn rules_apply_per_user_agent() {
        let server = site(
            "User-agent: PaceBot\nRequest-rate: 1/3s\nCrawl-delay: 1\n\n\
             User-agent: *\nDisallow: /\n",
        )
        .await;
        let ours = polite_client(Robots::new("pacebot"));
        for i in 0..3 {
            ours.get(format!("{}/p{i}", server.url()))
                .send()
                .await
                .unwrap();
        }
        assert_eq!(times(&server), ms(&[0, 3_000, 6_000, 9_000]));
        let other = polite_client(Robots::new("otherbot"));
        let refused = other.get(format!("{}/p0", server.url())).send().await;
        assert!(
            matches!(
                refused,
                Err(Error::RobotsDisallowed {
                    unavailable: false,
                    ..
                })
            ),
            "{refused:?}"
        );
        // The other client fetched its own copy, and sent nothing else.
        assert_eq!(server.requests().len(), 4 + 1);
    }

    /// A robots.txt that is missing (404) allows everything, with no delay.
    #[tokio::test(start_paused = true)]
    async fn a_missing_robots_txt_allows_everything() {
        let server = site("User-agent: *\nDisallow: /\n").await;
        server.inject(Fault::new(reqwest::StatusCode::NOT_FOUND));
        let client = polite_client(Robots::new("pacebot"));
        for _ in 0..3 {
            client
                .get(format!("{}/x", server.url()))
                .send()
                .await
                .unwrap();
        }
        assert_eq!(paths(&server), ["/robots.txt", "/x", "/x", "/x"]);
        assert_eq!(times(&server), ms(&[0, 0, 0, 0]));
    }

    /// That `result` is a call refused because its host's robots.txt could
    /// not be had.
    fn assert_unavailable(result: Result<reqwest::Response, Error>) {
        assert!(
            matches!(
                result,
                Err(Error::RobotsDisallowed {
                    unavailable: true,
                    ..
                })
            ),
            "{result:?}"
        );
    }

    /// A robots.txt answered 500 disallows every path for `unavailable_for`
    /// (nothing sent, not even a new fetch), then it is fetched again.
    #[tokio::test(start_paused = true)]
    async fn an_unavailable_robots_txt_disallows_for_a_while() {
        let server = site("User-agent: *\nDisallow: /private\n").await;
        server.inject(Fault::internal_server_error());
        let client = polite_client(Robots::new("pacebot").unavailable_for(Duration::from_secs(30)));
        let url = format!("{}/page", server.url());
        for _ in 0..3 {
            assert_unavailable(client.get(&url).send().await);
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        // 30 s after the 500: fetched again, and allowed.
        assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
        assert_eq!(paths(&server), ["/robots.txt", "/robots.txt", "/page"]);
        assert_eq!(times(&server), ms(&[0, 30_000, 30_000]));
    }

    /// A host that does not answer its robots.txt within the fetch timeout
    /// is unavailable: the call fails at the timeout, not later.
    #[tokio::test(start_paused = true)]
    async fn the_fetch_is_bounded_in_time() {
        let server = RateLimitedServer::builder()
            .limit(RequestRate::per_second(1_000).unwrap())
            .latency(Duration::from_secs(60))
            .robots_txt("User-agent: *\nAllow: /\n")
            .start()
            .await
            .unwrap();
        let client = polite_client(Robots::new("pacebot").fetch_timeout(Duration::from_secs(5)));
        let start = Instant::now();
        assert_unavailable(client.get(format!("{}/page", server.url())).send().await);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    /// The robots.txt is fetched as any call is: paced by the host's
    /// bucket (a ceiling of 1/s here: the first page waits its second),
    /// and again once its TTL is over, spaced from the last page by the
    /// Crawl-delay like any send.
    #[tokio::test(start_paused = true)]
    async fn the_fetch_is_paced_and_repeated_after_its_ttl() {
        let server = site("User-agent: *\nCrawl-delay: 2\n").await;
        let client = ThrottledClient::builder(reqwest::Client::new())
            .rate(RequestRate::per_second(1).unwrap())
            .burst(1)
            .robots(Robots::new("pacebot").ttl(Duration::from_secs(5)))
            .build()
            .unwrap();
        for _ in 0..4 {
            client
                .get(format!("{}/p", server.url()))
                .send()
                .await
                .unwrap();
        }
        // robots.txt at 0, pages at 2, 4 and 6 s (the third call began at
        // 4 s, within the TTL); the fourth begins at 6 s, past it: the
        // robots.txt again, 2 s after the last page, then its page 2 s
        // after that.
        assert_eq!(
            paths(&server),
            ["/robots.txt", "/p", "/p", "/p", "/robots.txt", "/p"]
        );
        assert_eq!(times(&server), ms(&[0, 2_000, 4_000, 6_000, 8_000, 10_000]));
    }

    /// What lies past `max_size` is not read: a Disallow there is ignored.
    #[tokio::test(start_paused = true)]
    async fn the_fetch_is_bounded_in_size() {
        let padding = format!("# {}\n", "x".repeat(200));
        let server = site(&format!(
            "User-agent: *\nDisallow: /a\n{padding}Disallow: /b\n"
        ))
        .await;
        let client = polite_client(Robots::new("pacebot").max_size(100));
        let a = client.get(format!("{}/a", server.url())).send().await;
        assert!(matches!(a, Err(Error::RobotsDisallowed { .. })), "{a:?}");
        let b = client.get(format!("{}/b", server.url())).send().await;
        assert_eq!(b.unwrap().status(), 200);
    }
}

/// A host answering in 100 ms alone and 100 ms slower for each request it
/// already holds, crawled by 16 workers.
async fn slowing_host() -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(RequestRate::per_second(100_000).unwrap())
        .burst(100_000)
        .dialect(Dialect::None)
        .latency(Duration::from_millis(100))
        .latency_per_in_flight(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

/// 16 workers, 5 pages each; every call must succeed.
async fn sixteen_workers(client: &ThrottledClient, server: &RateLimitedServer) {
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (client, url) = (client.clone(), server.url());
            tokio::spawn(async move {
                for _ in 0..5 {
                    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
}

fn worst_latency(server: &RateLimitedServer) -> Duration {
    server
        .requests()
        .iter()
        .map(|r| r.latency)
        .max()
        .unwrap_or_default()
}

/// With latency-aware politeness a host that slows down under load keeps
/// its latency within twice its unloaded 100 ms; without it, the same
/// crawl holds 16 requests there at once and waits 1.6 s for answers.
#[tokio::test(start_paused = true)]
async fn a_host_that_slows_under_load_stays_within_twice_its_latency() {
    let server = slowing_host().await;
    let polite = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(fast_host().auto_throttle(AutoThrottle::default()))
        .build()
        .unwrap();
    sixteen_workers(&polite, &server).await;
    assert_eq!(server.requests().len(), 80);
    assert!(
        worst_latency(&server) <= Duration::from_millis(200),
        "{:?}",
        worst_latency(&server)
    );
    assert!(server.peak_in_flight() <= 2);
    let delay = polite
        .key_status("host", &host_key(&server))
        .unwrap()
        .auto_throttle_delay
        .unwrap();
    assert!(
        (Duration::from_millis(100)..=Duration::from_millis(200)).contains(&delay),
        "{delay:?}"
    );

    let hammered = slowing_host().await;
    let blunt = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(fast_host())
        .build()
        .unwrap();
    sixteen_workers(&blunt, &hammered).await;
    assert_eq!(hammered.peak_in_flight(), 16);
    assert_eq!(worst_latency(&hammered), Duration::from_millis(1_600));
}

/// The delay only adds to the key's waits: a host that answers at once is
/// still held to the scope's ceiling of 2 per second.
#[tokio::test(start_paused = true)]
async fn latency_never_lifts_the_ceiling() {
    let server = slow_server(Duration::from_millis(10)).await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(2).unwrap())
        .burst(1)
        .auto_throttle(AutoThrottle::default().start_delay(Duration::ZERO))
        .build()
        .unwrap();
    for _ in 0..4 {
        client.get(server.url()).send().await.unwrap();
    }
    // Answered 10 ms after each send, sent every 500 ms.
    assert_eq!(times(&server), ms(&[10, 510, 1_010, 1_510]));
    let status = client.key_status("host", &host_key(&server)).unwrap();
    assert_eq!(status.auto_throttle_delay, Some(Duration::from_millis(10)));
}
