//! Issue 22's fleet: four pacers (four processes' worth: each its own
//! scopes, learning and Redis connection) sharing one cap on calls in
//! flight (`Scope::shared_in_flight`) and one bucket of tokens per key
//! through a real `redis-server` the test starts, against the LLM API's
//! model in process, on the real clock. Nothing configured but the
//! reconciler: the cap is learned from the concurrency refusals any of
//! them reads.
//!
//! On the real clock only what cannot depend on how busy the machine is
//! is asserted: after the first refusal, the fleet never has more calls in
//! flight than the server's cap; every call is answered, none fails. The
//! throughput and the share refused are printed (the fleet bench's
//! business, not a test's).
#![cfg(all(feature = "testing", feature = "redis"))]

mod llm_support;
mod redis_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llm_support::seeded_draws;
use redis_support::RedisServer;
use reqwest_pace::headers::Dimension;
use reqwest_pace::redis::RedisBackend;
use reqwest_pace::retry::RetryPolicy;
use reqwest_pace::testing::llm::{LlmLimit, LlmServer};
use reqwest_pace::{Event, FromHeaders, PaceLayer, Pacer, Rate, Scope, UsageBody};
use tokio::time::Instant;
use tower_layer::Layer as _;

/// The server's cap on calls in flight (that of `examples/llm_batch.rs`).
const CAP: usize = 32;

/// How long the server holds a call.
const SERVICE: Duration = Duration::from_millis(200);

/// The fleet's calls in flight as its pacers' events count them (sent, not
/// yet received), and what that count reached after the first refusal.
#[derive(Default)]
struct Watch {
    now: usize,
    first_refusal: Option<Duration>,
    peak_after: usize,
    over_after: usize,
}

async fn member(redis: &RedisServer, seed: u64, watch: Arc<Mutex<Watch>>, start: Instant) -> Pacer {
    let backend = RedisBackend::connect(redis.url()).await.unwrap();
    let tokens = {
        let backend = backend.clone();
        move |key: &str| {
            let open = Rate::per_second(1_000_000)?;
            let bucket = backend.token_bucket(format!("tokens:{key}"), open, 1_000_000)?;
            Ok(Arc::new(bucket) as Arc<dyn reqwest_pace::Limiter>)
        }
    };
    Pacer::builder()
        .retry(RetryPolicy::default().with_retry_non_idempotent(true))
        .random(seeded_draws(seed))
        .host_scope(Scope::per_host().shared_in_flight(move |key| backend.in_flight(key)))
        .scope(
            Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens)
                .limiter(tokens),
        )
        .reconcile((FromHeaders, UsageBody))
        .on_event(move |event| {
            let mut watch = watch.lock().unwrap();
            match event {
                Event::Sent { .. } => {
                    watch.now += 1;
                    if watch.first_refusal.is_some() {
                        watch.peak_after = watch.peak_after.max(watch.now);
                        watch.over_after += usize::from(watch.now > CAP);
                    }
                }
                Event::Received { .. } => watch.now = watch.now.saturating_sub(1),
                // A refusal read and learned from (for concurrency: the
                // fleet's cap lowered in Redis before the event).
                Event::Throttled { .. } => {
                    watch.first_refusal.get_or_insert_with(|| start.elapsed());
                }
                _ => {}
            }
        })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_sharing_its_cap_through_redis_never_passes_it_after_the_first_refusal() {
    let redis = RedisServer::start();
    // The cap of `examples/llm_batch.rs` (32 calls in flight, each held
    // 200 ms) with requests and tokens to spare (60 000 and 100 000 000 a
    // minute), so that the cap binds throughout: 64 tasks in all, which
    // the rate learned from the first answers sends within 64 ms.
    let server = LlmServer::builder()
        .requests_per_minute(60_000)
        .tokens_per_minute(100_000_000)
        .max_in_flight(CAP)
        .service_time(SERVICE)
        .seed(1)
        .start()
        .await
        .unwrap();
    let watch = Arc::new(Mutex::new(Watch::default()));
    let start = Instant::now();
    let mut runs = Vec::new();
    for process in 0..4u64 {
        let pacer = member(&redis, process + 1, watch.clone(), start).await;
        let service = PaceLayer::new(pacer)
            .layer(server.service())
            .for_http_requests::<String>();
        let server = server.clone();
        runs.push(tokio::spawn(async move {
            llm_support::closed_loops(service, &server, 200, 16).await
        }));
    }
    let mut failed = 0;
    for run in runs {
        failed += run.await.unwrap();
    }
    let elapsed = start.elapsed();
    let stats = server.stats();
    let watch = watch.lock().unwrap();
    let refused = stats.refused_total() as f64 / stats.requests as f64;
    let allowed = CAP as f64 / SERVICE.as_secs_f64() * elapsed.as_secs_f64();
    eprintln!(
        "fleet of 4: {} admitted in {elapsed:?} ({:.3} of the cap's), {:.2} % refused ({} for \
         concurrency), {failed} failed; first refusal at {:?}, {} at most in flight after it, \
         {} sends above the cap; server's peak {}",
        stats.admitted,
        stats.admitted as f64 / allowed,
        refused * 100.0,
        stats.refused(LlmLimit::Concurrency),
        watch.first_refusal,
        watch.peak_after,
        watch.over_after,
        stats.peak_in_flight,
    );
    assert_eq!(failed, 0);
    assert_eq!(stats.admitted, 800, "every call answered once");
    assert!(watch.first_refusal.is_some(), "the cap was met");
    assert_eq!(
        watch.over_after, 0,
        "sends above the cap after the first refusal"
    );
}
