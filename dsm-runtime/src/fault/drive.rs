//! Driving: a fault handler that finds the node's service state free runs the node itself, on a
//! stack of its own, until its page is in. Signal context: see the contract in [`crate::fault`].

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use super::slots::{self, SLOTS};
use crate::service::{
    DRIVEN, HANDED_BACK, HANDLERS_WAITING, HANDOFF_WAIT, NAPPING, POLLS_PER_CLOCK, POLLS_PER_PASS,
    SERVICE, SLEEPS_ON_TRANSPORT, Service,
};
use crate::sys::{self, stack};

/// Whether fault handlers may drive the node (the `drive` key).
pub(crate) static DRIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Each slot's drive stack (0: not mapped yet), mapped on its first drive and kept: slots outlive
/// threads.
static STACKS: [AtomicUsize; slots::MAX_THREADS] =
    [const { AtomicUsize::new(0) }; slots::MAX_THREADS];

/// In the fault handler of the thread in `slot`: resolves its fault (`op` on `page`) by driving
/// the node on this thread, if the service state is free. The thread hands its request to the
/// core, sends the GETP, polls the transport and handles whatever comes (other nodes' requests
/// too) until its page is in, then lets go. Against posting the fault to the service thread
/// this saves two thread hand-offs per fault (a wake-up each way, with their context switches).
///
/// `None`: not driven (turned off, no stack switch on this architecture, the service thread or
/// another handler holds the state, requests are queued, the node has exited): post the fault
/// instead. The drive runs on the slot's own stack ([`stack`]). The handler polls for
/// `drive_spin_us`, then sleeps on the transport and the request eventfd (never yields: see
/// `drive`); after `drive_limit_us`, or when a call is posted, it hands the wait back to the
/// service thread and sleeps on its slot.
///
/// Runs in a SIGSEGV handler and allocates: sound under the contract of [`crate::fault`].
pub(crate) fn drive_fault(slot: usize, op: u32, page: u64) -> Option<u64> {
    if !DRIVE.load(Ordering::Relaxed) || !stack::AVAILABLE {
        return None;
    }
    let guard = take_state()?;
    let free = guard.as_ref().is_some_and(|s| s.exit_done_at.is_none());
    // Requests waiting for the service thread: queue behind them.
    if !free || SLOTS.posted.load(Ordering::SeqCst) > 0 {
        return None;
    }
    // The handler's own stack is too small for this: run on the slot's.
    let top = stack::kept(&STACKS[slot], stack::SIZE)?;
    let mut guard = Some(guard);
    let mut result = None;
    stack::run_on(top, &mut || {
        if let Some(g) = guard.take() {
            result = Some(drive(g, slot, op, page));
        }
    });
    result
}

/// Per slot: drives in a row that slept for their reply and were woken on the CPU they slept on
/// (see [`note_wait_after_spin`]).
static WOKEN_IN_PLACE: [AtomicU8; slots::MAX_THREADS] =
    [const { AtomicU8::new(0) }; slots::MAX_THREADS];
/// After this many such drives in a row the handler moves to another CPU.
const IN_PLACE_BEFORE_MOVING: u8 = 2;

/// Moves a driving thread away from a peer's thread that waits for its CPU. Two processes of
/// one job can end up on one CPU: a node's service thread (the home's, spinning for requests)
/// and another node's faulting thread, which spins for the home's reply that the home cannot
/// send while the faulting thread holds the CPU. The reply comes only once the spin is over and
/// the faulting thread sleeps, and it wakes the thread on the CPU it slept on, the home's (the
/// waker's; traced with the other CPU idle); the scheduler leaves the two together while both
/// run often (they are cache-hot). faultlat ran up to 1,000 faults in a row at 60 us this way
/// instead of 10, in 2 runs of 10 (a sched_switch trace: the home's service thread preempted on
/// the faulting thread's CPU at every fault, the other CPU idle). The sign: drives that sleep and are woken where they slept, twice in a row;
/// then the thread moves itself to another CPU.
fn note_wait_after_spin(slot: usize, slept_on: Option<i32>) {
    let Some(count) = WOKEN_IN_PLACE.get(slot) else {
        return;
    };
    if slept_on.is_none() || slept_on != sys::current_cpu() {
        count.store(0, Ordering::Relaxed);
        return;
    }
    if count.fetch_add(1, Ordering::Relaxed) + 1 >= IN_PLACE_BEFORE_MOVING {
        count.store(0, Ordering::Relaxed);
        sys::move_off_this_cpu();
    }
}

/// The node's state for a fault handler to drive with, if it is free or soon free. Held, it is
/// most often the spinning service thread's for one of its polls (0.2 us): the handler asks it to
/// let go (the service thread takes the state again only once no handler waits) and waits up to
/// [`HANDOFF_WAIT`]. Without this the handler posted its fault whenever it met one of those polls
/// and slept on its slot; the service thread, having resumed it, kept spinning for its next
/// request, and so met the next fault too: faultlat ran 800 faults in a row at 60 us (posted,
/// both service threads sharing one CPU), 2 runs in 10, before a fault found the state free and
/// the faults went back to 9.5 us (driven). Async-signal-safe (atomics and the clock).
fn take_state() -> Option<MutexGuard<'static, Option<Service>>> {
    match SERVICE.try_lock() {
        Ok(g) => return Some(g),
        Err(TryLockError::Poisoned(_)) => return None,
        Err(TryLockError::WouldBlock) => {}
    }
    HANDLERS_WAITING.fetch_add(1, Ordering::SeqCst);
    let start = Instant::now();
    let got = loop {
        match SERVICE.try_lock() {
            Ok(g) => break Some(g),
            Err(TryLockError::Poisoned(_)) => break None,
            // Another handler drives, or the service thread is at long work: post instead.
            Err(TryLockError::WouldBlock) if start.elapsed() >= HANDOFF_WAIT => break None,
            // The holder may be the service thread, preempted on this CPU by this thread: let
            // it run to let go.
            Err(TryLockError::WouldBlock) => sys::sched_yield(),
        }
    };
    HANDLERS_WAITING.fetch_sub(1, Ordering::SeqCst);
    got
}

/// [`drive_fault`] once the state is ours, on the slot's stack.
fn drive(mut guard: MutexGuard<'static, Option<Service>>, slot: usize, op: u32, page: u64) -> u64 {
    let Some(s) = guard.as_mut() else {
        // (drive_fault saw the state there.) Let go of it before waiting on the service thread.
        drop(guard);
        return slots::post_and_wait(slot, op, page);
    };
    DRIVEN.fetch_add(1, Ordering::Relaxed);
    slots::take_own(slot, op);
    s.driver = Some(slot);
    s.handle_request(slot, op, page);
    // The GETP out first, then the polling.
    s.drain_core();
    // Replies are read here: out of the service thread's epoll while this drives (a service
    // thread asleep there need not wake for them, and no datagram pays for the registration).
    s.set_transport_watched(false);
    let start = Instant::now();
    let evfd = s.evfd.as_raw_fd();
    let drive_spin = Duration::from_micros(u64::from(s.tuning.drive_spin_us));
    let drive_limit = Duration::from_micros(u64::from(s.tuning.drive_limit_us));
    // Polls since the last full pass (0: a full pass is next).
    let mut polls = 0u32;
    // The CPU the handler was on when it first slept waiting.
    let mut slept_on = None;
    loop {
        if polls == 0 || polls >= POLLS_PER_PASS || s.ready() {
            s.pass(true);
            polls = 0;
            if slots::is_done(slot) {
                // Nothing left unread behind us: the service thread, napping without the
                // transport, would not see it for up to [`DRIVEN_NAP`] (another node's GETP
                // among it). The read that stopped at our grant is followed by one that finds
                // the socket empty, as a rule (a poll, which then clears `unread`); anything
                // else is handled first.
                while s.unread && s.ready() {
                    s.pass(true);
                }
                break;
            }
            // Calls were posted (handlers do not run them), or work was met that is not for
            // signal context: hand the wait back.
            if SLOTS.posted.load(Ordering::SeqCst) > 0 || !s.deferred.is_empty() {
                break;
            }
        }
        polls += 1;
        if polls % POLLS_PER_CLOCK != 0 {
            std::hint::spin_loop();
            continue;
        }
        // (Posted calls make `ready` say so: the pass above then hands the wait back.)
        let waited = start.elapsed();
        if waited >= drive_limit {
            break;
        }
        if waited < drive_spin {
            std::hint::spin_loop();
            continue;
        }
        // Then sleep until a message or a request comes (or a timer is due): the message wakes
        // this thread, and the wake-up preempts whatever runs on its CPU. A thread that yields
        // instead stays runnable: once another thread took its CPU it waited for that thread's
        // whole time slice (1-3 ms), deaf meanwhile (the service thread does not read the
        // transport while a handler drives): a sender resent its burst.
        let Some(fd) = s.transport.as_ref().map(|t| t.fd()) else {
            break;
        };
        let mut left = drive_limit - waited;
        if let Some(d) = s.next_deadline() {
            left = left.min(d.saturating_duration_since(Instant::now()));
        }
        if slept_on.is_none() {
            slept_on = sys::current_cpu();
        }
        sys::wait_readable_raw(&[fd, evfd], left);
        sys::eventfd_drain(evfd);
        polls = 0;
    }
    s.driver = None;
    // Back in the epoll if the service thread still sleeps there (it may be waking, then it
    // sleeps in `quiet` and sets it right when it next takes the state).
    if SLEEPS_ON_TRANSPORT.load(Ordering::SeqCst) {
        s.set_transport_watched(true);
    }
    let handed_back = !slots::is_done(slot);
    if !handed_back {
        note_wait_after_spin(slot, slept_on);
    }
    let work_left = handed_back
        || !s.deferred.is_empty()
        || SLOTS.posted.load(Ordering::SeqCst) > 0
        || (s.acks_owed && !NAPPING.load(Ordering::SeqCst));
    drop(guard);
    if work_left {
        // The service thread takes over what is left: a reply still to come, requests posted
        // while we drove, acknowledgements owed while it sleeps long.
        HANDED_BACK.fetch_add(u64::from(handed_back), Ordering::Relaxed);
        let fd = SLOTS.eventfd.load(Ordering::Relaxed);
        if fd >= 0 {
            sys::eventfd_signal(fd);
        }
    }
    slots::wait_done(slot)
}
