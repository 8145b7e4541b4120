//! Pacing and retries as a tower layer over a `reqwest::Client`, on
//! tokio's paused clock: exact virtual schedules.
#![cfg(all(feature = "tower", feature = "testing"))]

use std::time::Duration;

use futures::future::poll_fn;
use reqwest_pace::retry::{Backoff, BackoffJitter, ReleaseJitter, RetryRules};
use reqwest_pace::testing::{Fault, RateLimitedServer, RetryAfter};
use reqwest_pace::{Error, PaceLayer, PaceService, Pacer, RequestRate};
use tower_layer::Layer;
use tower_service::Service;

fn times(server: &RateLimitedServer) -> Vec<Duration> {
    server.requests().iter().map(|r| r.at).collect()
}

fn ms(v: &[u64]) -> Vec<Duration> {
    v.iter().map(|&m| Duration::from_millis(m)).collect()
}

fn service(pacer: Pacer) -> PaceService<reqwest::Client> {
    PaceLayer::new(pacer).layer(reqwest::Client::new())
}

async fn get(
    service: &mut PaceService<reqwest::Client>,
    url: &str,
) -> Result<reqwest::Response, Error> {
    poll_fn(|cx| service.poll_ready(cx)).await?;
    let url = reqwest::Url::parse(url).map_err(|e| Error::InvalidConfig(e.to_string()))?;
    service
        .call(reqwest::Request::new(reqwest::Method::GET, url))
        .await
}

#[tokio::test(start_paused = true)]
async fn the_tower_service_paces_at_the_configured_rate() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let pacer = Pacer::builder()
        .rate(RequestRate::per_second(10).unwrap())
        .burst(1)
        .build()
        .unwrap();
    let mut service = service(pacer);
    for _ in 0..3 {
        let response = get(&mut service, &server.url()).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(times(&server), ms(&[0, 100, 200]));
}

#[tokio::test(start_paused = true)]
async fn the_tower_service_retries_after_the_servers_wait_and_learns() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    server.inject(
        Fault::service_unavailable()
            .times(2)
            .retry_after(RetryAfter::Seconds(1)),
    );
    let pacer = Pacer::builder()
        .retry(RetryRules::default().with_backoff(
            Backoff::exponential(Duration::from_millis(100)).with_jitter(BackoffJitter::None),
        ))
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap();
    let mut service = service(pacer.clone());
    let response = get(&mut service, &server.url()).await.unwrap();
    assert_eq!(response.status(), 200);
    // Two 503s, each retried after its second.
    assert_eq!(times(&server), ms(&[0, 1_000, 2_000]));
    // The engine behind the layer is the pacer given: it knows the key.
    let host = format!("http://{}:{}", server.addr().ip(), server.addr().port());
    assert!(pacer.key_status("host", &host).is_some());
}

#[tokio::test(start_paused = true)]
async fn the_tower_service_gives_up_with_the_crates_error() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    server.inject(Fault::service_unavailable().times(10));
    let pacer = Pacer::builder()
        .retry(RetryRules::default().with_max_attempts(2).with_backoff(
            Backoff::exponential(Duration::from_millis(10)).with_jitter(BackoffJitter::None),
        ))
        .build()
        .unwrap();
    let mut service = service(pacer);
    let err = get(&mut service, &server.url()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::RetriesExhausted {
                attempts: 2,
                last_status: Some(s),
                ..
            } if s == 503
        ),
        "{err:?}"
    );
    assert_eq!(times(&server), ms(&[0, 10]));
}
