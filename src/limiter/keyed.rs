//! Many limiters, one per key, created on first use and dropped when idle.
//!
//! Each shard holds two [`hashbrown::HashTable`]s, located by one hash of
//! the key, which also picks the shard, so a decision hashes the key once:
//!
//! - **Compact entries**, in a map of token buckets made from one template
//!   ([`KeyedLimiter::token_buckets`]): the key and one instant, when its
//!   bucket is full again (16 bytes with a `u64` key), decided in place
//!   under the shard's lock with the GCRA step of [`Gcra`](super::Gcra). An
//!   idle key costs no allocation of its own, and a decision touches one
//!   cache line. The map knows the bucket only through [`Fold`], whose one
//!   implementation lives beside the bucket (`bucket.rs`).
//! - **Whole limiters** (`Arc<L>` with a last-used stamp): every entry of
//!   any other map, and a bucket map's keys that a caller had to wait on or
//!   asked for ([`KeyedLimiter::get`]). The sweep folds such a bucket back
//!   into the compact table once nobody holds it and it runs on the
//!   template again (nobody queued, no block, the template's rate and
//!   capacity).

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hashbrown::HashTable;
use tokio::time::Instant;

use super::algorithm::{Algorithm, Nanos};
use super::bucket::{BucketFold, Template};
use super::{QueuedLimiter, RequestRate, TokenBucket};
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

impl<A: Algorithm> Evictable for QueuedLimiter<A> {
    fn is_idle(&self) -> bool {
        QueuedLimiter::is_idle(self)
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
///   (8 bytes beside the key) until a caller has to wait on it or asks for
///   its whole limiter ([`get`](Self::get), [`peek`](Self::peek)); see the
///   module source for the layout.
/// - **Idle keys are evicted automatically.** An entry that nobody holds
///   and that is back in its fresh state (a full bucket, nobody waiting) is
///   dropped by a sweep of its shard once it has been unused for the idle
///   timeout (60 s by default); a compact bucket, once it has been full for
///   that long. Each shard sweeps itself lazily, at most once per idle
///   timeout (on every call with a zero timeout), from the map's own calls;
///   [`sweep`](Self::sweep) and a full shard sweep too. No background task
///   is needed.
/// - **Hard bound.** At most `max_keys` entries (100 000 by default) live at
///   once, so an unbounded key space (a scraper meeting millions of hosts)
///   cannot grow memory without limit. When a shard is full, its idle
///   entries go first; if none is idle, an eighth of the shard is dropped:
///   compact buckets first, those full again soonest first (the least
///   state is lost), then whole limiters, least recently used first and
///   those nobody holds before held ones. A dropped busy entry's state is
///   forgotten: its key starts afresh from the template, which can admit a
///   burst early. Raise the bound if that matters more than memory.
///
/// ```
/// use reqwest_pace::{KeyedLimiter, RequestRate};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), reqwest_pace::Error> {
/// let per_host = KeyedLimiter::token_buckets(RequestRate::per_second(5)?, 1)?.with_max_keys(10_000);
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
    /// Compact entries: a key and when its bucket is full again (GCRA's
    /// `full_at`, nanoseconds since the map's origin). Only a map of
    /// template buckets has any.
    compact: HashTable<(K, Nanos)>,
    /// Whole limiters: every entry of other maps, and the keys of a bucket
    /// map that a caller needed whole. A key is in one table at most.
    live: HashTable<Live<K, L>>,
    last_sweep: Nanos,
}

impl<K, L> Shard<K, L> {
    fn len(&self) -> usize {
        self.compact.len() + self.live.len()
    }
}

struct Live<K, L> {
    key: K,
    /// When it was last used, in nanoseconds since the map's origin.
    last_used: Nanos,
    value: Arc<L>,
}

impl<K, L: Evictable> Live<K, L> {
    fn unheld(&self) -> bool {
        Arc::strong_count(&self.value) == 1
    }

    /// Back in its fresh state, and nobody holds it.
    fn evictable(&self) -> bool {
        self.unheld() && self.value.is_idle()
    }
}

/// How a keyed map moves a key of limiter type `L` between its compact
/// form (one `full_at` on the map's template) and its whole limiter.
/// Implemented for [`TokenBucket`] alone; a map of anything else has no
/// compact entries.
pub(super) trait Fold<L>: Send + Sync {
    /// A whole limiter on `template` whose bucket is full again at
    /// `full_at`, with instants counted from `origin`.
    fn expand(&self, template: &Template, full_at: Nanos, origin: Instant) -> L;

    /// `limiter`'s `full_at` at `now`, when nothing else about it differs
    /// from `template` (nobody queued, no block in force, the template's
    /// rate and capacity) and its instants are counted from `origin`.
    fn shrink(
        &self,
        template: &Template,
        limiter: &L,
        origin: Instant,
        now: Nanos,
    ) -> Option<Nanos>;
}

/// The template of a map of token buckets, and how to move one key between
/// the compact form and a whole limiter.
struct Compact<L> {
    template: Template,
    fold: Box<dyn Fold<L>>,
}

impl<L> Compact<L> {
    fn expand(&self, full_at: Nanos, origin: Instant) -> L {
        self.fold.expand(&self.template, full_at, origin)
    }

    fn shrink(&self, limiter: &L, origin: Instant, now: Nanos) -> Option<Nanos> {
        self.fold.shrink(&self.template, limiter, origin, now)
    }
}

fn default_shards() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cores * 4).next_power_of_two().clamp(4, 64)
}

/// Whether a table holding `len` entries in room for `capacity` is worth
/// shrinking: at most a quarter full, and room for more than a handful.
fn mostly_empty(len: usize, capacity: usize) -> bool {
    capacity > 16 && len.saturating_mul(4) <= capacity
}

fn new_shards<K, L>(count: usize) -> Box<[Mutex<Shard<K, L>>]> {
    (0..count)
        .map(|_| {
            Mutex::new(Shard {
                compact: HashTable::new(),
                live: HashTable::new(),
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
    pub fn token_buckets(rate: RequestRate, capacity: u64) -> Result<Self, Error> {
        TokenBucket::new(rate, capacity)?;
        let mut map = Self::new(move |_| {
            QueuedLimiter::from_algorithm(super::Gcra::new(rate, capacity, capacity))
        });
        map.compact = Template::new(rate, capacity).map(|template| Compact {
            template,
            fold: Box::new(BucketFold),
        });
        Ok(map)
    }
}

impl<K, L> KeyedLimiter<K, L> {
    /// The most entries this map will hold.
    pub fn max_keys(&self) -> usize {
        self.max_per_shard.saturating_mul(self.shards.len())
    }
}

/// Where a key's entry is, once looked up (and inserted if need be).
enum Found<'s, K, L> {
    /// A compact entry's `full_at`, and the template it runs on.
    Compact(&'s mut Nanos, &'s Compact<L>),
    Live(&'s mut Live<K, L>),
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

    fn nanos(&self, at: Instant) -> Nanos {
        nanos(at.saturating_duration_since(self.origin))
    }

    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard_of(&self, hash: u64) -> &Mutex<Shard<K, L>> {
        // Bits 25 to 56, reduced by a multiply (any shard count). The tables
        // inside place a key by its low bits and filter probes by its top
        // seven: a shard's keys must still differ in both.
        let index = (((hash >> 25) & 0xFFFF_FFFF) * self.shards.len() as u64) >> 32;
        &self.shards[index as usize]
    }

    /// Lock the shard of `hash`, sweeping it first when a sweep is due.
    fn shard(&self, hash: u64, now: Nanos) -> MutexGuard<'_, Shard<K, L>> {
        let mut shard = lock(self.shard_of(hash));
        if now.saturating_sub(shard.last_sweep) >= self.idle {
            shard.last_sweep = now;
            let idle = self.idle;
            self.sweep_shard(
                &mut shard,
                now,
                // Full again, and for the idle timeout.
                |full_at| full_at <= now && now - full_at >= idle,
                |live| now.saturating_sub(live.last_used) >= idle && live.evictable(),
            );
        }
        shard
    }

    /// Drop the entries the two tests pick; fold the other unheld whole
    /// limiters back into the compact form where they can be. Returns how
    /// many entries went.
    fn sweep_shard(
        &self,
        shard: &mut Shard<K, L>,
        now: Nanos,
        drop_compact: impl Fn(Nanos) -> bool,
        drop_live: impl Fn(&Live<K, L>) -> bool,
    ) -> usize {
        let before = shard.len();
        shard.compact.retain(|(_, full_at)| !drop_compact(*full_at));
        let Shard { compact, live, .. } = shard;
        live.retain(|entry| {
            if drop_live(entry) {
                return false;
            }
            let folded = match &self.compact {
                Some(c) if entry.unheld() => c.shrink(&entry.value, self.origin, now),
                _ => None,
            };
            let Some(full_at) = folded else { return true };
            compact.insert_unique(
                self.hasher.hash_one(&entry.key),
                (entry.key.clone(), full_at),
                |(key, _)| self.hasher.hash_one(key),
            );
            false
        });
        self.give_back_room(shard);
        before - shard.len()
    }

    /// Shrink a shard's tables once a sweep has left them mostly empty:
    /// hash tables keep their capacity as entries go, so a map that once
    /// held a burst of keys would otherwise hold their room for ever. Only
    /// a table at most a quarter full is shrunk, to twice what it holds,
    /// so that a shard whose keys come and go does not grow and shrink on
    /// every sweep.
    fn give_back_room(&self, shard: &mut Shard<K, L>) {
        let hasher = &self.hasher;
        if mostly_empty(shard.compact.len(), shard.compact.capacity()) {
            let len = shard.compact.len();
            shard
                .compact
                .shrink_to(2 * len, |(key, _)| hasher.hash_one(key));
        }
        if mostly_empty(shard.live.len(), shard.live.capacity()) {
            let len = shard.live.len();
            shard.live.shrink_to(2 * len, |e| hasher.hash_one(&e.key));
        }
    }

    /// The entry of `key`, without making one.
    fn find<'s, Q>(
        &'s self,
        shard: &'s mut Shard<K, L>,
        hash: u64,
        key: &Q,
    ) -> Option<Found<'s, K, L>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if let Some(compact) = &self.compact {
            if let Some((_, full_at)) = shard.compact.find_mut(hash, |(k, _)| k.borrow() == key) {
                return Some(Found::Compact(full_at, compact));
            }
        }
        shard
            .live
            .find_mut(hash, |e| e.key.borrow() == key)
            .map(Found::Live)
    }

    /// The entry of `key`, made (after making room) when there is none:
    /// compact and full in a map of template buckets, else whole.
    fn find_or_insert<'s, Q>(
        &'s self,
        shard: &'s mut Shard<K, L>,
        hash: u64,
        key: &Q,
        now: Nanos,
    ) -> Found<'s, K, L>
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        let in_live = shard.live.find(hash, |e| e.key.borrow() == key).is_some();
        if !in_live
            && shard.len() >= self.max_per_shard
            && shard
                .compact
                .find(hash, |(k, _)| k.borrow() == key)
                .is_none()
        {
            self.make_room(shard, now);
        }
        match (&self.compact, in_live) {
            (Some(compact), false) => {
                let entry = shard.compact.entry(
                    hash,
                    |(k, _)| k.borrow() == key,
                    |(k, _)| self.hasher.hash_one(k),
                );
                // A new key is full since the origin.
                let (_, full_at) = entry.or_insert_with(|| (key.to_owned(), 0)).into_mut();
                Found::Compact(full_at, compact)
            }
            _ => {
                let entry = shard.live.entry(
                    hash,
                    |e| e.key.borrow() == key,
                    |e| self.hasher.hash_one(&e.key),
                );
                let entry = entry.or_insert_with(|| {
                    let key = key.to_owned();
                    let value = Arc::new((self.factory)(&key));
                    Live {
                        key,
                        last_used: now,
                        value,
                    }
                });
                Found::Live(entry.into_mut())
            }
        }
    }

    /// [`sweep_shard`](Self::sweep_shard) dropping every entry that is back
    /// in its fresh state at `now`, whatever its age.
    fn sweep_idle(&self, shard: &mut Shard<K, L>, now: Nanos) -> usize {
        self.sweep_shard(shard, now, |full_at| full_at <= now, Live::evictable)
    }

    fn make_room(&self, shard: &mut Shard<K, L>, now: Nanos) {
        self.sweep_idle(shard, now);
        let len = shard.len();
        if len < self.max_per_shard {
            return;
        }
        // Nothing idle: drop an eighth, so the next inserts do not each pay
        // for a scan. Compact entries go first, those whose buckets are full
        // again soonest first (the least state is lost): a compact entry is
        // only a bucket's level, while a whole limiter is one a caller
        // needed (a waiter, a Retry-After block, a rate the server set).
        // Then whole limiters, least recently used first, those nobody
        // holds before held ones, whose state a waiter is counting on.
        let drop_count = (len / 8).max(1);
        let from_compact = drop_count.min(shard.compact.len());
        drop_oldest(&mut shard.compact, from_compact, |(_, full_at)| {
            Some(*full_at)
        });
        let from_live = drop_count - from_compact;
        let unheld = shard.live.iter().filter(|e| e.unheld()).count();
        let from_unheld = from_live.min(unheld);
        drop_oldest(&mut shard.live, from_unheld, |e| {
            e.unheld().then_some(e.last_used)
        });
        // Only held ones are left to choose from (a dropped held entry's
        // waiters keep their limiter, but the key starts afresh beside it).
        drop_oldest(&mut shard.live, from_live - from_unheld, |e| {
            Some(e.last_used)
        });
    }

    /// The key's whole limiter, made from its compact form if need be (the
    /// entry moves to the live table). `get` (`used` set) marks it used at
    /// `now` and makes it from the template first if the key has none;
    /// `peek` does neither, and stamps a compact entry made whole with the
    /// last instant it can have been used (`now` or when it is full again,
    /// whichever is earlier), so that looking at a key does not keep it.
    fn whole<Q>(
        &self,
        shard: &mut Shard<K, L>,
        hash: u64,
        key: &Q,
        now: Nanos,
        used: bool,
    ) -> Option<Arc<L>>
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        let found = if used {
            self.find_or_insert(shard, hash, key, now)
        } else {
            self.find(shard, hash, key)?
        };
        let full_at = match found {
            Found::Live(entry) => {
                if used {
                    entry.last_used = now;
                }
                return Some(Arc::clone(&entry.value));
            }
            Found::Compact(full_at, _) => *full_at,
        };
        let last_used = if used { now } else { now.min(full_at) };
        let key = match shard.compact.find_entry(hash, |(k, _)| k.borrow() == key) {
            Ok(entry) => entry.remove().0 .0,
            Err(_) => key.to_owned(),
        };
        let value = Arc::new(match &self.compact {
            Some(compact) => compact.expand(full_at, self.origin),
            // Only a map of template buckets has compact entries.
            None => (self.factory)(&key),
        });
        shard.live.insert_unique(
            hash,
            Live {
                key,
                last_used,
                value: Arc::clone(&value),
            },
            |e| self.hasher.hash_one(&e.key),
        );
        Some(value)
    }

    /// The entry for `key`, made from the template if there is none.
    ///
    /// In a map of token buckets this turns a compact entry into a whole
    /// limiter, which stays one while the returned handle is held.
    pub fn get(&self, key: &K) -> Arc<L> {
        self.get_borrowed(key)
    }

    /// [`get`](Self::get) by a borrowed form of the key (a `&str` for a
    /// `String` key): a key held already is found without making an owned
    /// one.
    pub(crate) fn get_borrowed<Q>(&self, key: &Q) -> Arc<L>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.nanos(Instant::now());
        let hash = self.hash(key);
        let mut shard = self.shard(hash, now);
        match self.whole(&mut shard, hash, key, now, true) {
            Some(value) => value,
            // `whole` inserts when asked to; this only keeps `get` total.
            None => Arc::new((self.factory)(&key.to_owned())),
        }
    }

    /// The entry for `key` if there is one; never makes one, does not
    /// count as a use (it keeps no key from eviction), and runs no sweep.
    /// Like [`get`](Self::get) it makes a compact entry's whole limiter,
    /// which the next sweep folds back once the handle is dropped.
    pub fn peek(&self, key: &K) -> Option<Arc<L>> {
        let now = self.nanos(Instant::now());
        let hash = self.hash(key);
        let mut shard = lock(self.shard_of(hash));
        self.whole(&mut shard, hash, key, now, false)
    }

    /// Drop every idle entry now, whatever its age, and fold unheld whole
    /// limiters back into the compact form where they can be. Returns how
    /// many entries went.
    pub fn sweep(&self) -> usize {
        let now = self.nanos(Instant::now());
        self.shards
            .iter()
            .map(|shard| self.sweep_idle(&mut lock(shard), now))
            .sum()
    }

    /// Keys held, compact or whole.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no key is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K, A> KeyedLimiter<K, QueuedLimiter<A>>
where
    K: Hash + Eq + Clone,
    A: Algorithm,
{
    /// Wait for `weight` tokens of `key`'s limiter (FIFO per key).
    pub async fn acquire(&self, key: &K, weight: u64) -> Result<(), Error> {
        if self.compact.is_some() {
            // Most calls need no wait: decide them in place, and make the
            // key's whole limiter (with its queue) only to wait on it.
            match self.try_acquire(key, weight) {
                Err(Error::NotYet { .. }) => {}
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
        if weight == 0 {
            return Ok(());
        }
        let at = Instant::now();
        let now = self.nanos(at);
        let hash = self.hash(key);
        let mut shard = self.shard(hash, now);
        // The common case first: a compact key, found by one probe.
        if let Some(compact) = &self.compact {
            if let Some((_, full_at)) = shard.compact.find_mut(hash, |(k, _)| k == key) {
                return compact.template.decide(full_at, now, weight);
            }
            // A new key's bucket is the template's: a weight it can never
            // hold fails without making room for the key.
            if weight > compact.template.capacity()
                && shard.live.find(hash, |e| e.key == *key).is_none()
            {
                return compact.template.decide(&mut 0, now, weight);
            }
        }
        match self.find_or_insert(&mut shard, hash, key, now) {
            Found::Live(entry) => {
                entry.last_used = now;
                entry.value.try_acquire_at(at, weight)
            }
            Found::Compact(full_at, compact) => compact.template.decide(full_at, now, weight),
        }
    }
}

/// Drop the `count` entries of `table` with the smallest ages (`None`: not
/// to be dropped).
fn drop_oldest<T>(table: &mut HashTable<T>, count: usize, age: impl Fn(&T) -> Option<Nanos>) {
    let mut ages: Vec<Nanos> = table.iter().filter_map(&age).collect();
    if count == 0 || ages.is_empty() {
        return;
    }
    let count = count.min(ages.len());
    let cutoff = *ages.select_nth_unstable(count - 1).1;
    // Every entry older than the cutoff goes; of those at it, only as many
    // as make up the count.
    let mut ties = count - ages.iter().filter(|&&a| a < cutoff).count();
    table.retain(|entry| match age(entry) {
        Some(a) if a < cutoff => false,
        Some(a) if a == cutoff && ties > 0 => {
            ties -= 1;
            false
        }
        _ => true,
    });
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<K, L> fmt::Debug for KeyedLimiter<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys())
            .field("idle", &Duration::from_nanos(self.idle))
            .field("compact", &self.compact.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key found by a borrowed form is the same entry as by its owned
    /// one, compact or whole, and a new key is made owned.
    #[tokio::test(start_paused = true)]
    async fn a_borrowed_key_finds_the_same_entry() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(10).unwrap(), 2)
            .unwrap()
            .with_shards(1);
        // Compact first: its level is kept when it is made whole.
        keyed.try_acquire(&"a".to_owned(), 2).unwrap();
        let borrowed = keyed.get_borrowed("a");
        assert_eq!(borrowed.available(), 0);
        assert!(Arc::ptr_eq(&borrowed, &keyed.get(&"a".to_owned())));
        let made = keyed.get_borrowed("b");
        assert!(Arc::ptr_eq(&made, &keyed.get(&"b".to_owned())));
        assert_eq!(keyed.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_swept_after_the_timeout() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(10).unwrap(), 2)
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

    /// Room held by a map's tables, compact and whole, over every shard.
    fn room<K, L>(keyed: &KeyedLimiter<K, L>) -> usize {
        keyed
            .shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.compact.capacity() + s.live.capacity()
            })
            .sum()
    }

    #[tokio::test(start_paused = true)]
    async fn a_sweep_gives_back_the_room_of_the_keys_it_drops() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(10).unwrap(), 2)
            .unwrap()
            .with_shards(2)
            .with_idle_timeout(Duration::from_secs(5));
        for host in 0..10_000u32 {
            keyed.try_acquire(&host, 1).unwrap();
            if host % 2 == 0 {
                // Half of them whole, as a key a caller needed is.
                drop(keyed.get(&host));
            }
        }
        assert!(room(&keyed) >= 10_000, "{}", room(&keyed));
        // Ten keys stay held; the rest are idle and go.
        let held: Vec<_> = (0..10u32).map(|host| keyed.get(&host)).collect();
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(keyed.sweep(), 9_990);
        assert_eq!(keyed.len(), 10);
        // Two tables per shard, each with room for twice what it holds at
        // most (a table's smallest size is a few entries).
        assert!(room(&keyed) <= 64, "{}", room(&keyed));
        // A table that is more than a quarter full keeps its room.
        let kept = room(&keyed);
        keyed.sweep();
        assert_eq!(room(&keyed), kept);
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_idle_timeout_still_keeps_buckets_that_are_not_full() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(1).unwrap(), 1)
            .unwrap()
            .with_idle_timeout(Duration::ZERO);
        keyed.try_acquire(&"a", 1).unwrap();
        keyed.try_acquire(&"b", 1).unwrap(); // sweeps the shard of "b"
        assert!(keyed.try_acquire(&"a", 1).is_err());
        assert_eq!(keyed.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn busy_keys_are_not_evicted_as_idle() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(1).unwrap(), 1)
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
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(1).unwrap(), 1)
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
        let compact = shard.compact.find(hash, |(k, _)| k == key).is_some();
        let live = shard.live.find(hash, |e| e.key == *key).is_some();
        assert!(compact != live, "a key is in exactly one table");
        compact
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_spares_held_keys_and_their_state() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_minute(1).unwrap(), 1)
            .unwrap()
            .with_shards(1)
            .with_max_keys(100);
        let held = keyed.get(&u32::MAX);
        held.try_acquire(1).unwrap();
        for key in 0..10_000u32 {
            // Every bucket is emptied, so none is idle: the LRU path runs.
            keyed.try_acquire(&key, 1).unwrap();
            assert!(keyed.len() <= 100);
        }
        assert!(!is_compact(&keyed, &u32::MAX));
        assert!(
            keyed.try_acquire(&u32::MAX, 1).is_err(),
            "the held key kept its empty bucket"
        );
        drop(held);
        // The most recent keys are still there, with their state.
        assert!(keyed.try_acquire(&9_999, 1).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_drops_compact_buckets_before_a_blocked_key() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(1).unwrap(), 1)
            .unwrap()
            .with_shards(1)
            .with_max_keys(8);
        for key in 0..7u32 {
            keyed.try_acquire(&key, 1).unwrap();
        }
        tokio::time::advance(Duration::from_millis(10)).await;
        keyed
            .get(&100)
            .block_until(Instant::now() + Duration::from_secs(3_600));
        // The shard is full: one entry goes, and it is a compact one.
        keyed.try_acquire(&7, 1).unwrap();
        assert_eq!(keyed.len(), 8);
        assert!(
            keyed.try_acquire(&100, 1).is_err(),
            "the block is remembered"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn peek_does_not_keep_an_idle_key_alive() {
        let keyed = KeyedLimiter::new(|_: &u32| {
            TokenBucket::new(RequestRate::per_second(10).unwrap(), 1).unwrap()
        })
        .with_shards(1)
        .with_idle_timeout(Duration::from_secs(5));
        keyed.try_acquire(&1, 1).unwrap();
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(3)).await;
            assert!(keyed.peek(&1).is_some());
        }
        keyed.get(&2); // runs the lazy sweep
        assert!(keyed.peek(&1).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn one_token_in_300_years_is_refused_exactly() {
        let interval = Duration::from_secs(300 * 365 * 86_400);
        let rate = RequestRate::every(interval).unwrap();
        let keyed = KeyedLimiter::token_buckets(rate, 1).unwrap();
        let bucket = TokenBucket::new(rate, 1).unwrap();
        keyed.try_acquire(&1, 1).unwrap();
        bucket.try_acquire(1).unwrap();
        for refused in [keyed.try_acquire(&1, 1), bucket.try_acquire(1)] {
            assert!(matches!(refused, Err(Error::NotYet { wait }) if wait == interval));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_drops_unheld_whole_buckets_before_held_ones() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(1).unwrap(), 1)
            .unwrap()
            .with_shards(1)
            .with_max_keys(16);
        let mut held = Vec::new();
        for key in 0..15u32 {
            let bucket = keyed.get(&key);
            bucket.try_acquire(1).unwrap();
            held.push(bucket);
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        // The newest whole bucket, held by nobody (its own rate keeps it
        // from folding back).
        let unheld = keyed.get(&100);
        unheld.set_rate(RequestRate::per_second(2).unwrap());
        unheld.try_acquire(1).unwrap();
        drop(unheld);
        keyed.try_acquire(&200, 1).unwrap(); // drops two entries
        assert!(keyed.peek(&100).is_none(), "the unheld one went first");
        let kept = (0..15u32).filter(|k| keyed.peek(k).is_some()).count();
        assert_eq!(kept, 14, "then the oldest held one");
        assert!(keyed.peek(&0).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_bound_drops_the_bucket_full_again_soonest_among_ties() {
        for _ in 0..20 {
            let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(1).unwrap(), 1)
                .unwrap()
                .with_shards(1)
                .with_max_keys(16);
            keyed.try_acquire(&0u32, 1).unwrap();
            tokio::time::advance(Duration::from_millis(1)).await;
            for key in 1..16u32 {
                keyed.try_acquire(&key, 1).unwrap();
            }
            keyed.try_acquire(&99, 1).unwrap(); // drops two entries
            assert!(
                keyed.try_acquire(&0, 1).is_ok(),
                "key 0, full again first, went"
            );
        }
    }

    #[test]
    fn an_unbounded_map_reports_its_bound_without_overflow() {
        let keyed = KeyedLimiter::<u32>::token_buckets(RequestRate::per_second(1).unwrap(), 1)
            .unwrap()
            .with_shards(8)
            .with_max_keys(usize::MAX);
        assert_eq!(keyed.max_keys(), usize::MAX);
        assert_eq!(keyed.with_shards(3).max_keys(), usize::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_spanning_centuries_is_kept_whole_and_exact() {
        let rate = RequestRate::per_second(1).unwrap();
        let capacity = u64::MAX / 1_000_000_000;
        let keyed = KeyedLimiter::token_buckets(rate, capacity).unwrap();
        let bucket = TokenBucket::new(rate, capacity).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        keyed.try_acquire(&1, capacity).unwrap();
        bucket.try_acquire(capacity).unwrap();
        assert!(bucket.try_acquire(1).is_err());
        assert!(keyed.try_acquire(&1, 1).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn weights_of_zero_or_over_the_capacity_make_no_key() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(1).unwrap(), 2).unwrap();
        assert!(keyed.try_acquire(&"a", 0).is_ok());
        assert!(matches!(
            keyed.try_acquire(&"a", 3),
            Err(Error::WeightExceedsCapacity {
                weight: 3,
                capacity: 2
            })
        ));
        assert!(keyed.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn compact_keys_decide_like_a_bucket() {
        let rate = RequestRate::per_second(10).unwrap();
        let keyed = KeyedLimiter::token_buckets(rate, 3).unwrap();
        let bucket = TokenBucket::new(rate, 3).unwrap();
        let waits = |r: Result<(), Error>| match r {
            Ok(()) => None,
            Err(Error::NotYet { wait }) => Some(wait),
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
            KeyedLimiter::token_buckets(RequestRate::per_second(10).unwrap(), 1)
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
            Err(Error::NotYet { wait }) if wait == Duration::from_millis(100)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_adjusted_or_blocked_key_stays_whole_until_it_matches_the_template() {
        let keyed = KeyedLimiter::token_buckets(RequestRate::per_second(10).unwrap(), 10).unwrap();
        let slow = keyed.get(&"slow");
        slow.set_rate(RequestRate::per_second(1).unwrap());
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
            Err(Error::NotYet { wait }) if wait == Duration::from_secs(1)
        ));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(keyed.sweep(), 1, "the slow key's bucket is full again");
        assert!(is_compact(&keyed, &"blocked"), "the block is over");
        // It resumes at the rate, not with a full burst.
        assert!(keyed.try_acquire(&"blocked", 1).is_ok());
        assert!(keyed.try_acquire(&"blocked", 1).is_err());
    }
}
