//! The Redis-backed limiters on a real Redis Cluster: three masters (no
//! replicas) started per test on free loopback ports, stopped on drop.
//! Decisions must stay within the budget on every master, follow a slot
//! that moves to another master, recover from a master's restart, and
//! follow the fault policy while a master is down.
//!
//! Everything runs on the real clock, with generous bounds: the tests must
//! pass on a loaded machine, so nothing asserts a throughput floor.
#![cfg(feature = "redis")]

mod redis_support;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, ServerErrorKind};
use redis_support::{free_port, spawn_redis_server};
use reqwest_pace::redis::{FaultPolicy, RedisBackend, RedisClusterBackend, RedisTokenBucket};
use reqwest_pace::{Adjustment, Error, RequestRate};
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// Generous room for a loaded machine on top of a call's timeout.
const SLACK: Duration = Duration::from_millis(400);

/// A port `p` such that `p` and its cluster bus port `p + 10000` are both
/// free on 127.0.0.1, both below Linux's ephemeral range (32768 up), where
/// outgoing connections could take them while a node is down.
fn free_cluster_port() -> u16 {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        ^ std::process::id().wrapping_mul(2_654_435_761);
    for attempt in 0..10_000u32 {
        let port = 10_000 + (seed.wrapping_add(attempt.wrapping_mul(7_919)) % 12_000) as u16;
        let bound = TcpListener::bind(("127.0.0.1", port))
            .and_then(|a| TcpListener::bind(("127.0.0.1", port + 10_000)).map(|b| (a, b)));
        if bound.is_ok() {
            return port;
        }
    }
    panic!("no free pair of ports for a cluster node");
}

/// One `redis-server` in cluster mode; killed (and reaped) on drop.
struct Node {
    port: u16,
    conf: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    /// A node on free ports, or `None` if it did not come up (another test
    /// took the port in between).
    fn start(dir: &std::path::Path) -> Option<Node> {
        let port = free_cluster_port();
        let mut node = Node {
            port,
            conf: dir.join(format!("nodes-{port}.conf")),
            dir: dir.to_path_buf(),
            child: None,
        };
        node.spawn().then_some(node)
    }

    /// Start the process, with the same port and nodes.conf as before, and
    /// wait until it answers; whether it did.
    fn spawn(&mut self) -> bool {
        let child = spawn_redis_server(self.port, |command| {
            command
                .args(["--cluster-enabled", "yes"])
                .arg("--cluster-config-file")
                .arg(&self.conf)
                .args(["--cluster-node-timeout", "3000"])
                // With no replicas, a dead master leaves its slots
                // uncovered; the other masters keep serving theirs.
                .args(["--cluster-require-full-coverage", "no"])
                .arg("--dir")
                .arg(&self.dir);
        });
        let pid = format!("process_id:{}", child.id());
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            // The answer must come from our process, not from another
            // test's server that got the port first.
            let info = cli(self.port, &["INFO", "server"]).unwrap_or_default();
            if info.lines().any(|l| l.trim() == pid) {
                return true;
            }
            let exited = self
                .child
                .as_mut()
                .is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
            if exited || std::time::Instant::now() > deadline {
                self.kill();
                return false;
            }
            std::thread::sleep(20 * MS);
        }
    }

    /// Start again after [`kill`](Self::kill), on the same port.
    fn restart(&mut self) {
        assert!(self.spawn(), "node on port {} did not restart", self.port);
    }

    /// SIGKILL: no shutdown, no goodbye to clients or to the other nodes.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `redis-cli -p port args...`, trimmed stdout; `None` if it could not run
/// or failed.
fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A three-master cluster in a directory of its own, removed on drop.
struct Cluster {
    nodes: Vec<Node>,
    dir: PathBuf,
}

impl Cluster {
    /// Start three nodes and make them a cluster; setting up again from
    /// scratch if a port was taken meanwhile by a test running beside.
    fn start() -> Cluster {
        for _ in 0..5 {
            if let Some(cluster) = Cluster::try_start() {
                return cluster;
            }
        }
        panic!("could not set up a three-master cluster");
    }

    fn try_start() -> Option<Cluster> {
        let dir = std::env::temp_dir().join(format!(
            "reqwest-pace-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // Dropped, it removes the directory and stops the nodes in it.
        let mut cluster = Cluster {
            nodes: Vec::new(),
            dir,
        };
        for _ in 0..3 {
            cluster.nodes.push(Node::start(&cluster.dir)?);
        }
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli must be installed (it comes with redis-server)");
        if !status.success() {
            return None;
        }
        cluster.wait_ok();
        Some(cluster)
    }

    /// Wait until every running node says `cluster_state:ok` and agrees
    /// that all 16384 slots are served.
    fn wait_ok(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                cli(n.port, &["CLUSTER", "INFO"]).is_some_and(|info| {
                    info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
                })
            });
            if ok {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the cluster did not reach cluster_state:ok"
            );
            std::thread::sleep(50 * MS);
        }
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Node::url).collect()
    }

    /// The index of the node that serves `key`'s slot (from that node's
    /// own view of the slots it owns).
    fn owner(&self, key: &str) -> usize {
        let slot = self.slot(key);
        self.nodes
            .iter()
            .position(|n| {
                cli(n.port, &["CLUSTER", "NODES"]).is_some_and(|nodes| {
                    nodes
                        .lines()
                        .filter(|l| l.contains("myself"))
                        .flat_map(|l| l.split_whitespace().skip(8))
                        .any(|range| serves(range, slot))
                })
            })
            .unwrap_or_else(|| panic!("no node serves slot {slot}"))
    }

    fn slot(&self, key: &str) -> u16 {
        cli(self.nodes[0].port, &["CLUSTER", "KEYSLOT", key])
            .and_then(|s| s.parse().ok())
            .expect("CLUSTER KEYSLOT")
    }

    fn id(&self, node: usize) -> String {
        cli(self.nodes[node].port, &["CLUSTER", "MYID"]).expect("CLUSTER MYID")
    }

    /// Move `key`'s slot, and the keys in it, from its owner to `to`, the
    /// way `redis-cli --cluster reshard` does: IMPORTING / MIGRATING,
    /// MIGRATE the keys, then SETSLOT NODE on every master. `between` runs
    /// once the keys have moved but the slot is still MIGRATING (clients
    /// get ASK then).
    async fn move_slot<F: std::future::Future<Output = ()>>(
        &self,
        key: &str,
        to: usize,
        between: impl FnOnce() -> F,
    ) {
        let from = self.owner(key);
        assert_ne!(from, to);
        let slot = self.slot(key).to_string();
        let (from_id, to_id) = (self.id(from), self.id(to));
        let (from_port, to_port) = (self.nodes[from].port, self.nodes[to].port);
        let run = |port: u16, args: &[&str]| {
            let out = cli(port, args).unwrap_or_default();
            assert!(
                !out.starts_with("ERR"),
                "redis-cli -p {port} {args:?}: {out}"
            );
            out
        };
        run(
            to_port,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id],
        );
        run(
            from_port,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id],
        );
        let keys = run(from_port, &["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]);
        let keys: Vec<&str> = keys.lines().collect();
        assert!(!keys.is_empty(), "nothing to migrate in slot {slot}");
        let port = to_port.to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(&keys);
        assert_eq!(run(from_port, &migrate), "OK");
        between().await;
        for node in [to, from, 3 - to - from] {
            run(
                self.nodes[node].port,
                &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id],
            );
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while self.owner(key) != to
            || self
                .nodes
                .iter()
                .any(|n| cli(n.port, &["CLUSTER", "NODES"]).is_none_or(|s| s.contains("->-")))
        {
            assert!(std::time::Instant::now() < deadline, "slot never moved");
            std::thread::sleep(50 * MS);
        }
        self.wait_ok();
    }
}

/// Whether a `CLUSTER NODES` slot field (`5461`, `0-5460`, or a migration
/// note in brackets) covers `slot`.
fn serves(range: &str, slot: u16) -> bool {
    if range.starts_with('[') {
        return false;
    }
    match range.split_once('-') {
        Some((lo, hi)) => match (lo.parse::<u16>(), hi.parse::<u16>()) {
            (Ok(lo), Ok(hi)) => (lo..=hi).contains(&slot),
            _ => false,
        },
        None => range.parse() == Ok(slot),
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A plain connection to one node, for reading what the limiters wrote.
async fn direct(node: &Node) -> MultiplexedConnection {
    redis::Client::open(node.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Redis `TIME` in microseconds (the nodes share this machine's clock).
async fn redis_time(conn: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1_000_000 + micros
}

/// The most a token bucket may grant between two `TIME` readings.
fn budget(capacity: u64, rate: RequestRate, from_us: u64, to_us: u64) -> u64 {
    capacity + (to_us - from_us) * 1_000 / rate.interval_nanos()
}

fn is_backend(result: &Result<(), Error>) -> bool {
    matches!(result, Err(Error::Backend { .. }))
}

/// A limiter name whose bucket key lives on node `node`.
fn name_on(cluster: &Cluster, node: usize, stem: &str) -> String {
    (0..)
        .map(|i| format!("{stem}{i}"))
        .find(|name| cluster.owner(&format!("pace:{{{name}}}:bucket")) == node)
        .unwrap()
}

/// A backend on the cluster, as another process would have: its own
/// connection, a timeout with room for a loaded machine, the scripts
/// loaded on every node.
async fn cluster_backend(cluster: &Cluster) -> RedisClusterBackend {
    let backend = RedisBackend::open_cluster(cluster.urls())
        .unwrap()
        .with_timeout(Duration::from_secs(1));
    backend.load_scripts().await.unwrap();
    backend
}

/// `tasks` tasks try `bucket` until `run` is over, each sleeping the wait
/// it is told on a refusal; any other outcome fails the test. Returns the
/// grants.
async fn hammer(bucket: RedisTokenBucket, tasks: usize, run: Duration) -> u64 {
    let bucket = Arc::new(bucket);
    redis_support::grant_until(vec![bucket; tasks], Instant::now() + run).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_buckets_on_every_master_never_over_admit() {
    let cluster = Cluster::start();
    let rate = RequestRate::per_second(100).unwrap();
    let capacity = 5;
    // One limiter per master, each key in a slot of its own, each used
    // through two backends (two processes).
    let names: Vec<String> = (0..3).map(|n| name_on(&cluster, n, "fleet")).collect();
    let slots: Vec<u16> = names
        .iter()
        .map(|n| cluster.slot(&format!("pace:{{{n}}}:bucket")))
        .collect();
    assert!(slots[0] != slots[1] && slots[1] != slots[2] && slots[0] != slots[2]);
    let (a, b) = (
        cluster_backend(&cluster).await,
        cluster_backend(&cluster).await,
    );
    assert!(a.is_cluster());
    let mut clock = direct(&cluster.nodes[0]).await;
    let from = redis_time(&mut clock).await;
    let mut runs = Vec::new();
    for name in &names {
        // The first token of a fresh bucket is there for the taking.
        let first = a.token_bucket(name, rate, capacity).unwrap();
        first.try_acquire(1).await.unwrap();
        for backend in [&a, &b] {
            let bucket = backend.token_bucket(name, rate, capacity).unwrap();
            runs.push(tokio::spawn(hammer(bucket, 8, 600 * MS)));
        }
    }
    let mut granted = [1u64; 3];
    for (k, run) in runs.into_iter().enumerate() {
        granted[k / 2] += run.await.unwrap();
    }
    let to = redis_time(&mut clock).await;
    let allowed = budget(capacity, rate, from, to);
    for (name, granted) in names.iter().zip(granted) {
        eprintln!("{name}: granted {granted}, budget {allowed}");
        assert!(granted <= allowed, "{name}: granted {granted} > {allowed}");
    }
    // Each bucket's key is on its own master, and nowhere else.
    for (node, name) in names.iter().enumerate() {
        let key = format!("pace:{{{name}}}:bucket");
        for (other, n) in cluster.nodes.iter().enumerate() {
            let mut conn = direct(n).await;
            let here: bool = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap_or(false);
            assert_eq!(here, other == node, "{key} on node {other}");
        }
    }

    // The sliding log's two keys share a slot, so its script runs there.
    let limit = RequestRate::new(10, 300 * MS).unwrap();
    let log = a.sliding_log("window", limit).unwrap();
    let [set, meta] = log.redis_keys();
    assert_eq!(cluster.slot(set), cluster.slot(meta));
    let from = redis_time(&mut clock).await;
    let mut granted = 0u64;
    let deadline = Instant::now() + 500 * MS;
    log.try_acquire(1).await.unwrap();
    granted += 1;
    while Instant::now() < deadline {
        match log.try_acquire(1).await {
            Ok(()) => granted += 1,
            Err(Error::NotYet { wait, .. }) => tokio::time::sleep(wait).await,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    let to = redis_time(&mut clock).await;
    let windows = (to - from) / 300_000 + 1;
    assert!(
        granted <= 10 * windows,
        "granted {granted} in {windows} windows"
    );

    // Waiting: each acquire books its turn on the key's master and sleeps
    // once, so six of them at one per 50 ms (burst 1) take 250 ms at
    // least, whatever the load.
    let steady = a
        .token_bucket("steady", RequestRate::new(1, 50 * MS).unwrap(), 1)
        .unwrap();
    let start = Instant::now();
    for _ in 0..6 {
        steady.acquire(1).await.unwrap();
    }
    assert!(start.elapsed() >= 245 * MS, "{:?}", start.elapsed());

    // A Retry-After seen through one backend holds back the other.
    let seen = a.token_bucket(&names[0], rate, capacity).unwrap();
    let other = b.token_bucket(&names[0], rate, capacity).unwrap();
    seen.adjust(Adjustment::BlockUntil(Instant::now() + 2_000 * MS))
        .await
        .unwrap();
    let wait = throttled_wait(other.try_acquire(1).await);
    assert!(wait > 1_000 * MS && wait <= 2_000 * MS, "{wait:?}");
}

fn throttled_wait(result: Result<(), Error>) -> Duration {
    match result {
        Err(Error::NotYet { wait, .. }) => wait,
        other => panic!("expected Throttled, got {other:?}"),
    }
}

async fn exists(node: &Node, key: &str) -> bool {
    let mut conn = direct(node).await;
    redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Whether the node holds the token bucket's script (`SCRIPT EXISTS`).
async fn cached(conn: &mut MultiplexedConnection) -> Vec<bool> {
    let sha = redis::Script::new(include_str!("../src/redis/lua/token_bucket.lua"))
        .get_hash()
        .to_string();
    redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&sha)
        .query_async(conn)
        .await
        .unwrap()
}

/// What `node` answers a plain command on `key`: `None` when it serves
/// it, else the redirection (`ASK` or `MOVED`).
async fn redirection(node: &Node, key: &str) -> Option<ErrorKind> {
    let mut conn = direct(node).await;
    let reply: Result<bool, _> = redis::cmd("EXISTS").arg(key).query_async(&mut conn).await;
    reply.err().map(|e| e.kind())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_reshard_moves_a_bucket_with_its_state_through_ask_and_moved() {
    let cluster = Cluster::start();
    let backend = cluster_backend(&cluster).await;
    let name = name_on(&cluster, 0, "moving");
    let bucket = backend
        .token_bucket(&name, RequestRate::per_minute(3).unwrap(), 3)
        .unwrap();
    let key = bucket.redis_key().to_string();
    // Drained: the next token is 20 s away, which only the state can know.
    bucket.try_acquire(3).await.unwrap();
    assert!(throttled_wait(bucket.try_acquire(1).await) > 10 * 1_000 * MS);

    // The master the slot moves to has never seen the script, as after a
    // failover: the call must bring it there itself.
    let mut target = direct(&cluster.nodes[1]).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut target)
        .await
        .unwrap();
    cluster
        .move_slot(&key, 1, || async {
            // The key has moved, the slot is still MIGRATING: the old
            // master answers ASK, and the decision follows it.
            assert_eq!(
                redirection(&cluster.nodes[0], &key).await,
                Some(ErrorKind::Server(ServerErrorKind::Ask))
            );
            let wait = throttled_wait(bucket.try_acquire(1).await);
            assert!(wait > 10 * 1_000 * MS, "state lost during ASK: {wait:?}");
        })
        .await;
    // The client still has the old slot map: the old master answers MOVED.
    assert_eq!(
        redirection(&cluster.nodes[0], &key).await,
        Some(ErrorKind::Server(ServerErrorKind::Moved))
    );
    let wait = throttled_wait(bucket.try_acquire(1).await);
    assert!(wait > 10 * 1_000 * MS, "state lost after MOVED: {wait:?}");
    // The key lives on the new master, and nothing is left in the slot on
    // the old one (which would answer MOVED to a plain EXISTS).
    assert!(exists(&cluster.nodes[1], &key).await);
    let slot = cluster.slot(&key).to_string();
    let left = cli(
        cluster.nodes[0].port,
        &["CLUSTER", "COUNTKEYSINSLOT", &slot],
    );
    assert_eq!(left.as_deref(), Some("0"));
    assert_eq!(
        cached(&mut target).await,
        [true],
        "the script is cached on the new master"
    );

    // Adjustments reach the moved key too: a learned capacity of 1 makes
    // a weight of 2 too heavy for every process.
    bucket.adjust(Adjustment::SetCapacity(1)).await.unwrap();
    assert!(matches!(
        bucket.try_acquire(2).await,
        Err(Error::WeightExceedsCapacity { capacity: 1, .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_restart_fails_closed_then_recovers_within_budget() {
    let mut cluster = Cluster::start();
    let timeout = 300 * MS;
    let backend = cluster_backend(&cluster)
        .await
        .with_timeout(timeout)
        .with_cooldown(100 * MS);
    let rate = RequestRate::per_second(50).unwrap();
    let capacity = 5;
    let name = name_on(&cluster, 2, "restart");
    let bucket = backend.token_bucket(&name, rate, capacity).unwrap();
    bucket.try_acquire(1).await.unwrap();

    cluster.nodes[2].kill();
    let outage = Instant::now();
    while outage.elapsed() < 600 * MS {
        let call = Instant::now();
        let result = bucket.try_acquire(1).await;
        assert!(is_backend(&result), "{result:?}");
        assert!(call.elapsed() <= timeout + SLACK, "{:?}", call.elapsed());
        let call = Instant::now();
        let result = bucket.acquire(1).await;
        assert!(is_backend(&result), "{result:?}");
        assert!(call.elapsed() <= timeout + SLACK, "{:?}", call.elapsed());
        tokio::time::sleep(20 * MS).await;
    }

    // Back on the same port with the same nodes.conf: the same node, its
    // slots, no data and no scripts.
    cluster.nodes[2].restart();
    cluster.wait_ok();
    let mut clock = direct(&cluster.nodes[2]).await;
    let from = redis_time(&mut clock).await;
    let back = Instant::now();
    let mut granted = 0;
    loop {
        let call = Instant::now();
        match bucket.try_acquire(1).await {
            Ok(()) => {
                granted += 1;
                break;
            }
            Err(Error::NotYet { .. }) => break,
            Err(Error::Backend { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
        assert!(call.elapsed() <= timeout + SLACK, "{:?}", call.elapsed());
        assert!(back.elapsed() < Duration::from_secs(30), "never recovered");
        tokio::time::sleep(50 * MS).await;
    }
    eprintln!("back on the restarted master after {:?}", back.elapsed());
    assert!(exists(&cluster.nodes[2], bucket.redis_key()).await);
    let deadline = Instant::now() + 300 * MS;
    while Instant::now() < deadline {
        match bucket.try_acquire(1).await {
            Ok(()) => granted += 1,
            Err(Error::NotYet { wait, .. }) => tokio::time::sleep(wait).await,
            Err(e) => panic!("{e:?}"),
        }
    }
    let to = redis_time(&mut clock).await;
    let allowed = budget(capacity, rate, from, to);
    assert!(granted <= allowed, "granted {granted} > {allowed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_master_down_follows_each_fault_policy_for_its_keys_only() {
    let mut cluster = Cluster::start();
    let timeout = 300 * MS;
    let closed = cluster_backend(&cluster)
        .await
        .with_timeout(timeout)
        .with_cooldown(Duration::from_secs(2));
    let open = closed.clone().with_fault_policy(FaultPolicy::FailOpen);
    let local = closed
        .clone()
        .with_fault_policy(FaultPolicy::LocalFallback { processes: 2 });
    let rate = RequestRate::per_second(10).unwrap();
    let dead = name_on(&cluster, 1, "dead");
    let alive = name_on(&cluster, 0, "alive");
    let strict = closed.token_bucket(&dead, rate, 4).unwrap();
    let lenient = open.sliding_log(&dead, rate).unwrap();
    let fallback = local.token_bucket(&dead, rate, 4).unwrap();
    let patient = closed.clone().with_timeout(Duration::from_secs(5));
    let healthy = patient.token_bucket(&alive, rate, 4).unwrap();
    strict.try_acquire(1).await.unwrap();
    healthy.try_acquire(1).await.unwrap();

    cluster.nodes[1].kill();
    let within = |call: Instant| {
        let took = call.elapsed();
        assert!(took <= timeout + SLACK, "{took:?}");
    };
    for _ in 0..3 {
        let call = Instant::now();
        let result = strict.try_acquire(1).await;
        assert!(is_backend(&result), "{result:?}");
        within(call);
        let call = Instant::now();
        assert!(is_backend(&strict.acquire(1).await));
        within(call);
        let call = Instant::now();
        assert!(is_backend(
            &strict.adjust(Adjustment::SetRemaining(1)).await
        ));
        within(call);
        let call = Instant::now();
        lenient.try_acquire(1).await.unwrap();
        lenient.acquire(1).await.unwrap();
        within(call);
    }
    // Half of a 10-per-second, burst-4 budget: 2 at once, then 1 per 200 ms.
    fallback.try_acquire(1).await.unwrap();
    fallback.try_acquire(1).await.unwrap();
    let wait = throttled_wait(fallback.try_acquire(1).await);
    assert!(wait > 100 * MS && wait <= 200 * MS, "{wait:?}");

    // A live master that lacks the script (as a new master after a
    // failover would) gets it from the call itself, while another master
    // is down.
    let mut live = direct(&cluster.nodes[0]).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut live)
        .await
        .unwrap();
    // The other masters keep deciding for their keys: the dead master's
    // cooldown is its slots', not the whole backend's (`patient` shares
    // `closed`'s record of failures, with room for a loaded machine).
    let result = healthy.try_acquire(1).await;
    assert!(
        matches!(result, Ok(()) | Err(Error::NotYet { .. })),
        "a live master's key failed: {result:?}"
    );
    assert_eq!(cached(&mut live).await, [true]);
    // ...while the dead slot is still cooling down: Redis is not tried.
    let call = Instant::now();
    assert!(is_backend(&strict.try_acquire(1).await));
    assert!(call.elapsed() < 50 * MS, "{:?}", call.elapsed());
}

#[tokio::test]
async fn cluster_unreachable_at_start_follows_the_policy_within_the_timeout() {
    let urls = [format!("redis://127.0.0.1:{}/", free_port())];
    let call = Instant::now();
    assert!(matches!(
        RedisBackend::connect_cluster(urls.iter().map(String::as_str)).await,
        Err(Error::Backend { .. })
    ));
    assert!(call.elapsed() <= 200 * MS + SLACK, "{:?}", call.elapsed());

    let timeout = 100 * MS;
    let backend = RedisBackend::open_cluster(urls.iter().map(String::as_str))
        .unwrap()
        .with_timeout(timeout)
        .with_cooldown(Duration::ZERO);
    assert!(backend.is_cluster());
    let rate = RequestRate::per_second(10).unwrap();
    let closed = backend.token_bucket("nowhere", rate, 4).unwrap();
    let open = backend
        .clone()
        .with_fault_policy(FaultPolicy::FailOpen)
        .token_bucket("nowhere", rate, 4)
        .unwrap();
    for _ in 0..3 {
        let call = Instant::now();
        assert!(is_backend(&closed.try_acquire(1).await));
        open.try_acquire(1).await.unwrap();
        assert!(
            call.elapsed() <= 2 * timeout + SLACK,
            "{:?}",
            call.elapsed()
        );
    }
    assert!(RedisBackend::open_cluster(["not a url"]).is_err());
}
