//! The connection, its settings and the fault policy.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, Script};
use tokio::time::Instant;

use super::bucket::RedisTokenBucket;
use super::log::RedisSlidingLog;
use super::scripts;
use crate::limiter::Rate;
use crate::Error;

/// The default per-call timeout: one Redis round trip on a healthy network
/// is well under a millisecond, so 200 ms means Redis is in trouble.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "pace:";

/// The default time a key outlives the moment it is back to its fresh state
/// (so that limits learned from a server survive short pauses), matching
/// [`KeyedLimiter`](crate::KeyedLimiter)'s default idle timeout.
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(60);

/// The default time after a failed call during which decisions come from
/// the fault policy without trying Redis.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_millis(500);

/// What a Redis-backed limiter decides when Redis cannot answer: it is
/// unreachable, it timed out, or it replied with an error.
///
/// Whatever the policy, a failed call never takes longer than the
/// [timeout](RedisBackend::with_timeout), nothing panics, and the limiter
/// goes back to Redis by itself once Redis answers again (the connection
/// manager reconnects in the background; after a failure the limiter waits
/// the [cooldown](RedisBackend::with_cooldown) before trying Redis again,
/// so an outage does not cost every decision a full timeout).
///
/// ```
/// use reqwest_pace::redis::{FaultPolicy, RedisBackend};
/// use reqwest_pace::{Error, Rate};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// // Nothing listens on port 1: every call fails and the policy decides.
/// let backend = RedisBackend::open("redis://127.0.0.1:1/")?
///     .with_fault_policy(FaultPolicy::LocalFallback { processes: 4 });
/// // The fleet's 40 per second, bursts of 8, become 10 per second, bursts
/// // of 2, in this process while Redis is away.
/// let bucket = backend.token_bucket("api", Rate::per_second(40)?, 8)?;
/// bucket.try_acquire(2).await?;
/// assert!(matches!(bucket.try_acquire(1).await, Err(Error::Throttled { .. })));
///
/// let closed = RedisBackend::open("redis://127.0.0.1:1/")?;
/// let bucket = closed.token_bucket("api", Rate::per_second(40)?, 8)?;
/// assert!(matches!(bucket.try_acquire(1).await, Err(Error::Backend { .. })));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultPolicy {
    /// Refuse: `acquire`, `try_acquire` and `adjust` fail with
    /// [`Error::Backend`]. The shared budget is never exceeded, at the cost
    /// of no requests while Redis is down. The default.
    #[default]
    FailClosed,
    /// Admit everything and ignore adjustments while Redis is down: no
    /// request is held up by the limiter's own outage, and nothing limits
    /// the fleet meanwhile.
    FailOpen,
    /// Fall back to a local token bucket with the shared rate divided by
    /// `processes` and the shared capacity divided likewise (at least 1), so
    /// that `processes` replicas together keep roughly to the shared budget.
    /// Adjustments are applied to the local bucket as well as to Redis, so
    /// a Retry-After seen just before an outage still holds during it.
    LocalFallback {
        /// How many processes share the budget; at least 1.
        processes: u32,
    },
}

/// A Redis connection and the settings shared by the limiters made from it.
///
/// Cloning is cheap: clones share the connection (a
/// [`ConnectionManager`], which multiplexes calls and reconnects by itself)
/// and the record of recent failures, so the cooldown applies to every
/// limiter of the backend at once.
///
/// ```no_run
/// use std::time::Duration;
/// use reqwest_pace::redis::{FaultPolicy, RedisBackend};
/// use reqwest_pace::{Limiter, Rate};
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6380/")
///     .await?
///     .with_prefix("myapp:pace:")
///     .with_timeout(Duration::from_millis(100))
///     .with_fault_policy(FaultPolicy::LocalFallback { processes: 8 });
/// // One budget of 10 per second, bursts of 20, for all 8 replicas.
/// let bucket = backend.token_bucket("api.example.com", Rate::per_second(10)?, 20)?;
/// bucket.acquire(1).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    conn: ConnectionManager,
    prefix: Arc<str>,
    timeout: Duration,
    policy: FaultPolicy,
    idle_ttl: Duration,
    cooldown: Duration,
    health: Arc<Health>,
}

/// When the last failure was, shared by clones.
#[derive(Default)]
struct Health {
    down_until: Mutex<Option<Instant>>,
}

impl Health {
    fn down_until(&self) -> Option<Instant> {
        *crate::sync::lock(&self.down_until)
    }

    fn set(&self, until: Option<Instant>) {
        *crate::sync::lock(&self.down_until) = until;
    }
}

fn backend_error(message: impl Into<String>, source: redis::RedisError) -> Error {
    Error::Backend {
        message: message.into(),
        source: Some(Box::new(source)),
    }
}

impl RedisBackend {
    /// Connect to `url` (`redis://host:port/db`, `rediss://`, `unix://`)
    /// and load the scripts, failing with [`Error::Backend`] if Redis does
    /// not answer within the default timeout, or [`Error::InvalidConfig`]
    /// on a malformed URL.
    ///
    /// Must be called inside a Tokio runtime.
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<RedisBackend, Error> {
        let backend = RedisBackend::open(url)?;
        backend.load_scripts().await?;
        Ok(backend)
    }

    /// Like [`connect`](Self::connect) but without touching the network:
    /// the connection is made by the first call. A process can thus start
    /// while Redis is down, its decisions following the fault policy until
    /// Redis is up.
    ///
    /// Must be called inside a Tokio runtime (the connection manager spawns
    /// a task); outside one this is an [`Error::InvalidConfig`].
    pub fn open(url: impl IntoConnectionInfo) -> Result<RedisBackend, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::config(
                "a Redis backend must be created inside a Tokio runtime",
            ));
        }
        let client = redis::Client::open(url)
            .map_err(|e| Error::config(format!("bad Redis connection info: {e}")))?;
        // Reconnect promptly once Redis is back: the connection manager
        // retries with exponential backoff, capped here at one second.
        let config = ConnectionManagerConfig::new()
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
            .set_connection_timeout(Some(Duration::from_secs(1)));
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| Error::config(format!("cannot set up the Redis connection: {e}")))?;
        Ok(RedisBackend::new(conn))
    }

    /// Use an existing connection manager (with your own TLS, credentials
    /// or reconnection settings).
    pub fn new(conn: ConnectionManager) -> RedisBackend {
        RedisBackend {
            conn,
            prefix: Arc::from(DEFAULT_PREFIX),
            timeout: DEFAULT_TIMEOUT,
            policy: FaultPolicy::default(),
            idle_ttl: DEFAULT_IDLE_TTL,
            cooldown: DEFAULT_COOLDOWN,
            health: Arc::default(),
        }
    }

    /// Prefix every key with `prefix` (default `"pace:"`). It must not
    /// contain `{` or `}`, which would change the keys' hash tags; limiters
    /// made from a backend with such a prefix refuse to build.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> RedisBackend {
        self.prefix = Arc::from(prefix.into());
        self
    }

    /// Give up on a Redis call after `timeout` (default 200 ms) and decide
    /// by the fault policy. A zero timeout is refused when a limiter is
    /// built.
    pub fn with_timeout(mut self, timeout: Duration) -> RedisBackend {
        self.timeout = timeout;
        self
    }

    /// What to decide when Redis cannot answer (default
    /// [`FaultPolicy::FailClosed`]).
    pub fn with_fault_policy(mut self, policy: FaultPolicy) -> RedisBackend {
        self.policy = policy;
        self
    }

    /// How long a key lives on after its limiter is back to its fresh state
    /// (default 60 s). The expiry is set with `PEXPIRE` on every write, so
    /// keys of clients that went away never pile up; a limit learned from a
    /// server (a new rate, a lower capacity) lasts as long as the key.
    pub fn with_idle_ttl(mut self, idle_ttl: Duration) -> RedisBackend {
        self.idle_ttl = idle_ttl;
        self
    }

    /// After a failed call, skip Redis for `cooldown` (default 500 ms) and
    /// decide by the fault policy at once. Zero tries Redis on every call.
    pub fn with_cooldown(mut self, cooldown: Duration) -> RedisBackend {
        self.cooldown = cooldown;
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The fault policy.
    pub fn fault_policy(&self) -> FaultPolicy {
        self.policy
    }

    /// The connection, for commands of your own.
    pub fn connection(&self) -> &ConnectionManager {
        &self.conn
    }

    /// A token bucket shared by every process using the same Redis, prefix
    /// and `key`: `capacity` tokens (the burst), refilled at `rate`.
    ///
    /// Fails on a zero capacity, an empty key, a prefix with `{` or `}`,
    /// a zero timeout, a fault policy with zero processes, or a bucket
    /// whose refill takes longer than 2^52 ns (about 52 days), beyond
    /// which the script's arithmetic would no longer be exact.
    pub fn token_bucket(
        &self,
        key: impl AsRef<str>,
        rate: Rate,
        capacity: u64,
    ) -> Result<RedisTokenBucket, Error> {
        RedisTokenBucket::new(self.clone(), key.as_ref(), rate, capacity)
    }

    /// A sliding window log shared by every process using the same Redis,
    /// prefix and `key`: at most `limit.count()` tokens in any window of
    /// `limit.per()`, exactly.
    ///
    /// Fails on an empty key, a prefix with `{` or `}`, a zero timeout, a
    /// fault policy with zero processes, or a limit above
    /// [`MAX_LOG_LIMIT`](super::MAX_LOG_LIMIT).
    pub fn sliding_log(&self, key: impl AsRef<str>, limit: Rate) -> Result<RedisSlidingLog, Error> {
        RedisSlidingLog::new(self.clone(), key.as_ref(), limit)
    }

    /// Load every script with `SCRIPT LOAD`, so that the first decisions
    /// are a single `EVALSHA` each. Not needed for correctness: a missing
    /// script is loaded on demand.
    pub async fn load_scripts(&self) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let load = async {
            for script in scripts::all() {
                script.load_async(&mut conn).await?;
            }
            Ok::<(), redis::RedisError>(())
        };
        match tokio::time::timeout(self.timeout, load).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(backend_error("loading the limiter scripts failed", e)),
            Err(_) => Err(self.timed_out()),
        }
    }

    fn timed_out(&self) -> Error {
        Error::Backend {
            message: format!("Redis did not answer within {:?}", self.timeout),
            source: None,
        }
    }

    /// The key for `key` and `suffix`: `prefix{key}:suffix`. The braces are
    /// a hash tag, so every key of one limiter lands in one cluster slot.
    pub(crate) fn key(&self, key: &str, suffix: &str) -> String {
        format!("{}{{{key}}}:{suffix}", self.prefix)
    }

    /// Check what a limiter needs of its key and of the backend's settings.
    pub(crate) fn validate(&self, key: &str) -> Result<(), Error> {
        if key.is_empty() {
            return Err(Error::config("a Redis limiter needs a non-empty key"));
        }
        if self.prefix.contains(['{', '}']) {
            return Err(Error::config(format!(
                "the key prefix {:?} must not contain '{{' or '}}' (hash tags)",
                self.prefix
            )));
        }
        if self.timeout.is_zero() {
            return Err(Error::config("a Redis limiter needs a timeout above zero"));
        }
        if let FaultPolicy::LocalFallback { processes: 0 } = self.policy {
            return Err(Error::config(
                "a local fallback needs a process count above zero",
            ));
        }
        Ok(())
    }

    pub(crate) fn idle_ttl_ms(&self) -> u64 {
        // Ten years is forever for a limiter, and keeps `PEXPIRE` in range.
        const MAX_MS: u128 = 10 * 365 * 24 * 3600 * 1000;
        u64::try_from(self.idle_ttl.as_millis().min(MAX_MS)).unwrap_or(0)
    }

    /// Run one script call within the timeout. Any failure (timeout, lost
    /// connection, error reply) starts the cooldown and comes back as
    /// [`Error::Backend`]; during the cooldown Redis is not tried at all.
    pub(crate) async fn eval(
        &self,
        script: &Script,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<Vec<i64>, Error> {
        if let Some(until) = self.health.down_until() {
            if Instant::now() < until {
                return Err(Error::Backend {
                    message: "Redis failed moments ago; not tried during the cooldown".into(),
                    source: None,
                });
            }
        }
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key.as_str());
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.conn.clone();
        let outcome = tokio::time::timeout(self.timeout, invocation.invoke_async(&mut conn)).await;
        let result = match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(backend_error("the limiter script failed", e)),
            Err(_) => Err(self.timed_out()),
        };
        match &result {
            Ok(_) => {
                if self.health.down_until().is_some() {
                    self.health.set(None);
                    tracing::info!("Redis limiter backend answers again");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, policy = ?self.policy, "Redis limiter call failed");
                self.health.set(Some(Instant::now() + self.cooldown));
            }
        }
        result
    }

    /// `HGET key field` as an integer, within the timeout; `None` for a
    /// missing field or any failure (callers use it only as a hint).
    pub(crate) async fn hget_i64(&self, key: &str, field: &str) -> Option<i64> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HGET");
        cmd.arg(key).arg(field);
        let call = cmd.query_async::<Option<i64>>(&mut conn);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => value,
            _ => None,
        }
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("policy", &self.policy)
            .field("idle_ttl", &self.idle_ttl)
            .field("cooldown", &self.cooldown)
            .finish_non_exhaustive()
    }
}
