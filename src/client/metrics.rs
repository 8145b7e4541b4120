//! The client's events as metrics, on the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`): whatever recorder the application installs
//! (Prometheus, StatsD, OpenTelemetry...) receives them.
//!
//! Each [`Event`] is recorded where it is emitted, beside its `tracing`
//! line and the hook, so the three never disagree. Labels come from small,
//! fixed sets: a layer's name, a status or its class, a give-up reason, a
//! retry's source. A bucket's key (a host, a token, a user id) and the URL
//! are never labels, since one series per key grows without bound; ask
//! [`Pacer::key_status`](super::Pacer::key_status) about one key instead.
//!
//! | name | type | labels | one per |
//! | --- | --- | --- | --- |
//! | `reqwest_pace_sends_total` | counter | | attempt sent (a retry is a send) |
//! | `reqwest_pace_responses_total` | counter | `class` | attempt that got a response |
//! | `reqwest_pace_wait_seconds` | histogram | `layer` | wait for a layer's bucket that was not zero |
//! | `reqwest_pace_throttled_total` | counter | `layer`, `status` | response the server throttled, per layer it taught |
//! | `reqwest_pace_repaced_total` | counter | `layer` | rate a layer's bucket learned |
//! | `reqwest_pace_rate_per_second` | gauge | `layer` | the rate last learned by any key of the layer |
//! | `reqwest_pace_retries_total` | counter | `source` | retry scheduled |
//! | `reqwest_pace_retry_delay_seconds` | histogram | `source` | retry's sleep |
//! | `reqwest_pace_gave_up_total` | counter | `reason` | call that failed for good |
//! | `reqwest_pace_completed_total` | counter | `class` | call that ended with a final response |
//!
//! `class` is the status class (`1xx` to `5xx`, or `other`); `status` the
//! status code of a throttled response (429, 503 or 403); `source` is `server` (the delay is the server's
//! `Retry-After`) or `backoff`; `reason` is
//! [`GiveUp::label`](crate::retry::GiveUp::label). The gauge is
//! per layer, not per key: with several keys in a layer it shows whichever
//! learned last.

use ::metrics::{counter, gauge, histogram};

use super::Event;

/// Record `event` with the current recorder (none installed: nothing).
pub(crate) fn record(event: &Event) {
    match event {
        Event::Waited { layer, waited, .. } => {
            histogram!("reqwest_pace_wait_seconds", "layer" => layer.clone()).record(*waited);
        }
        Event::Sent { .. } => counter!("reqwest_pace_sends_total").increment(1),
        Event::Received { status, .. } => {
            counter!("reqwest_pace_responses_total", "class" => class(*status)).increment(1);
        }
        Event::Throttled { layer, status, .. } => counter!(
            "reqwest_pace_throttled_total",
            "layer" => layer.clone(),
            "status" => status.to_string()
        )
        .increment(1),
        Event::Paced {
            layer, per_second, ..
        } => {
            counter!("reqwest_pace_repaced_total", "layer" => layer.clone()).increment(1);
            gauge!("reqwest_pace_rate_per_second", "layer" => layer.clone()).set(*per_second);
        }
        Event::Retrying {
            delay, from_server, ..
        } => {
            let source = if *from_server { "server" } else { "backoff" };
            counter!("reqwest_pace_retries_total", "source" => source).increment(1);
            histogram!("reqwest_pace_retry_delay_seconds", "source" => source).record(*delay);
        }
        Event::GaveUp { reason, .. } => {
            counter!("reqwest_pace_gave_up_total", "reason" => reason.label()).increment(1);
        }
        Event::Completed { status, .. } => {
            counter!("reqwest_pace_completed_total", "class" => class(*status)).increment(1);
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
