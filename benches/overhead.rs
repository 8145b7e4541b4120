//! What an unthrottled call costs: requests per second and CPU per request
//! of plain reqwest beside this crate's three ways of wrapping it and
//! reqwest-retry's middleware, against a loopback server that never
//! refuses.
//!
//! ```text
//! cargo bench -p reqwest-pace-benches --features overhead --bench overhead
//! cargo bench -p reqwest-pace-benches --features overhead --bench overhead -- --rounds 5 --requests 40000
//! ```
//!
//! **Server.** A bare hyper HTTP/1.1 server (no framework), run as a child
//! process (this binary again, with `--serve`), so that the CPU this
//! process spends is the clients' alone. It answers every request with an
//! empty `200`: in mode `bare` with no rate-limit header, in mode
//! `headers` with `X-RateLimit-Limit`, `-Remaining` and `-Reset` of a
//! fixed window of 10 000 000 requests per 60 s, far above what loopback
//! reaches, so no contender ever has a reason to wait.
//!
//! **Workload.** Each contender has one client, made once; a run is 64
//! tasks in a closed loop (send, read the body, send again) until the run's
//! requests are done. First every client warms up, sending for 20 s
//! (`--warm-up`; its rate is the last column: this crate's slow start on a
//! server without rate-limit headers is in it); then every round runs every
//! contender once against each server, in an order that rotates from round
//! to round (`--only NAME` keeps the contenders whose name contains NAME,
//! and plain reqwest; `--mode bare` or `--mode headers` keeps one server,
//! for a profile of one path). The figures are the medians over the rounds,
//! and each contender's ratio to plain reqwest's median of the same mode.
//!
//! **Figures.** *req/s*: the run's requests over its wall time. *CPU
//! µs/req*: this process's user and system CPU (`getrusage`) over the run,
//! per request: the client's cost, without the server's. *+ server*: the
//! same with the server process's CPU added (from `/proc/PID/stat`, in
//! clock ticks of 10 ms), which is what a measurement with the server in
//! the same process sees.
//!
//! Run by `cargo test --benches` (without `--bench`) it is a smoke run of
//! 200 requests per contender.
//!
//! A `harness = false` binary printing a table rather than criterion
//! groups: criterion times one closure per iteration, and what is measured
//! here is the throughput and CPU of 64 concurrent loops, in rounds that
//! alternate the contenders so that all of them see the same machine load.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::poll_fn;
use reqwest_middleware::ClientBuilder;
use reqwest_pace::{PaceLayer, PaceMiddleware, Pacer, ThrottledClient};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use tower_layer::Layer;
use tower_service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TASKS: usize = 64;
/// The server's window: a limit no run comes near.
const LIMIT: u64 = 10_000_000;
const WINDOW_SECS: u64 = 60;

// ---------------------------------------------------------------- server

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Bare,
    Headers,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Bare => "bare",
            Mode::Headers => "headers",
        }
    }
}

/// Serve on an ephemeral loopback port; print it, then serve until killed.
fn serve(mode: Mode) -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", listener.local_addr()?);
        let count = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let count = Arc::clone(&count);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_req| {
                    let response = answer(mode, &count, start);
                    async move { Ok::<_, Infallible>(response) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    })
}

/// An empty `200`; in mode `headers`, with the window's count.
fn answer(mode: Mode, count: &AtomicU64, start: Instant) -> hyper::Response<String> {
    let mut response = hyper::Response::new(String::new());
    if mode == Mode::Headers {
        let elapsed = start.elapsed().as_secs();
        let window = elapsed / WINDOW_SECS;
        // The count of the current window: the high bits hold its number.
        let n = count.fetch_add(1, Ordering::Relaxed);
        let used = if n >> 40 == window {
            n & ((1 << 40) - 1)
        } else {
            count.store((window << 40) | 1, Ordering::Relaxed);
            0
        };
        let reset = WINDOW_SECS - elapsed % WINDOW_SECS;
        let headers = response.headers_mut();
        headers.insert("x-ratelimit-limit", LIMIT.into());
        headers.insert("x-ratelimit-remaining", (LIMIT - used - 1).into());
        headers.insert("x-ratelimit-reset", reset.into());
    }
    response
}

/// The server process, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(mode: Mode) -> Result<Server, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--serve")
            .arg(mode.name())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
        let addr = line.trim().parse()?;
        Ok(Server { child, addr })
    }

    /// The server's CPU so far (user + system), in clock ticks of 10 ms.
    fn cpu(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command's closing parenthesis; utime and stime
        // are the 14th and 15th of the whole line.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
            .sum();
        Duration::from_millis(ticks * 10)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- clients

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Contender {
    Reqwest,
    Throttled,
    Middleware,
    Tower,
    Retry,
}

impl Contender {
    const ALL: [Contender; 5] = [
        Contender::Reqwest,
        Contender::Throttled,
        Contender::Middleware,
        Contender::Tower,
        Contender::Retry,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Reqwest => "reqwest",
            Contender::Throttled => "ThrottledClient::new",
            Contender::Middleware => "PaceMiddleware",
            Contender::Tower => "PaceLayer (tower)",
            Contender::Retry => "reqwest-retry",
        }
    }
}

/// One contender's client, made once and shared by its tasks.
#[derive(Clone)]
enum Client {
    Reqwest(reqwest::Client),
    Throttled(ThrottledClient),
    Middleware(reqwest_middleware::ClientWithMiddleware),
    Tower(reqwest_pace::PaceService<reqwest::Client>),
}

impl Client {
    fn new(contender: Contender) -> Result<Client, BoxError> {
        let plain = reqwest::Client::new();
        Ok(match contender {
            Contender::Reqwest => Client::Reqwest(plain),
            Contender::Throttled => Client::Throttled(ThrottledClient::new(plain)?),
            Contender::Middleware => Client::Middleware(
                ClientBuilder::new(plain)
                    .with(PaceMiddleware::new(Pacer::builder().build()?))
                    .build(),
            ),
            Contender::Tower => {
                Client::Tower(PaceLayer::new(Pacer::builder().build()?).layer(plain))
            }
            Contender::Retry => {
                let policy = ExponentialBackoff::builder().build_with_max_retries(3);
                Client::Middleware(
                    ClientBuilder::new(plain)
                        .with(RetryTransientMiddleware::new_with_policy(policy))
                        .build(),
                )
            }
        })
    }

    /// One request, its body read to the end; an error or a status other
    /// than 200 stops the bench.
    async fn get(&self, url: &reqwest::Url) -> Result<(), BoxError> {
        let response = match self {
            Client::Reqwest(c) => c.get(url.clone()).send().await?,
            Client::Throttled(c) => c.get(url.clone()).send().await?,
            Client::Middleware(c) => c.get(url.clone()).send().await?,
            Client::Tower(service) => {
                let mut service = service.clone();
                poll_fn(|cx| service.poll_ready(cx)).await?;
                let request = reqwest::Request::new(reqwest::Method::GET, url.clone());
                service.call(request).await?
            }
        };
        if response.status() != reqwest::StatusCode::OK {
            return Err(format!("status {}", response.status()).into());
        }
        response.bytes().await?;
        Ok(())
    }
}

// ---------------------------------------------------------------- measure

/// This process's user + system CPU so far.
fn process_cpu() -> Duration {
    // `getrusage` counts in microseconds; /proc/self/stat's ticks of 10 ms
    // are too coarse for a run of a second or two.
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; RUSAGE_SELF is valid.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

#[derive(Clone, Copy, Debug, Default)]
struct Run {
    per_second: f64,
    cpu_micros: f64,
    with_server_micros: f64,
}

/// `requests` requests by `TASKS` tasks in a closed loop, or as many as
/// they send in `for_at_least` when that is longer.
async fn run(
    client: &Client,
    url: &reqwest::Url,
    server: &Server,
    requests: u64,
    for_at_least: Duration,
) -> Result<Run, BoxError> {
    let left = Arc::new(AtomicU64::new(requests));
    let done = Arc::new(AtomicU64::new(0));
    let cpu0 = process_cpu();
    let server0 = server.cpu();
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let client = client.clone();
            let url = url.clone();
            let left = Arc::clone(&left);
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                while left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                    || t0.elapsed() < for_at_least
                {
                    client.get(&url).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), BoxError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let wall = t0.elapsed();
    let cpu = process_cpu() - cpu0;
    let server_cpu = server.cpu().saturating_sub(server0);
    let n = done.load(Ordering::Relaxed) as f64;
    Ok(Run {
        per_second: n / wall.as_secs_f64(),
        cpu_micros: cpu.as_secs_f64() * 1e6 / n,
        with_server_micros: (cpu + server_cpu).as_secs_f64() * 1e6 / n,
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.is_empty() {
        return f64::NAN;
    }
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
    }
}

struct Args {
    rounds: usize,
    requests: u64,
    warm_up: Duration,
    /// Only the contenders whose name contains one of these (and plain
    /// reqwest, the baseline); all without any.
    only: Vec<String>,
    /// Only the server of this mode; both without one (a profile of one
    /// mode's path, without the other's samples).
    mode: Option<Mode>,
    verbose: bool,
}

fn args() -> Result<Args, BoxError> {
    let mut args = Args {
        rounds: 3,
        requests: 20_000,
        warm_up: Duration::from_secs(20),
        only: Vec::new(),
        mode: None,
        verbose: false,
    };
    let mut bench = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--rounds" => args.rounds = it.next().ok_or("--rounds N")?.parse()?,
            "--requests" => args.requests = it.next().ok_or("--requests N")?.parse()?,
            "--warm-up" => {
                args.warm_up =
                    Duration::from_secs_f64(it.next().ok_or("--warm-up SECONDS")?.parse()?)
            }
            "--only" => args.only.push(it.next().ok_or("--only NAME")?),
            "--mode" => {
                args.mode = Some(match it.next().as_deref() {
                    Some("bare") => Mode::Bare,
                    Some("headers") => Mode::Headers,
                    _ => return Err("--mode bare|headers".into()),
                })
            }
            "--verbose" => args.verbose = true,
            // What `cargo bench` passes to every bench binary.
            "--bench" => bench = true,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if !bench && std::env::args().len() == 1 {
        // Run by `cargo test --benches`, which passes no `--bench`: a smoke
        // run that only checks the bench still runs.
        args.rounds = 1;
        args.requests = 200;
        args.warm_up = Duration::from_millis(200);
    }
    Ok(args)
}

fn main() -> Result<(), BoxError> {
    let mut raw = std::env::args().skip(1);
    if raw.next().as_deref() == Some("--serve") {
        let mode = match raw.next().as_deref() {
            Some("headers") => Mode::Headers,
            _ => Mode::Bare,
        };
        return serve(mode);
    }
    let args = args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(measure(args))
}

async fn measure(args: Args) -> Result<(), BoxError> {
    let modes: Vec<Mode> = [Mode::Bare, Mode::Headers]
        .into_iter()
        .filter(|m| args.mode.is_none_or(|only| only == *m))
        .collect();
    let servers = modes
        .iter()
        .map(|&m| Server::start(m))
        .collect::<Result<Vec<_>, _>>()?;
    let urls = servers
        .iter()
        .map(|s| reqwest::Url::parse(&format!("http://{}/", s.addr)))
        .collect::<Result<Vec<_>, _>>()?;
    // One client per contender and mode, kept across rounds (its pool of
    // connections and, for this crate, what its key learned).
    let clients = modes
        .iter()
        .map(|_| Contender::ALL.iter().map(|&c| Client::new(c)).collect())
        .collect::<Result<Vec<Vec<Client>>, _>>()?;
    println!(
        "# overhead: {} tasks, {} requests per run, {} rounds after a warm-up of {:?} per client, {} cores",
        TASKS,
        args.requests,
        args.rounds,
        args.warm_up,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // The warm-up: each client sends for `warm_up` at least. This crate's
    // clients start a key that sends no rate-limit header at 10/s, growing
    // by the header-less regime's slow start (doubling every 0.5 s of
    // sending at its pace, at most two intervals per response): measured
    // here, about 1 000 req/s on average over the first 10 s and 15 000/s
    // at the end of them, so 20 s to reach loopback's rate. The rounds
    // measure the pace after it.
    let wanted = |c: usize| {
        c == 0
            || args.only.is_empty()
            || args
                .only
                .iter()
                .any(|o| Contender::ALL[c].name().contains(o.as_str()))
    };
    let mut warm_ups = vec![vec![Run::default(); Contender::ALL.len()]; modes.len()];
    for (m, _) in modes.iter().enumerate() {
        for c in (0..Contender::ALL.len()).filter(|&c| wanted(c)) {
            warm_ups[m][c] = run(&clients[m][c], &urls[m], &servers[m], 0, args.warm_up).await?;
            if let (true, Client::Throttled(t)) = (args.verbose, &clients[m][c]) {
                let key = format!("http://{}", servers[m].addr);
                let rate = t.key_status("host", &key).and_then(|s| s.rate);
                eprintln!(
                    "warm-up {} / {}: {:.0} req/s, the key's rate {rate:?}",
                    modes[m].name(),
                    Contender::ALL[c].name(),
                    warm_ups[m][c].per_second
                );
            }
        }
    }
    println!("# warm-up done");
    let mut runs = vec![vec![Vec::<Run>::new(); Contender::ALL.len()]; modes.len()];
    for round in 1..=args.rounds {
        for (m, _) in modes.iter().enumerate() {
            for k in 0..Contender::ALL.len() {
                let c = (k + round) % Contender::ALL.len();
                if !wanted(c) {
                    continue;
                }
                let r = run(
                    &clients[m][c],
                    &urls[m],
                    &servers[m],
                    args.requests,
                    Duration::ZERO,
                )
                .await?;
                if args.verbose {
                    eprintln!(
                        "{} / {}: {:.0} req/s, {:.1} µs/req",
                        modes[m].name(),
                        Contender::ALL[c].name(),
                        r.per_second,
                        r.cpu_micros
                    );
                }
                runs[m][c].push(r);
            }
        }
        println!("# round {round} of {} done", args.rounds);
    }
    println!();
    println!("| server | contender | req/s | × reqwest | CPU µs/req | × reqwest | + server µs/req | × reqwest | warm-up req/s |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (m, mode) in modes.iter().enumerate() {
        let med = |c: usize, f: fn(&Run) -> f64| median(runs[m][c].iter().map(f).collect());
        let base = (
            med(0, |r| r.per_second),
            med(0, |r| r.cpu_micros),
            med(0, |r| r.with_server_micros),
        );
        for (c, contender) in Contender::ALL.iter().enumerate() {
            if !wanted(c) {
                continue;
            }
            let rate = med(c, |r| r.per_second);
            let cpu = med(c, |r| r.cpu_micros);
            let total = med(c, |r| r.with_server_micros);
            println!(
                "| {} | {} | {:.0} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} | {:.0} |",
                mode.name(),
                contender.name(),
                rate,
                rate / base.0,
                cpu,
                cpu / base.1,
                total,
                total / base.2,
                warm_ups[m][c].per_second
            );
        }
    }
    Ok(())
}
