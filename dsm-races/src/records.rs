//! A node's records on disk: a compact binary form (little-endian), read back by node 0 with
//! every length and value checked (a damaged file is an error naming it, never a panic).
//!
//! ```text
//! "DSMRACE1"  node u16
//! sites:    u32 count, each  tag u8 (0: file str, line u32 | 1: module str, offset u64)
//! allocs:   u32 count, each  offset u64  bytes u64  element u32  site u32
//! segments: u32 count, each  thread u32  epoch u32  clock u32
//!           seen: u32 count, each thread u32 clock u32
//!           accesses: u32 count, each page u32  site u32  write u8
//!             then the bytes, the shortest of three forms: 0 u8 + u32 run count + (lo u16,
//!             hi u16) each; 1 u8 + 64 u64 (the bits); 2 u8 + u8 count + (repeat u8, word u64)
//!             each, the 64 words of bits in runs of equal words (red-black SOR's every other
//!             element: a few runs of one pattern)
//! str: u32 length + UTF-8 bytes
//! ```

use super::{Access, Alloc, Bytes, Log, PAGE, PageBits, Segment, Site};

const MAGIC: &[u8; 8] = b"DSMRACE1";
/// A page's bits take more room as runs than as bits beyond this many runs.
const MAX_RUNS: usize = PAGE / 8 / 4;

/// `log` in the binary form.
pub(crate) fn encode(log: &Log) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 << 16);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&log.node.to_le_bytes());
    put_u32(&mut out, log.sites.len());
    for site in &log.sites {
        match site {
            Site::Line { file, line } => {
                out.push(0);
                put_str(&mut out, file);
                out.extend_from_slice(&line.to_le_bytes());
            }
            Site::Code { module, offset } => {
                out.push(1);
                put_str(&mut out, module);
                out.extend_from_slice(&offset.to_le_bytes());
            }
        }
    }
    put_u32(&mut out, log.allocs.len());
    for a in &log.allocs {
        out.extend_from_slice(&a.offset.to_le_bytes());
        out.extend_from_slice(&a.bytes.to_le_bytes());
        out.extend_from_slice(&a.element.to_le_bytes());
        out.extend_from_slice(&a.site.to_le_bytes());
    }
    put_u32(&mut out, log.segments.len() + log.packed_count as usize);
    for s in &log.segments {
        put_segment(&mut out, s);
    }
    out.extend_from_slice(&log.packed);
    out
}

/// One segment in the binary form, appended to `out` (a node packs its segments as they end).
pub(crate) fn put_segment(out: &mut Vec<u8>, s: &Segment) {
    for v in [s.thread, s.epoch, s.clock] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    put_u32(out, s.seen.len());
    for &(t, c) in &s.seen {
        out.extend_from_slice(&t.to_le_bytes());
        out.extend_from_slice(&c.to_le_bytes());
    }
    put_u32(out, s.accesses.len());
    for a in &s.accesses {
        out.extend_from_slice(&a.page.to_le_bytes());
        out.extend_from_slice(&a.site.to_le_bytes());
        out.push(u8::from(a.write));
        let as_bits = match &a.bytes {
            Bytes::Runs(runs) if runs.len() <= MAX_RUNS => {
                put_runs(out, runs);
                continue;
            }
            Bytes::Runs(runs) => {
                let mut bits: PageBits = [0; PAGE / 64];
                for &(lo, hi) in runs {
                    super::set_bits(&mut bits, lo.into(), hi.into());
                }
                std::borrow::Cow::Owned(bits)
            }
            Bytes::Bits(bits) => {
                let runs = super::run_count(bits);
                if runs <= MAX_RUNS {
                    out.push(0);
                    put_u32(out, runs);
                    super::for_each_run(bits, |lo, hi| {
                        out.extend_from_slice(&lo.to_le_bytes());
                        out.extend_from_slice(&hi.to_le_bytes());
                    });
                    continue;
                }
                std::borrow::Cow::Borrowed(&**bits)
            }
        };
        put_bits(out, &as_bits);
    }
}

/// A segment of a node's packed records, as [`walk_packed`] finds it: its thread and epoch,
/// the bytes of its head (thread, epoch, clock and clocks seen), and each access's page,
/// whether it wrote, and bytes (all of its encoding).
pub(crate) struct PackedSegment<'a> {
    pub thread: u32,
    pub epoch: u32,
    pub head: &'a [u8],
    pub accesses: Vec<(u32, bool, &'a [u8])>,
}

/// Calls `f` on each of the `count` segments packed in `packed` (by [`put_segment`]), in order.
pub(crate) fn walk_packed(
    packed: &[u8],
    count: u32,
    mut f: impl FnMut(PackedSegment<'_>),
) -> Result<(), String> {
    let mut r = Reader {
        bytes: packed,
        at: 0,
    };
    for _ in 0..count {
        let start = r.at;
        let (thread, epoch, _clock) = (r.u32()?, r.u32()?, r.u32()?);
        let seen = r.count(8)?;
        r.take(seen * 8)?;
        let head = &packed[start..r.at];
        let n = r.count(10)?;
        let mut accesses = Vec::with_capacity(n);
        for _ in 0..n {
            let at = r.at;
            let page = r.u32()?;
            r.u32()?;
            let write = r.u8()? != 0;
            match r.u8()? {
                0 => {
                    let runs = r.count(4)?;
                    r.take(runs * 4)?;
                }
                1 => {
                    r.take(PAGE / 8)?;
                }
                2 => {
                    r.repeated_words()?;
                }
                k => return Err(format!("bytes of unknown form {k} at byte {}", r.at - 1)),
            }
            accesses.push((page, write, &packed[at..r.at]));
        }
        f(PackedSegment {
            thread,
            epoch,
            head,
            accesses,
        });
    }
    if r.at != packed.len() {
        return Err(format!("{} bytes after the end", packed.len() - r.at));
    }
    Ok(())
}

/// The segments packed in `packed` with only the accesses `keep(epoch, page)` keeps (and none
/// left with no access), packed again; and how many.
pub(crate) fn filter_packed(
    packed: &[u8],
    count: u32,
    mut keep: impl FnMut(u32, u32) -> bool,
) -> Result<(Vec<u8>, u32), String> {
    let mut out = Vec::new();
    let mut kept = 0;
    walk_packed(packed, count, |seg| {
        let mine: Vec<&[u8]> = seg
            .accesses
            .iter()
            .filter(|&&(page, _, _)| keep(seg.epoch, page))
            .map(|&(_, _, bytes)| bytes)
            .collect();
        if mine.is_empty() {
            return;
        }
        out.extend_from_slice(seg.head);
        put_u32(&mut out, mine.len());
        for bytes in mine {
            out.extend_from_slice(bytes);
        }
        kept += 1;
    })?;
    Ok((out, kept))
}

/// `bits` as runs of equal words (form 2) if that is shorter, else as they are (form 1).
fn put_bits(out: &mut Vec<u8>, bits: &PageBits) {
    let repeats = 1 + bits.windows(2).filter(|w| w[0] != w[1]).count();
    if 2 + repeats * 9 < 1 + PAGE / 8 {
        out.push(2);
        out.push(repeats as u8);
        let mut at = 0;
        while at < bits.len() {
            let n = bits[at..].iter().take_while(|&&w| w == bits[at]).count();
            out.push(n as u8);
            out.extend_from_slice(&bits[at].to_le_bytes());
            at += n;
        }
        return;
    }
    out.push(1);
    for w in bits {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

fn put_runs(out: &mut Vec<u8>, runs: &[(u16, u16)]) {
    out.push(0);
    put_u32(out, runs.len());
    for &(lo, hi) in runs {
        out.extend_from_slice(&lo.to_le_bytes());
        out.extend_from_slice(&hi.to_le_bytes());
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// Reads a log written by [`encode`]; the error says what was wrong and where.
pub(crate) fn decode(bytes: &[u8]) -> Result<Log, String> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(8)? != MAGIC {
        return Err("not a race checker's record (wrong magic)".into());
    }
    let node = u16::from_le_bytes(r.array()?);
    let sites = (0..r.count(5)?)
        .map(|_| match r.u8()? {
            0 => Ok(Site::Line {
                file: r.string()?,
                line: r.u32()?,
            }),
            1 => Ok(Site::Code {
                module: r.string()?,
                offset: r.u64()?,
            }),
            t => Err(format!("site of unknown kind {t} at byte {}", r.at - 1)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let allocs = (0..r.count(24)?)
        .map(|_| {
            Ok(Alloc {
                offset: r.u64()?,
                bytes: r.u64()?,
                element: r.u32()?,
                site: r.site(sites.len())?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let segments = (0..r.count(20)?)
        .map(|_| {
            let (thread, epoch, clock) = (r.u32()?, r.u32()?, r.u32()?);
            let seen = (0..r.count(8)?)
                .map(|_| Ok((r.u32()?, r.u32()?)))
                .collect::<Result<Vec<_>, String>>()?;
            let accesses = (0..r.count(10)?)
                .map(|_| {
                    let (page, site, write) = (r.u32()?, r.site(sites.len())?, r.u8()? != 0);
                    let bytes = match r.u8()? {
                        0 => {
                            let mut runs: Vec<(u16, u16)> = Vec::new();
                            for _ in 0..r.count(4)? {
                                let (lo, hi) = (r.u16()?, r.u16()?);
                                let after = runs.last().map_or(0, |&(_, h)| h);
                                if lo >= hi || usize::from(hi) > PAGE || lo < after {
                                    return Err(format!(
                                        "a run {lo}..{hi} outside a page or out of order at \
                                         byte {}",
                                        r.at - 4
                                    ));
                                }
                                runs.push((lo, hi));
                            }
                            Bytes::Runs(runs)
                        }
                        1 => {
                            let mut bits: Box<PageBits> = Box::new([0; PAGE / 64]);
                            for w in bits.iter_mut() {
                                *w = r.u64()?;
                            }
                            Bytes::Bits(bits)
                        }
                        2 => Bytes::Bits(r.repeated_words()?),
                        k => return Err(format!("bytes of unknown form {k} at byte {}", r.at - 1)),
                    };
                    Ok(Access {
                        page,
                        site,
                        write,
                        bytes,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(Segment {
                thread,
                epoch,
                clock,
                seen,
                accesses,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    if r.at != bytes.len() {
        return Err(format!("{} bytes after the end", bytes.len() - r.at));
    }
    Ok(Log {
        node,
        sites,
        allocs,
        segments,
        ..Log::default()
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!("cut short at byte {}", self.bytes.len()));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of items of at least `min_bytes` each, no more than the bytes left could hold.
    fn count(&mut self, min_bytes: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.bytes.len() - self.at {
            return Err(format!(
                "a count of {n} at byte {} that the file cannot hold",
                self.at - 4
            ));
        }
        Ok(n)
    }

    /// A page's bits in form 2: runs of equal words, which must make the page's 64 words.
    fn repeated_words(&mut self) -> Result<Box<PageBits>, String> {
        let at = self.at;
        let mut bits: Box<PageBits> = Box::new([0; PAGE / 64]);
        let mut filled = 0;
        for _ in 0..self.u8()? {
            let n = usize::from(self.u8()?);
            let word = self.u64()?;
            if n == 0 || filled + n > bits.len() {
                return Err(format!("runs of words beyond a page at byte {at}"));
            }
            bits[filled..filled + n].fill(word);
            filled += n;
        }
        if filled != bits.len() {
            return Err(format!(
                "runs of {filled} words, not a page's, at byte {at}"
            ));
        }
        Ok(bits)
    }

    fn site(&mut self, sites: usize) -> Result<u32, String> {
        let s = self.u32()?;
        if s as usize >= sites {
            return Err(format!("site {s} of {sites} at byte {}", self.at - 4));
        }
        Ok(s)
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.count(1)?;
        let at = self.at;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| format!("a name at byte {at} that is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Log {
        let mut dense: Box<PageBits> = Box::new([0; PAGE / 64]);
        for k in (0..PAGE).step_by(16) {
            super::super::set_bits(&mut dense, k, k + 8);
        }
        // Every other element, the first half of the page one colour, the rest the other:
        // two runs of words (form 2).
        let mut patterned: Box<PageBits> = Box::new([0x00ff_00ff_00ff_00ff; PAGE / 64]);
        patterned[PAGE / 128..].fill(0xff00_ff00_ff00_ff00);
        // No pattern at all: the bits as they are (form 1).
        let mut noise: Box<PageBits> = Box::new([0; PAGE / 64]);
        for (k, w) in noise.iter_mut().enumerate() {
            *w = (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        }
        Log {
            node: 3,
            sites: vec![
                Site::Line {
                    file: "a.rs".into(),
                    line: 7,
                },
                Site::Code {
                    module: "/bin/x".into(),
                    offset: 0x1234,
                },
            ],
            allocs: vec![Alloc {
                offset: 4096,
                bytes: 100,
                element: 8,
                site: 1,
            }],
            segments: vec![Segment {
                thread: 65,
                epoch: 2,
                clock: 3,
                seen: vec![(0, 1)],
                accesses: vec![
                    Access {
                        page: 1,
                        site: 0,
                        write: true,
                        bytes: Bytes::Runs(vec![(8, 16)]),
                    },
                    Access {
                        page: 2,
                        site: 1,
                        write: false,
                        bytes: Bytes::Bits(dense),
                    },
                    Access {
                        page: 3,
                        site: 1,
                        write: true,
                        bytes: Bytes::Bits(patterned),
                    },
                    Access {
                        page: 4,
                        site: 0,
                        write: true,
                        bytes: Bytes::Bits(noise),
                    },
                ],
            }],
            ..Log::default()
        }
    }

    #[test]
    fn a_log_reads_back_as_written_and_damage_is_an_error() {
        let log = sample();
        let bytes = encode(&log);
        let back = decode(&bytes).expect("reads back");
        assert_eq!(format!("{back:?}"), format!("{log:?}"));
        // Every cut and a changed byte anywhere: an error or another log, never a panic.
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "cut at {n}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xa5;
            let _ = decode(&b);
        }
        assert!(decode(b"DSMRACE2").unwrap_err().contains("magic"));
    }

    /// Segments packed as they ended read back as segments, after the unpacked ones.
    #[test]
    fn packed_segments_read_back_as_segments() {
        let mut log = sample();
        let unpacked = std::mem::take(&mut log.segments);
        for s in &unpacked {
            put_segment(&mut log.packed, s);
            log.packed_count += 1;
        }
        let back = decode(&encode(&log)).expect("reads back");
        assert_eq!(format!("{:?}", back.segments), format!("{unpacked:?}"));
    }
}
