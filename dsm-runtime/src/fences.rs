//! C11's fences around relaxed atomic operations on shared memory (`Dsm::fence`,
//! `jia_atomic_thread_fence`, and ThreadSanitizer's fence hook in programs `dsmcc` builds).
//!
//! C11: a release fence followed by a relaxed store (or read-modify-write) S of this thread
//! makes the thread's writes before the fence visible to a thread whose relaxed load reads S's
//! value (or a later one of S's word) and that then makes an acquire fence. Between nodes the
//! writes travel with releases and acquires (`docs/design.md`, "Atomics"), which a relaxed
//! operation does not make, so each thread keeps:
//!
//! - after a release fence, the words it has stored to since: its first relaxed store to a
//!   word is made with release semantics. A later relaxed store to that word needs none: an
//!   acquire that reads its value is answered with the releases its home recorded before it,
//!   the first store's among them. The same holds for any word of the same home, so the words
//!   homed here (whose relaxed operations take the CPU's atomics, without the node) count as
//!   one: the first store to one of them after the fence releases, the others do not.
//! - the words it has read with relaxed order since its last acquire fence: the fence makes an
//!   acquire load of each, which the home answers with every release recorded through its words
//!   up to now, those before the values read among them. Past [`WORDS`] words (a program that
//!   reads many words and makes no fence at all, most often) the list stops, and an acquire
//!   fence then makes an acquire load from every home of atomic words the node knows.
//!
//! Both lists are fixed arrays, so an operation in a signal handler allocates nothing. The
//! stores' list when full, or either taken by the code a signal handler interrupted, makes the
//! operation a release (or an acquire) itself: stronger than asked, never weaker.
//!
//! Until a thread of the process makes a fence, a relaxed operation looks at two flags of the
//! process and nothing else (`Dsm::atomic_declared`'s fast path for a word homed here: 14 ns,
//! 13 before fences; `faultlat`): the words read are kept only once some thread has made an
//! acquire fence, and a thread's first acquire fence, which may follow reads nobody kept,
//! acquires from every home.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Words each list keeps.
const WORDS: usize = 32;

/// Whether a thread of the process has made a release fence, and an acquire fence.
static RELEASE_FENCES: AtomicBool = AtomicBool::new(false);
static ACQUIRE_FENCES: AtomicBool = AtomicBool::new(false);

/// Whether a thread of the process has made a fence.
#[inline]
pub(crate) fn made() -> bool {
    RELEASE_FENCES.load(Ordering::Relaxed) || ACQUIRE_FENCES.load(Ordering::Relaxed)
}

/// A thread's fences: see the module's head.
struct Fences {
    /// Whether the thread has made an acquire fence (since then its reads are kept).
    acquired: bool,
    /// Since the thread's last release fence (if it made one), the words it stored to, and
    /// whether it stored to a word homed here.
    stored: Option<(WordList, bool)>,
    /// The words the thread read with relaxed order since its last acquire fence.
    read: WordList,
}

/// Up to [`WORDS`] distinct words, by address and width; `full` once one more came.
#[derive(Clone, Copy)]
struct WordList {
    words: [(usize, u8); WORDS],
    len: usize,
    full: bool,
}

impl WordList {
    const EMPTY: WordList = WordList {
        words: [(0, 0); WORDS],
        len: 0,
        full: false,
    };

    fn contains(&self, addr: usize) -> bool {
        self.words[..self.len].iter().any(|&(a, _)| a == addr)
    }

    /// Adds the word; false if the list was full already or is now.
    fn add(&mut self, addr: usize, width: u8) -> bool {
        if self.full {
            return false;
        }
        if self.contains(addr) {
            return true;
        }
        if self.len == WORDS {
            self.full = true;
            return false;
        }
        self.words[self.len] = (addr, width);
        self.len += 1;
        true
    }
}

thread_local! {
    /// Set by a release fence that could not reach [`FENCES`]: the thread's relaxed stores all
    /// release, until the next fence that can.
    static RELEASE_EVERY_STORE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static FENCES: RefCell<Fences> = const {
        RefCell::new(Fences {
            acquired: false,
            stored: None,
            read: WordList::EMPTY,
        })
    };
}

/// Before a relaxed operation of this thread on the `width`-byte word at `addr` (homed here and
/// taking the CPU's atomics: `here`) that stores (`stores`) and reads (`reads`): whether it
/// must be made with release semantics, and with acquire semantics, for the fences around it
/// (see the module's head).
#[inline]
pub(crate) fn relaxed(
    addr: usize,
    width: u8,
    here: impl FnOnce() -> bool,
    stores: bool,
    reads: bool,
) -> (bool, bool) {
    let stores = stores && RELEASE_FENCES.load(Ordering::Relaxed);
    let reads = reads && ACQUIRE_FENCES.load(Ordering::Relaxed);
    if !stores && !reads {
        return (false, false);
    }
    FENCES
        .try_with(|f| {
            let Ok(mut f) = f.try_borrow_mut() else {
                // A signal handler interrupted this thread's own bookkeeping.
                return (stores, reads);
            };
            let release = stores
                && match f.stored.as_mut() {
                    _ if RELEASE_EVERY_STORE.get() => true,
                    None => false,
                    Some((_, here_stored)) if here() => !std::mem::replace(here_stored, true),
                    Some((s, _)) => {
                        let first = !s.contains(addr);
                        !s.add(addr, width) || first
                    }
                };
            if reads {
                f.read.add(addr, width);
            }
            (release, false)
        })
        .unwrap_or((stores, reads))
}

/// A release fence of this thread: its next relaxed store to each word releases.
pub(crate) fn release_fence() {
    RELEASE_FENCES.store(true, Ordering::Relaxed);
    let _ = FENCES.try_with(|f| match f.try_borrow_mut() {
        Ok(mut f) => {
            f.stored = Some((WordList::EMPTY, false));
            RELEASE_EVERY_STORE.set(false);
        }
        // A signal handler's fence interrupted this thread's bookkeeping: every relaxed store
        // of the thread releases until its next fence (a full list, kept so).
        Err(_) => RELEASE_EVERY_STORE.set(true),
    });
}

/// An acquire fence of this thread: what it must load again with acquire semantics (the list
/// of its relaxed reads is emptied).
pub(crate) fn acquire_fence() -> ToAcquire {
    // This thread's reads are kept from now on (its own later loads of the flag see it).
    ACQUIRE_FENCES.store(true, Ordering::Relaxed);
    let taken = FENCES.try_with(|f| {
        f.try_borrow_mut()
            .map(|mut f| {
                let list = std::mem::replace(&mut f.read, WordList::EMPTY);
                std::mem::replace(&mut f.acquired, true).then_some(list)
            })
            .ok()
    });
    match taken {
        Ok(Some(Some(list))) if !list.full => ToAcquire::Words(WordsRead { list, next: 0 }),
        // The thread's first acquire fence (its reads before it may not have been kept), too
        // many words to keep, or the list out of reach (a signal handler interrupted this
        // thread's bookkeeping).
        _ => ToAcquire::EveryHome,
    }
}

/// What an acquire fence loads with acquire semantics. On the stack, not boxed: a fence in a
/// signal handler allocates nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ToAcquire {
    /// The words read since the last acquire fence.
    Words(WordsRead),
    /// A word of every home of atomic words the node knows.
    EveryHome,
}

/// The words an acquire fence loads with acquire semantics, by address and width.
pub(crate) struct WordsRead {
    list: WordList,
    next: usize,
}

impl Iterator for WordsRead {
    type Item = (usize, u8);

    fn next(&mut self) -> Option<(usize, u8)> {
        let w = self.list.words[..self.list.len].get(self.next).copied()?;
        self.next += 1;
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a fresh thread (the lists are the thread's).
    fn on_a_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    #[test]
    fn relaxed_stores_release_only_after_a_release_fence_and_once_per_word() {
        on_a_thread(|| {
            // (Another test's thread may have made a release fence already.)
            if !RELEASE_FENCES.load(Ordering::Relaxed) {
                assert_eq!(relaxed(8, 8, || false, true, false), (false, false));
            }
            release_fence();
            assert_eq!(relaxed(8, 8, || false, true, false), (true, false));
            assert_eq!(relaxed(8, 8, || false, true, false), (false, false));
            assert_eq!(relaxed(16, 4, || false, true, true), (true, false));
            // A load is no store: nothing released.
            assert_eq!(relaxed(24, 8, || false, false, true), (false, false));
            // The next fence starts again: the writes since the last one go out too.
            release_fence();
            assert_eq!(relaxed(8, 8, || false, true, false), (true, false));
        });
    }

    #[test]
    fn an_acquire_fence_takes_the_words_read_since_the_last_one() {
        on_a_thread(|| {
            // A thread's first acquire fence takes every home: its reads before may not have
            // been kept.
            assert_eq!(words(acquire_fence()), None);
            assert_eq!(relaxed(8, 8, || false, false, true), (false, false));
            assert_eq!(relaxed(8, 8, || false, false, true), (false, false));
            assert_eq!(relaxed(17, 1, || false, true, true), (false, false));
            assert_eq!(relaxed(32, 8, || false, true, false), (false, false));
            assert_eq!(words(acquire_fence()), Some(vec![(8, 8), (17, 1)]));
            assert_eq!(words(acquire_fence()), Some(vec![]));
        });
    }

    /// The words an acquire fence loads, `None` for every home's.
    fn words(a: ToAcquire) -> Option<Vec<(usize, u8)>> {
        match a {
            ToAcquire::Words(w) => Some(w.collect()),
            ToAcquire::EveryHome => None,
        }
    }

    #[test]
    fn full_lists_make_stores_release_and_the_acquire_fence_take_every_home() {
        on_a_thread(|| {
            assert_eq!(words(acquire_fence()), None);
            release_fence();
            for k in 0..WORDS {
                assert_eq!(relaxed(8 * k, 8, || false, true, true), (true, false));
            }
            // One word more than the lists keep: it releases itself, and so does every store
            // after it until the next fence, words seen before included; reads stay relaxed,
            // and the next acquire fence takes every home.
            assert_eq!(relaxed(8 * WORDS, 8, || false, true, true), (true, false));
            assert_eq!(relaxed(0, 8, || false, true, true), (true, false));
            assert_eq!(words(acquire_fence()), None);
            assert_eq!(relaxed(0, 8, || false, false, true), (false, false));
            assert_eq!(words(acquire_fence()), Some(vec![(0, 8)]));
            release_fence();
            assert_eq!(relaxed(0, 8, || false, true, false), (true, false));
            assert_eq!(relaxed(0, 8, || false, true, false), (false, false));
        });
    }

    #[test]
    fn words_homed_here_count_as_one_after_a_release_fence() {
        on_a_thread(|| {
            release_fence();
            assert_eq!(relaxed(8, 8, || true, true, false), (true, false));
            assert_eq!(relaxed(16, 8, || true, true, false), (false, false));
            for k in 0..2 * WORDS {
                assert!(!relaxed(64 + 8 * k, 4, || true, true, true).0);
            }
            // A word of another home still releases at its first store.
            assert_eq!(relaxed(8000, 8, || false, true, false), (true, false));
            release_fence();
            assert_eq!(relaxed(16, 8, || true, true, false), (true, false));
        });
    }

    #[test]
    fn a_thread_without_fences_stays_relaxed_however_many_words_it_reads() {
        on_a_thread(|| {
            for k in 0..10 * WORDS {
                assert_eq!(relaxed(8 * k, 8, || false, true, true), (false, false));
            }
            // Its first acquire fence takes every home.
            assert_eq!(words(acquire_fence()), None);
        });
    }
}
