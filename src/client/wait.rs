//! The wait step: for each bucket a request belongs to, by the call's time
//! limit, and for each learning key's first response.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::time::Instant;

use super::engine::{Call, Pacer};
use super::scope::KeyState;
use super::Event;
use crate::limiter::Limiter;
use crate::Error;

/// How long a request waits for its key's first response (the probe)
/// before it goes anyway.
const PROBE_WAIT: Duration = Duration::from_secs(5);

/// One bucket a request belongs to: a scope's key, and what it spends
/// there.
pub(crate) struct Member {
    pub(crate) scope: usize,
    pub(crate) state: Arc<KeyState>,
    pub(crate) weight: u64,
    /// The scope's key before any server bucket, and the request's route.
    pub(crate) base: String,
    pub(crate) route: String,
    /// The server bucket this request is paced in, when known for its route.
    pub(crate) bucket: Option<String>,
}

/// An attempt counted as sent on each of its members: the probe locks it
/// holds until its response is learned from, and each member's send
/// number.
pub(crate) struct Sent<'m> {
    _probes: Vec<ProbeGuard<'m>>,
    pub(crate) seqs: Vec<u64>,
}

/// A key's probe lock, held until its first response is learned from.
type ProbeGuard<'m> = tokio::sync::MutexGuard<'m, ()>;

/// A wait that did not end well.
enum WaitError {
    /// It would end past `limit` (the deadline or `max_elapsed`).
    Deadline {
        wait: Option<Duration>,
        limit: Duration,
    },
    /// The limiter failed.
    Failed(Error),
}

impl Pacer {
    /// Wait for every bucket of the request, by the call's time limit, and
    /// count the attempt as sent on each. A key closed by a server's wait
    /// beyond the retry cap fails the call at once, before the wait or
    /// after it (another task may have closed it meanwhile).
    pub(crate) async fn wait<'m>(
        &self,
        members: &'m [Member],
        call: &mut Call,
    ) -> Result<Sent<'m>, Error> {
        self.check_closed(members).map_err(|e| self.fail(call, e))?;
        let until = call.limit(self.inner.policy.max_elapsed());
        let sent = match self.wait_for_members(members, until).await {
            Ok(sent) => sent,
            Err(WaitError::Deadline { wait, limit }) => {
                let error = Error::DeadlineExceeded {
                    wait,
                    limit,
                    attempts: call.attempt - 1,
                    last_status: call.last_status,
                    last_response: None,
                };
                return Err(self.fail(call, error));
            }
            Err(WaitError::Failed(e)) => return Err(e),
        };
        call.first_send.get_or_insert_with(Instant::now);
        if let Err(closed) = self.check_closed(members) {
            sent.abandon(members, false);
            return Err(self.fail(call, closed));
        }
        Ok(sent)
    }

    /// Report a call's give-up when `error` is one.
    fn fail(&self, call: &Call, error: Error) -> Error {
        if let Some(reason) = error.gave_up() {
            self.report_give_up(call, reason);
        }
        error
    }

    /// Fail fast when a key is closed by a server wait beyond the cap.
    fn check_closed(&self, members: &[Member]) -> Result<(), Error> {
        let now = Instant::now();
        let cap = self.inner.policy.max_retry_after();
        for m in members {
            let mut closed = m.state.closed();
            let Some(c) = *closed else { continue };
            if c.until <= now {
                *closed = None;
                continue;
            }
            let (wait, status) = (c.until - now, c.status);
            return Err(if c.by_quota {
                Error::QuotaExhausted { wait, cap, status }
            } else {
                Error::RetryAfterTooLong {
                    wait,
                    cap,
                    status,
                    last_response: None,
                }
            });
        }
        Ok(())
    }

    /// Wait for every bucket of the request (and for each key's first
    /// response, when it learns), then count the request as sent on each.
    /// On an error, no member counts the request as in flight.
    async fn wait_for_members<'m>(
        &self,
        members: &'m [Member],
        until: Option<(Instant, Duration)>,
    ) -> Result<Sent<'m>, WaitError> {
        let mut probes = Vec::new();
        let mut seqs = Vec::with_capacity(members.len());
        for m in members {
            if let Err(e) = self.wait_for_member(m, until, &mut probes).await {
                for (m, &seq) in members.iter().zip(&seqs) {
                    m.state.adapt().on_no_response(seq);
                }
                return Err(e);
            }
            seqs.push(m.state.adapt().on_send(Instant::now()));
        }
        Ok(Sent {
            _probes: probes,
            seqs,
        })
    }

    async fn wait_for_member<'m>(
        &self,
        m: &'m Member,
        until: Option<(Instant, Duration)>,
        probes: &mut Vec<ProbeGuard<'m>>,
    ) -> Result<(), WaitError> {
        let scope = &self.inner.scopes[m.scope];
        if scope.probes() && !m.state.has_seen_response() {
            if let Some(guard) = wait_for_probe(&m.state, until).await? {
                probes.push(guard);
            }
        }
        let limiter = match &m.state.limiter {
            Ok(l) => Arc::clone(l),
            Err(message) => {
                return Err(WaitError::Failed(Error::Backend {
                    message: format!("could not make the limiter for {}: {message}", m.state.key),
                    source: None,
                }))
            }
        };
        let t0 = Instant::now();
        acquire(limiter.as_ref(), m.weight, scope.learns_burst(), until).await?;
        let waited = t0.elapsed();
        if !waited.is_zero() {
            self.emit(Event::Waited {
                scope: scope.config.name.clone(),
                key: m.state.key.clone(),
                waited,
            });
        }
        Ok(())
    }
}

/// Wait for the key's first response, but not forever: a probe that hangs
/// must not hold every caller (nor pass the deadline). Returns the probe
/// lock when this request is the key's first.
async fn wait_for_probe(
    state: &KeyState,
    until: Option<(Instant, Duration)>,
) -> Result<Option<ProbeGuard<'_>>, WaitError> {
    let probe_until = Instant::now() + PROBE_WAIT;
    let cap = until.map_or(probe_until, |(at, _)| at.min(probe_until));
    match tokio::time::timeout_at(cap, state.probe.lock()).await {
        Ok(guard) if !state.has_seen_response() => Ok(Some(guard)),
        Ok(_) => Ok(None),
        Err(_) => match until.filter(|(at, _)| *at <= probe_until) {
            Some((_, limit)) => Err(WaitError::Deadline { wait: None, limit }),
            None => {
                tracing::debug!(
                    target: "reqwest_pace",
                    key = state.key,
                    "no first response yet; not waiting for the probe any longer"
                );
                Ok(None)
            }
        },
    }
}

/// The instant no wait of a call may pass, with the limit it comes from:
/// the call's deadline, or from the first send on `max_elapsed`, whichever
/// ends first.
pub(crate) fn time_limit(
    call_until: Option<(Instant, Duration)>,
    first_send: Option<Instant>,
    max_elapsed: Option<Duration>,
) -> Option<(Instant, Duration)> {
    let retry_until = first_send
        .zip(max_elapsed)
        .map(|(at, limit)| (at + limit, limit));
    match (call_until, retry_until) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// Acquire `weight`, by `until` if given: a wait the limiter says would
/// end past it fails at once, and one that turns out longer fails at it.
/// For a scope whose burst is learned (not configured) and smaller than the
/// weight, the weight is paid in pieces of at most the burst, one after the
/// other, so a big request waits for all its tokens instead of failing (or
/// being undercharged).
async fn acquire(
    limiter: &dyn Limiter,
    weight: u64,
    learned_burst: bool,
    until: Option<(Instant, Duration)>,
) -> Result<(), WaitError> {
    let mut left = weight;
    let mut piece = weight;
    while left > 0 {
        let take = piece.min(left);
        match acquire_by(limiter, take, until).await? {
            Ok(()) => left -= take,
            Err(Error::WeightExceedsCapacity { capacity, .. }) if learned_burst && capacity > 0 => {
                piece = capacity;
            }
            Err(e) => return Err(WaitError::Failed(e)),
        }
    }
    Ok(())
}

/// One acquisition by `until`: the outer error is the deadline, the inner
/// one the limiter's.
async fn acquire_by(
    limiter: &dyn Limiter,
    weight: u64,
    until: Option<(Instant, Duration)>,
) -> Result<Result<(), Error>, WaitError> {
    let Some((at, limit)) = until else {
        return Ok(limiter.acquire(weight).await);
    };
    match limiter.try_acquire(weight).await {
        Err(Error::Throttled { wait }) => {
            if Instant::now() + wait > at {
                return Err(WaitError::Deadline {
                    wait: Some(wait),
                    limit,
                });
            }
            tokio::time::timeout_at(at, limiter.acquire(weight))
                .await
                .map_err(|_| WaitError::Deadline { wait: None, limit })
        }
        other => Ok(other),
    }
}

/// The status a close reports when the response's own is not a status.
pub(crate) fn status_or_429(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Rate, TokenBucket};

    #[tokio::test(start_paused = true)]
    async fn a_weight_over_a_learned_burst_is_paid_in_full_in_pieces() {
        let bucket = TokenBucket::with_initial(Rate::per_second(10).unwrap(), 4, 0).unwrap();
        let start = Instant::now();
        assert!(acquire(&bucket, 10, true, None).await.is_ok());
        // Ten tokens at 10/s from empty: a full second, not 0.4 s.
        assert_eq!(start.elapsed(), std::time::Duration::from_secs(1));
        assert_eq!(bucket.available(), 0);
        // With a configured burst the same weight is an error.
        assert!(matches!(
            acquire(&bucket, 10, false, None).await,
            Err(WaitError::Failed(Error::WeightExceedsCapacity {
                weight: 10,
                capacity: 4
            }))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_deadline_fails_at_once_with_the_wait() {
        let bucket = TokenBucket::with_initial(Rate::per_second(1).unwrap(), 1, 0).unwrap();
        let start = Instant::now();
        let limit = Duration::from_millis(500);
        let until = Some((start + limit, limit));
        // One token in a second, by a deadline half a second away.
        match acquire(&bucket, 1, false, until).await {
            Err(WaitError::Deadline { wait, limit: l }) => {
                assert_eq!(wait, Some(Duration::from_secs(1)));
                assert_eq!(l, limit);
            }
            _ => panic!("expected the deadline"),
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "failed at once");
        // Within the deadline the same wait is served.
        let until = Some((start + Duration::from_secs(2), Duration::from_secs(2)));
        assert!(acquire(&bucket, 1, false, until).await.is_ok());
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
