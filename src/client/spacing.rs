//! A server that spaces a key's requests: a bucket of one (a GCRA or token
//! bucket with no burst, nginx's `limit_req` without `burst`), which admits
//! a request exactly when the time since the last one it admitted is at
//! least its interval. Neither its headers (`remaining` is always 0) nor a
//! second's average of refusals tell that interval well; the gaps do:
//!
//! - a request admitted `g` after the previous admission proves the
//!   interval is at most `g`;
//! - one refused `g` after it proves the interval is more than `g`.
//!
//! So the interval lies in `(longest refused gap, shortest admitted gap]`,
//! and each send narrows that bracket: while it is wide the key is paced
//! a step below its top ([`Tuning::step_from_top`] of the bracket, in
//! ratio), once it is narrow at its top, which the server has admitted. A
//! step admitted moves the top down to it at no cost; one refused moves
//! the bottom up to it at the cost of a refusal. Where the interval lies
//! anywhere in the bracket alike, a step a share `a` of it down is refused
//! with probability `a` and leaves `a` or `1 − a` of the bracket, so narrowing it
//! by a factor `e` costs about `a / H(a)` refusals per `ln e` (`H` the
//! entropy of `a`, in nats): 0.72 at the middle, 0.31 a tenth of the way
//! down. After a hold one send probes a shorter gap (the server may have
//! grown); each refused probe doubles the hold, which lasts at least
//! [`Tuning::probe_sends`] gaps, so that a slow spacer's probes cost the
//! share of its requests a fast one's do.
//!
//! A refilling bucket driven at its rate reads the same, and its interval
//! is its rate: the same pace is right for it. Any other limiter soon
//! contradicts the bracket (a window admits short gaps and then refuses
//! one as long; a bucket with a burst admits a gap shorter than one it
//! refused): the bracket starts over from that reading, and it paces
//! nothing until it holds refusals and admissions that agree again
//! (see [`Tuning::agreeing_refusals`] and [`Tuning::agreeing_admissions`]).
//! Nothing latches.
//!
//! A gap is read only when every request sent before it has been answered:
//! otherwise an admission not yet seen may lie between. A refusal that
//! follows a refusal is read from that one's send, not the admission before:
//! a limiter that counts refusals charged it. And once paced, the key backs
//! off after a refusal, each one since the last admission doubling the next
//! gap (see [`Tuning::backoff_doublings`]).
//!
//! Pure arithmetic on the instants the caller passes.

use std::time::Duration;

use tokio::time::Instant;

/// The thresholds of reading a spacer, each a trade-off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tuning {
    /// Refusals that agree with the bracket before it paces the key. Fewer
    /// pace a bucket of one sooner; more keep a window's refusals at its
    /// end (one per gap, growing) from pacing it for a while.
    pub(crate) agreeing_refusals: u32,
    /// The same, where the headers state a quota of one (`limit: 1`): the
    /// server says it is a bucket of one, and the bracket's first refusal
    /// paces it (a wrong guess costs a refusal, as two would).
    pub(crate) agreeing_refusals_of_one: u32,
    /// Admissions that agree with the bracket before it paces the key.
    /// Fewer pace a bucket of one sooner; more make sure the gaps admitted
    /// are the key's pace, not one long gap after a window's lockout.
    pub(crate) agreeing_admissions: u32,
    /// While the bracket is wide, the key is paced this share of it (in
    /// ratio) below its top. Smaller costs fewer refusals to narrow it
    /// (see the module's notes) over more sends, each at a gap no shorter
    /// than the interval proven long enough less that share; larger
    /// narrows it in fewer sends, more of them refused. (At the middle, a
    /// bucket of one of 5 a second was refused three times narrowing its
    /// bracket from 175–233 ms to 2 %: after the first, each middle fell below the
    /// interval, 200 ms, which lay near the top.)
    pub(crate) step_from_top: f64,
    /// The bracket is narrow, and the key is paced at its top, once the
    /// top is within this share of the bottom. Smaller is closer to the
    /// interval, at the cost of a refused probe or two more.
    pub(crate) narrow: f64,
    /// A timer wakes on its tick (tokio's: a millisecond): a bracket no
    /// wider than this is narrow too, since a pace between its ends sends
    /// at one end or the other.
    pub(crate) tick: Duration,
    /// Each time the readings contradicted a spacer, the refusals and the
    /// admissions that must agree before it paces again double, up to this
    /// many times: a bucket with a burst, driven near its rate, reads as a
    /// spacer for a while, and each time it paces it costs refusals; a log
    /// that slow start overran refuses every gap until its count runs out,
    /// which reads as a spacer at the pace the cut left.
    pub(crate) max_doublings: u32,
    /// Once narrow, the bracket's bottom is trusted this long after the
    /// refusal that set it; then one send probes a gap shorter by
    /// [`probe`](Self::probe) (the server's capacity may have grown, or it
    /// is a moving window, which admits the probe and so lets go of the
    /// key). A probe refused again doubles this, up to
    /// [`max_hold`](Self::max_hold). Any hold lasts at least
    /// [`probe_sends`](Self::probe_sends) sends at the top.
    pub(crate) first_hold: Duration,
    /// The longest hold: one refused probe per this long against a steady
    /// spacer, and the longest a grown capacity goes unnoticed.
    pub(crate) max_hold: Duration,
    /// How much shorter than the bracket's top a probe's gap is.
    pub(crate) probe: f64,
    /// A hold, the first one too, lasts at least this many sends at the
    /// bracket's top (up to [`max_sends_hold`](Self::max_sends_hold)): a
    /// spacer of 2 a second probed once a minute is refused 1 % of its
    /// requests by its probes alone. More costs a slow spacer fewer
    /// refusals; fewer finds its grown capacity sooner. (Held only
    /// [`first_hold`](Self::first_hold) before its first probe, a spacer
    /// of 3 a second was refused by it within its first minute.)
    pub(crate) probe_sends: f64,
    /// The longest a hold lasts for [`probe_sends`](Self::probe_sends)
    /// gaps (four times [`max_hold`](Self::max_hold)): the longest a slow
    /// spacer's grown capacity goes unnoticed.
    pub(crate) max_sends_hold: Duration,
    /// Once paced, each refusal since the last admission doubles the next
    /// gap from the bracket's top, up to this many times. A limiter that
    /// counts refusals (a GCRA that charges a refused request) is a whole
    /// interval behind after one, and refuses every send at the top, each
    /// putting it further behind, until the key falls back by more; one
    /// that does not costs a refused probe an interval's wait. (Sent at the
    /// top again, a bucket of one of 15 a second that counts refusals was
    /// refused nine times in a row after each probe.)
    pub(crate) backoff_doublings: u32,
}

impl Tuning {
    /// The default (in force through [`TUNING`](super::tuning::TUNING)).
    pub(crate) const DEFAULT: Tuning = Tuning {
        agreeing_refusals: 2,
        agreeing_refusals_of_one: 1,
        agreeing_admissions: 4,
        step_from_top: 0.1,
        narrow: 0.02,
        tick: Duration::from_millis(1),
        max_doublings: 6,
        first_hold: Duration::from_secs(32),
        max_hold: Duration::from_secs(64),
        probe: 0.05,
        probe_sends: 200.0,
        max_sends_hold: Duration::from_secs(256),
        backoff_doublings: 4,
    };
}

// A step from the top lies inside the bracket: at 0 it is the top (sent
// there, it narrows nothing), at 1 the bottom (a gap already refused).
const _: () = assert!(Tuning::DEFAULT.step_from_top > 0.0 && Tuning::DEFAULT.step_from_top < 1.0);

/// What the gaps between this key's admissions show.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Spacing {
    /// When the latest admitted request (in send order) was sent.
    last_admitted: Option<Instant>,
    /// When the latest refused request (in send order) was sent.
    last_refused: Option<Instant>,
    /// Refusals since the latest admission: the next gap doubles with each
    /// (see [`Tuning::backoff_doublings`]).
    in_a_row: u32,
    /// The shortest gap after an admission that the server admitted.
    admitted: Option<Duration>,
    /// The longest gap after an admission that it refused.
    refused: Option<Duration>,
    /// Refusals that agree with the bracket since it started over.
    refusals: u32,
    /// Admissions that agree with it since then.
    admissions: u32,
    /// How often the readings contradicted a spacer.
    contradictions: u32,
    /// When the latest agreeing refusal's request was sent.
    refused_at: Option<Instant>,
    /// How long the bottom is trusted after it (zero: the first hold), at
    /// least `probe_sends` sends at the top (see `Spacing::hold`).
    hold: Duration,
}

impl Spacing {
    /// A response to the request sent at `sent`: `admitted` or refused,
    /// with `earlier_unanswered` whether a request sent before it is still
    /// unanswered (its gap is then not known), and `others_at` the latest
    /// of the key's sends that another process's request (on a limiter
    /// processes share) went out before: a gap that spans it is not the
    /// server's either.
    pub(crate) fn observe(
        &mut self,
        sent: Instant,
        admitted: bool,
        (earlier_unanswered, others_at): (bool, Option<Instant>),
        t: &Tuning,
    ) {
        // A refusal after a refusal is read from that one's send: a
        // limiter that counts refusals charged it, and a gap from the
        // admission before would say the interval is longer than it is
        // (from either, the bound holds of one that does not).
        let refused_last = self
            .last_refused
            .filter(|&r| !admitted && self.last_admitted.is_some_and(|a| r > a));
        let gap = refused_last
            .or(self.last_admitted)
            .filter(|&last| last < sent && !earlier_unanswered)
            .filter(|&last| others_at.is_none_or(|others| others <= last))
            .map(|last| sent - last);
        if admitted {
            self.last_admitted = Some(self.last_admitted.map_or(sent, |l| l.max(sent)));
            self.in_a_row = 0;
        } else {
            self.last_refused = Some(self.last_refused.map_or(sent, |l| l.max(sent)));
            self.in_a_row = self.in_a_row.saturating_add(1);
        }
        let Some(gap) = gap else {
            return;
        };
        // A gap agrees with the bracket strictly on its side: an admission
        // longer than every refused gap, a refusal shorter than every
        // admitted one. One as long as a gap read the other way is no
        // spacer's (a bucket with a burst, paced evenly, admits a gap and
        // later refuses one as long). A refusal just short of the top is
        // what pacing near the top finds: it narrows the bracket. (Read as
        // a contradiction within half a percent of the top, a refusal at
        // 199 ms of a bucket of one of 5 a second, admitted at 200 ms,
        // handed the key back to the header-less regime, which cut it to
        // 0.78 of its limit.)
        if admitted {
            let agrees = self.refused.is_none_or(|r| gap > r);
            if !agrees {
                *self = Spacing {
                    admitted: Some(gap),
                    admissions: 1,
                    ..self.started_over()
                };
                return;
            }
            self.admitted = Some(self.admitted.map_or(gap, |a| a.min(gap)));
            self.admissions = self.admissions.saturating_add(1);
        } else {
            let agrees = self.admitted.is_none_or(|a| gap < a);
            if !agrees {
                *self = Spacing {
                    refused: Some(gap),
                    refusals: 1,
                    ..self.started_over()
                };
                return;
            }
            self.refused = Some(self.refused.map_or(gap, |r| r.max(gap)));
            self.refusals = self.refusals.saturating_add(1);
            // A probe refused: the spacer stands, and is probed less often.
            if self.probing(sent, t) {
                self.hold = (self.hold(t) * 2).min(t.max_hold);
            }
            self.refused_at = Some(sent);
        }
    }

    /// Contradicted: nothing of the bracket is kept but that it was.
    fn started_over(&self) -> Spacing {
        Spacing {
            last_admitted: self.last_admitted,
            last_refused: self.last_refused,
            in_a_row: self.in_a_row,
            contradictions: self.contradictions.saturating_add(1),
            ..Spacing::default()
        }
    }

    fn hold(&self, t: &Tuning) -> Duration {
        let sends = self
            .admitted
            .map_or(Duration::ZERO, |top| top.mul_f64(t.probe_sends))
            .min(t.max_sends_hold);
        let doubled = if self.hold.is_zero() {
            t.first_hold
        } else {
            self.hold
        };
        doubled.max(sends)
    }

    /// Whether the bottom has been trusted for a whole hold at `now`.
    fn probing(&self, now: Instant, t: &Tuning) -> bool {
        self.refused_at
            .is_some_and(|at| now.saturating_duration_since(at) > self.hold(t))
    }

    /// The interval to space the key's sends by at `now`, once the bracket
    /// holds enough refusals and admissions that agree: a step below its
    /// top while wide, its top once narrow, and a probe below it after
    /// each hold.
    pub(crate) fn interval(&self, now: Instant, t: &Tuning) -> Option<Duration> {
        let (Some(top), Some(bottom)) = (self.admitted, self.refused) else {
            return None;
        };
        let doublings = self.contradictions.min(t.max_doublings);
        let twice = |n: u32| n.saturating_mul(1u32.checked_shl(doublings).unwrap_or(u32::MAX));
        let (admissions, refusals) = (twice(t.agreeing_admissions), twice(t.agreeing_refusals));
        if self.refusals < refusals || self.admissions < admissions || top.is_zero() {
            return None;
        }
        let (top_s, bottom_s) = (top.as_secs_f64(), bottom.as_secs_f64());
        if self.in_a_row > 0 {
            return Some(top * (1u32 << self.in_a_row.min(t.backoff_doublings)));
        }
        if top_s <= bottom_s * (1.0 + t.narrow) || top <= bottom + t.tick {
            if self.probing(now, t) {
                return Some(top.mul_f64(1.0 - t.probe));
            }
            return Some(top);
        }
        // At least a tick below the top (the bracket is wider than that
        // here): a timer that wakes on its tick rounds a gap up, and a step
        // of less than a tick would be sent at the top, narrowing nothing.
        let step = Duration::from_secs_f64(top_s * (bottom_s / top_s).powf(t.step_from_top));
        Some(step.min(top.saturating_sub(t.tick)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Tuning = crate::client::tuning::TUNING.spacing;

    /// A gap across which another process's request went out (on a
    /// limiter processes share) is not the server's: not read, the bracket
    /// stays as it was.
    #[test]
    fn a_gap_across_another_process_send_is_not_read() {
        let mut spacing = Spacing::default();
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        spacing.observe(ms(0), true, (false, None), &T);
        spacing.observe(ms(10), false, (false, Some(ms(10))), &T);
        assert_eq!(spacing.refused, None, "across another's send");
        spacing.observe(ms(20), false, (false, Some(ms(10))), &T);
        assert_eq!(spacing.refused, Some(Duration::from_millis(10)), "after it");
    }

    /// A slow spacer holds for `probe_sends` of its gaps (up to four
    /// longest holds), before its first probe too; a fast one for the hold
    /// its refused probes doubled, and before any for the first hold.
    #[test]
    fn a_slow_spacer_holds_for_a_number_of_sends() {
        let held = |top_ms: u64, hold: Duration| {
            let spacing = Spacing {
                admitted: Some(Duration::from_millis(top_ms)),
                hold,
                ..Spacing::default()
            };
            spacing.hold(&T)
        };
        assert_eq!(
            held(500, Duration::ZERO),
            Duration::from_millis(500).mul_f64(T.probe_sends)
        );
        assert_eq!(held(50, Duration::ZERO), T.first_hold);
        assert_eq!(
            held(500, T.max_hold),
            Duration::from_millis(500).mul_f64(T.probe_sends)
        );
        assert!(held(500, T.max_hold) > T.max_hold);
        assert_eq!(held(50, T.max_hold), T.max_hold);
        assert_eq!(held(5_000, T.max_hold), T.max_hold * 4);
    }

    /// A server that admits a request at least `interval` after the last
    /// one it admitted (after the last one it refused as well, where it
    /// `counts_refusals`: a GCRA that charges a refused request), driven by
    /// the pace the spacing asks for (before it asks for one, by
    /// `start_pace`, doubled for each refusal in a row, as a lockout's
    /// waits are). Returns the spacing and the refusals once it paced.
    fn drive(
        interval: Duration,
        start_pace: Duration,
        sends: usize,
        counts_refusals: bool,
    ) -> (Spacing, usize) {
        drive_on(&T, interval, start_pace, sends, counts_refusals, EXACT)
    }

    /// A timer that wakes at the very instant asked for.
    const EXACT: Duration = Duration::from_nanos(1);

    /// [`drive`], with the thresholds `t`, each gap rounded up to a whole
    /// `tick` (a timer that wakes on its tick; [`EXACT`] for none).
    fn drive_on(
        t: &Tuning,
        interval: Duration,
        start_pace: Duration,
        sends: usize,
        counts_refusals: bool,
        tick: Duration,
    ) -> (Spacing, usize) {
        let mut spacing = Spacing::default();
        let start = Instant::now();
        // When the server next admits a request.
        let (mut at, mut next_admitted, mut refused) = (start, None::<Instant>, 0);
        let mut in_a_row = 0;
        for _ in 0..sends {
            let ok = next_admitted.is_none_or(|n| at >= n);
            if ok || counts_refusals {
                next_admitted = Some(next_admitted.map_or(at, |n| n.max(at)) + interval);
            }
            in_a_row = if ok { 0 } else { (in_a_row + 1).min(4) };
            let paced = spacing.interval(at, t);
            refused += usize::from(!ok && paced.is_some());
            spacing.observe(at, ok, (false, None), t);
            let gap = spacing
                .interval(at, t)
                .unwrap_or(start_pace * (1 << in_a_row));
            let ticks = gap.as_nanos().div_ceil(tick.as_nanos().max(1));
            at += tick * u32::try_from(ticks).unwrap_or(u32::MAX);
        }
        (spacing, refused)
    }

    /// From a pace a fifth too fast (where a cut leaves a header-less
    /// key), the bracket closes on the interval within a few refusals, and
    /// then paces at what was admitted, within the bracket's narrowness of
    /// the interval.
    #[test]
    fn a_bucket_of_one_is_paced_at_its_interval_after_a_few_refusals() {
        let interval = Duration::from_micros(333_333);
        let (spacing, refused) = drive(interval, Duration::from_millis(280), 200, false);
        let paced = spacing.interval(spacing.refused_at.expect("refused"), &T);
        let paced = paced.expect("a spacer");
        assert!(paced >= interval, "{paced:?}");
        assert!(
            paced.as_secs_f64() <= interval.as_secs_f64() * (1.0 + T.narrow),
            "{paced:?}"
        );
        assert!(refused <= 4, "{refused} refused once paced");
    }

    /// Buckets of one of 3.3 to 6.7 a second, each reached from a pace
    /// too fast by a share that varies: over 150 sends, before the first
    /// hold ends, the bracket narrows to its top (within its narrowness
    /// of the interval) with at most two thirds of the refusals its
    /// middle costs, since its steps go from the top (50 against 84 over
    /// the 31 buckets).
    #[test]
    fn a_bracket_narrows_from_its_top_with_fewer_refusals() {
        let middle = Tuning {
            step_from_top: 0.5,
            ..T
        };
        let refusals = |t: &Tuning| {
            let mut refusals = 0;
            for interval_ms in (150..=300).step_by(5) {
                let interval = Duration::from_millis(interval_ms);
                let start_pace = Duration::from_millis(140);
                let (spacing, refused) = drive_on(t, interval, start_pace, 150, false, EXACT);
                let at = spacing.last_admitted.expect("admitted");
                let paced = spacing.interval(at, t).expect("a spacer");
                assert!(paced >= interval, "{paced:?}");
                assert!(
                    paced.as_secs_f64() <= interval.as_secs_f64() * (1.0 + t.narrow),
                    "{interval:?}: {paced:?}"
                );
                refusals += refused;
            }
            refusals
        };
        let (from_top, from_middle) = (refusals(&T), refusals(&middle));
        assert!(from_middle > 0, "the middle's steps were refused");
        assert!(
            from_top * 3 <= from_middle * 2,
            "{from_top} refusals from the top, {from_middle} from the middle"
        );
    }

    /// On a timer that wakes on whole milliseconds, a bucket of one whose
    /// bracket is a few milliseconds wide still narrows it: a step from
    /// the top less than a millisecond below it would be sent at the top
    /// and read nothing (a bucket of 97 ms, bracketed at 90-99 ms, was
    /// paced at 98.06 ms, sent every 99 ms, for good).
    #[test]
    fn a_bracket_narrows_on_a_timer_of_whole_milliseconds() {
        for (interval_ms, start_ms) in [(97, 90), (60, 55), (14, 12)] {
            let interval = Duration::from_millis(interval_ms);
            let (spacing, _) = drive_on(
                &T,
                interval,
                Duration::from_millis(start_ms),
                1_500,
                false,
                T.tick,
            );
            let at = spacing.last_admitted.expect("admitted");
            let paced = spacing.interval(at, &T).expect("a spacer");
            assert!(
                paced <= interval + T.tick,
                "{interval:?}: paced at {paced:?}, {spacing:?}"
            );
        }
    }

    /// A refusal just short of a gap admitted narrows the bracket to the
    /// two: the key is paced at the top, not handed back.
    #[test]
    fn a_refusal_just_short_of_the_top_narrows_the_bracket() {
        let mut spacing = Spacing::default();
        let start = Instant::now();
        let send = |spacing: &mut Spacing, at_ms: u64, ok: bool| {
            let at = start + Duration::from_millis(at_ms);
            spacing.observe(at, ok, (false, None), &T);
            at
        };
        // Refused 150 ms after an admission, admitted 200 ms after one.
        for (at_ms, ok) in [(0, true), (150, false), (350, true), (550, true)] {
            send(&mut spacing, at_ms, ok);
        }
        for (at_ms, ok) in [(750, true), (900, false), (1_100, true), (1_300, true)] {
            send(&mut spacing, at_ms, ok);
        }
        assert_eq!(spacing.admitted, Some(Duration::from_millis(200)));
        send(&mut spacing, 1_499, false);
        assert_eq!(spacing.contradictions, 0);
        assert_eq!(spacing.refused, Some(Duration::from_millis(199)));
        let at = send(&mut spacing, 1_900, true);
        assert_eq!(
            spacing.interval(at, &T),
            Some(Duration::from_millis(200)),
            "paced at the top"
        );
    }

    /// A bucket of one that charges the requests it refuses (15 a second):
    /// a refused probe puts it a whole interval behind, and sends at the
    /// bracket's top would each be refused and put it further behind. The
    /// key backs off after a refusal and is refused about once per probe,
    /// still paced at the interval. (Sent at the top after a refused probe,
    /// and reading the next refusal from the admission before, it was
    /// refused until the bracket broke, and let go of the key.)
    #[test]
    fn a_bucket_of_one_that_counts_refusals_is_refused_once_per_probe() {
        let interval = Duration::from_micros(66_667);
        let sends = 3_000;
        let (spacing, refused) = drive(interval, Duration::from_millis(56), sends, true);
        let at = spacing.last_admitted.expect("admitted");
        let paced = spacing.interval(at, &T).expect("a spacer");
        assert!(paced >= interval, "{paced:?}");
        assert!(
            paced.as_secs_f64() <= interval.as_secs_f64() * (1.0 + T.narrow),
            "{paced:?}"
        );
        // 200 s of sends: the first holds of 32 s and 64 s, then probes
        // 64 s apart, each refused once, and the few refusals that close the
        // bracket.
        assert!(refused <= 8, "{refused} refused once paced");
    }

    /// A fixed window of 10 a second, sent to every 50 ms: it admits
    /// short gaps and then refuses gaps that grow until the window ends.
    /// It never paces the key, not even after its lockouts.
    #[test]
    fn a_window_contradicts_the_bracket_and_paces_nothing() {
        let mut spacing = Spacing::default();
        let start = Instant::now();
        let (mut at, mut used, mut window) = (start, 0, 0);
        for _ in 0..400 {
            let w = (at - start).as_millis() / 1_000;
            if w != window {
                (window, used) = (w, 0);
            }
            let ok = used < 10;
            used += u32::from(ok);
            spacing.observe(at, ok, (false, None), &T);
            assert_eq!(spacing.interval(at, &T), None, "at {:?}", at - start);
            at += Duration::from_millis(50);
        }
    }

    /// A log overrun by slow start: it admitted 5 ms gaps, then refuses
    /// gaps up to 14 ms while its count runs out, and admits the 15 ms the
    /// cut paces at. The contradiction doubles the refusals it takes to
    /// pace as much as the admissions: two refusals and eight admissions
    /// do not pace the key, four refusals do.
    #[test]
    fn after_a_contradiction_it_takes_twice_the_refusals_to_pace() {
        fn send(spacing: &mut Spacing, at: &mut Instant, gap_ms: u64, ok: bool) {
            *at += Duration::from_millis(gap_ms);
            spacing.observe(*at, ok, (false, None), &T);
        }
        let mut spacing = Spacing::default();
        let mut at = Instant::now();
        for _ in 0..10 {
            send(&mut spacing, &mut at, 5, true);
        }
        // Each refused gap counts from the last admission.
        send(&mut spacing, &mut at, 13, false);
        send(&mut spacing, &mut at, 2, true);
        send(&mut spacing, &mut at, 14, false);
        for _ in 0..8 {
            send(&mut spacing, &mut at, 15, true);
        }
        assert_eq!(spacing.contradictions, 1);
        assert_eq!(spacing.interval(at, &T), None);
        for _ in 0..2 {
            send(&mut spacing, &mut at, 14, false);
            send(&mut spacing, &mut at, 1, true);
        }
        let paced = spacing.interval(at, &T).expect("a spacer");
        assert!(paced > Duration::from_millis(14) && paced <= Duration::from_millis(15));
    }

    /// A gap read while an earlier request is unanswered is not read.
    #[test]
    fn a_gap_past_an_unanswered_request_is_not_read() {
        let mut spacing = Spacing::default();
        let start = Instant::now();
        spacing.observe(start, true, (false, None), &T);
        spacing.observe(start + Duration::from_millis(10), false, (true, None), &T);
        spacing.observe(start + Duration::from_millis(20), false, (true, None), &T);
        assert_eq!(spacing.refused, None);
        assert_eq!(spacing.interval(start, &T), None);
    }
}
