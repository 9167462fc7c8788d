//! Shared helpers of the DSM application programs (`src/bin/*`): argument parsing, result lines,
//! and the job-wide verdict.

use dsm_runtime::{AllocPolicy, Dsm, NodeId, SharedArray};

/// Rows `[start, end)` of `n` that node `me` of `nodes` owns (bands as even as possible).
pub fn band(n: usize, me: usize, nodes: usize) -> (usize, usize) {
    (n * me / nodes, n * (me + 1) / nodes)
}

/// A cyclic allocation whose blocks are the nodes' bands of `rows` rows of `row_bytes` each.
pub fn banded(rows: usize, row_bytes: usize, nodes: usize) -> AllocPolicy {
    AllocPolicy::Cyclic {
        block_bytes: (rows.div_ceil(nodes) * row_bytes) as u64,
        start: NodeId(0),
    }
}

/// Combines every node's verdict: each node writes whether its part is right; after a barrier
/// node 0 learns whether all are. Returns the job-wide verdict at node 0 (and this node's
/// elsewhere).
pub fn all_ok(dsm: &Dsm, ok: bool) -> bool {
    let flags: SharedArray<u64> = dsm
        .alloc(dsm.nodes(), AllocPolicy::OnNode(NodeId(0)))
        .expect("allocate verdicts");
    flags.set(dsm.id(), u64::from(ok));
    dsm.barrier();
    if dsm.id() == 0 {
        (0..dsm.nodes()).all(|i| flags.get(i) == 1)
    } else {
        ok
    }
}

/// Parses the positional argument `i` as a number, with a default; exits with a usage message
/// on a bad value.
pub fn arg_num(args: &[String], i: usize, name: &str, default: usize) -> usize {
    match args.get(i) {
        None => default,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("{name} must be a positive number, got `{v}`");
            std::process::exit(2)
        }),
    }
}
