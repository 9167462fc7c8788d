//! Small programs with one data race each, and race-free ones beside them, for the race checker
//! (`dsmrun --check-races`; `tests/tests/races.rs`). `racy CASE` on 2 nodes. The two lines of
//! each race are marked `// race: CASE` (the test reads them from this file); race-free cases
//! are named `free-*`.

use dsm_runtime::{AllocPolicy, Dsm, NodeId, SharedArray};

fn main() {
    let case = std::env::args().nth(1).unwrap_or_default();
    let dsm = dsm_runtime::init().expect("join the job");
    let a: SharedArray<u64> = dsm
        .alloc(1024, AllocPolicy::OnNode(NodeId(0)))
        .expect("allocate");
    dsm.barrier();
    run(&dsm, &case, &a);
    dsm.barrier();
    dsm.exit();
}

/// Rounds of the cases that repeat a pattern to meet its rare interleavings.
const ROUNDS: usize = 300;

fn run(dsm: &Dsm, case: &str, a: &SharedArray<u64>) {
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
    let me = dsm.id();
    match case {
        "write-write" => {
            a.set(0, me as u64); // race: write-write
        }
        "read-write" => {
            if me == 0 {
                a.set(1, 7); // race: read-write
            } else {
                std::hint::black_box(a.get(1)); // race: read-write
            }
        }
        "one-side-locked" => {
            if me == 0 {
                let _g = dsm.lock(1);
                a.set(2, 1); // race: one-side-locked
            } else {
                a.set(2, 2); // race: one-side-locked
            }
        }
        "two-locks" => {
            let _g = dsm.lock(1 + me as u16);
            a.set(3, a.get(3) + 1); // race: two-locks
        }
        "cv-before-write" => {
            if me == 0 {
                dsm.setcv(0);
                a.set(4, 9); // race: cv-before-write
            } else {
                dsm.waitcv(0);
                std::hint::black_box(a.get(4)); // race: cv-before-write
            }
        }
        "relaxed-flag" => {
            // A flag set and awaited with relaxed atomics orders nothing else.
            let flag = dsm.atomic_u64(*a, 1000);
            if me == 0 {
                a.set(6, 9); // race: relaxed-flag
                flag.store(1, Relaxed);
            } else {
                while flag.load(Relaxed) == 0 {}
                std::hint::black_box(a.get(6)); // race: relaxed-flag
            }
        }
        "fence-one-side" => {
            // A release fence before a relaxed store, but no acquire fence after the relaxed
            // load that sees it: nothing orders the read.
            let flag = dsm.atomic_u64(*a, 1003);
            if me == 0 {
                a.set(8, 9); // race: fence-one-side
                dsm.fence(Release);
                flag.store(1, Relaxed);
            } else {
                while flag.load(Relaxed) == 0 {}
                std::hint::black_box(a.get(8)); // race: fence-one-side
            }
        }
        "halo-without-barrier" => {
            // Each node relaxes its half of a line; the halo cell is read before the barrier
            // that would have ordered the neighbour's write.
            let (lo, hi) = (me * 512, me * 512 + 512);
            for i in lo..hi {
                a.set(i, i as u64); // race: halo-without-barrier
            }
            let halo = if me == 0 { hi } else { lo - 1 };
            std::hint::black_box(a.get(halo)); // race: halo-without-barrier
        }
        "letter-between" => {
            if me == 0 {
                a.set(5, 5); // race: letter-between
                dsm.send(1, 3, b"go");
            } else {
                let _ = dsm.recv(Some(0), Some(3));
                std::hint::black_box(a.get(5)); // race: letter-between
            }
        }
        "threads-of-a-node" => {
            if me == 0 {
                std::thread::scope(|s| {
                    s.spawn(|| a.set(6, 1)); // race: threads-of-a-node
                    s.spawn(|| a.set(6, 2)); // race: threads-of-a-node
                });
            }
        }
        "slice-write-write" => {
            // SAFETY: no other thread of this node touches these elements while it lives (the
            // race is between the nodes, on purpose).
            let mut row = unsafe { a.slice_mut(8..16) }; // race: slice-write-write
            row[2] = me as u64 + 1;
        }
        "read-from" => {
            if me == 0 {
                let bytes = [1u8; 8];
                a.read_from(8..9, &mut &bytes[..]).expect("read_from"); // race: read-from
            } else {
                std::hint::black_box(a.get(8)); // race: read-from
            }
        }
        "slice-read" => {
            // Seen in a build for the checker (`cargo dsm-races`): a read through a slice.
            if me == 0 {
                a.set(40, 1); // race (cargo dsm-races): slice-read
            } else {
                // SAFETY: racy on purpose, between the nodes; nothing else writes the row.
                let row = unsafe { a.slice(40..48) };
                std::hint::black_box(row.iter().sum::<u64>()); // race (cargo dsm-races): slice-read
            }
        }
        "threads-past-64" => {
            // 100 threads of node 0 alive at once, numbered by the checker in the order of
            // their first access (each waits for its turn, which std's atomics order for the
            // program but not for the checker); threads 80 and 90 alone touch element 600's
            // page, with no synchronisation between them.
            if me == 0 {
                let turn = std::sync::atomic::AtomicUsize::new(0);
                let done = std::sync::Barrier::new(100);
                std::thread::scope(|s| {
                    for k in 0..100 {
                        let (turn, done) = (&turn, &done);
                        s.spawn(move || {
                            while turn.load(Acquire) != k {
                                std::thread::yield_now();
                            }
                            a.set(200 + k, 1);
                            turn.store(k + 1, Release);
                            done.wait();
                            if k == 80 {
                                a.set(600, 1); // race: threads-past-64
                            } else if k == 90 {
                                a.set(600, 2); // race: threads-past-64
                            }
                        });
                    }
                });
            }
        }
        "free-hundreds-of-threads" => {
            // 300 threads on each node at once write their own element, meet in one barrier of
            // every node's threads, and read another node's thread's element.
            let threads = 300;
            std::thread::scope(|s| {
                for t in 0..threads {
                    s.spawn(move || {
                        a.set(me * threads + t, (me * threads + t) as u64);
                        dsm.barrier_threads(threads);
                        let other = (1 - me) * threads + (t + 1) % threads;
                        assert_eq!(a.get(other), other as u64);
                    });
                }
            });
        }
        "free-many-threads" => {
            // 20 rounds of 4 scoped threads (never more than 4 at once), each writing its own
            // element: 80 threads in all on node 0.
            if me == 0 {
                for p in 0..20 {
                    std::thread::scope(|s| {
                        for t in 0..4 {
                            s.spawn(move || a.set(16 + p * 4 + t, 1));
                        }
                    });
                }
            }
        }
        "free-helper-locks" => {
            // A helper thread per node increments an element under lock 1 in a loop while the
            // node's main thread runs barriers: nodes pass each barrier at different moments,
            // and a helper may take the lock from a node already past the next one.
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let _g = dsm.lock(1);
                        a.set(100, a.get(100) + 1);
                    }
                });
                for _ in 0..500 {
                    dsm.barrier();
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
        "free-atomic-flag" => {
            // Published with a release store, read after the acquire load that sees it; the
            // counter's fetch-adds, atomics all, never race with each other.
            let (flag, count) = (dsm.atomic_u64(*a, 1001), dsm.atomic_u64(*a, 1002));
            count.fetch_add(1, Relaxed);
            if me == 0 {
                a.set(7, 9);
                flag.store(1, Release);
            } else {
                while flag.load(Acquire) == 0 {}
                std::hint::black_box(a.get(7));
            }
            count.fetch_add(1, AcqRel);
        }
        "free-fences" => {
            // A relaxed flag between a release fence and an acquire fence (`Dsm::fence`)
            // publishes what came before the first.
            let flag = dsm.atomic_u64(*a, 1004);
            if me == 0 {
                a.set(9, 9);
                dsm.fence(Release);
                flag.store(1, Relaxed);
            } else {
                while flag.load(Relaxed) == 0 {}
                dsm.fence(Acquire);
                assert_eq!(a.get(9), 9, "free-fences: node {me} read an old value");
            }
        }
        "lock-chain" => {
            // Scope consistency: node 1 takes lock 1 after node 0 released it, then releases
            // lock 2; node 2, which takes lock 2 only, is not ordered after node 0's write (the
            // DSM passes no notices on). Relaxed flags only keep the steps in this order.
            let (go1, go2) = (dsm.atomic_u64(*a, 1003), dsm.atomic_u64(*a, 1004));
            match me {
                0 => {
                    {
                        let _g = dsm.lock(1);
                        a.set(9, 42); // race (3 nodes): lock-chain
                    }
                    go1.store(1, Relaxed);
                }
                1 => {
                    while go1.load(Relaxed) == 0 {}
                    drop(dsm.lock(1));
                    drop(dsm.lock(2));
                    go2.store(1, Relaxed);
                }
                _ => {
                    while go2.load(Relaxed) == 0 {}
                    let _g = dsm.lock(2);
                    std::hint::black_box(a.get(9)); // race (3 nodes): lock-chain
                }
            }
        }
        "cv-chain" => {
            // The same through condition variables: 0 sets 1, 1 waits on 1 and sets 2, 2 waits
            // on 2 and reads what 0 wrote.
            match me {
                0 => {
                    a.set(10, 42); // race (3 nodes): cv-chain
                    dsm.setcv(1);
                }
                1 => {
                    dsm.waitcv(1);
                    dsm.setcv(2);
                }
                _ => {
                    dsm.waitcv(2);
                    std::hint::black_box(a.get(10)); // race (3 nodes): cv-chain
                }
            }
        }
        "free-atomic-chain" => {
            // The same through atomic words of two homes: node 0 writes and releases flag 1,
            // node 1 acquires it and releases flag 2, node 2 acquires that and reads. Ordered,
            // as C11 orders it: node 1's release passes on the write its acquire made it see.
            let go1: SharedArray<u64> = dsm
                .alloc(512, AllocPolicy::OnNode(NodeId(1)))
                .expect("allocate");
            let go2: SharedArray<u64> = dsm
                .alloc(512, AllocPolicy::OnNode(NodeId(2)))
                .expect("allocate");
            // Node 2 holds a copy of the data before it is written.
            std::hint::black_box(a.get(11));
            dsm.barrier();
            let (go1, go2) = (dsm.atomic_u64(go1, 0), dsm.atomic_u64(go2, 0));
            match me {
                0 => {
                    a.set(11, 42);
                    go1.store(1, Release);
                }
                1 => {
                    while go1.load(Acquire) == 0 {}
                    go2.store(1, Release);
                }
                _ => {
                    while go2.load(Acquire) == 0 {}
                    let got = a.get(11);
                    if got != 42 {
                        eprintln!("free-atomic-chain: node 2 read {got}, not 42");
                        std::process::exit(1);
                    }
                }
            }
        }
        "free-lock-then-atomic-chain" => {
            // A chain that enters node 1 through a lock and leaves it through an atomic word:
            // node 1 takes lock 1 after node 0 released it, then releases an atomic word; node
            // 2 acquires that word and reads what node 0 wrote. Ordered, as C11 orders it (node
            // 1 passes on what the lock's grant named). A relaxed flag keeps the steps in order.
            let go1 = dsm.atomic_u64(*a, 1003);
            let go2: SharedArray<u64> = dsm
                .alloc(512, AllocPolicy::OnNode(NodeId(2)))
                .expect("allocate");
            // Node 2 holds a copy of the data before it is written.
            std::hint::black_box(a.get(12));
            dsm.barrier();
            let go2 = dsm.atomic_u64(go2, 0);
            match me {
                0 => {
                    {
                        let _g = dsm.lock(1);
                        a.set(12, 42);
                    }
                    go1.store(1, Relaxed);
                }
                1 => {
                    while go1.load(Relaxed) == 0 {}
                    drop(dsm.lock(1));
                    go2.store(1, Release);
                }
                _ => {
                    while go2.load(Acquire) == 0 {}
                    let got = a.get(12);
                    if got != 42 {
                        eprintln!("free-lock-then-atomic-chain: node 2 read {got}, not 42");
                        std::process::exit(1);
                    }
                }
            }
        }
        "atomic-then-lock-chain" => {
            // The other way round: an unlock passes on its node's own writes only (JIAJIA's
            // scope consistency), so a chain that leaves node 1 through a lock is not ordered.
            let go1: SharedArray<u64> = dsm
                .alloc(512, AllocPolicy::OnNode(NodeId(1)))
                .expect("allocate");
            let go2 = dsm.atomic_u64(*a, 1004);
            dsm.barrier();
            let go1 = dsm.atomic_u64(go1, 0);
            match me {
                0 => {
                    a.set(13, 42); // race (3 nodes): atomic-then-lock-chain
                    go1.store(1, Release);
                }
                1 => {
                    while go1.load(Acquire) == 0 {}
                    drop(dsm.lock(1));
                    go2.store(1, Relaxed);
                }
                _ => {
                    while go2.load(Relaxed) == 0 {}
                    let _g = dsm.lock(1);
                    std::hint::black_box(a.get(13)); // race (3 nodes): atomic-then-lock-chain
                }
            }
        }
        "free-lock-chain" => {
            // A chain through one lock is ordered: its manager gathers every holder's notices.
            let (go1, go2) = (dsm.atomic_u64(*a, 1003), dsm.atomic_u64(*a, 1004));
            match me {
                0 => {
                    {
                        let _g = dsm.lock(1);
                        a.set(9, 42);
                    }
                    go1.store(1, Relaxed);
                }
                1 => {
                    while go1.load(Relaxed) == 0 {}
                    drop(dsm.lock(1));
                    go2.store(1, Relaxed);
                }
                _ => {
                    while go2.load(Relaxed) == 0 {}
                    let _g = dsm.lock(1);
                    assert_eq!(a.get(9), 42);
                }
            }
        }
        "free-chain-in-a-node" => {
            // Node 1's first thread takes lock 1 after node 0 wrote under it and releases lock
            // 2; its second thread takes lock 2 and reads: the node's own memory carries what
            // the first learned.
            let go = dsm.atomic_u64(*a, 1003);
            if me == 0 {
                {
                    let _g = dsm.lock(1);
                    a.set(11, 42);
                }
                go.store(1, Relaxed);
            } else if me == 1 {
                while go.load(Relaxed) == 0 {}
                let taken = std::sync::atomic::AtomicBool::new(false);
                std::thread::scope(|s| {
                    s.spawn(|| {
                        drop(dsm.lock(1));
                        drop(dsm.lock(2));
                        taken.store(true, Release);
                    });
                    s.spawn(|| {
                        while !taken.load(Acquire) {
                            std::hint::spin_loop();
                        }
                        let _g = dsm.lock(2);
                        assert_eq!(a.get(11), 42);
                    });
                });
            }
        }
        "free-lock" => {
            let _g = dsm.lock(1);
            a.set(3, a.get(3) + 1);
        }
        "free-cv" => {
            if me == 0 {
                a.set(4, 9);
                dsm.setcv(0);
            } else {
                dsm.waitcv(0);
                std::hint::black_box(a.get(4));
            }
        }
        "free-false-sharing" => {
            a.set(me, 1);
        }
        "free-slices-of-one-row" => {
            // Both nodes take the same row as a mutable slice; node 0 changes its even elements,
            // node 1 its odd ones (red-black SOR's pattern): different bytes, no race.
            // SAFETY: as above.
            let mut row = unsafe { a.slice_mut(16..32) };
            for x in row.iter_mut().skip(me).step_by(2) {
                *x += 1;
            }
        }
        "free-slices-while-diffs-come" => {
            // Node 0, the row's home, takes and drops slices of a row again and again while
            // node 1 changes its colour of the row and releases it, time after time: its diffs
            // come in while node 0 holds a slice, takes one or drops one (a guard dropped
            // while a diff was applied once claimed the diff's bytes as its own).
            let done = dsm.atomic_u64(*a, 1005);
            let mut round = 0;
            while if me == 0 {
                done.load(Relaxed) == 0 && round < 100 * ROUNDS
            } else {
                round < ROUNDS
            } {
                // SAFETY: each node changes only its colour of the row.
                let mut row = unsafe { a.slice_mut(128..256) };
                for x in row.iter_mut().skip(me).step_by(2) {
                    *x += 1;
                }
                drop(row);
                if me == 1 {
                    drop(dsm.lock(3));
                }
                round += 1;
            }
            if me == 1 {
                done.store(1, Relaxed);
            }
        }
        "free-red-black-reads" => {
            // Node 0 reads a row's even elements through a slice while node 1 writes its odd
            // ones (red-black SOR's pattern): different bytes, no race, in a build for the
            // checker too (it sees the elements read, not the whole slice).
            if me == 0 {
                // SAFETY: node 1 writes only the odd elements, which this loop does not read.
                let row = unsafe { a.slice(48..64) };
                std::hint::black_box(row.iter().step_by(2).sum::<u64>());
            } else {
                // SAFETY: as above.
                let mut row = unsafe { a.slice_mut(48..64) };
                for x in row.iter_mut().skip(1).step_by(2) {
                    *x = 5;
                }
            }
        }
        "free-guard-across-barriers" => {
            // Node 0's guard stays in scope across two barriers, after which node 1 writes its
            // elements: what node 1 wrote is not node 0's write when the guard is dropped.
            // SAFETY: node 0 alone touches elements 32..40 until the first barrier, and not
            // through the guard after it.
            let mut row = (me == 0).then(|| unsafe { a.slice_mut(32..40) });
            if let Some(row) = row.as_mut() {
                row.fill(3);
            }
            dsm.barrier();
            if me == 1 {
                for i in 32..40 {
                    a.set(i, 4);
                }
            }
            dsm.barrier();
            std::hint::black_box(a.get(33));
            drop(row);
        }
        "free-guard-home-incoming" => {
            // Node 0, the array's home, holds a guard over elements 16..24 and writes 16, then
            // 17 under lock 1. Node 1 writes 20 under lock 1 and tells node 0 by a letter: its
            // diff reaches the home first and changes the guarded bytes in place. That is not
            // node 0's write.
            if me == 1 {
                {
                    let _held = dsm.lock(1);
                    a.set(20, 55);
                }
                dsm.send(0, 7, b"done");
            } else {
                // SAFETY: node 0 writes elements 16 and 17 alone; node 1's write of 20 is
                // ordered before node 0's acquire of lock 1.
                let mut row = unsafe { a.slice_mut(16..24) };
                row[0] = 1;
                let _ = dsm.recv(Some(1), Some(7));
                {
                    let _held = dsm.lock(1);
                    row[1] = 2;
                }
                drop(row);
            }
        }
        "free-slices-home-last" => {
            // Both nodes change their colour of one row through a guard (red-black SOR's
            // pattern); node 0, the row's home, changes its own after node 1's diff came in
            // (node 1 releases under lock 2 and tells it by a letter).
            // SAFETY: each node changes only its colour of the row.
            let mut row = unsafe { a.slice_mut(64..128) };
            if me == 0 {
                let _ = dsm.recv(Some(1), Some(8));
            }
            for x in row.iter_mut().skip(me).step_by(2) {
                *x += 1;
            }
            if me == 1 {
                drop(row);
                drop(dsm.lock(2));
                dsm.send(0, 8, b"done");
            }
        }
        "free-barrier" => {
            if me == 0 {
                a.set(5, 5);
            }
            dsm.barrier();
            std::hint::black_box(a.get(5));
        }
        other => {
            eprintln!("racy: unknown case `{other}`");
            std::process::exit(2);
        }
    }
}
