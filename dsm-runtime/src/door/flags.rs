//! The node's flags that application threads, their fault handlers and the service thread read
//! and set without holding the node's state. Atomics only: async-signal-safe.

use std::sync::atomic::{AtomicBool, AtomicU64};

/// Whether fault handlers may drive the node (the `drive` key), and application threads run
/// their calls on the node's state themselves.
pub(crate) static DRIVE: AtomicBool = AtomicBool::new(true);

/// The program has a handler for an asynchronous signal (a timer's SIGALRM...), which may touch
/// shared memory while its thread is in a DSM call: calls then hold asynchronous signals off
/// while they hold the node's state (two system calls each), since such a fault could not be
/// served before the call lets go of it. Set when the program installs one through libjia, when
/// the service thread finds one (it looks every second), or at the first such fault.
pub(crate) static ASYNC_HANDLERS: AtomicBool = AtomicBool::new(false);

/// Set in a child forked from a node (`pthread_atfork`): its faults are not served.
pub(crate) static FORKED: AtomicBool = AtomicBool::new(false);

/// The node has left the job: nothing serves faults any more.
pub(crate) static EXITED: AtomicBool = AtomicBool::new(false);

/// Faults resolved by their own thread driving the node, and those it handed back.
pub(crate) static DRIVEN: AtomicU64 = AtomicU64::new(0);
pub(crate) static HANDED_BACK: AtomicU64 = AtomicU64::new(0);

/// How long, in milliseconds, the service thread sleeps at most while another thread holds the
/// node's state, and after a fault handler drove it: the handler wakes it when it leaves
/// requests or its own wait behind, the re-watched transport does when a message comes, and
/// this nap bounds how long the acknowledgements a handler left owed wait.
pub(crate) const DRIVEN_NAP: i32 = 1;
