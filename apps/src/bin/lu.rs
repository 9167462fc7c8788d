//! Blocked LU factorisation (no pivoting) of a diagonally dominant N x N matrix.
//!
//! `lu [N] [BLOCK]` (default 512, 32). Block rows are dealt to the nodes cyclically (and homed
//! there). For each diagonal block, every node updates its own block rows below it (column panel
//! and trailing matrix) with the block's factored rows; the owner of the next block updates that
//! block first and factors it and its row panel at once (look-ahead), then signals it on a
//! condition variable, which the other nodes wait for before they use it (a barrier every few
//! steps recycles the variables; with one node, or more than 16, a barrier per step). Every
//! element sees its updates in the same order as the sequential algorithm, so node 0 recomputes
//! sequentially and the results agree to rounding (checked to 1e-9, relative).

use dsm_apps::{Gen, arg_num, init, report, spread};
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

/// Eliminates column `p` of row `i` of the shared matrix with pivot row `p`: the multiplier goes
/// into the column, the rest of the row loses its multiple of the pivot row.
///
/// # Safety
/// Row `i` is this node's and only this thread touches it in the current phase; row `p` is only
/// read in it (written by its owner before the signal or barrier this node waited for).
unsafe fn eliminate_shared(a: SharedArray<f64>, n: usize, i: usize, p: usize) {
    // SAFETY: the caller's contract.
    let (row, pivot) = unsafe { (a.slice_mut(i * n..(i + 1) * n), a.slice(p * n..(p + 1) * n)) };
    let l = row[p] / pivot[p];
    row[p] = l;
    eliminate(&mut row[p + 1..], &pivot[p + 1..], l);
}

/// Phase 0 of step `k` on the shared matrix ([`factor_step`]'s arithmetic in its order, row slices
/// instead of an access per element): factor the diagonal block and its row panel. Only the
/// block's owner calls it; nobody else reads these rows before it signals the panel.
fn factor_panel(a: SharedArray<f64>, n: usize, b: usize, k: usize) {
    let (k0, k1) = (k * b, (k * b + b).min(n));
    for p in k0..k1 {
        for i in p + 1..k1 {
            // SAFETY: rows k0..k1 are this node's block; no other node reads them before the
            // panel's signal.
            unsafe { eliminate_shared(a, n, i, p) };
        }
    }
}

/// Phase 1 of step `k` for the rows `rows` (this node's, below the block): eliminate with the
/// block's pivot rows.
fn update_rows(
    a: SharedArray<f64>,
    n: usize,
    b: usize,
    k: usize,
    rows: impl Iterator<Item = usize>,
) {
    let (k0, k1) = (k * b, (k * b + b).min(n));
    for i in rows {
        for p in k0..k1 {
            // SAFETY: row i is this node's, below block k; the pivot rows of block k were factored
            // before the signal (or barrier) this node waited for, and are never written again.
            unsafe { eliminate_shared(a, n, i, p) };
        }
    }
}

/// Condition variables that say a block's panel is factored, instead of a barrier per step.
/// Panel j's variable is managed by its owner (j % nodes), so the owner's clearing of it, a
/// message to itself, is done before its next barrier; a variable serves again `reuse` panels
/// later, and a barrier every `group` steps (half of that) puts every wait on a panel before its
/// variable is cleared, and every clearing before the next wait on it.
struct PanelSignals {
    nodes: usize,
    per_node: usize,
    group: usize,
}

impl PanelSignals {
    /// Condition variables a program may use (`jia_setcv`'s 0..16).
    const CVS: usize = 16;

    /// `None` for one node (nothing to wait for) or more nodes than variables (a barrier per
    /// step then).
    fn new(nodes: usize) -> Option<Self> {
        let per_node = Self::CVS / nodes;
        (nodes > 1 && per_node >= 1).then(|| Self {
            nodes,
            per_node,
            group: (nodes * per_node / 2).max(1),
        })
    }

    /// Panel j's variable: one of its owner's (managed there).
    fn cv(&self, j: usize) -> u16 {
        (j % self.nodes + self.nodes * ((j / self.nodes) % self.per_node)) as u16
    }

    /// Whether step k ends a group (a barrier after it).
    fn group_ends(&self, k: usize) -> bool {
        (k + 1) % self.group == 0
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
    // With look-ahead: in step k the owner of block k + 1 updates that block first and factors
    // it at once, then says so on a condition variable; a node waits for a block's panel only
    // when it needs it, and runs ahead while the other nodes finish their updates (a barrier
    // every few steps recycles the variables). Each element still sees its updates in the
    // sequential order.
    let signals = PanelSignals::new(nodes);
    if owner(0) == me {
        factor_panel(a, n, b, 0);
    }
    match &signals {
        Some(s) if owner(0) == me => dsm.setcv(s.cv(0)),
        Some(_) => {}
        None => dsm.barrier(),
    }
    // Every step's computing time and time waiting (for panels and barriers), for LU_TRACE.
    let (mut steps, mut waits) = (Vec::new(), Vec::new());
    for k in 0..blocks.saturating_sub(1) {
        let t = dsm.clock();
        if let Some(s) = &signals {
            if owner(k * b) != me {
                dsm.waitcv(s.cv(k));
            }
        }
        let t1 = dsm.clock();
        let next = (k + 1) * b..((k + 2) * b).min(n);
        if owner(next.start) == me {
            update_rows(a, n, b, k, next.clone());
            factor_panel(a, n, b, k + 1);
            if let Some(s) = &signals {
                dsm.setcv(s.cv(k + 1));
            }
        }
        update_rows(a, n, b, k, (next.end..n).filter(|&i| owner(i) == me));
        let t2 = dsm.clock();
        match &signals {
            Some(s) if s.group_ends(k) => {
                dsm.barrier();
                // Every wait on the group's panels is over: clear their variables for reuse.
                for j in (k + 1 - s.group..=k).filter(|&j| owner(j * b) == me) {
                    dsm.resetcv(s.cv(j));
                }
            }
            Some(_) => {}
            None => dsm.barrier(),
        }
        steps.push(t2 - t1);
        waits.push(t1 - t + dsm.clock() - t2);
    }
    dsm.barrier();
    let elapsed = dsm.clock() - t0;
    if std::env::var_os("LU_TRACE").is_some() {
        eprintln!(
            "node {me}: steps {}; waits {}",
            spread(&mut steps),
            spread(&mut waits)
        );
    }
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
