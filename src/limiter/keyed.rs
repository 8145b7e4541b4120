//! Many limiters, one per key, created on first use and dropped when idle.

use std::collections::hash_map::{Entry, HashMap, RandomState};
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::algorithm::Algorithm;
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
///   lock for a hash-map probe, never across an `await`.
/// - **Idle keys are evicted automatically.** An entry that nobody holds,
///   that is back in its fresh state (a full bucket, nobody waiting) and that
///   has not been used for the idle timeout (60 s by default) is dropped by
///   a sweep of its shard, run lazily at most once per idle timeout from
///   [`get`](Self::get). No background task is needed.
/// - **Hard bound.** At most `max_keys` entries (100 000 by default) live at
///   once, so an unbounded key space (a scraper meeting millions of hosts)
///   cannot grow memory without limit. When a shard is full, its idle
///   entries go first; if none is idle, the least recently used eighth of the
///   shard is dropped, preferring entries nobody holds. A dropped busy
///   entry's state is forgotten: its key starts afresh from the template,
///   which can admit a burst early. Raise the bound if that matters more than
///   memory.
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
    hasher: RandomState,
    max_per_shard: usize,
    idle_ms: u64,
    origin: Instant,
}

struct Shard<K, L> {
    map: HashMap<K, Slot<L>>,
    last_sweep_ms: u64,
}

struct Slot<L> {
    value: Arc<L>,
    last_used_ms: u64,
}

fn default_shards() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cores * 4).next_power_of_two().clamp(4, 64)
}

impl<K> KeyedLimiter<K, TokenBucket>
where
    K: Hash + Eq + Clone,
{
    /// One full token bucket of `capacity` at `rate` per key.
    ///
    /// Fails on a zero capacity, checked once here.
    pub fn token_buckets(rate: Rate, capacity: u64) -> Result<Self, Error> {
        TokenBucket::new(rate, capacity)?;
        Ok(Self::new(move |_| {
            RateLimiter::from_algorithm(super::Gcra::new(rate, capacity, capacity))
        }))
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
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        last_sweep_ms: 0,
                    })
                })
                .collect(),
            factory: Box::new(factory),
            hasher: RandomState::new(),
            max_per_shard: DEFAULT_MAX_KEYS.div_ceil(shards),
            idle_ms: DEFAULT_IDLE.as_millis() as u64,
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
        self.shards = (0..shards)
            .map(|_| {
                Mutex::new(Shard {
                    map: HashMap::new(),
                    last_sweep_ms: 0,
                })
            })
            .collect();
        self.max_per_shard = max_keys.div_ceil(shards).max(1);
        self
    }

    /// Drop idle entries that have not been used for `idle`.
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// The most entries this map will hold.
    pub fn max_keys(&self) -> usize {
        self.max_per_shard * self.shards.len()
    }

    fn ms(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin);
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }

    fn shard(&self, key: &K) -> &Mutex<Shard<K, L>> {
        let hash = self.hasher.hash_one(key);
        // High bits: the map inside the shard uses the low ones.
        let index = (hash >> 40) as usize % self.shards.len();
        &self.shards[index]
    }

    /// The entry for `key`, made from the template if there is none.
    pub fn get(&self, key: &K) -> Arc<L> {
        self.get_at(key, Instant::now())
    }

    fn get_at(&self, key: &K, at: Instant) -> Arc<L> {
        let now = self.ms(at);
        let mut shard = lock(self.shard(key));
        if now.saturating_sub(shard.last_sweep_ms) >= self.idle_ms {
            shard.last_sweep_ms = now;
            let idle_ms = self.idle_ms;
            shard.map.retain(|_, slot| {
                !(now.saturating_sub(slot.last_used_ms) >= idle_ms && slot.evictable())
            });
        }
        if let Some(slot) = shard.map.get_mut(key) {
            slot.last_used_ms = now;
            return Arc::clone(&slot.value);
        }
        if shard.map.len() >= self.max_per_shard {
            Self::make_room(&mut shard.map, self.max_per_shard);
        }
        let value = Arc::new((self.factory)(key));
        match shard.map.entry(key.clone()) {
            Entry::Occupied(slot) => Arc::clone(&slot.get().value),
            Entry::Vacant(vacant) => {
                vacant.insert(Slot {
                    value: Arc::clone(&value),
                    last_used_ms: now,
                });
                value
            }
        }
    }

    fn make_room(map: &mut HashMap<K, Slot<L>>, max: usize) {
        map.retain(|_, slot| !slot.evictable());
        if map.len() < max {
            return;
        }
        // Nothing idle: drop the least recently used eighth, so the next
        // inserts do not each pay for a scan. Entries nobody holds go first:
        // a held one is in use (a waiter, a Retry-After being waited out),
        // and forgetting its state would let its key burst afresh.
        let drop_count = (map.len() / 8).max(1);
        let unheld = |slot: &Slot<L>| Arc::strong_count(&slot.value) == 1;
        let only_unheld = map.values().filter(|s| unheld(s)).count() >= drop_count;
        let candidate = |slot: &Slot<L>| !only_unheld || unheld(slot);
        let mut ages: Vec<u64> = map
            .values()
            .filter(|s| candidate(s))
            .map(|s| s.last_used_ms)
            .collect();
        let (_, cutoff, _) = ages.select_nth_unstable(drop_count - 1);
        let cutoff = *cutoff;
        let mut left = drop_count;
        map.retain(|_, slot| {
            if left > 0 && candidate(slot) && slot.last_used_ms <= cutoff {
                left -= 1;
                false
            } else {
                true
            }
        });
    }

    /// The entry for `key` if there is one; never makes one.
    pub fn peek(&self, key: &K) -> Option<Arc<L>> {
        let shard = lock(self.shard(key));
        shard.map.get(key).map(|slot| Arc::clone(&slot.value))
    }

    /// Drop every idle entry now, whatever its age. Returns how many went.
    pub fn sweep(&self) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let before = shard.map.len();
            shard.map.retain(|_, slot| !slot.evictable());
            dropped += before - shard.map.len();
        }
        dropped
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).map.len()).sum()
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
        let limiter = self.get(key);
        limiter.acquire(weight).await
    }

    /// Take `weight` tokens of `key`'s limiter now, or say how long to wait.
    ///
    /// One clock read per decision, and an existing key is decided under
    /// its shard's lock without touching its reference count.
    pub fn try_acquire(&self, key: &K, weight: u64) -> Result<(), Error> {
        let at = Instant::now();
        let now = self.ms(at);
        {
            let mut shard = lock(self.shard(key));
            if now.saturating_sub(shard.last_sweep_ms) < self.idle_ms {
                if let Some(slot) = shard.map.get_mut(key) {
                    slot.last_used_ms = now;
                    return slot.value.try_acquire_at(at, weight);
                }
            }
        }
        // A new key, or a sweep is due: the full path.
        self.get_at(key, at).try_acquire_at(at, weight)
    }
}

impl<L: Evictable> Slot<L> {
    fn evictable(&self) -> bool {
        Arc::strong_count(&self.value) == 1 && self.value.is_idle()
    }
}

impl<K, L> fmt::Debug for KeyedLimiter<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("max_keys", &(self.max_per_shard * self.shards.len()))
            .field("idle_ms", &self.idle_ms)
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
}
