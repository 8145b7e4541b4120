//! Retry policy: backoff schedules, classification and the retry budget.
//!
//! Everything here is a pure function of the attempt number, the outcome and
//! a random draw, so schedules are testable without a clock. The client
//! ([`ThrottledClient`](crate::ThrottledClient)) sleeps on tokio's timer for
//! the durations these functions return.

mod backoff;
mod budget;
mod classify;
mod decide;
mod release;

pub use backoff::{Backoff, BackoffJitter};
pub use budget::RetryBudget;
pub use classify::{is_idempotent, Classifier, DefaultClassifier, Outcome, RetryRules};
pub use decide::{Attempted, Decision};
pub use release::ReleaseJitter;
