//! Shared helpers of the DSM application programs (`src/bin/*`): argument parsing, result lines,
//! and the job-wide verdict.

pub mod kernels;
pub mod sys;

pub use kernels::interior_first;

use std::sync::atomic::{AtomicBool, Ordering};

use dsm_runtime::{AllocPolicy, Dsm, NodeId, Shared, SharedArray};

/// The program checks its result (not with `--no-check`).
static CHECK: AtomicBool = AtomicBool::new(true);

/// Whether this run checks its result (`--no-check` turns it off: see [`args_with_check`]).
pub fn checking() -> bool {
    CHECK.load(Ordering::Relaxed)
}

/// Rows `[start, end)` of `n` that node `me` of `nodes` owns (bands as even as possible).
pub fn band(n: usize, me: usize, nodes: usize) -> (usize, usize) {
    (n * me / nodes, n * (me + 1) / nodes)
}

/// Bands of rows, one per node, whose boundaries fall on page boundaries where that costs little
/// balance, with the allocation that homes each band on its node. A page holding the end of one
/// band and the start of the next is written by two nodes: a twin and a diff per interval, and a
/// fetch before either may write it again (false sharing).
pub struct Bands {
    /// Node k's rows are `bounds[k]..bounds[k + 1]`.
    bounds: Vec<usize>,
    row_bytes: usize,
}

impl Bands {
    /// `rows` rows of `row_bytes` bytes over `nodes` nodes. Each boundary moves to the nearest
    /// row that starts a page if that is within 5% of a band (at least one row) of the even
    /// split; otherwise it stays where the even split puts it.
    pub fn page_aligned(rows: usize, row_bytes: usize, nodes: usize) -> Bands {
        let page = dsm_runtime::PAGE_SIZE;
        // Rows that start a page: every `step`-th one.
        let step = page / gcd(row_bytes, page);
        let slack = (rows / nodes / 20).max(1);
        let mut bounds = vec![0];
        for k in 1..nodes {
            let even = rows * k / nodes;
            let aligned = (even + step / 2) / step * step;
            let b = if even.abs_diff(aligned) <= slack {
                aligned
            } else {
                even
            };
            bounds.push(b.clamp(bounds[k - 1], rows));
        }
        bounds.push(rows);
        Bands { bounds, row_bytes }
    }

    /// Node `node`'s rows, `(first, end)`.
    pub fn of(&self, node: usize) -> (usize, usize) {
        (self.bounds[node], self.bounds[node + 1])
    }

    /// The allocation that homes each node's band on it (`jia_alloc4`'s blocks, in whole pages:
    /// a page a boundary falls inside goes to the band that starts in it). Bands too small to
    /// own a page fall back to the cyclic split of [`banded`].
    pub fn policy(&self) -> AllocPolicy {
        let page = dsm_runtime::PAGE_SIZE;
        let nodes = self.bounds.len() - 1;
        let rows = self.bounds[nodes];
        // The page each band starts in; the last band ends with the allocation's last page.
        let start_page = |k: usize| {
            if k == nodes {
                (rows * self.row_bytes).div_ceil(page)
            } else {
                self.bounds[k] * self.row_bytes / page
            }
        };
        let blocks_bytes: Vec<u64> = (0..nodes)
            .map(|k| ((start_page(k + 1) - start_page(k)) * page) as u64)
            .collect();
        if blocks_bytes.contains(&0) {
            return banded(rows, self.row_bytes, nodes);
        }
        AllocPolicy::Blocks {
            blocks_bytes,
            start: NodeId(0),
        }
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// A cyclic allocation whose blocks are the nodes' bands of `rows` rows of `row_bytes` each.
pub fn banded(rows: usize, row_bytes: usize, nodes: usize) -> AllocPolicy {
    AllocPolicy::Cyclic {
        block_bytes: (rows.div_ceil(nodes) * row_bytes) as u64,
        start: NodeId(0),
    }
}

/// `len` elements allocated collectively under `policy` ([`Dsm::alloc`]). A refusal (a
/// region too small for the array, with the setting that sizes it) ends the job on every node
/// with the reason and status 1, as `jia_error` does: not a panic.
#[track_caller]
pub fn alloc<T: Shared>(dsm: &Dsm, len: usize, policy: AllocPolicy) -> SharedArray<T> {
    match dsm.alloc(len, policy) {
        Ok(a) => a,
        Err(e) => dsm.error(&format!(
            "allocating {len} elements of {} bytes: {e}",
            std::mem::size_of::<T>()
        )),
    }
}

/// Combines every node's verdict: each node writes whether its part is right; after a barrier
/// node 0 learns whether all are. Returns the job-wide verdict at node 0 (and this node's
/// elsewhere).
pub fn all_ok(dsm: &Dsm, ok: bool) -> bool {
    let flags: SharedArray<u64> = alloc(dsm, dsm.nodes(), AllocPolicy::OnNode(NodeId(0)));
    flags.set(dsm.id(), u64::from(ok));
    dsm.barrier();
    if dsm.id() == 0 {
        (0..dsm.nodes()).all(|i| flags.get(i) == 1)
    } else {
        ok
    }
}

/// The program's command line: its positional arguments (`(NAME, help)`, all optional), with
/// `--help` and `--version`, and a usage error (exit 2) for anything else. Returns the
/// arguments given, in order, for [`arg_num`] and friends.
pub fn args(
    name: &'static str,
    about: &'static str,
    positional: &[(&'static str, &'static str)],
) -> Vec<String> {
    let m = matches(name, command(name, about, positional));
    set_threads(name, &m);
    given(&m, positional)
}

/// [`args`] with a `--no-check` flag: returns the positional arguments and whether to check the
/// result (not with `--no-check`: timing runs leave the check out, and check in runs of their
/// own).
pub fn args_with_check(
    name: &'static str,
    about: &'static str,
    positional: &[(&'static str, &'static str)],
) -> (Vec<String>, bool) {
    let (args, check, _) = args_with_flags(name, about, positional, &[]);
    (args, check)
}

/// [`args_with_check`] with flags of the program's own (`(long name, help)`): returns whether
/// each was given, in order, too.
pub fn args_with_flags(
    name: &'static str,
    about: &'static str,
    positional: &[(&'static str, &'static str)],
    flags: &[(&'static str, &'static str)],
) -> (Vec<String>, bool, Vec<bool>) {
    let mut cmd = command(name, about, positional).arg(
        clap::Arg::new("no-check")
            .long("no-check")
            .action(clap::ArgAction::SetTrue)
            .help("Skip the self-check (for timing runs); the result line says UNCHECKED"),
    );
    for &(flag, help) in flags {
        cmd = cmd.arg(
            clap::Arg::new(flag)
                .long(flag)
                .action(clap::ArgAction::SetTrue)
                .help(help),
        );
    }
    let m = matches(name, cmd);
    set_threads(name, &m);
    let check = !m.get_flag("no-check");
    CHECK.store(check, Ordering::Relaxed);
    let given_flags = flags.iter().map(|(f, _)| m.get_flag(f)).collect();
    (given(&m, positional), check, given_flags)
}

/// dsmrun's options: given after the program, they reach the program, which says where they go.
/// `-np` reaches clap as `-n`. A test (`tests/tests/apps.rs`) holds this list to dsmrun's help.
const DSMRUN_OPTIONS: &[&str] = &[
    "-n",
    "-x",
    "--stats",
    "--stats-json",
    "--transport",
    "--hosts",
    "--hostfile",
    "--nodes",
    "--np",
    "--set",
    "--config",
    "--check-races",
    "--tag-output",
    "--output-filename",
    "--bind-to",
    "--join-timeout",
    "--remote-program",
    "--cpus-per-rank",
];

/// `cmd`'s matches of the command line; a usage error (exit 2) as clap says it, but for an
/// option of dsmrun's given after the program, said as such.
fn matches(name: &str, cmd: clap::Command) -> clap::ArgMatches {
    let e = match cmd.try_get_matches() {
        Ok(m) => return m,
        Err(e) => e,
    };
    if e.kind() == clap::error::ErrorKind::UnknownArgument {
        let arg = e
            .get(clap::error::ContextKind::InvalidArg)
            .map(|v| v.to_string());
        if let Some(arg) = arg {
            let option = arg.split('=').next().unwrap_or(&arg);
            if DSMRUN_OPTIONS.contains(&option) {
                eprintln!(
                    "{name}: `{arg}` is an option of dsmrun, given after the program: dsmrun \
                     takes its options before it (dsmrun {option} ... {name} ARGS)"
                );
                std::process::exit(2);
            }
        }
    }
    e.exit()
}

/// The tools built on these arguments that read a finished job's files instead of joining one.
const OFFLINE: &[&str] = &["fault-trace"];

fn command(
    name: &'static str,
    about: &'static str,
    positional: &[(&'static str, &'static str)],
) -> clap::Command {
    // A reader of a finished job's files runs alone, and needs them named.
    let offline = OFFLINE.contains(&name);
    let mut cmd = clap::Command::new(name)
        .version(env!("CARGO_PKG_VERSION"))
        .about(about)
        .after_help(if offline {
            "It reads the files of a finished job, by itself (not under dsmrun)."
        } else {
            "Run it on several nodes with dsmrun, e.g. `dsmrun -n 4 PROGRAM ARGS`."
        });
    // Only the programs that run threads offer `--threads`; the others say so if given it.
    let threaded = THREADED.contains(&name);
    cmd = cmd.arg(
        clap::Arg::new("threads")
            .long("threads")
            .value_name("T")
            .value_parser(clap::value_parser!(u16).range(1..=MAX_THREADS_PER_NODE))
            .hide(!threaded)
            .help(
                "Threads per node (default 1; dsmrun --threads T sets DSM_THREADS): each \
                 node's share is split among T threads of it",
            ),
    );
    for (i, (arg, help)) in positional.iter().enumerate() {
        cmd = cmd.arg(
            clap::Arg::new(*arg)
                .help(*help)
                .index(i + 1)
                .required(offline),
        );
    }
    cmd
}

/// The most threads `--threads` gives a node: every thread that uses the DSM takes one of the
/// runtime's slots ([`dsm_runtime::MAX_THREADS`]), and matmul's reader of B one more.
const MAX_THREADS_PER_NODE: i64 = (dsm_runtime::MAX_THREADS / 2) as i64;

/// The apps whose work is split among the threads of a node (`--threads T`).
const THREADED: &[&str] = &["matmul", "sor", "lu", "pi", "workq", "stream"];

/// Threads per node, from `--threads` (or `DSM_THREADS`).
static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// Threads per node this run asks for (`--threads T`, default 1).
pub fn threads() -> usize {
    THREADS.load(Ordering::Relaxed)
}

fn set_threads(name: &str, m: &clap::ArgMatches) {
    let most = MAX_THREADS_PER_NODE as usize;
    // DSM_THREADS (dsmrun --threads) and srun's `-c T` are for the programs that run threads;
    // the others ignore them (only an explicit --threads is refused there).
    let threaded = THREADED.contains(&name);
    let from_env = std::env::var("DSM_THREADS")
        .ok()
        .filter(|_| threaded)
        .map(|v| {
            v.parse::<usize>()
                .ok()
                .filter(|t| (1..=most).contains(t))
                .unwrap_or_else(|| {
                    eprintln!("{name}: DSM_THREADS={v}: threads per node must be 1 to {most}");
                    std::process::exit(2)
                })
        });
    let from_slurm = std::env::var("SLURM_CPUS_PER_TASK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|t| (1..=most).contains(t) && threaded);
    let t = m
        .get_one::<u16>("threads")
        .map(|&t| usize::from(t))
        .or(from_env)
        .or(from_slurm)
        .unwrap_or(1);
    if t > 1 && !THREADED.contains(&name) {
        eprintln!(
            "{name}: --threads {t}: this program runs one thread per node (threads inside nodes: \
             {}); run more nodes instead",
            THREADED.join(", ")
        );
        std::process::exit(2);
    }
    THREADS.store(t, Ordering::Relaxed);
}

/// Thread `t`'s share `[start, end)` of `range`, split among `threads` as evenly as possible.
pub fn share(range: (usize, usize), t: usize, threads: usize) -> (usize, usize) {
    let (start, len) = (range.0, range.1 - range.0);
    (start + len * t / threads, start + len * (t + 1) / threads)
}

fn given(m: &clap::ArgMatches, positional: &[(&'static str, &'static str)]) -> Vec<String> {
    positional
        .iter()
        .map_while(|(arg, _)| m.get_one::<String>(arg).cloned())
        .collect()
}

/// Parses the positional argument `i` as a number, with a default; exits with a usage message
/// on a bad value.
pub fn arg_num(args: &[String], i: usize, name: &str, default: usize) -> usize {
    arg_range(args, i, name, default, 0..=usize::MAX)
}

/// [`arg_num`] of a count that must be at least 1: 0 exits with a usage message too.
pub fn arg_count(args: &[String], i: usize, name: &str, default: usize) -> usize {
    arg_range(args, i, name, default, 1..=usize::MAX)
}

/// [`arg_num`] of a number that must lie in `allowed`: anything else (not a whole number, or
/// outside) exits with one usage message naming what is allowed (never taken as the nearest
/// allowed value).
pub fn arg_range(
    args: &[String],
    i: usize,
    name: &str,
    default: usize,
    allowed: std::ops::RangeInclusive<usize>,
) -> usize {
    let Some(v) = args.get(i) else {
        return default;
    };
    match v.parse::<usize>() {
        Ok(n) if allowed.contains(&n) => n,
        _ => {
            let what = if *allowed.end() == usize::MAX {
                format!("{} or more", allowed.start())
            } else {
                format!("{} to {}", allowed.start(), allowed.end())
            };
            eprintln!("{name} must be a whole number, {what}, got `{v}`");
            std::process::exit(2)
        }
    }
}

/// Prints the result line at node 0 (`NAME OK key=value...`, `NAME FAILED ...`, or `NAME
/// UNCHECKED ...` with `--no-check`) from every node's verdict, and ends the job with an error if
/// any node's part is wrong.
pub fn report(dsm: &Dsm, name: &str, ok: bool, details: &str) {
    let all = all_ok(dsm, ok);
    if dsm.id() == 0 {
        println!(
            "{name} {} nodes={} {details}",
            match (checking(), all) {
                (false, _) => "UNCHECKED",
                (true, true) => "OK",
                (true, false) => "FAILED",
            },
            dsm.nodes()
        );
        if !all {
            dsm.error(&format!("{name}: wrong result"));
        }
    }
}

/// Joins the job or exits with status 2 and the reason.
pub fn init(name: &str) -> Dsm {
    dsm_runtime::init().unwrap_or_else(|e| {
        eprintln!("{name}: {e}");
        std::process::exit(2)
    })
}

/// LU's input: an N x N diagonally dominant matrix (no pivoting needed), row-major, the same
/// for every run of a size (`lu` and `plain lu`).
pub fn lu_matrix(n: usize) -> Vec<f64> {
    let mut g = Gen(0x1u64 << 40 | n as u64);
    let mut a: Vec<f64> = (0..n * n).map(|_| g.unit() - 0.5).collect();
    for i in 0..n {
        a[i * n + i] += n as f64;
    }
    a
}

/// A small deterministic generator (xorshift64*), for inputs every node can recompute.
pub struct Gen(pub u64);

impl Gen {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The total of `times` (seconds) and their 10th, 50th and 90th percentiles and maximum (us).
pub fn spread(times: &mut [f64]) -> String {
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize] * 1e6;
    format!(
        "{:.3}s (us: p10 {:.0}, p50 {:.0}, p90 {:.0}, max {:.0})",
        times.iter().sum::<f64>(),
        at(0.1),
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

#[cfg(test)]
mod tests {
    use super::{Bands, interior_first};
    use dsm_runtime::{AllocPolicy, PAGE_SIZE};

    #[test]
    fn bands_start_on_pages_when_balance_allows() {
        // sor 1024: rows of 1026 doubles (8208 bytes) start a page every 256 rows.
        let b = Bands::page_aligned(1026, 8208, 2);
        assert_eq!((b.of(0), b.of(1)), ((0, 512), (512, 1026)));
        assert_eq!(512 * 8208 % PAGE_SIZE, 0);
        let b = Bands::page_aligned(1026, 8208, 4);
        assert_eq!(b.of(1), (256, 512));
        assert_eq!(b.of(3), (768, 1026));
        // Too coarse to align without losing balance: the even split.
        let b = Bands::page_aligned(100, 8, 3);
        assert_eq!((b.of(0), b.of(1), b.of(2)), ((0, 33), (33, 66), (66, 100)));
        // Rows that are whole pages align everywhere.
        let b = Bands::page_aligned(10, PAGE_SIZE, 3);
        assert_eq!((b.of(0), b.of(1), b.of(2)), ((0, 3), (3, 6), (6, 10)));
        match b.policy() {
            AllocPolicy::Blocks { blocks_bytes, .. } => {
                assert_eq!(blocks_bytes, [3, 3, 4].map(|r| (r * PAGE_SIZE) as u64))
            }
            p => panic!("{p:?}"),
        }
        // Bands within one page (here more nodes than rows): the cyclic split.
        let b = Bands::page_aligned(2, 8, 4);
        assert_eq!((0..4).map(|k| b.of(k).1 - b.of(k).0).sum::<usize>(), 2);
        assert!(matches!(b.policy(), AllocPolicy::Cyclic { .. }));
        // Unaligned boundaries: the page a boundary falls in goes to the later band.
        let b = Bands::page_aligned(100, 3000, 2);
        assert_eq!(b.of(1), (50, 100));
        match b.policy() {
            AllocPolicy::Blocks { blocks_bytes, .. } => {
                assert_eq!(blocks_bytes, [36, 38].map(|p| (p * PAGE_SIZE) as u64))
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn interior_first_visits_every_row_once_boundaries_last() {
        assert_eq!(interior_first(1, 6).collect::<Vec<_>>(), [2, 3, 4, 1, 5]);
        assert_eq!(interior_first(3, 5).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(interior_first(3, 4).collect::<Vec<_>>(), [3]);
        assert_eq!(interior_first(3, 3).count(), 0);
        assert_eq!(interior_first(5, 2).count(), 0);
        for first in 0..6 {
            for last in 0..9 {
                let mut v: Vec<usize> = interior_first(first, last).collect();
                v.sort_unstable();
                assert_eq!(v, (first..last).collect::<Vec<_>>(), "{first}..{last}");
            }
        }
    }
}
