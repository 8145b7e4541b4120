//! The crate's one way to take a mutex, and the primitives the limiter's
//! lock-free path is built from.
//!
//! Built with `RUSTFLAGS="--cfg pace_loom"`, the limiter's mutex and atomic
//! words are [loom](https://docs.rs/loom)'s, so that `tests/loom.rs` can
//! explore every interleaving of its compare-and-swap with the lock that
//! takes the word back. (The cfg has a name of its own, not `loom`, so that
//! dependencies which read `cfg(loom)` are built as usual.)

use std::sync::LockResult;

#[cfg(not(pace_loom))]
pub(crate) use std::sync::{atomic::AtomicU64, Mutex, MutexGuard};

#[cfg(pace_loom)]
pub(crate) use loom::sync::{atomic::AtomicU64, Mutex, MutexGuard};

/// Lock `mutex`, using it even if a thread panicked while holding it.
///
/// Every state this crate keeps behind a mutex is consistent after each
/// statement that could panic (and none should), so a poisoned lock is
/// still usable; refusing it would turn one bug into a failure of every
/// later call.
pub(crate) fn lock<T: ?Sized>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    recover(mutex.lock())
}

/// Read `lock`, as [`lock`] takes a mutex (a poisoned lock still usable).
/// (Only the client's scopes keep state behind an `RwLock`.)
#[cfg(feature = "client")]
pub(crate) fn read<T: ?Sized>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    recover(lock.read())
}

/// Write `lock`, as [`lock`] takes a mutex.
#[cfg(feature = "client")]
pub(crate) fn write<T: ?Sized>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    recover(lock.write())
}

/// [`lock`] for the limiter's mutex, which is loom's under `pace_loom`.
pub(crate) fn lock_model<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    recover(mutex.lock())
}

fn recover<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(|poisoned| poisoned.into_inner())
}
