//! Node 0's half of the race checker: every node's records in, the races out.
//!
//! Accesses are compared within a barrier epoch (a barrier orders all the others), page by
//! page, only on pages some segment wrote: two accesses race if they come from different
//! threads, touch a common byte, at least one writes, and neither segment's clock has seen the
//! other. Races are grouped by their pair of sites (the same two lines racing on many elements
//! or in many epochs are one report, with a count).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use super::{Log, Segment, Site, VC_THREADS};

/// At most this many reports are printed (the summary counts them all).
const MAX_REPORTS: usize = 50;

/// One side of a race.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Side {
    pub node: u16,
    pub thread: u32,
    pub write: bool,
    pub site: u32,
}

/// A race: the first occurrence of a pair of sites, and how often the pair raced.
#[derive(Clone, Debug)]
pub(crate) struct Race {
    pub a: Side,
    pub b: Side,
    /// Offset into the region of the first byte both touched.
    pub offset: u64,
    pub epoch: u32,
    pub times: u64,
}

/// The clock of thread `t` that segment `seg` has seen (0: none).
fn seen_of(seg: &Segment, t: u32) -> u32 {
    seg.seen
        .binary_search_by_key(&t, |&(u, _)| u)
        .map_or(0, |i| seg.seen[i].1)
}

/// Whether segment `a` happened before segment `b`.
fn before(a: &Segment, b: &Segment) -> bool {
    if a.thread == b.thread {
        return a.clock < b.clock;
    }
    seen_of(b, a.thread) >= a.clock
}

/// Every race in `logs`, one per pair of sites.
pub(crate) fn find(logs: &[Log]) -> Vec<Race> {
    // (epoch, page) -> (node, segment, access) for every access.
    type Where = (usize, usize, usize);
    let mut by_page: BTreeMap<(u32, u32), Vec<Where>> = BTreeMap::new();
    for (n, log) in logs.iter().enumerate() {
        for (s, seg) in log.segments.iter().enumerate() {
            for (a, acc) in seg.accesses.iter().enumerate() {
                by_page
                    .entry((seg.epoch, acc.page))
                    .or_default()
                    .push((n, s, a));
            }
        }
    }
    // Grouped by the pair of source sites (the same two lines race once per report, whichever
    // nodes and threads made them).
    type Key<'a> = ((&'a Site, bool), (&'a Site, bool));
    let mut races: HashMap<Key<'_>, Race> = HashMap::new();
    let mut order = Vec::new();
    for ((epoch, page), accesses) in &by_page {
        let get = |&(n, s, a): &(usize, usize, usize)| {
            let seg = &logs[n].segments[s];
            (n, seg, &seg.accesses[a])
        };
        if !accesses.iter().any(|x| get(x).2.write) {
            continue;
        }
        // Each thread's accesses in clock order. For an access x of thread A and another
        // thread B, B's segments x is ordered with are a prefix (those x has seen) and a suffix
        // (those that have seen x: a thread's clock only grows within an epoch); only the ones
        // between can race with x. A lock-protected counter's thousands of segments on one
        // page are then not compared pair by pair.
        let mut by_thread: BTreeMap<u32, Vec<(u32, Where)>> = BTreeMap::new();
        for &x in accesses {
            let seg = &logs[x.0].segments[x.1];
            by_thread
                .entry(seg.thread)
                .or_default()
                .push((seg.clock, x));
        }
        for list in by_thread.values_mut() {
            list.sort_by_key(|&(clock, _)| clock);
        }
        for (&ta, list_a) in &by_thread {
            for &(_, x) in list_a {
                let (nx, sx, ax) = get(&x);
                for (&tb, list_b) in by_thread.range(ta + 1..) {
                    let seen_b = seen_of(sx, tb);
                    let start = list_b.partition_point(|&(c, _)| c <= seen_b);
                    let end = list_b.partition_point(|&(_, y)| {
                        seen_of(&logs[y.0].segments[y.1], ta) < sx.clock
                    });
                    for &(_, y) in list_b.get(start..end).unwrap_or(&[]) {
                        let (ny, sy, ay) = get(&y);
                        if !(ax.write || ay.write) {
                            continue;
                        }
                        let Some(first) = ax.bytes.first_common(&ay.bytes) else {
                            continue;
                        };
                        if before(sx, sy) || before(sy, sx) {
                            continue;
                        }
                        let kx = (&logs[nx].sites[ax.site as usize], ax.write);
                        let ky = (&logs[ny].sites[ay.site as usize], ay.write);
                        let key = if kx <= ky { (kx, ky) } else { (ky, kx) };
                        let side = |n: usize, seg: &Segment, acc: &super::Access| Side {
                            node: logs[n].node,
                            thread: seg.thread % VC_THREADS as u32,
                            write: acc.write,
                            site: acc.site,
                        };
                        races
                            .entry(key)
                            .and_modify(|r| r.times += 1)
                            .or_insert_with(|| {
                                order.push(key);
                                Race {
                                    a: side(nx, sx, ax),
                                    b: side(ny, sy, ay),
                                    offset: u64::from(*page) * dsm_core::PAGE_SIZE as u64
                                        + u64::from(first),
                                    epoch: *epoch,
                                    times: 1,
                                }
                            });
                    }
                }
            }
        }
    }
    order.into_iter().map(|k| races[&k].clone()).collect()
}

/// The report: one paragraph per race (at most [`MAX_REPORTS`]), then a summary line.
pub(crate) fn render(logs: &[Log], races: &[Race]) -> String {
    let mut lines = Symbols::default();
    for log in logs {
        for site in &log.sites {
            lines.want(site);
        }
    }
    lines.resolve();
    // Grouped by their two lines as printed: one line's several code addresses (an unrolled
    // loop, an inlined function) are one report.
    let name = |s: &Side| lines.name(&logs[usize::from(s.node)].sites[s.site as usize]);
    let mut groups: Vec<Race> = Vec::new();
    type Pair = ((String, bool), (String, bool));
    let mut seen: HashMap<Pair, usize> = HashMap::new();
    for r in races {
        let (x, y) = ((name(&r.a), r.a.write), (name(&r.b), r.b.write));
        let key = if x <= y { (x, y) } else { (y, x) };
        match seen.get(&key) {
            Some(&g) => groups[g].times += r.times,
            None => {
                seen.insert(key, groups.len());
                groups.push(r.clone());
            }
        }
    }
    let races = &groups[..];
    let mut out = String::new();
    let node0 = &logs[0];
    for (k, r) in races.iter().take(MAX_REPORTS).enumerate() {
        let kind = match (r.a.write, r.b.write) {
            (true, true) => "write-write",
            _ => "read-write",
        };
        let _ = writeln!(
            out,
            "dsm: data race {} of {}: {kind}, barrier epoch {}{}",
            k + 1,
            races.len(),
            r.epoch,
            if r.times > 1 {
                format!(" ({} times)", r.times)
            } else {
                String::new()
            }
        );
        for s in [&r.a, &r.b] {
            let site = &logs[usize::from(s.node)].sites[s.site as usize];
            let _ = writeln!(
                out,
                "  node {} thread {} {} at {}",
                s.node,
                s.thread,
                if s.write { "write" } else { "read" },
                lines.name(site)
            );
        }
        let _ = writeln!(out, "  {}", where_in(node0, &lines, r.offset));
    }
    if races.len() > MAX_REPORTS {
        let _ = writeln!(out, "dsm: ... {} more", races.len() - MAX_REPORTS);
    }
    if races.is_empty() {
        let _ = writeln!(out, "dsm: check_races: no data race found");
    } else {
        let _ = writeln!(
            out,
            "dsm: check_races: {} data race{} (pairs of lines) found; exit status {}",
            races.len(),
            if races.len() == 1 { "" } else { "s" },
            super::EXIT_RACES
        );
    }
    out
}

/// "element I of the allocation at SITE" (or the byte offset when no allocation holds it).
fn where_in(log: &Log, lines: &Symbols, offset: u64) -> String {
    match log
        .allocs
        .iter()
        .find(|a| offset >= a.offset && offset < a.offset + a.bytes.max(1))
    {
        Some(a) => {
            let byte = offset - a.offset;
            let at = lines.name(&log.sites[a.site as usize]);
            match u64::from(a.element) {
                0 | 1 => format!("byte {byte} of the allocation at {at}"),
                e => format!(
                    "element {} (byte {byte}) of the allocation at {at}",
                    byte / e
                ),
            }
        }
        None => format!("byte {offset:#x} of the shared region"),
    }
}

/// `site` in words: its source line where `addr2line` finds it.
pub(super) fn site_now(site: &Site) -> String {
    let mut symbols = Symbols::default();
    symbols.want(site);
    symbols.resolve();
    symbols.name(site)
}

/// The frames (function, `file:line`) of each address in `addr2line -a -i -f` output, in order.
fn address_blocks(text: &str) -> Vec<Vec<(&str, &str)>> {
    let mut blocks: Vec<Vec<(&str, &str)>> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("0x") && u64::from_str_radix(&l[2..], 16).is_ok() {
            blocks.push(Vec::new());
            continue;
        }
        if let (Some(block), Some(line)) = (blocks.last_mut(), lines.next()) {
            block.push((l, line));
        }
    }
    blocks
}

/// The frame an address names for the program's author: the innermost one outside the system's
/// and the compiler's headers (a C library function inlined from them, such as glibc's `atoi`
/// calling `strtol`, is named at the program's line that called it) and outside the code Rust
/// libraries lend (a slice iterator's loop, inlined from the standard library's sources, is
/// named at the program's line that iterates), else the innermost.
fn program_frame(frames: &[(&str, &str)], relative: &[String]) -> Option<String> {
    // Rust's libraries wherever they lie: the standard library's sources under /rustc/, a
    // toolchain's rust-src or a distribution's /usr/src/rustc-*; cargo's registry and git
    // checkouts under any CARGO_HOME; vendored crates. And the DSM's own crates.
    const LIBRARIES: [&str; 6] = [
        "/library/core/src/",
        "/library/alloc/src/",
        "/library/std/src/",
        "/registry/src/",
        "/git/checkouts/",
        "/vendor/",
    ];
    const DSM: [&str; 3] = ["dsm-runtime/src/", "dsm-races/src/", "dsm-core/src/"];
    let system = |line: &str| {
        line.starts_with("/usr/include/")
            || line.starts_with("/usr/lib/")
            || line.starts_with("/rustc/")
            || LIBRARIES.iter().any(|l| line.contains(l))
            || DSM
                .iter()
                .any(|d| line.starts_with(d) || line.contains(&format!("/{d}")))
    };
    let &(func, line) = frames
        .iter()
        .find(|(_, line)| !system(line) && !line.starts_with("??"))
        .or(frames.first())?;
    if line.starts_with("??") {
        return None;
    }
    let line = line.split(" (discriminator").next().unwrap_or(line);
    // A Rust source named by a caller's location elsewhere in the report (the path cargo gave
    // the compiler, relative to the workspace) is named so here too, not by the absolute path
    // the debug information joins it to: one file, one name, on both sides of a race.
    let line = relative
        .iter()
        .find_map(|r| Some(format!("{r}{}", line_of_file_below(line, r)?)))
        .unwrap_or_else(|| line.to_owned());
    Some(format!("{line} ({func})"))
}

/// `:N` if `file_line` is `DIR/rel:N` (the file `rel` below some directory `DIR`).
fn line_of_file_below<'a>(file_line: &'a str, rel: &str) -> Option<&'a str> {
    let (file, at) = file_line.split_at(file_line.rfind(':')?);
    let dir = file.strip_suffix(rel)?;
    dir.ends_with('/').then_some(at)
}

/// Source lines for code addresses (by `addr2line`, one run per object file).
#[derive(Default)]
struct Symbols {
    wanted: BTreeMap<String, Vec<u64>>,
    found: HashMap<(String, u64), String>,
    /// The relative source files of the Rust callers' locations wanted.
    relative: Vec<String>,
}

impl Symbols {
    fn want(&mut self, site: &Site) {
        match site {
            Site::Code { module, offset } => {
                self.wanted.entry(module.clone()).or_default().push(*offset);
            }
            Site::Line { file, .. } if !file.starts_with('/') && !self.relative.contains(file) => {
                self.relative.push(file.clone());
            }
            Site::Line { .. } => {}
        }
    }

    fn resolve(&mut self) {
        for (module, offsets) in &self.wanted {
            // The return address is the instruction after the call: its line is the next one.
            let args: Vec<String> = offsets
                .iter()
                .map(|o| format!("{:#x}", o.saturating_sub(1)))
                .collect();
            // `-a`: each address's block starts with it; `-i`: the functions inlined there, the
            // innermost first.
            let Ok(out) = std::process::Command::new("addr2line")
                .args(["-e", module, "-a", "-i", "-f", "-C"])
                .args(&args)
                .output()
            else {
                continue;
            };
            let text = String::from_utf8_lossy(&out.stdout);
            for (o, frames) in offsets.iter().zip(address_blocks(&text)) {
                if let Some(named) = program_frame(&frames, &self.relative) {
                    self.found.insert((module.clone(), *o), named);
                }
            }
        }
    }

    fn name(&self, site: &Site) -> String {
        match site {
            Site::Line { file, line } => format!("{file}:{line}"),
            Site::Code { module, offset } => self
                .found
                .get(&(module.clone(), *offset))
                .cloned()
                .unwrap_or_else(|| format!("{module}+{offset:#x} (no line: build with -g)")),
        }
    }
}

#[cfg(test)]
mod tests {
    /// A file the report names elsewhere by a Rust caller's relative location is named so in
    /// addr2line's frames too; other files as addr2line gives them.
    #[test]
    fn a_rust_source_is_named_alike_on_both_sides() {
        let rel = ["tests/src/bin/racy.rs".to_string()];
        let frames = [("racy::run", "/work/main/tests/src/bin/racy.rs:130")];
        assert_eq!(
            super::program_frame(&frames, &rel).as_deref(),
            Some("tests/src/bin/racy.rs:130 (racy::run)")
        );
        // Not a file whose name merely ends alike, nor one elsewhere.
        for other in ["/w/xtests/src/bin/racy.rs:3", "/w/src/p.rs:3"] {
            assert_eq!(
                super::program_frame(&[("f", other)], &rel),
                Some(format!("{other} (f)"))
            );
        }
    }

    /// addr2line's blocks: an address, then its frames innermost first; a frame inlined from a
    /// system header is named at the program's line that called it.
    #[test]
    fn a_call_inlined_from_a_system_header_is_named_at_the_programs_line() {
        let out = "0x0000000000001234\natoi\n/usr/include/stdlib.h:364\nmain\n/src/p.c:19 (discriminator 2)\n0x0000000000001240\nmain\n/src/p.c:21\n0x0000000000001250\n??\n??:0\n";
        let blocks = super::address_blocks(out);
        assert_eq!(blocks.len(), 3);
        assert_eq!(
            super::program_frame(&blocks[0], &[]).as_deref(),
            Some("/src/p.c:19 (main)")
        );
        assert_eq!(
            super::program_frame(&blocks[1], &[]).as_deref(),
            Some("/src/p.c:21 (main)")
        );
        assert_eq!(super::program_frame(&blocks[2], &[]), None);
        let only_system = [(
            "memcpy",
            "/usr/include/x86_64-linux-gnu/bits/string_fortified.h:29",
        )];
        assert_eq!(
            super::program_frame(&only_system, &[]).as_deref(),
            Some("/usr/include/x86_64-linux-gnu/bits/string_fortified.h:29 (memcpy)")
        );
    }

    /// A Rust program's access inside a slice iterator (the standard library's source) or a DSM
    /// method inlined into it is named at the program's line.
    #[test]
    fn code_lent_by_rust_libraries_is_named_at_the_programs_line() {
        let frames = [
            (
                "<Iter<u64> as Iterator>::fold",
                "/rustc/59807616e1fa/library/core/src/slice/iter/macros.rs:279",
            ),
            ("get<u64>", "dsm-runtime/src/array.rs:140"),
            (
                "step",
                "/home/u/.cargo/registry/src/index/crate-1.0/src/lib.rs:9",
            ),
            ("racy::run", "tests/src/bin/racy.rs:114"),
            ("racy::main", "tests/src/bin/racy.rs:15"),
        ];
        for first in 0..4 {
            assert_eq!(
                super::program_frame(&frames[first..], &[]).as_deref(),
                Some("tests/src/bin/racy.rs:114 (racy::run)"),
                "from frame {first}"
            );
        }
        // A distribution's toolchain, a CARGO_HOME elsewhere, vendored crates, a frame without
        // a line: all passed over.
        let elsewhere = [
            (
                "fold",
                "/usr/src/rustc-1.85.0/library/core/src/iter/mod.rs:3",
            ),
            (
                "step",
                "/usr/local/cargo/registry/src/index/c-1.0/src/lib.rs:9",
            ),
            ("v", "/work/app/vendor/c/src/lib.rs:4"),
            ("??", "??:0"),
            ("app::main", "src/main.rs:12"),
        ];
        assert_eq!(
            super::program_frame(&elsewhere, &[]).as_deref(),
            Some("src/main.rs:12 (app::main)")
        );
        let outside = [("fold", "/work/main/dsm-runtime/src/array.rs:7")];
        assert_eq!(
            super::program_frame(&outside, &[]).as_deref(),
            Some("/work/main/dsm-runtime/src/array.rs:7 (fold)")
        );
    }

    use super::super::{Access, Alloc, Bytes, Log, PageBits, Segment, Site};
    use super::*;

    fn seg(thread: u32, clock: u32, seen: Vec<(u32, u32)>, accesses: Vec<Access>) -> Segment {
        Segment {
            thread,
            epoch: 0,
            clock,
            seen,
            accesses,
        }
    }

    fn acc(site: u32, write: bool, lo: u16, hi: u16) -> Access {
        // Bits for writes and runs for reads: both forms, and both mixed, are compared.
        let bytes = if write {
            let mut bits: Box<PageBits> = Box::new([0; dsm_core::PAGE_SIZE / 64]);
            super::super::set_bits(&mut bits, lo.into(), hi.into());
            Bytes::Bits(bits)
        } else {
            Bytes::Runs(vec![(lo, hi)])
        };
        Access {
            page: 0,
            site,
            write,
            bytes,
        }
    }

    fn log(node: u16, segments: Vec<Segment>) -> Log {
        Log {
            node,
            sites: vec![
                Site::Line {
                    file: "a.rs".into(),
                    line: 1,
                },
                Site::Line {
                    file: "a.rs".into(),
                    line: 2,
                },
            ],
            allocs: vec![Alloc {
                offset: 0,
                bytes: 4096,
                element: 8,
                site: 0,
            }],
            segments,
            ..Log::default()
        }
    }

    /// A lock passed back and forth 20,000 times between two threads (each segment has seen
    /// the other thread's last): no race, found without comparing every pair; one segment
    /// that has not seen the other's last: one race.
    #[test]
    fn a_long_chain_of_ordered_segments_is_compared_without_every_pair() {
        let t1 = VC_THREADS as u32;
        let chain = |broken: Option<u32>| {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for k in 1..=10_000u32 {
                // Thread 0's segment k has seen thread 1's segment k - 1, and thread 1's
                // segment k thread 0's segment k.
                a.push(seg(0, k, vec![(t1, k - 1)], vec![acc(0, true, 0, 8)]));
                let seen = if broken == Some(k) { k - 1 } else { k };
                b.push(seg(t1, k, vec![(0, seen)], vec![acc(1, true, 0, 8)]));
            }
            vec![log(0, a), log(1, b)]
        };
        assert!(find(&chain(None)).is_empty());
        let races = find(&chain(Some(5_000)));
        assert_eq!(races.len(), 1, "{races:?}");
        assert_eq!(races[0].times, 1);
    }

    #[test]
    fn unordered_writes_to_the_same_bytes_race_and_ordered_ones_or_other_bytes_do_not() {
        let t1 = VC_THREADS as u32;
        // Node 0 writes bytes 0..8; node 1 writes 0..8 unordered: a race.
        let logs = vec![
            log(0, vec![seg(0, 1, vec![], vec![acc(0, true, 0, 8)])]),
            log(1, vec![seg(t1, 1, vec![], vec![acc(1, true, 0, 8)])]),
        ];
        let races = find(&logs);
        assert_eq!(races.len(), 1);
        assert_eq!(races[0].offset, 0);
        let text = render(&logs, &races);
        assert!(text.contains("write-write"), "{text}");
        assert!(text.contains("node 1 thread 0 write at a.rs:2"), "{text}");
        assert!(
            text.contains("element 0 (byte 0) of the allocation at a.rs:1"),
            "{text}"
        );
        // Different bytes of the page (false sharing): none.
        let logs = vec![
            log(0, vec![seg(0, 1, vec![], vec![acc(0, true, 0, 8)])]),
            log(1, vec![seg(t1, 1, vec![], vec![acc(1, true, 8, 16)])]),
        ];
        assert!(find(&logs).is_empty());
        // Node 1's segment has seen node 0's (a lock passed between them): none.
        let logs = vec![
            log(0, vec![seg(0, 1, vec![], vec![acc(0, true, 0, 8)])]),
            log(1, vec![seg(t1, 2, vec![(0, 1)], vec![acc(1, false, 0, 8)])]),
        ];
        assert!(find(&logs).is_empty());
        // Two reads: none.
        let logs = vec![
            log(0, vec![seg(0, 1, vec![], vec![acc(0, false, 0, 8)])]),
            log(1, vec![seg(t1, 1, vec![], vec![acc(1, false, 0, 8)])]),
        ];
        assert!(find(&logs).is_empty());
        // Seen an older segment of node 0 only: the later one races with a read.
        let logs = vec![
            log(
                0,
                vec![
                    seg(0, 1, vec![], vec![acc(0, true, 0, 8)]),
                    seg(0, 2, vec![], vec![acc(0, true, 0, 8)]),
                ],
            ),
            log(1, vec![seg(t1, 2, vec![(0, 1)], vec![acc(1, false, 4, 6)])]),
        ];
        let races = find(&logs);
        assert_eq!(races.len(), 1, "{races:?}");
        assert_eq!(races[0].offset, 4);
    }
}
