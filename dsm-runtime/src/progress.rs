//! What this node's application threads wait for: the node's part of the launcher's deadlock
//! detection.
//!
//! A thread that enters a call that waits for other nodes (a barrier, a lock, a condition
//! variable, a message, exit) registers what it waits for ([`waiting`]) until the call returns.
//! The node *waits* when every live thread that uses the DSM is in such a call; the service thread
//! reports it to the launcher, with what each thread waits for, the locks this node holds, and
//! whether anything is still on its way ([`crate::service`]). When every node waits, nothing is
//! in flight and nothing changes for a while, no node can ever go on: the launcher ends the job
//! naming what each node waits for, instead of letting it hang.
//!
//! Threads that never called into the DSM are not seen: a program whose progress depends on such
//! a thread while all its DSM threads wait could be ended wrongly. (A thread blocked on a page
//! fault is never waiting in this sense: pages are always served.)

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::door::slots::Use;
use crate::door::{self, MAX_THREADS, SLOTS};
use crate::sys;

/// What each slot's thread waits for, while it is in a waiting call (the calls that are not
/// made often: barriers, messages, exit).
static WAITS: Mutex<BTreeMap<usize, String>> = Mutex::new(BTreeMap::new());

/// The waits of the frequent calls, one word per slot (a kind in the high half, its argument in
/// the low half; 0: none): a lock or a condition variable is registered with one store, no
/// allocation and no lock, and spelled only when the service thread reports.
static WAITING_ON: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];

/// The thread count of a barrier of threads that some, not all, of its threads have reached (0:
/// none), published by `crate::team`: the others may be computing without ever having used the
/// DSM (no slot: unseen here), so the node is not waiting unless that many of its threads
/// visibly wait.
static OPEN_ROUND: AtomicU64 = AtomicU64::new(0);

/// A barrier of `threads` threads has some but not all of them (`None`: no such round).
pub(crate) fn note_open_round(threads: Option<usize>) {
    OPEN_ROUND.store(threads.map_or(0, |t| t as u64), Ordering::Release);
}

/// `WAITING_ON`'s kinds.
const LOCK: u64 = 1 << 32;
const WAITCV: u64 = 2 << 32;
/// A barrier of threads: its count in the low 16 bits, the threads arrived in the next 16.
const TEAM: u64 = 3 << 32;

/// A thread's registration as waiting; dropped when its call returns.
pub(crate) enum Waiting {
    /// The calling thread has no slot: nothing registered.
    Unseen,
    /// In `WAITS`.
    Text(usize),
    /// In `WAITING_ON`.
    Word(usize),
}

impl Drop for Waiting {
    fn drop(&mut self) {
        match *self {
            Waiting::Unseen => {}
            Waiting::Text(slot) => {
                WAITS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&slot);
            }
            Waiting::Word(slot) => WAITING_ON[slot].store(0, Ordering::Release),
        }
    }
}

/// Registers the calling thread as waiting for `what` (e.g. `jia_barrier`) until the guard drops.
pub(crate) fn waiting(what: impl Into<String>) -> Waiting {
    let Some(s) = door::my_slot() else {
        return Waiting::Unseen;
    };
    WAITS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(s, what.into());
    Waiting::Text(s)
}

/// Registers the calling thread as waiting in `jia_lock(lock)`.
pub(crate) fn waiting_for_lock(lock: u16) -> Waiting {
    waiting_on(LOCK | u64::from(lock))
}

/// Registers the calling thread as waiting in `jia_barrier_threads(threads)`, `arrived` of its
/// node's threads there.
pub(crate) fn waiting_for_threads(threads: usize, arrived: usize) -> Waiting {
    let field = |v: usize| v.min(0xffff) as u64;
    waiting_on(TEAM | field(arrived) << 16 | field(threads))
}

/// Registers the calling thread as waiting in `jia_waitcv(cv)`.
pub(crate) fn waiting_for_cv(cv: u16) -> Waiting {
    waiting_on(WAITCV | u64::from(cv))
}

fn waiting_on(word: u64) -> Waiting {
    let Some(s) = door::my_slot() else {
        return Waiting::Unseen;
    };
    WAITING_ON[s].store(word, Ordering::Release);
    Waiting::Word(s)
}

/// A wait word, spelled.
fn spelled(word: u64) -> String {
    let arg = word & 0xffff_ffff;
    match word & !0xffff_ffff {
        LOCK => format!("jia_lock({arg})"),
        WAITCV => format!("jia_waitcv({arg})"),
        TEAM => format!(
            "jia_barrier_threads({}), {} of its node's threads arrived",
            arg & 0xffff,
            arg >> 16
        ),
        _ => format!("an unknown call ({word:#x})"),
    }
}

/// What the node waits for, if every live thread that uses the DSM is in a waiting call: each
/// thread's wait, joined. `None` while any such thread runs (or none exists).
pub(crate) fn node_waits() -> Option<String> {
    let waits = WAITS.lock().unwrap_or_else(|p| p.into_inner());
    let mut what = Vec::new();
    for (i, u) in SLOTS.uses() {
        match u {
            Use::Held { tid } if sys::thread_exists(tid) => {
                match WAITING_ON[i].load(Ordering::Acquire) {
                    0 => what.push(waits.get(&i)?.clone()),
                    word => what.push(spelled(word)),
                }
            }
            _ => {}
        }
    }
    // A barrier of threads not all of whose threads have come: those still computing may never
    // have used the DSM (no slot), so they are not seen above; the node waits only if as many
    // of its threads as the barrier counts are seen waiting.
    if what.len() < OPEN_ROUND.load(Ordering::Acquire) as usize {
        return None;
    }
    (!what.is_empty()).then(|| what.join(", "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn wait_words_are_spelled_as_the_calls() {
        assert_eq!(super::spelled(super::LOCK | 7), "jia_lock(7)");
        assert_eq!(super::spelled(super::WAITCV | 15), "jia_waitcv(15)");
        assert_eq!(
            super::spelled(super::TEAM | 3 << 16 | 4),
            "jia_barrier_threads(4), 3 of its node's threads arrived"
        );
    }
}
