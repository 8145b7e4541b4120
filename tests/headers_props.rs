//! Property tests for `headers`: arbitrary input never panics and never
//! yields a wait past the cap; absolute times round-trip exactly whatever
//! the client's clock skew.
#![cfg(feature = "client")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;
use reqwest_pace::headers::{
    parse_response_head, parse_rfc3339, RateLimitSignal, MAX_WAIT, MAX_WINDOW,
};

/// Every header name some dialect reads, plus a few it must leave alone.
const NAMES: &[&str] = &[
    "date",
    "retry-after",
    "retry-after-ms",
    "x-ms-retry-after-ms",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-used",
    "x-ratelimit-reset",
    "x-ratelimit-reset-after",
    "x-ratelimit-bucket",
    "x-ratelimit-global",
    "x-ratelimit-scope",
    "x-ratelimit-resource",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-reset-",
    "x-rate-limit-limit",
    "x-rate-limit-remaining",
    "x-rate-limit-reset",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "ratelimit-observed",
    "ratelimit-name",
    "ratelimit-resettime",
    "ratelimit-policy",
    "ratelimit",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit--reset",
    "x-shopify-shop-api-call-limit",
    "content-type",
];

/// Values shaped like what the dialects expect, and plenty that are not.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[0-9]{1,25}(\\.[0-9]{1,12})?".prop_map(String::into_bytes),
        "-?[0-9.eE+]{0,12}|NaN|inf|-inf|true|false|TRUE".prop_map(String::into_bytes),
        "([0-9]{1,21}(\\.[0-9]{1,3})?(h|m|s|ms|us|ns|d)){1,4}".prop_map(String::into_bytes),
        "[0-9]{1,20}/[0-9]{1,20}".prop_map(String::into_bytes),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,12})?(Z|[+-][0-9]{2}:[0-9]{2})?"
            .prop_map(String::into_bytes),
        (0u64..253_402_300_799).prop_map(|s| httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s)).into_bytes()),
        "((\"[a-z]{1,3}\"|[a-z]{1,3}|-?[0-9]{1,17})(;(q|r|t|w|l|pk|qu)=(-?[0-9]{1,17}(\\.[0-9]{1,4})?|:[A-Za-z0-9+/=]{0,8}:|\"[a-z-]{0,12}\"|[a-z]{1,4}|\\?[01]))*(, )?){1,4}"
            .prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..48),
    ]
}

fn header_map() -> impl Strategy<Value = HeaderMap> {
    proptest::collection::vec((proptest::sample::select(NAMES), value()), 0..12).prop_map(|pairs| {
        let mut map = HeaderMap::new();
        for (name, bytes) in pairs {
            // Bytes that cannot be a header value cannot reach the parser.
            if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                map.append(HeaderName::from_static(name), value);
            }
        }
        map
    })
}

fn any_time() -> impl Strategy<Value = SystemTime> {
    prop_oneof![
        (0u64..4_000_000_000, 0u32..1_000_000_000)
            .prop_map(|(s, n)| UNIX_EPOCH + Duration::new(s, n)),
        (0u64..4_000_000_000).prop_map(|s| UNIX_EPOCH - Duration::from_secs(s)),
    ]
}

fn check_bounds(signal: &RateLimitSignal) -> Result<(), TestCaseError> {
    if let Some(wait) = signal.retry_after {
        prop_assert!(wait <= MAX_WAIT, "retry_after {wait:?}");
    }
    for limit in &signal.limits {
        if let Some(reset) = limit.reset {
            prop_assert!(reset <= MAX_WAIT, "reset {reset:?} in {limit:?}");
        }
        if let Some(window) = limit.window {
            prop_assert!(window <= MAX_WINDOW, "window {window:?} in {limit:?}");
        }
        prop_assert_eq!(&limit.name, &limit.name.to_ascii_lowercase());
    }
    for note in &signal.ignored {
        prop_assert!(NAMES.contains(&note.header.as_str()), "{note}");
        prop_assert!(!note.reason.is_empty());
    }
    if let Some(wait) = signal.suggested_wait() {
        prop_assert!(wait <= MAX_WAIT);
    }
    Ok(())
}

/// Calendar fields of a time, for writing the older HTTP-date formats.
struct Civil {
    year: i64,
    month: usize,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    weekday: usize,
}

fn civil(secs: u64) -> Civil {
    // H. Hinnant's civil_from_days.
    let days = i64::try_from(secs / 86_400).expect("small");
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).expect("day");
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let rem = secs % 86_400;
    Civil {
        year,
        month: usize::try_from(month).expect("month"),
        day,
        hour: rem / 3600,
        minute: rem / 60 % 60,
        second: rem % 60,
        // 1970-01-01 was a Thursday; index 0 is Monday.
        weekday: usize::try_from((days + 3).rem_euclid(7)).expect("weekday"),
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

fn rfc850(secs: u64) -> String {
    let c = civil(secs);
    format!(
        "{}, {:02}-{}-{:02} {:02}:{:02}:{:02} GMT",
        LONG_DAYS[c.weekday],
        c.day,
        MONTHS[c.month - 1],
        c.year % 100,
        c.hour,
        c.minute,
        c.second
    )
}

fn asctime(secs: u64) -> String {
    let c = civil(secs);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        DAYS[c.weekday],
        MONTHS[c.month - 1],
        c.day,
        c.hour,
        c.minute,
        c.second,
        c.year
    )
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// The receive time of a client whose clock is `skew` seconds off.
fn skewed(secs: u64, skew: i64) -> SystemTime {
    if skew >= 0 {
        at(secs) + Duration::from_secs(skew.unsigned_abs())
    } else {
        at(secs) - Duration::from_secs(skew.unsigned_abs())
    }
}

fn one(pairs: &[(&'static str, String)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let value = HeaderValue::from_str(value).expect("an ASCII test value");
        map.append(HeaderName::from_static(name), value);
    }
    map
}

/// 2070-01-01: RFC 850's two-digit years stop here.
const RFC850_END: u64 = 3_155_760_000;
/// The last second httpdate can write (9999-12-31T23:59:59Z), less a day.
const HTTPDATE_END: u64 = 253_402_300_799 - 86_400;
const SKEW: i64 = 10 * 365 * 86_400;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn arbitrary_headers_never_panic_and_stay_within_the_cap(
        map in header_map(),
        status in 0u16..1000,
        received_at in any_time(),
    ) {
        let signal = RateLimitSignal::parse(status, &map, received_at);
        prop_assert_eq!(signal.status, status);
        check_bounds(&signal)?;
        let _ = signal.is_throttled();
    }

    #[test]
    fn arbitrary_bytes_in_a_raw_head_never_panic(
        raw in proptest::collection::vec(any::<u8>(), 0..256),
        received_at in any_time(),
    ) {
        if let Ok((status, map)) = parse_response_head(&raw) {
            prop_assert!((100..=599).contains(&status));
            check_bounds(&RateLimitSignal::parse(status, &map, received_at))?;
        }
    }

    #[test]
    fn raw_heads_round_trip(
        pairs in proptest::collection::vec(
            (proptest::sample::select(NAMES), "[!-~]([ -~]{0,30}[!-~])?"),
            0..10,
        ),
        status in 100u16..600,
        crlf in any::<bool>(),
    ) {
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut raw = format!("HTTP/1.1 {status} Reason Phrase{eol}");
        for (name, value) in &pairs {
            raw.push_str(&format!("{name}:  {value} {eol}"));
        }
        raw.push_str(eol);
        let (parsed_status, map) = parse_response_head(&raw).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(parsed_status, status);
        let mut expected = HeaderMap::new();
        for (name, value) in &pairs {
            expected.append(HeaderName::from_static(name), HeaderValue::from_str(value).expect("ascii"));
        }
        prop_assert_eq!(map, expected);
    }

    #[test]
    fn imf_fixdate_retry_after_is_exact_under_any_skew(
        date in 0u64..HTTPDATE_END,
        wait in 0u64..=86_400,
        skew in -SKEW..SKEW,
    ) {
        let map = one(&[
            ("date", httpdate::fmt_http_date(at(date))),
            ("retry-after", httpdate::fmt_http_date(at(date + wait))),
        ]);
        let signal = RateLimitSignal::parse(429, &map, skewed(date, skew));
        prop_assert_eq!(signal.retry_after, Some(Duration::from_secs(wait)));
        prop_assert!(signal.ignored.is_empty(), "{:?}", signal.ignored);
    }

    #[test]
    fn rfc850_and_asctime_retry_after_are_exact_under_any_skew(
        date in 0u64..RFC850_END - 86_400,
        wait in 0u64..=86_400,
        skew in -SKEW..SKEW,
        asc in any::<bool>(),
    ) {
        let format = if asc { asctime } else { rfc850 };
        let map = one(&[("date", format(date)), ("retry-after", format(date + wait))]);
        let signal = RateLimitSignal::parse(503, &map, skewed(date, skew));
        prop_assert_eq!(signal.retry_after, Some(Duration::from_secs(wait)), "{:?}", map);
        prop_assert!(signal.ignored.is_empty(), "{:?}", signal.ignored);
    }

    #[test]
    fn http_date_without_date_is_measured_from_the_receive_time(
        now in 0u64..HTTPDATE_END,
        wait in 0u64..=86_400,
    ) {
        let map = one(&[("retry-after", httpdate::fmt_http_date(at(now + wait)))]);
        let signal = RateLimitSignal::parse(429, &map, at(now));
        prop_assert_eq!(signal.retry_after, Some(Duration::from_secs(wait)));
    }

    #[test]
    fn http_date_past_the_cap_is_clamped(
        date in 0u64..HTTPDATE_END - 10 * 86_400,
        extra in 1u64..9 * 86_400,
    ) {
        let map = one(&[
            ("date", httpdate::fmt_http_date(at(date))),
            ("retry-after", httpdate::fmt_http_date(at(date + 86_400 + extra))),
        ]);
        let signal = RateLimitSignal::parse(429, &map, at(0));
        prop_assert_eq!(signal.retry_after, Some(MAX_WAIT));
        prop_assert_eq!(signal.ignored.len(), 1);
    }

    #[test]
    fn epoch_resets_are_exact_under_any_skew(
        date in 1_000_000_000u64..4_000_000_000,
        wait_ms in 0u64..=86_400_000,
        millis in any::<bool>(),
        skew in -SKEW..SKEW,
    ) {
        let (reset, expected) = if millis {
            ((date * 1000 + wait_ms).to_string(), Duration::from_millis(wait_ms))
        } else {
            ((date + wait_ms / 1000).to_string(), Duration::from_secs(wait_ms / 1000))
        };
        let map = one(&[
            ("date", httpdate::fmt_http_date(at(date))),
            ("x-ratelimit-reset", reset),
        ]);
        let signal = RateLimitSignal::parse(200, &map, skewed(date, skew));
        prop_assert_eq!(signal.limits[0].reset, Some(expected));
    }

    #[test]
    fn a_numeric_reset_is_never_a_wait_past_the_cap(
        reset in any::<u64>(),
        date in 0u64..HTTPDATE_END,
    ) {
        let map = one(&[
            ("date", httpdate::fmt_http_date(at(date))),
            ("x-ratelimit-reset", reset.to_string()),
        ]);
        let signal = RateLimitSignal::parse(200, &map, at(date));
        let got = signal.limits[0].reset;
        if reset < 1_000_000_000 {
            prop_assert_eq!(got, Some(Duration::from_secs(reset).min(MAX_WAIT)));
        } else {
            prop_assert!(got.is_some_and(|wait| wait <= MAX_WAIT));
        }
        if (1_000_000_000..1_000_000_000_000).contains(&reset) && reset <= date {
            prop_assert_eq!(got, Some(Duration::ZERO));
        }
    }

    #[test]
    fn rfc3339_round_trips_with_any_offset(
        secs in 0u64..253_402_300_799,
        nanos in 0u32..1_000_000_000,
        offset_minutes in -(23 * 60 + 59)..=(23i64 * 60 + 59),
    ) {
        let local = i64::try_from(secs).expect("small") + offset_minutes * 60;
        prop_assume!((0..=253_402_300_799).contains(&local));
        let c = civil(local.unsigned_abs());
        let sign = if offset_minutes < 0 { '-' } else { '+' };
        let off = offset_minutes.unsigned_abs();
        let text = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}{}{:02}:{:02}",
            c.year, c.month, c.day, c.hour, c.minute, c.second, nanos, sign, off / 60, off % 60
        );
        prop_assert_eq!(parse_rfc3339(&text), Some(UNIX_EPOCH + Duration::new(secs, nanos)), "{}", text);
    }

    #[test]
    fn rfc3339_never_panics(text in "[0-9Tt:+. Zz-]{0,40}") {
        let _ = parse_rfc3339(&text);
    }
}
