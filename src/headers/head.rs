//! Reading a raw HTTP/1.1 response head, for tools that get one as text
//! (the `explain_headers` example, logs, `curl -i` output).

use http::{HeaderMap, HeaderName, HeaderValue};

/// Why a text is not an HTTP response head.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeadError {
    /// The input holds nothing but whitespace.
    #[error("the input is empty; expected a status line such as `HTTP/1.1 429 Too Many Requests`")]
    Empty,
    /// The first line is not `HTTP/<version> <3-digit status> [reason]`.
    #[error("line 1 is not an HTTP status line (expected `HTTP/1.1 <status> <reason>`): {line:?}")]
    #[non_exhaustive]
    StatusLine {
        /// The offending line (shortened when long).
        line: String,
    },
    /// A header line cannot be read.
    #[error("line {line}: {reason}")]
    #[non_exhaustive]
    HeaderLine {
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// Longest excerpt of a bad line quoted in an error.
const EXCERPT: usize = 80;

/// Reads an HTTP/1.1 response head: a status line, header lines, and a blank
/// line (or the end of the input). Anything after the blank line (a body) is
/// ignored.
///
/// Lines may end in CRLF or LF. Obsolete line folding (a line starting with
/// a space or tab) is joined to the previous header with one space, as
/// RFC 9112 §5.2 asks of a user agent. Header values may carry non-ASCII
/// bytes; they are kept, so that [`RateLimitSignal::parse`] can report them.
/// The status line also accepts `HTTP/2`, as `curl -i` prints it.
///
/// [`RateLimitSignal::parse`]: super::RateLimitSignal::parse
///
/// ```
/// use reqwest_pace::headers::parse_response_head;
///
/// let (status, headers) =
///     parse_response_head("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30\r\n\r\n")?;
/// assert_eq!(status, 429);
/// assert_eq!(headers["retry-after"], "30");
/// # Ok::<(), reqwest_pace::headers::HeadError>(())
/// ```
pub fn parse_response_head(
    raw: &(impl AsRef<[u8]> + ?Sized),
) -> Result<(u16, HeaderMap), HeadError> {
    let raw = raw.as_ref();
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Err(HeadError::Empty);
    }
    let mut lines = raw
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));

    let status_line = lines.next().unwrap_or_default();
    let status = status(status_line).ok_or_else(|| HeadError::StatusLine {
        line: excerpt(status_line),
    })?;

    let mut headers = HeaderMap::new();
    let mut last: Option<(HeaderName, Vec<u8>, usize)> = None;
    for (index, line) in lines.enumerate() {
        let number = index + 2;
        if line.is_empty() {
            break;
        }
        if matches!(line[0], b' ' | b'\t') {
            let Some((_, value, _)) = last.as_mut() else {
                return Err(HeadError::HeaderLine {
                    line: number,
                    reason: "continuation line before any header".to_owned(),
                });
            };
            value.push(b' ');
            value.extend_from_slice(trim(line));
            continue;
        }
        if let Some((name, value, start)) = last.take() {
            append(&mut headers, name, &value, start)?;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(HeadError::HeaderLine {
                line: number,
                reason: format!("no `:` in header line {:?}", excerpt(line)),
            });
        };
        let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| HeadError::HeaderLine {
            line: number,
            reason: format!("invalid header name {:?}", excerpt(&line[..colon])),
        })?;
        last = Some((name, trim(&line[colon + 1..]).to_vec(), number));
    }
    if let Some((name, value, start)) = last.take() {
        append(&mut headers, name, &value, start)?;
    }
    Ok((status, headers))
}

fn append(
    headers: &mut HeaderMap,
    name: HeaderName,
    value: &[u8],
    line: usize,
) -> Result<(), HeadError> {
    let value = HeaderValue::from_bytes(value).map_err(|_| HeadError::HeaderLine {
        line,
        reason: format!("header {name} has a control character in its value"),
    })?;
    headers.append(name, value);
    Ok(())
}

/// `HTTP/1.1 429 Too Many Requests` → 429. The reason phrase is optional.
fn status(line: &[u8]) -> Option<u16> {
    let rest = line.strip_prefix(b"HTTP/")?;
    let space = rest.iter().position(|&b| b == b' ')?;
    let version = &rest[..space];
    let version_ok = match version {
        [major] => major.is_ascii_digit(),
        [major, b'.', minor] => major.is_ascii_digit() && minor.is_ascii_digit(),
        _ => false,
    };
    if !version_ok {
        return None;
    }
    let rest = &rest[space + 1..];
    let (code, after) = rest.split_at_checked(3)?;
    if !code.iter().all(u8::is_ascii_digit) || !(after.is_empty() || after[0] == b' ') {
        return None;
    }
    let code = code
        .iter()
        .fold(0u16, |acc, d| acc * 10 + u16::from(d - b'0'));
    (100..=599).contains(&code).then_some(code)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |i| i + 1);
    &bytes[start..end.max(start)]
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() > EXCERPT {
        let short: String = text.chars().take(EXCERPT).collect();
        format!("{short}…")
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert_eq!(status(b"HTTP/1.1 429 Too Many Requests"), Some(429));
        assert_eq!(status(b"HTTP/1.0 200"), Some(200));
        assert_eq!(status(b"HTTP/2 503 "), Some(503));
        assert_eq!(status(b"HTTP/1.1 42"), None);
        assert_eq!(status(b"HTTP/1.1 4290"), None);
        assert_eq!(status(b"HTTP/1.1 099 x"), None);
        assert_eq!(status(b"HTTP/1.1 600 x"), None);
        assert_eq!(status(b"HTTP/1.12 200 OK"), None);
        assert_eq!(status(b"GET / HTTP/1.1"), None);
        assert_eq!(status(b"HTTP/1.1  200 OK"), None);
    }

    #[test]
    fn trims_optional_whitespace() {
        assert_eq!(trim(b" \t30 \t"), b"30");
        assert_eq!(trim(b"   "), b"");
        assert_eq!(trim(b""), b"");
    }
}
