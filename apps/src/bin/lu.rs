//! Blocked LU factorisation (no pivoting) of a diagonally dominant N x N matrix.
//!
//! `lu [N] [BLOCK]` (default 512, 32). Block rows are dealt to the nodes cyclically (and homed
//! there). For each diagonal block: its owner factors it and its row panel, a barrier, then every
//! node updates its own block rows below (column panel and trailing matrix), a barrier. Every
//! element sees its updates in the same order as the sequential algorithm, so node 0 recomputes
//! sequentially and the results agree to rounding (checked to 1e-9, relative).

use dsm_apps::{Gen, arg_num, init, report};
use dsm_runtime::{AllocPolicy, NodeId, SharedArray};

fn matrix(n: usize) -> Vec<f64> {
    let mut g = Gen(0x1u64 << 40 | n as u64);
    let mut a: Vec<f64> = (0..n * n).map(|_| g.unit() - 0.5).collect();
    for i in 0..n {
        a[i * n + i] += n as f64;
    }
    a
}

/// One block step `k` restricted to the rows `owns(row)` says we own; `get`/`set` reach the matrix.
fn factor_step(
    n: usize,
    b: usize,
    k: usize,
    a: &mut dyn FnMut(usize, Option<f64>) -> f64,
    diag_mine: bool,
    row_mine: &dyn Fn(usize) -> bool,
    phase: u8,
) {
    let k0 = k * b;
    let k1 = (k0 + b).min(n);
    if phase == 0 && diag_mine {
        // Factor the diagonal block and compute the row panel U12, columns by pivot.
        for p in k0..k1 {
            let piv = a(p * n + p, None);
            for i in p + 1..k1 {
                let l = a(i * n + p, None) / piv;
                a(i * n + p, Some(l));
                for j in p + 1..n {
                    let v = a(i * n + j, None) - l * a(p * n + j, None);
                    a(i * n + j, Some(v));
                }
            }
        }
    }
    if phase == 1 {
        for i in k1..n {
            if !row_mine(i) {
                continue;
            }
            for p in k0..k1 {
                let l = a(i * n + p, None) / a(p * n + p, None);
                a(i * n + p, Some(l));
                for j in p + 1..n {
                    let v = a(i * n + j, None) - l * a(p * n + j, None);
                    a(i * n + j, Some(v));
                }
            }
        }
    }
}

/// `row -= l * pivot_row`, element by element (vectorisable).
fn eliminate(row: &mut [f64], pivot_row: &[f64], l: f64) {
    for (x, &p) in row.iter_mut().zip(pivot_row) {
        *x -= l * p;
    }
}

/// [`factor_step`] on the shared matrix, row slices instead of an access per element: the same
/// arithmetic in the same order.
fn factor_step_shared(
    a: SharedArray<f64>,
    n: usize,
    b: usize,
    k: usize,
    diag_mine: bool,
    row_mine: &dyn Fn(usize) -> bool,
    phase: u8,
) {
    let k0 = k * b;
    let k1 = (k0 + b).min(n);
    let rows = |i: usize, p: usize| {
        // SAFETY: row i is this node's (the diagonal block's rows in phase 0, its own rows in
        // phase 1) and only this thread touches it; the pivot row p < i is only read in this
        // phase (written in phase 0 by its owner, separated by a barrier).
        unsafe { (a.slice_mut(i * n..(i + 1) * n), a.slice(p * n..(p + 1) * n)) }
    };
    if phase == 0 && diag_mine {
        for p in k0..k1 {
            for i in p + 1..k1 {
                let (row, pivot) = rows(i, p);
                let l = row[p] / pivot[p];
                row[p] = l;
                eliminate(&mut row[p + 1..], &pivot[p + 1..], l);
            }
        }
    }
    if phase == 1 {
        for i in (k1..n).filter(|&i| row_mine(i)) {
            for p in k0..k1 {
                let (row, pivot) = rows(i, p);
                let l = row[p] / pivot[p];
                row[p] = l;
                eliminate(&mut row[p + 1..], &pivot[p + 1..], l);
            }
        }
    }
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "lu",
        "Blocked LU decomposition, block rows cyclic; node 0 recomputes",
        &[
            ("N", "matrix size (default 512)"),
            ("BLOCK", "block size (default 32)"),
        ],
    );
    let n = arg_num(&args, 0, "matrix size", 512);
    let b = arg_num(&args, 1, "block size", 32).max(1);
    let dsm = init("lu");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let owner = |row: usize| (row / b) % nodes;
    let a: SharedArray<f64> = dsm
        .alloc(
            n * n,
            AllocPolicy::Cyclic {
                block_bytes: (b * n * 8) as u64,
                start: NodeId(0),
            },
        )
        .expect("alloc matrix");
    let init_m = matrix(n);
    for i in (0..n).filter(|&i| owner(i) == me) {
        for j in 0..n {
            a.set(i * n + j, init_m[i * n + j]);
        }
    }
    dsm.barrier();
    dsm.start_stats();
    let t0 = dsm.clock();
    let blocks = n.div_ceil(b);
    for k in 0..blocks {
        for phase in [0, 1] {
            factor_step_shared(a, n, b, k, owner(k * b) == me, &|i| owner(i) == me, phase);
            dsm.barrier();
        }
    }
    let elapsed = dsm.clock() - t0;
    dsm.stop_stats();
    let mut ok = true;
    if check && me == 0 {
        let mut s = init_m;
        let mut seq = |idx: usize, v: Option<f64>| match v {
            Some(v) => {
                s[idx] = v;
                v
            }
            None => s[idx],
        };
        for k in 0..blocks {
            factor_step(n, b, k, &mut seq, true, &|_| true, 0);
            factor_step(n, b, k, &mut seq, true, &|_| true, 1);
        }
        let mut worst = 0.0f64;
        for (idx, &y) in s.iter().enumerate() {
            let x = a.get(idx);
            worst = worst.max((x - y).abs() / y.abs().max(1.0));
        }
        ok = worst <= 1e-9;
        if !ok {
            eprintln!(
                "lu: largest relative difference from the sequential factorisation: {worst:e}"
            );
        }
    }
    report(
        &dsm,
        "lu",
        ok,
        &format!("n={n} block={b} time={elapsed:.3}s"),
    );
    dsm.exit();
}
