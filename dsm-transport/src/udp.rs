//! UDP: one socket per node (whatever the job size), driving the [`crate::reliable`] layer.
//!
//! Datagrams from an address that is not a peer of the job are dropped and counted before any
//! parsing; the reliability layer then checks the job cookie and the sender id. Sends never block:
//! a datagram the kernel refuses (send buffer full) is simply lost and retransmitted later, exactly
//! like one lost on the wire.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use crate::impair::{ImpairConfig, ImpairStats, Impairment};
use crate::probe::{self, Probe};
use crate::reliable::{self, Event, HEADER_BYTES, Reliable, ReliableConfig, ReliableStats};
use crate::{Body, Transport, sys};

/// A datagram that carries one whole message this large hands it on in the buffer it was read
/// into (see [`UdpTransport::poll_recv`]); anything else is copied out of it.
const OWN_BUFFER_BYTES: usize = 4096;

/// Socket buffer size asked of the kernel (it may grant less).
const SOCKET_BUFFER_BYTES: libc::c_int = 8 << 20;

/// The payload buffer of a socket whose reads may coalesce datagrams (`UDP_GRO`): the most one
/// read returns, 64 KiB.
const COALESCED_BYTES: usize = 64 << 10;

/// Counters of the UDP transport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams from addresses outside the job.
    pub unknown_source: u64,
    /// Sends the kernel refused (their datagrams are retransmitted later).
    pub send_failures: u64,
    /// Sends of several datagrams the kernel cut apart (`UDP_SEGMENT`).
    pub segmented_sends: u64,
    /// Reads that returned several datagrams (`UDP_GRO`).
    pub coalesced_reads: u64,
    /// Reads cut short (the rest lost, and retransmitted).
    pub truncated_reads: u64,
}

/// A path that carries datagrams this large whole is the machine's own (loopback: 65,507): one
/// of the largest `msg_buffer_size` goes as one packet.
const LOOPBACK_DATAGRAM: usize = 65_000;

/// The largest UDP payload a path of `mtu` bytes carries unfragmented to `to`.
fn datagram_for_mtu(to: &SocketAddr, mtu: usize) -> usize {
    let ip_header = if to.is_ipv4() { 20 } else { 40 };
    mtu.saturating_sub(ip_header + 8)
}

/// A cheap hash for the peers' addresses, looked up for every datagram (the default SipHash
/// guards against chosen keys; here a stranger's address only misses among the job's few).
#[derive(Default, Clone, Copy)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// One node's UDP endpoint.
pub struct UdpTransport {
    sock: UdpSocket,
    peers: Vec<SocketAddr>,
    by_addr: HashMap<SocketAddr, u16, BuildHasherDefault<AddrHasher>>,
    rel: Reliable,
    /// The header of the last datagram read (shorter datagrams: `head_len` bytes of it; a read
    /// of several datagrams: the first's).
    head: [u8; HEADER_BYTES],
    head_len: usize,
    /// The last read returned several datagrams of this many bytes each (the last possibly
    /// shorter), back to back in `head` and `body`.
    segment: Option<usize>,
    /// The last read cannot be taken apart (cut short, or its segment size lost): dropped
    /// whole, its datagrams resent by their sender.
    cut: bool,
    /// The payload of the last datagram read, in a buffer of its own: a large one (a grant's
    /// run) is handed on as the message, without a copy, and a new buffer takes its place.
    body: Vec<u8>,
    /// Bytes of payload a datagram may carry (a coalesced read: datagrams).
    max_body: usize,
    /// Datagrams to some peers leave several at a time, and reads may coalesce them (see
    /// [`narrow_paths`]).
    segmented: bool,
    stats: UdpStats,
    impair: Option<Impairment>,
    batch: Vec<(u16, Vec<u8>)>,
    /// The last [`UdpTransport::poll_recv`] stopped at a message, before the socket was empty.
    unread: bool,
    /// The socket is connected to the job's only other node (see [`UdpTransport::new`]).
    connected: bool,
    /// A datagram [`UdpTransport::poll_ready`] read ahead (its bytes in `head` and `body`): its
    /// sender. [`UdpTransport::poll_recv`] takes it first.
    ahead: Option<SocketAddr>,
}

/// How a node reaches each peer: datagrams as large as the path carries unfragmented (its MTU),
/// where that is less than `msg_buffer_size`, sent several at a time and read several at a time
/// when the kernel can (`UDP_SEGMENT`, `UDP_GRO`). A 64 KB datagram over a 1,500-byte Ethernet
/// is 45 IP fragments, which the receiver reassembles one by one (and loses whole when one is
/// lost); cut by the kernel into datagrams of the MTU after one `sendmsg`, and coalesced again
/// before the `recvmsg`, a run costs the two sides about what a TCP write and read of it cost.
/// Where every path carries the largest datagrams whole (the nodes of one machine, over
/// loopback), nothing changes. Returns the peers over a network (a path of a smaller MTU) with
/// the datagram their path carries, to be sent datagrams of that size or the configured one,
/// whichever is smaller, once probed, several at a time; enables coalesced reads for them; none
/// where the kernel can do neither. (A configured size below the path's is probed too: hosts
/// whose interfaces disagree on the MTU drop it as well.)
fn narrow_paths(sock: &UdpSocket, me: u16, peers: &[SocketAddr]) -> Vec<(u16, usize)> {
    let narrow: Vec<(u16, usize)> = peers
        .iter()
        .enumerate()
        .filter(|&(to, _)| to != usize::from(me))
        .filter_map(|(to, addr)| match sys::path_mtu(addr) {
            Ok(mtu) => Some((to as u16, datagram_for_mtu(addr, mtu))),
            Err(e) => {
                log::debug!("the path MTU to {addr} is unknown ({e})");
                None
            }
        })
        .filter(|&(_, datagram)| datagram < LOOPBACK_DATAGRAM)
        .collect();
    if narrow.is_empty() {
        return narrow;
    }
    let fd = sock.as_raw_fd();
    // Datagrams of a path's MTU one system call each are slower than IP fragments: without
    // segmentation the configured size stays.
    if !sys::udp_segmentation(fd) {
        log::debug!("no UDP segmentation here: datagrams larger than a path's MTU are fragmented");
        return Vec::new();
    }
    if let Err(e) = sys::enable_udp_gro(fd) {
        log::debug!("UDP_GRO refused ({e}): datagrams larger than a path's MTU are fragmented");
        return Vec::new();
    }
    narrow
}

/// Binds a non-blocking UDP socket with large buffers at `addr` (port 0: any free port).
pub fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(addr)?;
    sock.set_nonblocking(true)?;
    sys::set_socket_buffers(sock.as_raw_fd(), SOCKET_BUFFER_BYTES);
    Ok(sock)
}

impl UdpTransport {
    /// The transport of node `me`, whose peers (node `i` at `peers[i]`) share `cookie`.
    pub fn new(
        sock: UdpSocket,
        me: u16,
        peers: Vec<SocketAddr>,
        cookie: u64,
        mut cfg: ReliableConfig,
        now: Instant,
    ) -> UdpTransport {
        // Keep a window of large datagrams within what the receivers can buffer (every node asks
        // for the same buffers; the kernel reports twice what it counts against the limit).
        if let Some(rcvbuf) = sys::socket_receive_buffer(sock.as_raw_fd()) {
            cfg.window_bytes = cfg.window_bytes.min(rcvbuf / 2).max(cfg.max_datagram_bytes);
        }
        let by_addr = peers
            .iter()
            .enumerate()
            .map(|(i, a)| (*a, i as u16))
            .collect();
        let max = cfg.max_datagram_bytes;
        let narrow = narrow_paths(&sock, me, &peers);
        if !narrow.is_empty() {
            // Datagrams of a path's MTU that arrive one by one (a card without GRO) cost the
            // receive buffer twice their size or more: half the window's bytes.
            cfg.window_bytes = (cfg.window_bytes / 2).max(cfg.max_datagram_bytes);
        }
        let mut rel = Reliable::new(me, peers.len() as u16, cookie, cfg, now);
        for &(to, datagram) in &narrow {
            rel.probe_path(to, datagram, true, now);
        }
        let segmented = !narrow.is_empty();
        // A node with one peer connects its socket to it: the kernel then keeps the route
        // instead of looking it up for every datagram (a loopback `sendto` 0.2 us less, as much
        // for the reply: 8.9 -> 8.65 us for the minimal remote fault), and drops strangers'
        // datagrams itself. With more peers one socket serves them all, unconnected.
        let connected = peers.len() == 2
            && sock
                .connect(peers[usize::from(1 - me.min(1))])
                .inspect_err(|e| log::debug!("UDP connect to the peer failed: {e}"))
                .is_ok();
        UdpTransport {
            sock,
            peers,
            by_addr,
            rel,
            head: [0; HEADER_BYTES],
            head_len: 0,
            segment: None,
            cut: false,
            body: Vec::new(),
            segmented,
            max_body: if segmented {
                max.max(COALESCED_BYTES)
            } else {
                max.max(2048)
            } - HEADER_BYTES,
            stats: UdpStats::default(),
            impair: None,
            batch: Vec::new(),
            unread: false,
            connected,
            ahead: None,
        }
    }

    /// Mistreats outgoing datagrams from now on (see [`crate::impair`]).
    pub fn impair(&mut self, cfg: ImpairConfig, salt: u64) {
        self.impair = Some(Impairment::new(cfg, salt));
    }

    /// What the impairment did, if any.
    pub fn impair_stats(&self) -> Option<&ImpairStats> {
        self.impair.as_ref().map(Impairment::stats)
    }

    /// The descriptor to wait on for incoming datagrams.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Queues a whole message for `to`; [`UdpTransport::flush`] sends it.
    pub fn send(&mut self, to: u16, msg: &[u8]) {
        self.rel.send(to, msg);
    }

    /// Sends what the window allows of the queued messages (packing small ones together) and
    /// the acknowledgements due.
    pub fn flush(&mut self, now: Instant) {
        // With datagrams possibly still unread, acknowledgements wait for them (see
        // `poll_recv`) unless they ride on data.
        if self.unread {
            self.rel.flush_data(now);
        } else {
            self.rel.flush(now);
        }
        self.transmit();
    }

    /// Reads the datagrams waiting on the socket, up to the first that completes a message (for
    /// the caller to handle before it reads on); returns how many were read.
    pub fn poll_recv(&mut self, now: Instant) -> usize {
        let mut n = 0;
        loop {
            let read = match self.ahead.take() {
                Some(d) => Ok(d),
                None => self.recv_datagram(),
            };
            match read {
                Ok(_) if self.cut => n += 1,
                Ok(src) => {
                    n += 1;
                    match self.by_addr.get(&src) {
                        Some(&from) if self.segment.is_some() => {
                            self.handle_coalesced(now, from, src);
                            if self.rel.has_events() {
                                self.unread = true;
                                break;
                            }
                        }
                        Some(&from) => {
                            let head = &self.head[..self.head_len];
                            // A large whole message goes on in its buffer; anything else is
                            // copied from it (an acknowledgement, a packed datagram's records,
                            // a fragment), and the buffer read into again.
                            let whole = reliable::carries_one_message(head);
                            let body = if whole && self.body.len() >= OWN_BUFFER_BYTES {
                                Cow::Owned(std::mem::take(&mut self.body))
                            } else {
                                Cow::Borrowed(&self.body[..])
                            };
                            if let Err(e) = self.rel.handle_datagram_parts(now, from, head, body) {
                                log::debug!("dropped datagram from {src}: {e}");
                            }
                            // A message to handle: the caller handles it (and answers) before
                            // the next read, which would most often find nothing (an EAGAIN
                            // `recvfrom` is 0.15-0.2 us on each side of a remote fault).
                            if self.rel.has_events() {
                                self.unread = true;
                                break;
                            }
                        }
                        None => self.stats.unknown_source += 1,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Everything is read: the next flush acknowledges it all, with one pure
                    // acknowledgement per peer where no data carries it.
                    self.unread = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ECONNREFUSED from an ICMP of an earlier send: the peer's timeout will tell.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => {
                    log::warn!("UDP receive failed: {e}");
                    break;
                }
            }
        }
        // Fast retransmissions the acks called for go out now, and an acknowledgement owed for
        // half the sender's window (see `Reliable`); any other acknowledgement of a message
        // read waits for the next flush, which the caller makes after handling it, so it rides
        // on the reply (a pure ack sent here cost every remote fault a sendto on each side,
        // before the reply).
        self.transmit();
        n
    }

    /// Whether a datagram waits: reads it ahead (one `recvfrom`, as the first of
    /// [`UdpTransport::poll_recv`] would), for the next `poll_recv` to take first. A spinning
    /// caller polls this between its passes, so a datagram is read as soon as it is in.
    pub fn poll_ready(&mut self) -> bool {
        if self.ahead.is_some() {
            return true;
        }
        match self.recv_datagram() {
            Ok(d) => {
                self.ahead = Some(d);
                true
            }
            // Everything is read (as when `poll_recv` finds the socket empty).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.unread = false;
                false
            }
            // The error of an earlier send (ECONNREFUSED), which the read consumed: the peer's
            // timeout will tell.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionRefused
                ) =>
            {
                false
            }
            // Anything else: `poll_recv` meets it again and reports it.
            Err(_) => true,
        }
    }

    /// Reads the next datagram (or datagrams, coalesced) into `head` and `body`: its sender.
    fn recv_datagram(&mut self) -> io::Result<SocketAddr> {
        let (fd, max) = (self.sock.as_raw_fd(), self.max_body);
        let r = sys::recv_split(fd, &mut self.head, &mut self.body, max, self.segmented)?;
        self.head_len = r.len.min(HEADER_BYTES);
        self.segment = r.segment.filter(|&s| s < r.len);
        // A datagram cut short would be taken for a shorter one (a fragment carries no length
        // of its own), and a read whose segments are shorter than a header is none of ours.
        self.cut = r.truncated || self.segment.is_some_and(|s| s < HEADER_BYTES);
        if self.cut {
            self.stats.truncated_reads += 1;
            log::debug!("dropped a read from {} cut at {} bytes", r.from, r.len);
        }
        probe::report(Probe::Received);
        Ok(r.from)
    }

    /// A segmented send to `to` was refused with `e`. Where the path's MTU fell (EMSGSIZE;
    /// EINVAL on kernels before 5.19 or so), datagrams of the new size from now on (those cut
    /// before go one by one, fragmented by IP); otherwise (EIO: no checksum offload on the
    /// route, or an MTU that cannot be followed) `to`'s datagrams go one by one from now on
    /// (reads still coalesce what peers segment).
    fn segmentation_refused(&mut self, to: u16, e: &io::Error) {
        let addr = self.peers[usize::from(to)];
        let now = self.rel.fragment_bytes(to) + HEADER_BYTES;
        let fell = matches!(e.raw_os_error(), Some(libc::EMSGSIZE | libc::EINVAL))
            .then(|| sys::path_mtu(&addr).ok())
            .flatten()
            .map(|mtu| self.rel.path_datagram(datagram_for_mtu(&addr, mtu)))
            .filter(|&datagram| datagram < now);
        match fell {
            Some(datagram) => {
                log::warn!(
                    "the path MTU to {addr} fell: datagrams of {datagram} bytes, not {now}, from now on"
                );
                self.rel.set_path(to, datagram, true);
            }
            None => {
                log::warn!(
                    "UDP segmentation to {addr} refused ({e}): its datagrams go one at a time"
                );
                self.rel.stop_segmenting(to);
            }
        }
    }

    /// The datagrams of a coalesced read from `from` (each `segment` bytes, the last possibly
    /// shorter), handled in order, each copied from the read's buffer where it is kept.
    fn handle_coalesced(&mut self, now: Instant, from: u16, src: SocketAddr) {
        let Some(segment) = self.segment else { return };
        self.stats.coalesced_reads += 1;
        // The first datagram: the header read apart, then its payload at the body's start.
        let first = segment.saturating_sub(HEADER_BYTES).min(self.body.len());
        let (payload, rest) = self.body.split_at(first);
        let later = rest
            .chunks(segment)
            .map(|d| d.split_at(d.len().min(HEADER_BYTES)));
        for (head, payload) in std::iter::once((&self.head[..self.head_len], payload)).chain(later)
        {
            let payload = Cow::Borrowed(payload);
            if let Err(e) = self.rel.handle_datagram_parts(now, from, head, payload) {
                log::debug!("dropped datagram from {src}: {e}");
            }
        }
    }

    /// The next delivered message or lost peer.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.rel.poll_event()
    }

    /// When [`UdpTransport::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let held = self.impair.as_ref().and_then(Impairment::next_release);
        match (self.rel.poll_timeout(), held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Retransmissions, heartbeats, peer-loss detection.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.rel.handle_timeout(now);
        self.transmit();
    }

    /// Counters of the reliability layer.
    pub fn reliable_stats(&self) -> &ReliableStats {
        self.rel.stats()
    }

    /// Counters of the socket layer.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// Fragments queued or unacknowledged to `to`.
    pub fn pending(&self, to: u16) -> usize {
        self.rel.pending(to)
    }

    /// The address of node `n`.
    pub fn peer_addr(&self, n: u16) -> SocketAddr {
        self.peers[usize::from(n)]
    }

    fn transmit(&mut self) {
        let Some(imp) = &mut self.impair else {
            // Each datagram is gathered from its header and the payload kept for retransmission.
            let (fd, peers, failures) = (self.sock.as_raw_fd(), &self.peers, &mut self.stats);
            let connected = self.connected;
            if !self.segmented {
                self.rel.transmit(|to, parts| {
                    probe::report(Probe::SendStart);
                    let addr = (!connected).then(|| &peers[usize::from(to)]);
                    if sys::send_gathered(fd, addr, parts, None).is_err() {
                        failures.send_failures += 1;
                    }
                });
                return;
            }
            let mut refused: Vec<(u16, io::Error)> = Vec::new();
            let (segments, bytes) = (sys::MAX_SEGMENTS, sys::MAX_SEGMENTED_BYTES);
            self.rel
                .transmit_segmented(segments, bytes, |to, parts, segment| {
                    probe::report(Probe::SendStart);
                    let addr = (!connected).then(|| &peers[usize::from(to)]);
                    match sys::send_gathered(fd, addr, parts, segment) {
                        Ok(_) if segment.is_some() => failures.segmented_sends += 1,
                        Ok(_) => {}
                        // A full buffer, a peer's port closed: lost, as on the wire.
                        Err(e) if segment.is_none() || transient(&e) => failures.send_failures += 1,
                        // The kernel will not segment here (no checksum offload on the route, an
                        // MTU lowered since): these go one by one, and see below.
                        Err(e) => {
                            if !refused.iter().any(|(t, _)| *t == to) {
                                refused.push((to, e));
                            }
                            for d in parts.chunks(3) {
                                if sys::send_gathered(fd, addr, d, None).is_err() {
                                    failures.send_failures += 1;
                                }
                            }
                        }
                    }
                });
            for (to, e) in refused {
                self.segmentation_refused(to, &e);
            }
            return;
        };
        // Impaired: datagrams of their own, which the impairment may hold back.
        let mut batch = std::mem::take(&mut self.batch);
        let now = Instant::now();
        imp.release(now, &mut batch);
        while let Some((to, d)) = self.rel.poll_transmit() {
            imp.outgoing(now, to, d, &mut batch);
        }
        for (to, d) in batch.drain(..) {
            let addr = (!self.connected).then(|| &self.peers[usize::from(to)]);
            if sys::send_gathered(self.sock.as_raw_fd(), addr, &[&d], None).is_err() {
                self.stats.send_failures += 1;
            }
        }
        self.batch = batch;
    }
}

/// A send error that says nothing about segmentation: the datagrams are lost as on the wire (a
/// full buffer, a peer's port closed, a firewall's drop: EPERM). The kernel refuses to segment
/// with EIO (no checksum offload on the route), EINVAL or EMSGSIZE (segments over the MTU or too
/// many), EOPNOTSUPP.
fn transient(e: &io::Error) -> bool {
    !matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::EOPNOTSUPP)
    )
}

impl Transport for UdpTransport {
    fn name(&self) -> &'static str {
        "udp"
    }
    fn retransmissions(&self) -> u64 {
        self.reliable_stats().retransmissions
    }
    fn rejected(&self) -> u64 {
        self.reliable_stats().rejected + self.stats.unknown_source
    }
    fn fd(&self) -> RawFd {
        UdpTransport::fd(self)
    }
    fn farewell(&mut self, now: Instant) {
        // Datagrams an impairment holds back are on the network, not in this process: they go
        // now rather than die with it (held farewell acknowledgements left a peer lingering
        // for its whole `peer_timeout_ms` under `reorder`).
        if let Some(imp) = &mut self.impair {
            imp.leave();
        }
        self.rel.farewell(now);
        self.transmit();
    }
    fn send(&mut self, _now: Instant, to: u16, msg: &[u8]) {
        UdpTransport::send(self, to, msg);
    }
    fn send_owned(&mut self, _now: Instant, to: u16, msg: Vec<u8>) {
        self.rel.send_owned(to, msg);
    }
    fn send_parts(&mut self, _now: Instant, to: u16, head: Vec<u8>, body: Body) {
        self.rel.send_parts(to, head, body);
    }
    fn flush(&mut self, now: Instant) {
        UdpTransport::flush(self, now);
    }
    fn poll_recv(&mut self, now: Instant) -> usize {
        UdpTransport::poll_recv(self, now)
    }
    fn poll_ready(&mut self) -> bool {
        UdpTransport::poll_ready(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        UdpTransport::poll_event(self)
    }
    fn unread(&self) -> bool {
        self.unread
    }
    fn poll_timeout(&self) -> Option<Instant> {
        UdpTransport::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: Instant) {
        UdpTransport::handle_timeout(self, now);
    }
    fn pending(&self, to: u16) -> usize {
        UdpTransport::pending(self, to)
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let r = self.reliable_stats();
        let mut v = vec![
            ("datagrams sent", r.datagrams_sent),
            ("datagrams received", r.datagrams_received),
            ("retransmissions", r.retransmissions),
            (
                "retransmissions from selective acks",
                r.sack_retransmissions,
            ),
            ("duplicates dropped", r.duplicates),
            ("packed datagrams", r.packed),
            ("pure acks", r.acks_sent),
            ("rejected datagrams", r.rejected + self.stats.unknown_source),
            ("segmented sends", self.stats.segmented_sends),
            ("coalesced reads", self.stats.coalesced_reads),
            ("reads cut short", self.stats.truncated_reads),
            ("forged acknowledgements", r.forged_acks),
        ];
        if let Some(i) = self.impair_stats() {
            v.push(("impair: dropped", i.dropped));
            v.push(("impair: duplicated", i.duplicated));
            v.push(("impair: delayed", i.delayed));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pair() -> (UdpTransport, UdpTransport) {
        let a = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let peers = vec![a.local_addr().unwrap(), b.local_addr().unwrap()];
        let now = Instant::now();
        let cfg = ReliableConfig::default();
        (
            UdpTransport::new(a, 0, peers.clone(), 9, cfg.clone(), now),
            UdpTransport::new(b, 1, peers, 9, cfg, now),
        )
    }

    #[test]
    fn a_leaving_node_sends_what_its_impairment_holds_back() {
        let (mut a, mut b) = pair();
        // Every datagram of b's held back for up to 10 s: reordered, never lost.
        b.impair(
            ImpairConfig::parse("reorder=100,delay_us=10000000,seed=1").unwrap(),
            1,
        );
        a.send(1, b"last words");
        a.flush(Instant::now());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !matches!(b.poll_event(), Some(Event::Message { .. })) {
            assert!(Instant::now() < deadline, "nothing arrived");
            b.poll_recv(Instant::now());
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_eq!(a.pending(1), 1, "not acknowledged yet");
        // b leaves: its acknowledgements go now, not when their holds end.
        b.farewell(Instant::now());
        let deadline = Instant::now() + Duration::from_secs(5);
        while a.pending(1) > 0 {
            assert!(
                Instant::now() < deadline,
                "the leaving node's acknowledgement stayed held"
            );
            a.poll_recv(Instant::now());
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn recv_one(t: &mut UdpTransport, other: &mut UdpTransport) -> Vec<u8> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            assert!(Instant::now() < deadline, "nothing arrived");
            t.poll_recv(Instant::now());
            t.flush(Instant::now());
            other.poll_recv(Instant::now());
            other.flush(Instant::now());
            if let Some(Event::Message { bytes, .. }) = t.poll_event() {
                return bytes;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    #[test]
    fn messages_small_and_larger_than_a_datagram_cross_loopback_in_order() {
        let (mut a, mut b) = pair();
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        a.send(1, b"first");
        a.send(1, &big);
        a.send(1, b"");
        assert_eq!(recv_one(&mut b, &mut a), b"first");
        assert_eq!(recv_one(&mut b, &mut a), big);
        assert_eq!(recv_one(&mut b, &mut a), b"");
    }

    #[test]
    fn small_messages_sent_together_share_datagrams() {
        let (mut a, mut b) = pair();
        let msgs: Vec<Vec<u8>> = (0..200u32).map(|i| vec![i as u8; 4100]).collect();
        for m in &msgs {
            a.send(1, m);
        }
        a.flush(Instant::now());
        for m in &msgs {
            assert_eq!(&recv_one(&mut b, &mut a), m);
        }
        let r = a.reliable_stats();
        // 15 pages' worth per 65,000-byte datagram: 14 datagrams, not 200.
        assert!(r.datagrams_sent < 40, "{r:?}");
        assert!(r.packed >= 13, "{r:?}");
    }

    #[test]
    fn a_read_stops_at_a_message_and_one_ack_covers_the_burst() {
        let (mut a, mut b) = pair();
        // Five datagrams (messages too large to pack together), all waiting before b reads.
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 40_000]).collect();
        for m in &msgs {
            a.send(1, m);
        }
        a.flush(Instant::now());
        assert_eq!(a.reliable_stats().datagrams_sent, 5);
        std::thread::sleep(Duration::from_millis(20));
        for m in &msgs {
            // Each read stops at the message it completed; b handles it and answers nothing.
            assert_eq!(b.poll_recv(Instant::now()), 1);
            match b.poll_event() {
                Some(Event::Message { bytes, .. }) => assert_eq!(&bytes, m),
                other => panic!("expected a message, got {other:?}"),
            }
            assert!(b.poll_event().is_none());
            b.flush(Instant::now());
            assert_eq!(
                b.reliable_stats().acks_sent,
                0,
                "acknowledged before the burst was read"
            );
        }
        // Once a read finds the socket empty, the next flush acknowledges all five at once.
        assert_eq!(b.poll_recv(Instant::now()), 0);
        assert_eq!(b.reliable_stats().acks_sent, 0);
        b.flush(Instant::now());
        assert_eq!(b.reliable_stats().acks_sent, 1);
        std::thread::sleep(Duration::from_millis(20));
        a.poll_recv(Instant::now());
        assert_eq!(a.pending(1), 0, "the one acknowledgement covers the burst");
    }

    #[test]
    fn a_datagram_read_ahead_is_taken_first_and_an_empty_poll_counts_all_read() {
        let (mut a, mut b) = pair();
        assert!(!b.poll_ready(), "nothing sent yet");
        // Too large to share a datagram.
        a.send(1, &[1u8; 40_000]);
        a.send(1, &[7u8; 40_000]);
        a.flush(Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        // Read ahead; asking again neither reads nor loses it.
        assert!(b.poll_ready());
        assert!(b.poll_ready());
        assert_eq!(b.poll_recv(Instant::now()), 1);
        match b.poll_event() {
            Some(Event::Message { bytes, .. }) => assert_eq!(bytes, vec![1u8; 40_000]),
            other => panic!("expected the first message, got {other:?}"),
        }
        assert!(b.unread(), "stopped at a message: more may wait");
        assert!(b.poll_ready(), "the second datagram");
        assert_eq!(b.poll_recv(Instant::now()), 1);
        match b.poll_event() {
            Some(Event::Message { bytes, .. }) => assert_eq!(bytes, vec![7u8; 40_000]),
            other => panic!("expected the second message, got {other:?}"),
        }
        // A poll that finds the socket empty counts everything as read: the next flush
        // acknowledges both with one pure acknowledgement.
        assert!(!b.poll_ready());
        assert!(!b.unread());
        b.flush(Instant::now());
        assert_eq!(b.reliable_stats().acks_sent, 1);
        std::thread::sleep(Duration::from_millis(20));
        a.poll_recv(Instant::now());
        assert_eq!(a.pending(1), 0);
    }

    fn job(n: u16) -> Vec<UdpTransport> {
        let socks: Vec<UdpSocket> = (0..n)
            .map(|_| bind("127.0.0.1:0".parse().unwrap()).unwrap())
            .collect();
        let peers: Vec<SocketAddr> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
        socks
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let cfg = ReliableConfig::default();
                UdpTransport::new(s, i as u16, peers.clone(), 9, cfg, Instant::now())
            })
            .collect()
    }

    #[test]
    fn datagrams_from_strangers_are_counted_and_dropped() {
        // Three nodes: one unconnected socket serves both peers, and checks each sender.
        let mut job = job(3);
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger
            .send_to(b"GETP page 0 please", job[0].peer_addr(0))
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        job[0].poll_recv(Instant::now());
        assert_eq!(job[0].stats().unknown_source, 1);
        assert!(job[0].poll_event().is_none());
    }

    #[test]
    fn two_nodes_connect_their_sockets_and_the_kernel_drops_strangers() {
        let (mut a, mut b) = pair();
        assert!(a.connected && b.connected);
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger
            .send_to(b"GETP page 0 please", a.peer_addr(0))
            .unwrap();
        a.send(1, b"from the peer");
        a.flush(Instant::now());
        assert_eq!(recv_one(&mut b, &mut a), b"from the peer");
        b.send(0, b"and back");
        b.flush(Instant::now());
        assert_eq!(recv_one(&mut a, &mut b), b"and back");
        // The stranger's datagram never reached the socket.
        assert_eq!(a.stats().unknown_source, 0);
        assert!(a.poll_event().is_none());
        assert_eq!(a.stats().send_failures + b.stats().send_failures, 0);
    }
}
