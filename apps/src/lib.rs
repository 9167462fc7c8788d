//! Shared helpers of the DSM application programs (`src/bin/*`): argument parsing, result lines,
//! and the job-wide verdict.

use dsm_runtime::{AllocPolicy, Dsm, NodeId, SharedArray};

/// Rows `[start, end)` of `n` that node `me` of `nodes` owns (bands as even as possible).
pub fn band(n: usize, me: usize, nodes: usize) -> (usize, usize) {
    (n * me / nodes, n * (me + 1) / nodes)
}

/// The rows `first..last`, the two boundary rows last. A stencil sweep that reads its
/// neighbours' rows (which a barrier has just invalidated, and which are being fetched again
/// meanwhile) computes its interior first, while they travel. For sweeps whose result does not
/// depend on the order of their rows (Jacobi, one colour of red-black SOR).
pub fn interior_first(first: usize, last: usize) -> impl Iterator<Item = usize> {
    let interior = (first + 1)..last.saturating_sub(1).max(first + 1);
    let edges = [
        (first < last).then_some(first),
        (last > first + 1).then(|| last - 1),
    ];
    interior.chain(edges.into_iter().flatten())
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

/// Prints the result line at node 0 (`NAME OK key=value...` or `NAME FAILED ...`) from every
/// node's verdict, and ends the job with an error if any node's part is wrong.
pub fn report(dsm: &Dsm, name: &str, ok: bool, details: &str) {
    let all = all_ok(dsm, ok);
    if dsm.id() == 0 {
        println!(
            "{name} {} nodes={} {details}",
            if all { "OK" } else { "FAILED" },
            dsm.nodes()
        );
        if !all {
            dsm.error(&format!("{name}: wrong result"));
        }
    }
}

/// Joins the job or exits with status 2 and the reason.
pub fn init(name: &str) -> Dsm {
    dsm_runtime::init().unwrap_or_else(|e| {
        eprintln!("{name}: {e}");
        std::process::exit(2)
    })
}

/// A small deterministic generator (xorshift64*), for inputs every node can recompute.
pub struct Gen(pub u64);

impl Gen {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::interior_first;

    #[test]
    fn interior_first_visits_every_row_once_boundaries_last() {
        assert_eq!(interior_first(1, 6).collect::<Vec<_>>(), [2, 3, 4, 1, 5]);
        assert_eq!(interior_first(3, 5).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(interior_first(3, 4).collect::<Vec<_>>(), [3]);
        assert_eq!(interior_first(3, 3).count(), 0);
        assert_eq!(interior_first(5, 2).count(), 0);
        for first in 0..6 {
            for last in 0..9 {
                let mut v: Vec<usize> = interior_first(first, last).collect();
                v.sort_unstable();
                assert_eq!(v, (first..last).collect::<Vec<_>>(), "{first}..{last}");
            }
        }
    }
}
