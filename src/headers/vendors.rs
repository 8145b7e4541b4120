//! Vendor dialects with header names of their own.
//!
//! - **Anthropic**: `anthropic-ratelimit-<family>-{limit,remaining,reset}`
//!   for the families `requests`, `tokens`, `input-tokens`, `output-tokens`
//!   (and any family added later); resets are RFC 3339 timestamps, or epoch
//!   seconds in the newer `unified` family, both read by the shared rules.
//! - **Shopify**: `X-Shopify-Shop-Api-Call-Limit: 32/40`, the REST leaky
//!   bucket's fill level: 32 used of 40, so 8 remaining.
//! - **HubSpot**: `X-HubSpot-RateLimit-Max` requests per
//!   `-Interval-Milliseconds` with `-Remaining`, and the per-second and
//!   daily limits (`-Secondly`, `-Daily`, each with its `-Remaining`): one
//!   limit of requests each, with its window and no reset.

use std::collections::BTreeSet;
use std::time::Duration;

use super::field::{count, reset, single, Clock, Fields, Keep, Notes};
use super::value::parse_count;
use super::{Dimension, Limit};

pub(super) fn parse(
    headers: &Fields<'_>,
    clock: &Clock,
    notes: &mut Notes,
    limits: &mut Vec<Limit>,
) {
    anthropic(headers, clock, notes, limits);
    shopify(headers, notes, limits);
    hubspot(headers, notes, limits);
}

fn anthropic(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes, limits: &mut Vec<Limit>) {
    const PREFIX: &str = "anthropic-ratelimit-";
    const SUFFIXES: [&str; 3] = ["-limit", "-remaining", "-reset"];
    let families: BTreeSet<&str> = headers
        .names()
        .filter_map(|key| key.strip_prefix(PREFIX))
        .filter_map(|rest| SUFFIXES.iter().find_map(|s| rest.strip_suffix(s)))
        .filter(|family| !family.is_empty())
        .collect();
    for family in families {
        let limit = count(
            headers,
            notes,
            &format!("{PREFIX}{family}-limit"),
            Keep::Smallest,
        );
        let remaining = count(
            headers,
            notes,
            &format!("{PREFIX}{family}-remaining"),
            Keep::Smallest,
        );
        let reset = reset(headers, clock, notes, &format!("{PREFIX}{family}-reset"));
        if limit.is_none() && remaining.is_none() && reset.is_none() {
            continue;
        }
        let name = family.replace('-', "_");
        let mut out = Limit::new(name.clone(), Dimension::from_name(&name));
        out.limit = limit;
        out.remaining = remaining;
        out.reset = reset;
        limits.push(out);
    }
}

fn shopify(headers: &Fields<'_>, notes: &mut Notes, limits: &mut Vec<Limit>) {
    const NAME: &str = "x-shopify-shop-api-call-limit";
    // (used, limit), ordered so that the conservative copy is the fullest one.
    let level = single(headers, notes, NAME, Keep::Largest, |text, notes| {
        let Some((used, limit)) = text.split_once('/') else {
            notes.push(NAME, "expected used/limit, such as 32/40");
            return None;
        };
        match (parse_count(used), parse_count(limit)) {
            (Ok(used), Ok(limit)) => Some((used, limit)),
            (Err(reason), _) | (_, Err(reason)) => {
                notes.push(NAME, reason);
                None
            }
        }
    });
    let Some((used, limit)) = level else {
        return;
    };
    if used > limit {
        notes.push(NAME, "more used than the limit; remaining taken as 0");
    }
    let mut out = Limit::new("requests", Dimension::Requests);
    out.limit = Some(limit);
    out.remaining = Some(limit.saturating_sub(used));
    limits.push(out);
}

fn hubspot(headers: &Fields<'_>, notes: &mut Notes, limits: &mut Vec<Limit>) {
    const PREFIX: &str = "x-hubspot-ratelimit-";
    const INTERVAL: &str = "x-hubspot-ratelimit-interval-milliseconds";
    let interval = count(headers, notes, INTERVAL, Keep::Largest)
        .map(|ms| super::field::clamp_window(INTERVAL, Duration::from_millis(ms), notes));
    // (the limit's name, its quota's field, what remains, its window)
    let families = [
        ("requests", "max", "remaining", interval),
        (
            "secondly",
            "secondly",
            "secondly-remaining",
            Some(Duration::from_secs(1)),
        ),
        (
            "daily",
            "daily",
            "daily-remaining",
            Some(Duration::from_secs(86_400)),
        ),
    ];
    for (name, quota, left, window) in families {
        let limit = count(headers, notes, &format!("{PREFIX}{quota}"), Keep::Smallest);
        let remaining = count(headers, notes, &format!("{PREFIX}{left}"), Keep::Smallest);
        if limit.is_none() && remaining.is_none() {
            continue;
        }
        let mut out = Limit::new(name, Dimension::Requests);
        out.limit = limit;
        out.remaining = remaining;
        out.window = window.filter(|w| !w.is_zero());
        limits.push(out);
    }
}
