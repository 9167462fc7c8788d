//! What goes through the door: a thread's request (a fault, or one of the API's calls) and the
//! node's answer, typed. A fault travels as atomics (it is posted from signal context); a call
//! and its reply travel in the slot's cells (posted from thread context).

use dsm_core::mailbox::{Channel, Filter, Letter};
use dsm_core::{
    Access, AllocPolicy, AtomicOp, AtomicOrder, CvId, GlobalAddr, LockId, NodeId, UsageError,
};

use crate::stats::NodeStats;

/// A fault on a shared page this node does not hold (or holds read-only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    /// The page, counted from the start of the shared region.
    pub page: u32,
    /// The byte of the page the faulting access touched.
    pub offset: u16,
    pub access: Access,
}

impl Fault {
    /// The fault as one word (the slot's atomic): the page, the offset (12 bits) and the
    /// access in the low bit.
    pub(crate) fn to_word(self) -> u64 {
        u64::from(self.page) << 13
            | u64::from(self.offset & 0xfff) << 1
            | u64::from(self.access == Access::Write)
    }

    pub(crate) fn from_word(w: u64) -> Fault {
        Fault {
            page: (w >> 13) as u32,
            offset: ((w >> 1) & 0xfff) as u16,
            access: if w & 1 == 1 {
                Access::Write
            } else {
                Access::Read
            },
        }
    }
}

/// How the node answered a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultOutcome {
    /// The page is open for the access: retry the instruction.
    Open,
    /// Nothing is allocated at the address: behave like a plain segmentation fault.
    Unallocated,
    /// The node left the job before serving it (another thread's `jia_exit`): nothing will.
    Left,
}

impl FaultOutcome {
    pub(crate) fn to_word(self) -> u32 {
        match self {
            FaultOutcome::Open => 0,
            FaultOutcome::Unallocated => 1,
            FaultOutcome::Left => 2,
        }
    }

    pub(crate) fn from_word(w: u32) -> FaultOutcome {
        match w {
            0 => FaultOutcome::Open,
            1 => FaultOutcome::Unallocated,
            _ => FaultOutcome::Left,
        }
    }
}

/// What a thread asks of its node through its slot.
#[derive(Debug)]
pub(crate) enum Request {
    Fault(Fault),
    Call(Call),
}

/// One of the API's calls (JIAJIA's name in [`Call::name`]).
#[derive(Debug)]
pub(crate) enum Call {
    Alloc {
        policy: AllocPolicy,
        bytes: u64,
    },
    Lock(LockId),
    Unlock(LockId),
    Barrier {
        /// The threads of this node that met in it (1: `jia_barrier`).
        threads: u16,
    },
    Wait,
    SetCv(CvId),
    ResetCv(CvId),
    WaitCv(CvId),
    /// A letter (`jia_send`, and the collectives' letters).
    Send {
        to: NodeId,
        channel: Channel,
        tag: i32,
        data: Vec<u8>,
    },
    /// The oldest letter that passes the filter, waiting for one.
    Receive(Filter),
    StartStats,
    StopStats,
    Stats,
    HomeMigration(bool),
    /// An atomic operation on the `width`-byte word at `addr` (its offset in the region).
    Atomic {
        addr: GlobalAddr,
        width: u8,
        op: AtomicOp,
        order: AtomicOrder,
    },
    /// A page of atomic words homed on the lowest node from this one on (`Reply::Value`: the
    /// node in the top 16 bits, the page's offset below; `u64::MAX`: none), for an acquire
    /// fence that acquires from every home (`Node::atomic_page_homed_from`).
    AtomicPageHomedFrom(u16),
    /// Ends the job with this message: answered once every node has it (or a bound passed).
    Error(String),
    Exit,
}

impl Call {
    /// The call's name in JIAJIA's interface, for messages and for the service thread's
    /// prediction of the next request.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Call::Alloc { .. } => "jia_alloc",
            Call::Lock(_) => "jia_lock",
            Call::Unlock(_) => "jia_unlock",
            Call::Barrier { threads: 1 } => "jia_barrier",
            Call::Barrier { .. } => "jia_barrier_threads",
            Call::Wait => "jia_wait",
            Call::SetCv(_) => "jia_setcv",
            Call::ResetCv(_) => "jia_resetcv",
            Call::WaitCv(_) => "jia_waitcv",
            Call::Send {
                channel: Channel::Send,
                ..
            } => "jia_send",
            Call::Send {
                channel: Channel::Bcast,
                ..
            } => "jia_bcast",
            Call::Send {
                channel: Channel::Reduce,
                ..
            } => "jia_reduce",
            Call::Send {
                channel: Channel::Races,
                ..
            } => "jia_exit (the race checker's records)",
            Call::Receive(f) => match f.channel {
                Channel::Send => "jia_recv",
                Channel::Bcast => "jia_bcast",
                Channel::Reduce => "jia_reduce",
                Channel::Races => "jia_exit (the race checker's records)",
            },
            Call::StartStats => "jia_startstat",
            Call::StopStats => "jia_stopstat",
            Call::Stats => "stats",
            Call::HomeMigration(_) => "jia_config(HMIG)",
            Call::Atomic { .. } => "jia_atomic",
            Call::AtomicPageHomedFrom(_) => "jia_atomic_thread_fence",
            Call::Error(_) => "jia_error",
            Call::Exit => "jia_exit",
        }
    }
}

/// What a call gives back when it succeeds.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Done; nothing to give.
    Done,
    /// An allocation's offset in the shared region.
    Allocated(u64),
    /// A received letter.
    Letter(Letter),
    /// This node's statistics.
    Stats(Box<NodeStats>),
    /// An atomic word's value before the operation.
    Value(u64),
}

/// A call's answer.
pub(crate) type CallResult = Result<Reply, UsageError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_survives_its_word() {
        for (page, offset, access) in [
            (0, 0, Access::Read),
            (7, 4095, Access::Write),
            (u32::MAX, 8, Access::Write),
            (u32::MAX, 4095, Access::Read),
        ] {
            let f = Fault {
                page,
                offset,
                access,
            };
            assert_eq!(Fault::from_word(f.to_word()), f);
        }
        for o in [FaultOutcome::Open, FaultOutcome::Unallocated] {
            assert_eq!(FaultOutcome::from_word(o.to_word()), o);
        }
    }
}
