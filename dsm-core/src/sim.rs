//! A deterministic cluster simulator: N real [`Node`]s over a seeded network, each running
//! simulated application threads.
//!
//! The network keeps every message FIFO per (sender, receiver) pair, as the transports do, and
//! otherwise interleaves everything at random by seed: which thread runs next, which pair delivers
//! next. Every message goes through the wire codec on its way. A simulated thread touches memory
//! exactly as a real one would: through the protection the node last applied, faulting into
//! [`Node::handle_fault`] when the page is not accessible. With reference checking on, every read is
//! compared with a sequential reference memory updated at each write: for data-race-free programs
//! the two must agree under release consistency.
//!
//! The same seed gives the same run, message for message.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::alloc::AllocPolicy;
use crate::codec::{self, Frame};
use crate::error::{JobError, UsageError};
use crate::mailbox::{Channel, Filter, Letter};
use crate::memory::{PageMemory, VecMemory};
use crate::msg::{Msg, MsgKind, RunData};
use crate::node::{CoreConfig, Effect, Node};
use crate::stats::Stats;
use crate::types::{
    Access, AtomicOp, AtomicOrder, CvId, GlobalAddr, LockId, NodeId, PAGE_SIZE, PageBuf, PageNum,
    Prot, Time, WaiterId,
};

/// Scheduling weight of a runnable thread against a link's speed.
const THREAD_WEIGHT: u64 = 20;

/// One step of a simulated thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Load the u64 at the address (8-byte aligned).
    Read(GlobalAddr),
    /// Store a u64 at the address.
    Write(GlobalAddr, u64),
    /// `jia_lock`.
    Lock(LockId),
    /// `jia_unlock`.
    Unlock(LockId),
    /// `jia_barrier`.
    Barrier,
    /// `jia_barrier_threads(T)`: the node's threads meet (as the runtime's `team` does: the
    /// others wait while the last to arrive does the node's barrier), then every node's.
    BarrierThreads(u16),
    /// `jia_wait`.
    Wait,
    /// `jia_setcv`.
    SetCv(CvId),
    /// `jia_resetcv`.
    ResetCv(CvId),
    /// `jia_waitcv`.
    WaitCv(CvId),
    /// `jia_exit`.
    Exit,
    /// `jia_send`: a letter to a node.
    Send {
        /// The receiver.
        to: NodeId,
        /// The tag.
        tag: i32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// An atomic operation on the `width`-byte word at `addr`; its value before goes to
    /// [`Cluster::atomics`]. The reference takes adds and subtractions when they are made (they
    /// commute), other writes when they are answered (give such a word one writer at a time,
    /// and one width).
    Atomic {
        /// The word.
        addr: GlobalAddr,
        /// Its width in bytes (1, 2, 4 or 8).
        width: u8,
        /// The operation.
        op: AtomicOp,
        /// Its ordering.
        order: AtomicOrder,
    },
    /// Atomic loads of the `width`-byte word at `addr` until it holds `at_least` or more (a
    /// spin on a flag or a counter).
    AwaitAtomic {
        /// The word.
        addr: GlobalAddr,
        /// Its width in bytes (1, 2, 4 or 8).
        width: u8,
        /// The value awaited.
        at_least: u64,
        /// The loads' ordering.
        order: AtomicOrder,
    },
    /// `jia_recv`: the oldest letter the filter accepts (on the `Send` channel; waits for one).
    /// What it received goes to [`Cluster::letters`].
    Recv {
        /// Only from this node (`None`: any).
        from: Option<NodeId>,
        /// Only with this tag (`None`: any).
        tag: Option<i32>,
    },
}

/// A deterministic pseudo-random generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Debug)]
struct Blocked {
    waiter: WaiterId,
    /// A fault: run the same op again once resumed. Otherwise the op is done when resumed.
    retry: bool,
}

#[derive(Debug, Default)]
struct SimThread {
    ops: VecDeque<Op>,
    blocked: Option<Blocked>,
}

/// A read whose value differs from the sequential reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The reading node.
    pub node: NodeId,
    /// The address.
    pub addr: GlobalAddr,
    /// The value read.
    pub got: u64,
    /// The reference value.
    pub expected: u64,
}

/// One delivered message, for traces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// Sender.
    pub from: NodeId,
    /// Receiver.
    pub to: NodeId,
    /// Kind.
    pub kind: MsgKind,
}

/// Why a simulation could not finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// Nothing can run and some thread is still blocked or has work.
    #[error("deadlock at step {step}: {detail}")]
    Stuck {
        /// Steps taken.
        step: u64,
        /// Which threads wait for what.
        detail: String,
    },
    /// The step budget ran out.
    #[error("no completion after {0} steps")]
    TooLong(u64),
    /// A node refused an application call.
    #[error("{node} refused a call: {error}")]
    Usage {
        /// The node.
        node: NodeId,
        /// The error.
        error: UsageError,
    },
    /// A node rejected a message (a protocol bug when every node is honest).
    #[error("{0}")]
    Protocol(String),
    /// A node ended the job.
    #[error("{node} aborted: {error}")]
    Aborted {
        /// The node.
        node: NodeId,
        /// Why.
        error: JobError,
    },
}

/// A simulated cluster.
pub struct Cluster {
    nodes: Vec<Node<VecMemory>>,
    threads: Vec<Vec<SimThread>>,
    queues: BTreeMap<(u16, u16), VecDeque<Wire>>,
    active: Vec<(u16, u16)>,
    /// Relative delivery speed of each link, drawn from the seed on first use: slow links hold
    /// messages back for long stretches, which is what exposes races between peers.
    link_speed: BTreeMap<(u16, u16), u64>,
    rng: Rng,
    now: Time,
    steps: u64,
    cookie: u64,
    /// Check every read against the sequential reference.
    pub check_reference: bool,
    reference: BTreeMap<u64, u64>,
    /// Reads that disagreed with the reference.
    pub violations: Vec<Violation>,
    /// Every value read, per node, in order.
    pub reads: Vec<Vec<(GlobalAddr, u64)>>,
    /// Every atomic operation's answer (the word, its value before), per node, in the order
    /// they completed.
    pub atomics: Vec<Vec<(GlobalAddr, u64)>>,
    /// Every letter received, per node, in the order its receives completed.
    pub letters: Vec<Vec<Letter>>,
    /// Delivered messages, when tracing.
    pub trace: Option<Vec<TraceEntry>>,
    /// Per-mille chance that a delivered message is lost (to test timeouts; the protocol itself
    /// assumes a reliable transport).
    pub drop_per_mille: u64,
    /// The statistics node 0 reported at exit.
    pub job_stats: Option<Vec<Stats>>,
    /// Per node, the threads waiting in `Op::BarrierThreads` for the others of their node.
    team: Vec<Vec<usize>>,
    /// How many times each thread was resumed (for tests of waiting).
    pub resumes: u64,
    /// Lent runs whose bytes changed between their send and their delivery (each delivered
    /// with the newer bytes).
    pub lent_read_newer: u64,
    /// Serve GETPs as one-sided reads (RDMA READ): the home's memory is read when the request
    /// arrives, without its core; requests and pages travel on channels of their own (a read
    /// may overtake messages sent before it, as a NIC serves a read before the home's service
    /// thread takes the messages that came first). Set it together with
    /// [`CoreConfig::remote_reads`].
    pub one_sided_reads: bool,
    /// Per-cent chance that a read of a page open for reading first closes it behind its
    /// node's back ([`VecMemory::close_behind`]), as the runtime's memory closes shown pages
    /// it makes the node's own with a written one; 0 (no chance drawn): never.
    pub close_behind_percent: u64,
    /// Per-mille chance that a node about to read first drops every copy of another node's page
    /// it holds ([`Node::drop_copies`]), as the runtime's does at its launcher's word when it
    /// runs quiet while the others wait or do the same, or (one time in two) sends the diffs
    /// of those it wrote home ([`Node::send_written_copies`], the word before); 0 (no chance
    /// drawn): never.
    pub drop_copies_per_mille: u64,
    /// The copies dropped so ([`Cluster::drop_copies_per_mille`]).
    pub copies_dropped: u64,
}

/// A frame on its way.
struct Wire {
    frame: Vec<u8>,
    /// A grant of a lent run: read from the sender's memory when sent, and again when
    /// delivered (as a transport reads lent memory again to send it again).
    lent: Option<LentWire>,
}

/// Where a lent run's bytes are in its frame, and where they come from.
struct LentWire {
    from: usize,
    at: usize,
    first: PageNum,
    pages: usize,
    /// The sender's `discards` when it was sent: after a discard of any of its pages, the run
    /// keeps the bytes it was sent with (see [`PageMemory::lends_runs`]).
    discards: usize,
}

/// Queue keys with this bit set in the sender carry one-sided read replies.
const READ_CHANNEL: u16 = 0x8000;

impl Cluster {
    /// A cluster of `n` nodes, each with one thread, configured by `configure` (called with the
    /// default configuration of each node), driven by `seed`.
    pub fn new(n: u16, seed: u64, configure: impl Fn(&mut CoreConfig)) -> Cluster {
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = CoreConfig::new(NodeId(i), n);
                configure(&mut cfg);
                Node::new(cfg, VecMemory::new())
            })
            .collect();
        let mut rng = Rng::new(seed);
        let cookie = rng.next_u64();
        Cluster {
            nodes,
            threads: (0..n).map(|_| vec![SimThread::default()]).collect(),
            queues: BTreeMap::new(),
            active: Vec::new(),
            link_speed: BTreeMap::new(),
            rng,
            now: Time(0),
            steps: 0,
            cookie,
            check_reference: false,
            reference: BTreeMap::new(),
            violations: Vec::new(),
            reads: vec![Vec::new(); usize::from(n)],
            letters: vec![Vec::new(); usize::from(n)],
            atomics: vec![Vec::new(); usize::from(n)],
            trace: None,
            drop_per_mille: 0,
            job_stats: None,
            team: vec![Vec::new(); usize::from(n)],
            resumes: 0,
            lent_read_newer: 0,
            one_sided_reads: false,
            close_behind_percent: 0,
            drop_copies_per_mille: 0,
            copies_dropped: 0,
        }
    }

    /// Has every node's memory lend runs ([`PageMemory::lends_runs`], as the runtime's does):
    /// their bytes are read when sent and again when delivered.
    pub fn lend_runs(&mut self, on: bool) {
        for node in &mut self.nodes {
            node.memory_mut().lends = on;
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `n`.
    pub fn node(&self, n: u16) -> &Node<VecMemory> {
        &self.nodes[usize::from(n)]
    }

    /// Node `n`, mutably.
    pub fn node_mut(&mut self, n: u16) -> &mut Node<VecMemory> {
        &mut self.nodes[usize::from(n)]
    }

    /// Virtual time now.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Gives node `n` `count` threads in all.
    pub fn set_threads(&mut self, n: u16, count: usize) {
        self.threads[usize::from(n)].resize_with(count.max(1), SimThread::default);
        self.nodes[usize::from(n)].note_threads(count.max(1));
    }

    /// The same allocation on every node; returns its address.
    pub fn alloc(&mut self, policy: AllocPolicy, size_bytes: u64) -> Result<GlobalAddr, SimError> {
        let mut addr = None;
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let a = node
                .alloc(policy.clone(), size_bytes)
                .map_err(|error| SimError::Usage {
                    node: NodeId(i as u16),
                    error,
                })?;
            addr = Some(a);
        }
        Ok(addr.unwrap_or(GlobalAddr(0)))
    }

    /// An allocation on node `n` alone (the nodes' allocations are collective, not a barrier:
    /// one node may make it before the others); what it sends (operations held for it) goes
    /// out. Its address.
    pub fn alloc_on(
        &mut self,
        n: u16,
        policy: AllocPolicy,
        size_bytes: u64,
    ) -> Result<GlobalAddr, SimError> {
        let i = usize::from(n);
        let addr = self.nodes[i]
            .alloc(policy, size_bytes)
            .map_err(|error| SimError::Usage {
                node: NodeId(n),
                error,
            })?;
        self.after_input(i)?;
        Ok(addr)
    }

    /// Queues `op` on thread `t` of node `n`.
    pub fn push(&mut self, n: u16, t: usize, op: Op) {
        self.threads[usize::from(n)][t].ops.push_back(op);
    }

    /// Queues `op` on thread 0 of every node.
    pub fn push_all(&mut self, op: Op) {
        for n in 0..self.nodes.len() {
            self.threads[n][0].ops.push_back(op.clone());
        }
    }

    /// Total messages sent so far by every node.
    pub fn messages_sent(&self) -> u64 {
        self.nodes.iter().map(|n| n.stats().total_msgs_sent()).sum()
    }

    /// Total bytes sent so far by every node.
    pub fn bytes_sent(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.stats().total_bytes_sent())
            .sum()
    }

    /// Sum of every node's statistics.
    pub fn total_stats(&self) -> Stats {
        let mut s = Stats::default();
        for n in &self.nodes {
            s.add(n.stats());
        }
        s
    }

    fn runnable(&self) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for (n, threads) in self.threads.iter().enumerate() {
            for (t, th) in threads.iter().enumerate() {
                if th.blocked.is_none() && !th.ops.is_empty() {
                    v.push((n, t));
                }
            }
        }
        v
    }

    /// Runs until every thread has finished its ops and the network is quiet.
    pub fn run(&mut self) -> Result<(), SimError> {
        self.run_for(50_000_000)
    }

    /// [`Cluster::run`] with a step budget.
    pub fn run_for(&mut self, max_steps: u64) -> Result<(), SimError> {
        let budget_end = self.steps + max_steps;
        loop {
            if self.steps >= budget_end {
                return Err(SimError::TooLong(max_steps));
            }
            let runnable = self.runnable();
            let choices = runnable.len() + self.active.len();
            if choices == 0 {
                if let Some(t) = self.next_timeout() {
                    self.now = self.now.max(t);
                    for i in 0..self.nodes.len() {
                        self.nodes[i].handle_timeout(self.now);
                        self.after_input(i)?;
                    }
                    continue;
                }
                return self.check_idle();
            }
            self.steps += 1;
            self.now = Time(self.now.0 + 1_000);
            let speeds: Vec<u64> = self.active.iter().map(|k| self.link_speed[k]).collect();
            let total = runnable.len() as u64 * THREAD_WEIGHT + speeds.iter().sum::<u64>();
            let mut pick = self.rng.below(total);
            if pick < runnable.len() as u64 * THREAD_WEIGHT {
                let (n, t) = runnable[(pick / THREAD_WEIGHT) as usize];
                self.step_thread(n, t)?;
            } else {
                pick -= runnable.len() as u64 * THREAD_WEIGHT;
                let mut idx = 0;
                while pick >= speeds[idx] {
                    pick -= speeds[idx];
                    idx += 1;
                }
                self.deliver(idx)?;
            }
        }
    }

    fn next_timeout(&self) -> Option<Time> {
        if self
            .threads
            .iter()
            .flatten()
            .all(|t| t.blocked.is_none() && t.ops.is_empty())
        {
            return None;
        }
        self.nodes.iter().filter_map(|n| n.poll_timeout()).min()
    }

    fn check_idle(&self) -> Result<(), SimError> {
        let mut detail = Vec::new();
        for (n, threads) in self.threads.iter().enumerate() {
            for (t, th) in threads.iter().enumerate() {
                if th.blocked.is_some() || !th.ops.is_empty() {
                    detail.push(format!(
                        "node {n} thread {t} blocked on {:?}",
                        th.ops.front()
                    ));
                }
            }
        }
        if detail.is_empty() {
            Ok(())
        } else {
            Err(SimError::Stuck {
                step: self.steps,
                detail: detail.join("; "),
            })
        }
    }

    fn step_thread(&mut self, n: usize, t: usize) -> Result<(), SimError> {
        let Some(op) = self.threads[n][t].ops.front().cloned() else {
            return Ok(());
        };
        let now = self.now;
        let waiter = WaiterId(t as u64);
        let node = &mut self.nodes[n];
        let id = NodeId(n as u16);
        let usage = |error| SimError::Usage { node: id, error };
        let mut blocked = Some(Blocked {
            waiter,
            retry: false,
        });
        match op {
            Op::Read(addr) => {
                let page = addr.page();
                if self.drop_copies_per_mille > 0
                    && self.rng.below(1000) < self.drop_copies_per_mille
                {
                    // A quiet node's dropping, or any node's flush.
                    self.copies_dropped += if self.rng.chance(50) {
                        node.drop_copies(now)
                    } else {
                        node.send_written_copies(now)
                    } as u64;
                }
                if self.close_behind_percent > 0
                    && node.memory().prot(page) == Prot::Read
                    && self.rng.chance(self.close_behind_percent)
                {
                    node.memory_mut().close_behind(page);
                }
                if node.memory().prot(page) == Prot::None && node.memory_mut().open_prefetched(page)
                {
                    // The runtime's fast path: the page is open now, the node hears of it later.
                }
                if node.memory().prot(page) == Prot::None {
                    node.reading_dropped(page, addr.offset());
                    node.handle_fault(now, page, Access::Read, waiter)
                        .map_err(usage)?;
                    blocked = Some(Blocked {
                        waiter,
                        retry: true,
                    });
                } else {
                    let got = node.memory().load_u64(page, addr.offset());
                    // The runtime reports a page it opened by itself soon, or later (when the
                    // service thread next runs): both by seed.
                    if !node.memory().opened_prefetches.is_empty() && self.rng.chance(50) {
                        Self::report_home_writes(node, now);
                    }
                    self.reads[n].push((addr, got));
                    if self.check_reference {
                        let expected = self.reference.get(&addr.0).copied().unwrap_or(0);
                        if got != expected {
                            self.violations.push(Violation {
                                node: id,
                                addr,
                                got,
                                expected,
                            });
                        }
                    }
                    blocked = None;
                }
            }
            Op::Write(addr, value) => {
                let page = addr.page();
                if node.memory().prot(page) != Prot::ReadWrite
                    && node.memory_mut().open_home_write(page)
                {
                    // The runtime's fast path: the page is open now, the node hears of it later.
                }
                if node.memory().prot(page) != Prot::ReadWrite {
                    node.handle_fault(now, page, Access::Write, waiter)
                        .map_err(usage)?;
                    blocked = Some(Blocked {
                        waiter,
                        retry: true,
                    });
                } else {
                    node.memory_mut().store_u64(page, addr.offset(), value);
                    self.reference.insert(addr.0, value);
                    blocked = None;
                }
            }
            _ if !node.memory().opened_home_writes.is_empty()
                || !node.memory().opened_prefetches.is_empty() =>
            {
                // Like the service thread, report opened pages before anything else.
                Self::report_home_writes(node, now);
                return self.after_input(n);
            }
            Op::Lock(l) => node.acquire(now, l, waiter).map_err(usage)?,
            Op::Unlock(l) => node.release(now, l, waiter).map_err(usage)?,
            Op::Barrier => node.barrier(now, waiter).map_err(usage)?,
            Op::BarrierThreads(threads) => {
                let team = &mut self.team[n];
                team.push(t);
                if team.len() == usize::from(threads) {
                    // The last of the node: the node's barrier; the others leave with it.
                    node.barrier(now, waiter).map_err(usage)?;
                } else if team.len() > usize::from(threads) {
                    return Err(SimError::Protocol(format!(
                        "node {n}: more threads than {threads} in one barrier of threads"
                    )));
                }
            }
            Op::Wait => node.wait(now, waiter).map_err(usage)?,
            Op::SetCv(c) => node.setcv(now, c, waiter).map_err(usage)?,
            Op::ResetCv(c) => node.resetcv(now, c, waiter).map_err(usage)?,
            Op::WaitCv(c) => node.waitcv(now, c, waiter).map_err(usage)?,
            Op::Exit => node.exit(now, waiter).map_err(usage)?,
            Op::Atomic {
                addr,
                width,
                op,
                order,
            } => {
                node.atomic(now, waiter, (addr, width), op, order)
                    .map_err(usage)?;
                if let AtomicOp::FetchAdd(_) | AtomicOp::FetchSub(_) = op {
                    self.update_reference(addr, width, |old| op.apply(old, width));
                }
            }
            Op::AwaitAtomic {
                addr, width, order, ..
            } => node
                .atomic(now, waiter, (addr, width), AtomicOp::Load, order)
                .map_err(usage)?,
            Op::Send { to, tag, data } => {
                node.send_letter(to, Channel::Send, tag, data)
                    .map_err(usage)?;
                blocked = None;
            }
            Op::Recv { from, tag } => {
                let filter = Filter {
                    channel: Channel::Send,
                    from,
                    tag,
                };
                if let Some(letter) = node.receive(filter, waiter).map_err(usage)? {
                    self.letters[n].push(letter);
                    blocked = None;
                }
            }
        }
        match blocked {
            None => {
                self.threads[n][t].ops.pop_front();
            }
            Some(b) => self.threads[n][t].blocked = Some(b),
        }
        self.after_input(n)
    }

    /// Drains a node's transmits into the network and applies its effects.
    fn after_input(&mut self, n: usize) -> Result<(), SimError> {
        while let Some(tx) = self.nodes[n].poll_transmit() {
            let mut frame = Vec::new();
            let from = NodeId(n as u16);
            let run = codec::encode_frame_head(self.cookie, from, &tx.msg, &mut frame);
            let lent = match (&tx.msg, run) {
                (_, Some(RunData::Copied(body))) => {
                    frame.extend_from_slice(body);
                    None
                }
                (Msg::GetPageGrant { page, .. }, Some(data @ RunData::Lent(_))) => {
                    let at = frame.len();
                    frame.resize(at + data.len(), 0);
                    let mem = self.nodes[n].memory();
                    mem.read_run(*page, &mut frame[at..]);
                    Some(LentWire {
                        from: n,
                        at,
                        first: *page,
                        pages: data.len() / PAGE_SIZE,
                        discards: mem.discards.len(),
                    })
                }
                _ => None,
            };
            debug_assert_eq!(
                frame.len(),
                codec::frame_len(&tx.msg),
                "frame_len disagrees with encoding"
            );
            // A GETP goes as one-sided reads where the node lets it and the home has made the
            // pages (else as a message, as the runtime does when it does not know the home's
            // memory key yet).
            let to = usize::from(tx.to.0);
            let read = match &tx.msg {
                Msg::GetPage { pages, .. } => {
                    self.one_sided_reads
                        && self.nodes[n].may_read_one_sided(pages)
                        && pages
                            .iter()
                            .all(|p| p.index() < self.nodes[to].pages_allocated())
                }
                _ => false,
            };
            if read {
                self.nodes[n].carried_otherwise(&tx.msg);
                self.enqueue((n as u16 | READ_CHANNEL, tx.to.0), frame);
            } else {
                self.enqueue_wire((n as u16, tx.to.0), Wire { frame, lent });
            }
        }
        // The runtime starts tracking served home pages once their grants are sent, while the
        // application runs on: here at once or after later steps (by seed), so threads write
        // some of those pages in between.
        if self.rng.chance(50) {
            self.nodes[n].settle_serves();
        }
        self.nodes[n].warm_ahead();
        while let Some(effect) = self.nodes[n].poll_effect() {
            match effect {
                Effect::Resume { waiter } => {
                    self.resumes += 1;
                    let th = &mut self.threads[n][waiter.0 as usize];
                    match th.blocked.take() {
                        Some(b) if b.waiter == waiter => {
                            // An atomic operation's answer; an awaited value not there yet
                            // is loaded again.
                            let atomic = match th.ops.front() {
                                Some(&Op::Atomic {
                                    addr, width, op, ..
                                }) if !b.retry => Some((addr, width, op, None)),
                                Some(&Op::AwaitAtomic {
                                    addr,
                                    width,
                                    at_least,
                                    ..
                                }) if !b.retry => {
                                    Some((addr, width, AtomicOp::Load, Some(at_least)))
                                }
                                _ => None,
                            };
                            let mut again = false;
                            if let Some((addr, width, op, at_least)) = atomic {
                                let old =
                                    self.nodes[n].take_atomic_result(waiter).ok_or_else(|| {
                                        SimError::Protocol(format!(
                                            "node {n}: atomic operation resumed without its value"
                                        ))
                                    })?;
                                self.atomics[n].push((addr, old));
                                again = at_least.is_some_and(|v| old < v);
                                if let AtomicOp::Store(_)
                                | AtomicOp::Swap(_)
                                | AtomicOp::CompareExchange { .. }
                                | AtomicOp::FetchAnd(_)
                                | AtomicOp::FetchOr(_)
                                | AtomicOp::FetchXor(_) = op
                                {
                                    self.update_reference(addr, width, |_| op.apply(old, width));
                                }
                            }
                            let th = &mut self.threads[n][waiter.0 as usize];
                            let done = if b.retry || again {
                                None
                            } else {
                                th.ops.pop_front()
                            };
                            if let Some(Op::BarrierThreads(_)) = done {
                                // The node's barrier is done: the node's other threads leave.
                                for other in std::mem::take(&mut self.team[n]) {
                                    let o = &mut self.threads[n][other];
                                    if other != waiter.0 as usize {
                                        o.blocked = None;
                                        o.ops.pop_front();
                                    }
                                }
                            } else if matches!(done, Some(Op::Recv { .. })) {
                                let letter =
                                    self.nodes[n].take_letter(waiter).ok_or_else(|| {
                                        SimError::Protocol(format!(
                                            "node {n}: receive resumed without a letter"
                                        ))
                                    })?;
                                self.letters[n].push(letter);
                            }
                        }
                        other => {
                            return Err(SimError::Protocol(format!(
                                "node {n}: resume of thread {} that is blocked as {other:?}",
                                waiter.0
                            )));
                        }
                    }
                }
                Effect::JobStats { nodes, .. } => self.job_stats = Some(nodes),
                Effect::Abort { error } => {
                    return Err(SimError::Aborted {
                        node: NodeId(n as u16),
                        error,
                    });
                }
            }
        }
        Ok(())
    }

    fn enqueue(&mut self, key: (u16, u16), frame: Vec<u8>) {
        self.enqueue_wire(key, Wire { frame, lent: None });
    }

    fn enqueue_wire(&mut self, key: (u16, u16), wire: Wire) {
        if !self.link_speed.contains_key(&key) {
            let speed = if self.rng.chance(25) {
                1
            } else {
                2 + self.rng.below(40)
            };
            self.link_speed.insert(key, speed);
        }
        let q = self.queues.entry(key).or_default();
        if q.is_empty() {
            self.active.push(key);
        }
        q.push_back(wire);
    }

    fn deliver(&mut self, idx: usize) -> Result<(), SimError> {
        let key = self.active[idx];
        let q = self
            .queues
            .get_mut(&key)
            .ok_or_else(|| SimError::Protocol("empty queue".into()))?;
        let Wire { mut frame, lent } = q
            .pop_front()
            .ok_or_else(|| SimError::Protocol("empty queue".into()))?;
        if q.is_empty() {
            self.active.swap_remove(idx);
        }
        if let Some(l) = lent {
            // Read again now: the sender's pages as they are, granted or newer.
            let mem = self.nodes[l.from].memory();
            let (first, last) = (l.first.0, l.first.0 + l.pages as u32);
            let kept = mem.discards[l.discards..]
                .iter()
                .any(|&(p, n)| p.0 < last && first < p.0 + n);
            if !kept {
                let sent = frame[l.at..].to_vec();
                mem.read_run(l.first, &mut frame[l.at..]);
                if frame[l.at..] != sent[..] {
                    self.lent_read_newer += 1;
                }
            }
        }
        if self.drop_per_mille > 0 && self.rng.below(1000) < self.drop_per_mille {
            return Ok(());
        }
        // Decoded as the runtime decodes: a grant's page stays in the frame's bytes.
        let (header, msg) = codec::decode_frame_ref(&frame)
            .map_err(|e| SimError::Protocol(format!("decode: {e}")))?;
        let from = key.0 & !READ_CHANNEL;
        if header.cookie != self.cookie || header.from.0 != from {
            return Err(SimError::Protocol("frame header mangled".into()));
        }
        let to = usize::from(key.1);
        if let (true, Frame::Msg(Msg::GetPage { pages, .. })) = (key.0 & READ_CHANNEL != 0, &msg) {
            // The reader's NIC reads the home's memory; the home's core never sees the request.
            let home = &mut self.nodes[to];
            let mut replies = Vec::new();
            for &page in pages {
                let mut data = PageBuf::zeroed();
                home.memory_mut().read(page, &mut data.0);
                let mut frame = Vec::new();
                let reply = Msg::GetPageGrant {
                    page,
                    data: RunData::Copied(Arc::from(&data.0[..])),
                    forwarded: false,
                };
                codec::encode_frame(self.cookie, NodeId(key.1), &reply, &mut frame);
                replies.push(frame);
            }
            for frame in replies {
                self.enqueue((key.1 | READ_CHANNEL, from), frame);
            }
            return Ok(());
        }
        if let Some(trace) = &mut self.trace {
            trace.push(TraceEntry {
                from: NodeId(from),
                to: NodeId(key.1),
                kind: match &msg {
                    Frame::Grant { .. } | Frame::GrantInPlace { .. } => MsgKind::GetPageGrant,
                    Frame::Msg(m) => m.kind(),
                },
            });
        }
        Self::report_home_writes(&mut self.nodes[to], self.now);
        let result = match msg {
            Frame::Grant { page, data, .. } if key.0 & READ_CHANNEL != 0 => {
                self.nodes[to].handle_page_read(self.now, NodeId(from), page, data)
            }
            msg => self.nodes[to].handle_frame(self.now, NodeId(from), msg),
        };
        result.map_err(|e| SimError::Protocol(format!("{} rejected: {e}", NodeId(key.1))))?;
        self.after_input(to)
    }

    /// Sets the reference's `width`-byte word at `addr` (aligned) to what `f` makes of its value,
    /// if anything: the reference holds 8-byte words, read and written whole by plain accesses.
    fn update_reference(
        &mut self,
        addr: GlobalAddr,
        width: u8,
        f: impl FnOnce(u64) -> Option<u64>,
    ) {
        let shift = 8 * (addr.0 % 8) as u32;
        let mask = crate::types::width_mask(width) << shift;
        let word = self.reference.entry(addr.0 - addr.0 % 8).or_insert(0);
        if let Some(new) = f((*word & mask) >> shift) {
            *word = (*word & !mask) | ((new << shift) & mask);
        }
    }

    fn report_home_writes(node: &mut Node<VecMemory>, now: Time) {
        for page in std::mem::take(&mut node.memory_mut().opened_home_writes) {
            node.handle_home_write(page);
        }
        for (page, faulted) in std::mem::take(&mut node.memory_mut().opened_prefetches) {
            node.handle_prefetch_opened(now, page, faulted);
        }
    }

    // ----- blocking helpers for scenario tests: each runs the cluster until it is done -----

    /// Runs an atomic operation on the 8-byte word at `addr` on node `n`: its value before.
    pub fn atomic(
        &mut self,
        n: u16,
        addr: GlobalAddr,
        op: AtomicOp,
        order: AtomicOrder,
    ) -> Result<u64, SimError> {
        self.push(
            n,
            0,
            Op::Atomic {
                addr,
                width: 8,
                op,
                order,
            },
        );
        self.run()?;
        self.atomics[usize::from(n)]
            .last()
            .map(|&(_, v)| v)
            .ok_or(SimError::Protocol("no atomic answer".into()))
    }

    /// Node `n` reads the u64 at `addr`.
    pub fn read_u64(&mut self, n: u16, addr: GlobalAddr) -> Result<u64, SimError> {
        self.push(n, 0, Op::Read(addr));
        self.run()?;
        self.reads[usize::from(n)]
            .last()
            .map(|&(_, v)| v)
            .ok_or(SimError::Protocol("no read".into()))
    }

    /// Node `n` writes `value` at `addr`.
    pub fn write_u64(&mut self, n: u16, addr: GlobalAddr, value: u64) -> Result<(), SimError> {
        self.push(n, 0, Op::Write(addr, value));
        self.run()
    }

    /// Node `n` acquires `lock`.
    pub fn lock(&mut self, n: u16, lock: u16) -> Result<(), SimError> {
        self.push(n, 0, Op::Lock(LockId(lock)));
        self.run()
    }

    /// Node `n` releases `lock`.
    pub fn unlock(&mut self, n: u16, lock: u16) -> Result<(), SimError> {
        self.push(n, 0, Op::Unlock(LockId(lock)));
        self.run()
    }

    /// Every node enters a barrier.
    pub fn barrier(&mut self) -> Result<(), SimError> {
        self.push_all(Op::Barrier);
        self.run()
    }
}

/// Counts that grow for a job's life (a node's release intervals, its diff batches, the barrier
/// epochs) started just below 2^32, as a job of hours or days reaches them: the protocol goes
/// on exact past it. With 32 bits, each of the first two read a stale 0 (the interval wrapped
/// and releases carried no notices; a diff id wrapped and a release overtook its diffs).
#[cfg(test)]
mod counts_past_32_bits {
    use super::*;

    const NEAR: u64 = u32::MAX as u64 - 1;

    fn cluster(seed: u64) -> (Cluster, GlobalAddr) {
        let mut c = Cluster::new(3, seed, |cfg| cfg.prefetch.enabled = false);
        let x = c
            .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE_SIZE as u64)
            .unwrap();
        (c, x)
    }

    #[test]
    fn release_intervals() {
        let (mut c, x) = cluster(1);
        assert_eq!(c.read_u64(2, x).unwrap(), 0);
        c.node_mut(1).interval = NEAR;
        for value in 40..43 {
            c.lock(1, 7).unwrap();
            c.write_u64(1, x, value).unwrap();
            c.unlock(1, 7).unwrap();
            c.lock(2, 7).unwrap();
            assert_eq!(c.read_u64(2, x).unwrap(), value);
            c.unlock(2, 7).unwrap();
        }
        assert!(c.node_mut(1).interval > u64::from(u32::MAX));
    }

    #[test]
    fn diff_batches() {
        for seed in 0..40 {
            let (mut c, x) = cluster(seed);
            assert_eq!(c.read_u64(2, x).unwrap(), 0);
            c.node_mut(1).flush.next_diff_id = NEAR + 1;
            for value in [41, 42] {
                c.lock(1, 8).unwrap();
                c.write_u64(1, x, value).unwrap();
                c.push(1, 0, Op::Unlock(LockId(8)));
                c.push(2, 0, Op::Lock(LockId(8)));
                c.push(2, 0, Op::Read(x));
                c.push(2, 0, Op::Unlock(LockId(8)));
                c.run().unwrap();
                assert_eq!(
                    c.reads[2].last().map(|&(_, v)| v),
                    Some(value),
                    "seed {seed}"
                );
            }
        }
    }

    #[test]
    fn barrier_epochs() {
        let (mut c, x) = cluster(3);
        for n in 0..3 {
            let node = c.node_mut(n);
            node.epoch = NEAR;
            node.sync.wait_epoch = NEAR;
            node.mgr.start_epochs_at(NEAR);
        }
        for value in 1..5 {
            let writer = (value % 3) as u16;
            c.write_u64(writer, x, value).unwrap();
            c.barrier().unwrap();
            for n in 0..3 {
                assert_eq!(
                    c.read_u64(n, x).unwrap(),
                    value,
                    "node {n} after barrier {value}"
                );
            }
            c.barrier().unwrap();
        }
        assert!(c.node_mut(0).epoch > u64::from(u32::MAX));
    }
}

/// A node that takes a lock alone (it manages it) and writes a page homed elsewhere under it
/// fetches the page once, not at every acquire: the grant leaves out its own notices. Another
/// node taking the lock after still reads the last value.
#[cfg(test)]
mod own_notices {
    use super::*;

    #[test]
    fn a_lock_taken_alone_keeps_the_pages_written_under_it() {
        let mut c = Cluster::new(2, 7, |cfg| cfg.prefetch.enabled = false);
        let x = c
            .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE_SIZE as u64)
            .unwrap();
        for value in 1..=20 {
            c.lock(1, 1).unwrap();
            c.write_u64(1, x, value).unwrap();
            c.unlock(1, 1).unwrap();
        }
        let s = c.node_mut(1).stats().clone();
        assert_eq!((s.getp_sent, s.invalidations), (1, 0));
        c.lock(0, 1).unwrap();
        assert_eq!(c.read_u64(0, x).unwrap(), 20);
        c.unlock(0, 1).unwrap();
        // Node 0 wrote nothing: node 1's copy stays; had it written, node 1 would refetch.
        c.lock(1, 1).unwrap();
        assert_eq!(c.read_u64(1, x).unwrap(), 20);
        c.write_u64(1, x, 21).unwrap();
        c.unlock(1, 1).unwrap();
        c.lock(0, 1).unwrap();
        c.write_u64(0, x, 22).unwrap();
        c.unlock(0, 1).unwrap();
        c.lock(1, 1).unwrap();
        assert_eq!(c.read_u64(1, x).unwrap(), 22);
        c.unlock(1, 1).unwrap();
    }
}
