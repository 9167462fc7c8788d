//! Message passing beside shared memory: point-to-point letters (JIAJIA's `jia_send` and
//! `jia_recv`), a broadcast (`jia_bcast`) and a reduction (`jia_reduce`).
//!
//! The letters are the protocol core's ([`dsm_core::mailbox`]): a send does not block (the letter
//! waits in the receiver's mailbox), a receive takes the oldest letter that matches its sender and
//! tag (either may be a wildcard) and waits for one if there is none. Letters move bytes, not
//! coherence: order shared-memory writes before a letter with a barrier, lock or condition
//! variable, as with any other data.
//!
//! The collectives travel on channels of their own, tagged with their sequence number, so a
//! program's tags never meet them: every node must make the same collective calls in the same
//! order, as with allocation. A broadcast is one letter from the root to each other node; a
//! reduction one letter from each node to the root, which combines the contributions in node
//! order (so a floating-point sum comes out the same in every run). Each contribution carries its
//! type's name and the operation: a node that reduces other values than the root's, or combines
//! them otherwise, ends the job naming both (byte counts alone would let 2 `u64` meet 4 `u32`).

use std::sync::atomic::Ordering;

use dsm_core::NodeId;
use dsm_core::mailbox::{Channel, Filter, Letter};

use crate::api::Dsm;
use crate::door::end::fatal;
use crate::door::request::{Call, Reply};

/// How [`Dsm::reduce`] combines the nodes' values, element by element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The largest value.
    Max,
    /// The smallest value.
    Min,
}

/// A value [`Dsm::reduce`] can combine: fixed-size, sent as its little-endian bytes.
pub trait Reducible: Copy + Send + 'static {
    /// Bytes of one value.
    const BYTES: usize;
    /// The type's name, as Rust spells it: a reduction's contributions carry it, and the root
    /// ends the job where two nodes reduce different types (same byte count or not).
    const NAME: &'static str;
    /// Appends the value's bytes.
    fn put(self, out: &mut Vec<u8>);
    /// The value from exactly [`Reducible::BYTES`] bytes.
    fn get(bytes: &[u8]) -> Self;
    /// `self` combined with `other`.
    fn combine(self, other: Self, op: ReduceOp) -> Self;
}

macro_rules! reducible {
    ($($t:ty: $sum:expr;)*) => {$(
        impl Reducible for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut b = [0; std::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_le_bytes(b)
            }
            fn combine(self, other: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Sum => $sum(self, other),
                    ReduceOp::Max => if other > self { other } else { self },
                    ReduceOp::Min => if other < self { other } else { self },
                }
            }
        }
    )*};
}

// Integers wrap on overflow, as C's do on every machine we run on.
reducible! {
    i32: i32::wrapping_add;
    i64: i64::wrapping_add;
    u32: u32::wrapping_add;
    u64: u64::wrapping_add;
    f32: |a: f32, b: f32| a + b;
    f64: |a: f64, b: f64| a + b;
}

impl ReduceOp {
    fn code(self) -> u8 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Max => 1,
            ReduceOp::Min => 2,
        }
    }

    fn name_of(code: u8) -> &'static str {
        match code {
            0 => "a sum",
            1 => "a maximum",
            2 => "a minimum",
            _ => "an unknown operation",
        }
    }
}

/// The head of a reduction's contribution: the values' type and the operation, so the root
/// finds a node that reduces other values or combines them otherwise (MPI compares neither,
/// and gives a wrong result without a word).
fn reduce_head<T: Reducible>(op: ReduceOp) -> Vec<u8> {
    let name = T::NAME.as_bytes();
    let mut head = Vec::with_capacity(2 + name.len());
    head.push(op.code());
    head.push(name.len() as u8);
    head.extend_from_slice(name);
    head
}

/// The operation and type a contribution's head names, and where its values start; `None` for
/// a letter too short to hold a head.
fn read_reduce_head(bytes: &[u8]) -> Option<(u8, &str, usize)> {
    let (&op, rest) = bytes.split_first()?;
    let (&len, rest) = rest.split_first()?;
    let name = rest.get(..usize::from(len))?;
    Some((op, std::str::from_utf8(name).ok()?, 2 + usize::from(len)))
}

/// What [`Dsm::recv_into`] received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// The sender.
    pub from: usize,
    /// The sender's tag.
    pub tag: i32,
    /// Bytes received (the letter's length).
    pub len: usize,
}

impl Dsm {
    #[track_caller]
    fn node_id(&self, n: usize, what: &str) -> NodeId {
        if n >= self.nodes() {
            crate::api::die_at(
                format!(
                    "{what}: node {n} is not in the job (nodes 0 to {})",
                    self.nodes() - 1
                ),
                std::panic::Location::caller(),
            );
        }
        NodeId(n as u16)
    }

    #[track_caller]
    fn post(&self, to: NodeId, channel: Channel, tag: i32, data: Vec<u8>) {
        self.call_or_die(Call::Send {
            to,
            channel,
            tag,
            data,
        });
    }

    /// The race checker's records (`races::gather_records`) to node `to`, in parts of at most
    /// a letter's size, tagged with their number, the last one's negative.
    pub(crate) fn send_race_records(&self, to: usize, bytes: &[u8]) {
        let parts: Vec<&[u8]> = bytes.chunks(dsm_core::mailbox::MAX_LETTER_BYTES).collect();
        let last = parts.len().saturating_sub(1);
        for (k, part) in parts.into_iter().enumerate() {
            let tag = if k == last { -1 - k as i32 } else { k as i32 };
            self.post(NodeId(to as u16), Channel::Races, tag, part.to_vec());
        }
    }

    /// Node `from`'s race checker records (see [`Dsm::send_race_records`]).
    pub(crate) fn receive_race_records(&self, from: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut k = 0;
        loop {
            let part = self.take(Filter {
                channel: Channel::Races,
                from: Some(NodeId(from as u16)),
                tag: None,
            });
            let last = part.tag < 0;
            let number = if last { -1 - part.tag } else { part.tag };
            if number != k {
                fatal(&format!(
                    "check_races: part {number} of node {from}'s records came as part {k} \
                     (a runtime bug)"
                ));
            }
            bytes.extend_from_slice(&part.data);
            if last {
                return bytes;
            }
            k += 1;
        }
    }

    #[track_caller]
    fn take(&self, filter: Filter) -> Letter {
        let any = |v: Option<String>| v.unwrap_or_else(|| "any".into());
        let call = Call::Receive(filter);
        let what = call.name();
        crate::api::in_the_nodes_process(what);
        let from = any(filter.from.map(|n| n.0.to_string()));
        // A collective's tag is its sequence number, not the program's.
        let number = filter.tag.map_or(0, |t| i64::from(t) + 1);
        let _w = crate::progress::waiting(match filter.channel {
            Channel::Reduce => format!(
                "{what} as its root (node {from}'s values, for the job's reduction number {number})"
            ),
            Channel::Bcast => {
                format!("{what} from root node {from} (the job's broadcast number {number})")
            }
            _ => format!(
                "{what} (a message from node {from}, tag {})",
                any(filter.tag.map(|t| t.to_string()))
            ),
        });
        match self.call_or_die(call) {
            Reply::Letter(l) => l,
            other => fatal(&format!(
                "{what}: unexpected answer {other:?} (a runtime bug)"
            )),
        }
    }

    /// Sends `data` to node `to` with `tag` (`jia_send`). Does not wait for the receiver: the
    /// message waits in `to`'s mailbox until a receive there takes it. A node may send to itself.
    ///
    /// Messages move bytes, not coherence: a receiver is not promised the sender's writes to
    /// shared memory (order those with a barrier, a lock or a condition variable).
    ///
    /// ```
    /// let dsm = dsm_runtime::init().expect("join the job");
    /// // Every node sends its id to node 0 (bytes, tag 7); node 0 takes one letter from each.
    /// dsm.send(0, 7, &(dsm.id() as u32).to_le_bytes());
    /// if dsm.id() == 0 {
    ///     for _ in 0..dsm.nodes() {
    ///         let letter = dsm.recv(None, Some(7)); // any sender, tag 7; waits for one
    ///         let from = usize::from(letter.from.0); // a NodeId
    ///         assert_eq!(letter.data, (from as u32).to_le_bytes());
    ///     }
    /// }
    /// dsm.exit();
    /// ```
    #[track_caller]
    pub fn send(&self, to: usize, tag: i32, data: &[u8]) {
        let to = self.node_id(to, "jia_send");
        self.post(to, Channel::Send, tag, data.to_vec());
    }

    /// Receives the oldest message from `from` with `tag` (`None`: any sender, any tag; JIAJIA's
    /// `MSG_PROC_ALL`, `MSG_TAG_ALL`), waiting for one if none is here (`jia_recv`). The
    /// letter's `from` is a [`NodeId`]: node `usize::from(letter.from.0)`. Example:
    /// [`Dsm::send`].
    #[track_caller]
    pub fn recv(&self, from: Option<usize>, tag: Option<i32>) -> Letter {
        // A match, not a closure: the caller's line reaches `node_id` (#[track_caller]).
        #[allow(clippy::manual_map, reason = "a closure would hide the caller's line")]
        let from = match from {
            Some(f) => Some(self.node_id(f, "jia_recv")),
            None => None,
        };
        self.take(Filter {
            channel: Channel::Send,
            from,
            tag,
        })
    }

    /// [`Dsm::recv`] into `buf`. A message longer than `buf` ends the job with a message saying
    /// so (nothing is cut silently).
    #[track_caller]
    pub fn recv_into(&self, from: Option<usize>, tag: Option<i32>, buf: &mut [u8]) -> Received {
        let l = self.recv(from, tag);
        if l.data.len() > buf.len() {
            crate::api::die_at(
                format!(
                    "jia_recv: the message from node {} with tag {} has {} bytes, more than the {} of the buffer",
                    l.from.0,
                    l.tag,
                    l.data.len(),
                    buf.len()
                ),
                std::panic::Location::caller(),
            );
        }
        buf[..l.data.len()].copy_from_slice(&l.data);
        Received {
            from: usize::from(l.from.0),
            tag: l.tag,
            len: l.data.len(),
        }
    }

    /// Copies `buf` of node `root` into `buf` of every node (`jia_bcast`; collective: every node
    /// calls it, with buffers of the same length).
    #[track_caller]
    pub fn bcast(&self, root: usize, buf: &mut [u8]) {
        let root = self.node_id(root, "jia_bcast");
        let seq = self.bcasts.fetch_add(1, Ordering::Relaxed) as i32;
        if usize::from(root.0) == self.id() {
            for n in (0..self.nodes()).filter(|&n| n != self.id()) {
                self.post(NodeId(n as u16), Channel::Bcast, seq, buf.to_vec());
            }
            return;
        }
        let l = self.take(Filter {
            channel: Channel::Bcast,
            from: Some(root),
            tag: Some(seq),
        });
        if l.data.len() != buf.len() {
            crate::api::die_at(
                format!(
                    "jia_bcast: node {} broadcast {} bytes, and this node's buffer has {} (every node must pass the same length)",
                    root.0,
                    l.data.len(),
                    buf.len()
                ),
                std::panic::Location::caller(),
            );
        }
        buf.copy_from_slice(&l.data);
    }

    /// Combines every node's `send` element by element with `op` into `recv` at node `root`
    /// (`jia_reduce`; collective: every node calls it with the same length). `recv` is written at
    /// the root only, and must be as long as `send` there.
    #[track_caller]
    pub fn reduce<T: Reducible>(&self, send: &[T], recv: &mut [T], op: ReduceOp, root: usize) {
        let root = self.node_id(root, "jia_reduce");
        let seq = self.reductions.fetch_add(1, Ordering::Relaxed) as i32;
        let head = reduce_head::<T>(op);
        let mut bytes = head.clone();
        bytes.reserve(send.len() * T::BYTES);
        for &v in send {
            v.put(&mut bytes);
        }
        if usize::from(root.0) != self.id() {
            self.post(root, Channel::Reduce, seq, bytes);
            return;
        }
        if recv.len() < send.len() {
            crate::api::die_at(
                format!(
                    "jia_reduce: the result buffer holds {} values, fewer than the {} reduced",
                    recv.len(),
                    send.len()
                ),
                std::panic::Location::caller(),
            );
        }
        // The contributions in node order, the root's own among them.
        let mut acc: Option<Vec<T>> = None;
        for n in 0..self.nodes() {
            let letter;
            let contribution = if n == self.id() {
                &bytes[head.len()..]
            } else {
                letter = self.take(Filter {
                    channel: Channel::Reduce,
                    from: Some(NodeId(n as u16)),
                    tag: Some(seq),
                });
                let values = match read_reduce_head(&letter.data) {
                    Some((o, name, start)) if o == op.code() && name == T::NAME => {
                        &letter.data[start..]
                    }
                    Some((o, name, _)) => crate::api::die_at(
                        format!(
                            "jia_reduce: node {n} reduces {} of {name} values, the root {} of {} \
                             values (every node must reduce the same type with the same operation)",
                            ReduceOp::name_of(o),
                            ReduceOp::name_of(op.code()),
                            T::NAME
                        ),
                        std::panic::Location::caller(),
                    ),
                    None => fatal(&format!(
                        "jia_reduce: node {n}'s contribution of {} bytes has no head",
                        letter.data.len()
                    )),
                };
                if values.len() != send.len() * T::BYTES {
                    crate::api::die_at(
                        format!(
                            "jia_reduce: node {n} reduced {} values, the root {} (every node \
                             must pass the same count)",
                            values.len() / T::BYTES,
                            send.len()
                        ),
                        std::panic::Location::caller(),
                    );
                }
                values
            };
            let values = contribution.chunks_exact(T::BYTES).map(T::get);
            acc = Some(match acc {
                None => values.collect(),
                Some(a) => a
                    .into_iter()
                    .zip(values)
                    .map(|(x, y)| x.combine(y, op))
                    .collect(),
            });
        }
        recv[..send.len()].copy_from_slice(&acc.unwrap_or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_combine() {
        let mut b = Vec::new();
        (-7i32).put(&mut b);
        2.5f64.put(&mut b);
        assert_eq!(i32::get(&b[..4]), -7);
        assert_eq!(f64::get(&b[4..]), 2.5);
        assert_eq!(i32::MAX.combine(1, ReduceOp::Sum), i32::MIN);
        assert_eq!(3i32.combine(-4, ReduceOp::Max), 3);
        assert_eq!(3i32.combine(-4, ReduceOp::Min), -4);
        assert_eq!(1.5f32.combine(2.0, ReduceOp::Sum), 3.5);
        assert_eq!(1.5f64.combine(2.0, ReduceOp::Max), 2.0);
    }
}
