//! The header-less regime: a server that says nothing of its limit and only
//! refuses (a 429, a 503, a 403 with `Retry-After`) once a key sends too
//! fast. The key's rate is then found the way TCP finds a path's capacity,
//! as a few named states and one [`Tuning`] whose fields say what each
//! threshold trades off:
//!
//! - **Slow start.** From [`Tuning::cold_start`] the rate doubles every
//!   [`Tuning::slow_start_doubling`] of sending until the first refusal.
//! - **Cut.** A refusal of a request sent after the last cut names the
//!   rate that was too fast: what the key delivered, and, ending slow
//!   start, no more than the rate the server's admissions had reached (a
//!   second's average of a ramp that doubles every half second reads about
//!   half of it: see [`Tuning::ramp_share`]). Slow start's cut recovers to
//!   what the server was seen to admit and then climbs to that rate over
//!   [`Tuning::guess_climb`]: the limit lies between (a window that let a
//!   whole quota through before refusing reads the same as a bucket
//!   refusing the ramp as it crossed its rate); after a refusal that holds
//!   the key, the climb waits until holding below the guess has cost as
//!   much as a refused climb's block would (no longer than a probe waits
//!   after it). The climb refused where slow start's admissions put the
//!   limit has seen that ceiling twice, as a probe refused at the same
//!   rate as the last. A refusal at or below the rate climbed to keeps the guess:
//!   a window overrun by slow start refuses until its count of the
//!   overshoot runs out. The rate drops
//!   by [`Tuning::first_decrease`] from slow start or when refused at or
//!   below its target (which was then too high; no lower than what the
//!   server let through over a cycle of [`Tuning::min_cycle`] or more,
//!   unless the refusal before came at the same rate: that is the
//!   ceiling, and a window's first burst inflated the cycle), and
//!   by [`Tuning::later_decrease`] when a probe is refused.
//! - **Lockout.** A refusal with no admission since the cut before is a
//!   lockout: a spent window, or a limiter that counts refusals, which
//!   every request sent meanwhile extends. The rate drops by
//!   [`Tuning::lockout_decrease`] and the key holds its calls for a wait
//!   that doubles from [`Tuning::first_lockout_wait`] (or
//!   [`Tuning::lockout_intervals`] of the rate, if longer) to
//!   [`Tuning::max_lockout_wait`], one probe per wait. When one is
//!   admitted again, what the server let through since the last lockout
//!   (up to the last refusal) is the rate that is too fast: the limit of a
//!   window, measured whatever rate ran into it, where the lockout lasted
//!   [`Tuning::spent_share`] of the cycle at least (a short lockout at the
//!   end of a long cycle measured only what the key chose to send). Two
//!   cycles in a row that let the same count through over the same length
//!   show a window: within it, a probe's refusal names no ceiling (the
//!   quota was spent, whatever the rate), and a lockout waits for the
//!   window's end (the windows following one another from the cycle's
//!   start; up to [`Tuning::max_window_wait`] at a time) instead of
//!   probing it with refusals, and its end measures the window's count
//!   over its length; a cycle that disagrees forgets it (one too short
//!   to measure a rate still bounds the window's length). For
//!   as long as the cycle admitted before its lockout, a refusal after its
//!   end cuts the rate but keeps the target: a log the cycle overran
//!   refuses until those admissions age out.
//! - **Block.** A refusal that holds the key (`Retry-After`) for at least
//!   [`Tuning::spent_share`] of a cycle of [`Tuning::min_cycle`] or more
//!   ends the cycle at the block's end, as a lockout does: what the cycle
//!   let through over that span bounds the rate that is too fast (a
//!   window or log spent in slow start's first seconds; a second's
//!   admissions read the burst). The span counts each block to the
//!   shortest end its wait stands for, not to when the key went on.
//! - **Recovery.** The rate climbs back to [`Tuning::recover_to`] of the
//!   rate that was too fast, linearly over [`Tuning::recovery`].
//! - **Hold, then probe.** The target is held for [`Tuning::first_hold`]
//!   (after a lockout's cycle that measured a new limit, no longer than
//!   that cycle: a window shows within one whether a rate holds),
//!   then probed beyond, slowly at first and faster the longer no refusal
//!   comes (the server's capacity may have grown), up to
//!   [`Tuning::probe_reach`] times the target: admitted there for a hold
//!   (and a window's length, where the lockouts showed one), the server
//!   grew, and that rate is the target. A probe refused near the
//!   rate the previous one was refused at (up to [`Tuning::probe_overrun`]
//!   above it: a bucket's burst lets an accelerating probe run past its
//!   rate before it refuses) doubles the hold, up to
//!   [`Tuning::max_hold`], and raises the target by at most
//!   [`Tuning::max_rise`], and never back past a rate refused while held
//!   (a bucket with a burst refuses a probe above its rate, and the rise
//!   that reading gave was refused a few seconds later, again and again),
//!   unless the key has since sent that fast for longer than the hold
//!   refused there lasted, with no refusal: that disproves it.
//!   A probe refused where the one before it was, after the target it
//!   left was refused when held, found the same ceiling too (that burst
//!   lets an accelerating probe run about as far each time). A probe
//!   refused and then locked out found the ceiling held before too: it
//!   spent a window's quota, which admits any rate until it is spent (see
//!   `ProbeRead`). A probe refused further past the target than a
//!   bucket's burst carries one (`probe_overrun`) ran past a window or a
//!   log, which counts what it sent for about as long as it took: the
//!   first refusal within that long after it keeps the target the probe
//!   left (its echo), and cuts the rate only. Once a probe
//!   has found the ceiling again, a hold lasts at least
//!   [`Tuning::probe_sends`] sends at the target: a slow server's probes
//!   cost the same share of its requests as a fast one's. Against a
//!   steady server the key settles into one refusal per `max_hold` (per
//!   `probe_sends` sends, up to [`Tuning::max_sends_hold`], below
//!   `probe_sends / max_hold` a second). A refusal elsewhere (the server
//!   changed) starts the holds over, as does a refusal at or below the target that
//!   finds it far too high ([`Tuning::holds_over_below`]). A probe refused
//!   far above the ceiling reads as a server that grew, until a refusal at
//!   or below the new target within [`Tuning::first_hold`] disproves that
//!   (a bucket's burst let the probe run that far): what the server
//!   admitted since (the key sent faster all along) is its rate, and the
//!   target goes to just under it, no lower than the one held before; the
//!   hold doubles, and a probe refused where that one was found the same
//!   ceiling. A refusal that
//!   holds the key (`Retry-After`)
//!   puts the next probe at least [`Tuning::blocked_hold`] times as far off,
//!   doubled as often as the hold was, up to [`Tuning::max_sends_hold`]:
//!   such a probe's refusal costs the block's traffic too. A refusal that
//!   asks for no wait ends that: the server's refusals cost no block now,
//!   whatever slow start's overrun of a log once did.
//! - **Failing, not limiting.** A server that has never admitted the key is
//!   cut once and then left to the retry policy's backoff and budget: the
//!   caller, which knows whether it ever did, cuts no more.
//!
//! Pure arithmetic on `now`; the caller measures the send rate and applies
//! the rate returned.

use std::time::Duration;

use tokio::time::Instant;

/// The thresholds of the header-less regime, each a trade-off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tuning {
    /// The rate a never-refused key starts at, per second. Lower starts are
    /// slower to reach a fast server; higher ones overshoot a slow one.
    pub(crate) cold_start: f64,
    /// Slow start doubles the rate this often. Shorter finds a fast server
    /// sooner; longer overshoots less before the first refusal arrives.
    pub(crate) slow_start_doubling: Duration,
    /// The cut on the first refusal (from slow start, which overshoots) and
    /// on one at or below the target (it was found too high). Deeper drains
    /// a server's queue sooner; shallower wastes less.
    pub(crate) first_decrease: f64,
    /// The cut on a refused probe, just past a rate the server allowed.
    pub(crate) later_decrease: f64,
    /// The cut on a refusal with no admission since the previous cut: a
    /// lockout, which only sending less ends.
    pub(crate) lockout_decrease: f64,
    /// Locked out, the key holds its calls this long after the first
    /// refusal in a row, twice as long after each next one ...
    pub(crate) first_lockout_wait: Duration,
    /// ... and at most this long. Longer waits cost fewer refusals while a
    /// window runs out; shorter ones notice its end sooner.
    pub(crate) max_lockout_wait: Duration,
    /// Within a window the lockouts have shown, a lockout waits for the
    /// window's end, but no longer than this at a time. Longer waits a
    /// spent window out with fewer refusals; a call held longer than the
    /// retry policy's cap on a wait (`max_retry_after`, 60 s by default)
    /// fails at once instead of waiting. (At 30 s, a minute's window that
    /// a probe spent in its first seconds cost a second refusal each time.)
    pub(crate) max_window_wait: Duration,
    /// The end of a lockout measures what the server lets through (what
    /// it admitted over the cycle) only when the lockout lasted at least
    /// this share of the cycle: a window spent early and refused until it
    /// ended. A short lockout at the end of a long cycle is a short
    /// window's end, and the cycle's average is what the key chose to
    /// send. Larger measures fewer cycles; smaller reads a key's own
    /// caution as the server's limit.
    pub(crate) spent_share: f64,
    /// The shortest cycle (from the end of one lockout to the next) whose
    /// admissions measure a rate. Longer measures fewer short windows'
    /// cycles; shorter reads a rate from a window's handful of sends.
    pub(crate) shortest_cycle: Duration,
    /// A lockout's wait is at least this many intervals of the rate the
    /// lockout went down to, doubled with each refusal in a row (and the
    /// rate falls with each, so the wait grows faster than it doubles): a
    /// key sending 3 a second waits as many of its own sends as one
    /// sending 30 (a fixed wait is most of a window at a slow rate's window
    /// and a whole second's refusals at a fast one's). More costs fewer
    /// refusals while a slow window runs out; fewer notices its end sooner.
    /// (Doubling from the first wait alone, the rate's fall left out, cost
    /// two servers of the generated space.)
    pub(crate) lockout_intervals: f64,
    /// After a cut the rate climbs back to this share of the rate that was
    /// too fast. Higher is closer to the limit; lower leaves more room for
    /// a server whose limit wavers.
    pub(crate) recover_to: f64,
    /// ... within about this long,
    pub(crate) recovery: Duration,
    /// ... and over at least this many sends at the rate cut to: a refusal
    /// says only that the rate refused was too fast, and what the server
    /// allows shows one send at a time. Fewer recover a slow key sooner;
    /// more find a slow server's limit with fewer refusals.
    pub(crate) recovery_sends: f64,
    /// The least gap a recovery closes over [`recovery`](Self::recovery),
    /// as a share of its target: a cut to just below the target still
    /// climbs at this pace. More recovers from a small cut sooner; less
    /// approaches the target more gently.
    pub(crate) least_recovery_gap: f64,
    /// After slow start's cut the rate climbs from the rate the server
    /// was seen to admit to the rate slow start was refused at over this
    /// long (the limit lies between: a second's average of a ramp that
    /// doubles every half second reads about half of where it ended, and a
    /// window that let a full quota through before refusing reads that
    /// quota). Shorter finds a bucket's rate sooner; longer reads the rate
    /// refused on the way more exactly.
    pub(crate) guess_climb: Duration,
    /// A cycle this long measures what the server lets through: a
    /// refusal at or below the target cuts no lower than that. Shorter
    /// reads a bucket's first burst as its rate; longer leaves a refusal
    /// after a block to cut from the few sends since.
    pub(crate) min_cycle: Duration,
    /// A refusal at or below the target that sets a target below this
    /// share of the one held starts the holds over (see
    /// [`first_hold`](Self::first_hold)): the longer holds were earned
    /// probing past a target thought right. Higher starts them over for
    /// smaller corrections, at the cost of probing a steady server sooner.
    pub(crate) holds_over_below: f64,
    /// The target is held this long before the first probe beyond it.
    pub(crate) first_hold: Duration,
    /// The longest hold the doubling reaches: one refusal per this long
    /// against a steady server, and the longest a grown capacity goes
    /// unnoticed (a key slower than `probe_sends / max_hold` a second holds
    /// for its [`probe_sends`](Self::probe_sends) sends instead, up to
    /// [`max_sends_hold`](Self::max_sends_hold)).
    pub(crate) max_hold: Duration,
    /// Once a probe has found the ceiling again, a hold lasts at least
    /// this many sends at the target (up to
    /// [`max_sends_hold`](Self::max_sends_hold): at 2 a second a probe
    /// every `max_hold` cost 0.7 % of the requests over ten minutes): a
    /// refused probe costs a refusal or two, and a slow key spends a
    /// second's hold on a few sends. More costs a slow server fewer
    /// refusals; fewer finds its grown capacity sooner.
    pub(crate) probe_sends: f64,
    /// The longest a hold lasts for [`probe_sends`](Self::probe_sends)
    /// sends (four times [`max_hold`](Self::max_hold), as a spacer's):
    /// the longest a slow key's grown capacity goes unnoticed.
    pub(crate) max_sends_hold: Duration,
    /// A refusal that holds the key for a while (its `Retry-After`) costs
    /// that while: the next probe waits at least this many times as long
    /// (doubled as often as the hold was by probes refused at one ceiling),
    /// so that probing such a server costs about 1/`blocked_hold` of the
    /// time, and less once its ceiling is known. Up to
    /// [`max_sends_hold`](Self::max_sends_hold), not
    /// [`max_hold`](Self::max_hold): a probe every minute against a log of
    /// 10 a second answering `Retry-After: 1` lost a second's traffic each
    /// time, and held it at 0.949 of its limit over ten minutes. Larger
    /// wastes less on a steady server; smaller finds a grown one sooner.
    pub(crate) blocked_hold: f64,
    /// A probe refused within this share of the rate refused before found
    /// the same ceiling: the hold doubles.
    pub(crate) same_ceiling: f64,
    /// A probe refused up to this share above the rate refused before
    /// found the same ceiling (with [`same_ceiling`](Self::same_ceiling)
    /// below it): a bucket with a burst lets an accelerating probe run
    /// past its rate before it refuses (15 % past a GCRA of 20 a second
    /// with a burst of 5). Larger reads fewer late refusals as a server
    /// grown; smaller finds a server grown by less sooner.
    pub(crate) probe_overrun: f64,
    /// A probe climbs to at most this multiple of the target: admitted
    /// there for a hold (and a window's length, where the lockouts showed
    /// one), the server grew, and the rate reached is the next target.
    /// Unbounded, a probe against a window its quota had not spent ran to
    /// fifteen times the rate before the window refused it, and every
    /// request it had in flight then was refused too. Larger finds a
    /// much grown server in fewer holds; smaller spends less of a
    /// window's quota early.
    pub(crate) probe_reach: f64,
    /// A rate refused while held is disproved by sending that fast, with
    /// no refusal, for longer than the hold refused there had lasted, and
    /// for this long at least: a hold refused within a moment of reaching
    /// its target began on a bucket the climb before it had drained, and
    /// its length bounds nothing. Longer keeps a misread ceiling longer
    /// (at 4 s, a counter of 5 a second with `Retry-After` missed the
    /// goal over ten minutes again, as with no disproof); shorter
    /// lets a bucket's burst pass for a disproof (with none, a bucket of
    /// 40 a second with a burst of 5, refused 0.6 s into a hold, was
    /// refused five times in the minute after it grew from 20).
    pub(crate) disprove_at_least: Duration,
    /// A refused probe raises the target held before it by at most this
    /// share: a server that absorbs a burst refuses a probe late, above
    /// its limit. Larger finds a grown capacity in fewer probes; smaller
    /// costs fewer refusals after each.
    pub(crate) max_rise: f64,
    /// A probe starts by adding this share of the rate that was too fast
    /// per second ...
    pub(crate) probe_per_second: f64,
    /// ... and its growth doubles this often while no refusal comes.
    pub(crate) probe_doubling: Duration,
    /// Fewer sends than this in the last second measure no rate: the rate
    /// applied stands for what was delivered.
    pub(crate) min_sample: f64,
    /// The slowest rate the regime goes down to, per second.
    pub(crate) min_rate: f64,
    /// A refusal's `Retry-After: 1` from a server that rounds its waits up
    /// (it never asked for 0) and states no limit holds the key this many
    /// intervals of the rate refused, a second at most (see
    /// `Adaptive::server_waits`): a bucket's next unit is an interval
    /// away, and the cut rate's next send later still (about 1.4
    /// intervals, at [`first_decrease`](Self::first_decrease)). More
    /// leaves a window that ends within the second fewer refusals;
    /// fewer spends a bucket's second sooner.
    pub(crate) rounded_up_intervals: f64,
}

impl Tuning {
    /// The share of slow start's rate at its end that an average of its
    /// ramp over the last `span` reads: a second's average of a rate that
    /// doubles every half second is about 0.54 of where it ended.
    pub(crate) fn ramp_share(&self, span: Duration) -> f64 {
        let (s, t) = (span.as_secs_f64(), self.slow_start_doubling.as_secs_f64());
        if s <= 0.0 || t <= 0.0 {
            return 1.0;
        }
        t / (s * std::f64::consts::LN_2) * (1.0 - 2f64.powf(-s / t))
    }

    /// Whether `rate` is the one `seen` was, within
    /// [`same_ceiling`](Self::same_ceiling) of it.
    pub(crate) fn same_rate(&self, rate: f64, seen: f64) -> bool {
        (rate - seen).abs() <= seen * self.same_ceiling
    }

    /// The default (in force through [`TUNING`](super::tuning::TUNING)).
    pub(crate) const DEFAULT: Tuning = Tuning {
        cold_start: 10.0,
        slow_start_doubling: Duration::from_millis(500),
        first_decrease: 0.7,
        later_decrease: 0.9,
        lockout_decrease: 0.7,
        first_lockout_wait: Duration::from_millis(100),
        max_lockout_wait: Duration::from_secs(8),
        max_window_wait: Duration::from_secs(50),
        lockout_intervals: 2.0,
        spent_share: 0.25,
        shortest_cycle: Duration::from_secs(1),
        recover_to: 0.97,
        recovery: Duration::from_millis(1_000),
        recovery_sends: 8.0,
        least_recovery_gap: 0.05,
        guess_climb: Duration::from_secs(2),
        min_cycle: Duration::from_secs(8),
        first_hold: Duration::from_secs(8),
        holds_over_below: 0.5,
        max_hold: Duration::from_secs(64),
        probe_sends: 200.0,
        max_sends_hold: Duration::from_secs(256),
        same_ceiling: 0.1,
        probe_overrun: 0.25,
        probe_reach: 2.0,
        blocked_hold: 32.0,
        max_rise: 0.05,
        disprove_at_least: Duration::from_secs(2),
        probe_per_second: 0.02,
        probe_doubling: Duration::from_secs(2),
        min_sample: 4.0,
        min_rate: 0.1,
        rounded_up_intervals: 2.0,
    };
}

/// The lengths, in seconds, windows are configured in, from ten seconds
/// (a shorter lockout's doubling waits are no longer than its window) up
/// to an hour.
pub(crate) const ROUND_WINDOWS: [u64; 11] = [10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600];

/// The first end after `now` of windows of length `window` one after
/// another from `since`; none for a window of no length.
fn next_end(since: Instant, window: Duration, now: Instant) -> Option<Instant> {
    if window.is_zero() {
        return None;
    }
    let passed = now.saturating_duration_since(since).as_secs_f64() / window.as_secs_f64();
    let ends = (passed.floor() + 1.0).min(f64::from(u32::MAX));
    since.checked_add(window.mul_f64(ends))
}

/// What the server was seen to admit over the last second, per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Admitted {
    /// The average.
    pub(crate) average: f64,
    /// The rate that average ended at: over slow start's ramp, the average
    /// over its share (see [`Tuning::ramp_share`]), and no more than the
    /// rate the key's limiter applied; the average itself elsewhere.
    pub(crate) at_end: f64,
}

/// Where the header-less regime stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Nothing learned: the configured ceiling, or no limit at all.
    Open,
    /// Never refused: doubling from [`Tuning::cold_start`].
    SlowStart,
    /// Refused before: recovering towards, holding, or probing past the
    /// rate that was too fast.
    Steady,
}

/// The header-less regime's state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Congestion {
    pub(crate) phase: Phase,
    /// Requests sent up to this sequence number belong to the burst that
    /// caused the last cut.
    pub(crate) decreased_at: Option<u64>,
    /// The delivered rate that was too fast.
    pub(crate) too_fast: f64,
    /// The rate this regime aims at.
    pub(crate) rate: f64,
    /// When the rate last grew (or was cut).
    pub(crate) grown_at: Option<Instant>,
    /// The rate the regime climbs back to after a cut, and holds.
    target: f64,
    /// The rate the last cut went down to: recovery closes the gap from it.
    cut_to: f64,
    /// When the last refusal at or below the target came, and the rate
    /// the key was sending at then (where it sent at its rate, not a few
    /// sends after a block).
    refused_below: Option<(Instant, f64)>,
    /// The rate a target was last refused at, held (a refusal at or below
    /// it): a ceiling the server has shown, which a refused probe's rise
    /// (see [`Tuning::max_rise`]) does not climb back past. A bucket with
    /// a burst refuses a probe above its rate, and each rise past it was
    /// refused again a few seconds later, for as long as the key ran
    /// (seven refusals a minute against a bucket of 20 a second with a
    /// burst of 5). Forgotten when a probe finds another ceiling, and when
    /// a lockout measures a limit. (Forgotten after a while instead, the
    /// rises came back, and with them the refusals.) A server grown by
    /// less than [`Tuning::same_ceiling`] is found only by a lockout.
    /// Disproved, and forgotten, when the key sends at that rate or above
    /// for longer than the hold refused there had lasted (see
    /// `refused_held_after`).
    refused_held: Option<f64>,
    /// How long the target refused at [`refused_held`](Self::refused_held)
    /// had been held when it was refused. A bucket refuses a rate above
    /// its own once that rate's excess has drained its burst: sent at
    /// least as fast for longer, with no refusal, the key drained more
    /// than that, and the rate was not what the server refuses (a
    /// counter of 5 a second, whose second's admissions read 3.8 when the
    /// key was refused holding 4.3, was held at 0.92 of its limit for as
    /// long as the key ran).
    refused_held_after: Duration,
    /// Since when the key has sent at [`refused_held`](Self::refused_held)
    /// or above with no refusal.
    above_refused_held: Option<Instant>,
    /// When the probe reached [`Tuning::probe_reach`] of the target, since
    /// the last cut.
    reached_at: Option<Instant>,
    /// The rate the last refused probe was refused at. A probe refused
    /// there again found the same ceiling, even where a refusal of the
    /// rate held moved the rate that was too fast since: a bucket with a
    /// burst lets an accelerating probe run past its rate before it
    /// refuses, always about as far, and refuses the target the probe
    /// left too high when it is held.
    probe_refused: Option<f64>,
    /// When the last cut was.
    cut_at: Option<Instant>,
    /// Refusals at one ceiling in a row (probes refused near the rate the
    /// one before was, lockouts that measured the same limit): the hold,
    /// and the hold a block brings, double with each.
    ceiling_sightings: u32,
    /// After slow start's cut, the rate it was refused at, where that is
    /// well above what the server was seen to admit: recovered, the rate
    /// climbs to it (see [`Tuning::guess_climb`]).
    guess: Option<f64>,
    /// After a probe refused far above the ceiling held before it (read as
    /// a server that grew: the target went to just under the rate
    /// refused), that ceiling's target, when the probe was refused and the
    /// key's [`admissions`](Self::admissions) then: until
    /// [`Tuning::first_hold`] has passed, a refusal at or below the new
    /// target disproves the growth (see `cut`).
    grown_from: Option<(f64, Instant, u64)>,
    /// The server's admissions of the key, all told (see
    /// [`admitted_for`](Self::admitted_for)).
    admissions: u64,
    /// How long the target is held before a probe.
    hold: Duration,
    /// How long the blocks since the last refusal that brought none put
    /// the next probe off (see [`blocked_for`](Self::blocked_for)): what a
    /// refused probe costs now, not what slow start's overrun of a log once
    /// did. The target is held for the longer of this and
    /// [`hold`](Self::hold).
    block_hold: Duration,
    /// When the rate reached its target, if it has since the last cut.
    held_since: Option<Instant>,
    /// Whether a request was admitted since the last cut.
    admitted_since_cut: bool,
    /// How long the climb to slow start's guess waits once recovered: the
    /// refusal that ended slow start held the key, and a refused climb
    /// costs that block again; holding at the target costs the share of
    /// the guess it lies below. Zero: it climbs at once.
    climb_hold: Duration,
    /// Whether the key is locked out: refused again with nothing admitted
    /// since the cut before.
    locked: bool,
    /// Since when the key has been locked out: the cut before its first
    /// refusal in a row (the first refusal's instant where none was).
    locked_since: Option<Instant>,
    /// Refusals in a row while locked out, and the latest's instant.
    lockouts: u32,
    last_refused: Option<Instant>,
    /// The key's run of admissions since its first one or the end of the
    /// last lockout (or measuring block): over a cycle that ends in a
    /// lockout, what the server let through is its limit (a window spent,
    /// then refused until it ends), whatever the rate that ran into it.
    cycle: Option<Cycle>,
    /// Until when the limit the end of a lockout measured stands against
    /// refusals (the rate still cut, the target kept): a log the cycle
    /// overran refuses until the admissions that overran it age out, over
    /// as long as they took to come in (the cycle up to its lockout), and
    /// that says nothing of the limit (a log of 585 in 7 s went from 0.64
    /// to 0.95 of its limit). Later, a sliding counter's overrun still
    /// weighs on its estimate for a window, and the target must come down
    /// under it (kept for the whole cycle, a counter took a refusal a
    /// second).
    measured_until: Option<Instant>,
    /// Until when a refusal after a refused probe may be that probe's
    /// echo: what the probe sent past the target stays counted by a
    /// window or log for about as long as it took to send, and a log
    /// refuses the target held before it until then. The first such
    /// refusal keeps the target (a log of 585 in 7 s, `Retry-After`
    /// only, held at 0.90 of its limit over ten minutes as each echo
    /// took back the probe's rise); a second reads as any other.
    probe_echo_until: Option<Instant>,
    /// What the cycle the last lockout ended let through, and how long
    /// it ran (from the end of the lockout before); once a window is
    /// shown, what one window lets through, and its length.
    measured: Option<(u64, Duration)>,
    /// A window the lockouts have shown: two cycles in a row let the same
    /// count through and ran as long (or the later one, as many windows
    /// long as it let that count through). Its length is the shorter
    /// cycle. Within it a probe's refusal comes only once the window's
    /// quota is spent, whatever the rate sent (so it names no ceiling),
    /// and the lockout that follows ends with the window (so the key
    /// waits for that instead of probing a refusal at a time). A lockout
    /// end that measures another count or length, a refusal of the
    /// target, or a probe's refusal followed by an admission instead of a
    /// lockout, forgets it.
    window: Option<Duration>,
    /// What the last cut, a refused probe, read over: see [`ProbeRead`].
    probe_read: Option<ProbeRead>,
    /// Whether the last refusal was a probe's within the window: a
    /// lockout is expected next, and an admission instead forgets the
    /// window.
    window_probe: bool,
}

/// A run of admissions that a lockout's end, or a block long enough to
/// measure it, ends (see [`Congestion::cycle`]).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cycle {
    /// When it began.
    since: Instant,
    /// How many the key was admitted since.
    admitted: u64,
    /// How long the key was held within it past the shortest wait its
    /// blocks stood for (a `Retry-After` in whole seconds may be a few
    /// milliseconds rounded up): the key's own idleness, which the
    /// cycle's span leaves out when a block measures it (see
    /// [`Congestion::block_ends_cycle`]).
    held_over: Duration,
}

impl Cycle {
    /// A cycle beginning at `since` with `admitted` so far.
    fn starting(since: Instant, admitted: u64) -> Cycle {
        Cycle {
            since,
            admitted,
            held_over: Duration::ZERO,
        }
    }
}

/// What a refused probe read its ceiling over: the hold, the sightings
/// and the refusal of a held target it found, the rate that was too fast
/// and the target held before it. A lockout right after it (refused again
/// with nothing admitted since) shows that the probe spent a quota (a
/// window admits any rate until its count is spent, so a probe
/// accelerating into one is refused far above the window's rate), not
/// that it found a rate: the ceiling held before was found again. (Read
/// as another ceiling, each such probe started the holds over, and a
/// window of 50 per 10 s was probed, and refused four times, every 23 s.)
#[derive(Debug, Clone, Copy)]
struct ProbeRead {
    hold: Duration,
    sightings: u32,
    refused_held: Option<f64>,
    probe_refused: Option<f64>,
    too_fast: f64,
    target: f64,
}

impl Congestion {
    /// Nothing learned yet.
    pub(crate) fn open() -> Congestion {
        Congestion {
            phase: Phase::Open,
            decreased_at: None,
            too_fast: 0.0,
            rate: 0.0,
            grown_at: None,
            target: 0.0,
            cut_to: 0.0,
            refused_below: None,
            refused_held: None,
            refused_held_after: Duration::ZERO,
            above_refused_held: None,
            reached_at: None,
            probe_refused: None,
            cut_at: None,
            ceiling_sightings: 0,
            guess: None,
            grown_from: None,
            admissions: 0,
            hold: super::tuning::TUNING.header_less.first_hold,
            block_hold: Duration::ZERO,
            held_since: None,
            admitted_since_cut: true,
            climb_hold: Duration::ZERO,
            locked: false,
            locked_since: None,
            lockouts: 0,
            last_refused: None,
            cycle: None,
            measured_until: None,
            probe_echo_until: None,
            measured: None,
            window: None,
            probe_read: None,
            window_probe: false,
        }
    }

    /// Going on from `rate`, in `phase`, with `too_fast` the rate refused
    /// (a key that comes back, or joins a fleet that has learned a rate).
    pub(crate) fn resumed(phase: Phase, rate: f64, too_fast: f64) -> Congestion {
        Congestion {
            phase,
            too_fast,
            rate,
            target: too_fast * super::tuning::TUNING.header_less.recover_to,
            cut_to: rate,
            ..Congestion::open()
        }
    }

    /// Whether the rate is climbing to slow start's guess (see
    /// [`Tuning::guess_climb`]).
    pub(crate) fn climbing(&self) -> bool {
        self.guess.is_some()
    }

    /// The rate the regime climbs back to after a cut, and holds.
    pub(crate) fn target(&self) -> f64 {
        self.target
    }

    /// Whether the rate is still climbing back to its target (below it by
    /// more than a limiter's rounding of a rate to whole nanoseconds).
    pub(crate) fn recovering(&self, rate: f64) -> bool {
        self.phase == Phase::Steady && rate < self.target * (1.0 - 1e-6)
    }

    /// A response was admitted at `now`. The first admission after a
    /// lockout ends the cycle: the rate the server let through over it is
    /// the rate that is too fast from now on, and the rate climbs back to
    /// just under it.
    #[cfg(test)]
    pub(crate) fn admitted(&mut self, now: Instant, t: &Tuning) {
        self.admitted_for(now, 1, t);
    }

    /// A response was admitted at `now`, standing for `admissions` of the
    /// server's (more than one where other processes share the key's
    /// limiter: the fleet's admissions since this process's previous one).
    pub(crate) fn admitted_for(&mut self, now: Instant, admissions: u64, t: &Tuning) {
        self.admitted_since_cut = true;
        self.admissions = self.admissions.saturating_add(admissions.max(1));
        let cycle = self.cycle.unwrap_or(Cycle::starting(now, 0));
        let (since, admitted) = (cycle.since, cycle.admitted);
        if !self.locked {
            self.cycle = Some(Cycle {
                admitted: admitted + admissions.max(1),
                ..cycle
            });
            // A probe refused within the window was admitted next, not
            // locked out: no window's quota was spent.
            if std::mem::take(&mut self.window_probe) {
                self.forget_window();
            }
            return;
        }
        self.locked = false;
        self.lockouts = 0;
        self.cycle = Some(Cycle::starting(now, 1));
        self.cycle_ended(now, since, admitted, t);
    }

    /// The fleet's grants to other processes, `grants` of them since this
    /// process last saw the shared count, counted in the current cycle as
    /// admitted (see [`admitted_for`](Self::admitted_for)); not within a
    /// lockout, which admits nothing.
    pub(crate) fn granted_to_others(&mut self, grants: u64) {
        if let (Some(cycle), false) = (self.cycle.as_mut(), self.locked) {
            cycle.admitted = cycle.admitted.saturating_add(grants);
        }
    }

    /// A lockout ended at `now` the cycle that began at `since` and let
    /// `admitted` through: where the lockout was long enough to say so,
    /// what it let through is the limit.
    fn cycle_ended(&mut self, now: Instant, since: Instant, admitted: u64, t: &Tuning) {
        let ran = now.saturating_duration_since(since);
        let windows = self.windows_in(admitted, ran, t);
        // The server took the key back after the last refusal: the cycle
        // ran that long at least (a window ended in between). Within a
        // window the lockouts show, the key waits for its end, and the
        // cycle ran to that end.
        let end = self.last_refused.filter(|&r| r > since).unwrap_or(now);
        let end = windows.map_or(end, |(_, window)| end.max((since + window).min(now)));
        let span = end.saturating_duration_since(since).as_secs_f64();
        // Locked out for a small share of the cycle, the window is short
        // and the cycle's average is what the key sent, not what the
        // server allows (see `Tuning::spent_share`).
        let locked_for = self
            .locked_since
            .map_or(0.0, |l| now.saturating_duration_since(l).as_secs_f64());
        let spent = locked_for >= span * t.spent_share;
        if span < t.shortest_cycle.as_secs_f64() || (admitted as f64) < t.min_sample || !spent {
            // No rate measured; a cycle that agrees with the window shown
            // still bounds its length.
            if let (Some(_), Some((n, window))) = (self.window, windows) {
                self.window = Some(window);
                self.measured = Some((n, window));
            }
            return;
        }
        // Where the cycles show a window, its count over its length: a
        // cycle held past one window (a probe spent the next one's quota
        // early) lets several through, and its last refusal came before
        // the end of the last.
        let limit = windows.map_or(admitted as f64 / span, |(n, window)| {
            n as f64 / window.as_secs_f64().max(1e-3)
        });
        self.refused_held = None;
        self.probe_refused = None;
        self.window = windows.map(|(_, window)| window);
        self.measured = Some(windows.unwrap_or((admitted, ran)));
        // A window shows within one cycle whether a rate holds: holding
        // longer than the cycle measured only wastes it.
        let cycle = Duration::from_secs_f64(span).min(t.first_hold);
        let same = self.window.is_some() || t.same_rate(limit, self.too_fast);
        self.ceiling_read(same, cycle, t);
        self.too_fast = limit;
        self.target = limit * t.recover_to;
        // The lockout's cuts may have left the rate above the limit now
        // measured: it goes down to the target at once.
        self.rate = self.rate.min(self.target);
        self.cut_to = self.rate;
        self.held_since = None;
        let admitting = self
            .locked_since
            .map_or(Duration::ZERO, |l| l.saturating_duration_since(since));
        self.measured_until = Some(now + admitting);
    }

    /// The window a cycle that let `admitted` through over `ran` shows
    /// with the one measured before it, as what one window lets through
    /// and its length: a window lets the same count through in every
    /// cycle, and its cycles (from the end of one lockout to the end of
    /// the next) are as long as it is (a count is exact where a rate over
    /// a cycle whose start was found late is not). Held past a window's
    /// length, a cycle spans several windows, each letting that count
    /// through.
    fn windows_in(&self, admitted: u64, ran: Duration, t: &Tuning) -> Option<(u64, Duration)> {
        let (n, r) = self.measured?;
        let k = (ran.as_secs_f64() / r.as_secs_f64().max(1e-3))
            .round()
            .max(1.0);
        (t.same_rate(admitted as f64, k * n as f64)
            && t.same_rate(ran.as_secs_f64(), k * r.as_secs_f64()))
        .then(|| (n, r.min(ran.div_f64(k))))
    }

    /// A refusal of a request sent after the last cut, while `delivered`
    /// was being sent and the server was seen to admit `admitted` (where
    /// measured); `sent` is the key's send count now. Returns the rate to
    /// go down to.
    pub(crate) fn cut(
        &mut self,
        now: Instant,
        sent: u64,
        (delivered, admitted): (f64, Option<Admitted>),
        t: &Tuning,
    ) -> f64 {
        let delivered = delivered.max(t.min_rate);
        // Sending faster than the server lets through (slow start's
        // overshoot, a rate found too high): what it let through is the
        // better measure of the rate that is too fast. Not for a probe,
        // whose climb a second's average lags.
        let measured = admitted.map_or(delivered, |a| delivered.min(a.average.max(t.min_rate)));
        let probing = self.phase == Phase::Steady && self.rate > self.target;
        let overrun = self.measured_until.is_some_and(|until| now < until);
        let echo = self
            .probe_echo_until
            .take()
            .is_some_and(|until| now < until);
        let held = self.target;
        let probe_read = self.probe_read.take();
        let mut guess = None;
        let mut grown_from = None;
        // A growth read within the first hold, and what the server
        // admitted since, where enough came to measure it.
        let grew = self
            .grown_from
            .filter(|&(_, at, _)| now.saturating_duration_since(at) < t.first_hold)
            .and_then(|g| Some((g.0, self.admitted_since(g, now, t)?)));
        let (too_fast, target, rate) = match self.phase {
            Phase::Open | Phase::SlowStart => {
                // The limit lies between what was admitted and the rate
                // the ramp was refused at: recover to the first, then
                // climb to the second. The rate delivered, measured over
                // the ramp's last sends, lags where it ended and does not
                // bound it.
                let refused_at = admitted.map_or(measured, |a| a.at_end.max(measured));
                guess = (refused_at > measured * (1.0 + t.same_ceiling)).then_some(refused_at);
                (
                    refused_at,
                    measured * t.recover_to,
                    measured * t.first_decrease,
                )
            }
            // Refused again before anything was admitted: a lockout. (The
            // caller cuts no more for a server that never admitted the key:
            // failing, not limiting.)
            Phase::Steady if !self.admitted_since_cut => {
                // What was too fast is measured when the lockout ends (see
                // `admitted`); meanwhile only sending less ends it.
                if !self.locked {
                    self.locked_since = self.cut_at.or(Some(now));
                }
                self.locked = true;
                self.window_probe = false;
                self.lockouts = self.lockouts.saturating_add(1);
                self.last_refused = Some(now);
                let from = self.rate.min(delivered);
                // Locked out right after a refused probe: the probe spent
                // a quota, and found the ceiling held before it again. The
                // hold doubles and the target rises by a step at most, as
                // after a probe refused where the last one was; but no
                // sighting is counted (the holds that last
                // `probe_sends` sends are for a ceiling a probe's rate
                // found: the target held may be a lockout's low guess).
                let (too_fast, target) = match probe_read {
                    Some(before) => {
                        self.hold = self.hold.max((before.hold * 2).min(t.max_hold));
                        self.ceiling_sightings = before.sightings;
                        self.refused_held = before.refused_held;
                        // The rate the probe spent the quota at names no
                        // ceiling either.
                        self.probe_refused = before.probe_refused;
                        self.refused_below = None;
                        let step = before.target * (1.0 + t.max_rise);
                        (before.too_fast, held.min(step).max(before.target))
                    }
                    None => (self.too_fast, held),
                };
                (too_fast, target, from * t.lockout_decrease)
            }
            // A probe refused: the target held through the hold was fine,
            // and the server refused somewhere between it and `delivered`.
            // Refused where the last probe was, the refusal is late (the
            // server absorbs a burst above its limit): the target rises by
            // at most a step. Refused elsewhere, the server changed: the
            // target goes to just under the rate refused.
            // A probe refused within a window the lockouts have shown:
            // the window's quota is spent, and the end of the lockout
            // that follows measures the limit again. The target held
            // stands.
            Phase::Steady if probing && self.window.is_some() => {
                self.window_probe = true;
                (
                    self.too_fast,
                    held,
                    self.rate.min(delivered) * t.later_decrease,
                )
            }
            Phase::Steady if probing => {
                // Refused further past the target than a bucket's burst
                // carries a probe, it ran past a window or a log, whose
                // echo may follow.
                let past_a_burst = delivered > held * (1.0 + t.probe_overrun);
                self.probe_echo_until = self
                    .probe_began(held, t)
                    .filter(|_| past_a_burst)
                    .and_then(|began| now.checked_add(now.saturating_duration_since(began)));
                // Climbing to slow start's guess, fast enough for a
                // window to let it run past its limit before refusing:
                // what the server let through is the better measure.
                let delivered = if self.guess.is_some() {
                    measured
                } else {
                    delivered
                };
                // The climb refused where slow start's admissions said the
                // limit was: the second sighting of that ceiling.
                let seen = self.guess.is_some() && t.same_rate(delivered, held / t.recover_to);
                // Refused only after a while at its reach, twice the
                // target: the server let the key through at far more than
                // the target held, and a refusal of that target read
                // before no longer names its ceiling.
                if self.reached_at.is_some() {
                    self.refused_held = None;
                    self.probe_refused = None;
                }
                // A probe accelerates past a bucket's rate for as long as
                // its burst lasts: refused a little further above the
                // ceiling than a refusal at a steady rate would be.
                let overran = delivered >= self.too_fast * (1.0 - t.same_ceiling)
                    && delivered <= self.too_fast * (1.0 + t.probe_overrun);
                let same = overran
                    || seen
                    || (self.refused_held.is_some()
                        && self
                            .probe_refused
                            .is_some_and(|p| t.same_rate(delivered, p)));
                self.probe_refused = Some(delivered);
                self.probe_read = Some(self.probe_read_now(held));
                self.ceiling_read(same, t.first_hold, t);
                let most = if same {
                    let shown = self
                        .refused_held
                        .map_or(f64::INFINITY, |r| r * t.recover_to);
                    (held * (1.0 + t.max_rise)).min(shown.max(held))
                } else {
                    self.refused_held = None;
                    f64::INFINITY
                };
                let target = (delivered * t.recover_to).clamp(held, most);
                if !same && target > held {
                    grown_from = Some((held, now, self.admissions));
                }
                (delivered, target, target * t.later_decrease)
            }
            // Refused at or below a target a refused probe read as growth,
            // before it was held for a first hold: the server did not grow
            // that far. A bucket's burst let the probe run far past its
            // rate (a leaky bucket of 6 a second with a burst of 4 refused
            // probes at 7.9 a second, 1.29 times the ceiling, and the key
            // stepped back down from 7.7 a refusal at a time, six refusals
            // a probe). The key has sent past the server's rate since the
            // probe, so what the server admitted since measures that rate:
            // the target goes to just under it, and no lower than the one
            // held before the probe (which the burst's overrun says nothing
            // against), and the hold doubles. (Back to the target held
            // before, a leaky bucket of 147 a second whose probe had found
            // it far above a low guess fell back to that guess: 0.83 of its
            // limit.) The rate the probe was refused at stays the rate that
            // was too fast: a probe refused there again found the same
            // ceiling, and the target rises a step at a time (a log echoes
            // the key's own sends of a window before, and what it admitted
            // since measures those: read as another growth each time, a log
            // of 100 per 5 s probed from a low target went back to it every
            // 23 s, 0.89 of its limit). Too few admitted to measure, the
            // refusal reads as any other at or below the target.
            Phase::Steady if grew.is_some() => {
                let (before, admitted) = grew.unwrap_or((held, 0.0));
                let target = (admitted * t.recover_to).clamp(before, held.max(before));
                self.ceiling_read(true, t.first_hold, t);
                let from = self.rate.min(measured);
                (self.too_fast, target, from * t.first_decrease)
            }
            // Refused at or below the target: it was too high (the server
            // tightened, or the rate refused was overestimated).
            // Not below what the server let through over the cycle so far,
            // though: a refusal soon after a block (a window not yet
            // reopened) is not a rate a few sends measured. Climbing to
            // slow start's guess, the guess stands where it is above the
            // rate refused: a window or log that slow start overran goes
            // on refusing until its count of the overshoot runs out, and
            // that says nothing of what it allows after.
            // Refused at or below a limit the end of a lockout measured,
            // while what overran it ages out (see `measured_until`): the
            // target stands.
            Phase::Steady if overrun || echo => {
                let from = self.rate.min(delivered);
                (self.too_fast, held, from * t.first_decrease)
            }
            Phase::Steady => {
                // No window paces the key now; the cycles measured stand,
                // for the lockouts to show it again.
                self.window = None;
                let sent = self.rate.min(measured);
                // Refused again, within a cycle, where the last such
                // refusal came, both read from a rate: the key's own, or
                // a second's admissions. That is the ceiling, whatever the
                // cycle let through before (a window's first burst is in
                // it). A few sends measured after a block are not a rate.
                let at_rate = admitted.is_some() || measured >= self.rate * (1.0 - t.same_ceiling);
                let again = at_rate
                    && self.refused_below.is_some_and(|(at, r)| {
                        now.saturating_duration_since(at) < t.min_cycle && t.same_rate(sent, r)
                    });
                self.refused_below = at_rate.then_some((now, sent));
                let from = if again {
                    sent
                } else {
                    sent.max(self.cycle_rate(now, t))
                };
                guess = self.guess.filter(|&g| g > from * (1.0 + t.same_ceiling));
                // A target found far too high (a window overrun by slow
                // start, stepping the key down as it frees its slots)
                // starts the holds over: the hold an earlier block brought
                // was for a probe past a target thought right.
                if from * t.recover_to < held * t.holds_over_below {
                    self.holds_over(t.first_hold);
                }
                // Refused while recovering, the rate may still pay for
                // what the cut before it sent (a queue in front full of
                // the probe's excess): only a refusal of the rate held
                // shows a ceiling.
                if let Some(since) = self.held_since {
                    self.refused_held = Some(from);
                    self.refused_held_after = now.saturating_duration_since(since);
                }
                (from, from * t.recover_to, from * t.first_decrease)
            }
        };
        let rate = rate.max(t.min_rate);
        *self = Congestion {
            phase: Phase::Steady,
            decreased_at: Some(sent),
            too_fast,
            rate,
            grown_at: Some(now),
            target: target.max(t.min_rate),
            cut_to: rate,
            cut_at: Some(now),
            guess,
            grown_from,
            held_since: None,
            admitted_since_cut: false,
            climb_hold: Duration::ZERO,
            reached_at: None,
            above_refused_held: None,
            ..*self
        };
        rate
    }

    /// What the server admitted per second since a growth was read
    /// (`grown_from`), where enough admissions came to measure it
    /// ([`Tuning::min_sample`]).
    fn admitted_since(
        &self,
        (_, at, admissions): (f64, Instant, u64),
        now: Instant,
        t: &Tuning,
    ) -> Option<f64> {
        let since = self.admissions.saturating_sub(admissions) as f64;
        let span = now.saturating_duration_since(at).as_secs_f64();
        (since >= t.min_sample && span > 0.0).then(|| since / span)
    }

    /// What a probe refused now, from the target `held`, reads over.
    fn probe_read_now(&self, held: f64) -> ProbeRead {
        ProbeRead {
            hold: self.hold,
            sightings: self.ceiling_sightings,
            refused_held: self.refused_held,
            probe_refused: self.probe_refused,
            too_fast: self.too_fast,
            target: held,
        }
    }

    /// A refused probe or the end of a lockout read a ceiling: the `same`
    /// one as before doubles the hold (up to [`Tuning::max_hold`]) and
    /// counts a sighting; another starts the holds over from `fresh_hold`.
    /// Either way, a refusal below the target read before it names no
    /// ceiling with the ones after.
    fn ceiling_read(&mut self, same: bool, fresh_hold: Duration, t: &Tuning) {
        if same {
            self.ceiling_sightings = self.ceiling_sightings.saturating_add(1);
            self.hold = (self.hold * 2).min(t.max_hold);
        } else {
            self.holds_over(fresh_hold);
        }
        self.refused_below = None;
    }

    /// The holds start over from `fresh_hold`: no ceiling sighted, and no
    /// block's hold (it was for a probe past a ceiling no longer held).
    fn holds_over(&mut self, fresh_hold: Duration) {
        self.ceiling_sightings = 0;
        self.hold = fresh_hold;
        self.block_hold = Duration::ZERO;
    }

    /// Evidence disagreed with the window: what the lockouts measured goes
    /// with it, so that two cycles in a row must show it again.
    fn forget_window(&mut self) {
        self.window = None;
        self.measured = None;
        self.window_probe = false;
    }

    /// What the server let through since the cycle began, per second,
    /// once the cycle has run a while ([`Tuning::min_cycle`]); 0 before.
    fn cycle_rate(&self, now: Instant, t: &Tuning) -> f64 {
        let Some(Cycle {
            since, admitted, ..
        }) = self.cycle
        else {
            return 0.0;
        };
        let span = now.saturating_duration_since(since);
        if span < t.min_cycle {
            return 0.0;
        }
        admitted as f64 / span.as_secs_f64()
    }

    /// The last refusal held the key for `wait` (its `Retry-After`): the
    /// next probe is no sooner than [`Tuning::blocked_hold`] times that.
    pub(crate) fn blocked_for(&mut self, now: Instant, wait: Duration, t: &Tuning) {
        // A wait of nothing (`Retry-After: 0`, a few milliseconds rounded
        // down) holds nothing, and costs a refused probe nothing either:
        // the server's refusals cost no block now, whatever an earlier one
        // (slow start's overrun of a log) did.
        if wait.is_zero() {
            self.block_hold = Duration::ZERO;
            return;
        }
        self.block_ends_cycle(now, wait, t);
        // Doubled as often as the hold was for refusals at one ceiling.
        let wait = wait.min(t.max_hold);
        let factor = t.blocked_hold * f64::from(1u32 << self.ceiling_sightings.min(8));
        let hold = wait.mul_f64(factor).min(t.max_sends_hold);
        self.block_hold = self.block_hold.max(hold);
        // Climbing to slow start's guess is a probe, and a refused probe
        // here costs the block. Held at the target, the key loses the
        // share of the guess the target lies below: the climb waits until
        // that loss equals the block (a target at half the guess waits
        // two blocks), and no longer than a probe would.
        if let Some(guess) = self.guess {
            let gain = (1.0 - self.target / guess).max(1.0 / t.blocked_hold);
            self.climb_hold = self.climb_hold.max(wait.div_f64(gain).min(hold));
        }
    }

    /// A refusal at `now` that holds the key for `wait` ends the cycle at
    /// the block's end, as a lockout's end does (see
    /// [`admitted`](Self::admitted)): where the block is at least
    /// [`Tuning::spent_share`] of a cycle of [`Tuning::min_cycle`] or
    /// more, what the cycle let through over its span to the block's end
    /// bounds the rate that is too fast. A window or log that slow start
    /// spent in a few seconds holds the key until the window ends (or its
    /// first admissions age out), and its quota over that span is its
    /// limit; the second's admissions before the refusal read the burst.
    /// A short block at the end of a long cycle measures nothing (the
    /// cycle's average is what the key chose to send), and a bound above
    /// the rate already found too fast says nothing new. The span leaves
    /// out the key's own waits past the shortest ends of the blocks before
    /// it in the cycle (see [`Cycle::held_over`]).
    ///
    /// After the block, the refusals of a log whose admissions the key's
    /// burst overran (it frees its slots as fast as they were spent) keep
    /// the target for as long as that burst lasted (see
    /// `measured_until`), and the next cycle begins when the block ends.
    fn block_ends_cycle(&mut self, now: Instant, wait: Duration, t: &Tuning) {
        let Some(cycle) = self.cycle else {
            return;
        };
        let (since, admitted) = (cycle.since, cycle.admitted);
        // A wait past what an instant holds is no block to measure.
        let Some(ends) = now.checked_add(wait) else {
            return;
        };
        // A wait in whole seconds may have been rounded up: the shortest
        // it stands for bounds the rate from above.
        let shortest = match wait.subsec_nanos() {
            0 => wait.saturating_sub(Duration::from_secs(1)),
            _ => wait,
        };
        // No later than `ends`, which the instant holds. The key's own
        // idleness past the shortest waits of the blocks before is not the
        // server's (a log of 100 per 5 s spent twice over 10.6 s, 1.2 s of
        // it a whole-second wait's rounding and the release's jitter, read
        // 18.9 a second and was held at 0.92 of its limit).
        let span = (now + shortest)
            .saturating_duration_since(since)
            .saturating_sub(cycle.held_over);
        let blocked_enough = shortest.as_secs_f64() >= span.as_secs_f64() * t.spent_share;
        if span < t.min_cycle || (admitted as f64) < t.min_sample || !blocked_enough {
            self.cycle = Some(Cycle {
                held_over: cycle
                    .held_over
                    .saturating_add(wait.saturating_sub(shortest)),
                ..cycle
            });
            return;
        }
        let limit = admitted as f64 / span.as_secs_f64();
        if limit >= self.too_fast {
            return;
        }
        self.too_fast = limit;
        self.target = self.target.min(limit * t.recover_to).max(t.min_rate);
        self.rate = self.rate.min(self.target);
        self.cut_to = self.rate;
        self.guess = self.guess.filter(|&g| g <= limit);
        self.measured_until = ends.checked_add(now.saturating_duration_since(since));
        self.cycle = Some(Cycle::starting(ends, 0));
        // What the block measured stands against a lockout after it: the
        // probe it ended read nothing to go back to.
        self.probe_read = None;
    }

    /// While locked out, how long the key holds every call after a
    /// refusal: one probe per wait, the wait doubling with each refusal in
    /// a row (a lockout ends only when the key stops sending, and every
    /// call refused meanwhile spends an attempt of its own).
    ///
    /// No later, though, than the next instant the cycle would end were
    /// its window one of the lengths windows are configured in
    /// ([`ROUND_WINDOWS`]): a quota of a minute spent in its first seconds
    /// opens again exactly a minute after it began, and a probe doubling
    /// its wait finds that up to the longest wait late (the calls refused
    /// at the start of the window, waiting for it, ran out of time).
    pub(crate) fn lockout_wait(&self, now: Instant, t: &Tuning) -> Option<Duration> {
        let doubling = self.doubling_lockout_wait(t)?;
        // Within a window the lockouts have shown, a refusal before its
        // end only extends a limiter that counts refusals: wait it out.
        // Its windows follow one another from the cycle's start: a cycle
        // held past one (a probe spent the second's quota) ends at the
        // next.
        let window_end = self
            .window
            .zip(self.cycle)
            .and_then(|(window, cycle)| next_end(cycle.since, window, now));
        if let Some(end) = window_end {
            return Some(doubling.max((end - now).min(t.max_window_wait)));
        }
        let round_end = self.cycle.and_then(|cycle| {
            ROUND_WINDOWS
                .iter()
                .map(|&secs| cycle.since + Duration::from_secs(secs))
                .find(|&end| end > now)
        });
        Some(round_end.map_or(doubling, |end| doubling.min(end - now)))
    }

    /// The wait of [`lockout_wait`](Self::lockout_wait) from the doubling
    /// alone.
    fn doubling_lockout_wait(&self, t: &Tuning) -> Option<Duration> {
        if !self.locked {
            return None;
        }
        let doublings = self.lockouts.saturating_sub(1).min(16);
        // A rate that has fallen with each refusal lengthens the wait
        // faster than the doubling: the fewer the key's sends, the longer
        // its own interval.
        let intervals =
            Duration::try_from_secs_f64(t.lockout_intervals / self.rate.max(t.min_rate))
                .unwrap_or(t.max_lockout_wait);
        let first = t.first_lockout_wait.max(intervals).min(t.max_lockout_wait);
        Some((first * 2u32.pow(doublings)).min(t.max_lockout_wait))
    }

    /// How long the target `target` is held before a probe: the hold, and
    /// once a probe has found the ceiling the target was read from, no
    /// fewer than [`Tuning::probe_sends`] sends at the target (up to
    /// [`Tuning::max_sends_hold`]). Before, the target may lie well below the
    /// ceiling (a cut from a burst, a fleet's first cuts), and the first
    /// hold is all a probe waits.
    fn hold_at(&self, target: f64, t: &Tuning) -> Duration {
        if self.ceiling_sightings == 0 {
            return self.held_for();
        }
        let sends = Duration::try_from_secs_f64(t.probe_sends / target.max(t.min_rate))
            .unwrap_or(t.max_hold)
            .min(t.max_sends_hold);
        self.held_for().max(sends)
    }

    /// When the probe past `target` began (or begins): the hold's start
    /// and its length. `None` while nothing is held.
    fn probe_began(&self, target: f64, t: &Tuning) -> Option<Instant> {
        self.held_since?.checked_add(self.hold_at(target, t))
    }

    /// The hold before a probe: the probes' own, or the one the blocks
    /// since the last refusal without a wait bring, if longer.
    fn held_for(&self) -> Duration {
        self.hold.max(self.block_hold)
    }

    /// The rate after a success at `now`, from `current`, with `dt` seconds
    /// of sending since the last growth.
    pub(crate) fn grow(&mut self, now: Instant, current: f64, dt: f64, t: &Tuning) -> f64 {
        let rate = match self.phase {
            Phase::Open => t.cold_start,
            Phase::SlowStart => current * 2f64.powf(dt / t.slow_start_doubling.as_secs_f64()),
            Phase::Steady => self.steady(now, current, dt, t),
        };
        if self.phase == Phase::Open {
            self.phase = Phase::SlowStart;
        }
        self.rate = rate.max(t.min_rate);
        self.grown_at = Some(now);
        self.rate
    }

    /// Recovery, hold or probe.
    fn steady(&mut self, now: Instant, current: f64, dt: f64, t: &Tuning) -> f64 {
        self.check_refused_held(now, current, t);
        let target = self.target;
        if self.recovering(current) {
            let gap = (target - self.cut_to).max(target * t.least_recovery_gap);
            let over = t
                .recovery
                .as_secs_f64()
                .max(t.recovery_sends / self.cut_to.max(t.min_rate));
            return (current + gap * dt / over).min(target);
        }
        if let Some(guess) = self.guess {
            let since = *self.held_since.get_or_insert(now);
            if now.saturating_duration_since(since) < self.climb_hold {
                return current.max(target);
            }
            let climbed =
                current.max(target) + (guess - target).max(0.0) * dt / t.guess_climb.as_secs_f64();
            if climbed < guess {
                return climbed;
            }
            // Admitted all the way up: the server allows at least that.
            self.guess = None;
            self.target = guess;
            self.held_since = None;
            return guess;
        }
        self.hold_then_probe(now, current, dt, t)
    }

    /// Sending at `current` since the last growth, with no refusal: at
    /// the rate a held target was refused at, or above, for longer than
    /// that hold had lasted (and [`Tuning::disprove_at_least`]), the key
    /// disproved it (see `refused_held_after`). `current` is the rate the
    /// key's limiter applies: a key whose callers send less than that
    /// disproves a ceiling it did not reach (its next probe's rise is
    /// still one [`Tuning::max_rise`] at most).
    fn check_refused_held(&mut self, now: Instant, current: f64, t: &Tuning) {
        let Some(refused) = self.refused_held else {
            return;
        };
        if current < refused {
            self.above_refused_held = None;
            return;
        }
        let since = *self.above_refused_held.get_or_insert(now);
        let needed = self.refused_held_after.max(t.disprove_at_least);
        if now.saturating_duration_since(since) > needed {
            self.refused_held = None;
            self.above_refused_held = None;
        }
    }

    /// Hold the target, then probe beyond it, up to its reach
    /// ([`Tuning::probe_reach`]).
    fn hold_then_probe(&mut self, now: Instant, current: f64, dt: f64, t: &Tuning) -> f64 {
        let target = self.target;
        self.held_since.get_or_insert(now);
        let probing_for = self
            .probe_began(target, t)
            .map_or(Duration::ZERO, |began| now.saturating_duration_since(began));
        if probing_for.is_zero() {
            return current.max(target);
        }
        let speed = t.probe_per_second
            * target
            * 2f64.powf(probing_for.as_secs_f64() / t.probe_doubling.as_secs_f64());
        let probed = current.max(target) + speed * dt;
        // No further than its reach: admitted there long enough, the
        // server grew, and the next probe goes on from there after a hold.
        let reach = target * t.probe_reach;
        if probed < reach {
            return probed;
        }
        // Held there without a refusal for a hold (and a window's length,
        // where the lockouts showed one: a window admits any rate until
        // its quota is spent).
        let reached = *self.reached_at.get_or_insert(now);
        let long_enough = self.held_for().max(self.window.unwrap_or(Duration::ZERO));
        if now.saturating_duration_since(reached) >= long_enough {
            self.target = reach;
            self.too_fast = self.too_fast.max(reach / t.recover_to);
            self.held_since = Some(now);
            self.holds_over(t.first_hold);
            self.reached_at = None;
        }
        reach
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Tuning = crate::client::tuning::TUNING.header_less;

    /// Steady at `rate`, with `too_fast` refused before, after `n`
    /// admissions `every_ms` apart from `start`.
    fn steady_after(
        start: Instant,
        (rate, too_fast): (f64, f64),
        n: u64,
        every_ms: u64,
    ) -> Congestion {
        let mut c = Congestion::resumed(Phase::Steady, rate, too_fast);
        for k in 0..n {
            c.admitted(start + Duration::from_millis(every_ms * k), &T);
        }
        c
    }

    /// A rate that doubles every half second, averaged over its last
    /// second, reads 3/(8 ln 2) of where it ended; over no time, all of it.
    #[test]
    fn a_ramp_averaged_reads_its_share_of_where_it_ended() {
        let share = T.ramp_share(Duration::from_secs(1));
        assert!(
            (share - 3.0 / (8.0 * std::f64::consts::LN_2)).abs() < 1e-12,
            "{share}"
        );
        // Summed in 1 ms steps, the same.
        let steps = 1_000;
        let mean = (0..steps)
            .map(|k| 2f64.powf(-(k as f64 + 0.5) / 500.0))
            .sum::<f64>()
            / steps as f64;
        assert!((share - mean).abs() < 1e-6, "{share} vs {mean}");
        assert_eq!(T.ramp_share(Duration::ZERO), 1.0);
    }

    /// Ending slow start, the cut recovers to what the server was seen to
    /// admit, then climbs to the rate its admissions had reached (no more
    /// than was sent) over the climb's time, and holds there when no
    /// refusal comes.
    #[test]
    fn slow_start_recovers_to_what_was_admitted_then_climbs_to_where_it_ended() {
        let start = Instant::now();
        let mut c = Congestion::resumed(Phase::SlowStart, 40.0, 0.0);
        let at_end = 11.0 / T.ramp_share(Duration::from_secs(1));
        let admitted = Admitted {
            average: 11.0,
            at_end,
        };
        let mut rate = c.cut(start, 1, (25.0, Some(admitted)), &T);
        assert_eq!(rate, 11.0 * T.first_decrease);
        assert_eq!(c.target(), 11.0 * T.recover_to);
        assert!(c.climbing());
        let step = 0.05;
        let mut at = start;
        for _ in 0..((T.recovery + T.guess_climb).as_secs_f64() / step) as usize + 10 {
            at += Duration::from_secs_f64(step);
            rate = c.grow(at, rate, step, &T);
        }
        assert!(!c.climbing());
        assert!((rate - at_end).abs() < 1e-9, "{rate} vs {at_end}");
        // A delivered rate measured over the ramp's last sends lags its
        // end: the ramp's end (no higher than the rate applied, which the
        // caller's `Admitted` is capped by) is what the climb goes to.
        let mut c = Congestion::resumed(Phase::SlowStart, 40.0, 0.0);
        c.cut(start, 1, (18.0, Some(admitted)), &T);
        assert_eq!(c.too_fast, at_end);
    }

    /// Slow start spends a window of 300 in its first 3 s (seen to admit
    /// 150 a second) and the refusal holds the key 7.5 s: the window is
    /// 300 per 10.5 s at most, and that is what the key comes back to,
    /// not the burst's second. After the block the refusals of a log
    /// freeing its slots as fast as the burst spent them keep that target
    /// for as long as the burst lasted. A whole-second wait may have been
    /// rounded up: the bound takes the shortest it stands for. A short
    /// block at the end of a long cycle measures nothing.
    #[test]
    fn a_long_block_ends_the_cycle_and_bounds_the_rate_by_what_it_let_through() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let spent = |wait: Duration| {
            let mut c = Congestion::resumed(Phase::SlowStart, 40.0, 0.0);
            for k in 0..300 {
                c.admitted(at(10 * k), &T);
            }
            let admitted = Admitted {
                average: 150.0,
                at_end: 250.0,
            };
            c.cut(at(3_000), 301, (250.0, Some(admitted)), &T);
            assert_eq!(c.target(), 150.0 * T.recover_to);
            c.blocked_for(at(3_000), wait, &T);
            c
        };
        let c = spent(Duration::from_millis(7_500));
        let limit = 300.0 / 10.5;
        assert!((c.too_fast - limit).abs() < 1e-9, "{}", c.too_fast);
        assert!((c.target() - limit * T.recover_to).abs() < 1e-9);
        assert!(c.rate <= c.target());
        assert_eq!(c.guess, None);
        // Refused just after the block, the target stands.
        let mut after = c;
        after.cut(at(10_600), 302, (c.target(), None), &T);
        assert_eq!(after.target(), c.target());
        // `Retry-After: 8` may stand for 7.01 s: 300 per 10 s at most.
        let c = spent(Duration::from_secs(8));
        assert!((c.too_fast - 30.0).abs() < 1e-9, "{}", c.too_fast);
        // A 500 ms block after 3 s of sending is a burst's refusal.
        let c = spent(Duration::from_millis(500));
        assert_eq!(c.target(), 150.0 * T.recover_to);
        // A wait no instant holds measures nothing, and does not panic.
        let c = spent(Duration::MAX);
        assert_eq!(c.target(), 150.0 * T.recover_to);
    }

    /// Slow start cut where the server was seen to admit 11 a second on
    /// average and the ramp had reached 20: the instant, the regime and
    /// the rate it cut to.
    fn slow_start_cut_at_11_of_20() -> (Instant, Congestion, f64) {
        let start = Instant::now();
        let mut c = Congestion::resumed(Phase::SlowStart, 40.0, 0.0);
        let admitted = Admitted {
            average: 11.0,
            at_end: 20.0,
        };
        let rate = c.cut(start, 1, (25.0, Some(admitted)), &T);
        (start, c, rate)
    }

    /// A refusal that holds the key (a `Retry-After`) ends slow start with
    /// the climb put off: a refused climb costs the block, and holding at
    /// the target costs the share of the guess it lies below. The climb
    /// waits until the two are even: a 1 s block, 11 admitted of a guess of
    /// 20, about 2.1 s.
    #[test]
    fn a_refusal_that_holds_the_key_puts_the_climb_off_until_the_hold() {
        let (start, mut c, mut rate) = slow_start_cut_at_11_of_20();
        c.blocked_for(start, Duration::from_secs(1), &T);
        let hold = Duration::from_secs(1).div_f64(1.0 - 11.0 * T.recover_to / 20.0);
        assert!(hold < Duration::from_secs(1).mul_f64(T.blocked_hold));
        let step = 0.05;
        let mut at = start;
        let mut rate_at = |until: Duration, rate: &mut f64, at: &mut Instant| {
            while *at < start + until {
                *at += Duration::from_secs_f64(step);
                *rate = c.grow(*at, *rate, step, &T);
            }
            *rate
        };
        // Recovered to what was admitted, and held there through the hold.
        let held = rate_at(
            T.recovery + hold - Duration::from_millis(100),
            &mut rate,
            &mut at,
        );
        assert_eq!(held, 11.0 * T.recover_to);
        // Then the climb.
        let climbed = rate_at(T.recovery + hold + T.guess_climb * 2, &mut rate, &mut at);
        assert_eq!(climbed, 20.0);
    }

    /// A block of 10 ms puts the climb off for its break-even (about
    /// 21 ms here), not for the whole first hold: once recovered, the climb
    /// starts at once and is done well before the first hold would have
    /// ended.
    #[test]
    fn a_short_block_puts_the_climb_off_for_its_share_only() {
        let (start, mut c, mut rate) = slow_start_cut_at_11_of_20();
        c.blocked_for(start, Duration::from_millis(10), &T);
        let step = 0.05;
        let mut at = start;
        let mut recovered = None;
        while at < start + T.recovery + T.guess_climb * 2 {
            at += Duration::from_secs_f64(step);
            rate = c.grow(at, rate, step, &T);
            if rate > c.target() && recovered.is_none() {
                recovered = Some(at);
            }
        }
        assert_eq!(rate, 20.0);
        let climbing = recovered.expect("climbs") - start;
        assert!(
            climbing <= T.recovery + Duration::from_millis(200),
            "{climbing:?}"
        );
    }

    /// A window that slow start overran refuses again soon after the cut,
    /// at a rate below the target: the rate is cut, and the climb to slow
    /// start's guess goes on once recovered.
    #[test]
    fn a_refusal_below_the_target_keeps_slow_starts_guess() {
        let (start, mut c, rate) = slow_start_cut_at_11_of_20();
        c.admitted(start + Duration::from_millis(10), &T);
        let mut at = start + Duration::from_millis(30);
        let mut rate = c.cut(at, 2, (rate, None), &T);
        assert!(rate < 11.0 * T.first_decrease);
        assert!(c.climbing());
        let step = 0.05;
        while at < start + T.recovery * 2 + T.guess_climb * 2 {
            at += Duration::from_secs_f64(step);
            rate = c.grow(at, rate, step, &T);
        }
        assert_eq!(rate, 20.0);
    }

    /// The climb refused where slow start's admissions said the limit was
    /// (a log saturated by slow start admits its limit on average) has seen
    /// that ceiling twice: the hold doubles, and so does the hold a block
    /// brings, so that a server whose every refusal costs a second probes
    /// half as often.
    #[test]
    fn a_climb_refused_at_what_slow_start_admitted_doubles_the_holds() {
        let (start, mut c, _) = slow_start_cut_at_11_of_20();
        let at = start + Duration::from_secs(3);
        c.admitted(at, &T);
        c.rate = 15.0;
        let admitted = Admitted {
            average: 11.2,
            at_end: 11.2,
        };
        c.cut(at, 2, (15.0, Some(admitted)), &T);
        assert!(!c.climbing());
        assert_eq!(c.hold, T.first_hold * 2);
        c.blocked_for(start, Duration::from_secs(1), &T);
        let blocked = Duration::from_secs(1).mul_f64(T.blocked_hold * 2.0);
        assert_eq!(c.held_for(), blocked.min(T.max_sends_hold));
        // Refused between the two, the climb found a new ceiling: the
        // first hold, and a block's own.
        let (start, mut c, _) = slow_start_cut_at_11_of_20();
        c.admitted(at, &T);
        c.rate = 17.0;
        let admitted = Admitted {
            average: 16.0,
            at_end: 16.0,
        };
        c.cut(
            start + Duration::from_secs(3),
            2,
            (17.0, Some(admitted)),
            &T,
        );
        assert_eq!(c.hold, T.first_hold);
        c.blocked_for(start, Duration::from_secs(1), &T);
        assert_eq!(c.held_for(), Duration::from_secs(1).mul_f64(T.blocked_hold));
    }

    /// A block of seconds puts the next probe off by
    /// [`Tuning::blocked_hold`] times as long, past the longest hold a
    /// probe refused without one brings (each probe refused costs the
    /// block's traffic as well), up to [`Tuning::max_sends_hold`].
    #[test]
    fn a_long_block_puts_the_next_probe_past_the_longest_hold() {
        let (start, mut c, _) = slow_start_cut_at_11_of_20();
        c.blocked_for(start, Duration::from_secs(5), &T);
        let hold = Duration::from_secs(5).mul_f64(T.blocked_hold);
        assert!(hold > T.max_hold);
        assert_eq!(c.held_for(), hold.min(T.max_sends_hold));
        c.blocked_for(start, Duration::from_secs(60), &T);
        assert_eq!(c.held_for(), T.max_sends_hold);
    }

    /// Slow start's overrun of a log of 3,181 per 19 s blocked the key for
    /// 14 s; the refusals after it ask for no wait (a log frees a slot at
    /// a time): a probe's refusal costs no block now, and the next probe
    /// waits the probes' own hold, not the 256 s the first block brought.
    /// (Held by it, the key sat at 0.66 of the log's limit for four
    /// minutes.) A later block brings its hold back.
    #[test]
    fn a_refusal_without_a_wait_ends_the_hold_an_earlier_block_brought() {
        let (start, mut c, _) = slow_start_cut_at_11_of_20();
        c.blocked_for(start, Duration::from_secs(14), &T);
        assert_eq!(c.held_for(), T.max_sends_hold);
        c.blocked_for(start, Duration::ZERO, &T);
        assert_eq!(c.held_for(), c.hold);
        assert!(c.held_for() < T.max_sends_hold);
        c.blocked_for(start, Duration::from_secs(2), &T);
        assert_eq!(c.held_for(), Duration::from_secs(2).mul_f64(T.blocked_hold));
    }

    /// A leaky bucket of 6 a second with a burst of 4: a probe from a
    /// target of 5.87 runs to 7.9 a second on the burst before it is
    /// refused, past the overrun a burst is allowed, and reads as a server
    /// that grew (the target goes to just under 7.9). Refused again at 7.3
    /// within the first hold, with five admissions in the 0.9 s since (5.6
    /// a second: the key sent faster than that all along), the growth is
    /// disproved: the target goes back to the one held before, and the
    /// hold doubles. Seven admitted in that time (7.8 a second) measure the
    /// server's rate: the target goes to just under it. Too few to measure,
    /// or past the first hold, the refusal is read as any other.
    #[test]
    fn a_probe_read_as_growth_and_refused_soon_after_is_measured() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let refused_after = |admitted: u64, refused_at: u64| {
            let mut c = Congestion::resumed(Phase::Steady, 5.87, 6.05);
            c.rate = 8.0;
            c.admitted(at(0), &T);
            c.cut(at(100), 1, (7.9, None), &T);
            assert!(
                (c.target() - 7.9 * T.recover_to).abs() < 1e-9,
                "{}",
                c.target()
            );
            assert_eq!(c.hold, T.first_hold);
            c.rate = 7.3;
            for k in 0..admitted {
                c.admitted(at(200 + k * 100), &T);
            }
            c.cut(at(refused_at), 2, (7.3, None), &T);
            c
        };
        let held = Congestion::resumed(Phase::Steady, 5.87, 6.05).target();
        let c = refused_after(5, 1_000);
        assert_eq!(c.target(), held);
        assert_eq!(c.hold, T.first_hold * 2);
        let c = refused_after(7, 1_000);
        assert!(
            (c.target() - 7.0 / 0.9 * T.recover_to).abs() < 1e-9,
            "{}",
            c.target()
        );
        assert_eq!(c.hold, T.first_hold * 2);
        let c = refused_after(3, 1_000);
        assert!(
            (c.target() - 7.3 * T.recover_to).abs() < 1e-9,
            "{}",
            c.target()
        );
        let c = refused_after(7, 9_000);
        assert!(
            (c.target() - 7.3 * T.recover_to).abs() < 1e-9,
            "{}",
            c.target()
        );
    }

    /// A `Retry-After: 0` (a wait of milliseconds rounded down) holds
    /// nothing: the climb to slow start's guess goes on at once, as after
    /// a refusal without one.
    #[test]
    fn a_retry_after_of_zero_does_not_put_the_climb_off() {
        let (start, mut c, mut rate) = slow_start_cut_at_11_of_20();
        c.blocked_for(start, Duration::ZERO, &T);
        let step = 0.05;
        let mut at = start;
        while at < start + T.recovery + T.guess_climb * 2 {
            at += Duration::from_secs_f64(step);
            rate = c.grow(at, rate, step, &T);
        }
        assert_eq!(rate, 20.0);
    }

    /// A window of 100 spent in the first second of a ten-second cycle,
    /// then a refusal soon after a block, a few sends measuring 3 a
    /// second: what the server let through over the cycle stands for the
    /// rate refused.
    #[test]
    fn a_refusal_below_target_cuts_no_lower_than_the_cycle_let_through() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (10.0, 20.0), 100, 10);
        assert!(
            c.cycle_rate(at(5_000), &T) == 0.0,
            "a short cycle measures nothing"
        );
        c.cut(at(10_000), 100, (3.0, None), &T);
        assert_eq!(c.too_fast, 10.0, "100 over 10 s, not the 3 a second sent");
        // The same refusal four seconds into the cycle: the few sends.
        let mut c = steady_after(start, (10.0, 20.0), 100, 10);
        c.cut(at(4_000), 100, (5.0, None), &T);
        assert_eq!(c.too_fast, 5.0);
    }

    /// A sliding counter whose first window let a burst through: the cycle
    /// let through 84 a second, and the key is refused at 61 a second,
    /// twice. The first refusal cuts no lower than the cycle; the second,
    /// at the same rate, is the ceiling: the target goes just under it.
    #[test]
    fn a_second_refusal_below_the_target_at_one_rate_is_the_ceiling_sent_at() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (60.0, 90.0), 840, 12);
        c.cut(at(10_000), 840, (61.0, None), &T);
        let cycle = 840.0 / 10.0;
        assert!((c.too_fast - cycle).abs() < 1e-9, "{}", c.too_fast);
        c.admitted(at(10_100), &T);
        c.rate = 62.0;
        c.cut(at(10_500), 841, (61.5, None), &T);
        assert_eq!(c.too_fast, 61.5);
        assert_eq!(c.target(), 61.5 * T.recover_to);
    }

    /// Two refusals soon after a block, each read from a few sends (3 a
    /// second while the rate applied is 7): not a rate the key sent at, so
    /// they name no ceiling, and the cycle's floor stands.
    #[test]
    fn refusals_read_from_a_few_sends_name_no_ceiling() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (10.0, 20.0), 100, 100);
        c.rate = 7.0;
        c.cut(at(10_000), 100, (3.0, None), &T);
        c.admitted(at(10_100), &T);
        c.rate = 7.0;
        c.cut(at(10_500), 101, (3.0, None), &T);
        assert!(c.too_fast > 9.0, "{}", c.too_fast);
    }

    /// A log overrun by slow start frees its slots in the ramp's shape:
    /// climbing to slow start's guess, the key is refused at 67 a second
    /// while the server admits 30 of it, again and again. A second's
    /// admissions are a rate: two such refusals name the ceiling, and the
    /// cycle's floor (96 a second) does not hold the key in the storm.
    #[test]
    fn refusals_read_from_a_seconds_admissions_name_the_ceiling() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (67.0, 100.0), 960, 10);
        c.guess = Some(1_000.0);
        let admitted = |average| {
            Some(Admitted {
                average,
                at_end: average,
            })
        };
        c.rate = 67.0;
        c.cut(at(10_000), 960, (67.0, admitted(30.0)), &T);
        assert!(c.too_fast > 90.0, "the cycle's floor first: {}", c.too_fast);
        c.admitted(at(10_020), &T);
        c.rate = 67.0;
        c.cut(at(10_050), 961, (67.0, admitted(31.0)), &T);
        assert_eq!(c.too_fast, 31.0);
    }

    /// Slow start's cut brought a 1 s block, and with it a long hold. The
    /// window it overran then steps the key down to under half its target:
    /// the holds start over, and the key probes again after the first
    /// hold, not after the one the block brought.
    #[test]
    fn a_target_found_far_too_high_starts_the_holds_over() {
        let (start, mut c, _) = slow_start_cut_at_11_of_20();
        c.blocked_for(start, Duration::from_secs(1), &T);
        assert!(c.held_for() > T.first_hold);
        c.admitted(start + Duration::from_millis(100), &T);
        let held = c.target();
        c.cut(
            start + Duration::from_millis(200),
            2,
            (held * 0.6, None),
            &T,
        );
        assert!(
            c.held_for() > T.first_hold,
            "a small correction keeps the hold"
        );
        c.admitted(start + Duration::from_millis(300), &T);
        c.cut(
            start + Duration::from_millis(400),
            3,
            (held * 0.2, None),
            &T,
        );
        assert_eq!(c.held_for(), T.first_hold);
    }

    #[test]
    fn a_probe_refused_at_the_same_ceiling_doubles_the_hold_up_to_the_most() {
        let now = Instant::now();
        let mut c = Congestion::resumed(Phase::Steady, 19.4, 20.0);
        for expected in [16, 32, 64, 64] {
            c.rate = 20.5;
            c.admitted(now, &T);
            c.cut(now, 1, (20.3, None), &T);
            assert_eq!(c.hold, Duration::from_secs(expected));
        }
        // A probe refused far above: the server grew, the holds start over.
        c.rate = 30.0;
        c.admitted(now, &T);
        c.cut(now, 1, (29.0, None), &T);
        assert_eq!(c.hold, T.first_hold);
    }

    /// A bucket of 20 a second with a burst lets an accelerating probe run
    /// to 22.8 before it refuses: within [`Tuning::probe_overrun`] of the
    /// ceiling refused before, the same ceiling. The target rises by at
    /// most [`Tuning::max_rise`] and the hold doubles (read as a server
    /// grown, the target went above the rate, and coming back down from
    /// it took four refusals). Refused once held, the target stays under
    /// that refusal when the next probe is refused there again. A probe
    /// refused far above (the server grew) moves the target there.
    #[test]
    fn a_probe_refused_a_burst_past_the_ceiling_found_the_same_one() {
        let now = Instant::now();
        let later = |s: u64| now + Duration::from_secs(s);
        let mut c = Congestion::resumed(Phase::Steady, 19.4, 20.0);
        let held = c.target();
        let probe_refused_at = |c: &mut Congestion, at: Instant, rate: f64| {
            c.rate = rate + 0.2;
            c.admitted(at, &T);
            c.cut(at, 1, (rate, None), &T);
        };
        probe_refused_at(&mut c, now, 22.8);
        assert!(c.target() >= held, "{}", c.target());
        assert!(
            c.target() <= held * (1.0 + T.max_rise) + 1e-9,
            "{}",
            c.target()
        );
        assert_eq!(c.hold, T.first_hold * 2);
        // The target reached and held, then refused.
        c.admitted(later(1), &T);
        c.grow(later(1), c.target(), 0.0, &T);
        c.cut(later(1), 2, (20.5, None), &T);
        let after_held_refusal = c.target();
        assert!(after_held_refusal < 20.0, "{after_held_refusal}");

        probe_refused_at(&mut c, later(20), 22.8);
        assert_eq!(c.target(), after_held_refusal);
        assert_eq!(c.hold, T.first_hold * 4);

        probe_refused_at(&mut c, later(50), 44.0);
        assert!((c.target() - 44.0 * T.recover_to).abs() < 1e-9);
        assert_eq!(c.hold, T.first_hold);
    }

    /// Locked out at a slow rate, the first wait is a few of the key's own
    /// intervals, not the fixed first wait that is shorter than one of
    /// them; at a fast rate, the fixed first wait.
    #[test]
    fn a_lockout_waits_a_few_intervals_of_a_slow_rate() {
        let now = Instant::now();
        let lockout = |rate: f64| {
            let mut c = Congestion::resumed(Phase::Steady, rate, rate * 1.1);
            c.admitted(now, &T);
            c.cut(now, 1, (rate, None), &T);
            assert_eq!(c.doubling_lockout_wait(&T), None, "admitted before the cut");
            let cut_to = c.cut(now, 2, (rate, None), &T);
            (cut_to, c.doubling_lockout_wait(&T).expect("locked out"))
        };
        let (cut_to, slow) = lockout(3.0);
        assert!(slow > T.first_lockout_wait, "{slow:?}");
        assert!(slow.as_secs_f64() >= T.lockout_intervals / cut_to - 1e-9);
        let (_, fast) = lockout(300.0);
        assert_eq!(fast, T.first_lockout_wait);
    }

    /// A quota of a minute spent in its first 4 s, then refused: the
    /// doubling waits (up to 8 s) would find the window open again up to
    /// 8 s late, and the calls refused at its start, waiting for it, run
    /// out of their minute. A wait ends no later than the cycle's next
    /// round length (10, 15, 20, 30 s, then the minute itself).
    #[test]
    fn a_lockout_probes_where_a_round_window_would_end() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (60.0, 100.0), 200, 20);
        c.cut(at(4_000), 200, (60.0, None), &T);
        c.cut(at(4_100), 201, (42.0, None), &T);
        let mut probes = Vec::new();
        let mut now = at(4_100);
        for k in 0..40 {
            let wait = c.lockout_wait(now, &T).expect("locked out");
            assert!(wait <= T.max_lockout_wait, "{wait:?}");
            now += wait;
            probes.push(now);
            if now >= at(60_000) {
                break;
            }
            c.cut(now, 202 + k, (1.0, None), &T);
        }
        for round in [10_000, 15_000, 20_000, 30_000, 60_000] {
            assert!(probes.contains(&at(round)), "{round} ms: {probes:?}");
        }
        assert_eq!(probes.last(), Some(&at(60_000)));
    }

    #[test]
    fn a_refusal_without_an_admission_since_the_cut_cuts_again() {
        let now = Instant::now();
        let mut c = Congestion::resumed(Phase::Steady, 19.0, 20.0);
        c.admitted(now, &T);
        // Refused below the target: from the rate sent.
        let first = c.cut(now, 1, (20.0, None), &T);
        assert_eq!(first, 19.0 * T.first_decrease);
        let target = c.target();
        assert_eq!(target, 19.0 * T.recover_to);
        // Refused again before an admission: a lockout, from what was sent,
        // and the target waits for the lockout's end.
        let second = c.cut(now, 2, (30.0, None), &T);
        assert_eq!(second, first * T.lockout_decrease);
        assert_eq!(c.cut(now, 3, (1.0, None), &T), T.lockout_decrease);
        assert_eq!(c.target(), target);
    }

    /// A window of 100 spent in the first second, then refused until it
    /// ends at 5 s: the lockout's end measures what the server let through
    /// up to the last refusal (the window ended after it).
    #[test]
    fn the_end_of_a_lockout_measures_what_the_server_let_through() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (100.0, 200.0), 100, 10);
        c.cut(at(1_000), 100, (100.0, None), &T);
        assert_eq!(
            c.lockout_wait(at(1_000), &T),
            None,
            "one refusal is no lockout"
        );
        let mut waits = Vec::new();
        for (k, ms) in [1_100, 1_300, 1_700, 2_500, 4_100].into_iter().enumerate() {
            c.cut(at(ms), 101 + k as u64, (50.0, None), &T);
            waits.extend(c.doubling_lockout_wait(&T));
        }
        // The first wait while the rate is fast, then at least doubling
        // (more once two of the key's own intervals are longer).
        assert_eq!(
            waits[..2],
            [Duration::from_millis(100), Duration::from_millis(200)]
        );
        for pair in waits.windows(2) {
            assert!(
                pair[1] >= pair[0] * 2 || pair[1] == T.max_lockout_wait,
                "{waits:?}"
            );
        }
        assert!(waits[4] > Duration::from_millis(1_600), "{waits:?}");
        assert!(c.rate < 10.0, "{}", c.rate);
        c.admitted(at(5_700), &T);
        assert_eq!(c.too_fast, 100.0 / 4.1);
        assert_eq!(c.target(), 100.0 / 4.1 * T.recover_to);
        assert_eq!(c.lockout_wait(at(5_700), &T), None);
        // The next cycle starts at this one's end.
        assert_eq!(c.cycle, Some(Cycle::starting(at(5_700), 1)));
    }

    /// The same window seen by one process of a fleet of four: each of its
    /// 25 admissions stands for four of the server's (the fleet's grants
    /// since its previous one), and the lockout's end measures what the
    /// server let through, not this process's quarter of it.
    #[test]
    fn a_process_of_a_fleet_measures_what_the_server_let_through() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = Congestion::resumed(Phase::Steady, 100.0, 200.0);
        for k in 0..25 {
            c.admitted_for(at(40 * k), 4, &T);
        }
        for (k, ms) in [1_000, 1_100, 1_300, 1_700, 2_500, 4_100]
            .into_iter()
            .enumerate()
        {
            c.cut(at(ms), 25 + k as u64, (50.0, None), &T);
        }
        c.admitted_for(at(5_700), 4, &T);
        assert_eq!(c.too_fast, 100.0 / 4.1);
    }

    /// A window of 200 in 10 s, spent by its fifth second each time and
    /// then refused until it ends: two cycles that let 200 through in
    /// 10 s show the window. In the third, a probe's refusal keeps the
    /// target, and the lockout after it waits for the window's end, not a
    /// doubling wait of its own. A cycle that lets another count through
    /// forgets the window.
    #[test]
    fn lockouts_that_measure_one_count_over_one_length_show_a_window() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut c = Congestion::resumed(Phase::Steady, 40.0, 50.0);
        // One cycle from `from`: `n` admitted over its first `spend_ms`,
        // two refusals, and the admission that ends the lockout at `end`.
        let cycle = |c: &mut Congestion, from: u64, n: u64, spend_ms: u64, end: u64| {
            for k in 0..n {
                c.admitted(at(from + k * spend_ms / n), &T);
            }
            c.cut(at(from + spend_ms + 100), from, (40.0, None), &T);
            c.cut(at(from + spend_ms + 200), from + 1, (40.0, None), &T);
            c.admitted(at(end), &T);
        };
        c.admitted(at(0), &T);
        cycle(&mut c, 1, 199, 5_000, 10_000);
        assert_eq!(c.window, None, "one cycle shows no window");
        cycle(&mut c, 10_001, 199, 5_000, 20_000);
        assert_eq!(c.window, Some(Duration::from_secs(10)));
        let target = c.target();
        assert!((target - 20.0 * T.recover_to).abs() < 1e-9, "{target}");

        // The third window, spent by its third second by a probe.
        for k in 0..199 {
            c.admitted(at(20_001 + k * 15), &T);
        }
        c.rate = 2.0 * target;
        c.cut(at(23_000), 30_000, (30.0, None), &T);
        assert_eq!(c.target(), target, "a probe's refusal within a window");
        c.cut(at(23_100), 30_001, (30.0, None), &T);
        assert_eq!(
            c.lockout_wait(at(23_100), &T),
            Some(Duration::from_millis(6_900))
        );
        c.admitted(at(30_000), &T);
        assert_eq!(c.window, Some(Duration::from_secs(10)));
        assert_eq!(c.target(), target);

        // A cycle that lets 120 through: no window.
        cycle(&mut c, 30_001, 119, 5_000, 40_000);
        assert_eq!(c.window, None);
    }

    /// Steady at 19.4 a second under a window of 200 in 10 s the lockouts
    /// have shown, its cycle begun with an admission at `start`.
    fn window_of_200_in_10_s(start: Instant) -> Congestion {
        let mut c = Congestion::resumed(Phase::Steady, 19.4, 20.0);
        c.window = Some(Duration::from_secs(10));
        c.measured = Some((200, Duration::from_secs(10)));
        c.admitted(start, &T);
        c
    }

    /// A window of 10 s the lockouts have shown, and cycles whose lockouts
    /// are too short to measure a rate: each still bounds the window's
    /// length, and a shorter reading stands against a longer one after it
    /// (each cycle is compared with the last length read, not the first).
    /// A window that begins with the first request after the last one
    /// ended lasts from the admission a lockout's wait let through, and is
    /// read from its cycles as long as they ran.
    #[test]
    fn a_window_read_shorter_by_a_short_cycle_stays_shorter() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut c = window_of_200_in_10_s(at(0));
        // 200 admitted, a probe's refusal and a lockout's at the end,
        // admitted again at `end`.
        let cycle = |c: &mut Congestion, from: u64, end: u64, sent: u64| {
            for k in 1..200 {
                c.admitted(at(from + k * (end - from - 300) / 200), &T);
            }
            c.rate = 2.0 * c.target();
            c.cut(at(end - 200), sent, (20.0, None), &T);
            c.cut(at(end - 100), sent + 1, (20.0, None), &T);
            c.admitted(at(end), &T);
        };
        cycle(&mut c, 0, 9_300, 200);
        assert_eq!(c.window, Some(Duration::from_millis(9_300)));
        cycle(&mut c, 9_300, 19_100, 400);
        assert_eq!(c.window, Some(Duration::from_millis(9_300)));
        assert_eq!(c.measured, Some((200, Duration::from_millis(9_300))));
    }

    /// Nine seconds held at 38 a second from `start` (the rate refused
    /// before, 40), then a probe refused at 51.5 a second at 9 s.
    fn probed_past_38(start: Instant) -> Congestion {
        let mut c = steady_after(start, (38.0, 40.0), 342, 26);
        c.rate = 51.5;
        c.cut(start + Duration::from_secs(9), 342, (51.5, None), &T);
        c
    }

    /// A probe refused with a long `Retry-After` that ends the cycle (what
    /// the cycle let through bounds the rate), then a lockout: the bound the
    /// block measured stands; the lockout does not bring back the target
    /// held before the probe.
    #[test]
    fn a_block_after_a_probe_stands_against_the_lockout_after_it() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = probed_past_38(start);
        c.blocked_for(at(9_000), Duration::from_secs(5), &T);
        let bounded = c.target();
        assert!(bounded < 38.0 * T.recover_to, "{bounded}");
        c.cut(at(14_020), 343, (20.0, None), &T);
        assert!(c.lockout_wait(at(14_020), &T).is_some(), "locked out");
        assert!(c.target() <= bounded, "{} > {bounded}", c.target());
    }

    /// A target refused 3 s into its hold names a ceiling that the key
    /// disproves by sending at that rate or above for longer, with no
    /// refusal; a dip below starts the count over. One refused at once
    /// needs [`Tuning::disprove_at_least`].
    #[test]
    fn a_rate_sent_for_longer_than_its_refused_hold_disproves_it() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (9.0, 10.0), 100, 100);
        c.refused_held = Some(9.5);
        c.refused_held_after = Duration::from_secs(3);
        c.check_refused_held(at(10_000), 9.6, &T);
        c.check_refused_held(at(11_000), 9.4, &T);
        c.check_refused_held(at(11_500), 9.7, &T);
        c.check_refused_held(at(14_000), 9.8, &T);
        assert_eq!(c.refused_held, Some(9.5), "2.5 s above since the dip");
        c.check_refused_held(at(14_600), 9.9, &T);
        assert_eq!(c.refused_held, None);
        // A hold refused at once disproves after the floor.
        c.refused_held = Some(9.5);
        c.refused_held_after = Duration::from_millis(500);
        c.check_refused_held(at(20_000), 9.6, &T);
        c.check_refused_held(at(21_000), 9.6, &T);
        assert_eq!(c.refused_held, Some(9.5));
        c.check_refused_held(at(20_000) + T.disprove_at_least * 2, 9.6, &T);
        assert_eq!(c.refused_held, None);
    }

    /// A log of 100 per 5 s spent by slow start, blocked for a
    /// `Retry-After: 4` that stood for a little over 3 s, then spent again
    /// and blocked for as long: the second block measures two quotas over
    /// the span to its shortest end, less the second the key was held past
    /// the first block's shortest end (its own idleness, not the server's).
    #[test]
    fn a_block_measures_the_cycle_without_the_keys_own_wait() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut c = Congestion::open();
        c.phase = Phase::SlowStart;
        c.rate = 140.0;
        for k in 0..100 {
            c.admitted(at(k * 19), &T);
        }
        let wait = Duration::from_secs(4);
        c.cut(at(1_957), 100, (142.0, None), &T);
        c.blocked_for(at(1_957), wait, &T);
        assert!(c.too_fast > 100.0, "nothing measured: {}", c.too_fast);
        for k in 0..100 {
            c.admitted(at(6_157 + k * 11), &T);
        }
        c.cut(at(7_586), 200, (76.0, None), &T);
        c.blocked_for(at(7_586), wait, &T);
        // From the first admission to 7.586 s + 3 s, less 1 s.
        let span = 10.586 - 1.0;
        assert!((c.too_fast - 200.0 / span).abs() < 1e-9, "{}", c.too_fast);
        assert!(c.target() <= c.too_fast * T.recover_to + 1e-9);
    }

    /// A window of 10 s the lockouts have shown, and a cycle held past it
    /// (the next window unrefused, a probe spending the one after early):
    /// the lockout waits for the end of the window it is in, the windows
    /// following one another from the cycle's start, and its end measures
    /// one window's count over its length, not the two windows' count over
    /// the span to the last refusal.
    #[test]
    fn a_cycle_held_past_its_window_waits_for_the_next_end_and_measures_one_window() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut c = window_of_200_in_10_s(at(0));
        for k in 1..398 {
            c.admitted(at(k * 30), &T);
        }
        c.rate = 2.0 * c.target();
        c.cut(at(12_000), 398, (38.0, None), &T);
        c.cut(at(12_100), 399, (38.0, None), &T);
        assert!(c.locked);
        assert_eq!(
            c.lockout_wait(at(12_100), &T),
            Some(Duration::from_millis(7_900))
        );
        c.admitted(at(20_000), &T);
        assert_eq!(c.window, Some(Duration::from_secs(10)));
        assert!((c.too_fast - 20.0).abs() < 1e-9, "{}", c.too_fast);
        assert!((c.target() - 20.0 * T.recover_to).abs() < 1e-9);
        assert_eq!(next_end(at(0), Duration::ZERO, at(5)), None);
        assert_eq!(
            next_end(at(0), Duration::from_secs(10), at(10_000)),
            Some(at(20_000))
        );
    }

    /// A probe climbs no further than [`Tuning::probe_reach`] of the
    /// target. Admitted there for a hold, the server grew: that is the
    /// target, and the next probe goes on from it. Where the lockouts
    /// showed a window, it waits a window's length there first (a window
    /// admits any rate until its quota is spent).
    #[test]
    fn a_probe_stops_at_its_reach_and_takes_it_as_the_target_once_held() {
        let start = Instant::now();
        let run = |window: Option<Duration>, secs: u64| {
            let mut c = Congestion::resumed(Phase::Steady, 10.0, 10.0 / T.recover_to);
            c.window = window;
            let (mut rate, step) = (c.rate, 0.05);
            let mut peak: f64 = 0.0;
            for k in 1..=(secs as f64 / step) as u64 {
                rate = c.grow(
                    start + Duration::from_secs_f64(k as f64 * step),
                    rate,
                    step,
                    &T,
                );
                peak = peak.max(rate);
            }
            (c, rate, peak)
        };
        let reach = 10.0 * T.probe_reach;
        let (c, rate, peak) = run(None, 30);
        assert!(peak <= reach * (1.0 + 1e-9), "{peak}");
        assert!((c.target() - reach).abs() < 1e-9, "{}", c.target());
        assert!(rate >= reach, "{rate}");
        let (c, rate, peak) = run(Some(Duration::from_secs(60)), 40);
        assert!((peak - reach).abs() < 1e-9 && (rate - reach).abs() < 1e-9);
        assert_eq!(c.target(), 10.0);
    }

    /// A probe refused only after a while at its reach (twice the
    /// target) forgets the refusal of the target held before: the server
    /// let the key through at far more than that. The target goes under
    /// the rate refused, where a probe refused at the same rate as the
    /// last would otherwise have kept it pinned under that old refusal
    /// (a log held at 0.70 of its limit for ten minutes).
    #[test]
    fn a_probe_refused_at_its_reach_forgets_a_held_refusal() {
        let now = Instant::now();
        let pinned = |reached: bool| {
            let mut c = Congestion::resumed(Phase::Steady, 10.0, 10.0 / T.recover_to);
            c.refused_held = Some(10.3);
            c.probe_refused = Some(20.0);
            c.reached_at = reached.then(|| now - Duration::from_secs(1));
            c.rate = 20.0;
            c.admitted(now, &T);
            c.cut(now, 1, (20.0, None), &T);
            c.target()
        };
        assert_eq!(pinned(false), 10.0);
        assert!((pinned(true) - 20.0 * T.recover_to).abs() < 1e-9);
    }

    /// A lockout's end measures 100 in 4.1 s; the cycle admitted for its
    /// first second before the lockout began. A refusal within a second of
    /// the end (a log still counting the cycle's admissions) cuts the rate
    /// but keeps the target; one later finds the target too high.
    #[test]
    fn a_refusal_while_the_measured_overrun_ages_out_keeps_the_target() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let locked_out = || {
            let mut c = steady_after(start, (100.0, 200.0), 100, 10);
            c.cut(at(1_000), 100, (100.0, None), &T);
            for (k, ms) in [1_100, 1_300, 1_700, 2_500, 4_100].into_iter().enumerate() {
                c.cut(at(ms), 101 + k as u64, (50.0, None), &T);
            }
            c.admitted(at(5_700), &T);
            c
        };
        let measured = 100.0 / 4.1 * T.recover_to;
        let mut c = locked_out();
        assert_eq!(c.target(), measured);
        let rate = c.rate;
        c.admitted(at(6_000), &T);
        c.cut(at(6_500), 200, (rate, None), &T);
        assert_eq!(c.target(), measured, "within the overrun");
        assert!(c.rate < rate, "{} {rate}", c.rate);
        let mut c = locked_out();
        c.admitted(at(6_000), &T);
        c.cut(at(6_800), 200, (rate, None), &T);
        assert!(c.target() < measured, "after it: {}", c.target());
    }

    /// A log that a probe ran past refuses the target held before it
    /// until what the probe sent past it ages out. Held at 43.65 a second
    /// (the rate refused before, 45), probed for 2 s and refused at 55.5
    /// (past what a bucket's burst carries a probe): the first refusal
    /// within the next 2 s keeps the target the probe left; a second one,
    /// or one after those 2 s, reads as a target too high. A probe
    /// refused within a burst's reach of the target leaves no echo.
    #[test]
    fn the_first_refusal_after_a_probe_run_past_a_log_keeps_the_target() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let probed = |refused: f64| {
            let mut c = Congestion::resumed(Phase::Steady, 43.65, 45.0);
            c.admitted(start, &T);
            c.grow(start, c.target(), 0.0, &T);
            c.rate = refused + 0.5;
            c.admitted(at(10_000), &T);
            c.cut(at(10_000), 400, (refused, None), &T);
            c
        };
        let left = probed(55.5).target();
        assert!(left > 43.65, "the probe raised the target: {left}");
        let refused_at = |c: &mut Congestion, ms: u64, sent: u64| {
            let target = c.target();
            c.admitted(at(ms - 100), &T);
            c.rate = target;
            c.cut(at(ms), sent, (target, None), &T);
        };
        let mut c = probed(55.5);
        refused_at(&mut c, 11_500, 420);
        assert_eq!(c.target(), left, "the probe's echo");
        assert!(c.rate < left, "{}", c.rate);
        refused_at(&mut c, 11_800, 430);
        assert!(c.target() < left, "a second one: {}", c.target());
        let mut c = probed(55.5);
        refused_at(&mut c, 12_500, 420);
        assert!(c.target() < left, "past the probe's length: {}", c.target());
        let mut c = probed(50.0);
        let left = c.target();
        refused_at(&mut c, 11_500, 420);
        assert!(c.target() < left, "within a burst's reach: {}", c.target());
    }

    /// A long window spent at 1,000 a second: the lockout's cuts leave
    /// the rate far above the limit its end measures, and the rate goes
    /// down to the new target at once (the refusal after would otherwise
    /// read as a probe refused at 490 a second).
    #[test]
    fn the_end_of_a_lockout_takes_the_rate_down_to_the_limit_it_measured() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut c = steady_after(start, (1_000.0, 2_000.0), 190, 10);
        c.cut(at(2_000), 190, (1_000.0, None), &T);
        c.cut(at(2_100), 191, (700.0, None), &T);
        assert!(c.rate > 400.0, "{}", c.rate);
        c.admitted(at(19_000), &T);
        let limit = 190.0 / 2.1;
        assert!((c.too_fast - limit).abs() < 1e-9, "{}", c.too_fast);
        assert_eq!(c.rate, c.target());
        assert!(!c.recovering(c.rate));
    }

    /// A window of 46 a second probed past after a nine-second cycle at
    /// 38 a second: locked out for a tenth of a second at the cycle's end,
    /// the cycle's average is the key's own pace and measures nothing. The
    /// lockout right after the probe shows a quota spent, not a rate: the
    /// ceiling held before was found again (the hold doubles), and the
    /// target rises by a step.
    #[test]
    fn a_short_lockout_at_the_end_of_a_long_cycle_measures_nothing() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let before = steady_after(start, (38.0, 40.0), 342, 26);
        let (held, hold) = (before.target(), before.hold);
        let mut c = probed_past_38(start);
        assert!(c.target() > held * (1.0 + T.max_rise), "{}", c.target());
        c.cut(at(9_020), 343, (45.0, None), &T);
        assert!(c.lockout_wait(at(9_020), &T).is_some(), "locked out");
        assert_eq!(c.hold, hold * 2);
        c.admitted(at(9_130), &T);
        assert!((c.target() - held * (1.0 + T.max_rise)).abs() < 1e-9);
        assert!(c.target() > 342.0 / 9.0);
        assert_eq!(c.hold, hold * 2);
    }

    /// Cut to 2.1 a second, the climb back to the target takes 8 sends (3.8
    /// s), not a second: refused at 3 a second with nothing admitted to
    /// measure, a slow server's limit may lie anywhere below, and each
    /// send shows one more of it (a leaky bucket of 2 a second was refused
    /// 9 times in its first 6 s, climbing back a second after each cut).
    #[test]
    fn a_slow_key_recovers_over_its_sends_not_a_second() {
        let start = Instant::now();
        let mut c = Congestion::resumed(Phase::SlowStart, 6.0, 0.0);
        c.admitted(start, &T);
        let mut rate = c.cut(start, 1, (3.0, None), &T);
        assert!((rate - 2.1).abs() < 1e-9, "{rate}");
        let step = 0.05;
        let mut at = start;
        let mut reached = None;
        for _ in 0..200 {
            at += Duration::from_secs_f64(step);
            rate = c.grow(at, rate, step, &T);
            if reached.is_none() && rate >= 3.0 * T.recover_to - 1e-9 {
                reached = Some(at - start);
            }
        }
        let reached = reached.expect("recovers").as_secs_f64();
        let over = T.recovery_sends / 2.1;
        assert!(
            reached >= over - 0.06 && reached <= over + 0.06,
            "{reached}"
        );
    }

    /// Held at a target a probe found again, a slow key holds for
    /// `probe_sends` sends (up to four longest holds) and a fast one for
    /// the hold; before any probe found it, the first hold is all it
    /// waits.
    #[test]
    fn a_ceiling_found_again_is_held_for_a_number_of_sends() {
        let held = |rate: f64, sightings: u32| {
            let mut c = Congestion::resumed(Phase::Steady, rate, rate / T.recover_to);
            c.ceiling_sightings = sightings;
            c.hold_at(c.target(), &T)
        };
        assert_eq!(held(3.0, 0), T.first_hold);
        let slowest = Duration::from_secs_f64(T.probe_sends / 3.0);
        assert!(held(3.0, 1) > T.max_hold);
        assert!(held(3.0, 1).abs_diff(slowest) < Duration::from_micros(1));
        assert_eq!(held(0.2, 1), T.max_hold * 4);
        let slow = Duration::from_secs_f64(T.probe_sends / 10.0);
        assert!(slow > T.first_hold && slow < T.max_hold);
        assert!(held(10.0, 1).abs_diff(slow) < Duration::from_micros(1));
        assert_eq!(held(1_000.0, 1), T.first_hold);
    }

    #[test]
    fn recovery_reaches_the_target_within_its_time_then_holds_then_probes() {
        let start = Instant::now();
        let mut c = Congestion::resumed(Phase::SlowStart, 40.0, 0.0);
        c.admitted(start, &T);
        let mut rate = c.cut(start, 1, (20.0, None), &T);
        assert_eq!(rate, 14.0);
        let step = 0.05;
        let mut at = start;
        let mut reached = None;
        for _ in 0..200 {
            at += Duration::from_secs_f64(step);
            rate = c.grow(at, rate, step, &T);
            if reached.is_none() && rate >= 20.0 * T.recover_to {
                reached = Some(at - start);
            }
        }
        let reached = reached.expect("recovers");
        assert!(
            reached <= T.recovery + Duration::from_millis(60),
            "{reached:?}"
        );
        // 10 s: the target held for the first hold, then a slow probe.
        assert!(rate > 20.0 * T.recover_to && rate < 20.0 * 1.02, "{rate}");
    }
}
