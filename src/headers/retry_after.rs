//! `Retry-After` (RFC 9110 §10.2.3) and its cousins.
//!
//! `retry-after-ms` (OpenAI, Azure OpenAI), `x-ms-retry-after-ms` (Azure)
//! and Traefik's `X-Retry-In` (a Go duration, `98.765432ms`, beside a
//! `Retry-After` rounded up to whole seconds) are preferred when present:
//! they say the same thing with more precision. Where `Retry-After` is
//! absent, the wait some limiters write under a name of their own is read
//! as its delta-seconds: Bucket4j's `X-Rate-Limit-Retry-After-Seconds` and
//! `X-RateLimit-Retry-After` (MailerLite and others).
//! `Retry-After` is either delta-seconds or an HTTP-date; the date is
//! measured against the response's `Date` (see [`Clock`]). Fractional
//! delta-seconds (`2.0`, as Shopify sends) are accepted although RFC 9110
//! only allows integers, because refusing them would lose a real wait.

use std::time::Duration;

use super::field::{choose, clamp_wait, single, texts, Clock, Fields, Keep, Notes};
use super::value::{parse_go_duration, parse_number, Number};

const MS_HEADERS: [&str; 2] = ["retry-after-ms", "x-ms-retry-after-ms"];
/// Traefik's exact wait beside its whole-second `Retry-After`.
const GO_DURATION: &str = "x-retry-in";
/// Delta-seconds under other names, read where `Retry-After` is absent.
const SECONDS_HEADERS: [&str; 2] = [
    "x-rate-limit-retry-after-seconds",
    "x-ratelimit-retry-after",
];

pub(super) fn parse(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes) -> Option<Duration> {
    let millis = longest_number(headers, notes, &MS_HEADERS, Number::as_millis);
    let exact = millis.or_else(|| go_duration(headers, notes));
    exact
        .or_else(|| retry_after(headers, clock, notes))
        .or_else(|| longest_number(headers, notes, &SECONDS_HEADERS, Number::as_secs))
}

/// The longest of the waits the fields `names` write as a number of the
/// unit `unit` reads.
fn longest_number(
    headers: &Fields<'_>,
    notes: &mut Notes,
    names: &[&str],
    unit: fn(Number) -> Duration,
) -> Option<Duration> {
    names
        .iter()
        .filter_map(|name| {
            single(
                headers,
                notes,
                name,
                Keep::Largest,
                |text, notes| match parse_number(text) {
                    Ok(n) => Some(clamp_wait(name, unit(n), notes)),
                    Err(reason) => {
                        notes.push(name, reason);
                        None
                    }
                },
            )
        })
        .max()
}

/// Traefik's `X-Retry-In`: the wait its token bucket computed, as Go
/// prints a duration (`98.765432ms`; under a millisecond in `µs`, the one
/// byte sequence outside ASCII read here). The longest of its copies.
fn go_duration(headers: &Fields<'_>, notes: &mut Notes) -> Option<Duration> {
    let mut longest: Option<Duration> = None;
    for value in headers.get_all(GO_DURATION) {
        let Ok(text) = std::str::from_utf8(value.as_bytes()) else {
            notes.push(GO_DURATION, "not UTF-8");
            continue;
        };
        let text = text.trim().replace(['\u{b5}', '\u{3bc}'], "u");
        match parse_go_duration(&text) {
            Ok(wait) => {
                let wait = clamp_wait(GO_DURATION, wait, notes);
                longest = Some(longest.map_or(wait, |l| l.max(wait)));
            }
            Err(reason) => notes.push(GO_DURATION, reason),
        }
    }
    longest
}

fn retry_after(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes) -> Option<Duration> {
    const NAME: &str = "retry-after";
    let mut parsed = Vec::new();
    for text in texts(headers, NAME, notes) {
        // An HTTP-date contains a comma, so try the whole value as a date
        // before splitting a merged `30, 30` into members.
        if let Ok(at) = httpdate::parse_http_date(text) {
            parsed.push((text, clock.until(NAME, at, notes)));
            continue;
        }
        for member in text.split(',').map(str::trim) {
            match parse_number(member) {
                Ok(n) => parsed.push((member, clamp_wait(NAME, n.as_secs(), notes))),
                Err("negative value") => notes.push(NAME, "negative value"),
                Err(_) => notes.push(NAME, "not delta-seconds or an HTTP-date"),
            }
        }
    }
    choose(notes, NAME, Keep::Largest, parsed)
}
