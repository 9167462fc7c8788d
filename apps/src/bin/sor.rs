//! Red-black successive over-relaxation on an (N+2) x (N+2) grid with fixed borders.
//!
//! `sor [N] [ITERATIONS]` (default 512, 20). Rows are banded over the nodes; each half-sweep
//! updates one colour from the other, with a barrier between, its boundary rows last (they wait
//! for the neighbours' fresh rows). Red-black ordering makes the result
//! independent of the partition, so node 0 recomputes it sequentially and compares bit for bit.

#![allow(
    clippy::needless_range_loop,
    reason = "numerical kernels read clearest with explicit indices"
)]

use dsm_apps::kernels::{SOR_OMEGA as OMEGA, sor_row};
use dsm_apps::{Bands, alloc, arg_count, arg_num, init, interior_first, report, spread};
use dsm_runtime::SharedArray;

fn initial(i: usize, j: usize, n: usize) -> f64 {
    if i == 0 || j == 0 || i == n + 1 || j == n + 1 {
        ((i * 3 + j * 7) % 11) as f64
    } else {
        0.0
    }
}

/// The half-sweep of this node's band (or of this thread's share of it) of the shared grid, row
/// by row on plain slices. With `shared_edges` (threads of one node), the share's first and last
/// rows go cell by cell instead: the neighbouring thread reads them (their cells of the other
/// colour) while this one writes them, and this one reads its neighbour's nearest row, which
/// slices would alias.
fn sweep_shared(
    g: SharedArray<f64>,
    w: usize,
    rows: (usize, usize),
    n: usize,
    colour: usize,
    shared_edges: bool,
) {
    for i in interior_first(rows.0.max(1), rows.1.min(n + 1)) {
        if shared_edges && (i == rows.0 || i + 1 == rows.1) {
            sor_row_cells(g, w, i, n, colour);
            continue;
        }
        // SAFETY: this node alone writes row i (its band), only this thread of it (its share);
        // rows i - 1 and i + 1 are written by no thread of this node before the barrier that
        // ends this half-sweep (with threads, a share's edge rows, which a neighbouring thread
        // touches, take the cell-by-cell path above), and other nodes' writes reach this node
        // only at that barrier.
        let (up, mut row, down) = unsafe {
            (
                g.slice((i - 1) * w..i * w),
                g.slice_mut(i * w..(i + 1) * w),
                g.slice((i + 1) * w..(i + 2) * w),
            )
        };
        sor_row(up, &mut row, down, i, n, colour);
    }
}

/// [`sor_row`] on row `i` of the shared grid through its accessors, cell by cell (the same
/// arithmetic in the same order, bit for bit).
fn sor_row_cells(g: SharedArray<f64>, w: usize, i: usize, n: usize, colour: usize) {
    let first = if (i + 1) % 2 == colour { 1 } else { 2 };
    for j in (first..=n).step_by(2) {
        let x = g.get(i * w + j);
        let (u, d) = (g.get((i - 1) * w + j), g.get((i + 1) * w + j));
        let (l, r) = (g.get(i * w + j - 1), g.get(i * w + j + 1));
        g.set(i * w + j, x + OMEGA * ((u + d + l + r) / 4.0 - x));
    }
}

/// The sequential reference (node 0's check), cell by cell.
fn sweep(
    g: &mut dyn FnMut(usize, usize) -> f64,
    set: &mut dyn FnMut(usize, usize, f64),
    rows: (usize, usize),
    n: usize,
    colour: usize,
) {
    for i in interior_first(rows.0.max(1), rows.1.min(n + 1)) {
        for j in 1..=n {
            if (i + j) % 2 == colour {
                let v = g(i, j)
                    + OMEGA
                        * ((g(i - 1, j) + g(i + 1, j) + g(i, j - 1) + g(i, j + 1)) / 4.0 - g(i, j));
                set(i, j, v);
            }
        }
    }
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "sor",
        "Red-black SOR on an N x N grid; node 0 recomputes and compares bit for bit",
        &[
            ("N", "grid size (default 512)"),
            ("ITERS", "iterations (default 20)"),
        ],
    );
    let n = arg_count(&args, 0, "grid size", 512);
    let iters = arg_num(&args, 1, "iterations", 20);
    let dsm = init("sor");
    let w = n + 2;
    let bands = Bands::page_aligned(w, w * 8, dsm.nodes());
    let g: SharedArray<f64> = alloc(&dsm, w * w, bands.policy());
    let rows = bands.of(dsm.id());
    for i in rows.0..rows.1 {
        for j in 0..w {
            g.set(i * w + j, initial(i, j, n));
        }
    }
    dsm.barrier();
    dsm.start_stats();
    let t0 = dsm.clock();
    // Every half-sweep's and barrier's time, for SOR_TRACE.
    let (mut sweeps, mut barriers) = (Vec::new(), Vec::new());
    let threads = dsm_apps::threads();
    if threads > 1 {
        // The node's band split among its threads (this one takes the first share: a thread of
        // the node's that only waited for the others would hide a job that cannot go on from
        // the deadlock watch), one barrier of every thread per half-sweep.
        let run = |mine: (usize, usize)| {
            for _ in 0..iters {
                for colour in 0..2 {
                    sweep_shared(g, w, mine, n, colour, true);
                    dsm.barrier_threads(threads);
                }
            }
        };
        std::thread::scope(|s| {
            for t in 1..threads {
                let run = &run;
                s.spawn(move || run(dsm_apps::share(rows, t, threads)));
            }
            run(dsm_apps::share(rows, 0, threads));
        });
    }
    for _ in 0..iters * usize::from(threads == 1) {
        for colour in 0..2 {
            let t = dsm.clock();
            sweep_shared(g, w, rows, n, colour, false);
            let t1 = dsm.clock();
            dsm.barrier();
            sweeps.push(t1 - t);
            barriers.push(dsm.clock() - t1);
        }
    }
    let elapsed = dsm.clock() - t0;
    if std::env::var_os("SOR_TRACE").is_some() {
        eprintln!(
            "node {}: sweeps {}; barriers {}",
            dsm.id(),
            spread(&mut sweeps),
            spread(&mut barriers)
        );
    }
    dsm.stop_stats();
    let mut ok = true;
    if check && dsm.id() == 0 {
        let mut s: Vec<f64> = (0..w * w).map(|k| initial(k / w, k % w, n)).collect();
        for _ in 0..iters {
            for colour in 0..2 {
                let mut updates = Vec::new();
                sweep(
                    &mut |i, j| s[i * w + j],
                    &mut |i, j, v| updates.push((i * w + j, v)),
                    (0, w),
                    n,
                    colour,
                );
                for (k, v) in updates {
                    s[k] = v;
                }
            }
        }
        ok = (0..w * w).all(|k| g.get(k).to_bits() == s[k].to_bits());
    }
    let threads = if threads > 1 {
        format!(" threads={threads}")
    } else {
        String::new()
    };
    report(
        &dsm,
        "sor",
        ok,
        &format!("n={n} iterations={iters}{threads} time={elapsed:.3}s"),
    );
    dsm.exit();
}
