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
//! one of those, mounted `huge=advise`: each empty 2 MiB stretch a read-ahead window covers whole
//! is backed with one huge page before the window's runs land ([`Region::prepare`]), through a
//! slot of address space that maps the stretch, marked for huge pages, only while it is backed:
//! writing 512 pages into one huge page costs a fraction of allocating 512 pages one by one
//! (`docs/perf/2026-11-29-huge-pages.md`). Everything else (a page fetched alone, a diff, a
//! home's own pages) gets 4 KiB pages, as in a memfd: a node that caches scattered pages holds no
//! more memory than they need.
//!
//! A page fetched for the first time is also mapped in the application's view before it opens,
//! still without access (see [`Region::prepare`]): otherwise the access that resumes after the
//! fault takes a second, kernel page fault to map it, about 1 us of a 9.4 us minimal remote
//! fault here.

use std::cell::Cell;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dsm_core::{AtomicOp, PAGE_SIZE, PageBuf, PageMemory, PageNum, Prot};

use crate::door::end::fatal;
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
    /// The slot a stretch is mapped into to be backed with a huge page (`None`: the file is a
    /// memfd).
    huge_slot: Option<*mut u8>,
    /// Stretches backed through `huge_slot`, and of them those that took longer than
    /// [`SLOW_STRETCH`] (for the statistics).
    huge_backed: AtomicU64,
    huge_slow: AtomicU64,
    /// Cleared at the first failure of a backing.
    huge_on: AtomicBool,
    /// Slow stretches in a row, and stretches still to leave to 4 KiB pages after two.
    /// `slow_after`: [`SLOW_STRETCH`] (tests change it).
    slow_after: Cell<Duration>,
    slow_in_a_row: Cell<u32>,
    small_for: Cell<u32>,
}

/// The pages of one huge page (2 MiB on x86-64 and most arm64 kernels).
pub(crate) const HUGE_PAGES: usize = 512;

/// A stretch whose huge page took longer than this to back cost more than 4 KiB pages would
/// have (about 1 us a page with `pwrite`, against 0.15 us a page for a huge page the kernel has
/// at hand). On this development VM a huge page the guest had handed back to its host takes
/// 1.5-5 ms (`docs/perf/2026-11-29-huge-pages.md`).
const SLOW_STRETCH: Duration = Duration::from_micros(400);

/// After two slow stretches in a row, this many stretches (256 MiB) are left to 4 KiB pages
/// before huge pages are tried again: memory freed meanwhile (a stream's evictions) comes back
/// cheap.
const SMALL_AFTER_SLOW: u32 = 128;

/// How the region's memory is backed, as `--stats` and the logs name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Backing {
    /// A file of the node's own tmpfs: whole stretches of read-ahead windows get huge pages.
    HugeCapable,
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

/// A relaxed atomic operation on the `width`-byte word at `addr` of the application's view,
/// applied with the CPU's atomics if the word is aligned, in the region, and on a page homed
/// here that holds atomic words (the core applies other nodes' operations to such words with
/// the CPU's atomics too, `PageMemory::atomic_update`): its value before. `None`: the node must
/// apply it.
pub(crate) fn relaxed_at_home(addr: usize, width: u8, op: AtomicOp) -> Option<u64> {
    let &(base, homes) = ATOMIC_HOMES.get()?;
    let off = addr.checked_sub(base)?;
    let homed = homes
        .get(off / PAGE_SIZE)
        .is_some_and(|b| b.load(Ordering::Acquire) == 1);
    if !homed || !(width == 4 || width == 8) || addr % usize::from(width) != 0 {
        return None;
    }
    if op != AtomicOp::Load
        && let Some(c) = ATOMIC_CHANGES.get().and_then(|m| m.get(off / PAGE_SIZE))
    {
        c.fetch_add(1, Ordering::SeqCst);
    }
    // SAFETY: aligned to its width (checked), inside one page of the application's view of the
    // region (its page has a byte in the map), mapped for the process's life; the page is homed
    // here, so readable, and writable or made so by the fault handler's home-write fast path.
    Some(unsafe { sys::atomic_rmw(addr, width, op) })
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
    /// with `huge`, in a file that can take huge pages where the system allows one, with the
    /// view that backs stretches with them.
    pub fn map(app_base: usize, len: usize, huge: bool) -> std::io::Result<(Region, Backing)> {
        let (fd, backing) = if huge && sys::huge_pages_disabled_here() {
            (
                sys::memfd("dsm-shared", len as u64)?,
                Backing::Memfd(Some(
                    "transparent huge pages are off for this process (PR_SET_THP_DISABLE)".into(),
                )),
            )
        } else if huge {
            match sys::hugefile::huge_capable_file(len as u64) {
                Ok(fd) => (fd, Backing::HugeCapable),
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
        let huge_slot = match backing {
            Backing::HugeCapable => Some(sys::reserve_aligned(
                HUGE_PAGES * PAGE_SIZE,
                HUGE_PAGES * PAGE_SIZE,
            )?),
            Backing::Memfd(_) => None,
        };
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
            huge_on: AtomicBool::new(huge_slot.is_some()),
            huge_slot,
            huge_backed: AtomicU64::new(0),
            huge_slow: AtomicU64::new(0),
            slow_after: Cell::new(SLOW_STRETCH),
            slow_in_a_row: Cell::new(0),
            small_for: Cell::new(0),
        };
        Ok((region, backing))
    }

    /// The 2 MiB stretches backed with huge pages so far, and of them the slow ones.
    pub fn huge_backed(&self) -> (u64, u64) {
        (
            self.huge_backed.load(Ordering::Relaxed),
            self.huge_slow.load(Ordering::Relaxed),
        )
    }

    /// Backs each empty 2 MiB stretch that the `count` pages from `first` (a read-ahead window's
    /// run) cover whole with one huge page (zeroed: the runs that fill it are written into it).
    /// A stream's windows end on stretches once they are large (`Prefetch::align_pages`), so
    /// they cover them whole; pages fetched alone or a few at a time never do, and take no more
    /// memory than they need. A stretch that holds a page already is left to 4 KiB pages.
    ///
    /// Where huge pages come slow (a host that takes back the memory its guest frees), two slow
    /// stretches in a row leave the next [`SMALL_AFTER_SLOW`] to 4 KiB pages. Whether a stretch
    /// did get a huge page is not checked: this runs in a fault handler's drive too, where the
    /// node reads no file; 4 KiB pages backed instead cost about what landing in fresh ones does.
    fn back_stretches(&self, first: PageNum, count: usize) {
        let Some(slot) = self.huge_slot else { return };
        if count < HUGE_PAGES || !self.huge_on.load(Ordering::Relaxed) {
            return;
        }
        let start = first.index().next_multiple_of(HUGE_PAGES);
        let end = (first.index() + count) / HUGE_PAGES * HUGE_PAGES;
        let bytes = HUGE_PAGES * PAGE_SIZE;
        for stretch in (start..end).step_by(HUGE_PAGES) {
            let off = (stretch * PAGE_SIZE) as u64;
            if sys::file_holds_data(&self.fd, off, bytes as u64) {
                continue;
            }
            if self.small_for.get() > 0 {
                self.small_for.set(self.small_for.get() - 1);
                continue;
            }
            let t0 = Instant::now();
            if let Err(e) = sys::back_with_huge_page(slot, &self.fd, off, bytes) {
                log::debug!(
                    "backing a stretch with a huge page failed ({e}): 4 KiB pages from now"
                );
                self.huge_on.store(false, Ordering::Relaxed);
                return;
            }
            let took = t0.elapsed();
            self.huge_backed.fetch_add(1, Ordering::Relaxed);
            if took >= self.slow_after.get() {
                self.huge_slow.fetch_add(1, Ordering::Relaxed);
                self.slow_in_a_row.set(self.slow_in_a_row.get() + 1);
                if self.slow_in_a_row.get() >= 2 {
                    self.slow_in_a_row.set(0);
                    self.small_for.set(SMALL_AFTER_SLOW);
                }
            } else {
                self.slow_in_a_row.set(0);
            }
        }
    }

    /// The service view's address of region byte `off` (for registering home pages with an
    /// RDMA device: the mapping lives as long as the process).
    pub fn service_addr(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len, "offset {off} outside the region");
        self.service_base.wrapping_add(off)
    }

    /// Readies `count` pages from `first` for their bytes while a GETP for them is on its way:
    /// backs the stretches they cover whole with huge pages (zeroed once, 2 MiB at a time:
    /// [`Region::back_stretches`]), then maps the first (the page faulted on, when there is one)
    /// in the application's view, still inaccessible, with those of its fault-around window that
    /// are in memory. The others are mapped once their bytes are in ([`PageMemory::write_run`]):
    /// outside backed stretches their memory is allocated then, by the write into the file,
    /// which does not zero whole pages first and needs no entry in the service view (mapping
    /// them now would allocate and zero them first).
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
        // Before the first page is mapped: mapping it backs it, and its stretch with it.
        self.back_stretches(first, count);
        self.map_closed(first, 1);
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
        if offset + usize::from(width) > PAGE_SIZE || offset % usize::from(width) != 0 {
            fatal("an atomic word off its alignment or past its page");
        }
        let addr = self.page_ptr(page) as usize + offset;
        // SAFETY: the word is aligned to its width (checked above) and lies in one page of the
        // service view (`page_ptr` checks the page), mapped read-write for the process's life.
        unsafe { sys::atomic_rmw(addr, width, op) }
    }

    fn atomic_changes_by_threads(&self, page: PageNum) -> u32 {
        ATOMIC_CHANGES
            .get()
            .and_then(|m| m.get(page.index()))
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }

    fn atomics_homed_here(&mut self, page: PageNum) {
        if let Some(b) = ATOMIC_HOMES.get().and_then(|(_, m)| m.get(page.index())) {
            b.store(1, Ordering::Release);
        }
    }

    fn warm(&self, page: PageNum) {
        if (page.index() + 1) * PAGE_SIZE > self.len {
            return;
        }
        let p = self.page_ptr(page);
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
        let src = self.page_ptr(page);
        // SAFETY: src points to PAGE_SIZE bytes of the service mapping (bounds checked); `out` is a
        // distinct Rust buffer. Application threads may store to the same physical page through
        // their view concurrently; those are plain byte copies of shared memory, as in any
        // mmap-based shared memory, and the protocol diffs only after downgrading the page.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), PAGE_SIZE) };
    }

    fn copy(&self, page: PageNum) -> PageBuf {
        // Straight into a new buffer: no zeroing first (a served page is copied at every GETP).
        let src = self.page_ptr(page);
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
        if (first.index() + count) * PAGE_SIZE > self.len {
            fatal(&format!(
                "{count} pages from {first} reach past the shared region of {} bytes",
                self.len
            ));
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
        // Into the memfd, not through the service view: no page-table entry to make, and fresh
        // pages are not zeroed before they are overwritten.
        if let Err(e) = sys::write_file_at(&self.fd, data, off as u64) {
            fatal(&format!(
                "writing {} fetched pages from {first} into the shared memory failed: {e}",
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
        for page in first.index()..first.index() + count as usize {
            crate::door::fastpath::withdraw(page);
        }
        crate::trace::stamp(first.index() as u64, crate::trace::Step::ProtectStart);
        // SAFETY: the range lies in the application view (checked above), into which the runtime
        // holds no reference.
        let r = unsafe { sys::mprotect(addr, len, p) };
        crate::trace::stamp(first.index() as u64, crate::trace::Step::ProtectEnd);
        if let Err(e) = r {
            let why = match (e.raw_os_error(), self.max_map_count) {
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
            };
            fatal(&format!(
                "mprotect of {count} pages at {addr:#x} failed: {e}{why}"
            ));
        }
    }

    fn allow_home_write(&mut self, page: PageNum) {
        crate::door::fastpath::allow_home_write(page.index());
    }

    fn allow_prefetch_open(&mut self, page: PageNum, wake: bool) {
        crate::door::fastpath::allow_prefetch_open(page.index(), wake);
    }

    fn opened_unreported(&self, page: PageNum) -> bool {
        crate::door::fastpath::opened_unreported(page.index())
    }

    fn discard(&mut self, first: PageNum, count: u32) {
        let _ = sys::punch_hole(
            &self.fd,
            (first.index() * PAGE_SIZE) as u64,
            u64::from(count) * PAGE_SIZE as u64,
        );
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

    /// The kernel's count of file huge pages it allocated, or failed to and fell back from.
    fn file_huge_page_attempts() -> u64 {
        std::fs::read_to_string("/proc/vmstat")
            .expect("vmstat")
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(k, _)| *k == "thp_file_alloc" || *k == "thp_file_fallback")
            .map(|(_, v)| v.parse::<u64>().expect("a count"))
            .sum()
    }

    #[test]
    fn a_streams_window_lands_in_huge_pages_and_a_page_alone_does_not() {
        let stretch = HUGE_PAGES * PAGE_SIZE;
        let (mut region, backing) =
            Region::map(0x6200_0000_0000, 8 * stretch, true).expect("region");
        if let Backing::Memfd(why) = backing {
            eprintln!("skipped: no huge-capable file here ({why:?})");
            return;
        }
        // However long the kernel takes here: this test is not about slow huge pages.
        region.slow_after.set(Duration::MAX);
        let before = file_huge_page_attempts();
        let h = HUGE_PAGES as u32;
        // A page alone, and a request smaller than a stretch: 4 KiB pages.
        region.prepare(PageNum(3 * h + 7), 1);
        region.write_run(PageNum(3 * h + 7), &[9u8; PAGE_SIZE]);
        region.prepare(PageNum(5 * h), HUGE_PAGES - 1);
        assert_eq!(region.huge_backed().0, 0, "a small request was backed huge");
        // A window from page 1 over 1,100 pages covers stretch 1 whole, 0 and 2 in part.
        region.prepare(PageNum(1), 1100);
        if !region.huge_on.load(Ordering::Relaxed) {
            eprintln!("skipped in part: backing a stretch failed here");
            return;
        }
        assert_eq!(
            region.huge_backed().0,
            1,
            "the stretch the window covers whole"
        );
        assert!(
            file_huge_page_attempts() > before,
            "the kernel was never asked for a huge page of the file"
        );
        // The next window covers 3 (which holds the page landed alone: left small) and 4.
        region.prepare(PageNum(1101), 2560 - 1101);
        assert_eq!(region.huge_backed().0, 2, "stretch 4 alone");
        let bytes: Vec<u8> = (0..2559 * PAGE_SIZE)
            .map(|i| (i / PAGE_SIZE) as u8)
            .collect();
        region.write_run(PageNum(1), &bytes[..1100 * PAGE_SIZE]);
        region.write_run(PageNum(1101), &bytes[1100 * PAGE_SIZE..]);
        // The bytes open as landed, a page punched out of a huge page reads back zeros, and
        // its neighbours keep theirs.
        region.discard(PageNum(600), 1);
        region.protect(PageNum(0), 2600, Prot::Read);
        let at = |page: usize, byte: usize| {
            // SAFETY: pages 0..2600 of the application view were just opened for reading.
            unsafe {
                std::ptr::read_volatile((region.app_base + page * PAGE_SIZE + byte) as *const u8)
            }
        };
        assert_eq!(at(0, 5), 0, "page 0 was never landed: zeros");
        assert_eq!(at(513, 4095), (512 % 256) as u8);
        assert_eq!(at(599, 0), (598 % 256) as u8);
        assert_eq!(at(600, 17), 0, "the discarded page");
        assert_eq!(at(601, 17), (600 % 256) as u8);
        assert_eq!(at(2100, 1), (2099 % 256) as u8);
        assert_eq!(at(2559, 1), (2558 % 256) as u8);
        assert_eq!(at(2560, 1), 0, "past the windows: zeros");
    }

    #[test]
    fn two_slow_huge_pages_in_a_row_leave_the_next_stretches_to_small_pages() {
        let stretch = HUGE_PAGES * PAGE_SIZE;
        let (region, backing) = Region::map(0x6300_0000_0000, 8 * stretch, true).expect("region");
        if let Backing::Memfd(why) = backing {
            eprintln!("skipped: no huge-capable file here ({why:?})");
            return;
        }
        // Every huge page is slow.
        region.slow_after.set(Duration::ZERO);
        region.prepare(PageNum(0), 4 * HUGE_PAGES);
        if !region.huge_on.load(Ordering::Relaxed) {
            eprintln!("skipped: backing a stretch failed here");
            return;
        }
        assert_eq!(region.huge_backed(), (2, 2), "two slow ones, then none");
        assert_eq!(region.small_for.get(), SMALL_AFTER_SLOW - 2);
        // Fast again: still small pages until the count runs out.
        region.slow_after.set(Duration::MAX);
        region.small_for.set(1);
        region.prepare(PageNum(4 * HUGE_PAGES as u32), 2 * HUGE_PAGES);
        assert_eq!(
            region.huge_backed(),
            (3, 2),
            "one left small, the next backed"
        );
    }
}
