//! Why the protocol refuses or ends: a job's errors, the application's misuses, and messages
//! that break the protocol. Below every module of the node, which all name them.

use crate::alloc::AllocError;
use crate::mailbox::MAX_LETTER_BYTES;
use crate::msg::MsgKind;
use crate::types::{LockId, MAX_CVS, MAX_LOCKS, NodeId, PageNum};

/// Why a job ends in error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// A peer did not answer a request in time.
    #[error("{peer} did not answer a {what} request within {waited_ms} ms")]
    NoReply {
        /// The silent peer.
        peer: NodeId,
        /// What was asked.
        what: &'static str,
        /// How long we waited.
        waited_ms: u64,
    },
    /// Two nodes each broadcast one `jia_bcast` as its root.
    #[error(
        "jia_bcast number {} of the job: {other} broadcast it as its root, as {here} did (every \
         node must name the same root)",
        round + 1
    )]
    BcastRoots {
        /// The broadcast (its sequence number, from 0).
        round: u32,
        /// The other root.
        other: NodeId,
        /// This node.
        here: NodeId,
    },
    /// Nodes met in one barrier with different counts of threads.
    #[error(
        "a barrier met with different thread counts: {} gave {} and {} gave {} (every node must \
         call jia_barrier_threads with the same count; jia_barrier counts 1)",
        first.0, first.1, other.0, other.1
    )]
    ThreadsMismatch {
        /// The first node to arrive, and its count.
        first: (NodeId, u16),
        /// A node that gave another count, and that count.
        other: (NodeId, u16),
    },
    /// Nodes met in a barrier having made different allocation calls.
    #[error(
        "{} and {} reached a barrier after different allocation calls: {} made {}, {} made {}{} \
         (allocations must be the same calls, with the same sizes and policies, in the same \
         order on every node)",
        first.0, other.0, first.0, first.1, other.0, other.1,
        if first.1.calls == other.1.calls && first.1.pages == other.1.pages {
            ": their sizes, policies or order differ"
        } else {
            ""
        }
    )]
    AllocMismatch {
        /// The first node to arrive, and its allocations.
        first: (NodeId, crate::alloc::Allocs),
        /// A node whose allocations differ, and its allocations.
        other: (NodeId, crate::alloc::Allocs),
    },
    /// Another node asked for pages (touched them, read ahead to them, or made an atomic
    /// operation on a word of them) this node had not allocated when it reached a barrier or
    /// its exit: the nodes made different allocation calls before it.
    #[error(
        "{node} asked for {page} (a touch, a read-ahead or an atomic operation), beyond the \
         {pages} page(s) of the {calls} allocation call(s) {here} had made when it reached \
         {reached}: {node} made allocation calls {here} did not make, or larger ones \
         (allocations must be the same calls, with the same sizes, in the same order on every \
         node)"
    )]
    AllocMissing {
        /// The node that asked for the page.
        node: NodeId,
        /// The first page it asked for that is not allocated here.
        page: PageNum,
        /// This node.
        here: NodeId,
        /// Pages allocated here.
        pages: u64,
        /// Allocation calls made here.
        calls: u64,
        /// `jia_barrier` or `jia_exit`.
        reached: &'static str,
    },
    /// Another node asked this one for pages as their home before this node made the
    /// allocation that holds them, and this node's allocation homes them elsewhere: the two
    /// made different allocation calls.
    #[error(
        "{node} asked {here} for {page} as its home, but {here}'s allocations home it on {home}: \
         the nodes made different allocation calls (allocations must be the same calls, with the \
         same sizes and policies, in the same order on every node)"
    )]
    HomeMismatch {
        /// The node that asked.
        node: NodeId,
        /// The first page asked for that is not homed here.
        page: PageNum,
        /// This node.
        here: NodeId,
        /// Its home by this node's allocations.
        home: NodeId,
    },
    /// Another node's application failed.
    #[error("{from} failed: {text}")]
    Remote {
        /// Who failed.
        from: NodeId,
        /// Its message.
        text: String,
    },
}

/// A call the application made wrongly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// A fault on a page that was never allocated.
    #[error("access to {page}, which is not allocated")]
    Unallocated {
        /// The page.
        page: PageNum,
    },
    /// A lock number out of range.
    #[error("lock {0} is out of range (locks are 0 to {last})", last = MAX_LOCKS - 1)]
    BadLock(u16),
    /// A condition variable out of range.
    #[error("condition variable {0} is out of range (condition variables are 0 to {last})", last = MAX_CVS - 1)]
    BadCv(u16),
    /// Acquiring a lock the same waiter holds or waits for.
    #[error("{0} is already held or requested by this thread")]
    LockAlreadyHeld(LockId),
    /// Releasing a lock this waiter does not hold.
    #[error("{0} is not held by this thread")]
    LockNotHeld(LockId),
    /// A second barrier, wait or exit while one is in progress on this node.
    #[error("a barrier, wait or exit is already in progress on this node")]
    CollectiveBusy,
    /// An allocation failed.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// A letter addressed to, or expected from, a node outside the job.
    #[error("node {node} is not in the job (nodes 0 to {last})", last = .nodes.saturating_sub(1))]
    BadNode {
        /// The node named.
        node: i64,
        /// Nodes in the job.
        nodes: u16,
    },
    /// A letter longer than a letter may be.
    #[error(
        "a message of {0} bytes is longer than the {MAX_LETTER_BYTES} bytes one message may carry"
    )]
    LetterTooLong(usize),
    /// An atomic operation on a word that is not an aligned 1-, 2-, 4- or 8-byte word of
    /// allocated shared memory.
    #[error(
        "atomic operation on {width} bytes at offset {addr:#x} of the shared region: atomics take \
         a 1-, 2-, 4- or 8-byte word, aligned to its size, in allocated memory"
    )]
    BadAtomic {
        /// The word's offset in the shared region.
        addr: u64,
        /// Its width in bytes.
        width: u8,
    },
    /// An atomic operation on a word outside the shared region (private memory, a null
    /// pointer).
    #[error(
        "atomic operation on {width} bytes at address {addr:#x}, which is not in the shared \
         region: atomics across nodes take a word of allocated shared memory"
    )]
    AtomicNotShared {
        /// The word's address.
        addr: u64,
        /// Its width in bytes.
        width: u8,
    },
}

/// A message that breaks the protocol (from a buggy or hostile peer); it was ignored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?} from {from} ignored: {why}")]
pub struct ProtocolError {
    /// The sender.
    pub from: NodeId,
    /// The message's kind.
    pub kind: MsgKind,
    /// What was wrong with it.
    pub why: &'static str,
}
