//! The ceiling for threads inside a node: matmul's and sor's kernels with T threads on plain
//! memory, no DSM (what `matmul --threads T` and `sor --threads T` on one node are measured
//! against).
//!
//! `plain matmul N T` (C = A x B, rows split over the threads, the same GEMM kernel, f64) and
//! `plain sor N ITERATIONS T` (red-black SOR, rows banded over the threads, a barrier per
//! half-sweep, the same row kernel). Prints `plain matmul n=N threads=T time=...s` (or sor), the
//! time of the same part the DSM apps report.

use std::time::Instant;

use dsm_apps::kernels::sor_row;
use dsm_apps::sys::{Gemm, SharedRows};
use dsm_apps::{arg_num, share};

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

fn main() {
    let args = dsm_apps::args(
        "plain",
        "matmul's and sor's kernels with T threads on plain memory, no DSM: the ceiling",
        &[
            ("APP", "matmul or sor"),
            ("N", "size (default 1024)"),
            ("ITERS_OR_T", "sor: iterations; matmul: threads"),
            ("T", "sor: threads"),
        ],
    );
    let n = arg_num(&args, 1, "size", 1024).max(1);
    match args.first().map(String::as_str) {
        Some("matmul") => {
            let t = arg_num(&args, 2, "threads", 1).max(1);
            println!("plain matmul n={n} threads={t} time={:.3}s", matmul(n, t));
        }
        Some("sor") => {
            let iters = arg_num(&args, 2, "iterations", 20);
            let t = arg_num(&args, 3, "threads", 1).max(1);
            println!(
                "plain sor n={n} iterations={iters} threads={t} time={:.3}s",
                sor(n, iters, t)
            );
        }
        _ => {
            eprintln!("usage: plain matmul N THREADS | plain sor N ITERATIONS THREADS");
            std::process::exit(2);
        }
    }
}
