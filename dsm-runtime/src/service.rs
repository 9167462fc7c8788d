//! The service thread, and the node's service state it shares with driving fault handlers.
//!
//! The state (the protocol core and the transport, [`Service`]) lives behind a mutex. The service
//! thread's loop holds it while it works: it joins the application's requests (faults and calls,
//! through [`crate::slots`]), the network and the core: requests and messages go into the core,
//! the core's messages go out through the transport, its effects come back as resumed threads.
//! When nothing happens it lets go of the state and spins for a bounded time (a reply is usually
//! microseconds away), then sleeps in epoll on the transport's socket and the request eventfd,
//! with the next timer as the timeout: two processes spinning on a 2-CPU machine would starve the
//! kernel's own network work.
//!
//! A faulting thread that finds the state free takes it and serves its own fault ([`drive_fault`]):
//! the same work, on the thread that waits for it, without the two wake-ups of a hand-off.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use dsm_core::{
    Access, AllocPolicy, Effect, Msg, Node, NodeId, PAGE_SIZE, PageNum, Stats, Time, UsageError,
    WaiterId, codec,
};
use dsm_transport::reliable::Event;
use dsm_transport::{ReadRange, Transport};

use crate::region::Region;
use crate::slots::{self, OP_CALL, OP_FAULT_READ, OP_FAULT_WRITE, SLOTS};
use crate::sys::{self, Epoll, signals, stack};
use crate::trace::{self, Step};
use crate::{fatal, stats_table};

/// A request run on the service thread: `Ok(Some(v))` completes at once with `v`, `Ok(None)`
/// waits for the core to resume the caller.
pub(crate) type CallFn =
    Box<dyn FnOnce(&mut Service, WaiterId) -> Result<Option<u64>, UsageError> + Send>;

/// Calls waiting to be taken, by slot.
pub(crate) static CALLS: Mutex<BTreeMap<usize, CallFn>> = Mutex::new(BTreeMap::new());
/// Errors of completed calls, by slot.
pub(crate) static CALL_ERRORS: Mutex<BTreeMap<usize, UsageError>> = Mutex::new(BTreeMap::new());
/// Result word of a call that failed (its error is in [`CALL_ERRORS`]).
pub(crate) const CALL_FAILED: u64 = u64::MAX;

/// How long the loop spins, by default, while an application thread is blocked on it (a fault,
/// a lock, a barrier) before it sleeps. A reply is usually tens of microseconds away (a remote
/// fault is 30-40 us here), and a sleeping thread pays a wake-up: up to hundreds of
/// microseconds when its CPU went idle (85-330 us for an idle virtual CPU in the 2-CPU VM this
/// was tuned on). Longer spins cost more than they save where CPUs are shared: a spinning
/// service thread (even one that yields) takes time from the computing threads of the other
/// nodes, and its yields cost it its standing with the scheduler (see [`SERVICE_SLICE`]). sor
/// 1024 x 100 on 2 nodes, 16 interleaved runs: compute median 0.47 s with 20 ms, 0.31 s with
/// 200 us; matmul 1024 and lu 1024 unchanged.
const SPIN_BLOCKED: Duration = Duration::from_micros(200);
/// After resuming a thread, the loop spins this long (by default) for its next request, but only
/// if the last request came this soon after its thread's resumption: a thread that faults page
/// after page is served without a wake-up each time (faultlat's remote read fault, 5 interleaved
/// runs: median 34-39 us -> 24-32 us), while a thread that goes back to computing leaves its CPU alone (spinning
/// after every request made sor 1024 x 100 on 2 nodes 0.47 s -> 0.40 s when removed: the
/// spinning thread lost its standing with the scheduler, see [`SERVICE_SLICE`]).
const SPIN_AGAIN: Duration = Duration::from_micros(100);
/// The time slice the service thread asks the scheduler for (`sched_setattr`; Linux 6.12 and
/// later). Under EEVDF, `sched_yield` moves the yielding thread's deadline a whole slice ahead
/// (1.4 ms by default here): after spinning, the service thread had lost so much standing that
/// once preempted by a computing application thread it waited for that thread's slice to end,
/// and a page request from another node waited with it (median 0.7-1.1 ms traced in sor).
/// With a short slice each yield costs little, and a wake-up of the service thread preempts the
/// computation it shares a CPU with.
const SERVICE_SLICE: Duration = Duration::from_micros(100);

/// How long a driving fault handler polls the transport before it sleeps on it (by default;
/// `DSM_DRIVE_SPIN_US`): a page from an idle home comes in 15-20 us here.
const DRIVE_SPIN: Duration = Duration::from_micros(30);
/// How long a fault handler drives before it hands its wait back to the service thread (by
/// default; `DSM_DRIVE_LIMIT_US`). Sleeping on the transport, it is woken by the reply as the
/// service thread would be, so handing back earlier would only add a wake-up.
const DRIVE_LIMIT: Duration = Duration::from_millis(2);

fn env_us(name: &str, default: Duration) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(default, Duration::from_micros)
}
/// How long a node that saw a peer's connections close waits for the launcher to name the node
/// that failed first (the launcher polls its children every 10 ms).
const LAUNCHER_VERDICT: Duration = Duration::from_millis(300);
/// How long a node that exited keeps serving so its last messages are acknowledged.
const LINGER: Duration = Duration::from_secs(2);
/// How long a node in exit waits for its grant after node 0 closed its connections.
const EXIT_GRACE: Duration = Duration::from_secs(2);

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
    /// How long a thread blocked on the node is waited for by spinning (`DSM_SPIN_BLOCKED_US`).
    spin_blocked: Duration,
    /// How long a driving fault handler polls before it sleeps on the transport
    /// (`DSM_DRIVE_SPIN_US`), and how long it drives before handing its wait back to the service
    /// thread (`DSM_DRIVE_LIMIT_US`).
    drive_spin: Duration,
    drive_limit: Duration,
    evfd: OwnedFd,
    cookie: u64,
    t0: Instant,
    print_stats: bool,
    exit_waiter: Option<usize>,
    exit_done_at: Option<Instant>,
    /// Frames dropped: wrong cookie, undecodable, or rejected by the protocol.
    pub rejected_frames: u64,
    /// The launcher's control channel (which node was lost; closed when the launcher is gone).
    control: Option<std::net::TcpStream>,
    control_buf: Vec<u8>,
    control_checked: Instant,
    /// The cache-too-small warning was given (once per node).
    warned_thrashing: bool,
    /// When this node last told the launcher whether it waits, and whether it did.
    progress_reported: Instant,
    reported_waiting: bool,
    /// Where node 0 writes every node's statistics as JSON at exit (`DSM_STATS_JSON`).
    stats_json: Option<String>,
    /// Node 0 closed its connections while we waited for our exit grant: when, and the error
    /// to report if the grant does not arrive within [`EXIT_GRACE`].
    lost_in_exit: Option<(Instant, String)>,
    /// When an application thread was last resumed from a call (until its next request).
    resumed_at: Option<Instant>,
    /// How soon after its thread's resumption the last request came.
    request_gap: Duration,
    /// Datagrams arrived since the last flush: their acknowledgements go out with the next one
    /// (on the replies, if there are any).
    acks_owed: bool,
    /// The last read of the transport stopped at a message, so more may wait (UDP: see
    /// [`Transport::unread`]). Pure acknowledgements wait until everything is read, to cover
    /// it all.
    unread: bool,
    /// The runtime's counters when the statistics were last zeroed ([`Service::reset_stats`]).
    counted_from: [u64; 4],
}

impl Service {
    pub fn new(
        node: Node<Region>,
        transport: Option<Box<dyn Transport>>,
        control: Option<std::net::TcpStream>,
        cookie: u64,
        t0: Instant,
        print_stats: bool,
    ) -> std::io::Result<Service> {
        let epoll = Epoll::new()?;
        let quiet = Epoll::new()?;
        let evfd = sys::eventfd()?;
        epoll.add(evfd.as_raw_fd(), 0, false)?;
        quiet.add(evfd.as_raw_fd(), 0, false)?;
        if let Some(c) = &control {
            epoll.add(c.as_raw_fd(), 2, false)?;
            quiet.add(c.as_raw_fd(), 2, false)?;
        }
        SLOTS.eventfd.store(evfd.as_raw_fd(), Ordering::SeqCst);
        let node_is_zero = node.id() == NodeId(0);
        Ok(Service {
            node,
            transport,
            epoll: Arc::new(epoll),
            quiet: Arc::new(quiet),
            transport_watched: false,
            driver: None,
            spin_blocked: env_us("DSM_SPIN_BLOCKED_US", SPIN_BLOCKED),
            drive_spin: env_us("DSM_DRIVE_SPIN_US", DRIVE_SPIN),
            drive_limit: env_us("DSM_DRIVE_LIMIT_US", DRIVE_LIMIT),
            evfd,
            cookie,
            t0,
            print_stats,
            exit_waiter: None,
            exit_done_at: None,
            control,
            control_buf: Vec::new(),
            control_checked: Instant::now(),
            warned_thrashing: false,
            progress_reported: Instant::now(),
            reported_waiting: false,
            lost_in_exit: None,
            resumed_at: None,
            request_gap: Duration::MAX,
            counted_from: [0; 4],
            acks_owed: false,
            unread: false,
            stats_json: std::env::var("DSM_STATS_JSON")
                .ok()
                .filter(|p| node_is_zero && !p.is_empty()),
            rejected_frames: 0,
        })
    }

    /// The core's clock.
    pub fn now(&self) -> Time {
        Time(self.t0.elapsed().as_nanos() as u64)
    }

    /// One round of work: the fault handlers' fast-path reports, the posted requests (only the
    /// faults, for a fault handler driving the node: calls run on the service thread), the
    /// network, the core's messages and effects, the timers. Returns whether anything happened.
    fn pass(&mut self, faults_only: bool) -> bool {
        // Home pages opened by fault handlers first: a thread's writes are recorded before
        // anything it asks next.
        self.drain_fast_faults();
        let mut busy =
            slots::take_posted(faults_only, |i, op, arg| self.handle_request(i, op, arg));
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
        if SLOTS.posted.load(Ordering::Relaxed) > 0 || crate::fastpath::pending() {
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

    /// Reads the launcher's control channel: `DSM1 LOST <node> <how>` ends this node naming the
    /// lost one; the channel closing means the launcher is gone.
    fn check_control(&mut self) {
        self.control_checked = Instant::now();
        let Some(c) = &mut self.control else { return };
        let mut buf = [0u8; 512];
        loop {
            match std::io::Read::read(c, &mut buf) {
                Ok(0) => {
                    if self.exit_done_at.is_none() {
                        fatal(
                            "the launcher is gone (its control connection closed); ending this node",
                        );
                    }
                    self.control = None;
                    return;
                }
                Ok(n) => self.control_buf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => fatal(&format!("the launcher's control connection failed: {e}")),
            }
        }
        while let Some(end) = self.control_buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.control_buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let mut w = line.split_whitespace();
            if let (Some("DSM1"), Some("LOST"), Some(node)) = (w.next(), w.next(), w.next()) {
                let how: Vec<&str> = w.collect();
                crate::fatal_with(
                    &format!(
                        "lost node {node}: it {} (reported by the launcher)",
                        how.join(" ")
                    ),
                    crate::EXIT_PEER_FAILED,
                );
            }
        }
    }

    /// Tells the launcher this node left the job properly (`DSM1 BYE`): a node that exits without
    /// it (the program returned from main, or called exit, without jia_exit) is named at once as
    /// the one that failed, not a survivor left waiting for it.
    fn say_goodbye(&mut self) {
        if let Some(c) = &mut self.control {
            // The socket is non-blocking; a few bytes always fit. A launcher already gone is
            // found by check_control.
            let _ = std::io::Write::write_all(c, b"DSM1 BYE\n");
        }
    }

    /// Warns once, on this node's standard error, when its page cache thrashes: as many pages
    /// faulted on again in the barrier epoch that evicted them as the cache holds. Such a job
    /// fetches its pages over and over and may run many times slower than with a larger cache,
    /// with no other sign. (Service thread only: it prints.)
    fn warn_if_thrashing(&mut self) {
        if self.warned_thrashing {
            return;
        }
        let again = self.node.stats().refetched_after_eviction;
        let cache = self.node.config().cache_pages;
        if again < cache.max(1024) as u64 {
            return;
        }
        self.warned_thrashing = true;
        // What the program allocated: a cache as large as every page it can touch never evicts.
        let allocated = self.node.pages_allocated();
        let suggest = allocated.clamp(cache * 2, 1 << 24);
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "dsm node {}: warning: the page cache is too small for this program: {again} pages \
             were fetched again in the barrier epoch that evicted them (cache_pages = {cache}, \
             pages of 4 KiB); the job may run many times slower. Raise it: --set \
             cache_pages={suggest} (or DSM_CACHE_PAGES, or cache_pages in .jiaconf)",
            self.node.id().0,
        );
    }

    /// Tells the launcher, every 250 ms while this node waits (every thread that uses the DSM is
    /// in a call that waits for other nodes: see [`crate::progress`]), what it waits for, the
    /// locks it holds, the messages it still has on their way and those it has received:
    /// `DSM1 WAIT <in flight> <received> <what>`; and `DSM1 RUN` once it goes on. The launcher
    /// ends a job whose every node waits with nothing in flight and nothing received for a while.
    fn report_progress(&mut self) {
        if self.control.is_none() || self.progress_reported.elapsed() < Duration::from_millis(250) {
            return;
        }
        self.progress_reported = Instant::now();
        let line = match crate::progress::node_waits() {
            Some(what) => {
                let held = self.node.locks_held();
                let held = if held.is_empty() {
                    String::new()
                } else {
                    let l: Vec<String> = held.iter().map(|l| l.0.to_string()).collect();
                    format!(", holding lock {}", l.join(", "))
                };
                let in_flight: usize = match &self.transport {
                    Some(t) => (0..self.node.nodes()).map(|p| t.pending(p)).sum(),
                    None => 0,
                };
                let received: u64 = self.node.stats().msgs_received.iter().sum();
                self.reported_waiting = true;
                format!("DSM1 WAIT {in_flight} {received} waits in {what}{held}\n")
            }
            None if self.reported_waiting => {
                self.reported_waiting = false;
                "DSM1 RUN\n".to_string()
            }
            None => return,
        };
        if let Some(c) = &mut self.control {
            let _ = std::io::Write::write_all(c, line.as_bytes());
        }
    }

    /// Tells the launcher which node this one ends for (`DSM1 BLAME <node> <why>`): a node that
    /// stops answering (SIGSTOP, a dead host) never ends by itself, and its survivors end first;
    /// the launcher follows the blame to it.
    fn blame(&mut self, peer: u16, why: &str) {
        if let Some(c) = &mut self.control {
            let line = format!("DSM1 BLAME {peer} {}\n", why.replace('\n', " "));
            let _ = std::io::Write::write_all(c, line.as_bytes());
        }
    }

    /// A peer's connections closed: it died, or it ended because another node did (a node that
    /// fails closes its connections). The launcher knows which node failed first and tells every
    /// node (`DSM1 LOST`, which ends this one in [`Service::check_control`]): listen for it up
    /// to `within`, so every survivor names the same node, the one that failed. (A node whose
    /// fault handler was driving the node could see a second survivor's connections close
    /// before the victim's.)
    fn hear_launcher(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while let Some(c) = &self.control {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            sys::wait_readable(&[c.as_fd()], left.min(Duration::from_millis(10)));
            self.check_control();
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let t = self.transport.as_ref().and_then(|t| t.poll_timeout());
        let c = self
            .node
            .poll_timeout()
            .map(|c| self.t0 + Duration::from_nanos(c.0));
        let e = self.exit_done_at.map(|d| d + LINGER);
        let g = self.lost_in_exit.as_ref().map(|(at, _)| *at + EXIT_GRACE);
        [t, c, e, g].into_iter().flatten().min()
    }

    fn handle_request(&mut self, slot: usize, op: u32, arg: u64) {
        if self.driver != Some(slot) {
            if let Some(r) = self.resumed_at.take() {
                self.request_gap = r.elapsed();
            }
        }
        // The requesting thread's fast-path writes were queued before its request was posted:
        // record them before acting on the request (a release must carry them).
        self.drain_fast_faults();
        let now = self.now();
        match op {
            OP_FAULT_READ | OP_FAULT_WRITE => {
                let access = if op == OP_FAULT_READ {
                    Access::Read
                } else {
                    Access::Write
                };
                let page = PageNum(arg.min(u64::from(u32::MAX)) as u32);
                if self
                    .node
                    .handle_fault(now, page, access, WaiterId(slot as u64))
                    .is_err()
                {
                    slots::complete(slot, signals::FAULT_UNALLOCATED);
                }
            }
            OP_CALL => {
                let call = CALLS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&slot);
                let Some(call) = call else {
                    return slots::complete(slot, CALL_FAILED);
                };
                match call(self, WaiterId(slot as u64)) {
                    Ok(Some(v)) => slots::complete(slot, v),
                    Ok(None) => {}
                    Err(e) => {
                        CALL_ERRORS
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(slot, e);
                        slots::complete(slot, CALL_FAILED);
                    }
                }
            }
            _ => slots::complete(slot, CALL_FAILED),
        }
    }

    /// Reports the faults fault handlers resolved by themselves.
    fn drain_fast_faults(&mut self) {
        let now = self.now();
        let node = &mut self.node;
        crate::fastpath::drain(|o| match o {
            crate::fastpath::Opened::HomeWrite(p) => node.handle_home_write(PageNum(p as u32)),
            crate::fastpath::Opened::Prefetch(p) => {
                node.handle_prefetch_opened(now, PageNum(p as u32), true)
            }
            crate::fastpath::Opened::PrefetchAlong(p) => {
                node.handle_prefetch_opened(now, PageNum(p as u32), false)
            }
        });
    }

    /// The runtime's own counters (retransmissions, rejected frames, driven faults, drives
    /// handed back), counted since the process started.
    fn runtime_counters(&self) -> [u64; 4] {
        let (r, j) = self
            .transport
            .as_ref()
            .map_or((0, 0), |t| (t.retransmissions(), t.rejected()));
        [
            r,
            j + self.rejected_frames,
            DRIVEN.load(Ordering::Relaxed),
            HANDED_BACK.load(Ordering::Relaxed),
        ]
    }

    /// Zeroes this node's statistics (`jia_startstat`): the core's, and the runtime's counters
    /// it reports from now on.
    pub fn reset_stats(&mut self) {
        self.node.reset_stats();
        self.counted_from = self.runtime_counters();
    }

    /// Copies the transport's counters and the count of driven faults, since the statistics were
    /// last zeroed, into the core's statistics.
    pub fn note_transport(&mut self) {
        let now = self.runtime_counters();
        let [r, j, d, h] = std::array::from_fn(|i| now[i].saturating_sub(self.counted_from[i]));
        self.node.note_transport(r, j);
        self.node.note_drives(d, h);
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
                    // A grant's page is copied once, from these bytes into place.
                    match codec::decode_frame_ref(&bytes) {
                        Ok((h, frame)) if h.cookie == self.cookie && h.from.0 == from => {
                            let granted = trace::arrived(&frame);
                            if let Err(e) = self.node.handle_frame(now, NodeId(from), frame) {
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
                    for (i, chunk) in bytes.chunks_exact(PAGE_SIZE).enumerate() {
                        let data = chunk.try_into().expect("a page's bytes");
                        let page = PageNum(token as u32 + i as u32);
                        if let Err(e) = self.node.handle_page_read(now, NodeId(from), page, data) {
                            fatal(&format!("one-sided read of {page} from node {from}: {e}"));
                        }
                    }
                }
                Event::PeerLost {
                    peer,
                    silent_for,
                    cause,
                } => {
                    // A peer that exits right after the job's exit grant closes its connections:
                    // let the grant (delivered just before) take effect first.
                    self.drain_core();
                    // In exit, a node other than node 0 closing its connections has its exit
                    // grant, so ours is on its way from node 0: not a failure.
                    let in_exit = self.exit_waiter.is_some() && cause == "connection closed";
                    let peer_done = in_exit && peer != 0;
                    if self.exit_done_at.is_none() && !peer_done {
                        let what = if cause == "silent" {
                            format!(
                                "no answer for {:.1} s (it died, stopped or is unreachable)",
                                silent_for.as_secs_f64()
                            )
                        } else {
                            format!("{cause} (the node died or its host is unreachable)")
                        };
                        let msg = format!("lost node {peer}: {what}");
                        if in_exit {
                            // Node 0 closes its connections once it has sent every exit grant;
                            // ours may still wait in a queue polled after the closing was seen
                            // (RDMA: the completion queue). Fail only if it does not come.
                            self.lost_in_exit.get_or_insert((Instant::now(), msg));
                        } else {
                            if cause == "connection closed" {
                                self.hear_launcher(LAUNCHER_VERDICT);
                            }
                            self.blame(peer, &what);
                            crate::fatal_with(&msg, crate::EXIT_PEER_FAILED);
                        }
                    }
                }
            }
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
                if let Err(e) = t.export(off as u64, ptr, len) {
                    fatal(&format!(
                        "registering {len} bytes of home pages for one-sided reads: {e} \
                         (raise `ulimit -l`, or set one_sided_reads = off)"
                    ));
                }
            }
        }
        Ok(addr.0)
    }

    /// Turns a GETP into one-sided reads of the home's memory, one per run of consecutive
    /// pages; `false` (nothing issued) when the transport cannot take them all now.
    fn read_one_sided(&mut self, home: NodeId, pages: &[PageNum]) -> bool {
        let Some(t) = self.transport.as_mut() else {
            return false;
        };
        let max_pages = (t.max_read() / PAGE_SIZE).max(1);
        let mut runs: Vec<(PageNum, usize)> = Vec::new();
        for &p in pages {
            match runs.last_mut() {
                Some((first, n)) if first.0 as usize + *n == p.0 as usize && *n < max_pages => {
                    *n += 1
                }
                _ => runs.push((p, 1)),
            }
        }
        let ranges: Vec<ReadRange> = runs
            .into_iter()
            .map(|(p, n)| ReadRange {
                offset: p.index() as u64 * PAGE_SIZE as u64,
                len: n * PAGE_SIZE,
                token: u64::from(p.0),
            })
            .collect();
        t.read(Instant::now(), home.0, &ranges)
    }

    fn drain_core(&mut self) -> bool {
        let mut any = false;
        let one_sided = self.node.config().remote_reads;
        let mut fetching: Vec<PageNum> = Vec::new();
        // Grants sent, for the fault trace.
        let mut granted: Vec<PageNum> = Vec::new();
        while let Some(tx) = self.node.poll_transmit() {
            any = true;
            if let (true, Msg::GetPageGrant { page, .. }) = (trace::on(), &tx.msg) {
                granted.push(*page);
            }
            if let Msg::GetPage { pages, .. } = &tx.msg {
                fetching.extend_from_slice(pages);
            }
            if let (true, Msg::GetPage { pages, .. }) = (one_sided, &tx.msg) {
                if self.read_one_sided(tx.to, pages) {
                    self.node.sent_as_reads(&tx.msg);
                    continue;
                }
            }
            // Encoded into a buffer of its own, which the transport keeps (UDP and RDMA queue
            // it without copying it again).
            let mut frame = Vec::with_capacity(codec::frame_len(&tx.msg));
            codec::encode_frame(self.cookie, self.node.id(), &tx.msg, &mut frame);
            match &mut self.transport {
                Some(t) => t.send_owned(Instant::now(), tx.to.0, frame),
                None => fatal("a one-node job tried to send a message"),
            }
        }
        if any {
            // The acknowledgements owed ride on these messages (those to other peers too, once
            // everything is read).
            self.acks_owed &= self.unread;
            if let Some(t) = &mut self.transport {
                t.flush(Instant::now());
            }
        }
        if trace::on() {
            for p in &fetching {
                trace::stamp(u64::from(p.0), Step::GetpSent);
            }
            for p in &granted {
                trace::stamp(u64::from(p.0), Step::GrantSent);
            }
        }
        // While the requests (messages or one-sided reads) travel: back the pages they will fill
        // with memory, by runs.
        let mut rest = fetching.as_slice();
        while let Some(&first) = rest.first() {
            let run = rest
                .iter()
                .enumerate()
                .take_while(|&(i, p)| p.0 == first.0 + i as u32)
                .count();
            self.node.memory().prepare(first, run);
            rest = &rest[run..];
        }
        while let Some(effect) = self.node.poll_effect() {
            any = true;
            match effect {
                Effect::Resume { waiter } => {
                    let slot = waiter.0 as usize;
                    if self.exit_waiter == Some(slot) {
                        self.exit_done_at = Some(Instant::now());
                        self.say_goodbye();
                    } else if self.driver == Some(slot) {
                        // The fault handler completing this is the thread it resumes.
                        slots::complete_quietly(slot, 0);
                    } else {
                        slots::complete(slot, 0);
                        // A thread resumed from a call may ask again at once (see `run`); one
                        // resumed from a posted fault drives its next fault itself if it finds
                        // the state free, and a service thread spinning for it only stands in
                        // its way (see `take_state`).
                        if slots::posted_call(slot) {
                            self.resumed_at = Some(Instant::now());
                        }
                    }
                }
                Effect::JobStats { nodes } => {
                    if let Some(path) = &self.stats_json {
                        if let Err(e) = std::fs::write(path, Stats::to_json(&nodes)) {
                            eprintln!("dsm node 0: cannot write statistics to {path}: {e}");
                        }
                    }
                    if self.print_stats {
                        eprint!(
                            "{}",
                            stats_table::render(&nodes, &self.transport_counters())
                        );
                    }
                }
                Effect::Abort { error } => match error {
                    dsm_core::JobError::Remote { .. } => {
                        crate::fatal_with(&error.to_string(), crate::EXIT_PEER_FAILED)
                    }
                    _ => fatal(&error.to_string()),
                },
            }
        }
        // The home pages served untracked are tracked from now on (their grants are sent): the
        // protection this takes was kept off the requesters' wait.
        self.node.settle_serves();
        self.node.warm_ahead();
        // Pure acknowledgements last: after the threads they concern are running again.
        // A fault handler driving the node leaves them to the next message it sends (its next
        // GETP) or to the service thread, which wakes within [`DRIVEN_NAP`] of a drive: a
        // sendto here would delay the thread's return by its cost (3 us).
        if self.driver.is_none() && !self.unread && std::mem::take(&mut self.acks_owed) {
            if let Some(t) = &mut self.transport {
                t.flush(Instant::now());
            }
        }
        any
    }

    /// Node 0's transport counters, for the statistics table.
    fn transport_counters(&self) -> Vec<(String, u64)> {
        let Some(t) = &self.transport else {
            return Vec::new();
        };
        let mut v: Vec<(String, u64)> = t
            .counters()
            .into_iter()
            .map(|(k, v)| (format!("node 0 {} {k}", t.name()), v))
            .collect();
        v.push(("node 0 rejected frames".into(), self.rejected_frames));
        v
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
        let idle = self
            .transport
            .as_ref()
            .is_none_or(|t| (0..self.node.nodes()).all(|p| t.pending(p) == 0));
        if idle || done.elapsed() > LINGER {
            if let Some(slot) = self.exit_waiter.take() {
                slots::complete(slot, 0);
            }
            return true;
        }
        false
    }
}

/// The node's service state. The service thread holds it while it works and lets go of it while
/// it spins or sleeps; a fault handler may then take it and drive the node itself
/// ([`drive_fault`]).
static SERVICE: Mutex<Option<Service>> = Mutex::new(None);
/// The node has left the job: nothing serves faults any more.
pub(crate) static EXITED: AtomicBool = AtomicBool::new(false);
/// Whether fault handlers may drive the node (`DSM_DRIVE=0` turns it off).
static DRIVE: AtomicBool = AtomicBool::new(true);
/// Fault handlers waiting for the state to drive the node (see `take_state`): the service
/// thread does not take it meanwhile.
static HANDLERS_WAITING: AtomicU32 = AtomicU32::new(0);
/// How long a fault handler waits for the state before it posts its fault instead: many of the
/// spinning service thread's polls, a few of its passes.
const HANDOFF_WAIT: Duration = Duration::from_micros(20);
/// Faults resolved by their own thread driving the node, and those it handed back.
static DRIVEN: AtomicU64 = AtomicU64::new(0);
static HANDED_BACK: AtomicU64 = AtomicU64::new(0);
/// The service thread sleeps [`DRIVEN_NAP`] at most: a handler that leaves acknowledgements owed
/// need not wake it.
static NAPPING: AtomicBool = AtomicBool::new(false);
/// The service thread sleeps (or is about to) in the epoll that reports the transport. A fault
/// handler that drives the node takes the transport out of that epoll and, if this is still set
/// when it is done, puts it back. Otherwise the transport stays out (no `epoll_ctl` on the
/// fault's wait): an awake service thread finds the state taken and sleeps without the
/// transport.
static SLEEPS_ON_TRANSPORT: AtomicBool = AtomicBool::new(false);
/// How long, in milliseconds, the service thread sleeps at most while a fault handler drives the
/// node, and after one did: the handler wakes it when it leaves requests or its own wait behind,
/// the re-watched transport does when a message comes, and this nap bounds how long the
/// acknowledgements a handler left owed wait.
const DRIVEN_NAP: i32 = 1;

/// A spinning thread (the service thread, a driving fault handler) runs a full pass at least
/// every this many polls of [`Service::ready`] (for the timers, the launcher's channel and the
/// clock). A poll is a `recvfrom` and two loads (0.15-0.2 us here), a full pass 3-4 times that
/// with its clock reads and timer checks: polling between passes reads a message about 0.15 us
/// sooner on each side of a remote fault (fault trace: GETP sent -> read at the home 0.52 ->
/// 0.37 us, grant sent -> read 0.7 -> 0.6 us).
const POLLS_PER_PASS: u32 = 16;
/// The spinning service thread yields every this many polls (see the yield in [`run`]): a thread
/// woken on its CPU waits a microsecond at most, and the yields (0.2 us each) do not slow the
/// polling.
const POLLS_PER_YIELD: u32 = 4;
/// A driving fault handler reads the clock every this many polls (to know when to sleep).
const POLLS_PER_CLOCK: u32 = 8;

fn lock_service() -> MutexGuard<'static, Option<Service>> {
    SERVICE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The service thread: runs the node until it has exited.
pub(crate) fn run(service: Service) {
    slots::IS_SERVICE.with(|s| s.set(true));
    if std::env::var("DSM_DRIVE").is_ok_and(|v| v == "0") {
        DRIVE.store(false, Ordering::SeqCst);
    }
    let spin_again = env_us("DSM_SPIN_AGAIN_US", SPIN_AGAIN);
    let slice = env_us("DSM_SERVICE_SLICE_US", SERVICE_SLICE);
    if !slice.is_zero() {
        if let Err(e) = sys::request_time_slice(slice) {
            log::debug!("cannot ask for a {slice:?} time slice: {e}");
        }
    }
    let epoll = service.epoll.clone();
    let quiet = service.quiet.clone();
    let evfd = service.evfd.as_raw_fd();
    *lock_service() = Some(service);
    let mut ready = Vec::with_capacity(64);
    let mut last_busy = Instant::now();
    let mut woke_for_control = false;
    let mut seen_driven = 0;
    // Polls since the last full pass while spinning (0: not spinning, a full pass is next).
    let mut polls = 0u32;
    loop {
        // A fault handler waits for the state (see `take_state`): leave it to it, and the CPU
        // too if it shares ours.
        if HANDLERS_WAITING.load(Ordering::Acquire) > 0 {
            sys::sched_yield();
            continue;
        }
        let mut guard = match SERVICE.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) if SLOTS.posted.load(Ordering::SeqCst) > 0 => {
                // Requests wait (calls, which handlers do not run): take the state as soon as
                // the handler driving the node lets go of it (handlers drive only while nothing
                // is posted, so they do not take it back first).
                lock_service()
            }
            Err(TryLockError::WouldBlock) => {
                // A fault handler drives the node and watches the network meanwhile.
                NAPPING.store(true, Ordering::SeqCst);
                woke_for_control |= sleep(&quiet, evfd, &mut ready, DRIVEN_NAP);
                last_busy = Instant::now();
                continue;
            }
        };
        let Some(s) = guard.as_mut() else { return };
        // Spinning (see below): between full passes, only poll for work.
        if (1..POLLS_PER_PASS).contains(&polls) && !s.ready() {
            polls += 1;
            drop(guard);
            if polls % POLLS_PER_YIELD == 0 {
                sys::sched_yield();
            }
            continue;
        }
        polls = 0;
        let busy = s.pass(false);
        if std::mem::take(&mut woke_for_control)
            || s.control_checked.elapsed() > Duration::from_millis(10)
        {
            s.check_control();
            s.warn_if_thrashing();
            s.report_progress();
        }
        if s.exit_finished() {
            // What came last (the exit grant) is acknowledged before the transport closes, or
            // its sender waits out its linger for the acknowledgement: a read that finds the
            // socket empty sends the acknowledgements no reply carried (UDP, RDMA UD).
            if let Some(t) = &mut s.transport {
                for _ in 0..64 {
                    if t.poll_recv(Instant::now()) == 0 {
                        break;
                    }
                }
                t.flush(Instant::now());
            }
            // Closing the transport tells the other nodes this one is done.
            crate::trace::write(s.node.id().0);
            drop(guard.take());
            EXITED.store(true, Ordering::SeqCst);
            return;
        }
        if let Some((at, msg)) = &s.lost_in_exit {
            if at.elapsed() > EXIT_GRACE {
                crate::fatal_with(msg, crate::EXIT_PEER_FAILED);
            }
        }
        let now = Instant::now();
        if busy {
            last_busy = now;
            continue;
        }
        // Spin while one of our application threads is blocked on us, or was just resumed and
        // tends to ask again at once: otherwise the CPU is better left to its computation, and a
        // message wakes us.
        let blocked = SLOTS.blocked.load(Ordering::Relaxed) > 0;
        let asks_again =
            s.request_gap < spin_again && s.resumed_at.is_some_and(|r| now - r < spin_again);
        if (blocked && now - last_busy < s.spin_blocked) || asks_again {
            // Spinning, the service thread reads the transport itself: out of the epoll set
            // (see `set_transport_watched`) until it sleeps there again.
            s.set_transport_watched(false);
            drop(guard);
            // Yield at every pass: a thread woken on this CPU (the application thread this loop
            // just resumed, another node's thread on a shared machine) runs at once. Spinning
            // without yielding left a resumed thread waiting 17 us in one run of two (remote
            // read fault 45-55 us instead of 30-32, 2 nodes on 2 CPUs).
            sys::sched_yield();
            polls = 1;
            continue;
        }
        let mut timeout_ms = s.next_deadline().map_or(-1, |d| {
            let left = d.saturating_duration_since(Instant::now());
            left.as_millis().min(60_000) as i32 + i32::from(left.subsec_nanos() % 1_000_000 != 0)
        });
        // Fault handlers drove the node since we last looked: they may have left
        // acknowledgements owed (within the peers' smallest retransmission timeout, 2 ms).
        let driven = DRIVEN.load(Ordering::Relaxed);
        if driven != seen_driven {
            seen_driven = driven;
            timeout_ms = if timeout_ms < 0 {
                DRIVEN_NAP
            } else {
                timeout_ms.min(DRIVEN_NAP)
            };
        }
        s.set_transport_watched(true);
        // Set while the state is still ours: a handler that takes it next knows the transport
        // would wake us.
        SLEEPS_ON_TRANSPORT.store(true, Ordering::SeqCst);
        drop(guard);
        NAPPING.store((0..=DRIVEN_NAP).contains(&timeout_ms), Ordering::SeqCst);
        woke_for_control = sleep(&epoll, evfd, &mut ready, timeout_ms);
        SLEEPS_ON_TRANSPORT.store(false, Ordering::SeqCst);
        last_busy = Instant::now();
    }
}

/// Sleeps in `epoll` until a request, a message or the launcher wakes the service thread, or
/// `timeout_ms` passes; returns whether the launcher's control channel is readable.
fn sleep(epoll: &Epoll, evfd: i32, ready: &mut Vec<(u64, u32)>, timeout_ms: i32) -> bool {
    SLOTS.service_sleeping.store(true, Ordering::SeqCst);
    ready.clear();
    if SLOTS.posted.load(Ordering::SeqCst) == 0 {
        if let Err(e) = epoll.ready(timeout_ms, ready) {
            fatal(&format!("epoll_wait failed: {e}"));
        }
    }
    SLOTS.service_sleeping.store(false, Ordering::SeqCst);
    sys::eventfd_drain(evfd);
    ready.iter().any(|&(token, _)| token == 2)
}

/// In the fault handler of the thread in `slot`: resolves its fault (`op` on `page`) by driving
/// the node on this thread, if the service state is free. The thread hands its request to the
/// core, sends the GETP, polls the transport and handles whatever comes (other nodes' requests
/// too) until its page is in, then lets go. Against posting the fault to the service thread
/// this saves two thread hand-offs per fault (a wake-up each way, with their context switches).
///
/// `None`: not driven (turned off, no stack switch on this architecture, the service thread or
/// another handler holds the state, requests are queued, the node has exited): post the fault
/// instead. The drive runs on the slot's own stack ([`stack`]). The handler polls for
/// [`DRIVE_SPIN`], then sleeps on the transport and the request eventfd (never yields: see
/// `drive`); after [`DRIVE_LIMIT`], or when a call is posted, it hands the wait back to the
/// service thread and sleeps on its slot.
///
/// Runs in a SIGSEGV handler and allocates: safe because this SIGSEGV is synchronous, raised by
/// an access to the shared region, which the allocator and the runtime's locks never make; a
/// second fault in the handler ends the process (SIGSEGV is blocked there).
pub(crate) fn drive_fault(slot: usize, op: u32, page: u64) -> Option<u64> {
    if !DRIVE.load(Ordering::Relaxed) || !stack::AVAILABLE {
        return None;
    }
    let guard = take_state()?;
    let free = guard.as_ref().is_some_and(|s| s.exit_done_at.is_none());
    // Requests waiting for the service thread: queue behind them.
    if !free || SLOTS.posted.load(Ordering::SeqCst) > 0 {
        return None;
    }
    // The handler's own stack is too small for this: run on the slot's.
    let top = stack::top(slot)?;
    let mut guard = Some(guard);
    let mut result = None;
    stack::run_on(top, &mut || {
        if let Some(g) = guard.take() {
            result = Some(drive(g, slot, op, page));
        }
    });
    result
}

/// Per slot: drives in a row that slept for their reply and were woken on the CPU they slept on
/// (see [`note_wait_after_spin`]).
static WOKEN_IN_PLACE: [AtomicU8; slots::MAX_THREADS] =
    [const { AtomicU8::new(0) }; slots::MAX_THREADS];
/// After this many such drives in a row the handler moves to another CPU.
const IN_PLACE_BEFORE_MOVING: u8 = 2;

/// Moves a driving thread away from a peer's thread that waits for its CPU. Two processes of
/// one job can end up on one CPU: a node's service thread (the home's, spinning for requests)
/// and another node's faulting thread, which spins for the home's reply that the home cannot
/// send while the faulting thread holds the CPU. The reply comes only once the spin is over and
/// the faulting thread sleeps, and it wakes the thread on the CPU it slept on, the home's (the
/// waker's; traced with the other CPU idle); the scheduler leaves the two together while both
/// run often (they are cache-hot). faultlat ran up to 1,000 faults in a row at 60 us this way
/// instead of 10, in 2 runs of 10 (a sched_switch trace: the home's service thread preempted on
/// the faulting thread's CPU at every fault, the other CPU idle). The sign: drives that sleep and are woken where they slept, twice in a row;
/// then the thread moves itself to another CPU.
fn note_wait_after_spin(slot: usize, slept_on: Option<i32>) {
    let Some(count) = WOKEN_IN_PLACE.get(slot) else {
        return;
    };
    if slept_on.is_none() || slept_on != sys::current_cpu() {
        count.store(0, Ordering::Relaxed);
        return;
    }
    if count.fetch_add(1, Ordering::Relaxed) + 1 >= IN_PLACE_BEFORE_MOVING {
        count.store(0, Ordering::Relaxed);
        sys::move_off_this_cpu();
    }
}

/// The node's state for a fault handler to drive with, if it is free or soon free. Held, it is
/// most often the spinning service thread's for one of its polls (0.2 us): the handler asks it to
/// let go (the service thread takes the state again only once no handler waits) and waits up to
/// [`HANDOFF_WAIT`]. Without this the handler posted its fault whenever it met one of those polls
/// and slept on its slot; the service thread, having resumed it, kept spinning for its next
/// request, and so met the next fault too: faultlat ran 800 faults in a row at 60 us (posted,
/// both service threads sharing one CPU), 2 runs in 10, before a fault found the state free and
/// the faults went back to 9.5 us (driven). Async-signal-safe (atomics and the clock).
fn take_state() -> Option<MutexGuard<'static, Option<Service>>> {
    match SERVICE.try_lock() {
        Ok(g) => return Some(g),
        Err(TryLockError::Poisoned(_)) => return None,
        Err(TryLockError::WouldBlock) => {}
    }
    HANDLERS_WAITING.fetch_add(1, Ordering::SeqCst);
    let start = Instant::now();
    let got = loop {
        match SERVICE.try_lock() {
            Ok(g) => break Some(g),
            Err(TryLockError::Poisoned(_)) => break None,
            // Another handler drives, or the service thread is at long work: post instead.
            Err(TryLockError::WouldBlock) if start.elapsed() >= HANDOFF_WAIT => break None,
            // The holder may be the service thread, preempted on this CPU by this thread: let
            // it run to let go.
            Err(TryLockError::WouldBlock) => sys::sched_yield(),
        }
    };
    HANDLERS_WAITING.fetch_sub(1, Ordering::SeqCst);
    got
}

/// [`drive_fault`] once the state is ours, on the slot's stack.
fn drive(mut guard: MutexGuard<'static, Option<Service>>, slot: usize, op: u32, page: u64) -> u64 {
    let Some(s) = guard.as_mut() else {
        // (drive_fault saw the state there.) Let go of it before waiting on the service thread.
        drop(guard);
        return slots::post_and_wait(slot, op, page);
    };
    DRIVEN.fetch_add(1, Ordering::Relaxed);
    slots::take_own(slot, op);
    s.driver = Some(slot);
    s.handle_request(slot, op, page);
    // The GETP out first, then the polling.
    s.drain_core();
    // Replies are read here: out of the service thread's epoll while this drives (a service
    // thread asleep there need not wake for them, and no datagram pays for the registration).
    s.set_transport_watched(false);
    let start = Instant::now();
    let evfd = s.evfd.as_raw_fd();
    // Polls since the last full pass (0: a full pass is next).
    let mut polls = 0u32;
    // The CPU the handler was on when it first slept waiting.
    let mut slept_on = None;
    loop {
        if polls == 0 || polls >= POLLS_PER_PASS || s.ready() {
            s.pass(true);
            polls = 0;
            if slots::is_done(slot) {
                // Nothing left unread behind us: the service thread, napping without the
                // transport, would not see it for up to [`DRIVEN_NAP`] (another node's GETP
                // among it). The read that stopped at our grant is followed by one that finds
                // the socket empty, as a rule (a poll, which then clears `unread`); anything
                // else is handled first.
                while s.unread && s.ready() {
                    s.pass(true);
                }
                break;
            }
            // Calls were posted (handlers do not run them): hand the wait back.
            if SLOTS.posted.load(Ordering::SeqCst) > 0 {
                break;
            }
        }
        polls += 1;
        if polls % POLLS_PER_CLOCK != 0 {
            std::hint::spin_loop();
            continue;
        }
        // (Posted calls make `ready` say so: the pass above then hands the wait back.)
        let waited = start.elapsed();
        if waited >= s.drive_limit {
            break;
        }
        if waited < s.drive_spin {
            std::hint::spin_loop();
            continue;
        }
        // Then sleep until a message or a request comes (or a timer is due): the message wakes
        // this thread, and the wake-up preempts whatever runs on its CPU. A thread that yields
        // instead stays runnable: once another thread took its CPU it waited for that thread's
        // whole time slice (1-3 ms), deaf meanwhile (the service thread does not read the
        // transport while a handler drives): a sender resent its burst.
        let Some(fd) = s.transport.as_ref().map(|t| t.fd()) else {
            break;
        };
        let mut left = s.drive_limit - waited;
        if let Some(d) = s.next_deadline() {
            left = left.min(d.saturating_duration_since(Instant::now()));
        }
        if slept_on.is_none() {
            slept_on = sys::current_cpu();
        }
        sys::wait_readable_raw(&[fd, evfd], left);
        sys::eventfd_drain(evfd);
        polls = 0;
    }
    s.driver = None;
    // Back in the epoll if the service thread still sleeps there (it may be waking, then it
    // sleeps in `quiet` and sets it right when it next takes the state).
    if SLEEPS_ON_TRANSPORT.load(Ordering::SeqCst) {
        s.set_transport_watched(true);
    }
    let handed_back = !slots::is_done(slot);
    if !handed_back {
        note_wait_after_spin(slot, slept_on);
    }
    let work_left = handed_back
        || SLOTS.posted.load(Ordering::SeqCst) > 0
        || (s.acks_owed && !NAPPING.load(Ordering::SeqCst));
    drop(guard);
    if work_left {
        // The service thread takes over what is left: a reply still to come, requests posted
        // while we drove, acknowledgements owed while it sleeps long.
        HANDED_BACK.fetch_add(u64::from(handed_back), Ordering::Relaxed);
        let fd = SLOTS.eventfd.load(Ordering::Relaxed);
        if fd >= 0 {
            sys::eventfd_signal(fd);
        }
    }
    slots::wait_done(slot)
}
