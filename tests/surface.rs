//! reqwest's whole shape: every builder method reqwest has, `patch`, and a
//! call's `Cost` and `TimeLimit` honoured alike by the client, the
//! middleware and the tower service (through request extensions), on
//! tokio's paused clock.
#![cfg(all(
    feature = "json",
    feature = "query",
    feature = "form",
    feature = "multipart",
    feature = "middleware",
    feature = "tower",
    feature = "testing"
))]

use std::time::Duration;

use futures::future::poll_fn;
use reqwest_middleware::ClientBuilder;
use reqwest_pace::headers::Dimension;
use reqwest_pace::testing::RateLimitedServer;
use reqwest_pace::{
    Cost, Error, PaceLayer, PaceMiddleware, RequestRate, ThrottledClient, TimeLimit,
};
use tower_layer::Layer;
use tower_service::Service;

fn times(server: &RateLimitedServer) -> Vec<Duration> {
    server.requests().iter().map(|r| r.at).collect()
}

fn ms(v: &[u64]) -> Vec<Duration> {
    v.iter().map(|&m| Duration::from_millis(m)).collect()
}

/// One request a second, in bursts of up to three.
fn three_per_burst() -> ThrottledClient {
    ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(1).unwrap())
        .burst(3)
        .build()
        .unwrap()
}

fn three() -> Cost {
    Cost::default().with(Dimension::Requests, 3)
}

#[tokio::test(start_paused = true)]
async fn patch_sends_a_patch() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let client = ThrottledClient::new(reqwest::Client::new()).unwrap();
    let response = client.patch(server.url()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let methods: Vec<_> = server.requests().iter().map(|r| r.method.clone()).collect();
    assert_eq!(methods, vec![reqwest::Method::PATCH]);
}

#[tokio::test]
async fn the_feature_gated_builder_methods_build_what_reqwest_builds() {
    let client = ThrottledClient::new(reqwest::Client::new()).unwrap();
    let url = "http://example.test/items";

    let query = client.get(url).query(&[("page", "2"), ("q", "a b")]);
    let request = query.build().unwrap();
    assert_eq!(request.url().query(), Some("page=2&q=a+b"));

    let json = client
        .post(url)
        .json(&serde_json::json!({"name": "x"}))
        .build()
        .unwrap();
    assert_eq!(json.headers()["content-type"], "application/json");
    let body = json.body().and_then(|b| b.as_bytes()).unwrap();
    assert_eq!(body, br#"{"name":"x"}"#);

    let form = client
        .post(url)
        .form(&[("a", "1"), ("b", "2")])
        .build()
        .unwrap();
    assert_eq!(
        form.headers()["content-type"],
        "application/x-www-form-urlencoded"
    );
    assert_eq!(form.body().and_then(|b| b.as_bytes()).unwrap(), b"a=1&b=2");

    let multipart = client
        .post(url)
        .multipart(reqwest::multipart::Form::new().text("k", "v"))
        .build()
        .unwrap();
    let content_type = multipart.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("multipart/form-data; boundary="),
        "{content_type}"
    );

    let versioned = client
        .get(url)
        .version(reqwest::Version::HTTP_11)
        .build()
        .unwrap();
    assert_eq!(versioned.version(), reqwest::Version::HTTP_11);
}

#[tokio::test(start_paused = true)]
async fn a_cloned_builder_keeps_its_cost() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let client = three_per_burst();
    let builder = client.get(server.url()).cost(three());
    let copy = builder.try_clone().unwrap();
    builder.send().await.unwrap();
    // The copy spends three as well: it waits three seconds of refill.
    copy.send().await.unwrap();
    assert_eq!(times(&server), ms(&[0, 3_000]));
}

/// The client's own builder: a cost of three empties the bucket of three,
/// and the next call waits a second for one token.
#[tokio::test(start_paused = true)]
async fn the_client_spends_the_builders_cost() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let client = three_per_burst();
    client.get(server.url()).cost(three()).send().await.unwrap();
    client.get(server.url()).send().await.unwrap();
    assert_eq!(times(&server), ms(&[0, 1_000]));
}

/// A `GET` of `server` as an `http::Request` whose extensions carry a
/// deadline of half a second.
fn with_half_a_second_deadline(server: &RateLimitedServer) -> http::Request<Vec<u8>> {
    let mut request = http::Request::get(server.url()).body(Vec::new()).unwrap();
    request
        .extensions_mut()
        .insert(TimeLimit(Duration::from_millis(500)));
    request
}

/// `ThrottledClient::send` of an `http::Request` reads its extensions.
#[tokio::test(start_paused = true)]
async fn the_client_spends_the_cost_in_an_http_requests_extensions() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let client = three_per_burst();
    let mut request = http::Request::get(server.url()).body(Vec::new()).unwrap();
    request.extensions_mut().insert(three());
    client.send(request).await.unwrap();
    client.get(server.url()).send().await.unwrap();
    assert_eq!(times(&server), ms(&[0, 1_000]));
    // A deadline there bounds the wait: the next token is a second away.
    let request = with_half_a_second_deadline(&server);
    let start = tokio::time::Instant::now();
    let err = client.send(request).await.unwrap_err();
    assert!(matches!(err, Error::TimeLimitExceeded { .. }), "{err:?}");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

/// A middleware chain paced by [`three_per_burst`].
fn paced_chain() -> reqwest_middleware::ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(PaceMiddleware::new(three_per_burst()))
        .build()
}

/// Without a cost in the extensions a call spends one request: the
/// second of two goes at once from the bucket of three.
#[tokio::test(start_paused = true)]
async fn the_middleware_spends_one_request_without_a_cost() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let chain = paced_chain();
    chain.get(server.url()).send().await.unwrap();
    chain.get(server.url()).send().await.unwrap();
    assert_eq!(times(&server), ms(&[0, 0]));
}

#[tokio::test(start_paused = true)]
async fn the_middleware_spends_the_cost_in_its_extensions() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let chain = paced_chain();
    chain
        .get(server.url())
        .with_extension(three())
        .send()
        .await
        .unwrap();
    chain.get(server.url()).send().await.unwrap();
    assert_eq!(times(&server), ms(&[0, 1_000]));
}

#[tokio::test(start_paused = true)]
async fn the_tower_service_spends_the_cost_and_keeps_the_deadline_in_an_http_requests_extensions() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let mut service = PaceLayer::new(three_per_burst())
        .layer(reqwest::Client::new())
        .for_http_requests::<Vec<u8>>();
    let mut request = http::Request::get(server.url()).body(Vec::new()).unwrap();
    request.extensions_mut().insert(three());
    poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
    service.call(request).await.unwrap();
    // No cost: one request, a second of refill away.
    let request = http::Request::get(server.url()).body(Vec::new()).unwrap();
    poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
    service.call(request).await.unwrap();
    assert_eq!(times(&server), ms(&[0, 1_000]));
    // A deadline shorter than the next token's second fails at once.
    let request = with_half_a_second_deadline(&server);
    let start = tokio::time::Instant::now();
    poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
    let err = service.call(request).await.unwrap_err();
    assert!(matches!(err, Error::TimeLimitExceeded { .. }), "{err:?}");
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(server.requests().len(), 2);
}
