//! A page's bytes as bits (one per byte): setting, runs, and the bytes two copies differ in.

use super::PageBits;

/// Sets the bits of bytes `[lo, hi)` (one page's).
pub(crate) fn set_bits(bits: &mut PageBits, lo: usize, hi: usize) {
    let mut i = lo;
    while i < hi {
        let (w, s) = (i / 64, i % 64);
        let n = (hi - i).min(64 - s);
        bits[w] |= if n == 64 { !0 } else { ((1u64 << n) - 1) << s };
        i += n;
    }
}

/// How many runs of set bits `bits` has.
pub(crate) fn run_count(bits: &PageBits) -> usize {
    let mut carry = 0;
    let mut n = 0;
    for &w in bits {
        // A run starts at a set bit whose lower neighbour is clear.
        n += (w & !((w << 1) | carry)).count_ones() as usize;
        carry = w >> 63;
    }
    n
}

/// The runs of set bits, as `[lo, hi)` byte offsets.
pub(crate) fn runs_of(bits: &PageBits) -> Vec<(u16, u16)> {
    let mut runs = Vec::new();
    for_each_run(bits, |lo, hi| runs.push((lo, hi)));
    runs
}

/// Calls `f(lo, hi)` on each run of set bits, in order.
pub(crate) fn for_each_run(bits: &PageBits, mut f: impl FnMut(u16, u16)) {
    // The run being built: its start, and its end so far.
    let mut open: Option<(usize, usize)> = None;
    for (w, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            let lo = w * 64 + word.trailing_zeros() as usize;
            let len = (word >> (lo % 64)).trailing_ones() as usize;
            let hi = lo + len;
            open = match open {
                Some((start, end)) if end == lo => Some((start, hi)),
                Some((start, end)) => {
                    f(start as u16, end as u16);
                    Some((lo, hi))
                }
                None => Some((lo, hi)),
            };
            word = if hi % 64 == 0 {
                0
            } else {
                word & !((1u64 << (hi % 64)) - 1)
            };
        }
    }
    if let Some((start, end)) = open {
        f(start as u16, end as u16);
    }
}

/// Sets in `bits` the bytes of the `element`-byte elements where `a` and `b` (of one page, from
/// byte `lo` of it, an element boundary) differ; whether any did. Sixty-four bytes at a time
/// ([`crate::sys::for_each_differing_chunk`]).
pub(crate) fn changed_bits(
    a: &[u8],
    b: &[u8],
    lo: usize,
    element: usize,
    bits: &mut PageBits,
) -> bool {
    let element = element.clamp(1, 8);
    let mut any = false;
    let tail = a.len() % 64;
    crate::sys::for_each_differing_chunk(a, b, element, |k, m| {
        any = true;
        let at = lo + k * 64;
        let (w, sh) = (at / 64, at % 64);
        bits[w] |= m << sh;
        if sh > 0 {
            bits[w + 1] |= m >> (64 - sh);
        }
    });
    let n = a.len();
    for i in n - tail..n {
        if a[i] != b[i] {
            any = true;
            let first = i - i % element;
            set_bits(bits, lo + first, lo + first + element);
        }
    }
    any
}
