//! The server's state: one bucket per client key, the fault queue and the
//! log. Everything here is a function of `now` (nanoseconds since the
//! server started, on the tokio clock), with no I/O.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use http::{Method, StatusCode};

use super::algorithm::{Meter, ServerAlgorithm};
use super::dialect::Figures;
use super::fault::{Fault, RetryAfter};
use super::key::ClientKey;
use crate::limiter::Nanos;
use crate::RequestRate;

/// Above this many buckets, full ones are dropped (a full bucket behaves
/// exactly like a new one, so nothing changes but memory).
const SWEEP_ABOVE: usize = 10_000;

/// How a request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Answer {
    /// The bucket had a token: `200 OK`.
    Admitted,
    /// The limiter refused: `429 Too Many Requests`, or the configured
    /// refusal status.
    Throttled,
    /// An injected [`Fault`] answered, whatever the bucket held.
    Fault,
    /// The [front limiter](super::ServerBuilder::front_limiter) refused
    /// before the main one saw the request: a bare refusal, with no
    /// rate-limit headers and nothing counted by the main limiter.
    FrontRefused,
}

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestRecord {
    /// When the limiter decided, since the server started, on the tokio
    /// clock (exact under `tokio::time::pause()`).
    pub at: Duration,
    /// Whose bucket it was counted against.
    pub key: ClientKey,
    /// The request method.
    pub method: Method,
    /// The request path, without the query.
    pub path: String,
    /// How long the server took to answer it: its
    /// [`latency`](super::ServerBuilder::latency) plus what its load added
    /// ([`latency_per_in_flight`](super::ServerBuilder::latency_per_in_flight)).
    pub latency: Duration,
    /// The status answered.
    pub status: StatusCode,
    /// Why that status.
    pub outcome: Answer,
}

/// Request counts, for the whole server or one client key.
///
/// `requests == ok + throttled + faults + front_refused`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Every request answered.
    pub requests: u64,
    /// Admitted by the limiter (`200`).
    pub ok: u64,
    /// Refused by the limiter (`429`, or the configured refusal status).
    pub throttled: u64,
    /// Answered by an injected [`Fault`], whatever its status.
    pub faults: u64,
    /// Refused by the [front limiter](super::ServerBuilder::front_limiter).
    pub front_refused: u64,
}

impl Counts {
    fn count(&mut self, outcome: Answer) {
        self.requests += 1;
        match outcome {
            Answer::Admitted => self.ok += 1,
            Answer::Throttled => self.throttled += 1,
            Answer::Fault => self.faults += 1,
            Answer::FrontRefused => self.front_refused += 1,
        }
    }
}

/// What the server has answered so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStats {
    /// Over all clients.
    pub total: Counts,
    /// Per client key.
    pub per_key: BTreeMap<ClientKey, Counts>,
}

/// The answer for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Admitted(Figures),
    /// Refused by the limiter, answered with this status.
    Throttled(Figures, StatusCode),
    Fault {
        status: StatusCode,
        retry_after: Option<RetryAfter>,
    },
    /// Refused by the front limiter: a bare answer with this status.
    Front(StatusCode),
}

impl Verdict {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Verdict::Admitted(_) => StatusCode::OK,
            Verdict::Throttled(_, status) => *status,
            Verdict::Fault { status, .. } | Verdict::Front(status) => *status,
        }
    }

    fn outcome(&self) -> Answer {
        match self {
            Verdict::Admitted(_) => Answer::Admitted,
            Verdict::Throttled(..) => Answer::Throttled,
            Verdict::Fault { .. } => Answer::Fault,
            Verdict::Front(_) => Answer::FrontRefused,
        }
    }
}

/// The request facts the log keeps.
pub(crate) struct Seen {
    pub(crate) key: ClientKey,
    pub(crate) method: Method,
    pub(crate) path: String,
    /// How long the server took before deciding (its latency and load).
    pub(crate) latency: Duration,
}

/// How the main limiter counts and answers, apart from its algorithm.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    /// Whether a bucket states its burst as its limit.
    pub(crate) limit_is_burst: bool,
    /// The status of a refusal.
    pub(crate) refusal: StatusCode,
    /// Whether refused requests are counted as admitted ones would be.
    pub(crate) counts_refusals: bool,
    /// Whether fixed windows begin at whole multiples of their length.
    pub(crate) aligned_windows: bool,
}

/// A header-less limiter in front of the main one, per client key.
pub(crate) struct Front {
    algorithm: ServerAlgorithm,
    status: StatusCode,
    meters: HashMap<ClientKey, Meter>,
}

impl Front {
    pub(crate) fn new(algorithm: ServerAlgorithm, status: StatusCode) -> Front {
        Front {
            algorithm,
            status,
            meters: HashMap::new(),
        }
    }

    /// Whether the front lets the request of `key` at `now` through.
    fn passes(&mut self, now: Nanos, key: &ClientKey) -> bool {
        let algorithm = self.algorithm;
        if self.meters.len() >= SWEEP_ABOVE && !self.meters.contains_key(key) {
            self.meters
                .retain(|_, meter| !meter.is_idle(&algorithm, now));
        }
        let meter = self
            .meters
            .entry(key.clone())
            .or_insert_with(|| algorithm.meter());
        meter.decide(&algorithm, now, false).until_one.is_none()
    }
}

pub(crate) struct State {
    algorithm: ServerAlgorithm,
    /// The algorithm's sustained rate, as last set.
    limit: RequestRate,
    policy: Policy,
    front: Option<Front>,
    /// Per client key and resource (0: the default, `i + 1`: `routes[i]`).
    buckets: HashMap<(ClientKey, usize), Meter>,
    /// Paths counted apart: prefix, resource name, algorithm.
    routes: Vec<(String, String, ServerAlgorithm)>,
    faults: VecDeque<Fault>,
    stats: ServerStats,
    records: Vec<RequestRecord>,
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The limit as the headers write it: whole requests per second.
fn header_limit(rate: RequestRate) -> u64 {
    whole_per_second(rate.per_second_f64())
}

/// A rate per second rounded to the nearest whole one, at least 1.
fn whole_per_second(per_second: f64) -> u64 {
    // Finite and positive for a `RequestRate` or an algorithm's sustained rate;
    // `as` saturates.
    (per_second.round() as u64).max(1)
}

/// The limit an algorithm states: a bucket's rate per second (or its
/// burst, with `limit_is_burst`), a window's limit.
fn stated_limit(algorithm: &ServerAlgorithm, limit_is_burst: bool) -> u64 {
    match *algorithm {
        ServerAlgorithm::TokenBucket { rate, .. } | ServerAlgorithm::LeakyBucket { rate, .. } => {
            if limit_is_burst {
                algorithm.burst()
            } else {
                header_limit(rate)
            }
        }
        ServerAlgorithm::Gcra { rate, burst } => {
            if limit_is_burst {
                burst
            } else {
                rate.count()
            }
        }
        ServerAlgorithm::FixedWindow { limit, .. }
        | ServerAlgorithm::SlidingLog { limit, .. }
        | ServerAlgorithm::SlidingCounter { limit, .. } => limit,
    }
}

impl State {
    pub(crate) fn new(
        algorithm: ServerAlgorithm,
        limit: RequestRate,
        policy: Policy,
        front: Option<Front>,
    ) -> State {
        State {
            algorithm,
            limit,
            policy,
            front,
            buckets: HashMap::new(),
            routes: Vec::new(),
            faults: VecDeque::new(),
            stats: ServerStats::default(),
            records: Vec::new(),
        }
    }

    pub(crate) fn algorithm(&self) -> ServerAlgorithm {
        self.algorithm
    }

    pub(crate) fn limit(&self) -> RequestRate {
        self.limit
    }

    /// Changes the rate of every bucket now (tokens earned are kept) and of
    /// the buckets made from now on; a window scales its limit.
    pub(crate) fn set_limit(&mut self, now: Duration, rate: RequestRate) {
        let now = nanos(now);
        self.algorithm = self.algorithm.with_rate(rate);
        self.limit = rate;
        for ((_, resource), bucket) in self.buckets.iter_mut() {
            if *resource == 0 {
                bucket.set_rate(now, rate);
            }
        }
    }

    pub(crate) fn inject(&mut self, fault: Fault) {
        if fault.times > 0 {
            self.faults.push_back(fault);
        }
    }

    /// Decides the request `seen` at `now`, and counts and logs it.
    pub(crate) fn decide(&mut self, now: Duration, seen: Seen) -> Verdict {
        let verdict = match self.next_fault() {
            Some(fault) => Verdict::Fault {
                status: fault.status,
                retry_after: fault.retry_after,
            },
            None => {
                // The front decides first; what it refuses never reaches
                // the main limiter.
                let front_refusal = self.front.as_mut().and_then(|front| {
                    (!front.passes(nanos(now), &seen.key)).then_some(front.status)
                });
                match front_refusal {
                    Some(status) => Verdict::Front(status),
                    None => {
                        let resource = self.resource(&seen.path);
                        self.admit(nanos(now), &seen.key, resource)
                    }
                }
            }
        };
        let outcome = verdict.outcome();
        self.stats.total.count(outcome);
        self.stats
            .per_key
            .entry(seen.key.clone())
            .or_default()
            .count(outcome);
        self.records.push(RequestRecord {
            at: now,
            key: seen.key,
            method: seen.method,
            path: seen.path,
            latency: seen.latency,
            status: verdict.status(),
            outcome,
        });
        verdict
    }

    fn next_fault(&mut self) -> Option<Fault> {
        let front = self.faults.front_mut()?;
        front.times -= 1;
        let fault = front.clone();
        if front.times == 0 {
            self.faults.pop_front();
        }
        Some(fault)
    }

    /// Counts `path` in its own resource from now on: requests whose path
    /// starts with `prefix` meet `algorithm`, named `name` (GitHub's
    /// `x-ratelimit-resource`). The first matching route wins.
    pub(crate) fn add_route(&mut self, prefix: String, name: String, algorithm: ServerAlgorithm) {
        self.routes.push((prefix, name, algorithm));
    }

    /// The resource `path` is counted in.
    fn resource(&self, path: &str) -> usize {
        self.routes
            .iter()
            .position(|(prefix, _, _)| path.starts_with(prefix.as_str()))
            .map_or(0, |i| i + 1)
    }

    /// The resource name written for `path` (`core` by default).
    pub(crate) fn resource_name(&self, path: &str) -> &str {
        match self.resource(path) {
            0 => "core",
            i => &self.routes[i - 1].1,
        }
    }

    fn algorithm_of(&self, resource: usize) -> ServerAlgorithm {
        match resource {
            0 => self.algorithm,
            i => self.routes[i - 1].2,
        }
    }

    fn admit(&mut self, now: Nanos, key: &ClientKey, resource: usize) -> Verdict {
        let algorithm = self.algorithm_of(resource);
        let slot = (key.clone(), resource);
        if self.buckets.len() >= SWEEP_ABOVE && !self.buckets.contains_key(&slot) {
            let (default, routes) = (self.algorithm, self.routes.clone());
            self.buckets.retain(|(_, r), bucket| {
                let algorithm = match r {
                    0 => default,
                    i => routes[i - 1].2,
                };
                !bucket.is_idle(&algorithm, now)
            });
        }
        // A new key starts full (a bucket made full at instant 0 has stayed
        // full since; a window or log starts empty).
        let meter = self
            .buckets
            .entry(slot)
            .or_insert_with(|| algorithm.meter_aligned(self.policy.aligned_windows));
        let decision = meter.decide(&algorithm, now, self.policy.counts_refusals);
        let figures = Figures {
            limit: stated_limit(&algorithm, self.policy.limit_is_burst),
            remaining: decision.remaining,
            until_full: decision.reset,
            until_one: decision.until_one,
            window: algorithm.window(),
            per_second: whole_per_second(algorithm.sustained_per_second()),
            burst: algorithm.burst(),
        };
        if figures.until_one.is_some() {
            Verdict::Throttled(figures, self.policy.refusal)
        } else {
            Verdict::Admitted(figures)
        }
    }

    pub(crate) fn stats(&self) -> ServerStats {
        self.stats.clone()
    }

    pub(crate) fn records(&self) -> Vec<RequestRecord> {
        self.records.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    const POLICY: Policy = Policy {
        limit_is_burst: false,
        refusal: StatusCode::TOO_MANY_REQUESTS,
        counts_refusals: false,
        aligned_windows: false,
    };

    fn bucket(per_second: u64, burst: u64) -> ServerAlgorithm {
        ServerAlgorithm::TokenBucket {
            rate: RequestRate::per_second(per_second).unwrap(),
            burst,
        }
    }

    fn seen(key: &str) -> Seen {
        Seen {
            key: ClientKey::ApiKey(key.into()),
            method: Method::GET,
            path: "/".into(),
            latency: Duration::ZERO,
        }
    }

    fn figures(v: Verdict) -> Figures {
        match v {
            Verdict::Admitted(f) | Verdict::Throttled(f, _) => f,
            Verdict::Fault { .. } | Verdict::Front(_) => panic!("unexpected fault"),
        }
    }

    #[test]
    fn burst_then_exact_refusals() {
        let mut s = State::new(
            bucket(50, 10),
            RequestRate::per_second(50).unwrap(),
            POLICY,
            None,
        );
        for left in (0..10).rev() {
            let v = s.decide(Duration::ZERO, seen("a"));
            assert!(matches!(v, Verdict::Admitted(_)));
            let f = figures(v);
            assert_eq!(f.remaining, left);
            assert_eq!(f.until_full, (10 - left as u32) * 20 * MS);
        }
        let v = s.decide(5 * MS, seen("a"));
        assert!(matches!(v, Verdict::Throttled(..)));
        assert_eq!(
            figures(v),
            Figures {
                limit: 50,
                remaining: 0,
                until_full: 195 * MS,
                until_one: Some(15 * MS),
                window: Duration::from_secs(1),
                per_second: 50,
                burst: 10,
            }
        );
        assert!(matches!(s.decide(20 * MS, seen("a")), Verdict::Admitted(_)));
        assert!(matches!(s.decide(20 * MS, seen("b")), Verdict::Admitted(_)));
        let stats = s.stats();
        assert_eq!((stats.total.requests, stats.total.throttled), (13, 1));
        assert_eq!(stats.per_key[&ClientKey::ApiKey("b".into())].ok, 1);
    }

    #[test]
    fn set_limit_rescales_the_deficit() {
        let mut s = State::new(
            bucket(10, 1),
            RequestRate::per_second(10).unwrap(),
            POLICY,
            None,
        );
        s.decide(Duration::ZERO, seen("a"));
        s.set_limit(Duration::ZERO, RequestRate::per_second(1).unwrap());
        let f = figures(s.decide(100 * MS, seen("a")));
        assert_eq!(f.limit, 1);
        assert_eq!(f.until_one, Some(900 * MS));
        // A key first seen after the change gets the new rate too.
        s.decide(Duration::ZERO, seen("b"));
        assert_eq!(
            figures(s.decide(Duration::ZERO, seen("b"))).until_one,
            Some(1000 * MS)
        );
    }

    #[test]
    fn faults_take_no_tokens() {
        let mut s = State::new(
            bucket(1, 1),
            RequestRate::per_second(1).unwrap(),
            POLICY,
            None,
        );
        s.inject(Fault::service_unavailable().times(2));
        s.inject(Fault::internal_server_error().times(0));
        s.inject(Fault::too_many_requests());
        let statuses: Vec<u16> = (0..4)
            .map(|_| s.decide(Duration::ZERO, seen("a")).status().as_u16())
            .collect();
        assert_eq!(statuses, [503, 503, 429, 200]);
        let stats = s.stats();
        assert_eq!(stats.total.faults, 3);
        assert_eq!(s.records()[2].outcome, Answer::Fault);
    }

    #[test]
    fn header_limits_are_whole() {
        assert_eq!(header_limit(RequestRate::per_second(3).unwrap()), 3);
        assert_eq!(header_limit(RequestRate::per_minute(1).unwrap()), 1);
        assert_eq!(header_limit(RequestRate::new(5, 2 * 1000 * MS).unwrap()), 3);
    }
}
