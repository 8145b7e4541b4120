//! The `X-RateLimit-*` family and its relatives.
//!
//! - **Plain** `X-RateLimit-Limit / -Remaining / -Used / -Reset`: GitHub
//!   (epoch reset, `-Resource` names the limit), Reddit (fractional
//!   `-Remaining`, reset as a delay, no `-Limit`: it is `used + remaining`),
//!   Discord (`-Reset-After` in fractional seconds preferred over the epoch
//!   `-Reset`, `-Bucket` names and partitions the limit, `-Global` and
//!   `-Scope` describe the limit hit).
//!   Envoy writes its quota policies into `X-RateLimit-Limit` as the older
//!   IETF drafts do (`10, 10;w=60`): the window is kept. Spring Cloud
//!   Gateway's token bucket states its refill and size
//!   (`X-RateLimit-Replenish-Rate`, `-Burst-Capacity`, `-Requested-Tokens`
//!   beside `-Remaining`): read as a limit of its burst, in requests, that
//!   is full again once what was spent has refilled, and whose window is
//!   the time a whole burst takes to refill (so its quota over its window
//!   is the refill rate).
//! - **Suffixed** `X-RateLimit-{Limit,Remaining,Reset}-<name>`: OpenAI and
//!   the many APIs that copy it (Groq, Azure OpenAI). One limit per suffix,
//!   resets written as Go durations (`6m0s`). A suffix that ends in a unit
//!   of time is Kong's (`-Minute`, `-Hour`; `-Videos-Minute` for a limit on
//!   a unit the upstream counts): a limit of requests (or of that unit)
//!   per that long.
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
    let (limit, window) = limit_with_window(headers, notes);
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
    out.window = window;
    out.partition = bucket;
    if out.limit.is_none() {
        replenished(headers, notes, &mut out);
    }
    limits.push(out);
    named
}

/// `X-RateLimit-Limit` as a count, or, where it carries quota policies
/// (Envoy's `10, 10;w=60`), as the older IETF drafts' `RateLimit-Limit`.
fn limit_with_window(
    headers: &Fields<'_>,
    notes: &mut Notes,
) -> (Option<u64>, Option<std::time::Duration>) {
    const NAME: &str = "x-ratelimit-limit";
    if headers.get_all(NAME).any(|v| v.as_bytes().contains(&b';')) {
        super::ietf::limit_with_window(headers, notes, NAME)
    } else {
        (count(headers, notes, NAME, Keep::Smallest), None)
    }
}

/// Spring Cloud Gateway's token bucket: `remaining` tokens of a bucket of
/// `-Burst-Capacity` refilling `-Replenish-Rate` a second, each request
/// taking `-Requested-Tokens` (1 unless said). In requests: a limit of
/// the burst, what remains, full again once the tokens spent have
/// refilled, and a window of a whole burst's refill (the quota over the
/// window is then the rate). Nothing is read unless all of it is there.
fn replenished(headers: &Fields<'_>, notes: &mut Notes, out: &mut Limit) {
    let rate = count(headers, notes, "x-ratelimit-replenish-rate", Keep::Smallest);
    let burst = count(headers, notes, "x-ratelimit-burst-capacity", Keep::Smallest);
    let each = count(
        headers,
        notes,
        "x-ratelimit-requested-tokens",
        Keep::Largest,
    )
    .unwrap_or(1);
    let (Some(rate), Some(burst), Some(tokens)) = (rate, burst, out.remaining) else {
        return;
    };
    if rate == 0 || each == 0 || burst < each {
        notes.push(
            "x-ratelimit-replenish-rate",
            "a bucket that never admits a request; ignored",
        );
        return;
    }
    let secs = |units: u64| std::time::Duration::try_from_secs_f64(units as f64 / rate as f64);
    let tokens = tokens.min(burst);
    out.limit = Some(burst / each);
    out.remaining = Some(tokens / each);
    // A reset is a wait (at most a day), a window may be longer.
    out.reset = secs(burst - tokens)
        .ok()
        .map(|d| field::clamp_wait("x-ratelimit-replenish-rate", d, notes));
    out.window = secs(burst - burst % each)
        .ok()
        .map(|d| field::clamp_window("x-ratelimit-burst-capacity", d, notes));
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
        // Kong's limits are named for their unit (`minute`, `videos_minute`)
        // and count requests, or what the suffix names before the unit.
        let name = suffix.replace('-', "_");
        let (dimension, window) = match per_unit(&suffix) {
            Some((counted, window)) => (
                counted.map_or(Dimension::Requests, |c| {
                    Dimension::from_name(&c.replace('-', "_"))
                }),
                Some(window),
            ),
            None => (Dimension::from_name(&name), None),
        };
        let mut out = Limit::new(name, dimension);
        out.limit = limit;
        out.remaining = remaining;
        out.reset = reset;
        out.window = window;
        limits.push(out);
    }
}

/// Kong's suffixes: a unit of time (`minute`), after what is counted where
/// that is not requests (`videos-minute`). Returns what is counted, if
/// named, and the unit's length: a month and a year at their longest, so
/// that the quota over them is never a pace the server refuses.
fn per_unit(suffix: &str) -> Option<(Option<&str>, std::time::Duration)> {
    const DAY: u64 = 86_400;
    let (counted, unit) = match suffix.rsplit_once('-') {
        Some((counted, unit)) => (Some(counted).filter(|c| !c.is_empty()), unit),
        None => (None, suffix),
    };
    let secs = match unit {
        "second" => 1,
        "minute" => 60,
        "hour" => 3_600,
        "day" => DAY,
        "month" => 31 * DAY,
        "year" => 366 * DAY,
        _ => return None,
    };
    Some((counted, std::time::Duration::from_secs(secs)))
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
