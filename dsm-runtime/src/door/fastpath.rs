//! Fault fast paths: faults the fault handler resolves by itself with one mprotect, reported to
//! the service thread afterwards, without waking the faulting thread's partner or waiting for it.
//!
//! - A write to a home page that is read-only only so that writes to it are seen
//!   (`PageMemory::allow_home_write`): opened read-write.
//! - A read of a prefetched page, valid but closed so its first touch is seen
//!   (`PageMemory::allow_prefetch_open`): opened read-only.
//!
//! One byte of state per page: 0 none, 1 home-write allowed, 4 prefetch-open allowed, 6 the same
//! for the read-ahead's marker, 2 and 5 a handler is opening it, 3 opened and queued for the
//! service thread. A handler claims a page (1 -> 2, 4 or 6 -> 5), mprotects, marks it 3 and
//! queues it. It wakes the service thread for a home write, for the marker (the next window is
//! to be asked for now) and when 512 reports wait; other reads of prefetched pages wait for
//! its next pass (in a stream, the next grant), which spares the faulting thread's CPU a wake-up
//! and a switch per fault. A read claims the prefetched pages right after the faulting one too
//! (each 4 -> 5), or, if none is, those right before it (a walk down through memory), opens the
//! run with one mprotect and queues each page (those without a fault of their own marked as
//! opened along). Before the core changes a page's
//! protection, `withdraw` takes the allowance back, waiting out an opening in progress so the
//! core's mprotect always comes last. The service thread takes the queue before every request (so a
//! thread's writes are recorded before its next release) and at every loop. The handler side uses
//! atomics and syscalls only: async-signal-safe.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};

/// Room for every thread's opening at once (`MAX_THREADS`) and the runs read faults open.
const QUEUE: usize = 4096;
/// Reports queued from which every opening wakes the service thread (a crowded queue).
const CROWDED: usize = 512;
const PREFETCH_BIT: u64 = 1 << 40;
const ALONG_BIT: u64 = 1 << 41;

const NONE: u8 = 0;
const HOME_WRITE: u8 = 1;
const HOME_OPENING: u8 = 2;
const OPENED: u8 = 3;
const PREFETCH_OPEN: u8 = 4;
const PREFETCH_OPENING: u8 = 5;
const PREFETCH_OPEN_WAKE: u8 = 6;

/// What a fast-path fault did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// A home page opened for writing.
    HomeWrite(usize),
    /// A prefetched page opened for reading.
    Prefetch(usize),
    /// A prefetched page opened along with the one before it (no fault of its own).
    PrefetchAlong(usize),
}

/// One byte per page of the region (`OnceLock::get` is an atomic load: async-signal-safe).
static STATE: OnceLock<&'static [AtomicU8]> = OnceLock::new();
static QUEUED: [AtomicU64; QUEUE] = [const { AtomicU64::new(0) }; QUEUE];
/// One bit per slot of [`QUEUED`], set once the slot is filled: [`drain`] reads 64 words to find
/// the filled slots instead of swapping all 4,096 (20-25k cycles for each pass of the service
/// loop while any page was queued).
static FILLED: [AtomicU64; QUEUE / 64] = [const { AtomicU64::new(0) }; QUEUE / 64];
static PENDING: AtomicU32 = AtomicU32::new(0);
/// Slots of the queue promised to pages [`claim_neighbours`] claimed and not queued yet: counted
/// with the pending reports, so that threads claiming runs at once never promise more room than
/// the queue has (each thread could add a whole run after reading the same free room).
static RESERVED: AtomicU32 = AtomicU32::new(0);
/// A report queued since the last drain is to reach the service thread at once (a home write,
/// the read-ahead's marker, a crowded queue): the service thread does not fall asleep while it
/// is set (its handler looked at the sleeping flag before the thread set it). Other reports wait
/// for its next pass, as they always did.
static WAKE_WANTED: AtomicBool = AtomicBool::new(false);

/// Whether fast-path faults wait for [`drain`].
pub(crate) fn pending() -> bool {
    PENDING.load(Ordering::Relaxed) > 0
}

/// In the fault handler, after queueing a report that is to reach the service thread at once,
/// before waking it.
pub(crate) fn want_wake() {
    WAKE_WANTED.store(true, Ordering::SeqCst);
    // Against the service thread's sleep: store, fence, then the caller looks at its flag; it
    // stores its flag, fences, then looks at this one (`Slots::service_sleep`).
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Whether a report queued since the last drain is to reach the service thread at once.
pub(crate) fn wake_wanted() -> bool {
    WAKE_WANTED.load(Ordering::SeqCst)
}

/// Sets up the state of the region's pages, one byte each (zeroed: nothing allowed).
pub(crate) fn init(state: &'static [AtomicU8]) {
    let _ = STATE.set(state);
}

fn state(page: usize) -> Option<&'static AtomicU8> {
    STATE.get()?.get(page)
}

/// The core allows the home-write fast path for `page`.
pub(crate) fn allow_home_write(page: usize) {
    if let Some(s) = state(page) {
        s.store(HOME_WRITE, Ordering::SeqCst);
    }
}

/// The core allows the prefetch-open fast path for `page`; `wake`: its opening is reported to the
/// service thread at once (the read-ahead's marker).
pub(crate) fn allow_prefetch_open(page: usize, wake: bool) {
    if let Some(s) = state(page) {
        s.store(
            if wake {
                PREFETCH_OPEN_WAKE
            } else {
                PREFETCH_OPEN
            },
            Ordering::SeqCst,
        );
    }
}

/// Whether the queue is crowded ([`CROWDED`] reports wait): the service thread is woken to drain it.
pub(crate) fn crowded() -> bool {
    PENDING.load(Ordering::Relaxed) as usize >= CROWDED
}

/// The core is about to change the protection of `page`: no fast path for it until allowed
/// again, and no handler's mprotect after the core's.
pub(crate) fn withdraw(page: usize) {
    let Some(s) = state(page) else { return };
    loop {
        match s.load(Ordering::SeqCst) {
            v @ (HOME_WRITE | PREFETCH_OPEN | PREFETCH_OPEN_WAKE) => {
                if s.compare_exchange(v, NONE, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
            }
            // A handler is between its claim and its mprotect: a syscall away.
            HOME_OPENING | PREFETCH_OPENING => crate::sys::sched_yield(),
            _ => return,
        }
    }
}

/// Whether a handler opened `page` and its report is not drained yet (after the core's
/// `withdraw` and mprotect of the page: no handler opens it any more).
pub(crate) fn opened_unreported(page: usize) -> bool {
    state(page).is_some_and(|s| s.load(Ordering::SeqCst) == OPENED)
}

/// A page a fault handler claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claimed {
    /// Its opening is to reach the service thread at once (a home write, the read-ahead's
    /// marker).
    pub wake: bool,
}

/// In the fault handler: claims `page` for a write (`write`) or a read. `Some` means: open it,
/// then call [`opened`].
pub(crate) fn claim(page: usize, write: bool) -> Option<Claimed> {
    let s = state(page)?;
    let claim = |from: u8, to: u8| {
        s.compare_exchange(from, to, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    };
    if write {
        return claim(HOME_WRITE, HOME_OPENING).then_some(Claimed { wake: true });
    }
    if claim(PREFETCH_OPEN, PREFETCH_OPENING) {
        Some(Claimed { wake: false })
    } else {
        claim(PREFETCH_OPEN_WAKE, PREFETCH_OPENING).then_some(Claimed { wake: true })
    }
}

/// Most pages one read fault opens besides the faulting one.
const MAX_RUN: usize = 63;

/// The prefetched pages a read fault claimed besides its own ([`claim_neighbours`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Neighbours {
    /// Pages right before the faulting one, and right after it.
    pub before: usize,
    pub after: usize,
    /// One of them is to wake the service thread.
    pub wake: bool,
}

/// In the fault handler, after claiming `page` for a read: claims the prefetched pages right
/// after it, or, if none is, those right before it (a walk down through memory opens its
/// window's pages from the top; a walk up leaves the pages before it, another walk's maybe,
/// to their own faults), as many as the queue surely has room for, reserved first (besides
/// what is reserved, the queue may fill only with other threads' single pages meanwhile, up to
/// [`super::slots::MAX_THREADS`] of them). Each is then queued by [`opened_along`], which ends
/// its reservation.
pub(crate) fn claim_neighbours(page: usize) -> Neighbours {
    let mut reserved = RESERVED.load(Ordering::SeqCst);
    let room = loop {
        let used = PENDING.load(Ordering::SeqCst) as usize + reserved as usize;
        let room = QUEUE
            .saturating_sub(used)
            .saturating_sub(super::slots::MAX_THREADS + 1)
            .min(MAX_RUN);
        if room == 0 {
            return Neighbours::default();
        }
        match RESERVED.compare_exchange(
            reserved,
            reserved + room as u32,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => break room,
            Err(now) => reserved = now,
        }
    };
    let mut got = Neighbours::default();
    while got.after < room {
        let Some(c) = claim(page + got.after + 1, false) else {
            break;
        };
        got.wake |= c.wake;
        got.after += 1;
    }
    while got.after == 0 && got.before < room && got.before < page {
        let Some(c) = claim(page - got.before - 1, false) else {
            break;
        };
        got.wake |= c.wake;
        got.before += 1;
    }
    RESERVED.fetch_sub((room - got.after - got.before) as u32, Ordering::SeqCst);
    got
}

/// In the fault handler, after the mprotect: marks `page` opened and queues it for the service
/// thread. False if the queue is full (the caller then takes the slow path, which does the same
/// work again harmlessly).
pub(crate) fn opened(page: usize, write: bool) -> bool {
    queue_opened(
        page,
        (page as u64 + 1) | if write { 0 } else { PREFETCH_BIT },
    )
}

/// In the fault handler, after the mprotect: marks `page`, opened along with the faulting page
/// beside it (see [`claim_neighbours`]), and queues it in the room reserved for it.
pub(crate) fn opened_along(page: usize) -> bool {
    let queued = queue_opened(page, (page as u64 + 1) | PREFETCH_BIT | ALONG_BIT);
    RESERVED.fetch_sub(1, Ordering::SeqCst);
    queued
}

fn queue_opened(page: usize, value: u64) -> bool {
    if let Some(s) = state(page) {
        s.store(OPENED, Ordering::SeqCst);
    }
    let start = page % QUEUE;
    for k in 0..QUEUE {
        let i = (start + k) % QUEUE;
        if QUEUED[i]
            .compare_exchange(0, value, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
        {
            PENDING.fetch_add(1, Ordering::SeqCst);
            FILLED[i / 64].fetch_or(1 << (i % 64), Ordering::SeqCst);
            return true;
        }
    }
    false
}

/// Service thread: reports every queued page.
pub(crate) fn drain(mut report: impl FnMut(Opened)) {
    // Before the slots are read: a report queued after this is marked again. (Looked at first:
    // this runs at every pass of the service loop, and the mark is rarely set.)
    if WAKE_WANTED.load(Ordering::Relaxed) {
        WAKE_WANTED.store(false, Ordering::SeqCst);
    }
    if PENDING.load(Ordering::SeqCst) == 0 {
        return;
    }
    // A slot's bit is set after its value is stored, before the handler returns: a thread's
    // queued pages are all found by a drain that follows its next request. A slot filled but
    // not yet marked waits for the next drain.
    let filled = FILLED.iter().enumerate().flat_map(|(w, word)| {
        let mut bits = word.swap(0, Ordering::SeqCst);
        std::iter::from_fn(move || {
            let b = bits.trailing_zeros() as usize;
            (bits != 0).then(|| {
                bits &= bits - 1;
                w * 64 + b
            })
        })
    });
    for i in filled {
        let v = QUEUED[i].swap(0, Ordering::SeqCst);
        if v == 0 {
            continue;
        }
        PENDING.fetch_sub(1, Ordering::SeqCst);
        let page = ((v & (PREFETCH_BIT - 1)) - 1) as usize;
        if let Some(s) = state(page) {
            let _ = s.compare_exchange(OPENED, NONE, Ordering::SeqCst, Ordering::Relaxed);
        }
        report(if v & ALONG_BIT != 0 {
            Opened::PrefetchAlong(page)
        } else if v & PREFETCH_BIT != 0 {
            Opened::Prefetch(page)
        } else {
            Opened::HomeWrite(page)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test touching the queue (a process-wide static): both checks run in it, one
    /// after the other.
    #[test]
    fn the_queue_drains_every_page_once_and_concurrent_runs_never_overfill_it() {
        every_queued_page_is_drained_once_whatever_its_slot();
        threads_claiming_runs_at_once_lose_no_report();
        a_read_opens_the_prefetched_pages_before_it_when_none_follow();
    }

    /// A walk down through a prefetched window faults at the top of what it has not opened:
    /// the pages below the faulting one are claimed with it (and no page that is not allowed).
    fn a_read_opens_the_prefetched_pages_before_it_when_none_follow() {
        let top = 900_000;
        for p in top - 10..=top {
            allow_prefetch_open(p, p == top - 4);
        }
        assert!(claim(top, false).is_some());
        let got = claim_neighbours(top);
        assert_eq!(
            got,
            Neighbours {
                before: 10,
                after: 0,
                wake: true
            }
        );
        for p in top - 10..top {
            assert!(opened_along(p));
        }
        assert!(opened(top, false));
        assert_eq!(RESERVED.load(Ordering::SeqCst), 0);
        let mut reports = Vec::new();
        drain(|o| reports.push(o));
        reports.sort_by_key(|o| match *o {
            Opened::HomeWrite(p) | Opened::Prefetch(p) | Opened::PrefetchAlong(p) => p,
        });
        let mut want: Vec<Opened> = (top - 10..top).map(Opened::PrefetchAlong).collect();
        want.push(Opened::Prefetch(top));
        assert_eq!(reports, want);
        // The page below the run was never allowed: not claimed.
        assert!(claim(top - 11, false).is_none());
    }

    fn every_queued_page_is_drained_once_whatever_its_slot() {
        // 5 and 1029 start at the same slot; 1023 is the last slot, 64 and 63 sit either side
        // of a word of the bitmap.
        let pages = [5usize, 1029, 1023, 64, 63, 70_000];
        for (k, &p) in pages.iter().enumerate() {
            assert!(if k % 2 == 0 {
                opened(p, true)
            } else {
                // As `claim_neighbours` would have reserved its room.
                RESERVED.fetch_add(1, Ordering::SeqCst);
                opened_along(p)
            });
        }
        assert_eq!(PENDING.load(Ordering::SeqCst), pages.len() as u32);
        let mut got = Vec::new();
        drain(|o| got.push(o));
        let mut want: Vec<Opened> = pages
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                if k % 2 == 0 {
                    Opened::HomeWrite(p)
                } else {
                    Opened::PrefetchAlong(p)
                }
            })
            .collect();
        let key = |o: &Opened| match *o {
            Opened::HomeWrite(p) | Opened::Prefetch(p) | Opened::PrefetchAlong(p) => p,
        };
        got.sort_by_key(key);
        want.sort_by_key(key);
        assert_eq!(got, want);
        assert_eq!(PENDING.load(Ordering::SeqCst), 0);
        assert!(FILLED.iter().all(|w| w.load(Ordering::SeqCst) == 0));
        let mut again = Vec::new();
        drain(|o| again.push(o));
        assert!(again.is_empty());
    }

    /// 20 threads, with 3,000 reports waiting for a busy service thread, each claim a page and
    /// the run after it before any of them queues (each is an mprotect away from it): every
    /// report finds room. Without the reservation, each read the same free room and 181 reports
    /// of pages opened along were refused (a review), their pages left opened and unreported.
    fn threads_claiming_runs_at_once_lose_no_report() {
        init(crate::sys::atomic_bytes(1 << 20).expect("state"));
        let waiting = 3000;
        for p in 0..waiting {
            assert!(opened(500_000 + p, true));
        }
        let threads = 20;
        for t in 0..threads {
            for k in 0..64 {
                allow_prefetch_open(t * 1000 + k, false);
            }
        }
        let runs: Vec<(usize, usize)> = (0..threads)
            .map(|t| {
                let page = t * 1000;
                assert!(claim(page, false).is_some());
                (page, claim_neighbours(page).after)
            })
            .collect();
        assert!(runs.iter().any(|&(_, n)| n > 0), "{runs:?}");
        for &(page, n) in &runs {
            for q in page + 1..=page + n {
                assert!(
                    opened_along(q),
                    "the report of page {q}, opened along, was refused"
                );
            }
            assert!(opened(page, false), "the report of page {page} was refused");
        }
        assert_eq!(RESERVED.load(Ordering::SeqCst), 0);
        drain(|_| {});
        let unreported = (0..threads)
            .flat_map(|t| t * 1000..t * 1000 + 64)
            .filter(|&p| state(p).is_some_and(|s| s.load(Ordering::SeqCst) == OPENED))
            .count();
        assert_eq!(unreported, 0);
    }
}
