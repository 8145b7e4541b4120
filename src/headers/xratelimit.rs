//! The `X-RateLimit-*` family and its relatives.
//!
//! - **Plain** `X-RateLimit-Limit / -Remaining / -Used / -Reset`: GitHub
//!   (epoch reset, `-Resource` names the limit), Reddit (fractional
//!   `-Remaining`, reset as a delay, no `-Limit`: it is `used + remaining`),
//!   Discord (`-Reset-After` in fractional seconds preferred over the epoch
//!   `-Reset`, `-Bucket` names and partitions the limit, `-Global` and
//!   `-Scope` describe the limit hit).
//! - **Suffixed** `X-RateLimit-{Limit,Remaining,Reset}-<name>`: OpenAI and
//!   the many APIs that copy it (Groq, Azure OpenAI). One limit per suffix,
//!   resets written as Go durations (`6m0s`).
//! - **Twitter/X** `x-rate-limit-{limit,remaining,reset}` (epoch reset).

use std::collections::BTreeSet;

use super::field::{count, name, reset, single, Clock, Fields, Keep, Notes};
use super::value::parse_number;
use super::{field, Dimension, Limit};

/// Signal-wide facts the plain family carries (Discord).
#[derive(Debug, Default)]
pub(super) struct Flags {
    pub(super) global: bool,
    pub(super) scope: Option<String>,
    /// GitHub's resource or Discord's bucket.
    pub(super) bucket: Option<String>,
}

pub(super) fn parse(
    headers: &Fields<'_>,
    clock: &Clock,
    notes: &mut Notes,
    limits: &mut Vec<Limit>,
) -> Flags {
    let mut flags = flags(headers, notes);
    flags.bucket = plain(headers, clock, notes, limits);
    suffixed(headers, clock, notes, limits);
    twitter(headers, clock, notes, limits);
    flags
}

fn flags(headers: &Fields<'_>, notes: &mut Notes) -> Flags {
    const GLOBAL: &str = "x-ratelimit-global";
    let global = single(headers, notes, GLOBAL, Keep::Largest, |text, notes| {
        if text.eq_ignore_ascii_case("true") {
            Some(true)
        } else if text.eq_ignore_ascii_case("false") {
            Some(false)
        } else {
            notes.push(GLOBAL, "expected true or false");
            None
        }
    });
    let scope = name(headers, notes, "x-ratelimit-scope");
    Flags {
        global: global == Some(true) || scope.as_deref() == Some("global"),
        scope,
        bucket: None,
    }
}

/// Reads the plain family; returns the bucket it names (GitHub's resource,
/// Discord's bucket), if any.
fn plain(
    headers: &Fields<'_>,
    clock: &Clock,
    notes: &mut Notes,
    limits: &mut Vec<Limit>,
) -> Option<String> {
    let limit = count(headers, notes, "x-ratelimit-limit", Keep::Smallest);
    let remaining = count(headers, notes, "x-ratelimit-remaining", Keep::Smallest);
    let used = count(headers, notes, "x-ratelimit-used", Keep::Largest);
    let reset = reset_after(headers, notes)
        .or_else(|| field::reset(headers, clock, notes, "x-ratelimit-reset"));
    let bucket = name(headers, notes, "x-ratelimit-bucket");
    let resource = name(headers, notes, "x-ratelimit-resource");

    let named = resource.clone().or_else(|| bucket.clone());
    if limit.is_none() && remaining.is_none() && used.is_none() && reset.is_none() {
        return named;
    }
    let name = resource
        .or_else(|| bucket.clone())
        .unwrap_or_else(|| "requests".to_owned());
    let mut out = Limit::new(name, Dimension::Requests);
    out.limit = limit.or_else(|| used.zip(remaining).and_then(|(u, r)| u.checked_add(r)));
    out.remaining = remaining.or_else(|| limit.zip(used).map(|(l, u)| l.saturating_sub(u)));
    out.reset = reset;
    out.partition = bucket;
    limits.push(out);
    named
}

/// Discord's `X-RateLimit-Reset-After`: always a delay, in fractional
/// seconds, so it is preferred over the epoch in `X-RateLimit-Reset`.
fn reset_after(headers: &Fields<'_>, notes: &mut Notes) -> Option<std::time::Duration> {
    const NAME: &str = "x-ratelimit-reset-after";
    single(
        headers,
        notes,
        NAME,
        Keep::Largest,
        |text, notes| match parse_number(text) {
            Ok(n) => Some(field::clamp_wait(NAME, n.as_secs(), notes)),
            Err(reason) => {
                notes.push(NAME, reason);
                None
            }
        },
    )
}

fn suffixed(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes, limits: &mut Vec<Limit>) {
    const PREFIXES: [&str; 3] = [
        "x-ratelimit-limit-",
        "x-ratelimit-remaining-",
        "x-ratelimit-reset-",
    ];
    let mut suffixes = BTreeSet::new();
    for key in headers.names() {
        for prefix in PREFIXES {
            if let Some(suffix) = key.strip_prefix(prefix) {
                // `x-ratelimit-reset-after` is Discord's, handled above.
                if !suffix.is_empty() && key != "x-ratelimit-reset-after" {
                    suffixes.insert(suffix.to_owned());
                }
            }
        }
    }
    for suffix in suffixes {
        let limit = count(
            headers,
            notes,
            &format!("x-ratelimit-limit-{suffix}"),
            Keep::Smallest,
        );
        let remaining = count(
            headers,
            notes,
            &format!("x-ratelimit-remaining-{suffix}"),
            Keep::Smallest,
        );
        let reset = reset(
            headers,
            clock,
            notes,
            &format!("x-ratelimit-reset-{suffix}"),
        );
        if limit.is_none() && remaining.is_none() && reset.is_none() {
            continue;
        }
        let name = suffix.replace('-', "_");
        let mut out = Limit::new(name.clone(), Dimension::from_name(&name));
        out.limit = limit;
        out.remaining = remaining;
        out.reset = reset;
        limits.push(out);
    }
}

fn twitter(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes, limits: &mut Vec<Limit>) {
    let limit = count(headers, notes, "x-rate-limit-limit", Keep::Smallest);
    let remaining = count(headers, notes, "x-rate-limit-remaining", Keep::Smallest);
    let reset = reset(headers, clock, notes, "x-rate-limit-reset");
    if limit.is_none() && remaining.is_none() && reset.is_none() {
        return;
    }
    let mut out = Limit::new("requests", Dimension::Requests);
    out.limit = limit;
    out.remaining = remaining;
    out.reset = reset;
    limits.push(out);
}
