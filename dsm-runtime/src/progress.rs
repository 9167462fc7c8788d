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

use crate::door::slots::Use;
use crate::door::{self, SLOTS};
use crate::sys;

/// What each slot's thread waits for, while it is in a waiting call.
static WAITS: Mutex<BTreeMap<usize, String>> = Mutex::new(BTreeMap::new());

/// A thread's registration as waiting; dropped when its call returns.
pub(crate) struct Waiting(Option<usize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            WAITS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&slot);
        }
    }
}

/// Registers the calling thread as waiting for `what` (e.g. `jia_lock(3)`) until the guard drops.
pub(crate) fn waiting(what: impl Into<String>) -> Waiting {
    let slot = door::my_slot();
    if let Some(s) = slot {
        WAITS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(s, what.into());
    }
    Waiting(slot)
}

/// What the node waits for, if every live thread that uses the DSM is in a waiting call: each
/// thread's wait, joined. `None` while any such thread runs (or none exists).
pub(crate) fn node_waits() -> Option<String> {
    let waits = WAITS.lock().unwrap_or_else(|p| p.into_inner());
    let mut what = Vec::new();
    for (i, u) in SLOTS.uses() {
        match u {
            Use::Held { tid } if sys::thread_exists(tid) => what.push(waits.get(&i)?.clone()),
            _ => {}
        }
    }
    (!what.is_empty()).then(|| what.join(", "))
}
