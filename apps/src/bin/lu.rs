//! Blocked LU factorisation (no pivoting) of a diagonally dominant N x N matrix.
//!
//! `lu [N] [BLOCK]` (default 512, 32). Block rows are dealt to the nodes in a reflected cycle
//! (0, 1, .., N-1, N-1, .., 1, 0, 0, 1, ..), each allocated on its node: the trailing matrix
//! shrinks from the top, so a plain cycle leaves the last node a block row more than the first at
//! every other step (5% more work in all for 2048 / 64 on 2 nodes), and the reflected one evens
//! that out to 0.3%. For each diagonal block, every node updates its own block rows below it
//! (column panel and trailing matrix) with the block's factored rows; the owner of the next
//! block updates that block first and factors it and its row panel at once (look-ahead), then
//! signals it on a condition variable, which the other nodes wait for before they use it (a
//! barrier every few steps recycles the variables; with one node, or 64 nodes and more, a
//! barrier per step). Every element sees its updates in the same order as the sequential algorithm, so node 0
//! recomputes sequentially and the results agree to rounding (checked to 1e-9, relative).

use dsm_apps::{alloc, arg_count, init, lu_matrix, report, spread};
use dsm_runtime::{AllocPolicy, Dsm, NodeId, SharedArray, SliceMut};

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

/// Which node owns block row `block` (and is home to it): the reflected cycle 0, 1, .., N-1,
/// N-1, .., 1, 0, 0, 1, .. .
fn owner_of_block(block: usize, nodes: usize) -> usize {
    let r = block % (2 * nodes);
    if r < nodes { r } else { 2 * nodes - 1 - r }
}

/// The shared matrix: one allocation per block row, on the node that owns it.
///
/// Block row m (rows m0 = m * b and on) keeps its columns before m0 first, row after row, then
/// its columns from m0 on, row after row. Step k reads the pivot rows of block row k from column
/// k0 on, so what the other nodes fetch for a panel is the end of its block row's allocation,
/// one contiguous run, and the runtime's forward prefetch, which stays in an allocation, stops
/// where the reading does. With whole rows in a row in one allocation it also brought the
/// factored columns left of k0 of every pivot row after the first, and ran on into the next
/// block rows: for 2048 / 64 on 2 nodes, 3,800-4,400 pages served per node for 2,500 read
/// (`dsmrun --stats`).
struct Matrix {
    n: usize,
    b: usize,
    blocks: Vec<SharedArray<f64>>,
}

impl Matrix {
    /// Allocates the block rows collectively, each on its owner.
    fn alloc(dsm: &Dsm, n: usize, b: usize) -> Matrix {
        let nodes = dsm.nodes();
        let blocks = (0..n.div_ceil(b))
            .map(|k| {
                let rows = b.min(n - k * b);
                let home = NodeId(owner_of_block(k, nodes) as u16);
                alloc(dsm, rows * n, AllocPolicy::OnNode(home))
            })
            .collect();
        Matrix { n, b, blocks }
    }

    /// Row `i`'s block row, its first column m0 (where its right part starts), the row's place
    /// in it and its height.
    fn locate(&self, i: usize) -> (&SharedArray<f64>, usize, usize, usize) {
        let m = i / self.b;
        let m0 = m * self.b;
        (&self.blocks[m], m0, i - m0, self.b.min(self.n - m0))
    }

    /// Where element (i, j) is in its block row's allocation.
    fn index(&self, i: usize, j: usize) -> (&SharedArray<f64>, usize) {
        let (block, m0, r, h) = self.locate(i);
        let at = if j >= m0 {
            h * m0 + r * (self.n - m0) + (j - m0)
        } else {
            r * m0 + j
        };
        (block, at)
    }

    /// Element (i, j).
    fn get(&self, i: usize, j: usize) -> f64 {
        let (block, at) = self.index(i, j);
        block.get(at)
    }

    /// Sets element (i, j).
    fn set(&self, i: usize, j: usize, v: f64) {
        let (block, at) = self.index(i, j);
        block.set(at, v);
    }

    /// Row `i` from column `from` on, which must lie right of the row's block row start.
    ///
    /// # Safety
    /// As [`SharedArray::slice`].
    unsafe fn right(&self, i: usize, from: usize) -> &[f64] {
        let (block, m0, r, h) = self.locate(i);
        assert!(from >= m0, "row {i} from column {from}");
        let (base, w) = (h * m0, self.n - m0);
        // SAFETY: the caller's contract.
        unsafe { block.slice(base + r * w + (from - m0)..base + (r + 1) * w) }
    }

    /// Row `i` from column `from` on, split at its block row's first column m0: (columns
    /// from..m0, empty if `from` is right of m0; columns max(from, m0)..n). Only the columns
    /// an elimination writes: under the race checker, a mutable slice costs a copy and a
    /// compare of all it holds.
    ///
    /// # Safety
    /// As [`SharedArray::slice_mut`], for both parts.
    unsafe fn split_mut(&self, i: usize, from: usize) -> (SliceMut<'_, f64>, SliceMut<'_, f64>) {
        let (block, m0, r, h) = self.locate(i);
        let (base, w) = (h * m0, self.n - m0);
        let (left, right) = (from.min(m0), from.max(m0) - m0);
        // SAFETY: the caller's contract; the two ranges are disjoint.
        unsafe {
            (
                block.slice_mut(r * m0 + left..(r + 1) * m0),
                block.slice_mut(base + r * w + right..base + (r + 1) * w),
            )
        }
    }
}

/// Eliminates column `p` of row `i` of the shared matrix with pivot row `p`: the multiplier goes
/// into the column, the rest of the row loses its multiple of the pivot row.
///
/// # Safety
/// Row `i` is this node's and only this thread touches it in the current phase; row `p` is only
/// read in it (written by its owner before the signal or barrier this node waited for).
unsafe fn eliminate_shared(a: &Matrix, i: usize, p: usize) {
    // SAFETY: the caller's contract (row p, at or below row i's block row start: its right part).
    let ((mut left, mut right), pivot) = unsafe { (a.split_mut(i, p), a.right(p, p)) };
    let m0 = i / a.b * a.b;
    if p >= m0 {
        // The pivot row is in row i's block row: all of it right of m0 (`right` starts at p).
        let l = right[0] / pivot[0];
        right[0] = l;
        eliminate(&mut right[1..], &pivot[1..], l);
    } else {
        // `left` starts at column p.
        let l = left[0] / pivot[0];
        left[0] = l;
        let (pivot_left, pivot_right) = pivot[1..].split_at(m0 - p - 1);
        eliminate(&mut left[1..], pivot_left, l);
        eliminate(&mut right, pivot_right, l);
    }
}

/// Phase 0 of step `k` on the shared matrix ([`factor_step`]'s arithmetic in its order, row slices
/// instead of an access per element): factor the diagonal block and its row panel. Only the
/// block's owner calls it; nobody else reads these rows before it signals the panel.
fn factor_panel(a: &Matrix, k: usize) {
    let (k0, k1) = (k * a.b, (k * a.b + a.b).min(a.n));
    for p in k0..k1 {
        for i in p + 1..k1 {
            // SAFETY: rows k0..k1 are this node's block; no other node reads them before the
            // panel's signal.
            unsafe { eliminate_shared(a, i, p) };
        }
    }
}

/// Phase 1 of step `k` for the rows `rows` (this node's, below the block): eliminate with the
/// block's pivot rows.
fn update_rows(a: &Matrix, k: usize, rows: impl Iterator<Item = usize>) {
    let (k0, k1) = (k * a.b, (k * a.b + a.b).min(a.n));
    for i in rows {
        for p in k0..k1 {
            // SAFETY: row i is this node's, below block k; the pivot rows of block k were factored
            // before the signal (or barrier) this node waited for, and are never written again.
            unsafe { eliminate_shared(a, i, p) };
        }
    }
}

/// Condition variables that say a block's panel is factored, instead of a barrier per step.
///
/// Panel j's variable is managed by its owner (variable `v` by node `v % nodes`), so the
/// owner's clearing of it, a message to itself, is done before its next barrier. Each aligned
/// run of `nodes` panels has one of every node's, so the panels before j in whole runs, `j /
/// nodes`, count the owner's panels, and the owner's `per_node` variables take turns by that
/// count. A variable serves again at least `reuse` panels later (exactly `nodes * per_node` when
/// `per_node` is even; an odd one meets the reflected cycle from the other side, up to `nodes -
/// 1` sooner), and a barrier every `group` steps (half of `reuse`) puts every wait on a panel
/// before its variable is cleared, and every clearing before the next wait on it: a wait on
/// panel j' comes two groups after the one holding the last wait on the variable's previous
/// panel.
struct PanelSignals {
    nodes: usize,
    per_node: usize,
    group: usize,
}

impl PanelSignals {
    /// Condition variables a program may use.
    const CVS: usize = dsm_runtime::MAX_CVS as usize;

    /// `None` for one node (nothing to wait for) or when too few variables are left per node to
    /// space their reuse by two steps (64 nodes and more): a barrier per step then.
    fn new(nodes: usize) -> Option<Self> {
        let per_node = Self::CVS / nodes;
        let reuse = if per_node % 2 == 0 {
            nodes * per_node
        } else {
            (nodes * per_node).saturating_sub(nodes - 1)
        };
        let group = reuse / 2;
        (nodes > 1 && group >= 1).then_some(Self {
            nodes,
            per_node,
            group,
        })
    }

    /// Panel j's variable: one of its owner's (managed there).
    fn cv(&self, j: usize) -> u16 {
        let owner = owner_of_block(j, self.nodes);
        (owner + self.nodes * ((j / self.nodes) % self.per_node)) as u16
    }

    /// Whether step k ends a group (a barrier after it).
    fn group_ends(&self, k: usize) -> bool {
        (k + 1) % self.group == 0
    }
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "lu",
        "Blocked LU decomposition, block rows in a reflected cycle; node 0 recomputes",
        &[
            ("N", "matrix size (default 512)"),
            ("BLOCK", "block size (default 32)"),
        ],
    );
    let n = arg_count(&args, 0, "matrix size", 512);
    let b = arg_count(&args, 1, "block size", 32);
    let dsm = init("lu");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let owner = |row: usize| owner_of_block(row / b, nodes);
    let a = Matrix::alloc(&dsm, n, b);
    let init_m = lu_matrix(n);
    for i in (0..n).filter(|&i| owner(i) == me) {
        for j in 0..n {
            a.set(i, j, init_m[i * n + j]);
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
        factor_panel(&a, 0);
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
        let look_ahead = || {
            if owner(next.start) == me {
                update_rows(&a, k, next.clone());
                factor_panel(&a, k + 1);
                if let Some(s) = &signals {
                    dsm.setcv(s.cv(k + 1));
                }
            }
        };
        let mine: Vec<usize> = (next.end..n).filter(|&i| owner(i) == me).collect();
        match dsm_apps::threads() {
            1 => {
                look_ahead();
                update_rows(&a, k, mine.iter().copied());
            }
            // The node's threads: this one first does the look-ahead (the next panel, on the
            // critical path); every thread takes rows of the trailing update a chunk at a time
            // (each row by one thread; the pivot rows only read); joined before the step's
            // barrier. They meet in a barrier of threads as they start and as they end: the
            // race checker sees no spawn or join of Rust's, and with 2 nodes or more no DSM
            // barrier comes between two steps (a row one thread updated in one step and another
            // in the next was reported as a race).
            threads => {
                let taken = std::sync::atomic::AtomicUsize::new(0);
                let chunk = b.clamp(1, 16);
                let work = || {
                    loop {
                        let lo = taken.fetch_add(chunk, std::sync::atomic::Ordering::Relaxed);
                        if lo >= mine.len() {
                            break;
                        }
                        let hi = (lo + chunk).min(mine.len());
                        update_rows(&a, k, mine[lo..hi].iter().copied());
                    }
                };
                let worker = || {
                    dsm.barrier_threads(threads);
                    work();
                    dsm.barrier_threads(threads);
                };
                std::thread::scope(|s| {
                    for _ in 1..threads {
                        s.spawn(worker);
                    }
                    dsm.barrier_threads(threads);
                    look_ahead();
                    work();
                    dsm.barrier_threads(threads);
                });
            }
        }
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
            let x = a.get(idx / n, idx % n);
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
        &format!(
            "n={n} block={b}{} time={elapsed:.3}s",
            match dsm_apps::threads() {
                1 => String::new(),
                t => format!(" threads={t}"),
            }
        ),
    );
    dsm.exit();
}
