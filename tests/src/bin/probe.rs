//! probe: small DSM programs that exercise one runtime behaviour each, for the multi-process
//! tests. `probe CASE`; each case checks its own results and exits non-zero when wrong.

use std::sync::atomic::{AtomicUsize, Ordering};

use dsm_runtime::{AllocPolicy, Dsm, NodeId, PAGE_SIZE, ReduceOp, SharedArray};

const WORDS: usize = PAGE_SIZE / 8;

/// `pages` pages per node, node i's block homed at node i.
fn blocks_per_node(dsm: &Dsm, pages: usize) -> SharedArray<u64> {
    let policy = AllocPolicy::Cyclic {
        block_bytes: (pages * PAGE_SIZE) as u64,
        start: NodeId(0),
    };
    dsm.alloc(dsm.nodes() * pages * WORDS, policy)
        .expect("allocate the blocks")
}

/// [`blocks_per_node`], each node's block filled with `value(word index)`, then a barrier.
fn filled_blocks(dsm: &Dsm, pages: usize, value: impl Fn(usize) -> u64) -> SharedArray<u64> {
    let a = blocks_per_node(dsm, pages);
    let me = dsm.id();
    for i in me * pages * WORDS..(me + 1) * pages * WORDS {
        a.set(i, value(i));
    }
    dsm.barrier();
    a
}

fn check(dsm: &Dsm, ok: bool, what: &str) {
    if !ok {
        dsm.error(&format!("check failed: {what}"));
    }
}

/// Every node writes its own pages; after a barrier every node reads every page.
fn faults(dsm: &Dsm) {
    let (me, n) = (dsm.id(), dsm.nodes());
    let pages = 4;
    let a = filled_blocks(dsm, pages, |i| (i * 3 + 1) as u64);
    for i in 0..a.len() {
        check(dsm, a.get(i) == (i * 3 + 1) as u64, &format!("word {i}"));
    }
    dsm.barrier();
    // Now that others hold copies, writes to home pages must be seen (and counted).
    for i in me * pages * WORDS..(me + 1) * pages * WORDS {
        a.set(i, (i * 3 + 2) as u64);
    }
    dsm.barrier();
    for i in 0..a.len() {
        check(
            dsm,
            a.get(i) == (i * 3 + 2) as u64,
            &format!("word {i} after rewrite"),
        );
    }
    let s = dsm.stats().core;
    check(
        dsm,
        n == 1 || s.read_faults_remote > 0,
        "remote read faults counted",
    );
    check(
        dsm,
        n == 1 || s.write_faults_local >= pages as u64,
        "home write faults counted",
    );
    dsm.barrier();
    if me == 0 {
        println!("faults OK");
    }
}

/// Nodes 1.. write disjoint words of one page homed at node 0 in the same interval.
fn diffs(dsm: &Dsm) {
    let (me, n) = (dsm.id(), dsm.nodes());
    let a: SharedArray<u64> = dsm.alloc(WORDS, AllocPolicy::OnNode(NodeId(0))).unwrap();
    dsm.barrier();
    for i in (me..WORDS).step_by(n) {
        a.set(i, (1000 + i) as u64);
    }
    dsm.barrier();
    for i in 0..WORDS {
        check(
            dsm,
            a.get(i) == (1000 + i) as u64,
            &format!("merged word {i}"),
        );
    }
    if me == 0 {
        check(
            dsm,
            dsm.stats().core.diffs_applied >= (n - 1) as u64,
            "one diff per writer applied at the home",
        );
        println!("diffs OK");
    }
    dsm.barrier();
}

/// A counter incremented under a lock by every node.
fn counter(dsm: &Dsm) {
    let rounds = 200;
    let c: SharedArray<u64> = dsm
        .alloc(1, AllocPolicy::OnNode(NodeId(dsm.nodes() as u16 - 1)))
        .unwrap();
    dsm.barrier();
    for _ in 0..rounds {
        let _g = dsm.lock(3);
        c.set(0, c.get(0) + 1);
    }
    dsm.barrier();
    check(
        dsm,
        c.get(0) == (rounds * dsm.nodes()) as u64,
        &format!("counter = {}", c.get(0)),
    );
    if dsm.id() == 0 {
        println!("counter OK {}", c.get(0));
    }
    dsm.barrier();
}

/// Node 0 publishes a value and sets a condition variable; the others wait on it.
fn cv(dsm: &Dsm) {
    let a: SharedArray<u64> = dsm
        .alloc(WORDS * 2, AllocPolicy::OnNode(NodeId(0)))
        .unwrap();
    dsm.barrier();
    if dsm.id() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        a.set(3, 4242);
        dsm.setcv(2);
    } else {
        dsm.waitcv(2);
        check(dsm, a.get(3) == 4242, "the value written before setcv");
    }
    dsm.barrier();
    if dsm.id() == 0 {
        dsm.resetcv(2);
        println!("cv OK");
    }
    dsm.barrier();
}

/// Reads far more remote pages than the cache holds, twice, and writes some.
fn evict(dsm: &Dsm) {
    let (me, n) = (dsm.id(), dsm.nodes());
    let pages = 64;
    let a = filled_blocks(dsm, pages, |i| i as u64);
    // Each node also writes one word in each page of the next node's block, under a lock.
    let next = (me + 1) % n;
    {
        let _g = dsm.lock(1);
        for p in 0..pages {
            let i = (next * pages + p) * WORDS + 1 + me;
            a.set(i, 7_000_000 + i as u64);
        }
    }
    dsm.barrier();
    for _ in 0..2 {
        for i in 0..a.len() {
            let w = i % WORDS;
            let owner_block = i / (pages * WORDS);
            let writer = (owner_block + n - 1) % n;
            let expect = if w == 1 + writer {
                7_000_000 + i as u64
            } else {
                i as u64
            };
            check(
                dsm,
                a.get(i) == expect,
                &format!("word {i}: {} != {expect}", a.get(i)),
            );
        }
    }
    let s = dsm.stats().core;
    check(dsm, n == 1 || s.evictions > 0, "a small cache evicts");
    if me == 0 {
        println!("evict OK evictions={}", s.evictions);
    }
    dsm.barrier();
}

/// Pages of node 0 read by the other nodes through each change a cached page goes through
/// (`same_host = map` shows them from node 0's memory): read while node 0 keeps writing
/// another word of them, then written beside those writes (false sharing: a twin and the
/// writes must start from the same bytes, or the writer's diff carries node 0's word back,
/// older), invalidated at each barrier, evicted by a small cache (run with `cache_pages` below
/// the pages), and moved home to their one writer (the last node's own pages). Prints the
/// pages this node showed from their home's memory.
fn shown(dsm: &Dsm) {
    let (me, n) = (dsm.id(), dsm.nodes());
    let pages = 1024;
    let moving = 64;
    let a: SharedArray<u64> = dsm
        .alloc(pages * WORDS, AllocPolicy::OnNode(NodeId(0)))
        .unwrap();
    // Written by the last node alone: their home moves to it.
    let b: SharedArray<u64> = dsm
        .alloc(moving * WORDS, AllocPolicy::OnNode(NodeId(0)))
        .unwrap();
    let val = |round: usize, writer: usize, page: usize| {
        ((round + 1) * 1_000_000 + writer * 1000 + page) as u64
    };
    dsm.barrier();
    for round in 0..6 {
        if me == 0 {
            // Word 0 of every page, again and again while the others read and write theirs.
            for pass in (0..8).rev() {
                for p in 0..pages {
                    a.set(p * WORDS, val(round, 0, p) + pass);
                }
            }
        } else {
            for p in 0..pages {
                // Read first (the page shown), then write beside node 0's word.
                check(dsm, a.get(p * WORDS + me) != u64::MAX, "a read");
                a.set(p * WORDS + me, val(round, me, p));
            }
        }
        if me == n - 1 {
            for p in 0..moving {
                b.set(p * WORDS + 1, val(round, me, p));
            }
        }
        dsm.barrier();
        for p in 0..pages {
            for w in 0..n {
                let got = a.get(p * WORDS + w);
                check(
                    dsm,
                    got == val(round, w, p),
                    &format!(
                        "round {round}: page {p} word {w}: {got} != {}",
                        val(round, w, p)
                    ),
                );
            }
        }
        for p in 0..moving {
            let got = b.get(p * WORDS + 1);
            let want = val(round, n - 1, p);
            check(
                dsm,
                got == want,
                &format!("round {round}: moving page {p}: {got} != {want}"),
            );
        }
        dsm.barrier();
    }
    let s = dsm.stats();
    println!(
        "shown OK node={me} shown={} evictions={}",
        s.runtime.pages_shown_in_place, s.core.evictions
    );
    dsm.barrier();
}

/// Lines of this process's `/proc/self/maps`: the kernel's mappings it holds.
fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// Node 0 reads 8,192 pages homed on node 1 (shown from its memory under `same_host = map`),
/// then writes a word of every other page of a quarter of them, a different quarter each
/// round; both check every written word after a barrier. Node 0 says how many of the kernel's
/// mappings it holds at the most after a round's reads: pages made its own one at a time among
/// shown ones left two mappings each, round after round.
fn shown_writes(dsm: &Dsm) {
    let me = dsm.id();
    let pages = 8192;
    let band = pages / 4;
    let a: SharedArray<u64> = dsm
        .alloc(pages * WORDS, AllocPolicy::OnNode(NodeId(1)))
        .unwrap();
    if me == 1 {
        for p in 0..pages {
            a.set(p * WORDS, p as u64);
        }
    }
    dsm.barrier();
    let mut most = 0;
    for round in 0..4 {
        if me == 0 {
            for p in 0..pages {
                let got = a.get(p * WORDS);
                check(
                    dsm,
                    got == p as u64,
                    &format!("round {round}: page {p}: {got}"),
                );
            }
            most = most.max(mappings());
            for p in (round * band..(round + 1) * band).step_by(2) {
                a.set(p * WORDS + 1, (round * pages + p) as u64);
            }
        }
        dsm.barrier();
        for p in 0..pages {
            let want = if p % 2 == 0 && p / band <= round {
                (p / band * pages + p) as u64
            } else {
                0
            };
            let got = a.get(p * WORDS + 1);
            check(
                dsm,
                got == want,
                &format!("round {round}: page {p}: word 1 {got} != {want}"),
            );
        }
        dsm.barrier();
    }
    let s = dsm.stats();
    println!(
        "shown-writes OK node={me} mappings={most} shown={}",
        s.runtime.pages_shown_in_place
    );
    dsm.barrier();
}

/// Node 1's threads read 4,096 pages homed on node 0 (shown from its memory under
/// `same_host = map`) over and over while one of them writes a word of every eighth page:
/// each write makes its block the node's own under the readers' feet (their pages closed and
/// opened again, or left for the core to open at their next fault). Every read must see the
/// home's word and no thread may fault for ever; node 0 checks the written words.
fn shown_threads(dsm: &Dsm) {
    const READERS: usize = 3;
    let me = dsm.id();
    let pages = 4096;
    let a: SharedArray<u64> = dsm
        .alloc(pages * WORDS, AllocPolicy::OnNode(NodeId(0)))
        .unwrap();
    if me == 0 {
        for p in 0..pages {
            a.set(p * WORDS, !(p as u64));
        }
    }
    dsm.barrier();
    if me == 1 {
        let bad = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..READERS {
                let bad = &bad;
                s.spawn(move || {
                    for pass in 0..4 {
                        // Each reader starts elsewhere, so they meet the writer everywhere.
                        for k in 0..pages {
                            let p = (k + (t * 7 + pass) * pages / 16) % pages;
                            if a.get(p * WORDS) != !(p as u64) {
                                bad.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
            for p in (0..pages).step_by(8) {
                a.set(p * WORDS + 1, p as u64 + 1);
            }
        });
        check(
            dsm,
            bad.load(Ordering::Relaxed) == 0,
            "reads beside blocks made own",
        );
    }
    dsm.barrier();
    if me == 0 {
        for p in 0..pages {
            let want = if p % 8 == 0 { p as u64 + 1 } else { 0 };
            let got = a.get(p * WORDS + 1);
            check(
                dsm,
                got == want,
                &format!("page {p}: word 1 {got} != {want}"),
            );
        }
    }
    let s = dsm.stats();
    println!(
        "shown-threads OK node={me} shown={}",
        s.runtime.pages_shown_in_place
    );
    dsm.barrier();
}

/// Two threads of each node fault on remote pages at once (same and different pages).
fn threads(dsm: &Dsm) {
    let me = dsm.id();
    let pages = 32;
    let a = filled_blocks(dsm, pages, |i| !(i as u64));
    let bad = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..2 {
            let bad = &bad;
            s.spawn(move || {
                // Thread 0 walks forwards, thread 1 backwards: they meet on the same pages.
                let len = a.len();
                for k in 0..len {
                    let i = if t == 0 { k } else { len - 1 - k };
                    if a.get(i) != !(i as u64) {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    check(
        dsm,
        bad.load(Ordering::Relaxed) == 0,
        "values read by two threads",
    );
    dsm.barrier();
    if me == 0 {
        println!("threads OK");
    }
}

/// 1,200 short-lived threads per node, two alive at a time, each faulting on remote pages and
/// taking a lock: more threads over the node's life than it has slots, which are reused once
/// their threads end. The lock-protected count must come out exact.
fn many_threads(dsm: &Dsm) {
    const THREADS: usize = 1200;
    let n = dsm.nodes();
    let a = filled_blocks(dsm, 8, |i| i as u64);
    let count: SharedArray<u64> = dsm.alloc(1, AllocPolicy::OnNode(NodeId(0))).unwrap();
    dsm.barrier();
    let bad = AtomicUsize::new(0);
    for round in 0..THREADS / 2 {
        std::thread::scope(|s| {
            for t in 0..2 {
                let bad = &bad;
                s.spawn(move || {
                    let i = (round * 2 + t) * 97 % a.len();
                    if a.get(i) != i as u64 {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                    let _g = dsm.lock(3);
                    count.set(0, count.get(0) + 1);
                });
            }
        });
    }
    dsm.barrier();
    let total = count.get(0);
    check(
        dsm,
        bad.load(Ordering::Relaxed) == 0 && total == (THREADS * n) as u64,
        &format!("{total} increments by {THREADS} threads on each of {n} nodes"),
    );
    dsm.barrier();
    if dsm.id() == 0 {
        println!("many-threads OK {total}");
    }
}

/// Atomics of 1 and 2 bytes from two threads of every node, on one page homed on node 1: a
/// spin lock of one byte (compare-exchange with acquire, store with release) around a plain
/// counter, four byte counters and a `u16` that wraps, with plain bytes written by every node
/// in the same 8-byte word as the counters (diffs are byte-exact, so none undoes an operation).
fn small_atomics(dsm: &Dsm) {
    const THREADS: usize = 2;
    const ROUNDS: usize = 200;
    let (me, n) = (dsm.id(), dsm.nodes());
    let bytes: SharedArray<u8> = dsm.alloc(4096, AllocPolicy::OnNode(NodeId(1))).unwrap();
    let shorts: SharedArray<u16> = dsm.alloc(2048, AllocPolicy::OnNode(NodeId(0))).unwrap();
    let count: SharedArray<u64> = dsm.alloc(512, AllocPolicy::OnNode(NodeId(0))).unwrap();
    dsm.barrier();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let lock = dsm.atomic_u8(bytes, 16);
                for i in 0..ROUNDS {
                    while lock
                        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {}
                    count.set(0, count.get(0) + 1);
                    lock.store(0, Ordering::Release);
                    dsm.atomic_u8(bytes, i % 4).fetch_add(1, Ordering::Relaxed);
                    dsm.atomic_u16(shorts, 1).fetch_add(1000, Ordering::AcqRel);
                }
                dsm.barrier_threads(THREADS);
                if t == 0 && me < 4 {
                    bytes.set(4 + me, 0xA0 + me as u8);
                }
            });
        }
    });
    dsm.barrier();
    let rounds = THREADS * ROUNDS * n;
    let counters: Vec<u8> = (0..4).map(|k| bytes.get(k)).collect();
    let plain_ok = (0..n.min(4)).all(|k| bytes.get(4 + k) == 0xA0 + k as u8);
    let wrapped = (rounds as u64 * 1000 % 65536) as u16;
    check(
        dsm,
        count.get(0) == rounds as u64
            && counters.iter().all(|&c| usize::from(c) == rounds / 4 % 256)
            && shorts.get(1) == wrapped
            && plain_ok,
        &format!(
            "locked count {} of {rounds}, byte counters {counters:?} (each {}), u16 {} (want \
             {wrapped}), plain bytes beside them kept: {plain_ok}",
            count.get(0),
            rounds / 4 % 256,
            shorts.get(1)
        ),
    );
    dsm.barrier();
    if me == 0 {
        println!("small-atomics OK {rounds}");
    }
}

/// Data published through relaxed atomics and fences (`Dsm::fence`): each round node 0 writes
/// a word of a page node 2 caches (homed on node 1), makes a release fence and stores the round
/// into a flag homed on node 1 with relaxed order (with `rmw`: a relaxed fetch-add to a word of
/// node 2's, then two to the flag, the second not a release); node 2 waits for the round with
/// relaxed loads (with `many`, after relaxed loads of 40 other words, more than a thread's
/// list of the words it read keeps: the fence acquires from every home),
/// makes an acquire fence and reads the word: C11 orders the write before the read. Node 2
/// counts the rounds it read an old value in.
fn fences(dsm: &Dsm, rmw: bool, many: bool) {
    const ROUNDS: u64 = 30;
    let me = dsm.id();
    let data: SharedArray<u64> = dsm.alloc(1024, AllocPolicy::OnNode(NodeId(1))).unwrap();
    let flags: SharedArray<u64> = dsm.alloc(512, AllocPolicy::OnNode(NodeId(1))).unwrap();
    let other: SharedArray<u64> = dsm.alloc(512, AllocPolicy::OnNode(NodeId(2))).unwrap();
    let cached: u64 = (0..data.len()).map(|i| data.get(i)).sum();
    dsm.barrier();
    let flag = dsm.atomic_u64(flags, 0);
    let mut stale = 0;
    for k in 1..=ROUNDS {
        if me == 0 {
            data.set(k as usize, 1000 + k);
            dsm.fence(Ordering::Release);
            if rmw {
                // The first releases, the second (to the same word) need not.
                dsm.atomic_u64(other, 0).fetch_add(1, Ordering::Relaxed);
                flag.fetch_add(1, Ordering::Relaxed);
                flag.fetch_add(1, Ordering::Relaxed);
            } else {
                flag.store(k, Ordering::Relaxed);
            }
        } else if me == 2 {
            if many {
                for i in 0..40 {
                    std::hint::black_box(dsm.atomic_u64(other, 8 + i).load(Ordering::Relaxed));
                }
            }
            while flag.load(Ordering::Relaxed) < if rmw { 2 * k } else { k } {}
            dsm.fence(Ordering::Acquire);
            let got = data.get(k as usize);
            if got != 1000 + k {
                stale += 1;
                println!("round {k}: read {got}");
            }
        }
    }
    dsm.barrier();
    check(
        dsm,
        stale == 0,
        &format!("{stale} of {ROUNDS} rounds read an old value"),
    );
    dsm.barrier();
    if me == 0 {
        println!("fences OK {ROUNDS} rounds ({cached})");
    }
}

/// 1,000 threads per node alive at once (the limit is 1,024), each reading remote pages,
/// adding to a count under a lock and with an atomic fetch-add, then all meeting in one barrier
/// of threads of every node: both counts exact.
fn thousand_threads(dsm: &Dsm) {
    const THREADS: usize = 1000;
    let n = dsm.nodes();
    let a = filled_blocks(dsm, 8, |i| i as u64);
    let count: SharedArray<u64> = dsm.alloc(2, AllocPolicy::OnNode(NodeId(0))).unwrap();
    dsm.barrier();
    let bad = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let bad = &bad;
            s.spawn(move || {
                let i = t * 97 % a.len();
                if a.get(i) != i as u64 {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
                {
                    let _g = dsm.lock(3);
                    count.set(0, count.get(0) + 1);
                }
                dsm.atomic_u64(count, 1).fetch_add(1, Ordering::Relaxed);
                dsm.barrier_threads(THREADS);
            });
        }
    });
    let (locked, atomic) = (count.get(0), count.get(1));
    let want = (THREADS * n) as u64;
    check(
        dsm,
        bad.load(Ordering::Relaxed) == 0 && locked == want && atomic == want,
        &format!("{locked} and {atomic} increments by {THREADS} threads on each of {n} nodes"),
    );
    dsm.barrier();
    if dsm.id() == 0 {
        println!("thousand-threads OK {locked}");
    }
}

/// Node 1 writes a round number into every page under lock 0; on the other nodes one thread reads
/// all pages under the same lock and must see one round everywhere, while a second thread reads
/// the same pages without the lock, so pages are fetched, prefetched and opened by the fault
/// handler while acquires invalidate them.
fn race(dsm: &Dsm) {
    let pages = 64;
    let a: SharedArray<u64> = dsm
        .alloc(pages * WORDS, AllocPolicy::OnNode(NodeId(0)))
        .unwrap();
    dsm.barrier();
    let rounds = 60;
    if dsm.id() == 1 {
        for r in 1..=rounds {
            let _g = dsm.lock(0);
            for p in 0..pages {
                a.set(p * WORDS, r);
            }
        }
    } else {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let bad = AtomicUsize::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    // Unsynchronised reads: values are not checked, only the traffic matters.
                    std::hint::black_box(a.get((k % pages) * WORDS + 1));
                    k = k.wrapping_mul(7).wrapping_add(13);
                }
            });
            let mut last = 0;
            for _ in 0..rounds {
                let _g = dsm.lock(0);
                let v = a.get(0);
                if v < last || (0..pages).any(|p| a.get(p * WORDS) != v) {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
                last = v;
            }
            stop.store(true, Ordering::Relaxed);
        });
        check(
            dsm,
            bad.load(Ordering::Relaxed) == 0,
            "every locked read saw one round in every page",
        );
    }
    dsm.barrier();
    if dsm.id() == 0 {
        println!("race OK");
    }
}

#[allow(unconditional_recursion)]
fn recurse(depth: u64, buf: &mut [u8; 1024]) -> u64 {
    let mut local = [depth as u8; 1024];
    local[0] = buf[1];
    std::hint::black_box(&mut local);
    recurse(depth + 1, &mut local) + u64::from(local[5])
}

/// `start_stats` zeroes every counter, the runtime's (driven faults) as well as the core's.
fn stats_reset(dsm: &Dsm) {
    let (me, n) = (dsm.id(), dsm.nodes());
    let pages = 8;
    let a = filled_blocks(dsm, pages, |i| i as u64);
    let next = (me + 1) % n;
    let mut sum = 0;
    for p in 0..pages {
        // A pause first: the service thread, which spins a while after a request (holding the
        // node's state, so a fault handler could not drive), is asleep again.
        std::thread::sleep(std::time::Duration::from_millis(2));
        sum += a.get((next * pages + p) * WORDS);
    }
    let before = dsm.stats();
    check(
        dsm,
        n == 1 || before.core.read_faults_remote > 0,
        "remote faults before",
    );
    check(
        dsm,
        n == 1 || before.runtime.faults_driven > 0,
        "driven faults before",
    );
    dsm.start_stats();
    let after = dsm.stats();
    check(
        dsm,
        after.core.read_faults_remote == 0
            && after.runtime.faults_driven == 0
            && after.runtime.drives_handed_back == 0,
        &format!("counters after start_stats: {after:?}"),
    );
    check(dsm, sum > 0 || n == 1, "read the next node's pages");
    dsm.barrier();
    println!("stats-reset OK");
}

/// `Cpus_allowed_list` of a status file under /proc.
fn allowed_list(status: &std::path::Path) -> String {
    std::fs::read_to_string(status)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map_or_else(|| "?".into(), |v| v.trim().to_string())
}

/// Prints the CPUs this node's main thread and its other threads (the service thread) may run
/// on (`bind_to`).
fn cpus(dsm: &Dsm) {
    let main = allowed_list(std::path::Path::new("/proc/thread-self/status"));
    let mut others: Vec<String> = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .map(|t| allowed_list(&t.path().join("status")))
        .collect();
    others.sort();
    others.dedup();
    println!(
        "node {} cpus main={main} all={}",
        dsm.id(),
        others.join("/")
    );
    dsm.barrier();
}

fn main() {
    let case = std::env::args().nth(1).unwrap_or_default();
    let dsm = dsm_runtime::init().unwrap_or_else(|e| {
        eprintln!("probe: {e}");
        std::process::exit(2)
    });
    match case.as_str() {
        "faults" => faults(&dsm),
        "stats-reset" => stats_reset(&dsm),
        "diffs" => diffs(&dsm),
        "counter" => counter(&dsm),
        "cpus" => cpus(&dsm),
        "cv" => cv(&dsm),
        "evict" => evict(&dsm),
        "shown" => shown(&dsm),
        "shown-writes" => shown_writes(&dsm),
        "shown-threads" => shown_threads(&dsm),
        "threads" => threads(&dsm),
        "many-threads" => many_threads(&dsm),
        "thousand-threads" => thousand_threads(&dsm),
        "race" => race(&dsm),
        "overflow" => {
            let a: SharedArray<u64> = dsm.alloc(WORDS, AllocPolicy::OnNode(NodeId(0))).unwrap();
            a.set(0, 1);
            let mut buf = [0u8; 1024];
            println!("{}", recurse(0, &mut buf));
        }
        "touch-after-exit" => {
            let a = blocks_per_node(&dsm, 1);
            dsm.barrier();
            dsm.exit();
            if dsm.id() == 1 {
                // Node 0's block, never fetched here: nothing can serve it now.
                println!("{}", a.get(0));
            }
        }
        "write-after-exit" => {
            // Each node's own block: after the exit, node 0 reads its block (held: it stays
            // readable), node 1 writes its block (it would reach nobody).
            let a = filled_blocks(&dsm, 1, |w| w as u64 + 1);
            dsm.barrier();
            dsm.exit();
            let mine = dsm.id() * WORDS;
            if dsm.id() == 0 {
                let atomic = dsm.atomic_u64(a, mine + 6).load(Ordering::SeqCst);
                println!("read after exit {} {atomic}", a.get(mine + 5));
            } else {
                a.set(mine, 9);
                println!("written after exit: not stopped");
            }
        }
        "segv-outside" => {
            let p = std::hint::black_box(16usize) as *mut u64;
            // SAFETY: none: this deliberately writes to an unmapped address to check that a
            // fault outside the shared region still kills the process.
            #[allow(unsafe_code)]
            unsafe {
                p.write_volatile(1)
            };
        }
        "segv-unallocated" => {
            let p = (dsm.region_start() + 1000 * PAGE_SIZE) as *mut u64;
            // SAFETY: none: the page is in the region but not allocated; the write must kill the
            // process like any wild access.
            #[allow(unsafe_code)]
            unsafe {
                p.write_volatile(1)
            };
        }
        "replace-segv-handler" => {
            // A Rust program replaces the DSM's SIGSEGV handler after init (nothing stands
            // between it and sigaction), with a handler that returns: a fault on shared memory
            // then repeats forever, unless the node ends.
            let a = filled_blocks(&dsm, 1, |i| i as u64);
            extern "C" fn returns(_: libc::c_int) {}
            // SAFETY: a zeroed sigaction is valid; the handler does nothing (async-signal-safe).
            #[allow(unsafe_code)]
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = returns as *const () as usize;
                libc::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
            }
            // The next node's block, never fetched here: a fault.
            let next = (dsm.id() + 1) % dsm.nodes();
            println!("read {}", a.get(next * WORDS));
        }
        "barrier-after-exit" => {
            dsm.barrier();
            dsm.exit();
            if dsm.id() == 1 {
                dsm.barrier();
            }
        }
        "lock-twice" => {
            dsm.barrier();
            if dsm.id() == 1 {
                let _first = dsm.lock(2);
                let _second = dsm.lock(2);
            }
            dsm.barrier();
        }
        "panic-in-team" => {
            // Node 0: one of two threads of a barrier of threads panics; the other waits for it
            // for ever, and the main thread for them. Node 1 waits in the job's barrier.
            if dsm.id() == 0 {
                std::thread::scope(|s| {
                    s.spawn(|| dsm.barrier_threads(2));
                    s.spawn(|| panic!("planted panic"));
                });
            }
            dsm.barrier();
        }
        "recv-overlong" => {
            // Node 1 sends 64 bytes; node 0 receives them into 16.
            if dsm.id() == 1 {
                dsm.send(0, 3, &[7u8; 64]);
            } else {
                let mut buf = [0u8; 16];
                dsm.recv_into(Some(1), Some(3), &mut buf);
            }
            dsm.barrier();
        }
        "bcast-lengths" => {
            // Node 0 broadcasts 8 bytes; node 1 passes a buffer of 4.
            let mut buf = vec![1u8; if dsm.id() == 0 { 8 } else { 4 }];
            dsm.bcast(0, &mut buf);
            dsm.barrier();
        }
        "reduce-types" => {
            // Node 0 sums 2 u64 values, node 1 4 u32 values: the same 16 bytes.
            if dsm.id() == 0 {
                let mut out = [0u64; 2];
                dsm.reduce(&[1u64, 2], &mut out, ReduceOp::Sum, 0);
            } else {
                dsm.reduce(&[1u32, 2, 3, 4], &mut [], ReduceOp::Sum, 0);
            }
            dsm.barrier();
        }
        "reduce-ops" => {
            // Node 0 asks for the maximum, node 1 for the sum.
            let op = if dsm.id() == 0 {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            let mut out = [0i32; 3];
            dsm.reduce(&[1i32, 2, 3], &mut out, op, 0);
            dsm.barrier();
        }
        "reduce-counts" => {
            // Node 0 reduces 3 values, node 1 2.
            let send: &[f64] = if dsm.id() == 0 {
                &[1.0, 2.0, 3.0]
            } else {
                &[1.0, 2.0]
            };
            let mut out = [0f64; 3];
            dsm.reduce(send, &mut out, ReduceOp::Sum, 0);
            dsm.barrier();
        }
        "send-to-nobody" => {
            // A node past the job.
            dsm.send(dsm.nodes() + 3, 1, &[1]);
        }
        "recv-from-nobody" => {
            // The same for a receive (its line was lost in a closure).
            dsm.recv(Some(dsm.nodes() + 3), None);
        }
        "release-load" => {
            // Refused as std refuses it (it was taken as a plain load).
            let a: SharedArray<u64> = dsm.alloc(WORDS, AllocPolicy::OnNode(NodeId(0))).unwrap();
            dsm.atomic_u64(a, 0).load(Ordering::Release);
        }
        "alloc-other-home" => {
            // Each node homes the page on the other: node 1's write asks node 0, which homes it
            // on node 1 (the allocation calls differ).
            let me = dsm.id();
            let a: SharedArray<u64> = dsm
                .alloc(WORDS, AllocPolicy::OnNode(NodeId((1 - me) as u16)))
                .unwrap();
            if me == 1 {
                a.set(0, 1);
            }
            dsm.barrier();
        }
        "exit-without-leaving" => {
            dsm.barrier();
            if dsm.id() == 2 {
                // As a C program that returns from main without jia_exit.
                std::process::exit(0);
            }
            dsm.barrier();
        }
        "fork-and-touch" | "fork-and-write" => {
            let a = blocks_per_node(&dsm, 1);
            // Node 1's own block, open for writing here when the child is forked.
            let own = WORDS;
            if dsm.id() == 1 {
                a.set(own, 7);
            }
            dsm.barrier();
            if dsm.id() == 1 {
                a.set(own, 8);
                // SAFETY: fork in a process with threads: the child only touches memory and
                // exits (no locks, no allocation before it faults).
                #[allow(unsafe_code)]
                let pid = unsafe { c_fork() };
                if pid == 0 {
                    if case == "fork-and-touch" {
                        // Node 0's block, never fetched here: the child must not try to fetch
                        // it.
                        std::hint::black_box(a.get(0));
                    } else {
                        // The parent's own page, writable in the parent: the child's write
                        // must not reach it.
                        a.set(own, 99);
                    }
                    // SAFETY: _exit ends the child without the parent's atexit work.
                    #[allow(unsafe_code)]
                    unsafe {
                        c_exit(0)
                    };
                }
                let mut status = 0;
                // SAFETY: waits for the child just forked.
                #[allow(unsafe_code)]
                unsafe {
                    c_waitpid(pid, &mut status, 0)
                };
                // Ended with status 1 (`_exit`: it is in a signal handler), after its message.
                check(&dsm, status == 1 << 8, &format!("child status {status:#x}"));
                check(
                    &dsm,
                    a.get(own) == 8,
                    &format!("parent's word {}", a.get(own)),
                );
            }
            dsm.barrier();
            if dsm.id() == 0 {
                println!("{case} OK");
            }
        }
        // A file read into shared memory this node does not hold, and written back from it.
        "file-io" => {
            let n = dsm.nodes();
            let words = 64 * 1024;
            let a: SharedArray<u64> = dsm
                .alloc(words, AllocPolicy::OnNode(NodeId((n - 1) as u16)))
                .unwrap();
            dsm.barrier();
            if dsm.id() == 0 {
                let path =
                    std::env::temp_dir().join(format!("dsm-probe-io-{}", std::process::id()));
                let bytes: Vec<u8> = (0..words * 8).map(|i| (i % 253) as u8).collect();
                std::fs::write(&path, &bytes).unwrap();
                let mut f = std::fs::File::open(&path).unwrap();
                let got = a.read_from(0..words, &mut f).unwrap();
                check(
                    &dsm,
                    got == words * 8,
                    &format!("read_from read {got} bytes"),
                );
                let mut back = Vec::new();
                a.write_to(0..words, &mut back).unwrap();
                check(&dsm, back == bytes, "write_to gave the bytes read");
                let _ = std::fs::remove_file(path);
            }
            dsm.barrier();
            if dsm.id() == n - 1 {
                let ok = (0..words).all(|w| {
                    a.get(w)
                        .to_le_bytes()
                        .iter()
                        .enumerate()
                        .all(|(k, &b)| b == ((w * 8 + k) % 253) as u8)
                });
                check(&dsm, ok, "the file's bytes at the home");
            }
            dsm.barrier();
            if dsm.id() == 0 {
                println!("file-io OK");
            }
        }
        // Standard input reaches node 0 only.
        "stdin" => {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text);
            if dsm.id() != 0 {
                check(
                    &dsm,
                    text.is_empty(),
                    &format!("node {} read {text:?}", dsm.id()),
                );
            }
            dsm.barrier();
            if dsm.id() == 0 {
                println!("stdin OK {}", text.trim());
            }
        }
        // Mismatched synchronisation: the job can never go on.
        "stuck-barrier-vs-exit" => {
            dsm.barrier();
            if dsm.id() != 1 {
                dsm.barrier();
            }
        }
        "stuck-exit-holding-lock" => {
            dsm.barrier();
            if dsm.id() == 0 {
                dsm.lock_raw(3).expect("lock 3");
            } else {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let _g = dsm.lock(3);
            }
        }
        "stuck-waitcv" => {
            dsm.barrier();
            if dsm.id() == 1 {
                dsm.waitcv(5);
            }
        }
        "stuck-recv" => {
            dsm.barrier();
            if dsm.id() == 0 {
                let _ = dsm.recv(Some(1), Some(42));
            }
        }
        "stuck-reduce-roots" => {
            // Each node names itself the root: each waits for the other's values.
            let mut out = [0u64; 1];
            dsm.reduce(&[1u64], &mut out, ReduceOp::Sum, dsm.id());
        }
        "fail-node-1" => {
            dsm.barrier();
            if dsm.id() == 1 {
                std::process::exit(7);
            }
            dsm.barrier();
        }
        "stop-node-1" => {
            dsm.barrier();
            if dsm.id() == 1 {
                // SAFETY: raise(2) with a plain signal number.
                #[allow(unsafe_code)]
                unsafe {
                    libc_raise_sigstop()
                };
            }
            dsm.barrier();
        }
        "sleep" => {
            dsm.barrier();
            // Tests wait for this line before they kill or stop a node mid-job.
            println!("probe: node {} running", dsm.id());
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::thread::sleep(std::time::Duration::from_secs(600));
        }
        "out-of-bounds" => {
            let a = dsm
                .alloc::<u64>(8, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            dsm.barrier();
            if dsm.id() == 1 {
                println!("{}", a.get(8));
            }
            dsm.barrier();
        }
        "crash-node-1-late" => {
            // Node 1 computes while the others wait 4 s in a barrier, then crashes (SIGSEGV).
            dsm.barrier();
            if dsm.id() == 1 {
                std::thread::sleep(std::time::Duration::from_secs(4));
                // SAFETY: none: a deliberate read of address 0, which the kernel answers with
                // SIGSEGV (not ours: outside the shared region, so the default action ends us).
                #[allow(unsafe_code)]
                unsafe {
                    std::ptr::read_volatile(std::ptr::null::<u8>())
                };
            }
            dsm.barrier();
        }
        "run-on" => {
            // Tests stop and continue a node after this line; the job then goes on to its end.
            dsm.barrier();
            println!("probe: node {} running", dsm.id());
            let _ = std::io::Write::flush(&mut std::io::stdout());
            // The others wait in the barrier (and say so) while node 0 computes a second.
            if dsm.id() == 0 {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
            for _ in 0..20 {
                dsm.barrier();
            }
            if dsm.id() == 0 {
                println!("run-on OK");
            }
        }
        "print-lines" => {
            // Every node prints 200 long lines, each in three writes: lines of different nodes
            // must still reach dsmrun's output whole.
            use std::io::Write as _;
            dsm.barrier();
            let pad = "x".repeat(300);
            for k in 0..200 {
                for piece in [
                    format!("node {} line {k} ", dsm.id()),
                    pad.clone(),
                    " end\n".into(),
                ] {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(piece.as_bytes());
                    let _ = out.flush();
                }
            }
            dsm.barrier();
        }
        "alloc-overflow" => {
            // len * size_of::<u64>() overflows: refused, and the array before it keeps its value.
            let a = dsm
                .alloc::<u64>(512, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            a.set(0, 7);
            match dsm.alloc::<u64>((1 << 61) + 1, AllocPolicy::OnNode(NodeId(0))) {
                Ok(b) => println!("accepted an array of {} elements", b.len()),
                Err(e) => println!("refused: {e}"),
            }
            dsm.barrier();
            println!("first array [0] = {}", a.get(0));
        }
        "error-while-read" => {
            // Node 0 ends the job with jia_error while node 1 streams reads of node 0's pages
            // (one fault each with prefetch off): node 1 learns of the error in a fault.
            let pages = 32_768;
            let a = dsm
                .alloc::<u64>(pages * 512, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            dsm.barrier();
            if dsm.id() == 0 {
                std::thread::sleep(std::time::Duration::from_millis(100));
                dsm.error("deliberate error on node 0");
            }
            let mut sum = 0;
            for p in 0..pages {
                sum += a.get(p * 512);
            }
            println!("node {} read every page (sum {sum}): too late", dsm.id());
            dsm.barrier();
        }
        "atomic-histogram" => {
            // Every node adds 1 to each of PROBE_BINS words (acq-rel fetch-adds, in an order of
            // its own), homed in blocks on every node; node 0 checks every bin and prints its
            // peak memory.
            let bins: usize = std::env::var("PROBE_BINS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(100_000);
            let (me, nodes) = (dsm.id(), dsm.nodes());
            let policy = AllocPolicy::Cyclic {
                block_bytes: 16 * PAGE_SIZE as u64,
                start: NodeId(0),
            };
            let hist: SharedArray<u64> = dsm.alloc(bins, policy).expect("allocate");
            dsm.barrier();
            for i in 0..bins {
                dsm.atomic_u64(hist, (i * 7919 + me) % bins)
                    .fetch_add(1, Ordering::AcqRel);
            }
            dsm.barrier();
            if me == 0 {
                let wrong = (0..bins).filter(|&i| hist.get(i) != nodes as u64).count();
                let hwm = std::fs::read_to_string("/proc/self/status")
                    .ok()
                    .and_then(|s| {
                        s.lines()
                            .find(|l| l.starts_with("VmHWM:"))
                            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    })
                    .unwrap_or(0);
                println!(
                    "atomic-histogram {bins} bins {wrong} wrong, peak {} MB",
                    hwm / 1024
                );
            }
            dsm.barrier();
        }
        "small-atomics" => small_atomics(&dsm),
        "fences" => fences(&dsm, false, false),
        "fences-rmw" => fences(&dsm, true, false),
        "fences-many-words" => fences(&dsm, false, true),
        "fence-after-refused" => {
            // A relaxed operation refused (misaligned), whose error the program takes, then
            // acquire fences: the word read nothing, and the fences go on (one ended the node).
            let a: SharedArray<u64> = dsm.alloc(512, AllocPolicy::OnNode(NodeId(1))).unwrap();
            dsm.barrier();
            let relaxed = dsm_runtime::AtomicOrder::RELAXED;
            let load = dsm_runtime::AtomicOp::Load;
            dsm.fence(Ordering::Acquire);
            let refused = dsm.atomic_raw(a.as_ptr() as usize + 1, 4, load, relaxed);
            dsm.fence(Ordering::Acquire);
            dsm.atomic_u64(a, 0).load(Ordering::Relaxed);
            dsm.fence(Ordering::AcqRel);
            println!("node {}: refused: {}", dsm.id(), refused.is_err());
            dsm.barrier();
        }
        "atomic-before-home-allocates" => {
            // The home (node 1) is late to the allocation; the others add to its word at once,
            // before it has made it (their operations were dropped, and the job ended as a
            // deadlock). Every add counts.
            dsm.barrier();
            if dsm.id() == 1 {
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            let a = dsm
                .alloc::<u64>(512, AllocPolicy::OnNode(NodeId(1)))
                .expect("allocate");
            if dsm.id() != 1 {
                dsm.atomic_u64(a, 0)
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            dsm.barrier();
            let sum = dsm
                .atomic_u64(a, 0)
                .load(std::sync::atomic::Ordering::SeqCst);
            println!("node {} sees {sum} adds", dsm.id());
            dsm.barrier();
        }
        "atomic-only-node-1-allocates" => {
            // Node 1 makes an allocation node 0 (its home) does not, and adds to a word of it.
            dsm.barrier();
            if dsm.id() == 1 {
                let a = dsm
                    .alloc::<u64>(512, AllocPolicy::OnNode(NodeId(0)))
                    .expect("allocate");
                dsm.atomic_u64(a, 0)
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            dsm.barrier();
        }
        "alloc-only-node-1-touches" => {
            // Node 1 makes an allocation node 0 does not, homed at node 0, and reads it before
            // the barrier; node 0 goes straight to the barrier (its requests were held forever).
            dsm.barrier();
            if dsm.id() == 1 {
                let a = dsm
                    .alloc::<u64>(512, AllocPolicy::OnNode(NodeId(0)))
                    .expect("allocate");
                println!("node 1 read {}", a.get(0));
            }
            dsm.barrier();
        }
        "alloc-larger-on-node-1-touches" => {
            // Node 1's allocation is two pages where node 0's is one, both homed at node 0; node
            // 1 reads its second page before the barrier.
            dsm.barrier();
            let len = if dsm.id() == 1 { 1024 } else { 512 };
            let a = dsm
                .alloc::<u64>(len, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            if dsm.id() == 1 {
                println!("node 1 read {}", a.get(600));
            }
            dsm.barrier();
        }
        "lock-bounce" => {
            // Threads of each node take one lock in turns, a lock whose manager is another node
            // (lock 1 - id on two nodes), and count under it; the threads of the other node take
            // theirs at the same time. Every count must be exact; the statistics tell how many
            // took the lock with no message.
            let (me, nodes) = (dsm.id(), dsm.nodes());
            let rounds: u64 = std::env::var("PROBE_ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(2000);
            let threads = 4;
            let counts: SharedArray<u64> = dsm
                .alloc(nodes * 512, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            dsm.barrier();
            let lock = ((me + 1) % nodes) as u16;
            std::thread::scope(|s| {
                for _ in 0..threads {
                    let dsm = &dsm;
                    s.spawn(move || {
                        for _ in 0..rounds {
                            let _g = dsm.lock(lock);
                            counts.set(me * 512, counts.get(me * 512) + 1);
                        }
                    });
                }
            });
            dsm.barrier();
            if me == 0 {
                let all: Vec<u64> = (0..nodes).map(|n| counts.get(n * 512)).collect();
                let want = rounds * threads as u64;
                let ok = all.iter().all(|&c| c == want);
                println!(
                    "lock-bounce {} counts {all:?}, want {want} each",
                    if ok { "OK" } else { "FAILED" }
                );
            }
            dsm.barrier();
        }
        "team-late-thread" => {
            // One thread of each node waits in a barrier of 2 threads while the other computes
            // for 5 s without touching the DSM (no slot: the deadlock watch cannot see it): the
            // job is not taken for one that cannot go on.
            std::thread::scope(|s| {
                s.spawn(|| {
                    let t0 = std::time::Instant::now();
                    let mut x = 0u64;
                    while t0.elapsed() < std::time::Duration::from_secs(5) {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    std::hint::black_box(x);
                    dsm.barrier_threads(2);
                });
                dsm.barrier_threads(2);
            });
            if dsm.id() == 0 {
                println!("team-late-thread OK");
            }
        }
        "threads-sync" => {
            // Threads of every node use the other calls at once: one thread of each node sends
            // a letter to the next node while another receives from the previous one; node 0's
            // first thread writes a word and sets a condition variable that a second thread of
            // every other node waits on and then reads the word; then a barrier of the threads.
            let (me, nodes) = (dsm.id(), dsm.nodes());
            let got: SharedArray<u64> = dsm
                .alloc(nodes * 512, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            let word: SharedArray<u64> = dsm
                .alloc(1, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            dsm.barrier();
            let (next, prev) = ((me + 1) % nodes, (me + nodes - 1) % nodes);
            std::thread::scope(|s| {
                s.spawn(|| {
                    dsm.send(next, 7, &(me as u64).to_le_bytes());
                    if me == 0 {
                        word.set(0, 42);
                        dsm.setcv(2);
                    }
                    dsm.barrier_threads(3);
                });
                s.spawn(|| {
                    let letter = dsm.recv(Some(prev), Some(7));
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&letter.data[..8]);
                    got.set(me * 512, u64::from_le_bytes(b) + 1);
                    dsm.barrier_threads(3);
                });
                s.spawn(|| {
                    if me != 0 {
                        dsm.waitcv(2);
                        got.set(me * 512 + 1, word.get(0));
                    }
                    dsm.barrier_threads(3);
                });
            });
            if me == 0 {
                let letters_ok =
                    (0..nodes).all(|n| got.get(n * 512) == ((n + nodes - 1) % nodes) as u64 + 1);
                let cv_ok = (1..nodes).all(|n| got.get(n * 512 + 1) == 42);
                println!(
                    "threads-sync {} letters {letters_ok} condition variable {cv_ok}",
                    if letters_ok && cv_ok { "OK" } else { "FAILED" }
                );
            }
            dsm.barrier();
        }
        "lock-wanted" => {
            // Node 0's 4 threads pass lock 0 around among themselves until node 1, which asks
            // for it once, has set the flag under it: node 1 must get the lock (the hand-offs
            // stop a bounded number of times after its request), or node 0 loops for ever.
            let me = dsm.id();
            if dsm.nodes() < 2 {
                dsm.error("probe lock-wanted needs 2 nodes or more (node 1 ends node 0's loop)");
            }
            let flag: SharedArray<u64> = dsm
                .alloc(1, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            dsm.barrier();
            if me == 0 {
                let turns = AtomicUsize::new(0);
                std::thread::scope(|s| {
                    for _ in 0..4 {
                        s.spawn(|| {
                            loop {
                                let _g = dsm.lock(0);
                                turns.fetch_add(1, Ordering::Relaxed);
                                if flag.get(0) == 1 {
                                    break;
                                }
                            }
                        });
                    }
                });
                println!(
                    "lock-wanted OK node 1 got the lock after {} turns of node 0's threads",
                    turns.load(Ordering::Relaxed)
                );
            } else {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let _g = dsm.lock(0);
                flag.set(0, 1);
            }
            dsm.barrier();
        }
        "write-while-flush" => {
            // Node 1's thread A counts in its word of a page homed at node 0, with no lock, while
            // node 1's thread B takes and releases a lock over and over (each release protects
            // and diffs node 1's written pages, A's among them) and node 0 writes another word
            // of the same page under that lock (so B's acquires invalidate the page A writes).
            // No write of A's may be lost: after the barrier node 0 reads A's count. The nodes
            // write under the lock in turns (word 16), so that every one of B's acquires follows
            // another node's write and invalidates the page, however the threads are scheduled.
            let (me, nodes) = (dsm.id(), dsm.nodes());
            let rounds = 2000;
            let page: SharedArray<u64> = dsm
                .alloc(512, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            dsm.barrier();
            let writer = nodes - 1;
            let done = AtomicUsize::new(0);
            let turns = || {
                let mut mine = 0;
                while mine < rounds {
                    let _g = dsm.lock(1);
                    if page.get(16) as usize % nodes == me {
                        page.set(8 + me, page.get(8 + me) + 1);
                        page.set(16, page.get(16) + 1);
                        mine += 1;
                    }
                }
            };
            std::thread::scope(|s| {
                if me == writer {
                    s.spawn(|| {
                        let mut k = 0;
                        while done.load(Ordering::Relaxed) == 0 {
                            k += 1;
                            page.set(0, k);
                        }
                        page.set(1, k);
                        dsm.barrier_threads(2);
                    });
                    s.spawn(|| {
                        turns();
                        done.store(1, Ordering::Relaxed);
                        dsm.barrier_threads(2);
                    });
                } else {
                    // Two threads here too: every node meets with the same count.
                    s.spawn(|| {
                        turns();
                        dsm.barrier_threads(2);
                    });
                    s.spawn(|| dsm.barrier_threads(2));
                }
            });
            if me == 0 {
                let (got, want) = (page.get(0), page.get(1));
                let under_lock: u64 = (0..nodes).map(|k| page.get(8 + k)).sum();
                let ok = got == want && want > 0 && under_lock == (rounds * nodes) as u64;
                println!(
                    "write-while-flush {} count {got} of {want}, {under_lock} increments under \
                     the lock",
                    if ok { "OK" } else { "FAILED" }
                );
            }
            dsm.barrier();
        }
        "write-during-barrier" => {
            // Home migration with threads: every node's page of an array homed at node 0. Thread
            // A writes its node's words and calls the plain barrier, round after round (the page
            // then has one writer and would move to its node); thread B meanwhile counts in
            // another word of the same page under a lock of its own, so its writes fall inside
            // A's barriers. A page written during the barrier that would move it is kept where
            // it is (the move is vetoed); none of A's or B's writes may be lost.
            let (me, nodes) = (dsm.id(), dsm.nodes());
            let rounds = 40;
            let words: SharedArray<u64> = dsm
                .alloc(512 * nodes, AllocPolicy::OnNode(NodeId(0)))
                .expect("allocate");
            dsm.barrier();
            let mine = me * 512;
            let done = AtomicUsize::new(0);
            let counted = std::thread::scope(|s| {
                let b = s.spawn(|| {
                    let mut n = 0;
                    while done.load(Ordering::Relaxed) == 0 {
                        let _g = dsm.lock(10 + me as u16);
                        words.set(mine + 256, words.get(mine + 256) + 1);
                        n += 1;
                    }
                    n
                });
                for round in 1..=rounds {
                    for i in 0..16 {
                        words.set(mine + i, round);
                    }
                    dsm.barrier();
                }
                done.store(1, Ordering::Relaxed);
                b.join().expect("thread B")
            });
            words.set(mine + 300, counted);
            dsm.barrier();
            if me == 0 {
                let ok = (0..nodes).all(|k| {
                    let at = k * 512;
                    (0..16).all(|i| words.get(at + i) == rounds)
                        && words.get(at + 256) == words.get(at + 300)
                        && words.get(at + 300) > 0
                });
                let counts: Vec<u64> = (0..nodes).map(|k| words.get(k * 512 + 256)).collect();
                println!(
                    "write-during-barrier {} counts {counts:?}",
                    if ok { "OK" } else { "FAILED" }
                );
            }
            dsm.barrier();
        }
        "panic" => {
            dsm.barrier();
            if dsm.id() == 1 {
                panic!("deliberate panic on node 1");
            }
            dsm.barrier();
        }
        other => {
            eprintln!("probe: unknown case `{other}`");
            std::process::exit(2);
        }
    }
    dsm.exit();
}

#[allow(unsafe_code)]
unsafe extern "C" {
    #[link_name = "raise"]
    fn c_raise(sig: i32) -> i32;
    #[link_name = "fork"]
    fn c_fork() -> i32;
    #[link_name = "_exit"]
    fn c_exit(status: i32) -> !;
    #[link_name = "waitpid"]
    fn c_waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
}

/// Stops this process as if by `kill -STOP`.
///
/// # Safety
/// Plain libc call.
#[allow(unsafe_code)]
unsafe fn libc_raise_sigstop() {
    // SAFETY: raise takes a signal number; SIGSTOP is 19 on Linux.
    unsafe { c_raise(19) };
}
