//! Where a runtime with fast paths meets the core: the hooks a runtime calls beside the
//! protocol's inputs. A runtime that opens pages in its fault handler by itself (see
//! [`PageMemory::allow_home_write`] and [`PageMemory::allow_prefetch_open`]) reports it here; one
//! that reads pages one-sided (RDMA) hands them in here; one that sends its grants before it
//! protects the pages served settles them here; and its own counters travel with the core's.
//! A runtime without these needs none of them (the simulator uses them to check the fast
//! paths). And the launcher's word to the nodes of a job none of whose nodes works (each sends
//! its writes home, then those that run drop their copies) comes in here.

use std::collections::BTreeMap;

use crate::codec;
use crate::error::ProtocolError;
use crate::memory::PageMemory;
use crate::msg::{Msg, MsgKind};
use crate::node::Node;
use crate::table::{Frame, GrantSource};
use crate::types::{Access, MAX_RUNTIME_COUNTERS, NodeId, PAGE_SIZE, PageNum, Prot, Time};

impl<M: PageMemory> Node<M> {
    /// The runtime opened home page `page` for writing by itself (see
    /// [`PageMemory::allow_home_write`]): record the write as a write fault would have.
    pub fn handle_home_write(&mut self, page: PageNum) {
        let me = self.cfg.node;
        let Some(e) = self.table.get_mut(page.index()) else {
            return;
        };
        if e.home != me {
            return;
        }
        if e.frame == Frame::ReadOnly {
            e.frame = Frame::ReadWrite;
            self.rw.insert(page);
        }
        self.mark_written(page);
        self.stats.write_faults_local += 1;
    }

    /// The runtime opened prefetched page `page` for a reader by itself (see
    /// [`PageMemory::allow_prefetch_open`]): count the use and read further ahead. `faulted`:
    /// a read fault on this page did it (otherwise it was opened along with the faulting page
    /// before it, and counts as used but not as a fault). If the page was dropped meanwhile, the
    /// core closed it again and there is nothing to do.
    pub fn handle_prefetch_opened(&mut self, now: Time, page: PageNum, faulted: bool) {
        let Some(e) = self.table.get_mut(page.index()) else {
            return;
        };
        if e.frame != Frame::Prefetched {
            return;
        }
        e.frame = Frame::ReadOnly;
        e.touched |= faulted;
        self.mem.opened_by_handler(page);
        self.read_after_drop(page);
        self.stats.prefetch_used += 1;
        if faulted {
            self.count_local_fault(Access::Read);
        }
        self.read_ahead_unless_refreshed(now, page);
        self.drain_loopback(now);
    }

    /// Drops every copy of another node's page this node holds (read-only, prefetched, or
    /// written: those send their diff first), as an eviction would, but for pages with a fetch
    /// out: the next read of each fetches it from its home, with whatever the home holds then.
    /// Returns how many it dropped. The launcher asks for it when this node has run for a
    /// while on the pages it held, while every other node waited or did the same: a thread reading
    /// another node's word in a loop, on plain loads, sees no write of that node before an
    /// acquire of its own, which it may never make (see the runtime's `progress`). Any copy
    /// may be dropped at any time: the model lets a read return a value newer than its last
    /// acquire promises.
    ///
    /// A digest of each byte of each copy is kept until a thread's read fault brings the page
    /// again (the runtime names the byte read: [`Node::reading_dropped`]), or the node's next
    /// acquire: [`Node::take_dropped_changed`] then tells the pages whose byte read came back
    /// changed (another node's write the node would not have seen; not another byte of the
    /// page, its word or its cache line, which other nodes may write beside this one's reads).
    /// The copies are protected before they are digested: a store of a thread that runs
    /// meanwhile is in the digest and the diff, or faults.
    pub fn drop_copies(&mut self, now: Time) -> usize {
        let pages = self.copies(|frame| frame != Frame::Invalid);
        self.protect_pages(&pages, Prot::None);
        let mut kept = BTreeMap::new();
        for &page in &pages {
            self.mem.read(page, &mut self.scratch);
            kept.insert(page, ByteDigests::of_page(&self.scratch));
        }
        self.dropped = kept;
        self.dropped_reads.clear();
        self.invalidate(now, pages.iter().copied());
        pages.len()
    }

    /// A thread's read fault on `page` asked for its byte `offset`: if [`Node::drop_copies`]
    /// dropped the page, that byte is compared when the page comes back. Call it before
    /// the fault's [`Node::handle_fault`].
    pub fn reading_dropped(&mut self, page: PageNum, offset: usize) {
        if !self.dropped.is_empty() && self.dropped.contains_key(&page) {
            self.dropped_reads.entry(page).or_insert(offset % PAGE_SIZE);
        }
    }

    /// Sends the diffs of the copies of other nodes' pages this node wrote (but those with a
    /// fetch out) to the pages' homes, as a release does, keeping them read-only: the next
    /// write to one makes a twin again. Returns how many. The launcher asks every node of a
    /// job none of whose nodes works for it: its write may be what another node's thread waits
    /// for on plain loads, unreleased (its release would come after the lock the spinner
    /// holds, or after the spinner's answer). The copies are protected before they are diffed:
    /// a store of a thread that runs meanwhile is in the diff or faults. They stay, so that a
    /// node told to drop them next keeps their digests ([`Node::drop_copies`]).
    pub fn send_written_copies(&mut self, now: Time) -> usize {
        let pages = self.copies(|frame| frame == Frame::ReadWrite);
        self.protect_pages(&pages, Prot::Read);
        for &page in &pages {
            self.rw.remove(&page);
            self.table[page.index()].frame = Frame::ReadOnly;
            self.diff_page(page);
        }
        self.send_diffs(now);
        pages.len()
    }

    /// The pages of other nodes this node holds a copy of in a `frame` that `keep` accepts, with
    /// no fetch out.
    fn copies(&self, keep: impl Fn(Frame) -> bool) -> Vec<PageNum> {
        let me = self.cfg.node;
        (0..self.table.len())
            .filter(|&i| {
                let e = &self.table[i];
                e.home != me && e.fetch.is_none() && keep(e.frame)
            })
            .map(|i| PageNum(i as u32))
            .collect()
    }

    /// The pages dropped by [`Node::drop_copies`] that a thread's read fault brought again with
    /// another value in the byte it read, with that byte, since the last call.
    pub fn take_dropped_changed(&mut self) -> Vec<(PageNum, usize)> {
        std::mem::take(&mut self.dropped_changed)
    }

    /// `page` is back for a thread, just granted or opened: if [`Node::drop_copies`] dropped it
    /// and a read fault named the byte it reads, whether that byte is the dropped copy's.
    pub(crate) fn read_after_drop(&mut self, page: PageNum) {
        if self.dropped.is_empty() {
            return;
        }
        let Some(held) = self.dropped.remove(&page) else {
            return;
        };
        let Some(offset) = self.dropped_reads.remove(&page) else {
            return;
        };
        self.mem.read(page, &mut self.scratch);
        if byte_digest(self.scratch[offset % PAGE_SIZE]) != held.of(offset)
            && self.dropped_changed.len() < DROPPED_CHANGED_KEPT
        {
            self.dropped_changed.push((page, offset));
        }
    }

    /// Forgets the copies [`Node::drop_copies`] dropped: an acquire, from which on what a page
    /// read holds is what the node may see.
    pub(crate) fn forget_dropped(&mut self) {
        self.dropped.clear();
        self.dropped_reads.clear();
    }

    /// Brings into the cache the page a sequential reader will ask for next (see
    /// [`PageMemory::warm`]): call it once the grants are sent, off their path. A page from
    /// memory takes 0.5 us to copy here, 0.1 us from the cache; faultlat's reads of pages the
    /// home wrote long ago: 0.2-0.25 us less from GETP read to grant sent.
    pub fn warm_ahead(&mut self) {
        if let Some(page) = self.to_warm.take() {
            self.mem.warm(page);
        }
    }

    /// Starts tracking the writes to the home pages served untracked since the last call: call
    /// it once their grants are sent. Each page is protected (in ranges, with the home's
    /// untracked pages between it and a tracked one near it: `Node::protect_to_track`); one
    /// whose bytes differ
    /// from those sent was written in between, and is recorded as written (its copies will be
    /// invalidated at the next release) and left open. Runs by itself before anything that
    /// needs the tracking (a release, a diff applied here).
    pub fn settle_serves(&mut self) {
        if self.unsettled.is_empty() {
            return;
        }
        let mut unsettled = std::mem::take(&mut self.unsettled);
        // Only pages still as they were served (each is queued once, at its first serve).
        unsettled.retain(|(p, _, _)| self.table[p.index()].served && self.writes_untracked(*p));
        let pages: Vec<PageNum> = unsettled.iter().map(|(p, _, _)| *p).collect();
        self.protect_to_track(&pages);
        let mut written = Vec::new();
        for (page, sent, at) in &unsettled {
            self.mem.read(*page, &mut self.scratch);
            if self.scratch[..] == sent[*at..*at + PAGE_SIZE] {
                self.table[page.index()].frame = Frame::ReadOnly;
                self.mem.allow_home_write(*page);
            } else {
                written.push(*page);
            }
        }
        // Written between the copy and the protection: as if the write had come just after.
        self.protect_pages(&written, Prot::ReadWrite);
        for page in written {
            self.rw.insert(page);
            self.mark_written(page);
            self.stats.home_writes_found_at_settle += 1;
        }
    }

    /// Whether a GETP for `pages` may go as one-sided reads of the home's memory
    /// ([`crate::CoreConfig::remote_reads`]): not if one of them must be asked of its home as
    /// a message (a read of it could not be placed among this node's atomic operations, or
    /// could overtake this node's diff of it on its way home).
    pub fn may_read_one_sided(&self, pages: &[PageNum]) -> bool {
        !pages
            .iter()
            .any(|p| self.ask_home.contains(p) || self.diffs_on_their_way.contains_key(p))
    }

    /// The runtime carried `msg` (just taken from [`Node::poll_transmit`]) otherwise than as
    /// its frame: a GETP as one-sided reads of the home's memory, which never go on the wire,
    /// or a page grant as grants in place (frames without the pages, which their receiver
    /// reads in this node's memory; joined with others or split, each counted by
    /// [`Node::frame_sent`]). It leaves the message counts, which stay those of the wire.
    pub fn carried_otherwise(&mut self, msg: &Msg) {
        let k = msg.kind().index();
        self.stats.msgs_sent[k] = self.stats.msgs_sent[k].saturating_sub(1);
        self.stats.bytes_sent[k] =
            self.stats.bytes_sent[k].saturating_sub(codec::frame_len(msg) as u64);
    }

    /// A frame of `bytes` of kind `kind` the runtime sent in place of messages taken out of
    /// the counts ([`Node::carried_otherwise`]).
    pub fn frame_sent(&mut self, kind: MsgKind, bytes: usize) {
        self.stats.msgs_sent[kind.index()] += 1;
        self.stats.bytes_sent[kind.index()] += bytes as u64;
    }

    /// Pages read one-sided from `from`'s memory (see [`crate::CoreConfig::remote_reads`]): a
    /// run of whole pages from `page`, handled as the home's grant would be, counted as reads,
    /// not as a message.
    pub fn handle_page_read(
        &mut self,
        now: Time,
        from: NodeId,
        page: PageNum,
        data: &[u8],
    ) -> Result<(), ProtocolError> {
        if from.0 >= self.cfg.nodes || from == self.cfg.node {
            return Err(ProtocolError {
                from,
                kind: MsgKind::GetPageGrant,
                why: "page read from a node outside the job or from this one",
            });
        }
        self.stats.pages_read_one_sided += (data.len() / PAGE_SIZE) as u64;
        let result = self.on_page_grant(now, from, (page, data, GrantSource::OneSided));
        self.drain_loopback(now);
        result
    }

    /// The runtime's own counters now (the transport's retransmissions, driven faults...), sent
    /// to node 0 at exit beside the core's statistics and handed back in
    /// [`crate::Effect::JobStats`]; the core does not read them. At most
    /// [`MAX_RUNTIME_COUNTERS`].
    pub fn note_runtime_counters(&mut self, counters: Vec<u64>) {
        self.runtime_counters = counters;
        self.runtime_counters.truncate(MAX_RUNTIME_COUNTERS);
    }
}

/// The pages read again with other bytes after [`Node::drop_copies`] kept until taken.
pub(crate) const DROPPED_CHANGED_KEPT: usize = 64;

/// A two-bit digest of each byte of a page, four to a byte (1 KiB a page, a quarter of the
/// copy dropped): the byte a read fault touched is compared, not its word or its 64-byte line,
/// which other nodes may write beside it race-free (a byte read beside one another node wrote
/// in its word, and a word beside one in its line, were told).
pub(crate) struct ByteDigests(Box<[u8; PAGE_SIZE / 4]>);

impl ByteDigests {
    /// The digests of `bytes`.
    fn of_page(bytes: &[u8; PAGE_SIZE]) -> ByteDigests {
        let mut out = Box::new([0u8; PAGE_SIZE / 4]);
        for (d, four) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *d = four
                .iter()
                .enumerate()
                .fold(0, |d, (k, &b)| d | byte_digest(b) << (k * 2));
        }
        ByteDigests(out)
    }

    /// The digest of byte `offset`.
    fn of(&self, offset: usize) -> u8 {
        let at = offset % PAGE_SIZE;
        (self.0[at / 4] >> (at % 4 * 2)) & 3
    }
}

/// A byte folded to two bits by exclusive or: a change of one bit, or of a small count (0 to 1,
/// 1 to 2, 2 to 3...), always shows; one that flips bits in pairs across the fold (0 to 5)
/// does not, nor a change of another byte of a wider word (0 to 256).
fn byte_digest(b: u8) -> u8 {
    let d = b ^ (b >> 4);
    (d ^ (d >> 2)) & 3
}
