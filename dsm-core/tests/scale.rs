//! Messages at scale: a barrier costs O(N) messages, a lock O(1), whatever the job size.

use dsm_core::sim::{Cluster, Op};
use dsm_core::{AllocPolicy, LockId, NodeId, PAGE_SIZE};

fn barrier_messages(n: u16) -> u64 {
    let mut c = Cluster::new(n, u64::from(n), |_| {});
    c.alloc(
        AllocPolicy::Cyclic {
            block_bytes: PAGE_SIZE as u64,
            start: NodeId(0),
        },
        u64::from(n) * PAGE_SIZE as u64,
    )
    .unwrap();
    c.barrier().unwrap();
    let before = c.messages_sent();
    c.barrier().unwrap();
    c.messages_sent() - before
}

/// Messages for one acquire and release of a lock managed by another node, in a job of `n`.
fn lock_messages(n: u16) -> u64 {
    let mut c = Cluster::new(n, u64::from(n), |_| {});
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE_SIZE as u64)
        .unwrap();
    let before = c.messages_sent();
    let node = n - 1;
    c.push(node, 0, Op::Lock(LockId(0)));
    c.push(node, 0, Op::Read(x));
    c.push(node, 0, Op::Unlock(LockId(0)));
    c.run().unwrap();
    let with_fault = c.messages_sent() - before;
    // The read fault is GETP + grant; the rest is the lock.
    with_fault - 2
}

#[test]
fn a_barrier_costs_two_messages_per_other_node() {
    for n in [2u16, 16, 64, 256] {
        let m = barrier_messages(n);
        eprintln!("barrier on {n} nodes: {m} messages");
        assert_eq!(m, 2 * (u64::from(n) - 1), "barrier on {n} nodes");
    }
}

#[test]
fn a_lock_acquire_and_release_costs_three_messages_at_any_size() {
    for n in [2u16, 16, 64, 256] {
        let m = lock_messages(n);
        eprintln!("lock acquire+release on {n} nodes: {m} messages");
        assert_eq!(m, 3, "lock on {n} nodes");
    }
}
