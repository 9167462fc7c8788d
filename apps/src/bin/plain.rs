//! The ceiling for threads inside a node: matmul's, sor's and lu's kernels with T threads on
//! plain memory, no DSM (what `matmul --threads T`, `sor --threads T` and `lu --threads T` on
//! one node are measured against).
//!
//! `plain matmul N T` (C = A x B, rows split over the threads, the same GEMM kernel, f64),
//! `plain sor N ITERATIONS T` (red-black SOR, rows banded over the threads, a barrier per
//! half-sweep, the same row kernel) and `plain lu N BLOCK T` (blocked LU, look-ahead and chunks
//! of trailing rows as `lu` does on one node). Prints `plain matmul n=N threads=T time=...s` (or
//! sor, lu), the time of the same part the DSM apps report.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use dsm_apps::kernels::sor_row;
use dsm_apps::sys::{Gemm, SharedRows};
use dsm_apps::{arg_count, arg_num, lu_matrix, share};

fn matmul(n: usize, threads: usize) -> f64 {
    let a: Vec<f64> = (0..n * n)
        .map(|k| ((k / n * 7 + k % n * 3) % 7) as f64 - 3.0)
        .collect();
    let b: Vec<f64> = (0..n * n)
        .map(|k| ((k / n * 3 + k % n * 5) % 5) as f64 - 2.0)
        .collect();
    let mut c = vec![0.0f64; n * n];
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let mut rest: &mut [f64] = &mut c;
        for t in 0..threads {
            let (lo, hi) = share((0, n), t, threads);
            let (mine, tail) = rest.split_at_mut((hi - lo) * n);
            rest = tail;
            let (a, b) = (&a, &b);
            s.spawn(move || f64::gemm(hi - lo, n, n, &a[lo * n..], n, b, mine, false));
        }
    });
    let time = t0.elapsed().as_secs_f64();
    std::hint::black_box(&c);
    time
}

fn sor(n: usize, iters: usize, threads: usize) -> f64 {
    let w = n + 2;
    let mut grid: Vec<f64> = (0..w * w)
        .map(|k| {
            let (i, j) = (k / w, k % w);
            if i == 0 || j == 0 || i == n + 1 || j == n + 1 {
                ((i * 3 + j * 7) % 11) as f64
            } else {
                0.0
            }
        })
        .collect();
    let rows = SharedRows::new(&mut grid, w);
    let barrier = std::sync::Barrier::new(threads);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (rows, barrier) = (&rows, &barrier);
            let (lo, hi) = share((1, n + 1), t, threads);
            s.spawn(move || {
                for _ in 0..iters {
                    for colour in 0..2 {
                        for i in lo..hi {
                            if i == lo || i + 1 == hi {
                                // SAFETY: row i is this thread's alone (its share); a
                                // neighbouring thread reads only its cells of the other colour,
                                // and writes only its own rows' cells of this colour, before
                                // the barrier that ends this half-sweep.
                                unsafe { rows.sor_row_cells(i, n, colour) };
                                continue;
                            }
                            // SAFETY: an interior row of this thread's share: rows i - 1, i and
                            // i + 1 are this thread's alone, and no other touches them.
                            let (up, row, down) = unsafe { rows.row_and_neighbours(i) };
                            sor_row(up, row, down, i, n, colour);
                        }
                        barrier.wait();
                    }
                }
            });
        }
    });
    t0.elapsed().as_secs_f64()
}

/// LU's blocked factorisation with T threads on plain memory, as `lu --threads T` runs it on one
/// node: the thread that starts a step updates and factors the next block (look-ahead) while
/// every thread takes chunks of the trailing rows; the threads are joined at the end of a step
/// (where one node's `lu` calls its barrier).
fn lu(n: usize, b: usize, threads: usize) -> f64 {
    let mut m = lu_matrix(n);
    let rows = SharedRows::new(&mut m, n);
    let blocks = n.div_ceil(b);
    let factor_panel = |k: usize| {
        let (k0, k1) = (k * b, (k * b + b).min(n));
        for p in k0..k1 {
            for i in p + 1..k1 {
                // SAFETY: rows k0..k1 are this thread's while it factors the block.
                unsafe { rows.eliminate_row(i, p) };
            }
        }
    };
    let update_rows = |k: usize, range: std::ops::Range<usize>| {
        let (k0, k1) = (k * b, (k * b + b).min(n));
        for i in range {
            for p in k0..k1 {
                // SAFETY: row i is this thread's (one chunk, one thread); the pivot rows of
                // block k were factored before this step and are only read.
                unsafe { rows.eliminate_row(i, p) };
            }
        }
    };
    let t0 = Instant::now();
    factor_panel(0);
    for k in 0..blocks.saturating_sub(1) {
        let next = (k + 1) * b..((k + 2) * b).min(n);
        let trailing = next.end..n;
        let taken = AtomicUsize::new(trailing.start);
        let chunk = b.clamp(1, 16);
        let work = || {
            loop {
                let lo = taken.fetch_add(chunk, Ordering::Relaxed);
                if lo >= trailing.end {
                    break;
                }
                update_rows(k, lo..(lo + chunk).min(trailing.end));
            }
        };
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(work);
            }
            update_rows(k, next.clone());
            factor_panel(k + 1);
            work();
        });
    }
    let time = t0.elapsed().as_secs_f64();
    std::hint::black_box(&m);
    time
}

fn main() {
    let args = dsm_apps::args(
        "plain",
        "matmul's, sor's and lu's kernels with T threads on plain memory, no DSM: the ceiling",
        &[
            ("APP", "matmul, sor or lu"),
            ("N", "size (default 1024)"),
            ("ARG", "sor: iterations; lu: block size; matmul: threads"),
            ("T", "sor, lu: threads"),
        ],
    );
    let n = arg_count(&args, 1, "size", 1024);
    match args.first().map(String::as_str) {
        Some("matmul") => {
            let t = arg_count(&args, 2, "threads", 1);
            println!("plain matmul n={n} threads={t} time={:.3}s", matmul(n, t));
        }
        Some("sor") => {
            let iters = arg_num(&args, 2, "iterations", 20);
            let t = arg_count(&args, 3, "threads", 1);
            println!(
                "plain sor n={n} iterations={iters} threads={t} time={:.3}s",
                sor(n, iters, t)
            );
        }
        Some("lu") => {
            let b = arg_count(&args, 2, "block size", 32);
            let t = arg_count(&args, 3, "threads", 1);
            println!(
                "plain lu n={n} block={b} threads={t} time={:.3}s",
                lu(n, b, t)
            );
        }
        _ => {
            eprintln!(
                "usage: plain matmul N THREADS | plain sor N ITERATIONS THREADS | plain lu N BLOCK \
                 THREADS"
            );
            std::process::exit(2);
        }
    }
}
