//! The server's clock, read off its `Date` headers to within a fraction of
//! a second.
//!
//! Absolute times in rate-limit headers (an epoch reset, an HTTP-date
//! `Retry-After`) are measured against the server's clock, and the only
//! reading of it is `Date`, in whole seconds: taken alone it places the
//! server's "now" anywhere in a second, and a reset written in milliseconds
//! is read up to a second late (a bucket of one refilling every 13 ms,
//! whose epoch-millisecond reset says so, read as one request a second).
//! The local clock cannot stand in for it: the two may differ by minutes.
//!
//! Each response narrows it down, as `htpdate` does: the server wrote its
//! `Date` at some instant between the request's send and the response's
//! arrival, at a time within the second the `Date` names; so the server's
//! time at any local instant lies within a bracket, and the brackets of
//! successive responses intersect. Responses that fall at different phases
//! of the server's second shrink the bracket to about the time between
//! them. A response whose bracket misses the one held (the server's clock
//! was set, or a second server answers under the same name) starts it
//! over, so no reading is ever worse than its own `Date`.
//!
//! Pure arithmetic on the local monotonic clock: tokio's, so a paused clock
//! runs it exactly.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// The resolution of an HTTP-date.
const DATE_RESOLUTION: Duration = Duration::from_secs(1);
/// The most servers a client keeps a clock for; past it they start over.
const MAX_SERVERS: usize = 1_024;

/// Where the server's clock stands against the local one: at the local
/// instant `anchor`, the server's time was at least `earliest` and less
/// than `latest`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bracket {
    anchor: Instant,
    earliest: SystemTime,
    latest: SystemTime,
}

/// `time` at local instant `from`, carried to local instant `to`.
fn carry(time: SystemTime, from: Instant, to: Instant) -> SystemTime {
    if to >= from {
        time.checked_add(to - from).unwrap_or(time)
    } else {
        time.checked_sub(from - to).unwrap_or(time)
    }
}

impl Bracket {
    /// What one response says: dated `date`, for a request sent at `sent`
    /// and answered at `received`, both local instants.
    pub(crate) fn of(date: SystemTime, sent: Instant, received: Instant) -> Bracket {
        let sent = sent.min(received);
        Bracket {
            anchor: received,
            // Written no later than it arrived, at `date` at the earliest.
            earliest: date,
            // Written no earlier than the request left, before the next
            // second.
            latest: carry(
                date.checked_add(DATE_RESOLUTION).unwrap_or(date),
                sent,
                received,
            ),
        }
    }

    /// The server's time at local instant `at`, as early as it can be (a
    /// wait until a server's instant is then never too short).
    pub(crate) fn earliest_at(&self, at: Instant) -> SystemTime {
        carry(self.earliest, self.anchor, at)
    }

    /// The bracket both `self` and `other` allow, anchored at `other`'s
    /// instant; `None` when they do not meet.
    fn meet(&self, other: &Bracket) -> Option<Bracket> {
        let at = other.anchor;
        let earliest = self.earliest_at(at).max(other.earliest);
        let latest = carry(self.latest, self.anchor, at).min(other.latest);
        (earliest < latest).then_some(Bracket {
            anchor: at,
            earliest,
            latest,
        })
    }

    /// How wide the bracket is: how far past its earliest the server's
    /// time may be.
    pub(crate) fn width(&self) -> Duration {
        self.latest
            .duration_since(self.earliest)
            .unwrap_or(Duration::ZERO)
    }
}

/// Every server's bracket, by origin.
#[derive(Debug, Default)]
pub(crate) struct ServerClocks {
    by_origin: HashMap<String, Bracket>,
}

impl ServerClocks {
    /// A response from `origin` dated `date`, for a request sent at `sent`
    /// and answered at `received`: returns the server's time when it
    /// arrived, as early as the brackets so far allow, and how much later
    /// it may be.
    pub(crate) fn observe(
        &mut self,
        origin: &str,
        date: SystemTime,
        sent: Instant,
        received: Instant,
    ) -> (SystemTime, Duration) {
        let this = Bracket::of(date, sent, received);
        let bracket = match self.by_origin.get_mut(origin) {
            Some(held) => {
                // No longer agreeing: this response alone.
                *held = held.meet(&this).unwrap_or(this);
                *held
            }
            None => {
                if self.by_origin.len() >= MAX_SERVERS {
                    self.by_origin.clear();
                }
                self.by_origin.insert(origin.to_owned(), this);
                this
            }
        };
        (bracket.earliest_at(received), bracket.width())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn secs(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    /// A server whose clock reads `offset` past a whole second at local
    /// instant `t0`, answered in no time, at 100 ms steps: the bracket
    /// closes on the offset to within a step.
    #[tokio::test(start_paused = true)]
    async fn responses_at_different_phases_find_the_server_second() {
        let t0 = Instant::now();
        let offset = Duration::from_millis(370);
        let mut clocks = ServerClocks::default();
        let mut last = None;
        for k in 0..20u32 {
            let at = t0 + Duration::from_millis(100) * k;
            let server_now = secs(1_000) + offset + Duration::from_millis(100) * k;
            let whole = server_now.duration_since(UNIX_EPOCH).unwrap().as_secs();
            last = Some(clocks.observe("a", secs(whole), at, at).0);
        }
        let estimate = last.unwrap();
        let truth = secs(1_000) + offset + Duration::from_millis(1_900);
        let behind = truth.duration_since(estimate).unwrap();
        assert!(behind <= Duration::from_millis(100), "{behind:?}");
        let b = clocks.by_origin["a"];
        assert!(b.width() <= Duration::from_millis(100), "{:?}", b.width());
    }

    /// One response says no more than its `Date`, whatever the latency.
    #[tokio::test(start_paused = true)]
    async fn one_response_is_its_date() {
        let t0 = Instant::now();
        let mut clocks = ServerClocks::default();
        let (at, width) = clocks.observe("a", secs(50), t0, t0 + Duration::from_millis(300));
        assert_eq!(at, secs(50));
        assert_eq!(width, Duration::from_millis(1_300));
        assert_eq!(clocks.by_origin["a"].width(), Duration::from_millis(1_300));
    }

    /// A clock set back an hour does not meet the bracket: the next
    /// response starts it over rather than leaving it empty.
    #[tokio::test(start_paused = true)]
    async fn a_clock_that_jumps_starts_over() {
        let t0 = Instant::now();
        let mut clocks = ServerClocks::default();
        clocks.observe("a", secs(10_000), t0, t0);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            clocks.observe("a", secs(6_401), later, later).0,
            secs(6_401)
        );
    }

    /// Each origin has its own clock.
    #[tokio::test(start_paused = true)]
    async fn origins_do_not_share_a_bracket() {
        let t0 = Instant::now();
        let mut clocks = ServerClocks::default();
        clocks.observe("a", secs(100), t0, t0);
        assert_eq!(clocks.observe("b", secs(7), t0, t0).0, secs(7));
    }
}
