//! Driving: a fault handler that finds the node's service state free runs the node itself, on a
//! stack of its own, until its page is in. Signal context: see the contract in [`crate::fault`].

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::door::flags::{DRIVE, DRIVEN, HANDED_BACK, NAPPING, SLEEPS_ON_TRANSPORT};
use crate::door::request::{Fault, FaultOutcome};
use crate::door::state::Held;
use crate::door::{MAX_THREADS, SLOTS};
use crate::service::{POLLS_PER_CLOCK, POLLS_PER_PASS, STATE, Service};
use crate::sys::{self, stack};

/// Each slot's drive stack (0: not mapped yet), mapped on its first drive and kept: slots outlive
/// threads.
static STACKS: [AtomicUsize; MAX_THREADS] = [const { AtomicUsize::new(0) }; MAX_THREADS];

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
pub(crate) fn drive_fault(slot: usize, fault: Fault) -> Option<FaultOutcome> {
    if !DRIVE.load(Ordering::Relaxed) || !stack::AVAILABLE {
        return None;
    }
    let guard = STATE.take_for_own()?;
    let free = guard.as_ref().is_some_and(Service::takes_own_requests);
    // Requests waiting for the service thread: queue behind them.
    if !free || SLOTS.posted() > 0 {
        return None;
    }
    // The handler's own stack is too small for this: run on the slot's.
    let top = stack::kept(&STACKS[slot], stack::SIZE)?;
    let mut guard = Some(guard);
    let mut result = None;
    stack::run_on(top, &mut || {
        if let Some(g) = guard.take() {
            result = Some(drive(g, slot, fault));
        }
    });
    result
}

/// Per slot: drives in a row that slept for their reply and were woken on the CPU they slept on
/// (see [`note_wait_after_spin`]).
static WOKEN_IN_PLACE: [AtomicU8; MAX_THREADS] = [const { AtomicU8::new(0) }; MAX_THREADS];
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

/// [`drive_fault`] once the state is ours, on the slot's stack.
fn drive(mut guard: Held<'static, Service>, slot: usize, fault: Fault) -> FaultOutcome {
    let Some(s) = guard.as_mut() else {
        // (drive_fault saw the state there.) Let go of it before waiting on the service thread.
        drop(guard);
        return SLOTS.post_fault(slot, fault);
    };
    DRIVEN.fetch_add(1, Ordering::Relaxed);
    SLOTS.take_own(slot, false);
    s.driver = Some(slot);
    s.handle_fault(slot, fault);
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
            if SLOTS.is_done(slot) {
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
            if SLOTS.posted() > 0 || !s.deferred.is_empty() {
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
    let handed_back = !SLOTS.is_done(slot);
    if !handed_back {
        note_wait_after_spin(slot, slept_on);
    }
    let work_left = handed_back
        || !s.deferred.is_empty()
        || SLOTS.posted() > 0
        || (s.acks_owed && !NAPPING.load(Ordering::SeqCst));
    drop(guard);
    if work_left {
        // The service thread takes over what is left: a reply still to come, requests posted
        // while we drove, acknowledgements owed while it sleeps long.
        HANDED_BACK.fetch_add(u64::from(handed_back), Ordering::Relaxed);
        SLOTS.nudge_service();
    }
    SLOTS.wait(slot);
    SLOTS.finish_fault(slot)
}
