//! matmul with MPI: C = A x B, rows banded over the ranks as the DSM's matmul does. Each rank
//! makes its band of A and B, B is all-gathered (what the DSM's faults fetch), and each rank
//! computes its band of C with the same GEMM kernel (matrixmultiply). The gather comes before
//! the product, as most MPI programs have it: the DSM app multiplies with its own rows of B
//! while the rest arrive, which with MPI would take a non-blocking gather and polling (Open
//! MPI progresses it only inside MPI calls). The check: 64 entries of each band, exactly (the
//! matrices hold small integers). Rank 0 prints
//! `matmul-mpi OK f64 n=1024 ranks=2 time=0.05s gflops=40.1`; `time` runs from the first barrier
//! (B's exchange included) to the last, as the DSM app's.

use mpi::datatype::PartitionMut;
use mpi::traits::*;

use dsm_mpi_yardstick::{Args, band, verdict};

fn a_val(i: usize, k: usize) -> f64 {
    (((i * 7 + k * 3) % 7) as i64 - 3) as f64
}

fn b_val(k: usize, j: usize) -> f64 {
    (((k * 3 + j * 5) % 5) as i64 - 2) as f64
}

fn main() {
    let args = Args::read("usage: matmul-mpi [--no-check] [N]   (default 1024, f64)");
    let n = args.num(0, 1024);
    let universe = mpi::initialize().expect("MPI initialised once");
    let world = universe.world();
    let (me, ranks) = (world.rank() as usize, world.size() as usize);
    let rows = band(n, me, ranks);
    let m = rows.1 - rows.0;
    let a: Vec<f64> = (rows.0..rows.1)
        .flat_map(|i| (0..n).map(move |k| a_val(i, k)))
        .collect();
    let b_mine: Vec<f64> = (rows.0..rows.1)
        .flat_map(|k| (0..n).map(move |j| b_val(k, j)))
        .collect();
    let counts: Vec<i32> = (0..ranks)
        .map(|r| {
            let (s, e) = band(n, r, ranks);
            ((e - s) * n) as i32
        })
        .collect();
    let displs: Vec<i32> = (0..ranks)
        .map(|r| (band(n, r, ranks).0 * n) as i32)
        .collect();
    let mut b = vec![0.0f64; n * n];
    let mut c = vec![0.0f64; m * n];
    world.barrier();
    let t0 = mpi::time();
    {
        let mut part = PartitionMut::new(&mut b[..], &counts[..], &displs[..]);
        world.all_gather_varcount_into(&b_mine[..], &mut part);
    }
    if m > 0 {
        // SAFETY: the three buffers hold the row-major m x n, n x n and m x n matrices these
        // strides describe, and `c` overlaps neither of the others.
        unsafe {
            matrixmultiply::dgemm(
                m,
                n,
                n,
                1.0,
                a.as_ptr(),
                n as isize,
                1,
                b.as_ptr(),
                n as isize,
                1,
                0.0,
                c.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    }
    world.barrier();
    let elapsed = mpi::time() - t0;
    let mut wrong = 0u64;
    if args.check && m > 0 {
        let mut rng = 0x9E37_79B9u64 ^ me as u64 | 1;
        for _ in 0..64 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (i, j) = ((rng as usize) % m, (rng as usize >> 20) % n);
            let want: f64 = (0..n).map(|k| a_val(rows.0 + i, k) * b_val(k, j)).sum();
            wrong += u64::from(c[i * n + j] != want);
        }
    }
    let mut total = 0u64;
    world.all_reduce_into(&wrong, &mut total, mpi::collective::SystemOperation::sum());
    if me == 0 {
        let gflops = 2.0 * (n as f64).powi(3) / elapsed / 1e9;
        println!(
            "matmul-mpi {} f64 n={n} ranks={ranks} time={elapsed:.3}s gflops={gflops:.2}",
            verdict(args.check, total == 0)
        );
    }
    if total != 0 {
        std::process::exit(1);
    }
}
