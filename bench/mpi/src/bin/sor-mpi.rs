//! sor with MPI: red-black SOR on an (N+2) x (N+2) grid with fixed borders, rows banded over the
//! ranks as the DSM's sor bands them (even split, boundaries moved to page-aligned rows when
//! close), the same row kernel (the DSM apps' source) and the same order (interior rows, then
//! the band's edge rows). Between half-sweeps each rank swaps its edge rows with its neighbours
//! (what the DSM's barrier and faults do). The check (not with `--no-check`): rank 0 gathers the
//! grid and compares it bit for bit with a sequential run. Rank 0 prints `sor-mpi OK ranks=2
//! n=1024 iterations=100 time=0.20s`.

use mpi::point_to_point as p2p;
use mpi::traits::*;

use dsm_mpi_yardstick::kernels::{interior_first, sor_row};
use dsm_mpi_yardstick::{Args, verdict};

const PAGE: usize = 4096;

fn initial(i: usize, j: usize, n: usize) -> f64 {
    if i == 0 || j == 0 || i == n + 1 || j == n + 1 {
        ((i * 3 + j * 7) % 11) as f64
    } else {
        0.0
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The DSM sor's bands (`dsm_apps::Bands::page_aligned`): rank k's rows are `b[k]..b[k + 1]`.
fn bands(rows: usize, row_bytes: usize, ranks: usize) -> Vec<usize> {
    let step = PAGE / gcd(row_bytes, PAGE);
    let slack = (rows / ranks / 20).max(1);
    let mut b = vec![0];
    for k in 1..ranks {
        let even = rows * k / ranks;
        let aligned = (even + step / 2) / step * step;
        let x = if even.abs_diff(aligned) <= slack {
            aligned
        } else {
            even
        };
        b.push(x.clamp(b[k - 1], rows));
    }
    b.push(rows);
    b
}

/// Half-sweeps of `colour` over rows `[lo, hi)` of `g`, a block of rows starting at `base`.
fn sweep(g: &mut [f64], base: usize, w: usize, lo: usize, hi: usize, n: usize, colour: usize) {
    for i in interior_first(lo.max(1), hi.min(n + 1)) {
        let r = i - base;
        let (above, rest) = g.split_at_mut(r * w);
        let (row, below) = rest.split_at_mut(w);
        sor_row(&above[(r - 1) * w..], row, &below[..w], i, n, colour);
    }
}

fn main() {
    let args = Args::read("usage: sor-mpi [--no-check] [N] [ITERATIONS]   (default 512 20)");
    let (n, iters) = (args.num(0, 512), args.num(1, 20));
    let universe = mpi::initialize().expect("MPI initialised once");
    let world = universe.world();
    let (me, ranks) = (world.rank() as usize, world.size() as usize);
    let w = n + 2;
    let b = bands(w, w * 8, ranks);
    let (lo, hi) = (b[me], b[me + 1]);
    // This rank's rows with a halo row on each side: rows lo - 1 ..= hi.
    let base = lo.saturating_sub(1);
    let top = (hi + 1).min(w);
    let mut g: Vec<f64> = (base..top)
        .flat_map(|i| (0..w).map(move |j| initial(i, j, n)))
        .collect();
    let up = (me > 0 && hi > lo).then(|| me - 1);
    let down = (me + 1 < ranks && hi > lo).then(|| me + 1);
    world.barrier();
    let t0 = mpi::time();
    // Every half-sweep's time, for SOR_TRACE (as the DSM's sor).
    let mut sweeps = Vec::with_capacity(2 * iters);
    for _ in 0..iters {
        for colour in 0..2 {
            let t = mpi::time();
            sweep(&mut g, base, w, lo, hi, n, colour);
            sweeps.push(mpi::time() - t);
            // Edge rows to the neighbours, halo rows from them.
            if let Some(u) = up {
                let peer = world.process_at_rank(u as i32);
                let (halo, rest) = g.split_at_mut(w);
                p2p::send_receive_into(&rest[..w], &peer, halo, &peer);
            }
            if let Some(d) = down {
                let peer = world.process_at_rank(d as i32);
                let last = g.len() / w - 1;
                let (rest, halo) = g.split_at_mut(last * w);
                p2p::send_receive_into(&rest[(last - 1) * w..], &peer, halo, &peer);
            }
        }
    }
    world.barrier();
    let elapsed = mpi::time() - t0;
    if std::env::var_os("SOR_TRACE").is_some() && !sweeps.is_empty() {
        let total: f64 = sweeps.iter().sum();
        sweeps.sort_by(f64::total_cmp);
        let us = |q: usize| sweeps[(sweeps.len() - 1) * q / 100] * 1e6;
        eprintln!(
            "rank {me}: sweeps {total:.3}s (us: p10 {:.0}, p50 {:.0}, p90 {:.0})",
            us(10),
            us(50),
            us(90)
        );
    }
    let mut ok = true;
    if args.check {
        // Rank 0 gathers every band and compares with a sequential run.
        let mine = &g[(lo - base) * w..(hi - base) * w];
        if me == 0 {
            let mut all = vec![0.0f64; w * w];
            all[lo * w..hi * w].copy_from_slice(mine);
            for r in 1..ranks {
                let (rlo, rhi) = (b[r], b[r + 1]);
                if rhi > rlo {
                    world
                        .process_at_rank(r as i32)
                        .receive_into(&mut all[rlo * w..rhi * w]);
                }
            }
            let mut s: Vec<f64> = (0..w * w).map(|k| initial(k / w, k % w, n)).collect();
            for _ in 0..iters {
                for colour in 0..2 {
                    sweep(&mut s, 0, w, 0, w, n, colour);
                }
            }
            // Borders are never written: compare the interior rows each band computed.
            ok = (w..w * (w - 1)).all(|k| all[k].to_bits() == s[k].to_bits());
        } else if hi > lo {
            world.process_at_rank(0).send(mine);
        }
    }
    if me == 0 {
        println!(
            "sor-mpi {} ranks={ranks} n={n} iterations={iters} time={elapsed:.3}s",
            verdict(args.check, ok)
        );
    }
    if !ok {
        std::process::exit(1);
    }
}
