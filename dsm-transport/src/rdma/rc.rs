//! RDMA RC: one reliable connection per pair of nodes.
//!
//! - Receives come from one shared receive queue of fixed-size registered buffers, reposted in
//!   one chained call per poll. A peer whose receive finds no buffer is told to retry by the
//!   NIC (RNR, retried without limit): that is the back-pressure.
//! - A message travels as chunks of at most one buffer, each with a one-byte header (`1`: more
//!   follows); RC delivers in order per connection, so reassembly is a byte append.
//! - Sends are queued by [`RcTransport::send`] and posted by [`RcTransport::flush`] as one
//!   chained work-request list per peer (one doorbell for a batch), within the send queue's depth.
//! - One-sided reads ([`Transport::read`]): memory a node exports is registered for remote
//!   read and announced over the control mesh; a peer reads it with RDMA READ into a registered
//!   bounce buffer and gets [`Event::Read`].
//! - Completions through a completion channel: the runtime waits on [`Transport::fd`] after a
//!   short bounded poll.

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::verbs::{
    Buf, BufferPool, Completion, CompletionQueue, Device, Endpoint, MemoryRegion, QpType,
    QueuePair, SendOp, SharedReceiveQueue,
};
use super::{
    Control, Export, RdmaConfig, RdmaError, RdmaStats, TAG_ENDPOINT, TAG_EXPORT, TAG_READY,
    combined_epoll, decode_endpoint, decode_export, encode_endpoint, encode_export,
};
use crate::reliable::{Event, LostCause, MAX_MESSAGE_BYTES};
use crate::sys::Epoll;
use crate::{ReadRange, Transport};

const NAME: &str = "rdma-rc";
/// Bytes per send/receive buffer (a page grant and its header fit in one).
pub const CHUNK_BYTES: usize = 8192;
const RECV_BUFFERS: usize = 512;
const SEND_BUFFERS: usize = 512;
/// Send-queue depth per connection (sends and reads in flight).
const SEND_DEPTH: usize = 128;
/// Bytes per read bounce buffer: the longest one-sided read.
pub const READ_BYTES: usize = 64 * 1024;
const READ_BUFFERS: usize = 64;

const KIND_SEND: u64 = 1;
const KIND_RECV: u64 = 2;
const KIND_READ: u64 = 3;

fn wr_id(kind: u64, peer: u16, slot: usize) -> u64 {
    (kind << 56) | (u64::from(peer) << 32) | slot as u64
}

fn wr_parts(id: u64) -> (u64, u16, usize) {
    (id >> 56, (id >> 32) as u16, (id & 0xffff_ffff) as usize)
}

#[derive(Default)]
struct Peer {
    /// Whole messages not yet posted, with how much of the first is posted.
    backlog: VecDeque<Vec<u8>>,
    sent_of_first: usize,
    /// Reads queued for the next post: (slot, remote address, rkey, length).
    reads: Vec<(usize, u64, u32, usize)>,
    /// Work requests posted and not completed.
    in_flight: usize,
    /// The message being reassembled.
    partial: Vec<u8>,
    /// Exports of this peer.
    exports: Vec<Export>,
    lost: bool,
}

/// A node's RC endpoint.
pub struct RcTransport {
    // Queue pairs first: they are destroyed before the queues and buffers they use.
    qps: Vec<Option<QueuePair>>,
    srq: SharedReceiveQueue,
    cq: CompletionQueue,
    exports: Vec<MemoryRegion>,
    send_pool: BufferPool,
    recv_pool: BufferPool,
    read_pool: BufferPool,
    dev: Arc<Device>,
    ctl: Control,
    epoll: Epoll,
    qpn_peer: HashMap<u32, u16>,
    peers: Vec<Peer>,
    free_send: Vec<usize>,
    free_read: Vec<usize>,
    /// Read slot -> (peer, token, length).
    reads: HashMap<usize, (u16, u64, usize)>,
    repost: Vec<usize>,
    events: VecDeque<Event>,
    completions: Vec<Completion>,
    stats: RdmaStats,
}

impl RcTransport {
    /// Connects node `me` to every peer (`peers[i]` is node `i`'s control address, `listener`
    /// ours): TCP mesh first, then one RC connection per peer.
    pub fn establish(
        listener: TcpListener,
        me: u16,
        peers: &[SocketAddr],
        cookie: u64,
        cfg: &RdmaConfig,
    ) -> Result<RcTransport, RdmaError> {
        let verbs = |source| RdmaError::Verbs {
            transport: NAME,
            source,
        };
        // The device first: a node without RDMA fails before anyone waits on its connections.
        let dev = Device::open(cfg.device.as_deref(), cfg.port, cfg.gid_index).map_err(verbs)?;
        let n = peers.len();
        let cq = CompletionQueue::new(&dev, RECV_BUFFERS + n * SEND_DEPTH + 64).map_err(verbs)?;
        let mut srq = SharedReceiveQueue::new(&dev, RECV_BUFFERS).map_err(verbs)?;
        let send_pool = BufferPool::new(&dev, SEND_BUFFERS, CHUNK_BYTES).map_err(verbs)?;
        let recv_pool = BufferPool::new(&dev, RECV_BUFFERS, CHUNK_BYTES).map_err(verbs)?;
        let read_pool = BufferPool::new(&dev, READ_BUFFERS, READ_BYTES).map_err(verbs)?;
        let mut qps = Vec::with_capacity(n);
        for p in 0..n {
            qps.push(if p == usize::from(me) {
                None
            } else {
                Some(
                    QueuePair::new(&dev, QpType::Rc, &cq, Some(&srq), SEND_DEPTH, 0)
                        .map_err(verbs)?,
                )
            });
        }
        let recvs: Vec<(u64, Buf<'_>)> = (0..RECV_BUFFERS)
            .map(|s| (wr_id(KIND_RECV, 0, s), recv_buf(&recv_pool, s)))
            .collect();
        srq.post_recv(&recvs).map_err(verbs)?;

        let mut ctl = Control::establish(NAME, listener, me, peers, cookie, cfg.tcp.clone())?;
        let psn = |qpn: u32| (qpn.wrapping_mul(2_654_435_761) ^ cookie as u32) & 0xff_ffff;
        for (p, qp) in qps.iter().enumerate() {
            if let Some(qp) = qp {
                let ep = Endpoint {
                    gid: dev.gid(),
                    qpn: qp.qpn(),
                    psn: psn(qp.qpn()),
                };
                ctl.send(p as u16, &encode_endpoint(&ep, dev.active_mtu()));
            }
        }
        let timeout = cfg.tcp.connect_timeout;
        let infos = ctl.gather(NAME, TAG_ENDPOINT, timeout)?;
        let mut qpn_peer = HashMap::new();
        for (p, qp) in qps.iter().enumerate() {
            let Some(qp) = qp else { continue };
            let Some((remote, mtu)) = decode_endpoint(&infos[p]) else {
                return Err(bad_setup(format!(
                    "node {p} sent malformed connection data"
                )));
            };
            qp.connect_rc(&remote, psn(qp.qpn()), mtu.min(dev.active_mtu()))
                .map_err(verbs)?;
            qpn_peer.insert(qp.qpn(), p as u16);
        }
        ctl.broadcast(&[TAG_READY]);
        ctl.gather(NAME, TAG_READY, timeout)?;
        let epoll = combined_epoll(&[ctl.fd(), cq.fd()]).map_err(|source| RdmaError::Setup {
            transport: NAME,
            source,
        })?;
        log::debug!(
            "{NAME}: node {me} on {} port {} GID index {}, MTU {}",
            dev.name(),
            dev.port(),
            dev.gid_index(),
            dev.active_mtu()
        );
        Ok(RcTransport {
            qps,
            srq,
            cq,
            exports: Vec::new(),
            free_send: (0..send_pool.count()).rev().collect(),
            free_read: (0..read_pool.count()).rev().collect(),
            send_pool,
            recv_pool,
            read_pool,
            dev,
            ctl,
            epoll,
            qpn_peer,
            peers: (0..n).map(|_| Peer::default()).collect(),
            reads: HashMap::new(),
            repost: Vec::new(),
            events: VecDeque::new(),
            completions: Vec::with_capacity(64),
            stats: RdmaStats::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> &RdmaStats {
        &self.stats
    }

    fn lose(&mut self, peer: u16, cause: LostCause) {
        if let Some(p) = self.peers.get_mut(usize::from(peer)) {
            if !p.lost {
                p.lost = true;
                self.events.push_back(Event::PeerLost {
                    peer,
                    silent_for: Duration::ZERO,
                    cause,
                });
            }
        }
    }

    fn handle_control(&mut self, now: Instant, force: bool) {
        for (from, m) in self.ctl.poll(now, Duration::from_millis(1), force) {
            match (m.first(), decode_export(&m)) {
                (Some(&TAG_EXPORT), Some(e)) => self.peers[usize::from(from)].exports.push(e),
                (Some(&TAG_READY), _) => {}
                _ => {
                    self.stats.rejected += 1;
                    log::warn!("{NAME}: malformed control message from node {from}");
                }
            }
        }
        // Reported, not acted on: the runtime ends the job; the connection itself is only
        // abandoned when the NIC says it is broken.
        while let Some(ev) = self.ctl.poll_lost() {
            self.events.push_back(ev);
        }
    }

    fn handle_completions(&mut self, now: Instant) -> usize {
        let mut done = std::mem::take(&mut self.completions);
        if let Err(e) = self.cq.drain(&mut done) {
            log::warn!("{NAME}: {e}");
        }
        for c in &done {
            self.complete(now, c);
        }
        let n = done.len();
        self.completions = done;
        n
    }

    fn complete(&mut self, _now: Instant, c: &Completion) {
        let (kind, peer, slot) = wr_parts(c.wr_id);
        match kind {
            KIND_RECV => {
                self.repost.push(slot);
                let Some(&from) = self.qpn_peer.get(&c.qp_num) else {
                    self.stats.rejected += 1;
                    return;
                };
                if let Err(why) = c.status {
                    log::debug!("{NAME}: receive from node {from} failed: {why}");
                    self.lose(from, LostCause::RdmaBroken);
                    return;
                }
                let len = c.byte_len as usize;
                if len == 0 || len > CHUNK_BYTES {
                    self.stats.rejected += 1;
                    return;
                }
                let mut head = Vec::with_capacity(1);
                self.recv_pool.read(slot, 0, 1, &mut head);
                let p = &mut self.peers[usize::from(from)];
                if p.partial.len() + len - 1 > MAX_MESSAGE_BYTES {
                    log::debug!(
                        "{NAME}: node {from} sent a message over {MAX_MESSAGE_BYTES} bytes"
                    );
                    p.partial = Vec::new();
                    self.lose(from, LostCause::BadFrame);
                    return;
                }
                self.recv_pool.read(slot, 1, len - 1, &mut p.partial);
                if head[0] & 1 == 0 {
                    let bytes = std::mem::take(&mut p.partial);
                    self.events.push_back(Event::Message { from, bytes });
                }
            }
            KIND_SEND | KIND_READ => {
                if let Some(p) = self.peers.get_mut(usize::from(peer)) {
                    p.in_flight = p.in_flight.saturating_sub(1);
                }
                if kind == KIND_SEND {
                    self.free_send.push(slot);
                } else if let Some((from, token, len)) = self.reads.remove(&slot) {
                    self.free_read.push(slot);
                    if c.status.is_ok() {
                        let mut bytes = Vec::new();
                        self.read_pool.read(slot, 0, len, &mut bytes);
                        self.stats.reads += 1;
                        self.stats.read_bytes += len as u64;
                        self.events.push_back(Event::Read { from, token, bytes });
                    }
                }
                if let Err(why) = c.status {
                    log::debug!("{NAME}: work request to node {peer} failed: {why}");
                    self.lose(peer, LostCause::RdmaBroken);
                }
            }
            _ => self.stats.rejected += 1,
        }
    }

    fn repost_receives(&mut self) {
        if self.repost.is_empty() {
            return;
        }
        let bufs: Vec<(u64, Buf<'_>)> = self
            .repost
            .iter()
            .map(|&s| (wr_id(KIND_RECV, 0, s), recv_buf(&self.recv_pool, s)))
            .collect();
        if let Err(e) = self.srq.post_recv(&bufs) {
            log::warn!("{NAME}: reposting receives: {e}");
        }
        self.repost.clear();
    }

    /// Posts what is queued, one chained list per peer.
    pub fn flush(&mut self) {
        for p in 0..self.peers.len() {
            self.flush_peer(p);
        }
    }

    fn flush_peer(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        if peer.lost || (peer.backlog.is_empty() && peer.reads.is_empty()) {
            return;
        }
        let Some(qp) = self.qps[p].as_mut() else {
            return;
        };
        let mut ops: Vec<(u64, SendOp<'_>)> = Vec::new();
        for (slot, remote_addr, rkey, len) in peer.reads.drain(..) {
            ops.push((
                wr_id(KIND_READ, p as u16, slot),
                SendOp::Read {
                    buf: Buf {
                        pool: &self.read_pool,
                        slot,
                        offset: 0,
                        len,
                    },
                    remote_addr,
                    rkey,
                },
            ));
        }
        while peer.in_flight + ops.len() < SEND_DEPTH {
            let Some(msg) = peer.backlog.front() else {
                break;
            };
            let Some(slot) = self.free_send.pop() else {
                break;
            };
            let from = peer.sent_of_first;
            let take = (msg.len() - from).min(CHUNK_BYTES - 1);
            let more = from + take < msg.len();
            self.send_pool.write(slot, 0, &[u8::from(more)]);
            self.send_pool.write(slot, 1, &msg[from..from + take]);
            ops.push((
                wr_id(KIND_SEND, p as u16, slot),
                SendOp::Send {
                    buf: Buf {
                        pool: &self.send_pool,
                        slot,
                        offset: 0,
                        len: take + 1,
                    },
                    ud: None,
                },
            ));
            if more {
                peer.sent_of_first += take;
            } else {
                peer.backlog.pop_front();
                peer.sent_of_first = 0;
            }
        }
        if ops.is_empty() {
            return;
        }
        peer.in_flight += ops.len();
        self.stats.posted += ops.len() as u64;
        self.stats.doorbells += 1;
        if let Err(e) = qp.post_send(&ops) {
            log::warn!("{NAME}: posting to node {p}: {e}");
            drop(ops);
            self.lose(p as u16, LostCause::RdmaBroken);
        }
    }
}

/// The export of `exports` that holds region bytes `offset..offset + len`.
fn export_for(exports: &[Export], offset: u64, len: usize) -> Option<&Export> {
    exports.iter().find(|e| {
        // `decode_export` refused ranges whose ends pass 2^64.
        e.offset <= offset
            && offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= e.offset + e.len)
    })
}

fn recv_buf(pool: &BufferPool, slot: usize) -> Buf<'_> {
    Buf {
        pool,
        slot,
        offset: 0,
        len: pool.size(),
    }
}

fn bad_setup(why: String) -> RdmaError {
    RdmaError::Setup {
        transport: NAME,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why),
    }
}

impl Transport for RcTransport {
    fn name(&self) -> &'static str {
        NAME
    }

    fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn send(&mut self, now: Instant, to: u16, msg: &[u8]) {
        self.send_owned(now, to, msg.to_vec());
    }
    fn send_owned(&mut self, _now: Instant, to: u16, msg: Vec<u8>) {
        if let Some(p) = self.peers.get_mut(usize::from(to)) {
            p.backlog.push_back(msg);
        }
    }

    fn flush(&mut self, _now: Instant) {
        RcTransport::flush(self);
    }

    fn poll_recv(&mut self, now: Instant) -> usize {
        self.handle_control(now, false);
        let n = self.handle_completions(now);
        self.repost_receives();
        self.flush();
        n
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.ctl.poll_timeout()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.ctl.handle_timeout(now);
        self.handle_control(now, true);
        self.flush();
    }

    fn pending(&self, to: u16) -> usize {
        self.peers
            .get(usize::from(to))
            .map_or(0, |p| p.backlog.len() + p.in_flight)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.stats;
        vec![
            ("work requests posted", s.posted),
            ("doorbells", s.doorbells),
            ("one-sided reads", s.reads),
            ("one-sided read bytes", s.read_bytes),
            ("completion events", self.cq.events()),
            ("rejected", s.rejected + self.ctl.rejected),
        ]
    }

    fn rejected(&self) -> u64 {
        self.stats.rejected + self.ctl.rejected
    }

    #[allow(unsafe_code)]
    unsafe fn export(&mut self, offset: u64, addr: *mut u8, len: usize) -> std::io::Result<bool> {
        // SAFETY: the caller's promise (`Transport::export`): the memory is valid and stays
        // mapped while the transport lives, which holds the registration (`exports`) until it
        // drops; peers may read it.
        let mr = unsafe { self.dev.register_external(addr, len) }
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let e = Export {
            offset,
            len: len as u64,
            addr: addr as u64,
            rkey: mr.rkey(),
        };
        self.exports.push(mr);
        self.ctl.broadcast(&encode_export(&e));
        Ok(true)
    }

    fn can_read(&self, from: u16, offset: u64, len: usize) -> bool {
        self.peers.get(usize::from(from)).is_some_and(|p| {
            !p.lost
                && len <= READ_BYTES
                && !self.free_read.is_empty()
                && export_for(&p.exports, offset, len).is_some()
        })
    }

    fn read(&mut self, _now: Instant, from: u16, ranges: &[ReadRange]) -> bool {
        let Some(p) = self.peers.get_mut(usize::from(from)) else {
            return false;
        };
        if p.lost || ranges.len() > self.free_read.len() {
            return false;
        }
        let mut targets = Vec::with_capacity(ranges.len());
        for r in ranges {
            match export_for(&p.exports, r.offset, r.len) {
                Some(e) if r.len <= READ_BYTES => {
                    targets.push((e.addr + (r.offset - e.offset), e.rkey));
                }
                _ => return false,
            }
        }
        let slots = self
            .free_read
            .split_off(self.free_read.len() - ranges.len());
        for ((r, (addr, rkey)), slot) in ranges.iter().zip(targets).zip(slots) {
            p.reads.push((slot, addr, rkey, r.len));
            self.reads.insert(slot, (from, r.token, r.len));
        }
        true
    }

    fn max_read(&self) -> usize {
        READ_BYTES
    }
}
