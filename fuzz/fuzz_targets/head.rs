//! A raw response head, as `explain_headers` reads it, through the head
//! parser and then the rate-limit parser, against the local time and a
//! `Date` far off: neither may panic, and every wait and window must stay
//! within the documented caps.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use reqwest_pace::headers::{parse_response_head, RateLimitSignal, MAX_WAIT, MAX_WINDOW};

fuzz_target!(|data: &[u8]| {
    let Ok((status, headers)) = parse_response_head(data) else {
        return;
    };
    for secs in [0, 1_800_000_000, u64::from(u32::MAX)] {
        let signal =
            RateLimitSignal::parse(status, &headers, UNIX_EPOCH + Duration::from_secs(secs));
        assert!(signal.retry_after.is_none_or(|w| w <= MAX_WAIT));
        for limit in &signal.limits {
            assert!(limit.reset.is_none_or(|r| r <= MAX_WAIT));
            assert!(limit.window.is_none_or(|w| w <= MAX_WINDOW));
        }
        let _ = signal.is_throttled();
        let _ = signal.suggested_wait();
    }
});
