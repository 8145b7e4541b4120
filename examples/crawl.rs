//! A polite crawl of loopback hosts, on the real clock.
//!
//! ```sh
//! cargo run --release --features robots --example crawl
//! ```
//!
//! Twelve hosts on 127.0.0.2 to 127.0.0.13, 20 pages each, all asked for
//! at once (one task per page) through one client with a cap of 4
//! requests in flight per host, a circuit breaker per host, robots.txt
//! obeyed and latency-aware politeness:
//!
//! - six serve a robots.txt with a `Crawl-delay` (0.1 to 0.3 s) or a
//!   `Request-rate`, each disallowing `/private/` (4 of their 20 pages);
//! - two slow down under load (50 ms alone, 50 ms more per request they
//!   hold) and have no robots.txt;
//! - two are dead (nothing listens), one answers 500 to every page, one
//!   answers its robots.txt 503 (so it is unavailable, and all disallowed).
//!
//! It prints a summary per host (what was sent, refused and failed; the
//! shortest gap between two requests the host saw beside the gap its
//! robots.txt asks; its worst latency) and the whole crawl's time beside
//! the ideal those rules allow: the slowest host's pages at its interval.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use reqwest_pace::testing::{Dialect, Fault, RateLimitedServer};
use reqwest_pace::{
    AutoThrottle, CircuitBreaker, Error, Event, RequestRate, Robots, ThrottledClient,
};

const PAGES: usize = 20;

/// What a host is, for the crawl.
enum Kind {
    /// A robots.txt asking this interval (by `Crawl-delay` or
    /// `Request-rate`) and disallowing `/private/`.
    Polite(&'static str, Duration),
    /// No robots.txt; slower the more requests it holds.
    Slowing,
    /// Nothing listens.
    Dead,
    /// Answers 500 to every page.
    Failing,
    /// Answers its robots.txt 503.
    RobotsDown,
}

struct Host {
    name: String,
    kind: Kind,
    url: String,
    server: Option<RateLimitedServer>,
}

async fn start(n: u8, kind: Kind) -> Result<Host, Box<dyn std::error::Error>> {
    let ip = Ipv4Addr::new(127, 0, 0, n);
    let builder = RateLimitedServer::builder()
        .limit(RequestRate::per_second(10_000)?)
        .burst(10_000)
        .dialect(Dialect::None)
        .bind(SocketAddr::from((ip, 0)));
    let server = match &kind {
        Kind::Polite(robots, _) => Some(builder.robots_txt(*robots).start().await?),
        Kind::Slowing => {
            let server = builder
                .latency(Duration::from_millis(50))
                .latency_per_in_flight(Duration::from_millis(50))
                .start()
                .await?;
            server.inject(Fault::new(reqwest::StatusCode::NOT_FOUND));
            Some(server)
        }
        Kind::Dead => None,
        Kind::Failing => {
            let server = builder.start().await?;
            server.inject(Fault::new(reqwest::StatusCode::NOT_FOUND));
            server.inject(Fault::internal_server_error().times(1_000));
            Some(server)
        }
        Kind::RobotsDown => {
            let server = builder.start().await?;
            server.inject(Fault::service_unavailable().times(1_000));
            Some(server)
        }
    };
    let url = match &server {
        Some(server) => server.url(),
        None => {
            // A port that was free a moment ago: nothing listens there.
            let port = std::net::TcpListener::bind((ip, 0))?.local_addr()?.port();
            format!("http://{ip}:{port}")
        }
    };
    Ok(Host {
        name: ip.to_string(),
        kind,
        url,
        server,
    })
}

/// How one host's calls ended.
#[derive(Default)]
struct Tally {
    ok: usize,
    disallowed: usize,
    circuit_open: usize,
    other: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let polite = |delay: &'static str, ms: u64| Kind::Polite(delay, Duration::from_millis(ms));
    let kinds = vec![
        polite("User-agent: *\nCrawl-delay: 0.1\nDisallow: /private/\n", 100),
        polite("User-agent: *\nCrawl-delay: 0.2\nDisallow: /private/\n", 200),
        polite("User-agent: crawlbot\nCrawl-delay: 0.25\nDisallow: /private/\n\nUser-agent: *\nDisallow: /\n", 250),
        polite("User-agent: *\nCrawl-delay: 0.3\nDisallow: /private/\n", 300),
        polite("User-agent: *\nRequest-rate: 5/1s\nDisallow: /private/\n", 200),
        polite("User-agent: *\nRequest-rate: 4/1s\nCrawl-delay: 0.1\nDisallow: /private/\n", 250),
        Kind::Slowing,
        Kind::Slowing,
        Kind::Dead,
        Kind::Dead,
        Kind::Failing,
        Kind::RobotsDown,
    ];
    let mut hosts = Vec::new();
    for (i, kind) in kinds.into_iter().enumerate() {
        hosts.push(start(2 + i as u8, kind).await?);
    }

    // When each attempt to each host was sent, as the client saw it.
    let sends: Arc<Mutex<HashMap<String, Vec<Instant>>>> = Arc::default();
    let log = Arc::clone(&sends);
    let client = ThrottledClient::builder(reqwest::Client::new())
        .on_event(move |event| {
            if let Event::Sent { url, .. } = event {
                let host = url.host_str().unwrap_or_default().to_owned();
                let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                log.entry(host).or_default().push(Instant::now());
            }
        })
        .max_in_flight(4)
        .circuit_breaker(CircuitBreaker::default())
        .robots(Robots::new("crawlbot"))
        .auto_throttle(AutoThrottle::default().start_delay(Duration::from_millis(50)))
        .build()?;

    let start = Instant::now();
    let mut calls = Vec::new();
    for page in 0..PAGES {
        for (h, host) in hosts.iter().enumerate() {
            let path = if page % 5 == 4 {
                format!("/private/{page}")
            } else {
                format!("/page/{page}")
            };
            let (client, url) = (client.clone(), format!("{}{path}", host.url));
            calls.push((
                h,
                tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) }),
            ));
        }
    }
    let mut tallies: BTreeMap<usize, Tally> = BTreeMap::new();
    for (h, call) in calls {
        let tally = tallies.entry(h).or_default();
        match call.await? {
            Ok(status) if status.is_success() => tally.ok += 1,
            Err(Error::RobotsDisallowed { .. }) => tally.disallowed += 1,
            Err(Error::CircuitOpen { .. }) => tally.circuit_open += 1,
            Ok(_) | Err(_) => tally.other += 1,
        }
    }
    let took = start.elapsed();

    println!(
        "{:<11} {:<10} {:>4} {:>4} {:>6} {:>4} {:>5} {:>7} {:>6} {:>8} {:>8} {:>5} {:>9}",
        "host",
        "kind",
        "sent",
        "ok",
        "robots",
        "open",
        "other",
        "private",
        "asked",
        "gap sent",
        "gap seen",
        "under",
        "worst lat"
    );
    let sends = sends.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut violations = 0;
    let mut private_sent = 0;
    let mut ideal = Duration::ZERO;
    for (h, host) in hosts.iter().enumerate() {
        let tally = tallies.remove(&h).unwrap_or_default();
        let records = host
            .server
            .as_ref()
            .map(|s| s.requests())
            .unwrap_or_default();
        // Only the polite hosts' robots.txt disallows `/private/`.
        let private = match host.kind {
            Kind::Polite(..) => records
                .iter()
                .filter(|r| r.path.starts_with("/private"))
                .count(),
            _ => 0,
        };
        // Gaps between two requests: as the client sent them (its spacer
        // counts from the instant the previous one went), and as the server
        // decided them (which the loopback moves by a little either way).
        let gap_seen = records
            .windows(2)
            .map(|w| w[1].at.saturating_sub(w[0].at))
            .min();
        let sent_at = sends.get(&host.name).cloned().unwrap_or_default();
        let gaps: Vec<Duration> = sent_at.windows(2).map(|w| w[1] - w[0]).collect();
        let gap_sent = gaps.iter().min().copied();
        let worst = records.iter().map(|r| r.latency).max().unwrap_or_default();
        let (kind, asked) = match &host.kind {
            Kind::Polite(_, interval) => ("robots", Some(*interval)),
            Kind::Slowing => ("slowing", None),
            Kind::Dead => ("dead", None),
            Kind::Failing => ("failing", None),
            Kind::RobotsDown => ("robots 503", None),
        };
        // The ideal: the allowed pages one interval apart after the
        // robots.txt (a slowing host: one at a time, at its 50 ms).
        let allowed = PAGES - PAGES / 5;
        let host_ideal = match &host.kind {
            Kind::Polite(_, interval) => *interval * allowed as u32,
            Kind::Slowing => Duration::from_millis(50) * PAGES as u32,
            _ => Duration::ZERO,
        };
        ideal = ideal.max(host_ideal);
        let under = asked.map_or(0, |asked| gaps.iter().filter(|&&g| g < asked).count());
        violations += under;
        private_sent += private;
        let show = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.1?}", d));
        println!(
            "{:<11} {:<10} {:>4} {:>4} {:>6} {:>4} {:>5} {:>7} {:>6} {:>8} {:>8} {:>5} {:>9}",
            host.name,
            kind,
            sent_at.len(),
            tally.ok,
            tally.disallowed,
            tally.circuit_open,
            tally.other,
            private,
            show(asked),
            show(gap_sent),
            show(gap_seen),
            under,
            format!("{worst:.0?}"),
        );
    }
    println!(
        "\n{private_sent} requests to a disallowed path; \
         {violations} sends closer than a host's robots.txt asks"
    );
    println!(
        "crawl: {:.2?} for {} pages on {} hosts; ideal {:.2?} ({:.2}x)",
        took,
        PAGES * hosts.len(),
        hosts.len(),
        ideal,
        took.as_secs_f64() / ideal.as_secs_f64()
    );
    Ok(())
}
