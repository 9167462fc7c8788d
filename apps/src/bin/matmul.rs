//! Matrix multiply on the DSM: C = A x B, rows banded over the nodes.
//!
//! `matmul [--no-check] [N] [f64|f32] [gemm|blocked|ikj]` (default 1024, f64, gemm). Each node
//! initialises its band of A and B, a barrier, computes its band of C with the chosen kernel (the
//! same code as a one-node run: a GEMM library's kernel by default, or the simple cache-blocked or
//! plain i-k-j loops, kept for the protocol's sake: they touch B row by row), a barrier, then
//! verifies its band exactly (unless `--no-check`): the matrices hold small integers, so every
//! product is an exact integer in f32 and f64; each node checks A(Br) = Cr for two random
//! vectors r (Freivalds) in integer arithmetic, and 64 entries of its band directly. Node 0
//! prints one line:
//!
//! `matmul OK f64 n=1024 nodes=2 kernel=gemm time=0.101s gflops=21.2`
//!
//! (`UNCHECKED` instead of `OK` with `--no-check`), and the job exits non-zero if any entry is
//! wrong.

use std::ops::{Add, Mul};

use dsm_apps::sys::Gemm;
use dsm_apps::{all_ok, arg_count, band, banded};
use dsm_runtime::{Dsm, Shared, SharedArray};

trait Real: Shared + Gemm + Add<Output = Self> + Mul<Output = Self> + Default {
    const NAME: &'static str;
    fn from_small(v: i64) -> Self;
    fn to_exact(self) -> Option<i64>;
}

impl Real for f64 {
    const NAME: &'static str = "f64";
    fn from_small(v: i64) -> Self {
        v as f64
    }
    fn to_exact(self) -> Option<i64> {
        (self.fract() == 0.0 && self.abs() < 9e15).then_some(self as i64)
    }
}

impl Real for f32 {
    const NAME: &'static str = "f32";
    fn from_small(v: i64) -> Self {
        v as f32
    }
    fn to_exact(self) -> Option<i64> {
        (self.fract() == 0.0 && self.abs() < 1.6e7).then_some(self as i64)
    }
}

fn a_val(i: usize, k: usize) -> i64 {
    ((i * 7 + k * 3) % 7) as i64 - 3
}

fn b_val(k: usize, j: usize) -> i64 {
    ((k * 3 + j * 5) % 5) as i64 - 2
}

/// `C[rows] = A[rows] x B`, i-k-j order: the inner loop streams a row of B into a row of C.
fn kernel<T: Real>(
    a: SharedArray<T>,
    b: SharedArray<T>,
    c: SharedArray<T>,
    n: usize,
    rows: (usize, usize),
) {
    for i in rows.0..rows.1 {
        // SAFETY: this node alone writes its band of C, and only this thread touches it; A and B
        // are only read between the two barriers.
        let mut crow = unsafe { c.slice_mut(i * n..(i + 1) * n) };
        crow.fill(T::default());
        // SAFETY: as above, A's row is read-only here.
        let arow = unsafe { a.slice(i * n..(i + 1) * n) };
        for (k, &aik) in arow.iter().enumerate() {
            // SAFETY: as above, B is read-only here.
            let brow = unsafe { b.slice(k * n..(k + 1) * n) };
            for (cij, &bkj) in crow.iter_mut().zip(brow) {
                *cij = *cij + aik * bkj;
            }
        }
    }
}

/// The cache-blocked variant:
/// `C[rows][jj..jj+JB] += A[rows][kk..kk+KB] x B[kk..kk+KB][jj..jj+JB]`, so a 256 x 256 block of
/// B (512 KiB) stays in L2 while every row of the band uses it. The i-k-j kernel streams all of B
/// from memory for every row, and two nodes doing that on one machine share one memory bus
/// (measured: no speedup at all at 2048).
fn kernel_blocked<T: Real>(
    a: SharedArray<T>,
    b: SharedArray<T>,
    c: SharedArray<T>,
    n: usize,
    rows: (usize, usize),
) {
    const JB: usize = 256;
    const KB: usize = 256;
    for i in rows.0..rows.1 {
        // SAFETY: this node alone writes its band of C, and only this thread touches it.
        unsafe { c.slice_mut(i * n..(i + 1) * n) }.fill(T::default());
    }
    for jj in (0..n).step_by(JB) {
        let je = (jj + JB).min(n);
        for kk in (0..n).step_by(KB) {
            let ke = (kk + KB).min(n);
            for i in rows.0..rows.1 {
                // SAFETY: as in `kernel`: C's band is ours alone, A and B are read-only here.
                let mut crow = unsafe { c.slice_mut(i * n + jj..i * n + je) };
                // SAFETY: as above.
                let arow = unsafe { a.slice(i * n + kk..i * n + ke) };
                for (k, &aik) in (kk..ke).zip(arow) {
                    // SAFETY: as above.
                    let brow = unsafe { b.slice(k * n + jj..k * n + je) };
                    for (cij, &bkj) in crow.iter_mut().zip(brow) {
                        *cij = *cij + aik * bkj;
                    }
                }
            }
        }
    }
}

/// The rows of B a thread's band of C takes, in the order it takes them: its own rows (the
/// diagonal block), the rest of its node's band, then the other nodes' bands in a ring, the next
/// node's first. Node i reads node i + 1's rows while node i + 1 reads node i + 2's: every home
/// serves one reader at a time, where an order from row 0 would queue every node at node 0,
/// then all of them at node 1.
fn ring_order(n: usize, rows: (usize, usize), me: usize, nodes: usize) -> Vec<(usize, usize)> {
    let own = band(n, me, nodes);
    let mut order = vec![rows, (rows.1, own.1), (own.0, rows.0)];
    order.extend((1..nodes).map(|d| band(n, (me + d) % nodes, nodes)));
    order.retain(|(lo, hi)| hi > lo);
    order
}

/// The band with a GEMM library, one product per home's rows of B in [`ring_order`]:
/// `C[rows] = sum over segments s of A[rows][:, s] x B[s]`. A second thread reads the rows
/// homed on other nodes ahead, in the same order, a word per page (their pages come in one
/// stream of faults, read-ahead growing its windows, instead of faults scattered through the
/// library's packing), so each home's rows arrive while the ones before them are multiplied.
/// Small integers: every order of the sums gives the same, exact, result.
/// With threads, `rows` is one thread's share of the node's band, and only the thread with
/// `fetch` reads ahead.
fn kernel_gemm<T: Real>(
    a: SharedArray<T>,
    b: SharedArray<T>,
    c: SharedArray<T>,
    n: usize,
    (rows, me, nodes, fetch): ((usize, usize), usize, usize, bool),
) {
    let m = rows.1 - rows.0;
    if m == 0 {
        return;
    }
    // SAFETY: this node alone writes its band of C, and only this thread touches it; A and B are
    // only read between the two barriers (by this thread and the reader of B below).
    let (ab, bb, mut cb) = unsafe {
        (
            a.slice(rows.0 * n..rows.1 * n),
            b.slice(0..n * n),
            c.slice_mut(rows.0 * n..rows.1 * n),
        )
    };
    let order = ring_order(n, rows, me, nodes);
    let own = band(n, me, nodes);
    let read_ahead = || {
        let step = dsm_runtime::PAGE_SIZE / std::mem::size_of::<T>();
        let mut sink = T::default();
        for &(lo, hi) in order.iter().filter(|(lo, _)| !(own.0..own.1).contains(lo)) {
            for i in (lo * n..hi * n).step_by(step) {
                sink = sink + b.get(i);
            }
        }
        std::hint::black_box(sink);
    };
    std::thread::scope(|s| {
        if fetch && own.1 - own.0 < n {
            s.spawn(read_ahead);
        }
        for (i, &(lo, hi)) in order.iter().enumerate() {
            T::gemm(m, hi - lo, n, &ab[lo..], n, &bb[lo * n..], &mut cb, i > 0);
        }
    });
}

/// The kernels matmul offers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Gemm,
    Blocked,
    Ikj,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Gemm => "gemm",
            Kernel::Blocked => "blocked",
            Kernel::Ikj => "ikj",
        }
    }
}

/// Checks this node's band exactly; returns the number of wrong entries found.
fn verify<T: Real>(c: SharedArray<T>, n: usize, rows: (usize, usize), seed: u64) -> usize {
    let mut wrong = 0;
    let mut rng = seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..2 {
        let r: Vec<i64> = (0..n).map(|_| (next() % 1000) as i64).collect();
        let br: Vec<i64> = (0..n)
            .map(|k| (0..n).map(|j| b_val(k, j) * r[j]).sum())
            .collect();
        for i in rows.0..rows.1 {
            let expect: i64 = (0..n).map(|k| a_val(i, k) * br[k]).sum();
            let mut got = 0i64;
            for (j, rj) in r.iter().enumerate() {
                match c.get(i * n + j).to_exact() {
                    Some(v) => got += v * rj,
                    None => {
                        got = i64::MIN;
                        break;
                    }
                }
            }
            if got != expect {
                wrong += 1;
            }
        }
    }
    if rows.1 > rows.0 {
        for _ in 0..64 {
            let i = rows.0 + (next() as usize) % (rows.1 - rows.0);
            let j = (next() as usize) % n;
            let expect: i64 = (0..n).map(|k| a_val(i, k) * b_val(k, j)).sum();
            if c.get(i * n + j).to_exact() != Some(expect) {
                wrong += 1;
            }
        }
    }
    wrong
}

fn run<T: Real>(dsm: &Dsm, n: usize, kernel_kind: Kernel, check: bool) {
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let row_bytes = n * std::mem::size_of::<T>();
    let alloc = |what| {
        dsm.alloc::<T>(n * n, banded(n, row_bytes, nodes))
            .unwrap_or_else(|e| dsm.error(&format!("allocating {what}: {e}")))
    };
    let (a, b, c) = (alloc("A"), alloc("B"), alloc("C"));
    let rows = band(n, me, nodes);
    for i in rows.0..rows.1 {
        for k in 0..n {
            a.set(i * n + k, T::from_small(a_val(i, k)));
            b.set(i * n + k, T::from_small(b_val(i, k)));
        }
    }
    dsm.barrier();
    dsm.start_stats();
    let t0 = dsm.clock();
    if std::env::var_os("MATMUL_TRACE").is_some() && rows.1 > rows.0 && kernel_kind == Kernel::Ikj {
        // The first row touches all of B (fetching what is remote); the rest is compute.
        kernel(a, b, c, n, (rows.0, rows.0 + 1));
        let t1 = dsm.clock();
        kernel(a, b, c, n, (rows.0 + 1, rows.1));
        let t2 = dsm.clock();
        dsm.barrier();
        eprintln!(
            "node {me}: first row {:.3}s, other rows {:.3}s, barrier {:.3}s",
            t1 - t0,
            t2 - t1,
            dsm.clock() - t2
        );
    } else {
        let compute = |share: (usize, usize)| match kernel_kind {
            Kernel::Gemm => kernel_gemm(a, b, c, n, (share, me, nodes, share.0 == rows.0)),
            Kernel::Blocked => kernel_blocked(a, b, c, n, share),
            Kernel::Ikj => kernel(a, b, c, n, share),
        };
        let threads = dsm_apps::threads();
        let t1 = if threads == 1 {
            compute(rows);
            let t1 = dsm.clock();
            dsm.barrier();
            t1
        } else {
            // The node's band split among its threads, then a barrier of every thread.
            std::thread::scope(|s| {
                for t in 1..threads {
                    let compute = &compute;
                    s.spawn(move || {
                        compute(dsm_apps::share(rows, t, threads));
                        dsm.barrier_threads(threads);
                    });
                }
                compute(dsm_apps::share(rows, 0, threads));
                let t1 = dsm.clock();
                dsm.barrier_threads(threads);
                t1
            })
        };
        if std::env::var_os("MATMUL_TRACE").is_some() {
            eprintln!(
                "node {me}: kernel {:.3}s, barrier {:.3}s",
                t1 - t0,
                dsm.clock() - t1
            );
        }
    }
    let elapsed = dsm.clock() - t0;
    dsm.stop_stats();
    let wrong = if check {
        verify(c, n, rows, 0x9E37_79B9 ^ me as u64)
    } else {
        0
    };
    if wrong > 0 {
        eprintln!(
            "matmul: node {me}: {wrong} wrong results in rows {}..{}",
            rows.0, rows.1
        );
    }
    let ok = all_ok(dsm, wrong == 0);
    if me == 0 {
        let gflops = 2.0 * (n as f64).powi(3) / elapsed / 1e9;
        println!(
            "matmul {} {} n={n} nodes={nodes}{} kernel={} time={elapsed:.3}s gflops={gflops:.2}",
            match (check, ok) {
                (false, _) => "UNCHECKED",
                (true, true) => "OK",
                (true, false) => "FAILED",
            },
            T::NAME,
            match dsm_apps::threads() {
                1 => String::new(),
                t => format!(" threads={t}"),
            },
            kernel_kind.name()
        );
        if !ok {
            dsm.error("matmul: wrong result");
        }
    }
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "matmul",
        "C = A x B with rows banded over the nodes; checks the product exactly",
        &[
            ("N", "matrix size (default 1024)"),
            ("TYPE", "f64 or f32 (default f64)"),
            (
                "KERNEL",
                "gemm (a GEMM library), blocked or ikj (simple loops) (default gemm)",
            ),
        ],
    );
    let n = arg_count(&args, 0, "matrix size", 1024);
    let ty = args.get(1).map_or("f64", String::as_str);
    let kernel = match args.get(2).map_or("gemm", String::as_str) {
        "gemm" => Some(Kernel::Gemm),
        "blocked" => Some(Kernel::Blocked),
        "ikj" => Some(Kernel::Ikj),
        _ => None,
    };
    if !matches!(ty, "f64" | "f32") {
        eprintln!("matmul: the element type is f64 or f32, got `{ty}`");
        std::process::exit(2);
    }
    let Some(kernel) = kernel else {
        eprintln!(
            "matmul: the kernel is gemm, blocked or ikj, got `{}`",
            args[2]
        );
        std::process::exit(2);
    };
    let dsm = dsm_runtime::init().unwrap_or_else(|e| {
        eprintln!("matmul: {e}");
        std::process::exit(2);
    });
    match ty {
        "f32" => run::<f32>(&dsm, n, kernel, check),
        _ => run::<f64>(&dsm, n, kernel, check),
    }
    dsm.exit();
}
