//! Limiters whose state lives in Redis, so that a whole fleet of processes
//! keeps to one budget (feature `redis`).
//!
//! When several processes call the same API, a local bucket in each
//! multiplies the allowance by the number of processes. The limiters here
//! keep the state in Redis instead and implement the same [`Limiter`](crate::Limiter)
//! trait as the local [`TokenBucket`](crate::TokenBucket), so the throttled
//! client uses them per key without other changes:
//!
//! - [`RedisTokenBucket`]: the token bucket, with the same GCRA arithmetic
//!   as the local one (one integer of state, exact refusal times).
//! - [`RedisSlidingLog`]: an exact quota per sliding window, one sorted-set
//!   member per token.
//!
//! Both are made from a [`RedisBackend`], which holds the connection, the
//! key prefix, the per-call timeout and the [`FaultPolicy`]. The connection
//! is the `redis` crate's tokio
//! [`ConnectionManager`](redis::aio::ConnectionManager) for a single server
//! ([`RedisBackend::connect`]) or its
//! [`ClusterConnection`](redis::cluster_async::ClusterConnection) for a
//! Redis Cluster ([`RedisBackend::connect_cluster`]); both multiplex calls
//! and reconnect by themselves, and the limiters behave the same on either.
//!
//! ```no_run
//! use reqwest_pace::redis::{FaultPolicy, RedisBackend};
//! use reqwest_pace::{Limiter, RequestRate};
//! use std::sync::Arc;
//!
//! # async fn run() -> Result<(), reqwest_pace::Error> {
//! let backend = RedisBackend::connect("redis://127.0.0.1:6380/")
//!     .await?
//!     .with_fault_policy(FaultPolicy::LocalFallback { processes: 4 });
//! let limiter: Arc<dyn Limiter> =
//!     Arc::new(backend.token_bucket("api.example.com", RequestRate::per_second(20)?, 5)?);
//! limiter.acquire(1).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Design
//!
//! **One atomic step per decision.** Every decision and every adjustment is
//! one Lua script run with `EVALSHA`: read, decide and write happen inside
//! Redis with nothing in between, so concurrent processes cannot both take
//! the last token (a GET followed by a SET could). The scripts are loaded
//! with `SCRIPT LOAD` by [`RedisBackend::connect`] (on a cluster, on every
//! node); after a restart, a failover, a resharding or a `SCRIPT FLUSH`
//! the node answers `NOSCRIPT`, and the call is sent again as `EVAL` with
//! the script's source, within the same timeout. `EVAL` goes where the
//! keys are, and leaves the script cached there: on a cluster a
//! `SCRIPT LOAD`, which goes to every node, would fail while any node is
//! down.
//!
//! **Time comes from Redis.** The scripts read the clock with `TIME`, so
//! every process measures the bucket on the one clock that owns it, and
//! application servers whose clocks disagree by seconds still share a
//! consistent bucket. Passing the caller's time in `ARGV` would let a
//! process whose clock runs ahead refill the bucket early for everyone (and
//! one running behind would see time go backwards). The cost is that Redis
//! must be 5.0 or later (scripts are replicated by their effects, so a
//! non-deterministic `TIME` followed by writes is allowed), and the clock
//! resolution is Redis's microsecond. If Redis's own clock steps back, the
//! scripts count that as no time passed, never as tokens owed. Since the
//! decisions follow Redis's real clock, these limiters do not fit tests
//! under `tokio::time::pause()`: a paused clock would skip a reserved wait
//! that Redis still counts in real time.
//!
//! **Reservations, not polling.** [`RedisTokenBucket::acquire`] books the
//! earliest turn in the same script that finds it, and gets back how long
//! until then; it sleeps once, with `tokio::time::sleep`, and goes. Waiters
//! are therefore served in the order Redis saw them, across processes, and
//! a waiting process is not refused again and again. When a waiter wakes
//! it checks the key's block counter: if a Retry-After arrived while it
//! slept, its slot may lie inside the block, so it gives the slot up and
//! books again behind the block. Where a call of its process read the
//! counter since it booked, no more than two intervals of the key's rate
//! ago (50 ms at most), that reading answers; otherwise the check is one
//! more call, a read. A block another process records therefore reaches
//! this one's waiters within two intervals: about two turns per process
//! can go out into it.
//!
//! **Cancel safety.** Dropping an `acquire` future while it sleeps hands
//! its reservation back with a refund script, spawned on the current Tokio
//! runtime. For the sliding log the refund is exact: its members are
//! removed, which can never let a window overflow. For the token bucket,
//! whose state is a single instant, only the latest write can be undone
//! safely: the refund applies when nothing was written to the key since
//! the reservation and is otherwise a no-op, leaving the slot unused
//! (tokens are lost for the key, never granted twice). A future dropped
//! while its reserving call is still in flight cannot know whether the
//! call took effect; a slot it booked likewise goes unused.
//!
//! **Shared feedback.** [`Limiter::adjust`](crate::Limiter::adjust) writes to the shared state: a
//! Retry-After block seen by one process holds back every process, and
//! learned rates, capacities and remaining counts are seen by all.
//! Learned figures take precedence over the ones each process was built
//! with, as long as the key lives.
//!
//! **Keys.** A limiter named `key` uses `prefix{key}:bucket`, or
//! `prefix{key}:log` and `prefix{key}:log:meta`. The braces are a hash tag:
//! every key of a limiter maps to one Redis Cluster slot, and every key a
//! script touches is passed in `KEYS`, so each decision runs on the one
//! master that owns the slot, as it would on a single server. Limiters of
//! different names spread over the slots, and so over the masters.
//!
//! **Cluster.** The cluster connection follows `MOVED` and `ASK`: a slot
//! moved to another master (keys and all, by a resharding) keeps its
//! limiters' state, and a failover to a replica keeps what was replicated.
//! A master that restarts without persistence starts its keys from fresh,
//! as a single server would.
//!
//! ```no_run
//! use reqwest_pace::redis::{FaultPolicy, RedisBackend};
//! use reqwest_pace::RequestRate;
//!
//! # async fn run() -> Result<(), reqwest_pace::Error> {
//! let backend = RedisBackend::connect_cluster([
//!     "redis://10.0.0.1:6379/",
//!     "redis://10.0.0.2:6379/",
//!     "redis://10.0.0.3:6379/",
//! ])
//! .await?
//! .with_fault_policy(FaultPolicy::LocalFallback { processes: 4 });
//! let bucket = backend.token_bucket("api.example.com", RequestRate::per_second(20)?, 5)?;
//! bucket.acquire(1).await?;
//! # Ok(())
//! # }
//! ```
//!
//! **Expiry.** Every write sets `PEXPIRE` (milliseconds, never 0) to the
//! time until the limiter is back to its fresh state (full, unblocked,
//! empty window) plus the backend's idle TTL (60 s by default), so the keys
//! of clients that went away do not accumulate. A limiter that has learned
//! a rate from a server lives at least the backend's learned TTL (an hour
//! by default) after its last write: a process that comes back to the key
//! within it, or starts anew, goes on from what the fleet learned.
//!
//! # Faults
//!
//! Each call to Redis has a timeout (200 ms by default, see
//! [`RedisBackend::with_timeout`]). When a call fails (timeout, refused or
//! lost connection, error reply) the decision follows the backend's
//! [`FaultPolicy`]:
//!
//! - [`FailClosed`](FaultPolicy::FailClosed) (the default): the call fails
//!   with [`Error::Backend`](crate::Error::Backend); the shared budget is
//!   never exceeded.
//! - [`FailOpen`](FaultPolicy::FailOpen): everything is admitted.
//! - [`LocalFallback`](FaultPolicy::LocalFallback): a local token bucket
//!   takes over with the shared rate and capacity divided by the configured
//!   number of processes.
//!
//! After a failure the backend does not try Redis for a short cooldown
//! (500 ms by default) and decides by the policy at once, so an outage
//! costs at most one timeout per cooldown rather than one per decision.
//! On a cluster the cooldown is kept per hash slot: while one master is
//! down, the keys in its slots are decided by the policy and the keys of
//! the other masters go on deciding in Redis.
//! Meanwhile the connection reconnects in the background, and the
//! first call after the cooldown that gets an answer brings the limiter
//! back to Redis; no restart of the process is needed. State held only in
//! a Redis that restarted without persistence is gone: the limiters start
//! again from full, as a fresh local bucket would.
//!
//! The sleeping part of a reservation does not need Redis: a waiter whose
//! turn was booked before an outage keeps it.

mod backend;
mod bucket;
mod in_flight;
mod log;
mod scripts;
mod shared;

pub use backend::{
    FaultPolicy, RedisBackend, RedisClusterBackend, RedisConnection, DEFAULT_COOLDOWN,
    DEFAULT_IDLE_TTL, DEFAULT_LEARNED_TTL, DEFAULT_PREFIX, DEFAULT_TIMEOUT,
};
pub use bucket::{RedisTokenBucket, MAX_REFILL_NANOS};
pub use in_flight::{RedisInFlight, RedisInFlightPermit, DEFAULT_LEASE, DEFAULT_POLL};
pub use log::{RedisSlidingLog, MAX_LOG_LIMIT};
