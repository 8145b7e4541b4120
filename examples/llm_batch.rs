//! A batch of LLM calls against the embedded model of an LLM API, on the
//! real clock, with interactive calls among them.
//!
//! ```sh
//! cargo run --release --features testing --example llm_batch
//! cargo run --release --features testing --example llm_batch -- --dialect anthropic
//! # a fleet of 4 clients sharing the key's tokens and cap through Redis
//! cargo run --release --features testing,redis --example llm_batch -- --fleet redis://127.0.0.1:6379/
//! ```
//!
//! The server (`testing::llm`, on a loopback port) limits the key to 6 000
//! requests and 1 500 000 tokens a minute and 32 calls in flight, holding
//! each call 200 ms. The client has nothing configured but the reconciler:
//! a scope of tokens with no rate, the server's `remaining` followed and
//! each answer's `usage` settled. It sends 2 000 calls of varied token
//! cost, 1 980 of them a batch from 64 tasks and 20 interactive ones, one
//! a second, while the batch saturates the key. It learns the tokens'
//! rate and the cap on calls in flight from the server's answers, and
//! lets the interactive calls go first.
//!
//! The summary: the limit that binds and the share of it the run used
//! (beyond the server's first full minute's bucket, which a run of half a
//! minute spends at the cap first), the share of calls the server
//! refused, the calls that failed, the cap learned beside the server's,
//! and the interactive calls' waits beside one call's service time. The
//! same workload is the goal test `tests/llm_batch.rs`, on a paused clock.

// The workload, shared with the goal test `tests/llm_batch.rs`.
#[path = "llm_batch/workload.rs"]
mod workload;

use std::error::Error as StdError;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use reqwest_pace::testing::llm::LlmDialect;

use workload::{percentile, Run, CALLS, INTERACTIVE, MAX_IN_FLIGHT, SERVICE};

const USAGE: &str =
    "usage: llm_batch [--dialect openai|anthropic] [--fleet REDIS_URL [--processes N]]";

/// What the command line asks for.
struct Args {
    dialect: LlmDialect,
    /// A fleet sharing its tokens and its cap through the Redis at this
    /// URL (feature `redis`).
    fleet: Option<String>,
    processes: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut dialect = LlmDialect::OpenAi;
    let (mut fleet, mut processes) = (None, 4);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--fleet" => fleet = Some(it.next().ok_or(USAGE)?),
            "--processes" => {
                processes = match it.next().and_then(|n| n.parse().ok()) {
                    Some(n) if n > 0 => n,
                    _ => return Err(format!("--processes needs a count above 0\n{USAGE}")),
                }
            }
            "--dialect" => {
                dialect = match it.next().as_deref() {
                    Some("openai") => LlmDialect::OpenAi,
                    Some("anthropic") => LlmDialect::Anthropic,
                    other => return Err(format!("--dialect: {other:?}?\n{USAGE}")),
                }
            }
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    if fleet.is_some() && !cfg!(feature = "redis") {
        return Err("--fleet needs the `redis` feature: --features testing,redis".into());
    }
    Ok(Args {
        dialect,
        fleet,
        processes,
    })
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
        eprintln!("llm_batch failed: {e}");
        let mut source = e.source();
        while let Some(s) = source {
            eprintln!("  caused by: {s}");
            source = s.source();
        }
        std::process::exit(1);
    }
}

/// One connection per process of the fleet, to the Redis at `url`.
#[cfg(feature = "redis")]
async fn fleet(url: &str, processes: usize) -> Result<Vec<workload::Fleet>, Box<dyn StdError>> {
    let mut fleet = Vec::new();
    for _ in 0..processes {
        fleet.push(workload::Fleet::connect(url).await?);
    }
    Ok(fleet)
}

#[cfg(not(feature = "redis"))]
async fn fleet(_: &str, _: usize) -> Result<Vec<workload::Fleet>, Box<dyn StdError>> {
    Err("--fleet needs the `redis` feature".into())
}

async fn run(args: Args) -> Result<(), Box<dyn StdError>> {
    let dialect = args.dialect;
    let fleet = match &args.fleet {
        Some(url) => fleet(url, args.processes).await?,
        None => Vec::new(),
    };
    // The usage draws from a fixed seed; the wall clock is the system's.
    let server = workload::server(dialect, 1, None).start().await?;
    println!(
        "embedded LLM API ({dialect:?}) at {}: {} requests and {} tokens a minute, \
         {MAX_IN_FLIGHT} calls in flight, {} ms a call; client with nothing configured \
         but the reconciler",
        server.url(),
        workload::REQUESTS_PER_MINUTE,
        workload::TOKENS_PER_MINUTE,
        SERVICE.as_millis(),
    );

    let bar = ProgressBar::new(CALLS as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:32}] {pos}/{len} done  {msg}")?
            .progress_chars("=> "),
    );
    let shown = bar.clone();
    if !fleet.is_empty() {
        println!(
            "a fleet of {} clients sharing the key's tokens and cap on calls in flight \
             through {}",
            fleet.len(),
            args.fleet.as_deref().unwrap_or_default(),
        );
    }
    let run = workload::run_by(&server, None, &fleet, move |watch| {
        shown.inc(1);
        shown.set_message(format!("refused {}", watch.refusals));
    })
    .await?;
    bar.finish();
    summary(&run);
    server.shutdown().await;
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1_000.0)
}

fn summary(run: &Run) {
    let (binding, share) = run.binding();
    let stats = &run.stats;
    let tokens = stats.input_tokens_charged + stats.output_tokens_charged;
    let interactive = &run.interactive_waits;
    println!();
    println!(
        "  calls              {:>9}  ({INTERACTIVE} interactive)",
        CALLS
    );
    println!("  elapsed            {:>9.2} s", run.elapsed.as_secs_f64());
    println!("  tokens used        {:>9}", tokens);
    for (limit, share) in &run.shares {
        // Below zero, the run did not spend even the limit's first bucket.
        match *share {
            share if share >= 0.0 => println!("  share of {:<12}{:>8.3}", limit.as_str(), share),
            _ => println!(
                "  share of {:<12}{:>8}  (its first bucket not spent)",
                limit.as_str(),
                "-"
            ),
        }
    }
    println!(
        "  binding limit      {:>9}  ({share:.3} of it)",
        binding.as_str()
    );
    println!(
        "  refused            {:>9}  ({:.2} % of {} answers; {} for concurrency)",
        stats.refused_total(),
        run.refused() * 100.0,
        stats.requests,
        stats.refused(reqwest_pace::testing::llm::LlmLimit::Concurrency),
    );
    println!("  failed calls       {:>9}", run.failed);
    println!(
        "  cap in flight      {:>9}  (server's {MAX_IN_FLIGHT}; the server's peak {})",
        run.learned_cap
            .map_or_else(|| "none".to_owned(), |cap| cap.to_string()),
        stats.peak_in_flight,
    );
    println!(
        "  after 1st refusal  {:>9}  at most in flight ({} sends above the cap)",
        run.watch.peak_after, run.watch.over_after,
    );
    println!(
        "  interactive calls  sent by {:.1} s; the batch answered until {:.1} s",
        run.last_interactive_start.as_secs_f64(),
        run.batch_end.as_secs_f64(),
    );
    println!(
        "  interactive wait   p50 {}, p99 {}  (one call's service time {})",
        ms(percentile(interactive, 0.5)),
        ms(percentile(interactive, 0.99)),
        ms(SERVICE),
    );
    println!(
        "  batch wait         p50 {}, p99 {}",
        ms(percentile(&run.batch_waits, 0.5)),
        ms(percentile(&run.batch_waits, 0.99)),
    );
}
