//! Embarrassingly parallel (NAS EP style): Gaussian pairs by the polar method, counted by annulus.
//!
//! `ep [PAIRS]` (default 8,388,608). Each node generates its share of the pairs from its own
//! stream, then adds its counts and sums to the shared totals under a lock. Node 0 recomputes the
//! whole thing alone and compares the counts exactly and the sums to 1e-9.

#![allow(
    clippy::needless_range_loop,
    reason = "numerical kernels read clearest with explicit indices"
)]

use dsm_apps::{Gen, alloc, arg_count, init, report};
use dsm_runtime::{AllocPolicy, NodeId, SharedArray};

const BINS: usize = 10;

/// Counts and sums for pairs `from..to` (each pair from its own seed, so any split agrees).
fn ep(from: usize, to: usize) -> ([u64; BINS], f64, f64) {
    let mut q = [0u64; BINS];
    let (mut sx, mut sy) = (0.0, 0.0);
    for i in from..to {
        let mut g =
            Gen(0xE9_0000_0000 + (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) % 0xFFFF_FFFF + 1);
        let x = 2.0 * g.unit() - 1.0;
        let y = 2.0 * g.unit() - 1.0;
        let t = x * x + y * y;
        if t <= 1.0 && t > 0.0 {
            let f = (-2.0 * t.ln() / t).sqrt();
            let (gx, gy) = (x * f, y * f);
            let l = gx.abs().max(gy.abs()) as usize;
            if l < BINS {
                q[l] += 1;
                sx += gx;
                sy += gy;
            }
        }
    }
    (q, sx, sy)
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "ep",
        "Gaussian pairs counted by annulus; node 0 recomputes",
        &[("PAIRS", "pairs (default 8388608)")],
    );
    let n = arg_count(&args, 0, "pairs", 1 << 23);
    let dsm = init("ep");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let totals: SharedArray<f64> = alloc(&dsm, BINS + 2, AllocPolicy::OnNode(NodeId(0)));
    dsm.barrier();
    let t0 = dsm.clock();
    let (q, sx, sy) = ep(n * me / nodes, n * (me + 1) / nodes);
    {
        let _g = dsm.lock(5);
        for (b, c) in q.iter().enumerate() {
            totals.set(b, totals.get(b) + *c as f64);
        }
        totals.set(BINS, totals.get(BINS) + sx);
        totals.set(BINS + 1, totals.get(BINS + 1) + sy);
    }
    dsm.barrier();
    let elapsed = dsm.clock() - t0;
    let mut ok = true;
    if check && me == 0 {
        let (q, sx, sy) = ep(0, n);
        ok = (0..BINS).all(|b| totals.get(b) == q[b] as f64)
            && (totals.get(BINS) - sx).abs() < 1e-9 * sx.abs().max(1.0)
            && (totals.get(BINS + 1) - sy).abs() < 1e-9 * sy.abs().max(1.0);
    }
    let count: f64 = (0..BINS).map(|b| totals.get(b)).sum();
    report(
        &dsm,
        "ep",
        ok,
        &format!("pairs={n} gaussians={count} time={elapsed:.3}s"),
    );
    dsm.exit();
}
