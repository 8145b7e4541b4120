//! How the server counts: the limiter each client key meets. Pure
//! functions of `now` (nanoseconds since the server started), no I/O.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use crate::limiter::{Algorithm as _, Gcra, Nanos};
use crate::RequestRate;

/// The limiter algorithm of a [`RateLimitedServer`](super::RateLimitedServer):
/// each client key gets one, made fresh on its first request.
///
/// Real servers differ in what they count, and a client must be right on
/// all of them:
///
/// | variant | models | `remaining` | `reset` |
/// |---|---|---|---|
/// | [`TokenBucket`](Self::TokenBucket) | API gateways, GitHub-style buckets | whole tokens left | until the bucket is full |
/// | [`FixedWindow`](Self::FixedWindow) | express-rate-limit's memory store | left in this window | until the window ends |
/// | [`SlidingLog`](Self::SlidingLog) | Python `limits`' moving window (flask-limiter) | `limit` less the requests in the trailing window | until the oldest of them leaves the window |
/// | [`LeakyBucket`](Self::LeakyBucket) | nginx `limit_req ... burst=N nodelay` | tokens left | until empty of excess |
/// | [`SlidingCounter`](Self::SlidingCounter) | Cloudflare's and redis-cell-era "sliding window counter" | `limit` less the weighted estimate | until the current window ends |
/// | [`Gcra`](Self::Gcra) | redis-cell, `throttled`: `limit` per `period` with a burst | whole requests left | until the bucket is full |
///
/// A fixed window starts at a key's first request and lasts `window`; the
/// next one starts at the first request after it ends (express-rate-limit
/// keeps one reset time per client and starts anew when it has passed).
/// nginx counts "excess" requests and refuses one that would make the
/// excess exceed `burst`: `burst + 1` requests pass at once, then `rate`.
///
/// A sliding window counter keeps two fixed windows aligned on the server's
/// start (`[k·window, (k+1)·window)`) and estimates the trailing window as
/// `previous × (1 − elapsed / window) + current`: a request is admitted
/// when the estimate counting it is at most `limit`. It never stores a log,
/// and a burst at the end of one window still weighs on the next.
///
/// A GCRA is the token bucket's arithmetic stated as `limit` per `period`
/// (which may be a minute) with a `burst`: its headers speak of the period,
/// not of a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerAlgorithm {
    /// `rate` refill, `burst` capacity.
    TokenBucket {
        /// The sustained rate.
        rate: RequestRate,
        /// The capacity.
        burst: u64,
    },
    /// `limit` requests per `window`, the window starting at a key's first
    /// request.
    FixedWindow {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
    },
    /// At most `limit` requests in any trailing `window`.
    SlidingLog {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
    },
    /// nginx's leaky bucket: `rate`, and `burst` excess requests allowed.
    LeakyBucket {
        /// The sustained rate.
        rate: RequestRate,
        /// Excess requests allowed beyond the rate.
        burst: u64,
    },
    /// At most `limit` requests in the estimated trailing `window`: the
    /// current aligned window's count plus the previous one's, weighted by
    /// how much of it the trailing window still covers.
    SlidingCounter {
        /// Requests per window.
        limit: u64,
        /// The window.
        window: Duration,
    },
    /// `rate` written as a count per period (`RequestRate::new(1000, 60 s)` is
    /// 1000 per minute, stated so in the headers), at most `burst` at once:
    /// a token bucket of capacity `burst` refilling at `rate`.
    Gcra {
        /// The sustained rate; its count and period are the stated limit
        /// and window.
        rate: RequestRate,
        /// How many may pass at once (the bucket's capacity).
        burst: u64,
    },
}

impl ServerAlgorithm {
    /// The true long-run limit, in requests per second: the rate, or the
    /// limit per window.
    ///
    /// A sliding counter's is lower than its stated `limit / window`: in a
    /// window that follows a non-empty one, the previous window still
    /// weighs something until the very end, so at most `limit − 1` pass;
    /// and `limit` pass only after an empty window. The best a client can
    /// sustain is `max(limit − 1, limit / 2)` per window.
    pub fn sustained_per_second(&self) -> f64 {
        let per =
            |count: f64, window: Duration| count / window.as_secs_f64().max(f64::MIN_POSITIVE);
        match *self {
            ServerAlgorithm::TokenBucket { rate, .. }
            | ServerAlgorithm::LeakyBucket { rate, .. }
            | ServerAlgorithm::Gcra { rate, .. } => rate.per_second_f64(),
            ServerAlgorithm::FixedWindow { limit, window }
            | ServerAlgorithm::SlidingLog { limit, window } => per(limit as f64, window),
            ServerAlgorithm::SlidingCounter { limit, window } => {
                let limit = limit as f64;
                per((limit - 1.0).max(limit / 2.0), window)
            }
        }
    }

    /// How many requests may pass at once from a fresh key.
    pub fn burst(&self) -> u64 {
        match *self {
            ServerAlgorithm::TokenBucket { burst, .. } | ServerAlgorithm::Gcra { burst, .. } => {
                burst
            }
            ServerAlgorithm::LeakyBucket { burst, .. } => burst.saturating_add(1),
            ServerAlgorithm::FixedWindow { limit, .. }
            | ServerAlgorithm::SlidingLog { limit, .. }
            | ServerAlgorithm::SlidingCounter { limit, .. } => limit,
        }
    }

    /// The stated window: 1 s for the buckets (their limit is per second).
    pub(crate) fn window(&self) -> Duration {
        match *self {
            ServerAlgorithm::FixedWindow { window, .. }
            | ServerAlgorithm::SlidingLog { window, .. }
            | ServerAlgorithm::SlidingCounter { window, .. } => window,
            ServerAlgorithm::Gcra { rate, .. } => rate.per(),
            ServerAlgorithm::TokenBucket { .. } | ServerAlgorithm::LeakyBucket { .. } => {
                Duration::from_secs(1)
            }
        }
    }

    /// The same algorithm at a new rate: buckets take it, windows scale
    /// their limit to `rate × window` (at least 1).
    pub(crate) fn with_rate(self, rate: RequestRate) -> ServerAlgorithm {
        let scaled = |window: Duration| {
            ((rate.per_second_f64() * window.as_secs_f64()).round() as u64).max(1)
        };
        match self {
            ServerAlgorithm::TokenBucket { burst, .. } => {
                ServerAlgorithm::TokenBucket { rate, burst }
            }
            ServerAlgorithm::LeakyBucket { burst, .. } => {
                ServerAlgorithm::LeakyBucket { rate, burst }
            }
            ServerAlgorithm::FixedWindow { window, .. } => ServerAlgorithm::FixedWindow {
                limit: scaled(window),
                window,
            },
            ServerAlgorithm::SlidingLog { window, .. } => ServerAlgorithm::SlidingLog {
                limit: scaled(window),
                window,
            },
            ServerAlgorithm::SlidingCounter { window, .. } => ServerAlgorithm::SlidingCounter {
                limit: scaled(window),
                window,
            },
            ServerAlgorithm::Gcra { burst, .. } => ServerAlgorithm::Gcra { rate, burst },
        }
    }

    /// A new key's meter, its fixed windows `aligned` to whole multiples
    /// of their length (see [`Meter::Window`]).
    pub(crate) fn meter_aligned(&self, aligned: bool) -> Meter {
        let mut meter = self.meter();
        if let Meter::Window { aligned: a, .. } = &mut meter {
            *a = aligned;
        }
        meter
    }

    pub(crate) fn meter(&self) -> Meter {
        match *self {
            ServerAlgorithm::TokenBucket { rate, burst } => {
                let burst = burst.max(1);
                Meter::Bucket(Gcra::new(rate, burst, burst))
            }
            ServerAlgorithm::LeakyBucket { rate, burst } => {
                let capacity = burst.saturating_add(1);
                Meter::Bucket(Gcra::new(rate, capacity, capacity))
            }
            ServerAlgorithm::FixedWindow { .. } => Meter::Window {
                start: None,
                count: 0,
                aligned: false,
            },
            ServerAlgorithm::SlidingLog { .. } => Meter::Log(VecDeque::new()),
            ServerAlgorithm::SlidingCounter { .. } => Meter::Counter {
                index: 0,
                previous: 0,
                current: 0,
            },
            ServerAlgorithm::Gcra { rate, burst } => {
                let burst = burst.max(1);
                Meter::Bucket(Gcra::new(rate, burst, burst))
            }
        }
    }
}

impl fmt::Display for ServerAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAlgorithm::TokenBucket { rate, burst } => {
                write!(
                    f,
                    "token bucket {:.3}/s burst {burst}",
                    rate.per_second_f64()
                )
            }
            ServerAlgorithm::LeakyBucket { rate, burst } => {
                write!(
                    f,
                    "leaky bucket {:.3}/s burst {burst}",
                    rate.per_second_f64()
                )
            }
            ServerAlgorithm::FixedWindow { limit, window } => {
                write!(f, "fixed window {limit} per {window:?}")
            }
            ServerAlgorithm::SlidingLog { limit, window } => {
                write!(f, "moving window {limit} per {window:?}")
            }
            ServerAlgorithm::SlidingCounter { limit, window } => {
                write!(f, "sliding counter {limit} per {window:?}")
            }
            ServerAlgorithm::Gcra { rate, burst } => {
                write!(
                    f,
                    "gcra {} per {:?} burst {burst}",
                    rate.count(),
                    rate.per()
                )
            }
        }
    }
}

/// One key's counting state.
#[derive(Clone, Debug)]
pub(crate) enum Meter {
    Bucket(Gcra),
    /// A fixed window: when the current one began and its count. A window
    /// that is not `aligned` begins with the first request after the last
    /// one ended (a counter with an expiry); an aligned one at a whole
    /// multiple of its length on the server's clock.
    Window {
        start: Option<Nanos>,
        count: u64,
        aligned: bool,
    },
    Log(VecDeque<Nanos>),
    /// The sliding window counter: the aligned window `index` and the
    /// counts of it and of the one before.
    Counter {
        index: u64,
        previous: u64,
        current: u64,
    },
}

/// What one decision leaves for the headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) remaining: u64,
    /// Until the algorithm's reset (full, window end, oldest leaves).
    pub(crate) reset: Duration,
    /// On a refusal, until a request would be admitted.
    pub(crate) until_one: Option<Duration>,
}

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn span(from: Nanos, to: Nanos) -> Duration {
    Duration::from_nanos(to.saturating_sub(from))
}

impl Meter {
    /// Decide one request at `now` under `algorithm`. With
    /// `counts_refusals`, a refused request is counted as an admitted one
    /// would be (it takes a token the bucket does not have, joins the log,
    /// adds to the window's count), so a client that keeps sending while
    /// refused keeps itself locked out; the refusal's wait is then the one
    /// after counting it.
    pub(crate) fn decide(
        &mut self,
        algorithm: &ServerAlgorithm,
        now: Nanos,
        counts_refusals: bool,
    ) -> Decision {
        match self {
            Meter::Bucket(bucket) => {
                let admitted = bucket.try_admit(now, 1);
                if let (Err(ready), true) = (admitted, counts_refusals) {
                    // Taking a token the bucket does not have pushes the
                    // instant it is full (and the next admission) one
                    // interval later: a block until one interval after the
                    // one it would have admitted at does exactly that.
                    let interval = bucket.rate().interval_nanos();
                    bucket.block_until(now, ready.saturating_add(interval));
                }
                let full_at = bucket.earliest(now, bucket.capacity());
                Decision {
                    remaining: bucket.available(now),
                    reset: span(now, full_at),
                    until_one: admitted.err().map(|_| span(now, bucket.earliest(now, 1))),
                }
            }
            Meter::Window {
                start,
                count,
                aligned,
            } => {
                let (limit, window) = match *algorithm {
                    ServerAlgorithm::FixedWindow { limit, window } => (limit, nanos(window)),
                    _ => (0, 0),
                };
                let begun = match *start {
                    Some(s) if now < s.saturating_add(window) => s,
                    _ => {
                        *count = 0;
                        match window {
                            w if *aligned && w > 0 => now - now % w,
                            _ => now,
                        }
                    }
                };
                *start = Some(begun);
                let end = begun.saturating_add(window);
                let admitted = *count < limit;
                if admitted || counts_refusals {
                    *count = count.saturating_add(1);
                }
                Decision {
                    remaining: limit.saturating_sub(*count),
                    reset: span(now, end),
                    until_one: (!admitted).then(|| span(now, end)),
                }
            }
            Meter::Log(log) => {
                let (limit, window) = match *algorithm {
                    ServerAlgorithm::SlidingLog { limit, window } => (limit, nanos(window)),
                    _ => (0, 0),
                };
                while log
                    .front()
                    .is_some_and(|&at| at.saturating_add(window) <= now)
                {
                    log.pop_front();
                }
                let admitted = (log.len() as u64) < limit;
                if admitted || counts_refusals {
                    log.push_back(now);
                }
                let oldest_leaves = log
                    .front()
                    .map_or(now.saturating_add(window), |&at| at.saturating_add(window));
                // A request is admitted once `limit - 1` or fewer remain:
                // when the entry `len - limit` from the front leaves.
                let until_one = (!admitted).then(|| {
                    let index = (log.len() as u64).saturating_sub(limit);
                    let leaves = usize::try_from(index)
                        .ok()
                        .and_then(|i| log.get(i))
                        .map_or(now, |&at| at.saturating_add(window));
                    span(now, leaves)
                });
                Decision {
                    remaining: limit.saturating_sub(log.len() as u64),
                    reset: span(now, oldest_leaves),
                    until_one,
                }
            }
            Meter::Counter {
                index,
                previous,
                current,
            } => {
                let (limit, window) = match *algorithm {
                    ServerAlgorithm::SlidingCounter { limit, window } => {
                        (limit, nanos(window).max(1))
                    }
                    _ => (0, 1),
                };
                let k = now / window;
                if k != *index {
                    *previous = if k == index.saturating_add(1) {
                        *current
                    } else {
                        0
                    };
                    *current = 0;
                    *index = k;
                }
                let counter = SlidingCounter {
                    limit,
                    window,
                    index: k,
                    previous: *previous,
                };
                let admitted = counter.admits(now, *current);
                if admitted || counts_refusals {
                    *current = current.saturating_add(1);
                }
                Decision {
                    remaining: counter.remaining(now, *current),
                    reset: span(now, counter.start(k.saturating_add(1))),
                    until_one: (!admitted).then(|| span(now, counter.earliest(*current))),
                }
            }
        }
    }

    /// Whether the key is as good as new (its state can be dropped).
    pub(crate) fn is_idle(&self, algorithm: &ServerAlgorithm, now: Nanos) -> bool {
        match self {
            Meter::Bucket(bucket) => bucket.is_idle(now),
            Meter::Window { start, .. } => {
                start.is_none_or(|s| now >= s.saturating_add(nanos(algorithm.window())))
            }
            Meter::Log(log) => log
                .back()
                .is_none_or(|&at| now >= at.saturating_add(nanos(algorithm.window()))),
            Meter::Counter { index, .. } => {
                // Both counts have left the estimate two windows on.
                now / nanos(algorithm.window()).max(1) >= index.saturating_add(2)
            }
        }
    }

    /// A new rate for a bucket (tokens earned are kept); windows take the
    /// new limit from the algorithm on their next decision.
    pub(crate) fn set_rate(&mut self, now: Nanos, rate: RequestRate) {
        if let Meter::Bucket(bucket) = self {
            bucket.set_rate(now, rate);
        }
    }
}

/// The sliding window counter's arithmetic within the aligned window
/// `index`, in integers: the estimate at `now` of `current` requests here
/// and `previous` in the window before is
/// `(previous × (window − elapsed) + current × window) / window`.
struct SlidingCounter {
    limit: u64,
    window: Nanos,
    index: u64,
    previous: u64,
}

impl SlidingCounter {
    fn start(&self, index: u64) -> Nanos {
        index.saturating_mul(self.window)
    }

    /// The estimate times the window at `now` (in window `index`).
    fn scaled(&self, now: Nanos, current: u64) -> u128 {
        let left = u128::from(self.start(self.index.saturating_add(1)).saturating_sub(now));
        u128::from(self.previous) * left + u128::from(current) * u128::from(self.window)
    }

    /// Whether one more request at `now` keeps the estimate within `limit`.
    fn admits(&self, now: Nanos, current: u64) -> bool {
        self.scaled(now, current) + u128::from(self.window)
            <= u128::from(self.limit) * u128::from(self.window)
    }

    /// Whole requests left under the limit at `now`.
    fn remaining(&self, now: Nanos, current: u64) -> u64 {
        let room = (u128::from(self.limit) * u128::from(self.window))
            .saturating_sub(self.scaled(now, current));
        u64::try_from(room / u128::from(self.window)).unwrap_or(u64::MAX)
    }

    /// The earliest instant one request is admitted if no other comes:
    /// within this window once the previous count has decayed enough,
    /// else in the next (this window's count decaying), else at the start
    /// of the one after.
    fn earliest(&self, current: u64) -> Nanos {
        let w = u128::from(self.window);
        // `weight × (w − x) ≤ room × w` for the smallest offset `x` in a
        // window: `x ≥ w − ⌊room × w / weight⌋`.
        let offset = |weight: u64, room: u64| -> Option<Nanos> {
            if weight == 0 {
                return Some(0);
            }
            let slack = u128::from(room) * w / u128::from(weight);
            let x = w.saturating_sub(slack);
            (x < w).then(|| u64::try_from(x).unwrap_or(u64::MAX))
        };
        let limit_left = self.limit.saturating_sub(1);
        let here = if current < self.limit {
            offset(self.previous, limit_left - current)
        } else {
            None
        };
        let next = self.index.saturating_add(1);
        match (here, offset(current, limit_left)) {
            (Some(x), _) => self.start(self.index).saturating_add(x),
            (None, Some(x)) => self.start(next).saturating_add(x),
            (None, None) => self.start(next.saturating_add(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// Aligned, a window of 2 s begins at a whole multiple of 2 s whenever
    /// its first request comes, and ends there for every key.
    #[test]
    fn an_aligned_fixed_window_begins_at_a_multiple_of_its_length() {
        let alg = ServerAlgorithm::FixedWindow {
            limit: 2,
            window: Duration::from_secs(2),
        };
        let mut m = alg.meter_aligned(true);
        let d = m.decide(&alg, 1_500 * MS, false);
        assert_eq!((d.remaining, d.reset), (1, Duration::from_millis(500)));
        assert_eq!(m.decide(&alg, 1_900 * MS, false).remaining, 0);
        let refused = m.decide(&alg, 1_950 * MS, false);
        assert_eq!(refused.until_one, Some(Duration::from_millis(50)));
        // The next window began at 2 s, not at this request.
        let d = m.decide(&alg, 3_100 * MS, false);
        assert_eq!((d.remaining, d.reset), (1, Duration::from_millis(900)));
        assert!(matches!(alg.meter(), Meter::Window { aligned: false, .. }));
    }

    #[test]
    fn a_fixed_window_starts_at_the_first_request_and_again_after_it_ends() {
        let alg = ServerAlgorithm::FixedWindow {
            limit: 2,
            window: Duration::from_secs(2),
        };
        let mut m = alg.meter();
        let d = m.decide(&alg, 100 * MS, false);
        assert_eq!(
            (d.remaining, d.reset, d.until_one),
            (1, Duration::from_secs(2), None)
        );
        assert_eq!(m.decide(&alg, 600 * MS, false).remaining, 0);
        let refused = m.decide(&alg, 1_100 * MS, false);
        assert_eq!(refused.until_one, Some(Duration::from_secs(1)));
        // The window ended at 2.1 s; the next starts at the next request.
        let d = m.decide(&alg, 2_500 * MS, false);
        assert_eq!((d.remaining, d.reset), (1, Duration::from_secs(2)));
    }

    #[test]
    fn a_sliding_log_frees_one_slot_as_each_request_leaves_the_window() {
        let alg = ServerAlgorithm::SlidingLog {
            limit: 2,
            window: Duration::from_secs(1),
        };
        let mut m = alg.meter();
        m.decide(&alg, 0, false);
        let d = m.decide(&alg, 400 * MS, false);
        assert_eq!((d.remaining, d.reset), (0, Duration::from_millis(600)));
        assert_eq!(
            m.decide(&alg, 500 * MS, false).until_one,
            Some(Duration::from_millis(500))
        );
        // At 1 s the first leaves: one slot, and the reset is when the
        // second leaves.
        let d = m.decide(&alg, 1_000 * MS, false);
        assert_eq!((d.remaining, d.until_one), (0, None));
        assert_eq!(d.reset, Duration::from_millis(400));
    }

    #[test]
    fn nginx_lets_burst_plus_one_through_at_once() {
        let alg = ServerAlgorithm::LeakyBucket {
            rate: RequestRate::per_second(20).unwrap(),
            burst: 5,
        };
        let mut m = alg.meter();
        let admitted = (0..10)
            .filter(|_| m.decide(&alg, 0, false).until_one.is_none())
            .count();
        assert_eq!(admitted, 6);
        assert_eq!(m.decide(&alg, 50 * MS, false).until_one, None);
        assert_eq!(alg.sustained_per_second(), 20.0);
    }

    #[test]
    fn a_sliding_counter_weighs_the_previous_window_by_what_is_left_of_it() {
        let alg = ServerAlgorithm::SlidingCounter {
            limit: 10,
            window: Duration::from_secs(1),
        };
        let mut m = alg.meter();
        for _ in 0..10 {
            assert_eq!(m.decide(&alg, 900 * MS, false).until_one, None);
        }
        let refused = m.decide(&alg, 950 * MS, false);
        // The next window starts at 1 s with the 10 as its previous one;
        // at 1.1 s they weigh 9, and one more makes 10.
        assert_eq!(refused.until_one, Some(Duration::from_millis(150)));
        assert_eq!(refused.reset, Duration::from_millis(50));
        assert!(m.decide(&alg, 1_099 * MS, false).until_one.is_some());
        let d = m.decide(&alg, 1_100 * MS, false);
        assert_eq!((d.until_one, d.remaining), (None, 0));
        // Within the window, the next slot opens as the previous decays:
        // 10 × (1 − x) + 1 + 1 ≤ 10 at x = 0.2.
        assert_eq!(
            m.decide(&alg, 1_150 * MS, false).until_one,
            Some(Duration::from_millis(50))
        );
        // Two windows on, nothing is left of either.
        assert!(m.is_idle(&alg, 3_000 * MS));
        assert_eq!(m.decide(&alg, 3_000 * MS, false).remaining, 9);
    }

    #[test]
    fn a_sliding_counter_with_a_full_window_waits_for_the_next_ones_decay() {
        let alg = ServerAlgorithm::SlidingCounter {
            limit: 1,
            window: Duration::from_secs(2),
        };
        let mut m = alg.meter();
        assert_eq!(m.decide(&alg, 0, false).until_one, None);
        // A limit of 1 with one in the previous window admits nothing
        // until that window has fully left: at 4 s.
        assert_eq!(
            m.decide(&alg, 500 * MS, false).until_one,
            Some(Duration::from_millis(3_500))
        );
        assert!(m.decide(&alg, 3_999 * MS, false).until_one.is_some());
        assert_eq!(m.decide(&alg, 4_000 * MS, false).until_one, None);
    }

    #[test]
    fn counting_refusals_pushes_a_bucket_one_interval_per_refusal() {
        let alg = ServerAlgorithm::TokenBucket {
            rate: RequestRate::per_second(10).unwrap(),
            burst: 1,
        };
        let mut m = alg.meter();
        assert_eq!(m.decide(&alg, 0, true).until_one, None);
        assert_eq!(
            m.decide(&alg, 0, true).until_one,
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            m.decide(&alg, 100 * MS, true).until_one,
            Some(Duration::from_millis(200))
        );
        // Told 300 ms at 0, the client that waits it out is admitted.
        assert!(m.decide(&alg, 299 * MS, false).until_one.is_some());
        assert_eq!(m.decide(&alg, 300 * MS, true).until_one, None);
    }

    #[test]
    fn counting_refusals_logs_them_in_a_moving_window() {
        let alg = ServerAlgorithm::SlidingLog {
            limit: 2,
            window: Duration::from_secs(1),
        };
        let mut m = alg.meter();
        m.decide(&alg, 0, true);
        m.decide(&alg, 0, true);
        // Refused at 0.5 s and logged: three in the window, so one passes
        // only when two have left, at 1 s; and refused again at 0.9 s, the
        // fourth entry delays it to when three have left, at 1.5 s.
        assert_eq!(
            m.decide(&alg, 500 * MS, true).until_one,
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            m.decide(&alg, 900 * MS, true).until_one,
            Some(Duration::from_millis(600))
        );
        assert!(m.decide(&alg, 1_499 * MS, false).until_one.is_some());
        assert_eq!(m.decide(&alg, 1_500 * MS, true).until_one, None);
    }

    #[test]
    fn a_gcra_states_its_period() {
        let alg = ServerAlgorithm::Gcra {
            rate: RequestRate::per_minute(600).unwrap(),
            burst: 5,
        };
        assert_eq!(alg.window(), Duration::from_secs(60));
        assert_eq!(alg.sustained_per_second(), 10.0);
        let mut m = alg.meter();
        let admitted = (0..10)
            .filter(|_| m.decide(&alg, 0, false).until_one.is_none())
            .count();
        assert_eq!(admitted, 5);
    }
}
