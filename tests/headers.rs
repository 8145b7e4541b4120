//! Table tests for every dialect `headers` reads, from the vendors' documented
//! examples, plus the validation rules and the raw-head reader.
#![cfg(feature = "client")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use reqwest_pace::headers::{
    parse_response_head, Dimension, HeadError, Ignored, Limit, RateLimitSignal, MAX_WAIT,
};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("test header name");
        let value = HeaderValue::from_bytes(value.as_bytes()).expect("test header value");
        map.append(name, value);
    }
    map
}

/// A fixed local receive time, far from every `Date` used below, so a test
/// passes only if absolute times are measured against `Date`.
const LOCAL: u64 = 1_900_000_000;

fn parse(status: u16, pairs: &[(&str, &str)]) -> RateLimitSignal {
    RateLimitSignal::parse(status, &headers(pairs), at(LOCAL))
}

fn date(secs: u64) -> String {
    httpdate::fmt_http_date(at(secs))
}

/// The limits' values without how finely each reset is known, which
/// `a_reset_says_how_finely_it_is_known` checks.
fn values(limits: &[Limit]) -> Vec<Limit> {
    limits
        .iter()
        .map(|limit| {
            let mut limit = limit.clone();
            limit.reset_precision = None;
            limit
        })
        .collect()
}

fn notes(signal: &RateLimitSignal) -> Vec<String> {
    signal.ignored.iter().map(ToString::to_string).collect()
}

// ---------------------------------------------------------------- Retry-After

#[test]
fn retry_after_delta_seconds() {
    let signal = parse(429, &[("retry-after", "120")]);
    assert_eq!(signal.retry_after, Some(secs(120)));
    assert!(signal.ignored.is_empty());
    assert!(!signal.has_limits());
}

#[test]
fn retry_after_http_date_in_every_format_is_measured_against_date() {
    // RFC 9110's example instant, written in the three HTTP-date formats.
    let formats = [
        "Sun, 06 Nov 1994 08:51:37 GMT",
        "Sunday, 06-Nov-94 08:51:37 GMT",
        "Sun Nov  6 08:51:37 1994",
    ];
    for retry in formats {
        let signal = parse(
            503,
            &[
                ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ("retry-after", retry),
            ],
        );
        assert_eq!(signal.retry_after, Some(secs(120)), "{retry}");
        assert!(signal.ignored.is_empty(), "{retry}: {:?}", signal.ignored);
        assert!(signal.is_throttled());
    }
}

#[test]
fn retry_after_http_date_without_date_uses_the_receive_time() {
    let map = headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]);
    let signal = RateLimitSignal::parse(429, &map, at(1_445_412_480 - 90));
    assert_eq!(signal.retry_after, Some(secs(90)));
}

#[test]
fn retry_after_http_date_in_the_past_is_zero_and_noted() {
    let signal = parse(
        429,
        &[
            ("date", "Wed, 21 Oct 2015 07:28:00 GMT"),
            ("retry-after", "Wed, 21 Oct 2015 07:27:00 GMT"),
        ],
    );
    assert_eq!(signal.retry_after, Some(Duration::ZERO));
    assert_eq!(
        notes(&signal),
        ["retry-after: time is 60 s in the past; using 0"]
    );
}

#[test]
fn millisecond_retry_after_headers_are_preferred() {
    let signal = parse(429, &[("retry-after-ms", "1500"), ("retry-after", "2")]);
    assert_eq!(signal.retry_after, Some(ms(1500)));
    let signal = parse(429, &[("x-ms-retry-after-ms", "250.5")]);
    assert_eq!(signal.retry_after, Some(Duration::from_micros(250_500)));
    let signal = parse(
        429,
        &[("retry-after-ms", "100"), ("x-ms-retry-after-ms", "300")],
    );
    assert_eq!(signal.retry_after, Some(ms(300)));
}

#[test]
fn absurd_retry_after_is_clamped_and_noted() {
    let signal = parse(429, &[("retry-after", "1000000000000")]);
    assert_eq!(signal.retry_after, Some(MAX_WAIT));
    assert_eq!(
        notes(&signal),
        ["retry-after: 1000000000000 s exceeds the 86400 s cap; clamped"]
    );
    let signal = parse(429, &[("retry-after", "99999999999999999999999")]);
    assert_eq!(signal.retry_after, None);
    assert_eq!(
        notes(&signal),
        ["retry-after: not delta-seconds or an HTTP-date"]
    );
}

#[test]
fn bad_retry_after_values_are_ignored_with_a_reason() {
    let cases = [
        ("-5", "retry-after: negative value"),
        ("NaN", "retry-after: not delta-seconds or an HTTP-date"),
        ("inf", "retry-after: not delta-seconds or an HTTP-date"),
        ("1e3", "retry-after: not delta-seconds or an HTTP-date"),
        ("soon", "retry-after: not delta-seconds or an HTTP-date"),
        ("trente", "retry-after: not delta-seconds or an HTTP-date"),
        ("   ", "retry-after: empty value"),
        ("30 秒", "retry-after: value is not visible ASCII"),
    ];
    for (value, note) in cases {
        let signal = parse(429, &[("retry-after", value)]);
        assert_eq!(signal.retry_after, None, "{value}");
        assert_eq!(notes(&signal), [note], "{value}");
    }
}

#[test]
fn shopify_fractional_retry_after_is_accepted() {
    let signal = parse(429, &[("retry-after", "2.0")]);
    assert_eq!(signal.retry_after, Some(secs(2)));
}

#[test]
fn duplicate_retry_after_agrees_silently_and_conflicts_keep_the_longest() {
    let signal = parse(429, &[("retry-after", "30"), ("retry-after", "30")]);
    assert_eq!(signal.retry_after, Some(secs(30)));
    assert!(signal.ignored.is_empty());

    let signal = parse(429, &[("retry-after", "30, 30")]);
    assert_eq!(signal.retry_after, Some(secs(30)));
    assert!(signal.ignored.is_empty());

    let signal = parse(429, &[("retry-after", "30"), ("retry-after", "60")]);
    assert_eq!(signal.retry_after, Some(secs(60)));
    assert_eq!(
        notes(&signal),
        [r#"retry-after: conflicting values ["30", "60"]; kept the largest"#]
    );
}

#[test]
fn a_bad_date_header_falls_back_to_the_receive_time_with_a_note() {
    let map = headers(&[
        ("date", "yesterday"),
        ("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"),
    ]);
    let signal = RateLimitSignal::parse(429, &map, at(1_445_412_480 - 10));
    assert_eq!(signal.retry_after, Some(secs(10)));
    assert_eq!(
        notes(&signal),
        ["date: not an HTTP-date; measuring absolute times from the local receive time"]
    );
}

// --------------------------------------------------------------------- GitHub

#[test]
fn github_primary_rate_limit() {
    // docs.github.com, "Rate limits for the REST API": the headers of a
    // search request.
    let signal = parse(
        200,
        &[
            ("date", "Mon, 13 Jun 2022 11:48:53 GMT"),
            ("x-ratelimit-limit", "30"),
            ("x-ratelimit-remaining", "14"),
            ("x-ratelimit-reset", "1655120964"),
            ("x-ratelimit-used", "16"),
            ("x-ratelimit-resource", "search"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("search", Dimension::Requests)
            .with_limit(30)
            .with_remaining(14)
            .with_reset(secs(31))]
    );
    assert!(signal.ignored.is_empty());
    assert!(!signal.is_throttled());
}

#[test]
fn github_exhausted_primary_limit_is_a_throttling_403() {
    let signal = parse(
        403,
        &[
            ("date", &date(1_372_700_000)),
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-used", "60"),
            ("x-ratelimit-reset", "1372700873"),
            ("x-ratelimit-resource", "core"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("core", Dimension::Requests)
            .with_limit(60)
            .with_remaining(0)
            .with_reset(secs(873))]
    );
    assert!(signal.is_throttled());
    assert!(signal.is_exhausted());
    assert_eq!(signal.suggested_wait(), Some(secs(873)));
}

#[test]
fn github_secondary_rate_limit_is_a_403_with_retry_after() {
    let signal = parse(
        403,
        &[
            ("retry-after", "60"),
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4990"),
        ],
    );
    assert!(signal.is_throttled());
    assert_eq!(signal.suggested_wait(), Some(secs(60)));
    let forbidden = parse(403, &[("x-ratelimit-remaining", "12")]);
    assert!(!forbidden.is_throttled());
}

// --------------------------------------------------------------------- OpenAI

#[test]
fn openai_requests_and_tokens_limits() {
    // platform.openai.com, "Rate limits": the documented sample values.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [
            Limit::new("requests", Dimension::Requests)
                .with_limit(60)
                .with_remaining(59)
                .with_reset(secs(1)),
            Limit::new("tokens", Dimension::Tokens)
                .with_limit(150_000)
                .with_remaining(149_984)
                .with_reset(secs(360)),
        ]
    );
    assert!(signal.ignored.is_empty());
    assert_eq!(
        signal.limit("tokens").and_then(|l| l.remaining),
        Some(149_984)
    );
}

#[test]
fn openai_duration_strings() {
    let cases = [
        ("20ms", ms(20)),
        ("1h2m3.5s", ms(3_723_500)),
        ("2m59.56s", ms(179_560)),
        ("0s", Duration::ZERO),
        ("7.66s", ms(7660)),
    ];
    for (text, expected) in cases {
        let signal = parse(200, &[("x-ratelimit-reset-requests", text)]);
        assert_eq!(signal.limits[0].reset, Some(expected), "{text}");
        assert!(signal.ignored.is_empty(), "{text}");
    }
    let signal = parse(200, &[("x-ratelimit-reset-requests", "3d")]);
    assert!(signal.limits.is_empty());
    assert_eq!(
        notes(&signal),
        ["x-ratelimit-reset-requests: unknown duration unit"]
    );
    let signal = parse(200, &[("x-ratelimit-reset-requests", "48h")]);
    assert_eq!(signal.limits[0].reset, Some(MAX_WAIT));
    assert_eq!(
        notes(&signal),
        ["x-ratelimit-reset-requests: 172800 s exceeds the 86400 s cap; clamped"]
    );
}

#[test]
fn openai_usage_based_tokens_become_an_other_dimension() {
    // Seen on the OpenAI community forum: a third family beside the two.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-limit-tokens_usage_based", "160000"),
            ("x-ratelimit-remaining-tokens_usage_based", "159976"),
            ("x-ratelimit-reset-tokens_usage_based", "9ms"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new(
            "tokens_usage_based",
            Dimension::Other("tokens_usage_based".into())
        )
        .with_limit(160_000)
        .with_remaining(159_976)
        .with_reset(ms(9))]
    );
}

// ------------------------------------------------------------------ Anthropic

#[test]
fn anthropic_families_with_rfc3339_resets() {
    let signal = parse(
        429,
        &[
            ("date", "Thu, 20 Jun 2024 12:34:56 GMT"),
            ("retry-after", "20"),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2024-06-20T12:35:16Z"),
            ("anthropic-ratelimit-tokens-limit", "100000"),
            ("anthropic-ratelimit-tokens-remaining", "98000"),
            (
                "anthropic-ratelimit-tokens-reset",
                "2024-06-20T12:35:56.500Z",
            ),
            ("anthropic-ratelimit-input-tokens-limit", "80000"),
            ("anthropic-ratelimit-input-tokens-remaining", "79000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2024-06-20T14:35:00+02:00",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "16000"),
            ("anthropic-ratelimit-output-tokens-remaining", "15000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2024-06-20T12:34:56Z",
            ),
        ],
    );
    assert_eq!(signal.retry_after, Some(secs(20)));
    assert_eq!(
        values(&signal.limits),
        [
            Limit::new("input_tokens", Dimension::InputTokens)
                .with_limit(80_000)
                .with_remaining(79_000)
                .with_reset(secs(4)),
            Limit::new("output_tokens", Dimension::OutputTokens)
                .with_limit(16_000)
                .with_remaining(15_000)
                .with_reset(Duration::ZERO),
            Limit::new("requests", Dimension::Requests)
                .with_limit(50)
                .with_remaining(0)
                .with_reset(secs(20)),
            Limit::new("tokens", Dimension::Tokens)
                .with_limit(100_000)
                .with_remaining(98_000)
                .with_reset(ms(60_500)),
        ]
    );
    assert!(signal.ignored.is_empty(), "{:?}", signal.ignored);
}

#[test]
fn anthropic_bad_timestamp_is_noted() {
    let signal = parse(
        200,
        &[
            ("anthropic-ratelimit-requests-remaining", "3"),
            ("anthropic-ratelimit-requests-reset", "2024-02-30T00:00:00Z"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests).with_remaining(3)]
    );
    assert_eq!(
        notes(&signal),
        ["anthropic-ratelimit-requests-reset: not a valid RFC 3339 timestamp"]
    );
}

// -------------------------------------------------------------------- Discord

#[test]
fn discord_bucket_with_fractional_reset_after() {
    // discord.com/developers/docs/topics/rate-limits, "Exceeding A Rate Limit".
    let signal = parse(
        429,
        &[
            ("retry-after", "65"),
            ("x-ratelimit-limit", "10"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1470173023.123"),
            ("x-ratelimit-reset-after", "64.57"),
            ("x-ratelimit-bucket", "abcd1234"),
            ("x-ratelimit-scope", "user"),
        ],
    );
    assert_eq!(signal.retry_after, Some(secs(65)));
    assert!(!signal.global);
    assert_eq!(signal.scope.as_deref(), Some("user"));
    assert_eq!(
        values(&signal.limits),
        [Limit::new("abcd1234", Dimension::Requests)
            .with_limit(10)
            .with_remaining(0)
            .with_reset(ms(64_570))
            .with_partition("abcd1234")]
    );
    assert!(signal.ignored.is_empty());
}

#[test]
fn discord_fractional_epoch_reset_without_reset_after() {
    let signal = parse(
        200,
        &[
            ("date", &date(1_470_173_000)),
            ("x-ratelimit-remaining", "4"),
            ("x-ratelimit-reset", "1470173023.123"),
        ],
    );
    assert_eq!(signal.limits[0].reset, Some(ms(23_123)));
}

#[test]
fn discord_global_limit() {
    let signal = parse(
        429,
        &[
            ("retry-after", "65"),
            ("x-ratelimit-global", "true"),
            ("x-ratelimit-scope", "global"),
        ],
    );
    assert!(signal.global);
    assert_eq!(signal.scope.as_deref(), Some("global"));
    assert!(signal.limits.is_empty());

    let signal = parse(429, &[("x-ratelimit-global", "yes")]);
    assert!(!signal.global);
    assert_eq!(
        notes(&signal),
        ["x-ratelimit-global: expected true or false"]
    );

    let signal = parse(429, &[("x-ratelimit-scope", "Shared")]);
    assert!(!signal.global);
    assert_eq!(signal.scope.as_deref(), Some("shared"));
}

// --------------------------------------------------------------------- Reddit

#[test]
fn reddit_fractional_remaining_and_delay_reset() {
    // Reddit API rules: used, fractional remaining, seconds to the end of
    // the period; no limit header, so the limit is used + remaining.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-used", "2"),
            ("x-ratelimit-remaining", "598.0"),
            ("x-ratelimit-reset", "412"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(600)
            .with_remaining(598)
            .with_reset(secs(412))]
    );
    let signal = parse(200, &[("x-ratelimit-remaining", "99.9")]);
    assert_eq!(signal.limits[0].remaining, Some(99));
}

// -------------------------------------------------------------------- Shopify

#[test]
fn shopify_call_limit() {
    let signal = parse(200, &[("x-shopify-shop-api-call-limit", "32/40")]);
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(40)
            .with_remaining(8)]
    );
    let signal = parse(
        429,
        &[
            ("x-shopify-shop-api-call-limit", "40/40"),
            ("retry-after", "2.0"),
        ],
    );
    assert_eq!(signal.limits[0].remaining, Some(0));
    assert_eq!(signal.retry_after, Some(secs(2)));

    let signal = parse(200, &[("x-shopify-shop-api-call-limit", "32")]);
    assert!(signal.limits.is_empty());
    assert_eq!(
        notes(&signal),
        ["x-shopify-shop-api-call-limit: expected used/limit, such as 32/40"]
    );
    let signal = parse(200, &[("x-shopify-shop-api-call-limit", "41/40")]);
    assert_eq!(signal.limits[0].remaining, Some(0));
    assert_eq!(
        notes(&signal),
        ["x-shopify-shop-api-call-limit: more used than the limit; remaining taken as 0"]
    );
}

// ------------------------------------------------------------------ Twitter/X

#[test]
fn twitter_rate_limit_headers() {
    let signal = parse(
        200,
        &[
            ("date", &date(1_705_420_000)),
            ("x-rate-limit-limit", "900"),
            ("x-rate-limit-remaining", "899"),
            ("x-rate-limit-reset", "1705420800"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(900)
            .with_remaining(899)
            .with_reset(secs(800))]
    );
}

// --------------------------------------------------------------------- GitLab

#[test]
fn gitlab_ratelimit_headers() {
    // docs.gitlab.com, "User and IP rate limits": the documented example.
    let signal = parse(
        429,
        &[
            ("date", "Tue, 05 Jan 2021 10:59:30 GMT"),
            ("ratelimit-limit", "60"),
            ("ratelimit-name", "throttle_authenticated_web"),
            ("ratelimit-observed", "67"),
            ("ratelimit-remaining", "0"),
            ("ratelimit-reset", "1609844400"),
            ("ratelimit-resettime", "Tue, 05 Jan 2021 11:00:00 GMT"),
            ("retry-after", "30"),
        ],
    );
    assert_eq!(signal.retry_after, Some(secs(30)));
    assert_eq!(
        values(&signal.limits),
        [
            Limit::new("throttle_authenticated_web", Dimension::Requests)
                .with_limit(60)
                .with_remaining(0)
                .with_reset(secs(30))
        ]
    );
    assert!(signal.ignored.is_empty());
}

#[test]
fn gitlab_reset_time_is_the_fallback() {
    let signal = parse(
        200,
        &[
            ("date", "Tue, 05 Jan 2021 10:58:00 GMT"),
            ("ratelimit-limit", "600"),
            ("ratelimit-observed", "6"),
            ("ratelimit-resettime", "Tue, 05 Jan 2021 11:00:00 GMT"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(600)
            .with_remaining(594)
            .with_reset(secs(120))]
    );
}

// ----------------------------------------------------------- IETF, old style

#[test]
fn ietf_old_fields() {
    let signal = parse(
        200,
        &[
            ("ratelimit-limit", "100"),
            ("ratelimit-remaining", "50"),
            ("ratelimit-reset", "7"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(100)
            .with_remaining(50)
            .with_reset(secs(7))]
    );
}

#[test]
fn ietf_old_fields_with_quota_policies() {
    let signal = parse(
        200,
        &[
            ("ratelimit-limit", "10, 10;w=1, 1000;w=3600"),
            ("ratelimit-remaining", "9"),
            ("ratelimit-reset", "1"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(10)
            .with_remaining(9)
            .with_reset(secs(1))
            .with_window(secs(1))]
    );
    assert!(signal.ignored.is_empty());

    let signal = parse(
        200,
        &[
            ("ratelimit-limit", "100"),
            ("ratelimit-policy", "100;w=60"),
            ("ratelimit-remaining", "0"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(100)
            .with_remaining(0)
            .with_window(secs(60))]
    );
}

#[test]
fn ietf_draft7_dictionary_with_its_policy() {
    // express-rate-limit's `standardHeaders: 'draft-7'`.
    let signal = parse(
        200,
        &[
            ("ratelimit", "limit=20, remaining=19, reset=2"),
            ("ratelimit-policy", "20;w=2"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(20)
            .with_remaining(19)
            .with_reset(secs(2))
            .with_window(secs(2))]
    );
    assert!(signal.ignored.is_empty(), "{:?}", notes(&signal));

    // Without a policy, and with bad members noted, not dropped silently.
    let signal = parse(429, &[("ratelimit", "limit=20, remaining=-1, reset=1.5")]);
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests).with_limit(20)]
    );
    assert_eq!(
        notes(&signal),
        [
            "ratelimit: remaining is negative",
            "ratelimit: reset is not an integer"
        ]
    );

    // A structured List is still read as one, not as a dictionary.
    let signal = parse(200, &[("ratelimit", "default;r=50;t=5")]);
    assert_eq!(
        values(&signal.limits),
        [Limit::new("default", Dimension::Requests)
            .with_remaining(50)
            .with_reset(secs(5))]
    );
}

#[test]
fn ietf_old_fields_reject_bad_values() {
    let signal = parse(
        200,
        &[
            ("ratelimit-limit", "-1"),
            ("ratelimit-remaining", "lots"),
            ("ratelimit-reset", "-3"),
        ],
    );
    assert!(signal.limits.is_empty());
    assert_eq!(
        notes(&signal),
        [
            "ratelimit-limit: negative value",
            "ratelimit-remaining: not a number",
            "ratelimit-reset: negative value",
        ]
    );
}

// ---------------------------------------------------------- IETF, structured

#[test]
fn ietf_structured_fields_with_several_policies() {
    let signal = parse(
        429,
        &[
            (
                "ratelimit-policy",
                r#""burst";q=100;w=60, "daily";q=1000;w=86400"#,
            ),
            ("ratelimit", r#""burst";r=0;t=30, "daily";r=500;t=3600"#),
            ("retry-after", "30"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [
            Limit::new("burst", Dimension::Requests)
                .with_limit(100)
                .with_remaining(0)
                .with_reset(secs(30))
                .with_window(secs(60)),
            Limit::new("daily", Dimension::Requests)
                .with_limit(1000)
                .with_remaining(500)
                .with_reset(secs(3600))
                .with_window(secs(86_400)),
        ]
    );
    assert!(signal.ignored.is_empty());
}

#[test]
fn ietf_structured_fields_split_over_lines_with_partition_and_unit() {
    let signal = parse(
        200,
        &[
            (
                "ratelimit-policy",
                r#""peruser";q=100;w=60;pk=:dXNlci0xMjM=:"#,
            ),
            (
                "ratelimit-policy",
                r#""bytes";q=65536;qu="content-bytes";w=10"#,
            ),
            ("ratelimit", r#""peruser";r=42;t=12;pk=:dXNlci0xMjM=:"#),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [
            Limit::new("peruser", Dimension::Requests)
                .with_limit(100)
                .with_remaining(42)
                .with_reset(secs(12))
                .with_window(secs(60))
                .with_partition("dXNlci0xMjM="),
            Limit::new("bytes", Dimension::Other("content-bytes".into()))
                .with_limit(65_536)
                .with_window(secs(10)),
        ]
    );
}

#[test]
fn ietf_structured_counters_without_policies_and_draft7_tokens() {
    let signal = parse(200, &[("ratelimit", r#""default";r=50;t=30"#)]);
    assert_eq!(
        values(&signal.limits),
        [Limit::new("default", Dimension::Requests)
            .with_remaining(50)
            .with_reset(secs(30))]
    );
    let signal = parse(
        200,
        &[
            ("ratelimit-policy", "Default;l=100;w=10"),
            ("ratelimit", "default;r=50;t=5"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("default", Dimension::Requests)
            .with_limit(100)
            .with_remaining(50)
            .with_reset(secs(5))
            .with_window(secs(10))]
    );
}

#[test]
fn ietf_structured_fields_report_bad_values() {
    let signal = parse(
        200,
        &[
            (
                "ratelimit-policy",
                r#""a";q=-1;w=60, "a";q=5, (1 2), "b";w=1.5"#,
            ),
            ("ratelimit", r#""a";r=1, "a";r=0;t=9"#),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [
            Limit::new("a", Dimension::Requests)
                .with_remaining(0)
                .with_reset(secs(9))
                .with_window(secs(60)),
            Limit::new("b", Dimension::Requests),
        ]
    );
    assert_eq!(
        notes(&signal),
        [
            "ratelimit-policy: a: q is negative",
            "ratelimit-policy: a: duplicate policy; kept the first",
            "ratelimit-policy: inner list where a policy was expected",
            "ratelimit-policy: b: no quota (q)",
            "ratelimit-policy: b: w is not an integer",
            "ratelimit: a: repeated; kept the smallest remaining and longest reset",
        ]
    );

    let signal = parse(200, &[("ratelimit", "\"unterminated;r=1")]);
    assert!(signal.limits.is_empty());
    assert_eq!(signal.ignored.len(), 1);
    assert!(
        signal.ignored[0]
            .reason
            .starts_with("not a structured-field list"),
        "{:?}",
        signal.ignored
    );
}

// ------------------------------------------------------------- the reset rule

#[test]
fn reset_rule_tells_delays_from_epochs() {
    let date_at = 1_700_000_000;
    let cases = [
        ("30", secs(30)),
        ("999999999", MAX_WAIT),
        ("1700000030", secs(30)),
        ("1700000000123", ms(123)),
        ("1700000030.5", ms(30_500)),
    ];
    for (reset, expected) in cases {
        let signal = parse(
            200,
            &[("date", &date(date_at)), ("x-ratelimit-reset", reset)],
        );
        assert_eq!(signal.limits[0].reset, Some(expected), "{reset}");
    }
}

#[test]
fn an_epoch_is_never_read_as_a_delay() {
    // The bug report: a client slept 1,792,152,901 seconds.
    let signal = parse(
        429,
        &[
            ("date", &date(1_792_152_901 - 120)),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1792152901"),
        ],
    );
    assert_eq!(signal.limits[0].reset, Some(secs(120)));
    assert!(signal.ignored.is_empty());
}

#[test]
fn an_epoch_in_the_past_is_zero_with_a_note() {
    let signal = parse(
        200,
        &[
            ("date", &date(1_700_000_100)),
            ("x-ratelimit-reset", "1700000000"),
        ],
    );
    assert_eq!(signal.limits[0].reset, Some(Duration::ZERO));
    assert_eq!(
        notes(&signal),
        ["x-ratelimit-reset: time is 100 s in the past; using 0"]
    );
}

#[test]
fn reset_that_is_not_a_number_is_ignored() {
    let signal = parse(
        429,
        &[
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "soon"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(60)
            .with_remaining(0)]
    );
    assert_eq!(notes(&signal), ["x-ratelimit-reset: not a number"]);
}

// ------------------------------------------------------- conflicts and mixing

#[test]
fn conflicting_counts_keep_the_smallest() {
    let signal = parse(
        200,
        &[
            ("x-ratelimit-limit", "100"),
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "10, 5"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(60)
            .with_remaining(5)]
    );
    assert_eq!(
        notes(&signal),
        [
            r#"x-ratelimit-limit: conflicting values ["100", "60"]; kept the smallest"#,
            r#"x-ratelimit-remaining: conflicting values ["10", "5"]; kept the smallest"#,
        ]
    );
}

#[test]
fn huge_counts_are_ignored() {
    let signal = parse(200, &[("x-ratelimit-limit", "184467440737095516160")]);
    assert!(signal.limits.is_empty());
    assert_eq!(notes(&signal), ["x-ratelimit-limit: number too large"]);
}

#[test]
fn every_dialect_in_one_response_is_kept() {
    let signal = parse(
        200,
        &[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4999"),
            ("x-ratelimit-limit-tokens", "1000"),
            ("ratelimit-policy", r#""minute";q=60;w=60"#),
            ("x-shopify-shop-api-call-limit", "1/40"),
        ],
    );
    let names: Vec<&str> = signal.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["requests", "tokens", "minute", "requests"]);
}

#[test]
fn identical_limits_from_two_dialects_are_kept_once() {
    let signal = parse(
        200,
        &[
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "10"),
            ("ratelimit-limit", "60"),
            ("ratelimit-remaining", "10"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(60)
            .with_remaining(10)]
    );
}

// ------------------------------------------------------------- status classes

#[test]
fn from_response_reads_a_reqwest_response() {
    let response = http::Response::builder()
        .status(429)
        .header("retry-after", "7")
        .header("x-ratelimit-remaining", "0")
        .body("")
        .expect("a valid test response");
    let signal = RateLimitSignal::from_response(&reqwest::Response::from(response));
    assert_eq!(signal.status, 429);
    assert_eq!(signal.retry_after, Some(secs(7)));
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests).with_remaining(0)]
    );
}

#[test]
fn throttled_statuses() {
    assert!(parse(429, &[]).is_throttled());
    // A bare 503 is congestion: an overloaded server or nginx's limit_req.
    assert!(parse(503, &[]).is_throttled());
    assert!(parse(503, &[("retry-after", "5")]).is_throttled());
    assert!(!parse(403, &[]).is_throttled());
    assert!(parse(403, &[("x-ratelimit-remaining", "0")]).is_throttled());
    assert!(!parse(200, &[("x-ratelimit-remaining", "0")]).is_throttled());
    assert!(!parse(500, &[("retry-after", "5")]).is_throttled());
}

#[test]
fn ignored_displays_as_header_colon_reason() {
    let note = Ignored::new("X-RateLimit-Reset", "not a number");
    assert_eq!(note.header, "x-ratelimit-reset");
    assert_eq!(note.to_string(), "x-ratelimit-reset: not a number");
}

#[test]
fn dimensions_have_names() {
    assert_eq!(Dimension::from_name("Input-Tokens"), Dimension::InputTokens);
    assert_eq!(
        Dimension::from_name("output_tokens"),
        Dimension::OutputTokens
    );
    assert_eq!(
        Dimension::from_name("Content-Bytes"),
        Dimension::Other("content-bytes".into())
    );
    assert_eq!(Dimension::Tokens.to_string(), "tokens");
}

// ------------------------------------------------------------ the raw head

#[test]
fn raw_head_round_trip() {
    let raw = "HTTP/1.1 429 Too Many Requests\r\n\
               Date: Wed, 21 Oct 2015 07:28:00 GMT\r\n\
               Retry-After: 30\r\n\
               X-RateLimit-Limit: 60\r\n\
               X-RateLimit-Remaining:0\r\n\
               X-RateLimit-Reset:  1445412510 \r\n\
               \r\n\
               {\"message\": \"slow down\"}";
    let (status, map) = parse_response_head(raw).expect("a valid head");
    assert_eq!(status, 429);
    assert_eq!(map.len(), 5);
    let signal = RateLimitSignal::parse(status, &map, at(LOCAL));
    assert_eq!(signal.retry_after, Some(secs(30)));
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests)
            .with_limit(60)
            .with_remaining(0)
            .with_reset(secs(30))]
    );
}

#[test]
fn raw_head_accepts_lf_folding_repeats_and_no_final_blank_line() {
    let raw = "HTTP/2 200\nx-ratelimit-remaining: 1\nretry-after: 30,\n 30\nvia: a\nvia: b";
    let (status, map) = parse_response_head(raw).expect("a valid head");
    assert_eq!(status, 200);
    assert_eq!(map["retry-after"], "30, 30");
    assert_eq!(map.get_all("via").iter().count(), 2);
}

#[test]
fn raw_head_keeps_non_ascii_values_for_the_parser_to_report() {
    let raw = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30 секунд\r\n\r\n".as_bytes();
    let (status, map) = parse_response_head(raw).expect("a valid head");
    let signal = RateLimitSignal::parse(status, &map, at(LOCAL));
    assert_eq!(signal.retry_after, None);
    assert_eq!(notes(&signal), ["retry-after: value is not visible ASCII"]);
}

/// The line and the reason a head was refused for, when it was refused at
/// a header line (matched with `..`: `HeadError`'s variants may grow).
fn bad_header_line(head: &str) -> Option<(usize, String)> {
    match parse_response_head(head) {
        Err(HeadError::HeaderLine { line, reason, .. }) => Some((line, reason)),
        _ => None,
    }
}

#[test]
fn raw_head_errors_say_where() {
    assert_eq!(parse_response_head(""), Err(HeadError::Empty));
    assert_eq!(parse_response_head(" \r\n\r\n"), Err(HeadError::Empty));
    match parse_response_head("{\"json\": true}") {
        Err(HeadError::StatusLine { line, .. }) => assert_eq!(line, "{\"json\": true}"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        bad_header_line("HTTP/1.1 200 OK\r\nRetry-After 30\r\n"),
        Some((2, "no `:` in header line \"Retry-After 30\"".into()))
    );
    assert_eq!(
        bad_header_line("HTTP/1.1 200 OK\r\nok: 1\r\nbad name: 1\r\n"),
        Some((3, "invalid header name \"bad name\"".into()))
    );
    assert_eq!(
        bad_header_line("HTTP/1.1 200 OK\r\n folded: 1\r\n"),
        Some((2, "continuation line before any header".into()))
    );
    assert_eq!(
        bad_header_line("HTTP/1.1 200 OK\r\na: 1\r\nb: x\x01y\r\n"),
        Some((3, "header b has a control character in its value".into()))
    );
    let message = parse_response_head("HTTP/1.1 200 OK\r\nRetry-After 30\r\n")
        .expect_err("a header line without a colon")
        .to_string();
    assert_eq!(message, "line 2: no `:` in header line \"Retry-After 30\"");
}

// --------------------------------------------------------------- Bounded cost

#[test]
fn a_field_over_the_size_cap_is_ignored_with_a_note() {
    // 10,000 policies, about 200 KB: ignored whole, before any parsing.
    let policies: Vec<String> = (0..10_000).map(|i| format!("\"p{i}\";q=10;w=1")).collect();
    let joined = policies.join(", ");
    assert!(joined.len() > 150_000);
    let signal = parse(
        200,
        &[
            ("ratelimit-policy", joined.as_str()),
            ("x-ratelimit-remaining", "7"),
        ],
    );
    assert_eq!(
        values(&signal.limits),
        [Limit::new("requests", Dimension::Requests).with_remaining(7)]
    );
    assert_eq!(
        notes(&signal),
        [format!(
            "ratelimit-policy: {} bytes, over the {}-byte cap; ignored",
            joined.len(),
            reqwest_pace::headers::MAX_FIELD_BYTES
        )]
    );
}

#[test]
fn a_list_is_read_to_its_first_members() {
    let max = reqwest_pace::headers::MAX_MEMBERS;
    let policies: Vec<String> = (0..max + 36).map(|i| format!("p{i};q=10;w=1")).collect();
    let signal = parse(200, &[("ratelimit-policy", policies.join(", ").as_str())]);
    assert_eq!(signal.limits.len(), max);
    assert_eq!(signal.limits[max - 1].name, format!("p{}", max - 1));
    assert_eq!(
        notes(&signal),
        [format!(
            "ratelimit-policy: more than {max} members; the rest ignored"
        )]
    );
    let many: Vec<String> = (0..max + 1).map(|i| (100 - i % 50).to_string()).collect();
    let signal = parse(200, &[("x-ratelimit-remaining", many.join(",").as_str())]);
    assert!(
        notes(&signal)
            .iter()
            .any(|n| n
                == &format!("x-ratelimit-remaining: more than {max} members; the rest ignored"))
    );
}

/// How finely a reset is known: the unit it was written in, and for an
/// epoch, the second a `Date` leaves the server's clock within.
#[test]
fn a_reset_says_how_finely_it_is_known() {
    let precision = |pairs: &[(&str, &str)]| parse(200, pairs).limits[0].reset_precision;
    let now = 1_700_000_000;
    let d = date(now);
    // Whole seconds: to within a second.
    assert_eq!(
        precision(&[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "7")]),
        Some(secs(1))
    );
    // A fraction: to within a millisecond.
    assert_eq!(
        precision(&[
            ("x-ratelimit-remaining", "3"),
            ("x-ratelimit-reset", "0.25")
        ]),
        Some(ms(1))
    );
    // Epoch milliseconds against a `Date`: the millisecond, and the second
    // the `Date` leaves open.
    let epoch_ms = format!("{}250", now + 2);
    assert_eq!(
        precision(&[
            ("date", &d),
            ("x-ratelimit-remaining", "3"),
            ("x-ratelimit-reset", &epoch_ms)
        ]),
        Some(secs(1) + ms(1))
    );
    // Epoch seconds against a `Date`: two seconds.
    let epoch = (now + 2).to_string();
    assert_eq!(
        precision(&[
            ("date", &d),
            ("x-ratelimit-remaining", "3"),
            ("x-ratelimit-reset", &epoch)
        ]),
        Some(secs(2))
    );
    // No reset, no precision.
    assert_eq!(precision(&[("x-ratelimit-remaining", "3")]), None);
}

// Gateways' own fields: Traefik, Bucket4j, Kong, Envoy, Spring Cloud
// Gateway, HubSpot.

#[test]
fn traefik_exact_wait_is_preferred_over_its_whole_seconds() {
    // Traefik's rate limit middleware: `Retry-After` rounded up to whole
    // seconds, and the wait its token bucket computed as Go prints it.
    let signal = parse(429, &[("retry-after", "1"), ("x-retry-in", "98.765432ms")]);
    assert_eq!(signal.retry_after, Some(Duration::from_nanos(98_765_432)));
    assert!(signal.ignored.is_empty());
    // Under a millisecond Go writes the micro sign.
    let signal = parse(429, &[("retry-after", "1"), ("x-retry-in", "750.5µs")]);
    assert_eq!(signal.retry_after, Some(Duration::from_nanos(750_500)));
    // One that does not parse leaves the whole seconds.
    let signal = parse(429, &[("retry-after", "1"), ("x-retry-in", "soon")]);
    assert_eq!(signal.retry_after, Some(secs(1)));
    assert_eq!(notes(&signal).len(), 1, "{:?}", notes(&signal));
    // A wait of years is clamped, as every wait is.
    let signal = parse(429, &[("x-retry-in", "9999999h0m0s")]);
    assert_eq!(signal.retry_after, Some(MAX_WAIT));
}

#[test]
fn waits_under_other_names_stand_in_for_an_absent_retry_after() {
    // Bucket4j's Spring Boot starter, and MailerLite.
    let bucket4j = parse(429, &[("x-rate-limit-retry-after-seconds", "58")]);
    assert_eq!(bucket4j.retry_after, Some(secs(58)));
    assert!(bucket4j.is_throttled());
    let mailerlite = parse(429, &[("x-ratelimit-retry-after", "12")]);
    assert_eq!(mailerlite.retry_after, Some(secs(12)));
    // `Retry-After` itself wins where both are there.
    let both = parse(
        429,
        &[("retry-after", "3"), ("x-ratelimit-retry-after", "12")],
    );
    assert_eq!(both.retry_after, Some(secs(3)));
}

#[test]
fn kong_limits_per_unit_of_time() {
    // Kong's rate-limiting plugin with `minute: 5, hour: 100`, and its
    // response-ratelimiting plugin's `videos` per minute.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-limit-minute", "5"),
            ("x-ratelimit-remaining-minute", "4"),
            ("x-ratelimit-limit-hour", "100"),
            ("x-ratelimit-remaining-hour", "99"),
            ("x-ratelimit-limit-videos-minute", "10"),
            ("x-ratelimit-remaining-videos-minute", "7"),
        ],
    );
    let mut expected = vec![
        Limit::new("hour", Dimension::Requests)
            .with_limit(100)
            .with_remaining(99),
        Limit::new("minute", Dimension::Requests)
            .with_limit(5)
            .with_remaining(4),
        Limit::new("videos_minute", Dimension::Other("videos".into()))
            .with_limit(10)
            .with_remaining(7),
    ];
    expected[0].window = Some(secs(3_600));
    expected[1].window = Some(secs(60));
    expected[2].window = Some(secs(60));
    assert_eq!(values(&signal.limits), expected);
    assert!(signal.ignored.is_empty());
    // OpenAI's suffixes name no unit of time.
    let openai = parse(200, &[("x-ratelimit-limit-requests", "60")]);
    assert_eq!(openai.limits[0].window, None);
    // A unit after nothing counts requests.
    let bare = parse(200, &[("x-ratelimit-limit--minute", "5")]);
    assert_eq!(bare.limits[0].dimension, Dimension::Requests);
    assert_eq!(bare.limits[0].window, Some(secs(60)));
}

#[test]
fn envoy_quota_policies_in_x_ratelimit_limit() {
    // Envoy with `enable_x_ratelimit_headers: DRAFT_VERSION_03`.
    let signal = parse(
        429,
        &[
            ("x-ratelimit-limit", "10, 10;w=60"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "42"),
        ],
    );
    let mut expected = Limit::new("requests", Dimension::Requests)
        .with_limit(10)
        .with_remaining(0)
        .with_reset(secs(42));
    expected.window = Some(secs(60));
    assert_eq!(values(&signal.limits), [expected]);
    assert!(signal.ignored.is_empty());
}

#[test]
fn spring_gateway_bucket_is_read_in_requests() {
    // `RedisRateLimiter` with replenishRate 10, burstCapacity 20: 9 tokens
    // left, full again after 1.1 s; a bucket of 20 refills in 2 s.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-remaining", "9"),
            ("x-ratelimit-replenish-rate", "10"),
            ("x-ratelimit-burst-capacity", "20"),
            ("x-ratelimit-requested-tokens", "1"),
        ],
    );
    let mut expected = Limit::new("requests", Dimension::Requests)
        .with_limit(20)
        .with_remaining(9)
        .with_reset(ms(1_100));
    expected.window = Some(secs(2));
    assert_eq!(values(&signal.limits), [expected]);
    // One request a minute, as Spring's documentation configures it: 60
    // tokens a request, refilling one a second.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-replenish-rate", "1"),
            ("x-ratelimit-burst-capacity", "60"),
            ("x-ratelimit-requested-tokens", "60"),
        ],
    );
    let limit = &signal.limits[0];
    assert_eq!((limit.limit, limit.remaining), (Some(1), Some(0)));
    assert_eq!(
        (limit.reset, limit.window),
        (Some(secs(60)), Some(secs(60)))
    );
    // A bucket that never admits a request is noted, not read; its
    // `remaining` of -1 (Redis unreachable) is not a count.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-remaining", "-1"),
            ("x-ratelimit-replenish-rate", "0"),
            ("x-ratelimit-burst-capacity", "20"),
        ],
    );
    assert!(signal.limits.iter().all(|l| l.limit.is_none()));
    assert!(!signal.ignored.is_empty());
    // A bucket that takes years to refill: its reset is a wait, at most
    // a day like every other, noted; its window is longer.
    let signal = parse(
        200,
        &[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-replenish-rate", "1"),
            ("x-ratelimit-burst-capacity", "100000000"),
        ],
    );
    let limit = &signal.limits[0];
    assert_eq!(limit.reset, Some(MAX_WAIT));
    assert_eq!(limit.window, Some(reqwest_pace::headers::MAX_WINDOW));
    assert_eq!(notes(&signal).len(), 2, "{:?}", notes(&signal));
}

#[test]
fn hubspot_interval_secondly_and_daily_limits() {
    let signal = parse(
        200,
        &[
            ("x-hubspot-ratelimit-daily", "250000"),
            ("x-hubspot-ratelimit-daily-remaining", "249999"),
            ("x-hubspot-ratelimit-interval-milliseconds", "10000"),
            ("x-hubspot-ratelimit-max", "100"),
            ("x-hubspot-ratelimit-remaining", "99"),
            ("x-hubspot-ratelimit-secondly", "10"),
            ("x-hubspot-ratelimit-secondly-remaining", "9"),
        ],
    );
    let window = |l: &Limit| (l.name.clone(), l.limit, l.remaining, l.window);
    let read: Vec<_> = signal.limits.iter().map(window).collect();
    assert_eq!(
        read,
        [
            ("requests".to_owned(), Some(100), Some(99), Some(secs(10))),
            ("secondly".to_owned(), Some(10), Some(9), Some(secs(1))),
            (
                "daily".to_owned(),
                Some(250_000),
                Some(249_999),
                Some(secs(86_400))
            ),
        ]
    );
    assert!(signal.ignored.is_empty());
}

/// Cloudflare's API states `X-RateLimit-Limit` and `-Remaining` on every
/// response, and on a 429 `Retry-After` (rounded up) and
/// `X-RateLimit-Reset` as an RFC 1123 date: a date with a comma of its
/// own, read whole and measured against `Date`, not split as a list.
#[test]
fn cloudflare_reset_is_an_http_date() {
    let signal = parse(
        429,
        &[
            ("date", &date(LOCAL - 500)),
            ("x-ratelimit-limit", "1200"),
            ("x-ratelimit-remaining", "0"),
            ("retry-after", "42"),
            ("x-ratelimit-reset", &date(LOCAL - 500 + 42)),
        ],
    );
    assert_eq!(signal.retry_after, Some(secs(42)));
    let [limit] = signal.limits.as_slice() else {
        panic!("one limit: {signal:?}");
    };
    assert_eq!(
        (limit.limit, limit.remaining, limit.reset),
        (Some(1200), Some(0), Some(secs(42)))
    );
    assert!(signal.ignored.is_empty(), "{:?}", notes(&signal));
    // A date already past is a wait of nothing, noted; two dates keep the
    // later.
    let past = parse(
        200,
        &[
            ("date", &date(LOCAL)),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &date(LOCAL - 10)),
        ],
    );
    assert_eq!(past.limits[0].reset, Some(Duration::ZERO));
    assert!(!past.ignored.is_empty());
    let two = parse(
        200,
        &[
            ("date", &date(LOCAL)),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", &date(LOCAL + 5)),
            ("x-ratelimit-reset", &date(LOCAL + 9)),
        ],
    );
    assert_eq!(two.limits[0].reset, Some(secs(9)));
}

/// Other widely used limiters, as their sources write their headers: each
/// is read whole, with nothing ignored.
#[test]
fn widely_used_limiters_are_read_whole() {
    // express-rate-limit's `draft-8`: a named policy and its partition key.
    let express = parse(
        200,
        &[
            (
                "ratelimit-policy",
                "\"5-in-1min\"; q=5; w=60; pk=:YWJjZGVm:",
            ),
            ("ratelimit", "\"5-in-1min\"; r=4; t=60"),
        ],
    );
    let [limit] = express.limits.as_slice() else {
        panic!("one limit: {express:?}");
    };
    assert_eq!(
        (limit.limit, limit.remaining, limit.reset, limit.window),
        (Some(5), Some(4), Some(secs(60)), Some(secs(60)))
    );
    assert!(express.ignored.is_empty(), "{:?}", notes(&express));
    // Laravel: no reset on a 200; on a 429, `Retry-After` and an epoch
    // reset.
    let laravel = parse(
        429,
        &[
            ("date", &date(LOCAL)),
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining", "0"),
            ("retry-after", "42"),
            ("x-ratelimit-reset", &(LOCAL + 42).to_string()),
        ],
    );
    assert_eq!(laravel.retry_after, Some(secs(42)));
    assert_eq!(laravel.limits[0].reset, Some(secs(42)));
    assert!(laravel.ignored.is_empty(), "{:?}", notes(&laravel));
    // tollbooth: a limit written with two decimals beside the IETF draft's
    // fields, whose reset is always one second.
    let tollbooth = parse(
        200,
        &[
            ("x-rate-limit-limit", "10.00"),
            ("x-rate-limit-duration", "1"),
            ("ratelimit-limit", "10"),
            ("ratelimit-remaining", "7"),
            ("ratelimit-reset", "1"),
        ],
    );
    assert!(tollbooth.ignored.is_empty(), "{:?}", notes(&tollbooth));
    assert!(tollbooth.limits.iter().all(|l| l.limit == Some(10)));
    assert!(tollbooth
        .limits
        .iter()
        .any(|l| l.remaining == Some(7) && l.reset == Some(secs(1))));
}
