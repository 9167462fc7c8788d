//! The fault trace (`DSM_FAULT_TRACE=DIR`): when each step of a remote page fetch happened, page
//! by page, on every node, so one fault's time can be split between the requester, the network
//! and the home. Each node stamps CLOCK_MONOTONIC (one clock for all processes of a machine) at
//! the steps below for the first time each of its first [`PAGES`] pages passes them, and writes
//! `DIR/fault-trace.<node>.tsv` when it leaves the job; `fault-trace DIR` joins the files and
//! prints the median of each step. Off, a stamp costs one relaxed load.
//!
//! The stamps are atomics in a table allocated at start: the fault handler may stamp.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

/// Column names, in [`Step`] order.
pub const STEP_NAMES: [&str; 8] = [
    "fault",
    "getp_sent",
    "getp_in",
    "grant_sent",
    "grant_in",
    "installed",
    "resumed",
    "write",
];

struct Trace {
    dir: String,
    stamps: Box<[[AtomicU64; 8]]>,
}

static TRACE: OnceLock<Trace> = OnceLock::new();

/// Turns the trace on if `DSM_FAULT_TRACE` names a directory (at node start).
pub(crate) fn init() {
    let Some(dir) = std::env::var("DSM_FAULT_TRACE")
        .ok()
        .filter(|d| !d.is_empty())
    else {
        return;
    };
    let stamps = (0..PAGES)
        .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
        .collect();
    let _ = TRACE.set(Trace { dir, stamps });
}

/// Stamps `step` for `page`, the first time only. Async-signal-safe.
pub(crate) fn stamp(page: u64, step: Step) {
    let Some(t) = TRACE.get() else { return };
    if let Some(row) = t.stamps.get(page as usize) {
        let _ = row[step as usize].compare_exchange(
            0,
            sys::monotonic_ns(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

/// Stamps a GETP's or a grant's arrival; returns the granted page, to stamp once installed.
pub(crate) fn arrived(msg: &Msg) -> Option<PageNum> {
    if !on() {
        return None;
    }
    match msg {
        Msg::GetPage { pages, .. } => {
            if let Some(p) = pages.first() {
                stamp(u64::from(p.0), Step::GetpIn);
            }
            None
        }
        Msg::GetPageGrant { page, .. } => {
            stamp(u64::from(page.0), Step::GrantIn);
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
    let path = format!("{}/fault-trace.{node}.tsv", t.dir);
    if let Err(e) = std::fs::write(&path, out) {
        eprintln!("dsm node {node}: cannot write the fault trace to {path}: {e}");
    }
}
