//! Integer sort (NAS IS style): keys ranked by counting.
//!
//! `is [KEYS] [MAX_KEY]` (default 4,194,304 keys below 65,536). Each node counts its share of
//! the keys into its own histogram (homed at it), a barrier, then places its keys at their final
//! positions using every node's histogram, a barrier. Verified: the output is sorted and has the
//! same multiset of keys (counts per value) as the input.

use dsm_apps::{Gen, arg_num, band, banded, init, report};
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
            ("MAX_KEY", "largest key (default 65536)"),
        ],
    );
    let n = arg_num(&args, 0, "keys", 1 << 22);
    let max = arg_num(&args, 1, "max key", 1 << 16).max(1);
    let dsm = init("is");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let keys: SharedArray<u32> = dsm.alloc(n, banded(n, 4, nodes)).expect("alloc");
    let out: SharedArray<u32> = dsm.alloc(n, banded(n, 4, nodes)).expect("alloc");
    let hist: SharedArray<u64> = dsm
        .alloc(nodes * max, banded(nodes, max * 8, nodes))
        .expect("alloc");
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
    // Where my keys of value v start: all keys of smaller values, plus earlier nodes' keys of v.
    let mut next = vec![0u64; max];
    let mut below = 0u64;
    for (v, slot) in next.iter_mut().enumerate() {
        let mut before_me = 0;
        let mut all = 0;
        for p in 0..nodes {
            let c = hist.get(p * max + v);
            if p < me {
                before_me += c;
            }
            all += c;
        }
        *slot = below + before_me;
        below += all;
    }
    for i in mine.0..mine.1 {
        let k = keys.get(i) as usize;
        out.set(next[k] as usize, k as u32);
        next[k] += 1;
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
