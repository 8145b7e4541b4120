//! The main example: a throttled client against a rate-limited server.
//!
//! ```sh
//! cargo run --release --example demo                  # embedded server, 500 requests, 32 tasks
//! cargo run --release --example demo -- --dialect none --json
//! cargo run --release --example demo -- --url http://127.0.0.1:8080/ --requests 200
//! ```
//!
//! With no arguments it starts the crate's embedded rate-limited server on a
//! loopback port (50 requests/s, burst 10, `x-ratelimit` headers) and sends
//! 500 requests from 32 concurrent tasks through a `ThrottledClient` with
//! no rate configured: the client probes, reads the headers and paces
//! itself. A progress bar on standard error shows sent, throttled and
//! retried requests; the summary table follows on standard output, and
//! `--json` adds one JSON object as its last line.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use reqwest_pace::testing::{Dialect, RateLimitedServer};
use reqwest_pace::{Event, RequestRate, ThrottledClient};

struct Args {
    url: Option<String>,
    requests: u64,
    concurrency: u64,
    dialect: Dialect,
    limit: u64,
    json: bool,
}

const USAGE: &str = "usage: demo [--url URL] [--requests N] [--concurrency C] \
[--dialect x-ratelimit|github|ietf|none] [--limit R] [--json]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        url: None,
        requests: 500,
        concurrency: 32,
        dialect: Dialect::XRateLimit,
        limit: 50,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let number = |name: &str, text: String| {
            text.parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{name} needs a whole number above 0, not {text:?}"))
        };
        match flag.as_str() {
            "--url" => args.url = Some(value("--url")?),
            "--requests" => args.requests = number("--requests", value("--requests")?)?,
            "--concurrency" => args.concurrency = number("--concurrency", value("--concurrency")?)?,
            "--limit" => args.limit = number("--limit", value("--limit")?)?,
            "--dialect" => {
                let text = value("--dialect")?;
                args.dialect = text.parse().map_err(|e| format!("--dialect: {e}"))?;
            }
            "--json" => args.json = true,
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    status_429: AtomicU64,
    retries: AtomicU64,
    ok: AtomicU64,
    errors: AtomicU64,
}

impl Tally {
    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args).await {
        eprintln!("demo failed: {e}");
        let mut source = e.source();
        while let Some(s) = source {
            eprintln!("  caused by: {s}");
            source = s.source();
        }
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), Box<dyn StdError>> {
    let server = match &args.url {
        Some(_) => None,
        None => Some(
            RateLimitedServer::builder()
                .limit(RequestRate::per_second(args.limit)?)
                .burst(10)
                .dialect(args.dialect)
                .start()
                .await?,
        ),
    };
    let url = match (&args.url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(server)) => format!("{}/items", server.url()),
        (None, None) => unreachable!("a server is started when no URL is given"),
    };

    let tally = Arc::new(Tally::default());
    let bar = ProgressBar::new(args.requests);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} done  {msg}")?
            .progress_chars("=> "),
    );
    let sink = Arc::clone(&tally);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .on_event(move |event| match event {
            Event::Sent { .. } => {
                sink.sent.fetch_add(1, Ordering::Relaxed);
            }
            Event::Received { status: 429, .. } => {
                sink.status_429.fetch_add(1, Ordering::Relaxed);
            }
            Event::Retrying { .. } => {
                sink.retries.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        })
        .build()?;

    match &server {
        Some(_) => println!(
            "embedded server at {url}: {} per second, burst 10, dialect {}; \
             client with no rate configured",
            args.limit, args.dialect
        ),
        None => println!("sending to {url}; client with no rate configured"),
    }

    let start = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.min(args.requests) {
        let client = client.clone();
        let url = url.clone();
        let next = Arc::clone(&next);
        let tally = Arc::clone(&tally);
        let bar = bar.clone();
        let total = args.requests;
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < total {
                match client.send(client.get(&url)).await {
                    Ok(response) if response.status().is_success() => {
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) | Err(_) => {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                bar.inc(1);
                bar.set_message(format!(
                    "sent {}  throttled {}  retried {}",
                    Tally::get(&tally.sent),
                    Tally::get(&tally.status_429),
                    Tally::get(&tally.retries)
                ));
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let elapsed = start.elapsed();
    bar.finish();

    let ok = Tally::get(&tally.ok);
    let achieved = ok as f64 / elapsed.as_secs_f64().max(f64::EPSILON);
    let rate = server
        .as_ref()
        .and_then(|s| client.current_rate("host", &format!("http://{}", s.addr())));
    println!();
    println!("  requests        {:>8}", args.requests);
    println!("  ok (2xx)        {:>8}", ok);
    println!("  429 received    {:>8}", Tally::get(&tally.status_429));
    println!("  retries         {:>8}", Tally::get(&tally.retries));
    println!("  errors          {:>8}", Tally::get(&tally.errors));
    println!("  elapsed         {:>8.2} s", elapsed.as_secs_f64());
    println!("  achieved        {:>8.1} ok/s", achieved);
    if let Some(rate) = rate {
        println!("  learned pace    {:>8.1} /s", rate);
    }
    if args.json {
        // Written by hand to keep the documented key order (serde_json's
        // map sorts keys).
        println!(
            "{{\"requests\":{},\"ok\":{},\"status_429\":{},\"retries\":{},\"errors\":{},\"elapsed_ms\":{},\"achieved_rps\":{}}}",
            args.requests,
            ok,
            Tally::get(&tally.status_429),
            Tally::get(&tally.retries),
            Tally::get(&tally.errors),
            elapsed.as_millis(),
            serde_json::json!((achieved * 10.0).round() / 10.0),
        );
    }
    if let Some(server) = server {
        server.shutdown().await;
    }
    Ok(())
}
