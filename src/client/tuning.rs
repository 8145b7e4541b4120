//! Every threshold the client reads a server with, in one place: what
//! rate-limit headers mean ([`infer`](super::infer)), how a key without
//! them finds its rate ([`headerless`](super::headerless)), and how the
//! gaps between a key's sends read a server that spaces them
//! ([`spacing`](super::spacing)), and when a key's cap on calls in flight
//! is probed ([`concurrency`](super::concurrency)). Each part's fields say what they trade
//! off; [`TUNING`] is the one in force, and the modules read theirs from
//! it, never a number of their own.

use super::{concurrency, headerless, infer, spacing};

/// The thresholds of reading a server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tuning {
    /// Reading `limit`, `remaining` and `reset`: a window's shape, a
    /// bucket's refill.
    pub(crate) headers: infer::Tuning,
    /// A key without headers: slow start, cuts, recovery, holds and probes.
    pub(crate) header_less: headerless::Tuning,
    /// A server that spaces a key's requests, read from their gaps.
    pub(crate) spacing: spacing::Tuning,
    /// A cap on calls in flight learned from concurrency refusals: when
    /// it is probed higher.
    pub(crate) concurrency: concurrency::Tuning,
    /// Where processes share a key's limiter, a shared rate below this
    /// share of the highest one a process saw since the last cut means a
    /// process cut it (the header-less decreases are 0.9 at most); a
    /// learned rate's rounding to whole nanoseconds per token is far less.
    /// Higher follows a cut sooner; lower mistakes less for one.
    pub(crate) fleet_cut: f64,
    /// Where processes share a key's limiter of tokens (or another unit
    /// than requests): the server's bucket read from the headers is
    /// spent, beyond two of the heaviest calls, over this fraction of the
    /// time an empty one takes to fill, on top of its refill (a scope's
    /// own bucket is set to what remains after each answer instead, which
    /// a shared one cannot be: the fleet's calls the server has not
    /// counted yet are not known to one process). The pace falls to the
    /// refill as the bucket empties, with this time constant; the
    /// answers that show it lag by a round trip. Shorter spends a full
    /// bucket sooner (a minute's bucket: 0.484 of the tokens limit over a
    /// half-minute run with the whole fill time, 0.959 with 1/20, 0.968
    /// with 1/30; `tests/llm_fleet_paced.rs`), and overshoots more where
    /// a round trip is long beside it (1/100 of a minute, 0.6 s, failed
    /// calls against a server holding each call 2 s).
    pub(crate) shared_spend: f64,
    /// How many of its latest sends measure the rate a key sends at now.
    /// More measure a slow key more exactly; fewer follow a change sooner.
    pub(crate) latest_sends: usize,
    /// The slot of the two-slot counters a key's send and admission rates
    /// are measured with (a sliding counter over one slot). Longer
    /// measures a slow key more exactly; shorter follows a change sooner.
    pub(crate) rate_slot: std::time::Duration,
    /// The shortest span a measured rate is read over (fewer sends over
    /// less are scaled up to at most this), and the shortest block that
    /// holds a key idle, after which its counts start again. Shorter reads
    /// a rate from fewer sends; longer averages a short idle spell into
    /// the rate the next cut starts from.
    pub(crate) shortest_rate_span: std::time::Duration,
    /// A learned rate within this share of the one applied is not
    /// applied again (no lock, no event). More saves work; less follows
    /// the model's every step.
    pub(crate) reapply_step: f64,
    /// The intervals of sending at its rate a key's header-less growth
    /// counts at most per response: one where processes share the
    /// limiter (each asks for its own response's growth), two for a key
    /// of one process (its responses may come half as often as its
    /// sends). More grows a key whose answers come late faster; less
    /// counts an idle spell as sending less.
    pub(crate) growth_intervals: (f64, f64),
    /// Where processes share a key's limiter, a process whose grants have
    /// followed one another in the shared turns
    /// ([`Grant::shared_turns`](crate::limiter::Grant::shared_turns): no
    /// other process's grant between two of its own) for this long, or
    /// ever, spends the key alone: the gaps between its sends are the
    /// server's, and pace a bucket of one as they do a key no process
    /// shares, and its admissions are all the key's, which a header-less
    /// cut reads as a key no process shares does. Shorter reads a
    /// process left alone as such sooner; longer mistakes fewer of a
    /// fleet's processes, whose grants now and then follow one another
    /// for a while (a slow server's turns go to whichever process asks
    /// first), for one. (Eight grants in a row instead: a fleet of four
    /// on buckets of one of 3 a second was refused 13 % instead of 6 %.)
    pub(crate) alone_after: std::time::Duration,
}

/// The tuning in force.
pub(crate) const TUNING: Tuning = Tuning {
    headers: infer::Tuning::DEFAULT,
    header_less: headerless::Tuning::DEFAULT,
    spacing: spacing::Tuning::DEFAULT,
    concurrency: concurrency::Tuning::DEFAULT,
    fleet_cut: 0.95,
    shared_spend: 1.0 / 20.0,
    latest_sends: 8,
    rate_slot: std::time::Duration::from_secs(1),
    shortest_rate_span: std::time::Duration::from_millis(250),
    reapply_step: 0.01,
    growth_intervals: (1.0, 2.0),
    alone_after: std::time::Duration::from_secs(30),
};
