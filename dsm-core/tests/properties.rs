//! The memory model, checked on random data-race-free programs.
//!
//! Each case is made from one seed: a cluster (1 to 16 nodes), an allocation with a random
//! policy, a cache small enough to force evictions, prefetch on or off, and a program of phases
//! separated by barriers. In each phase every shared word has a role: read-only, owned by one
//! node, or protected by one lock (touched only inside that lock's critical sections, nested locks
//! taken in order). Such programs are data-race free, so every read must return what a sequential
//! execution in the simulator's order returns: the simulator checks each read against its
//! reference memory, and at the end every node reads every word.
//!
//! A quarter of the cases with 2 nodes or more give each node a second thread, reading and
//! writing every third word under a lock of its own while the first runs the phases and their
//! barriers (`DSM_SIM_SECOND_THREAD=0` leaves them out). A write to a page that moves during
//! such a barrier ends the job naming it (an accepted outcome here). 300,000 cases of each
//! kind passed once (`DSM_SIM_CASES=300000`, two ranges); [`threaded_cases_that_failed_once`]
//! keeps the last two failures found.
//!
//! `DSM_SIM_CASES=N` runs N cases (default 1000); `DSM_SIM_SEED=S` runs the one case with seed S
//! (a failure prints it). `DSM_SIM_BASE` moves the whole range of seeds.

use std::time::{Duration, Instant};

use dsm_core::sim::{Cluster, Op, Rng};
use dsm_core::{AllocPolicy, GlobalAddr, LockId, NodeId, PAGE_SIZE, Stats};

#[derive(Clone, Copy, Debug)]
enum Role {
    /// Touched only by each node's second thread, under lock [`SECOND_THREAD_LOCK`].
    SecondThread,
    ReadOnly,
    Owned(u16),
    Locked(u16),
}

#[derive(Debug)]
struct Case {
    nodes: u16,
    pages: u64,
    words: Vec<GlobalAddr>,
    locks: Vec<u16>,
    cache_pages: usize,
    prefetch: (bool, u32, u32),
    /// Pages fetched by one-sided reads of the home's memory (RDMA READ) instead of GETPs.
    one_sided: bool,
    /// Home migration on (a page written by one node only between barriers moves there).
    migrate: bool,
    /// Each node has a second thread that, while the first runs the phases and their barriers,
    /// reads and writes some words under one lock of its own (every third word). The first
    /// thread takes that lock too now and then, to touch the same words: the lock then passes
    /// between the threads of a node (cohort locking).
    second_thread: bool,
    /// Hand-offs of a lock between threads of a node in a row (`CoreConfig::lock_handoffs`).
    lock_handoffs: u32,
    /// Homes forward readers to the nodes that hold their pages (`CoreConfig::forward_within`,
    /// here with no time limit).
    forward: bool,
    policy: AllocPolicy,
    phases: usize,
}

fn make_case(rng: &mut Rng) -> Case {
    let max_nodes = if rng.chance(10) {
        16
    } else if rng.chance(20) {
        8
    } else {
        5
    };
    let nodes = 1 + rng.below(max_nodes) as u16;
    let pages = 1 + rng.below(8);
    let per_page = 1 + rng.below(4);
    let mut words = Vec::new();
    for p in 0..pages {
        let mut offsets: Vec<u64> = (0..per_page)
            .map(|_| rng.below(PAGE_SIZE as u64 / 8) * 8)
            .collect();
        offsets.sort_unstable();
        offsets.dedup();
        for o in offsets {
            words.push(GlobalAddr(p * PAGE_SIZE as u64 + o));
        }
    }
    let locks: Vec<u16> = (0..1 + rng.below(3))
        .map(|_| rng.below(64) as u16)
        .collect();
    let start = NodeId(rng.below(u64::from(nodes)) as u16);
    let policy = match rng.below(4) {
        0 => AllocPolicy::Cyclic {
            block_bytes: (1 + rng.below(2)) * PAGE_SIZE as u64,
            start,
        },
        1 => AllocPolicy::OnNode(start),
        2 => AllocPolicy::RoundRobin,
        _ => AllocPolicy::Blocks {
            blocks_bytes: (0..1 + rng.below(3))
                .map(|_| (1 + rng.below(2)) * PAGE_SIZE as u64)
                .collect(),
            start,
        },
    };
    Case {
        nodes,
        pages,
        words,
        locks,
        cache_pages: 1 + rng.below(pages + 1) as usize,
        prefetch: (
            rng.chance(50),
            1 + rng.below(4) as u32,
            1 + rng.below(6) as u32,
        ),
        policy,
        phases: 1 + rng.below(5) as usize,
        one_sided: rng.chance(33),
        migrate: rng.chance(50),
        second_thread: nodes >= 2 && rng.chance(25) && second_threads_asked(),
        lock_handoffs: [0, 1, 2, 16][rng.below(4) as usize],
        forward: rng.chance(50),
    }
}

/// Whether cases may have a second thread per node (not with `DSM_SIM_SECOND_THREAD=0`).
fn second_threads_asked() -> bool {
    std::env::var("DSM_SIM_SECOND_THREAD").map_or(true, |v| v != "0")
}

/// A read of `addr`, or (as often) a write of the next value to it.
fn read_or_write(rng: &mut Rng, addr: GlobalAddr, value: &mut u64) -> Op {
    *value += 1;
    if rng.chance(50) {
        Op::Read(addr)
    } else {
        Op::Write(addr, *value)
    }
}

/// The lock of the second threads' words.
const SECOND_THREAD_LOCK: u16 = 63;

/// Builds and runs one case; returns a description of the first failure.
fn run_case(seed: u64) -> Result<(u64, Stats, u64), String> {
    let mut rng = Rng::new(seed);
    let case = make_case(&mut rng);
    let (pf_on, pf_pages, pf_check) = case.prefetch;
    let mut c = Cluster::new(case.nodes, rng.next_u64(), |cfg| {
        cfg.cache_pages = case.cache_pages;
        cfg.prefetch.enabled = pf_on;
        cfg.prefetch.prefetch_pages = pf_pages;
        cfg.prefetch.max_checking_pages = pf_check;
        cfg.remote_reads = case.one_sided;
        cfg.home_migration = case.migrate;
        cfg.lock_handoffs = case.lock_handoffs;
        cfg.forward_within = case.forward.then_some(Duration::from_secs(3600));
    });
    // Three cases in four lend home runs, as the runtime does (drawn from the seed, not the
    // case's generator: a seed's case is unchanged).
    c.lend_runs(seed % 4 != 0);
    // One case in three has pages closed behind the nodes' backs now and then, as shown pages
    // made own are (from the seed too).
    c.close_behind_percent = if seed % 3 == 0 { 10 } else { 0 };
    // One in five has a node drop its read copies before a read now and then, as a node the
    // launcher finds running alone does.
    c.drop_copies_per_mille = if seed % 5 == 1 { 20 } else { 0 };
    c.one_sided_reads = case.one_sided;
    c.check_reference = true;
    c.alloc(case.policy.clone(), case.pages * PAGE_SIZE as u64)
        .map_err(|e| e.to_string())?;
    let mut value = seed << 16;
    let second: Vec<GlobalAddr> = if case.second_thread {
        case.words.iter().copied().step_by(3).collect()
    } else {
        Vec::new()
    };
    for n in (0..case.nodes).filter(|_| case.second_thread) {
        c.set_threads(n, 2);
        let lock = LockId(SECOND_THREAD_LOCK);
        for _ in 0..1 + rng.below(6) {
            c.push(n, 1, Op::Lock(lock));
            for _ in 0..1 + rng.below(3) {
                let addr = second[rng.below(second.len() as u64) as usize];
                c.push(n, 1, read_or_write(&mut rng, addr, &mut value));
            }
            c.push(n, 1, Op::Unlock(lock));
        }
        c.push(n, 1, Op::Lock(lock));
        for &addr in &second {
            c.push(n, 1, Op::Read(addr));
        }
        c.push(n, 1, Op::Unlock(lock));
    }
    for _ in 0..case.phases {
        // Some phases give each page one owner (a band per node, as most programs do: the case
        // home migration is for); the others mix roles word by word.
        let page_owners: Option<Vec<u16>> = rng.chance(40).then(|| {
            (0..case.pages)
                .map(|_| rng.below(u64::from(case.nodes)) as u16)
                .collect()
        });
        let roles: Vec<Role> = case
            .words
            .iter()
            .map(|w| match (&page_owners, rng.below(3)) {
                _ if second.contains(w) => Role::SecondThread,
                (Some(owners), _) => Role::Owned(owners[(w.0 / PAGE_SIZE as u64) as usize]),
                (None, 0) => Role::ReadOnly,
                (None, 1) => Role::Owned(rng.below(u64::from(case.nodes)) as u16),
                (None, _) => Role::Locked(case.locks[rng.below(case.locks.len() as u64) as usize]),
            })
            .collect();
        for n in 0..case.nodes {
            for _ in 0..rng.below(10) {
                let held: Vec<u16> = if rng.chance(60) {
                    let mut ls: Vec<u16> = case
                        .locks
                        .iter()
                        .copied()
                        .filter(|_| rng.chance(50))
                        .collect();
                    ls.sort_unstable();
                    ls.dedup();
                    ls
                } else {
                    Vec::new()
                };
                for &l in &held {
                    c.push(n, 0, Op::Lock(LockId(l)));
                }
                for _ in 0..1 + rng.below(8) {
                    let w = rng.below(case.words.len() as u64) as usize;
                    let addr = case.words[w];
                    match roles[w] {
                        Role::ReadOnly => c.push(n, 0, Op::Read(addr)),
                        Role::Owned(o) if o == n => {
                            c.push(n, 0, read_or_write(&mut rng, addr, &mut value));
                        }
                        Role::Locked(l) if held.contains(&l) => {
                            c.push(n, 0, read_or_write(&mut rng, addr, &mut value));
                        }
                        _ => {}
                    }
                }
                for &l in held.iter().rev() {
                    c.push(n, 0, Op::Unlock(LockId(l)));
                }
                // The second thread's words, under its lock, by the first thread.
                if !second.is_empty() && rng.chance(30) {
                    let lock = LockId(SECOND_THREAD_LOCK);
                    c.push(n, 0, Op::Lock(lock));
                    for _ in 0..1 + rng.below(3) {
                        let addr = second[rng.below(second.len() as u64) as usize];
                        c.push(n, 0, read_or_write(&mut rng, addr, &mut value));
                    }
                    c.push(n, 0, Op::Unlock(lock));
                }
            }
        }
        if rng.chance(20) {
            c.push_all(Op::Wait);
        }
        c.push_all(Op::Barrier);
    }
    // Every node reads every word at the end: half of them (by the seed, which leaves the case
    // as it was) from the last word down, a walk the read-ahead follows down through memory.
    for n in 0..case.nodes {
        let words = case.words.iter().filter(|w| !second.contains(w));
        let words: Vec<GlobalAddr> = if (seed + u64::from(n)) % 2 == 1 {
            words.rev().copied().collect()
        } else {
            words.copied().collect()
        };
        for w in words {
            c.push(n, 0, Op::Read(w));
        }
    }
    if let Err(e) = c.run() {
        return Err(format!("{e}\n{case:#?}"));
    }
    if let Some(v) = c.violations.first() {
        return Err(format!(
            "{} read {:#x} = {} but the reference says {} ({} violations)\n{case:#?}",
            v.node,
            v.addr.0,
            v.got,
            v.expected,
            c.violations.len()
        ));
    }
    let reads: u64 = c.reads.iter().map(|r| r.len() as u64).sum();
    Ok((reads, c.total_stats(), c.copies_dropped))
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
    )
}

#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "the test reports its own duration; the core never reads a clock"
)]
fn random_race_free_programs_read_what_a_sequential_execution_reads() {
    let seeds: Vec<u64> = match env_u64("DSM_SIM_SEED") {
        Some(s) => vec![s],
        None => {
            let base = env_u64("DSM_SIM_BASE").unwrap_or(0x5EED_0000);
            let cases = env_u64("DSM_SIM_CASES").unwrap_or(1000);
            (base..base + cases).collect()
        }
    };
    let started = Instant::now();
    let (mut reads, mut evictions, mut moved, mut vetoed, mut handoffs) = (0, 0, 0, 0, 0);
    let (mut forwarded, mut refused, mut dropped) = (0, 0, 0);
    for &seed in &seeds {
        match run_case(seed) {
            Ok((r, s, d)) => {
                reads += r;
                dropped += d;
                evictions += s.evictions;
                moved += s.homes_moved_here;
                vetoed += s.home_moves_vetoed;
                handoffs += s.lock_local_handoffs;
                forwarded += s.pages_forwarded;
                refused += s.forwards_refused;
            }
            Err(e) => panic!("case with seed {seed} failed (reproduce: DSM_SIM_SEED={seed}): {e}"),
        }
    }
    eprintln!(
        "{} cases, {reads} checked reads, {evictions} evictions, {moved} homes moved, {vetoed} \
         moves vetoed, {handoffs} locks handed between threads of a node, {forwarded} pages \
         forwarded by their holders, {refused} forwards refused, {dropped} copies dropped \
         in {:.2?}",
        seeds.len(),
        started.elapsed()
    );
    // The generator must actually exercise the protocol, not produce empty programs.
    if seeds.len() >= 100 {
        assert!(
            reads > 10 * seeds.len() as u64
                && evictions > 0
                && moved > 0
                && forwarded > 0
                && refused > 0
                && dropped > 0
                && ((handoffs > 0 && vetoed > 0) || !second_threads_asked()),
            "{reads} reads, {evictions} evictions, {moved} homes moved, {vetoed} vetoed, \
             {handoffs} hand-offs, {forwarded} pages forwarded, {refused} forwards refused, \
             {dropped} copies dropped"
        );
    }
}

/// Second-thread cases that once read stale bytes, both with home migration: a page moved to a
/// node whose copy lacked a write another node's second thread made during the barrier (its
/// diff applied at the old home), and that node read it under a lock whose grant named it
/// (300015195: the new home's reader came after the move; 1592610629: the same, with the
/// old home not the manager). The old home now ends the job naming the page, and a page moved
/// here stays closed until every node has applied the moves.
#[test]
fn threaded_cases_that_failed_once() {
    if !second_threads_asked() {
        return;
    }
    for seed in [300_015_195, 1_592_610_629] {
        if let Err(e) = run_case(seed) {
            panic!("case with seed {seed} failed again: {e}");
        }
    }
}

/// Cases found by the review of the veto (branch review-veto, `DSM_SIM_CASES=100000` from bases
/// 1e9, 2e9 and 3e9). With home migration: a page opened or asked again of its old home while
/// its move is being decided ("diff for a page that moved away": 1000028601, 2000021905,
/// 3000088029, 3000281846; a stale read: 3000053486). Without it too (it fails with home
/// migration off and before the veto): a lock held across two barrier calls of another thread
/// of its node loses its write notice (3000131507).
#[test]
fn cases_the_veto_review_found() {
    if !second_threads_asked() {
        return;
    }
    let failed: Vec<String> = [
        1_000_028_601,
        2_000_021_905,
        3_000_053_486,
        3_000_088_029,
        3_000_281_846,
        3_000_131_507,
    ]
    .into_iter()
    .filter_map(|seed| {
        run_case(seed)
            .err()
            .map(|e| format!("{seed}: {}", e.lines().next().unwrap_or("")))
    })
    .collect();
    assert!(
        failed.is_empty(),
        "{} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
