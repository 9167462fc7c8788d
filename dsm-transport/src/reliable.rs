//! Reliable, ordered delivery of whole messages over a datagram service: the sans-IO state machine
//! shared by UDP and RDMA UD.
//!
//! Per peer: sequence numbers on fragments, cumulative acknowledgements piggybacked on data (or
//! sent alone), a window of fragments in flight, retransmission on an adaptive timeout (RFC 6298:
//! smoothed RTT and variance, Karn's rule, exponential back-off) and fast retransmission after three
//! duplicate acks, an out-of-order buffer so one loss does not discard what followed, duplicate
//! suppression, fragmentation of messages larger than a datagram and reassembly in order, and
//! heartbeats so a peer that stops answering is noticed even when nothing is in flight.
//!
//! Sending is in two steps: [`Reliable::send`] queues, [`Reliable::flush`] moves what the window
//! allows into datagrams. Whole messages queued together are packed into one datagram (a GETP's
//! grants: 15 pages per 64 KB datagram instead of one datagram each), and the acknowledgements of
//! a batch of received datagrams go out as one at the flush that ends the batch: both cut
//! system calls, the cost that dominates a datagram on loopback or in a VM.
//!
//! Like quinn-proto it owns no socket and reads no clock: feed it datagrams and the time, drain the
//! datagrams it wants sent and the events (messages delivered, peers lost).
//!
//! Datagram header (little-endian, [`HEADER_BYTES`] bytes):
//! `magic u16 = 0x5544, version u8, flags u8, cookie u64, from u16, seq u32, ack u32`, then the
//! fragment. `ack` is the next sequence number the sender expects from the receiver. A packed
//! datagram (`FLAG_PACKED`) carries whole messages as records: `len u32` then the bytes.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::Body;

/// First two bytes of every datagram.
pub const MAGIC: u16 = 0x5544;
/// Datagram format version.
pub const VERSION: u8 = 2;
/// Bytes of datagram header.
pub const HEADER_BYTES: usize = 22;

const FLAG_DATA: u8 = 1;
const FLAG_MORE: u8 = 2;
/// On an ack: the receiver holds fragments beyond a gap (a duplicate ack that means loss). A
/// pure acknowledgement with this flag carries up to [`MAX_SACK_BYTES`] of selective
/// acknowledgement, a multiple of 8: bit `i` set when fragment `ack + 1 + i` is held.
const FLAG_GAP: u8 = 4;
/// Most bytes of a selective acknowledgement: 1,024 fragments past the cumulative one (a
/// window of datagrams of a path's MTU is thousands).
const MAX_SACK_BYTES: usize = 128;
/// The smallest datagram a path may ask for ([`Reliable::set_path`]): IPv4's minimum MTU, 576,
/// less its headers, rounded down.
pub const MIN_DATAGRAM_BYTES: usize = 512;
/// The payload is several whole messages, each as `len u32` + bytes.
const FLAG_PACKED: u8 = 8;
/// Bytes of a packed record's length.
const RECORD_HEADER: usize = 4;
/// A probe of the path's size (no data, no sequence number: padding up to the size probed), or,
/// with a 4-byte payload (the probe's length), its answer (see [`Reliable::probe_path`]).
const FLAG_PROBE: u8 = 16;
/// On a pure acknowledgement: the sender is leaving the job ([`Reliable::farewell`]); nothing
/// sent to it from now on is waited for.
const FLAG_FAREWELL: u8 = 32;
/// In the send queue only: a whole message in one fragment (so it may be packed).
const QUEUED_WHOLE: u8 = 0x80;
/// Probes of each size sent before a path is taken to carry no larger datagrams than the
/// largest one answered.
pub const PROBE_TRIES: u32 = 6;
/// Datagram sizes probed below a path's own (its MTU's): a 1,500-byte Ethernet's, and what
/// IPv6's minimum MTU carries.
pub const PROBE_STEPS: [usize; 2] = [1_472, 1_232];

/// How many times a leaving node sends its last acknowledgement to each peer
/// ([`Reliable::farewell`]): at 10% loss, one in a thousand peers then waits out its linger.
pub const FAREWELL_ACKS: usize = 3;

/// Settings of the reliability layer.
#[derive(Clone, Debug)]
pub struct ReliableConfig {
    /// Largest datagram, header included.
    pub max_datagram_bytes: usize,
    /// Fragments in flight per peer before new ones wait.
    pub window: usize,
    /// Bytes in flight per peer before new fragments wait (at least one always goes): keeps a
    /// window of large datagrams within the receiver's socket buffer.
    pub window_bytes: usize,
    /// Retransmission timeout before the first RTT sample.
    pub initial_rto: Duration,
    /// Lower bound of the retransmission timeout.
    pub min_rto: Duration,
    /// Upper bound of the retransmission timeout (after back-off).
    pub max_rto: Duration,
    /// Send a keep-alive to a peer we have sent nothing to for this long.
    pub heartbeat: Duration,
    /// A peer we hear nothing from for this long is lost.
    pub peer_timeout: Duration,
}

impl Default for ReliableConfig {
    fn default() -> Self {
        ReliableConfig {
            max_datagram_bytes: 65_000,
            window: 64,
            window_bytes: 2 << 20,
            initial_rto: Duration::from_millis(20),
            min_rto: Duration::from_millis(2),
            max_rto: Duration::from_millis(1000),
            heartbeat: Duration::from_millis(500),
            peer_timeout: Duration::from_secs(10),
        }
    }
}

/// What the layer reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A whole message from `from`, in order.
    Message {
        /// Sender.
        from: u16,
        /// The message bytes.
        bytes: Vec<u8>,
    },
    /// `peer` has not been heard from for `silent_for`.
    PeerLost {
        /// The lost peer.
        peer: u16,
        /// How long it had been silent.
        silent_for: Duration,
        /// What gave it away.
        cause: LostCause,
    },
    /// A one-sided read ([`crate::Transport::read`]) of `from`'s memory completed.
    Read {
        /// Whose memory was read.
        from: u16,
        /// The token given to the read.
        token: u64,
        /// The bytes read.
        bytes: Vec<u8>,
    },
}

/// What showed that a peer was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostCause {
    /// No answer for the peer timeout.
    Silent,
    /// Its connection was closed in order (the process ended, or closed it on leaving).
    ConnectionClosed,
    /// Its connection failed (reset, a read or write error).
    ConnectionFailed,
    /// It sent a frame that cannot be one (TCP: a length over the limit).
    BadFrame,
    /// An RDMA work request or receive on its queue pair failed.
    RdmaBroken,
}

impl std::fmt::Display for LostCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostCause::Silent => "silent",
            LostCause::ConnectionClosed => "connection closed",
            LostCause::ConnectionFailed => "connection failed",
            LostCause::BadFrame => "bad frame",
            LostCause::RdmaBroken => "RDMA connection broken",
        })
    }
}

/// Why a datagram was dropped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    /// Shorter than a header.
    #[error("datagram of {0} bytes is shorter than the header")]
    Short(usize),
    /// Wrong magic or version.
    #[error("not one of our datagrams (magic {magic:#06x}, version {version})")]
    Foreign {
        /// Magic found.
        magic: u16,
        /// Version found.
        version: u8,
    },
    /// Another job's cookie.
    #[error("wrong job cookie")]
    Cookie,
    /// The header's sender is not the peer the datagram came from, or not in the job.
    #[error("sender {claimed} does not match the source (node {actual})")]
    Sender {
        /// The node id in the header.
        claimed: u16,
        /// The node the address belongs to.
        actual: u16,
    },
    /// Data too far ahead of what we expect (outside any window).
    #[error("sequence number {seq} far outside the window (expected {expected})")]
    OutOfWindow {
        /// The sequence number.
        seq: u32,
        /// The one expected.
        expected: u32,
    },
    /// An acknowledgement of sequence numbers never sent (forged: it would drop messages still
    /// in flight as if delivered).
    #[error("acknowledgement up to {ack}, beyond the {sent} sequence numbers sent")]
    ForgedAck {
        /// The acknowledgement.
        ack: u32,
        /// The next sequence number to send.
        sent: u32,
    },
    /// A reassembled message beyond the size limit.
    #[error("message larger than {0} bytes")]
    TooLarge(usize),
    /// A packed datagram whose records do not add up to its payload.
    #[error("packed datagram with a malformed record at byte {0}")]
    Packing(usize),
}

/// Counters of the reliability layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReliableStats {
    /// Datagrams handed out to send.
    pub datagrams_sent: u64,
    /// Datagrams accepted.
    pub datagrams_received: u64,
    /// Fragments sent again (timeout or fast retransmit).
    pub retransmissions: u64,
    /// Fast retransmissions (three duplicate acks).
    pub fast_retransmissions: u64,
    /// Retransmissions of holes a selective acknowledgement showed.
    pub sack_retransmissions: u64,
    /// Duplicate fragments received and dropped.
    pub duplicates: u64,
    /// Fragments received ahead of a gap and held.
    pub out_of_order: u64,
    /// Datagrams dropped as malformed or foreign.
    pub rejected: u64,
    /// Of those, datagrams that acknowledged sequence numbers never sent.
    pub forged_acks: u64,
    /// Pure acknowledgements sent.
    pub acks_sent: u64,
    /// Datagrams that carried more than one message.
    pub packed: u64,
}

/// Largest message reassembled (bounds memory a peer can make us hold).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// A fragment's bytes as queued and kept for retransmission: one buffer, or a message's head and
/// (a stretch of) the shared body it was given with (a grant's page run: sent gathered, never
/// joined, and cut into fragments without a copy).
#[derive(Debug)]
struct Payload {
    head: Vec<u8>,
    body: Option<(Body, Range<usize>)>,
}

impl Payload {
    fn whole(bytes: Vec<u8>) -> Payload {
        Payload {
            head: bytes,
            body: None,
        }
    }

    fn len(&self) -> usize {
        self.head.len() + self.body.as_ref().map_or(0, |(_, r)| r.len())
    }

    /// The bytes, in order, as two slices (the second empty for one buffer).
    fn parts(&self) -> [&[u8]; 2] {
        let body = self.body.as_ref().map_or(&[][..], |(b, r)| {
            // A body's length never changes (lent memory changes its bytes only).
            debug_assert!(r.end <= b.bytes().len(), "{r:?} of {b:?}");
            b.bytes().get(r.clone()).unwrap_or_default()
        });
        [&self.head, body]
    }
}

#[derive(Debug)]
struct Unacked {
    seq: u32,
    flags: u8,
    payload: Payload,
    last_sent: Instant,
    retransmitted: bool,
    /// The receiver holds it (selective acknowledgement): never resent.
    sacked: bool,
}

#[derive(Debug)]
struct Peer {
    /// Largest datagram to this peer, header included ([`Reliable::set_path`]).
    datagram: usize,
    /// Fragments in flight to this peer before new ones wait (and the receiver's measure of how
    /// far ahead a sender may be): the configured window, scaled up where the path's datagrams
    /// are smaller than the configured ones, so the window holds as many bytes.
    window: usize,
    /// Full datagrams to this peer may leave several at a time ([`Reliable::transmit_segmented`]).
    segmented: bool,
    /// The path's sizes being probed ([`Reliable::probe_path`]).
    probe: Option<PathProbe>,
    next_seq: u32,
    unacked: VecDeque<Unacked>,
    /// Payload bytes of `unacked`.
    unacked_bytes: usize,
    queued: VecDeque<(u8, Payload)>,
    expected: u32,
    out_of_order: BTreeMap<u32, (u8, Vec<u8>)>,
    partial: Vec<u8>,
    ack_due: bool,
    /// Fragments came out of order: a pure acknowledgement telling which are held is due, even
    /// if data carries the cumulative one.
    sack_due: bool,
    /// Data datagrams (and their bytes) received since an acknowledgement last went to this
    /// peer: at half the sender's window, one goes at once (see [`Reliable::accept`]).
    received_since_ack: (usize, usize),
    last_heard: Instant,
    last_sent: Instant,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    last_ack: u32,
    dup_acks: u32,
    /// When a fragment to this peer was last sent again (timeout or selective acknowledgement):
    /// a fragment sent before then may have waited at the receiver behind the hole, so its
    /// acknowledgement gives no round-trip sample.
    last_resend: Option<Instant>,
    /// After a timeout: the first sequence number sent after it. An acknowledgement that leaves
    /// an older datagram unacknowledged shows that datagram lost too (acknowledgements are
    /// cumulative): it is resent at once.
    recover: Option<u32>,
    lost: bool,
    /// It said farewell: it left the job, and what is queued or in flight to it is dropped.
    left: bool,
}

/// A path's datagram sizes on trial: probes of each go until one is answered or the tries end.
#[derive(Debug)]
struct PathProbe {
    /// The sizes probed, largest first (the path's own first).
    sizes: Vec<usize>,
    /// The largest size answered so far.
    answered: Option<usize>,
    tries: u32,
    next_at: Instant,
}

/// True if `a` comes before `b` in serial-number arithmetic.
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The reliability layer of one node, for all its peers.
#[derive(Debug)]
pub struct Reliable {
    me: u16,
    cookie: u64,
    cfg: ReliableConfig,
    peers: Vec<Peer>,
    out: VecDeque<Out>,
    events: VecDeque<Event>,
    stats: ReliableStats,
}

impl Reliable {
    /// The layer for node `me` of `nodes`, in the job with `cookie`, starting at `now`.
    pub fn new(me: u16, nodes: u16, cookie: u64, cfg: ReliableConfig, now: Instant) -> Reliable {
        let peers = (0..nodes)
            .map(|_| Peer {
                datagram: cfg.max_datagram_bytes,
                window: cfg.window,
                segmented: false,
                probe: None,
                next_seq: 0,
                unacked: VecDeque::new(),
                unacked_bytes: 0,
                queued: VecDeque::new(),
                expected: 0,
                out_of_order: BTreeMap::new(),
                partial: Vec::new(),
                ack_due: false,
                sack_due: false,
                received_since_ack: (0, 0),
                last_heard: now,
                last_sent: now,
                srtt: None,
                rttvar: Duration::ZERO,
                rto: cfg.initial_rto,
                last_ack: 0,
                dup_acks: 0,
                recover: None,
                last_resend: None,
                lost: false,
                left: false,
            })
            .collect();
        Reliable {
            me,
            cookie,
            cfg,
            peers,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: ReliableStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &ReliableStats {
        &self.stats
    }

    /// Bytes of message per fragment to `to`.
    pub fn fragment_bytes(&self, to: u16) -> usize {
        self.peers[usize::from(to)].datagram - HEADER_BYTES
    }

    /// What the path to `to` carries: datagrams of at most `max_datagram` bytes (header
    /// included; the configured size where it is smaller, [`MIN_DATAGRAM_BYTES`] at least),
    /// several at a time if `segmented` ([`Reliable::transmit_segmented`]). Smaller datagrams
    /// than configured scale the window in datagrams up to hold as many bytes. For messages
    /// queued from now on (those queued keep their size). Ends a probe of the path on trial.
    pub fn set_path(&mut self, to: u16, max_datagram: usize, segmented: bool) {
        self.peers[usize::from(to)].probe = None;
        self.take_path(to, max_datagram, segmented);
    }

    /// [`Reliable::set_path`], leaving a probe on trial as it is.
    fn take_path(&mut self, to: u16, max_datagram: usize, segmented: bool) {
        let configured = self.cfg.max_datagram_bytes;
        let datagram = self.path_datagram(max_datagram);
        let peer = &mut self.peers[usize::from(to)];
        peer.datagram = datagram;
        peer.window = self.cfg.window * configured.div_ceil(datagram);
        peer.segmented = segmented;
    }

    /// `to`'s datagrams no longer leave several at a time (the kernel refused it).
    pub fn stop_segmenting(&mut self, to: u16) {
        self.peers[usize::from(to)].segmented = false;
    }

    /// The datagram size [`Reliable::set_path`] would give `to` for a path of `max_datagram`.
    pub fn path_datagram(&self, max_datagram: usize) -> usize {
        let configured = self.cfg.max_datagram_bytes;
        max_datagram.clamp(MIN_DATAGRAM_BYTES.min(configured), configured)
    }

    /// [`Reliable::set_path`] once the path has shown it carries such datagrams: until a probe
    /// of that size (or of [`PROBE_STEPS`] below it) is answered, datagrams of
    /// [`MIN_DATAGRAM_BYTES`]. A path that loses datagrams of the size its MTU says it carries
    /// (hosts of one link whose interfaces disagree on the MTU, a router that drops its
    /// "too big" messages) would otherwise lose every large datagram, resent until the peer is
    /// taken for lost. Probes go with the next flush and every retransmission timeout after,
    /// [`PROBE_TRIES`] times; the largest size answered is taken as soon as no larger one can
    /// be, and a path that answered none of them keeps the smallest datagrams (and says so).
    pub fn probe_path(&mut self, to: u16, max_datagram: usize, segmented: bool, now: Instant) {
        let path = self.path_datagram(max_datagram);
        let mut sizes = vec![path];
        sizes.extend(PROBE_STEPS.iter().copied().filter(|&s| s < path));
        sizes.retain(|&s| s > MIN_DATAGRAM_BYTES.min(self.cfg.max_datagram_bytes));
        self.set_path(to, MIN_DATAGRAM_BYTES, segmented);
        if !sizes.is_empty() {
            self.peers[usize::from(to)].probe = Some(PathProbe {
                sizes,
                answered: None,
                tries: 0,
                next_at: now,
            });
        }
    }

    /// The probes due to `to` now, queued.
    fn send_probes(&mut self, now: Instant, to: u16) {
        let (cookie, me) = (self.cookie, self.me);
        let peer = &mut self.peers[usize::from(to)];
        let Some(probe) = &mut peer.probe else { return };
        if now < probe.next_at {
            return;
        }
        if probe.tries == PROBE_TRIES {
            let largest = probe.sizes[0];
            let taken = probe.answered.unwrap_or(MIN_DATAGRAM_BYTES);
            log::warn!(
                "datagrams of {largest} bytes to node {to} are lost though its path's MTU \
                 carries them ({PROBE_TRIES} probes: do the hosts' interfaces on that link \
                 agree on the MTU? or is the loss that heavy?): datagrams of {taken} bytes from \
                 now on"
            );
            peer.probe = None;
            return;
        }
        probe.tries += 1;
        probe.next_at = now + peer.rto;
        let answered = probe.answered.unwrap_or(0);
        for &size in probe.sizes.iter().filter(|&&s| s > answered) {
            let mut dg = header(cookie, me, FLAG_PROBE, peer.next_seq, peer.expected).to_vec();
            dg.resize(size, 0);
            self.out.push_back(Out::Bytes { to, dg });
        }
    }

    /// A probe's answer from `from`: its size, if probed, is carried from now on; probing ends
    /// once no larger size is on trial.
    fn probe_answered(&mut self, from: u16, size: usize) {
        let peer = &mut self.peers[usize::from(from)];
        let Some(probe) = &mut peer.probe else { return };
        if !probe.sizes.contains(&size) || probe.answered.is_some_and(|a| a >= size) {
            return;
        }
        probe.answered = Some(size);
        let done = probe.sizes[0] == size;
        let segmented = peer.segmented;
        if done {
            peer.probe = None;
        }
        self.take_path(from, size, segmented);
    }

    /// Queues `msg` for `to`, cut into fragments; [`Reliable::flush`] sends what the window
    /// allows.
    pub fn send(&mut self, to: u16, msg: &[u8]) {
        if msg.len() <= self.fragment_bytes(to) {
            self.send_owned(to, msg.to_vec());
        } else {
            self.queue_fragments(to, Vec::new(), Some(Body::Shared(msg.into())));
        }
    }

    /// [`Reliable::send`] of a message the caller gives away: one that fits in a fragment is
    /// queued as it is, without a copy.
    pub fn send_owned(&mut self, to: u16, msg: Vec<u8>) {
        if msg.len() > self.fragment_bytes(to) {
            return self.queue_fragments(to, Vec::new(), Some(Body::Shared(msg.into())));
        }
        self.peers[usize::from(to)]
            .queued
            .push_back((FLAG_DATA | QUEUED_WHOLE, Payload::whole(msg)));
    }

    /// [`Reliable::send_owned`] of the message `head` followed by `body`: kept as the two
    /// parts, which each datagram gathers (a grant's page run is never copied into one buffer
    /// with its header), and cut into fragments where it is larger than one, each a stretch of
    /// the body.
    pub fn send_parts(&mut self, to: u16, head: Vec<u8>, body: Body) {
        if head.len() + body.bytes().len() > self.fragment_bytes(to) {
            return self.queue_fragments(to, head, Some(body));
        }
        let range = 0..body.bytes().len();
        let payload = Payload {
            head,
            body: Some((body, range)),
        };
        self.peers[usize::from(to)]
            .queued
            .push_back((FLAG_DATA | QUEUED_WHOLE, payload));
    }

    /// Queues the message `head` + `body`, larger than a fragment, as fragments: the first
    /// carries the head (copied if it is longer than a fragment) and the body's start, the
    /// others stretches of the body, none copied.
    fn queue_fragments(&mut self, to: u16, mut head: Vec<u8>, body: Option<Body>) {
        let frag = self.fragment_bytes(to);
        let peer = &mut self.peers[usize::from(to)];
        let body_len = body.as_ref().map_or(0, |b| b.bytes().len());
        if head.len() >= frag {
            // A head longer than a fragment (not one of ours): whole fragments of it first.
            let rest = head.split_off(head.len() / frag * frag);
            for chunk in head.chunks(frag) {
                let more = !rest.is_empty() || body_len > 0;
                let flags = if more {
                    FLAG_DATA | FLAG_MORE
                } else {
                    FLAG_DATA
                };
                peer.queued
                    .push_back((flags, Payload::whole(chunk.to_vec())));
            }
            head = rest;
            if head.is_empty() && body_len == 0 {
                return;
            }
        }
        let mut at = 0;
        loop {
            let take = (frag - head.len()).min(body_len - at);
            let more = at + take < body_len;
            let flags = if more {
                FLAG_DATA | FLAG_MORE
            } else {
                FLAG_DATA
            };
            let body = body.as_ref().map(|b| (b.clone(), at..at + take));
            let payload = Payload {
                head: std::mem::take(&mut head),
                body,
            };
            if payload.len() > 0 || !more {
                peer.queued.push_back((flags, payload));
            }
            at += take;
            if !more {
                break;
            }
        }
    }

    /// Moves queued fragments into datagrams as the windows allow, and acknowledges what was
    /// received since the last flush. Call after a batch of sends or received datagrams.
    pub fn flush(&mut self, now: Instant) {
        self.flush_with(now, true);
    }

    /// [`Reliable::flush`], but acknowledgements that no data carries stay due: for a receiver
    /// that has more datagrams to read, whose acknowledgement covers them all.
    pub fn flush_data(&mut self, now: Instant) {
        self.flush_with(now, false);
    }

    fn flush_with(&mut self, now: Instant, pure_acks: bool) {
        for p in 0..self.peers.len() {
            if p != usize::from(self.me) {
                self.flush_peer(now, p as u16, pure_acks);
            }
        }
    }

    /// Messages queued or in flight to `to` (for back-pressure, and a leaving node's wait for
    /// its last acknowledgements); none to a peer that left.
    pub fn pending(&self, to: u16) -> usize {
        let p = &self.peers[usize::from(to)];
        if p.left {
            return 0;
        }
        p.unacked.len() + p.queued.len()
    }

    /// A datagram from `from` (the node its source address belongs to).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: u16,
        dgram: &[u8],
    ) -> Result<(), DatagramError> {
        let (head, payload) = dgram.split_at(dgram.len().min(HEADER_BYTES));
        self.handle_datagram_parts(now, from, head, Cow::Borrowed(payload))
    }

    /// [`Reliable::handle_datagram`] of a datagram read as its header (`head`, shorter only if
    /// the datagram is) and its payload: one in a buffer of its own (`Cow::Owned`) becomes the
    /// delivered message without a copy when it is one whole message.
    pub fn handle_datagram_parts(
        &mut self,
        now: Instant,
        from: u16,
        head: &[u8],
        payload: Cow<'_, [u8]>,
    ) -> Result<(), DatagramError> {
        let r = self.accept(now, from, head, payload);
        if let Err(e) = &r {
            self.stats.rejected += 1;
            if matches!(e, DatagramError::ForgedAck { .. }) {
                self.stats.forged_acks += 1;
            }
        } else {
            self.stats.datagrams_received += 1;
        }
        r
    }

    /// A datagram as its header `d` (shorter only if the datagram is) and its payload.
    fn accept(
        &mut self,
        now: Instant,
        from: u16,
        d: &[u8],
        payload: Cow<'_, [u8]>,
    ) -> Result<(), DatagramError> {
        if d.len() < HEADER_BYTES {
            return Err(DatagramError::Short(d.len()));
        }
        let magic = u16::from_le_bytes([d[0], d[1]]);
        let version = d[2];
        if magic != MAGIC || version != VERSION {
            return Err(DatagramError::Foreign { magic, version });
        }
        let flags = d[3];
        let cookie = u64::from_le_bytes(d[4..12].try_into().unwrap_or_default());
        if cookie != self.cookie {
            return Err(DatagramError::Cookie);
        }
        let claimed = u16::from_le_bytes([d[12], d[13]]);
        if claimed != from || usize::from(from) >= self.peers.len() || from == self.me {
            return Err(DatagramError::Sender {
                claimed,
                actual: from,
            });
        }
        let seq = u32::from_le_bytes(d[14..18].try_into().unwrap_or_default());
        let ack = u32::from_le_bytes(d[18..22].try_into().unwrap_or_default());
        if flags & FLAG_PACKED != 0 {
            // Whole before anything is taken from it.
            records(&payload).try_for_each(|r| r.map(drop))?;
        }
        // How far ahead a sender may be: four windows of the smallest datagrams a path may ask
        // for, whatever this side's own path (a sender whose datagrams are smaller than this
        // side's has a larger window in datagrams).
        let farthest =
            4 * self.cfg.window * self.cfg.max_datagram_bytes.div_ceil(MIN_DATAGRAM_BYTES);
        let peer = &mut self.peers[usize::from(from)];
        let window = peer.window;
        if flags & FLAG_DATA != 0 {
            let ahead = seq.wrapping_sub(peer.expected);
            if ahead as usize > farthest && !seq_lt(seq, peer.expected) {
                return Err(DatagramError::OutOfWindow {
                    seq,
                    expected: peer.expected,
                });
            }
        }
        if seq_lt(peer.next_seq, ack) {
            // Nothing that could have come from the peer: refused whole, before its data.
            return Err(DatagramError::ForgedAck {
                ack,
                sent: peer.next_seq,
            });
        }
        peer.last_heard = now;
        // Acknowledgement.
        // A round-trip sample comes from a fragment acknowledged for the first time, never sent
        // twice (Karn's rule), and sent after the last resend to this peer: one sent before may
        // have waited at the receiver behind a hole until its repair, and such samples once made
        // the timeout a second at 20% loss.
        let mut newest_sample = None;
        let mut acked_any = false;
        let clean = |u: &Unacked, last_resend: Option<Instant>| {
            !u.retransmitted && last_resend.is_none_or(|r| u.last_sent > r)
        };
        while let Some(front) = peer.unacked.front() {
            if !seq_lt(front.seq, ack) {
                break;
            }
            if let Some(u) = peer.unacked.pop_front() {
                acked_any = true;
                peer.unacked_bytes -= u.payload.len();
                if !u.sacked && clean(&u, peer.last_resend) {
                    newest_sample = Some(now.saturating_duration_since(u.last_sent));
                }
            }
        }
        // Selective acknowledgement: what the receiver holds beyond the gap is never resent, and
        // every hole below the highest fragment held is resent at once (once per round trip):
        // a window's losses are recovered in one round trip, not one timeout each.
        let sack = (flags & (FLAG_DATA | FLAG_GAP) == FLAG_GAP
            && !payload.is_empty()
            && payload.len() <= MAX_SACK_BYTES
            && payload.len() % 8 == 0)
            .then_some(&payload[..]);
        if let Some(bits) = sack {
            let held = |off: u32| {
                let byte = (off / 8) as usize;
                byte < bits.len() && bits[byte] & (1 << (off % 8)) != 0
            };
            let mut highest = None;
            for u in peer.unacked.iter_mut() {
                let off = u.seq.wrapping_sub(ack).wrapping_sub(1);
                if held(off) {
                    if !u.sacked && clean(u, peer.last_resend) {
                        newest_sample = Some(now.saturating_duration_since(u.last_sent));
                    }
                    u.sacked = true;
                    highest = Some(u.seq);
                }
            }
            if let Some(sample) = newest_sample.take() {
                update_rtt(peer, sample, &self.cfg);
            }
            if let Some(highest) = highest {
                // A hole is taken for lost once a later fragment arrived and its own send is a
                // round trip and two deviations old (a fragment merely reordered has arrived by
                // then).
                let round_trip = peer
                    .srtt
                    .map_or(self.cfg.min_rto, |srtt| srtt + peer.rttvar * 2);
                let n = resend_holes(peer, from, now, highest, round_trip, &mut self.out);
                self.stats.retransmissions += n;
                self.stats.sack_retransmissions += n;
            }
        }
        if let Some(sample) = newest_sample {
            update_rtt(peer, sample, &self.cfg);
        }
        if flags & FLAG_FAREWELL != 0 && seq == peer.expected {
            // It left, with everything it sent here received (a leaver whose linger ran out
            // with data for this node unacknowledged is not taken to have left: that data is
            // lost, and its silence is noticed as before). What it had not acknowledged (a
            // read-ahead's grant it no longer waited for, sent or on its way as it left) would
            // be resent until this node's own exit linger ran out (10 s at the default peer
            // timeout).
            peer.left = true;
            peer.unacked.clear();
            peer.unacked_bytes = 0;
            peer.queued.clear();
            peer.recover = None;
            return Ok(());
        }
        if let (true, Some(recover)) = (acked_any, peer.recover) {
            match peer.unacked.front_mut() {
                // A partial acknowledgement after a timeout: the receiver has everything before
                // this datagram and not this one, sent before the timeout: lost, resend it now.
                Some(u) if seq_lt(u.seq, recover) => {
                    resend_oldest(peer, from, now, &mut self.out);
                    self.stats.retransmissions += 1;
                }
                _ => peer.recover = None,
            }
        }
        if acked_any {
            // The peer is getting our data again: the back-off of earlier timeouts ends (as
            // TCP's does when new data is acknowledged), or every hole behind a repaired one
            // waited out a doubled timeout.
            reset_rto(peer, &self.cfg);
            peer.dup_acks = 0;
            peer.last_ack = ack;
        } else if ack == peer.last_ack
            && sack.is_none()
            && !peer.unacked.is_empty()
            && flags & (FLAG_DATA | FLAG_GAP) == FLAG_GAP
        {
            peer.dup_acks += 1;
            if peer.dup_acks == 3 && resend_oldest(peer, from, now, &mut self.out) {
                self.stats.retransmissions += 1;
                self.stats.fast_retransmissions += 1;
            }
        }
        // A path's probe: answered with its length; a probe's answer: that length is carried.
        if flags & (FLAG_DATA | FLAG_PROBE) == FLAG_PROBE {
            if payload.len() == 4 {
                let size = u32::from_le_bytes(payload[..].try_into().unwrap_or_default());
                self.probe_answered(from, size as usize);
            } else {
                let size = (HEADER_BYTES + payload.len()) as u32;
                let peer = &self.peers[usize::from(from)];
                let answer = datagram(
                    self.cookie,
                    self.me,
                    FLAG_PROBE,
                    peer.next_seq,
                    peer.expected,
                    &size.to_le_bytes(),
                );
                self.out.push_back(Out::Bytes {
                    to: from,
                    dg: answer,
                });
            }
            return Ok(());
        }
        // Data.
        let mut ack_now = false;
        if flags & FLAG_DATA != 0 {
            peer.ack_due = true;
            // Half the sender's window (the job's settings, scaled alike on both sides of a
            // path: where not, the acknowledgement goes sooner) unacknowledged: the
            // acknowledgement goes now, not at the next flush. A node whose acknowledgements
            // wait for a reply or a timer (a fault handler driving the node leaves them to the
            // service thread's nap, up to 1 ms) would otherwise hold back a sender whose window
            // is full: a stream's runs, or every datagram with a window of one or two.
            let (count, bytes) = &mut peer.received_since_ack;
            *count += 1;
            *bytes += HEADER_BYTES + payload.len();
            ack_now = *count >= (window / 2).max(1) || *bytes >= self.cfg.window_bytes / 2;
            if seq == peer.expected {
                deliver(peer, from, flags, payload, &mut self.events)?;
                while let Some((f, p)) = peer.out_of_order.remove(&peer.expected) {
                    deliver(peer, from, f, Cow::Owned(p), &mut self.events)?;
                }
            } else if seq_lt(seq, peer.expected) || peer.out_of_order.contains_key(&seq) {
                self.stats.duplicates += 1;
            } else {
                self.stats.out_of_order += 1;
                peer.out_of_order.insert(seq, (flags, payload.into_owned()));
            }
            if !peer.out_of_order.is_empty() {
                peer.sack_due = true;
            }
        }
        if ack_now {
            self.push_pure_ack(now, from);
        }
        Ok(())
    }

    /// Moves queued fragments into the window, packing whole messages queued together, and
    /// emits a pure ack if one is due.
    fn flush_peer(&mut self, now: Instant, to: u16, pure_acks: bool) {
        if self.peers[usize::from(to)].left {
            // Gone: nothing for it leaves.
            self.peers[usize::from(to)].queued.clear();
            return;
        }
        self.send_probes(now, to);
        let frag = self.fragment_bytes(to);
        let peer = &mut self.peers[usize::from(to)];
        while peer.unacked.len() < peer.window
            && (peer.unacked.is_empty() || peer.unacked_bytes < self.cfg.window_bytes)
        {
            let Some((flags, payload)) = peer.queued.pop_front() else {
                break;
            };
            let (flags, payload) = if flags & QUEUED_WHOLE == 0 {
                (flags, payload)
            } else {
                match pack(&mut peer.queued, payload, frag) {
                    Ok(packed) => {
                        self.stats.packed += 1;
                        (FLAG_DATA | FLAG_PACKED, Payload::whole(packed))
                    }
                    Err(alone) => (FLAG_DATA, alone),
                }
            };
            let seq = peer.next_seq;
            peer.next_seq = peer.next_seq.wrapping_add(1);
            self.out.push_back(Out::Data { to, seq });
            peer.unacked_bytes += payload.len();
            peer.unacked.push_back(Unacked {
                seq,
                flags,
                payload,
                last_sent: now,
                retransmitted: false,
                sacked: false,
            });
            peer.ack_due = false;
            peer.received_since_ack = (0, 0);
            peer.last_sent = now;
        }
        if (peer.ack_due || peer.sack_due) && pure_acks {
            self.push_pure_ack(now, to);
        }
    }

    /// Queues [`FAREWELL_ACKS`] plain acknowledgements to every peer this node heard from or
    /// sent to, marked as a farewell: it leaves, and a peer whose last datagram's acknowledgement was
    /// lost, or that sends it more (a grant of a read-ahead this node no longer waits for),
    /// would otherwise resend them to a node that is gone until its own linger ran out; a peer
    /// that gets one drops what it has for this node. (Cumulative only: repeated selective
    /// acknowledgements would count as duplicates and trigger a fast retransmission.)
    pub fn farewell(&mut self, now: Instant) {
        for to in 0..self.peers.len() as u16 {
            let p = &self.peers[usize::from(to)];
            // Peers this node exchanged nothing with have nothing for it.
            if to == self.me || (p.expected == 0 && p.next_seq == 0) {
                continue;
            }
            let mut dg = self.pure_ack(now, to, false);
            dg[3] |= FLAG_FAREWELL;
            for _ in 1..FAREWELL_ACKS {
                self.out.push_back(Out::Bytes { to, dg: dg.clone() });
            }
            self.out.push_back(Out::Bytes { to, dg });
            self.stats.acks_sent += FAREWELL_ACKS as u64;
        }
    }

    /// Queues a pure acknowledgement to `to` (with the fragments held out of order, if any).
    fn push_pure_ack(&mut self, now: Instant, to: u16) {
        let dg = self.pure_ack(now, to, true);
        self.out.push_back(Out::Bytes { to, dg });
        self.stats.acks_sent += 1;
    }

    /// A pure acknowledgement to `to`, selective (naming the fragments held out of order) if
    /// `selective` and any are; the acknowledgements owed to `to` are paid by it.
    fn pure_ack(&mut self, now: Instant, to: u16, selective: bool) -> Vec<u8> {
        let peer = &mut self.peers[usize::from(to)];
        peer.ack_due = false;
        peer.sack_due = false;
        peer.received_since_ack = (0, 0);
        peer.last_sent = now;
        let (flags, sack) = if !selective || peer.out_of_order.is_empty() {
            (0, Vec::new())
        } else {
            let mut bits = [0u8; MAX_SACK_BYTES];
            let mut used = 8;
            // The fragments held that a selective acknowledgement can name (in sequence
            // order, which wraps around in the map's).
            let first = peer.expected.wrapping_add(1);
            let end = first.wrapping_add(8 * MAX_SACK_BYTES as u32);
            // Two stretches of the map: from `first`, then from 0 where the window wraps
            // (an empty one otherwise: `0..0`).
            use std::ops::Bound::{Excluded, Included, Unbounded};
            let (upper, wrapped_end) = match first < end {
                true => (Excluded(end), 0),
                false => (Unbounded, end),
            };
            let held = peer.out_of_order.range((Included(first), upper));
            for (&s, _) in held.chain(peer.out_of_order.range(0..wrapped_end)) {
                let off = s.wrapping_sub(first) as usize;
                bits[off / 8] |= 1 << (off % 8);
                used = used.max((off / 64 + 1) * 8);
            }
            (FLAG_GAP, bits[..used].to_vec())
        };
        datagram(
            self.cookie,
            self.me,
            flags,
            peer.next_seq,
            peer.expected,
            &sack,
        )
    }

    /// Hands every datagram due to `send(to, parts)`: a datagram is the slices one after the
    /// other. A data fragment's payload is lent from the retransmission queue (no copy: a sender
    /// gathers the slices, as `sendmsg` does); its header is built now, with the latest
    /// acknowledgement.
    pub fn transmit(&mut self, mut send: impl FnMut(u16, &[&[u8]])) {
        while let Some(o) = self.out.pop_front() {
            match o {
                Out::Bytes { to, dg } => {
                    self.stats.datagrams_sent += 1;
                    send(to, &[&dg]);
                }
                Out::Data { to, seq } => {
                    // None: acknowledged before it went out (a retransmission made moot).
                    if let Some((h, [head, body])) = self.data_datagram(to, seq) {
                        send(to, &[&h, head, body]);
                        self.stats.datagrams_sent += 1;
                    }
                }
            }
        }
    }

    /// [`Reliable::transmit`], but data datagrams due to one peer whose path is `segmented`
    /// ([`Reliable::set_path`]) go several at a time: `send(to, parts, Some(size))` is datagrams
    /// of `size` bytes back to back (the last possibly shorter; at most `max_segments` of them,
    /// `max_bytes` in all), for the kernel to cut apart (`UDP_SEGMENT`). `send(to, parts, None)`
    /// is one datagram, as in [`Reliable::transmit`].
    pub fn transmit_segmented(
        &mut self,
        max_segments: usize,
        max_bytes: usize,
        mut send: impl FnMut(u16, &[&[u8]], Option<u16>),
    ) {
        let Reliable {
            out,
            peers,
            stats,
            cookie,
            me,
            ..
        } = self;
        while let Some(o) = out.pop_front() {
            let (to, seq) = match o {
                Out::Bytes { to, dg } => {
                    stats.datagrams_sent += 1;
                    send(to, &[&dg], None);
                    continue;
                }
                Out::Data { to, seq } => (to, seq),
            };
            // The datagrams due next to the same peer, while all but the last are as long as
            // the first (the segment size).
            let peer = &peers[usize::from(to)];
            // None: acknowledged before it went out (a retransmission made moot).
            let Some(u) = unacked(peer, seq) else {
                continue;
            };
            let first = HEADER_BYTES + u.payload.len();
            let mut batch = vec![u];
            let (mut total, mut last) = (first, first);
            // (Datagrams cut for a larger size than the path's now go one by one.)
            while peer.segmented
                && first <= peer.datagram
                && last == first
                && batch.len() < max_segments
                && let Some(&Out::Data {
                    to: next_to,
                    seq: next,
                }) = out.front()
                && next_to == to
            {
                let Some(u) = unacked(peer, next) else {
                    out.pop_front();
                    continue;
                };
                let len = HEADER_BYTES + u.payload.len();
                if len > first || total + len > max_bytes {
                    break;
                }
                out.pop_front();
                batch.push(u);
                (total, last) = (total + len, len);
            }
            let heads: Vec<[u8; HEADER_BYTES]> = batch
                .iter()
                .map(|u| header(*cookie, *me, u.flags, u.seq, peer.expected))
                .collect();
            let mut parts: Vec<&[u8]> = Vec::with_capacity(3 * batch.len());
            for (h, u) in heads.iter().zip(&batch) {
                let [head, body] = u.payload.parts();
                parts.extend([&h[..], head, body]);
            }
            stats.datagrams_sent += batch.len() as u64;
            // (A datagram is at most `max_datagram_bytes`, 65,000.)
            let segment = (batch.len() > 1).then_some(first as u16);
            send(to, &parts, segment);
        }
    }

    /// The next datagram to send, and to whom, as one buffer of its own (a copy: for callers
    /// that keep datagrams, like the impairment layer and the tests; see
    /// [`Reliable::transmit`]).
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(u16, Vec<u8>)> {
        while let Some(o) = self.out.pop_front() {
            let d = match o {
                Out::Bytes { to, dg } => Some((to, dg)),
                Out::Data { to, seq } => self
                    .data_datagram(to, seq)
                    .map(|(h, [head, body])| (to, [&h[..], head, body].concat())),
            };
            if d.is_some() {
                self.stats.datagrams_sent += 1;
                return d;
            }
        }
        None
    }

    /// The header and payload of data fragment `seq` to `to`, if it is still unacknowledged.
    fn data_datagram(&self, to: u16, seq: u32) -> Option<([u8; HEADER_BYTES], [&[u8]; 2])> {
        let peer = &self.peers[usize::from(to)];
        let u = unacked(peer, seq)?;
        let h = header(self.cookie, self.me, u.flags, u.seq, peer.expected);
        Some((h, u.payload.parts()))
    }

    /// Whether an event waits for [`Reliable::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Reliable::handle_timeout`] should next run.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        for (i, p) in self.peers.iter().enumerate() {
            if i == usize::from(self.me) || p.lost || p.left {
                continue;
            }
            if let Some(u) = p.unacked.front() {
                consider(u.last_sent + p.rto);
            }
            consider(p.last_sent + self.cfg.heartbeat);
            consider(p.last_heard + self.cfg.peer_timeout);
            if let Some(probe) = &p.probe {
                consider(probe.next_at);
            }
        }
        t
    }

    /// Retransmits what timed out, sends heartbeats, reports silent peers.
    pub fn handle_timeout(&mut self, now: Instant) {
        for i in 0..self.peers.len() {
            // A peer that left is silent by right: neither lost nor sent heartbeats.
            if i == usize::from(self.me) || self.peers[i].lost || self.peers[i].left {
                continue;
            }
            let silent = now.saturating_duration_since(self.peers[i].last_heard);
            if silent >= self.cfg.peer_timeout {
                self.peers[i].lost = true;
                self.events.push_back(Event::PeerLost {
                    peer: i as u16,
                    silent_for: silent,
                    cause: LostCause::Silent,
                });
                continue;
            }
            let peer = &mut self.peers[i];
            // Only the oldest datagram is resent (as TCP does): the acknowledgement it brings
            // back tells what else is missing (see `recover`). A timeout is more often a
            // receiver late to acknowledge (descheduled on a busy machine) than a loss, and
            // resending the whole window then sent every burst twice.
            let timed_out = peer
                .unacked
                .front()
                .is_some_and(|u| now.saturating_duration_since(u.last_sent) >= peer.rto);
            let resent = timed_out && resend_oldest(peer, i as u16, now, &mut self.out);
            if resent {
                self.stats.retransmissions += 1;
                // The holes the receiver's selective acknowledgements showed behind the oldest
                // go with it: they are as lost, and waiting for one timeout each is what made a
                // lossy job crawl.
                let highest = peer.unacked.iter().rev().find(|u| u.sacked).map(|u| u.seq);
                if let Some(highest) = highest {
                    // Every other hole, whatever its age (the oldest, just resent, is 0 ns old).
                    let n = resend_holes(
                        peer,
                        i as u16,
                        now,
                        highest,
                        Duration::from_nanos(1),
                        &mut self.out,
                    );
                    self.stats.retransmissions += n;
                    self.stats.sack_retransmissions += n;
                }
                peer.recover = Some(peer.next_seq);
                peer.rto = (peer.rto * 2).min(self.cfg.max_rto);
                peer.ack_due = false;
            } else if now.saturating_duration_since(peer.last_sent) >= self.cfg.heartbeat {
                peer.ack_due = true;
            }
            self.flush_peer(now, i as u16, true);
        }
    }
}

/// `peer`'s unacknowledged fragment `seq`, if it still is.
fn unacked(peer: &Peer, seq: u32) -> Option<&Unacked> {
    let first = peer.unacked.front()?.seq;
    peer.unacked.get(seq.wrapping_sub(first) as usize)
}

/// Resends `peer`'s oldest unacknowledged datagram (to node `to`) now; returns whether there was
/// one. The caller counts it.
fn resend_oldest(peer: &mut Peer, to: u16, now: Instant, out: &mut VecDeque<Out>) -> bool {
    let Some(u) = peer.unacked.front_mut() else {
        return false;
    };
    u.retransmitted = true;
    u.last_sent = now;
    out.push_back(Out::Data { to, seq: u.seq });
    peer.last_sent = now;
    peer.last_resend = Some(now);
    true
}

/// Resends the fragments to `to` below `highest` that the receiver does not hold (holes its
/// selective acknowledgements showed) and that were last sent at least `min_age` ago; returns
/// how many. The caller counts them.
fn resend_holes(
    peer: &mut Peer,
    to: u16,
    now: Instant,
    highest: u32,
    min_age: Duration,
    out: &mut VecDeque<Out>,
) -> u64 {
    let mut n = 0;
    for u in peer.unacked.iter_mut() {
        if !seq_lt(u.seq, highest) {
            break;
        }
        if !u.sacked && now.saturating_duration_since(u.last_sent) >= min_age {
            u.retransmitted = true;
            u.last_sent = now;
            out.push_back(Out::Data { to, seq: u.seq });
            peer.last_sent = now;
            peer.last_resend = Some(now);
            n += 1;
        }
    }
    n
}

fn update_rtt(peer: &mut Peer, sample: Duration, cfg: &ReliableConfig) {
    match peer.srtt {
        None => {
            peer.srtt = Some(sample);
            peer.rttvar = sample / 2;
        }
        Some(srtt) => {
            let diff = srtt.abs_diff(sample);
            peer.rttvar = (peer.rttvar * 3 + diff) / 4;
            peer.srtt = Some((srtt * 7 + sample) / 8);
        }
    }
    reset_rto(peer, cfg);
}

/// The retransmission timeout from the round-trip estimates, without back-off.
fn reset_rto(peer: &mut Peer, cfg: &ReliableConfig) {
    if let Some(srtt) = peer.srtt {
        peer.rto = (srtt + (peer.rttvar * 4).max(Duration::from_micros(200)))
            .clamp(cfg.min_rto, cfg.max_rto);
    }
}

/// Packs `first` (a whole message) with the whole messages queued after it, while they fit in
/// `frag` bytes; `Err(first)` when not even one more fits (it goes alone, unpacked).
fn pack(
    queued: &mut VecDeque<(u8, Payload)>,
    first: Payload,
    frag: usize,
) -> Result<Vec<u8>, Payload> {
    // A message with a body over half a fragment (a grant's run) goes alone, gathered: packing
    // it would copy the body for the few bytes beside it.
    let alone = |msg: &Payload| msg.body.as_ref().is_some_and(|(_, r)| r.len() > frag / 2);
    let fits = |used: usize, (flags, msg): &(u8, Payload)| {
        flags & QUEUED_WHOLE != 0 && !alone(msg) && used + RECORD_HEADER + msg.len() <= frag
    };
    if alone(&first)
        || !queued
            .front()
            .is_some_and(|next| fits(RECORD_HEADER + first.len(), next))
    {
        return Err(first);
    }
    let mut packed = Vec::with_capacity(frag);
    push_record(&mut packed, &first.parts());
    while queued.front().is_some_and(|next| fits(packed.len(), next)) {
        if let Some((_, msg)) = queued.pop_front() {
            push_record(&mut packed, &msg.parts());
        }
    }
    Ok(packed)
}

/// Whether a datagram with header `head` carries one whole message alone (not a fragment, not
/// packed): its payload is then the message itself (see [`Reliable::handle_datagram_parts`]).
pub fn carries_one_message(head: &[u8]) -> bool {
    head.len() == HEADER_BYTES && head[3] & (FLAG_DATA | FLAG_MORE | FLAG_PACKED) == FLAG_DATA
}

/// Appends one record: the length of `parts` together, then each.
fn push_record(packed: &mut Vec<u8>, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    packed.extend_from_slice(&(len as u32).to_le_bytes());
    for part in parts {
        packed.extend_from_slice(part);
    }
}

/// The records of a packed payload, in order; an error (with the byte offset) where one does not
/// fit in what is left.
fn records(payload: &[u8]) -> impl Iterator<Item = Result<&[u8], DatagramError>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = payload.get(at..).filter(|r| !r.is_empty())?;
        let record = rest
            .get(..RECORD_HEADER)
            .map(|h| u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize)
            .and_then(|len| rest.get(RECORD_HEADER..RECORD_HEADER + len));
        let Some(bytes) = record else {
            let err = DatagramError::Packing(at);
            at = payload.len();
            return Some(Err(err));
        };
        at += RECORD_HEADER + bytes.len();
        Some(Ok(bytes))
    })
}

/// Hands the in-order fragment `payload` on: as the message itself if it is one whole message
/// (no copy if it came in a buffer of its own), else copied once, into the message(s) it
/// completes.
fn deliver(
    peer: &mut Peer,
    from: u16,
    flags: u8,
    payload: Cow<'_, [u8]>,
    events: &mut VecDeque<Event>,
) -> Result<(), DatagramError> {
    peer.expected = peer.expected.wrapping_add(1);
    if flags & FLAG_PACKED != 0 {
        // Checked when it arrived: whole messages only, and none may be mid-reassembly.
        if !peer.partial.is_empty() {
            peer.partial.clear();
            return Err(DatagramError::Packing(0));
        }
        for bytes in records(&payload) {
            events.push_back(Event::Message {
                from,
                bytes: bytes?.to_vec(),
            });
        }
        return Ok(());
    }
    if peer.partial.len() + payload.len() > MAX_MESSAGE_BYTES {
        peer.partial.clear();
        return Err(DatagramError::TooLarge(MAX_MESSAGE_BYTES));
    }
    if peer.partial.is_empty() && flags & FLAG_MORE == 0 {
        events.push_back(Event::Message {
            from,
            bytes: payload.into_owned(),
        });
        return Ok(());
    }
    peer.partial.extend_from_slice(&payload);
    if flags & FLAG_MORE == 0 {
        events.push_back(Event::Message {
            from,
            bytes: std::mem::take(&mut peer.partial),
        });
    }
    Ok(())
}

/// A datagram's header.
fn header(cookie: u64, me: u16, flags: u8, seq: u32, ack: u32) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    h[2] = VERSION;
    h[3] = flags;
    h[4..12].copy_from_slice(&cookie.to_le_bytes());
    h[12..14].copy_from_slice(&me.to_le_bytes());
    h[14..18].copy_from_slice(&seq.to_le_bytes());
    h[18..22].copy_from_slice(&ack.to_le_bytes());
    h
}

/// A whole datagram in one buffer.
fn datagram(cookie: u64, me: u16, flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    [&header(cookie, me, flags, seq, ack)[..], payload].concat()
}

/// A datagram due to be sent.
#[derive(Debug)]
enum Out {
    /// A data fragment, still in its peer's retransmission queue.
    Data { to: u16, seq: u32 },
    /// A datagram of its own (a pure acknowledgement).
    Bytes { to: u16, dg: Vec<u8> },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// SplitMix64, for seeded link behaviour.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Lent bytes that count how often they are read, and change once when told (as a home's
    /// page written after its grant was made).
    struct Counted {
        bytes: Vec<u8>,
        newer: Vec<u8>,
        changed: std::sync::atomic::AtomicBool,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Counted {
        fn new(bytes: &[u8]) -> Counted {
            Counted {
                bytes: bytes.to_vec(),
                newer: bytes.iter().map(|b| b.wrapping_add(1)).collect(),
                changed: Default::default(),
                reads: Default::default(),
            }
        }
        fn reads(&self) -> usize {
            self.reads.load(std::sync::atomic::Ordering::Relaxed)
        }
        fn change(&self) {
            self.changed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl crate::LentBytes for Counted {
        fn bytes(&self) -> &[u8] {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match self.changed.load(std::sync::atomic::Ordering::Relaxed) {
                false => &self.bytes,
                true => &self.newer,
            }
        }
    }

    #[test]
    fn a_lent_body_is_read_at_each_send_with_the_bytes_it_holds_then() {
        let t0 = Instant::now();
        let (mut a, mut b) = pair(t0);
        let lent = Arc::new(Counted::new(&[5u8; 40_000]));
        a.send_parts(1, b"head".to_vec(), Body::Lent(lent.clone()));
        a.flush(t0);
        // Sent once and lost.
        let first = a.poll_transmit().expect("the datagram");
        assert_eq!(first.1[HEADER_BYTES + 4..], [5u8; 40_000][..]);
        let read = lent.reads();
        assert!(read >= 1);
        // Written since: sent again on a timeout, read again, with the newer bytes.
        lent.change();
        let later = t0 + Duration::from_secs(1);
        a.handle_timeout(later);
        let again = a.poll_transmit().expect("the retransmission");
        assert_eq!(again.1.len(), first.1.len());
        assert!(
            lent.reads() > read,
            "a retransmission reads the lent memory again"
        );
        b.handle_datagram(later, 0, &again.1).unwrap();
        match b.poll_event() {
            Some(Event::Message { bytes, .. }) => {
                assert_eq!(&bytes[..4], b"head");
                assert_eq!(&bytes[4..], &[6u8; 40_000][..]);
            }
            other => panic!("expected the message, got {other:?}"),
        }
        // Acknowledged: the transport holds it no more.
        b.flush(later);
        let (_, ack) = b.poll_transmit().expect("the acknowledgement");
        a.handle_datagram(later, 1, &ack).unwrap();
        assert_eq!(Arc::strong_count(&lent), 1, "let go once acknowledged");
    }

    #[test]
    fn a_grants_run_goes_alone_gathered_and_small_messages_still_share_datagrams() {
        let t0 = Instant::now();
        let mut a = Reliable::new(0, 2, 7, ReliableConfig::default(), t0);
        // A 15-page run with room for a small message beside it, then small ones and a page.
        let run = Arc::new(Counted::new(&[1u8; 15 * 4096]));
        a.send_parts(1, vec![0; 14], Body::Lent(run.clone()));
        a.send(1, &[2u8; 100]);
        a.send(1, &[3u8; 100]);
        a.send_parts(1, vec![0; 14], Body::Shared(Arc::from(&[4u8; 4096][..])));
        a.flush(t0);
        let sent: Vec<_> = std::iter::from_fn(|| a.poll_transmit()).collect();
        assert_eq!(sent.len(), 2, "the run alone, the three small ones packed");
        assert_eq!(sent[0].1.len(), HEADER_BYTES + 14 + 15 * 4096);
        assert_eq!(a.stats().packed, 1);
    }

    /// Nodes 0 and 1 of a job, default settings.
    fn pair(t0: Instant) -> (Reliable, Reliable) {
        let cfg = ReliableConfig::default();
        (
            Reliable::new(0, 2, 7, cfg.clone(), t0),
            Reliable::new(1, 2, 7, cfg, t0),
        )
    }

    /// Two endpoints whose path carries 1,472-byte datagrams (a 1,500-byte Ethernet's) that
    /// leave several at a time.
    fn small_path(t0: Instant) -> (Reliable, Reliable) {
        let (mut a, mut b) = pair(t0);
        a.set_path(1, 1472, true);
        b.set_path(0, 1472, true);
        (a, b)
    }

    #[test]
    fn a_run_over_a_small_path_goes_in_segmented_sends_cut_from_its_body_at_send_time() {
        let t0 = Instant::now();
        let (mut a, mut b) = small_path(t0);
        assert_eq!(a.peers[1].window, 64 * 45, "the window holds as many bytes");
        let run = Arc::new(Counted::new(&[1u8; 15 * 4096]));
        a.send_parts(1, b"grant head".to_vec(), Body::Lent(run.clone()));
        a.flush(t0);
        // Written after it was queued: every fragment carries the newer bytes (no copy was
        // made when it was cut).
        run.change();
        let mut sends = Vec::new();
        a.transmit_segmented(16, 65_000, |to, parts, segment| {
            sends.push(cut_segments(to, parts, segment));
        });
        let datagrams: Vec<_> = sends.iter().flatten().collect();
        let fragments = (10 + 15 * 4096usize).div_ceil(1472 - HEADER_BYTES);
        assert_eq!(datagrams.len(), fragments);
        assert_eq!(sends.len(), fragments.div_ceil(16), "16 datagrams a send");
        for (_, d) in &datagrams {
            b.handle_datagram(t0, 0, d).unwrap();
        }
        match b.poll_event() {
            Some(Event::Message { bytes, .. }) => {
                assert_eq!(&bytes[..10], b"grant head");
                assert_eq!(&bytes[10..], &[2u8; 15 * 4096][..]);
            }
            other => panic!("expected the run, got {other:?}"),
        }
    }

    /// Delivers what `from` has to send to `to`, dropping datagrams over `mtu` bytes; returns
    /// how many went.
    fn deliver_up_to(from: &mut Reliable, to: &mut Reliable, mtu: usize, now: Instant) -> usize {
        let sent: Vec<_> = std::iter::from_fn(|| from.poll_transmit()).collect();
        let mut n = 0;
        for (_, d) in sent.iter().filter(|(_, d)| d.len() <= mtu) {
            to.handle_datagram(now, from.me, d).unwrap();
            n += 1;
        }
        n
    }

    #[test]
    fn a_probed_path_carries_its_size_once_a_probe_of_it_is_answered() {
        let t0 = Instant::now();
        let (mut a, mut b) = pair(t0);
        a.probe_path(1, 1_472, true, t0);
        assert_eq!(a.fragment_bytes(1), MIN_DATAGRAM_BYTES - HEADER_BYTES);
        a.flush(t0);
        let probes: Vec<_> = std::iter::from_fn(|| a.poll_transmit()).collect();
        let sizes: Vec<usize> = probes.iter().map(|(_, d)| d.len()).collect();
        assert_eq!(
            sizes,
            [1_472, 1_232],
            "the path's size and the step below it"
        );
        for (_, d) in &probes {
            b.handle_datagram(t0, 0, d).unwrap();
        }
        assert_eq!(deliver_up_to(&mut b, &mut a, 65_535, t0), 2, "two answers");
        assert_eq!(a.fragment_bytes(1), 1_472 - HEADER_BYTES);
        assert!(
            a.peers[1].probe.is_none(),
            "the largest size answered: done"
        );
        assert!(b.poll_event().is_none(), "a probe is no message");
    }

    #[test]
    fn a_path_that_loses_its_mtu_s_datagrams_keeps_the_largest_size_answered() {
        let t0 = Instant::now();
        let (mut a, mut b) = pair(t0);
        // The peer's interface takes 1,260 bytes at most (an MTU of 1,288 says 1,472 here).
        a.probe_path(1, 1_472, true, t0);
        let mut now = t0;
        for _ in 0..PROBE_TRIES + 1 {
            a.handle_timeout(now);
            deliver_up_to(&mut a, &mut b, 1_260, now);
            deliver_up_to(&mut b, &mut a, 1_260, now);
            now += Duration::from_secs(1);
        }
        assert!(a.peers[1].probe.is_none(), "probing ended");
        assert_eq!(a.fragment_bytes(1), 1_232 - HEADER_BYTES);
        // Messages go in datagrams the path carries.
        a.send(1, &[3u8; 10_000]);
        a.flush(now);
        let sent: Vec<_> = std::iter::from_fn(|| a.poll_transmit()).collect();
        assert!(sent.iter().all(|(_, d)| d.len() <= 1_232), "{sent:?}");
        for (_, d) in &sent {
            b.handle_datagram(now, 0, d).unwrap();
        }
        assert!(
            matches!(b.poll_event(), Some(Event::Message { bytes, .. }) if bytes == [3u8; 10_000])
        );
    }

    #[test]
    fn after_a_path_narrows_datagrams_cut_before_go_one_by_one_and_new_ones_in_segments() {
        let t0 = Instant::now();
        let (mut a, _) = small_path(t0);
        a.send(1, &[1u8; 20_000]);
        a.flush(t0);
        // The MTU fell (the kernel refused a segmented send with EMSGSIZE): the 14 fragments
        // already cut at 1,472 bytes are too large to segment now.
        a.set_path(1, 1_000, true);
        a.send(1, &[2u8; 20_000]);
        a.flush(t0);
        let mut sends = Vec::new();
        a.transmit_segmented(64, 65_000, |_, parts, segment| {
            sends.push((segment, parts.concat().len()));
        });
        let (singles, segmented): (Vec<&(Option<u16>, usize)>, Vec<_>) =
            sends.iter().partition(|s| s.0.is_none());
        assert_eq!(singles.len(), 14, "{sends:?}");
        assert!(singles.iter().all(|s| s.1 <= 1_472), "{sends:?}");
        assert_eq!(segmented.len(), 1, "{sends:?}");
        assert_eq!(segmented[0].0, Some(1_000));
    }

    #[test]
    fn a_selective_acknowledgement_names_what_is_held_across_the_wrap_of_sequence_numbers() {
        let t0 = Instant::now();
        let mut a = Reliable::new(0, 2, 7, ReliableConfig::default(), t0);
        let peer = &mut a.peers[1];
        peer.expected = u32::MAX - 2;
        // Held: the second after the hole (u32::MAX) and the fourth (1, past the wrap); and
        // one too far ahead to name.
        for seq in [u32::MAX, 1, 5_000] {
            peer.out_of_order.insert(seq, (FLAG_DATA, Vec::new()));
        }
        let ack = a.pure_ack(t0, 1, true);
        assert_eq!(ack[3] & FLAG_GAP, FLAG_GAP);
        assert_eq!(&ack[HEADER_BYTES..], &[0b1010, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_selective_acknowledgement_names_what_is_held_up_to_1024_fragments_past_a_hole() {
        // (Its first 64 bits alone would leave 535 fragments to be resent.)
        let t0 = Instant::now();
        let (mut a, mut b) = small_path(t0);
        // 600 fragments; the first is lost, the rest arrive.
        a.send(1, &vec![9u8; 600 * 1450]);
        a.flush(t0);
        let sent: Vec<_> = std::iter::from_fn(|| a.poll_transmit()).collect();
        assert_eq!(sent.len(), 600);
        for (_, d) in &sent[1..] {
            b.handle_datagram(t0, 0, d).unwrap();
        }
        b.flush(t0);
        let acks: Vec<_> = std::iter::from_fn(|| b.poll_transmit()).collect();
        for (_, ack) in &acks {
            a.handle_datagram(t0, 1, ack).unwrap();
        }
        assert_eq!(
            a.peers[1].unacked.iter().filter(|u| u.sacked).count(),
            599,
            "every fragment held is named"
        );
        // The one hole is resent at once (later fragments are held), nothing else.
        let resent: Vec<_> = std::iter::from_fn(|| a.poll_transmit()).collect();
        assert_eq!(resent.len(), 1);
        assert_eq!(a.stats().sack_retransmissions, 1);
        b.handle_datagram(t0, 0, &resent[0].1).unwrap();
        assert!(matches!(b.poll_event(), Some(Event::Message { .. })));
    }

    struct Link {
        drop_pct: u64,
        dup_pct: u64,
        max_delay_us: u64,
    }

    /// Two endpoints over a seeded lossy link; returns what each delivered and the counters.
    fn run(
        seed: u64,
        link: Link,
        msgs: &[Vec<u8>],
        frag: usize,
    ) -> (Vec<Vec<u8>>, ReliableStats, Duration) {
        let t0 = Instant::now();
        let cfg = ReliableConfig {
            max_datagram_bytes: HEADER_BYTES + frag,
            window: 8,
            ..Default::default()
        };
        let mut a = Reliable::new(0, 2, 7, cfg.clone(), t0);
        let mut b = Reliable::new(1, 2, 7, cfg, t0);
        // Odd seeds: a's path carries datagrams of a third of the configured size, which leave
        // several at a time (as UDP's segmentation sends them), its window scaled to match.
        let segmented = seed % 2 == 1;
        if segmented {
            let small = HEADER_BYTES + frag / 3;
            a.set_path(1, small, true);
            b.set_path(0, small, true);
        }
        let mut rng = Rng(seed);
        let mut now = t0;
        // In flight: (arrival time, to, datagram); arrival order is by time, so delays reorder.
        let mut wire: Vec<(Instant, u16, Vec<u8>)> = Vec::new();
        // A third of the messages lent (send), a third given away (send_owned), a third given as
        // a head and a shared body cut anywhere (send_parts): each path carries whole, packed
        // and fragmented messages over the same link.
        for (i, m) in msgs.iter().enumerate() {
            match i % 3 {
                0 => a.send(1, m),
                1 => a.send_owned(1, m.clone()),
                _ => {
                    let cut = rng.below(m.len() as u64 + 1) as usize;
                    let body = if i % 2 == 0 {
                        Body::Shared(Arc::from(&m[cut..]))
                    } else {
                        Body::Lent(Arc::new(Counted::new(&m[cut..])))
                    };
                    a.send_parts(1, m[..cut].to_vec(), body);
                }
            }
        }
        let mut got = Vec::new();
        let mut steps = 0;
        while got.len() < msgs.len() {
            steps += 1;
            assert!(
                steps < 1_000_000,
                "no progress: {} of {} delivered",
                got.len(),
                msgs.len()
            );
            for (ep, from) in [(&mut a, 0u16), (&mut b, 1u16)] {
                ep.flush(now);
                let mut sent = Vec::new();
                if segmented {
                    ep.transmit_segmented(5, 4 * frag, |to, parts, segment| {
                        sent.extend(cut_segments(to, parts, segment));
                    });
                } else {
                    sent.extend(std::iter::from_fn(|| ep.poll_transmit()));
                }
                for (to, d) in sent {
                    assert_ne!(to, from);
                    if rng.below(100) < link.drop_pct {
                        continue;
                    }
                    let copies = if rng.below(100) < link.dup_pct { 2 } else { 1 };
                    for _ in 0..copies {
                        let delay = Duration::from_micros(10 + rng.below(link.max_delay_us));
                        wire.push((now + delay, to, d.clone()));
                    }
                }
            }
            // Next event: the earliest arrival or timer.
            let next_arrival = wire.iter().map(|w| w.0).min();
            let next_timer = [a.poll_timeout(), b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let next = match (next_arrival, next_timer) {
                (Some(x), Some(y)) => x.min(y),
                (x, y) => x.or(y).expect("something must be pending"),
            };
            now = now.max(next);
            let (due, rest): (Vec<_>, Vec<_>) = wire.drain(..).partition(|w| w.0 <= now);
            wire = rest;
            for (i, (_, to, d)) in due.into_iter().enumerate() {
                let ep = if to == 0 { &mut a } else { &mut b };
                // Read whole, or as a header and a payload in a buffer of its own (as UDP
                // reads a large one).
                if i % 2 == 0 {
                    ep.handle_datagram(now, 1 - to, &d).unwrap();
                } else {
                    let (head, payload) = d.split_at(HEADER_BYTES.min(d.len()));
                    let payload = Cow::Owned(payload.to_vec());
                    ep.handle_datagram_parts(now, 1 - to, head, payload)
                        .unwrap();
                }
            }
            a.handle_timeout(now);
            b.handle_timeout(now);
            while let Some(e) = b.poll_event() {
                match e {
                    Event::Message { from, bytes } => {
                        assert_eq!(from, 0);
                        got.push(bytes);
                    }
                    other => panic!("unexpected {other:?} on a link that delivers"),
                }
            }
            while a.poll_event().is_some() {}
        }
        (got, a.stats().clone(), now - t0)
    }

    /// The datagrams of one send of [`Reliable::transmit_segmented`], cut as the kernel cuts a
    /// segmented send, after checking it is one: datagrams of three parts, all `segment` long
    /// but the last, which may be shorter.
    fn cut_segments(to: u16, parts: &[&[u8]], segment: Option<u16>) -> Vec<(u16, Vec<u8>)> {
        let bytes = parts.concat();
        let Some(segment) = segment else {
            return vec![(to, bytes)];
        };
        let lens: Vec<usize> = parts.chunks(3).map(|d| d.concat().len()).collect();
        assert_eq!(parts.len() % 3, 0, "datagrams of three parts");
        assert!(lens.len() > 1, "a segmented send of one datagram");
        let (last, full) = lens.split_last().unwrap();
        assert!(
            full.iter().all(|&l| l == usize::from(segment)) && *last <= usize::from(segment),
            "datagrams of {lens:?} sent as segments of {segment}"
        );
        bytes
            .chunks(usize::from(segment))
            .map(|d| (to, d.to_vec()))
            .collect()
    }

    fn messages(n: usize, max_len: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut rng = Rng(seed);
        (0..n)
            .map(|i| {
                (0..rng.below(max_len as u64) as usize)
                    .map(|j| (i * 31 + j) as u8)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_clean_link_delivers_everything_in_order_without_retransmission() {
        let msgs = messages(200, 3000, 1);
        let (got, stats, _) = run(
            1,
            Link {
                drop_pct: 0,
                dup_pct: 0,
                max_delay_us: 1,
            },
            &msgs,
            1000,
        );
        assert_eq!(got, msgs);
        assert_eq!(stats.retransmissions, 0);
    }

    #[test]
    fn reordering_alone_loses_nothing_and_costs_few_retransmissions() {
        let msgs = messages(200, 3000, 2);
        let (got, stats, _) = run(
            2,
            Link {
                drop_pct: 0,
                dup_pct: 0,
                max_delay_us: 300,
            },
            &msgs,
            1000,
        );
        assert_eq!(got, msgs);
        assert!(
            stats.retransmissions < stats.datagrams_sent / 4,
            "{stats:?}"
        );
    }

    #[test]
    fn a_lossy_duplicating_reordering_link_still_delivers_everything_in_order() {
        for seed in 0..30 {
            let msgs = messages(150, 5000, seed);
            let link = Link {
                drop_pct: 10,
                dup_pct: 5,
                max_delay_us: 500,
            };
            let (got, stats, _) = run(seed, link, &msgs, 1000);
            assert_eq!(got, msgs, "seed {seed}");
            assert!(
                stats.retransmissions > 0,
                "seed {seed}: losses must cause retransmissions"
            );
        }
    }

    /// Heavy loss: selective acknowledgements recover a window's holes in one round trip each,
    /// so a 20% loss costs a bounded multiple of a clean run's time, not one timeout per loss.
    #[test]
    fn heavy_loss_is_recovered_by_selective_acknowledgements() {
        let msgs = messages(300, 20_000, 7);
        let clean = Link {
            drop_pct: 0,
            dup_pct: 0,
            max_delay_us: 50,
        };
        let (_, _, clean_time) = run(7, clean, &msgs, 1000);
        for seed in 0..10 {
            let link = Link {
                drop_pct: 20,
                dup_pct: 0,
                max_delay_us: 50,
            };
            let (got, stats, took) = run(seed, link, &msgs, 1000);
            assert_eq!(got, msgs, "seed {seed}");
            assert!(stats.sack_retransmissions > 0, "seed {seed}: {stats:?}");
            // 0.7-1.8 s here (a clean run: 28 ms); before selective acknowledgements and clean
            // round-trip samples, 260-300 s (the timeout stuck at its 1 s ceiling).
            assert!(
                took < clean_time * 100,
                "seed {seed}: {took:?} against {clean_time:?} clean: {stats:?}"
            );
        }
    }

    #[test]
    fn small_messages_are_packed_and_survive_a_lossy_link() {
        for seed in 0..20 {
            let msgs = messages(400, 300, 100 + seed);
            let link = Link {
                drop_pct: 10,
                dup_pct: 5,
                max_delay_us: 500,
            };
            let (got, stats, _) = run(seed, link, &msgs, 1000);
            assert_eq!(got, msgs, "seed {seed}");
            assert!(stats.packed > 0, "seed {seed}: {stats:?}");
            assert!(stats.datagrams_sent < 400, "seed {seed}: {stats:?}");
        }
    }

    #[test]
    fn a_packed_datagram_that_does_not_add_up_is_rejected_whole() {
        let t0 = Instant::now();
        let mut a = Reliable::new(0, 2, 42, ReliableConfig::default(), t0);
        let mut p = Vec::new();
        push_record(&mut p, &[b"one"]);
        push_record(&mut p, &[b"two"]);
        let mut bad = p.clone();
        bad.truncate(bad.len() - 1);
        for payload in [bad, vec![1, 0, 0], vec![9, 0, 0, 0, 1]] {
            let d = datagram(42, 1, FLAG_DATA | FLAG_PACKED, 0, 0, &payload);
            assert!(matches!(
                a.handle_datagram(t0, 1, &d),
                Err(DatagramError::Packing(_))
            ));
        }
        assert!(a.poll_event().is_none());
        assert_eq!(a.peers[1].expected, 0, "nothing was consumed");
        let d = datagram(42, 1, FLAG_DATA | FLAG_PACKED, 0, 0, &p);
        a.handle_datagram(t0, 1, &d).unwrap();
        let got: Vec<_> = std::iter::from_fn(|| a.poll_event()).collect();
        assert_eq!(
            got,
            vec![
                Event::Message {
                    from: 1,
                    bytes: b"one".to_vec()
                },
                Event::Message {
                    from: 1,
                    bytes: b"two".to_vec()
                }
            ]
        );
    }

    #[test]
    fn the_byte_window_holds_back_large_datagrams() {
        let t0 = Instant::now();
        let cfg = ReliableConfig {
            window_bytes: 100_000,
            ..Default::default()
        };
        let mut a = Reliable::new(0, 2, 42, cfg, t0);
        for _ in 0..10 {
            a.send(1, &[7u8; 60_000]);
        }
        a.flush(t0);
        let sent = std::iter::from_fn(|| a.poll_transmit()).count();
        assert_eq!(sent, 2, "two 60 KB datagrams fill a 100 KB window");
    }

    /// A receiver that never flushes (a fault handler driving the node leaves its pure
    /// acknowledgements to the service thread) still acknowledges at half the sender's window,
    /// by datagrams and by bytes, so a sender with a full window is not held back.
    #[test]
    fn half_a_window_received_is_acknowledged_without_a_flush() {
        let t0 = Instant::now();
        for (cfg, each, sends, acked_after) in [
            (
                ReliableConfig {
                    window: 4,
                    max_datagram_bytes: 1024,
                    ..Default::default()
                },
                1000,
                4,
                2,
            ),
            (
                ReliableConfig {
                    window_bytes: 200_000,
                    ..Default::default()
                },
                60_000,
                4,
                2,
            ),
            (
                ReliableConfig {
                    window: 1,
                    ..Default::default()
                },
                100,
                1,
                1,
            ),
        ] {
            let mut a = Reliable::new(0, 2, 42, cfg.clone(), t0);
            let mut b = Reliable::new(1, 2, 42, cfg, t0);
            for _ in 0..sends {
                a.send(1, &vec![7u8; each]);
            }
            a.flush(t0);
            let sent: Vec<Vec<u8>> = std::iter::from_fn(|| a.poll_transmit())
                .map(|(_, d)| d)
                .collect();
            assert!(sent.len() >= acked_after, "{} sent", sent.len());
            for (i, d) in sent.iter().enumerate() {
                b.handle_datagram(t0, 0, d).unwrap();
                let ack = b.poll_transmit();
                if i + 1 == acked_after {
                    let (to, ack) = ack.expect("an acknowledgement at half the window");
                    assert_eq!(to, 0);
                    a.handle_datagram(t0, 1, &ack).unwrap();
                    assert_eq!(a.peers[1].unacked.len(), sent.len() - acked_after);
                    break;
                }
                assert!(ack.is_none(), "acknowledged after {} datagrams", i + 1);
            }
        }
    }

    /// A leaving node acknowledges, three times, what it has from every peer it heard from:
    /// any one of them ends the peer's wait; a peer never heard from gets none.
    #[test]
    fn a_farewell_repeats_the_last_acknowledgement_to_each_peer_heard_from() {
        let t0 = Instant::now();
        let cfg = ReliableConfig::default();
        let mut a = Reliable::new(0, 3, 42, cfg.clone(), t0);
        let mut b = Reliable::new(1, 3, 42, cfg, t0);
        a.send(1, b"the exit grant");
        a.flush(t0);
        let (_, d) = a.poll_transmit().unwrap();
        b.handle_datagram(t0, 0, &d).unwrap();
        b.farewell(t0);
        let acks: Vec<(u16, Vec<u8>)> = std::iter::from_fn(|| b.poll_transmit()).collect();
        assert_eq!(acks.len(), FAREWELL_ACKS, "{acks:?}");
        assert!(
            acks.iter()
                .all(|(to, d)| *to == 0 && d[3] == FLAG_FAREWELL && d.len() == HEADER_BYTES)
        );
        // The first two lost: the last one is enough.
        a.handle_datagram(t0, 1, &acks[FAREWELL_ACKS - 1].1)
            .unwrap();
        assert_eq!(a.pending(1), 0, "acknowledged");
        // Duplicates of it change nothing (no fast retransmission of anything).
        a.handle_datagram(t0, 1, &acks[0].1).unwrap();
        assert!(a.poll_transmit().is_none());
    }

    /// A peer that said farewell is gone: what was in flight or queued for it (a grant it no
    /// longer waited for) is dropped, not resent until this node's linger ran out; nothing sent
    /// to it later leaves; its silence is not a loss.
    #[test]
    fn what_is_pending_for_a_peer_that_said_farewell_is_dropped() {
        let t0 = Instant::now();
        let cfg = ReliableConfig::default();
        let mut a = Reliable::new(0, 2, 42, cfg.clone(), t0);
        let mut b = Reliable::new(1, 2, 42, cfg.clone(), t0);
        // b has heard from a (so its farewell goes to a), then a sends a message b never gets.
        a.send(1, b"a request's grant");
        a.flush(t0);
        let (_, d) = a.poll_transmit().unwrap();
        b.handle_datagram(t0, 0, &d).unwrap();
        a.send(1, b"a read-ahead's grant, lost");
        a.flush(t0);
        while a.poll_transmit().is_some() {}
        assert_eq!(a.pending(1), 2);
        b.farewell(t0);
        let (_, farewell) = b.poll_transmit().unwrap();
        a.handle_datagram(t0, 1, &farewell).unwrap();
        assert_eq!(a.pending(1), 0, "nothing waited for once b left");
        a.send(1, b"sent after b left");
        a.flush(t0);
        let later = t0 + cfg.peer_timeout * 2;
        a.handle_timeout(later);
        assert!(
            a.poll_transmit().is_none(),
            "nothing sent to a node that left"
        );
        assert!(a.poll_event().is_none(), "a peer that left is not lost");
        assert_eq!(a.poll_timeout(), None);
    }

    /// A leaver whose data for this node was lost (its linger ran out: node 0's exit grant at
    /// heavy loss) is not taken to have left: its silence is noticed as a loss, as before the
    /// farewell was marked (a review: a peer waited in its exit for a grant that never came).
    /// And a node that only sent to a peer (a reader whose read-ahead grants were all lost)
    /// says farewell to it too.
    #[test]
    fn a_farewell_with_data_missing_is_no_leave_and_a_reader_that_only_asked_says_it() {
        let t0 = Instant::now();
        let cfg = ReliableConfig::default();
        let mut a = Reliable::new(0, 2, 42, cfg.clone(), t0);
        let mut b = Reliable::new(1, 2, 42, cfg.clone(), t0);
        // b's data for a is lost; b leaves anyway.
        b.send(0, b"the exit grant, lost");
        b.flush(t0);
        while b.poll_transmit().is_some() {}
        a.send(1, b"something");
        a.flush(t0);
        let (_, d) = a.poll_transmit().unwrap();
        b.handle_datagram(t0, 0, &d).unwrap();
        b.farewell(t0);
        let (_, farewell) = b.poll_transmit().unwrap();
        a.handle_datagram(t0, 1, &farewell).unwrap();
        a.handle_timeout(t0 + cfg.peer_timeout * 2);
        assert!(
            matches!(a.poll_event(), Some(Event::PeerLost { peer: 1, .. })),
            "a leaver that took data for a with it is a loss"
        );
        // c only sent to d (d's answers all lost): its farewell still reaches d, which drops
        // what it had for c.
        let mut c = Reliable::new(0, 2, 7, cfg.clone(), t0);
        let mut d = Reliable::new(1, 2, 7, cfg.clone(), t0);
        c.send(1, b"a request");
        c.flush(t0);
        let (_, q) = c.poll_transmit().unwrap();
        d.handle_datagram(t0, 0, &q).unwrap();
        d.send(0, b"its grant, lost");
        d.flush(t0);
        while d.poll_transmit().is_some() {}
        assert_eq!(d.pending(0), 1);
        c.farewell(t0);
        let (_, bye) = c
            .poll_transmit()
            .expect("a farewell to a peer only sent to");
        d.handle_datagram(t0, 0, &bye).unwrap();
        assert_eq!(d.pending(0), 0);
    }

    #[test]
    fn heavy_loss_is_survived() {
        let msgs = messages(50, 4000, 9);
        let (got, _, _) = run(
            9,
            Link {
                drop_pct: 40,
                dup_pct: 10,
                max_delay_us: 2000,
            },
            &msgs,
            512,
        );
        assert_eq!(got, msgs);
    }

    #[test]
    fn the_timeout_adapts_to_the_round_trip() {
        let t0 = Instant::now();
        let cfg = ReliableConfig::default();
        let mut a = Reliable::new(0, 2, 1, cfg.clone(), t0);
        let mut b = Reliable::new(1, 2, 1, cfg, t0);
        let mut now = t0;
        for _ in 0..20 {
            a.send(1, b"ping");
            a.flush(now);
            let (_, d) = a.poll_transmit().unwrap();
            now += Duration::from_micros(100);
            b.handle_datagram(now, 0, &d).unwrap();
            b.flush(now);
            let (_, ack) = b.poll_transmit().unwrap();
            now += Duration::from_micros(100);
            a.handle_datagram(now, 1, &ack).unwrap();
        }
        let rto = a.peers[1].rto;
        assert!(
            rto < Duration::from_millis(5),
            "rto {rto:?} should follow a 200 us round trip"
        );
        assert!(rto >= ReliableConfig::default().min_rto);
    }

    /// A sender with a burst of `n` one-fragment messages in flight to a receiver, none of
    /// them acknowledged yet; returns both ends, the datagrams and the time they were sent.
    fn burst_in_flight(n: usize) -> (Reliable, Reliable, Vec<Vec<u8>>, Instant) {
        let t0 = Instant::now();
        let cfg = ReliableConfig {
            max_datagram_bytes: HEADER_BYTES + 1000,
            ..Default::default()
        };
        let mut a = Reliable::new(0, 2, 1, cfg.clone(), t0);
        let b = Reliable::new(1, 2, 1, cfg, t0);
        for i in 0..n {
            a.send(1, &vec![i as u8; 900]);
            // One datagram each (not packed together).
            a.flush(t0);
        }
        let sent: Vec<Vec<u8>> = std::iter::from_fn(|| a.poll_transmit().map(|(_, d)| d)).collect();
        assert_eq!(sent.len(), n);
        (a, b, sent, t0)
    }

    #[test]
    fn a_timeout_resends_only_the_oldest_datagram_and_a_late_ack_ends_it() {
        // The receiver got the whole burst but acknowledged late (descheduled): the timeout
        // costs one datagram, not the burst.
        let (mut a, mut b, sent, t0) = burst_in_flight(5);
        for d in &sent {
            b.handle_datagram(t0, 0, d).unwrap();
        }
        let now = a.poll_timeout().unwrap();
        a.handle_timeout(now);
        let resent: Vec<_> = std::iter::from_fn(|| a.poll_transmit()).collect();
        assert_eq!(resent.len(), 1, "only the oldest datagram is resent");
        assert_eq!(resent[0].1, sent[0]);
        b.handle_datagram(now, 0, &resent[0].1).unwrap();
        b.flush(now);
        let (_, ack) = b.poll_transmit().unwrap();
        a.handle_datagram(now, 1, &ack).unwrap();
        a.flush(now);
        assert!(a.poll_transmit().is_none(), "everything was acknowledged");
        assert_eq!(a.stats().retransmissions, 1);
        assert_eq!(a.peers[1].recover, None);
    }

    #[test]
    fn a_partial_ack_after_a_timeout_resends_the_next_lost_datagram_at_once() {
        // Datagrams 2 and 3 of 5 were lost: after the timeout, each acknowledgement that stops
        // at a lost one has it resent without waiting for another timeout.
        let (mut a, mut b, sent, t0) = burst_in_flight(5);
        for d in [&sent[0], &sent[1], &sent[4]] {
            b.handle_datagram(t0, 0, d).unwrap();
        }
        let mut now = a.poll_timeout().unwrap();
        a.handle_timeout(now);
        let mut delivered = Vec::new();
        while let Some(e) = b.poll_event() {
            if let Event::Message { bytes, .. } = e {
                delivered.push(bytes[0]);
            }
        }
        let mut resends = 0;
        while let Some((_, d)) = a.poll_transmit() {
            resends += 1;
            now += Duration::from_micros(50);
            b.handle_datagram(now, 0, &d).unwrap();
            b.flush(now);
            while let Some((_, ack)) = b.poll_transmit() {
                a.handle_datagram(now, 1, &ack).unwrap();
            }
            a.flush(now);
            while let Some(e) = b.poll_event() {
                if let Event::Message { bytes, .. } = e {
                    delivered.push(bytes[0]);
                }
            }
        }
        assert_eq!(delivered, vec![0, 1, 2, 3, 4]);
        // The oldest (a spurious resend: the ack had not come back yet), then 2 and 3.
        assert_eq!(resends, 3);
        assert!(a.peers[1].unacked.is_empty());
        assert!(
            now < t0 + a.peers[1].rto * 2,
            "recovered within one timeout, without waiting for more"
        );
    }

    #[test]
    fn a_silent_peer_is_reported_lost_after_the_timeout() {
        let t0 = Instant::now();
        let cfg = ReliableConfig {
            peer_timeout: Duration::from_secs(10),
            ..Default::default()
        };
        let mut a = Reliable::new(0, 3, 1, cfg, t0);
        a.send(2, b"hello");
        let mut now;
        let mut lost = Vec::new();
        while lost.len() < 2 {
            now = a.poll_timeout().unwrap();
            a.handle_timeout(now);
            while a.poll_transmit().is_some() {}
            while let Some(e) = a.poll_event() {
                if let Event::PeerLost {
                    peer, silent_for, ..
                } = e
                {
                    lost.push((peer, silent_for));
                }
            }
        }
        lost.sort();
        assert_eq!(lost.iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 2]);
        assert!(
            lost.iter()
                .all(|l| l.1 >= Duration::from_secs(10) && l.1 < Duration::from_secs(11))
        );
        assert_eq!(a.poll_timeout(), None, "lost peers need no more timers");
    }

    #[test]
    fn foreign_and_forged_datagrams_are_rejected() {
        let t0 = Instant::now();
        let mut a = Reliable::new(0, 2, 42, ReliableConfig::default(), t0);
        assert_eq!(
            a.handle_datagram(t0, 1, &[1, 2, 3]),
            Err(DatagramError::Short(3))
        );
        let good = datagram(42, 1, FLAG_DATA, 0, 0, b"x");
        let mut bad = good.clone();
        bad[0] = 0;
        assert!(matches!(
            a.handle_datagram(t0, 1, &bad),
            Err(DatagramError::Foreign { .. })
        ));
        assert_eq!(
            a.handle_datagram(t0, 1, &datagram(41, 1, FLAG_DATA, 0, 0, b"x")),
            Err(DatagramError::Cookie)
        );
        assert!(matches!(
            a.handle_datagram(t0, 1, &datagram(42, 0, FLAG_DATA, 0, 0, b"x")),
            Err(DatagramError::Sender { .. })
        ));
        let far = datagram(42, 1, FLAG_DATA, 1_000_000, 0, b"x");
        assert!(matches!(
            a.handle_datagram(t0, 1, &far),
            Err(DatagramError::OutOfWindow { .. })
        ));
        assert_eq!(a.stats().rejected, 5);
        assert!(a.poll_event().is_none());
        // An acknowledgement of what was never sent (the attack: messages in flight would be
        // dropped as delivered, and the job would wait for them forever) is refused and counted.
        a.send(1, b"in flight");
        a.flush(t0);
        while a.poll_transmit().is_some() {}
        let forged = datagram(42, 1, 0, 0, 1_000, b"");
        assert_eq!(
            a.handle_datagram(t0, 1, &forged),
            Err(DatagramError::ForgedAck {
                ack: 1_000,
                sent: 1
            })
        );
        assert_eq!((a.stats().rejected, a.stats().forged_acks), (6, 1));
        assert_eq!(a.pending(1), 1, "the message is still in flight");
        a.handle_datagram(t0, 1, &good).unwrap();
        assert_eq!(
            a.poll_event(),
            Some(Event::Message {
                from: 1,
                bytes: b"x".to_vec()
            })
        );
    }

    #[test]
    fn random_bytes_never_panic_the_layer() {
        let t0 = Instant::now();
        let mut a = Reliable::new(0, 4, 42, ReliableConfig::default(), t0);
        let mut rng = Rng(5);
        for i in 0..100_000u64 {
            let mut d = datagram(
                42,
                1 + (i % 3) as u16,
                (rng.below(4)) as u8,
                rng.next() as u32,
                rng.next() as u32,
                &[0; 8],
            );
            let at = rng.below(d.len() as u64) as usize;
            d[at] = rng.next() as u8;
            d.truncate(rng.below(d.len() as u64 + 1) as usize);
            let _ = a.handle_datagram(t0, 1 + (i % 3) as u16, &d);
            while a.poll_transmit().is_some() {}
            while a.poll_event().is_some() {}
        }
    }
}
