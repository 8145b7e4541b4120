//! Read what the server says: one normalized rate-limit signal per response.
//!
//! [`RateLimitSignal::parse`] turns a response head (status, headers and the
//! local time it was received) into a [`RateLimitSignal`]: the server's
//! `Retry-After`, whether the limit hit is global, and every rate limit the
//! response describes, each as a [`Limit`] with its own name and
//! [`Dimension`]. This module is pure parsing: no I/O, no limiter, and the
//! clock is a parameter, so every rule below is a plain function of its input.
//!
//! # Dialects understood
//!
//! | family | headers |
//! | --- | --- |
//! | HTTP semantics (RFC 9110) | `Retry-After` (delta-seconds or HTTP-date), `Date` |
//! | finer waits | `retry-after-ms`, `x-ms-retry-after-ms`, Traefik's `X-Retry-In` (a Go duration) (preferred over `Retry-After`) |
//! | waits under other names | Bucket4j's `X-Rate-Limit-Retry-After-Seconds`, `X-RateLimit-Retry-After` (where `Retry-After` is absent) |
//! | `X-RateLimit-*` | `-Limit`, `-Remaining`, `-Used`, `-Reset`: GitHub (with `-Resource`), Reddit (fractional `-Remaining`), Discord (`-Reset-After`, `-Bucket`, `-Global`, `-Scope`) |
//! | suffixed `X-RateLimit-*-<name>` | OpenAI and look-alikes: `x-ratelimit-limit-requests`, `x-ratelimit-remaining-tokens`, `x-ratelimit-reset-tokens: 6m0s`; Kong's units of time: `X-RateLimit-Limit-Minute`, `-Remaining-Hour`, `-Limit-Videos-Minute` |
//! | gateways | Envoy's quota policies in `X-RateLimit-Limit: 10, 10;w=60`; Spring Cloud Gateway's `X-RateLimit-Replenish-Rate`, `-Burst-Capacity`, `-Requested-Tokens` |
//! | Twitter/X | `x-rate-limit-limit`, `-remaining`, `-reset` |
//! | IETF draft, old style | `RateLimit-Limit` (optionally `10;w=60`), `-Remaining`, `-Reset`; GitLab's `-Observed`, `-Name`, `-ResetTime` |
//! | IETF draft, structured | `RateLimit-Policy` and `RateLimit` (several policies; `q`, `qu`, `w`, `r`, `t`, `pk`) |
//! | Anthropic | `anthropic-ratelimit-<family>-limit`, `-remaining`, `-reset` (RFC 3339) |
//! | Shopify | `X-Shopify-Shop-Api-Call-Limit: 32/40` |
//! | HubSpot | `X-HubSpot-RateLimit-Max`, `-Remaining`, `-Interval-Milliseconds`, `-Secondly`, `-Daily` (and their `-Remaining`) |
//!
//! Several limits in one response are all kept (an OpenAI response yields a
//! `requests` and a `tokens` limit; an IETF response yields one limit per
//! policy), so a client can pace on each of them.
//!
//! # Time: every duration is relative, and measured against the server's clock
//!
//! `retry_after` and each [`Limit::reset`] are durations from the moment the
//! response was produced. Servers state that moment in two ways, and the
//! parser keeps them apart deliberately:
//!
//! - **Relative values** (`Retry-After: 30`, `X-RateLimit-Reset-After: 1.5`,
//!   OpenAI's `6m0s`) are taken as they are.
//! - **Absolute values** (an HTTP-date in `Retry-After`, an epoch in
//!   `X-RateLimit-Reset`, Anthropic's RFC 3339 resets) are measured against
//!   the response's own `Date` header when it has a valid one, and against
//!   `received_at` otherwise. Both times then come from the server's clock,
//!   so a client whose clock is an hour off still waits the right amount.
//!   All three HTTP-date formats (IMF-fixdate, RFC 850, asctime) are read
//!   with [`httpdate`]. An absolute time in the past gives a wait of zero
//!   and a note in [`RateLimitSignal::ignored`].
//!
//! # The `Reset` rule
//!
//! A numeric reset is ambiguous in the wild: GitHub and Twitter send epoch
//! seconds, Reddit sends seconds until the reset, some servers send epoch
//! milliseconds. Every numeric reset (`X-RateLimit-Reset`, `RateLimit-Reset`,
//! `x-rate-limit-reset`, the IETF `t` parameter) is read by one rule:
//!
//! - a value of at least 10^12 is an **epoch in milliseconds**;
//! - a value of at least 10^9 (2001-09-09 as an epoch, 31 years as a delay)
//!   is an **epoch in seconds**;
//! - anything smaller is a **delay in seconds**.
//!
//! An epoch is always converted to the time left until it, never read as a
//! delay: `X-RateLimit-Reset: 1792152901` means "at that instant", not
//! "in 57 years".
//!
//! # Values are validated and capped
//!
//! A field longer than [`MAX_FIELD_BYTES`] (8 KiB, all its lines together)
//! is ignored, and a list field is read to its first [`MAX_MEMBERS`] (64)
//! members, each with a note: the parser's cost is linear in the size of a
//! response and bounded, whatever a server sends.
//!
//! No input makes the parser panic, and no wait or reset it yields exceeds
//! [`MAX_WAIT`] (one day); no window exceeds [`MAX_WINDOW`]. Every value it
//! could not use (negative, `NaN`, not a number, non-ASCII, out of range,
//! clamped, or conflicting with another copy of the same header) is listed in
//! [`RateLimitSignal::ignored`] with the reason, instead of silently
//! disappearing. Counts (`limit`, `remaining`) that arrive as fractions, as
//! Reddit's `X-Ratelimit-Remaining: 598.0` does, are floored. When a header
//! appears several times with different values, the most conservative one is
//! kept (the smallest limit and remaining, the longest wait) and the conflict
//! is noted.
//!
//! The raw-head helper [`parse_response_head`] and the RFC 3339 reader
//! [`parse_rfc3339`] exist for tools such as the `explain_headers` example.

mod field;
mod head;
mod ietf;
mod retry_after;
mod value;
mod vendors;
mod xratelimit;

use std::fmt;
use std::time::{Duration, SystemTime};

use http::HeaderMap;

pub use field::{MAX_FIELD_BYTES, MAX_MEMBERS};
pub use head::{parse_response_head, HeadError};
pub use value::parse_rfc3339;

pub(crate) use field::date;
use field::{Clock, Fields, Notes};

/// The cap on any wait or reset the parser yields: 86 400 s (one day).
///
/// A larger value (a server saying `Retry-After: 1000000000000`, or an epoch
/// reset far in the future) is clamped to this cap, and the clamping is noted
/// in [`RateLimitSignal::ignored`]. A client that wants a shorter ceiling can
/// apply its own on top.
pub const MAX_WAIT: Duration = Duration::from_secs(86_400);

/// The cap on a [`Limit::window`]: 366 days.
///
/// Windows are descriptions, not waits, so they may be longer than
/// [`MAX_WAIT`] (a monthly quota is real); anything past a year is clamped and
/// noted.
pub const MAX_WINDOW: Duration = Duration::from_secs(366 * 86_400);

/// What one response says about rate limits, normalized across dialects.
///
/// Build it with [`RateLimitSignal::parse`] (status, headers and the local
/// receive time) or [`RateLimitSignal::from_response`]. Every duration in it
/// is relative to the moment the response was produced (see the
/// [module docs](self) for how absolute times are measured) and at most
/// [`MAX_WAIT`].
///
/// # Example
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, HeaderValue};
/// use reqwest_pace::headers::{Dimension, Limit, RateLimitSignal};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-limit-requests", HeaderValue::from_static("60"));
/// headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("0"));
/// headers.insert("x-ratelimit-reset-requests", HeaderValue::from_static("1m30s"));
/// headers.insert("retry-after", HeaderValue::from_static("30"));
///
/// let signal = RateLimitSignal::parse(429, &headers, SystemTime::now());
///
/// assert!(signal.is_throttled());
/// assert_eq!(signal.retry_after, Some(Duration::from_secs(30)));
/// assert_eq!(
///     signal.limits,
///     vec![Limit::new("requests", Dimension::Requests)
///         .with_limit(60)
///         .with_remaining(0)
///         .with_reset(Duration::from_secs(90))
///         // Written in whole seconds: the true reset is within a second
///         // before it.
///         .with_reset_precision(Duration::from_secs(1))],
/// );
/// assert!(signal.ignored.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RateLimitSignal {
    /// The response status code.
    pub status: u16,
    /// How long the server asks the client to wait before the next request.
    ///
    /// From `retry-after-ms` / `x-ms-retry-after-ms` when present (they are
    /// more precise), else from `Retry-After`.
    pub retry_after: Option<Duration>,
    /// Whether the limit hit applies to the whole client rather than to one
    /// route or bucket (Discord's `X-RateLimit-Global: true` or
    /// `X-RateLimit-Scope: global`).
    pub global: bool,
    /// The scope of the limit hit, in lower case, when the server names one
    /// (Discord's `X-RateLimit-Scope`: `user`, `global` or `shared`).
    pub scope: Option<String>,
    /// The server's name for the bucket this request was counted in, when
    /// it names one apart from the limits: GitHub's `x-ratelimit-resource`
    /// (`core`, `search`) or Discord's `x-ratelimit-bucket`. Requests
    /// counted in different buckets have separate limits, so a client keeps
    /// separate pacing for each (see [`ThrottledClient`](crate::ThrottledClient)).
    pub bucket: Option<String>,
    /// Every rate limit the response describes, in a stable order: by
    /// dialect, then as the server lists them (families recognized by header
    /// name, such as OpenAI's and Anthropic's, alphabetically).
    pub limits: Vec<Limit>,
    /// Every value that could not be used as sent, with the reason.
    pub ignored: Vec<Ignored>,
}

/// One rate limit described by a response.
///
/// Unknown fields are `None`: a server that only says `X-RateLimit-Remaining`
/// yields a limit with only [`remaining`](Limit::remaining) set.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Limit {
    /// The limit's name in lower case: the dimension (`requests`, `tokens`,
    /// `input_tokens`), the IETF policy name, the Discord bucket id, the
    /// GitHub resource (`core`, `search`), or GitLab's throttle name.
    pub name: String,
    /// What the limit counts.
    pub dimension: Dimension,
    /// The quota: how many units the window allows.
    pub limit: Option<u64>,
    /// How many units are left in the current window (fractions floored).
    pub remaining: Option<u64>,
    /// Time until the window resets, relative like
    /// [`RateLimitSignal::retry_after`]; at most [`MAX_WAIT`].
    pub reset: Option<Duration>,
    /// How finely [`reset`](Limit::reset) is known: the true reset lies
    /// within this much before it. The unit it was written in (a second
    /// for whole seconds, a millisecond for epoch milliseconds or a
    /// fraction), plus, for an absolute time, how finely the server's
    /// clock is known (its `Date` alone: to a second). The coarsest of the
    /// response's resets; `None` when unknown (read as a second).
    pub reset_precision: Option<Duration>,
    /// The window length, only when the server states it (the IETF `w`
    /// parameter); at most [`MAX_WINDOW`].
    pub window: Option<Duration>,
    /// The partition the limit applies to: the IETF partition key `pk`
    /// (base64, as sent) or the Discord bucket.
    pub partition: Option<String>,
}

/// What a [`Limit`] counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dimension {
    /// Requests (the default when a dialect does not say).
    Requests,
    /// Tokens, input and output together.
    Tokens,
    /// Input (prompt) tokens.
    InputTokens,
    /// Output (completion) tokens.
    OutputTokens,
    /// Anything else, in lower case: an IETF quota unit such as
    /// `content-bytes`, or a vendor name such as `tokens_usage_based`.
    Other(String),
}

/// A header value the parser could not use as sent, and why.
///
/// Displays as `header: reason`, for example
/// `x-ratelimit-reset: not a number`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// The header name, in lower case.
    pub header: String,
    /// Why the value was ignored, clamped or replaced.
    pub reason: String,
}

impl RateLimitSignal {
    /// Reads the rate-limit signal of a response head.
    ///
    /// `received_at` is the local time the response arrived; it is the
    /// reference for absolute times only when the response has no valid
    /// `Date` header. Never panics; unusable values go to
    /// [`ignored`](Self::ignored).
    pub fn parse(status: u16, headers: &HeaderMap, received_at: SystemTime) -> RateLimitSignal {
        let mut notes = Notes::default();
        let clock = Clock::from_headers(headers, received_at, &mut notes);
        Self::parse_with(status, headers, clock, notes)
    }

    /// Reads the rate-limit signal of a response head whose server's time
    /// on arrival is known to be `server_now` (finer than its `Date`: see
    /// `client::server_clock`).
    /// `uncertainty` is how far past `server_now` the server's time may
    /// be.
    pub(crate) fn parse_at(
        status: u16,
        headers: &HeaderMap,
        (server_now, uncertainty): (SystemTime, Duration),
    ) -> RateLimitSignal {
        let clock = Clock::at(server_now, uncertainty);
        Self::parse_with(status, headers, clock, Notes::default())
    }

    fn parse_with(
        status: u16,
        headers: &HeaderMap,
        clock: Clock,
        mut notes: Notes,
    ) -> RateLimitSignal {
        // Each dialect looks a dozen fields up by name, most of them
        // absent: they are looked up among the head's rate-limit fields
        // alone, and only the dialects one of them belongs to are asked.
        let fields = Fields::of(headers, |name| Families::of_name(name).any());
        let families = Families::of(fields.names());
        let retry_after = families
            .retry_after
            .then(|| retry_after::parse(&fields, &clock, &mut notes))
            .flatten();

        let mut limits = Vec::new();
        let flags = if families.x_ratelimit {
            xratelimit::parse(&fields, &clock, &mut notes, &mut limits)
        } else {
            xratelimit::Flags::default()
        };
        if families.ietf {
            ietf::parse(&fields, &clock, &mut notes, &mut limits);
        }
        if families.vendors {
            vendors::parse(&fields, &clock, &mut notes, &mut limits);
        }

        // Servers that send two dialects with the same numbers (old and new
        // IETF fields, say) describe one limit, not two.
        let precision = clock.reset_precision();
        let mut unique: Vec<Limit> = Vec::with_capacity(limits.len());
        for mut limit in limits {
            if limit.reset.is_some() {
                limit.reset_precision = precision;
            }
            if !unique.contains(&limit) {
                unique.push(limit);
            }
        }

        let ignored = notes.into_vec();
        for note in &ignored {
            tracing::debug!(header = %note.header, reason = %note.reason, "rate-limit header value not used as sent");
        }

        RateLimitSignal {
            status,
            retry_after,
            global: flags.global,
            scope: flags.scope,
            bucket: flags.bucket,
            limits: unique,
            ignored,
        }
    }

    /// The signal of a response head that carries no rate-limit field (see
    /// [`may_carry_signal`]): its status alone, as
    /// [`parse`](Self::parse) reads such a head, without looking up each
    /// dialect's fields.
    pub(crate) fn of_status(status: u16) -> RateLimitSignal {
        RateLimitSignal {
            status,
            retry_after: None,
            global: false,
            scope: None,
            bucket: None,
            limits: Vec::new(),
            ignored: Vec::new(),
        }
    }

    /// Reads the rate-limit signal of a `reqwest` response, received now.
    pub fn from_response(response: &reqwest::Response) -> RateLimitSignal {
        Self::parse(
            response.status().as_u16(),
            response.headers(),
            SystemTime::now(),
        )
    }

    /// Whether the server is refusing requests because it is asked too much:
    /// the crate's one definition of "throttled", used by the parser, the
    /// learning step, the default retry classification and the client's
    /// events alike.
    ///
    /// True for `429 Too Many Requests`; for `503 Service Unavailable`, with
    /// or without `Retry-After` (an overloaded server, or a proxy's limiter
    /// such as nginx's `limit_req`, whose default refusal is a bare 503); and
    /// for `403 Forbidden` when a limit has nothing remaining or a
    /// `Retry-After` is present, which is how GitHub reports its primary and
    /// secondary rate limits.
    pub fn is_throttled(&self) -> bool {
        match self.status {
            429 | 503 => true,
            403 => self.retry_after.is_some() || self.is_exhausted(),
            _ => false,
        }
    }

    /// [`retry_after`](Self::retry_after) when it is believable: less than
    /// [`MAX_WAIT`]. A server asking for a day or more (a value the parser
    /// clamped, like `Retry-After: 99999999999999`) is not taken at its
    /// word: the wait is no signal, so a client neither blocks a key for a
    /// day nor gives up at once on it.
    pub fn believable_retry_after(&self) -> Option<Duration> {
        self.retry_after.filter(|wait| *wait < MAX_WAIT)
    }

    /// Whether the response describes at least one limit.
    pub fn has_limits(&self) -> bool {
        !self.limits.is_empty()
    }

    /// Whether some limit has nothing remaining.
    pub fn is_exhausted(&self) -> bool {
        self.limits.iter().any(|l| l.remaining == Some(0))
    }

    /// The wait the server asks for, or implies.
    ///
    /// [`retry_after`](Self::retry_after) when present; otherwise the longest
    /// reset among limits with nothing remaining; otherwise `None`.
    pub fn suggested_wait(&self) -> Option<Duration> {
        self.retry_after.or_else(|| {
            self.limits
                .iter()
                .filter(|l| l.remaining == Some(0))
                .filter_map(|l| l.reset)
                .max()
        })
    }

    /// The first limit with this name (names are lower case).
    pub fn limit(&self, name: &str) -> Option<&Limit> {
        self.limits.iter().find(|l| l.name == name)
    }
}

impl Limit {
    /// A limit with a name (stored in lower case) and a dimension, every
    /// other field unknown.
    pub fn new(name: impl Into<String>, dimension: Dimension) -> Limit {
        let mut name = name.into();
        name.make_ascii_lowercase();
        Limit {
            name,
            dimension,
            limit: None,
            remaining: None,
            reset: None,
            reset_precision: None,
            window: None,
            partition: None,
        }
    }

    /// Sets the quota.
    pub fn with_limit(mut self, limit: u64) -> Limit {
        self.limit = Some(limit);
        self
    }

    /// Sets the units remaining.
    pub fn with_remaining(mut self, remaining: u64) -> Limit {
        self.remaining = Some(remaining);
        self
    }

    /// Sets the time until reset.
    pub fn with_reset(mut self, reset: Duration) -> Limit {
        self.reset = Some(reset);
        self
    }

    /// Sets how finely the reset is known.
    pub fn with_reset_precision(mut self, precision: Duration) -> Limit {
        self.reset_precision = Some(precision);
        self
    }

    /// Sets the window length.
    pub fn with_window(mut self, window: Duration) -> Limit {
        self.window = Some(window);
        self
    }

    /// Sets the partition.
    pub fn with_partition(mut self, partition: impl Into<String>) -> Limit {
        self.partition = Some(partition.into());
        self
    }
}

impl Dimension {
    /// The dimension a name stands for: `requests`, `tokens`, `input_tokens`
    /// and `output_tokens` (with `-` or `_`, any case) are known; anything
    /// else is [`Dimension::Other`] in lower case.
    pub fn from_name(name: &str) -> Dimension {
        let lower = name.to_ascii_lowercase().replace('-', "_");
        match lower.as_str() {
            "requests" => Dimension::Requests,
            "tokens" => Dimension::Tokens,
            "input_tokens" => Dimension::InputTokens,
            "output_tokens" => Dimension::OutputTokens,
            _ => Dimension::Other(name.to_ascii_lowercase()),
        }
    }

    /// The dimension's name: `requests`, `tokens`, `input_tokens`,
    /// `output_tokens`, or the [`Other`](Dimension::Other) text.
    pub fn as_str(&self) -> &str {
        match self {
            Dimension::Requests => "requests",
            Dimension::Tokens => "tokens",
            Dimension::InputTokens => "input_tokens",
            Dimension::OutputTokens => "output_tokens",
            Dimension::Other(name) => name,
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Ignored {
    /// A note about `header` (stored in lower case).
    pub fn new(header: impl Into<String>, reason: impl Into<String>) -> Ignored {
        Ignored {
            header: header.into().to_ascii_lowercase(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Ignored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.header, self.reason)
    }
}

/// Which dialects' fields a response head has, by the names each dialect
/// reads: `Retry-After` and the other waits (every name containing
/// `retry-after`, and Traefik's `X-Retry-In`); `X-RateLimit-*` and
/// Twitter's `X-Rate-Limit-*`; the IETF fields (`RateLimit`,
/// `RateLimit-*`); the vendors' (`anthropic-ratelimit-*`,
/// `X-HubSpot-RateLimit-*`, Shopify's `X-Shopify-Shop-Api-Call-Limit`).
/// A dialect none of whose fields is there reads nothing, and is not
/// asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Families {
    retry_after: bool,
    x_ratelimit: bool,
    ietf: bool,
    vendors: bool,
}

impl Families {
    /// The dialects that read a field of this name (in lower case).
    fn of_name(name: &str) -> Families {
        Families {
            retry_after: name.contains("retry-after") || name == "x-retry-in",
            x_ratelimit: name.starts_with("x-ratelimit-") || name.starts_with("x-rate-limit-"),
            ietf: name.starts_with("ratelimit"),
            vendors: name.starts_with("anthropic-ratelimit-")
                || name.starts_with("x-hubspot-ratelimit-")
                || name == "x-shopify-shop-api-call-limit",
        }
    }

    /// The dialects that read one of these fields.
    fn of<'a>(names: impl IntoIterator<Item = &'a str>) -> Families {
        names
            .into_iter()
            .map(Families::of_name)
            .fold(Families::default(), |all, one| Families {
                retry_after: all.retry_after || one.retry_after,
                x_ratelimit: all.x_ratelimit || one.x_ratelimit,
                ietf: all.ietf || one.ietf,
                vendors: all.vendors || one.vendors,
            })
    }

    fn any(self) -> bool {
        self != Families::default()
    }
}

/// Whether a response head may carry a rate-limit signal: whether one of
/// its field names is one that a dialect reads (see [`Families`]). A head
/// with none reads as its status alone ([`RateLimitSignal::of_status`]),
/// which the client takes without parsing: most responses of an
/// unthrottled client are such.
pub(crate) fn may_carry_signal(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| Families::of_name(name.as_str()).any())
}

#[cfg(test)]
mod signal_fields {
    use super::*;
    use http::HeaderValue;

    /// Every field name a dialect reads makes a head that may carry a
    /// signal; a head of other fields parses to its status alone, as the
    /// client takes it without parsing.
    #[test]
    fn a_head_without_a_rate_limit_field_is_its_status_alone() {
        let read = [
            ("retry-after", "30"),
            ("retry-after-ms", "300"),
            ("x-ms-retry-after-ms", "300"),
            ("ratelimit", "limit=10, remaining=5, reset=3"),
            ("ratelimit-limit", "10"),
            ("ratelimit-remaining", "5"),
            ("ratelimit-reset", "3"),
            ("ratelimit-name", "a"),
            ("ratelimit-resettime", "3"),
            ("x-ratelimit-limit", "10"),
            ("x-ratelimit-remaining", "5"),
            ("x-ratelimit-reset", "3"),
            ("x-ratelimit-reset-after", "3"),
            ("x-ratelimit-used", "5"),
            ("x-ratelimit-bucket", "b"),
            ("x-ratelimit-resource", "core"),
            ("x-ratelimit-scope", "user"),
            ("x-ratelimit-global", "true"),
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-tokens", "60"),
            ("x-rate-limit-limit", "10"),
            ("x-rate-limit-remaining", "5"),
            ("anthropic-ratelimit-requests-limit", "50"),
            ("x-shopify-shop-api-call-limit", "32/40"),
            ("x-retry-in", "98.765432ms"),
            ("x-rate-limit-retry-after-seconds", "58"),
            ("x-ratelimit-retry-after", "58"),
            ("x-ratelimit-replenish-rate", "10"),
            ("x-ratelimit-limit-minute", "5"),
            ("x-hubspot-ratelimit-max", "100"),
        ];
        let now = std::time::SystemTime::now();
        for (name, value) in read {
            let mut headers = HeaderMap::new();
            headers.insert(
                http::HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
            assert!(may_carry_signal(&headers), "{name}");
        }
        let mut other = HeaderMap::new();
        for (name, value) in [
            ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("content-type", "application/json"),
            ("content-length", "12"),
            ("x-request-id", "abc"),
            ("cache-control", "no-cache"),
        ] {
            other.insert(
                http::HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        assert!(!may_carry_signal(&other));
        for status in [200, 403, 429, 503] {
            assert_eq!(
                RateLimitSignal::parse(status, &other, now),
                RateLimitSignal::of_status(status)
            );
        }
    }
}
