//! `reqwest-pace`: client-side throttling and retries for `reqwest`.
//!
//! (Crate documentation is written as the modules land.)
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod limiter;

#[cfg(feature = "client")]
mod client;
#[cfg(feature = "client")]
pub mod headers;
#[cfg(feature = "middleware")]
mod middleware;
#[cfg(feature = "client")]
pub mod retry;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "client")]
pub use client::{host_key, Cost, Event, IntoRequest, Layer, ThrottledClient, ThrottledClientBuilder};
#[cfg(feature = "client")]
pub use error::NotRetriedReason;
pub use error::Error;
#[cfg(feature = "middleware")]
pub use middleware::PaceMiddleware;
pub use limiter::{Adjustment, KeyedLimiter, Limiter, Rate, RateLimiter, TokenBucket};
