//! Nodes of one host read each other's pages in place (`same_host = memory`).
//!
//! Between nodes of one host, a grant's pages need not cross the transport: the home's memory
//! file is on the same machine. A home that lends a run (`RunData::Lent`: its own pages, every
//! write to them tracked) to a node of its host sends the grant's header alone
//! ([`dsm_core::codec::encode_grant_in_place`]), and the reader writes the pages into its own
//! memory file straight from a read-only mapping of the home's: one copy, made by the reader,
//! where the transport made three (the home's send, the reader's receive and its landing) and
//! the home's CPU made one of them. The grant is a lent run read at its delivery, the latest a
//! transport could read it: what the protocol already allows (the simulator reads lent runs
//! then).
//!
//! The handshake, once per pair, started by the reader, which is the one that must end up
//! holding the home's memory:
//!
//! 1. Every node listens on a Unix socket (`SOCK_SEQPACKET`) in the abstract namespace, named
//!    by a keyed hash of its node number (SipHash-2-4 under the job's cookie: abstract names
//!    are listed in `/proc/net/unix`, and a name tells nothing of the cookie or of another's).
//!    The namespace is the network namespace's: nodes of other hosts, or of namespaces that
//!    stand for hosts, are refused at once (`ECONNREFUSED`) and keep the transport.
//! 2. Before its first request to a home, a reader connects to the home's name, checks that
//!    the listener runs as its own user (`SO_PEERCRED`), and asks: its number and a keyed hash
//!    of it (only the job's nodes know the key).
//! 3. The home, the first time it would lend a run to that reader (the request came after the
//!    question, so the question waits on its socket), accepts what waits there: a question of
//!    its own user with the right hash is answered on its connection with a read-only
//!    descriptor of its memory file (`SCM_RIGHTS`) and a keyed hash of the home's number; a
//!    connection of its own user whose question has not come yet is kept (up to 256, the
//!    oldest let go first) and looked at again at the next such moment, until no reader is
//!    left undecided; anything else is closed. Only once that answer is sent do the home's
//!    grants to the reader go in place; a reader that did not ask gets them through the
//!    transport.
//! 4. The reader, given its first grant in place by a home, reads the answer waiting on its
//!    own connection (sent before the grant), checks its hash and the file's size, and maps
//!    the file read-only.
//!
//! Another user, or garbage on a socket, can at most make a pair fall back to the transport
//! (a full queue of connections, a question crowded out): never hand a node a false memory,
//! get one, or fail a job.
//!
//! A home never punches a hole in a page it lent in place (`PageMemory::discard`, a page cached
//! since its home moved away): a reader may still be about to read it.
//!
//! Called by the service thread and by fault handlers driving the node (signal context): after
//! start, system calls only (connect, send, accept, receive, map), bounded, and no logging;
//! what is allocated there is a mapping's `Arc`, once per node read.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use dsm_core::{PAGE_SIZE, PageNum};

use crate::sys;
use crate::sys::host_socket;

/// A question: the magic, the reader's node, its region's length, their keyed hash.
const ASK: &[u8; 8] = b"DSMASK03";
/// An answer (with the home's memory file): the magic, the home's node, its region's length,
/// their keyed hash.
const ANSWER: &[u8; 8] = b"DSMMEM03";
/// Bytes of a question or an answer.
const MESSAGE_BYTES: usize = 8 + 2 + 8 + 8;
/// Connections a home takes from its socket at once, at most (beyond them, questions wait for
/// its next look, or crowd out: that pair keeps the transport).
const TAKEN_AT_ONCE: usize = 256;

/// A system call's error as a refusal: what was being done, and the system's error number (0
/// if none), for `map_err`.
fn os(what: &'static str) -> impl Fn(std::io::Error) -> (&'static str, i32) {
    move |e| (what, e.raw_os_error().unwrap_or(0))
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

/// The job's key for its names, questions and answers, from its cookie.
fn key(cookie: u64) -> (u64, u64) {
    (cookie, cookie.rotate_left(32) ^ 0x5349_4d45_484f_5354)
}

/// The abstract socket name of node `node` of the job with `cookie`.
fn socket_name(cookie: u64, node: u16) -> Vec<u8> {
    let mut msg = *b"dsm name\0\0";
    msg[8..].copy_from_slice(&node.to_le_bytes());
    format!("dsm-{:016x}", siphash24(key(cookie), &msg)).into_bytes()
}

/// A question (`ASK`) or an answer (`ANSWER`) of node `node` of `len` bytes in the job with
/// `cookie`.
fn message(magic: &[u8; 8], cookie: u64, node: u16, len: u64) -> [u8; MESSAGE_BYTES] {
    let mut o = [0u8; MESSAGE_BYTES];
    o[..8].copy_from_slice(magic);
    o[8..10].copy_from_slice(&node.to_le_bytes());
    o[10..18].copy_from_slice(&len.to_le_bytes());
    let mac = siphash24(key(cookie), &o[..18]);
    o[18..].copy_from_slice(&mac.to_le_bytes());
    o
}

/// What this node, as a home, does with its grants to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sending {
    /// Nothing decided: the node's question is looked for at the first grant.
    Untried,
    /// Answered: grants go in place.
    InPlace,
    /// No question came (another host, a node not sharing, crowded out): the transport.
    Transport,
}

/// What this node, as a reader, knows of a home's memory.
enum Reading {
    /// Not asked yet.
    Untried,
    /// Asked on this connection: the answer comes before the home's first grant in place.
    Asked(OwnedFd),
    /// Mapped here.
    Mapped(Arc<host_socket::ReadOnlyMapping>),
    /// Not to be read here (no socket there, another user's, the question not sent, the
    /// answer refused: why in `SameHost::last_refusal`).
    No,
}

/// What a connection to this node's socket brought.
enum Heard {
    /// A valid question of this node.
    Question(u16),
    /// Nothing yet, from a process of this user: its question may still come.
    NotYet,
    /// Nothing to answer.
    Nothing,
}

/// One node's side: its socket, the homes' memory it asked for or mapped, and what it decided
/// for its own grants.
pub(crate) struct SameHost {
    me: u16,
    cookie: u64,
    len: usize,
    uid: u32,
    listening: OwnedFd,
    /// This node's memory file, read-only: what it answers with.
    own: OwnedFd,
    /// Every node's socket name (this node's own too).
    names: Vec<Vec<u8>>,
    sending: Vec<Sending>,
    reading: Vec<Reading>,
    /// Connections of this user accepted before their question came (a reader connects, then
    /// sends it: another reader's first grant may accept in between): looked at again at the
    /// next answer, [`TAKEN_AT_ONCE`] at most (the oldest let go first), and closed once every
    /// reader is decided.
    unasked: VecDeque<OwnedFd>,
    /// Pages granted in place by this node, and read in place here.
    pub sent_pages: u64,
    pub read_pages: u64,
    /// Questions that could not be asked and answers refused here, and why the last one was
    /// (with the system's error number, or 0).
    refused: u64,
    last_refusal: Option<(&'static str, i32)>,
}

impl SameHost {
    /// Listens as node `me` (of a job of `nodes` with `cookie`), answering with `file`, the
    /// node's memory file of `len` bytes, reopened read-only.
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
        let mut reading: Vec<Reading> = (0..nodes).map(|_| Reading::Untried).collect();
        reading[usize::from(me)] = Reading::No;
        Ok(SameHost {
            me,
            cookie,
            len,
            uid: sys::euid(),
            listening,
            own,
            names,
            sending,
            reading,
            unasked: VecDeque::new(),
            sent_pages: 0,
            read_pages: 0,
            refused: 0,
            last_refusal: None,
        })
    }

    /// Before this node's first request to `home`: asks for its memory (once; system calls
    /// only, no logging).
    pub fn ask(&mut self, home: u16) {
        let Some(Reading::Untried) = self.reading.get(usize::from(home)) else {
            return;
        };
        self.reading[usize::from(home)] = match self.question_to(home) {
            Ok(conn) => Reading::Asked(conn),
            Err(why) => {
                // No socket there is the rule between hosts, not a refusal.
                if why.1 != libc::ECONNREFUSED {
                    self.refuse(why);
                }
                Reading::No
            }
        };
    }

    fn question_to(&self, home: u16) -> Result<OwnedFd, (&'static str, i32)> {
        let conn = host_socket::connect_abstract(&self.names[usize::from(home)])
            .map_err(os("connecting to the home's socket"))?;
        if host_socket::peer_uid(&conn).map_err(os("asking who listens"))? != self.uid {
            return Err(("the home's socket is another user's", 0));
        }
        let q = message(ASK, self.cookie, self.me, self.len as u64);
        host_socket::send(&conn, &q).map_err(os("asking the home"))?;
        Ok(conn)
    }

    /// Whether this node's grants to `to` go in place: decided at the first, by the question
    /// `to` asked before its first request (system calls only, no logging: fault handlers
    /// driving the node call it).
    pub fn sends_in_place(&mut self, to: u16) -> bool {
        match self.sending.get(usize::from(to)).copied() {
            Some(Sending::InPlace) => true,
            Some(Sending::Untried) => {
                self.answer_questions();
                let state = &mut self.sending[usize::from(to)];
                if *state == Sending::Untried {
                    *state = Sending::Transport;
                }
                let in_place = *state == Sending::InPlace;
                if !self.sending.contains(&Sending::Untried) {
                    // Every reader decided: no question is waited for.
                    self.unasked.clear();
                }
                in_place
            }
            Some(Sending::Transport) | None => false,
        }
    }

    /// Answers the questions waiting on this node's socket (on connections accepted before
    /// their question came too), closes everything else there.
    fn answer_questions(&mut self) {
        let earlier = std::mem::take(&mut self.unasked);
        let accepted = std::iter::from_fn(|| host_socket::accept(&self.listening).ok().flatten());
        let conns: Vec<OwnedFd> = earlier
            .into_iter()
            .chain(accepted.take(TAKEN_AT_ONCE))
            .collect();
        for conn in conns {
            match self.question_on(&conn) {
                Heard::Question(reader) => {
                    let a = message(ANSWER, self.cookie, self.me, self.len as u64);
                    if host_socket::send_with_fd(&conn, &a, self.own.as_fd()).is_ok()
                        && self.sending[usize::from(reader)] == Sending::Untried
                    {
                        self.sending[usize::from(reader)] = Sending::InPlace;
                    }
                }
                Heard::NotYet => {
                    if self.unasked.len() == TAKEN_AT_ONCE {
                        self.unasked.pop_front();
                    }
                    self.unasked.push_back(conn);
                }
                Heard::Nothing => {}
            }
        }
    }

    /// What waits on `conn`: a valid question, nothing yet from one of this user, or nothing
    /// to wait for (another user's, not a question, or closed).
    fn question_on(&self, conn: &OwnedFd) -> Heard {
        if host_socket::peer_uid(conn).ok() != Some(self.uid) {
            return Heard::Nothing;
        }
        let mut buf = [0u8; MESSAGE_BYTES + 1];
        let (n, fd) = match host_socket::recv_with_fd(conn, &mut buf) {
            Ok(Some(got)) => got,
            Ok(None) => return Heard::NotYet,
            Err(_) => return Heard::Nothing,
        };
        let reader = u16::from_le_bytes([buf[8], buf[9]]);
        let valid = n == MESSAGE_BYTES
            && fd.is_none()
            && buf[..n] == message(ASK, self.cookie, reader, self.len as u64)
            && reader != self.me
            && usize::from(reader) < self.sending.len();
        if valid {
            Heard::Question(reader)
        } else {
            Heard::Nothing
        }
    }

    /// Maps `home`'s memory from the answer waiting on the connection this node asked on.
    fn take_answer(&mut self, home: u16) {
        let reading = std::mem::replace(&mut self.reading[usize::from(home)], Reading::No);
        let Reading::Asked(conn) = reading else {
            self.reading[usize::from(home)] = reading;
            return;
        };
        match self.answer_on(&conn, home) {
            Ok(m) => self.reading[usize::from(home)] = Reading::Mapped(Arc::new(m)),
            Err(why) => self.refuse(why),
        }
    }

    fn answer_on(
        &self,
        conn: &OwnedFd,
        home: u16,
    ) -> Result<host_socket::ReadOnlyMapping, (&'static str, i32)> {
        let mut buf = [0u8; MESSAGE_BYTES + 1];
        let Some((n, fd)) =
            host_socket::recv_with_fd(conn, &mut buf).map_err(os("receiving the answer"))?
        else {
            return Err(("no answer came", 0));
        };
        let (Some(fd), MESSAGE_BYTES) = (fd, n) else {
            return Err(("a malformed answer", 0));
        };
        if buf[..n] != message(ANSWER, self.cookie, home, self.len as u64) {
            return Err(("an answer not of this job's home", 0));
        }
        if host_socket::file_size(&fd).map_err(os("the answered file's size"))? < self.len as u64 {
            return Err(("an answered file shorter than the region", 0));
        }
        let m = host_socket::ReadOnlyMapping::new(fd, self.len)
            .map_err(os("mapping the home's memory"))?;
        // Pages read through it that the home has not backed yet get 4 KiB, as the home's own
        // faults give them.
        let _ = sys::small_pages_on_fault(m.base().cast_mut(), self.len);
        Ok(m)
    }

    fn refuse(&mut self, why: (&'static str, i32)) {
        self.refused += 1;
        self.last_refusal = Some(why);
    }

    /// Why the last answer was refused here, if one was (for the words on a grant that cannot
    /// be read).
    pub fn last_refusal(&self) -> Option<String> {
        let (what, errno) = self.last_refusal?;
        Some(if errno == 0 {
            format!("{} refused, the last: {what}", self.refused)
        } else {
            format!(
                "{} refused, the last: {what}: {}",
                self.refused,
                std::io::Error::from_raw_os_error(errno)
            )
        })
    }

    /// The `count` pages from `page` of node `from`'s memory, for a grant it sent in place;
    /// with `copied`, mapped here ahead of their copying. `Err`: why they cannot be read. The
    /// mapping's one allocation was made when it was mapped: here, an `Arc` is cloned.
    pub fn read(
        &mut self,
        from: u16,
        page: PageNum,
        count: u16,
        copied: bool,
    ) -> Result<InPlaceRun, ReadError> {
        let (off, len) = (page.index() * PAGE_SIZE, usize::from(count) * PAGE_SIZE);
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(ReadError::OutOfRegion);
        }
        if matches!(self.reading.get(usize::from(from)), Some(Reading::Asked(_))) {
            self.take_answer(from);
        }
        match self.reading.get(usize::from(from)) {
            Some(Reading::Mapped(m)) => {
                self.read_pages += u64::from(count);
                // Mapped here with one call, not a fault per 16 pages as `pwrite` reads them.
                if copied {
                    m.populate(off, len);
                }
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

impl SameHost {
    /// Whether this node reads `home`'s memory in place, or has asked to (its answer comes
    /// before the home's first grant in place).
    pub fn reads_from(&self, home: u16) -> bool {
        matches!(
            self.reading.get(usize::from(home)),
            Some(Reading::Mapped(_) | Reading::Asked(_))
        )
    }

    /// `home`'s memory as mapped here, if it is.
    pub fn mapping(&self, home: u16) -> Option<&host_socket::ReadOnlyMapping> {
        match self.reading.get(usize::from(home)) {
            Some(Reading::Mapped(m)) => Some(m),
            _ => None,
        }
    }

    /// The node whose memory, mapped here, holds the byte at `at`, if any (to name it when its
    /// bytes could not be read).
    pub fn whose(&self, at: *const u8) -> Option<u16> {
        self.reading
            .iter()
            .position(|r| match r {
                Reading::Mapped(m) => {
                    (m.base() as usize..m.base() as usize + self.len).contains(&(at as usize))
                }
                _ => false,
            })
            .map(|n| n as u16)
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
    /// The sender's memory is not mapped here (never asked for, its answer refused, or not
    /// mappable).
    NotMapped,
}

/// This node's side of `same_host = memory`: its socket listening and its memory file reopened
/// read-only. `None` (with a warning that says why) where that cannot be made: this node's
/// pages then move through the transport, to and from every node.
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
    fn a_reader_asks_the_home_answers_and_the_reader_reads_its_pages_there() {
        let (mut home, mut reader, fa, _fb) = pair(16 * PAGE_SIZE);
        sys::write_file_at(&fa, &[7u8; PAGE_SIZE], 3 * PAGE_SIZE as u64).unwrap();
        reader.ask(0);
        reader.ask(0);
        assert!(home.sends_in_place(1));
        assert!(home.sends_in_place(1), "answered once, then in place");
        let run = reader.read(0, PageNum(3), 2, true).unwrap();
        let bytes = run.bytes();
        assert_eq!(bytes.len(), 2 * PAGE_SIZE);
        assert!(bytes[..PAGE_SIZE].iter().all(|&b| b == 7));
        assert!(bytes[PAGE_SIZE..].iter().all(|&b| b == 0));
        assert_eq!(reader.read_pages, 2);
        // Bytes of the run are named as the home's (an unreadable grant's message), others not.
        assert_eq!(reader.whose(bytes[PAGE_SIZE..].as_ptr()), Some(0));
        assert_eq!(reader.whose([0u8; 4].as_ptr()), None);
        assert_eq!(
            home.whose(bytes.as_ptr()),
            None,
            "the home maps no one's memory"
        );
        assert_eq!(
            reader.read(0, PageNum(15), 2, true).err(),
            Some(ReadError::OutOfRegion)
        );
        assert_eq!((reader.refused, reader.last_refusal()), (0, None));
    }

    #[test]
    fn the_home_reads_memory_as_it_is_when_read() {
        let (mut home, mut reader, fa, _fb) = pair(8 * PAGE_SIZE);
        reader.ask(0);
        assert!(home.sends_in_place(1));
        sys::write_file_at(&fa, &[9u8; PAGE_SIZE], 4 * PAGE_SIZE as u64).unwrap();
        let run = reader.read(0, PageNum(4), 1, true).unwrap();
        assert!(run.bytes().iter().all(|&b| b == 9));
    }

    #[test]
    fn a_reader_that_did_not_ask_gets_the_transport_and_strangers_are_closed() {
        let len = 4 * PAGE_SIZE;
        let (mut home, mut reader, _fa, _fb) = pair(len);
        // Idle connections, garbage and another job's question before the reader's own.
        let idle = host_socket::connect_abstract(&home.names[0]).unwrap();
        let junk = host_socket::connect_abstract(&home.names[0]).unwrap();
        host_socket::send(&junk, b"garbage").unwrap();
        let other = host_socket::connect_abstract(&home.names[0]).unwrap();
        host_socket::send(&other, &message(ASK, sys::random_u64(), 1, len as u64)).unwrap();
        reader.ask(0);
        assert!(
            home.sends_in_place(1),
            "the reader's question found among them"
        );
        let mut buf = [0u8; 64];
        for (what, conn) in [("garbage", &junk), ("another job", &other)] {
            let got = host_socket::recv_with_fd(conn, &mut buf).unwrap();
            assert!(
                got.is_some_and(|(n, fd)| n == 0 && fd.is_none()),
                "{what}: closed without an answer"
            );
        }
        // An idle connection of this user was kept while a reader was undecided; with every
        // reader decided, none is waited for: closed without an answer.
        assert!(home.unasked.is_empty());
        let got = host_socket::recv_with_fd(&idle, &mut buf).unwrap();
        assert!(
            got.is_some_and(|(n, fd)| n == 0 && fd.is_none()),
            "idle: closed"
        );
        assert!(reader.read(0, PageNum(0), 1, true).is_ok());
        // A node of a job of three that never asked: the transport, for good.
        let f = sys::memfd("same-host-c", len as u64).unwrap();
        let mut three = SameHost::new(0, 3, sys::random_u64(), &f, len).unwrap();
        assert!(!three.sends_in_place(2));
        assert!(!three.sends_in_place(0), "not to itself");
        assert!(!three.sends_in_place(7), "no such node");
        // Asking a node that does not listen: nothing to read, and no refusal counted.
        three.ask(1);
        assert_eq!(
            three.read(1, PageNum(0), 1, true).err(),
            Some(ReadError::NotMapped)
        );
        assert_eq!(three.last_refusal(), None);
    }

    /// A reader whose connection the home accepted before its question came (another reader's
    /// first grant took it between the reader's connect and its send) is answered once the
    /// question comes: it once fell back to the transport without a word.
    #[test]
    fn a_question_that_comes_after_its_connection_was_taken_is_answered() {
        let len = 4 * PAGE_SIZE;
        let cookie = sys::random_u64();
        let files: Vec<OwnedFd> = (0..3)
            .map(|_| sys::memfd("same-host", len as u64).unwrap())
            .collect();
        let mut nodes: Vec<SameHost> = (0..3)
            .map(|n| SameHost::new(n, 3, cookie, &files[usize::from(n)], len).unwrap())
            .collect();
        // Node 1 has connected to node 0 and not yet sent its question; node 2 asks in full.
        let conn = host_socket::connect_abstract(&nodes[0].names[0]).unwrap();
        nodes[2].ask(0);
        assert!(nodes[0].sends_in_place(2));
        assert_eq!(nodes[0].unasked.len(), 1, "node 1's connection, kept");
        host_socket::send(&conn, &message(ASK, cookie, 1, len as u64)).unwrap();
        nodes[1].reading[0] = Reading::Asked(conn);
        assert!(
            nodes[0].sends_in_place(1),
            "node 1's late question answered"
        );
        assert!(nodes[0].unasked.is_empty());
        assert!(nodes[1].read(0, PageNum(1), 2, true).is_ok());
        assert!(nodes[2].read(0, PageNum(0), 1, true).is_ok());
    }

    #[test]
    fn an_answer_of_another_jobs_home_is_refused() {
        let len = 4 * PAGE_SIZE;
        let (_home, mut reader, _fa, _fb) = pair(len);
        let f = sys::memfd("same-host-d", len as u64).unwrap();
        let mut stranger = SameHost::new(0, 2, sys::random_u64(), &f, len).unwrap();
        reader.names[0] = stranger.names[0].clone();
        reader.ask(0);
        assert!(
            !stranger.sends_in_place(1),
            "its question is not of this job"
        );
        assert_eq!(
            reader.read(0, PageNum(0), 1, true).err(),
            Some(ReadError::NotMapped)
        );
        let why = reader.last_refusal().unwrap();
        assert!(
            why.contains("no answer came") || why.contains("malformed"),
            "{why}"
        );
    }
}
