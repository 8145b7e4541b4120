//! The crate's one way to take a std mutex.

use std::sync::{Mutex, MutexGuard};

/// Lock `mutex`, using it even if a thread panicked while holding it.
///
/// Every state this crate keeps behind a mutex is consistent after each
/// statement that could panic (and none should), so a poisoned lock is
/// still usable; refusing it would turn one bug into a failure of every
/// later call.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
