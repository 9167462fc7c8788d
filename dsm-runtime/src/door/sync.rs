//! The primitives the hand-off is made of, switched for the model checker as crossbeam does:
//! the standard atomics, lock, futex, yield, clock and the service thread's eventfd in a build,
//! loom's under `--cfg dsm_loom` (see `model.rs`). Only [`super::slots`] and [`super::state`]
//! use them.

#[cfg(not(dsm_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, fence};
#[cfg(not(dsm_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(dsm_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, fence};
#[cfg(dsm_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// Lets another thread run (the holder of the node's state, preempted on this CPU).
/// Async-signal-safe.
#[cfg(not(dsm_loom))]
pub(crate) fn yield_now() {
    crate::sys::sched_yield();
}

#[cfg(dsm_loom)]
pub(crate) fn yield_now() {
    loom::thread::yield_now();
}

/// When a thread waiting for something gives up (the node's state, `HANDOFF_WAIT`).
/// Async-signal-safe (the monotonic clock).
#[cfg(not(dsm_loom))]
pub(crate) struct Deadline(std::time::Instant);

#[cfg(not(dsm_loom))]
impl Deadline {
    pub(crate) fn after(wait: std::time::Duration) -> Deadline {
        Deadline(std::time::Instant::now() + wait)
    }

    pub(crate) fn passed(&self) -> bool {
        std::time::Instant::now() >= self.0
    }
}

/// The model's deadline: a few attempts (loom has no clock; each attempt a yield).
#[cfg(dsm_loom)]
pub(crate) struct Deadline(std::cell::Cell<u32>);

#[cfg(dsm_loom)]
impl Deadline {
    pub(crate) fn after(_wait: std::time::Duration) -> Deadline {
        Deadline(std::cell::Cell::new(2))
    }

    pub(crate) fn passed(&self) -> bool {
        let left = self.0.get();
        self.0.set(left.saturating_sub(1));
        left == 0
    }
}

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
