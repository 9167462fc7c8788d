//! dsmrun: start a DSM job, like mpirun.
//!
//! `dsmrun -n 4 ./app ARGS` runs 4 local nodes; `dsmrun --hosts .jiahosts ./app` runs one node per
//! line of the hosts file (local addresses as child processes, others over ssh). Bad options or
//! configuration: a one-line error and exit code 2, before any node starts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

/// A line on standard error, as `eprintln!` writes it, except that a standard error the reader
/// left (`dsmrun ... 2>&1 | head`) is no failure: the job's own status stands, not a panic's.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
use dsm_runtime::config::{self, CommType, Config, Host, Origin};
use dsm_runtime::job::JobSpec;
use dsm_runtime::job::launcher;

#[derive(Parser, Debug)]
#[command(
    name = "dsmrun",
    version,
    about = "Run a DSM program on several nodes",
    after_help = "Exit status: 0 when every node left the job; a failing node's own status, or \
                  128 + the signal that ended it (137 for SIGKILL); 128 + signal when dsmrun is \
                  interrupted (130 for Ctrl-C); 1 when the job cannot go on or a node was lost; \
                  2 for bad options or configuration, or a job that could not start.",
    trailing_var_arg = true
)]
struct Args {
    /// Number of nodes (default: one per line of the hosts file, or 2). `-np N` works too.
    #[arg(short = 'n', long = "nodes", alias = "np")]
    nodes: Option<usize>,
    /// Hosts file (JIAJIA's .jiahosts, or Open MPI's `host slots=N` lines); without it, the
    /// .jiahosts of the working directory if there is one, else every node on this machine.
    #[arg(long, visible_alias = "hostfile")]
    hosts: Option<PathBuf>,
    /// Pass VAR (its value here) or VAR=VALUE to every node's environment (repeatable).
    #[arg(short = 'x', value_name = "VAR[=VALUE]")]
    export: Vec<String>,
    /// Transport: udp, tcp, rdma-rc, rdma-ud (overrides comm_type).
    #[arg(long)]
    transport: Option<String>,
    /// core: each node started on a host runs on a CPU of its own, when 2 to as many nodes as
    /// CPUs share the host; none: the scheduler places them (overrides bind_to; default core).
    #[arg(long, value_name = "core|none")]
    bind_to: Option<String>,
    /// Threads per node: each node started on a host gets T CPUs of its own under --bind-to
    /// core, and T is passed on (DSM_THREADS: the apps' --threads). Open MPI's spelling:
    /// --cpus-per-rank. 1 to 1,024, the runtime's thread limit (a program may allow fewer:
    /// the apps 512).
    #[arg(long, alias = "cpus-per-rank", value_name = "T",
          value_parser = clap::value_parser!(u16).range(1..=dsm_runtime::MAX_THREADS as i64))]
    threads: Option<u16>,
    /// Configuration file (default: .jiaconf in the working directory, if present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Set a configuration key, e.g. --set prefetch=off (repeatable; wins over everything).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Node 0 prints the statistics table at exit.
    #[arg(long)]
    stats: bool,
    /// Report the pairs of accesses to the same bytes that no synchronisation orders (data
    /// races); the job then ends with status 66 if there were any (the check_races key).
    #[arg(long)]
    check_races: bool,
    /// Node 0 writes every node's statistics to FILE as JSON at exit.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// The program's path on remote hosts (default: the same path as here).
    #[arg(long, value_name = "PATH")]
    remote_program: Option<String>,
    /// Prefix every output line with [node i].
    #[arg(long)]
    tag_output: bool,
    /// Write each node's output to DIR/1/rank.N/stdout and stderr (as Open MPI's option does).
    #[arg(long, value_name = "DIR")]
    output_filename: Option<PathBuf>,
    /// Seconds to wait for every node to join (1 to a week).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    join_timeout: u64,
    /// The program and its arguments.
    #[arg(required = true)]
    command: Vec<String>,
}

/// Whether `k` can name an environment variable passed with -x: letters, digits, underscores.
fn variable_name(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn usage_error(msg: &str) -> ExitCode {
    say!("dsmrun: {msg}");
    ExitCode::from(2)
}

/// Open MPI's `-np N` (one dash, two letters) as `--nodes N`, among dsmrun's own options only
/// (before the program: its own arguments are left as they are).
fn mpirun_spelling(args: impl Iterator<Item = String>) -> Vec<String> {
    const TAKE_VALUE: [&str; 15] = [
        "--threads",
        "--cpus-per-rank",
        "-n",
        "--nodes",
        "-np",
        "--np",
        "--hosts",
        "--hostfile",
        "--transport",
        "--bind-to",
        "--config",
        "--set",
        "--stats-json",
        "--remote-program",
        "--join-timeout",
    ];
    let mut out = Vec::new();
    let mut in_options = true;
    let mut value_next = false;
    for (k, a) in args.enumerate() {
        if k == 0 || !in_options {
            out.push(a);
            continue;
        }
        if value_next {
            value_next = false;
        } else if a == "-np" || a == "-x" || TAKE_VALUE.contains(&a.as_str()) {
            value_next = true;
        } else if !a.starts_with('-') {
            in_options = false;
        }
        out.push(if in_options && a == "-np" {
            "--nodes".into()
        } else {
            a
        });
    }
    out
}

fn main() -> ExitCode {
    let args = Args::parse_from(mpirun_spelling(std::env::args()));
    dsm_runtime::logging::init_launcher();
    for w in config::unknown_env_vars() {
        log::warn!("{w}");
    }
    if let Err(e) = config::threads_per_node(dsm_runtime::MAX_THREADS) {
        return usage_error(&e);
    }
    let mut env = Vec::new();
    for x in &args.export {
        if x.is_empty() {
            return usage_error("-x: an empty value (give -x VAR or -x VAR=VALUE)");
        }
        let (k, v) = match x.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => match std::env::var(x) {
                Ok(v) => (x.clone(), v),
                Err(_) if variable_name(x) => {
                    return usage_error(&format!(
                        "-x {x}: {x} is not set here (give -x {x}=VALUE)"
                    ));
                }
                Err(_) => (x.clone(), String::new()),
            },
        };
        if !variable_name(&k) {
            return usage_error(&format!("-x {x}: `{k}` is not a variable name"));
        }
        env.push((k, v));
    }
    // Settings: defaults < .jiaconf < environment < command line.
    let mut cfg = Config::default();
    let conf_path = args
        .config
        .clone()
        .unwrap_or_else(|| PathBuf::from(".jiaconf"));
    let file_result = cfg.apply_file(&conf_path, args.config.is_some());
    // Where comm_type was set last, for an error about the transport it names.
    let mut transport_from = comm_type_line(&conf_path).map(|line| Origin::File {
        path: conf_path.display().to_string(),
        line,
    });
    match file_result {
        Ok(notices) => {
            for n in notices {
                say!("dsmrun: notice: {n}");
            }
        }
        Err(e) => return usage_error(&e.to_string()),
    }
    if let Err(e) = cfg.apply_env() {
        return usage_error(&e.to_string());
    }
    if std::env::var_os("DSM_COMM_TYPE").is_some() {
        transport_from = Some(Origin::Env("DSM_COMM_TYPE".into()));
    }
    // A setting given to the nodes with -x DSM_<KEY>=VALUE is this job's setting: the nodes take
    // the settings resolved here (DSM_CONFIG), so it is applied, and checked, here.
    for (k, v) in &env {
        let origin = Origin::Flag(format!("-x {k}={v}"));
        match config::setting_of_variable(k) {
            Some(key) => {
                if let Err(e) = cfg.set(key, v.trim(), &origin) {
                    return usage_error(&e.to_string());
                }
                if key == "comm_type" {
                    transport_from = Some(origin);
                }
            }
            None => {
                if let Some(w) = config::unknown_variable(k) {
                    say!("dsmrun: warning: -x {w}");
                }
            }
        }
    }
    for kv in &args.set {
        let origin = Origin::Flag(format!("--set {kv}"));
        let Some((k, v)) = kv.split_once('=') else {
            return usage_error(&format!("--set {kv}: expected KEY=VALUE"));
        };
        if let Err(e) = cfg.set(k.trim(), v.trim(), &origin) {
            return usage_error(&e.to_string());
        }
        if k.trim() == "comm_type" {
            transport_from = Some(origin);
        }
    }
    if args.check_races {
        cfg.check_races = true;
    }
    if let Some(t) = &args.transport {
        let origin = Origin::Flag("--transport".into());
        if let Err(e) = cfg.set("comm_type", t, &origin) {
            return usage_error(&e.to_string());
        }
        transport_from = Some(origin);
    }
    if let Some(b) = &args.bind_to {
        if let Err(e) = cfg.set("bind_to", b, &Origin::Flag("--bind-to".into())) {
            return usage_error(&e.to_string());
        }
    }
    if let Err(e) = transport_available(cfg.comm_type, transport_from.as_ref()) {
        return usage_error(&e);
    }
    // A .jiahosts in the working directory is the job's hosts, as for a program started
    // directly (jia_init, dsm_runtime::init): the same file means the same job everywhere.
    let hosts_file = args.hosts.clone().or_else(|| {
        let here = PathBuf::from(".jiahosts");
        here.exists().then_some(here)
    });
    let hosts: Vec<Host> = match &hosts_file {
        Some(path) => {
            let text = match config::read_text(path) {
                Ok(t) => t,
                Err(e) => return usage_error(&e.to_string()),
            };
            let list = match config::parse_hosts(&path.display().to_string(), &text, |w| {
                say!("dsmrun: warning: {w}")
            }) {
                Ok(h) => h,
                Err(e) => return usage_error(&e.to_string()),
            };
            let n = args.nodes.unwrap_or(list.len());
            if n > list.len() {
                return usage_error(&format!(
                    "-n {n}: {} lists only {} hosts (a host may repeat to run several nodes)",
                    path.display(),
                    list.len()
                ));
            }
            list.into_iter().take(n).collect()
        }
        None => {
            let n = args.nodes.unwrap_or(2);
            (0..n)
                .map(|_| Host {
                    address: "127.0.0.1".into(),
                    user: None,
                    line: 0,
                })
                .collect()
        }
    };
    if hosts.is_empty() || hosts.len() > usize::from(dsm_runtime::MAX_NODES) {
        return usage_error(&format!(
            "-n {}: between 1 and {} nodes",
            hosts.len(),
            dsm_runtime::MAX_NODES
        ));
    }
    // Check what can be checked before any node starts.
    let hosts_name = hosts_file
        .as_ref()
        .map_or("(local)".to_string(), |p| p.display().to_string());
    for h in &hosts {
        if let Err(e) = launcher::resolve(&h.address) {
            return usage_error(&format!("{hosts_name}:{}: {e}", h.line));
        }
    }
    if cfg.base_port != 0 {
        for (i, h) in hosts.iter().enumerate() {
            if !launcher::is_local(&h.address) {
                continue;
            }
            let Ok(ip) = launcher::resolve(&h.address) else {
                continue;
            };
            let port = cfg.base_port + i as u16;
            if let Err(e) = std::net::UdpSocket::bind((ip, port))
                .and_then(|_| std::net::TcpListener::bind((ip, port)).map(|_| ()))
            {
                return usage_error(&format!(
                    "base_port = {}: port {port} for node {i} on {ip} is not free ({e}); allowed: 0 (any free port) or a base with {} free ports",
                    cfg.base_port,
                    hosts.len()
                ));
            }
        }
    }
    if let Err(e) = dsm_runtime::check_region(&cfg) {
        return usage_error(&e);
    }
    if let Err(e) = dsm_runtime::impairment(cfg.comm_type) {
        return usage_error(&e);
    }
    if let Some(path) = &args.stats_json {
        if let Err(e) = dsm_runtime::files::check_own_file(path) {
            return usage_error(&format!(
                "--stats-json {}: cannot be written ({e})",
                path.display()
            ));
        }
    }
    if args
        .remote_program
        .as_deref()
        .is_some_and(|p| p.trim().is_empty())
    {
        return usage_error(
            "--remote-program: an empty path (give the program's path on the remote hosts)",
        );
    }
    if let Some(t) = args.threads {
        env.push(("DSM_THREADS".into(), t.to_string()));
        // OpenMP programs take their team's size from it (without, all the CPUs they see).
        if std::env::var_os("OMP_NUM_THREADS").is_none()
            && !env.iter().any(|(k, _)| k == "OMP_NUM_THREADS")
        {
            env.push(("OMP_NUM_THREADS".into(), t.to_string()));
        }
    }
    let mut command = args.command.into_iter();
    let program = command.next().unwrap_or_default();
    let spec = JobSpec {
        program,
        args: command.collect(),
        remote_program: args.remote_program,
        hosts,
        config: cfg,
        stats: args.stats,
        stats_json: args
            .stats_json
            .map(|p| std::path::absolute(&p).unwrap_or(p).display().to_string()),
        tag_output: args.tag_output,
        output_dir: args
            .output_filename
            .map(|p| std::path::absolute(&p).unwrap_or(p)),
        join_timeout: Duration::from_secs(args.join_timeout),
        env,
    };
    if let Some(f) = &hosts_file {
        let n = spec.hosts.len();
        say!(
            "dsmrun: {n} node{} on the hosts of {}",
            if n == 1 { "" } else { "s" },
            f.display()
        );
    }
    let start = std::time::SystemTime::now();
    let started = std::time::Instant::now();
    launcher::adopt_what_the_nodes_leave();
    let end = launcher::run(&spec);
    let left = launcher::end_what_the_nodes_left();
    if left > 0 {
        log::info!("ended {left} process(es) the nodes had started and left running");
    }
    let code = match &end.result {
        Ok(()) => 0,
        Err(launcher::JobFailure::Start(msg)) => {
            say!("dsmrun: {msg}");
            2
        }
        Err(e) => {
            say!("dsmrun: {e}");
            e.exit_code()
        }
    };
    if let Some(path) = &spec.stats_json {
        write_stats(path, &spec, &end, start, started.elapsed(), code);
    }
    ExitCode::from(code)
}

/// Writes the statistics file: the job's metadata and node 0's report of every node's counters
/// (`"nodes": null` when the job ended before node 0 could make it).
fn write_stats(
    path: &str,
    spec: &JobSpec,
    end: &launcher::JobEnd,
    start: std::time::SystemTime,
    wall: Duration,
    code: u8,
) {
    let nodes = end
        .node_stats
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(serde_json::Value::Null);
    let meta = dsm_runtime::stats::JobMeta {
        launcher: "dsmrun".into(),
        program: spec.program.clone(),
        arguments: spec.args.clone(),
        nodes: spec.hosts.len(),
        transport: spec.config.comm_type.name().into(),
        settings: spec.config.settings(),
        start,
        wall,
        exit_status: Some(i32::from(code)),
    };
    let written = dsm_runtime::files::write_own_file(
        std::path::Path::new(path),
        dsm_runtime::stats::job_json(&meta, nodes).as_bytes(),
    );
    if let Err(e) = written {
        say!("dsmrun: cannot write statistics to {path}: {e}");
    }
}

/// The line of the configuration file at `path` that sets `comm_type` (from 1), if any.
fn comm_type_line(path: &std::path::Path) -> Option<usize> {
    let text = std::fs::read_to_string(path).ok()?;
    // As the parser reads it: a byte-order mark at the start is not part of line 1's key.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let line = text.lines().position(|l| {
        l.split('=')
            .next()
            .is_some_and(|k| k.trim() == "comm_type" && l.contains('='))
    })?;
    Some(line + 1)
}

/// Whether this build and this machine can run `comm_type` (set at `from`), checked before any
/// node starts. (Checked here for local nodes; remote hosts check their own devices at start.)
fn transport_available(comm_type: CommType, from: Option<&Origin>) -> Result<(), String> {
    let at = from.map_or(String::new(), |o| format!("{o}: "));
    match comm_type {
        CommType::Udp | CommType::Tcp => Ok(()),
        #[cfg(feature = "rdma")]
        CommType::RdmaRc | CommType::RdmaUd => dsm_transport::rdma::probe(comm_type.name())
            .map(|_| ())
            .map_err(|e| format!("{at}comm_type {e}")),
        #[cfg(not(feature = "rdma"))]
        CommType::RdmaRc | CommType::RdmaUd => Err(format!(
            "{at}comm_type {}: this dsmrun was built without RDMA; build with `cargo build --release --features dsm-runtime/rdma`",
            comm_type.name()
        )),
    }
}
