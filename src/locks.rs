//! Locks taken whatever a panicking holder left behind. Every lock in the
//! service guards plain data that one statement updates (a map entry, a
//! list, the first error seen), so a thread that panicked while holding it
//! cannot have left it half-written. Taking a poisoned lock as it is keeps
//! one panic from turning into a panic of every later request; the panic
//! itself is reported where it happened.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], poisoned or not.
pub(crate) trait LockEvenPoisoned<T: ?Sized> {
    fn lock_even_poisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockEvenPoisoned<T> for Mutex<T> {
    #[inline]
    fn lock_even_poisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock::read`] and [`RwLock::write`], poisoned or not.
pub(crate) trait ReadWriteEvenPoisoned<T: ?Sized> {
    fn read_even_poisoned(&self) -> RwLockReadGuard<'_, T>;
    fn write_even_poisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> ReadWriteEvenPoisoned<T> for RwLock<T> {
    #[inline]
    fn read_even_poisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    fn write_even_poisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lock_whose_holder_panicked_is_still_taken_with_its_data() {
        let shared = Arc::new((Mutex::new(vec![1]), RwLock::new(7)));
        let holder = Arc::clone(&shared);
        let panicked = std::thread::spawn(move || {
            let _list = holder.0.lock().unwrap();
            let _number = holder.1.write().unwrap();
            panic!("the holder fails");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.0.is_poisoned() && shared.1.is_poisoned());
        shared.0.lock_even_poisoned().push(2);
        assert_eq!(*shared.0.lock_even_poisoned(), [1, 2]);
        *shared.1.write_even_poisoned() += 1;
        assert_eq!(*shared.1.read_even_poisoned(), 8);
    }
}
