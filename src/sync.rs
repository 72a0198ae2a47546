//! The one place crate code takes its synchronisation primitives from.
//!
//! Normal builds wrap `parking_lot` and `std`; builds with `--cfg idem_loom` wrap
//! `loom`'s types behind the same shape (`lock()` returns the guard directly), so the
//! loom models in `tests/loom.rs` explore the crate's own locking protocol.

#[cfg(not(idem_loom))]
mod imp {
    pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use std::sync::Arc;

    /// A mutex whose `lock` cannot fail (parking_lot does not poison).
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

    /// The guard of a [`Mutex`].
    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(parking_lot::Mutex::new(value))
        }

        #[inline]
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock()
        }

        /// The lock if it is free now, without waiting.
        #[inline]
        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock()
        }

        /// Where the protected value lies, without locking: only an address, for a
        /// prefetch (dereferencing it without the lock would race).
        #[inline]
        pub(crate) fn data_ptr(&self) -> *mut T {
            self.0.data_ptr()
        }
    }
}

#[cfg(idem_loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use loom::sync::Arc;

    /// A mutex whose `lock` cannot fail: a panic while holding it is a bug, not a state.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// The guard of a [`Mutex`].
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            match self.0.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            }
        }

        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            match self.0.try_lock() {
                Ok(guard) => Some(guard),
                Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }
    }
}

pub(crate) use imp::*;
