//! Explain the rate-limit headers of one HTTP response.
//!
//! Reads one raw HTTP/1.1 response head (status line, header lines, blank
//! line) from standard input and prints exactly one JSON object describing
//! the rate-limit signal it carries:
//!
//! ```text
//! $ printf 'HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30\r\n\r\n' \
//!     | cargo run --example explain_headers
//! {"status":429,"retry_after_ms":30000,"global":false,"limits":[],"ignored":[]}
//! ```
//!
//! Milliseconds are measured from the response's `Date` header when it has
//! one, else from the moment of parsing; `--now <RFC 3339>` fixes that moment
//! for reproducible runs. `curl -si URL | cargo run --example explain_headers`
//! explains a live response. Bad input prints an error on standard error and
//! exits with status 1; a bad command line exits with status 2.

use std::io::Read;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use reqwest_pace::headers::{parse_response_head, parse_rfc3339, RateLimitSignal};
use serde_json::Value;

const USAGE: &str = "usage: explain_headers [--now <RFC 3339 timestamp>] < response-head.txt";

fn main() -> ExitCode {
    let now = match parse_args(std::env::args().skip(1)) {
        Ok(Some(now)) => now,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("explain_headers: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    let mut raw = Vec::new();
    if let Err(err) = std::io::stdin().read_to_end(&mut raw) {
        eprintln!("explain_headers: cannot read standard input: {err}");
        return ExitCode::FAILURE;
    }
    let (status, headers) = match parse_response_head(&raw) {
        Ok(head) => head,
        Err(err) => {
            eprintln!("explain_headers: not an HTTP response head: {err}");
            return ExitCode::FAILURE;
        }
    };

    let signal = RateLimitSignal::parse(status, &headers, now);
    println!("{}", render(&signal));
    ExitCode::SUCCESS
}

/// `Ok(None)` asks for the usage text.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<SystemTime>, String> {
    let mut now = None;
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--now" => args.next().ok_or("--now needs a value")?,
            other => match other.strip_prefix("--now=") {
                Some(value) => value.to_owned(),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        };
        let at = parse_rfc3339(&value)
            .ok_or_else(|| format!("--now: {value:?} is not an RFC 3339 timestamp"))?;
        now = Some(at);
    }
    Ok(Some(now.unwrap_or_else(SystemTime::now)))
}

/// Renders the signal with its keys in the documented order (serde_json's
/// own maps would sort them).
fn render(signal: &RateLimitSignal) -> String {
    let limits: Vec<String> = signal
        .limits
        .iter()
        .map(|limit| {
            format!(
                r#"{{"name":{},"limit":{},"remaining":{},"reset_ms":{},"window_ms":{},"dimension":{},"partition":{}}}"#,
                Value::from(limit.name.as_str()),
                Value::from(limit.limit),
                Value::from(limit.remaining),
                millis(limit.reset),
                millis(limit.window),
                Value::from(limit.dimension.as_str()),
                Value::from(limit.partition.as_deref()),
            )
        })
        .collect();
    let ignored: Vec<Value> = signal
        .ignored
        .iter()
        .map(|note| Value::from(note.to_string()))
        .collect();
    format!(
        r#"{{"status":{},"retry_after_ms":{},"global":{},"limits":[{}],"ignored":{}}}"#,
        signal.status,
        millis(signal.retry_after),
        signal.global,
        limits.join(","),
        Value::from(ignored),
    )
}

/// Whole milliseconds, rounded up so a wait is never shortened; `null` when
/// unknown.
fn millis(duration: Option<Duration>) -> Value {
    match duration {
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            Value::from(u64::try_from(ms).unwrap_or(u64::MAX))
        }
        None => Value::Null,
    }
}
