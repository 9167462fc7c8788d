//! # dsm-transport: moving whole messages between the nodes of a job
//!
//! The contract every transport keeps ([`Transport`]): whole messages (any size up to the limit),
//! delivered reliably and in order per peer, between the nodes of one job; a peer that stops
//! answering is reported ([`reliable::Event::PeerLost`]), never waited for forever.
//!
//! Transports own no thread: the runtime's service thread drives them. It waits on
//! [`Transport::fd`] together with its fault requests (spinning briefly first), so a page request
//! and its reply cross no extra thread hand-off.
//!
//! - [`reliable`]: the sans-IO sequencing, acknowledgement, retransmission and fragmentation
//!   machine, shared by UDP and (later) RDMA UD.
//! - [`udp`]: one UDP socket per node driving [`reliable`].
//! - [`tcp`]: one connection per pair of nodes, epoll, length-prefixed frames.
//! - [`loopback`]: nodes in one process, for tests.
//! - [`impair`]: drops, duplicates and reorders datagrams by seed, for loss tests.

#![deny(unsafe_code)]

pub mod impair;
pub mod loopback;
pub mod probe;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod reliable;
pub mod sys;
pub mod tcp;
pub mod udp;

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

pub use reliable::Event;

/// The bytes of a message's body, given apart from its head ([`Transport::send_parts`]): read
/// when the transport sends them, and again should it send them again.
#[derive(Clone)]
pub enum Body {
    /// A buffer shared with the sender (a grant's pages, copied).
    Shared(Arc<[u8]>),
    /// Memory lent by the sender (a home's own pages): readable for as long as the transport
    /// holds it, its bytes possibly changing meanwhile (the lender keeps what they are worth).
    Lent(Arc<dyn LentBytes>),
}

/// Memory lent to a transport ([`Body::Lent`]).
pub trait LentBytes: Send + Sync {
    /// The bytes as they are now.
    fn bytes(&self) -> &[u8];
}

impl Body {
    /// The bytes (of lent memory: as they are now).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Body::Shared(b) => b,
            Body::Lent(l) => l.bytes(),
        }
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Body::Shared(_) => "shared",
            Body::Lent(_) => "lent",
        };
        write!(f, "Body({kind}, {} bytes)", self.bytes().len())
    }
}

/// One range of a one-sided read: `len` bytes at region `offset`, reported with `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRange {
    /// Offset in the shared region.
    pub offset: u64,
    /// Bytes to read.
    pub len: usize,
    /// Handed back in [`Event::Read`].
    pub token: u64,
}

/// What every transport offers the runtime.
pub trait Transport: Send {
    /// A short name (`udp`, `tcp`...).
    fn name(&self) -> &'static str;
    /// A descriptor that becomes readable when [`Transport::poll_recv`] has work.
    fn fd(&self) -> RawFd;
    /// Queues a whole message for node `to`; [`Transport::flush`] (or the next
    /// [`Transport::poll_recv`]) sends it. Call `flush` after a batch of sends.
    fn send(&mut self, now: Instant, to: u16, msg: &[u8]);
    /// [`Transport::send`] of a message the caller gives away: transports that queue messages
    /// keep it as it is, without a copy.
    fn send_owned(&mut self, now: Instant, to: u16, msg: Vec<u8>) {
        self.send(now, to, &msg);
    }
    /// [`Transport::send_owned`] of the message `head` followed by `body` (a grant's page run,
    /// shared with the sender's records, or its memory lent): TCP writes the two with one
    /// `writev`, UDP and RDMA UD keep them apart for retransmission and gather them into each
    /// datagram, never joining them; the others (RDMA RC, loopback) join them here, with one
    /// copy.
    fn send_parts(&mut self, now: Instant, to: u16, mut head: Vec<u8>, body: Body) {
        head.extend_from_slice(body.bytes());
        self.send_owned(now, to, head);
    }

    /// Takes in whatever arrived; returns how many units (datagrams, ready sockets) were handled.
    /// Acknowledgements of what it took in (UDP, RDMA UD) go out at the next
    /// [`Transport::flush`], on the replies if there are any, and otherwise once everything
    /// waiting is read (see [`Transport::unread`]): call `flush` after handling the events,
    /// whether or not anything was sent.
    fn poll_recv(&mut self, now: Instant) -> usize;
    /// Whether [`Transport::poll_recv`] has something to take in, found out cheaply, for a
    /// caller that spins between its passes (UDP reads the next datagram ahead, TCP asks its
    /// epoll; the next `poll_recv` takes what they found first). A transport that cannot tell
    /// more cheaply than `poll_recv` says `true`.
    fn poll_ready(&mut self) -> bool {
        true
    }
    /// The next delivered message or lost peer.
    fn poll_event(&mut self) -> Option<Event>;
    /// Whether the last [`Transport::poll_recv`] stopped at a message with more possibly
    /// waiting (UDP stops there, so a message is handled and answered before the next read):
    /// the caller reads again before it counts everything as read.
    fn unread(&self) -> bool {
        false
    }
    /// When [`Transport::handle_timeout`] should next run.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Retransmissions, heartbeats, loss detection.
    fn handle_timeout(&mut self, now: Instant);
    /// Data queued or unacknowledged towards `to`.
    fn pending(&self, to: u16) -> usize;
    /// Data on its way to `to`: [`Transport::pending`], and where the transport knows of them,
    /// bytes the kernel holds that the peer has not acknowledged (TCP).
    fn in_flight(&self, to: u16) -> usize {
        self.pending(to)
    }
    /// Named counters for the statistics table.
    fn counters(&self) -> Vec<(&'static str, u64)>;
    /// Messages or datagrams sent again (0 for transports that never retransmit themselves).
    fn retransmissions(&self) -> u64 {
        0
    }
    /// Traffic refused as foreign or forged.
    fn rejected(&self) -> u64 {
        0
    }
    /// Hands what [`Transport::send`] queued to the network, batched: UDP and RDMA UD pack small
    /// messages into shared datagrams, TCP writes each connection's frames with one writev,
    /// RDMA RC posts one chained work-request list per peer.
    fn flush(&mut self, _now: Instant) {}
    /// The node leaves: its last acknowledgements go to every peer it heard from, more than
    /// once where datagrams may be lost (UDP, RDMA UD), so that one lost acknowledgement does
    /// not leave a peer resending to a node that is gone until its exit linger ends. Sent at
    /// once; nothing is read after it.
    fn farewell(&mut self, _now: Instant) {}

    // ----- one-sided reads: a capability, offered by RDMA RC -----

    /// Makes region bytes `offset..offset + len`, mapped here at `addr`, readable by peers
    /// without a message. `Ok(false)`: this transport has no one-sided reads.
    ///
    /// # Safety
    /// `addr..addr + len` must be memory of this process, valid and mapped (readable and
    /// writable) for `len` bytes, and stay so, not unmapped or remapped, for as long as the
    /// transport lives (the registration is held until it drops). The device reads it on
    /// behalf of peers at any time, without synchronising with this process's threads: peers
    /// see the bytes as they are at that moment, and must be allowed to.
    #[allow(unsafe_code)]
    unsafe fn export(
        &mut self,
        _offset: u64,
        _addr: *mut u8,
        _len: usize,
    ) -> std::io::Result<bool> {
        Ok(false)
    }
    /// Whether a [`Transport::read`] of `len` bytes at region `offset` from `from` would be
    /// taken now (the peer exported them and a buffer is free).
    fn can_read(&self, _from: u16, _offset: u64, _len: usize) -> bool {
        false
    }
    /// Reads `ranges` of node `from`'s memory without involving its CPU, all or none; each
    /// completes with an [`Event::Read`] carrying its token. `false`: none taken (the peer has
    /// not exported them, or too few buffers are free): ask with a message instead.
    fn read(&mut self, _now: Instant, _from: u16, _ranges: &[ReadRange]) -> bool {
        false
    }
    /// The longest single one-sided read.
    fn max_read(&self) -> usize {
        0
    }
}
