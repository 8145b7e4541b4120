//! The connection, its settings and the fault policy.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, FromRedisValue, IntoConnectionInfo, Script, ServerErrorKind};
use tokio::time::Instant;

use super::bucket::RedisTokenBucket;
use super::in_flight::RedisInFlight;
use super::log::RedisSlidingLog;
use super::scripts;
use crate::limiter::RequestRate;
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
/// How long a limiter whose rate was learned keeps it in Redis by default
/// ([`RedisBackend::with_learned_ttl`]): an hour, as a scope remembers
/// what its keys learned.
pub const DEFAULT_LEARNED_TTL: Duration = Duration::from_secs(3_600);

/// The default time after a failed call during which decisions come from
/// the fault policy without trying Redis.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_millis(500);

/// What a Redis-backed limiter decides when Redis cannot answer: it is
/// unreachable, it timed out, or it replied with an error.
///
/// Whatever the policy, a failed call never takes longer than the
/// [timeout](RedisBackend::with_timeout), nothing panics, and the limiter
/// goes back to Redis by itself once Redis answers again (the connection
/// reconnects in the background; after a failure the limiter waits
/// the [cooldown](RedisBackend::with_cooldown) before trying Redis again,
/// so an outage does not cost every decision a full timeout).
///
/// ```
/// use reqwest_pace::redis::{FaultPolicy, RedisBackend};
/// use reqwest_pace::{Error, RequestRate};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// // Nothing listens on port 1: every call fails and the policy decides.
/// let backend = RedisBackend::open("redis://127.0.0.1:1/")?
///     .with_fault_policy(FaultPolicy::LocalFallback { processes: 4 });
/// // The fleet's 40 per second, bursts of 8, become 10 per second, bursts
/// // of 2, in this process while Redis is away.
/// let bucket = backend.token_bucket("api", RequestRate::per_second(40)?, 8)?;
/// bucket.try_acquire(2).await?;
/// assert!(matches!(bucket.try_acquire(1).await, Err(Error::NotYet { .. })));
///
/// let closed = RedisBackend::open("redis://127.0.0.1:1/")?;
/// let bucket = closed.token_bucket("api", RequestRate::per_second(40)?, 8)?;
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

/// A connection a [`RedisBackend`] can run on: the single-server
/// [`ConnectionManager`] or the Redis Cluster [`ClusterConnection`].
///
/// Both multiplex calls over shared sockets, are cheap to clone and
/// reconnect by themselves; the cluster connection also follows `MOVED`
/// and `ASK` redirections and refreshes its slot map after a resharding or
/// a failover. The trait is sealed: these two are the only kinds.
pub trait RedisConnection: sealed::Sealed + Clone + Send + Sync + 'static {}

impl RedisConnection for ConnectionManager {}
impl RedisConnection for ClusterConnection {}

mod sealed {
    use redis::aio::ConnectionManager;
    use redis::cluster_async::ClusterConnection;

    /// The connection with its kind erased, so that the limiters need no
    /// type parameter.
    #[derive(Clone)]
    pub enum Conn {
        Single(ConnectionManager),
        Cluster(ClusterConnection),
    }

    pub trait Sealed {
        fn erase(&self) -> Conn;
    }

    impl Sealed for ConnectionManager {
        fn erase(&self) -> Conn {
            Conn::Single(self.clone())
        }
    }

    impl Sealed for ClusterConnection {
        fn erase(&self) -> Conn {
            Conn::Cluster(self.clone())
        }
    }
}

use sealed::Conn;

/// A backend on a Redis Cluster, as made by
/// [`RedisBackend::connect_cluster`] and [`RedisBackend::open_cluster`].
pub type RedisClusterBackend = RedisBackend<ClusterConnection>;

/// A Redis connection and the settings shared by the limiters made from it.
///
/// The connection is a single server's [`ConnectionManager`] (the default,
/// from [`connect`](Self::connect) or [`open`](Self::open)) or a Redis
/// Cluster's [`ClusterConnection`] (from
/// [`connect_cluster`](RedisBackend::connect_cluster) or
/// [`open_cluster`](RedisBackend::open_cluster)); the limiters, the
/// settings and the fault policy are the same on both.
///
/// Cloning is cheap: clones share the connection (which multiplexes calls
/// and reconnects by itself) and the record of recent failures, so the
/// cooldown applies to every limiter of the backend at once (on a
/// cluster, to every limiter whose keys hash to the failed slot).
///
/// ```no_run
/// use std::time::Duration;
/// use reqwest_pace::redis::{FaultPolicy, RedisBackend};
/// use reqwest_pace::{Limiter, RequestRate};
///
/// # async fn run() -> Result<(), reqwest_pace::Error> {
/// let backend = RedisBackend::connect("redis://127.0.0.1:6380/")
///     .await?
///     .with_prefix("myapp:pace:")
///     .with_timeout(Duration::from_millis(100))
///     .with_fault_policy(FaultPolicy::LocalFallback { processes: 8 });
/// // One budget of 10 per second, bursts of 20, for all 8 replicas.
/// let bucket = backend.token_bucket("api.example.com", RequestRate::per_second(10)?, 20)?;
/// bucket.acquire(1).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisBackend<C = ConnectionManager> {
    conn: C,
    settings: Settings,
}

/// Everything of a backend but the typed connection.
#[derive(Clone)]
struct Settings {
    prefix: Arc<str>,
    timeout: Duration,
    policy: FaultPolicy,
    idle_ttl: Duration,
    learned_ttl: Duration,
    cooldown: Duration,
    health: Arc<Health>,
    cluster: bool,
}

/// When the last failure was, per scope (the whole server, or one cluster
/// slot), shared by clones.
#[derive(Default)]
struct Health {
    down_until: Mutex<HashMap<u16, Instant>>,
}

impl Health {
    fn down_until(&self, scope: u16) -> Option<Instant> {
        crate::sync::lock(&self.down_until).get(&scope).copied()
    }

    fn fail(&self, scope: u16, until: Instant) {
        crate::sync::lock(&self.down_until).insert(scope, until);
    }

    /// Forget a failure in `scope`; whether there was one.
    fn heal(&self, scope: u16) -> bool {
        let mut map = crate::sync::lock(&self.down_until);
        !map.is_empty() && map.remove(&scope).is_some()
    }
}

fn backend_error(message: impl Into<String>, source: redis::RedisError) -> Error {
    Error::Backend {
        message: message.into(),
        source: Some(Box::new(source)),
    }
}

fn no_runtime() -> Result<(), Error> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::config(
            "a Redis backend must be created inside a Tokio runtime",
        ));
    }
    Ok(())
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
/// (the part between the first `{` and the next `}`, when not empty) or
/// of the whole key, modulo 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

impl RedisBackend<ConnectionManager> {
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
        no_runtime()?;
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
}

impl RedisBackend<ClusterConnection> {
    /// Connect to a Redis Cluster through any of its `nodes` (each a
    /// `redis://host:port/`; the others are found from the cluster's slot
    /// map) and load the scripts on every node, failing with
    /// [`Error::Backend`] if the cluster does not answer within the default
    /// timeout, or [`Error::InvalidConfig`] on malformed node addresses.
    ///
    /// Must be called inside a Tokio runtime.
    ///
    /// ```no_run
    /// use reqwest_pace::redis::RedisBackend;
    /// use reqwest_pace::RequestRate;
    ///
    /// # async fn run() -> Result<(), reqwest_pace::Error> {
    /// let backend = RedisBackend::connect_cluster([
    ///     "redis://10.0.0.1:6379/",
    ///     "redis://10.0.0.2:6379/",
    /// ])
    /// .await?;
    /// // The bucket's key is `pace:{api.example.com}:bucket`, in one slot.
    /// let bucket = backend.token_bucket("api.example.com", RequestRate::per_second(20)?, 5)?;
    /// bucket.acquire(1).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<RedisClusterBackend, Error> {
        let backend = RedisBackend::open_cluster(nodes)?;
        backend.load_scripts().await?;
        Ok(backend)
    }

    /// Like [`connect_cluster`](Self::connect_cluster) but without waiting
    /// for the network: the cluster's slot map is fetched in the
    /// background and the scripts are loaded on demand, so a process can
    /// start while the cluster is down.
    ///
    /// Must be called inside a Tokio runtime (the cluster connection spawns
    /// a task); outside one this is an [`Error::InvalidConfig`].
    pub fn open_cluster<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<RedisClusterBackend, Error> {
        no_runtime()?;
        // Few, short retries inside the cluster client: a MOVED or a
        // failover is followed at once, and a call that cannot succeed
        // within the backend's own timeout is better decided by the fault
        // policy than retried behind it.
        let client = ClusterClient::builder(nodes)
            .retries(3)
            .min_retry_wait(10)
            .max_retry_wait(100)
            .build()
            .map_err(|e| Error::config(format!("bad Redis Cluster node list: {e}")))?;
        let config = ClusterConfig::new().set_connection_timeout(Duration::from_secs(1));
        Ok(RedisBackend::new(
            client.get_pending_async_connection_with_config(config),
        ))
    }
}

impl<C: RedisConnection> RedisBackend<C> {
    /// Use an existing connection: a [`ConnectionManager`] or a
    /// [`ClusterConnection`] with your own TLS, credentials or
    /// reconnection settings.
    pub fn new(conn: C) -> RedisBackend<C> {
        let cluster = matches!(conn.erase(), Conn::Cluster(_));
        RedisBackend {
            conn,
            settings: Settings {
                prefix: Arc::from(DEFAULT_PREFIX),
                timeout: DEFAULT_TIMEOUT,
                policy: FaultPolicy::default(),
                idle_ttl: DEFAULT_IDLE_TTL,
                learned_ttl: DEFAULT_LEARNED_TTL,
                cooldown: DEFAULT_COOLDOWN,
                health: Arc::default(),
                cluster,
            },
        }
    }

    /// Prefix every key with `prefix` (default `"pace:"`). It must not
    /// contain `{` or `}`, which would change the keys' hash tags; limiters
    /// made from a backend with such a prefix refuse to build.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> RedisBackend<C> {
        self.settings.prefix = Arc::from(prefix.into());
        self
    }

    /// Give up on a Redis call after `timeout` (default 200 ms) and decide
    /// by the fault policy. A zero timeout is refused when a limiter is
    /// built.
    pub fn with_timeout(mut self, timeout: Duration) -> RedisBackend<C> {
        self.settings.timeout = timeout;
        self
    }

    /// What to decide when Redis cannot answer (default
    /// [`FaultPolicy::FailClosed`]).
    pub fn with_fault_policy(mut self, policy: FaultPolicy) -> RedisBackend<C> {
        self.settings.policy = policy;
        self
    }

    /// How long a key lives on after its limiter is back to its fresh state
    /// (default 60 s). The expiry is set with `PEXPIRE` on every write, so
    /// keys of clients that went away never pile up.
    pub fn with_idle_ttl(mut self, idle_ttl: Duration) -> RedisBackend<C> {
        self.settings.idle_ttl = idle_ttl;
        self
    }

    /// How long a limiter that has learned a rate from a server (through
    /// [`Adjustment::SetRate`](crate::Adjustment::SetRate), `GrowRate` or
    /// `Cut`) keeps it in Redis at least, after its last write (default an
    /// hour): every process that uses the key again within it, a restarted
    /// one included, starts from what the fleet learned instead of blind.
    /// Zero keeps it only as long as the idle TTL.
    pub fn with_learned_ttl(mut self, learned_ttl: Duration) -> RedisBackend<C> {
        self.settings.learned_ttl = learned_ttl;
        self
    }

    /// After a failed call, skip Redis for `cooldown` (default 500 ms) and
    /// decide by the fault policy at once. Zero tries Redis on every call.
    /// On a cluster the cooldown is kept per hash slot, so a master that is
    /// down does not hold back the keys of the others.
    pub fn with_cooldown(mut self, cooldown: Duration) -> RedisBackend<C> {
        self.settings.cooldown = cooldown;
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.settings.prefix
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// The fault policy.
    pub fn fault_policy(&self) -> FaultPolicy {
        self.settings.policy
    }

    /// Whether the connection is to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.settings.cluster
    }

    /// The connection, for commands of your own.
    pub fn connection(&self) -> &C {
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
        rate: RequestRate,
        capacity: u64,
    ) -> Result<RedisTokenBucket, Error> {
        RedisTokenBucket::new(self.link(), key.as_ref(), rate, capacity)
    }

    /// A sliding window log shared by every process using the same Redis,
    /// prefix and `key`: at most `limit.count()` tokens in any window of
    /// `limit.per()`, exactly.
    ///
    /// Fails on an empty key, a prefix with `{` or `}`, a zero timeout, a
    /// fault policy with zero processes, or a limit above
    /// [`MAX_LOG_LIMIT`](super::MAX_LOG_LIMIT).
    pub fn sliding_log(
        &self,
        key: impl AsRef<str>,
        limit: RequestRate,
    ) -> Result<RedisSlidingLog, Error> {
        RedisSlidingLog::new(self.link(), key.as_ref(), limit)
    }

    /// A cap on calls in flight per `key` shared by every process using
    /// the same Redis and prefix: configured, learned from concurrency
    /// refusals, or both (see [`RedisInFlight`]).
    ///
    /// Fails on an empty key, a prefix with `{` or `}`, a zero timeout or
    /// a fault policy with zero processes.
    pub fn in_flight(&self, key: impl AsRef<str>) -> Result<RedisInFlight, Error> {
        RedisInFlight::new(self.link(), key.as_ref())
    }

    /// Load every script with `SCRIPT LOAD` (on a cluster, on every node),
    /// so that the first decisions are a single `EVALSHA` each. Not needed
    /// for correctness: a missing script is sent again on demand.
    pub async fn load_scripts(&self) -> Result<(), Error> {
        self.link().load_scripts().await
    }

    /// What a limiter keeps of its backend.
    fn link(&self) -> Link {
        Link {
            conn: self.conn.erase(),
            settings: self.settings.clone(),
        }
    }
}

/// A backend with its connection's type erased: what a limiter keeps, and
/// where every call to Redis is made.
#[derive(Clone)]
pub(crate) struct Link {
    conn: Conn,
    settings: Settings,
}

impl Link {
    pub(crate) fn fault_policy(&self) -> FaultPolicy {
        self.settings.policy
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    fn timed_out(&self) -> Error {
        Error::Backend {
            message: format!("Redis did not answer within {:?}", self.settings.timeout),
            source: None,
        }
    }

    /// The key for `key` and `suffix`: `prefix{key}:suffix`. The braces are
    /// a hash tag, so every key of one limiter lands in one cluster slot.
    pub(crate) fn key(&self, key: &str, suffix: &str) -> String {
        format!("{}{{{key}}}:{suffix}", self.settings.prefix)
    }

    /// Check what a limiter needs of its key and of the backend's settings.
    pub(crate) fn validate(&self, key: &str) -> Result<(), Error> {
        let settings = &self.settings;
        if key.is_empty() {
            return Err(Error::config("a Redis limiter needs a non-empty key"));
        }
        if settings.prefix.contains(['{', '}']) {
            return Err(Error::config(format!(
                "the key prefix {:?} must not contain '{{' or '}}' (hash tags)",
                settings.prefix
            )));
        }
        if settings.timeout.is_zero() {
            return Err(Error::config("a Redis limiter needs a timeout above zero"));
        }
        if let FaultPolicy::LocalFallback { processes: 0 } = settings.policy {
            return Err(Error::config(
                "a local fallback needs a process count above zero",
            ));
        }
        Ok(())
    }

    pub(crate) fn idle_ttl_ms(&self) -> u64 {
        ttl_ms(self.settings.idle_ttl)
    }

    pub(crate) fn learned_ttl_ms(&self) -> u64 {
        ttl_ms(self.settings.learned_ttl)
    }

    /// Where a failure on `key` counts for the cooldown: the whole server,
    /// or on a cluster the key's slot (all of a limiter's keys share it).
    fn scope(&self, key: &str) -> u16 {
        if self.settings.cluster {
            key_slot(key.as_bytes())
        } else {
            0
        }
    }

    /// Send one command, routed by its keys on a cluster.
    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> redis::RedisResult<T> {
        match &self.conn {
            Conn::Single(conn) => cmd.query_async(&mut conn.clone()).await,
            Conn::Cluster(conn) => cmd.query_async(&mut conn.clone()).await,
        }
    }

    async fn load_scripts(&self) -> Result<(), Error> {
        let load = async {
            for script in scripts::all() {
                match &self.conn {
                    Conn::Single(conn) => script.load_async(&mut conn.clone()).await?,
                    Conn::Cluster(conn) => script.load_async(&mut conn.clone()).await?,
                };
            }
            Ok::<(), redis::RedisError>(())
        };
        match tokio::time::timeout(self.settings.timeout, load).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(backend_error("loading the limiter scripts failed", e)),
            Err(_) => Err(self.timed_out()),
        }
    }

    /// `EVALSHA`, and on `NOSCRIPT` the same call as `EVAL` with the
    /// script's source. `EVAL` goes to the node that owns the keys (where
    /// a `SCRIPT LOAD`, sent to every node, would fail if any node were
    /// down) and leaves the script cached there for the next `EVALSHA`.
    async fn evalsha_or_eval(
        &self,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[&[u8]],
    ) -> redis::RedisResult<Vec<i64>> {
        let call = |command: &str, body: &str| {
            let mut cmd = redis::cmd(command);
            cmd.arg(body).arg(keys.len());
            for key in keys {
                cmd.arg(key.as_str());
            }
            for arg in args {
                cmd.arg(*arg);
            }
            cmd
        };
        match self.query(&call("EVALSHA", script.get_hash())).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.query(&call("EVAL", source)).await
            }
            other => other,
        }
    }

    /// Run one script call within the timeout. Any failure (timeout, lost
    /// connection, error reply) starts the cooldown and comes back as
    /// [`Error::Backend`]; during the cooldown Redis is not tried at all
    /// (on a cluster, for keys of the failed slot).
    pub(crate) async fn eval(
        &self,
        script: &Script,
        source: &str,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<Vec<i64>, Error> {
        let health = &self.settings.health;
        let scope = keys.first().map_or(0, |key| self.scope(key));
        if let Some(until) = health.down_until(scope) {
            if Instant::now() < until {
                return Err(Error::Backend {
                    message: "Redis failed moments ago; not tried during the cooldown".into(),
                    source: None,
                });
            }
        }
        let call = self.evalsha_or_eval(script, source, keys, args);
        let result = match tokio::time::timeout(self.settings.timeout, call).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(backend_error("the limiter script failed", e)),
            Err(_) => Err(self.timed_out()),
        };
        match &result {
            Ok(_) => {
                if health.heal(scope) {
                    tracing::info!(scope, "Redis limiter backend answers again");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, policy = ?self.settings.policy, scope, "Redis limiter call failed");
                health.fail(scope, Instant::now() + self.settings.cooldown);
            }
        }
        result
    }

    /// `HGET key field` as an integer, within the timeout; `None` for a
    /// missing field or any failure (callers use it only as a hint).
    pub(crate) async fn hget_i64(&self, key: &str, field: &str) -> Option<i64> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(key).arg(field);
        match tokio::time::timeout(self.settings.timeout, self.query::<Option<i64>>(&cmd)).await {
            Ok(Ok(value)) => value,
            _ => None,
        }
    }
}

impl<C> fmt::Debug for RedisBackend<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        f.debug_struct("RedisBackend")
            .field("cluster", &s.cluster)
            .field("prefix", &s.prefix)
            .field("timeout", &s.timeout)
            .field("policy", &s.policy)
            .field("idle_ttl", &s.idle_ttl)
            .field("learned_ttl", &s.learned_ttl)
            .field("cooldown", &s.cooldown)
            .finish_non_exhaustive()
    }
}

/// A TTL in milliseconds for `PEXPIRE`: ten years is forever for a
/// limiter, and keeps it in range.
fn ttl_ms(ttl: Duration) -> u64 {
    const MAX_MS: u128 = 10 * 365 * 24 * 3600 * 1000;
    u64::try_from(ttl.as_millis().min(MAX_MS)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_cluster_spec() {
        // Examples from the Redis Cluster specification and CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        // Only the hash tag counts; an empty tag counts the whole key.
        assert_eq!(key_slot(b"pace:{foo}:bucket"), key_slot(b"foo"));
        assert_eq!(key_slot(b"x{foo}{bar}"), key_slot(b"foo"));
        assert_ne!(key_slot(b"a{}b"), key_slot(b""));
    }
}
