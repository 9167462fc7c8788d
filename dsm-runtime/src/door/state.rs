//! The lock on the node's state (the protocol core and the transport: `service::Service`), and
//! the two flags that say how its service thread sleeps. The service thread holds the state
//! while it works and lets go of it while it spins or sleeps; a fault handler (to drive its
//! fault) or an application thread (to run its call) may take it then and run the node itself.
//! Whoever lets go of it says whether work is left for the service thread
//! ([`NodeState::let_go`]).
//!
//! Held, the state is most often the spinning service thread's for one of its polls (0.2 us): a
//! thread that wants it asks the holder to let go (the service thread takes the state again only
//! once nobody waits) and waits up to [`HANDOFF_WAIT`]. Without this a fault handler posted its
//! fault whenever it met one of those polls and slept on its slot; the service thread, having
//! resumed it, kept spinning for its next request, and so met the next fault too: faultlat ran
//! 800 faults in a row at 60 us (posted, both service threads sharing one CPU), 2 runs in 10,
//! before a fault found the state free and the faults went back to 9.5 us (driven).
//!
//! Built on the door's primitives (`sync.rs`): under `--cfg dsm_loom` the model checks it with
//! the slots (`model.rs`), [`HANDOFF_WAIT`] standing as a few attempts.

use std::sync::TryLockError;
use std::sync::atomic::Ordering;

use super::context;
use super::slots::Slots;
use super::sync::{self, AtomicBool, AtomicU32, Mutex, MutexGuard};

/// How long a thread waits for the state before it posts its request instead: many of the
/// spinning service thread's polls, a few of its passes.
pub(crate) const HANDOFF_WAIT: std::time::Duration = std::time::Duration::from_micros(20);

/// The node's state `T` behind its lock.
pub(crate) struct NodeState<T> {
    state: Mutex<Option<T>>,
    /// Threads waiting for the state to run their own request: the service thread does not take
    /// it meanwhile.
    waiting: AtomicU32,
    /// The service thread sleeps [`super::flags::DRIVEN_NAP`] at most: a thread that leaves
    /// acknowledgements owed need not wake it.
    napping: AtomicBool,
    /// The service thread sleeps (or is about to) in the epoll that reports the transport. A
    /// fault handler that drives the node takes the transport out of that epoll and, if this is
    /// still set when it is done, puts it back. Otherwise the transport stays out (no
    /// `epoll_ctl` on the fault's wait): an awake service thread finds the state taken and
    /// sleeps without the transport.
    sleeps_on_transport: AtomicBool,
}

/// The state, held.
pub(crate) type Held<'a, T> = MutexGuard<'a, Option<T>>;

impl<T> NodeState<T> {
    #[cfg(not(dsm_loom))]
    pub(crate) const fn new() -> NodeState<T> {
        NodeState {
            state: Mutex::new(None),
            waiting: AtomicU32::new(0),
            napping: AtomicBool::new(false),
            sleeps_on_transport: AtomicBool::new(false),
        }
    }

    #[cfg(dsm_loom)]
    pub(crate) fn new() -> NodeState<T> {
        NodeState {
            state: Mutex::new(None),
            waiting: AtomicU32::new(0),
            napping: AtomicBool::new(false),
            sleeps_on_transport: AtomicBool::new(false),
        }
    }

    /// Takes the state, waiting for it. Never from signal context.
    pub(crate) fn lock(&self) -> Held<'_, T> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the state for the service thread, waiting for it, when requests are posted and
    /// another thread holds it. The holder may be a fault handler asleep on the eventfd
    /// (`Driving::poll_until_done`): the eventfd is signalled now and by every request posted
    /// while the service thread waits ([`Slots::while_waiting_for_state`]), so the handler sees
    /// them and lets go. A poster otherwise signals it only while the service thread sleeps,
    /// and a napping service thread drains it: the handler slept out its `drive_limit_us` while
    /// a call waited. Never from signal context.
    pub(crate) fn lock_for_posted<const N: usize>(&self, slots: &Slots<N>) -> Held<'_, T> {
        slots.while_waiting_for_state(|| self.lock())
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

    /// Lets go of the state, runs `then` (what the thread must undo before the service thread
    /// can run: a call's mark and its held-off signals), and then, if `work_left`, wakes the
    /// service thread for what is left: after, since woken before it would find the state
    /// taken and nap. Async-signal-safe if `then` is.
    pub(crate) fn let_go<const N: usize>(
        &self,
        held: Held<'_, T>,
        then: impl FnOnce(),
        work_left: bool,
        slots: &Slots<N>,
    ) {
        #[cfg(dsm_loom)]
        if slots.flaw == super::slots::Flaw::NudgeBeforeLettingGo {
            if work_left {
                slots.nudge_service();
            }
            self.before_unlock();
            drop(held);
            then();
            return;
        }
        self.before_unlock();
        drop(held);
        then();
        if work_left {
            slots.nudge_service();
        }
    }

    /// The model's point just before the state is let go of. Loom switches threads only at its
    /// operations, and reorders only those that conflict; an unlock is none of them (it folds
    /// into the operation before it). A write of `waiting`, which the service thread reads
    /// before it tries the lock, lets the model run that thread between a driver's last step
    /// with the state and its letting go, as the scheduler can. Nothing in a build.
    #[inline]
    fn before_unlock(&self) {
        #[cfg(dsm_loom)]
        self.waiting.fetch_add(0, Ordering::SeqCst);
    }

    /// The service thread is about to sleep [`super::flags::DRIVEN_NAP`] at most (or longer).
    pub(crate) fn set_napping(&self, napping: bool) {
        self.napping.store(napping, Ordering::SeqCst);
    }

    /// Whether the service thread sleeps [`super::flags::DRIVEN_NAP`] at most: what it owes
    /// (acknowledgements) goes out within that without a wake-up.
    pub(crate) fn napping(&self) -> bool {
        self.napping.load(Ordering::SeqCst)
    }

    /// The service thread sleeps on the transport from now on (set while it holds the state),
    /// or no longer.
    pub(crate) fn set_sleeps_on_transport(&self, sleeps: bool) {
        self.sleeps_on_transport.store(sleeps, Ordering::SeqCst);
    }

    /// Whether the service thread sleeps on the transport (a driver puts the transport back
    /// in its epoll when it lets go).
    pub(crate) fn sleeps_on_transport(&self) -> bool {
        self.sleeps_on_transport.load(Ordering::SeqCst)
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
        let deadline = sync::Deadline::after(HANDOFF_WAIT);
        let got = loop {
            match self.try_take(mark) {
                Ok(g) => break Some(g),
                Err(TryLockError::Poisoned(_)) => break None,
                Err(TryLockError::WouldBlock) if deadline.passed() => break None,
                // The holder may be the service thread, preempted on this CPU by this thread:
                // let it run to let go.
                Err(TryLockError::WouldBlock) => sync::yield_now(),
            }
        };
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        got
    }
}
