//! The API's calls carried out on the node's state, by whichever thread holds it: the service
//! thread (a posted call) or the calling thread itself (`crate::call`). A call either answers at
//! once or waits for the core to resume its thread ([`Pending`]), whose answer is made then.

use std::time::Instant;

use dsm_core::{UsageError, WaiterId};

use super::Service;
use crate::door::SLOTS;
use crate::door::end::fatal;
use crate::door::request::{Call, CallResult, Reply};
use crate::stats::NodeStats;

/// A call waiting for the core to resume its thread: what to answer then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pending {
    /// Resumed: done (a lock granted, a barrier passed...). The call's name, for the service
    /// thread's prediction of the next request.
    Resumed(&'static str),
    /// A receive that waited: the letter that completed it is taken for the thread.
    Letter,
    /// An atomic operation: its value before is taken for the thread.
    Atomic,
}

impl Service {
    /// Takes a call of slot `slot`'s thread: answers it at once, or leaves it pending.
    pub(super) fn handle_call(&mut self, slot: usize, call: Call) {
        self.note_request(slot);
        // The calling thread's fast-path writes were queued before its call: record them before
        // acting on it (a release must carry them).
        self.drain_fast_faults();
        let name = call.name();
        let waits_for_letter = matches!(call, Call::Receive(_));
        let atomic = matches!(call, Call::Atomic { .. });
        match self.run_call(slot, call) {
            Ok(Some(reply)) => {
                SLOTS.complete_call(slot, Ok(reply), self.driver != Some(slot));
            }
            Ok(None) => {
                let p = if waits_for_letter {
                    Pending::Letter
                } else if atomic {
                    Pending::Atomic
                } else {
                    Pending::Resumed(name)
                };
                self.pending.insert(slot, p);
            }
            Err(e) => SLOTS.complete_call(slot, Err(e), self.driver != Some(slot)),
        }
    }

    /// `Ok(Some(reply))`: answered; `Ok(None)`: the thread waits until the core resumes it (or,
    /// for exit and error, until the service thread completes it).
    fn run_call(&mut self, slot: usize, call: Call) -> Result<Option<Reply>, UsageError> {
        let now = self.now();
        let w = WaiterId(slot as u64);
        let node = &mut self.node;
        let waits = |r: Result<(), UsageError>| r.map(|()| None);
        match call {
            Call::Alloc { policy, bytes } => {
                self.alloc(policy, bytes).map(|a| Some(Reply::Allocated(a)))
            }
            Call::Lock(l) => {
                node.note_threads(crate::door::threads_seen() as usize);
                waits(node.acquire(now, l, w))
            }
            Call::Unlock(l) => waits(node.release(now, l, w)),
            Call::Barrier { threads } => waits(node.barrier_of_threads(now, w, threads)),
            Call::Wait => waits(node.wait(now, w)),
            Call::SetCv(c) => waits(node.setcv(now, c, w)),
            Call::ResetCv(c) => waits(node.resetcv(now, c, w)),
            Call::WaitCv(c) => waits(node.waitcv(now, c, w)),
            Call::Send {
                to,
                channel,
                tag,
                data,
            } => node
                .send_letter(to, channel, tag, data)
                .map(|()| Some(Reply::Done)),
            Call::Receive(filter) => Ok(node.receive(filter, w)?.map(Reply::Letter)),
            Call::StartStats => {
                self.reset_stats();
                Ok(Some(Reply::Done))
            }
            Call::StopStats => {
                self.runtime_stats();
                self.node.freeze_stats();
                Ok(Some(Reply::Done))
            }
            Call::Stats => {
                let runtime = self.runtime_stats();
                Ok(Some(Reply::Stats(Box::new(NodeStats {
                    core: self.node.stats().clone(),
                    runtime,
                }))))
            }
            Call::Atomic {
                addr,
                width,
                op,
                order,
            } => waits(node.atomic(now, w, (addr, width), op, order)),
            Call::AtomicPageHomedFrom(first) => Ok(Some(Reply::Value(
                node.atomic_page_homed_from(first)
                    .map_or(u64::MAX, |(home, at)| u64::from(home.0) << 48 | at.0),
            ))),
            Call::HomeMigration(on) => {
                self.set_home_migration(on);
                Ok(Some(Reply::Done))
            }
            Call::Error(text) => {
                self.node.broadcast_error(&text);
                self.own_error = true;
                // Answered once every node acknowledged it (`error_sent`).
                self.error_waiter = Some((slot, Instant::now()));
                Ok(None)
            }
            Call::Exit => {
                self.set_exit_waiter(w);
                self.runtime_stats();
                waits(self.node.exit(now, w))
            }
        }
    }

    /// The core resumed slot `slot`'s thread from its pending call: its answer.
    pub(super) fn resumed_call(&mut self, slot: usize) -> CallResult {
        match self.pending.remove(&slot) {
            Some(Pending::Letter) => match self.node.take_letter(WaiterId(slot as u64)) {
                Some(l) => Ok(Reply::Letter(l)),
                None => fatal("a receive was resumed without a letter (a runtime bug)"),
            },
            Some(Pending::Atomic) => match self.node.take_atomic_result(WaiterId(slot as u64)) {
                Some(v) => Ok(Reply::Value(v)),
                None => fatal("an atomic operation was resumed without its value (a runtime bug)"),
            },
            Some(Pending::Resumed(name)) => {
                self.resumed = Some((Instant::now(), name));
                Ok(Reply::Done)
            }
            None => Ok(Reply::Done),
        }
    }
}
