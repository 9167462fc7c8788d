//! The data race checker (`check_races = on`, `dsmrun --check-races`).
//!
//! Every thread records, between two of its synchronisations (a *segment*), which bytes of
//! which pages it read and wrote, and from where (a Rust accessor's caller, or the return
//! address of a C program's `-fsanitize=thread` hook). Segments are ordered by vector clocks:
//! a lock's clock travels in a hidden slot of shared memory written by its holder before the
//! release (so the lock itself makes it coherent), a condition variable's in one slot per node,
//! and a barrier orders everything before it before everything after it (an epoch: clocks start
//! again). Letters (`jia_send`) and `jia_wait` order nothing: they carry no coherence. At
//! `jia_exit` every node writes its segments to `race_dir`; node 0, once every node has left,
//! reads them all, reports each pair of accesses to the same bytes from different threads,
//! one of them a write, that no synchronisation orders ([`report`]), and the process ends with
//! status 66 if there was any.
//!
//! Off (the default), every hook is one relaxed load of [`ON`] and a branch.

pub(crate) mod report;

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::Location;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::array::SharedArray;

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
    /// The hidden clock slots: one per lock, then one per condition variable and node.
    slots: SharedArray<u32>,
    /// Serialises this node's threads' updates of a condition variable's slot.
    cv_slot: Mutex<()>,
    log: Mutex<Log>,
    site_ids: Mutex<HashMap<Site, u32>>,
    dir: PathBuf,
}

/// What one node recorded (its file in `race_dir`).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Log {
    pub node: u16,
    pub sites: Vec<Site>,
    pub allocs: Vec<Alloc>,
    pub segments: Vec<Segment>,
}

/// Where an access or allocation was made.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) enum Site {
    /// A source line (a Rust caller).
    Line { file: String, line: u32 },
    /// A return address in a C program: `offset` into the object file `module`.
    Code { module: String, offset: u64 },
}

/// An allocation: `bytes` at `offset` into the region, of `element`-byte elements.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Alloc {
    pub offset: u64,
    pub bytes: u64,
    pub element: u32,
    pub site: u32,
}

/// A thread's accesses between two of its synchronisations.
#[derive(Debug, Serialize, Deserialize)]
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

/// The bytes of one page a segment read or wrote from one site: `[lo, hi)` runs.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Access {
    pub page: u32,
    pub site: u32,
    pub write: bool,
    pub runs: Vec<(u16, u16)>,
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

/// One thread's segment in progress.
struct Recorder {
    thread: u32,
    epoch: u32,
    /// Dense: node * VC_THREADS + thread number.
    clock: Vec<u32>,
    accesses: HashMap<(u32, u32, bool), Vec<(u16, u16)>>,
    sites: HashMap<usize, u32>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.close();
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

/// Starts checking: every node calls it at init, in the same order as its allocations (the
/// clock slots are allocated here).
pub(crate) fn start(dsm: &crate::Dsm, region: (usize, usize), dir: PathBuf) {
    let (node, nodes) = (dsm.id() as u16, dsm.nodes() as u16);
    let slots_len = (usize::from(dsm_core::MAX_LOCKS)
        + usize::from(dsm_core::MAX_CVS) * usize::from(nodes))
        * slot_words(nodes);
    let slots = dsm
        .alloc::<u32>(
            slots_len,
            dsm_core::AllocPolicy::OnNode(dsm_core::NodeId(0)),
        )
        .unwrap_or_else(|e| {
            crate::door::end::fatal(&format!("check_races: no room for its clocks: {e}"))
        });
    let checker = Checker {
        node,
        nodes,
        epoch: AtomicU32::new(0),
        threads: AtomicUsize::new(0),
        slots,
        cv_slot: Mutex::new(()),
        log: Mutex::new(Log {
            node,
            ..Log::default()
        }),
        site_ids: Mutex::new(HashMap::new()),
        dir,
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

/// The directory a job's records go to: `race_dir`, else one named by the job's cookie in the
/// temporary directory.
pub(crate) fn dir_for(race_dir: Option<&std::path::Path>, cookie: u64) -> PathBuf {
    let base = race_dir.map_or_else(std::env::temp_dir, std::path::Path::to_path_buf);
    base.join(format!("dsm-races-{cookie:016x}"))
}

/// A read or write of `len` bytes at `addr` by this thread (anywhere: only the shared region's
/// are recorded).
#[inline]
pub fn access(addr: usize, len: usize, write: bool, from: From) {
    if !on() {
        return;
    }
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    if off >= LEN.load(Ordering::Relaxed) || len == 0 {
        return;
    }
    record(off, len, write, from);
}

#[cold]
fn record(off: usize, len: usize, write: bool, from: From) {
    with_recorder(|r, c| {
        // A barrier orders every thread of the node, also one that did not take part in it
        // (a thread joined by one that did, like the workers of a pthreads program whose main
        // thread reads their results after joining them).
        r.catch_up(c.epoch.load(Ordering::Acquire));
        let site = match r.sites.get(&from.key()) {
            Some(&s) => s,
            None => {
                let s = c.intern(site_of(from));
                r.sites.insert(from.key(), s);
                s
            }
        };
        let end = off + len;
        let mut at = off;
        while at < end {
            let page = at / PAGE;
            let lo = at % PAGE;
            let hi = (end - page * PAGE).min(PAGE);
            let runs = r.accesses.entry((page as u32, site, write)).or_default();
            match runs.last_mut() {
                Some(last) if lo as u16 <= last.1 && hi as u16 >= last.0 => {
                    last.0 = last.0.min(lo as u16);
                    last.1 = last.1.max(hi as u16);
                }
                _ => runs.push((lo as u16, hi as u16)),
            }
            at = page * PAGE + hi;
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
fn with_recorder<R>(f: impl FnOnce(&mut Recorder, &Checker) -> R) -> Option<R> {
    let c = CHECKER.get()?;
    RECORDER
        .try_with(|cell| {
            let mut slot = cell.borrow_mut();
            let r = slot.get_or_insert_with(|| c.new_recorder());
            Some(f(r, c))
        })
        .ok()
        .flatten()
}

impl Checker {
    fn new_recorder(&self) -> Recorder {
        let n = self.threads.fetch_add(1, Ordering::Relaxed);
        if n >= VC_THREADS {
            crate::door::end::fatal(&format!(
                "check_races: more than {VC_THREADS} threads of node {} used shared memory (the \
                 checker's clocks have room for {VC_THREADS})",
                self.node
            ));
        }
        let thread = (usize::from(self.node) * VC_THREADS + n) as u32;
        let mut clock = vec![0; usize::from(self.nodes) * VC_THREADS];
        clock[thread as usize] = 1;
        Recorder {
            thread,
            epoch: self.epoch.load(Ordering::Acquire),
            clock,
            accesses: HashMap::new(),
            sites: HashMap::new(),
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
    fn read_slot(&self, k: usize, epoch: u32) -> Vec<u32> {
        let w = slot_words(self.nodes);
        let at = k * w;
        if self.slots.get_unrecorded(at) != epoch + 1 {
            return Vec::new();
        }
        (1..w).map(|i| self.slots.get_unrecorded(at + i)).collect()
    }

    fn write_slot(&self, k: usize, epoch: u32, clock: &[u32]) {
        let at = k * slot_words(self.nodes);
        for (i, &v) in clock.iter().enumerate() {
            self.slots.set_unrecorded(at + 1 + i, v);
        }
        self.slots.set_unrecorded(at, epoch + 1);
    }

    fn cv_slot(&self, cv: u16, node: u16) -> usize {
        usize::from(dsm_core::MAX_LOCKS)
            + usize::from(cv) * usize::from(self.nodes)
            + usize::from(node)
    }
}

impl Recorder {
    /// Ends the segment in progress (kept if it accessed anything) and starts the next one.
    fn close(&mut self) {
        if let Some(c) = CHECKER.get()
            && !self.accesses.is_empty()
        {
            let accesses = std::mem::take(&mut self.accesses)
                .into_iter()
                .map(|((page, site, write), runs)| Access {
                    page,
                    site,
                    write,
                    runs,
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
            c.log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .segments
                .push(segment);
        }
        self.clock[self.thread as usize] += 1;
    }

    fn join(&mut self, other: &[u32]) {
        for (a, &b) in self.clock.iter_mut().zip(other) {
            *a = (*a).max(b);
        }
    }

    /// A barrier passed (by this thread or, for a thread that did not take part, noticed at
    /// its next synchronisation): everything before it is ordered before everything after.
    fn catch_up(&mut self, epoch: u32) {
        if epoch != self.epoch {
            self.close();
            self.epoch = epoch;
            self.clock.iter_mut().for_each(|v| *v = 0);
            self.clock[self.thread as usize] = 1;
        }
    }
}

/// This thread acquired `lock`: it has seen what the lock's earlier holders did.
pub(crate) fn lock_acquired(lock: u16) {
    if !on() {
        return;
    }
    with_recorder(|r, c| {
        r.catch_up(c.epoch.load(Ordering::Acquire));
        let seen = c.read_slot(usize::from(lock), r.epoch);
        r.close();
        r.join(&seen);
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
            let mut slot = c.read_slot(k, r.epoch);
            slot.resize(r.clock.len(), 0);
            for (a, &b) in slot.iter_mut().zip(&r.clock) {
                *a = (*a).max(b);
            }
            c.write_slot(k, r.epoch, &slot);
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
        r.catch_up(c.epoch.load(Ordering::Acquire));
        r.close();
        for node in 0..c.nodes {
            let seen = c.read_slot(c.cv_slot(cv, node), r.epoch);
            r.join(&seen);
        }
    });
}

/// This thread is about to enter a barrier (or a synchronisation that orders nothing, such as
/// a letter: its segment ends, nothing is joined).
pub(crate) fn segment_ends() {
    if !on() {
        return;
    }
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
    with_recorder(|r, c| r.catch_up(c.epoch.load(Ordering::Acquire)));
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

/// At `jia_exit`, before the node leaves: this thread's segment ends and the node's records go
/// to its file.
pub(crate) fn write_records() {
    if !on() {
        return;
    }
    segment_ends();
    let Some(c) = CHECKER.get() else { return };
    let log = std::mem::take(&mut *c.log.lock().unwrap_or_else(|e| e.into_inner()));
    let path = c.dir.join(format!("node-{}.json", c.node));
    // Made as this user's own, never through a planted link (the directory's name is known).
    let written = crate::sys::make_own_dir(&c.dir)
        .and_then(|()| crate::sys::create_own_file(&path))
        .and_then(|f| {
            serde_json::to_writer(
                std::io::BufWriter::new(f),
                &Log {
                    node: c.node,
                    ..log
                },
            )
            .map_err(std::io::Error::other)
        });
    if let Err(e) = written {
        crate::door::end::fatal(&format!(
            "check_races: cannot write {}: {e} (race_dir must be a directory every node can \
             write)",
            path.display()
        ));
    }
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
    let logs = match report::read_logs(&c.dir, c.nodes) {
        Ok(logs) => logs,
        Err(e) => crate::door::end::fatal(&format!("check_races: {e}")),
    };
    let _ = std::fs::remove_dir_all(&c.dir);
    let races = report::find(&logs);
    let text = report::render(&logs, &races);
    eprint!("{text}");
    if !races.is_empty() {
        crate::sys::exit_status_at_end(EXIT_RACES);
    }
}
