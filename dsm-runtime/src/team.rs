//! Threads of one node acting together: the barrier of every thread of every node
//! (`jia_barrier_threads`, [`crate::Dsm::barrier_threads`]).
//!
//! The threads of a node meet first among themselves; the last to arrive does the node's barrier
//! (one arrival and one grant on the wire per node, whatever the number of threads), and the
//! others leave when it returns. Coherence follows from the node's: every thread of the node has
//! arrived, so its writes are in the node's pages when the node's barrier diffs them; and no
//! thread leaves before the node's barrier has invalidated what other nodes wrote. The threads
//! share one address space, so among themselves they need nothing more.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::door::MAX_THREADS;
use crate::door::end::fatal;
use crate::progress;

/// The node's thread barrier.
struct Meeting {
    /// Threads arrived in the current round.
    arrived: usize,
    /// The number of threads the current round waits for (0: no round open).
    expected: usize,
    /// Rounds completed (a waiting thread leaves when it changes).
    round: u64,
    /// Threads of this node in a plain `jia_barrier` now.
    in_plain: usize,
}

static MEETING: Mutex<Meeting> = Mutex::new(Meeting {
    arrived: 0,
    expected: 0,
    round: 0,
    in_plain: 0,
});
static MET: Condvar = Condvar::new();

/// Threads that waited in a thread barrier for the other threads of their node (every arrival
/// but the last of each round).
static LOCAL_WAITS: AtomicU64 = AtomicU64::new(0);

/// Threads of this node that waited in [`barrier`] for the others of their node, so far.
pub(crate) fn local_waits() -> u64 {
    LOCAL_WAITS.load(Ordering::Relaxed)
}

/// Waits until `threads` threads of this node have arrived; the last one runs `node_barrier`
/// (the barrier of the nodes) before any of them leaves. A call with another count while a
/// round is open is the program's bug, said as such.
pub(crate) fn barrier(threads: usize, at: &std::panic::Location<'_>, node_barrier: impl FnOnce()) {
    if threads == 0 {
        fatal(&format!(
            "jia_barrier_threads(0): a barrier needs at least one thread of each node (at {at})"
        ));
    }
    if threads > MAX_THREADS {
        fatal(&format!(
            "jia_barrier_threads({threads}): a node has at most {MAX_THREADS} threads that use \
             the DSM, so no more can meet in a barrier (at {at})"
        ));
    }
    let mut m = MEETING.lock().unwrap_or_else(|p| p.into_inner());
    if m.in_plain > 0 {
        fatal(&format!(
            "jia_barrier_threads({threads}) while another thread of this node is in jia_barrier: \
             a node's threads meet in one kind of barrier at a time (jia_barrier is \
             jia_barrier_threads(1)) (at {at})"
        ));
    }
    if m.arrived == 0 {
        m.expected = threads;
    } else if m.arrived >= m.expected {
        // The round is full and its last thread is in the node's barrier.
        fatal(&format!(
            "jia_barrier_threads({threads}): more than {} threads of this node in one barrier of \
             threads (at {at})",
            m.expected
        ));
    } else if m.expected != threads {
        fatal(&format!(
            "jia_barrier_threads({threads}) while {} thread(s) of this node wait in \
             jia_barrier_threads({}): every thread of a node must give the same count (at {at})",
            m.arrived, m.expected
        ));
    }
    m.arrived += 1;
    progress::note_open_round((m.arrived < threads).then_some((threads, m.arrived)));
    if m.arrived < threads {
        LOCAL_WAITS.fetch_add(1, Ordering::Relaxed);
        let round = m.round;
        let _w = progress::waiting_for_threads(threads);
        while m.round == round {
            m = MET.wait(m).unwrap_or_else(|p| p.into_inner());
        }
        return;
    }
    // The last of the node: the others wait for the round to change.
    drop(m);
    node_barrier();
    let mut m = MEETING.lock().unwrap_or_else(|p| p.into_inner());
    m.arrived = 0;
    m.expected = 0;
    m.round += 1;
    drop(m);
    MET.notify_all();
}

/// A plain `jia_barrier` (`node_barrier`), refused while threads of this node wait in a
/// barrier of threads: the two would wait for each other's round.
#[track_caller]
pub(crate) fn plain_barrier<R>(node_barrier: impl FnOnce() -> R) -> R {
    let open = {
        let mut m = MEETING.lock().unwrap_or_else(|p| p.into_inner());
        m.in_plain += 1;
        (m.arrived > 0).then_some((m.arrived, m.expected))
    };
    if let Some((arrived, expected)) = open {
        fatal(&format!(
            "jia_barrier while {arrived} thread(s) of this node wait in \
             jia_barrier_threads({expected}): a node's threads meet in one kind of barrier at a \
             time (jia_barrier is jia_barrier_threads(1)) (at {})",
            std::panic::Location::caller()
        ));
    }
    let r = node_barrier();
    MEETING.lock().unwrap_or_else(|p| p.into_inner()).in_plain -= 1;
    r
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// T threads, many rounds: the node's barrier runs once per round, by the last to arrive,
    /// and no thread leaves a round before it ran nor before every thread arrived.
    #[test]
    fn the_last_thread_of_a_round_runs_the_nodes_barrier_once_and_nobody_leaves_early() {
        const T: usize = 4;
        const ROUNDS: usize = 200;
        let node_barriers = AtomicUsize::new(0);
        let arrivals = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..T {
                s.spawn(|| {
                    for r in 0..ROUNDS {
                        arrivals.fetch_add(1, Ordering::SeqCst);
                        super::barrier(T, std::panic::Location::caller(), || {
                            assert_eq!(arrivals.load(Ordering::SeqCst), (r + 1) * T);
                            node_barriers.fetch_add(1, Ordering::SeqCst);
                        });
                        assert_eq!(node_barriers.load(Ordering::SeqCst), r + 1);
                        assert!(arrivals.load(Ordering::SeqCst) >= (r + 1) * T);
                    }
                });
            }
        });
        assert_eq!(node_barriers.load(Ordering::SeqCst), ROUNDS);
    }
}
