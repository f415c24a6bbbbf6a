//! The locks the runtime uses: parking_lot's (the default, what the extension ships with),
//! or with the `std-locks` feature std's (pthread-based), behind the same API: `lock()`,
//! `read()`, `write()` return guards, a poisoned lock is used as it is (`into_inner`), and
//! `Condvar::wait` takes `&mut` guard. `std-locks` exists for race detectors (helgrind,
//! `scripts/helgrind.sh`): they see pthread locks, not parking_lot's atomics and futexes.
//! Under `std-locks` the fork handlers of the pool are not installed (they need
//! parking_lot's raw locks): a build with it is not for a process that forks.

#[cfg(not(feature = "std-locks"))]
pub use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

#[cfg(feature = "std-locks")]
pub use self::std_locks::{Condvar, Mutex, MutexGuard, RwLock};

#[cfg(feature = "std-locks")]
mod std_locks {
    use std::ops::{Deref, DerefMut};
    use std::sync::PoisonError;

    #[derive(Debug, Default)]
    pub struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub const fn new(value: T) -> Self {
            Self(std::sync::Mutex::new(value))
        }
        pub fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl<T: ?Sized> Mutex<T> {
        pub fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)))
        }
        pub fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
        }
    }

    /// Holds its std guard in an Option only so that `Condvar::wait` can take it and put
    /// it back; it is always `Some` outside of a wait.
    pub struct MutexGuard<'a, T: ?Sized>(Option<std::sync::MutexGuard<'a, T>>);

    impl<T: ?Sized> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_ref().expect("guard held")
        }
    }
    impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_mut().expect("guard held")
        }
    }

    #[derive(Debug, Default)]
    pub struct Condvar(std::sync::Condvar);

    impl Condvar {
        pub const fn new() -> Self {
            Self(std::sync::Condvar::new())
        }
        pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let g = guard.0.take().expect("guard held");
            guard.0 = Some(self.0.wait(g).unwrap_or_else(PoisonError::into_inner));
        }
        pub fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
        pub fn notify_one(&self) -> bool {
            self.0.notify_one();
            false
        }
    }

    #[derive(Debug, Default)]
    pub struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub const fn new(value: T) -> Self {
            Self(std::sync::RwLock::new(value))
        }
    }

    impl<T: ?Sized> RwLock<T> {
        pub fn read(&self) -> std::sync::RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }
        pub fn write(&self) -> std::sync::RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }
    }
}
