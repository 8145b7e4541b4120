//! The model's state: per client key, one token bucket per rate limit and
//! a count of calls in flight; the seeded draw of each call's usage; the
//! counters and the log. Everything is a function of `now` (on the tokio
//! clock since the server started), with no I/O.

use std::collections::HashMap;
use std::time::Duration;

use super::{LlmLimit, LlmRecord, LlmStats, Usage};
use crate::limiter::{admit, Nanos};
use crate::testing::ClientKey;
use crate::{Error, RequestRate};

/// The rate limits, in the order a refusal names one of equal waits.
pub(crate) const RATES: [LlmLimit; 4] = [
    LlmLimit::Requests,
    LlmLimit::Tokens,
    LlmLimit::InputTokens,
    LlmLimit::OutputTokens,
];

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A token bucket of `per_minute` tokens, refilled continuously at
/// `per_minute` a minute: GCRA arithmetic on one instant, `full_at`, with
/// the crate's own step ([`admit`]), so refusal times are exact to the
/// nanosecond.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bucket {
    per_minute: u64,
    /// Nanoseconds per token (rounded up: never faster than stated).
    interval: Nanos,
    /// `per_minute × interval`: how long an empty bucket takes to fill.
    span: Nanos,
    /// When the bucket is full again (full whenever it is not after now).
    full_at: Nanos,
}

impl Bucket {
    pub(crate) fn new(per_minute: u64) -> Result<Bucket, Error> {
        let interval = RequestRate::per_minute(per_minute)?.interval_nanos();
        let span = interval
            .checked_mul(per_minute)
            .ok_or_else(|| Error::config(format!("{per_minute} a minute is too large a limit")))?;
        Ok(Bucket {
            per_minute,
            interval,
            span,
            full_at: 0,
        })
    }

    /// The `full_at` after taking `n` tokens at `now`; else how long until
    /// they are there (`None`: never, `n` is above the capacity).
    fn check(&self, now: Nanos, n: u64) -> Result<Nanos, Option<Nanos>> {
        if n > self.per_minute {
            return Err(None);
        }
        // n ≤ per_minute, so n × interval ≤ span fits.
        match admit(self.full_at, now, n * self.interval, self.span) {
            Ok(full_at) => Ok(full_at),
            Err(ready) => Err(Some(ready.saturating_sub(now))),
        }
    }

    /// Give back `n` tokens taken earlier, at `now`: as if they had not
    /// been taken, but never fuller than full.
    fn refund(&mut self, now: Nanos, n: u64) {
        let back = n.saturating_mul(self.interval);
        self.full_at = self.full_at.saturating_sub(back).max(now);
    }

    /// Whole tokens in the bucket at `now`.
    fn remaining(&self, now: Nanos) -> u64 {
        let owed = self.full_at.saturating_sub(now).min(self.span);
        (self.span - owed) / self.interval
    }

    fn until_full(&self, now: Nanos) -> Duration {
        Duration::from_nanos(self.full_at.saturating_sub(now))
    }
}

/// What a call states it may cost, before it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// The prompt's tokens (known exactly: the server counts them).
    pub(crate) input: u64,
    /// The most output tokens the call may produce (`max_tokens`).
    pub(crate) max_output: u64,
}

/// What `limit` takes for a call of `input` and `output` tokens.
fn weight(limit: LlmLimit, input: u64, output: u64) -> u64 {
    match limit {
        LlmLimit::Requests => 1,
        LlmLimit::Tokens => input.saturating_add(output),
        LlmLimit::InputTokens => input,
        LlmLimit::OutputTokens | LlmLimit::Concurrency => output,
    }
}

/// One limit's figures as a response leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Figure {
    pub(crate) limit: LlmLimit,
    /// The limit per minute (the bucket's capacity).
    pub(crate) per_minute: u64,
    /// Whole units left.
    pub(crate) remaining: u64,
    /// Until the bucket is full again.
    pub(crate) until_full: Duration,
}

/// An admitted call, until it completes or is abandoned.
#[derive(Debug)]
pub(crate) struct Ticket {
    key: ClientKey,
    estimate: Estimate,
    pub(crate) usage: Usage,
    /// Its entry in the log.
    record: usize,
}

/// The answer to one call.
#[derive(Debug)]
pub(crate) enum Decision {
    Admitted(Ticket),
    Refused {
        limit: LlmLimit,
        /// How long until the call would be admitted, when waiting helps.
        wait: Option<Duration>,
        /// What the call asked of the limit that refused it.
        requested: u64,
        figures: Vec<Figure>,
    },
}

/// How the model is configured.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The rate limits per minute, in the order of [`RATES`].
    pub(crate) per_minute: [Option<u64>; 4],
    pub(crate) max_in_flight: Option<usize>,
    /// A call's output is drawn uniformly between these percentages of its
    /// `max_tokens`, both included.
    pub(crate) output_percent: (u64, u64),
    pub(crate) seed: u64,
}

/// The output of a call that may produce `max_output` tokens: uniform
/// between `low` and `high` percent of it.
fn draw(rng: &mut fastrand::Rng, (low, high): (u64, u64), max_output: u64) -> u64 {
    let share = |percent: u64| {
        u64::try_from(u128::from(max_output) * u128::from(percent) / 100).unwrap_or(max_output)
    };
    let (low, high) = (share(low), share(high));
    rng.u64(low..=high.max(low))
}

#[derive(Clone)]
struct Key {
    buckets: [Option<Bucket>; 4],
    in_flight: usize,
}

impl Key {
    fn figures(&self, now: Nanos) -> Vec<Figure> {
        RATES
            .iter()
            .zip(&self.buckets)
            .filter_map(|(&limit, bucket)| {
                bucket.map(|b| Figure {
                    limit,
                    per_minute: b.per_minute,
                    remaining: b.remaining(now),
                    until_full: b.until_full(now),
                })
            })
            .collect()
    }
}

#[derive(Clone)]
pub(crate) struct Model {
    /// Fresh buckets, as a new key gets them (full).
    template: [Option<Bucket>; 4],
    max_in_flight: Option<usize>,
    output_percent: (u64, u64),
    rng: fastrand::Rng,
    keys: HashMap<ClientKey, Key>,
    stats: LlmStats,
    records: Vec<LlmRecord>,
}

impl Model {
    pub(crate) fn new(config: &Config) -> Result<Model, Error> {
        let mut template = [None; 4];
        for (slot, per_minute) in template.iter_mut().zip(config.per_minute) {
            if let Some(per_minute) = per_minute {
                *slot = Some(Bucket::new(per_minute)?);
            }
        }
        if config.max_in_flight == Some(0) {
            return Err(Error::config("a cap on calls in flight must be at least 1"));
        }
        let (low, high) = config.output_percent;
        if low > high || high > 100 {
            return Err(Error::config(format!(
                "output between {low} % and {high} % of max_tokens: need low ≤ high ≤ 100"
            )));
        }
        Ok(Model {
            template,
            max_in_flight: config.max_in_flight,
            output_percent: config.output_percent,
            rng: fastrand::Rng::with_seed(config.seed),
            keys: HashMap::new(),
            stats: LlmStats::default(),
            records: Vec::new(),
        })
    }

    /// The configured limit per minute of `limit`, if it is enforced.
    pub(crate) fn per_minute(&self, limit: LlmLimit) -> Option<u64> {
        let i = RATES.iter().position(|l| *l == limit)?;
        self.template[i].map(|b| b.per_minute)
    }

    pub(crate) fn max_in_flight(&self) -> Option<usize> {
        self.max_in_flight
    }

    /// Decides a call of `estimate` from `key` at `now`; counts and logs
    /// it. A refusal takes nothing from any limit.
    pub(crate) fn decide(&mut self, now: Duration, key: ClientKey, estimate: Estimate) -> Decision {
        let at = nanos(now);
        let template = self.template;
        let entry = self.keys.entry(key.clone()).or_insert(Key {
            buckets: template,
            in_flight: 0,
        });
        self.stats.requests += 1;
        let index = self.records.len();
        let mut record = LlmRecord {
            at: now,
            key: key.clone(),
            estimate: Usage {
                input_tokens: estimate.input,
                output_tokens: estimate.max_output,
            },
            refused: None,
            retry_after: None,
            usage: None,
            completed_at: None,
        };

        // Every rate limit decides; the one whose wait is longest (never,
        // for a call above its capacity) names the refusal.
        let mut next = [None; 4];
        let mut refusal: Option<(LlmLimit, Option<Nanos>, u64)> = None;
        for (i, (&limit, bucket)) in RATES.iter().zip(&entry.buckets).enumerate() {
            let Some(bucket) = bucket else { continue };
            let n = weight(limit, estimate.input, estimate.max_output);
            match bucket.check(at, n) {
                Ok(full_at) => next[i] = Some(full_at),
                Err(wait) => {
                    let longer = match (refusal, wait) {
                        (None, _) => true,
                        (Some((_, Some(worst), _)), Some(wait)) => wait > worst,
                        (Some((_, Some(_), _)), None) => true,
                        (Some((_, None, _)), _) => false,
                    };
                    if longer {
                        refusal = Some((limit, wait, n));
                    }
                }
            }
        }
        if refusal.is_none() && self.max_in_flight.is_some_and(|cap| entry.in_flight >= cap) {
            refusal = Some((LlmLimit::Concurrency, None, 1));
        }
        if let Some((limit, wait, requested)) = refusal {
            let wait = wait.map(Duration::from_nanos);
            self.stats.count_refusal(limit);
            record.refused = Some(limit);
            record.retry_after = wait;
            self.records.push(record);
            return Decision::Refused {
                limit,
                wait,
                requested,
                figures: entry.figures(at),
            };
        }

        for (bucket, full_at) in entry.buckets.iter_mut().zip(next) {
            if let (Some(bucket), Some(full_at)) = (bucket, full_at) {
                bucket.full_at = full_at;
            }
        }
        entry.in_flight += 1;
        self.stats.peak_in_flight = self.stats.peak_in_flight.max(entry.in_flight);
        let usage = Usage {
            input_tokens: estimate.input,
            output_tokens: draw(&mut self.rng, self.output_percent, estimate.max_output),
        };
        self.stats.admitted += 1;
        self.stats.input_tokens_charged += estimate.input;
        self.stats.output_tokens_charged += estimate.max_output;
        record.usage = Some(usage);
        self.records.push(record);
        Decision::Admitted(Ticket {
            key,
            estimate,
            usage,
            record: index,
        })
    }

    /// The call of `ticket` completes at `now`: every token limit gives
    /// back what the estimate took beyond the usage, so it is charged the
    /// usage. Returns the figures the response carries.
    pub(crate) fn complete(&mut self, now: Duration, ticket: &Ticket) -> Vec<Figure> {
        let at = nanos(now);
        let (estimate, usage) = (ticket.estimate, ticket.usage);
        let Some(entry) = self.keys.get_mut(&ticket.key) else {
            return Vec::new();
        };
        for (&limit, bucket) in RATES.iter().zip(entry.buckets.iter_mut()) {
            if let Some(bucket) = bucket {
                let took = weight(limit, estimate.input, estimate.max_output);
                let used = weight(limit, usage.input_tokens, usage.output_tokens);
                bucket.refund(at, took.saturating_sub(used));
            }
        }
        entry.in_flight = entry.in_flight.saturating_sub(1);
        self.stats.completed += 1;
        self.stats.output_tokens_charged -= estimate.max_output.saturating_sub(usage.output_tokens);
        if let Some(record) = self.records.get_mut(ticket.record) {
            record.completed_at = Some(now);
        }
        entry.figures(at)
    }

    /// The call of `ticket` was dropped before it completed (the client
    /// went away): it leaves the calls in flight, and its estimate stays
    /// charged.
    pub(crate) fn abandon(&mut self, ticket: &Ticket) {
        if let Some(entry) = self.keys.get_mut(&ticket.key) {
            entry.in_flight = entry.in_flight.saturating_sub(1);
        }
        self.stats.abandoned += 1;
    }

    /// A call whose body could not be read as a request.
    pub(crate) fn count_invalid(&mut self) {
        self.stats.requests += 1;
        self.stats.invalid += 1;
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.keys.values().map(|k| k.in_flight).sum()
    }

    pub(crate) fn stats(&self) -> LlmStats {
        self.stats.clone()
    }

    pub(crate) fn records(&self) -> Vec<LlmRecord> {
        self.records.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    fn config(per_minute: [Option<u64>; 4], max_in_flight: Option<usize>) -> Config {
        Config {
            per_minute,
            max_in_flight,
            output_percent: (20, 100),
            seed: 1,
        }
    }

    fn key() -> ClientKey {
        ClientKey::ApiKey("k".into())
    }

    fn call(input: u64, max_output: u64) -> Estimate {
        Estimate { input, max_output }
    }

    fn refused(d: &Decision) -> Option<(LlmLimit, Option<Duration>)> {
        match d {
            Decision::Admitted(_) => None,
            Decision::Refused { limit, wait, .. } => Some((*limit, *wait)),
        }
    }

    #[test]
    fn a_bucket_refills_continuously_and_refunds_to_full_at_most() {
        let mut b = Bucket::new(60).unwrap();
        for _ in 0..60 {
            b.full_at = b.check(0, 1).unwrap();
        }
        assert_eq!(b.remaining(0), 0);
        assert_eq!(b.check(0, 1), Err(Some(1_000_000_000)));
        assert_eq!(b.check(500_000_000, 1), Err(Some(500_000_000)));
        assert!(b.check(1_000_000_000, 1).is_ok());
        assert_eq!(b.until_full(0), 60 * SEC);
        assert_eq!(b.check(0, 61), Err(None));
        // One a second: 10 earned by 10 s, and 30 given back.
        b.refund(10_000_000_000, 30);
        assert_eq!(b.remaining(10_000_000_000), 40);
        b.refund(10_000_000_000, 1_000);
        assert_eq!(b.remaining(10_000_000_000), 60);
        assert_eq!(b.until_full(10_000_000_000), Duration::ZERO);
    }

    #[test]
    fn the_longest_wait_names_the_refusal_and_nothing_is_taken() {
        // 60 requests, 6 000 tokens a minute: 10 ms a token.
        let mut m = Model::new(&config([Some(60), Some(6_000), None, None], None)).unwrap();
        let d = m.decide(Duration::ZERO, key(), call(5_000, 1_000));
        let Decision::Admitted(t) = d else {
            panic!("refused: {d:?}")
        };
        // Nothing left: the next call of 10 tokens waits 100 ms for them,
        // where the requests would admit it at once.
        let d = m.decide(Duration::ZERO, key(), call(10, 0));
        assert_eq!(refused(&d), Some((LlmLimit::Tokens, Some(100 * MS))));
        // Completing gives back what the draw did not use.
        let figures = m.complete(2 * SEC, &t);
        let used = t.usage.total();
        assert!((5_200..=6_000).contains(&used), "{used}");
        let tokens = figures
            .iter()
            .find(|f| f.limit == LlmLimit::Tokens)
            .unwrap();
        // 2 s refilled 200 tokens; 6 000 − used were given back.
        assert_eq!(tokens.remaining, 6_000 - used + 200);
        let stats = m.stats();
        assert_eq!(
            stats.input_tokens_charged + stats.output_tokens_charged,
            used
        );
        assert_eq!(stats.refused(LlmLimit::Tokens), 1);
        // A call above the capacity never fits: no wait.
        let d = m.decide(2 * SEC, key(), call(6_001, 0));
        assert_eq!(refused(&d), Some((LlmLimit::Tokens, None)));
        // And beats a limit that only asks for a wait.
        let mut m = Model::new(&config([Some(1), Some(100), None, None], None)).unwrap();
        assert!(refused(&m.decide(Duration::ZERO, key(), call(1, 1))).is_none());
        let d = m.decide(Duration::ZERO, key(), call(200, 0));
        assert_eq!(refused(&d), Some((LlmLimit::Tokens, None)));
    }

    #[test]
    fn concurrency_refuses_only_when_every_rate_admits() {
        let mut m = Model::new(&config([Some(3), None, None, None], Some(2))).unwrap();
        let a = m.decide(Duration::ZERO, key(), call(1, 1));
        let b = m.decide(Duration::ZERO, key(), call(1, 1));
        let c = m.decide(Duration::ZERO, key(), call(1, 1));
        assert_eq!(refused(&c), Some((LlmLimit::Concurrency, None)));
        // Another key has its own.
        let other = m.decide(Duration::ZERO, ClientKey::ApiKey("o".into()), call(1, 1));
        assert!(refused(&other).is_none());
        let (Decision::Admitted(a), Decision::Admitted(b)) = (a, b) else {
            panic!("refused")
        };
        m.complete(MS, &a);
        m.abandon(&b);
        assert_eq!(m.in_flight(), 1);
        // Requests refuse first now: 3 a minute, 2 taken, refusals free.
        assert!(refused(&m.decide(MS, key(), call(1, 1))).is_none());
        let d = m.decide(MS, key(), call(1, 1));
        assert_eq!(refused(&d), Some((LlmLimit::Requests, Some(20 * SEC - MS))));
        let stats = m.stats();
        assert_eq!(stats.peak_in_flight, 2);
        assert_eq!((stats.completed, stats.abandoned), (1, 1));
        assert_eq!(stats.refused(LlmLimit::Concurrency), 1);
        assert_eq!(stats.refused_total(), 2);
    }

    #[test]
    fn usage_is_the_same_for_the_same_seed() {
        let draws = |seed| {
            let mut c = config([None; 4], None);
            c.seed = seed;
            let mut m = Model::new(&c).unwrap();
            (0..20)
                .map(|_| match m.decide(Duration::ZERO, key(), call(7, 1_000)) {
                    Decision::Admitted(t) => t.usage.output_tokens,
                    Decision::Refused { .. } => u64::MAX,
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(3), draws(3));
        assert_ne!(draws(3), draws(4));
        assert!(draws(3).iter().all(|o| (200..=1_000).contains(o)));
    }

    proptest::proptest! {
        /// Whatever came before, a call refused with a wait is refused a
        /// nanosecond before it and admitted at it (if nothing else comes):
        /// the wait named is the longest of the limits', and exact. And once
        /// every call is answered, the limits are charged the usage.
        #[test]
        fn refusal_waits_are_exact_and_usage_is_charged(
            ops in proptest::collection::vec(
                (0u64..3_000_000_000, 0u64..2_500, 0u64..1_500, proptest::bool::ANY),
                1..80,
            ),
            seed in 0u64..1_000,
        ) {
            let mut c = config([Some(30), Some(5_000), Some(3_000), Some(2_000)], None);
            c.seed = seed;
            let mut m = Model::new(&c).unwrap();
            let mut held = std::collections::VecDeque::new();
            let mut now = Duration::ZERO;
            let mut used = 0;
            for (dt, input, max_output, complete) in ops {
                now += Duration::from_nanos(dt);
                if complete {
                    if let Some(t) = held.pop_front() {
                        m.complete(now, &t);
                        used += Usage::total(&t.usage);
                    }
                }
                let before = m.clone();
                match m.decide(now, key(), call(input, max_output)) {
                    Decision::Admitted(t) => held.push_back(t),
                    Decision::Refused { wait: Some(wait), limit, .. } => {
                        if !wait.is_zero() {
                            let mut early = before.clone();
                            let d = early.decide(now + wait - Duration::from_nanos(1), key(), call(input, max_output));
                            proptest::prop_assert_eq!(refused(&d).map(|r| r.0), Some(limit));
                        }
                        let mut on_time = before;
                        let d = on_time.decide(now + wait, key(), call(input, max_output));
                        proptest::prop_assert!(refused(&d).is_none(), "{:?}", d);
                    }
                    Decision::Refused { wait: None, .. } => {
                        proptest::prop_assert!(input > 3_000 || max_output > 2_000 || input + max_output > 5_000);
                    }
                }
            }
            for t in held.drain(..) {
                m.complete(now, &t);
                used += t.usage.total();
            }
            let stats = m.stats();
            proptest::prop_assert_eq!(stats.input_tokens_charged + stats.output_tokens_charged, used);
            proptest::prop_assert_eq!(stats.completed, stats.admitted);
            proptest::prop_assert_eq!(m.in_flight(), 0);
        }
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(Model::new(&config([Some(0), None, None, None], None)).is_err());
        assert!(Model::new(&config([None; 4], Some(0))).is_err());
        let mut c = config([None; 4], None);
        c.output_percent = (50, 40);
        assert!(Model::new(&c).is_err());
        c.output_percent = (50, 101);
        assert!(Model::new(&c).is_err());
    }
}
