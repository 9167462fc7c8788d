//! The shared region: one memfd mapped twice.
//!
//! The application's view sits at the same fixed address on every node (`global_start_addr`) and
//! starts with no access at all; the core opens pages in it page by page (mprotect). The service
//! view is mapped wherever the kernel likes and is always read-write: the service thread installs
//! fetched pages, applies diffs and reads pages to serve through it, without ever opening the
//! application's view early. Both views share the same physical pages, so no copy is made between
//! them.
//!
//! Where the system lets the runtime mount a tmpfs of its own ([`sys::hugefile`]), the file is
//! one of those, mounted `huge=within_size`, and fetched runs written into it land in large
//! folios (16 KiB to 1 MiB): writing a stream into them costs a fraction of allocating its pages
//! 4 KiB at a time (`docs/perf/2026-11-29-large-folios.md`). [`Region::prepare`] keeps each
//! folio inside the pages asked for and under 2 MiB; pages faulted through either view (a home's
//! own, a diff's) stay 4 KiB, as in a memfd: a node that caches scattered pages holds no more
//! memory than they need.
//!
//! A page fetched for the first time is also mapped in the application's view before it opens,
//! still without access (see [`Region::prepare`]): otherwise the access that resumes after the
//! fault takes a second, kernel page fault to map it, about 1 us of a 9.4 us minimal remote
//! fault here.

use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use dsm_core::{AtomicOp, NodeId, PAGE_SIZE, PageBuf, PageMemory, PageNum, Prot};
use dsm_transport::LentBytes;

use crate::door::end::fatal;
use crate::same_host::{InPlaceRun, ReadError, SameHost};
use crate::sys::{self, Protection};

/// The region of one node.
pub(crate) struct Region {
    pub app_base: usize,
    pub len: usize,
    service_base: *mut u8,
    fd: OwnedFd,
    /// `vm.max_map_count` as the region was mapped (for the words on a protection change the
    /// kernel refuses; `None`: unknown).
    max_map_count: Option<u64>,
    /// `/proc/self/mem`, read to map pages in the application's view ahead of their opening;
    /// `None` where it cannot be opened.
    mem: Option<File>,
    /// Reads through `mem` map pages (cleared at the first failure: a kernel that refuses
    /// forced access to inaccessible memory, `proc_mem.force_override=never`).
    premap: AtomicBool,
    /// Writes into the file land in large folios ([`Backing::LargeFolios`]).
    large_folios: bool,
    /// Requests of two pages or more prepared in large folios (for the statistics).
    large_runs: AtomicU64,
    /// Runs lent to the transport ([`Region::lend`]) it may still hold: a discard keeps their
    /// bytes for it first.
    lent: Vec<Weak<LentPages>>,
    /// `lent`'s length at which it is next pruned.
    lent_prune_at: usize,
    /// This memory given to the nodes of this host that ask, and theirs read here
    /// ([`crate::same_host`]; `None`: every page through the transport).
    same_host: Option<SameHost>,
    /// One bit per page: granted in place to a node of this host ([`crate::same_host`]), which
    /// may read it at any time: never punched (empty until the first such grant).
    in_place: PageBits,
    /// `same_host = map`: runs granted in place are shown in the application's view from their
    /// home's memory file, not copied into this node's ([`Region::show_from`]).
    map_in_place: bool,
    /// Per page: 1 + the node whose memory file the application's view shows it from, 0 where
    /// it shows this node's own (empty until the first page so shown).
    shown_from: Vec<u16>,
    /// How many pages are shown from other nodes' memory now.
    shown: usize,
    /// Pages shown so, over the node's life (for the statistics).
    shown_total: u64,
    /// Of them, pages made this node's own with a page of their block about to be written
    /// ([`Region::make_block_own`]).
    made_own: u64,
    /// Runs of consecutive pages shown from one node's memory: each is a mapping of the
    /// kernel's at least, counted against `vm.max_map_count`.
    shown_runs: usize,
    /// Pages the core last opened for reading ([`PageMemory::protect`], or a fault handler's
    /// opening it took: [`PageMemory::opened_by_handler`]), recorded while pages are shown: a
    /// block made own opens them again ([`Region::make_block_own`]).
    opened_read: PageBits,
    /// Pages a block made own closed behind the core's back, not known to be open before
    /// ([`PageMemory::closed_behind`]); cleared when the core sets their protection.
    closed_behind: PageBits,
    /// The last requests not readied because their pages were to be shown (first page, count;
    /// [`NOT_PREPARED_KEPT`] at most): a grant of theirs too short to show is bounded before
    /// it is copied ([`Region::bound_run`]), as `prepare` would have.
    not_prepared: VecDeque<(usize, usize)>,
}

/// Requests not readied that [`Region`] remembers (more are in flight only with as many
/// windows at once).
const NOT_PREPARED_KEPT: usize = 64;

/// The fewest pages a run granted in place must have to be shown from its home's memory
/// (`Region::show_from`); shorter ones are copied: mapping a page costs more than copying it
/// (a remote read fault of one page took 1 us more shown: `docs/perf/2026-11-29-shown-pages.md`),
/// and a run shown takes a mapping of the kernel's.
const MIN_SHOWN_PAGES: usize = 16;

/// Pages shown before the share of them made own decides whether to go on showing.
const MADE_OWN_SAMPLE: u64 = 4096;

/// A shown page about to be written here is made this node's own with every shown page of the
/// aligned block of this many pages around it (2 MiB; [`Region::make_block_own`]): pages made
/// own one at a time among shown ones cost two of the kernel's mappings each, which a program
/// writing one page in two of what it read piled up past `vm.max_map_count`; blocks made own
/// merge with each other as any of the node's own pages do.
const OWN_BLOCK_PAGES: usize = 512;

/// The share of `vm.max_map_count` runs of pages shown from other nodes' memory may take
/// (`Region::show_from`): protection changes split mappings too, and need the rest.
const SHOWN_RUNS_SHARE: u64 = 4;

/// A run of this node's home pages lent to the transport (`RunData::Lent`): read through the
/// service view whenever the transport sends it, until the region gives any of the pages back
/// to the system ([`PageMemory::discard`], a page cached here since its home moved), which
/// first keeps a copy of the run here for the transport. A home page changes only by writes
/// the protocol tracks, so what the transport reads is the grant's bytes or newer ones.
pub(crate) struct LentPages {
    ptr: *const u8,
    first: usize,
    count: usize,
    kept: OnceLock<Box<[u8]>>,
}

// SAFETY: `ptr` points into the service mapping, which lives as long as the process (never
// unmapped); the bytes there are only read, as plain bytes (by the kernel's sendmsg or writev,
// or copied), as `Region::copy_run` reads them while application threads may store to them.
unsafe impl Send for LentPages {}
// SAFETY: as for Send: shared references only read, and `kept` is a OnceLock.
unsafe impl Sync for LentPages {}

impl LentBytes for LentPages {
    fn bytes(&self) -> &[u8] {
        if let Some(kept) = self.kept.get() {
            return kept;
        }
        // SAFETY: `count` pages from `ptr` lie in the service mapping (checked when lent), which
        // is never unmapped; concurrent stores by application threads are plain byte copies of
        // shared memory, as in `Region::read`, and the slice is only read.
        unsafe { std::slice::from_raw_parts(self.ptr, self.count * PAGE_SIZE) }
    }
}

/// One bit per page of a region, allocated at the first page set.
struct PageBits {
    words: Vec<u64>,
    pages: usize,
}

impl PageBits {
    /// No bit set, for a region of `pages` pages (nothing allocated yet).
    fn new(pages: usize) -> PageBits {
        PageBits {
            words: Vec::new(),
            pages,
        }
    }

    fn get(&self, page: usize) -> bool {
        self.words
            .get(page / 64)
            .is_some_and(|w| w & (1 << (page % 64)) != 0)
    }

    /// Sets (`on`) or clears the bits of `pages`.
    fn set(&mut self, pages: std::ops::Range<usize>, on: bool) {
        if self.words.is_empty() {
            if !on {
                return;
            }
            self.words = vec![0; self.pages.div_ceil(64)];
        }
        for p in pages {
            if on {
                self.words[p / 64] |= 1 << (p % 64);
            } else {
                self.words[p / 64] &= !(1 << (p % 64));
            }
        }
    }
}

impl LentPages {
    /// Whether the run holds any of the `count` pages from `first`.
    fn overlaps(&self, first: usize, count: usize) -> bool {
        first < self.first + self.count && self.first < first + count
    }
}

/// Lent runs recorded, beyond twice those alive at the last count, before the region forgets
/// those the transport let go of.
const LENT_PRUNE: usize = 256;

/// The pages of a huge page (2 MiB on x86-64 and most arm64 kernels), the largest folio a
/// file of [`sys::hugefile`] could get.
pub(crate) const HUGE_PAGES: usize = 512;

/// How the region's memory is backed, as `--stats` and the logs name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Backing {
    /// A file of the node's own tmpfs: fetched runs land in large folios.
    LargeFolios,
    /// A memfd, asked for (`huge_pages = off`) or because the tmpfs could not be made (why).
    Memfd(Option<String>),
}

/// The application view's first address, and one byte per page of the region: 1 where the page
/// is homed here and holds atomic words (`PageMemory::atomics_homed_here`: such a page keeps its
/// home for the job's life), so this node's threads apply relaxed atomic operations to its
/// words with the CPU's atomics, no call ([`relaxed_at_home`]).
static ATOMIC_HOMES: OnceLock<(usize, &'static [AtomicU8])> = OnceLock::new();

/// One counter per page of the region: the operations other than loads this node's threads
/// applied to its words with the CPU's atomics ([`relaxed_at_home`]), each counted before it is
/// applied, so the core, having read a word one changed, reads its count too
/// (`PageMemory::atomic_changes_by_threads`).
static ATOMIC_CHANGES: OnceLock<&'static [AtomicU32]> = OnceLock::new();

/// The smallest `cache_pages` the words on too many mappings suggest.
const MIN_CACHE_HINT: u64 = 1024;

/// Whether the page of `addr` (of the application's view) is homed here, holds atomic words and
/// keeps its home for the job's life: relaxed operations on its words take the CPU's atomics
/// ([`relaxed_at_home`]).
#[inline]
pub(crate) fn atomics_homed_here(addr: usize) -> bool {
    homed_offset(addr).is_some()
}

/// `addr`'s offset in the region if [`atomics_homed_here`].
#[inline]
fn homed_offset(addr: usize) -> Option<usize> {
    let &(base, homes) = ATOMIC_HOMES.get()?;
    let off = addr.checked_sub(base)?;
    (homes.get(off / PAGE_SIZE)?.load(Ordering::Acquire) == 1).then_some(off)
}

/// A relaxed atomic operation on the `width`-byte word at `addr` of the application's view,
/// applied with the CPU's atomics if the word is aligned, in the region, and on a page homed
/// here that holds atomic words (the core applies other nodes' operations to such words with
/// the CPU's atomics too, `PageMemory::atomic_update`): its value before. `None`: the node must
/// apply it.
pub(crate) fn relaxed_at_home(addr: usize, width: u8, op: AtomicOp) -> Option<u64> {
    let off = homed_offset(addr)?;
    if !dsm_core::atomic_width(width) || addr % usize::from(width) != 0 {
        return None;
    }
    if op != AtomicOp::Load
        && let Some(c) = ATOMIC_CHANGES.get().and_then(|m| m.get(off / PAGE_SIZE))
    {
        c.fetch_add(1, Ordering::SeqCst);
    }
    // SAFETY: a width of 1, 2, 4 or 8, aligned to it (checked), inside one page of the
    // application's view of the region (its page has a byte in the map), mapped for the
    // process's life; the page is homed here, so readable, and writable or made so by the fault
    // handler's home-write fast path.
    Some(unsafe { sys::atomic_rmw(addr, width, op) })
}

/// An atomic load of the `width`-byte word at `addr` of the application's view after the node
/// left the job, where the pages it holds stay readable: the word as this node holds it (a
/// page not held faults, and the fault handler ends the node naming it). `None` for a word
/// that is not aligned to a width of 1, 2, 4 or 8 (the caller refuses it as before).
pub(crate) fn load_after_exit(addr: usize, width: u8) -> Option<u64> {
    if !dsm_core::atomic_width(width) || addr % usize::from(width) != 0 {
        return None;
    }
    // SAFETY: a width of 1, 2, 4 or 8, aligned to it (checked), and in the region (the caller
    // checked), whose application view is mapped for the process's life; a load writes nothing,
    // and a page not held faults into the handler, which ends the node.
    Some(unsafe { sys::atomic_rmw(addr, width, AtomicOp::Load) })
}

/// The pages the kernel maps around a read fault in a file mapping when they are in the page
/// cache (`fault_around_bytes`, 64 KiB by default), from an aligned boundary: one read per such
/// window maps a run of fetched pages.
const FAULT_AROUND_PAGES: usize = 16;

// SAFETY: the region's raw pointers refer to mappings that live as long as the process (they are
// never unmapped); the one Region value is owned by the service thread.
unsafe impl Send for Region {}

impl Region {
    /// The application's view, as the race checker reads it.
    pub fn for_race_checker(&self) -> dsm_races::Region {
        // SAFETY: the application's view stays mapped for the process's life (nothing unmaps
        // it); a page not held here faults and the fault handler brings it in, as for any read
        // of the program's.
        unsafe { dsm_races::Region::new(self.app_base, self.len) }
    }

    /// Reserves `len` bytes at `app_base` (application view, no access) and a service view;
    /// with `huge`, in a file whose written runs land in large folios where the system allows
    /// one.
    pub fn map(app_base: usize, len: usize, huge: bool) -> std::io::Result<(Region, Backing)> {
        let (fd, backing) = if huge && sys::huge_pages_disabled_here() {
            (
                sys::memfd("dsm-shared", len as u64)?,
                Backing::Memfd(Some(
                    "transparent huge pages are off for this process (PR_SET_THP_DISABLE)".into(),
                )),
            )
        } else if huge {
            match sys::hugefile::large_folio_file(len as u64) {
                Ok(fd) => (fd, Backing::LargeFolios),
                Err(e) => (
                    sys::memfd("dsm-shared", len as u64)?,
                    Backing::Memfd(Some(format!("no tmpfs of its own ({e})"))),
                ),
            }
        } else {
            (sys::memfd("dsm-shared", len as u64)?, Backing::Memfd(None))
        };
        let app = sys::map_shared(&fd, len, Some(app_base), Protection::None)?;
        let service_base = sys::map_shared(&fd, len, None, Protection::ReadWrite)?;
        if backing == Backing::LargeFolios {
            // Pages faulted through either view (a home's own, a diff's) stay 4 KiB.
            sys::small_pages_on_fault(app, len)?;
            sys::small_pages_on_fault(service_base, len)?;
        }
        // One state byte per page for the home-write fast path (zeroed, lazily backed).
        let pages = len / PAGE_SIZE;
        crate::door::fastpath::init(sys::atomic_bytes(pages)?);
        // A second job in one process maps a region of its own: the first's map stays.
        let _ = ATOMIC_HOMES.set((app as usize, sys::atomic_bytes(pages)?));
        let _ = ATOMIC_CHANGES.set(sys::atomic_counters(pages)?);
        let mem = File::open("/proc/self/mem")
            .inspect_err(|e| {
                log::debug!("cannot open /proc/self/mem ({e}): first touches of fetched pages take a page-table fault");
            })
            .ok();
        let max_map_count = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let region = Region {
            app_base: app as usize,
            len,
            service_base,
            fd,
            max_map_count,
            premap: AtomicBool::new(mem.is_some()),
            mem,
            large_folios: backing == Backing::LargeFolios,
            large_runs: AtomicU64::new(0),
            lent: Vec::new(),
            lent_prune_at: LENT_PRUNE,
            in_place: PageBits::new(len / PAGE_SIZE),
            same_host: None,
            map_in_place: false,
            shown_from: Vec::new(),
            shown: 0,
            shown_total: 0,
            made_own: 0,
            shown_runs: 0,
            opened_read: PageBits::new(len / PAGE_SIZE),
            closed_behind: PageBits::new(len / PAGE_SIZE),
            not_prepared: VecDeque::new(),
        };
        Ok((region, backing))
    }

    /// Ends the job if the `count` pages from `first` reach past the region (a run served or
    /// lent).
    fn check_run(&self, first: PageNum, count: usize) {
        if (first.index() + count) * PAGE_SIZE > self.len {
            fatal(&format!(
                "{count} pages from {first} reach past the shared region of {} bytes",
                self.len
            ));
        }
    }

    /// The `count` pages from `first`, lent to the transport (see [`LentPages`]).
    pub fn lend(&mut self, first: PageNum, count: usize) -> Arc<LentPages> {
        self.check_run(first, count);
        // Home pages: shown from another node's memory only before their home moved here,
        // which opened them for writing (their bytes this node's own since).
        self.make_block_own(first, count);
        // Runs the transport let go of (acknowledged, written) are forgotten now and then.
        if self.lent.len() >= self.lent_prune_at {
            self.lent.retain(|l| l.strong_count() > 0);
            self.lent_prune_at = 2 * self.lent.len() + LENT_PRUNE;
        }
        let run = Arc::new(LentPages {
            ptr: self.page_ptr(first).cast_const(),
            first: first.index(),
            count,
            kept: OnceLock::new(),
        });
        self.lent.push(Arc::downgrade(&run));
        run
    }

    /// Shares this memory with the nodes of this host that ask, node `me` of `nodes` in the job
    /// with `cookie`, and reads theirs in place ([`crate::same_host`]); where that cannot be set up,
    /// pages go through the transport.
    /// With `map`, runs read in place are mapped, not copied ([`Region::show_from`]).
    pub fn share_with_host(&mut self, me: u16, nodes: u16, cookie: u64, map: bool) {
        self.same_host = crate::same_host::start(me, nodes, cookie, &self.fd, self.len);
        self.map_in_place = map && self.same_host.is_some();
    }

    /// A request of the `count` pages from `first` is not readied ([`Region::prepare`]): its
    /// pages are to be shown from their home's memory ([`Region::shows_from`]).
    pub fn not_prepared(&mut self, first: PageNum, count: usize) {
        if self.not_prepared.capacity() == 0 {
            // Once, wherever it is made (the signal context's contract allows it).
            self.not_prepared = VecDeque::with_capacity(NOT_PREPARED_KEPT);
        }
        if self.not_prepared.len() == NOT_PREPARED_KEPT {
            self.not_prepared.pop_front();
        }
        self.not_prepared.push_back((first.index(), count));
    }

    /// Whether a request not readied ([`Region::not_prepared`]) holds the `count` pages from
    /// `first`.
    fn in_unprepared(&self, first: PageNum, count: usize) -> bool {
        let (a, b) = (first.index(), first.index() + count);
        self.not_prepared.iter().any(|&(f, n)| f <= a && b <= f + n)
    }

    /// Whether a request of `count` pages from `home` is answered in place with the pages
    /// shown from its memory ([`Region::show_from`]): such pages need no memory of this node's
    /// readied for them. (Its first grant may still be short, and copied.)
    pub fn shows_from(&self, home: NodeId, count: usize) -> bool {
        count >= MIN_SHOWN_PAGES
            && self.map_in_place
            && self
                .same_host
                .as_ref()
                .is_some_and(|s| s.reads_from(home.0))
    }

    /// The node whose memory the application's view shows `page` from, if another's.
    fn shown_home(&self, page: usize) -> Option<u16> {
        match self.shown_from.get(page) {
            Some(&h) if h != 0 => Some(h - 1),
            _ => None,
        }
    }

    /// Shows the `count` pages from `first` in the application's view from `home`'s memory
    /// file, mapped there (closed: the core opens them), instead of copying its bytes at
    /// `data` (that memory, mapped here) into this node's: one copy of a page for every node
    /// of its home's host that reads it, read where the home's threads write it. Pages so
    /// shown are read-only in the mapping (the home's file is opened read-only here): before
    /// one is written here, or changed by anything but a grant, its bytes are copied into
    /// this node's memory and the view shows them there again, with the shown pages of its
    /// block ([`Region::make_block_own`]).
    /// Returns false, changing nothing, where the run is not shown so (not another node's
    /// memory, not at the run's own place in it, shorter than [`MIN_SHOWN_PAGES`], or past
    /// the share of the kernel's mappings: then it is copied as any grant).
    fn show_from(&mut self, first: PageNum, data: &[u8]) -> bool {
        let Some(same_host) = &self.same_host else {
            return false;
        };
        let Some(home) = same_host.whose(data.as_ptr()) else {
            return false;
        };
        let Some(m) = same_host.mapping(home) else {
            return false;
        };
        let off = first.index() * PAGE_SIZE;
        if data.as_ptr() as usize != m.base() as usize + off {
            return false;
        }
        let count = data.len() / PAGE_SIZE;
        if self.shown_from.is_empty() {
            self.shown_from = vec![0; self.len / PAGE_SIZE];
        }
        let pages = first.index()..first.index() + count;
        if self.shown_from[pages.clone()]
            .iter()
            .all(|&h| h == home + 1)
        {
            // Shown from there already (a copy invalidated since, asked for again): the view
            // shows the home's bytes as they are now, the grant's or newer.
            self.shown_total += count as u64;
            return true;
        }
        if count < MIN_SHOWN_PAGES {
            return false;
        }
        // A node that makes a quarter or more of what it is shown its own (it writes in its
        // blocks) pays a mapping and a copy of each, where a copy of the run would have done:
        // it is copied from then on (an outside attack's program writing a word of every page
        // it read took 1.35x its time under `memory`, made own one page at a time).
        if self.shown_total >= MADE_OWN_SAMPLE && self.made_own * 4 >= self.shown_total {
            return false;
        }
        // Scattered runs each take a mapping of the kernel's: past a share of its limit, they
        // are copied (as under `same_host = memory`).
        let runs = self.shown_runs + self.run_starts(pages.clone(), Some(home + 1))
            - self.run_starts(pages.clone(), None);
        let limit = self.max_map_count.unwrap_or(65_530) / SHOWN_RUNS_SHARE;
        if runs as u64 > limit {
            return false;
        }
        let newly = self.shown_from[first.index()..first.index() + count]
            .iter()
            .filter(|&&h| h == 0)
            .count();
        let addr = self.app_base + off;
        // SAFETY: the run lies in the application view (the caller checked it against the
        // region), into which the runtime holds no reference; `home`'s file is at least the
        // region's length (checked when it was mapped).
        let mapped = unsafe { sys::map_file_fixed(m.file(), addr, data.len(), off as u64) };
        if mapped.is_err() {
            // The kernel's mapping count, or memory: the bytes are copied instead. Kernels
            // before 6.12 may leave a hole where the old mapping was: this node's file is
            // mapped there again (the core sets the protection next).
            self.map_own(first.index(), count);
            self.closed_here(pages);
            return false;
        }
        self.closed_here(pages.clone());
        self.shown_from[first.index()..first.index() + count].fill(home + 1);
        self.shown_runs = runs;
        self.shown += newly;
        self.shown_total += count as u64;
        // Pages faulted through it stay 4 KiB, as through the view it replaced (and a run
        // given back merges with its neighbours again).
        if self.large_folios {
            let _ = sys::small_pages_on_fault(addr as *mut u8, data.len());
        }
        // This node's bytes of the pages, if any (a copy read before, stale now), are given
        // back, unless granted in place by this node when it was their home (and kept first
        // for a run lent to the transport, homed here before its home moved).
        self.keep_lent(first.index(), count);
        self.punch(first.index(), count);
        true
    }

    /// Shows the pages from `first` of the `count` that are shown from another node's memory
    /// ([`Region::show_from`]) from this node's own memory again, closed; with `keep`, their
    /// bytes copied into it first (a valid copy about to be written or twinned here), else
    /// dropped (a page given back, or about to be overwritten by a grant). The core sets their
    /// protection next.
    fn show_own(&mut self, first: PageNum, count: usize, keep: bool) {
        if self.shown == 0 {
            return;
        }
        let end = (first.index() + count).min(self.shown_from.len());
        let mut p = first.index();
        while p < end {
            let Some(home) = self.shown_home(p) else {
                p += 1;
                continue;
            };
            let run = self.shown_from[p..end]
                .iter()
                .take_while(|&&h| h == home + 1)
                .count();
            let (off, len) = (p * PAGE_SIZE, run * PAGE_SIZE);
            if keep {
                self.made_own += run as u64;
                // A home's mapping, once made, lives as long as the node.
                let Some(m) = self.same_host.as_ref().and_then(|s| s.mapping(home)) else {
                    fatal(&format!(
                        "node {home}'s memory shows pages here but is not mapped"
                    ));
                };
                let from = m.bytes(off, len);
                let to = self.service_base.wrapping_add(off);
                // Through the service view, whose faults take 4 KiB pages (a write into the
                // file's hole, punched when the run was shown, could take a huge page).
                // SAFETY: off..off + len lies in the region (inside `shown_from`'s pages), so
                // in the service view, mapped read-write for the process's life; `from` is the
                // home's mapping, another mapping, read as plain bytes.
                unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), to, len) };
            }
            self.map_own(p, run);
            // Giving back the middle of a run splits it in two.
            self.shown_runs = self.shown_runs + self.run_starts(p..p + run, Some(0))
                - self.run_starts(p..p + run, None);
            self.shown_from[p..p + run].fill(0);
            self.shown -= run;
            p += run;
        }
    }

    /// Makes the `count` pages from `first`, about to be written here, this node's own, with
    /// every page shown from another node's memory in the aligned blocks of
    /// [`OWN_BLOCK_PAGES`] around them ([`Region::show_own`], their bytes kept): a program
    /// that writes scattered pages of what it was shown leaves blocks of the node's own
    /// memory, whose mappings merge, not one page of its own between shown ones for each
    /// page written. The pages asked for stay closed (the core sets their protection next);
    /// the others open again as the core last opened them, or stay closed where it did not
    /// (pages a fault handler opened by itself, unseen here): the core opens those at their
    /// next fault ([`PageMemory::closed_behind`]).
    fn make_block_own(&mut self, first: PageNum, count: usize) {
        if self.shown == 0 {
            return;
        }
        let asked = first.index()..first.index() + count;
        // Nothing to make own: the pages asked for are this node's already (home pages lent,
        // written, patched), whatever their neighbours show.
        if !asked.clone().any(|p| self.shown_home(p).is_some()) {
            return;
        }
        let start = asked.start / OWN_BLOCK_PAGES * OWN_BLOCK_PAGES;
        let end = asked.end.div_ceil(OWN_BLOCK_PAGES) * OWN_BLOCK_PAGES;
        let end = end.min(self.shown_from.len());
        let mut p = start;
        while p < end {
            if self.shown_from[p] == 0 {
                p += 1;
                continue;
            }
            let run = self.shown_from[p..end]
                .iter()
                .take_while(|&&h| h != 0)
                .count();
            self.show_own(PageNum(p as u32), run, true);
            self.reopen(p..p + run, &asked);
            p += run;
        }
    }

    /// The `pages`, just mapped anew (closed), that the core last opened for reading are closed
    /// behind its back: it opens them at their next fault ([`PageMemory::closed_behind`]). (A
    /// grant lands on pages the core closed; this keeps a page it did not close from faulting
    /// for ever.)
    fn closed_here(&mut self, pages: std::ops::Range<usize>) {
        for p in pages {
            if self.opened_read.get(p) {
                self.closed_behind.set(p..p + 1, true);
            }
        }
    }

    /// Opens the `pages` just made own ([`Region::make_block_own`]) that the core last opened
    /// for reading, but for those `asked`; marks the others closed behind the core's back.
    fn reopen(&mut self, pages: std::ops::Range<usize>, asked: &std::ops::Range<usize>) {
        let open = |p: usize| !asked.contains(&p) && self.opened_read.get(p);
        let mut p = pages.start;
        while p < pages.end {
            let opened = open(p);
            let n = (p..pages.end).take_while(|&q| open(q) == opened).count();
            if opened {
                let addr = self.app_base + p * PAGE_SIZE;
                // SAFETY: the run lies in the application view (pages of `shown_from`, the
                // region's), into which the runtime holds no reference; opened for reading as
                // the core last set it.
                if let Err(e) = unsafe { sys::mprotect(addr, n * PAGE_SIZE, Protection::Read) } {
                    fatal(&format!(
                        "opening {n} pages from {} made this node's own again failed: {e}{}",
                        PageNum(p as u32),
                        self.map_count_hint(&e)
                    ));
                }
            } else {
                self.closed_behind.set(p..p + n, true);
            }
            p += n;
        }
    }

    /// A run lent to the transport ([`LentPages`]) that holds any of the `n` pages from `start`
    /// keeps a copy of its bytes, before they are given back.
    fn keep_lent(&mut self, start: usize, n: usize) {
        self.lent.retain(|l| match l.upgrade() {
            Some(run) => {
                if run.overlaps(start, n) {
                    run.kept.get_or_init(|| run.bytes().into());
                }
                true
            }
            None => false,
        });
    }

    /// Gives the memory of the `n` pages from `start` in this node's file back to the system,
    /// but for pages granted in place: they keep their bytes in the file, as a node of this
    /// host may read them yet (the grant may still be on its way). Their memory stays for the
    /// node's life, outside `cache_pages`: at most the pages once homed here.
    fn punch(&self, start: usize, n: usize) {
        let mut p = start;
        while p < start + n {
            let keep = self.granted_in_place(p);
            let run = (p..start + n)
                .take_while(|&q| self.granted_in_place(q) == keep)
                .count();
            if !keep {
                let _ = sys::punch_hole(&self.fd, (p * PAGE_SIZE) as u64, (run * PAGE_SIZE) as u64);
            }
            p += run;
        }
    }

    /// How many runs of shown pages (see `shown_runs`) begin at the pages of `pages` and at
    /// the page after them, as `shown_from` is, or with `pages` set to `fill`.
    fn run_starts(&self, pages: std::ops::Range<usize>, fill: Option<u16>) -> usize {
        let at = |p: usize| match fill {
            Some(f) if pages.contains(&p) => f,
            _ => self.shown_from.get(p).copied().unwrap_or(0),
        };
        (pages.start..=pages.end)
            .filter(|&p| {
                let h = at(p);
                h != 0 && (p == 0 || at(p - 1) != h)
            })
            .count()
    }

    /// Maps the `run` pages from `page` of this node's file in the application's view again,
    /// closed, in place of whatever is there.
    fn map_own(&self, page: usize, run: usize) {
        let (off, len) = (page * PAGE_SIZE, run * PAGE_SIZE);
        let addr = self.app_base + off;
        // SAFETY: the run lies in the application view (the callers' pages are the region's),
        // into which the runtime holds no reference; this node's file is the region's length.
        let mapped = unsafe { sys::map_file_fixed(&self.fd, addr, len, off as u64) };
        if let Err(e) = mapped {
            fatal(&format!(
                "mapping {run} pages from {} of this node's memory back failed: {e}{}",
                PageNum(page as u32),
                self.map_count_hint(&e)
            ));
        }
        if self.large_folios {
            let _ = sys::small_pages_on_fault(addr as *mut u8, len);
        }
    }

    /// What a node out of the kernel's mappings (`ENOMEM` from `mprotect` or `mmap`) should
    /// do, said after the error; empty for another error.
    fn map_count_hint(&self, e: &std::io::Error) -> String {
        match (e.raw_os_error(), self.max_map_count) {
            (Some(libc::ENOMEM), Some(max)) => format!(
                ": each run of pages with a protection of its own is a mapping of the \
                 kernel's, and this node holds scattered pages past its limit of {max} \
                 (vm.max_map_count): pages it caches (a column walk of a matrix homed \
                 elsewhere; bound them: --set cache_pages={}), or pages homed here in small \
                 blocks (a Cyclic or RoundRobin allocation of a page or a few a block: \
                 larger blocks keep them in fewer mappings). Raising the limit helps both \
                 (as root: sysctl -w vm.max_map_count={}); see docs/running-jobs.md",
                (max / 2).saturating_sub(1024).max(MIN_CACHE_HINT),
                (max * 4).max(262_144),
            ),
            _ => String::new(),
        }
    }

    /// The address of `page`'s bytes as this node holds them: the service view, or the memory
    /// of the node it is shown from ([`Region::show_from`]).
    fn bytes_of(&self, page: PageNum) -> *const u8 {
        let ptr = self.page_ptr(page).cast_const();
        if self.shown == 0 {
            return ptr;
        }
        match self.shown_home(page.index()) {
            Some(home) => self
                .same_host
                .as_ref()
                .and_then(|s| s.mapping(home))
                .map_or(ptr, |m| {
                    m.bytes(page.index() * PAGE_SIZE, PAGE_SIZE).as_ptr()
                }),
            None => ptr,
        }
    }

    /// Grants the `count` lent pages from `first` in place to node `to` if it reads this
    /// memory (decided at the first, by whether `to` asked): whether it does. Such pages are
    /// never punched ([`PageMemory::discard`]): `to` reads them when the grant reaches it.
    pub fn grant_in_place(&mut self, to: NodeId, first: PageNum, count: usize) -> bool {
        let Some(same_host) = &mut self.same_host else {
            return false;
        };
        if !same_host.sends_in_place(to.0) {
            return false;
        }
        same_host.sent_pages += count as u64;
        self.lent_in_place(first, count);
        self.make_block_own(first, count);
        true
    }

    /// Before this node's first request to `home`: asks for its memory, if it is of this host
    /// ([`crate::same_host`]).
    pub fn ask_in_place(&mut self, home: NodeId) {
        if let Some(same_host) = &mut self.same_host {
            same_host.ask(home.0);
        }
    }

    /// The `count` pages from `page` in node `from`'s memory, for a grant it sent in place
    /// (`None`: this node reads no memory in place).
    pub fn read_in_place(
        &mut self,
        from: u16,
        page: PageNum,
        count: u16,
    ) -> Option<Result<InPlaceRun, ReadError>> {
        // Copied where not shown: shown runs need no mapping of their own here.
        let copied = !self.map_in_place || usize::from(count) < MIN_SHOWN_PAGES;
        Some(self.same_host.as_mut()?.read(from, page, count, copied))
    }

    /// Why answers of other nodes were refused here, if any were.
    pub fn in_place_refusals(&self) -> Option<String> {
        self.same_host.as_ref()?.last_refusal()
    }

    /// Pages granted in place, and read in place, so far.
    pub fn in_place_counts(&self) -> (u64, u64) {
        self.same_host
            .as_ref()
            .map_or((0, 0), |s| (s.sent_pages, s.read_pages))
    }

    /// Pages shown from their home's memory so far ([`Region::show_from`]).
    pub fn shown_in_place(&self) -> u64 {
        self.shown_total
    }

    /// Records that the `count` pages from `first` were granted in place: never punched.
    fn lent_in_place(&mut self, first: PageNum, count: usize) {
        self.check_run(first, count);
        let pages = first.index()..first.index() + count;
        self.in_place.set(pages, true);
    }

    fn granted_in_place(&self, page: usize) -> bool {
        self.in_place.get(page)
    }

    /// Requests of two pages or more prepared so far to land in large folios.
    pub fn large_runs(&self) -> u64 {
        self.large_runs.load(Ordering::Relaxed)
    }

    /// Keeps the folios that writing the `count` pages from `first` into the file will allocate
    /// inside those pages, and below 2 MiB, where the file takes large folios
    /// ([`Backing::LargeFolios`]).
    ///
    /// Its tmpfs is mounted `huge=within_size`: `pwrite` into a hole gets the largest folio
    /// (up to 2 MiB) whose aligned extent around the page holds no page in memory yet. Folios of
    /// 16 KiB to 1 MiB cost a fraction of 4 KiB pages one by one, and come at once where a huge
    /// page does not (this VM's host takes back freed 2 MiB blocks, and gives them again in
    /// 1.5-5 ms: `docs/perf/2026-11-29-large-folios.md`). A page in memory stops every extent
    /// around it, so the first and last pages are backed first, 4 KiB each (faulted through a
    /// view, which takes 4 KiB pages only: the first by [`Region::prepare`]'s mapping of it,
    /// the others through the service view), and the last page of each 2 MiB stretch
    /// between them: no folio reaches outside the pages asked for, or is a huge page. The core
    /// lands only pages it asked for, and the service prepares every page it asks for.
    fn bound_folios(&self, first: PageNum, count: usize) {
        if !self.large_folios || count == 0 {
            return;
        }
        if count > 1 {
            self.large_runs.fetch_add(1, Ordering::Relaxed);
        }
        // `prepare` backed the first page already, mapping it through the application's view,
        // unless that read is refused here.
        self.bound_run(first, count, self.premap.load(Ordering::Relaxed));
    }

    /// Backs the first page of the `count` from `first` (unless `first_backed`), the last, and
    /// the last of each 2 MiB stretch between them: see [`Region::bound_folios`].
    fn bound_run(&self, first: PageNum, count: usize, first_backed: bool) {
        if !self.large_folios || count == 0 {
            return;
        }
        let (first, last) = (first.index(), first.index() + count - 1);
        if !first_backed {
            self.touch(first);
        }
        if last != first {
            self.touch(last);
        }
        let mut stretch_end = (first / HUGE_PAGES + 1) * HUGE_PAGES - 1;
        while stretch_end < last {
            if stretch_end > first {
                self.touch(stretch_end);
            }
            stretch_end += HUGE_PAGES;
        }
    }

    /// Faults `page` into memory through the service view (4 KiB, zeros where the file had
    /// none; bytes it holds stay).
    fn touch(&self, page: usize) {
        let p = self.service_base.wrapping_add(page * PAGE_SIZE);
        // SAFETY: `page` lies in the region (the callers check the run against its length), so
        // `p` is a byte of the service view, mapped read-write for the process's life; a volatile
        // read of shared memory changes nothing.
        unsafe { std::ptr::read_volatile(p) };
    }

    /// The service view's address of region byte `off` (for registering home pages with an
    /// RDMA device: the mapping lives as long as the process).
    pub fn service_addr(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len, "offset {off} outside the region");
        self.service_base.wrapping_add(off)
    }

    /// Readies `count` pages from `first` for their bytes while a GETP for them is on its way:
    /// maps the first (the page faulted on, when there is one) in the application's view, still
    /// inaccessible, with those of its fault-around window that are in memory, then bounds the
    /// folios the others' writes will allocate ([`Region::bound_folios`]). The others are
    /// mapped once their bytes are in ([`PageMemory::write_run`]): their memory is allocated
    /// then, by the write into the file, which does not zero whole pages first and needs no
    /// entry in the service view (mapping them now would allocate and zero them first, 4 KiB
    /// at a time).
    ///
    /// The mapping is made by reading a byte of each through `/proc/self/mem`, whose forced
    /// access faults a page in even where the protection forbids access, as a debugger's read
    /// does; the page-table entry it leaves has the view's protection (none), and the later
    /// `mprotect` that opens the page turns it readable, so the thread's retried access finds
    /// it mapped instead of faulting again. The kernel maps the neighbours of the page read that
    /// are in memory and as inaccessible (fault-around), so one read per 16 pages is enough.
    /// faultlat's remote read fault, paired runs: see docs/perf/2026-11-23-fault-path.md. Best effort: where the read
    /// fails, the pages are mapped at their first touch, as without it.
    pub fn prepare(&self, first: PageNum, count: usize) {
        if first.index() + count > self.len / PAGE_SIZE {
            return;
        }
        self.map_closed(first, 1);
        self.bound_folios(first, count);
        if crate::trace::on() {
            for page in first.index()..first.index() + count {
                crate::trace::stamp(page as u64, crate::trace::Step::Prepared);
            }
        }
    }

    /// Maps the `count` pages from `first` that are in memory in the application's view, with
    /// its protection, by reading one byte per fault-around window through `/proc/self/mem`: the
    /// last page of the run in the window (the first may be mapped already, by `prepare`, and a
    /// read of it would not fault, so map none of the others).
    fn map_closed(&self, first: PageNum, count: usize) {
        let Some(mem) = &self.mem else { return };
        if !self.premap.load(Ordering::Relaxed) {
            return;
        }
        let mut page = first.index();
        let end = first.index() + count;
        let mut byte = [0u8; 1];
        while page < end {
            let window_end = ((page / FAULT_AROUND_PAGES + 1) * FAULT_AROUND_PAGES).min(end);
            let addr = (self.app_base + (window_end - 1) * PAGE_SIZE) as u64;
            if let Err(e) = mem.read_exact_at(&mut byte, addr) {
                log::debug!(
                    "reading the application's view through /proc/self/mem failed ({e}): first touches of fetched pages take a page-table fault"
                );
                self.premap.store(false, Ordering::Relaxed);
                return;
            }
            page = window_end;
        }
    }

    fn page_ptr(&self, page: PageNum) -> *mut u8 {
        let off = page.index() * PAGE_SIZE;
        if off + PAGE_SIZE > self.len {
            fatal(&format!(
                "{page} is outside the shared region of {} bytes",
                self.len
            ));
        }
        // In bounds: checked just above.
        self.service_base.wrapping_add(off)
    }
}

impl PageMemory for Region {
    fn atomic_update(&mut self, page: PageNum, offset: usize, width: u8, op: AtomicOp) -> u64 {
        if !dsm_core::atomic_width(width)
            || offset + usize::from(width) > PAGE_SIZE
            || offset % usize::from(width) != 0
        {
            fatal(
                "an atomic word of another width than 1, 2, 4 or 8, off its alignment or past its page",
            );
        }
        self.make_block_own(page, 1);
        let addr = self.page_ptr(page) as usize + offset;
        // SAFETY: the word is 1, 2, 4 or 8 bytes, aligned to its width (checked above), and
        // lies in one page of the service view (`page_ptr` checks the page), mapped read-write
        // for the process's life.
        unsafe { sys::atomic_rmw(addr, width, op) }
    }

    fn atomic_changes_by_threads(&self, page: PageNum) -> u32 {
        ATOMIC_CHANGES
            .get()
            .and_then(|m| m.get(page.index()))
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }

    fn atomics_homed_here(&mut self, page: PageNum) {
        self.make_block_own(page, 1);
        if let Some(b) = ATOMIC_HOMES.get().and_then(|(_, m)| m.get(page.index())) {
            b.store(1, Ordering::Release);
        }
    }

    fn warm(&self, page: PageNum) {
        if (page.index() + 1) * PAGE_SIZE > self.len {
            return;
        }
        let p = self.bytes_of(page);
        for line in (0..PAGE_SIZE).step_by(64) {
            // SAFETY: a prefetch only hints the cache, never faults, and the address lies in
            // the service mapping (checked above).
            #[cfg(target_arch = "x86_64")]
            unsafe {
                use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
                _mm_prefetch::<_MM_HINT_T1>(p.add(line).cast::<i8>());
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (p, line);
        }
    }

    fn read(&self, page: PageNum, out: &mut [u8; PAGE_SIZE]) {
        let src = self.bytes_of(page);
        // SAFETY: src points to PAGE_SIZE bytes of the service mapping (bounds checked), or of
        // the memory of the node the page is shown from, mapped read-only; `out` is a
        // distinct Rust buffer. Application threads may store to the same physical page through
        // their view concurrently; those are plain byte copies of shared memory, as in any
        // mmap-based shared memory, and the protocol diffs only after downgrading the page.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), PAGE_SIZE) };
    }

    fn copy(&self, page: PageNum) -> PageBuf {
        // Straight into a new buffer: no zeroing first (a served page is copied at every GETP).
        let src = self.bytes_of(page);
        let mut buf = Box::<[u8; PAGE_SIZE]>::new_uninit();
        // SAFETY: as in `read`; the destination is the new buffer's PAGE_SIZE bytes, all of which
        // the copy initializes before `assume_init`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr().cast::<u8>(), PAGE_SIZE);
            PageBuf(buf.assume_init())
        }
    }

    fn copy_run(&self, first: PageNum, count: usize) -> std::sync::Arc<[u8]> {
        // Straight into the new buffer, no zeroing first (a run is copied at every GETP).
        self.check_run(first, count);
        if self.shown != 0
            && (first.index()..first.index() + count).any(|p| self.shown_home(p).is_some())
        {
            // A holder's copy of pages shown from their home's memory: page by page.
            let mut out = vec![0u8; count * PAGE_SIZE];
            for (i, chunk) in out.chunks_exact_mut(PAGE_SIZE).enumerate() {
                let page: &mut [u8; PAGE_SIZE] = chunk.try_into().expect("a page");
                self.read(PageNum(first.0 + i as u32), page);
            }
            return out.into();
        }
        let src = self.page_ptr(first);
        let mut buf = std::sync::Arc::<[u8]>::new_uninit_slice(count * PAGE_SIZE);
        let dst = std::sync::Arc::get_mut(&mut buf).expect("a new Arc is unique");
        // SAFETY: src..src + count pages lies in the service mapping (checked above); the
        // destination is the new buffer's count * PAGE_SIZE bytes, all of which the copy
        // initializes before `assume_init`. Concurrent stores by application threads are plain
        // byte copies of shared memory, as in `read`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr().cast::<u8>(), count * PAGE_SIZE);
            buf.assume_init()
        }
    }

    fn write(&mut self, page: PageNum, offset: usize, data: &[u8]) {
        if offset + data.len() > PAGE_SIZE {
            fatal("write past the end of a page");
        }
        self.make_block_own(page, 1);
        let dst = self.page_ptr(page).wrapping_add(offset);
        // What comes in from the protocol is no thread's write (the race checker's slices):
        // copied inside the checker's record of it, with the bytes it replaces.
        let _incoming = dsm_races::on().then(|| {
            // SAFETY: dst..dst+len lies inside one page of the service mapping (checked
            // above); read as plain bytes, as `read` does, and only before the copy below.
            let before = unsafe { std::slice::from_raw_parts(dst.cast_const(), data.len()) };
            dsm_races::incoming_write(page.index(), offset, before, data)
        });
        // SAFETY: dst..dst+len lies inside one page of the service mapping (checked above), and
        // `data` is a distinct Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
    }

    fn write_run(&mut self, first: PageNum, data: &[u8]) {
        if dsm_races::on() {
            // Each page through `write`, which records what it replaces.
            for (i, bytes) in data.chunks_exact(PAGE_SIZE).enumerate() {
                self.write(PageNum(first.0 + i as u32), 0, bytes);
            }
            self.map_closed(first, data.len() / PAGE_SIZE);
            return;
        }
        let off = first.index() * PAGE_SIZE;
        if data.len() % PAGE_SIZE != 0 || off + data.len() > self.len {
            fatal(&format!(
                "{} bytes from {first} are not whole pages inside the shared region of {} bytes",
                data.len(),
                self.len
            ));
        }
        let count = data.len() / PAGE_SIZE;
        if self.map_in_place {
            if self.show_from(first, data) {
                // Mapped in the application's view, still closed, before they open.
                self.map_closed(first, count);
                return;
            }
            // A run too short to show of a request whose pages were not readied (it was to be
            // shown): its folios bounded to it (a write into a hole of the file could take a
            // huge page, and this machine's host may take milliseconds to give one), as
            // `prepare` bounds any request's.
            if count < MIN_SHOWN_PAGES && self.in_unprepared(first, count) {
                self.bound_run(first, count, false);
            }
        }
        self.show_own(first, count, false);
        // Into the memfd, not through the service view: no page-table entry to make, and fresh
        // pages are not zeroed before they are overwritten.
        if let Err(e) = sys::write_file_at(&self.fd, data, off as u64) {
            // Bytes that cannot be read (EFAULT) can only be a home's memory read in place.
            let home = self.same_host.as_ref().and_then(|s| s.whose(data.as_ptr()));
            let hint = home.map_or(String::new(), |h| {
                format!(
                    " (they were node {h}'s memory, read in place: did its memory file shrink? \
                     same_host = transport moves pages through the transport)"
                )
            });
            fatal(&format!(
                "writing {} fetched pages from {first} into the shared memory failed: {e}{hint}",
                data.len() / PAGE_SIZE
            ));
        }
        // In memory now: mapped in the application's view, still closed, before they open (a
        // page alone was mapped while it was asked for, by `prepare`).
        if data.len() > PAGE_SIZE {
            self.map_closed(first, data.len() / PAGE_SIZE);
        }
    }

    fn protect(&mut self, first: PageNum, count: u32, prot: Prot) {
        let addr = self.app_base + first.index() * PAGE_SIZE;
        let len = count as usize * PAGE_SIZE;
        if first.index() * PAGE_SIZE + len > self.len {
            fatal("protection change outside the shared region");
        }
        let p = match prot {
            Prot::None => Protection::None,
            Prot::Read => Protection::Read,
            Prot::ReadWrite => Protection::ReadWrite,
        };
        if prot == Prot::ReadWrite {
            // Written here from now: this node's own bytes (see `Region::show_from`).
            self.make_block_own(first, count as usize);
        }
        let pages = first.index()..first.index() + count as usize;
        if !self.shown_from.is_empty() {
            self.opened_read.set(pages.clone(), prot == Prot::Read);
            self.closed_behind.set(pages.clone(), false);
        }
        for page in pages {
            crate::door::fastpath::withdraw(page);
        }
        crate::trace::stamp(first.index() as u64, crate::trace::Step::ProtectStart);
        // SAFETY: the range lies in the application view (checked above), into which the runtime
        // holds no reference.
        let r = unsafe { sys::mprotect(addr, len, p) };
        crate::trace::stamp(first.index() as u64, crate::trace::Step::ProtectEnd);
        if let Err(e) = r {
            let why = self.map_count_hint(&e);
            fatal(&format!(
                "mprotect of {count} pages at {addr:#x} failed: {e}{why}"
            ));
        }
    }

    fn allow_home_write(&mut self, page: PageNum) {
        self.make_block_own(page, 1);
        crate::door::fastpath::allow_home_write(page.index());
    }

    fn make_own(&mut self, page: PageNum) {
        self.make_block_own(page, 1);
    }

    fn closed_behind(&self, page: PageNum) -> bool {
        self.closed_behind.get(page.index())
    }

    fn opened_by_handler(&mut self, page: PageNum) {
        if !self.shown_from.is_empty() {
            let p = page.index();
            self.opened_read.set(p..p + 1, true);
        }
    }

    fn invalidated(&mut self, pages: &[PageNum]) {
        if self.shown == 0 {
            return;
        }
        // Shown pages invalidated show this node's file again: closed pages of two files side
        // by side are two mappings of the kernel's each, which a program that writes scattered
        // pages of what it reads piled up past `vm.max_map_count` (an outside attack: 20,000
        // more a round, the node ended in the fourth); its own closed pages merge.
        let mut i = 0;
        while i < pages.len() {
            let first = pages[i];
            let run = pages[i..]
                .iter()
                .enumerate()
                .take_while(|&(k, p)| p.0 == first.0 + k as u32)
                .count();
            self.show_own(first, run, false);
            i += run;
        }
    }

    fn allow_prefetch_open(&mut self, page: PageNum, wake: bool) {
        crate::door::fastpath::allow_prefetch_open(page.index(), wake);
    }

    fn opened_unreported(&self, page: PageNum) -> bool {
        crate::door::fastpath::opened_unreported(page.index())
    }

    fn lends_runs(&self) -> bool {
        // The race checker sees the bytes a home sends as copies it makes.
        !dsm_races::on()
    }

    fn serves_in_place(&mut self, to: NodeId) -> bool {
        self.same_host
            .as_mut()
            .is_some_and(|s| s.sends_in_place(to.0))
    }

    fn discard(&mut self, first: PageNum, count: u32) {
        // A lent run that holds any of these pages keeps its bytes first (rare: only a page
        // cached here since its home moved away is discarded).
        let (start, n) = (first.index(), count as usize);
        self.keep_lent(start, n);
        self.show_own(first, n, false);
        self.punch(start, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};

    /// Whether the page at `addr` has a page-table entry (`/proc/self/pagemap`, bit 63).
    fn mapped(addr: usize) -> bool {
        let f = File::open("/proc/self/pagemap").expect("pagemap");
        let mut entry = [0u8; 8];
        f.read_exact_at(&mut entry, (addr / PAGE_SIZE * 8) as u64)
            .expect("pagemap entry");
        u64::from_le_bytes(entry) >> 63 == 1
    }

    /// The permissions `/proc/self/maps` gives the mappings overlapping `[start, end)`.
    fn permissions(start: usize, end: usize) -> Vec<String> {
        let maps = File::open("/proc/self/maps").expect("maps");
        BufReader::new(maps)
            .lines()
            .map(|l| l.expect("maps line"))
            .filter_map(|l| {
                let (range, rest) = l.split_once(' ')?;
                let (a, b) = range.split_once('-')?;
                let (a, b) = (
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                );
                (a < end && b > start).then(|| rest[..4].to_string())
            })
            .collect()
    }

    #[test]
    fn a_lent_run_reads_the_pages_as_they_are_until_one_is_given_back_then_keeps_them() {
        let pages = 32;
        let (mut region, _) =
            Region::map(0x6180_0000_0000, pages * PAGE_SIZE, false).expect("region");
        let fill = |region: &mut Region, value: u8| {
            region.write_run(PageNum(4), &vec![value; 8 * PAGE_SIZE]);
        };
        fill(&mut region, 1);
        let run = region.lend(PageNum(4), 8);
        let other = region.lend(PageNum(20), 2);
        assert_eq!(run.bytes(), &vec![1; 8 * PAGE_SIZE][..]);
        // Written since it was lent: the transport reads the newer bytes.
        fill(&mut region, 2);
        assert_eq!(run.bytes(), &vec![2; 8 * PAGE_SIZE][..]);
        // One of its pages given back to the system: the run keeps what it held.
        region.discard(PageNum(11), 3);
        assert_eq!(
            run.bytes(),
            &vec![2; 8 * PAGE_SIZE][..],
            "kept before the discard"
        );
        let mut page = [9u8; PAGE_SIZE];
        region.read(PageNum(11), &mut page);
        assert_eq!(page, [0; PAGE_SIZE], "the page itself was given back");
        fill(&mut region, 3);
        assert_eq!(run.bytes()[0], 2, "a kept run is the transport's own");
        // A run not discarded goes on reading the memory; one the transport let go is forgotten.
        assert!(other.kept.get().is_none());
        drop(run);
        for _ in 0..2 * LENT_PRUNE {
            drop(region.lend(PageNum(0), 1));
        }
        assert!(
            region.lent.len() <= LENT_PRUNE + 2,
            "{} runs recorded",
            region.lent.len()
        );
    }

    #[test]
    fn pages_granted_in_place_keep_their_bytes_when_discarded_and_the_others_are_given_back() {
        let pages = 200;
        let (mut region, _) =
            Region::map(0x6200_0000_0000, pages * PAGE_SIZE, false).expect("region");
        region.write_run(PageNum(60), &vec![5; 80 * PAGE_SIZE]);
        region.discard(PageNum(60), 4);
        // Granted in place: 64..70 and 127..129 (across a word of the map).
        region.lent_in_place(PageNum(64), 6);
        region.lent_in_place(PageNum(127), 2);
        region.discard(PageNum(60), 80);
        let mut page = [9u8; PAGE_SIZE];
        for p in 60..140 {
            region.read(PageNum(p), &mut page);
            let kept = (64..70).contains(&p) || (127..129).contains(&p);
            let want = if kept { 5 } else { 0 };
            assert!(page.iter().all(|&b| b == want), "page {p}: {}", page[0]);
        }
    }

    #[test]
    fn prepared_pages_are_mapped_in_the_application_view_and_stay_closed() {
        let pages = 64;
        let (mut region, _) =
            Region::map(0x6100_0000_0000, pages * PAGE_SIZE, false).expect("region");
        let base = region.app_base;
        let app = |p: usize| base + p * PAGE_SIZE;
        // 3..23 crosses a fault-around boundary (16). Prepared while the request travels: the
        // first page is mapped at once; the run, once its bytes are in.
        region.prepare(PageNum(3), 20);
        if region.premap.load(Ordering::Relaxed) {
            assert!(mapped(app(3)), "the first page is not mapped ahead");
        }
        let bytes: Vec<u8> = (0..20 * PAGE_SIZE).map(|i| (i / PAGE_SIZE) as u8).collect();
        region.write_run(PageNum(3), &bytes);
        assert_eq!(
            permissions(app(0), app(pages)),
            ["---s"],
            "the application's view opened"
        );
        if region.premap.load(Ordering::Relaxed) {
            for p in 3..23 {
                assert!(
                    mapped(app(p)),
                    "page {p} is not mapped in the application view"
                );
            }
            for p in (0..3).chain(23..pages) {
                assert!(!mapped(app(p)), "page {p} was mapped but not prepared");
            }
        } else {
            eprintln!("this kernel refuses forced reads of /proc/self/mem: mapping not checked");
        }
        // The pages open with their bytes: those of the run, and those written later.
        region.protect(PageNum(10), 1, Prot::Read);
        // SAFETY: page 10 of the application view was just opened for reading.
        let got = unsafe { std::ptr::read_volatile((app(10) + 100) as *const u8) };
        assert_eq!(got, 7, "page 10 is the run's eighth page");
        region.write(PageNum(5), 8, &[42, 43]);
        region.protect(PageNum(5), 1, Prot::Read);
        // SAFETY: page 5 of the application view was just opened for reading.
        let got = unsafe { std::ptr::read_volatile((app(5) + 9) as *const u8) };
        assert_eq!(got, 43);
        assert_eq!(permissions(app(5), app(6)), ["r--s"]);
    }

    /// The bytes of memory the region's file holds.
    /// A home and a reader of one host (`same_host = map`): the reader shows a run granted in
    /// place from the home's memory, reads the home's later writes there, makes a page its
    /// own before writing it (the home's later writes no longer seen there), and gives shown
    /// pages back; its memory file holds none of the shown pages' bytes, and the count of
    /// shown runs follows every change.
    #[test]
    fn a_run_granted_in_place_is_shown_from_the_home_until_made_its_own_or_given_back() {
        let pages = 128;
        let (mut home, _) =
            Region::map(0x6280_0000_0000, pages * PAGE_SIZE, false).expect("home's region");
        let (mut reader, _) =
            Region::map(0x6300_0000_0000, pages * PAGE_SIZE, false).expect("reader's region");
        let cookie = sys::random_u64();
        home.share_with_host(0, 2, cookie, true);
        reader.share_with_host(1, 2, cookie, true);
        assert!(home.same_host.is_some() && reader.same_host.is_some());
        home.write_run(PageNum(16), &vec![5u8; 64 * PAGE_SIZE]);
        reader.ask_in_place(NodeId(0));
        assert!(reader.shows_from(NodeId(0), 64));
        assert!(!reader.shows_from(NodeId(0), 1), "a page alone is copied");
        assert!(home.grant_in_place(NodeId(1), PageNum(16), 64));
        let run = reader
            .read_in_place(0, PageNum(16), 64)
            .expect("reads in place")
            .expect("the home's pages");
        let part =
            |from: usize, to: usize| &run.bytes()[(from - 16) * PAGE_SIZE..(to - 16) * PAGE_SIZE];
        reader.write_run(PageNum(32), part(32, 64));
        reader.write_run(PageNum(64), part(64, 80));
        assert_eq!(
            (reader.shown, reader.shown_runs, reader.shown_total),
            (48, 1, 48)
        );
        assert_eq!(file_bytes(&reader), 0, "no byte of the reader's own");
        // Opened by the core but for the last 8 (as prefetched pages a fault handler opens).
        reader.protect(PageNum(32), 40, Prot::Read);
        let at = |page: usize, off: usize| {
            // SAFETY: a byte of the reader's application view, opened for reading above.
            unsafe {
                std::ptr::read_volatile((0x6300_0000_0000 + page * PAGE_SIZE + off) as *const u8)
            }
        };
        assert_eq!(at(40, 9), 5);
        // The home writes: the reader sees it where the page is shown.
        home.write(PageNum(40), 9, &[6]);
        assert_eq!(at(40, 9), 6);
        let mut copy = [0u8; PAGE_SIZE];
        reader.read(PageNum(40), &mut copy);
        assert_eq!(copy[9], 6, "the core reads what the view shows");
        // A page of the reader's own made own (written, lent): its shown neighbours stay shown.
        reader.make_own(PageNum(100));
        assert_eq!((reader.shown, reader.made_own), (48, 0));
        // One of the last 8 opened by a fault handler, its report taken by the core.
        reader.opened_by_handler(PageNum(75));
        // Made its own (before a twin and a write), with every shown page of its block (the
        // whole region here): the home's next writes stay there.
        reader.make_own(PageNum(40));
        reader.protect(PageNum(40), 1, Prot::ReadWrite);
        assert_eq!(
            (reader.shown, reader.shown_runs, reader.made_own),
            (0, 0, 48),
            "the block made own"
        );
        assert_eq!(at(40, 9), 6);
        home.write(PageNum(40), 9, &[7]);
        home.write(PageNum(41), 0, &[8]);
        assert_eq!(at(40, 9), 6, "the reader's own copy");
        assert_eq!(at(41, 0), 5, "its neighbour open again, the reader's own");
        let base = 0x6300_0000_0000;
        assert_eq!(
            permissions(base + 41 * PAGE_SIZE, base + 72 * PAGE_SIZE),
            ["r--s"],
            "opened again as the core left them, in one mapping"
        );
        assert!(!reader.closed_behind(PageNum(41)));
        assert!(!reader.closed_behind(PageNum(40)), "protected since");
        assert!(
            (72..80).all(|p| reader.closed_behind(PageNum(p)) == (p != 75)),
            "pages the core did not open stay closed, for it to open at their next fault"
        );
        assert_eq!(
            permissions(base + 72 * PAGE_SIZE, base + 80 * PAGE_SIZE),
            ["---s", "r--s", "---s"]
        );
        reader.protect(PageNum(72), 8, Prot::Read);
        assert!(!reader.closed_behind(PageNum(72)));
        // Shown again: a grant over pages made own shows the home's bytes again; a grant from
        // elsewhere (copied) over a shown page shows the reader's own bytes.
        reader.write_run(PageNum(64), part(64, 80));
        assert_eq!(
            (reader.shown, reader.shown_runs, reader.shown_total),
            (16, 1, 64)
        );
        assert!(
            (64..80).all(|p| reader.closed_behind(PageNum(p))),
            "pages open for reading, closed by a grant shown over them"
        );
        reader.write_run(PageNum(79), &[9u8; PAGE_SIZE]);
        assert_eq!((reader.shown, reader.shown_runs), (15, 1));
        reader.protect(PageNum(79), 1, Prot::Read);
        assert_eq!(at(79, 0), 9);
        reader.discard(PageNum(32), 48);
        assert_eq!((reader.shown, reader.shown_runs), (0, 0));
        // Copied: a run shorter than MIN_SHOWN_PAGES, and one not at its place in the home's
        // memory.
        reader.write_run(PageNum(16), part(16, 16 + MIN_SHOWN_PAGES - 1));
        reader.write_run(PageNum(96), part(16, 32));
        assert_eq!(reader.shown, 0);
    }

    fn file_bytes(region: &Region) -> u64 {
        use std::os::fd::AsRawFd;
        // SAFETY: fstat fills the zeroed struct for a descriptor the region owns.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fstat(region.fd.as_raw_fd(), &mut st) }, 0);
        st.st_blocks as u64 * 512
    }

    /// The sizes, in pages, of the folios holding the `count` pages from `first` (each mapped
    /// in the service view, which reading them does), in order, from the kernel's page flags;
    /// `None` where they cannot be read (root only).
    fn folios(region: &Region, first: usize, count: usize) -> Option<Vec<usize>> {
        const TAIL: u64 = 1 << 16; // KPF_COMPOUND_TAIL
        let pagemap = File::open("/proc/self/pagemap").ok()?;
        let flags = File::open("/proc/kpageflags").ok()?;
        let mut sizes: Vec<usize> = Vec::new();
        for page in first..first + count {
            region.touch(page);
            let addr = region.service_base as usize + page * PAGE_SIZE;
            let mut entry = [0u8; 8];
            pagemap
                .read_exact_at(&mut entry, (addr / PAGE_SIZE * 8) as u64)
                .ok()?;
            let pfn = u64::from_le_bytes(entry) & ((1 << 55) - 1);
            if pfn == 0 {
                return None; // not root: the kernel hides frame numbers
            }
            let mut f = [0u8; 8];
            flags.read_exact_at(&mut f, pfn * 8).ok()?;
            let f = u64::from_le_bytes(f);
            match sizes.last_mut() {
                Some(n) if f & TAIL != 0 => *n += 1,
                _ if f & TAIL != 0 => panic!("page {page}, the first asked for, is a folio's tail"),
                _ => sizes.push(1),
            }
        }
        Some(sizes)
    }

    #[test]
    fn writes_into_the_file_take_the_memory_of_the_pages_asked_for_in_folios_under_2_mib() {
        let stretch = HUGE_PAGES * PAGE_SIZE;
        let (mut region, backing) =
            Region::map(0x6400_0000_0000, 8 * stretch, true).expect("region");
        if let Backing::Memfd(why) = backing {
            eprintln!("skipped: no tmpfs of its own here ({why:?})");
            return;
        }
        let h = HUGE_PAGES;
        let mut asked = 0;
        let mut land = |region: &mut Region, first: usize, count: usize, run: usize, rev: bool| {
            region.prepare(PageNum(first as u32), count);
            let mut runs: Vec<usize> = (first..first + count).step_by(run).collect();
            if rev {
                runs.reverse();
            }
            for at in runs {
                let n = run.min(first + count - at);
                region.write_run(PageNum(at as u32), &vec![at as u8; n * PAGE_SIZE]);
            }
            asked += count;
            assert_eq!(
                file_bytes(region),
                (asked * PAGE_SIZE) as u64,
                "{count} pages from {first} in runs of {run} took more memory than they hold"
            );
        };
        // A page alone in an empty stretch; a window of UDP's 15-page runs over part of two
        // stretches; one of TCP's 64-page runs, landing last to first, over two whole ones
        // and a little; one of single pages (RDMA's) off every boundary.
        land(&mut region, 3 * h + 7, 1, 1, false);
        land(&mut region, 100, 700, 15, false);
        land(&mut region, 4 * h, 2 * h + 5, 64, true);
        land(&mut region, 7 * h + 3, 200, 1, false);
        // The bytes are where they were written.
        region.protect(PageNum(0), 8 * h as u32, Prot::Read);
        let at = |page: usize| {
            // SAFETY: the region's application view was just opened for reading.
            unsafe {
                std::ptr::read_volatile((region.app_base + page * PAGE_SIZE + 5) as *const u8)
            }
        };
        assert_eq!(at(3 * h + 7), (3 * h + 7) as u8);
        assert_eq!(at(100 + 15 * 3 + 2), (100 + 15 * 3) as u8);
        assert_eq!(at(4 * h + 64 * 9 + 63), (4 * h + 64 * 9) as u8);
        assert_eq!(at(7 * h + 150), (7 * h + 150) as u8);
        assert_eq!(at(99), 0, "never written: zeros");
        match folios(&region, 4 * h, 2 * h + 5) {
            None => eprintln!("folio sizes not checked: /proc/kpageflags is root's"),
            Some(sizes) => {
                assert!(
                    sizes.iter().all(|&n| n < h),
                    "a huge page among the folios: {sizes:?}"
                );
                assert_eq!(sizes.iter().sum::<usize>(), 2 * h + 5);
                // Kernels before 6.14 give tmpfs writes 4 KiB pages or huge ones only.
                if sizes.iter().any(|&n| n > 1) {
                    assert!(
                        sizes.len() < 64,
                        "{} folios for 1,029 pages: {sizes:?}",
                        sizes.len()
                    );
                } else {
                    eprintln!("this kernel gives tmpfs writes no large folios");
                }
            }
        }
    }
}
