//! A fleet of worker processes sharing one Redis budget, for the fleet
//! tests (`tests/fleet.rs`) and the fleet bench (`benches/fleet.rs`).
//!
//! A worker is the calling binary run again with [`WORKER_ENV`] set to an
//! encoded [`Job`]: the binary's entry for it calls [`work_from_env`]. Each
//! worker builds its own `ThrottledClient` and its own Redis connection, as
//! a separate process of a real fleet would, runs [`TASKS`] tasks of GETs
//! until a common deadline and prints its [`Tally`].
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest_pace::redis::RedisBackend;
use reqwest_pace::{Event, Limiter, RequestRate, Scope, ThrottledClient};

/// Set, in a worker, to its encoded [`Job`].
pub const WORKER_ENV: &str = "PACE_FLEET_WORKER";
/// Worker processes in a fleet.
pub const WORKERS: usize = 4;
/// Tasks per worker.
pub const TASKS: usize = 8;

/// What a worker is told.
#[derive(Clone, Debug)]
pub struct Job {
    pub redis: String,
    pub server: String,
    /// The rate configured, per second; 0 for nothing configured (the
    /// scope learns).
    pub rate: u64,
    /// Whether the scope's buckets are the shared Redis ones (else one
    /// local bucket per process, with the rate configured).
    pub shared: bool,
    /// When the workers start (set by [`run_fleet`]) and for how long they
    /// send, in milliseconds.
    pub start_ms: u64,
    pub run_ms: u64,
}

impl Job {
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.redis,
            self.server,
            self.rate,
            u8::from(self.shared),
            self.start_ms,
            self.run_ms
        )
    }

    fn decode(s: &str) -> Job {
        let f: Vec<&str> = s.split_whitespace().collect();
        Job {
            redis: f[0].to_string(),
            server: f[1].to_string(),
            rate: f[2].parse().unwrap(),
            shared: f[3] == "1",
            start_ms: f[4].parse().unwrap(),
            run_ms: f[5].parse().unwrap(),
        }
    }
}

/// One worker's counts, or the fleet's: attempts sent, calls made, calls
/// that ended in 200, responses refused (429 or 503), calls that ended in
/// an error.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub sent: u64,
    pub calls: u64,
    pub ok: u64,
    pub throttled: u64,
    pub failed: u64,
}

impl Tally {
    fn add(self, o: Tally) -> Tally {
        Tally {
            sent: self.sent + o.sent,
            calls: self.calls + o.calls,
            ok: self.ok + o.ok,
            throttled: self.throttled + o.throttled,
            failed: self.failed + o.failed,
        }
    }
}

pub fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// In a worker (its job in [`WORKER_ENV`]): do the job and print the
/// tally on standard output. Returns whether this process is a worker.
pub fn work_from_env() -> bool {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return false;
    };
    let job = Job::decode(&spec);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = runtime.block_on(work(job));
    println!(
        "FLEET {} {} {} {} {}",
        t.sent, t.calls, t.ok, t.throttled, t.failed
    );
    true
}

fn scope(job: &Job, backend: RedisBackend) -> Scope {
    match (job.rate, job.shared) {
        (0, _) => {
            // Nothing configured: the bucket starts wide open and the scope
            // learns; what it learns is written to the shared bucket.
            let open = RequestRate::per_second(10_000).unwrap();
            Scope::per_host().limiter(move |key| {
                let bucket = backend.token_bucket(key, open, 1)?;
                Ok(Arc::new(bucket) as Arc<dyn Limiter>)
            })
        }
        (rate, true) => {
            let rate = RequestRate::per_second(rate).unwrap();
            Scope::per_host().rate(rate).burst(1).limiter(move |key| {
                let bucket = backend.token_bucket(key, rate, 1)?;
                Ok(Arc::new(bucket) as Arc<dyn Limiter>)
            })
        }
        (rate, false) => Scope::per_host()
            .rate(RequestRate::per_second(rate).unwrap())
            .burst(1),
    }
}

async fn work(job: Job) -> Tally {
    let backend = RedisBackend::connect(job.redis.as_str()).await.unwrap();
    let sent = Arc::new(AtomicU64::new(0));
    let throttled = Arc::new(AtomicU64::new(0));
    let client = {
        let (sent, throttled) = (sent.clone(), throttled.clone());
        ThrottledClient::builder(reqwest::Client::new())
            .host_scope(scope(&job, backend))
            .on_event(move |event| match event {
                Event::Sent { .. } => {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                Event::Received {
                    status: 429 | 503, ..
                } => {
                    throttled.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            })
            .build()
            .unwrap()
    };
    let end = job.start_ms + job.run_ms;
    if let Some(wait) = job.start_ms.checked_sub(epoch_ms()) {
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let client = client.clone();
        let url = job.server.clone();
        tasks.push(tokio::spawn(async move {
            let mut t = Tally::default();
            while epoch_ms() < end {
                t.calls += 1;
                match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => t.ok += 1,
                    Ok(_) | Err(_) => t.failed += 1,
                }
            }
            t
        }));
    }
    let mut tally = Tally::default();
    for task in tasks {
        tally = tally.add(task.await.unwrap());
    }
    tally.sent = sent.load(Ordering::Relaxed);
    tally.throttled = throttled.load(Ordering::Relaxed);
    tally
}

/// Run [`WORKERS`] worker processes on `job`: the calling binary again,
/// with `args` (what makes it run its worker entry). The start is set
/// here, `lead` ahead, so that they begin together; returns the summed
/// tally.
pub async fn run_fleet(job: Job, args: &[&str], lead: Duration) -> Tally {
    run_processes(job, args, lead, WORKERS).await
}

/// [`run_fleet`] with `workers` processes (1: one client alone, for a
/// fleet to be measured beside).
pub async fn run_processes(mut job: Job, args: &[&str], lead: Duration, workers: usize) -> Tally {
    job.start_ms = epoch_ms() + u64::try_from(lead.as_millis()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let spec = job.encode();
    let children: Vec<_> = (0..workers)
        .map(|_| {
            Command::new(&exe)
                .args(args)
                .env(WORKER_ENV, &spec)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn a fleet worker")
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let mut total = Tally::default();
    for out in outputs {
        assert!(out.status.success(), "a worker failed: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("FLEET ").map(|(_, n)| n))
            .unwrap_or_else(|| panic!("no tally from a worker: {stdout}"));
        let n: Vec<u64> = line
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        total = total.add(Tally {
            sent: n[0],
            calls: n[1],
            ok: n[2],
            throttled: n[3],
            failed: n[4],
        });
    }
    total
}
