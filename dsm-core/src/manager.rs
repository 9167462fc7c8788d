//! The synchronisation managers a node hosts: lock `l` and condition variable `c` at node
//! `l % nodes` and `c % nodes`, barriers, waits and exit at node 0.
//!
//! A manager is a structure of its own with a narrow interface: a request from a node goes in,
//! the messages to send come out (into an [`Outbox`] of `(to, message)`), and the few events the
//! node must act on come back as a [`Managed`] value. It never touches pages, the page table or
//! this node's own threads: the caller's side of locks and barriers is in [`crate::sync`].

use crate::types::{Count, Epoch};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::alloc::Allocs;
use crate::error::ProtocolError;
use crate::msg::{Msg, MsgKind, PageWrites, WriteId, WriteNotice};
use crate::stats::Stats;
use crate::types::{CvId, LockId, MAX_RUNTIME_COUNTERS, NodeId, PageNum};

/// Messages a manager sends, in order.
pub(crate) type Outbox = Vec<(NodeId, Msg)>;

/// What the node must do beyond sending the outbox.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Managed {
    /// Nothing more.
    Done,
    /// Nodes allocated differently (their barriers' allocations differ): the job must end,
    /// naming the first to arrive and one that differs, with their allocations.
    AllocMismatch {
        first: (NodeId, Allocs),
        other: (NodeId, Allocs),
    },
    /// Nodes met in a barrier with different thread counts: the first to arrive and one that
    /// differs, with their counts.
    ThreadsMismatch {
        first: (NodeId, u16),
        other: (NodeId, u16),
    },
    /// Every node has exited: their statistics, in node order (the core's, then the runtime's
    /// opaque counters).
    JobStats {
        nodes: Vec<Stats>,
        runtime: Vec<Vec<u64>>,
    },
}

/// Write notices kept by a lock, condition-variable or atomic word's manager, by page.
type Notices = BTreeMap<PageNum, Notice>;

/// A page's write notice as a manager keeps it: its latest release.
#[derive(Clone, Copy, Debug)]
struct Notice {
    /// The release counter of the page's latest release.
    counter: Count,
    /// The newest epoch any release of the page carried (an older tag must not hide a newer
    /// write from an acquirer of that epoch).
    epoch: Epoch,
    /// The node that made the latest release: its own copy has the page's latest writes.
    by: NodeId,
}

#[derive(Default, Debug)]
struct LockMgr {
    holder: Option<NodeId>,
    /// The holder's threads may pass the lock among themselves: it is told when another node
    /// waits.
    holder_cohort: bool,
    /// Waiting nodes, with their `seen`, epoch and cohort flag.
    queue: VecDeque<(NodeId, Count, Epoch, bool)>,
    counter: Count,
    notices: Notices,
}

/// The record of the atomic words of a home: the writes their releases named, one record and
/// one counter for all of them (see [`Managers::on_atomic_release`]). Per page, one entry per
/// writer: a release that passes on another node's write must not hide the writes of the
/// page's other writers from an acquirer that knows that one already.
#[derive(Default, Debug)]
struct AtomicMgr {
    counter: Count,
    notices: BTreeMap<PageNum, Vec<AtomicRecord>>,
    /// The records by the counter that recorded them: an acquire walks those after what it
    /// has seen, not every record (a spin of acquire loads sees nothing new, in a few steps).
    by_counter: BTreeSet<(Count, PageNum, NodeId)>,
}

/// A writer's latest write to a page released through a home's atomic words.
#[derive(Clone, Copy, Debug)]
struct AtomicRecord {
    writer: NodeId,
    /// The writer's interval (its writes to the page up to it are home).
    interval: Count,
    /// The release counter that recorded that interval.
    counter: Count,
    /// The epoch the write's release was tagged with.
    epoch: Epoch,
}

impl AtomicMgr {
    /// Records `n` under the counter now, unless it predates the last epoch (as
    /// [`record_notices`]) or an interval of its writer at least as new, of an epoch at least
    /// as new, is recorded: an acquirer that saw that one has seen this write.
    fn record(&mut self, n: WriteId, node_epoch: Epoch) {
        if n.epoch.saturating_add(1) < node_epoch {
            return;
        }
        let counter = self.counter;
        let writers = self.notices.entry(n.page).or_default();
        match writers.iter_mut().find(|r| r.writer == n.writer) {
            // Known to whoever saw that one, unless it is of a newer epoch (a release's pages
            // of the epoch before and of its own: acquirers of the newer one filter the older
            // out).
            Some(r) if (r.interval, r.epoch) >= (n.interval, n.epoch) => return,
            Some(r) => {
                self.by_counter.remove(&(r.counter, n.page, n.writer));
                r.interval = r.interval.max(n.interval);
                r.counter = counter;
                r.epoch = r.epoch.max(n.epoch);
            }
            None => writers.push(AtomicRecord {
                writer: n.writer,
                interval: n.interval,
                counter,
                epoch: n.epoch,
            }),
        }
        self.by_counter.insert((counter, n.page, n.writer));
    }
}

#[derive(Default, Debug)]
struct CvMgr {
    set: bool,
    counter: Count,
    notices: Notices,
    waiters: Vec<(NodeId, Count)>,
}

/// The locks, condition variables and (at node 0) barriers, waits and exit this node manages.
#[derive(Debug)]
pub(crate) struct Managers {
    me: NodeId,
    nodes: u16,
    locks: BTreeMap<LockId, LockMgr>,
    cvs: BTreeMap<CvId, CvMgr>,
    /// The releases through the atomic words homed here.
    atomics: AtomicMgr,
    barrier_arrived: BTreeSet<NodeId>,
    barrier_notices: BTreeMap<PageNum, Option<NodeId>>,
    /// Pages offered for home migration in this barrier, by the node that offered them.
    barrier_claims: BTreeMap<PageNum, NodeId>,
    /// The barrier whose grant would move homes, the nodes that have answered, and the pages
    /// they vetoed.
    migrating: Option<(Epoch, BTreeSet<NodeId>, BTreeSet<PageNum>)>,
    /// The current barrier's first arrival and its allocations.
    barrier_allocs: Option<(NodeId, Allocs)>,
    /// The current barrier's first arrival and its thread count.
    barrier_threads: Option<(NodeId, u16)>,
    barrier_epoch: Epoch,
    wait_arrived: BTreeSet<NodeId>,
    wait_epoch: Epoch,
    exit_stats: BTreeMap<NodeId, Vec<u64>>,
}

/// The notices released after `seen` of writes from epoch `epoch` on (earlier ones were
/// invalidated at the acquirer by the barriers that ended their epochs); `but_by`: not those
/// whose latest release was this node's.
///
/// Only a lock's acquirer may leave its own out: it released the lock it holds again, so every
/// release before its own was among the notices of the grant before it, and its copy of a page
/// it released last has the page's latest writes (invalidating it cost a node taking a lock
/// alone a refetch of every page it wrote under it, each time). A condition variable's
/// releases are not exclusive: another node's release of the page may come between the
/// acquirer's last grant and its own release, which records over it. (Atomic words keep a
/// record per writer instead: see [`AtomicMgr`].)
fn notices_since(
    notices: &Notices,
    seen: Count,
    epoch: Epoch,
    but_by: Option<NodeId>,
) -> Vec<PageNum> {
    notices
        .iter()
        .filter(|&(_, n)| n.counter > seen && n.epoch >= epoch && Some(n.by) != but_by)
        .map(|(&p, _)| p)
        .collect()
}

/// Records a release's notices, unless they predate the last epoch: a barrier invalidates the
/// pages written in its epoch everywhere, but a node may still wait for that barrier's grant
/// (one thread in it) while another of its threads acquires a lock, so notices are kept one
/// barrier longer (every node has had a grant once the next barrier completes).
fn record_notices(
    map: &mut Notices,
    (pages, by): (Vec<PageNum>, NodeId),
    counter: Count,
    epoch: Epoch,
    node_epoch: Epoch,
) {
    if epoch.saturating_add(1) < node_epoch {
        return;
    }
    for p in pages {
        map.entry(p)
            .and_modify(|n| {
                n.counter = counter;
                n.epoch = n.epoch.max(epoch);
                n.by = by;
            })
            .or_insert(Notice { counter, epoch, by });
    }
}

/// Counts a release of `from` (a lock's or an atomic words'), and records its notices of epoch
/// `epoch`, and `earlier`, of the epoch before (see [`Msg::Release`]), under the new count.
fn record_release(
    (counter, map): (&mut Count, &mut Notices),
    from: NodeId,
    epoch: Epoch,
    (notices, earlier): (Vec<PageNum>, Vec<PageNum>),
    node_epoch: Epoch,
) {
    *counter += 1;
    if let Some(before) = epoch.checked_sub(1) {
        record_notices(map, (earlier, from), *counter, before, node_epoch);
    }
    record_notices(map, (notices, from), *counter, epoch, node_epoch);
}

fn refuse(from: NodeId, kind: MsgKind, why: &'static str) -> ProtocolError {
    ProtocolError { from, kind, why }
}

impl Managers {
    /// The managers of node `me` in a job of `nodes`.
    pub fn new(me: NodeId, nodes: u16) -> Managers {
        Managers {
            me,
            nodes,
            locks: BTreeMap::new(),
            cvs: BTreeMap::new(),
            atomics: AtomicMgr::default(),
            barrier_arrived: BTreeSet::new(),
            barrier_notices: BTreeMap::new(),
            barrier_claims: BTreeMap::new(),
            migrating: None,
            barrier_allocs: None,
            barrier_threads: None,
            barrier_epoch: 0,
            wait_arrived: BTreeSet::new(),
            wait_epoch: 0,
            exit_stats: BTreeMap::new(),
        }
    }

    /// Starts the barrier and wait epochs at `epoch` (a job's thousandth hour, in a test).
    #[cfg(test)]
    pub(crate) fn start_epochs_at(&mut self, epoch: Epoch) {
        self.barrier_epoch = epoch;
        self.wait_epoch = epoch;
    }

    /// The node that manages lock or condition variable `id`.
    pub fn manager_of(&self, id: u16) -> NodeId {
        NodeId(id % self.nodes)
    }

    fn broadcast(&self, msg: &Msg, out: &mut Outbox) {
        out.extend((0..self.nodes).map(|n| (NodeId(n), msg.clone())));
    }

    fn check_master(&self, from: NodeId, kind: MsgKind) -> Result<(), ProtocolError> {
        if self.me != NodeId(0) {
            return Err(refuse(from, kind, "only node 0 manages barriers"));
        }
        Ok(())
    }

    /// A barrier ended: notices from before `epoch` are known everywhere.
    pub fn forget_before(&mut self, epoch: Epoch) {
        for m in self.locks.values_mut() {
            m.notices.retain(|_, n| n.epoch >= epoch);
        }
        for m in self.cvs.values_mut() {
            m.notices.retain(|_, n| n.epoch >= epoch);
        }
        let by_counter = &mut self.atomics.by_counter;
        self.atomics.notices.retain(|&page, writers| {
            writers.retain(|r| {
                let keep = r.epoch >= epoch;
                if !keep {
                    by_counter.remove(&(r.counter, page, r.writer));
                }
                keep
            });
            !writers.is_empty()
        });
    }

    // ----- atomic words (applied by the page side; their notices kept here) -----

    /// An atomic operation on a word homed here released the sender's writes (`notices`, and
    /// `earlier` of the epoch before `epoch`: each page with its last write's interval) and
    /// passed on the writes of others it had learned through its acquires (`passed_on`):
    /// recorded under one new count, in the one record of every atomic word homed here. An acquire through a
    /// word then gets the writes released through any word of this home that it has not seen:
    /// more than it needs (extra invalidations, never a missed write), in memory bounded by the
    /// pages and writers. Records per word grew with every word used, and each release through
    /// a word not used before named every page written since the barrier: a histogram of
    /// 200,000 bins updated with atomics took 2.3 GB and 16 s on 2 nodes.
    pub fn on_atomic_release(
        &mut self,
        from: NodeId,
        epoch: Epoch,
        (notices, earlier): (PageWrites, PageWrites),
        passed_on: Vec<WriteId>,
        node_epoch: Epoch,
    ) {
        let m = &mut self.atomics;
        m.counter += 1;
        let own = |(page, interval), epoch| WriteId {
            page,
            writer: from,
            interval,
            epoch,
        };
        if let Some(before) = epoch.checked_sub(1) {
            for write in earlier {
                m.record(own(write, before), node_epoch);
            }
        }
        for write in notices {
            m.record(own(write, epoch), node_epoch);
        }
        for n in passed_on {
            m.record(n, node_epoch);
        }
    }

    /// The counter of the releases through this home's atomic words, and (for an acquire) the
    /// writes released through them after `seen`, from the epoch before `epoch` on: an
    /// acquirer past a barrier has those invalidated already, but passes them on to nodes that
    /// may not be past it yet (a thread of theirs still waiting for its grant).
    pub fn atomic_notices(
        &self,
        seen: Count,
        epoch: Epoch,
        acquire: bool,
    ) -> (Count, Vec<WriteId>) {
        let m = &self.atomics;
        if !acquire {
            return (m.counter, Vec::new());
        }
        let from = epoch.saturating_sub(1);
        let notices = m
            .by_counter
            .range((seen.saturating_add(1), PageNum(0), NodeId(0))..)
            .filter(|&&(counter, ..)| counter > seen)
            .filter_map(|&(_, page, writer)| {
                let r = m.notices.get(&page)?.iter().find(|r| r.writer == writer)?;
                (r.epoch >= from).then_some(WriteId {
                    page,
                    writer,
                    interval: r.interval,
                    epoch: r.epoch,
                })
            })
            .collect();
        (m.counter, notices)
    }

    // ----- locks -----

    /// `from`, in barrier epoch `epoch`, asks for `lock`, having seen its notices up to `seen`;
    /// with `cohort`, its threads may pass the lock among themselves.
    pub fn on_acquire(
        &mut self,
        from: NodeId,
        lock: LockId,
        (seen, epoch, cohort): (Count, Epoch, bool),
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        if self.manager_of(lock.0) != self.me {
            return Err(refuse(from, MsgKind::Acquire, "lock not managed here"));
        }
        let nodes = self.nodes;
        let m = self.locks.entry(lock).or_default();
        if m.holder.is_none() {
            Self::grant_lock(m, (lock, nodes), (from, seen, epoch, cohort), out);
        } else if m.holder == Some(from) || m.queue.iter().any(|&(n, ..)| n == from) {
            return Err(refuse(
                from,
                MsgKind::Acquire,
                "node already holds or awaits the lock",
            ));
        } else {
            // A holder whose threads pass the lock among themselves learns that another node
            // waits (once per holding): they stop after a bounded number of hand-offs.
            if m.queue.is_empty() && m.holder_cohort {
                if let Some(holder) = m.holder {
                    out.push((holder, Msg::LockWanted { lock }));
                }
            }
            m.queue.push_back((from, seen, epoch, cohort));
        }
        Ok(Managed::Done)
    }

    fn grant_lock(
        m: &mut LockMgr,
        (lock, nodes): (LockId, u16),
        (to, seen, epoch, cohort): (NodeId, Count, Epoch, bool),
        out: &mut Outbox,
    ) {
        m.holder = Some(to);
        m.holder_cohort = cohort;
        // With three nodes or more, the acquirer passes on what the grant names through its
        // atomic releases, to nodes that may not be past its last barrier yet: the pages of the
        // epoch before too (see `Msg::AcquireGrant::earlier`).
        let earlier = match epoch.checked_sub(1) {
            Some(before) if nodes > 2 => m
                .notices
                .iter()
                .filter(|&(_, n)| n.counter > seen && n.epoch == before && n.by != to)
                .map(|(&p, _)| p)
                .collect(),
            _ => Vec::new(),
        };
        let msg = Msg::AcquireGrant {
            lock,
            counter: m.counter,
            notices: notices_since(&m.notices, seen, epoch, Some(to)),
            earlier,
        };
        out.push((to, msg));
    }

    /// `from` releases `lock` with the pages it wrote: in barrier epoch `epoch`, and in the epoch
    /// before (`earlier`: its last barrier took those; see [`Msg::Release`]). This node is in
    /// `node_epoch`.
    pub fn on_release(
        &mut self,
        from: NodeId,
        lock: LockId,
        epoch: Epoch,
        (notices, earlier): (Vec<PageNum>, Vec<PageNum>),
        node_epoch: Epoch,
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        let nodes = self.nodes;
        let m = match self.locks.get_mut(&lock) {
            Some(m) if m.holder == Some(from) => m,
            _ => return Err(refuse(from, MsgKind::Release, "lock not held by that node")),
        };
        record_release(
            (&mut m.counter, &mut m.notices),
            from,
            epoch,
            (notices, earlier),
            node_epoch,
        );
        m.holder = None;
        if let Some(next) = m.queue.pop_front() {
            Self::grant_lock(m, (lock, nodes), next, out);
            // Others still wait: a cohort holder is told at once (after its grant, in order).
            if !m.queue.is_empty() && m.holder_cohort {
                out.push((next.0, Msg::LockWanted { lock }));
            }
        }
        Ok(Managed::Done)
    }

    // ----- barriers, waits, exit (node 0) -----

    /// `from` reached barrier `epoch` with its allocation digest and thread count (`arrival`),
    /// the pages it wrote, and those of them it offers to become the home of (`claims`, see
    /// [`Msg::Barrier`]). Once every
    /// node has arrived, a page whose only writer claimed it moves to that writer: the grant
    /// says so, and the barrier then takes a second round ([`Managers::on_migrated`]).
    pub fn on_barrier(
        &mut self,
        from: NodeId,
        epoch: Epoch,
        arrival: (Allocs, u16),
        notices: Vec<PageNum>,
        claims: Vec<PageNum>,
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        let (allocs, threads) = arrival;
        self.check_master(from, MsgKind::Barrier)?;
        if self.migrating.is_some() {
            return Err(refuse(
                from,
                MsgKind::Barrier,
                "arrived while the last barrier's home moves are unfinished",
            ));
        }
        if epoch != self.barrier_epoch || self.barrier_arrived.contains(&from) {
            return Err(refuse(
                from,
                MsgKind::Barrier,
                "wrong barrier epoch or arrived twice",
            ));
        }
        if let Some((first, other)) = first_or_differs(&mut self.barrier_allocs, from, allocs) {
            return Ok(Managed::AllocMismatch { first, other });
        }
        if let Some((first, other)) = first_or_differs(&mut self.barrier_threads, from, threads) {
            return Ok(Managed::ThreadsMismatch { first, other });
        }
        self.barrier_arrived.insert(from);
        for p in notices {
            self.barrier_notices
                .entry(p)
                .and_modify(|w| {
                    if *w != Some(from) {
                        *w = None;
                    }
                })
                .or_insert(Some(from));
        }
        for p in claims {
            self.barrier_claims.insert(p, from);
        }
        if self.barrier_arrived.len() == usize::from(self.nodes) {
            let claims = std::mem::take(&mut self.barrier_claims);
            let notices: Vec<WriteNotice> = std::mem::take(&mut self.barrier_notices)
                .into_iter()
                .map(|(page, writer)| WriteNotice {
                    page,
                    writer,
                    moves: writer.is_some() && claims.get(&page).copied() == writer,
                })
                .collect();
            if notices.iter().any(|n| n.moves) {
                self.migrating = Some((self.barrier_epoch, BTreeSet::new(), BTreeSet::new()));
            }
            self.barrier_arrived.clear();
            self.barrier_allocs = None;
            self.barrier_threads = None;
            let grant = Msg::BarrierGrant {
                epoch: self.barrier_epoch,
                notices,
            };
            self.barrier_epoch += 1;
            self.broadcast(&grant, out);
        }
        Ok(Managed::Done)
    }

    /// `from` closed the pages barrier `epoch`'s grant would move and names those it vetoes.
    /// Once every node has answered, every node applies the moves no node vetoed (the grant
    /// carries the union, so every table agrees) and the barrier ends.
    pub fn on_migrated(
        &mut self,
        from: NodeId,
        epoch: Epoch,
        vetoes: Vec<PageNum>,
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        self.check_master(from, MsgKind::Migrated)?;
        let Some((e, applied, vetoed)) = &mut self.migrating else {
            return Err(refuse(from, MsgKind::Migrated, "no home moves in progress"));
        };
        if *e != epoch || !applied.insert(from) {
            return Err(refuse(
                from,
                MsgKind::Migrated,
                "wrong barrier epoch or applied twice",
            ));
        }
        vetoed.extend(vetoes);
        if applied.len() == usize::from(self.nodes) {
            let vetoed = std::mem::take(vetoed).into_iter().collect();
            self.migrating = None;
            self.broadcast(&Msg::MigrateGrant { epoch, vetoed }, out);
        }
        Ok(Managed::Done)
    }

    /// `from` reached wait `epoch` (`jia_wait`).
    pub fn on_wait(
        &mut self,
        from: NodeId,
        epoch: Epoch,
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        self.check_master(from, MsgKind::Wait)?;
        if epoch != self.wait_epoch || !self.wait_arrived.insert(from) {
            return Err(refuse(
                from,
                MsgKind::Wait,
                "wrong wait epoch or arrived twice",
            ));
        }
        if self.wait_arrived.len() == usize::from(self.nodes) {
            self.wait_arrived.clear();
            let grant = Msg::WaitGrant {
                epoch: self.wait_epoch,
            };
            self.wait_epoch += 1;
            self.broadcast(&grant, out);
        }
        Ok(Managed::Done)
    }

    /// `from` exits with its statistics (the core's counters, then the runtime's).
    pub fn on_exit(
        &mut self,
        from: NodeId,
        stats: Vec<u64>,
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        self.check_master(from, MsgKind::Exit)?;
        let runtime = stats.len().saturating_sub(Stats::COUNTERS);
        if stats.len() < Stats::COUNTERS || runtime > MAX_RUNTIME_COUNTERS {
            return Err(refuse(
                from,
                MsgKind::Exit,
                "statistics of the wrong length",
            ));
        }
        if self.exit_stats.insert(from, stats).is_some() {
            return Err(refuse(from, MsgKind::Exit, "exited twice"));
        }
        if self.exit_stats.len() < usize::from(self.nodes) {
            return Ok(Managed::Done);
        }
        let (nodes, runtime) = std::mem::take(&mut self.exit_stats)
            .into_values()
            .map(|mut c| {
                let runtime = c.split_off(Stats::COUNTERS);
                (Stats::from_counters(&c).unwrap_or_default(), runtime)
            })
            .unzip();
        self.broadcast(&Msg::ExitGrant, out);
        Ok(Managed::JobStats { nodes, runtime })
    }

    // ----- condition variables -----

    fn cv(&mut self, from: NodeId, cv: CvId, kind: MsgKind) -> Result<&mut CvMgr, ProtocolError> {
        if self.manager_of(cv.0) != self.me {
            return Err(refuse(from, kind, "condition variable not managed here"));
        }
        Ok(self.cvs.entry(cv).or_default())
    }

    /// `from` sets `cv` with the pages it wrote (in its epoch `epoch`, as a lock's release
    /// names it): every waiter is granted.
    pub fn on_set_cv(
        &mut self,
        from: NodeId,
        cv: CvId,
        (epoch, notices): (Epoch, Vec<PageNum>),
        node_epoch: Epoch,
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        let m = self.cv(from, cv, MsgKind::SetCv)?;
        m.set = true;
        m.counter += 1;
        let counter = m.counter;
        // Tagged with the setter's epoch, not this node's: a manager that has not had the last
        // barrier's grant yet would tag them one epoch old, and drop them a barrier early.
        record_notices(&mut m.notices, (notices, from), counter, epoch, node_epoch);
        for (n, seen) in std::mem::take(&mut m.waiters) {
            let grant = Msg::CvGrant {
                cv,
                counter,
                notices: notices_since(&m.notices, seen, 0, None),
            };
            out.push((n, grant));
        }
        Ok(Managed::Done)
    }

    /// `from` resets `cv`.
    pub fn on_reset_cv(&mut self, from: NodeId, cv: CvId) -> Result<Managed, ProtocolError> {
        self.cv(from, cv, MsgKind::ResetCv)?.set = false;
        Ok(Managed::Done)
    }

    /// `from` waits on `cv`, having seen its notices up to `seen`.
    pub fn on_wait_cv(
        &mut self,
        from: NodeId,
        cv: CvId,
        seen: Count,
        out: &mut Outbox,
    ) -> Result<Managed, ProtocolError> {
        let m = self.cv(from, cv, MsgKind::WaitCv)?;
        if m.waiters.iter().any(|&(n, _)| n == from) {
            return Err(refuse(from, MsgKind::WaitCv, "node already waits"));
        }
        if m.set {
            let grant = Msg::CvGrant {
                cv,
                counter: m.counter,
                notices: notices_since(&m.notices, seen, 0, None),
            };
            out.push((from, grant));
        } else {
            m.waiters.push((from, seen));
        }
        Ok(Managed::Done)
    }
}

/// Keeps the first arrival's `value` in `first`, or compares a later one's with it: the two, if
/// they differ.
fn first_or_differs<T: Copy + PartialEq>(
    first: &mut Option<(NodeId, T)>,
    from: NodeId,
    value: T,
) -> Option<((NodeId, T), (NodeId, T))> {
    match *first {
        Some(f) if f.1 != value => Some((f, (from, value))),
        Some(_) => None,
        None => {
            *first = Some((from, value));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations whose digest is `digest` (one call of one page).
    fn allocs(digest: u64) -> Allocs {
        Allocs {
            digest,
            calls: 1,
            pages: 1,
        }
    }

    #[test]
    fn a_lock_goes_to_the_waiters_in_order_with_the_notices_they_have_not_seen() {
        let mut m = Managers::new(NodeId(1), 3);
        let l = LockId(4); // 4 % 3 = 1: managed here
        let mut out = Outbox::new();
        m.on_acquire(NodeId(0), l, (0, 0, true), &mut out).unwrap();
        m.on_acquire(NodeId(2), l, (0, 0, false), &mut out).unwrap();
        assert_eq!(
            out.iter()
                .map(|(to, m)| (*to, m.kind()))
                .collect::<Vec<_>>(),
            vec![
                (NodeId(0), MsgKind::AcquireGrant),
                (NodeId(0), MsgKind::LockWanted)
            ],
            "one grant, to the first asker, then word that another node waits: {out:?}"
        );
        out.clear();
        m.on_release(NodeId(0), l, 0, (vec![PageNum(7)], vec![]), 0, &mut out)
            .unwrap();
        assert_eq!(
            out,
            vec![(
                NodeId(2),
                Msg::AcquireGrant {
                    lock: l,
                    counter: 1,
                    notices: vec![PageNum(7)],
                    earlier: vec![],
                }
            )]
        );
        assert!(
            m.on_release(NodeId(0), l, 0, (vec![], vec![]), 0, &mut out)
                .is_err()
        );
        assert!(
            m.on_acquire(NodeId(0), LockId(3), (0, 0, false), &mut out)
                .is_err()
        );
    }

    #[test]
    fn a_barrier_grants_everyone_once_all_arrived_and_catches_mismatched_allocations() {
        let mut m = Managers::new(NodeId(0), 2);
        let mut out = Outbox::new();
        m.on_barrier(
            NodeId(0),
            0,
            (allocs(9), 1),
            vec![PageNum(1)],
            vec![],
            &mut out,
        )
        .unwrap();
        assert!(out.is_empty());
        m.on_barrier(
            NodeId(1),
            0,
            (allocs(9), 1),
            vec![PageNum(1), PageNum(2)],
            vec![],
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 2, "a grant to each node");
        let Msg::BarrierGrant { notices, .. } = &out[0].1 else {
            panic!("{out:?}")
        };
        // Page 1 written by both: no single writer.
        assert_eq!(notices[0].writer, None);
        assert_eq!(notices[1].writer, Some(NodeId(1)));
        assert!(notices.iter().all(|n| !n.moves), "nothing claimed");
        out.clear();
        m.on_barrier(NodeId(0), 1, (allocs(9), 1), vec![], vec![], &mut out)
            .unwrap();
        assert_eq!(
            m.on_barrier(NodeId(1), 1, (allocs(10), 1), vec![], vec![], &mut out),
            Ok(Managed::AllocMismatch {
                first: (NodeId(0), allocs(9)),
                other: (NodeId(1), allocs(10)),
            })
        );
    }

    #[test]
    fn a_barrier_catches_nodes_that_give_different_thread_counts() {
        let mut m = Managers::new(NodeId(0), 3);
        let mut out = Outbox::new();
        m.on_barrier(NodeId(1), 0, (allocs(9), 2), vec![], vec![], &mut out)
            .unwrap();
        m.on_barrier(NodeId(0), 0, (allocs(9), 2), vec![], vec![], &mut out)
            .unwrap();
        assert_eq!(
            m.on_barrier(NodeId(2), 0, (allocs(9), 3), vec![], vec![], &mut out),
            Ok(Managed::ThreadsMismatch {
                first: (NodeId(1), 2),
                other: (NodeId(2), 3)
            })
        );
        assert!(out.is_empty(), "no grant for a barrier that failed");
    }

    #[test]
    fn a_page_moves_only_to_its_only_writer_that_claimed_it_unless_a_node_vetoes_it() {
        let mut m = Managers::new(NodeId(0), 2);
        let mut out = Outbox::new();
        // Page 1: node 1 alone wrote it and claims it. Page 2: both wrote it, node 1 claims it.
        // Page 3: node 0 alone wrote it and does not claim it (its home, or no copy).
        let (p1, p2, p3) = (PageNum(1), PageNum(2), PageNum(3));
        m.on_barrier(NodeId(0), 0, (allocs(9), 1), vec![p2, p3], vec![], &mut out)
            .unwrap();
        m.on_barrier(
            NodeId(1),
            0,
            (allocs(9), 1),
            vec![p1, p2],
            vec![p1, p2],
            &mut out,
        )
        .unwrap();
        let Msg::BarrierGrant { notices, .. } = &out[0].1 else {
            panic!("{out:?}")
        };
        let moves: Vec<(PageNum, bool)> = notices.iter().map(|n| (n.page, n.moves)).collect();
        assert_eq!(moves, vec![(p1, true), (p2, false), (p3, false)]);
        out.clear();
        // No next barrier until every node has applied the moves.
        assert!(
            m.on_barrier(NodeId(0), 1, (allocs(9), 1), vec![], vec![], &mut out)
                .is_err()
        );
        m.on_migrated(NodeId(1), 0, vec![p1], &mut out).unwrap();
        assert!(out.is_empty());
        assert!(
            m.on_migrated(NodeId(1), 0, vec![], &mut out).is_err(),
            "twice"
        );
        m.on_migrated(NodeId(0), 0, vec![p1, p3], &mut out).unwrap();
        assert_eq!(out.len(), 2, "a grant to each node: {out:?}");
        // Every node's vetoes, once each.
        assert_eq!(
            out[0].1,
            Msg::MigrateGrant {
                epoch: 0,
                vetoed: vec![p1, p3]
            }
        );
        out.clear();
        assert!(
            m.on_migrated(NodeId(0), 0, vec![], &mut out).is_err(),
            "over"
        );
    }

    /// A lock's release counter passes 2^32 (a hot lock's 42 minutes on 2 CPUs): an acquirer
    /// that last saw it before is still told of the pages released after (with 32 bits the
    /// counter wrapped to 0 and page 7 was not among the notices: stale reads).
    #[test]
    fn a_lock_counter_past_32_bits_still_hands_on_its_notices() {
        let mut m = Managers::new(NodeId(1), 3);
        let l = LockId(4);
        let mut out = Outbox::new();
        m.on_acquire(NodeId(2), l, (0, 0, false), &mut out).unwrap();
        m.locks.get_mut(&l).unwrap().counter = Count::from(u32::MAX) - 1;
        m.on_release(NodeId(2), l, 0, (vec![], vec![]), 0, &mut out)
            .unwrap();
        let last_seen = Count::from(u32::MAX);
        m.on_acquire(NodeId(0), l, (last_seen - 1, 0, false), &mut out)
            .unwrap();
        m.on_release(NodeId(0), l, 0, (vec![PageNum(7)], vec![]), 0, &mut out)
            .unwrap();
        out.clear();
        m.on_acquire(NodeId(2), l, (last_seen, 0, false), &mut out)
            .unwrap();
        let Msg::AcquireGrant {
            notices, counter, ..
        } = &out[0].1
        else {
            panic!("{out:?}")
        };
        assert_eq!(*counter, last_seen + 1);
        assert_eq!(notices, &[PageNum(7)]);
    }
}

#[cfg(test)]
mod atomic_record_tests {
    use super::*;
    use crate::sim::Rng;

    /// Every record has exactly its (counter, page, writer) in `by_counter`, and nothing else.
    fn check_index(m: &AtomicMgr) {
        let mut expect = BTreeSet::new();
        for (&page, writers) in &m.notices {
            assert!(!writers.is_empty());
            let mut seen = BTreeSet::new();
            for r in writers {
                assert!(seen.insert(r.writer), "two records of one writer");
                expect.insert((r.counter, page, r.writer));
            }
        }
        assert_eq!(m.by_counter, expect);
    }

    #[test]
    fn by_counter_matches_a_scan_of_the_records() {
        for seed in 0..3000u64 {
            let mut rng = Rng::new(seed);
            let mut m = Managers::new(NodeId(0), 4);
            let mut home_epoch = 0u64;
            for _ in 0..rng.below(60) {
                if rng.chance(10) {
                    home_epoch += 1;
                    m.forget_before(home_epoch.saturating_sub(1));
                    check_index(&m.atomics);
                    continue;
                }
                let from = NodeId(rng.below(4) as u16);
                let epoch = home_epoch.saturating_sub(1) + rng.below(3);
                let w = |rng: &mut Rng| {
                    (0..rng.below(4))
                        .map(|_| (PageNum(rng.below(4) as u32), rng.below(8)))
                        .collect::<Vec<_>>()
                };
                let notices = w(&mut rng);
                let earlier = w(&mut rng);
                let passed_on: Vec<WriteId> = (0..rng.below(4))
                    .map(|_| WriteId {
                        page: PageNum(rng.below(4) as u32),
                        writer: NodeId(rng.below(4) as u16),
                        interval: rng.below(8),
                        epoch: home_epoch.saturating_sub(2) + rng.below(4),
                    })
                    .collect();
                m.on_atomic_release(from, epoch, (notices, earlier), passed_on, home_epoch);
                check_index(&m.atomics);
                // The index's answer against a scan of every record.
                let seen = rng.below(m.atomics.counter + 1);
                let acq_epoch = home_epoch.saturating_sub(1) + rng.below(2);
                let (_, got) = m.atomic_notices(seen, acq_epoch, true);
                let mut want: Vec<WriteId> = m
                    .atomics
                    .notices
                    .iter()
                    .flat_map(|(&page, ws)| ws.iter().map(move |r| (page, *r)))
                    .filter(|(_, r)| r.counter > seen && r.epoch >= acq_epoch.saturating_sub(1))
                    .map(|(page, r)| WriteId {
                        page,
                        writer: r.writer,
                        interval: r.interval,
                        epoch: r.epoch,
                    })
                    .collect();
                let mut got = got;
                let key = |n: &WriteId| (n.page, n.writer);
                got.sort_by_key(key);
                want.sort_by_key(key);
                assert_eq!(got, want, "seed {seed}");
            }
        }
    }
}
