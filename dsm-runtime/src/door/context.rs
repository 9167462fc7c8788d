//! Where code runs. Each module of the runtime runs in one context, and its doc says which:
//!
//! | context | modules |
//! |---|---|
//! | signal context (a SIGSEGV/SIGBUS handler) | `fault` |
//! | the service thread | `service::run`, `service::control` |
//! | the thread that holds the node's state (the service thread, a driving fault handler, an application thread running its own call) | `service` (its core work: `mod.rs`, `effects.rs`, `calls.rs`) |
//! | application threads, outside any handler | the API (`lib.rs`, `array`, `message`, `call`), `progress` |
//! | any (async-signal-safe) | `door` |
//!
//! Two things may be reached from every context and ask at run time where they are: the end of
//! a node ([`super::end`]: `exit` or `_exit`) and the logger (a record made in signal context is
//! queued for the service thread). Nothing else does: the core work defers what signal context
//! must not do (files, printing, the launcher exchange after a lost peer) to the service thread
//! always, wherever it runs.

use std::cell::Cell;

use crate::sys::signals;

thread_local! {
    /// This thread runs the fault handler now (const-initialised: reading it is
    /// async-signal-safe).
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
    /// This thread is the node's service thread.
    static IS_SERVICE: Cell<bool> = const { Cell::new(false) };
    /// This thread is in a DSM call (`crate::call`): its slot is the call's.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
    /// This thread holds the node's state for its call, or is about to take it (set before each
    /// attempt, cleared after a failed one and after letting go).
    static MAY_HOLD_STATE: Cell<bool> = const { Cell::new(false) };
}

/// A DSM call's stay on its thread ([`in_call`] while it lives). A fault taken meanwhile comes
/// from a handler of an asynchronous signal that interrupted the call. The thread's cancellation
/// is held off meanwhile ([`signals::CancellationHeld`]: a DSM call is no cancellation point).
pub(crate) struct CallScope {
    // Dropped after `drop` below: put back last.
    _cancellation: signals::CancellationHeld,
}

impl CallScope {
    pub(crate) fn enter() -> CallScope {
        let cancellation = signals::CancellationHeld::hold();
        IN_CALL.with(|c| c.set(true));
        CallScope {
            _cancellation: cancellation,
        }
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        IN_CALL.with(|c| c.set(false));
    }
}

/// Whether the calling thread is in a DSM call. Async-signal-safe.
pub(crate) fn in_call() -> bool {
    IN_CALL.with(Cell::get)
}

/// Marks the calling thread as holding (or about to take) the node's state, or not.
pub(crate) fn set_may_hold_state(on: bool) {
    MAY_HOLD_STATE.with(|c| c.set(on));
}

/// Whether the calling thread may hold the node's state (see [`set_may_hold_state`]).
/// Async-signal-safe.
pub(crate) fn may_hold_state() -> bool {
    MAY_HOLD_STATE.with(Cell::get)
}

/// Whether the calling thread is in the fault handler.
pub(crate) fn in_signal_context() -> bool {
    IN_HANDLER.with(Cell::get)
}

/// Marks the calling thread as the service thread (it must never fault on shared memory).
pub(crate) fn mark_service_thread() {
    IS_SERVICE.with(|s| s.set(true));
}

/// Whether the calling thread is the service thread.
pub(crate) fn is_service_thread() -> bool {
    IS_SERVICE.with(Cell::get)
}

/// The fault handler's stay on a thread: marks the thread as in signal context, holds its
/// cancellation off ([`signals::CancellationHeld`]: a fault is no cancellation point) and keeps
/// its errno (the handler's own system calls, a `recvfrom` that leaves `EAGAIN`, must not show
/// through in the code it interrupted, which may be between a failing call and its read of
/// errno).
pub(crate) struct SignalContext {
    errno: i32,
    // Dropped after `drop` below: put back last, errno already restored.
    _cancellation: signals::CancellationHeld,
}

impl SignalContext {
    /// Enters in the handler whose context (`ucontext_t`) is `ctx`.
    pub(crate) fn enter(ctx: *mut libc::c_void) -> SignalContext {
        let cancellation =
            signals::CancellationHeld::hold_in_handler(signals::interrupted_mask_at(ctx));
        IN_HANDLER.with(|h| h.set(true));
        SignalContext {
            errno: signals::errno(),
            _cancellation: cancellation,
        }
    }
}

impl Drop for SignalContext {
    fn drop(&mut self) {
        IN_HANDLER.with(|h| h.set(false));
        signals::set_errno(self.errno);
    }
}
