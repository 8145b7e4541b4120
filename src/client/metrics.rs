//! The client's events as metrics, on the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`): whatever recorder the application installs
//! (Prometheus, StatsD, OpenTelemetry...) receives them.
//!
//! Each [`Event`] is recorded where it is emitted, beside its `tracing`
//! line and the hook, so the three never disagree. Labels come from small,
//! fixed sets: a scope's name, a status or its class, a give-up reason, a
//! retry's source. A bucket's key (a host, a token, a user id) and the URL
//! are never labels, since one series per key grows without bound; ask
//! [`Pacer::key_status`](super::Pacer::key_status) about one key instead.
//!
//! The names, types and labels are listed on [`describe_metrics`], which
//! also hands their units and help to the recorder.

use ::metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};

use super::{CircuitState, Event};

const SENDS: &str = "reqwest_pace_sends_total";
const RESPONSES: &str = "reqwest_pace_responses_total";
const WAIT: &str = "reqwest_pace_wait_seconds";
const THROTTLED: &str = "reqwest_pace_throttled_total";
const REPACED: &str = "reqwest_pace_repaced_total";
const RATE: &str = "reqwest_pace_rate_per_second";
const RETRIES: &str = "reqwest_pace_retries_total";
const RETRY_DELAY: &str = "reqwest_pace_retry_delay_seconds";
const GAVE_UP: &str = "reqwest_pace_gave_up_total";
const COMPLETED: &str = "reqwest_pace_completed_total";
const CIRCUIT: &str = "reqwest_pace_circuit_transitions_total";
const CIRCUITS_OPEN: &str = "reqwest_pace_circuits_open";

/// Describe the client's metrics (feature `metrics`) to the installed
/// recorder: each one's unit and a line of help, which exporters show (a
/// Prometheus `# HELP`). Call it once after installing the recorder;
/// recording works without it.
///
/// | name | type | labels | one per |
/// | --- | --- | --- | --- |
/// | `reqwest_pace_sends_total` | counter | | attempt sent (a retry is a send) |
/// | `reqwest_pace_responses_total` | counter | `class` | attempt that got a response |
/// | `reqwest_pace_wait_seconds` | histogram | `scope` | wait for a scope's bucket that was not zero |
/// | `reqwest_pace_throttled_total` | counter | `scope`, `status` | throttled response, per scope it taught |
/// | `reqwest_pace_repaced_total` | counter | `scope` | rate a scope's bucket learned |
/// | `reqwest_pace_rate_per_second` | gauge | `scope` | the rate last learned by any key of the scope |
/// | `reqwest_pace_retries_total` | counter | `source` | retry scheduled |
/// | `reqwest_pace_retry_delay_seconds` | histogram | `source` | retry's sleep |
/// | `reqwest_pace_gave_up_total` | counter | `reason` | call that failed for good |
/// | `reqwest_pace_completed_total` | counter | `class` | call that ended with a final response |
/// | `reqwest_pace_circuit_transitions_total` | counter | `scope`, `state` | change of a key's circuit breaker, by the state entered |
/// | `reqwest_pace_circuits_open` | gauge | `scope` | keys whose breaker is open or half-open (this process) |
///
/// `scope` is the [`Scope`](crate::Scope)'s name; `class` a status class
/// (`1xx` to `5xx`, or `other`); `status` a throttled response's code (429,
/// 503 or 403); `source` is `server` (the server's `Retry-After`) or
/// `backoff`; `reason` is [`ErrorKind::label`](crate::ErrorKind::label) of
/// the kind given up for;
/// `state` is [`CircuitState::label`](crate::CircuitState::label).
/// No metric is labelled by a bucket's key or a URL.
pub fn describe_metrics() {
    describe_counter!(SENDS, Unit::Count, "Attempts sent, retries included.");
    describe_counter!(
        RESPONSES,
        Unit::Count,
        "Attempts that got a response, by status class."
    );
    describe_histogram!(
        WAIT,
        Unit::Seconds,
        "Waits for a scope's bucket before a send (zero waits are not recorded)."
    );
    describe_counter!(
        THROTTLED,
        Unit::Count,
        "Throttled responses (429, 503, or 403 at a spent limit), by scope taught and status."
    );
    describe_counter!(REPACED, Unit::Count, "Rates learned, by scope.");
    describe_gauge!(
        RATE,
        "The rate last learned by a key of the scope, in requests (or units) per second."
    );
    describe_counter!(
        RETRIES,
        Unit::Count,
        "Retries scheduled, by source of the delay (server or backoff)."
    );
    describe_histogram!(
        RETRY_DELAY,
        Unit::Seconds,
        "Sleeps before a retry, by source of the delay (server or backoff)."
    );
    describe_counter!(
        GAVE_UP,
        Unit::Count,
        "Calls that failed for good, by reason."
    );
    describe_counter!(
        COMPLETED,
        Unit::Count,
        "Calls that ended with a final response, by status class."
    );
    describe_counter!(
        CIRCUIT,
        Unit::Count,
        "Changes of a key's circuit breaker, by scope and state entered."
    );
    describe_gauge!(
        CIRCUITS_OPEN,
        Unit::Count,
        "Keys whose circuit breaker is open or half-open, by scope."
    );
}

/// Record `event` with the current recorder (none installed: nothing).
pub(crate) fn record(event: &Event) {
    match event {
        Event::Waited { scope, waited, .. } => {
            histogram!(WAIT, "scope" => scope.clone()).record(*waited);
        }
        Event::Sent { .. } => counter!(SENDS).increment(1),
        Event::Received { status, .. } => {
            counter!(RESPONSES, "class" => class(*status)).increment(1);
        }
        Event::Refused { scope, status, .. } => counter!(
            THROTTLED,
            "scope" => scope.clone(),
            "status" => status.to_string()
        )
        .increment(1),
        Event::Paced {
            scope, per_second, ..
        } => {
            counter!(REPACED, "scope" => scope.clone()).increment(1);
            gauge!(RATE, "scope" => scope.clone()).set(*per_second);
        }
        Event::Retrying {
            delay, from_server, ..
        } => {
            let source = if *from_server { "server" } else { "backoff" };
            counter!(RETRIES, "source" => source).increment(1);
            histogram!(RETRY_DELAY, "source" => source).record(*delay);
        }
        Event::GaveUp { kind, .. } => {
            counter!(GAVE_UP, "reason" => kind.label()).increment(1);
        }
        Event::Completed { status, .. } => {
            counter!(COMPLETED, "class" => class(*status)).increment(1);
        }
        Event::Circuit {
            scope, from, to, ..
        } => {
            counter!(CIRCUIT, "scope" => scope.clone(), "state" => to.label()).increment(1);
            let was_closed = matches!(from, CircuitState::Closed { .. });
            let is_closed = matches!(to, CircuitState::Closed { .. });
            if was_closed && !is_closed {
                gauge!(CIRCUITS_OPEN, "scope" => scope.clone()).increment(1.0);
            } else if !was_closed && is_closed {
                gauge!(CIRCUITS_OPEN, "scope" => scope.clone()).decrement(1.0);
            }
        }
    }
}

/// A status's class, the label of the counters by status: five values and
/// a catch-all, whatever the server sends.
fn class(status: u16) -> &'static str {
    match status / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        5 => "5xx",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::class;

    #[test]
    fn classes_are_bounded() {
        assert_eq!(class(100), "1xx");
        assert_eq!(class(204), "2xx");
        assert_eq!(class(304), "3xx");
        assert_eq!(class(429), "4xx");
        assert_eq!(class(503), "5xx");
        assert_eq!(class(99), "other");
        assert_eq!(class(600), "other");
    }
}
