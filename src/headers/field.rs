//! Reading header fields safely: the notes sink, the reference clock, and the
//! "one field, maybe several copies" rule shared by every dialect.

use std::cell::Cell;
use std::fmt::Debug;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

use super::value::{parse_go_duration, parse_number, parse_rfc3339, Number};
use super::{Ignored, MAX_WAIT, MAX_WINDOW};

/// Longest text value (bucket id, resource name) kept as a name.
const MAX_NAME_LEN: usize = 256;

/// Where every dialect reports what it could not use.
#[derive(Debug, Default)]
pub(crate) struct Notes(Vec<Ignored>);

impl Notes {
    pub(crate) fn push(&mut self, header: &str, reason: impl Into<String>) {
        self.0.push(Ignored::new(header, reason));
    }

    pub(crate) fn into_vec(self) -> Vec<Ignored> {
        self.0
    }
}

/// The instant absolute times are measured against.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    /// The response's `Date` when valid, else the local receive time.
    reference: SystemTime,
    /// How far the server's time may be past `reference`: a second for a
    /// `Date` (whole seconds) or the local clock; less where the client
    /// has learned the server's clock.
    uncertainty: Duration,
    /// The coarsest precision of the resets read through this clock (see
    /// [`Limit::reset_precision`](super::Limit::reset_precision)).
    coarsest_reset: Cell<Option<Duration>>,
}

/// The resolution of whole seconds.
const SECOND: Duration = Duration::from_secs(1);
/// The resolution of a number written with a fraction, or in milliseconds.
const MILLISECOND: Duration = Duration::from_millis(1);

/// The response's `Date`, when it has exactly one valid value (several
/// copies that agree count as one), for the engine's server clock; the
/// same rule as [`Clock::from_headers`], whose notes it leaves out.
pub(crate) fn date(headers: &HeaderMap) -> Option<SystemTime> {
    the_date(headers, &mut Notes::default())
}

/// The response's `Date` when it has exactly one valid value; what makes
/// it unusable goes to `notes`.
fn the_date(headers: &HeaderMap, notes: &mut Notes) -> Option<SystemTime> {
    let dates = headers.get_all(http::header::DATE);
    let mut values = dates.iter();
    if let (Some(value), None) = (values.next(), values.next()) {
        // Sent once and valid, as servers send it: what the reading below
        // makes of it, without its lists.
        let text = value.to_str().map(str::trim).unwrap_or_default();
        let date = (value.len() <= MAX_FIELD_BYTES && !text.is_empty())
            .then(|| httpdate::parse_http_date(text).ok())
            .flatten();
        if date.is_some() {
            return date;
        }
    }
    let texts = texts_in(|| dates.iter(), "date", notes);
    let mut dates = Vec::new();
    for text in &texts {
        match httpdate::parse_http_date(text) {
            Ok(date) => dates.push(date),
            Err(_) => notes.push(
                "date",
                "not an HTTP-date; measuring absolute times from the local receive time",
            ),
        }
    }
    dates.dedup();
    match dates.as_slice() {
        [date] => Some(*date),
        [] => None,
        _ => {
            notes.push(
                "date",
                "conflicting values; measuring absolute times from the local receive time",
            );
            None
        }
    }
}

impl Clock {
    /// Picks the reference: the response's own `Date` when it has exactly one
    /// valid value, so that absolute times from the server are compared with
    /// the server's clock, not the client's.
    pub(crate) fn from_headers(
        headers: &HeaderMap,
        received_at: SystemTime,
        notes: &mut Notes,
    ) -> Clock {
        let reference = the_date(headers, notes).unwrap_or(received_at);
        Clock::with(reference, SECOND)
    }

    fn with(reference: SystemTime, uncertainty: Duration) -> Clock {
        Clock {
            reference,
            uncertainty,
            coarsest_reset: Cell::new(None),
        }
    }

    /// The coarsest precision of the resets read so far.
    pub(crate) fn reset_precision(&self) -> Option<Duration> {
        self.coarsest_reset.get()
    }

    /// A reset was read to within `precision`.
    fn reset_read(&self, precision: Duration) {
        let coarsest = self
            .coarsest_reset
            .get()
            .map_or(precision, |p| p.max(precision));
        self.coarsest_reset.set(Some(coarsest));
    }

    /// Absolute times measured against `server_now`, the server's time
    /// when the response arrived as the client has learned it (see
    /// `client::server_clock`), finer than its `Date`.
    /// `uncertainty` is how far past `server_now` the server's time may
    /// be.
    pub(crate) fn at(server_now: SystemTime, uncertainty: Duration) -> Clock {
        Clock::with(server_now, uncertainty.min(SECOND))
    }

    /// Time from the reference until `target`, capped at [`MAX_WAIT`]; zero
    /// (noted) when `target` has passed.
    pub(crate) fn until(&self, header: &str, target: SystemTime, notes: &mut Notes) -> Duration {
        match target.duration_since(self.reference) {
            Ok(wait) => clamp_wait(header, wait, notes),
            Err(past) => {
                notes.push(
                    header,
                    format!(
                        "time is {} s in the past; using 0",
                        past.duration().as_secs_f64()
                    ),
                );
                Duration::ZERO
            }
        }
    }

    /// Reads a numeric reset by the documented rule: at least 10^12 is epoch
    /// milliseconds, at least 10^9 is epoch seconds, anything smaller is a
    /// delay in seconds.
    pub(crate) fn reset_from_number(
        &self,
        header: &str,
        n: Number,
        notes: &mut Notes,
    ) -> Option<Duration> {
        const EPOCH_MILLIS: u64 = 1_000_000_000_000;
        const EPOCH_SECS: u64 = 1_000_000_000;
        let written_in = if n.nanos != 0 { MILLISECOND } else { SECOND };
        if n.int >= EPOCH_MILLIS {
            self.reset_read(MILLISECOND + self.uncertainty);
            self.until_epoch(header, n.as_millis(), notes)
        } else if n.int >= EPOCH_SECS {
            self.reset_read(written_in + self.uncertainty);
            self.until_epoch(header, n.as_secs(), notes)
        } else {
            self.reset_read(written_in);
            Some(clamp_wait(header, n.as_secs(), notes))
        }
    }

    fn until_epoch(&self, header: &str, since: Duration, notes: &mut Notes) -> Option<Duration> {
        match UNIX_EPOCH.checked_add(since) {
            Some(target) => Some(self.until(header, target, notes)),
            None => {
                notes.push(header, "timestamp out of range");
                None
            }
        }
    }

    /// A reset at the absolute time `at`, written to within `written_in`.
    fn reset_at(
        &self,
        header: &str,
        at: SystemTime,
        written_in: Duration,
        notes: &mut Notes,
    ) -> Duration {
        self.reset_read(written_in + self.uncertainty);
        self.until(header, at, notes)
    }

    /// Reads a reset written any way a dialect writes one: a Go duration
    /// (`6m0s`), an RFC 3339 timestamp, or a number under the reset rule.
    pub(crate) fn reset_from_text(
        &self,
        header: &str,
        text: &str,
        notes: &mut Notes,
    ) -> Option<Duration> {
        if let Some(at) = parse_rfc3339(text) {
            let written_in = if text.contains('.') {
                MILLISECOND
            } else {
                SECOND
            };
            return Some(self.reset_at(header, at, written_in, notes));
        }
        let b = text.as_bytes();
        if b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' {
            notes.push(header, "not a valid RFC 3339 timestamp");
            return None;
        }
        let starts_with_digit = text.bytes().next().is_some_and(|b| b.is_ascii_digit());
        if starts_with_digit && text.bytes().any(|b| b.is_ascii_alphabetic()) {
            return match parse_go_duration(text) {
                Ok(wait) => {
                    let fine = text.contains('.') || text.contains("ms") || text.contains("us");
                    self.reset_read(if fine { MILLISECOND } else { SECOND });
                    Some(clamp_wait(header, wait, notes))
                }
                Err(reason) => {
                    notes.push(header, reason);
                    None
                }
            };
        }
        match parse_number(text) {
            Ok(n) => self.reset_from_number(header, n, notes),
            Err(reason) => {
                notes.push(header, reason);
                None
            }
        }
    }
}

/// Caps a wait at [`MAX_WAIT`], noting when it had to.
pub(crate) fn clamp_wait(header: &str, wait: Duration, notes: &mut Notes) -> Duration {
    if wait > MAX_WAIT {
        notes.push(
            header,
            format!(
                "{} s exceeds the {} s cap; clamped",
                wait.as_secs(),
                MAX_WAIT.as_secs()
            ),
        );
        MAX_WAIT
    } else {
        wait
    }
}

/// Caps a window at [`MAX_WINDOW`], noting when it had to.
pub(crate) fn clamp_window(header: &str, window: Duration, notes: &mut Notes) -> Duration {
    if window > MAX_WINDOW {
        notes.push(
            header,
            format!(
                "window of {} s exceeds the {} s cap; clamped",
                window.as_secs(),
                MAX_WINDOW.as_secs()
            ),
        );
        MAX_WINDOW
    } else {
        window
    }
}

/// The most bytes one field may hold, all its lines together; a longer one
/// is ignored with a note, so a response costs the parser time linear in
/// its size and bounded (rate-limit fields are tens of bytes).
pub const MAX_FIELD_BYTES: usize = 8 * 1024;

/// The most members read from one list field (policies, counters, repeated
/// values); the rest are ignored with a note.
pub const MAX_MEMBERS: usize = 64;

/// Up to how many rate-limit fields a head's are scanned rather than
/// searched (a dialect states three to six).
const FEW_FIELDS: usize = 16;

/// The fields of a response head that some dialect reads, found in one
/// pass over the head: a dialect asks for a dozen names, most of them
/// absent, and a lookup in a `HeaderMap` by a `&str` parses and hashes the
/// name each time. Here a name is found by a binary search over the few
/// fields the head has.
pub(crate) struct Fields<'a> {
    /// Each value of a field a dialect reads, sorted by name (stably: a
    /// field's values in the order the head has them).
    entries: Vec<(&'a str, &'a HeaderValue)>,
}

impl<'a> Fields<'a> {
    /// The fields of `headers` whose names `read` says a dialect reads.
    pub(crate) fn of(headers: &'a HeaderMap, read: impl Fn(&str) -> bool) -> Fields<'a> {
        let mut entries: Vec<(&'a str, &'a HeaderValue)> = headers
            .iter()
            .map(|(name, value)| (name.as_str(), value))
            .filter(|(name, _)| read(name))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        Fields { entries }
    }

    /// Every value of the field `name` (in lower case, as every dialect
    /// writes its names), in the order the head has them.
    pub(crate) fn get_all<'s>(
        &'s self,
        name: &'s str,
    ) -> impl Iterator<Item = &'a HeaderValue> + 's {
        // A head states a few rate-limit fields: a scan of them compares
        // lengths first, which a binary search cannot.
        let start = if self.entries.len() <= FEW_FIELDS {
            self.entries
                .iter()
                .position(|(n, _)| *n == name)
                .unwrap_or(self.entries.len())
        } else {
            self.entries.partition_point(|(n, _)| *n < name)
        };
        self.entries[start..]
            .iter()
            .take_while(move |(n, _)| *n == name)
            .map(|(_, value)| *value)
    }

    /// The names of the fields, each once.
    pub(crate) fn names(&self) -> impl Iterator<Item = &'a str> + '_ {
        let mut previous = None;
        self.entries.iter().filter_map(move |(name, _)| {
            let new = previous != Some(*name);
            previous = Some(*name);
            new.then_some(*name)
        })
    }
}

/// Every non-empty value of a field, trimmed; non-ASCII and empty values are
/// noted and skipped, and a field over [`MAX_FIELD_BYTES`] is ignored.
pub(crate) fn texts<'a>(fields: &Fields<'a>, name: &str, notes: &mut Notes) -> Vec<&'a str> {
    texts_in(|| fields.get_all(name), name, notes)
}

/// [`texts`] of the field `name`, whose values `values` goes over.
fn texts_in<'a, I: Iterator<Item = &'a HeaderValue>>(
    values: impl Fn() -> I,
    name: &str,
    notes: &mut Notes,
) -> Vec<&'a str> {
    let mut out = Vec::new();
    let size: usize = values().map(|v| v.len()).sum();
    if size > MAX_FIELD_BYTES {
        notes.push(
            name,
            format!("{size} bytes, over the {MAX_FIELD_BYTES}-byte cap; ignored"),
        );
        return out;
    }
    for value in values() {
        match value.to_str() {
            Ok(text) if text.trim().is_empty() => notes.push(name, "empty value"),
            Ok(text) => out.push(text.trim()),
            Err(_) => notes.push(name, "value is not visible ASCII"),
        }
    }
    out
}

/// Which copy of a repeated field to trust: the conservative one.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keep {
    /// Limits and remaining counts: a smaller one is safer.
    Smallest,
    /// Waits and resets: a longer one is safer.
    Largest,
}

/// Reads a single-valued field that may arrive as several header lines or as
/// a comma-joined line (`30, 30` after a proxy merge).
///
/// Each member is parsed with `parse` (which notes its own failures); equal
/// members agree silently, differing ones keep the conservative value and
/// note the conflict.
pub(crate) fn single<T: PartialOrd + Clone + Debug>(
    headers: &Fields<'_>,
    notes: &mut Notes,
    name: &str,
    keep: Keep,
    mut parse: impl FnMut(&str, &mut Notes) -> Option<T>,
) -> Option<T> {
    if let Some(text) = lone_member(headers, name) {
        // What the general reading below makes of it, without its lists.
        return parse(text, notes);
    }
    let mut members = Vec::new();
    let all = texts(headers, name, notes);
    let listed = all.iter().flat_map(|text| text.split(','));
    for (i, member) in listed.enumerate() {
        if i == MAX_MEMBERS {
            notes.push(
                name,
                format!("more than {MAX_MEMBERS} members; the rest ignored"),
            );
            break;
        }
        let member = member.trim();
        if member.is_empty() {
            notes.push(name, "empty list member");
        } else {
            members.push(member);
        }
    }
    let parsed: Vec<(&str, T)> = members
        .into_iter()
        .filter_map(|m| parse(m, notes).map(|v| (m, v)))
        .collect();
    choose(notes, name, keep, parsed)
}

/// The field's one member, when it is sent once, as one member (no comma),
/// with nothing to note (visible ASCII, not empty, within
/// [`MAX_FIELD_BYTES`]): how nearly every server sends it.
fn lone_member<'a>(headers: &Fields<'a>, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name);
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    if value.len() > MAX_FIELD_BYTES {
        return None;
    }
    let text = value.to_str().ok()?.trim();
    (!text.is_empty() && !text.contains(',')).then_some(text)
}

/// Picks among parsed members of one field, as [`single`] describes.
pub(crate) fn choose<T: PartialOrd + Clone + Debug>(
    notes: &mut Notes,
    name: &str,
    keep: Keep,
    parsed: Vec<(&str, T)>,
) -> Option<T> {
    let mut iter = parsed.iter();
    let (_, first) = iter.next()?;
    let mut best = first.clone();
    let mut conflict = false;
    for (_, value) in iter {
        if value != &best {
            conflict = true;
            let better = match keep {
                Keep::Smallest => value < &best,
                Keep::Largest => value > &best,
            };
            if better {
                best = value.clone();
            }
        }
    }
    if conflict {
        let raw: Vec<&str> = parsed.iter().map(|(raw, _)| *raw).collect();
        let which = match keep {
            Keep::Smallest => "smallest",
            Keep::Largest => "largest",
        };
        notes.push(
            name,
            format!("conflicting values {raw:?}; kept the {which}"),
        );
    }
    Some(best)
}

/// Reads a count field (`limit`, `remaining`, `used`).
pub(crate) fn count(
    headers: &Fields<'_>,
    notes: &mut Notes,
    name: &str,
    keep: Keep,
) -> Option<u64> {
    single(
        headers,
        notes,
        name,
        keep,
        |text, notes| match super::value::parse_count(text) {
            Ok(n) => Some(n),
            Err(reason) => {
                notes.push(name, reason);
                None
            }
        },
    )
}

/// Reads a reset field in any of the dialects' notations.
pub(crate) fn reset(
    headers: &Fields<'_>,
    clock: &Clock,
    notes: &mut Notes,
    name: &str,
) -> Option<Duration> {
    // An HTTP-date has a comma of its own (Cloudflare writes its
    // `x-ratelimit-reset` so): read whole, the latest where there are
    // several, before the members are split below.
    let http_dates = headers
        .get_all(name)
        .filter(|value| value.len() <= MAX_FIELD_BYTES)
        .filter_map(|value| httpdate::parse_http_date(value.to_str().ok()?.trim()).ok());
    if let Some(at) = http_dates.max() {
        return Some(clock.reset_at(name, at, SECOND, notes));
    }
    // RFC 3339 timestamps contain no commas, so splitting members is safe.
    single(headers, notes, name, Keep::Largest, |text, notes| {
        clock.reset_from_text(name, text, notes)
    })
}

/// Reads a short textual field (bucket id, resource, scope) in lower case.
pub(crate) fn name(headers: &Fields<'_>, notes: &mut Notes, header: &str) -> Option<String> {
    let mut values: Vec<String> = Vec::new();
    for text in texts(headers, header, notes) {
        if text.len() > MAX_NAME_LEN {
            notes.push(header, format!("longer than {MAX_NAME_LEN} characters"));
        } else {
            let lower = text.to_ascii_lowercase();
            if !values.contains(&lower) {
                values.push(lower);
            }
        }
    }
    if values.len() > 1 {
        notes.push(
            header,
            format!("conflicting values {values:?}; kept the first"),
        );
    }
    values.into_iter().next()
}
