//! What this node's application threads wait for: the node's part of the launcher's deadlock
//! detection.
//!
//! A thread that enters a call that waits for other nodes (a barrier, a lock, a condition
//! variable, a message, exit) registers what it waits for ([`waiting`]) until the call returns.
//! The node *waits* when every thread of the program is in such a call or sleeps until another
//! thread of the process wakes it (`pthread_join`, a mutex: [`node_waits`]); the service thread
//! reports it to the launcher, with what each thread waits for, the locks this node holds, and
//! whether anything is still on its way ([`crate::service`]). When every node waits, nothing is
//! in flight and nothing changes for a while, no node can ever go on: the launcher ends the job
//! naming what each node waits for, instead of letting it hang.
//!
//! A thread that computes, sleeps with a timeout, or waits for a file, a socket or a child
//! process keeps the node running, whether it ever used the DSM or not; so does a thread that
//! waits for another thread while a real-time timer that fires once is armed (`alarm`,
//! `setitimer`, `timer_create`: its signal's handler may wake it), until it fires. Under a
//! periodic one the node waits, and says so: the verdict then waits for its handler to have
//! woken nobody for a longer while ([`crate::job::watch::TIMER_QUIET_FOR`]). A thread blocked on a
//! page fault runs too, unless the kernel has it asleep there at two reports in a row: a page
//! is served within milliseconds, unless its home holds the request back until it makes the
//! allocation, which nodes that allocate differently never make (it hung for ever, the home
//! waiting in `jia_recv` for the faulting node). If the fault is a slow one after all, its
//! page's grant is a change the launcher sees, and no verdict comes.
//!
//! A thread that spins on a word of shared memory (`while (!atomic_load(&flag));`, a spin lock's
//! failing compare-exchange) runs, and its operations are messages on their way; yet where every
//! other thread of the job waits, nothing will ever change the word ([`note_atomic`]). A thread
//! whose every operation for a whole report interval was such an operation on one word that
//! read the same value, back to back (it spent at most a sixteenth of that time between them:
//! no computation between polls), or with sleeps between them (it used at most an eighth of the
//! time outside them on the CPU, no page fault in the node, and a report of the last 5 s saw
//! it asleep between them, none blocked on a descriptor: `usleep`, `sleep`), is said to wait
//! in a spin on it ([`spun`]), and the node says it spins; the
//! launcher's verdict on a job with a spinning node waits for nothing said to change for
//! [`crate::job::watch::SPIN_QUIET_FOR`], whatever the spin's own messages.
//!
//! A thread that waits for another node's word on plain loads of a copy it holds makes no call
//! at all: its node runs, quiet (it sends, receives and faults on nothing: `DSM1 QUIET`). Where
//! it runs so while every other node waits or runs quiet too (two nodes that hand a flag back
//! and forth), the launcher has every node send its writes to the homes (`DSM1 FLUSH`) and then
//! the quiet ones drop their copies of other nodes' pages (`DSM1 REFRESH`, see
//! `crate::job::watch::Heard::quiet_runners`), so that they read the homes' bytes, and a node
//! says which page it read again with bytes another node wrote.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, TryLockError};

use dsm_core::AtomicOp;

use crate::door::slots::Use;
use crate::door::{self, MAX_THREADS, SLOTS};
use crate::sys;

/// What each slot's thread waits for, while it is in a waiting call (the calls that are not
/// made often: barriers, messages, exit).
static WAITS: Mutex<BTreeMap<usize, String>> = Mutex::new(BTreeMap::new());

/// The waits of the frequent calls, one word per slot (a kind in the high half, its argument in
/// the low half; 0: none): a lock or a condition variable is registered with one store, no
/// allocation and no lock, and spelled only when the service thread reports.
static WAITING_ON: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];

/// A barrier of threads that some, not all, of its threads have reached, published by
/// `crate::team`: its thread count in the high half, the threads arrived in the low half (0:
/// none).
static OPEN_ROUND: AtomicU64 = AtomicU64::new(0);

/// A barrier of `threads` threads has `arrived` of them, not all (`None`: no such round).
pub(crate) fn note_open_round(round: Option<(usize, usize)>) {
    let word = round.map_or(0, |(t, a)| (t as u64) << 32 | a as u64);
    OPEN_ROUND.store(word, Ordering::Release);
}

/// The open barrier of threads: (its count, the threads arrived).
fn open_round() -> Option<(usize, usize)> {
    let word = OPEN_ROUND.load(Ordering::Acquire);
    (word != 0).then_some(((word >> 32) as usize, (word & 0xffff_ffff) as usize))
}

/// `WAITING_ON`'s kinds.
const LOCK: u64 = 1 << 32;
const WAITCV: u64 = 2 << 32;
/// A barrier of threads: its count.
const TEAM: u64 = 3 << 32;
/// An atomic operation on shared memory.
const ATOMIC: u64 = 4 << 32;

/// A thread's registration as waiting; dropped when its call returns.
pub(crate) enum Waiting {
    /// The calling thread has no slot: nothing registered.
    Unseen,
    /// In `WAITS`.
    Text(usize),
    /// In `WAITING_ON`.
    Word(usize),
}

impl Drop for Waiting {
    fn drop(&mut self) {
        match *self {
            Waiting::Unseen => {}
            Waiting::Text(slot) => {
                WAITS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&slot);
            }
            Waiting::Word(slot) => WAITING_ON[slot].store(0, Ordering::Release),
        }
    }
}

/// Registers the calling thread as waiting for `what` (e.g. `jia_barrier`) until the guard drops.
pub(crate) fn waiting(what: impl Into<String>) -> Waiting {
    let Some(s) = door::my_slot() else {
        return Waiting::Unseen;
    };
    WAITS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(s, what.into());
    Waiting::Text(s)
}

/// Registers the calling thread as waiting in `jia_lock(lock)`.
pub(crate) fn waiting_for_lock(lock: u16) -> Waiting {
    waiting_on(LOCK | u64::from(lock))
}

/// Registers the calling thread as waiting in `jia_barrier_threads(threads)`.
pub(crate) fn waiting_for_threads(threads: usize) -> Waiting {
    waiting_on(TEAM | threads.min(u32::MAX as usize) as u64)
}

/// Registers the calling thread as in an atomic operation on shared memory (one store: a spin
/// makes millions a second, and a lock taken for each kept the service thread's report from
/// taking it).
pub(crate) fn waiting_in_atomic() -> Waiting {
    waiting_on(ATOMIC)
}

/// Registers the calling thread as waiting in `jia_waitcv(cv)`.
pub(crate) fn waiting_for_cv(cv: u16) -> Waiting {
    waiting_on(WAITCV | u64::from(cv))
}

fn waiting_on(word: u64) -> Waiting {
    let Some(s) = door::my_slot() else {
        return Waiting::Unseen;
    };
    if word != ATOMIC {
        // A wait of another kind (a barrier, a lock) ends a run of operations on one word: the
        // polls after it are another run, not judged against a report from before it.
        STREAKS[s].word.store(0, Ordering::Relaxed);
    }
    WAITING_ON[s].store(word, Ordering::Release);
    Waiting::Word(s)
}

/// A wait word, spelled.
fn spelled(word: u64) -> String {
    let arg = word & 0xffff_ffff;
    match word & !0xffff_ffff {
        LOCK => format!("jia_lock({arg})"),
        WAITCV => format!("jia_waitcv({arg})"),
        TEAM => format!("jia_barrier_threads({arg})"),
        ATOMIC => "jia_atomic".to_owned(),
        _ => format!("an unknown call ({word:#x})"),
    }
}

/// The node's report: each wait with the threads in it (`jia_lock(1) (main thread)`,
/// `jia_barrier_threads(3) (thread 41, thread 42)`), in the order first seen; then, if a barrier
/// of threads is open, how many of its threads are there. A node whose one thread waits says
/// its wait alone (`jia_lock(1)`).
fn spell_waits(waits: &[(String, i32)]) -> String {
    let pid = std::process::id() as i32;
    let mut kinds: Vec<(&str, Vec<i32>)> = Vec::new();
    for (what, tid) in waits {
        match kinds.iter_mut().find(|(w, _)| *w == what.as_str()) {
            Some((_, tids)) => tids.push(*tid),
            None => kinds.push((what, vec![*tid])),
        }
    }
    // A node of one thread is said as before threads: its wait alone.
    if let [(what, _)] = waits {
        if open_round().is_none() {
            return what.clone();
        }
    }
    let mut parts: Vec<String> = kinds
        .into_iter()
        .map(|(what, tids)| {
            let names: Vec<String> = tids
                .iter()
                .map(|&t| {
                    if t == pid {
                        "main thread".to_owned()
                    } else {
                        format!("thread {t}")
                    }
                })
                .collect();
            format!("{what} ({})", names.join(", "))
        })
        .collect();
    if let Some((threads, arrived)) = open_round() {
        parts.push(format!(
            "{arrived} of the {threads} threads jia_barrier_threads({threads}) waits for are there"
        ));
    }
    parts.join(", ")
}

/// The first panic of a thread of this node (where, and its message), if one panicked: its
/// siblings may wait for it for ever, and what they wait for says so.
static PANICKED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// A thread of the program panicked (`at`: ` at FILE:LINE:COL` or nothing; `msg`: its message).
pub(crate) fn note_panic(at: &str, msg: &str) {
    let _ = PANICKED.set(format!("after a thread of it panicked{at}: {msg}"));
}

/// Per slot: the thread the last report saw asleep in a fault (0: none).
static ASLEEP_IN_FAULT: [std::sync::atomic::AtomicI32; MAX_THREADS] =
    [const { std::sync::atomic::AtomicI32::new(0) }; MAX_THREADS];

/// What a thread asleep in a fault at two reports in a row is said to wait for.
const WAITS_FOR_A_PAGE: &str = "a page fault whose page does not come (its home holds the \
                                request until it allocates the page: do the nodes make the same \
                                allocations?)";

/// Whether slot `i`'s thread `tid` is asleep in a fault, and was at the last report too.
fn asleep_in_fault(i: usize, tid: i32) -> bool {
    let now = SLOTS.in_fault(i) && !sys::process::runs(tid);
    let before = ASLEEP_IN_FAULT[i].swap(if now { tid } else { 0 }, Ordering::Relaxed);
    now && before == tid
}

/// What a thread of the program that waits for another thread of its process is said to wait
/// for.
const WAITS_FOR_A_THREAD: &str = "a wait only another thread of its process or a signal handler \
                                  can end (pthread_join, a mutex, a condition variable, a \
                                  semaphore)";

/// What the node waits for, if no thread of the program can go on: each of its threads is in a
/// DSM call that waits for other nodes, or sleeps until another thread of the process wakes it
/// (`pthread_join`, a mutex, a condition variable: an untimed futex wait on a futex of the
/// process's own). Each wait, with its threads. `None` while any thread of the program runs or
/// waits for something else (a timer, a file, a socket, a futex another process may wake), or
/// is in a DSM call that does not wait for other nodes (a fault, an allocation). A node whose
/// threads all wait for each other, none in a DSM call, waits too (only a signal handler could
/// wake one, as it could beside a DSM call; the launcher's verdict also waits for nothing to
/// change for a while).
///
/// Where `/proc` cannot list the process's threads, only the threads that use the DSM are seen:
/// one of them must wait in a DSM call, and a barrier of threads not all of whose threads have
/// come keeps the node running. `faulted`: a thread of the node took a page fault since the
/// last report (a thread between its polls then waited for a page, not slept: [`spins`]).
pub(crate) fn node_waits(faulted: bool) -> Option<NodeWaits> {
    // The service thread never waits for this lock: a thread of the program takes it with
    // signals open, and a handler of that thread that touches a page the node does not hold
    // waits for the service thread. Taken right now: the node runs (a thread is entering or
    // leaving a call), and the next report looks again.
    let waits = match WAITS.try_lock() {
        Ok(w) => w,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    let mut what: Vec<(String, i32)> = Vec::new();
    // Threads that hold a slot and do not wait in a DSM call: they run the program (idle
    // slot), unless they wait for another thread.
    let mut undecided = Vec::new();
    let mut seen = Vec::new();
    // Threads that spin on a word: they run, and wait all the same.
    let mut spinning = Vec::new();
    for (i, u) in SLOTS.uses() {
        let Use::Held { tid, idle } = u else { continue };
        if !sys::thread_exists(tid) {
            continue;
        }
        seen.push(tid);
        let waiting_on = WAITING_ON[i].load(Ordering::Acquire);
        // A spin's thread may be inside one of its operations; one in another call that
        // waits is that call's.
        if (waiting_on == 0 || waiting_on == ATOMIC) && !waits.contains_key(&i) {
            if let Some(spin) = spins(i, tid, faulted) {
                what.push((spin, tid));
                spinning.push(tid);
                continue;
            }
        }
        match (waiting_on, waits.get(&i)) {
            (0, Some(w)) => what.push((w.clone(), tid)),
            (0, None) if idle => undecided.push(tid),
            (0, None) if asleep_in_fault(i, tid) => what.push((WAITS_FOR_A_PAGE.to_owned(), tid)),
            // In a fault or a call that does not wait for other nodes: it goes on.
            (0, None) => return None,
            (word, _) => what.push((spelled(word), tid)),
        }
    }
    drop(waits);
    // A thread registered in a waiting call may still be working on its way in or out (the
    // race checker's records at jia_exit): only one the kernel has asleep waits.
    if what
        .iter()
        .any(|&(_, tid)| !spinning.contains(&tid) && sys::process::runs(tid))
    {
        return None;
    }
    let spins = !spinning.is_empty();
    let Some(threads) = sys::process::threads() else {
        // Only the DSM's threads are seen (see above).
        if what.is_empty() || !undecided.is_empty() || open_round().is_some() {
            return None;
        }
        return Some(NodeWaits {
            what: with_panic(spell_waits(&what)),
            timer: false,
            spins,
        });
    };
    let runtime = door::threads::runtime_threads();
    let mut look = sys::process::ThreadLook::default();
    for tid in threads {
        if runtime.contains(&tid) || (seen.contains(&tid) && !undecided.contains(&tid)) {
            continue;
        }
        if !look.waits_for_a_thread(tid) {
            return None;
        }
        what.push((WAITS_FOR_A_THREAD.to_owned(), tid));
    }
    // A timer's signal may wake one that waits for a thread (its handler posts a semaphore),
    // or end a spin (its handler sets a flag the loop also reads): the node runs until a timer
    // that fires once has fired; a periodic one fires for ever, and the verdict waits longer
    // instead.
    let mut timer = false;
    if spins || what.iter().any(|(w, _)| w == WAITS_FOR_A_THREAD) {
        let timers = sys::process::real_timers();
        if timers.once {
            return None;
        }
        // A child that runs signals its end (SIGCHLD) to a handler of the program's, which may
        // do as a timer's: the node runs until the child ends (an outside attack's node waited
        // on a semaphore its SIGCHLD handler posts, its child computing for 20 s, and was ended
        // at 3 s).
        if sys::process::a_child_may_signal() {
            return None;
        }
        timer = timers.periodic;
    }
    (!what.is_empty()).then(|| {
        let mut what = with_panic(spell_waits(&what));
        if timer {
            what.push_str(" (a periodic real-time timer is armed; its handler woke no thread)");
        }
        NodeWaits { what, timer, spins }
    })
}

/// What a node waits for ([`node_waits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeWaits {
    /// Each wait with its threads, spelled for the verdict.
    pub what: String,
    /// A periodic real-time timer's handler may still wake a thread that waits for another.
    pub timer: bool,
    /// A thread spins on a word ([`note_atomic`]): its operations are messages on their way.
    pub spins: bool,
}

/// `waits`, and the panic of a thread of the node if there was one.
fn with_panic(waits: String) -> String {
    match PANICKED.get() {
        Some(p) => format!("{waits}, {p}"),
        None => waits,
    }
}

// ----- spins -----

/// A thread's run of atomic operations on one word that changed nothing and read the same
/// value (loads, compare-exchanges that failed, writes of what they read), back to back:
/// written by the thread at each operation ([`note_atomic`]), read by the service thread at
/// each report ([`spins`]).
struct Streak {
    /// The word: its address, its width in bits 48-55 and the operation's kind in bits 56-63
    /// ([`LOADS`], [`FAILED_EXCHANGES`] or [`SAME_WRITES`]); 0: no run.
    word: AtomicU64,
    /// The value each operation read.
    value: AtomicU64,
    /// When the run's first operation started (CLOCK_MONOTONIC ns): the run's identity.
    since: AtomicU64,
    /// Operations in the run.
    ops: AtomicU64,
    /// Nanoseconds spent in them.
    inside: AtomicU64,
    /// Nanoseconds spent between them (from one's end to the next one's start).
    between: AtomicU64,
    /// When the last one ended.
    last_end: AtomicU64,
}

static STREAKS: [Streak; MAX_THREADS] = [const {
    Streak {
        word: AtomicU64::new(0),
        value: AtomicU64::new(0),
        since: AtomicU64::new(0),
        ops: AtomicU64::new(0),
        inside: AtomicU64::new(0),
        between: AtomicU64::new(0),
        last_end: AtomicU64::new(0),
    }
}; MAX_THREADS];

/// A run's kinds of operation.
const LOADS: u64 = 1;
const FAILED_EXCHANGES: u64 = 2;
/// Read-modify-writes that wrote back the value they read: a test-and-set lock's exchange of 1
/// on a word that holds 1, a fetch-add of 0.
const SAME_WRITES: u64 = 3;

/// Per slot, odd while its thread is in an atomic operation on shared memory (from its start
/// to its note, [`InAtomic`]): bumped at both ends, so a report that sees the same even value
/// before and after sampling what the thread does knew it between two operations throughout.
static IN_ATOMIC: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];

/// The calling thread's atomic operation on shared memory under way ([`atomic_begins`]):
/// [`InAtomic::noted`] ends it with its note, a drop (an operation refused) without one.
pub(crate) struct InAtomic {
    slot: Option<usize>,
    started: u64,
}

/// An atomic operation of the calling thread begins: the slot's [`IN_ATOMIC`] goes odd, and its
/// start (CLOCK_MONOTONIC ns) is kept for [`InAtomic::noted`].
pub(crate) fn atomic_begins() -> InAtomic {
    let slot = door::my_slot();
    if let Some(s) = slot {
        IN_ATOMIC[s].fetch_add(1, Ordering::SeqCst);
    }
    InAtomic {
        slot,
        started: sys::monotonic_ns(),
    }
}

impl InAtomic {
    /// The operation, made: on the `width`-byte word at `addr`, it read `old` ([`note_atomic`]).
    pub(crate) fn noted(self, addr: usize, width: u8, op: AtomicOp, old: u64) {
        note_atomic(addr, width, op, old, self.started);
    }
}

impl Drop for InAtomic {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            IN_ATOMIC[s].fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A slot's run as a report saw it ([`spins`]).
#[derive(Clone, Copy, Default)]
struct Seen {
    /// The run's `since` (0: none), and its thread.
    since: u64,
    tid: i32,
    /// Its operations, the time inside them and between them.
    ops: u64,
    inside: u64,
    between: u64,
    /// The thread's CPU time (`None`: unknown), and when it was read (CLOCK_MONOTONIC ns).
    cpu: Option<u64>,
    at: u64,
    /// When a report of the run last saw its thread asleep between its operations, and when
    /// blocked on something else (a descriptor, a child, a signal), as `at` (0: never).
    slept: u64,
    held: u64,
}

/// Each slot's run as the last report saw it. The service thread's alone.
static SEEN_STREAKS: Mutex<[Seen; MAX_THREADS]> = Mutex::new(
    [Seen {
        since: 0,
        tid: 0,
        ops: 0,
        inside: 0,
        between: 0,
        cpu: None,
        at: 0,
        slept: 0,
        held: 0,
    }; MAX_THREADS],
);

/// An atomic operation of the calling thread on the `width`-byte word at `addr`, which read
/// `old`, made between `started` and now (CLOCK_MONOTONIC ns): a load, a compare-exchange
/// that found another value, or a read-modify-write that wrote back what it read, extends the
/// thread's run on that word and value, or starts one; any other operation (it changed the
/// word, or a store, which reads nothing) ends the run.
fn note_atomic(addr: usize, width: u8, op: AtomicOp, old: u64, started: u64) {
    let Some(slot) = door::my_slot() else { return };
    let s = &STREAKS[slot];
    let kind = match op {
        AtomicOp::Load => Some(LOADS),
        AtomicOp::Store(_) => None,
        _ => match op.apply(old, width) {
            None => Some(FAILED_EXCHANGES),
            Some(new) => (new == old & dsm_core::width_mask(width)).then_some(SAME_WRITES),
        },
    };
    let Some(kind) = kind else {
        s.word.store(0, Ordering::Relaxed);
        return;
    };
    let word = (addr as u64 & 0xffff_ffff_ffff) | u64::from(width) << 48 | kind << 56;
    let ended = sys::monotonic_ns();
    let inside = ended.saturating_sub(started);
    if s.word.load(Ordering::Relaxed) == word && s.value.load(Ordering::Relaxed) == old {
        let between = started.saturating_sub(s.last_end.load(Ordering::Relaxed));
        s.ops.fetch_add(1, Ordering::Relaxed);
        s.inside.fetch_add(inside, Ordering::Relaxed);
        s.between.fetch_add(between, Ordering::Relaxed);
    } else {
        // A new run: its identity (`since`) last, after its counts.
        s.word.store(0, Ordering::Relaxed);
        s.value.store(old, Ordering::Relaxed);
        s.ops.store(1, Ordering::Relaxed);
        s.inside.store(inside, Ordering::Relaxed);
        s.between.store(0, Ordering::Relaxed);
        s.since.store(started, Ordering::Relaxed);
        s.word.store(word, Ordering::Release);
    }
    s.last_end.store(ended, Ordering::Release);
}

/// What slot `i`'s thread (`tid`) spins on, if it spins ([`spun`]) and no thread of the node
/// took a page fault since the last report (`faulted`). Called at each report, for every slot.
fn spins(i: usize, tid: i32, faulted: bool) -> Option<String> {
    let s = &STREAKS[i];
    let word = s.word.load(Ordering::Acquire);
    let at = sys::monotonic_ns();
    let mut now = Seen {
        since: s.since.load(Ordering::Relaxed),
        tid,
        ops: s.ops.load(Ordering::Relaxed),
        inside: s.inside.load(Ordering::Relaxed),
        between: s.between.load(Ordering::Relaxed),
        cpu: if word == 0 {
            None
        } else {
            sys::process::cpu_ns(tid)
        },
        at,
        slept: 0,
        held: 0,
    };
    let value = s.value.load(Ordering::Relaxed);
    let last_end = s.last_end.load(Ordering::Relaxed);
    let mut seen = SEEN_STREAKS.lock().unwrap_or_else(|p| p.into_inner());
    let before = seen[i];
    let same = word != 0 && (now.since, now.tid) == (before.since, before.tid);
    if same {
        (now.slept, now.held) = (before.slept, before.held);
    }
    // What the thread does between its polls, sampled at each report of a run of more than
    // one: inside one of them (its atomic operation waits for its home) or running, nothing.
    // A sample taken while the thread was in an operation (it may sleep there for its home's
    // answer), from its start to its note, is dropped: the slot's `IN_ATOMIC` was odd, or moved.
    let in_atomic = IN_ATOMIC[i].load(Ordering::SeqCst);
    if word != 0 && now.ops > 1 && in_atomic % 2 == 0 {
        let rest = sys::process::rests(tid);
        if IN_ATOMIC[i].load(Ordering::SeqCst) == in_atomic {
            match rest {
                Some(sys::process::Rest::Sleeps) => now.slept = at,
                Some(sys::process::Rest::Held) => now.held = at,
                Some(sys::process::Rest::Runs) | None => {}
            }
        }
    }
    // A thread of a node that took page faults works on memory, between its polls or beside
    // them (an outside attack's loop reading a page between two polls, correct, was ended as
    // stuck: its faults, fast, counted as time between polls or asleep).
    let spins = same && !faulted && spun(&before, &now, last_end);
    seen[i] = if word == 0 { Seen::default() } else { now };
    drop(seen);
    spins.then(|| spell_spin(word, value))
}

/// Whether a thread whose run of operations on one word that changed nothing
/// ([`note_atomic`]) a report saw `before`, and sees `now`, spins: the run is a second old,
/// and since that report either it made more of them back to back (at most a sixteenth of the
/// time between them: a loop that computes between its polls computes), or it rests between
/// them: it used the CPU at most an eighth of the time, in them or not (their time is mostly a
/// wait for the home, asleep: counted as the CPU's, it hid the work of a loop that computed
/// between them), its last one (ended at `last_end`) no longer ago than twice the run's mean
/// gap and 100 ms, and a report of the last [`RESTS_SEEN_FOR_NS`] saw it asleep between them
/// (`usleep`, `sleep`), none blocked on something else. Only what the thread was seen blocked in counts: when reports came right
/// after the service thread answered a poll, a loop that reads a pipe between its polls was
/// seen running at every one, which counted as asleep, and was ended as stuck.
fn spun(before: &Seen, now: &Seen, last_end: u64) -> bool {
    if now.at.saturating_sub(now.since) < SPIN_SAID_AFTER_NS {
        return false;
    }
    let inside = now.inside.saturating_sub(before.inside);
    if now.ops > before.ops && now.between.saturating_sub(before.between) * 16 <= inside {
        return true;
    }
    let (Some(cpu), Some(was)) = (now.cpu, before.cpu) else {
        return false;
    };
    if now.ops < 2 {
        return false;
    }
    let mean_gap = last_end.saturating_sub(now.since) / (now.ops - 1);
    let polls = now.at.saturating_sub(last_end) <= 2 * mean_gap + 100_000_000;
    let elapsed = now.at.saturating_sub(before.at);
    let recent = |t: u64| t != 0 && now.at.saturating_sub(t) <= RESTS_SEEN_FOR_NS;
    let asleep = recent(now.slept) && !recent(now.held);
    polls && cpu.saturating_sub(was).saturating_mul(8) <= elapsed && asleep
}

/// How far back a thread seen blocked on something else between its polls (a descriptor)
/// keeps it from being said to spin, and one seen asleep there lets it be ([`spun`]).
const RESTS_SEEN_FOR_NS: u64 = 5_000_000_000;

/// How long a run must have lasted before its thread is said to spin: its word is then named by
/// its allocation's line (addr2line, once per word), which a short spin while another node
/// computes never costs the service thread.
const SPIN_SAID_AFTER_NS: u64 = 1_000_000_000;

/// Spins spelled so far, by (word, value): the same words at every report.
static SPELLED: Mutex<BTreeMap<(u64, u64), String>> = Mutex::new(BTreeMap::new());

/// A spin, spelled: the word, where it lies, and what the thread reads there.
fn spell_spin(word: u64, value: u64) -> String {
    let mut spelled = SPELLED.lock().unwrap_or_else(|p| p.into_inner());
    if spelled.len() >= 64 {
        spelled.clear();
    }
    spelled
        .entry((word, value))
        .or_insert_with(|| spell_spin_now(word, value))
        .clone()
}

fn spell_spin_now(word: u64, value: u64) -> String {
    let addr = (word & 0xffff_ffff_ffff) as usize;
    let width = (word >> 48) & 0xff;
    let how = match word >> 56 {
        FAILED_EXCHANGES => "compare-exchanges that fail",
        SAME_WRITES => "atomic writes that leave it as it was,",
        _ => "atomic loads",
    };
    let place = crate::allocations::spelled_place(addr);
    format!(
        "a spin on the {width}-byte word at {addr:#x}{place}: {how} reading {value} again and \
         again, which no other thread or node can change while they wait"
    )
}

#[cfg(test)]
mod tests {
    use super::{Seen, spun};

    const MS: u64 = 1_000_000;

    /// A run seen at `at` ms, started at 0, with `ops` operations, `inside` and `between` ms in
    /// and between them, its thread having used `cpu` ms, seen asleep between them then.
    fn seen(at: u64, ops: u64, inside: u64, between: u64, cpu: u64) -> Seen {
        Seen {
            since: 1,
            tid: 7,
            ops,
            inside: inside * MS,
            between: between * MS,
            cpu: Some(cpu * MS),
            at: at * MS,
            slept: at * MS,
            held: 0,
        }
    }

    /// Back to back: polls with at most a sixteenth of their time between them; not a loop
    /// that computes between them, whatever it is seen doing.
    #[test]
    fn polls_back_to_back_spin_and_a_loop_that_computes_between_them_does_not() {
        let before = seen(1000, 1000, 900, 50, 1000);
        let mut tight = seen(1250, 2000, 1130, 60, 1250);
        tight.slept = 0;
        assert!(spun(&before, &tight, 1250 * MS));
        let working = seen(1250, 1100, 950, 250, 1250);
        assert!(
            !spun(&before, &working, 1250 * MS),
            "computes between its polls"
        );
        // A fifth of the time between them: a loop whose work is about as long as its polls.
        let mut fifth = seen(1250, 2000, 1100, 90, 1250);
        fifth.slept = 0;
        assert!(!spun(&before, &fifth, 1250 * MS));
        let young = seen(900, 2000, 800, 0, 900);
        assert!(
            !spun(&seen(600, 10, 500, 0, 600), &young, 900 * MS),
            "under a second"
        );
    }

    /// Polls with sleeps between them: the thread used little CPU outside them, was seen
    /// asleep between them and not held by anything else lately, its last poll recent; not one
    /// that waited for a pipe, only ever seen running, computed, or stopped polling.
    #[test]
    fn polls_with_sleeps_between_them_spin_unless_something_else_held_the_thread() {
        // 250 polls of 0.02 ms a millisecond apart, 5 ms of CPU between them in 250 ms.
        let before = seen(2000, 1000, 20, 1980, 30);
        let sleepy = seen(2250, 1250, 25, 2225, 35);
        assert!(spun(&before, &sleepy, 2249 * MS));
        let mut reads = sleepy;
        reads.held = 2250 * MS;
        assert!(!spun(&before, &reads, 2249 * MS), "a pipe held it");
        // Held 4.9 s ago, asleep since: not yet; 5.1 s ago: it spins.
        let mut held = seen(7000, 6000, 120, 6880, 140);
        held.held = 2100 * MS;
        let before_held = seen(6750, 5750, 115, 6635, 135);
        assert!(!spun(&before_held, &held, 6999 * MS), "held lately");
        held.held = 1900 * MS;
        assert!(spun(&before_held, &held, 6999 * MS));
        let mut running = sleepy;
        running.slept = 0;
        assert!(
            !spun(&before, &running, 2249 * MS),
            "only ever seen running (right after a poll's answer)"
        );
        held.held = 0;
        held.slept = 1900 * MS;
        assert!(
            !spun(&before_held, &held, 6999 * MS),
            "last seen asleep 5.1 s ago"
        );
        let busy = seen(2250, 1250, 25, 2225, 130);
        assert!(
            !spun(&before, &busy, 2249 * MS),
            "it computed between its polls"
        );
        // Polls of 80 us, asleep for the home's answer, 50 us of work and a 200 us nap between
        // them: 66 ms in them, 41 ms of CPU in 250 ms, all of it between them.
        let working = seen(2250, 1833, 86, 2164, 71);
        assert!(
            !spun(&before, &working, 2249 * MS),
            "its time in the polls hid the work between them"
        );
        assert!(
            !spun(&before, &sleepy, 1900 * MS),
            "its last poll is 350 ms old"
        );
        // sleep(1): no poll since the last report, the last 0.8 s ago, a second apart.
        let napping = seen(5250, 5, 1, 4000, 1);
        assert!(spun(&seen(5000, 5, 1, 4000, 1), &napping, 4450 * MS));
        let mut no_clock = sleepy;
        no_clock.cpu = None;
        assert!(!spun(&before, &no_clock, 2249 * MS), "no CPU clock");
    }

    #[test]
    fn wait_words_are_spelled_as_the_calls() {
        assert_eq!(super::spelled(super::LOCK | 7), "jia_lock(7)");
        assert_eq!(super::spelled(super::WAITCV | 15), "jia_waitcv(15)");
        assert_eq!(super::spelled(super::TEAM | 4), "jia_barrier_threads(4)");
        assert_eq!(super::spelled(super::ATOMIC), "jia_atomic");
    }
}
