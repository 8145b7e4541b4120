//! The Lua scripts, and the one shape of reply they all give.
//!
//! Each limiter kind is one script whose first argument names the
//! operation, so that every decision and every adjustment is a single
//! atomic `EVALSHA`. [`redis::Script`] sends `EVALSHA` first and, on a
//! `NOSCRIPT` reply (after a restart, a failover or `SCRIPT FLUSH`), loads
//! the script with `SCRIPT LOAD` and sends the `EVALSHA` again, inside the
//! same call and so inside the same timeout.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::Error;

/// The token bucket (GCRA) script.
pub(crate) static TOKEN_BUCKET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/token_bucket.lua")));

/// The sliding window log script.
pub(crate) static SLIDING_LOG: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/sliding_log.lua")));

/// The shared cap on calls in flight's script.
pub(crate) static IN_FLIGHT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight.lua")));

/// Every script, for loading them up front.
pub(crate) fn all() -> [&'static Script; 3] {
    [&TOKEN_BUCKET, &SLIDING_LOG, &IN_FLIGHT]
}

/// What a script answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Granted: at once when `wait` is zero, else reserved for `wait` from
    /// now. `id` names the reservation for a refund, `epoch` is the key's
    /// block counter when it was made.
    /// `count` is every unit the key granted so far, this grant's included;
    /// `interval` the time per token learned and `too_fast` the one a
    /// server last refused, in nanoseconds (0: none); `turns` every unit
    /// granted so far, those a server refused included (see
    /// [`Grant::shared_turns`](crate::limiter::Grant::shared_turns)).
    Granted {
        wait: Duration,
        id: i64,
        epoch: i64,
        count: u64,
        interval: u64,
        too_fast: u64,
        turns: u64,
    },
    /// Refused: from `try`, the same request would pass after `wait`; from
    /// a bounded `reserve`, its turn would come later than its bound.
    /// Nothing was booked.
    Throttled { wait: Duration },
    /// The weight is over what the shared state says the capacity is.
    TooHeavy { capacity: u64 },
    /// An adjustment or refund was applied.
    Done,
    /// A turn a block came over while it slept falls at or after the
    /// block's end, and stands (the bucket's `confirm`).
    Stands,
    /// Adjustments sent on their own (`batch`) were applied; `epoch` is
    /// the key's block counter after them, or -1 where the key was gone.
    Applied { epoch: i64 },
    /// Held by a server's block that ends after `wait`, longer than the
    /// call's bound; `cause` is what asked for it (status × 2, plus 1 for
    /// a spent quota). Nothing was booked.
    Held { wait: Duration, cause: u64 },
}

fn nanos(n: i64) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(0))
}

impl Reply {
    /// Read a script's reply, refusing anything malformed rather than
    /// guessing.
    pub(crate) fn parse(reply: &[i64]) -> Result<Reply, Error> {
        match *reply {
            [0, wait, id, epoch, count, interval, too_fast, turns] => Ok(Reply::Granted {
                wait: nanos(wait),
                id,
                epoch,
                count: u64::try_from(count).unwrap_or(0),
                interval: u64::try_from(interval).unwrap_or(0),
                too_fast: u64::try_from(too_fast).unwrap_or(0),
                turns: u64::try_from(turns).unwrap_or(0),
            }),
            [1, wait] => Ok(Reply::Throttled { wait: nanos(wait) }),
            [2, capacity] => Ok(Reply::TooHeavy {
                capacity: u64::try_from(capacity).unwrap_or(0),
            }),
            [3, 2] => Ok(Reply::Stands),
            [3, _] => Ok(Reply::Done),
            [4, wait, cause] => Ok(Reply::Held {
                wait: nanos(wait),
                cause: u64::try_from(cause).unwrap_or(0),
            }),
            [5, epoch] => Ok(Reply::Applied { epoch }),
            _ => Err(Error::Backend {
                message: format!("unexpected script reply {reply:?}"),
                source: None,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        assert_eq!(
            Reply::parse(&[0, 1_500, 7, 2, 40, 5_000_000, 4_000_000, 43]).ok(),
            Some(Reply::Granted {
                wait: Duration::from_nanos(1_500),
                id: 7,
                epoch: 2,
                count: 40,
                interval: 5_000_000,
                too_fast: 4_000_000,
                turns: 43
            })
        );
        assert_eq!(
            Reply::parse(&[4, 9_000, 859]).ok(),
            Some(Reply::Held {
                wait: Duration::from_nanos(9_000),
                cause: 859
            })
        );
        assert_eq!(
            Reply::parse(&[1, 10]).ok(),
            Some(Reply::Throttled {
                wait: Duration::from_nanos(10)
            })
        );
        assert_eq!(
            Reply::parse(&[2, 5]).ok(),
            Some(Reply::TooHeavy { capacity: 5 })
        );
        assert_eq!(Reply::parse(&[3, 0]).ok(), Some(Reply::Done));
        assert_eq!(Reply::parse(&[3, 1]).ok(), Some(Reply::Done));
        assert_eq!(Reply::parse(&[3, 2]).ok(), Some(Reply::Stands));
        assert_eq!(
            Reply::parse(&[5, 4]).ok(),
            Some(Reply::Applied { epoch: 4 })
        );
        assert!(Reply::parse(&[5]).is_err());
        assert!(Reply::parse(&[]).is_err());
        assert!(Reply::parse(&[0, 1]).is_err());
        assert!(Reply::parse(&[0, 1, 2, 3]).is_err());
        assert!(Reply::parse(&[0, 1, 2, 3, 4]).is_err());
        assert!(Reply::parse(&[0, 1, 2, 3, 4, 5]).is_err());
        assert!(Reply::parse(&[9, 1]).is_err());
    }

    #[test]
    fn scripts_differ() {
        assert_ne!(TOKEN_BUCKET.get_hash(), SLIDING_LOG.get_hash());
        assert_ne!(TOKEN_BUCKET.get_hash(), IN_FLIGHT.get_hash());
        assert_ne!(SLIDING_LOG.get_hash(), IN_FLIGHT.get_hash());
    }
}
