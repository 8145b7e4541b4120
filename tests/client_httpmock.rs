//! The throttled client against httpmock servers: exact attempt counts and
//! the decided schedule, on the real clock with millisecond backoffs.
#![cfg(feature = "client")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use httpmock::prelude::*;
use reqwest_pace::retry::{Backoff, BackoffJitter, Outcome, RetryBudget, RetryRules};
use reqwest_pace::{Error, ErrorKind, Event, NotRetriedReason, ThrottledClient};

fn fast_backoff() -> Backoff {
    Backoff::exponential(Duration::from_millis(5)).with_jitter(BackoffJitter::None)
}

type Log = Arc<Mutex<Vec<Event>>>;

fn make_client(policy: RetryRules) -> (ThrottledClient, Log) {
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .retry(policy)
        .on_event(move |e| sink.lock().unwrap().push(e.clone()))
        .build()
        .unwrap();
    (client, log)
}

fn retry_delays(log: &Log) -> Vec<Duration> {
    log.lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Retrying { delay, .. } => Some(*delay),
            _ => None,
        })
        .collect()
}

fn attempts_sent(log: &Log) -> usize {
    log.lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::Sent { .. }))
        .count()
}

#[tokio::test]
async fn a_failing_get_is_tried_exactly_max_attempts_times_on_the_backoff_schedule() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.method(GET).path("/flaky");
            then.status(503);
        })
        .await;
    let (client, log) = make_client(
        RetryRules::default()
            .with_max_attempts(4)
            .with_backoff(fast_backoff()),
    );
    let err = client
        .send(client.get(server.url("/flaky")))
        .await
        .unwrap_err();
    match err {
        Error::RetriesExhausted {
            attempts: 4,
            last_status: Some(status),
            ..
        } => assert_eq!(status, 503),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(mock.calls_async().await, 4);
    assert_eq!(attempts_sent(&log), 4);
    assert_eq!(
        retry_delays(&log),
        [5, 10, 20].map(Duration::from_millis).to_vec()
    );
}

#[tokio::test]
async fn final_statuses_are_returned_not_retried() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.path("/missing");
            then.status(404).body("no");
        })
        .await;
    let (client, _) = make_client(RetryRules::default().with_backoff(fast_backoff()));
    let response = client
        .send(client.get(server.url("/missing")))
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(mock.calls_async().await, 1);
}

#[tokio::test]
async fn post_is_not_retried_unless_the_policy_opts_in() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.method(POST).path("/orders");
            then.status(503);
        })
        .await;
    let (client, _) = make_client(RetryRules::default().with_backoff(fast_backoff()));
    let err = client
        .send(client.post(server.url("/orders")).body("{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotRetried {
                reason: NotRetriedReason::NonIdempotent,
                last_status: Some(s),
                ..
            } if s == 503
        ),
        "{err:?}"
    );
    assert_eq!(mock.calls_async().await, 1);

    let (opted_in, _) = make_client(
        RetryRules::default()
            .with_max_attempts(3)
            .with_backoff(fast_backoff())
            .with_retry_non_idempotent(true),
    );
    let err = opted_in
        .send(opted_in.post(server.url("/orders")).body("{}"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::RetriesExhausted { attempts: 3, .. }));
    assert_eq!(mock.calls_async().await, 1 + 3);
}

#[tokio::test]
async fn a_streaming_body_is_sent_once_and_the_error_says_why() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.method(PUT).path("/upload");
            then.status(503);
        })
        .await;
    let (client, log) = make_client(RetryRules::default().with_backoff(fast_backoff()));
    let chunks: Vec<Result<&'static [u8], std::io::Error>> =
        vec![Ok(b"part one, "), Ok(b"part two")];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let err = client
        .send(
            client
                .request(reqwest::Method::PUT, server.url("/upload"))
                .body(body),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotRetried {
                reason: NotRetriedReason::BodyNotCloneable,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("cannot be cloned"), "{err}");
    assert_eq!(mock.calls_async().await, 1);
    assert!(retry_delays(&log).is_empty());
}

#[tokio::test]
async fn a_retry_after_past_the_cap_is_returned_at_once_without_sleeping() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.path("/slow-down");
            then.status(429)
                .header("retry-after", "3600")
                .header("x-request-id", "abc")
                .body("hourly quota spent");
        })
        .await;
    let (client, log) = make_client(
        RetryRules::default()
            .with_backoff(fast_backoff())
            .with_max_retry_after(Duration::from_secs(30)),
    );
    let err = client
        .send(client.get(server.url("/slow-down")))
        .await
        .unwrap_err();
    match err {
        Error::RetryAfterTooLong {
            wait,
            cap,
            status,
            ref last_response,
            ..
        } => {
            assert_eq!(wait, Duration::from_secs(3600));
            assert_eq!(cap, Duration::from_secs(30));
            assert_eq!(status, 429);
            // One attempt, answered with the 429: one of its kind.
            assert_eq!(err.attempts(), Some(1));
            assert!(matches!(err.kind(), ErrorKind::ServerWait { wait: w, .. } if w == wait));
            // What the server said is kept: its headers and body.
            let last = last_response.as_deref().expect("the 429 is kept");
            assert_eq!(last.status, 429);
            assert_eq!(last.headers["x-request-id"], "abc");
            assert_eq!(last.body, b"hourly quota spent");
            assert!(!last.truncated);
            match err.kind() {
                ErrorKind::ServerWait {
                    wait: w, cap: c, ..
                } => {
                    assert_eq!((w, c), (wait, cap))
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(mock.calls_async().await, 1);
    assert!(retry_delays(&log).is_empty(), "it must not sleep");
    // The event says why in the error's own terms.
    let kinds: Vec<ErrorKind> = log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::GaveUp { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec![err.kind()]);
    // The key is closed: the next call fails fast without a request.
    let again = client
        .send(client.get(server.url("/slow-down")))
        .await
        .unwrap_err();
    assert!(matches!(again, Error::RetryAfterTooLong { .. }));
    assert_eq!(again.attempts(), Some(0), "it sent nothing");
    assert_eq!(mock.calls_async().await, 1);
}

/// A server asking for a wait of 10^12 seconds is not believed: the wait
/// is no signal, so the call neither sleeps nor gives up at once; it is
/// retried on the backoff schedule, and the key is not closed for a day.
#[tokio::test]
async fn an_absurd_retry_after_is_not_a_signal() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.path("/absurd");
            then.status(503).header("retry-after", "1000000000000");
        })
        .await;
    let (client, log) = make_client(
        RetryRules::default()
            .with_max_attempts(3)
            .with_backoff(fast_backoff()),
    );
    let err = client
        .send(client.get(server.url("/absurd")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::RetriesExhausted { attempts: 3, .. }),
        "{err:?}"
    );
    assert_eq!(mock.calls_async().await, 3);
    assert_eq!(
        retry_delays(&log),
        [Duration::from_millis(5), Duration::from_millis(10)]
    );
    let key = format!("http://{}", server.address());
    let status = client.key_status("host", &key).expect("the key is known");
    assert_eq!(status.closed_for, None);
}

#[tokio::test]
async fn connect_errors_are_retried() {
    // A port nobody listens on: bind, read the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (client, log) = make_client(
        RetryRules::default()
            .with_max_attempts(3)
            .with_backoff(fast_backoff()),
    );
    let err = client
        .send(client.get(format!("http://127.0.0.1:{port}/")))
        .await
        .unwrap_err();
    match &err {
        Error::RetriesExhausted {
            attempts: 3,
            last_status: None,
            source: Some(source),
            last_response: None,
            ..
        } => assert!(source.is_connect()),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(attempts_sent(&log), 3);
}

#[tokio::test]
async fn a_custom_classifier_decides() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.path("/teapot");
            then.status(418);
        })
        .await;
    let (client, _) = make_client(
        RetryRules::default()
            .with_max_attempts(2)
            .with_backoff(fast_backoff())
            .with_classifier(|r: Result<&reqwest::Response, &reqwest::Error>| match r {
                Ok(resp) if resp.status() == 418 => Outcome::Retryable,
                Ok(_) => Outcome::Success,
                Err(_) => Outcome::Fatal,
            }),
    );
    let err = client
        .send(client.get(server.url("/teapot")))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::RetriesExhausted { attempts: 2, .. }));
    assert_eq!(mock.calls_async().await, 2);
}

#[tokio::test]
async fn the_retry_budget_stops_a_retry_storm() {
    let server = MockServer::start_async().await;
    let mock = server
        .mock_async(|when, then| {
            when.path("/down");
            then.status(502);
        })
        .await;
    let log: Log = Arc::default();
    let sink = Arc::clone(&log);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .retry(
            RetryRules::default()
                .with_max_attempts(5)
                .with_backoff(fast_backoff()),
        )
        .retry_budget(RetryBudget::new(10.0, 0.1).unwrap())
        .on_event(move |e| sink.lock().unwrap().push(e.clone()))
        .build()
        .unwrap();
    let mut budget_errors = 0;
    for _ in 0..20 {
        match client.send(client.get(server.url("/down"))).await {
            Err(Error::BudgetExhausted { .. }) => budget_errors += 1,
            Err(Error::RetriesExhausted { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // Budget of 10 allows retries while more than 5 tokens remain: the first
    // request fails 5 times (10 -> 5 tokens, its 5th attempt is the last),
    // so from the second request on none is retried.
    assert_eq!(budget_errors, 19);
    assert_eq!(mock.calls_async().await, 5 + 19);
}

/// reqwest's own errors convert into the crate's, so `?` works on both in
/// one function; a request that cannot be built fails before any attempt.
#[tokio::test]
async fn a_request_that_cannot_be_built_is_a_transport_error_with_no_attempt() {
    fn build() -> Result<reqwest::Request, Error> {
        Ok(reqwest::Client::new().get("not a url").build()?)
    }
    assert!(matches!(build(), Err(Error::Transport { attempts: 0, .. })));
    let (client, log) = make_client(RetryRules::default());
    let err = client.get("not a url").send().await.unwrap_err();
    assert!(
        matches!(err, Error::Transport { attempts: 0, .. }),
        "{err:?}"
    );
    assert!(log.lock().unwrap().is_empty(), "nothing was sent");
}
