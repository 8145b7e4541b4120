//! Pacing and retries inside a reqwest-middleware chain.
#![cfg(feature = "middleware")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest_middleware::{ClientBuilder, Middleware, Next};
use reqwest_pace::retry::{Backoff, BackoffJitter, ReleaseJitter, RetryRules};
use reqwest_pace::testing::{Fault, RateLimitedServer, RetryAfter};
use reqwest_pace::{PaceMiddleware, Pacer, RequestRate, ThrottledClient, TimeLimit};

/// Counts what reaches it: placed after the pacing middleware, it sees
/// every attempt.
struct Counter(Arc<AtomicU32>);

#[async_trait::async_trait]
impl Middleware for Counter {
    async fn handle(
        &self,
        req: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.fetch_add(1, Ordering::SeqCst);
        next.run(req, extensions).await
    }
}

/// The engine alone, with no `reqwest::Client` of its own (the chain's
/// sends), and exact releases (no jitter after a server's `Retry-After`),
/// so times can be asserted to the millisecond.
fn pace(policy: RetryRules) -> PaceMiddleware {
    PaceMiddleware::new(
        Pacer::builder()
            .retry(policy)
            .release_jitter(ReleaseJitter::none())
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn retries_run_the_rest_of_the_chain_once_per_attempt() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    server.inject(
        Fault::service_unavailable()
            .times(2)
            .retry_after(RetryAfter::Seconds(1)),
    );
    let attempts = Arc::new(AtomicU32::new(0));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(pace(RetryRules::default()))
        .with(Counter(Arc::clone(&attempts)))
        .build();
    let start = tokio::time::Instant::now();
    let response = client.get(server.url()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    let at: Vec<Duration> = server.requests().iter().map(|r| r.at).collect();
    assert_eq!(at, [0, 1, 2].map(Duration::from_secs).to_vec());
}

#[tokio::test(start_paused = true)]
async fn the_crate_error_comes_out_as_a_middleware_error() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    server.inject(Fault::service_unavailable().times(10));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(pace(
            RetryRules::default().with_max_attempts(2).with_backoff(
                Backoff::exponential(Duration::from_millis(10)).with_jitter(BackoffJitter::None),
            ),
        ))
        .build();
    let err = client.get(server.url()).send().await.unwrap_err();
    let reqwest_middleware::Error::Middleware(inner) = err else {
        panic!("expected a middleware error, got {err:?}");
    };
    let ours = inner.downcast_ref::<reqwest_pace::Error>().unwrap();
    assert!(matches!(
        ours,
        reqwest_pace::Error::RetriesExhausted { attempts: 2, .. }
    ));
    assert_eq!(ours.last_status().map(|s| s.as_u16()), Some(503));
}

#[tokio::test(start_paused = true)]
async fn the_chain_is_paced() {
    let server = RateLimitedServer::builder()
        .limit(RequestRate::per_second(1000).unwrap())
        .burst(1000)
        .start()
        .await
        .unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(PaceMiddleware::new(
            ThrottledClient::builder(reqwest::Client::new())
                .rate(RequestRate::per_second(10).unwrap())
                .burst(1)
                .build()
                .unwrap(),
        ))
        .build();
    for _ in 0..5 {
        client.get(server.url()).send().await.unwrap();
    }
    let at: Vec<Duration> = server.requests().iter().map(|r| r.at).collect();
    assert_eq!(
        at,
        [0, 100, 200, 300, 400].map(Duration::from_millis).to_vec()
    );
}

/// The middleware honours a deadline put in the request's extensions: a
/// pacing wait past it fails at once, before the rest of the chain runs.
#[tokio::test(start_paused = true)]
async fn a_deadline_in_the_extensions_bounds_the_middlewares_waits() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let pacing = PaceMiddleware::new(
        ThrottledClient::builder(reqwest::Client::new())
            .rate(RequestRate::per_hour(1).unwrap())
            .burst(1)
            .build()
            .unwrap(),
    );
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(pacing)
        .with(Counter(Arc::clone(&attempts)))
        .build();
    client.get(server.url()).send().await.unwrap();
    let start = tokio::time::Instant::now();
    let err = client
        .get(server.url())
        .with_extension(TimeLimit(Duration::from_secs(1)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    let inner = match err {
        reqwest_middleware::Error::Middleware(e) => e,
        other => panic!("unexpected {other:?}"),
    };
    assert!(
        matches!(
            inner.downcast_ref::<reqwest_pace::Error>(),
            Some(reqwest_pace::Error::TimeLimitExceeded { .. })
        ),
        "{inner:?}"
    );
}

/// A middleware made from a `ThrottledClient` shares its engine: a call
/// through the client and one through the chain draw on one bucket.
#[tokio::test(start_paused = true)]
async fn a_client_and_its_middleware_share_one_bucket() {
    let server = RateLimitedServer::builder().start().await.unwrap();
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(1).unwrap())
        .burst(1)
        .build()
        .unwrap();
    let chain = ClientBuilder::new(reqwest::Client::new())
        .with(PaceMiddleware::new(client.clone()))
        .build();
    let start = tokio::time::Instant::now();
    client.get(server.url()).send().await.unwrap();
    chain.get(server.url()).send().await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

/// A call in a chain carries its `Charge` in the response as the client's
/// does: its cost comes from the chain's extensions, and the body's usage
/// settles it.
#[tokio::test(start_paused = true)]
async fn a_call_in_a_chain_carries_its_charge() {
    use reqwest_pace::headers::Dimension;
    use reqwest_pace::testing::llm::LlmServer;
    use reqwest_pace::{Charge, Cost, Scope, UsageBody};

    let server = LlmServer::builder()
        .output_share(50, 50)
        .start()
        .await
        .unwrap();
    let pacer = Pacer::builder()
        .scope(
            Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens),
        )
        .reconcile(UsageBody)
        .build()
        .unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(PaceMiddleware::new(pacer))
        .build();
    let response = client
        .post(format!("{}/v1/chat/completions", server.url()))
        .body(r#"{"input_tokens": 100, "max_tokens": 400}"#)
        .with_extension(Cost::default().with(Dimension::Tokens, 500))
        .send()
        .await
        .unwrap();
    let charge = Charge::of(&response).expect("a charge");
    assert_eq!(charge.estimate().get(&Dimension::Tokens), 500);
    let body = response.bytes().await.unwrap();
    let used = charge.settle_body(&body).expect("usage");
    assert_eq!(used.get(&Dimension::Tokens), 300);
    assert!(charge.is_settled());
}
