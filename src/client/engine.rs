//! The engine: scopes, retry policy, budget and hooks, and the paced,
//! learning retry loop over any way of sending one attempt.
//!
//! A call flows one way, and [`Pacer::attempts`] reads in that order:
//! **key** (which bucket of each scope the request belongs to) → **wait**
//! (for each bucket, by the call's time limit) → **send** (one attempt,
//! however the caller sends: a `reqwest::Client`, the rest of a middleware
//! chain, a tower service) → **read** (the outcome and the server's signal)
//! → **adjust** (teach the buckets what the server said) → **decide** (the
//! pure [`RetryRules::decide`]: retry after a delay, return, or give up).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, Request, Response, StatusCode};
use tokio::time::Instant;
use tracing::Instrument;

use super::breaker::Health;
use super::events::{emit, listened, Hook};
use super::scope::BuiltScope;
use super::server_clock::ServerClocks;
use super::wait::{status_or_429, time_limit, BaseKey, Member, Sent};
use super::{scope, CircuitState, Cost, Event, KeyStatus, Priority, SendFailure};
use crate::error::{ErrorKind, LastResponse, NotRetriedReason};
use crate::headers::RateLimitSignal;
use crate::limiter::Adjustment;
use crate::retry::{Attempted, Decision, Outcome, ReleaseJitter, RetryBudget, RetryRules};
use crate::Error;

/// What an attempt's result says of its server's health, for the circuit
/// breakers.
fn health(result: &Result<Response, reqwest::Error>) -> Health {
    match result {
        Ok(response) => Health::of_status(response.status().as_u16()),
        Err(e) => Health::of_error(e),
    }
}

/// What spaces the sends of a host whose robots.txt asks for an interval:
/// its origin, and the spacer at that interval.
pub(crate) type Gate = (String, Arc<super::wait::Spacer>);

/// A source of uniform draws in `[0, 1)`.
pub(crate) type Random = Arc<dyn Fn() -> f64 + Send + Sync>;

/// The engine of every paced client: the scopes (and what each key has
/// learned), the retry policy and budget, and the event hook, with the
/// loop that paces, sends, learns and retries one call.
///
/// It sends nothing itself: [`ThrottledClient`](crate::ThrottledClient) is
/// a `Pacer` with a `reqwest::Client` that sends its attempts;
/// [`PaceMiddleware`](crate::PaceMiddleware) is a `Pacer` whose attempts run
/// the rest of a `reqwest-middleware` chain; with the `tower` feature,
/// [`PaceLayer`](crate::PaceLayer) wraps any tower service of reqwest
/// requests. Cheap to clone (an `Arc` inside): clones share buckets,
/// learned rates and the budget.
///
/// ```
/// use reqwest_pace::{Pacer, RequestRate};
///
/// let pacer = Pacer::builder().rate(RequestRate::per_second(20)?).build()?;
/// assert_eq!(pacer.retry_rules().max_attempts(), 4);
/// # Ok::<(), reqwest_pace::Error>(())
/// ```
#[derive(Clone)]
pub struct Pacer {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) scopes: Vec<BuiltScope>,
    pub(crate) policy: RetryRules,
    pub(crate) budget: Option<Arc<RetryBudget>>,
    pub(crate) hook: Option<Hook>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) jitter: ReleaseJitter,
    pub(crate) random: Random,
    /// What settles a call's estimate with what it cost, if anything.
    pub(crate) reconcile: Option<Arc<dyn super::Reconcile>>,
    /// Each server's clock, as its `Date` headers place it.
    pub(crate) clocks: Mutex<ServerClocks>,
    /// Each origin's robots.txt, when it is obeyed.
    #[cfg(feature = "robots")]
    pub(crate) robots: Option<super::robots::RobotsCache>,
}

/// One call's progress through its attempts.
pub(crate) struct Call {
    /// The call's number, on every event of it ([`Event::call`]).
    pub(crate) id: u64,
    method: Method,
    url: reqwest::Url,
    /// The call's own deadline, as an instant and the limit it came from.
    deadline: Option<(Instant, Duration)>,
    /// The class it queues in at each of its keys.
    pub(crate) priority: Priority,
    /// When the call queued at its keys: a retry after the server's own
    /// wait queues in that place (see [`Priority`]'s guarantees); any
    /// other retry queues anew.
    pub(crate) queued: Option<Instant>,
    pub(crate) first_send: Option<Instant>,
    pub(crate) attempt: u32,
    /// How many of its attempts were refusals the key's model paces
    /// (see [`Call::counted_attempts`]).
    paced_refusals: u32,
    previous_delay: Option<Duration>,
    /// The last status any attempt got, kept across later attempts that got
    /// none (a 503, then connect errors, still reports the 503).
    pub(crate) last_status: Option<StatusCode>,
}

/// The number the next call gets ([`Event::call`]).
static NEXT_CALL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Call {
    pub(crate) fn new(request: &Request, deadline: Option<Duration>, priority: Priority) -> Call {
        Call {
            id: NEXT_CALL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            method: request.method().clone(),
            url: request.url().clone(),
            deadline: deadline.map(|d| (Instant::now() + d, d)),
            priority,
            queued: None,
            first_send: None,
            attempt: 0,
            paced_refusals: 0,
            previous_delay: None,
            last_status: None,
        }
    }

    /// The attempts the policy's `max_attempts` counts: a refusal the
    /// key's model paces (its server admitted the key before, and the key
    /// now goes slower, or probes a lockout) is the pacing's miss, not the
    /// call's failure, and costs no attempt. A call with a time limit (a
    /// deadline, or `max_elapsed` from its first send) has that limit bound
    /// them; one without may have as many as the policy allows attempts.
    /// A log read as a refilling bucket refused a quarter of a key's sends
    /// for seconds, each with `Retry-After: 0`, and a call that four of
    /// them fell on failed while the others went through.
    pub(crate) fn counted_attempts(&self, policy: &RetryRules) -> u32 {
        let free = if self.time_bounds_paced_refusals(policy) {
            self.paced_refusals
        } else {
            self.paced_refusals.min(policy.max_attempts())
        };
        self.attempt.saturating_sub(free).max(1)
    }

    /// Whether the call's time limit, not its attempts, bounds the
    /// refusals its keys' models paced ([`Call::counted_attempts`]): such a
    /// refusal then leaves the call free to take the key's next send at
    /// once, in its place at its keys.
    fn time_bounds_paced_refusals(&self, policy: &RetryRules) -> bool {
        self.limit(policy.max_elapsed()).is_some()
    }

    /// The call's route, as far as server buckets go: method and path.
    pub(crate) fn route(&self) -> String {
        scope::route_of(&self.method, &self.url)
    }

    /// The instant no wait of this call may pass, with the limit it comes
    /// from: the deadline, or from the first send on `max_elapsed`.
    pub(crate) fn limit(&self, max_elapsed: Option<Duration>) -> Option<(Instant, Duration)> {
        time_limit(self.deadline, self.first_send, max_elapsed)
    }
}

/// What one attempt's result says: how the policy classifies it, and the
/// server's rate-limit signal when there was a response.
struct Read {
    outcome: Outcome,
    signal: Option<RateLimitSignal>,
}

impl Pacer {
    /// The retry rules in force.
    pub fn retry_rules(&self) -> &RetryRules {
        &self.inner.policy
    }

    fn scope(&self, name: &str) -> Option<&BuiltScope> {
        self.inner.scopes.iter().find(|l| &*l.config.name == name)
    }

    /// The rate a scope's bucket for `key` currently applies, in tokens per
    /// second: `None` while it is unconstrained (nothing configured or
    /// learned) or the key is unknown.
    pub fn current_rate(&self, scope: &str, key: &str) -> Option<f64> {
        let state = self.scope(scope)?.keyed.peek(&key.to_owned())?;
        state.applied_rate()
    }

    /// What a scope's key has learned, and whether it is closed: `None`
    /// when the key is unknown (never used, or evicted).
    ///
    /// The key is the scope's key for a request: for the host scope
    /// `scheme://host:port`, for a route counted in a bucket of its own
    /// `scheme://host:port~bucket`.
    pub fn key_status(&self, scope: &str, key: &str) -> Option<KeyStatus> {
        let state = self.scope(scope)?.keyed.peek(&key.to_owned())?;
        let rate = state.applied_rate();
        let now = Instant::now();
        let cap = self.inner.policy.max_retry_after();
        let closed = state.server_block(now).filter(|b| b.until - now > cap);
        Some(KeyStatus {
            rate,
            closed_for: closed.map(|b| b.until - now),
            closed_by: closed.map(|b| status_or_429(b.status)),
            max_in_flight: state.max_in_flight(),
            in_flight: state.in_flight(),
            queued: state.queued(),
            circuit: state.circuit(now),
            crawl_delay: self.crawl_delay(key),
            auto_throttle_delay: state.politeness_delay(),
        })
    }

    #[cfg(feature = "robots")]
    fn crawl_delay(&self, key: &str) -> Option<Duration> {
        self.inner.robots.as_ref()?.interval(key)
    }

    #[cfg(not(feature = "robots"))]
    fn crawl_delay(&self, _key: &str) -> Option<Duration> {
        None
    }

    /// Forget what this process's state of a scope's key has learned (and
    /// any memory of it) and lift any block a server asked for, so that
    /// calls go again and the key learns afresh (a server that closed it
    /// for a day by mistake need not lock a caller out). A shared limiter's
    /// block is lifted for every process that shares it, which costs a
    /// round trip to its store; the rate the fleet learned stays there, and
    /// this process's state goes on from it. Returns whether the key's
    /// state was held.
    pub async fn clear_key(&self, scope: &str, key: &str) -> bool {
        let Some(built) = self.scope(scope) else {
            return false;
        };
        built.memory.forget(key);
        let Some(state) = built.keyed.peek(&key.to_owned()) else {
            return false;
        };
        let circuit = state.circuit(Instant::now());
        state.reset(&built.config);
        if let Some(from) = circuit.filter(|c| !matches!(c, CircuitState::Closed { .. })) {
            self.emit(Event::Circuit {
                scope: Arc::clone(&built.config.name),
                key: Arc::clone(&state.key),
                from,
                to: CircuitState::Closed { failures: 0 },
            });
        }
        if let Ok(limiter) = &state.limiter {
            if let Err(e) = limiter.adjust(Adjustment::Unblock).await {
                tracing::warn!(target: "reqwest_pace", key, error = %e, "could not lift the limiter's block");
            }
        }
        true
    }

    /// Drop the state of every idle key of every scope now, whatever its
    /// age, keeping what each learned (see
    /// [`Scope::remember_for`](crate::Scope::remember_for)); returns how
    /// many went. Idle keys are otherwise dropped by the scopes as they are
    /// used, once idle for their [`idle_timeout`](crate::Scope::idle_timeout).
    pub fn sweep(&self) -> usize {
        self.inner.scopes.iter().map(|l| l.keyed.sweep()).sum()
    }

    pub(crate) fn emit(&self, event: Event) {
        emit(self.inner.hook.as_ref(), event);
    }

    /// Emit the event `make` builds, if anyone receives an event logged at
    /// `level` (see [`listened`]): the calls of every request build theirs
    /// this way, so that an unthrottled call nobody watches builds none.
    pub(crate) fn emit_with(&self, level: tracing::Level, make: impl FnOnce() -> Event) {
        if listened(self.inner.hook.as_ref(), level) {
            self.emit(make());
        }
    }

    pub(crate) fn draw(&self) -> f64 {
        (self.inner.random)()
    }

    /// Run one call: pace (queued in `priority`'s class at each key), send
    /// with `send`, learn, retry.
    ///
    /// Runs inside a `reqwest_pace.send` span carrying the method and URL,
    /// so every event of one call is grouped under it.
    pub(crate) async fn run<F, Fut>(
        &self,
        request: Request,
        cost: &Cost,
        deadline: Option<Duration>,
        priority: Priority,
        send: F,
    ) -> Result<Response, Error>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        let span = tracing::debug_span!(
            target: "reqwest_pace",
            "reqwest_pace.send",
            method = %request.method(),
            url = %request.url()
        );
        let deadline = deadline.or(self.inner.deadline);
        self.attempts(request, cost, deadline, priority, send)
            .instrument(span)
            .await
    }

    /// The robots step (feature `robots`: may the request go, and what
    /// spaces its host's sends), then the loop.
    async fn attempts<F, Fut>(
        &self,
        request: Request,
        cost: &Cost,
        deadline: Option<Duration>,
        priority: Priority,
        mut send: F,
    ) -> Result<Response, Error>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        let gate = self.obey_robots(&request, &mut send).await?;
        let call = Call::new(&request, deadline, priority);
        self.paced_attempts(request, cost, call, send, gate).await
    }

    /// Without feature `robots`, every request may go, ungated.
    #[cfg(not(feature = "robots"))]
    async fn obey_robots<F>(&self, _: &Request, _: &mut F) -> Result<Option<Gate>, Error> {
        Ok(None)
    }

    /// The loop: key → wait → send → read → adjust → decide. A `gate` (a
    /// host's robots.txt interval) spaces every attempt's send.
    pub(crate) async fn paced_attempts<F, Fut>(
        &self,
        request: Request,
        cost: &Cost,
        mut call: Call,
        mut send: F,
        gate: Option<Gate>,
    ) -> Result<Response, Error>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        let members = self.members(&request, cost);
        let mut current = request;
        loop {
            call.attempt += 1;
            let replay = self.replay(&call, &current);
            let sent = self.wait(&members, gate.as_ref(), &mut call).await?;
            let sent_at = Instant::now();
            let result = match self.send_one(&mut send, current, &call).await {
                Ok(result) => result,
                Err(source) => {
                    sent.abandon(&members, true);
                    return Err(other_failure(call.attempt, source));
                }
            };
            let read = self.read(&call, &result, sent_at);
            let mut sent = sent;
            self.judge(&members, &mut sent, health(&result));
            self.measure_latency(&members, &result, sent_at);
            let taught = self
                .learn(
                    &members,
                    &sent,
                    (&call, read.signal.as_ref(), cost),
                    read.outcome,
                )
                .await;
            let paced = taught.paced;
            if paced {
                call.paced_refusals += 1;
            }
            drop(sent);
            call.last_status = result
                .as_ref()
                .ok()
                .map(Response::status)
                .or(call.last_status);
            match self.decide(&call, &read, replay.is_some(), (paced, taught.retry_wait)) {
                Decision::Return => {
                    let result = self.with_charge(result, cost, &members, &taught.followed);
                    return self.finish(&call, result);
                }
                Decision::GiveUp(kind) => return Err(self.give_up(&call, kind, result).await),
                Decision::Retry { delay, from_server } => {
                    // Told by the server when to come back, the call
                    // keeps its place at its keys (its time limit runs
                    // while it waits). So does a call refused by a send
                    // the key's model paced (a probe of a lockout) while
                    // its time limit bounds such refusals, and it goes
                    // back at once: the key's pace, not the backoff, says
                    // when it is sent again, and it takes the next probe,
                    // so that the calls behind it do not start their time
                    // limits on probes of their own (sent back behind the
                    // others when a lockout of most of a minute ended,
                    // such calls passed their limits at the key's new
                    // pace). Any other retry the client chose the delay of
                    // queues as a new arrival, so that refusals that cost
                    // attempts fall on the calls in turn.
                    let back_at_once = !from_server
                        && paced
                        && call.time_bounds_paced_refusals(&self.inner.policy);
                    let keeps_place = from_server || back_at_once;
                    let delay = if back_at_once { Duration::ZERO } else { delay };
                    // A breaker this attempt opened fails the call now,
                    // not after the delay.
                    let made = (call.attempt, call.last_status);
                    if let Some(open) = self.open_circuit(&members, made, None) {
                        return Err(open);
                    }
                    self.emit(Event::Retrying {
                        call: call.id,
                        attempt: call.attempt,
                        delay,
                        from_server,
                        status: call.last_status.map(|s| s.as_u16()),
                    });
                    if !keeps_place {
                        call.queued = None;
                    }
                    // A call whose own wait is longer than its keys' hold
                    // (a second rounded up: see `Adaptive::server_waits`)
                    // sits it out whole.
                    let back_with_keys = from_server && taught.retry_wait <= taught.server_wait;
                    tokio::time::sleep(self.retry_sleep(&members, delay, back_with_keys)).await;
                    // The backoff's next delay grows from its own last one.
                    if !back_at_once {
                        call.previous_delay = Some(delay);
                    }
                }
            }
            // `Retry` is decided only for a request that can be sent again.
            let Some(next) = replay else {
                return Err(Error::giving_up(
                    ErrorKind::NotRetried {
                        reason: NotRetriedReason::BodyNotCloneable,
                    },
                    call.attempt,
                    call.last_status,
                    None,
                    None,
                ));
            };
            current = next;
        }
    }

    /// A copy of the request for the next attempt, when there may be one.
    fn replay(&self, call: &Call, request: &Request) -> Option<Request> {
        let policy = &self.inner.policy;
        let may_retry = policy.allows_method(&call.method)
            && call.counted_attempts(policy) < policy.max_attempts();
        may_retry.then(|| request.try_clone()).flatten()
    }

    /// Which bucket of each scope the request belongs to (key), and what it
    /// spends there.
    ///
    /// One lookup per scope, of a key written into this thread's buffer:
    /// a key held already costs no allocation, nor does a route that no
    /// server counts in a bucket of its own.
    fn members(&self, request: &Request, cost: &Cost) -> Vec<Member> {
        scope::with_key_buffer(|buffer| {
            self.inner
                .scopes
                .iter()
                .enumerate()
                .filter_map(|(i, scope)| {
                    let weight = cost.get(scope.config.dimension_ref());
                    if weight == 0 {
                        return None;
                    }
                    let base = scope.key(request, buffer)?;
                    let bucket = scope.bucket(&base, request);
                    let state = match &bucket {
                        Some(bucket) => scope.keyed.get(&format!("{base}~{bucket}")),
                        None => scope.keyed.get_borrowed(&*base),
                    };
                    Some(Member {
                        scope: i,
                        base: BaseKey::of(&state, base.len()),
                        state,
                        weight,
                        bucket,
                    })
                })
                .collect()
        })
    }

    /// The response, carrying the [`Charge`](super::Charge) of its call
    /// when the call's cost is more than one request or a reconciler may
    /// settle it (`followed`: the members whose key followed the server's
    /// headers after it).
    fn with_charge(
        &self,
        result: Result<Response, reqwest::Error>,
        cost: &Cost,
        members: &[Member],
        followed: &[usize],
    ) -> Result<Response, reqwest::Error> {
        let mut response = result?;
        if cost.is_one_request() && self.inner.reconcile.is_none() {
            return Ok(response);
        }
        let keys = members
            .iter()
            .enumerate()
            .map(|(i, m)| super::reconcile::ChargedKey {
                dimension: self.inner.scopes[m.scope].config.dimension_ref().clone(),
                state: Arc::clone(&m.state),
                weight: m.weight,
                followed: followed.contains(&i),
            })
            .collect();
        let charge = super::Charge::new(cost.clone(), keys, self.inner.reconcile.clone());
        response.extensions_mut().insert(charge);
        Ok(response)
    }

    /// Send one attempt: `Ok` with reqwest's result, or `Err` with another
    /// middleware's failure, which is final.
    async fn send_one<F, Fut>(
        &self,
        send: &mut F,
        request: Request,
        call: &Call,
    ) -> Result<Result<Response, reqwest::Error>, Box<dyn std::error::Error + Send + Sync>>
    where
        F: FnMut(Request) -> Fut,
        Fut: Future<Output = Result<Response, SendFailure>>,
    {
        self.emit_with(tracing::Level::DEBUG, || Event::Sent {
            call: call.id,
            attempt: call.attempt,
            method: request.method().clone(),
            url: request.url().clone(),
        });
        match send(request).await {
            Ok(response) => Ok(Ok(response)),
            Err(SendFailure::Reqwest(e)) => Ok(Err(e)),
            Err(SendFailure::Other(source)) => Err(source),
        }
    }

    /// Read an attempt's result, sent at `sent_at`: its outcome and the
    /// server's signal.
    fn read(
        &self,
        call: &Call,
        result: &Result<Response, reqwest::Error>,
        sent_at: Instant,
    ) -> Read {
        if let Ok(response) = result {
            self.emit_with(tracing::Level::DEBUG, || Event::Received {
                call: call.id,
                attempt: call.attempt,
                status: response.status().as_u16(),
            });
        }
        Read {
            outcome: self.inner.policy.classify(result.as_ref()),
            signal: result
                .as_ref()
                .ok()
                .map(|response| self.signal(response, sent_at)),
        }
    }

    /// The rate-limit signal of a response to a request sent at `sent_at`,
    /// its absolute times read against the server's clock as its `Date`
    /// headers so far place it (see [`server_clock`](super::server_clock)).
    fn signal(&self, response: &Response, sent_at: Instant) -> RateLimitSignal {
        let status = response.status().as_u16();
        let headers = response.headers();
        if !crate::headers::may_carry_signal(headers) {
            // No field to read, nor a time to place on the server's clock.
            return RateLimitSignal::of_status(status);
        }
        let Some(date) = crate::headers::date(headers) else {
            return RateLimitSignal::from_response(response);
        };
        let server_now = scope::with_key_buffer(|origin| {
            origin.clear();
            scope::write_origin(response.url(), origin)?;
            let observed = self
                .inner
                .clocks
                .lock()
                .map(|mut clocks| clocks.observe(origin, date, sent_at, Instant::now()))
                .unwrap_or((date, Duration::from_secs(1)));
            Some(observed)
        });
        let Some(server_now) = server_now else {
            return RateLimitSignal::from_response(response);
        };
        RateLimitSignal::parse_at(status, headers, server_now)
    }

    /// Charge the retry budget for this attempt and ask the policy. A
    /// refusal the key's model paces (`paced`: its server limits, and the
    /// key now goes slower) is retried at the key's pace, not in a storm:
    /// like a retry the server invited, it spends no budget. `server_wait`
    /// is the wait the server asked of this call, as the keys' models read
    /// it (`Taught::retry_wait`; the keys' own hold may be shorter).
    fn decide(
        &self,
        call: &Call,
        read: &Read,
        replayable: bool,
        (paced, server_wait): (bool, Option<Duration>),
    ) -> Decision {
        let policy = &self.inner.policy;
        let budget = self.inner.budget.as_deref().filter(|_| !paced);
        match (read.outcome, budget) {
            (Outcome::Success, Some(budget)) => budget.record_success(),
            // A retry the server invited (a `Retry-After`) spends nothing.
            (Outcome::Retryable, Some(budget)) if server_wait.is_none() => budget.record_failure(),
            _ => {}
        }
        let now = Instant::now();
        let attempted = Attempted {
            number: call.counted_attempts(policy),
            outcome: read.outcome,
            method: &call.method,
            replayable,
            server_wait,
            time_left: call
                .limit(policy.max_elapsed())
                .map(|(at, limit)| (at.saturating_duration_since(now), limit)),
            budget_allows: budget.map(RetryBudget::can_retry),
            previous_delay: call.previous_delay,
            draw: self.draw(),
        };
        policy.decide(&attempted, self.inner.jitter)
    }

    /// The call's result, returned as the classifier left it: a response
    /// (a success, or a final status such as a 404), or a final transport
    /// error.
    fn finish(
        &self,
        call: &Call,
        result: Result<Response, reqwest::Error>,
    ) -> Result<Response, Error> {
        match result {
            Ok(response) => {
                self.emit_with(tracing::Level::DEBUG, || Event::Completed {
                    call: call.id,
                    attempts: call.attempt,
                    status: response.status().as_u16(),
                });
                Ok(response)
            }
            Err(source) => {
                let error = Error::giving_up(
                    ErrorKind::Transport,
                    call.attempt,
                    call.last_status,
                    None,
                    Some(source),
                );
                self.report_give_up(call, &error);
                Err(error)
            }
        }
    }

    /// How long a retry sleeps before it waits at its keys again: its
    /// `delay`, but a retry the server asked for (`with_keys`: one the keys
    /// hold for as long) goes back to its keys when the wait they hold for
    /// the server ends, if sooner:
    /// they let their calls go past it with the release jitter (see
    /// `learn`), and the call, back in its place, is the first of them
    /// (it overtakes the call that took the key's turn meanwhile: see
    /// `wait_at_turn`). Sleeping its own jittered delay, it woke as the
    /// calls behind it were let go, and came after them.
    fn retry_sleep(&self, members: &[Member], delay: Duration, with_keys: bool) -> Duration {
        if !with_keys {
            return delay;
        }
        let now = Instant::now();
        let held_until = members
            .iter()
            .filter_map(|m| m.state.server_block(now))
            .map(|block| block.until)
            .max();
        held_until.map_or(delay, |until| {
            delay.min(until.saturating_duration_since(now))
        })
    }

    /// The error of a call that gives up as the retry decision said
    /// (`kind`), keeping what its last attempt left: the response's status,
    /// headers and first bytes of body (read by the call's time limit), or
    /// the transport error. The event says the error's kind.
    async fn give_up(
        &self,
        call: &Call,
        kind: ErrorKind,
        result: Result<Response, reqwest::Error>,
    ) -> Error {
        let (last, source) = match result {
            Ok(response) => {
                let time = call
                    .limit(self.inner.policy.max_elapsed())
                    .map_or(LastResponse::BODY_TIME, |(at, _)| {
                        at.saturating_duration_since(Instant::now())
                    });
                (Some(LastResponse::read(response, time).await), None)
            }
            Err(source) => (None, Some(source)),
        };
        let error = Error::giving_up(kind, call.attempt, call.last_status, last, source);
        self.report_give_up(call, &error);
        error
    }

    /// Report `error`'s give-up ([`Event::GaveUp`], with its kind), when it
    /// ends a call that gave up retrying ([`Error::gave_up`]).
    pub(crate) fn report_give_up(&self, call: &Call, error: &Error) {
        let Some(kind) = error.gave_up() else {
            return;
        };
        self.emit(Event::GaveUp {
            call: call.id,
            attempts: call.attempt,
            kind,
            status: call.last_status.map(|s| s.as_u16()),
        });
    }
}

impl Sent<'_> {
    /// The attempt got no response to learn from: it is in flight no more.
    pub(crate) fn abandon(self, members: &[Member], answered: bool) {
        for (m, &seq) in members.iter().zip(&self.seqs) {
            if answered {
                m.state.seen_response.store(true, Ordering::Release);
            }
            m.state.weights().answered(seq);
            m.state.adapt().on_no_response(seq);
        }
    }
}

#[cfg(feature = "middleware")]
fn other_failure(attempts: u32, source: Box<dyn std::error::Error + Send + Sync>) -> Error {
    Error::Middleware { attempts, source }
}

#[cfg(not(feature = "middleware"))]
fn other_failure(_attempts: u32, source: Box<dyn std::error::Error + Send + Sync>) -> Error {
    Error::Backend {
        message: source.to_string(),
        source: Some(source),
    }
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scopes: Vec<_> = self.inner.scopes.iter().map(|l| &l.config).collect();
        f.debug_struct("Pacer")
            .field("scopes", &scopes)
            .field("policy", &self.inner.policy)
            .field("budget", &self.inner.budget)
            .finish_non_exhaustive()
    }
}
