//! The model of an LLM API, driven by a plain reqwest client on one paused
//! current-thread runtime, so the server's times are the client's virtual
//! times.
#![cfg(feature = "testing")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{Client, StatusCode};
use reqwest_pace::headers::{Dimension, RateLimitSignal};
use reqwest_pace::testing::llm::{LlmDialect, LlmLimit, LlmServer, LlmServerBuilder};
use serde_json::Value;
use tokio::time::{sleep, sleep_until, Instant};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

/// One answer, read whole.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Value,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// The limit a refusal names: OpenAI's error `type`.
    fn error_type(&self) -> &str {
        self.body["error"]["type"].as_str().unwrap_or("")
    }

    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }

    /// The usage an admitted call reports, as (input, output), in either
    /// dialect's body.
    fn usage(&self) -> (u64, u64) {
        let usage = &self.body["usage"];
        match (usage.get("prompt_tokens"), usage.get("input_tokens")) {
            (Some(prompt), _) => {
                let (i, o) = (
                    prompt.as_u64().unwrap(),
                    usage["completion_tokens"].as_u64().unwrap(),
                );
                assert_eq!(usage["total_tokens"].as_u64(), Some(i + o));
                (i, o)
            }
            (None, Some(input)) => (
                input.as_u64().unwrap(),
                usage["output_tokens"].as_u64().unwrap(),
            ),
            (None, None) => panic!("no usage in {}", self.body),
        }
    }

    fn signal(&self) -> RateLimitSignal {
        RateLimitSignal::parse(self.status.as_u16(), &self.headers, SystemTime::now())
    }
}

async fn call(client: &Client, server: &LlmServer, input: u64, max_tokens: u64) -> Reply {
    let body = format!(r#"{{"input_tokens": {input}, "max_tokens": {max_tokens}}}"#);
    send(client, server, body).await
}

async fn send(client: &Client, server: &LlmServer, body: String) -> Reply {
    let response = client
        .post(format!("{}/v1/chat/completions", server.url()))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    Reply {
        status,
        headers,
        body,
    }
}

async fn start(builder: LlmServerBuilder) -> (LlmServer, Client, Instant) {
    let server = builder.start().await.unwrap();
    (server, Client::new(), Instant::now())
}

/// The instants (since the server started) of the calls admitted so far.
fn admitted_at(server: &LlmServer) -> Vec<Duration> {
    server
        .requests()
        .iter()
        .filter(|r| r.refused.is_none())
        .map(|r| r.at)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn requests_refuse_once_the_bucket_is_empty_and_admit_at_the_exact_refill() {
    // 3 a minute: one more every 20 s.
    let (server, client, t0) = start(LlmServer::builder().requests_per_minute(3)).await;
    let mut resets = Vec::new();
    for left in ["2", "1", "0"] {
        let r = call(&client, &server, 1, 1).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-remaining-requests"), Some(left));
        resets.push(r.header("x-ratelimit-reset-requests").unwrap().to_owned());
    }
    assert_eq!(resets, ["20s", "40s", "1m0s"]);

    let refused = call(&client, &server, 1, 1).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.error_type(), "requests");
    assert_eq!(refused.header("retry-after-ms"), Some("20000"));
    assert_eq!(refused.header("retry-after"), Some("20"));
    assert_eq!(refused.header("x-ratelimit-remaining-requests"), Some("0"));

    sleep_until(t0 + 20 * SEC - MS).await;
    let early = call(&client, &server, 1, 1).await;
    assert_eq!(early.status, 429);
    assert_eq!(early.header("retry-after-ms"), Some("1"));
    sleep_until(t0 + 20 * SEC).await;
    assert_eq!(call(&client, &server, 1, 1).await.status, 200);

    assert_eq!(
        admitted_at(&server),
        [Duration::ZERO, Duration::ZERO, Duration::ZERO, 20 * SEC]
    );
    let stats = server.stats();
    assert_eq!(stats.refused(LlmLimit::Requests), 2);
    assert_eq!(stats.refused_total(), 2);
    let waits: Vec<_> = server
        .requests()
        .iter()
        .filter_map(|r| r.retry_after)
        .collect();
    assert_eq!(waits, [20 * SEC, MS]);
}

#[tokio::test(start_paused = true)]
async fn tokens_bind_when_calls_are_large() {
    // 10 000 tokens a minute (6 ms a token) and 1 000 requests: calls of
    // 4 000 tokens that use them all meet the tokens first.
    let builder = LlmServer::builder()
        .requests_per_minute(1_000)
        .tokens_per_minute(10_000)
        .output_share(100, 100);
    let (server, client, t0) = start(builder).await;
    assert_eq!(call(&client, &server, 3_000, 1_000).await.status, 200);
    let second = call(&client, &server, 3_000, 1_000).await;
    assert_eq!(second.header("x-ratelimit-remaining-tokens"), Some("2000"));
    assert_eq!(second.header("x-ratelimit-remaining-requests"), Some("998"));

    // 2 000 tokens short: 12 s.
    let refused = call(&client, &server, 3_000, 1_000).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.error_type(), "tokens");
    assert_eq!(refused.header("retry-after-ms"), Some("12000"));
    assert!(
        refused
            .message()
            .contains("Limit 10000, Used 8000, Requested 4000"),
        "{}",
        refused.message()
    );

    // A client that waits what it is told is admitted, then one call
    // every 24 s (4 000 tokens at 6 ms).
    for _ in 0..3 {
        loop {
            let r = call(&client, &server, 3_000, 1_000).await;
            if r.status == 200 {
                break;
            }
            let wait: u64 = r.header("retry-after-ms").unwrap().parse().unwrap();
            sleep(Duration::from_millis(wait)).await;
        }
    }
    let secs: Vec<u64> = admitted_at(&server).iter().map(Duration::as_secs).collect();
    assert_eq!(secs, [0, 0, 12, 36, 60]);
    assert_eq!(t0.elapsed(), 60 * SEC);
    let stats = server.stats();
    assert_eq!(stats.refused(LlmLimit::Requests), 0);
    assert_eq!(stats.refused(LlmLimit::Tokens), 4);
    assert_eq!(stats.input_tokens_charged, 5 * 3_000);
    assert_eq!(stats.output_tokens_charged, 5 * 1_000);
}

#[tokio::test(start_paused = true)]
async fn a_call_is_charged_its_usage_not_its_estimate() {
    // Output is a quarter of max_tokens; a call holds its estimate for the
    // second it is served, then gives back the rest.
    let builder = LlmServer::builder()
        .requests_per_minute(1_000)
        .tokens_per_minute(10_000)
        .output_share(25, 25)
        .service_time(SEC);
    let (server, client, t0) = start(builder).await;
    let first = {
        let (client, server) = (client.clone(), server.clone());
        tokio::spawn(async move { call(&client, &server, 0, 8_000).await })
    };
    sleep(MS).await;
    assert_eq!(server.in_flight(), 1);
    // 2 000 left while the first holds 8 000: 1 000 short, 6 s less the
    // 1 ms refilled.
    let refused = call(&client, &server, 2_250, 750).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after-ms"), Some("5999"));
    let first = first.await.unwrap();
    assert_eq!(t0.elapsed(), SEC);
    assert_eq!(first.usage(), (0, 2_000));
    // 10 000 − 2 000 used, and 1 s refilled 166 of them.
    assert_eq!(first.header("x-ratelimit-remaining-tokens"), Some("8166"));
    // Now it fits, five seconds before the refusal said.
    let second = call(&client, &server, 2_250, 750).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.usage(), (2_250, 187));

    let stats = server.stats();
    let reported = first.usage().0 + first.usage().1 + second.usage().0 + second.usage().1;
    assert_eq!(
        stats.input_tokens_charged + stats.output_tokens_charged,
        reported
    );
    assert_eq!(reported, 4_437);
    assert_eq!((stats.admitted, stats.completed), (2, 2));
    let log = server.requests();
    assert_eq!(log[0].completed_at, Some(SEC));
    assert_eq!(log[2].completed_at, Some(2 * SEC));
    // Answered at 3 s, the third finds holds 10 000 − 4 437 + 3 s of refill (500), floored.
    let third = call(&client, &server, 0, 0).await;
    assert_eq!(third.header("x-ratelimit-remaining-tokens"), Some("6063"));
}

#[tokio::test(start_paused = true)]
async fn a_call_above_a_limit_is_refused_without_a_wait() {
    let builder = LlmServer::builder().tokens_per_minute(10_000);
    let (server, client, _) = start(builder).await;
    // Its usage would fit; its estimate never can.
    let r = call(&client, &server, 1_000, 9_001).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.error_type(), "tokens");
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.header("retry-after-ms"), None);
    assert!(
        r.message().starts_with("Request too large"),
        "{}",
        r.message()
    );
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("10000"));
    assert_eq!(server.requests()[0].retry_after, None);
}

#[tokio::test(start_paused = true)]
async fn the_call_past_the_concurrency_cap_is_refused_while_three_are_held() {
    let builder = LlmServer::builder()
        .requests_per_minute(600)
        .max_in_flight(3)
        .service_time(2 * SEC);
    let (server, client, t0) = start(builder).await;
    let calls = (0..4).map(|_| call(&client, &server, 10, 10));
    let replies = futures::future::join_all(calls).await;
    assert_eq!(t0.elapsed(), 2 * SEC);
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status.as_u16()).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 200, 200, 429]);
    let refused = replies.iter().find(|r| r.status == 429).unwrap();
    assert_eq!(refused.error_type(), "concurrency");
    assert_eq!(refused.header("retry-after"), None);
    // The rates had room: 3 of 600 taken.
    assert_eq!(
        refused.header("x-ratelimit-remaining-requests"),
        Some("597")
    );

    let log = server.requests();
    assert_eq!(
        log.iter()
            .filter(|r| r.refused == Some(LlmLimit::Concurrency))
            .count(),
        1
    );
    assert!(log.iter().all(|r| r.at == Duration::ZERO));
    let done: Vec<_> = log.iter().filter_map(|r| r.completed_at).collect();
    assert_eq!(done, [2 * SEC; 3]);
    let stats = server.stats();
    assert_eq!(
        (stats.peak_in_flight, stats.refused(LlmLimit::Concurrency)),
        (3, 1)
    );
    assert_eq!(server.in_flight(), 0);

    // Once they are answered, a call goes through.
    assert_eq!(call(&client, &server, 10, 10).await.status, 200);
    assert_eq!(server.stats().peak_in_flight, 3);
}

#[tokio::test(start_paused = true)]
async fn openai_headers_parse_back_into_the_limits_enforced() {
    // 60 requests (1 s each) and 6 000 tokens (10 ms each) a minute.
    let builder = LlmServer::builder()
        .requests_per_minute(60)
        .tokens_per_minute(6_000)
        .output_share(50, 50);
    let (server, client, _) = start(builder).await;
    let r = call(&client, &server, 100, 200).await;
    assert_eq!(r.usage(), (100, 100));
    let signal = r.signal();
    assert!(signal.ignored.is_empty(), "{:?}", signal.ignored);
    let requests = signal.limit("requests").unwrap();
    assert_eq!(requests.dimension, Dimension::Requests);
    assert_eq!(requests.limit, server.per_minute(LlmLimit::Requests));
    assert_eq!(requests.limit, Some(60));
    assert_eq!(requests.remaining, Some(59));
    assert_eq!(requests.reset, Some(SEC));
    let tokens = signal.limit("tokens").unwrap();
    assert_eq!(tokens.dimension, Dimension::Tokens);
    assert_eq!(tokens.limit, server.per_minute(LlmLimit::Tokens));
    assert_eq!(tokens.limit, Some(6_000));
    assert_eq!(tokens.remaining, Some(5_800));
    assert_eq!(tokens.reset, Some(2 * SEC));
    assert_eq!(signal.limits.len(), 2);

    // A refusal's wait parses to the millisecond from retry-after-ms.
    let refused = call(&client, &server, 5_000, 850).await;
    assert_eq!(refused.status, 429);
    let signal = refused.signal();
    assert!(signal.is_throttled());
    // 5 850 wanted of 5 800: 50 short at 10 ms, 0.5 s.
    assert_eq!(signal.retry_after, Some(500 * MS));
    assert_eq!(signal.limit("tokens").unwrap().remaining, Some(5_800));
}

fn anthropic() -> LlmServerBuilder {
    LlmServer::builder()
        .dialect(LlmDialect::Anthropic)
        .without(LlmLimit::Tokens)
        .requests_per_minute(50)
        .input_tokens_per_minute(40_000)
        .output_tokens_per_minute(8_000)
        .output_share(50, 50)
        .wall_clock(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

#[tokio::test(start_paused = true)]
async fn anthropic_headers_parse_back_into_the_limits_enforced() {
    let (server, client, _) = start(anthropic()).await;
    assert_eq!(server.per_minute(LlmLimit::Tokens), None);
    let r = call(&client, &server, 1_000, 400).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.usage(), (1_000, 200));
    assert_eq!(
        r.header("anthropic-ratelimit-requests-reset"),
        Some("2023-11-14T22:13:22Z")
    );
    let signal = r.signal();
    assert!(signal.ignored.is_empty(), "{:?}", signal.ignored);
    // Resets are instants to the second rounded up, read against `Date`:
    // 1.2 s for a request, 1.5 s for 1 000 input or 200 output tokens.
    let expect = [
        ("input_tokens", Dimension::InputTokens, 40_000, 39_000),
        ("output_tokens", Dimension::OutputTokens, 8_000, 7_800),
        ("requests", Dimension::Requests, 50, 49),
        // The tightest token limit: the output's.
        ("tokens", Dimension::Tokens, 8_000, 7_800),
    ];
    let got: Vec<_> = signal
        .limits
        .iter()
        .map(|l| {
            (
                l.name.as_str(),
                l.dimension.clone(),
                l.limit,
                l.remaining,
                l.reset,
            )
        })
        .collect();
    let want: Vec<_> = expect
        .iter()
        .map(|(n, d, l, r)| (*n, d.clone(), Some(*l), Some(*r), Some(2 * SEC)))
        .collect();
    assert_eq!(got, want);
    for limit in [
        LlmLimit::Requests,
        LlmLimit::InputTokens,
        LlmLimit::OutputTokens,
    ] {
        let parsed = signal.limit(limit.as_str()).unwrap();
        assert_eq!(parsed.limit, server.per_minute(limit), "{limit}");
    }
}

#[tokio::test(start_paused = true)]
async fn anthropic_refusals_name_the_limit_hit() {
    let (server, client, _) = start(anthropic().max_in_flight(1).service_time(SEC)).await;
    assert_eq!(call(&client, &server, 1_000, 400).await.status, 200);

    // Answered at 1 s, the first call left 7 800 output tokens, and the
    // second refilled 133⅓: a max_tokens of 8 000 is 66⅔ short, 0.5 s.
    let output = call(&client, &server, 10, 8_000).await;
    assert_eq!(output.status, 429);
    assert_eq!(output.body["type"], "error");
    assert_eq!(output.error_type(), "rate_limit_error");
    assert!(
        output.message().contains("8000 output tokens per minute"),
        "{}",
        output.message()
    );
    assert_eq!(
        output.header("anthropic-ratelimit-output-tokens-remaining"),
        Some("7933")
    );
    assert_eq!(output.header("retry-after"), Some("1"));
    assert_eq!(output.signal().retry_after, Some(SEC));
    assert_eq!(server.requests()[1].retry_after, Some(500 * MS));

    let input = call(&client, &server, 40_001, 1).await;
    assert!(
        input.message().contains("input tokens per minute"),
        "{}",
        input.message()
    );
    assert_eq!(input.header("retry-after"), None);

    let (client2, server2) = (client.clone(), server.clone());
    let held = tokio::spawn(async move { call(&client2, &server2, 1, 1).await });
    sleep(MS).await;
    let busy = call(&client, &server, 1, 1).await;
    assert!(
        busy.message().contains("Number of concurrent connections"),
        "{}",
        busy.message()
    );
    assert_eq!(held.await.unwrap().status, 200);

    let refused: Vec<_> = server.requests().iter().filter_map(|r| r.refused).collect();
    assert_eq!(
        refused,
        [
            LlmLimit::OutputTokens,
            LlmLimit::InputTokens,
            LlmLimit::Concurrency
        ]
    );
    let stats = server.stats();
    for limit in [
        LlmLimit::OutputTokens,
        LlmLimit::InputTokens,
        LlmLimit::Concurrency,
    ] {
        assert_eq!(stats.refused(limit), 1, "{limit}");
    }
    assert_eq!(stats.refused(LlmLimit::Requests), 0);
}

#[tokio::test(start_paused = true)]
async fn usage_is_drawn_the_same_for_the_same_seed() {
    async fn usages(seed: u64) -> Vec<(u64, u64)> {
        let server = LlmServer::builder().seed(seed).start().await.unwrap();
        let client = Client::new();
        let mut out = Vec::new();
        for i in 0..8 {
            out.push(call(&client, &server, 10 * i, 1_000).await.usage());
        }
        out
    }
    let a = usages(11).await;
    assert_eq!(a, usages(11).await);
    assert_ne!(a, usages(12).await);
    assert!(a.iter().all(|&(_, o)| (200..=1_000).contains(&o)), "{a:?}");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_is_not_a_call_is_a_400_and_counted() {
    let (server, client, _) = start(LlmServer::builder()).await;
    let r = send(&client, &server, r#"{"max_tokens": "many"}"#.to_owned()).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_type(), "invalid_request_error");
    // An empty body is a call of no prompt and the default max_tokens.
    let empty = send(&client, &server, String::new()).await;
    assert_eq!(empty.status, 200);
    assert_eq!(empty.usage().0, 0);
    let stats = server.stats();
    assert_eq!((stats.requests, stats.invalid, stats.admitted), (2, 1, 1));
    assert_eq!(server.requests()[0].estimate.output_tokens, 1_024);
}

#[tokio::test(start_paused = true)]
async fn in_process_calls_are_held_and_charged_as_over_http() {
    use tower_service::Service as _;

    let builder = LlmServer::builder()
        .dialect(LlmDialect::Anthropic)
        .service_time(SEC)
        .time_per_output_token(MS)
        .output_share(100, 100);
    let server = builder.start().await.unwrap();
    let mut service = server.service();
    let t0 = Instant::now();
    let mut request = reqwest::Request::new(reqwest::Method::POST, server.url().parse().unwrap());
    *request.body_mut() = Some(r#"{"input_tokens": 7, "max_tokens": 300}"#.into());
    let response = service.call(request).await.unwrap();
    // One second, and 1 ms for each of its 300 output tokens.
    assert_eq!(t0.elapsed(), 1_300 * MS);
    assert_eq!(response.status(), 200);
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(body["usage"]["input_tokens"], 7);
    assert_eq!(body["usage"]["output_tokens"], 300);
    let stats = server.stats();
    assert_eq!(
        (stats.input_tokens_charged, stats.output_tokens_charged),
        (7, 300)
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_held_leaves_the_flight_and_keeps_its_estimate() {
    use tower_service::Service as _;

    let builder = LlmServer::builder()
        .tokens_per_minute(10_000)
        .max_in_flight(1)
        .service_time(10 * SEC)
        .output_share(50, 50);
    let server = builder.start().await.unwrap();
    let mut service = server.service();
    let request = || {
        let mut request =
            reqwest::Request::new(reqwest::Method::POST, server.url().parse().unwrap());
        *request.body_mut() = Some(r#"{"input_tokens": 1000, "max_tokens": 2000}"#.into());
        request
    };
    let gave_up = tokio::time::timeout(SEC, service.call(request())).await;
    assert!(gave_up.is_err());
    assert_eq!(server.in_flight(), 0);
    let stats = server.stats();
    assert_eq!(
        (stats.admitted, stats.completed, stats.abandoned),
        (1, 0, 1)
    );
    // Its whole estimate stays charged: 3 000 tokens.
    assert_eq!(
        stats.input_tokens_charged + stats.output_tokens_charged,
        3_000
    );
    let t0 = Instant::now();
    let next = service.call(request()).await.unwrap();
    assert_eq!(next.status(), 200);
    assert_eq!(t0.elapsed(), 10 * SEC);
    // Answered at 11 s: 10 000 less the 3 000 dropped and the 2 000 used,
    // and 11 s of refill (1 833⅓).
    assert_eq!(next.headers()["x-ratelimit-remaining-tokens"], "6833");
}
