//! A client with nothing configured but the reconciler learns an LLM API's
//! cap on calls in flight (`testing::llm`, in process, on tokio's paused
//! clock) from its refusals, keeps under it, and does not mistake it for a
//! rate: where the cap binds it runs at the cap, where a rate binds the
//! cap it learned costs nothing.
//!
//! The server's own `peak_in_flight` never passes its cap (it refuses past
//! it), so what the client sends is watched at the server's door: how many
//! calls are in flight there, admitted or about to be refused, as each one
//! arrives.
#![cfg(feature = "testing")]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use reqwest_pace::headers::Dimension;
use reqwest_pace::retry::RetryPolicy;
use reqwest_pace::testing::llm::{LlmDialect, LlmLimit, LlmServer, LlmServerBuilder, LlmService};
use reqwest_pace::{
    Charge, Cost, FromHeaders, PaceHttpService, PaceLayer, Pacer, Scope, UsageBody,
};
use tokio::time::Instant;
use tower_layer::Layer as _;
use tower_service::Service;

/// What the server's door saw.
#[derive(Debug, Default)]
struct Seen {
    /// Calls in flight at the door now.
    now: usize,
    /// Whether a call was refused for concurrency yet.
    refused: bool,
    /// After the first concurrency refusal: the most calls in flight as
    /// one arrived (itself among them), and the arrivals that found the
    /// server's cap full.
    peak_after: usize,
    over_after: usize,
}

/// The server's service, counting the calls in flight at its door.
#[derive(Clone)]
struct Door {
    inner: LlmService,
    seen: Arc<Mutex<Seen>>,
    cap: usize,
}

impl Service<reqwest::Request> for Door {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, reqwest::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: reqwest::Request) -> Self::Future {
        {
            let mut seen = self.seen.lock().unwrap();
            seen.now += 1;
            if seen.refused {
                seen.peak_after = seen.peak_after.max(seen.now);
                seen.over_after += usize::from(seen.now > self.cap);
            }
        }
        let answer = self.inner.call(request);
        let seen = Arc::clone(&self.seen);
        Box::pin(async move {
            let result = answer.await;
            let mut seen = seen.lock().unwrap();
            seen.now -= 1;
            if result.as_ref().is_ok_and(|r| r.status() == 429) {
                seen.refused = true;
            }
            result
        })
    }
}

type Paced = PaceHttpService<Door, String>;

/// A host scope of requests and one of tokens, nothing configured but the
/// dimension and the reconciler; POSTs retried; random draws from `seed`.
fn pacer(seed: u64) -> Pacer {
    let state = AtomicU64::new(seed.max(1));
    let draw = move || {
        // xorshift64*
        let mut x = state.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    };
    Pacer::builder()
        .retry(RetryPolicy::default().with_retry_non_idempotent(true))
        .random(draw)
        .scope(
            Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens),
        )
        .reconcile((FromHeaders, UsageBody))
        .build()
        .unwrap()
}

/// A call of `input` prompt tokens and `max_tokens`, estimated at their sum.
fn call(server: &LlmServer, input: u64, max_tokens: u64) -> http::Request<String> {
    let mut request = http::Request::post(format!("{}/v1/chat/completions", server.url()))
        .body(format!(
            r#"{{"input_tokens": {input}, "max_tokens": {max_tokens}}}"#
        ))
        .unwrap();
    request.extensions_mut().insert(
        Cost::default()
            .with(Dimension::Tokens, input + max_tokens)
            .with(Dimension::InputTokens, input)
            .with(Dimension::OutputTokens, max_tokens),
    );
    request
}

struct Run {
    /// Admitted over what the binding limit allows in the run's time.
    share: f64,
    refused: f64,
    failed: usize,
    elapsed: Duration,
    seen: Seen,
    /// The learned cap at the end, as `key_status` says it.
    cap: Option<usize>,
    /// The host key's rate at the end, per second.
    rate: Option<f64>,
}

/// `calls` calls by `workers` tasks, each a prompt of 100 to 1 500 tokens
/// and a `max_tokens` of 100 to 1 000 (the same on every run), their usage
/// settled. The share is of whichever limit binds: a rate limit (less what
/// its bucket held at the start) or the cap (its calls per service time).
async fn run(server: &LlmServer, pacer: &Pacer, calls: usize, workers: usize) -> Run {
    let cap = server.max_in_flight().unwrap_or(usize::MAX);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let door = Door {
        inner: server.service(),
        seen: Arc::clone(&seen),
        cap,
    };
    let service: Paced = PaceLayer::new(pacer.clone())
        .layer(door)
        .for_http_requests::<String>();
    let t0 = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (mut service, next, server) = (service.clone(), next.clone(), server.clone());
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    return failed;
                }
                let input = 100 + (i as u64 * 7_919) % 1_401;
                let max_tokens = 100 + (i as u64 * 104_729) % 901;
                match service.call(call(&server, input, max_tokens)).await {
                    Ok(response) if response.status() == 200 => {
                        let charge = Charge::of(&response);
                        let body = response.bytes().await.unwrap_or_default();
                        if let Some(charge) = charge {
                            charge.settle_body(&body);
                        }
                    }
                    _ => failed += 1,
                }
            }
        }));
    }
    let mut failed = 0;
    for task in tasks {
        failed += task.await.unwrap();
    }
    let elapsed = t0.elapsed();
    let stats = server.stats();
    let seconds = elapsed.as_secs_f64();
    let minutes = seconds / 60.0;
    let tokens = (stats.input_tokens_charged + stats.output_tokens_charged) as f64;
    let shares = [
        server
            .per_minute(LlmLimit::Tokens)
            .map(|l| (tokens - l as f64) / (l as f64 * minutes)),
        server
            .per_minute(LlmLimit::Requests)
            .map(|l| (stats.admitted as f64 - l as f64) / (l as f64 * minutes)),
        server
            .max_in_flight()
            .map(|cap| stats.admitted as f64 / (cap as f64 / SERVICE.as_secs_f64() * seconds)),
    ];
    let status = pacer.key_status("host", &server.url());
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    Run {
        share: shares.into_iter().flatten().fold(0.0, f64::max),
        refused: stats.refused_total() as f64 / stats.requests.max(1) as f64,
        failed,
        elapsed,
        seen,
        cap: status.and_then(|s| s.max_in_flight),
        rate: pacer.current_rate("host", &server.url()),
    }
}

/// Every test server holds a call this long.
const SERVICE: Duration = Duration::from_secs(1);

fn server(dialect: LlmDialect, seed: u64) -> LlmServerBuilder {
    // The clock pinned: Anthropic's resets are whole seconds, and the time
    // of day would otherwise decide the run.
    let wall = std::time::UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + 250 * seed);
    LlmServer::builder()
        .dialect(dialect)
        .service_time(SERVICE)
        .seed(seed)
        .wall_clock(wall)
}

fn runs() -> impl Iterator<Item = (LlmDialect, u64)> {
    [LlmDialect::OpenAi, LlmDialect::Anthropic]
        .into_iter()
        .flat_map(|d| (1..=4).map(move |seed| (d, seed)))
}

/// The issue's goal where the cap binds: 16 tasks, a cap of 4 calls held
/// 1 s each (4 calls a second), requests and tokens to spare (50 calls and
/// about 40 a second): at least 0.95 of what the cap allows, at most 1 %
/// refused, no failed call; after the first refusal the calls in flight
/// at the door never pass the cap but by the probes, one call each, at
/// most 3 in 2 000 calls (the first after 256 answered at the cap, the
/// run doubling on each refused probe), the key ends at the cap, and its
/// rate was not cut by the refusals. (Before the cap was learned, OpenAI's
/// seeds 1 to 3: 0.89 to 0.90 of the throughput, 43 to 44 % refused, 59
/// to 78 failed calls.)
#[tokio::test(start_paused = true)]
async fn a_cap_on_calls_in_flight_is_learned_and_kept() {
    const CAP: usize = 4;
    let mut worst = Vec::new();
    for (dialect, seed) in runs() {
        let server = server(dialect, seed)
            .requests_per_minute(3_000)
            .tokens_per_minute(2_400_000)
            .max_in_flight(CAP)
            .start()
            .await
            .unwrap();
        let pacer = pacer(seed);
        let run = run(&server, &pacer, 2_000, 16).await;
        let stats = server.stats();
        eprintln!(
            "{dialect:?} seed {seed}: {:.3} of the cap's throughput, {:.2} % refused \
             ({} for concurrency), {} failed, {:?}; after the first refusal {} at most \
             in flight at the door, {} arrivals over the cap; learned cap {:?}; server peak {}; \
             rate {:?}/s",
            run.share,
            run.refused * 100.0,
            stats.refused(LlmLimit::Concurrency),
            run.failed,
            run.elapsed,
            run.seen.peak_after,
            run.seen.over_after,
            run.cap,
            stats.peak_in_flight,
            run.rate,
        );
        assert!(stats.peak_in_flight <= CAP);
        let bad = run.failed > 0
            || run.refused > 0.01
            || run.share < 0.95
            || !run.seen.refused
            || run.seen.peak_after > CAP + 1
            || run.seen.over_after > 3
            || run.cap != Some(CAP)
            // Not read as rate refusals: the rate stays at the requests
            // limit's (50 a second), far above what the cap lets through.
            || run.rate.is_none_or(|r| r < 0.95 * 50.0);
        if bad {
            worst.push(format!(
                "{dialect:?} seed {seed}: {:.3}, {:.2} % refused, {} failed, peak {} \
                 ({} over), cap {:?}, rate {:?}",
                run.share,
                run.refused * 100.0,
                run.failed,
                run.seen.peak_after,
                run.seen.over_after,
                run.cap,
                run.rate
            ));
        }
    }
    assert!(worst.is_empty(), "{worst:#?}");
}

/// Where tokens bind (150 000 a minute, about 2.2 calls a second) and the
/// cap does not (6 calls held 1 s: 6 a second), 32 tasks run into the cap
/// at first: what it teaches does not cut the throughput below 0.95 of
/// the tokens limit, with at most 1 % refused and no failed call. (Before
/// the cap was learned: 13.8 to 14.4 % refused, 46 to 53 failed calls.)
#[tokio::test(start_paused = true)]
async fn a_cap_learned_where_a_rate_binds_costs_no_throughput() {
    const CAP: usize = 6;
    let mut worst = Vec::new();
    for (dialect, seed) in runs() {
        let server = server(dialect, seed)
            .requests_per_minute(3_000)
            .tokens_per_minute(150_000)
            .max_in_flight(CAP)
            .start()
            .await
            .unwrap();
        let pacer = pacer(seed);
        let run = run(&server, &pacer, 2_000, 32).await;
        let stats = server.stats();
        eprintln!(
            "{dialect:?} seed {seed}: {:.3} of the tokens limit, {:.2} % refused \
             ({} for concurrency), {} failed, {:?}; learned cap {:?}",
            run.share,
            run.refused * 100.0,
            stats.refused(LlmLimit::Concurrency),
            run.failed,
            run.elapsed,
            run.cap,
        );
        if run.failed > 0 || run.refused > 0.01 || run.share < 0.95 {
            worst.push(format!(
                "{dialect:?} seed {seed}: {:.3}, {:.2} % refused, {} failed, cap {:?}",
                run.share,
                run.refused * 100.0,
                run.failed,
                run.cap
            ));
        }
    }
    assert!(worst.is_empty(), "{worst:#?}");
}

/// A configured cap below the server's is kept: no refusal comes, and
/// learning never raises it.
#[tokio::test(start_paused = true)]
async fn a_configured_cap_is_never_raised() {
    let server = server(LlmDialect::OpenAi, 1)
        .requests_per_minute(3_000)
        .tokens_per_minute(2_400_000)
        .max_in_flight(4)
        .start()
        .await
        .unwrap();
    let pacer = Pacer::builder()
        .retry(RetryPolicy::default().with_retry_non_idempotent(true))
        .host_scope(Scope::per_host().max_in_flight(2))
        .reconcile((FromHeaders, UsageBody))
        .build()
        .unwrap();
    let run = run(&server, &pacer, 600, 16).await;
    let stats = server.stats();
    assert_eq!((run.failed, stats.refused_total()), (0, 0));
    assert_eq!((stats.peak_in_flight, run.cap), (2, Some(2)));
    // The first alone for 1 s, then the 599 others two at a time, held
    // 1 s each: 300 rounds.
    assert_eq!(run.elapsed, Duration::from_secs(301));
}

/// The first refusal, exactly: three calls behind the key's first answer
/// (1 s), a cap of 2, calls held 1 s, sent a few milliseconds apart by the
/// requests bucket the first answer taught. The third is refused at
/// 1 005 ms, learns a cap of 2, and waits for a permit, not for a rate nor
/// only its backoff (which ends by 1 205 ms): it goes again at 2 002 ms,
/// as the first of the two (admitted at 1 002 ms) completes, and the key
/// reports the cap.
#[tokio::test(start_paused = true)]
async fn the_call_refused_for_concurrency_waits_for_a_permit() {
    let server = server(LlmDialect::OpenAi, 1)
        .requests_per_minute(3_000)
        .tokens_per_minute(2_400_000)
        .max_in_flight(2)
        .start()
        .await
        .unwrap();
    let pacer = pacer(1);
    let run = run(&server, &pacer, 4, 3).await;
    let log: Vec<_> = server
        .requests()
        .iter()
        .map(|r| (r.at.as_millis(), r.refused))
        .collect();
    assert_eq!(run.failed, 0);
    assert_eq!(run.cap, Some(2));
    assert_eq!(
        log,
        [
            (0, None),
            (1_002, None),
            (1_003, None),
            (1_005, Some(LlmLimit::Concurrency)),
            (2_002, None),
        ]
    );
    assert_eq!(run.elapsed, Duration::from_millis(3_002));
}
