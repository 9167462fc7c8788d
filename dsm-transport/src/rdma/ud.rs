//! RDMA UD: one unreliable-datagram QP per node, an address handle per peer, and the same
//! sans-IO [`Reliable`] layer as UDP on top (sequencing, acks, retransmission, fragmentation to
//! the port's active MTU, peer loss).
//!
//! The Q_Key is derived from the job cookie and set on the QP: datagrams with another Q_Key are
//! dropped by the NIC. A receive whose source QP is not a peer of the job is counted and dropped;
//! the reliable layer then checks the cookie and sender in every datagram, as over UDP. Every
//! receive buffer starts with 40 bytes of room for the GRH the NIC writes there.

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::verbs::{
    AddressHandle, Buf, BufferPool, Completion, CompletionKind, CompletionQueue, Device, Endpoint,
    QpType, QueuePair, SendOp,
};
use super::{
    Control, RdmaConfig, RdmaError, RdmaStats, TAG_ENDPOINT, TAG_READY, combined_epoll,
    decode_endpoint, encode_endpoint,
};
use crate::impair::{ImpairConfig, Impairment};
use crate::reliable::{Event, Reliable, ReliableConfig};
use crate::sys::Epoll;
use crate::{Body, Transport};

const NAME: &str = "rdma-ud";
/// Bytes of Global Routing Header the NIC puts before every received datagram.
pub const GRH_BYTES: usize = 40;
/// Receive buffers: room for a full window from every peer at once, within bounds.
fn recv_buffers(peers: usize, window: usize) -> usize {
    (window * peers.saturating_sub(1)).clamp(1024, 16 * 1024)
}
/// The send window in datagrams: at least 256 KiB in flight per peer (datagrams are only as large
/// as the MTU, 1 KiB on Soft-RoCE over a 1500-byte link, so UDP's 64-datagram default is too
/// small).
const MIN_WINDOW_BYTES: usize = 256 * 1024;

const KIND_SEND: u64 = 1;
const KIND_RECV: u64 = 2;

/// A node's UD endpoint.
pub struct UdTransport {
    // The QP first: destroyed before the queue and buffers it uses.
    qp: QueuePair,
    ahs: Vec<Option<AddressHandle>>,
    cq: CompletionQueue,
    send_pool: BufferPool,
    recv_pool: BufferPool,
    _dev: Arc<Device>,
    ctl: Control,
    epoll: Epoll,
    rel: Reliable,
    qkey: u32,
    remote_qpn: Vec<u32>,
    qpn_peer: HashMap<u32, u16>,
    free_send: Vec<usize>,
    repost: Vec<usize>,
    events: VecDeque<Event>,
    completions: Vec<Completion>,
    datagram: Vec<u8>,
    stats: RdmaStats,
    impair: Option<Impairment>,
    /// The impaired datagrams of one flush (kept for its allocation).
    impaired: Vec<(u16, Vec<u8>)>,
}

impl UdTransport {
    /// Sets up node `me`'s UD QP and learns every peer's (over the TCP control mesh).
    /// `rel.max_datagram_bytes` is lowered to the port's active MTU.
    pub fn establish(
        listener: TcpListener,
        me: u16,
        peers: &[SocketAddr],
        cookie: u64,
        cfg: &RdmaConfig,
        mut rel: ReliableConfig,
    ) -> Result<UdTransport, RdmaError> {
        let verbs = |source| RdmaError::Verbs {
            transport: NAME,
            source,
        };
        let dev = Device::open(cfg.device.as_deref(), cfg.port, cfg.gid_index).map_err(verbs)?;
        let mtu = dev.active_mtu();
        rel.window = rel.window.max(MIN_WINDOW_BYTES / mtu);
        let recv_count = recv_buffers(peers.len(), rel.window);
        let send_count = recv_count;
        let cq = CompletionQueue::new(&dev, recv_count + send_count + 64).map_err(verbs)?;
        let mut qp =
            QueuePair::new(&dev, QpType::Ud, &cq, None, send_count, recv_count).map_err(verbs)?;
        let send_pool = BufferPool::new(&dev, send_count, mtu).map_err(verbs)?;
        let recv_pool = BufferPool::new(&dev, recv_count, mtu + GRH_BYTES).map_err(verbs)?;
        // Q_Keys with the top bit set are privileged: keep it clear.
        let qkey = ((cookie ^ (cookie >> 32)) as u32) & 0x7fff_ffff;
        qp.ready_ud(qkey, (cookie as u32) & 0xff_ffff)
            .map_err(verbs)?;
        let recvs: Vec<(u64, Buf<'_>)> = (0..recv_count)
            .map(|s| (wr_id(KIND_RECV, s), whole(&recv_pool, s)))
            .collect();
        qp.post_recv(&recvs).map_err(verbs)?;

        let mut ctl = Control::establish(NAME, listener, me, peers, cookie, cfg.tcp.clone())?;
        let ep = Endpoint {
            gid: dev.gid(),
            qpn: qp.qpn(),
            psn: 0,
        };
        ctl.broadcast(&encode_endpoint(&ep, mtu));
        let infos = ctl.gather(NAME, TAG_ENDPOINT, cfg.tcp.connect_timeout)?;
        let mut ahs = Vec::new();
        let mut remote_qpn = Vec::new();
        let mut qpn_peer = HashMap::new();
        let mut path_mtu = mtu;
        for (p, info) in infos.iter().enumerate() {
            if p == usize::from(me) {
                ahs.push(None);
                remote_qpn.push(qp.qpn());
                continue;
            }
            let Some((remote, their_mtu)) = decode_endpoint(info) else {
                return Err(RdmaError::Setup {
                    transport: NAME,
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("node {p} sent malformed connection data"),
                    ),
                });
            };
            path_mtu = path_mtu.min(their_mtu);
            ahs.push(Some(AddressHandle::new(&dev, &remote.gid).map_err(verbs)?));
            remote_qpn.push(remote.qpn);
            // Two nodes on one device share a GID: the QP number tells them apart.
            qpn_peer.insert(remote.qpn, p as u16);
        }
        ctl.broadcast(&[TAG_READY]);
        ctl.gather(NAME, TAG_READY, cfg.tcp.connect_timeout)?;
        rel.max_datagram_bytes = rel.max_datagram_bytes.min(path_mtu);
        let epoll = combined_epoll(&[ctl.fd(), cq.fd()]).map_err(|source| RdmaError::Setup {
            transport: NAME,
            source,
        })?;
        log::debug!(
            "{NAME}: node {me} on {} port {} GID index {}, datagrams of {} bytes",
            dev.name(),
            dev.port(),
            dev.gid_index(),
            rel.max_datagram_bytes
        );
        let now = Instant::now();
        Ok(UdTransport {
            qp,
            ahs,
            cq,
            free_send: (0..send_pool.count()).rev().collect(),
            send_pool,
            recv_pool,
            _dev: dev,
            ctl,
            epoll,
            rel: Reliable::new(me, peers.len() as u16, cookie, rel, now),
            qkey,
            remote_qpn,
            qpn_peer,
            repost: Vec::new(),
            events: VecDeque::new(),
            completions: Vec::with_capacity(64),
            datagram: Vec::with_capacity(mtu),
            stats: RdmaStats::default(),
            impair: None,
            impaired: Vec::new(),
        })
    }

    /// Counters of the verbs side.
    pub fn stats(&self) -> &RdmaStats {
        &self.stats
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

    fn complete(&mut self, now: Instant, c: &Completion) {
        let (kind, slot) = ((c.wr_id >> 56), (c.wr_id & 0xffff_ffff) as usize);
        match (kind, c.kind) {
            (KIND_RECV, CompletionKind::Recv) => {
                self.repost.push(slot);
                if c.status.is_err() {
                    return;
                }
                let Some(&from) = self.qpn_peer.get(&c.src_qp) else {
                    self.stats.rejected += 1;
                    return;
                };
                let len = (c.byte_len as usize).saturating_sub(GRH_BYTES);
                if len > self.recv_pool.size() - GRH_BYTES {
                    self.stats.rejected += 1;
                    return;
                }
                self.datagram.clear();
                self.recv_pool
                    .read(slot, GRH_BYTES, len, &mut self.datagram);
                if let Err(e) = self.rel.handle_datagram(now, from, &self.datagram) {
                    log::debug!("{NAME}: dropped datagram from node {from}: {e}");
                }
            }
            (KIND_RECV, _) => self.repost.push(slot),
            _ => {
                self.free_send.push(slot);
                if let Err(why) = c.status {
                    // A lost datagram: the reliable layer sends it again.
                    log::debug!("{NAME}: send failed: {why}");
                }
            }
        }
    }

    fn repost_receives(&mut self) {
        if self.repost.is_empty() {
            return;
        }
        let bufs: Vec<(u64, Buf<'_>)> = self
            .repost
            .iter()
            .map(|&s| (wr_id(KIND_RECV, s), whole(&self.recv_pool, s)))
            .collect();
        if let Err(e) = self.qp.post_recv(&bufs) {
            log::warn!("{NAME}: reposting receives: {e}");
        }
        self.repost.clear();
    }

    /// Mistreats outgoing datagrams from now on (see [`crate::impair`]), as UDP's does.
    pub fn impair(&mut self, cfg: ImpairConfig, salt: u64) {
        self.impair = Some(Impairment::new(cfg, salt));
    }

    /// Posts every datagram the reliable layer wants sent, as one chained list.
    fn flush(&mut self) {
        let mut ops: Vec<(u64, SendOp<'_>)> = Vec::new();
        let (pool, ahs, qpns, qkey) = (&self.send_pool, &self.ahs, &self.remote_qpn, self.qkey);
        let (free, stats) = (&mut self.free_send, &mut self.stats);
        // Header and payload straight into a registered buffer (the payload lent by the
        // reliable layer's retransmission queue).
        let mut post = |to: u16, parts: &[&[u8]]| {
            // One buffer per send-queue entry: a free buffer is a free entry too.
            let Some(slot) = free.pop() else {
                // Lost like a datagram the kernel refuses; the reliable layer sends it again.
                stats.send_failures += 1;
                return;
            };
            let Some(Some(ah)) = ahs.get(usize::from(to)) else {
                free.push(slot);
                return;
            };
            let mut len = 0;
            for part in parts {
                pool.write(slot, len, part);
                len += part.len();
            }
            ops.push((
                wr_id(KIND_SEND, slot),
                SendOp::Send {
                    buf: Buf {
                        pool,
                        slot,
                        offset: 0,
                        len,
                    },
                    ud: Some((ah, qpns[usize::from(to)], qkey)),
                },
            ));
        };
        match &mut self.impair {
            None => self.rel.transmit(&mut post),
            Some(imp) => {
                // Impaired: datagrams of their own, which the impairment may hold back.
                let now = Instant::now();
                let batch = &mut self.impaired;
                imp.release(now, batch);
                while let Some((to, d)) = self.rel.poll_transmit() {
                    imp.outgoing(now, to, d, batch);
                }
                for (to, d) in batch.drain(..) {
                    post(to, &[&d]);
                }
            }
        }
        if ops.is_empty() {
            return;
        }
        self.stats.posted += ops.len() as u64;
        self.stats.doorbells += 1;
        if let Err(e) = self.qp.post_send(&ops) {
            // Lost: the reliable layer retransmits (and reports a peer that never answers).
            log::warn!("{NAME}: posting datagrams: {e}");
            let slots: Vec<usize> = ops
                .iter()
                .map(|(id, _)| (id & 0xffff_ffff) as usize)
                .collect();
            drop(ops);
            self.free_send.extend(slots);
        }
    }

    fn handle_control(&mut self, now: Instant, force: bool) {
        for (from, m) in self.ctl.poll(now, Duration::from_millis(1), force) {
            if m.first() != Some(&TAG_READY) {
                self.stats.rejected += 1;
                log::warn!("{NAME}: unexpected control message from node {from}");
            }
        }
        while let Some(ev) = self.ctl.poll_lost() {
            self.events.push_back(ev);
        }
    }
}

fn wr_id(kind: u64, slot: usize) -> u64 {
    (kind << 56) | slot as u64
}

fn whole(pool: &BufferPool, slot: usize) -> Buf<'_> {
    Buf {
        pool,
        slot,
        offset: 0,
        len: pool.size(),
    }
}

impl Transport for UdTransport {
    fn name(&self) -> &'static str {
        NAME
    }

    fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn send(&mut self, _now: Instant, to: u16, msg: &[u8]) {
        self.rel.send(to, msg);
    }
    fn send_owned(&mut self, _now: Instant, to: u16, msg: Vec<u8>) {
        self.rel.send_owned(to, msg);
    }
    fn send_parts(&mut self, _now: Instant, to: u16, head: Vec<u8>, body: Body) {
        self.rel.send_parts(to, head, body);
    }

    fn flush(&mut self, now: Instant) {
        self.rel.flush(now);
        UdTransport::flush(self);
    }

    fn farewell(&mut self, now: Instant) {
        // What the impairment holds back goes with the farewell (see `Impairment::leave`).
        if let Some(imp) = &mut self.impair {
            imp.leave();
        }
        self.rel.farewell(now);
        UdTransport::flush(self);
    }

    fn poll_recv(&mut self, now: Instant) -> usize {
        self.handle_control(now, false);
        let n = self.handle_completions(now);
        self.repost_receives();
        // As for UDP: the acknowledgements of this batch wait for the next flush, to ride on
        // the replies, but for one owed for half the sender's window; fast retransmissions go
        // out now.
        self.flush();
        n
    }

    fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        self.rel.poll_event()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let held = self.impair.as_ref().and_then(Impairment::next_release);
        [self.rel.poll_timeout(), self.ctl.poll_timeout(), held]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.rel.handle_timeout(now);
        self.ctl.handle_timeout(now);
        self.handle_control(now, true);
        self.flush();
    }

    fn pending(&self, to: u16) -> usize {
        self.rel.pending(to)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let r = self.rel.stats();
        let s = &self.stats;
        let mut v = vec![
            ("datagrams sent", r.datagrams_sent),
            ("datagrams received", r.datagrams_received),
            ("retransmissions", r.retransmissions),
            ("duplicates dropped", r.duplicates),
            ("work requests posted", s.posted),
            ("doorbells", s.doorbells),
            ("completion events", self.cq.events()),
            ("no send buffer", s.send_failures),
            ("rejected", r.rejected + s.rejected + self.ctl.rejected),
        ];
        if let Some(i) = self.impair.as_ref().map(Impairment::stats) {
            v.push(("impair: dropped", i.dropped));
            v.push(("impair: duplicated", i.duplicated));
            v.push(("impair: delayed", i.delayed));
        }
        v
    }

    fn retransmissions(&self) -> u64 {
        self.rel.stats().retransmissions
    }

    fn rejected(&self) -> u64 {
        self.rel.stats().rejected + self.stats.rejected + self.ctl.rejected
    }
}
