//! # dsm-runtime: one DSM node as an OS process
//!
//! [`init`] turns the process into a node of a job: it reserves the shared region at the same
//! address as every other node, installs the fault handler, joins the job (through the
//! launcher's rendezvous), and starts the node's service thread, which drives the protocol core
//! (`dsm-core`) and the transport (`dsm-transport`). Started without a launcher, the process is a
//! one-node job: the same program, no network.
//!
//! The application then allocates shared arrays collectively (every node makes the same calls in
//! the same order and gets the same addresses), works on them with plain loads and stores, and
//! synchronises with locks, barriers and condition variables. A read of a page not held here
//! faults; the fault handler hands it to the service thread, which fetches the page from its home
//! and resumes the thread.
//!
//! ```
//! use dsm_runtime::AllocPolicy;
//!
//! let dsm = dsm_runtime::init().expect("join the job");
//! let (me, n) = (dsm.id(), dsm.nodes());
//! // 1024 counters, homed in blocks of 128 over the nodes.
//! let a = dsm.alloc::<u64>(1024, AllocPolicy::Cyclic { block_bytes: 128 * 8, start: dsm_runtime::NodeId(0) }).unwrap();
//! for i in (me..1024).step_by(n) {
//!     a.set(i, i as u64);
//! }
//! dsm.barrier();
//! let total: u64 = (0..1024).map(|i| a.get(i)).sum();
//! assert_eq!(total, 1023 * 1024 / 2);
//! {
//!     let _guard = dsm.lock(0); // a critical section across all nodes
//!     a.set(0, a.get(0) + 1);
//! }
//! dsm.exit();
//! ```
//!
//! Modules: [`config`] (`.jiaconf`, `.jiahosts`), [`job`] (how nodes find each other); the
//! fault handler, memory mapping and service thread are private.

#![deny(unsafe_code)]
// Under `--cfg dsm_loom` only the door's hand-off is built, on loom's primitives, for its
// model check (`scripts/loom`); everything else is left out.
#![cfg_attr(dsm_loom, allow(dead_code, unused_imports))]

#[cfg(not(dsm_loom))]
mod allocations;
#[cfg(not(dsm_loom))]
mod api;
#[cfg(not(dsm_loom))]
#[allow(unsafe_code)]
mod array;
#[cfg(not(dsm_loom))]
mod call;
#[cfg(not(dsm_loom))]
pub mod config;
mod door;
#[cfg(not(dsm_loom))]
#[allow(unsafe_code)]
mod fault;
#[cfg(not(dsm_loom))]
mod fences;
#[cfg(not(dsm_loom))]
pub mod job;
#[cfg(not(dsm_loom))]
pub mod logging;
#[cfg(not(dsm_loom))]
mod message;
#[cfg(doctest)]
mod misuse;
#[cfg(not(dsm_loom))]
mod progress;
#[cfg(not(dsm_loom))]
#[allow(unsafe_code)]
mod region;
#[cfg(not(dsm_loom))]
mod same_host;
#[cfg(not(dsm_loom))]
mod service;
pub mod stats;
#[allow(unsafe_code)]
mod sys;
// The barrier of every thread of every node.
#[cfg(not(dsm_loom))]
mod team;
#[cfg(not(dsm_loom))]
mod trace;

/// Files at paths the user names (statistics, output, traces), made only as this user's own:
/// never through a symbolic link, never over another user's file.
#[cfg(not(dsm_loom))]
pub mod files {
    pub use crate::sys::signals::{clean_up_on_interrupt, die_of};
    pub use crate::sys::{
        check_own_file, create_own_file, make_own_dir, private_temp_dir, write_own_file,
    };
}

/// What libjia's definitions of the C library's signal and memory calls (`sigaction`, `signal`,
/// `mprotect`, `munmap`, `mremap`, `madvise`, `mmap`) ask the runtime: they keep the DSM's fault
/// handler first (the program's handler for SIGSEGV and SIGBUS becomes the one it passes faults
/// outside shared memory to) and refuse changes to shared memory's protection and mapping. Not
/// for Rust programs, which call nothing of this: see [`Dsm`]'s "Signals and shared memory".
#[cfg(not(dsm_loom))]
#[doc(hidden)]
pub mod interpose {
    pub use crate::fault::program::{
        REFUSED_ERRNO, note_c_program, note_handler, program_sigaction, refused_on_shared,
    };
}

/// The fault trace's file format (`DSM_FAULT_TRACE`): its columns, for the `fault-trace` tool.
#[cfg(not(dsm_loom))]
pub mod fault_trace {
    pub use crate::trace::{STEP_NAMES, Step};
}

#[cfg(not(dsm_loom))]
pub use api::{Dsm, InitError, LockGuard, init, init_job, prepare_for_io};
#[cfg(not(dsm_loom))]
pub use api::{SharedAtomicU8, SharedAtomicU16, SharedAtomicU32, SharedAtomicU64, atomic_order};
#[cfg(not(dsm_loom))]
pub use api::{check_region, impairment};
#[cfg(not(dsm_loom))]
pub use api::{in_shared_region, io_piece_bytes};
#[cfg(not(dsm_loom))]
pub use array::{Shared, SharedArray, SliceMut};
pub use door::MAX_THREADS;
pub use door::end::EXIT_PEER_FAILED;
pub use dsm_core::mailbox::{Letter, MAX_LETTER_BYTES};
pub use dsm_core::{
    AllocPolicy, AtomicOp, AtomicOrder, MAX_CVS, MAX_LOCKS, MAX_NODES, NodeId, PAGE_SIZE, Stats,
    UsageError,
};
#[cfg(not(dsm_loom))]
pub use message::{Received, ReduceOp, Reducible};
pub use stats::{NodeStats, RuntimeStats};
