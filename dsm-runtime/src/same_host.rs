//! Nodes of one host read each other's pages in place (`same_host = memory`).
//!
//! Between nodes of one host, a grant's pages need not cross the transport: the home's memory
//! file is on the same machine. A home that lends a run (`RunData::Lent`: its own pages, every
//! write to them tracked) to a node of its host sends the grant's header alone
//! ([`codec::encode_grant_in_place`]), and the reader writes the pages into its own memory file
//! straight from a read-only mapping of the home's: one copy, made by the reader, where the
//! transport made three (the home's send, the reader's receive and its landing) and the home's
//! CPU made one of them. The grant is a lent run read at its delivery, the latest a transport
//! could read it: what the protocol already allows (the simulator reads lent runs then).
//!
//! Which nodes share the host: each node listens on a Unix socket in the abstract namespace,
//! named by a keyed hash of its node number (SipHash-2-4, the job's cookie the key: abstract
//! names are listed in `/proc/net/unix`, and one node's name tells nothing of the cookie or of
//! another's). That namespace belongs to a network namespace, so only processes of this host
//! and network namespace reach it: nodes of other hosts, or of network namespaces that stand
//! for hosts, are refused at once (`ECONNREFUSED`) and keep the transport. The first time a
//! home lends a run to a node, it connects to that node's name, checks that the listener is a
//! process of its own user (`SO_PEERCRED`: another user who took the name first gets nothing,
//! and that node gets its pages through the transport), and sends over the connection a
//! read-only descriptor of its memory file (`SCM_RIGHTS`) with a keyed hash of its node number
//! and region; only once that is queued does it send grants in place to the node, so the
//! reader finds the descriptor waiting by the time the grant comes (it maps it then). The
//! reader takes descriptors only from its own user's processes, with the hash right.
//!
//! A home never punches a hole in a page it lent in place (`PageMemory::discard`, a page cached
//! since its home moved away): a reader may still be about to read it.
//!
//! Called by the service thread and by fault handlers driving the node (signal context): after
//! start, system calls only (connect, send, accept, receive, map), bounded, and no logging;
//! what is allocated there is a mapping's `Arc`, once per node read.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsm_core::{PAGE_SIZE, PageNum};

use crate::sys;
use crate::sys::host_socket;

/// The system's error number of `e` (0 if none).
fn os_errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// The first bytes of an offer (a message carrying a memory file's descriptor).
const MAGIC: &[u8; 8] = b"DSMHOST2";
/// An offer: the magic, the sender's node, its region's length, their keyed hash.
const OFFER_BYTES: usize = 8 + 2 + 8 + 8;
/// How long a home waits before it offers its memory again to a node whose queue was full.
const RETRY_FULL: Duration = Duration::from_millis(10);

/// Whether a home sends its grants in place to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sending {
    /// Not offered yet.
    Untried,
    /// The node's queue of connections was full at this moment: offered again after
    /// [`RETRY_FULL`].
    Full(Instant),
    /// The descriptor is queued or taken there: grants go in place.
    InPlace,
    /// No such socket here (another host or network namespace, a node whose memory is not
    /// shared), or one of another user: grants go through the transport.
    Transport,
}

/// SipHash-2-4 of `msg` under the key `(k0, k1)` (Aumasson and Bernstein): a keyed hash whose
/// outputs tell nothing of the key or of each other.
fn siphash24((k0, k1): (u64, u64), msg: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let round = |v: &mut [u64; 4]| {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    };
    let compress = |v: &mut [u64; 4], m: u64| {
        v[3] ^= m;
        round(v);
        round(v);
        v[0] ^= m;
    };
    let mut words = msg.chunks_exact(8);
    for w in &mut words {
        compress(&mut v, u64::from_le_bytes(w.try_into().unwrap_or_default()));
    }
    let mut last = (msg.len() as u64) << 56;
    for (i, &b) in words.remainder().iter().enumerate() {
        last |= u64::from(b) << (8 * i);
    }
    compress(&mut v, last);
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The job's key for its names and offers, from its cookie.
fn key(cookie: u64) -> (u64, u64) {
    (cookie, cookie.rotate_left(32) ^ 0x5349_4d45_484f_5354)
}

/// The abstract socket name of node `node` of the job with `cookie`.
fn socket_name(cookie: u64, node: u16) -> Vec<u8> {
    let mut msg = *b"dsm name\0\0";
    msg[8..].copy_from_slice(&node.to_le_bytes());
    format!("dsm-{:016x}", siphash24(key(cookie), &msg)).into_bytes()
}

/// An offer of node `node`'s memory of `len` bytes in the job with `cookie`.
fn offer(cookie: u64, node: u16, len: u64) -> [u8; OFFER_BYTES] {
    let mut o = [0u8; OFFER_BYTES];
    o[..8].copy_from_slice(MAGIC);
    o[8..10].copy_from_slice(&node.to_le_bytes());
    o[10..18].copy_from_slice(&len.to_le_bytes());
    let mac = siphash24(key(cookie), &o[..18]);
    o[18..].copy_from_slice(&mac.to_le_bytes());
    o
}

/// One node's side: its socket, its memory offered to the host's other nodes, theirs mapped.
pub(crate) struct SameHost {
    me: u16,
    cookie: u64,
    len: usize,
    uid: u32,
    listening: OwnedFd,
    /// Connections accepted whose offer has not come yet (room for one per node, reserved).
    pending: Vec<OwnedFd>,
    /// This node's memory file, read-only: what it offers.
    own: OwnedFd,
    /// Every node's socket name (this node's own too).
    names: Vec<Vec<u8>>,
    sending: Vec<Sending>,
    /// Every node's memory, once it offered it and this node mapped it.
    memory: Vec<Option<Arc<host_socket::ReadOnlyMapping>>>,
    /// Pages granted in place by this node, and read in place here.
    pub sent_pages: u64,
    pub read_pages: u64,
    /// Offers refused here (another user, a wrong hash, no descriptor, unmappable), and why
    /// the last one was.
    pub refused: u64,
    last_refusal: Option<(&'static str, i32)>,
}

impl SameHost {
    /// Listens as node `me` (of a job of `nodes` with `cookie`), offering `file`, the node's
    /// memory file of `len` bytes, reopened read-only.
    pub fn new(
        me: u16,
        nodes: u16,
        cookie: u64,
        file: &OwnedFd,
        len: usize,
    ) -> std::io::Result<SameHost> {
        let names: Vec<Vec<u8>> = (0..nodes).map(|n| socket_name(cookie, n)).collect();
        let listening = host_socket::listen_abstract(&names[usize::from(me)])?;
        let own = host_socket::reopen_read_only(file)?;
        let mut sending = vec![Sending::Untried; usize::from(nodes)];
        sending[usize::from(me)] = Sending::Transport;
        Ok(SameHost {
            me,
            cookie,
            len,
            uid: sys::euid(),
            listening,
            pending: Vec::with_capacity(usize::from(nodes)),
            own,
            names,
            sending,
            memory: (0..nodes).map(|_| None).collect(),
            sent_pages: 0,
            read_pages: 0,
            refused: 0,
            last_refusal: None,
        })
    }

    /// Whether this node's grants to `to` go in place: offers its memory the first time
    /// (system calls only, no logging: fault handlers driving the node call it).
    pub fn sends_in_place(&mut self, to: u16, now: Instant) -> bool {
        let Some(state) = self.sending.get(usize::from(to)).copied() else {
            return false;
        };
        match state {
            Sending::InPlace => return true,
            Sending::Transport => return false,
            Sending::Full(at) if now.duration_since(at) < RETRY_FULL => return false,
            Sending::Full(_) | Sending::Untried => {}
        }
        let next = match self.offer_to(to) {
            Ok(true) => Sending::InPlace,
            Ok(false) => Sending::Transport,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::ENOBUFS)) => {
                Sending::Full(now)
            }
            Err(_) => Sending::Transport,
        };
        self.sending[usize::from(to)] = next;
        next == Sending::InPlace
    }

    /// Offers this node's memory to `to`: `Ok(false)` if its socket is another user's.
    fn offer_to(&self, to: u16) -> std::io::Result<bool> {
        let conn = host_socket::connect_abstract(&self.names[usize::from(to)])?;
        if host_socket::peer_uid(&conn)? != self.uid {
            return Ok(false);
        }
        let o = offer(self.cookie, self.me, self.len as u64);
        host_socket::send_with_fd(&conn, &o, self.own.as_fd())?;
        Ok(true)
    }

    /// Maps the memory every node offered since the last call (signal context: system calls,
    /// no logging).
    fn take_offers(&mut self) {
        // Connections accepted before their offer came (a home connects, then sends) are
        // read again; new ones join them, as many as there are nodes.
        while self.pending.len() < self.pending.capacity() {
            match host_socket::accept(&self.listening) {
                Ok(Some(c)) => self.pending.push(c),
                Ok(None) => break,
                Err(e) => {
                    self.refuse(("accepting an offer", os_errno(&e)));
                    break;
                }
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            match self.take_offer(i) {
                Ok(false) => i += 1,
                Ok(true) => drop(self.pending.swap_remove(i)),
                Err(why) => {
                    drop(self.pending.swap_remove(i));
                    self.refuse(why);
                }
            }
        }
    }

    /// Takes the offer on the pending connection `i`: `Ok(false)` if it has not come yet;
    /// `Err`: why not, and the system's error number (0 if none).
    fn take_offer(&mut self, i: usize) -> Result<bool, (&'static str, i32)> {
        let os = |what: &'static str| move |e: std::io::Error| (what, os_errno(&e));
        let conn = &self.pending[i];
        if host_socket::peer_uid(conn).map_err(os("asking who offered"))? != self.uid {
            return Err(("an offer from another user", 0));
        }
        let mut buf = [0u8; OFFER_BYTES + 1];
        let Some((n, fd)) =
            host_socket::recv_with_fd(conn, &mut buf).map_err(os("receiving an offer"))?
        else {
            return Ok(false);
        };
        let (Some(fd), OFFER_BYTES) = (fd, n) else {
            return Err(("a malformed offer", 0));
        };
        let node = u16::from_le_bytes([buf[8], buf[9]]);
        if buf[..OFFER_BYTES] != offer(self.cookie, node, self.len as u64)
            || node == self.me
            || usize::from(node) >= self.memory.len()
        {
            return Err(("an offer not of this job", 0));
        }
        if host_socket::file_size(&fd).map_err(os("the offered file's size"))? < self.len as u64 {
            return Err(("an offered file shorter than the region", 0));
        }
        if self.memory[usize::from(node)].is_none() {
            let m = host_socket::ReadOnlyMapping::new(&fd, self.len)
                .map_err(os("mapping an offered file"))?;
            // Pages read through it that the home has not backed yet get 4 KiB, as the
            // home's own faults give them.
            let _ = sys::small_pages_on_fault(m.base().cast_mut(), self.len);
            self.memory[usize::from(node)] = Some(Arc::new(m));
        }
        Ok(true)
    }

    fn refuse(&mut self, why: (&'static str, i32)) {
        self.refused += 1;
        self.last_refusal = Some(why);
    }

    /// Why the last offer was refused here, if one was (for the words on a grant that cannot
    /// be read).
    pub fn last_refusal(&self) -> Option<String> {
        let (what, errno) = self.last_refusal?;
        Some(if errno == 0 {
            format!("{} offers refused, the last: {what}", self.refused)
        } else {
            format!(
                "{} offers refused, the last: {what}: {}",
                self.refused,
                std::io::Error::from_raw_os_error(errno)
            )
        })
    }

    /// The `count` pages from `page` of node `from`'s memory, for a grant it sent in place.
    /// `Err`: why they cannot be read. The mapping's one allocation was made when it was
    /// mapped: here, an `Arc` is cloned.
    pub fn read(&mut self, from: u16, page: PageNum, count: u16) -> Result<InPlaceRun, ReadError> {
        let (off, len) = (page.index() * PAGE_SIZE, usize::from(count) * PAGE_SIZE);
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(ReadError::OutOfRegion);
        }
        let from = usize::from(from);
        if self.memory.get(from).is_some_and(Option::is_none) {
            self.take_offers();
        }
        match self.memory.get(from) {
            Some(Some(m)) => {
                self.read_pages += u64::from(count);
                // Mapped here with one call, not a fault per 16 pages as `pwrite` reads them.
                m.populate(off, len);
                Ok(InPlaceRun {
                    memory: Arc::clone(m),
                    off,
                    len,
                })
            }
            _ => Err(ReadError::NotMapped),
        }
    }
}

/// A run of another node's memory, read in place.
pub(crate) struct InPlaceRun {
    memory: Arc<host_socket::ReadOnlyMapping>,
    off: usize,
    len: usize,
}

impl InPlaceRun {
    /// Its bytes, as they are now (the home's threads may be writing them: see the module
    /// doc).
    pub fn bytes(&self) -> &[u8] {
        self.memory.bytes(self.off, self.len)
    }
}

/// Why a grant's pages could not be read in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The pages reach past the region: a malformed grant.
    OutOfRegion,
    /// The sender's memory is not mapped here (its descriptor never came, or did not map).
    NotMapped,
}

/// Whether `same_host = memory` can work here: the node's memory file, a socket, the
/// configuration. `None` (with the reason logged at debug level) where it cannot: the job then
/// moves every page through its transport.
pub(crate) fn start(
    me: u16,
    nodes: u16,
    cookie: u64,
    file: &OwnedFd,
    len: usize,
) -> Option<SameHost> {
    match SameHost::new(me, nodes, cookie, file, len) {
        Ok(s) => Some(s),
        Err(e) => {
            log::warn!(
                "node {me}: pages between nodes of this host go through the transport (no \
                 socket to share memory on: {e})"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(len: usize) -> (SameHost, SameHost, OwnedFd, OwnedFd) {
        let cookie = sys::random_u64();
        let fa = sys::memfd("same-host-a", len as u64).unwrap();
        let fb = sys::memfd("same-host-b", len as u64).unwrap();
        let a = SameHost::new(0, 2, cookie, &fa, len).unwrap();
        let b = SameHost::new(1, 2, cookie, &fb, len).unwrap();
        (a, b, fa, fb)
    }

    #[test]
    fn siphash_gives_the_papers_value() {
        // Aumasson and Bernstein, "SipHash: a fast short-input PRF", appendix A: key 00..0f,
        // message 00..0e.
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24((k0, k1), &msg), 0xa129_ca61_49be_45e5);
        // Names differ by node and by job, and do not show the cookie.
        assert_ne!(socket_name(7, 0), socket_name(7, 1));
        assert_ne!(socket_name(7, 0), socket_name(8, 0));
        assert!(!String::from_utf8_lossy(&socket_name(0xabcdef, 0)).contains("abcdef"));
    }

    #[test]
    fn a_home_offers_its_memory_once_and_the_reader_reads_its_pages_there() {
        let (mut home, mut reader, fa, _fb) = pair(16 * PAGE_SIZE);
        sys::write_file_at(&fa, &[7u8; PAGE_SIZE], 3 * PAGE_SIZE as u64).unwrap();
        assert_eq!(
            reader.read(0, PageNum(3), 1).err(),
            Some(ReadError::NotMapped),
            "nothing offered yet"
        );
        assert!(home.sends_in_place(1, Instant::now()));
        assert!(
            home.sends_in_place(1, Instant::now()),
            "offered once, then in place"
        );
        let run = reader.read(0, PageNum(3), 2).unwrap();
        let bytes = run.bytes();
        assert_eq!(bytes.len(), 2 * PAGE_SIZE);
        assert!(bytes[..PAGE_SIZE].iter().all(|&b| b == 7));
        assert!(bytes[PAGE_SIZE..].iter().all(|&b| b == 0));
        // Written after the offer: read as it is now.
        sys::write_file_at(&fa, &[9u8; PAGE_SIZE], 4 * PAGE_SIZE as u64).unwrap();
        let again = reader.read(0, PageNum(4), 1).unwrap();
        assert!(again.bytes().iter().all(|&b| b == 9));
        assert_eq!(reader.read_pages, 3);
        assert_eq!(
            reader.read(0, PageNum(15), 2).err(),
            Some(ReadError::OutOfRegion)
        );
        assert_eq!((reader.refused, reader.last_refusal()), (0, None));
    }

    #[test]
    fn a_connection_accepted_before_its_offer_came_is_read_again() {
        let (cookie, len) = (sys::random_u64(), 4 * PAGE_SIZE);
        let f = sys::memfd("same-host-d", len as u64).unwrap();
        let mut reader = SameHost::new(0, 2, cookie, &f, len).unwrap();
        let home_file = sys::memfd("same-host-e", len as u64).unwrap();
        sys::write_file_at(&home_file, &[3u8; PAGE_SIZE], 0).unwrap();
        let conn = host_socket::connect_abstract(&reader.names[0]).unwrap();
        assert_eq!(
            reader.read(1, PageNum(0), 1).err(),
            Some(ReadError::NotMapped),
            "connected, nothing sent yet"
        );
        assert_eq!((reader.refused, reader.pending.len()), (0, 1));
        host_socket::send_with_fd(&conn, &offer(cookie, 1, len as u64), home_file.as_fd()).unwrap();
        let run = reader.read(1, PageNum(0), 1).unwrap();
        assert!(run.bytes().iter().all(|&b| b == 3));
        assert_eq!((reader.refused, reader.pending.len()), (0, 0));
        // A connection closed before its offer: refused, not kept.
        drop(host_socket::connect_abstract(&reader.names[0]).unwrap());
        reader.take_offers();
        assert_eq!((reader.refused, reader.pending.len()), (1, 0));
    }

    #[test]
    fn a_node_without_a_socket_and_an_offer_of_another_job_are_refused() {
        let len = 4 * PAGE_SIZE;
        let (mut a, _b, _fa, _fb) = pair(len);
        // Node 1 of a job of three whose node 2 never listened.
        let f = sys::memfd("same-host-c", len as u64).unwrap();
        let mut three = SameHost::new(1, 3, sys::random_u64(), &f, len).unwrap();
        assert!(
            !three.sends_in_place(2, Instant::now()),
            "no socket: the transport"
        );
        assert!(!three.sends_in_place(1, Instant::now()), "not to itself");
        assert!(!three.sends_in_place(7, Instant::now()), "no such node");
        // An offer made with another job's key reaches node 0 of the pair: refused there.
        let mut other = SameHost::new(1, 2, sys::random_u64(), &f, len).unwrap();
        other.names[0] = a.names[0].clone();
        assert!(
            other.sends_in_place(0, Instant::now()),
            "sent: the sender cannot tell"
        );
        assert_eq!(a.read(1, PageNum(0), 1).err(), Some(ReadError::NotMapped));
        assert_eq!(a.refused, 1);
        let why = a.last_refusal().unwrap();
        assert!(why.contains("an offer not of this job"), "{why}");
    }
}
