//! A dynamic work queue: every node takes the next task with an atomic fetch-add on one shared
//! counter until none is left, so faster nodes take more tasks.
//!
//! `workq [TASKS] [GRAIN] [--threads T]` (default 2,000 tasks of 20,000 steps at most, one
//! thread per node). Task t's cost varies with t (1 to 8 times a base), its result goes to
//! `results[t]` and the taking node's number to `taker[t]`, plain writes published by the next
//! fetch-add (acquire and release). With T threads, every thread of every node takes tasks: a
//! node's threads' fetch-adds on the counter combine into one operation each round trip. After a
//! barrier, every node checks that each task was taken exactly once (each result and taker
//! present, the takers' counts summing to the tasks, a relaxed count of them equal) and each
//! result is right.

use std::sync::atomic::Ordering;

use dsm_apps::{alloc, arg_count, arg_num, init, report};
use dsm_runtime::{AllocPolicy, NodeId, SharedArray};

/// Task `t`'s result: a short integer recurrence whose length varies with `t`.
fn task(t: u64, grain: u64) -> u64 {
    let steps = grain * (1 + t % 8) / 8;
    let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..steps {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

fn main() {
    let (args, check) = dsm_apps::args_with_check(
        "workq",
        "A dynamic work queue: tasks taken with an atomic fetch-add",
        &[
            ("TASKS", "tasks (default 2000)"),
            ("GRAIN", "steps of the costliest task (default 20000)"),
        ],
    );
    let tasks = arg_count(&args, 0, "tasks", 2000) as u64;
    let grain = arg_num(&args, 1, "grain", 20_000) as u64;
    let dsm = init("workq");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let next: SharedArray<u64> = alloc(&dsm, 1, AllocPolicy::OnNode(NodeId(0)));
    let results: SharedArray<u64> = alloc(&dsm, tasks as usize, AllocPolicy::RoundRobin);
    let taker: SharedArray<u64> = alloc(&dsm, tasks as usize, AllocPolicy::RoundRobin);
    // Counted with relaxed fetch-adds (node 0, their home, applies its own with the CPU's
    // atomics, the others' through its service thread): one per task.
    let hits: SharedArray<u64> = alloc(&dsm, 1, AllocPolicy::OnNode(NodeId(0)));
    let done: SharedArray<u64> = alloc(
        &dsm,
        1,
        AllocPolicy::OnNode(NodeId(nodes.saturating_sub(1) as u16)),
    );
    dsm.barrier();
    let t0 = dsm.clock();
    let take = || {
        let counter = dsm.atomic_u64(next, 0);
        let mut mine = 0u64;
        loop {
            // Acquire and release: the writes of the tasks taken before are published with it.
            let t = counter.fetch_add(1, Ordering::AcqRel);
            if t >= tasks {
                break mine;
            }
            dsm.atomic_u64(hits, 0).fetch_add(1, Ordering::Relaxed);
            results.set(t as usize, task(t, grain));
            taker.set(t as usize, me as u64 + 1);
            mine += 1;
        }
    };
    let mine: u64 = std::thread::scope(|s| {
        let others: Vec<_> = (1..dsm_apps::threads()).map(|_| s.spawn(take)).collect();
        take() + others.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    dsm.atomic_u64(done, 0).fetch_add(mine, Ordering::Release);
    dsm.barrier();
    let elapsed = dsm.clock() - t0;
    let mut ok = true;
    if check {
        let mut wrong = 0;
        for t in 0..tasks {
            let by = taker.get(t as usize);
            if by == 0 || by > nodes as u64 || results.get(t as usize) != task(t, grain) {
                wrong += 1;
            }
        }
        let (counted, hit) = (done.get(0), hits.get(0));
        if wrong > 0 || counted != tasks || hit != tasks {
            eprintln!(
                "workq: node {me}: {wrong} tasks missing or wrong, {counted} done and {hit} \
                 counted of {tasks}"
            );
            ok = false;
        }
    }
    report(
        &dsm,
        "workq",
        ok,
        &format!("tasks={tasks} mine={mine} time={elapsed:.3}s"),
    );
    dsm.exit();
}
