//! A host's robots.txt, fetched through the client and obeyed (feature
//! `robots`).
//!
//! The flow stays one way: before a call's first wait, its origin's rules
//! are looked up (fetched once, through the same pacing as any call, and
//! cached); a disallowed path fails there, and an allowed one is sent no
//! sooner than the host's `Crawl-delay` or `Request-rate` allows, which a
//! spacer per origin (the *gate*) enforces right before each send, counted
//! from the instant the previous send went.
//! What a fetch means is a pure function ([`rules`]) of how it ended and
//! the user-agent; the parsing of `Allow`, `Disallow` and `Crawl-delay` is
//! [`texting_robots`]'s, and `Request-rate` (which it does not read) is
//! read here by the same choice of group.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, Request, Response, StatusCode};
use tokio::time::Instant;

use super::engine::{Call, Gate, Pacer};
use super::wait::Spacer;
use super::{scope, Cost, Priority, SendFailure};
use crate::Error;

/// Obey each host's robots.txt: see [`PaceBuilder::robots`](crate::PaceBuilder::robots).
///
/// For each origin (`scheme://host:port`) the client fetches
/// `/robots.txt` once, before the first call to it, through its own
/// pacing (scopes, caps, retries and breaker apply as to any call), and
/// keeps what it says for [`ttl`](Self::ttl). Then, for the rules of the
/// group for [`user_agent`](Self::new) (else the `*` group):
///
/// - a disallowed path fails at once with [`Error::RobotsDisallowed`],
///   nothing sent (`/robots.txt` itself is always allowed);
/// - `Crawl-delay: d` and `Request-rate: n/p` (the longer interval of the
///   two, a day at most; a `Request-rate`'s time-of-day window is ignored) become the
///   host's ceiling: its sends, retries and the next fetch of its
///   robots.txt included, are spaced by at least that interval, whatever
///   any scope learns or allows.
///
/// A robots.txt that cannot be read follows RFC 9309 and Google's
/// conventions:
///
/// | the fetch ends in | the host is | for |
/// | --- | --- | --- |
/// | 2xx | as its rules say (garbage parses to no rule: all allowed) | `ttl` |
/// | 3xx not followed, 4xx but 429 | all allowed | `ttl` |
/// | 429, 5xx, no answer, a timeout | all disallowed (`unavailable: true`) | [`unavailable_for`](Self::unavailable_for) |
///
/// The body is read up to [`max_size`](Self::max_size) (default 500 KiB,
/// as Google; the rest is ignored), and the whole fetch, waits included,
/// within [`fetch_timeout`](Self::fetch_timeout).
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::{Robots, ThrottledClient};
///
/// let client = ThrottledClient::builder(reqwest::Client::new())
///     .robots(Robots::new("examplebot").ttl(Duration::from_secs(3_600)))
///     .build()?;
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Robots {
    user_agent: String,
    ttl: Duration,
    unavailable_for: Duration,
    max_size: usize,
    fetch_timeout: Duration,
    max_hosts: usize,
}

impl Robots {
    /// Obey the rules for `user_agent`: the product token a robots.txt
    /// names in `User-agent:` lines (`examplebot`, matched without regard
    /// to case), not the whole `User-Agent` header, which the
    /// `reqwest::Client` sends as it is configured to.
    pub fn new(user_agent: impl Into<String>) -> Robots {
        Robots {
            user_agent: user_agent.into(),
            ttl: Duration::from_secs(24 * 3_600),
            unavailable_for: Duration::from_secs(60),
            max_size: 500 * 1024,
            fetch_timeout: Duration::from_secs(10),
            max_hosts: 100_000,
        }
    }

    /// How long a host's robots.txt is kept once read (default 24 hours,
    /// as Google keeps it).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long a host whose robots.txt answered 429 or 5xx, or could not
    /// be fetched, stays disallowed before it is fetched again (default
    /// 60 s): long enough not to hammer a failing host, short enough that a
    /// blip does not lose a crawl's pass over it.
    pub fn unavailable_for(mut self, wait: Duration) -> Self {
        self.unavailable_for = wait;
        self
    }

    /// The most bytes of a robots.txt read (default 500 KiB); the rest is
    /// ignored.
    pub fn max_size(mut self, bytes: usize) -> Self {
        self.max_size = bytes;
        self
    }

    /// The longest a fetch of a robots.txt may take, its waits, retries
    /// and body included (default 10 s); past it the host is unavailable.
    pub fn fetch_timeout(mut self, timeout: Duration) -> Self {
        self.fetch_timeout = timeout;
        self
    }

    /// The most hosts whose rules are kept (default 100 000); past it the
    /// expired ones go, and if none has, all of them.
    pub fn max_hosts(mut self, hosts: usize) -> Self {
        self.max_hosts = hosts.max(1);
        self
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.user_agent.trim().is_empty() {
            return Err(Error::config("robots: the user-agent token is empty"));
        }
        if self.fetch_timeout.is_zero() {
            return Err(Error::config("robots: the fetch timeout is zero"));
        }
        Ok(())
    }
}

/// How the fetch of a robots.txt ended.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// An answer, with the first bytes of its body (empty unless 2xx).
    Answer { status: StatusCode, body: Vec<u8> },
    /// No answer: a transport error, the call's error, a timeout.
    Unreachable,
}

/// Whether a host lets the user-agent in.
#[derive(Debug)]
enum Access {
    All,
    None,
    Rules(Box<texting_robots::Robot>),
}

/// What a host's robots.txt says for one user-agent, and for how long.
#[derive(Debug)]
pub(crate) struct Rules {
    access: Access,
    /// The least time between two requests to the host (a day at most).
    pub(crate) interval: Option<Duration>,
    /// Whether the robots.txt could not be read (429, 5xx, unreachable).
    unavailable: bool,
    /// How long the rules hold.
    keep_for: Duration,
}

impl Rules {
    /// Whether `url` (its path and query) may be fetched.
    pub(crate) fn allows(&self, url: &reqwest::Url) -> bool {
        if url.path() == "/robots.txt" {
            return true;
        }
        match &self.access {
            Access::All => true,
            Access::None => false,
            Access::Rules(robot) => {
                let mut path = url.path().to_owned();
                if let Some(query) = url.query() {
                    path.push('?');
                    path.push_str(query);
                }
                robot.allowed(&path)
            }
        }
    }
}

/// What a fetch that ended as `fetched` means for `config`'s user-agent:
/// a pure function, by the table in [`Robots`].
pub(crate) fn rules(fetched: &Fetched, config: &Robots) -> Rules {
    let unavailable = Rules {
        access: Access::None,
        interval: None,
        unavailable: true,
        keep_for: config.unavailable_for,
    };
    let allow_all = Rules {
        access: Access::All,
        interval: None,
        unavailable: false,
        keep_for: config.ttl,
    };
    let Fetched::Answer { status, body } = fetched else {
        return unavailable;
    };
    if *status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
        || status.is_informational()
    {
        return unavailable;
    }
    if !status.is_success() {
        return allow_all;
    }
    let Ok(robot) = texting_robots::Robot::new(&config.user_agent, body) else {
        return allow_all;
    };
    let crawl_delay = robot
        .delay
        .and_then(|d| Duration::try_from_secs_f32(d).ok());
    // A day at most: the longest wait the crate believes of a server
    // (`MAX_WAIT`), and one the clock can always add to an instant.
    let interval = crawl_delay
        .max(request_rate(body, &config.user_agent))
        .filter(|d| !d.is_zero())
        .map(|d| d.min(crate::headers::MAX_WAIT));
    Rules {
        access: Access::Rules(Box::new(robot)),
        interval,
        unavailable: false,
        keep_for: config.ttl,
    }
}

/// The interval a robots.txt's `Request-rate: n/p` asks of `agent` (the
/// longest, if its group has several): the group whose `User-agent` is
/// `agent` (without regard to case), else the `*` group, as
/// [`texting_robots`] chooses the group for `Crawl-delay`.
pub(crate) fn request_rate(txt: &[u8], agent: &str) -> Option<Duration> {
    let text = String::from_utf8_lossy(txt);
    let agent = agent.to_ascii_lowercase();
    // Each group: its user-agents, and its Request-rate values.
    let mut groups: Vec<(Vec<String>, Vec<Duration>)> = Vec::new();
    let mut naming = false;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        if key == "user-agent" {
            if !naming {
                groups.push((Vec::new(), Vec::new()));
                naming = true;
            }
            if let Some(group) = groups.last_mut() {
                group.0.push(value.to_ascii_lowercase());
            }
            continue;
        }
        naming = false;
        if key == "request-rate" {
            if let (Some(group), Some(interval)) = (groups.last_mut(), parse_request_rate(value)) {
                group.1.push(interval);
            }
        }
    }
    let named = groups.iter().any(|(agents, _)| agents.contains(&agent));
    let wanted = if named { agent.as_str() } else { "*" };
    groups
        .iter()
        .filter(|(agents, _)| agents.iter().any(|a| a == wanted))
        .flat_map(|(_, intervals)| intervals.iter().copied())
        .max()
}

/// `n/p` with `p` in seconds, or with a unit `s`, `m`, `h` or `d`
/// (`1/5`, `1/10s`, `30/1m`), and anything after a space (a time of day
/// window) ignored: the interval `p / n`.
fn parse_request_rate(value: &str) -> Option<Duration> {
    let spec = value.split_whitespace().next()?;
    let (count, per) = spec.split_once('/')?;
    let count: u32 = count.trim().parse().ok().filter(|n| *n > 0)?;
    let per = per.trim();
    let split = per.find(|c: char| !c.is_ascii_digit()).unwrap_or(per.len());
    let (amount, unit) = per.split_at(split);
    let amount: u64 = amount.parse().ok()?;
    let seconds = match unit.to_ascii_lowercase().as_str() {
        "" | "s" => amount,
        "m" => amount.checked_mul(60)?,
        "h" => amount.checked_mul(3_600)?,
        "d" => amount.checked_mul(86_400)?,
        _ => return None,
    };
    Some(Duration::from_secs(seconds) / count)
}

/// The rules of one origin as cached, with the gate that spaces its sends.
struct Cached {
    rules: Arc<Rules>,
    until: Instant,
}

/// One origin's entry: its rules, fetched by one call at a time (the
/// others wait for that fetch), and its gate.
#[derive(Default)]
struct Host {
    cached: tokio::sync::Mutex<Option<Cached>>,
    /// What spaces the host's sends by its interval, when it has one.
    gate: Mutex<Option<Arc<Spacer>>>,
}

impl Host {
    fn gate(&self) -> Option<Arc<Spacer>> {
        crate::sync::lock(&self.gate).clone()
    }

    /// Space the host's sends by `interval` from now on (none: no gate).
    /// A new gate counts the fetch just made as a send.
    fn set_interval(&self, interval: Option<Duration>) {
        let mut gate = crate::sync::lock(&self.gate);
        *gate = match (gate.take(), interval) {
            (_, None) => None,
            (Some(spacer), Some(interval)) => {
                spacer.set_interval(interval);
                Some(spacer)
            }
            (None, Some(interval)) => Some(Arc::new(Spacer::new(interval, Some(Instant::now())))),
        };
    }
}

/// The rules of every origin seen, bounded in number.
pub(crate) struct RobotsCache {
    pub(crate) config: Robots,
    hosts: Mutex<HashMap<String, Arc<Host>>>,
}

impl RobotsCache {
    pub(crate) fn new(config: Robots) -> Self {
        RobotsCache {
            config,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    fn host(&self, origin: &str) -> Arc<Host> {
        let mut hosts = crate::sync::lock(&self.hosts);
        if !hosts.contains_key(origin) && hosts.len() >= self.config.max_hosts {
            let now = Instant::now();
            hosts.retain(|_, host| {
                host.cached
                    .try_lock()
                    .map_or(true, |c| c.as_ref().is_some_and(|c| c.until > now))
            });
            if hosts.len() >= self.config.max_hosts {
                hosts.clear();
            }
        }
        Arc::clone(hosts.entry(origin.to_owned()).or_default())
    }

    /// The interval the cached rules of `origin` ask between requests.
    pub(crate) fn interval(&self, origin: &str) -> Option<Duration> {
        let host = crate::sync::lock(&self.hosts).get(origin).cloned()?;
        let cached = host.cached.try_lock().ok()?;
        cached.as_ref().and_then(|c| c.rules.interval)
    }
}

impl Pacer {
    /// The robots step, before a call's waits: the rules of the request's
    /// origin (fetched through `send` when not cached), a
    /// [`Error::RobotsDisallowed`] when they disallow its path, else the
    /// gate that spaces the host's sends, if it has one.
    pub(crate) async fn obey_robots<F, Fut>(
        &self,
        request: &Request,
        send: &mut F,
    ) -> Result<Option<Gate>, Error>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        let Some(cache) = &self.inner.robots else {
            return Ok(None);
        };
        let Some(origin) = scope::origin(request.url()) else {
            return Ok(None);
        };
        let host = cache.host(&origin);
        let rules = {
            let mut cached = host.cached.lock().await;
            match cached.as_ref().filter(|c| c.until > Instant::now()) {
                Some(c) => Arc::clone(&c.rules),
                None => {
                    let gate = host.gate().map(|gate| (origin.clone(), gate));
                    let fetched = self.fetch_robots(request, send, gate, cache).await;
                    let rules = Arc::new(rules(&fetched, &cache.config));
                    host.set_interval(rules.interval);
                    tracing::debug!(
                        target: "reqwest_pace",
                        origin,
                        unavailable = rules.unavailable,
                        interval_ms = rules.interval.map(|i| i.as_millis() as u64),
                        "read robots.txt"
                    );
                    *cached = Some(Cached {
                        rules: Arc::clone(&rules),
                        until: super::later_by(Instant::now(), rules.keep_for),
                    });
                    rules
                }
            }
        };
        if !rules.allows(request.url()) {
            return Err(Error::RobotsDisallowed {
                url: request.url().to_string(),
                unavailable: rules.unavailable,
            });
        }
        Ok(host.gate().map(|gate| (origin, gate)))
    }

    /// Fetch the robots.txt of `request`'s origin as a call of its own
    /// (paced, retried; spaced by the host's `gate` when it has one), by
    /// the configured time and size.
    async fn fetch_robots<F, Fut>(
        &self,
        request: &Request,
        send: &mut F,
        gate: Option<Gate>,
        cache: &RobotsCache,
    ) -> Fetched
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        let mut url = request.url().clone();
        url.set_path("/robots.txt");
        url.set_query(None);
        url.set_fragment(None);
        let mut fetch = Request::new(Method::GET, url);
        if let Some(agent) = request.headers().get(reqwest::header::USER_AGENT) {
            fetch
                .headers_mut()
                .insert(reqwest::header::USER_AGENT, agent.clone());
        }
        let timeout = cache.config.fetch_timeout;
        let max_size = cache.config.max_size;
        // The fetch serves every call to the origin, not only the one that
        // asked first: it queues in the default class.
        let fetch_call = Call::new(&fetch, Some(timeout), Priority::default());
        let call = async {
            let response = Box::pin(self.paced_attempts(
                fetch,
                &Cost::default(),
                fetch_call,
                &mut *send,
                gate,
            ))
            .await;
            match response {
                Ok(response) if response.status().is_success() => {
                    let status = response.status();
                    match read_at_most(response, max_size).await {
                        Ok(body) => Fetched::Answer { status, body },
                        Err(_) => Fetched::Unreachable,
                    }
                }
                Ok(response) => Fetched::Answer {
                    status: response.status(),
                    body: Vec::new(),
                },
                Err(_) => Fetched::Unreachable,
            }
        };
        tokio::time::timeout(timeout, call)
            .await
            .unwrap_or(Fetched::Unreachable)
    }
}

/// The first `max` bytes of `response`'s body.
async fn read_at_most(mut response: Response, max: usize) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while body.len() < max {
        let Some(chunk) = response.chunk().await? else {
            break;
        };
        let room = max - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: &str) -> Fetched {
        Fetched::Answer {
            status: StatusCode::from_u16(status).unwrap(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn url(path: &str) -> reqwest::Url {
        reqwest::Url::parse(&format!("http://example.test{path}")).unwrap()
    }

    fn config() -> Robots {
        Robots::new("PaceBot")
    }

    #[test]
    fn rules_for_our_agent_or_else_the_star_group() {
        let txt = "User-agent: *\nDisallow: /private\nCrawl-delay: 2\n\n\
                   User-agent: pacebot\nDisallow: /mine\nCrawl-delay: 5\nRequest-rate: 1/10s\n";
        let ours = rules(&answer(200, txt), &config());
        assert!(!ours.allows(&url("/mine/page")));
        assert!(ours.allows(&url("/private")));
        assert!(ours.allows(&url("/robots.txt")));
        // The longer of Crawl-delay and Request-rate.
        assert_eq!(ours.interval, Some(Duration::from_secs(10)));
        let others = rules(&answer(200, txt), &Robots::new("otherbot"));
        assert!(!others.allows(&url("/private?x=1")));
        assert!(others.allows(&url("/mine")));
        assert_eq!(others.interval, Some(Duration::from_secs(2)));
    }

    #[test]
    fn statuses_follow_the_conventions() {
        let c = config().ttl(Duration::from_secs(100));
        for status in [404, 401, 403, 410, 301] {
            let r = rules(&answer(status, ""), &c);
            assert!(r.allows(&url("/anything")), "{status}");
            assert!(!r.unavailable);
            assert_eq!(r.keep_for, Duration::from_secs(100));
        }
        for fetched in [
            answer(500, ""),
            answer(503, ""),
            answer(429, ""),
            Fetched::Unreachable,
        ] {
            let r = rules(&fetched, &c);
            assert!(!r.allows(&url("/anything")), "{fetched:?}");
            assert!(r.unavailable);
            assert_eq!(r.keep_for, Duration::from_secs(60));
        }
        // Garbage is no rule at all.
        let garbage = rules(&answer(200, "\u{0}\u{1}<html>not robots</html>"), &c);
        assert!(garbage.allows(&url("/anything")));
        assert_eq!(garbage.interval, None);
    }

    /// A `Crawl-delay` or `Request-rate` past what an instant can hold
    /// is a day: never a panic when the next send is timed.
    #[test]
    fn an_enormous_interval_is_a_day() {
        for txt in [
            "User-agent: *\nCrawl-delay: 1e19\n",
            "User-agent: *\nRequest-rate: 1/18446744073709551615\n",
        ] {
            let r = rules(&answer(200, txt), &config());
            assert_eq!(r.interval, Some(crate::headers::MAX_WAIT), "{txt}");
        }
    }

    #[test]
    fn request_rates_in_their_forms() {
        assert_eq!(parse_request_rate("1/5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_request_rate("1/10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_request_rate("30/1m"), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_request_rate("1/1h 0600-0845"),
            Some(Duration::from_secs(3_600))
        );
        assert_eq!(parse_request_rate("4/1"), Some(Duration::from_millis(250)));
        for bad in ["", "0/5", "1/", "x/5", "1/5y", "1-5"] {
            assert_eq!(parse_request_rate(bad), None, "{bad}");
        }
        let txt = "User-agent: a\nUser-agent: B\nRequest-rate: 1/3 # slow\nRequest-rate: 1/4\n";
        assert_eq!(
            request_rate(txt.as_bytes(), "b"),
            Some(Duration::from_secs(4))
        );
        assert_eq!(request_rate(txt.as_bytes(), "c"), None);
    }
}
