//! Accesses made in a signal handler of the program's: kept without allocating, recorded after
//! it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::From;

/// Accesses a thread makes while it runs a signal handler of the program's, one entry each.
pub(super) const HANDLER_ACCESSES: usize = 64;

/// What a thread's signal handlers did, kept until the thread's next access or synchronisation
/// outside them. Recording there could allocate, and a handler that interrupted `malloc` would
/// then wait forever for the allocator's lock its own thread holds.
///
/// Signal context: [`Handler::keep`] only reads and writes these cells and atomics, which belong
/// to the thread (no lock, no allocation, no wait, errno untouched). A handler runs to its end
/// before the code it interrupted goes on: `len` (an atomic, so that no compiler reorders the
/// slot's write after it) counts the slots written, and [`Handler::take`] copies them without
/// holding signals off. The thread-local has no
/// destructor, so reaching it never registers one (which may allocate).
struct Handler {
    /// Handlers of the thread's running now (nested).
    depth: Cell<u32>,
    len: AtomicUsize,
    /// Accesses that found no room.
    lost: AtomicU64,
    kept: [Cell<(usize, usize, bool, From)>; HANDLER_ACCESSES],
}

impl Handler {
    /// Inside a handler: keeps the access (room permitting) and says so. Signal context.
    #[inline]
    fn keep(&self, off: usize, len: usize, write: bool, from: From) -> bool {
        if self.depth.get() == 0 {
            return false;
        }
        // Once each (a handler run by a timer reads the same few places again and again): a
        // scan of at most HANDLER_ACCESSES entries, rare next to the program's own accesses.
        let n = self.len.load(Ordering::SeqCst);
        let access = (off, len, write, from);
        let same = |k: &(usize, usize, bool, From)| {
            (k.0, k.1, k.2, k.3.key()) == (off, len, write, from.key())
        };
        if self.kept[..n].iter().any(|k| same(&k.get())) {
            return true;
        }
        match self.kept.get(n) {
            Some(slot) => {
                slot.set(access);
                self.len.store(n + 1, Ordering::SeqCst);
            }
            None => {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    /// The accesses kept. Outside handlers; a handler that runs meanwhile (on this thread)
    /// keeps its access past the ones copied, and the copy is made again with it.
    fn take(&self) -> Vec<(usize, usize, bool, From)> {
        loop {
            let n = self.len.load(Ordering::SeqCst);
            let taken = self.kept[..n].iter().map(Cell::get).collect();
            if self
                .len
                .compare_exchange(n, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                HANDLER_LOST.fetch_add(self.lost.swap(0, Ordering::SeqCst), Ordering::Relaxed);
                return taken;
            }
        }
    }
}

thread_local! {
    static HANDLER: Handler = const {
        Handler {
            depth: Cell::new(0),
            len: AtomicUsize::new(0),
            lost: AtomicU64::new(0),
            kept: [const { Cell::new((0, 0, false, From::Code(0))) }; HANDLER_ACCESSES],
        }
    };
}

/// Accesses in signal handlers that were not recorded (no room: more than
/// [`HANDLER_ACCESSES`] different ones between two of their thread's accesses outside
/// handlers).
static HANDLER_LOST: AtomicU64 = AtomicU64::new(0);

/// Runs `f`, a signal handler of the program's (libjia runs every handler the program installs
/// through here when checking): the accesses it makes are kept and recorded at its thread's
/// next access or synchronisation outside handlers, in the segment they belong to.
///
/// Signal context: counts the nesting in a cell of the thread's, nothing else. A handler left
/// by `longjmp` leaves the count up: the thread's accesses are then kept (`HANDLER_ACCESSES`
/// at most, the rest lost and counted) until its next DSM call, which puts it back to 0 (no
/// DSM call runs in a handler).
pub fn in_signal_handler<R>(f: impl FnOnce() -> R) -> R {
    HANDLER.with(|h| h.depth.set(h.depth.get() + 1));
    let r = f();
    HANDLER.with(|h| h.depth.set(h.depth.get().saturating_sub(1)));
    r
}

/// Inside a handler: keeps the access and says so (see [`Handler::keep`]). Signal context.
#[inline]
pub(super) fn kept(off: usize, len: usize, write: bool, from: From) -> bool {
    HANDLER.with(|h| h.keep(off, len, write, from))
}

/// Whether an access of this thread may take the recorder's fast path: it runs no signal
/// handler of the program's, and none left accesses to record first (they are recorded on the
/// slow path, in the segment and epoch they belong to).
#[inline]
pub(super) fn fast_path_open() -> bool {
    HANDLER.with(|h| h.depth.get() == 0 && h.len.load(Ordering::Relaxed) == 0)
}

/// Whether this thread runs a signal handler of the program's now. Signal context.
#[inline]
pub(super) fn running() -> bool {
    HANDLER.with(|h| h.depth.get() > 0)
}

/// Whether this thread's handlers kept accesses not recorded yet.
#[inline]
pub(super) fn any_kept() -> bool {
    HANDLER.with(|h| h.len.load(Ordering::Relaxed)) > 0
}

/// The accesses this thread's handlers kept (see [`Handler::take`]).
pub(super) fn take() -> Vec<(usize, usize, bool, From)> {
    HANDLER.with(Handler::take)
}

/// At a DSM call (never made in a handler): a count of handlers left up was a handler left by
/// `longjmp`.
pub(super) fn left_by_longjmp() {
    HANDLER.with(|h| h.depth.set(0));
}

/// Accesses in handlers that found no room, on every thread so far.
pub(super) fn lost() -> u64 {
    HANDLER_LOST.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accesses in a handler are kept once each, none outside one; past the room they are
    /// counted as lost; a take empties the thread's store.
    #[test]
    fn a_handlers_accesses_are_kept_once_each_and_the_overflow_counted() {
        let from = From::Code(0x1000);
        assert!(!kept(8, 4, true, from), "outside a handler nothing is kept");
        in_signal_handler(|| {
            assert!(kept(8, 4, true, from));
            assert!(kept(8, 4, true, from));
            assert!(kept(8, 4, false, from));
        });
        assert!(any_kept());
        let taken = take();
        assert_eq!(taken.len(), 2, "the same access twice is kept once");
        assert!(!any_kept() && take().is_empty());
        let lost_before = lost();
        in_signal_handler(|| {
            for k in 0..HANDLER_ACCESSES + 3 {
                assert!(kept(k, 1, false, from));
            }
        });
        assert_eq!(take().len(), HANDLER_ACCESSES);
        assert_eq!(lost() - lost_before, 3);
    }
}
