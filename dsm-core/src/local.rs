//! This node's own side of synchronisation, as the node's state holds it: its threads' locks and
//! condition variables, the barrier, wait or exit it is in, and the releases that wait for its
//! diffs. Below the node and its two halves (`pages.rs`, `sync.rs`), which all use it.

use crate::types::{Count, Epoch};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::msg::{Msg, PageDiff, WriteId, WriteNotice};
use crate::types::{
    Access, AtomicOp, CvId, GlobalAddr, LockId, MAX_CVS, MAX_LOCKS, NodeId, PageNum, Time, WaiterId,
};

/// A lock as seen by this node's threads.
#[derive(Default, Debug)]
pub(crate) struct LocalLock {
    pub holder: Option<WaiterId>,
    pub acquiring: Option<(WaiterId, Time)>,
    pub releasing: bool,
    pub queue: VecDeque<(WaiterId, Time)>,
    /// The interval of this node's last release of the lock.
    pub sent: Count,
    /// The lock's release counter at our last grant.
    pub seen: Count,
    /// Hand-offs to another thread of this node since another node was known to wait for the
    /// lock (cohort locking).
    pub handoffs: u32,
    /// Another node waits for the lock (its manager said so, `Msg::LockWanted`, since the
    /// grant).
    pub wanted: bool,
}

/// A condition variable as seen by this node's threads.
#[derive(Default, Debug)]
pub(crate) struct LocalCv {
    pub waiting: Vec<WaiterId>,
    pub sent: Count,
    pub seen: Count,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CollectiveKind {
    Barrier,
    Wait,
    Exit,
}

/// The barrier, wait or exit this node is in.
#[derive(Debug)]
pub(crate) struct Collective {
    pub waiter: WaiterId,
    pub since: Time,
    pub kind: CollectiveKind,
}

/// A release waiting for its diffs to be acknowledged (all diff batches with id below `through`).
#[derive(Debug)]
pub(crate) enum AfterFlush {
    Release {
        lock: LockId,
        waiter: WaiterId,
        notices: Vec<PageNum>,
        earlier: Vec<PageNum>,
        through: Count,
    },
    Barrier {
        threads: u16,
        notices: Vec<PageNum>,
        claims: Vec<PageNum>,
        through: Count,
    },
    SetCv {
        cv: CvId,
        waiter: WaiterId,
        notices: Vec<PageNum>,
        through: Count,
    },
    Exit {
        through: Count,
    },
    /// An atomic operation with release semantics (`Msg::Atomic`, its epoch set when it
    /// leaves).
    Atomic {
        home: NodeId,
        msg: Msg,
        through: Count,
    },
}

impl AfterFlush {
    pub(crate) fn through(&self) -> Count {
        match self {
            AfterFlush::Release { through, .. }
            | AfterFlush::Barrier { through, .. }
            | AfterFlush::SetCv { through, .. }
            | AfterFlush::Exit { through }
            | AfterFlush::Atomic { through, .. } => *through,
        }
    }
}

/// An atomic operation sent and not yet answered.
#[derive(Debug)]
pub(crate) struct AtomicOut {
    /// The threads it answers, each with what its answer adds to the word's value before and
    /// when it asked: one thread (adding 0), or the fetch-adds of several threads combined
    /// into one operation (each thread's answer is the value its own add found, as if the adds
    /// had been applied one after the other).
    pub waiters: Vec<(WaiterId, u64, Time)>,
    pub addr: GlobalAddr,
    pub width: u8,
    pub op: AtomicOp,
    pub order: crate::types::AtomicOrder,
    pub home: NodeId,
    /// When it was sent (its answer is late from then on).
    pub since: Time,
    /// `Node::sent_msgs` once its message left (0 while it waits for a release's diffs).
    pub sent_at: u64,
    /// A release's interval and the last of the writes it passed on: once its grant comes
    /// back, the home has recorded them, and the node's later releases to that home may leave
    /// them out (`Atomics::sent`, `Atomics::passed`).
    pub released_in: Option<(Count, u64)>,
}

/// A fetch-add (or fetch-sub) that waits for the same word's operation on its way, to go with
/// others in one operation when that one is answered (`atomics.rs`, "Combining").
#[derive(Debug)]
pub(crate) struct Combined {
    pub waiter: WaiterId,
    /// What it adds (a subtraction as the addition of its negation, wrapping).
    pub add: u64,
    pub since: Time,
}

/// This node's side of atomic operations on shared memory (`atomics.rs`).
#[derive(Debug, Default)]
pub(crate) struct Atomics {
    pub next_id: u32,
    /// Operations on their way, by id.
    pub out: BTreeMap<u32, AtomicOut>,
    /// Fetch-adds waiting to be combined, per word, width and order, behind an operation of
    /// the same kind on its way.
    pub combined: BTreeMap<(u64, u8, bool, bool), Vec<Combined>>,
    /// Answers their threads have not taken yet.
    pub results: BTreeMap<WaiterId, u64>,
    /// Per home: the interval of this node's last release through one of its atomic words
    /// that the home has recorded (its grant came back). Not the last one sent: a home holds
    /// an operation on a word it has not allocated yet (`early_atomics`) and serves the
    /// sender's later ones on other words first, so a later release must carry the pages of
    /// one still on its way (an acquire through the later word missed them, and read a page
    /// stale: a review's reproducer).
    pub sent: BTreeMap<NodeId, Count>,
    /// Per home: the counter of the releases through its atomic words this node has seen.
    pub seen: BTreeMap<NodeId, Count>,
    /// The writes of other nodes this node's atomic acquires made it see: it passes them on
    /// through its atomic releases (`atomics.rs`, "Chains").
    pub acquired: Acquired,
    /// Per home: the last of the `acquired` writes this node passed on to it that the home
    /// has recorded (as `sent`, moved on at the grant).
    pub passed: BTreeMap<NodeId, u64>,
    /// Operations on words whose page's home move is being decided: made once it is (as the
    /// faults on those pages are).
    pub held: Vec<(
        WaiterId,
        GlobalAddr,
        u8,
        AtomicOp,
        crate::types::AtomicOrder,
    )>,
    /// Pages holding words operated on atomically, from here or here as their home: their
    /// homes never move (a copy marked written by an atomic operation is not the page's last).
    pub pages: BTreeSet<PageNum>,
    /// Of them, those homed here that the memory was told of
    /// (`PageMemory::atomics_homed_here`).
    pub homed: BTreeSet<PageNum>,
    /// Per page homed here: how many operations this core applied changed a word of it
    /// (wrapping; see `Msg::AtomicGrant::changes`).
    pub changes: BTreeMap<PageNum, u32>,
    /// Per word (its address): what this node's last operation on it saw, its width, the
    /// value it left and the page's `changes` then (at most `CoreConfig::atomic_words_kept`
    /// words).
    pub observed: WordsSeen,
}

/// The writes of other nodes this node learned through atomic acquires, per page and writer
/// (the newest interval), each numbered in the order learned, so that a release passes on to a
/// home those it has not passed on to it before. An acquire skips a write it knows: its page
/// was invalidated since the write was home (or is homed here), so every copy taken since holds
/// it. Kept one barrier past their epoch, as the managers keep notices.
#[derive(Debug, Default)]
pub(crate) struct Acquired {
    /// Per page and writer: the newest interval, its epoch, its number and the home whose
    /// record it came from (which need not be told it again; `None`: a lock's or condition
    /// variable's grant, relayed as this node's own).
    by_write: BTreeMap<(PageNum, NodeId), Learned>,
    by_number: BTreeMap<u64, (PageNum, NodeId)>,
    learned: u64,
}

/// A write learned: its writer's interval and epoch, its number in the order learned, and the
/// home it came from (`None`: a lock's or condition variable's grant).
#[derive(Clone, Copy, Debug)]
struct Learned {
    interval: Count,
    epoch: Epoch,
    number: u64,
    from: Option<NodeId>,
}

impl Acquired {
    /// Whether `n`'s write is known here.
    pub fn knows(&self, n: &WriteId) -> bool {
        self.by_write
            .get(&(n.page, n.writer))
            .is_some_and(|l| l.interval >= n.interval)
    }

    /// Learns `n`'s write (not known yet) from `home`'s record: numbered after every write
    /// learned before.
    pub fn learn(&mut self, n: &WriteId, home: Option<NodeId>) {
        self.learned += 1;
        let key = (n.page, n.writer);
        let learned = Learned {
            interval: n.interval,
            epoch: n.epoch,
            number: self.learned,
            from: home,
        };
        if let Some(was) = self.by_write.insert(key, learned) {
            self.by_number.remove(&was.number);
        }
        self.by_number.insert(self.learned, key);
    }

    /// The number of the last write learned.
    pub fn last(&self) -> u64 {
        self.learned
    }

    /// The writes learned after number `after`, to pass on to `home` (not those learned from
    /// its own record).
    pub fn after(&self, after: u64, home: NodeId) -> Vec<WriteId> {
        self.by_number
            .range(after + 1..)
            .filter_map(|(_, key)| {
                let l = self.by_write.get(key)?;
                (l.from != Some(home)).then_some(WriteId {
                    page: key.0,
                    writer: key.1,
                    interval: l.interval,
                    epoch: l.epoch,
                })
            })
            .collect()
    }

    /// A barrier ended epoch `epoch - 1`: writes older than that are known everywhere.
    pub fn forget_before(&mut self, epoch: Epoch) {
        let by_number = &mut self.by_number;
        self.by_write.retain(|_, l| {
            let keep = l.epoch.saturating_add(1) >= epoch;
            if !keep {
                by_number.remove(&l.number);
            }
            keep
        });
    }

    /// Writes kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_write.len()
    }
}

/// What this node's last operation on each atomic word saw (its width, the value it left and
/// its page's changes then), for the `kept` words used most recently: a word used again is
/// kept, the one used longest ago forgotten first (a thread spinning on a flag amid a
/// histogram's bins keeps its word; forgotten, each of its operations would name the page
/// again, and each of its node's releases make every copy of that page stale).
#[derive(Debug, Default)]
pub(crate) struct WordsSeen {
    /// Per word: what it saw, and when it was last used.
    seen: BTreeMap<u64, ((u8, u64, u32), u64)>,
    /// The words by their last use.
    by_use: BTreeMap<u64, u64>,
    uses: u64,
}

impl WordsSeen {
    /// Notes that the word at `addr` saw `now`; returns what it saw before, if kept.
    pub fn note(&mut self, addr: u64, now: (u8, u64, u32), kept: usize) -> Option<(u8, u64, u32)> {
        self.uses += 1;
        let before = match self.seen.insert(addr, (now, self.uses)) {
            Some((before, used)) => {
                self.by_use.remove(&used);
                Some(before)
            }
            None => None,
        };
        self.by_use.insert(self.uses, addr);
        while self.seen.len() > kept.max(1) {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            self.seen.remove(&oldest);
        }
        before
    }

    /// Words kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod acquired_tests {
    use super::Acquired;
    use crate::msg::WriteId;
    use crate::types::{NodeId, PageNum};

    const HOME: NodeId = NodeId(7);

    fn write(page: u32, writer: u16, interval: u64, epoch: u64) -> WriteId {
        WriteId {
            page: PageNum(page),
            writer: NodeId(writer),
            interval,
            epoch,
        }
    }

    #[test]
    fn a_write_is_passed_on_once_and_a_newer_one_of_its_writer_again() {
        let mut a = Acquired::default();
        a.learn(&write(3, 1, 5, 0), Some(HOME));
        a.learn(&write(4, 2, 1, 0), Some(NodeId(8)));
        assert!(a.knows(&write(3, 1, 4, 0)));
        assert!(!a.knows(&write(3, 1, 6, 0)));
        assert!(!a.knows(&write(3, 2, 1, 0)));
        let passed = a.last();
        assert_eq!(a.after(0, NodeId(9)).len(), 2);
        assert!(a.after(passed, NodeId(9)).is_empty());
        // Not back to the home it came from.
        assert_eq!(a.after(0, HOME), [write(4, 2, 1, 0)]);
        a.learn(&write(3, 1, 6, 0), None);
        assert_eq!(a.after(passed, HOME), [write(3, 1, 6, 0)]);
        assert_eq!(a.after(0, HOME), [write(4, 2, 1, 0), write(3, 1, 6, 0)]);
    }

    #[test]
    fn writes_are_kept_one_barrier_past_their_epoch() {
        let mut a = Acquired::default();
        a.learn(&write(1, 1, 1, 3), Some(HOME));
        a.learn(&write(2, 1, 2, 4), Some(HOME));
        a.forget_before(5);
        assert_eq!(a.len(), 1);
        assert_eq!(a.after(0, NodeId(0)), [write(2, 1, 2, 4)]);
        a.forget_before(6);
        assert_eq!(a.len(), 0);
        assert!(a.after(0, NodeId(0)).is_empty());
    }
}

#[cfg(test)]
mod words_seen_tests {
    use super::WordsSeen;

    #[test]
    fn the_word_used_longest_ago_is_forgotten_first() {
        let mut w = WordsSeen::default();
        assert_eq!(w.note(8, (8, 1, 0), 2), None);
        assert_eq!(w.note(16, (8, 2, 0), 2), None);
        // Word 8 used again: word 16 is now the oldest.
        assert_eq!(w.note(8, (8, 3, 0), 2), Some((8, 1, 0)));
        assert_eq!(w.note(24, (8, 4, 0), 2), None);
        assert_eq!(w.len(), 2);
        assert_eq!(w.note(16, (8, 5, 0), 2), None, "forgotten");
        assert_eq!(w.note(8, (8, 6, 0), 2), None, "forgotten when 16 came back");
        // A spinner's word among a scan of others longer than the words kept stays kept.
        let mut w = WordsSeen::default();
        w.note(0, (8, 7, 0), 4);
        for i in 0..1000u64 {
            w.note(8 * (i + 1), (8, i, 0), 4);
            assert_eq!(w.note(0, (8, 7, 0), 4), Some((8, 7, 0)), "after {i}");
        }
        assert_eq!(w.len(), 4);
    }
}

/// Diffs on their way to their homes, and the releases waiting for them.
#[derive(Debug, Default)]
pub(crate) struct Flush {
    /// Diffs being gathered for each home before they are sent.
    pub diff_batch: BTreeMap<NodeId, Vec<PageDiff>>,
    pub next_diff_id: Count,
    /// Diff batches sent and not yet acknowledged: id -> (home, sent at).
    pub diffs_out: BTreeMap<Count, (NodeId, Time)>,
    /// Releases, barriers... waiting for their diffs to be acknowledged, in order.
    pub after_flush: VecDeque<AfterFlush>,
}

/// The caller's side of synchronisation: this node's threads' locks and condition variables, and
/// the barrier, wait or exit it is in.
#[derive(Debug)]
pub(crate) struct SyncState {
    /// Application threads of this node that have used the DSM (`Node::note_threads`): with
    /// more than one, locks may pass between them (cohort locking).
    pub threads: usize,
    pub locks: Vec<LocalLock>,
    pub cvs: Vec<LocalCv>,
    pub collective: Option<Collective>,
    pub wait_epoch: Epoch,
    /// From a barrier grant that would move homes to the barrier's end: page requests and diffs
    /// received for the pages that may move (`moving`), and those of their senders that came
    /// after them (`Node::behind_held`), in order. They are served once the moves are decided
    /// and applied here (a node that applied them first may already ask the new home).
    pub held_for_moves: Vec<(NodeId, Msg)>,
    /// Between this node's barrier call and the grant (`awaiting_grant`): the pages it diffed
    /// meanwhile (by another thread; checked against the grant's home moves).
    pub diffed_in_barrier: BTreeSet<PageNum>,
    /// With home migration, since this node's last barrier grant: the pages homed here that
    /// diffs from other nodes changed, with their senders (checked against the next grant's
    /// home moves: see `on_barrier_grant`).
    pub diffed_here: BTreeSet<(PageNum, NodeId)>,
    /// The barrier (epoch) whose grant would move homes, waiting for every node's vetoes.
    pub migrating: Option<Epoch>,
    /// The moves that grant proposed, until they are decided.
    pub proposed_moves: Vec<WriteNotice>,
    /// The pages those moves name, closed on every node until the moves are decided (so no
    /// thread writes one where the write could miss its home), with the faults waiting for
    /// them.
    pub moving: BTreeMap<PageNum, Vec<(WaiterId, Access)>>,
    /// From this node's last barrier call to its next: the pages written before it (that
    /// barrier's notices), with the interval of their last write. Until that barrier's grant has
    /// reached every node those pages are not invalidated everywhere, so a lock released
    /// meanwhile (by another thread) still names those written since its last release, as
    /// notices of the barrier's epoch (`Msg::Release::earlier`).
    pub barrier_written: Option<BTreeMap<PageNum, Count>>,
    /// The barrier before's, from this node's barrier call to that barrier's grant: until then
    /// the other nodes need not have had the barrier before's grant either (a thread may hold a
    /// lock across two barrier calls of another thread of its node).
    pub barrier_written_before: Option<BTreeMap<PageNum, Count>>,
    /// Between this node's barrier call and the grant.
    pub awaiting_grant: bool,
}

impl SyncState {
    pub(crate) fn new() -> SyncState {
        SyncState {
            threads: 1,
            locks: (0..MAX_LOCKS).map(|_| LocalLock::default()).collect(),
            cvs: (0..MAX_CVS).map(|_| LocalCv::default()).collect(),
            collective: None,
            wait_epoch: 0,
            held_for_moves: Vec::new(),
            diffed_in_barrier: BTreeSet::new(),
            diffed_here: BTreeSet::new(),
            migrating: None,
            proposed_moves: Vec::new(),
            moving: BTreeMap::new(),
            barrier_written: None,
            barrier_written_before: None,
            awaiting_grant: false,
        }
    }
}
