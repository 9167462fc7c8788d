//! The home-write fast path: a write fault on a home page that is read-only only so that writes
//! to it are seen is resolved in the fault handler itself (mprotect to read-write) and reported to
//! the service thread afterwards, without waking it or waiting for it.
//!
//! Per page, one byte of state: 0 = not eligible, 1 = eligible (set by the core through
//! `PageMemory::allow_home_write`), 2 = opened by a handler, not yet reported. A handler claims a
//! page by 1 -> 2, opens it, and queues its number; the service thread takes the queue at the top
//! of every loop iteration, before any request or message, so a thread's writes are always
//! recorded before its next lock release or barrier. Any protection change by the core withdraws
//! eligibility first. Atomics only: the handler side is async-signal-safe.

use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

const QUEUE: usize = 1024;

static STATE: AtomicPtr<AtomicU8> = AtomicPtr::new(std::ptr::null_mut());
static PAGES: AtomicUsize = AtomicUsize::new(0);
static QUEUED: [AtomicU64; QUEUE] = [const { AtomicU64::new(0) }; QUEUE];
static PENDING: AtomicU32 = AtomicU32::new(0);
/// Faults resolved here, for the statistics.
pub(crate) static FAST_FAULTS: AtomicU64 = AtomicU64::new(0);

/// Sets up the state of `pages` pages (the memory is zeroed: nothing eligible).
pub(crate) fn init(state: *mut AtomicU8, pages: usize) {
    PAGES.store(pages, Ordering::SeqCst);
    STATE.store(state, Ordering::SeqCst);
}

fn state(page: usize) -> Option<&'static AtomicU8> {
    let base = STATE.load(Ordering::Acquire);
    if base.is_null() || page >= PAGES.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: `base` points to `PAGES` AtomicU8s in a mapping that lives as long as the process
    // (set once by `init`); `page` is in bounds.
    Some(unsafe { &*base.add(page) })
}

/// The core allows the fast path for `page`.
pub(crate) fn allow(page: usize) {
    if let Some(s) = state(page) {
        s.store(1, Ordering::SeqCst);
    }
}

/// The core changes the protection of `page`: no fast path for it until allowed again.
pub(crate) fn withdraw(page: usize) {
    if let Some(s) = state(page) {
        if s.load(Ordering::Relaxed) == 1 {
            let _ = s.compare_exchange(1, 0, Ordering::SeqCst, Ordering::Relaxed);
        }
    }
}

/// In the fault handler: claims `page` for a write. True means: open it and call [`queue`].
pub(crate) fn claim(page: usize) -> bool {
    state(page).is_some_and(|s| {
        s.compare_exchange(1, 2, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    })
}

/// In the fault handler, after opening: tells the service thread. False if the queue is full (the
/// caller then takes the slow path, which records the write too).
pub(crate) fn queue(page: usize) -> bool {
    let start = page % QUEUE;
    for k in 0..QUEUE {
        let slot = &QUEUED[(start + k) % QUEUE];
        if slot
            .compare_exchange(0, page as u64 + 1, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            PENDING.fetch_add(1, Ordering::SeqCst);
            FAST_FAULTS.fetch_add(1, Ordering::Relaxed);
            return true;
        }
    }
    false
}

/// Service thread: reports every queued page.
pub(crate) fn drain(mut report: impl FnMut(usize)) {
    if PENDING.load(Ordering::SeqCst) == 0 {
        return;
    }
    for slot in &QUEUED {
        let v = slot.swap(0, Ordering::SeqCst);
        if v != 0 {
            PENDING.fetch_sub(1, Ordering::SeqCst);
            let page = (v - 1) as usize;
            if let Some(s) = state(page) {
                let _ = s.compare_exchange(2, 0, Ordering::SeqCst, Ordering::Relaxed);
            }
            report(page);
        }
    }
}
