//! What each header dialect writes: pure functions of the bucket's figures
//! and the wall-clock instant of the response.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderName, HeaderValue, DATE, RETRY_AFTER};
use http::HeaderMap;

use crate::Error;

/// Which rate-limit headers the server writes.
///
/// In every dialect each response carries a `Date` header written from the
/// same wall-clock instant as any epoch value in it. "Full" below means the
/// bucket holds `burst` tokens again; "one token" means the next request
/// would be admitted. Durations are written in whole seconds rounded **up**,
/// so a client that waits what it is told is never early.
///
/// | Dialect | Every limiter response | 429s also carry |
/// |---|---|---|
/// | [`XRateLimit`](Dialect::XRateLimit) | `X-RateLimit-Limit: <per second>`, `X-RateLimit-Remaining: <tokens left>`, `X-RateLimit-Reset: <seconds until full>` | `Retry-After: <seconds until one token, at least 1>` |
/// | [`GitHub`](Dialect::GitHub) | `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-used` (limit − remaining), `x-ratelimit-reset: <epoch second when full>`, `x-ratelimit-resource: core` (or the [route](super::ServerBuilder::route)'s name) | `retry-after` as above |
/// | [`Ietf`](Dialect::Ietf) | `RateLimit-Policy: "default";q=<per second>;w=1`, `RateLimit: "default";r=<tokens left>;t=<seconds until full>` | `Retry-After` as above |
/// | [`IetfDraft6`](Dialect::IetfDraft6) | `RateLimit-Policy: <limit>;w=<window>`, `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset: <seconds>` | `Retry-After` as above |
/// | [`IetfDraft7`](Dialect::IetfDraft7) | `RateLimit: limit=<limit>, remaining=<left>, reset=<seconds>`, `RateLimit-Policy: <limit>;w=<window>` | `Retry-After` as above |
/// | [`Kong`](Dialect::Kong) | `X-RateLimit-Limit-<Unit>: <limit>`, `X-RateLimit-Remaining-<Unit>` (`Second`, `Minute`, `Hour` or `Day`: the window's), `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset: <seconds>` | `Retry-After` as above |
/// | [`Envoy`](Dialect::Envoy) | `x-ratelimit-limit: <limit>, <limit>;w=<window>`, `x-ratelimit-remaining`, `x-ratelimit-reset: <seconds>` | nothing more |
/// | [`Traefik`](Dialect::Traefik) | nothing | `Retry-After` as above, and `X-Retry-In: <the exact wait as Go prints it>` (`98.765432ms`) |
/// | [`SpringGateway`](Dialect::SpringGateway) | `X-RateLimit-Remaining`, `X-RateLimit-Replenish-Rate: <per second>`, `X-RateLimit-Burst-Capacity: <burst>`, `X-RateLimit-Requested-Tokens: 1` | nothing more |
/// | [`None`](Dialect::None) | nothing | nothing |
///
/// The table speaks of the default token bucket; with another
/// [`ServerAlgorithm`](super::ServerAlgorithm) the limit is its limit per window, `w`
/// its window, and "full" its reset (the window's end, or when the oldest
/// request leaves a moving window). Draft 6 and 7 are what
/// express-rate-limit writes with `standardHeaders: 'draft-6'` and
/// `'draft-7'`. The last four are what widely used gateways write: Kong's
/// rate-limiting plugin (its windows are whole units; another window is
/// written as the next longer unit, which Kong could not be configured
/// with, and [`ResetFormat::Omitted`] leaves out the `RateLimit-*` fields,
/// as older versions and its response-ratelimiting plugin do), Envoy's
/// rate limit filters with `enable_x_ratelimit_headers: DRAFT_VERSION_03`,
/// Traefik's rate limit middleware (a token bucket: no header unless it
/// refuses), and Spring Cloud Gateway's `RedisRateLimiter` (a token
/// bucket; its rate and burst are the algorithm's, whatever it is).
/// [`ResetFormat`] changes how the `X-RateLimit` family writes its reset
/// (or leaves it out), and [`RetryAfterPrecision`] how `Retry-After` is
/// rounded.
///
/// The limit is the server's rate in whole requests per second (rounded to
/// the nearest, at least 1); the bucket itself enforces the exact rate.
/// "Tokens left" is counted after the request: an admitted request has
/// already taken its token.
///
/// Parsed case-insensitively from `x-ratelimit`, `github`, `ietf` or `none`,
/// and displayed the same way:
///
/// ```
/// use reqwest_pace::testing::Dialect;
///
/// let d: Dialect = "GitHub".parse()?;
/// assert_eq!(d, Dialect::GitHub);
/// assert_eq!(d.to_string(), "github");
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset` as a delay in seconds.
    #[default]
    XRateLimit,
    /// GitHub's headers: the reset is an epoch second.
    GitHub,
    /// The IETF `RateLimit` and `RateLimit-Policy` structured fields.
    Ietf,
    /// The IETF draft 06 fields: `RateLimit-Limit`, `-Remaining`, `-Reset`
    /// and an integer `RateLimit-Policy`.
    IetfDraft6,
    /// The IETF draft 07 `RateLimit` dictionary and an integer
    /// `RateLimit-Policy`.
    IetfDraft7,
    /// Kong's rate-limiting plugin: a limit per unit of time.
    Kong,
    /// Envoy's quota policy in `x-ratelimit-limit` (IETF draft 03).
    Envoy,
    /// Traefik: only a refusal speaks, with its exact wait in `X-Retry-In`.
    Traefik,
    /// Spring Cloud Gateway: a token bucket's refill rate and size.
    SpringGateway,
    /// No rate-limit headers and no `Retry-After`: a bare 429.
    None,
}

impl Dialect {
    /// Every dialect, in a fixed order (for running one scenario per
    /// dialect).
    pub const ALL: [Dialect; 10] = [
        Dialect::XRateLimit,
        Dialect::GitHub,
        Dialect::Ietf,
        Dialect::IetfDraft6,
        Dialect::IetfDraft7,
        Dialect::Kong,
        Dialect::Envoy,
        Dialect::Traefik,
        Dialect::SpringGateway,
        Dialect::None,
    ];

    /// The dialect's name, as parsed and displayed.
    pub fn as_str(&self) -> &'static str {
        match self {
            Dialect::XRateLimit => "x-ratelimit",
            Dialect::GitHub => "github",
            Dialect::Ietf => "ietf",
            Dialect::IetfDraft6 => "ietf-draft6",
            Dialect::IetfDraft7 => "ietf-draft7",
            Dialect::Kong => "kong",
            Dialect::Envoy => "envoy",
            Dialect::Traefik => "traefik",
            Dialect::SpringGateway => "spring-gateway",
            Dialect::None => "none",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dialect {
    type Err = Error;

    fn from_str(s: &str) -> Result<Dialect, Error> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown header dialect {s:?}; expected x-ratelimit, github, ietf, ietf-draft6, ietf-draft7, kong, envoy, traefik, spring-gateway or none"
                ))
            })
    }
}

/// How the `X-RateLimit` family ([`Dialect::XRateLimit`],
/// [`Dialect::GitHub`]) writes its reset. The IETF fields always write
/// seconds until the reset, rounded up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResetFormat {
    /// Seconds until the reset, rounded up (the default of
    /// [`Dialect::XRateLimit`]).
    DeltaSeconds,
    /// The epoch second of the reset, rounded up (GitHub;
    /// express-rate-limit's legacy `X-RateLimit-Reset`; the default of
    /// [`Dialect::GitHub`]).
    EpochSeconds,
    /// The epoch of the reset in seconds with three decimals (a moving
    /// window behind flask-limiter).
    EpochFractional,
    /// The epoch millisecond of the reset, rounded up (some Node and Java
    /// limiters write `Date.now()`-style resets).
    EpochMillis,
    /// No reset header at all: only the limit and what remains (for
    /// [`Dialect::Kong`], no `RateLimit-*` fields, which carry its reset).
    Omitted,
}

/// How a refusal's `Retry-After` writes the wait until a request would be
/// admitted ([`ServerBuilder::retry_after_precision`]).
///
/// [`ServerBuilder::retry_after_precision`]: super::ServerBuilder::retry_after_precision
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryAfterPrecision {
    /// Whole seconds rounded up, at least 1: a client that waits what it
    /// is told is never early (the default).
    #[default]
    Ceil,
    /// Whole seconds rounded down, so a wait under a second is written
    /// `0` and a client that waits what it is told is early.
    Floor,
    /// Seconds with three decimals, rounded up to the millisecond
    /// (`Retry-After: 0.250`; not an RFC 9110 value, but servers send it).
    Fractional,
}

impl RetryAfterPrecision {
    /// The `Retry-After` value for a wait of `wait`.
    pub(crate) fn write(self, wait: Duration) -> String {
        match self {
            RetryAfterPrecision::Ceil => ceil_secs(wait).max(1).to_string(),
            RetryAfterPrecision::Floor => wait.as_secs().to_string(),
            RetryAfterPrecision::Fractional => {
                let millis = wait.as_nanos().div_ceil(1_000_000);
                format!("{}.{:03}", millis / 1000, millis % 1000)
            }
        }
    }
}

/// How the headers are written: the dialect, its reset format, and
/// whether refusals carry `Retry-After`, and how precisely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Style {
    pub(crate) dialect: Dialect,
    pub(crate) reset: ResetFormat,
    pub(crate) retry_after: bool,
    pub(crate) precision: RetryAfterPrecision,
}

impl Style {
    /// The dialect's defaults.
    pub(crate) fn of(dialect: Dialect) -> Style {
        Style {
            dialect,
            reset: if dialect == Dialect::GitHub {
                ResetFormat::EpochSeconds
            } else {
                ResetFormat::DeltaSeconds
            },
            // Envoy and Spring Cloud Gateway refuse without a wait.
            retry_after: !matches!(
                dialect,
                Dialect::None | Dialect::Envoy | Dialect::SpringGateway
            ),
            precision: RetryAfterPrecision::Ceil,
        }
    }
}

/// The bucket's figures for one limiter response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    /// The limit written in the headers, per second.
    pub(crate) limit: u64,
    /// Whole tokens left after this request.
    pub(crate) remaining: u64,
    /// Time until the bucket is full again.
    pub(crate) until_full: Duration,
    /// On a refusal, the time until one token is there.
    pub(crate) until_one: Option<Duration>,
    /// The stated window (the IETF `w`).
    pub(crate) window: Duration,
    /// The algorithm's rate per second, whole (at least 1), and its burst
    /// (a window's limit): what a token bucket's size and refill state.
    pub(crate) per_second: u64,
    pub(crate) burst: u64,
}

/// A duration in whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Formats an HTTP-date, clamping instants outside what the format can
/// express (before 1970, after 9999) instead of panicking as `httpdate`
/// would.
pub(crate) fn http_date(at: SystemTime) -> String {
    const LAST: Duration = Duration::from_secs(253_402_300_799);
    let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    httpdate::fmt_http_date(UNIX_EPOCH + since.min(LAST))
}

fn put(headers: &mut HeaderMap, name: &'static str, value: impl ToString) {
    if let Ok(value) = HeaderValue::try_from(value.to_string()) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

/// The IETF draft 6 fields `RateLimit-Limit`, `-Remaining` and `-Reset`
/// (which Kong writes beside its own, without `RateLimit-Policy`).
fn put_draft6(headers: &mut HeaderMap, limit: u64, remaining: u64, reset: impl ToString) {
    put(headers, "ratelimit-limit", limit);
    put(headers, "ratelimit-remaining", remaining);
    put(headers, "ratelimit-reset", reset);
}

/// Writes the `Date` header for the response instant `now`.
pub(crate) fn write_date(headers: &mut HeaderMap, now: SystemTime) {
    if let Ok(value) = HeaderValue::try_from(http_date(now)) {
        headers.insert(DATE, value);
    }
}

/// Writes the style's rate-limit headers (and `Retry-After` on a refusal)
/// for a response leaving at wall-clock `now`.
pub(crate) fn write(
    style: &Style,
    figures: &Figures,
    now: SystemTime,
    resource: &str,
    headers: &mut HeaderMap,
) {
    let Figures {
        limit,
        remaining,
        until_full,
        until_one,
        window,
        per_second,
        burst,
    } = *figures;
    let reset = ceil_secs(until_full);
    let w = ceil_secs(window).max(1);
    let since = now.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let at_reset = since.saturating_add(until_full);
    let x_reset = match style.reset {
        ResetFormat::DeltaSeconds => Some(reset.to_string()),
        ResetFormat::EpochSeconds => Some(ceil_secs(at_reset).to_string()),
        ResetFormat::EpochFractional => Some(format!("{:.3}", at_reset.as_secs_f64())),
        ResetFormat::EpochMillis => Some(at_reset.as_nanos().div_ceil(1_000_000).to_string()),
        ResetFormat::Omitted => None,
    };
    match style.dialect {
        Dialect::XRateLimit => {
            put(headers, "x-ratelimit-limit", limit);
            put(headers, "x-ratelimit-remaining", remaining);
            if let Some(x_reset) = x_reset {
                put(headers, "x-ratelimit-reset", x_reset);
            }
        }
        Dialect::GitHub => {
            put(headers, "x-ratelimit-limit", limit);
            put(headers, "x-ratelimit-remaining", remaining);
            put(headers, "x-ratelimit-used", limit.saturating_sub(remaining));
            if let Some(x_reset) = x_reset {
                put(headers, "x-ratelimit-reset", x_reset);
            }
            put(headers, "x-ratelimit-resource", resource);
        }
        Dialect::Ietf => {
            put(
                headers,
                "ratelimit-policy",
                format!("\"default\";q={limit};w={w}"),
            );
            put(
                headers,
                "ratelimit",
                format!("\"default\";r={remaining};t={reset}"),
            );
        }
        Dialect::IetfDraft6 => {
            put(headers, "ratelimit-policy", format!("{limit};w={w}"));
            put_draft6(headers, limit, remaining, reset);
        }
        Dialect::IetfDraft7 => {
            put(headers, "ratelimit-policy", format!("{limit};w={w}"));
            put(
                headers,
                "ratelimit",
                format!("limit={limit}, remaining={remaining}, reset={reset}"),
            );
        }
        Dialect::Kong => {
            let (limit_name, remaining_name) = kong_unit(window);
            put(headers, limit_name, limit);
            put(headers, remaining_name, remaining);
            if style.reset != ResetFormat::Omitted {
                put_draft6(headers, limit, remaining, reset);
            }
        }
        Dialect::Envoy => {
            put(
                headers,
                "x-ratelimit-limit",
                format!("{limit}, {limit};w={w}"),
            );
            put(headers, "x-ratelimit-remaining", remaining);
            put(headers, "x-ratelimit-reset", reset);
        }
        Dialect::Traefik => {
            if let Some(wait) = until_one {
                put(headers, "x-retry-in", go_duration(wait));
            }
        }
        Dialect::SpringGateway => {
            put(headers, "x-ratelimit-remaining", remaining);
            put(headers, "x-ratelimit-replenish-rate", per_second);
            put(headers, "x-ratelimit-burst-capacity", burst);
            put(headers, "x-ratelimit-requested-tokens", 1);
        }
        Dialect::None => {}
    }
    if let (Some(wait), true) = (until_one, style.retry_after) {
        if let Ok(value) = HeaderValue::try_from(style.precision.write(wait)) {
            headers.insert(RETRY_AFTER, value);
        }
    }
}

/// Kong's fields for a window: that of the unit it is, or of the next
/// longer one (Kong's units are a second, a minute, an hour and a day).
fn kong_unit(window: Duration) -> (&'static str, &'static str) {
    match window.as_secs_f64() {
        w if w <= 1.0 => ("x-ratelimit-limit-second", "x-ratelimit-remaining-second"),
        w if w <= 60.0 => ("x-ratelimit-limit-minute", "x-ratelimit-remaining-minute"),
        w if w <= 3_600.0 => ("x-ratelimit-limit-hour", "x-ratelimit-remaining-hour"),
        _ => ("x-ratelimit-limit-day", "x-ratelimit-remaining-day"),
    }
}

/// A duration as Go's `time.Duration.String` prints it: `0s`, `750ns`,
/// `1.5µs`, `98.765432ms`, `1.5s`, `2m3.5s`, `1h0m0s`.
pub(crate) fn go_duration(d: Duration) -> String {
    // `whole.fraction` of `v` in units of `unit` (a power of ten), the
    // fraction's trailing zeros dropped.
    fn decimal(v: u128, unit: u128) -> String {
        let (whole, rest) = (v / unit, v % unit);
        if rest == 0 {
            return whole.to_string();
        }
        let digits = unit.ilog10() as usize;
        let fraction = format!("{rest:0digits$}");
        format!("{whole}.{}", fraction.trim_end_matches('0'))
    }
    let n = d.as_nanos();
    match n {
        0 => "0s".to_owned(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}\u{b5}s", decimal(n, 1_000)),
        n if n < 1_000_000_000 => format!("{}ms", decimal(n, 1_000_000)),
        n => {
            let secs = n / 1_000_000_000;
            let (hours, minutes) = (secs / 3_600, secs % 3_600 / 60);
            let seconds = decimal(
                n - (hours * 3_600 + minutes * 60) * 1_000_000_000,
                1_000_000_000,
            );
            match (hours, minutes) {
                (0, 0) => format!("{seconds}s"),
                (0, m) => format!("{m}m{seconds}s"),
                (h, m) => format!("{h}h{m}m{seconds}s"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn figures(until_one: Option<Duration>) -> Figures {
        Figures {
            limit: 50,
            remaining: 0,
            until_full: 200 * MS,
            until_one,
            window: Duration::from_secs(1),
            per_second: 50,
            burst: 10,
        }
    }

    fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn names_round_trip() {
        for d in Dialect::ALL {
            assert_eq!(d.to_string().parse::<Dialect>().ok(), Some(d));
        }
        assert_eq!(" IETF ".parse::<Dialect>().ok(), Some(Dialect::Ietf));
        assert!("x-rate-limit".parse::<Dialect>().is_err());
    }

    #[test]
    fn rounding_is_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn retry_after_precisions() {
        let wait = 1_200 * MS + Duration::from_nanos(1);
        assert_eq!(RetryAfterPrecision::Ceil.write(wait), "2");
        assert_eq!(RetryAfterPrecision::Floor.write(wait), "1");
        assert_eq!(RetryAfterPrecision::Fractional.write(wait), "1.201");
        assert_eq!(RetryAfterPrecision::Floor.write(400 * MS), "0");
        assert_eq!(RetryAfterPrecision::Ceil.write(400 * MS), "1");
        assert_eq!(RetryAfterPrecision::Fractional.write(40 * MS), "0.040");
    }

    #[test]
    fn reset_in_epoch_millis_or_omitted() {
        let now = UNIX_EPOCH + Duration::from_millis(1_700_000_000_900);
        let mut style = Style::of(Dialect::XRateLimit);
        style.reset = ResetFormat::EpochMillis;
        let mut h = HeaderMap::new();
        write(&style, &figures(None), now, "core", &mut h);
        assert_eq!(text(&h, "x-ratelimit-reset"), Some("1700000001100"));
        style.reset = ResetFormat::Omitted;
        let mut h = HeaderMap::new();
        write(&style, &figures(None), now, "core", &mut h);
        assert_eq!(text(&h, "x-ratelimit-reset"), None);
        assert_eq!(text(&h, "x-ratelimit-remaining"), Some("0"));
    }

    #[test]
    fn dates_never_panic() {
        assert_eq!(http_date(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
        let early = UNIX_EPOCH - Duration::from_secs(10);
        assert_eq!(http_date(early), "Thu, 01 Jan 1970 00:00:00 GMT");
        let late = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
        assert_eq!(http_date(late), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    #[test]
    fn github_reset_is_the_ceiled_epoch() {
        let now = UNIX_EPOCH + Duration::from_millis(1_700_000_000_900);
        let mut h = HeaderMap::new();
        write(
            &Style::of(Dialect::GitHub),
            &figures(Some(20 * MS)),
            now,
            "core",
            &mut h,
        );
        // 1_700_000_000.9 s + 0.2 s = ...001.1 s, rounded up.
        assert_eq!(text(&h, "x-ratelimit-reset"), Some("1700000002"));
        assert_eq!(text(&h, "x-ratelimit-used"), Some("50"));
        assert_eq!(text(&h, "retry-after"), Some("1"));
    }

    #[test]
    fn ietf_fields() {
        let mut h = HeaderMap::new();
        let f = Figures {
            limit: 5,
            remaining: 3,
            until_full: Duration::from_millis(1500),
            until_one: None,
            window: Duration::from_secs(1),
            per_second: 5,
            burst: 5,
        };
        write(&Style::of(Dialect::Ietf), &f, UNIX_EPOCH, "core", &mut h);
        assert_eq!(text(&h, "ratelimit-policy"), Some("\"default\";q=5;w=1"));
        assert_eq!(text(&h, "ratelimit"), Some("\"default\";r=3;t=2"));
        assert_eq!(h.get("retry-after"), None);
    }

    #[test]
    fn none_writes_nothing() {
        let mut h = HeaderMap::new();
        write(
            &Style::of(Dialect::None),
            &figures(Some(20 * MS)),
            UNIX_EPOCH,
            "core",
            &mut h,
        );
        assert!(h.is_empty());
    }

    #[test]
    fn go_prints_durations_so() {
        let ns = Duration::from_nanos;
        for (d, printed) in [
            (Duration::ZERO, "0s"),
            (ns(750), "750ns"),
            (ns(1_500), "1.5\u{b5}s"),
            (ns(98_765_432), "98.765432ms"),
            (20 * MS, "20ms"),
            (1500 * MS, "1.5s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_millis(123_500), "2m3.5s"),
            (Duration::from_secs(3_600), "1h0m0s"),
        ] {
            assert_eq!(go_duration(d), printed, "{d:?}");
        }
    }

    #[test]
    fn gateways_fields() {
        let mut f = figures(Some(98 * MS));
        f.window = Duration::from_secs(60);
        let write_as = |dialect, f: &Figures| {
            let mut h = HeaderMap::new();
            write(&Style::of(dialect), f, UNIX_EPOCH, "core", &mut h);
            h
        };
        let kong = write_as(Dialect::Kong, &f);
        assert_eq!(text(&kong, "x-ratelimit-limit-minute"), Some("50"));
        assert_eq!(text(&kong, "x-ratelimit-remaining-minute"), Some("0"));
        assert_eq!(text(&kong, "ratelimit-reset"), Some("1"));
        assert_eq!(text(&kong, "retry-after"), Some("1"));
        let envoy = write_as(Dialect::Envoy, &f);
        assert_eq!(text(&envoy, "x-ratelimit-limit"), Some("50, 50;w=60"));
        assert_eq!(envoy.get("retry-after"), None);
        let traefik = write_as(Dialect::Traefik, &f);
        assert_eq!(text(&traefik, "x-retry-in"), Some("98ms"));
        assert_eq!(text(&traefik, "retry-after"), Some("1"));
        assert_eq!(write_as(Dialect::Traefik, &figures(None)).len(), 0);
        let spring = write_as(Dialect::SpringGateway, &f);
        assert_eq!(text(&spring, "x-ratelimit-replenish-rate"), Some("50"));
        assert_eq!(text(&spring, "x-ratelimit-burst-capacity"), Some("10"));
        assert_eq!(text(&spring, "x-ratelimit-requested-tokens"), Some("1"));
        assert_eq!(spring.get("retry-after"), None);
    }
}
