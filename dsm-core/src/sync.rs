//! The synchronisation side of the protocol: locks, barriers, waits, condition variables and exit,
//! both as seen by the node that calls them and by the node that manages them.
//!
//! Coherence rides on synchronisation (home-based lazy release consistency):
//! - A *release* (unlock, setcv, barrier, exit) downgrades the pages written in the interval,
//!   sends their diffs to their homes and waits for every acknowledgement; only then does the
//!   release message leave, carrying write notices (the pages written since this node last
//!   released the same lock).
//! - An *acquire* (lock grant, cv grant, barrier grant) carries the write notices the acquirer has
//!   not seen; it invalidates those pages, so its next touch fetches them from their homes, which
//!   already hold the released writes.
//!
//! Lock `l` and condition variable `c` are managed by node `l % nodes` and `c % nodes`; barriers,
//! waits and exit by node 0 ([`crate::manager`]: the managers are a structure of their own). A
//! lock costs three messages (acquire, grant, release) whatever the job size; a barrier costs
//! 2(N-1). This module is the caller's side.

use crate::types::{Count, Epoch};
use std::collections::BTreeMap;

use crate::error::{JobError, ProtocolError, UsageError};
use crate::local::{AfterFlush, Collective, CollectiveKind};
use crate::memory::PageMemory;
use crate::msg::{Msg, MsgKind, WriteNotice};
use crate::node::Node;
use crate::types::{CvId, GlobalAddr, LockId, MAX_CVS, MAX_LOCKS, NodeId, PageNum, Time, WaiterId};

/// The pages of `written` (page -> interval of its last write) written after `interval`, with
/// that interval.
fn last_writes_after(
    written: &BTreeMap<PageNum, Count>,
    interval: Count,
) -> impl Iterator<Item = (PageNum, Count)> + '_ {
    written
        .iter()
        .filter(move |&(_, &s)| s > interval)
        .map(|(&p, &s)| (p, s))
}

/// The pages of `written` (page -> interval of its last write) written after `interval`.
pub(crate) fn written_after(written: &BTreeMap<PageNum, Count>, interval: Count) -> Vec<PageNum> {
    last_writes_after(written, interval)
        .map(|(p, _)| p)
        .collect()
}

/// [`written_after`], each page with the interval of its last write (the identity of its
/// writes an atomic release names: see `atomics.rs`, "Chains").
pub(crate) fn writes_after(
    written: &BTreeMap<PageNum, Count>,
    interval: Count,
) -> Vec<(PageNum, Count)> {
    last_writes_after(written, interval).collect()
}

impl<M: PageMemory> Node<M> {
    // ----- locks, the caller's side -----

    /// How many application threads of this node have used the DSM: with more than one, its
    /// lock requests ask to be told when another node waits (cohort locking).
    pub fn note_threads(&mut self, threads: usize) {
        self.sync.threads = threads;
    }

    /// The locks a thread of this node holds now.
    pub fn locks_held(&self) -> Vec<LockId> {
        (0..MAX_LOCKS)
            .filter(|&l| self.sync.locks[usize::from(l)].holder.is_some())
            .map(LockId)
            .collect()
    }

    /// The waiter asks for `lock`; it is resumed when the lock is its own.
    pub fn acquire(&mut self, now: Time, lock: LockId, waiter: WaiterId) -> Result<(), UsageError> {
        Self::check_lock(lock)?;
        let l = &mut self.sync.locks[usize::from(lock.0)];
        let mine = |w: WaiterId| w == waiter;
        if l.holder.is_some_and(mine)
            || l.acquiring.is_some_and(|(w, _)| mine(w))
            || l.queue.iter().any(|&(w, _)| mine(w))
        {
            return Err(UsageError::LockAlreadyHeld(lock));
        }
        if l.holder.is_some() || l.acquiring.is_some() || l.releasing {
            l.queue.push_back((waiter, now));
        } else {
            self.start_acquire(lock, waiter, now);
        }
        self.drain_loopback(now);
        Ok(())
    }

    fn start_acquire(&mut self, lock: LockId, waiter: WaiterId, since: Time) {
        let l = &mut self.sync.locks[usize::from(lock.0)];
        l.acquiring = Some((waiter, since));
        let seen = l.seen;
        let manager = self.manager_of(lock.0);
        let epoch = self.epoch;
        // Told when another node waits only if this node's threads may hand the lock on.
        let cohort = self.cfg.lock_handoffs > 0 && self.sync.threads > 1;
        self.send(
            manager,
            Msg::Acquire {
                lock,
                seen,
                epoch,
                cohort,
            },
        );
    }

    /// The waiter releases `lock`: its writes go home, then the lock goes back to its manager.
    /// The waiter is resumed when the release is complete.
    pub fn release(&mut self, now: Time, lock: LockId, waiter: WaiterId) -> Result<(), UsageError> {
        Self::check_lock(lock)?;
        let i = usize::from(lock.0);
        if self.sync.locks[i].holder != Some(waiter) {
            return Err(UsageError::LockNotHeld(lock));
        }
        // Cohort locking: another thread of this node waits for the lock; it takes it here, with
        // no message and no flush (the threads share this node's memory): as long as no other
        // node waits, and `lock_handoffs` times more once one does (its manager says so); then
        // the lock goes back to its manager, so the waiting node gets it. The writes of every
        // local holder go out at that release (its notices cover every interval since the last
        // one).
        let limit = self.cfg.lock_handoffs;
        let l = &mut self.sync.locks[i];
        if limit > 0 && (!l.wanted || l.handoffs < limit) {
            if let Some((next, since)) = l.queue.pop_front() {
                l.handoffs += u32::from(l.wanted);
                l.holder = Some(next);
                self.stats.lock_acquires += 1;
                self.stats.lock_local_handoffs += 1;
                self.stats.lock_wait_ns += now.since(since);
                self.resume(waiter);
                self.resume(next);
                return Ok(());
            }
        }
        l.handoffs = 0;
        l.wanted = false;
        self.sync.locks[i].holder = None;
        self.sync.locks[i].releasing = true;
        self.flush_writes(now, false);
        let sent = self.sync.locks[i].sent;
        let notices = written_after(&self.written, sent);
        let earlier = self.barrier_written_after(sent);
        self.sync.locks[i].sent = self.interval;
        self.interval += 1;
        self.flush.after_flush.push_back(AfterFlush::Release {
            lock,
            waiter,
            notices,
            earlier,
            through: self.flush.next_diff_id,
        });
        self.complete_flushes();
        self.drain_loopback(now);
        Ok(())
    }

    /// Pages written in intervals after `interval`.
    /// (During a barrier, those it took for its notices too: see `SyncState::barrier_written`.)
    fn notices_after(&self, interval: Count) -> Vec<PageNum> {
        let mut pages = written_after(&self.written, interval);
        pages.extend(self.barrier_written_after(interval));
        pages.sort_unstable();
        pages.dedup();
        pages
    }

    /// The pages the last barriers took for their notices (see `SyncState::barrier_written`)
    /// written in intervals after `interval`.
    pub(crate) fn barrier_written_after(&self, interval: Count) -> Vec<PageNum> {
        let mut pages: Vec<PageNum> = [
            &self.sync.barrier_written,
            &self.sync.barrier_written_before,
        ]
        .into_iter()
        .flatten()
        .flat_map(|m| last_writes_after(m, interval).map(|(p, _)| p))
        .collect();
        pages.sort_unstable();
        pages.dedup();
        pages
    }

    /// [`Node::barrier_written_after`], each page with the interval of its last write.
    pub(crate) fn barrier_writes_after(&self, interval: Count) -> Vec<(PageNum, Count)> {
        let mut last: BTreeMap<PageNum, Count> = BTreeMap::new();
        for m in [
            &self.sync.barrier_written,
            &self.sync.barrier_written_before,
        ]
        .into_iter()
        .flatten()
        {
            for (p, s) in last_writes_after(m, interval) {
                let at = last.entry(p).or_insert(s);
                *at = (*at).max(s);
            }
        }
        last.into_iter().collect()
    }

    /// The epoch a release made now names its writes with: between this node's barrier call and
    /// the grant (another thread is in the barrier), writes are no longer in the barrier's
    /// notices: they belong to the next epoch, and the manager must keep them past this barrier
    /// (it drops notices of epochs the barrier has covered). An atomic's release sends the two
    /// apart (`Msg::Atomic::in_barrier`): its acquire half asks from the node's own epoch.
    fn release_epoch(&self) -> Epoch {
        self.epoch + Epoch::from(self.sync.awaiting_grant)
    }

    /// Runs the releases whose diffs are all acknowledged, in order.
    pub(crate) fn complete_flushes(&mut self) {
        while let Some(front) = self.flush.after_flush.front() {
            if self
                .flush
                .diffs_out
                .range(..front.through())
                .next()
                .is_some()
            {
                break;
            }
            let Some(done) = self.flush.after_flush.pop_front() else {
                break;
            };
            match done {
                AfterFlush::Release {
                    lock,
                    waiter,
                    notices,
                    earlier,
                    ..
                } => {
                    let manager = self.manager_of(lock.0);
                    let epoch = self.release_epoch();
                    self.send(
                        manager,
                        Msg::Release {
                            lock,
                            epoch,
                            notices,
                            earlier,
                        },
                    );
                    let l = &mut self.sync.locks[usize::from(lock.0)];
                    l.releasing = false;
                    let next = l.queue.pop_front();
                    self.resume(waiter);
                    if let Some((w, since)) = next {
                        self.start_acquire(lock, w, since);
                    }
                }
                AfterFlush::Barrier {
                    threads,
                    notices,
                    claims,
                    ..
                } => {
                    let msg = Msg::Barrier {
                        epoch: self.epoch,
                        allocs: self.table.allocs(),
                        threads,
                        notices,
                        claims,
                    };
                    self.send(NodeId(0), msg);
                }
                AfterFlush::SetCv {
                    cv,
                    waiter,
                    notices,
                    ..
                } => {
                    let manager = self.manager_of(cv.0);
                    let epoch = self.release_epoch();
                    self.send(manager, Msg::SetCv { cv, epoch, notices });
                    self.resume(waiter);
                }
                AfterFlush::Atomic { home, mut msg, .. } => {
                    // The epoch as it is now the release leaves (see `Msg::Atomic::in_barrier`).
                    if let Msg::Atomic {
                        epoch, in_barrier, ..
                    } = &mut msg
                    {
                        *epoch = self.epoch;
                        *in_barrier = self.sync.awaiting_grant;
                    }
                    self.send(home, msg);
                }
                AfterFlush::Exit { .. } => {
                    let (core, runtime) = match &self.frozen_stats {
                        Some((s, r)) => (s, r),
                        None => (&self.stats, &self.runtime_counters),
                    };
                    let mut stats = core.to_counters();
                    stats.extend_from_slice(runtime);
                    self.send(NodeId(0), Msg::Exit { stats });
                }
            }
        }
    }

    pub(crate) fn on_acquire_grant(
        &mut self,
        now: Time,
        from: NodeId,
        lock: LockId,
        counter: Count,
        (notices, earlier): (Vec<PageNum>, Vec<PageNum>),
    ) -> Result<(), ProtocolError> {
        let i = usize::from(lock.0);
        if from != self.manager_of(lock.0) || self.sync.locks[i].acquiring.is_none() {
            return Err(ProtocolError {
                from,
                kind: MsgKind::AcquireGrant,
                why: "lock was not requested from that node",
            });
        }
        // The pages of the epoch before this node's are relayed only: its barrier invalidated
        // them.
        let relayed: Vec<PageNum> = notices.iter().chain(&earlier).copied().collect();
        self.relay_through_atomics(&relayed);
        self.invalidate_notified(now, Some(from), notices);
        let l = &mut self.sync.locks[i];
        let Some((waiter, since)) = l.acquiring.take() else {
            return Ok(());
        };
        l.holder = Some(waiter);
        l.seen = counter;
        l.wanted = false;
        l.handoffs = 0;
        self.stats.lock_acquires += 1;
        self.stats.lock_wait_ns += now.since(since);
        self.resume(waiter);
        Ok(())
    }

    /// The manager of `lock` says another node waits for it (`Msg::LockWanted`): if a thread
    /// of this node holds it, the lock passes between this node's threads only a bounded number
    /// of times more. (One that came after this node released the lock is stale: ignored.)
    pub(crate) fn on_lock_wanted(
        &mut self,
        from: NodeId,
        lock: LockId,
    ) -> Result<(), ProtocolError> {
        if from != self.manager_of(lock.0) {
            return Err(ProtocolError {
                from,
                kind: MsgKind::LockWanted,
                why: "lock not managed by that node",
            });
        }
        let l = &mut self.sync.locks[usize::from(lock.0)];
        if l.holder.is_some() && !l.wanted {
            l.wanted = true;
            l.handoffs = 0;
        }
        Ok(())
    }

    // ----- barrier, wait, exit: the caller's side -----

    fn start_collective(
        &mut self,
        now: Time,
        waiter: WaiterId,
        kind: CollectiveKind,
    ) -> Result<(), UsageError> {
        if self.sync.collective.is_some() {
            return Err(UsageError::CollectiveBusy);
        }
        self.sync.collective = Some(Collective {
            waiter,
            since: now,
            kind,
        });
        Ok(())
    }

    /// A barrier with coherence (`jia_barrier`): every node's writes before it are visible to
    /// every node after it.
    pub fn barrier(&mut self, now: Time, waiter: WaiterId) -> Result<(), UsageError> {
        self.barrier_of_threads(now, waiter, 1)
    }

    /// The barrier of `threads` threads of each node (`jia_barrier_threads`; the node's threads
    /// have met already, and this is their node's arrival): the manager checks that every node
    /// gave the same count.
    pub fn barrier_of_threads(
        &mut self,
        now: Time,
        waiter: WaiterId,
        threads: u16,
    ) -> Result<(), UsageError> {
        self.start_collective(now, waiter, CollectiveKind::Barrier)?;
        self.refuse_early_requests();
        self.flush_writes(now, true);
        let written = std::mem::take(&mut self.written);
        let notices: Vec<PageNum> = written.keys().copied().collect();
        let claims = self.claim_homes(&notices);
        // The locks' and condition variables' records of what they carried are reset at the
        // grant, when these pages are invalidated everywhere.
        self.sync.barrier_written_before = self.sync.barrier_written.replace(written);
        self.sync.awaiting_grant = true;
        self.interval += 1;
        self.flush.after_flush.push_back(AfterFlush::Barrier {
            threads,
            notices,
            claims,
            through: self.flush.next_diff_id,
        });
        self.complete_flushes();
        self.drain_loopback(now);
        Ok(())
    }

    /// A barrier without coherence (`jia_wait`).
    pub fn wait(&mut self, now: Time, waiter: WaiterId) -> Result<(), UsageError> {
        self.start_collective(now, waiter, CollectiveKind::Wait)?;
        self.send(
            NodeId(0),
            Msg::Wait {
                epoch: self.sync.wait_epoch,
            },
        );
        self.drain_loopback(now);
        Ok(())
    }

    /// Leave the job (`jia_exit`): flush, then wait for every node. At node 0 an
    /// [`crate::Effect::JobStats`] with every node's statistics comes before the resume.
    pub fn exit(&mut self, now: Time, waiter: WaiterId) -> Result<(), UsageError> {
        self.start_collective(now, waiter, CollectiveKind::Exit)?;
        self.refuse_early_requests();
        self.flush_writes(now, false);
        self.flush.after_flush.push_back(AfterFlush::Exit {
            through: self.flush.next_diff_id,
        });
        self.complete_flushes();
        self.drain_loopback(now);
        Ok(())
    }

    /// In a barrier or exit, requests held for pages not allocated here can never be answered
    /// (this node makes no allocation before the others arrive, and they do not arrive: the
    /// requester waits in its fault): the nodes made different allocation calls. Ends the job
    /// naming the requester and its page, rather than hang.
    pub(crate) fn refuse_early_requests(&mut self) {
        let allocated = self.table.len();
        // A request or an atomic sent after a barrier this node has not left yet waits for
        // its allocation after it.
        let passed = self.collectives_passed();
        let request = self
            .early_requests
            .iter()
            .find_map(|(from, _, pages, sent_after)| {
                let p = pages.iter().find(|p| p.index() >= allocated)?;
                (*sent_after <= passed).then_some((*from, *p))
            });
        let atomic = self.early_atomics.iter().find_map(|(from, msg)| match msg {
            Msg::Atomic {
                addr,
                passed: sent_after,
                ..
            } if *sent_after <= passed => Some((*from, GlobalAddr(*addr).page())),
            _ => None,
        });
        let Some((from, page)) = request.or(atomic) else {
            return;
        };
        let reached = match self.sync.collective.as_ref().map(|c| c.kind) {
            Some(CollectiveKind::Exit) => "jia_exit",
            Some(CollectiveKind::Wait) => "jia_wait",
            _ => "jia_barrier",
        };
        let error = JobError::AllocMissing {
            node: from,
            page,
            here: self.cfg.node,
            pages: self.table.len() as u64,
            calls: self.table.allocations() as u64,
            reached,
        };
        self.broadcast_error(&error.to_string());
        self.abort(error);
    }

    fn finish_collective(
        &mut self,
        now: Time,
        from: NodeId,
        kind: CollectiveKind,
        msg: MsgKind,
    ) -> Result<(), ProtocolError> {
        match &self.sync.collective {
            Some(c) if c.kind == kind && from == NodeId(0) => {}
            _ => {
                return Err(ProtocolError {
                    from,
                    kind: msg,
                    why: "no such collective in progress",
                });
            }
        }
        let Some(c) = self.sync.collective.take() else {
            return Ok(());
        };
        if kind == CollectiveKind::Barrier {
            self.stats.barriers += 1;
            self.stats.barrier_wait_ns += now.since(c.since);
        }
        self.resume(c.waiter);
        Ok(())
    }

    pub(crate) fn on_barrier_grant(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
        notices: Vec<WriteNotice>,
    ) -> Result<(), ProtocolError> {
        // Checked before anything changes: a refused grant must leave the barrier as it was,
        // for node 0's own grant to end it.
        if from != NodeId(0) {
            return Err(ProtocolError {
                from,
                kind: MsgKind::BarrierGrant,
                why: "a barrier grant comes from node 0 only",
            });
        }
        if epoch != self.epoch
            || !self
                .sync
                .collective
                .as_ref()
                .is_some_and(|c| c.kind == CollectiveKind::Barrier)
        {
            return Err(ProtocolError {
                from,
                kind: MsgKind::BarrierGrant,
                why: "not in that barrier",
            });
        }
        if notices
            .iter()
            .any(|n| n.writer.is_some_and(|w| w.0 >= self.cfg.nodes))
        {
            return Err(ProtocolError {
                from,
                kind: MsgKind::BarrierGrant,
                why: "a notice names a writer outside the job",
            });
        }
        let me = self.cfg.node;
        // The barrier's notices reach every node with this grant: the records of what each
        // lock and condition variable carried start again. Every node has had the barrier
        // before's grant (each called this barrier after it).
        self.sync.awaiting_grant = false;
        self.sync.barrier_written_before = None;
        for l in &mut self.sync.locks {
            l.sent = 0;
        }
        for c in &mut self.sync.cvs {
            c.sent = 0;
        }
        // Moves are proposed here and decided by a second round: every node closes the pages
        // and vetoes those another of its threads wrote during the barrier (see
        // `close_moving_pages`).
        let proposed: Vec<WriteNotice> = notices
            .iter()
            .filter(|n| {
                n.moves
                    && n.writer.is_some_and(|w| {
                        self.table.get(n.page.index()).is_some_and(|e| e.home != w)
                    })
            })
            .copied()
            .collect();
        let vetoes = if proposed.is_empty() {
            // What the vetoes would be checked against starts again at every grant.
            self.sync.diffed_in_barrier.clear();
            self.sync.diffed_here.clear();
            self.claims_overtaken.clear();
            self.claims.clear();
            Vec::new()
        } else {
            self.close_moving_pages(&proposed)
        };
        let stale: Vec<PageNum> = notices
            .into_iter()
            .filter(|n| n.writer != Some(me))
            .map(|n| n.page)
            .collect();
        // Copies this node was using are fetched again right away, while every node is at the
        // barrier's edge with its service thread awake, rather than one fault at a time once
        // the homes compute again (SOR's boundary rows, LU's panels).
        let refetch = self.copies_in_use(&stale);
        self.forget_dropped();
        self.invalidate(now, stale);
        self.epoch += 1;
        // Kept one barrier longer: see `manager::record_notices`.
        self.mgr.forget_before(self.epoch - 1);
        self.atomics.acquired.forget_before(self.epoch);
        let migrating = !proposed.is_empty();
        if migrating {
            self.sync.migrating = Some(epoch);
            self.sync.proposed_moves = proposed;
            self.send(NodeId(0), Msg::Migrated { epoch, vetoes });
        }
        if !refetch.is_empty() {
            self.refetch(now, refetch);
        }
        if migrating {
            return Ok(());
        }
        self.finish_collective(now, from, CollectiveKind::Barrier, MsgKind::BarrierGrant)
    }

    /// MIGRGRANT: every node answered the moves of the barrier this node is in. The moves no
    /// node vetoed are applied (every node applies the same, in the same order, so the tables
    /// agree), the closed pages open, and the barrier ends.
    pub(crate) fn on_migrate_grant(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
        vetoed: Vec<PageNum>,
    ) -> Result<(), ProtocolError> {
        if self.sync.migrating != Some(epoch) || from != NodeId(0) {
            return Err(ProtocolError {
                from,
                kind: MsgKind::MigrateGrant,
                why: "no home moves of that barrier in progress",
            });
        }
        self.sync.migrating = None;
        self.apply_decided_moves(now, &vetoed)?;
        self.finish_collective(now, from, CollectiveKind::Barrier, MsgKind::MigrateGrant)
    }

    pub(crate) fn on_wait_grant(
        &mut self,
        now: Time,
        from: NodeId,
        epoch: Epoch,
    ) -> Result<(), ProtocolError> {
        if epoch != self.sync.wait_epoch {
            return Err(ProtocolError {
                from,
                kind: MsgKind::WaitGrant,
                why: "not in that wait",
            });
        }
        self.finish_collective(now, from, CollectiveKind::Wait, MsgKind::WaitGrant)?;
        self.sync.wait_epoch += 1;
        self.stats.waits += 1;
        Ok(())
    }

    pub(crate) fn on_exit_grant(&mut self, now: Time, from: NodeId) -> Result<(), ProtocolError> {
        self.finish_collective(now, from, CollectiveKind::Exit, MsgKind::ExitGrant)
    }

    // ----- condition variables -----

    fn check_cv(cv: CvId) -> Result<(), UsageError> {
        if cv.0 >= MAX_CVS {
            Err(UsageError::BadCv(cv.0))
        } else {
            Ok(())
        }
    }

    /// Sets `cv` and wakes its waiters; a release: writes before it are visible to them.
    pub fn setcv(&mut self, now: Time, cv: CvId, waiter: WaiterId) -> Result<(), UsageError> {
        Self::check_cv(cv)?;
        self.flush_writes(now, false);
        let c = usize::from(cv.0);
        let notices = self.notices_after(self.sync.cvs[c].sent);
        self.sync.cvs[c].sent = self.interval;
        self.interval += 1;
        self.flush.after_flush.push_back(AfterFlush::SetCv {
            cv,
            waiter,
            notices,
            through: self.flush.next_diff_id,
        });
        self.complete_flushes();
        self.drain_loopback(now);
        Ok(())
    }

    /// Clears `cv`; later waiters block until it is set again.
    pub fn resetcv(&mut self, now: Time, cv: CvId, waiter: WaiterId) -> Result<(), UsageError> {
        Self::check_cv(cv)?;
        let manager = self.manager_of(cv.0);
        self.send(manager, Msg::ResetCv { cv });
        self.resume(waiter);
        self.drain_loopback(now);
        Ok(())
    }

    /// Waits until `cv` is set; an acquire: sees the writes before the set.
    pub fn waitcv(&mut self, now: Time, cv: CvId, waiter: WaiterId) -> Result<(), UsageError> {
        Self::check_cv(cv)?;
        let c = &mut self.sync.cvs[usize::from(cv.0)];
        c.waiting.push(waiter);
        if c.waiting.len() == 1 {
            let seen = c.seen;
            let manager = self.manager_of(cv.0);
            self.send(manager, Msg::WaitCv { cv, seen });
        }
        self.drain_loopback(now);
        Ok(())
    }

    pub(crate) fn on_cv_grant(
        &mut self,
        now: Time,
        from: NodeId,
        cv: CvId,
        counter: Count,
        notices: Vec<PageNum>,
    ) -> Result<(), ProtocolError> {
        let c = usize::from(cv.0);
        if from != self.manager_of(cv.0) || self.sync.cvs[c].waiting.is_empty() {
            return Err(ProtocolError {
                from,
                kind: MsgKind::CvGrant,
                why: "no wait on that variable",
            });
        }
        self.relay_through_atomics(&notices);
        self.invalidate_notified(now, Some(from), notices);
        self.sync.cvs[c].seen = counter;
        for w in std::mem::take(&mut self.sync.cvs[c].waiting) {
            self.stats.cv_waits += 1;
            self.resume(w);
        }
        Ok(())
    }
}
