//! From a response's rate-limit signal to adjustments of one key's limiter.
//!
//! Pure arithmetic on `now`, no I/O: [`Adaptive::on_response`] returns one
//! [`Verdict`]: the [`Adjustment`]s to apply, the wait the server asked
//! for, and what asked for each block. Two regimes:
//!
//! - **The server sends rate-limit headers.** Each limit of the scope's
//!   dimension is followed by a [`Series`](super::infer::Series), which
//!   infers from how `remaining` moves against this key's own admissions
//!   whether the server counts a fixed window, a moving window or a
//!   refilling bucket, and how fast it really allows (see
//!   [`infer`](super::infer)). The tightest limit, times a headroom factor,
//!   becomes the bucket's rate, capped by any configured rate; the bucket
//!   holds one request at a time, so requests go evenly spaced. Every
//!   response also lowers the bucket's tokens to what the server says
//!   remains, less this key's requests sent after it and still unanswered,
//!   so the client never sends more than the server says remains; when
//!   nothing remains the key waits for the end of the window (or one unit
//!   of refill).
//! - **The server sends none.** A 429, a 503, or a 403 with `Retry-After`
//!   is a congestion signal (the one definition of
//!   [`RateLimitSignal::is_throttled`]), and the rate is found as TCP finds
//!   a path's capacity: slow start, a cut on each refusal, recovery, then a
//!   hold and a probe whose spacing grows while the server stays the same
//!   (see [`headerless`](super::headerless), whose `Tuning` holds every
//!   threshold). The same regime paces a key that sends headers when a
//!   refusal comes without them: a limiter in front of the server (a proxy,
//!   a WAF) is slower than the headers say, and its rate caps theirs.
//! - **Either way, a server that spaces the key's requests** (a bucket of
//!   one, whose `remaining` is always 0) is read from the gaps between
//!   the key's sends: refusals and admissions bracket its interval, and
//!   once they agree it paces the key, whatever else would (see
//!   [`spacing`](super::spacing)); readings that contradict it let go.
//!
//! Growth counts only time spent sending at the current pace (at most two
//! intervals between responses), never time spent blocked, so a long
//! `Retry-After` does not compound into a burst. A `Retry-After` on a
//! throttled response blocks the key until that instant in both regimes.
//!
//! **A fleet.** Where other processes share the key's limiter (a Redis
//! bucket), each process reads only its own responses, but of one fleet:
//! its grants say where they fell in the fleet's count and what rate the
//! fleet has learned ([`Grant`]). The header regime reads `remaining`
//! against the fleet's count (see [`infer`](super::infer)); the measured
//! send rate is the fleet's; and the header-less regime runs on the one
//! shared rate: a cut comes from the rate the refused request was granted
//! at (so every process refused in one burst asks for the same cut) and
//! names the rate that was too fast ([`Adjustment::Cut`]); growth is a
//! factor the shared state applies to the rate it holds then
//! ([`Adjustment::GrowRate`]), one interval of sending per response, so
//! the fleet grows as one process would; a process that sees the fleet's
//! rate fall well below its own follows the cut another made; and one
//! that joins a fleet that has learned a rate goes on from it, in the
//! fleet's phase, instead of a cold start. A bare refusal on a key whose
//! server speaks is a limiter in front for a fleet's process as for a
//! client alone; a lockout holds the key's shared bucket for the wait a
//! client alone would hold its own for (one probe per wait, instead of
//! every process's calls refused in turn, each cutting the shared rate
//! again); and a block starts the fleet's measured send rate over, which
//! a refusal soon after it does not read from a few sends (the rate
//! granted stands for it).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::headerless::{Admitted, Congestion, Phase};
use super::infer::{Reading, Series, Shape};
use super::scope::DEFAULT_HEADROOM;
use super::spacing::{Spacing, Tuning as SpacingTuning};
use super::tuning::TUNING;
use crate::headers::{Dimension, Limit, RateLimitSignal, MAX_WAIT};
use crate::limiter::{Adjustment, Grant, RequestRate};

/// The slowest rate the header-less regime goes down to.
const MIN_RATE: f64 = TUNING.header_less.min_rate;
/// The fastest rate any regime sets: a server that says more is not
/// believed, and the rate cannot run away.
const MAX_RATE: f64 = 1_000_000.0;
/// The most limits (name and partition) one key follows.
const MAX_SERIES: usize = 32;
/// Requests unanswered for longer than this no longer count as in flight
/// (their caller gave up without telling).
const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(60);

/// The resolution of a `Retry-After` in whole seconds (RFC 9110's
/// delay-seconds): what it says lies within this of the wait meant.
const RETRY_AFTER_RESOLUTION: Duration = Duration::from_secs(1);

/// What one response told a key's model of its server, decided once:
/// the learn step applies it and the retry decision reads its wait; neither
/// re-derives any of it from the response.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// What the key's limiter must record, in order.
    pub(crate) adjustments: Vec<Adjustment>,
    /// The wait a refusal asks of the key, as the model reads it (see
    /// [`Adaptive::server_waits`]).
    pub(crate) server_wait: Option<Duration>,
    /// The wait the refused call itself sits out before it is sent again
    /// (see [`Adaptive::server_waits`]).
    pub(crate) retry_wait: Option<Duration>,
    /// What asked for each [`Adjustment::BlockUntil`] among the
    /// adjustments, by the block's end.
    blocks: Vec<(Instant, BlockCause)>,
}

/// The key's hold and the refused call's wait (see
/// [`Adaptive::server_waits`]).
type Waits = (Option<Duration>, Option<Duration>);

/// What a response's `Retry-After` asks, read in one place
/// ([`Asked::of`]): the model, the learn step and the cap on calls in
/// flight read this, never the header's value itself (events report it as
/// the server wrote it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// No `Retry-After`.
    Nothing,
    /// `Retry-After: 0`: a server that rounds its waits down (its 1 means
    /// at least a second).
    Now,
    /// A wait under [`MAX_WAIT`], believed.
    Wait(Duration),
    /// A wait of a day or more (a value the parser clamped): not believed,
    /// not waited for (see [`RateLimitSignal::believable_retry_after`]).
    BeyondHorizon,
}

impl Asked {
    /// What `signal`'s `Retry-After` asks.
    pub(crate) fn of(signal: &RateLimitSignal) -> Asked {
        match (signal.retry_after, signal.believable_retry_after()) {
            (None, _) => Asked::Nothing,
            (Some(_), None) => Asked::BeyondHorizon,
            (Some(_), Some(wait)) if wait.is_zero() => Asked::Now,
            (Some(_), Some(wait)) => Asked::Wait(wait),
        }
    }

    /// The wait to believe: 0 for [`Asked::Now`].
    pub(crate) fn believable(self) -> Option<Duration> {
        match self {
            Asked::Now => Some(Duration::ZERO),
            Asked::Wait(wait) => Some(wait),
            Asked::Nothing | Asked::BeyondHorizon => None,
        }
    }

    /// Whether it asks for any wait longer than none, believed or not.
    fn some_wait(self) -> bool {
        matches!(self, Asked::Wait(_) | Asked::BeyondHorizon)
    }
}

/// What holds a key blocked until an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockCause {
    /// The wait the response asked for (its `Retry-After`, or the gaps'
    /// reading of it).
    Asked,
    /// A quota the headers say is spent, until its reset.
    SpentQuota,
    /// The header-less regime's own guess of when a lockout ends: nothing
    /// in the response named it.
    Guessed,
}

impl Verdict {
    /// Nothing learned, and the server's wait kept as a block (a scope that
    /// does not adapt still waits where a refusal asks it to).
    fn wait_only(now: Instant, (server_wait, retry_wait): Waits) -> Verdict {
        let mut verdict = Verdict {
            server_wait,
            retry_wait,
            ..Verdict::default()
        };
        if let Some(wait) = server_wait {
            verdict.block(now + wait, BlockCause::Asked);
        }
        verdict
    }

    /// Blocks the key until `until`, for `cause`.
    fn block(&mut self, until: Instant, cause: BlockCause) {
        self.adjustments.push(Adjustment::BlockUntil(until));
        self.blocks.push((until, cause));
    }

    /// What asked for the block until `until` (the response's own wait,
    /// where another block ends at the same instant).
    pub(crate) fn cause_of(&self, until: Instant) -> Option<BlockCause> {
        let causes = || {
            self.blocks
                .iter()
                .filter(move |(u, _)| *u == until)
                .map(|&(_, cause)| cause)
        };
        causes()
            .find(|&cause| cause == BlockCause::Asked)
            .or_else(|| causes().next())
    }
}

/// Per-key learning state.
#[derive(Debug)]
pub(crate) struct Adaptive {
    dimension: Dimension,
    ceiling: Option<RequestRate>,
    burst: Option<u64>,
    headroom: f64,
    /// Per limit (name and partition): what its readings show.
    series: HashMap<(String, Option<String>), Series>,
    /// Requests sent and not yet answered: sequence number and send instant.
    in_flight: VecDeque<InFlight>,
    /// The rate this state last applied (tokens per second), if any.
    applied: Option<f64>,
    /// The capacity this state last applied, if any.
    capacity: Option<u64>,
    /// Requests sent so far.
    sent: u64,
    sends: SendRate,
    /// Responses admitted, for what the server lets through.
    oks: SendRate,
    /// The end of the latest block of a quarter second or more: answers
    /// that come before it were sent before it, and do not start the
    /// count of admissions after it again (see `on_response`).
    idle_until: Option<Instant>,
    /// The instants of this process's latest sends: the rate it sends at
    /// now, without the lag of a second's average while the rate climbs.
    latest_sends: VecDeque<Instant>,
    /// Whether any header-driven rate has been learned.
    header_driven: bool,
    /// Whether the server ever admitted one of this key's requests.
    admitted_before: bool,
    /// The rate the headers last said, times the headroom.
    header_rate: Option<f64>,
    /// Whether a limiter in front of the server refuses without headers:
    /// the header-less regime's rate then caps the headers'. Cleared once
    /// that rate outgrows the headers' (the front let it through).
    front: bool,
    /// Whether the headers were found to contradict themselves (warned
    /// once per key).
    warned: bool,
    /// Whether a wait beyond the horizon was seen (warned once per key).
    warned_horizon: bool,
    congestion: Congestion,
    /// The gaps between this key's admissions: a server that spaces them
    /// (a bucket of one) is paced by them.
    spacing: Spacing,
    /// The interval the gaps paced the key at as of the latest response
    /// (see [`spacing`](super::spacing)); `None` while they pace nothing.
    spaced_by: Option<Duration>,
    /// Where other processes share the key's limiter: when this process
    /// last sent a request granted after another process's grant (the
    /// shared turns moved by more than this process's own since its grant
    /// before, see [`others_before`](Self::others_before)). A gap between
    /// two of its sends is the server's gap only where no other process's
    /// grant fell between them.
    others_sent_at: Option<Instant>,
    /// Where this process's latest grant fell in a shared limiter: its
    /// turns (see [`Grant::shared_turns`]) and its count.
    latest_place: Option<(u64, u64)>,
    /// Whether the latest response stating a limit stated a quota of one:
    /// the server says it spaces the key's requests.
    quota_of_one: bool,
    /// Whether the server has refused with `Retry-After: 0`: it rounds
    /// its waits down, and its `Retry-After: 1` means a second at least
    /// (see [`server_waits`](Self::server_waits)).
    rounds_down: bool,
    /// Refusals read since the last admission: a second in a row is no
    /// bucket's next unit an interval away (see
    /// [`server_waits`](Self::server_waits)).
    refused_in_a_row: u32,
    /// When the two latest refusals were read (the earlier first), and
    /// how long before the latest the one two before it was: a third
    /// refusal within the second the first asked for is no bucket's next
    /// unit either (see [`server_waits`](Self::server_waits)).
    last_refusals: (Option<Instant>, Option<Instant>),
    since_refusals: Option<Duration>,
    /// Where other processes share the key's limiter: its rate as of this
    /// process's latest grant, per second (whoever set it), and the rate a
    /// server last refused, as the process that saw it named it.
    fleet_rate: Option<f64>,
    fleet_too_fast: Option<f64>,
    /// The highest of those rates since the last cut this process made or
    /// followed.
    fleet_peak: Option<f64>,
    /// The window's end this process last told a shared limiter of (see
    /// [`Adjustment::WindowEndsBy`]).
    told_window_end: Option<Instant>,
    /// Where other processes share the key's limiter: the latest place in
    /// its count of an admission this process saw (see
    /// [`fleet_admissions`](Self::fleet_admissions)).
    admitted_count: SharedCount,
}

/// A request sent and not yet answered.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    seq: u64,
    at: Instant,
    /// Where its grant fell in a shared limiter's count, if it has one.
    shared_count: Option<u64>,
    /// The shared limiter's rate when it was granted, per second.
    granted_rate: Option<f64>,
    /// What it spent of the limiter.
    weight: u64,
}

/// A two-slot sliding counter of sends, for the measured send rate: this
/// key's own, or the fleet's where its limiter's count is shared.
#[derive(Debug, Default)]
struct SendRate {
    slot_start: Option<Instant>,
    /// Since when the counter has counted without a gap: less than a slot
    /// of history is scaled up to a rate, not read as one.
    counting_since: Option<Instant>,
    current: u64,
    previous: u64,
    /// The latest shared count seen.
    latest_count: SharedCount,
}

/// The latest place in a shared limiter's count this process saw, if any:
/// what a later grant stands for is read against it.
#[derive(Debug, Default, Clone, Copy)]
struct SharedCount(Option<u64>);

impl SharedCount {
    /// The grants from the latest place seen up to `count` (none where
    /// `count` is not past it), `None` where no place was seen; and
    /// `count` kept as the latest, or as a new scale where it is far
    /// behind (the shared key expired, or was lost with its store).
    fn advance(&mut self, count: u64) -> Option<u64> {
        let since = self.0.map(|latest| count.saturating_sub(latest));
        self.0 = Some(match self.0 {
            Some(latest) if count.saturating_add(COUNT_RESTART) < latest => count,
            latest => latest.map_or(count, |l| l.max(count)),
        });
        since
    }
}

/// The send and admission counters' slot (see `Tuning::rate_slot`).
const SLOT: Duration = TUNING.rate_slot;
/// See `Tuning::shortest_rate_span`.
const SHORTEST_SPAN: Duration = TUNING.shortest_rate_span;
/// A shared count this far behind the latest one seen started again (its
/// key expired or its store restarted): more than the grants a fleet's
/// answers can come back out of order by.
pub(crate) const COUNT_RESTART: u64 = 256;

impl SendRate {
    /// A send at `now`; with a shared count, it stands for every grant
    /// since the latest one this process saw (the fleet's sends).
    fn record(&mut self, now: Instant, shared_count: Option<u64>) {
        self.roll(now);
        self.current +=
            shared_count.map_or(1, |count| self.latest_count.advance(count).unwrap_or(1));
    }

    /// Counts again from nothing, keeping the latest shared count seen: a
    /// block held the key idle, and the sends before it, averaged with
    /// that idle time, would read as sending slowly.
    fn restart(&mut self) {
        *self = SendRate {
            latest_count: self.latest_count,
            ..SendRate::default()
        };
    }

    fn roll(&mut self, now: Instant) {
        let start = *self.slot_start.get_or_insert(now);
        self.counting_since.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= SLOT * 2 {
            self.previous = 0;
            self.current = 0;
            self.slot_start = Some(now);
            self.counting_since = Some(now);
        } else if elapsed >= SLOT {
            self.previous = self.current;
            self.current = 0;
            self.slot_start = Some(start + SLOT);
        }
    }

    /// Sends counted in the last two slots at most.
    fn recent(&mut self, now: Instant) -> u64 {
        self.roll(now);
        self.previous + self.current
    }

    /// How long the counter has counted without a gap, up to `now` (its
    /// roll starts the count where none was).
    fn counted_for(&mut self, now: Instant) -> Duration {
        self.roll(now);
        self.counting_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since))
    }

    /// How long [`per_second`](Self::per_second) averages over: a second,
    /// or less since the counter began.
    fn span(&mut self, now: Instant) -> Duration {
        self.counted_for(now).clamp(SHORTEST_SPAN, SLOT)
    }

    /// Sends per second over the last second (sliding-counter estimate).
    fn per_second(&mut self, now: Instant) -> f64 {
        let counted = self.counted_for(now);
        let Some(start) = self.slot_start else {
            return 0.0;
        };
        if counted < SLOT {
            let span = counted.max(SHORTEST_SPAN).as_secs_f64();
            return (self.previous + self.current) as f64 / span;
        }
        let frac = now.saturating_duration_since(start).as_secs_f64() / SLOT.as_secs_f64();
        self.previous as f64 * (1.0 - frac) + self.current as f64
    }
}

/// Whether the server counted the request a response answers: it was
/// neither throttled nor refused.
fn counted_by_server(signal: &RateLimitSignal) -> bool {
    !signal.is_throttled() && signal.status < 400
}

/// Growth time: the time since the last growth, but at most `intervals`
/// intervals at `per_second`, so time spent blocked or idle does not
/// compound.
fn sending_time(since: Option<Instant>, now: Instant, per_second: f64, intervals: f64) -> f64 {
    let dt = since.map_or(0.0, |g| now.saturating_duration_since(g).as_secs_f64());
    dt.min(intervals / per_second.max(MIN_RATE))
}

/// What a key learned, kept after its state is dropped so that the key
/// comes back paced instead of blind: see [`Adaptive::learned`] and
/// [`Adaptive::resume`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Learned {
    /// The rate applied, tokens per second.
    pub(crate) per_second: f64,
    /// The capacity applied.
    pub(crate) capacity: u64,
    /// How it was learned.
    pub(crate) regime: Regime,
}

/// The regime a rate was learned in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Regime {
    /// From rate-limit headers.
    Headers,
    /// Without headers, never throttled yet (slow start).
    SlowStart,
    /// Without headers, after a throttle: the rate that was too fast.
    Throttled {
        /// The delivered rate that was too fast, tokens per second.
        too_fast: f64,
    },
}

impl Adaptive {
    /// What this key has learned: `None` while it has learned nothing (a
    /// configured ceiling alone is not learned).
    pub(crate) fn learned(&self) -> Option<Learned> {
        let regime = match self.congestion.phase {
            _ if self.header_driven => Regime::Headers,
            Phase::Open => return None,
            Phase::SlowStart => Regime::SlowStart,
            Phase::Steady => Regime::Throttled {
                too_fast: self.congestion.too_fast,
            },
        };
        Some(Learned {
            per_second: self.applied?,
            capacity: self.capacity.unwrap_or(1),
            regime,
        })
    }

    /// Start from what an earlier state of this key learned: its rate and
    /// capacity, and the regime's place (headers are read afresh; the
    /// header-less regime goes on growing or probing from the rate).
    pub(crate) fn resume(&mut self, learned: Learned) {
        self.applied = Some(learned.per_second);
        self.capacity = Some(learned.capacity);
        // What it learned came from a server that admitted the key.
        self.admitted_before = true;
        match learned.regime {
            Regime::Headers => self.header_driven = true,
            Regime::SlowStart => {
                self.congestion = Congestion::resumed(Phase::SlowStart, learned.per_second, 0.0);
            }
            Regime::Throttled { too_fast } => {
                self.congestion = Congestion::resumed(Phase::Steady, learned.per_second, too_fast);
            }
        }
    }

    pub(crate) fn new(
        dimension: Dimension,
        ceiling: Option<RequestRate>,
        burst: Option<u64>,
        headroom: f64,
    ) -> Self {
        Adaptive {
            dimension,
            ceiling,
            burst,
            headroom,
            series: HashMap::new(),
            in_flight: VecDeque::new(),
            applied: ceiling.map(|r| r.per_second_f64()),
            capacity: None,
            sent: 0,
            sends: SendRate::default(),
            oks: SendRate::default(),
            idle_until: None,
            latest_sends: VecDeque::with_capacity(TUNING.latest_sends),
            header_driven: false,
            admitted_before: false,
            admitted_count: SharedCount::default(),
            header_rate: None,
            front: false,
            warned: false,
            warned_horizon: false,
            fleet_rate: None,
            fleet_too_fast: None,
            fleet_peak: None,
            told_window_end: None,
            congestion: Congestion::open(),
            spacing: Spacing::default(),
            quota_of_one: false,
            rounds_down: false,
            refused_in_a_row: 0,
            last_refusals: (None, None),
            since_refusals: None,
            spaced_by: None,
            others_sent_at: None,
            latest_place: None,
        }
    }

    /// A request of this key was sent at `now`; returns its sequence
    /// number, to hand back to [`on_response`](Self::on_response) or
    /// [`on_no_response`](Self::on_no_response).
    /// `grant` is what the key's limiter said of it (where it fell in a
    /// shared count, and the shared rate then), `weight` what it spent.
    /// A grant with no shared count (a limiter only this process uses, or
    /// a shared one's local fallback while its store is down) says nothing
    /// of a fleet's rate.
    pub(crate) fn on_send(&mut self, now: Instant, grant: Grant, weight: u64) -> u64 {
        let shared_count = grant.shared_count;
        let granted_rate = grant.shared_rate.map(|r| r.per_second_f64());
        if shared_count.is_none() {
            self.fleet_rate = None;
            self.fleet_peak = None;
        } else if let Some(rate) = granted_rate {
            self.fleet_rate = Some(rate);
            self.fleet_peak = Some(self.fleet_peak.map_or(rate, |p| p.max(rate)));
        }
        if let Some(too_fast) = grant.shared_too_fast {
            self.fleet_too_fast = Some(too_fast.per_second_f64());
        }
        self.sends.record(now, shared_count);
        if let Some(count) = shared_count {
            if self.others_before(grant.shared_turns.map(|t| (t, count)), weight) {
                self.others_sent_at = Some(now);
            }
        }
        if self.latest_sends.len() == TUNING.latest_sends {
            self.latest_sends.pop_front();
        }
        self.latest_sends.push_back(now);
        self.sent += 1;
        while self
            .in_flight
            .front()
            .is_some_and(|r| now.saturating_duration_since(r.at) > IN_FLIGHT_TIMEOUT)
        {
            self.in_flight.pop_front();
        }
        self.in_flight.push_back(InFlight {
            seq: self.sent,
            at: now,
            shared_count,
            granted_rate,
            weight,
        });
        self.sent
    }

    /// Whether another process's grant may have come between this
    /// process's grant of `weight` at `turns` and `count` of a shared
    /// limiter and its grant before: where the turns moved by more than
    /// `weight` (or went back: the shared key was lost), where the count
    /// moved by more than the turns (a process whose script keeps no turns
    /// granted; the count moves by no more, since a refusal only takes it
    /// back), or where the limiter keeps no turns. A process's first grant
    /// has no gap before it. Keeps this grant's place for the next one.
    fn others_before(&mut self, turns: Option<(u64, u64)>, weight: u64) -> bool {
        let before = std::mem::replace(&mut self.latest_place, turns);
        match (before, turns) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some((turns_before, count_before)), Some((turns, count))) => {
                turns.checked_sub(turns_before) != Some(weight)
                    || count.saturating_sub(count_before) > weight
            }
        }
    }

    /// The request `seq` ended without a response.
    pub(crate) fn on_no_response(&mut self, seq: u64) {
        self.in_flight.retain(|r| r.seq != seq);
    }

    /// Whether the server admitted this key's requests before: its
    /// refusals limit the key, they are not a failure.
    pub(crate) fn server_admits(&self) -> bool {
        self.admitted_before
    }

    /// The rate currently applied, in tokens per second (`None` while
    /// unconstrained).
    pub(crate) fn applied_rate(&self) -> Option<f64> {
        self.applied
    }

    /// The adjustment to `per_second`, capped by the configured ceiling
    /// (which no floor may exceed); `None` when it changes nothing.
    fn rate_adjustment(&mut self, per_second: f64) -> Option<Adjustment> {
        let mut capped = per_second.clamp(f64::MIN_POSITIVE, MAX_RATE);
        if let Some(c) = self.ceiling {
            capped = capped.min(c.per_second_f64());
        }
        if self.front && self.congestion.phase != Phase::Open {
            // The lower of the two limiters: the headers' and the front's.
            capped = capped.min(self.congestion.rate.max(MIN_RATE));
            if let Some(headers) = self.header_rate {
                capped = capped.min(headers);
            }
        }
        let rate = RequestRate::from_per_second_f64(capped).ok()?;
        let per_second = rate.per_second_f64();
        if let Some(applied) = self.applied {
            // Not worth a lock and an event: the same rate to within 1 %
            // (`Tuning::reapply_step`).
            if (per_second - applied).abs() <= applied * TUNING.reapply_step {
                return None;
            }
        }
        self.applied = Some(per_second);
        Some(Adjustment::SetRate(rate))
    }

    /// How many admissions of the server's an admission at `counted` in a
    /// shared limiter's count stands for: the fleet's grants since this
    /// process's previous admission. Every process of a fleet sees only
    /// its share of the answers; a lockout's cycle counted from them alone
    /// read the server's limit as that share of it, and the fleet cut
    /// itself to it. One where the count is this process's alone, and
    /// where it started again (see [`SharedCount`]).
    fn fleet_admissions(&mut self, counted: Option<u64>) -> u64 {
        counted.map_or(1, |count| {
            self.admitted_count.advance(count).map_or(1, |n| n.max(1))
        })
    }

    /// `SetCapacity(capacity)` unless that is the capacity already set.
    /// A configured burst caps every learned capacity, in both regimes.
    fn capacity_adjustment(&mut self, capacity: u64) -> Option<Adjustment> {
        let capacity = self.burst.map_or(capacity, |b| capacity.min(b)).max(1);
        if self.capacity == Some(capacity) {
            return None;
        }
        self.capacity = Some(capacity);
        Some(Adjustment::SetCapacity(capacity))
    }

    /// Learn from a response received at `now` for the request with send
    /// sequence number `seq`.
    pub(crate) fn on_response(
        &mut self,
        now: Instant,
        seq: u64,
        signal: &RateLimitSignal,
        success: bool,
    ) -> Verdict {
        let this = self.in_flight.iter().find(|r| r.seq == seq).copied();
        let counted = this.and_then(|r| r.shared_count);
        let asked = Asked::of(signal);
        // Where what the server says (what is left, the wait it asks for)
        // runs from: the request's send. A server that decides a request
        // some fixed time after it is sent is read exactly: its clock runs
        // that far behind the key's, and a request sent now is decided as
        // far after as this one was. Placed as the answer arrives instead,
        // a bucket that says nothing is left after each admission was sent
        // once a round trip plus an interval rather than once an interval
        // (a GCRA of 17.6 a second with a burst of 2, answered 100 ms after
        // each request, held at 0.71 of its limit), and each refusal held
        // the key a round trip longer than it asked. A shared count is
        // placed now (the other processes' sends are not this process's to
        // place).
        let placed_at = this.filter(|_| counted.is_none()).map(|r| r.at);
        self.in_flight.retain(|r| r.seq != seq);
        let rate_before = self.congestion.rate;
        if counted_by_server(signal) {
            // An answer within a block was sent before it: counted, it
            // would start the count after the block inside it.
            if self.idle_until.is_none_or(|until| now >= until) {
                self.oks.record(now, None);
            }
            self.admitted_before = true;
            // Whichever regime paces, the header-less one keeps count: a
            // limiter in front may take over from the headers.
            let admissions = self.fleet_admissions(counted);
            self.congestion
                .admitted_for(now, admissions, &TUNING.header_less);
        } else if let Some(count) = counted.filter(|_| asked.some_wait()) {
            // Refused with a wait where the count is shared: the fleet's
            // grants before this one went to the server since this
            // process last saw the count, all of them admitted but those
            // refused in the same burst. They are the cycle's too, which
            // the block measures: counted from this process's admissions
            // alone, a cycle the other processes spent read a quarter of
            // the rate (a fixed window of 34 per 11 s, 4 admissions over
            // 11.2 s, and the fleet was cut to 0.35 a second). (Credited
            // at every refusal, bare ones too, the grants refused in a
            // burst read as admitted, and a fleet held header-less
            // windows lower: 4 more of the space missed.)
            if let Some(grants) = self.admitted_count.advance(count.saturating_sub(1)) {
                self.congestion.granted_to_others(grants);
            }
        }
        self.warn_if_beyond_horizon(signal, asked);
        let ahead = self.ahead_of(now, seq, this);
        let mut out = Verdict::default();
        if self.congestion.rate < rate_before * (1.0 - 1e-9) {
            // The end of a lockout took the rate down to the limit it
            // measured: said here, for a fleet's growth goes on from the
            // shared rate, not this process's.
            let shared = this.and_then(|r| r.granted_rate);
            let too_fast = shared.map(|_| self.congestion.too_fast);
            self.lowered_to(self.congestion.rate, too_fast, &mut out.adjustments);
        }
        let limits: Vec<&Limit> = signal
            .limits
            .iter()
            .filter(|l| l.dimension == self.dimension)
            .collect();
        let has_headers = limits.iter().any(|l| l.remaining.is_some());
        if let Some(least) = limits.iter().filter_map(|l| l.limit).min() {
            self.quota_of_one = least == 1;
        }
        if signal.is_throttled() && !has_headers && self.header_driven {
            // Refused without a word by a key whose server speaks: a
            // limiter in front of it, slower than the headers say.
            self.front = true;
        }
        let weight = this.map_or(1, |r| r.weight);
        let header_paced = has_headers
            && self.learn_from_headers(
                now,
                (ahead, counted, weight, placed_at),
                &limits,
                (signal, asked),
                &mut out,
            );
        // The header-less regime paces a key without headers, one whose
        // headers do not say how fast (no reset, no window, a bucket of
        // one: their `remaining` still bounds it), and a limiter in front.
        // A key its gaps show to be spaced is paced by them: the
        // header-less regime waits meanwhile (it would read a refused
        // probe of the spacing as its own ceiling, and cut).
        let spaced = this
            .and_then(|this| self.spaced(seq, this.at, signal))
            .filter(|_| counted.is_none() || self.alone(now));
        self.spaced_by = spaced;
        // The server's wait, read once, with the spacing as of this
        // response: the cut below and the block after read the same.
        self.note_refusal(now, signal, asked);
        (out.server_wait, out.retry_wait) = self.server_waits(signal, asked);
        if spaced.is_none()
            && (self.front || (!header_paced && (has_headers || !self.header_driven)))
        {
            let granted_rate = this.and_then(|r| r.granted_rate);
            self.congestion(now, (seq, granted_rate), signal, success, &mut out);
        }
        if let Some(interval) = spaced {
            // The gaps pace the key from the instants its requests were
            // sent; a `remaining` of 0 applied now, as the response
            // arrives, would start the next interval a response's latency
            // late (a bucket of one says 0 after every admission).
            out.adjustments.retain(|a| {
                !matches!(
                    a,
                    Adjustment::LimitRemaining(0) | Adjustment::LimitRemainingAt(0, _)
                )
            });
            self.pace_every(interval, &mut out.adjustments);
        }
        if let Some(wait) = out.server_wait {
            out.block(placed_at.unwrap_or(now) + wait, BlockCause::Asked);
        }
        if let (Some(this), Some(_)) = (this, counted) {
            if !counted_by_server(signal) {
                // The other processes place their readings on the shared
                // count.
                out.adjustments.push(Adjustment::Uncount(this.weight));
            }
        }
        // A block of a quarter of a second or more holds the key idle: the
        // sends and admissions counted before it would average that idle
        // time into the rate the next cut starts from (a key blocked until
        // a header's reset, then refused a few sends into slow start,
        // measured a quarter of what it sent at). Both counts start again
        // after it.
        let idle = out.adjustments.iter().find_map(|a| match a {
            Adjustment::BlockUntil(at) if at.saturating_duration_since(now) >= SHORTEST_SPAN => {
                Some(*at)
            }
            _ => None,
        });
        if let Some(until) = idle {
            self.oks = SendRate::default();
            if counted.is_some() {
                // A shared count's send rate is the one a cut starts from.
                self.sends.restart();
            }
            self.latest_sends.clear();
            self.idle_until = Some(self.idle_until.map_or(until, |u| u.max(until)));
        }
        out
    }

    /// The verdict on a response this key does not learn from (its scope
    /// does not adapt, or the response describes another bucket): nothing
    /// learned, the request answered, and the server's wait kept as a
    /// block.
    pub(crate) fn unlearned(
        &mut self,
        now: Instant,
        seq: u64,
        signal: &RateLimitSignal,
    ) -> Verdict {
        self.on_no_response(seq);
        let asked = Asked::of(signal);
        self.note_refusal(now, signal, asked);
        Verdict::wait_only(now, self.server_waits(signal, asked))
    }

    /// Whether the refusal `signal`'s wait `wait` is a second rounded up
    /// from a bucket's next unit, as [`server_waits`](Self::server_waits)
    /// reads it.
    fn rounded_up(&self, signal: &RateLimitSignal, wait: Duration) -> bool {
        wait == RETRY_AFTER_RESOLUTION
            && !signal.has_limits()
            && !self.rounds_down
            && self.refused_in_a_row <= 1
            && self.since_refusals.is_none_or(|span| span >= wait)
            && self.congestion.phase == Phase::Steady
    }

    /// What a response shows of the server's waits (see
    /// [`server_waits`](Self::server_waits)): a refusal asking for 0, a
    /// server that rounds them down; the refusals since the last
    /// admission.
    fn note_refusal(&mut self, now: Instant, signal: &RateLimitSignal, asked: Asked) {
        if !signal.is_throttled() {
            if counted_by_server(signal) {
                self.refused_in_a_row = 0;
            }
            return;
        }
        self.refused_in_a_row = self.refused_in_a_row.saturating_add(1);
        let (before_last, last) = self.last_refusals;
        self.since_refusals = before_last.map(|at| now.saturating_duration_since(at));
        self.last_refusals = (last, Some(now));
        if asked == Asked::Now {
            self.rounds_down = true;
        }
    }

    /// The waits a refusal asks, of the key and of the refused call
    /// itself (the same but where said below): its `Retry-After`, believed
    /// (under a day), except where the gaps show a spacer. A `Retry-After`
    /// in whole seconds is then a resolution: a server that spaces the
    /// key every `interval` rounds the few milliseconds it means to a
    /// second (or to 0), and sitting it out would leave a second's sends
    /// unsent on every probe. A wait no more than a second beyond the
    /// gap the spacing asks for next (the interval, doubled after a
    /// refusal) is read as that gap; a fractional one is exact, and a
    /// longer one is something else (a penalty), both believed.
    ///
    /// A `Retry-After: 1` on the first refusal since an admission, stating
    /// no limit, past slow start, is a resolution too, unless the server
    /// has asked for 0 before. (Slow start's overshoot of a window or log
    /// is no unit away: a log of 20 a second that slow start overran,
    /// sent to again two intervals after its refusal, refused again, and
    /// the key held 0.945 of its limit.) A server that rounds its waits
    /// up says 1 for a bucket's
    /// next unit a few milliseconds away, and one that rounds down says 0
    /// for it (its 1 means at least a second). Rounding up, the wait meant
    /// is at most the second, and nothing says it is longer than the
    /// interval of the rate refused: the key is held
    /// [`rounded_up_intervals`] of those, a second at most, while the
    /// refused call sits the whole second out (the second wait returned).
    /// Held
    /// whole, each refusal of a bucket cost a second's traffic (a bucket of
    /// 12 a second with a burst of 3, `Retry-After` alone and rounded up:
    /// 0.917 of its limit over a minute). A window's end a second away is
    /// stated by its quota's headers, where it has any (a fixed window of 3
    /// a second stating its quota and no reset, read so, was refused 1.6 %
    /// of the minute's requests, past the goal); a window that says
    /// nothing but `Retry-After: 1` refuses the key's next send too, and
    /// that second refusal in a row is believed. (The refusals of a burst
    /// sent before the first was read are such a second: fifty calls
    /// refused at once wait it out together, and the key's pace lets
    /// them go.) So is a third refusal within the second the one two
    /// before it asked for, admissions between or not: a key sending past
    /// the server's rate, refused every few sends, is no unit away (a
    /// GCRA of 652 a minute with a burst of 120, whose burst slow start
    /// had spent, refused the key twelve times in 2.7 s, 3.0 % of the
    /// minute's requests; 2.1 % now). A pair within it stands: a log's
    /// probe refused twice in 25 ms, the second read as a second's block,
    /// held a log of 376 per 6 s at 0.922 of its limit over ten minutes.
    ///
    /// [`rounded_up_intervals`]: super::headerless::Tuning::rounded_up_intervals
    pub(crate) fn server_waits(&self, signal: &RateLimitSignal, asked: Asked) -> Waits {
        let Some(wait) = asked.believable().filter(|_| signal.is_throttled()) else {
            return (None, None);
        };
        match self.spaced_by {
            Some(interval)
                if wait.subsec_nanos() == 0 && wait <= interval + RETRY_AFTER_RESOLUTION =>
            {
                (Some(interval), Some(interval))
            }
            // The server asked the whole second of the request it refused,
            // whose retry is the send most likely refused again; the key's
            // other calls go on at its pace.
            _ if self.rounded_up(signal, wait) => {
                let intervals = TUNING.header_less.rounded_up_intervals;
                let shorter = self
                    .applied
                    .filter(|r| r.is_finite() && *r > 0.0)
                    .and_then(|r| Duration::try_from_secs_f64(intervals / r).ok());
                (Some(shorter.map_or(wait, |s| s.min(wait))), Some(wait))
            }
            _ => (Some(wait), Some(wait)),
        }
    }

    /// Reads the gap before the request `seq`, sent at `sent`, and returns
    /// the interval to space the key's sends by where the gaps show a
    /// server that spaces them (see [`spacing`](super::spacing)). A gap
    /// across another process's grant is not read: a fleet's admissions
    /// fall between this process's. (The caller paces by the interval
    /// only where the process spends the key alone.)
    fn spaced(&mut self, seq: u64, sent: Instant, signal: &RateLimitSignal) -> Option<Duration> {
        let t = &if self.quota_of_one {
            SpacingTuning {
                agreeing_refusals: TUNING.spacing.agreeing_refusals_of_one,
                ..TUNING.spacing
            }
        } else {
            TUNING.spacing
        };
        let refused = signal.is_throttled();
        if refused || counted_by_server(signal) {
            // In flight in send order: the oldest unanswered is the front.
            let earlier_unanswered = self.in_flight.front().is_some_and(|r| r.seq < seq);
            let unseen = (earlier_unanswered, self.others_sent_at);
            self.spacing.observe(sent, !refused, unseen, t);
        }
        self.spacing.interval(sent, t)
    }

    /// Whether this process spends the key alone as of `now`: no other
    /// process's grant came between two of its own for a while (see
    /// [`Tuning::alone_after`](super::tuning::Tuning::alone_after)), or
    /// ever.
    fn alone(&self, now: Instant) -> bool {
        self.others_sent_at
            .is_none_or(|at| now.saturating_duration_since(at) >= TUNING.alone_after)
    }

    /// Paces the key at one send per `interval`, whatever else paced it.
    fn pace_every(&mut self, interval: Duration, out: &mut Vec<Adjustment>) {
        // Exactly the interval, not within a percent of it: a bucket of
        // one refuses any gap shorter. Nor a nanosecond longer: a timer
        // wakes on its millisecond tick, rounded up, so a gap a hair over
        // a whole millisecond is sent a whole millisecond later.
        let mut rate = RequestRate::every(interval);
        if let (Some(c), Ok(r)) = (self.ceiling, rate.as_ref()) {
            if c.per_second_f64() < r.per_second_f64() {
                rate = Ok(c);
            }
        }
        if let Ok(rate) = rate {
            if self.applied != Some(rate.per_second_f64()) {
                self.applied = Some(rate.per_second_f64());
                out.push(Adjustment::SetRate(rate));
            }
        }
        out.extend(self.capacity_adjustment(1));
    }

    /// Requests sent after the one with send number `seq` (`this`, while
    /// it was in flight) that the server had not counted when it answered
    /// it: this key's own still unanswered, and, where other processes
    /// share the key's limiter, what the fleet sends in the time this one
    /// took to be answered, at the fleet's measured rate. (Not every grant
    /// after it: a shared bucket books turns ahead, and a turn booked is
    /// not a request sent.)
    fn ahead_of(&mut self, now: Instant, seq: u64, this: Option<InFlight>) -> u64 {
        let own = self.in_flight.iter().filter(|r| r.seq > seq).count() as u64;
        let Some(this) = this.filter(|r| r.shared_count.is_some()) else {
            return own;
        };
        let answered_in = now.saturating_duration_since(this.at).as_secs_f64();
        let fleet = (self.sends.per_second(now) * answered_in).ceil();
        own.max(fleet.min(u64::MAX as f64) as u64)
    }

    /// Where the key's limiter is shared and has learned a rate: a process
    /// that has learned nothing yet joins the fleet at it; one that sees
    /// the fleet's rate fall below the highest it saw since the last cut
    /// knows a process cut it on a refusal (the shared rate falls only so:
    /// growth only raises it), and follows: the requests sent so far belong
    /// to that burst, the rate the cut came from was too fast, and a cold
    /// start is over.
    fn follow_the_fleet(&mut self) {
        let c = self.congestion;
        let Some(fleet) = self.fleet_rate else { return };
        match c.phase {
            Phase::Open if self.ceiling.is_none() => {
                // Joining a fleet that has learned a rate: go on from it
                // where the fleet is (its slow start, or past a refusal of
                // the rate it names), rather than overwrite it with a cold
                // start.
                let phase = match self.fleet_too_fast {
                    Some(_) => Phase::Steady,
                    None => Phase::SlowStart,
                };
                self.congestion =
                    Congestion::resumed(phase, fleet, self.fleet_too_fast.unwrap_or(0.0));
                self.applied = Some(fleet);
            }
            Phase::Open => {}
            Phase::SlowStart | Phase::Steady => {
                if !self
                    .fleet_peak
                    .is_some_and(|p| fleet < p * TUNING.fleet_cut)
                {
                    return;
                }
                // What the cut came from, as the process that cut measured
                // it: the fleet's rate before its cut's factor.
                let t = &TUNING.header_less;
                let factor = if c.phase == Phase::Steady {
                    t.later_decrease
                } else {
                    t.first_decrease
                };
                self.congestion = Congestion::resumed(Phase::Steady, fleet, fleet / factor);
                self.congestion.decreased_at = Some(self.sent);
                self.congestion.grown_at = c.grown_at;
                self.applied = Some(fleet);
                self.fleet_peak = Some(fleet);
            }
        }
    }

    /// The header regime: each limit's series says how to pace; the
    /// tightest wins. `ahead` is what [`ahead_of`](Self::ahead_of) says of
    /// the request, with where its grant fell in a shared count and what
    /// it spent. Returns whether the headers said how fast (or were a late
    /// answer, which says nothing new).
    fn learn_from_headers(
        &mut self,
        now: Instant,
        (ahead, counted, weight, placed_at): (u64, Option<u64>, u64, Option<Instant>),
        limits: &[&Limit],
        (signal, asked): (&RateLimitSignal, Asked),
        out: &mut Verdict,
    ) -> bool {
        self.warn_if_contradictory(limits);
        let admitted = counted_by_server(signal);
        // The tightest limit's rate, and that rate times the share of it
        // used (see `share_of`).
        let mut per_second: Option<(f64, f64)> = None;
        let mut stale = false;
        let mut left: Option<u64> = None;
        let mut until: Option<Instant> = None;
        // Whether every limit is a bucket of one this process alone
        // spends: the key's own bucket then times each send from the
        // response before it.
        let mut spacer = counted.is_none();
        for limit in limits {
            let Some(remaining) = limit.remaining else {
                continue;
            };
            let key = (limit.name.clone(), limit.partition.clone());
            if self.series.len() >= MAX_SERIES && !self.series.contains_key(&key) {
                // A server naming a new limit on every response must not
                // grow a key without bound: start over.
                self.series.clear();
            }
            let series = self.series.entry(key).or_default();
            let reading = Reading {
                at: now,
                limit: limit.limit.filter(|&l| l > 0),
                remaining,
                ahead,
                // A reset a day or more away (clamped by the parser) is not
                // believed, like a `Retry-After` that long.
                reset: limit.reset.filter(|r| *r < MAX_WAIT),
                window: limit.window,
                admitted,
                counted,
                weight,
                waits: !admitted && matches!(asked, Asked::Wait(_)),
            };
            if series.is_stale(&reading) {
                // A late answer from an older window: no news.
                stale = true;
                continue;
            }
            // A quota of one says only whether a request was admitted,
            // which the header-less regime reads.
            let pace = series
                .observe(reading)
                .filter(|p| !series.says_nothing_of_pace(p));
            spacer &= series.never_left_any();
            let here = remaining.saturating_sub(ahead);
            left = Some(left.map_or(here, |l| l.min(here)));
            if let Some(pace) = pace {
                let used = pace.per_second * self.share_of(pace.shape, counted.is_some());
                per_second = Some(match per_second {
                    Some((rate, least)) if least <= used => (rate, least),
                    _ => (pace.per_second, used),
                });
                if let Some(at) = pace.exhausted_until {
                    until = Some(until.map_or(at, |u| u.max(at)));
                }
            }
        }
        if let Some((rate, used)) = per_second {
            self.header_driven = true;
            // Nothing left, ever, the next send waits a whole interval
            // from the one before (`LimitRemainingAt(0, ..)` below), on
            // the timer's tick.
            let paced = if spacer && left == Some(0) {
                on_the_tick(used, rate, TUNING.spacing.tick)
            } else {
                used
            };
            self.header_rate = Some(paced);
            out.adjustments.extend(self.rate_adjustment(paced));
            out.adjustments.extend(self.capacity_adjustment(1));
        }
        // What is left is placed at `placed_at` (see `on_response`), less
        // the requests sent after it (`ahead`), and the refill since is the
        // key's. A server that writes what is left with its answer, after
        // serving the call (an LLM API), has counted the requests ahead
        // already and refilled meanwhile: at a steady pace the two offset
        // each other.
        if let Some(left) = left {
            out.adjustments.push(match placed_at {
                Some(at) => Adjustment::LimitRemainingAt(left, at),
                None => Adjustment::LimitRemaining(left),
            });
        }
        // Where the key is shared, the window's end as this process reads
        // it, for every process to wait for the tightest (only where one
        // limit is read: a block of one is not a bound on another's).
        if let ([limit], Some(_)) = (limits, counted) {
            let key = (limit.name.clone(), limit.partition.clone());
            let end = self.series.get(&key).and_then(Series::window_end);
            if let Some(end) = end.filter(|&e| e > now && self.told_window_end != Some(e)) {
                self.told_window_end = Some(end);
                out.adjustments.push(Adjustment::WindowEndsBy(end));
            }
        }
        // A spent quota whose reset is a day or more away is not believed
        // (see `RateLimitSignal::believable_retry_after`).
        if let Some(at) = until.filter(|&at| at > now && at < now + MAX_WAIT) {
            out.block(at, BlockCause::SpentQuota);
        }
        per_second.is_some() || stale
    }

    /// The share of a limit's rate the key uses, by the shape its readings
    /// show: the headroom, which by default stays clear of an edge the
    /// readings place only roughly (a bucket's refill measured from the
    /// key's own sends, resets rounded to whole seconds). A moving window
    /// that only this process spends, settled (every reading for as long
    /// as the window has shown it), is paced from an upper bound on its
    /// length, and waits for the oldest admission inside it to leave when
    /// nothing is left: clear of its edge already, it keeps only what a
    /// headroom set below the default asks beyond it. (With the default's
    /// 3 % taken off it as well, a sliding log of 8 a second read with a
    /// window of 1.046 s held 0.91 of its limit over a minute, and 0.93
    /// without. Exempt before it settled, a bucket of 120 a minute read as
    /// a window of 57.6 s for a reading or two was paced past its refill
    /// and refused.) Where other processes share the count (`shared`),
    /// their admissions fall between this one's and bracket the window
    /// less tightly: the headroom stays (without it, a fleet of four on a
    /// window of 100 per 5 s held 0.92 of it at one phase of the server's
    /// clock).
    fn share_of(&self, shape: Shape, shared: bool) -> f64 {
        match shape {
            Shape::MovingWindow { settled: true, .. } if !shared => {
                (self.headroom / DEFAULT_HEADROOM).min(1.0)
            }
            Shape::MovingWindow { .. } | Shape::Stated | Shape::FixedWindow | Shape::Bucket => {
                self.headroom
            }
        }
    }

    /// A wait of a day or more (a `Retry-After`, a reset) is not believed;
    /// say so once per key.
    fn warn_if_beyond_horizon(&mut self, signal: &RateLimitSignal, asked: Asked) {
        if self.warned_horizon {
            return;
        }
        let beyond = asked == Asked::BeyondHorizon
            || signal
                .limits
                .iter()
                .any(|l| l.reset.is_some_and(|r| r >= MAX_WAIT));
        if beyond {
            self.warned_horizon = true;
            tracing::warn!(
                target: "reqwest_pace",
                "the server asked for a wait of a day or more; not believed, not waited for"
            );
        }
    }

    /// A limit of 0, or more remaining than the limit: the headers cannot
    /// all be true. The series reads them conservatively; say so once.
    fn warn_if_contradictory(&mut self, limits: &[&Limit]) {
        if self.warned {
            return;
        }
        let contradictory = limits.iter().any(|l| match (l.limit, l.remaining) {
            (Some(0), _) => true,
            (Some(limit), Some(remaining)) => remaining > limit,
            _ => false,
        });
        if contradictory {
            self.warned = true;
            tracing::warn!(
                target: "reqwest_pace",
                "rate-limit headers contradict themselves (a limit of 0, or more remaining than the limit); pacing on what remains"
            );
        }
    }

    /// The header-less regime. `seq` is the request's send number, and
    /// `granted_rate` the shared limiter's rate when it was granted.
    fn congestion(
        &mut self,
        now: Instant,
        (seq, granted_rate): (u64, Option<f64>),
        signal: &RateLimitSignal,
        success: bool,
        out: &mut Verdict,
    ) {
        self.follow_the_fleet();
        if signal.is_throttled() {
            self.refused(now, (seq, granted_rate), out);
        } else if success && self.front && self.congestion.phase == Phase::Open {
            // A front limiter's refusal that measured no rate: the headers
            // pace, not a cold start.
        } else if success {
            self.grow(now, &mut out.adjustments);
            let same = 1.0 + TUNING.header_less.same_ceiling;
            let outgrown = self
                .header_rate
                .is_some_and(|h| self.congestion.rate > h * same);
            // Sent past the rate the front refused: the key is paced at the
            // lower of the two, so a header pace below the front's (a
            // window's spread near its end) lets the regime's rate grow
            // past the headers' while the key sends at neither. Left on
            // that, the front was forgotten within a second of its
            // refusal, and the next window's spread ran into it again (a
            // log of 84 per 12 s behind a leaky bucket of 10 a second:
            // 9.4 % refused over ten minutes; now 0.86 %).
            let sent_past_front = || self.sending_now(now) > self.congestion.too_fast * same;
            if self.front && outgrown && sent_past_front() {
                // The front limiter let the probe past the headers' rate
                // and its own: it no longer binds.
                self.front = false;
                self.congestion = Congestion::open();
                out.adjustments
                    .extend(self.header_rate.and_then(|h| self.rate_adjustment(h)));
            }
        }
    }

    /// A refusal: the rate that was too fast is what the key delivered, and
    /// no more than the server was seen to admit in the last second. The
    /// wait the server asked for (`out.server_wait`) holds the key too.
    fn refused(
        &mut self,
        now: Instant,
        (seq, granted_rate): (u64, Option<f64>),
        out: &mut Verdict,
    ) {
        let t = &TUNING.header_less;
        let c = self.congestion;
        // A server that has never admitted the key is failing, not
        // limiting: cut once (from slow start), it is left to the retry
        // policy's backoff and budget; cut on, the rate would go to nothing.
        // Not where the key's limiter is shared (`granted_rate`): a
        // process sees its own admissions only, and the fleet's others
        // may have been admitted. (Read as failing, a process never
        // admitted by a GCRA of 27 per 10 s that counts refusals went on
        // at the fleet's rate, each call refused and failed at once as
        // the retry budget ran out, and kept the fleet locked out: 2 of
        // 518 requests admitted in a minute.)
        let failing = c.phase == Phase::Steady && !self.admitted_before && granted_rate.is_none();
        if c.decreased_at.is_some_and(|at| seq <= at) || failing {
            // Part of the burst that caused the last cut, or failing.
            return;
        }
        let measured = match granted_rate {
            Some(_) => self.sends.per_second(now),
            None => self.sending_now(now),
        };
        // Where the count is shared, a fleet's sends over less than the
        // shortest span a rate is read over (a few sends after a block)
        // are no rate: the one granted stands for it.
        let sampled = self.sends.recent(now) as f64 >= t.min_sample
            && (granted_rate.is_none() || self.sends.counted_for(now) >= SHORTEST_SPAN);
        // Where the key's limiter is shared, from the rate in force when
        // the refused request was granted: every process refused in the
        // same burst then asks for the same decrease, and the decreases do
        // not compound.
        let granted_at = granted_rate.or(self.applied);
        let delivered = match (sampled && measured >= t.min_sample, granted_at) {
            (true, at) => at.map_or(measured, |a| a.min(measured)),
            // Too few sends to measure (a slow key, or a limiter in front
            // refusing the headers' pace at once): the rate applied.
            (false, Some(at)) if c.phase != Phase::Open || self.front => at,
            // A key's first requests, or one request's retries: the retry's
            // backoff paces those.
            (false, _) => return,
        };
        let admitted = self.admitted(now, &c, granted_rate);
        let rate = self
            .congestion
            .cut(now, self.sent, (delivered, admitted), t);
        if let Some(wait) = out.server_wait {
            self.congestion.blocked_for(now, wait, t);
        }
        // The block may have measured a lower rate than the cut (see
        // `Congestion::blocked_for`).
        let rate = rate.min(self.congestion.rate);
        self.lowered_to(rate, granted_rate.map(|_| delivered), &mut out.adjustments);
        out.adjustments.extend(self.capacity_adjustment(1));
        out.adjustments.push(Adjustment::LimitRemaining(0));
        if let Some(wait) = self.congestion.lockout_wait(now, t) {
            out.block(now + wait, BlockCause::Guessed);
        }
        // The rate sent at from here on is measured from the sends after
        // this refusal: a span across the block it brings (a `Retry-After`,
        // a lockout's wait) would read the block as sending slowly, and the
        // next refusal would cut from that.
        self.latest_sends.clear();
    }

    /// The rate went down to `rate`. Where the key's limiter is shared
    /// (`too_fast`, the rate refused, is then given), a cut that names the
    /// rate refused, for the others.
    fn lowered_to(&mut self, rate: f64, too_fast: Option<f64>, out: &mut Vec<Adjustment>) {
        match too_fast.map(RequestRate::from_per_second_f64) {
            Some(Ok(too_fast)) => {
                if let Some(Adjustment::SetRate(to)) = self.rate_adjustment(rate) {
                    out.push(Adjustment::Cut { to, too_fast });
                }
                self.fleet_peak = Some(rate);
            }
            _ => out.extend(self.rate_adjustment(rate)),
        }
    }

    /// What the server let through lately, as a cut of `c` reads it: this
    /// process's admissions, where they are all it spends (its own key, or
    /// a shared one, `granted_rate`, that it spends alone), and enough of
    /// them to measure. In slow start that
    /// is an average over a ramp, and the rate it ended at is that average
    /// over the ramp's share. Steady, only while climbing to slow start's
    /// guess.
    fn admitted(
        &mut self,
        now: Instant,
        c: &Congestion,
        granted_rate: Option<f64>,
    ) -> Option<Admitted> {
        let t = &TUNING.header_less;
        let measures = (c.phase != Phase::Steady || c.climbing())
            && (granted_rate.is_none() || self.alone(now))
            && self.oks.recent(now) as f64 >= t.min_sample;
        if !measures {
            return None;
        }
        let average = self.oks.per_second(now);
        let ramp = match c.phase {
            Phase::Open | Phase::SlowStart => t.ramp_share(self.oks.span(now)),
            Phase::Steady => 1.0,
        };
        // A ramp ends no higher than the rate the key's limiter applied.
        let applied = self.applied.unwrap_or(f64::INFINITY);
        Some(Admitted {
            average,
            at_end: (average / ramp).min(applied.max(average)),
        })
    }

    /// The rate this process sends at now: its latest sends over their
    /// span, up to now (a key that stopped sending is not sending fast).
    fn sending_now(&self, now: Instant) -> f64 {
        let (Some(&first), n) = (self.latest_sends.front(), self.latest_sends.len()) else {
            return 0.0;
        };
        let span = now.saturating_duration_since(first).as_secs_f64();
        if n < 2 || span <= 0.0 {
            return 0.0;
        }
        // n sends span n - 1 intervals, and the time since the last one is
        // part of the next.
        let last = self
            .latest_sends
            .back()
            .map_or(span, |&l| now.saturating_duration_since(l).as_secs_f64());
        (n - 1) as f64 / (span - last).max(span * (n - 1) as f64 / n as f64)
    }

    /// A success: slow start, recovery or probe.
    ///
    /// Where the limiter is shared, the fleet's rate grows, whoever set it:
    /// this process asks the shared state for its growth as a factor of
    /// the rate held then (no process's growth overwrites another's), one
    /// interval of sending per response, as a lone process's responses
    /// would.
    fn grow(&mut self, now: Instant, out: &mut Vec<Adjustment>) {
        let t = &TUNING.header_less;
        let c = self.congestion;
        if c.phase == Phase::Open && self.ceiling.is_some() {
            // A configured ceiling is the starting point, not a cold start.
            return;
        }
        let own = (c.rate > 0.0).then_some(c.rate).or(self.applied);
        let shared = self.fleet_rate.filter(|_| c.phase != Phase::Open);
        let current = shared.or(own).unwrap_or(t.cold_start);
        let (fleet, alone) = TUNING.growth_intervals;
        let intervals = if shared.is_some() { fleet } else { alone };
        let dt = sending_time(c.grown_at, now, current, intervals);
        let rate = self
            .congestion
            .grow(now, current, dt, t)
            .clamp(MIN_RATE, MAX_RATE);
        match shared {
            Some(base) if rate > base => {
                // The recovery stops at its target; growth beyond it (slow
                // start, the probe) at the ceiling.
                let mut at_most = if c.recovering(base) {
                    c.target()
                } else {
                    MAX_RATE
                };
                if let Some(ceiling) = self.ceiling {
                    at_most = at_most.min(ceiling.per_second_f64());
                }
                if let Ok(at_most) = RequestRate::from_per_second_f64(at_most) {
                    self.applied = Some(rate.min(at_most.per_second_f64()));
                    out.push(Adjustment::grow_rate(rate / base, at_most));
                }
            }
            Some(_) => {}
            None => out.extend(self.rate_adjustment(rate)),
        }
        out.extend(self.capacity_adjustment(1));
        if c.phase == Phase::Open {
            // The key's first request went alone and was just answered:
            // the next one is a whole interval of the cold start away, not
            // at once (a bucket of one would refuse it).
            out.push(Adjustment::LimitRemaining(0));
            if self.header_rate.is_some() {
                // Taking over from the headers' pace (a bucket of one
                // whose readings say nothing of it): a refusal of a
                // request sent at that pace, still on its way, names no
                // rate of slow start's. (Cut for it, a bucket of 124 a
                // second answering 20 ms after each request held 0.19 of
                // its limit.)
                self.congestion.decreased_at = Some(self.sent);
            }
        }
    }
}

/// The least share of the `limit` a pace on the timer's tick keeps in
/// reserve: a bucket of one refuses any gap shorter than its interval, and
/// the gaps a server sees vary with the path by more than a paused clock
/// shows.
const LEAST_TICK_HEADROOM: f64 = 0.01;

/// The pace for `rate`, a share of the `limit` read, as a timer that wakes
/// on its `tick` sends it, where the server says nothing is left after
/// each request (a bucket of one): each send then waits a whole interval
/// from the send before it, on the timer, which rounds every wait up
/// to its next tick. The gaps are whole ticks, and the pace falls to the
/// next whole tick's (a pace of 11.2 ms sends every 12 ms, 0.93 of the
/// rate meant, where a limit of 10.8 ms allowed 11). So the pace is
/// `rate`'s interval rounded down to whole ticks, where that still keeps
/// [`LEAST_TICK_HEADROOM`] of the limit; elsewhere `rate` itself, which the
/// timer rounds as before (never slower than asked). Rates of more than
/// one a tick, and figures that are not positive and finite, are kept.
fn on_the_tick(rate: f64, limit: f64, tick: Duration) -> f64 {
    let tick = tick.as_secs_f64();
    let sound = rate.is_finite() && limit.is_finite() && rate > 0.0 && limit >= rate;
    if !sound || tick <= 0.0 || rate * tick >= 1.0 {
        return rate;
    }
    // A hair under whole ticks counts as whole: a rate's interval is held
    // in whole nanoseconds.
    let ticks = |interval: f64| interval / tick;
    let shortest = (ticks(1.0 / (limit * (1.0 - LEAST_TICK_HEADROOM))) - 1e-6)
        .ceil()
        .max(1.0);
    let meant = (ticks(1.0 / rate) + 1e-6).floor();
    if meant < shortest {
        return rate;
    }
    // A rate's interval is its nanoseconds rounded up: a hair faster, so
    // that it is the whole ticks, not a nanosecond more (which the timer
    // would round up a whole tick).
    1.0 / (meant * tick) * (1.0 + 1e-12)
}

#[cfg(test)]
impl Adaptive {
    /// [`on_response`](Self::on_response)'s adjustments alone.
    fn on_response_adjustments(
        &mut self,
        now: Instant,
        seq: u64,
        signal: &RateLimitSignal,
        success: bool,
    ) -> Vec<Adjustment> {
        self.on_response(now, seq, signal, success).adjustments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0.97 of 92.2 a second is a gap of 11.18 ms, which a millisecond
    /// timer sends every 12 ms (0.90 of the limit); 11 ms is still slower
    /// than the limit's 10.85 ms by more than the least headroom, and is
    /// a rate whose interval is 11 ms to the nanosecond. Where rounding
    /// down would leave less headroom (a limit of 50 a second, 20 ms), or
    /// be slower than asked, the rate asked is kept; so are slow rates,
    /// rates of several a millisecond, and figures that make no pace.
    #[test]
    fn a_pace_is_rounded_down_to_whole_ticks_where_the_limit_leaves_room() {
        let ms = Duration::from_millis(1);
        let interval = |per_second: f64| {
            RequestRate::from_per_second_f64(per_second)
                .expect("a rate")
                .interval()
        };
        assert_eq!(interval(on_the_tick(92.2 * 0.97, 92.2, ms)), ms * 11);
        assert_eq!(interval(on_the_tick(9.7, 10.0, ms)), ms * 103);
        for k in 1..=200 {
            // Every whole tick's rate holds its interval exactly.
            let limit = 1_000.0 / (f64::from(k) * 0.97);
            let paced = on_the_tick(limit * 0.97 * 0.999, limit, ms);
            assert_eq!(interval(paced), ms * k, "{k}");
        }
        assert_eq!(on_the_tick(48.5, 50.0, ms), 48.5);
        assert_eq!(on_the_tick(388.0, 400.0, ms), 388.0, "never slower");
        assert_eq!(on_the_tick(969.5, 999.5, ms), 969.5, "never slower");
        assert_eq!(on_the_tick(1_940.0, 2_000.0, ms), 1_940.0);
        assert_eq!(on_the_tick(50.0, 40.0, ms), 50.0, "a rate above the limit");
        assert_eq!(on_the_tick(0.0, 40.0, ms), 0.0);
        assert!(on_the_tick(f64::NAN, 40.0, ms).is_nan());
        assert_eq!(on_the_tick(40.0, f64::INFINITY, ms), 40.0);
        assert_eq!(on_the_tick(40.0, 50.0, Duration::ZERO), 40.0);
    }

    fn signal(status: u16, limits: Vec<Limit>) -> RateLimitSignal {
        RateLimitSignal {
            limits,
            ..RateLimitSignal::of_status(status)
        }
    }

    fn requests(limit: u64, remaining: u64, reset_s: u64) -> Limit {
        Limit::new("requests", Dimension::Requests)
            .with_limit(limit)
            .with_remaining(remaining)
            .with_reset(Duration::from_secs(reset_s))
    }

    fn fresh() -> Adaptive {
        Adaptive::new(Dimension::Requests, None, None, 1.0)
    }

    /// The rate a shared limiter's cut in `adj` goes to.
    fn cut_in(adj: &[Adjustment]) -> Option<f64> {
        adj.iter().find_map(|a| match a {
            Adjustment::Cut { to, .. } => Some(to.per_second_f64()),
            _ => None,
        })
    }

    fn rate_in(adj: &[Adjustment]) -> Option<f64> {
        adj.iter().find_map(|a| match a {
            Adjustment::SetRate(r) => Some(r.per_second_f64()),
            _ => None,
        })
    }

    #[test]
    fn a_stated_window_gives_the_rate() {
        let mut a = fresh();
        let now = Instant::now();
        let limit = Limit::new("default", Dimension::Requests)
            .with_limit(600)
            .with_remaining(600)
            .with_window(Duration::from_secs(60));
        let adj = a.on_response_adjustments(now, a.sent + 1, &signal(200, vec![limit]), true);
        assert_eq!(rate_in(&adj), Some(10.0));
    }

    #[test]
    fn the_remaining_quota_is_spread_until_a_distant_reset() {
        let mut a = fresh();
        let now = Instant::now();
        // GitHub-like: 5000 an hour, but only 100 left for the next 1000 s.
        let first = requests(5000, 4999, 3600);
        a.on_response_adjustments(now, 1, &signal(200, vec![first]), true);
        // 2600 s on, the same window (its reset instant has not moved).
        let later = requests(5000, 100, 1000);
        let adj = a.on_response_adjustments(
            now + Duration::from_secs(2600),
            2,
            &signal(200, vec![later]),
            true,
        );
        // Spread over the time left less a reset's resolution (1 s).
        assert_eq!(rate_in(&adj), Some(100.0 / 999.0));
        assert!(adj.contains(&Adjustment::LimitRemaining(100)));
    }

    #[test]
    fn a_stale_response_from_an_older_window_is_ignored() {
        let mut a = fresh();
        let t0 = Instant::now();
        a.on_response_adjustments(t0, 1, &signal(200, vec![requests(100, 90, 60)]), true);
        // A new window starts 60 s later.
        let t1 = t0 + Duration::from_secs(61);
        let adj = a.on_response_adjustments(t1, 2, &signal(200, vec![requests(100, 99, 60)]), true);
        assert!(adj.contains(&Adjustment::LimitRemaining(99)), "{adj:?}");
        // A response from the old window arrives late, saying 3 are left
        // with a reset that has nearly passed: it lowers and blocks nothing.
        let adj = a.on_response_adjustments(
            t1 + Duration::from_secs(2),
            3,
            &signal(200, vec![requests(100, 3, 0)]),
            true,
        );
        assert!(adj.is_empty(), "{adj:?}");
        // Within the new window, what remains is spread until its end.
        let t4 = t1 + Duration::from_secs(4);
        let adj = a.on_response_adjustments(t4, 4, &signal(200, vec![requests(100, 97, 56)]), true);
        assert!(adj.contains(&Adjustment::LimitRemaining(97)), "{adj:?}");
        assert_eq!(rate_in(&adj).map(|r| (r * 55.0).round()), Some(97.0));
    }

    #[test]
    fn an_exhausted_quota_with_a_distant_reset_blocks_until_it() {
        let mut a = fresh();
        let now = Instant::now();
        let adj = a.on_response_adjustments(now, 1, &signal(200, vec![requests(100, 0, 30)]), true);
        assert!(adj.contains(&Adjustment::BlockUntil(now + Duration::from_secs(30))));
    }

    #[test]
    fn every_block_says_what_asked_for_it() {
        // A spent quota's reset.
        let mut a = fresh();
        let now = Instant::now();
        let v = a.on_response(now, 1, &signal(200, vec![requests(100, 0, 30)]), true);
        let reset = now + Duration::from_secs(30);
        assert_eq!(v.cause_of(reset), Some(BlockCause::SpentQuota));
        assert_eq!(v.server_wait, None);
        // A header-less lockout: admitted in slow start, refused, then
        // refused again with nothing admitted between.
        let mut a = fresh();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut at = t0;
        for _ in 0..20 {
            let seq = a.on_send(at, Grant::default(), 1);
            a.on_response(at + ms(1), seq, &signal(200, vec![]), true);
            at += ms(50);
        }
        let mut guessed = None;
        for _ in 0..4 {
            let seq = a.on_send(at, Grant::default(), 1);
            let v = a.on_response(at + ms(1), seq, &signal(429, vec![]), false);
            assert_eq!(v.server_wait, None);
            guessed = guessed.or(v.blocks.first().copied());
            at += ms(50);
        }
        let (until, cause) = guessed.expect("a lockout blocks the key");
        assert_eq!(cause, BlockCause::Guessed);
        assert!(until > t0, "{until:?}");
    }

    #[test]
    fn a_configured_ceiling_caps_the_learned_rate() {
        let mut a = Adaptive::new(
            Dimension::Requests,
            Some(RequestRate::per_second(5).unwrap()),
            None,
            1.0,
        );
        let now = Instant::now();
        let limit = Limit::new("p", Dimension::Requests)
            .with_limit(100)
            .with_window(Duration::from_secs(1));
        let adj = a.on_response_adjustments(now, 1, &signal(200, vec![limit]), true);
        // Already at the ceiling: nothing to change.
        assert_eq!(rate_in(&adj), None);
        assert_eq!(a.applied_rate(), Some(5.0));
    }

    #[test]
    fn a_configured_burst_caps_the_header_less_regime_too() {
        let mut a = Adaptive::new(
            Dimension::Requests,
            Some(RequestRate::per_second(100).unwrap()),
            Some(1),
            1.0,
        );
        let t0 = Instant::now();
        for i in 0..100 {
            a.on_send(t0 + Duration::from_millis(10 * i), Grant::default(), 1);
        }
        let now = t0 + Duration::from_secs(1);
        let adj = a.on_response_adjustments(now, a.sent, &signal(429, vec![]), false);
        // 0.7 × 100/s would allow a burst of 14; the configured 1 holds.
        assert!(rate_in(&adj).is_some(), "{adj:?}");
        assert!(
            !adj.iter()
                .any(|x| matches!(x, Adjustment::SetCapacity(c) if *c > 1)),
            "{adj:?}"
        );
    }

    /// A bucket of one (an interval of 50 ms) whose headers say `limit: 1,
    /// remaining: 0` after every admission. Before its gaps pace the key,
    /// that `remaining` empties the key's bucket; once they do, it does
    /// not: applied as the response arrives, it would start the next
    /// interval a response's latency after the send the gaps count from.
    #[test]
    fn a_spaced_key_is_not_emptied_by_a_remaining_of_nothing() {
        let mut a = fresh();
        let t0 = Instant::now();
        let one = |status| signal(status, vec![requests(1, 0, 1)]);
        let respond = |a: &mut Adaptive, ms: u64, ok: bool| {
            let at = t0 + Duration::from_millis(ms);
            let seq = a.on_send(at, Grant::default(), 1);
            let status = if ok { 200 } else { 429 };
            a.on_response_adjustments(at + Duration::from_millis(1), seq, &one(status), ok)
        };
        let first = respond(&mut a, 0, true);
        assert!(first.contains(&Adjustment::LimitRemaining(0)), "{first:?}");
        for (ms, ok) in [(40, false), (100, true), (145, false), (200, true)] {
            respond(&mut a, ms, ok);
        }
        let mut at = 200;
        for _ in 0..4 {
            at += 60;
            respond(&mut a, at, true);
        }
        let paced = respond(&mut a, at + 60, true);
        assert!(a.spacing.interval(t0, &TUNING.spacing).is_some(), "spaced");
        assert!(!paced.contains(&Adjustment::LimitRemaining(0)), "{paced:?}");
    }

    /// A key stating a quota of one, admitted every 60 ms and refused at
    /// 59 ms (the bracket 59..60 ms, narrow): `(adaptive, what the last
    /// response taught)` after that refusal, carrying `retry_after`.
    fn spacer_of_one(retry_after: Option<Duration>) -> (Adaptive, Vec<Adjustment>, Instant) {
        spacer_stating(1, retry_after)
    }

    /// The same, the headers stating a quota of `quota`; with the instant
    /// the refusal was answered.
    fn spacer_stating(
        quota: u64,
        retry_after: Option<Duration>,
    ) -> (Adaptive, Vec<Adjustment>, Instant) {
        spacer_granted(quota, retry_after, |_| Grant::default())
    }

    /// The same, the `k`-th request (from 0) granted as `grant` says.
    fn spacer_granted(
        quota: u64,
        retry_after: Option<Duration>,
        grant: impl Fn(u64) -> Grant,
    ) -> (Adaptive, Vec<Adjustment>, Instant) {
        let mut a = fresh();
        let t0 = Instant::now();
        let mut k = 0;
        let mut respond = |a: &mut Adaptive, ms: u64, ok: bool| {
            let at = t0 + Duration::from_millis(ms);
            let seq = a.on_send(at, grant(k), 1);
            k += 1;
            let mut one = signal(if ok { 200 } else { 429 }, vec![requests(quota, 0, 1)]);
            if !ok {
                one.retry_after = retry_after;
            }
            a.on_response_adjustments(at, seq, &one, ok)
        };
        for ms in [0, 60, 120, 180, 240] {
            respond(&mut a, ms, true);
        }
        let taught = respond(&mut a, 299, false);
        (a, taught, t0 + Duration::from_millis(299))
    }

    /// On a limiter processes share, a process whose grants follow one
    /// another in the shared turns spends the key alone, and its gaps are
    /// the server's: it is paced by them as a key of its own is. Where
    /// another process's grant came between every two of its own, or the
    /// limiter keeps no turns, its gaps pace nothing.
    #[test]
    fn a_process_alone_on_a_shared_limiter_is_paced_by_its_gaps() {
        let backoff = Duration::from_millis(120);
        let alone = |k: u64| Grant::counted(k + 1).with_turns(Some(k + 1));
        let (a, _, _) = spacer_granted(1, None, alone);
        assert_eq!(a.spaced_by, Some(backoff), "alone");
        // The other process's grants were refused, and taken off the
        // count: the count moves by one, the turns by two.
        let among_others = |k: u64| Grant::counted(k + 1).with_turns(Some(2 * k + 2));
        let (a, _, _) = spacer_granted(1, None, among_others);
        assert_eq!(a.spaced_by, None, "another process's grant between");
        let (a, _, _) = spacer_granted(1, None, |k| Grant::counted(k + 1));
        assert_eq!(a.spaced_by, None, "no turns kept");
        // A process whose script keeps no turns granted between: the
        // count moved by two, the turns by one.
        let older_script = |k: u64| Grant::counted(2 * k + 2).with_turns(Some(k + 1));
        let (a, _, _) = spacer_granted(1, None, older_script);
        assert_eq!(a.spaced_by, None, "granted by a script that keeps no turns");
    }

    /// A process alone on a shared limiter reads what the server admitted
    /// from its own admissions, as a key of its own does: they are all the
    /// key spends. Among other processes they are a share of it, and
    /// measure nothing.
    #[test]
    fn a_process_alone_on_a_shared_limiter_measures_its_admissions() {
        let fleet = RequestRate::per_second(20).expect("a rate");
        for (step, measures) in [(1, true), (2, false)] {
            let mut a = fresh();
            let t0 = Instant::now();
            let mut at = t0;
            for k in 0..40 {
                at = t0 + Duration::from_millis(50 * k);
                let turns = step * (k + 1);
                let grant = Grant::counted(k + 1)
                    .with_turns(Some(turns))
                    .with_rate(Some(fleet));
                let seq = a.on_send(at, grant, 1);
                a.on_response_adjustments(at, seq, &signal(200, vec![]), true);
            }
            let c = a.congestion;
            assert_ne!(c.phase, Phase::Steady);
            let admitted = a.admitted(at, &c, Some(fleet.per_second_f64()));
            assert_eq!(
                admitted.is_some(),
                measures,
                "turns {step} apart: {admitted:?}"
            );
        }
    }

    #[test]
    fn a_quota_of_one_is_paced_by_its_gaps_from_the_first_refusal() {
        let (mut a, taught, refused_at) = spacer_of_one(None);
        // Refused, the key backs off a doubled gap (see
        // `spacing::Tuning::backoff_doublings`) ...
        let backoff = Duration::from_millis(120);
        assert_eq!(a.spaced_by, Some(backoff));
        let every = |gap| RequestRate::every(gap).expect("a rate");
        assert!(
            taught.contains(&Adjustment::SetRate(every(backoff))),
            "{taught:?}"
        );
        // ... and once admitted again is paced at exactly the gap admitted,
        // not a nanosecond over: a timer rounds a deadline up to its
        // millisecond.
        let at = refused_at + backoff;
        let seq = a.on_send(at, Grant::default(), 1);
        let admitted =
            a.on_response_adjustments(at, seq, &signal(200, vec![requests(1, 0, 1)]), true);
        let sixty = every(Duration::from_millis(60));
        assert_eq!(a.spaced_by, Some(Duration::from_millis(60)));
        assert!(
            admitted.contains(&Adjustment::SetRate(sixty)),
            "{admitted:?}"
        );
        // Stating a quota above one, a refusal alone does not pace it.
        let (a, taught, _) = spacer_stating(2, None);
        assert_eq!(a.spaced_by, None);
        assert!(!taught.contains(&Adjustment::SetRate(sixty)), "{taught:?}");
    }

    #[test]
    fn a_whole_second_retry_after_on_a_spacer_is_its_interval() {
        // The interval, doubled after the refusal (see
        // `spacing::Tuning::backoff_doublings`).
        let backoff = Duration::from_millis(120);
        for (retry_after, read) in [
            // Rounded up or down to whole seconds: a resolution.
            (Duration::from_secs(1), backoff),
            (Duration::ZERO, backoff),
            // Exact, or a penalty beyond the resolution: believed.
            (Duration::from_millis(20), Duration::from_millis(20)),
            (Duration::from_secs(2), Duration::from_secs(2)),
        ] {
            let (a, taught, refused_at) = spacer_of_one(Some(retry_after));
            let mut refused = signal(429, vec![requests(1, 0, 1)]);
            refused.retry_after = Some(retry_after);
            assert_eq!(
                a.server_waits(&refused, Asked::of(&refused)).0,
                Some(read),
                "{retry_after:?}"
            );
            let blocks: Vec<_> = taught
                .iter()
                .filter_map(|a| match a {
                    Adjustment::BlockUntil(until) => Some(*until),
                    _ => None,
                })
                .collect();
            assert_eq!(blocks, [refused_at + read], "{taught:?}");
        }
    }

    /// A refusal answered 30 ms after its send, asking for 100 ms: the key
    /// is held until 100 ms after the send (the server's wait runs from
    /// when it decided, and the next request is decided as long after its
    /// send), not 100 ms after the answer; and the learn step is told so.
    #[test]
    fn a_retry_after_runs_from_the_send() {
        let mut a = fresh();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let seq = a.on_send(t0, Grant::default(), 1);
        let mut refused = signal(429, vec![]);
        refused.retry_after = Some(ms(100));
        let taught = a.on_response(t0 + ms(30), seq, &refused, false);
        assert!(
            taught
                .adjustments
                .contains(&Adjustment::BlockUntil(t0 + ms(100))),
            "{taught:?}"
        );
        assert_eq!(taught.server_wait, Some(ms(100)));
        assert_eq!(taught.cause_of(t0 + ms(100)), Some(BlockCause::Asked));
        // An answer that asks nothing blocks nothing.
        let seq = a.on_send(t0 + ms(200), Grant::default(), 1);
        let taught = a.on_response(t0 + ms(230), seq, &signal(200, vec![]), true);
        assert_eq!(taught.server_wait, None);
        assert!(taught.blocks.is_empty(), "{taught:?}");
    }

    #[test]
    fn a_retry_after_off_a_spacer_is_believed() {
        let a = fresh();
        let mut refused = signal(429, vec![]);
        refused.retry_after = Some(Duration::from_secs(1));
        assert_eq!(
            a.server_waits(&refused, Asked::of(&refused)).0,
            Some(Duration::from_secs(1))
        );
        let mut admitted = signal(200, vec![]);
        admitted.retry_after = Some(Duration::from_secs(1));
        assert_eq!(
            a.server_waits(&admitted, Asked::of(&admitted)).0,
            None,
            "only a refusal asks a wait"
        );
    }

    /// A `Retry-After: 1` on a refusal that states no limit, from a server
    /// that never asked for 0, past slow start, is a second rounded up:
    /// the key is held two intervals of the rate refused, and the refused
    /// call sits the second out. Ending slow start (its overshoot is no
    /// unit away), refused again before an admission or a third time
    /// within the second, by a server that once asked for 0 (it rounds
    /// down), or stating a limit, the second is believed.
    #[test]
    fn a_second_rounded_up_holds_the_key_two_intervals() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let second = Duration::from_secs(1);
        let refusal = |wait: Duration, limits| {
            let mut refused = signal(429, limits);
            refused.retry_after = Some(wait);
            refused
        };
        let respond = |a: &mut Adaptive, at: u64, answer: &RateLimitSignal| {
            let at = t0 + ms(at);
            let seq = a.on_send(at, Grant::default(), 1);
            a.on_response(at, seq, answer, answer.status == 200)
        };
        let admitted = signal(200, vec![]);
        let believed = (Some(second), Some(second));
        // Two intervals of the rate the key is paced at now.
        let two_intervals = |a: &Adaptive| {
            let rate = a.applied.expect("a header-less key is paced");
            Duration::from_secs_f64(TUNING.header_less.rounded_up_intervals / rate)
        };
        // A key whose slow start a refusal asking `first` ended, admitted
        // again after it.
        let past_slow_start = |first: Duration| {
            let mut a = fresh();
            respond(&mut a, 0, &admitted);
            let v = respond(&mut a, 100, &refusal(first, vec![]));
            respond(&mut a, 1_200, &admitted);
            (a, (v.server_wait, v.retry_wait))
        };
        let (mut a, ended) = past_slow_start(second);
        assert_eq!(ended, believed);
        let two = two_intervals(&a);
        assert!(two < second, "{two:?}");
        let v = respond(&mut a, 1_300, &refusal(second, vec![]));
        assert_eq!((v.server_wait, v.retry_wait), (Some(two), Some(second)));
        // Refused again with nothing admitted between: no bucket's unit.
        let v = respond(&mut a, 1_350, &refusal(second, vec![]));
        assert_eq!((v.server_wait, v.retry_wait), believed);
        // Admitted between, a second refusal within the second reads as
        // the first did; a third within it (a key sending past the
        // server's rate, refused every few sends) is believed.
        let (mut a, _) = past_slow_start(second);
        respond(&mut a, 1_300, &refusal(second, vec![]));
        respond(&mut a, 1_400, &admitted);
        let two = two_intervals(&a);
        let v = respond(&mut a, 1_500, &refusal(second, vec![]));
        assert_eq!((v.server_wait, v.retry_wait), (Some(two), Some(second)));
        respond(&mut a, 1_600, &admitted);
        let v = respond(&mut a, 1_700, &refusal(second, vec![]));
        assert_eq!((v.server_wait, v.retry_wait), believed);
        // A server that asked for 0 once rounds its waits down.
        let (mut a, _) = past_slow_start(Duration::ZERO);
        let v = respond(&mut a, 1_300, &refusal(second, vec![]));
        assert_eq!((v.server_wait, v.retry_wait), believed);
        // A refusal stating its quota: the second is its window's end.
        let (mut a, _) = past_slow_start(second);
        let v = respond(&mut a, 1_300, &refusal(second, vec![requests(3, 0, 1)]));
        assert_eq!((v.server_wait, v.retry_wait), believed);
    }

    #[test]
    fn header_less_429s_decrease_once_per_burst_and_recover() {
        let mut a = fresh();
        let t0 = Instant::now();
        let mut seqs = Vec::new();
        for i in 0..40 {
            seqs.push(a.on_send(t0 + Duration::from_millis(25 * i), Grant::default(), 1));
        }
        let now = t0 + Duration::from_secs(1);
        // Forty sends in the last second; a burst of 429s for ten of them.
        let adj = a.on_response_adjustments(now, seqs[30], &signal(429, vec![]), false);
        let decreased = rate_in(&adj).unwrap();
        assert!((decreased - 28.0).abs() < 1.0, "{decreased}");
        for &seq in &seqs[31..] {
            let adj = a.on_response_adjustments(now, seq, &signal(429, vec![]), false);
            assert!(rate_in(&adj).is_none(), "one decrease per burst");
        }
        // Success climbs back towards 95 % of the 40/s that was too fast,
        // by the share of the recovery time spent sending (at most two
        // intervals at the current rate per response).
        let interval = Duration::from_secs_f64(1.0 / decreased);
        let adj =
            a.on_response_adjustments(now + interval, seqs[39] + 1, &signal(200, vec![]), true);
        let grown = rate_in(&adj).unwrap();
        let expected = decreased + (38.0 - decreased) * interval.as_secs_f64() / 0.5;
        assert!((grown - expected).abs() < 0.5, "{grown} vs {expected}");
    }

    /// A process of a fleet that the server has never admitted, on a
    /// shared limiter whose rate the fleet set at 8 a second, is refused
    /// by a limiter that counts refusals: it cuts the fleet's rate on
    /// each refusal after its last cut, as an admitted one would. Its own
    /// admissions are not the fleet's, so it cannot read the server as
    /// failing. (Read as failing, it cut once and went on at 8 a second,
    /// each call refused and failed as the retry budget ran out, and kept
    /// the fleet locked out.)
    #[test]
    fn a_process_of_a_fleet_never_admitted_still_cuts_the_shared_rate() {
        let mut a = fresh();
        let t0 = Instant::now();
        let fleet = RequestRate::per_second(8).expect("a rate");
        let mut cuts = Vec::new();
        let mut at = t0;
        for k in 1..=6u64 {
            let grant = Grant::counted(4 * k).with_rate(Some(fleet));
            let seq = a.on_send(at, grant, 1);
            at += Duration::from_millis(125);
            let adj = a.on_response_adjustments(at, seq, &signal(429, vec![]), false);
            cuts.extend(cut_in(&adj));
        }
        assert!(cuts.len() >= 3, "{cuts:?}");
        assert!(cuts.windows(2).all(|w| w[1] < w[0]), "{cuts:?}");
    }

    /// A process of a fleet admitted five times in the first 0.4 s of a
    /// window the fleet then spends (its shared count reaches 300 by
    /// 3 s) is refused with a wait of 7.5 s: the block measures what the
    /// fleet was let through over the cycle, 300 per 10.5 s, not this
    /// process's five admissions (which read a few a second, and the
    /// fleet's rate was cut to a quarter of the window's).
    #[test]
    fn a_block_on_a_shared_limiter_measures_the_fleets_grants() {
        let mut a = fresh();
        let t0 = Instant::now();
        let fleet = RequestRate::per_second(100).expect("a rate");
        let mut last = Vec::new();
        for k in 0..5u64 {
            let at = t0 + Duration::from_millis(100 * k);
            let seq = a.on_send(at, Grant::counted(1 + 4 * k).with_rate(Some(fleet)), 1);
            a.on_response_adjustments(at, seq, &signal(200, vec![]), true);
        }
        let at = t0 + Duration::from_secs(3);
        let seq = a.on_send(at, Grant::counted(300).with_rate(Some(fleet)), 1);
        let refused = RateLimitSignal {
            retry_after: Some(Duration::from_millis(7_500)),
            ..signal(429, vec![])
        };
        last.extend(a.on_response_adjustments(at, seq, &refused, false));
        let cut = cut_in(&last);
        let window = 300.0 / 10.5;
        assert!(cut.is_some_and(|to| to >= window * 0.9), "{last:?}");
    }

    #[test]
    fn growth_does_not_compound_across_a_long_block() {
        let mut a = fresh();
        let t0 = Instant::now();
        let seq = a.on_send(t0, Grant::default(), 1);
        // The first success starts slow start at the cold-start rate.
        let adj = a.on_response_adjustments(t0, seq, &signal(200, vec![]), true);
        assert_eq!(rate_in(&adj), Some(TUNING.header_less.cold_start));
        // 2 s later (a Retry-After block, say) one success grows the rate
        // by at most two intervals of slow start, not 2^8.
        let later = t0 + Duration::from_secs(2);
        let seq = a.on_send(later, Grant::default(), 1);
        let adj = a.on_response_adjustments(later, seq, &signal(200, vec![]), true);
        let grown = rate_in(&adj).unwrap();
        let t = TUNING.header_less;
        let most = t.cold_start * 2f64.powf(0.2 / t.slow_start_doubling.as_secs_f64());
        assert!((grown - most).abs() < 0.01, "{grown} vs {most}");
    }

    /// A refusal's `Retry-After` holds the key for a second; the next
    /// refusal, soon after the block, is cut from the rate sent since the
    /// block, not from an average across it (which reads the block as
    /// sending slowly and cuts a 40/s key to a few a second).
    #[test]
    fn the_rate_refused_after_a_block_is_measured_after_it() {
        let mut a = fresh();
        let t0 = Instant::now();
        let mut refused = signal(429, vec![]);
        refused.retry_after = Some(Duration::from_secs(1));
        // Forty a second for a second, then a refusal that blocks for 1 s.
        let mut at = t0;
        for _ in 0..40 {
            let seq = a.on_send(at, Grant::default(), 1);
            a.on_response_adjustments(at, seq, &signal(200, vec![]), true);
            at += Duration::from_millis(25);
        }
        let seq = a.on_send(at, Grant::default(), 1);
        let first = rate_in(&a.on_response_adjustments(at, seq, &refused, false)).unwrap();
        // After the block, five sends at the rate it was cut to (the
        // applied rate recovers; these go no faster), then a refusal: what
        // they were sent at was too fast.
        at += Duration::from_secs(1);
        let interval = Duration::from_secs_f64(1.0 / first);
        for _ in 0..5 {
            let seq = a.on_send(at, Grant::default(), 1);
            a.on_response_adjustments(at, seq, &signal(200, vec![]), true);
            at += interval;
        }
        let seq = a.on_send(at, Grant::default(), 1);
        let second = rate_in(&a.on_response_adjustments(at, seq, &refused, false)).unwrap();
        let t = TUNING.header_less;
        assert!(
            second >= 0.9 * first * t.first_decrease,
            "cut to {second} from {first}"
        );
    }

    /// A header's reset holds a new key for most of a second; slow start
    /// then sends five requests in 0.3 s (a bucket of one stating its
    /// quota, each response saying nothing is left) and the fifth is
    /// refused. The cut starts from what was admitted after the block,
    /// not from an average over the second that reads the block as
    /// admitting slowly (which had cut a key sending 14 a second to 2.9),
    /// also where a request sent before the block is answered within it.
    #[test]
    fn a_cut_after_a_header_block_measures_the_admissions_after_it() {
        for late_answer in [false, true] {
            let mut a = fresh();
            let t0 = Instant::now();
            let seq = a.on_send(t0, Grant::default(), 1);
            let earlier = a.on_send(t0, Grant::default(), 1);
            let quota = |remaining| signal(200, vec![requests(135, remaining, 1)]);
            let adj = a.on_response_adjustments(t0, seq, &quota(0), true);
            if late_answer {
                // A request sent before the block, answered within it.
                a.on_response_adjustments(
                    t0 + Duration::from_millis(500),
                    earlier,
                    &signal(200, vec![]),
                    true,
                );
            }
            let blocked = adj.iter().find_map(|a| match a {
                Adjustment::BlockUntil(at) => Some(*at),
                _ => None,
            });
            assert!(
                blocked.is_some_and(|at| at >= t0 + Duration::from_millis(500)),
                "{adj:?}"
            );
            let mut at = t0 + Duration::from_millis(880);
            for gap in [100, 88, 78, 70] {
                let seq = a.on_send(at, Grant::default(), 1);
                a.on_response_adjustments(at, seq, &signal(200, vec![]), true);
                at += Duration::from_millis(gap);
            }
            let seq = a.on_send(at, Grant::default(), 1);
            let cut = rate_in(&a.on_response_adjustments(at, seq, &signal(429, vec![]), false));
            let sent = 4.0 / 0.336;
            let t = TUNING.header_less;
            assert!(
                cut.is_none_or(|cut| cut >= 0.9 * sent * t.first_decrease),
                "cut to {cut:?} from {sent}, late answer {late_answer}"
            );
        }
    }

    /// A response 30 ms after its send says 5 remain, with two requests
    /// sent after it still unanswered: 3 were left when the request was
    /// sent, and the refill since is the key's. A response to a request
    /// the key has no record of is placed as it arrives.
    #[test]
    fn what_is_left_is_placed_at_the_send() {
        let mut a = fresh();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let seq = a.on_send(t0, Grant::default(), 1);
        a.on_send(t0 + ms(5), Grant::default(), 1);
        a.on_send(t0 + ms(10), Grant::default(), 1);
        let five_left = signal(200, vec![requests(100, 5, 60)]);
        let adj = a.on_response_adjustments(t0 + ms(30), seq, &five_left, true);
        assert!(
            adj.contains(&Adjustment::LimitRemainingAt(3, t0)),
            "{adj:?}"
        );
        let adj = a.on_response_adjustments(t0 + ms(40), 99, &five_left, true);
        assert!(adj.contains(&Adjustment::LimitRemaining(5)), "{adj:?}");
    }

    #[test]
    fn a_bare_503_is_congestion_too() {
        let mut a = fresh();
        let t0 = Instant::now();
        let seqs: Vec<u64> = (0..20)
            .map(|i| a.on_send(t0 + Duration::from_millis(50 * i), Grant::default(), 1))
            .collect();
        let now = t0 + Duration::from_secs(1);
        let adj = a.on_response_adjustments(now, seqs[19], &signal(503, vec![]), false);
        assert!(rate_in(&adj).is_some_and(|r| r < 20.0), "{adj:?}");
        assert!(adj.contains(&Adjustment::LimitRemaining(0)));
    }

    #[test]
    fn a_new_limit_name_on_every_response_does_not_grow_the_key() {
        let mut a = fresh();
        let now = Instant::now();
        for i in 0..1_000u64 {
            let seq = a.on_send(now, Grant::default(), 1);
            let limit = Limit::new(format!("bucket-{i}"), Dimension::Requests)
                .with_limit(10)
                .with_remaining(5)
                .with_reset(Duration::from_secs(1));
            a.on_response_adjustments(now, seq, &signal(200, vec![limit]), true);
        }
        assert!(a.series.len() <= MAX_SERIES, "{}", a.series.len());
        assert!(a.in_flight.is_empty());
    }

    proptest::proptest! {
        /// Whatever a server says, in whatever order: no panic, and every
        /// rate set is positive, finite and at most the cap.
        #[test]
        fn no_server_makes_the_rate_run_away(
            responses in proptest::collection::vec(
                (
                    proptest::sample::select(vec![200u16, 403, 429, 503]),
                    proptest::option::of(0u64..u64::MAX),
                    proptest::option::of(proptest::prop_oneof![0u64..100, 0u64..u64::MAX]),
                    0u64..100_000,
                    proptest::option::of(0u64..1_000_000),
                    0u64..5_000,
                ),
                1..60,
            )
        ) {
            let mut a = fresh();
            let mut now = Instant::now();
            for (status, limit, remaining, reset_ms, window_s, dt_ms) in responses {
                now += Duration::from_millis(dt_ms);
                let seq = a.on_send(now, Grant::default(), 1);
                let mut l = Limit::new("requests", Dimension::Requests)
                    .with_reset(Duration::from_millis(reset_ms));
                l.limit = limit;
                l.remaining = remaining;
                l.window = window_s.map(Duration::from_secs);
                let adj = a.on_response_adjustments(now, seq, &signal(status, vec![l]), status == 200);
                for x in adj {
                    if let Adjustment::SetRate(r) = x {
                        let r = r.per_second_f64();
                        proptest::prop_assert!(r.is_finite() && r > 0.0 && r <= MAX_RATE, "{r}");
                    }
                }
            }
        }
    }
}
