//! The wire format of protocol messages.
//!
//! A frame is a fixed header followed by the message's payload, all little-endian:
//!
//! ```text
//! magic u16 = 0x4A44 ("DJ")  version u8 = VERSION  kind u8  cookie u64  from u16  payload_len u32
//! payload[payload_len]
//! ```
//!
//! Only the real payload travels: a lock grant with no write notices is a header and ten bytes.
//! The decoder checks every length against the bytes actually present before it allocates, accepts
//! no trailing bytes, validates diffs, and returns a [`DecodeError`] on any malformed input. It
//! never panics, whatever the bytes.

use std::sync::Arc;

use crate::diff;
use crate::mailbox::{Channel, MAX_LETTER_BYTES};
use crate::msg::{Msg, MsgKind, PageDiff, RunData, WriteId, WriteNotice};
use crate::types::{
    Access, AtomicOp, CvId, LockId, MAX_CVS, MAX_GETP_PAGES, MAX_LOCKS, NodeId, PAGE_SIZE, PageNum,
};

/// First two bytes of every frame.
pub const MAGIC: u16 = 0x4A44;
/// The wire format's version (19: a barrier carries its sender's allocation calls and pages
/// beside their digest).
pub const VERSION: u8 = 19;
/// Bytes of the frame header.
pub const HEADER_BYTES: usize = 18;
/// The payload of a page grant before its pages: the first page's number and the page count
/// (its top bit set in a grant sent on the home's behalf, [`Msg::Forward`]).
pub const GRANT_HEADER_BYTES: usize = 4 + 2;
/// The top bit of a grant's page count: sent on the home's behalf.
const GRANT_FORWARDED: u16 = 1 << 15;
/// The next bit of a grant's page count: the pages are not in the frame but in the sender's
/// memory, which its receiver reads in place ([`encode_grant_in_place`]).
const GRANT_IN_PLACE: u16 = 1 << 14;
/// The most pages one grant carries (1 MiB): a run longer than that travels as several grants.
pub const MAX_RUN_PAGES: usize = 256;

/// The longest error text carried by [`Msg::Error`].
pub const MAX_ERROR_TEXT_BYTES: usize = 4096;

const NO_WRITER: u16 = u16::MAX;

/// The header fields of a decoded frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The job's cookie.
    pub cookie: u64,
    /// The sending node.
    pub from: NodeId,
}

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the header or the header's payload length.
    #[error("frame truncated: needed {needed} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        have: usize,
    },
    /// The frame does not start with the magic number.
    #[error("bad magic {0:#06x}")]
    BadMagic(u16),
    /// A version this build does not speak.
    #[error("unsupported wire version {0} (this build speaks {VERSION})")]
    BadVersion(u8),
    /// An unknown message type.
    #[error("unknown message kind {0}")]
    BadKind(u8),
    /// More bytes than the payload length says, or payload bytes left after the message.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    /// A field holds an impossible value.
    #[error("bad value in field {field}: {value}")]
    BadValue {
        /// Which field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A diff inside the message is malformed.
    #[error("malformed diff: {0}")]
    Diff(#[from] diff::DiffError),
}

/// Appends a whole frame (header and payload) for `msg` to `out`. A grant whose run is lent
/// ([`RunData::Lent`]) is its sender's to finish with its memory's bytes (see
/// [`encode_frame_head`]): here its frame would end short, and its receiver refuse it.
pub fn encode_frame(cookie: u64, from: NodeId, msg: &Msg, out: &mut Vec<u8>) {
    match encode_frame_head(cookie, from, msg, out) {
        Some(RunData::Copied(body)) => out.extend_from_slice(body),
        Some(RunData::Lent(_)) => debug_assert!(false, "a lent run encoded without its bytes"),
        None => {}
    }
}

/// Appends `msg`'s frame to `out` but for a grant's page bytes, whose run it returns: the frame
/// is `out`'s new bytes followed by them (a transport writes the two without joining them; a
/// lent run's bytes are the sender's memory's).
pub fn encode_frame_head<'m>(
    cookie: u64,
    from: NodeId,
    msg: &'m Msg,
    out: &mut Vec<u8>,
) -> Option<&'m RunData> {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(msg.kind() as u8);
    out.extend_from_slice(&cookie.to_le_bytes());
    out.extend_from_slice(&from.0.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let payload_start = out.len();
    encode_payload(msg, out);
    let body = match msg {
        Msg::GetPageGrant { data, .. } => Some(data),
        _ => None,
    };
    let len = (out.len() - payload_start + body.map_or(0, |b| b.len())) as u32;
    out[start + 14..start + 18].copy_from_slice(&len.to_le_bytes());
    body
}

/// Appends the frame of a page grant whose `count` pages from `page` stay in the sender's
/// memory: a node of the same host, which has that memory mapped, reads them there
/// ([`Frame::GrantInPlace`]). The frame is the grant's header alone.
pub fn encode_grant_in_place(
    cookie: u64,
    from: NodeId,
    (page, count): (PageNum, u16),
    forwarded: bool,
    out: &mut Vec<u8>,
) {
    debug_assert!(count >= 1 && usize::from(count) <= MAX_RUN_PAGES);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(MsgKind::GetPageGrant as u8);
    out.extend_from_slice(&cookie.to_le_bytes());
    out.extend_from_slice(&from.0.to_le_bytes());
    out.extend_from_slice(&(GRANT_HEADER_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&page.0.to_le_bytes());
    let flags = GRANT_IN_PLACE | if forwarded { GRANT_FORWARDED } else { 0 };
    out.extend_from_slice(&(count | flags).to_le_bytes());
}

/// The length of `msg`'s frame in bytes, without encoding it.
pub fn frame_len(msg: &Msg) -> usize {
    HEADER_BYTES + payload_len(msg)
}

fn payload_len(msg: &Msg) -> usize {
    match msg {
        Msg::GetPage { pages, .. } => 1 + 8 + 4 + 4 * pages.len(),
        Msg::GetPageGrant { data, .. } => GRANT_HEADER_BYTES + data.len(),
        Msg::Diff { diffs, .. } => {
            8 + 4 + diffs.iter().map(|d| 4 + 4 + d.runs.len()).sum::<usize>()
        }
        Msg::DiffGrant { .. } => 8,
        Msg::Acquire { .. } => 2 + 8 + 8 + 1,
        Msg::AcquireGrant {
            notices, earlier, ..
        } => 2 + 8 + 4 + 4 * notices.len() + 4 + 4 * earlier.len(),
        Msg::Release {
            notices, earlier, ..
        } => 2 + 8 + 4 + 4 * notices.len() + 4 + 4 * earlier.len(),
        Msg::Barrier {
            notices, claims, ..
        } => 8 + 8 + 4 + 4 + 2 + 4 + 4 * notices.len() + 4 + 4 * claims.len(),
        Msg::BarrierGrant { notices, .. } => 8 + 4 + 7 * notices.len(),
        Msg::Wait { .. } | Msg::WaitGrant { .. } => 8,
        Msg::Migrated { vetoes: pages, .. } | Msg::MigrateGrant { vetoed: pages, .. } => {
            8 + 4 + 4 * pages.len()
        }
        Msg::SetCv { notices, .. } => 2 + 8 + 4 + 4 * notices.len(),
        Msg::ResetCv { .. } | Msg::LockWanted { .. } => 2,
        Msg::WaitCv { .. } => 2 + 8,
        Msg::CvGrant { notices, .. } => 2 + 8 + 4 + 4 * notices.len(),
        Msg::Exit { stats } => 4 + 8 * stats.len(),
        Msg::ExitGrant => 0,
        Msg::Error { text } => 4 + text.len().min(MAX_ERROR_TEXT_BYTES),
        Msg::Send { data, .. } => 1 + 4 + 4 + data.len(),
        Msg::Forward { .. } | Msg::ForwardRefused { .. } => 2 + 4 + 2,
        Msg::Atomic {
            notices,
            earlier,
            passed_on,
            ..
        } => {
            // id, address, width, operation and its operands, flags, seen, epoch, passed.
            let head = 4 + 8 + 1 + 1 + 8 + 8 + 1 + 8 + 8 + 8;
            head + writes_len(notices) + writes_len(earlier) + write_ids_len(passed_on)
        }
        Msg::AtomicGrant { notices, .. } => 4 + 8 + 8 + 4 + write_ids_len(notices),
    }
}

fn put_pages(out: &mut Vec<u8>, pages: &[PageNum]) {
    out.extend_from_slice(&(pages.len() as u32).to_le_bytes());
    for p in pages {
        out.extend_from_slice(&p.0.to_le_bytes());
    }
}

/// The fewest bytes of an [`WriteId`]: page u32, writer u16, then its interval and epoch
/// as LEB128 varints (one byte each at least; an acquire's grant names tens of writes, and
/// their intervals and epochs are small numbers: 8-12 bytes a notice rather than 22).
const WRITE_ID_MIN_BYTES: usize = 4 + 2 + 1 + 1;

/// The bytes of `v` as an LEB128 varint.
fn varint_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).div_ceil(7).max(1)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Pages, each with the interval of its last write: page u32, interval varint.
fn writes_len(writes: &[(PageNum, u64)]) -> usize {
    4 + writes
        .iter()
        .map(|&(_, s)| 4 + varint_len(s))
        .sum::<usize>()
}

fn put_writes(out: &mut Vec<u8>, writes: &[(PageNum, u64)]) {
    out.extend_from_slice(&(writes.len() as u32).to_le_bytes());
    for &(p, s) in writes {
        out.extend_from_slice(&p.0.to_le_bytes());
        put_varint(out, s);
    }
}

fn write_ids_len(notices: &[WriteId]) -> usize {
    4 + notices
        .iter()
        .map(|n| 4 + 2 + varint_len(n.interval) + varint_len(n.epoch))
        .sum::<usize>()
}

fn put_write_ids(out: &mut Vec<u8>, notices: &[WriteId]) {
    out.extend_from_slice(&(notices.len() as u32).to_le_bytes());
    for n in notices {
        out.extend_from_slice(&n.page.0.to_le_bytes());
        out.extend_from_slice(&n.writer.0.to_le_bytes());
        put_varint(out, n.interval);
        put_varint(out, n.epoch);
    }
}

/// An atomic operation's wire form: a tag and two operands (unused ones zero).
fn atomic_op_fields(op: AtomicOp) -> (u8, u64, u64) {
    match op {
        AtomicOp::Load => (0, 0, 0),
        AtomicOp::Store(v) => (1, v, 0),
        AtomicOp::Swap(v) => (2, v, 0),
        AtomicOp::CompareExchange { expected, new } => (3, expected, new),
        AtomicOp::FetchAdd(v) => (4, v, 0),
        AtomicOp::FetchSub(v) => (5, v, 0),
        AtomicOp::FetchAnd(v) => (6, v, 0),
        AtomicOp::FetchOr(v) => (7, v, 0),
        AtomicOp::FetchXor(v) => (8, v, 0),
    }
}

/// The inverse of [`atomic_op_fields`]; `None` for an unknown tag or an operand an operation
/// does not take.
fn atomic_op_from(tag: u8, a: u64, b: u64) -> Option<AtomicOp> {
    let one = |op: fn(u64) -> AtomicOp| (b == 0).then_some(op(a));
    match tag {
        0 => (a == 0 && b == 0).then_some(AtomicOp::Load),
        1 => one(AtomicOp::Store),
        2 => one(AtomicOp::Swap),
        3 => Some(AtomicOp::CompareExchange {
            expected: a,
            new: b,
        }),
        4 => one(AtomicOp::FetchAdd),
        5 => one(AtomicOp::FetchSub),
        6 => one(AtomicOp::FetchAnd),
        7 => one(AtomicOp::FetchOr),
        8 => one(AtomicOp::FetchXor),
        _ => None,
    }
}

fn encode_payload(msg: &Msg, out: &mut Vec<u8>) {
    match msg {
        Msg::GetPage {
            access,
            pages,
            passed,
        } => {
            out.push(match access {
                Access::Read => 0,
                Access::Write => 1,
            });
            out.extend_from_slice(&passed.to_le_bytes());
            put_pages(out, pages);
        }
        Msg::GetPageGrant {
            page,
            data,
            forwarded,
        } => {
            // The page bytes follow (`encode_frame_head` hands them back, unjoined).
            debug_assert!(
                !data.is_empty() && data.len() % PAGE_SIZE == 0,
                "a grant carries whole pages"
            );
            out.extend_from_slice(&page.0.to_le_bytes());
            let count = (data.len() / PAGE_SIZE) as u16;
            let flag = if *forwarded { GRANT_FORWARDED } else { 0 };
            out.extend_from_slice(&(count | flag).to_le_bytes());
        }
        Msg::Atomic {
            id,
            addr,
            width,
            op,
            acquire,
            release,
            seen,
            epoch,
            in_barrier,
            passed,
            notices,
            earlier,
            passed_on,
        } => {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&addr.to_le_bytes());
            out.push(*width);
            let (tag, a, b) = atomic_op_fields(*op);
            out.push(tag);
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
            out.push(u8::from(*acquire) | u8::from(*release) << 1 | u8::from(*in_barrier) << 2);
            out.extend_from_slice(&seen.to_le_bytes());
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&passed.to_le_bytes());
            put_writes(out, notices);
            put_writes(out, earlier);
            put_write_ids(out, passed_on);
        }
        Msg::AtomicGrant {
            id,
            old,
            counter,
            changes,
            notices,
        } => {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&old.to_le_bytes());
            out.extend_from_slice(&counter.to_le_bytes());
            out.extend_from_slice(&changes.to_le_bytes());
            put_write_ids(out, notices);
        }
        Msg::Forward { to, first, count } | Msg::ForwardRefused { to, first, count } => {
            out.extend_from_slice(&to.0.to_le_bytes());
            out.extend_from_slice(&first.0.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        Msg::Diff { id, diffs } => {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&(diffs.len() as u32).to_le_bytes());
            for d in diffs {
                out.extend_from_slice(&d.page.0.to_le_bytes());
                out.extend_from_slice(&(d.runs.len() as u32).to_le_bytes());
                out.extend_from_slice(&d.runs);
            }
        }
        Msg::DiffGrant { id } => out.extend_from_slice(&id.to_le_bytes()),
        Msg::Acquire {
            lock,
            seen,
            epoch,
            cohort,
        } => {
            out.extend_from_slice(&lock.0.to_le_bytes());
            out.extend_from_slice(&seen.to_le_bytes());
            out.extend_from_slice(&epoch.to_le_bytes());
            out.push(u8::from(*cohort));
        }
        Msg::AcquireGrant {
            lock,
            counter,
            notices,
            earlier,
        } => {
            out.extend_from_slice(&lock.0.to_le_bytes());
            out.extend_from_slice(&counter.to_le_bytes());
            put_pages(out, notices);
            put_pages(out, earlier);
        }
        Msg::Release {
            lock,
            epoch,
            notices,
            earlier,
        } => {
            out.extend_from_slice(&lock.0.to_le_bytes());
            out.extend_from_slice(&epoch.to_le_bytes());
            put_pages(out, notices);
            put_pages(out, earlier);
        }
        Msg::Barrier {
            epoch,
            allocs,
            threads,
            notices,
            claims,
        } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&allocs.digest.to_le_bytes());
            out.extend_from_slice(&allocs.calls.to_le_bytes());
            out.extend_from_slice(&allocs.pages.to_le_bytes());
            out.extend_from_slice(&threads.to_le_bytes());
            put_pages(out, notices);
            put_pages(out, claims);
        }
        Msg::BarrierGrant { epoch, notices } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&(notices.len() as u32).to_le_bytes());
            for n in notices {
                out.extend_from_slice(&n.page.0.to_le_bytes());
                let w = n.writer.map_or(NO_WRITER, |w| w.0);
                out.extend_from_slice(&w.to_le_bytes());
                out.push(u8::from(n.moves));
            }
        }
        Msg::Wait { epoch } | Msg::WaitGrant { epoch } => {
            out.extend_from_slice(&epoch.to_le_bytes());
        }
        Msg::Migrated {
            epoch,
            vetoes: pages,
        }
        | Msg::MigrateGrant {
            epoch,
            vetoed: pages,
        } => {
            out.extend_from_slice(&epoch.to_le_bytes());
            put_pages(out, pages);
        }
        Msg::SetCv { cv, epoch, notices } => {
            out.extend_from_slice(&cv.0.to_le_bytes());
            out.extend_from_slice(&epoch.to_le_bytes());
            put_pages(out, notices);
        }
        Msg::ResetCv { cv } => out.extend_from_slice(&cv.0.to_le_bytes()),
        Msg::LockWanted { lock } => out.extend_from_slice(&lock.0.to_le_bytes()),
        Msg::WaitCv { cv, seen } => {
            out.extend_from_slice(&cv.0.to_le_bytes());
            out.extend_from_slice(&seen.to_le_bytes());
        }
        Msg::CvGrant {
            cv,
            counter,
            notices,
        } => {
            out.extend_from_slice(&cv.0.to_le_bytes());
            out.extend_from_slice(&counter.to_le_bytes());
            put_pages(out, notices);
        }
        Msg::Exit { stats } => {
            out.extend_from_slice(&(stats.len() as u32).to_le_bytes());
            for s in stats {
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        Msg::ExitGrant => {}
        Msg::Error { text } => {
            let bytes = truncate_utf8(text, MAX_ERROR_TEXT_BYTES).as_bytes();
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        Msg::Send { channel, tag, data } => {
            out.push(*channel as u8);
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
    }
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Reads the header of a frame without decoding the payload (for filtering by cookie and sender
/// before any work is done).
pub fn decode_header(bytes: &[u8]) -> Result<(FrameHeader, MsgKind, usize), DecodeError> {
    let mut r = Reader { bytes, at: 0 };
    let magic = r.u16()?;
    if magic != MAGIC {
        return Err(DecodeError::BadMagic(magic));
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(DecodeError::BadVersion(version));
    }
    let code = r.u8()?;
    let kind = MsgKind::from_code(code).ok_or(DecodeError::BadKind(code))?;
    let cookie = r.u64()?;
    let from = NodeId(r.u16()?);
    let payload_len = r.u32()? as usize;
    Ok((FrameHeader { cookie, from }, kind, payload_len))
}

/// A decoded frame whose pages, in a page grant, are still in the bytes it was decoded from: the
/// receiver copies each once, into place ([`crate::Node::handle_frame`]), instead of into a
/// buffer first. Every other message is a [`Msg`].
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A [`Msg::GetPageGrant`], borrowed.
    Grant {
        /// The run's first page.
        page: PageNum,
        /// The run's bytes: whole pages, 1 to [`MAX_RUN_PAGES`] of them.
        data: &'a [u8],
        /// Sent on the home's behalf ([`Msg::Forward`]).
        forwarded: bool,
    },
    /// A page grant whose pages are in its sender's memory ([`encode_grant_in_place`]): its
    /// receiver reads them there and hands the core a [`Frame::Grant`] of them.
    GrantInPlace {
        /// The run's first page.
        page: PageNum,
        /// Its pages, 1 to [`MAX_RUN_PAGES`].
        count: u16,
        /// Sent on the home's behalf ([`Msg::Forward`]).
        forwarded: bool,
    },
    /// Any other message.
    Msg(Msg),
}

/// Decodes one whole frame.
pub fn decode_frame(bytes: &[u8]) -> Result<(FrameHeader, Msg), DecodeError> {
    let (header, frame) = decode_frame_ref(bytes)?;
    let msg = match frame {
        Frame::Grant {
            page,
            data,
            forwarded,
        } => Msg::GetPageGrant {
            page,
            data: RunData::Copied(Arc::from(data)),
            forwarded,
        },
        Frame::GrantInPlace { .. } => {
            return Err(DecodeError::BadValue {
                field: "grant's page count (pages in the sender's memory)",
                value: 0,
            });
        }
        Frame::Msg(m) => m,
    };
    Ok((header, msg))
}

/// Decodes one whole frame, leaving a grant's page in `bytes` (see [`Frame`]); rejects what
/// [`decode_frame`] rejects.
pub fn decode_frame_ref(bytes: &[u8]) -> Result<(FrameHeader, Frame<'_>), DecodeError> {
    let (header, kind, payload_len) = decode_header(bytes)?;
    let payload = &bytes[HEADER_BYTES..];
    if payload.len() < payload_len {
        return Err(DecodeError::Truncated {
            needed: HEADER_BYTES + payload_len,
            have: bytes.len(),
        });
    }
    if payload.len() > payload_len {
        return Err(DecodeError::Trailing(payload.len() - payload_len));
    }
    let mut r = Reader {
        bytes: payload,
        at: 0,
    };
    let frame = decode_payload(kind, &mut r)?;
    if r.remaining() != 0 {
        return Err(DecodeError::Trailing(r.remaining()));
    }
    Ok((header, frame))
}

fn decode_payload<'a>(kind: MsgKind, r: &mut Reader<'a>) -> Result<Frame<'a>, DecodeError> {
    Ok(Frame::Msg(match kind {
        MsgKind::GetPage => {
            let access = match r.u8()? {
                0 => Access::Read,
                1 => Access::Write,
                v => {
                    return Err(DecodeError::BadValue {
                        field: "access",
                        value: v.into(),
                    });
                }
            };
            let passed = r.u64()?;
            let pages = r.pages()?;
            if pages.is_empty() {
                return Err(DecodeError::BadValue {
                    field: "GETP page count",
                    value: 0,
                });
            }
            Msg::GetPage {
                access,
                pages,
                passed,
            }
        }
        MsgKind::GetPageGrant => {
            let page = PageNum(r.u32()?);
            let raw = r.u16()?;
            let (count, forwarded, in_place) = (
                raw & !(GRANT_FORWARDED | GRANT_IN_PLACE),
                raw & GRANT_FORWARDED != 0,
                raw & GRANT_IN_PLACE != 0,
            );
            if count == 0 || usize::from(count) > MAX_RUN_PAGES {
                return Err(DecodeError::BadValue {
                    field: "grant's page count",
                    value: count.into(),
                });
            }
            if page.0.checked_add(u32::from(count)).is_none() {
                return Err(DecodeError::BadValue {
                    field: "grant's first page",
                    value: page.0.into(),
                });
            }
            if in_place {
                return Ok(Frame::GrantInPlace {
                    page,
                    count,
                    forwarded,
                });
            }
            let data = r.take(usize::from(count) * PAGE_SIZE)?;
            return Ok(Frame::Grant {
                page,
                data,
                forwarded,
            });
        }
        MsgKind::Diff => {
            let id = r.u64()?;
            let n = r.count(8)?;
            let mut diffs = Vec::with_capacity(n);
            for _ in 0..n {
                let page = PageNum(r.u32()?);
                let len = r.u32()? as usize;
                let runs = r.take(len)?;
                diff::validate(runs)?;
                diffs.push(PageDiff {
                    page,
                    runs: runs.to_vec(),
                });
            }
            Msg::Diff { id, diffs }
        }
        MsgKind::DiffGrant => Msg::DiffGrant { id: r.u64()? },
        MsgKind::Acquire => Msg::Acquire {
            lock: r.lock()?,
            seen: r.u64()?,
            epoch: r.u64()?,
            cohort: match r.u8()? {
                0 => false,
                1 => true,
                v => {
                    return Err(DecodeError::BadValue {
                        field: "acquire's cohort flag",
                        value: v.into(),
                    });
                }
            },
        },
        MsgKind::AcquireGrant => Msg::AcquireGrant {
            lock: r.lock()?,
            counter: r.u64()?,
            notices: r.pages()?,
            earlier: r.pages()?,
        },
        MsgKind::Release => Msg::Release {
            lock: r.lock()?,
            epoch: r.u64()?,
            notices: r.pages()?,
            earlier: r.pages()?,
        },
        MsgKind::Barrier => Msg::Barrier {
            epoch: r.u64()?,
            allocs: crate::alloc::Allocs {
                digest: r.u64()?,
                calls: r.u32()?,
                pages: r.u32()?,
            },
            threads: r.u16()?,
            notices: r.pages()?,
            claims: r.pages()?,
        },
        MsgKind::BarrierGrant => {
            let epoch = r.u64()?;
            let n = r.count(7)?;
            let mut notices = Vec::with_capacity(n);
            for _ in 0..n {
                let page = PageNum(r.u32()?);
                let w = r.u16()?;
                let writer = (w != NO_WRITER).then_some(NodeId(w));
                let moves = match r.u8()? {
                    0 => false,
                    1 if writer.is_some() => true,
                    v => {
                        return Err(DecodeError::BadValue {
                            field: "write notice's move flag",
                            value: v.into(),
                        });
                    }
                };
                notices.push(WriteNotice {
                    page,
                    writer,
                    moves,
                });
            }
            Msg::BarrierGrant { epoch, notices }
        }
        MsgKind::Migrated => Msg::Migrated {
            epoch: r.u64()?,
            vetoes: r.pages()?,
        },
        MsgKind::MigrateGrant => Msg::MigrateGrant {
            epoch: r.u64()?,
            vetoed: r.pages()?,
        },
        MsgKind::Wait => Msg::Wait { epoch: r.u64()? },
        MsgKind::WaitGrant => Msg::WaitGrant { epoch: r.u64()? },
        MsgKind::SetCv => Msg::SetCv {
            cv: r.cv()?,
            epoch: r.u64()?,
            notices: r.pages()?,
        },
        MsgKind::ResetCv => Msg::ResetCv { cv: r.cv()? },
        MsgKind::LockWanted => Msg::LockWanted { lock: r.lock()? },
        MsgKind::Atomic => {
            let id = r.u32()?;
            let addr = r.u64()?;
            let width = r.u8()?;
            if !crate::types::atomic_width(width) || addr % u64::from(width) != 0 {
                return Err(DecodeError::BadValue {
                    field: "atomic word's width or alignment",
                    value: addr | u64::from(width),
                });
            }
            if addr / PAGE_SIZE as u64 > u64::from(u32::MAX) {
                // Beyond every page number: it must not be read as a lower page.
                return Err(DecodeError::BadValue {
                    field: "atomic word's address",
                    value: addr,
                });
            }
            let tag = r.u8()?;
            let (a, b) = (r.u64()?, r.u64()?);
            let op = atomic_op_from(tag, a, b).ok_or(DecodeError::BadValue {
                field: "atomic operation",
                value: tag.into(),
            })?;
            let flags = r.u8()?;
            if flags > 7 {
                return Err(DecodeError::BadValue {
                    field: "atomic order and barrier flags",
                    value: flags.into(),
                });
            }
            Msg::Atomic {
                id,
                addr,
                width,
                op,
                acquire: flags & 1 != 0,
                release: flags & 2 != 0,
                seen: r.u64()?,
                epoch: r.u64()?,
                in_barrier: flags & 4 != 0,
                passed: r.u64()?,
                notices: r.writes()?,
                earlier: r.writes()?,
                passed_on: r.write_ids()?,
            }
        }
        MsgKind::AtomicGrant => Msg::AtomicGrant {
            id: r.u32()?,
            old: r.u64()?,
            counter: r.u64()?,
            changes: r.u32()?,
            notices: r.write_ids()?,
        },
        MsgKind::Forward | MsgKind::ForwardRefused => {
            let to = NodeId(r.u16()?);
            let first = PageNum(r.u32()?);
            let count = r.u16()?;
            if count == 0 || usize::from(count) > MAX_GETP_PAGES {
                return Err(DecodeError::BadValue {
                    field: "forwarded page count",
                    value: count.into(),
                });
            }
            if first.0.checked_add(u32::from(count)).is_none() {
                return Err(DecodeError::BadValue {
                    field: "forwarded first page",
                    value: first.0.into(),
                });
            }
            if kind == MsgKind::Forward {
                Msg::Forward { to, first, count }
            } else {
                Msg::ForwardRefused { to, first, count }
            }
        }
        MsgKind::WaitCv => Msg::WaitCv {
            cv: r.cv()?,
            seen: r.u64()?,
        },
        MsgKind::CvGrant => Msg::CvGrant {
            cv: r.cv()?,
            counter: r.u64()?,
            notices: r.pages()?,
        },
        MsgKind::Exit => {
            let n = r.count(8)?;
            let mut stats = Vec::with_capacity(n);
            for _ in 0..n {
                stats.push(r.u64()?);
            }
            Msg::Exit { stats }
        }
        MsgKind::ExitGrant => Msg::ExitGrant,
        MsgKind::Error => {
            let len = r.u32()? as usize;
            if len > MAX_ERROR_TEXT_BYTES {
                return Err(DecodeError::BadValue {
                    field: "error text length",
                    value: len as u64,
                });
            }
            let text =
                String::from_utf8(r.take(len)?.to_vec()).map_err(|e| DecodeError::BadValue {
                    field: "error text (UTF-8)",
                    value: e.utf8_error().valid_up_to() as u64,
                })?;
            Msg::Error { text }
        }
        MsgKind::Send => {
            let code = r.u8()?;
            let channel = Channel::from_code(code).ok_or(DecodeError::BadValue {
                field: "letter channel",
                value: code.into(),
            })?;
            let tag = r.u32()? as i32;
            let len = r.u32()? as usize;
            if len > MAX_LETTER_BYTES {
                return Err(DecodeError::BadValue {
                    field: "letter length",
                    value: len as u64,
                });
            }
            let data = r.take(len)?.to_vec();
            Msg::Send { channel, tag, data }
        }
    }))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(DecodeError::Truncated {
                needed: self.at.saturating_add(n),
                have: self.bytes.len(),
            })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of elements of at least `min_elem_bytes` each, checked against the bytes left so a
    /// forged count cannot make us allocate.
    fn count(&mut self, min_elem_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_elem_bytes) > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: self.at.saturating_add(n.saturating_mul(min_elem_bytes)),
                have: self.bytes.len(),
            });
        }
        Ok(n)
    }

    fn pages(&mut self) -> Result<Vec<PageNum>, DecodeError> {
        let n = self.count(4)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(PageNum(self.u32()?));
        }
        Ok(v)
    }

    fn writes(&mut self) -> Result<Vec<(PageNum, u64)>, DecodeError> {
        let n = self.count(4 + 1)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push((PageNum(self.u32()?), self.varint("write's interval")?));
        }
        Ok(v)
    }

    fn write_ids(&mut self) -> Result<Vec<WriteId>, DecodeError> {
        let n = self.count(WRITE_ID_MIN_BYTES)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(WriteId {
                page: PageNum(self.u32()?),
                writer: NodeId(self.u16()?),
                interval: self.varint("atomic notice's interval")?,
                epoch: self.varint("atomic notice's epoch")?,
            });
        }
        Ok(v)
    }

    /// An LEB128 varint of at most 64 bits, in its shortest form (one value, one encoding:
    /// `field` names it in the error for more bits or a needless last byte).
    fn varint(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if shift > 0 && b == 0 || shift == 63 && bits > 1 {
                return Err(DecodeError::BadValue { field, value: bits });
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::BadValue { field, value: v })
    }

    fn lock(&mut self) -> Result<LockId, DecodeError> {
        let l = self.u16()?;
        if l >= MAX_LOCKS {
            return Err(DecodeError::BadValue {
                field: "lock",
                value: l.into(),
            });
        }
        Ok(LockId(l))
    }

    fn cv(&mut self) -> Result<CvId, DecodeError> {
        let c = self.u16()?;
        if c >= MAX_CVS {
            return Err(DecodeError::BadValue {
                field: "condition variable",
                value: c.into(),
            });
        }
        Ok(CvId(c))
    }
}
