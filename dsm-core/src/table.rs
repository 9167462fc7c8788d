//! The page table: one entry per allocated page (its home, what this node holds of it, its twin,
//! its fetch in flight), the bounded cache of remote pages, and the allocation bookkeeping every
//! node keeps alike. A structure of its own with a narrow interface: entries by page, allocation,
//! and the cache's insert, remove and choice of the next page to evict. What to do on a fault, a
//! grant or a write notice is the protocol's business ([`crate::pages`]).

use std::collections::VecDeque;
use std::ops::{Index, IndexMut};

use crate::alloc::{self, AllocError, AllocPolicy};
use crate::error::UsageError;
use crate::types::{Access, NodeId, PAGE_SIZE, PageBuf, PageNum, PageState, Time, WaiterId};

/// What this node holds of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// No valid copy.
    Invalid,
    /// A valid copy arrived by prefetch and has not been touched (the application's view is
    /// still protected, so the first touch is seen and counted).
    Prefetched,
    /// Valid, readable.
    ReadOnly,
    /// Valid, writable, written in the current interval.
    ReadWrite,
}

/// A page request in flight.
#[derive(Debug)]
pub(crate) struct Fetch {
    /// Threads waiting for the page (none for a prefetch), with what they asked for and when.
    pub waiters: Vec<(WaiterId, Access, Time)>,
    /// A write notice arrived after the request left: the grant may predate that write.
    pub stale: bool,
    /// A write notice arrived after the request left, from the node asked. If that node
    /// answers itself, its grant comes after the notice on their ordered channel, and so
    /// after the writes the notice names were applied there (a release's writes are at their
    /// homes before its notices leave its manager): the grant holds them. A holder's copy or
    /// a one-sided read may not: for those this counts as `stale`.
    pub notified_by_asked: bool,
    /// The node asked (the page's home when the request left; homes move at barriers).
    pub asked: NodeId,
    /// The values this node's atomic operations answered while the request was out left in
    /// words of the page (the last for each word), and whether the operation left after the
    /// request: a copy that did not come straight from the home may predate them, and is
    /// given them when it is installed (`on_page_grant`).
    pub atomics: Vec<AtomicValue>,
    /// `Node::sent_msgs` once the request left.
    pub asked_at: u64,
}

/// A value an atomic operation of this node left in a word of a page being fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AtomicValue {
    /// Offset of the word in its page, and its width in bytes.
    pub at: usize,
    pub width: u8,
    /// What the word held once the operation was applied.
    pub value: u64,
    /// The operation left after the request did: the home took the request first.
    pub after_request: bool,
}

/// Where a page's granted bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GrantSource {
    /// The home's GETPGRANT: on the ordered channel from the home, as the operations' answers.
    Home,
    /// A holder's, on the home's behalf.
    Forwarded,
    /// Read one-sided from the home's memory.
    OneSided,
}

impl GrantSource {
    /// A GETPGRANT's source: `forwarded` by a holder, or the home's.
    pub fn of(forwarded: bool) -> GrantSource {
        if forwarded {
            GrantSource::Forwarded
        } else {
            GrantSource::Home
        }
    }
}

/// What a node has yet to send of the page requests it answers, in order (see
/// `Node::serving`).
#[derive(Debug)]
pub(crate) enum Serve {
    /// A run of pages for `to`, copied when its turn comes; `forwarded`: from this node's
    /// copies, on their home's behalf.
    Run {
        to: NodeId,
        first: PageNum,
        count: usize,
        forwarded: bool,
    },
    /// FWD: `holder` sends `to` the pages `first..first + count` from its copies. Queued behind
    /// the holder's own runs, so it reaches the holder after them (messages between two nodes
    /// arrive in order).
    Forward {
        holder: NodeId,
        to: NodeId,
        first: PageNum,
        count: u16,
    },
}

/// At a home: a request it answered itself whose pages were all write-tracked (see
/// `Node::held`). Until one of them changes, the requester's copies are as current as the
/// home's pages, and it may send them to other readers on the home's behalf.
#[derive(Debug)]
pub(crate) struct HeldRun {
    pub node: NodeId,
    pub first: PageNum,
    pub count: u32,
    /// When the home answered: readers arriving within `CoreConfig::forward_within` of it are
    /// forwarded (readers of the same pages at the same moment, like every node reading a
    /// panel after a barrier; a reader arriving later is served as before).
    pub at: Time,
    /// Readers forwarded to it so far.
    pub forwards: u8,
}

impl HeldRun {
    /// Whether the run holds page `p`.
    pub fn holds(&self, p: PageNum) -> bool {
        p.0 >= self.first.0 && u64::from(p.0) < u64::from(self.first.0) + u64::from(self.count)
    }
}

/// One page's entry in the node's page table.
#[derive(Debug)]
pub(crate) struct PageEntry {
    pub home: NodeId,
    /// The page's home moved away from this node: a request for it sent before its sender knew
    /// is answered with the bytes held here (see `Node::on_get_page`).
    pub moved_away: bool,
    /// At the home: some node has fetched a copy, so writes here must be tracked.
    pub served: bool,
    pub frame: Frame,
    /// A thread of this node faulted on this copy (it was not only prefetched): a barrier that
    /// invalidates it fetches it again at once.
    pub touched: bool,
    /// Fetched again at a barrier because it was in use (not part of a stream: its first touch
    /// does not read ahead).
    pub refreshed: bool,
    /// Barriers in a row that found this copy fetched again and not opened since.
    pub unused_refetches: u8,
    /// The read-ahead stream that last asked for this page ahead of a fault
    /// ([`crate::streams::NO_STREAM`]: none): its first touch moves that stream.
    pub stream: u8,
    pub twin: Option<PageBuf>,
    pub fetch: Option<Fetch>,
    pub in_cache: bool,
    /// Which cache insertion is current (older queue entries for this page are stale).
    pub cache_gen: u32,
    /// The barrier epoch in which this copy was last evicted, its low 32 bits (`u32::MAX`:
    /// never); it feeds one statistic, which a wrapped epoch only blurs, and a page's entry
    /// stays small.
    pub evicted_in: u32,
}

impl PageEntry {
    pub fn new(home: NodeId, is_mine: bool) -> PageEntry {
        PageEntry {
            home,
            moved_away: false,
            // A home page nobody else has copied can be written freely: there is no copy to
            // invalidate. It is write-protected (and its writes tracked) from its first serving.
            frame: if is_mine {
                Frame::ReadWrite
            } else {
                Frame::Invalid
            },
            served: false,
            touched: false,
            refreshed: false,
            unused_refetches: 0,
            stream: crate::streams::NO_STREAM,
            twin: None,
            fetch: None,
            in_cache: false,
            cache_gen: 0,
            evicted_in: u32::MAX,
        }
    }

    pub fn state(&self) -> PageState {
        match self.frame {
            Frame::Invalid | Frame::Prefetched => PageState::Invalid,
            Frame::ReadOnly => PageState::ReadOnly,
            Frame::ReadWrite => PageState::ReadWrite,
        }
    }
}

/// Demand-faulted pages kept from eviction at most (and never more than half the cache): what
/// one x86-64 instruction can touch.
const KEPT_FAULTED: usize = 32;

/// The page table and the cache of remote pages.
#[derive(Debug)]
pub(crate) struct PageTable {
    entries: Vec<PageEntry>,
    /// Remote pages cached at most.
    capacity: usize,
    /// Cache insertion order, with the generation of each insertion (stale entries are skipped).
    fifo: VecDeque<(PageNum, u32)>,
    /// Pages currently cached.
    cached: usize,
    /// The pages threads faulted on most recently (not those prefetched with them): kept when
    /// room is made, so that the pages one access needs (an unaligned load across two pages, a
    /// gather) are never evicted to fetch each other, however many pages their read-ahead brings.
    faulted: VecDeque<PageNum>,
    /// `RoundRobin` allocations so far (each takes the next home).
    round_robin: u64,
    /// The first page of every allocation, in order: prefetch stops at the end of the
    /// allocation it starts in.
    alloc_starts: Vec<u32>,
    /// A digest of every allocation, compared at barriers.
    digest: u64,
}

impl PageTable {
    /// An empty table whose cache holds `capacity` remote pages at most.
    pub fn new(capacity: usize) -> PageTable {
        PageTable {
            entries: Vec::new(),
            capacity: capacity.max(1),
            fifo: VecDeque::new(),
            cached: 0,
            faulted: VecDeque::new(),
            round_robin: 0,
            alloc_starts: Vec::new(),
            digest: 0,
        }
    }

    /// Pages allocated.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `page`'s entry, if allocated.
    pub fn get(&self, page: usize) -> Option<&PageEntry> {
        self.entries.get(page)
    }

    /// `page`'s entry, if allocated.
    pub fn get_mut(&mut self, page: usize) -> Option<&mut PageEntry> {
        self.entries.get_mut(page)
    }

    /// The home of `page`, if allocated.
    pub fn home_of(&self, page: PageNum) -> Option<NodeId> {
        self.get(page.index()).map(|e| e.home)
    }

    /// The state of `page` here.
    pub fn state(&self, page: PageNum) -> PageState {
        self.get(page.index())
            .map_or(PageState::Unmapped, PageEntry::state)
    }

    /// Allocation calls made so far.
    pub fn allocations(&self) -> usize {
        self.alloc_starts.len()
    }

    /// Every allocation so far: their digest, count and pages (equal on every node of a
    /// correct program).
    pub fn allocs(&self) -> crate::alloc::Allocs {
        crate::alloc::Allocs {
            digest: self.digest,
            calls: self.alloc_starts.len() as u32,
            pages: self.entries.len() as u32,
        }
    }

    /// Allocates `size_bytes` (rounded up to pages) under `policy` in a region of `region_pages`
    /// for node `me` of `nodes`; returns the first page and the pages homed at `me`.
    pub fn alloc(
        &mut self,
        policy: AllocPolicy,
        size_bytes: u64,
        region_pages: u64,
        me: NodeId,
        nodes: u16,
    ) -> Result<(PageNum, Vec<PageNum>), UsageError> {
        if size_bytes == 0 {
            return Err(AllocError::Empty.into());
        }
        let count = alloc::pages_for(size_bytes);
        let used = self.entries.len() as u64;
        let left = region_pages.saturating_sub(used);
        if count > left {
            return Err(AllocError::OutOfSpace {
                // As asked: rounded up to pages, the largest sizes wrap.
                asked_bytes: size_bytes,
                left_bytes: left * PAGE_SIZE as u64,
            }
            .into());
        }
        let homes = alloc::homes(&policy, count, nodes, self.round_robin)?;
        if policy == AllocPolicy::RoundRobin {
            self.round_robin += 1;
        }
        let first = PageNum(used as u32);
        self.alloc_starts.push(first.0);
        self.digest = alloc::digest(self.digest, first, count, &homes);
        let mut home_pages = Vec::new();
        for (i, home) in homes.into_iter().enumerate() {
            if home == me {
                home_pages.push(PageNum(first.0 + i as u32));
            }
            self.entries.push(PageEntry::new(home, home == me));
        }
        Ok((first, home_pages))
    }

    /// One past the last page of the allocation `page` is in (the table's end for a page past
    /// every allocation).
    pub fn allocation_end(&self, page: PageNum) -> u64 {
        let next = self.alloc_starts.partition_point(|&first| first <= page.0);
        self.alloc_starts
            .get(next)
            .map_or(self.entries.len() as u64, |&first| u64::from(first))
    }

    /// The pages of the allocation `page` is in: its first (0 for a page before every
    /// allocation), and one past its last, as [`PageTable::allocation_end`].
    pub fn allocation_of(&self, page: PageNum) -> std::ops::Range<u64> {
        let next = self.alloc_starts.partition_point(|&first| first <= page.0);
        let start = next.checked_sub(1).map_or(0, |i| self.alloc_starts[i]);
        let end = self
            .alloc_starts
            .get(next)
            .map_or(self.entries.len() as u64, |&first| u64::from(first));
        u64::from(start)..end
    }

    // ----- the cache of remote pages -----

    /// Remote pages cached now.
    pub fn cached(&self) -> usize {
        self.cached
    }

    /// A thread faulted on `page` (not a prefetch): keep it when room is made.
    pub fn note_faulted(&mut self, page: PageNum) {
        let keep = KEPT_FAULTED.min(self.capacity / 2);
        if keep > 0 && !self.faulted.contains(&page) {
            if self.faulted.len() >= keep {
                self.faulted.pop_front();
            }
            self.faulted.push_back(page);
        }
    }

    /// `page` is cached from now on (the newest).
    pub fn cache_insert(&mut self, page: PageNum) {
        let e = &mut self.entries[page.index()];
        e.in_cache = true;
        e.cache_gen = e.cache_gen.wrapping_add(1);
        self.fifo.push_back((page, e.cache_gen));
        self.cached += 1;
        // Stale entries (a page evicted, or cached again) go once they outnumber the live ones:
        // by the cache's capacity instead, a page fetched again and again under a lock grew a
        // node's heap 8 bytes a time, up to 256 MiB with the largest cache.
        if self.fifo.len() > 2 * self.cached + 64 {
            let entries = &self.entries;
            self.fifo
                .retain(|&(p, g)| entries[p.index()].in_cache && entries[p.index()].cache_gen == g);
        }
    }

    /// `page` left the cache.
    pub fn cache_remove(&mut self, page: PageNum) {
        let e = &mut self.entries[page.index()];
        if e.in_cache {
            e.in_cache = false;
            self.cached -= 1;
        }
    }

    /// The next page to evict for `room` more to fit, if they do not: the oldest, passing over
    /// the pages threads faulted on last (they go to the back of the queue: at most half the
    /// cache, so one is always found). The caller evicts it (and calls
    /// [`PageTable::cache_remove`]) before asking again.
    pub fn victim(&mut self, room: usize) -> Option<PageNum> {
        let mut passed = 0;
        while self.cached + room > self.capacity {
            let (page, generation) = self.fifo.pop_front()?;
            let e = &self.entries[page.index()];
            if !(e.in_cache && e.cache_gen == generation) {
                continue;
            }
            if passed < self.fifo.len() && self.faulted.contains(&page) {
                self.fifo.push_back((page, generation));
                passed += 1;
                continue;
            }
            return Some(page);
        }
        None
    }
}

impl Index<usize> for PageTable {
    type Output = PageEntry;

    fn index(&self, page: usize) -> &PageEntry {
        &self.entries[page]
    }
}

impl IndexMut<usize> for PageTable {
    fn index_mut(&mut self, page: usize) -> &mut PageEntry {
        &mut self.entries[page]
    }
}

/// `pages` sorted into runs of consecutive pages: (first, count).
pub(crate) fn runs_of(pages: &[PageNum]) -> Vec<(PageNum, u32)> {
    let mut sorted: Vec<u32> = pages.iter().map(|p| p.0).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<(PageNum, u32)> = Vec::new();
    for p in sorted {
        match runs.last_mut() {
            Some((first, n)) if u64::from(first.0) + u64::from(*n) == u64::from(p) => *n += 1,
            _ => runs.push((PageNum(p), 1)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_deals_homes_and_every_node_computes_the_same_digest() {
        let mut a = PageTable::new(8);
        let mut b = PageTable::new(8);
        let policy = AllocPolicy::Cyclic {
            block_bytes: PAGE_SIZE as u64,
            start: NodeId(0),
        };
        let (first, mine) = a
            .alloc(policy.clone(), 4 * PAGE_SIZE as u64, 100, NodeId(1), 2)
            .unwrap();
        b.alloc(policy.clone(), 4 * PAGE_SIZE as u64, 100, NodeId(0), 2)
            .unwrap();
        assert_eq!((first, mine), (PageNum(0), vec![PageNum(1), PageNum(3)]));
        assert_eq!(a.allocs(), b.allocs());
        assert_eq!(a.home_of(PageNum(2)), Some(NodeId(0)));
        assert_eq!(a.state(PageNum(1)), PageState::ReadWrite);
        assert_eq!(a.state(PageNum(2)), PageState::Invalid);
        assert_eq!(a.state(PageNum(9)), PageState::Unmapped);
        assert!(
            a.alloc(policy, 97 * PAGE_SIZE as u64, 100, NodeId(1), 2)
                .is_err()
        );
        // Rounded up to pages, the largest sizes wrapped: "allocation of 0 bytes".
        let e = a
            .alloc(AllocPolicy::RoundRobin, u64::MAX, 100, NodeId(1), 2)
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("allocation of {} bytes exceeds", u64::MAX)),
            "{e}"
        );
    }

    /// One page dropped and cached again a million times (a lock's acquirer refetching a page
    /// it wrote) in a large cache: the queue of the cache's order stays a few entries long.
    #[test]
    fn a_page_cached_again_and_again_keeps_the_cache_queue_short() {
        let mut t = PageTable::new(1 << 20);
        t.alloc(
            AllocPolicy::OnNode(NodeId(1)),
            8 * PAGE_SIZE as u64,
            100,
            NodeId(0),
            2,
        )
        .unwrap();
        t.cache_insert(PageNum(1));
        for _ in 0..1_000_000 {
            t.cache_remove(PageNum(3));
            t.cache_insert(PageNum(3));
        }
        assert_eq!(t.cached(), 2);
        assert!(t.fifo.len() <= 2 * 2 + 65, "{} entries", t.fifo.len());
    }

    #[test]
    fn the_cache_evicts_the_oldest_but_passes_over_the_pages_just_faulted_on() {
        let mut t = PageTable::new(4);
        t.alloc(
            AllocPolicy::OnNode(NodeId(1)),
            8 * PAGE_SIZE as u64,
            100,
            NodeId(0),
            2,
        )
        .unwrap();
        for p in 0..4 {
            t.cache_insert(PageNum(p));
        }
        t.note_faulted(PageNum(0));
        t.note_faulted(PageNum(1));
        // Full: the oldest not faulted on last goes first.
        let v = t.victim(1);
        assert_eq!(v, Some(PageNum(2)));
        t.cache_remove(PageNum(2));
        assert_eq!(t.victim(1), None, "room for one more");
        t.cache_insert(PageNum(5));
        assert_eq!(t.victim(1), Some(PageNum(3)));
        t.cache_remove(PageNum(3));
        // Room for two (the cache over-full by one): the oldest not faulted on last, until two
        // more fit.
        t.cache_insert(PageNum(6));
        t.cache_insert(PageNum(7));
        assert_eq!(t.victim(2), Some(PageNum(5)));
        t.cache_remove(PageNum(5));
        assert_eq!(t.victim(2), Some(PageNum(6)));
        t.cache_remove(PageNum(6));
        assert_eq!(t.victim(2), Some(PageNum(7)));
        t.cache_remove(PageNum(7));
        assert_eq!(t.victim(2), None, "room for two more");
        assert_eq!(t.cached(), 2, "pages 0 and 1, faulted on last, stay");
    }
}
