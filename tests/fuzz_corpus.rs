//! Replays the corpus the `head` fuzz target found (`fuzz/corpus/head`, see
//! `fuzz/`) on stable, so CI checks every input it kept on every run: the
//! head parser and the rate-limit parser never panic on them, and every
//! wait and window they yield stays within the documented caps.
#![cfg(feature = "client")]

use std::time::{Duration, UNIX_EPOCH};

use reqwest_pace::headers::{parse_response_head, RateLimitSignal, MAX_WAIT, MAX_WINDOW};

/// What the fuzz target checks, for one input.
fn check(data: &[u8]) {
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

#[test]
fn the_fuzz_corpus_replays_without_a_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/head");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("the corpus is committed") {
        let path = entry.expect("a corpus entry").path();
        let data = std::fs::read(&path).expect("a corpus file");
        check(&data);
        replayed += 1;
    }
    assert!(replayed >= 5, "only {replayed} inputs in {}", dir.display());
}
