//! Orders of delivery that a review of the protocol core found mishandled (each test failed
//! before its fix). Nodes are driven by hand so that the order of deliveries is the one the
//! case needs (every order used is one the network allows: FIFO per pair of nodes, any order
//! across pairs).

use dsm_core::{
    Access, AllocPolicy, AtomicOp, AtomicOrder, CoreConfig, CvId, Effect, GlobalAddr, JobError,
    Msg, Node, NodeId, PAGE_SIZE, PageNum, PageState, Time, VecMemory, WaiterId,
};

const PAGE: u64 = PAGE_SIZE as u64;

/// Delivers every message between `nodes` until none is left, except the ones `hold` keeps back
/// (returned, in order). Effects are collected per node.
fn pump(
    nodes: &mut [Node<VecMemory>],
    effects: &mut Vec<(usize, Effect)>,
    hold: &dyn Fn(usize, usize, &Msg) -> bool,
) -> Vec<(usize, usize, Msg)> {
    let mut held = Vec::new();
    loop {
        let mut any = false;
        for from in 0..nodes.len() {
            while let Some(tx) = nodes[from].poll_transmit() {
                let to = usize::from(tx.to.0);
                if hold(from, to, &tx.msg) {
                    held.push((from, to, tx.msg));
                    continue;
                }
                any = true;
                nodes[to]
                    .handle_message(Time(0), NodeId(from as u16), tx.msg)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            while let Some(e) = nodes[from].poll_effect() {
                effects.push((from, e));
            }
        }
        if !any {
            return held;
        }
    }
}

/// `count` nodes without prefetch that have allocated one page, homed at node 0.
fn nodes_with_one_page(count: u16) -> Vec<Node<VecMemory>> {
    let mk = |i| {
        let mut cfg = CoreConfig::new(NodeId(i), count);
        cfg.prefetch.enabled = false;
        let mut n = Node::new(cfg, VecMemory::new());
        n.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
        n
    };
    (0..count).map(mk).collect()
}

fn deliver(nodes: &mut [Node<VecMemory>], held: Vec<(usize, usize, Msg)>) {
    for (from, to, m) in held {
        nodes[to]
            .handle_message(Time(0), NodeId(from as u16), m)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

fn resumed(effects: &[(usize, Effect)], node: usize, w: u64) -> bool {
    effects.iter().any(|(n, e)| {
        *n == node
            && *e
                == Effect::Resume {
                    waiter: WaiterId(w),
                }
    })
}

/// A condition variable's manager records a set's write notices under the setter's epoch, as a
/// lock's manager records a release's (`Msg::SetCv::epoch`). It used its own: a manager that had
/// not yet had the last barrier's grant when a set came from a node that had tagged the notices
/// one epoch too old, and dropped them (`forget_before`) a barrier too early, at the grant of
/// the next barrier, while a node whose first thread still waited for that grant could have a
/// second thread in `waitcv`. That thread was granted without the notice and read its stale
/// copy, though the set happened before its wait.
///
/// Node 0 manages barriers, node 1 condition variable 1, node 2 sets it, node 3 (two
/// threads) waits on it; page P is homed at node 0.
#[test]
fn a_cv_set_reaching_a_manager_one_barrier_behind_keeps_its_notice_for_the_setters_epoch() {
    let mut nodes = nodes_with_one_page(4);
    nodes[3].note_threads(2);
    let p = PageNum(0);
    let t = Time(0);
    let mut fx = Vec::new();
    // Node 3 caches P (value 0).
    nodes[3]
        .handle_fault(t, p, Access::Read, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(nodes[3].page_state(p), PageState::ReadOnly);
    // Barrier 0; its grant to node 1 (the cv manager) is slow.
    for n in &mut nodes {
        n.barrier(t, WaiterId(0)).unwrap();
    }
    let late_grant = pump(&mut nodes, &mut fx, &|_, to, m| {
        to == 1 && matches!(m, Msg::BarrierGrant { .. })
    });
    assert_eq!(late_grant.len(), 1);
    // Node 2, in epoch 1, writes P and sets cv 1: its SETCV reaches node 1 before the grant.
    nodes[2]
        .handle_fault(t, p, Access::Write, WaiterId(1))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, to, m| {
        to == 1 && matches!(m, Msg::BarrierGrant { .. })
    });
    nodes[2].memory_mut().store_u64(p, 0, 42);
    nodes[2].setcv(t, CvId(1), WaiterId(1)).unwrap();
    let none = pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert!(none.is_empty());
    assert_eq!(nodes[0].memory().load_u64(p, 0), 42, "the diff is home");
    deliver(&mut nodes, late_grant);
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    // Barrier 1 (node 3's first thread); its grant to node 3 is slow.
    for n in &mut nodes {
        n.barrier(t, WaiterId(0)).unwrap();
    }
    let late_grant = pump(&mut nodes, &mut fx, &|_, to, m| {
        to == 3 && matches!(m, Msg::BarrierGrant { .. })
    });
    assert_eq!(late_grant.len(), 1);
    // Node 3's second thread waits on cv 1, which was set before: granted at once.
    fx.clear();
    nodes[3].waitcv(t, CvId(1), WaiterId(1)).unwrap();
    pump(&mut nodes, &mut fx, &|_, to, m| {
        to == 3 && matches!(m, Msg::BarrierGrant { .. })
    });
    assert!(resumed(&fx, 3, 1), "the wait returned: {fx:?}");
    // It reads P: its copy must not be the one from before node 2's write.
    let stale =
        nodes[3].page_state(p) != PageState::Invalid && nodes[3].memory().load_u64(p, 0) == 0;
    assert!(
        !stale,
        "node 3 reads P = 0 after waitcv returned, though node 2 wrote 42 before its setcv"
    );
}

/// An acquire atomic made while another thread of the node is in a barrier (called, grant not
/// yet in) is sent the word's notices from the node's own epoch on. The operation's one epoch
/// field was `epoch + awaiting_grant`, right for tagging a release but one too high for an
/// acquire's filter: writes released through the word in the current epoch were left out,
/// though this node's copies of them were still valid (the barrier's grant, which would drop
/// them, had not come). `Msg::Atomic` now carries the epoch and `in_barrier` apart.
///
/// Node 0 homes P and manages barriers; node 1 homes the flag word, writes P and
/// release-stores the flag; node 2 caches P, its first thread calls the barrier, its second
/// acquire-loads the flag, reads 1, then reads P.
#[test]
fn an_acquire_atomic_during_this_nodes_barrier_gets_the_notices_of_the_current_epoch() {
    let mk = |i| {
        let mut cfg = CoreConfig::new(NodeId(i), 3);
        cfg.prefetch.enabled = false;
        let mut n = Node::new(cfg, VecMemory::new());
        n.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
        n.alloc(AllocPolicy::OnNode(NodeId(1)), PAGE).unwrap();
        n
    };
    let mut nodes: Vec<Node<VecMemory>> = (0..3).map(mk).collect();
    nodes[2].note_threads(2);
    let (p, flag) = (PageNum(0), GlobalAddr(PAGE));
    let t = Time(0);
    let mut fx = Vec::new();
    nodes[2]
        .handle_fault(t, p, Access::Read, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(nodes[2].page_state(p), PageState::ReadOnly);
    // Node 1 writes P = 42, then stores 1 to the flag with release.
    nodes[1]
        .handle_fault(t, p, Access::Write, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    nodes[1].memory_mut().store_u64(p, 0, 42);
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (flag, 8),
            AtomicOp::Store(1),
            AtomicOrder::RELEASE,
        )
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(nodes[0].memory().load_u64(p, 0), 42, "the diff is home");
    // Node 2's first thread calls the barrier (the others have not: no grant).
    nodes[2].barrier(t, WaiterId(0)).unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    // Its second thread acquire-loads the flag.
    fx.clear();
    nodes[2]
        .atomic(
            t,
            WaiterId(1),
            (flag, 8),
            AtomicOp::Load,
            AtomicOrder::ACQUIRE,
        )
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert!(resumed(&fx, 2, 1), "{fx:?}");
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(1));
    let stale =
        nodes[2].page_state(p) != PageState::Invalid && nodes[2].memory().load_u64(p, 0) == 0;
    assert!(
        !stale,
        "node 2 read the flag's 1 with acquire, then reads P = 0: node 1 wrote 42 before its \
         release-store"
    );
}

/// A node's own atomic operation on a word is seen by its own plain reads even when the page
/// was on its way from a holder the home forwarded the node's request to (`forward_within`):
/// the operation's answer marks a fetch in flight stale, and the page is asked for again. Before,
/// `on_atomic_grant` dropped only a valid copy; the home's `mark_written` forgot the holder
/// (`forget_held`), but the FWD had gone before, and the holder's copy, from before the
/// operation, was installed after the operation's answer.
///
/// Node 0 homes pages Q0, Q1 (the word at Q0's offset 0); node 1 reads them (and holds
/// them); node 2's thread 0 reads Q0 at offset 8 (asking for Q0 and Q1: forwarded to node 1),
/// and, while that is on its way, its thread 1 fetch-adds 5 to the word, then reads it.
#[test]
fn a_forwarded_grant_does_not_overwrite_the_askers_own_atomic_update() {
    use std::time::Duration;
    let mk = |i| {
        let mut cfg = CoreConfig::new(NodeId(i), 3);
        cfg.prefetch.prefetch_pages = 1;
        cfg.prefetch.max_checking_pages = 1;
        cfg.forward_within = Some(Duration::from_secs(3600));
        let mut n = Node::new(cfg, VecMemory::new());
        n.alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE).unwrap();
        n
    };
    let mut nodes: Vec<Node<VecMemory>> = (0..3).map(mk).collect();
    nodes[2].note_threads(2);
    let q0 = PageNum(0);
    let word = GlobalAddr(0);
    let t = Time(0);
    let mut fx = Vec::new();
    nodes[1]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    nodes[0].settle_serves();
    // Node 2 asks for Q0 and Q1: the home forwards to node 1, whose grant is slow.
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    let slow = pump(&mut nodes, &mut fx, &|from, to, m| {
        from == 1 && to == 2 && matches!(m, Msg::GetPageGrant { .. })
    });
    assert_eq!(slow.len(), 1, "the request was forwarded to node 1");
    // Thread 1 of node 2 fetch-adds 5 to the word (relaxed): answered at once.
    fx.clear();
    nodes[2]
        .atomic(
            t,
            WaiterId(1),
            (word, 8),
            AtomicOp::FetchAdd(5),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert!(resumed(&fx, 2, 1), "{fx:?}");
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(0));
    assert_eq!(nodes[0].memory().load_u64(q0, 0), 5, "applied at the home");
    // The forwarded grant arrives: thread 0 is resumed; then thread 1 reads the word.
    deliver(&mut nodes, slow);
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert!(resumed(&fx, 2, 0), "{fx:?}");
    assert_ne!(nodes[2].page_state(q0), PageState::Invalid);
    assert_eq!(
        nodes[2].memory().load_u64(q0, 0),
        5,
        "node 2's thread reads the word it fetch-added 5 to as the value before"
    );
}

/// A relaxed atomic operation on a word this node wrote with a plain store (not yet diffed: no
/// release since) applies to the stored value: the page's diff goes to the home ahead of the
/// operation. Before, only a release sent the node's diffs first: the home applied the
/// operation to the value from before the store, and the store's diff, sent later, overwrote its
/// result. One thread: `*w = 10; fetch_add(w, 1, relaxed)` answered 0 (C11's coherence asks for
/// 10) and left 10 (asks for 11).
#[test]
fn a_relaxed_atomic_after_a_plain_store_to_the_same_word_applies_to_the_stored_value() {
    let mut nodes = nodes_with_one_page(2);
    let (p, w) = (PageNum(0), GlobalAddr(0));
    let t = Time(0);
    let mut fx = Vec::new();
    nodes[1]
        .handle_fault(t, p, Access::Write, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    nodes[1].memory_mut().store_u64(p, 0, 10);
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (w, 8),
            AtomicOp::FetchAdd(1),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    let before = nodes[1].take_atomic_result(WaiterId(0));
    for n in &mut nodes {
        n.barrier(t, WaiterId(0)).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    let at_home = nodes[0].memory().load_u64(p, 0);
    assert_eq!(
        (before, at_home),
        (Some(10), 11),
        "(value before the fetch-add, the word after the barrier)"
    );
}

/// The diff sent ahead of a relaxed atomic is sent only when this node changed the word: a
/// store to another word of the page is not sent ahead of the operation. Both stores reach the
/// home.
#[test]
fn a_relaxed_atomic_diffs_its_page_first_only_if_this_node_changed_the_word() {
    let mut nodes = nodes_with_one_page(2);
    let (p, w) = (PageNum(0), GlobalAddr(0));
    let t = Time(0);
    let mut fx = Vec::new();
    nodes[1]
        .handle_fault(t, p, Access::Write, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    // What node 1 sends for one relaxed fetch-add of the word.
    let add = |nodes: &mut Vec<Node<VecMemory>>, fx: &mut Vec<(usize, Effect)>| {
        nodes[1]
            .atomic(
                t,
                WaiterId(0),
                (w, 8),
                AtomicOp::FetchAdd(1),
                AtomicOrder::RELAXED,
            )
            .unwrap();
        let sent = std::cell::RefCell::new(Vec::new());
        pump(nodes, fx, &|from, _, m| {
            if from == 1 {
                sent.borrow_mut().push(match m {
                    Msg::Diff { .. } => "diff",
                    Msg::Atomic { .. } => "atomic",
                    _ => "other",
                });
            }
            false
        });
        sent.into_inner()
    };
    // Another word of the page: no diff ahead of the operation (the copy and its twin take
    // the operation's value at its answer; the store is diffed at the barrier).
    nodes[1].memory_mut().store_u64(p, 8, 7);
    let sent = add(&mut nodes, &mut fx);
    assert_eq!(sent.first(), Some(&"atomic"), "{sent:?}");
    // The word itself: its diff goes first.
    if nodes[1].page_state(p) != PageState::ReadWrite {
        nodes[1]
            .handle_fault(t, p, Access::Write, WaiterId(0))
            .unwrap();
        pump(&mut nodes, &mut fx, &|_, _, _| false);
    }
    nodes[1].memory_mut().store_u64(p, 0, 10);
    let sent = add(&mut nodes, &mut fx);
    assert_eq!(sent.first(), Some(&"diff"), "{sent:?}");
    for n in &mut nodes {
        n.barrier(t, WaiterId(0)).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(
        (
            nodes[0].memory().load_u64(p, 0),
            nodes[0].memory().load_u64(p, 8)
        ),
        (11, 7),
        "(the word: 10 stored, then one add; the other word)"
    );
}

/// An operation on a word of a page this node writes (another word of it) leaves the word out
/// of the node's diff: node 1 writes word 1 of the page, adds 1 to word 0; node 2 then adds 1
/// to word 0; node 1's diff must leave the home's word 0 at 2, not put back node 1's 1. (When
/// answers put their value in the copy, a twin left alone made the diff carry it.)
#[test]
fn an_atomic_on_a_written_page_leaves_its_word_out_of_the_diff() {
    let mut nodes = nodes_with_one_page(3);
    let (p, w) = (PageNum(0), GlobalAddr(0));
    let t = Time(0);
    let mut fx = Vec::new();
    nodes[1]
        .handle_fault(t, p, Access::Write, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    nodes[1].memory_mut().store_u64(p, 8, 7);
    for n in [1, 2] {
        nodes[n]
            .atomic(
                t,
                WaiterId(0),
                (w, 8),
                AtomicOp::FetchAdd(1),
                AtomicOrder::RELAXED,
            )
            .unwrap();
        pump(&mut nodes, &mut fx, &|_, _, _| false);
    }
    for n in &mut nodes {
        n.barrier(t, WaiterId(0)).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    let home = nodes[0].memory();
    assert_eq!(
        (home.load_u64(p, 0), home.load_u64(p, 8)),
        (2, 7),
        "(the word: two adds; the word node 1 stored)"
    );
}

/// A GETP for pages this node has not allocated is held (`early_requests`) and answered at the
/// allocation that makes them (`Node::alloc`). If that allocation homes them elsewhere, the two
/// nodes made different allocation calls: the job ends, naming both. Before, `alloc` hit a
/// `debug_assert!` (bytes from a peer panicked a debug build; a release one dropped the request
/// silently and its asker waited for `peer_timeout_ms`).
#[test]
fn a_held_early_request_for_pages_homed_elsewhere_ends_the_job_naming_the_mismatch() {
    let mut n = Node::new(CoreConfig::new(NodeId(0), 2), VecMemory::new());
    n.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
    n.handle_message(
        Time(0),
        NodeId(1),
        Msg::GetPage {
            access: Access::Read,
            pages: vec![PageNum(3)],
            passed: 0,
        },
    )
    .unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        n.alloc(AllocPolicy::OnNode(NodeId(1)), 4 * PAGE)
            .map(|_| ())
    }));
    assert!(
        r.is_ok(),
        "alloc panicked on a peer's request held since before it"
    );
    let effects: Vec<Effect> = std::iter::from_fn(|| n.poll_effect()).collect();
    assert!(
        effects.iter().any(|e| matches!(
            e,
            Effect::Abort {
                error: JobError::HomeMismatch {
                    node: NodeId(1),
                    page: PageNum(3),
                    here: NodeId(0),
                    home: NodeId(1),
                }
            }
        )),
        "{effects:?}"
    );
}

/// An ATOMIC on a word this node has not allocated yet is held (`early_atomics`) and made at
/// the allocation that makes it, as a GETP is: it was refused as a protocol error (dropped by
/// the runtime), and its sender waited until the job was taken for deadlocked. One that a
/// barrier finds still held ends the job naming the mismatch.
#[test]
fn an_atomic_on_a_word_not_allocated_yet_is_made_at_the_allocation() {
    let mut nodes: Vec<Node<VecMemory>> = (0..2)
        .map(|i| Node::new(CoreConfig::new(NodeId(i), 2), VecMemory::new()))
        .collect();
    // Node 1 allocates first (homed at node 0) and adds to the first word at once.
    let at = nodes[1]
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE)
        .unwrap();
    nodes[1]
        .atomic(
            Time(0),
            WaiterId(0),
            (at, 8),
            AtomicOp::FetchAdd(5),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    let mut effects = Vec::new();
    let held = pump(&mut nodes, &mut effects, &|_, _, _| false);
    assert!(held.is_empty());
    assert_eq!(
        nodes[1].take_atomic_result(WaiterId(0)),
        None,
        "not made yet"
    );
    nodes[0]
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE)
        .unwrap();
    pump(&mut nodes, &mut effects, &|_, _, _| false);
    assert_eq!(
        nodes[1].take_atomic_result(WaiterId(0)),
        Some(0),
        "{effects:?}"
    );
    // Node 1 allocates a page node 0 never does, and adds to it; node 0 reaches a barrier.
    let more = nodes[1]
        .alloc(AllocPolicy::OnNode(NodeId(0)), PAGE)
        .unwrap();
    nodes[1]
        .atomic(
            Time(0),
            WaiterId(0),
            (more, 8),
            AtomicOp::FetchAdd(1),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    pump(&mut nodes, &mut effects, &|_, _, _| false);
    nodes[0].barrier(Time(0), WaiterId(0)).unwrap();
    pump(&mut nodes, &mut effects, &|_, _, _| false);
    assert!(
        effects.iter().any(|(n, e)| *n == 0
            && matches!(
                e,
                Effect::Abort {
                    error: JobError::AllocMissing {
                        node: NodeId(1),
                        page: PageNum(1),
                        ..
                    }
                }
            )),
        "{effects:?}"
    );
}

/// A node whose barrier grant is late (lost, resent) while another node, already past the
/// barrier, allocates and makes an atomic operation on a word it homes: the operation waits for
/// the late node's allocation after the barrier, and the job is not ended as one of different
/// allocations (a review found it refused at once, a correct program ended).
#[test]
fn an_atomic_from_past_a_barrier_its_home_is_still_in_waits_for_the_allocation() {
    atomic_from_past(false);
}

/// The same past a `jia_wait` (an atomic operation carries the waits its sender passed too; it
/// carried its barrier epoch only, and one past a wait was taken for different allocations).
#[test]
fn an_atomic_from_past_a_wait_its_home_is_still_in_waits_for_the_allocation() {
    atomic_from_past(true);
}

/// A node past a barrier or a `jia_wait` node 1 is still in allocates and adds to a word there.
fn atomic_from_past(wait: bool) {
    let (mut nodes, effects) = past_a_late_grant(wait, |n, at| {
        n.atomic(
            Time(0),
            WaiterId(0),
            (at, 8),
            AtomicOp::FetchAdd(3),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    });
    assert_eq!(
        nodes[2].take_atomic_result(WaiterId(0)),
        Some(0),
        "{effects:?}"
    );
}

/// The same for a page request: node 2, past the barrier, allocates and faults on a page node
/// 1 homes while node 1's grant is late. The request waits for node 1's allocation (a review:
/// it was refused at once as different allocations; over TCP, where node 0's grant and node
/// 2's request come on two connections, a plain `barrier; alloc; touch` could end so).
#[test]
fn a_page_request_from_past_a_barrier_its_home_is_still_in_waits_for_the_allocation() {
    page_request_from_past(false);
}

/// The same past a `jia_wait` (a barrier without coherence, which counts apart).
#[test]
fn a_page_request_from_past_a_wait_its_home_is_still_in_waits_for_the_allocation() {
    page_request_from_past(true);
}

/// A node past a barrier or a `jia_wait` node 1 is still in allocates and asks node 1 for a page.
fn page_request_from_past(wait: bool) {
    let (_, effects) = past_a_late_grant(wait, |n, at| {
        n.handle_fault(Time(0), at.page(), Access::Read, WaiterId(0))
            .unwrap();
    });
    assert!(
        effects.iter().any(|(n, e)| *n == 2
            && matches!(
                e,
                Effect::Resume {
                    waiter: WaiterId(0)
                }
            )),
        "node 2's fault served: {effects:?}"
    );
}

/// Three nodes pass a barrier (a `jia_wait` if `wait`), node 0's grant to node 1 held back;
/// node 2 allocates a page homed at node 1 and `asks` it of node 1 (at the page's address).
/// Then node 1's grant comes and nodes 1 and 0 make the same allocation. The job is never
/// ended meanwhile; returns the nodes and every effect.
fn past_a_late_grant(
    wait: bool,
    ask: impl FnOnce(&mut Node<VecMemory>, GlobalAddr),
) -> (Vec<Node<VecMemory>>, Vec<(usize, Effect)>) {
    let mut nodes: Vec<Node<VecMemory>> = (0..3)
        .map(|i| Node::new(CoreConfig::new(NodeId(i), 3), VecMemory::new()))
        .collect();
    for n in nodes.iter_mut() {
        if wait {
            n.wait(Time(0), WaiterId(0)).unwrap();
        } else {
            n.barrier(Time(0), WaiterId(0)).unwrap();
        }
    }
    let mut effects = Vec::new();
    let late = |from: usize, to: usize, m: &Msg| {
        from == 0 && to == 1 && matches!(m, Msg::BarrierGrant { .. } | Msg::WaitGrant { .. })
    };
    let held = pump(&mut nodes, &mut effects, &late);
    assert_eq!(held.len(), 1, "{held:?}");
    let at = nodes[2]
        .alloc(AllocPolicy::OnNode(NodeId(1)), PAGE)
        .unwrap();
    ask(&mut nodes[2], at);
    pump(&mut nodes, &mut effects, &late);
    let aborted = |effects: &[(usize, Effect)]| {
        effects
            .iter()
            .any(|(_, e)| matches!(e, Effect::Abort { .. }))
    };
    assert!(!aborted(&effects), "{effects:?}");
    // The grant comes; node 1 allocates after the barrier, as node 2 did.
    for (from, to, msg) in held {
        nodes[to]
            .handle_message(Time(0), NodeId(from as u16), msg)
            .unwrap();
    }
    nodes[1]
        .alloc(AllocPolicy::OnNode(NodeId(1)), PAGE)
        .unwrap();
    nodes[0]
        .alloc(AllocPolicy::OnNode(NodeId(1)), PAGE)
        .unwrap();
    pump(&mut nodes, &mut effects, &|_, _, _| false);
    assert!(!aborted(&effects), "{effects:?}");
    (nodes, effects)
}

/// A BARRGRANT from a node other than node 0 is refused before it changes anything. It was
/// refused only at the end of `on_barrier_grant`, after the node had invalidated, advanced its
/// epoch and reset the locks' records (and not at all when the grant proposed moves): node 0's
/// real grant was then refused too ("not in that barrier"), and the barrier never ended.
#[test]
fn a_barrier_grant_from_a_node_other_than_0_is_refused_before_it_takes_effect() {
    let mut n = Node::new(CoreConfig::new(NodeId(1), 3), VecMemory::new());
    n.alloc(AllocPolicy::OnNode(NodeId(0)), PAGE).unwrap();
    n.barrier(Time(0), WaiterId(0)).unwrap();
    let grant = Msg::BarrierGrant {
        epoch: 0,
        notices: vec![],
    };
    assert!(n.handle_message(Time(0), NodeId(2), grant.clone()).is_err());
    let real = n.handle_message(Time(0), NodeId(0), grant);
    assert!(
        real.is_ok(),
        "node 0's grant refused after node 2's: {real:?}"
    );
}

// ----- The copy-patching path of the fix for the forwarded grant (a second review) -----

/// Three nodes, node 0 homing three pages; node 2 (two threads) reads pages one-sided.
fn one_sided_reader() -> Vec<Node<VecMemory>> {
    (0..3)
        .map(|i| {
            let mut cfg = CoreConfig::new(NodeId(i), 3);
            cfg.prefetch.enabled = false;
            cfg.remote_reads = i == 2;
            let mut n = Node::new(cfg, VecMemory::new());
            n.alloc(AllocPolicy::OnNode(NodeId(0)), 3 * PAGE).unwrap();
            if i == 2 {
                n.note_threads(2);
            }
            n
        })
        .collect()
}

/// Node 0 homes Q0 (word X at 0), Q1 and F (page 2). Node 1 holds Q0; node 2's T0 faults on
/// Q0 (forwarded to node 1, grant held); node 2's T1 fetch-adds 5 to X (recorded on the fetch);
/// node 1 fetch-adds 100 to X, then release-stores F; node 3 reads Q0 (a fresh holder);
/// node 2's T1 acquire-loads F (1): Q0 named, the fetch is stale. The slow grant comes, the
/// refetch is forwarded to node 3 (copy X = 105): it was patched with 5 (the values recorded on
/// the first request were carried to the second, which left after their answers); now it
/// carries none.
#[test]
fn a_stale_refetch_carries_no_older_atomic_value() {
    let mk = |i| {
        let mut cfg = CoreConfig::new(NodeId(i), 4);
        cfg.prefetch.prefetch_pages = 1;
        cfg.prefetch.max_checking_pages = 1;
        cfg.forward_within = Some(std::time::Duration::from_secs(3600));
        let mut n = Node::new(cfg, VecMemory::new());
        n.alloc(AllocPolicy::OnNode(NodeId(0)), 3 * PAGE).unwrap();
        n
    };
    let mut nodes: Vec<Node<VecMemory>> = (0..4).map(mk).collect();
    nodes[2].note_threads(2);
    let q0 = PageNum(0);
    let x = GlobalAddr(0);
    let f = GlobalAddr(2 * PAGE);
    let t = Time(0);
    let mut fx = Vec::new();
    nodes[1]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    nodes[0].settle_serves();
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    let slow = pump(&mut nodes, &mut fx, &|from, to, m| {
        from == 1 && to == 2 && matches!(m, Msg::GetPageGrant { .. })
    });
    assert_eq!(slow.len(), 1, "forwarded to node 1");
    nodes[2]
        .atomic(
            t,
            WaiterId(1),
            (x, 8),
            AtomicOp::FetchAdd(5),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    let more = pump(&mut nodes, &mut fx, &|from, to, _| from == 1 && to == 2);
    assert!(more.is_empty());
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(0));
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (x, 8),
            AtomicOp::FetchAdd(100),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    let more = pump(&mut nodes, &mut fx, &|from, to, _| from == 1 && to == 2);
    assert!(more.is_empty());
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (f, 8),
            AtomicOp::Store(1),
            AtomicOrder::RELEASE,
        )
        .unwrap();
    let more = pump(&mut nodes, &mut fx, &|from, to, _| from == 1 && to == 2);
    assert!(more.is_empty());
    assert_eq!(nodes[0].memory().load_u64(q0, 0), 105);
    nodes[3]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|from, to, _| from == 1 && to == 2);
    nodes[0].settle_serves();
    fx.clear();
    nodes[2]
        .atomic(t, WaiterId(1), (f, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    let more = pump(&mut nodes, &mut fx, &|from, to, _| from == 1 && to == 2);
    assert!(more.is_empty());
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(1));
    for (from, to, m) in slow {
        nodes[to].handle_message(t, NodeId(from as u16), m).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert!(resumed(&fx, 2, 0), "{fx:?}");
    assert_ne!(nodes[2].page_state(q0), PageState::Invalid);
    assert_eq!(
        nodes[2].memory().load_u64(q0, 0),
        105,
        "node 2 acquired F (released after node 1's +100), then reads X"
    );
}

/// As above, with node 2 reading pages one-sided (`remote_reads`): node 2's T0 faults on Q0
/// (a one-sided read, slow); T1 fetch-adds 5 to X (recorded on the fetch); node 1 fetch-adds
/// 100 to X and release-stores F; T1 acquire-loads F = 1 (Q0 named: the fetch is stale). The
/// slow read arrives: stale, asked again; the second read (X = 105 at the home) was patched
/// back to 5 with the values carried from the first; now it is not.
#[test]
fn a_stale_one_sided_refetch_keeps_the_value_an_acquire_made_visible() {
    let mut nodes = one_sided_reader();
    let q0 = PageNum(0);
    let x = GlobalAddr(0);
    let f = GlobalAddr(2 * PAGE);
    let t = Time(0);
    let mut fx = Vec::new();
    let getp =
        |from: usize, to: usize, m: &Msg| from == 2 && to == 0 && matches!(m, Msg::GetPage { .. });
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    let reads = pump(&mut nodes, &mut fx, &getp);
    assert_eq!(reads.len(), 1);
    nodes[2]
        .atomic(
            t,
            WaiterId(1),
            (x, 8),
            AtomicOp::FetchAdd(5),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    assert!(pump(&mut nodes, &mut fx, &getp).is_empty());
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(0));
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (x, 8),
            AtomicOp::FetchAdd(100),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    assert!(pump(&mut nodes, &mut fx, &getp).is_empty());
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (f, 8),
            AtomicOp::Store(1),
            AtomicOrder::RELEASE,
        )
        .unwrap();
    assert!(pump(&mut nodes, &mut fx, &getp).is_empty());
    assert_eq!(nodes[0].memory().load_u64(q0, 0), 105);
    nodes[2]
        .atomic(t, WaiterId(1), (f, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    assert!(pump(&mut nodes, &mut fx, &getp).is_empty());
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(1));
    // The first read lands (read at any time: it is stale anyway), then the one it asks again.
    let mut data = vec![0u8; PAGE_SIZE];
    for _ in 0..3 {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&nodes[0].memory().load_u64(q0, 0).to_le_bytes());
        data[..8].copy_from_slice(&bytes);
        nodes[2].handle_page_read(t, NodeId(0), q0, &data).unwrap();
        let again = pump(&mut nodes, &mut fx, &getp);
        if again.is_empty() {
            break;
        }
    }
    assert!(resumed(&fx, 2, 0), "{fx:?}");
    assert_ne!(nodes[2].page_state(q0), PageState::Invalid);
    assert_eq!(
        nodes[2].memory().load_u64(q0, 0),
        105,
        "node 2 acquired F (released after node 1's +100 to X), then reads X"
    );
}

/// One-sided reads, no invalidation: T0 faults on Q0 (read slow); T1 fetch-adds 5 to X
/// (recorded); node 1 fetch-adds 100 to X with release; T1 acquire-loads X: 105 (a load records
/// nothing). The read lands (X = 105) and was patched to 5: T1 read X plainly after its acquire
/// load returned 105 and saw 5 (read-read coherence; no race: node 1's release RMW is ordered
/// before T1's read). Now a load records the value it read too.
#[test]
fn a_load_answered_while_a_one_sided_read_is_out_replaces_an_older_recorded_value() {
    let mut nodes = one_sided_reader();
    let q0 = PageNum(0);
    let x = GlobalAddr(0);
    let t = Time(0);
    let mut fx = Vec::new();
    let getp =
        |from: usize, to: usize, m: &Msg| from == 2 && to == 0 && matches!(m, Msg::GetPage { .. });
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    let reads = pump(&mut nodes, &mut fx, &getp);
    assert_eq!(reads.len(), 1);
    nodes[2]
        .atomic(
            t,
            WaiterId(1),
            (x, 8),
            AtomicOp::FetchAdd(5),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    assert!(pump(&mut nodes, &mut fx, &getp).is_empty());
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (x, 8),
            AtomicOp::FetchAdd(100),
            AtomicOrder::RELEASE,
        )
        .unwrap();
    assert!(pump(&mut nodes, &mut fx, &getp).is_empty());
    nodes[2]
        .atomic(t, WaiterId(1), (x, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    assert!(pump(&mut nodes, &mut fx, &getp).is_empty());
    let _ = nodes[2].take_atomic_result(WaiterId(1));
    let mut data = vec![0u8; PAGE_SIZE];
    for _ in 0..3 {
        data[..8].copy_from_slice(&nodes[0].memory().load_u64(q0, 0).to_le_bytes());
        nodes[2].handle_page_read(t, NodeId(0), q0, &data).unwrap();
        if pump(&mut nodes, &mut fx, &getp).is_empty() {
            break;
        }
    }
    assert!(resumed(&fx, 2, 0), "{fx:?}");
    assert_eq!(
        nodes[2].memory().load_u64(q0, 0),
        105,
        "T1's acquire load returned 105, then its plain read of X"
    );
}

/// `count` nodes: pages Q0, Q1 homed at node 0, F (page 2) homed at node 1. Node 2 has two
/// threads.
fn nodes_with_a_flag_page(count: u16, configure: impl Fn(&mut CoreConfig)) -> Vec<Node<VecMemory>> {
    (0..count)
        .map(|i| {
            let mut cfg = CoreConfig::new(NodeId(i), count);
            configure(&mut cfg);
            let mut n = Node::new(cfg, VecMemory::new());
            n.alloc(AllocPolicy::OnNode(NodeId(0)), 2 * PAGE).unwrap();
            n.alloc(AllocPolicy::OnNode(NodeId(1)), PAGE).unwrap();
            if i == 2 {
                n.note_threads(2);
            }
            n
        })
        .collect()
}

/// One-sided reads. Node 2's T1 relaxed-loads X (word 0 of Q0, homed at node 0): the home
/// answers 0, the answer is slow (link 0 -> 2). Node 1 fetch-adds 100 to X, then release-stores
/// F (homed at node 1). Node 2's T0 acquire-loads F = 1 (its answer from node 1 names Q0), then
/// reads X: a one-sided read of Q0 (X = 100) installs the copy; T0 reads 100. Then the load's
/// answer lands. C11 asks for 100 on T0's next read too (node 1's add happens before it; T1's
/// load writes nothing). When answers put their value in any copy (07149c4), the copy went
/// back to 0: a copy read one-sided after the operation left may be newer than its answer.
#[test]
fn a_late_answer_leaves_a_newer_one_sided_copy_as_it_is() {
    let mut nodes = nodes_with_a_flag_page(3, |c| {
        c.prefetch.enabled = false;
        c.remote_reads = true;
    });
    let (q0, x, f) = (PageNum(0), GlobalAddr(0), GlobalAddr(2 * PAGE));
    let t = Time(0);
    let mut fx = Vec::new();
    let slow = |from: usize, to: usize, m: &Msg| {
        (from == 0 && to == 2) || (from == 2 && to == 0 && matches!(m, Msg::GetPage { .. }))
    };
    nodes[2]
        .atomic(t, WaiterId(1), (x, 8), AtomicOp::Load, AtomicOrder::RELAXED)
        .unwrap();
    let mut late = pump(&mut nodes, &mut fx, &slow);
    assert!(
        matches!(late[..], [(0, 2, Msg::AtomicGrant { old: 0, .. })]),
        "{late:?}"
    );
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (x, 8),
            AtomicOp::FetchAdd(100),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (f, 8),
            AtomicOp::Store(1),
            AtomicOrder::RELEASE,
        )
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    assert_eq!(nodes[0].memory().load_u64(q0, 0), 100);
    nodes[2]
        .atomic(t, WaiterId(0), (f, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    assert_eq!(nodes[2].take_atomic_result(WaiterId(0)), Some(1));
    // T0 reads X: the one-sided read of Q0 comes back (on its own channel) with X = 100.
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    let getp: Vec<_> = pump(&mut nodes, &mut fx, &slow)
        .into_iter()
        .filter(|(from, to, m)| {
            let read = *from == 2 && *to == 0 && matches!(m, Msg::GetPage { .. });
            if !read {
                late.push((*from, *to, m.clone()));
            }
            read
        })
        .collect();
    assert_eq!(getp.len(), 1);
    let mut data = vec![0u8; PAGE_SIZE];
    data[..8].copy_from_slice(&nodes[0].memory().load_u64(q0, 0).to_le_bytes());
    nodes[2].handle_page_read(t, NodeId(0), q0, &data).unwrap();
    pump(&mut nodes, &mut fx, &slow);
    assert!(resumed(&fx, 2, 0), "{fx:?}");
    assert_eq!(nodes[2].memory().load_u64(q0, 0), 100, "T0's first read");
    // The load's answer lands.
    for (from, to, m) in late {
        nodes[to].handle_message(t, NodeId(from as u16), m).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(0));
    let second =
        (nodes[2].page_state(q0) != PageState::Invalid).then(|| nodes[2].memory().load_u64(q0, 0));
    assert!(
        second.is_none_or(|v| v == 100),
        "T0's second read of X sees {second:?} after 100 (node 1's add happens before it)"
    );
}

/// Forwarding, no one-sided reads. Node 2's T1 fetch-adds 5 to X (applied first: X = 5; the
/// answer is slow). Node 1 fetch-adds 100 (X = 105) and release-stores F. Node 3 reads Q0 and
/// Q1 (a holder, X = 105). Node 2's T0 acquire-loads F = 1, then reads Q0: forwarded to node 3,
/// copy X = 105. Then the add's answer lands. Both adds happen before a read of X by node 2
/// after T1 returns (T0 signals T1 through a node-local mutex, say): C11 asks for 105. When
/// answers put their value in any copy (07149c4), the copy went back to 5: a holder's copy
/// asked for after the operation left may be newer than its answer.
#[test]
fn a_late_answer_leaves_a_newer_forwarded_copy_as_it_is() {
    let mut nodes = nodes_with_a_flag_page(4, |c| {
        c.prefetch.prefetch_pages = 1;
        c.prefetch.max_checking_pages = 1;
        c.forward_within = Some(std::time::Duration::from_secs(3600));
    });
    let (q0, x, f) = (PageNum(0), GlobalAddr(0), GlobalAddr(2 * PAGE));
    let t = Time(0);
    let mut fx = Vec::new();
    let slow = |from: usize, to: usize, _: &Msg| from == 0 && to == 2;
    nodes[2]
        .atomic(
            t,
            WaiterId(1),
            (x, 8),
            AtomicOp::FetchAdd(5),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    let mut late = pump(&mut nodes, &mut fx, &slow);
    assert_eq!(late.len(), 1);
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (x, 8),
            AtomicOp::FetchAdd(100),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (f, 8),
            AtomicOp::Store(1),
            AtomicOrder::RELEASE,
        )
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    assert_eq!(nodes[0].memory().load_u64(q0, 0), 105);
    nodes[3]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    nodes[0].settle_serves();
    nodes[2]
        .atomic(t, WaiterId(0), (f, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    assert_eq!(nodes[2].take_atomic_result(WaiterId(0)), Some(1));
    fx.clear();
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    assert!(
        resumed(&fx, 2, 0),
        "forwarded to node 3 and installed: {fx:?}"
    );
    assert_eq!(nodes[2].memory().load_u64(q0, 0), 105, "the forwarded copy");
    assert!(
        matches!(late[..], [(0, 2, Msg::AtomicGrant { old: 0, .. })]),
        "{late:?}"
    );
    for (from, to, m) in late {
        nodes[to].handle_message(t, NodeId(from as u16), m).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(0));
    let read =
        (nodes[2].page_state(q0) != PageState::Invalid).then(|| nodes[2].memory().load_u64(q0, 0));
    assert!(
        read.is_none_or(|v| v == 105),
        "node 2 reads X = {read:?}; the home holds 105, and node 1's add happens before the read"
    );
}

/// As `a_late_answer_leaves_a_newer_one_sided_copy_as_it_is`, but the load's answer lands
/// while the one-sided read that T0 started after its acquire is still out. The read (X = 100)
/// cannot be placed among the answer (0): it may be older or newer than the load, which left
/// before it and may be taken by the home after the home's NIC served the read. It is asked for
/// again, of the home, as a message; T0 reads 100. Before, every answer that came while a
/// one-sided read was out was put in its copy: T0 read 0 after acquiring F.
#[test]
fn a_one_sided_copy_that_cannot_be_placed_among_the_answers_is_asked_of_the_home() {
    let mut nodes = nodes_with_a_flag_page(3, |c| {
        c.prefetch.enabled = false;
        c.remote_reads = true;
    });
    let (q0, x, f) = (PageNum(0), GlobalAddr(0), GlobalAddr(2 * PAGE));
    let t = Time(0);
    let mut fx = Vec::new();
    let slow = |from: usize, to: usize, m: &Msg| {
        (from == 0 && to == 2) || (from == 2 && to == 0 && matches!(m, Msg::GetPage { .. }))
    };
    nodes[2]
        .atomic(t, WaiterId(1), (x, 8), AtomicOp::Load, AtomicOrder::RELAXED)
        .unwrap();
    let mut late = pump(&mut nodes, &mut fx, &slow);
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (x, 8),
            AtomicOp::FetchAdd(100),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    nodes[1]
        .atomic(
            t,
            WaiterId(0),
            (f, 8),
            AtomicOp::Store(1),
            AtomicOrder::RELEASE,
        )
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    nodes[2]
        .atomic(t, WaiterId(0), (f, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    late.extend(pump(&mut nodes, &mut fx, &slow));
    assert_eq!(nodes[2].take_atomic_result(WaiterId(0)), Some(1));
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    let out = pump(&mut nodes, &mut fx, &slow);
    assert!(matches!(out[..], [(2, 0, Msg::GetPage { .. })]), "{out:?}");
    // The load's answer lands first, then the read (X = 100 at the home).
    assert!(
        matches!(late[..], [(0, 2, Msg::AtomicGrant { old: 0, .. })]),
        "{late:?}"
    );
    for (from, to, m) in late {
        nodes[to].handle_message(t, NodeId(from as u16), m).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    let mut data = vec![0u8; PAGE_SIZE];
    data[..8].copy_from_slice(&nodes[0].memory().load_u64(q0, 0).to_le_bytes());
    assert_eq!(nodes[0].memory().load_u64(q0, 0), 100);
    nodes[2].handle_page_read(t, NodeId(0), q0, &data).unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert!(resumed(&fx, 2, 0), "{fx:?}");
    assert_eq!(
        nodes[2].memory().load_u64(q0, 0),
        100,
        "T0 acquired F (released after node 1's add), then reads X"
    );
}

/// Every message `node` has to send, taken without delivering them: (to, message).
fn take(node: &mut Node<VecMemory>) -> Vec<(usize, Msg)> {
    let mut v = Vec::new();
    while let Some(tx) = node.poll_transmit() {
        v.push((usize::from(tx.to.0), tx.msg));
    }
    v
}

/// Forwarding. Four pages Q0..Q3 homed at node 0. Node 3 holds Q0, Q1 (the home remembers it).
/// In one batch the home takes: node 1's GETP for Q2, Q3 (two runs: the second waits in the
/// home's serving queue), node 2's GETP for Q0, Q1 (R: forwarded to node 3, the FWD queued
/// behind Q3's run), node 2's T1 fetch-add 5 on X (word 0 of Q0; left after R: X = 5), node 3's
/// fetch-add 100 (X = 105). The answers leave before the queued FWD: node 3 puts 105 in its copy
/// (a copy from the home) and then forwards that copy to node 2. Node 2's T0 reads X = 105.
/// Then the late answer of T1's add (left after R) comes: the copy is taken as older than it,
/// and X went back to 5: T0 read 105, then 5, though 5 precedes 105 in X's modification order
/// (C11's read-read coherence). Now a late answer drops a copy that lacks its value (and the
/// holder drops its own copy at its own answer).
#[test]
fn a_late_answer_leaves_a_forwarded_copy_newer_than_its_request_as_it_is() {
    let mut nodes: Vec<Node<VecMemory>> = (0..4)
        .map(|i| {
            let mut cfg = CoreConfig::new(NodeId(i), 4);
            cfg.prefetch.prefetch_pages = 1;
            cfg.prefetch.max_checking_pages = 1;
            cfg.grant_run_pages = 1;
            cfg.forward_within = Some(std::time::Duration::from_secs(3600));
            let mut n = Node::new(cfg, VecMemory::new());
            n.alloc(AllocPolicy::OnNode(NodeId(0)), 4 * PAGE).unwrap();
            if i == 2 {
                n.note_threads(2);
            }
            n
        })
        .collect();
    let (q0, x) = (PageNum(0), GlobalAddr(0));
    let t = Time(0);
    let mut fx = Vec::new();
    // Node 3 holds Q0 and Q1.
    nodes[3]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(nodes[3].page_state(q0), PageState::ReadOnly);
    nodes[0].settle_serves();
    // The requests, each taken from its sender in order.
    nodes[1]
        .handle_fault(t, PageNum(2), Access::Read, WaiterId(0))
        .unwrap();
    let from1 = take(&mut nodes[1]);
    nodes[2]
        .handle_fault(t, q0, Access::Read, WaiterId(0))
        .unwrap();
    nodes[2]
        .atomic(
            t,
            WaiterId(1),
            (x, 8),
            AtomicOp::FetchAdd(5),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    let from2 = take(&mut nodes[2]);
    nodes[3]
        .atomic(
            t,
            WaiterId(0),
            (x, 8),
            AtomicOp::FetchAdd(100),
            AtomicOrder::RELAXED,
        )
        .unwrap();
    let from3 = take(&mut nodes[3]);
    assert!(
        matches!(
            from2[..],
            [(0, Msg::GetPage { .. }), (0, Msg::Atomic { .. })]
        ),
        "{from2:?}"
    );
    // The home takes them all in one batch (as the runtime's pass does), then sends.
    for (from, msgs) in [(1usize, from1), (2, from2), (3, from3)] {
        for (to, m) in msgs {
            assert_eq!(to, 0);
            nodes[0].handle_message(t, NodeId(from as u16), m).unwrap();
        }
    }
    assert_eq!(nodes[0].memory().load_u64(q0, 0), 105);
    // Everything flows, except the home's messages to node 2 (slow link).
    let late = pump(&mut nodes, &mut fx, &|from, to, _| from == 0 && to == 2);
    // T0's first read, if its fault is done (node 3 may no longer hold the page to serve).
    let first = resumed(&fx, 2, 0).then(|| nodes[2].memory().load_u64(q0, 0));
    for (from, to, m) in late {
        nodes[to].handle_message(t, NodeId(from as u16), m).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert_eq!(nodes[2].take_atomic_result(WaiterId(1)), Some(0));
    let second =
        (nodes[2].page_state(q0) != PageState::Invalid).then(|| nodes[2].memory().load_u64(q0, 0));
    assert!(resumed(&fx, 2, 0), "T0's fault done: {fx:?}");
    assert!(
        first != Some(105) || second.is_none_or(|v| v == 105),
        "T0 read X = {first:?}, then {second:?} (the add of 5 precedes the add of 100)"
    );
}

/// Two nodes without prefetch that allocated `pages` pages homed at node 1, node 0 with two
/// threads; node 0 reads pages one-sided if `one_sided`.
fn pair_homed_at_node_1(pages: u64, one_sided: bool) -> Vec<Node<VecMemory>> {
    let mut nodes: Vec<Node<VecMemory>> = (0..2)
        .map(|i| {
            let mut cfg = CoreConfig::new(NodeId(i), 2);
            cfg.prefetch.enabled = false;
            cfg.remote_reads = one_sided;
            let mut n = Node::new(cfg, VecMemory::new());
            n.alloc(AllocPolicy::OnNode(NodeId(1)), pages * PAGE)
                .unwrap();
            n
        })
        .collect();
    nodes[0].note_threads(2);
    nodes
}

/// Page P (word W at 0) is homed at node 1, whose releases through W name P (its own atomic
/// answers count P as written). Node 0's T0 acquire-loads W while T1's write fault on P is out:
/// both go to node 1, the load first, so its answer, naming P, reaches node 0 before P's grant
/// on the same channel. The grant was copied after the notice left, so it holds what the
/// notice names: T1 goes on. It was taken as stale and P asked again; with T0 spinning on W
/// (a load always out when the fault left), T1 never went on (the simulator's `mixed_sync`
/// seed 73000280, once answers put their values in copies).
#[test]
fn a_grant_from_the_home_after_its_own_notice_of_the_page_is_not_stale() {
    let mut nodes = pair_homed_at_node_1(1, false);
    let (p, w) = (PageNum(0), GlobalAddr(0));
    let t = Time(0);
    let mut fx = Vec::new();
    for _ in 0..2 {
        nodes[1]
            .atomic(
                t,
                WaiterId(0),
                (w, 8),
                AtomicOp::FetchAdd(1),
                AtomicOrder::RELEASE,
            )
            .unwrap();
        pump(&mut nodes, &mut fx, &|_, _, _| false);
    }
    nodes[0]
        .atomic(t, WaiterId(0), (w, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    nodes[0]
        .handle_fault(t, p, Access::Write, WaiterId(1))
        .unwrap();
    let to_home = take(&mut nodes[0]);
    assert!(
        matches!(
            to_home[..],
            [(1, Msg::Atomic { .. }), (1, Msg::GetPage { .. })]
        ),
        "{to_home:?}"
    );
    for (_, m) in to_home {
        nodes[1].handle_message(t, NodeId(0), m).unwrap();
    }
    let answers = take(&mut nodes[1]);
    assert!(
        matches!(
            &answers[..],
            [(0, Msg::AtomicGrant { notices, .. }), (0, Msg::GetPageGrant { .. })]
                if notices.iter().any(|n| n.page == p)
        ),
        "the load's answer names P, and comes first: {answers:?}"
    );
    for (_, m) in answers {
        nodes[0].handle_message(t, NodeId(1), m).unwrap();
    }
    while let Some(e) = nodes[0].poll_effect() {
        fx.push((0, e));
    }
    assert!(resumed(&fx, 0, 0) && resumed(&fx, 0, 1), "{fx:?}");
    assert_eq!(nodes[0].take_atomic_result(WaiterId(0)), Some(2));
    assert!(
        take(&mut nodes[0]).is_empty(),
        "P was not asked again, nor anything else sent"
    );
    assert_eq!(nodes[0].page_state(p), PageState::ReadWrite);
    assert_eq!(nodes[0].memory().load_u64(p, 0), 2);
}

/// Three nodes: page P (word X at 0) homed at node 2, page Q (word W at 0) at node 1. Node 1
/// loads X (acquire-release: a release each time) and then W with acquire-release, so its
/// releases through W name P; node 0 acquire-loads W, seeing that notice, and node 0's T1 then
/// takes a write fault on P. `x_between` runs on node 2 between node 1's two rounds.
/// Returns the notices of node 0's second load of W, which left while T1's request was out
/// (its grant held until then), and whether T1 went on when the grant came. (Q is named once
/// more: node 1's first load of W, its home, showed it W.)
fn spin_rounds_with_a_fault_out(x_between: &[AtomicOp]) -> (Vec<PageNum>, bool) {
    let mut nodes: Vec<Node<VecMemory>> = (0..3)
        .map(|i| {
            let mut cfg = CoreConfig::new(NodeId(i), 3);
            cfg.prefetch.enabled = false;
            let mut n = Node::new(cfg, VecMemory::new());
            n.alloc(AllocPolicy::OnNode(NodeId(2)), PAGE).unwrap();
            n.alloc(AllocPolicy::OnNode(NodeId(1)), PAGE).unwrap();
            n
        })
        .collect();
    nodes[0].note_threads(2);
    let (p, x, w) = (PageNum(0), GlobalAddr(0), GlobalAddr(PAGE));
    let t = Time(0);
    let op = |nodes: &mut Vec<Node<VecMemory>>, n: usize, a, op, order| {
        nodes[n].atomic(t, WaiterId(0), (a, 8), op, order).unwrap();
        pump(nodes, &mut Vec::new(), &|_, _, _| false);
    };
    let spin = |nodes: &mut Vec<Node<VecMemory>>| {
        op(nodes, 1, x, AtomicOp::Load, AtomicOrder::ACQ_REL);
        op(nodes, 1, w, AtomicOp::Load, AtomicOrder::ACQ_REL);
    };
    spin(&mut nodes);
    op(&mut nodes, 0, w, AtomicOp::Load, AtomicOrder::ACQUIRE);
    nodes[0]
        .handle_fault(t, p, Access::Write, WaiterId(1))
        .unwrap();
    let slow = pump(&mut nodes, &mut Vec::new(), &|from, to, m| {
        (from, to) == (2, 0) && matches!(m, Msg::GetPageGrant { .. })
    });
    assert_eq!(slow.len(), 1);
    for &o in x_between {
        op(&mut nodes, 2, x, o, AtomicOrder::RELAXED);
    }
    spin(&mut nodes);
    nodes[0]
        .atomic(t, WaiterId(0), (w, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    let ask = take(&mut nodes[0]);
    for (to, m) in ask {
        nodes[to].handle_message(t, NodeId(0), m).unwrap();
    }
    let answer = take(&mut nodes[1]);
    let notices = match &answer[..] {
        [(0, Msg::AtomicGrant { notices, .. })] => notices.iter().map(|n| n.page).collect(),
        other => panic!("{other:?}"),
    };
    for (_, m) in answer {
        nodes[0].handle_message(t, NodeId(1), m).unwrap();
    }
    deliver(&mut nodes, slow);
    let mut fx = Vec::new();
    while let Some(e) = nodes[0].poll_effect() {
        fx.push((0, e));
    }
    (notices, resumed(&fx, 0, 1))
}

/// Node 1 keeps loading X, unchanged, with release: its second round showed it nothing new, so
/// its release through W names P no more, and node 0's fetch of P is not made stale by it.
/// Every such release named P, and a spinner on W made every fetch of P by its sibling stale
/// (the simulator's `mixed_sync` seed 826008283, once grants from the home after its own
/// notice were kept).
#[test]
fn a_load_that_sees_nothing_new_does_not_name_its_page_again() {
    let (notices, went_on) = spin_rounds_with_a_fault_out(&[]);
    assert!(!notices.contains(&PageNum(0)), "{notices:?}");
    assert!(went_on);
}

/// As above, but X went 0 -> 1 -> 0 between node 1's rounds: the same value, changed twice.
/// Node 1 saw a newer 0, and its release names P again: node 0's fetch is stale.
#[test]
fn a_load_that_sees_the_same_value_changed_names_its_page_again() {
    let (notices, went_on) =
        spin_rounds_with_a_fault_out(&[AtomicOp::FetchAdd(1), AtomicOp::FetchSub(1)]);
    assert!(notices.contains(&PageNum(0)), "{notices:?}");
    assert!(!went_on, "P asked again");
}

/// Page P (word W at 0) homed at node 1; node 0 reads pages one-sided (`remote_reads`). Node 1
/// keeps adding to W with release (each add names P in node 1's next release through W).
/// Node 0's T0 acquire-loads W while T1's fault on P is out. Each round: T1's request goes as a
/// one-sided read; node 1 adds; T0's load is answered, naming P, by the node asked; the read
/// completes and is dropped as stale. P was asked for again one-sided, overtaken again, for
/// ever (found by a review). Now it is asked as a message, whose grant from the home follows
/// any later notice of the home's, and is kept.
#[test]
fn a_one_sided_read_made_stale_by_the_homes_notice_is_asked_again_as_a_message() {
    let mut nodes = pair_homed_at_node_1(1, true);
    let (p, w) = (PageNum(0), GlobalAddr(0));
    let t = Time(0);
    let mut fx = Vec::new();
    let add = |nodes: &mut Vec<Node<VecMemory>>, fx: &mut Vec<(usize, Effect)>| {
        nodes[1]
            .atomic(
                t,
                WaiterId(0),
                (w, 8),
                AtomicOp::FetchAdd(1),
                AtomicOrder::RELEASE,
            )
            .unwrap();
        pump(nodes, fx, &|_, _, _| false);
    };
    add(&mut nodes, &mut fx);
    nodes[0]
        .handle_fault(t, p, Access::Read, WaiterId(1))
        .unwrap();
    // Round 1: the request goes one-sided and is overtaken by the home's notice.
    let out = take(&mut nodes[0]);
    let [(1, ref getp @ Msg::GetPage { .. })] = out[..] else {
        panic!("{out:?}");
    };
    assert!(nodes[0].may_read_one_sided(&[p]));
    nodes[0].carried_otherwise(getp);
    add(&mut nodes, &mut fx);
    nodes[0]
        .atomic(t, WaiterId(0), (w, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    let mut data = vec![0u8; PAGE_SIZE];
    data[..8].copy_from_slice(&nodes[1].memory().load_u64(p, 0).to_le_bytes());
    nodes[0].handle_page_read(t, NodeId(1), p, &data).unwrap();
    while let Some(e) = nodes[0].poll_effect() {
        fx.push((0, e));
    }
    assert!(!resumed(&fx, 0, 1), "a read overtaken by a notice is stale");
    // Round 2: asked again, as a message; node 1 adds again and T0 loads again meanwhile:
    // the grant comes on the home's channel, and is kept.
    let out = take(&mut nodes[0]);
    assert!(matches!(out[..], [(1, Msg::GetPage { .. })]), "{out:?}");
    assert!(
        !nodes[0].may_read_one_sided(&[p]),
        "asked again as a message"
    );
    add(&mut nodes, &mut fx);
    nodes[0]
        .atomic(t, WaiterId(0), (w, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
        .unwrap();
    for (_, m) in out.into_iter().chain(take(&mut nodes[0])) {
        nodes[1].handle_message(t, NodeId(0), m).unwrap();
    }
    pump(&mut nodes, &mut fx, &|_, _, _| false);
    assert!(resumed(&fx, 0, 1), "{fx:?}");
    assert_eq!(nodes[0].memory().load_u64(p, 0), 3);
}

/// Page P (word W at 0) and page Q (word Y at 0) homed at node 1. Node 0 sets W to 1 (a change:
/// the home's next release names P), then swaps 1 into it again (no change). Node 1 releases
/// through Y after each; node 0 acquires through Y after each. The second release named P
/// again: a test-and-set spin on a set word made the home name its page at every release
/// (found by a review).
#[test]
fn a_write_at_the_home_that_leaves_the_word_as_it_was_does_not_name_its_page() {
    let mut nodes = pair_homed_at_node_1(2, false);
    let (p, w, y) = (PageNum(0), GlobalAddr(0), GlobalAddr(PAGE));
    let t = Time(0);
    let mut fx = Vec::new();
    let mut round = |nodes: &mut Vec<Node<VecMemory>>, op| -> Vec<PageNum> {
        nodes[0]
            .atomic(t, WaiterId(0), (w, 8), op, AtomicOrder::RELAXED)
            .unwrap();
        pump(nodes, &mut fx, &|_, _, _| false);
        nodes[1]
            .atomic(
                t,
                WaiterId(0),
                (y, 8),
                AtomicOp::FetchAdd(1),
                AtomicOrder::RELEASE,
            )
            .unwrap();
        pump(nodes, &mut fx, &|_, _, _| false);
        nodes[0]
            .atomic(t, WaiterId(0), (y, 8), AtomicOp::Load, AtomicOrder::ACQUIRE)
            .unwrap();
        let ask = take(&mut nodes[0]);
        for (_, m) in ask {
            nodes[1].handle_message(t, NodeId(0), m).unwrap();
        }
        let answer = take(&mut nodes[1]);
        let [(0, Msg::AtomicGrant { ref notices, .. })] = answer[..] else {
            panic!("{answer:?}");
        };
        let notices: Vec<PageNum> = notices.iter().map(|n| n.page).collect();
        for (_, m) in answer {
            nodes[0].handle_message(t, NodeId(1), m).unwrap();
        }
        pump(nodes, &mut fx, &|_, _, _| false);
        notices
    };
    assert!(round(&mut nodes, AtomicOp::Store(1)).contains(&p));
    let again = round(&mut nodes, AtomicOp::Swap(1));
    assert!(!again.contains(&p), "{again:?}");
}
