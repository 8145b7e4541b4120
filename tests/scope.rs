//! A server's limit describes one partition: the rule of which scope learns
//! what, on tokio's paused clock with real embedded servers.
//!
//! - A scraper over many hosts with a per-host cap and a global cap: no
//!   host's headers lower the global cap (nor the per-host cap).
//! - An SDK with two API tokens, each with its own server-side limit: the
//!   per-token scope learns each token's limit; the host scope, which both
//!   tokens share, learns nothing.
#![cfg(feature = "testing")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use reqwest_pace::testing::{Dialect, RateLimitedServer, ServerAlgorithm};
use reqwest_pace::{RequestRate, Scope, ThrottledClient};
use tokio::time::Instant;

/// Runs `work` (URL and optional API key per request) through `client`
/// with `tasks` workers; returns the virtual time it took. Every call must
/// succeed.
async fn drain(
    client: &ThrottledClient,
    work: Vec<(String, Option<String>)>,
    tasks: usize,
) -> Duration {
    let queue = Arc::new(Mutex::new(work));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, queue) = (client.clone(), Arc::clone(&queue));
        handles.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().unwrap().pop();
                let Some((url, key)) = next else { break };
                let mut request = client.get(&url);
                if let Some(key) = key {
                    request = request.header("x-api-key", key);
                }
                let response = client.send(request).await.expect("every call succeeds");
                assert_eq!(response.status(), 200);
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    start.elapsed()
}

/// A server allowing each API key 10/s with a burst of 10.
async fn ten_per_second_per_key() -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(RequestRate::per_second(10).unwrap())
        .burst(10)
        .dialect(Dialect::XRateLimit)
        .start()
        .await
        .unwrap()
}

/// 200 hosts allowing 4/s each, a per-host cap of 2/s and a global cap of
/// 100/s, 1000 requests (5 per host): the global bucket bounds the run. It
/// starts full (100), then admits 100/s: 9 s for the other 900.
#[tokio::test(start_paused = true)]
async fn a_global_cap_is_not_lowered_by_one_hosts_headers() {
    let mut servers = Vec::new();
    for _ in 0..200 {
        let server = RateLimitedServer::builder()
            .limit(RequestRate::per_second(4).unwrap())
            .burst(4)
            .dialect(Dialect::XRateLimit)
            .start()
            .await
            .unwrap();
        servers.push(server);
    }
    let client = ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(2).unwrap())
        .scope(Scope::global().rate(RequestRate::per_second(100).unwrap()))
        .build()
        .unwrap();
    let work: Vec<(String, Option<String>)> = (0..5)
        .flat_map(|_| servers.iter().map(|s| (s.url(), None)))
        .collect();
    let took = drain(&client, work, 64).await;
    let ideal = Duration::from_secs(9);
    assert!(took >= ideal, "{took:?}: faster than the global cap allows");
    assert!(
        took <= ideal + ideal / 10,
        "{took:?}: over 10 % above {ideal:?}"
    );
    // Neither cap learned anything from 200 servers' headers.
    assert_eq!(client.current_rate("global", "*"), Some(100.0));
    let refused: u64 = servers.iter().map(|s| s.stats().total.throttled).sum();
    assert_eq!(refused, 0);
}

/// Two tokens, each allowed 10/s with a burst of 10 by the server: 60
/// requests per token take 5 s when each token is paced on its own limit.
#[tokio::test(start_paused = true)]
async fn each_token_learns_its_own_limit_and_the_host_layer_none() {
    let server = ten_per_second_per_key().await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .scope(Scope::per_header("token", "x-api-key"))
        .build()
        .unwrap();
    let work: Vec<(String, Option<String>)> = (0..60)
        .flat_map(|_| ["alpha", "beta"].map(|k| (server.url(), Some(k.to_owned()))))
        .collect();
    let took = drain(&client, work, 16).await;
    let ideal = Duration::from_secs(5);
    assert!(
        took <= ideal + ideal / 10,
        "{took:?}: over 10 % above {ideal:?}"
    );
    // The host key, shared by both tokens, was not taught either limit.
    assert_eq!(client.current_rate("host", &server.url()), None);
    assert_eq!(server.stats().total.throttled, 0);
}

/// GitHub counts `/search` apart from its `core` API and names the bucket in
/// `x-ratelimit-resource`. Each route is paced in the bucket the server
/// names for it, so the tight search limit does not slow the core calls.
#[tokio::test(start_paused = true)]
async fn each_server_bucket_is_paced_apart() {
    let server = RateLimitedServer::builder()
        .algorithm(ServerAlgorithm::TokenBucket {
            rate: RequestRate::per_second(20).unwrap(),
            burst: 5,
        })
        .limit_is_burst(true)
        .route(
            "/search",
            "search",
            ServerAlgorithm::FixedWindow {
                limit: 10,
                window: Duration::from_secs(10),
            },
        )
        .dialect(Dialect::GitHub)
        .wall_clock(UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        .start()
        .await
        .unwrap();
    let client = ThrottledClient::builder(reqwest::Client::new())
        .random(|| 0.5)
        .build()
        .unwrap();
    let run = Duration::from_secs(5);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..10 {
        let path = if i < 8 { "/repos/a" } else { "/search/code" };
        let (client, url) = (client.clone(), format!("{}{path}", server.url()));
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < run {
                let response = client.send(client.get(&url)).await.expect("no call fails");
                assert_eq!(response.status(), 200);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let records = server.requests();
    let admitted = |prefix: &str| {
        records
            .iter()
            .filter(|r| r.at <= run && r.path.starts_with(prefix) && r.status == 200)
            .count()
    };
    // Core: 5 s at 20/s plus the burst of 5, less the headroom and the
    // first second spent telling a bucket from a window (96 measured); paced
    // in one bucket with search it would be held to search's 1 per second.
    assert!(
        admitted("/repos") >= 90,
        "core admitted {}",
        admitted("/repos")
    );
    // Search: its window of 10 per 10 s spread evenly (about half of it in
    // the first 5 s), never more.
    let search = admitted("/search");
    assert!((4..=10).contains(&search), "search admitted {search}");
    assert_eq!(server.stats().total.throttled, 0);
    // The first bucket named (core) is paced by the host key itself; the
    // search route by a key of its own.
    let core = client.current_rate("host", &server.url());
    assert!(core.is_some_and(|r| r > 15.0), "{core:?}");
    let search = client.current_rate("host", &format!("{}~search", server.url()));
    assert!(search.is_some_and(|r| r < 2.0), "{search:?}");
}

/// Of two equally narrow scopes (both per credential), only the last added
/// is taught: one token's limit does not also cap a tenant's other tokens.
#[tokio::test(start_paused = true)]
async fn of_equally_narrow_layers_only_the_last_added_learns() {
    let server = ten_per_second_per_key().await;
    let client = ThrottledClient::builder(reqwest::Client::new())
        .scope(Scope::keyed("tenant", |_| Some("acme".to_owned())))
        .scope(Scope::per_header("token", "x-api-key"))
        .build()
        .unwrap();
    let work: Vec<(String, Option<String>)> = (0..20)
        .map(|_| (server.url(), Some("alpha".to_owned())))
        .collect();
    drain(&client, work, 4).await;
    assert_eq!(client.current_rate("tenant", "acme"), None);
    let token = format!("x-api-key#{:016x}", {
        // The key is the FNV-1a of the value (see `Scope::per_header`).
        b"alpha".iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    });
    assert!(client.current_rate("token", &token).is_some());
    assert_eq!(server.stats().total.throttled, 0);
}
