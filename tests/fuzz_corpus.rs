//! Replays the corpus the `head` fuzz target found (`fuzz/corpus/head`, see
//! `fuzz/`) on stable, so CI checks every input it kept on every run: the
//! head parser and the rate-limit parser never panic on them, and every
//! wait and window they yield stays within the documented caps.
#![cfg(feature = "client")]

include!("../fuzz/check_head.rs");

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
