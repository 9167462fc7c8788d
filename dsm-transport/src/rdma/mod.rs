//! RDMA transports (cargo feature `rdma`): [`rc::RcTransport`] (one reliable connection per pair
//! of nodes, shared receive queue, doorbell-batched sends, one-sided page reads) and
//! [`ud::UdTransport`] (one datagram QP per node under the [`crate::reliable`] layer).
//!
//! Both start from a TCP mesh ([`crate::tcp`], cookie-checked): it carries the connection data
//! (GID, QP number, first PSN), a ready handshake, and later the address and key of memory a node
//! exports for remote reads. It stays up for the job as the control channel and the heartbeat:
//! an RC connection's peer NIC answers even when the peer process is stopped, its TCP socket and
//! heartbeats do not.
//!
//! Only [`verbs`] names `rdma-sys`.

pub mod rc;
pub mod ud;
pub mod verbs;

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use crate::Transport;
use crate::reliable::Event;
use crate::sys::Epoll;
use crate::tcp::{TcpConfig, TcpTransport};
pub use verbs::{Device, VerbsError, device_names};

/// Which device, port and GID to use.
#[derive(Clone, Debug)]
pub struct RdmaConfig {
    /// Device name (`None`: the first device).
    pub device: Option<String>,
    /// Port number (from 1).
    pub port: u8,
    /// GID index (`None`: the first IPv4-mapped RoCE v2 GID, else 0).
    pub gid_index: Option<u8>,
    /// The control mesh's heartbeat and loss timeout.
    pub tcp: TcpConfig,
}

/// Why an RDMA transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    /// The verbs layer refused (no device, port down...).
    #[error("{transport}: {source}")]
    Verbs {
        /// `rdma-rc` or `rdma-ud`.
        transport: &'static str,
        /// What failed.
        source: VerbsError,
    },
    /// The TCP bootstrap failed or a peer sent nonsense.
    #[error("{transport}: connection setup: {source}")]
    Setup {
        /// `rdma-rc` or `rdma-ud`.
        transport: &'static str,
        /// What failed.
        source: io::Error,
    },
}

const TAG_ENDPOINT: u8 = 1;
const TAG_READY: u8 = 2;
const TAG_EXPORT: u8 = 3;

/// A peer's endpoint message: GID, QP number, first PSN, MTU.
fn encode_endpoint(ep: &verbs::Endpoint, mtu: usize) -> Vec<u8> {
    let mut m = vec![TAG_ENDPOINT];
    m.extend_from_slice(&ep.gid);
    m.extend_from_slice(&ep.qpn.to_le_bytes());
    m.extend_from_slice(&ep.psn.to_le_bytes());
    m.extend_from_slice(&(mtu as u32).to_le_bytes());
    m
}

/// An endpoint message; `None` if malformed, its MTU included (a verbs MTU: a power of two,
/// 256 to 4,096 bytes; a smaller one would leave a datagram no room for its header).
fn decode_endpoint(m: &[u8]) -> Option<(verbs::Endpoint, usize)> {
    if m.len() != 29 || m[0] != TAG_ENDPOINT {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().expect("4 bytes"));
    let mtu = u32_at(25) as usize;
    if !(256..=4096).contains(&mtu) || !mtu.is_power_of_two() {
        return None;
    }
    let mut gid = [0; 16];
    gid.copy_from_slice(&m[1..17]);
    Some((
        verbs::Endpoint {
            gid,
            qpn: u32_at(17),
            psn: u32_at(21) & 0xff_ffff,
        },
        mtu,
    ))
}

/// Memory a peer exported for remote reads: region bytes `offset..offset + len` live at
/// `addr` in the peer, readable with `rkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export {
    /// Offset in the shared region.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The peer's virtual address of `offset`.
    pub addr: u64,
    /// The peer's remote key.
    pub rkey: u32,
}

fn encode_export(e: &Export) -> Vec<u8> {
    let mut m = vec![TAG_EXPORT];
    m.extend_from_slice(&e.offset.to_le_bytes());
    m.extend_from_slice(&e.len.to_le_bytes());
    m.extend_from_slice(&e.addr.to_le_bytes());
    m.extend_from_slice(&e.rkey.to_le_bytes());
    m
}

/// An export message; `None` if malformed, a range whose end passes 2^64 included (the
/// region's offsets or the peer's addresses: reads inside it are computed without a check).
fn decode_export(m: &[u8]) -> Option<Export> {
    if m.len() != 29 || m[0] != TAG_EXPORT {
        return None;
    }
    let u64_at = |i: usize| u64::from_le_bytes(m[i..i + 8].try_into().expect("8 bytes"));
    let e = Export {
        offset: u64_at(1),
        len: u64_at(9),
        addr: u64_at(17),
        rkey: u32::from_le_bytes(m[25..29].try_into().expect("4 bytes")),
    };
    (e.offset.checked_add(e.len).is_some() && e.addr.checked_add(e.len).is_some()).then_some(e)
}

/// The TCP control mesh: bootstrap exchanges, exports, heartbeats, peer loss.
pub(crate) struct Control {
    tcp: TcpTransport,
    me: u16,
    nodes: u16,
    /// Control messages that arrived while waiting for something else.
    early: VecDeque<(u16, Vec<u8>)>,
    /// Peers lost (forwarded to the runtime).
    lost: VecDeque<Event>,
    /// Control messages that made no sense.
    pub rejected: u64,
    last_poll: Instant,
}

impl Control {
    pub fn establish(
        transport: &'static str,
        listener: TcpListener,
        me: u16,
        peers: &[SocketAddr],
        cookie: u64,
        cfg: TcpConfig,
    ) -> Result<Control, RdmaError> {
        let tcp = TcpTransport::establish(listener, me, peers, cookie, cfg)
            .map_err(|source| RdmaError::Setup { transport, source })?;
        Ok(Control {
            tcp,
            me,
            nodes: peers.len() as u16,
            early: VecDeque::new(),
            lost: VecDeque::new(),
            rejected: 0,
            last_poll: Instant::now(),
        })
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        self.tcp.fd()
    }

    /// Sends a control message now (they are few: no batching).
    pub fn send(&mut self, to: u16, msg: &[u8]) {
        let now = Instant::now();
        self.tcp.send(now, to, msg);
        self.tcp.flush(now);
    }

    pub fn broadcast(&mut self, msg: &[u8]) {
        let me = self.me;
        for p in (0..self.nodes).filter(|&p| p != me) {
            self.send(p, msg);
        }
    }

    /// Reads the mesh (at most every `every`, unless `force`); returns control messages.
    pub fn poll(&mut self, now: Instant, every: Duration, force: bool) -> Vec<(u16, Vec<u8>)> {
        let mut out: Vec<(u16, Vec<u8>)> = self.early.drain(..).collect();
        if force || now.duration_since(self.last_poll) >= every {
            self.last_poll = now;
            self.tcp.poll_recv(now);
            while let Some(ev) = self.tcp.poll_event() {
                match ev {
                    Event::Message { from, bytes } => out.push((from, bytes)),
                    lost => self.lost.push_back(lost),
                }
            }
        }
        out
    }

    pub fn poll_lost(&mut self) -> Option<Event> {
        self.lost.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.tcp.poll_timeout()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.tcp.handle_timeout(now);
    }

    /// Waits for one message with `tag` from every other node; others are kept for later.
    pub fn gather(
        &mut self,
        transport: &'static str,
        tag: u8,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, RdmaError> {
        let deadline = Instant::now() + timeout;
        let mut got: Vec<Option<Vec<u8>>> = vec![None; usize::from(self.nodes)];
        got[usize::from(self.me)] = Some(Vec::new());
        let epoll = Epoll::new().map_err(|source| RdmaError::Setup { transport, source })?;
        epoll
            .add(self.tcp.fd(), 0, false)
            .map_err(|source| RdmaError::Setup { transport, source })?;
        let mut ready = Vec::new();
        let mut stash = Vec::new();
        while got.iter().any(Option::is_none) {
            let now = Instant::now();
            if now > deadline {
                let missing: Vec<String> = got
                    .iter()
                    .enumerate()
                    .filter(|(_, g)| g.is_none())
                    .map(|(i, _)| i.to_string())
                    .collect();
                return Err(RdmaError::Setup {
                    transport,
                    source: io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no connection data from node(s) {} within {timeout:?}",
                            missing.join(", ")
                        ),
                    ),
                });
            }
            if self.tcp.poll_timeout().is_some_and(|t| t <= now) {
                self.tcp.handle_timeout(now);
            }
            for (from, m) in self.poll(now, Duration::ZERO, true) {
                match got.get_mut(usize::from(from)) {
                    Some(slot @ None) if m.first() == Some(&tag) => *slot = Some(m),
                    _ => stash.push((from, m)),
                }
            }
            if let Some(Event::PeerLost { peer, cause, .. }) = self.lost.front() {
                return Err(RdmaError::Setup {
                    transport,
                    source: io::Error::other(format!(
                        "lost node {peer} during connection setup ({cause})"
                    )),
                });
            }
            let _ = epoll.ready(20, &mut ready);
        }
        self.early.extend(stash);
        Ok(got.into_iter().map(Option::unwrap_or_default).collect())
    }
}

/// A descriptor readable when either the control mesh or the completion channel has work.
pub(crate) fn combined_epoll(fds: &[std::os::fd::RawFd]) -> io::Result<Epoll> {
    let epoll = Epoll::new()?;
    for (i, &fd) in fds.iter().enumerate() {
        epoll.add(fd, i as u64, false)?;
    }
    Ok(epoll)
}

/// Whether an RDMA transport can start here: the device list, or why not (for error messages
/// before any node starts).
pub fn probe(transport: &'static str) -> Result<Vec<String>, RdmaError> {
    match device_names() {
        Ok(v) if v.is_empty() => Err(RdmaError::Verbs {
            transport,
            source: VerbsError::NoDevice("ibv_get_device_list found no devices".into()),
        }),
        Ok(v) => Ok(v),
        Err(source) => Err(RdmaError::Verbs { transport, source }),
    }
}

/// Counters shared by both RDMA transports.
#[derive(Clone, Debug, Default)]
pub struct RdmaStats {
    /// Work requests posted to send queues (sends and reads).
    pub posted: u64,
    /// Calls to post (doorbells): `posted / doorbells` is the batching.
    pub doorbells: u64,
    /// One-sided reads completed.
    pub reads: u64,
    /// Bytes read one-sided.
    pub read_bytes: u64,
    /// Datagrams dropped for lack of a send buffer (UD; retransmitted later).
    pub send_failures: u64,
    /// Receives from unknown QPs or malformed control messages.
    pub rejected: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_and_export_messages_round_trip() {
        let ep = verbs::Endpoint {
            gid: [7; 16],
            qpn: 0x11_2233,
            psn: 0xab_cdef,
        };
        assert_eq!(
            decode_endpoint(&encode_endpoint(&ep, 1024)),
            Some((ep, 1024))
        );
        let e = Export {
            offset: 1 << 33,
            len: 12 << 12,
            addr: 0x7f00_dead_b000,
            rkey: 0x1234,
        };
        assert_eq!(decode_export(&encode_export(&e)), Some(e));
    }

    #[test]
    fn malformed_control_messages_are_refused_not_trusted() {
        let ep = encode_endpoint(
            &verbs::Endpoint {
                gid: [1; 16],
                qpn: 5,
                psn: 6,
            },
            4096,
        );
        let ex = encode_export(&Export {
            offset: 0,
            len: 4096,
            addr: 1,
            rkey: 2,
        });
        for m in [&ep[..], &ex[..]] {
            for cut in 0..m.len() {
                assert_eq!(decode_endpoint(&m[..cut]), None);
                assert_eq!(decode_export(&m[..cut]), None);
            }
        }
        // The other tag, or a byte too many.
        assert_eq!(decode_export(&ep), None);
        assert_eq!(decode_endpoint(&ex), None);
        let mut long = ex.clone();
        long.push(0);
        assert_eq!(decode_export(&long), None);
        // A PSN is 24 bits whatever the peer sends.
        let mut wide = ep.clone();
        wide[21..25].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_endpoint(&wide).unwrap().0.psn, 0xff_ffff);
        // An MTU no verbs device has (a datagram of 0 bytes could not hold its header: the
        // sender's arithmetic wrapped).
        for mtu in [0u32, 21, 255, 300, 8192, u32::MAX] {
            let mut odd = ep.clone();
            odd[25..29].copy_from_slice(&mtu.to_le_bytes());
            assert_eq!(decode_endpoint(&odd), None, "MTU {mtu}");
        }
        // A range whose end passes 2^64, in the region or in the peer's memory.
        for (offset, len, addr) in [(u64::MAX, 1, 0), (1, u64::MAX, 0), (0, 4096, u64::MAX - 1)] {
            let far = encode_export(&Export {
                offset,
                len,
                addr,
                rkey: 2,
            });
            assert_eq!(decode_export(&far), None, "{offset} {len} {addr}");
        }
    }
}
