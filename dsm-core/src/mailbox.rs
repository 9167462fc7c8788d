//! Message passing beside shared memory: JIAJIA's `jia_send`/`jia_recv`, and the channels its
//! collectives (`jia_bcast`, `jia_reduce`) travel on.
//!
//! A letter goes from one node to another as one [`Msg::Send`](crate::msg::Msg::Send) and waits
//! in the receiver's [`Mailbox`] until a thread asks for it. A receive names the sender and the
//! tag it wants, either of which may be a wildcard; it takes the oldest letter that matches, so
//! letters from one sender with one tag are received in the order they were sent (the transports
//! keep each pair of nodes FIFO). Collectives use channels of their own, so a program's tags never
//! meet them.
//!
//! Letters move data, not coherence: sending is not a release and receiving is not an acquire.
//! Shared memory written before a send is seen by the receiver only after a synchronisation that
//! orders it (a barrier, or a lock or condition variable), as in JIAJIA.

use std::collections::{BTreeMap, VecDeque};

use crate::types::{NodeId, WaiterId};

/// The most bytes one letter carries.
pub const MAX_LETTER_BYTES: usize = 64 << 20;

/// The broadcasts a node remembers it was the root of: a second root's letter of one is named
/// (`JobError::BcastRoots`); one of an older round is a letter no receive takes.
pub const BCAST_ROOTS_KEPT: usize = 1024;

/// Rounds further than this from a broadcast letter arriving are forgotten: after 2^32
/// broadcasts a round's number comes back, and the node that was its root long before must not
/// take the new root's letter for a second root's.
pub const BCAST_ROUNDS_APART: u32 = 1 << 24;

/// Which traffic a letter belongs to: the program's own, or one of the collectives built on
/// letters. Receives only ever match letters of their own channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Channel {
    /// `jia_send`/`jia_recv`: tags are the program's.
    Send = 0,
    /// `jia_bcast`: the tag is the broadcast's sequence number.
    Bcast = 1,
    /// `jia_reduce`: the tag is the reduction's sequence number.
    Reduce = 2,
    /// The race checker's records, to node 0 at exit: the tag is the part's number.
    Races = 3,
}

impl Channel {
    /// The channel with wire code `code`.
    pub fn from_code(code: u8) -> Option<Channel> {
        match code {
            0 => Some(Channel::Send),
            1 => Some(Channel::Bcast),
            2 => Some(Channel::Reduce),
            3 => Some(Channel::Races),
            _ => None,
        }
    }
}

/// A received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Letter {
    /// The sender.
    pub from: NodeId,
    /// The sender's tag.
    pub tag: i32,
    /// The bytes sent.
    pub data: Vec<u8>,
}

/// What a receive accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The channel.
    pub channel: Channel,
    /// Only letters from this node (`None`: any sender, JIAJIA's `MSG_PROC_ALL`).
    pub from: Option<NodeId>,
    /// Only letters with this tag (`None`: any tag, JIAJIA's `MSG_TAG_ALL`).
    pub tag: Option<i32>,
}

impl Filter {
    fn accepts(&self, channel: Channel, letter: &Letter) -> bool {
        self.channel == channel
            && self.from.is_none_or(|f| f == letter.from)
            && self.tag.is_none_or(|t| t == letter.tag)
    }
}

/// Letters received and not yet taken, and the threads waiting for one.
#[derive(Debug, Default)]
pub struct Mailbox {
    /// Unclaimed letters, oldest first.
    inbox: VecDeque<(Channel, Letter)>,
    /// Bytes held in `inbox`.
    held_bytes: usize,
    /// Threads blocked in a receive, in the order they asked.
    waiting: Vec<(WaiterId, Filter)>,
    /// Letters handed to a waiter that has not taken them yet (it is being resumed).
    delivered: BTreeMap<WaiterId, Letter>,
    /// The last [`BCAST_ROOTS_KEPT`] broadcasts this node sent as their root, oldest first (a
    /// bit per round for the job's life grew without end: 512 MiB at 2^32 broadcasts).
    bcast_roots: VecDeque<i32>,
}

impl Mailbox {
    /// A thread asks for a letter: the oldest matching one if there is one; otherwise the thread
    /// waits, and [`Mailbox::arrive`] hands it the next match.
    pub fn receive(&mut self, waiter: WaiterId, filter: Filter) -> Option<Letter> {
        if let Some(i) = self.inbox.iter().position(|(c, l)| filter.accepts(*c, l)) {
            let (_, letter) = self.inbox.remove(i)?;
            self.held_bytes -= letter.data.len();
            return Some(letter);
        }
        self.waiting.push((waiter, filter));
        None
    }

    /// A letter came in: returns the waiter it completes, if one was waiting for it (the letter is
    /// then kept for [`Mailbox::take_delivered`]); otherwise it joins the inbox.
    pub fn arrive(&mut self, channel: Channel, letter: Letter) -> Option<WaiterId> {
        if let Some(i) = self
            .waiting
            .iter()
            .position(|(_, f)| f.accepts(channel, &letter))
        {
            let (waiter, _) = self.waiting.remove(i);
            self.delivered.insert(waiter, letter);
            return Some(waiter);
        }
        self.held_bytes += letter.data.len();
        self.inbox.push_back((channel, letter));
        None
    }

    /// The letter handed to `waiter` while it waited.
    pub fn take_delivered(&mut self, waiter: WaiterId) -> Option<Letter> {
        self.delivered.remove(&waiter)
    }

    /// Letters waiting to be received.
    pub fn held(&self) -> usize {
        self.inbox.len()
    }

    /// Bytes of the letters waiting to be received.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// This node sends broadcast `round` as its root: another node that sent it as its root
    /// too, if a letter of it is here.
    pub fn note_bcast_root(&mut self, round: i32) -> Option<NodeId> {
        if self.bcast_roots.len() == BCAST_ROOTS_KEPT {
            self.bcast_roots.pop_front();
        }
        self.bcast_roots.push_back(round);
        self.inbox
            .iter()
            .find(|(c, l)| *c == Channel::Bcast && l.tag == round)
            .map(|(_, l)| l.from)
    }

    /// Whether this node sent broadcast `round` as its root, among its last
    /// [`BCAST_ROOTS_KEPT`] and within [`BCAST_ROUNDS_APART`] of it (a letter of it from another
    /// node is then a second root's). Called as each broadcast letter arrives, which every
    /// broadcast this node is not the root of brings: the rounds too far behind go.
    pub fn was_bcast_root(&mut self, round: i32) -> bool {
        let apart = |r: i32| (round.wrapping_sub(r) as u32).min(r.wrapping_sub(round) as u32);
        self.bcast_roots.retain(|&r| apart(r) < BCAST_ROUNDS_APART);
        self.bcast_roots.contains(&round)
    }

    /// The receives blocked now, for diagnostics.
    pub fn waiting(&self) -> impl Iterator<Item = &(WaiterId, Filter)> {
        self.waiting.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(from: u16, tag: i32, byte: u8) -> Letter {
        Letter {
            from: NodeId(from),
            tag,
            data: vec![byte; 3],
        }
    }

    fn any(channel: Channel) -> Filter {
        Filter {
            channel,
            from: None,
            tag: None,
        }
    }

    #[test]
    fn a_broadcast_sent_as_root_is_told_from_one_received() {
        let mut m = Mailbox::default();
        assert_eq!(m.arrive(Channel::Bcast, letter(2, 70, 1)), None);
        assert!(!m.was_bcast_root(70) && !m.was_bcast_root(3));
        assert_eq!(m.note_bcast_root(3), None);
        assert_eq!(m.note_bcast_root(70), Some(NodeId(2)));
        assert!(m.was_bcast_root(3) && m.was_bcast_root(70) && !m.was_bcast_root(71));
    }

    #[test]
    fn a_receive_takes_the_oldest_match_and_leaves_the_rest() {
        let mut m = Mailbox::default();
        assert_eq!(m.arrive(Channel::Send, letter(1, 5, 1)), None);
        assert_eq!(m.arrive(Channel::Send, letter(2, 6, 2)), None);
        assert_eq!(m.arrive(Channel::Send, letter(1, 6, 3)), None);
        assert_eq!(m.held_bytes(), 9);
        let by_tag = Filter {
            tag: Some(6),
            ..any(Channel::Send)
        };
        assert_eq!(m.receive(WaiterId(0), by_tag), Some(letter(2, 6, 2)));
        let by_sender = Filter {
            from: Some(NodeId(1)),
            ..by_tag
        };
        assert_eq!(m.receive(WaiterId(0), by_sender), Some(letter(1, 6, 3)));
        assert_eq!(
            m.receive(WaiterId(0), any(Channel::Send)),
            Some(letter(1, 5, 1))
        );
        assert_eq!((m.held(), m.held_bytes()), (0, 0));
    }

    #[test]
    fn a_waiting_receive_gets_the_first_letter_it_accepts() {
        let mut m = Mailbox::default();
        let from2 = Filter {
            from: Some(NodeId(2)),
            ..any(Channel::Send)
        };
        assert_eq!(m.receive(WaiterId(7), from2), None);
        assert_eq!(m.arrive(Channel::Send, letter(1, 0, 1)), None);
        assert_eq!(m.arrive(Channel::Bcast, letter(2, 0, 2)), None);
        assert_eq!(m.arrive(Channel::Send, letter(2, 0, 3)), Some(WaiterId(7)));
        assert_eq!(m.take_delivered(WaiterId(7)), Some(letter(2, 0, 3)));
        assert_eq!(m.take_delivered(WaiterId(7)), None);
        assert_eq!(m.held(), 2);
    }

    #[test]
    fn channels_never_mix() {
        let mut m = Mailbox::default();
        m.arrive(Channel::Reduce, letter(1, 3, 1));
        assert_eq!(m.receive(WaiterId(0), any(Channel::Send)), None);
        assert_eq!(m.receive(WaiterId(1), any(Channel::Bcast)), None);
        assert_eq!(m.arrive(Channel::Bcast, letter(1, 3, 2)), Some(WaiterId(1)));
        assert_eq!(m.waiting().count(), 1);
    }

    /// A node that is the root of broadcast after broadcast keeps the last
    /// [`BCAST_ROOTS_KEPT`] of them, whatever the round numbers (they wrap after 2^32): memory
    /// stays bounded, and a round number that comes back much later is not a second root's.
    /// A node that was root of round 5 once, then of none while 2^32 broadcasts went by with
    /// other roots (their letters arriving here): round 5's letter from another root is not a
    /// second root's.
    #[test]
    fn a_round_number_that_comes_back_after_the_wrap_is_not_a_second_root() {
        let mut m = Mailbox::default();
        m.note_bcast_root(5);
        let mut round = 6i32;
        for _ in 0..4 {
            assert!(!m.was_bcast_root(round));
            round = round.wrapping_add(BCAST_ROUNDS_APART as i32);
        }
        assert!(!m.was_bcast_root(5));
    }

    #[test]
    fn the_broadcasts_a_root_remembers_are_bounded() {
        let mut m = Mailbox::default();
        m.note_bcast_root(i32::MAX);
        m.note_bcast_root(i32::MIN);
        assert!(m.was_bcast_root(i32::MAX) && m.was_bcast_root(i32::MIN));
        for round in 0..(3 * BCAST_ROOTS_KEPT as i32) {
            m.note_bcast_root(round);
        }
        assert_eq!(m.bcast_roots.len(), BCAST_ROOTS_KEPT);
        assert!(!m.was_bcast_root(5));
        assert!(m.was_bcast_root(3 * BCAST_ROOTS_KEPT as i32 - 1));
        // A letter of a round far from them (the wrap's other side) forgets them all.
        assert!(!m.was_bcast_root(i32::MAX));
        assert!(m.bcast_roots.is_empty());
    }
}
