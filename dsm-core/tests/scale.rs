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

/// 128 cores as `nodes` nodes x `threads` threads: what the wire carries for the suite's three
/// patterns, (messages, bytes). Core `c` is thread `c % threads` of node `c / threads`.
fn cores_as(nodes: u16, threads: usize) -> [(u64, u64); 3] {
    let cores = usize::from(nodes) * threads;
    let cluster = |seed| {
        let mut c = Cluster::new(nodes, seed, |_| {});
        for n in 0..nodes {
            c.set_threads(n, threads);
        }
        c
    };
    let team = Op::BarrierThreads(threads as u16);
    let cost =
        |c: &Cluster, before: (u64, u64)| (c.messages_sent() - before.0, c.bytes_sent() - before.1);
    // A stencil (sor's pattern): two rows of one page per core, banded (each node's band homed
    // at it); each core writes its rows and reads its neighbours' nearest rows; 4 sweeps, a
    // barrier each.
    let rows = 2 * cores;
    let mut c = cluster(1);
    let grid = c
        .alloc(
            AllocPolicy::Cyclic {
                block_bytes: (rows / usize::from(nodes) * PAGE_SIZE) as u64,
                start: NodeId(0),
            },
            (rows * PAGE_SIZE) as u64,
        )
        .unwrap();
    let row = |r: usize| dsm_core::GlobalAddr(grid.0 + (r * PAGE_SIZE) as u64);
    let before = (c.messages_sent(), c.bytes_sent());
    for sweep in 0..4u64 {
        for core in 0..cores {
            let (n, t) = ((core / threads) as u16, core % threads);
            if core > 0 {
                c.push(n, t, Op::Read(row(2 * core - 1)));
            }
            if core + 1 < cores {
                c.push(n, t, Op::Read(row(2 * core + 2)));
            }
            for r in [2 * core, 2 * core + 1] {
                c.push(n, t, Op::Write(row(r), sweep + 1));
            }
            c.push(n, t, team.clone());
        }
    }
    c.run().unwrap();
    let stencil = cost(&c, before);
    // A counter under one lock (pi's pattern): 8 increments per core.
    let mut c = cluster(2);
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE_SIZE as u64)
        .unwrap();
    let before = (c.messages_sent(), c.bytes_sent());
    for core in 0..cores {
        let (n, t) = ((core / threads) as u16, core % threads);
        for k in 0..8 {
            c.push(n, t, Op::Lock(LockId(0)));
            c.push(n, t, Op::Read(x));
            c.push(n, t, Op::Write(x, (core * 8 + k) as u64));
            c.push(n, t, Op::Unlock(LockId(0)));
        }
        c.push(n, t, team.clone());
    }
    c.run().unwrap();
    let counter = cost(&c, before);
    // Barriers alone: 10.
    let mut c = cluster(3);
    c.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE_SIZE as u64)
        .unwrap();
    let before = (c.messages_sent(), c.bytes_sent());
    for core in 0..cores {
        for _ in 0..10 {
            c.push((core / threads) as u16, core % threads, team.clone());
        }
    }
    c.run().unwrap();
    [stencil, counter, cost(&c, before)]
}

/// On paper, from the simulator's counters: 128 cores as 16 machines of 8 threads against 128
/// one-thread nodes (the figures are in `docs/perf/2026-11-26-threads.md`). Threads of a node
/// share its copy of every page and meet before its one barrier message; a lock passes among
/// them with no message while no other node waits.
#[test]
fn sixteen_nodes_of_eight_threads_send_less_than_128_nodes_of_one() {
    let team = cores_as(16, 8);
    let flat = cores_as(128, 1);
    for ((name, t), f) in [
        "stencil, 4 sweeps",
        "lock counter, 8 per core",
        "10 barriers",
    ]
    .iter()
    .zip(team)
    .zip(flat)
    {
        eprintln!(
            "{name:26} 16 x 8: {:6} messages {:9} bytes | 128 x 1: {:6} messages {:9} bytes",
            t.0, t.1, f.0, f.1
        );
        assert!(
            t.0 < f.0 && t.1 < f.1,
            "{name}: 16 x 8 {t:?} against 128 x 1 {f:?}"
        );
    }
}
