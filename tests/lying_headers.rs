//! A server whose rate-limit headers contradict themselves (a limit of 0,
//! more remaining than the limit, a reset in the past) gets a reading that
//! still makes progress, one `tracing` warning per key, and no hang, panic
//! or runaway rate. Real clock (httpmock); only what cannot depend on the
//! machine's load is asserted.
#![cfg(feature = "client")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use httpmock::prelude::*;
use reqwest_pace::ThrottledClient;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Counts the crate's warnings.
#[derive(Clone, Default)]
struct Warnings(Arc<AtomicUsize>);

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() == Level::WARN && meta.target() == "reqwest_pace" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn calls_all_succeed(headers: &[(&str, &str)]) -> usize {
    let server = MockServer::start_async().await;
    server
        .mock_async(|when, then| {
            when.path("/lies");
            let mut then = then.status(200);
            for (name, value) in headers {
                then = then.header(*name, *value);
            }
        })
        .await;
    let warnings = Warnings::default();
    let subscriber = tracing_subscriber::registry().with(warnings.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let client = ThrottledClient::new(reqwest::Client::new()).unwrap();
    let url = server.url("/lies");
    let all = async {
        for _ in 0..10 {
            let response = client.get(&url).send().await.expect("every call succeeds");
            assert_eq!(response.status(), 200);
        }
    };
    // A hang would be a bug; a minute is far beyond any pacing here.
    tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("no hang");
    if let Some(rate) = client.current_rate("host", &format!("http://{}", server.address())) {
        assert!(rate.is_finite() && rate > 0.0 && rate <= 1e6, "{rate}");
    }
    warnings.0.load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_limit_of_zero_with_plenty_remaining() {
    let warned = calls_all_succeed(&[
        ("x-ratelimit-limit", "0"),
        ("x-ratelimit-remaining", "50"),
        ("x-ratelimit-reset", "0"),
    ])
    .await;
    assert_eq!(warned, 1, "warned once for the key");
}

#[tokio::test]
async fn more_remaining_than_the_limit() {
    let warned = calls_all_succeed(&[
        ("x-ratelimit-limit", "10"),
        ("x-ratelimit-remaining", "99"),
        ("x-ratelimit-reset", "1"),
    ])
    .await;
    assert_eq!(warned, 1, "warned once for the key");
}

#[tokio::test]
async fn a_draft7_dictionary_that_lies_and_a_reset_in_the_past() {
    let warned = calls_all_succeed(&[
        ("ratelimit", "limit=5, remaining=9, reset=0"),
        ("date", "Thu, 01 Jan 2026 00:00:00 GMT"),
        ("x-ratelimit-reset", "1700000000"),
    ])
    .await;
    assert_eq!(warned, 1, "warned once for the key");
}

/// A 200 saying nothing remains until the year 5138 is not believed (and
/// said so once): the key is not closed for a day, and the calls go on.
#[tokio::test]
async fn a_200_with_nothing_remaining_until_an_absurd_reset_does_not_close_the_key() {
    let warned = calls_all_succeed(&[
        ("x-ratelimit-limit", "100"),
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "99999999999"),
    ])
    .await;
    assert_eq!(warned, 1);
}
