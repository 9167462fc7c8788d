//! The address space as the core sees it: page bytes and the application's protections.
//!
//! Like raft-rs's `Storage`, the bytes live behind a trait: the runtime implements it on its
//! second (service) mapping of the shared memfd and on mprotect of the application's view; the
//! tests and the simulator use [`VecMemory`].
//!
//! Protection changes are synchronous calls rather than queued effects because the protocol's
//! correctness depends on their order: a dirty page is downgraded *before* it is diffed against its
//! twin, so that a store by another application thread either lands before the diff or faults.

use crate::types::{AtomicOp, NodeId, PAGE_SIZE, PageBuf, PageNum, Prot};

/// Page bytes and protections of one node's shared region.
pub trait PageMemory {
    /// Copies the current bytes of `page` into `out`.
    fn read(&self, page: PageNum, out: &mut [u8; PAGE_SIZE]);
    /// The current bytes of `page`, in a new buffer.
    fn copy(&self, page: PageNum) -> PageBuf {
        let mut data = PageBuf::zeroed();
        self.read(page, &mut data.0);
        data
    }
    /// The current bytes of the `out.len() / PAGE_SIZE` consecutive pages from `first`, into
    /// `out` (a whole number of pages): a run served in one grant.
    fn read_run(&self, first: PageNum, out: &mut [u8]) {
        for (i, chunk) in out.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let page = PageNum(first.0 + i as u32);
            self.read(page, chunk.try_into().expect("chunks of a page"));
        }
    }
    /// The current bytes of the `count` consecutive pages from `first`, in a new shared buffer.
    fn copy_run(&self, first: PageNum, count: usize) -> std::sync::Arc<[u8]> {
        let mut data = vec![0; count * PAGE_SIZE];
        self.read_run(first, &mut data);
        data.into()
    }
    /// Whether a home may grant its window runs lent ([`crate::RunData::Lent`]): the transport
    /// then reads their bytes from this memory when it sends them, however long after, and
    /// the memory keeps what it lent sound meanwhile (a lent page given back to the system is
    /// copied for the transport first).
    fn lends_runs(&self) -> bool {
        false
    }
    /// Whether runs this home lends to `to` reach it in place: `to` reads them in this memory
    /// (a node of the same host), so serving it costs this node a grant's header, and a
    /// holder forwarding it a copy would cost more. The home then serves `to` itself.
    fn serves_in_place(&mut self, _to: NodeId) -> bool {
        false
    }
    /// `page`, a valid copy here, is about to be twinned and opened for writing: a memory that
    /// shows it from another node's (in place) makes the bytes its own first, so the twin and
    /// this node's writes start from the same bytes (the other node's may change meanwhile).
    fn make_own(&mut self, _page: PageNum) {}
    /// `pages` (in increasing order), copies held here, were invalidated (closed, their
    /// bytes no longer needed): a memory that shows some from another node's may show its own
    /// again.
    fn invalidated(&mut self, _pages: &[PageNum]) {}
    /// Whether the memory closed `page` since the core last set its protection (a page shown
    /// from another node's memory, made this node's own with the pages around it when one of
    /// them was written): a fault that finds the page open for its access then sets its
    /// protection again, as the page would otherwise fault for ever.
    fn closed_behind(&self, _page: PageNum) -> bool {
        false
    }
    /// The core took the runtime's report that its fault handler opened prefetched `page` for
    /// reading by itself ([`PageMemory::allow_prefetch_open`]): open for reading now, as if
    /// protected so.
    fn opened_by_handler(&mut self, _page: PageNum) {}
    /// Writes `data` at `offset` in `page` (without touching the application's protection).
    fn write(&mut self, page: PageNum, offset: usize, data: &[u8]);
    /// Writes the whole pages of `data` (a grant's run, or part of it) from `first`, before
    /// any of them opens: the runtime writes a run with one system call.
    fn write_run(&mut self, first: PageNum, data: &[u8]) {
        for (i, bytes) in data.chunks_exact(PAGE_SIZE).enumerate() {
            self.write(PageNum(first.0 + i as u32), 0, bytes);
        }
    }
    /// Sets the application's protection of `count` pages from `first`.
    fn protect(&mut self, first: PageNum, count: u32, prot: Prot);
    /// The `count` pages from `first` left this node's cache: their frames may be given back to
    /// the system.
    fn discard(&mut self, _first: PageNum, _count: u32) {}

    /// `page` will likely be read soon (served to a requester): its bytes may be brought into
    /// the CPU's cache meanwhile. A hint: it changes no bytes and no protection.
    fn warm(&self, _page: PageNum) {}

    /// `page` is a home page now read-only only so that writes to it are seen: the runtime may
    /// open it for writing on a write fault by itself, and report the write later through
    /// [`crate::Node::handle_home_write`]. Any later `protect` of the page withdraws this.
    fn allow_home_write(&mut self, _page: PageNum) {}

    /// `page` holds valid prefetched bytes but is closed so its first touch is seen: the runtime
    /// may open it for reading on a read fault by itself, and report that later through
    /// [`crate::Node::handle_prefetch_opened`]. Any later `protect` of the page withdraws this.
    ///
    /// `wake`: the page is the read-ahead's marker (opening it asks for the next window): the
    /// runtime tells the core at once when it opens it, and the other openings at its next pass.
    fn allow_prefetch_open(&mut self, _page: PageNum, _wake: bool) {}

    /// Applies `op` to the `width`-byte word (1, 2, 4 or 8, aligned) at `offset` of home page `page`
    /// as one atomic operation of the CPU, and returns the value before: the node's own threads
    /// may apply theirs to words of the page at the same moment (see
    /// [`PageMemory::atomics_homed_here`]). Not a write the race checker records.
    fn atomic_update(&mut self, page: PageNum, offset: usize, width: u8, op: AtomicOp) -> u64 {
        let mut bytes = [0u8; PAGE_SIZE];
        self.read(page, &mut bytes);
        let w = usize::from(width);
        let mut word = [0u8; 8];
        word[..w].copy_from_slice(&bytes[offset..offset + w]);
        let old = u64::from_le_bytes(word);
        if let Some(new) = op.apply(old, width) {
            self.write(page, offset, &new.to_le_bytes()[..w]);
        }
        old
    }

    /// How many operations other than loads this node's threads applied to words of home page
    /// `page` with the CPU's atomics, where the runtime lets them (see below), wrapping, each
    /// counted before it is applied. (The core counts those it applies itself.)
    fn atomic_changes_by_threads(&self, _page: PageNum) -> u32 {
        0
    }

    /// Home page `page` holds atomic words and keeps its home for the job's life: the runtime
    /// may let this node's threads apply relaxed operations to its words with the CPU's own
    /// atomics, beside those [`PageMemory::atomic_update`] applies for other nodes.
    fn atomics_homed_here(&mut self, _page: PageNum) {}

    /// Whether the runtime opened home page `page` for a write by itself (see
    /// [`PageMemory::allow_home_write`]) and has not reported it yet. Asked after a `protect`
    /// of the page (no opening can follow it), where a write not yet reported matters now.
    fn opened_unreported(&self, _page: PageNum) -> bool {
        false
    }
}

/// A shared region in plain vectors, with the protection of each page recorded: what the
/// simulator uses as a node's memory and MMU.
#[derive(Default)]
pub struct VecMemory {
    pages: Vec<Option<PageBuf>>,
    prot: Vec<Prot>,
    /// Home pages the "runtime" may open for writing by itself (see
    /// [`PageMemory::allow_home_write`]).
    home_write: std::collections::BTreeSet<PageNum>,
    /// Pages so opened, not yet reported to the node.
    pub opened_home_writes: Vec<PageNum>,
    /// Prefetched pages the "runtime" may open for reading by itself.
    prefetch_open: std::collections::BTreeSet<PageNum>,
    /// The pages allowed to open as the read-ahead's marker (`wake`), in order.
    pub read_ahead_marks: Vec<PageNum>,
    /// Pages so opened, not yet reported to the node.
    pub opened_prefetches: Vec<(PageNum, bool)>,
    /// Number of `protect` calls (each one would be one mprotect syscall).
    pub protect_calls: u64,
    /// Pages closed by [`VecMemory::close_behind`] since the node last protected them.
    closed_behind: std::collections::BTreeSet<PageNum>,
    /// Pages hinted with [`PageMemory::warm`], in order.
    pub warmed: std::cell::RefCell<Vec<PageNum>>,
    /// Lend runs ([`PageMemory::lends_runs`]): the simulator reads them when it sends them and
    /// again when it delivers them.
    pub lends: bool,
    /// Every `discard`, in order (a lent run that holds a page discarded after it was sent keeps
    /// the bytes it was sent with, as the runtime's memory keeps a lent page it gives back).
    pub discards: Vec<(PageNum, u32)>,
}

impl VecMemory {
    /// An empty region.
    pub fn new() -> VecMemory {
        VecMemory::default()
    }

    fn grow(&mut self, page: PageNum) {
        if page.index() >= self.pages.len() {
            self.pages.resize_with(page.index() + 1, || None);
            self.prot.resize(page.index() + 1, Prot::None);
        }
    }

    /// The application's protection of `page`.
    pub fn prot(&self, page: PageNum) -> Prot {
        self.prot.get(page.index()).copied().unwrap_or(Prot::None)
    }

    /// Loads a little-endian u64 as the application would, ignoring protection (the caller checks).
    pub fn load_u64(&self, page: PageNum, offset: usize) -> u64 {
        match self.pages.get(page.index()) {
            Some(Some(buf)) => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&buf.0[offset..offset + 8]);
                u64::from_le_bytes(b)
            }
            _ => 0,
        }
    }

    /// A write fault the runtime handles by itself, as the real one does for home pages allowed by
    /// [`PageMemory::allow_home_write`]: opens the page and remembers to report it. Returns
    /// whether it did.
    pub fn open_home_write(&mut self, page: PageNum) -> bool {
        if !self.home_write.remove(&page) {
            return false;
        }
        self.grow(page);
        self.prot[page.index()] = Prot::ReadWrite;
        self.opened_home_writes.push(page);
        true
    }

    /// A read fault the runtime handles by itself on a prefetched page (see
    /// [`PageMemory::allow_prefetch_open`]), opening the allowed pages right after it too (up to
    /// 63), or, if none is, those right before it (a walk down), as the real one does. Returns
    /// whether it did.
    pub fn open_prefetched(&mut self, page: PageNum) -> bool {
        if !self.prefetch_open.remove(&page) {
            return false;
        }
        self.grow(page);
        self.prot[page.index()] = Prot::Read;
        self.opened_prefetches.push((page, true));
        let mut along = 0;
        for k in 1..64 {
            let next = PageNum(page.0 + k);
            if !self.prefetch_open.remove(&next) {
                break;
            }
            self.prot[next.index()] = Prot::Read;
            self.opened_prefetches.push((next, false));
            along += 1;
        }
        if along == 0 {
            for k in 1..64.min(page.0 + 1) {
                let before = PageNum(page.0 - k);
                if !self.prefetch_open.remove(&before) {
                    break;
                }
                self.prot[before.index()] = Prot::Read;
                self.opened_prefetches.push((before, false));
            }
        }
        true
    }

    /// Closes `page` behind the node's back, as the runtime's memory does to a page shown from
    /// another node's when it makes the pages around it its own ([`PageMemory::closed_behind`]).
    pub fn close_behind(&mut self, page: PageNum) {
        self.grow(page);
        self.prot[page.index()] = Prot::None;
        self.closed_behind.insert(page);
    }

    /// Stores a little-endian u64 as the application would, ignoring protection.
    pub fn store_u64(&mut self, page: PageNum, offset: usize, value: u64) {
        self.write(page, offset, &value.to_le_bytes());
    }
}

impl PageMemory for VecMemory {
    fn lends_runs(&self) -> bool {
        self.lends
    }

    fn warm(&self, page: PageNum) {
        self.warmed.borrow_mut().push(page);
    }

    fn read(&self, page: PageNum, out: &mut [u8; PAGE_SIZE]) {
        match self.pages.get(page.index()) {
            Some(Some(buf)) => out.copy_from_slice(&buf.0[..]),
            _ => out.fill(0),
        }
    }

    fn write(&mut self, page: PageNum, offset: usize, data: &[u8]) {
        self.grow(page);
        let buf = self.pages[page.index()].get_or_insert_with(PageBuf::zeroed);
        buf.0[offset..offset + data.len()].copy_from_slice(data);
    }

    fn protect(&mut self, first: PageNum, count: u32, prot: Prot) {
        self.protect_calls += 1;
        if count == 0 {
            return;
        }
        self.grow(PageNum(first.0 + count - 1));
        for p in first.0..first.0 + count {
            self.prot[p as usize] = prot;
            self.closed_behind.remove(&PageNum(p));
            self.home_write.remove(&PageNum(p));
            self.prefetch_open.remove(&PageNum(p));
        }
    }

    fn discard(&mut self, first: PageNum, count: u32) {
        self.discards.push((first, count));
        for p in first.0..first.0.saturating_add(count) {
            if let Some(slot) = self.pages.get_mut(p as usize) {
                *slot = None;
            }
        }
    }

    fn allow_home_write(&mut self, page: PageNum) {
        self.home_write.insert(page);
    }

    fn allow_prefetch_open(&mut self, page: PageNum, wake: bool) {
        if wake {
            self.read_ahead_marks.push(page);
        }
        self.prefetch_open.insert(page);
    }

    fn opened_unreported(&self, page: PageNum) -> bool {
        self.opened_home_writes.contains(&page)
    }

    fn closed_behind(&self, page: PageNum) -> bool {
        self.closed_behind.contains(&page)
    }
}
