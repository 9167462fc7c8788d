//! The exchange at exit that spares node 0 most records: what each node touched, and the pages
//! where a race is possible.
//!
//! Every node sums up its records as *touches*: per barrier epoch, runs of pages its threads
//! read and wrote, with which of its threads did. Node 0 merges every node's and names the
//! *candidates*: the (epoch, page) where two threads met and one of them wrote. A page only one
//! thread touched in an epoch, or that every thread only read, cannot hold a race, and most
//! pages of most programs are such (each node writes its own band between two barriers). Only
//! the accesses to candidates travel to node 0 in full and are compared there.
//!
//! ```text
//! touches:    u32 count, each  epoch u32  lo u32  hi u32  readers u64  writers u64
//! candidates: u32 count, each  epoch u32  lo u32  hi u32
//! ```
//!
//! Pages `[lo, hi)`; a thread numbered below 63 on its node is bit `number` of its node's masks,
//! and bit 63 stands for all those numbered 63 or more ([`thread_bit`]).

use super::VC_THREADS;
use super::records::walk_packed;

/// Pages `[lo, hi)` of one epoch, which the threads of one node in `readers` read and those in
/// `writers` wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Touch {
    pub epoch: u32,
    pub lo: u32,
    pub hi: u32,
    pub readers: u64,
    pub writers: u64,
}

/// Pages `[lo, hi)` of epoch `epoch` where two threads met and one wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub epoch: u32,
    pub lo: u32,
    pub hi: u32,
}

/// The touches of a node's `count` packed segments, in (epoch, page) order, neighbouring pages
/// with the same threads in one run.
pub(crate) fn touches(packed: &[u8], count: u32) -> Result<Vec<Touch>, String> {
    let mut each: Vec<(u32, u32, u64, u64)> = Vec::new();
    walk_packed(packed, count, |seg| {
        let bit = thread_bit(seg.thread);
        for &(page, write, _) in &seg.accesses {
            let (r, w) = if write { (0, bit) } else { (bit, 0) };
            each.push((seg.epoch, page, r, w));
        }
    })?;
    each.sort_unstable_by_key(|&(epoch, page, _, _)| (epoch, page));
    // One entry per (epoch, page), with every thread that touched it.
    each.dedup_by(|later, kept| {
        let same = (later.0, later.1) == (kept.0, kept.1);
        if same {
            kept.2 |= later.2;
            kept.3 |= later.3;
        }
        same
    });
    let mut out: Vec<Touch> = Vec::new();
    for (epoch, page, readers, writers) in each {
        match out.last_mut() {
            Some(t)
                if t.epoch == epoch
                    && t.hi == page
                    && (t.readers, t.writers) == (readers, writers) =>
            {
                t.hi = page + 1;
            }
            _ => out.push(Touch {
                epoch,
                lo: page,
                hi: page + 1,
                readers,
                writers,
            }),
        }
    }
    Ok(out)
}

/// Thread `thread`'s bit in its node's masks: its number on the node below 63; bit 63 for every
/// thread numbered 63 or more (a node may have 1,024), which [`threads_in`] counts as two.
fn thread_bit(thread: u32) -> u64 {
    let n = thread as usize % VC_THREADS;
    1u64 << n.min(63)
}

/// The threads a mask stands for, at least: bit 63 (any of the threads numbered 63 or more)
/// counts as two, so a page one of them wrote is a candidate even if no other thread touched
/// it: more pages travel in full, and none where two of them met is missed.
fn threads_in(mask: u64) -> u32 {
    mask.count_ones() + u32::from(mask >> 63 == 1)
}

/// The candidates of every node's touches (`all[node]`), in (epoch, page) order, neighbouring
/// pages in one run.
pub(crate) fn candidates(all: &[Vec<Touch>]) -> Vec<Candidate> {
    let mut entries: Vec<&Touch> = all.iter().flatten().collect();
    entries.sort_unstable_by_key(|t| (t.epoch, t.lo));
    let mut out: Vec<Candidate> = Vec::new();
    let mut k = 0;
    while k < entries.len() {
        // One epoch at a time, sweeping its pages: `active` holds the runs covering `at` (one
        // per node at most: a node's runs of an epoch do not overlap).
        let epoch = entries[k].epoch;
        let end = k + entries[k..].partition_point(|t| t.epoch == epoch);
        let mut active: Vec<&Touch> = Vec::new();
        let mut at = entries[k].lo;
        loop {
            while k < end && entries[k].lo == at {
                active.push(entries[k]);
                k += 1;
            }
            if active.is_empty() {
                if k == end {
                    break;
                }
                at = entries[k].lo;
                continue;
            }
            let next_start = if k < end { entries[k].lo } else { u32::MAX };
            let next = active
                .iter()
                .map(|t| t.hi)
                .min()
                .unwrap_or(at)
                .min(next_start);
            let threads: u32 = active
                .iter()
                .map(|t| threads_in(t.readers | t.writers))
                .sum();
            let writers: u32 = active.iter().map(|t| t.writers.count_ones()).sum();
            if writers >= 1 && threads >= 2 {
                match out.last_mut() {
                    Some(c) if c.epoch == epoch && c.hi == at => c.hi = next,
                    _ => out.push(Candidate {
                        epoch,
                        lo: at,
                        hi: next,
                    }),
                }
            }
            at = next;
            active.retain(|t| t.hi > at);
        }
    }
    out
}

/// Whether page `page` of epoch `epoch` is among `candidates` (sorted, as [`candidates`] gives).
pub(crate) fn holds(candidates: &[Candidate], epoch: u32, page: u32) -> bool {
    let i = candidates.partition_point(|c| (c.epoch, c.hi) <= (epoch, page));
    candidates
        .get(i)
        .is_some_and(|c| c.epoch == epoch && c.lo <= page)
}

pub(crate) fn encode_touches(touches: &[Touch]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + touches.len() * 28);
    out.extend_from_slice(&(touches.len() as u32).to_le_bytes());
    for t in touches {
        for v in [t.epoch, t.lo, t.hi] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&t.readers.to_le_bytes());
        out.extend_from_slice(&t.writers.to_le_bytes());
    }
    out
}

pub(crate) fn decode_touches(bytes: &[u8]) -> Result<Vec<Touch>, String> {
    let body = counted(bytes, 28, "touches")?;
    body.chunks_exact(28)
        .enumerate()
        .map(|(k, c)| {
            let (epoch, lo, hi) = (word(c, 0), word(c, 4), word(c, 8));
            let mask = |at: usize| u64::from_le_bytes(c[at..at + 8].try_into().unwrap_or([0; 8]));
            pages(lo, hi, k, "touch")?;
            Ok(Touch {
                epoch,
                lo,
                hi,
                readers: mask(12),
                writers: mask(20),
            })
        })
        .collect()
}

pub(crate) fn encode_candidates(candidates: &[Candidate]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + candidates.len() * 12);
    out.extend_from_slice(&(candidates.len() as u32).to_le_bytes());
    for c in candidates {
        for v in [c.epoch, c.lo, c.hi] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

/// Candidates as [`encode_candidates`] wrote them; out of order is an error (a lookup needs
/// them sorted).
pub(crate) fn decode_candidates(bytes: &[u8]) -> Result<Vec<Candidate>, String> {
    let body = counted(bytes, 12, "candidates")?;
    let mut out: Vec<Candidate> = Vec::with_capacity(body.len() / 12);
    for (k, c) in body.chunks_exact(12).enumerate() {
        let (epoch, lo, hi) = (word(c, 0), word(c, 4), word(c, 8));
        pages(lo, hi, k, "candidate")?;
        if out.last().is_some_and(|p| (p.epoch, p.hi) > (epoch, lo)) {
            return Err(format!("candidate {k} out of order"));
        }
        out.push(Candidate { epoch, lo, hi });
    }
    Ok(out)
}

/// The entries after a count of `size`-byte entries, exactly as many as the count says.
fn counted<'a>(bytes: &'a [u8], size: usize, what: &str) -> Result<&'a [u8], String> {
    let Some((n, body)) = bytes.split_first_chunk::<4>() else {
        return Err(format!("{what}: cut short before their count"));
    };
    let n = u32::from_le_bytes(*n) as usize;
    if n.checked_mul(size) != Some(body.len()) {
        return Err(format!(
            "{what}: a count of {n} in {} bytes of {size}-byte entries",
            body.len()
        ));
    }
    Ok(body)
}

fn word(c: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(c[at..at + 4].try_into().unwrap_or([0; 4]))
}

fn pages(lo: u32, hi: u32, k: usize, what: &str) -> Result<(), String> {
    if lo >= hi {
        return Err(format!("{what} {k}: pages {lo}..{hi}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(epoch: u32, lo: u32, hi: u32, readers: u64, writers: u64) -> Touch {
        Touch {
            epoch,
            lo,
            hi,
            readers,
            writers,
        }
    }

    fn cand(epoch: u32, lo: u32, hi: u32) -> Candidate {
        Candidate { epoch, lo, hi }
    }

    /// Two nodes each writing their own band meet nowhere; a band edge read by the neighbour,
    /// or two threads of one node on a page one of them wrote, are candidates.
    #[test]
    fn candidates_are_the_pages_two_threads_met_on_with_a_write() {
        let bands = vec![
            vec![touch(0, 0, 10, 0, 1), touch(1, 0, 10, 0, 1)],
            vec![
                touch(0, 10, 20, 0, 1),
                touch(1, 9, 10, 1, 0),
                touch(1, 10, 20, 0, 1),
            ],
        ];
        assert_eq!(candidates(&bands), vec![cand(1, 9, 10)]);
        // Readers only: nothing. Two threads of one node, one writing: a candidate.
        let one = vec![vec![touch(0, 0, 5, 0b11, 0), touch(0, 5, 6, 0b01, 0b10)]];
        assert_eq!(candidates(&one), vec![cand(0, 5, 6)]);
        // One thread reading and writing: nothing.
        assert!(candidates(&[vec![touch(0, 0, 5, 1, 1)]]).is_empty());
        // Overlapping runs of three nodes: where two meet, as one run.
        let three = vec![
            vec![touch(3, 0, 8, 0, 1)],
            vec![touch(3, 4, 12, 1, 0)],
            vec![touch(3, 10, 16, 0, 1)],
        ];
        assert_eq!(candidates(&three), vec![cand(3, 4, 8), cand(3, 10, 12)]);
        let c = candidates(&three);
        for (page, want) in [
            (3, false),
            (4, true),
            (7, true),
            (8, false),
            (11, true),
            (12, false),
        ] {
            assert_eq!(holds(&c, 3, page), want, "page {page}");
            assert!(!holds(&c, 2, page) && !holds(&c, 4, page));
        }
    }

    /// Threads numbered 63 or more on their node share bit 63, which counts as two threads: a
    /// page one of them wrote is a candidate (no race between two of them is missed), one that
    /// two threads below 63 only read is not.
    #[test]
    fn threads_past_the_masks_bits_are_counted_as_two() {
        assert_eq!(thread_bit(5), 1 << 5);
        assert_eq!(thread_bit(63), 1 << 63);
        assert_eq!(thread_bit(1000), 1 << 63);
        assert_eq!(
            thread_bit(VC_THREADS as u32 + 2),
            1 << 2,
            "node 1's thread 2"
        );
        let written_by_one_high = [vec![touch(0, 7, 8, 0, 1 << 63)]];
        assert_eq!(candidates(&written_by_one_high), vec![cand(0, 7, 8)]);
        let read_by_two = [vec![touch(0, 7, 8, 0b11, 0)]];
        assert_eq!(candidates(&read_by_two), vec![]);
        let written_by_one_low = [vec![touch(0, 7, 8, 0, 0b1)]];
        assert_eq!(candidates(&written_by_one_low), vec![]);
    }

    /// Each access of a node's records becomes a touch of its page; pages with the same threads
    /// join in runs; the same page from two segments joins their threads.
    #[test]
    fn touches_sum_up_a_nodes_records() {
        use super::super::{Access, Bytes, Segment};
        let seg = |thread: u32, epoch: u32, pages: &[(u32, bool)]| Segment {
            thread,
            epoch,
            clock: 1,
            seen: vec![],
            accesses: pages
                .iter()
                .map(|&(page, write)| Access {
                    page,
                    site: 0,
                    write,
                    bytes: Bytes::Runs(vec![(0, 8)]),
                })
                .collect(),
        };
        let mut packed = Vec::new();
        // Node 1's threads 0 and 1.
        let (t0, t1) = (VC_THREADS as u32, VC_THREADS as u32 + 1);
        let segments = [
            seg(t0, 0, &[(1, true), (2, true), (3, true)]),
            seg(t1, 0, &[(3, false), (4, false)]),
            seg(t0, 1, &[(3, true)]),
        ];
        for s in &segments {
            super::super::records::put_segment(&mut packed, s);
        }
        let t = touches(&packed, 3).unwrap();
        assert_eq!(
            t,
            vec![
                touch(0, 1, 3, 0, 0b01),
                touch(0, 3, 4, 0b10, 0b01),
                touch(0, 4, 5, 0b10, 0),
                touch(1, 3, 4, 0, 0b01),
            ]
        );
        assert_eq!(decode_touches(&encode_touches(&t)).unwrap(), t);
        let c = vec![cand(0, 3, 4), cand(2, 1, 9)];
        assert_eq!(decode_candidates(&encode_candidates(&c)).unwrap(), c);
        // Damage is an error, never a panic.
        let bytes = encode_touches(&t);
        for n in 0..bytes.len() {
            assert!(decode_touches(&bytes[..n]).is_err(), "cut at {n}");
        }
        assert!(decode_candidates(&encode_candidates(&[cand(1, 5, 6), cand(1, 2, 3)])).is_err());
        assert!(decode_candidates(&encode_candidates(&[cand(1, 5, 5)])).is_err());
        // Filtered to the candidates: only page 3 of epoch 0 is left, in two segments.
        let (kept, n) =
            super::super::records::filter_packed(&packed, 3, |e, p| holds(&c, e, p)).unwrap();
        assert_eq!(n, 2);
        assert_eq!(touches(&kept, n).unwrap(), vec![touch(0, 3, 4, 0b10, 0b01)]);
    }
}
