//! Micro-benchmarks of the protocol core: `cargo bench -p dsm-core`. Prints a table of
//! nanoseconds per operation (median of several batches). Ratios between rows of one run are
//! what to compare: these machines are shared and noisy.

#![allow(clippy::disallowed_methods, reason = "a benchmark reads the clock")]

use std::hint::black_box;
use std::time::Instant;

use dsm_core::sim::{Cluster, Op, Rng};
use dsm_core::{AllocPolicy, LockId, Msg, NodeId, PAGE_SIZE, PageBuf, PageNum, codec, diff};

/// Median ns per iteration over 7 batches of `n`.
fn bench(n: u64, mut f: impl FnMut()) -> f64 {
    let mut batches: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[3]
}

fn page(changed_pct: u64, seed: u64) -> (Box<[u8; PAGE_SIZE]>, Box<[u8; PAGE_SIZE]>) {
    let twin = Box::new([7u8; PAGE_SIZE]);
    let mut cur = twin.clone();
    let mut rng = Rng::new(seed);
    for b in cur.iter_mut() {
        if rng.below(100) < changed_pct {
            *b = rng.next_u64() as u8 | 1;
        }
    }
    (twin, cur)
}

fn sim_op(nodes: u16, op: impl Fn(&mut Cluster)) -> f64 {
    let mut c = Cluster::new(nodes, 1, |cfg| cfg.prefetch.enabled = false);
    c.alloc(AllocPolicy::OnNode(NodeId(0)), 64 * PAGE_SIZE as u64)
        .unwrap();
    c.barrier().unwrap();
    bench(200, || {
        op(&mut c);
        c.run().unwrap();
    })
}

fn main() {
    let mut rows: Vec<(String, f64)> = Vec::new();
    for pct in [0, 10, 100] {
        let (twin, cur) = page(pct, 3);
        let mut out = Vec::with_capacity(2 * PAGE_SIZE);
        rows.push((
            format!("diff encode, {pct}% of bytes changed"),
            bench(20_000, || {
                out.clear();
                black_box(diff::encode(&twin, &cur, &mut out));
            }),
        ));
        let mut target = twin.clone();
        rows.push((
            format!("diff apply, {pct}% changed ({} bytes)", out.len()),
            bench(20_000, || {
                diff::apply(black_box(&out), &mut target).unwrap();
            }),
        ));
    }
    let grant = Msg::GetPageGrant {
        page: PageNum(5),
        data: dsm_core::RunData::Copied(std::sync::Arc::from(&PageBuf::zeroed().0[..])),
        forwarded: false,
    };
    let acq = Msg::AcquireGrant {
        lock: LockId(3),
        counter: 9,
        notices: (0..32).map(PageNum).collect(),
        earlier: Vec::new(),
    };
    for (name, m) in [
        ("GETPGRANT (4 KiB)", &grant),
        ("ACQGRANT (32 notices)", &acq),
    ] {
        let mut buf = Vec::with_capacity(8192);
        rows.push((
            format!("codec encode {name}"),
            bench(50_000, || {
                buf.clear();
                codec::encode_frame(1, NodeId(0), black_box(m), &mut buf);
            }),
        ));
        rows.push((
            format!("codec decode {name}"),
            bench(50_000, || {
                black_box(codec::decode_frame(black_box(&buf)).unwrap());
            }),
        ));
    }
    rows.push((
        "core: remote read fault + barrier + home write (2 nodes)".into(),
        sim_op(2, |c| {
            c.push(1, 0, Op::Read(PageNum(1).addr()));
            c.push_all(Op::Barrier);
            c.push(0, 0, Op::Write(PageNum(1).addr(), 1));
        }),
    ));
    rows.push((
        "core: lock acquire + release (2 nodes, simulated)".into(),
        sim_op(2, |c| {
            c.push(1, 0, Op::Lock(LockId(0)));
            c.push(1, 0, Op::Unlock(LockId(0)));
        }),
    ));
    for n in [2u16, 4, 8] {
        rows.push((
            format!("core: barrier on {n} nodes (simulated)"),
            sim_op(n, |c| c.push_all(Op::Barrier)),
        ));
    }
    println!("{:<56} {:>12}", "dsm-core micro-benchmark", "ns/op");
    for (name, ns) in rows {
        println!("{name:<56} {ns:>12.0}");
    }
    println!("(simulated rows include the simulator's scheduling and the codec on every message)");
}
