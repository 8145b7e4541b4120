//! The small value grammars every dialect shares: decimal numbers, Go-style
//! durations (OpenAI) and RFC 3339 timestamps (Anthropic).
//!
//! Each parser is strict and total: it accepts exactly its grammar, returns a
//! short human reason otherwise, and never panics or overflows. The reasons
//! end up in `RateLimitSignal::ignored`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A non-negative decimal number as sent: `42`, `598.0`, `64.57`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Number {
    /// The integer part.
    pub(crate) int: u64,
    /// The fractional part in billionths (digits past the ninth are dropped).
    pub(crate) nanos: u32,
}

const NANOS_PER_SEC: u32 = 1_000_000_000;

impl Number {
    /// The number read as seconds.
    pub(crate) fn as_secs(self) -> Duration {
        Duration::new(self.int, self.nanos)
    }

    /// The number read as milliseconds.
    pub(crate) fn as_millis(self) -> Duration {
        Duration::from_millis(self.int) + Duration::from_nanos(u64::from(self.nanos) / 1_000)
    }
}

/// Reads `1*DIGIT [ "." 1*DIGIT ]`, with surrounding whitespace allowed.
///
/// Rejects signs, exponents, `NaN`, `inf` and anything else `f64::from_str`
/// would have been lenient about.
pub(crate) fn parse_number(text: &str) -> Result<Number, &'static str> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty value");
    }
    if let Some(rest) = text.strip_prefix('-') {
        return match parse_number(rest) {
            Ok(n) if n.int == 0 && n.nanos == 0 => Ok(n),
            Ok(_) => Err("negative value"),
            Err(_) => Err("not a number"),
        };
    }
    let (int_text, frac_text) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text, None),
    };
    if int_text.is_empty() || !int_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a number");
    }
    let mut int: u64 = 0;
    for b in int_text.bytes() {
        int = int
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or("number too large")?;
    }
    let mut nanos: u32 = 0;
    if let Some(frac) = frac_text {
        if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err("not a number");
        }
        let mut scale = NANOS_PER_SEC / 10;
        for b in frac.bytes().take(9) {
            nanos += u32::from(b - b'0') * scale;
            scale /= 10;
        }
    }
    Ok(Number { int, nanos })
}

/// Reads a count (a limit, remaining or used), flooring fractions.
pub(crate) fn parse_count(text: &str) -> Result<u64, &'static str> {
    parse_number(text).map(|n| n.int)
}

/// Reads a Go `time.Duration` string as OpenAI sends it: `6m0s`, `1s`,
/// `20ms`, `1h2m3.5s`, `0s`.
///
/// Units are `h`, `m`, `s`, `ms`, `us` and `ns`; each component is a
/// non-negative decimal. The sum saturates rather than overflows; the caller
/// clamps it.
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, &'static str> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty value");
    }
    if text.starts_with('-') {
        return Err("negative duration");
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let bytes = text.as_bytes();
    let mut total: u128 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        if start == i {
            return Err("not a duration (expected a form such as 6m0s, 1s or 20ms)");
        }
        let number = parse_number(&text[start..i])
            .map_err(|_| "not a duration (expected a form such as 6m0s, 1s or 20ms)")?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let nanos_per_unit: u128 = match &text[unit_start..i] {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" => 1_000,
            "ns" => 1,
            "" => return Err("duration component without a unit"),
            _ => return Err("unknown duration unit"),
        };
        let whole = u128::from(number.int) * nanos_per_unit;
        let frac = u128::from(number.nanos) * nanos_per_unit / u128::from(NANOS_PER_SEC);
        total = total.saturating_add(whole).saturating_add(frac);
    }
    Ok(duration_from_nanos(total))
}

fn duration_from_nanos(nanos: u128) -> Duration {
    let per_sec = u128::from(NANOS_PER_SEC);
    let secs = u64::try_from(nanos / per_sec).unwrap_or(u64::MAX);
    // The remainder is below one billion, so it fits.
    let sub = u32::try_from(nanos % per_sec).unwrap_or(0);
    Duration::new(secs, sub)
}

/// Reads an RFC 3339 timestamp (`2024-06-20T12:34:56Z`,
/// `2024-06-20T14:34:56.250+02:00`) into a [`SystemTime`].
///
/// Strict: a four-digit year, two-digit fields, a real calendar date, `T`
/// (or `t`, or a space as RFC 3339 §5.6 permits), optional fractional
/// seconds, and `Z` or a `±HH:MM` offset. A leap second (`:60`) is read as
/// the first second of the next minute. Returns `None` for anything else.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use reqwest_pace::headers::parse_rfc3339;
///
/// assert_eq!(
///     parse_rfc3339("2024-06-20T12:34:56.5Z"),
///     Some(UNIX_EPOCH + Duration::from_millis(1_718_886_896_500)),
/// );
/// assert_eq!(parse_rfc3339("2024-02-30T00:00:00Z"), None);
/// ```
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.trim().as_bytes();
    if b.len() < 20 {
        return None;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(range)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(part.iter().fold(0, |acc, d| acc * 10 + u32::from(d - b'0')))
    };
    let year = digits(0..4)?;
    let month = digits(5..7)?;
    let day = digits(8..10)?;
    let hour = digits(11..13)?;
    let minute = digits(14..16)?;
    let second = digits(17..19)?;
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }

    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        let mut scale = NANOS_PER_SEC / 10;
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            if i - start < 9 {
                nanos += u32::from(d - b'0') * scale;
                scale /= 10;
            }
            i += 1;
        }
        if i == start {
            return None;
        }
    }

    let offset_secs: i64 = match b.get(i..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let field = [*h1, *h2, *m1, *m2];
            if !field.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let oh = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let om = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if oh > 23 || om > 59 {
                return None;
            }
            let magnitude = oh * 3600 + om * 60;
            if *sign == b'+' {
                magnitude
            } else {
                -magnitude
            }
        }
        _ => return None,
    };

    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second)
        - offset_secs;
    if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(secs.unsigned_abs(), nanos))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(Duration::from_nanos(u64::from(nanos)))
    }
}

fn is_leap(year: u32) -> bool {
    (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        _ => 28,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Standard base64 with padding, used to print IETF partition keys as the
/// server sent them.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b0 = chunk[0];
        let b1 = chunk.get(1).copied().unwrap_or(0);
        let b2 = chunk.get(2).copied().unwrap_or(0);
        let n = (u32::from(b0) << 16) | (u32::from(b1) << 8) | u32::from(b2);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 0x3f) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(int: u64, nanos: u32) -> Number {
        Number { int, nanos }
    }

    #[test]
    fn numbers_are_strict() {
        assert_eq!(parse_number("42"), Ok(n(42, 0)));
        assert_eq!(parse_number(" 598.0 "), Ok(n(598, 0)));
        assert_eq!(parse_number("64.57"), Ok(n(64, 570_000_000)));
        assert_eq!(parse_number("0.0000000019"), Ok(n(0, 1)));
        assert_eq!(parse_number("-0"), Ok(n(0, 0)));
        assert_eq!(parse_number("-5"), Err("negative value"));
        assert_eq!(parse_number("-x"), Err("not a number"));
        for bad in ["NaN", "inf", "+5", "1e3", ".5", "5.", "0x10", "1 2", "½"] {
            assert_eq!(parse_number(bad), Err("not a number"), "{bad}");
        }
        assert_eq!(parse_number(""), Err("empty value"));
        assert_eq!(parse_number("18446744073709551615"), Ok(n(u64::MAX, 0)));
        assert_eq!(
            parse_number("18446744073709551616"),
            Err("number too large")
        );
    }

    #[test]
    fn number_units() {
        assert_eq!(n(1, 500_000_000).as_secs(), Duration::from_millis(1500));
        assert_eq!(n(1500, 0).as_millis(), Duration::from_millis(1500));
        assert_eq!(n(2, 500_000_000).as_millis(), Duration::from_micros(2500));
        assert_eq!(
            n(u64::MAX, 999_999_999).as_millis(),
            Duration::from_millis(u64::MAX) + Duration::from_nanos(999_999)
        );
    }

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_go_duration("6m0s"), Ok(ms(360_000)));
        assert_eq!(parse_go_duration("1s"), Ok(ms(1000)));
        assert_eq!(parse_go_duration("20ms"), Ok(ms(20)));
        assert_eq!(parse_go_duration("1h2m3.5s"), Ok(ms(3_723_500)));
        assert_eq!(parse_go_duration("2m59.56s"), Ok(ms(179_560)));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("1.5us"), Ok(Duration::from_nanos(1500)));
        assert_eq!(parse_go_duration("-1s"), Err("negative duration"));
        assert_eq!(
            parse_go_duration("5"),
            Err("duration component without a unit")
        );
        assert_eq!(parse_go_duration("5d"), Err("unknown duration unit"));
        assert!(parse_go_duration("s").is_err());
        assert!(parse_go_duration("1..2s").is_err());
        assert_eq!(
            parse_go_duration("99999999999999999999h"),
            Err("not a duration (expected a form such as 6m0s, 1s or 20ms)")
        );
        let huge = parse_go_duration("18446744073709551615h18446744073709551615h");
        assert!(huge.is_ok_and(|d| d.as_secs() == u64::MAX));
    }

    #[test]
    fn rfc3339() {
        let at = |s| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(at(0)));
        assert_eq!(
            parse_rfc3339("2024-06-20T12:34:56Z"),
            Some(at(1_718_886_896))
        );
        assert_eq!(
            parse_rfc3339("2024-06-20t12:34:56z"),
            Some(at(1_718_886_896))
        );
        assert_eq!(
            parse_rfc3339("2024-06-20 12:34:56Z"),
            Some(at(1_718_886_896))
        );
        assert_eq!(
            parse_rfc3339("2024-06-20T14:34:56+02:00"),
            Some(at(1_718_886_896))
        );
        assert_eq!(
            parse_rfc3339("2024-06-20T07:04:56-05:30"),
            Some(at(1_718_886_896))
        );
        assert_eq!(
            parse_rfc3339("2024-06-20T12:34:56.123456789123Z"),
            Some(at(1_718_886_896) + Duration::from_nanos(123_456_789))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z"),
            Some(at(1_709_164_800))
        );
        assert_eq!(
            parse_rfc3339("2016-12-31T23:59:60Z"),
            Some(at(1_483_228_800))
        );
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59.5Z"),
            UNIX_EPOCH.checked_sub(Duration::from_millis(500))
        );
        for bad in [
            "",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-06-20T24:00:00Z",
            "2024-06-20T12:34:56",
            "2024-06-20T12:34:56.Z",
            "2024-06-20T12:34:56+0200",
            "2024-06-20T12:34:56+24:00",
            "2024-6-20T12:34:56Z",
            "2024-06-20X12:34:56Z",
            "2024-06-20T12:34:56Zjunk",
            "+024-06-20T12:34:56Z",
            "Thu, 20 Jun 2024 12:34:56 GMT",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
