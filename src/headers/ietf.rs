//! The IETF httpapi rate-limit fields (draft-ietf-httpapi-ratelimit-headers),
//! both generations.
//!
//! - **Structured** (draft 08 and later): `RateLimit-Policy` lists the quota
//!   policies (`"burst";q=100;w=60, "daily";q=1000;w=86400`) and `RateLimit`
//!   the live counters (`"burst";r=12;t=30`). Both are Structured Field Lists
//!   (RFC 9651) read with [`sfv`]; entries are matched by policy name and
//!   partition key. Parameters: `q` quota (`l` in draft 07), `qu` quota unit,
//!   `w` window in seconds, `pk` partition key, `r` remaining, `t` reset.
//!   Unknown parameters are extensions and are skipped silently.
//! - **Draft 07** (`RateLimit: limit=20, remaining=19, reset=2`): one
//!   Structured Field Dictionary carrying the three old-style values, beside
//!   an integer `RateLimit-Policy: 20;w=2` that gives the window. A
//!   `RateLimit` field that parses as a Dictionary with a `limit`,
//!   `remaining` or `reset` member is read this way; anything else is read
//!   as the structured List above.
//! - **Old style** (drafts up to 06, and GitLab): `RateLimit-Limit`,
//!   `RateLimit-Remaining`, `RateLimit-Reset`. `RateLimit-Limit` may carry
//!   policies (`10, 10;w=1, 1000;w=3600`: the first member is the limit, a
//!   later member with the same quota gives its window), and an old
//!   `RateLimit-Policy: 100;w=60` with integer members gives the window too.
//!   GitLab adds `RateLimit-Observed` (used), `RateLimit-Name` and
//!   `RateLimit-ResetTime` (an HTTP-date, used when `RateLimit-Reset` is
//!   absent). GitLab sends an epoch in `RateLimit-Reset` where the draft says
//!   delay; the shared reset rule reads both correctly.

use std::time::Duration;

use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser};

use super::field::{
    clamp_window, count, name, reset, texts, Clock, Fields, Keep, Notes, MAX_MEMBERS,
};
use super::value::{base64, Number};
use super::{Dimension, Limit};

const POLICY: &str = "ratelimit-policy";
const RATELIMIT: &str = "ratelimit";
const LIMIT: &str = "ratelimit-limit";

pub(super) fn parse(
    headers: &Fields<'_>,
    clock: &Clock,
    notes: &mut Notes,
    limits: &mut Vec<Limit>,
) {
    let (policies, legacy_windows) = policies(headers, notes);
    let mut structured = policies;
    let draft7 = draft7(headers, clock, notes);
    if draft7.is_none() {
        counters(headers, clock, notes, &mut structured);
    }
    old_style(headers, clock, notes, &legacy_windows, draft7, limits);
    limits.extend(structured);
}

/// The three values of a draft-07 `RateLimit` dictionary.
#[derive(Clone, Copy, Debug, Default)]
struct Draft7 {
    limit: Option<u64>,
    remaining: Option<u64>,
    reset: Option<Duration>,
}

/// Reads `RateLimit` as a draft-07 Dictionary (`limit=20, remaining=19,
/// reset=2`); `None` when it is not one, so the List reading applies.
fn draft7(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes) -> Option<Draft7> {
    const KEYS: [&str; 3] = ["limit", "remaining", "reset"];
    let texts = texts(headers, RATELIMIT, notes);
    if texts.is_empty() {
        return None;
    }
    let joined = texts.join(", ");
    let dictionary = Parser::new(&joined).parse::<Dictionary>().ok()?;
    if !dictionary.keys().any(|k| KEYS.contains(&k.as_str())) {
        return None;
    }
    let mut value = |key: &str| -> Option<u64> {
        let ListEntry::Item(item) = dictionary.get(key)? else {
            notes.push(
                RATELIMIT,
                format!("{key}: inner list where a number was expected"),
            );
            return None;
        };
        match item
            .bare_item
            .as_integer()
            .map(i64::from)
            .map(u64::try_from)
        {
            Some(Ok(v)) => Some(v),
            Some(Err(_)) => {
                notes.push(RATELIMIT, format!("{key} is negative"));
                None
            }
            None => {
                notes.push(RATELIMIT, format!("{key} is not an integer"));
                None
            }
        }
    };
    let limit = value("limit");
    let remaining = value("remaining");
    let reset = value("reset");
    Some(Draft7 {
        limit,
        remaining,
        reset: reset
            .and_then(|t| clock.reset_from_number(RATELIMIT, Number { int: t, nanos: 0 }, notes)),
    })
}

/// Joins every line of a structured field, as RFC 9651 §4.2 says, and parses
/// it as a List.
fn list(headers: &Fields<'_>, notes: &mut Notes, name: &str) -> Option<List> {
    let texts = texts(headers, name, notes);
    if texts.is_empty() {
        return None;
    }
    let joined = texts.join(", ");
    match Parser::new(&joined).parse::<List>() {
        Ok(mut list) => {
            if list.len() > MAX_MEMBERS {
                notes.push(
                    name,
                    format!("more than {MAX_MEMBERS} members; the rest ignored"),
                );
                list.truncate(MAX_MEMBERS);
            }
            Some(list)
        }
        Err(err) => {
            notes.push(name, format!("not a structured-field list ({err})"));
            None
        }
    }
}

/// A policy or counter's name: a String or Token, in lower case.
fn policy_name(item: &BareItem) -> Option<String> {
    item.as_string()
        .map(|s| s.as_str())
        .or_else(|| item.as_token().map(|t| t.as_str()))
        .map(str::to_ascii_lowercase)
}

/// A non-negative Integer parameter; anything else is noted.
fn integer_param(
    params: &Parameters,
    key: &str,
    header: &str,
    policy: &str,
    notes: &mut Notes,
) -> Option<u64> {
    let value = params.get(key)?;
    match value.as_integer().map(i64::from) {
        Some(v) => match u64::try_from(v) {
            Ok(v) => Some(v),
            Err(_) => {
                notes.push(header, format!("{policy}: {key} is negative"));
                None
            }
        },
        None => {
            notes.push(header, format!("{policy}: {key} is not an integer"));
            None
        }
    }
}

/// The partition key: a Byte Sequence printed as base64; Strings and Tokens
/// are accepted as they are.
fn partition(params: &Parameters, header: &str, policy: &str, notes: &mut Notes) -> Option<String> {
    let value = params.get("pk")?;
    if let Some(bytes) = value.as_byte_sequence() {
        return Some(base64(bytes));
    }
    if let Some(text) = policy_name(value) {
        return Some(text);
    }
    notes.push(header, format!("{policy}: pk is not a byte sequence"));
    None
}

/// Reads `RateLimit-Policy`: named policies become limits; integer members
/// (the older draft) become `(quota, window)` pairs for `RateLimit-Limit`.
fn policies(headers: &Fields<'_>, notes: &mut Notes) -> (Vec<Limit>, Vec<(u64, Duration)>) {
    let mut named: Vec<Limit> = Vec::new();
    let mut legacy = Vec::new();
    for entry in list(headers, notes, POLICY).unwrap_or_default() {
        let ListEntry::Item(item) = entry else {
            notes.push(POLICY, "inner list where a policy was expected");
            continue;
        };
        if let Some(quota) = item.bare_item.as_integer().map(i64::from) {
            let window = integer_param(&item.params, "w", POLICY, &quota.to_string(), notes);
            match (u64::try_from(quota), window) {
                (Ok(q), Some(w)) => {
                    legacy.push((q, clamp_window(POLICY, Duration::from_secs(w), notes)))
                }
                (Err(_), _) => notes.push(POLICY, "negative quota"),
                (Ok(_), None) => {}
            }
            continue;
        }
        let Some(policy) = policy_name(&item.bare_item) else {
            notes.push(POLICY, "policy name is not a string or token");
            continue;
        };
        let p = &item.params;
        let quota = match integer_param(p, "q", POLICY, &policy, notes) {
            Some(q) => Some(q),
            None => integer_param(p, "l", POLICY, &policy, notes),
        };
        if !p.contains_key("q") && !p.contains_key("l") {
            notes.push(POLICY, format!("{policy}: no quota (q)"));
        }
        let dimension = match p.get("qu") {
            None => Dimension::Requests,
            Some(unit) => match policy_name(unit) {
                Some(unit) => Dimension::from_name(&unit),
                None => {
                    notes.push(POLICY, format!("{policy}: qu is not a string"));
                    Dimension::Requests
                }
            },
        };
        let window = integer_param(p, "w", POLICY, &policy, notes)
            .map(|w| clamp_window(POLICY, Duration::from_secs(w), notes));
        let pk = partition(p, POLICY, &policy, notes);
        if named.iter().any(|l| l.name == policy && l.partition == pk) {
            notes.push(
                POLICY,
                format!("{policy}: duplicate policy; kept the first"),
            );
            continue;
        }
        let mut limit = Limit::new(policy, dimension);
        limit.limit = quota;
        limit.window = window;
        limit.partition = pk;
        named.push(limit);
    }
    (named, legacy)
}

/// Reads `RateLimit` and attaches each counter to its policy, or adds a
/// limit of its own when no policy was announced.
fn counters(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes, limits: &mut Vec<Limit>) {
    let mut seen: Vec<(String, Option<String>)> = Vec::new();
    for entry in list(headers, notes, RATELIMIT).unwrap_or_default() {
        let ListEntry::Item(item) = entry else {
            notes.push(RATELIMIT, "inner list where a policy was expected");
            continue;
        };
        let Some(policy) = policy_name(&item.bare_item) else {
            notes.push(RATELIMIT, "policy name is not a string or token");
            continue;
        };
        let p = &item.params;
        let remaining = integer_param(p, "r", RATELIMIT, &policy, notes);
        let reset = integer_param(p, "t", RATELIMIT, &policy, notes)
            .and_then(|t| clock.reset_from_number(RATELIMIT, Number { int: t, nanos: 0 }, notes));
        let pk = partition(p, RATELIMIT, &policy, notes);

        let key = (policy.clone(), pk.clone());
        let repeated = seen.contains(&key);
        if repeated {
            notes.push(
                RATELIMIT,
                format!("{policy}: repeated; kept the smallest remaining and longest reset"),
            );
        } else {
            seen.push(key);
        }

        let matching = limits.iter_mut().find(|l| {
            l.name == policy && (pk.is_none() || l.partition.is_none() || l.partition == pk)
        });
        let limit = match matching {
            Some(limit) => limit,
            None => {
                limits.push(Limit::new(policy, Dimension::Requests));
                let last = limits.len() - 1;
                &mut limits[last]
            }
        };
        if limit.partition.is_none() {
            limit.partition = pk;
        }
        limit.remaining = min_opt(limit.remaining, remaining, repeated);
        limit.reset = max_opt(limit.reset, reset, repeated);
    }
}

/// With `merge`, the smaller of two values; otherwise the new one wins.
fn min_opt<T: Ord>(old: Option<T>, new: Option<T>, merge: bool) -> Option<T> {
    match (old, new) {
        (Some(a), Some(b)) if merge => Some(a.min(b)),
        (old, None) => old,
        (_, new) => new,
    }
}

/// With `merge`, the larger of two values; otherwise the new one wins.
fn max_opt<T: Ord>(old: Option<T>, new: Option<T>, merge: bool) -> Option<T> {
    match (old, new) {
        (Some(a), Some(b)) if merge => Some(a.max(b)),
        (old, None) => old,
        (_, new) => new,
    }
}

fn old_style(
    headers: &Fields<'_>,
    clock: &Clock,
    notes: &mut Notes,
    legacy_windows: &[(u64, Duration)],
    draft7: Option<Draft7>,
    limits: &mut Vec<Limit>,
) {
    let draft7 = draft7.unwrap_or_default();
    let (limit, mut window) = limit_with_window(headers, notes, LIMIT);
    let limit = limit.or(draft7.limit);
    let remaining =
        count(headers, notes, "ratelimit-remaining", Keep::Smallest).or(draft7.remaining);
    let observed = count(headers, notes, "ratelimit-observed", Keep::Largest);
    let reset = reset(headers, clock, notes, "ratelimit-reset")
        .or_else(|| reset_time(headers, clock, notes))
        .or(draft7.reset);
    let throttle = name(headers, notes, "ratelimit-name");

    if limit.is_none() && remaining.is_none() && observed.is_none() && reset.is_none() {
        return;
    }
    if window.is_none() {
        window = limit.and_then(|l| {
            legacy_windows
                .iter()
                .find(|(q, _)| *q == l)
                .map(|(_, w)| *w)
        });
    }
    let mut out = Limit::new(
        throttle.unwrap_or_else(|| "requests".to_owned()),
        Dimension::Requests,
    );
    out.limit = limit.or_else(|| observed.zip(remaining).and_then(|(o, r)| o.checked_add(r)));
    out.remaining = remaining.or_else(|| limit.zip(observed).map(|(l, o)| l.saturating_sub(o)));
    out.reset = reset;
    out.window = window;
    limits.push(out);
}

/// Reads `RateLimit-Limit` (the field `name`), which older drafts let
/// carry quota policies: `100` or `100;w=60` or `10, 10;w=1, 1000;w=3600`
/// (Envoy writes the same in `X-RateLimit-Limit`).
pub(super) fn limit_with_window(
    headers: &Fields<'_>,
    notes: &mut Notes,
    name: &str,
) -> (Option<u64>, Option<Duration>) {
    let Some(list) = list(headers, notes, name) else {
        return (None, None);
    };
    let mut members = Vec::new();
    for entry in list {
        let ListEntry::Item(item) = entry else {
            notes.push(name, "inner list where a number was expected");
            continue;
        };
        let Some(value) = item.bare_item.as_integer().map(i64::from) else {
            // `60.0`: floor it like every other count.
            match item.bare_item.as_decimal() {
                Some(d) => {
                    match u64::try_from(i64::from(d.as_integer_scaled_1000()).div_euclid(1000)) {
                        Ok(v) => members.push((v, None)),
                        Err(_) => notes.push(name, "negative value"),
                    }
                }
                None => notes.push(name, "not a number"),
            }
            continue;
        };
        let Ok(value) = u64::try_from(value) else {
            notes.push(name, "negative value");
            continue;
        };
        let window = integer_param(&item.params, "w", name, &value.to_string(), notes)
            .map(|w| clamp_window(name, Duration::from_secs(w), notes));
        members.push((value, window));
    }
    let Some(&(limit, first_window)) = members.first() else {
        return (None, None);
    };
    let window = first_window.or_else(|| {
        members
            .iter()
            .find(|(q, w)| *q == limit && w.is_some())
            .and_then(|(_, w)| *w)
    });
    let bare: Vec<u64> = members
        .iter()
        .filter(|(_, w)| w.is_none())
        .map(|(q, _)| *q)
        .collect();
    if bare.iter().any(|q| *q != limit) {
        let smallest = bare.iter().copied().min().unwrap_or(limit).min(limit);
        notes.push(
            name,
            format!("conflicting values {bare:?}; kept the smallest"),
        );
        return (Some(smallest), window);
    }
    (Some(limit), window)
}

/// GitLab's `RateLimit-ResetTime`, an HTTP-date.
fn reset_time(headers: &Fields<'_>, clock: &Clock, notes: &mut Notes) -> Option<Duration> {
    const NAME: &str = "ratelimit-resettime";
    let mut parsed = Vec::new();
    for text in texts(headers, NAME, notes) {
        match httpdate::parse_http_date(text) {
            Ok(at) => parsed.push((text, clock.until(NAME, at, notes))),
            Err(_) => notes.push(NAME, "not an HTTP-date"),
        }
    }
    super::field::choose(notes, NAME, Keep::Largest, parsed)
}
