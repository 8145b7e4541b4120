//! What the client reports while it works.

use std::sync::Arc;
use std::time::Duration;

/// One step of a request's life, sent to the hook installed with
/// [`ThrottledClientBuilder::on_event`](super::ThrottledClientBuilder::on_event)
/// and logged with `tracing` (target `reqwest_pace`); with feature
/// `metrics`, also counted on the `metrics` facade (see the README's
/// "Metrics" section for the names and labels).
///
/// Times are the durations decided (waits, sleeps), not measured, so a test
/// can assert an exact schedule.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The request waited for a scope's bucket before it was sent (or,
    /// with scope `robots`, for the interval its host's robots.txt asks).
    #[non_exhaustive]
    Waited {
        /// The call it belongs to ([`Event::call`]).
        call: u64,
        /// The scope's name (`robots` for a robots.txt's interval).
        scope: Arc<str>,
        /// The bucket's key within the scope.
        key: Arc<str>,
        /// How long it waited (tokio clock).
        waited: Duration,
    },
    /// An attempt went out.
    #[non_exhaustive]
    Sent {
        /// The call it belongs to ([`Event::call`]).
        call: u64,
        /// 1 for the first attempt.
        attempt: u32,
        /// The request's method.
        method: reqwest::Method,
        /// The request's URL.
        url: reqwest::Url,
    },
    /// An attempt got a response (any status).
    #[non_exhaustive]
    Received {
        /// The call it belongs to ([`Event::call`]).
        call: u64,
        /// 1 for the first attempt.
        attempt: u32,
        /// The response status.
        status: u16,
    },
    /// The server refused the request for its rate: a 429, a 503, or a
    /// 403 with `Retry-After` or a spent quota
    /// ([`RateLimitSignal::is_throttled`](crate::headers::RateLimitSignal::is_throttled)).
    #[non_exhaustive]
    Refused {
        /// The call it belongs to ([`Event::call`]).
        call: u64,
        /// The scope's name.
        scope: Arc<str>,
        /// The bucket's key.
        key: Arc<str>,
        /// The response status.
        status: u16,
        /// The wait the server asked for, if any.
        retry_after: Option<Duration>,
    },
    /// A scope's bucket was re-paced from what the server said.
    #[non_exhaustive]
    Paced {
        /// The scope's name.
        scope: Arc<str>,
        /// The bucket's key.
        key: Arc<str>,
        /// The new rate, requests (or tokens) per second.
        per_second: f64,
    },
    /// A retry is scheduled after `delay`.
    #[non_exhaustive]
    Retrying {
        /// The call it belongs to ([`Event::call`]).
        call: u64,
        /// The attempt that failed (1 for the first).
        attempt: u32,
        /// The sleep before the next attempt.
        delay: Duration,
        /// Whether the delay is the server's Retry-After (else backoff).
        from_server: bool,
        /// The failed attempt's status, if it got a response.
        status: Option<u16>,
    },
    /// The request failed for good.
    #[non_exhaustive]
    GaveUp {
        /// The call it belongs to ([`Event::call`]).
        call: u64,
        /// Attempts made.
        attempts: u32,
        /// Why: the kind of the error the call returns
        /// ([`Error::kind`](crate::Error::kind)).
        kind: crate::ErrorKind,
        /// The last status, if any.
        status: Option<u16>,
    },
    /// The request completed with a final response.
    #[non_exhaustive]
    Completed {
        /// The call it belongs to ([`Event::call`]).
        call: u64,
        /// Attempts made.
        attempts: u32,
        /// The final status.
        status: u16,
    },
    /// A key's circuit breaker changed state
    /// ([`Scope::circuit_breaker`](crate::Scope::circuit_breaker)): it
    /// opened (`to` is `Open` with its whole cool-down), a call took the
    /// probe (`HalfOpen`), or the probe's success closed it.
    #[non_exhaustive]
    Circuit {
        /// The scope's name.
        scope: Arc<str>,
        /// The key whose breaker changed.
        key: Arc<str>,
        /// The state it left.
        from: crate::CircuitState,
        /// The state it entered.
        to: crate::CircuitState,
    },
}

impl Event {
    /// The logical call the event belongs to: a number the client gives
    /// each call when it starts (unique within the process, increasing),
    /// the same on every event of the call, its waits, attempts and
    /// retries included, so that a hook can follow one call among many
    /// running at once. `None` for the events of a key rather than a call
    /// ([`Event::Paced`], [`Event::Circuit`]). A robots.txt the client
    /// fetches before a call (feature `robots`) is fetched by a call of its
    /// own, with a number of its own.
    ///
    /// ```
    /// # #[cfg(feature = "testing")]
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), reqwest_pace::Error> {
    /// use std::sync::{Arc, Mutex};
    /// use reqwest_pace::testing::RateLimitedServer;
    /// use reqwest_pace::{Event, RequestRate, ThrottledClient};
    ///
    /// let server = RateLimitedServer::builder()
    ///     .limit(RequestRate::per_second(100)?)
    ///     .start()
    ///     .await?;
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = Arc::clone(&seen);
    /// let client = ThrottledClient::builder(reqwest::Client::new())
    ///     .on_event(move |event| {
    ///         if let (Event::Sent { .. } | Event::Completed { .. }, Some(call)) =
    ///             (event, event.call())
    ///         {
    ///             log.lock().unwrap().push(call);
    ///         }
    ///     })
    ///     .build()?;
    /// client.get(server.url()).send().await?;
    /// client.get(server.url()).send().await?;
    /// let seen = seen.lock().unwrap().clone();
    /// // Each call's send and completion carry its number; the two differ.
    /// assert_eq!(seen.len(), 4);
    /// assert_eq!((seen[0], seen[2]), (seen[1], seen[3]));
    /// assert!(seen[0] < seen[2]);
    /// # server.shutdown().await;
    /// # Ok(())
    /// # }
    /// # #[cfg(not(feature = "testing"))]
    /// # fn main() {}
    /// ```
    pub fn call(&self) -> Option<u64> {
        match self {
            Event::Waited { call, .. }
            | Event::Sent { call, .. }
            | Event::Received { call, .. }
            | Event::Refused { call, .. }
            | Event::Retrying { call, .. }
            | Event::GaveUp { call, .. }
            | Event::Completed { call, .. } => Some(*call),
            Event::Paced { .. } | Event::Circuit { .. } => None,
        }
    }
}

pub(crate) type Hook = Arc<dyn Fn(&Event) + Send + Sync>;

/// Whether an event logged at `level` reaches anyone: the hook, the
/// `metrics` facade (feature `metrics`, which counts every event), or a
/// `tracing` subscriber interested in the crate's target at that level.
/// An event nobody receives is not built: the hot path of an unthrottled
/// call then formats no method, URL or key.
pub(crate) fn listened(hook: Option<&Hook>, level: tracing::Level) -> bool {
    if hook.is_some() || cfg!(feature = "metrics") {
        return true;
    }
    match level {
        tracing::Level::DEBUG => tracing::enabled!(target: "reqwest_pace", tracing::Level::DEBUG),
        tracing::Level::INFO => tracing::enabled!(target: "reqwest_pace", tracing::Level::INFO),
        tracing::Level::WARN => tracing::enabled!(target: "reqwest_pace", tracing::Level::WARN),
        _ => true,
    }
}

pub(crate) fn emit(hook: Option<&Hook>, event: Event) {
    match &event {
        Event::Waited {
            call,
            scope,
            key,
            waited,
        } => {
            tracing::debug!(target: "reqwest_pace", call, scope = &**scope, key = &**key, waited_ms = waited.as_millis() as u64, "waited for bucket")
        }
        Event::Sent {
            call,
            attempt,
            method,
            url,
        } => {
            tracing::debug!(target: "reqwest_pace", call, attempt, method = method.as_str(), url = url.as_str(), "sent")
        }
        Event::Received {
            call,
            attempt,
            status,
        } => {
            tracing::debug!(target: "reqwest_pace", call, attempt, status, "received")
        }
        Event::Refused {
            call,
            scope,
            key,
            status,
            retry_after,
        } => tracing::info!(
            target: "reqwest_pace",
            call,
            scope = &**scope,
            key = &**key,
            status,
            retry_after_ms = retry_after.map(|d| d.as_millis() as u64),
            "throttled by server"
        ),
        Event::Paced {
            scope,
            key,
            per_second,
        } => {
            tracing::debug!(target: "reqwest_pace", scope = &**scope, key = &**key, per_second, "re-paced")
        }
        Event::Retrying {
            call,
            attempt,
            delay,
            from_server,
            status,
        } => tracing::info!(
            target: "reqwest_pace",
            call,
            attempt,
            delay_ms = delay.as_millis() as u64,
            from_server,
            status,
            "retrying"
        ),
        Event::GaveUp {
            call,
            attempts,
            kind,
            status,
        } => {
            let kind = kind.label();
            tracing::warn!(target: "reqwest_pace", call, attempts, kind, status, "gave up")
        }
        Event::Completed {
            call,
            attempts,
            status,
        } => {
            tracing::debug!(target: "reqwest_pace", call, attempts, status, "completed")
        }
        Event::Circuit {
            scope,
            key,
            from,
            to,
        } => match to {
            crate::CircuitState::Open { retry_in } => tracing::warn!(
                target: "reqwest_pace",
                scope = &**scope,
                key = &**key,
                from = from.label(),
                cool_down_ms = retry_in.as_millis() as u64,
                "circuit opened"
            ),
            _ => tracing::info!(
                target: "reqwest_pace",
                scope = &**scope,
                key = &**key,
                from = from.label(),
                to = to.label(),
                "circuit changed"
            ),
        },
    }
    #[cfg(feature = "metrics")]
    super::metrics::record(&event);
    if let Some(hook) = hook {
        hook(&event);
    }
}
