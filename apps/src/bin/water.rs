//! An n-body step loop in the manner of SPLASH's water: every molecule feels a softened pair
//! force from every other; each node moves its own molecules.
//!
//! `water [MOLECULES] [STEPS]` (default 2048, 6). Positions and velocities are banded; each step
//! computes forces for owned molecules from all positions (a barrier), then updates them (a
//! barrier). The per-molecule arithmetic is the sequential code's, so node 0 recomputes and
//! compares bit for bit.

#![allow(
    clippy::needless_range_loop,
    reason = "numerical kernels read clearest with explicit indices"
)]

use dsm_apps::{Gen, alloc, arg_count, arg_num, band, banded, init, report};
use dsm_runtime::SharedArray;

const DT: f64 = 1e-3;

fn start(n: usize) -> Vec<f64> {
    let mut g = Gen(0x3A7E5 ^ n as u64);
    (0..n * 6)
        .map(|k| {
            if k % 6 < 3 {
                g.unit() * 10.0
            } else {
                g.unit() - 0.5
            }
        })
        .collect()
}

/// Acceleration of molecule `i` from the positions `pos(j, axis)`.
/// The force on molecule `i` from all the others; `m` holds x y z vx vy vz per molecule.
fn force(i: usize, n: usize, m: &[f64]) -> [f64; 3] {
    let mut f = [0.0; 3];
    let p = [m[i * 6], m[i * 6 + 1], m[i * 6 + 2]];
    for (j, q) in m.chunks_exact(6).take(n).enumerate() {
        if j == i {
            continue;
        }
        let d = [q[0] - p[0], q[1] - p[1], q[2] - p[2]];
        let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01;
        let inv = 1.0 / (r2 * r2.sqrt());
        for a in 0..3 {
            f[a] += d[a] * inv;
        }
    }
    f
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "water",
        "N-body steps: forces from all, move own; node 0 recomputes",
        &[
            ("MOLECULES", "molecules (default 2048)"),
            ("STEPS", "steps (default 6)"),
        ],
    );
    let n = arg_count(&args, 0, "molecules", 2048);
    let steps = arg_num(&args, 1, "steps", 6);
    let dsm = init("water");
    // Per molecule: x y z vx vy vz.
    let m: SharedArray<f64> = alloc(&dsm, n * 6, banded(n, 48, dsm.nodes()));
    let mine = band(n, dsm.id(), dsm.nodes());
    let s0 = start(n);
    for k in mine.0 * 6..mine.1 * 6 {
        m.set(k, s0[k]);
    }
    dsm.barrier();
    dsm.start_stats();
    let t0 = dsm.clock();
    for _ in 0..steps {
        // SAFETY: every node only reads the molecules until the barrier below (each moves its own
        // after it).
        let all = unsafe { m.slice(0..n * 6) };
        let acc: Vec<[f64; 3]> = (mine.0..mine.1).map(|i| force(i, n, all)).collect();
        dsm.barrier();
        for (i, f) in (mine.0..mine.1).zip(acc) {
            for a in 0..3 {
                let v = m.get(i * 6 + 3 + a) + DT * f[a];
                m.set(i * 6 + 3 + a, v);
                m.set(i * 6 + a, m.get(i * 6 + a) + DT * v);
            }
        }
        dsm.barrier();
    }
    let elapsed = dsm.clock() - t0;
    dsm.stop_stats();
    let mut ok = true;
    if check && dsm.id() == 0 {
        let mut s = s0;
        for _ in 0..steps {
            let acc: Vec<[f64; 3]> = (0..n).map(|i| force(i, n, &s)).collect();
            for (i, f) in acc.into_iter().enumerate() {
                for a in 0..3 {
                    let v = s[i * 6 + 3 + a] + DT * f[a];
                    s[i * 6 + 3 + a] = v;
                    s[i * 6 + a] += DT * v;
                }
            }
        }
        ok = (0..n * 6).all(|k| m.get(k).to_bits() == s[k].to_bits());
    }
    report(
        &dsm,
        "water",
        ok,
        &format!("molecules={n} steps={steps} time={elapsed:.3}s"),
    );
    dsm.exit();
}
