//! Remote memory streamed: node 0 writes MB megabytes homed on it, and every other node reads
//! all of them once, in order (a sum of u64 words), with the default read-ahead.
//!
//! `stream [MB] [STRIDE] [PASSES]` (default 256, 1, 1); `--threads T` splits each reader's pages
//! among T threads, each reading its part in order. With a stride, each reader reads one page
//! in every STRIDE (a column of a row-major matrix with rows of STRIDE pages): all of that page's
//! words. With `--down`, each thread reads its part from its last page to its first (a loop
//! down through an array, a backward substitution). With more passes, node 0 writes the array
//! again before each further pass and the readers fetch it again into the memory the first pass
//! gave them (an iterative program's next sweep). Prints the slowest reader's time and MB/s of
//! the pages read in the first pass (and `again_mbps`, the later passes' together); checks each
//! reader's sums against the closed form of what node 0 wrote.

use dsm_apps::{alloc, arg_count, init, report};
use dsm_runtime::{AllocPolicy, NodeId, PAGE_SIZE, SharedArray};

/// The indices of the words read: every word of one page in every `stride` pages.
fn read_pages(n: usize, stride: usize, per_page: usize) -> impl Iterator<Item = usize> {
    (0..n)
        .step_by(per_page * stride)
        .flat_map(move |start| start..(start + per_page).min(n))
}

/// The word node 0 writes at `i` (cheap, and different on every page).
fn word(i: usize) -> u64 {
    (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20
}

fn main() {
    let (args, check, flags) = dsm_apps::args_with_flags(
        "stream",
        "Remote memory streamed: node 0 writes, the others read it all once",
        &[
            ("MB", "megabytes homed on node 0 (default 256)"),
            (
                "STRIDE",
                "read one page in every STRIDE pages (default 1: every page)",
            ),
            (
                "PASSES",
                "passes, node 0 writing the array again before each (default 1)",
            ),
        ],
        &[(
            "down",
            "Each reading thread walks its pages from the last to the first",
        )],
    );
    let down = flags[0];
    let mb = arg_count(&args, 0, "megabytes", 256);
    let stride = arg_count(&args, 1, "stride", 1);
    let passes = arg_count(&args, 2, "passes", 1);
    let per_page = PAGE_SIZE / 8;
    let n = mb * 1024 * 1024 / 8;
    let dsm = init("stream");
    let me = dsm.id();
    let a: SharedArray<u64> = alloc(&dsm, n, AllocPolicy::OnNode(NodeId(0)));
    let times: SharedArray<f64> = alloc(&dsm, 2 * dsm.nodes(), AllocPolicy::OnNode(NodeId(0)));
    let expected = read_pages(n, stride, per_page).fold(0u64, |s, i| s.wrapping_add(word(i)));
    let words_read = read_pages(n, stride, per_page).count() as u64;
    let mut ok = true;
    let mut again = 0.0;
    for pass in 0..passes {
        if me == 0 {
            // SAFETY: node 0 alone writes the array between the barriers; nothing reads it
            // meanwhile.
            let mut w = unsafe { a.slice_mut(0..n) };
            for (i, x) in w.iter_mut().enumerate() {
                *x = word(i).wrapping_add(pass as u64);
            }
        }
        dsm.barrier();
        let t0 = dsm.clock();
        if me != 0 {
            // The pages read, split among the node's threads: each streams its own part (a
            // parallel loop over an array homed elsewhere).
            let pages_read = (n / per_page).div_ceil(stride);
            let threads = dsm_apps::threads();
            let sum_of = |t: usize| {
                let (first, last) = dsm_apps::share((0, pages_read), t, threads);
                // SAFETY: nothing writes the array until the next barrier.
                let r = unsafe { a.slice(0..n) };
                let pages = r.chunks(per_page).step_by(stride).skip(first);
                let sum = |s: u64, page: &[u64]| page.iter().fold(s, |s, &x| s.wrapping_add(x));
                if down {
                    let mine: Vec<&[u64]> = pages.take(last - first).collect();
                    mine.into_iter().rev().fold(0u64, sum)
                } else {
                    pages.take(last - first).fold(0u64, sum)
                }
            };
            let sum = std::thread::scope(|s| {
                let others: Vec<_> = (1..threads).map(|t| s.spawn(move || sum_of(t))).collect();
                others
                    .into_iter()
                    .map(|h| h.join().expect("a reading thread panicked"))
                    .fold(sum_of(0), u64::wrapping_add)
            });
            ok &= sum == expected.wrapping_add(words_read.wrapping_mul(pass as u64));
        }
        let elapsed = dsm.clock() - t0;
        if pass == 0 {
            times.set(me, elapsed);
        } else {
            again += elapsed;
        }
        dsm.barrier();
    }
    times.set(dsm.nodes() + me, again);
    let ok = !check || me == 0 || ok;
    // One node: node 0 writes, and no node reads.
    let readers = dsm.nodes() - 1;
    if readers == 0 && me == 0 {
        eprintln!(
            "stream: one node, so no reader (node 0 writes, the others read): run it on 2 nodes \
             or more, e.g. dsmrun -n 2 stream"
        );
    }
    let read_mb = if readers == 0 {
        0.0
    } else {
        ((n / per_page).div_ceil(stride) * PAGE_SIZE) as f64 / (1024.0 * 1024.0)
    };
    dsm.barrier();
    let slowest_of = |at: usize| {
        (1..dsm.nodes())
            .map(|i| times.get(at + i))
            .fold(0.0, f64::max)
    };
    let rate_of = |mb: f64, secs: f64| if secs > 0.0 { mb / secs } else { 0.0 };
    let slowest = slowest_of(0);
    let rate = rate_of(read_mb, slowest);
    let again = if passes > 1 {
        let secs = slowest_of(dsm.nodes());
        format!(
            " passes={passes} again_mbps={:.0}",
            rate_of(read_mb * (passes - 1) as f64, secs)
        )
    } else {
        String::new()
    };
    report(
        &dsm,
        "stream",
        ok,
        &format!(
            "mb={mb} stride={stride}{} read_mb={read_mb:.1} time={slowest:.3}s mbps={rate:.0}{again}",
            if down { " down" } else { "" }
        ),
    );
    dsm.exit();
}
