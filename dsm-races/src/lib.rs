//! The data race checker (`check_races = on`, `dsmrun --check-races`).
//!
//! Every thread records, between two of its synchronisations (a *segment*), which bytes of
//! which pages it read and wrote, and from where (a Rust accessor's caller, or the return
//! address of a C program's `-fsanitize=thread` hook). Segments are ordered by vector clocks:
//! a lock's clock travels in a hidden slot of shared memory written by its holder before the
//! release (so the lock itself makes it coherent), a condition variable's in one slot per node,
//! and a barrier orders everything before it before everything after it (an epoch: clocks start
//! again).
//!
//! The clocks follow the memory's scope consistency: a release through a lock or condition
//! variable passes to other nodes what its own node's threads did before it (the writes its
//! notices name), not what its thread had learned from other objects (the DSM passes no lock's
//! notices on: a node that takes lock 1 after the writer and then releases lock 2 does not make
//! the writer's writes visible to the next holder of lock 2). A release through an atomic word
//! passes on, besides, what its node's acquires (of atomic words, locks, condition variables)
//! took from other nodes in the epoch (the DSM passes on the writes its acquires made it see: a
//! chain that leaves each node through an atomic word is ordered, as C11 orders it). So the slots of shared memory
//! hold the entries of the releasing node's threads, gathered over the epoch's releases (the
//! managers gather the notices so), and the node's own threads pass each other the whole clock
//! through the node's memory ([`Local::Shared`]), which does carry what any of them learned.
//!
//! Letters (`jia_send`) and `jia_wait` order nothing: they carry no coherence. At `jia_exit` every node sends its segments to node 0 (letters on a channel of their own);
//! node 0, once every node has left, reports each pair of accesses to the same bytes from
//! different threads, one of them a write, that no synchronisation orders (`report`), and the
//! process ends with status 66 if there was any.
//!
//! Off (the default), every hook is one relaxed load of `ON` and a branch.
//!
//! # The runtime's interface
//!
//! - [`start`] with a [`Start`] (every node, at init; the region, the clock slots in shared
//!   memory, and how to end the process when the checker cannot go on);
//! - [`sync_event`], one call per synchronisation event the DSM makes ([`Event`]);
//! - [`access`] for an access, [`slice_taken`] and [`slice_dropped`] for a slice;
//! - [`incoming_write`] around each write the protocol makes into the region;
//! - [`allocated`] for an allocation ([`allocation_site`] names its site);
//! - [`gather_records`] at exit, with a send/receive pair for the records, and then
//!   [`report_at_node0`].
//!
//! libjia's C entry points add the synchronisations of a node's threads that the DSM does not
//! make ([`local_release`], [`local_acquire`], the thread and barrier calls) and a program's
//! signal handlers ([`in_signal_handler`]).

#![deny(unsafe_code)]

mod bits;
mod handler;
mod incoming;
pub(crate) mod records;
pub(crate) mod report;
mod slices;
pub(crate) mod summary;
#[allow(unsafe_code)]
mod sys;

use bits::changed_bits;
pub(crate) use bits::{for_each_run, run_count, runs_of, set_bits};
use handler::HANDLER_ACCESSES;
pub use handler::in_signal_handler;
pub use incoming::incoming_write;
use slices::Snapshot;
pub use slices::{Taken, slice_dropped, slice_taken};
pub use sys::{CancellationHeld, Region, hooks};

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Threads per node the vector clocks have room for.
pub const VC_THREADS: usize = 1024;
/// The exit status of a job in which races were found (ThreadSanitizer's).
pub const EXIT_RACES: i32 = 66;
const PAGE: usize = dsm_core::PAGE_SIZE;

/// Whether this process checks for races.
static ON: AtomicBool = AtomicBool::new(false);
/// The shared region (`[BASE, BASE + LEN)`), whose accesses are recorded (empty while the
/// checker is off). The compiler's hooks test it first, in their trampolines (`sys::hooks`).
pub(crate) static BASE: AtomicUsize = AtomicUsize::new(0);
pub(crate) static LEN: AtomicUsize = AtomicUsize::new(0);
static CHECKER: OnceLock<Checker> = OnceLock::new();
/// The node's barrier epoch (the checker's `epoch`), read by every access's fast path.
static NODE_EPOCH: AtomicU32 = AtomicU32::new(0);
/// How the process ends when the checker cannot go on (the runtime's end, given at [`start`]).
static END: OnceLock<fn(&str) -> !> = OnceLock::new();

/// Ends the process with `what` (through the runtime's end once started).
#[cold]
fn fatal(what: &str) -> ! {
    match END.get() {
        Some(end) => end(what),
        None => {
            eprintln!("{what}");
            std::process::exit(1)
        }
    }
}

struct Checker {
    node: u16,
    nodes: u16,
    region: Region,
    /// Barriers this node has passed.
    epoch: AtomicU32,
    /// Threads that have recorded anything (each gets the next number).
    threads: AtomicUsize,
    /// Threads whose segment in progress has accesses (a thread's last segment is kept when
    /// it ends, in its thread-local destructor, which may run after a join has returned), and
    /// the end of one. A thread idle in a pool (OpenMP's) has none.
    open: Mutex<usize>,
    ended: std::sync::Condvar,
    /// Numbers of threads that ended, with their last clock: once all [`VC_THREADS`] numbers
    /// were given, a new thread takes one and goes on from that clock (a program may run many
    /// rounds of threads; [`VC_THREADS`] at once at most, as many as the door's slots).
    free_numbers: Mutex<Vec<(usize, u32)>>,
    /// The hidden clock slots: one per lock, then one per condition variable and node.
    slots: &'static [AtomicU32],
    /// Serialises this node's threads' updates of a condition variable's slot.
    cv_slot: Mutex<()>,
    /// The entries of other nodes' threads this node's threads took from slots (atomic words',
    /// locks', condition variables') in an epoch: its atomic releases pass them on, as the DSM
    /// passes on the writes its acquires made it see (`dsm_core`'s `atomics.rs`, "Chains").
    atomic_learned: Mutex<(u32, Entries)>,
    /// Clocks of the synchronisation of this node's threads that the DSM does not make (a C
    /// program's pthread mutexes, barriers and semaphores by address, ended threads by id):
    /// the epoch each is for, and the clock.
    local: Mutex<HashMap<Local, (u32, Entries)>>,
    log: Mutex<Log>,
    site_ids: Mutex<HashMap<Site, u32>>,
    /// At node 0, from its exit on: every node's records.
    gathered: Mutex<Vec<Log>>,
}

/// What one node recorded (sent to node 0 at exit in the form of `records.rs`).
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub node: u16,
    pub sites: Vec<Site>,
    pub allocs: Vec<Alloc>,
    pub segments: Vec<Segment>,
    /// More segments, already in the binary form: a node packs its own as they end (a page
    /// a site wrote whole is a few bytes there, 512 as bits).
    pub packed: Vec<u8>,
    pub packed_count: u32,
}

/// Where an access or allocation was made.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Site {
    /// A source line (a Rust caller).
    Line { file: String, line: u32 },
    /// A return address in a C program: `offset` into the object file `module`.
    Code { module: String, offset: u64 },
}

/// An allocation: `bytes` at `offset` into the region, of `element`-byte elements.
#[derive(Debug)]
pub(crate) struct Alloc {
    pub offset: u64,
    pub bytes: u64,
    pub element: u32,
    pub site: u32,
}

/// A thread's accesses between two of its synchronisations.
#[derive(Debug)]
pub(crate) struct Segment {
    /// The thread: node * VC_THREADS + its number on the node.
    pub thread: u32,
    pub epoch: u32,
    /// The thread's own clock in this segment.
    pub clock: u32,
    /// What the thread had seen of the others: (thread, clock), the nonzero entries.
    pub seen: Vec<(u32, u32)>,
    pub accesses: Vec<Access>,
}

/// The bytes of one page a segment read or wrote from one site, one bit each.
#[derive(Debug)]
pub(crate) struct Access {
    pub page: u32,
    pub site: u32,
    pub write: bool,
    pub bytes: Bytes,
}

/// The bytes of a page an access touched: runs `[lo, hi)`, in order and apart (most: a few
/// bytes for a page touched whole), or one bit each (a page touched in many pieces).
#[derive(Debug)]
pub(crate) enum Bytes {
    Runs(Vec<(u16, u16)>),
    Bits(Box<PageBits>),
}

impl Bytes {
    /// As runs.
    pub(crate) fn runs(&self) -> std::borrow::Cow<'_, [(u16, u16)]> {
        match self {
            Bytes::Runs(r) => std::borrow::Cow::Borrowed(r),
            Bytes::Bits(b) => std::borrow::Cow::Owned(runs_of(b)),
        }
    }

    /// The first byte both touched.
    pub(crate) fn first_common(&self, other: &Bytes) -> Option<u16> {
        if let (Bytes::Bits(a), Bytes::Bits(b)) = (self, other) {
            return a
                .iter()
                .zip(b.iter())
                .position(|(x, y)| x & y != 0)
                .map(|w| (w * 64) as u16 + (a[w] & b[w]).trailing_zeros() as u16);
        }
        let (a, b) = (self.runs(), other.runs());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let (lo, hi) = (a[i].0.max(b[j].0), a[i].1.min(b[j].1));
            if lo < hi {
                return Some(lo);
            }
            if a[i].1 < b[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        None
    }
}

/// Where an access comes from, as the hooks know it.
#[derive(Clone, Copy)]
pub enum From {
    /// A Rust caller (`#[track_caller]`).
    Caller(&'static Location<'static>),
    /// A return address in the program's code.
    Code(usize),
}

impl From {
    pub(crate) fn key(self) -> usize {
        match self {
            From::Caller(l) => l as *const Location<'static> as usize,
            From::Code(pc) => pc,
        }
    }
}

/// A clock as it travels (a slot of shared memory, a node's own synchronisation object, a
/// thread's creation): its nonzero entries (thread, value), by thread.
pub type Entries = Vec<(u32, u32)>;

/// The entries of both clocks, each thread's larger value.
fn merged(a: &[(u32, u32)], b: &[(u32, u32)]) -> Entries {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x.0 == y.0 => {
                out.push((x.0, x.1.max(y.1)));
                i += 1;
                j += 1;
            }
            (Some(&x), Some(&y)) if x.0 < y.0 => {
                out.push(x);
                i += 1;
            }
            (Some(&x), None) => {
                out.push(x);
                i += 1;
            }
            (_, Some(&y)) => {
                out.push(y);
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

/// The bytes of a page one site read (or wrote) in a segment: one bit each.
pub(crate) type PageBits = [u64; PAGE / 64];

/// Pages' bits a recorder keeps for its next segments (2 MB).
const MAX_SPARE_BITS: usize = 4096;

/// Entries of [`Recorder::memo`]: sets of two (their number a power of two).
const MEMO: usize = 64;

/// A recent (site, page, read or write) and where its bits are: most accesses find theirs here
/// without a hash lookup (a loop touches a few arrays from a few instructions).
#[derive(Clone, Copy)]
struct Memo {
    from: usize,
    page: u32,
    write: bool,
    slot: u32,
}

const NO_MEMO: Memo = Memo {
    from: usize::MAX,
    page: 0,
    write: false,
    slot: 0,
};

/// One thread's segment in progress.
struct Recorder {
    thread: u32,
    epoch: u32,
    /// Dense: node * VC_THREADS + thread number.
    clock: Vec<u32>,
    /// The entries of `clock` that are not 0 (so a clock's handing over and a barrier's reset
    /// cost what the thread has seen, not the job's thousands of possible threads).
    nonzero: Vec<u32>,
    /// (page, site, write) -> its slot in `bits`.
    slots: HashMap<(u32, u32, bool), u32>,
    bits: Vec<((u32, u32, bool), sys::LiveBits)>,
    sites: HashMap<usize, u32>,
    memo: [Memo; MEMO],
    /// Mutable slices this thread holds, taken in this segment or an earlier one.
    snapshots: Vec<Snapshot>,
    /// The bytes of the snapshots, one after another (kept, so that a program taking a slice
    /// per row copies into memory it has already, in cache).
    snapshot_bytes: Vec<u8>,
    /// The number the next snapshot takes.
    next_snapshot: u32,
    /// Bits of ended segments, zeroed, to be used again (a page's bits per segment would
    /// otherwise be an allocation each).
    #[allow(clippy::vec_box, reason = "the boxes move to and from `Bytes::Bits`")]
    spare_bits: Vec<Box<PageBits>>,
    /// The thread's `pthread_t`, if a join may wait for it (see [`thread_started`]).
    joinable: Option<libc::pthread_t>,
    /// Its waits at each barrier of the node's threads, by address ([`local_barrier_enter`]).
    rounds: HashMap<usize, u64>,
    /// The read-write locks it holds for reading, by address, an entry a hold
    /// ([`rwlock_acquired`]).
    reading: Vec<usize>,
    /// Its clock at its last release fence and the epoch of it ([`release_fence`]): what its
    /// later stores release, however relaxed.
    fenced: Option<(u32, Entries)>,
    /// The atomic words it read without acquiring since its last acquire fence, as their
    /// slots: of shared memory (bit k: [`atomic_word_slot`] k), of the process's own
    /// ([`private_atomic_slot`]). Its next acquire fence acquires them ([`acquire_fence`]).
    unacquired: (u32, u64),
}

/// The memo set of (`from`, `page`, `write`): its first entry (the second is the next one).
/// Every bit of each is mixed in (a 64-bit finaliser): the sites of a loop are a few bytes
/// apart, and a read and a write of one element (`a[i] += x`) from the same page must not
/// share a set by their pattern (with a plain multiply they did, and C's commonest loop
/// missed the memo at every access).
fn memo_set(from: usize, page: u32, write: bool) -> usize {
    let mut k =
        (from as u64) ^ (u64::from(page) << 32) ^ if write { 0x9e37_79b9_7f4a_7c15 } else { 0 };
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    (k as usize % (MEMO / 2)) * 2
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // What its signal handlers did since its last access, in its last segment.
        if let Some(c) = CHECKER.get()
            && handler::any_kept()
        {
            self.record_handlers(c);
        }
        if let (Some(me), Some(c)) = (self.joinable, CHECKER.get()) {
            c.leave_clock(Local::Thread(me), self.epoch, self.entries());
        }
        self.close();
        incoming::slices_dropped(self.snapshots.len());
        if let Some(c) = CHECKER.get() {
            let n = self.thread as usize % VC_THREADS;
            c.free_numbers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((n, self.clock[self.thread as usize]));
        }
    }
}

thread_local! {
    static RECORDER: RefCell<Option<Box<Recorder>>> = const { RefCell::new(None) };
}

/// Whether this process checks for races.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Whether synchronisation this thread makes now is seen: the checker is on and the thread runs
/// no signal handler of the program's. Signal context. In a handler the checker's work
/// (allocations, its locks) could wait for what the interrupted code holds: a release there (a
/// `sem_post`, an atomic store) orders nothing, which can report a race, never hang the
/// thread.
fn seen_here() -> bool {
    on() && !handler::running()
}

/// Words of shared memory the clock slots of a job of `nodes` take (the caller allocates them,
/// on every node alike, and passes them to [`start`]).
pub fn slot_words_for(nodes: usize) -> usize {
    let nodes = nodes as u16;
    (usize::from(dsm_core::MAX_LOCKS)
        + (usize::from(dsm_core::MAX_CVS) + ATOMIC_SLOTS) * usize::from(nodes))
        * slot_words(nodes)
}

/// Clock slots for atomic words (each node's its own, as a condition variable's): a word's
/// releases join their clocks into the slot its address hashes to, its acquires take every
/// node's. Two words that share a slot order each other's acquirers after both releases (a
/// race then goes unreported, never a false one).
const ATOMIC_SLOTS: usize = 32;

/// What the checker starts from (see [`start`]).
pub struct Start {
    /// This node.
    pub node: u16,
    /// The job's nodes.
    pub nodes: u16,
    /// The shared region, whose accesses are recorded.
    pub region: Region,
    /// The clock slots: [`slot_words_for`] words of shared memory, allocated alike on every
    /// node (read and written through the DSM like the program's own data).
    pub slots: &'static [AtomicU32],
    /// Ends the process with a message when the checker cannot go on (more threads than its
    /// clocks have room for, records that do not decode).
    pub end: fn(&str) -> !,
}

/// Starts checking (every node, at init).
pub fn start(start: Start) {
    let Start {
        node,
        nodes,
        region,
        slots,
        end,
    } = start;
    let _ = END.set(end);
    let checker = Checker {
        node,
        nodes,
        region,
        epoch: AtomicU32::new(0),
        threads: AtomicUsize::new(0),
        open: Mutex::new(0),
        ended: std::sync::Condvar::new(),
        free_numbers: Mutex::new(Vec::new()),
        slots,
        cv_slot: Mutex::new(()),
        atomic_learned: Mutex::new((0, Vec::new())),
        local: Mutex::new(HashMap::new()),
        log: Mutex::new(Log {
            node,
            ..Log::default()
        }),
        site_ids: Mutex::new(HashMap::new()),
        gathered: Mutex::new(Vec::new()),
    };
    if CHECKER.set(checker).is_err() {
        return;
    }
    BASE.store(region.base(), Ordering::Relaxed);
    LEN.store(region.len(), Ordering::Relaxed);
    ON.store(true, Ordering::Release);
}

/// Entries a clock slot has room for: every thread of a job of `nodes`, up to
/// [`SLOT_ENTRIES`] (the slots grow with the nodes twice over, in number and in size).
fn slot_entries(nodes: u16) -> usize {
    (usize::from(nodes) * VC_THREADS).min(SLOT_ENTRIES)
}

/// The most entries a clock slot holds: threads that synchronised through one lock, condition
/// variable or atomic word in one barrier epoch (32 KiB a slot).
const SLOT_ENTRIES: usize = 4096;

/// Words of one clock slot: its epoch, its count of entries, then room for
/// [`slot_entries`] (thread, value). A slot holds the nonzero entries only: a lock passed among
/// a few threads reads and writes the first words of its slot, one page.
fn slot_words(nodes: u16) -> usize {
    2 + 2 * slot_entries(nodes)
}

/// A read or write of `len` bytes at `addr` by this thread (anywhere: only the shared region's
/// are recorded). Signal context inside [`in_signal_handler`] (kept for later, see there).
#[inline]
pub fn access(addr: usize, len: usize, write: bool, from: From) {
    if !recorded_fast(addr, len, write, from.key()) {
        access_slow(addr, len, write, from);
    }
}

/// [`access`]'s fast path, inlined into each of its callers (the compiler's hooks among them): an
/// access outside the region (or with the checker off: the region is empty then) or one the
/// thread's table of recent (site, page, read or write) records with one OR. False sends it to
/// [`access_slow`].
#[inline(always)]
pub(crate) fn recorded_fast(addr: usize, len: usize, write: bool, key: usize) -> bool {
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    if off >= LEN.load(Ordering::Relaxed) || len == 0 {
        return true;
    }
    let (page, lo) = (off / PAGE, off % PAGE);
    if lo % 64 + len > 64 {
        return false;
    }
    let ones = if len == 64 { !0 } else { (1u64 << len) - 1 };
    handler::fast_path_open()
        && sys::fast::hit(
            page as u32,
            lo / 64,
            ones << (lo % 64),
            write,
            key,
            NODE_EPOCH.load(Ordering::Acquire),
        )
}

/// An access the fast path did not record: one inside the region (the checker is on).
#[cold]
#[inline(never)]
pub(crate) fn access_slow(addr: usize, len: usize, write: bool, from: From) {
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    if handler::kept(off, len, write, from) {
        return;
    }
    record(off, len, write, from);
}

fn record(off: usize, len: usize, write: bool, from: From) {
    with_recorder(|r, c| {
        // A barrier orders every thread of the node, also one that did not take part in it
        // (a thread joined by one that did, like the workers of a pthreads program whose main
        // thread reads their results after joining them).
        r.catch_up_with(c);
        r.mark(c, off, len, write, from);
    });
}

fn site_of(from: From) -> Site {
    match from {
        From::Caller(l) => Site::Line {
            file: l.file().to_string(),
            line: l.line(),
        },
        From::Code(pc) => {
            let (module, base) = crate::sys::object_of(pc);
            Site::Code {
                module,
                offset: (pc - base) as u64,
            }
        }
    }
}

/// Where an allocation was made, in words: a Rust caller's source line; C code's, found by
/// `addr2line` when the checker is on (the program was built for it, with lines; one run per
/// call site, remembered); otherwise the code's object file and offset.
pub fn allocation_site(from: From) -> String {
    // Runs addr2line (a spawn and a wait, cancellation points) holding `NAMED`.
    let _held = CancellationHeld::hold();
    static NAMED: Mutex<BTreeMap<usize, String>> = Mutex::new(BTreeMap::new());
    match (site_of(from), from) {
        (Site::Line { file, line }, _) => format!("{file}:{line}"),
        (site, From::Code(pc)) if on() => NAMED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(pc)
            .or_insert_with(|| report::site_now(&site))
            .clone(),
        (Site::Code { module, offset }, _) => format!("{module}+{offset:#x}"),
    }
}

/// An allocation's site as [`allocation_site`] gave it with the checker off (`module+0xOFFSET`:
/// a return address in a C program), named by its source line where the module's debugging
/// information has it (addr2line); other text as it is. For a message made once (a verdict),
/// not on a hot path: it runs addr2line.
pub fn site_line(site: &str) -> String {
    let code = site.rsplit_once("+0x").and_then(|(module, hex)| {
        let offset = u64::from_str_radix(hex, 16).ok()?;
        Some(Site::Code {
            module: module.to_owned(),
            offset,
        })
    });
    match code {
        Some(code) => {
            let _held = CancellationHeld::hold();
            report::site_now(&code)
        }
        None => site.to_owned(),
    }
}

/// Runs `f` with this thread's recorder (made at its first use).
///
/// An access made while the recorder is busy (a signal handler's, interrupting this thread's
/// own recording) is not recorded; nor is one after the thread's recorder is gone (in a
/// thread-local destructor).
fn with_recorder<R>(f: impl FnOnce(&mut Recorder, &Checker) -> R) -> Option<R> {
    let c = CHECKER.get()?;
    // The checker's work is no cancellation point of the program's (a thread cancelled in the
    // middle of it, inside `jia_lock`, ended holding the lock).
    let _held = CancellationHeld::hold();
    RECORDER
        .try_with(|cell| {
            let mut slot = cell.try_borrow_mut().ok()?;
            let r = slot.get_or_insert_with(|| Box::new(c.new_recorder()));
            if handler::any_kept() {
                r.record_handlers(c);
            }
            Some(f(r, c))
        })
        .ok()
        .flatten()
}

impl Checker {
    /// A thread of epoch `epoch` with `clock` releases `what` (node-local): its clock joins the
    /// one `what` carries for that epoch, or replaces one of an earlier epoch. One released
    /// past a barrier this thread is not past yet is left: what it did is ordered before the
    /// acquirer's anyway.
    fn leave_clock(&self, what: Local, epoch: u32, clock: Entries) {
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        match local.get_mut(&what) {
            Some((e, joined)) if *e == epoch => *joined = merged(joined, &clock),
            Some((e, _)) if *e > epoch => {}
            _ => {
                local.insert(what, (epoch, clock));
            }
        }
    }

    /// `entries`, released in `epoch`, join slot `k`'s for that epoch, or replace one of an
    /// earlier epoch. A slot of a later epoch (released past a barrier the releaser is not past
    /// yet) is left: what the releaser did is ordered before the acquirer's anyway.
    fn join_slot(&self, k: usize, epoch: u32, entries: &[(u32, u32)]) {
        match self.read_slot(k) {
            Some((e, _)) if e > epoch => {}
            Some((e, slot)) if e == epoch => self.write_slot(k, epoch, &merged(&slot, entries)),
            _ => self.write_slot(k, epoch, entries),
        }
    }

    /// What an acquire took from a slot of shared memory (`entries`, of `epoch`, by a thread
    /// of epoch `now`): the entries of other nodes' threads join what this node's atomic
    /// releases pass on, as the DSM passes on the writes a node's acquires made it see (an
    /// atomic word's, a lock's or a condition variable's grant: `dsm_core`'s `atomics.rs`,
    /// "Chains").
    fn learn_for_atomics(&self, epoch: u32, now: u32, entries: &[(u32, u32)]) {
        if epoch != now {
            return;
        }
        let mut learned = self
            .atomic_learned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if learned.0 != now {
            *learned = (now, Vec::new());
        }
        let others: Entries = entries
            .iter()
            .copied()
            .filter(|&(t, _)| t as usize / VC_THREADS != usize::from(self.node))
            .collect();
        learned.1 = merged(&learned.1, &others);
    }

    /// The clock `what` carries on this node, and the epoch it is for.
    fn local_clock(&self, what: Local) -> Option<(u32, Entries)> {
        let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        local.get(&what).cloned()
    }

    #[cold]
    #[inline(never)]
    fn new_recorder(&self) -> Recorder {
        // A new number while there are some; then one of an ended thread, whose segments are
        // then taken as ordered before the new one's (as a thread joined before the next one
        // is created).
        let fresh = self.threads.fetch_add(1, Ordering::Relaxed);
        let (n, last) = if fresh < VC_THREADS {
            (fresh, 0)
        } else {
            self.free_numbers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop()
                .unwrap_or((fresh, 0))
        };
        if n >= VC_THREADS {
            fatal(&format!(
                "check_races: more than {VC_THREADS} threads of node {} use shared memory at \
                 once (the checker's clocks have room for {VC_THREADS})",
                self.node
            ));
        }
        let thread = (usize::from(self.node) * VC_THREADS + n) as u32;
        let mut r = Recorder {
            thread,
            epoch: self.epoch.load(Ordering::Acquire),
            clock: vec![0; usize::from(self.nodes) * VC_THREADS],
            nonzero: Vec::new(),
            slots: HashMap::new(),
            bits: Vec::new(),
            sites: HashMap::new(),
            memo: [NO_MEMO; MEMO],
            snapshots: Vec::new(),
            snapshot_bytes: Vec::new(),
            next_snapshot: 0,
            spare_bits: Vec::new(),
            joinable: None,
            rounds: HashMap::new(),
            reading: Vec::new(),
            fenced: None,
            unacquired: (0, 0),
        };
        r.set(thread, last + 1);
        r
    }

    fn intern(&self, site: Site) -> u32 {
        let mut ids = self.site_ids.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = ids.get(&site) {
            return id;
        }
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let id = log.sites.len() as u32;
        log.sites.push(site.clone());
        ids.insert(site, id);
        id
    }

    /// The clock in slot `k` (zeros if written in another epoch).
    /// The clock in slot `k` and the epoch it is for (`None`: never written).
    fn read_slot(&self, k: usize) -> Option<(u32, Entries)> {
        let w = slot_words(self.nodes);
        let at = k * w;
        let epoch = self.slots[at].load(Ordering::Relaxed).checked_sub(1)?;
        let count =
            (self.slots[at + 1].load(Ordering::Relaxed) as usize).min(slot_entries(self.nodes));
        let entries = (0..count)
            .map(|i| {
                let e = at + 2 + 2 * i;
                (
                    self.slots[e].load(Ordering::Relaxed),
                    self.slots[e + 1].load(Ordering::Relaxed),
                )
            })
            .collect();
        Some((epoch, entries))
    }

    /// Writes `entries` (at most every thread of the job: the slot has room) for `epoch` into
    /// slot `k`.
    fn write_slot(&self, k: usize, epoch: u32, entries: &[(u32, u32)]) {
        let room = slot_entries(self.nodes);
        if entries.len() > room {
            fatal(&format!(
                "check_races: node {} released a clock of {} threads, and a clock slot has room \
                 for {room}: more threads synchronised through one lock, condition variable or \
                 atomic word within one barrier epoch than the checker can follow",
                self.node,
                entries.len()
            ));
        }
        let at = k * slot_words(self.nodes);
        for (i, &(t, v)) in entries.iter().enumerate() {
            self.slots[at + 2 + 2 * i].store(t, Ordering::Relaxed);
            self.slots[at + 3 + 2 * i].store(v, Ordering::Relaxed);
        }
        self.slots[at + 1].store(entries.len() as u32, Ordering::Relaxed);
        self.slots[at].store(epoch + 1, Ordering::Relaxed);
    }

    fn cv_slot(&self, cv: u16, node: u16) -> usize {
        usize::from(dsm_core::MAX_LOCKS)
            + usize::from(cv) * usize::from(self.nodes)
            + usize::from(node)
    }

    /// The slot of atomic word `addr` (its offset in the region) for `node`'s releases.
    fn atomic_slot(&self, addr: usize, node: u16) -> usize {
        self.atomic_slot_of(atomic_word_slot(addr), node)
    }

    /// The slot of the atomic words of [`atomic_word_slot`] `word` for `node`'s releases.
    fn atomic_slot_of(&self, word: usize, node: u16) -> usize {
        usize::from(dsm_core::MAX_LOCKS)
            + (usize::from(dsm_core::MAX_CVS) + word) * usize::from(self.nodes)
            + usize::from(node)
    }
}

impl Recorder {
    /// The slot of the bits of (`from`'s site, `page`, `write`) in this segment, made if new.
    #[cold]
    fn slot(&mut self, c: &Checker, from: From, page: u32, write: bool) -> u32 {
        let site = match self.sites.get(&from.key()) {
            Some(&s) => s,
            None => {
                let s = c.intern(site_of(from));
                self.sites.insert(from.key(), s);
                s
            }
        };
        let next = self.bits.len() as u32;
        let slot = *self.slots.entry((page, site, write)).or_insert(next);
        if slot == next {
            let bits = self
                .spare_bits
                .pop()
                .unwrap_or_else(|| Box::new([0; PAGE / 64]));
            if self.bits.is_empty() {
                *c.open.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            }
            self.bits
                .push(((page, site, write), sys::LiveBits::new(bits)));
        }
        slot
    }

    /// Records what the thread's signal handlers did since its last access outside them.
    #[cold]
    #[inline(never)]
    fn record_handlers(&mut self, c: &Checker) {
        self.catch_up_with(c);
        for (off, len, write, from) in handler::take() {
            self.mark(c, off, len, write, from);
        }
    }

    /// Records `len` bytes at `off` touched from `from`.
    #[inline]
    fn mark(&mut self, c: &Checker, off: usize, len: usize, write: bool, from: From) {
        let (page, lo) = (off / PAGE, off % PAGE);
        if lo + len <= 64 * (lo / 64 + 1) {
            // Within one word of bits (all a program's loads and stores but unaligned ones
            // across 64 bytes): one OR; the next ones of this site and page on the fast path.
            let live = self.live_for(c, page as u32, write, from);
            let ones = if len == 64 { !0 } else { (1u64 << len) - 1 };
            live.get_mut()[lo / 64] |= ones << (lo % 64);
            let bits = live.ptr();
            sys::fast::remember(from.key(), page as u32, write, bits, self.epoch);
            return;
        }
        self.mark_pages(c, off, len, write, from);
    }

    /// [`Recorder::mark`] for accesses across words of bits or pages.
    #[cold]
    #[inline(never)]
    fn mark_pages(&mut self, c: &Checker, off: usize, len: usize, write: bool, from: From) {
        let end = off + len;
        let mut at = off;
        while at < end {
            let page = (at / PAGE) as u32;
            let lo = at % PAGE;
            let hi = (end - page as usize * PAGE).min(PAGE);
            set_bits(self.bits_for(c, page, write, from), lo, hi);
            at = page as usize * PAGE + hi;
        }
    }

    /// The bits of (`from`'s site, `page`, `write`) in this segment.
    #[inline]
    fn bits_for(&mut self, c: &Checker, page: u32, write: bool, from: From) -> &mut PageBits {
        self.live_for(c, page, write, from).get_mut()
    }

    /// [`Recorder::bits_for`], owned through the pointer the fast path copies.
    #[inline]
    fn live_for(&mut self, c: &Checker, page: u32, write: bool, from: From) -> &mut sys::LiveBits {
        let key = from.key();
        let set = memo_set(key, page, write);
        let is = |m: &Memo| m.from == key && m.page == page && m.write == write;
        let slot = if is(&self.memo[set]) {
            self.memo[set].slot
        } else if is(&self.memo[set + 1]) {
            // The set's newest first.
            self.memo.swap(set, set + 1);
            self.memo[set].slot
        } else {
            self.memo_miss(c, from, page, write)
        };
        &mut self.bits[slot as usize].1
    }

    /// The memo did not hold (`from`'s site, `page`, `write`): its slot, now the newest entry
    /// of its set.
    #[cold]
    #[inline(never)]
    fn memo_miss(&mut self, c: &Checker, from: From, page: u32, write: bool) -> u32 {
        let (key, set) = (from.key(), memo_set(from.key(), page, write));
        let slot = self.slot(c, from, page, write);
        self.memo[set + 1] = self.memo[set];
        self.memo[set] = Memo {
            from: key,
            page,
            write,
            slot,
        };
        slot
    }

    /// Ends the segment in progress (kept if it accessed anything) and starts the next one.
    /// Ends the segment before an acquire: an empty one is left open, its number unused (no
    /// release passed it on: a release ends the segment it passes), so that a thread spinning
    /// on an acquire (a flag's load) does not count its clock up at every turn (2^32 turns
    /// within a barrier epoch wrapped it).
    fn close_for_acquire(&mut self) {
        if !self.bits.is_empty() || !self.snapshots.is_empty() {
            self.close();
        }
    }

    fn close(&mut self) {
        if !self.snapshots.is_empty() {
            self.compare_snapshots();
        }
        // Before the bits go: the fast path's pointers to them are stale from here on.
        sys::fast::forget();
        self.memo = [NO_MEMO; MEMO];
        self.slots.clear();
        let bits = std::mem::take(&mut self.bits);
        if let Some(c) = CHECKER.get()
            && !bits.is_empty()
        {
            let accesses = bits
                .into_iter()
                .map(|((page, site, write), bits)| Access {
                    page,
                    site,
                    write,
                    bytes: Bytes::Bits(bits.into_box()),
                })
                .collect();
            let mut seen = self.entries();
            seen.retain(|&(t, _)| t != self.thread);
            let segment = Segment {
                thread: self.thread,
                epoch: self.epoch,
                clock: self.clock[self.thread as usize],
                seen,
                accesses,
            };
            {
                let mut log = c.log.lock().unwrap_or_else(|e| e.into_inner());
                records::put_segment(&mut log.packed, &segment);
                log.packed_count += 1;
            }
            // Packed: the exit may take the log now (not before, or it would go without it).
            *c.open.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            c.ended.notify_all();
            for a in segment.accesses {
                if let Bytes::Bits(mut bits) = a.bytes
                    && self.spare_bits.len() < MAX_SPARE_BITS
                {
                    bits.fill(0);
                    self.spare_bits.push(bits);
                }
            }
        }
        self.clock[self.thread as usize] += 1;
    }

    /// An acquire of what a slot holds: a clock of a later epoch moves this thread on to it
    /// first; one of an earlier epoch says nothing (a barrier orders it already).
    fn acquire(&mut self, slot: Option<(u32, Entries)>) {
        let Some((epoch, clock)) = slot else { return };
        self.catch_up(epoch);
        if epoch == self.epoch {
            self.join(&clock);
        }
    }

    /// This thread has seen what `other`'s entries say. Entries of no thread of the job (a
    /// slot's bytes are shared memory) are left out.
    fn join(&mut self, other: &[(u32, u32)]) {
        for &(t, v) in other {
            if self.clock.get(t as usize).is_some_and(|&now| v > now) {
                self.set(t, v);
            }
        }
    }

    /// Entry `t` of the clock is `v` (not 0).
    fn set(&mut self, t: u32, v: u32) {
        if self.clock[t as usize] == 0 {
            self.nonzero.push(t);
        }
        self.clock[t as usize] = v;
    }

    /// The clock's nonzero entries, by thread.
    fn entries(&self) -> Entries {
        let mut e: Entries = self
            .nonzero
            .iter()
            .map(|&t| (t, self.clock[t as usize]))
            .collect();
        e.sort_unstable();
        e
    }

    /// [`Recorder::catch_up`] with the node's epoch now.
    #[inline]
    fn catch_up_with(&mut self, c: &Checker) {
        self.catch_up(c.epoch.load(Ordering::Acquire));
    }

    /// A barrier passed (by this thread or, for a thread that did not take part, noticed at
    /// its next synchronisation): everything before it is ordered before everything after.
    ///
    /// Epochs only move forward: a thread that took a lock or waited on a condition variable
    /// released after a barrier its node has not finished yet (another of its threads is in
    /// it) is past that barrier already (everything before it is ordered before the release).
    #[inline]
    fn catch_up(&mut self, epoch: u32) {
        if epoch > self.epoch {
            self.enter_epoch(epoch);
        }
    }

    #[cold]
    #[inline(never)]
    fn enter_epoch(&mut self, epoch: u32) {
        self.close();
        self.epoch = epoch;
        for t in std::mem::take(&mut self.nonzero) {
            self.clock[t as usize] = 0;
        }
        self.set(self.thread, 1);
    }
}

/// A synchronisation object of the DSM's, between nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Object {
    /// A lock, by number.
    Lock(u16),
    /// A condition variable, by number.
    Cv(u16),
    /// An atomic word of the shared region, by address.
    Atomic(usize),
}

/// A synchronisation event of the DSM's, as the calling thread sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// It is about to wait for an acquire or a barrier: its segment ends (before the
    /// acquire's invalidations, so that its slices' bytes are compared with what it wrote).
    Waiting,
    /// It acquired the object: it has seen what the object's releasers did before releasing.
    Acquired(Object),
    /// It is about to release the object: what it did so far is ordered before the object's
    /// next acquirers.
    Releasing(Object),
    /// The node's barrier is done (once per barrier on each node, by the thread that did it,
    /// before any thread of the node leaves it).
    NodeBarrierDone,
    /// It leaves a barrier it took part in.
    BarrierLeft,
}

/// The calling thread meets `event`.
#[inline]
pub fn sync_event(event: Event) {
    if !on() {
        return;
    }
    match event {
        Event::Waiting => segment_ends(),
        Event::Acquired(Object::Lock(lock)) => lock_acquired(lock),
        Event::Acquired(Object::Cv(cv)) => cv_waited(cv),
        Event::Acquired(Object::Atomic(addr)) => atomic_acquired(addr),
        Event::Releasing(Object::Lock(lock)) => unlocking(lock),
        Event::Releasing(Object::Cv(cv)) => setting_cv(cv),
        Event::Releasing(Object::Atomic(addr)) => atomic_releasing(addr),
        Event::NodeBarrierDone => barrier_done(),
        Event::BarrierLeft => barrier_left(),
    }
}

/// This thread acquired `lock`: it has seen what the lock's earlier holders' nodes did, and
/// all that its own node's earlier holders had seen.
fn lock_acquired(lock: u16) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.resnapshot();
        r.catch_up_with(c);
        let slot = c.read_slot(usize::from(lock));
        let here = c.local_clock(Local::Shared(Object::Lock(lock)));
        if let Some((epoch, entries)) = &slot {
            c.learn_for_atomics(*epoch, r.epoch, entries);
        }
        r.close_for_acquire();
        r.acquire(slot);
        r.acquire(here);
    });
}

/// This thread is about to release `lock`: its node's entries of its clock join the lock's
/// slot (written under the lock, so the next holder reads it coherently), its whole clock the
/// node's own record of the lock.
fn unlocking(lock: u16) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        // The clock of the segment that ends here: what follows the release is not covered.
        let clock = r.entries();
        c.join_slot(usize::from(lock), r.epoch, &of_node(&clock, c.node));
        c.leave_clock(Local::Shared(Object::Lock(lock)), r.epoch, clock);
        r.close();
    });
}

/// The entries of `clock` of `node`'s threads.
fn of_node(clock: &[(u32, u32)], node: u16) -> Entries {
    clock
        .iter()
        .copied()
        .filter(|&(t, _)| t as usize / VC_THREADS == usize::from(node))
        .collect()
}

/// This thread is about to set `cv`: its node's entries of its clock join this node's slot of
/// it.
fn setting_cv(cv: u16) {
    release_into_node_slot(Object::Cv(cv), |c| c.cv_slot(cv, c.node));
}

/// Which of the [`ATOMIC_SLOTS`] the atomic word at region offset `off` shares.
fn atomic_word_slot(off: usize) -> usize {
    ((off / 4).wrapping_mul(0x9E37_79B9) >> 7) % ATOMIC_SLOTS
}

/// The node's own record of the atomic word at region offset `off`: one per slot, as the
/// slots of shared memory are (one per word would grow with every word a program releases
/// through).
fn atomic_object(off: usize) -> Object {
    Object::Atomic(atomic_word_slot(off))
}

/// This thread is about to release through the atomic word at `addr` (an operation with
/// release semantics): its clock joins this node's slot of the word, as a setting of a
/// condition variable's does.
fn atomic_releasing(addr: usize) {
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    release_into_node_slot(atomic_object(off), |c| c.atomic_slot(off, c.node));
}

/// This thread's wait on `cv` ended: it has seen what the setters did before setting it.
fn cv_waited(cv: u16) {
    acquire_every_node_slot(Object::Cv(cv), |c, node| c.cv_slot(cv, node));
}

/// This thread's operation with acquire semantics on the atomic word at `addr` is done: it has
/// seen what the word's releasers did before their releases.
fn atomic_acquired(addr: usize) {
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    acquire_every_node_slot(atomic_object(off), |c, node| c.atomic_slot(off, node));
}

/// Slots the atomic words of a process's own memory share, as the [`ATOMIC_SLOTS`] of shared
/// memory do: two words of one slot can hide a race, never report a false one.
const PRIVATE_ATOMIC_SLOTS: usize = 64;

/// Which of the [`PRIVATE_ATOMIC_SLOTS`] the atomic word at `addr` of the process's own memory
/// shares.
fn private_atomic_slot(addr: usize) -> usize {
    ((addr / 4).wrapping_mul(0x9E37_79B9) >> 7) % PRIVATE_ATOMIC_SLOTS
}

/// An atomic word an instrumented C program operates on.
#[derive(Clone, Copy, Debug)]
pub enum Word {
    /// Of shared memory, at this address: it orders the threads of every node.
    Shared(usize),
    /// Of the process's own memory, at this address: it orders the node's threads.
    Private(usize),
}

/// A C11 release fence (`atomic_thread_fence` with release, acq_rel or seq_cst order): this
/// thread's clock now is what its later atomic stores release, whatever their own order (an
/// acquire that reads what one stored has seen what this thread did before the fence).
pub fn release_fence() {
    if !seen_here() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        r.fenced = Some((r.epoch, r.entries()));
        r.close();
    });
}

/// A C11 acquire fence (acquire, acq_rel or seq_cst order): this thread has seen what the
/// releasers of the atomic words it read since its last acquire fence did before releasing
/// them, as if each of those reads had acquired.
pub fn acquire_fence() {
    if !seen_here() {
        return;
    }
    let (shared, private) =
        with_recorder(|r, _| std::mem::take(&mut r.unacquired)).unwrap_or((0, 0));
    for word in (0..ATOMIC_SLOTS).filter(|k| shared & (1 << k) != 0) {
        acquire_every_node_slot(Object::Atomic(word), |c, node| c.atomic_slot_of(word, node));
    }
    for word in (0..PRIVATE_ATOMIC_SLOTS).filter(|k| private & (1 << k) != 0) {
        local_acquire(Local::Atomic(word));
    }
}

/// An atomic operation on `word` that stores (a store, an exchange, a read-modify-write) is
/// about to be made, with release semantics (`release`) or without: a release passes on this
/// thread's clock; a relaxed store after a release fence passes on the fence's
/// ([`release_fence`]). A word of shared memory is the runtime's to release through
/// ([`sync_event`]): only a relaxed store's fence is passed on here.
pub fn atomic_storing(word: Word, release: bool) {
    if !seen_here() {
        return;
    }
    match word {
        Word::Shared(_) if release => {}
        Word::Shared(addr) => {
            let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
            release_clock_into_node_slot(atomic_object(off), |c| c.atomic_slot(off, c.node), true);
        }
        Word::Private(addr) if release => local_release(Local::Atomic(private_atomic_slot(addr))),
        Word::Private(addr) => {
            with_recorder(|r, c| {
                r.catch_up_with(c);
                if let Some((epoch, clock)) = &r.fenced
                    && *epoch == r.epoch
                {
                    let what = Local::Atomic(private_atomic_slot(addr));
                    c.leave_clock(what, *epoch, clock.clone());
                    r.close();
                }
            });
        }
    }
}

/// An atomic operation on `word` that reads (a load, an exchange, a read-modify-write) was
/// made, with acquire semantics (`acquire`) or without: an acquire takes what the word's
/// releasers passed on; a relaxed read is noted for this thread's next acquire fence. A word
/// of shared memory is the runtime's to acquire through ([`sync_event`]).
pub fn atomic_read(word: Word, acquire: bool) {
    if !seen_here() {
        return;
    }
    match (word, acquire) {
        (Word::Shared(_), true) => {}
        (Word::Private(addr), true) => local_acquire(Local::Atomic(private_atomic_slot(addr))),
        (Word::Shared(addr), false) => {
            let k = atomic_word_slot(addr.wrapping_sub(BASE.load(Ordering::Relaxed)));
            with_recorder(|r, _| r.unacquired.0 |= 1 << k);
        }
        (Word::Private(addr), false) => {
            let k = private_atomic_slot(addr);
            with_recorder(|r, _| r.unacquired.1 |= 1 << k);
        }
    }
}

/// This thread locked the read-write lock at `addr`, for writing (`write`) or reading: it has
/// seen what its writers did before unlocking it, and a writer what its readers did too.
pub fn rwlock_acquired(addr: usize, write: bool) {
    if !seen_here() {
        return;
    }
    local_acquire(Local::Object(addr));
    if write {
        local_acquire(Local::Readers(addr));
    } else {
        with_recorder(|r, _| r.reading.push(addr));
    }
}

/// This thread is about to unlock the read-write lock at `addr`: a reader's clock is for the
/// lock's next writers only, a writer's for every next holder.
pub fn rwlock_releasing(addr: usize) {
    if !seen_here() {
        return;
    }
    let reader = with_recorder(|r, _| {
        let held = r.reading.iter().rposition(|&a| a == addr);
        held.map(|i| r.reading.swap_remove(i)).is_some()
    })
    .unwrap_or(false);
    local_release(if reader {
        Local::Readers(addr)
    } else {
        Local::Object(addr)
    });
}

/// A release into an object whose slots are per node (a condition variable, an atomic word):
/// this node's entries of this thread's clock join this node's slot (`slot`), which other
/// threads of the node may have joined theirs into in this epoch; the whole clock joins the
/// node's own record of `object`.
fn release_into_node_slot(object: Object, slot: impl FnOnce(&Checker) -> usize) {
    release_clock_into_node_slot(object, slot, false);
}

/// [`release_into_node_slot`] of this thread's clock, or with `fenced`, of its clock at its
/// last release fence (nothing if it made none in this epoch: a barrier since orders all).
fn release_clock_into_node_slot(
    object: Object,
    slot: impl FnOnce(&Checker) -> usize,
    fenced: bool,
) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        let clock = if fenced {
            match &r.fenced {
                Some((epoch, clock)) if *epoch == r.epoch => clock.clone(),
                _ => return,
            }
        } else {
            r.entries()
        };
        let mut released = of_node(&clock, c.node);
        if matches!(object, Object::Atomic(_)) {
            let learned = c.atomic_learned.lock().unwrap_or_else(|e| e.into_inner());
            if learned.0 == r.epoch {
                released = merged(&released, &learned.1);
            }
        }
        {
            let _g = c.cv_slot.lock().unwrap_or_else(|e| e.into_inner());
            c.join_slot(slot(c), r.epoch, &released);
        }
        c.leave_clock(Local::Shared(object), r.epoch, clock);
        // After the clock went out: the segment that ends here is the one the release covers.
        r.close();
    });
}

/// An acquire from an object whose slots are per node: this thread has seen what every node's
/// releasers did before their releases (`slot(checker, node)`), and all that this node's
/// releasers of `object` had seen.
fn acquire_every_node_slot(object: Object, slot: impl Fn(&Checker, u16) -> usize) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.resnapshot();
        r.catch_up_with(c);
        r.close_for_acquire();
        let slots: Vec<_> = (0..c.nodes)
            .filter_map(|node| c.read_slot(slot(c, node)))
            .collect();
        if let Some(newest) = slots.iter().map(|(e, _)| *e).max() {
            r.catch_up(newest);
        }
        for (epoch, entries) in &slots {
            c.learn_for_atomics(*epoch, r.epoch, entries);
        }
        for slot in slots {
            r.acquire(Some(slot));
        }
        r.acquire(c.local_clock(Local::Shared(object)));
    });
}

/// A synchronisation of a node's threads that the DSM does not make (see [`local_release`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Local {
    /// A synchronisation object of the DSM's as this node's threads pass it to each other: the
    /// whole clock of its releasers here (other nodes take what its slots carry). An atomic
    /// word is named by its slot (`Object::Atomic(slot)`).
    Shared(Object),
    /// A synchronisation object of the process (a pthread mutex, barrier or semaphore), by
    /// address.
    Object(usize),
    /// A thread that ended, by its `pthread_t`.
    Thread(libc::pthread_t),
    /// An OpenMP parallel region's team, which ended (the region's address while it runs).
    Team(usize),
    /// A round of a barrier of a node's threads (a pthread barrier, OpenMP's team barrier), by
    /// the barrier's address and the round: each round's clock is its own.
    Round(usize, u64),
    /// What the readers of a read-write lock released, by its address: its next writer
    /// acquires it, its next readers do not (readers order nothing among themselves).
    Readers(usize),
    /// An atomic word of the process's own memory, by its slot (of 64 its words share).
    Atomic(usize),
    /// The OpenMP tasks of the node that ended: what `taskwait`, a taskgroup's end, a team's
    /// barrier and a region's end wait for (all of them, not only the waiter's children: it
    /// can hide a race, never report a false one).
    Tasks,
}

/// A pthread barrier whose count the checker saw (`pthread_barrier_init`): its rounds are the
/// barrier's own, whichever threads wait at it.
struct CountedBarrier {
    /// The threads each round takes.
    count: u32,
    /// Threads that arrived in the current round.
    arrived: u32,
    /// The current round, from 1.
    round: u64,
    /// Rounds some of whose threads have not left yet, with how many have: a round's clock is
    /// forgotten once all have (a thread late to leave one may still need it while others
    /// finish the next: other threads may wait at each round).
    leaving: Vec<(u64, u32)>,
}

impl CountedBarrier {
    fn new(count: u32) -> CountedBarrier {
        CountedBarrier {
            count: count.max(1),
            arrived: 0,
            round: 1,
            leaving: Vec::new(),
        }
    }

    /// A thread arrives: the round it waits in.
    fn arrive(&mut self) -> u64 {
        let round = self.round;
        self.arrived += 1;
        if self.arrived == self.count {
            self.arrived = 0;
            self.round += 1;
        }
        round
    }

    /// A thread left `round`: the round whose clock may go now (all its threads have left).
    fn left(&mut self, round: u64) -> Option<u64> {
        match self.leaving.iter().position(|&(r, _)| r == round) {
            Some(i) => self.leaving[i].1 += 1,
            None => self.leaving.push((round, 1)),
        }
        let all = self.count;
        let done = self
            .leaving
            .iter()
            .position(|&(r, n)| r == round && n >= all);
        done.map(|i| self.leaving.swap_remove(i).0)
    }
}

/// The pthread barriers of the process whose count is known, by address
/// ([`local_barrier_init`]; made before the checker starts too).
static COUNTED_BARRIERS: Mutex<Vec<(usize, CountedBarrier)>> = Mutex::new(Vec::new());

/// The barrier of a node's threads at `addr` was made for `count` threads
/// (`pthread_barrier_init`): its rounds are counted as the threads arrive, so that any threads
/// may wait at it (a new one each round, or one made again at the address of an old one).
pub fn local_barrier_init(addr: usize, count: u32) {
    let barrier = CountedBarrier::new(count);
    {
        let mut barriers = COUNTED_BARRIERS.lock().unwrap_or_else(|e| e.into_inner());
        barriers.retain(|(a, _)| *a != addr);
        barriers.push((addr, barrier));
    }
    // What an earlier barrier at this address left.
    if let Some(c) = CHECKER.get() {
        c.local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| !matches!(k, Local::Round(a, _) if *a == addr));
    }
}

/// The barrier at `addr` is no more (`pthread_barrier_destroy`).
pub fn local_barrier_destroy(addr: usize) {
    COUNTED_BARRIERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|(a, _)| *a != addr);
}

/// This thread is about to wait at the barrier of a node's threads at `addr`: its clock joins
/// the round's (the barrier's count of its rounds where it is known, [`local_barrier_init`];
/// else this thread's own count of its waits there, which every thread waiting at it shares);
/// returns the round for [`local_barrier_leave`].
pub fn local_barrier_enter(addr: usize) -> u64 {
    // A barrier's rounds are counted whether the checker is on yet or not: one whose threads
    // were waiting when it started stays in step.
    let counted = {
        let mut barriers = COUNTED_BARRIERS.lock().unwrap_or_else(|e| e.into_inner());
        barriers
            .iter_mut()
            .find(|(a, _)| *a == addr)
            .map(|(_, b)| b.arrive())
    };
    if !seen_here() {
        return counted.unwrap_or(0);
    }
    let round = counted
        .or_else(|| {
            with_recorder(|r, _| {
                let round = r.rounds.entry(addr).or_insert(0);
                *round += 1;
                *round
            })
        })
        .unwrap_or(0);
    local_release(Local::Round(addr, round));
    round
}

/// This thread left the barrier at `addr` in round `round`: it has seen what every thread did
/// before the round. A round's clock is forgotten once every thread of it has left: counted
/// where the barrier's count is known; else the round before this one (every thread has left
/// it: they all arrived at this one after, the same threads waiting at each round).
pub fn local_barrier_leave(addr: usize, round: u64) {
    local_acquire(Local::Round(addr, round));
    let counted = {
        let mut barriers = COUNTED_BARRIERS.lock().unwrap_or_else(|e| e.into_inner());
        barriers
            .iter_mut()
            .find(|(a, _)| *a == addr)
            .map(|(_, b)| b.left(round))
    };
    let forget = match counted {
        Some(done) => done,
        None => round.checked_sub(1).filter(|&r| r > 0),
    };
    if let (Some(c), Some(r)) = (CHECKER.get(), forget) {
        c.local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&Local::Round(addr, r));
    }
}

/// This thread starts counting the rounds of the barrier at `addr` again (an OpenMP team's
/// barrier, at the start of each parallel region).
pub fn local_barrier_restart(addr: usize) {
    with_recorder(|r, _| r.rounds.remove(&addr));
}

/// This thread is about to release `what` (unlock a mutex, post a semaphore, enter a pthread
/// barrier, end as a thread): its clock joins the one `what` carries (for the thread that
/// acquires it next, on this node), and its segment ends.
pub fn local_release(what: Local) {
    if !seen_here() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        c.leave_clock(what, r.epoch, r.entries());
        r.close();
    });
}

/// This thread acquired `what` (locked a mutex, waited on a semaphore, left a pthread barrier,
/// joined a thread): it has seen what its releasers did before releasing it. A thread that
/// ended is forgotten once joined.
pub fn local_acquire(what: Local) {
    if !seen_here() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        r.close_for_acquire();
        let slot = {
            let mut local = c.local.lock().unwrap_or_else(|e| e.into_inner());
            match what {
                Local::Thread(_) | Local::Team(_) => local.remove(&what),
                Local::Object(_)
                | Local::Round(..)
                | Local::Shared(_)
                | Local::Readers(_)
                | Local::Atomic(_)
                | Local::Tasks => local.get(&what).cloned(),
            }
        };
        r.acquire(slot);
    });
}

/// A thread creating another: its segment ends, and its clock is what the new thread starts
/// from ([`thread_started`]). `None` when not checking.
pub fn thread_spawning() -> Option<(u32, Entries)> {
    if !on() {
        return None;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        let clock = (r.epoch, r.entries());
        r.close();
        clock
    })
}

/// A thread's first step, in it: it has seen what its creator did before creating it.
///
/// `me`: the thread's `pthread_t` if a `pthread_join` may wait for it: its clock is left for
/// the joiner when it ends, however it ends (`pthread_exit` too: in its thread-local
/// destructor).
pub fn thread_started(creator: (u32, Entries), me: Option<libc::pthread_t>) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        // A task run by a thread that did something before it: that is not after the creator.
        r.close_for_acquire();
        r.acquire(Some(creator));
        if me.is_some() {
            r.joinable = me;
        }
    });
}

/// This thread is about to enter a barrier (or a synchronisation that orders nothing, such as
/// a letter: its segment ends, nothing is joined).
fn segment_ends() {
    if !on() {
        return;
    }
    // A DSM call never runs in a signal handler: a count left up was a handler left by
    // `longjmp`.
    handler::left_by_longjmp();
    with_recorder(|r, c| {
        r.catch_up_with(c);
        r.close();
    });
}

/// This thread is about to wait in a call that may block for long (a semaphore's wait, a
/// join): its segment ends, so that what it did is checked even if it waits there until the
/// node's exit (a pool's worker in `sem_wait`: its accesses went unchecked).
pub fn about_to_wait() {
    if !seen_here() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        r.close_for_acquire();
    });
}

/// The node's barrier is done (called once per barrier on each node, by the thread that did
/// it).
fn barrier_done() {
    if let Some(c) = CHECKER.get() {
        let epoch = c.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        NODE_EPOCH.fetch_max(epoch, Ordering::AcqRel);
    }
}

/// This thread leaves a barrier it took part in.
fn barrier_left() {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.resnapshot();
        r.catch_up_with(c);
    });
}

/// An allocation of `bytes` at `addr`, of `element`-byte elements, made at `from`.
pub fn allocated(addr: usize, bytes: usize, element: usize, from: From) {
    if !on() {
        return;
    }
    let Some(c) = CHECKER.get() else { return };
    let site = c.intern(site_of(from));
    c.log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .allocs
        .push(Alloc {
            offset: (addr - BASE.load(Ordering::Relaxed)) as u64,
            bytes: bytes as u64,
            element: element as u32,
            site,
        });
}

/// At `jia_exit`, before the node's exit message: this thread's segment ends, and the node's
/// records go to node 0, which takes every other node's, through `send(node, bytes)` and
/// `receive(node)` (the API's channel of the checker's letters).
pub fn gather_records(send: impl Fn(usize, &[u8]), receive: impl Fn(usize) -> Vec<u8>) {
    if !on() {
        return;
    }
    segment_ends();
    let Some(c) = CHECKER.get() else { return };
    // Threads that ended (joined before this exit) keep their last segment in their
    // thread-local destructor, which may still be running: wait for them, a while.
    let open = c.open.lock().unwrap_or_else(|e| e.into_inner());
    let (open, _) = c
        .ended
        .wait_timeout_while(open, std::time::Duration::from_secs(2), |n| *n > 0)
        .unwrap_or_else(|e| e.into_inner());
    let running = *open;
    drop(open);
    let lost = handler::lost();
    if lost > 0 {
        log::warn!(
            "check_races: {lost} access(es) made in signal handlers of node {} were not checked \
             (more than {HANDLER_ACCESSES} different ones between two of their thread's \
             accesses outside handlers)",
            c.node
        );
    }
    if running > 0 {
        log::warn!(
            "check_races: {running} thread(s) of node {} still ran at jia_exit with accesses not \
             checked yet (their last ones are not)",
            c.node
        );
    }
    let mut log = Log {
        node: c.node,
        ..std::mem::take(&mut *c.log.lock().unwrap_or_else(|e| e.into_inner()))
    };
    let own = |what: &str, e: String| -> ! {
        fatal(&format!("check_races: {what} of node {}: {e}", c.node))
    };
    // Every node's touches to node 0, which answers with the candidates: only the accesses to
    // those travel in full (`summary`).
    let touches =
        summary::touches(&log.packed, log.packed_count).unwrap_or_else(|e| own("own records", e));
    let keep_candidates = |log: &mut Log, candidates: &[summary::Candidate]| {
        let (packed, count) =
            records::filter_packed(&log.packed, log.packed_count, |epoch, page| {
                summary::holds(candidates, epoch, page)
            })
            .unwrap_or_else(|e| own("own records", e));
        log.packed = packed;
        log.packed_count = count;
    };
    if c.node != 0 {
        send(0, &summary::encode_touches(&touches));
        let candidates = summary::decode_candidates(&receive(0))
            .unwrap_or_else(|e| own("the candidates node 0 sent", e));
        keep_candidates(&mut log, &candidates);
        send(0, &records::encode(&log));
        return;
    }
    let mut all = vec![touches];
    for n in 1..c.nodes {
        match summary::decode_touches(&receive(usize::from(n))) {
            Ok(t) => all.push(t),
            Err(e) => fatal(&format!("check_races: node {n}'s touches: {e}")),
        }
    }
    let candidates = summary::candidates(&all);
    drop(all);
    let sent = summary::encode_candidates(&candidates);
    for n in 1..c.nodes {
        send(usize::from(n), &sent);
    }
    keep_candidates(&mut log, &candidates);
    // Node 0's own records unpacked as the others' are.
    let own = records::decode(&records::encode(&log))
        .unwrap_or_else(|e| fatal(&format!("check_races: own records: {e}")));
    let mut logs = vec![own];
    for n in 1..c.nodes {
        let bytes = receive(usize::from(n));
        match records::decode(&bytes) {
            Ok(l) if l.node == n => logs.push(l),
            Ok(l) => fatal(&format!(
                "check_races: node {n} sent the records of node {}",
                l.node
            )),
            Err(e) => fatal(&format!("check_races: node {n}'s records: {e}")),
        }
    }
    *c.gathered.lock().unwrap_or_else(|e| e.into_inner()) = logs;
}

/// At node 0, once every node has left: reads every node's records and reports the races;
/// whether there were any (the process should then end with [`EXIT_RACES`]).
pub fn report_at_node0() -> bool {
    if !on() {
        return false;
    }
    let Some(c) = CHECKER.get() else { return false };
    if c.node != 0 {
        return false;
    }
    let logs = std::mem::take(&mut *c.gathered.lock().unwrap_or_else(|e| e.into_inner()));
    let races = report::find(&logs);
    let text = report::render(&logs, &races);
    eprint!("{text}");
    !races.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clocks' entries merge by thread, each thread's larger value, in thread order.
    #[test]
    fn a_counted_barriers_round_is_forgotten_once_all_its_threads_left() {
        // Count 2: main and worker 1 in round 1; worker 1 late to leave while main and worker
        // 2 go through round 2 (a review's case: round 1 was forgotten at round 2's end, and
        // worker 1's acquire found nothing).
        let mut b = CountedBarrier::new(2);
        assert_eq!((b.arrive(), b.arrive()), (1, 1));
        assert_eq!(b.left(1), None);
        assert_eq!((b.arrive(), b.arrive()), (2, 2));
        assert_eq!(b.left(2), None);
        assert_eq!(b.left(2), Some(2));
        assert_eq!(b.left(1), Some(1));
        assert!(b.leaving.is_empty());
    }

    #[test]
    fn clocks_merge_entry_by_entry() {
        assert_eq!(merged(&[], &[]), vec![]);
        assert_eq!(merged(&[(3, 1)], &[]), vec![(3, 1)]);
        assert_eq!(
            merged(&[(1, 5), (4, 2), (2000, 7)], &[(0, 1), (4, 9), (1500, 3)]),
            vec![(0, 1), (1, 5), (4, 9), (1500, 3), (2000, 7)]
        );
    }

    #[test]
    fn bits_become_the_runs_of_bytes_touched() {
        let mut b: PageBits = [0; PAGE / 64];
        set_bits(&mut b, 8, 16);
        set_bits(&mut b, 16, 24);
        set_bits(&mut b, 60, 70);
        set_bits(&mut b, 128, 192);
        set_bits(&mut b, PAGE - 1, PAGE);
        assert_eq!(
            runs_of(&b),
            vec![
                (8, 24),
                (60, 70),
                (128, 192),
                ((PAGE - 1) as u16, PAGE as u16)
            ]
        );
        assert_eq!(run_count(&b), 4);
        assert!(runs_of(&[0; PAGE / 64]).is_empty());
        assert_eq!(run_count(&[0; PAGE / 64]), 0);
        let mut all: PageBits = [0; PAGE / 64];
        set_bits(&mut all, 0, PAGE);
        assert_eq!(runs_of(&all), vec![(0, PAGE as u16)]);
        assert_eq!(run_count(&all), 1);
    }

    /// A read and a write of one page from sites a few bytes apart (`a[i] += x` in C) fall in
    /// one memo set no more often than chance says (1 in 32); the pair a plain multiply put
    /// in one set at every page does not share one.
    #[test]
    fn nearby_sites_spread_over_the_memo() {
        assert_ne!(
            memo_set(0x5555_d82c_9998, 6, false),
            memo_set(0x5555_d82c_99be, 6, true)
        );
        let mut same = 0;
        let mut n = 0;
        for pc in (0x5555_0000_1000usize..).step_by(4099).take(200) {
            for d in 1..40 {
                for page in [0u32, 7, 1000] {
                    n += 1;
                    same += usize::from(memo_set(pc, page, false) == memo_set(pc + d, page, true));
                }
            }
        }
        assert!(same * 100 < n * 6, "{same} of {n} pairs share a set");
    }

    /// The elements that differ, found 64 bytes at a time, are those a byte-by-byte comparison
    /// finds, wherever in the page the compared elements start and however many.
    #[test]
    fn changed_bits_are_the_bytes_that_differ() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let lo = (next() % 200) as usize;
            let len = (next() % 300) as usize;
            let a: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut b = a.clone();
            for _ in 0..next() % 12 {
                if len > 0 {
                    let i = (next() % len as u64) as usize;
                    b[i] ^= 1 << (next() % 8);
                }
            }
            for element in [1, 2, 4, 8] {
                // Element boundaries: the start and the length whole elements.
                let lo = lo - lo % element;
                let len = len - len % element;
                let (a, b) = (&a[..len], &b[..len]);
                let mut got: PageBits = [0; PAGE / 64];
                let any = changed_bits(a, b, lo, element, &mut got);
                let mut want: PageBits = [0; PAGE / 64];
                for i in 0..len {
                    if a[i] != b[i] {
                        let first = i - i % element;
                        set_bits(&mut want, lo + first, lo + first + element);
                    }
                }
                assert_eq!(got, want, "lo {lo} len {len} element {element}");
                assert_eq!(any, a != b);
            }
        }
    }
}
