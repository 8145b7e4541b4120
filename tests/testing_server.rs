//! The embedded rate-limited server, driven by a plain reqwest client.
//!
//! Client and server share one paused current-thread runtime, so the times
//! the server records are exactly the client's virtual times.
#![cfg(feature = "testing")]

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{Client, Response, StatusCode};
use reqwest_pace::testing::{
    Answer, ClientKey, Dialect, Fault, RateLimitedServer, RetryAfter, ServerBuilder,
};
use reqwest_pace::{Error, RequestRate};
use tokio::time::{sleep, Instant};

const MS: Duration = Duration::from_millis(1);

fn rate(per_second: u64) -> RequestRate {
    RequestRate::per_second(per_second).unwrap()
}

async fn start(builder: ServerBuilder) -> (RateLimitedServer, Client) {
    (builder.start().await.unwrap(), Client::new())
}

async fn get(client: &Client, server: &RateLimitedServer) -> Response {
    client.get(server.url()).send().await.unwrap()
}

async fn get_as(
    client: &Client,
    server: &RateLimitedServer,
    header: &str,
    value: &str,
) -> Response {
    client
        .get(server.url())
        .header(header, value)
        .send()
        .await
        .unwrap()
}

fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

/// The headers whose names start with one of the prefixes, as text.
fn headers(response: &Response, prefixes: &[&str]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = response
        .headers()
        .iter()
        .filter(|(name, _)| prefixes.iter().any(|p| name.as_str().starts_with(p)))
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect();
    out.sort();
    out
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = expected
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    out.sort();
    out
}

const LIMIT_HEADERS: &[&str] = &["x-ratelimit", "ratelimit", "retry-after"];

/// The one `Date` header, checked to be near the real clock.
fn date(response: &Response) -> SystemTime {
    let dates: Vec<_> = response.headers().get_all("date").iter().collect();
    assert_eq!(dates.len(), 1, "exactly one Date");
    let date = httpdate::parse_http_date(dates[0].to_str().unwrap()).unwrap();
    let skew = SystemTime::now()
        .duration_since(date)
        .unwrap_or_else(|e| e.duration());
    assert!(skew < Duration::from_secs(5), "Date is {skew:?} off");
    date
}

fn epoch_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

fn ats(server: &RateLimitedServer) -> Vec<Duration> {
    server.requests().iter().map(|r| r.at).collect()
}

#[tokio::test(start_paused = true)]
async fn defaults_are_50_per_second_burst_10() {
    let (server, client) = start(RateLimitedServer::builder()).await;
    assert_eq!((server.limit(), server.burst()), (rate(50), 10));
    assert_eq!(server.dialect(), Dialect::XRateLimit);
    assert!(server.url().starts_with("http://127.0.0.1:"));
    assert_eq!(server.url(), format!("http://{}", server.addr()));
    for _ in 0..10 {
        assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    }
    let refused = get(&client, &server).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "x-ratelimit-limit"), Some("50"));
    // One token every 20 ms.
    sleep(20 * MS).await;
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    assert_eq!(
        get(&client, &server).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn x_ratelimit_burst_then_429() {
    let (server, client) = start(RateLimitedServer::builder().limit(rate(2)).burst(4)).await;
    // After k requests the bucket is k × 500 ms from full.
    for (remaining, reset) in [("3", "1"), ("2", "1"), ("1", "2"), ("0", "2")] {
        let ok = get(&client, &server).await;
        assert_eq!(ok.status(), StatusCode::OK);
        date(&ok);
        assert_eq!(
            headers(&ok, LIMIT_HEADERS),
            pairs(&[
                ("x-ratelimit-limit", "2"),
                ("x-ratelimit-remaining", remaining),
                ("x-ratelimit-reset", reset),
            ])
        );
        assert_eq!(ok.text().await.unwrap(), "ok\n");
    }
    let refused = get(&client, &server).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    date(&refused);
    assert_eq!(
        headers(&refused, LIMIT_HEADERS),
        pairs(&[
            ("x-ratelimit-limit", "2"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "2"),
            ("retry-after", "1"),
        ])
    );
    assert_eq!(refused.text().await.unwrap(), "rate limited\n");

    // 1.2 s later: 2.4 tokens held, so two admitted and the next refused
    // with 0.4 of a token, 300 ms short, written as a whole second.
    sleep(1200 * MS).await;
    assert_eq!(
        header(&get(&client, &server).await, "x-ratelimit-remaining"),
        Some("1")
    );
    assert_eq!(
        header(&get(&client, &server).await, "x-ratelimit-remaining"),
        Some("0")
    );
    let refused = get(&client, &server).await;
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    // 0.4 tokens held: 1.8 s until all four are back.
    assert_eq!(header(&refused, "x-ratelimit-reset"), Some("2"));

    let stats = server.stats();
    assert_eq!(
        (stats.total.requests, stats.total.ok, stats.total.throttled),
        (8, 6, 2)
    );
    assert_eq!(
        ats(&server),
        [[Duration::ZERO; 5].as_slice(), &[1200 * MS; 3]].concat()
    );
}

#[tokio::test(start_paused = true)]
async fn waiting_the_exact_refill_is_enough() {
    let (server, client) = start(RateLimitedServer::builder().limit(rate(10)).burst(1)).await;
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    assert_eq!(
        get(&client, &server).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    sleep(99 * MS).await;
    assert_eq!(
        get(&client, &server).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    sleep(MS).await;
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    assert_eq!(
        ats(&server),
        [Duration::ZERO, Duration::ZERO, 99 * MS, 100 * MS]
    );
    let outcomes: Vec<_> = server.requests().iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            Answer::Admitted,
            Answer::Throttled,
            Answer::Throttled,
            Answer::Admitted
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn github_dialect() {
    let builder = RateLimitedServer::builder()
        .limit(rate(5))
        .burst(3)
        .dialect(Dialect::GitHub);
    let (server, client) = start(builder).await;
    for (k, (remaining, used)) in [("2", "3"), ("1", "4"), ("0", "5")].into_iter().enumerate() {
        let ok = get(&client, &server).await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(header(&ok, "x-ratelimit-limit"), Some("5"));
        assert_eq!(header(&ok, "x-ratelimit-remaining"), Some(remaining));
        assert_eq!(header(&ok, "x-ratelimit-used"), Some(used));
        assert_eq!(header(&ok, "x-ratelimit-resource"), Some("core"));
        assert_eq!(header(&ok, "retry-after"), None);
        // Full again (k + 1) × 200 ms after the response's instant, written
        // as the epoch second rounded up; Date is that instant truncated.
        let reset: u64 = header(&ok, "x-ratelimit-reset").unwrap().parse().unwrap();
        let date = epoch_secs(date(&ok));
        let until_full = (k as u64 + 1) * 200;
        let lowest = date + (until_full / 1000) + 1;
        assert!(
            (lowest..=lowest + 1).contains(&reset),
            "reset {reset}, Date {date}"
        );
    }
    let refused = get(&client, &server).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    assert_eq!(header(&refused, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(&refused, "x-ratelimit-used"), Some("5"));
}

#[tokio::test(start_paused = true)]
async fn ietf_dialect() {
    let builder = RateLimitedServer::builder()
        .limit(rate(2))
        .burst(4)
        .dialect(Dialect::Ietf);
    let (server, client) = start(builder).await;
    for (k, expected) in ["r=3;t=1", "r=2;t=1", "r=1;t=2", "r=0;t=2"]
        .iter()
        .enumerate()
    {
        let ok = get(&client, &server).await;
        assert_eq!(ok.status(), StatusCode::OK, "request {k}");
        assert_eq!(
            headers(&ok, LIMIT_HEADERS),
            pairs(&[
                ("ratelimit-policy", "\"default\";q=2;w=1"),
                ("ratelimit", &format!("\"default\";{expected}")),
            ])
        );
    }
    let refused = get(&client, &server).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        headers(&refused, LIMIT_HEADERS),
        pairs(&[
            ("ratelimit-policy", "\"default\";q=2;w=1"),
            ("ratelimit", "\"default\";r=0;t=2"),
            ("retry-after", "1"),
        ])
    );
    // Both are valid Structured Field Lists.
    for name in ["ratelimit-policy", "ratelimit"] {
        let text = header(&refused, name).unwrap();
        sfv::Parser::new(text)
            .parse::<sfv::List>()
            .unwrap_or_else(|e| panic!("{name}: {text}: {e}"));
    }
}

#[tokio::test(start_paused = true)]
async fn none_dialect_is_a_bare_429() {
    let builder = RateLimitedServer::builder().burst(1).dialect(Dialect::None);
    let (server, client) = start(builder).await;
    let ok = get(&client, &server).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(headers(&ok, LIMIT_HEADERS), []);
    date(&ok);
    let refused = get(&client, &server).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers(&refused, LIMIT_HEADERS), []);
    date(&refused);
}

#[tokio::test(start_paused = true)]
async fn api_keys_have_their_own_buckets() {
    let builder = RateLimitedServer::builder()
        .burst(1)
        .api_key_header("X-Client-Id");
    let (server, client) = start(builder).await;
    let as_key = |key: &'static str| get_as(&client, &server, "x-client-id", key);
    assert_eq!(as_key("alice").await.status(), StatusCode::OK);
    assert_eq!(
        as_key("alice").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(as_key("bob").await.status(), StatusCode::OK);
    // Without the header the key is the address, which has its own bucket.
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    assert_eq!(
        get(&client, &server).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The default header name is not special any more.
    let other = get_as(&client, &server, "x-api-key", "carol").await;
    assert_eq!(other.status(), StatusCode::TOO_MANY_REQUESTS);

    let stats = server.stats();
    let alice = stats.per_key[&ClientKey::ApiKey("alice".into())];
    assert_eq!((alice.requests, alice.ok, alice.throttled), (2, 1, 1));
    assert_eq!(stats.per_key[&ClientKey::ApiKey("bob".into())].ok, 1);
    let local = ClientKey::Ip(IpAddr::from([127, 0, 0, 1]));
    assert_eq!(stats.per_key[&local].requests, 3);
    assert_eq!(stats.per_key.len(), 3);
    assert_eq!(ClientKey::ApiKey("alice".into()).to_string(), "key:alice");
    assert_eq!(local.to_string(), "ip:127.0.0.1");
}

fn ip(s: &str) -> ClientKey {
    ClientKey::Ip(s.parse().unwrap())
}

#[tokio::test(start_paused = true)]
async fn forwarded_for_is_read_from_the_right() {
    let builder = RateLimitedServer::builder().burst(1).trusted_proxy_hops(1);
    let (server, client) = start(builder).await;
    let via = |chain: &'static str| get_as(&client, &server, "x-forwarded-for", chain);
    assert_eq!(via("198.51.100.1, 10.0.0.1").await.status(), StatusCode::OK);
    // A different forged left-most entry is still the same client.
    assert_eq!(
        via("203.0.113.9, 10.0.0.1").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        via("10.0.0.1").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(via("198.51.100.1, 10.0.0.2").await.status(), StatusCode::OK);
    let keys: Vec<_> = server.requests().into_iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        [
            ip("10.0.0.1"),
            ip("10.0.0.1"),
            ip("10.0.0.1"),
            ip("10.0.0.2")
        ]
    );
    server.shutdown().await;

    let builder = RateLimitedServer::builder().burst(1).trusted_proxy_hops(2);
    let (server, client) = start(builder).await;
    let via = |chain: &'static str| get_as(&client, &server, "x-forwarded-for", chain);
    assert_eq!(
        via("6.6.6.6, 192.0.2.5, 10.0.0.1").await.status(),
        StatusCode::OK
    );
    assert_eq!(
        via("7.7.7.7, 192.0.2.5, 10.0.0.9").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Too short for two proxies: not through them, so the peer address.
    assert_eq!(via("192.0.2.5").await.status(), StatusCode::OK);
    let keys: Vec<_> = server.requests().into_iter().map(|r| r.key).collect();
    assert_eq!(keys, [ip("192.0.2.5"), ip("192.0.2.5"), ip("127.0.0.1")]);
    server.shutdown().await;

    // With no trusted proxy the header is ignored.
    let (server, client) = start(RateLimitedServer::builder().burst(1)).await;
    let via = |chain: &'static str| get_as(&client, &server, "x-forwarded-for", chain);
    assert_eq!(via("192.0.2.5").await.status(), StatusCode::OK);
    assert_eq!(
        via("192.0.2.6").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(server.requests()[1].key, ip("127.0.0.1"));
}

#[tokio::test(start_paused = true)]
async fn set_limit_applies_now_and_keeps_the_deficit() {
    let (server, client) = start(RateLimitedServer::builder().limit(rate(10)).burst(1)).await;
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    // One token owed: 100 ms at 10/s, 1 s at 1/s.
    server.set_limit(rate(1));
    assert_eq!(server.limit(), rate(1));
    sleep(100 * MS).await;
    let refused = get(&client, &server).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "x-ratelimit-limit"), Some("1"));
    sleep(899 * MS).await;
    assert_eq!(
        get(&client, &server).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    sleep(MS).await;
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    assert_eq!(
        ats(&server),
        [Duration::ZERO, 100 * MS, 999 * MS, 1000 * MS]
    );
}

#[tokio::test(start_paused = true)]
async fn change_limit_at_is_scheduled_on_the_tokio_clock() {
    let builder = RateLimitedServer::builder()
        .limit(rate(50))
        .change_limit_at(Duration::from_secs(4), rate(20))
        .change_limit_at(Duration::from_secs(2), rate(5));
    let (server, client) = start(builder).await;
    let start = Instant::now();
    let limit_at = |ms: u64| {
        let (client, server) = (&client, &server);
        async move {
            tokio::time::sleep_until(start + Duration::from_millis(ms)).await;
            let response = get(client, server).await;
            header(&response, "x-ratelimit-limit").unwrap().to_owned()
        }
    };
    assert_eq!(limit_at(0).await, "50");
    assert_eq!(limit_at(1999).await, "50");
    assert_eq!(limit_at(2001).await, "5");
    assert_eq!(server.limit(), rate(5));
    assert_eq!(limit_at(3999).await, "5");
    assert_eq!(limit_at(4001).await, "20");
    assert_eq!(
        ats(&server),
        [0, 1999, 2001, 3999, 4001].map(Duration::from_millis)
    );
}

#[tokio::test(start_paused = true)]
async fn injected_faults_bypass_the_limiter() {
    let (server, client) = start(RateLimitedServer::builder().burst(2)).await;
    server.inject(
        Fault::service_unavailable()
            .times(2)
            .retry_after(RetryAfter::Seconds(3)),
    );
    let fixed = UNIX_EPOCH + Duration::from_secs(1_900_000_000);
    server.inject(Fault::internal_server_error().retry_after(RetryAfter::Date(fixed)));
    server
        .inject(Fault::too_many_requests().retry_after(RetryAfter::DateIn(Duration::from_secs(5))));
    server.inject(Fault::new(StatusCode::BAD_GATEWAY));

    for _ in 0..2 {
        let outage = get(&client, &server).await;
        assert_eq!(outage.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            headers(&outage, LIMIT_HEADERS),
            pairs(&[("retry-after", "3")])
        );
        date(&outage);
    }
    let error = get(&client, &server).await;
    assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        header(&error, "retry-after"),
        Some("Sun, 17 Mar 2030 17:46:40 GMT")
    );
    let throttled = get(&client, &server).await;
    assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry = httpdate::parse_http_date(header(&throttled, "retry-after").unwrap()).unwrap();
    assert_eq!(
        retry.duration_since(date(&throttled)).unwrap(),
        Duration::from_secs(5)
    );
    let bare = get(&client, &server).await;
    assert_eq!(bare.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(headers(&bare, LIMIT_HEADERS), []);

    // The faults took no tokens: the burst of two is still there.
    let ok = get(&client, &server).await;
    assert_eq!(header(&ok, "x-ratelimit-remaining"), Some("1"));
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    // And a fault answers even when the bucket is empty.
    server.inject(Fault::service_unavailable());
    assert_eq!(
        get(&client, &server).await.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        get(&client, &server).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    let stats = server.stats();
    assert_eq!(
        (
            stats.total.requests,
            stats.total.ok,
            stats.total.throttled,
            stats.total.faults
        ),
        (9, 2, 1, 6)
    );
    let statuses: Vec<u16> = server
        .requests()
        .iter()
        .map(|r| r.status.as_u16())
        .collect();
    assert_eq!(statuses, [503, 503, 500, 429, 502, 200, 200, 503, 429]);
}

#[tokio::test(start_paused = true)]
async fn latency_is_added_before_the_decision() {
    let builder = RateLimitedServer::builder().latency(250 * MS).burst(1);
    let (server, client) = start(builder).await;
    let start = Instant::now();
    let (a, b) = tokio::join!(get(&client, &server), get(&client, &server));
    assert_eq!(start.elapsed(), 250 * MS);
    let mut statuses = [a.status().as_u16(), b.status().as_u16()];
    statuses.sort();
    assert_eq!(statuses, [200, 429]);
    assert_eq!(ats(&server), [250 * MS, 250 * MS]);
}

#[tokio::test(start_paused = true)]
async fn any_method_and_path_and_the_body_is_read() {
    let (server, client) = start(RateLimitedServer::builder()).await;
    let body = vec![b'x'; 256 * 1024];
    let response = client
        .post(format!("{}/v1/items?page=2", server.url()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = client
        .delete(format!("{}/v1/items/7", server.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen: Vec<_> = server
        .requests()
        .into_iter()
        .map(|r| (r.method.to_string(), r.path))
        .collect();
    assert_eq!(
        seen,
        [
            ("POST".to_owned(), "/v1/items".to_owned()),
            ("DELETE".to_owned(), "/v1/items/7".to_owned())
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn bad_settings_are_config_errors() {
    let zero = RateLimitedServer::builder().burst(0).start().await;
    assert!(matches!(zero, Err(Error::InvalidConfig(_))), "{zero:?}");
    let name = RateLimitedServer::builder()
        .api_key_header("not a header")
        .start()
        .await;
    assert!(matches!(name, Err(Error::InvalidConfig(_))), "{name:?}");

    let taken = RateLimitedServer::builder().start().await.unwrap();
    let clash = RateLimitedServer::builder()
        .bind(taken.addr())
        .start()
        .await;
    match clash {
        Err(Error::InvalidConfig(message)) => {
            assert!(message.contains("bind"), "{message}");
            assert!(message.contains(&taken.addr().to_string()), "{message}");
        }
        other => panic!("expected a bind error, got {other:?}"),
    }
    assert!(matches!(
        "x-rate-limit".parse::<Dialect>(),
        Err(Error::InvalidConfig(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn shutdown_and_drop_stop_the_server() {
    let (server, client) = start(RateLimitedServer::builder()).await;
    assert_eq!(get(&client, &server).await.status(), StatusCode::OK);
    let other = server.clone();
    let url = server.url();
    // The pooled keep-alive connection does not hold shutdown up.
    server.shutdown().await;
    assert!(Client::new().get(&url).send().await.is_err());
    assert_eq!(other.stats().total.requests, 1);

    let dropped = RateLimitedServer::builder().start().await.unwrap();
    let url = dropped.url();
    drop(dropped);
    sleep(10 * MS).await;
    assert!(Client::new().get(&url).send().await.is_err());
}

#[tokio::test(start_paused = true)]
async fn every_dialect_round_trips_through_its_name() {
    for dialect in Dialect::ALL {
        let server = RateLimitedServer::builder()
            .dialect(dialect.to_string().parse().unwrap())
            .start()
            .await
            .unwrap();
        assert_eq!(server.dialect(), dialect);
        let response = get(&Client::new(), &server).await;
        assert_eq!(response.status(), StatusCode::OK);
        // Traefik, like a server without headers, says nothing on a 200.
        assert_eq!(
            headers(&response, LIMIT_HEADERS).is_empty(),
            matches!(dialect, Dialect::None | Dialect::Traefik)
        );
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_on_a_multi_thread_runtime() {
    let builder = RateLimitedServer::builder().limit(rate(1)).burst(5);
    let (server, client) = start(builder).await;
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (server, client) = (server.clone(), client.clone());
            tokio::spawn(async move { get(&client, &server).await.status() })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        if task.await.unwrap() == StatusCode::OK {
            ok += 1;
        }
    }
    // The burst, plus at most one token if the run took over a second.
    assert!((5..=6).contains(&ok), "{ok} admitted");
    let stats = server.stats();
    assert_eq!(stats.total.requests, 30);
    assert_eq!(stats.total.ok, ok);
    assert_eq!(stats.total.ok + stats.total.throttled, 30);
    server.shutdown().await;
}
