//! The wait step: for each bucket a request belongs to, by the call's time
//! limit, and for each learning key's first response.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::breaker::{Admission, Health, Transition};
use super::concurrency::{InFlight, Permit, SharedSlot};
use super::engine::{Call, Gate, Pacer};
use super::events::listened;
use super::scope::{FleetCap, KeyState};
use super::Event;
use crate::headers::MAX_WAIT;
use crate::limiter::{Adjustment, Bounds, Grant, Limiter};
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
    /// The scope's key before any server bucket.
    pub(crate) base: BaseKey,
    /// The server bucket this request is paced in, when known for its route.
    pub(crate) bucket: Option<String>,
}

/// A member's scope key before any server bucket: the start of its key's
/// name (`key` or `key~bucket`), read off its state rather than held apart.
pub(crate) struct BaseKey {
    state: Arc<KeyState>,
    len: usize,
}

impl BaseKey {
    /// The first `len` bytes of `state`'s key.
    pub(crate) fn of(state: &Arc<KeyState>, len: usize) -> BaseKey {
        BaseKey {
            state: Arc::clone(state),
            len,
        }
    }
}

impl std::ops::Deref for BaseKey {
    type Target = str;

    fn deref(&self) -> &str {
        let key = &self.state.key;
        key.get(..self.len).unwrap_or(key)
    }
}

/// An attempt counted as sent on each of its members: the probe locks and
/// in-flight permits it holds until its response is learned from (or it is
/// dropped: an error, a cancelled call), and each member's send number.
pub(crate) struct Sent<'m> {
    _probes: Vec<ProbeGuard<'m>>,
    permits: Vec<Permit>,
    /// The slots of the members whose cap on calls in flight is kept for
    /// the fleet, by the member's place among the request's.
    slots: Vec<(usize, Box<dyn SharedSlot>)>,
    pub(crate) seqs: Vec<u64>,
    /// What each member's circuit breaker admitted the attempt as, for the
    /// members whose scope has one.
    pub(crate) tickets: Vec<Ticket>,
}

impl Sent<'_> {
    /// The attempt's permit of `in_flight`, if it holds one.
    pub(crate) fn permit_of(&self, in_flight: &Arc<InFlight>) -> Option<&Permit> {
        self.permits.iter().find(|p| p.is_of(in_flight))
    }

    /// The attempt's slot of the fleet's cap on calls in flight at the
    /// `member`th member, if it holds one.
    pub(crate) fn slot_of(&self, member: usize) -> Option<&dyn SharedSlot> {
        self.slots
            .iter()
            .find(|(m, _)| *m == member)
            .map(|(_, slot)| slot.as_ref())
    }
}

/// A send a key's circuit breaker admitted, until its verdict is recorded
/// ([`Ticket::settle`]); a probe dropped before that (its call cancelled,
/// failed before an answer) leaves the next call to probe.
pub(crate) struct Ticket {
    pub(crate) member: usize,
    state: Arc<KeyState>,
    admission: Admission,
    settled: bool,
}

impl Ticket {
    /// Record how the send went; returns the breaker's change, if any.
    pub(crate) fn settle(&mut self, health: Health) -> Option<Transition> {
        self.settled = true;
        let mut breaker = self.state.breaker()?;
        breaker.record(Instant::now(), self.admission, health)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.settled {
            if let Some(mut breaker) = self.state.breaker() {
                breaker.abandon(Instant::now(), self.admission);
            }
        }
    }
}

/// A key's probe lock, held until its first response is learned from.
type ProbeGuard<'m> = tokio::sync::MutexGuard<'m, ()>;

/// A wait that did not end well.
enum WaitError {
    /// It would end past `limit` (the deadline or `max_elapsed`).
    TimeLimit {
        wait: Option<Duration>,
        limit: Duration,
    },
    /// The limiter failed.
    Failed(Error),
}

impl Pacer {
    /// Wait for every bucket of the request, by the call's time limit, and
    /// count the attempt as sent on each. A key held by a server's wait
    /// beyond the retry cap fails the call at once: before the wait, while
    /// it waits (another task, or another process sharing the limiter, may
    /// have seen the response), or after it.
    pub(crate) async fn wait<'m>(
        &self,
        members: &'m [Member],
        gate: Option<&Gate>,
        call: &mut Call,
    ) -> Result<Sent<'m>, Error> {
        self.check_blocked(members)
            .map_err(|e| self.fail(call, e))?;
        let made = (call.attempt - 1, call.last_status);
        if let Some(open) = self.open_circuit(members, made, None) {
            return Err(open);
        }
        let until = call.limit(self.inner.policy.max_elapsed());
        let queued = *call.queued.get_or_insert_with(Instant::now);
        let sent = match self
            .wait_for_members(members, gate, until, (call, queued))
            .await
        {
            Ok(sent) => sent,
            Err(WaitError::TimeLimit { wait, limit }) => {
                let error = Error::TimeLimitExceeded {
                    wait,
                    limit,
                    attempts: call.attempt - 1,
                    last_status: call.last_status,
                    last_response: None,
                };
                return Err(self.fail(call, error));
            }
            Err(WaitError::Failed(e)) => return Err(self.fail(call, e)),
        };
        call.first_send.get_or_insert_with(Instant::now);
        if let Err(blocked) = self.check_blocked(members) {
            sent.abandon(members, false);
            return Err(self.fail(call, blocked));
        }
        let mut sent = sent;
        if let Some(open) = self.open_circuit(members, made, Some(&mut sent.tickets)) {
            sent.abandon(members, false);
            return Err(open);
        }
        Ok(sent)
    }

    /// The error of a call on a key whose circuit breaker is open (or
    /// half-open with its probe out). Without `tickets`, only a look before
    /// the waits; with them, the admission itself, just before the send:
    /// each member's breaker admits the attempt (the first after a
    /// cool-down as the probe), and its ticket goes in `tickets`. The error
    /// counts `attempts` made by the call.
    pub(crate) fn open_circuit(
        &self,
        members: &[Member],
        (attempts, last_status): (u32, Option<StatusCode>),
        mut tickets: Option<&mut Vec<Ticket>>,
    ) -> Option<Error> {
        // The clock is read for the first breaker: most keys have none.
        let mut now = None;
        for (i, m) in members.iter().enumerate() {
            let Some(mut breaker) = m.state.breaker() else {
                continue;
            };
            let now = *now.get_or_insert_with(Instant::now);
            let (admission, transition) = match tickets.as_deref_mut() {
                None => (breaker.peek(now), None),
                Some(_) => breaker.admit(now),
            };
            drop(breaker);
            if let Some(transition) = transition {
                self.circuit_changed(m, transition);
            }
            match (admission, tickets.as_deref_mut()) {
                (Admission::Refuse { retry_in }, _) => {
                    return Some(Error::CircuitOpen {
                        key: m.state.key.to_string(),
                        retry_in,
                        attempts,
                        last_status,
                    })
                }
                (_, Some(tickets)) => tickets.push(Ticket {
                    member: i,
                    state: Arc::clone(&m.state),
                    admission,
                    settled: false,
                }),
                (_, None) => {}
            }
        }
        None
    }

    /// Tell each breaker of the attempt's members how it went: `health`.
    pub(crate) fn judge(&self, members: &[Member], sent: &mut Sent<'_>, health: Health) {
        for ticket in &mut sent.tickets {
            if let Some(transition) = ticket.settle(health) {
                self.circuit_changed(&members[ticket.member], transition);
            }
        }
    }

    /// Report a change of a member's breaker.
    fn circuit_changed(&self, m: &Member, (from, to): Transition) {
        self.emit(Event::Circuit {
            scope: self.inner.scopes[m.scope].config.name.clone(),
            key: m.state.key.clone(),
            from,
            to,
        });
    }

    /// Report a call's give-up when `error` is one, counting the
    /// attempts it made before this wait.
    fn fail(&self, call: &Call, error: Error) -> Error {
        let error = error.after_attempts(call.attempt.saturating_sub(1));
        self.report_give_up(call, &error);
        error
    }

    /// Fail fast when a key is held by a server wait beyond the cap.
    fn check_blocked(&self, members: &[Member]) -> Result<(), Error> {
        members
            .iter()
            .find_map(|m| self.blocked(m))
            .map_or(Ok(()), Err)
    }

    /// The error of a call on `m` while the server's wait on its key is
    /// longer than the retry cap.
    fn blocked(&self, m: &Member) -> Option<Error> {
        if !m.state.may_be_blocked() {
            return None;
        }
        let now = Instant::now();
        let cap = self.inner.policy.max_retry_after();
        let block = m.state.server_block(now)?;
        let wait = block.until - now;
        (wait > cap).then(|| refusal(block.status, block.spent_quota, wait, cap))
    }

    /// Wait for every bucket of the request (and for each key's first
    /// response, when it learns), each in its key's queue by the call's priority
    /// and the instant the call queued ([`Call::queued`]: its first, for a
    /// retry after the server's own wait), then count the request as sent
    /// on each;
    /// last, for the `gate` that spaces its host's sends (a robots.txt's
    /// interval), so that nothing waited for after it can bunch two sends
    /// up. On an error, no member counts the request as in flight.
    async fn wait_for_members<'m>(
        &self,
        members: &'m [Member],
        gate: Option<&Gate>,
        until: Option<(Instant, Duration)>,
        (call, queued): (&Call, Instant),
    ) -> Result<Sent<'m>, WaitError> {
        let mut probes = Vec::new();
        let mut permits = Vec::new();
        let mut slots = Vec::new();
        let mut seqs = Vec::with_capacity(members.len());
        // A request with a member whose cap on calls in flight is the
        // fleet's takes that slot once every bucket granted the call (a
        // call waiting for its tokens holds none, so the fleet's count is
        // of calls sent, what a refusal reads), and counts itself sent on
        // every member only then.
        let shared = members.iter().any(|m| m.state.shared_in_flight.is_some());
        let mut grants = Vec::new();
        for m in members {
            // When the call arrived at the key, for a key still waiting for
            // its first response: its probe wait counts from here.
            let arrived = (!m.state.has_seen_response()).then(Instant::now);
            // The key's queue by priority comes before everything else the
            // call waits for on the key: only the call holding the turn
            // waits for those, so who goes next is chosen when the key can
            // take a call. The turn goes back once the key's waits are over.
            let (_turn, grant) = loop {
                let turn = match by_deadline(until, m.state.turns.take_as_of(call.priority, queued))
                    .await
                {
                    Ok(turn) => turn,
                    Err(e) => {
                        no_longer_in_flight(members, &seqs);
                        return Err(e);
                    }
                };
                let held = permits.len();
                let waited = self
                    .wait_at_turn(
                        m,
                        &turn,
                        (call.id, until, arrived),
                        &mut permits,
                        &mut probes,
                    )
                    .await;
                match waited {
                    Some(Ok(grant)) => break (turn, grant),
                    Some(Err(e)) => {
                        no_longer_in_flight(members, &seqs);
                        return Err(e);
                    }
                    // Overtaken before anything was granted: its permit
                    // goes back, and the call queues again in its place.
                    None => permits.truncate(held),
                }
            };
            if shared {
                grants.push(grant);
                continue;
            }
            seqs.push(self.count_sent(m, grant));
        }
        if shared {
            for (i, m) in members.iter().enumerate() {
                if let Some(fleet) = &m.state.shared_in_flight {
                    let slot = slot_by_priority(m, fleet, until, (call.priority, queued)).await?;
                    slots.push((i, slot));
                }
            }
            for (m, grant) in members.iter().zip(grants) {
                seqs.push(self.count_sent(m, grant));
            }
        }
        if let Err(e) = settle_permits(&mut permits, until).await {
            no_longer_in_flight(members, &seqs);
            return Err(e);
        }
        if let Some((origin, gate)) = gate {
            let t0 = Instant::now();
            if let Err(e) = gate.wait(until).await {
                no_longer_in_flight(members, &seqs);
                return Err(e);
            }
            let waited = t0.elapsed();
            if !waited.is_zero() {
                self.emit_with(tracing::Level::DEBUG, || Event::Waited {
                    call: call.id,
                    scope: Arc::from("robots"),
                    key: Arc::from(origin.as_str()),
                    waited,
                });
            }
        }
        Ok(Sent {
            _probes: probes,
            permits,
            slots,
            seqs,
            tickets: Vec::new(),
        })
    }

    /// Count the call sent at `m`'s key, granted `grant`: its send number.
    fn count_sent(&self, m: &Member, grant: Grant) -> u64 {
        let seq = m.state.adapt().on_send(Instant::now(), grant, m.weight);
        if self.weighs(m) {
            m.state.weights().sent(seq, m.weight);
        }
        seq
    }

    /// Holding `turn` at `m`'s key, wait for its in-flight permit (pushed
    /// on `permits`) and its bucket; `None` when a call ordered before
    /// this one came to wait for the turn first (a retry back in its
    /// call's place after the server's wait, a call of a higher class),
    /// while this one was still waiting at this key's own bucket (past its
    /// first response: nothing to undo but the permit; what earlier
    /// members granted stands, as it does while a call waits long at a
    /// later one). The holder then gives the turn up.
    /// Before, the call holding the turn went first whoever came to wait
    /// behind it: a call refused 2 s into a window of 100 per 60 s, told to
    /// wait 59 s of its minute, came back behind the call that had taken
    /// the turn meanwhile, and passed its time limit by the key's interval.
    async fn wait_at_turn<'m>(
        &self,
        m: &'m Member,
        turn: &crate::client::priority::Turn<'_>,
        (call, until, arrived): (u64, Option<(Instant, Duration)>, Option<Instant>),
        permits: &mut Vec<Permit>,
        probes: &mut Vec<ProbeGuard<'m>>,
    ) -> Option<Result<Grant, WaitError>> {
        // On the key's own bucket only, whose wait given up costs nothing:
        // a shared limiter's reservation given up is lost to every process
        // when another wrote since (through the shared bucket's twin, a
        // fleet of four on seeds 0..500 missed the goal on 215 servers,
        // with 29 failed calls, against 210 and 19). And not while it may
        // take the key's first response (a probe it would have to hand
        // back).
        let yields =
            m.state.local.is_some() && (arrived.is_none() || !self.inner.scopes[m.scope].probes());
        let waits = async {
            if let Some(in_flight) = &m.state.in_flight {
                permits.push(in_flight.hold(take_permit(in_flight.semaphore(), until).await?));
            }
            self.wait_for_member(m, call, until, arrived, probes).await
        };
        if !yields {
            return Some(waits.await);
        }
        tokio::pin!(waits);
        match futures::future::select(waits, turn.overtaken()).await {
            futures::future::Either::Left((result, _)) => Some(result),
            futures::future::Either::Right(((), _)) => None,
        }
    }

    /// Wait for one member's bucket (after its key's first response, when
    /// it learns, waited for at most [`PROBE_WAIT`] from when the call
    /// `arrived` at the key); returns the limiter's grant.
    async fn wait_for_member<'m>(
        &self,
        m: &'m Member,
        call: u64,
        until: Option<(Instant, Duration)>,
        arrived: Option<Instant>,
        probes: &mut Vec<ProbeGuard<'m>>,
    ) -> Result<Grant, WaitError> {
        let scope = &self.inner.scopes[m.scope];
        if scope.probes() && !m.state.has_seen_response() {
            // A key that had its first response when the call arrived
            // has it still: `arrived` was read for any other.
            let arrived = arrived.unwrap_or_else(Instant::now);
            if let Some(guard) = wait_for_probe(&m.state, until, arrived).await? {
                probes.push(guard);
            }
        }
        let limiter = match &m.state.limiter {
            Ok(l) => l.as_ref(),
            Err(message) => {
                return Err(WaitError::Failed(Error::Backend {
                    message: format!("could not make the limiter for {}: {message}", m.state.key),
                    source: None,
                }))
            }
        };
        // Timed only for an event someone receives.
        let t0 = listened(self.inner.hook.as_ref(), tracing::Level::DEBUG).then(Instant::now);
        let _booking = match &m.state.booking {
            Some(booking) => Some(book(booking, until).await?),
            None => None,
        };
        let grant = self.acquire_unless_blocked(m, limiter, until).await?;
        // After the bucket: the latency-aware delay only adds to its waits.
        if let Some((_, gate)) = &m.state.politeness {
            acquire(gate.as_ref(), 1, false, Bounds::default(), until).await?;
        }
        let waited = t0.map(|t0| t0.elapsed());
        if let Some(waited) = waited.filter(|w| !w.is_zero()) {
            self.emit_with(tracing::Level::DEBUG, || Event::Waited {
                call,
                scope: scope.config.name.clone(),
                key: m.state.key.clone(),
                waited,
            });
        }
        Ok(grant)
    }

    /// Acquire the member's weight, but give up the wait as soon as the
    /// server holds the key for longer than the retry cap: a response to
    /// another call of this process says so (the key's block changes), or
    /// the shared limiter does (a block another process wrote). The shared
    /// state stays the one that knows such a block: it is not copied here,
    /// so that lifting it there ([`Pacer::clear_key`] in any process)
    /// opens the key for every process.
    async fn acquire_unless_blocked(
        &self,
        m: &Member,
        limiter: &dyn Limiter,
        until: Option<(Instant, Duration)>,
    ) -> Result<Grant, WaitError> {
        let scope = &self.inner.scopes[m.scope];
        if scope.learns_burst() {
            self.fit_learned_capacity(m)?;
        }
        if let Some(bucket) = &m.state.local {
            // The key's own bucket with the tokens at hand and nobody
            // queued admits at once, as the acquisition below would on its
            // first poll: decided here, without its futures and the watch
            // on the key's block.
            if let Some(e) = self.blocked(m) {
                return Err(WaitError::Failed(e));
            }
            if bucket.try_acquire(m.weight).is_ok() {
                return Ok(Grant::default());
            }
        }
        let cap = self.inner.policy.max_retry_after();
        // The limiter holds a server's block until its end and the release
        // jitter after it: a wait of the cap itself, sat through here, ends
        // up to the jitter's most later there.
        let bounds = Bounds::default().max_block(cap + self.inner.jitter.extra(cap, 1.0));
        let acquiring = acquire(limiter, m.weight, scope.learns_burst(), bounds, until);
        tokio::pin!(acquiring);
        loop {
            let changed = m.state.block_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(e) = self.blocked(m) {
                return Err(WaitError::Failed(e));
            }
            // Whichever is first: the grant, or a change of the key's block
            // (then looked at again, the acquisition kept in its place).
            let result = match futures::future::select(acquiring.as_mut(), changed.as_mut()).await {
                futures::future::Either::Left((result, _)) => result,
                futures::future::Either::Right(((), _)) => continue,
            };
            return match result {
                Err(WaitError::Failed(Error::Blocked {
                    wait,
                    max,
                    status,
                    spent_quota,
                })) => Err(WaitError::Failed(refusal(status, spent_quota, wait, max))),
                other => other,
            };
        }
    }
}

impl Pacer {
    /// Whether the member's calls are weighed in flight: a scope of
    /// another dimension than requests, whose key may follow its server's
    /// `remaining` less what its later calls weigh (a call is one request,
    /// which the learning counts itself).
    pub(crate) fn weighs(&self, m: &Member) -> bool {
        *self.inner.scopes[m.scope].config.dimension_ref() != crate::headers::Dimension::Requests
    }

    /// A learned bucket holds what its calls weigh: a call heavier than
    /// any before raises its key's capacity to its weight, so that it is
    /// one acquisition (paid at the learned rate, from the tokens at hand:
    /// no burst), not one per unit. A call heavier than the server's own
    /// limit in the dimension can never be admitted there: it fails at
    /// once with [`Error::WeightExceedsCapacity`] naming that limit; so
    /// does one heavier than the bucket holds and than a day
    /// ([`MAX_WAIT`]) of the key's rate, naming that many units.
    fn fit_learned_capacity(&self, m: &Member) -> Result<(), WaitError> {
        // A unit fits any stated limit (each is one at least) and any
        // bucket (which holds one at least).
        if m.weight == 1 && m.state.holds_a_unit.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut weights = m.state.weights();
        if let Some(limit) = weights.server_limit.filter(|&l| m.weight > l) {
            return Err(WaitError::Failed(Error::weight_exceeds_capacity(
                m.weight, limit,
            )));
        }
        if let Some(bucket) = m.state.local.as_ref().filter(|b| b.capacity() < m.weight) {
            // Nor is a call waited for that is heavier than any before and
            // than a day of the key's rate would pay for (before any
            // response said a limit: a cost of `u64::MAX`): it would never
            // come.
            let most = bucket.rate().per_second_f64() * MAX_WAIT.as_secs_f64();
            if m.weight as f64 > most {
                return Err(WaitError::Failed(Error::weight_exceeds_capacity(
                    m.weight,
                    most as u64,
                )));
            }
        }
        weights.heaviest = weights.heaviest.max(m.weight);
        m.state
            .holds_a_unit
            .store(weights.heaviest >= 1, Ordering::Release);
        drop(weights);
        if let Some(bucket) = m.state.local.as_ref().filter(|b| b.capacity() < m.weight) {
            // Not zero: the member has a weight.
            let _ = bucket.set_capacity(m.weight);
        }
        Ok(())
    }
}

/// The error of a call that will not wait `wait`, longer than the retry
/// `cap`, for a server's block that a response of `status` asked for (a
/// spent quota's reset, or a `Retry-After`).
fn refusal(status: u16, spent_quota: bool, wait: Duration, cap: Duration) -> Error {
    let status = status_or_429(status);
    if spent_quota {
        Error::QuotaExhausted {
            wait,
            cap,
            status,
            attempts: 0,
        }
    } else {
        Error::RetryAfterTooLong {
            wait,
            cap,
            status,
            attempts: 0,
            last_response: None,
        }
    }
}

/// The attempt's sends `seqs`, counted on the first of `members`, went
/// nowhere (a wait after them failed): they are in flight no more.
fn no_longer_in_flight(members: &[Member], seqs: &[u64]) {
    for (m, &seq) in members.iter().zip(seqs) {
        m.state.weights().answered(seq);
        m.state.adapt().on_no_response(seq);
    }
}

/// `wait`'s output, or a deadline error once `until` passes first.
async fn by_deadline<F: std::future::Future>(
    until: Option<(Instant, Duration)>,
    wait: F,
) -> Result<F::Output, WaitError> {
    match until {
        None => Ok(wait.await),
        Some((at, limit)) => tokio::time::timeout_at(at, wait)
            .await
            .map_err(|_| WaitError::TimeLimit { wait: None, limit }),
    }
}

/// A turn to book on a limiter of the caller's, by `until`.
async fn book(
    booking: &tokio::sync::Semaphore,
    until: Option<(Instant, Duration)>,
) -> Result<tokio::sync::SemaphorePermit<'_>, WaitError> {
    let permit = by_deadline(until, booking.acquire()).await?;
    // Never closed: the semaphore lives as long as the key's state.
    permit.map_err(|_| WaitError::Failed(Error::config("the key's booking queue closed")))
}

/// Sends spaced by at least an interval, counted from the instant the
/// previous one was let go rather than from when it was due (as a bucket
/// counts): a late wake-up of one send (a timer's millisecond, a busy
/// runtime) never lets the next one closer to it. Fair (a tokio mutex:
/// first come, first served) and cancel-safe (a call dropped while it
/// waits leaves the queue and lets nothing go).
pub(crate) struct Spacer {
    interval: std::sync::Mutex<Duration>,
    last: tokio::sync::Mutex<Option<Instant>>,
}

// Only robots.txt's `Crawl-delay` and `Request-rate` make a spacer (the
// `robots` feature); without it the waiting path below still compiles.
#[cfg_attr(not(feature = "robots"), allow(dead_code))]
impl Spacer {
    /// Sends `interval` apart, the first no sooner than `interval` after
    /// `last` (none: at once).
    pub(crate) fn new(interval: Duration, last: Option<Instant>) -> Spacer {
        Spacer {
            interval: std::sync::Mutex::new(interval),
            last: tokio::sync::Mutex::new(last),
        }
    }

    pub(crate) fn set_interval(&self, interval: Duration) {
        *crate::sync::lock(&self.interval) = interval;
    }

    fn interval(&self) -> Duration {
        *crate::sync::lock(&self.interval)
    }

    /// Wait for this send's turn, by `until`: a turn that would come past
    /// it fails at once.
    async fn wait(&self, until: Option<(Instant, Duration)>) -> Result<(), WaitError> {
        let turn = async {
            let mut last = self.last.lock().await;
            if let Some(previous) = *last {
                let at = previous + self.interval();
                if let Some((_, limit)) = until.filter(|(deadline, _)| at > *deadline) {
                    let wait = Some(at.saturating_duration_since(Instant::now()));
                    return Err(WaitError::TimeLimit { wait, limit });
                }
                tokio::time::sleep_until(at).await;
            }
            *last = Some(Instant::now());
            Ok(())
        };
        by_deadline(until, turn).await?
    }
}

/// One of a key's in-flight permits ([`Scope::max_in_flight`], or a cap
/// learned), by `until`: fair (first asked, first served) and cancel-safe (a call
/// dropped while it waits leaves the queue).
///
/// [`Scope::max_in_flight`]: crate::Scope::max_in_flight
async fn take_permit(
    permits: &Arc<Semaphore>,
    until: Option<(Instant, Duration)>,
) -> Result<OwnedSemaphorePermit, WaitError> {
    let permit = by_deadline(until, Arc::clone(permits).acquire_owned()).await?;
    // Never closed: the semaphore lives as long as the key's state.
    permit.map_err(|_| WaitError::Failed(Error::config("the key's in-flight permits closed")))
}

/// A slot of the fleet's cap on calls in flight at `m`'s key, by `until`,
/// asked for in the key's order of calls granted by its buckets
/// (`FleetCap::turns`: by `priority` and the instant the call
/// `queued`): while the cap binds, a call of a higher class goes before
/// the calls of lower ones granted their tokens earlier, and the one
/// asking gives its turn up to it (nothing is held while it asks; a slot
/// granted as it gives up goes back). First asked, first served instead,
/// an interactive call of a fleet of four waited up to 457 ms behind the
/// batch's (`examples/llm_batch.rs --fleet`; 219–353 ms by priority).
async fn slot_by_priority(
    m: &Member,
    fleet: &FleetCap,
    until: Option<(Instant, Duration)>,
    (priority, queued): (crate::Priority, Instant),
) -> Result<Box<dyn SharedSlot>, WaitError> {
    loop {
        let turn = by_deadline(until, fleet.turns.take_as_of(priority, queued)).await?;
        let taking = take_slot(m, &fleet.cap, until);
        tokio::pin!(taking);
        match futures::future::select(taking, turn.overtaken()).await {
            futures::future::Either::Left((slot, _)) => return slot,
            // A call ordered before this one waits: it asks first, and
            // this one queues again in its place.
            futures::future::Either::Right(((), _)) => continue,
        }
    }
}

/// A slot of the fleet's cap on calls in flight at `m`'s key, by `until`.
async fn take_slot(
    m: &Member,
    shared: &Result<Arc<dyn super::concurrency::SharedInFlight>, String>,
    until: Option<(Instant, Duration)>,
) -> Result<Box<dyn SharedSlot>, WaitError> {
    match shared {
        Ok(shared) => by_deadline(until, shared.take())
            .await?
            .map_err(WaitError::Failed),
        Err(message) => Err(WaitError::Failed(Error::Backend {
            message: format!(
                "could not make the cap on calls in flight for {}: {message}",
                m.state.key
            ),
            source: None,
        })),
    }
}

/// Before the send: a permit its key's cap no longer covers (the cap went
/// down while the call waited, a concurrency refusal read meanwhile) is
/// given back and taken again behind the queue, so that what was learned
/// holds from this send on; then every permit counts its call as sent.
///
/// Only the last permit taken: waiting for an earlier member's while
/// holding a later one's could make two calls wait for each other (one
/// holding the later member's permit and waiting for the earlier's, the
/// other the other way round), and every later call of both keys behind
/// them; nor can the later ones be given back and taken again, their
/// buckets' tokens already spent (two sends would go at once). An earlier
/// member's permit beyond its cap goes with this one send, and pays what
/// is owed when it is let go.
async fn settle_permits(
    permits: &mut [Permit],
    until: Option<(Instant, Duration)>,
) -> Result<(), WaitError> {
    if let Some(last) = permits.last_mut() {
        while last.repay() {
            let again = take_permit(last.semaphore(), until).await?;
            last.replace(again);
        }
    }
    for permit in permits {
        permit.send();
    }
    Ok(())
}

/// Wait for the key's first response, but not forever: a probe that hangs
/// must not hold every caller (nor pass the deadline). Returns the probe
/// lock when this request is the key's first. The wait counts from when
/// the call `arrived` at the key: the calls queued behind it (see
/// [`Priority`]) would otherwise each wait the whole of it, one after the
/// other.
async fn wait_for_probe(
    state: &KeyState,
    until: Option<(Instant, Duration)>,
    arrived: Instant,
) -> Result<Option<ProbeGuard<'_>>, WaitError> {
    let probe_until = arrived + PROBE_WAIT;
    let cap = until.map_or(probe_until, |(at, _)| at.min(probe_until));
    match tokio::time::timeout_at(cap, state.probe.lock()).await {
        Ok(guard) if !state.has_seen_response() => Ok(Some(guard)),
        Ok(_) => Ok(None),
        Err(_) => match until.filter(|(at, _)| *at <= probe_until) {
            Some((_, limit)) => Err(WaitError::TimeLimit { wait: None, limit }),
            None => {
                tracing::debug!(
                    target: "reqwest_pace",
                    key = &*state.key,
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

/// Acquire `weight` within `bounds`, by `until` if given: a wait the
/// limiter says would end past it fails at once, and one that turns out
/// longer fails at it. For a scope whose burst is learned (not configured)
/// and smaller than the weight, the limiter's capacity is raised to the
/// weight first (a limiter of the caller's, whose capacity the wait step
/// cannot see); where it cannot be, the weight is paid in pieces of at
/// most the burst, one after the other, so a big request waits for all
/// its tokens instead of failing (or being undercharged). Returns the last
/// piece's grant.
async fn acquire(
    limiter: &dyn Limiter,
    weight: u64,
    learned_burst: bool,
    bounds: Bounds,
    until: Option<(Instant, Duration)>,
) -> Result<Grant, WaitError> {
    let mut left = weight;
    let mut piece = weight;
    let mut grant = Grant::default();
    let mut raised = false;
    while left > 0 {
        let take = piece.min(left);
        match acquire_by(limiter, take, bounds, until).await? {
            Ok(granted) => {
                left -= take;
                grant = granted;
            }
            Err(Error::WeightExceedsCapacity { .. }) if learned_burst && !raised => {
                raised = true;
                if let Err(e) = limiter.adjust(Adjustment::SetCapacity(weight)).await {
                    tracing::debug!(target: "reqwest_pace", error = %e, "could not raise a learned capacity");
                }
            }
            Err(Error::WeightExceedsCapacity { capacity, .. }) if learned_burst && capacity > 0 => {
                piece = capacity;
            }
            Err(e) => return Err(WaitError::Failed(e)),
        }
    }
    Ok(grant)
}

/// One acquisition within `bounds` and by `until`: the outer error is the
/// deadline, the inner one the limiter's.
async fn acquire_by(
    limiter: &dyn Limiter,
    weight: u64,
    bounds: Bounds,
    until: Option<(Instant, Duration)>,
) -> Result<Result<Grant, Error>, WaitError> {
    let Some((at, limit)) = until else {
        return Ok(limiter.acquire_within(weight, bounds).await);
    };
    match tokio::time::timeout_at(at, limiter.acquire_within(weight, bounds.by(at))).await {
        Err(_) => Err(WaitError::TimeLimit { wait: None, limit }),
        Ok(Err(Error::NotYet { wait })) => Err(WaitError::TimeLimit {
            wait: Some(wait),
            limit,
        }),
        Ok(other) => Ok(other),
    }
}

/// The status a block reports when the response's own is not a status.
pub(crate) fn status_or_429(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RequestRate, TokenBucket};

    #[tokio::test(start_paused = true)]
    async fn a_weight_over_a_learned_burst_raises_it_and_is_one_acquisition() {
        let bucket = TokenBucket::with_initial(RequestRate::per_second(10).unwrap(), 4, 0).unwrap();
        let start = Instant::now();
        assert!(acquire(&bucket, 10, true, Bounds::default(), None)
            .await
            .is_ok());
        // Ten tokens at 10/s from empty: a full second, not 0.4 s, and in
        // one acquisition: the capacity follows the weight.
        assert_eq!(start.elapsed(), std::time::Duration::from_secs(1));
        assert_eq!(bucket.available(), 0);
        assert_eq!(bucket.capacity(), 10);
        // With a configured burst the same weight is an error.
        let bucket = TokenBucket::with_initial(RequestRate::per_second(10).unwrap(), 4, 0).unwrap();
        assert!(matches!(
            acquire(&bucket, 10, false, Bounds::default(), None).await,
            Err(WaitError::Failed(Error::WeightExceedsCapacity {
                weight: 10,
                capacity: 4
            }))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_past_the_deadline_fails_at_once_with_the_wait() {
        let bucket = TokenBucket::with_initial(RequestRate::per_second(1).unwrap(), 1, 0).unwrap();
        let start = Instant::now();
        let limit = Duration::from_millis(500);
        let until = Some((start + limit, limit));
        // One token in a second, by a deadline half a second away.
        match acquire(&bucket, 1, false, Bounds::default(), until).await {
            Err(WaitError::TimeLimit { wait, limit: l }) => {
                assert_eq!(wait, Some(Duration::from_secs(1)));
                assert_eq!(l, limit);
            }
            _ => panic!("expected the deadline"),
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "failed at once");
        // Within the deadline the same wait is served.
        let until = Some((start + Duration::from_secs(2), Duration::from_secs(2)));
        assert!(acquire(&bucket, 1, false, Bounds::default(), until)
            .await
            .is_ok());
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
