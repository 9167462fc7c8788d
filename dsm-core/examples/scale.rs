//! Scale by simulation: the real protocol core on 16 to 1024 simulated nodes, counting messages
//! and bytes per barrier, per lock acquire/release, per remote read fault.
//!
//! `cargo run --release -p dsm-core --example scale [MAX_NODES]` (default 1024).

use dsm_core::sim::{Cluster, Op};
use dsm_core::{AllocPolicy, LockId, NodeId, PAGE_SIZE};

fn measure(c: &mut Cluster, f: impl FnOnce(&mut Cluster)) -> (u64, u64) {
    let (m0, b0) = (c.messages_sent(), c.bytes_sent());
    f(c);
    c.run().expect("simulation");
    (c.messages_sent() - m0, c.bytes_sent() - b0)
}

fn main() {
    let max: u16 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    println!(
        "{:>6} {:>14} {:>14} {:>12} {:>12} {:>12} {:>12} {:>16}",
        "nodes",
        "barrier msgs",
        "barrier bytes",
        "lock msgs",
        "lock bytes",
        "fault msgs",
        "fault bytes",
        "writes+barrier B"
    );
    let mut n = 16u16;
    while n <= max {
        let mut c = Cluster::new(n, u64::from(n), |cfg| cfg.prefetch.enabled = false);
        let page = PAGE_SIZE as u64;
        // One page homed on every node, plus one page on node 0 for the fault.
        let base = c
            .alloc(
                AllocPolicy::Cyclic {
                    block_bytes: page,
                    start: NodeId(0),
                },
                u64::from(n) * page,
            )
            .unwrap();
        let single = c.alloc(AllocPolicy::OnNode(NodeId(0)), page).unwrap();
        c.barrier().unwrap();
        let (bm, bb) = measure(&mut c, |c| c.push_all(Op::Barrier));
        let last = n - 1;
        let (lm, lb) = measure(&mut c, |c| {
            c.push(last, 0, Op::Lock(LockId(0)));
            c.push(last, 0, Op::Unlock(LockId(0)));
        });
        let (fm, fb) = measure(&mut c, |c| c.push(last, 0, Op::Read(single)));
        // A barrier after every node wrote its neighbour's page: N diffs go home, and the
        // grant carries N write notices to every node.
        for k in 0..n {
            c.push(
                k,
                0,
                Op::Write(base.offset_by(u64::from((k + 1) % n) * page), 1),
            );
        }
        c.run().unwrap();
        let (wm, wb) = measure(&mut c, |c| c.push_all(Op::Barrier));
        println!(
            "{n:>6} {bm:>14} {bb:>14} {lm:>12} {lb:>12} {fm:>12} {fb:>12} {wb:>16}  ({wm} msgs)"
        );
        n *= 2;
    }
    println!(
        "(a barrier costs 2(N-1) messages; a lock and a fault cost the same at any size; after N"
    );
    println!(
        " remote writes the barrier also carries N diffs and N write notices in each of N grants)"
    );
}
