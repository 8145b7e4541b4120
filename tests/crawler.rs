//! A polite crawler's rules, against the embedded server on tokio's paused
//! clock: a cap on requests in flight per host, a circuit breaker per
//! host, and (feature `robots`) a site's robots.txt.
#![cfg(feature = "testing")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest_pace::retry::{Backoff, Jitter, ReleaseJitter, RetryPolicy};
use reqwest_pace::testing::{Dialect, Fault, RateLimitedServer};
use reqwest_pace::{Error, Event, Rate, Scope, ThrottledClient};
use tokio::time::Instant;

fn ms(v: &[u64]) -> Vec<Duration> {
    v.iter().map(|&m| Duration::from_millis(m)).collect()
}

fn times(server: &RateLimitedServer) -> Vec<Duration> {
    server.requests().iter().map(|r| r.at).collect()
}

fn no_jitter() -> RetryPolicy {
    RetryPolicy::default()
        .with_backoff(Backoff::exponential(Duration::from_millis(100)).with_jitter(Jitter::None))
}

/// A server that admits everything and answers each request after
/// `latency`, with no rate-limit headers.
async fn slow_server(latency: Duration) -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(Rate::per_second(100_000).unwrap())
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
        .rate(Rate::per_second(100_000).unwrap())
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
        .deadline(Duration::from_secs(1))
        .send()
        .await;
    assert!(
        matches!(late, Err(Error::DeadlineExceeded { attempts: 0, .. })),
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

#[allow(dead_code)]
fn events_into(log: &Arc<Mutex<Vec<Event>>>) -> impl Fn(&Event) + Send + Sync + 'static {
    let log = Arc::clone(log);
    move |e| log.lock().unwrap().push(e.clone())
}
