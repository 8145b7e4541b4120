//! The adjust step: what a response teaches the buckets of its request.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::adapt::{Asked, BlockCause, Verdict};
use super::concurrency::{self, SharedSlot};
use super::engine::{Call, Pacer};
use super::scope::BuiltScope;
use super::wait::{Member, Sent};
use super::{Cost, Event};
use crate::headers::{Dimension, RateLimitSignal};
use crate::limiter::{Adjustment, ServerBlock};
use crate::retry::Outcome;

/// What a response taught the buckets of its request.
#[derive(Debug, Default)]
pub(crate) struct Taught {
    /// Whether the response is a refusal that a taught key's model paces:
    /// its server admitted the key's requests before, so it limits rather
    /// than fails, and the key now goes slower. Retrying it is then no
    /// storm (see the retry budget in the decide step).
    pub(crate) paced: bool,
    /// The members (by index) whose budget now follows what their server
    /// says remains after this call ([`Reconcile::follows_headers`]): the
    /// server counted the call, and its body has nothing to add.
    ///
    /// [`Reconcile::follows_headers`]: super::Reconcile::follows_headers
    pub(crate) followed: Vec<usize>,
    /// The longest wait a refusal asks of a taught key, as its model reads
    /// the `Retry-After` ([`Adaptive::server_waits`]); `None` when no key
    /// was taught a wait.
    ///
    /// [`Adaptive::server_waits`]: super::adapt::Adaptive::server_waits
    pub(crate) server_wait: Option<Duration>,
    /// The longest wait the refused call sits out before it is sent
    /// again, as the taught keys' models read it
    /// ([`Adaptive::server_waits`]); where no key was taught a wait, the
    /// response's believable `Retry-After` as written.
    ///
    /// [`Adaptive::server_waits`]: super::adapt::Adaptive::server_waits
    pub(crate) retry_wait: Option<Duration>,
}

impl Pacer {
    /// Teach the request's buckets what its response said (`signal`; none
    /// for a transport error). Every dimension the response describes
    /// teaches its own key: of the scopes of this request that heed the
    /// server and count that dimension, the narrowest (of several equally
    /// narrow ones, the last added), since a server's limit belongs to one
    /// partition. A refusal teaches the dimensions it shows short (see
    /// [`targets`](Self::targets)). A response that describes none of
    /// their dimensions (no rate-limit headers) teaches the requests
    /// scope, or, without one, the narrowest scope of all, as the
    /// header-less regime reads it. A refusal that says the limit is
    /// concurrency, not rate ([`concurrency::refusal`]), teaches the
    /// targets' caps on calls in flight instead of their rates; the
    /// call's `cost` says what it would have taken of each limit.
    /// Every member counts the attempt as answered.
    pub(crate) async fn learn(
        &self,
        members: &[Member],
        sent: &Sent<'_>,
        (call, signal, cost): (&Call, Option<&RateLimitSignal>, &Cost),
        outcome: Outcome,
    ) -> Taught {
        let mut taught = Taught::default();
        let now = Instant::now();
        let targets = signal.map_or_else(Vec::new, |s| self.targets(members, s));
        for (i, (m, &seq)) in members.iter().zip(&sent.seqs).enumerate() {
            m.state.seen_response.store(true, Ordering::Release);
            let target = signal.filter(|_| targets.contains(&m.scope));
            let concurrency = match target {
                Some(signal) => {
                    self.learn_concurrency(m, (call, sent, seq, i), signal, cost)
                        .await
                }
                None => false,
            };
            match target {
                Some(_) if concurrency => {
                    taught.paced |=
                        self.inner.scopes[m.scope].adaptive() && m.state.adapt().server_admits();
                }
                Some(signal) => {
                    let (wait, retry) = self
                        .teach(m, (call, seq), signal, outcome == Outcome::Success, now)
                        .await;
                    taught.server_wait = taught.server_wait.max(wait);
                    taught.retry_wait = taught.retry_wait.max(retry);
                    if self.follow_headers(m, seq, signal) {
                        taught.followed.push(i);
                    }
                    taught.paced |= signal.is_throttled()
                        && self.inner.scopes[m.scope].adaptive()
                        && m.state.adapt().server_admits();
                }
                None => m.state.adapt().on_no_response(seq),
            }
            if self.weighs(m) {
                m.state.weights().answered(seq);
            }
            if signal.is_some_and(|s| !s.is_throttled() && s.status < 400) {
                self.answered_in_flight(m, sent.slot_of(i));
            }
        }
        // A refusal that taught no key a wait (none of the call's scopes
        // reads it: a cap on calls in flight took it, or the call has no
        // scope) asks its `Retry-After` as the server wrote it, of the
        // call and of its keys alike: no model reads it as anything else.
        if taught.retry_wait.is_none() {
            let written = signal.map(Asked::of).and_then(Asked::believable);
            taught.retry_wait = written;
            taught.server_wait = taught.server_wait.max(written);
        }
        taught
    }

    /// A refusal that the key's permits read as one of concurrency
    /// ([`concurrency::refusal`], for a learning key): it lowers the key's
    /// cap on calls in flight, and the rate model does not read it (the
    /// server counted nothing, and a rate refusal would cut a rate that
    /// does not bind). Returns whether it was one.
    async fn learn_concurrency(
        &self,
        m: &Member,
        (call, sent, seq, i): (&Call, &Sent<'_>, u64, usize),
        signal: &RateLimitSignal,
        cost: &Cost,
    ) -> bool {
        let scope = &self.inner.scopes[m.scope];
        if !scope.adaptive() {
            return false;
        }
        // The fleet's count where the cap is the fleet's (as the slot was
        // taken), else the process's.
        let slot = sent.slot_of(i);
        let (in_flight, local) = match (slot, &m.state.in_flight) {
            (Some(slot), _) => (slot.in_flight(), None),
            (None, Some(local)) => (local.sent(), Some(local)),
            (None, None) => return false,
        };
        if concurrency::refusal(signal, |d| cost.get(d), in_flight).is_none() {
            return false;
        }
        m.state.adapt().on_no_response(seq);
        if let Some(slot) = slot {
            // The fleet's cap is lowered before the event and before the
            // call goes on: one round trip, on refusals only.
            slot.refused().await;
            tracing::debug!(target: "reqwest_pace", key = &*m.state.key, in_flight, "concurrency refusal: fewer calls in flight for the fleet");
        }
        self.emit(Event::Refused {
            call: call.id,
            scope: scope.config.name.clone(),
            key: m.state.key.clone(),
            status: signal.status,
            retry_after: signal.retry_after,
        });
        if let Some(local) = local {
            // The refused send's place in the key's count of sends tells a
            // refusal of the calls sent before the last cut (the same
            // episode) from a new one.
            let cut = match sent.permit_of(local) {
                Some(permit) => permit.refused(),
                None => local.refused(0),
            };
            if let Some(cap) = cut {
                tracing::debug!(target: "reqwest_pace", key = &*m.state.key, cap, "concurrency refusal: fewer calls in flight");
            }
        }
        true
    }

    /// A call the server admitted was answered: a learning key's cap on
    /// calls in flight counts it toward its next probe (the fleet's, toward
    /// climbing back, as its `slot` goes back).
    fn answered_in_flight(&self, m: &Member, slot: Option<&dyn SharedSlot>) {
        if !self.inner.scopes[m.scope].adaptive() {
            return;
        }
        if let Some(slot) = slot {
            slot.answered();
            return;
        }
        let Some(in_flight) = &m.state.in_flight else {
            return;
        };
        if let Some(cap) = in_flight.answered() {
            tracing::debug!(target: "reqwest_pace", key = &*m.state.key, cap, "probing one more call in flight");
        }
    }

    /// The scopes a response teaches: per dimension it describes (for a
    /// refusal, per dimension it shows short of what the call weighs
    /// there), the narrowest heeding scope of this request that counts it;
    /// when there is none, the narrowest heeding scope of all (the one
    /// dimension-blind rule of a response without rate-limit headers).
    fn targets(&self, members: &[Member], signal: &RateLimitSignal) -> Vec<usize> {
        let scopes = &self.inner.scopes;
        let heeding = || members.iter().filter(|m| scopes[m.scope].heeds_server());
        let narrowest = |dimension: Option<&Dimension>| {
            heeding()
                .filter(|m| dimension.is_none_or(|d| scopes[m.scope].config.dimension_ref() == d))
                .max_by_key(|m| (scopes[m.scope].breadth(), m.scope))
                .map(|m| m.scope)
        };
        let pick = |relevant: &dyn Fn(&Member) -> bool| {
            let mut targets = Vec::new();
            for m in heeding().filter(|m| relevant(m)) {
                let dimension = scopes[m.scope].config.dimension_ref();
                if let Some(target) = narrowest(Some(dimension)) {
                    if !targets.contains(&target) {
                        targets.push(target);
                    }
                }
            }
            targets
        };
        let dimension = |m: &Member| scopes[m.scope].config.dimension_ref();
        let mut targets = if signal.is_throttled() {
            // A refusal is taken to be a dimension's whose limit had less
            // left than the call weighs there: it teaches that one, not
            // the others it states with room to spare. One that states no
            // limit short (a bare 429, a limit in front, a cap on calls in
            // flight) is the request's: it teaches the requests scope, as
            // a response without headers does.
            let short = pick(&|m: &Member| short(signal, dimension(m), m.weight));
            if short.is_empty() {
                pick(&|m: &Member| *dimension(m) == Dimension::Requests)
            } else {
                short
            }
        } else {
            pick(&|m: &Member| describes(signal, dimension(m)))
        };
        if targets.is_empty() {
            targets.extend(narrowest(None));
        }
        targets
    }

    /// With a reconciler that follows headers, a learning key of a
    /// dimension other than requests holds what its server says remains
    /// after the call `seq` (less what the key's calls sent after it
    /// weigh, which the server may not count yet), up to its capacity:
    /// lowered when the call cost more than it was charged, raised when it
    /// cost less. Requests are left to the learning (a call is one). Only
    /// the scope's own token buckets follow; a refusal says nothing of a
    /// call's cost. Returns whether the key followed.
    fn follow_headers(&self, m: &Member, seq: u64, signal: &RateLimitSignal) -> bool {
        let scope = &self.inner.scopes[m.scope];
        let follows = self
            .inner
            .reconcile
            .as_ref()
            .is_some_and(|r| r.follows_headers());
        let dimension = scope.config.dimension_ref();
        if !follows
            || !scope.adaptive()
            || *dimension == Dimension::Requests
            || signal.is_throttled()
            || signal.status >= 400
        {
            return false;
        }
        let (Some(bucket), Some(remaining)) = (&m.state.local, remaining(signal, dimension)) else {
            return false;
        };
        let ahead = {
            let mut weights = m.state.weights();
            // An answer older than one followed already states what the
            // server had left before that one: following it would give
            // back what the server has since counted.
            if seq < weights.followed {
                return false;
            }
            weights.followed = seq;
            weights.after(seq)
        };
        let target = remaining.saturating_sub(ahead).min(bucket.capacity());
        let available = bucket.available();
        if target > available {
            bucket.refund(target - available);
        } else if target < available {
            bucket.charge(available - target);
        }
        true
    }

    /// Teach one member's key; returns the wait a refusal asks of it and
    /// of the refused call, as its model read the response (its
    /// [`Verdict::server_wait`] and [`Verdict::retry_wait`]).
    ///
    /// [`Verdict::server_wait`]: super::adapt::Verdict::server_wait
    /// [`Verdict::retry_wait`]: super::adapt::Verdict::retry_wait
    async fn teach(
        &self,
        m: &Member,
        (call, seq): (&Call, u64),
        signal: &RateLimitSignal,
        success: bool,
        now: Instant,
    ) -> (Option<Duration>, Option<Duration>) {
        let scope = &self.inner.scopes[m.scope];
        if !scope.adaptive() {
            m.state.adapt().on_no_response(seq);
        }
        if let Some(limit) = least_limit(signal, scope.config.dimension_ref()) {
            // The most any response stated: a call is failed at once only
            // when no limit the server named could ever admit it (a family
            // that names whichever limit has least left, as Anthropic's
            // `tokens` does, names several).
            let mut weights = m.state.weights();
            weights.server_limit = Some(weights.server_limit.map_or(limit, |l| l.max(limit)));
        }
        if let Some(named) = signal.bucket.as_deref() {
            // The server counts this route in a bucket of its own: pace it
            // there from the next request on. What the response says
            // describes that bucket, so it teaches the key only when the
            // request was paced in it (the first response of a key names
            // its default bucket, which the key itself paces).
            scope.remember_bucket(&m.base, &call.route(), named);
            if !scope.paced_in(&m.base, m.bucket.as_deref(), named) {
                let verdict = m.state.adapt().unlearned(now, seq, signal);
                return (verdict.server_wait, verdict.retry_wait);
            }
        }
        // The model's verdict, under one lock: another response read
        // meanwhile would change what it says. A scope that does not adapt
        // lowers no cap, but keeps the server's wait.
        let mut verdict = {
            let mut adapt = m.state.adapt();
            if scope.adaptive() {
                adapt.on_response(now, seq, signal, success)
            } else {
                adapt.unlearned(now, seq, signal)
            }
        };
        let wait = (verdict.server_wait, verdict.retry_wait);
        if signal.is_throttled() {
            self.emit(Event::Refused {
                call: call.id,
                scope: scope.config.name.clone(),
                key: m.state.key.clone(),
                status: signal.status,
                retry_after: signal.retry_after,
            });
        }
        let Ok(limiter) = &m.state.limiter else {
            return wait;
        };
        let read_as_bucket = self.read_bucket(m, signal, &mut verdict.adjustments);
        let relearned = !read_as_bucket
            && verdict.adjustments.iter().any(|a| {
                matches!(
                    a,
                    Adjustment::SetRate(_)
                        | Adjustment::Cut { .. }
                        | Adjustment::GrowRate { .. }
                        | Adjustment::SetCapacity(_)
                )
            });
        let batch: Vec<Adjustment> = std::mem::take(&mut verdict.adjustments)
            .into_iter()
            .map(|adjustment| self.prepare(m, scope, adjustment, (signal, &verdict), now))
            .collect();
        // What headers taught goes in one call, off the response's path
        // where the limiter can (a shared one sends it with its next
        // reservation). Without headers, the regime's cuts and growths act
        // on the rate every process holds and are timed by the responses
        // (a growth landing after another process's cut undoes it): each
        // is applied before the response goes back, in its turn.
        let applied = if batch.is_empty() {
            Ok(())
        } else if signal.limits.is_empty() {
            crate::limiter::adjust_in_turn(limiter.as_ref(), batch).await
        } else {
            limiter.learn(batch).await
        };
        if let Err(e) = applied {
            tracing::warn!(target: "reqwest_pace", key = &*m.state.key, error = %e, "could not adjust limiter");
        }
        if relearned {
            // Kept beyond the key's state, so that it comes back paced.
            let learned = m.state.adapt().learned();
            if let Some(learned) = learned {
                scope.memory.remember(&m.state.key, learned);
            }
        }
        wait
    }

    /// For a learning key of a dimension other than requests (its own
    /// token bucket or a shared limiter): the rate comes from reading the
    /// server's limits of
    /// the dimension as refilling buckets ([`Weights::read`]), not from
    /// the learning's model, which counts each call as one unit (a call of
    /// 1 200 tokens moves `remaining` by 1 200). Once a reading has given
    /// a rate, the model's rate changes are dropped for the key and the
    /// reading's rate, times the scope's headroom and under its ceiling,
    /// is set instead; its blocks, remaining and capacity still apply.
    /// Returns whether the key is paced so.
    ///
    /// [`Weights::read`]: super::scope::Weights::read
    fn read_bucket(
        &self,
        m: &Member,
        signal: &RateLimitSignal,
        adjustments: &mut Vec<Adjustment>,
    ) -> bool {
        let scope = &self.inner.scopes[m.scope];
        let dimension = scope.config.dimension_ref();
        if *dimension == Dimension::Requests || !scope.adaptive() {
            return false;
        }
        let mut weights = m.state.weights();
        for limit in signal.limits.iter().filter(|l| &l.dimension == dimension) {
            if let (Some(quota), Some(remaining), Some(reset)) =
                (limit.limit, limit.remaining, limit.reset)
            {
                let precision = limit.reset_precision.unwrap_or(Duration::from_secs(1));
                let refused = signal.is_throttled();
                weights.read(&limit.name, (quota, remaining), reset, precision, refused);
            }
        }
        // A scope's own bucket follows what remains (`follow_headers`); a
        // shared one spends what the server's bucket holds by its pace.
        let spend = match m.state.local {
            Some(_) => 1.0,
            None => 1.0 / super::tuning::TUNING.shared_spend,
        };
        let Some(mut per_second) = weights.pace(scope.headroom(), spend) else {
            return false;
        };
        adjustments.retain(|a| {
            !matches!(
                a,
                Adjustment::SetRate(_) | Adjustment::Cut { .. } | Adjustment::GrowRate { .. }
            )
        });
        if let Some(ceiling) = scope.ceiling() {
            per_second = per_second.min(ceiling.per_second_f64());
        }
        let changed = weights
            .applied
            .is_none_or(|applied| (per_second - applied).abs() > applied * 0.01);
        if changed {
            if let Ok(rate) = crate::limiter::RequestRate::from_per_second_f64(per_second) {
                weights.applied = Some(rate.per_second_f64());
                adjustments.push(Adjustment::SetRate(rate));
            }
        }
        true
    }

    /// One adjustment as the member's limiter is to take it. A block until
    /// an instant the server named is noted on the key at once, with what
    /// asked for it, and kept by the limiter (written to the shared state,
    /// for a shared one) until a little later, by the
    /// [`ReleaseJitter`](crate::retry::ReleaseJitter). Whether a call sits
    /// through it is the wait step's question, not this one's.
    fn prepare(
        &self,
        m: &Member,
        scope: &BuiltScope,
        adjustment: Adjustment,
        (signal, verdict): (&RateLimitSignal, &Verdict),
        now: Instant,
    ) -> Adjustment {
        match adjustment {
            Adjustment::BlockUntil(until) => {
                let cause = verdict.cause_of(until).unwrap_or(BlockCause::Asked);
                // The header-less regime's own guess of when a lockout
                // ends is held no longer than the retry cap, past which a
                // block fails every call at once.
                let until = if cause == BlockCause::Guessed {
                    until.min(now + self.inner.policy.max_retry_after())
                } else {
                    until
                };
                // A block the response's wait did not ask for fails a call
                // held past the cap as a spent quota, not a `Retry-After`
                // (a guessed one never is: it is held within the cap).
                let spent_quota = cause != BlockCause::Asked;
                let block = ServerBlock::new(until, signal.status, spent_quota);
                m.state.set_server_block(Some(block));
                let wait = until.saturating_duration_since(now);
                let released = until + self.inner.jitter.extra(wait, self.draw());
                Adjustment::Block(ServerBlock {
                    until: released,
                    ..block
                })
            }
            Adjustment::SetRate(rate) | Adjustment::Cut { to: rate, .. } => {
                self.emit(Event::Paced {
                    scope: scope.config.name.clone(),
                    key: m.state.key.clone(),
                    per_second: rate.per_second_f64(),
                });
                adjustment
            }
            // A learned bucket holds the heaviest call in use, so that
            // every call is one acquisition.
            Adjustment::SetCapacity(capacity) if scope.learns_burst() => {
                Adjustment::SetCapacity(capacity.max(m.state.weights().heaviest))
            }
            other => other,
        }
    }
}

impl Pacer {
    /// Tell each member's latency-aware politeness how long the attempt
    /// sent at `sent_at` took to answer (a transport error counts as a
    /// failed answer after that long: it may slow the key, never speed it).
    pub(crate) fn measure_latency(
        &self,
        members: &[Member],
        result: &Result<reqwest::Response, reqwest::Error>,
        sent_at: Instant,
    ) {
        let latency = sent_at.elapsed();
        let ok = result
            .as_ref()
            .is_ok_and(|r| r.status().is_success() || r.status().is_redirection());
        for m in members {
            if let Some(delay) = m.state.measured(latency, ok) {
                tracing::debug!(
                    target: "reqwest_pace",
                    key = &*m.state.key,
                    latency_ms = latency.as_millis() as u64,
                    delay_ms = delay.as_millis() as u64,
                    "auto-throttle delay"
                );
            }
        }
    }
}

/// Whether `signal` says what remains of `dimension`; a response that says
/// what remains of nothing (no rate-limit headers) describes requests, as
/// every response does.
fn describes(signal: &RateLimitSignal, dimension: &Dimension) -> bool {
    let stated = |d: &Dimension| {
        signal
            .limits
            .iter()
            .any(|l| &l.dimension == d && l.remaining.is_some())
    };
    stated(dimension)
        || (*dimension == Dimension::Requests
            && !signal.limits.iter().any(|l| l.remaining.is_some()))
}

/// Whether `signal` states a limit of `dimension` with less left than
/// `weight`.
fn short(signal: &RateLimitSignal, dimension: &Dimension, weight: u64) -> bool {
    remaining(signal, dimension).is_some_and(|r| r < weight)
}

/// The least `remaining` of `dimension` the signal states.
fn remaining(signal: &RateLimitSignal, dimension: &Dimension) -> Option<u64> {
    signal
        .limits
        .iter()
        .filter(|l| &l.dimension == dimension)
        .filter_map(|l| l.remaining)
        .min()
}

/// The least `limit` above zero of `dimension` the signal states: no call
/// heavier than it is ever admitted.
fn least_limit(signal: &RateLimitSignal, dimension: &Dimension) -> Option<u64> {
    signal
        .limits
        .iter()
        .filter(|l| &l.dimension == dimension)
        .filter_map(|l| l.limit)
        .filter(|&l| l > 0)
        .min()
}
