//! Mutable slices under the checker: a snapshot of a slice's bytes when it is taken, compared
//! when its guard (the runtime's `SliceMut`) is dropped or its thread's segment ends; the elements
//! that changed are its writes (leaving out what the protocol wrote meanwhile, `incoming`).

use std::sync::atomic::Ordering;

use super::incoming::{
    self, CameIn, incoming_now, incoming_since, nothing_since, this_threads_changes,
};
use super::{
    BASE, CHECKER, Checker, From, LEN, PAGE, PageBits, Recorder, changed_bits, on, with_recorder,
};

/// A mutable slice a thread holds: its offset in the region, where its bytes as they were lie
/// in [`Recorder::snapshot_bytes`], its length, where it was taken, and its number.
pub(super) struct Snapshot {
    pub id: u32,
    /// The [`incoming_write`] log's count when its bytes were copied: bytes the protocol wrote since
    /// are not the thread's.
    seq: u64,
    off: usize,
    at: usize,
    len: usize,
    /// The size of the slice's elements.
    element: usize,
    from: From,
}

/// A mutable slice's snapshot, held by the slice's guard (the runtime's `SliceMut`) until it is
/// dropped.
#[derive(Debug)]
pub struct Taken {
    thread: u32,
    id: u32,
}

/// A mutable slice of `bytes.len()` bytes at `addr` was taken at `from`, holding `bytes`: the
/// bytes it changes are recorded as its writes, when it is dropped ([`slice_dropped`]) or, for
/// the part done by then, when its thread's segment ends. Reads through it are not seen;
/// recording the whole slice would claim bytes it never touches, as the other colour of a
/// red-black SOR row. `None`: not recorded (checking off, or not shared memory).
pub fn slice_taken(addr: usize, bytes: &[u8], element: usize, from: From) -> Option<Taken> {
    if !on() {
        return None;
    }
    let off = addr.wrapping_sub(BASE.load(Ordering::Relaxed));
    if off >= LEN.load(Ordering::Relaxed) || bytes.is_empty() {
        return None;
    }
    with_recorder(|r, c| {
        r.catch_up_with(c);
        let id = r.next_snapshot;
        r.next_snapshot = r.next_snapshot.wrapping_add(1);
        incoming::slice_taken();
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
pub fn slice_dropped(taken: Taken) {
    with_recorder(|r, c| {
        if r.thread != taken.thread {
            return;
        }
        r.catch_up_with(c);
        let Some(k) = r.snapshots.iter().rposition(|s| s.id == taken.id) else {
            return;
        };
        let t = r.snapshots.remove(k);
        let then = std::mem::take(&mut r.snapshot_bytes);
        c.region.with_bytes(t.off, t.len, |now| {
            r.compare_snapshot(c, &t, &then[t.at..t.at + t.len], now);
        });
        // Counted as held until compared: a diff applied here between would change `now`
        // unlogged, and the thread would claim its bytes (a home's slice claimed another node's
        // write under load, 7 runs in 1,000).
        incoming::slices_dropped(1);
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

impl Recorder {
    /// The bytes the slices this thread holds changed in the segment that ends, recorded as
    /// their writes; their snapshots then start again from the bytes as they are (what they
    /// change later belongs to a later segment).
    pub(super) fn compare_snapshots(&mut self) {
        let Some(c) = CHECKER.get() else { return };
        let snapshots = std::mem::take(&mut self.snapshots);
        let mut then = std::mem::take(&mut self.snapshot_bytes);
        let mut snapshots = snapshots;
        for t in &mut snapshots {
            let seq = incoming_now();
            c.region.with_bytes(t.off, t.len, |now| {
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
    pub(super) fn resnapshot(&mut self) {
        let Some(c) = CHECKER.get() else { return };
        for t in &mut self.snapshots {
            t.seq = incoming_now();
            c.region.with_bytes(t.off, t.len, |now| {
                self.snapshot_bytes[t.at..t.at + t.len].copy_from_slice(now);
            });
        }
    }

    /// Records as writes the elements of slice `t` that differ between `then` and `now` (an
    /// element whose low bytes alone changed was written whole: the program stores elements).
    fn compare_snapshot(&mut self, c: &Checker, t: &Snapshot, then: &[u8], now: &[u8]) {
        let (off, from) = (t.off, t.from);
        let end = off + then.len();
        // Pages the protocol may have written since the snapshot: their bits, and their bytes
        // as compared, copied (the protocol may write them again before its log is read).
        let mut changed_pages: Vec<(u32, Box<PageBits>, Vec<u8>)> = Vec::new();
        let mut at = off;
        while at < end {
            let page = (at / PAGE) as u32;
            let stop = end.min((page as usize + 1) * PAGE);
            let (a, b) = (&then[at - off..stop - off], &now[at - off..stop - off]);
            let mut changed: PageBits = [0; PAGE / 64];
            if changed_bits(a, b, at % PAGE, t.element, &mut changed) {
                if nothing_since(t.seq) {
                    // The protocol wrote nothing since the snapshot (its writes are logged
                    // before they are made): all of it is this thread's.
                    let bits = self.bits_for(c, page, true, from);
                    for (w, x) in bits.iter_mut().zip(changed.iter()) {
                        *w |= x;
                    }
                } else {
                    changed_pages.push((page, Box::new(changed), b.to_vec()));
                }
            }
            at = stop;
        }
        if changed_pages.is_empty() {
            return;
        }
        // What the protocol wrote in these pages since the snapshot (another node's diff
        // applied here, a page fetched) is not this thread's: read after the bytes compared
        // were copied, so that every write they hold is logged (a write landing after, in the
        // live bytes, would have been claimed). `None`: too much to know; nothing is claimed.
        let Some(came_in) = incoming_since(t.seq, off / PAGE, end.div_ceil(PAGE)) else {
            return;
        };
        let e = t.element.clamp(1, 8);
        for (page, mut changed, now) in changed_pages {
            let mine: Vec<&CameIn> = came_in.iter().filter(|w| w.page == page).collect();
            if !mine.is_empty() {
                let start = (page as usize * PAGE).max(off);
                let stop = end.min((page as usize + 1) * PAGE);
                *changed = this_threads_changes(
                    &then[start - off..stop - off],
                    &now,
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
}
