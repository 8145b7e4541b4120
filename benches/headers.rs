//! The cost of reading one response's rate-limit headers, beside `sfv`
//! parsing the same structured field alone, and the cost of a hostile
//! 200 KB field (ignored by the size cap).
//!
//! `cargo bench -p reqwest-pace-benches --bench headers`

use std::time::SystemTime;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderName, HeaderValue};
use reqwest_pace::headers::{RateLimitSignal, MAX_FIELD_BYTES};

fn headers(pairs: &[(&str, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            map.append(n, v);
        }
    }
    map
}

/// A policy list of about `bytes` bytes.
fn policies(bytes: usize) -> String {
    let mut out = String::new();
    let mut i = 0;
    while out.len() < bytes {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&format!("\"p{i}\";q=10;w=1"));
        i += 1;
    }
    out
}

fn bench(c: &mut Criterion) {
    let now = SystemTime::now();
    let github = headers(&[
        ("x-ratelimit-limit", "5000".into()),
        ("x-ratelimit-remaining", "4990".into()),
        ("x-ratelimit-used", "10".into()),
        ("x-ratelimit-reset", "1800000000".into()),
        ("x-ratelimit-resource", "core".into()),
        ("date", "Fri, 15 Jan 2027 08:00:00 GMT".into()),
    ]);
    let ietf = headers(&[
        (
            "ratelimit-policy",
            "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400".into(),
        ),
        (
            "ratelimit",
            "\"burst\";r=50;t=30, \"daily\";r=900;t=3600".into(),
        ),
    ]);
    // Just under the cap: the most the parser reads in one field.
    let at_cap = policies(MAX_FIELD_BYTES - 64);
    let at_cap_headers = headers(&[("ratelimit-policy", at_cap.clone())]);
    let hostile = headers(&[("ratelimit-policy", policies(200_000))]);

    let mut group = c.benchmark_group("headers");
    group.bench_function("github response", |b| {
        b.iter(|| RateLimitSignal::parse(200, &github, now))
    });
    group.bench_function("ietf two policies", |b| {
        b.iter(|| RateLimitSignal::parse(200, &ietf, now))
    });
    group.bench_function("ietf field at the cap (8 KiB)", |b| {
        b.iter(|| RateLimitSignal::parse(200, &at_cap_headers, now))
    });
    group.bench_function("sfv alone, the same 8 KiB field", |b| {
        b.iter(|| sfv::Parser::new(&at_cap).parse::<sfv::List>())
    });
    group.bench_function("ietf field of 200 KB (ignored)", |b| {
        b.iter(|| RateLimitSignal::parse(200, &hostile, now))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
