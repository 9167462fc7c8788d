//! The logger of every node and of dsmrun: `RUST_LOG` filtering (warnings by default), lines
//! prefixed with who wrote them (`dsm node 3: warning: ...`, `dsmrun: warning: ...`), on
//! standard error.
//!
//! A record made in signal context (a fault handler driving the node reaches the transport,
//! which logs) is not written there: it is queued, without waiting, for the service thread,
//! which writes it on its next pass (`write_deferred`). A record that finds the queue busy or
//! full is counted and the count reported with the next written record.
//!
//! Records are written with one write(2) each, not through `std::io::stderr()`'s lock: a thread
//! of the program may hold that lock (in `eprintln!`) when a signal handler of its touches a
//! page the node does not hold and waits for the service thread, which must then never wait
//! for the lock.
//!
//! A Rust program that installs a logger of its own before `dsm_runtime::init` keeps it; it then
//! receives the runtime's records too, signal context included.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use log::{Level, Log, Metadata, Record};

use crate::door::context::in_signal_context;
use crate::sys;

/// Records queued from signal context, at most [`QUEUED_MAX`].
static QUEUED: Mutex<Vec<String>> = Mutex::new(Vec::new());
const QUEUED_MAX: usize = 64;
/// Records from signal context that found the queue busy or full.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Some record is queued (spares the service thread's every pass a lock).
static ANY_QUEUED: AtomicBool = AtomicBool::new(false);

struct Logger {
    filter: env_logger::Logger,
    who: String,
}

fn level_word(level: Level) -> &'static str {
    match level {
        Level::Error => "error",
        Level::Warn => "warning",
        Level::Info => "info",
        Level::Debug => "debug",
        Level::Trace => "trace",
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.filter.matches(record) {
            return;
        }
        let line = format!(
            "{}: {}: {}\n",
            self.who,
            level_word(record.level()),
            record.args()
        );
        if in_signal_context() {
            match QUEUED.try_lock() {
                Ok(mut q) if q.len() < QUEUED_MAX => {
                    q.push(line);
                    ANY_QUEUED.store(true, Ordering::Release);
                }
                _ => {
                    DROPPED.fetch_add(1, Ordering::Relaxed);
                }
            }
            return;
        }
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            sys::write_stderr(
                format!(
                    "{}: warning: {dropped} log records made in a fault handler were dropped\n",
                    self.who
                )
                .as_bytes(),
            );
        }
        sys::write_stderr(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger for `who` (`dsm node 3`, `dsmrun`) unless the program installed one.
fn install(who: String) {
    let filter =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).build();
    let max = filter.filter();
    if log::set_boxed_logger(Box::new(Logger { filter, who })).is_ok() {
        log::set_max_level(max);
    }
}

/// Installs the logger of node `rank`.
pub(crate) fn init_node(rank: u16) {
    install(format!("dsm node {rank}"));
}

/// Installs dsmrun's logger.
pub fn init_launcher() {
    install("dsmrun".to_string());
}

/// Writes the records queued from signal context. Service thread only.
pub(crate) fn write_deferred() {
    if !ANY_QUEUED.swap(false, Ordering::Acquire) {
        return;
    }
    let lines = match QUEUED.try_lock() {
        Ok(mut q) => std::mem::take(&mut *q),
        Err(_) => {
            // A handler is queueing right now: look again on the next pass.
            ANY_QUEUED.store(true, Ordering::Release);
            return;
        }
    };
    for l in lines {
        sys::write_stderr(l.as_bytes());
    }
}
