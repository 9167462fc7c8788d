//! TCP: one connection per pair of nodes, driven through epoll.
//!
//! Setup needs no O(N^2) listening ports: every node listens on one port; node `i` connects to
//! every node below it and accepts from every node above it, so two nodes never connect to each
//! other at once. The first bytes on a connection are a hello (`DSMT`, version, job cookie, node
//! id); a connection with a wrong cookie, an impossible id or a duplicate id is closed and
//! counted. Frames are a u32 length and the message. The frames of a pass are written with one
//! `writev`, a grant's page bytes straight from the buffer they were copied into at the home
//! ([`Transport::send_parts`]); what the kernel does not take at once is queued and written when
//! the socket is writable. A large frame is read straight into a buffer of its own once its
//! length is known, so its bytes are copied once on the way in, by the kernel. `TCP_NODELAY` is set. An empty frame is a heartbeat; a peer silent for
//! the peer timeout, or whose connection closes, is reported lost.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::reliable::{Event, LostCause};
use crate::sys::{self, Epoll};
use crate::{Body, Transport};

const HELLO_MAGIC: &[u8; 4] = b"DSMT";
const HELLO_BYTES: usize = 4 + 1 + 8 + 2;
/// How long a connection at start-up may take to send its hello, from its accept.
const HELLO_WITHIN: Duration = Duration::from_secs(5);
const VERSION: u8 = 1;
/// Largest frame accepted from a peer.
pub const MAX_FRAME_BYTES: usize = 256 << 20;
const LISTENER: u64 = u64::MAX;
/// Bytes read at once into a connection's buffer of small frames.
const READ_CHUNK: usize = 64 * 1024;
/// A frame at least this long that is not in whole in the buffer of small frames is read
/// straight into a buffer of its own.
const OWN_BUFFER_BYTES: usize = 16 * 1024;
/// A large frame's buffer takes at most this much more memory at a time than what has arrived
/// of it (a frame's length is the peer's word: a header claiming 256 MiB does not reserve it).
/// A grant (256 KiB) fits at once.
const GROW_BYTES: usize = 1 << 20;
/// Most iovecs one `writev` is given (Linux's `UIO_MAXIOV` is 1,024).
const MAX_IOVECS: usize = 1020;

/// A frame waiting to be written: its length prefix, its bytes and, for a grant, the page bytes
/// that follow them.
#[derive(Debug)]
struct OutFrame {
    prefix: [u8; 4],
    head: Vec<u8>,
    body: Option<Body>,
}

impl OutFrame {
    fn parts(&self) -> [&[u8]; 3] {
        [
            &self.prefix,
            &self.head,
            self.body.as_ref().map_or(&[], Body::bytes),
        ]
    }

    fn len(&self) -> usize {
        self.parts().iter().map(|p| p.len()).sum()
    }
}

/// TCP settings.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Send a heartbeat to a peer we have sent nothing to for this long.
    pub heartbeat: Duration,
    /// A peer we hear nothing from for this long is lost.
    pub peer_timeout: Duration,
    /// How long to wait for every connection at start.
    pub connect_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            heartbeat: Duration::from_millis(500),
            peer_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    /// Frames waiting to be written (the first perhaps in part: see `out_at`).
    out: VecDeque<OutFrame>,
    /// Bytes of the first frame of `out` already written.
    out_at: usize,
    /// Bytes of `out` not written yet.
    out_bytes: usize,
    /// Bytes read, not yet taken as frames (small frames, and the start of a large one).
    inbuf: Vec<u8>,
    /// A large frame being read into its own buffer, and its length.
    large: Option<(Vec<u8>, usize)>,
    last_heard: Instant,
    last_sent: Instant,
    /// Bytes of the heartbeats written or queued since the last frame that carried a message:
    /// the newest bytes of the stream, so unacknowledged bytes that fit in them are heartbeats
    /// only, and no message is on its way.
    trailing_heartbeats: usize,
    writing: bool,
    lost: bool,
}

impl Conn {
    /// `n` more queued bytes went to the socket: the frames written whole leave the queue.
    fn written(&mut self, n: usize) {
        self.out_bytes -= n;
        self.out_at += n;
        while let Some(f) = self.out.front() {
            let len = f.len();
            if self.out_at < len {
                break;
            }
            self.out_at -= len;
            self.out.pop_front();
        }
    }
}

/// Counters of the TCP transport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Frames sent.
    pub frames_sent: u64,
    /// Frames received.
    pub frames_received: u64,
    /// Bytes that had to be queued because the socket was full.
    pub queued_bytes: u64,
    /// Connections refused (bad hello, stranger, duplicate).
    pub rejected: u64,
}

/// One node's TCP endpoint.
#[derive(Debug)]
pub struct TcpTransport {
    me: u16,
    cookie: u64,
    cfg: TcpConfig,
    listener: TcpListener,
    epoll: Epoll,
    conns: Vec<Option<Conn>>,
    events: VecDeque<Event>,
    ready: Vec<(u64, u32)>,
    /// `ready` holds what [`Transport::poll_ready`] found, for the next `poll_recv`.
    ready_ahead: bool,
    stats: TcpStats,
}

fn hello(cookie: u64, me: u16) -> [u8; HELLO_BYTES] {
    let mut h = [0u8; HELLO_BYTES];
    h[..4].copy_from_slice(HELLO_MAGIC);
    h[4] = VERSION;
    h[5..13].copy_from_slice(&cookie.to_le_bytes());
    h[13..15].copy_from_slice(&me.to_le_bytes());
    h
}

/// The sender of a hello, if it is one for this job.
fn parse_hello(h: &[u8; HELLO_BYTES], cookie: u64, nodes: usize) -> Option<u16> {
    if &h[..4] != HELLO_MAGIC || h[4] != VERSION {
        return None;
    }
    let c = u64::from_le_bytes(h[5..13].try_into().ok()?);
    let from = u16::from_le_bytes([h[13], h[14]]);
    (c == cookie && usize::from(from) < nodes).then_some(from)
}

/// Binds the listening socket a node advertises to the others.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr)
}

impl TcpTransport {
    /// Connects node `me` to every peer (`peers[i]` is node `i`'s listening address).
    pub fn establish(
        listener: TcpListener,
        me: u16,
        peers: &[SocketAddr],
        cookie: u64,
        cfg: TcpConfig,
    ) -> io::Result<TcpTransport> {
        let n = peers.len();
        let deadline = Instant::now() + cfg.connect_timeout;
        let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        for (j, addr) in peers.iter().enumerate().take(usize::from(me)) {
            let mut s = loop {
                match TcpStream::connect_timeout(addr, Duration::from_secs(2)) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        log::debug!("connect to node {j} at {addr}: {e}; retrying");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("connecting to node {j} at {addr}: {e}"),
                        ));
                    }
                }
            };
            s.write_all(&hello(cookie, me)).map_err(|e| {
                io::Error::new(e.kind(), format!("saying hello to node {j} at {addr}: {e}"))
            })?;
            conns[j] = Some(s);
        }
        let mut rejected = 0;
        listener.set_nonblocking(true)?;
        // Connections from the nodes above are served side by side, each with its own deadline
        // for its hello: a stranger that connects and says nothing (or trickles bytes) delays
        // nobody and is dropped.
        let mut pending: Vec<(TcpStream, Vec<u8>, Instant)> = Vec::new();
        while conns
            .iter()
            .enumerate()
            .any(|(j, c)| j > usize::from(me) && c.is_none())
        {
            if Instant::now() > deadline {
                let missing: Vec<String> = (usize::from(me) + 1..n)
                    .filter(|&j| conns[j].is_none())
                    .map(|j| j.to_string())
                    .collect();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("nodes {} did not connect", missing.join(", ")),
                ));
            }
            let mut busy = false;
            loop {
                match listener.accept() {
                    Ok((s, _)) => {
                        // A socket that cannot be made non-blocking is dropped: its node, if
                        // it is one, times out naming this one.
                        if s.set_nonblocking(true).is_ok() {
                            pending.push((s, Vec::with_capacity(HELLO_BYTES), Instant::now()));
                        }
                        busy = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // Reset before it was accepted: whoever it was may connect again.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                        ) => {}
                    Err(e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!(
                                "accepting the connections of nodes {} to {}: {e}",
                                usize::from(me) + 1,
                                n - 1
                            ),
                        ));
                    }
                }
            }
            let mut i = 0;
            while i < pending.len() {
                let (s, h, since) = &mut pending[i];
                let mut buf = [0u8; HELLO_BYTES];
                let want = HELLO_BYTES - h.len();
                let outcome = match s.read(&mut buf[..want]) {
                    Ok(0) => Some(false),
                    Ok(k) => {
                        busy = true;
                        h.extend_from_slice(&buf[..k]);
                        (h.len() == HELLO_BYTES).then_some(true)
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) =>
                    {
                        (since.elapsed() > HELLO_WITHIN).then_some(false)
                    }
                    Err(_) => Some(false),
                };
                let Some(complete) = outcome else {
                    i += 1;
                    continue;
                };
                let (s, h, _) = pending.swap_remove(i);
                let hello: Option<[u8; HELLO_BYTES]> = h.as_slice().try_into().ok();
                match hello
                    .filter(|_| complete)
                    .and_then(|h| parse_hello(&h, cookie, n))
                {
                    Some(j) if j > me && conns[usize::from(j)].is_none() => {
                        conns[usize::from(j)] = Some(s)
                    }
                    _ => rejected += 1,
                }
            }
            if !busy {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let epoll = Epoll::new()?;
        epoll.add(listener.as_raw_fd(), LISTENER, false)?;
        let now = Instant::now();
        let mut out = Vec::with_capacity(n);
        for (j, c) in conns.into_iter().enumerate() {
            match c {
                Some(s) => {
                    s.set_nodelay(true)?;
                    s.set_nonblocking(true)?;
                    s.set_read_timeout(None)?;
                    epoll.add(s.as_raw_fd(), j as u64, false)?;
                    out.push(Some(Conn {
                        stream: s,
                        out: VecDeque::new(),
                        out_at: 0,
                        out_bytes: 0,
                        inbuf: Vec::new(),
                        large: None,
                        last_heard: now,
                        last_sent: now,
                        trailing_heartbeats: 0,
                        writing: false,
                        lost: false,
                    }));
                }
                None => out.push(None),
            }
        }
        Ok(TcpTransport {
            me,
            cookie,
            cfg,
            listener,
            epoll,
            conns: out,
            events: VecDeque::new(),
            ready: Vec::new(),
            ready_ahead: false,
            stats: TcpStats {
                rejected,
                ..TcpStats::default()
            },
        })
    }

    /// The counters.
    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }

    fn lose(&mut self, j: usize, cause: LostCause, detail: String) {
        if let Some(c) = &mut self.conns[j] {
            if !c.lost {
                c.lost = true;
                self.epoll.delete(c.stream.as_raw_fd());
                log::debug!("node {j}: {cause}: {detail}");
                let silent_for = c.last_heard.elapsed();
                self.events.push_back(Event::PeerLost {
                    peer: j as u16,
                    silent_for,
                    cause,
                });
            }
        }
    }

    /// Writes queued frames of connection `j`, many with one `writev`, until the socket is full.
    fn drain_out(&mut self, j: usize) {
        let Some(c) = &mut self.conns[j] else { return };
        while !c.out.is_empty() {
            let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(c.out.len().min(MAX_IOVECS / 3) * 3);
            let mut skip = c.out_at;
            'frames: for f in &c.out {
                for part in f.parts() {
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    iov.push(IoSlice::new(&part[skip..]));
                    skip = 0;
                    if iov.len() == MAX_IOVECS {
                        break 'frames;
                    }
                }
            }
            match (&c.stream).write_vectored(&iov) {
                Ok(n) => c.written(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return self.lose(j, LostCause::ConnectionFailed, format!("write: {e}")),
            }
        }
        // What the socket did not take is written when epoll says it takes more.
        let want = !c.out.is_empty();
        if want != c.writing {
            c.writing = want;
            let _ = self.epoll.modify(c.stream.as_raw_fd(), j as u64, want);
        }
    }

    /// Queues a frame; [`TcpTransport::write_queued`] writes the queue of every connection
    /// with one writev each (a GETP's grants: one system call, not one per page).
    fn write_frame(&mut self, to: usize, now: Instant, head: Vec<u8>, body: Option<Body>) {
        let Some(c) = &mut self.conns[to] else { return };
        if c.lost {
            return;
        }
        c.last_sent = now;
        let frame = OutFrame {
            prefix: ((head.len() + body.as_ref().map_or(0, |b| b.bytes().len())) as u32)
                .to_le_bytes(),
            head,
            body,
        };
        c.trailing_heartbeats = match frame.len() == 4 {
            true => c.trailing_heartbeats + 4,
            false => 0,
        };
        c.out_bytes += frame.len();
        c.out.push_back(frame);
    }

    /// Writes what is queued on every connection not already waiting for room (those are
    /// written when epoll says the socket takes more).
    fn write_queued(&mut self) {
        for j in 0..self.conns.len() {
            let waiting = match &self.conns[j] {
                Some(c) if !c.lost && !c.out.is_empty() => c.writing,
                _ => continue,
            };
            if !waiting {
                self.drain_out(j);
                if let Some(c) = &self.conns[j] {
                    self.stats.queued_bytes += c.out_bytes as u64;
                }
            }
        }
    }

    /// Reads what connection `j` has, until the socket is empty, and takes the whole frames.
    fn read_conn(&mut self, j: usize, now: Instant) {
        let mut failed: Option<(LostCause, String)> = None;
        let Some(c) = &mut self.conns[j] else { return };
        while failed.is_none() {
            let fd = c.stream.as_raw_fd();
            let read = match &mut c.large {
                Some((buf, len)) => {
                    let want = (*len - buf.len()).min(GROW_BYTES);
                    sys::read_into_spare(fd, buf, want)
                }
                None => sys::read_into_spare(fd, &mut c.inbuf, READ_CHUNK),
            };
            match read {
                Ok(0) => failed = Some((LostCause::ConnectionClosed, String::new())),
                Ok(_) => c.last_heard = now,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => failed = Some((LostCause::ConnectionFailed, format!("read: {e}"))),
            }
            if let Some((buf, len)) = &c.large {
                if buf.len() == *len {
                    let (bytes, _) = c.large.take().expect("a large frame is being read");
                    self.events.push_back(Event::Message {
                        from: j as u16,
                        bytes,
                    });
                    self.stats.frames_received += 1;
                }
                continue;
            }
            // Whole frames out of the buffer; a large frame that is not all there yet goes on
            // in a buffer of its own.
            let mut at = 0;
            while c.inbuf.len() - at >= 4 {
                let len = u32::from_le_bytes([
                    c.inbuf[at],
                    c.inbuf[at + 1],
                    c.inbuf[at + 2],
                    c.inbuf[at + 3],
                ]) as usize;
                if len > MAX_FRAME_BYTES {
                    failed = Some((
                        LostCause::BadFrame,
                        format!("{len} bytes is over the limit"),
                    ));
                    break;
                }
                let have = c.inbuf.len() - at - 4;
                if have < len {
                    if len >= OWN_BUFFER_BYTES {
                        let mut buf = Vec::with_capacity(len.min(GROW_BYTES));
                        buf.extend_from_slice(&c.inbuf[at + 4..]);
                        c.large = Some((buf, len));
                        at = c.inbuf.len();
                    }
                    break;
                }
                if len > 0 {
                    let bytes = c.inbuf[at + 4..at + 4 + len].to_vec();
                    self.events.push_back(Event::Message {
                        from: j as u16,
                        bytes,
                    });
                    self.stats.frames_received += 1;
                }
                at += 4 + len;
            }
            c.inbuf.drain(..at);
        }
        if let Some((cause, detail)) = failed {
            self.lose(j, cause, detail);
        }
    }

    fn accept_strangers(&mut self) {
        loop {
            match self.listener.accept() {
                // Every peer is connected already: whoever this is does not belong.
                Ok((s, from)) => {
                    self.stats.rejected += 1;
                    log::debug!("refused a connection from {from}");
                    drop(s);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // Out of descriptors or memory: the stranger stays queued and the listener
                    // readable, and the level-triggered poll would wake this thread at once,
                    // again and again. Every peer is connected: stop listening for strangers.
                    log::warn!("tcp: no longer refusing strangers' connections one by one: {e}");
                    self.epoll.delete(self.listener.as_raw_fd());
                    return;
                }
            }
        }
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn send(&mut self, now: Instant, to: u16, msg: &[u8]) {
        self.stats.frames_sent += 1;
        self.write_frame(usize::from(to), now, msg.to_vec(), None);
    }

    fn send_owned(&mut self, now: Instant, to: u16, msg: Vec<u8>) {
        self.stats.frames_sent += 1;
        self.write_frame(usize::from(to), now, msg, None);
    }

    fn send_parts(&mut self, now: Instant, to: u16, head: Vec<u8>, body: Body) {
        self.stats.frames_sent += 1;
        self.write_frame(usize::from(to), now, head, Some(body));
    }

    fn poll_recv(&mut self, now: Instant) -> usize {
        if !std::mem::take(&mut self.ready_ahead) {
            self.poll_epoll();
        }
        let ready = std::mem::take(&mut self.ready);
        let n = ready.len();
        for &(token, ev) in &ready {
            if token == LISTENER {
                self.accept_strangers();
                continue;
            }
            let j = token as usize;
            if ev & libc::EPOLLOUT as u32 != 0 {
                self.drain_out(j);
            }
            if ev & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                self.read_conn(j, now);
            }
        }
        self.ready = ready;
        self.write_queued();
        n
    }

    fn poll_ready(&mut self) -> bool {
        if !self.ready_ahead {
            self.poll_epoll();
            self.ready_ahead = !self.ready.is_empty();
        }
        self.ready_ahead
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .iter()
            .flatten()
            .filter(|c| !c.lost)
            .map(|c| (c.last_sent + self.cfg.heartbeat).min(c.last_heard + self.cfg.peer_timeout))
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        for j in 0..self.conns.len() {
            let Some(c) = &self.conns[j] else { continue };
            if c.lost {
                continue;
            }
            if now.saturating_duration_since(c.last_heard) >= self.cfg.peer_timeout {
                let silent = now.saturating_duration_since(c.last_heard);
                self.lose(j, LostCause::Silent, format!("for {silent:?}"));
            } else if now.saturating_duration_since(c.last_sent) >= self.cfg.heartbeat {
                self.write_frame(j, now, Vec::new(), None);
            }
        }
        self.write_queued();
    }

    fn flush(&mut self, _now: Instant) {
        self.write_queued();
    }

    fn pending(&self, to: u16) -> usize {
        self.conns[usize::from(to)]
            .as_ref()
            .map_or(0, |c| c.out_bytes)
    }

    /// Bytes queued here and those in the kernel's send queue the peer has not acknowledged: a
    /// frame written to the socket is still on its way until the peer's kernel has it (a peer
    /// cut off for a while leaves them there). Heartbeats written after the last message do not
    /// count (with 3 nodes or more, a delayed acknowledgement of one kept a job that could not
    /// go on from being seen as such: its reports flickered between 0 and 4 bytes).
    fn in_flight(&self, to: u16) -> usize {
        self.conns[usize::from(to)].as_ref().map_or(0, |c| {
            // Heartbeats are not messages: unacknowledged heartbeats alone (a peer that delays
            // its acknowledgements) are nothing on its way.
            (c.out_bytes + crate::sys::tcp_unacknowledged(c.stream.as_raw_fd()))
                .saturating_sub(c.trailing_heartbeats)
        })
    }

    fn rejected(&self) -> u64 {
        self.stats.rejected
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("frames sent", self.stats.frames_sent),
            ("frames received", self.stats.frames_received),
            ("bytes queued (socket full)", self.stats.queued_bytes),
            ("connections refused", self.stats.rejected),
        ]
    }
}

impl TcpTransport {
    /// Fills `ready` with what the epoll reports now.
    fn poll_epoll(&mut self) {
        self.ready.clear();
        if let Err(e) = self.epoll.ready(0, &mut self.ready) {
            log::warn!("epoll_wait: {e}");
        }
    }

    /// This node.
    pub fn id(&self) -> u16 {
        self.me
    }

    /// The job cookie.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_name_the_sender_and_check_the_cookie() {
        let h = hello(7, 3);
        assert_eq!(parse_hello(&h, 7, 4), Some(3));
        assert_eq!(parse_hello(&h, 8, 4), None);
        assert_eq!(parse_hello(&h, 7, 3), None);
        let mut bad = h;
        bad[0] = b'X';
        assert_eq!(parse_hello(&bad, 7, 4), None);
    }
}
