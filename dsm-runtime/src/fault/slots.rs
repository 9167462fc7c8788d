//! The hand-off between application threads (including their fault handlers) and the service
//! thread: one slot per thread, made of atomics only, so the signal handler can use it.
//!
//! A thread posts a request in its slot (`POSTED`), signals the service thread's eventfd if that
//! thread may be asleep, then waits: a short spin, then a futex sleep on the slot's state. The
//! service thread takes the request (`TAKEN`), hands it to the core, and when the core says the
//! waiter may continue it marks the slot `DONE` and wakes the futex. Nothing here allocates, locks
//! or logs.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sys;

/// Threads of one process that may use the DSM at once.
pub const MAX_THREADS: usize = 256;

pub(crate) const FREE: u32 = 0;
pub(crate) const IDLE: u32 = 1;
pub(crate) const POSTED: u32 = 2;
pub(crate) const TAKEN: u32 = 3;
pub(crate) const DONE: u32 = 4;

/// What a slot asks for.
pub(crate) const OP_FAULT_READ: u32 = 1;
pub(crate) const OP_FAULT_WRITE: u32 = 2;
pub(crate) const OP_CALL: u32 = 3;

pub(crate) struct Slot {
    pub state: AtomicU32,
    /// The kernel id of the thread that holds the slot (0: none yet): a slot whose thread has
    /// ended is taken over by the next thread that finds no free slot.
    pub tid: AtomicI32,
    pub op: AtomicU32,
    pub arg: AtomicU64,
    pub result: AtomicU64,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU32::new(FREE),
            tid: AtomicI32::new(0),
            op: AtomicU32::new(0),
            arg: AtomicU64::new(0),
            result: AtomicU64::new(0),
        }
    }
}

pub(crate) struct Slots {
    pub slots: [Slot; MAX_THREADS],
    /// Requests posted and not yet taken (a hint that spares the service thread a scan).
    pub posted: AtomicU32,
    /// The service thread's eventfd (-1 before it starts).
    pub eventfd: AtomicI32,
    /// The service thread is, or is about to be, asleep in epoll.
    pub service_sleeping: AtomicBool,
    /// Application threads blocked in a request (the service thread spins only while some are:
    /// otherwise its spinning would take the CPU from the application's computation). Counted
    /// down when the service completes the request, not when the thread wakes: the service
    /// thread went on spinning for the thread it had just woken, on the CPU that thread needed.
    pub blocked: AtomicU32,
}

pub(crate) static SLOTS: Slots = Slots {
    slots: [const { Slot::new() }; MAX_THREADS],
    posted: AtomicU32::new(0),
    eventfd: AtomicI32::new(-1),
    service_sleeping: AtomicBool::new(false),
    blocked: AtomicU32::new(0),
};

thread_local! {
    static MY_SLOT: Cell<u32> = const { Cell::new(u32::MAX) };
    pub(crate) static IS_SERVICE: Cell<bool> = const { Cell::new(false) };
}

/// This thread's slot index, claiming a slot on first use: a free one, else one whose thread has
/// ended (so a program may start any number of threads over its life, [`MAX_THREADS`] at a
/// time). Async-signal-safe: atomics and two system calls that keep errno.
pub(crate) fn my_slot() -> Option<usize> {
    let cur = MY_SLOT.with(|s| s.get());
    if cur != u32::MAX {
        return Some(cur as usize);
    }
    let me = sys::gettid();
    let claim = |i: usize| {
        MY_SLOT.with(|c| c.set(i as u32));
        Some(i)
    };
    for (i, s) in SLOTS.slots.iter().enumerate() {
        if s.state
            .compare_exchange(FREE, IDLE, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            s.tid.store(me, Ordering::Release);
            return claim(i);
        }
    }
    // Every slot was claimed: take over one whose thread is gone. Such a slot is idle (its thread
    // ended outside any request); the compare-exchange on its owner makes one thread win it.
    for (i, s) in SLOTS.slots.iter().enumerate() {
        let owner = s.tid.load(Ordering::Acquire);
        if owner != 0
            && s.state.load(Ordering::Acquire) == IDLE
            && !sys::thread_exists(owner)
            && s.tid
                .compare_exchange(owner, me, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return claim(i);
        }
    }
    None
}

/// Wakes the service thread if it sleeps (it has queued work). Async-signal-safe.
pub(crate) fn wake_service() {
    if SLOTS.service_sleeping.load(Ordering::SeqCst) {
        let fd = SLOTS.eventfd.load(Ordering::Relaxed);
        if fd >= 0 {
            sys::eventfd_signal(fd);
        }
    }
}

/// How long a waiting application thread spins before it sleeps, in microseconds (set once at
/// start from `DSM_WAIT_SPIN_US`). Zero by default: measured on 2 CPUs, a spinning application
/// thread next to the spinning service threads of two nodes doubles the remote fault latency.
pub(crate) static WAIT_SPIN_US: AtomicU32 = AtomicU32::new(0);

/// Posts a request in slot `i` and waits until the service thread completes it; returns the
/// result word. Async-signal-safe.
pub(crate) fn post_and_wait(i: usize, op: u32, arg: u64) -> u64 {
    let slot = &SLOTS.slots[i];
    SLOTS.blocked.fetch_add(1, Ordering::SeqCst);
    slot.op.store(op, Ordering::Relaxed);
    slot.arg.store(arg, Ordering::Relaxed);
    slot.state.store(POSTED, Ordering::SeqCst);
    SLOTS.posted.fetch_add(1, Ordering::SeqCst);
    if SLOTS.service_sleeping.load(Ordering::SeqCst) {
        let fd = SLOTS.eventfd.load(Ordering::Relaxed);
        if fd >= 0 {
            sys::eventfd_signal(fd);
        }
    }
    wait_done(i)
}

/// Waits until slot `i` (posted, or taken by its own thread as the driver) is completed, then
/// frees it for the next request; returns the result word. Async-signal-safe.
pub(crate) fn wait_done(i: usize) -> u64 {
    let slot = &SLOTS.slots[i];
    // Instant::now is clock_gettime through the vDSO: async-signal-safe.
    let start = Instant::now();
    let spin = Duration::from_micros(u64::from(WAIT_SPIN_US.load(Ordering::Relaxed)));
    loop {
        let s = slot.state.load(Ordering::Acquire);
        if s == DONE {
            break;
        }
        if start.elapsed() < spin {
            std::hint::spin_loop();
        } else {
            sys::futex_wait(&slot.state, s);
        }
    }
    let r = slot.result.load(Ordering::Relaxed);
    slot.state.store(IDLE, Ordering::Release);
    r
}

/// A thread about to drive its own request (`op`, in slot `i`) on the node's service state: the slot
/// counts as taken, and as blocked until completed. Async-signal-safe.
pub(crate) fn take_own(i: usize, op: u32) {
    SLOTS.slots[i].op.store(op, Ordering::Relaxed);
    SLOTS.blocked.fetch_add(1, Ordering::SeqCst);
    SLOTS.slots[i].state.store(TAKEN, Ordering::SeqCst);
}

/// Whether slot `i`'s request (posted or driven) is a call, not a fault.
pub(crate) fn posted_call(i: usize) -> bool {
    SLOTS.slots[i].op.load(Ordering::Relaxed) == OP_CALL
}

/// Whether slot `i`'s request is completed.
pub(crate) fn is_done(i: usize) -> bool {
    SLOTS.slots[i].state.load(Ordering::Acquire) == DONE
}

/// Service side: completes slot `i` with `result` and wakes its thread.
pub(crate) fn complete(i: usize, result: u64) {
    complete_quietly(i, result);
    sys::futex_wake(&SLOTS.slots[i].state);
}

/// Completes slot `i` without waking anyone: for the request of the thread that completes it
/// (a fault handler driving the node), which is not asleep.
pub(crate) fn complete_quietly(i: usize, result: u64) {
    let slot = &SLOTS.slots[i];
    SLOTS.blocked.fetch_sub(1, Ordering::SeqCst);
    slot.result.store(result, Ordering::Relaxed);
    slot.state.store(DONE, Ordering::Release);
}

/// Service side: takes every posted request (only faults if `faults_only`), calling
/// `f(slot, op, arg)` for each.
pub(crate) fn take_posted(faults_only: bool, mut f: impl FnMut(usize, u32, u64)) -> bool {
    if SLOTS.posted.load(Ordering::SeqCst) == 0 {
        return false;
    }
    let mut any = false;
    for (i, slot) in SLOTS.slots.iter().enumerate() {
        if slot.state.load(Ordering::Acquire) == POSTED
            && !(faults_only && slot.op.load(Ordering::Relaxed) == OP_CALL)
            && slot
                .state
                .compare_exchange(POSTED, TAKEN, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            SLOTS.posted.fetch_sub(1, Ordering::SeqCst);
            f(
                i,
                slot.op.load(Ordering::Relaxed),
                slot.arg.load(Ordering::Relaxed),
            );
            any = true;
        }
    }
    any
}
