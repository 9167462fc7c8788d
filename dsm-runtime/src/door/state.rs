//! The lock on the node's state (the protocol core and the transport: `service::Service`). The
//! service thread holds it while it works and lets go of it while it spins or sleeps; a fault
//! handler (to drive its fault) or an application thread (to run its call) may take it then and
//! run the node itself.
//!
//! Held, the state is most often the spinning service thread's for one of its polls (0.2 us): a
//! thread that wants it asks the holder to let go (the service thread takes the state again only
//! once nobody waits) and waits up to [`HANDOFF_WAIT`]. Without this a fault handler posted its
//! fault whenever it met one of those polls and slept on its slot; the service thread, having
//! resumed it, kept spinning for its next request, and so met the next fault too: faultlat ran
//! 800 faults in a row at 60 us (posted, both service threads sharing one CPU), 2 runs in 10,
//! before a fault found the state free and the faults went back to 9.5 us (driven).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use super::context;
use crate::sys;

/// How long a thread waits for the state before it posts its request instead: many of the
/// spinning service thread's polls, a few of its passes.
pub(crate) const HANDOFF_WAIT: Duration = Duration::from_micros(20);

/// The node's state `T` behind its lock.
pub(crate) struct NodeState<T> {
    state: Mutex<Option<T>>,
    /// Threads waiting for the state to run their own request: the service thread does not take
    /// it meanwhile.
    waiting: AtomicU32,
}

/// The state, held.
pub(crate) type Held<'a, T> = MutexGuard<'a, Option<T>>;

impl<T> NodeState<T> {
    pub(crate) const fn new() -> NodeState<T> {
        NodeState {
            state: Mutex::new(None),
            waiting: AtomicU32::new(0),
        }
    }

    /// Takes the state, waiting for it. Never from signal context.
    pub(crate) fn lock(&self) -> Held<'_, T> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the state if it is free.
    pub(crate) fn try_lock(&self) -> Option<Held<'_, T>> {
        match self.state.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Whether a thread waits for the state to run its own request (the service thread leaves
    /// it to that thread, and its CPU too if they share one).
    pub(crate) fn wanted(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// Whether nobody holds the state at this instant (taken and let go at once).
    /// Async-signal-safe (the lock is a compare-and-swap, its release a futex wake).
    pub(crate) fn is_free(&self) -> bool {
        !matches!(self.state.try_lock(), Err(TryLockError::WouldBlock))
    }

    /// The state for a thread to run its own request with, if it is free or soon free (see the
    /// module doc); `None` after [`HANDOFF_WAIT`] (another thread runs the node, or the service
    /// thread is at long work: post instead). Async-signal-safe (atomics, the clock, yields).
    pub(crate) fn take_for_own(&self) -> Option<Held<'_, T>> {
        self.take(false)
    }

    /// [`NodeState::take_for_own`] for an application thread's call: the thread is marked as
    /// perhaps holding the state (`context::set_may_hold_state`) from before each attempt until
    /// a failed one, or, once it holds it, until the caller clears the mark after letting go.
    /// A fault of one of its asynchronous signal handlers then knows that it may not wait for
    /// the state.
    pub(crate) fn take_for_call(&self) -> Option<Held<'_, T>> {
        self.take(true)
    }

    fn try_take(&self, mark: bool) -> std::sync::TryLockResult<Held<'_, T>> {
        if mark {
            context::set_may_hold_state(true);
        }
        let r = self.state.try_lock();
        if mark && r.is_err() {
            context::set_may_hold_state(false);
        }
        r
    }

    fn take(&self, mark: bool) -> Option<Held<'_, T>> {
        match self.try_take(mark) {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(_)) => return None,
            Err(TryLockError::WouldBlock) => {}
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let start = Instant::now();
        let got = loop {
            match self.try_take(mark) {
                Ok(g) => break Some(g),
                Err(TryLockError::Poisoned(_)) => break None,
                Err(TryLockError::WouldBlock) if start.elapsed() >= HANDOFF_WAIT => break None,
                // The holder may be the service thread, preempted on this CPU by this thread:
                // let it run to let go.
                Err(TryLockError::WouldBlock) => sys::sched_yield(),
            }
        };
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        got
    }
}
