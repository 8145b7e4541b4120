//! BackoffJitter on release after an instant a server gave.

use std::time::Duration;

use crate::Error;

/// Positive-only jitter added to every instant a server names (a
/// `Retry-After`, the end of a spent window): never earlier than the server
/// asked, so that tasks and processes told the same instant do not all
/// arrive at it together.
///
/// The extra wait is `draw × min(wait × share, cap)` for a uniform draw in
/// `[0, 1)`. The default is a share of 10 % capped at 1 s: a `Retry-After:
/// 2` releases somewhere in `[2 s, 2.2 s)`, a `Retry-After: 60` in
/// `[60 s, 61 s)`.
///
/// ```
/// use std::time::Duration;
/// use reqwest_pace::retry::ReleaseJitter;
///
/// let jitter = ReleaseJitter::default();
/// assert_eq!(jitter.extra(Duration::from_secs(2), 0.5), Duration::from_millis(100));
/// assert_eq!(jitter.extra(Duration::from_secs(60), 0.5), Duration::from_millis(500));
/// assert_eq!(ReleaseJitter::none().extra(Duration::from_secs(2), 0.9), Duration::ZERO);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReleaseJitter {
    share: f64,
    cap: Duration,
}

impl Default for ReleaseJitter {
    fn default() -> Self {
        ReleaseJitter {
            share: 0.1,
            cap: Duration::from_secs(1),
        }
    }
}

impl ReleaseJitter {
    /// Up to `share` (0 to 1) of the wait, at most `cap`.
    pub fn new(share: f64, cap: Duration) -> Result<ReleaseJitter, Error> {
        if !(0.0..=1.0).contains(&share) {
            return Err(Error::config(format!(
                "release jitter share must be in [0, 1], not {share}"
            )));
        }
        Ok(ReleaseJitter { share, cap })
    }

    /// No jitter: release exactly at the server's instant.
    pub fn none() -> ReleaseJitter {
        ReleaseJitter {
            share: 0.0,
            cap: Duration::ZERO,
        }
    }

    /// The extra wait after a server-given `wait`, for a `draw` in `[0, 1)`
    /// (clamped into it).
    pub fn extra(&self, wait: Duration, draw: f64) -> Duration {
        let draw = if draw.is_finite() {
            draw.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let most = wait.mul_f64(self.share).min(self.cap);
        most.mul_f64(draw)
    }
}
