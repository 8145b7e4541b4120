//! A key's cap on calls in flight: configured ([`Scope::max_in_flight`]),
//! learned from the refusals that say the limit is concurrency, or both.
//!
//! Many APIs refuse past a number of calls in flight per credential, and
//! such a refusal is not a rate refusal: waiting a time does not help, a
//! call completing does. Read as a rate refusal it would drag the key's
//! rate down while the rate is not what binds, and the next burst would be
//! refused again. So a refusal is first asked whether it is one of
//! concurrency ([`refusal`], a pure function of the response and what the
//! key has in flight), and if so it teaches the key's [`Cap`] instead of
//! its rate, the way TCP's window learns a path: the cap goes to what was
//! in flight less the refused call, no lower than a share of what was in
//! flight when the episode of refusals began ([`Tuning::decrease`], never
//! below one); below what the server was seen to admit it climbs back one
//! call per round of calls at the cap ([`Tuning::recover_rounds`]), and
//! above it it goes no higher, unless the scope asks for probes
//! ([`Scope::probe_cap`]): then it is probed one call higher only after a
//! long run of answered calls at the cap, a run that doubles each time a
//! probe is refused. The trade-off: without probes the key stays at or
//! under the server's cap from its first refusal on, and a server whose
//! cap grows is not found; with them, a grown cap is found, late, and each
//! probe costs one refused call.
//!
//! The cap is enforced by [`InFlight`], a tokio semaphore whose permits are
//! added or forgotten as the cap moves: it stays fair (first asked, first
//! served) and cancel-safe (a call dropped while it waits leaves the
//! queue). A cap lowered below what is held takes the excess back as the
//! calls holding it complete.
//!
//! [`Scope::max_in_flight`]: crate::Scope::max_in_flight
//! [`Scope::probe_cap`]: crate::Scope::probe_cap

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::adapt::Asked;
use super::tuning::TUNING;
use crate::headers::{Dimension, RateLimitSignal};
use crate::Error;

/// A key's cap on calls in flight kept for a whole fleet, in place of the
/// process's own [`InFlight`] (`RedisInFlight`, through
/// [`Scope::shared_in_flight`](crate::Scope::shared_in_flight)): it
/// counts the fleet's calls and learns the cap from what every process's
/// slots report, with the same arithmetic as [`Cap`] (no probes).
pub(crate) trait SharedInFlight: Send + Sync {
    /// Wait for a slot: first asked, first served in the process;
    /// cancel-safe.
    fn take(&self) -> BoxFuture<'_, Result<Box<dyn SharedSlot>, Error>>;
    /// The cap in force, as last read.
    fn cap(&self) -> Option<usize>;
    /// How many slots this process holds.
    fn held(&self) -> usize;
}

/// One call's slot of a [`SharedInFlight`]: dropped, it goes back, with
/// what its call taught.
pub(crate) trait SharedSlot: Send + Sync {
    /// The server admitted the call and answered.
    fn answered(&self);
    /// The server refused the call for concurrency: the slot goes back
    /// now, the fleet's cap lowered, before the call goes on.
    fn refused(&self) -> BoxFuture<'_, ()>;
    /// The fleet's calls in flight as the slot was taken, itself among
    /// them.
    fn in_flight(&self) -> usize;
}

/// The thresholds of learning a cap on calls in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tuning {
    /// The least share of the calls in flight that the refusals of one
    /// episode leave the cap at (TCP's multiplicative decrease, β): an
    /// episode is opened by a refusal of a call sent after the last cut,
    /// and holds every refusal of the calls sent before it. Within it each
    /// refusal still caps at what is in flight less one, which finds a
    /// server's cap from one burst, but no lower than this share of what
    /// was in flight at its first refusal: a run of refusals that is no
    /// cap (an outage answered with 429s) halves the cap once per round
    /// of calls instead of taking it to one at the first round's end.
    /// Lower finds a cap far below what is in flight in fewer rounds;
    /// higher gives up less to an outage.
    pub(crate) decrease: f64,
    /// Below what the server was seen to admit (the most calls in flight
    /// at an admitted answer, no more than a refused probe left the cap
    /// at): rounds at the cap (a round: as many calls answered as the cap,
    /// at the cap, with no concurrency refusal) before the cap goes one
    /// higher, TCP's additive increase of one per round trip. One round
    /// brings a cap cut to 1 by an outage back to 32 in about 500 calls;
    /// more recover slower. No probe is refused here unless the server's
    /// cap went down meanwhile.
    pub(crate) recover_rounds: u64,
    /// At or above what the server was seen to admit: calls answered at
    /// the cap, with no concurrency refusal, before the cap is probed one
    /// higher. Longer keeps the key under the server's cap longer and
    /// refuses fewer probes; shorter finds a grown cap sooner. 256 costs
    /// at most 0.4 % refused calls from the first probe, less as the run
    /// doubles on each refused probe (back to this after one stands).
    pub(crate) probe_after: u64,
    /// The longest run a refused probe doubles to: a cap that has stood
    /// for a long time is still probed now and then, about once per this
    /// many calls at the cap.
    pub(crate) max_probe_after: u64,
}

impl Tuning {
    /// The tuning in force.
    pub(crate) const DEFAULT: Tuning = Tuning {
        decrease: 0.5,
        recover_rounds: 1,
        probe_after: 256,
        max_probe_after: 65_536,
    };
}

/// Why a refusal is read as one of concurrency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// Every limit the refusal states has room for the call, it asks for
    /// no wait, and other calls of the key were in flight: no rate limit
    /// it states explains it, and a wait is what a rate limit would name
    /// (as an LLM API's concurrency refusal reads: all its rate limits
    /// with room, no `retry-after`).
    RoomInEveryLimit,
}

/// Whether the refusal `signal` is one of concurrency, for a call weighing
/// `weight(d)` in each dimension `d` (0 where it names none), with
/// `in_flight` calls of the key sent and not yet answered as it is read
/// (the refused one among them).
///
/// Only a 429 is: a 503 says the server is overloaded or down, whatever
/// its headers say, and a run of them (an outage) read as concurrency
/// would cut the cap at every one; the rate model reads it, as it did
/// before caps were learned. A 429 that names a wait (a `Retry-After`),
/// states a limit with less left than the call weighs there, states no
/// limit at all (a bare 429: a limiter in front, read by the header-less
/// regime), or came with nothing else in flight (no cap refuses a call
/// alone) is left to the rate model too.
pub(crate) fn refusal(
    signal: &RateLimitSignal,
    weight: impl Fn(&Dimension) -> u64,
    in_flight: usize,
) -> Option<Evidence> {
    if signal.status != 429 || Asked::of(signal).believable().is_some() || in_flight < 2 {
        return None;
    }
    let mut stated = signal
        .limits
        .iter()
        .filter_map(|l| l.remaining.map(|r| (&l.dimension, r)))
        .peekable();
    stated.peek()?;
    stated
        .all(|(dimension, remaining)| remaining >= weight(dimension).max(1))
        .then_some(Evidence::RoomInEveryLimit)
}

/// A key's cap on calls in flight: what was configured, what was learned,
/// and the run of answered calls toward the next probe. Pure: each step
/// takes what the key has in flight and returns the new cap, if it moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cap {
    /// [`Scope::max_in_flight`](crate::Scope::max_in_flight): learning
    /// never goes above it.
    configured: Option<usize>,
    /// The cap in force: the configured one until a refusal teaches less.
    current: Option<usize>,
    /// Calls answered at the cap since it last moved.
    run: u64,
    /// The run the next probe above what the server admitted waits for.
    probe_after: u64,
    /// The most calls the key had in flight as one the server admitted was
    /// answered, lowered to the cap a refused probe falls back to: up to
    /// it the cap recovers by rounds, above it it is probed.
    admitted: usize,
    /// Whether the cap was last raised by a probe not yet borne out.
    probing: bool,
    /// Whether the cap is probed above [`admitted`](Self::admitted) at all
    /// ([`Scope::probe_cap`](crate::Scope::probe_cap)).
    probes: bool,
    /// The least cap the current episode of refusals cuts to.
    floor: usize,
}

impl Cap {
    /// A key's cap, `configured` or none, probed above what the server
    /// admitted if `probes`.
    pub(crate) fn new(configured: Option<usize>, probes: bool) -> Cap {
        Cap {
            configured,
            current: configured,
            run: 0,
            probe_after: TUNING.concurrency.probe_after,
            admitted: 0,
            probing: false,
            probes,
            floor: 1,
        }
    }

    /// The cap in force, if any.
    pub(crate) fn current(&self) -> Option<usize> {
        self.current
    }

    /// Whether the cap was learned (below the configured one, or without
    /// one).
    pub(crate) fn learned(&self) -> bool {
        self.current != self.configured
    }

    /// A concurrency refusal read with `in_flight` calls sent and not yet
    /// answered, the refused one among them: the server had at most the
    /// others in flight, so its cap is at most `in_flight − 1` (less when
    /// calls were answered between the refusal and its reading, which a
    /// later probe makes good). A refusal that opens an episode (`opens`:
    /// its call was sent after the last cut) sets the episode's floor, the
    /// [`Tuning::decrease`] share of `in_flight`: no refusal of the
    /// episode cuts below it (nor below 1). A refused probe doubles the
    /// run to the next one. Returns the new cap when it went down.
    pub(crate) fn refused(&mut self, in_flight: usize, opens: bool) -> Option<usize> {
        let t = &TUNING.concurrency;
        self.run = 0;
        if opens {
            self.floor = (in_flight as f64 * t.decrease).ceil() as usize;
        }
        let to = in_flight.saturating_sub(1).max(self.floor).max(1);
        if self.probing {
            self.probe_after = self.probe_after.saturating_mul(2).min(t.max_probe_after);
            self.probing = false;
            self.admitted = self.admitted.min(to);
        }
        match self.current {
            Some(cap) if cap <= to => None,
            _ => {
                self.current = Some(to);
                Some(to)
            }
        }
    }

    /// A call the server admitted was answered with `in_flight` calls sent
    /// and not yet answered, itself among them. Only calls answered at the
    /// cap (as many in flight: the cap binds) count toward the probe; after
    /// the run (below what the server admitted, [`Tuning::recover_rounds`]
    /// of the cap's calls; above, the probe's run, where the cap is
    /// probed), a learned cap goes one higher (never above the configured
    /// one). Returns the new cap when it went up.
    pub(crate) fn answered(&mut self, in_flight: usize) -> Option<usize> {
        let t = &TUNING.concurrency;
        self.admitted = self.admitted.max(in_flight);
        let cap = self.current.filter(|_| self.learned())?;
        let recovering = cap < self.admitted;
        if in_flight < cap || !(recovering || self.probes) {
            return None;
        }
        self.run += 1;
        let run = if recovering {
            (cap as u64).saturating_mul(t.recover_rounds)
        } else {
            self.probe_after
        };
        if self.run < run {
            return None;
        }
        self.run = 0;
        if self.probing && !recovering {
            // The last probe stood a whole run: the cap grew, and the next
            // probe comes after the shortest run again.
            self.probe_after = t.probe_after;
        }
        let to = cap + 1;
        if self.configured.is_some_and(|c| to > c) {
            return None;
        }
        self.probing = !recovering;
        self.current = Some(to);
        Some(to)
    }
}

/// The permits of a key's cap on calls in flight, adjustable as it is
/// learned. Without a cap the semaphore holds as many permits as a tokio
/// semaphore may, so that a call takes one the same way, and a cap learned
/// later counts the calls already in flight.
#[derive(Debug)]
pub(crate) struct InFlight {
    permits: Arc<Semaphore>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    cap: Cap,
    /// Calls holding a permit that were sent: in flight at the server, as
    /// far as this process knows (a call still waiting on another bucket
    /// holds a permit, and is not).
    sent: usize,
    /// The permits the semaphore holds and hands out: the cap, or the most
    /// a semaphore holds without one.
    total: usize,
    /// Permits held beyond the cap (it was lowered below what was held):
    /// forgotten as they come back, rather than given to the next call.
    debt: usize,
    /// Calls sent so far: each sent permit's number is the count at its
    /// send.
    sends: u64,
    /// [`sends`](Self::sends) when a refusal last cut the cap: the refusal
    /// of a call numbered at most this is of that cut's episode.
    cut_at: u64,
}

/// One call's permit; dropped, it goes back to the key's semaphore, or is
/// forgotten while the cap is lowered below what is held.
#[derive(Debug)]
pub(crate) struct Permit {
    permit: Option<OwnedSemaphorePermit>,
    owner: Arc<InFlight>,
    /// Whether its call was sent (counted in [`State::sent`]).
    sent: bool,
    /// The call's number among the key's sends ([`State::sends`]), once
    /// sent.
    number: u64,
}

impl Permit {
    /// The semaphore the permit came from.
    pub(crate) fn semaphore(&self) -> &Arc<Semaphore> {
        self.owner.semaphore()
    }

    /// Before its call is sent: when the key's cap went below what is held
    /// while the call waited (a concurrency refusal read meanwhile), give
    /// the permit back to what is owed, and return `true`: the call then
    /// queues for another ([`replace`](Self::replace)), so that what was
    /// learned holds from its send on, not from the next call's.
    pub(crate) fn repay(&mut self) -> bool {
        if self.sent {
            return false;
        }
        let Some(permit) = self.permit.take() else {
            return false;
        };
        self.permit = crate::sync::lock(&self.owner.state).pay(permit);
        self.permit.is_none()
    }

    /// The permit taken again after [`repay`](Self::repay).
    pub(crate) fn replace(&mut self, permit: OwnedSemaphorePermit) {
        self.permit = Some(permit);
    }

    /// Its call is sent: it counts as in flight at the server.
    pub(crate) fn send(&mut self) {
        if !self.sent && self.permit.is_some() {
            self.sent = true;
            let mut state = crate::sync::lock(&self.owner.state);
            state.sent += 1;
            state.sends += 1;
            self.number = state.sends;
        }
    }

    /// Its call was refused for concurrency: lower the key's cap (see
    /// [`InFlight::refused`]). Returns the new cap when it went down.
    pub(crate) fn refused(&self) -> Option<usize> {
        self.owner.refused(self.number)
    }

    /// Whether the permit is one of `in_flight`'s.
    pub(crate) fn is_of(&self, in_flight: &Arc<InFlight>) -> bool {
        Arc::ptr_eq(&self.owner, in_flight)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = crate::sync::lock(&self.owner.state);
        if self.sent {
            state.sent = state.sent.saturating_sub(1);
        }
        if let Some(permit) = self.permit.take() {
            // Back to the semaphore unless it is owed.
            drop(state.pay(permit));
        }
    }
}

impl State {
    /// A permit coming back while permits are owed (the cap was lowered
    /// below what was held) pays one off: it is forgotten, not handed to
    /// the next call. Returns it when nothing is owed.
    fn pay(&mut self, permit: OwnedSemaphorePermit) -> Option<OwnedSemaphorePermit> {
        if self.debt == 0 {
            return Some(permit);
        }
        self.debt -= 1;
        permit.forget();
        None
    }
}

impl InFlight {
    /// The permits of a key whose scope configures `configured`, and
    /// whether it probes a learned cap ([`Cap::new`]).
    pub(crate) fn new(configured: Option<usize>, probes: bool) -> InFlight {
        let total = configured.unwrap_or(Semaphore::MAX_PERMITS);
        InFlight {
            permits: Arc::new(Semaphore::new(total)),
            state: Mutex::new(State {
                cap: Cap::new(configured, probes),
                sent: 0,
                total,
                debt: 0,
                sends: 0,
                cut_at: 0,
            }),
        }
    }

    /// The semaphore a call waits on for its permit.
    pub(crate) fn semaphore(&self) -> &Arc<Semaphore> {
        &self.permits
    }

    /// A permit taken from [`semaphore`](Self::semaphore), held for the
    /// key.
    pub(crate) fn hold(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Permit {
        Permit {
            permit: Some(permit),
            owner: Arc::clone(self),
            sent: false,
            number: 0,
        }
    }

    /// The cap in force, if any.
    pub(crate) fn cap(&self) -> Option<usize> {
        crate::sync::lock(&self.state).cap.current()
    }

    /// How many calls hold a permit.
    pub(crate) fn held(&self) -> usize {
        let state = crate::sync::lock(&self.state);
        held(&state, &self.permits)
    }

    /// How many calls holding a permit were sent and are not yet answered
    /// (the one being answered among them).
    pub(crate) fn sent(&self) -> usize {
        crate::sync::lock(&self.state).sent
    }

    /// A concurrency refusal of the call sent `number`th (0: not known)
    /// was read: lower the cap to what the key had sent in flight less
    /// one, no lower than its episode's floor; a call sent after the last
    /// cut opens a new episode. Returns the new cap when it went down.
    pub(crate) fn refused(&self, number: u64) -> Option<usize> {
        let mut state = crate::sync::lock(&self.state);
        let (sent, opens) = (state.sent, number == 0 || number > state.cut_at);
        let to = state.cap.refused(sent, opens)?;
        state.cut_at = state.sends;
        self.set_total(&mut state, to);
        Some(to)
    }

    /// A call the server admitted was answered: probe the cap one higher
    /// after a long run at it. Returns the new cap when it went up.
    pub(crate) fn answered(&self) -> Option<usize> {
        let mut state = crate::sync::lock(&self.state);
        let sent = state.sent;
        let to = state.cap.answered(sent)?;
        self.set_total(&mut state, to);
        Some(to)
    }

    /// Forget what was learned: the cap is the configured one again.
    pub(crate) fn reset(&self) {
        let mut state = crate::sync::lock(&self.state);
        let (configured, probes) = (state.cap.configured, state.cap.probes);
        state.cap = Cap::new(configured, probes);
        self.set_total(&mut state, configured.unwrap_or(Semaphore::MAX_PERMITS));
    }

    /// Make the semaphore hand out `to` permits in all: more are added (or
    /// a debt forgiven), fewer forgotten from those free, the rest owed by
    /// the calls holding them.
    fn set_total(&self, state: &mut State, to: usize) {
        if to > state.total {
            let mut more = to - state.total;
            let forgiven = more.min(state.debt);
            state.debt -= forgiven;
            more -= forgiven;
            self.permits.add_permits(more);
        } else {
            let fewer = state.total - to;
            let forgotten = self.permits.forget_permits(fewer);
            state.debt += fewer - forgotten;
        }
        state.total = to;
    }
}

/// Calls holding a permit: what the semaphore handed out and not got back,
/// the permits owed among them.
fn held(state: &State, permits: &Semaphore) -> usize {
    (state.total + state.debt).saturating_sub(permits.available_permits())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::Limit;

    fn limit(dimension: Dimension, remaining: u64) -> Limit {
        let mut l = Limit::new(format!("{dimension:?}").to_lowercase(), dimension);
        l.limit = Some(1_000);
        l.remaining = Some(remaining);
        l
    }

    fn refusal_with(limits: Vec<Limit>) -> RateLimitSignal {
        let mut s = RateLimitSignal::of_status(429);
        s.limits = limits;
        s
    }

    /// One request and 800 tokens.
    fn weight(d: &Dimension) -> u64 {
        match d {
            Dimension::Requests => 1,
            Dimension::Tokens => 800,
            _ => 0,
        }
    }

    #[test]
    fn a_refusal_with_room_in_every_limit_and_no_wait_is_concurrency() {
        let room = refusal_with(vec![
            limit(Dimension::Requests, 40),
            limit(Dimension::Tokens, 5_000),
        ]);
        assert_eq!(refusal(&room, weight, 5), Some(Evidence::RoomInEveryLimit));
        // Room enough for the call exactly.
        let exact = refusal_with(vec![limit(Dimension::Tokens, 800)]);
        assert_eq!(refusal(&exact, weight, 2), Some(Evidence::RoomInEveryLimit));
    }

    #[test]
    fn a_refusal_a_rate_explains_is_not_concurrency() {
        // Tokens short of the call: a tokens refusal.
        let short = refusal_with(vec![
            limit(Dimension::Requests, 40),
            limit(Dimension::Tokens, 799),
        ]);
        assert_eq!(refusal(&short, weight, 5), None);
        // A limit the call names nothing of, spent: a rate refusal.
        let spent = refusal_with(vec![limit(Dimension::InputTokens, 0)]);
        assert_eq!(refusal(&spent, weight, 5), None);
        // A wait named: what a rate limit asks.
        let mut wait = refusal_with(vec![limit(Dimension::Requests, 40)]);
        wait.retry_after = Some(std::time::Duration::from_secs(1));
        assert_eq!(refusal(&wait, weight, 5), None);
        // No limit stated: the header-less regime's.
        assert_eq!(refusal(&refusal_with(Vec::new()), weight, 5), None);
        // Alone in flight: no cap refuses one call.
        let room = refusal_with(vec![limit(Dimension::Requests, 40)]);
        assert_eq!(refusal(&room, weight, 1), None);
        // A 503 with room and no wait: overload (an outage), not a cap.
        let mut overload = room.clone();
        overload.status = 503;
        assert_eq!(refusal(&overload, weight, 32), None);
        // Not a refusal.
        let mut ok = room.clone();
        ok.status = 200;
        assert_eq!(refusal(&ok, weight, 5), None);
    }

    #[test]
    fn a_503_is_not_concurrency() {
        // Room in every limit, no wait, others in flight: an outage's 503
        // is still the rate model's.
        let mut overload = refusal_with(vec![limit(Dimension::Requests, 40)]);
        overload.status = 503;
        assert_eq!(refusal(&overload, weight, 32), None);
    }

    #[test]
    fn a_refusal_caps_at_what_was_in_flight_less_the_refused_call_down_to_its_episodes_floor() {
        let mut cap = Cap::new(None, false);
        assert_eq!(cap.current(), None);
        // An episode opened with 5 in flight: 4, its floor 3.
        assert_eq!(cap.refused(5, true), Some(4));
        // More in flight than the cap (sent before it was learned): no
        // news.
        assert_eq!(cap.refused(7, false), None);
        // Refusals of the calls sent before the cut: down to the floor,
        // not below, however few are left in flight.
        assert_eq!(cap.refused(2, false), Some(3));
        assert_eq!(cap.refused(1, false), None);
        // A call sent after the cut refused: a new episode, half again.
        assert_eq!(cap.refused(3, true), Some(2));
        assert_eq!(cap.refused(1, true), Some(1));
        assert_eq!(cap.refused(0, true), None);
        assert_eq!(cap.current(), Some(1));
    }

    #[test]
    fn an_outage_of_refusals_halves_the_cap_once_a_round() {
        // 32 in flight, every call refused, each refusal read as one more
        // of the calls comes back: the first round ends at 16, not 1.
        let mut cap = Cap::new(None, false);
        let mut last = None;
        for in_flight in (1..=32).rev() {
            last = cap.refused(in_flight, in_flight == 32).or(last);
        }
        assert_eq!(last, Some(16));
        // The next round, 16 sent after that cut: 8.
        for in_flight in (1..=16).rev() {
            last = cap.refused(in_flight, in_flight == 16).or(last);
        }
        assert_eq!(last, Some(8));
    }

    #[test]
    fn a_cap_cut_to_one_is_back_at_32_in_a_round_at_each_cap() {
        let mut cap = Cap::new(None, true);
        // 32 in flight admitted, then an outage cuts the cap to 1.
        assert_eq!(cap.answered(32), None);
        cap.refused(2, true);
        assert_eq!(cap.current(), Some(1));
        let mut calls = 0;
        while cap.current() < Some(32) {
            let at = cap.current().unwrap_or(1);
            cap.answered(at);
            calls += 1;
        }
        // One round of calls at each cap from 1 to 31.
        assert_eq!(calls, (1..32).sum::<u64>());
        // At what the server admitted: probed after the long run again.
        for _ in 1..TUNING.concurrency.probe_after {
            assert_eq!(cap.answered(32), None);
        }
        assert_eq!(cap.answered(32), Some(33));
    }

    #[test]
    fn without_probes_a_cap_climbs_back_to_what_was_admitted_and_no_higher() {
        let mut cap = Cap::new(None, false);
        // 32 in flight admitted, then an outage cuts the cap to 16.
        assert_eq!(cap.answered(32), None);
        assert_eq!(cap.refused(32, true), Some(31));
        for in_flight in (1..31).rev() {
            cap.refused(in_flight, false);
        }
        assert_eq!(cap.current(), Some(16));
        while cap.current() < Some(32) {
            let at = cap.current().unwrap_or(1);
            assert!(cap.answered(at).is_none_or(|to| to == at + 1));
        }
        // Back at what the server admitted, and there it stays.
        for _ in 0..10 * TUNING.concurrency.max_probe_after {
            assert_eq!(cap.answered(32), None);
        }
        assert_eq!(cap.current(), Some(32));
    }

    #[test]
    fn a_configured_cap_is_lowered_but_never_raised_above() {
        let mut cap = Cap::new(Some(3), false);
        assert!(!cap.learned());
        // Not learned: no probe, however long it runs at the cap.
        for _ in 0..1_000 {
            assert_eq!(cap.answered(3), None);
        }
        assert_eq!(cap.refused(3, true), Some(2));
        assert!(cap.learned());
        let run = TUNING.concurrency.probe_after;
        // Below the 3 in flight it was seen to admit, it recovers after a
        // cap's worth of calls at the cap, and no higher than configured.
        assert_eq!(cap.answered(2), None);
        assert_eq!(cap.answered(2), Some(3));
        assert!(!cap.learned());
        for _ in 0..10 * run {
            assert_eq!(cap.answered(3), None);
        }
    }

    #[test]
    fn a_probe_comes_after_a_run_at_the_cap_that_doubles_when_refused() {
        let run = TUNING.concurrency.probe_after;
        let mut cap = Cap::new(None, true);
        assert_eq!(cap.refused(5, true), Some(4));
        // Answers below the cap do not count: it does not bind.
        for _ in 0..10 * run {
            assert_eq!(cap.answered(3), None);
        }
        for _ in 1..run {
            assert_eq!(cap.answered(4), None);
        }
        assert_eq!(cap.answered(4), Some(5));
        // The probe refused: back to the server's cap, and twice the run.
        assert_eq!(cap.refused(5, true), Some(4));
        for _ in 1..2 * run {
            assert_eq!(cap.answered(4), None);
        }
        assert_eq!(cap.answered(4), Some(5));
        assert_eq!(cap.refused(5, true), Some(4));
        for _ in 1..4 * run {
            assert_eq!(cap.answered(4), None);
        }
        assert_eq!(cap.answered(4), Some(5));
        // This probe stands a whole run (the server's cap grew): the next
        // one comes after it, and the run is the shortest again.
        for _ in 1..4 * run {
            assert_eq!(cap.answered(5), None);
        }
        assert_eq!(cap.answered(5), Some(6));
        for _ in 1..run {
            assert_eq!(cap.answered(6), None);
        }
        assert_eq!(cap.answered(6), Some(7));
    }

    #[test]
    fn the_run_doubles_up_to_its_longest() {
        let t = TUNING.concurrency;
        let mut cap = Cap::new(None, true);
        cap.refused(2, true);
        for _ in 0..64 {
            let mut answered = 0;
            while cap.answered(1).is_none() {
                answered += 1;
            }
            assert!(answered < t.max_probe_after);
            cap.refused(2, true);
        }
        assert_eq!(cap.probe_after, t.max_probe_after);
    }

    #[tokio::test]
    async fn a_lowered_cap_takes_back_what_is_held_as_it_comes_back() {
        let limit = Arc::new(InFlight::new(None, false));
        let mut held = Vec::new();
        for _ in 0..6 {
            let permit = Arc::clone(limit.semaphore()).try_acquire_owned();
            let mut permit = limit.hold(permit.unwrap());
            permit.send();
            held.push(permit);
        }
        assert_eq!(limit.held(), 6);
        // Refused with six in flight: a cap of five, one owed.
        assert_eq!(limit.refused(0), Some(5));
        assert_eq!(limit.cap(), Some(5));
        assert_eq!(limit.semaphore().available_permits(), 0);
        held.pop();
        assert_eq!(limit.held(), 5);
        assert_eq!(limit.semaphore().available_permits(), 0);
        held.pop();
        assert_eq!(
            (limit.held(), limit.semaphore().available_permits()),
            (4, 1)
        );
        // A refusal with fewer held lowers it again, from the free permits.
        held.pop();
        assert_eq!(limit.refused(0), Some(2));
        assert_eq!(
            (limit.held(), limit.semaphore().available_permits()),
            (3, 0)
        );
        held.clear();
        assert_eq!(
            (limit.held(), limit.semaphore().available_permits()),
            (0, 2)
        );
        limit.reset();
        assert_eq!(limit.cap(), None);
        assert_eq!(
            limit.semaphore().available_permits(),
            Semaphore::MAX_PERMITS
        );
    }

    #[tokio::test]
    async fn a_probe_adds_a_permit_or_forgives_a_debt() {
        let limit = Arc::new(InFlight::new(None, false));
        let take = || {
            let mut permit = limit.hold(Arc::clone(limit.semaphore()).try_acquire_owned().unwrap());
            permit.send();
            permit
        };
        let mut held: Vec<Permit> = (0..3).map(|_| take()).collect();
        assert_eq!(limit.refused(0), Some(2));
        // One owed; the cap is below the three answered in flight, so it
        // comes back after a round (two calls), forgiving the debt instead
        // of adding a permit.
        assert_eq!(limit.answered(), None);
        assert_eq!(limit.answered(), Some(3));
        assert_eq!(limit.semaphore().available_permits(), 0);
        held.clear();
        assert_eq!(limit.semaphore().available_permits(), 3);
    }
}
