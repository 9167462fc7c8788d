//! Atomic operations on words of shared memory, between nodes.
//!
//! Every atomic operation on a word is applied at the word's home, in the order the home
//! receives them: one total order per word, what C11 asks of atomics (and `seq_cst`'s single
//! order too, since each operation's answer comes back before its thread goes on). The
//! operation travels as [`Msg::Atomic`], to this node itself when it is the home, and its answer
//! ([`Msg::AtomicGrant`]) carries the value before.
//!
//! Ordering rides on the words as on a lock: the atomic words of a home are one
//! synchronisation object managed by that home (`Managers::on_atomic_release`). An operation
//! with release semantics is a release: the writes before it go home first (diffs
//! acknowledged), and it carries write notices of the pages written since this node last
//! released through a word of the same home. One with acquire semantics is an acquire: its
//! answer carries the notices released through the home's words that this node has not seen,
//! and those pages are invalidated before its thread goes on. A relaxed operation carries
//! neither. So an acquire that reads the value a release wrote sees the writes before that
//! release, as a lock holder sees the writes of the last holder (and, through the counter, of
//! every earlier release through the home's words). One record per home, not per word: an
//! acquire may invalidate pages released through another word (never too few), and what a
//! node and a home keep does not grow with the words used (a histogram's bins).
//!
//! Chains: C11's happens-before is transitive, so a release passes on, besides its node's own
//! writes, the writes of others that its node's atomic acquires made it see: node 1 that
//! acquires node 0's release through X and then releases through Y (of another home) makes
//! node 0's writes visible to Y's acquirers. Each notice names its write (page, writer, the
//! interval of the writer's last write to the page, epoch: [`crate::WriteId`]; the same
//! through every home); an acquire invalidates and learns only
//! writes it does not know (not its own, not one it learned before: `Acquired`), and a release
//! passes on to a home only those learned since the last it passed there. A write passed on
//! comes back to its writer and to nodes that know it, and stops there (passing on pages
//! without their writers' identities made notices circulate for ever). A lock's or condition
//! variable's grant is passed on as this node's own writes (`relay_through_atomics`); an unlock
//! stays scope consistency and passes on its node's own writes only.
//!
//! The word's own page: the home writes the new value in place (a home write, recorded as
//! such: a barrier's notices name the page). The node that asked drops its copy of the page if
//! that copy does not hold the value the operation left, so its own plain reads after the
//! operation see it (a copy on its way takes it as it is installed, where it is older: see
//! `on_page_grant`), and counts the page as written by it in its interval, so its later
//! releases name the page and a node ordered after them drops its copy too. Pages holding
//! atomic words never move home (home migration skips them): a copy marked written that way is
//! not the page's last bytes.
//!
//! Combining: a fetch-add (or fetch-sub) of a thread of this node on a word that already has a
//! fetch-add of this node on its way, with the same width and order, waits for that one's
//! answer; then every fetch-add that waited goes as one operation adding their sum, and each
//! thread's answer is the value before plus the adds of those ahead of it, as if the adds had
//! been applied one after the other at the home (they are: nothing comes between them). The
//! threads of a node hammering one counter (a work queue's head) so cost the home one operation
//! per round trip, not one per thread. A combined operation is a release if its adds are (the
//! node's writes go home first, naming the pages of all of them) and an acquire if they are.

use crate::error::{ProtocolError, UsageError};
use crate::local::{AfterFlush, AtomicOut, Combined};
use crate::memory::PageMemory;
use crate::msg::{Msg, MsgKind, WriteId};
use crate::node::Node;
use crate::sync::writes_after;
use crate::table::{AtomicValue, Frame};
use crate::types::{
    AtomicOp, AtomicOrder, GlobalAddr, MAX_EARLY_REQUESTS, NodeId, PageNum, Prot, Time, WaiterId,
};
use crate::types::{Count, Epoch, width_mask};

impl<M: PageMemory> Node<M> {
    /// The waiter applies `op` to the `width`-byte word at `addr` (1, 2, 4 or 8, aligned), with the
    /// semantics `order` gives; it is resumed when the home has answered, and takes the word's
    /// value before from [`Node::take_atomic_result`].
    pub fn atomic(
        &mut self,
        now: Time,
        waiter: WaiterId,
        (addr, width): (GlobalAddr, u8),
        op: AtomicOp,
        order: AtomicOrder,
    ) -> Result<(), UsageError> {
        let page = addr.page();
        if !crate::types::atomic_width(width)
            || addr.0 % u64::from(width) != 0
            || page.index() >= self.table.len()
        {
            return Err(UsageError::BadAtomic {
                addr: addr.0,
                width,
            });
        }
        // A copy of the page dropped by a telling (`Node::drop_copies`) is no longer compared
        // when a read brings it again: this node's own operation may change the word, or read
        // what another node wrote there (an outside attack's node, having added 1 to a word of
        // a dropped page, was warned that another node changed the byte it read then).
        if !self.dropped.is_empty() {
            self.dropped.remove(&page);
            self.dropped_reads.remove(&page);
        }
        if self.sync.moving.contains_key(&page) {
            // Its home is being decided (this node vetoes the move now: see `holds_atomics`):
            // made once the moves are applied, at the home then.
            self.atomics.pages.insert(page);
            self.atomics.held.push((waiter, addr, width, op, order));
            return Ok(());
        }
        let home = self.table[page.index()].home;
        self.atomics.pages.insert(page);
        if home == self.cfg.node {
            self.stats.atomics_local += 1;
        } else {
            self.stats.atomics_remote += 1;
        }
        if let Some(add) = added(op, width) {
            let key = (addr.0, width, order.acquire, order.release);
            let on_its_way = self.atomics.out.values().any(|o| {
                (o.addr.0, o.width, o.order.acquire, o.order.release) == key
                    && added(o.op, o.width).is_some()
            });
            if on_its_way {
                self.stats.atomics_combined += 1;
                self.atomics
                    .combined
                    .entry(key)
                    .or_default()
                    .push(Combined {
                        waiter,
                        add,
                        since: now,
                    });
                return Ok(());
            }
        }
        self.issue_atomic(now, vec![(waiter, 0, now)], (addr, width), op, order);
        Ok(())
    }

    /// Sends `op` on the word at `addr` to its home for `waiters` (each with what its answer
    /// adds to the value before), a release's writes first.
    fn issue_atomic(
        &mut self,
        now: Time,
        waiters: Vec<(WaiterId, u64, Time)>,
        (addr, width): (GlobalAddr, u8),
        op: AtomicOp,
        order: AtomicOrder,
    ) {
        let home = self.table[addr.page().index()].home;
        let id = self.atomics.next_id;
        self.atomics.next_id = id.wrapping_add(1);
        self.atomics.out.insert(
            id,
            AtomicOut {
                waiters,
                addr,
                width,
                op,
                order,
                home,
                since: now,
                sent_at: 0,
                released_in: order
                    .release
                    .then_some((self.interval, self.atomics.acquired.last())),
            },
        );
        let seen = self.atomics.seen.get(&home).copied().unwrap_or(0);
        let mut msg = Msg::Atomic {
            id,
            addr: addr.0,
            width,
            op,
            acquire: order.acquire,
            release: order.release,
            seen,
            epoch: self.epoch,
            in_barrier: self.sync.awaiting_grant,
            passed: self.collectives_passed(),
            notices: Vec::new(),
            earlier: Vec::new(),
            passed_on: Vec::new(),
        };
        if order.release {
            // A release: the writes before it go home first; the operation leaves once they
            // are acknowledged, naming their pages.
            self.flush_writes(now, false);
            let sent = self.atomics.sent.get(&home).copied().unwrap_or(0);
            let passed = self.atomics.passed.get(&home).copied().unwrap_or(0);
            if let Msg::Atomic {
                notices,
                earlier,
                passed_on,
                ..
            } = &mut msg
            {
                *notices = writes_after(&self.written, sent);
                *earlier = self.barrier_writes_after(sent);
                *passed_on = self.atomics.acquired.after(passed, home);
            }
            // `sent` moves on when the grant comes back (see `Atomics::sent`).
            self.interval += 1;
            self.flush.after_flush.push_back(AfterFlush::Atomic {
                home,
                msg,
                through: self.flush.next_diff_id,
            });
            self.complete_flushes();
        } else {
            self.diff_written_word_page(now, addr, width);
            self.send(home, msg);
        }
        self.drain_loopback(now);
    }

    /// Before an operation without release semantics: if this node writes the word's page
    /// (read-write here, homed elsewhere), its diff goes home first. The diff and the
    /// operation go to the same home, in that order, so the operation applies to the value
    /// this node's own plain stores left (C11's order of one word's modifications), and the
    /// diff cannot land after it and undo it.
    fn diff_written_word_page(&mut self, now: Time, addr: GlobalAddr, width: u8) {
        let page = addr.page();
        let e = &self.table[page.index()];
        if e.home == self.cfg.node || !self.rw.contains(&page) {
            return;
        }
        // Only if this node changed the word itself (a store to another word of the page can
        // wait for the next release, as any write does).
        let (at, w) = (addr.offset(), usize::from(width));
        if let Some(twin) = &e.twin {
            self.mem.read(page, &mut self.scratch);
            if twin.0[at..at + w] == self.scratch[at..at + w] {
                return;
            }
        }
        self.rw.remove(&page);
        // Protect first, then diff: a racing store either made it into the page or faults.
        self.protect_pages(&[page], Prot::Read);
        self.table[page.index()].frame = Frame::ReadOnly;
        self.diff_page(page);
        self.send_diffs(now);
    }

    /// The fetch-adds that waited behind the operation on `key`'s word just answered, as one
    /// operation (see "Combining" above).
    fn issue_combined(&mut self, now: Time, key: (u64, u8, bool, bool)) {
        let Some(waiting) = self.atomics.combined.remove(&key) else {
            return;
        };
        let (addr, width, acquire, release) = key;
        let mut sum = 0u64;
        let mut waiters = Vec::with_capacity(waiting.len());
        for c in &waiting {
            waiters.push((c.waiter, sum, c.since));
            sum = sum.wrapping_add(c.add);
        }
        let order = AtomicOrder { acquire, release };
        self.issue_atomic(
            now,
            waiters,
            (GlobalAddr(addr), width),
            AtomicOp::FetchAdd(sum),
            order,
        );
    }

    /// The value before the atomic operation that resumed `waiter`.
    pub fn take_atomic_result(&mut self, waiter: WaiterId) -> Option<u64> {
        self.atomics.results.remove(&waiter)
    }

    /// ATOMIC at the word's home: apply it, record its release, answer. One on a word past
    /// this node's allocations is held until it makes them, as a GETP is (`early_atomics`):
    /// allocation is collective but not a barrier, and a node may use a word at once.
    pub(crate) fn on_atomic(&mut self, from: NodeId, msg: Msg) -> Result<(), ProtocolError> {
        if let Msg::Atomic { addr, passed, .. } = &msg
            && GlobalAddr(*addr).page().index() >= self.table.len()
        {
            // Unless this node is in a barrier or its exit: it makes no allocation before the
            // others arrive, so it never will (the job ends naming the sender). A sender already
            // past the barrier or `jia_wait` this node is in (its grant reached the sender
            // first) allocated after it, as this node will once its own grant comes: held.
            if self.sync.collective.is_some() && *passed <= self.collectives_passed() {
                self.early_atomics.push((from, msg));
                self.refuse_early_requests();
                return Ok(());
            }
            if self.early_atomics.len() >= MAX_EARLY_REQUESTS {
                return Err(ProtocolError {
                    from,
                    kind: MsgKind::Atomic,
                    why: "too many atomic operations on words not allocated here yet",
                });
            }
            self.early_atomics.push((from, msg));
            return Ok(());
        }
        let Msg::Atomic {
            id,
            addr,
            width,
            op,
            acquire,
            release,
            seen,
            epoch,
            in_barrier,
            notices,
            earlier,
            passed_on,
            ..
        } = msg
        else {
            return Ok(());
        };
        if passed_on.iter().any(|n| n.writer.0 >= self.cfg.nodes) {
            return Err(ProtocolError {
                from,
                kind: MsgKind::Atomic,
                why: "write notice naming a node outside the job",
            });
        }
        let word = GlobalAddr(addr);
        let page = word.page();
        let me = self.cfg.node;
        if self.table.get(page.index()).is_none_or(|e| e.home != me) {
            // Pages of atomic words never move, and a word is asked of its home: a sender
            // that allocated otherwise, or a forged message.
            return Err(ProtocolError {
                from,
                kind: MsgKind::Atomic,
                why: "atomic operation on a word not homed here",
            });
        }
        self.atomics.pages.insert(page);
        if self.atomics.homed.insert(page) {
            // From now on its home stays here: this node's threads may use the CPU's atomics.
            self.mem.atomics_homed_here(page);
        }
        let old = self.mem.atomic_update(page, word.offset(), width, op);
        if op
            .apply(old, width)
            .is_some_and(|new| new != old & width_mask(width))
        {
            // A home write: the page's copies elsewhere are stale now. (A write of the value
            // the word holds leaves them as they are: a test-and-set spin on a set word, say,
            // named the page at each of the home's releases.)
            self.mark_written(page);
            let count = self.atomics.changes.entry(page).or_insert(0);
            *count = count.wrapping_add(1);
        }
        let changes = self.atomics.changes.get(&page).copied().unwrap_or(0);
        let changes = changes.wrapping_add(self.mem.atomic_changes_by_threads(page));
        if release {
            // As a lock's release: the writes of a node with a thread in a barrier belong to
            // the next epoch. An acquire below asks from the sender's own epoch.
            let node_epoch = self.epoch;
            let released_in = epoch.saturating_add(Epoch::from(in_barrier));
            self.mgr.on_atomic_release(
                from,
                released_in,
                (notices, earlier),
                passed_on,
                node_epoch,
            );
        }
        let (counter, notices) = self.mgr.atomic_notices(seen, epoch, acquire);
        self.stats.atomics_served += 1;
        self.send(
            from,
            Msg::AtomicGrant {
                id,
                old,
                counter,
                changes,
                notices,
            },
        );
        Ok(())
    }

    /// ATOMICGRANT: the operation's answer. For an acquire, the pages released through the
    /// word are invalidated first; this node's copy of the word's page is dropped if it does
    /// not hold the word's value now.
    pub(crate) fn on_atomic_grant(
        &mut self,
        now: Time,
        from: NodeId,
        id: u32,
        (old, counter, changes, notices): (u64, Count, u32, Vec<WriteId>),
    ) -> Result<(), ProtocolError> {
        if self.atomics.out.get(&id).is_none_or(|o| o.home != from) {
            return Err(ProtocolError {
                from,
                kind: MsgKind::AtomicGrant,
                why: "no atomic operation outstanding with that node",
            });
        }
        if notices.iter().any(|n| n.writer.0 >= self.cfg.nodes) {
            return Err(ProtocolError {
                from,
                kind: MsgKind::AtomicGrant,
                why: "write notice naming a node outside the job",
            });
        }
        let Some(out) = self.atomics.out.remove(&id) else {
            return Ok(());
        };
        if let Some((interval, learned)) = out.released_in {
            // Recorded at the home: later releases to it may leave these writes out.
            let sent = self.atomics.sent.entry(from).or_insert(0);
            *sent = (*sent).max(interval);
            let passed = self.atomics.passed.entry(from).or_insert(0);
            *passed = (*passed).max(learned);
        }
        let page = out.addr.page();
        if out.order.acquire {
            self.acquire_atomic_notices(now, from, notices);
            let seen = self.atomics.seen.entry(from).or_insert(0);
            *seen = (*seen).max(counter);
        }
        // A copy on its way may predate an operation that changed the word, if it does not
        // come from the home itself: the value is kept for it (`on_page_grant`). Marking its
        // fetch stale instead made a thread spinning on the word (each answer marking the
        // sibling's request, asked again behind the next operation) starve a fault on its page.
        // What the word holds after the operation, whether it changed it or only read it (a
        // load, a failed compare-exchange): a copy must not show an older value.
        let now_value = out.op.apply(old, out.width).unwrap_or(old);
        if out.home != self.cfg.node {
            let (at, width) = (out.addr.offset(), out.width);
            if let Some(f) = &mut self.table[page.index()].fetch {
                f.atomics.retain(|v| v.at != at);
                f.atomics.push(AtomicValue {
                    at,
                    width,
                    value: now_value,
                    after_request: out.sent_at > f.asked_at,
                });
            }
            self.drop_copy_without(now, out.addr, width, now_value);
        }
        // The page counts as written by this node in its interval if the operation showed it
        // anything new: a value, or changes of the page's words, unlike its last operation on
        // the word. A spin that keeps loading the same value (with release, a word's page named
        // by every release) names the page once, not at every release: those releases made
        // every fetch of the page elsewhere stale on arrival, for ever.
        let seen_now = (out.width, now_value, changes);
        let kept = self.cfg.atomic_words_kept;
        if self.atomics.observed.note(out.addr.0, seen_now, kept) != Some(seen_now) {
            self.mark_written(page);
        }
        let mask = width_mask(out.width);
        for &(waiter, ahead, asked) in &out.waiters {
            self.stats.atomic_wait_ns += now.since(asked);
            self.atomics
                .results
                .insert(waiter, old.wrapping_add(ahead) & mask);
            self.resume(waiter);
        }
        if added(out.op, out.width).is_some() {
            let key = (out.addr.0, out.width, out.order.acquire, out.order.release);
            self.issue_combined(now, key);
        }
        Ok(())
    }

    /// An atomic acquire's notices: the writes this node does not know (not its own, not seen
    /// through an earlier acquire) are invalidated, and learned, to be passed on by its next
    /// atomic release to each home (see "Chains" above). With two nodes nothing is learned:
    /// a write passed on could reach only its writer and this node.
    fn acquire_atomic_notices(&mut self, now: Time, from: NodeId, notices: Vec<WriteId>) {
        let me = self.cfg.node;
        let fresh: Vec<WriteId> = notices
            .into_iter()
            .filter(|n| n.writer != me && !self.atomics.acquired.knows(n))
            .collect();
        // Writes of an epoch this node's barriers have ended are invalidated already (every
        // copy taken since holds them): learned only, to pass on to nodes not past it yet.
        let epoch = self.epoch;
        let stale = fresh.iter().filter(|n| n.epoch >= epoch).map(|n| n.page);
        self.invalidate_notified(now, Some(from), stale.collect::<Vec<_>>());
        if self.cfg.nodes > 2 {
            for n in &fresh {
                self.atomics.acquired.learn(n, Some(from));
            }
        }
    }

    /// A lock's or condition variable's grant named `pages` (invalidated here now): this
    /// node's next atomic release through each home passes them on, so a chain that enters
    /// the node through a lock and leaves it through an atomic word is ordered, as C11 orders
    /// it. A grant's notices name each page's latest writer only (under a lock, the writes
    /// before it are home before its), and passed on as that writer's they would be skipped by
    /// a node that saw that writer's write before the earlier ones were home; so they go as
    /// this node's own, of a new interval (nothing it named before carries it), tagged an
    /// epoch past any the writes can have (below). Two nodes: nothing to pass on (see
    /// `acquire_atomic_notices`).
    pub(crate) fn relay_through_atomics(&mut self, pages: &[PageNum]) {
        if self.cfg.nodes <= 2 || pages.is_empty() {
            return;
        }
        self.interval += 1;
        // An epoch past the writes' (a grant does not say theirs): a writer is at most one
        // epoch past this node, or two while a thread of this node is in a barrier, and writes
        // made in the window of its next barrier are tagged one more.
        let epoch = self.epoch + 1 + Epoch::from(self.sync.awaiting_grant);
        let (writer, interval) = (self.cfg.node, self.interval);
        for &page in pages {
            let relayed = WriteId {
                page,
                writer,
                interval,
                epoch,
            };
            self.atomics.acquired.learn(&relayed, None);
        }
    }

    /// Drops this node's valid copy of the page of the `width`-byte word at `addr`, if there is
    /// one and it does not hold the `value` the home's word took at the operation just
    /// answered: fetched again on its next touch, it holds that value or a newer one. (Putting
    /// the value in a copy from the home, which is older, instead kept the simulator's
    /// `mixed_sync` seed 73000280 from completing; a copy from a holder or read one-sided may
    /// be newer than the answer whenever its request left, and its threads may have read it.)
    fn drop_copy_without(&mut self, now: Time, addr: GlobalAddr, width: u8, value: u64) {
        let page = addr.page();
        if matches!(self.table[page.index()].frame, Frame::Invalid) {
            return;
        }
        let (at, w) = (addr.offset(), usize::from(width));
        self.mem.read(page, &mut self.scratch);
        if self.scratch[at..at + w] != value.to_le_bytes()[..w] {
            self.invalidate(now, [page]);
        }
    }

    /// A page of atomic words this node operated on or serves as their home, homed on the
    /// lowest node from `first` on that has one, and that node: an acquire load of its first
    /// word is answered with every release recorded through that home's words (an acquire
    /// fence that lost count of the words its thread read acquires from each such home).
    pub fn atomic_page_homed_from(&self, first: u16) -> Option<(NodeId, GlobalAddr)> {
        self.atomics
            .pages
            .iter()
            .filter_map(|&p| Some((self.table.get(p.index())?.home, p)))
            .filter(|&(home, _)| home.0 >= first)
            .min_by_key(|&(home, _)| home)
            .map(|(home, p)| (home, p.addr()))
    }

    /// Pages holding atomic words (never moved home).
    pub(crate) fn holds_atomics(&self, page: PageNum) -> bool {
        self.atomics.pages.contains(&page)
    }

    /// The moves are applied: the operations held for them are made.
    pub(crate) fn make_held_atomics(&mut self, now: Time) {
        for (waiter, addr, width, op, order) in std::mem::take(&mut self.atomics.held) {
            // Checked when it was first made: a retry cannot fail.
            let made = self.atomic(now, waiter, (addr, width), op, order);
            debug_assert!(made.is_ok(), "{made:?}");
        }
    }
}

/// What `op` adds to a `width`-byte word, if it is a fetch-add or a fetch-sub (which combine).
fn added(op: AtomicOp, width: u8) -> Option<u64> {
    match op {
        AtomicOp::FetchAdd(v) => Some(v & width_mask(width)),
        AtomicOp::FetchSub(v) => Some(v.wrapping_neg() & width_mask(width)),
        _ => None,
    }
}
