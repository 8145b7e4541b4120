//! The client's metrics (feature `metrics`), counted by a recorder of the
//! test's own during scripted runs against the embedded server on tokio's
//! paused clock: exact counts, exact waits, and no series per key.
#![cfg(all(feature = "metrics", feature = "testing"))]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use reqwest_pace::retry::{Backoff, BackoffJitter, ReleaseJitter, RetryRules};
use reqwest_pace::testing::{Dialect, Fault, RateLimitedServer, RetryAfter};
use reqwest_pace::{ErrorKind, Event, RequestRate, Scope, ThrottledClient};

/// The samples a histogram received, in order.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Every series registered, by `name{label=value,...}` (labels sorted).
///
/// It is installed for one test's thread only
/// (`metrics::set_default_local_recorder`), so the tests of this binary,
/// each on its own current-thread runtime, do not see each other's
/// metrics: the client records from the task that awaits it, which runs
/// on the test's thread.
#[derive(Default)]
struct TestRecorder {
    counters: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
    described: Mutex<BTreeMap<String, Option<Unit>>>,
}

fn series(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    if labels.is_empty() {
        key.name().to_string()
    } else {
        format!("{}{{{}}}", key.name(), labels.join(","))
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, name: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(name, unit, help);
    }
    fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(name, unit, help);
    }
    fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(name, unit, help);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(Arc::clone(counters.entry(series(key)).or_default()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        Gauge::from_arc(Arc::clone(gauges.entry(series(key)).or_default()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(Arc::clone(histograms.entry(series(key)).or_default()))
    }
}

impl TestRecorder {
    fn describe(&self, name: KeyName, unit: Option<Unit>, help: SharedString) {
        assert!(!help.is_empty(), "{} has no help", name.as_str());
        let mut described = self.described.lock().unwrap();
        let first = described.insert(name.as_str().to_owned(), unit).is_none();
        assert!(first, "{} described twice", name.as_str());
    }

    /// Every series' metric is one that `describe_metrics` describes.
    fn assert_all_described(&self) {
        let described = self.described.lock().unwrap();
        let names = self
            .counters()
            .into_keys()
            .chain(self.gauges().into_keys())
            .chain(self.histograms_ms().into_keys());
        for series in names {
            let name = series.split('{').next().unwrap_or_default();
            assert!(described.contains_key(name), "{series} is not described");
        }
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        let counters = self.counters.lock().unwrap();
        counters
            .iter()
            .map(|(k, v)| (k.clone(), v.load(Ordering::SeqCst)))
            .collect()
    }

    fn gauges(&self) -> BTreeMap<String, f64> {
        let gauges = self.gauges.lock().unwrap();
        gauges
            .iter()
            .map(|(k, v)| (k.clone(), f64::from_bits(v.load(Ordering::SeqCst))))
            .collect()
    }

    /// Each histogram's samples, in milliseconds (rounded to the
    /// microsecond, as the clock's arithmetic is in nanoseconds).
    fn histograms_ms(&self) -> BTreeMap<String, Vec<f64>> {
        let histograms = self.histograms.lock().unwrap();
        histograms
            .iter()
            .map(|(k, v)| {
                let samples = v.0.lock().unwrap();
                let ms = samples
                    .iter()
                    .map(|s| (s * 1e6).round() / 1e3)
                    .collect::<Vec<_>>();
                (k.clone(), ms)
            })
            .collect()
    }
}

fn expected<T: Clone>(rows: &[(&str, T)]) -> BTreeMap<String, T> {
    rows.iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Two requests a second, one at a time; two attempts a call; exact retry
/// delays and releases.
fn paced_client() -> ThrottledClient {
    ThrottledClient::builder(reqwest::Client::new())
        .rate(RequestRate::per_second(2).unwrap())
        .burst(1)
        .retry(
            RetryRules::default()
                .with_backoff(
                    Backoff::exponential(Duration::from_millis(100))
                        .with_jitter(BackoffJitter::None),
                )
                .with_max_attempts(2)
                .with_max_retry_after(Duration::from_secs(60)),
        )
        .release_jitter(ReleaseJitter::none())
        .build()
        .unwrap()
}

/// The script, on a client capped at 2 requests a second (so every call
/// after the first waits for the bucket) and allowed 2 attempts per call:
///
/// 1. at 0 s, a 503 with `Retry-After: 1` (throttled; a retry the server
///    named), then a 200 at 1 s;
/// 2. and 3. at 1.5 s and 2 s, each after a 500 ms wait: 200;
/// 4. at 2.5 s (a 500 ms wait) a 503 without `Retry-After` (throttled,
///    as a proxy's bare 503 is; retried on the 100 ms backoff), and at 3 s
///    (a 400 ms wait after that sleep) another: its attempts are spent;
/// 5. at 3.5 s (a 500 ms wait) a 429 asking for an hour, over the 60 s
///    cap: it gives up at once.
#[tokio::test(start_paused = true)]
async fn a_scripted_run_is_counted_exactly() {
    let recorder = TestRecorder::default();
    let _installed = metrics::set_default_local_recorder(&recorder);
    reqwest_pace::describe_metrics();

    let server = RateLimitedServer::builder()
        .limit(RequestRate::per_second(1000).unwrap())
        .burst(1000)
        .dialect(Dialect::None)
        .start()
        .await
        .unwrap();
    let client = paced_client();
    let start = tokio::time::Instant::now();

    server.inject(
        Fault::service_unavailable()
            .times(1)
            .retry_after(RetryAfter::Seconds(1)),
    );
    for _ in 0..3 {
        let response = client.get(server.url()).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(start.elapsed(), ms(2_000));

    server.inject(Fault::service_unavailable().times(2));
    let error = client.get(server.url()).send().await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AttemptsExhausted);
    assert_eq!(start.elapsed(), ms(3_000));

    server.inject(
        Fault::too_many_requests()
            .times(1)
            .retry_after(RetryAfter::Seconds(3_600)),
    );
    let error = client.get(server.url()).send().await.unwrap_err();
    assert!(matches!(error.kind(), ErrorKind::ServerWait { .. }));
    assert_eq!(start.elapsed(), ms(3_500));
    let at: Vec<Duration> = server.requests().iter().map(|r| r.at).collect();
    let script = [0, 1_000, 1_500, 2_000, 2_500, 3_000, 3_500];
    assert_eq!(at, script.map(ms));

    assert_eq!(
        recorder.counters(),
        expected(&[
            ("reqwest_pace_sends_total", 7),
            ("reqwest_pace_responses_total{class=2xx}", 3),
            ("reqwest_pace_responses_total{class=4xx}", 1),
            ("reqwest_pace_responses_total{class=5xx}", 3),
            ("reqwest_pace_throttled_total{scope=host,status=429}", 1),
            ("reqwest_pace_throttled_total{scope=host,status=503}", 3),
            ("reqwest_pace_retries_total{source=server}", 1),
            ("reqwest_pace_retries_total{source=backoff}", 1),
            ("reqwest_pace_gave_up_total{reason=attempts_exhausted}", 1),
            ("reqwest_pace_gave_up_total{reason=server_wait}", 1),
            ("reqwest_pace_completed_total{class=2xx}", 3),
        ]),
    );
    assert_eq!(
        recorder.histograms_ms(),
        expected(&[
            (
                "reqwest_pace_wait_seconds{scope=host}",
                vec![500.0, 500.0, 500.0, 400.0, 500.0]
            ),
            (
                "reqwest_pace_retry_delay_seconds{source=server}",
                vec![1_000.0]
            ),
            (
                "reqwest_pace_retry_delay_seconds{source=backoff}",
                vec![100.0]
            ),
        ]),
    );
    // A capped scope learns no rate.
    assert_eq!(recorder.gauges(), BTreeMap::new());
    recorder.assert_all_described();
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Two tokens of one `per_header` scope, each learning its limit from the
/// server's `X-RateLimit-*` headers: the learned rate is one gauge per
/// scope, and no series names a key.
#[tokio::test(start_paused = true)]
async fn learned_rates_are_gauged_per_layer_never_per_key() {
    let recorder = TestRecorder::default();
    let _installed = metrics::set_default_local_recorder(&recorder);
    reqwest_pace::describe_metrics();

    let server = RateLimitedServer::builder()
        .limit(RequestRate::per_second(10).unwrap())
        .burst(10)
        .dialect(Dialect::XRateLimit)
        .start()
        .await
        .unwrap();
    let log: Arc<Mutex<Vec<Event>>> = Arc::default();
    let seen = Arc::clone(&log);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .scope(Scope::per_header("token", "x-api-key"))
        .on_event(move |e| seen.lock().unwrap().push(e.clone()))
        .build()
        .unwrap();
    for token in ["alpha", "beta"] {
        for _ in 0..3 {
            let request = client.get(server.url()).header("x-api-key", token);
            assert_eq!(request.send().await.unwrap().status(), 200);
        }
    }

    let paced: Vec<(std::sync::Arc<str>, std::sync::Arc<str>, f64)> = log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Paced {
                scope,
                key,
                per_second,
                ..
            } => Some((scope.clone(), key.clone(), *per_second)),
            _ => None,
        })
        .collect();
    // Each token learned a rate from its first response and a lower one
    // from its second; the one gauge holds the last learned (beta's).
    assert_eq!(paced.len(), 4);
    let keys: std::collections::BTreeSet<&str> = paced.iter().map(|p| &*p.1).collect();
    assert_eq!(keys.len(), 2);
    assert!(paced.iter().all(|p| &*p.0 == "token"));
    let last = paced[3].2;
    assert_eq!(
        client.current_rate("token", &paced[3].1).map(|r| r > 0.0),
        Some(true)
    );

    let counters = recorder.counters();
    assert_eq!(
        counters,
        expected(&[
            ("reqwest_pace_sends_total", 6),
            ("reqwest_pace_responses_total{class=2xx}", 6),
            ("reqwest_pace_repaced_total{scope=token}", 4),
            ("reqwest_pace_completed_total{class=2xx}", 6),
        ]),
    );
    assert_eq!(
        recorder.gauges(),
        expected(&[("reqwest_pace_rate_per_second{scope=token}", last)]),
    );
    // Each token's third request waited for the rate its second taught.
    assert_eq!(
        recorder.histograms_ms(),
        expected(&[("reqwest_pace_wait_seconds{scope=token}", vec![65.0, 65.0])]),
    );

    let names: Vec<String> = counters
        .into_keys()
        .chain(recorder.gauges().into_keys())
        .chain(recorder.histograms_ms().into_keys())
        .collect();
    for name in names {
        for leak in ["key", "alpha", "beta", "127.0.0.1", "http"] {
            assert!(!name.contains(leak), "{name} names a key");
        }
    }
    recorder.assert_all_described();
}

/// `describe_metrics` gives every metric its unit and a line of help, once.
#[test]
fn every_metric_is_described_with_its_unit() {
    let recorder = TestRecorder::default();
    metrics::with_local_recorder(&recorder, reqwest_pace::describe_metrics);
    let count = Some(Unit::Count);
    let seconds = Some(Unit::Seconds);
    assert_eq!(
        *recorder.described.lock().unwrap(),
        expected(&[
            ("reqwest_pace_sends_total", count),
            ("reqwest_pace_responses_total", count),
            ("reqwest_pace_wait_seconds", seconds),
            ("reqwest_pace_throttled_total", count),
            ("reqwest_pace_repaced_total", count),
            ("reqwest_pace_rate_per_second", None),
            ("reqwest_pace_retries_total", count),
            ("reqwest_pace_retry_delay_seconds", seconds),
            ("reqwest_pace_gave_up_total", count),
            ("reqwest_pace_completed_total", count),
            ("reqwest_pace_circuit_transitions_total", count),
            ("reqwest_pace_circuits_open", count),
        ]),
    );
}

/// A host's circuit breaker opens after two 500s, lets its probe through
/// after the cool-down, and the probe's success closes it: each change is
/// counted by the state entered, and the gauge of open breakers goes up
/// and back down (never a series per key).
#[tokio::test(start_paused = true)]
async fn circuit_changes_are_counted_and_open_breakers_gauged() {
    let recorder = TestRecorder::default();
    let _installed = metrics::set_default_local_recorder(&recorder);
    reqwest_pace::describe_metrics();
    let server = RateLimitedServer::builder()
        .limit(RequestRate::per_second(1_000).unwrap())
        .burst(1_000)
        .dialect(Dialect::None)
        .start()
        .await
        .unwrap();
    server.inject(Fault::internal_server_error().times(2));
    let breaker = reqwest_pace::CircuitBreaker::default()
        .failures(2)
        .cool_down(Duration::from_secs(1));
    let client = ThrottledClient::builder(reqwest::Client::new())
        .host_scope(
            Scope::per_host()
                .rate(RequestRate::per_second(1_000).unwrap())
                .circuit_breaker(breaker),
        )
        .build()
        .unwrap();
    for _ in 0..2 {
        client.get(server.url()).send().await.unwrap();
    }
    assert_eq!(
        recorder.gauges()["reqwest_pace_circuits_open{scope=host}"],
        1.0
    );
    assert!(client.get(server.url()).send().await.is_err());
    tokio::time::sleep(Duration::from_secs(1)).await;
    client.get(server.url()).send().await.unwrap();
    let counters = recorder.counters();
    let circuit = |state: &str| {
        counters[&format!("reqwest_pace_circuit_transitions_total{{scope=host,state={state}}}")]
    };
    assert_eq!(
        (circuit("open"), circuit("half_open"), circuit("closed")),
        (1, 1, 1)
    );
    assert_eq!(
        recorder.gauges()["reqwest_pace_circuits_open{scope=host}"],
        0.0
    );
    recorder.assert_all_described();
}
