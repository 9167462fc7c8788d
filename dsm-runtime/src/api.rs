//! The Rust API: [`init`] makes the process a node of its job; [`Dsm`] is its membership (calls
//! of JIAJIA's interface: allocation, locks, barriers, condition variables, statistics, exit);
//! [`LockGuard`] a held lock. Application threads only: a call goes through the door
//! ([`crate::call`]).

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dsm_core::{
    AllocPolicy, AtomicOp, AtomicOrder, CoreConfig, CvId, GlobalAddr, LockId, Node, NodeId,
    PAGE_SIZE, Prefetch, UsageError,
};
use dsm_transport::Transport;
use dsm_transport::reliable::ReliableConfig;
use dsm_transport::tcp::{self, TcpConfig, TcpTransport};
use dsm_transport::udp::{self, UdpTransport};

use dsm_races::{self as races, Event, Object};

use crate::array::{Shared, SharedArray};
use crate::config::{CommType, Config, SameHostMode};
use crate::door::SLOTS;
use crate::door::end::fatal;
use crate::door::request::{Call, CallResult, Reply};
use crate::fences::ToAcquire;
use crate::region::Region;
use crate::service::Service;
use crate::stats::NodeStats;
use crate::{allocations, call, door, fault, job, logging, progress, service, stats, sys, trace};

static INITIALISED: AtomicBool = AtomicBool::new(false);

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
        let line = format!("dsm node {}: panicked{at}: {msg}\n", door::end::rank());
        sys::write_stderr(line.as_bytes());
        progress::note_panic(&at, msg);
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            standard(info);
        }
    }));
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

/// The impairment the environment variable `DSM_IMPAIR` asks for, if any (see
/// [`dsm_transport::impair`]): dropped, duplicated and reordered datagrams, for loss tests. Only
/// the transports that send datagrams through our reliable layer can be impaired (udp,
/// rdma-ud); with tcp or rdma-rc it is refused rather than ignored. The launcher's check and the
/// node's use give the same message.
pub fn impairment(comm: CommType) -> Result<Option<dsm_transport::impair::ImpairConfig>, String> {
    let Some(spec) = std::env::var_os("DSM_IMPAIR") else {
        return Ok(None);
    };
    let spec = spec.to_string_lossy();
    let cfg = dsm_transport::impair::ImpairConfig::parse(&spec)
        .map_err(|e| format!("environment variable {e}"))?;
    match comm {
        CommType::Udp | CommType::RdmaUd => Ok(Some(cfg)),
        CommType::Tcp | CommType::RdmaRc => Err(format!(
            "environment variable DSM_IMPAIR={spec}: comm_type = {} sends no datagrams of ours \
             to impair; allowed with udp or rdma-ud (unset DSM_IMPAIR for {})",
            comm.name(),
            comm.name()
        )),
    }
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
/// away again by this node's next acquire (or by the cache making room, or, under `same_host =
/// map`, by a write of this node's to a page near it shown from another node's memory), so make
/// it ready right before the call, and retry a call that fails with `EFAULT`.
///
/// # Safety
///
/// With `kernel_writes`, each page is touched by an atomic compare-and-swap of one of its bytes
/// with itself: no thread of this node may write that byte non-atomically meanwhile (the program
/// is about to hand the buffer to the kernel, so it must not be writing it anyway). `ptr` need
/// not be valid: only the part of the range inside the shared region is touched, and of that
/// only what lies before the end of the furthest allocation (a receive's buffer may be given
/// longer than the memory behind it, the message shorter; the kernel fails a call that reaches
/// past it with `EFAULT`, as without the DSM).
#[allow(unsafe_code)]
pub unsafe fn prepare_for_io(ptr: *const u8, len: usize, kernel_writes: bool) -> bool {
    let (start, end) = fault::region();
    let (lo, hi) = (ptr as usize, (ptr as usize).saturating_add(len));
    if lo.max(start) >= hi.min(end) {
        return false;
    }
    let allocated = allocations::end().min(end);
    let (lo, hi) = (lo.max(start), hi.min(allocated));
    if lo >= hi {
        return true;
    }
    // SAFETY: the range lies in the shared region's application view (clamped above), which is
    // always mapped; no other thread writes the touched bytes non-atomically: the caller's
    // promise.
    unsafe { sys::touch_pages(lo, hi, kernel_writes) };
    true
}

/// The most bytes of shared memory a system call should move at once: an eighth of this node's
/// page cache (at least a page; 0 before `init`), which leaves room for the read-ahead the
/// touches start. [`prepare_for_io`] brings a buffer's pages in and the cache keeps them for
/// the call only if they fit: a larger buffer is moved in pieces of this size, each made ready
/// right before its call (`libjia` does so for `read`, `write`, `pread`, `pwrite`, `fread` and
/// `fwrite`). Async-signal-safe.
pub fn io_piece_bytes() -> usize {
    IO_PIECE_BYTES.load(Ordering::Relaxed)
}

static IO_PIECE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Whether any of the `len` bytes at `ptr` lies in the shared region. Async-signal-safe.
pub fn in_shared_region(ptr: *const u8, len: usize) -> bool {
    let (start, end) = fault::region();
    let (lo, hi) = (ptr as usize, (ptr as usize).saturating_add(len));
    lo.max(start) < hi.min(end)
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

/// This process's membership of a DSM job: JIAJIA's calls (allocation, locks, barriers,
/// condition variables, messages, statistics, exit). [`init`] makes it; outside a launcher the
/// process is a one-node job.
///
/// # Nodes
///
/// Nodes are numbered `0..nodes()`, as `usize`: [`Dsm::id`] and [`Dsm::nodes`] return one, and
/// [`Dsm::send`], [`Dsm::recv`], [`Dsm::bcast`] and [`Dsm::reduce`] take one (naming a node outside
/// the job ends the job with a message). [`AllocPolicy`] takes a [`NodeId`], and a received
/// [`Letter`](crate::Letter) names its sender by one: `NodeId` is the protocol core's type
/// (`dsm-core`), a `u16` as on the wire, where a job has at most [`MAX_NODES`](crate::MAX_NODES)
/// nodes. So node `n` is `NodeId(n as u16)` (which cannot truncate, since `n < nodes()`), and
/// `NodeId(k)` is node `usize::from(k)`.
///
/// # Memory model
///
/// Home-based lazy release consistency, as in JIAJIA. Every page has a home node that holds its
/// master copy; each node works on its own copies and brings them up to date only when it
/// synchronises:
///
/// - a *release* (unlock, that is dropping a [`LockGuard`]; [`Dsm::setcv`]; [`Dsm::barrier`];
///   [`Dsm::exit`]) sends the writes this node made since its last release to the pages'
///   homes before it completes;
/// - an *acquire* ([`Dsm::lock`], [`Dsm::waitcv`], [`Dsm::barrier`]) invalidates this node's
///   copies of the pages written before the releases it synchronises with, so that the next
///   access fetches them from their homes.
///
/// So a write made before a release is seen by a node after its next acquire of the same lock
/// or condition variable, or after the next barrier (a barrier is both, on every node). A lock
/// carries only the writes made by its holders (scope consistency): protect each shared
/// variable with one lock, or separate its writes from its reads by barriers. Between
/// synchronisations a read may see an old value (this node's copy) or, if its page is fetched
/// meanwhile, a newer one: nothing is promised before the acquire. [`Dsm::wait`] is a barrier
/// without coherence, and messages ([`Dsm::send`], [`Dsm::bcast`], [`Dsm::reduce`]) move
/// bytes, not coherence. Threads of one node share its copies, as the threads of any process
/// share its memory.
///
/// Several nodes may write different bytes of one page between synchronisations: their
/// changed bytes are merged at the home. A data race (two nodes writing the same bytes between
/// synchronisations, or one writing bytes another reads) is not undefined behaviour through
/// [`SharedArray::get`] and [`SharedArray::set`], but its result is unspecified: a reader gets
/// the old value or the new, and after the next barrier each byte holds one of the values
/// written to it, in no promised order, so an element two nodes wrote can end up with bytes
/// of each. Through [`SharedArray::slice`], [`SharedArray::slice_mut`] or a pointer, a data
/// race is undefined behaviour, as anywhere in Rust.
///
/// # Signals and shared memory
///
/// The node serves faults on shared memory from a SIGSEGV/SIGBUS handler that [`init`] installs,
/// and sees reads and writes by the protection it gives each page of shared memory. So:
///
/// - **Keep the DSM's SIGSEGV and SIGBUS handlers.** Install a handler of your own for them
///   *before* [`init`]: the DSM then passes it every fault that is not its own (outside shared
///   memory, or at an address nothing was allocated at), as the kernel would have run it. A
///   handler installed after [`init`] (a Rust program calls `sigaction` itself; nothing stands
///   between them, as libjia does for C) replaces the DSM's: no fault on shared memory could be
///   served again, so the node notices within a second and ends with `the program replaced the
///   DSM's SIGSEGV handler ...` instead of letting the faulting thread spin in your handler.
/// - **Do not change shared memory's protection or mapping** (`mprotect`, `munmap`, `mremap`,
///   `madvise` with advice that discards, `mmap` with `MAP_FIXED` over it): the DSM would no
///   longer see the writes (they would be lost) or find its pages. libjia refuses these calls on
///   shared memory for C programs (-1 with `EPERM`); a Rust program must not make them.
/// - **Handlers of asynchronous signals** (a timer's SIGALRM) may read and write shared memory:
///   the DSM holds those signals off while it serves a fault (its own threads block them, so
///   they run on the program's threads), and a fault taken in such a handler is served like any
///   other. A call that holds the node's state holds them off too, once the node knows the
///   program has such a handler: at [`init`], then by looking every second. A handler installed
///   after [`init`] that faults on shared memory within that second, while its thread is in a
///   call that holds the state, ends the node with a message (that fault could never be served):
///   install such handlers before [`init`]. A fault in such a handler may allocate, so, as with
///   `malloc` in a handler, it must not interrupt the program inside the allocator.
///
/// Each synchronisation call has an example: [`Dsm::lock`], [`Dsm::barrier`], [`Dsm::setcv`]
/// (with [`Dsm::waitcv`]), [`Dsm::send`] (with [`Dsm::recv`]). Run as they are, they are
/// one-node jobs; under `dsmrun -n 4` the same code runs on four nodes.
pub struct Dsm {
    rank: u16,
    size: u16,
    base: usize,
    /// The shared region's length in bytes.
    len: usize,
    t0: Instant,
    exited: AtomicBool,
    /// The thread that makes the node leave the job (its `gettid`), once `exited`: the calls
    /// of every other thread are refused from then on.
    leaving_thread: AtomicI32,
    /// The first call of another thread refused while the node leaves: the leaving thread ends
    /// the node with it once the node has left (see [`Dsm::call`]).
    refused_while_leaving: Mutex<Option<String>>,
    /// `jia_exit` is done: the service thread is gone, and any further call ends the process
    /// with a message instead of waiting forever for it.
    left: AtomicBool,
    service: Mutex<Option<JoinHandle<()>>>,
    /// Sequence numbers of this node's broadcasts and reductions (collective: every node
    /// counts the same calls), the tags their letters carry.
    pub(crate) bcasts: AtomicU32,
    pub(crate) reductions: AtomicU32,
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
    sys::keep_standard_descriptors_taken();
    job::launcher::end_what_this_process_starts();
    let env = match job::job_env().map_err(InitError::Job)? {
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
    sys::keep_standard_descriptors_taken();
    job::launcher::end_what_this_process_starts();
    crate::config::threads_per_node(door::MAX_THREADS).map_err(InitError::Job)?;
    let (rank, size, cookie, config, stats) = match &env {
        Some(e) => (e.rank, e.size, e.cookie, e.config.clone(), e.stats),
        None => {
            let (c, stats) = job::node::local_config().map_err(InitError::Job)?;
            (0, 1, 0, c, stats)
        }
    };
    door::end::set_rank(rank);
    logging::init_node(rank);
    // dsmrun has named the unknown DSM_* variables already; under srun, mpirun or alone, node 0
    // does.
    if rank == 0 && std::env::var_os("DSM_RANK").is_none() {
        for w in crate::config::unknown_env_vars() {
            log::warn!("{w}");
        }
    }
    if let Some(on_host) = env.as_ref().and_then(|e| e.on_host) {
        if config.bind_to_core {
            bind_to_core(on_host);
        }
    }
    name_panics_by_node();
    // A Rust program ignores SIGPIPE from its start (the standard library's choice); a C
    // program's disposition is its own (one that ignores it, to see EPIPE, keeps it so).
    if !fault::program::is_c() {
        sys::signals::default_sigpipe();
    }
    sys::keep_freed_heap(KEPT_HEAP_BYTES);
    trace::init(rank).map_err(InitError::Job)?;
    SLOTS.set_wait_spin_us(config.tuning.wait_spin_us);
    let t0 = Instant::now();
    let len = (config.region_gib << 30) as usize;
    let (region, backing) = Region::map(config.global_start_addr as usize, len, config.huge_pages)
        .map_err(|source| InitError::Region {
            addr: config.global_start_addr,
            len_gib: config.region_gib,
            source,
        })?;
    if let crate::region::Backing::Memfd(Some(why)) = &backing {
        log::debug!("shared memory in 4 KiB pages: {why}");
    }
    let base = region.app_base;
    let race_region = region.for_race_checker();
    fault::install(base, region.service_addr(0) as usize, len).map_err(|source| InitError::Os {
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
    core_cfg.cache_pages = match config.cache_pages {
        0 => crate::config::auto_cache_pages(
            std::env::var("DSM_LOCAL_SIZE")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1),
        ),
        n => n,
    };
    // One-sided page reads where the transport offers them (the core then tracks home writes
    // from allocation on, since homes no longer see every copy leave).
    core_cfg.remote_reads = config.one_sided_reads && config.comm_type == CommType::RdmaRc;
    core_cfg.home_migration = config.home_migration;
    core_cfg.lock_handoffs = config.lock_handoffs;
    core_cfg.prefetch = Prefetch {
        enabled: config.prefetch,
        prefetch_pages: config.prefetch_pages,
        max_checking_pages: config.max_checking_pages,
        read_ahead_max_pages: config.read_ahead_max_kib / (PAGE_SIZE as u32 / 1024),
    };
    // A grant carries as many pages as one message of the transport carries whole.
    core_cfg.grant_run_pages = grant_run_pages(&config);
    core_cfg.forward_within = (config.forward_within_us > 0)
        .then(|| Duration::from_micros(u64::from(config.forward_within_us)));
    IO_PIECE_BYTES.store(
        (core_cfg.cache_pages / 8).max(1) * PAGE_SIZE,
        Ordering::Relaxed,
    );
    // Between nodes of this host, pages read in place (UDP and TCP: RDMA moves runs its own
    // way; the race checker sees a home's pages only as copies it makes).
    let mut region = region;
    if size > 1
        && config.same_host != SameHostMode::Transport
        && matches!(config.comm_type, CommType::Udp | CommType::Tcp)
        && !config.check_races
    {
        region.share_with_host(rank, size, cookie, config.same_host == SameHostMode::Map);
    }
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
    service.linger = crate::service::LINGER.max(Duration::from_millis(config.peer_timeout_ms));
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
    // The service thread never runs a handler of the program's asynchronous signals (a timer's
    // SIGALRM goes to a thread that does not block it: one of the program's). Such a handler may
    // touch shared memory, and the service thread must never fault there; nor may it be the
    // one left to take the signals the fault handler holds off while it serves a fault. It
    // inherits the mask from here.
    let held_off = sys::signals::BlockedSignals::asynchronous();
    let handle = std::thread::Builder::new()
        .name("dsm-service".into())
        .spawn(move || {
            let _runtime = door::threads::runtime_thread();
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
    drop(held_off);
    let dsm = Dsm {
        rank,
        size,
        base,
        len,
        t0,
        exited: AtomicBool::new(false),
        leaving_thread: AtomicI32::new(0),
        refused_while_leaving: Mutex::new(None),
        left: AtomicBool::new(false),
        service: Mutex::new(Some(handle)),
        bcasts: AtomicU32::new(0),
        reductions: AtomicU32::new(0),
    };
    if config.check_races {
        // The checker's clock slots, allocated alike on every node.
        let words = races::slot_words_for(usize::from(size));
        let slots = dsm
            .alloc::<u32>(words, AllocPolicy::OnNode(NodeId(0)))
            .unwrap_or_else(|e| fatal(&format!("check_races: no room for its clocks: {e}")));
        races::start(races::Start {
            node: dsm.id() as u16,
            nodes: dsm.nodes() as u16,
            region: race_region,
            slots: slots.as_atomic_words(),
            end: fatal,
        });
        if let Some(hint) = races::hooks::rust_build_hint().filter(|_| dsm.id() == 0) {
            eprintln!("{hint}");
        }
    }
    Ok(dsm)
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
    // Threads per node (dsmrun --threads): each node gets that many CPUs.
    // Checked at init: a bad value ended the node there.
    let threads = crate::config::threads_per_node(door::MAX_THREADS).unwrap_or(1);
    if count < 2 || count * threads > cpus.len() {
        return log::debug!(
            "bind_to=core: {count} node(s) of {threads} thread(s) on this host, {} CPU(s) \
             allowed: not bound",
            cpus.len()
        );
    }
    let mine = &cpus[index * threads..(index + 1) * threads];
    match sys::bind_to_cpus(mine) {
        Ok(()) => log::debug!("bound to CPUs {mine:?}"),
        Err(e) => log::warn!("bind_to=core: cannot bind to CPUs {mine:?} ({e}): not bound"),
    }
}

/// A node's socket could not be bound: which node, which address and port, and (for a port set
/// by `base_port`) what to change.
fn bind_failed<'a>(
    what: &'static str,
    env: &'a job::JobEnv,
    port: u16,
) -> impl FnOnce(std::io::Error) -> InitError + 'a {
    move |e| {
        let hint = if port == 0 {
            String::new()
        } else if e.kind() == std::io::ErrorKind::AddrInUse {
            format!(
                " (base_port = {}: another job or program holds port {port}; give another \
                 base_port, or 0 for any free port)",
                env.config.base_port
            )
        } else {
            format!(" (base_port = {})", env.config.base_port)
        };
        InitError::Job(format!(
            "node {}: binding the {what} to {}: {e}{hint}",
            env.rank,
            SocketAddr::new(env.bind, port)
        ))
    }
}

type Connected = (Box<dyn Transport>, Option<job::node::Control>);

fn connect(env: &job::JobEnv, config: &Config) -> Result<Connected, InitError> {
    let port = if config.base_port == 0 {
        0
    } else {
        config.base_port + env.rank
    };
    let os = |what| move |source| InitError::Os { what, source };
    let peer_timeout = Duration::from_millis(config.peer_timeout_ms);
    let heartbeat = Duration::from_millis((config.peer_timeout_ms / 10).clamp(20, 1000));
    let impair = impairment(config.comm_type).map_err(InitError::Job)?;
    match config.comm_type {
        CommType::Udp => {
            let sock = udp::bind(SocketAddr::new(env.bind, port)).map_err(bind_failed(
                "UDP socket",
                env,
                port,
            ))?;
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
            if let Some(cfg) = impair {
                t.impair(cfg, u64::from(env.rank));
            }
            Ok((Box::new(t), control))
        }
        CommType::Tcp => {
            let listener = tcp::listen(SocketAddr::new(env.bind, port)).map_err(bind_failed(
                "TCP listener",
                env,
                port,
            ))?;
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
            let listener = tcp::listen(SocketAddr::new(env.bind, port)).map_err(bind_failed(
                "RDMA control listener",
                env,
                port,
            ))?;
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
                let mut t =
                    UdTransport::establish(listener, env.rank, &peers, env.cookie, &cfg, rel)
                        .map_err(unavailable)?;
                if let Some(cfg) = impair {
                    t.impair(cfg, u64::from(env.rank));
                }
                Box::new(t)
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

/// The memory order of a Rust atomic operation as the protocol carries it: `Acquire`,
/// `Release`, or both for `AcqRel` and `SeqCst` (every operation on a word is applied at its
/// home in one order, so `SeqCst` needs nothing more).
pub fn atomic_order(order: Ordering) -> AtomicOrder {
    match order {
        Ordering::Relaxed => AtomicOrder::RELAXED,
        Ordering::Acquire => AtomicOrder::ACQUIRE,
        Ordering::Release => AtomicOrder::RELEASE,
        _ => AtomicOrder::ACQ_REL,
    }
}

macro_rules! shared_atomic {
    ($name:ident, $t:ty, $width:literal, $doc:literal) => {
        #[doc = $doc]
        ///
        /// Every operation is applied at the word's home, in one order for the word, and answers
        /// with the value before (C11's and std's atomics, between nodes). The orderings mean
        /// what they mean for std's atomics: a `Release` (or `AcqRel`, `SeqCst`) operation makes
        /// this node's writes before it visible to a node whose `Acquire` operation reads the
        /// value it wrote, or a later one, as an unlock and a lock do, and what this node's
        /// acquires (`Acquire` operations, locks, condition variables) made it see before
        /// (C11's happens-before is transitive: a chain that leaves each node through an atomic
        /// release is ordered, whatever the words' homes; one that leaves a node through an
        /// unlock is not, see `Dsm::lock`); `Relaxed` orders nothing else, but fences around
        /// relaxed operations order as C11's do when they are [`Dsm::fence`]:
        /// `std::sync::atomic::fence` orders nothing between nodes (the runtime does not see
        /// it). A plain read of the word ordered after an operation sees its value. An
        /// operation on a word homed on another node takes a round trip (a release waits for
        /// this node's diffs first); on one homed here, no message.
        #[derive(Clone, Copy)]
        pub struct $name<'a> {
            dsm: &'a Dsm,
            addr: usize,
        }

        impl<'a> $name<'a> {
            fn op(&self, op: AtomicOp, order: Ordering) -> $t {
                self.dsm
                    .atomic_at(self.addr, $width, op, atomic_order(order)) as $t
            }

            /// Loads the value. Panics on `Release` or `AcqRel`, as std's `load` does.
            #[track_caller]
            pub fn load(&self, order: Ordering) -> $t {
                if matches!(order, Ordering::Release | Ordering::AcqRel) {
                    panic!("there is no such thing as a release load (ordering {order:?})");
                }
                self.op(AtomicOp::Load, order)
            }

            /// Stores `v`. Panics on `Acquire` or `AcqRel`, as std's `store` does.
            #[track_caller]
            pub fn store(&self, v: $t, order: Ordering) {
                if matches!(order, Ordering::Acquire | Ordering::AcqRel) {
                    panic!("there is no such thing as an acquire store (ordering {order:?})");
                }
                self.op(AtomicOp::Store(u64::from(v)), order);
            }

            /// Stores `v`; the value before.
            #[track_caller]
            pub fn swap(&self, v: $t, order: Ordering) -> $t {
                self.op(AtomicOp::Swap(u64::from(v)), order)
            }

            /// Stores `new` if the value is `current`: `Ok(current)`, else `Err(value)`. The
            /// operation has `success`'s ordering and `failure`'s acquire if it has one. Panics
            /// on a `Release` or `AcqRel` failure ordering, as std's does.
            #[track_caller]
            pub fn compare_exchange(
                &self,
                current: $t,
                new: $t,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$t, $t> {
                if matches!(failure, Ordering::Release | Ordering::AcqRel) {
                    panic!(
                        "there is no such thing as a release failure ordering (ordering \
                         {failure:?})"
                    );
                }
                let mut order = atomic_order(success);
                order.acquire |= atomic_order(failure).acquire;
                let op = AtomicOp::CompareExchange {
                    expected: u64::from(current),
                    new: u64::from(new),
                };
                let old = self.dsm.atomic_at(self.addr, $width, op, order) as $t;
                if old == current { Ok(old) } else { Err(old) }
            }

            /// Adds `v` (wrapping); the value before.
            #[track_caller]
            pub fn fetch_add(&self, v: $t, order: Ordering) -> $t {
                self.op(AtomicOp::FetchAdd(u64::from(v)), order)
            }

            /// Subtracts `v` (wrapping); the value before.
            #[track_caller]
            pub fn fetch_sub(&self, v: $t, order: Ordering) -> $t {
                self.op(AtomicOp::FetchSub(u64::from(v)), order)
            }

            /// Bitwise and with `v`; the value before.
            #[track_caller]
            pub fn fetch_and(&self, v: $t, order: Ordering) -> $t {
                self.op(AtomicOp::FetchAnd(u64::from(v)), order)
            }

            /// Bitwise or with `v`; the value before.
            #[track_caller]
            pub fn fetch_or(&self, v: $t, order: Ordering) -> $t {
                self.op(AtomicOp::FetchOr(u64::from(v)), order)
            }

            /// Bitwise exclusive or with `v`; the value before.
            #[track_caller]
            pub fn fetch_xor(&self, v: $t, order: Ordering) -> $t {
                self.op(AtomicOp::FetchXor(u64::from(v)), order)
            }
        }
    };
}

shared_atomic!(
    SharedAtomicU64,
    u64,
    8,
    "An atomic `u64` in shared memory, exact across nodes ([`Dsm::atomic_u64`])."
);
shared_atomic!(
    SharedAtomicU32,
    u32,
    4,
    "An atomic `u32` in shared memory, exact across nodes ([`Dsm::atomic_u32`])."
);
shared_atomic!(
    SharedAtomicU16,
    u16,
    2,
    "An atomic `u16` in shared memory, exact across nodes ([`Dsm::atomic_u16`])."
);
shared_atomic!(
    SharedAtomicU8,
    u8,
    1,
    "An atomic `u8` in shared memory, exact across nodes ([`Dsm::atomic_u8`]): a flag, or a \
     byte of counters packed beside plain data (each node's plain writes to the bytes around it \
     travel as byte-exact diffs, so none undoes another's operations)."
);

/// A held lock; dropping it releases the lock (on the thread that took it: a guard cannot move
/// to another thread, since the lock is the taking thread's).
#[must_use = "the lock is released when the guard drops: bind it with `let _guard = ...`"]
pub struct LockGuard<'a> {
    dsm: &'a Dsm,
    lock: u16,
    /// Not `Send`: the lock is held by the thread that took it.
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

    /// Whether the `bytes` bytes at `addr` lie in the shared region.
    pub fn in_region(&self, addr: usize, bytes: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(bytes)
                .is_some_and(|end| end <= self.base + self.len)
    }

    /// Runs `c` on the node for the calling thread (see [`call`]).
    fn call(&self, c: Call) -> CallResult {
        in_the_nodes_process(c.name());
        if self.left.load(Ordering::SeqCst) {
            fatal(&format!(
                "{} after jia_exit: this node has left the job, nothing can answer it",
                c.name()
            ));
        }
        // A call that asks other nodes for something, on another thread than the one leaving
        // (a receive waits for letters already on their way, an error ends the job as it
        // would have).
        if self.exited.load(Ordering::SeqCst)
            && !matches!(
                c,
                Call::Receive(_)
                    | Call::Error(_)
                    | Call::Stats
                    | Call::StartStats
                    | Call::StopStats
                    | Call::HomeMigration(_)
            )
            && self.leaving_thread.load(Ordering::SeqCst) != sys::gettid()
        {
            // Its messages could reach nodes that have left. The thread waits for the end the
            // leaving thread gives the node with this message: one end, whichever thread
            // finishes first (two threads ending the process at once, one with its status and
            // one with the message's, gave either).
            let msg = format!(
                "{} on one thread while another makes this node leave the job (jia_exit, or \
                 exit or a return from main): a node's threads are done with the DSM before it \
                 leaves",
                c.name()
            );
            self.refused_while_leaving
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(msg.clone());
            if self.left.load(Ordering::SeqCst) {
                // It left before it could see the message.
                fatal(&msg);
            }
            loop {
                std::thread::park();
            }
        }
        call::call(c)
    }

    /// [`Dsm::call`], ending the process with a message that names the call, what was wrong
    /// and the application's line that made it (a misuse, like unlocking a lock not held, is
    /// the program's bug: the job cannot go on, and a backtrace would not say more).
    #[track_caller]
    pub(crate) fn call_or_die(&self, c: Call) -> Reply {
        self.call_or_die_at(c, std::panic::Location::caller())
    }

    /// [`Dsm::call_or_die`] naming `at` as the application's line (not a line of the runtime's
    /// or libjia's own, which says nothing to the program's author: a C program's call comes
    /// through libjia).
    fn call_or_die_at(&self, c: Call, at: &std::panic::Location<'_>) -> Reply {
        let what = c.name();
        match self.call(c) {
            Ok(r) => r,
            Err(e) => die_at(format!("{what}: {e}"), at),
        }
    }

    /// Allocates `len` elements collectively with `policy` (every node makes the same call).
    /// An array larger than the address space is refused (`UsageError::Alloc`), as is one larger
    /// than the shared region.
    #[track_caller]
    pub fn alloc<T: Shared>(
        &self,
        len: usize,
        policy: AllocPolicy,
    ) -> Result<SharedArray<T>, UsageError> {
        self.alloc_from(
            len,
            policy,
            races::From::Caller(std::panic::Location::caller()),
        )
    }

    /// [`Dsm::alloc`] made at `from` (for the race checker's reports; libjia passes its C
    /// caller's address).
    #[doc(hidden)]
    pub fn alloc_from<T: Shared>(
        &self,
        len: usize,
        policy: AllocPolicy,
        from: races::From,
    ) -> Result<SharedArray<T>, UsageError> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|b| u64::try_from(b.max(1)).ok())
            .ok_or(UsageError::Alloc(dsm_core::AllocError::Overflow {
                elements: len as u64,
                element_bytes: std::mem::size_of::<T>() as u64,
            }))?;
        match self.call(Call::Alloc { policy, bytes })? {
            Reply::Allocated(off) => {
                let addr = self.base + off as usize;
                allocations::note(addr, bytes as usize, races::allocation_site(from));
                races::allocated(addr, bytes as usize, std::mem::size_of::<T>(), from);
                Ok(SharedArray::new(addr as *mut T, len))
            }
            other => unexpected("jia_alloc", &other),
        }
    }

    /// Acquires lock `lock` (0..64) for this thread until the guard drops (`jia_lock`). A lock
    /// this thread holds already ends the node, naming the caller's line.
    ///
    /// An acquire: the holder sees every write made under this lock by its earlier holders.
    /// Dropping the guard unlocks it (`jia_unlock`), a release. Bind the guard (`let _guard`):
    /// `let _ = dsm.lock(..)` would drop it, and unlock, at once.
    ///
    /// ```
    /// use dsm_runtime::{AllocPolicy, NodeId};
    ///
    /// let dsm = dsm_runtime::init().expect("join the job");
    /// let count = dsm.alloc::<u64>(1, AllocPolicy::OnNode(NodeId(0))).unwrap();
    /// {
    ///     let _guard = dsm.lock(3); // acquire: sees the increments made under lock 3
    ///     count.set(0, count.get(0) + 1);
    /// } // the guard drops: unlock, a release
    /// dsm.barrier(); // every node sees every increment
    /// assert_eq!(count.get(0), dsm.nodes() as u64);
    /// dsm.exit();
    /// ```
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
        let _w = progress::waiting_for_lock(lock);
        // Before the acquire's invalidations: a slice's bytes are compared with what it wrote.
        races::sync_event(Event::Waiting);
        self.call(Call::Lock(LockId(lock)))?;
        races::sync_event(Event::Acquired(Object::Lock(lock)));
        Ok(())
    }

    /// `jia_unlock`: a lock this thread does not hold is an error.
    pub fn unlock_raw(&self, lock: u16) -> Result<(), UsageError> {
        races::sync_event(Event::Releasing(Object::Lock(lock)));
        self.call(Call::Unlock(LockId(lock))).map(drop)
    }

    /// A barrier with coherence (`jia_barrier`): every node waits until all have arrived. A
    /// release and then an acquire on every node: after it, each node sees every write any node
    /// made before it.
    ///
    /// ```
    /// use dsm_runtime::{AllocPolicy, NodeId};
    ///
    /// let dsm = dsm_runtime::init().expect("join the job");
    /// let (me, n) = (dsm.id(), dsm.nodes());
    /// let a = dsm.alloc::<u32>(n, AllocPolicy::OnNode(NodeId(0))).unwrap();
    /// a.set(me, 10 * me as u32); // each node writes its own element
    /// dsm.barrier();
    /// assert!((0..n).all(|i| a.get(i) == 10 * i as u32)); // and reads everybody's
    /// dsm.exit();
    /// ```
    #[track_caller]
    pub fn barrier(&self) {
        // Before any lock of the process's: a forked child's copy of one may be held forever.
        in_the_nodes_process("jia_barrier");
        let _w = progress::waiting("jia_barrier");
        races::sync_event(Event::Waiting);
        crate::team::plain_barrier(|| self.call_or_die(Call::Barrier { threads: 1 }));
        races::sync_event(Event::NodeBarrierDone);
        races::sync_event(Event::BarrierLeft);
    }

    /// A barrier of `threads` threads of every node (`jia_barrier_threads`): each of the
    /// node's threads that take part calls it with the same count; the last of them to arrive
    /// does the node's [`Dsm::barrier`] (one message up and one down per node, whatever the
    /// number of threads), and none leaves before it is done. Every write any thread of any node
    /// made before it is seen by every thread of every node after it. `barrier_threads(1)` is
    /// [`Dsm::barrier`].
    ///
    /// ```
    /// use dsm_runtime::{AllocPolicy, NodeId};
    ///
    /// let dsm = dsm_runtime::init().expect("join the job");
    /// let threads = 2;
    /// let a = dsm.alloc::<u64>(threads * dsm.nodes(), AllocPolicy::OnNode(NodeId(0))).unwrap();
    /// std::thread::scope(|s| {
    ///     for t in 0..threads {
    ///         let dsm = &dsm;
    ///         s.spawn(move || {
    ///             a.set(dsm.id() * threads + t, 1);
    ///             dsm.barrier_threads(threads);
    ///             let seen: u64 = (0..a.len()).map(|i| a.get(i)).sum();
    ///             assert_eq!(seen as usize, a.len());
    ///         });
    ///     }
    /// });
    /// dsm.exit();
    /// ```
    #[track_caller]
    pub fn barrier_threads(&self, threads: usize) {
        in_the_nodes_process("jia_barrier_threads");
        let at = std::panic::Location::caller();
        races::sync_event(Event::Waiting);
        crate::team::barrier(threads, at, || {
            let _w = progress::waiting("jia_barrier");
            // team::barrier refused counts over MAX_THREADS, which fits.
            let threads = threads as u16;
            self.call_or_die_at(Call::Barrier { threads }, at);
            races::sync_event(Event::NodeBarrierDone);
        });
        races::sync_event(Event::BarrierLeft);
    }

    /// A barrier without coherence (`jia_wait`): every node waits until all have arrived, and
    /// no write travels (neither a release nor an acquire).
    #[track_caller]
    pub fn wait(&self) {
        in_the_nodes_process("jia_wait");
        let _w = progress::waiting("jia_wait");
        self.call_or_die(Call::Wait);
    }

    /// Sets condition variable `cv` (0 to [`crate::MAX_CVS`] - 1), a release (`jia_setcv`): the writes this node
    /// made before it are seen by the nodes whose [`Dsm::waitcv`] it ends. It stays set until
    /// [`Dsm::resetcv`].
    ///
    /// ```
    /// use dsm_runtime::{AllocPolicy, NodeId};
    ///
    /// let dsm = dsm_runtime::init().expect("join the job");
    /// let data = dsm.alloc::<f64>(512, AllocPolicy::OnNode(NodeId(0))).unwrap();
    /// if dsm.id() == 0 {
    ///     for i in 0..data.len() {
    ///         data.set(i, i as f64);
    ///     }
    ///     dsm.setcv(1); // release: node 0's writes go to their homes first
    /// }
    /// dsm.waitcv(1); // acquire: waits until cv 1 is set, then sees the writes before it
    /// assert_eq!(data.get(511), 511.0);
    /// dsm.exit();
    /// ```
    #[track_caller]
    pub fn setcv(&self, cv: u16) {
        races::sync_event(Event::Releasing(Object::Cv(cv)));
        self.call_or_die(Call::SetCv(CvId(cv)));
    }

    /// Clears condition variable `cv` (`jia_resetcv`).
    #[track_caller]
    pub fn resetcv(&self, cv: u16) {
        self.call_or_die(Call::ResetCv(CvId(cv)));
    }

    /// Waits until condition variable `cv` is set, an acquire (`jia_waitcv`): then this node
    /// sees the writes made before the [`Dsm::setcv`] (example there).
    #[track_caller]
    pub fn waitcv(&self, cv: u16) {
        let _w = progress::waiting_for_cv(cv);
        races::sync_event(Event::Waiting);
        self.call_or_die(Call::WaitCv(CvId(cv)));
        races::sync_event(Event::Acquired(Object::Cv(cv)));
    }

    /// Zeroes this node's statistics (`jia_startstat`).
    pub fn start_stats(&self) {
        self.call_or_die(Call::StartStats);
    }

    /// Element `i` of `array` as an atomic word shared by every node (`std::sync::atomic`'s
    /// method names). Every node of the job may use it at once; a plain access of the same
    /// element may not race with it (as in C11).
    ///
    /// ```
    /// use std::sync::atomic::Ordering;
    /// use dsm_runtime::{AllocPolicy, NodeId};
    ///
    /// let dsm = dsm_runtime::init().expect("join the job");
    /// let next = dsm.alloc::<u64>(1, AllocPolicy::OnNode(NodeId(0))).unwrap();
    /// dsm.barrier();
    /// let ticket = dsm.atomic_u64(next, 0).fetch_add(1, Ordering::AcqRel);
    /// assert!(ticket < dsm.nodes() as u64);
    /// dsm.barrier();
    /// assert_eq!(next.get(0), dsm.nodes() as u64);
    /// dsm.exit();
    /// ```
    #[track_caller]
    pub fn atomic_u64(&self, array: SharedArray<u64>, i: usize) -> SharedAtomicU64<'_> {
        SharedAtomicU64 {
            dsm: self,
            addr: array.element_addr(i),
        }
    }

    /// Element `i` of `array` as an atomic `u32` shared by every node (see
    /// [`Dsm::atomic_u64`]).
    #[track_caller]
    pub fn atomic_u32(&self, array: SharedArray<u32>, i: usize) -> SharedAtomicU32<'_> {
        SharedAtomicU32 {
            dsm: self,
            addr: array.element_addr(i),
        }
    }

    /// Element `i` of `array` as an atomic `u16` shared by every node (see
    /// [`Dsm::atomic_u64`]).
    #[track_caller]
    pub fn atomic_u16(&self, array: SharedArray<u16>, i: usize) -> SharedAtomicU16<'_> {
        SharedAtomicU16 {
            dsm: self,
            addr: array.element_addr(i),
        }
    }

    /// Element `i` of `array` as an atomic `u8` shared by every node (see
    /// [`Dsm::atomic_u64`]).
    #[track_caller]
    pub fn atomic_u8(&self, array: SharedArray<u8>, i: usize) -> SharedAtomicU8<'_> {
        SharedAtomicU8 {
            dsm: self,
            addr: array.element_addr(i),
        }
    }

    /// An atomic operation on the `width`-byte word at address `addr` of this process (in the
    /// shared region): the value before. For the C interface and the typed atomics.
    pub fn atomic_raw(
        &self,
        addr: usize,
        width: u8,
        op: AtomicOp,
        order: AtomicOrder,
    ) -> Result<u64, UsageError> {
        self.atomic_declared(addr, width, op, order, order)
    }

    /// [`Dsm::atomic_raw`] made with `order`, for a program that declared `declared`: the race
    /// checker orders the program's accesses as `declared` says (libjia makes every C11 atomic
    /// on shared memory acquire and release, and a program that relied on that alone would
    /// still race as C11 reads it).
    #[doc(hidden)]
    pub fn atomic_declared(
        &self,
        addr: usize,
        width: u8,
        op: AtomicOp,
        mut order: AtomicOrder,
        declared: AtomicOrder,
    ) -> Result<u64, UsageError> {
        if !self.in_region(addr, usize::from(width)) {
            return Err(UsageError::AtomicNotShared {
                addr: addr as u64,
                width,
            });
        }
        // A relaxed operation on a word homed here, in a process that has made no fence and
        // checks no race: the CPU's atomic, and nothing else.
        if !order.acquire && !order.release && !crate::fences::made() && !races::on() {
            if let Some(old) = crate::region::relaxed_at_home(addr, width, op) {
                return Ok(old);
            }
        }
        // The whole operation's time, for the spin it may be part of (`progress::note_atomic`):
        // a spin's time goes to its operations, not between them; the report that samples what
        // the thread does between them knows it is in one until its note.
        let in_atomic = progress::atomic_begins();
        // The thread's fences around its relaxed operations (`Dsm::fence`), and the race
        // checker's: a relaxed store after a release fence passes the fence's clock on, a
        // relaxed read is noted for the next acquire fence.
        let (stores, reads) = (op != AtomicOp::Load, !matches!(op, AtomicOp::Store(_)));
        let (release, acquire) = crate::fences::relaxed(
            addr,
            width,
            || crate::region::atomics_homed_here(addr),
            stores && !order.release,
            reads && !order.acquire,
        );
        order.release |= release;
        order.acquire |= acquire;
        let word = races::Word::Shared(addr);
        let checked = races::on();
        if checked && stores && !declared.release {
            races::atomic_storing(word, false);
        }
        let value = self.atomic_made(addr, width, op, order, declared)?;
        if checked && reads && !declared.acquire {
            races::atomic_read(word, false);
        }
        // A spin on the word is a wait the launcher's verdict must see.
        in_atomic.noted(addr, width, op, value);
        Ok(value)
    }

    /// [`Dsm::atomic_declared`] past the fences' bookkeeping: the operation as `order` says.
    #[inline]
    fn atomic_made(
        &self,
        addr: usize,
        width: u8,
        op: AtomicOp,
        order: AtomicOrder,
        declared: AtomicOrder,
    ) -> Result<u64, UsageError> {
        let offset = addr.wrapping_sub(self.base) as u64;
        if !order.acquire && !order.release {
            if let Some(old) = crate::region::relaxed_at_home(addr, width, op) {
                return Ok(old);
            }
        }
        if op == AtomicOp::Load && self.left.load(Ordering::SeqCst) {
            // After jia_exit the pages held stay readable, an atomic word's as any (a program
            // prints its counters there).
            if let Some(v) = crate::region::load_after_exit(addr, width) {
                return Ok(v);
            }
        }
        let _w = progress::waiting_in_atomic();
        if declared.acquire {
            // Before the acquire's invalidations, as for a lock.
            races::sync_event(Event::Waiting);
        }
        if declared.release {
            races::sync_event(Event::Releasing(Object::Atomic(addr)));
        }
        let call = Call::Atomic {
            addr: GlobalAddr(offset),
            width,
            op,
            order,
        };
        match self.call(call)? {
            Reply::Value(v) => {
                if declared.acquire {
                    races::sync_event(Event::Acquired(Object::Atomic(addr)));
                }
                Ok(v)
            }
            other => unexpected("jia_atomic", &other),
        }
    }

    /// A fence, as `std::sync::atomic::fence` (C11's `atomic_thread_fence`), for this
    /// thread's relaxed operations on shared atomics, whose effects std's fence cannot carry
    /// between nodes: after a `Release` fence (or `AcqRel`, `SeqCst`), a relaxed store of this
    /// thread makes its writes before the fence visible to a node that reads the value with a
    /// relaxed load and then makes an `Acquire` fence (or reads it with an acquire operation).
    /// An acquire fence loads each word this thread read with relaxed order since its last
    /// acquire fence again, with acquire semantics (a round trip to each word's home; past 32
    /// words, one to each home of atomic words this node knows); a
    /// release fence costs nothing until the thread's next relaxed store to each word, which
    /// releases (the next ones to that word do not). Panics on `Relaxed`, as std's does.
    #[track_caller]
    pub fn fence(&self, order: Ordering) {
        let AtomicOrder { acquire, release } = atomic_order(order);
        if !acquire && !release {
            panic!("there is no such thing as a relaxed fence");
        }
        std::sync::atomic::fence(order);
        if acquire {
            // A word whose operation was refused (misaligned, not allocated: an error the
            // program took from `atomic_raw`) read nothing, and is refused again here.
            let load = |addr: usize, width: u8| {
                let (acquire, relaxed) = (AtomicOrder::ACQUIRE, AtomicOrder::RELAXED);
                let _ = self.atomic_made(addr, width, AtomicOp::Load, acquire, relaxed);
            };
            match crate::fences::acquire_fence() {
                ToAcquire::Words(words) => words.for_each(|(addr, width)| load(addr, width)),
                ToAcquire::EveryHome => {
                    let mut from = 0;
                    while let Ok(Reply::Value(v)) = self.call(Call::AtomicPageHomedFrom(from)) {
                        if v == u64::MAX {
                            break;
                        }
                        load(self.base + (v & ((1 << 48) - 1)) as usize, 8);
                        from = (v >> 48) as u16 + 1;
                    }
                }
            }
            races::acquire_fence();
        }
        if release {
            crate::fences::release_fence();
            races::release_fence();
        }
    }

    /// [`Dsm::atomic_raw`], ending the node with a message naming the caller's line on misuse.
    #[track_caller]
    fn atomic_at(&self, addr: usize, width: u8, op: AtomicOp, order: AtomicOrder) -> u64 {
        let at = std::panic::Location::caller();
        self.atomic_raw(addr, width, op, order)
            .unwrap_or_else(|e| fatal(&format!("jia_atomic: {e} (at {at})")))
    }

    /// Turns home migration on or off from this node's next barrier on (`jia_config(HMIG,
    /// ON/OFF)`; the `home_migration` key sets it for the whole job). Every node should make the
    /// same call between the same barriers: a node with it off offers no page, so none moves
    /// to it.
    pub fn set_home_migration(&self, on: bool) {
        self.call_or_die(Call::HomeMigration(on));
    }

    /// Freezes the statistics node 0 reports at exit (`jia_stopstat`).
    pub fn stop_stats(&self) {
        self.call_or_die(Call::StopStats);
    }

    /// This node's statistics now.
    pub fn stats(&self) -> NodeStats {
        match self.call_or_die(Call::Stats) {
            Reply::Stats(s) => *s,
            other => unexpected("stats", &other),
        }
    }

    /// Ends the job with an error seen by every node (`jia_error`): prints `msg`, tells the
    /// other nodes (waiting until they have the message, half a second at most), exits with
    /// status 1.
    pub fn error(&self, msg: &str) -> ! {
        if !self.left.load(Ordering::SeqCst) {
            let _ = self.call(Call::Error(msg.to_string()));
        }
        fatal(msg);
    }

    /// What a process that leaves `main` (or calls `exit`) without `jia_exit` does (libjia
    /// calls this from its exit handler with the process's exit `status`). Status 0: it leaves
    /// the job as `jia_exit` would, as in JIAJIA. Any other status is a failure the other nodes
    /// cannot wait out: they are told that this node ended with it (the launcher then names this
    /// node and ends the job with that status, as mpirun does), and the process ends with it
    /// (`door::end::leave_with`). Nothing if the node has left already or is ending with an
    /// error, or in a process forked from the node (the job is its parent's).
    pub fn exit_at_process_end(&self, status: i32) {
        if door::end::ending() || door::flags::FORKED.load(Ordering::Relaxed) {
            return;
        }
        // What the process's parent sees: `exit(256)` ends it with status 0.
        let status = status & 0xff;
        if status == 0 {
            return self.leave(Some(
                "exit with status 0 (a return from main, or exit(0) on any thread) before \
                 jia_exit",
            ));
        }
        if self.exited.load(Ordering::SeqCst) {
            return;
        }
        door::end::set_ending_with(status);
        let _ = self.call(Call::Error(format!(
            "node {} ended with status {status} without leaving the job (exit or a return from \
             main before jia_exit)",
            self.rank
        )));
        door::end::leave_with(status);
    }

    /// Leaves the job: waits for every node, prints statistics at node 0 if asked (`jia_exit`).
    #[track_caller]
    pub fn exit(&self) {
        self.leave(None);
    }

    /// [`Dsm::exit`], called as the program's `jia_exit`, or (`how`) otherwise: what its
    /// refusal names.
    #[track_caller]
    fn leave(&self, how: Option<&str>) {
        in_the_nodes_process("jia_exit");
        if self.exited.swap(true, Ordering::SeqCst) {
            return;
        }
        self.leaving_thread.store(sys::gettid(), Ordering::SeqCst);
        // A wait in an exit the program did not call by name says how it got there.
        let _w = progress::waiting(match how {
            None => "jia_exit".to_string(),
            Some(how) => format!("jia_exit, reached by {how}"),
        });
        // Before this node's exit message: node 0 gathers every node's records.
        races::gather_records(
            |to, bytes| self.send_race_records(to, bytes),
            |from| self.receive_race_records(from),
        );
        match how {
            None => {
                self.call_or_die(Call::Exit);
            }
            Some(how) => {
                if let Err(e) = self.call(Call::Exit) {
                    fatal(&format!("{how}: {e}"));
                }
            }
        }
        if let Some(h) = self
            .service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = h.join();
        }
        self.left.store(true, Ordering::SeqCst);
        let refused = self
            .refused_while_leaving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(msg) = refused {
            fatal(&msg);
        }
        if races::report_at_node0() {
            sys::exit_status_at_end(races::EXIT_RACES, job::launcher::before_a_quick_exit);
        }
    }
}

/// Ends a process forked from a node that makes a DSM call (`what`), with a message: the
/// node's state was copied into the child, but its service thread, connections and the other
/// nodes' records of it are the parent's, and driving them from a stale copy would break the
/// parent's job. `_exit`: the child's copy of the parent's unwritten output is not written
/// twice.
pub(crate) fn in_the_nodes_process(what: &str) {
    if door::flags::FORKED.load(Ordering::Relaxed) {
        door::end::die(
            &format!(
                "{what} in a process forked from node {} (pid {}): only the node's own process \
                 takes part in the job, and a forked child may not touch shared memory",
                door::end::rank(),
                std::process::id()
            ),
            1,
        );
    }
}

/// Ends the process with `msg` (a misuse of the API), naming the program's line `at` when it is
/// not one of the runtime's or libjia's own (libjia's C calls name their call and values).
pub(crate) fn die_at(msg: String, at: &std::panic::Location<'_>) -> ! {
    if ours(at) {
        fatal(&msg)
    } else {
        fatal(&format!("{msg} (at {at})"))
    }
}

/// Whether `at` is a line of the runtime's or libjia's own sources.
/// (As built in this workspace the paths are relative to it; as a dependency of another
/// project, absolute.)
fn ours(at: &std::panic::Location<'_>) -> bool {
    use std::path::Path;
    let file = Path::new(at.file());
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = crate_dir.parent().unwrap_or(crate_dir);
    [
        crate_dir.join("src"),
        workspace.join("jia/src"),
        "dsm-runtime/src".into(),
        "jia/src".into(),
    ]
    .iter()
    .any(|dir| file.starts_with(dir))
}

/// A reply of the wrong kind: a runtime bug.
fn unexpected(what: &str, reply: &Reply) -> ! {
    fatal(&format!(
        "{what}: unexpected answer {reply:?} (a runtime bug)"
    ))
}

impl Drop for Dsm {
    fn drop(&mut self) {
        if self.exited.load(Ordering::SeqCst) || door::flags::FORKED.load(Ordering::Relaxed) {
            return;
        }
        if std::thread::panicking() {
            let text = format!("node {} panicked", self.rank);
            let _ = self.call(Call::Error(text));
        } else {
            self.exit();
        }
    }
}

/// Pages per grant for `config`'s transport: what one message carries whole. UDP: one datagram
/// of `msg_buffer_size` (a larger grant would be fragmented and reassembled: one more copy);
/// TCP: 256 KiB writes; RDMA: one page per grant (RC reads runs one-sided; a UD datagram is the
/// path MTU, under a page and a half).
fn grant_run_pages(config: &Config) -> usize {
    use dsm_core::codec::{GRANT_HEADER_BYTES, HEADER_BYTES};
    match config.comm_type {
        CommType::Udp => {
            let payload = config.msg_buffer_size.saturating_sub(
                dsm_transport::reliable::HEADER_BYTES + HEADER_BYTES + GRANT_HEADER_BYTES,
            );
            (payload / PAGE_SIZE).max(1)
        }
        CommType::Tcp => 64,
        CommType::RdmaRc | CommType::RdmaUd => 1,
    }
}
