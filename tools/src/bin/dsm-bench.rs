//! dsm-bench: compare transports, node counts and prefetch settings by measurement.
//!
//! ```text
//! dsm-bench [--quick] [--apps matmul:1024,sor,lu] [--nodes 1,2,4] [--threads 1,4,16]
//!           [--transports udp,tcp]
//!           [--prefetch on,off] [--repeat 5] [--baseline nodes=1] [--csv F] [--json F]
//!           [--chart PREFIX] [--no-floors] [--no-pairs]
//! dsm-bench --floors-only [--repeat 5] [--hosts FILE]
//! ```
//!
//! Runs every combination through `dsmrun` (next to this binary), `--repeat` rounds of every
//! combination once (so load that drifts during the run slows every cell alike), and prints
//! the median whole-job time (from `dsmrun` start to exit: start-up counts), its min and max, the
//! median compute time the app reports, the GETP count, and the ratio of the median to the
//! baseline cell (the same cell with the baseline's parameter changed; default: on 1 node). At
//! the start of each round it samples the floors too, printed before the table: the bare fault +
//! mprotect cost, the cost of backing a fresh page with memory, the UDP and TCP round trip of a
//! page-shaped exchange, and the remote fault latency as a ratio to them; and remote pages
//! streamed (the `stream` app, 2 nodes, UDP and TCP through the transport, `same_host =
//! transport`, and read in place in the home's memory, shown from it, the default between nodes
//! of one host, and copied from it, `same_host = memory`)
//! beside a plain TCP stream between two processes of the machine and the same stream landed in
//! fresh pages of a memory
//! file and read (what any page-based DSM must do with what it receives), in the same sample,
//! with their ratios. With 1 and
//! more nodes in the matrix, every round also runs two 1-node jobs of each app at once (row
//! `2 jobs`): twice the time of one job alone over their time together is how much work the
//! machine does in parallel right then, the ceiling of a 2-node ratio (`--no-pairs` leaves them
//! out). Writes CSV, JSON, and a chart (SVG and PNG) of time per app per transport.
//!
//! `--floors-only --hosts FILE` measures between the first two hosts of a `.jiahosts` instead:
//! remote pages streamed from the first to the second (`dsmrun --hosts`, UDP and TCP) beside a
//! plain TCP stream between the same two hosts (this binary on both, started by `dsmrun`), and
//! the fault and round-trip latencies of `faultlat` there. The binaries must be at the same
//! path on both hosts, as for any `dsmrun --hosts` job.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use dsm_tools::stream::Receiver;
use plotters::prelude::*;

#[derive(Clone, Debug, PartialEq)]
struct Cell {
    app: String,
    args: Vec<String>,
    nodes: usize,
    transport: String,
    prefetch: bool,
    /// A setting of the variant (`--set`), e.g. `check_races=on`.
    set: Option<String>,
    /// Two 1-node jobs of the app at once (the machine's parallel capacity for it), not a DSM job.
    pair: bool,
    /// Application threads per node (`dsmrun --threads`).
    threads: usize,
}

impl Cell {
    /// `app`, or `app:arg:arg` when arguments were given (two sizes of one app stay apart).
    fn label(&self) -> String {
        let app = std::iter::once(self.app.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(":");
        let app = match self.threads {
            1 => app,
            t => format!("{app} x{t} threads"),
        };
        match &self.set {
            Some(kv) => format!("{app}[{kv}]"),
            None => app,
        }
    }
}

#[derive(Clone, Debug)]
struct Outcome {
    cell: Cell,
    walls: Vec<f64>,
    computes: Vec<f64>,
    getps: Vec<u64>,
    /// The cell's self-check run (its app's own check of the result) failed or was wrong.
    check_failed: bool,
    /// Timed runs that failed.
    failures: usize,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        // Even: the mean of the two middle samples (the upper one alone made the median of two
        // runs their maximum).
        n if n % 2 == 0 => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        n => s[n / 2],
    }
}

/// What a failed job said: its output and the last lines of its errors (the program's own
/// complaint comes before the launcher's line naming the node).
fn failure_text(stdout: &str, stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = &lines[lines.len().saturating_sub(3)..];
    format!("{stdout}{}", last.join(" | "))
}

/// The command line (clap): what to run and where the results go.
#[derive(clap::Parser)]
#[command(
    name = "dsm-bench",
    version,
    about = "The DSM's costs against the machine's floors, and every app's time per node count, transport and prefetch setting",
    after_help = "Checks every cell once with the app's self-check, then runs every cell of the matrix once \
                  per round without it (--no-check), --repeat rounds, through dsmrun (next to this \
                  binary). Prints the floors, then per cell the median whole-job time, its min and max, the \
                  median compute time the app reports, the GETPs and the ratio to the baseline cell. --json \
                  and --csv hold every run's raw samples and every floor sample.\n\n\
                  Exit status: 0, or 1 if a run failed or an output file could not be written, 2 for \
                  bad options (an output file that cannot be made among them)."
)]
struct Args {
    /// A quick matrix: matmul 1024, sor and lu 512 on 1 and 2 nodes, prefetch on, 3 rounds
    /// (options given with it win).
    #[arg(long)]
    quick: bool,
    /// Apps and their arguments, e.g. matmul:2048,sor:1024:100,lu.
    #[arg(long, value_name = "APP[:ARG..],..")]
    apps: Option<String>,
    /// Node counts.
    #[arg(long, value_delimiter = ',', value_name = "N,..")]
    nodes: Option<Vec<usize>>,
    /// Application threads per node (dsmrun --threads), each count a cell of its own: with
    /// --nodes, a nodes x threads table [default: 1].
    #[arg(long, value_delimiter = ',', value_name = "T,..")]
    threads: Option<Vec<usize>>,
    /// Transports.
    #[arg(long, value_delimiter = ',', value_name = "T,..",
          value_parser = ["udp", "tcp", "rdma-rc", "rdma-ud"])]
    transports: Option<Vec<String>>,
    /// Prefetch settings.
    #[arg(long, value_delimiter = ',', value_name = "on,off", value_parser = ["on", "off"])]
    prefetch: Option<Vec<String>>,
    /// Variants of one setting, each a cell of its own, e.g. check_races=off,check_races=on
    /// (the apps' label shows it).
    #[arg(long = "set", value_delimiter = ',', value_name = "KEY=VALUE,..")]
    set: Option<Vec<String>>,
    /// Rounds (each cell runs once per round) [default: 5].
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,
    /// The cell each ratio is taken against: nodes=N, threads=T, transport=T, prefetch=on|off
    /// or set=KEY=VALUE [default: nodes=1].
    #[arg(long, value_name = "KEY=VALUE")]
    baseline: Option<String>,
    /// Every run's samples and the floors as CSV.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Every run's samples, the floors and the machine as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The chart's files: PREFIX.svg and PREFIX.png.
    #[arg(long, value_name = "PREFIX", default_value = "bench")]
    chart: String,
    /// No chart.
    #[arg(long)]
    no_chart: bool,
    /// Leave out the floors.
    #[arg(long)]
    no_floors: bool,
    /// Only the floors, --repeat samples.
    #[arg(long, conflicts_with = "no_floors")]
    floors_only: bool,
    /// With --floors-only: measure between the first two hosts of FILE (a .jiahosts), the
    /// streams beside a plain TCP stream between those hosts, instead of on this machine.
    #[arg(long, value_name = "FILE", requires = "floors_only")]
    hosts: Option<PathBuf>,
    /// Leave out the "2 jobs" rows (two 1-node jobs at once: the machine's ceiling).
    #[arg(long)]
    no_pairs: bool,
    /// Also run the MPI versions of matmul and sor (the yardstick, bench/mpi: build it with
    /// scripts/build-mpi) under mpirun, as transport `mpi`, beside the DSM in the same rounds.
    #[arg(long)]
    mpi: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("dsm-bench: {msg} (see dsm-bench --help)");
    std::process::exit(2)
}

struct Options {
    apps: Vec<(String, Vec<String>)>,
    nodes: Vec<usize>,
    threads: Vec<usize>,
    transports: Vec<String>,
    prefetch: Vec<bool>,
    /// `--set` variants (`[None]` without it).
    sets: Vec<Option<String>>,
    repeat: usize,
    baseline: (String, String),
    csv: Option<PathBuf>,
    json: Option<PathBuf>,
    chart: Option<String>,
    floors: bool,
    /// Only the floors, `repeat` samples.
    floors_only: bool,
    /// `--hosts`: the two hosts to take the floors between.
    between: Option<[dsm_runtime::config::Host; 2]>,
    pairs: bool,
    mpi: bool,
}

/// The apps dsm-bench runs (`--apps`): the DSM programs of `apps/` that print `time=`.
const BENCH_APPS: &[&str] = &[
    "matmul", "sor", "lu", "jacobi", "pi", "tsp", "water", "is", "ep", "stream", "workq",
];

fn parse_apps(s: &str) -> Vec<(String, Vec<String>)> {
    s.split(',')
        .filter(|a| !a.is_empty())
        .map(|a| {
            let mut parts = a.split(':');
            let name = parts.next().unwrap_or_default().to_string();
            (name, parts.map(str::to_string).collect())
        })
        .collect()
}

fn options() -> Options {
    let a = <Args as clap::Parser>::parse();
    let mut o = Options {
        // Sizes where the work is a few tenths of a second on one node (the apps' own defaults
        // are smaller, for quick runs and tests).
        apps: parse_apps(
            "matmul:1024,sor:1024:100,lu:1024:64,jacobi:1024:100,pi,tsp,water:4096:4,is,ep",
        ),
        nodes: vec![1, 2, 4],
        threads: vec![1],
        transports: vec!["udp".into(), "tcp".into()],
        prefetch: vec![true, false],
        sets: vec![None],
        repeat: 5,
        baseline: ("nodes".into(), "1".into()),
        csv: a.csv,
        json: a.json,
        chart: (!a.no_chart).then_some(a.chart),
        floors: !a.no_floors,
        floors_only: a.floors_only,
        between: a.hosts.as_deref().map(two_hosts),
        pairs: !a.no_pairs,
        mpi: a.mpi,
    };
    if a.quick {
        o.apps = parse_apps("matmul:1024,sor:512:20,lu:512:32");
        o.nodes = vec![1, 2];
        o.prefetch = vec![true];
        o.repeat = 3;
    }
    if let Some(apps) = &a.apps {
        o.apps = parse_apps(apps);
        for (app, _) in &o.apps {
            if !BENCH_APPS.contains(&app.as_str()) {
                usage(&format!(
                    "--apps: `{app}` is not an app dsm-bench runs; the apps: {}",
                    BENCH_APPS.join(", ")
                ));
            }
        }
    }
    if let Some(n) = a.nodes {
        o.nodes = n;
    }
    if let Some(t) = a.threads {
        o.threads = t;
    }
    if let Some(t) = a.transports {
        o.transports = t;
    }
    if let Some(p) = a.prefetch {
        o.prefetch = p.iter().map(|p| p == "on").collect();
    }
    if let Some(r) = a.repeat {
        o.repeat = r;
    }
    if let Some(sets) = a.set {
        for kv in &sets {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| usage(&format!("--set {kv}: expected KEY=VALUE")));
            if k.trim() == "prefetch" {
                usage(&format!(
                    "--set {kv}: prefetch is a column of the matrix: give --prefetch on, off or \
                     on,off"
                ));
            }
            if let Err(e) = dsm_runtime::config::Config::default().set(
                k.trim(),
                v.trim(),
                &dsm_runtime::config::Origin::Flag(format!("--set {kv}")),
            ) {
                usage(&e.to_string());
            }
        }
        o.sets = sets.into_iter().map(Some).collect();
    }
    let given = a.baseline.is_some();
    let baseline = a.baseline.unwrap_or_else(|| "nodes=1".into());
    let (k, v) = baseline.split_once('=').unwrap_or_else(|| {
        usage("--baseline KEY=VALUE (nodes, threads, transport, prefetch, set)")
    });
    if !matches!(k, "nodes" | "threads" | "transport" | "prefetch" | "set") {
        usage("--baseline: the key is nodes, threads, transport, prefetch or set");
    }
    o.baseline = (k.into(), v.into());
    // A baseline asked for is a cell of the matrix, or every ratio would be blank (the default,
    // 1 node, may be left out: its ratios are then blank).
    let values: Vec<String> = match k {
        "nodes" => o.nodes.iter().map(ToString::to_string).collect(),
        "threads" => o.threads.iter().map(ToString::to_string).collect(),
        "transport" => o.transports.clone(),
        "prefetch" => o
            .prefetch
            .iter()
            .map(|&p| if p { "on" } else { "off" }.to_string())
            .collect(),
        _ => o.sets.iter().flatten().cloned().collect(),
    };
    if given && !values.iter().any(|x| x == v) {
        usage(&format!(
            "--baseline {k}={v}: no cell has {k}={v} (the matrix's {k}: {})",
            if values.is_empty() {
                "none".to_string()
            } else {
                values.join(", ")
            }
        ));
    }
    once_each("--nodes", o.nodes.iter().map(ToString::to_string));
    once_each("--threads", o.threads.iter().map(ToString::to_string));
    once_each("--transports", o.transports.iter().cloned());
    once_each(
        "--prefetch",
        o.prefetch
            .iter()
            .map(|&p| if p { "on" } else { "off" }.into()),
    );
    if o.repeat == 0 || o.apps.is_empty() || o.nodes.is_empty() || o.nodes.contains(&0) {
        usage("nothing to run (--repeat, --apps and --nodes need at least one, nodes above 0)");
    }
    if o.threads.is_empty() || o.threads.iter().any(|&t| t == 0 || t > 1024) {
        usage("--threads: counts from 1 to 1024");
    }
    o
}

/// A usage error if `values` (of `flag`) names one twice: each would be a cell of its own, run
/// and reported twice.
fn once_each(flag: &str, values: impl Iterator<Item = String>) {
    let mut seen: Vec<String> = Vec::new();
    for v in values {
        if seen.contains(&v) {
            usage(&format!(
                "{flag}: {v} is given twice (each value is a cell of its own)"
            ));
        }
        seen.push(v);
    }
}

/// The first two different hosts of the `.jiahosts` at `path`; a usage error if it cannot be
/// read or names fewer.
fn two_hosts(path: &Path) -> [dsm_runtime::config::Host; 2] {
    let shown = path.display().to_string();
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| usage(&format!("--hosts {shown}: {e}")));
    let mut hosts = dsm_runtime::config::parse_hosts(&shown, &text, |w| {
        eprintln!("dsm-bench: {w}");
    })
    .unwrap_or_else(|e| usage(&format!("--hosts: {e}")))
    .into_iter();
    let first = hosts
        .next()
        .unwrap_or_else(|| usage(&format!("--hosts {shown}: no host")));
    let second = hosts.find(|h| h.address != first.address).unwrap_or_else(|| {
        usage(&format!(
            "--hosts {shown}: one host ({}); two different ones are needed, the streams go from \
             the first to the second",
            first.address
        ))
    });
    [first, second]
}

/// The two hosts `--hosts` measures between.
#[derive(Debug)]
struct Between {
    /// A hosts file of the two (in the temporary directory, removed on drop).
    file: PathBuf,
    /// The first host (the home of the streams) and the second (their reader), as named.
    hosts: [String; 2],
}

impl Between {
    /// A hosts file of `hosts`, new, in the temporary directory.
    fn new(hosts: [dsm_runtime::config::Host; 2]) -> std::io::Result<Between> {
        use std::io::Write as _;
        let line = |h: &dsm_runtime::config::Host| match &h.user {
            Some(u) => format!("{} {u}\n", h.address),
            None => format!("{}\n", h.address),
        };
        let file = std::env::temp_dir().join(format!(
            "dsm-bench-hosts-{}-{:08x}",
            std::process::id(),
            nanos()
        ));
        // A new file of ours (never one planted there, or a link).
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)?
            .write_all((line(&hosts[0]) + &line(&hosts[1])).as_bytes())?;
        let [a, b] = hosts;
        Ok(Between {
            file,
            hosts: [a.address, b.address],
        })
    }

    /// A plain TCP stream of [`STREAM_MB`] from the first host to the second: this binary on
    /// both, started by `dsmrun --hosts` (see [`dsm_tools::stream::between`]), on a port picked
    /// at random (another, up to three times, if it is taken).
    fn plain_stream(&self) -> Result<f64, String> {
        use dsm_tools::stream::{BETWEEN_ENV, BETWEEN_PREFIX, PORT_TAKEN};
        let me = std::env::current_exe().map_err(|e| format!("my own path: {e}"))?;
        let mut failed = String::new();
        for attempt in 0..3u32 {
            let nanos = nanos();
            let port = 20_000 + (nanos ^ std::process::id() ^ attempt.wrapping_mul(7_919)) % 40_000;
            // The two ends know each other by this: a stranger on the port is not measured.
            let nonce = u64::from(nanos) << 32 | u64::from(std::process::id());
            let out = Command::new(bin("dsmrun"))
                .arg("--hosts")
                .arg(&self.file)
                .arg(&me)
                .env(
                    BETWEEN_ENV,
                    format!("{STREAM_MB}:{port}:{nonce:x}:{}", self.hosts[1]),
                )
                .output()
                .map_err(|e| format!("dsmrun: {e}"))?;
            let rate = String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
                let at = l.find(BETWEEN_PREFIX)?;
                l[at + BETWEEN_PREFIX.len()..].trim().parse::<f64>().ok()
            });
            if let Some(v) = rate {
                return Ok(v);
            }
            failed = String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| !l.contains("never called jia_init"))
                .collect::<Vec<_>>()
                .join("; ");
            // Only a port taken on the receiving host is worth another try (another port).
            if !failed.contains(PORT_TAKEN) {
                return Err(format!("port {port}: {failed}"));
            }
        }
        Err(format!("three ports taken ({failed})"))
    }
}

/// The nanoseconds of the clock's current second: what varies between runs, for names and ports.
fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

impl Drop for Between {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

fn bin(name: &str) -> PathBuf {
    let me = std::env::current_exe().unwrap_or_else(|_| usage("cannot find my own path"));
    let p = me.with_file_name(name);
    if !p.exists() {
        usage(&format!(
            "{} not found next to dsm-bench: build with `cargo build --release`",
            p.display()
        ));
    }
    p
}

/// One run: whole-job wall seconds, the app's compute seconds, GETPs summed over nodes. For a
/// pair cell: two 1-node jobs started together; the later end and the slower compute.
fn run_once(cell: &Cell) -> Result<(f64, f64, u64), String> {
    run_timed(cell, false)
}

/// One run of `cell`; the timed runs leave the app's self-check out (`--no-check`: node 0's
/// sequential recomputation is not what is measured), and `checked` runs keep it.
fn run_timed(cell: &Cell, checked: bool) -> Result<(f64, f64, u64), String> {
    if cell.pair {
        let one = Cell {
            pair: false,
            threads: 1,
            ..cell.clone()
        };
        let (a, b) = std::thread::scope(|s| {
            let other = s.spawn(|| run_job(&one, checked));
            (
                run_job(&one, checked),
                other.join().unwrap_or(Err("panicked".into())),
            )
        });
        let ((wa, ca, _), (wb, cb, _)) = (a?, b?);
        return Ok((wa.max(wb), ca.max(cb), 0));
    }
    run_job(cell, checked)
}

/// The apps that have an MPI version in bench/mpi (`APP-mpi`).
const MPI_APPS: [&str; 2] = ["matmul", "sor"];

/// Where the MPI versions are: `DSM_MPI_BIN`, else bench/mpi/target/release of the checkout this
/// binary was built in.
fn mpi_bin(app: &str) -> PathBuf {
    let dir = std::env::var_os("DSM_MPI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            bin("dsmrun")
                .parent()
                .and_then(Path::parent)
                .and_then(Path::parent)
                .map_or_else(PathBuf::new, |root| root.join("bench/mpi/target/release"))
        });
    dir.join(format!("{app}-mpi"))
}

/// `mpirun -np N APP-mpi ARGS` (as root, Open MPI wants --allow-run-as-root).
fn mpi_command(cell: &Cell, checked: bool) -> Command {
    let mut cmd = Command::new("mpirun");
    if std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    }) {
        cmd.arg("--allow-run-as-root");
    }
    cmd.args(["--oversubscribe", "-np", &cell.nodes.to_string()])
        .arg(mpi_bin(&cell.app))
        .args((!checked).then_some("--no-check"))
        .args(&cell.args);
    cmd
}

/// The compute time a program reports on its result line (`time=0.123s`).
fn reported_time(stdout: &str) -> f64 {
    stdout
        .split_whitespace()
        .find_map(|w| {
            w.strip_prefix("time=")
                .and_then(|v| v.trim_end_matches('s').parse().ok())
        })
        .unwrap_or(f64::NAN)
}

fn run_job(cell: &Cell, checked: bool) -> Result<(f64, f64, u64), String> {
    if cell.transport == "mpi" {
        let t = Instant::now();
        let out = mpi_command(cell, checked)
            .output()
            .map_err(|e| format!("mpirun: {e}"))?;
        let wall = t.elapsed().as_secs_f64();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let verdict = if checked { " OK " } else { " UNCHECKED " };
        if !out.status.success() || !stdout.contains(verdict) {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(failure_text(&stdout, &stderr));
        }
        let compute = stdout
            .split_whitespace()
            .find_map(|w| {
                w.strip_prefix("time=")
                    .and_then(|v| v.trim_end_matches('s').parse().ok())
            })
            .unwrap_or(f64::NAN);
        return Ok((wall, compute, 0));
    }
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        &cell.nodes.to_string(),
        "--threads",
        &cell.threads.to_string(),
        "--transport",
        &cell.transport,
        "--stats",
        "--set",
    ])
    .arg(format!(
        "prefetch={}",
        if cell.prefetch { "on" } else { "off" }
    ))
    .args(cell.set.iter().flat_map(|kv| ["--set", kv.as_str()]))
    .arg(bin(&cell.app))
    .args((!checked).then_some("--no-check"))
    .args(&cell.args);
    let t = Instant::now();
    let out = cmd.output().map_err(|e| e.to_string())?;
    let wall = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let verdict = if checked { " OK " } else { " UNCHECKED " };
    if !out.status.success() || !stdout.contains(verdict) {
        return Err(failure_text(&stdout, &stderr));
    }
    let compute = reported_time(&stdout);
    let getp = stderr
        .lines()
        .find(|l| l.starts_with("getp_sent"))
        .map_or(0, |l| {
            l.split_whitespace()
                .skip(1)
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        });
    Ok((wall, compute, getp))
}

/// faultlat runs the floors take their medians over: one run's median remote fault moves by
/// 15-25% from run to run on these machines (the floors beside it less). They are spread over the
/// rounds (see [`Floors`]).
const FLOOR_RUNS: usize = 5;

/// Megabytes of each stream floor: twice the old default cache, so read-ahead and the cache's
/// turnover are both part of it.
const STREAM_MB: usize = 256;
/// The floor rows of the streams.
const TCP_STREAM_ROW: &str = "a plain TCP stream between two processes of this machine (MB/s)";
/// What any page-based DSM must at least do with the bytes it receives, timed the same way.
const LANDING_ROW: &str = "the same stream landed in fresh pages of a memory file and read (MB/s)";
const STREAM_UDP_ROW: &str = "remote pages streamed, UDP, 2 nodes (MB/s)";
const STREAM_TCP_ROW: &str = "remote pages streamed, TCP, 2 nodes (MB/s)";
/// The same stream with the pages read in place in their home's memory, shown from it
/// (`same_host = map`, the default between nodes of one host; the two rows above move them
/// through the transport).
const STREAM_IN_PLACE_ROW: &str = "remote pages streamed, in place, 2 nodes (MB/s)";
/// The same, each page copied from the home's memory (`same_host = memory`).
const STREAM_COPIED_ROW: &str = "remote pages streamed, copied in place, 2 nodes (MB/s)";
/// The plain stream's row between two hosts (`--hosts`).
const HOSTS_STREAM_ROW: &str = "a plain TCP stream between the two hosts (MB/s)";

/// The floor row of [`dsm_tools::floors::minimal_remote_fault_us`].
const MINIMAL_ROW: &str = "minimal remote fault, plain UDP (us)";

/// Adds `v` to the samples of the row named `name`, which is added after the others if new.
fn push_sample<T>(rows: &mut Vec<(String, Vec<T>)>, name: &str, v: T) {
    match rows.iter_mut().find(|r| r.0 == name) {
        Some(r) => r.1.push(v),
        None => rows.push((name.to_string(), vec![v])),
    }
}

/// The floors' samples, taken a few at the start of each round rather than all at once: this
/// machine has slow minutes (every step of a traced fault 1.3-1.5x its usual cost, the bare fault
/// 3.9 us instead of 2.96), and five samples in a row can all fall in one.
#[derive(Default)]
struct Floors {
    /// Bare fault + mprotect medians, one per sample.
    bare: Vec<f64>,
    /// Minimal remote fault medians (plain UDP, no runtime), one per sample.
    minimal: Vec<f64>,
    /// Backing a fresh page with memory, medians, one per sample.
    backing: Vec<f64>,
    /// faultlat's rows, each with its medians, in the order the rows first appear.
    runs: Vec<(String, Vec<f64>)>,
    /// Per stream row, per sample: the reader's requests whose runs landed in large folios
    /// (`large_folio_requests`; 0 where the node used a memfd).
    large: Vec<(String, Vec<u64>)>,
    /// `--hosts`: every sample is taken between these two hosts, and only what can be.
    between: Option<Between>,
}

impl Floors {
    /// The floors between two hosts (`--hosts`).
    fn between(between: Between) -> Floors {
        Floors {
            between: Some(between),
            ..Floors::default()
        }
    }

    /// Where the 2-node jobs run: `dsmrun -n 2`, or `dsmrun --hosts` of the two hosts.
    fn nodes(&self) -> Vec<std::ffi::OsString> {
        match &self.between {
            Some(b) => vec!["--hosts".into(), b.file.clone().into()],
            None => vec!["-n".into(), "2".into()],
        }
    }

    /// The plain stream's row.
    fn plain_row(&self) -> &'static str {
        match self.between {
            Some(_) => HOSTS_STREAM_ROW,
            None => TCP_STREAM_ROW,
        }
    }

    /// One sample: the bare fault, then a faultlat run.
    fn sample(&mut self) {
        if self.between.is_none() {
            self.sample_this_machine();
        }
        self.sample_streams();
        let out = Command::new(bin("dsmrun"))
            .args(self.nodes())
            .args(["--set", "prefetch=off"])
            .arg(bin("faultlat"))
            .arg("1000")
            .output();
        let Ok(out) = out else { return };
        self.take_faultlat(&String::from_utf8_lossy(&out.stdout));
    }

    /// The floors of this machine alone: the bare fault, the minimal remote fault over plain
    /// UDP, backing a fresh page.
    fn sample_this_machine(&mut self) {
        match dsm_tools::floors::bare_fault_us(2000) {
            Ok(v) => self.bare.push(median(&v)),
            Err(e) => eprintln!("dsm-bench: bare fault floor: {e}"),
        }
        match dsm_tools::floors::minimal_remote_fault_us(2000) {
            Ok(v) => self.minimal.push(median(&v)),
            Err(e) => eprintln!("dsm-bench: minimal remote fault: {e}"),
        }
        match dsm_tools::floors::backing_page_us(2000) {
            Ok(v) => self.backing.push(median(&v)),
            Err(e) => eprintln!("dsm-bench: backing a fresh page: {e}"),
        }
    }

    /// The medians of `faultlat`'s rows in its output.
    fn take_faultlat(&mut self, out: &str) {
        for line in out.lines() {
            for (prefix, name) in [
                (
                    "UDP round trip 64 B / 4 KiB, busy-polling",
                    "UDP round trip, busy (us)",
                ),
                (
                    "UDP round trip 64 B / 4 KiB, blocking",
                    "UDP round trip, blocking (us)",
                ),
                (
                    "TCP round trip 64 B / 4 KiB, busy-polling",
                    "TCP round trip, busy (us)",
                ),
                ("remote read fault (GETP)", "remote read fault, UDP (us)"),
                (
                    "remote read fault, home computing",
                    "remote read fault, UDP, home computing (us)",
                ),
                ("local write fault", "local write fault (us)"),
                (
                    "lock acquire + release",
                    "lock acquire + release, remote manager (us)",
                ),
                ("barrier, 2 nodes", "barrier, 2 nodes (us)"),
            ] {
                let Some(med) = line
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok())
                else {
                    continue;
                };
                push_sample(&mut self.runs, name, med);
            }
        }
    }

    /// Remote pages streamed (the `stream` app on 2 nodes, UDP and TCP, default settings) beside a
    /// plain TCP stream between two processes, one after the other in the same sample.
    fn sample_streams(&mut self) {
        if let Some(b) = &self.between {
            match b.plain_stream() {
                Ok(v) => push_sample(&mut self.runs, HOSTS_STREAM_ROW, v),
                Err(e) => eprintln!("dsm-bench: TCP stream between the hosts: {e}"),
            }
        }
        let here = [
            (Receiver::Plain, TCP_STREAM_ROW),
            (Receiver::IntoFreshPages, LANDING_ROW),
        ];
        for (how, row) in here.into_iter().filter(|_| self.between.is_none()) {
            match std::env::current_exe()
                .and_then(|me| dsm_tools::stream::receive_mbps(Command::new(me), STREAM_MB, how))
            {
                Ok(v) => push_sample(&mut self.runs, row, v),
                Err(e) => eprintln!("dsm-bench: TCP stream ({how:?}): {e}"),
            }
        }
        let in_place = [
            ("udp", "same_host=map", STREAM_IN_PLACE_ROW),
            ("udp", "same_host=memory", STREAM_COPIED_ROW),
        ];
        let streams = [
            ("udp", "same_host=transport", STREAM_UDP_ROW),
            ("tcp", "same_host=transport", STREAM_TCP_ROW),
        ]
        .into_iter()
        .chain(in_place.into_iter().filter(|_| self.between.is_none()));
        for (transport, same_host, row) in streams {
            let out = Command::new(bin("dsmrun"))
                .args(self.nodes())
                .args(["--stats", "--transport", transport, "--set", same_host])
                .arg(bin("stream"))
                .args(["--no-check", &STREAM_MB.to_string()])
                .output();
            let Ok(out) = out else {
                eprintln!("dsm-bench: the stream app over {transport} did not start");
                continue;
            };
            let rate = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .find_map(|w| w.strip_prefix("mbps=").and_then(|v| v.parse::<f64>().ok()));
            match rate {
                Some(v) => push_sample(&mut self.runs, row, v),
                None => eprintln!("dsm-bench: the stream app over {transport} gave no rate"),
            }
            // Node 1's count (a row left out of the table is 0 on every node).
            let large = String::from_utf8_lossy(&out.stderr)
                .lines()
                .find_map(|l| l.strip_prefix("large_folio_requests "))
                .and_then(|rest| rest.split_whitespace().last()?.parse().ok())
                .unwrap_or(0);
            push_sample(&mut self.large, row, large);
        }
    }

    /// Each floor's median over the samples, and the remote fault's ratios to them.
    fn rows(&self) -> Vec<(String, f64)> {
        let mut rows = Vec::new();
        if !self.bare.is_empty() {
            rows.push(("bare fault + mprotect (us)".to_string(), median(&self.bare)));
        }
        if !self.minimal.is_empty() {
            rows.push((MINIMAL_ROW.to_string(), median(&self.minimal)));
        }
        if !self.backing.is_empty() {
            rows.push((
                "back a fresh page, memfd (us)".to_string(),
                median(&self.backing),
            ));
        }
        rows.extend(self.runs.iter().map(|(name, v)| (name.clone(), median(v))));
        let get = |n: &str| rows.iter().find(|r| r.0 == n).map(|r| r.1);
        let plain = self.plain_row();
        let ratios: Vec<(String, f64)> = [
            (
                STREAM_UDP_ROW,
                plain,
                "remote pages streamed, UDP / plain TCP stream",
            ),
            (
                STREAM_TCP_ROW,
                plain,
                "remote pages streamed, TCP / plain TCP stream",
            ),
            (
                STREAM_IN_PLACE_ROW,
                plain,
                "remote pages streamed, in place / plain TCP stream",
            ),
            (
                STREAM_COPIED_ROW,
                plain,
                "remote pages streamed, copied in place / plain TCP stream",
            ),
            (
                LANDING_ROW,
                TCP_STREAM_ROW,
                "landed stream / plain TCP stream",
            ),
            (
                STREAM_UDP_ROW,
                LANDING_ROW,
                "remote pages streamed, UDP / landed stream",
            ),
            (
                STREAM_TCP_ROW,
                LANDING_ROW,
                "remote pages streamed, TCP / landed stream",
            ),
        ]
        .into_iter()
        .filter_map(|(row, of, ratio)| Some((ratio.to_string(), get(row)? / get(of)?)))
        .collect();
        rows.extend(ratios);
        let get = |n: &str| rows.iter().find(|r| r.0 == n).map(|r| r.1);
        let minimal = get(MINIMAL_ROW);
        let computing = get("remote read fault, UDP, home computing (us)")
            .zip(get("remote read fault, UDP (us)"))
            .map(|(busy, idle)| busy / idle);
        if let (Some(f), Some(u), Some(r)) = (
            get("bare fault + mprotect (us)"),
            get("UDP round trip, busy (us)"),
            get("remote read fault, UDP (us)"),
        ) {
            rows.push(("remote fault / busy UDP round trip".into(), r / u));
            rows.push((
                "remote fault / (fault floor + busy UDP round trip)".into(),
                r / (f + u),
            ));
            if let Some(m) = minimal {
                rows.push((
                    "minimal fault / (fault floor + busy UDP round trip)".into(),
                    m / (f + u),
                ));
                rows.push(("remote fault / minimal fault".into(), r / m));
            }
        }
        if let Some(r) = computing {
            rows.push(("remote fault, home computing / home idle".into(), r));
        }
        rows
    }
}

fn baseline_of<'a>(o: &Options, cell: &Cell, all: &'a [Outcome]) -> Option<&'a Outcome> {
    let mut b = cell.clone();
    if cell.pair {
        b.pair = false;
        return all.iter().find(|x| x.cell == b);
    }
    match o.baseline.0.as_str() {
        "nodes" => b.nodes = o.baseline.1.parse().ok()?,
        "threads" => b.threads = o.baseline.1.parse().ok()?,
        "transport" => b.transport = o.baseline.1.clone(),
        "set" => b.set = Some(o.baseline.1.clone()),
        _ => b.prefetch = o.baseline.1 == "on",
    }
    all.iter().find(|x| x.cell == b)
}

/// One cell's figures from its samples.
struct Summary {
    median_s: f64,
    min_s: f64,
    max_s: f64,
    compute_median_s: f64,
    getp_median: u64,
    /// The baseline's median over this cell's (times `jobs` for a pair).
    ratio: Option<f64>,
    /// 2 for a pair of 1-node jobs run at once, else 1.
    jobs: f64,
}

/// Where and when the run was: for the files and the chart's corner.
struct RunInfo {
    date: String,
    commit: String,
    machine: String,
    cpus: usize,
    kernel: String,
    command: Vec<String>,
}

impl RunInfo {
    fn now() -> RunInfo {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let host = read("/proc/sys/kernel/hostname").trim().to_string();
        // The commit of the checkout this binary was built in (target/release/.. is inside it).
        let dir = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let commit = Command::new("git")
            .arg("-C")
            .arg(&dir)
            .args(["describe", "--always", "--dirty"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        RunInfo {
            date: dsm_runtime::stats::rfc3339(std::time::SystemTime::now()),
            commit,
            machine: format!("{host}: {cpus} CPUs, {model}"),
            cpus,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            command: std::env::args().collect(),
        }
    }
}

/// The run as JSON: the machine, every floor sample, every cell's every run.
fn to_json(
    o: &Options,
    run: &RunInfo,
    floors: &Floors,
    results: &[Outcome],
    summaries: &[Summary],
) -> String {
    use serde_json::json;
    let mut floor_samples = vec![
        json!({"name": "bare fault + mprotect (us)", "samples": floors.bare}),
        json!({"name": MINIMAL_ROW, "samples": floors.minimal}),
    ];
    // Rows not measured (this machine's own, between hosts) are left out.
    floor_samples.retain(|f| f["samples"].as_array().is_some_and(|a| !a.is_empty()));
    floor_samples.extend(
        floors
            .runs
            .iter()
            .map(|(name, v)| json!({"name": name, "samples": v})),
    );
    floor_samples.extend(floors.large.iter().map(
        |(name, v)| json!({"name": format!("{}: requests in large folios", name.trim_end_matches(" (MB/s)")), "samples": v}),
    ));
    let medians: Vec<serde_json::Value> = floors
        .rows()
        .into_iter()
        .map(|(name, v)| json!({"name": name, "value": v}))
        .collect();
    let cells: Vec<serde_json::Value> = results
        .iter()
        .zip(summaries)
        .map(|(r, m)| {
            json!({
                "app": r.cell.app,
                "args": r.cell.args,
                "nodes": r.cell.nodes,
                "threads": r.cell.threads,
                "transport": r.cell.transport,
                "prefetch": r.cell.prefetch,
                "jobs": m.jobs,
                "wall_s": r.walls,
                "compute_s": r.computes,
                "getp": r.getps,
                "check_failed": r.check_failed,
                "failures": r.failures,
                "median_s": m.median_s,
                "min_s": m.min_s,
                "max_s": m.max_s,
                "compute_median_s": m.compute_median_s,
                "getp_median": m.getp_median,
                "ratio_to_baseline": m.ratio,
            })
        })
        .collect();
    let doc = json!({
        "date": run.date,
        "commit": run.commit,
        "machine": run.machine,
        "cpus": run.cpus,
        "kernel": run.kernel,
        "command": run.command,
        "between_hosts": floors.between.as_ref().map(|b| &b.hosts),
        "repeat": o.repeat,
        "baseline": format!("{}={}", o.baseline.0, o.baseline.1),
        "floors": {"samples": floor_samples, "medians": medians},
        "cells": cells,
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The run as CSV, one row per sample: every run of every cell (`kind` run), then every floor
/// sample (`kind` floor, its median over one sample in `value`).
fn to_csv(floors: &Floors, results: &[Outcome]) -> String {
    let mut csv = String::from(
        "kind,app,args,nodes,threads,transport,prefetch,jobs,run,wall_s,compute_s,getp,floor,value\n",
    );
    for r in results {
        let jobs = if r.cell.pair { 2 } else { 1 };
        for (i, ((w, c), g)) in r.walls.iter().zip(&r.computes).zip(&r.getps).enumerate() {
            let _ = writeln!(
                csv,
                "run,{},{},{},{},{},{},{jobs},{},{w:.4},{c:.4},{g},,",
                r.cell.app,
                r.cell.args.join(" "),
                r.cell.nodes,
                r.cell.threads,
                r.cell.transport,
                if r.cell.prefetch { "on" } else { "off" },
                i + 1
            );
        }
    }
    let mut floor_rows: Vec<(&str, &[f64])> = vec![
        ("bare fault + mprotect (us)", &floors.bare),
        (MINIMAL_ROW, &floors.minimal),
    ];
    floor_rows.extend(floors.runs.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
    for (name, samples) in floor_rows {
        for (i, v) in samples.iter().enumerate() {
            let _ = writeln!(csv, "floor,,,,,,,,{},,,,\"{name}\",{v:.3}", i + 1);
        }
    }
    csv
}

fn chart(
    prefix: &str,
    o: &Options,
    run: &RunInfo,
    results: &[Outcome],
    summaries: &[Summary],
) -> Result<(), String> {
    // DSM_BENCH_FONT names another TrueType file (the RDMA VM has no fonts of its own).
    let custom = std::env::var("DSM_BENCH_FONT").ok();
    let font = custom
        .iter()
        .map(String::as_str)
        .chain([
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
        ])
        .find_map(|p| std::fs::read(p).ok())
        .ok_or("no DejaVuSans.ttf (apt-get install fonts-dejavu-core, or set DSM_BENCH_FONT)")?;
    let font: &'static [u8] = Box::leak(font.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, font)
        .map_err(|_| "bad font file")?;
    // One panel per app (its own time axis: apps differ by 10x), one bar per (transport, nodes)
    // with the first prefetch setting; then the speed-ups.
    let dsm: Vec<(&Outcome, &Summary)> = results
        .iter()
        .zip(summaries)
        .filter(|(r, _)| !r.cell.pair)
        .collect();
    let pf = dsm.first().is_none_or(|(r, _)| r.cell.prefetch);
    let mut apps: Vec<String> = Vec::new();
    let mut series: Vec<(String, usize)> = Vec::new();
    for (r, _) in dsm.iter().filter(|(r, _)| r.cell.prefetch == pf) {
        if !apps.contains(&r.cell.label()) {
            apps.push(r.cell.label());
        }
        let sr = (r.cell.transport.clone(), r.cell.nodes);
        if !series.contains(&sr) {
            series.push(sr);
        }
    }
    let bar = |app: &str, sr: &(String, usize)| {
        dsm.iter()
            .find(|(r, _)| {
                r.cell.label() == app
                    && r.cell.transport == sr.0
                    && r.cell.nodes == sr.1
                    && r.cell.prefetch == pf
            })
            .filter(|(r, _)| !r.walls.is_empty())
            .map(|(_, m)| Bar {
                median: m.median_s,
                min: m.min_s,
                max: m.max_s,
                ratio: m.ratio,
            })
    };
    let ceiling = |app: &str| {
        results
            .iter()
            .zip(summaries)
            .find(|(r, _)| r.cell.pair && r.cell.label() == app)
            .and_then(|(_, m)| m.ratio)
    };
    let data = ChartData {
        title: format!(
            "DSM job time per app: median of {} runs, bars from min to max (whole job, prefetch {})",
            o.repeat,
            if pf { "on" } else { "off" }
        ),
        speedup_title: format!(
            "speed-up: the baseline's median over the cell's ({}={}); black: two 1-node jobs at once, the machine's ceiling",
            o.baseline.0, o.baseline.1
        ),
        footer: format!("{} | {} | commit {}", run.machine, run.date, run.commit),
        bars: apps
            .iter()
            .map(|a| series.iter().map(|sr| bar(a, sr)).collect())
            .collect(),
        ceilings: apps.iter().map(|a| ceiling(a)).collect(),
        labels: series
            .iter()
            .map(|sr| format!("{} {} node{}", sr.0, sr.1, if sr.1 == 1 { "" } else { "s" }))
            .collect(),
        apps,
    };
    let cols = data.apps.len().clamp(1, 4);
    let rows = data.apps.len().div_ceil(cols).max(1);
    let size = (1200, 60 + rows as u32 * 240 + 320 + 30);
    let svg = format!("{prefix}.svg");
    let png = format!("{prefix}.png");
    draw(
        SVGBackend::new(&svg, size).into_drawing_area(),
        &data,
        rows,
        cols,
    )
    .map_err(|e| e.to_string())?;
    draw(
        BitMapBackend::new(&png, size).into_drawing_area(),
        &data,
        rows,
        cols,
    )
    .map_err(|e| e.to_string())?;
    eprintln!("dsm-bench: chart written to {svg} and {png}");
    Ok(())
}

/// One bar: a cell's median, min and max time, and its speed-up.
#[derive(Clone, Copy)]
struct Bar {
    median: f64,
    min: f64,
    max: f64,
    ratio: Option<f64>,
}

struct ChartData {
    title: String,
    speedup_title: String,
    footer: String,
    apps: Vec<String>,
    labels: Vec<String>,
    /// `bars[app][series]`
    bars: Vec<Vec<Option<Bar>>>,
    /// The "2 jobs" ratio per app: the ceiling of a 2-node speed-up on this machine.
    ceilings: Vec<Option<f64>>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    d: &ChartData,
    rows: usize,
    cols: usize,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(50);
    title.draw_text(
        &d.title,
        &("sans-serif", 20).into_font().color(&BLACK),
        (15, 15),
    )?;
    let (grid, rest) = rest.split_vertically(rows as u32 * 240);
    let (speed, foot) = rest.split_vertically(320);
    let n = d.labels.len().max(1) as f64;
    for (ai, area) in grid.split_evenly((rows, cols)).iter().enumerate() {
        let Some(app) = d.apps.get(ai) else { break };
        let row = &d.bars[ai];
        let ymax = row.iter().flatten().map(|b| b.max).fold(0.0f64, f64::max) * 1.15;
        let mut c = ChartBuilder::on(area)
            .caption(app, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(8)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..n, 0f64..ymax.max(1e-3))?;
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("seconds")
            .y_labels(5)
            .draw()?;
        for (si, b) in row.iter().enumerate() {
            let Some(b) = b else { continue };
            let color = COLORS[si % COLORS.len()];
            let x = si as f64;
            c.draw_series([Rectangle::new(
                [(x + 0.12, 0.0), (x + 0.88, b.median)],
                color.filled(),
            )])?;
            // The min-max bar, with caps.
            let mid = x + 0.5;
            c.draw_series([
                PathElement::new(vec![(mid, b.min), (mid, b.max)], BLACK.stroke_width(2)),
                PathElement::new(vec![(mid - 0.15, b.min), (mid + 0.15, b.min)], BLACK),
                PathElement::new(vec![(mid - 0.15, b.max), (mid + 0.15, b.max)], BLACK),
            ])?;
        }
    }
    // Speed-ups: one group per app, one bar per series; the ceiling as a black line.
    let rmax = d
        .bars
        .iter()
        .flatten()
        .flatten()
        .filter_map(|b| b.ratio)
        .chain(d.ceilings.iter().flatten().copied())
        .fold(1.0f64, f64::max)
        * 1.7; // room for the legend above the bars and lines
    let mut c = ChartBuilder::on(&speed)
        .caption(&d.speedup_title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..d.apps.len().max(1) as f64, 0f64..rmax)?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(d.apps.len() * 2 + 1)
        .x_label_formatter(&|x| {
            if (x.fract() - 0.5).abs() < 0.01 {
                // The panels above carry the whole name; here a long one would run into its
                // neighbours.
                let name = d.apps.get(x.floor() as usize).cloned().unwrap_or_default();
                match name.char_indices().nth(14) {
                    Some((cut, _)) => format!("{}…", &name[..cut]),
                    None => name,
                }
            } else {
                String::new()
            }
        })
        .y_desc("x baseline")
        .draw()?;
    let w = 0.8 / n;
    for (si, label) in d.labels.iter().enumerate() {
        let color = COLORS[si % COLORS.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = d
            .bars
            .iter()
            .enumerate()
            .filter_map(|(ai, row)| {
                let r = row.get(si).copied().flatten()?.ratio?;
                let x0 = ai as f64 + 0.1 + si as f64 * w;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + w * 0.9, r)],
                    color.filled(),
                ))
            })
            .collect();
        c.draw_series(bars)?
            .label(label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    let lines: Vec<PathElement<(f64, f64)>> = d
        .ceilings
        .iter()
        .enumerate()
        .filter_map(|(ai, c)| {
            let c = (*c)?;
            Some(PathElement::new(
                vec![(ai as f64 + 0.05, c), (ai as f64 + 0.95, c)],
                BLACK.stroke_width(3),
            ))
        })
        .collect();
    if !lines.is_empty() {
        c.draw_series(lines)?
            .label("2 jobs at once (ceiling)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.stroke_width(3)));
    }
    c.draw_series([PathElement::new(
        vec![(0.0, 1.0), (d.apps.len() as f64, 1.0)],
        BLACK.mix(0.4),
    )])?;
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    foot.draw_text(
        &d.footer,
        &("sans-serif", 13).into_font().color(&BLACK.mix(0.7)),
        (15, 8),
    )?;
    root.present()?;
    Ok(())
}

/// Progress without a terminal: one line per cell.
fn continue_line(done: usize, total: usize, cell: &Cell, k: usize, repeat: usize) {
    if k == 0 {
        eprintln!(
            "[{done}/{total}] {} n={} {} prefetch={}{} x{repeat}",
            cell.label(),
            cell.nodes,
            cell.transport,
            if cell.prefetch { "on" } else { "off" },
            if cell.pair { " (2 jobs at once)" } else { "" }
        );
    }
}

fn print_floors(floors: &Floors) {
    if let Some(b) = &floors.between {
        println!(
            "between {} (the streams' home) and {} (their reader)",
            b.hosts[0], b.hosts[1]
        );
    }
    let rows = floors.rows();
    let w = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0).max(52);
    println!("{:<w$} {:>10}", "floor", "median");
    for (name, v) in rows {
        println!("{name:<w$} {v:>10.2}");
    }
    for (name, samples) in &floors.large {
        let each: Vec<String> = samples.iter().map(u64::to_string).collect();
        println!(
            "the reader's requests landed in large folios, per sample, in {}: {}",
            name.trim_end_matches(" (MB/s)"),
            each.join(" ")
        );
    }
    println!();
}

fn main() {
    // The sending end of the plain TCP stream floor (this binary, started by the floor).
    if let Some(status) = dsm_tools::stream::send() {
        std::process::exit(status);
    }
    // Either end of the plain TCP stream between two hosts (started by dsmrun, see Between).
    if let Some(status) = dsm_tools::stream::between() {
        std::process::exit(status);
    }
    // After the stream's ends above, whose sends see a closed socket as an error to report.
    dsm_tools::end_when_output_is_closed();
    let mut o = options();
    // The output files can be written, before any run (the runs take minutes).
    for (flag, path) in [("--csv", &o.csv), ("--json", &o.json)] {
        if let Some(p) = path
            && let Err(e) = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
        {
            usage(&format!("{flag} {}: {e}", p.display()));
        }
    }
    if let Some(prefix) = &o.chart
        && let Some(dir) = Path::new(prefix).parent()
        && !dir.as_os_str().is_empty()
        && !dir.is_dir()
    {
        usage(&format!(
            "--chart {prefix}: {} is not a directory",
            dir.display()
        ));
    }
    if o.mpi {
        let missing: Vec<String> = o
            .apps
            .iter()
            .filter(|(a, _)| MPI_APPS.contains(&a.as_str()))
            .map(|(a, _)| mpi_bin(a))
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            usage(&format!(
                "--mpi: no {} (build them with scripts/build-mpi, or set DSM_MPI_BIN)",
                missing.join(", ")
            ));
        }
    }
    let mut floors = match o.between.take().map(Between::new) {
        Some(Ok(b)) => Floors::between(b),
        Some(Err(e)) => usage(&format!("--hosts: a hosts file of the two: {e}")),
        None => Floors::default(),
    };
    if o.floors_only {
        for k in 0..o.repeat {
            eprintln!("dsm-bench: floor sample {}/{}", k + 1, o.repeat);
            floors.sample();
        }
        print_floors(&floors);
        let run = RunInfo::now();
        let mut written = true;
        if let Some(p) = &o.csv {
            written &= write_output(p, &to_csv(&floors, &[]));
        }
        if let Some(p) = &o.json {
            written &= write_output(p, &to_json(&o, &run, &floors, &[], &[]));
        }
        if !written {
            std::process::exit(1);
        }
        // A stream that gave no sample failed (its error is above): status 1, as a failed run.
        let in_place = [STREAM_IN_PLACE_ROW, STREAM_COPIED_ROW]
            .into_iter()
            .filter(|_| floors.between.is_none());
        let missing: Vec<&str> = [floors.plain_row(), STREAM_UDP_ROW, STREAM_TCP_ROW]
            .into_iter()
            .chain(in_place)
            .filter(|row| !floors.runs.iter().any(|(name, _)| name == row))
            .collect();
        if !missing.is_empty() {
            eprintln!("dsm-bench: no sample of {}", missing.join(", "));
            drop(floors);
            std::process::exit(1);
        }
        return;
    }
    // Floor samples at the start of each round, FLOOR_RUNS at least in all.
    let floor_samples = FLOOR_RUNS.div_ceil(o.repeat.max(1));
    let mut cells = Vec::new();
    for (app, args) in &o.apps {
        for &nodes in &o.nodes {
            for &threads in &o.threads {
                for t in &o.transports {
                    for &prefetch in &o.prefetch {
                        for set in &o.sets {
                            cells.push(Cell {
                                app: app.clone(),
                                args: args.clone(),
                                nodes,
                                transport: t.clone(),
                                prefetch,
                                set: set.clone(),
                                pair: false,
                                threads,
                            });
                        }
                    }
                }
            }
        }
        if o.mpi && MPI_APPS.contains(&app.as_str()) {
            for &nodes in &o.nodes {
                cells.push(Cell {
                    app: app.clone(),
                    args: args.clone(),
                    nodes,
                    transport: "mpi".into(),
                    prefetch: o.prefetch[0],
                    set: None,
                    pair: false,
                    threads: 1,
                });
            }
        }
        if o.pairs && o.nodes.contains(&1) && o.nodes.iter().any(|&n| n > 1) {
            cells.push(Cell {
                app: app.clone(),
                args: args.clone(),
                nodes: 1,
                transport: o.transports[0].clone(),
                prefetch: o.prefetch[0],
                set: o.sets[0].clone(),
                pair: true,
                threads: 1,
            });
        }
    }
    let total = cells.len() * o.repeat;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let started = Instant::now();
    let mut results: Vec<Outcome> = cells
        .iter()
        .map(|cell| Outcome {
            cell: cell.clone(),
            walls: Vec::new(),
            computes: Vec::new(),
            getps: Vec::new(),
            check_failed: false,
            failures: 0,
        })
        .collect();
    // Correctness first, in runs of their own: each DSM cell once with the app's self-check (the
    // timed runs below leave it out).
    for (cell, r) in cells
        .iter()
        .zip(results.iter_mut())
        .filter(|(c, _)| !c.pair)
    {
        eprint!(
            "{}checking {} n={} {} prefetch={}...",
            if tty { "\r" } else { "" },
            cell.label(),
            cell.nodes,
            cell.transport,
            if cell.prefetch { "on" } else { "off" }
        );
        if let Err(e) = run_timed(cell, true) {
            r.check_failed = true;
            eprintln!(
                "\ndsm-bench: {} n={} {} is wrong or failed: {e}",
                cell.app, cell.nodes, cell.transport
            );
        }
        if !tty {
            eprintln!();
        }
    }
    let mut done = 0;
    // Round by round (every cell once, then again): a machine whose load drifts during the run
    // then slows every cell alike, and the ratios stay comparable.
    for k in 0..o.repeat {
        if !tty && k > 0 {
            eprintln!("[{done}/{total}] round {}/{}", k + 1, o.repeat);
        }
        if o.floors {
            eprint!(
                "{}[{done}/{total}] measuring the floors ({} of {})...",
                if tty { "\r" } else { "" },
                (k + 1) * floor_samples,
                o.repeat.max(1) * floor_samples
            );
            for _ in 0..floor_samples {
                floors.sample();
            }
            if !tty {
                eprintln!();
            }
        }
        for (cell, r) in cells.iter().zip(results.iter_mut()) {
            done += 1;
            if !tty {
                continue_line(done, total, cell, k, o.repeat);
            } else {
                eprint!(
                    "\r[{done}/{total}] {} n={} {} prefetch={}{} run {}/{}  ({:.0} s)     ",
                    cell.app,
                    cell.nodes,
                    cell.transport,
                    if cell.prefetch { "on" } else { "off" },
                    if cell.pair { " (2 jobs at once)" } else { "" },
                    k + 1,
                    o.repeat,
                    started.elapsed().as_secs_f64()
                );
            }
            match run_once(cell) {
                Ok((w, c, g)) => {
                    r.walls.push(w);
                    r.computes.push(c);
                    r.getps.push(g);
                }
                Err(e) => {
                    r.failures += 1;
                    eprintln!(
                        "\ndsm-bench: {} n={} {} failed: {e}",
                        cell.app, cell.nodes, cell.transport
                    );
                }
            }
        }
    }
    eprintln!(
        "\rdsm-bench: {total} runs in {:.1} s{}",
        started.elapsed().as_secs_f64(),
        " ".repeat(40)
    );
    if o.floors {
        print_floors(&floors);
    }
    // The app column as wide as its longest label (a `--set` variant makes them long).
    let w = results
        .iter()
        .map(|r| r.cell.label().len())
        .max()
        .unwrap_or(0)
        .max(16);
    let header = format!(
        "{:<w$} {:>6} {:<7} {:<8} {:>9} {:>9} {:>9} {:>10} {:>8} {:>9}",
        "app",
        "nodes",
        "net",
        "prefetch",
        "median_s",
        "min_s",
        "max_s",
        "compute_s",
        "getp",
        "vs_base"
    );
    println!("{header}");
    let mut summaries = Vec::new();
    for r in &results {
        // A cell with no run that ended well has no times: "-" here, null in the JSON.
        let med = median(&r.walls);
        let min = r.walls.iter().copied().reduce(f64::min).unwrap_or(f64::NAN);
        let max = r.walls.iter().copied().reduce(f64::max).unwrap_or(f64::NAN);
        let comp = median(&r.computes);
        let mut g = r.getps.clone();
        g.sort_unstable();
        let getp = g.get(g.len() / 2).copied().unwrap_or(0);
        // A pair's ratio: the work of two jobs in the time they took together, against one alone.
        let jobs = if r.cell.pair { 2.0 } else { 1.0 };
        let ratio = baseline_of(&o, &r.cell, &results)
            .map(|b| jobs * median(&b.walls) / med)
            .filter(|x| x.is_finite());
        let ratio_s = ratio.map_or("-".to_string(), |x| format!("{x:.2}x"));
        let pf = if r.cell.prefetch { "on" } else { "off" };
        let nodes = if r.cell.pair {
            "2 jobs".to_string()
        } else {
            r.cell.nodes.to_string()
        };
        let secs = |x: f64| {
            if x.is_finite() {
                format!("{x:.3}")
            } else {
                "-".to_string()
            }
        };
        println!(
            "{:<w$} {:>6} {:<7} {:<8} {:>9} {:>9} {:>9} {:>10} {getp:>8} {ratio_s:>9}{}",
            r.cell.label(),
            nodes,
            r.cell.transport,
            pf,
            secs(med),
            secs(min),
            secs(max),
            secs(comp),
            match (r.check_failed, r.failures) {
                (false, 0) => String::new(),
                (true, 0) => "  (check FAILED)".to_string(),
                (false, n) => format!("  ({n} of {} runs FAILED)", o.repeat),
                (true, n) => format!("  (check FAILED, {n} of {} runs FAILED)", o.repeat),
            }
        );
        summaries.push(Summary {
            median_s: med,
            min_s: min,
            max_s: max,
            compute_median_s: comp,
            getp_median: getp,
            ratio,
            jobs,
        });
    }
    println!(
        "(vs_base: the baseline cell's median over this one, baseline {}={}; >1 means faster)",
        o.baseline.0, o.baseline.1
    );
    if results.iter().any(|r| r.cell.pair) {
        println!(
            "(2 jobs: two 1-node jobs at once; vs_base is twice one job's time alone over theirs \
             together, the machine's parallel capacity for the app in this run: a 2-node ratio \
             cannot exceed it)"
        );
    }
    let run = RunInfo::now();
    let mut written = true;
    if let Some(p) = &o.csv {
        written &= write_output(p, &to_csv(&floors, &results));
    }
    if let Some(p) = &o.json {
        written &= write_output(p, &to_json(&o, &run, &floors, &results, &summaries));
    }
    if let Some(prefix) = &o.chart {
        if let Err(e) = chart(prefix, &o, &run, &results, &summaries) {
            eprintln!("dsm-bench: no chart: {e}");
            written = false;
        }
    }
    if !written || results.iter().any(|r| r.check_failed || r.failures > 0) {
        std::process::exit(1);
    }
}

/// Writes an output file; false, said, if it could not.
fn write_output(p: &Path, text: &str) -> bool {
    std::fs::write(p, text)
        .map_err(|e| eprintln!("dsm-bench: writing {}: {e}", p.display()))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::{failure_text, median};

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[1.0, 3.0]), 2.0, "not the maximum");
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn a_failure_keeps_the_programs_complaint_before_the_launchers_line() {
        let stderr = "warning: slow\nsize must be a number, got `abc`\n\ndsmrun: node 0 exited \
                      with status 2\n";
        let t = failure_text("", stderr);
        assert!(
            t.contains("got `abc`") && t.ends_with("exited with status 2"),
            "{t}"
        );
    }
}
