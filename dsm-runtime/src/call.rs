//! The API's calls, from the calling thread's side of the door. Application threads only: never
//! in signal context, never on the service thread.
//!
//! A call runs on the node's state by the calling thread itself when the state is free (or soon
//! free: `door::state`) and nothing is queued before it: if the core answers at once (a lock
//! this node manages and nobody holds, a `setcv` nobody waits for, a statistics snapshot), the
//! call returns with no other thread involved and no system call. Otherwise the thread hands
//! its wait to the service thread (waking it when it sent a message, left work, or is still
//! waiting) and sleeps on its slot. When the state is busy the call is posted in the slot, as
//! faults are.
//!
//! A handler of an asynchronous signal may interrupt a call and fault on shared memory: the
//! fault handler sees the thread is in a call ([`context::in_call`]) and posts that fault on a
//! spare slot. While the call holds the node's state such a fault could never be served, so
//! calls hold asynchronous signals off then, once the program is known to have handlers for them
//! (`flags::ASYNC_HANDLERS`), and the fault handler ends the node with a message if one gets
//! through anyway.

use std::sync::atomic::Ordering;

use crate::door::context;
use crate::door::end::fatal;
use crate::door::flags::{ASYNC_HANDLERS, DRIVE};
use crate::door::request::{Call, CallResult, Request};
use crate::door::{self, MAX_THREADS, SLOTS};
use crate::service::Driving;
use crate::sys::signals::BlockedSignals;

/// Runs `call` for the calling thread and returns the node's answer.
pub(crate) fn call(call: Call) -> CallResult {
    if context::in_call() {
        // A handler of the program's that interrupted a call of this thread: the inner call
        // would take the outer one's slot, and the outer cannot end until the handler returns.
        fatal(&format!(
            "{}: called in a signal handler that interrupted another DSM call of the same \
             thread; a DSM call cannot run inside another (make it after the handler returns, \
             or block the signal around the thread's DSM calls)",
            call.name()
        ));
    }
    // A fault taken from here on comes from a signal handler that interrupted the call (the
    // call's own code never touches shared memory): the fault handler then leaves the call's
    // slot and state alone.
    let _in_call = context::CallScope::enter();
    let Some(slot) = door::my_slot() else {
        fatal(&format!(
            "{}: more than {MAX_THREADS} threads use the DSM at once",
            call.name()
        ));
    };
    if DRIVE.load(Ordering::Relaxed) && SLOTS.posted() == 0 {
        // With handlers of asynchronous signals about, hold those signals off while the state
        // is ours: a handler that faults on shared memory meanwhile could not be served.
        let held_off = ASYNC_HANDLERS
            .load(Ordering::Relaxed)
            .then(BlockedSignals::asynchronous);
        if let Some(mut driving) = Driving::own(true) {
            driving.run(slot, Request::Call(call));
            // The state goes back, the mark and the held-off signals go, and then the service
            // thread is woken for what is left: all before the wait.
            driving.let_go_then(|| {
                context::set_may_hold_state(false);
                drop(held_off);
            });
            SLOTS.wait(slot);
            return SLOTS.finish_call(slot);
        }
        context::set_may_hold_state(false);
        drop(held_off);
    }
    SLOTS.post_call(slot, call)
}
