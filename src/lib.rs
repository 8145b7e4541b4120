//! `reqwest-pace`: client-side throttling and retries for `reqwest`.
//!
//! (Crate documentation is written as the modules land.)
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod limiter;

#[cfg(feature = "client")]
pub mod headers;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "testing")]
pub mod testing;

pub use error::Error;
pub use limiter::{Adjustment, KeyedLimiter, Limiter, Rate, RateLimiter, TokenBucket};
