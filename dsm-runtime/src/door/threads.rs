//! The runtime's own threads in this process (the service thread, a launcher's and its
//! rendezvous): the deadlock watch (`crate::progress`) leaves them out of the program's threads.
//! Thread context only (a mutex).

use std::sync::Mutex;

/// The runtime's own threads in this process (the service thread, a launcher's): never the
/// program's, whatever they wait for.
static RUNTIME_THREADS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Marks the calling thread as one of the runtime's own (not the program's) until the guard
/// drops (at the thread's end: its id may be a program thread's next).
#[must_use = "the thread counts as the runtime's while the guard lives"]
pub(crate) fn runtime_thread() -> RuntimeThread {
    let tid = crate::sys::gettid();
    RUNTIME_THREADS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(tid);
    RuntimeThread(tid)
}

/// One of the runtime's threads, while it lives ([`runtime_thread`]).
pub(crate) struct RuntimeThread(i32);

impl Drop for RuntimeThread {
    fn drop(&mut self) {
        RUNTIME_THREADS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&t| t != self.0);
    }
}

/// The runtime's own threads now.
pub(crate) fn runtime_threads() -> Vec<i32> {
    RUNTIME_THREADS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}
