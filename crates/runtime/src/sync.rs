//! The locks the runtime uses: parking_lot's (the default, what the extension ships with),
//! or with the `std-locks` feature pthread's (libc), behind the same API: `lock()`,
//! `read()`, `write()` return guards, and
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
    //! On pthread directly: std's own Mutex/RwLock/Condvar are futex-based on Linux (since
    //! Rust 1.62), which helgrind does not see either.
    use std::cell::UnsafeCell;
    use std::marker::PhantomData;
    use std::ops::{Deref, DerefMut};

    pub struct Mutex<T: ?Sized> {
        raw: UnsafeCell<libc::pthread_mutex_t>,
        data: UnsafeCell<T>,
    }

    // SAFETY: as std's: the data is reached only through a guard, under the lock.
    unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
    unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

    impl<T> Mutex<T> {
        pub const fn new(value: T) -> Self {
            Self {
                raw: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
                data: UnsafeCell::new(value),
            }
        }
        pub fn into_inner(self) -> T {
            self.data.into_inner()
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Self::new(T::default())
        }
    }

    impl<T: ?Sized> std::fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Mutex { .. }")
        }
    }

    impl<T: ?Sized> Mutex<T> {
        pub fn lock(&self) -> MutexGuard<'_, T> {
            // SAFETY: a default (normal) mutex, initialised by its static initialiser.
            let rc = unsafe { libc::pthread_mutex_lock(self.raw.get()) };
            assert_eq!(rc, 0, "pthread_mutex_lock");
            MutexGuard {
                m: self,
                _not_send: PhantomData,
            }
        }
        pub fn get_mut(&mut self) -> &mut T {
            self.data.get_mut()
        }
    }

    pub struct MutexGuard<'a, T: ?Sized> {
        m: &'a Mutex<T>,
        _not_send: PhantomData<*const ()>,
    }

    // SAFETY: as std's MutexGuard (shared access to T from another thread needs T: Sync).
    unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

    impl<T: ?Sized> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: the lock is held.
            unsafe { &*self.m.data.get() }
        }
    }
    impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: the lock is held, by this guard alone.
            unsafe { &mut *self.m.data.get() }
        }
    }
    impl<T: ?Sized> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            // SAFETY: this thread locked it (the guard is not Send).
            unsafe { libc::pthread_mutex_unlock(self.m.raw.get()) };
        }
    }

    pub struct Condvar(UnsafeCell<libc::pthread_cond_t>);

    // SAFETY: pthread condition variables are made to be shared between threads.
    unsafe impl Send for Condvar {}
    unsafe impl Sync for Condvar {}

    impl Default for Condvar {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Condvar {
        pub const fn new() -> Self {
            Self(UnsafeCell::new(libc::PTHREAD_COND_INITIALIZER))
        }
        /// May wake spuriously, as parking_lot's.
        pub fn wait<T: ?Sized>(&self, guard: &mut MutexGuard<'_, T>) {
            // SAFETY: the guard's mutex is locked by this thread.
            unsafe { libc::pthread_cond_wait(self.0.get(), guard.m.raw.get()) };
        }
        pub fn notify_all(&self) -> usize {
            // SAFETY: an initialised condition variable.
            unsafe { libc::pthread_cond_broadcast(self.0.get()) };
            0
        }
        pub fn notify_one(&self) -> bool {
            // SAFETY: as above.
            unsafe { libc::pthread_cond_signal(self.0.get()) };
            false
        }
    }

    pub struct RwLock<T: ?Sized> {
        raw: UnsafeCell<libc::pthread_rwlock_t>,
        data: UnsafeCell<T>,
    }

    // SAFETY: as std's RwLock.
    unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}
    unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}

    impl<T> RwLock<T> {
        pub const fn new(value: T) -> Self {
            Self {
                raw: UnsafeCell::new(libc::PTHREAD_RWLOCK_INITIALIZER),
                data: UnsafeCell::new(value),
            }
        }
    }

    impl<T: ?Sized> std::fmt::Debug for RwLock<T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("RwLock { .. }")
        }
    }

    impl<T: ?Sized> RwLock<T> {
        pub fn read(&self) -> RwLockReadGuard<'_, T> {
            // SAFETY: an initialised rwlock; the guard unlocks it.
            let rc = unsafe { libc::pthread_rwlock_rdlock(self.raw.get()) };
            assert_eq!(rc, 0, "pthread_rwlock_rdlock");
            RwLockReadGuard {
                l: self,
                _not_send: PhantomData,
            }
        }
        pub fn write(&self) -> RwLockWriteGuard<'_, T> {
            // SAFETY: as above.
            let rc = unsafe { libc::pthread_rwlock_wrlock(self.raw.get()) };
            assert_eq!(rc, 0, "pthread_rwlock_wrlock");
            RwLockWriteGuard {
                l: self,
                _not_send: PhantomData,
            }
        }
    }

    pub struct RwLockReadGuard<'a, T: ?Sized> {
        l: &'a RwLock<T>,
        _not_send: PhantomData<*const ()>,
    }
    pub struct RwLockWriteGuard<'a, T: ?Sized> {
        l: &'a RwLock<T>,
        _not_send: PhantomData<*const ()>,
    }

    impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: read-locked.
            unsafe { &*self.l.data.get() }
        }
    }
    impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: write-locked.
            unsafe { &*self.l.data.get() }
        }
    }
    impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: write-locked, by this guard alone.
            unsafe { &mut *self.l.data.get() }
        }
    }
    impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
        fn drop(&mut self) {
            // SAFETY: this thread read-locked it.
            unsafe { libc::pthread_rwlock_unlock(self.l.raw.get()) };
        }
    }
    impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
        fn drop(&mut self) {
            // SAFETY: this thread write-locked it.
            unsafe { libc::pthread_rwlock_unlock(self.l.raw.get()) };
        }
    }
}
