//! `Retry-After` (RFC 9110 §10.2.3) and its millisecond cousins.
//!
//! `retry-after-ms` (OpenAI, Azure OpenAI) and `x-ms-retry-after-ms` (Azure)
//! are preferred when present: they say the same thing with more precision.
//! `Retry-After` is either delta-seconds or an HTTP-date; the date is
//! measured against the response's `Date` (see [`Clock`]). Fractional
//! delta-seconds (`2.0`, as Shopify sends) are accepted although RFC 9110
//! only allows integers, because refusing them would lose a real wait.

use std::time::Duration;

use super::field::{choose, clamp_wait, single, texts, Clock, Fields, Keep, Notes};
use super::value::parse_number;

const MS_HEADERS: [&str; 2] = ["retry-after-ms", "x-ms-retry-after-ms"];

pub(super) fn parse(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes) -> Option<Duration> {
    let millis = MS_HEADERS
        .iter()
        .filter_map(|name| {
            single(
                headers,
                notes,
                name,
                Keep::Largest,
                |text, notes| match parse_number(text) {
                    Ok(n) => Some(clamp_wait(name, n.as_millis(), notes)),
                    Err(reason) => {
                        notes.push(name, reason);
                        None
                    }
                },
            )
        })
        .max();
    let seconds = retry_after(headers, clock, notes);
    millis.or(seconds)
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
