//! The primitives the hand-off is made of, switched for the model checker as crossbeam does:
//! the standard atomics, the futex and the service thread's eventfd in a build, loom's under
//! `--cfg dsm_loom` (see `model.rs`). Only [`super::slots`] uses them.

#[cfg(not(dsm_loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(dsm_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, fence};

#[cfg(dsm_loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(dsm_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, fence};

/// Sleeps while `*word == expected` (or until woken). Async-signal-safe.
#[cfg(not(dsm_loom))]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    crate::sys::futex_wait(word, expected);
}

/// Wakes every thread sleeping on `word`. Async-signal-safe.
#[cfg(not(dsm_loom))]
pub(crate) fn futex_wake(word: &AtomicU32) {
    crate::sys::futex_wake(word);
}

/// The service thread's eventfd: what wakes it from its sleep in epoll.
#[cfg(not(dsm_loom))]
pub(crate) struct Wakeup {
    fd: AtomicI32,
}

#[cfg(not(dsm_loom))]
impl Wakeup {
    pub(crate) const fn new() -> Wakeup {
        Wakeup {
            fd: AtomicI32::new(-1),
        }
    }

    /// The descriptor to signal (the service thread's, once it started).
    pub(crate) fn set_fd(&self, fd: i32) {
        self.fd.store(fd, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes the eventfd readable. Async-signal-safe.
    pub(crate) fn signal(&self) {
        let fd = self.fd.load(std::sync::atomic::Ordering::Relaxed);
        if fd >= 0 {
            crate::sys::eventfd_signal(fd);
        }
    }
}

// ---- The model checker's stand-ins ----

// The futex as the kernel gives it: the check of the word and the sleep are one step with
// respect to a wake (a wake between them is not lost), modelled with one lock and condition
// variable for every word (a wake may wake sleepers of other words: futex waits are always in
// loops).
#[cfg(dsm_loom)]
loom::lazy_static! {
    static ref FUTEX_LOCK: loom::sync::Mutex<()> = loom::sync::Mutex::new(());
    static ref FUTEX_CV: loom::sync::Condvar = loom::sync::Condvar::new();
}

#[cfg(dsm_loom)]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    let guard = FUTEX_LOCK.lock().unwrap();
    if word.load(std::sync::atomic::Ordering::SeqCst) == expected {
        drop(FUTEX_CV.wait(guard).unwrap());
    }
}

#[cfg(dsm_loom)]
pub(crate) fn futex_wake(_word: &AtomicU32) {
    let _guard = FUTEX_LOCK.lock().unwrap();
    FUTEX_CV.notify_all();
}

/// The eventfd: a counter the service thread sleeps on until it is non-zero (the epoll wait
/// without its timeout, so a lost wake-up shows as a deadlock).
#[cfg(dsm_loom)]
pub(crate) struct Wakeup {
    count: loom::sync::Mutex<u64>,
    cv: loom::sync::Condvar,
}

#[cfg(dsm_loom)]
impl Wakeup {
    pub(crate) fn new() -> Wakeup {
        Wakeup {
            count: loom::sync::Mutex::new(0),
            cv: loom::sync::Condvar::new(),
        }
    }

    pub(crate) fn signal(&self) {
        *self.count.lock().unwrap() += 1;
        self.cv.notify_all();
    }

    /// The service thread's sleep in epoll: until the eventfd is readable; drains it.
    pub(crate) fn wait(&self) {
        let mut n = self.count.lock().unwrap();
        while *n == 0 {
            n = self.cv.wait(n).unwrap();
        }
        *n = 0;
    }
}
