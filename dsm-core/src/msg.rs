//! The protocol's messages, in JIAJIA's vocabulary.
//!
//! These are typed values; [`crate::codec`] turns them into bytes and back. A message names pages,
//! locks and nodes by typed id; page bytes travel as shared runs of whole pages ([`RunData`]) and
//! diffs in their encoded form (see [`crate::diff`]).

use std::sync::Arc;

use crate::mailbox::Channel;
use crate::types::{Access, AtomicOp, Count, CvId, Epoch, LockId, NodeId, PageNum};

/// One page's diff, encoded as in [`crate::diff`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageDiff {
    /// The page the diff applies to.
    pub page: PageNum,
    /// The encoded runs.
    pub runs: Vec<u8>,
}

/// A write notice in a barrier grant: the page, who wrote it in the closing epoch, and whether
/// its home moves to that writer (home migration, see the core's `pages.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteNotice {
    /// The page written.
    pub page: PageNum,
    /// Its only writer, or `None` if several nodes wrote it.
    pub writer: Option<NodeId>,
    /// The page's home becomes `writer` (only with a writer that claimed it).
    pub moves: bool,
}

/// A write notice of atomic words' releases, with the write's identity: the page, its writer and
/// the interval of the writer's last write to it, so that a node passes on a write it learned
/// through an atomic acquire once, and an acquirer skips one it knows (see the core's
/// `atomics.rs`, "Chains").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteId {
    /// The page written.
    pub page: PageNum,
    /// The node that wrote it.
    pub writer: NodeId,
    /// The interval of the writer's last write to the page (each release ends an interval, and
    /// sends the interval's diffs home first): every write of `writer` to `page` up to it is
    /// home.
    pub interval: Count,
    /// The barrier epoch the writer's release was tagged with.
    pub epoch: Epoch,
}

/// Pages, each with the interval of its writer's last write to it (an atomic release's own
/// notices: see [`WriteId::interval`]).
pub type PageWrites = Vec<(PageNum, Count)>;

/// The bytes of a grant's run of pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunData {
    /// Copied into a buffer of their own when the grant was made, shared with the home's
    /// record of what it sent (a page served before its writes were tracked is compared with
    /// them once the grant is out).
    Copied(Arc<[u8]>),
    /// This many of the sender's own pages, from the grant's first: not copied, but read from
    /// its memory when the transport sends them, and again should it send them again (see
    /// [`crate::PageMemory::lends_runs`]). Only a home lends, only pages whose every write
    /// here is tracked: bytes read later are the ones granted or newer, and a newer write
    /// comes with its write notice, as a write made just after the grant would.
    Lent(u16),
}

impl RunData {
    /// Bytes in the run.
    pub fn len(&self) -> usize {
        match self {
            RunData::Copied(b) => b.len(),
            RunData::Lent(pages) => usize::from(*pages) * crate::PAGE_SIZE,
        }
    }

    /// Whether the run is empty (never, in a grant).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A protocol message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// GETP: send me these pages (the first is the one a thread faulted on, unless all are
    /// prefetches). Sent to the pages' home.
    GetPage {
        /// The faulting access (for statistics at the home).
        access: Access,
        /// The pages wanted, all homed at the receiver.
        pages: Vec<PageNum>,
        /// The barriers and `jia_wait`s the sender has passed (`Node::collectives_passed`): a
        /// home still in an earlier one (its grant late) holds a request for pages it has not
        /// allocated yet, made after it, instead of taking it for different allocations.
        passed: Epoch,
    },
    /// GETPGRANT: the bytes of a run of consecutive pages (one page or many: a home answers a
    /// request with as few grants as its pages' runs and the transport's message size allow).
    GetPageGrant {
        /// The run's first page.
        page: PageNum,
        /// The run's bytes at the home, [`crate::PAGE_SIZE`] per page (1 to
        /// [`crate::codec::MAX_RUN_PAGES`] pages): copied, or lent by the sender's memory.
        data: RunData,
        /// Sent by a node holding a copy, on the home's behalf ([`Msg::Forward`]), not by the
        /// node asked.
        forwarded: bool,
    },
    /// DIFF: apply these diffs (all for pages homed at the receiver), then acknowledge `id`.
    Diff {
        /// The sender's sequence number for this batch.
        id: Count,
        /// The diffs.
        diffs: Vec<PageDiff>,
    },
    /// DIFFGRANT: the diffs of batch `id` are applied.
    DiffGrant {
        /// The batch acknowledged.
        id: Count,
    },
    /// ACQ: the sender wants `lock`; it has seen the lock's write notices up to `seen`.
    Acquire {
        /// The lock.
        lock: LockId,
        /// The lock's release counter at the sender's last acquire.
        seen: Count,
        /// The sender's barrier epoch: notices of writes from earlier epochs were invalidated
        /// by the barriers that ended them (the manager keeps them one barrier longer, for a
        /// node whose other thread is still in that barrier).
        epoch: Epoch,
        /// The sender's threads may pass the lock among themselves (cohort locking): tell it,
        /// while it holds the lock, when another node waits ([`Msg::LockWanted`]).
        cohort: bool,
    },
    /// ACQGRANT: the lock is the receiver's; invalidate the pages written under it since `seen`.
    AcquireGrant {
        /// The lock.
        lock: LockId,
        /// The lock's release counter now.
        counter: Count,
        /// Pages written in releases newer than the acquirer's `seen`.
        notices: Vec<PageNum>,
        /// Pages of such releases of the epoch before the acquirer's (with three nodes or
        /// more): its barrier invalidated them, but it passes them on through its atomic
        /// releases to nodes not past that barrier yet (see the core's `atomics.rs`, "Chains").
        earlier: Vec<PageNum>,
    },
    /// REL: the sender releases `lock`; these pages were written since its last release of it.
    Release {
        /// The lock.
        lock: LockId,
        /// The sender's barrier epoch.
        epoch: Epoch,
        /// Write notices.
        notices: Vec<PageNum>,
        /// Write notices of the epoch before `epoch` (pages the sender's last barrier took for
        /// its own notices; a node may not have had that barrier's grant yet).
        earlier: Vec<PageNum>,
    },
    /// BARR: the sender reached barrier `epoch`; these pages it wrote in the epoch.
    Barrier {
        /// The barrier's epoch.
        epoch: Epoch,
        /// The sender's allocations, to catch programs that allocate differently.
        allocs: crate::alloc::Allocs,
        /// The threads of the sender that met in it (`jia_barrier_threads(threads)`; 1 for
        /// `jia_barrier`): every node must give the same count.
        threads: u16,
        /// Write notices.
        notices: Vec<PageNum>,
        /// The pages among `notices` homed elsewhere whose valid copy the sender holds: it
        /// offers to become their home if it turns out their only writer (home migration).
        claims: Vec<PageNum>,
    },
    /// BARRGRANT: everyone reached barrier `epoch`; invalidate the pages others wrote.
    BarrierGrant {
        /// The barrier's epoch.
        epoch: Epoch,
        /// Every page written in the epoch, with its writer.
        notices: Vec<WriteNotice>,
    },
    /// MIGRATED: the sender closed the pages barrier `epoch`'s grant would move, and names those
    /// that must not move (a second round, only for barriers that move homes).
    Migrated {
        /// The barrier's epoch.
        epoch: Epoch,
        /// Pages another thread of the sender wrote during the barrier (see `on_barrier_grant`).
        vetoes: Vec<PageNum>,
    },
    /// MIGRGRANT: every node answered: the moves not vetoed by any node are applied, and the
    /// barrier is over.
    MigrateGrant {
        /// The barrier's epoch.
        epoch: Epoch,
        /// Every node's vetoes: these pages keep their homes.
        vetoed: Vec<PageNum>,
    },
    /// LOCKWANTED: another node waits for `lock`, which the receiver was granted: the
    /// receiver's threads pass it among themselves only a bounded number of times more before
    /// it goes back to the manager (see `CoreConfig::lock_handoffs`).
    LockWanted {
        /// The lock.
        lock: LockId,
    },
    /// FWD, from a home to a node it served `first..first + count` to, whose copies are as
    /// current as the home's: send them to `to` (a GETPGRANT marked forwarded), or answer
    /// [`Msg::ForwardRefused`] if they are not all still held, valid and unwritten.
    Forward {
        /// The node that asked the home.
        to: NodeId,
        /// The first page.
        first: PageNum,
        /// The pages, 1 to [`crate::MAX_GETP_PAGES`].
        count: u16,
    },
    /// ATOMIC: apply `op` to the `width`-byte word at `addr` (homed at the receiver), and answer
    /// with its value before ([`Msg::AtomicGrant`]). With `release`, the sender's writes before
    /// it are home already, and `notices` (and `earlier`, of the epoch before `epoch`) name their
    /// pages, each with the interval of the sender's last write to it, and `passed_on` the
    /// writes of others its
    /// atomic acquires made it see, recorded as a lock's release records its notices; with
    /// `acquire` the answer carries the notices recorded after `seen` (from epoch `epoch` on).
    Atomic {
        /// The sender's number for the operation.
        id: u32,
        /// The word's offset in the shared region.
        addr: u64,
        /// 1, 2, 4 or 8.
        width: u8,
        /// The operation.
        op: AtomicOp,
        /// Acquire semantics.
        acquire: bool,
        /// Release semantics.
        release: bool,
        /// The word's notice counter the sender has seen.
        seen: Count,
        /// The sender's barrier epoch (the barrier grants it has had): an acquire is sent the
        /// word's notices of writes from this epoch on.
        epoch: Epoch,
        /// A thread of the sender waits in a barrier (called, not granted): the writes a
        /// release carries belong to the next epoch, `epoch + 1`, as a lock's release tags them.
        in_barrier: bool,
        /// The barriers and `jia_wait`s the sender has passed, as `GetPage::passed`: a home
        /// still in an earlier one holds an operation on a word it has not allocated yet.
        passed: Epoch,
        /// Pages written since the sender last released through a word of this home, each with
        /// the interval of its last write (release only).
        notices: PageWrites,
        /// Pages of the epoch before, as `Msg::Release::earlier` (release only).
        earlier: PageWrites,
        /// Writes of other nodes the sender learned through its atomic acquires and has not
        /// passed on to this home yet (release only).
        passed_on: Vec<WriteId>,
    },
    /// ATOMICGRANT: the word's value before operation `id`, its notice counter now, and (for an
    /// acquire) the pages to invalidate.
    AtomicGrant {
        /// The operation.
        id: u32,
        /// The word's value before it.
        old: u64,
        /// The word's notice counter.
        counter: Count,
        /// How many atomic operations changed a word of the page at its home so far, this one
        /// included (wrapping; operations of the home's own threads applied with the CPU's
        /// atomics are counted whether they changed it or not): with the value, what tells the
        /// node whether the operation showed it anything its last one on the word did not.
        changes: u32,
        /// Writes released through the home's words that the sender has not seen (acquire only).
        notices: Vec<WriteId>,
    },
    /// FWDREFUSED: the copies a [`Msg::Forward`] named (from `first` on, `count` pages) are not
    /// all held here any more: the home sends them to `to` itself.
    ForwardRefused {
        /// The node that asked the home.
        to: NodeId,
        /// The first page.
        first: PageNum,
        /// The pages.
        count: u16,
    },
    /// WAIT: a barrier without coherence.
    Wait {
        /// The wait's sequence number.
        epoch: Epoch,
    },
    /// WAITGRANT: everyone reached wait `epoch`.
    WaitGrant {
        /// The wait's sequence number.
        epoch: Epoch,
    },
    /// SETCV: set the condition variable (a release: carries write notices).
    SetCv {
        /// The condition variable.
        cv: CvId,
        /// The epoch the sender's writes belong to, as [`Msg::Release::epoch`].
        epoch: Epoch,
        /// Pages written since the sender last set this variable.
        notices: Vec<PageNum>,
    },
    /// RESETCV: clear the condition variable.
    ResetCv {
        /// The condition variable.
        cv: CvId,
    },
    /// WAITCV: wake me when the variable is set (an acquire).
    WaitCv {
        /// The condition variable.
        cv: CvId,
        /// The variable's counter at the sender's last wake-up.
        seen: Count,
    },
    /// CVGRANT: the variable is set; invalidate these pages.
    CvGrant {
        /// The condition variable.
        cv: CvId,
        /// The variable's counter now.
        counter: Count,
        /// Pages written in sets newer than the waiter's `seen`.
        notices: Vec<PageNum>,
    },
    /// JIAEXIT: the sender is done; its statistics counters ride along to node 0.
    Exit {
        /// The sender's statistics, as [`crate::Stats::to_counters`].
        stats: Vec<u64>,
    },
    /// Everyone is done: leave.
    ExitGrant,
    /// ERRMSG: the sender's application failed; end the job.
    Error {
        /// What went wrong.
        text: String,
    },
    /// SEND: a letter for the receiver's mailbox (`jia_send`, or a collective's step).
    Send {
        /// Whose traffic it is.
        channel: Channel,
        /// The sender's tag (a collective's sequence number on its channel).
        tag: i32,
        /// The bytes.
        data: Vec<u8>,
    },
}

/// The type of a message, for statistics and the wire header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum MsgKind {
    /// [`Msg::GetPage`]
    GetPage = 1,
    /// [`Msg::GetPageGrant`]
    GetPageGrant,
    /// [`Msg::Diff`]
    Diff,
    /// [`Msg::DiffGrant`]
    DiffGrant,
    /// [`Msg::Acquire`]
    Acquire,
    /// [`Msg::AcquireGrant`]
    AcquireGrant,
    /// [`Msg::Release`]
    Release,
    /// [`Msg::Barrier`]
    Barrier,
    /// [`Msg::BarrierGrant`]
    BarrierGrant,
    /// [`Msg::Wait`]
    Wait,
    /// [`Msg::WaitGrant`]
    WaitGrant,
    /// [`Msg::SetCv`]
    SetCv,
    /// [`Msg::ResetCv`]
    ResetCv,
    /// [`Msg::WaitCv`]
    WaitCv,
    /// [`Msg::CvGrant`]
    CvGrant,
    /// [`Msg::Exit`]
    Exit,
    /// [`Msg::ExitGrant`]
    ExitGrant,
    /// [`Msg::Error`]
    Error,
    /// [`Msg::Send`]
    Send,
    /// [`Msg::Migrated`]
    Migrated,
    /// [`Msg::MigrateGrant`]
    MigrateGrant,
    /// [`Msg::LockWanted`]
    LockWanted,
    /// [`Msg::Forward`]
    Forward,
    /// [`Msg::ForwardRefused`]
    ForwardRefused,
    /// [`Msg::Atomic`]
    Atomic,
    /// [`Msg::AtomicGrant`]
    AtomicGrant,
}

impl MsgKind {
    /// Every kind, in wire order.
    pub const ALL: [MsgKind; 26] = [
        MsgKind::GetPage,
        MsgKind::GetPageGrant,
        MsgKind::Diff,
        MsgKind::DiffGrant,
        MsgKind::Acquire,
        MsgKind::AcquireGrant,
        MsgKind::Release,
        MsgKind::Barrier,
        MsgKind::BarrierGrant,
        MsgKind::Wait,
        MsgKind::WaitGrant,
        MsgKind::SetCv,
        MsgKind::ResetCv,
        MsgKind::WaitCv,
        MsgKind::CvGrant,
        MsgKind::Exit,
        MsgKind::ExitGrant,
        MsgKind::Error,
        MsgKind::Send,
        MsgKind::Migrated,
        MsgKind::MigrateGrant,
        MsgKind::LockWanted,
        MsgKind::Forward,
        MsgKind::ForwardRefused,
        MsgKind::Atomic,
        MsgKind::AtomicGrant,
    ];
    /// Number of kinds.
    pub const COUNT: usize = Self::ALL.len();

    /// The kind with wire code `code`.
    pub fn from_code(code: u8) -> Option<MsgKind> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    /// A dense index `0..COUNT`.
    pub fn index(self) -> usize {
        self as usize - 1
    }

    /// JIAJIA's name for the kind.
    pub fn jiajia_name(self) -> &'static str {
        match self {
            MsgKind::GetPage => "GETP",
            MsgKind::GetPageGrant => "GETPGRANT",
            MsgKind::Diff => "DIFF",
            MsgKind::DiffGrant => "DIFFGRANT",
            MsgKind::Acquire => "ACQ",
            MsgKind::AcquireGrant => "ACQGRANT",
            MsgKind::Release => "REL",
            MsgKind::Barrier => "BARR",
            MsgKind::BarrierGrant => "BARRGRANT",
            MsgKind::Wait => "WAIT",
            MsgKind::WaitGrant => "WAITGRANT",
            MsgKind::SetCv => "SETCV",
            MsgKind::ResetCv => "RESETCV",
            MsgKind::WaitCv => "WAITCV",
            MsgKind::CvGrant => "CVGRANT",
            MsgKind::Exit => "JIAEXIT",
            MsgKind::ExitGrant => "EXITGRANT",
            MsgKind::Error => "ERRMSG",
            MsgKind::Send => "SEND",
            MsgKind::Migrated => "MIGRATED",
            MsgKind::MigrateGrant => "MIGRGRANT",
            MsgKind::LockWanted => "LOCKWANTED",
            MsgKind::Forward => "FWD",
            MsgKind::ForwardRefused => "FWDREFUSED",
            MsgKind::Atomic => "ATOMIC",
            MsgKind::AtomicGrant => "ATOMICGRANT",
        }
    }
}

impl Msg {
    /// The message's kind.
    pub fn kind(&self) -> MsgKind {
        match self {
            Msg::GetPage { .. } => MsgKind::GetPage,
            Msg::GetPageGrant { .. } => MsgKind::GetPageGrant,
            Msg::Diff { .. } => MsgKind::Diff,
            Msg::DiffGrant { .. } => MsgKind::DiffGrant,
            Msg::Acquire { .. } => MsgKind::Acquire,
            Msg::AcquireGrant { .. } => MsgKind::AcquireGrant,
            Msg::Release { .. } => MsgKind::Release,
            Msg::Barrier { .. } => MsgKind::Barrier,
            Msg::BarrierGrant { .. } => MsgKind::BarrierGrant,
            Msg::Wait { .. } => MsgKind::Wait,
            Msg::WaitGrant { .. } => MsgKind::WaitGrant,
            Msg::SetCv { .. } => MsgKind::SetCv,
            Msg::ResetCv { .. } => MsgKind::ResetCv,
            Msg::WaitCv { .. } => MsgKind::WaitCv,
            Msg::CvGrant { .. } => MsgKind::CvGrant,
            Msg::Exit { .. } => MsgKind::Exit,
            Msg::ExitGrant => MsgKind::ExitGrant,
            Msg::Error { .. } => MsgKind::Error,
            Msg::Send { .. } => MsgKind::Send,
            Msg::Migrated { .. } => MsgKind::Migrated,
            Msg::MigrateGrant { .. } => MsgKind::MigrateGrant,
            Msg::LockWanted { .. } => MsgKind::LockWanted,
            Msg::Forward { .. } => MsgKind::Forward,
            Msg::ForwardRefused { .. } => MsgKind::ForwardRefused,
            Msg::Atomic { .. } => MsgKind::Atomic,
            Msg::AtomicGrant { .. } => MsgKind::AtomicGrant,
        }
    }
}
