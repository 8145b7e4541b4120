//! The throttled client with its per-host buckets in Redis: two clients
//! (standing for two processes, each with its own connection) share one
//! budget and one Retry-After.
#![cfg(all(feature = "redis", feature = "testing"))]

mod redis_support;

use std::sync::Arc;
use std::time::Duration;

use redis_support::{until_reads, RedisServer};
use reqwest_pace::redis::RedisBackend;
use reqwest_pace::retry::RetryRules;
use reqwest_pace::testing::{Dialect, Fault, RateLimitedServer, RetryAfter};
use reqwest_pace::{Error, Limiter, Priority, RequestRate, Scope, ThrottledClient};

async fn shared_client(redis: &RedisServer, rate: RequestRate) -> ThrottledClient {
    shared_client_with(redis, rate, RetryRules::default()).await
}

async fn shared_client_with(
    redis: &RedisServer,
    rate: RequestRate,
    policy: RetryRules,
) -> ThrottledClient {
    // Each client has its own backend: its own connection, as another
    // process would. A generous timeout: a machine busy with other test
    // binaries can keep redis-server from answering within the default's
    // 200 ms, which fails a call closed.
    let backend = RedisBackend::connect(redis.url())
        .await
        .unwrap()
        .with_timeout(Duration::from_secs(5));
    let scope = Scope::per_host().rate(rate).burst(1).limiter(move |key| {
        let bucket = backend.token_bucket(key, rate, 1)?;
        Ok(Arc::new(bucket) as Arc<dyn Limiter>)
    });
    ThrottledClient::builder(reqwest::Client::new())
        .host_scope(scope)
        .retry(policy)
        // Draws fixed (the release jitter at 90 % of its most), so that a
        // run does not depend on them.
        .random(|| 0.9)
        .build()
        .unwrap()
}

async fn server() -> RateLimitedServer {
    RateLimitedServer::builder()
        .limit(RequestRate::per_second(10_000).unwrap())
        .burst(10_000)
        .dialect(Dialect::None)
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_share_one_budget_per_host() {
    let redis = RedisServer::start();
    let server = server().await;
    let up = tokio::time::Instant::now();
    let rate = RequestRate::per_second(20).unwrap();
    let a = shared_client(&redis, rate).await;
    let b = shared_client(&redis, rate).await;
    // No request was sent before this instant, which lies at least
    // `ready` after the server's start.
    let ready = up.elapsed();
    let mut tasks = Vec::new();
    for client in [a, b] {
        for _ in 0..4 {
            let client = client.clone();
            let url = server.url();
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let r = client.send(client.get(&url)).await.unwrap();
                    assert_eq!(r.status(), 200);
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut at: Vec<Duration> = server.requests().iter().map(|r| r.at).collect();
    at.sort();
    assert_eq!(at.len(), 40);
    // One shared bucket of 20/s, burst 1, first used once the clients were
    // ready: its k-th grant comes no sooner than k intervals of 50 ms
    // after that, and a request reaches the server only after its grant,
    // so the k-th arrival does too. Two separate buckets would let the
    // 40th in at about half that. This holds however busy the machine is:
    // a late send only makes an arrival later. (Redis keeps the time; the
    // slack covers its clock's rounding against tokio's.)
    for (k, &arrived) in at.iter().enumerate() {
        let earliest = (ready + Duration::from_millis(50 * k as u64))
            .saturating_sub(Duration::from_millis(20));
        assert!(
            arrived >= earliest,
            "arrival {k} at {arrived:?}, before {earliest:?}"
        );
    }
}

/// Two clients sharing a Redis bucket of 100/s per host, each having sent
/// the server one request; the server's next answer is a 429 asking for a
/// wait of `seconds`.
async fn told_to_wait(
    seconds: u64,
) -> (
    RedisServer,
    RateLimitedServer,
    ThrottledClient,
    ThrottledClient,
) {
    let redis = RedisServer::start();
    let server = server().await;
    let rate = RequestRate::per_second(100).unwrap();
    let a = shared_client(&redis, rate).await;
    let b = shared_client(&redis, rate).await;
    a.send(a.get(server.url())).await.unwrap();
    b.send(b.get(server.url())).await.unwrap();
    server.inject(
        Fault::too_many_requests()
            .times(1)
            .retry_after(RetryAfter::Seconds(seconds)),
    );
    (redis, server, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_seen_by_one_client_holds_the_other() {
    let (_redis, server, a, b) = told_to_wait(1).await;
    // A is told to wait a second; it blocks the shared key and retries.
    let start = tokio::time::Instant::now();
    let a_task = {
        let a = a.clone();
        let url = server.url();
        tokio::spawn(async move { a.send(a.get(&url)).await.map(|r| r.status()) })
    };
    // Give A's 429 time to land, then B sends: it must wait for the block.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b_status = b.send(b.get(server.url())).await.unwrap().status();
    let b_done = start.elapsed();
    assert_eq!(b_status, 200);
    assert_eq!(a_task.await.unwrap().unwrap(), 200);
    assert!(
        b_done >= Duration::from_millis(990),
        "B went at {b_done:?}, inside A's Retry-After"
    );
}

/// A `Retry-After` beyond the retry cap seen by one client closes the key
/// for the other too: its calls fail at once with the server's status and
/// send nothing, as the first client's do. Cleared by either, the key is
/// open for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_beyond_the_cap_seen_by_one_client_closes_the_key_for_the_other() {
    let (_redis, server, a, b) = told_to_wait(3_600).await;
    let too_long = |result: Result<reqwest::Response, Error>| match result {
        Err(Error::RetryAfterTooLong { wait, status, .. }) => {
            assert_eq!(status, 429);
            assert!(wait > Duration::from_secs(3_500), "{wait:?}");
        }
        other => panic!("expected RetryAfterTooLong, got {other:?}"),
    };
    too_long(a.send(a.get(server.url())).await);
    assert_eq!(server.requests().len(), 3);
    // B never saw the 429; the shared bucket says what asked for the wait.
    for _ in 0..3 {
        too_long(b.send(b.get(server.url())).await);
    }
    assert_eq!(server.requests().len(), 3, "a closed key sends nothing");
    // A clears the key: the shared block goes with its own.
    assert!(a.clear_key("host", &host_of(&server)).await);
    assert_eq!(b.send(b.get(server.url())).await.unwrap().status(), 200);
    assert_eq!(a.send(a.get(server.url())).await.unwrap().status(), 200);
    assert_eq!(server.requests().len(), 5);
}

/// The host scope's key of the embedded server.
fn host_of(server: &RateLimitedServer) -> String {
    let url = reqwest::Url::parse(&server.url()).unwrap();
    format!(
        "http://{}:{}",
        url.host_str().unwrap(),
        url.port_or_known_default().unwrap()
    )
}

/// A `Retry-After` of exactly the retry cap is waited out, by the client
/// told it and by the other: the shared bucket holds the block a little
/// longer (the release jitter), which must not make it refuse a wait the
/// cap allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_of_the_cap_is_waited_out_by_both_clients() {
    let redis = RedisServer::start();
    let server = server().await;
    let rate = RequestRate::per_second(100).unwrap();
    let capped = || RetryRules::default().with_max_retry_after(Duration::from_secs(1));
    let a = shared_client_with(&redis, rate, capped()).await;
    let b = shared_client_with(&redis, rate, capped()).await;
    a.send(a.get(server.url())).await.unwrap();
    b.send(b.get(server.url())).await.unwrap();
    server.inject(
        Fault::too_many_requests()
            .times(1)
            .retry_after(RetryAfter::Seconds(1)),
    );
    let a_call = {
        let a = a.clone();
        let url = server.url();
        tokio::spawn(async move { a.send(a.get(&url)).await.map(|r| r.status()) })
    };
    // Once A's 429 has landed, B waits the second out too.
    while server.requests().len() < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(b.send(b.get(server.url())).await.unwrap().status(), 200);
    assert_eq!(a_call.await.unwrap().unwrap(), 200);
}

/// How many calls clients made of `redis`: scripts run (`EVALSHA`,
/// `EVAL`, `SCRIPT LOAD`) and reads of a key's block counter (`HGET`),
/// the commands the shared limiters send; not the commands the scripts
/// run inside.
async fn client_calls(redis: &RedisServer) -> u64 {
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            if !["evalsha", "eval", "script|load", "hget"].contains(&name) {
                return None;
            }
            let calls = stats.split_once("calls=")?.1;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// What a fleet's process with nothing configured costs Redis, learning
/// from `X-RateLimit-*` on every answer (what remains, the window, the
/// rate: several adjustments each) of a server of `rate` a second and
/// `burst`, `tasks` sending `requests` in all: the calls it made of Redis
/// and the attempts the server saw. Checks that what was learned reached
/// the shared bucket (its learned rate is set).
async fn redis_calls(rate: u64, burst: u64, tasks: u64, requests: u64) -> (u64, u64) {
    let redis = RedisServer::start();
    let server = RateLimitedServer::builder()
        .limit(RequestRate::per_second(rate).unwrap())
        .burst(burst)
        .dialect(Dialect::XRateLimit)
        .start()
        .await
        .unwrap();
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let open = RequestRate::per_second(10_000).unwrap();
    let scope = Scope::per_host().limiter(move |key| {
        let bucket = backend.token_bucket(key, open, 1)?;
        Ok(Arc::new(bucket) as Arc<dyn Limiter>)
    });
    let client = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(scope)
        .random(|| 0.9)
        .build()
        .unwrap();
    let before = client_calls(&redis).await;
    let mut calls = Vec::new();
    for _ in 0..tasks {
        let (client, url) = (client.clone(), server.url());
        calls.push(tokio::spawn(async move {
            for _ in 0..requests / tasks {
                let response = client.send(client.get(&url)).await.unwrap();
                assert_eq!(response.status(), 200);
            }
        }));
    }
    for call in calls {
        call.await.unwrap();
    }
    // The last answers' lessons are sent on their own a moment later:
    // counted once the count holds still.
    let mut sent = client_calls(&redis).await - before;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = client_calls(&redis).await - before;
        if now == sent {
            break;
        }
        sent = now;
    }
    let mut conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let learned: Option<u64> = redis::cmd("HGET")
        .arg(&keys[0])
        .arg("L")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(learned, Some(1), "the shared bucket has a learned rate");
    let attempts = server.requests().len() as u64;
    eprintln!(
        "{rate}/s, burst {burst}, {tasks} tasks: {sent} calls of Redis for {attempts} attempts"
    );
    (sent, attempts)
}

/// What answers teach rides on the next reservation: where no call waits
/// for its turn, a request costs Redis one call (its reservation, carrying
/// what the answers before it taught; 41 calls for these 40 requests, the
/// last answer's lesson sent alone), where each adjustment used to be a
/// call of its own (83). At most 1.5 a request, the goal, leaves room for
/// a lesson sent alone where the machine held the task past the 5 ms a
/// lesson waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_answers_teach_rides_on_the_next_reservation() {
    let (sent, requests) = redis_calls(100_000, 100_000, 1, 40).await;
    assert!(
        sent * 2 <= requests * 3,
        "{sent} calls of Redis for {requests} requests"
    );
}

/// The fleet issue's goal, pacing included: at most 1.5 calls of Redis a
/// request where every call waits for its turn. A waiter that wakes to a
/// fresh reading of the block counter looks no further, and what answers
/// teach waits for the next booking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement that depends on timing, run by hand: 1.06-1.36 calls a request on a 2-core machine, three copies at once included (BENCHMARKS.md, Redis limiter); a machine busy enough to delay a booking past the 5 ms a lesson waits after it sends the lesson alone"]
async fn a_paced_request_costs_at_most_one_and_a_half_calls() {
    let (sent, requests) = redis_calls(40, 4, 8, 200).await;
    assert!(
        sent * 2 <= requests * 3,
        "{sent} calls of Redis for {requests} requests"
    );
}

/// A fleet's cap on calls in flight (`Scope::shared_in_flight`) binds:
/// the calls of a process granted by their buckets ask for the fleet's
/// slot by priority, and the one asking gives its turn up to a call of a
/// higher class. Another process holds the only slot; two batch calls
/// wait, then an interactive one; when the slot frees, the interactive
/// call goes first, then the two batch calls. (First
/// asked, first served, the batch call asking first went first, and the
/// interactive call waited behind every batch call granted before it.)
/// Each step waits for a state: the calls queued at the key, the sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleets_slot_goes_to_an_interactive_call_before_the_batch_calls_waiting() {
    let redis = RedisServer::start();
    let server = server().await;
    let backend = RedisBackend::connect(redis.url())
        .await
        .unwrap()
        .with_timeout(Duration::from_secs(5));
    let other = backend
        .in_flight("api")
        .unwrap()
        .with_max_in_flight(1)
        .unwrap();
    let sent = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let client = {
        let (backend, sent) = (backend.clone(), Arc::clone(&sent));
        ThrottledClient::builder(reqwest::Client::new())
            // A rate no call waits for: the calls wait at the slot alone.
            .host_scope(
                Scope::per_host()
                    .rate(RequestRate::per_second(10_000).unwrap())
                    .burst(10_000)
                    .shared_in_flight(move |_| backend.in_flight("api")?.with_max_in_flight(1)),
            )
            .on_event(move |event| {
                if let reqwest_pace::Event::Sent { url, .. } = event {
                    sent.lock().unwrap().push(url.path().to_owned());
                }
            })
            .build()
            .unwrap()
    };
    let queued = || {
        client
            .key_status("host", &server.url())
            .map_or(0, |status| status.queued)
    };
    let call = |path: &str, priority: Priority| {
        let (client, url) = (client.clone(), format!("{}/{path}", server.url()));
        tokio::spawn(async move { client.get(url).priority(priority).send().await })
    };
    // The key's first response, so that no call waits for it as a probe.
    let warm_up = call("warm-up", Priority::BATCH).await.unwrap().unwrap();
    assert_eq!(warm_up.status(), 200);
    sent.lock().unwrap().clear();
    let held = other.acquire().await.unwrap();
    // One batch call asks for the slot; the other queues behind it.
    let first = call("batch-1", Priority::BATCH);
    let second = call("batch-2", Priority::BATCH);
    until_reads(async || queued(), 1).await;
    // The interactive call takes the turn to ask from the batch call
    // asking, which queues again in its place: two wait.
    let interactive = call("interactive", Priority::INTERACTIVE);
    until_reads(async || queued(), 2).await;
    assert!(
        sent.lock().unwrap().is_empty(),
        "nothing sent while the slot is held"
    );
    drop(held);
    for call in [first, second, interactive] {
        assert_eq!(call.await.unwrap().unwrap().status(), 200);
    }
    // The batch calls' own order is the order they reached the key,
    // which two tasks spawned one after the other do not fix.
    let mut sent = sent.lock().unwrap().clone();
    assert_eq!(
        sent[0], "/interactive",
        "the order the slot went in: {sent:?}"
    );
    sent[1..].sort();
    assert_eq!(sent, ["/interactive", "/batch-1", "/batch-2"]);
}
