//! # dsm-runtime: one DSM node as an OS process
//!
//! [`init`] turns the process into a node of a job: it reserves the shared region at the same
//! address as every other node, installs the fault handler, joins the job (through the
//! launcher's rendezvous), and starts the node's service thread, which drives the protocol core
//! (`dsm-core`) and the transport (`dsm-transport`). Started without a launcher, the process is a
//! one-node job: the same program, no network.
//!
//! The application then allocates shared arrays collectively (every node makes the same calls in
//! the same order and gets the same addresses), works on them with plain loads and stores, and
//! synchronises with locks, barriers and condition variables. A read of a page not held here
//! faults; the fault handler hands it to the service thread, which fetches the page from its home
//! and resumes the thread.
//!
//! ```
//! use dsm_runtime::AllocPolicy;
//!
//! let dsm = dsm_runtime::init().expect("join the job");
//! let (me, n) = (dsm.id(), dsm.nodes());
//! // 1024 counters, homed in blocks of 128 over the nodes.
//! let a = dsm.alloc::<u64>(1024, AllocPolicy::Cyclic { block_bytes: 128 * 8, start: dsm_runtime::NodeId(0) }).unwrap();
//! for i in (me..1024).step_by(n) {
//!     a.set(i, i as u64);
//! }
//! dsm.barrier();
//! let total: u64 = (0..1024).map(|i| a.get(i)).sum();
//! assert_eq!(total, 1023 * 1024 / 2);
//! {
//!     let _guard = dsm.lock(0); // a critical section across all nodes
//!     a.set(0, a.get(0) + 1);
//! }
//! dsm.exit();
//! ```
//!
//! Modules: [`config`] (`.jiaconf`, `.jiahosts`), [`job`] (how nodes find each other); the
//! fault handler, memory mapping and service thread are private.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod array;
pub mod config;
#[allow(unsafe_code)]
mod fault;
pub mod job;
pub mod logging;
mod message;
#[cfg(doctest)]
mod misuse;
mod progress;
#[allow(unsafe_code)]
mod region;
mod service;
pub mod stats;
#[allow(unsafe_code)]
mod sys;
mod trace;

/// The fault trace's file format (`DSM_FAULT_TRACE`): its columns, for the `fault-trace` tool.
pub mod fault_trace {
    pub use crate::trace::{STEP_NAMES, Step};
}

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use array::{Shared, SharedArray};
pub use dsm_core::mailbox::{Letter, MAX_LETTER_BYTES};
pub use dsm_core::{AllocPolicy, MAX_NODES, NodeId, PAGE_SIZE, Stats, UsageError};
use dsm_core::{CoreConfig, CvId, LockId, Node, Prefetch, WaiterId};
use dsm_transport::Transport;
use dsm_transport::reliable::ReliableConfig;
use dsm_transport::tcp::{self, TcpConfig, TcpTransport};
use dsm_transport::udp::{self, UdpTransport};
pub use message::{Received, ReduceOp, Reducible};
pub use stats::{NodeStats, RuntimeStats};

use crate::config::{CommType, Config};
use crate::region::Region;
use crate::service::{CALL_ERRORS, CALL_FAILED, CALLS, Service};

static RANK: AtomicU32 = AtomicU32::new(0);
static INITIALISED: AtomicBool = AtomicBool::new(false);

/// Prints `dsm node N: error: ...` and ends the process with status 1.
pub(crate) fn fatal(msg: &str) -> ! {
    fatal_with(msg, 1)
}

/// Exit status of a node that ends because another node failed (the launcher then names the
/// node that failed first, not this one).
pub const EXIT_PEER_FAILED: i32 = 86;

pub(crate) fn fatal_with(msg: &str, status: i32) -> ! {
    let rank = RANK.load(Ordering::Relaxed);
    if fault::in_signal_context() {
        // No exit from signal context (see `fault`): the message by write(2), then abort.
        let mut digits = [0u8; 5];
        let rank = decimal(rank as u16, &mut digits);
        sys::signals::die(&[b"dsm node ", rank, b": error: ", msg.as_bytes(), b"\n"]);
    }
    // Not eprintln: it panics when standard error is gone, and this must end the process.
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "dsm node {rank}: error: {msg}");
    std::process::exit(status);
}

/// Makes a panic's message name the node and the application's line (`dsm node 1: panicked at
/// src/main.rs:12:5: index 9 out of a shared array of 8`), written with one write(2) (no stdio
/// lock: the panic may come from anywhere). With `RUST_BACKTRACE` set, the standard report (and
/// its backtrace) follows.
fn name_panics_by_node() {
    let standard = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(a panic without a message)");
        let at = info.location().map_or(String::new(), |l| {
            format!(" at {}:{}:{}", l.file(), l.line(), l.column())
        });
        let line = format!(
            "dsm node {}: panicked{at}: {msg}\n",
            RANK.load(Ordering::Relaxed)
        );
        sys::write_stderr(line.as_bytes());
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            standard(info);
        }
    }));
}

/// `n` in decimal, written into `buf` without allocating (for signal context).
fn decimal(mut n: u16, buf: &mut [u8; 5]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Whether this machine can reserve the shared region `config` describes (`global_start_addr`,
/// `region_gib`): the launcher's check before any node starts, with the message a node would
/// give.
pub fn check_region(config: &Config) -> Result<(), String> {
    let len = (config.region_gib << 30) as usize;
    sys::can_reserve(config.global_start_addr as usize, len).map_err(|source| {
        InitError::Region {
            addr: config.global_start_addr,
            len_gib: config.region_gib,
            source,
        }
        .to_string()
    })
}

/// Makes `len` bytes at `ptr` ready for a system call that reads them (`write`, `send`...) or,
/// with `kernel_writes`, writes them (`read`, `recv`...), if any of them is shared memory: each
/// page is brought in with that access, as the program's own access would. Returns whether the
/// buffer touches shared memory.
///
/// The kernel does not fault on the program's behalf: a system call that meets a shared page
/// this node does not hold fails with `EFAULT` (and `fread`/`fwrite` then come back short), so
/// such a buffer must be made ready first. `libjia` does it for `read`, `write`, `pread`,
/// `pwrite`, `fread` and `fwrite`; Rust programs can use [`SharedArray::read_from`] and
/// [`SharedArray::write_to`], or call this before their own system call. A page can be taken
/// away again by this node's next acquire (or by the cache making room), so make it ready right
/// before the call, and retry a call that fails with `EFAULT`.
pub fn prepare_for_io(ptr: *const u8, len: usize, kernel_writes: bool) -> bool {
    let (start, end) = fault::region();
    let (lo, hi) = (ptr as usize, (ptr as usize).saturating_add(len));
    let (lo, hi) = (lo.max(start), hi.min(end));
    if lo >= hi {
        return false;
    }
    sys::touch_pages(lo, hi, kernel_writes);
    true
}

/// Why [`init`] failed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The process was already initialised.
    #[error("init was already called in this process")]
    Twice,
    /// The launch environment or the configuration is wrong.
    #[error("{0}")]
    Job(String),
    /// The shared region could not be reserved.
    #[error(
        "cannot reserve {len_gib} GiB of shared region at {addr:#x}: {source} (change global_start_addr or region_gib)"
    )]
    Region {
        /// Where.
        addr: u64,
        /// How much.
        len_gib: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// The transport asked for cannot run here (not built in, no RDMA device...).
    #[error("{0}")]
    Unavailable(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// This process's membership of a DSM job.
pub struct Dsm {
    rank: u16,
    size: u16,
    base: usize,
    t0: Instant,
    exited: AtomicBool,
    /// `jia_exit` is done: the service thread is gone, and any further call ends the process
    /// with a message instead of waiting forever for it.
    left: AtomicBool,
    service: Mutex<Option<JoinHandle<()>>>,
    /// Sequence numbers of this node's broadcasts and reductions (collective: every node
    /// counts the same calls), the tags their letters carry.
    bcasts: AtomicU32,
    reductions: AtomicU32,
}

/// Freed heap memory a node keeps rather than returning it to the kernel
/// ([`sys::keep_freed_heap`]).
const KEPT_HEAP_BYTES: usize = 64 << 20;

/// Joins the job this process was launched into (by `dsmrun`), or makes a one-node job.
///
/// Started directly (no dsmrun, srun or mpirun) in a directory with a `.jiahosts` of two hosts or
/// more, the process becomes node 0 of the job that file describes and starts the other nodes
/// itself, as `jia_init` does and as `dsmrun` would with that file.
pub fn init() -> Result<Dsm, InitError> {
    let env = match job::node::job_env().map_err(InitError::Job)? {
        Some(env) => Some(env),
        None => job::launcher::job_from_jiahosts().map_err(InitError::Job)?,
    };
    init_job(env)
}

/// Joins the job described by `env` (`None`: a one-node job). [`init`] reads `env` from the
/// launcher's environment; a program that launches its own job (like `jia_init` with a
/// `.jiahosts`) builds it.
pub fn init_job(env: Option<job::JobEnv>) -> Result<Dsm, InitError> {
    if INITIALISED.swap(true, Ordering::SeqCst) {
        return Err(InitError::Twice);
    }
    let (rank, size, cookie, config, stats) = match &env {
        Some(e) => (e.rank, e.size, e.cookie, e.config.clone(), e.stats),
        None => {
            let (c, stats) = job::node::local_config().map_err(InitError::Job)?;
            (0, 1, 0, c, stats)
        }
    };
    RANK.store(u32::from(rank), Ordering::Relaxed);
    logging::init_node(rank);
    if let Some(on_host) = env.as_ref().and_then(|e| e.on_host) {
        if config.bind_to_core {
            bind_to_core(on_host);
        }
    }
    name_panics_by_node();
    sys::signals::default_sigpipe();
    sys::keep_freed_heap(KEPT_HEAP_BYTES);
    trace::init();
    fault::slots::WAIT_SPIN_US.store(config.tuning.wait_spin_us, Ordering::Relaxed);
    let t0 = Instant::now();
    let len = (config.region_gib << 30) as usize;
    let region = Region::map(config.global_start_addr as usize, len).map_err(|source| {
        InitError::Region {
            addr: config.global_start_addr,
            len_gib: config.region_gib,
            source,
        }
    })?;
    let base = region.app_base;
    fault::install(base, len).map_err(|source| InitError::Os {
        what: "installing the fault handler",
        source,
    })?;
    let (transport, control) = match &env {
        Some(e) if size > 1 => {
            let (t, c) = connect(e, &config)?;
            (Some(t), c)
        }
        _ => (None, None),
    };
    let mut core_cfg = CoreConfig::new(NodeId(rank), size);
    core_cfg.region_pages = (len / PAGE_SIZE) as u64;
    core_cfg.cache_pages = config.cache_pages;
    // One-sided page reads where the transport offers them (the core then tracks home writes
    // from allocation on, since homes no longer see every copy leave).
    core_cfg.remote_reads = config.one_sided_reads && config.comm_type == CommType::RdmaRc;
    core_cfg.home_migration = config.home_migration;
    core_cfg.prefetch = Prefetch {
        enabled: config.prefetch,
        prefetch_pages: config.prefetch_pages,
        max_checking_pages: config.max_checking_pages,
    };
    let node = Node::new(core_cfg, region);
    let service = Service::new(
        node,
        transport,
        control,
        cookie,
        t0,
        stats && rank == 0,
        config.tuning,
    )
    .map_err(|source| InitError::Os {
        what: "starting the service thread",
        source,
    })?;
    let mut service = service;
    if rank == 0 {
        let mut argv = std::env::args();
        service.stats_meta = stats::JobMeta {
            launcher: match job::cluster::cluster_rank_size() {
                _ if std::env::var_os("DSM_RANK").is_some() => "dsmrun",
                Some((_, _, who)) => who,
                None => "dsm_runtime::init",
            }
            .to_string(),
            program: argv.next().unwrap_or_default(),
            arguments: argv.collect(),
            nodes: usize::from(size),
            transport: config.comm_type.name().to_string(),
            settings: config.settings(),
            start: std::time::SystemTime::now(),
            wall: Duration::ZERO,
            exit_status: None,
        };
    }
    log::info!(
        "node {rank} of {size} joined over {} ({} GiB region at {:#x})",
        config.comm_type.name(),
        config.region_gib,
        config.global_start_addr
    );
    let handle = std::thread::Builder::new()
        .name("dsm-service".into())
        .spawn(move || {
            // A panic here would leave the application threads waiting for it forever: end the
            // node, so the launcher and the other nodes see it fail (the panic hook has already
            // printed where and why).
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| service::run(service)))
                .is_err()
            {
                fatal("the service thread panicked (see above)");
            }
        })
        .map_err(|source| InitError::Os {
            what: "spawning the service thread",
            source,
        })?;
    Ok(Dsm {
        rank,
        size,
        base,
        t0,
        exited: AtomicBool::new(false),
        left: AtomicBool::new(false),
        service: Mutex::new(Some(handle)),
        bcasts: AtomicU32::new(0),
        reductions: AtomicU32::new(0),
    })
}

/// `bind_to = core`: node `index` of the `count` its launcher started on this host runs on the
/// `index`-th CPU it may use, when there are 2 to as many nodes as CPUs (one node alone, or more
/// nodes than CPUs, are left to the scheduler). The service thread, started later, inherits it.
/// Nodes that roam share CPUs after wake-ups now and then (up to milliseconds, until the
/// scheduler spreads them again); bound, they do not.
fn bind_to_core((index, count): (usize, usize)) {
    let cpus = match sys::allowed_cpus() {
        Ok(c) => c,
        Err(e) => {
            return log::warn!("bind_to=core: cannot read this process's CPUs ({e}): not bound");
        }
    };
    if count < 2 || count > cpus.len() {
        return log::debug!(
            "bind_to=core: {count} node(s) on this host, {} CPU(s) allowed: not bound",
            cpus.len()
        );
    }
    match sys::bind_to_cpu(cpus[index]) {
        Ok(()) => log::debug!("bound to CPU {}", cpus[index]),
        Err(e) => log::warn!(
            "bind_to=core: cannot bind to CPU {} ({e}): not bound",
            cpus[index]
        ),
    }
}

type Connected = (Box<dyn Transport>, Option<std::net::TcpStream>);

fn connect(env: &job::JobEnv, config: &Config) -> Result<Connected, InitError> {
    let port = if config.base_port == 0 {
        0
    } else {
        config.base_port + env.rank
    };
    let os = |what| move |source| InitError::Os { what, source };
    let peer_timeout = Duration::from_millis(config.peer_timeout_ms);
    let heartbeat = Duration::from_millis((config.peer_timeout_ms / 10).clamp(20, 1000));
    match config.comm_type {
        CommType::Udp => {
            let sock =
                udp::bind(SocketAddr::new(env.bind, port)).map_err(os("binding the UDP socket"))?;
            let me = sock
                .local_addr()
                .map_err(os("reading the socket address"))?;
            let (peers, control) =
                job::node::join(env, me, Duration::from_secs(60)).map_err(InitError::Job)?;
            let rel = ReliableConfig {
                max_datagram_bytes: config.msg_buffer_size,
                window: config.msg_queue_size,
                peer_timeout,
                heartbeat,
                ..ReliableConfig::default()
            };
            let mut t = UdpTransport::new(sock, env.rank, peers, env.cookie, rel, Instant::now());
            if let Ok(spec) = std::env::var("DSM_IMPAIR") {
                let cfg =
                    dsm_transport::impair::ImpairConfig::parse(&spec).map_err(InitError::Job)?;
                t.impair(cfg, u64::from(env.rank));
            }
            Ok((Box::new(t), control))
        }
        CommType::Tcp => {
            let listener = tcp::listen(SocketAddr::new(env.bind, port))
                .map_err(os("binding the TCP listener"))?;
            let me = listener
                .local_addr()
                .map_err(os("reading the listener address"))?;
            let (peers, control) =
                job::node::join(env, me, Duration::from_secs(60)).map_err(InitError::Job)?;
            let cfg = TcpConfig {
                heartbeat,
                peer_timeout,
                connect_timeout: Duration::from_secs(60),
            };
            let t = TcpTransport::establish(listener, env.rank, &peers, env.cookie, cfg)
                .map_err(os("connecting to the other nodes over TCP"))?;
            Ok((Box::new(t), control))
        }
        #[cfg(feature = "rdma")]
        CommType::RdmaRc | CommType::RdmaUd => {
            use dsm_transport::rdma::{RdmaConfig, rc::RcTransport, ud::UdTransport};
            // The device before the rendezvous: a node without RDMA says so at once.
            let name = config.comm_type.name();
            dsm_transport::rdma::probe(name).map_err(|e| InitError::Unavailable(e.to_string()))?;
            let listener = tcp::listen(SocketAddr::new(env.bind, port))
                .map_err(os("binding the RDMA control listener"))?;
            let me = listener
                .local_addr()
                .map_err(os("reading the listener address"))?;
            let (peers, control) =
                job::node::join(env, me, Duration::from_secs(60)).map_err(InitError::Job)?;
            let cfg = RdmaConfig {
                device: config.rdma_device.clone(),
                port: config.rdma_port,
                gid_index: config.rdma_gid_index,
                tcp: TcpConfig {
                    heartbeat,
                    peer_timeout,
                    connect_timeout: Duration::from_secs(60),
                },
            };
            let unavailable = |e: dsm_transport::rdma::RdmaError| match e {
                dsm_transport::rdma::RdmaError::Verbs { .. } => {
                    InitError::Unavailable(e.to_string())
                }
                _ => InitError::Job(e.to_string()),
            };
            let t: Box<dyn Transport> = if config.comm_type == CommType::RdmaRc {
                Box::new(
                    RcTransport::establish(listener, env.rank, &peers, env.cookie, &cfg)
                        .map_err(unavailable)?,
                )
            } else {
                let rel = ReliableConfig {
                    window: config.msg_queue_size,
                    peer_timeout,
                    heartbeat,
                    ..ReliableConfig::default()
                };
                Box::new(
                    UdTransport::establish(listener, env.rank, &peers, env.cookie, &cfg, rel)
                        .map_err(unavailable)?,
                )
            };
            log::debug!("{name} up");
            Ok((t, control))
        }
        #[cfg(not(feature = "rdma"))]
        CommType::RdmaRc | CommType::RdmaUd => Err(InitError::Unavailable(format!(
            "comm_type = {}: this build has no RDMA; build with `cargo build --release --features dsm-runtime/rdma`",
            config.comm_type.name()
        ))),
    }
}

/// A held lock; dropping it releases the lock.
#[must_use = "the lock is released when the guard drops: bind it with `let _guard = ...`"]
pub struct LockGuard<'a> {
    dsm: &'a Dsm,
    lock: u16,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        self.dsm.unlock(self.lock);
    }
}

impl Dsm {
    /// This node's id (JIAJIA's `jiapid`).
    pub fn id(&self) -> usize {
        usize::from(self.rank)
    }

    /// Nodes in the job (JIAJIA's `jiahosts`).
    pub fn nodes(&self) -> usize {
        usize::from(self.size)
    }

    /// Seconds since this node started (JIAJIA's `jia_clock`).
    pub fn clock(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// The shared region's first address.
    pub fn region_start(&self) -> usize {
        self.base
    }

    fn call(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Service, WaiterId) -> Result<Option<u64>, UsageError> + Send + 'static,
    ) -> Result<u64, UsageError> {
        if self.left.load(Ordering::SeqCst) {
            fatal(&format!(
                "{what} after jia_exit: this node has left the job, nothing can answer it"
            ));
        }
        let Some(slot) = fault::slots::my_slot() else {
            fatal(&format!(
                "more than {} threads use the DSM",
                fault::slots::MAX_THREADS
            ));
        };
        CALLS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(slot, (what, Box::new(f)));
        let r = fault::slots::post_and_wait(slot, fault::slots::OP_CALL, 0);
        if r == CALL_FAILED {
            let e = CALL_ERRORS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&slot);
            return Err(e.unwrap_or(UsageError::CollectiveBusy));
        }
        Ok(r)
    }

    /// [`Dsm::call`], ending the process with a message that names the call, what was wrong
    /// and the application's line that made it (a misuse, like unlocking a lock not held, is
    /// the program's bug: the job cannot go on, and a backtrace would not say more).
    #[track_caller]
    fn call_or_die(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Service, WaiterId) -> Result<Option<u64>, UsageError> + Send + 'static,
    ) -> u64 {
        let at = std::panic::Location::caller();
        match self.call(what, f) {
            Ok(v) => v,
            Err(e) => fatal(&format!("{what}: {e} (at {at})")),
        }
    }

    /// Allocates `len` elements collectively with `policy` (every node makes the same call).
    pub fn alloc<T: Shared>(
        &self,
        len: usize,
        policy: AllocPolicy,
    ) -> Result<SharedArray<T>, UsageError> {
        let bytes = (len * std::mem::size_of::<T>()).max(1) as u64;
        let off = self.call("jia_alloc", move |s, _| s.alloc(policy, bytes).map(Some))?;
        Ok(SharedArray::new((self.base + off as usize) as *mut T, len))
    }

    /// Acquires lock `lock` (0..64) for this thread until the guard drops (`jia_lock`). A lock
    /// this thread holds already ends the node, naming the caller's line.
    #[track_caller]
    pub fn lock(&self, lock: u16) -> LockGuard<'_> {
        let at = std::panic::Location::caller();
        if let Err(e) = self.lock_raw(lock) {
            fatal(&format!("jia_lock: {e} (at {at})"));
        }
        LockGuard {
            dsm: self,
            lock,
            _not_send: std::marker::PhantomData,
        }
    }

    fn unlock(&self, lock: u16) {
        if let Err(e) = self.unlock_raw(lock) {
            fatal(&format!("jia_unlock: {e}"));
        }
    }

    /// `jia_lock` without a guard (for the C interface): pair with [`Dsm::unlock_raw`]. A lock
    /// this thread holds or asks for already is an error.
    pub fn lock_raw(&self, lock: u16) -> Result<(), UsageError> {
        let _w = progress::waiting(format!("jia_lock({lock})"));
        self.call("jia_lock", move |s, w| {
            let now = s.now();
            s.node.acquire(now, LockId(lock), w).map(|()| None)
        })
        .map(drop)
    }

    /// `jia_unlock`: a lock this thread does not hold is an error.
    pub fn unlock_raw(&self, lock: u16) -> Result<(), UsageError> {
        self.call("jia_unlock", move |s, w| {
            let now = s.now();
            s.node.release(now, LockId(lock), w).map(|()| None)
        })
        .map(drop)
    }

    /// A barrier with coherence (`jia_barrier`).
    #[track_caller]
    pub fn barrier(&self) {
        let _w = progress::waiting("jia_barrier");
        self.call_or_die("jia_barrier", |s, w| {
            let now = s.now();
            s.node.barrier(now, w).map(|()| None)
        });
    }

    /// A barrier without coherence (`jia_wait`).
    #[track_caller]
    pub fn wait(&self) {
        let _w = progress::waiting("jia_wait");
        self.call_or_die("jia_wait", |s, w| {
            let now = s.now();
            s.node.wait(now, w).map(|()| None)
        });
    }

    /// Sets condition variable `cv` (0..16), a release (`jia_setcv`).
    #[track_caller]
    pub fn setcv(&self, cv: u16) {
        self.call_or_die("jia_setcv", move |s, w| {
            let now = s.now();
            s.node.setcv(now, CvId(cv), w).map(|()| None)
        });
    }

    /// Clears condition variable `cv` (`jia_resetcv`).
    #[track_caller]
    pub fn resetcv(&self, cv: u16) {
        self.call_or_die("jia_resetcv", move |s, w| {
            let now = s.now();
            s.node.resetcv(now, CvId(cv), w).map(|()| None)
        });
    }

    /// Waits until condition variable `cv` is set, an acquire (`jia_waitcv`).
    #[track_caller]
    pub fn waitcv(&self, cv: u16) {
        let _w = progress::waiting(format!("jia_waitcv({cv})"));
        self.call_or_die("jia_waitcv", move |s, w| {
            let now = s.now();
            s.node.waitcv(now, CvId(cv), w).map(|()| None)
        });
    }

    /// Zeroes this node's statistics (`jia_startstat`).
    pub fn start_stats(&self) {
        self.call_or_die("jia_startstat", |s, _| {
            s.reset_stats();
            Ok(Some(0))
        });
    }

    /// Turns home migration on or off from this node's next barrier on (`jia_config(HMIG,
    /// ON/OFF)`; the `home_migration` key sets it for the whole job). Every node should make the
    /// same call between the same barriers: a node with it off offers no page, so none moves
    /// to it.
    pub fn set_home_migration(&self, on: bool) {
        self.call_or_die("jia_config(HMIG)", move |s, _| {
            s.set_home_migration(on);
            Ok(Some(0))
        });
    }

    /// Freezes the statistics node 0 reports at exit (`jia_stopstat`).
    pub fn stop_stats(&self) {
        self.call_or_die("jia_stopstat", |s, _| {
            s.runtime_stats();
            s.node.freeze_stats();
            Ok(Some(0))
        });
    }

    /// This node's statistics now.
    pub fn stats(&self) -> NodeStats {
        let out = std::sync::Arc::new(Mutex::new(NodeStats::default()));
        let o = out.clone();
        self.call_or_die("stats", move |s, _| {
            let runtime = s.runtime_stats();
            *o.lock().unwrap_or_else(|p| p.into_inner()) = NodeStats {
                core: s.node.stats().clone(),
                runtime,
            };
            Ok(Some(0))
        });
        out.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Ends the job with an error seen by every node (`jia_error`): prints `msg`, tells the
    /// other nodes, exits with status 1.
    pub fn error(&self, msg: &str) -> ! {
        let text = msg.to_string();
        if !self.left.load(Ordering::SeqCst) {
            let t = text.clone();
            let _ = self.call("jia_error", move |s, _| {
                s.node.broadcast_error(&t);
                Ok(Some(0))
            });
            // Give the service thread a moment to put the error on the wire.
            std::thread::sleep(Duration::from_millis(100));
        }
        fatal(&text);
    }

    /// Leaves the job: waits for every node, prints statistics at node 0 if asked (`jia_exit`).
    pub fn exit(&self) {
        if self.exited.swap(true, Ordering::SeqCst) {
            return;
        }
        let _w = progress::waiting("jia_exit");
        self.call_or_die("jia_exit", |s, w| {
            let now = s.now();
            s.set_exit_waiter(w);
            s.runtime_stats();
            s.node.exit(now, w).map(|()| None)
        });
        if let Some(h) = self
            .service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = h.join();
        }
        self.left.store(true, Ordering::SeqCst);
    }
}

impl Drop for Dsm {
    fn drop(&mut self) {
        if self.exited.load(Ordering::SeqCst) {
            return;
        }
        if std::thread::panicking() {
            let text = format!("node {} panicked", self.rank);
            let _ = self.call("jia_error", move |s, _| {
                s.node.broadcast_error(&text);
                Ok(Some(0))
            });
            std::thread::sleep(Duration::from_millis(100));
        } else {
            self.exit();
        }
    }
}
