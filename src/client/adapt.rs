//! From a response's rate-limit signal to adjustments of one key's limiter.
//!
//! Pure arithmetic on `now`, no I/O: [`Adaptive::on_response`] returns the
//! [`Adjustment`]s to apply. Two regimes:
//!
//! - **The server sends rate-limit headers.** Each limit of the layer's
//!   dimension implies a sustained rate `limit / window`. The window is the
//!   one stated (IETF `w=`), or else estimated from the longest reset seen
//!   for that limit (right after a window starts, the reset *is* the
//!   window), less a second of rounding. When the reset is far enough away to be
//!   meaningful (at least [`SPREAD_MIN_RESET`]; below that, the one-second
//!   rounding of most reset headers dominates), the remaining quota is also
//!   spread evenly until the reset: `remaining / reset`. The tightest of
//!   these, times a headroom factor, becomes the bucket's rate, capped by
//!   any configured rate. Within a window `remaining` only ever lowers the
//!   tokens; only a response from a newer window (its reset instant later
//!   than the known one by more than half a window) may raise them, so a
//!   stale response arriving late cannot undo a newer one.
//! - **The server sends nothing but 429s.** Then the rate follows AIMD in
//!   the manner of AWS SDK adaptive retry and TCP: a 429 without
//!   `Retry-After` (for a request sent after the previous decrease, so one
//!   burst of 429s counts once) multiplies the rate by [`DECREASE`] the
//!   first time, starting from the measured send rate, and by
//!   [`LATER_DECREASE`] after that. After the first decrease the rate
//!   doubles every 250 ms of success (slow start) until the next 429; after
//!   later ones it grows linearly, by [`INCREASE_PER_SECOND`] of the rate at
//!   the decrease per second, past it to probe for more.
//!
//! A `Retry-After` on a 429 or 503 blocks the key until that instant in both
//! regimes, and the key then resumes at its rate, not all at once: a key
//! with no rate yet resumes at the rate it was sending at, one request at a
//! time, and ramps up by slow start.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::headers::{Dimension, Limit, RateLimitSignal};
use crate::limiter::{Adjustment, Rate};

/// Resets shorter than this are not used to spread the remaining quota.
pub(crate) const SPREAD_MIN_RESET: Duration = Duration::from_secs(5);
/// The multiplicative decrease on the first header-less 429 (from an
/// unknown rate, where the measured send rate may be far above the limit).
pub(crate) const DECREASE: f64 = 0.7;
/// The decrease on later 429s, once the rate is near the limit: shallow
/// enough that the dip stays within what a server's burst absorbs.
pub(crate) const LATER_DECREASE: f64 = 0.85;
/// In slow start the rate doubles this often while requests succeed.
const SLOW_START_DOUBLING: Duration = Duration::from_millis(250);
/// Additive increase, as a share of the rate at the last decrease, per
/// second of success.
pub(crate) const INCREASE_PER_SECOND: f64 = 0.15;
/// The slowest rate AIMD goes down to (one request per 10 s).
const MIN_RATE: f64 = 0.1;
/// How far ahead a burst may run: the learned capacity is the rate times
/// this, at least 1 and at most the largest `remaining` seen.
const BURST_SPAN: Duration = Duration::from_secs(1);

/// Where the header-less regime stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing learned: the configured ceiling, or no limit at all.
    Open,
    /// After the first throttle: the rate doubles per second of success
    /// until the next throttle.
    SlowStart,
    /// After a later throttle: the rate grows linearly.
    Avoidance,
}

/// Per-key learning state.
#[derive(Debug)]
pub(crate) struct Adaptive {
    dimension: Dimension,
    ceiling: Option<Rate>,
    burst: Option<u64>,
    headroom: f64,
    /// Per limit name: estimated window and the newest window's reset.
    windows: HashMap<String, WindowState>,
    max_remaining: u64,
    /// The rate this state last applied (tokens per second), if any.
    applied: Option<f64>,
    /// The capacity this state last applied, if any.
    capacity: Option<u64>,
    /// AIMD: the send sequence number at the last decrease (requests sent
    /// up to it belong to the burst that caused it) and the rate it started
    /// from.
    last_decrease: Option<(u64, f64)>,
    /// Requests sent so far.
    sent: u64,
    phase: Phase,
    last_increase: Option<Instant>,
    sends: SendRate,
    /// Whether any header-driven rate has been learned.
    header_driven: bool,
}

#[derive(Debug, Clone, Copy)]
struct WindowState {
    window: Duration,
    reset_at: Option<Instant>,
}

/// A two-slot sliding counter of sends, for the measured send rate.
#[derive(Debug, Default)]
struct SendRate {
    slot_start: Option<Instant>,
    current: u64,
    previous: u64,
}

const SLOT: Duration = Duration::from_secs(1);

impl SendRate {
    fn record(&mut self, now: Instant) {
        self.roll(now);
        self.current += 1;
    }

    fn roll(&mut self, now: Instant) {
        let start = *self.slot_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= SLOT * 2 {
            self.previous = 0;
            self.current = 0;
            self.slot_start = Some(now);
        } else if elapsed >= SLOT {
            self.previous = self.current;
            self.current = 0;
            self.slot_start = Some(start + SLOT);
        }
    }

    /// Sends per second over the last second (sliding-counter estimate).
    fn per_second(&mut self, now: Instant) -> f64 {
        self.roll(now);
        let Some(start) = self.slot_start else {
            return 0.0;
        };
        let frac = now.saturating_duration_since(start).as_secs_f64() / SLOT.as_secs_f64();
        self.previous as f64 * (1.0 - frac) + self.current as f64
    }
}

/// A window estimate from one reset. Whole-second resets carry up to a
/// second of rounding (the server rounds the reset up, its `Date` is
/// truncated), so the estimate is the reset rounded up to whole seconds, less
/// one second, and at least one second.
fn window_from_reset(reset: Duration) -> Duration {
    let secs = reset.as_secs() + u64::from(reset.subsec_nanos() > 0);
    Duration::from_secs(secs.saturating_sub(1).max(1))
}

fn matches(dimension: &Dimension, limit: &Limit) -> bool {
    &limit.dimension == dimension
}

impl Adaptive {
    pub(crate) fn new(
        dimension: Dimension,
        ceiling: Option<Rate>,
        burst: Option<u64>,
        headroom: f64,
    ) -> Self {
        Adaptive {
            dimension,
            ceiling,
            burst,
            headroom,
            windows: HashMap::new(),
            max_remaining: 0,
            applied: ceiling.map(|r| r.per_second_f64()),
            capacity: None,
            last_decrease: None,
            sent: 0,
            phase: Phase::Open,
            last_increase: None,
            sends: SendRate::default(),
            header_driven: false,
        }
    }

    /// A request of this key was sent at `now`; returns its sequence
    /// number, to hand back to [`on_response`](Self::on_response).
    pub(crate) fn on_send(&mut self, now: Instant) -> u64 {
        self.sends.record(now);
        self.sent += 1;
        self.sent
    }

    /// The rate currently applied, in tokens per second (`None` while
    /// unconstrained).
    pub(crate) fn applied_rate(&self) -> Option<f64> {
        self.applied
    }

    /// The adjustment to `per_second`, capped by the configured ceiling
    /// (which no floor may exceed); `None` when it changes nothing.
    fn rate_adjustment(&mut self, per_second: f64) -> Option<Adjustment> {
        let capped = match self.ceiling {
            Some(c) => per_second.min(c.per_second_f64()),
            None => per_second,
        };
        let rate = Rate::from_per_second_f64(capped).ok()?;
        let per_second = rate.per_second_f64();
        if let Some(applied) = self.applied {
            // Not worth a lock and an event: the same rate to within 1 %.
            if (per_second - applied).abs() <= applied * 0.01 {
                return None;
            }
        }
        self.applied = Some(per_second);
        Some(Adjustment::SetRate(rate))
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

    fn capacity_for(&self, per_second: f64) -> u64 {
        let span = (per_second * BURST_SPAN.as_secs_f64()).ceil();
        let span = if span.is_finite() && span >= 1.0 {
            span as u64
        } else {
            1
        };
        let mut capacity = span;
        if self.max_remaining > 0 {
            capacity = capacity.min(self.max_remaining);
        }
        capacity.max(1)
    }

    /// Learn from a response received at `now` for the request with send
    /// sequence number `seq`.
    pub(crate) fn on_response(
        &mut self,
        now: Instant,
        seq: u64,
        signal: &RateLimitSignal,
        success: bool,
    ) -> Vec<Adjustment> {
        let mut out = Vec::new();
        let limits: Vec<&Limit> = signal
            .limits
            .iter()
            .filter(|l| matches(&self.dimension, l))
            .collect();
        let mut header_rate: Option<f64> = None;
        let mut tighten = |r: f64| {
            header_rate = Some(header_rate.map_or(r, |h: f64| h.min(r)));
        };
        for limit in &limits {
            let name = limit.name.clone();
            let state = self.windows.entry(name).or_insert(WindowState {
                window: Duration::ZERO,
                reset_at: None,
            });
            if let Some(w) = limit.window.filter(|w| !w.is_zero()) {
                state.window = w;
            } else if let Some(reset) = limit.reset {
                state.window = state.window.max(window_from_reset(reset));
            }
            let window = state.window;
            if let Some(quota) = limit.limit.filter(|&q| q > 0) {
                if !window.is_zero() {
                    tighten(quota as f64 / window.as_secs_f64());
                }
            }
            let Some(remaining) = limit.remaining else {
                continue;
            };
            self.max_remaining = self.max_remaining.max(remaining);
            let reset_at = limit.reset.map(|r| now + r);
            // Which window does this response speak for?
            let tolerance = (window / 2).max(Duration::from_secs(1));
            let fresher = match (reset_at, state.reset_at) {
                (Some(new), Some(known)) if new + tolerance < known => {
                    // From an older window: stale, ignore its remaining.
                    continue;
                }
                (Some(new), Some(known)) => new > known + tolerance,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if let Some(new) = reset_at {
                state.reset_at = Some(state.reset_at.map_or(new, |k| k.max(new)));
            }
            if fresher && state.reset_at.is_some() && self.header_driven {
                out.push(Adjustment::SetRemaining(remaining));
            } else {
                out.push(Adjustment::LimitRemaining(remaining));
            }
            if let Some(reset) = limit.reset {
                if reset >= SPREAD_MIN_RESET {
                    if remaining == 0 {
                        out.push(Adjustment::BlockUntil(now + reset));
                    } else {
                        tighten(remaining as f64 / reset.as_secs_f64());
                    }
                }
            }
        }

        if let Some(rate) = header_rate {
            let target = rate * self.headroom;
            self.header_driven = true;
            out.extend(self.rate_adjustment(target));
            let capacity = self.capacity_for(target);
            out.extend(self.capacity_adjustment(capacity));
        } else if !self.header_driven {
            self.aimd(now, seq, signal, success, &mut out);
        }

        let throttled = signal.status == 429 || signal.status == 503;
        if let (true, Some(wait)) = (throttled, signal.retry_after) {
            out.push(Adjustment::BlockUntil(now + wait));
        }
        out
    }

    fn aimd(
        &mut self,
        now: Instant,
        seq: u64,
        signal: &RateLimitSignal,
        success: bool,
        out: &mut Vec<Adjustment>,
    ) {
        let throttled =
            signal.status == 429 || (signal.status == 503 && signal.retry_after.is_some());
        if throttled {
            if self.last_decrease.is_some_and(|(at, _)| seq <= at) {
                // Part of the burst that caused the last decrease.
                return;
            }
            let measured = self.sends.per_second(now).max(MIN_RATE);
            self.last_decrease = Some((self.sent, measured));
            self.last_increase = Some(now);
            if signal.retry_after.is_some() {
                // The server said when to come back: keep the pace, but a
                // key with no pace yet resumes from what it was doing, one
                // request at a time, and ramps up from there.
                if self.applied.is_none() {
                    self.phase = Phase::SlowStart;
                    out.extend(self.rate_adjustment(measured));
                    out.extend(self.capacity_adjustment(1));
                }
                return;
            }
            let base = self.applied.map_or(measured, |a| a.min(measured));
            self.last_decrease = Some((self.sent, base));
            let factor = if self.phase == Phase::Open {
                DECREASE
            } else {
                LATER_DECREASE
            };
            self.phase = match self.phase {
                Phase::Open => Phase::SlowStart,
                _ => Phase::Avoidance,
            };
            let target = (base * factor).max(MIN_RATE);
            out.extend(self.rate_adjustment(target));
            out.extend(self.capacity_adjustment(burst_for(target)));
            out.push(Adjustment::LimitRemaining(0));
        } else if success {
            let (Some((_, base)), Some(applied), Some(last)) =
                (self.last_decrease, self.applied, self.last_increase)
            else {
                return;
            };
            let dt = now.saturating_duration_since(last).as_secs_f64();
            if dt <= 0.0 {
                return;
            }
            let grown = match self.phase {
                Phase::SlowStart => applied * 2f64.powf(dt / SLOW_START_DOUBLING.as_secs_f64()),
                _ => applied + base * INCREASE_PER_SECOND * dt,
            };
            if let Some(adj) = self.rate_adjustment(grown) {
                self.last_increase = Some(now);
                out.push(adj);
                out.extend(self.capacity_adjustment(burst_for(grown)));
            }
        }
    }
}

/// The burst allowed in the header-less regime: a fifth of a second of the
/// rate, at least one request.
fn burst_for(per_second: f64) -> u64 {
    let burst = (per_second / 5.0).floor();
    if burst.is_finite() && burst >= 1.0 {
        burst as u64
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(status: u16, limits: Vec<Limit>) -> RateLimitSignal {
        RateLimitSignal {
            status,
            retry_after: None,
            global: false,
            scope: None,
            limits,
            ignored: Vec::new(),
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
        let adj = a.on_response(now, a.sent + 1, &signal(200, vec![limit]), true);
        assert_eq!(rate_in(&adj), Some(10.0));
    }

    #[test]
    fn the_remaining_quota_is_spread_until_a_distant_reset() {
        let mut a = fresh();
        let now = Instant::now();
        // GitHub-like: 5000 an hour, but only 100 left for the next 1000 s.
        let first = requests(5000, 4999, 3600);
        a.on_response(now, 1, &signal(200, vec![first]), true);
        // 2600 s on, the same window (its reset instant has not moved).
        let later = requests(5000, 100, 1000);
        let adj = a.on_response(
            now + Duration::from_secs(2600),
            2,
            &signal(200, vec![later]),
            true,
        );
        assert_eq!(rate_in(&adj), Some(0.1));
        assert!(adj.contains(&Adjustment::LimitRemaining(100)));
    }

    #[test]
    fn a_stale_response_from_an_older_window_is_ignored() {
        let mut a = fresh();
        let t0 = Instant::now();
        a.on_response(t0, 1, &signal(200, vec![requests(100, 90, 60)]), true);
        // A new window starts 60 s later: its remaining may raise tokens.
        let t1 = t0 + Duration::from_secs(61);
        let adj = a.on_response(t1, 2, &signal(200, vec![requests(100, 99, 60)]), true);
        assert!(adj.contains(&Adjustment::SetRemaining(99)), "{adj:?}");
        // A response from the old window arrives late, saying 3 are left
        // with a reset that has nearly passed: it must not lower or raise
        // anything.
        let adj = a.on_response(t1, 3, &signal(200, vec![requests(100, 3, 0)]), true);
        assert!(
            !adj.iter().any(|a| matches!(
                a,
                Adjustment::LimitRemaining(_) | Adjustment::SetRemaining(_)
            )),
            "{adj:?}"
        );
        // Within the new window remaining only lowers.
        let adj = a.on_response(t1, 4, &signal(200, vec![requests(100, 97, 59)]), true);
        assert!(adj.contains(&Adjustment::LimitRemaining(97)), "{adj:?}");
    }

    #[test]
    fn an_exhausted_quota_with_a_distant_reset_blocks_until_it() {
        let mut a = fresh();
        let now = Instant::now();
        let adj = a.on_response(now, 1, &signal(200, vec![requests(100, 0, 30)]), true);
        assert!(adj.contains(&Adjustment::BlockUntil(now + Duration::from_secs(30))));
    }

    #[test]
    fn a_configured_ceiling_caps_the_learned_rate() {
        let mut a = Adaptive::new(
            Dimension::Requests,
            Some(Rate::per_second(5).unwrap()),
            None,
            1.0,
        );
        let now = Instant::now();
        let limit = Limit::new("p", Dimension::Requests)
            .with_limit(100)
            .with_window(Duration::from_secs(1));
        let adj = a.on_response(now, 1, &signal(200, vec![limit]), true);
        // Already at the ceiling: nothing to change.
        assert_eq!(rate_in(&adj), None);
        assert_eq!(a.applied_rate(), Some(5.0));
    }

    #[test]
    fn a_configured_burst_caps_the_header_less_regime_too() {
        let mut a = Adaptive::new(
            Dimension::Requests,
            Some(Rate::per_second(100).unwrap()),
            Some(1),
            1.0,
        );
        let t0 = Instant::now();
        for i in 0..100 {
            a.on_send(t0 + Duration::from_millis(10 * i));
        }
        let now = t0 + Duration::from_secs(1);
        let adj = a.on_response(now, a.sent, &signal(429, vec![]), false);
        // 0.7 × 100/s would allow a burst of 14; the configured 1 holds.
        assert!(rate_in(&adj).is_some(), "{adj:?}");
        assert!(
            !adj.iter()
                .any(|x| matches!(x, Adjustment::SetCapacity(c) if *c > 1)),
            "{adj:?}"
        );
    }

    #[test]
    fn header_less_429s_decrease_once_per_burst_and_recover() {
        let mut a = fresh();
        let t0 = Instant::now();
        let mut seqs = Vec::new();
        for i in 0..40 {
            seqs.push(a.on_send(t0 + Duration::from_millis(25 * i)));
        }
        let now = t0 + Duration::from_secs(1);
        // Forty sends in the last second; a burst of 429s for ten of them.
        let adj = a.on_response(now, seqs[30], &signal(429, vec![]), false);
        let decreased = rate_in(&adj).unwrap();
        assert!((decreased - 28.0).abs() < 1.0, "{decreased}");
        for &seq in &seqs[31..] {
            let adj = a.on_response(now, seq, &signal(429, vec![]), false);
            assert!(rate_in(&adj).is_none(), "one decrease per burst");
        }
        // Slow start: 250 ms of success doubles the rate.
        let adj = a.on_response(
            now + Duration::from_millis(250),
            seqs[39] + 1,
            &signal(200, vec![]),
            true,
        );
        let grown = rate_in(&adj).unwrap();
        assert!((grown - 2.0 * decreased).abs() < 0.5, "{grown}");
    }
}
