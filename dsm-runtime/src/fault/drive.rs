//! Driving: a fault handler that finds the node's service state free runs the node itself, on a
//! stack of its own, until its page is in. Signal context: see the contract in [`crate::fault`].

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::door::flags::{DRIVEN, HANDED_BACK};
use crate::door::request::{Fault, FaultOutcome, Request};
use crate::door::{MAX_THREADS, SLOTS};
use crate::service::Driving;
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
/// `Driving::poll_until_done`); after `drive_limit_us`, or when a call is posted, it hands the wait back to the
/// service thread and sleeps on its slot.
///
/// Runs in a SIGSEGV handler and allocates: sound under the contract of [`crate::fault`].
pub(crate) fn drive_fault(slot: usize, fault: Fault) -> Option<FaultOutcome> {
    if !stack::AVAILABLE {
        return None;
    }
    let driving = Driving::own(false)?;
    // The handler's own stack is too small for this: run on the slot's.
    let top = stack::kept(&STACKS[slot], stack::SIZE)?;
    let mut driving = Some(driving);
    let mut result = None;
    stack::run_on(top, &mut || {
        if let Some(d) = driving.take() {
            result = Some(drive(d, slot, fault));
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
fn drive(mut driving: Driving<'static>, slot: usize, fault: Fault) -> FaultOutcome {
    DRIVEN.fetch_add(1, Ordering::Relaxed);
    driving.run(slot, Request::Fault(fault));
    let polled = driving.poll_until_done();
    let left = driving.let_go();
    if !left.handed_back {
        note_wait_after_spin(slot, polled.slept_on);
    }
    HANDED_BACK.fetch_add(u64::from(left.handed_back), Ordering::Relaxed);
    SLOTS.wait(slot);
    SLOTS.finish_fault(slot)
}
