//! The data race checker (`check_races = on`, `dsmrun --check-races`).
//!
//! Every thread records, between two of its synchronisations (a *segment*), which bytes of
//! which pages it read and wrote, and from where (a Rust accessor's caller, or the return
//! address of a C program's `-fsanitize=thread` hook). Segments are ordered by vector clocks:
//! a lock's clock travels in a hidden slot of shared memory written by its holder before the
//! release (so the lock itself makes it coherent), a condition variable's in one slot per node,
//! and a barrier orders everything before it before everything after it (an epoch: clocks start
//! again). Letters (`jia_send`) and `jia_wait` order nothing: they carry no coherence. At
//! `jia_exit` every node sends its segments to node 0 (letters on a channel of their own);
//! node 0, once every node has left, reports each pair of accesses to the same bytes from
//! different threads, one of them a write, that no synchronisation orders (`report`), and the
//! process ends with status 66 if there was any.
//!
//! Off (the default), every hook is one relaxed load of `ON` and a branch.

pub(crate) mod records;
pub(crate) mod report;
pub(crate) mod summary;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Threads per node the vector clocks have room for.
pub const VC_THREADS: usize = 64;
/// The exit status of a job in which races were found (ThreadSanitizer's).
pub const EXIT_RACES: i32 = 66;
const PAGE: usize = dsm_core::PAGE_SIZE;

/// Whether this process checks for races.
static ON: AtomicBool = AtomicBool::new(false);
/// The shared region (`[BASE, BASE + LEN)`), whose accesses are recorded.
static BASE: AtomicUsize = AtomicUsize::new(0);
static LEN: AtomicUsize = AtomicUsize::new(0);
static CHECKER: OnceLock<Checker> = OnceLock::new();

struct Checker {
    node: u16,
    nodes: u16,
    /// Barriers this node has passed.
    epoch: AtomicU32,
    /// Threads that have recorded anything (each gets the next number).
    threads: AtomicUsize,
    /// Threads whose segment in progress has accesses (a thread's last segment is kept when
    /// it ends, in its thread-local destructor, which may run after a join has returned), and
    /// the end of one. A thread idle in a pool (OpenMP's) has none.
    open: Mutex<usize>,
    ended: std::sync::Condvar,
    /// Numbers of threads that ended, with their last clock: once all 64 numbers were given,
    /// a new thread takes one and goes on from that clock (a program may run many rounds of
    /// threads; 64 at once at most).
    free_numbers: Mutex<Vec<(usize, u32)>>,
    /// The hidden clock slots: one per lock, then one per condition variable and node.
    slots: &'static [AtomicU32],
    /// Serialises this node's threads' updates of a condition variable's slot.
    cv_slot: Mutex<()>,
    /// Clocks of the synchronisation of this node's threads that the DSM does not make (a C
    /// program's pthread mutexes, barriers and semaphores by address, ended threads by id):
    /// the epoch each is for, and the clock.
    local: Mutex<HashMap<Local, (u32, Vec<u32>)>>,
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
    fn key(self) -> usize {
        match self {
            From::Caller(l) => l as *const Location<'static> as usize,
            From::Code(pc) => pc,
        }
    }
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
    /// (page, site, write) -> its slot in `bits`.
    slots: HashMap<(u32, u32, bool), u32>,
    bits: Vec<((u32, u32, bool), Box<PageBits>)>,
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
}

/// A mutable slice a thread holds: its offset in the region, where its bytes as they were lie
/// in [`Recorder::snapshot_bytes`], its length, where it was taken, and its number.
struct Snapshot {
    id: u32,
    /// The [`incoming`] log's count when its bytes were copied: bytes the protocol wrote since
    /// are not the thread's.
    seq: u64,
    off: usize,
    at: usize,
    len: usize,
    /// The size of the slice's elements.
    element: usize,
    from: From,
}

/// A mutable slice's snapshot, held by the slice's guard ([`crate::SliceMut`]) until it is
/// dropped.
#[derive(Debug)]
pub(crate) struct Taken {
    thread: u32,
    id: u32,
}

/// Sets the bits of bytes `[lo, hi)` (one page's).
pub(crate) fn set_bits(bits: &mut PageBits, lo: usize, hi: usize) {
    let mut i = lo;
    while i < hi {
        let (w, s) = (i / 64, i % 64);
        let n = (hi - i).min(64 - s);
        bits[w] |= if n == 64 { !0 } else { ((1u64 << n) - 1) << s };
        i += n;
    }
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

/// The elements of one page (bytes `then`/`now` from byte `lo` of it) that this thread
/// changed, given the protocol's writes to it meanwhile (`came_in`, oldest first). A byte they
/// wrote is this thread's if the snapshot holds neither what the first of them found there nor
/// what it left (the thread wrote it before: a snapshot taken while that write was copying
/// holds one or the other), or if the byte now is neither what the last of them left nor the
/// snapshot's (the thread wrote it after). A thread writing the very value another node wrote
/// is not seen. A byte written by a write whose bytes are no longer kept is not claimed. Then
/// whole elements of `element` bytes.
#[cold]
#[inline(never)]
fn this_threads_changes(
    then: &[u8],
    now: &[u8],
    lo: usize,
    came_in: &[&CameIn],
    element: usize,
) -> PageBits {
    let mut first_before = [0u8; PAGE];
    let mut first_after = [0u8; PAGE];
    let mut last_after = [0u8; PAGE];
    let mut covered: PageBits = [0; PAGE / 64];
    let mut unknown: PageBits = [0; PAGE / 64];
    let bit = |bits: &PageBits, x: usize| bits[x / 64] >> (x % 64) & 1 == 1;
    for w in came_in {
        for x in w.lo.max(lo)..w.hi.min(lo + then.len()) {
            match &w.images {
                Some((before, after)) => {
                    if !bit(&covered, x) {
                        first_before[x] = before[x - w.lo];
                        first_after[x] = after[x - w.lo];
                        covered[x / 64] |= 1 << (x % 64);
                    }
                    last_after[x] = after[x - w.lo];
                }
                None => unknown[x / 64] |= 1 << (x % 64),
            }
        }
    }
    let mut mine: PageBits = [0; PAGE / 64];
    for (i, (&a, &b)) in then.iter().zip(now).enumerate() {
        let x = lo + i;
        let claimed = if bit(&unknown, x) {
            false
        } else if bit(&covered, x) {
            (a != first_before[x] && a != first_after[x]) || (b != last_after[x] && b != a)
        } else {
            a != b
        };
        if claimed {
            mine[x / 64] |= 1 << (x % 64);
        }
    }
    for w in mine.iter_mut() {
        *w = crate::sys::whole_elements(*w, element);
    }
    mine
}

/// Entries of the [`incoming`] log (a power of two).
const INCOMING: usize = 1 << 14;

/// Bytes of shared memory the protocol wrote on this node while some thread held a mutable
/// slice: another node's diff applied here (the home), a page fetched. A slice's snapshot
/// compare leaves them out: they are not its thread's writes (a home's page changes under a
/// slice whenever another node releases writes to other bytes of it).
///
/// A ring of the latest [`INCOMING`]: entry `n` is slot `n % INCOMING`, whose sequence word is
/// `n + 1` once its (page, lo, hi) word is written (a seqlock: readers check it before and
/// after). Written from the fault path too, hence atomics only.
struct IncomingLog {
    next: AtomicU64,
    /// Writes logged whose copy is not done.
    in_flight: AtomicUsize,
    seqs: [AtomicU64; INCOMING],
    spans: [AtomicU64; INCOMING],
    /// Where entry's bytes before and after lie in `image` (`u64::MAX`: not kept, the write
    /// was larger than [`IMAGE_MAX`]).
    images: [AtomicU64; INCOMING],
    image_next: AtomicU64,
    image: [AtomicU8; IMAGE_BYTES],
}

/// Bytes of the ring that keeps the writes' bytes before and after (a power of two: 1,024
/// fetched pages; zero pages until used).
const IMAGE_BYTES: usize = 1 << 23;
/// The largest write whose bytes are kept: a page.
const IMAGE_MAX: usize = PAGE;

static INCOMING_LOG: IncomingLog = IncomingLog {
    next: AtomicU64::new(0),
    in_flight: AtomicUsize::new(0),
    seqs: [const { AtomicU64::new(0) }; INCOMING],
    spans: [const { AtomicU64::new(0) }; INCOMING],
    images: [const { AtomicU64::new(0) }; INCOMING],
    image_next: AtomicU64::new(0),
    image: [const { AtomicU8::new(0) }; IMAGE_BYTES],
};

/// One write of the protocol's, as [`incoming_since`] reads it: its page, bytes `[lo, hi)` of
/// it, and (small ones) the bytes before and after.
struct CameIn {
    page: u32,
    lo: usize,
    hi: usize,
    images: Option<(Vec<u8>, Vec<u8>)>,
}

/// Mutable slices held by this node's threads (nothing is logged when there are none).
static LIVE_SNAPSHOTS: AtomicUsize = AtomicUsize::new(0);

/// The protocol is about to write `len` bytes at `offset` of page `page` of shared memory
/// (logged before the write: a compare that sees the bytes changed finds the entry). Signal
/// context (the fault path may apply what it fetched): atomics only, no wait.
///
/// Returns whether it was logged: then [`incoming_done`] follows the copy.
pub(crate) fn incoming(page: usize, offset: usize, before: &[u8], after: &[u8]) -> bool {
    let len = after.len();
    if !on() || LIVE_SNAPSHOTS.load(Ordering::SeqCst) == 0 || len == 0 {
        return false;
    }
    let log = &INCOMING_LOG;
    log.in_flight.fetch_add(1, Ordering::SeqCst);
    let n = log.next.fetch_add(1, Ordering::SeqCst);
    let slot = n as usize % INCOMING;
    log.seqs[slot].store(0, Ordering::SeqCst);
    let span = (page as u64) << 32 | (offset as u64) << 16 | (offset + len) as u64;
    log.spans[slot].store(span, Ordering::SeqCst);
    let at = if len <= IMAGE_MAX && before.len() == len {
        let at = log.image_next.fetch_add(2 * len as u64, Ordering::SeqCst);
        for (i, &b) in before.iter().chain(after).enumerate() {
            log.image[(at as usize + i) % IMAGE_BYTES].store(b, Ordering::Relaxed);
        }
        at
    } else {
        u64::MAX
    };
    log.images[slot].store(at, Ordering::SeqCst);
    log.seqs[slot].store(n + 1, Ordering::SeqCst);
    true
}

/// The protocol's write logged by [`incoming`] is copied. Signal context: one atomic.
pub(crate) fn incoming_done() {
    INCOMING_LOG.in_flight.fetch_sub(1, Ordering::SeqCst);
}

/// How far back a snapshot taken while writes were still copying looks: more than the
/// protocol's writes that can be copying at once (the fault handlers of a node's threads and
/// its service thread).
const INCOMING_IN_FLIGHT: u64 = 256;

/// The [`incoming`] log's count for a snapshot taken now: the entries logged before it, less
/// [`INCOMING_IN_FLIGHT`] if some may still be copying (they may change its bytes after it is
/// taken; with none, a compare with no entry since skips the log).
fn incoming_now() -> u64 {
    let log = &INCOMING_LOG;
    let now = log.next.load(Ordering::SeqCst);
    if log.in_flight.load(Ordering::SeqCst) > 0 {
        now.saturating_sub(INCOMING_IN_FLIGHT)
    } else {
        now
    }
}

/// What the protocol wrote in pages `[first, end)` since the log's count was `since`: (page,
/// lo, hi) each. `None` if some of it is no longer known (the ring went round, or an entry is
/// being written).
fn incoming_since(since: u64, first: usize, end: usize) -> Option<Vec<CameIn>> {
    let log = &INCOMING_LOG;
    let now = log.next.load(Ordering::SeqCst);
    if now.saturating_sub(since) > INCOMING as u64 {
        return None;
    }
    let mut out = Vec::new();
    for n in since..now {
        let slot = n as usize % INCOMING;
        // An entry being written (its writer copies its bytes before and after first, a few
        // microseconds at most): waited for a while, a millisecond at most.
        let mut tries = 0;
        while log.seqs[slot].load(Ordering::SeqCst) != n + 1 && tries < 1000 {
            tries += 1;
            if tries % 64 == 0 {
                std::thread::sleep(std::time::Duration::from_micros(1));
            } else {
                std::hint::spin_loop();
            }
        }
        let before = log.seqs[slot].load(Ordering::SeqCst);
        let span = log.spans[slot].load(Ordering::SeqCst);
        let at = log.images[slot].load(Ordering::SeqCst);
        let page = (span >> 32) as usize;
        if !(first..end).contains(&page) {
            if before != n + 1 || log.seqs[slot].load(Ordering::SeqCst) != before {
                return None;
            }
            continue;
        }
        let (lo, hi) = (
            (span >> 16) as usize & 0xffff,
            (span as usize & 0xffff).min(PAGE),
        );
        let len = hi.saturating_sub(lo);
        let mut images = (at != u64::MAX).then(|| {
            let bytes: Vec<u8> = (0..2 * len)
                .map(|i| log.image[(at as usize + i) % IMAGE_BYTES].load(Ordering::Relaxed))
                .collect();
            let after = bytes[len..].to_vec();
            (bytes[..len].to_vec(), after)
        });
        // Bytes written over by later writes since: not known any more.
        if at != u64::MAX
            && log.image_next.load(Ordering::SeqCst) - at > (IMAGE_BYTES - 2 * len) as u64
        {
            images = None;
        }
        if before != n + 1 || log.seqs[slot].load(Ordering::SeqCst) != before {
            return None;
        }
        out.push(CameIn {
            page: page as u32,
            lo,
            hi,
            images,
        });
    }
    Some(out)
}

/// How many runs of set bits `bits` has.
pub(crate) fn run_count(bits: &PageBits) -> usize {
    let mut carry = 0;
    let mut n = 0;
    for &w in bits {
        // A run starts at a set bit whose lower neighbour is clear.
        n += (w & !((w << 1) | carry)).count_ones() as usize;
        carry = w >> 63;
    }
    n
}

/// The runs of set bits, as `[lo, hi)` byte offsets.
pub(crate) fn runs_of(bits: &PageBits) -> Vec<(u16, u16)> {
    let mut runs = Vec::new();
    for_each_run(bits, |lo, hi| runs.push((lo, hi)));
    runs
}

/// Calls `f(lo, hi)` on each run of set bits, in order.
pub(crate) fn for_each_run(bits: &PageBits, mut f: impl FnMut(u16, u16)) {
    // The run being built: its start, and its end so far.
    let mut open: Option<(usize, usize)> = None;
    for (w, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            let lo = w * 64 + word.trailing_zeros() as usize;
            let len = (word >> (lo % 64)).trailing_ones() as usize;
            let hi = lo + len;
            open = match open {
                Some((start, end)) if end == lo => Some((start, hi)),
                Some((start, end)) => {
                    f(start as u16, end as u16);
                    Some((lo, hi))
                }
                None => Some((lo, hi)),
            };
            word = if hi % 64 == 0 {
                0
            } else {
                word & !((1u64 << (hi % 64)) - 1)
            };
        }
    }
    if let Some((start, end)) = open {
        f(start as u16, end as u16);
    }
}

/// Sets in `bits` the bytes of the `element`-byte elements where `a` and `b` (of one page, from
/// byte `lo` of it, an element boundary) differ; whether any did. Sixty-four bytes at a time
/// ([`crate::sys::for_each_differing_chunk`]).
pub(crate) fn changed_bits(
    a: &[u8],
    b: &[u8],
    lo: usize,
    element: usize,
    bits: &mut PageBits,
) -> bool {
    let element = element.clamp(1, 8);
    let mut any = false;
    let tail = a.len() % 64;
    crate::sys::for_each_differing_chunk(a, b, element, |k, m| {
        any = true;
        let at = lo + k * 64;
        let (w, sh) = (at / 64, at % 64);
        bits[w] |= m << sh;
        if sh > 0 {
            bits[w + 1] |= m >> (64 - sh);
        }
    });
    let n = a.len();
    for i in n - tail..n {
        if a[i] != b[i] {
            any = true;
            let first = i - i % element;
            set_bits(bits, lo + first, lo + first + element);
        }
    }
    any
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.close();
        LIVE_SNAPSHOTS.fetch_sub(self.snapshots.len(), Ordering::SeqCst);
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
    static RECORDER: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// Whether this process checks for races.
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Words of shared memory the clock slots of a job of `nodes` take (the caller allocates them,
/// on every node alike, and passes them to [`start`]).
pub(crate) fn slot_words_for(nodes: usize) -> usize {
    let nodes = nodes as u16;
    (usize::from(dsm_core::MAX_LOCKS) + usize::from(dsm_core::MAX_CVS) * usize::from(nodes))
        * slot_words(nodes)
}

/// Starts checking (every node, at init): `region` is the shared region, `slots` the clock
/// slots' words of shared memory (see [`slot_words_for`]).
pub(crate) fn start(dsm: &crate::Dsm, region: (usize, usize), slots: (usize, usize)) {
    let (node, nodes) = (dsm.id() as u16, dsm.nodes() as u16);
    let slots = crate::sys::shared_words(slots.0, slots.1);
    let checker = Checker {
        node,
        nodes,
        epoch: AtomicU32::new(0),
        threads: AtomicUsize::new(0),
        open: Mutex::new(0),
        ended: std::sync::Condvar::new(),
        free_numbers: Mutex::new(Vec::new()),
        slots,
        cv_slot: Mutex::new(()),
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
    BASE.store(region.0, Ordering::Relaxed);
    LEN.store(region.1, Ordering::Relaxed);
    ON.store(true, Ordering::Release);
}

/// Words of one clock slot: its epoch, then a clock per thread of the job.
fn slot_words(nodes: u16) -> usize {
    1 + usize::from(nodes) * VC_THREADS
}

/// A read or write of `len` bytes at `addr` by this thread (anywhere: only the shared region's
/// are recorded). Signal context inside [`in_signal_handler`] (kept for later, see there).
#[inline]
pub fn access(addr: usize, len: usize, write: bool, from: From) {
    if !on() {
        return;
    }
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    if off >= LEN.load(Ordering::Relaxed) || len == 0 {
        return;
    }
    if HANDLER.with(|h| h.keep(off, len, write, from)) {
        return;
    }
    record(off, len, write, from);
}

/// Accesses a thread makes while it runs a signal handler of the program's, one entry each.
const HANDLER_ACCESSES: usize = 256;

/// What a thread's signal handlers did, kept until the thread's next access or synchronisation
/// outside them. Recording there could allocate, and a handler that interrupted `malloc` would
/// then wait forever for the allocator's lock its own thread holds.
///
/// Signal context: [`Handler::keep`] only reads and writes these cells, which belong to the
/// thread (no lock, no allocation, no wait, errno untouched). The thread-local has no
/// destructor, so reaching it never registers one (which may allocate).
struct Handler {
    /// Handlers of the thread's running now (nested).
    depth: Cell<u32>,
    len: Cell<usize>,
    /// Accesses that found no room.
    lost: Cell<u64>,
    kept: [Cell<(usize, usize, bool, From)>; HANDLER_ACCESSES],
}

impl Handler {
    /// Inside a handler: keeps the access (room permitting) and says so. Signal context.
    #[inline]
    fn keep(&self, off: usize, len: usize, write: bool, from: From) -> bool {
        if self.depth.get() == 0 {
            return false;
        }
        // Once each (a handler run by a timer reads the same few places again and again): a
        // scan of at most HANDLER_ACCESSES entries, rare next to the program's own accesses.
        let n = self.len.get();
        let access = (off, len, write, from);
        let same = |k: &(usize, usize, bool, From)| {
            (k.0, k.1, k.2, k.3.key()) == (off, len, write, from.key())
        };
        if self.kept[..n].iter().any(|k| same(&k.get())) {
            return true;
        }
        match self.kept.get(n) {
            Some(slot) => {
                slot.set(access);
                self.len.set(n + 1);
            }
            None => self.lost.set(self.lost.get() + 1),
        }
        true
    }

    /// The accesses kept, taken with asynchronous signals held off (a handler would otherwise
    /// keep one between the copy and the reset, and it would be lost). Outside handlers.
    fn take(&self) -> Vec<(usize, usize, bool, From)> {
        let _held = crate::sys::signals::BlockedSignals::asynchronous();
        let n = self.len.get();
        let taken = self.kept[..n].iter().map(Cell::get).collect();
        self.len.set(0);
        HANDLER_LOST.fetch_add(self.lost.replace(0), Ordering::Relaxed);
        taken
    }
}

thread_local! {
    static HANDLER: Handler = const {
        Handler {
            depth: Cell::new(0),
            len: Cell::new(0),
            lost: Cell::new(0),
            kept: [const { Cell::new((0, 0, false, From::Code(0))) }; HANDLER_ACCESSES],
        }
    };
}

/// Accesses in signal handlers that were not recorded (no room: more than
/// [`HANDLER_ACCESSES`] different ones between two of their thread's accesses outside
/// handlers).
static HANDLER_LOST: AtomicU64 = AtomicU64::new(0);

/// Runs `f`, a signal handler of the program's (libjia runs every handler the program installs
/// through here when checking): the accesses it makes are kept and recorded at its thread's
/// next access or synchronisation outside handlers, in the segment they belong to.
///
/// Signal context: counts the nesting in a cell of the thread's, nothing else. A handler left
/// by `longjmp` leaves the count up: the thread's accesses are then kept (256 at most, the
/// rest lost and counted) until its next DSM call, which puts it back to 0 (no DSM call runs
/// in a handler).
pub fn in_signal_handler<R>(f: impl FnOnce() -> R) -> R {
    HANDLER.with(|h| h.depth.set(h.depth.get() + 1));
    let r = f();
    HANDLER.with(|h| h.depth.set(h.depth.get().saturating_sub(1)));
    r
}

fn record(off: usize, len: usize, write: bool, from: From) {
    with_recorder(|r, c| {
        // A barrier orders every thread of the node, also one that did not take part in it
        // (a thread joined by one that did, like the workers of a pthreads program whose main
        // thread reads their results after joining them).
        r.catch_up(c.epoch.load(Ordering::Acquire));
        r.mark(c, off, len, write, from);
    });
}

/// A mutable slice of `bytes.len()` bytes at `addr` was taken at `from`, holding `bytes`: the
/// bytes it changes are recorded as its writes, when it is dropped ([`slice_dropped`]) or, for
/// the part done by then, when its thread's segment ends. Reads through it are not seen;
/// recording the whole slice would claim bytes it never touches, as the other colour of a
/// red-black SOR row. `None`: not recorded (checking off, or not shared memory).
pub(crate) fn slice_taken(addr: usize, bytes: &[u8], element: usize, from: From) -> Option<Taken> {
    if !on() {
        return None;
    }
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    if off >= LEN.load(Ordering::Relaxed) || bytes.is_empty() {
        return None;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        let id = r.next_snapshot;
        r.next_snapshot = r.next_snapshot.wrapping_add(1);
        LIVE_SNAPSHOTS.fetch_add(1, Ordering::SeqCst);
        r.snapshots.push(Snapshot {
            id,
            seq: incoming_now(),
            off,
            at: r.snapshot_bytes.len(),
            len: bytes.len(),
            element,
            from,
        });
        r.snapshot_bytes.extend_from_slice(bytes);
        Taken {
            thread: r.thread,
            id,
        }
    })
}

/// A mutable slice's guard was dropped: the bytes it changed since its snapshot are recorded
/// as its writes, while they are still in cache. Dropped on another thread than the one that
/// took it, it is left to that one's next segment end.
pub(crate) fn slice_dropped(taken: Taken) {
    with_recorder(|r, c| {
        if r.thread != taken.thread {
            return;
        }
        r.catch_up(c.epoch.load(Ordering::Acquire));
        let Some(k) = r.snapshots.iter().rposition(|s| s.id == taken.id) else {
            return;
        };
        let t = r.snapshots.remove(k);
        LIVE_SNAPSHOTS.fetch_sub(1, Ordering::SeqCst);
        let then = std::mem::take(&mut r.snapshot_bytes);
        let base = BASE.load(Ordering::Relaxed);
        crate::sys::with_region_bytes(base + t.off, t.len, |now| {
            r.compare_snapshot(c, &t, &then[t.at..t.at + t.len], now);
        });
        r.snapshot_bytes = then;
        if r.snapshots.is_empty() {
            r.snapshot_bytes.clear();
        } else if t.at + t.len == r.snapshot_bytes.len() {
            r.snapshot_bytes.truncate(t.at);
        } else {
            r.compact_snapshots();
        }
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

/// Runs `f` with this thread's recorder (made at its first use).
///
/// An access made while the recorder is busy (a signal handler's, interrupting this thread's
/// own recording) is not recorded; nor is one after the thread's recorder is gone (in a
/// thread-local destructor).
fn with_recorder<R>(f: impl FnOnce(&mut Recorder, &Checker) -> R) -> Option<R> {
    let c = CHECKER.get()?;
    RECORDER
        .try_with(|cell| {
            let mut slot = cell.try_borrow_mut().ok()?;
            let r = slot.get_or_insert_with(|| c.new_recorder());
            if HANDLER.with(|h| h.len.get()) > 0 {
                r.record_handlers(c);
            }
            Some(f(r, c))
        })
        .ok()
        .flatten()
}

impl Checker {
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
            crate::door::end::fatal(&format!(
                "check_races: more than {VC_THREADS} threads of node {} use shared memory at \
                 once (the checker's clocks have room for {VC_THREADS})",
                self.node
            ));
        }
        let thread = (usize::from(self.node) * VC_THREADS + n) as u32;
        let mut clock = vec![0; usize::from(self.nodes) * VC_THREADS];
        clock[thread as usize] = last + 1;
        Recorder {
            thread,
            epoch: self.epoch.load(Ordering::Acquire),
            clock,
            slots: HashMap::new(),
            bits: Vec::new(),
            sites: HashMap::new(),
            memo: [NO_MEMO; MEMO],
            snapshots: Vec::new(),
            snapshot_bytes: Vec::new(),
            next_snapshot: 0,
            spare_bits: Vec::new(),
        }
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
    fn read_slot(&self, k: usize) -> Option<(u32, Vec<u32>)> {
        let w = slot_words(self.nodes);
        let at = k * w;
        let epoch = self.slots[at].load(Ordering::Relaxed).checked_sub(1)?;
        Some((
            epoch,
            (1..w)
                .map(|i| self.slots[at + i].load(Ordering::Relaxed))
                .collect(),
        ))
    }

    fn write_slot(&self, k: usize, epoch: u32, clock: &[u32]) {
        let at = k * slot_words(self.nodes);
        for (i, &v) in clock.iter().enumerate() {
            self.slots[at + 1 + i].store(v, Ordering::Relaxed);
        }
        self.slots[at].store(epoch + 1, Ordering::Relaxed);
    }

    fn cv_slot(&self, cv: u16, node: u16) -> usize {
        usize::from(dsm_core::MAX_LOCKS)
            + usize::from(cv) * usize::from(self.nodes)
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
            self.bits.push(((page, site, write), bits));
        }
        slot
    }

    /// Records what the thread's signal handlers did since its last access outside them.
    #[cold]
    #[inline(never)]
    fn record_handlers(&mut self, c: &Checker) {
        self.catch_up(c.epoch.load(Ordering::Acquire));
        for (off, len, write, from) in HANDLER.with(Handler::take) {
            self.mark(c, off, len, write, from);
        }
    }

    /// Records `len` bytes at `off` touched from `from`.
    #[inline]
    fn mark(&mut self, c: &Checker, off: usize, len: usize, write: bool, from: From) {
        let (page, lo) = (off / PAGE, off % PAGE);
        if lo + len <= 64 * (lo / 64 + 1) {
            // Within one word of bits (all a program's loads and stores but unaligned ones
            // across 64 bytes): one OR.
            let bits = self.bits_for(c, page as u32, write, from);
            let ones = if len == 64 { !0 } else { (1u64 << len) - 1 };
            bits[lo / 64] |= ones << (lo % 64);
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

    /// The bytes the slices this thread holds changed in the segment that ends, recorded as
    /// their writes; their snapshots then start again from the bytes as they are (what they
    /// change later belongs to a later segment).
    fn compare_snapshots(&mut self) {
        let Some(c) = CHECKER.get() else { return };
        let base = BASE.load(Ordering::Relaxed);
        let snapshots = std::mem::take(&mut self.snapshots);
        let mut then = std::mem::take(&mut self.snapshot_bytes);
        let mut snapshots = snapshots;
        for t in &mut snapshots {
            let seq = incoming_now();
            crate::sys::with_region_bytes(base + t.off, t.len, |now| {
                let then = &mut then[t.at..t.at + t.len];
                self.compare_snapshot(c, t, then, now);
                then.copy_from_slice(now);
            });
            t.seq = seq;
        }
        self.snapshot_bytes = then;
        self.snapshots = snapshots;
    }

    /// Guards dropped out of order (a sliding window of rows) leave holes in
    /// `snapshot_bytes`: once they are more than the live bytes (and 64 kB), the live ones move
    /// down.
    fn compact_snapshots(&mut self) {
        let live: usize = self.snapshots.iter().map(|t| t.len).sum();
        if self.snapshot_bytes.len() <= 2 * live + (64 << 10) {
            return;
        }
        let mut at = 0;
        for t in &mut self.snapshots {
            self.snapshot_bytes.copy_within(t.at..t.at + t.len, at);
            t.at = at;
            at += t.len;
        }
        self.snapshot_bytes.truncate(at);
    }

    /// Back from an acquire (lock, condition variable, barrier): the slices this thread holds
    /// start again from their bytes as they are. Their changes were recorded when the segment
    /// ended before the call; what changed during it is not this thread's (writes of other
    /// nodes coming in; a program holding a slice across them breaks its contract, but a guard
    /// left to the end of its scope would otherwise claim them).
    fn resnapshot(&mut self) {
        let base = BASE.load(Ordering::Relaxed);
        for t in &mut self.snapshots {
            t.seq = incoming_now();
            crate::sys::with_region_bytes(base + t.off, t.len, |now| {
                self.snapshot_bytes[t.at..t.at + t.len].copy_from_slice(now);
            });
        }
    }

    /// Records as writes the elements of slice `t` that differ between `then` and `now` (an
    /// element whose low bytes alone changed was written whole: the program stores elements).
    fn compare_snapshot(&mut self, c: &Checker, t: &Snapshot, then: &[u8], now: &[u8]) {
        let (off, from) = (t.off, t.from);
        let end = off + then.len();
        let mut changed_pages: Vec<(u32, Box<PageBits>)> = Vec::new();
        let mut at = off;
        while at < end {
            let page = (at / PAGE) as u32;
            let stop = end.min((page as usize + 1) * PAGE);
            let (a, b) = (&then[at - off..stop - off], &now[at - off..stop - off]);
            let mut changed: PageBits = [0; PAGE / 64];
            if changed_bits(a, b, at % PAGE, t.element, &mut changed) {
                if INCOMING_LOG.next.load(Ordering::SeqCst) == t.seq {
                    // The protocol wrote nothing since the snapshot (its writes are logged
                    // before they are made): all of it is this thread's.
                    let bits = self.bits_for(c, page, true, from);
                    for (w, x) in bits.iter_mut().zip(changed.iter()) {
                        *w |= x;
                    }
                } else {
                    changed_pages.push((page, Box::new(changed)));
                }
            }
            at = stop;
        }
        if changed_pages.is_empty() {
            return;
        }
        // What the protocol wrote in these pages since the snapshot (another node's diff
        // applied here, a page fetched) is not this thread's: read after the compare, so that
        // every write it saw is logged. `None`: too much to know; nothing is claimed.
        let Some(came_in) = incoming_since(t.seq, off / PAGE, end.div_ceil(PAGE)) else {
            return;
        };
        let e = t.element.clamp(1, 8);
        for (page, mut changed) in changed_pages {
            let mine: Vec<&CameIn> = came_in.iter().filter(|w| w.page == page).collect();
            if !mine.is_empty() {
                let start = (page as usize * PAGE).max(off);
                let stop = end.min((page as usize + 1) * PAGE);
                *changed = this_threads_changes(
                    &then[start - off..stop - off],
                    &now[start - off..stop - off],
                    start % PAGE,
                    &mine,
                    e,
                );
            }
            let bits = self.bits_for(c, page, true, from);
            for (w, x) in bits.iter_mut().zip(changed.iter()) {
                *w |= x;
            }
        }
    }

    /// Ends the segment in progress (kept if it accessed anything) and starts the next one.
    fn close(&mut self) {
        if !self.snapshots.is_empty() {
            self.compare_snapshots();
        }
        self.memo = [NO_MEMO; MEMO];
        self.slots.clear();
        let bits = std::mem::take(&mut self.bits);
        if let Some(c) = CHECKER.get()
            && !bits.is_empty()
        {
            *c.open.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            c.ended.notify_all();
            let accesses = bits
                .into_iter()
                .map(|((page, site, write), bits)| Access {
                    page,
                    site,
                    write,
                    bytes: Bytes::Bits(bits),
                })
                .collect();
            let seen = self
                .clock
                .iter()
                .enumerate()
                .filter(|&(t, &v)| v > 0 && t != self.thread as usize)
                .map(|(t, &v)| (t as u32, v))
                .collect();
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
    fn acquire(&mut self, slot: Option<(u32, Vec<u32>)>) {
        let Some((epoch, clock)) = slot else { return };
        self.catch_up(epoch);
        if epoch == self.epoch {
            self.join(&clock);
        }
    }

    fn join(&mut self, other: &[u32]) {
        for (a, &b) in self.clock.iter_mut().zip(other) {
            *a = (*a).max(b);
        }
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
        self.clock.iter_mut().for_each(|v| *v = 0);
        self.clock[self.thread as usize] = 1;
    }
}

/// This thread acquired `lock`: it has seen what the lock's earlier holders did.
pub(crate) fn lock_acquired(lock: u16) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.resnapshot();
        r.catch_up(c.epoch.load(Ordering::Acquire));
        let slot = c.read_slot(usize::from(lock));
        r.close();
        r.acquire(slot);
    });
}

/// This thread is about to release `lock`: its clock goes into the lock's slot (written under
/// the lock, so the next holder reads it coherently).
pub(crate) fn unlocking(lock: u16) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        // The clock of the segment that ends here: what follows the release is not covered.
        c.write_slot(usize::from(lock), r.epoch, &r.clock);
        r.close();
    });
}

/// This thread is about to set `cv`: its clock joins this node's slot of it.
pub(crate) fn setting_cv(cv: u16) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        {
            let _g = c.cv_slot.lock().unwrap_or_else(|e| e.into_inner());
            let k = c.cv_slot(cv, c.node);
            match c.read_slot(k) {
                // Set by another thread of the node past a barrier this one is not: what this
                // one did is in an earlier epoch, ordered before the waiter's anyway.
                Some((e, _)) if e > r.epoch => {}
                Some((e, mut slot)) if e == r.epoch => {
                    for (a, &b) in slot.iter_mut().zip(&r.clock) {
                        *a = (*a).max(b);
                    }
                    c.write_slot(k, r.epoch, &slot);
                }
                _ => c.write_slot(k, r.epoch, &r.clock),
            }
        }
        // After the clock went out: the segment that ends here is the one the setting covers.
        r.close();
    });
}

/// This thread's wait on `cv` ended: it has seen what the setters did before setting it.
pub(crate) fn cv_waited(cv: u16) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.resnapshot();
        r.catch_up(c.epoch.load(Ordering::Acquire));
        r.close();
        let slots: Vec<_> = (0..c.nodes)
            .filter_map(|node| c.read_slot(c.cv_slot(cv, node)))
            .collect();
        if let Some(newest) = slots.iter().map(|(e, _)| *e).max() {
            r.catch_up(newest);
        }
        for slot in slots {
            r.acquire(Some(slot));
        }
    });
}

/// A synchronisation of a node's threads that the DSM does not make (see [`local_release`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Local {
    /// A synchronisation object of the process (a pthread mutex, barrier or semaphore), by
    /// address.
    Object(usize),
    /// A thread that ended, by its `pthread_t`.
    Thread(libc::pthread_t),
    /// An OpenMP parallel region's team, which ended (the region's address while it runs).
    Team(usize),
}

/// This thread is about to release `what` (unlock a mutex, post a semaphore, enter a pthread
/// barrier, end as a thread): its clock joins the one `what` carries (for the thread that
/// acquires it next, on this node), and its segment ends.
pub fn local_release(what: Local) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        {
            let mut local = c.local.lock().unwrap_or_else(|e| e.into_inner());
            match local.get_mut(&what) {
                Some((e, clock)) if *e == r.epoch => {
                    for (a, &b) in clock.iter_mut().zip(&r.clock) {
                        *a = (*a).max(b);
                    }
                }
                // Released past a barrier this thread is not past yet: what it did is ordered
                // before the acquirer's anyway.
                Some((e, _)) if *e > r.epoch => {}
                _ => {
                    local.insert(what, (r.epoch, r.clock.clone()));
                }
            }
        }
        r.close();
    });
}

/// This thread acquired `what` (locked a mutex, waited on a semaphore, left a pthread barrier,
/// joined a thread): it has seen what its releasers did before releasing it. A thread that
/// ended is forgotten once joined.
pub fn local_acquire(what: Local) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        r.close();
        let slot = {
            let mut local = c.local.lock().unwrap_or_else(|e| e.into_inner());
            match what {
                Local::Thread(_) | Local::Team(_) => local.remove(&what),
                Local::Object(_) => local.get(&what).cloned(),
            }
        };
        r.acquire(slot);
    });
}

/// A thread creating another: its segment ends, and its clock is what the new thread starts
/// from ([`thread_started`]). `None` when not checking.
pub fn thread_spawning() -> Option<(u32, Vec<u32>)> {
    if !on() {
        return None;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        let clock = (r.epoch, r.clock.clone());
        r.close();
        clock
    })
}

/// A thread's first step, in it: it has seen what its creator did before creating it.
pub fn thread_started(creator: (u32, Vec<u32>)) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        r.acquire(Some(creator));
    });
}

/// This thread is about to enter a barrier (or a synchronisation that orders nothing, such as
/// a letter: its segment ends, nothing is joined).
pub(crate) fn segment_ends() {
    if !on() {
        return;
    }
    // A DSM call never runs in a signal handler: a count left up was a handler left by
    // `longjmp`.
    HANDLER.with(|h| h.depth.set(0));
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        r.close();
    });
}

/// The node's barrier is done (called once per barrier on each node, by the thread that did
/// it).
pub(crate) fn barrier_done() {
    if let Some(c) = CHECKER.get() {
        c.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

/// This thread leaves a barrier it took part in.
pub(crate) fn barrier_left() {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.resnapshot();
        r.catch_up(c.epoch.load(Ordering::Acquire));
    });
}

/// An allocation of `bytes` at `addr`, of `element`-byte elements, made at `from`.
pub(crate) fn allocated(addr: usize, bytes: usize, element: usize, from: From) {
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
/// records go to node 0, which takes every other node's.
pub(crate) fn gather_records(dsm: &crate::Dsm) {
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
    let lost = HANDLER_LOST.load(Ordering::Relaxed);
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
        crate::door::end::fatal(&format!("check_races: {what} of node {}: {e}", c.node))
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
        dsm.send_race_records(0, &summary::encode_touches(&touches));
        let candidates = summary::decode_candidates(&dsm.receive_race_records(0))
            .unwrap_or_else(|e| own("the candidates node 0 sent", e));
        keep_candidates(&mut log, &candidates);
        dsm.send_race_records(0, &records::encode(&log));
        return;
    }
    let mut all = vec![touches];
    for n in 1..c.nodes {
        match summary::decode_touches(&dsm.receive_race_records(usize::from(n))) {
            Ok(t) => all.push(t),
            Err(e) => crate::door::end::fatal(&format!("check_races: node {n}'s touches: {e}")),
        }
    }
    let candidates = summary::candidates(&all);
    drop(all);
    let sent = summary::encode_candidates(&candidates);
    for n in 1..c.nodes {
        dsm.send_race_records(usize::from(n), &sent);
    }
    keep_candidates(&mut log, &candidates);
    // Node 0's own records unpacked as the others' are.
    let own = records::decode(&records::encode(&log))
        .unwrap_or_else(|e| crate::door::end::fatal(&format!("check_races: own records: {e}")));
    let mut logs = vec![own];
    for n in 1..c.nodes {
        let bytes = dsm.receive_race_records(usize::from(n));
        match records::decode(&bytes) {
            Ok(l) if l.node == n => logs.push(l),
            Ok(l) => crate::door::end::fatal(&format!(
                "check_races: node {n} sent the records of node {}",
                l.node
            )),
            Err(e) => crate::door::end::fatal(&format!("check_races: node {n}'s records: {e}")),
        }
    }
    *c.gathered.lock().unwrap_or_else(|e| e.into_inner()) = logs;
}

/// At node 0, once every node has left: reads every node's records, reports the races, and
/// makes the process end with [`EXIT_RACES`] if there were any.
pub(crate) fn report_at_node0() {
    if !on() {
        return;
    }
    let Some(c) = CHECKER.get() else { return };
    if c.node != 0 {
        return;
    }
    let logs = std::mem::take(&mut *c.gathered.lock().unwrap_or_else(|e| e.into_inner()));
    let races = report::find(&logs);
    let text = report::render(&logs, &races);
    eprint!("{text}");
    if !races.is_empty() {
        crate::sys::exit_status_at_end(EXIT_RACES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The protocol's writes to a page under a slice are not the slice's thread's; its own
    /// writes before or after them are, and so are its other changes; a write whose bytes are
    /// not kept claims nothing.
    #[test]
    fn a_slice_claims_its_threads_bytes_not_the_protocols() {
        let came = |lo: usize, before: &[u8], after: &[u8]| CameIn {
            page: 0,
            lo,
            hi: lo + after.len(),
            images: Some((before.to_vec(), after.to_vec())),
        };
        let claimed = |then: &[u8], now: &[u8], came_in: &[&CameIn]| {
            runs_of(&this_threads_changes(then, now, 0, came_in, 1))
        };
        // Another node's diff wrote byte 1 after the snapshot; the thread wrote byte 3.
        let w = came(1, &[0], &[9]);
        assert_eq!(claimed(&[0, 0, 0, 0], &[0, 9, 0, 7], &[&w]), vec![(3, 4)]);
        // The snapshot was taken while the diff was copying: it holds the diff's byte.
        assert_eq!(claimed(&[0, 9, 0, 0], &[0, 9, 0, 0], &[&w]), vec![]);
        // The thread wrote byte 1 before the diff came (the diff found 5 there) ...
        let w5 = came(1, &[5], &[9]);
        assert_eq!(claimed(&[0, 0, 0, 0], &[0, 9, 0, 0], &[&w5]), vec![(1, 2)]);
        // ... or after it (byte 1 is now neither the diff's nor the snapshot's).
        assert_eq!(claimed(&[0, 0, 0, 0], &[0, 4, 0, 0], &[&w]), vec![(1, 2)]);
        // Two diffs on byte 1: the first found the snapshot's byte, the last left 8.
        let w8 = came(1, &[9], &[8]);
        assert_eq!(claimed(&[0, 0, 0, 0], &[0, 8, 0, 0], &[&w, &w8]), vec![]);
        // A write whose bytes are no longer kept: its bytes are not claimed, others are.
        let lost = CameIn {
            page: 0,
            lo: 0,
            hi: 2,
            images: None,
        };
        assert_eq!(
            claimed(&[0, 0, 0, 0], &[1, 1, 1, 0], &[&lost]),
            vec![(2, 3)]
        );
        // Elements: a claimed byte claims its element.
        assert_eq!(
            runs_of(&this_threads_changes(
                &[0; 8],
                &[0, 0, 0, 7, 0, 0, 0, 0],
                0,
                &[],
                4
            )),
            vec![(0, 4)]
        );
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
