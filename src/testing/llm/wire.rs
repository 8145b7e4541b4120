//! What goes over the wire: the call's estimate read from its body, and the
//! headers and bodies each dialect writes. Pure functions of the model's
//! figures and the response's wall-clock instant.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::HeaderMap;
use serde_json::{json, Value};

use super::model::{Estimate, Figure};
use super::{LlmDialect, LlmLimit, Usage};
use crate::testing::dialect::ceil_secs;
use crate::testing::RetryAfterPrecision;

/// Reads a call's estimate from its body: a JSON object whose
/// `input_tokens` is the prompt's size (else the body's length in bytes
/// divided by 4, rounded up: OpenAI's rule of thumb of four characters a
/// token) and whose `max_tokens` caps its output (else `default_max`). An
/// empty body is a call of no input and `default_max` output.
pub(crate) fn estimate(body: &[u8], default_max: u64) -> Result<Estimate, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Estimate {
            input: 0,
            max_output: default_max,
        });
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Value::Object(fields) = value else {
        return Err("the body is not a JSON object".to_owned());
    };
    let whole = |name: &str| -> Result<Option<u64>, String> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("{name} must be a whole number of tokens, not {v}")),
        }
    };
    let bytes = u64::try_from(body.len()).unwrap_or(u64::MAX);
    Ok(Estimate {
        input: whole("input_tokens")?.unwrap_or(bytes.div_ceil(4)),
        max_output: whole("max_tokens")?.unwrap_or(default_max),
    })
}

/// A duration as Go's `time.Duration` prints it (`1s`, `6m0s`, `59.5s`,
/// `1h0m0s`, `20ms`), as OpenAI writes its resets; rounded **up** to the
/// millisecond first, so a client that waits it is never early.
pub(crate) fn go_duration(d: Duration) -> String {
    let ms = d.as_nanos().div_ceil(1_000_000);
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (hours, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let (secs, frac) = (rest / 1_000, rest % 1_000);
    let secs = if frac == 0 {
        secs.to_string()
    } else {
        let frac = format!("{frac:03}");
        format!("{secs}.{}", frac.trim_end_matches('0'))
    };
    if hours > 0 {
        format!("{hours}h{minutes}m{secs}s")
    } else if minutes > 0 {
        format!("{minutes}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// An instant as RFC 3339 in UTC to the second, rounded **up**
/// (`2025-01-01T00:01:00Z`), as Anthropic writes its resets; clamped to
/// the years 1970 to 9999.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    const LAST: u64 = 253_402_300_799;
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = ceil_secs(since).min(LAST);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`,
/// for days on or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

fn put(headers: &mut HeaderMap, name: &str, value: impl ToString) {
    if let (Ok(name), Ok(value)) = (
        HeaderName::try_from(name),
        HeaderValue::try_from(value.to_string()),
    ) {
        headers.insert(name, value);
    }
}

/// The suffix or family a limit is written under: `requests`, `tokens`,
/// `input-tokens`, `output-tokens`.
fn family(limit: LlmLimit) -> String {
    limit.as_str().replace('_', "-")
}

/// Writes the dialect's rate-limit headers for `figures`, for a response
/// leaving at wall-clock `now`.
pub(crate) fn write_limits(
    dialect: LlmDialect,
    figures: &[Figure],
    now: SystemTime,
    headers: &mut HeaderMap,
) {
    match dialect {
        LlmDialect::OpenAi => {
            for f in figures {
                let name = family(f.limit);
                put(headers, &format!("x-ratelimit-limit-{name}"), f.per_minute);
                put(
                    headers,
                    &format!("x-ratelimit-remaining-{name}"),
                    f.remaining,
                );
                put(
                    headers,
                    &format!("x-ratelimit-reset-{name}"),
                    go_duration(f.until_full),
                );
            }
        }
        LlmDialect::Anthropic => {
            let anthropic = |headers: &mut HeaderMap, name: &str, f: &Figure| {
                let prefix = format!("anthropic-ratelimit-{name}");
                put(headers, &format!("{prefix}-limit"), f.per_minute);
                put(headers, &format!("{prefix}-remaining"), f.remaining);
                let reset = now.checked_add(f.until_full).unwrap_or(now);
                put(headers, &format!("{prefix}-reset"), rfc3339(reset));
            };
            for f in figures {
                anthropic(headers, &family(f.limit), f);
            }
            // Without a tokens limit of its own, `tokens-*` states the most
            // restrictive token limit in effect: the one with least left.
            let has_tokens = figures.iter().any(|f| f.limit == LlmLimit::Tokens);
            let tightest = figures
                .iter()
                .filter(|f| matches!(f.limit, LlmLimit::InputTokens | LlmLimit::OutputTokens))
                .min_by_key(|f| f.remaining);
            if let (false, Some(f)) = (has_tokens, tightest) {
                anthropic(headers, "tokens", f);
            }
        }
    }
}

/// Writes a refusal's wait: `retry-after` in whole seconds rounded up (at
/// least 1) and, in the OpenAI dialect, `retry-after-ms`, rounded up.
pub(crate) fn write_retry(dialect: LlmDialect, wait: Duration, headers: &mut HeaderMap) {
    if let Ok(value) = HeaderValue::try_from(RetryAfterPrecision::Ceil.write(wait)) {
        headers.insert(RETRY_AFTER, value);
    }
    if dialect == LlmDialect::OpenAi {
        put(
            headers,
            "retry-after-ms",
            wait.as_nanos().div_ceil(1_000_000),
        );
    }
}

/// The body of an admitted call: its usage, as the dialect reports it.
pub(crate) fn ok_body(dialect: LlmDialect, id: usize, usage: Usage) -> String {
    let Usage {
        input_tokens,
        output_tokens,
    } = usage;
    match dialect {
        LlmDialect::OpenAi => json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion",
            "choices": [],
            "usage": {
                "prompt_tokens": input_tokens,
                "completion_tokens": output_tokens,
                "total_tokens": input_tokens.saturating_add(output_tokens),
            },
        }),
        LlmDialect::Anthropic => json!({
            "id": format!("msg_{id}"),
            "type": "message",
            "role": "assistant",
            "content": [],
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
            },
        }),
    }
    .to_string()
}

/// What a refusal says about the limit it names.
pub(crate) struct Refusal<'a> {
    pub(crate) limit: LlmLimit,
    pub(crate) wait: Option<Duration>,
    pub(crate) requested: u64,
    /// The refusing limit's figures (none for concurrency).
    pub(crate) figure: Option<&'a Figure>,
    pub(crate) max_in_flight: Option<usize>,
}

/// The body of a refusal, naming the limit hit: OpenAI's error `type` is
/// the limit (`requests`, `tokens`, `input_tokens`, `output_tokens`,
/// `concurrency`) and its message says it as OpenAI's do; Anthropic's is a
/// `rate_limit_error` whose message names it (`... 50 requests per
/// minute`, `... input tokens per minute`, `Number of concurrent
/// connections has exceeded your rate limit`).
pub(crate) fn refusal_body(dialect: LlmDialect, refusal: &Refusal<'_>) -> String {
    let Refusal {
        limit,
        wait,
        requested,
        figure,
        max_in_flight,
    } = *refusal;
    let (per_minute, used) = figure.map_or((0, 0), |f| {
        (f.per_minute, f.per_minute - f.remaining.min(f.per_minute))
    });
    let what = match limit {
        LlmLimit::Requests => "requests",
        LlmLimit::Tokens => "tokens",
        LlmLimit::InputTokens => "input tokens",
        LlmLimit::OutputTokens => "output tokens",
        LlmLimit::Concurrency => "concurrent requests",
    };
    match dialect {
        LlmDialect::OpenAi => {
            let message = match (limit, wait) {
                (LlmLimit::Concurrency, _) => format!(
                    "Too many concurrent requests: Limit {} in flight. Please retry when one completes.",
                    max_in_flight.unwrap_or(0)
                ),
                (_, Some(wait)) => format!(
                    "Rate limit reached for {what} per min: Limit {per_minute}, Used {used}, \
                     Requested {requested}. Please try again in {}.",
                    go_duration(wait)
                ),
                (_, None) => format!(
                    "Request too large for {what} per min: Limit {per_minute}, Requested {requested}."
                ),
            };
            json!({
                "error": {
                    "message": message,
                    "type": limit.as_str(),
                    "param": null,
                    "code": "rate_limit_exceeded",
                },
            })
        }
        LlmDialect::Anthropic => {
            let message = match (limit, wait) {
                (LlmLimit::Concurrency, _) => {
                    "Number of concurrent connections has exceeded your rate limit. \
                     Please try again later."
                        .to_owned()
                }
                (_, Some(_)) => format!(
                    "This request would exceed the rate limit for your organization of \
                     {per_minute} {what} per minute. Please try again later."
                ),
                (_, None) => format!(
                    "This request asks for {requested} {what}, above the rate limit for your \
                     organization of {per_minute} {what} per minute."
                ),
            };
            json!({
                "type": "error",
                "error": { "type": "rate_limit_error", "message": message },
            })
        }
    }
    .to_string()
}

/// The body of a call the server could not read.
pub(crate) fn invalid_body(dialect: LlmDialect, reason: &str) -> String {
    match dialect {
        LlmDialect::OpenAi => json!({
            "error": {
                "message": reason,
                "type": "invalid_request_error",
                "param": null,
                "code": null,
            },
        }),
        LlmDialect::Anthropic => json!({
            "type": "error",
            "error": { "type": "invalid_request_error", "message": reason },
        }),
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn go_durations_as_go_prints_them() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_nanos(1)), "1ms");
        assert_eq!(go_duration(20 * MS), "20ms");
        assert_eq!(go_duration(1_000 * MS), "1s");
        assert_eq!(go_duration(59_500 * MS), "59.5s");
        assert_eq!(go_duration(60_000 * MS), "1m0s");
        assert_eq!(go_duration(360_000 * MS), "6m0s");
        assert_eq!(go_duration(3_723_250 * MS), "1h2m3.25s");
        assert_eq!(go_duration(1_500 * MS + Duration::from_nanos(1)), "1.501s");
    }

    #[test]
    fn go_durations_parse_back_no_shorter() {
        for ms in [
            0u64, 1, 999, 1_000, 1_001, 59_999, 60_000, 61_234, 3_600_000,
        ] {
            let d = Duration::from_millis(ms) + Duration::from_nanos(300);
            let text = go_duration(d);
            let mut headers = HeaderMap::new();
            put(&mut headers, "x-ratelimit-reset-tokens", &text);
            let signal = crate::headers::RateLimitSignal::parse(200, &headers, UNIX_EPOCH);
            let back = signal.limit("tokens").and_then(|l| l.reset);
            assert_eq!(back, Some(Duration::from_millis(ms + 1)), "{text}");
        }
    }

    #[test]
    fn rfc3339_rounds_up_to_the_second() {
        let at = |s: u64, ns: u32| UNIX_EPOCH + Duration::new(s, ns);
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(0, 1)), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339(at(951_782_400, 0)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_735_689_659, 500)), "2025-01-01T00:01:00Z");
        assert_eq!(rfc3339(at(u64::MAX / 4, 0)), "9999-12-31T23:59:59Z");
        for s in [0, 86_399, 951_782_400, 1_735_689_660, 4_102_444_800] {
            assert_eq!(
                crate::headers::parse_rfc3339(&rfc3339(at(s, 0))),
                Some(at(s, 0))
            );
        }
    }

    #[test]
    fn estimates_from_the_body() {
        let e = |body: &str| estimate(body.as_bytes(), 100);
        assert_eq!(
            e(""),
            Ok(Estimate {
                input: 0,
                max_output: 100
            })
        );
        assert_eq!(
            e(r#"{"input_tokens": 800, "max_tokens": 400}"#),
            Ok(Estimate {
                input: 800,
                max_output: 400
            })
        );
        // 16 bytes: 4 tokens of prompt by the rule of thumb.
        assert_eq!(
            e(r#"{"prompt":"abc"}"#),
            Ok(Estimate {
                input: 4,
                max_output: 100
            })
        );
        assert!(e(r#"{"max_tokens": -1}"#).is_err());
        assert!(e(r#"{"max_tokens": 1.5}"#).is_err());
        assert!(e("[1]").is_err());
        assert!(e("{").is_err());
    }
}
