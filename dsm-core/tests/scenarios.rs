//! Scenario tests: one protocol rule each, written as programs on a simulated cluster.

use dsm_core::sim::{Cluster, Op, SimError, TraceEntry};
use dsm_core::{
    Access, AllocPolicy, AtomicOp, AtomicOrder, CoreConfig, CvId, Effect, GlobalAddr, JobError,
    LockId, Msg, MsgKind, Node, NodeId, PAGE_SIZE, PageBuf, PageNum, PageState, Prot, RunData,
    Time, UsageError, VecMemory, WaiterId,
};
use std::sync::Arc;
use std::time::Duration;

const PAGE: u64 = PAGE_SIZE as u64;

fn no_prefetch(c: &mut CoreConfig) {
    c.prefetch.enabled = false;
}

/// Prefetch one page ahead (the page after a fault), no further.
fn one_page_ahead(c: &mut CoreConfig) {
    c.prefetch.prefetch_pages = 1;
    c.prefetch.max_checking_pages = 1;
}

/// Windows of 4 pages growing to 64, and a cache of 8,192 pages: walks' windows move many times
/// in a scenario of a few thousand pages.
fn small_windows(c: &mut CoreConfig) {
    c.prefetch.prefetch_pages = 4;
    c.prefetch.read_ahead_max_pages = 64;
    c.cache_pages = 8192;
}

/// A cluster of `n` nodes without prefetch and `pages` pages all homed on node 0.
fn cluster_homed_on_0(n: u16, pages: u64, seed: u64) -> (Cluster, GlobalAddr) {
    let mut c = Cluster::new(n, seed, no_prefetch);
    let base = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    (c, base)
}

fn kinds(trace: &[TraceEntry]) -> Vec<(u16, u16, MsgKind)> {
    trace.iter().map(|t| (t.from.0, t.to.0, t.kind)).collect()
}

#[test]
fn read_fault_on_remote_page_fetches_from_home_in_one_round_trip() {
    let (mut c, x) = cluster_homed_on_0(2, 1, 1);
    c.trace = Some(Vec::new());
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    assert_eq!(
        kinds(c.trace.as_ref().unwrap()),
        vec![(1, 0, MsgKind::GetPage), (0, 1, MsgKind::GetPageGrant)]
    );
    assert_eq!(c.node(1).page_state(x.page()), PageState::ReadOnly);
    assert_eq!(c.node(1).stats().read_faults_remote, 1);
    // The wait spans the two deliveries (the simulator's clock moves 1 us per step).
    let waited = c.node(1).stats().fault_wait_ns;
    assert!(
        (2_000..=c.now().0).contains(&waited),
        "fault_wait_ns {waited}"
    );
    assert_eq!(c.node(0).stats().fault_wait_ns, 0);
}

#[test]
fn a_home_warms_the_page_a_sequential_reader_asks_for_next() {
    let (mut c, x) = cluster_homed_on_0(2, 8, 3);
    let warmed = |c: &Cluster| c.node(0).memory().warmed.borrow().clone();
    let page = |i: u64| PageNum((x.page().0 as u64 + i) as u32);
    c.read_u64(1, x).unwrap();
    assert_eq!(warmed(&c), vec![], "one request is no sequence yet");
    c.read_u64(1, x.offset_by(PAGE)).unwrap();
    c.read_u64(1, x.offset_by(2 * PAGE)).unwrap();
    assert_eq!(warmed(&c), vec![page(2), page(3)]);
    // Not where the last request ended: nothing warmed. The last page has no page after it
    // homed here: nothing either.
    c.read_u64(1, x.offset_by(5 * PAGE)).unwrap();
    c.read_u64(1, x.offset_by(7 * PAGE)).unwrap();
    assert_eq!(warmed(&c), vec![page(2), page(3)]);
    c.read_u64(1, x.offset_by(6 * PAGE)).unwrap();
    c.read_u64(1, x.offset_by(7 * PAGE)).unwrap();
    assert_eq!(
        warmed(&c),
        vec![page(2), page(3)],
        "page 7 was served already"
    );
}

#[test]
fn home_pages_are_readable_without_any_message() {
    let (mut c, x) = cluster_homed_on_0(2, 1, 2);
    c.trace = Some(Vec::new());
    assert_eq!(c.read_u64(0, x).unwrap(), 0);
    assert!(c.trace.as_ref().unwrap().is_empty());
    assert_eq!(c.node(0).stats().fault_wait_ns, 0, "no remote wait");
}

#[test]
fn write_under_a_lock_is_seen_by_the_next_holder() {
    for seed in 0..20 {
        let (mut c, x) = cluster_homed_on_0(3, 1, seed);
        c.lock(1, 7).unwrap();
        c.write_u64(1, x, 42).unwrap();
        c.unlock(1, 7).unwrap();
        c.lock(2, 7).unwrap();
        assert_eq!(c.read_u64(2, x).unwrap(), 42, "seed {seed}");
        c.unlock(2, 7).unwrap();
    }
}

#[test]
fn a_copy_stays_stale_until_its_holder_acquires() {
    let (mut c, x) = cluster_homed_on_0(3, 1, 3);
    assert_eq!(c.read_u64(2, x).unwrap(), 0); // node 2 caches the page
    c.lock(1, 0).unwrap();
    c.write_u64(1, x, 5).unwrap();
    c.unlock(1, 0).unwrap();
    // Lazy: no acquire by node 2 yet, so its copy is untouched.
    assert_eq!(c.read_u64(2, x).unwrap(), 0);
    c.lock(2, 0).unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 5);
    assert_eq!(c.node(2).stats().invalidations, 1);
}

#[test]
fn two_writers_of_one_page_are_merged_at_the_home() {
    let (mut c, x) = cluster_homed_on_0(3, 1, 4);
    let y = x.offset_by(8);
    c.lock(1, 1).unwrap();
    c.lock(2, 2).unwrap();
    c.write_u64(1, x, 11).unwrap();
    c.write_u64(2, y, 22).unwrap();
    c.unlock(1, 1).unwrap();
    c.unlock(2, 2).unwrap();
    c.barrier().unwrap();
    for n in 0..3 {
        assert_eq!(c.read_u64(n, x).unwrap(), 11);
        assert_eq!(c.read_u64(n, y).unwrap(), 22);
    }
    assert_eq!(c.node(0).stats().diffs_applied, 2);
}

#[test]
fn writes_at_the_home_invalidate_other_copies_at_the_next_barrier() {
    let (mut c, x) = cluster_homed_on_0(2, 1, 5);
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    c.write_u64(0, x, 9).unwrap();
    c.barrier().unwrap();
    // The runtime opened the page itself (the home-write fast path) and reported it.
    assert_eq!(c.node(0).stats().write_faults_local, 1);
    assert_eq!(c.node(1).page_state(x.page()), PageState::Invalid);
    assert_eq!(c.read_u64(1, x).unwrap(), 9);
}

#[test]
fn after_a_barrier_the_home_writes_its_pages_untracked_until_they_are_fetched_again() {
    let (mut c, x) = cluster_homed_on_0(2, 1, 5);
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    c.write_u64(0, x, 9).unwrap(); // tracked: node 1 holds a copy
    c.barrier().unwrap(); // node 1 drops its copy: nobody holds one now
    assert_eq!(c.node(1).page_state(x.page()), PageState::Invalid);
    c.write_u64(0, x, 10).unwrap();
    c.write_u64(0, x, 11).unwrap();
    c.barrier().unwrap();
    // (Fast-path faults are reported to the core late, by seed: counted by the next barrier.)
    assert_eq!(
        c.node(0).stats().write_faults_local,
        1,
        "writes after the barrier take no fault"
    );
    assert_eq!(c.read_u64(1, x).unwrap(), 11); // fetched again: tracked again
    c.write_u64(0, x, 12).unwrap();
    c.barrier().unwrap();
    // Tracked from the copy on: the write faulted, or (written before the tracking started, the
    // runtime's window between serving and protecting) was found at the settle.
    let s = c.node(0).stats();
    assert_eq!(s.write_faults_local + s.home_writes_found_at_settle, 2);
    assert_eq!(c.node(1).page_state(x.page()), PageState::Invalid);
    assert_eq!(c.read_u64(1, x).unwrap(), 12);
}

#[test]
fn a_home_write_between_serving_a_page_and_tracking_it_reaches_the_copy() {
    // The home protects a page it serves only once the grant is sent; a write in between is
    // found by comparing and must invalidate the copy at the next barrier like a tracked write.
    // By seed the settle comes before or after node 0's write: both must end the same.
    let mut found = 0;
    for seed in 0..40 {
        let (mut c, x) = cluster_homed_on_0(2, 1, seed);
        c.write_u64(0, x, 1).unwrap(); // untracked: nobody holds a copy
        assert_eq!(c.read_u64(1, x).unwrap(), 1, "seed {seed}");
        c.write_u64(0, x, 2).unwrap();
        c.barrier().unwrap();
        assert_eq!(
            c.node(1).page_state(x.page()),
            PageState::Invalid,
            "seed {seed}"
        );
        assert_eq!(c.read_u64(1, x).unwrap(), 2, "seed {seed}");
        found += c.node(0).stats().home_writes_found_at_settle;
    }
    assert!(
        found > 0,
        "no seed wrote the page before its tracking started"
    );
}

/// A thread streaming through remote memory: each read-ahead window marks the one page whose
/// first touch asks for the next window (the runtime wakes its service thread for that page
/// alone, and tells the core of the other touches at its next pass). Touching the pages before
/// the mark asks for nothing; touching the mark asks for the next window, which has its own
/// mark further on.
#[test]
fn the_read_ahead_marks_the_page_that_asks_for_the_next_window() {
    let pages = 600u64;
    let mut c = Cluster::new(2, 7, |cfg| {
        cfg.prefetch.prefetch_pages = 4;
        cfg.prefetch.read_ahead_max_pages = 64;
        cfg.cache_pages = 4096;
    });
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    for p in 0..pages {
        c.write_u64(0, x.offset_by(p * PAGE), p).unwrap();
    }
    c.barrier().unwrap();
    // Stream through the first 200 pages: the window grows to 64 pages on the way.
    for p in 0..200 {
        assert_eq!(c.read_u64(1, x.offset_by(p * PAGE)).unwrap(), p);
    }
    let marks = c.node(1).memory().read_ahead_marks.clone();
    assert!(marks.len() >= 5, "{marks:?}");
    assert!(marks.windows(2).all(|w| w[0] < w[1]), "{marks:?}");
    // The pages up to the mark, touched one by one as the runtime reports them: only the
    // mark's touch sends a request.
    let mark = *marks.last().unwrap();
    // The window of the mark arrives: each lock and unlock runs the cluster further.
    // Prefetched: its bytes are in (each page holds its number), still closed.
    let prefetched = |c: &Cluster, p: PageNum| {
        let m = c.node(1).memory();
        m.load_u64(p, 0) == u64::from(p.0 - x.page().0) && m.prot(p) == dsm_core::Prot::None
    };
    let arrived = |c: &Cluster| prefetched(c, mark);
    for _ in 0..100 {
        if arrived(&c) {
            break;
        }
        c.lock(1, 0).unwrap();
        c.unlock(1, 0).unwrap();
    }
    assert!(arrived(&c), "the mark {mark} never arrived");
    let now = c.now();
    let first = (x.page().0 + 200..mark.0)
        .find(|&p| prefetched(&c, PageNum(p)))
        .expect("prefetched pages before the mark");
    let node = c.node_mut(1);
    for p in first..mark.0 {
        let before = node.stats().getp_sent;
        node.handle_prefetch_opened(now, PageNum(p), true);
        assert_eq!(
            node.stats().getp_sent,
            before,
            "page {p}, before the mark {mark}"
        );
    }
    let before = node.stats().getp_sent;
    node.handle_prefetch_opened(now, mark, true);
    assert_eq!(
        node.stats().getp_sent,
        before + 1,
        "the mark {mark} asked for nothing"
    );
    assert_eq!(
        c.node(1).stats().pages_fetched,
        1,
        "the stream waited on a demand fault"
    );
}

/// Three nodes, read-ahead windows of 4 to 64 pages, and an array of `blocks` blocks of `block`
/// pages homed on nodes 1, 2, 0, 1, 2... (`Cyclic` from node 1), each page holding its number.
fn rows_homed_in_turn(block: u64, blocks: u64, seed: u64) -> (Cluster, GlobalAddr) {
    let mut c = Cluster::new(3, seed, |cfg| {
        cfg.prefetch.prefetch_pages = 4;
        cfg.prefetch.read_ahead_max_pages = 64;
        cfg.cache_pages = 8192;
    });
    let x = c
        .alloc(
            AllocPolicy::Cyclic {
                block_bytes: block * PAGE,
                start: NodeId(1),
            },
            block * blocks * PAGE,
        )
        .unwrap();
    for p in 0..block * blocks {
        let home = ((p / block + 1) % 3) as u16;
        c.write_u64(home, x.offset_by(p * PAGE), p).unwrap();
    }
    c.barrier().unwrap();
    (c, x)
}

/// A thread streaming through an array whose blocks are homed on every node in turn, its own
/// among them: its own pages take no request, and the read-ahead runs on past them into the
/// next remote block (a read-ahead that counted them as pages ahead, since it is woken only by
/// prefetched pages, stalled on a demand fault after each).
#[test]
fn a_stream_through_blocks_of_its_own_reads_ahead_past_them() {
    let (block, blocks) = (96u64, 12u64);
    let (mut c, x) = rows_homed_in_turn(block, blocks, 5);
    for p in 0..block * blocks {
        assert_eq!(c.read_u64(0, x.offset_by(p * PAGE)).unwrap(), p);
    }
    let s = c.node(0).stats();
    // The stream's first faults start it; then every remote page comes by read-ahead.
    assert!(
        s.pages_fetched <= 3,
        "{} pages waited for on demand; {} read ahead",
        s.pages_fetched,
        s.prefetch_used
    );
}

/// A walk whose next pages are partly its own and partly read already (matmul's B, read from
/// the home after its own rows back round to its own): the read-ahead asks for the last pages
/// before its own rows in one request, though they are fewer than half a window, instead of
/// leaving them to a demand fault.
#[test]
fn a_walk_asks_for_the_last_pages_before_its_own_rows() {
    // Blocks after whose windows of 64 pages 16 to 31 pages are left before the reader's own
    // rows: fewer than half a window (which asked for nothing), at least a quarter.
    for block in [137u64, 140, 144, 270] {
        // Blocks homed on nodes 1, 2, 0 (the reader), 1, 2.
        let (mut c, x) = rows_homed_in_turn(block, 5, 9);
        for p in (block * 3..block * 5).chain(0..block * 3) {
            assert_eq!(c.read_u64(0, x.offset_by(p * PAGE)).unwrap(), p);
        }
        let s = c.node(0).stats();
        // One demand fault starts each walk.
        assert!(
            s.pages_fetched <= 2,
            "blocks of {block}: {} pages waited for on demand; {} read ahead",
            s.pages_fetched,
            s.prefetch_used
        );
    }
}

/// A stream whose read-ahead has reached its allocation's end, and whose prefetched tail a lock's
/// grant then invalidates (another node wrote it): the read-ahead asks for the tail again before
/// the walk reaches it, in one request, instead of leaving it to a demand fault (what it knew of
/// the stream ahead no longer holds). Found by a review.
#[test]
fn a_tail_invalidated_after_the_read_ahead_reached_the_end_is_read_ahead_again() {
    let (pages, at, tail) = (100u64, 60u64, 30u64);
    let mut c = Cluster::new(3, 7, small_windows);
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(1)), pages * PAGE)
        .unwrap();
    c.barrier().unwrap();
    for p in 0..at {
        c.read_u64(0, x.offset_by(p * PAGE)).unwrap();
    }
    c.lock(2, 0).unwrap();
    for p in pages - tail..pages {
        c.write_u64(2, x.offset_by(p * PAGE), p).unwrap();
    }
    c.unlock(2, 0).unwrap();
    let before = c.node(0).stats().clone();
    c.lock(0, 0).unwrap();
    for p in at..pages {
        let v = c.read_u64(0, x.offset_by(p * PAGE)).unwrap();
        assert_eq!(v, if p >= pages - tail { p } else { 0 });
    }
    c.unlock(0, 0).unwrap();
    let s = c.node(0).stats();
    let (waits, getps) = (
        s.pages_fetched - before.pages_fetched,
        s.getp_sent - before.getp_sent,
    );
    assert!(
        waits == 0 && getps <= 1,
        "{waits} demand waits, {getps} GETPs for the tail"
    );
}

/// A thread walking down a column of a row-major matrix (one page in every 20): after three
/// demand faults equally spaced, the read-ahead follows the stride, asking for the column's
/// pages and not those in between, in windows that grow as a sequential stream's do.
#[test]
fn a_strided_walk_is_read_ahead_at_its_stride() {
    let stride = 20u64;
    let rows = 300u64;
    let mut c = Cluster::new(2, 11, small_windows);
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), rows * stride * PAGE)
        .unwrap();
    for r in 0..rows {
        c.write_u64(0, x.offset_by(r * stride * PAGE), r).unwrap();
    }
    c.barrier().unwrap();
    for r in 0..rows {
        assert_eq!(c.read_u64(1, x.offset_by(r * stride * PAGE)).unwrap(), r);
    }
    let s = c.node(1).stats();
    // Three demand faults find the stride; the column's other pages come by read-ahead.
    assert!(s.pages_fetched <= 4, "{} demand fetches", s.pages_fetched);
    // The pages in between: only the first two faults' sequential prefetches (4 each).
    let wasted = s.prefetch_requested - s.prefetch_used;
    assert!(
        wasted <= 2 * 4 + 64,
        "{wasted} pages asked for and never read, of {} asked",
        s.prefetch_requested
    );
    assert!(s.getp_sent < 20, "{} requests for {rows} rows", s.getp_sent);
}

/// A thread reading an array from its last page to its first (a loop down, a backward
/// substitution), page by page and down a column (one page in every 20): after three demand
/// faults the read-ahead follows the walk down, in windows that grow as an upward walk's do,
/// and asks for about as many requests as the same walk up. Before, only walks up were
/// followed: each page down was a demand fault.
#[test]
fn a_walk_down_through_memory_is_read_ahead_as_one_up_is() {
    for stride in [1u64, 20] {
        let rows = if stride == 1 { 600 } else { 300 };
        let (mut requests, mut faults) = (Vec::new(), Vec::new());
        for down in [false, true] {
            let mut c = Cluster::new(2, 17, small_windows);
            let x = c
                .alloc(AllocPolicy::OnNode(NodeId(0)), rows * stride * PAGE)
                .unwrap();
            for r in 0..rows {
                c.write_u64(0, x.offset_by(r * stride * PAGE), r).unwrap();
            }
            c.barrier().unwrap();
            for k in 0..rows {
                let r = if down { rows - 1 - k } else { k };
                assert_eq!(c.read_u64(1, x.offset_by(r * stride * PAGE)).unwrap(), r);
            }
            let s = c.node(1).stats();
            let what = format!("stride {stride}, down {down}");
            assert!(
                s.pages_fetched <= 4,
                "{what}: {} demand fetches",
                s.pages_fetched
            );
            // The first two faults' guesses (4 pages each, up) and the walk's last window.
            let wasted = s.prefetch_requested - s.prefetch_used;
            assert!(wasted <= 2 * 4 + 64, "{what}: {wasted} pages never read");
            requests.push(s.getp_sent);
            faults.push(s.read_faults_local);
        }
        // A read fault on a prefetched page opens the prefetched pages after it, or, walking
        // down, those before it: one fault per 64 pages either way (one per page before).
        assert!(
            faults[1] <= faults[0] + 4,
            "stride {stride}: {} faults on prefetched pages up, {} down",
            faults[0],
            faults[1]
        );
        // Down, a window goes in pieces of 64 pages, the window's largest here: as many, but
        // for the two demand faults before the walk is seen (up, the first one's window is
        // the walk's).
        assert!(
            requests[1] <= requests[0] + 4,
            "stride {stride}: {} requests up, {} down",
            requests[0],
            requests[1]
        );
    }
}

/// A thread walking down two arrays in step, reading one and writing the other (`y[i] =
/// x[i]` from the end), and down an array's two halves in step: its demand faults alternate
/// between the walks, yet each walk's stride is found among the thread's last six demand faults
/// (two of them equally spaced downwards with the new one). Before, every page was a demand
/// fault (an outside attack: 8,192 of 8,192).
#[test]
fn walks_down_in_step_are_each_read_ahead() {
    let pages = 600u64;
    let mut c = Cluster::new(2, 19, small_windows);
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    let y = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    for p in 0..pages {
        c.write_u64(0, x.offset_by(p * PAGE), p).unwrap();
    }
    c.barrier().unwrap();
    for p in (0..pages).rev() {
        let v = c.read_u64(1, x.offset_by(p * PAGE)).unwrap();
        assert_eq!(v, p);
        c.write_u64(1, y.offset_by(p * PAGE), v + 1).unwrap();
    }
    let s = c.node(1).stats();
    assert!(
        s.pages_fetched <= 8,
        "{} demand fetches for two walks down of {pages} pages",
        s.pages_fetched
    );
    // The home writes x again: node 1's copies go at the barrier.
    for p in 0..pages {
        c.write_u64(0, x.offset_by(p * PAGE), 1000 + p).unwrap();
    }
    c.barrier().unwrap();
    for p in (0..pages).step_by(37) {
        assert_eq!(c.read_u64(0, y.offset_by(p * PAGE)).unwrap(), p + 1);
    }
    // One array's two halves, in step, from their ends.
    let before = c.node(1).stats().pages_fetched;
    let half = pages / 2;
    for k in (0..half).rev() {
        assert_eq!(c.read_u64(1, x.offset_by(k * PAGE)).unwrap(), 1000 + k);
        let q = half + k;
        assert_eq!(c.read_u64(1, x.offset_by(q * PAGE)).unwrap(), 1000 + q);
    }
    let demand = c.node(1).stats().pages_fetched - before;
    assert!(
        demand <= 8,
        "{demand} demand fetches for two halves walked down in step"
    );
    // Again, one page in 5 of each half: two strided walks down in step.
    for p in 0..pages {
        c.write_u64(0, x.offset_by(p * PAGE), 2000 + p).unwrap();
    }
    c.barrier().unwrap();
    let before = c.node(1).stats().clone();
    for k in (0..half).rev().step_by(5) {
        assert_eq!(c.read_u64(1, x.offset_by(k * PAGE)).unwrap(), 2000 + k);
        let q = half + k;
        assert_eq!(c.read_u64(1, x.offset_by(q * PAGE)).unwrap(), 2000 + q);
    }
    let s = c.node(1).stats();
    let demand = s.pages_fetched - before.pages_fetched;
    // Pages asked for ahead and not read (yet): what this pass added.
    let unread = |s: &dsm_core::Stats| s.prefetch_requested as i64 - s.prefetch_used as i64;
    let wasted = unread(s) - unread(&before);
    assert!(
        demand <= 8 && wasted <= 64,
        "{demand} demand fetches and {wasted} pages never read for two strided walks down in step"
    );
}

/// A reader walking a column of an array the home wrote (one page in every 12), by demand
/// faults or by strided read-ahead: the home starts tracking the pages it serves with the
/// pages it wrote untracked and never served between them, so its array stays a few runs of
/// one protection (a kernel mapping each), not one run per page served. A
/// home write to such a neighbour afterwards is tracked: it reaches the reader after a barrier.
#[test]
fn a_column_walk_leaves_the_homes_pages_in_few_runs_of_one_protection() {
    let (stride, rows) = (12u64, 100u64);
    for prefetch in [false, true] {
        let mut c = Cluster::new(2, 13, |cfg| {
            cfg.prefetch.enabled = prefetch;
            cfg.prefetch.prefetch_pages = 4;
            cfg.prefetch.read_ahead_max_pages = 64;
            cfg.cache_pages = 8192;
        });
        let x = c
            .alloc(AllocPolicy::OnNode(NodeId(0)), rows * stride * PAGE)
            .unwrap();
        for p in 0..rows * stride {
            c.write_u64(0, x.offset_by(p * PAGE), p).unwrap();
        }
        c.barrier().unwrap();
        for r in 0..rows {
            let p = r * stride;
            assert_eq!(c.read_u64(1, x.offset_by(p * PAGE)).unwrap(), p);
        }
        // Let every grant be sent and every serve settled.
        for _ in 0..20 {
            c.lock(0, 0).unwrap();
            c.unlock(0, 0).unwrap();
        }
        let first = x.page().0;
        let m = c.node(0).memory();
        let prots: Vec<Prot> = (first..first + (rows * stride) as u32)
            .map(|q| m.prot(PageNum(q)))
            .collect();
        let runs = 1 + prots.windows(2).filter(|w| w[0] != w[1]).count();
        // The column's first page and the pages after its last stay open.
        assert!(
            runs <= 3,
            "prefetch {prefetch}: the home's {} pages in {runs} runs of one protection",
            prots.len()
        );
        // A page between two served ones, written by the home now: tracked, so it reaches the
        // reader (which fetched it never) and a served one written too.
        let (between, served) = (5 * stride + 3, 6 * stride);
        c.write_u64(0, x.offset_by(between * PAGE), 7_000).unwrap();
        c.write_u64(0, x.offset_by(served * PAGE), 7_001).unwrap();
        c.barrier().unwrap();
        assert_eq!(c.read_u64(1, x.offset_by(between * PAGE)).unwrap(), 7_000);
        assert_eq!(c.read_u64(1, x.offset_by(served * PAGE)).unwrap(), 7_001);
    }
}

/// A home lends its window runs (the transport reads them when it sends them, and again should
/// it send them again): while a reader streams the home's pages, the home writes some of them,
/// and each run is read from the home's memory when sent and again when delivered (the
/// simulator's model of a late send). Whatever bytes the reader got, granted or newer, after
/// the barrier it reads the home's writes.
#[test]
fn lent_runs_read_late_still_leave_the_reader_with_every_write_of_the_home() {
    let pages = 48u64;
    let (mut lent, mut newer) = (0, 0);
    for seed in 0..150 {
        let mut c = Cluster::new(2, seed, |cfg| {
            cfg.prefetch.prefetch_pages = 8;
            cfg.prefetch.read_ahead_max_pages = 32;
        });
        c.lend_runs(true);
        let x = c
            .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
            .unwrap();
        for p in 0..pages {
            c.write_u64(0, x.offset_by(p * PAGE), p).unwrap();
        }
        c.barrier().unwrap();
        for p in 0..pages {
            c.push(1, 0, Op::Read(x.offset_by(p * PAGE + 8)));
        }
        let written: Vec<u64> = (0..pages).filter(|p| (p + seed) % 5 == 0).collect();
        for &p in &written {
            c.push(0, 0, Op::Write(x.offset_by(p * PAGE + 8), 1_000 + p));
        }
        c.push_all(Op::Barrier);
        c.run().unwrap();
        for p in 0..pages {
            let want = if written.contains(&p) { 1_000 + p } else { 0 };
            let got = c.read_u64(1, x.offset_by(p * PAGE + 8)).unwrap();
            assert_eq!(got, want, "seed {seed}, page {p}");
        }
        lent += c.node(0).stats().pages_lent;
        newer += c.lent_read_newer;
    }
    assert!(lent > 0, "the home lent no run");
    assert!(
        newer > 0,
        "no lent run was delivered with bytes newer than it was sent with"
    );
}

/// A walk that only looks strided (two equal steps, then another) falls back to sequential
/// read-ahead, and a sequential stream after a strided walk is read ahead page by page again.
#[test]
fn a_broken_stride_falls_back_to_sequential_read_ahead() {
    let mut c = Cluster::new(2, 12, small_windows);
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), 2000 * PAGE)
        .unwrap();
    for p in 0..2000 {
        c.write_u64(0, x.offset_by(p * PAGE), p).unwrap();
    }
    c.barrier().unwrap();
    // Strided: 0, 10, 20 find the stride, 30.. follow it.
    for p in [0u64, 10, 20, 30, 40, 50] {
        assert_eq!(c.read_u64(1, x.offset_by(p * PAGE)).unwrap(), p);
    }
    // Then a sequential stream from page 1000: every page, by read-ahead after its start.
    let before = c.node(1).stats().pages_fetched;
    for p in 1000..1400 {
        assert_eq!(c.read_u64(1, x.offset_by(p * PAGE)).unwrap(), p);
    }
    let demand = c.node(1).stats().pages_fetched - before;
    assert!(
        demand <= 2,
        "{demand} demand fetches in a sequential stream after a stride"
    );
}

/// Four (and forty) threads of node 1 read their own parts of an array homed on node 0, in
/// order, at the same time (a parallel loop): each walk is read ahead as a stream of its own.
/// With one read-ahead state per node the threads' demand faults restarted each other's
/// windows: 130 demand fetches and 200 requests for the 1,024 pages of 4 threads (5 and 32
/// with a stream each); with 16 walks at most, 20 threads fetched every page on demand.
#[test]
fn threads_reading_their_own_parts_are_each_read_ahead() {
    for threads in [4usize, 40] {
        threads_read_their_own_parts(threads);
    }
}

fn threads_read_their_own_parts(threads: usize) {
    let part = 256u64;
    let mut c = Cluster::new(2, 41, small_windows);
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), threads as u64 * part * PAGE)
        .unwrap();
    for p in 0..threads as u64 * part {
        c.write_u64(0, x.offset_by(p * PAGE), p).unwrap();
    }
    c.barrier().unwrap();
    c.set_threads(1, threads);
    for t in 0..threads {
        for p in t as u64 * part..(t as u64 + 1) * part {
            c.push(1, t, Op::Read(x.offset_by(p * PAGE)));
        }
    }
    c.run().unwrap();
    let read: Vec<(GlobalAddr, u64)> = c.reads[1].clone();
    assert_eq!(read.len(), threads * part as usize);
    for (addr, v) in read {
        assert_eq!(v, (addr.0 - x.0) / PAGE, "the word at {addr:?}");
    }
    let s = c.node(1).stats();
    // A demand fetch to start each walk, and a few more where a walk outruns its read-ahead
    // while the windows are small.
    assert!(
        s.pages_fetched <= 3 * threads as u64,
        "{} demand fetches for {threads} walks",
        s.pages_fetched
    );
    assert!(
        s.getp_sent <= 16 * threads as u64,
        "{} requests for {threads} walks",
        s.getp_sent
    );
}

/// Eight threads of node 1 take 8-page chunks of an array in turn (an OpenMP loop's
/// `schedule(static, 8)` or `dynamic`): each faults at its chunk's start, a little past what the
/// node's walk asked for, and the walk goes on from there, gap included, its window growing for
/// all of them: 128 demand fetches and 204 requests for the 4,096 pages. With a walk per
/// thread's faults, 649 and 1,052 (before the streams, 699 and 892).
#[test]
fn threads_taking_chunks_in_turn_are_read_ahead_as_one_walk() {
    let (threads, chunk, pages) = (8u64, 8u64, 4096u64);
    let mut c = Cluster::new(2, 81, small_windows);
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    for p in 0..pages {
        c.write_u64(0, x.offset_by(p * PAGE), p).unwrap();
    }
    c.barrier().unwrap();
    c.set_threads(1, threads as usize);
    for p in 0..pages {
        let t = (p / chunk) % threads;
        c.push(1, t as usize, Op::Read(x.offset_by(p * PAGE)));
    }
    c.run().unwrap();
    assert_eq!(c.reads[1].len(), pages as usize);
    for &(addr, v) in &c.reads[1] {
        assert_eq!(v, (addr.0 - x.0) / PAGE, "the word at {addr:?}");
    }
    let s = c.node(1).stats();
    assert!(s.pages_fetched <= 160, "{} demand fetches", s.pages_fetched);
    assert!(s.getp_sent <= 300, "{} requests", s.getp_sent);
}

/// A thread's own jumps are not taken for a walk it outran (a review's finding against the
/// first version of the rule above): a column walk at a stride of 12 or 16 pages, whose second
/// fault fell within the first window's reach of its first, is found as a stride (the walk,
/// doubling at each fault, fetched all 8,192 pages to read 512).
#[test]
fn a_threads_own_jumps_do_not_continue_its_walk() {
    let pages = 8192u64;
    for stride in [12u64, 16] {
        let mut c = Cluster::new(2, 7, |_| {});
        let x = c
            .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
            .unwrap();
        c.barrier().unwrap();
        for p in (0..pages).step_by(stride as usize) {
            c.push(1, 0, Op::Read(x.offset_by(p * PAGE)));
        }
        c.run().unwrap();
        let s = c.node(1).stats();
        let read = pages.div_ceil(stride);
        assert!(
            s.prefetch_requested < 2 * read,
            "stride {stride}: {} pages asked ahead to read {read}",
            s.prefetch_requested
        );
    }
}

/// A reader of the tails of allocations in turn (lu's panels: the end of each block row's
/// allocation, the pages before them another node's left columns) carries its walk's window
/// from one tail to the next, instead of starting each at `prefetch_pages` (52 requests for
/// the 24 tails, 144 before); no page of an allocation is asked for on the strength of
/// another's.
#[test]
fn a_walk_into_the_next_allocation_keeps_its_window() {
    let (allocs, size, tail) = (24u64, 128u64, 96u64);
    let mut c = Cluster::new(2, 5, small_windows);
    let xs: Vec<GlobalAddr> = (0..allocs)
        .map(|_| {
            c.alloc(AllocPolicy::OnNode(NodeId(0)), size * PAGE)
                .unwrap()
        })
        .collect();
    c.barrier().unwrap();
    for x in &xs {
        for p in size - tail..size {
            c.push(1, 0, Op::Read(x.offset_by(p * PAGE)));
        }
    }
    c.run().unwrap();
    let s = c.node(1).stats();
    // Only the tails: nothing before them.
    assert_eq!(
        s.prefetch_requested + s.pages_fetched,
        allocs * tail,
        "{s:?}"
    );
    assert!(s.getp_sent <= 3 * allocs, "{} requests", s.getp_sent);
}

/// Continuing a walk never pulls in what nobody here reads (a third review's findings against
/// the second version of the rules above): a walk carried from a long stream into allocation
/// after allocation of which a few pages each are read (it fetched each one to its end: 17,408
/// pages for 2,560 read; 4,224 before the rules), and two threads of a node taking their chunks
/// in turn among other nodes' (the others' chunks fetched: 3,478 pages for 1,024 read; 1,697
/// before the rules).
#[test]
fn a_continued_walk_does_not_fetch_what_nobody_here_reads() {
    let mut c = Cluster::new(2, 5, |_| {});
    let big = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), 2048 * PAGE)
        .unwrap();
    let xs: Vec<GlobalAddr> = (0..128)
        .map(|_| c.alloc(AllocPolicy::OnNode(NodeId(0)), 128 * PAGE).unwrap())
        .collect();
    c.barrier().unwrap();
    for p in 0..2048 {
        c.push(1, 0, Op::Read(big.offset_by(p * PAGE)));
    }
    for x in &xs {
        for p in 8..12 {
            c.push(1, 0, Op::Read(x.offset_by(p * PAGE)));
        }
    }
    c.run().unwrap();
    let s = c.node(1).stats();
    let fetched = s.pages_fetched + s.prefetch_requested;
    assert!(fetched <= 5_000, "{fetched} pages fetched to read 2,560");

    let (pages, chunk, all_threads) = (4096u64, 16u64, 8u64);
    let mut c = Cluster::new(2, 81, |_| {});
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    c.barrier().unwrap();
    c.set_threads(1, 2);
    for p in 0..pages {
        let t = (p / chunk) % all_threads;
        if t < 2 {
            c.push(1, t as usize, Op::Read(x.offset_by(p * PAGE)));
        }
    }
    c.run().unwrap();
    let s = c.node(1).stats();
    let fetched = s.pages_fetched + s.prefetch_requested;
    assert!(fetched <= 2_000, "{fetched} pages fetched to read 1,024");
}

/// One thread reads two arrays homed on node 0 in step (`a[i] + b[i]`): both walks are read
/// ahead. With one read-ahead state per node, each array's demand faults restarted the other's
/// window: 18 demand fetches and 63 requests for the 800 pages (2 and 22 with a stream each).
#[test]
fn a_thread_reading_two_arrays_in_step_reads_both_ahead() {
    let pages = 400u64;
    let mut c = Cluster::new(2, 42, small_windows);
    let a = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    let b = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    for p in 0..pages {
        c.write_u64(0, a.offset_by(p * PAGE), p).unwrap();
        c.write_u64(0, b.offset_by(p * PAGE), 1_000_000 + p)
            .unwrap();
    }
    c.barrier().unwrap();
    for p in 0..pages {
        assert_eq!(c.read_u64(1, a.offset_by(p * PAGE)).unwrap(), p);
        assert_eq!(c.read_u64(1, b.offset_by(p * PAGE)).unwrap(), 1_000_000 + p);
    }
    let s = c.node(1).stats();
    assert!(
        s.pages_fetched <= 4,
        "{} demand fetches for two walks",
        s.pages_fetched
    );
    assert!(s.getp_sent <= 32, "{} requests", s.getp_sent);
}

#[test]
fn a_read_ahead_window_is_protected_at_the_home_before_it_is_copied() {
    // A GETP for several pages is served protect-first: the home's untracked pages are tracked
    // before their bytes are copied, so a home write right after the grants is a tracked write
    // (never one found by comparing at settle time, which the single-page path may need), and
    // it invalidates the copy at the next barrier. By seed, the settle of a single-page serve
    // would come before or after node 0's write.
    for seed in 0..40 {
        let mut c = Cluster::new(2, seed, |c| {
            c.prefetch.prefetch_pages = 4;
            c.prefetch.max_checking_pages = 4;
        });
        let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 5 * PAGE).unwrap();
        for p in 0..5 {
            c.write_u64(0, x.offset_by(p * PAGE), p + 1).unwrap(); // untracked
        }
        assert_eq!(c.read_u64(1, x).unwrap(), 1, "seed {seed}");
        assert_eq!(c.node(1).stats().prefetch_requested, 4, "seed {seed}");
        c.write_u64(0, x.offset_by(2 * PAGE), 30).unwrap();
        c.barrier().unwrap();
        assert_eq!(
            c.read_u64(1, x.offset_by(2 * PAGE)).unwrap(),
            30,
            "seed {seed}"
        );
        assert_eq!(
            c.read_u64(1, x.offset_by(3 * PAGE)).unwrap(),
            4,
            "seed {seed}"
        );
        assert_eq!(
            c.node(0).stats().home_writes_found_at_settle,
            0,
            "seed {seed}: a write after a protect-first serve was found by comparing"
        );
    }
}

#[test]
fn a_home_write_under_a_second_lock_reaches_a_node_holding_an_old_copy() {
    // Node 1's copy survives node 0's release of lock 1 (node 1 never acquires it); node 0's
    // later write under lock 2 reaches node 1 through lock 2.
    for seed in 0..10 {
        let (mut c, x) = cluster_homed_on_0(2, 1, seed);
        assert_eq!(c.read_u64(1, x).unwrap(), 0);
        c.lock(0, 1).unwrap();
        c.write_u64(0, x, 1).unwrap();
        c.unlock(0, 1).unwrap();
        c.lock(0, 2).unwrap();
        c.unlock(0, 2).unwrap();
        c.lock(0, 2).unwrap();
        c.write_u64(0, x, 2).unwrap();
        c.unlock(0, 2).unwrap();
        c.lock(1, 2).unwrap();
        assert_eq!(c.read_u64(1, x).unwrap(), 2, "seed {seed}");
        c.unlock(1, 2).unwrap();
    }
}

#[test]
fn a_barrier_makes_every_write_visible_everywhere() {
    let mut c = Cluster::new(4, 6, |_| {});
    let base = c
        .alloc(
            AllocPolicy::Cyclic {
                block_bytes: PAGE,
                start: NodeId(0),
            },
            8 * PAGE,
        )
        .unwrap();
    for n in 0..4u16 {
        for p in 0..8u64 {
            c.push(
                n,
                0,
                Op::Write(
                    base.offset_by(p * PAGE + 8 * u64::from(n)),
                    u64::from(n) * 100 + p,
                ),
            );
        }
    }
    c.run().unwrap();
    c.barrier().unwrap();
    for reader in 0..4u16 {
        for n in 0..4u16 {
            for p in 0..8u64 {
                let v = c
                    .read_u64(reader, base.offset_by(p * PAGE + 8 * u64::from(n)))
                    .unwrap();
                assert_eq!(v, u64::from(n) * 100 + p);
            }
        }
    }
}

#[test]
fn a_writer_alone_on_a_page_keeps_its_copy_across_a_barrier() {
    let (mut c, x) = cluster_homed_on_0(2, 1, 7);
    c.write_u64(1, x, 3).unwrap();
    c.barrier().unwrap();
    assert_eq!(c.node(1).page_state(x.page()), PageState::ReadOnly);
    assert_eq!(c.node(1).stats().invalidations, 0);
}

#[test]
fn wait_synchronises_without_moving_data() {
    let (mut c, x) = cluster_homed_on_0(3, 1, 8);
    c.write_u64(1, x, 3).unwrap();
    c.push_all(Op::Wait);
    c.run().unwrap();
    assert_eq!(c.total_stats().diffs_sent, 0);
    assert_eq!(c.node(0).stats().waits, 1);
}

#[test]
fn setcv_wakes_a_waiter_that_then_sees_the_writes_before_it() {
    let (mut c, x) = cluster_homed_on_0(3, 1, 9);
    assert_eq!(c.read_u64(2, x).unwrap(), 0);
    c.push(2, 0, Op::WaitCv(CvId(3)));
    c.push(2, 0, Op::Read(x));
    c.push(1, 0, Op::Write(x, 77));
    c.push(1, 0, Op::SetCv(CvId(3)));
    c.run().unwrap();
    assert_eq!(c.reads[2].last().unwrap().1, 77);
}

#[test]
fn resetcv_makes_later_waiters_block_until_the_next_set() {
    let (mut c, _) = cluster_homed_on_0(2, 1, 10);
    c.push(0, 0, Op::SetCv(CvId(1)));
    c.run().unwrap();
    c.push(1, 0, Op::WaitCv(CvId(1))); // set: returns at once
    c.run().unwrap();
    c.push(0, 0, Op::ResetCv(CvId(1)));
    c.run().unwrap();
    c.push(1, 0, Op::WaitCv(CvId(1)));
    assert!(matches!(c.run(), Err(SimError::Stuck { .. })));
    c.push(0, 0, Op::SetCv(CvId(1)));
    c.run().unwrap();
}

#[test]
fn nested_locks_carry_their_own_write_notices() {
    let (mut c, x) = cluster_homed_on_0(3, 2, 11);
    let y = x.offset_by(PAGE);
    c.lock(1, 1).unwrap();
    c.lock(1, 2).unwrap();
    c.write_u64(1, x, 1).unwrap();
    c.unlock(1, 2).unwrap();
    c.write_u64(1, y, 2).unwrap();
    c.unlock(1, 1).unwrap();
    c.lock(2, 1).unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 1);
    assert_eq!(c.read_u64(2, y).unwrap(), 2);
}

#[test]
fn the_same_lock_twice_by_one_thread_is_an_error() {
    let (mut c, _) = cluster_homed_on_0(2, 1, 12);
    c.lock(1, 4).unwrap();
    c.push(1, 0, Op::Lock(LockId(4)));
    assert!(matches!(
        c.run(),
        Err(SimError::Usage {
            error: UsageError::LockAlreadyHeld(LockId(4)),
            ..
        })
    ));
}

#[test]
fn unlocking_a_lock_not_held_and_bad_ids_are_errors() {
    let mut n = Node::new(CoreConfig::new(NodeId(0), 1), VecMemory::new());
    let w = WaiterId(0);
    assert_eq!(
        n.release(Time(0), LockId(3), w),
        Err(UsageError::LockNotHeld(LockId(3)))
    );
    assert_eq!(
        n.acquire(Time(0), LockId(64), w),
        Err(UsageError::BadLock(64))
    );
    assert_eq!(n.waitcv(Time(0), CvId(64), w), Err(UsageError::BadCv(64)));
    assert_eq!(
        n.handle_fault(Time(0), PageNum(0), Access::Read, w),
        Err(UsageError::Unallocated { page: PageNum(0) })
    );
}

#[test]
fn lock_requests_go_to_lock_mod_nodes() {
    let (mut c, _) = cluster_homed_on_0(3, 1, 13);
    c.trace = Some(Vec::new());
    c.lock(0, 5).unwrap();
    c.unlock(0, 5).unwrap();
    assert_eq!(
        kinds(c.trace.as_ref().unwrap()),
        vec![
            (0, 2, MsgKind::Acquire),
            (2, 0, MsgKind::AcquireGrant),
            (0, 2, MsgKind::Release)
        ]
    );
}

#[test]
fn two_threads_faulting_on_one_page_share_one_request() {
    let (mut c, x) = cluster_homed_on_0(2, 1, 14);
    c.set_threads(1, 2);
    c.push(1, 0, Op::Read(x));
    c.push(1, 1, Op::Read(x.offset_by(8)));
    // Both threads fault before any message moves: run one step of each first.
    c.run().unwrap();
    let s = c.node(1).stats();
    assert_eq!(s.getp_sent, 1, "{s:?}");
    assert_eq!(s.read_faults_remote + s.read_faults_local, 2);
}

#[test]
fn threads_of_one_node_fetch_different_pages_concurrently() {
    let (mut c, x) = cluster_homed_on_0(2, 4, 15);
    c.set_threads(1, 4);
    for t in 0..4 {
        c.push(1, t, Op::Write(x.offset_by(t as u64 * PAGE), t as u64 + 1));
    }
    c.run().unwrap();
    assert_eq!(c.node(1).stats().getp_sent, 4);
    c.barrier().unwrap();
    for t in 0..4 {
        assert_eq!(c.read_u64(0, x.offset_by(t * PAGE)).unwrap(), t + 1);
    }
}

#[test]
fn a_small_cache_evicts_the_oldest_page_and_a_dirty_one_sends_its_diff_first() {
    let mut c = Cluster::new(2, 16, |c| {
        c.prefetch.enabled = false;
        c.cache_pages = 2;
    });
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 4 * PAGE).unwrap();
    c.lock(1, 0).unwrap();
    c.write_u64(1, x, 99).unwrap(); // dirty, cached
    for p in 1..4 {
        c.read_u64(1, x.offset_by(p * PAGE)).unwrap();
    }
    assert!(c.node(1).cached_pages() <= 2);
    let s = c.node(1).stats();
    assert_eq!(s.evictions, 2);
    assert_eq!(s.dirty_evictions, 1);
    c.unlock(1, 0).unwrap();
    c.lock(0, 0).unwrap();
    assert_eq!(c.read_u64(0, x).unwrap(), 99);
    // And node 1 reads its own write back from the home.
    assert_eq!(c.read_u64(1, x).unwrap(), 99);
}

#[test]
fn prefetch_brings_the_following_pages_in_one_request() {
    let mut c = Cluster::new(2, 17, |c| {
        c.prefetch.prefetch_pages = 4;
        c.prefetch.max_checking_pages = 4;
    });
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 5 * PAGE).unwrap();
    for p in 0..5 {
        c.read_u64(1, x.offset_by(p * PAGE)).unwrap();
    }
    c.barrier().unwrap(); // reports the pages the runtime opened by itself
    let s = c.node(1).stats();
    assert_eq!(s.getp_sent, 1);
    assert_eq!(s.prefetch_requested, 4);
    assert_eq!(s.prefetch_used, 4);
    assert_eq!(s.read_faults_remote, 1);
    // The first touch of a prefetched page opens the three after it too: one fault, not four.
    assert_eq!(s.read_faults_local, 1);
}

#[test]
fn touching_prefetched_pages_reads_further_ahead() {
    let mut c = Cluster::new(2, 26, |c| {
        c.prefetch.prefetch_pages = 4;
        c.prefetch.max_checking_pages = 8;
    });
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 32 * PAGE).unwrap();
    for p in 0..32 {
        c.read_u64(1, x.offset_by(p * PAGE)).unwrap();
    }
    c.barrier().unwrap(); // reports the pages the runtime opened by itself
    let s = c.node(1).stats();
    // One demand fetch at the start (and at most one near the end, where fewer than half a
    // window is left to ask for): every other window was asked for before it was reached.
    assert!(s.read_faults_remote <= 2, "{s:?}");
    assert_eq!(s.prefetch_used + s.read_faults_remote, 32);
    assert!(s.getp_sent <= 16, "{s:?}");
}

#[test]
fn a_barrier_fetches_again_the_copies_in_use_it_invalidates() {
    for seed in 0..10 {
        let mut c = Cluster::new(2, 40 + seed, one_page_ahead);
        let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE).unwrap();
        let y = x.offset_by(PAGE);
        // Node 1 reads page x (and gets page y prefetched, untouched).
        assert_eq!(c.read_u64(1, x).unwrap(), 0);
        c.write_u64(0, x, 7).unwrap();
        c.write_u64(0, y, 8).unwrap();
        c.barrier().unwrap();
        let before = c.node(1).stats().clone();
        // x was in use: fetched again at the barrier, so this read asks nothing more.
        assert_eq!(c.read_u64(1, x).unwrap(), 7, "seed {seed}");
        let after = c.node(1).stats().clone();
        assert_eq!(after.getp_sent, before.getp_sent, "seed {seed}: {after:?}");
        // y was only prefetched, never touched: not fetched again.
        assert_eq!(
            c.node(1).page_state(y.page()),
            PageState::Invalid,
            "seed {seed}"
        );
        assert_eq!(c.read_u64(1, y).unwrap(), 8);
    }
}

#[test]
fn copies_in_use_are_fetched_again_at_every_barrier() {
    // A boundary exchange: node 1 reads two of node 0's pages after every barrier. Once they
    // are in use, each barrier fetches both again, and no read waits for a GETP, even though
    // the second page is now opened along with the first (not touched by a fault of its own).
    for seed in 0..10 {
        let mut c = Cluster::new(2, 60 + seed, one_page_ahead);
        let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE).unwrap();
        let y = x.offset_by(PAGE);
        assert_eq!(c.read_u64(1, x).unwrap(), 0);
        assert_eq!(c.read_u64(1, y).unwrap(), 0);
        for round in 1..=4 {
            c.write_u64(0, x, round).unwrap();
            c.write_u64(0, y, 10 + round).unwrap();
            c.barrier().unwrap();
            let before = c.node(1).stats().getp_sent;
            assert_eq!(c.read_u64(1, x).unwrap(), round, "seed {seed}");
            assert_eq!(c.read_u64(1, y).unwrap(), 10 + round, "seed {seed}");
            let s = c.node(1).stats();
            assert_eq!(s.getp_sent, before, "seed {seed} round {round}: {s:?}");
        }
    }
}

#[test]
fn a_copy_used_every_other_interval_is_fetched_again_at_every_barrier() {
    // Red-black SOR's pattern: one colour's half-sweep reads a page of the neighbour, the other
    // does not. The refetch made at the barrier before an interval that leaves the page alone
    // is kept for the interval after, which reads it without a GETP; a copy left unused twice
    // in a row is no longer fetched.
    for seed in 0..10 {
        let mut c = Cluster::new(2, 80 + seed, one_page_ahead);
        let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
        assert_eq!(c.read_u64(1, x).unwrap(), 0);
        for round in 1..=6 {
            c.write_u64(0, x, round).unwrap();
            c.barrier().unwrap();
            if round % 2 == 0 {
                let before = c.node(1).stats().getp_sent;
                assert_eq!(c.read_u64(1, x).unwrap(), round, "seed {seed}");
                let s = c.node(1).stats();
                assert_eq!(s.getp_sent, before, "seed {seed} round {round}: {s:?}");
            }
        }
        // Unused twice in a row: the barrier lets the copy go.
        for round in 7..=9 {
            c.write_u64(0, x, round).unwrap();
            c.barrier().unwrap();
        }
        assert_eq!(c.node(1).page_state(x.page()), PageState::Invalid);
        let fetched = c.node(1).stats().prefetch_requested;
        c.write_u64(0, x, 10).unwrap();
        c.barrier().unwrap();
        assert_eq!(c.node(1).stats().prefetch_requested, fetched, "seed {seed}");
    }
}

#[test]
fn prefetch_crosses_homes_with_one_request_per_home() {
    let mut c = Cluster::new(3, 18, |c| {
        c.prefetch.prefetch_pages = 3;
        c.prefetch.max_checking_pages = 3;
    });
    // Pages homed 0, 1, 2, 0, 1, 2: node 1 reads page 0, and page 0's neighbours homed 0 and 2
    // come with it (its own are never asked for).
    let x = c
        .alloc(
            AllocPolicy::Cyclic {
                block_bytes: PAGE,
                start: NodeId(0),
            },
            6 * PAGE,
        )
        .unwrap();
    c.read_u64(1, x).unwrap();
    let s = c.node(1).stats();
    assert_eq!(s.getp_sent, 2);
    assert_eq!(s.prefetch_requested, 3);
}

#[test]
fn prefetch_stays_within_the_allocation() {
    let mut c = Cluster::new(2, 19, |c| {
        c.prefetch.prefetch_pages = 8;
        c.prefetch.max_checking_pages = 8;
    });
    // Two arrays on node 0, one after the other: reading the end of the first brings nothing of
    // the second.
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 4 * PAGE).unwrap();
    let y = c.alloc(AllocPolicy::OnNode(NodeId(0)), 8 * PAGE).unwrap();
    c.read_u64(1, x.offset_by(PAGE)).unwrap();
    let s = c.node(1).stats();
    assert_eq!((s.getp_sent, s.prefetch_requested), (1, 2), "{s:?}");
    assert_eq!(c.node(1).page_state(y.page()), PageState::Invalid);
    // Within the second, prefetch runs as far as it is allowed to.
    c.read_u64(1, y).unwrap();
    let s = c.node(1).stats();
    assert_eq!((s.getp_sent, s.prefetch_requested), (2, 9), "{s:?}");
}

#[test]
fn prefetch_off_fetches_one_page_per_fault() {
    let (mut c, x) = cluster_homed_on_0(2, 4, 19);
    for p in 0..4 {
        c.read_u64(1, x.offset_by(p * PAGE)).unwrap();
    }
    assert_eq!(c.node(1).stats().getp_sent, 4);
    assert_eq!(c.node(1).stats().prefetch_requested, 0);
}

#[test]
fn allocation_policies_place_homes_like_jiajia() {
    let mut c = Cluster::new(3, 20, |_| {});
    let a = c
        .alloc(
            AllocPolicy::Cyclic {
                block_bytes: 2 * PAGE,
                start: NodeId(1),
            },
            6 * PAGE,
        )
        .unwrap();
    let b = c.alloc(AllocPolicy::RoundRobin, 100).unwrap();
    let d = c.alloc(AllocPolicy::RoundRobin, PAGE + 1).unwrap();
    let homes = |c: &Cluster, addr: GlobalAddr, n: u32| -> Vec<u16> {
        (0..n)
            .map(|i| c.node(2).home_of(PageNum(addr.page().0 + i)).unwrap().0)
            .collect()
    };
    assert_eq!(homes(&c, a, 6), vec![1, 1, 2, 2, 0, 0]);
    assert_eq!(homes(&c, b, 1), vec![0]);
    assert_eq!(homes(&c, d, 2), vec![1, 1]);
    assert_eq!(d.0 - b.0, PAGE, "sizes are rounded up to pages");
    // Same addresses on every node.
    assert_eq!(c.node(0).allocated_pages(), c.node(2).allocated_pages());
}

#[test]
fn nodes_that_allocate_differently_are_stopped_at_the_next_barrier() {
    let mut c = Cluster::new(2, 21, |_| {});
    c.node_mut(0)
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE)
        .unwrap();
    c.node_mut(1)
        .alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE)
        .unwrap();
    let r = c.barrier();
    let Err(SimError::Aborted {
        error: error @ JobError::AllocMismatch { .. },
        ..
    }) = r
    else {
        panic!("{r:?}")
    };
    // Both nodes named, with their calls and pages.
    let text = error.to_string();
    assert!(
        text.contains("node 0 made 1 call of 1 page in all")
            && text.contains("node 1 made 1 call of 2 pages in all"),
        "{text}"
    );
}

#[test]
fn exit_waits_for_everyone_and_gives_node_0_every_nodes_statistics() {
    let (mut c, x) = cluster_homed_on_0(3, 1, 22);
    c.read_u64(2, x).unwrap();
    c.push_all(Op::Exit);
    c.run().unwrap();
    let stats = c.job_stats.clone().expect("node 0 reports statistics");
    assert_eq!(stats.len(), 3);
    assert_eq!(stats[2].getp_sent, 1);
    assert_eq!(stats[0].pages_served, 1);
}

#[test]
fn an_unanswered_page_request_ends_the_job_naming_the_home() {
    let mut c = Cluster::new(2, 23, |c| {
        c.prefetch.enabled = false;
        c.reply_timeout = Some(Duration::from_secs(10));
    });
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
    c.drop_per_mille = 1000;
    c.push(1, 0, Op::Read(x));
    match c.run() {
        Err(SimError::Aborted {
            node,
            error:
                JobError::NoReply {
                    peer,
                    what,
                    waited_ms,
                },
        }) => {
            assert_eq!((node, peer, what), (NodeId(1), NodeId(0), "GETP"));
            assert!(waited_ms >= 10_000);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// Drives two nodes by hand (no simulator) to force an interleaving.
fn pair() -> (Node<VecMemory>, Node<VecMemory>) {
    let mk = |i| {
        let mut cfg = CoreConfig::new(NodeId(i), 2);
        cfg.prefetch.enabled = false;
        let mut n = Node::new(cfg, VecMemory::new());
        n.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
        n
    };
    (mk(0), mk(1))
}

#[test]
fn a_grant_older_than_a_write_notice_is_fetched_again() {
    // Three nodes: page 0 homed at node 0, lock 2 managed by node 2 (a grant from the home
    // after its own notice would hold the write: see `Fetch::notified_by_asked`).
    let mut cfg = CoreConfig::new(NodeId(1), 3);
    cfg.prefetch.enabled = false;
    let mut n1 = Node::new(cfg, VecMemory::new());
    n1.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
    let t = Time(0);
    n1.handle_fault(t, PageNum(0), Access::Read, WaiterId(0))
        .unwrap();
    assert!(matches!(
        n1.poll_transmit().unwrap().msg,
        Msg::GetPage { .. }
    ));
    // Node 1 takes lock 2 and learns page 0 was written.
    n1.acquire(t, LockId(2), WaiterId(1)).unwrap();
    let _ = n1.poll_transmit();
    n1.handle_message(
        t,
        NodeId(2),
        Msg::AcquireGrant {
            lock: LockId(2),
            counter: 1,
            notices: vec![PageNum(0)],
            earlier: vec![],
        },
    )
    .unwrap();
    // The old grant arrives: it is not installed; the page is asked for again.
    n1.handle_message(
        t,
        NodeId(0),
        Msg::GetPageGrant {
            page: PageNum(0),
            data: RunData::Copied(Arc::from(&PageBuf::zeroed().0[..])),
            forwarded: false,
        },
    )
    .unwrap();
    assert_eq!(n1.page_state(PageNum(0)), PageState::Invalid);
    assert!(matches!(
        n1.poll_transmit().unwrap().msg,
        Msg::GetPage { .. }
    ));
    let mut fresh = PageBuf::zeroed();
    fresh.0[0] = 1;
    n1.handle_message(
        t,
        NodeId(0),
        Msg::GetPageGrant {
            page: PageNum(0),
            data: RunData::Copied(Arc::from(&fresh.0[..])),
            forwarded: false,
        },
    )
    .unwrap();
    assert_eq!(n1.memory().load_u64(PageNum(0), 0), 1);
    let resumed: Vec<_> = std::iter::from_fn(|| n1.poll_effect()).collect();
    assert!(resumed.contains(&Effect::Resume {
        waiter: WaiterId(0)
    }));
}

#[test]
fn messages_that_break_the_protocol_are_rejected_and_change_nothing() {
    let (mut n0, mut n1) = pair();
    let t = Time(0);
    let bogus = [
        Msg::GetPageGrant {
            page: PageNum(0),
            data: RunData::Copied(Arc::from(&PageBuf::zeroed().0[..])),
            forwarded: false,
        }, // not requested
        Msg::DiffGrant { id: 9 }, // nothing outstanding
        Msg::AcquireGrant {
            lock: LockId(0),
            counter: 1,
            notices: vec![],
            earlier: vec![],
        }, // not requested
        Msg::BarrierGrant {
            epoch: 0,
            notices: vec![],
        }, // not in a barrier
        Msg::Release {
            lock: LockId(1),
            epoch: 0,
            notices: vec![],
            earlier: vec![],
        }, // lock 1 not managed here
    ];
    for m in bogus {
        assert!(
            n1.handle_message(t, NodeId(0), m.clone()).is_err(),
            "{m:?} accepted"
        );
    }
    assert!(n1.poll_transmit().is_none());
    // A request for a page allocated here but homed elsewhere: the nodes' allocation calls
    // differ, and the job ends saying so (dropped, the asker's fault waited for ever).
    n1.handle_message(
        t,
        NodeId(0),
        Msg::GetPage {
            access: Access::Read,
            pages: vec![PageNum(0)],
            passed: 0,
        },
    )
    .unwrap();
    let effects: Vec<_> = std::iter::from_fn(|| n1.poll_effect()).collect();
    assert!(
        effects.iter().any(|e| matches!(
            e,
            Effect::Abort {
                error: JobError::HomeMismatch { .. }
            }
        )),
        "{effects:?}"
    );
    // At the home: a diff for a page past the region, a release of a lock nobody holds.
    assert!(
        n0.handle_message(
            t,
            NodeId(1),
            Msg::Diff {
                id: 0,
                diffs: vec![dsm_core::PageDiff {
                    page: PageNum(5),
                    runs: vec![]
                }]
            }
        )
        .is_err()
    );
    assert!(
        n0.handle_message(
            t,
            NodeId(1),
            Msg::Release {
                lock: LockId(0),
                epoch: 0,
                notices: vec![],
                earlier: vec![],
            }
        )
        .is_err()
    );
    // A sender that is not another node of the job.
    assert!(n0.handle_message(t, NodeId(7), Msg::ExitGrant).is_err());
    assert!(n0.handle_message(t, NodeId(0), Msg::ExitGrant).is_err());
    assert!(n0.poll_transmit().is_none());
}

#[test]
fn an_error_from_another_node_aborts_this_one() {
    let (mut n0, mut n1) = pair();
    n1.broadcast_error("matrix not symmetric");
    let tx = n1.poll_transmit().unwrap();
    assert_eq!(tx.to, NodeId(0));
    n0.handle_message(Time(0), NodeId(1), tx.msg).unwrap();
    assert_eq!(
        n0.poll_effect(),
        Some(Effect::Abort {
            error: JobError::Remote {
                from: NodeId(1),
                text: "matrix not symmetric".into()
            }
        })
    );
}

#[test]
fn a_dirty_page_named_by_an_acquire_sends_its_diff_before_dropping() {
    let (mut c, x) = cluster_homed_on_0(3, 1, 24);
    let y = x.offset_by(8);
    // Node 2 writes y under lock 2.
    c.lock(2, 2).unwrap();
    c.write_u64(2, y, 2).unwrap();
    c.unlock(2, 2).unwrap();
    // Node 1 writes x under lock 1 (page cached and dirty), then takes lock 2: the notice for
    // the page drops node 1's copy, whose diff must not be lost.
    c.lock(1, 1).unwrap();
    c.write_u64(1, x, 1).unwrap();
    c.lock(1, 2).unwrap();
    assert_eq!(c.read_u64(1, y).unwrap(), 2);
    assert_eq!(c.read_u64(1, x).unwrap(), 1);
    c.unlock(1, 2).unwrap();
    c.unlock(1, 1).unwrap();
    c.barrier().unwrap();
    assert_eq!(c.read_u64(0, x).unwrap(), 1);
    assert_eq!(c.read_u64(0, y).unwrap(), 2);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let run = |seed| {
        let mut c = Cluster::new(4, seed, |_| {});
        c.trace = Some(Vec::new());
        let x = c
            .alloc(
                AllocPolicy::Cyclic {
                    block_bytes: PAGE,
                    start: NodeId(0),
                },
                4 * PAGE,
            )
            .unwrap();
        for n in 0..4u16 {
            c.push(n, 0, Op::Lock(LockId(0)));
            c.push(n, 0, Op::Write(x.offset_by(u64::from(n) * PAGE), 1));
            c.push(n, 0, Op::Unlock(LockId(0)));
        }
        c.run().unwrap();
        kinds(c.trace.as_ref().unwrap())
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn a_page_request_that_arrives_before_the_home_allocated_waits_for_the_allocation() {
    let mut c = Cluster::new(2, 25, no_prefetch);
    // Node 1 allocates and touches the page before node 0 has made the same allocation.
    let x = c
        .node_mut(1)
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE)
        .unwrap();
    c.push(1, 0, Op::Write(x, 5));
    assert!(
        matches!(c.run(), Err(SimError::Stuck { .. })),
        "the request must wait, not fail"
    );
    c.node_mut(0)
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE)
        .unwrap();
    // The allocation answered the held request; a step of node 0 moves its outbox.
    c.push(0, 0, Op::Read(x));
    c.run().unwrap();
    c.barrier().unwrap();
    assert_eq!(c.read_u64(0, x).unwrap(), 5);
}

#[test]
fn with_one_sided_reads_a_home_write_after_a_copy_left_is_still_noticed() {
    // The home never hears of a one-sided read, so its pages must be write-tracked from the
    // start: node 1 reads x without a GETP reaching node 0, node 0 then writes x, and node 1
    // must see the new value after the barrier.
    for seed in 0..20 {
        let mut c = Cluster::new(2, seed, |cfg| {
            no_prefetch(cfg);
            cfg.remote_reads = true;
        });
        c.one_sided_reads = true;
        let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
        c.write_u64(0, x, 1).unwrap();
        c.barrier().unwrap();
        assert_eq!(c.read_u64(1, x).unwrap(), 1, "seed {seed}");
        assert_eq!(
            c.node(0).stats().pages_served,
            0,
            "the home's core served nothing"
        );
        c.write_u64(0, x, 2).unwrap();
        c.barrier().unwrap();
        assert_eq!(c.read_u64(1, x).unwrap(), 2, "seed {seed}");
    }
}

// ----- message passing (jia_send / jia_recv) -----

/// Every letter is received exactly once; letters from one sender with one tag arrive in the order
/// sent, whatever the network's interleaving and whichever filters the receives use; a receive
/// posted before its letter waits for it. Many seeds, 4 nodes, two threads each.
#[test]
fn letters_arrive_once_each_in_order_per_sender_and_tag_whatever_the_filters() {
    use dsm_core::sim::Rng;
    for seed in 0..200 {
        let n = 4u16;
        let mut c = Cluster::new(n, seed, no_prefetch);
        let mut rng = Rng::new(seed ^ 0x5eed);
        // Letters per (sender, receiver): tags 0..3, payload = (sender, sequence number).
        let per_pair = 6;
        for from in 0..n {
            for to in 0..n {
                for k in 0..per_pair {
                    let tag = (k % 3) as i32;
                    c.push(
                        from,
                        0,
                        Op::Send {
                            to: NodeId(to),
                            tag,
                            data: vec![from as u8, k as u8],
                        },
                    );
                }
            }
        }
        // Each receiver takes n * per_pair letters with exact and wildcard filters, from a second
        // thread, so receives are often posted before their letters are there.
        for to in 0..n {
            c.set_threads(to, 2);
            // Filters that are always satisfiable in any order: first the exact ones (one per
            // sender and tag, in a random order), then wildcards for the rest.
            let mut exact = Vec::new();
            for from in 0..n {
                for tag in 0..3 {
                    exact.push((from, tag));
                }
            }
            for i in (1..exact.len()).rev() {
                exact.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let mut ops = Vec::new();
            for &(from, tag) in &exact {
                ops.push(Op::Recv {
                    from: Some(NodeId(from)),
                    tag: Some(tag),
                });
            }
            // The rest with full wildcards (a narrower filter might find its letters taken).
            for _ in exact.len()..usize::from(n) * per_pair {
                ops.push(Op::Recv {
                    from: None,
                    tag: None,
                });
            }
            for op in ops {
                c.push(to, 1, op);
            }
        }
        c.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for to in 0..n {
            let got = &c.letters[usize::from(to)];
            assert_eq!(got.len(), usize::from(n) * per_pair, "seed {seed}");
            // Once each.
            let mut seen = std::collections::BTreeSet::new();
            for l in got {
                assert_eq!(l.data[0] as u16, l.from.0, "seed {seed}");
                assert!(seen.insert((l.from, l.data[1])), "seed {seed}: twice");
                assert_eq!(i32::from(l.data[1]) % 3, l.tag, "seed {seed}");
            }
            // In order per (sender, tag).
            for from in 0..n {
                for tag in 0..3 {
                    let seq: Vec<u8> = got
                        .iter()
                        .filter(|l| l.from.0 == from && l.tag == tag)
                        .map(|l| l.data[1])
                        .collect();
                    let mut sorted = seq.clone();
                    sorted.sort_unstable();
                    assert_eq!(seq, sorted, "seed {seed}: from {from} tag {tag}");
                }
            }
        }
        let sent = c.total_stats().msgs_sent[MsgKind::Send.index()];
        // Letters to oneself never touch the network.
        assert_eq!(sent, u64::from(n) * u64::from(n - 1) * per_pair as u64);
    }
}

#[test]
fn a_receive_nobody_answers_is_reported_stuck_and_a_bad_sender_is_refused() {
    let mut c = Cluster::new(2, 1, no_prefetch);
    c.push(
        1,
        0,
        Op::Recv {
            from: Some(NodeId(0)),
            tag: Some(9),
        },
    );
    c.push(
        0,
        0,
        Op::Send {
            to: NodeId(1),
            tag: 8,
            data: vec![1],
        },
    );
    assert!(matches!(c.run(), Err(SimError::Stuck { .. })));
    let mut c = Cluster::new(2, 1, no_prefetch);
    c.push(
        0,
        0,
        Op::Send {
            to: NodeId(2),
            tag: 0,
            data: vec![],
        },
    );
    assert!(matches!(
        c.run(),
        Err(SimError::Usage {
            error: UsageError::BadNode { node: 2, nodes: 2 },
            ..
        })
    ));
}

/// The pages threads faulted on last are kept when the cache makes room, however many pages
/// read-ahead brings with the next fault: the pages one access needs (an unaligned load across
/// two pages) are never evicted to fetch each other.
#[test]
fn a_faulted_page_is_not_evicted_by_the_next_faults_read_ahead() {
    let mut c = Cluster::new(2, 3, |cfg| {
        cfg.cache_pages = 4;
        cfg.prefetch.prefetch_pages = 2;
        cfg.prefetch.max_checking_pages = 2;
    });
    let base = c.alloc(AllocPolicy::OnNode(NodeId(0)), 16 * PAGE).unwrap();
    c.read_u64(1, base).unwrap();
    c.read_u64(1, GlobalAddr(base.0 + 8 * PAGE)).unwrap();
    assert!(c.node(1).stats().evictions > 0, "the cache made room");
    assert_eq!(c.node(1).page_state(base.page()), PageState::ReadOnly);
    assert_eq!(
        c.node(1).page_state(GlobalAddr(base.0 + 8 * PAGE).page()),
        PageState::ReadOnly
    );
}

/// Home migration: every page allocated on node 0, each node writing its own band between
/// barriers (the JIAJIA program that allocates everything with `jia_alloc`). The first barrier
/// moves each band's pages to their writer; from then on the bands are written at home: no
/// twin, no diff, no write notice for anybody else to act on.
#[test]
fn a_page_written_by_one_node_alone_moves_there_at_the_barrier_and_costs_no_diff_after() {
    let bands = 2u64;
    let mut c = Cluster::new(3, 7, |cfg| {
        no_prefetch(cfg);
        cfg.home_migration = true;
    });
    let base = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), 3 * bands * PAGE)
        .unwrap();
    let word = |n: u16, i: u64| base.offset_by((u64::from(n) * bands + i) * PAGE + 8 * i);
    for round in 1..=3u64 {
        for n in 0..3u16 {
            for i in 0..bands {
                c.push(n, 0, Op::Write(word(n, i), round * 100 + u64::from(n)));
            }
        }
        c.trace = Some(Vec::new());
        c.barrier().unwrap();
        let trace = kinds(c.trace.as_ref().unwrap());
        let migrations = trace
            .iter()
            .filter(|t| t.2 == MsgKind::MigrateGrant)
            .count();
        if round == 1 {
            // Node 0 grants itself by loopback: two on the wire.
            assert_eq!(migrations, 2, "a second round at the first barrier");
        } else {
            assert_eq!(migrations, 0, "nothing moves any more: {trace:?}");
        }
        for n in 0..3u16 {
            for i in 0..bands {
                let page = word(n, i).page();
                for m in 0..3 {
                    assert_eq!(c.node(m).home_of(page), Some(NodeId(n)), "{page} at {m}");
                }
            }
        }
    }
    let diffs_before = c.total_stats().diffs_sent;
    for n in 0..3u16 {
        for i in 0..bands {
            c.push(n, 0, Op::Write(word(n, i), 1000 + u64::from(n)));
        }
    }
    c.barrier().unwrap();
    assert_eq!(
        c.total_stats().diffs_sent,
        diffs_before,
        "bands written at home"
    );
    assert_eq!(c.node(1).stats().homes_moved_here, bands);
    assert_eq!(c.node(0).stats().homes_moved_here, 0);
    // Everyone reads everyone's band: the last values, from the new homes.
    for m in 0..3u16 {
        for n in 0..3u16 {
            for i in 0..bands {
                assert_eq!(c.read_u64(m, word(n, i)).unwrap(), 1000 + u64::from(n));
            }
        }
    }
}

/// A page two nodes write in the same epoch stays where it is.
#[test]
fn a_page_written_by_two_nodes_does_not_move() {
    let mut c = Cluster::new(2, 9, |cfg| {
        no_prefetch(cfg);
        cfg.home_migration = true;
    });
    let base = c.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
    // Node 1 holds a copy first: from then on the home's writes are tracked (before any copy
    // exists they are not, and the page would move to node 1 with them in its bytes).
    c.read_u64(1, base).unwrap();
    c.barrier().unwrap();
    c.push(0, 0, Op::Write(base, 1));
    c.push(1, 0, Op::Write(base.offset_by(8), 2));
    c.barrier().unwrap();
    assert_eq!(c.node(1).home_of(base.page()), Some(NodeId(0)));
    assert_eq!(c.read_u64(1, base).unwrap(), 1);
    assert_eq!(c.read_u64(0, base.offset_by(8)).unwrap(), 2);
}

/// Home migration and a second thread: node 1 alone writes a page homed at node 0, then one of
/// its threads enters the barrier while another writes the page under a lock. Where that write
/// was made during the barrier, node 1 vetoes the move and the page stays at node 0; otherwise it
/// moves. Either way the run is exact; over many interleavings, both happen.
#[test]
fn a_write_made_during_a_barrier_keeps_its_page_from_moving_and_is_not_lost() {
    let (mut vetoed, mut moved) = (0, 0);
    for seed in 0..300 {
        let mut c = Cluster::new(2, seed, |cfg| {
            no_prefetch(cfg);
            cfg.home_migration = true;
        });
        let p = c.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
        c.set_threads(1, 2);
        c.push(1, 0, Op::Write(p, 1));
        c.push(1, 0, Op::Barrier);
        c.push(1, 1, Op::Lock(LockId(5)));
        c.push(1, 1, Op::Write(p.offset_by(8), 2));
        c.push(1, 1, Op::Unlock(LockId(5)));
        c.push(0, 0, Op::Barrier);
        c.run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // The lock's write reached whichever node is the home now: everyone reads it after the
        // next barrier.
        let home = c.node(1).home_of(p.page());
        c.barrier().unwrap();
        for n in 0..2 {
            assert_eq!(c.read_u64(n, p.offset_by(8)).unwrap(), 2, "seed {seed}");
            assert_eq!(c.read_u64(n, p).unwrap(), 1, "seed {seed}");
        }
        match (home, c.node(1).stats().home_moves_vetoed) {
            (Some(NodeId(0)), 1) => vetoed += 1,
            (Some(NodeId(1)), 0) => moved += 1,
            other => panic!("seed {seed}: home and vetoes {other:?}"),
        }
    }
    assert!(vetoed > 0 && moved > 0, "vetoed {vetoed}, moved {moved}");
}

// ----- many readers: forwarding -----

/// Forwarding with no time limit (readers need not arrive within a few milliseconds).
fn forwarding(c: &mut CoreConfig) {
    c.forward_within = Some(Duration::from_secs(3600));
}

/// `pages` pages homed on node 0, page p holding 1000 + p in its first word, after a barrier.
fn pages_on_0(c: &mut Cluster, pages: u64) -> GlobalAddr {
    let x = c
        .alloc(AllocPolicy::OnNode(NodeId(0)), pages * PAGE)
        .unwrap();
    for p in 0..pages {
        c.write_u64(0, x.offset_by(p * PAGE), 1000 + p).unwrap();
    }
    c.barrier().unwrap();
    x
}

#[test]
fn many_readers_of_the_same_pages_are_served_by_the_nodes_that_hold_them() {
    let (nodes, pages) = (9u16, 64u64);
    let mut c = Cluster::new(nodes, 5, forwarding);
    let x = pages_on_0(&mut c, pages);
    let before = c.node(0).stats().pages_served;
    for n in 1..nodes {
        for p in 0..pages {
            c.push(n, 0, Op::Read(x.offset_by(p * PAGE)));
        }
    }
    c.run().unwrap();
    for n in 1..nodes {
        let got: Vec<u64> = c.reads[usize::from(n)].iter().map(|r| r.1).collect();
        assert_eq!(got, (1000..1000 + pages).collect::<Vec<_>>(), "node {n}");
    }
    let home = c.node(0).stats();
    let total = c.total_stats();
    let readers_pages = u64::from(nodes - 1) * pages;
    let served = home.pages_served - before;
    // Every reader got every page once, from the home or from a holder.
    assert_eq!(served + total.pages_forwarded, readers_pages);
    assert!(home.requests_forwarded > 0);
    // A holder serves at most 3 others: the home at least a quarter of the readers.
    assert!(
        served >= readers_pages / 4 && served <= readers_pages / 2,
        "the home sent {served} of {readers_pages} pages"
    );
}

#[test]
fn a_holder_whose_copy_was_written_refuses_and_the_home_sends_the_pages() {
    let mut c = Cluster::new(3, 6, forwarding);
    let x = pages_on_0(&mut c, 16);
    // Node 1 holds pages 0..9 (the fault and the first window)...
    assert_eq!(c.read_u64(1, x).unwrap(), 1000);
    // ...and writes page 1's second word: its copy is no longer the home's.
    c.write_u64(1, x.offset_by(PAGE + 8), 77).unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 1000);
    assert_eq!(c.read_u64(2, x.offset_by(PAGE)).unwrap(), 1001);
    assert_eq!(c.node(0).stats().requests_forwarded, 1);
    assert_eq!(c.node(1).stats().forwards_refused, 1);
    assert_eq!(c.node(1).stats().pages_forwarded, 0);
}

#[test]
fn a_home_write_ends_the_forwarding_of_the_pages_it_changed() {
    let mut c = Cluster::new(3, 7, forwarding);
    let x = pages_on_0(&mut c, 16);
    assert_eq!(c.read_u64(1, x).unwrap(), 1000);
    // The home writes page 3 (node 1 holds its old bytes) and releases.
    c.lock(0, 1).unwrap();
    c.write_u64(0, x.offset_by(3 * PAGE), 555).unwrap();
    c.unlock(0, 1).unwrap();
    // Node 2, after the lock, asks for pages 0..9: not forwarded to node 1's stale copies.
    c.lock(2, 1).unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 1000);
    assert_eq!(c.read_u64(2, x.offset_by(3 * PAGE)).unwrap(), 555);
    c.unlock(2, 1).unwrap();
    assert_eq!(c.node(0).stats().requests_forwarded, 0);
}

#[test]
fn a_diff_applied_at_the_home_ends_the_forwarding_of_its_page() {
    let mut c = Cluster::new(4, 8, forwarding);
    let x = pages_on_0(&mut c, 32);
    assert_eq!(c.read_u64(1, x).unwrap(), 1000);
    // Node 3 writes page 3 under a lock: its diff goes home at the unlock.
    c.lock(3, 1).unwrap();
    c.write_u64(3, x.offset_by(3 * PAGE), 666).unwrap();
    c.unlock(3, 1).unwrap();
    c.lock(2, 1).unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 1000);
    assert_eq!(c.read_u64(2, x.offset_by(3 * PAGE)).unwrap(), 666);
    c.unlock(2, 1).unwrap();
    assert_eq!(c.node(0).stats().requests_forwarded, 0);
}

#[test]
fn pages_a_home_has_not_changed_are_still_forwarded_after_an_unrelated_release() {
    // The control for the two tests above: without the write, node 2 is forwarded to node 1.
    let mut c = Cluster::new(3, 7, forwarding);
    let x = pages_on_0(&mut c, 16);
    assert_eq!(c.read_u64(1, x).unwrap(), 1000);
    c.lock(0, 1).unwrap();
    c.unlock(0, 1).unwrap();
    c.lock(2, 1).unwrap();
    assert_eq!(c.read_u64(2, x).unwrap(), 1000);
    assert_eq!(c.read_u64(2, x.offset_by(3 * PAGE)).unwrap(), 1003);
    c.unlock(2, 1).unwrap();
    assert_eq!(c.node(0).stats().requests_forwarded, 1);
    assert!(c.node(1).stats().pages_forwarded > 0);
}

/// A node that reads another node's word in a loop on plain loads sees no write of theirs
/// before an acquire of its own; the launcher has it drop its copies when it runs while the
/// others wait. Its next read fetches the home's bytes, and the page is told as read again with
/// other bytes; a page it wrote sends its diff first and keeps its writes; its own home pages
/// stay.
#[test]
fn dropped_copies_are_fetched_again_from_their_home() {
    let mut c = Cluster::new(2, 7, no_prefetch);
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 3 * PAGE).unwrap();
    let (y, z) = (x.offset_by(PAGE), x.offset_by(2 * PAGE));
    let own = c.alloc(AllocPolicy::OnNode(NodeId(1)), PAGE).unwrap();
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    assert_eq!(c.read_u64(1, z).unwrap(), 0);
    c.write_u64(1, y, 5).unwrap();
    c.write_u64(1, own, 6).unwrap();
    // Node 0 writes its home pages x and y (a word of another 64-byte line), and releases (so
    // the home's bytes are the new ones): node 1, which acquired nothing since, still reads its
    // copies.
    c.lock(0, 3).unwrap();
    c.write_u64(0, x, 1).unwrap();
    c.write_u64(0, y.offset_by(64), 2).unwrap();
    c.unlock(0, 3).unwrap();
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    assert_eq!(c.read_u64(1, y.offset_by(64)).unwrap(), 0);
    let now = c.now();
    assert_eq!(c.node_mut(1).drop_copies(now), 3, "x, y (written) and z");
    for p in [x, y, z] {
        assert_eq!(c.node(1).page_state(p.page()), PageState::Invalid);
    }
    assert_eq!(c.read_u64(1, x).unwrap(), 1, "fetched again from its home");
    assert_eq!(c.read_u64(1, y).unwrap(), 5, "its own write, diffed first");
    assert_eq!(c.read_u64(1, y.offset_by(64)).unwrap(), 2);
    assert_eq!(c.read_u64(1, z).unwrap(), 0);
    assert_eq!(c.read_u64(1, own).unwrap(), 6);
    assert_eq!(
        c.node_mut(1).take_dropped_changed(),
        vec![(x.page(), 0)],
        "x's line read came back changed; y's (the node's own write, diffed first) and z's did \
         not"
    );
    c.barrier().unwrap();
    assert_eq!(
        c.read_u64(0, y).unwrap(),
        5,
        "the written page's diff reached its home"
    );
}

/// What a read after a dropping is compared on is the byte read, not its 64-byte line: a word
/// another node wrote beside it, race-free, is not told; the word itself is.
#[test]
fn a_byte_read_again_is_told_not_its_neighbour_in_the_line() {
    let mut c = Cluster::new(2, 13, no_prefetch);
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE).unwrap();
    let y = x.offset_by(PAGE);
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    assert_eq!(c.read_u64(1, y).unwrap(), 0);
    c.write_u64(0, x.offset_by(8), 1).unwrap();
    c.write_u64(0, y.offset_by(56), 1).unwrap();
    c.write_u64(0, y.offset_by(64), 1).unwrap();
    c.write_u64(0, y, 2).unwrap();
    let now = c.now();
    assert_eq!(c.node_mut(1).drop_copies(now), 2);
    assert_eq!(c.read_u64(1, x).unwrap(), 0, "its neighbour changed");
    assert_eq!(c.read_u64(1, y).unwrap(), 2, "it changed");
    assert_eq!(c.node_mut(1).take_dropped_changed(), vec![(y.page(), 0)]);
}

/// A node told to send its writes home (the launcher's `FLUSH`) diffs its written copies of
/// other nodes' pages to their homes and keeps them, read-only: another node reads the write at
/// the home before any release; the node writes the copy again (a twin again), and its release
/// carries that write; a `REFRESH` after the flush still finds the copies to drop.
#[test]
fn written_copies_sent_home_stay_held_read_only() {
    let mut c = Cluster::new(2, 11, no_prefetch);
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE).unwrap();
    let y = x.offset_by(PAGE);
    let own = c.alloc(AllocPolicy::OnNode(NodeId(1)), PAGE).unwrap();
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    c.write_u64(1, y, 5).unwrap();
    c.write_u64(1, own, 6).unwrap();
    assert_eq!(c.read_u64(0, y).unwrap(), 0, "not released, not sent");
    let now = c.now();
    assert_eq!(c.node_mut(1).send_written_copies(now), 1, "y alone");
    assert_eq!(c.node(1).page_state(x.page()), PageState::ReadOnly);
    assert_eq!(c.node(1).page_state(y.page()), PageState::ReadOnly);
    assert_eq!(c.node(1).page_state(own.page()), PageState::ReadWrite);
    // Node 1's next step sends what the flush left in its outbox; the run ends quiet.
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    assert_eq!(c.read_u64(0, y).unwrap(), 5, "the diff reached the home");
    c.write_u64(1, y.offset_by(8), 7).unwrap();
    assert_eq!(c.node(1).page_state(y.page()), PageState::ReadWrite);
    let now = c.now();
    assert_eq!(c.node_mut(1).drop_copies(now), 2, "x and y, still held");
    c.barrier().unwrap();
    assert_eq!(c.read_u64(0, y).unwrap(), 5);
    assert_eq!(
        c.read_u64(0, y.offset_by(8)).unwrap(),
        7,
        "the write after the flush"
    );
    assert_eq!(c.read_u64(0, own).unwrap(), 6);
}

/// What the node compares a page read again with is the dropped copy's bytes as they came back,
/// not as the node wrote them since; and what another node legitimately changed before an
/// acquire of this node's is not told.
#[test]
fn a_page_read_again_is_told_only_for_bytes_another_node_wrote_unseen() {
    let mut c = Cluster::new(2, 9, no_prefetch);
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 3 * PAGE).unwrap();
    let (y, z) = (x.offset_by(PAGE), x.offset_by(2 * PAGE));
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    assert_eq!(c.read_u64(1, y).unwrap(), 0);
    assert_eq!(c.read_u64(1, z).unwrap(), 0);
    // z changes at its home, unseen by node 1, which writes it next: a write fault's fetch is
    // no read of the word that changed.
    c.write_u64(0, z, 4).unwrap();
    let now = c.now();
    assert_eq!(c.node_mut(1).drop_copies(now), 3);
    c.write_u64(1, z.offset_by(8), 5).unwrap();
    // Read again, then written by the node itself: the same bytes came back.
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    c.write_u64(1, x, 9).unwrap();
    assert_eq!(c.node_mut(1).take_dropped_changed(), vec![]);
    // y, dropped, is written by node 0 and released, then node 1 acquires: its read of the
    // new bytes is what the model promises, not a copy it kept.
    c.lock(0, 1).unwrap();
    c.write_u64(0, y, 7).unwrap();
    c.unlock(0, 1).unwrap();
    c.lock(1, 1).unwrap();
    assert_eq!(c.read_u64(1, y).unwrap(), 7);
    c.unlock(1, 1).unwrap();
    assert_eq!(c.node_mut(1).take_dropped_changed(), vec![]);
}

/// A node's own atomic operation on a word of a page it dropped (the launcher's `REFRESH`)
/// takes that page out of the comparison: the byte it then reads holds its own change, not an
/// unseen write of another node's (an outside attack's node, having added 1 to such a word,
/// was warned so).
#[test]
fn an_own_atomic_on_a_dropped_page_is_not_told_as_another_nodes_write() {
    let mut c = Cluster::new(2, 17, no_prefetch);
    let x = c.alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE).unwrap();
    let y = x.offset_by(PAGE);
    assert_eq!(c.read_u64(1, x).unwrap(), 0);
    assert_eq!(c.read_u64(1, y).unwrap(), 0);
    c.write_u64(0, y, 3).unwrap();
    let now = c.now();
    assert_eq!(c.node_mut(1).drop_copies(now), 2);
    let relaxed = AtomicOrder::default();
    assert_eq!(c.atomic(1, x, AtomicOp::FetchAdd(1), relaxed).unwrap(), 0);
    assert_eq!(c.read_u64(1, x).unwrap(), 1, "its own addition");
    assert_eq!(c.read_u64(1, y).unwrap(), 3, "another node's write, unseen");
    assert_eq!(
        c.node_mut(1).take_dropped_changed(),
        vec![(y.page(), 0)],
        "y told, not x"
    );
}
