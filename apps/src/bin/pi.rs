//! Pi by the midpoint rule on 4/(1+x^2), partial sums added to a shared total under a lock.
//!
//! `pi [INTERVALS]` (default 50,000,000). Checks the total against pi (1e-9) and against the
//! sum of the same partial sums computed by node 0 alone (1e-12).

use dsm_apps::{alloc, arg_count, init, report};
use dsm_runtime::{AllocPolicy, NodeId, SharedArray};

fn partial(n: usize, from: usize, to: usize) -> f64 {
    let h = 1.0 / n as f64;
    (from..to)
        .map(|i| {
            let x = h * (i as f64 + 0.5);
            4.0 / (1.0 + x * x)
        })
        .sum::<f64>()
        * h
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "pi",
        "Pi by the midpoint rule, a lock-protected sum",
        &[("INTERVALS", "intervals (default 50000000)")],
    );
    let n = arg_count(&args, 0, "intervals", 50_000_000);
    let dsm = init("pi");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let total: SharedArray<f64> = alloc(&dsm, 1, AllocPolicy::OnNode(NodeId(0)));
    dsm.barrier();
    let t0 = dsm.clock();
    // Several chunks per node, each added under the lock (by the node's threads in turn, with
    // --threads: the lock is then taken by threads of many nodes).
    let chunks = 8;
    let threads = dsm_apps::threads();
    let work = |t: usize| {
        for c in (t..chunks).step_by(threads) {
            let k = me * chunks + c;
            let (from, to) = (n * k / (nodes * chunks), n * (k + 1) / (nodes * chunks));
            let p = partial(n, from, to);
            let _g = dsm.lock(0);
            total.set(0, total.get(0) + p);
        }
    };
    if threads == 1 {
        work(0);
        dsm.barrier();
    } else {
        // This thread takes the first share (one that only waited would hide a job that cannot
        // go on from the deadlock watch).
        std::thread::scope(|s| {
            for t in 1..threads {
                let (work, dsm) = (&work, &dsm);
                s.spawn(move || {
                    work(t);
                    dsm.barrier_threads(threads);
                });
            }
            work(0);
            dsm.barrier_threads(threads);
        });
    }
    let elapsed = dsm.clock() - t0;
    let got = total.get(0);
    // The midpoint rule's error bound for 4/(1+x^2) on [0,1] (|f''| <= 8: 1/(3 n^2)), plus
    // rounding over n terms.
    let nf = n as f64;
    let bound = 1.0 / (3.0 * nf * nf) + nf * 4.0 * f64::EPSILON + 1e-12;
    let mut ok = !check || (got - std::f64::consts::PI).abs() < bound;
    if check && me == 0 {
        let seq: f64 = (0..nodes * chunks)
            .map(|k| partial(n, n * k / (nodes * chunks), n * (k + 1) / (nodes * chunks)))
            .sum();
        ok &= (got - seq).abs() < 1e-12;
    }
    report(
        &dsm,
        "pi",
        ok,
        &format!("intervals={n} pi={got:.12} time={elapsed:.3}s"),
    );
    dsm.exit();
}
