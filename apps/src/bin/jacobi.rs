//! Jacobi iteration for Laplace's equation on an (N+2) x (N+2) grid, two grids swapped each step.
//!
//! `jacobi [N] [ITERATIONS]` (default 512, 20). Rows banded over the nodes; a barrier per step.
//! Node 0 recomputes sequentially and compares bit for bit.
//!
//! `--on-node-0` allocates both grids on node 0, as many JIAJIA programs do (`jia_alloc2p(size,
//! 0)`), while each node still computes its own band: without home migration every step sends
//! every band back to node 0 as diffs; with it, the bands' pages move to their writers at the
//! first barriers.

#![allow(
    clippy::needless_range_loop,
    reason = "numerical kernels read clearest with explicit indices"
)]

use dsm_apps::{Bands, alloc, arg_count, arg_num, init, interior_first, report};
use dsm_runtime::SharedArray;

fn border(i: usize, j: usize, w: usize) -> f64 {
    if i == 0 || j == 0 || i == w - 1 || j == w - 1 {
        (i + 2 * j) as f64
    } else {
        0.0
    }
}

fn main() {
    let (args, check, flags) = dsm_apps::args_with_flags(
        "jacobi",
        "Jacobi iteration on two grids; node 0 recomputes and compares bit for bit",
        &[
            ("N", "grid size (default 512)"),
            ("ITERS", "iterations (default 20)"),
        ],
        &[(
            "on-node-0",
            "Allocate both grids on node 0 (each node still computes its own band)",
        )],
    );
    let on_node_0 = flags[0];
    let n = arg_count(&args, 0, "grid size", 512);
    let iters = arg_num(&args, 1, "iterations", 20);
    let dsm = init("jacobi");
    let w = n + 2;
    let bands = Bands::page_aligned(w, w * 8, dsm.nodes());
    let policy = if on_node_0 {
        dsm_runtime::AllocPolicy::OnNode(dsm_runtime::NodeId(0))
    } else {
        bands.policy()
    };
    let grids: [SharedArray<f64>; 2] = [
        alloc(&dsm, w * w, policy.clone()),
        alloc(&dsm, w * w, policy),
    ];
    let rows = bands.of(dsm.id());
    for g in &grids {
        for i in rows.0..rows.1 {
            for j in 0..w {
                g.set(i * w + j, border(i, j, w));
            }
        }
    }
    dsm.barrier();
    dsm.start_stats();
    let t0 = dsm.clock();
    for t in 0..iters {
        let (src, dst) = (grids[t % 2], grids[(t + 1) % 2]);
        for i in interior_first(rows.0.max(1), rows.1.min(w - 1)) {
            // SAFETY: this node alone writes row i of `dst` (its band) and only this thread
            // touches it; `src` is only read until the barrier ends the step.
            let (up, mid, down, mut out) = unsafe {
                (
                    src.slice((i - 1) * w..i * w),
                    src.slice(i * w..(i + 1) * w),
                    src.slice((i + 1) * w..(i + 2) * w),
                    dst.slice_mut(i * w..(i + 1) * w),
                )
            };
            // The same arithmetic, in the same order, as node 0's check: vectorisable.
            for j in 1..w - 1 {
                out[j] = 0.25 * (up[j] + down[j] + mid[j - 1] + mid[j + 1]);
            }
        }
        dsm.barrier();
    }
    let elapsed = dsm.clock() - t0;
    dsm.stop_stats();
    let mut ok = true;
    if check && dsm.id() == 0 {
        let mut s: [Vec<f64>; 2] = [
            (0..w * w).map(|k| border(k / w, k % w, w)).collect(),
            (0..w * w).map(|k| border(k / w, k % w, w)).collect(),
        ];
        for t in 0..iters {
            let (a, b) = s.split_at_mut(1);
            let (src, dst) = if t % 2 == 0 {
                (&a[0], &mut b[0])
            } else {
                (&b[0], &mut a[0])
            };
            for i in 1..w - 1 {
                for j in 1..w - 1 {
                    dst[i * w + j] = 0.25
                        * (src[(i - 1) * w + j]
                            + src[(i + 1) * w + j]
                            + src[i * w + j - 1]
                            + src[i * w + j + 1]);
                }
            }
        }
        let last = iters % 2;
        ok = (0..w * w).all(|k| grids[last].get(k).to_bits() == s[last][k].to_bits());
    }
    report(
        &dsm,
        "jacobi",
        ok,
        &format!(
            "n={n} iterations={iters} time={elapsed:.3}s{}",
            if on_node_0 { " alloc=node0" } else { "" }
        ),
    );
    dsm.exit();
}
