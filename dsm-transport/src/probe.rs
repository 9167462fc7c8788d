//! A hook for tracing: the UDP transport reports when a datagram starts going out and when one
//! came in, so the runtime's fault trace (`DSM_FAULT_TRACE`) can split a remote fault's time
//! around the system calls. Off (no hook set), each report is one load.

use std::sync::OnceLock;

/// What the transport reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A datagram is about to be handed to the kernel.
    SendStart,
    /// A datagram was just read from the socket.
    Received,
}

static HOOK: OnceLock<fn(Probe)> = OnceLock::new();

/// Sets the function every report calls (once per process; later calls are ignored).
pub fn set_hook(f: fn(Probe)) {
    let _ = HOOK.set(f);
}

/// Reports `p` to the hook, if one is set.
#[inline]
pub fn report(p: Probe) {
    if let Some(f) = HOOK.get() {
        f(p);
    }
}
