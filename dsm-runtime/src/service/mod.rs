//! The node's service state ([`Service`]: the protocol core and the transport) and the thread
//! that runs it.
//!
//! The state lives behind the door's lock ([`STATE`]). The service thread ([`run`]) holds it
//! while it works: it joins the application's requests (faults and calls, through the door's
//! slots), the network and the core: requests and messages go into the core, the core's messages
//! go out through the transport ([`effects`]), its effects come back as completed requests. When
//! nothing happens it lets go of the state and spins for a bounded time, then sleeps in epoll on
//! the transport, the request eventfd and the launcher's channel ([`control`]).
//!
//! Where this runs: `run.rs` and `control.rs` on the service thread only. The core work (this
//! file, `effects.rs`, `calls.rs`) runs on whichever thread holds the state: the service thread,
//! a fault handler driving its fault ([`crate::fault::drive`], signal context), or an
//! application thread running its own call ([`crate::call`]). All three take, run, poll and let
//! go of it through one interface ([`Driving`]); only this module sees `Service`'s fields. So it keeps to the contract of
//! signal context: what must not run there (printing, files, the launcher exchange after a lost
//! peer) is always left in [`Service::deferred`] for the service thread, wherever it is met.

mod calls;
mod control;
mod driving;
mod effects;
mod run;

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dsm_core::codec::Frame;
use dsm_core::{
    Access, AllocPolicy, Node, NodeId, PAGE_SIZE, PageNum, Time, UsageError, WaiterId, codec,
};
use dsm_transport::Transport;
use dsm_transport::reliable::{Event, LostCause};

pub(crate) use self::calls::Pending;
pub(crate) use self::driving::Driving;
pub(crate) use self::run::run;
use crate::config::Tuning;
use crate::door::end::{EXIT_PEER_FAILED, fatal, fatal_with};
use crate::door::flags::{DRIVEN, HANDED_BACK};
use crate::door::request::{Fault, FaultOutcome, Request};
use crate::door::state::NodeState;
use crate::door::{SLOTS, fastpath};
use crate::region::Region;
use crate::same_host::{InPlaceRun, ReadError};
use crate::stats::{NodeStats, RuntimeStats};
use crate::sys::{self, Epoll};
use crate::trace::{self, Step};

/// The node's state, behind the door's lock.
pub(crate) static STATE: NodeState<Service> = NodeState::new();

/// How long a node that saw a peer's connections close waits for the launcher to name the node
/// that failed first (the launcher polls its children every 10 ms).
const LAUNCHER_VERDICT: Duration = Duration::from_millis(300);
/// How long a node that exited keeps serving so its last messages are acknowledged, at least
/// (see `Service::linger`).
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// How long a node that a self-launching node 0 started waits, once node 0's control connection
/// closed unannounced, before it ends naming node 0 (its last words on the transport win).
const RANK0_GRACE: Duration = Duration::from_millis(200);
/// How long a node in exit waits for its grant after node 0 closed its connections.
const EXIT_GRACE: Duration = Duration::from_secs(2);
/// How long `jia_error` waits for every node to acknowledge its error message before its node
/// ends anyway: well within the second the launcher waits for the node that failed first after
/// another ended because of it.
const ERROR_GRACE: Duration = Duration::from_millis(500);

/// Work met in signal context and left to the service thread.
pub(crate) enum Deferred {
    /// The job's statistics, to write and print (`Effect::JobStats`).
    JobStats(Vec<NodeStats>),
    /// A peer was lost: the launcher is asked which node failed first, then this node ends.
    PeerLost {
        peer: u16,
        silent_for: Duration,
        cause: LostCause,
    },
}

pub(crate) struct Service {
    pub node: Node<Region>,
    pub transport: Option<Box<dyn Transport>>,
    /// What the service thread sleeps on: the request eventfd (token 0), the transport (1) and
    /// the launcher's control channel (2). The transport is in it only while the service thread
    /// sleeps there ([`Service::set_transport_watched`]).
    epoll: Arc<Epoll>,
    /// What it sleeps on while a fault handler drives the node (and reads the transport): the
    /// same without the transport.
    quiet: Arc<Epoll>,
    /// The transport is in `epoll`.
    transport_watched: bool,
    /// The slot of the fault handler driving the node now, if one is.
    driver: Option<usize>,
    /// How it waits (`spin_*`, `drive_*` in the configuration).
    tuning: Tuning,
    /// What a fault handler driving the node left for the service thread (see the module doc).
    deferred: Vec<Deferred>,
    evfd: OwnedFd,
    cookie: u64,
    t0: Instant,
    print_stats: bool,
    exit_waiter: Option<usize>,
    exit_done_at: Option<Instant>,
    /// How long the node, once it left the job, keeps serving until every peer acknowledged
    /// its last messages: the transport's `peer_timeout_ms`, after which it gives up on a
    /// silent peer anyway (and at least [`LINGER`]). A node that left before then had a peer
    /// waiting in `jia_exit` for a message still being resent (UDP at heavy loss): the job was
    /// ended as one that cannot go on.
    pub(crate) linger: Duration,
    /// Frames dropped: wrong cookie, undecodable, or rejected by the protocol.
    pub rejected_frames: u64,
    /// Frames handed to the transport (and one-sided reads issued), since the node started.
    frames_sent: u64,
    /// The channel to whoever watches the job (which node was lost; closed when the launcher is
    /// gone, or when rank 0 ends if it is the watcher).
    control: Option<std::net::TcpStream>,
    /// The watcher is a launcher outside the job (dsmrun), not rank 0.
    launcher_outside: bool,
    /// The control channel is rank 0's, and rank 0 started this node (see
    /// `job::node::Control::started_by_rank0`).
    started_by_rank0: bool,
    /// The control connection's lines, as they complete.
    control_lines: crate::job::wire::Lines,
    control_checked: Instant,
    /// When the program's threads were last looked at ([`Service::check_program_threads`]), and
    /// whether the process was found with none left (once).
    threads_checked: Instant,
    program_ended: bool,
    /// The cache-too-small warning was given (once per node).
    warned_thrashing: bool,
    /// The copies this node dropped when the launcher found it running quiet beside waiting or
    /// quiet nodes (`DSM1 REFRESH`), until said.
    refreshed: Option<control::Refreshed>,
    /// When this node next tells the launcher whether it waits: [`control::REPORT_EVERY`] give
    /// or take an eighth after the last report, whatever wakes the service thread (see
    /// `report_progress`).
    progress_due: Instant,
    /// What was on its way at the last report (see `report_progress`).
    in_flight_sampled: usize,
    /// What this node last told the launcher it does.
    reported: control::Reported,
    /// The page faults of the node's threads counted at the last report; at the last mark, and
    /// when; whether there were few since the mark before (see `count_faults`).
    faults_seen: u64,
    faults_mark: (u64, Instant),
    few_faults: bool,
    /// A one-node job (no launcher watches it): what its threads wait for, since when
    /// unchanged, and whether it was said to look stuck beside a spin (see `report_progress`).
    alone_waiting: Option<(String, Instant, bool)>,
    /// Where node 0 writes every node's statistics as JSON at exit (`DSM_STATS_JSON`): sent to
    /// the launcher on its control channel if there is one (it adds what it knows of the job),
    /// else written there with what this node knows.
    stats_json: Option<String>,
    /// What node 0 writes of the job beside the counters, when it writes the file itself.
    pub(crate) stats_meta: crate::stats::JobMeta,
    /// The transport's counters when the statistics were last zeroed.
    transport_from: Vec<(String, u64)>,
    /// Node 0 closed its connections while we waited for our exit grant: when, and the error
    /// to report if the grant does not arrive within [`EXIT_GRACE`].
    lost_in_exit: Option<(Instant, String)>,
    /// When the self-launching node 0 that started this node was found gone (its control
    /// connection closed before this node left the job).
    rank0_gone_at: Option<Instant>,
    /// The call each waiting thread made, by slot (taken when it is resumed).
    pending: BTreeMap<usize, Pending>,
    /// The thread waiting in `jia_error` for its message to be acknowledged, and since when.
    error_waiter: Option<(usize, Instant)>,
    /// This node is ending with its own error (`jia_error`): another node's error does not end
    /// it first, whatever comes before its thread exits.
    own_error: bool,
    /// When an application thread was last resumed from a call, and which call (until the next
    /// request).
    resumed: Option<(Instant, &'static str)>,
    /// How soon a thread asked again the last time it was resumed from each call: a thread
    /// resumed from `jia_lock` tends to ask again at once (its release), one resumed from
    /// `jia_unlock` or `jia_barrier` goes back to computing.
    gaps_after: BTreeMap<&'static str, Duration>,
    /// Datagrams arrived since the last flush: their acknowledgements go out with the next one
    /// (on the replies, if there are any).
    acks_owed: bool,
    /// The last read of the transport stopped at a message, so more may wait (UDP: see
    /// [`Transport::unread`]). Pure acknowledgements wait until everything is read, to cover
    /// it all.
    unread: bool,
    /// The runtime's counters when the statistics were last zeroed ([`Service::reset_stats`]).
    counted_from: [u64; RuntimeStats::COUNT],
}

impl Service {
    pub fn new(
        node: Node<Region>,
        transport: Option<Box<dyn Transport>>,
        control: Option<crate::job::node::Control>,
        cookie: u64,
        t0: Instant,
        print_stats: bool,
        tuning: Tuning,
    ) -> std::io::Result<Service> {
        let epoll = Epoll::new()?;
        let quiet = Epoll::new()?;
        let evfd = sys::eventfd()?;
        epoll.add(evfd.as_raw_fd(), 0, false)?;
        quiet.add(evfd.as_raw_fd(), 0, false)?;
        let launcher_outside = control.as_ref().is_some_and(|c| c.launcher_outside);
        let started_by_rank0 = control.as_ref().is_some_and(|c| c.started_by_rank0);
        let control = control.map(|c| c.stream);
        if let Some(c) = &control {
            epoll.add(c.as_raw_fd(), 2, false)?;
            quiet.add(c.as_raw_fd(), 2, false)?;
        }
        SLOTS.set_eventfd(evfd.as_raw_fd());
        let node_is_zero = node.id() == NodeId(0);
        Ok(Service {
            node,
            transport,
            epoll: Arc::new(epoll),
            quiet: Arc::new(quiet),
            transport_watched: false,
            driver: None,
            tuning,
            deferred: Vec::new(),
            evfd,
            cookie,
            t0,
            print_stats,
            exit_waiter: None,
            exit_done_at: None,
            linger: LINGER,
            control,
            launcher_outside,
            started_by_rank0,
            control_lines: crate::job::wire::Lines::default(),
            control_checked: Instant::now(),
            threads_checked: Instant::now(),
            program_ended: false,
            warned_thrashing: false,
            refreshed: None,
            progress_due: Instant::now() + control::REPORT_EVERY,
            in_flight_sampled: 0,
            reported: control::Reported::Runs,
            faults_seen: 0,
            faults_mark: (0, Instant::now()),
            few_faults: false,
            alone_waiting: None,
            lost_in_exit: None,
            rank0_gone_at: None,
            pending: BTreeMap::new(),
            error_waiter: None,
            own_error: false,
            resumed: None,
            gaps_after: BTreeMap::new(),
            counted_from: [0; RuntimeStats::COUNT],
            acks_owed: false,
            unread: false,
            stats_json: std::env::var("DSM_STATS_JSON")
                .ok()
                .filter(|p| node_is_zero && !p.is_empty()),
            rejected_frames: 0,
            frames_sent: 0,
            stats_meta: crate::stats::JobMeta::default(),
            transport_from: Vec::new(),
        })
    }

    /// The core's clock.
    pub fn now(&self) -> Time {
        Time(self.t0.elapsed().as_nanos() as u64)
    }

    /// Whether a thread may run its own request on the state (not once the node has exited).
    fn takes_own_requests(&self) -> bool {
        self.exit_done_at.is_none()
    }

    /// One round of work: the fault handlers' fast-path reports, the posted requests (only the
    /// faults, for a fault handler driving the node: calls run on the service thread), the
    /// network, the core's messages and effects, the timers. Returns whether anything happened.
    fn pass(&mut self, faults_only: bool) -> bool {
        // Home pages opened by fault handlers first: a thread's writes are recorded before
        // anything it asks next.
        self.drain_fast_faults();
        let mut busy = SLOTS.take_posted(faults_only, |i, r| self.handle_request(i, r));
        if let Some(t) = &mut self.transport {
            let received = t.poll_recv(Instant::now()) > 0;
            self.acks_owed |= received;
            self.unread = t.unread();
            busy |= received;
        }
        busy |= self.handle_transport_events();
        busy |= self.drain_core();
        // Timers may raise events (a peer found silent): handle them before sleeping, or a
        // 2-node job with nothing else due would sleep on them.
        if self.handle_timers() {
            busy |= self.handle_transport_events();
            busy |= self.drain_core();
        }
        busy
    }

    /// Whether a pass would find work: a posted request, a fault handler's fast-path report, or
    /// something on the transport (read ahead: see [`Transport::poll_ready`]; a UDP poll that
    /// finds the socket empty also clears `unread`). Cheap: spinning threads poll it between
    /// passes.
    fn ready(&mut self) -> bool {
        if SLOTS.posted() > 0 || fastpath::pending() {
            return true;
        }
        let Some(t) = &mut self.transport else {
            return false;
        };
        let ready = t.poll_ready();
        self.unread = t.unread();
        ready
    }

    /// Puts the transport in `epoll` or takes it out. It is there only while the service thread
    /// sleeps there and no fault handler drives the node: a socket in an epoll set has the set on
    /// its wait queue, and that costs every datagram the socket sends or receives a pass through
    /// the set's callback (with interrupts off), even when nobody waits in the set and even for
    /// events the set does not ask for. A loopback ping-pong, 5 interleaved runs each: sendto
    /// 1.7-2.1 us without, 2.1-2.4 us with; perf of faultlat: 9-11% of both sides' `sendto` time.
    fn set_transport_watched(&mut self, watched: bool) {
        let Some(t) = &self.transport else { return };
        if self.transport_watched == watched {
            return;
        }
        if watched {
            if let Err(e) = self.epoll.add(t.fd(), 1, false) {
                fatal(&format!("epoll_ctl on the transport failed: {e}"));
            }
        } else {
            self.epoll.delete(t.fd());
        }
        self.transport_watched = watched;
    }

    /// Whether a thread was resumed from a call less than `within` ago, and asked again sooner
    /// than that the last time it was resumed from the same call: worth spinning for.
    fn asks_again_within(&self, now: Instant, within: Duration) -> bool {
        self.resumed.is_some_and(|(at, call)| {
            now - at < within && self.gaps_after.get(call).is_some_and(|&gap| gap < within)
        })
    }

    fn next_deadline(&self) -> Option<Instant> {
        let t = self.transport.as_ref().and_then(|t| t.poll_timeout());
        let c = self
            .node
            .poll_timeout()
            .map(|c| self.t0 + Duration::from_nanos(c.0));
        let e = self.exit_done_at.map(|d| d + self.linger);
        let g = self.lost_in_exit.as_ref().map(|(at, _)| *at + EXIT_GRACE);
        let r = self.error_waiter.map(|(_, at)| at + ERROR_GRACE);
        let z = self.rank0_gone_at.map(|at| at + RANK0_GRACE);
        let p = self.reports_progress().then_some(self.progress_due);
        [t, c, e, g, r, z, p].into_iter().flatten().min()
    }

    /// Takes a thread's request (posted, or its own on the state).
    fn handle_request(&mut self, slot: usize, request: Request) {
        match request {
            Request::Fault(f) => self.handle_fault(slot, f),
            Request::Call(c) => self.handle_call(slot, c),
        }
    }

    /// A fault: the core fetches or opens the page, and completes the slot when it is in.
    fn handle_fault(&mut self, slot: usize, fault: Fault) {
        self.note_request(slot);
        // The requesting thread's fast-path writes were queued before its request: record them
        // before acting on the request (a release must carry them).
        self.drain_fast_faults();
        if fault.access == Access::Read {
            self.node
                .reading_dropped(PageNum(fault.page), usize::from(fault.offset));
        }
        let now = self.now();
        let waiter = WaiterId(slot as u64);
        if self
            .node
            .handle_fault(now, PageNum(fault.page), fault.access, waiter)
            .is_err()
        {
            SLOTS.complete_fault(slot, FaultOutcome::Unallocated, self.driver != Some(slot));
        }
    }

    /// For the service thread's prediction: how soon a resumed thread asked again.
    fn note_request(&mut self, slot: usize) {
        if self.driver != Some(slot) {
            if let Some((at, call)) = self.resumed.take() {
                self.gaps_after.insert(call, at.elapsed());
            }
        }
    }

    /// Reports the faults fault handlers resolved by themselves.
    pub(super) fn drain_fast_faults(&mut self) {
        let now = self.now();
        let node = &mut self.node;
        fastpath::drain(|o| match o {
            fastpath::Opened::HomeWrite(p) => node.handle_home_write(PageNum(p as u32)),
            fastpath::Opened::Prefetch(p) => {
                node.handle_prefetch_opened(now, PageNum(p as u32), true)
            }
            fastpath::Opened::PrefetchAlong(p) => {
                node.handle_prefetch_opened(now, PageNum(p as u32), false)
            }
        });
    }

    /// The runtime's own counters ([`RuntimeStats::NAMES`]: retransmissions, rejected frames,
    /// driven faults and drives handed back, threads, waits at thread barriers, the service
    /// thread's sleeps and those in the realtime class, requests prepared to land in large
    /// folios), counted since the process started.
    fn runtime_counters(&self) -> [u64; RuntimeStats::COUNT] {
        let (r, j) = self
            .transport
            .as_ref()
            .map_or((0, 0), |t| (t.retransmissions(), t.rejected()));
        // The realtime sleeps first: `run` counts a sleep before it counts it as realtime.
        let realtime = run::SLEEPS_REALTIME.load(Ordering::Acquire);
        let sleeps = run::SLEEPS.load(Ordering::Acquire);
        let (granted_in_place, read_in_place) = self.node.memory().in_place_counts();
        let shown_in_place = self.node.memory().shown_in_place();
        [
            r,
            j + self.rejected_frames,
            DRIVEN.load(Ordering::Relaxed),
            HANDED_BACK.load(Ordering::Relaxed),
            crate::door::threads_seen(),
            crate::team::local_waits(),
            sleeps,
            realtime,
            self.node.memory().large_runs(),
            granted_in_place,
            read_in_place,
            shown_in_place,
        ]
    }

    /// Turns home migration on or off from the next barrier on (`jia_config(HMIG, ...)`).
    pub fn set_home_migration(&mut self, on: bool) {
        self.node.set_home_migration(on);
    }

    /// Zeroes this node's statistics (`jia_startstat`): the core's, and the runtime's counters
    /// it reports from now on.
    pub fn reset_stats(&mut self) {
        self.node.reset_stats();
        self.counted_from = self.runtime_counters();
        self.transport_from = self.transport_counters_now();
    }

    /// The transport's own counters now, by name.
    fn transport_counters_now(&self) -> Vec<(String, u64)> {
        self.transport.as_ref().map_or_else(Vec::new, |t| {
            t.counters()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect()
        })
    }

    /// The runtime's counters since the statistics were last zeroed; also handed to the core,
    /// which sends them to node 0 at exit beside its own.
    pub fn runtime_stats(&mut self) -> RuntimeStats {
        let now = self.runtime_counters();
        let [r, j, d, h, _, b, sl, rt, lf, gi, ri, si] =
            std::array::from_fn(|i| now[i].saturating_sub(self.counted_from[i]));
        let transport = self
            .transport_counters_now()
            .into_iter()
            .map(|(k, v)| {
                let from = self.transport_from.iter().find(|(f, _)| *f == k);
                let v = v.saturating_sub(from.map_or(0, |(_, x)| *x));
                (k, v)
            })
            .collect();
        let stats = RuntimeStats {
            retransmissions: r,
            rejected_frames: j,
            faults_driven: d,
            drives_handed_back: h,
            // Threads over the node's life, not since the counters were zeroed.
            threads: now[4],
            thread_barrier_waits: b,
            service_sleeps: sl,
            // A sleep counted in `counted_from` may be counted as realtime only after it.
            service_sleeps_realtime: rt.min(sl),
            large_folio_requests: lf,
            pages_granted_in_place: gi,
            pages_read_in_place: ri,
            pages_shown_in_place: si,
            transport,
        };
        self.node.note_runtime_counters(stats.to_counters());
        stats
    }

    /// Marks the calling slot as the one waiting in exit (completed after the linger).
    pub fn set_exit_waiter(&mut self, slot: WaiterId) {
        self.exit_waiter = Some(slot.0 as usize);
    }

    fn handle_transport_events(&mut self) -> bool {
        let mut any = false;
        loop {
            let Some(t) = &mut self.transport else {
                return any;
            };
            let Some(ev) = t.poll_event() else { return any };
            any = true;
            match ev {
                Event::Message { from, bytes } => {
                    let now = self.now();
                    // A grant's page is copied once, from these bytes into place (or from its
                    // sender's memory, for a grant in place).
                    match codec::decode_frame_ref(&bytes) {
                        Ok((h, frame)) if h.cookie == self.cookie && h.from.0 == from => {
                            let (granted, result) = match frame {
                                // The bytes of a grant in place, read in its sender's memory
                                // (before the trace's arrival, as a grant's bytes are read).
                                Frame::GrantInPlace {
                                    page,
                                    count,
                                    forwarded,
                                } => {
                                    let run = self.in_place_run(from, page, count);
                                    let data = run.bytes();
                                    let granted = trace::arrived(&Frame::Grant {
                                        page,
                                        data,
                                        forwarded,
                                    });
                                    let grant = (page, data, forwarded);
                                    let result =
                                        self.node.handle_grant_in_place(now, NodeId(from), grant);
                                    (granted, result)
                                }
                                f => (
                                    trace::arrived(&f),
                                    self.node.handle_frame(now, NodeId(from), f),
                                ),
                            };
                            if let Err(e) = result {
                                self.rejected_frames += 1;
                                log::warn!("{e}");
                            }
                            if let Some(p) = granted {
                                trace::stamp(u64::from(p.0), Step::Installed);
                            }
                        }
                        Ok(_) => self.rejected_frames += 1,
                        Err(e) => {
                            self.rejected_frames += 1;
                            log::warn!("undecodable frame from node {from}: {e}");
                        }
                    }
                }
                Event::Read { from, token, bytes } => {
                    // A one-sided read of consecutive pages from page `token`: handled as the
                    // home's grants would be.
                    let now = self.now();
                    let page = PageNum(token as u32);
                    if let Err(e) = self.node.handle_page_read(now, NodeId(from), page, &bytes) {
                        fatal(&format!("one-sided read from {page} of node {from}: {e}"));
                    }
                }
                Event::PeerLost {
                    peer,
                    silent_for,
                    cause,
                } => {
                    // Asks the launcher and waits for it: the service thread's work, on its next
                    // pass (a driving handler sees it queued and hands its wait back).
                    self.deferred.push(Deferred::PeerLost {
                        peer,
                        silent_for,
                        cause,
                    });
                    SLOTS.nudge_service();
                    return true;
                }
            }
        }
    }

    /// The pages of a grant in place from `from`, read in its memory. One that cannot be read
    /// ends the job, saying why: the pages would never come otherwise (a home sends in place
    /// only to a node that asked for its memory, once its answer is sent).
    fn in_place_run(&mut self, from: u16, page: PageNum, count: u16) -> InPlaceRun {
        let why = match self.node.memory_mut().read_in_place(from, page, count) {
            Some(Ok(run)) => return run,
            Some(Err(ReadError::NotMapped)) => format!(
                "its memory could not be mapped here ({})",
                self.node
                    .memory()
                    .in_place_refusals()
                    .unwrap_or_else(|| "it was never asked for".into())
            ),
            Some(Err(ReadError::OutOfRegion)) => {
                format!("{count} pages from {page} reach past the shared region")
            }
            None => "this node reads no memory in place".into(),
        };
        fatal(&format!(
            "node {from} granted pages from {page} in its memory, but {why}; set same_host = \
             transport to move pages through {}",
            self.transport
                .as_ref()
                .map_or("the transport", |t| t.name())
        ))
    }

    /// Does what the core work left for the service thread (service thread only).
    pub(super) fn run_deferred(&mut self) {
        for work in std::mem::take(&mut self.deferred) {
            self.handle_deferred(work);
        }
    }

    fn handle_deferred(&mut self, work: Deferred) {
        match work {
            Deferred::JobStats(nodes) => self.report_job_stats(&nodes),
            Deferred::PeerLost {
                peer,
                silent_for,
                cause,
            } => self.handle_peer_lost(peer, silent_for, cause),
        }
    }

    /// A peer is gone: unless this node is done with it, end naming it (after hearing from the
    /// launcher which node failed first). Service thread only.
    fn handle_peer_lost(&mut self, peer: u16, silent_for: Duration, cause: LostCause) {
        // A peer that exits right after the job's exit grant closes its connections: let the
        // grant (delivered just before) take effect first.
        self.drain_core();
        // In exit, a node other than node 0 closing its connections has its exit grant, so ours
        // is on its way from node 0: not a failure. (A close with bytes still unread, which many
        // nodes make likely, reaches us as a reset: the same end.)
        let in_exit = self.exit_waiter.is_some()
            && matches!(
                cause,
                LostCause::ConnectionClosed | LostCause::ConnectionFailed
            );
        let peer_done = in_exit && peer != 0;
        if self.exit_done_at.is_some() || peer_done {
            return;
        }
        let what = if cause == LostCause::Silent {
            // Datagrams this job drops itself may be the cause: say so.
            let impaired = std::env::var("DSM_IMPAIR")
                .map(|spec| format!("; DSM_IMPAIR={spec} drops this job's datagrams"))
                .unwrap_or_default();
            // srun waits for every task, a stopped one too, unless told to end them.
            let srun = crate::job::cluster::cluster_rank_size()
                .is_some_and(|(_, _, who)| who == "srun")
                && std::env::var("SLURM_KILL_BAD_EXIT").as_deref() != Ok("1");
            let stopped = if srun {
                "; a stopped task keeps srun waiting: srun --kill-on-bad-exit=1 ends it"
            } else {
                ""
            };
            format!(
                "no answer for {:.1} s (it died, stopped or is unreachable{impaired}{stopped})",
                silent_for.as_secs_f64()
            )
        } else {
            format!("{cause} (the node died or its host is unreachable)")
        };
        let msg = format!("lost node {peer}: {what}");
        if in_exit {
            // Node 0 closes its connections once it has sent every exit grant; ours may still
            // wait in a queue polled after the closing was seen (RDMA: the completion queue).
            // Fail only if it does not come.
            self.lost_in_exit.get_or_insert((Instant::now(), msg));
        } else {
            if cause == LostCause::ConnectionClosed {
                self.hear_launcher(LAUNCHER_VERDICT);
            }
            self.blame(peer, &what);
            fatal_with(&msg, EXIT_PEER_FAILED);
        }
    }

    /// Allocates collectively; with one-sided reads, registers this node's home pages of the
    /// allocation with the transport so peers can read them without asking.
    pub fn alloc(&mut self, policy: AllocPolicy, bytes: u64) -> Result<u64, UsageError> {
        let first_page = self.node.pages_allocated();
        let addr = self.node.alloc(policy, bytes)?;
        if self.node.config().remote_reads {
            let me = self.node.id();
            let homes: Vec<usize> = (first_page..self.node.pages_allocated())
                .filter(|&p| self.node.home_of(PageNum(p as u32)) == Some(me))
                .collect();
            if let (Some(&lo), Some(&hi), Some(t)) =
                (homes.first(), homes.last(), self.transport.as_mut())
            {
                // One registration from the first home page to the last: pages of other homes
                // in between are pinned too but never read remotely.
                let off = lo * PAGE_SIZE;
                let len = (hi + 1 - lo) * PAGE_SIZE;
                let ptr = self.node.memory().service_addr(off);
                // SAFETY: `off..off + len` lies in the region (its pages are allocated); the
                // service view maps it read and write for the life of the process, never
                // unmapped or remapped, so it outlives the transport; peers read only home pages
                // there, which the protocol serves them anyway.
                #[allow(unsafe_code)]
                let exported = unsafe { t.export(off as u64, ptr, len) };
                if let Err(e) = exported {
                    fatal(&format!(
                        "registering {len} bytes of home pages for one-sided reads: {e} \
                         (raise `ulimit -l`, or set one_sided_reads = off)"
                    ));
                }
            }
        }
        Ok(addr.0)
    }

    /// Runs what is due; returns whether anything was.
    fn handle_timers(&mut self) -> bool {
        let now = Instant::now();
        let mut ran = false;
        if let Some(t) = &mut self.transport {
            if t.poll_timeout().is_some_and(|d| d <= now) {
                t.handle_timeout(now);
                ran = true;
            }
        }
        if let Some(c) = self.node.poll_timeout() {
            let n = self.now();
            if c <= n {
                self.node.handle_timeout(n);
                ran = true;
            }
        }
        ran
    }

    /// After exit: keep serving until our messages are acknowledged (or the linger ends).
    fn exit_finished(&mut self) -> bool {
        let Some(done) = self.exit_done_at else {
            return false;
        };
        let idle = self.all_acknowledged();
        if idle || done.elapsed() > self.linger {
            if idle {
                log::debug!("left the job: every node acknowledged its last messages");
            } else {
                log::debug!("left the job: the exit linger ran out, messages unacknowledged");
            }
            if let Some(slot) = self.exit_waiter.take() {
                SLOTS.complete_call(slot, Ok(crate::door::request::Reply::Done), true);
            }
            return true;
        }
        false
    }

    /// Whether every peer has acknowledged everything this node sent it.
    fn all_acknowledged(&self) -> bool {
        self.transport
            .as_ref()
            .is_none_or(|t| (0..self.node.nodes()).all(|p| t.pending(p) == 0))
    }

    /// Reads what waits on the transport (up to 64 reads) and flushes: a read that finds the
    /// socket empty lets the acknowledgements no reply carried go (UDP, RDMA UD); then the
    /// farewell repeats them, for a lost one. For a node about to close its transport or end.
    pub(crate) fn acknowledge_what_came(&mut self) {
        if let Some(t) = &mut self.transport {
            for _ in 0..64 {
                if t.poll_recv(Instant::now()) == 0 {
                    break;
                }
            }
            t.flush(Instant::now());
            t.farewell(Instant::now());
        }
    }

    /// `jia_error`'s wait: its message is acknowledged by every node (or [`ERROR_GRACE`]
    /// passed): the thread may end the node.
    fn error_sent(&mut self) {
        let Some((slot, since)) = self.error_waiter else {
            return;
        };
        let acked = self.all_acknowledged();
        if acked || since.elapsed() > ERROR_GRACE {
            self.error_waiter = None;
            SLOTS.complete_call(slot, Ok(crate::door::request::Reply::Done), true);
        }
    }
}

/// A spinning thread (the service thread, a driving fault handler) runs a full pass at least
/// every this many polls of [`Service::ready`] (for the timers, the launcher's channel and the
/// clock). A poll is a `recvfrom` and two loads (0.15-0.2 us here), a full pass 3-4 times that
/// with its clock reads and timer checks: polling between passes reads a message about 0.15 us
/// sooner on each side of a remote fault (fault trace: GETP sent -> read at the home 0.52 ->
/// 0.37 us, grant sent -> read 0.7 -> 0.6 us).
pub(crate) const POLLS_PER_PASS: u32 = 16;
/// A driving fault handler reads the clock every this many polls (to know when to sleep).
pub(crate) const POLLS_PER_CLOCK: u32 = 8;
