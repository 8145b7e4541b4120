//! Many limiters, one per key, created on first use and dropped when idle.
//!
//! Each shard is a [`hashbrown::HashTable`] located by one hash of the key,
//! which also picks the shard, so a decision hashes the key once. What an
//! entry holds depends on how the map was made:
//!
//! - A map of token buckets made from one template
//!   ([`KeyedLimiter::token_buckets`]) keeps each key **compact**: the key
//!   and one instant, when its bucket is full again, decided in place under
//!   the shard's lock with the GCRA step of [`Gcra`]. The full
//!   [`TokenBucket`], with its own lock and waiting queue, is made only when
//!   a caller has to wait or asks for it ([`KeyedLimiter::get`]), and the
//!   sweep folds it back once nobody holds it and it runs on the template
//!   again. An idle key then costs its key and 16 bytes, not a separate
//!   allocation, and a decision touches one cache line of the table.
//! - Any other map holds an `Arc` of its limiter per key.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hashbrown::{hash_table, HashTable};
use tokio::time::Instant;

use super::algorithm::{Algorithm, Nanos};
use super::gcra::{admit_compact, Gcra};
use super::{Rate, RateLimiter, TokenBucket};
use crate::sync::lock;
use crate::Error;

/// What a keyed map needs to know to drop an entry: whether it is back in
/// the state a freshly made one would be in, so forgetting it changes
/// nothing.
pub trait Evictable {
    /// True when dropping this value and later making a fresh one from the
    /// template would behave the same.
    fn is_idle(&self) -> bool;
}

impl<A: Algorithm> Evictable for RateLimiter<A> {
    fn is_idle(&self) -> bool {
        RateLimiter::is_idle(self)
    }
}

const DEFAULT_MAX_KEYS: usize = 100_000;
const DEFAULT_IDLE: Duration = Duration::from_secs(60);

/// A map from key (host, route, credential: any `Hash + Eq` key) to its own
/// limiter, created lazily from a template.
///
/// - **Sharded.** Keys are spread over independently locked shards, so
///   callers on different keys rarely contend; a lookup holds one shard's
///   lock for a hash-table probe, never across an `await`.
/// - **Compact token buckets.** A map made by
///   [`token_buckets`](Self::token_buckets) keeps each key as one instant
///   (16 bytes besides the key) until a caller has to wait on it; see the
///   module source for the layout.
/// - **Idle keys are evicted automatically.** An entry that nobody holds,
///   that is back in its fresh state (a full bucket, nobody waiting) and that
///   has been so for the idle timeout (60 s by default) is dropped by a
///   sweep of its shard, run lazily at most once per idle timeout from the
///   map's own calls. No background task is needed.
/// - **Hard bound.** At most `max_keys` entries (100 000 by default) live at
///   once, so an unbounded key space (a scraper meeting millions of hosts)
///   cannot grow memory without limit. When a shard is full, its idle
///   entries go first; if none is idle, an eighth of the shard is dropped:
///   the entries least recently used (for a compact bucket, the one that is
///   full again soonest, so the least state is lost), preferring entries
///   nobody holds. A dropped busy entry's state is forgotten: its key starts
///   afresh from the template, which can admit a burst early. Raise the
///   bound if that matters more than memory.
///
/// ```
/// use reqwest_pace::{KeyedLimiter, Rate};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), reqwest_pace::Error> {
/// let per_host = KeyedLimiter::token_buckets(Rate::per_second(5)?, 1)?.with_max_keys(10_000);
/// per_host.acquire(&"api.example.com", 1).await?;
/// per_host.acquire(&"cdn.example.com", 1).await?; // its own bucket: no wait
/// assert_eq!(per_host.len(), 2);
/// # Ok(())
/// # }
/// ```
pub struct KeyedLimiter<K, L = TokenBucket> {
    shards: Box<[Mutex<Shard<K, L>>]>,
    factory: Box<dyn Fn(&K) -> L + Send + Sync>,
    /// Set for maps of template token buckets: entries may be compact.
    compact: Option<Compact<L>>,
    hasher: RandomState,
    max_per_shard: usize,
    idle: Nanos,
    origin: Instant,
}

struct Shard<K, L> {
    table: HashTable<Entry<K, L>>,
    last_sweep: Nanos,
}

struct Entry<K, L> {
    key: K,
    /// Nanoseconds since the map's origin: for a compact entry, when its
    /// bucket is full again (GCRA's `full_at`); for a live one, when it was
    /// last used. One field serves both so a compact entry stays small.
    stamp: Nanos,
    /// The full limiter, once a caller needed one.
    live: Option<Arc<L>>,
}

/// The template of a map of token buckets, and how to move one key between
/// the compact form and a full limiter.
struct Compact<L> {
    rate: Rate,
    capacity: u64,
    interval: Nanos,
    /// `capacity × interval`: how long an empty bucket takes to fill.
    span: Nanos,
    /// A full limiter whose bucket is full again at `full_at`.
    expand: fn(&Compact<L>, Nanos, Instant) -> L,
    /// A limiter's `full_at`, when nothing else about it differs from the
    /// template (nobody queued, no block in force, the template's rate and
    /// capacity) and its instants share the map's origin.
    shrink: fn(&Compact<L>, &L, Instant, Nanos) -> Option<Nanos>,
}

impl<K, L> Entry<K, L> {
    fn unheld(&self) -> bool {
        self.live.as_ref().is_none_or(|l| Arc::strong_count(l) == 1)
    }
}

impl<K, L: Evictable> Entry<K, L> {
    /// Back in its fresh state at `now`, and nobody holds it.
    fn evictable(&self, now: Nanos) -> bool {
        match &self.live {
            None => self.stamp <= now,
            Some(l) => Arc::strong_count(l) == 1 && l.is_idle(),
        }
    }

    /// Evictable, and has been so (compact) or unused (live) for `idle`.
    fn expired(&self, now: Nanos, idle: Nanos) -> bool {
        now.saturating_sub(self.stamp) >= idle && self.evictable(now)
    }
}

fn default_shards() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cores * 4).next_power_of_two().clamp(4, 64)
}

fn new_shards<K, L>(count: usize) -> Box<[Mutex<Shard<K, L>>]> {
    (0..count)
        .map(|_| {
            Mutex::new(Shard {
                table: HashTable::new(),
                last_sweep: 0,
            })
        })
        .collect()
}

impl<K> KeyedLimiter<K, TokenBucket>
where
    K: Hash + Eq + Clone,
{
    /// One full token bucket of `capacity` at `rate` per key, each key kept
    /// compact until a caller has to wait on it.
    ///
    /// Fails on a zero capacity, checked once here.
    pub fn token_buckets(rate: Rate, capacity: u64) -> Result<Self, Error> {
        TokenBucket::new(rate, capacity)?;
        let mut map = Self::new(move |_| {
            RateLimiter::from_algorithm(super::Gcra::new(rate, capacity, capacity))
        });
        // A bucket whose span does not fit 584 years of nanoseconds stays a
        // full limiter per key (its arithmetic is 128-bit).
        map.compact = rate
            .interval_nanos()
            .checked_mul(capacity)
            .map(|span| Compact {
                rate,
                capacity,
                interval: rate.interval_nanos(),
                span,
                expand: |c, full_at, origin| {
                    RateLimiter::from_algorithm_at(
                        Gcra::with_full_at(c.rate, c.capacity, full_at),
                        origin,
                    )
                },
                shrink: |c, bucket, origin, now| {
                    bucket.compact_state(c.interval, c.capacity, origin, now)
                },
            });
        Ok(map)
    }
}

impl<K, L> KeyedLimiter<K, L>
where
    K: Hash + Eq + Clone,
    L: Evictable,
{
    /// A keyed map whose entries are made by `factory` on first use.
    pub fn new(factory: impl Fn(&K) -> L + Send + Sync + 'static) -> Self {
        let shards = default_shards();
        KeyedLimiter {
            shards: new_shards(shards),
            factory: Box::new(factory),
            compact: None,
            hasher: RandomState::new(),
            max_per_shard: DEFAULT_MAX_KEYS.div_ceil(shards),
            idle: nanos(DEFAULT_IDLE),
            origin: Instant::now(),
        }
    }

    /// Keep at most about `max_keys` entries (rounded up to a multiple of the
    /// shard count; at least one per shard).
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.max_per_shard = max_keys.div_ceil(self.shards.len()).max(1);
        self
    }

    /// Spread keys over `shards` independently locked shards (at least one;
    /// by default four per core, rounded to a power of two, 4 to 64). Call
    /// before [`with_max_keys`](Self::with_max_keys), which divides its bound
    /// among the shards.
    pub fn with_shards(mut self, shards: usize) -> Self {
        let max_keys = self.max_keys();
        let shards = shards.max(1);
        self.shards = new_shards(shards);
        self.max_per_shard = max_keys.div_ceil(shards).max(1);
        self
    }

    /// Drop idle entries that have not been used for `idle`.
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = nanos(idle);
        self
    }

    /// The most entries this map will hold.
    pub fn max_keys(&self) -> usize {
        self.max_per_shard * self.shards.len()
    }

    fn nanos(&self, at: Instant) -> Nanos {
        nanos(at.saturating_duration_since(self.origin))
    }

    fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Lock the shard of `hash`, sweeping it first when a sweep is due.
    fn shard(&self, hash: u64, now: Nanos) -> MutexGuard<'_, Shard<K, L>> {
        // The top 32 bits, reduced by a multiply (any shard count): the
        // table inside uses the low bits and the top seven, and a shard's
        // keys then still differ in both.
        let index = ((hash >> 32) * self.shards.len() as u64) >> 32;
        let mut shard = lock(&self.shards[index as usize]);
        if now.saturating_sub(shard.last_sweep) >= self.idle {
            shard.last_sweep = now;
            self.sweep_shard(&mut shard, now, |entry| entry.expired(now, self.idle));
        }
        shard
    }

    /// Drop the entries `drop` picks; fold the other unheld live ones back
    /// into the compact form where they can be.
    fn sweep_shard(
        &self,
        shard: &mut Shard<K, L>,
        now: Nanos,
        drop: impl Fn(&Entry<K, L>) -> bool,
    ) -> usize {
        let before = shard.table.len();
        shard.table.retain(|entry| {
            if drop(entry) {
                return false;
            }
            if let (Some(compact), Some(live)) = (&self.compact, &entry.live) {
                if Arc::strong_count(live) == 1 {
                    if let Some(full_at) = (compact.shrink)(compact, live, self.origin, now) {
                        entry.live = None;
                        entry.stamp = full_at;
                    }
                }
            }
            true
        });
        before - shard.table.len()
    }

    /// The entry for `key`, inserted (after making room) when there is
    /// none: compact and full since the origin, or with no limiter yet in a
    /// map that has no compact form (the caller makes it).
    fn entry<'s>(
        &self,
        shard: &'s mut Shard<K, L>,
        hash: u64,
        key: &K,
        now: Nanos,
    ) -> &'s mut Entry<K, L> {
        let eq = |e: &Entry<K, L>| e.key == *key;
        if shard.table.len() >= self.max_per_shard && shard.table.find(hash, eq).is_none() {
            self.make_room(shard, now);
        }
        match shard
            .table
            .entry(hash, eq, |e| self.hasher.hash_one(&e.key))
        {
            hash_table::Entry::Occupied(entry) => entry.into_mut(),
            hash_table::Entry::Vacant(vacant) => vacant
                .insert(Entry {
                    key: key.clone(),
                    stamp: 0,
                    live: None,
                })
                .into_mut(),
        }
    }

    fn make_room(&self, shard: &mut Shard<K, L>, now: Nanos) {
        self.sweep_shard(shard, now, |entry| entry.evictable(now));
        let len = shard.table.len();
        if len < self.max_per_shard {
            return;
        }
        // Nothing idle: drop the least recently used eighth, so the next
        // inserts do not each pay for a scan. Entries nobody holds go first:
        // a held one is in use (a waiter, a Retry-After being waited out),
        // and forgetting its state would let its key burst afresh.
        let drop_count = (len / 8).max(1);
        let only_unheld = shard.table.iter().filter(|e| e.unheld()).count() >= drop_count;
        let candidate = |entry: &Entry<K, L>| !only_unheld || entry.unheld();
        let mut ages: Vec<Nanos> = shard
            .table
            .iter()
            .filter(|e| candidate(e))
            .map(|e| e.stamp)
            .collect();
        let (_, cutoff, _) = ages.select_nth_unstable(drop_count - 1);
        let cutoff = *cutoff;
        let mut left = drop_count;
        shard.table.retain(|entry| {
            if left > 0 && candidate(entry) && entry.stamp <= cutoff {
                left -= 1;
                false
            } else {
                true
            }
        });
    }

    /// The full limiter of `entry`, made (from its compact form, or by the
    /// factory) if need be; marks the entry used at `now`.
    fn live(&self, entry: &mut Entry<K, L>, now: Nanos) -> Arc<L> {
        let full_at = std::mem::replace(&mut entry.stamp, now);
        let live = entry.live.get_or_insert_with(|| {
            Arc::new(match &self.compact {
                Some(compact) => (compact.expand)(compact, full_at, self.origin),
                None => (self.factory)(&entry.key),
            })
        });
        Arc::clone(live)
    }

    /// The entry for `key`, made from the template if there is none.
    ///
    /// In a map of token buckets this turns a compact entry into a full
    /// limiter, which stays one while the returned handle is held.
    pub fn get(&self, key: &K) -> Arc<L> {
        let now = self.nanos(Instant::now());
        let hash = self.hash(key);
        let mut shard = self.shard(hash, now);
        let entry = self.entry(&mut shard, hash, key, now);
        self.live(entry, now)
    }

    /// The entry for `key` if there is one; never makes one (but, like
    /// [`get`](Self::get), makes a compact entry's full limiter).
    pub fn peek(&self, key: &K) -> Option<Arc<L>> {
        let now = self.nanos(Instant::now());
        let hash = self.hash(key);
        let mut shard = self.shard(hash, now);
        let entry = shard.table.find_mut(hash, |e| e.key == *key)?;
        Some(self.live(entry, now))
    }

    /// Drop every idle entry now, whatever its age, and fold unheld full
    /// limiters back into the compact form where they can be. Returns how
    /// many entries went.
    pub fn sweep(&self) -> usize {
        let now = self.nanos(Instant::now());
        self.shards
            .iter()
            .map(|shard| self.sweep_shard(&mut lock(shard), now, |e| e.evictable(now)))
            .sum()
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).table.len()).sum()
    }

    /// Whether no key is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, A> KeyedLimiter<K, RateLimiter<A>>
where
    K: Hash + Eq + Clone,
    A: Algorithm,
{
    /// Wait for `weight` tokens of `key`'s limiter (FIFO per key).
    pub async fn acquire(&self, key: &K, weight: u64) -> Result<(), Error> {
        if self.compact.is_some() {
            // Most calls need no wait: decide them in place, and make the
            // key's full limiter (with its queue) only to wait on it.
            match self.try_acquire(key, weight) {
                Err(Error::Throttled { .. }) => {}
                done => return done,
            }
        }
        let limiter = self.get(key);
        limiter.acquire(weight).await
    }

    /// Take `weight` tokens of `key`'s limiter now, or say how long to wait.
    ///
    /// One clock read and one hash per decision, under the key's shard's
    /// lock; a compact bucket is decided in place.
    pub fn try_acquire(&self, key: &K, weight: u64) -> Result<(), Error> {
        let at = Instant::now();
        let now = self.nanos(at);
        let hash = self.hash(key);
        let mut shard = self.shard(hash, now);
        let entry = self.entry(&mut shard, hash, key, now);
        if let (Some(compact), None) = (&self.compact, &entry.live) {
            if weight > compact.capacity {
                return Err(Error::WeightExceedsCapacity {
                    weight,
                    capacity: compact.capacity,
                });
            }
            // weight ≤ capacity, so weight × interval ≤ span fits.
            let need = weight * compact.interval;
            return match admit_compact(entry.stamp, now, need, compact.span) {
                Ok(full_at) => {
                    entry.stamp = full_at;
                    Ok(())
                }
                Err(ready) => Err(Error::Throttled {
                    wait: Duration::from_nanos(ready - now),
                }),
            };
        }
        entry.stamp = now;
        let factory = &self.factory;
        let live = entry
            .live
            .get_or_insert_with(|| Arc::new(factory(&entry.key)));
        live.try_acquire_at(at, weight)
    }
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<K, L> fmt::Debug for KeyedLimiter<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("max_keys", &(self.max_per_shard * self.shards.len()))
            .field("idle", &Duration::from_nanos(self.idle))
            .field("compact", &self.compact.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_swept_after_the_timeout() {
        let keyed = KeyedLimiter::token_buckets(Rate::per_second(10).unwrap(), 2)
            .unwrap()
            .with_shards(1)
            .with_idle_timeout(Duration::from_secs(5));
        for host in 0..100u32 {
            keyed.try_acquire(&host, 1).unwrap();
        }
        assert_eq!(keyed.len(), 100);
        // The buckets refill in 100 ms, but were used too recently to go.
        tokio::time::advance(Duration::from_secs(1)).await;
        keyed.get(&1000);
        assert_eq!(keyed.len(), 101);
        // Past the idle timeout the next lookup sweeps the shard.
        tokio::time::advance(Duration::from_secs(5)).await;
        let held = keyed.get(&7);
        assert_eq!(keyed.len(), 1);
        drop(held);
        assert_eq!(keyed.sweep(), 1);
        assert!(keyed.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn busy_keys_are_not_evicted_as_idle() {
        let keyed = KeyedLimiter::token_buckets(Rate::per_second(1).unwrap(), 1)
            .unwrap()
            .with_idle_timeout(Duration::from_millis(10));
        keyed.try_acquire(&"a", 1).unwrap();
        assert_eq!(keyed.sweep(), 0, "an empty bucket is not idle");
        tokio::time::advance(Duration::from_secs(1)).await;
        let held = keyed.get(&"a");
        assert_eq!(keyed.sweep(), 0, "a held bucket is not idle");
        drop(held);
        assert_eq!(keyed.sweep(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_holds_with_millions_of_keys() {
        let keyed = KeyedLimiter::token_buckets(Rate::per_second(1).unwrap(), 1)
            .unwrap()
            .with_max_keys(1_000);
        let bound = keyed.max_keys();
        assert!((1_000..1_000 + 64).contains(&bound));
        for host in 0..200_000u32 {
            // Every bucket is emptied, so none is idle: the LRU path runs.
            let _ = keyed.try_acquire(&host, 1);
            if host % 1_000 == 0 {
                assert!(keyed.len() <= bound);
            }
        }
        assert!(keyed.len() <= bound);
        assert!(keyed.len() > bound / 2);
    }

    fn is_compact<K: Hash + Eq + Clone>(keyed: &KeyedLimiter<K>, key: &K) -> bool {
        let hash = keyed.hash(key);
        let shard = keyed.shard(hash, 0);
        let entry = shard.table.find(hash, |e| e.key == *key);
        entry.is_some_and(|e| e.live.is_none())
    }

    #[test]
    fn a_compact_entry_is_its_key_and_two_words() {
        assert_eq!(std::mem::size_of::<Entry<u64, TokenBucket>>(), 24);
    }

    #[tokio::test(start_paused = true)]
    async fn compact_keys_decide_like_a_bucket() {
        let rate = Rate::per_second(10).unwrap();
        let keyed = KeyedLimiter::token_buckets(rate, 3).unwrap();
        let bucket = TokenBucket::new(rate, 3).unwrap();
        let waits = |r: Result<(), Error>| match r {
            Ok(()) => None,
            Err(Error::Throttled { wait }) => Some(wait),
            Err(e) => panic!("unexpected {e:?}"),
        };
        for (advance_ms, weight) in [(0, 1), (0, 2), (0, 1), (40, 1), (60, 1), (0, 2), (250, 3)] {
            tokio::time::advance(Duration::from_millis(advance_ms)).await;
            assert_eq!(
                waits(keyed.try_acquire(&"k", weight)),
                waits(bucket.try_acquire(weight)),
                "after {advance_ms} ms, weight {weight}"
            );
            assert!(is_compact(&keyed, &"k"));
        }
        assert!(matches!(
            keyed.try_acquire(&"k", 4),
            Err(Error::WeightExceedsCapacity {
                weight: 4,
                capacity: 3
            })
        ));
        assert!(keyed.try_acquire(&"k", 0).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_on_a_compact_key_queue_on_its_full_bucket_then_fold_back() {
        let keyed = Arc::new(
            KeyedLimiter::token_buckets(Rate::per_second(10).unwrap(), 1)
                .unwrap()
                .with_idle_timeout(Duration::from_secs(3_600)),
        );
        let start = Instant::now();
        let tasks: Vec<_> = (0..5)
            .map(|i| {
                let keyed = Arc::clone(&keyed);
                tokio::spawn(async move {
                    keyed.acquire(&"k", 1).await.unwrap();
                    (i, start.elapsed())
                })
            })
            .collect();
        let mut done = Vec::new();
        for task in tasks {
            done.push(task.await.unwrap());
        }
        let expected: Vec<_> = (0..5)
            .map(|i| (i, Duration::from_millis(100 * i as u64)))
            .collect();
        assert_eq!(done, expected, "FIFO, one interval apart");
        assert!(!is_compact(&keyed, &"k"), "waiting made the full bucket");
        // Nobody holds it and it runs on the template: the sweep folds it
        // back, keeping its state (the last grant was at 400 ms).
        assert_eq!(keyed.sweep(), 0);
        assert!(is_compact(&keyed, &"k"));
        assert!(matches!(
            keyed.try_acquire(&"k", 1),
            Err(Error::Throttled { wait }) if wait == Duration::from_millis(100)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_adjusted_or_blocked_key_stays_whole_until_it_matches_the_template() {
        let keyed = KeyedLimiter::token_buckets(Rate::per_second(10).unwrap(), 10).unwrap();
        let slow = keyed.get(&"slow");
        slow.set_rate(Rate::per_second(1).unwrap());
        slow.try_acquire(1).unwrap();
        drop(slow);
        keyed
            .get(&"blocked")
            .block_until(Instant::now() + Duration::from_secs(2));
        assert_eq!(keyed.sweep(), 0);
        assert!(!is_compact(&keyed, &"slow"), "its rate is its own");
        assert!(!is_compact(&keyed, &"blocked"), "its block is in force");
        assert!(keyed.try_acquire(&"blocked", 1).is_err());
        assert!(matches!(
            keyed.try_acquire(&"slow", 10),
            Err(Error::Throttled { wait }) if wait == Duration::from_secs(1)
        ));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(keyed.sweep(), 1, "the slow key's bucket is full again");
        assert!(is_compact(&keyed, &"blocked"), "the block is over");
        // It resumes at the rate, not with a full burst.
        assert!(keyed.try_acquire(&"blocked", 1).is_ok());
        assert!(keyed.try_acquire(&"blocked", 1).is_err());
    }
}
