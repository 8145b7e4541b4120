//! The adjust step: what a response teaches the buckets of its request.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::engine::{Call, Pacer};
use super::scope::BuiltScope;
use super::wait::{Member, Sent};
use super::Event;
use crate::headers::RateLimitSignal;
use crate::limiter::{Adjustment, Limiter, ServerBlock};
use crate::retry::Outcome;

impl Pacer {
    /// Teach the request's buckets what its response said (`signal`; none
    /// for a transport error). A server's limit belongs to one partition:
    /// only the narrowest scope of this request that heeds the server is
    /// taught, and of several equally narrow ones the last added. Every
    /// member counts the attempt as answered.
    ///
    /// Returns whether the response is a refusal that the taught key's
    /// model paces: its server admitted the key's requests before, so it
    /// limits rather than fails, and the key now goes slower. Retrying it
    /// is then no storm (see the retry budget in the decide step).
    pub(crate) async fn learn(
        &self,
        members: &[Member],
        sent: &Sent<'_>,
        (call, signal): (&Call, Option<&RateLimitSignal>),
        outcome: Outcome,
    ) -> bool {
        let mut paced = false;
        let now = Instant::now();
        let target = members
            .iter()
            .filter(|m| self.inner.scopes[m.scope].heeds_server())
            .max_by_key(|m| (self.inner.scopes[m.scope].breadth(), m.scope))
            .map(|m| m.scope);
        for (m, &seq) in members.iter().zip(&sent.seqs) {
            m.state.seen_response.store(true, Ordering::Release);
            match signal.filter(|_| Some(m.scope) == target) {
                Some(signal) => {
                    self.teach(m, (call, seq), signal, outcome == Outcome::Success, now)
                        .await;
                    paced = signal.is_throttled()
                        && self.inner.scopes[m.scope].adaptive()
                        && m.state.adapt().server_admits();
                }
                None => m.state.adapt().on_no_response(seq),
            }
        }
        paced
    }

    /// Teach one member's key.
    async fn teach(
        &self,
        m: &Member,
        (call, seq): (&Call, u64),
        signal: &RateLimitSignal,
        success: bool,
        now: Instant,
    ) {
        let scope = &self.inner.scopes[m.scope];
        if !scope.adaptive() {
            m.state.adapt().on_no_response(seq);
        }
        if let Some(named) = signal.bucket.as_deref() {
            // The server counts this route in a bucket of its own: pace it
            // there from the next request on. What the response says
            // describes that bucket, so it teaches the key only when the
            // request was paced in it (the first response of a key names
            // its default bucket, which the key itself paces).
            scope.remember_bucket(&m.base, &call.route(), named);
            if !scope.paced_in(&m.base, m.bucket.as_deref(), named) {
                m.state.adapt().on_no_response(seq);
                return;
            }
        }
        let adjustments = if scope.adaptive() {
            m.state.adapt().on_response(now, seq, signal, success)
        } else {
            // A cap is not lowered, but the server's wait is kept.
            server_block(signal, now)
                .map(Adjustment::BlockUntil)
                .into_iter()
                .collect()
        };
        if signal.is_throttled() {
            self.emit(Event::Throttled {
                scope: scope.config.name.clone(),
                key: m.state.key.clone(),
                status: signal.status,
                retry_after: signal.retry_after,
            });
        }
        let Ok(limiter) = &m.state.limiter else {
            return;
        };
        let relearned = adjustments.iter().any(|a| {
            matches!(
                a,
                Adjustment::SetRate(_)
                    | Adjustment::Cut { .. }
                    | Adjustment::GrowRate { .. }
                    | Adjustment::SetCapacity(_)
            )
        });
        for adjustment in adjustments {
            self.apply(m, scope, limiter.as_ref(), adjustment, signal, now)
                .await;
        }
        if relearned {
            // Kept beyond the key's state, so that it comes back paced.
            let learned = m.state.adapt().learned();
            if let Some(learned) = learned {
                scope.memory.remember(&m.state.key, learned);
            }
        }
    }

    /// Apply one adjustment to a member's limiter. A block until an
    /// instant the server named is noted on the key with what asked for
    /// it, and kept by the limiter (written to the shared state, for a
    /// shared one) until a little later, by the
    /// [`ReleaseJitter`](crate::retry::ReleaseJitter). Whether a call sits
    /// through it is the wait step's question, not this one's.
    async fn apply(
        &self,
        m: &Member,
        scope: &BuiltScope,
        limiter: &dyn Limiter,
        adjustment: Adjustment,
        signal: &RateLimitSignal,
        now: Instant,
    ) {
        let adjustment = match adjustment {
            Adjustment::BlockUntil(until) => {
                let spent_quota = server_block(signal, now) != Some(until);
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
            other => other,
        };
        if let Err(e) = limiter.adjust(adjustment).await {
            tracing::warn!(target: "reqwest_pace", key = m.state.key, error = %e, "could not adjust limiter");
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
                    key = m.state.key,
                    latency_ms = latency.as_millis() as u64,
                    delay_ms = delay.as_millis() as u64,
                    "auto-throttle delay"
                );
            }
        }
    }
}

/// The block a throttled response's `Retry-After` asks for.
fn server_block(signal: &RateLimitSignal, now: Instant) -> Option<Instant> {
    signal
        .believable_retry_after()
        .filter(|_| signal.is_throttled())
        .map(|wait| now + wait)
}
