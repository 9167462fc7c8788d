//! The protocol's writes under a live mutable slice: bytes another node's diff writes in place
//! at the home, or a fetched page, are logged (with what they replaced and left), and a slice's
//! snapshot compare claims them only if its own thread wrote them.

use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

use super::{PAGE, PageBits, on};

/// The elements of one page (bytes `then`/`now` from byte `lo` of it) that this thread
/// changed, given the protocol's writes to it logged since the snapshot's count (`came_in`,
/// oldest first). The snapshot and the bytes now were each copied somewhere along them: some
/// may have landed before the snapshot (a count taken while writes were copying looks back),
/// some after the bytes now were copied (the log is read after). The writes to a byte form a
/// chain, each finding what the one before left, unless something else wrote the byte between
/// them (a break). A byte that differs is this thread's if the snapshot holds no value of the
/// chain since its last break (the thread wrote it after its snapshot, before one of them), or
/// if the byte now holds none (after them). Not seen: a thread writing the very value another
/// node wrote, or a value another node then wrote back (its write found by a write that a
/// second one undid). A byte written by a write whose bytes are no longer kept is not claimed,
/// nor one equal in the snapshot and now (a write looked back at, followed by one unlogged
/// while no slice was held, leaves a chain that holds neither). Then whole elements of
/// `element` bytes.
#[cold]
#[inline(never)]
pub(super) fn this_threads_changes(
    then: &[u8],
    now: &[u8],
    lo: usize,
    came_in: &[&CameIn],
    element: usize,
) -> PageBits {
    let mut last_after = [0u8; PAGE];
    let mut covered: PageBits = [0; PAGE / 64];
    // The snapshot's byte, and the byte now, are values of the chain since its last break.
    let mut seen: PageBits = [0; PAGE / 64];
    let mut seen_now: PageBits = [0; PAGE / 64];
    let mut unknown: PageBits = [0; PAGE / 64];
    let bit = |bits: &PageBits, x: usize| bits[x / 64] >> (x % 64) & 1 == 1;
    let set = |bits: &mut PageBits, x: usize, on: bool| {
        if on {
            bits[x / 64] |= 1 << (x % 64);
        } else {
            bits[x / 64] &= !(1 << (x % 64));
        }
    };
    for w in came_in {
        for x in w.lo.max(lo)..w.hi.min(lo + then.len()) {
            match &w.images {
                Some((before, after)) => {
                    let (before, after) = (before[x - w.lo], after[x - w.lo]);
                    let (a, b) = (then[x - lo], now[x - lo]);
                    let broken = bit(&covered, x) && before != last_after[x];
                    let was = bit(&seen, x) && !broken;
                    set(&mut seen, x, was || a == before || a == after);
                    let was = bit(&seen_now, x) && !broken;
                    set(&mut seen_now, x, was || b == before || b == after);
                    set(&mut covered, x, true);
                    last_after[x] = after;
                }
                None => set(&mut unknown, x, true),
            }
        }
    }
    let mut mine: PageBits = [0; PAGE / 64];
    for (i, (&a, &b)) in then.iter().zip(now).enumerate() {
        let x = lo + i;
        let claimed = if bit(&unknown, x) || a == b {
            false
        } else if bit(&covered, x) {
            !bit(&seen, x) || !bit(&seen_now, x)
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

/// Entries of the [`incoming_write`] log (a power of two).
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
pub(super) struct CameIn {
    pub page: u32,
    pub lo: usize,
    pub hi: usize,
    pub images: Option<(Vec<u8>, Vec<u8>)>,
}

/// Mutable slices held by this node's threads (nothing is logged when there are none).
static LIVE_SNAPSHOTS: AtomicUsize = AtomicUsize::new(0);

/// The protocol's writes copying unlogged (they found no slice held). A slice taken waits for
/// them before it copies its bytes ([`slice_taken`]): one of them landing after (its writer
/// preempted between its look and its copy) would change the snapshot's bytes with no entry
/// to say so, and the thread would claim them.
static UNLOGGED_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// A write of the protocol's into the shared region under way (see [`incoming_write`]): the
/// bytes are copied while it lives.
#[must_use = "the write is logged as copying until this is dropped"]
pub struct IncomingWrite {
    copying: Copying,
}

/// How an [`IncomingWrite`] is counted while it copies.
enum Copying {
    /// Not counted: checking is off, or nothing is written.
    Uncounted,
    /// Logged, in the log's `in_flight`.
    Logged,
    /// Unlogged, in [`UNLOGGED_IN_FLIGHT`].
    Unlogged,
}

impl Drop for IncomingWrite {
    /// The copy is done. Signal context: one atomic.
    fn drop(&mut self) {
        match self.copying {
            Copying::Uncounted => {}
            Copying::Logged => {
                INCOMING_LOG.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
            Copying::Unlogged => {
                UNLOGGED_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// The protocol is about to write `after` over `before`, the bytes at `offset` of page `page`
/// of shared memory (a page or a diff that came in: no thread's write). The caller copies while
/// the result lives. Logged before the copy when a slice is held (a compare that sees the bytes
/// changed finds the entry), with the bytes it replaces. Signal context (the fault path may
/// apply what it fetched): atomics only, no wait.
#[inline]
pub fn incoming_write(page: usize, offset: usize, before: &[u8], after: &[u8]) -> IncomingWrite {
    let len = after.len();
    if !on() || len == 0 {
        return IncomingWrite {
            copying: Copying::Uncounted,
        };
    }
    // Counted before the look at the slices held, as a slice taken counts itself before it
    // looks at this count (both sequentially consistent): either this write sees the slice and
    // logs itself, or the slice sees this write copying and waits for it.
    UNLOGGED_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    if LIVE_SNAPSHOTS.load(Ordering::SeqCst) == 0 {
        return IncomingWrite {
            copying: Copying::Unlogged,
        };
    }
    let log = &INCOMING_LOG;
    log.in_flight.fetch_add(1, Ordering::SeqCst);
    UNLOGGED_IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
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
    // The entry is seen before any byte of the copy that follows (a compare that sees a byte
    // finds its entry: a release store alone lets later plain stores pass it on weakly ordered
    // machines; x86 keeps the order anyway). Its pair: the fence in `log_after_bytes`.
    std::sync::atomic::fence(Ordering::SeqCst);
    IncomingWrite {
        copying: Copying::Logged,
    }
}

/// Called by a compare between reading a slice's bytes and reading the log: the bytes read are
/// not taken from after the log's read (the pair of the fence after an entry is logged).
#[inline]
fn log_after_bytes() {
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// How far back a snapshot taken while writes were still copying looks: more than the
/// protocol's writes that can be copying at once (the fault handlers of a node's threads and
/// its service thread).
const INCOMING_IN_FLIGHT: u64 = 256;

/// The [`incoming_write`] log's count for a snapshot taken now: the entries logged before it, less
/// [`INCOMING_IN_FLIGHT`] if some may still be copying (they may change its bytes after it is
/// taken; with none, a compare with no entry since skips the log).
pub(super) fn incoming_now() -> u64 {
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
pub(super) fn incoming_since(since: u64, first: usize, end: usize) -> Option<Vec<CameIn>> {
    log_after_bytes();
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
                crate::sys::nap_us(1);
            } else {
                std::hint::spin_loop();
            }
        }
        let before = log.seqs[slot].load(Ordering::SeqCst);
        let span = log.spans[slot].load(Ordering::SeqCst);
        let at = log.images[slot].load(Ordering::SeqCst);
        let page = (span >> 32) as usize;
        let (lo, hi) = (
            (span >> 16) as usize & 0xffff,
            (span as usize & 0xffff).min(PAGE),
        );
        let len = hi.saturating_sub(lo);
        let wanted = (first..end).contains(&page);
        let images = (wanted && at != u64::MAX).then(|| {
            let mut bytes: Vec<u8> = (0..2 * len)
                .map(|i| log.image[(at as usize + i) % IMAGE_BYTES].load(Ordering::Relaxed))
                .collect();
            let after = bytes.split_off(len);
            (bytes, after)
        });
        // Bytes written over by later writes since: not known any more.
        let overwritten = at != u64::MAX
            && log.image_next.load(Ordering::SeqCst) - at > (IMAGE_BYTES - 2 * len) as u64;
        // The entry changed while it was read: nothing of it is known.
        if before != n + 1 || log.seqs[slot].load(Ordering::SeqCst) != before {
            return None;
        }
        if wanted {
            out.push(CameIn {
                page: page as u32,
                lo,
                hi,
                images: images.filter(|_| !overwritten),
            });
        }
    }
    Some(out)
}

/// Whether the protocol logged no write since a snapshot's count `seq`.
#[inline]
pub(super) fn nothing_since(seq: u64) -> bool {
    log_after_bytes();
    INCOMING_LOG.next.load(Ordering::SeqCst) == seq
}

/// A thread takes a mutable slice, before it copies the slice's bytes: the protocol's writes
/// are logged from now on, and those that began unlogged are done when this returns (a copy of
/// a page at most, by another thread: waited for a second at most, yielding after a few
/// microseconds; past that, the slice goes on and may claim what such a write changes).
pub(super) fn slice_taken() {
    LIVE_SNAPSHOTS.fetch_add(1, Ordering::SeqCst);
    let mut waited = None;
    let mut spins = 0u32;
    while UNLOGGED_IN_FLIGHT.load(Ordering::SeqCst) != 0 {
        if spins < 256 {
            spins += 1;
            std::hint::spin_loop();
            continue;
        }
        let since = *waited.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() > std::time::Duration::from_secs(1) {
            break;
        }
        std::thread::yield_now();
    }
}

/// `n` mutable slices were dropped (or their thread ended).
pub(super) fn slices_dropped(n: usize) {
    LIVE_SNAPSHOTS.fetch_sub(n, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs_of;

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
        // Writes logged before the snapshot was copied (a count taken while one was copying
        // looks back): the snapshot holds a later value of the chain, not the first's.
        let (w1, w2, w3) = (
            came(1, &[1], &[2]),
            came(1, &[2], &[3]),
            came(1, &[3], &[4]),
        );
        assert_eq!(
            claimed(&[0, 3, 0, 0], &[0, 4, 0, 0], &[&w1, &w2, &w3]),
            vec![]
        );
        // The thread wrote 7 between two of them, after its snapshot: a break in the chain.
        let w7 = came(1, &[7], &[8]);
        assert_eq!(
            claimed(&[0, 2, 0, 0], &[0, 8, 0, 0], &[&w1, &w2, &w7]),
            vec![(1, 2)]
        );
        // A break before the snapshot (what the thread wrote under an earlier slice, or
        // another thread before it): the snapshot holds a value after it.
        assert_eq!(claimed(&[0, 8, 0, 0], &[0, 8, 0, 0], &[&w1, &w7]), vec![]);
        // The bytes now copied after one write, the log read after a second (finding both):
        // the byte now is a value of the chain, not the last one's.
        assert_eq!(claimed(&[0, 1, 0, 0], &[0, 2, 0, 0], &[&w1, &w2]), vec![]);
        // ... and the thread's own byte is still its own.
        assert_eq!(
            claimed(&[0, 1, 0, 0], &[0, 6, 0, 0], &[&w1, &w2]),
            vec![(1, 2)]
        );
        // A write looked back at, then one unlogged (no slice held): the chain holds neither
        // the snapshot's byte nor the byte now, which are equal; a byte the thread changed is
        // its own.
        assert_eq!(claimed(&[0, 5, 0, 0], &[0, 5, 0, 0], &[&w1]), vec![]);
        assert_eq!(claimed(&[0, 5, 0, 0], &[0, 6, 0, 0], &[&w1]), vec![(1, 2)]);
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
}
