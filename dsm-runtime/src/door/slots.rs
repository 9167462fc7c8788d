//! The slots: one per application thread, through which it hands a request to the node and gets
//! the answer. Every function here is async-signal-safe (atomics, the futex, the eventfd, and the
//! call cells taken by `try_lock`, which the slot's state makes uncontended) and runs in any
//! context: the application thread's, its fault handler's, the service thread's.
//!
//! A slot's life:
//!
//! ```text
//!   FREE --claim--> IDLE --post--> POSTED --take--> TAKEN --complete--> DONE --wait--> IDLE
//!                     \                               ^
//!                      `------------take_own----------'   (the thread runs its own request
//!                                                          on the node's state: drive, inline)
//! ```
//!
//! The thread that holds the slot writes the request (a fault's word, or the call cell) before
//! its `POSTED` store and reads the answer (the outcome word, or the reply cell) after it loads
//! `DONE`; whoever took the request writes the answer before its `DONE` store. So each cell has
//! one side at a time, which the model check (`model.rs`, loom's cells and atomics) verifies
//! over every interleaving, with the service thread's sleep: a request is never left posted
//! while the service thread sleeps without a wake-up on its way, and a completed thread is
//! never left asleep.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::time::{Duration, Instant};

use super::request::{Call, CallResult, Fault, FaultOutcome, Request};
use super::sync::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Mutex, Wakeup, fence};
use super::sync::{futex_wait, futex_wake};

/// Threads of one process that may use the DSM at once.
pub const MAX_THREADS: usize = 1024;

const FREE: u32 = 0;
const IDLE: u32 = 1;
const POSTED: u32 = 2;
const TAKEN: u32 = 3;
const DONE: u32 = 4;

const KIND_FAULT: u32 = 0;
const KIND_CALL: u32 = 1;

/// What a thread is doing with its slot, for the launcher's deadlock report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    /// Nobody holds the slot.
    Free,
    /// Held by thread `tid` (a kernel thread id); `idle`: it has no request in the node's hands
    /// (it runs the program, not a fault or a call).
    Held { tid: i32, idle: bool },
}

pub(crate) struct Slot {
    state: AtomicU32,
    /// The kernel id of the thread that holds the slot (0: none yet): a slot whose thread has
    /// ended is taken over by the next thread that finds no free slot.
    tid: AtomicI32,
    /// A fault or a call (its cells).
    kind: AtomicU32,
    /// A posted fault ([`Fault::to_word`]).
    fault: AtomicU64,
    /// A completed fault's outcome ([`FaultOutcome::to_word`]).
    outcome: AtomicU32,
    /// A posted call.
    call: Mutex<Option<Call>>,
    /// A completed call's answer.
    reply: Mutex<Option<CallResult>>,
}

/// The body of `Slot::new`, for both builds: `const` with the standard primitives, not with
/// loom's (whose constructors are not).
macro_rules! new_slot {
    () => {
        Slot {
            state: AtomicU32::new(FREE),
            tid: AtomicI32::new(0),
            kind: AtomicU32::new(KIND_FAULT),
            fault: AtomicU64::new(0),
            outcome: AtomicU32::new(0),
            call: Mutex::new(None),
            reply: Mutex::new(None),
        }
    };
}

/// The body of `Slots::new`, for both builds (as [`new_slot`]), with the loom build's extra
/// fields.
macro_rules! new_slots {
    ($slots:expr $(, $extra:ident)*) => {
        Slots {
            slots: $slots,
            high: AtomicU32::new(0),
            posted: AtomicU32::new(0),
            service_sleeping: AtomicBool::new(false),
            wakeup: Wakeup::new(),
            blocked: AtomicU32::new(0),
            wait_spin_us: AtomicU32::new(0),
            $($extra,)*
        }
    };
}

impl Slot {
    #[cfg(not(dsm_loom))]
    const fn new() -> Slot {
        new_slot!()
    }

    #[cfg(dsm_loom)]
    fn new() -> Slot {
        new_slot!()
    }
}

/// A deliberate flaw, for the model check to find (it must be able to fail).
#[cfg(dsm_loom)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Flaw {
    #[default]
    None,
    /// `complete` wakes the waiter before it marks the slot done.
    WakeBeforeDone,
    /// `complete` marks the slot done before it writes the reply.
    DoneBeforeReply,
    /// The service thread sleeps without looking at the posted count first.
    SleepWithoutLooking,
    /// A thread that ran the node's state and left work wakes the service thread before it
    /// lets go of the state (`NodeState::let_go`).
    NudgeBeforeLettingGo,
    /// The service thread, waiting for the state held by a driving handler, signals the
    /// eventfd the handler sleeps on once, but posters do not signal it while it waits
    /// (`Slots::while_waiting_for_state`).
    SignalOnceWhileWaiting,
}

/// The slots of a process, and what the service thread's sleep and wake-up need.
pub(crate) struct Slots<const N: usize> {
    slots: [Slot; N],
    /// One past the highest slot ever claimed: the service thread's scan for posted requests
    /// stops there (a program of 16 threads scans 16 slots of 1,024).
    high: AtomicU32,
    /// Requests posted and not yet taken (a hint that spares the service thread a scan, and what
    /// it looks at before it sleeps).
    posted: AtomicU32,
    /// The service thread is, or is about to be, asleep in epoll, or waits for the state
    /// (`Slots::while_waiting_for_state`): a poster signals the eventfd.
    service_sleeping: AtomicBool,
    /// Its eventfd.
    wakeup: Wakeup,
    /// Application threads blocked in a request (the service thread spins only while some are:
    /// otherwise its spinning would take the CPU from the application's computation). Counted
    /// down when the request is completed, not when the thread wakes: the service thread went
    /// on spinning for the thread it had just woken, on the CPU that thread needed.
    blocked: AtomicU32,
    /// How long a waiting thread spins before it sleeps on its futex, in microseconds.
    wait_spin_us: AtomicU32,
    #[cfg(dsm_loom)]
    pub(crate) flaw: Flaw,
}

/// Ends the process on a broken hand-off (a runtime bug; the model check says it cannot happen).
#[cfg(not(dsm_loom))]
fn broken(what: &str) -> ! {
    super::end::die(what, 1)
}

#[cfg(dsm_loom)]
fn broken(what: &str) -> ! {
    panic!("{what}")
}

impl<const N: usize> Slots<N> {
    #[cfg(not(dsm_loom))]
    pub(crate) const fn new() -> Self {
        new_slots!([const { Slot::new() }; N])
    }

    #[cfg(dsm_loom)]
    pub(crate) fn new(flaw: Flaw) -> Self {
        new_slots!(std::array::from_fn(|_| Slot::new()), flaw)
    }

    // ---- Holding a slot ----

    /// Claims a free slot for thread `tid`.
    pub(crate) fn claim_free(&self, tid: i32) -> Option<usize> {
        let i = self.slots.iter().position(|s| {
            let won = s
                .state
                .compare_exchange(FREE, IDLE, AcqRel, Relaxed)
                .is_ok();
            if won {
                s.tid.store(tid, Release);
            }
            won
        })?;
        // Before any request of this thread's: a scan that finds its post finds it below.
        self.high.fetch_max(i as u32 + 1, AcqRel);
        Some(i)
    }

    /// Takes over, for thread `tid`, a slot whose thread has ended (`alive` says which threads
    /// live). Such a slot is idle (its thread ended outside any request); the compare-exchange on
    /// its owner makes one thread win it.
    pub(crate) fn take_over(&self, tid: i32, alive: impl Fn(i32) -> bool) -> Option<usize> {
        self.slots.iter().position(|s| {
            let owner = s.tid.load(Acquire);
            owner != 0
                && s.state.load(Acquire) == IDLE
                && !alive(owner)
                && s.tid.compare_exchange(owner, tid, AcqRel, Relaxed).is_ok()
        })
    }

    /// Gives back slot `i`, idle, to be claimed by any thread (a spare slot a thread held for
    /// one request).
    pub(crate) fn release(&self, i: usize) {
        let slot = &self.slots[i];
        slot.tid.store(0, Release);
        slot.state.store(FREE, Release);
    }

    /// Who holds each slot.
    pub(crate) fn uses(&self) -> impl Iterator<Item = (usize, Use)> + '_ {
        self.slots.iter().enumerate().map(|(i, s)| {
            let tid = s.tid.load(Acquire);
            let state = s.state.load(Acquire);
            let u = if state == FREE || tid == 0 {
                Use::Free
            } else {
                Use::Held {
                    tid,
                    idle: state == IDLE,
                }
            };
            (i, u)
        })
    }

    /// Whether slot `i`'s thread is in a fault the node has not completed (posted, or run by
    /// the thread itself), as the service thread sees it now.
    pub(crate) fn in_fault(&self, i: usize) -> bool {
        let slot = &self.slots[i];
        matches!(slot.state.load(Acquire), POSTED | TAKEN) && slot.kind.load(Relaxed) == KIND_FAULT
    }

    // ---- The application's side ----

    /// Posts fault `f` in slot `i` and waits for the node's answer.
    #[cfg(dsm_loom)]
    pub(crate) fn post_fault(&self, i: usize, f: Fault) -> FaultOutcome {
        self.post_fault_unless(i, f, || false)
    }

    /// Posts fault `f` in slot `i` and waits for the node's answer, unless `gone()`, asked once
    /// the fault is posted, says the service thread serves no more (the node left the job):
    /// then [`FaultOutcome::Left`] at once. The service thread answers the faults it finds
    /// posted as it leaves with the same, after setting what `gone` reads: each side stores,
    /// then looks at what the other stored, so a fault is either found or finds the node gone.
    pub(crate) fn post_fault_unless(
        &self,
        i: usize,
        f: Fault,
        gone: impl FnOnce() -> bool,
    ) -> FaultOutcome {
        let slot = &self.slots[i];
        slot.kind.store(KIND_FAULT, Relaxed);
        slot.fault.store(f.to_word(), Relaxed);
        self.post(i);
        if gone() {
            return FaultOutcome::Left;
        }
        self.wait(i);
        self.finish_fault(i)
    }

    /// Posts `call` in slot `i` and waits for the node's answer. Thread context (the cell's
    /// contents are dropped here).
    pub(crate) fn post_call(&self, i: usize, call: Call) -> CallResult {
        let slot = &self.slots[i];
        slot.kind.store(KIND_CALL, Relaxed);
        *slot
            .call
            .try_lock()
            .unwrap_or_else(|_| broken("a call cell is busy while its thread posts")) = Some(call);
        self.post(i);
        self.wait(i);
        self.finish_call(i)
    }

    fn post(&self, i: usize) {
        self.blocked.fetch_add(1, SeqCst);
        self.slots[i].state.store(POSTED, SeqCst);
        self.posted.fetch_add(1, SeqCst);
        // Against the service thread's sleep (`service_sleep`): each side stores, fences, then
        // loads what the other stored, so at least one sees the other (the posted request, or
        // the sleeping flag and then the eventfd).
        fence(SeqCst);
        self.wake_service();
    }

    /// A thread about to run its own request on the node's state (a fault handler driving the
    /// node, a call run inline): the slot counts as taken, and as blocked until completed.
    pub(crate) fn take_own(&self, i: usize, call: bool) {
        let slot = &self.slots[i];
        slot.kind
            .store(if call { KIND_CALL } else { KIND_FAULT }, Relaxed);
        self.blocked.fetch_add(1, SeqCst);
        slot.state.store(TAKEN, SeqCst);
    }

    /// Waits until slot `i`'s request (posted, or taken by its own thread) is completed: a spin
    /// of `wait_spin_us`, then the futex.
    pub(crate) fn wait(&self, i: usize) {
        let slot = &self.slots[i];
        let spin = Duration::from_micros(u64::from(self.wait_spin_us.load(Relaxed)));
        // Instant::now is clock_gettime through the vDSO: async-signal-safe.
        let start = (!spin.is_zero()).then(Instant::now);
        loop {
            let s = slot.state.load(Acquire);
            if s == DONE {
                return;
            }
            if start.is_some_and(|t| t.elapsed() < spin) {
                std::hint::spin_loop();
            } else {
                futex_wait(&slot.state, s);
            }
        }
    }

    /// After [`Slots::wait`]: the fault's outcome; the slot is the thread's again.
    pub(crate) fn finish_fault(&self, i: usize) -> FaultOutcome {
        let slot = &self.slots[i];
        let o = FaultOutcome::from_word(slot.outcome.load(Relaxed));
        slot.state.store(IDLE, Release);
        o
    }

    /// After [`Slots::wait`]: the call's answer; the slot is the thread's again.
    pub(crate) fn finish_call(&self, i: usize) -> CallResult {
        let slot = &self.slots[i];
        let r = slot
            .reply
            .try_lock()
            .unwrap_or_else(|_| broken("a reply cell is busy after its call completed"))
            .take();
        slot.state.store(IDLE, Release);
        r.unwrap_or_else(|| broken("a call completed without a reply"))
    }

    /// Whether slot `i`'s request is completed.
    pub(crate) fn is_done(&self, i: usize) -> bool {
        self.slots[i].state.load(Acquire) == DONE
    }

    // ---- The node's side ----

    /// Requests posted and not yet taken.
    pub(crate) fn posted(&self) -> u32 {
        self.posted.load(SeqCst)
    }

    /// Application threads blocked in a request.
    pub(crate) fn blocked(&self) -> u32 {
        self.blocked.load(Relaxed)
    }

    /// Takes every posted request (only the faults if `faults_only`), calling `f(slot, request)`
    /// for each; returns whether it took any.
    pub(crate) fn take_posted(&self, faults_only: bool, mut f: impl FnMut(usize, Request)) -> bool {
        if self.posted.load(SeqCst) == 0 {
            return false;
        }
        let mut any = false;
        let high = (self.high.load(Acquire) as usize).min(N);
        for (i, slot) in self.slots[..high].iter().enumerate() {
            if slot.state.load(Acquire) != POSTED {
                continue;
            }
            let call = slot.kind.load(Relaxed) == KIND_CALL;
            if (faults_only && call)
                || slot
                    .state
                    .compare_exchange(POSTED, TAKEN, AcqRel, Relaxed)
                    .is_err()
            {
                continue;
            }
            self.posted.fetch_sub(1, SeqCst);
            let request = if call {
                let c = slot
                    .call
                    .try_lock()
                    .unwrap_or_else(|_| broken("a call cell is busy while it is taken"))
                    .take();
                Request::Call(c.unwrap_or_else(|| broken("a call was posted without its cell")))
            } else {
                Request::Fault(Fault::from_word(slot.fault.load(Relaxed)))
            };
            f(i, request);
            any = true;
        }
        any
    }

    /// Whether slot `i`'s request (taken) is a call.
    pub(crate) fn is_call(&self, i: usize) -> bool {
        self.slots[i].kind.load(Relaxed) == KIND_CALL
    }

    /// Completes slot `i`'s fault; `wake`s its thread (not for the thread completing its own).
    pub(crate) fn complete_fault(&self, i: usize, outcome: FaultOutcome, wake: bool) {
        self.slots[i].outcome.store(outcome.to_word(), Relaxed);
        self.mark_done(i, wake);
    }

    /// Completes slot `i`'s call with `result`; `wake`s its thread (not for the thread
    /// completing its own).
    pub(crate) fn complete_call(&self, i: usize, result: CallResult, wake: bool) {
        let slot = &self.slots[i];
        #[cfg(dsm_loom)]
        if self.flaw == Flaw::DoneBeforeReply {
            self.mark_done(i, wake);
            *slot.reply.try_lock().unwrap() = Some(result);
            return;
        }
        *slot
            .reply
            .try_lock()
            .unwrap_or_else(|_| broken("a reply cell is busy while its call completes")) =
            Some(result);
        self.mark_done(i, wake);
    }

    fn mark_done(&self, i: usize, wake: bool) {
        let slot = &self.slots[i];
        self.blocked.fetch_sub(1, SeqCst);
        #[cfg(dsm_loom)]
        if self.flaw == Flaw::WakeBeforeDone {
            futex_wake(&slot.state);
            slot.state.store(DONE, Release);
            return;
        }
        slot.state.store(DONE, Release);
        if wake {
            futex_wake(&slot.state);
        }
    }

    // ---- The service thread's sleep ----

    /// The service thread's eventfd, signalled when a request is posted while it sleeps.
    #[cfg(not(dsm_loom))]
    pub(crate) fn set_eventfd(&self, fd: i32) {
        self.wakeup.set_fd(fd);
    }

    /// Wakes the service thread if it sleeps (there is work for it).
    pub(crate) fn wake_service(&self) {
        if self.service_sleeping.load(SeqCst) {
            self.wakeup.signal();
        }
    }

    /// Wakes the service thread whether or not it sleeps now (work is left for its next pass).
    pub(crate) fn nudge_service(&self) {
        self.wakeup.signal();
    }

    /// The service thread's wait for the node's state while requests are posted: `wait` (the
    /// lock) runs with the eventfd signalled once and signalled by every poster meanwhile, as
    /// during [`Slots::service_sleep`]. The holder may be a fault handler asleep on the eventfd
    /// (`Driving::poll_until_done`), which takes posted faults itself and lets go for a call: a
    /// call posted after it took a fault must wake it too, or it sleeps out `drive_limit_us`.
    pub(crate) fn while_waiting_for_state<R>(&self, wait: impl FnOnce() -> R) -> R {
        #[cfg(dsm_loom)]
        if self.flaw == Flaw::SignalOnceWhileWaiting {
            self.wakeup.signal();
            return wait();
        }
        self.service_sleeping.store(true, SeqCst);
        fence(SeqCst);
        self.wakeup.signal();
        let r = wait();
        self.service_sleeping.store(false, SeqCst);
        r
    }

    /// The service thread's sleep: `sleep` (its epoll wait, which the eventfd ends) runs unless
    /// a request is posted or `reported` (a fault handler's report waits: one queued before the
    /// flag was set saw it unset and did not signal); a thread that posts or reports meanwhile
    /// sees the flag and signals the eventfd.
    pub(crate) fn service_sleep<R>(
        &self,
        reported: impl FnOnce() -> bool,
        sleep: impl FnOnce() -> R,
    ) -> Option<R> {
        self.service_sleeping.store(true, SeqCst);
        fence(SeqCst);
        #[cfg(dsm_loom)]
        let look = self.flaw != Flaw::SleepWithoutLooking;
        #[cfg(not(dsm_loom))]
        let look = true;
        let r = (!look || (self.posted.load(SeqCst) == 0 && !reported())).then(sleep);
        self.service_sleeping.store(false, SeqCst);
        r
    }

    /// The model's epoll wait: until the eventfd is signalled.
    #[cfg(dsm_loom)]
    pub(crate) fn wait_for_wakeup(&self) {
        self.wakeup.wait();
    }

    /// How long waiting threads spin before they sleep (`DSM_WAIT_SPIN_US`).
    pub(crate) fn set_wait_spin_us(&self, us: u32) {
        self.wait_spin_us.store(us, Relaxed);
    }
}
