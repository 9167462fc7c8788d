//! The door between application threads and their node: everything a thread of the program and
//! the node share, in one place.
//!
//! A thread reaches its node two ways: by touching a shared page it does not hold (a fault, in
//! its SIGSEGV handler: `crate::fault`) and by calling the API (`jia_lock`, `Dsm::barrier`...:
//! `crate::call`). Either way it hands the node a typed request ([`request::Request`]: a
//! [`request::Fault`] or a [`request::Call`]) and gets a typed answer back
//! ([`request::FaultOutcome`], [`request::CallResult`]), through its slot ([`slots`]).
//!
//! Who runs the request:
//!
//! 1. **The thread itself**, when the node's state is free ([`state`]): a fault handler drives the
//!    node until its page is in (`fault::drive`); a call runs on the state at once and, if the
//!    core answers at once (a lock this node manages and nobody holds, a `setcv` nobody waits
//!    for), returns with no other thread involved. The slot is then *taken by its own thread*
//!    ([`slots::Slots::take_own`]), so a completion that comes later (the thread handed its wait
//!    back) goes through the slot like any other.
//! 2. **The service thread**, otherwise: the thread posts the request in its slot, wakes the
//!    service thread if it sleeps, and sleeps on the slot's futex until it is completed.
//!
//! What else lives here: the fast-path table of the fault handler ([`fastpath`]), the flags
//! every context reads ([`flags`]), where code runs ([`context`]), and how a node ends
//! ([`end`]: one `write(2)`, then `exit` or, in signal context, `_exit`, with the status
//! chosen). Every function of this module is async-signal-safe, and the hand-off ([`slots`]) is
//! model-checked on its own source with loom (`model.rs`: `scripts/loom`).

pub(crate) mod context;
pub(crate) mod end;
pub(crate) mod fastpath;
pub(crate) mod flags;
#[cfg(all(test, dsm_loom))]
mod model;
pub(crate) mod request;
pub(crate) mod slots;
pub(crate) mod state;
mod sync;
pub(crate) mod threads;

use std::cell::Cell;

pub use slots::MAX_THREADS;
use slots::Slots;

/// The slots of this process.
#[cfg(not(dsm_loom))]
pub(crate) static SLOTS: Slots<MAX_THREADS> = Slots::new();

#[cfg(not(dsm_loom))]
thread_local! {
    static MY_SLOT: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// This thread's slot, claiming one on first use: a free one, else one whose thread has ended
/// (so a program may start any number of threads over its life, [`MAX_THREADS`] at a time).
/// Async-signal-safe: atomics and two system calls that keep errno.
#[cfg(not(dsm_loom))]
pub(crate) fn my_slot() -> Option<usize> {
    let cur = MY_SLOT.with(Cell::get);
    if cur != u32::MAX {
        return Some(cur as usize);
    }
    let me = crate::sys::gettid();
    let i = SLOTS
        .claim_free(me)
        .or_else(|| SLOTS.take_over(me, crate::sys::thread_exists))?;
    MY_SLOT.with(|c| c.set(i as u32));
    // Slots of threads that ended stay held until another thread takes them over: count the
    // live ones.
    let held = SLOTS
        .uses()
        .filter(
            |(_, u)| matches!(u, slots::Use::Held { tid, .. } if crate::sys::thread_exists(*tid)),
        )
        .count() as u64;
    THREADS_PEAK.fetch_max(held, std::sync::atomic::Ordering::Relaxed);
    Some(i)
}

/// The most threads that held slots (used the DSM) at once, over the process's life.
#[cfg(not(dsm_loom))]
static THREADS_PEAK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The most application threads that used the DSM at once on this node (a thread holds its
/// slot from its first fault or call until it ends).
#[cfg(not(dsm_loom))]
pub(crate) fn threads_seen() -> u64 {
    THREADS_PEAK.load(std::sync::atomic::Ordering::Relaxed)
}

/// A free slot for one request of this thread's besides its own slot's (a fault taken by a
/// signal handler while the thread's call holds its slot); given back with `Slots::release`.
/// Async-signal-safe.
#[cfg(not(dsm_loom))]
pub(crate) fn spare_slot() -> Option<usize> {
    SLOTS.claim_free(crate::sys::gettid())
}
