//! Travelling salesman by branch and bound, with a shared work queue and a shared best tour,
//! both protected by locks.
//!
//! `tsp [CITIES]` (default 12). The queue holds every tour prefix of length 3 from city 0; nodes
//! take prefixes and the current bound under one lock, search below them, and lower the shared
//! bound under the same lock.
//! Node 0 then solves the same instance alone and compares the optimal length.

#![allow(
    clippy::needless_range_loop,
    reason = "numerical kernels read clearest with explicit indices"
)]

use dsm_apps::{Gen, alloc, arg_range, init, report};
use dsm_runtime::{AllocPolicy, Dsm, NodeId, SharedArray};

fn distances(n: usize) -> Vec<u64> {
    let mut g = Gen(0x7_5B00 + n as u64);
    let pts: Vec<(f64, f64)> = (0..n)
        .map(|_| (g.unit() * 1000.0, g.unit() * 1000.0))
        .collect();
    let mut d = vec![0; n * n];
    for i in 0..n {
        for j in 0..n {
            let (dx, dy) = (pts[i].0 - pts[j].0, pts[i].1 - pts[j].1);
            d[i * n + j] = (dx * dx + dy * dy).sqrt().round() as u64;
        }
    }
    d
}

/// Depth-first search from a partial tour; `bound` gives and lowers the best length known.
fn search(
    d: &[u64],
    n: usize,
    path: &mut Vec<usize>,
    used: &mut Vec<bool>,
    len: u64,
    bound: &mut dyn FnMut(Option<u64>) -> u64,
) {
    if len >= bound(None) {
        return;
    }
    let last = *path.last().unwrap_or(&0);
    if path.len() == n {
        bound(Some(len + d[last * n]));
        return;
    }
    for c in 1..n {
        if !used[c] {
            used[c] = true;
            path.push(c);
            search(d, n, path, used, len + d[last * n + c], bound);
            path.pop();
            used[c] = false;
        }
    }
}

fn prefixes(n: usize) -> Vec<[usize; 3]> {
    let mut v = Vec::new();
    for a in 1..n {
        for b in 1..n {
            if a != b {
                v.push([0, a, b]);
            }
        }
    }
    v
}

/// The shared state: the next task's index and the best tour length known, in one page and
/// under one lock (lock 0, whose manager is node 0, where the page lives): a node takes its next
/// task and the current bound in one critical section.
const NEXT: usize = 0;
const BEST: usize = 1;
const LOCK: u16 = 0;

/// This node's part of the search; returns the partial tours it examined (for `TSP_TRACE`).
fn solve_shared(dsm: &Dsm, d: &[u64], n: usize, state: SharedArray<u64>) -> u64 {
    let work = prefixes(n);
    let mut examined = 0u64;
    loop {
        // The next task and, with it, the bound: a local copy, lowered in the shared state under
        // the same lock when this node finds a shorter tour.
        let (next, mut local) = {
            let _g = dsm.lock(LOCK);
            let i = state.get(NEXT);
            state.set(NEXT, i + 1);
            (i as usize, state.get(BEST))
        };
        if next >= work.len() {
            return examined;
        }
        let p = work[next];
        let mut used = vec![false; n];
        for &c in &p {
            used[c] = true;
        }
        let mut path = p.to_vec();
        let len = d[p[1]] + d[p[1] * n + p[2]];
        let mut bound = |v: Option<u64>| {
            examined += u64::from(v.is_none());
            if let Some(v) = v {
                if v < local {
                    let _g = dsm.lock(LOCK);
                    local = v.min(state.get(BEST));
                    state.set(BEST, local);
                }
            }
            local
        };
        search(d, n, &mut path, &mut used, len, &mut bound);
    }
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "tsp",
        "Travelling salesman by branch and bound, a lock-protected queue; node 0 checks alone",
        &[("CITIES", "cities, 4 to 16 (default 12)")],
    );
    let n = arg_range(&args, 0, "cities", 12, 4..=16);
    let dsm = init("tsp");
    let d = distances(n);
    let state: SharedArray<u64> = alloc(&dsm, 2, AllocPolicy::OnNode(NodeId(0)));
    if dsm.id() == 0 {
        state.set(BEST, u64::MAX);
    }
    dsm.barrier();
    let t0 = dsm.clock();
    let examined = solve_shared(&dsm, &d, n, state);
    if std::env::var_os("TSP_TRACE").is_some() {
        eprintln!("node {}: {examined} partial tours examined", dsm.id());
    }
    dsm.barrier();
    let elapsed = dsm.clock() - t0;
    let found = state.get(BEST);
    let mut ok = true;
    if check && dsm.id() == 0 {
        let mut seq = u64::MAX;
        let mut used = vec![false; n];
        used[0] = true;
        search(&d, n, &mut vec![0], &mut used, 0, &mut |v| {
            if let Some(v) = v {
                seq = seq.min(v);
            }
            seq
        });
        ok = found == seq;
        if !ok {
            eprintln!("tsp: shared search found {found}, sequential {seq}");
        }
    }
    report(
        &dsm,
        "tsp",
        ok,
        &format!("cities={n} length={found} time={elapsed:.3}s"),
    );
    dsm.exit();
}
