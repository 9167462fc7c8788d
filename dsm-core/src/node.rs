//! One node's protocol state, its inputs and its outputs.
//!
//! [`Node`] is the sans-IO heart of the DSM. The runtime (or the simulator) calls an input
//! (`handle_fault`, `handle_message`, `acquire`, `barrier`...) with the current time, then drains
//! the outputs: [`Node::poll_transmit`] for messages, [`Node::poll_effect`] for what to do to the
//! application (resume a thread, end the job), [`Node::poll_timeout`] for when to call
//! [`Node::handle_timeout`]. Page bytes and protections are reached through [`PageMemory`].
//!
//! The page side of the protocol (faults, fetches, the cache, twins and diffs) is in
//! `pages.rs`; the synchronisation side (locks, barriers, condition variables, exit) and the
//! managers a node hosts are in `sync.rs`.

use crate::types::{Count, Epoch};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::alloc::AllocPolicy;
use crate::codec;
pub use crate::error::{JobError, ProtocolError, UsageError};
use crate::hooks::ByteDigests;
use crate::local::{Atomics, Flush, SyncState};
use crate::mailbox::{Channel, Filter, Letter, MAX_LETTER_BYTES, Mailbox};
use crate::manager::{self, Managed, Managers};
use crate::memory::PageMemory;
use crate::msg::{Msg, MsgKind, RunData};
use crate::stats::Stats;
use crate::streams::Streams;
use crate::table::{GrantSource, HeldRun, PageTable, Serve};
use crate::types::{
    Access, GlobalAddr, LockId, MAX_LOCKS, MAX_NODES, NodeId, PAGE_SIZE, PageBuf, PageNum,
    PageState, Time, WaiterId,
};

/// Prefetch settings (JIAJIA 3.0's `prefetch`, `prefetch_pages`, `max_checking_pages`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefetch {
    /// Whether a fault also asks for following pages.
    pub enabled: bool,
    /// At most this many extra pages per fault.
    pub prefetch_pages: u32,
    /// Look at most this many pages past the faulting one for candidates.
    pub max_checking_pages: u32,
    /// The read-ahead window grows, while a thread keeps using what it brings, up to this many
    /// pages (never more than a quarter of the cache).
    pub read_ahead_max_pages: u32,
}

impl Default for Prefetch {
    fn default() -> Self {
        Prefetch {
            enabled: true,
            prefetch_pages: 8,
            max_checking_pages: 16,
            read_ahead_max_pages: 1024,
        }
    }
}

/// What a node's core needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreConfig {
    /// This node.
    pub node: NodeId,
    /// Nodes in the job.
    pub nodes: u16,
    /// Size of the shared region in pages (allocations beyond it fail).
    pub region_pages: u64,
    /// At most this many remote pages are cached; the oldest leave first.
    pub cache_pages: usize,
    /// Prefetch settings.
    pub prefetch: Prefetch,
    /// A page or diff request unanswered for this long ends the job (`None`: never).
    pub reply_timeout: Option<Duration>,
    /// Peers may read this node's home pages without asking it (a one-sided RDMA READ in place of
    /// a GETP): home pages are then write-tracked from their allocation, since the home no longer
    /// learns when a copy leaves. Every node of a job must agree on it.
    pub remote_reads: bool,
    /// Home migration (JIAJIA 2.1's `HMIG`): at a barrier, a page written in the closing epoch
    /// by one node only, which holds a valid copy, gets that node as its new home. Off with
    /// `remote_reads`. Nodes need not agree: a node with it off claims no page, so none moves to
    /// it.
    pub home_migration: bool,
    /// Cohort locking: a lock released by a thread of this node while another thread of it
    /// waits passes to that thread with no message while no other node waits for it, and at
    /// most this many times more once its manager says one does (`Msg::LockWanted`); then it
    /// goes back to its manager (0: every release goes to the manager).
    pub lock_handoffs: u32,
    /// A home answers a GETP with runs of consecutive pages, at most this many pages per grant
    /// (the runtime picks it from its transport: what one datagram or one write carries well);
    /// 1 to [`codec::MAX_RUN_PAGES`].
    pub grant_run_pages: usize,
    /// Many readers: a home asked for pages it sent whole to another node this long ago or
    /// less, unchanged since, has that node send them ([`crate::Msg::Forward`]); each copy
    /// serves at most [`MAX_FORWARDS`] readers (`None`: the home serves every reader itself).
    pub forward_within: Option<Duration>,
    /// What this node remembers of its last atomic operation on a word (the value it saw) is
    /// kept for at most this many words: a word forgotten costs an extra notice (its page named
    /// at this node's next release), never a missed one. 1 or more.
    pub atomic_words_kept: usize,
}

/// The most readers a home forwards to one node's copies of a run.
pub const MAX_FORWARDS: u8 = 3;

/// [`CoreConfig::atomic_words_kept`]'s default: a histogram of a million bins updated with
/// atomics kept 40 MB per node (about 40 bytes a word) for ever before.
pub const ATOMIC_WORDS_KEPT: usize = 1 << 16;

/// The most runs a home remembers as held by their readers (the oldest is forgotten first).
pub const MAX_HELD_RUNS: usize = 64;

impl CoreConfig {
    /// A configuration with the defaults for node `node` of `nodes`.
    pub fn new(node: NodeId, nodes: u16) -> CoreConfig {
        CoreConfig {
            node,
            nodes,
            region_pages: 1 << 24,
            cache_pages: 32 * 1024,
            prefetch: Prefetch::default(),
            reply_timeout: None,
            remote_reads: false,
            home_migration: false,
            grant_run_pages: 16,
            lock_handoffs: 16,
            forward_within: None,
            atomic_words_kept: ATOMIC_WORDS_KEPT,
        }
    }

    /// Whether this node offers to become the home of the pages it alone writes.
    pub fn migrates_homes(&self) -> bool {
        self.home_migration && !self.remote_reads
    }
}

/// A message to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The destination.
    pub to: NodeId,
    /// The message.
    pub msg: Msg,
}

/// Something the runtime must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The waiter's call (fault, lock, barrier...) is complete: let it continue.
    Resume {
        /// Who continues.
        waiter: WaiterId,
    },
    /// At node 0, at exit: every node's statistics, in node order.
    JobStats {
        /// One entry per node.
        nodes: Vec<Stats>,
        /// Each node's runtime counters as it gave them ([`Node::note_runtime_counters`]).
        runtime: Vec<Vec<u64>>,
    },
    /// The job cannot go on: end this node with an error.
    Abort {
        /// Why.
        error: JobError,
    },
}

/// What a node has to send and do: messages for other nodes, effects for the runtime, and
/// messages to itself (delivered before the input that made them returns).
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    pub transmits: VecDeque<Transmit>,
    pub effects: VecDeque<Effect>,
    pub loopback: VecDeque<Msg>,
}

/// One node's protocol state machine.
pub struct Node<M: PageMemory> {
    pub(crate) cfg: CoreConfig,
    pub(crate) mem: M,
    /// The page table and the cache of remote pages.
    pub(crate) table: PageTable,
    /// Pages currently read-write here (home or cached): downgraded at the next release.
    pub(crate) rw: BTreeSet<PageNum>,
    /// Pages written since the last barrier, with the interval of their last write fault.
    pub(crate) written: BTreeMap<PageNum, Count>,
    /// This node's interval counter, advanced at every release.
    pub(crate) interval: Count,
    /// The barrier epoch this node is in.
    pub(crate) epoch: Epoch,
    /// Outstanding page requests and when they were sent (kept only with a reply timeout).
    pub(crate) fetches: BTreeMap<PageNum, Time>,
    /// Diffs on their way to their homes, and what waits for them.
    pub(crate) flush: Flush,
    /// This node's threads' locks, condition variables and collective call.
    pub(crate) sync: SyncState,
    /// The synchronisation this node manages.
    pub(crate) mgr: Managers,
    pub(crate) mailbox: Mailbox,
    /// What goes out: messages, effects, messages to this node itself.
    pub(crate) out: Outbox,
    pub(crate) stats: Stats,
    /// The statistics frozen by `freeze_stats`, reported at exit instead of the live ones.
    pub(crate) frozen_stats: Option<(Stats, Vec<u64>)>,
    /// The runtime's own counters, reported at exit beside the core's (opaque to the core).
    pub(crate) runtime_counters: Vec<u64>,
    pub(crate) failed: bool,
    /// The walks the read-ahead follows (see [`crate::streams`]).
    pub(crate) streams: Streams,
    /// GETPs for pages past our allocations, answered when we allocate them, with the
    /// collectives their senders had passed.
    pub(crate) early_requests: Vec<(NodeId, Access, Vec<PageNum>, Epoch)>,
    /// ATOMICs on words past our allocations (a node used the word right after allocating it,
    /// before this home made the same allocation), applied when we allocate them.
    pub(crate) early_atomics: Vec<(NodeId, Msg)>,
    /// Home pages served untracked, whose write tracking starts once their grants are on the
    /// way ([`Node::settle_serves`]), with the bytes sent.
    pub(crate) unsettled: Vec<(PageNum, Arc<[u8]>, usize)>,
    /// Runs of a GETP not copied yet, and forwards to send behind them: each run is copied
    /// when the runtime takes the grant before it ([`Node::poll_transmit`]), so the first grant
    /// of a large window leaves before the rest is copied.
    pub(crate) serving: VecDeque<Serve>,
    /// At a home: the requests lately answered whose requesters may serve other readers of the
    /// same pages (`pages.rs`, forwarding); at most [`MAX_HELD_RUNS`], newest last.
    pub(crate) held: Vec<HeldRun>,
    /// Atomic operations on shared memory: this node's, and its records as a home.
    pub(crate) atomics: Atomics,
    /// The last page this home served, and the page to warm once the grants are out (see
    /// [`Node::warm_ahead`]).
    pub(crate) last_served: Option<PageNum>,
    pub(crate) to_warm: Option<PageNum>,
    /// Pages this node offered at its last barrier to become the home of, with their bytes
    /// kept if the copy was dropped before the grant said whether they move.
    pub(crate) claims: BTreeMap<PageNum, Option<PageBuf>>,
    /// Claimed pages invalidated by a lock's or condition variable's grant before the barrier's
    /// grant: written elsewhere since, so the claimed bytes are not the page's last.
    pub(crate) claims_overtaken: BTreeSet<PageNum>,
    pub(crate) scratch: Box<[u8; PAGE_SIZE]>,
    /// The copies dropped at the last [`Node::drop_copies`], by page, with a digest of each
    /// byte they held, until a thread reads each again or the node's next acquire; the byte a
    /// read fault on such a page asked for; and the pages read again since with that byte
    /// changed, with the byte (at most [`crate::hooks::DROPPED_CHANGED_KEPT`]).
    pub(crate) dropped: BTreeMap<PageNum, ByteDigests>,
    pub(crate) dropped_reads: BTreeMap<PageNum, usize>,
    pub(crate) dropped_changed: Vec<(PageNum, usize)>,
    /// Messages this node has sent to other nodes: a stamp of when a page request or an atomic
    /// operation left, which tells, per home, which of the two the home took first (each pair
    /// of nodes is an ordered channel; an RDMA READ is posted no later than what is sent after
    /// it).
    pub(crate) sent_msgs: u64,
    /// Pages whose next request must go to the home as a message, not as a one-sided read (a
    /// read could not be placed before or after an atomic operation's answer).
    pub(crate) ask_home: BTreeSet<PageNum>,
    /// With one-sided reads: pages with a diff on its way home, by the diff's id. Until it is
    /// acknowledged a request for them goes as a message, behind the diff: a read could reach
    /// the home's memory before the home's service thread applied it, and the copy would lack
    /// this node's own writes (a page evicted dirty, then touched again).
    pub(crate) diffs_on_their_way: BTreeMap<PageNum, Count>,
}

impl<M: PageMemory> Node<M> {
    /// A node with nothing allocated.
    ///
    /// # Panics
    /// If `cfg.node` is not below `cfg.nodes` or `cfg.nodes` is 0 or above [`MAX_NODES`]: a
    /// configuration error the runtime rules out before it builds a node.
    pub fn new(cfg: CoreConfig, mem: M) -> Node<M> {
        assert!(
            cfg.nodes > 0 && cfg.nodes <= MAX_NODES,
            "job of {} nodes",
            cfg.nodes
        );
        assert!(
            cfg.node.0 < cfg.nodes,
            "{} outside a job of {}",
            cfg.node,
            cfg.nodes
        );
        let mgr = Managers::new(cfg.node, cfg.nodes);
        let table = PageTable::new(cfg.cache_pages);
        Node {
            cfg,
            mem,
            table,
            rw: BTreeSet::new(),
            written: BTreeMap::new(),
            interval: 1,
            epoch: 0,
            fetches: BTreeMap::new(),
            flush: Flush::default(),
            sync: SyncState::new(),
            mgr,
            mailbox: Mailbox::default(),
            out: Outbox::default(),
            stats: Stats::default(),
            frozen_stats: None,
            runtime_counters: Vec::new(),
            failed: false,
            early_requests: Vec::new(),
            early_atomics: Vec::new(),
            unsettled: Vec::new(),
            serving: VecDeque::new(),
            held: Vec::new(),
            atomics: Atomics::default(),
            last_served: None,
            to_warm: None,
            claims: BTreeMap::new(),
            claims_overtaken: BTreeSet::new(),
            streams: Streams::default(),
            scratch: Box::new([0; PAGE_SIZE]),
            dropped: BTreeMap::new(),
            dropped_reads: BTreeMap::new(),
            dropped_changed: Vec::new(),
            sent_msgs: 0,
            ask_home: BTreeSet::new(),
            diffs_on_their_way: BTreeMap::new(),
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.cfg.node
    }

    /// Nodes in the job.
    pub fn nodes(&self) -> u16 {
        self.cfg.nodes
    }

    /// Pages allocated so far (the page table's length).
    pub fn pages_allocated(&self) -> usize {
        self.table.len()
    }

    /// This node's configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// Turns home migration on or off for this node's next barriers (see
    /// [`CoreConfig::home_migration`]).
    pub fn set_home_migration(&mut self, on: bool) {
        self.cfg.home_migration = on;
    }

    /// The page memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The page memory, mutably (for the simulator's application stores).
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    /// This node's statistics.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Zeroes the statistics and starts counting (JIAJIA's `jia_startstat`).
    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
        self.frozen_stats = None;
    }

    /// Freezes the statistics reported at exit at their current values (JIAJIA's
    /// `jia_stopstat`); counting goes on for [`Node::stats`].
    pub fn freeze_stats(&mut self) {
        self.frozen_stats = Some((self.stats.clone(), self.runtime_counters.clone()));
    }

    /// Pages allocated so far.
    pub fn allocated_pages(&self) -> u64 {
        self.table.len() as u64
    }

    /// The home of `page`, if allocated.
    pub fn home_of(&self, page: PageNum) -> Option<NodeId> {
        self.table.home_of(page)
    }

    /// The state of `page` here.
    pub fn page_state(&self, page: PageNum) -> PageState {
        self.table.state(page)
    }

    /// Remote pages cached here now.
    pub fn cached_pages(&self) -> usize {
        self.table.cached()
    }

    /// Allocates `size_bytes` (rounded up to pages) collectively: every node must make the same
    /// calls in the same order. Home pages become readable here; the others stay invalid.
    pub fn alloc(
        &mut self,
        policy: AllocPolicy,
        size_bytes: u64,
    ) -> Result<GlobalAddr, UsageError> {
        let (first, home_pages) = self.table.alloc(
            policy,
            size_bytes,
            self.cfg.region_pages,
            self.cfg.node,
            self.cfg.nodes,
        )?;
        if self.cfg.remote_reads {
            // Copies may leave without a GETP: track writes here from the start.
            self.protect_pages(&home_pages, crate::types::Prot::Read);
            for &p in &home_pages {
                let e = &mut self.table[p.index()];
                e.served = true;
                e.frame = crate::table::Frame::ReadOnly;
                self.mem.allow_home_write(p);
            }
        } else {
            self.protect_pages(&home_pages, crate::types::Prot::ReadWrite);
        }
        let allocated = self.table.len();
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early_requests)
            .into_iter()
            .partition(|(_, _, pages, _)| pages.iter().all(|p| p.index() < allocated));
        self.early_requests = waiting;
        for (from, access, pages, passed) in ready {
            // Asked before this allocation by a node that made it already: the pages must be
            // homed here by this node's allocations too, or the nodes' calls differ.
            if self.homed_here_or_abort(from, &pages) {
                // Its one refusal once the pages exist (not homed here) was checked.
                let _ = self.on_get_page(None, from, access, (pages, passed));
            }
        }
        // Atomics held since before this allocation, in the order they came.
        let word_page = |msg: &Msg| match msg {
            Msg::Atomic { addr, .. } => Some(GlobalAddr(*addr).page()),
            _ => None,
        };
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early_atomics)
            .into_iter()
            .partition(|(_, msg)| word_page(msg).is_some_and(|p| p.index() < allocated));
        self.early_atomics = waiting;
        for (from, msg) in ready {
            let Some(page) = word_page(&msg) else {
                continue;
            };
            if self.homed_here_or_abort(from, &[page]) {
                // Its one refusal (a word not homed here) was checked.
                let _ = self.on_atomic(from, msg);
            }
        }
        Ok(first.addr())
    }

    /// Whether every one of `pages`, which `from` asked for before this node allocated them,
    /// is homed here by this node's allocations; if not, the nodes' allocation calls differ
    /// and the job ends naming the first.
    fn homed_here_or_abort(&mut self, from: NodeId, pages: &[PageNum]) -> bool {
        let me = self.cfg.node;
        let Some(&page) = pages.iter().find(|p| self.table[p.index()].home != me) else {
            return true;
        };
        let home = self.table[page.index()].home;
        self.abort(JobError::HomeMismatch {
            node: from,
            page,
            here: me,
            home,
        });
        false
    }

    /// The barriers and `jia_wait`s this node has passed (their grants had): what a page
    /// request carries, so a home still in one can tell a request made after it.
    pub(crate) fn collectives_passed(&self) -> Epoch {
        self.epoch.wrapping_add(self.sync.wait_epoch)
    }

    /// Drains the next message to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        if self.out.transmits.is_empty() {
            self.serve_next_run();
        }
        self.out.transmits.pop_front()
    }

    /// Drains the next effect to apply, in the order they must be applied.
    #[must_use]
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.out.effects.pop_front()
    }

    /// When [`Node::handle_timeout`] should next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Time> {
        let timeout = self.cfg.reply_timeout?;
        if self.failed {
            return None;
        }
        let oldest = [
            self.fetches.values().min().copied(),
            self.flush.diffs_out.values().map(|&(_, t)| t).min(),
            self.atomics.out.values().map(|o| o.since).min(),
        ]
        .into_iter()
        .flatten()
        .min()?;
        Some(oldest.after(timeout))
    }

    /// Time has passed: requests unanswered past the reply timeout end the job.
    pub fn handle_timeout(&mut self, now: Time) {
        let Some(timeout) = self.cfg.reply_timeout else {
            return;
        };
        if self.failed {
            return;
        }
        let late = |sent: Time| now.since(sent) >= timeout.as_nanos() as u64;
        let fetch = self
            .fetches
            .iter()
            .find(|&(_, &t)| late(t))
            .map(|(&p, &t)| (p, t));
        if let Some((page, sent)) = fetch {
            let e = &self.table[page.index()];
            let peer = e.fetch.as_ref().map_or(e.home, |f| f.asked);
            self.abort(JobError::NoReply {
                peer,
                what: "GETP",
                waited_ms: now.since(sent) / 1_000_000,
            });
            return;
        }
        let diff = self
            .flush
            .diffs_out
            .values()
            .find(|&&(_, t)| late(t))
            .copied();
        if let Some((peer, sent)) = diff {
            self.abort(JobError::NoReply {
                peer,
                what: "DIFF",
                waited_ms: now.since(sent) / 1_000_000,
            });
            return;
        }
        let atomic = self.atomics.out.values().find(|o| late(o.since));
        if let Some(&crate::local::AtomicOut { home, since, .. }) = atomic {
            self.abort(JobError::NoReply {
                peer: home,
                what: "ATOMIC",
                waited_ms: now.since(since) / 1_000_000,
            });
        }
    }

    /// A message arrived from `from`. Messages that break the protocol are ignored and reported.
    pub fn handle_message(
        &mut self,
        now: Time,
        from: NodeId,
        msg: Msg,
    ) -> Result<(), ProtocolError> {
        self.handle_frame(now, from, codec::Frame::Msg(msg))
    }

    /// A frame arrived from `from`, decoded by [`codec::decode_frame_ref`]: a page grant is
    /// installed straight from the received bytes (one copy of the page, into place), anything
    /// else is handled as by [`Node::handle_message`].
    pub fn handle_frame(
        &mut self,
        now: Time,
        from: NodeId,
        frame: codec::Frame<'_>,
    ) -> Result<(), ProtocolError> {
        let bytes = match &frame {
            codec::Frame::Msg(msg) => codec::frame_len(msg),
            codec::Frame::Grant { data, .. } => {
                codec::HEADER_BYTES + codec::GRANT_HEADER_BYTES + data.len()
            }
            codec::Frame::GrantInPlace { .. } => codec::HEADER_BYTES + codec::GRANT_HEADER_BYTES,
        };
        self.handle_wire_frame(now, from, frame, bytes)
    }

    /// A grant in place arrived from `from` ([`codec::Frame::GrantInPlace`]) and the runtime
    /// read its pages, `data`, in the sender's memory: handled as the grant of those bytes, and
    /// counted as the header that came over the wire.
    pub fn handle_grant_in_place(
        &mut self,
        now: Time,
        from: NodeId,
        (page, data, forwarded): (PageNum, &[u8], bool),
    ) -> Result<(), ProtocolError> {
        let frame = codec::Frame::Grant {
            page,
            data,
            forwarded,
        };
        self.handle_wire_frame(
            now,
            from,
            frame,
            codec::HEADER_BYTES + codec::GRANT_HEADER_BYTES,
        )
    }

    /// Handles `frame`, `bytes` long on the wire.
    fn handle_wire_frame(
        &mut self,
        now: Time,
        from: NodeId,
        frame: codec::Frame<'_>,
        bytes: usize,
    ) -> Result<(), ProtocolError> {
        let kind = match &frame {
            codec::Frame::Msg(msg) => msg.kind(),
            codec::Frame::Grant { .. } | codec::Frame::GrantInPlace { .. } => MsgKind::GetPageGrant,
        };
        if from.0 >= self.cfg.nodes || from == self.cfg.node {
            return Err(ProtocolError {
                from,
                kind,
                why: "sender is not another node of the job",
            });
        }
        self.stats.msgs_received[kind.index()] += 1;
        self.stats.bytes_received[kind.index()] += bytes as u64;
        let result = match frame {
            codec::Frame::Msg(msg) => self.dispatch(now, from, msg),
            codec::Frame::Grant {
                page,
                data,
                forwarded,
            } => self.on_page_grant(now, from, (page, data, GrantSource::of(forwarded))),
            // The runtime reads such a grant's pages in its sender's memory and hands over a
            // `Frame::Grant` of them.
            codec::Frame::GrantInPlace { .. } => Err(ProtocolError {
                from,
                kind: MsgKind::GetPageGrant,
                why: "a grant of pages left in its sender's memory, not read there",
            }),
        };
        self.drain_loopback(now);
        result
    }

    pub(crate) fn dispatch(
        &mut self,
        now: Time,
        from: NodeId,
        msg: Msg,
    ) -> Result<(), ProtocolError> {
        if self.is_for_moving_pages(&msg) || self.behind_held(from, &msg) {
            self.sync.held_for_moves.push((from, msg));
            return Ok(());
        }
        match msg {
            Msg::GetPage {
                access,
                pages,
                passed,
            } => self.on_get_page(Some(now), from, access, (pages, passed)),
            Msg::GetPageGrant {
                page,
                data: RunData::Copied(data),
                forwarded,
            } => self.on_page_grant(now, from, (page, &data, GrantSource::of(forwarded))),
            Msg::GetPageGrant {
                data: RunData::Lent(_),
                ..
            } => Err(ProtocolError {
                from,
                kind: MsgKind::GetPageGrant,
                why: "a lent run is its sender's memory, never a message received",
            }),
            Msg::Forward { to, first, count } => self.on_forward(from, to, first, count),
            msg @ Msg::Atomic { .. } => self.on_atomic(from, msg),
            Msg::AtomicGrant {
                id,
                old,
                counter,
                changes,
                notices,
            } => self.on_atomic_grant(now, from, id, (old, counter, changes, notices)),
            Msg::ForwardRefused { to, first, count } => {
                self.on_forward_refused(from, to, first, count)
            }
            Msg::Diff { id, diffs } => self.on_diff(from, id, diffs),
            Msg::DiffGrant { id } => self.on_diff_grant(from, id),
            Msg::Acquire {
                lock,
                seen,
                epoch,
                cohort,
            } => self.managed(|m, o| m.on_acquire(from, lock, (seen, epoch, cohort), o)),
            Msg::AcquireGrant {
                lock,
                counter,
                notices,
                earlier,
            } => self.on_acquire_grant(now, from, lock, counter, (notices, earlier)),
            Msg::Release {
                lock,
                epoch,
                notices,
                earlier,
            } => {
                let node_epoch = self.epoch;
                self.managed(|m, o| {
                    m.on_release(from, lock, epoch, (notices, earlier), node_epoch, o)
                })
            }
            Msg::Barrier {
                epoch,
                allocs,
                threads,
                notices,
                claims,
            } => self
                .managed(|m, o| m.on_barrier(from, epoch, (allocs, threads), notices, claims, o)),
            Msg::BarrierGrant { epoch, notices } => {
                self.on_barrier_grant(now, from, epoch, notices)
            }
            Msg::Migrated { epoch, vetoes } => {
                self.managed(|m, o| m.on_migrated(from, epoch, vetoes, o))
            }
            Msg::MigrateGrant { epoch, vetoed } => self.on_migrate_grant(now, from, epoch, vetoed),
            Msg::Wait { epoch } => self.managed(|m, o| m.on_wait(from, epoch, o)),
            Msg::WaitGrant { epoch } => self.on_wait_grant(now, from, epoch),
            Msg::SetCv { cv, epoch, notices } => {
                let node_epoch = self.epoch;
                self.managed(|m, o| m.on_set_cv(from, cv, (epoch, notices), node_epoch, o))
            }
            Msg::ResetCv { cv } => self.managed(|m, _| m.on_reset_cv(from, cv)),
            Msg::LockWanted { lock } => self.on_lock_wanted(from, lock),
            Msg::WaitCv { cv, seen } => self.managed(|m, o| m.on_wait_cv(from, cv, seen, o)),
            Msg::CvGrant {
                cv,
                counter,
                notices,
            } => self.on_cv_grant(now, from, cv, counter, notices),
            Msg::Exit { stats } => self.managed(|m, o| m.on_exit(from, stats, o)),
            Msg::ExitGrant => self.on_exit_grant(now, from),
            Msg::Send { channel, tag, data } => {
                if channel == Channel::Bcast && self.mailbox.was_bcast_root(tag) {
                    self.bcast_roots_differ(tag, from);
                    return Ok(());
                }
                if let Some(waiter) = self.mailbox.arrive(channel, Letter { from, tag, data }) {
                    self.resume(waiter);
                }
                Ok(())
            }
            Msg::Error { text } => {
                self.out.effects.push_back(Effect::Abort {
                    error: JobError::Remote { from, text },
                });
                self.failed = true;
                Ok(())
            }
        }
    }

    /// Runs a manager's handler ([`crate::manager`]) and carries out what it says: its messages
    /// go out in order, then its event.
    fn managed(
        &mut self,
        handle: impl FnOnce(&mut Managers, &mut manager::Outbox) -> Result<Managed, ProtocolError>,
    ) -> Result<(), ProtocolError> {
        let mut out = manager::Outbox::new();
        let managed = handle(&mut self.mgr, &mut out)?;
        for (to, msg) in out {
            self.send(to, msg);
        }
        match managed {
            Managed::Done => {}
            Managed::AllocMismatch { first, other } => {
                let error = JobError::AllocMismatch { first, other };
                self.broadcast_error(&error.to_string());
                self.abort(error);
            }
            Managed::ThreadsMismatch { first, other } => {
                let error = JobError::ThreadsMismatch { first, other };
                self.broadcast_error(&error.to_string());
                self.abort(error);
            }
            // Before the exit grant this node sent itself is delivered (drain_loopback): the
            // statistics come before the resume.
            Managed::JobStats { nodes, runtime } => self
                .out
                .effects
                .push_back(Effect::JobStats { nodes, runtime }),
        }
        Ok(())
    }

    /// Sends a letter to node `to`'s mailbox (`jia_send`; to this node too). It does not block:
    /// the letter waits at the receiver until a thread there receives it.
    pub fn send_letter(
        &mut self,
        to: NodeId,
        channel: Channel,
        tag: i32,
        data: Vec<u8>,
    ) -> Result<(), UsageError> {
        if to.0 >= self.cfg.nodes {
            return Err(UsageError::BadNode {
                node: to.0.into(),
                nodes: self.cfg.nodes,
            });
        }
        if data.len() > MAX_LETTER_BYTES {
            return Err(UsageError::LetterTooLong(data.len()));
        }
        if to == self.cfg.node {
            let letter = Letter {
                from: to,
                tag,
                data,
            };
            if let Some(waiter) = self.mailbox.arrive(channel, letter) {
                self.resume(waiter);
            }
        } else {
            if channel == Channel::Bcast
                && let Some(other) = self.mailbox.note_bcast_root(tag)
            {
                self.bcast_roots_differ(tag, other);
            }
            self.send(to, Msg::Send { channel, tag, data });
        }
        Ok(())
    }

    /// Broadcast `round` has a second root, `other`: the job ends, every node told.
    fn bcast_roots_differ(&mut self, round: i32, other: NodeId) {
        if self.failed {
            return;
        }
        let error = JobError::BcastRoots {
            round: round as u32,
            other,
            here: self.cfg.node,
        };
        self.broadcast_error(&error.to_string());
        self.abort(error);
    }

    /// Receives the oldest letter `filter` accepts (`jia_recv`): `Some` at once if one is here;
    /// otherwise `None`, and `waiter` is resumed when one comes, to take it with
    /// [`Node::take_letter`].
    pub fn receive(
        &mut self,
        filter: Filter,
        waiter: WaiterId,
    ) -> Result<Option<Letter>, UsageError> {
        if let Some(n) = filter.from.filter(|n| n.0 >= self.cfg.nodes) {
            return Err(UsageError::BadNode {
                node: n.0.into(),
                nodes: self.cfg.nodes,
            });
        }
        Ok(self.mailbox.receive(waiter, filter))
    }

    /// The letter a receive that waited was resumed with.
    pub fn take_letter(&mut self, waiter: WaiterId) -> Option<Letter> {
        self.mailbox.take_delivered(waiter)
    }

    /// Letters received and not yet taken by a receive, and their bytes.
    pub fn letters_held(&self) -> (usize, usize) {
        (self.mailbox.held(), self.mailbox.held_bytes())
    }

    /// The application failed: tell every other node (JIAJIA's `jia_error`).
    pub fn broadcast_error(&mut self, text: &str) {
        for n in 0..self.cfg.nodes {
            if NodeId(n) != self.cfg.node {
                self.send(
                    NodeId(n),
                    Msg::Error {
                        text: text.to_owned(),
                    },
                );
            }
        }
    }

    pub(crate) fn abort(&mut self, error: JobError) {
        if !self.failed {
            self.failed = true;
            self.out.effects.push_back(Effect::Abort { error });
        }
    }

    pub(crate) fn resume(&mut self, waiter: WaiterId) {
        self.out.effects.push_back(Effect::Resume { waiter });
    }

    pub(crate) fn send(&mut self, to: NodeId, msg: Msg) {
        if to == self.cfg.node {
            self.out.loopback.push_back(msg);
            return;
        }
        self.sent_msgs += 1;
        if let Msg::Atomic { id, .. } = &msg {
            if let Some(out) = self.atomics.out.get_mut(id) {
                out.sent_at = self.sent_msgs;
            }
        }
        let k = msg.kind().index();
        self.stats.msgs_sent[k] += 1;
        self.stats.bytes_sent[k] += codec::frame_len(&msg) as u64;
        self.out.transmits.push_back(Transmit { to, msg });
    }

    /// Delivers the messages this node sent to itself (a lock it manages, its own barrier...).
    pub(crate) fn drain_loopback(&mut self, now: Time) {
        while let Some(msg) = self.out.loopback.pop_front() {
            let me = self.cfg.node;
            if let Err(e) = self.dispatch(now, me, msg) {
                // A message to ourselves that breaks the protocol is a bug in this crate.
                debug_assert!(false, "self-message rejected: {e}");
            }
        }
    }

    /// Applies `prot` to `pages` (sorted or not) in as few ranged calls as possible.
    pub(crate) fn protect_pages(&mut self, pages: &[PageNum], prot: crate::types::Prot) {
        for (first, count) in crate::table::runs_of(pages) {
            self.mem.protect(first, count, prot);
            self.stats.protect_calls += 1;
        }
    }

    pub(crate) fn check_lock(lock: LockId) -> Result<(), UsageError> {
        if lock.0 >= MAX_LOCKS {
            Err(UsageError::BadLock(lock.0))
        } else {
            Ok(())
        }
    }

    pub(crate) fn manager_of(&self, id: u16) -> NodeId {
        self.mgr.manager_of(id)
    }

    pub(crate) fn mark_written(&mut self, page: PageNum) {
        self.written.insert(page, self.interval);
        // A home page written: the copies sent of it are older now.
        self.forget_held(page);
    }

    /// The access a waiter list needs: write if any waiter writes.
    pub(crate) fn strongest(waiters: &[(WaiterId, Access, Time)]) -> Access {
        if waiters.iter().any(|&(_, a, _)| a == Access::Write) {
            Access::Write
        } else {
            Access::Read
        }
    }
}

#[cfg(test)]
mod tests {
    use super::UsageError;

    /// Ranges are written as a C user reads them, both ends included: not `(0..2)`, which reads
    /// as including node 2.
    #[test]
    fn out_of_range_messages_name_the_last_valid_number() {
        assert_eq!(
            UsageError::BadNode { node: 5, nodes: 2 }.to_string(),
            "node 5 is not in the job (nodes 0 to 1)"
        );
        assert_eq!(
            UsageError::BadNode { node: 1, nodes: 1 }.to_string(),
            "node 1 is not in the job (nodes 0 to 0)"
        );
        assert_eq!(
            UsageError::BadLock(64).to_string(),
            "lock 64 is out of range (locks are 0 to 63)"
        );
        assert_eq!(
            UsageError::BadCv(64).to_string(),
            "condition variable 64 is out of range (condition variables are 0 to 63)"
        );
    }
}
