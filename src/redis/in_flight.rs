//! A cap on calls in flight shared by a fleet.

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::backend::{FaultPolicy, Link};
use super::scripts::IN_FLIGHT;
use crate::Error;

/// The script's source, for `EVAL` where Redis lacks it (the same file
/// as [`IN_FLIGHT`]).
const SOURCE: &str = include_str!("lua/in_flight.lua");

/// How long a call holds its slot without its process renewing the lease
/// (the default of [`RedisInFlight::with_lease`]).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The longest pause between two asks of a waiter for a free slot (the
/// default of [`RedisInFlight::with_poll`]).
pub const DEFAULT_POLL: Duration = Duration::from_millis(10);

/// The least share of the fleet's calls in flight an episode of
/// concurrency refusals cuts the cap to, and the rounds at the cap before a
/// cap below what the fleet was seen to admit climbs one higher: the same
/// as a single client's learned cap (its `Tuning`, checked equal by a
/// test), read on the fleet's count.
const DECREASE: f64 = 0.5;
const RECOVER_ROUNDS: u64 = 1;

/// A cap on calls in flight per key, shared by every process using the
/// same Redis, prefix and key: configured
/// ([`with_max_in_flight`](Self::with_max_in_flight)), learned from the
/// concurrency refusals its permits report, or both.
///
/// Many APIs refuse past a number of calls in flight per credential. A cap
/// kept in each process cannot hold a fleet to it (four processes each
/// under the cap are four times over it together); this one counts the
/// fleet's calls in one place:
///
/// - **Leases.** Each call holds a slot: a member of a sorted set whose
///   score is the end of its lease. Its process renews the leases of the
///   calls it holds every third of a lease, so a call may run as long as
///   it runs; a process that dies (or loses Redis longer than a lease)
///   frees its slots when their leases end ([`DEFAULT_LEASE`], 30 s).
/// - **One atomic step per decision**, a Lua script run with `EVALSHA`:
///   to take a slot, and to give one back with what its call taught.
///   Giving back is done off the caller's path (a task spawned when the
///   permit is dropped).
/// - **Waiting.** Within a process, waiters queue first asked, first
///   served (a tokio mutex), and only the first asks Redis, again after a
///   pause that doubles from 1 ms to [`DEFAULT_POLL`] while the fleet is
///   at its cap; across processes, the first to ask after a slot frees
///   takes it. A waiter dropped leaves the queue.
/// - **Learning.** A permit whose call was refused for concurrency
///   ([`RedisInFlightPermit::refused`]) lowers the shared cap to what the
///   fleet had in flight less one, no lower than half of what it had when
///   the episode of refusals began; below what the fleet was seen to
///   admit ([`RedisInFlightPermit::answered`]) the cap climbs back one
///   call per round of calls at it. It is never raised above the most the
///   fleet was seen to admit: a server whose cap grew is found when the
///   learned cap expires (the backend's learned TTL, an hour by default).
/// - **Faults** follow the backend's [`FaultPolicy`]: fail, admit, or a
///   local cap of the last cap read divided by the processes (admitting
///   while none was read).
///
/// The throttled client uses one per key with
/// [`Scope::shared_in_flight`](crate::Scope::shared_in_flight); on its own:
///
/// ```no_run
/// use reqwest_pace::redis::RedisBackend;
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6380/").await?;
/// let in_flight = backend.in_flight("api.example.com")?.with_max_in_flight(8)?;
/// let permit = in_flight.acquire().await?;
/// // ... send the call; if it is refused for concurrency:
/// permit.refused();
/// drop(permit); // the slot goes back, and the cap learns
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisInFlight {
    inner: Arc<Inner>,
}

struct Inner {
    link: Link,
    /// The holders' sorted set and the cap's hash.
    keys: Vec<String>,
    lease: Duration,
    poll: Duration,
    configured: Option<usize>,
    /// The process's waiters, first asked first served: only the one
    /// holding it asks Redis.
    turn: tokio::sync::Mutex<()>,
    /// Woken when a slot this process held is given back: the waiting
    /// head asks again at once rather than after its pause.
    freed: tokio::sync::Notify,
    /// The ids of the slots this process holds, whose leases it renews;
    /// and whether a task renews them.
    holders: Mutex<(HashSet<Arc<str>>, bool)>,
    /// This process's mark in its holders' ids, and their counter.
    process: u64,
    ids: AtomicU64,
    /// The cap last read from Redis (-1: none).
    cap: AtomicI64,
    /// Under [`FaultPolicy::LocalFallback`], the local cap while Redis is
    /// away, made at the first fault from the cap read last.
    fallback: Mutex<Option<Arc<Semaphore>>>,
}

/// A slot taken from a [`RedisInFlight`]: dropped, it goes back, with what
/// its call taught when [`answered`](Self::answered) or
/// [`refused`](Self::refused) was called.
pub struct RedisInFlightPermit {
    inner: Arc<Inner>,
    /// The slot's id in Redis, until it is given back; none for a slot
    /// granted without Redis (a fault policy's).
    holder: Mutex<Option<Arc<str>>>,
    number: u64,
    in_flight: usize,
    outcome: AtomicU8,
    _local: Option<OwnedSemaphorePermit>,
}

/// What a slot's call taught, as the script reads it.
const NO_LESSON: u8 = 0;
const ANSWERED: u8 = 1;
const REFUSED: u8 = 2;

enum Taken {
    Granted {
        in_flight: usize,
        cap: Option<usize>,
        number: u64,
    },
    Full {
        cap: Option<usize>,
    },
}

impl RedisInFlight {
    pub(crate) fn new(link: Link, key: &str) -> Result<RedisInFlight, Error> {
        link.validate(key)?;
        let keys = vec![link.key(key, "held"), link.key(key, "cap")];
        Ok(RedisInFlight {
            inner: Arc::new(Inner::new(link, keys, DEFAULT_LEASE, DEFAULT_POLL, None)),
        })
    }

    /// The same cap with one setting changed, as a handle of its own (only
    /// before any use: it shares no waiters, slots or readings with this
    /// one or its clones).
    fn with(self, change: impl FnOnce(&mut Inner)) -> RedisInFlight {
        let old = &self.inner;
        let mut inner = Inner::new(
            old.link.clone(),
            old.keys.clone(),
            old.lease,
            old.poll,
            old.configured,
        );
        change(&mut inner);
        RedisInFlight {
            inner: Arc::new(inner),
        }
    }

    /// At most `max` calls in flight across the fleet, whatever is
    /// learned. Fails on 0.
    pub fn with_max_in_flight(self, max: usize) -> Result<RedisInFlight, Error> {
        if max == 0 {
            return Err(Error::config("a cap on calls in flight must be at least 1"));
        }
        Ok(self.with(|inner| inner.configured = Some(max)))
    }

    /// How long a slot is held without its process renewing it (default
    /// [`DEFAULT_LEASE`]): longer keeps a dead process's slots longer,
    /// shorter renews more often (every third of it). Fails under 30 ms or
    /// under three times the backend's timeout (a renewal must land
    /// within its lease).
    pub fn with_lease(self, lease: Duration) -> Result<RedisInFlight, Error> {
        if lease < Duration::from_millis(30) || lease < self.inner.link.timeout() * 3 {
            return Err(Error::config(format!(
                "a lease of {lease:?} is too short: at least 30 ms and three times the \
                 backend's timeout ({:?})",
                self.inner.link.timeout()
            )));
        }
        Ok(self.with(|inner| inner.lease = lease))
    }

    /// The longest pause between two asks for a slot while the fleet is at
    /// its cap (default [`DEFAULT_POLL`], at least 1 ms): shorter takes a
    /// freed slot sooner, at more calls to Redis (one per process per
    /// pause, while a waiter waits).
    pub fn with_poll(self, poll: Duration) -> RedisInFlight {
        self.with(|inner| inner.poll = poll.max(Duration::from_millis(1)))
    }

    /// The cap last read from Redis, or the configured one before any;
    /// `None` while neither is known.
    pub fn cap(&self) -> Option<usize> {
        self.inner.cap_known()
    }

    /// How many of the fleet's slots this process holds.
    pub fn held(&self) -> usize {
        crate::sync::lock(&self.inner.holders).0.len()
    }

    /// The Redis keys: the holders' sorted set and the cap's hash.
    pub fn redis_keys(&self) -> [&str; 2] {
        [&self.inner.keys[0], &self.inner.keys[1]]
    }

    /// Wait for a slot: first asked, first served within the process.
    /// Cancel-safe: a future dropped while it waits leaves the queue, and
    /// a slot granted as it was dropped is given back.
    pub async fn acquire(&self) -> Result<RedisInFlightPermit, Error> {
        self.inner.acquire().await
    }
}

impl Inner {
    /// A fresh handle's state, its holders' ids marked as its own (a
    /// random mark, different for every handle of the process).
    fn new(
        link: Link,
        keys: Vec<String>,
        lease: Duration,
        poll: Duration,
        configured: Option<usize>,
    ) -> Inner {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        Inner {
            link,
            keys,
            lease,
            poll,
            configured,
            turn: tokio::sync::Mutex::new(()),
            freed: tokio::sync::Notify::new(),
            holders: Mutex::new((HashSet::new(), false)),
            process: hasher.finish(),
            ids: AtomicU64::new(0),
            cap: AtomicI64::new(-1),
            fallback: Mutex::new(None),
        }
    }

    /// The cap last read, or the configured one, whichever is less.
    fn cap_known(&self) -> Option<usize> {
        let read = usize::try_from(self.cap.load(Ordering::Relaxed)).ok();
        match (read, self.configured) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn note_cap(&self, cap: i64) {
        self.cap.store(cap, Ordering::Relaxed);
    }

    async fn acquire(self: &Arc<Self>) -> Result<RedisInFlightPermit, Error> {
        let _turn = self.turn.lock().await;
        let mut pause = Duration::from_millis(1);
        loop {
            let holder: Arc<str> = Arc::from(format!(
                "{:016x}:{}",
                self.process,
                self.ids.fetch_add(1, Ordering::Relaxed)
            ));
            // Given back if this future is dropped while Redis is asked
            // (the slot may be granted as it is dropped).
            let mut unclaimed = Unclaimed {
                inner: Some(Arc::clone(self)),
                holder: Arc::clone(&holder),
            };
            match self.take(&holder).await {
                Ok(Taken::Granted {
                    in_flight,
                    cap,
                    number,
                }) => {
                    unclaimed.inner = None;
                    self.note_cap(cap.map_or(-1, |c| c as i64));
                    self.hold(&holder);
                    return Ok(RedisInFlightPermit {
                        inner: Arc::clone(self),
                        holder: Mutex::new(Some(holder)),
                        number,
                        in_flight,
                        outcome: AtomicU8::new(NO_LESSON),
                        _local: None,
                    });
                }
                Ok(Taken::Full { cap }) => {
                    unclaimed.inner = None;
                    self.note_cap(cap.map_or(-1, |c| c as i64));
                    // A slot freed here wakes the head at once; one freed
                    // by another process is found by asking again.
                    let freed = std::pin::pin!(self.freed.notified());
                    let slept = std::pin::pin!(tokio::time::sleep(pause));
                    if let futures::future::Either::Left(_) =
                        futures::future::select(slept, freed).await
                    {
                        pause = (pause * 2).min(self.poll);
                    }
                }
                Err(error) => return self.on_fault(error).await,
            }
        }
    }

    /// Redis failed: what the fault policy says.
    async fn on_fault(self: &Arc<Self>, error: Error) -> Result<RedisInFlightPermit, Error> {
        let local = match self.link.fault_policy() {
            FaultPolicy::FailClosed => return Err(error),
            FaultPolicy::FailOpen => None,
            FaultPolicy::LocalFallback { processes } => {
                let semaphore = {
                    let mut fallback = crate::sync::lock(&self.fallback);
                    match (&*fallback, self.cap_known()) {
                        (Some(semaphore), _) => Some(Arc::clone(semaphore)),
                        (None, Some(cap)) => {
                            let share = (cap / processes.max(1) as usize).max(1);
                            let semaphore = Arc::new(Semaphore::new(share));
                            *fallback = Some(Arc::clone(&semaphore));
                            Some(semaphore)
                        }
                        (None, None) => None,
                    }
                };
                match semaphore {
                    // Never closed: the semaphore lives as long as `self`.
                    Some(semaphore) => semaphore.acquire_owned().await.ok(),
                    None => None,
                }
            }
        };
        Ok(RedisInFlightPermit {
            inner: Arc::clone(self),
            holder: Mutex::new(None),
            number: 0,
            in_flight: 0,
            outcome: AtomicU8::new(NO_LESSON),
            _local: local,
        })
    }

    /// Count `holder` as held here, its lease renewed until it is given
    /// back; start the task that renews if none runs.
    fn hold(self: &Arc<Self>, holder: &Arc<str>) {
        let mut holders = crate::sync::lock(&self.holders);
        holders.0.insert(Arc::clone(holder));
        if holders.1 {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            holders.1 = true;
            runtime.spawn(renew_leases(Arc::downgrade(self), self.lease / 3));
        }
    }

    fn args(&self, op: &str) -> Vec<Vec<u8>> {
        let mut args = vec![op.as_bytes().to_vec()];
        for n in [
            millis(self.lease).to_string(),
            self.configured.unwrap_or(0).to_string(),
            self.link
                .learned_ttl_ms()
                .max(millis(self.lease) * 2)
                .to_string(),
            DECREASE.to_string(),
            RECOVER_ROUNDS.to_string(),
        ] {
            args.push(n.into_bytes());
        }
        args
    }

    async fn run(&self, args: Vec<Vec<u8>>) -> Result<Vec<i64>, Error> {
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        self.link.eval(&IN_FLIGHT, SOURCE, &self.keys, &args).await
    }

    async fn take(&self, holder: &str) -> Result<Taken, Error> {
        let mut args = self.args("take");
        args.push(holder.as_bytes().to_vec());
        let reply = self.run(args).await?;
        let cap = |c: i64| usize::try_from(c).ok();
        match *reply {
            [1, in_flight, c, number] => Ok(Taken::Granted {
                in_flight: usize::try_from(in_flight).unwrap_or(0),
                cap: cap(c),
                number: u64::try_from(number).unwrap_or(0),
            }),
            [0, _, c, _] => Ok(Taken::Full { cap: cap(c) }),
            _ => Err(unexpected(&reply)),
        }
    }

    async fn done(
        &self,
        holder: &str,
        outcome: u8,
        (number, in_flight): (u64, usize),
    ) -> Result<(), Error> {
        let mut args = self.args("done");
        for arg in [
            holder.to_owned(),
            outcome.to_string(),
            number.to_string(),
            in_flight.to_string(),
        ] {
            args.push(arg.into_bytes());
        }
        match *self.run(args).await? {
            [2, cap] => {
                self.note_cap(cap);
                Ok(())
            }
            ref reply => Err(unexpected(reply)),
        }
    }

    async fn renew(&self, holders: &[Arc<str>]) -> Result<(), Error> {
        let mut args = self.args("renew");
        args.extend(holders.iter().map(|h| h.as_bytes().to_vec()));
        match *self.run(args).await? {
            [3, _] => Ok(()),
            ref reply => Err(unexpected(reply)),
        }
    }

    /// Give `holder` back with what its call taught, in a task of its own
    /// (a drop cannot wait); without a runtime, its lease frees it.
    fn give_back(self: &Arc<Self>, holder: Arc<str>, outcome: u8, taken: (u64, usize)) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let inner = Arc::clone(self);
            runtime.spawn(async move { inner.give_back_now(holder, outcome, taken).await });
        } else {
            crate::sync::lock(&self.holders).0.remove(&holder);
        }
    }

    /// Give `holder` back with what its call taught, now.
    async fn give_back_now(&self, holder: Arc<str>, outcome: u8, taken: (u64, usize)) {
        crate::sync::lock(&self.holders).0.remove(&holder);
        if let Err(error) = self.done(&holder, outcome, taken).await {
            tracing::debug!(target: "reqwest_pace", %error, "a slot in flight was not given back; its lease frees it");
        }
        self.freed.notify_one();
    }
}

/// Renew the leases of the slots held, every `every`, until none is held
/// (the next slot taken starts another task) or the cap is dropped.
async fn renew_leases(inner: Weak<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let holders: Vec<Arc<str>> = {
            let mut holders = crate::sync::lock(&inner.holders);
            if holders.0.is_empty() {
                holders.1 = false;
                return;
            }
            holders.0.iter().cloned().collect()
        };
        if let Err(error) = inner.renew(&holders).await {
            tracing::debug!(target: "reqwest_pace", %error, "leases of slots in flight not renewed");
        }
    }
}

/// A slot asked for and not yet known granted: given back when dropped
/// armed.
struct Unclaimed {
    inner: Option<Arc<Inner>>,
    holder: Arc<str>,
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            inner.give_back(Arc::clone(&self.holder), NO_LESSON, (0, 0));
        }
    }
}

impl RedisInFlightPermit {
    /// Its call was answered, admitted by the server: a learned cap below
    /// what the fleet was seen to admit counts it toward climbing back.
    pub fn answered(&self) {
        self.outcome.store(ANSWERED, Ordering::Relaxed);
    }

    /// Its call was refused for concurrency: the shared cap goes down when
    /// the slot is given back.
    pub fn refused(&self) {
        self.outcome.store(REFUSED, Ordering::Relaxed);
    }

    /// The fleet's calls in flight as the slot was granted, this one
    /// among them (0 for a slot granted without Redis).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Its call was refused for concurrency: give the slot back now, the
    /// shared cap lowered, before the caller goes on (the client's own
    /// path: what the refusal taught holds for the fleet's next calls).
    #[cfg(feature = "client")]
    async fn refuse_now(&self) {
        let holder = crate::sync::lock(&self.holder).take();
        if let Some(holder) = holder {
            self.inner
                .give_back_now(holder, REFUSED, (self.number, self.in_flight))
                .await;
        }
    }
}

impl Drop for RedisInFlightPermit {
    fn drop(&mut self) {
        let holder = crate::sync::lock(&self.holder).take();
        if let Some(holder) = holder {
            let outcome = self.outcome.load(Ordering::Relaxed);
            self.inner
                .give_back(holder, outcome, (self.number, self.in_flight));
        }
    }
}

impl fmt::Debug for RedisInFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisInFlight")
            .field("keys", &self.inner.keys)
            .field("lease", &self.inner.lease)
            .field("configured", &self.inner.configured)
            .field("cap", &self.cap())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RedisInFlightPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisInFlightPermit")
            .field("holder", &self.holder)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "client")]
impl crate::client::concurrency::SharedInFlight for RedisInFlight {
    fn take(
        &self,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Box<dyn crate::client::concurrency::SharedSlot>, Error>,
    > {
        Box::pin(async move {
            let permit = self.acquire().await?;
            Ok(Box::new(permit) as Box<dyn crate::client::concurrency::SharedSlot>)
        })
    }

    fn cap(&self) -> Option<usize> {
        RedisInFlight::cap(self)
    }

    fn held(&self) -> usize {
        RedisInFlight::held(self)
    }
}

#[cfg(feature = "client")]
impl crate::client::concurrency::SharedSlot for RedisInFlightPermit {
    fn answered(&self) {
        RedisInFlightPermit::answered(self);
    }

    fn refused(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(self.refuse_now())
    }

    fn in_flight(&self) -> usize {
        RedisInFlightPermit::in_flight(self)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unexpected(reply: &[i64]) -> Error {
    Error::Backend {
        message: format!("unexpected in-flight script reply {reply:?}"),
        source: None,
    }
}

#[cfg(all(test, feature = "client"))]
mod tests {
    use super::*;

    #[test]
    fn learns_as_a_single_client_does() {
        let tuning = crate::client::tuning::TUNING.concurrency;
        assert_eq!(DECREASE, tuning.decrease);
        assert_eq!(RECOVER_ROUNDS, tuning.recover_rounds);
    }
}
