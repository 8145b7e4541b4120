//! Bytes per client key: what a `Pacer`'s host layer holds for each host it
//! has seen, while the key's state is live and once it is idle and dropped
//! (what it learned is kept: `Layer::remember_for`), beside governor's
//! keyed limiter and the crate's bare `KeyedLimiter` on the same keys.
//!
//! Net heap bytes (allocated less freed) counted by `stats_alloc`, per key,
//! for 100 000 keys of the form `http://host-N.example:80`. No network: the
//! pacer runs as a tower layer over a service that answers 200 at once, on
//! tokio's paused clock.
//!
//! ```text
//! cargo bench -p reqwest-pace-benches --bench client_keys
//! ```

use std::alloc::System;
use std::future::{ready, Ready};
use std::num::NonZeroU32;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::poll_fn;
use reqwest_pace::{KeyedLimiter, PaceLayer, Pacer, RequestRate, Scope};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tower_layer::Layer;
use tower_service::Service;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const KEYS: usize = 100_000;

/// Answers every request with an empty 200, without a network.
#[derive(Clone)]
struct Answer;

impl Service<reqwest::Request> for Answer {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = Ready<Result<reqwest::Response, reqwest::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: reqwest::Request) -> Self::Future {
        let response = http::Response::builder()
            .status(200)
            .body(Vec::<u8>::new())
            .map(reqwest::Response::from);
        match response {
            Ok(response) => ready(Ok(response)),
            Err(e) => panic!("a 200 with an empty body: {e}"),
        }
    }
}

fn url(i: usize) -> reqwest::Url {
    reqwest::Url::parse(&format!("http://host-{i}.example/")).expect("a valid URL")
}

fn host_key(i: usize) -> String {
    format!("http://host-{i}.example:80")
}

/// Net bytes a region's allocations left: `stats_alloc` already counts a
/// reallocation's growth in `bytes_allocated` (and its shrinking in
/// `bytes_deallocated`); its `bytes_reallocated` is the same change again,
/// so adding it would count every grown buffer twice.
fn net(change: stats_alloc::Stats) -> isize {
    change.bytes_allocated as isize - change.bytes_deallocated as isize
}

/// Net bytes `f` leaves allocated.
fn net_bytes(f: impl FnOnce()) -> isize {
    let region = Region::new(GLOBAL);
    f();
    net(region.change())
}

fn per_key(bytes: isize) -> f64 {
    bytes as f64 / KEYS as f64
}

/// A pacer that has sent one request to each of `KEYS` hosts, and the net
/// bytes its keys hold: live, then once idle and swept.
fn pacer_bytes() -> (f64, f64, usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        // Room for every key (the default bound is 100 000 keys per scope).
        let scope = Scope::per_host().max_keys(10 * KEYS);
        let pacer = Pacer::builder().host_scope(scope).build().expect("a pacer");
        let mut service = PaceLayer::new(pacer.clone()).layer(Answer);
        let region = Region::new(GLOBAL);
        for i in 0..KEYS {
            poll_fn(|cx| service.poll_ready(cx)).await.expect("ready");
            let request = reqwest::Request::new(reqwest::Method::GET, url(i));
            let response = service.call(request).await.expect("a 200");
            drop(response);
        }
        let live = net(region.change());
        // Every key learned a rate (the cold start, from its first 200).
        assert!(pacer.current_rate("host", &host_key(0)).is_some());
        tokio::time::advance(Duration::from_secs(120)).await;
        let mut swept = 0;
        let idle = net_bytes(|| swept = pacer.sweep());
        let remembered = live + idle;
        (per_key(live), per_key(remembered), swept)
    })
}

fn governor_bytes() -> f64 {
    let keys: Vec<String> = (0..KEYS).map(host_key).collect();
    let mut limiter = None;
    let bytes = net_bytes(|| {
        let quota = governor::Quota::per_second(NonZeroU32::new(10).expect("10 > 0"));
        let keyed = governor::RateLimiter::keyed(quota);
        for key in &keys {
            let _ = keyed.check_key(key);
        }
        limiter = Some(keyed);
    });
    // The keys themselves were allocated before: count them in.
    let key_bytes: usize = keys.iter().map(|k| k.capacity()).sum();
    drop(limiter);
    per_key(bytes + key_bytes as isize)
}

fn keyed_bytes() -> f64 {
    let keys: Vec<String> = (0..KEYS).map(host_key).collect();
    let key_bytes: usize = keys.iter().map(|k| k.capacity()).sum();
    let mut map = None;
    let bytes = net_bytes(|| {
        let keyed: KeyedLimiter<String> =
            KeyedLimiter::token_buckets(RequestRate::per_second(10).expect("a rate"), 10)
                .expect("a keyed limiter");
        for key in keys {
            let _ = keyed.try_acquire(&key, 1);
        }
        map = Some(keyed);
    });
    drop(map);
    per_key(bytes + key_bytes as isize)
}

fn main() {
    let (live, remembered, swept) = pacer_bytes();
    assert_eq!(swept, KEYS, "every idle key's state is dropped");
    let governor = governor_bytes();
    let keyed = keyed_bytes();
    println!("### Bytes per client key ({KEYS} keys `http://host-N.example:80`, net heap)");
    println!("| what | bytes per key | against governor |");
    println!("|---|---:|---:|");
    println!(
        "| reqwest-pace client key, idle and dropped (what it learned) | {remembered:.1} | {:.2} |",
        remembered / governor
    );
    println!(
        "| reqwest-pace client key, live (whole state) | {live:.1} | {:.2} |",
        live / governor
    );
    println!(
        "| reqwest-pace `KeyedLimiter<String>` (compact) | {keyed:.1} | {:.2} |",
        keyed / governor
    );
    println!("| governor keyed (dashmap) | {governor:.1} | 1.00 |");
}
