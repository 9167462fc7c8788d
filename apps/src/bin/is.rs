//! Integer sort (NAS IS style): keys ranked by counting.
//!
//! `is [KEYS] [MAX_KEY]` (default 4,194,304 keys below 65,536). Each node counts its share of
//! the keys into its own histogram (homed at it), a barrier, then fills its band of the output
//! from the histograms: the keys are plain numbers, so the value at every position follows from
//! the counts alone (value v fills the positions from the number of keys below v on), and no
//! node reads another's keys. A barrier. Verified: the output is sorted and has the
//! same multiset of keys (counts per value) as the input.

use dsm_apps::{Gen, alloc, arg_count, arg_range, band, banded, init, report};
use dsm_runtime::SharedArray;

fn key(i: usize, max: usize) -> u32 {
    let mut g = Gen(0x15_0000 + i as u64 * 0x9E37_79B9);
    (g.next_u64() % max as u64) as u32
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "is",
        "Integer sort by counting; checks sorted and the same multiset",
        &[
            ("KEYS", "keys (default 4194304)"),
            (
                "MAX_KEY",
                "keys are below it, 1 to 4294967296 (default 65536)",
            ),
        ],
    );
    let n = arg_count(&args, 0, "keys", 1 << 22);
    let max = arg_range(&args, 1, "max key", 1 << 16, 1..=1 << 32);
    let dsm = init("is");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let keys: SharedArray<u32> = alloc(&dsm, n, banded(n, 4, nodes));
    let out: SharedArray<u32> = alloc(&dsm, n, banded(n, 4, nodes));
    let hist: SharedArray<u64> = alloc(&dsm, nodes * max, banded(nodes, max * 8, nodes));
    let mine = band(n, me, nodes);
    for i in mine.0..mine.1 {
        keys.set(i, key(i, max));
    }
    dsm.barrier();
    dsm.start_stats();
    let t0 = dsm.clock();
    let mut local = vec![0u64; max];
    for i in mine.0..mine.1 {
        local[keys.get(i) as usize] += 1;
    }
    for (v, c) in local.iter().enumerate() {
        hist.set(me * max + v, *c);
    }
    dsm.barrier();
    // Every key's final position: all keys of smaller values, then the keys of its value in
    // index order. Each node places the keys whose positions fall in its own band of the output
    // (pulling them from every node's keys, which are only read now) instead of pushing its keys
    // to positions all over the output: scattered writes to pages homed elsewhere cost a twin
    // and a diff per page (4096 diffs per run at the defaults on 2 nodes), reads of the keys a
    // stream of read-ahead.
    let mut next = vec![0u64; max];
    let mut below = 0u64;
    for (v, slot) in next.iter_mut().enumerate() {
        *slot = below;
        below += (0..nodes).map(|p| hist.get(p * max + v)).sum::<u64>();
    }
    let out_band = band(n, me, nodes);
    // SAFETY: this node alone writes its band of the output, and only this thread.
    let mut my_out = unsafe { out.slice_mut(out_band.0..out_band.1) };
    for (v, &start) in next.iter().enumerate() {
        let end = next.get(v + 1).map_or(below, |&e| e) as usize;
        let (from, to) = ((start as usize).max(out_band.0), end.min(out_band.1));
        if from < to {
            my_out[from - out_band.0..to - out_band.0].fill(v as u32);
        }
    }
    dsm.barrier();
    let elapsed = dsm.clock() - t0;
    dsm.stop_stats();
    // Each node checks its band of the output; node 0 checks the counts.
    let mut ok = !check || (mine.0.max(1)..mine.1).all(|i| out.get(i - 1) <= out.get(i));
    if check && me == 0 {
        let mut counts = vec![0u64; max];
        for i in 0..n {
            counts[out.get(i) as usize] += 1;
        }
        let mut expect = vec![0u64; max];
        for i in 0..n {
            expect[key(i, max) as usize] += 1;
        }
        ok &= counts == expect;
    }
    report(
        &dsm,
        "is",
        ok,
        &format!("keys={n} max_key={max} time={elapsed:.3}s"),
    );
    dsm.exit();
}
