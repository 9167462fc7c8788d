//! dsm-bench: compare transports, node counts and prefetch settings by measurement.
//!
//! ```text
//! dsm-bench [--quick] [--apps matmul:1024,sor,lu] [--nodes 1,2,4] [--transports udp,tcp]
//!           [--prefetch on,off] [--repeat 5] [--baseline nodes=1] [--csv F] [--json F]
//!           [--chart PREFIX] [--no-floors] [--no-pairs]
//! dsm-bench --floors-only [--repeat 5]
//! ```
//!
//! Runs every combination through `dsmrun` (next to this binary), `--repeat` rounds of every
//! combination once (so load that drifts during the run slows every cell alike), and prints
//! the median whole-job time (from `dsmrun` start to exit: start-up counts), its min and max, the
//! median compute time the app reports, the GETP count, and the ratio of the median to the
//! baseline cell (the same cell with the baseline's parameter changed; default: on 1 node). At
//! the start of each round it samples the floors too, printed before the table: the bare fault +
//! mprotect cost, the UDP and TCP round trip of a page-shaped exchange, and the remote fault
//! latency as a ratio to them. With 1 and
//! more nodes in the matrix, every round also runs two 1-node jobs of each app at once (row
//! `2 jobs`): twice the time of one job alone over their time together is how much work the
//! machine does in parallel right then, the ceiling of a 2-node ratio (`--no-pairs` leaves them
//! out). Writes CSV, JSON, and a chart (SVG and PNG) of time per app per transport.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use plotters::prelude::*;

#[derive(Clone, Debug, PartialEq)]
struct Cell {
    app: String,
    args: Vec<String>,
    nodes: usize,
    transport: String,
    prefetch: bool,
    /// Two 1-node jobs of the app at once (the machine's parallel capacity for it), not a DSM job.
    pair: bool,
}

impl Cell {
    /// `app`, or `app:arg:arg` when arguments were given (two sizes of one app stay apart).
    fn label(&self) -> String {
        std::iter::once(self.app.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(":")
    }
}

#[derive(Clone, Debug)]
struct Outcome {
    cell: Cell,
    walls: Vec<f64>,
    computes: Vec<f64>,
    getps: Vec<u64>,
    failures: usize,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        f64::NAN
    } else {
        s[s.len() / 2]
    }
}

const USAGE: &str = "usage: dsm-bench [--quick] [--apps A[:ARG..],..] [--nodes 1,2,4] [--transports udp,tcp] [--prefetch on,off] [--repeat N] [--baseline KEY=VALUE] [--csv F] [--json F] [--chart PREFIX] [--no-floors] [--no-pairs]\n       dsm-bench --floors-only [--repeat N]\n       dsm-bench --help | --version";

fn usage(msg: &str) -> ! {
    eprintln!("dsm-bench: {msg}\n{USAGE}");
    std::process::exit(2)
}

struct Options {
    apps: Vec<(String, Vec<String>)>,
    nodes: Vec<usize>,
    transports: Vec<String>,
    prefetch: Vec<bool>,
    repeat: usize,
    baseline: (String, String),
    csv: Option<PathBuf>,
    json: Option<PathBuf>,
    chart: Option<String>,
    floors: bool,
    /// Only the floors, `repeat` samples.
    floors_only: bool,
    pairs: bool,
}

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
    let mut o = Options {
        // Sizes where the work is a few tenths of a second on one node (the apps' own defaults
        // are smaller, for quick runs and tests).
        apps: parse_apps(
            "matmul:1024,sor:1024:100,lu:1024:64,jacobi:1024:100,pi,tsp,water:4096:4,is,ep",
        ),
        nodes: vec![1, 2, 4],
        transports: vec!["udp".into(), "tcp".into()],
        prefetch: vec![true, false],
        repeat: 5,
        baseline: ("nodes".into(), "1".into()),
        csv: None,
        json: None,
        chart: Some("bench".into()),
        floors: true,
        floors_only: false,
        pairs: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| {
            args.next()
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match a.as_str() {
            "--quick" => {
                o.apps = parse_apps("matmul:1024,sor:512:20,lu:512:32");
                o.nodes = vec![1, 2];
                o.prefetch = vec![true];
                o.repeat = 3;
            }
            "--apps" => o.apps = parse_apps(&val("--apps")),
            "--nodes" => {
                o.nodes = val("--nodes")
                    .split(',')
                    .map(|n| n.parse().unwrap_or_else(|_| usage("--nodes: numbers")))
                    .collect()
            }
            "--transports" => {
                o.transports = val("--transports").split(',').map(str::to_string).collect()
            }
            "--prefetch" => {
                o.prefetch = val("--prefetch")
                    .split(',')
                    .map(|p| match p {
                        "on" => true,
                        "off" => false,
                        _ => usage("--prefetch: on,off"),
                    })
                    .collect()
            }
            "--repeat" => {
                o.repeat = val("--repeat")
                    .parse()
                    .unwrap_or_else(|_| usage("--repeat: a number"))
            }
            "--baseline" => {
                let b = val("--baseline");
                let (k, v) = b
                    .split_once('=')
                    .unwrap_or_else(|| usage("--baseline KEY=VALUE (nodes, transport, prefetch)"));
                if !matches!(k, "nodes" | "transport" | "prefetch") {
                    usage("--baseline: the key is nodes, transport or prefetch");
                }
                o.baseline = (k.into(), v.into());
            }
            "--csv" => o.csv = Some(val("--csv").into()),
            "--json" => o.json = Some(val("--json").into()),
            "--chart" => o.chart = Some(val("--chart")),
            "--no-chart" => o.chart = None,
            "--no-floors" => o.floors = false,
            "--floors-only" => o.floors_only = true,
            "--no-pairs" => o.pairs = false,
            "-h" | "--help" => {
                println!(
                    "dsm-bench: the DSM's costs against the floors, and every app's time per node count, transport and prefetch\n\n{USAGE}"
                );
                std::process::exit(0)
            }
            "-V" | "--version" => {
                println!("dsm-bench {}", env!("CARGO_PKG_VERSION"));
                std::process::exit(0)
            }
            other => usage(&format!("unknown option `{other}`")),
        }
    }
    if o.floors_only && !o.floors {
        usage("--floors-only and --no-floors leave nothing to run");
    }
    if o.repeat == 0 || o.apps.is_empty() || o.nodes.is_empty() {
        usage("nothing to run");
    }
    o
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
    if cell.pair {
        let one = Cell {
            pair: false,
            ..cell.clone()
        };
        let (a, b) = std::thread::scope(|s| {
            let other = s.spawn(|| run_job(&one));
            (
                run_job(&one),
                other.join().unwrap_or(Err("panicked".into())),
            )
        });
        let ((wa, ca, _), (wb, cb, _)) = (a?, b?);
        return Ok((wa.max(wb), ca.max(cb), 0));
    }
    run_job(cell)
}

fn run_job(cell: &Cell) -> Result<(f64, f64, u64), String> {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        &cell.nodes.to_string(),
        "--transport",
        &cell.transport,
        "--stats",
        "--set",
    ])
    .arg(format!(
        "prefetch={}",
        if cell.prefetch { "on" } else { "off" }
    ))
    .arg(bin(&cell.app))
    .args(&cell.args);
    let t = Instant::now();
    let out = cmd.output().map_err(|e| e.to_string())?;
    let wall = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !stdout.contains(" OK ") {
        return Err(format!("{}{}", stdout, stderr.lines().last().unwrap_or("")));
    }
    let compute = stdout
        .split_whitespace()
        .find_map(|w| {
            w.strip_prefix("time=")
                .and_then(|v| v.trim_end_matches('s').parse().ok())
        })
        .unwrap_or(f64::NAN);
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

/// The floor row of [`dsm_tools::floors::minimal_remote_fault_us`].
const MINIMAL_ROW: &str = "minimal remote fault, plain UDP (us)";

/// The floors' samples, taken a few at the start of each round rather than all at once: this
/// machine has slow minutes (every step of a traced fault 1.3-1.5x its usual cost, the bare fault
/// 3.9 us instead of 2.96), and five samples in a row can all fall in one.
#[derive(Default)]
struct Floors {
    /// Bare fault + mprotect medians, one per sample.
    bare: Vec<f64>,
    /// Minimal remote fault medians (plain UDP, no runtime), one per sample.
    minimal: Vec<f64>,
    /// faultlat's rows, each with its medians, in the order the rows first appear.
    runs: Vec<(String, Vec<f64>)>,
}

impl Floors {
    /// One sample: the bare fault, then a faultlat run.
    fn sample(&mut self) {
        match dsm_tools::floors::bare_fault_us(2000) {
            Ok(v) => self.bare.push(median(&v)),
            Err(e) => eprintln!("dsm-bench: bare fault floor: {e}"),
        }
        match dsm_tools::floors::minimal_remote_fault_us(2000) {
            Ok(v) => self.minimal.push(median(&v)),
            Err(e) => eprintln!("dsm-bench: minimal remote fault: {e}"),
        }
        let out = Command::new(bin("dsmrun"))
            .args(["-n", "2", "--set", "prefetch=off"])
            .arg(bin("faultlat"))
            .arg("1000")
            .output();
        let Ok(out) = out else { return };
        for line in String::from_utf8_lossy(&out.stdout).lines() {
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
                match self.runs.iter_mut().find(|r| r.0 == name) {
                    Some(r) => r.1.push(med),
                    None => self.runs.push((name.to_string(), vec![med])),
                }
            }
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
        rows.extend(self.runs.iter().map(|(name, v)| (name.clone(), median(v))));
        let get = |n: &str| rows.iter().find(|r| r.0 == n).map(|r| r.1);
        let minimal = get(MINIMAL_ROW);
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
        "transport" => b.transport = o.baseline.1.clone(),
        _ => b.prefetch = o.baseline.1 == "on",
    }
    all.iter().find(|x| x.cell == b)
}

fn chart(prefix: &str, results: &[Outcome]) -> Result<(), String> {
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
    // Bars: one group per app; one bar per (transport, nodes) with the first prefetch setting.
    let pf = results.first().is_none_or(|r| r.cell.prefetch);
    let apps: Vec<String> = results
        .iter()
        .map(|r| r.cell.label())
        .fold(Vec::new(), |mut v, a| {
            if !v.contains(&a) {
                v.push(a);
            }
            v
        });
    let series: Vec<(String, usize)> = results
        .iter()
        .filter(|r| r.cell.prefetch == pf)
        .map(|r| (r.cell.transport.clone(), r.cell.nodes))
        .fold(Vec::new(), |mut v, s| {
            if !v.contains(&s) {
                v.push(s);
            }
            v
        });
    let time = |app: &str, s: &(String, usize)| {
        results
            .iter()
            .find(|r| {
                r.cell.label() == app
                    && r.cell.transport == s.0
                    && r.cell.nodes == s.1
                    && r.cell.prefetch == pf
            })
            .map(|r| median(&r.walls))
    };
    let ymax = results
        .iter()
        .map(|r| median(&r.walls))
        .fold(0.0f64, f64::max)
        * 1.15;
    let data = ChartData {
        title: format!(
            "DSM job time per app (median, whole job, prefetch {})",
            if pf { "on" } else { "off" }
        ),
        times: apps
            .iter()
            .map(|a| series.iter().map(|sr| time(a, sr)).collect())
            .collect(),
        labels: series
            .iter()
            .map(|sr| format!("{} {} node{}", sr.0, sr.1, if sr.1 == 1 { "" } else { "s" }))
            .collect(),
        apps: apps.clone(),
        ymax,
    };
    let svg = format!("{prefix}.svg");
    let png = format!("{prefix}.png");
    draw(
        SVGBackend::new(&svg, (1000, 560)).into_drawing_area(),
        &data,
    )
    .map_err(|e| e.to_string())?;
    draw(
        BitMapBackend::new(&png, (1000, 560)).into_drawing_area(),
        &data,
    )
    .map_err(|e| e.to_string())?;
    eprintln!("dsm-bench: chart written to {svg} and {png}");
    Ok(())
}

struct ChartData {
    title: String,
    apps: Vec<String>,
    labels: Vec<String>,
    /// times[app][series]
    times: Vec<Vec<Option<f64>>>,
    ymax: f64,
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    d: &ChartData,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(&d.title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..d.apps.len() as f64, 0f64..d.ymax.max(0.01))?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(d.apps.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let f = x.fract();
            if (f - 0.5).abs() < 0.01 {
                d.apps.get(x.floor() as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("seconds")
        .draw()?;
    let w = 0.8 / d.labels.len().max(1) as f64;
    for (si, label) in d.labels.iter().enumerate() {
        let color = colors[si % colors.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = d
            .times
            .iter()
            .enumerate()
            .filter_map(|(ai, row)| {
                let t = row.get(si).copied().flatten()?;
                let x0 = ai as f64 + 0.1 + si as f64 * w;
                Some(Rectangle::new(
                    [(x0, 0.0), (x0 + w * 0.9, t)],
                    color.filled(),
                ))
            })
            .collect();
        c.draw_series(bars)?
            .label(label.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Progress without a terminal: one line per cell.
fn continue_line(done: usize, total: usize, cell: &Cell, k: usize, repeat: usize) {
    if k == 0 {
        eprintln!(
            "[{done}/{total}] {} n={} {} prefetch={} x{repeat}",
            cell.label(),
            cell.nodes,
            cell.transport,
            if cell.prefetch { "on" } else { "off" }
        );
    }
}

fn print_floors(floors: &Floors) {
    println!("{:<52} {:>10}", "floor", "median");
    for (name, v) in floors.rows() {
        println!("{name:<52} {v:>10.2}");
    }
    println!();
}

fn main() {
    let o = options();
    let mut floors = Floors::default();
    if o.floors_only {
        for k in 0..o.repeat {
            eprintln!("dsm-bench: floor sample {}/{}", k + 1, o.repeat);
            floors.sample();
        }
        print_floors(&floors);
        return;
    }
    // Floor samples at the start of each round, FLOOR_RUNS at least in all.
    let floor_samples = FLOOR_RUNS.div_ceil(o.repeat.max(1));
    let mut cells = Vec::new();
    for (app, args) in &o.apps {
        for &nodes in &o.nodes {
            for t in &o.transports {
                for &prefetch in &o.prefetch {
                    cells.push(Cell {
                        app: app.clone(),
                        args: args.clone(),
                        nodes,
                        transport: t.clone(),
                        prefetch,
                        pair: false,
                    });
                }
            }
        }
        if o.pairs && o.nodes.contains(&1) && o.nodes.iter().any(|&n| n > 1) {
            cells.push(Cell {
                app: app.clone(),
                args: args.clone(),
                nodes: 1,
                transport: o.transports[0].clone(),
                prefetch: o.prefetch[0],
                pair: true,
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
            failures: 0,
        })
        .collect();
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
                    "\r[{done}/{total}] {} n={} {} prefetch={} run {}/{}  ({:.0} s)     ",
                    cell.app,
                    cell.nodes,
                    cell.transport,
                    if cell.prefetch { "on" } else { "off" },
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
    let header = format!(
        "{:<16} {:>6} {:<7} {:<8} {:>9} {:>9} {:>9} {:>10} {:>8} {:>9}",
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
    let mut csv = String::from(
        "app,args,nodes,transport,prefetch,median_s,min_s,max_s,compute_median_s,getp_median,ratio_to_baseline,failures,jobs\n",
    );
    let mut json = String::from("[\n");
    for (i, r) in results.iter().enumerate() {
        let med = median(&r.walls);
        let min = r.walls.iter().copied().fold(f64::INFINITY, f64::min);
        let max = r.walls.iter().copied().fold(0.0, f64::max);
        let comp = median(&r.computes);
        let mut g = r.getps.clone();
        g.sort_unstable();
        let getp = g.get(g.len() / 2).copied().unwrap_or(0);
        // A pair's ratio: the work of two jobs in the time they took together, against one alone.
        let jobs = if r.cell.pair { 2.0 } else { 1.0 };
        let ratio = baseline_of(&o, &r.cell, &results).map(|b| jobs * median(&b.walls) / med);
        let ratio_s = ratio.map_or("-".to_string(), |x| format!("{x:.2}x"));
        let pf = if r.cell.prefetch { "on" } else { "off" };
        let nodes = if r.cell.pair {
            "2 jobs".to_string()
        } else {
            r.cell.nodes.to_string()
        };
        println!(
            "{:<16} {:>6} {:<7} {:<8} {med:>9.3} {min:>9.3} {max:>9.3} {comp:>10.3} {getp:>8} {ratio_s:>9}{}",
            r.cell.label(),
            nodes,
            r.cell.transport,
            pf,
            if r.failures > 0 {
                format!("  ({} FAILED)", r.failures)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            csv,
            "{},{},{},{},{pf},{med:.4},{min:.4},{max:.4},{comp:.4},{getp},{},{},{jobs}",
            r.cell.app,
            r.cell.args.join(" "),
            r.cell.nodes,
            r.cell.transport,
            ratio.map_or(String::new(), |x| format!("{x:.3}")),
            r.failures
        );
        let _ = writeln!(
            json,
            "  {{\"app\": \"{}\", \"args\": \"{}\", \"nodes\": {}, \"transport\": \"{}\", \"prefetch\": {}, \"median_s\": {med:.4}, \"min_s\": {min:.4}, \"max_s\": {max:.4}, \"compute_median_s\": {comp:.4}, \"getp_median\": {getp}, \"ratio_to_baseline\": {}, \"failures\": {}, \"jobs\": {jobs}}}{}",
            r.cell.app,
            r.cell.args.join(" "),
            r.cell.nodes,
            r.cell.transport,
            r.cell.prefetch,
            ratio.map_or("null".to_string(), |x| format!("{x:.3}")),
            r.failures,
            if i + 1 < results.len() { "," } else { "" }
        );
    }
    json.push_str("]\n");
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
    let write = |p: &PathBuf, text: &str| {
        if let Err(e) = std::fs::write(p, text) {
            eprintln!("dsm-bench: writing {}: {e}", p.display());
        }
    };
    if let Some(p) = &o.csv {
        write(p, &csv);
    }
    if let Some(p) = &o.json {
        write(p, &json);
    }
    if let Some(prefix) = &o.chart {
        let dsm: Vec<Outcome> = results.iter().filter(|r| !r.cell.pair).cloned().collect();
        if let Err(e) = chart(prefix, &dsm) {
            eprintln!("dsm-bench: no chart: {e}");
        }
    }
    if results.iter().any(|r| r.failures > 0) {
        std::process::exit(1);
    }
}
