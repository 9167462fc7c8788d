//! Tools to measure and diagnose the DSM, kept out of the runtime and the apps: the floors its
//! costs are measured against ([`floors`]), and the binaries `dsm-bench`, `faultlat` and
//! `fault-trace`.

mod sys;

/// Floors the DSM's costs are measured against: the bare cost of a fault, the smallest remote
/// fault two processes can make over UDP loopback, and the cost of backing a fresh page.
pub mod floors {
    pub use crate::sys::floor::{backing_page_us, bare_fault_us, minimal_remote_fault_us};
}

pub mod stream;

/// Lets SIGPIPE end the process, as it ends a C tool: `dsm-bench ... | head` then ends quietly
/// when `head` leaves, instead of panicking at its next line (Rust ignores SIGPIPE by default).
pub fn end_when_output_is_closed() {
    sys::default_sigpipe();
}
