//! Identifiers, sizes and small value types shared by every part of the protocol.
//!
//! Ids are newtypes, not aliases, so a page number can never be passed where a node id is
//! expected. Raw numbers carry their unit in their name (`_bytes`, `_pages`, `_ns`).

use std::fmt;
use std::time::Duration;

/// Bytes in one shared page. JIAJIA's unit, and the x86-64 base page.
pub const PAGE_SIZE: usize = 4096;
/// Locks are numbered `0..MAX_LOCKS`, as in JIAJIA.
pub const MAX_LOCKS: u16 = 64;
/// Condition variables are numbered `0..MAX_CVS` (JIAJIA has 16: a program of 16 nodes that
/// signals per node and per step, like lu, needs more).
pub const MAX_CVS: u16 = 64;
/// The largest job the protocol (and its wire format) supports.
pub const MAX_NODES: u16 = 4096;

/// One node (process) of the job; node 0 is the master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u16);

/// A page of the shared region, counted from the start of the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageNum(pub u32);

/// A lock, `0..MAX_LOCKS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockId(pub u16);

/// A condition variable, `0..MAX_CVS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CvId(pub u16);

/// A byte offset from the start of the shared region (the same on every node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GlobalAddr(pub u64);

/// Who is blocked in the core: the runtime's name for an application thread (or the simulator's
/// name for a simulated program). The core hands it back in [`crate::Effect::Resume`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaiterId(pub u64);

/// A barrier's or `jia_wait`'s number, or how many of them a node has passed. 64 bits, as every
/// count that grows for a job's life: at 42,000 barriers a second, 32 bits wrap in 28 hours.
pub type Epoch = u64;

/// How many releases a lock, condition variable or atomic word has had, a node's release
/// intervals, a node's diff batches. 64 bits: one hot lock took 2^32 releases in 42 minutes on 2
/// CPUs, and with 32 its acquirers then missed the write notices of every release after.
pub type Count = u64;

/// A point in time, as nanoseconds since an origin the caller chooses. The core never reads a
/// clock: every input takes `now`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

/// The kind of access that faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// A load.
    Read,
    /// A store.
    Write,
}

/// What the application may do with a page: the protection the runtime applies with mprotect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Prot {
    /// No access: the next touch faults.
    None,
    /// Loads only.
    Read,
    /// Loads and stores.
    ReadWrite,
}

/// The state of a page as seen by one node, JIAJIA's four states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageState {
    /// Not allocated.
    Unmapped,
    /// Allocated, not valid here: the next touch fetches it from its home.
    Invalid,
    /// Valid here, readable; a write faults (and makes a twin).
    ReadOnly,
    /// Valid here and writable; written in the current interval.
    ReadWrite,
}

impl NodeId {
    /// The id as an index.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl PageNum {
    /// The page as an index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
    /// The page's first byte.
    pub fn addr(self) -> GlobalAddr {
        GlobalAddr(u64::from(self.0) * PAGE_SIZE as u64)
    }
}

/// Whether an atomic word may be `width` bytes wide: 1, 2, 4 or 8 (C11's `atomic_flag`, `_Atomic
/// bool`, `char` and `short` objects are 1 and 2 bytes; diffs are byte-exact, so a word of any of
/// these widths shares its page, and its 8 bytes, with plain data written on other nodes).
pub fn atomic_width(width: u8) -> bool {
    matches!(width, 1 | 2 | 4 | 8)
}

/// The bits of a `width`-byte word (8 or more: all of them).
pub fn width_mask(width: u8) -> u64 {
    if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * u32::from(width))) - 1
    }
}

/// An operation on an atomic word of shared memory (1, 2, 4 or 8 bytes, aligned), applied at the
/// word's home: its value before is the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Read it.
    Load,
    /// Write this value.
    Store(u64),
    /// Write this value.
    Swap(u64),
    /// Write `new` if the word holds `expected`.
    CompareExchange {
        /// The value the word must hold.
        expected: u64,
        /// The value written then.
        new: u64,
    },
    /// Add (wrapping).
    FetchAdd(u64),
    /// Subtract (wrapping).
    FetchSub(u64),
    /// Bitwise and.
    FetchAnd(u64),
    /// Bitwise or.
    FetchOr(u64),
    /// Bitwise exclusive or.
    FetchXor(u64),
}

impl AtomicOp {
    /// The word's value after this operation on `old`, a `width`-byte word (1, 2, 4 or 8), if the
    /// operation writes one (a load never does, a compare-exchange only on a match).
    pub fn apply(self, old: u64, width: u8) -> Option<u64> {
        let mask = width_mask(width);
        let old = old & mask;
        let new = match self {
            AtomicOp::Load => return None,
            AtomicOp::Store(v) | AtomicOp::Swap(v) => v,
            AtomicOp::CompareExchange { expected, new } => {
                if old != expected & mask {
                    return None;
                }
                new
            }
            AtomicOp::FetchAdd(v) => old.wrapping_add(v),
            AtomicOp::FetchSub(v) => old.wrapping_sub(v),
            AtomicOp::FetchAnd(v) => old & v,
            AtomicOp::FetchOr(v) => old | v,
            AtomicOp::FetchXor(v) => old ^ v,
        };
        Some(new & mask)
    }
}

/// What an atomic operation orders, as C11's memory orders say: `acquire` (the writes released
/// before the value it reads are seen after it), `release` (the writes before it are seen by
/// whoever acquires the value it writes, or a later one). Relaxed is neither, `acq_rel` and
/// `seq_cst` both (every atomic operation of a word is applied at its home, in one order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicOrder {
    /// Acquire semantics.
    pub acquire: bool,
    /// Release semantics.
    pub release: bool,
}

impl AtomicOrder {
    /// `memory_order_relaxed`.
    pub const RELAXED: AtomicOrder = AtomicOrder {
        acquire: false,
        release: false,
    };
    /// `memory_order_acquire`.
    pub const ACQUIRE: AtomicOrder = AtomicOrder {
        acquire: true,
        release: false,
    };
    /// `memory_order_release`.
    pub const RELEASE: AtomicOrder = AtomicOrder {
        acquire: false,
        release: true,
    };
    /// `memory_order_acq_rel` and `memory_order_seq_cst`.
    pub const ACQ_REL: AtomicOrder = AtomicOrder {
        acquire: true,
        release: true,
    };
}

impl GlobalAddr {
    /// The page holding this byte.
    pub fn page(self) -> PageNum {
        PageNum((self.0 / PAGE_SIZE as u64) as u32)
    }
    /// The offset of this byte inside its page.
    pub fn offset(self) -> usize {
        (self.0 % PAGE_SIZE as u64) as usize
    }
    /// This address plus `bytes`.
    pub fn offset_by(self, bytes: u64) -> GlobalAddr {
        GlobalAddr(self.0 + bytes)
    }
}

impl Time {
    /// The time `d` after `self`.
    pub fn after(self, d: Duration) -> Time {
        Time(
            self.0
                .saturating_add(d.as_nanos().min(u128::from(u64::MAX)) as u64),
        )
    }
    /// Nanoseconds from `earlier` to `self` (zero if `earlier` is later).
    pub fn since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

impl fmt::Display for PageNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "page {}", self.0)
    }
}

impl fmt::Display for LockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lock {}", self.0)
    }
}

impl fmt::Display for CvId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "condition variable {}", self.0)
    }
}

/// A page's bytes, on the heap.
#[derive(Clone, PartialEq, Eq)]
pub struct PageBuf(pub Box<[u8; PAGE_SIZE]>);

impl PageBuf {
    /// A page of zeros.
    pub fn zeroed() -> PageBuf {
        PageBuf(Box::new([0; PAGE_SIZE]))
    }

    /// A copy of `bytes` (one page), written straight into the new buffer (no zeroing first).
    pub fn copy_of(bytes: &[u8; PAGE_SIZE]) -> PageBuf {
        let b: Box<[u8]> = Box::from(&bytes[..]);
        PageBuf(b.try_into().expect("a page's length"))
    }
}

impl fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nonzero = self.0.iter().filter(|&&b| b != 0).count();
        write!(f, "PageBuf({nonzero} non-zero bytes)")
    }
}

/// Pages asked for in one GETP at most (bounds the work a single request can cause).
pub const MAX_GETP_PAGES: usize = 1024;
/// Page requests held for pages this node has not allocated yet, at most.
pub const MAX_EARLY_REQUESTS: usize = 4096;
/// Diff bytes per DIFF message at most; larger flushes are split.
pub const MAX_DIFF_MSG_BYTES: usize = 256 * 1024;

/// The most runtime counters a node reports at exit (`Node::note_runtime_counters`).
pub const MAX_RUNTIME_COUNTERS: usize = 64;
