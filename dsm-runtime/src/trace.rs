//! The fault trace (`DSM_FAULT_TRACE=DIR`): when each step of a remote page fetch happened, page
//! by page, on every node, so one fault's time can be split between the requester, the network
//! and the home. Each node stamps CLOCK_MONOTONIC (one clock for all processes of a machine) at
//! the steps below for the first time each of its first [`PAGES`] pages passes them, and writes
//! `DIR/fault-trace.<node>.tsv` when it leaves the job; `fault-trace DIR` joins the files and
//! prints the median of each step. Off, a stamp costs one relaxed load.
//!
//! The stamps are atomics in a table allocated at start: the fault handler may stamp.

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use dsm_transport::probe::{self, Probe};

use dsm_core::codec::Frame;
use dsm_core::{Msg, PageNum};

use crate::sys;

/// Pages traced (from page 0 of the region).
pub const PAGES: usize = 1 << 16;

/// The steps stamped, in the order of a fault's life; the file's columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Requester: the fault handler starts (a fault the fast paths did not resolve).
    Fault = 0,
    /// Requester: the GETP asking for the page went out (`sendto` returned).
    GetpSent = 1,
    /// Home: the GETP was read and decoded.
    GetpIn = 2,
    /// Home: the grant went out (`sendto` returned).
    GrantSent = 3,
    /// Requester: the grant was read and decoded.
    GrantIn = 4,
    /// Requester: the page is installed and open.
    Installed = 5,
    /// Requester: the fault handler returns.
    Resumed = 6,
    /// Requester: the fault (stamped with [`Step::Fault`]) was a write.
    Write = 7,
    /// The first `sendto` a thread starts after it began the page's fault (requester: the
    /// GETP, as a rule) or read its GETP (home: the grant, as a rule). UDP only.
    SendStart = 8,
    /// The `recvfrom` that brought the GETP (home) or the grant (requester) returned. UDP only.
    Read = 9,
    /// Requester: the `mprotect` that opens the page starts.
    ProtectStart = 10,
    /// Requester: that `mprotect` returns.
    ProtectEnd = 11,
    /// Requester: the page is ready for its bytes (backed, mapped in the application's view;
    /// see `Region::prepare`), done while its GETP travels.
    Prepared = 12,
}

/// Column names, in [`Step`] order.
pub const STEP_NAMES: [&str; STEPS] = [
    "fault",
    "getp_sent",
    "getp_in",
    "grant_sent",
    "grant_in",
    "installed",
    "resumed",
    "write",
    "send_start",
    "read",
    "protect_start",
    "protect_end",
    "prepared",
];
const STEPS: usize = 13;

thread_local! {
    /// The page this thread works for: the one it faulted on, or whose GETP it read last (the
    /// page the transport's reports are stamped for).
    static PAGE: Cell<u64> = const { Cell::new(u64::MAX) };
    /// When this thread's last datagram came in.
    static RECEIVED: Cell<u64> = const { Cell::new(0) };
}

struct Trace {
    dir: String,
    stamps: Box<[[AtomicU64; STEPS]]>,
}

static TRACE: OnceLock<Trace> = OnceLock::new();

/// Turns the trace on if `DSM_FAULT_TRACE` names a directory (at node start); an error if node
/// `node`'s file there cannot be written (said at the start, not after the run).
pub(crate) fn init(node: u16) -> Result<(), String> {
    let Some(dir) = std::env::var("DSM_FAULT_TRACE")
        .ok()
        .filter(|d| !d.is_empty())
    else {
        return Ok(());
    };
    let path = file_of(&dir, node);
    if let Err(e) = crate::sys::check_own_file(std::path::Path::new(&path)) {
        return Err(format!(
            "DSM_FAULT_TRACE={dir}: cannot write the fault trace to {path}: {e}"
        ));
    }
    let stamps = (0..PAGES)
        .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
        .collect();
    let _ = TRACE.set(Trace { dir, stamps });
    probe::set_hook(on_probe);
    Ok(())
}

/// Node `node`'s file in the trace directory `dir`.
fn file_of(dir: &str, node: u16) -> String {
    format!("{dir}/fault-trace.{node}.tsv")
}

/// The transport's reports (UDP): a `sendto` starts, a datagram came in.
fn on_probe(p: Probe) {
    match p {
        Probe::SendStart => stamp(PAGE.get(), Step::SendStart),
        Probe::Received => RECEIVED.set(sys::monotonic_ns()),
    }
}

/// A fault handler starts on `page`: stamps the fault, and makes it this thread's page.
/// Async-signal-safe.
pub(crate) fn fault(page: u64) {
    if on() {
        PAGE.set(page);
        stamp(page, Step::Fault);
    }
}

/// Stamps `step` for `page`, the first time only. Async-signal-safe.
pub(crate) fn stamp(page: u64, step: Step) {
    if on() {
        stamp_at(page, step, sys::monotonic_ns());
    }
}

fn stamp_at(page: u64, step: Step, ns: u64) {
    let Some(t) = TRACE.get() else { return };
    if let Some(row) = t.stamps.get(page as usize) {
        let _ = row[step as usize].compare_exchange(0, ns, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Stamps a GETP's or a grant's arrival; returns the granted page, to stamp once installed.
pub(crate) fn arrived(frame: &Frame<'_>) -> Option<PageNum> {
    if !on() {
        return None;
    }
    match frame {
        Frame::Msg(Msg::GetPage { pages, .. }) => {
            if let Some(p) = pages.first() {
                let p = u64::from(p.0);
                PAGE.set(p);
                stamp_at(p, Step::Read, RECEIVED.get());
                stamp(p, Step::GetpIn);
            }
            None
        }
        Frame::Grant { page, .. } => {
            let p = u64::from(page.0);
            stamp_at(p, Step::Read, RECEIVED.get());
            stamp(p, Step::GrantIn);
            Some(*page)
        }
        _ => None,
    }
}

/// Whether the trace is on.
pub(crate) fn on() -> bool {
    TRACE.get().is_some()
}

/// Writes node `node`'s stamps (pages with any) to its file in the trace directory.
pub(crate) fn write(node: u16) {
    let Some(t) = TRACE.get() else { return };
    let mut out = format!("page\t{}\n", STEP_NAMES.join("\t"));
    for (page, row) in t.stamps.iter().enumerate() {
        let v: Vec<u64> = row.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        if v.iter().any(|&x| x != 0) {
            let _ = write!(out, "{page}");
            for x in v {
                let _ = write!(out, "\t{x}");
            }
            out.push('\n');
        }
    }
    let path = file_of(&t.dir, node);
    let written = crate::sys::write_own_file(std::path::Path::new(&path), out.as_bytes());
    if let Err(e) = written {
        eprintln!("dsm node {node}: cannot write the fault trace to {path}: {e}");
    }
}
