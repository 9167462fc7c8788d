//! The page side of the protocol: faults, page fetches (GETP) with prefetch, the bounded cache of
//! remote pages, twins, diffs to the home, and invalidation by write notices.
//!
//! A page here is either homed here (always valid: read-only until written in an interval, then
//! read-write until the next release) or cached from its home (invalid, prefetched, read-only, or
//! read-write with a twin). A write fault on a valid cached page makes a twin; at release the page
//! is downgraded first and diffed against its twin second, so a store racing the release either
//! lands in the diff or faults again.

use crate::types::{Count, Epoch};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::diff;
use crate::error::{JobError, ProtocolError, UsageError};
use crate::memory::PageMemory;
use crate::msg::{Msg, MsgKind, PageDiff, RunData, WriteNotice};
use crate::node::Node;
use crate::node::{MAX_FORWARDS, MAX_HELD_RUNS};
use crate::streams::{Demand, NO_STREAM, Stream};
use crate::table::{Fetch, Frame, GrantSource, HeldRun, PageTable, Serve, runs_of};
use crate::types::{Access, GlobalAddr, NodeId, PAGE_SIZE, PageBuf, PageNum, Prot, Time, WaiterId};
use crate::types::{MAX_DIFF_MSG_BYTES, MAX_EARLY_REQUESTS, MAX_GETP_PAGES};

/// At most this many pages fetched again at a barrier (see `copies_in_use`).
const REFETCH_MAX: usize = 256;

/// The largest stride the read-ahead follows, in pages (16 MiB: a column of a row-major matrix
/// of rows up to that size).
const MAX_STRIDE_PAGES: u32 = 4096;

/// A walk down through memory asks for its window in requests of this many pages, the nearest
/// first ([`Node::send_ahead`]): a fault waits for one such piece at most.
const DOWN_PIECE_PAGES: usize = 64;

/// A full cache evicts this fraction of itself at once (see `make_room`).
const EVICT_BATCH_DIVISOR: usize = 64;

/// Home pages written untracked start being tracked (protected) at their first serving; with
/// them, the home pages written untracked and never served between each and a tracked page at
/// most this many pages away ([`Node::untracked_gaps`]). A reader walking a column (one page in
/// every few) would otherwise leave the home's pages protected one in every few, each run a
/// mapping of the kernel's, and a large array past `vm.max_map_count`. A page so protected costs
/// the home one write fault if it writes it before the next barrier; a home serving the same
/// rows every iteration (sor's boundaries) has no tracked page near them, and fills no gap.
const TRACK_GAP: u32 = 64;

/// Whether `waiter`'s demand fault on `page`, a little past walk `st`'s next page (less than a
/// window of its strides), continues the walk. In the walk's allocation: where nothing between
/// its next page and the fault is to be asked for (pages held here, or on their way), or where
/// the walk is another thread's and the fault at most `least` (`prefetch_pages`) or a quarter
/// window past (threads taking small chunks in turn; a wider gap may be other nodes' chunks,
/// which nobody here reads); never over pages a thread skips itself (a stride not yet found,
/// reads scattered forward). In the allocation right after the walk's: where the walk reached
/// its own's end (lu's panels, one allocation each: the window carries on, its pages do not);
/// a walk down through memory stays in its allocation.
fn continues_walk(
    table: &PageTable,
    me: NodeId,
    st: &Stream,
    page: PageNum,
    waiter: WaiterId,
    least: usize,
) -> bool {
    let (Some(last), Some(n)) = (st.last, st.next()) else {
        return false;
    };
    if !st.before(last, page) {
        return false;
    }
    let end = table.allocation_end(last);
    if !table.allocation_of(last).contains(&u64::from(page.0)) {
        return !st.down()
            && u64::from(n.0) >= end
            && u32::try_from(end)
                .is_ok_and(|e| table.allocation_end(PageNum(e)) > u64::from(page.0));
    }
    let strides = st.pages_past(n, page) / u64::from(st.step());
    let nothing_between = || {
        (0..)
            .map_while(|k| st.on(n, k))
            .take_while(|&p| st.before(p, page))
            .all(|p| {
                let e = &table[p.index()];
                e.home == me || e.frame != Frame::Invalid || e.fetch.is_some()
            })
    };
    (st.by != waiter && strides <= least.max(st.window / 4) as u64) || nothing_between()
}

/// `pages` in their order, cut into runs of consecutive ascending pages of at most `max`.
fn runs_in_order(pages: &[PageNum], max: usize) -> Vec<(PageNum, usize)> {
    let mut runs: Vec<(PageNum, usize)> = Vec::new();
    for &p in pages {
        match runs.last_mut() {
            Some((first, n)) if *n < max && u64::from(first.0) + *n as u64 == u64::from(p.0) => {
                *n += 1
            }
            _ => runs.push((p, 1)),
        }
    }
    runs
}

impl<M: PageMemory> Node<M> {
    /// An application thread faulted on `page` with `access`. The thread is resumed by an
    /// [`crate::Effect::Resume`] once the page is accessible.
    pub fn handle_fault(
        &mut self,
        now: Time,
        page: PageNum,
        access: Access,
        waiter: WaiterId,
    ) -> Result<(), UsageError> {
        let me = self.cfg.node;
        let entry = self
            .table
            .get(page.index())
            .ok_or(UsageError::Unallocated { page })?;
        if let Some(waiting) = self.sync.moving.get_mut(&page) {
            // Its move is being decided: handled again once it is (`apply_decided_moves`).
            waiting.push((waiter, access));
            return Ok(());
        }
        let is_home = entry.home == me;
        if !is_home {
            self.table[page.index()].touched = true;
        }
        let entry = &self.table[page.index()];
        match (entry.frame, access) {
            (Frame::ReadWrite, _) | (Frame::ReadOnly, Access::Read) => {
                // Another thread made the page accessible between this fault and now, or the
                // memory closed it behind the core's back (`PageMemory::closed_behind`).
                self.count_local_fault(access);
                if self.mem.closed_behind(page) {
                    let prot = match self.table[page.index()].frame {
                        Frame::ReadWrite => Prot::ReadWrite,
                        _ => Prot::Read,
                    };
                    self.protect_pages(&[page], prot);
                }
                self.resume(waiter);
            }
            (Frame::ReadOnly, Access::Write) => {
                self.count_local_fault(access);
                if !is_home {
                    self.make_twin(page);
                }
                self.upgrade_to_write(page);
                self.resume(waiter);
            }
            (Frame::Prefetched, _) => {
                self.count_local_fault(access);
                self.stats.prefetch_used += 1;
                self.open_valid_page(page, access);
                self.resume(waiter);
                self.read_ahead_unless_refreshed(now, page);
            }
            (Frame::Invalid, _) => {
                if entry.evicted_in == self.epoch as u32 {
                    self.stats.refetched_after_eviction += 1;
                }
                self.table.note_faulted(page);
                match access {
                    Access::Read => self.stats.read_faults_remote += 1,
                    Access::Write => self.stats.write_faults_remote += 1,
                }
                let entry = &mut self.table[page.index()];
                if let Some(fetch) = &mut entry.fetch {
                    fetch.waiters.push((waiter, access, now));
                    self.stats.faults_joined += 1;
                } else {
                    self.request_pages(now, page, access, waiter);
                }
            }
        }
        self.drain_loopback(now);
        Ok(())
    }

    pub(crate) fn count_local_fault(&mut self, access: Access) {
        match access {
            Access::Read => self.stats.read_faults_local += 1,
            Access::Write => self.stats.write_faults_local += 1,
        }
    }

    fn make_twin(&mut self, page: PageNum) {
        self.mem.make_own(page);
        let mut twin = PageBuf::zeroed();
        self.mem.read(page, &mut twin.0);
        self.table[page.index()].twin = Some(twin);
        self.stats.twins += 1;
    }

    fn upgrade_to_write(&mut self, page: PageNum) {
        self.protect_pages(&[page], Prot::ReadWrite);
        self.table[page.index()].frame = Frame::ReadWrite;
        self.rw.insert(page);
        self.mark_written(page);
    }

    /// A valid cached copy (just granted or prefetched) is opened for `access`.
    fn open_valid_page(&mut self, page: PageNum, access: Access) {
        match access {
            Access::Read => {
                self.protect_pages(&[page], Prot::Read);
                self.table[page.index()].frame = Frame::ReadOnly;
            }
            Access::Write => {
                self.make_twin(page);
                self.upgrade_to_write(page);
            }
        }
    }

    /// Sends GETP for `page` to its home, and for prefetch candidates to theirs.
    fn request_pages(&mut self, now: Time, page: PageNum, access: Access, waiter: WaiterId) {
        let home = self.table[page.index()].home;
        self.table[page.index()].fetch = Some(Fetch {
            waiters: vec![(waiter, access, now)],
            stale: false,
            notified_by_asked: false,
            asked: home,
            atomics: Vec::new(),
            asked_at: 0,
        });
        self.note_fetch(page, now);
        self.stats.pages_fetched += 1;
        let pf = self.cfg.prefetch;
        // A fault on a walk's next page (the thread outran the read-ahead), or one a little past
        // it that `continues_walk` lets continue it, asks for a larger window at once; otherwise
        // a walk starts again from `prefetch_pages`, sequentially or at the stride of the
        // thread's last three demand faults.
        let (stride, previous) = self.stride_of(waiter, page);
        let least = pf.prefetch_pages as usize;
        let (table, me) = (&self.table, self.cfg.node);
        let may_continue = |st: &Stream| continues_walk(table, me, st, page, waiter, least);
        let demand = self
            .streams
            .for_demand(waiter, (page, stride, previous), least, may_continue);
        let (s, mut stream, from) = match demand {
            Demand::Outran(s) => {
                let mut stream = self.streams.get(s);
                // Within the page's allocation the scan starts at the walk's next page (the gap
                // comes too), and the window doubles; a walk carried into the next allocation
                // asks from the fault (a reader at the end of one array says nothing of the next
                // one's pages).
                let from = stream.last.filter(|&f| {
                    stream.before(f, page)
                        && self.table.allocation_of(f).contains(&u64::from(page.0))
                });
                let grown = if from.is_some() || stream.next() == Some(page) {
                    stream.window.max(least) * 2
                } else {
                    // Carried into the next allocation: no more than the pages threads opened
                    // of the walk's last one (lu reads each panel whole; a walk carried on into
                    // allocations read a few pages each comes down at once).
                    let opened = std::mem::take(&mut stream.opened);
                    stream.window.min((2 * opened).next_power_of_two())
                };
                stream.window = grown.min(self.read_ahead_max());
                (s, stream, from.unwrap_or(page))
            }
            Demand::Restart(s) => (s, self.streams.get(s), page),
        };
        stream.quiet = None;
        self.table[page.index()].stream = s;
        let limit = stream.window.max(least);
        let distance = (pf.max_checking_pages as usize).max(2 * limit) as u32;
        let candidates = self.candidates(s, &stream, from, limit, distance);
        let furthest = candidates
            .last()
            .copied()
            .filter(|&c| stream.before(page, c));
        stream.asked_through(furthest.unwrap_or(page));
        stream.mark = self.read_ahead_mark(&stream, &candidates);
        self.streams.put(s, stream);
        if candidates.is_empty() {
            // The demand page alone (prefetch off, or nothing to prefetch): no grouping by home.
            self.send_get_page(home, access, vec![page]);
            return;
        }
        let mut by_home: BTreeMap<NodeId, Vec<PageNum>> = BTreeMap::new();
        if stream.down() {
            // A walk down: the demand page alone first, then its window in pieces.
            self.send_get_page(home, access, vec![page]);
        } else {
            by_home.entry(home).or_default().push(page);
        }
        self.add_prefetches(now, candidates, s, &mut by_home);
        // The demand request first, then prefetches to other homes.
        if !stream.down() {
            let demand = by_home.remove(&home).unwrap_or_default();
            self.send_get_page(home, access, demand);
        }
        self.send_ahead(&stream, by_home);
    }

    /// Sends the GETPs of a window a walk asked for ahead, by home: each home's pages as they
    /// are (in walk order: ascending runs), or, for a walk down through memory, in pieces of
    /// [`DOWN_PIECE_PAGES`], the nearest first, each piece ascending (a home serves a request's
    /// pages in runs of ascending pages: listed downwards, each page would be a run, and in
    /// one request, the page the walk needs next would come last).
    fn send_ahead(&mut self, stream: &Stream, by_home: BTreeMap<NodeId, Vec<PageNum>>) {
        for (h, pages) in by_home {
            if stream.down() {
                for piece in pages.chunks(DOWN_PIECE_PAGES) {
                    self.send_get_page(h, Access::Read, piece.iter().rev().copied().collect());
                }
            } else {
                self.send_get_page(h, Access::Read, pages);
            }
        }
    }

    /// Asks for `pages` ahead of any fault (no thread waits for them), for read-ahead stream
    /// `stream` ([`NO_STREAM`]: none), grouped by home into `by_home`.
    pub(crate) fn add_prefetches(
        &mut self,
        now: Time,
        pages: Vec<PageNum>,
        stream: u8,
        by_home: &mut BTreeMap<NodeId, Vec<PageNum>>,
    ) {
        for candidate in pages {
            if self.sync.moving.contains_key(&candidate) {
                // Its home is being decided.
                continue;
            }
            let e = &mut self.table[candidate.index()];
            e.stream = stream;
            e.fetch = Some(Fetch {
                waiters: Vec::new(),
                stale: false,
                notified_by_asked: false,
                asked: e.home,
                atomics: Vec::new(),
                asked_at: 0,
            });
            by_home.entry(e.home).or_default().push(candidate);
            self.note_fetch(candidate, now);
            self.stats.prefetch_requested += 1;
        }
    }

    /// The largest read-ahead window, in pages: `read_ahead_max_pages`, but never more than a
    /// quarter of the cache shared by the walks reading now (a stream must not evict what it or
    /// another brought before it is read), and never less than `prefetch_pages`. A round trip
    /// to a home whose service thread must first be woken costs hundreds of microseconds on a
    /// busy machine: a window of megabytes keeps a streaming thread's pages arriving while it
    /// reads the ones before.
    pub(crate) fn read_ahead_max(&self) -> usize {
        let pf = self.cfg.prefetch;
        (pf.read_ahead_max_pages as usize)
            .min(self.cfg.cache_pages / 4 / self.streams.live())
            .max(pf.prefetch_pages as usize)
    }

    pub(crate) fn read_ahead_unless_refreshed(&mut self, now: Time, page: PageNum) {
        if !std::mem::take(&mut self.table[page.index()].refreshed) {
            self.read_ahead(now, page);
        }
    }

    /// Read-ahead: the first touch of a prefetched page near the end of the pages its stream
    /// already asked for asks for the stream's next window, so a thread walking through memory
    /// finds its next pages already arrived instead of waiting for a GETP per window. While
    /// prefetched pages keep being used the window doubles, up to [`Node::read_ahead_max`]; a
    /// demand fault among the stream's pages resets it, unless it falls right after the last
    /// window (the thread outran the read-ahead: the window doubles then too).
    fn read_ahead(&mut self, now: Time, page: PageNum) {
        let s = self.table[page.index()].stream;
        // The stream that asked for the page, unless its slot went to another walk since.
        let Some(&stream) = self.streams.owning(s, page) else {
            return;
        };
        self.streams.note_opened(s);
        let pf = self.cfg.prefetch;
        let window = stream.window.max(pf.prefetch_pages as usize);
        // Only near the end of what is already on its way (like the kernel's readahead marker):
        // a thread that touches a few pages of a window and leaves (a boundary row) does not pull
        // in more.
        let enough = (window / 2).max(1);
        let stride = u64::from(stream.step());
        // A stream: the last request reaches half a window past this page, in strides, or to
        // the allocation's end (checked in O(1): this runs for every prefetched page a thread
        // opens, and the scans below would otherwise run at each page of a stream's last half
        // window).
        if stream
            .next()
            .is_some_and(|n| stream.pages_past(page, n).div_ceil(stride) > enough as u64)
        {
            return;
        }
        let allocation = self.table.allocation_of(page);
        if stream.last.is_some_and(|last| {
            // The last page asked for: past this one, and the last of its allocation.
            stream.before(page, last)
                && allocation.contains(&u64::from(last.0))
                && !stream
                    .on(last, 1)
                    .is_some_and(|n| allocation.contains(&u64::from(n.0)))
        }) {
            return;
        }
        // Pages a scan found too few candidates from: none at its stride can find enough
        // before here.
        if stream.quiet.is_some_and(|(from, until)| {
            stream.before(from, page)
                && stream.before(page, until)
                && stream.pages_past(from, page) % stride == 0
        }) {
            return;
        }
        let ahead = (1..=window as u64)
            .map_while(|k| stream.on(page, k))
            .take_while(|p| p.index() < self.table.len())
            .filter(|p| {
                let e = &self.table[p.index()];
                e.frame == Frame::Prefetched || e.fetch.is_some()
            })
            .take(enough)
            .count();
        if ahead >= enough {
            return;
        }
        let mut stream = stream;
        let distance = (pf.max_checking_pages as usize).max(2 * window) as u32;
        let candidates = self.candidates(s, &stream, page, window, distance);
        // Half of half a window at least, or of what is left of the allocation (a stream's
        // tail): pages come in batches, never one at a time as a walk brings them into reach
        // one by one; and a walk whose next pages are partly here or on their way asks for the
        // rest in one request (with half a window, the pages before a node's own rows in a
        // 16-node matmul, 511 where 512 were needed, waited for a demand fault).
        let left = if stream.down() {
            u64::from(page.0) - allocation.start
        } else {
            allocation.end - u64::from(page.0) - 1
        } / stride;
        let needed = (enough as u64).min(left).div_ceil(2);
        if candidates.is_empty() || (candidates.len() as u64) < needed {
            // Each stride further on brings at most one more page into the scan's reach and
            // takes at most one off what the allocation's tail needs: no scan from a page at
            // this stride finds enough before half the shortfall is walked (pages invalidated
            // or evicted meanwhile wait at most that long). Without this, a walk whose next
            // pages are its own or on their way scanned again at each page.
            let short = (needed - candidates.len() as u64) / 2;
            let until = stream.on(page, short).unwrap_or(if stream.down() {
                PageNum(0)
            } else {
                PageNum(u32::MAX)
            });
            stream.quiet = Some((page, until));
            self.streams.put(s, stream);
            return;
        }
        stream.quiet = None;
        stream.window = (window * 2).min(self.read_ahead_max());
        stream.asked_through(*candidates.last().expect("candidates found"));
        stream.mark = self.read_ahead_mark(&stream, &candidates);
        self.streams.put(s, stream);
        let mut by_home: BTreeMap<NodeId, Vec<PageNum>> = BTreeMap::new();
        self.add_prefetches(now, candidates, s, &mut by_home);
        self.send_ahead(&stream, by_home);
    }

    /// A prefetched page nobody read yet is dropped (invalidated, evicted): if the last request
    /// of the stream that asked for it reached past it, what the read-ahead knows of the walk
    /// ahead (its O(1) checks, a scan that found too few) no longer holds, and the next page a
    /// thread opens scans again (which asks for the page again; otherwise a stream whose tail a
    /// lock's grant invalidated waited on a demand fault there, once its last request had
    /// reached the allocation's end).
    fn read_ahead_lost(&mut self, page: PageNum) {
        let s = self.table[page.index()].stream;
        if let Some(mut stream) = self.streams.owning(s, page).copied() {
            // Before the walk's next page (a strided walk's pages between its last and its
            // next count too).
            if stream
                .last
                .is_some_and(|l| stream.on(l, 1).is_none_or(|n| stream.before(page, n)))
            {
                stream.last = None;
            }
            stream.quiet = None;
            self.streams.put(s, stream);
        }
    }

    /// The page of the window just asked for (`candidates`, in order) whose first touch will
    /// ask for the next one: the first that sits less than half the next window before its
    /// end, as [`Node::read_ahead`] counts.
    fn read_ahead_mark(&self, stream: &Stream, candidates: &[PageNum]) -> Option<PageNum> {
        let window = stream.window.max(self.cfg.prefetch.prefetch_pages as usize);
        let enough = (window / 2).max(1) as u64;
        stream.next().and_then(|n| {
            let from = enough.saturating_mul(u64::from(stream.step()));
            candidates
                .iter()
                .copied()
                .find(|&p| stream.pages_past(p, n) <= from)
        })
    }

    /// The read-ahead's stride for `waiter`'s demand fault on `page`, and the thread's demand
    /// fault one stride back: the spacing of its last two demand faults and this one when all
    /// three are equally spaced in one allocation, at most [`MAX_STRIDE_PAGES`] apart, and
    /// either ascending more than a page apart or descending (negative: a walk down through
    /// memory, page by page or strided); or, descending, of two of its last
    /// [`streams::DEMANDS_KEPT`](crate::streams::DEMANDS_KEPT) demand faults and this one (a
    /// thread walking down two or three arrays in step faults on each in turn: `y[i] = f(x[i])`
    /// from the end); otherwise 1 (sequential).
    fn stride_of(&self, waiter: WaiterId, page: PageNum) -> (i32, Option<PageNum>) {
        let spaced = |a: PageNum, b: PageNum| {
            let s = b.0.abs_diff(a.0);
            let same = self.table.allocation_of(a).contains(&u64::from(page.0));
            (same && s <= MAX_STRIDE_PAGES && page.0.abs_diff(b.0) == s).then_some(s as i32)
        };
        if let [Some(a), Some(b)] = self.streams.demands_of(waiter) {
            match spaced(a, b) {
                Some(s) if a < b && b < page && s > 1 => return (s, Some(b)),
                Some(s) if a > b && b > page => return (-s, Some(b)),
                _ => {}
            }
        }
        // Walks down in step: the latest earlier fault above this one that an even earlier one
        // lies as far above (the thread faults on each walk in turn).
        let recent = self.streams.recent_demands(waiter);
        let stride_to = |j: usize| {
            let b = recent[j].filter(|&b| b > page)?;
            let earlier = recent[..j].iter().rev().flatten();
            let s = earlier.filter(|&&a| a > b).find_map(|&a| spaced(a, b))?;
            Some((-s, Some(b)))
        };
        (0..recent.len())
            .rev()
            .find_map(stride_to)
            .unwrap_or((1, None))
    }

    /// GETP for `pages` (the demand page first, if any): one request per
    /// [`MAX_GETP_PAGES`].
    pub(crate) fn send_get_page(&mut self, home: NodeId, access: Access, pages: Vec<PageNum>) {
        for (i, chunk) in pages.chunks(MAX_GETP_PAGES).enumerate() {
            let access = if i == 0 { access } else { Access::Read };
            self.stats.getp_sent += 1;
            self.send(
                home,
                Msg::GetPage {
                    access,
                    pages: chunk.to_vec(),
                    passed: self.collectives_passed(),
                },
            );
            for p in chunk {
                if let Some(f) = &mut self.table[p.index()].fetch {
                    f.asked_at = self.sent_msgs;
                }
            }
        }
    }

    /// Up to `limit` remote, invalid, unrequested pages among the `distance` after `page`, one
    /// stride apart (the stride of stream `s`, `stream`: 1, every page, for a sequential walk),
    /// and in its allocation (never more than half the cache). A reader at the end of one array
    /// says nothing about the next one: lu's panels, one allocation per block row, fetched
    /// 2,703-2,823 pages per node for the 2,112 they read when prefetch ran on into the
    /// following block rows. Nor does a walk go past the pages another walk asked for (a
    /// thread's part of an array reaching the next thread's): that walk goes on from there.
    fn candidates(
        &self,
        s: u8,
        stream: &Stream,
        page: PageNum,
        limit: usize,
        distance: u32,
    ) -> Vec<PageNum> {
        if !self.cfg.prefetch.enabled {
            return Vec::new();
        }
        let limit = limit.min(self.cfg.cache_pages / 2);
        let me = self.cfg.node;
        // `distance` strides at most, inside the allocation.
        let allocation = self.table.allocation_of(page);
        let mut found = Vec::new();
        let walked = (1..=u64::from(distance))
            .map_while(|k| stream.on(page, k))
            .take_while(|p| allocation.contains(&u64::from(p.0)));
        for p in walked {
            let e = &self.table[p.index()];
            let asked = e.frame == Frame::Prefetched || e.fetch.is_some();
            if asked && e.stream != s && self.streams.owning(e.stream, p).is_some() {
                break;
            }
            if e.home != me && e.frame == Frame::Invalid && e.fetch.is_none() {
                found.push(p);
                if found.len() == limit {
                    break;
                }
            }
        }
        found
    }

    /// The pages between each of `pages` (ascending, about to be protected to track writes)
    /// and the nearest page at most [`TRACK_GAP`] away on either side that is tracked too (one
    /// of `pages`, or a home page protected already), where every page between is homed here,
    /// written untracked and never served since the last barrier: protected with `pages`, they
    /// keep the home's pages in few runs of one protection. Tracking them can start at any
    /// time: a copy of one elsewhere is already doomed by a recorded write notice (the
    /// barrier's that untracked it, or its home move's), as for any page written untracked.
    pub(crate) fn untracked_gaps(&self, pages: &[PageNum]) -> Vec<PageNum> {
        let me = self.cfg.node;
        let fillable = |q: u32| {
            let e = &self.table[q as usize];
            e.home == me && !e.served && self.writes_untracked(PageNum(q))
        };
        let listed = |q: u32| pages.binary_search(&PageNum(q)).is_ok();
        let tracked = |q: u32| {
            let e = &self.table[q as usize];
            listed(q) || (e.home == me && e.frame == Frame::ReadOnly)
        };
        let len = self.table.len() as u32;
        let mut out = Vec::new();
        // The first fillable page and the tracked one that ends the gap, walking `side`.
        let gap = |side: &mut dyn Iterator<Item = u32>| -> Option<(u32, u32)> {
            let mut first = None;
            for q in side {
                if tracked(q) {
                    return first.map(|f| (f, q));
                }
                if !fillable(q) {
                    return None;
                }
                first.get_or_insert(q);
            }
            None
        };
        for &p in pages {
            // Only the ends of a run of `pages` can border a gap.
            if p.0 > 0
                && !listed(p.0 - 1)
                && let Some((nearest, end)) = gap(&mut (p.0.saturating_sub(TRACK_GAP)..p.0).rev())
            {
                out.extend((end + 1..=nearest).map(PageNum));
            }
            if p.0 + 1 < len
                && !listed(p.0 + 1)
                && let Some((nearest, end)) = gap(&mut (p.0 + 1..(p.0 + 1 + TRACK_GAP).min(len)))
            {
                out.extend((nearest..end).map(PageNum));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Protects `pages` (home pages written untracked, whose writes are to be tracked from now
    /// on) for reading, with the untracked gaps around them ([`Node::untracked_gaps`]), which
    /// are tracked from now on too. What `pages` become is the caller's.
    pub(crate) fn protect_to_track(&mut self, pages: &[PageNum]) {
        let mut sorted = pages.to_vec();
        sorted.sort_unstable();
        let gaps = self.untracked_gaps(&sorted);
        sorted.extend(&gaps);
        sorted.sort_unstable();
        self.protect_pages(&sorted, Prot::Read);
        for page in gaps {
            self.table[page.index()].frame = Frame::ReadOnly;
            self.mem.allow_home_write(page);
        }
    }

    /// At the end of this node's exit (once the runtime's fault handler takes every fault as
    /// one after it): every open page made read-only, so that a write after the node left the
    /// job faults (and the runtime ends the node naming it) instead of changing bytes no other
    /// node will see; they stay readable: a program may read its results after `jia_exit`, as
    /// with JIAJIA. Read-only pages too, since the fault handler may have opened one for
    /// writing without the table knowing yet (a home page whose writes are tracked). A
    /// prefetched page never opened stays closed: opening runs of them amid closed pages
    /// would split the mapping, and a job near `vm.max_map_count` would fail in its exit.
    pub fn close_writes(&mut self) {
        let held: Vec<PageNum> = (0..self.table.len())
            .filter(|&p| matches!(self.table[p].frame, Frame::ReadOnly | Frame::ReadWrite))
            .map(|p| PageNum(p as u32))
            .collect();
        self.protect_pages(&held, Prot::Read);
        for p in held {
            self.table[p.index()].frame = Frame::ReadOnly;
        }
    }

    /// Whether writes to `page` (a home page) go unseen: writable, and not known as written.
    pub(crate) fn writes_untracked(&self, page: PageNum) -> bool {
        self.table[page.index()].frame == Frame::ReadWrite && !self.rw.contains(&page)
    }

    /// GETP at the home: send each page, or have a node that holds them send them
    /// ([`Node::forward`]; `now`: the request's arrival, `None` for a request answered late,
    /// which is never forwarded).
    pub(crate) fn on_get_page(
        &mut self,
        now: Option<Time>,
        from: NodeId,
        access: Access,
        (pages, passed): (Vec<PageNum>, Epoch),
    ) -> Result<(), ProtocolError> {
        let err = |why| ProtocolError {
            from,
            kind: MsgKind::GetPage,
            why,
        };
        if pages.len() > MAX_GETP_PAGES {
            return Err(err("too many pages in one request"));
        }
        let me = self.cfg.node;
        if pages.iter().any(|p| p.index() >= self.table.len()) {
            // The requester allocated ahead of us (allocation is collective but not a barrier):
            // answer once we have made the same allocation. Unless this node is in a barrier or
            // its exit: it makes no allocation before the others arrive, so it never will. A
            // requester already past the barrier this node is in (its grant came first: the
            // grants of node 0 and a request of another node are not ordered) allocated after
            // it, as this node will once its own grant comes: held. (A barrier or a jia_wait.)
            if self.sync.collective.is_some() && passed <= self.collectives_passed() {
                self.early_requests.push((from, access, pages, passed));
                self.refuse_early_requests();
                return Ok(());
            }
            if self.early_requests.len() >= MAX_EARLY_REQUESTS {
                return Err(err("too many requests for pages not allocated here yet"));
            }
            self.early_requests.push((from, access, pages, passed));
            return Ok(());
        }
        // A page whose home moved away from here is asked for by a node that sent the request
        // before it knew (its request will be answered stale: the move came with a write notice).
        // Any other page not homed here: the nodes' allocations home it differently. The job
        // ends (dropping the request left the asker's fault waiting for ever).
        if let Some(&page) = pages.iter().find(|p| {
            let e = &self.table[p.index()];
            e.home != me && !e.moved_away
        }) {
            let error = JobError::HomeMismatch {
                node: from,
                page,
                here: me,
                home: self.table[page.index()].home,
            };
            self.broadcast_error(&error.to_string());
            self.abort(error);
            return Ok(());
        }
        // First serving of a page written untracked so far: from now on writes here must be
        // noticed. One page alone (a demand fault) is protected once its grant is on its way
        // (`settle_serves`), not before the copy is taken: the protection (with the TLB
        // shootdown it takes while the application runs) is then off the requester's wait, and
        // a write in between is found by comparing the page with the bytes sent. A request for
        // many pages (a read-ahead window) is limited by the copies, not by one protection: its
        // untracked pages are protected first, in ranges, and need no second copy to compare.
        let protect_first: Vec<PageNum> = if pages.len() > 1 {
            pages
                .iter()
                .copied()
                .filter(|&p| {
                    let e = &self.table[p.index()];
                    e.home == me && !e.served && self.writes_untracked(p)
                })
                .collect()
        } else {
            Vec::new()
        };
        if !protect_first.is_empty() {
            self.protect_to_track(&protect_first);
            for &page in &protect_first {
                self.table[page.index()].frame = Frame::ReadOnly;
                self.mem.allow_home_write(page);
            }
        }
        // A reader asking again for pages it was sent holds them no more.
        if let (Some(&first), Some(&last)) = (pages.first(), pages.last()) {
            self.held
                .retain(|h| h.node != from || !(h.holds(first) || h.holds(last)));
        }
        // Every page tracked: the requester's copies stay as current as ours until one of
        // them is written (`forget_held`), and may serve the readers that follow.
        let tracked = now
            .filter(|_| self.cfg.forward_within.is_some())
            .and_then(|now| Some((now, self.tracked_run(&pages)?)));
        if let Some((now, run)) = tracked {
            if self.forward(now, from, run) {
                return Ok(());
            }
        }
        self.queue_runs(from, &pages, false);
        self.serve_next_run();
        if let Some((now, (first, count))) = tracked {
            if self.held.len() >= MAX_HELD_RUNS {
                self.held.remove(0);
            }
            self.held.push(HeldRun {
                node: from,
                first,
                count,
                at: now,
                forwards: 0,
            });
        }
        // A sequential reader (this request starts where the last one served ended) will ask
        // for the page after these next: warmed once the grants are out.
        let (Some(&first), Some(&last)) = (pages.first(), pages.last()) else {
            return Ok(());
        };
        let next = PageNum(last.0.wrapping_add(1));
        if self
            .last_served
            .is_some_and(|p| p.0.wrapping_add(1) == first.0)
            && self.table.get(next.index()).is_some_and(|e| e.home == me)
        {
            self.to_warm = Some(next);
        }
        self.last_served = Some(last);
        Ok(())
    }

    /// Queues `pages` for `to` as runs of consecutive pages, each copied once into the grant
    /// that carries it when its turn comes (`serve_next_run`): the first (the demand page's)
    /// at once, the others as the runtime takes the grants before them, so a large window
    /// streams out while it is copied. `forwarded`: this node's copies, sent on their home's
    /// behalf.
    fn queue_runs(&mut self, to: NodeId, pages: &[PageNum], forwarded: bool) {
        let max_run = self
            .cfg
            .grant_run_pages
            .clamp(1, crate::codec::MAX_RUN_PAGES);
        for (first, count) in runs_in_order(pages, max_run) {
            self.serving.push_back(Serve::Run {
                to,
                first,
                count,
                forwarded,
            });
        }
    }

    /// Sends what is next in `Node::serving`: copies a run into its grant, or asks a holder to
    /// forward.
    pub(crate) fn serve_next_run(&mut self) {
        let Some(next) = self.serving.pop_front() else {
            return;
        };
        let (to, first, n, forwarded) = match next {
            Serve::Forward {
                holder,
                to,
                first,
                count,
            } => {
                self.send(holder, Msg::Forward { to, first, count });
                return;
            }
            Serve::Run {
                to,
                first,
                count,
                forwarded,
            } => (to, first, count, forwarded),
        };
        let me = self.cfg.node;
        // The next run comes into the CPU's cache while this one is copied.
        if let Some(&Serve::Run { first: next, .. }) = self.serving.front() {
            self.mem.warm(next);
        }
        if forwarded && !self.holds_copies(first, n) {
            // Dropped or written here since the forward came: the home sends them.
            self.stats.forwards_refused += 1;
            let home = self.table[first.index()].home;
            let count = n as u16;
            self.send(home, Msg::ForwardRefused { to, first, count });
            return;
        }
        // A home's pages whose every write is tracked are lent (the transport reads them when
        // it sends them: one copy less, see `RunData::Lent`); any other run is copied now.
        if !forwarded && self.mem.lends_runs() && self.lendable(first, n) {
            self.stats.pages_served += n as u64;
            self.stats.pages_lent += n as u64;
            self.send(
                to,
                Msg::GetPageGrant {
                    page: first,
                    data: RunData::Lent(n as u16),
                    forwarded,
                },
            );
            return;
        }
        let data = self.mem.copy_run(first, n);
        if forwarded {
            self.stats.pages_forwarded += n as u64;
        } else {
            self.stats.pages_served += n as u64;
        }
        for i in 0..n {
            let page = PageNum(first.0 + i as u32);
            // Still untracked at its first serve: protected once the grant is sent, and
            // compared with the bytes sent (the grant's own buffer, shared: no copy).
            if self.table[page.index()].home == me
                && !std::mem::replace(&mut self.table[page.index()].served, true)
                && self.writes_untracked(page)
            {
                self.unsettled
                    .push((page, Arc::clone(&data), i * PAGE_SIZE));
            }
        }
        self.send(
            to,
            Msg::GetPageGrant {
                page: first,
                data: RunData::Copied(data),
                forwarded,
            },
        );
    }

    /// Whether the `n` pages from `first` may be granted lent: all homed here, not moving, and
    /// every write to them here tracked (read-only until a write faults, or recorded dirty),
    /// so that whatever bytes the transport reads later, the grant's or newer, a write notice
    /// covers the difference.
    fn lendable(&self, first: PageNum, n: usize) -> bool {
        let me = self.cfg.node;
        self.sync.moving.is_empty()
            && (first.index()..first.index() + n).all(|i| {
                let e = &self.table[i];
                e.home == me && !e.moved_away && !self.writes_untracked(PageNum(i as u32))
            })
    }

    // ----- many readers: forwarding -----
    //
    // A home that sent a run of pages whose writes it tracks (read-only here: a write faults)
    // remembers who holds it (`Node::held`). Until one of those pages changes here (a write,
    // a diff applied: `forget_held`) or a barrier, that node's copies are exactly the home's
    // pages, or newer by its own writes: what a reader asking the home now must see at least.
    // So a reader asking for pages inside such a run shortly after (`forward_within`: readers
    // of the same pages at the same moment) is forwarded: the home sends the holder FWD behind
    // the holder's own grants (messages between two nodes arrive in order, so the holder has
    // installed them by then), and the holder sends the pages, marked as sent on the home's
    // behalf, or, if it no longer holds them all valid and unwritten, FWDREFUSED to the home,
    // which sends them itself. Each page of a request gets exactly one grant. A holder serves
    // at most `MAX_FORWARDS` readers, and the home serves the next reader itself (who then
    // holds the run too): 15 readers of one panel cost the home 4 sends instead of 15.

    /// `pages` as one run (first page, count), if they are two or more consecutive pages, all
    /// homed here with their writes tracked, none of them moving.
    fn tracked_run(&self, pages: &[PageNum]) -> Option<(PageNum, u32)> {
        let me = self.cfg.node;
        let first = *pages.first()?;
        if pages.len() < 2 || !self.sync.moving.is_empty() {
            return None;
        }
        let consecutive = pages
            .iter()
            .enumerate()
            .all(|(i, p)| u64::from(p.0) == u64::from(first.0) + i as u64);
        let tracked = pages.iter().all(|p| {
            let e = &self.table[p.index()];
            e.home == me && !e.moved_away && e.frame == Frame::ReadOnly
        });
        (consecutive && tracked).then_some((first, pages.len() as u32))
    }

    /// Forwards `from`'s request for the tracked run of `count` pages from `first` to a node
    /// that holds them, if one does (see above); whether it did.
    fn forward(&mut self, now: Time, from: NodeId, (first, count): (PageNum, u32)) -> bool {
        let Some(within) = self.cfg.forward_within else {
            return false;
        };
        if self.mem.serves_in_place(from) {
            return false;
        }
        let last = PageNum(first.0 + (count - 1));
        let within = u64::try_from(within.as_nanos()).unwrap_or(u64::MAX);
        let Some(held) = self
            .held
            .iter_mut()
            .filter(|h| {
                h.node != from
                    && h.forwards < MAX_FORWARDS
                    && now.since(h.at) <= within
                    && h.holds(first)
                    && h.holds(last)
            })
            .min_by_key(|h| h.forwards)
        else {
            return false;
        };
        held.forwards += 1;
        let holder = held.node;
        self.stats.requests_forwarded += 1;
        self.serving.push_back(Serve::Forward {
            holder,
            to: from,
            first,
            count: count as u16,
        });
        self.serve_next_run();
        true
    }

    /// Home page `page` changed here: no copy sent before is current any more.
    pub(crate) fn forget_held(&mut self, page: PageNum) {
        if !self.held.is_empty() {
            self.held.retain(|h| !h.holds(page));
        }
    }

    /// Whether this node holds valid, unwritten copies of `count` pages from `first`, none of
    /// them homed here or moving.
    fn holds_copies(&self, first: PageNum, count: usize) -> bool {
        let me = self.cfg.node;
        self.sync.moving.is_empty()
            && (0..count).all(|i| {
                self.table.get(first.index() + i).is_some_and(|e| {
                    e.home != me && matches!(e.frame, Frame::ReadOnly | Frame::Prefetched)
                })
            })
    }

    /// FWD from a home: send `to` our copies of `count` pages from `first`, or refuse.
    pub(crate) fn on_forward(
        &mut self,
        from: NodeId,
        to: NodeId,
        first: PageNum,
        count: u16,
    ) -> Result<(), ProtocolError> {
        let err = |why| ProtocolError {
            from,
            kind: MsgKind::Forward,
            why,
        };
        if to.0 >= self.cfg.nodes || to == self.cfg.node || to == from {
            return Err(err(
                "forward to a node outside the job, to this one or back",
            ));
        }
        let count = usize::from(count);
        if first.index() + count > self.table.len() {
            return Err(err("page not allocated"));
        }
        let homed_there = (0..count).all(|i| self.table[first.index() + i].home == from);
        if homed_there && self.holds_copies(first, count) {
            let pages: Vec<PageNum> = (0..count as u32).map(|i| PageNum(first.0 + i)).collect();
            self.queue_runs(to, &pages, true);
            self.serve_next_run();
        } else {
            // Dropped, written or moving here since (or the sender is no longer their home,
            // which then answers from what it holds, as for a late GETP).
            self.stats.forwards_refused += 1;
            let count = count as u16;
            self.send(from, Msg::ForwardRefused { to, first, count });
        }
        Ok(())
    }

    /// FWDREFUSED: the holder could not send them; the home does.
    pub(crate) fn on_forward_refused(
        &mut self,
        from: NodeId,
        to: NodeId,
        first: PageNum,
        count: u16,
    ) -> Result<(), ProtocolError> {
        if to.0 >= self.cfg.nodes || to == self.cfg.node {
            return Err(ProtocolError {
                from,
                kind: MsgKind::ForwardRefused,
                why: "refused a forward to a node outside the job or to this one",
            });
        }
        self.held.retain(|h| h.node != from || !h.holds(first));
        let pages: Vec<PageNum> = (0..u32::from(count))
            .map(|i| PageNum(first.0 + i))
            .collect();
        // Pages served from here before, so allocated: what was passed checks nothing.
        let passed = self.collectives_passed();
        self.on_get_page(None, to, Access::Read, (pages, passed))
    }

    /// GETPGRANT: install a run of pages and resume their waiters. Room is made for the whole
    /// run at once; a page of it that was not asked of `from` is refused, the others installed:
    /// the bytes of each run of accepted pages written with one [`PageMemory::write_run`], then
    /// each page opened or marked prefetched.
    pub(crate) fn on_page_grant(
        &mut self,
        now: Time,
        from: NodeId,
        (first, data, source): (PageNum, &[u8], GrantSource),
    ) -> Result<(), ProtocolError> {
        let err = |why| ProtocolError {
            from,
            kind: MsgKind::GetPageGrant,
            why,
        };
        if data.len() % PAGE_SIZE != 0 {
            return Err(err("bytes that are not whole pages"));
        }
        let count = data.len() / PAGE_SIZE;
        if u64::from(first.0) + count as u64 > self.table.len() as u64 {
            return Err(err("page not allocated"));
        }
        self.make_room(now, count);
        let mut result = Ok(());
        let mut accepted = Vec::with_capacity(count);
        for i in 0..count {
            let page = PageNum(first.0 + i as u32);
            match self.accept_granted(now, from, page, source) {
                Ok(Some(fetch)) => {
                    let at = i * PAGE_SIZE;
                    let bytes = &data[at..at + PAGE_SIZE];
                    if Self::placed_after_its_answers(source, &fetch, bytes) {
                        accepted.push((page, fetch));
                    } else {
                        self.ask_again(now, page, fetch, true);
                    }
                }
                Ok(None) => {}
                Err(e) => result = result.and(Err(e)),
            }
        }
        let pages: Vec<PageNum> = accepted.iter().map(|&(p, _)| p).collect();
        for (run, n) in runs_of(&pages) {
            let at = (run.0 - first.0) as usize * PAGE_SIZE;
            self.mem
                .write_run(run, &data[at..at + n as usize * PAGE_SIZE]);
        }
        for (page, fetch) in accepted {
            // The values of the operations that left after the request, which the copy may
            // predate (see `placed_after_its_answers`). If it does not, no thread has read it
            // yet, and no synchronisation made its newer value visible here (an acquire since
            // the request left marked it stale). Asking again instead let a thread that kept
            // changing a word keep its sibling's copy from ever arriving.
            if source != GrantSource::Home {
                for v in fetch.atomics.iter().filter(|v| v.after_request) {
                    let w = usize::from(v.width);
                    self.mem.write(page, v.at, &v.value.to_le_bytes()[..w]);
                }
            }
            self.ask_home.remove(&page);
            self.open_granted(now, page, fetch);
        }
        result
    }

    /// Whether a copy of `bytes` for `fetch` can be placed among the answers to this node's
    /// atomic operations on its words that came while it was on its way (`fetch.atomics`), so
    /// that it is installed with their values where it predates them.
    ///
    /// - From the home itself: the home took the request after every operation that left
    ///   before it (one ordered channel each way), and answers those that left after it
    ///   after the copy. It holds every such value, or newer ones.
    /// - From a holder: the holder's copy is at least the home's page when the home forwarded
    ///   the request, so it holds the values of the operations that left before the request
    ///   (or newer ones).
    /// - Read one-sided: an operation that left before the read may be applied at the home
    ///   after it (the home's service thread takes messages after its NIC serves reads). If
    ///   the copy lacks such an operation's value, it is older or newer than the operation
    ///   (another node's later value, which an acquire may have made visible here), and
    ///   cannot be placed: it is asked for again, of the home, as a message.
    ///
    /// Operations that left after the request are given to the copy as it is installed.
    fn placed_after_its_answers(source: GrantSource, fetch: &Fetch, bytes: &[u8]) -> bool {
        source != GrantSource::OneSided
            || fetch.atomics.iter().all(|v| {
                let w = usize::from(v.width);
                v.after_request || bytes[v.at..v.at + w] == v.value.to_le_bytes()[..w]
            })
    }

    /// Asks for `page` again, of its home, for `fetch`'s waiters (a prefetch is dropped).
    /// `as_message`: not as a one-sided read.
    fn ask_again(&mut self, now: Time, page: PageNum, fetch: Fetch, as_message: bool) {
        if fetch.waiters.is_empty() {
            self.stats.prefetch_unused += 1;
            return;
        }
        let access = Self::strongest(&fetch.waiters);
        let entry = &mut self.table[page.index()];
        let home = entry.home;
        entry.fetch = Some(Fetch {
            waiters: fetch.waiters,
            stale: false,
            notified_by_asked: false,
            asked: home,
            atomics: Vec::new(),
            asked_at: 0,
        });
        if as_message {
            self.ask_home.insert(page);
        }
        self.note_fetch(page, now);
        self.send_get_page(home, access, vec![page]);
    }

    /// Records when `page` was asked for, for the reply timeout (with none configured, as in
    /// the runtime, nothing: a stream asks for every page it reads).
    fn note_fetch(&mut self, page: PageNum, now: Time) {
        if self.cfg.reply_timeout.is_some() {
            self.fetches.insert(page, now);
        }
    }

    /// Whether the bytes granted for `page` by `from` are to be installed: its fetch, taken,
    /// if so. A fetch whose page is moving home, or stale, is settled here (its waiters wait
    /// for the move, or the page is asked again). `source`: a holder's grant is sent on the
    /// home's behalf (any node but the one asked may be that holder; each request's page
    /// gets exactly one grant, from the home or from the holder it chose).
    fn accept_granted(
        &mut self,
        now: Time,
        from: NodeId,
        page: PageNum,
        source: GrantSource,
    ) -> Result<Option<Fetch>, ProtocolError> {
        let forwarded = source == GrantSource::Forwarded;
        let err = |why| ProtocolError {
            from,
            kind: MsgKind::GetPageGrant,
            why,
        };
        let entry = self
            .table
            .get_mut(page.index())
            .ok_or(err("page not allocated"))?;
        // The node asked, which was the home when the request left (homes move at barriers).
        if entry
            .fetch
            .as_ref()
            .is_none_or(|f| (f.asked == from) == forwarded)
        {
            return Err(err("page was not requested from that node"));
        }
        let Some(fetch) = entry.fetch.take() else {
            return Ok(None);
        };
        self.fetches.remove(&page);
        if let Some(moving) = self.sync.moving.get_mut(&page) {
            // Its home is being decided: the answer (from the old home) is dropped and the
            // waiters fault again once the moves are applied, at the page's home then. Asked
            // again now, the old home could answer after moving the page, leaving a copy no
            // notice of the new home's (untracked) writes would reach; opened now, a write
            // could diff to the old home after the move.
            moving.extend(fetch.waiters.iter().map(|&(w, a, _)| (w, a)));
            if fetch.waiters.is_empty() {
                self.stats.prefetch_unused += 1;
            }
            return Ok(None);
        }
        if fetch.stale || (fetch.notified_by_asked && source != GrantSource::Home) {
            // The copy may predate a write we were notified of: ask again, of the home now. If
            // only the home's own notice made it stale, as a message: the home's grant then
            // follows any later notice of its own (a one-sided read asked again and again
            // could be overtaken by the home's next one every time, for ever).
            let as_message = !fetch.stale;
            self.ask_again(now, page, fetch, as_message);
            return Ok(None);
        }
        Ok(Some(fetch))
    }

    /// A page whose granted bytes are in place: cached, and opened for its waiters (resumed)
    /// or left closed as a prefetched page.
    fn open_granted(&mut self, now: Time, page: PageNum, fetch: Fetch) {
        self.make_room(now, 1);
        self.table.cache_insert(page);
        if fetch.waiters.is_empty() {
            self.table[page.index()].frame = Frame::Prefetched;
            let s = self.table[page.index()].stream;
            let wake = self
                .streams
                .owning(s, page)
                .is_some_and(|stream| stream.mark == Some(page));
            self.mem.allow_prefetch_open(page, wake);
        } else {
            self.open_valid_page(page, Self::strongest(&fetch.waiters));
            self.read_after_drop(page);
            for (w, _, since) in fetch.waiters {
                self.stats.fault_wait_ns += now.since(since);
                self.resume(w);
            }
        }
    }

    /// Makes room for `incoming` more pages. A full cache gives up a batch at once (a 64th of
    /// it, and at least the pages coming; the page table chooses them), closed and given back
    /// to the system in ranges: a stream larger than the cache pays one mprotect and one
    /// discard per run of pages, not per page.
    fn make_room(&mut self, now: Time, incoming: usize) {
        let capacity = self.cfg.cache_pages.max(1);
        if self.table.cached() + incoming <= capacity {
            return;
        }
        let batch = (capacity / EVICT_BATCH_DIVISOR)
            .max(incoming)
            .min((capacity / 4).max(1));
        let mut victims = Vec::new();
        while let Some(page) = self.table.victim(batch) {
            self.table.cache_remove(page);
            victims.push(page);
        }
        if victims.is_empty() {
            return;
        }
        self.evict(&victims);
        self.send_diffs(now);
    }

    /// Drops the cached copies `pages` (already out of the cache's queue).
    fn evict(&mut self, pages: &[PageNum]) {
        for &page in pages {
            self.keep_claimed_bytes(page);
        }
        // Closed first, all at once: a store racing the eviction of a written page either lands
        // before its diff or faults; a prefetched page the runtime opened for a reader an
        // instant ago is closed for sure.
        let open: Vec<PageNum> = pages
            .iter()
            .copied()
            .filter(|p| self.table[p.index()].frame != Frame::Invalid)
            .collect();
        self.protect_pages(&open, Prot::None);
        for &page in pages {
            match self.table[page.index()].frame {
                Frame::Invalid | Frame::ReadOnly => {}
                Frame::Prefetched => {
                    self.stats.prefetch_unused += 1;
                    self.read_ahead_lost(page);
                }
                Frame::ReadWrite => {
                    self.rw.remove(&page);
                    self.diff_page(page);
                    self.stats.dirty_evictions += 1;
                }
            }
            let e = &mut self.table[page.index()];
            e.frame = Frame::Invalid;
            e.touched = false;
            e.refreshed = false;
            e.unused_refetches = 0;
            e.twin = None;
            e.evicted_in = self.epoch as u32;
            self.table.cache_remove(page);
            self.stats.evictions += 1;
        }
        for (first, count) in crate::table::runs_of(pages) {
            self.mem.discard(first, count);
        }
    }

    /// Diffs a dirty cached page against its twin into the batch for its home; drops the twin.
    /// The page must already be protected against writes.
    pub(crate) fn diff_page(&mut self, page: PageNum) {
        let entry = &mut self.table[page.index()];
        let Some(twin) = entry.twin.take() else {
            return;
        };
        let home = entry.home;
        self.mem.read(page, &mut self.scratch);
        let mut runs = Vec::new();
        if diff::encode(&twin.0, &self.scratch, &mut runs) > 0 {
            self.stats.diffs_sent += 1;
            self.stats.diff_bytes_sent += runs.len() as u64;
            self.flush
                .diff_batch
                .entry(home)
                .or_default()
                .push(PageDiff { page, runs });
        }
    }

    /// Sends the gathered diffs, one DIFF message per home (split when large).
    pub(crate) fn send_diffs(&mut self, now: Time) {
        let batch = std::mem::take(&mut self.flush.diff_batch);
        for (home, diffs) in batch {
            let mut msg_diffs = Vec::new();
            let mut bytes = 0;
            for d in diffs {
                bytes += d.runs.len();
                msg_diffs.push(d);
                if bytes >= MAX_DIFF_MSG_BYTES {
                    self.send_diff_msg(now, home, std::mem::take(&mut msg_diffs));
                    bytes = 0;
                }
            }
            if !msg_diffs.is_empty() {
                self.send_diff_msg(now, home, msg_diffs);
            }
        }
    }

    fn send_diff_msg(&mut self, now: Time, home: NodeId, diffs: Vec<PageDiff>) {
        if self.sync.awaiting_grant {
            self.sync
                .diffed_in_barrier
                .extend(diffs.iter().map(|d| d.page));
        }
        let id = self.flush.next_diff_id;
        self.flush.next_diff_id = self.flush.next_diff_id.wrapping_add(1);
        self.flush.diffs_out.insert(id, (home, now));
        if self.cfg.remote_reads {
            self.diffs_on_their_way
                .extend(diffs.iter().map(|d| (d.page, id)));
        }
        self.send(home, Msg::Diff { id, diffs });
    }

    /// DIFF at the home: apply, acknowledge.
    pub(crate) fn on_diff(
        &mut self,
        from: NodeId,
        id: Count,
        diffs: Vec<PageDiff>,
    ) -> Result<(), ProtocolError> {
        // A diff applied to a page served untracked would read as a write of ours.
        self.settle_serves();
        let me = self.cfg.node;
        let homed = |e: &crate::table::PageEntry| e.home == me;
        if diffs.iter().any(|d| {
            self.table
                .get(d.page.index())
                .is_none_or(|e| !homed(e) && !e.moved_away)
        }) {
            return Err(ProtocolError {
                from,
                kind: MsgKind::Diff,
                why: "diff for a page not homed here",
            });
        }
        if diffs.iter().any(|d| !homed(&self.table[d.page.index()])) {
            // A page that moved away: a diff made before its sender knew would have made it
            // veto the move (`close_moving_pages`), and one made after goes to the new home.
            return Err(ProtocolError {
                from,
                kind: MsgKind::Diff,
                why: "diff for a page that moved away",
            });
        }
        for d in &diffs {
            for run in diff::runs(&d.runs) {
                // The decoder validated every diff; a malformed one from a loopback is skipped.
                let Ok((offset, bytes)) = run else { break };
                self.mem.write(d.page, offset, bytes);
            }
            self.stats.diffs_applied += 1;
            self.forget_held(d.page);
            if self.cfg.migrates_homes() {
                self.sync.diffed_here.insert((d.page, from));
            }
        }
        self.send(from, Msg::DiffGrant { id });
        Ok(())
    }

    /// DIFFGRANT: one batch is home; releases waiting for it may complete.
    pub(crate) fn on_diff_grant(&mut self, from: NodeId, id: Count) -> Result<(), ProtocolError> {
        match self.flush.diffs_out.get(&id) {
            Some(&(home, _)) if home == from => {
                self.flush.diffs_out.remove(&id);
                self.diffs_on_their_way.retain(|_, d| *d != id);
                self.complete_flushes();
                Ok(())
            }
            _ => Err(ProtocolError {
                from,
                kind: MsgKind::DiffGrant,
                why: "no such diff outstanding to that node",
            }),
        }
    }

    /// At a barrier: the pages among `pages` (about to be invalidated) whose copies were in use
    /// here (opened for a reader or a writer since they arrived), to fetch again at once. A copy
    /// fetched again at the last barrier and not opened since is fetched once more (a page used
    /// every other interval, as by one colour of red-black SOR); not after two such barriers.
    pub(crate) fn copies_in_use(&self, pages: &[PageNum]) -> Vec<PageNum> {
        if !self.cfg.prefetch.enabled {
            return Vec::new();
        }
        let me = self.cfg.node;
        let limit = (self.cfg.cache_pages / 2).min(REFETCH_MAX);
        pages
            .iter()
            .copied()
            .filter(|p| {
                self.table.get(p.index()).is_some_and(|e| {
                    let in_use = match e.frame {
                        Frame::ReadOnly | Frame::ReadWrite => true,
                        Frame::Prefetched => e.refreshed && e.unused_refetches == 0,
                        Frame::Invalid => false,
                    };
                    e.home != me && e.touched && in_use && e.fetch.is_none()
                })
            })
            .take(limit)
            .collect()
    }

    /// Fetches `pages` again as prefetches (no thread waits for them), one GETP per home. They
    /// stay marked in use: the next barrier fetches again those that were opened meanwhile, even
    /// if only along with a page before them (without that, such a page dropped out every other
    /// barrier and its next read took a demand fault with a read-ahead of unused pages: sor
    /// 1024 x 100 on 2 nodes, 720 unused prefetches per run).
    pub(crate) fn refetch(&mut self, now: Time, pages: Vec<PageNum>) {
        for p in &pages {
            let e = &mut self.table[p.index()];
            e.refreshed = true;
            e.touched = true;
        }
        let mut by_home: BTreeMap<NodeId, Vec<PageNum>> = BTreeMap::new();
        self.add_prefetches(now, pages, NO_STREAM, &mut by_home);
        for (h, pages) in by_home {
            for chunk in pages.chunks(MAX_GETP_PAGES) {
                self.send_get_page(h, Access::Read, chunk.to_vec());
            }
        }
    }

    /// Drops our copies of these pages (dirty ones send their diff first) for a reason other
    /// than a grant's write notices: a request out for one of them is answered stale.
    pub(crate) fn invalidate(&mut self, now: Time, pages: impl IntoIterator<Item = PageNum>) {
        self.invalidate_notified(now, None, pages);
    }

    /// Write notices, from the synchronisation grant `from` sent (`None`: no grant's): our
    /// copies of these pages are dropped (dirty ones send their diff first), and a request out
    /// for one of them is answered stale, unless the node asked answers it itself after the
    /// notice (see `Fetch::notified_by_asked`). Without that exception, a thread spinning with
    /// acquire loads on a word whose home keeps naming a page (another node's releases through
    /// the word name it, as a contended lock word's page) made every fetch of that page by a
    /// sibling stale on arrival, for ever: a load was always out when the fetch left.
    pub(crate) fn invalidate_notified(
        &mut self,
        now: Time,
        from: Option<NodeId>,
        pages: impl IntoIterator<Item = PageNum>,
    ) {
        let me = self.cfg.node;
        if from.is_some() {
            self.forget_dropped();
        }
        let mut opened = Vec::new();
        for page in pages {
            // A claimed page named by a lock's or condition variable's grant: another node
            // wrote it since (in the next epoch): it must not move here (see the grant).
            if self.claims.contains_key(&page) {
                self.claims_overtaken.insert(page);
            }
            let Some(e) = self.table.get_mut(page.index()) else {
                continue;
            };
            if e.home == me {
                continue;
            }
            if let Some(f) = &mut e.fetch {
                if from == Some(f.asked) {
                    f.notified_by_asked = true;
                } else {
                    f.stale = true;
                }
            }
            match e.frame {
                Frame::Invalid => continue,
                Frame::Prefetched => {
                    if e.refreshed {
                        e.unused_refetches = e.unused_refetches.saturating_add(1);
                    }
                    self.stats.prefetch_unused += 1;
                    // Closed with the others: the runtime may have opened it for a reader.
                    opened.push(page);
                    self.read_ahead_lost(page);
                }
                Frame::ReadOnly | Frame::ReadWrite => {
                    e.unused_refetches = 0;
                    opened.push(page);
                }
            }
            self.stats.invalidations += 1;
        }
        // Protect first, then diff: a racing store either made it into the page or faults.
        self.protect_pages(&opened, Prot::None);
        for &page in &opened {
            self.keep_claimed_bytes(page);
        }
        for &page in &opened {
            if self.table[page.index()].frame == Frame::ReadWrite {
                self.rw.remove(&page);
                self.diff_page(page);
            }
        }
        opened.sort_unstable();
        self.mem.invalidated(&opened);
        for page in opened {
            let e = &mut self.table[page.index()];
            e.frame = Frame::Invalid;
            e.touched = false;
            e.refreshed = false;
            e.twin = None;
            self.table.cache_remove(page);
        }
        self.send_diffs(now);
    }

    /// At a release: downgrade every page written in the interval, diff the cached ones, send
    /// the diffs. Returns nothing; the caller waits for the acknowledgements.
    ///
    /// At a barrier (`barrier`), home pages written in the interval stay writable and untracked:
    /// the barrier's notices make every other node drop its copy, so until one fetches the page
    /// again (which tracks it again, see `on_get_page`) no copy exists for a write to go stale
    /// in. An iterative solver then takes no write fault per home page per iteration. Not with
    /// one-sided reads, where the home cannot see a copy being taken.
    pub(crate) fn flush_writes(&mut self, now: Time, barrier: bool) {
        self.settle_serves();
        let me = self.cfg.node;
        let untrack = barrier && !self.cfg.remote_reads;
        if barrier {
            // Homes may move and untracked writes begin: no copy is vouched for across it.
            self.held.clear();
        }
        let (open, pages): (Vec<PageNum>, Vec<PageNum>) = std::mem::take(&mut self.rw)
            .into_iter()
            .partition(|p| untrack && self.table[p.index()].home == me);
        for &page in &open {
            self.table[page.index()].served = false;
        }
        self.protect_pages(&pages, Prot::Read);
        for &page in &pages {
            self.table[page.index()].frame = Frame::ReadOnly;
            if self.table[page.index()].home != me {
                self.diff_page(page);
            } else {
                self.mem.allow_home_write(page);
            }
        }
        self.send_diffs(now);
    }

    // ----- home migration -----

    /// At a barrier, with home migration on: the pages written in the closing epoch, homed
    /// elsewhere, whose copy here is valid. This node offers to become their home; the grant
    /// says which move (those it alone wrote). Their bytes are kept from now until the grant if
    /// the copy is dropped meanwhile (see `keep_claimed_bytes`).
    pub(crate) fn claim_homes(&mut self, written: &[PageNum]) -> Vec<PageNum> {
        self.claims.clear();
        self.claims_overtaken.clear();
        if !self.cfg.migrates_homes() {
            return Vec::new();
        }
        let me = self.cfg.node;
        let claims: Vec<PageNum> = written
            .iter()
            .copied()
            .filter(|p| {
                let e = &self.table[p.index()];
                e.home != me
                    && e.fetch.is_none()
                    && matches!(e.frame, Frame::ReadOnly | Frame::ReadWrite)
                    && !self.holds_atomics(*p)
            })
            .collect();
        self.claims = claims.iter().map(|&p| (p, None)).collect();
        claims
    }

    /// A copy is about to be dropped: if this node claimed the page at its barrier and the
    /// grant has not come yet, its bytes are kept (they are the page's last bytes if it moves
    /// here: only this node wrote it, and every write is in it).
    fn keep_claimed_bytes(&mut self, page: PageNum) {
        if let Some(kept @ None) = self.claims.get_mut(&page)
            && self.table[page.index()].frame != Frame::Invalid
        {
            *kept = Some(self.mem.copy(page));
        }
    }

    /// Applies the decided home moves of a barrier (every node applies the same, in the same
    /// order, so every table agrees).
    fn apply_moves(&mut self, notices: &[WriteNotice]) {
        let me = self.cfg.node;
        for n in notices {
            let (Some(to), Some(e)) = (n.writer, self.table.get_mut(n.page.index())) else {
                continue;
            };
            if e.home == to {
                continue;
            }
            if to == me {
                self.become_home(n.page);
                continue;
            }
            if e.home == me {
                // Dropped as any copy by the notice that comes with the move.
                e.moved_away = true;
                e.served = false;
            }
            e.home = to;
        }
        self.claims.clear();
    }

    /// `page`, which this node alone wrote in the closing epoch, is homed here from now on.
    /// Every other copy is being dropped by the same grant, so it is writable untracked, as a
    /// freshly allocated home page is.
    fn become_home(&mut self, page: PageNum) {
        let me = self.cfg.node;
        let kept = self.claims.remove(&page).flatten();
        let e = &mut self.table[page.index()];
        e.home = me;
        e.moved_away = false;
        // A request still out for the page (the copy was dropped after the claim): its answer
        // is absorbed as a stale prefetch; its waiters go on now.
        let waiters = e.fetch.as_mut().map_or_else(Vec::new, |f| {
            f.stale = true;
            std::mem::take(&mut f.waiters)
        });
        let valid = matches!(e.frame, Frame::ReadOnly | Frame::ReadWrite);
        e.twin = None;
        e.touched = false;
        e.refreshed = false;
        e.unused_refetches = 0;
        e.served = false;
        e.frame = Frame::ReadWrite;
        self.table.cache_remove(page);
        // The copy here if still valid, else the bytes kept when it was dropped.
        match (valid, kept) {
            (true, _) => {}
            (false, Some(bytes)) => self.mem.write(page, 0, &bytes.0[..]),
            (false, None) => debug_assert!(false, "{page} moved here without its bytes"),
        }
        self.protect_pages(&[page], Prot::ReadWrite);
        self.stats.homes_moved_here += 1;
        for (w, _, _) in waiters {
            self.resume(w);
        }
    }

    /// A barrier grant proposes `proposed` (each page to its only writer): closes those pages
    /// here until the moves are decided, and returns the ones this node vetoes. A proposed page
    /// keeps its home if, since this node's barrier call, another thread of this node
    /// - diffed it (to the old home: the new home would miss the write),
    /// - wrote it and has not diffed it yet (the diff would leave before the decision),
    /// - wrote it here at its old home (the write is in no diff and would stay behind; a write
    ///   before the barrier call made this node a writer, and a page with two writers does not
    ///   move),
    ///
    /// or, moving here, the claimed copy was overtaken (named by a lock's grant since the claim:
    /// another node wrote it during the barrier) or the page was not claimed, or, moving away
    /// from here, another node's diff changed it since the last grant (a writer before its
    /// barrier call would have named it, so that write was made during the barrier). Closing
    /// first, then checking, leaves no gap: a later write faults and waits for the decision
    /// (`handle_fault`).
    pub(crate) fn close_moving_pages(&mut self, proposed: &[WriteNotice]) -> Vec<PageNum> {
        let me = self.cfg.node;
        // Home writes not yet seen (pages served untracked) become visible as writes.
        self.settle_serves();
        let pages: Vec<PageNum> = proposed.iter().map(|n| n.page).collect();
        self.protect_pages(&pages, Prot::None);
        // A home write the runtime's fast path made and has not reported yet (a fault handler
        // opened the page between the runtime's last report and this protection) is a write
        // here since the barrier call.
        for &p in &pages {
            if self.table[p.index()].home == me && self.mem.opened_unreported(p) {
                self.handle_home_write(p);
            }
        }
        let diffed = std::mem::take(&mut self.sync.diffed_in_barrier);
        let overtaken = std::mem::take(&mut self.claims_overtaken);
        let diffed_here = std::mem::take(&mut self.sync.diffed_here);
        let mut vetoes = Vec::new();
        for n in proposed {
            let p = n.page;
            let e = &self.table[p.index()];
            let at_old_home = e.home == me;
            let veto = diffed.contains(&p)
                || self.holds_atomics(p)
                || (!at_old_home && self.rw.contains(&p))
                || (at_old_home && self.written.contains_key(&p))
                || (n.writer == Some(me) && overtaken.contains(&p))
                // Node 0 proposes a move only to a node that claimed the page.
                || (n.writer == Some(me) && !self.claims.contains_key(&p))
                || (at_old_home
                    && diffed_here
                        .range((p, NodeId(0))..=(p, NodeId(u16::MAX)))
                        .any(|&(_, from)| Some(from) != n.writer));
            if veto {
                vetoes.push(p);
                self.reopen(p);
            } else {
                self.sync.moving.insert(p, Vec::new());
            }
        }
        self.stats.home_moves_vetoed += vetoes.len() as u64;
        vetoes
    }

    /// Opens `page` as its frame says.
    fn reopen(&mut self, page: PageNum) {
        let prot = match self.table[page.index()].frame {
            Frame::ReadWrite => Prot::ReadWrite,
            Frame::ReadOnly => Prot::Read,
            Frame::Prefetched | Frame::Invalid => return,
        };
        self.protect_pages(&[page], prot);
    }

    /// Applies the moves the barrier's grant proposed that no node vetoed, opens the pages
    /// closed for the decision, lets the faults waiting for them go on, and serves the requests
    /// and diffs held for them.
    pub(crate) fn apply_decided_moves(
        &mut self,
        now: Time,
        vetoed: &[PageNum],
    ) -> Result<(), ProtocolError> {
        let me = self.cfg.node;
        let vetoed: BTreeSet<PageNum> = vetoed.iter().copied().collect();
        let moves: Vec<WriteNotice> = std::mem::take(&mut self.sync.proposed_moves)
            .into_iter()
            .filter(|n| !vetoed.contains(&n.page))
            .collect();
        let leaving: Vec<PageNum> = moves
            .iter()
            .filter(|n| self.table[n.page.index()].home == me)
            .map(|n| n.page)
            .collect();
        self.apply_moves(&moves);
        // The old home's copy is dropped as any copy is.
        self.invalidate(now, leaving);
        let moving = std::mem::take(&mut self.sync.moving);
        for (&page, waiters) in &moving {
            self.reopen(page);
            for &(w, access) in waiters {
                // Allocated (it faulted before): a retry cannot fail.
                let retried = self.handle_fault(now, page, access, w);
                debug_assert!(retried.is_ok(), "{retried:?}");
            }
        }
        self.make_held_atomics(now);
        for (from, msg) in std::mem::take(&mut self.sync.held_for_moves) {
            self.dispatch(now, from, msg)?;
        }
        Ok(())
    }

    /// A page request, diff, refused forward or atomic operation from a node that has such a
    /// message held for the moves: held behind it, whatever its pages, so that the sender's
    /// messages keep their order. (A relaxed atomic operation on a word whose page was not
    /// moving was applied before the sender's diff of that word, held for another page it
    /// carried: the operation missed the sender's own store, and the late diff tore the word;
    /// the simulator's `mixed_sync` seed 1234071054.)
    pub(crate) fn behind_held(&self, from: NodeId, msg: &Msg) -> bool {
        matches!(
            msg,
            Msg::GetPage { .. }
                | Msg::Diff { .. }
                | Msg::ForwardRefused { .. }
                | Msg::Atomic { .. }
        ) && self.sync.held_for_moves.iter().any(|(f, _)| *f == from)
    }

    /// A page request or diff for a page whose move is being decided (held until it is: see
    /// `SyncState::held_for_moves`).
    pub(crate) fn is_for_moving_pages(&self, msg: &Msg) -> bool {
        if self.sync.moving.is_empty() {
            return false;
        }
        match msg {
            Msg::GetPage { pages, .. } => pages.iter().any(|p| self.sync.moving.contains_key(p)),
            Msg::Diff { diffs, .. } => diffs.iter().any(|d| self.sync.moving.contains_key(&d.page)),
            Msg::ForwardRefused { first, count, .. } => {
                (0..u32::from(*count)).any(|i| self.sync.moving.contains_key(&PageNum(first.0 + i)))
            }
            Msg::Atomic { addr, .. } => self.sync.moving.contains_key(&GlobalAddr(*addr).page()),
            _ => false,
        }
    }
}

const _: () = assert!(PAGE_SIZE <= u16::MAX as usize + 1);
