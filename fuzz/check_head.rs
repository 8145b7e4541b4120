// What the `head` fuzz target checks of one input, shared with its replay on
// stable (`tests/fuzz_corpus.rs`) by `include!`: the head parser and the
// rate-limit parser never panic, and every wait and window they yield stays
// within its documented cap, against the local time and a `Date` far off.

fn check(data: &[u8]) {
    use std::time::{Duration, UNIX_EPOCH};

    use reqwest_pace::headers::{parse_response_head, RateLimitSignal, MAX_WAIT, MAX_WINDOW};

    let Ok((status, headers)) = parse_response_head(data) else {
        return;
    };
    for secs in [0, 1_800_000_000, u64::from(u32::MAX)] {
        let at = UNIX_EPOCH + Duration::from_secs(secs);
        let signal = RateLimitSignal::parse(status, &headers, at);
        assert!(signal.retry_after.is_none_or(|w| w <= MAX_WAIT));
        for limit in &signal.limits {
            assert!(limit.reset.is_none_or(|r| r <= MAX_WAIT));
            assert!(limit.window.is_none_or(|w| w <= MAX_WINDOW));
        }
        let _ = signal.is_throttled();
        let _ = signal.suggested_wait();
    }
}
