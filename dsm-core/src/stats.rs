//! Per-node statistics counters.
//!
//! Every counter is a `u64` so a node's statistics travel to node 0 as a plain list of numbers
//! ([`Stats::to_counters`]) inside the exit message, and node 0 can print one column per node.
//! These are the protocol's counters only; the runtime's own (the transport's retransmissions,
//! driven faults...) travel beside them as numbers the core does not read
//! ([`crate::Node::note_runtime_counters`]).

use crate::msg::MsgKind;

macro_rules! stats {
    ($( $(#[doc = $doc:literal])* $name:ident ),* $(,)?) => {
        /// One node's counters.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $( $(#[doc = $doc])* pub $name: u64, )*
            /// Messages sent, by kind ([`MsgKind::index`]).
            pub msgs_sent: [u64; MsgKind::COUNT],
            /// Bytes sent (whole frames), by kind.
            pub bytes_sent: [u64; MsgKind::COUNT],
            /// Messages received, by kind.
            pub msgs_received: [u64; MsgKind::COUNT],
            /// Bytes received, by kind.
            pub bytes_received: [u64; MsgKind::COUNT],
        }

        impl Stats {
            /// Names of the scalar counters, in [`Stats::to_counters`] order.
            pub const SCALAR_NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// The scalar counters, in [`Stats::SCALAR_NAMES`] order.
            pub fn scalars(&self) -> Vec<u64> {
                vec![$(self.$name),*]
            }

            /// Every counter as a flat list (scalars, then the per-kind arrays).
            pub fn to_counters(&self) -> Vec<u64> {
                let mut v = self.scalars();
                for a in [&self.msgs_sent, &self.bytes_sent, &self.msgs_received, &self.bytes_received] {
                    v.extend_from_slice(a);
                }
                v
            }

            /// How many numbers [`Stats::to_counters`] gives.
            pub const COUNTERS: usize = Self::SCALAR_NAMES.len() + 4 * MsgKind::COUNT;

            /// The inverse of [`Stats::to_counters`]; `None` if the length is wrong.
            pub fn from_counters(c: &[u64]) -> Option<Stats> {
                if c.len() != Self::COUNTERS {
                    return None;
                }
                let mut it = c.iter().copied();
                let mut s = Stats::default();
                $( s.$name = it.next()?; )*
                for a in [&mut s.msgs_sent, &mut s.bytes_sent, &mut s.msgs_received, &mut s.bytes_received] {
                    for slot in a.iter_mut() {
                        *slot = it.next()?;
                    }
                }
                Some(s)
            }
        }
    };
}

stats! {
    /// Read faults resolved here (a prefetched page, or a race with another thread).
    read_faults_local,
    /// Read faults that fetched the page from its home.
    read_faults_remote,
    /// Write faults resolved here (home page, twin of a valid copy, prefetched page).
    write_faults_local,
    /// Write faults that fetched the page from its home.
    write_faults_remote,
    /// Faults that joined a request already in flight for the same page.
    faults_joined,
    /// Nanoseconds remote faults waited for their page (from the fault, or from joining a request
    /// already in flight, to the grant).
    fault_wait_ns,
    /// GETP requests made (as messages, or as one-sided reads where the transport offers them).
    getp_sent,
    /// Pages asked for on demand (the faulting page).
    pages_fetched,
    /// Pages served to other nodes as their home.
    pages_served,
    /// Of those, pages granted lent: the transport read them from this node's memory when it
    /// sent them, no copy made first ([`crate::RunData::Lent`]).
    pages_lent,
    /// Requests for pages homed here that the home had a node holding them answer (FWD).
    requests_forwarded,
    /// Pages this node sent from its copies on their home's behalf.
    pages_forwarded,
    /// Atomic operations this node's threads made on words homed elsewhere.
    atomics_remote,
    /// Atomic operations this node's threads made on words homed here.
    atomics_local,
    /// Atomic operations applied here as the words' home.
    atomics_served,
    /// Of this node's atomic operations, fetch-adds that waited for one of its threads' on the
    /// same word and then went in one operation with the others that waited.
    atomics_combined,
    /// Nanoseconds atomic operations waited for their answers.
    atomic_wait_ns,
    /// Forwards this node could not answer (its copies dropped or written since): the home
    /// sent the pages.
    forwards_refused,
    /// Pages whose home moved to this node at a barrier (home migration).
    homes_moved_here,
    /// Home moves this node vetoed: another of its threads wrote the page during the barrier
    /// that would have moved it.
    home_moves_vetoed,
    /// Pages fetched by one-sided reads of their home's memory (RDMA READ), without a message.
    pages_read_one_sided,
    /// Pages asked for as prefetches.
    prefetch_requested,
    /// Prefetched pages touched before leaving the cache.
    prefetch_used,
    /// Prefetched pages invalidated, evicted or arrived stale without being touched.
    prefetch_unused,
    /// Twins made.
    twins,
    /// Page diffs sent to homes.
    diffs_sent,
    /// Bytes of encoded diffs sent.
    diff_bytes_sent,
    /// Page diffs applied here as the home.
    diffs_applied,
    /// Cached pages invalidated by write notices.
    invalidations,
    /// Cached pages evicted to make room.
    evictions,
    /// Dirty pages evicted (their diff went home first).
    dirty_evictions,
    /// Pages faulted on again in the barrier epoch that evicted them: the cache is too small
    /// for what the program touches between barriers (each such page is fetched twice or more).
    refetched_after_eviction,
    /// Home pages written between the copy served and the start of their tracking (found by
    /// comparing: see `Node::settle_serves`), recorded as written like a write fault would.
    home_writes_found_at_settle,
    /// Locks acquired.
    lock_acquires,
    /// Of those, locks handed over by another thread of this node with no message (cohort
    /// locking).
    lock_local_handoffs,
    /// Nanoseconds spent waiting for lock grants.
    lock_wait_ns,
    /// Barriers passed.
    barriers,
    /// Nanoseconds spent in barriers (flush and wait).
    barrier_wait_ns,
    /// jia_wait calls.
    waits,
    /// Condition-variable waits.
    cv_waits,
    /// Protection changes requested (each one mprotect call).
    protect_calls,
}

impl Stats {
    /// Total messages sent.
    pub fn total_msgs_sent(&self) -> u64 {
        self.msgs_sent.iter().sum()
    }
    /// Total bytes sent.
    pub fn total_bytes_sent(&self) -> u64 {
        self.bytes_sent.iter().sum()
    }

    /// Adds `other`'s counters to these.
    pub fn add(&mut self, other: &Stats) {
        // Stats is all u64; summing the flat forms keeps this in step with the field list.
        let sum: Vec<u64> = self
            .to_counters()
            .iter()
            .zip(other.to_counters())
            .map(|(a, b)| a.wrapping_add(b))
            .collect();
        if let Some(s) = Stats::from_counters(&sum) {
            *self = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip() {
        let mut s = Stats {
            getp_sent: 3,
            invalidations: 9,
            ..Stats::default()
        };
        s.msgs_sent[MsgKind::Diff.index()] = 5;
        s.bytes_received[MsgKind::ExitGrant.index()] = 7;
        assert_eq!(Stats::from_counters(&s.to_counters()), Some(s.clone()));
        assert_eq!(Stats::from_counters(&[1, 2, 3]), None);
        let mut t = s.clone();
        t.add(&s);
        assert_eq!(t.getp_sent, 6);
        assert_eq!(t.msgs_sent[MsgKind::Diff.index()], 10);
    }
}
