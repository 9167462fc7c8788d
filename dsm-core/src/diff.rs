//! Diffs: the bytes a node changed in a page, found by comparing the page with its twin.
//!
//! Encoding: a list of runs, each `offset: u16le, len: u16le, bytes[len]`, offsets ascending and
//! runs disjoint. Runs are byte-exact: a run never covers a byte the writer did not change, so two
//! nodes writing neighbouring bytes of one page (false sharing) both have their writes kept when
//! the home merges their diffs. The comparison scans eight bytes at a time and only looks at single
//! bytes inside words that differ.

use crate::types::PAGE_SIZE;

/// Bytes of run header (offset, length).
pub const RUN_HEADER_BYTES: usize = 4;

/// Bytes compared at once before looking at words: unchanged stretches of a page (most of it,
/// for most diffs) are passed over 64 bytes at a time.
const BLOCK: usize = 64;

/// Appends the diff of `current` against `twin` to `out`; returns the number of runs.
pub fn encode(twin: &[u8; PAGE_SIZE], current: &[u8; PAGE_SIZE], out: &mut Vec<u8>) -> usize {
    let mut runs = 0;
    let mut run_start: Option<usize> = None;
    let mut close = |start: usize, end: usize, out: &mut Vec<u8>| {
        push_run(out, current, start, end);
        runs += 1;
    };
    for block in (0..PAGE_SIZE).step_by(BLOCK) {
        let xor = |w: usize| {
            let at = block + w * 8;
            u64::from_ne_bytes(chunk(twin, at)) ^ u64::from_ne_bytes(chunk(current, at))
        };
        if (0..BLOCK / 8).fold(0, |acc, w| acc | xor(w)) == 0 {
            if let Some(s) = run_start.take() {
                close(s, block, out);
            }
            continue;
        }
        for w in 0..BLOCK / 8 {
            let base = block + w * 8;
            let x = xor(w);
            if x == 0 {
                if let Some(s) = run_start.take() {
                    close(s, base, out);
                }
                continue;
            }
            let mut m = changed_bytes(x);
            if m == 0xFF {
                run_start.get_or_insert(base);
                continue;
            }
            // A partial word: walk its runs of changed bytes.
            let mut at = 0u32;
            while at < 8 {
                if m & 1 == 0 {
                    if let Some(s) = run_start.take() {
                        close(s, base + at as usize, out);
                    }
                    let skip = if m == 0 { 8 - at } else { m.trailing_zeros() };
                    m = m.checked_shr(skip).unwrap_or(0);
                    at += skip;
                } else {
                    run_start.get_or_insert(base + at as usize);
                    let len = m.trailing_ones();
                    m = m.checked_shr(len).unwrap_or(0);
                    at += len;
                }
            }
        }
    }
    if let Some(s) = run_start {
        close(s, PAGE_SIZE, out);
    }
    runs
}

/// One bit per byte of `x` that is not zero (bit i for byte i in memory order).
fn changed_bytes(x: u64) -> u32 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // High bit of each byte set iff the byte is non-zero.
    let t = (((x & LOW7).wrapping_add(LOW7)) | x) & HIGH;
    // Gather the eight high bits into one byte (byte i of memory -> bit i).
    let t = if cfg!(target_endian = "little") {
        t
    } else {
        t.swap_bytes()
    };
    ((t >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
}

fn chunk(page: &[u8; PAGE_SIZE], at: usize) -> [u8; 8] {
    let mut c = [0u8; 8];
    c.copy_from_slice(&page[at..at + 8]);
    c
}

fn push_run(out: &mut Vec<u8>, current: &[u8; PAGE_SIZE], start: usize, end: usize) {
    // Offsets and lengths are at most PAGE_SIZE (4096), which fits in u16.
    out.extend_from_slice(&(start as u16).to_le_bytes());
    out.extend_from_slice(&((end - start) as u16).to_le_bytes());
    out.extend_from_slice(&current[start..end]);
}

/// Why an encoded diff is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffError {
    /// The bytes end inside a run header or a run.
    #[error("diff truncated at byte {at}")]
    Truncated {
        /// Where the data ran out.
        at: usize,
    },
    /// A run reaches past the end of the page, is empty, or overlaps or precedes the one before.
    #[error("diff run at offset {offset} with length {len} is out of order or past the page end")]
    BadRun {
        /// The run's offset.
        offset: usize,
        /// The run's length.
        len: usize,
    },
}

/// Iterates the runs of an encoded diff as `(offset, bytes)`, checking every bound.
pub fn runs(diff: &[u8]) -> impl Iterator<Item = Result<(usize, &[u8]), DiffError>> {
    let mut at = 0usize;
    let mut min_offset = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || at >= diff.len() {
            return None;
        }
        let item = (|| {
            let header = diff
                .get(at..at + RUN_HEADER_BYTES)
                .ok_or(DiffError::Truncated { at })?;
            let offset = usize::from(u16::from_le_bytes([header[0], header[1]]));
            let len = usize::from(u16::from_le_bytes([header[2], header[3]]));
            if len == 0 || offset < min_offset || offset + len > PAGE_SIZE {
                return Err(DiffError::BadRun { offset, len });
            }
            let body_at = at + RUN_HEADER_BYTES;
            let bytes = diff
                .get(body_at..body_at + len)
                .ok_or(DiffError::Truncated { at: body_at })?;
            at = body_at + len;
            min_offset = offset + len;
            Ok((offset, bytes))
        })();
        failed = item.is_err();
        Some(item)
    })
}

/// Checks that `diff` is well formed without applying it.
pub fn validate(diff: &[u8]) -> Result<(), DiffError> {
    runs(diff).try_for_each(|r| r.map(|_| ()))
}

/// Applies an encoded diff to a page buffer.
pub fn apply(diff: &[u8], page: &mut [u8; PAGE_SIZE]) -> Result<(), DiffError> {
    validate(diff)?;
    for run in runs(diff) {
        let (offset, bytes) = run?;
        page[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_with(f: impl Fn(usize) -> u8) -> Box<[u8; PAGE_SIZE]> {
        let mut p = Box::new([0u8; PAGE_SIZE]);
        for (i, b) in p.iter_mut().enumerate() {
            *b = f(i);
        }
        p
    }

    #[test]
    fn changed_bytes_marks_exactly_the_non_zero_bytes() {
        for probe in [
            0u64,
            1,
            0xff,
            0x100,
            0x8000_0000_0000_0000,
            u64::MAX,
            0x0100_0000_0000_0080,
        ] {
            let bytes = probe.to_ne_bytes();
            let want: u32 = (0..8).filter(|&i| bytes[i] != 0).map(|i| 1 << i).sum();
            assert_eq!(changed_bytes(probe), want, "{probe:#x}");
        }
    }

    #[test]
    fn identical_pages_give_an_empty_diff() {
        let a = page_with(|i| i as u8);
        let mut out = Vec::new();
        assert_eq!(encode(&a, &a, &mut out), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn diff_is_byte_exact_and_applies_to_another_copy() {
        let twin = page_with(|_| 0);
        let mut cur = twin.clone();
        cur[3] = 1;
        cur[4] = 2;
        cur[9] = 3;
        cur[PAGE_SIZE - 1] = 4;
        let mut out = Vec::new();
        assert_eq!(encode(&twin, &cur, &mut out), 3);
        let collected: Vec<_> = runs(&out).map(|r| r.unwrap()).collect();
        assert_eq!(collected[0], (3, &[1u8, 2][..]));
        assert_eq!(collected[1], (9, &[3u8][..]));
        assert_eq!(collected[2], (PAGE_SIZE - 1, &[4u8][..]));
        // A home copy where another writer changed byte 5 keeps that write.
        let mut home = twin.clone();
        home[5] = 77;
        apply(&out, &mut home).unwrap();
        assert_eq!((home[3], home[4], home[5], home[9]), (1, 2, 77, 3));
    }

    #[test]
    fn malformed_diffs_are_errors() {
        assert!(matches!(
            validate(&[0, 0]),
            Err(DiffError::Truncated { .. })
        ));
        // Run past the page end.
        assert!(matches!(
            validate(&[0xff, 0x0f, 2, 0, 1, 2]),
            Err(DiffError::BadRun { .. })
        ));
        // Empty run.
        assert!(matches!(
            validate(&[0, 0, 0, 0]),
            Err(DiffError::BadRun { .. })
        ));
        // Overlapping runs.
        assert!(matches!(
            validate(&[0, 0, 2, 0, 1, 1, 1, 0, 1, 0, 9]),
            Err(DiffError::BadRun { .. })
        ));
        // Body shorter than its length.
        assert!(matches!(
            validate(&[0, 0, 3, 0, 1]),
            Err(DiffError::Truncated { .. })
        ));
    }

    /// The diff a byte-by-byte comparison gives.
    fn reference(twin: &[u8; PAGE_SIZE], cur: &[u8; PAGE_SIZE]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < PAGE_SIZE {
            if twin[i] == cur[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < PAGE_SIZE && twin[i] != cur[i] {
                i += 1;
            }
            push_run(&mut out, cur, start, i);
        }
        out
    }

    #[test]
    fn the_diff_is_the_byte_by_byte_one_for_scattered_and_clustered_changes() {
        // SplitMix64: pages with changes in clusters of every size, across block and word edges.
        let mut x = 7u64;
        let mut next = move || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for case in 0..2000 {
            let twin = page_with(|i| (i * 7 % 256) as u8);
            let mut cur = twin.clone();
            for _ in 0..case % 40 {
                let at = (next() % PAGE_SIZE as u64) as usize;
                let len = 1 + (next() % [1, 3, 9, 70, 300][case % 5]) as usize;
                for b in cur.iter_mut().skip(at).take(len) {
                    *b = b.wrapping_add(1 + (next() % 255) as u8);
                }
            }
            let mut out = Vec::new();
            let n = encode(&twin, &cur, &mut out);
            assert_eq!(out, reference(&twin, &cur), "case {case}");
            assert_eq!(n, runs(&out).count(), "case {case}");
        }
    }

    #[test]
    fn a_fully_changed_page_is_one_run() {
        let twin = page_with(|_| 0);
        let cur = page_with(|i| (i % 251) as u8 + 1);
        let mut out = Vec::new();
        assert_eq!(encode(&twin, &cur, &mut out), 1);
        assert_eq!(out.len(), PAGE_SIZE + RUN_HEADER_BYTES);
        let mut copy = twin.clone();
        apply(&out, &mut copy).unwrap();
        assert_eq!(copy, cur);
    }
}
