//! What a scope's keys learned, kept after their state is dropped.
//!
//! A key's whole state (its bucket, the inference of what the server
//! counts, requests in flight) is dropped once it has been idle for the
//! scope's idle timeout. What it learned (a rate, a burst, the regime) is
//! worth more than the rest and costs much less: it is kept here, by a
//! 64-bit hash of the key, for the scope's
//! [`remember_for`](super::Scope::remember_for), so that a host revisited
//! after an idle spell starts at the pace it had instead of blind (a probe,
//! a cold start, one more burst of 429s). After that age it is learned
//! again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::adapt::{Learned, Regime};

/// One remembered key: 24 bytes beside its 8-byte hash.
#[derive(Clone, Copy, Debug)]
struct Entry {
    per_second: f64,
    /// The rate that was too fast (header-less regime after a throttle),
    /// or 0; negative for a rate learned from headers, `NaN`-free.
    too_fast: f32,
    capacity: u32,
    /// Seconds since the memory's origin when it was learned.
    at: u32,
}

/// A bounded memory of learned limits, keyed by a stable hash of the key.
pub(crate) struct Memory {
    origin: Instant,
    keep_for: Duration,
    max: usize,
    entries: Mutex<HashMap<u64, Entry>>,
}

const FROM_HEADERS: f32 = -1.0;

impl Memory {
    pub(crate) fn new(keep_for: Duration, max: usize) -> Memory {
        Memory {
            origin: Instant::now(),
            keep_for,
            max: max.max(1),
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn seconds(&self, now: Instant) -> u32 {
        let secs = now.saturating_duration_since(self.origin).as_secs();
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    fn fresh(&self, entry: &Entry, now: u32) -> bool {
        u64::from(now.saturating_sub(entry.at)) < self.keep_for.as_secs()
    }

    /// What `key` learned, when it was learned less than the memory's age
    /// ago.
    pub(crate) fn recall(&self, key: &str) -> Option<Learned> {
        if self.keep_for.is_zero() {
            return None;
        }
        let now = self.seconds(Instant::now());
        let entries = crate::sync::lock(&self.entries);
        let entry = entries.get(&hash(key)).filter(|e| self.fresh(e, now))?;
        let regime = if entry.too_fast == FROM_HEADERS {
            Regime::Headers
        } else if entry.too_fast > 0.0 {
            Regime::Throttled {
                too_fast: f64::from(entry.too_fast),
            }
        } else {
            Regime::SlowStart
        };
        Some(Learned {
            per_second: entry.per_second,
            capacity: u64::from(entry.capacity.max(1)),
            regime,
        })
    }

    /// Remember what `key` learned, now.
    pub(crate) fn remember(&self, key: &str, learned: Learned) {
        if self.keep_for.is_zero() {
            return;
        }
        let now = self.seconds(Instant::now());
        let too_fast = match learned.regime {
            Regime::Headers => FROM_HEADERS,
            Regime::SlowStart => 0.0,
            Regime::Throttled { too_fast } => (too_fast as f32).max(f32::MIN_POSITIVE),
        };
        let entry = Entry {
            per_second: learned.per_second,
            too_fast,
            capacity: u32::try_from(learned.capacity).unwrap_or(u32::MAX),
            at: now,
        };
        let mut entries = crate::sync::lock(&self.entries);
        let key = hash(key);
        if entries.len() >= self.max && !entries.contains_key(&key) {
            self.make_room(&mut entries, now);
        }
        entries.insert(key, entry);
    }

    /// Forget what `key` learned.
    pub(crate) fn forget(&self, key: &str) {
        crate::sync::lock(&self.entries).remove(&hash(key));
    }

    /// At the bound: drop what has aged out, and if that is not enough,
    /// an eighth of the keys (at least one), the oldest first.
    fn make_room(&self, entries: &mut HashMap<u64, Entry>, now: u32) {
        entries.retain(|_, e| self.fresh(e, now));
        if entries.len() < self.max {
            return;
        }
        let cut = (entries.len() / 8).max(1);
        let mut ages: Vec<u32> = entries.values().map(|e| e.at).collect();
        let (_, &mut threshold, _) = ages.select_nth_unstable(cut - 1);
        // At least `cut` entries are that old or older: drop exactly `cut`.
        let mut dropped = 0;
        entries.retain(|_, e| {
            let drop = dropped < cut && e.at <= threshold;
            dropped += usize::from(drop);
            !drop
        });
    }

    /// How many keys are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        crate::sync::lock(&self.entries).len()
    }
}

/// The key's stable 64-bit hash (FNV-1a): two keys that collide share a
/// memory, which at 64 bits takes billions of keys to be likely.
fn hash(key: &str) -> u64 {
    super::scope::fnv1a(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learned(per_second: f64, regime: Regime) -> Learned {
        Learned {
            per_second,
            capacity: 3,
            regime,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_recalls_what_it_learned_until_it_ages_out() {
        let memory = Memory::new(Duration::from_secs(600), 10);
        let throttled = learned(4.5, Regime::Throttled { too_fast: 5.0 });
        memory.remember("a", throttled);
        memory.remember("b", learned(20.0, Regime::Headers));
        assert_eq!(memory.recall("a"), Some(throttled));
        assert_eq!(memory.recall("b"), Some(learned(20.0, Regime::Headers)));
        assert_eq!(memory.recall("c"), None);
        tokio::time::advance(Duration::from_secs(599)).await;
        assert!(memory.recall("a").is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(memory.recall("a"), None, "aged out: learned again");
        memory.remember("a", learned(1.0, Regime::SlowStart));
        memory.forget("a");
        assert_eq!(memory.recall("a"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_drops_the_oldest_first() {
        let memory = Memory::new(Duration::from_secs(3_600), 16);
        for i in 0..16 {
            memory.remember(&format!("k{i}"), learned(1.0, Regime::SlowStart));
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        memory.remember("new", learned(1.0, Regime::SlowStart));
        // The oldest eighth (two keys) made room.
        assert_eq!(memory.len(), 15);
        assert_eq!(memory.recall("k0"), None);
        assert_eq!(memory.recall("k1"), None);
        assert!(memory.recall("k2").is_some());
        assert!(memory.recall("new").is_some());
    }

    #[test]
    fn remembering_nothing_costs_nothing() {
        let memory = Memory::new(Duration::ZERO, 16);
        memory.remember("a", learned(1.0, Regime::Headers));
        assert_eq!(memory.recall("a"), None);
        assert_eq!(memory.len(), 0);
    }
}
