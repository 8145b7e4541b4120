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

mod llm_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use reqwest_pace::headers::Dimension;
use reqwest_pace::retry::RetryRules;
use reqwest_pace::testing::llm::{LlmDialect, LlmLimit, LlmServer, LlmServerBuilder, LlmService};
use reqwest_pace::{FromHeaders, PaceHttpService, PaceLayer, Pacer, Scope, UsageBody};
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
    let draw = llm_support::seeded_draws(seed);
    Pacer::builder()
        .retry(RetryRules::default().with_retry_non_idempotent(true))
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
    let failed = llm_support::closed_loops(service, server, calls, workers).await;
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

/// The goal where the cap binds: 16 tasks, a cap of 4 calls held
/// 1 s each (4 calls a second), requests and tokens to spare (50 calls and
/// about 40 a second): at least 0.95 of what the cap allows, at most 1 %
/// refused, no failed call; after the first refusal the calls in flight
/// at the door never pass the cap (with `Scope::probe_cap` they did, by a
/// probe of one call after each run of 256, 512 ... answered at the cap),
/// the key ends at the cap, and its rate was not cut by the refusals. (Before the cap was learned, OpenAI's
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
            || run.seen.peak_after > CAP
            || run.seen.over_after > 0
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

/// A configured cap below the server's is kept: no refusal comes (that
/// learning never raises a cap set is
/// `a_configured_cap_an_outage_cut_comes_back_no_higher`).
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
        .retry(RetryRules::default().with_retry_non_idempotent(true))
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

/// A server answering `/refuse` with a concurrency refusal (a 429 naming
/// no wait, its requests limit with room, which the call gives up on)
/// after 200 ms, `/long` after
/// 1 s, anything else at once; it logs each arrival (path, user, ms).
#[derive(Clone)]
struct Scripted {
    t0: Instant,
    log: Arc<Mutex<Vec<(String, String, u128)>>>,
}

impl Service<reqwest::Request> for Scripted {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, reqwest::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: reqwest::Request) -> Self::Future {
        let path = request.url().path().to_owned();
        let user = request
            .headers()
            .get("x-user")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let at = self.t0.elapsed().as_millis();
        self.log.lock().unwrap().push((path.clone(), user, at));
        Box::pin(async move {
            let (status, hold) = match path.as_str() {
                "/refuse" => (429, 200),
                "/long" => (200, 1_000),
                _ => (200, 0),
            };
            tokio::time::sleep(Duration::from_millis(hold)).await;
            let response = http::Response::builder()
                .status(status)
                .header("x-ratelimit-limit-requests", "1000")
                .header("x-ratelimit-remaining-requests", "900")
                .header("x-ratelimit-reset-requests", "1s")
                .body(String::new())
                .unwrap();
            Ok(reqwest::Response::from(response))
        })
    }
}

/// Two scopes with permits, taken in their order: the learning host
/// scope's, then a user's (one call in flight, one a second). A
/// concurrency refusal read at 210 ms lowers the host's cap to 2 below
/// what is held, while X holds a host permit and waits for its user's
/// token, and Y holds another and waits for X's user permit. X is sent at
/// 1 s with its permit (one send over the just-lowered cap, which holds
/// from the next call on), not made to queue for the host's permit again
/// while it holds its user's (it would wait for Y, Y for it, and every
/// later call of the host behind them); Y goes at 2 s, its user's next
/// token, and a call of another user after them.
#[tokio::test(start_paused = true)]
async fn a_cap_lowered_while_a_call_waits_on_a_later_scope_never_deadlocks() {
    let pacer = Pacer::builder()
        .retry(RetryRules::default().with_max_attempts(1))
        .host_scope(Scope::per_host().probe_first(false))
        .scope(
            Scope::per_header("user", "x-user")
                .adaptive(false)
                .rate(reqwest_pace::RequestRate::per_second(1).unwrap())
                .burst(1)
                .max_in_flight(1),
        )
        .build()
        .unwrap();
    let t0 = Instant::now();
    let log = Arc::new(Mutex::new(Vec::new()));
    let service = PaceLayer::new(pacer.clone()).layer(Scripted {
        t0,
        log: Arc::clone(&log),
    });
    let spawn = |path: &'static str, user: &'static str, at: u64| {
        let mut service = service.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(at)).await;
            let mut request = reqwest::Request::new(
                reqwest::Method::GET,
                format!("http://api.test{path}").parse().unwrap(),
            );
            request
                .headers_mut()
                .insert("x-user", user.parse().unwrap());
            let status = service.call(request).await.map(|r| r.status().as_u16());
            (status.ok(), t0.elapsed().as_millis())
        })
    };
    // W spends u3's token; the refusal of u1's call comes with u2's in
    // flight (sent at 11 ms: the first answer taught the host 1 000
    // requests a second); X and Y are u3's next calls.
    let w = spawn("/", "u3", 0);
    let refused = spawn("/refuse", "u1", 10);
    let long = spawn("/long", "u2", 10);
    let x = spawn("/", "u3", 20);
    let y = spawn("/", "u3", 30);
    let ends = tokio::time::timeout(Duration::from_secs(60), async {
        let mut ends = Vec::new();
        for task in [w, refused, long, x, y] {
            ends.push(task.await.unwrap());
        }
        ends
    })
    .await
    .expect("the calls of the host hang");
    assert_eq!(
        ends,
        [
            (Some(200), 0),
            (None, 210),
            (Some(200), 1_011),
            (Some(200), 1_000),
            (Some(200), 2_000),
        ]
    );
    assert_eq!(
        pacer
            .key_status("host", "http://api.test:80")
            .unwrap()
            .max_in_flight,
        Some(2)
    );
    let after = tokio::time::timeout(Duration::from_secs(60), spawn("/", "u9", 0))
        .await
        .expect("a later call of the host hangs")
        .unwrap();
    assert_eq!(after, (Some(200), 2_000));
    let arrivals: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .map(|(path, user, at)| (path.clone(), user.clone(), *at))
        .collect();
    let expected = [
        ("/", "u3", 0),
        ("/refuse", "u1", 10),
        ("/long", "u2", 11),
        ("/", "u3", 1_000),
        ("/", "u3", 2_000),
        ("/", "u9", 2_000),
    ];
    assert_eq!(
        arrivals,
        expected.map(|(p, u, at)| (p.to_owned(), u.to_owned(), at))
    );
}

/// A server that holds each call 200 ms and answers `outage` (with its
/// requests limit showing room, no wait) from 5 s to 7 s, 200 otherwise.
#[derive(Clone)]
struct Outage {
    t0: Instant,
    outage: u16,
}

impl Service<reqwest::Request> for Outage {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, reqwest::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: reqwest::Request) -> Self::Future {
        let (t0, outage) = (self.t0, self.outage);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let at = t0.elapsed();
            let down = at >= Duration::from_secs(5) && at < Duration::from_secs(7);
            let response = http::Response::builder()
                .status(if down { outage } else { 200 })
                .header("x-ratelimit-limit-requests", "100000")
                .header("x-ratelimit-remaining-requests", "99000")
                .header("x-ratelimit-reset-requests", "60s")
                .body(String::new())
                .unwrap();
            Ok(reqwest::Response::from(response))
        })
    }
}

/// 32 tasks for 60 s against [`Outage`]: the calls answered, and the
/// host key's cap at the seconds given.
async fn through_an_outage(outage: u16, at: &[u64]) -> (u32, Vec<Option<usize>>) {
    let pacer = Pacer::builder()
        .retry(RetryRules::default().with_max_attempts(1))
        .build()
        .unwrap();
    through_an_outage_with(pacer, outage, at).await
}

/// [`through_an_outage`] with `pacer`.
async fn through_an_outage_with(
    pacer: Pacer,
    outage: u16,
    at: &[u64],
) -> (u32, Vec<Option<usize>>) {
    let t0 = Instant::now();
    let service = PaceLayer::new(pacer.clone()).layer(Outage { t0, outage });
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let mut service = service.clone();
        tasks.push(tokio::spawn(async move {
            let mut calls = 0;
            while t0.elapsed() < Duration::from_secs(60) {
                let request = reqwest::Request::new(
                    reqwest::Method::GET,
                    "http://api.test/".parse().unwrap(),
                );
                let _ = service.call(request).await;
                calls += 1;
            }
            calls
        }));
    }
    let mut caps = Vec::new();
    for &second in at {
        tokio::time::sleep_until(t0 + Duration::from_secs(second)).await;
        let status = pacer.key_status("host", "http://api.test:80");
        caps.push(status.and_then(|s| s.max_in_flight));
    }
    let mut calls = 0;
    for task in tasks {
        calls += task.await.unwrap();
    }
    (calls, caps)
}

/// A 2 s outage of 503s with room in the rate headers is overload, not a
/// cap on calls in flight: no cap is learned, and the 60 s see nearly the
/// 9 569 calls of a run without it (9 504; before only 429s were read so:
/// a cap of 1 within the second, 2 at 59 s, 1 084 calls).
#[tokio::test(start_paused = true)]
async fn an_outage_of_503s_teaches_no_cap() {
    let (calls, caps) = through_an_outage(503, &[6, 7, 8, 15, 59]).await;
    assert_eq!(caps, [None; 5]);
    assert!(calls >= 9_400, "{calls} calls");
}

/// The same outage answered with 429s, which do read as concurrency
/// refusals: the cap is halved once a round (no lower than half what was
/// in flight at each round's first refusal, 2 s of rounds of 200 ms take
/// it to 1), and it is back at 32 by 15 s, one round of calls at each
/// cap: the 32 calls in flight the server admitted before the outage, and
/// no more (the cap is not probed, see `Scope::probe_cap`).
#[tokio::test(start_paused = true)]
async fn a_cap_an_outage_of_429s_cut_comes_back_in_seconds() {
    assert_eq!(
        caps_through_an_outage_of_429s(false).await,
        [Some(1), Some(6), Some(16), Some(26), Some(32), Some(32)]
    );
}

/// The host key's cap at 6, 8, 10, 12, 15 and 59 s of [`through_an_outage`]
/// with 429s, each call tried once and the learned cap probed if `probe`;
/// the run answers at least 8 500 calls.
async fn caps_through_an_outage_of_429s(probe: bool) -> Vec<Option<usize>> {
    let pacer = Pacer::builder()
        .retry(RetryRules::default().with_max_attempts(1))
        .host_scope(Scope::per_host().probe_cap(probe))
        .build()
        .unwrap();
    let (calls, caps) = through_an_outage_with(pacer, 429, &[6, 8, 10, 12, 15, 59]).await;
    assert!(calls >= 8_500, "{calls} calls");
    caps
}

/// With `Scope::probe_cap`, the same outage's cap comes back as fast, and
/// is then probed one call past the 32 the server admitted: the server,
/// which has no cap of its own once the outage ends, admits the probe,
/// and the cap stands at 33 (with 32 tasks it never binds again).
#[tokio::test(start_paused = true)]
async fn a_probed_cap_goes_past_what_the_server_admitted_when_it_admits_the_probe() {
    assert_eq!(
        caps_through_an_outage_of_429s(true).await,
        [Some(1), Some(6), Some(16), Some(26), Some(33), Some(33)]
    );
}

/// A cap set at 8 that an outage of 429s cut comes back to 8, and no
/// higher, probed or not (unset and probed, the same outage's cap climbs
/// to 33).
#[tokio::test(start_paused = true)]
async fn a_configured_cap_an_outage_cut_comes_back_no_higher() {
    let pacer = Pacer::builder()
        .retry(RetryRules::default().with_max_attempts(1))
        .host_scope(Scope::per_host().max_in_flight(8).probe_cap(true))
        .build()
        .unwrap();
    let (_, caps) = through_an_outage_with(pacer, 429, &[6, 15, 30, 59]).await;
    assert!(caps[0].is_some_and(|c| c < 8), "{caps:?}");
    assert_eq!(caps[1..], [Some(8); 3]);
}
