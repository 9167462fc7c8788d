//! Atomic operations on shared memory between nodes, on the simulated cluster: each rule as a
//! scenario, then random programs of counters and flags checked against a sequential reference.

use std::collections::BTreeSet;

use dsm_core::sim::{Cluster, Op, Rng};
use dsm_core::{
    AllocPolicy, AtomicOp, AtomicOrder, CvId, GlobalAddr, LockId, NodeId, PAGE_SIZE, UsageError,
};

const PAGE: u64 = PAGE_SIZE as u64;

/// `pages` pages homed on `home`.
fn on(c: &mut Cluster, home: u16, pages: u64) -> GlobalAddr {
    c.alloc(AllocPolicy::OnNode(NodeId(home)), pages * PAGE)
        .unwrap()
}

#[test]
fn fetch_adds_from_every_node_are_applied_once_each_in_one_order() {
    let mut c = Cluster::new(4, 1, |_| {});
    let x = on(&mut c, 1, 1);
    c.barrier().unwrap();
    for n in 0..4 {
        for _ in 0..25 {
            c.push(
                n,
                0,
                Op::Atomic {
                    width: 8,
                    addr: x,
                    op: AtomicOp::FetchAdd(1),
                    order: AtomicOrder::RELAXED,
                },
            );
        }
    }
    c.run().unwrap();
    // Every value before is distinct: 0 to 99, each once.
    let olds: BTreeSet<u64> = c.atomics.iter().flatten().map(|&(_, v)| v).collect();
    assert_eq!(olds, (0..100).collect());
    c.barrier().unwrap();
    for n in 0..4 {
        assert_eq!(c.read_u64(n, x).unwrap(), 100, "node {n}");
    }
    assert_eq!(c.node(1).stats().atomics_served, 100);
    assert_eq!(c.node(1).stats().atomics_local, 25);
}

/// Node 1 writes data homed on node 2, then sets a flag homed on node 0; node 3, which cached
/// the data before, waits for the flag and reads the data. `orders`: the flag's store and load.
fn message_passing(orders: (AtomicOrder, AtomicOrder)) -> Vec<u64> {
    let mut c = Cluster::new(4, 2, |cfg| cfg.prefetch.enabled = false);
    let flag = on(&mut c, 0, 1);
    let data = on(&mut c, 2, 3);
    c.barrier().unwrap();
    let words: Vec<GlobalAddr> = (0..3).map(|p| data.offset_by(p * PAGE + 64)).collect();
    for &w in &words {
        assert_eq!(c.read_u64(3, w).unwrap(), 0);
    }
    for (i, &w) in words.iter().enumerate() {
        c.write_u64(1, w, 7 + i as u64).unwrap();
    }
    c.atomic(1, flag, AtomicOp::Store(1), orders.0).unwrap();
    c.push(
        3,
        0,
        Op::AwaitAtomic {
            width: 8,
            addr: flag,
            at_least: 1,
            order: orders.1,
        },
    );
    c.run().unwrap();
    words.iter().map(|&w| c.read_u64(3, w).unwrap()).collect()
}

#[test]
fn an_acquire_that_reads_a_release_sees_the_writes_before_it() {
    assert_eq!(
        message_passing((AtomicOrder::RELEASE, AtomicOrder::ACQUIRE)),
        [7, 8, 9]
    );
    assert_eq!(
        message_passing((AtomicOrder::ACQ_REL, AtomicOrder::ACQ_REL)),
        [7, 8, 9]
    );
}

/// The rule the runtime's fences rest on (`dsm-runtime/src/fences.rs`): node 1 writes data node
/// 3 cached, releases through word X, then stores to word Y of the same home (on another page)
/// with relaxed order; node 3 waits for Y with relaxed loads, then makes an acquire load of Y,
/// or of another word Z of that home (a fence that acquires from every home): either acquire
/// is answered with X's release, which the home recorded before Y's store, and node 3 reads the
/// data. With X's store relaxed too, nothing is released and node 3 reads what it cached.
fn release_then_relaxed_store(release: AtomicOrder, acquire_other_word: bool) -> Vec<u64> {
    let mut c = Cluster::new(4, 3, |cfg| cfg.prefetch.enabled = false);
    let words = on(&mut c, 0, 3);
    let (x, y, z) = (words, words.offset_by(PAGE + 8), words.offset_by(2 * PAGE));
    let data = on(&mut c, 2, 3);
    c.barrier().unwrap();
    let cells: Vec<GlobalAddr> = (0..3).map(|p| data.offset_by(p * PAGE + 64)).collect();
    for &w in &cells {
        assert_eq!(c.read_u64(3, w).unwrap(), 0);
    }
    // Node 3 has operated on Z before (a page of atomics of home 0 it knows).
    c.atomic(3, z, AtomicOp::Load, AtomicOrder::RELAXED)
        .unwrap();
    for (i, &w) in cells.iter().enumerate() {
        c.write_u64(1, w, 7 + i as u64).unwrap();
    }
    c.atomic(1, x, AtomicOp::Store(1), release).unwrap();
    c.atomic(1, y, AtomicOp::Store(1), AtomicOrder::RELAXED)
        .unwrap();
    c.push(
        3,
        0,
        Op::AwaitAtomic {
            width: 8,
            addr: y,
            at_least: 1,
            order: AtomicOrder::RELAXED,
        },
    );
    c.run().unwrap();
    let again = if acquire_other_word { z } else { y };
    c.atomic(3, again, AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    cells.iter().map(|&w| c.read_u64(3, w).unwrap()).collect()
}

#[test]
fn an_acquire_through_any_word_of_a_home_sees_a_release_before_a_relaxed_store_there() {
    for other in [false, true] {
        assert_eq!(
            release_then_relaxed_store(AtomicOrder::RELEASE, other),
            [7, 8, 9],
            "acquire through another word: {other}"
        );
        assert_eq!(
            release_then_relaxed_store(AtomicOrder::RELAXED, other),
            [0, 0, 0],
            "acquire through another word: {other}"
        );
    }
}

/// A release the home holds (on a word of an allocation the home has not made yet) and a later
/// release of the same node through another word of that home, served first: the acquirer of
/// the second must see the writes before the first (found by a review, with one record of
/// releases per home and a node's `sent` moved on when a release left: the second release left
/// the first's pages out, and node 1 read 0 for 42). Node 0 writes data node 1 caches, then
/// its thread 0 releases through X (node 0 alone has allocated X, homed on node 1: held) and its
/// thread 1 through Y (homed on node 1); node 1 acquires Y and reads the data before it makes
/// the allocation.
#[test]
fn a_release_held_at_the_home_is_carried_by_the_next_release_through_its_home() {
    let mut c = Cluster::new(2, 9, |cfg| cfg.prefetch.enabled = false);
    c.set_threads(0, 2);
    let data = on(&mut c, 0, 1);
    let y = on(&mut c, 1, 1);
    c.barrier().unwrap();
    let w = data.offset_by(64);
    assert_eq!(c.read_u64(1, w).unwrap(), 0);
    c.write_u64(0, w, 42).unwrap();
    let x = c.alloc_on(0, AllocPolicy::OnNode(NodeId(1)), PAGE).unwrap();
    c.push(
        0,
        0,
        Op::Atomic {
            width: 8,
            addr: x,
            op: AtomicOp::Store(1),
            order: AtomicOrder::RELEASE,
        },
    );
    // Thread 0's release leaves (held at node 1); then thread 1's.
    assert!(c.run().is_err(), "the release through X is held");
    c.push(
        0,
        1,
        Op::Atomic {
            width: 8,
            addr: y,
            op: AtomicOp::Store(1),
            order: AtomicOrder::RELEASE,
        },
    );
    c.push(
        1,
        0,
        Op::AwaitAtomic {
            width: 8,
            addr: y,
            at_least: 1,
            order: AtomicOrder::ACQUIRE,
        },
    );
    c.push(1, 0, Op::Read(w));
    assert!(c.run().is_err(), "the release through X is still held");
    assert_eq!(
        c.reads[1].last(),
        Some(&(w, 42)),
        "node 1 read the data stale"
    );
    // Node 1 makes the allocation: the held release is made.
    c.alloc_on(1, AllocPolicy::OnNode(NodeId(1)), PAGE).unwrap();
    c.run().unwrap();
    assert_eq!(c.read_u64(1, x).unwrap(), 1);
}

/// A chain through words of `relays + 1` homes: node 0 writes data node `relays + 1` cached
/// (a page homed on itself, one on the last node) and releases a flag homed on node 1; each
/// relay `r` acquires the flag before it and releases one homed on node `r + 1`; the last node
/// acquires the last flag and reads the data. C11's happens-before is transitive; so is the
/// DSM's: a relay passes on the writes its acquire made it see (an outside attack's `trans.c`
/// read 0 before, a release passing on its node's own writes only).
fn chain(relays: u16) -> Vec<u64> {
    let last = relays + 1;
    let mut c = Cluster::new(last + 1, 11, |cfg| cfg.prefetch.enabled = false);
    let flags: Vec<GlobalAddr> = (1..=last).map(|home| on(&mut c, home, 1)).collect();
    let data = [on(&mut c, 0, 1), on(&mut c, last, 1)];
    c.barrier().unwrap();
    let words: Vec<GlobalAddr> = data.iter().map(|d| d.offset_by(64)).collect();
    for &w in &words {
        assert_eq!(c.read_u64(last, w).unwrap(), 0);
    }
    for (i, &w) in words.iter().enumerate() {
        c.write_u64(0, w, 7 + i as u64).unwrap();
    }
    c.atomic(0, flags[0], AtomicOp::Store(1), AtomicOrder::RELEASE)
        .unwrap();
    for r in 1..=relays {
        c.push(
            r,
            0,
            Op::AwaitAtomic {
                width: 8,
                addr: flags[usize::from(r) - 1],
                at_least: 1,
                order: AtomicOrder::ACQUIRE,
            },
        );
        c.push(
            r,
            0,
            Op::Atomic {
                width: 8,
                addr: flags[usize::from(r)],
                op: AtomicOp::Store(1),
                order: AtomicOrder::RELEASE,
            },
        );
    }
    c.push(
        last,
        0,
        Op::AwaitAtomic {
            width: 8,
            addr: flags[usize::from(relays)],
            at_least: 1,
            order: AtomicOrder::ACQUIRE,
        },
    );
    for &w in &words {
        c.push(last, 0, Op::Read(w));
    }
    c.run().unwrap();
    words
        .iter()
        .map(|&w| c.read_u64(last, w).unwrap())
        .collect()
}

#[test]
fn a_chain_of_atomic_acquires_and_releases_through_other_homes_passes_the_writes_on() {
    assert_eq!(chain(1), [7, 8]);
    assert_eq!(chain(2), [7, 8]);
    assert_eq!(chain(3), [7, 8]);
}

/// A chain that enters node 1 through a lock (or a condition variable) and leaves it through
/// an atomic word: node 0 writes data node 2 cached under lock 3 (sets condition variable 3),
/// node 1 takes the lock (waits on the variable) and releases X, node 2 acquires X and reads.
/// C11 orders it; node 1 passes on what the grant named as its own writes (node 2 read 0
/// before: a lock's grant taught a node nothing to pass on).
fn lock_then_atomic(through_cv: bool) -> u64 {
    let mut c = Cluster::new(3, 14, |cfg| cfg.prefetch.enabled = false);
    let x = on(&mut c, 0, 1);
    let data = on(&mut c, 0, 1).offset_by(64);
    c.barrier().unwrap();
    assert_eq!(c.read_u64(2, data).unwrap(), 0);
    if through_cv {
        c.write_u64(0, data, 42).unwrap();
        c.push(0, 0, Op::SetCv(CvId(3)));
        c.push(1, 0, Op::WaitCv(CvId(3)));
    } else {
        c.lock(0, 3).unwrap();
        c.write_u64(0, data, 42).unwrap();
        c.unlock(0, 3).unwrap();
        c.push(1, 0, Op::Lock(LockId(3)));
        c.push(1, 0, Op::Unlock(LockId(3)));
    }
    c.push(
        1,
        0,
        Op::Atomic {
            width: 8,
            addr: x,
            op: AtomicOp::Store(1),
            order: AtomicOrder::RELEASE,
        },
    );
    c.push(
        2,
        0,
        Op::AwaitAtomic {
            width: 8,
            addr: x,
            at_least: 1,
            order: AtomicOrder::ACQUIRE,
        },
    );
    c.push(2, 0, Op::Read(data));
    c.run().unwrap();
    c.reads[2].last().map(|&(_, v)| v).unwrap()
}

#[test]
fn a_chain_entering_a_node_through_a_lock_and_leaving_through_an_atomic_is_ordered() {
    assert_eq!(lock_then_atomic(false), 42);
    assert_eq!(lock_then_atomic(true), 42);
}

/// Nodes that acquire and release in turn through two homes, each seeing the other's writes
/// again and again: a write passed on comes back to its writer and to nodes that know it, and
/// goes no further (it went round for ever, each round invalidating its page again, when
/// releases passed on what their acquires named without knowing whose write it was).
#[test]
fn writes_passed_on_do_not_go_round() {
    let mut c = Cluster::new(3, 12, |cfg| cfg.prefetch.enabled = false);
    let x = on(&mut c, 1, 1);
    let y = on(&mut c, 2, 1);
    let data = on(&mut c, 0, 1).offset_by(64);
    c.barrier().unwrap();
    c.write_u64(0, data, 5).unwrap();
    let rounds = 20;
    for n in 0..3u16 {
        for k in 0..rounds {
            let (acq, rel) = if (n + k as u16) % 2 == 0 {
                (x, y)
            } else {
                (y, x)
            };
            c.push(
                n,
                0,
                Op::Atomic {
                    width: 8,
                    addr: acq,
                    op: AtomicOp::FetchAdd(1),
                    order: AtomicOrder::ACQ_REL,
                },
            );
            c.push(n, 0, Op::Read(data));
            c.push(
                n,
                0,
                Op::Atomic {
                    width: 8,
                    addr: rel,
                    op: AtomicOp::FetchAdd(1),
                    order: AtomicOrder::ACQ_REL,
                },
            );
        }
    }
    c.run().unwrap();
    assert!(c.reads.iter().flatten().all(|&(_, v)| v == 5));
    // Nodes 1 and 2 each fetch the page once: every notice naming it later is of a write they
    // know.
    let fetched: u64 = (1..3).map(|n| c.node(n).stats().getp_sent).sum();
    assert!(fetched <= 2, "{fetched} fetches of the page");
}

/// A chain across a barrier's edge (found by review): node 0 writes data node 2 caches and
/// releases X, then enters a barrier; node 1, past the barrier, acquires X and releases Y; node
/// 2's thread 1 acquires Y while its thread 0 is still in the barrier (its grant not come) and
/// reads the data. Node 1's acquire was sent the writes of its own epoch only: it never learned
/// node 0's, of the epoch before (its barrier had invalidated them for itself), and passed
/// nothing on: node 2 read 0 with 40 seeds of 300.
fn chain_across_a_barrier(seed: u64) -> Option<u64> {
    let mut c = Cluster::new(4, seed, |cfg| cfg.prefetch.enabled = false);
    let x = on(&mut c, 3, 1);
    let y = on(&mut c, 2, 1);
    let data = on(&mut c, 3, 1).offset_by(64);
    c.set_threads(2, 2);
    c.barrier().unwrap();
    assert_eq!(c.read_u64(2, data).unwrap(), 0);
    c.push(0, 0, Op::Write(data, 42));
    c.push(
        0,
        0,
        Op::Atomic {
            width: 8,
            addr: x,
            op: AtomicOp::Store(1),
            order: AtomicOrder::RELEASE,
        },
    );
    c.push(0, 0, Op::Barrier);
    c.push(1, 0, Op::Barrier);
    c.push(
        1,
        0,
        Op::AwaitAtomic {
            width: 8,
            addr: x,
            at_least: 1,
            order: AtomicOrder::ACQUIRE,
        },
    );
    c.push(
        1,
        0,
        Op::Atomic {
            width: 8,
            addr: y,
            op: AtomicOp::Store(1),
            order: AtomicOrder::RELEASE,
        },
    );
    c.push(3, 0, Op::Barrier);
    c.push(2, 0, Op::Barrier);
    c.push(
        2,
        1,
        Op::AwaitAtomic {
            width: 8,
            addr: y,
            at_least: 1,
            order: AtomicOrder::ACQUIRE,
        },
    );
    c.push(2, 1, Op::Read(data));
    c.run().unwrap();
    c.reads[2].last().map(|&(_, v)| v)
}

#[test]
fn a_chain_across_a_barrier_passes_on_the_writes_of_the_epoch_before() {
    let stale: Vec<u64> = (0..300)
        .filter(|&seed| chain_across_a_barrier(seed) != Some(42))
        .collect();
    assert!(
        stale.is_empty(),
        "node 2 read stale data with seeds {stale:?}"
    );
}

/// A write two homes name (its writer released through a word of each) is invalidated once: a
/// node that saw it through one home keeps the copy it fetched since when the other names it.
#[test]
fn a_write_named_by_two_homes_is_invalidated_once() {
    let mut c = Cluster::new(4, 13, |cfg| cfg.prefetch.enabled = false);
    let x = on(&mut c, 2, 1);
    let y = on(&mut c, 3, 1);
    let data = on(&mut c, 0, 1).offset_by(64);
    c.barrier().unwrap();
    assert_eq!(c.read_u64(1, data).unwrap(), 0);
    c.write_u64(0, data, 5).unwrap();
    c.atomic(0, x, AtomicOp::Store(1), AtomicOrder::RELEASE)
        .unwrap();
    c.atomic(0, y, AtomicOp::Store(1), AtomicOrder::RELEASE)
        .unwrap();
    c.atomic(1, x, AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    assert_eq!(c.read_u64(1, data).unwrap(), 5);
    let fetched = c.node(1).stats().getp_sent;
    c.atomic(1, y, AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    assert_eq!(c.read_u64(1, data).unwrap(), 5);
    assert_eq!(c.node(1).stats().getp_sent, fetched, "fetched again");
}

#[test]
fn relaxed_atomics_order_nothing_else() {
    // The control: relaxed on either side, node 3 keeps its copies (what C11 allows).
    assert_eq!(
        message_passing((AtomicOrder::RELAXED, AtomicOrder::ACQUIRE)),
        [0, 0, 0]
    );
    assert_eq!(
        message_passing((AtomicOrder::RELEASE, AtomicOrder::RELAXED)),
        [0, 0, 0]
    );
}

#[test]
fn a_node_reads_the_value_its_own_atomic_left_in_a_page_it_caches() {
    let mut c = Cluster::new(2, 3, |_| {});
    let x = on(&mut c, 0, 1);
    c.write_u64(0, x, 5).unwrap();
    c.barrier().unwrap();
    assert_eq!(c.read_u64(1, x).unwrap(), 5);
    assert_eq!(
        c.atomic(1, x, AtomicOp::FetchAdd(10), AtomicOrder::RELAXED)
            .unwrap(),
        5
    );
    assert_eq!(c.read_u64(1, x).unwrap(), 15);
    // And a node ordered after it by a lock sees it too.
    c.lock(1, 3).unwrap();
    c.unlock(1, 3).unwrap();
    assert_eq!(c.read_u64(0, x).unwrap(), 15);
}

#[test]
fn a_release_through_an_atomic_reaches_a_node_that_acquires_later_through_a_lock() {
    // Node 1's atomic marks the word's page written in its interval: its next lock release
    // names it, so node 2, which cached the page, drops it.
    let mut c = Cluster::new(3, 4, |cfg| cfg.prefetch.enabled = false);
    let x = on(&mut c, 0, 1);
    c.barrier().unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 0);
    c.lock(1, 5).unwrap();
    c.atomic(1, x, AtomicOp::Swap(42), AtomicOrder::RELAXED)
        .unwrap();
    c.unlock(1, 5).unwrap();
    c.lock(2, 5).unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 42);
    c.unlock(2, 5).unwrap();
}

#[test]
fn compare_exchange_writes_only_on_a_match_and_narrow_words_wrap() {
    let mut c = Cluster::new(2, 5, |_| {});
    let x = on(&mut c, 0, 1);
    c.barrier().unwrap();
    let cas = |expected, new| AtomicOp::CompareExchange { expected, new };
    let r = AtomicOrder::ACQ_REL;
    assert_eq!(c.atomic(1, x, cas(1, 9), r).unwrap(), 0);
    assert_eq!(c.atomic(1, x, AtomicOp::Load, r).unwrap(), 0);
    assert_eq!(c.atomic(1, x, cas(0, 9), r).unwrap(), 0);
    assert_eq!(c.atomic(1, x, AtomicOp::Load, r).unwrap(), 9);
    for (op, before, after) in [
        (AtomicOp::FetchSub(10), 9, u64::MAX),
        (AtomicOp::FetchAnd(0xF0), u64::MAX, 0xF0),
        (AtomicOp::FetchOr(0x0F), 0xF0, 0xFF),
        (AtomicOp::FetchXor(0xFF), 0xFF, 0),
    ] {
        assert_eq!(c.atomic(1, x, op, r).unwrap(), before, "{op:?}");
        assert_eq!(c.atomic(0, x, AtomicOp::Load, r).unwrap(), after, "{op:?}");
    }
    // 4-byte words: the arithmetic wraps at 32 bits, the neighbour untouched.
    assert_eq!(AtomicOp::FetchAdd(1).apply(u64::from(u32::MAX), 4), Some(0));
    assert_eq!(AtomicOp::FetchSub(1).apply(0, 4), Some(u64::from(u32::MAX)));
}

#[test]
fn an_atomic_on_a_misaligned_or_unallocated_word_is_refused() {
    let mut c = Cluster::new(2, 6, |_| {});
    let x = on(&mut c, 0, 1);
    let t = dsm_core::Time(0);
    let w = dsm_core::WaiterId(0);
    let node = c.node_mut(1);
    let relaxed = AtomicOrder::RELAXED;
    for (addr, width) in [
        (x.offset_by(4), 8),
        (x.offset_by(2), 4),
        (x.offset_by(1), 2),
        (x, 3),
        (x, 16),
        (x.offset_by(PAGE), 8),
        (x.offset_by(PAGE), 1),
    ] {
        assert_eq!(
            node.atomic(t, w, (addr, width), AtomicOp::Load, relaxed),
            Err(UsageError::BadAtomic {
                addr: addr.0,
                width
            })
        );
    }
}

/// Random programs: phases between barriers; in each, every node adds to shared counters with
/// random orders, and one node per phase publishes data through a flag that the others await
/// before reading the data. Every plain read is checked against the sequential reference, and
/// each counter's values before are distinct.
fn run_case(seed: u64) -> Result<u64, String> {
    let mut rng = Rng::new(seed);
    let nodes = 2 + rng.below(4) as u16;
    let orders = [
        AtomicOrder::RELAXED,
        AtomicOrder::ACQUIRE,
        AtomicOrder::RELEASE,
        AtomicOrder::ACQ_REL,
    ];
    let prefetch = rng.chance(50);
    let cache = 1 + rng.below(6) as usize;
    let mut c = Cluster::new(nodes, rng.next_u64(), |cfg| {
        cfg.prefetch.enabled = prefetch;
        cfg.cache_pages = cache;
        cfg.home_migration = std::env::var_os("NOMIG").is_none();
        // Half the cases forget words (drawn from the seed, not the case's generator: a
        // seed's case is unchanged): one to eight kept, fewer than the case's words in most.
        if seed % 2 == 1 {
            cfg.atomic_words_kept = 1 + (seed / 2 % 8) as usize;
        }
    });
    // Three cases in four lend home runs, as the runtime does (drawn from the seed, not the
    // case's generator: a seed's case is unchanged).
    c.lend_runs(seed % 4 != 0);
    c.check_reference = true;
    // One case in five has a node drop its copies before a read now and then, as a node the
    // launcher finds running beside waiting ones does (from the seed).
    c.drop_copies_per_mille = if seed % 5 == 1 { 20 } else { 0 };
    let pages = 2 + rng.below(4);
    let policy = if rng.chance(50) {
        AllocPolicy::RoundRobin
    } else {
        AllocPolicy::OnNode(NodeId(rng.below(u64::from(nodes)) as u16))
    };
    let base = c
        .alloc(policy.clone(), pages * PAGE)
        .map_err(|e| e.to_string())?;
    let word = |rng: &mut Rng| base.offset_by(rng.below(pages) * PAGE + rng.below(16) * 8);
    // Each counter and flag is 1, 2, 4 or 8 bytes at an offset of its width in its 8-byte word,
    // drawn apart from the case's generator (a seed's case is otherwise unchanged): two
    // counters may share a word's bytes (then they are one, of one width) or lie side by side.
    let mut widths = Rng::new(seed ^ 0x05EE_D0FB_17E5);
    let mut sized = |at: GlobalAddr| {
        let width = [1u8, 2, 4, 8][widths.below(4) as usize];
        let at = at.offset_by(widths.below(8 / u64::from(width)) * u64::from(width));
        (at, width)
    };
    let mut counters: Vec<(GlobalAddr, u8)> = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let (at, width) = sized(word(&mut rng));
        let end = |(a, w): (GlobalAddr, u8)| a.0 + u64::from(w);
        let same = counters
            .iter()
            .copied()
            .find(|&c| c.0.0 < end((at, width)) && at.0 < end(c));
        counters.push(same.unwrap_or((at, width)));
    }
    // Distinct words: a flag's value counts its own releases.
    let flags: Vec<(GlobalAddr, u8)> = (0..4)
        .map(|i| sized(base.offset_by(rng.below(pages) * PAGE + (64 + 4 * i + rng.below(4)) * 8)))
        .collect();
    let data: Vec<GlobalAddr> = (0..4)
        .map(|_| base.offset_by(rng.below(pages) * PAGE + (128 + rng.below(64)) * 8))
        .collect();
    let debug = std::env::var_os("DEBUG").is_some();
    if debug {
        eprintln!(
            "nodes {nodes} pages {pages} {policy:?} prefetch {prefetch} cache {cache} counters {counters:?} flags {flags:?} data {data:?}"
        );
    }
    let mut value = seed << 16;
    let mut flag_values = vec![0u64; flags.len()];
    let mut adds = vec![0u64; counters.len()];
    for phase in 0..1 + rng.below(4) {
        let writer = rng.below(u64::from(nodes)) as u16;
        let f = rng.below(flags.len() as u64) as usize;
        // The flag's value once this phase's writer has released it.
        flag_values[f] += 1;
        // A relay, in some phases: it acquires the writer's flag and releases another, which
        // the readers await instead (a chain, through two homes in most cases).
        let relay = (nodes > 2 && rng.chance(40)).then(|| {
            let r = (writer + 1 + rng.below(u64::from(nodes) - 1) as u16) % nodes;
            let g = (f + 1 + rng.below(flags.len() as u64 - 1) as usize) % flags.len();
            flag_values[g] += 1;
            (r, g)
        });
        // With a relay, the writer publishes through a condition variable (set once) in some
        // phases: a chain entering the relay through a grant that is not an atomic's.
        let cv = relay
            .is_some_and(|_| rng.chance(40))
            .then_some(CvId(phase as u16));
        if cv.is_some() {
            flag_values[f] -= 1;
        }
        // The flag the readers await.
        let last = relay.map_or(f, |(_, g)| g);
        for n in 0..nodes {
            for _ in 0..rng.below(6) {
                let k = rng.below(counters.len() as u64) as usize;
                adds[k] += 1;
                let order = orders[rng.below(4) as usize];
                if debug {
                    eprintln!("n{n}: add counter {k} {order:?}");
                }
                c.push(
                    n,
                    0,
                    Op::Atomic {
                        width: counters[k].1,
                        addr: counters[k].0,
                        op: AtomicOp::FetchAdd(1),
                        order,
                    },
                );
            }
            if n == writer {
                if debug {
                    eprintln!("n{n}: writes data, releases flag {f} -> {}", flag_values[f]);
                }
                for &d in &data {
                    value += 1;
                    c.push(n, 0, Op::Write(d, value));
                }
                if let Some(cv) = cv {
                    c.push(n, 0, Op::SetCv(cv));
                } else {
                    c.push(
                        n,
                        0,
                        Op::Atomic {
                            width: flags[f].1,
                            addr: flags[f].0,
                            op: AtomicOp::FetchAdd(1),
                            order: [AtomicOrder::RELEASE, AtomicOrder::ACQ_REL]
                                [rng.below(2) as usize],
                        },
                    );
                }
            } else if let Some((_, g)) = relay.filter(|&(r, _)| r == n) {
                if debug {
                    eprintln!(
                        "n{n}: awaits flag {f} >= {}, releases flag {g} -> {}",
                        flag_values[f], flag_values[g]
                    );
                }
                if let Some(cv) = cv {
                    c.push(n, 0, Op::WaitCv(cv));
                } else {
                    c.push(
                        n,
                        0,
                        Op::AwaitAtomic {
                            width: flags[f].1,
                            addr: flags[f].0,
                            at_least: flag_values[f],
                            order: [AtomicOrder::ACQUIRE, AtomicOrder::ACQ_REL]
                                [rng.below(2) as usize],
                        },
                    );
                }
                c.push(
                    n,
                    0,
                    Op::Atomic {
                        width: flags[g].1,
                        addr: flags[g].0,
                        op: AtomicOp::FetchAdd(1),
                        order: [AtomicOrder::RELEASE, AtomicOrder::ACQ_REL][rng.below(2) as usize],
                    },
                );
            } else if rng.chance(70) {
                if debug {
                    eprintln!(
                        "n{n}: awaits flag {last} >= {}, reads data",
                        flag_values[last]
                    );
                }
                c.push(
                    n,
                    0,
                    Op::AwaitAtomic {
                        width: flags[last].1,
                        addr: flags[last].0,
                        at_least: flag_values[last],
                        order: [AtomicOrder::ACQUIRE, AtomicOrder::ACQ_REL][rng.below(2) as usize],
                    },
                );
                for &d in &data {
                    c.push(n, 0, Op::Read(d));
                }
            }
        }
        c.push_all(Op::Barrier);
        if debug {
            eprintln!("barrier");
        }
    }
    for n in 0..nodes {
        for &(k, _) in &counters {
            // The counter's 8-byte word, whole (the reference's).
            c.push(n, 0, Op::Read(GlobalAddr(k.0 - k.0 % 8)));
        }
    }
    c.run().map_err(|e| e.to_string())?;
    if let Some(v) = c.violations.first() {
        return Err(format!(
            "{} read {:#x} = {} but the reference says {} ({} violations)",
            v.node,
            v.addr.0,
            v.got,
            v.expected,
            c.violations.len()
        ));
    }
    // Each counter's values before: one per add, all distinct (a word may be two counters).
    for &(addr, _) in counters.iter().collect::<BTreeSet<_>>() {
        let added: u64 = (0..counters.len())
            .filter(|&k| counters[k].0 == addr)
            .map(|k| adds[k])
            .sum();
        let olds: Vec<u64> = c
            .atomics
            .iter()
            .flatten()
            .filter(|&&(a, _)| a == addr)
            .map(|&(_, v)| v)
            .collect();
        let distinct: BTreeSet<u64> = olds.iter().copied().collect();
        if distinct.len() != olds.len() || olds.len() as u64 != added {
            return Err(format!(
                "counter {addr:?}: {added} adds answered {} values, {} distinct",
                olds.len(),
                distinct.len()
            ));
        }
    }
    Ok(c.total_stats().atomics_served)
}

/// The first seed and the number of random cases: `DSM_SIM_BASE` (else `default_base`) and
/// `DSM_SIM_CASES` (else 500).
fn seeds(default_base: u64) -> (u64, u64) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    (
        var("DSM_SIM_BASE").unwrap_or(default_base),
        var("DSM_SIM_CASES").unwrap_or(500),
    )
}

#[test]
fn random_programs_with_atomics_read_what_a_sequential_execution_reads() {
    let (base, cases) = seeds(0xA70_0000);
    let mut served = 0;
    for seed in base..base + cases {
        match run_case(seed) {
            Ok(s) => served += s,
            Err(e) => panic!(
                "case with seed {seed} failed (reproduce: DSM_SIM_BASE={seed} DSM_SIM_CASES=1): {e}"
            ),
        }
    }
    assert!(
        served > cases,
        "{served} atomic operations in {cases} cases"
    );
}

/// Four threads of node 1 add to a word homed on node 0 at once: the first add goes alone, the
/// three that came while it was on its way go as one operation, and each thread's answer is the
/// value its own add found (a fetch-sub among them, as the addition of its negation).
#[test]
fn fetch_adds_of_a_nodes_threads_combine_into_one_operation() {
    let mut c = Cluster::new(2, 3, |_| {});
    let x = on(&mut c, 0, 1);
    c.barrier().unwrap();
    c.set_threads(1, 4);
    let ops = [
        AtomicOp::FetchAdd(10),
        AtomicOp::FetchAdd(5),
        AtomicOp::FetchSub(2),
        AtomicOp::FetchAdd(100),
    ];
    for (t, &op) in ops.iter().enumerate() {
        c.push(
            1,
            t,
            Op::Atomic {
                width: 8,
                addr: x,
                op,
                order: AtomicOrder::ACQ_REL,
            },
        );
    }
    c.run().unwrap();
    assert_eq!(
        c.node(0).stats().atomics_served,
        2,
        "one alone, three combined"
    );
    assert_eq!(c.node(1).stats().atomics_combined, 3);
    // The values before are those of the adds applied one after the other, in some order.
    let adds: [u64; 4] = [10, 5, 2u64.wrapping_neg(), 100];
    let mut got: Vec<u64> = c.atomics[1].iter().map(|&(_, v)| v).collect();
    got.sort_unstable();
    let orders = permutations(&[0, 1, 2, 3]);
    let chained = orders.iter().any(|order| {
        let mut value = 0u64;
        let mut olds: Vec<u64> = order
            .iter()
            .map(|&i| {
                let old = value;
                value = value.wrapping_add(adds[i]);
                old
            })
            .collect();
        olds.sort_unstable();
        olds == got
    });
    assert!(chained, "values before {got:?}");
    c.barrier().unwrap();
    assert_eq!(c.read_u64(0, x).unwrap(), 113);
    assert_eq!(c.read_u64(1, x).unwrap(), 113);
}

/// Every order of `items`.
fn permutations(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        let rest: Vec<usize> = items
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, &x)| x)
            .collect();
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            all.push(tail);
        }
    }
    all
}

/// Random programs of threads adding to shared counters at once, with random orders, while
/// node 0 writes data and releases it through an add: each counter's values before are every
/// value from 0 to its adds, once each (combined or not), and every node reads the sums.
fn combined_case(seed: u64) -> Result<u64, String> {
    let mut rng = Rng::new(seed);
    let nodes = 2 + rng.below(3) as u16;
    let orders = [
        AtomicOrder::RELAXED,
        AtomicOrder::ACQUIRE,
        AtomicOrder::RELEASE,
        AtomicOrder::ACQ_REL,
    ];
    let prefetch = rng.chance(50);
    let mut c = Cluster::new(nodes, rng.next_u64(), |cfg| cfg.prefetch.enabled = prefetch);
    let pages = 1 + rng.below(3);
    let policy = if rng.chance(50) {
        AllocPolicy::RoundRobin
    } else {
        AllocPolicy::OnNode(NodeId(rng.below(u64::from(nodes)) as u16))
    };
    let base = c.alloc(policy, pages * PAGE).map_err(|e| e.to_string())?;
    let counters: Vec<GlobalAddr> = (0..1 + rng.below(2))
        .map(|i| base.offset_by(rng.below(pages) * PAGE + (8 * i + rng.below(8)) * 8))
        .collect();
    c.barrier().map_err(|e| e.to_string())?;
    let mut adds = vec![0u64; counters.len()];
    for n in 0..nodes {
        let threads = 1 + rng.below(4) as usize;
        c.set_threads(n, threads);
        for t in 0..threads {
            for _ in 0..rng.below(8) {
                let k = rng.below(counters.len() as u64) as usize;
                adds[k] += 1;
                c.push(
                    n,
                    t,
                    Op::Atomic {
                        width: 8,
                        addr: counters[k],
                        op: AtomicOp::FetchAdd(1),
                        order: orders[rng.below(4) as usize],
                    },
                );
            }
        }
    }
    c.run().map_err(|e| e.to_string())?;
    for (k, &addr) in counters.iter().enumerate() {
        let added: u64 = (0..counters.len())
            .filter(|&j| counters[j] == addr)
            .map(|j| adds[j])
            .sum();
        let olds: BTreeSet<u64> = c
            .atomics
            .iter()
            .flatten()
            .filter(|&&(a, _)| a == addr)
            .map(|&(_, v)| v)
            .collect();
        if olds != (0..added).collect() {
            return Err(format!(
                "counter {k} at {addr:?}: {added} adds answered {olds:?}"
            ));
        }
    }
    c.barrier().map_err(|e| e.to_string())?;
    for n in 0..nodes {
        for (k, &addr) in counters.iter().enumerate() {
            let added: u64 = (0..counters.len())
                .filter(|&j| counters[j] == addr)
                .map(|j| adds[j])
                .sum();
            let got = c.read_u64(n, addr).map_err(|e| e.to_string())?;
            if got != added {
                return Err(format!("node {n} reads counter {k} = {got}, not {added}"));
            }
        }
    }
    Ok(c.total_stats().atomics_combined)
}

#[test]
fn random_programs_of_threads_adding_at_once_answer_every_value_once() {
    let (base, cases) = seeds(0xC0B_0000);
    let mut combined = 0;
    for seed in base..base + cases {
        match combined_case(seed) {
            Ok(k) => combined += k,
            Err(e) => panic!(
                "case with seed {seed} failed (reproduce: DSM_SIM_BASE={seed} DSM_SIM_CASES=1): {e}"
            ),
        }
    }
    assert!(
        combined > cases,
        "{combined} combined adds in {cases} cases"
    );
}

// ----- random chains with two threads per node, across barriers' edges (a review's) -----

/// Random programs of chains of acquire/release atomics through words of random homes, two
/// threads per node: thread 0 of each node takes part in each phase and then enters the
/// barrier; thread 1 takes part in the phases without entering barriers (so its acquires and
/// releases land on either side of its node's barrier edge). Each phase writes fresh data
/// words (written once), so every read after the chain has one right answer. Some chains start
/// through a condition variable, the first relay entering through its grant (89 cases of
/// 3,000 read stale data with the relay of grants left out).
fn chain_case(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let nodes = 3 + rng.below(3) as u16;
    let prefetch = rng.chance(50);
    let cache = 1 + rng.below(6) as usize;
    let migrate = rng.chance(70);
    let kept = 1 + rng.below(8) as usize;
    let forget = rng.chance(50);
    let one_sided = seed % 3 == 1;
    let mut c = Cluster::new(nodes, rng.next_u64(), |cfg| {
        cfg.remote_reads = one_sided;
        cfg.prefetch.enabled = prefetch;
        cfg.cache_pages = cache;
        cfg.home_migration = migrate;
        if forget {
            cfg.atomic_words_kept = kept;
        }
    });
    c.lend_runs(rng.chance(75));
    c.one_sided_reads = one_sided;
    c.close_behind_percent = if seed % 5 == 2 { 10 } else { 0 };
    c.check_reference = true;
    for n in 0..nodes {
        c.set_threads(n, 2);
    }
    let data_pages = 2 + rng.below(4);
    let dpolicy = if rng.chance(50) {
        AllocPolicy::RoundRobin
    } else {
        AllocPolicy::OnNode(NodeId(rng.below(u64::from(nodes)) as u16))
    };
    let data = c
        .alloc(dpolicy, data_pages * PAGE)
        .map_err(|e| e.to_string())?;
    // One page of flags per node, homed there; some flags on the data pages too.
    let fpages: Vec<GlobalAddr> = (0..nodes).map(|n| on(&mut c, n, 1)).collect();
    c.barrier().map_err(|e| e.to_string())?;
    let mut next_data_word = 0u64;
    let mut next_flag = vec![0u64; usize::from(nodes)];
    let mut next_dflag = 256u64;
    let mut value = seed << 20;
    let debug = std::env::var_os("DEBUG").is_some();
    let phases = 1 + rng.below(5);
    let mut deferred: Vec<(u16, Op)> = Vec::new();
    let mut next_cv = 0u16;
    for phase in 0..phases {
        // Some caching reads of words never written (pulls pages into caches).
        for n in 0..nodes {
            for _ in 0..rng.below(3) {
                let w = data.offset_by(rng.below(data_pages) * PAGE + (480 + rng.below(32)) * 8);
                c.push(n, rng.below(2) as usize, Op::Read(w));
            }
        }
        if rng.chance(60) {
            // Every node caches every data page, then a barrier that invalidates none of them
            // (only flags written since the last): copies older than this phase's writes.
            for n in 0..nodes {
                for pg in 0..data_pages {
                    c.push(n, 0, Op::Read(data.offset_by(pg * PAGE + 500 * 8)));
                }
            }
            c.push_all(Op::Barrier);
        }
        // A phase is all in edge mode or not at all (a thread 0 waiting for a thread 1 stuck
        // behind a relay past the barrier would never get there).
        let edge = rng.chance(60);
        for _chain in 0..1 + rng.below(2) {
            let len = 1 + rng.below(4) as usize; // flags in the chain
            let mut new_flag = |rng: &mut Rng| {
                if rng.chance(10) {
                    // On a data page.
                    let w = data.offset_by(rng.below(data_pages) * PAGE + next_dflag * 8);
                    next_dflag += 1;
                    w
                } else {
                    let h = rng.below(u64::from(nodes)) as usize;
                    let w = fpages[h].offset_by(next_flag[h] * 8);
                    next_flag[h] += 1;
                    w
                }
            };
            let flags: Vec<GlobalAddr> = (0..len).map(|_| new_flag(&mut rng)).collect();
            let words: Vec<GlobalAddr> = (0..1 + rng.below(3))
                .map(|_| {
                    let w = data.offset_by(rng.below(data_pages) * PAGE + next_data_word * 8);
                    next_data_word += 1;
                    w
                })
                .collect();
            // In edge mode, the writer is a thread 0 (right before its barrier) and the relays
            // and readers threads 1, lagging by a few reads: their steps straddle the edge.
            let pick = |rng: &mut Rng| (rng.below(u64::from(nodes)) as u16, rng.below(2) as usize);
            let pick_t1 = |rng: &mut Rng, c: &mut Cluster| {
                let n = rng.below(u64::from(nodes)) as u16;
                for _ in 0..rng.below(4) {
                    let w =
                        data.offset_by(rng.below(data_pages) * PAGE + (480 + rng.below(32)) * 8);
                    c.push(n, 1, Op::Read(w));
                }
                (n, 1usize)
            };
            let (wn, wt) = if edge {
                (pick(&mut rng).0, 0)
            } else {
                pick(&mut rng)
            };
            let pick =
                |rng: &mut Rng, c: &mut Cluster| if edge { pick_t1(rng, c) } else { pick(rng) };
            if debug {
                eprintln!("phase {phase}: writer n{wn}t{wt} words {words:?} flags {flags:?}");
            }
            for &w in &words {
                value += 1;
                c.push(wn, wt, Op::Write(w, value));
                if rng.chance(30) {
                    // An unrelated release between the writes (another interval).
                    let f = new_flag(&mut rng);
                    c.push(
                        wn,
                        wt,
                        Op::Atomic {
                            width: 8,
                            addr: f,
                            op: AtomicOp::FetchAdd(1),
                            order: AtomicOrder::RELEASE,
                        },
                    );
                }
            }
            // Some chains start through a condition variable: the first relay enters through
            // its grant (relayed through the atomics).
            let via_cv = (len >= 2 && rng.chance(35)).then(|| {
                next_cv += 1;
                CvId(next_cv)
            });
            let rel =
                |rng: &mut Rng| [AtomicOrder::RELEASE, AtomicOrder::ACQ_REL][rng.below(2) as usize];
            let acq =
                |rng: &mut Rng| [AtomicOrder::ACQUIRE, AtomicOrder::ACQ_REL][rng.below(2) as usize];
            let o = rel(&mut rng);
            let first = match via_cv {
                Some(cv) => Op::SetCv(cv),
                None => Op::Atomic {
                    width: 8,
                    addr: flags[0],
                    op: AtomicOp::FetchAdd(1),
                    order: o,
                },
            };
            c.push(wn, wt, first);
            for j in 1..len {
                let (rn, rt) = pick(&mut rng, &mut c);
                if debug {
                    eprintln!("  relay n{rn}t{rt}: {:?} -> {:?}", flags[j - 1], flags[j]);
                }
                let o = acq(&mut rng);
                let o2 = rel(&mut rng);
                if edge && rng.chance(50) {
                    // A relay on thread 0, past its barrier.
                    let enter = match via_cv {
                        Some(cv) if j == 1 => Op::WaitCv(cv),
                        _ => Op::AwaitAtomic {
                            width: 8,
                            addr: flags[j - 1],
                            at_least: 1,
                            order: o,
                        },
                    };
                    deferred.push((rn, enter));
                    deferred.push((
                        rn,
                        Op::Atomic {
                            width: 8,
                            addr: flags[j],
                            op: AtomicOp::FetchAdd(1),
                            order: o2,
                        },
                    ));
                    continue;
                }
                let enter = match via_cv {
                    Some(cv) if j == 1 => Op::WaitCv(cv),
                    _ => Op::AwaitAtomic {
                        width: 8,
                        addr: flags[j - 1],
                        at_least: 1,
                        order: o,
                    },
                };
                c.push(rn, rt, enter);
                if rng.chance(30) {
                    // Reads the data itself on the way.
                    for &w in &words {
                        c.push(rn, rt, Op::Read(w));
                    }
                }
                if rng.chance(30) {
                    // Writes one of the words again: the readers must see the newer value.
                    let w = words[rng.below(words.len() as u64) as usize];
                    value += 1;
                    c.push(rn, rt, Op::Write(w, value));
                }
                c.push(
                    rn,
                    rt,
                    Op::Atomic {
                        width: 8,
                        addr: flags[j],
                        op: AtomicOp::FetchAdd(1),
                        order: o2,
                    },
                );
            }
            for _ in 0..1 + rng.below(3) {
                let (rn, rt) = pick(&mut rng, &mut c);
                if debug {
                    eprintln!("  reader n{rn}t{rt}: {:?}", flags[len - 1]);
                }
                let o = acq(&mut rng);
                c.push(
                    rn,
                    rt,
                    Op::AwaitAtomic {
                        width: 8,
                        addr: flags[len - 1],
                        at_least: 1,
                        order: o,
                    },
                );
                for &w in &words {
                    c.push(rn, rt, Op::Read(w));
                }
            }
        }
        c.push_all(Op::Barrier);
        if debug {
            eprintln!("barrier");
        }
        for (n, op) in deferred.drain(..) {
            c.push(n, 0, op);
        }
    }
    c.run().map_err(|e| e.to_string())?;
    if let Some(v) = c.violations.first() {
        return Err(format!(
            "{} read {:#x} = {} but the reference says {} ({} violations)",
            v.node,
            v.addr.0,
            v.got,
            v.expected,
            c.violations.len()
        ));
    }
    Ok(())
}

#[test]
fn random_chains_with_threads_across_barriers_read_the_last_write() {
    let (base, cases) = seeds(0xC4A1_0000);
    let mut failed = Vec::new();
    for seed in base..base + cases {
        if let Err(e) = chain_case(seed) {
            eprintln!("seed {seed}: {e}");
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "{} failed: {failed:?}", failed.len());
}

// ----- relays of locks' and condition variables' grants (a review's) -----

/// A relay made while the relayer is in a barrier (its grant not come): the writer, already
/// past that barrier and in the window of the next (its other thread in it), writes data and
/// sets a condition variable (or unlocks a lock); the relayer's thread 1 takes the grant
/// (tagging the relay `epoch + 1`, one short of the write's `epoch + 2`) and releases X; the
/// reader, which cached the data before, acquires X past the next barrier (that barrier did
/// not name the page: written in its window) and reads the data.
/// Nodes: 0 barrier master, 1 writer, 2 relayer, 3 reader and X's home.
fn relay_in_barrier(seed: u64, through_lock: bool, delay: usize) -> Option<u64> {
    let mut c = Cluster::new(4, seed, |cfg| cfg.prefetch.enabled = false);
    let x = on(&mut c, 3, 1);
    let f = on(&mut c, 1, 1);
    let g = on(&mut c, 1, 1).offset_by(8);
    let data = on(&mut c, 0, 1).offset_by(64);
    c.set_threads(1, 2);
    c.set_threads(2, 2);
    c.barrier().unwrap();
    assert_eq!(c.read_u64(3, data).unwrap(), 0);
    let relaxed = AtomicOrder::RELAXED;
    c.push(0, 0, Op::Barrier);
    c.push(0, 0, Op::Barrier);
    c.push(1, 0, Op::Barrier);
    c.push(
        1,
        0,
        Op::Atomic {
            width: 8,
            addr: f,
            op: AtomicOp::Store(1),
            order: relaxed,
        },
    );
    c.push(1, 0, Op::Barrier);
    c.push(
        1,
        1,
        Op::AwaitAtomic {
            width: 8,
            addr: f,
            at_least: 1,
            order: relaxed,
        },
    );
    for _ in 0..delay {
        c.push(1, 1, Op::Read(f.offset_by(512)));
    }
    if through_lock {
        c.push(1, 1, Op::Lock(LockId(1)));
        c.push(1, 1, Op::Write(data, 42));
        c.push(1, 1, Op::Unlock(LockId(1)));
        c.push(
            1,
            1,
            Op::Atomic {
                width: 8,
                addr: g,
                op: AtomicOp::Store(1),
                order: relaxed,
            },
        );
        c.push(
            2,
            1,
            Op::AwaitAtomic {
                width: 8,
                addr: g,
                at_least: 1,
                order: relaxed,
            },
        );
        c.push(2, 1, Op::Lock(LockId(1)));
        c.push(2, 1, Op::Unlock(LockId(1)));
    } else {
        c.push(1, 1, Op::Write(data, 42));
        c.push(1, 1, Op::SetCv(CvId(1)));
        c.push(2, 1, Op::WaitCv(CvId(1)));
    }
    c.push(
        2,
        1,
        Op::Atomic {
            width: 8,
            addr: x,
            op: AtomicOp::Store(1),
            order: AtomicOrder::RELEASE,
        },
    );
    c.push(2, 0, Op::Barrier);
    c.push(2, 0, Op::Barrier);
    c.push(3, 0, Op::Barrier);
    c.push(3, 0, Op::Barrier);
    c.push(
        3,
        0,
        Op::AwaitAtomic {
            width: 8,
            addr: x,
            at_least: 1,
            order: AtomicOrder::ACQUIRE,
        },
    );
    c.push(3, 0, Op::Read(data));
    c.run().unwrap();
    c.reads[3].last().map(|&(_, v)| v)
}

#[test]
fn a_relay_made_in_a_barrier_is_tagged_past_the_writes_epoch() {
    let mut stale = Vec::new();
    for through_lock in [false, true] {
        for delay in [0, 8] {
            for seed in 0..150 {
                if relay_in_barrier(seed, through_lock, delay) != Some(42) {
                    stale.push((through_lock, delay, seed));
                }
            }
        }
    }
    assert!(stale.is_empty(), "{} stale: {stale:?}", stale.len());
}

/// `chain_across_a_barrier`, entering the relay through a lock: node 0 writes data node 2
/// caches under lock 1 and enters a barrier; node 1, past the barrier, takes lock 1 and
/// releases Y; node 2's thread 1 acquires Y while its thread 0 is still in the barrier and
/// reads the data. The lock's grant to node 1 leaves out pages of epochs before its own
/// (`notices_since(.., epoch, ..)`): its barrier invalidated them for itself, but it has
/// nothing to relay to node 2, which is not past that barrier yet.
fn lock_chain_across_a_barrier(seed: u64) -> Option<u64> {
    let mut c = Cluster::new(4, seed, |cfg| cfg.prefetch.enabled = false);
    let y = on(&mut c, 2, 1);
    let data = on(&mut c, 3, 1).offset_by(64);
    c.set_threads(2, 2);
    c.barrier().unwrap();
    assert_eq!(c.read_u64(2, data).unwrap(), 0);
    c.push(0, 0, Op::Lock(LockId(1)));
    c.push(0, 0, Op::Write(data, 42));
    c.push(0, 0, Op::Unlock(LockId(1)));
    c.push(0, 0, Op::Barrier);
    c.push(1, 0, Op::Barrier);
    c.push(1, 0, Op::Lock(LockId(1)));
    c.push(1, 0, Op::Unlock(LockId(1)));
    c.push(
        1,
        0,
        Op::Atomic {
            width: 8,
            addr: y,
            op: AtomicOp::Store(1),
            order: AtomicOrder::RELEASE,
        },
    );
    c.push(3, 0, Op::Barrier);
    c.push(2, 0, Op::Barrier);
    c.push(
        2,
        1,
        Op::AwaitAtomic {
            width: 8,
            addr: y,
            at_least: 1,
            order: AtomicOrder::ACQUIRE,
        },
    );
    c.push(2, 1, Op::Read(data));
    c.run().unwrap();
    c.reads[2].last().map(|&(_, v)| v)
}

#[test]
fn a_lock_chain_across_a_barrier_passes_on_the_writes_of_the_epoch_before() {
    let stale: Vec<u64> = (0..300)
        .filter(|&seed| lock_chain_across_a_barrier(seed) != Some(42))
        .collect();
    assert!(
        stale.is_empty(),
        "node 2 read stale data with seeds {stale:?}"
    );
}

/// Cost: every node takes a lock, writes its own word of a few shared pages, unlocks and does
/// an acq-rel fetch-add (libjia's hooks are acq-rel), `rounds` times. Bytes and pages fetched
/// per round must not grow with the rounds (relays going round would).
fn lock_atomic_rounds(rounds: u64) -> (u64, u64) {
    let mut c = Cluster::new(4, 5, |cfg| cfg.prefetch.enabled = false);
    let x = on(&mut c, 0, 1);
    let data = on(&mut c, 1, 4);
    c.barrier().unwrap();
    for n in 0..4u16 {
        for r in 0..rounds {
            c.push(n, 0, Op::Lock(LockId(u16::try_from(r % 2).unwrap())));
            for p in 0..4 {
                c.push(
                    n,
                    0,
                    Op::Write(data.offset_by(p * PAGE + u64::from(n) * 8), r),
                );
            }
            c.push(n, 0, Op::Unlock(LockId(u16::try_from(r % 2).unwrap())));
            c.push(
                n,
                0,
                Op::Atomic {
                    width: 8,
                    addr: x,
                    op: AtomicOp::FetchAdd(1),
                    order: AtomicOrder::ACQ_REL,
                },
            );
        }
    }
    c.run().unwrap();
    let s = c.total_stats();
    (c.bytes_sent(), s.pages_fetched)
}

#[test]
fn locks_and_atomics_in_rounds_cost_in_proportion_to_the_rounds() {
    let a = lock_atomic_rounds(25);
    let b = lock_atomic_rounds(100);
    assert!(b.0 < a.0 * 6 && b.1 < a.1 * 6, "{a:?} {b:?}");
}
