//! Starting a job: the nodes as child processes (local) or over ssh (remote hosts), the
//! rendezvous, and watching them until they all end.
//!
//! A node that exits non-zero or dies ends the job: the launcher names it, ends the others and
//! exits non-zero. An interrupt (Ctrl-C) ends every node.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::node::JobEnv;
use super::rendezvous::{Keep, Rendezvous};
use super::watch::{Heard, Standing, tell};
use super::wire::Line;
use crate::config::{Config, Host};
use crate::sys::signals;

/// What to run, where.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// The program and its arguments.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The program's path on remote hosts, if not the same as here.
    pub remote_program: Option<String>,
    /// One host per node (node i runs on `hosts[i]`).
    pub hosts: Vec<Host>,
    /// Resolved settings.
    pub config: Config,
    /// Node 0 prints the statistics table at exit.
    pub stats: bool,
    /// Node 0 writes every node's statistics here as JSON at exit.
    pub stats_json: Option<String>,
    /// Prefix each output line with `[node i]`.
    pub tag_output: bool,
    /// Each node's standard output and error go to `DIR/1/rank.N/stdout` and `stderr` (Open
    /// MPI's `--output-filename` layout) instead of ours.
    pub output_dir: Option<std::path::PathBuf>,
    /// Give up if the nodes have not all joined after this long.
    pub join_timeout: Duration,
    /// Variables set for every node (`dsmrun -x`), beyond what it inherits.
    pub env: Vec<(String, String)>,
}

/// How a job ended badly.
#[derive(Debug, thiserror::Error)]
pub enum JobFailure {
    /// The job could not start.
    #[error("{0}")]
    Start(String),
    /// A node failed; the others were ended.
    #[error("node {node} ({host}) {how}")]
    Node {
        /// Which node.
        node: usize,
        /// Where it ran.
        host: String,
        /// Exit status or signal.
        how: String,
        /// It ended because another node failed.
        peer_failed: bool,
        /// dsmrun's exit status for it: the node's own status, 128 + the signal that ended
        /// it, or 1 when it did not end by itself (lost, stopped).
        code: u8,
    },
    /// Every node waits for another and nothing is on its way: the job can never go on.
    #[error("{}", super::watch::stuck_verdict(.0))]
    Stuck(String),
    /// The launcher was interrupted.
    #[error("interrupted by {name} (signal {0}); all nodes ended", name = signals::name(*.0))]
    Interrupted(i32),
}

impl JobFailure {
    /// The launcher's exit status for this failure, as mpirun's and srun's: a failing node's
    /// own status (128 + signal for a signal), 128 + signal when the launcher was interrupted
    /// (130 for Ctrl-C), 1 when the job could not go on or a node was lost, 2 when it could not
    /// start.
    pub fn exit_code(&self) -> u8 {
        match self {
            JobFailure::Start(_) => 2,
            JobFailure::Node { code, .. } => *code,
            JobFailure::Stuck(_) => 1,
            JobFailure::Interrupted(sig) => (128 + sig).clamp(1, 255) as u8,
        }
    }
}

/// dsmrun's exit status for a node that ended with `status` (and failed).
fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) if c == crate::door::end::EXIT_PEER_FAILED => 1,
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + s).clamp(1, 255) as u8,
        _ => 1,
    }
}

/// Whether `host` names an address of this machine (so its nodes start as local processes).
pub fn is_local(host: &str) -> bool {
    let Ok(addrs) = (host, 0).to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| a.ip().is_loopback() || UdpSocket::bind(SocketAddr::new(a.ip(), 0)).is_ok())
}

/// The IPv4 address of `host`.
pub fn resolve(host: &str) -> Result<IpAddr, String> {
    (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host `{host}`: {e}"))?
        .map(|a| a.ip())
        .find(IpAddr::is_ipv4)
        .ok_or_else(|| format!("host `{host}` has no IPv4 address"))
}

/// How a node's process ended, in words; `local_pid`: the process, if it ran on this host (the
/// kernel's words on it are then known here).
fn describe(status: ExitStatus, local_pid: Option<u32>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) if c == crate::door::end::EXIT_PEER_FAILED => {
            "ended because another node failed".into()
        }
        (Some(c), _) if c == crate::door::end::EXIT_RACES => {
            format!("found data races (status {c}: the report is above)")
        }
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!(
            "was killed by signal {s}{}",
            match s {
                9 => match local_pid.and_then(oom_killed) {
                    Some(why) => format!(" (SIGKILL: {why})"),
                    None => " (SIGKILL)".into(),
                },
                13 => " (SIGPIPE: its output was closed)".into(),
                _ => format!(" ({})", signals::name(s)),
            }
        ),
        _ => "ended abnormally".into(),
    }
}

/// What the system said of out-of-memory kills when the job started: the kernel's log, read
/// from its end then (`/dev/kmsg`, where this user may read it), and this process's memory
/// cgroup with the kills its out-of-memory killer had made.
struct OomWatch {
    kmsg: Option<std::fs::File>,
    /// Pids the kernel's log says its out-of-memory killer killed since.
    killed: Vec<u32>,
    cgroup: Option<(String, u64)>,
}

static OOM_WATCH: std::sync::Mutex<Option<OomWatch>> = std::sync::Mutex::new(None);

/// This process's memory cgroup and how many processes the kernel's out-of-memory killer has
/// killed in it itself (cgroup v2's `memory.events.local`, else `memory.events`; v1's
/// `memory.oom_control`), if the system says.
fn oom_kills() -> Option<(String, u64)> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let count = |file: &str| -> Option<u64> {
        let text = std::fs::read_to_string(file).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    };
    groups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let found = match controllers {
            "" => ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
                .iter()
                .find_map(|root| {
                    count(&format!("{root}{path}/memory.events.local"))
                        .or_else(|| count(&format!("{root}{path}/memory.events")))
                }),
            c if c.split(',').any(|c| c == "memory") => {
                count(&format!("/sys/fs/cgroup/memory{path}/memory.oom_control"))
            }
            _ => None,
        };
        found.map(|n| (path.to_owned(), n))
    })
}

/// Notes what the system says of out-of-memory kills now ([`oom_killed`] looks from here).
fn note_oom_kills() {
    use std::io::Seek;
    use std::os::unix::fs::OpenOptionsExt;
    let mut watch = OOM_WATCH.lock().unwrap_or_else(|e| e.into_inner());
    if watch.is_some() {
        return;
    }
    let kmsg = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()
        .and_then(|mut f| f.seek(std::io::SeekFrom::End(0)).ok().map(|_| f));
    *watch = Some(OomWatch {
        kmsg,
        killed: Vec::new(),
        cgroup: oom_kills(),
    });
}

/// Whether the kernel's out-of-memory killer ended local process `pid` since the job started,
/// in words: by the kernel's log (`Killed process PID`), or where that cannot be read, by the
/// kills counted in this process's memory cgroup during the job.
fn oom_killed(pid: u32) -> Option<String> {
    let mut guard = OOM_WATCH.lock().unwrap_or_else(|e| e.into_inner());
    let watch = guard.as_mut()?;
    if let Some(kmsg) = &mut watch.kmsg {
        // One record per read; EAGAIN at the end. A record overwritten before it was read
        // (EPIPE) is skipped.
        let mut record = [0u8; 8192];
        for _ in 0..100_000 {
            match kmsg.read(&mut record) {
                Ok(n) if n > 0 => {
                    let text = String::from_utf8_lossy(&record[..n]);
                    if let Some(rest) = text.split("Killed process ").nth(1) {
                        let digits: String =
                            rest.chars().take_while(char::is_ascii_digit).collect();
                        if let Ok(p) = digits.parse() {
                            watch.killed.push(p);
                        }
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
                _ => break,
            }
        }
        return watch.killed.contains(&pid).then(|| {
            format!(
                "the kernel's out-of-memory killer ended it (its log says `Killed process \
                 {pid}`): the node used more memory than the machine or its cgroup allows"
            )
        });
    }
    let (group, before) = watch.cgroup.clone()?;
    let (_, now) = oom_kills()?;
    (now > before).then(|| {
        format!(
            "most likely the kernel's out-of-memory killer, which ended {} process{} of memory \
             cgroup {group} during the job (its log cannot be read here): the node used more \
             memory than the machine or its cgroup allows",
            now - before,
            if now - before == 1 { "" } else { "es" }
        )
    })
}

/// Nothing a node starts outlives it, as under mpirun and srun: the node's exit ends every
/// process descended from it still running (a forked child, a shell and what it started). Called
/// before a node 0 that starts its job itself registers its wait for the other nodes, so this
/// runs after that wait, once those have ended. What a child leaves behind when it ends first
/// (`system("... &")`) is no longer the node's descendant: the launcher adopts it (dsmrun, a
/// self-launching node 0; srun and mpirun end a job's processes themselves).
pub(crate) fn end_what_this_process_starts() {
    extern "C" fn at_exit() {
        if !crate::door::flags::FORKED.load(Ordering::Relaxed) {
            crate::sys::process::end_descendants();
        }
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = signals::at_exit(at_exit) {
            log::warn!("the processes this node starts may outlive it: {e}");
        }
    });
}

/// A launcher adopts what its nodes leave behind: the orphans of the processes a node started
/// become the launcher's children, not init's, so [`end_what_the_nodes_left`] finds them even
/// when their node was killed before it could end them itself.
pub fn adopt_what_the_nodes_leave() {
    if let Err(e) = crate::sys::process::adopt_orphans() {
        log::warn!("processes the nodes start may outlive the job: {e}");
    }
}

/// Ends every process still running that the launcher's nodes started (nothing a job started
/// outlives it, as with mpirun and srun). Returns how many there were.
pub fn end_what_the_nodes_left() -> usize {
    crate::sys::process::end_descendants()
}

/// Copies a node's output to ours by whole lines, in the order they were completed, as mpirun
/// does: lines of different nodes never mix, whatever they print at once. With `tag`, each line
/// is prefixed with `[node i] `. Bytes, not text: a line that is not UTF-8 passes as it is, and
/// so do the last bytes of a node's output that end without a newline (a program's binary
/// output reaches a file byte for byte), unless tagged (a tag starts a line: it gets its
/// newline). When our side is closed (`dsmrun ... | head`), the
/// node's pipe is closed too: its next write ends it with SIGPIPE, as a program whose reader left
/// ends, and the job with it (status 141). Any other failure to write (a full disk) drops the
/// rest of the node's lines, so the node never blocks on a full pipe.
fn forward(
    stream: impl Read + Send + 'static,
    node: usize,
    to_stderr: bool,
    tag: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let prefix = if tag {
            format!("[node {node}] ")
        } else {
            String::new()
        };
        let mut input = BufReader::new(stream);
        let mut line = prefix.clone().into_bytes();
        let mut open = true;
        loop {
            line.truncate(prefix.len());
            match input.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if tag && !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            if open {
                let written = if to_stderr {
                    write_line(&mut std::io::stderr().lock(), &line)
                } else {
                    write_line(&mut std::io::stdout().lock(), &line)
                };
                match written {
                    Ok(()) => {}
                    // Dropping `input` closes the node's pipe.
                    Err(e) if e.raw_os_error() == Some(libc::EPIPE) => break,
                    Err(_) => open = false,
                }
            }
        }
    })
}

/// Writes one line with one write (a line longer than a pipe's atomic size may take several,
/// under our lock).
fn write_line(out: &mut impl Write, line: &[u8]) -> std::io::Result<()> {
    out.write_all(line).and_then(|()| out.flush())
}

/// Waits for the forwarding threads to print the nodes' last lines (their pipes close when the
/// nodes end), a few seconds at most: a process the program started may hold a pipe open.
fn finish_forwarding(forwarders: Vec<std::thread::JoinHandle<()>>) {
    let deadline = Instant::now() + Duration::from_secs(3);
    for f in forwarders {
        while !f.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if f.is_finished() {
            let _ = f.join();
        }
    }
}

/// A job about to start: where each node runs, the rendezvous, the cookie.
struct Prepared {
    local: Vec<bool>,
    binds: Vec<IpAddr>,
    rv: Rendezvous,
    rv_addr: SocketAddr,
    cookie: u64,
}

fn prepare(spec: &JobSpec) -> Result<Prepared, JobFailure> {
    let local: Vec<bool> = spec.hosts.iter().map(|h| is_local(&h.address)).collect();
    // Threads per node: dsmrun --threads (in the nodes' environment), else our own.
    let threads = spec
        .env
        .iter()
        .find(|(k, _)| k == "DSM_THREADS")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| crate::config::threads_per_node(crate::door::MAX_THREADS).unwrap_or(1));
    check_local_load(
        local.iter().filter(|&&l| l).count(),
        threads,
        spec.config.peer_timeout_ms,
    )?;
    let binds: Vec<IpAddr> = spec
        .hosts
        .iter()
        .map(|h| resolve(&h.address))
        .collect::<Result<_, _>>()
        .map_err(JobFailure::Start)?;
    // The rendezvous listens where every node can reach it.
    let (rv_bind, rv_advertise) = if local.iter().all(|&l| l) {
        (
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        )
    } else {
        let remote = binds
            .iter()
            .zip(&local)
            .find(|(_, l)| !**l)
            .map_or(binds[0], |(a, _)| *a);
        let mine = super::node::route_to(remote)
            .ok_or_else(|| JobFailure::Start(format!("no route to host {remote}")))?;
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), mine)
    };
    let rv =
        Rendezvous::bind(rv_bind).map_err(|e| JobFailure::Start(format!("rendezvous: {e}")))?;
    let port = rv
        .addr()
        .map_err(|e| JobFailure::Start(e.to_string()))?
        .port();
    Ok(Prepared {
        local,
        binds,
        rv,
        rv_addr: SocketAddr::new(rv_advertise, port),
        cookie: crate::sys::random_u64(),
    })
}

/// Nodes one CPU carries, at the default `peer_timeout_ms` (10 s), before starved nodes miss
/// each other's heartbeats: 256 nodes on 2 CPUs ran; 500 failed after 19 s, every node blaming
/// others that "died or are unreachable" (they were only waiting for a CPU).
const NODES_PER_CPU_AT_DEFAULT_TIMEOUT: u64 = 128;

/// More threads on this machine than its CPUs (`nodes` nodes of `threads` threads): said once
/// (they share CPUs, and each node's service thread spins while its threads wait, so the job
/// runs slower than with fewer); so many nodes that they would time each other out: refused up
/// front, with the setting that allows more.
fn check_local_load(nodes: usize, threads: usize, peer_timeout_ms: u64) -> Result<(), JobFailure> {
    let cpus = crate::sys::allowed_cpus().map_or(1, |c| c.len().max(1));
    if nodes * threads <= cpus {
        return Ok(());
    }
    if nodes <= cpus {
        log::warn!(
            "{nodes} node(s) of {threads} threads on this machine ({} threads), which has {cpus} \
             CPU(s): they share CPUs, and the job runs slower than with {cpus} threads or fewer \
             in all",
            nodes * threads
        );
        return Ok(());
    }
    let limit = (cpus as u64 * NODES_PER_CPU_AT_DEFAULT_TIMEOUT * peer_timeout_ms / 10_000).max(1);
    if nodes as u64 > limit {
        let need = (nodes as u64 * 10_000).div_ceil(cpus as u64 * NODES_PER_CPU_AT_DEFAULT_TIMEOUT);
        return Err(JobFailure::Start(format!(
            "{nodes} nodes on this machine, which has {cpus} CPU(s): at peer_timeout_ms = \
             {peer_timeout_ms} at most {limit} fit before starved nodes take each other for dead \
             (raise peer_timeout_ms to {need} or more, or run fewer nodes)"
        )));
    }
    log::warn!(
        "{nodes} nodes on this machine, which has {cpus} CPU(s): they share CPUs, and the job runs \
         slower than on {cpus} node(s) or fewer"
    );
    Ok(())
}

/// Node `i`'s place among the nodes on its host: (its index among them, how many there are).
/// Nodes on this machine share it; remote ones share theirs by the name in the hosts file.
fn on_host(spec: &JobSpec, p: &Prepared, i: usize) -> (usize, usize) {
    let same = |j: usize| {
        p.local[j] == p.local[i] && (p.local[i] || spec.hosts[j].address == spec.hosts[i].address)
    };
    let before = (0..i).filter(|&j| same(j)).count();
    (before, (0..spec.hosts.len()).filter(|&j| same(j)).count())
}

fn node_env(spec: &JobSpec, p: &Prepared, i: usize) -> Vec<(String, String)> {
    let mut env = spec.env.clone();
    let (local_rank, local_size) = on_host(spec, p, i);
    env.extend([
        ("DSM_LOCAL_RANK".into(), local_rank.to_string()),
        ("DSM_LOCAL_SIZE".into(), local_size.to_string()),
        ("DSM_RANK".into(), i.to_string()),
        ("DSM_SIZE".into(), spec.hosts.len().to_string()),
        ("DSM_COOKIE".into(), format!("{:016x}", p.cookie)),
        ("DSM_RENDEZVOUS".into(), p.rv_addr.to_string()),
        ("DSM_BIND".into(), p.binds[i].to_string()),
        ("DSM_CONFIG".into(), spec.config.to_wire()),
        (
            "DSM_STATS".into(),
            if spec.stats { "1".into() } else { "0".into() },
        ),
        (
            "DSM_STATS_JSON".into(),
            spec.stats_json.clone().unwrap_or_default(),
        ),
    ]);
    env
}

/// The rendezvous `rv`, told where each node of `spec` was started (`local[i]`: on this host).
fn started_on(spec: &JobSpec, rv: Rendezvous, local: &[bool]) -> Rendezvous {
    rv.started_on(
        spec.hosts
            .iter()
            .zip(local)
            .map(|(h, &l)| (h.address.clone(), !l))
            .collect(),
    )
}

/// Starts node `i`; the threads forwarding its output by lines go to `forwarders` (unless it
/// goes to files, `--output-filename`, or `forward` is off: the nodes then share our terminal).
/// The command that starts a remote node, unless `DSM_SSH` gives another.
const DEFAULT_SSH: &str = "ssh -o BatchMode=yes -o ControlMaster=no";

/// Added to the ssh command unless it sets keep-alives itself. ssh alone never gives up on a
/// host that stops answering (the network cut between this host and it): once its node has
/// ended, unheard, the job would wait for that ssh forever. With these it ends (status 255)
/// after 15-20 s of silence from the host.
const SSH_KEEP_ALIVE: [&str; 4] = ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"];

fn spawn_node(
    spec: &JobSpec,
    p: &Prepared,
    i: usize,
    forward_output: bool,
    forwarders: &mut Vec<std::thread::JoinHandle<()>>,
) -> Result<Child, JobFailure> {
    // dsmrun starts its nodes from its main thread, which lives as long as it does: its ssh
    // clients are tied to it (PR_SET_PDEATHSIG follows the thread that forks). A self-launching
    // node 0 starts them from whichever thread called jia_init, which may end first.
    let tie_ssh_to_us = forward_output;
    let env = node_env(spec, p, i);
    let mut cmd = if p.local[i] {
        let mut c = Command::new(&spec.program);
        c.args(&spec.args).envs(env);
        c
    } else {
        let cwd = std::env::current_dir()
            .map_err(|e| JobFailure::Start(format!("current directory: {e}")))?;
        let quote = |a: &str| format!("'{}'", a.replace('\'', "'\\''"));
        // The cookie is the job's secret: it never goes on a command line, which every user of
        // the remote host can read (ps). It goes first on ssh's standard input, and the remote
        // shell reads it into the node's environment (nobody else's to read).
        // Not `exec`: the shell stays to pass on how the node ended (128 + N for signal N),
        // which ssh would turn into 255.
        let mut script = format!(
            "cd {} && IFS= read -r DSM_COOKIE && export DSM_COOKIE && env",
            quote(&cwd.display().to_string())
        );
        for (k, v) in env.iter().filter(|(k, _)| k != "DSM_COOKIE") {
            script.push_str(&format!(" {k}={}", quote(v)));
        }
        // What a local node inherits, a remote one gets too: RUST_LOG and every DSM_ variable
        // of ours that the job's own do not replace (DSM_SSH is for this side).
        let ours: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        for (k, v) in std::env::vars() {
            if (k == "RUST_LOG" || k.starts_with("DSM_"))
                && k != "DSM_SSH"
                && !ours.contains(&k.as_str())
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                script.push_str(&format!(" {k}={}", quote(&v)));
            }
        }
        script.push_str(&format!(
            " {}",
            quote(spec.remote_program.as_deref().unwrap_or(&spec.program))
        ));
        for a in &spec.args {
            script.push(' ');
            script.push_str(&quote(a));
        }
        script.push_str("; exit $?");
        // Run by sh whatever the user's login shell is.
        let remote = format!("exec sh -c {}", quote(&script));
        // DSM_SSH replaces the ssh command (e.g. to give a key or a port).
        // Never a ControlMaster of ours: a persisting master forked by our ssh would be among
        // the job's processes, ended with it (an existing master of the user's is used).
        let ssh = std::env::var("DSM_SSH").unwrap_or_else(|_| DEFAULT_SSH.into());
        let mut words = ssh.split_whitespace();
        let mut c = Command::new(words.next().unwrap_or("ssh"));
        c.args(words);
        if !ssh.contains("ServerAlive") {
            c.args(SSH_KEEP_ALIVE);
        }
        if let Some(u) = &spec.hosts[i].user {
            c.args(["-l", u]);
        }
        c.arg(&spec.hosts[i].address).arg(remote);
        // However dsmrun ends (SIGKILL included), its ssh clients end with it.
        if tie_ssh_to_us {
            crate::sys::process::dies_with_parent(&mut c, libc::SIGTERM);
        }
        c
    };
    if let Some(dir) = &spec.output_dir {
        let rank_dir = dir.join("1").join(format!("rank.{i}"));
        let open = |name: &str| {
            // Each directory and file as this user's own: a link planted under a shared
            // directory cannot redirect them.
            std::fs::create_dir_all(dir)
                .and_then(|()| crate::sys::make_own_dir(dir))
                .and_then(|()| crate::sys::make_own_dir(&dir.join("1")))
                .and_then(|()| crate::sys::make_own_dir(&rank_dir))
                .and_then(|()| crate::sys::create_own_file(&rank_dir.join(name)))
                .map_err(|e| {
                    JobFailure::Start(format!(
                        "--output-filename: cannot write {}: {e}",
                        rank_dir.join(name).display()
                    ))
                })
        };
        cmd.stdout(open("stdout")?).stderr(open("stderr")?);
    } else if forward_output {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    // Standard input goes to node 0 only, as mpirun's and srun's do; the others read nothing.
    // A remote node's comes through ssh, after the cookie line.
    if !p.local[i] {
        cmd.stdin(Stdio::piped());
    } else if i != 0 {
        cmd.stdin(Stdio::null());
    }
    let mut child = cmd.spawn().map_err(|e| {
        let what = if p.local[i] {
            spec.program.clone()
        } else {
            match std::env::var("DSM_SSH") {
                Ok(ssh) => format!(
                    "`{}` of DSM_SSH={ssh}",
                    ssh.split_whitespace().next().unwrap_or("")
                ),
                Err(_) => "ssh".into(),
            }
        };
        JobFailure::Start(format!("cannot start node {i} ({what}): {e}"))
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        // The cookie line; then, for node 0, our standard input; for the others, its end.
        let _ = writeln!(stdin, "{:016x}", p.cookie);
        if i == 0 {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut stdin);
            });
        }
    }
    if let Some(o) = child.stdout.take() {
        forwarders.push(forward(o, i, false, spec.tag_output));
    }
    if let Some(e) = child.stderr.take() {
        forwarders.push(forward(e, i, true, spec.tag_output));
    }
    Ok(child)
}

/// How a job ended, and what node 0 reported.
#[derive(Debug)]
pub struct JobEnd {
    /// Whether every node succeeded, or who failed first and how.
    pub result: Result<(), JobFailure>,
    /// Every node's statistics as node 0 sent them at exit (a JSON array), if it was asked to
    /// (`DSM_STATS_JSON`) and got that far.
    pub node_stats: Option<String>,
}

/// Runs the job to its end.
pub fn run(spec: &JobSpec) -> JobEnd {
    let mut control: Vec<std::net::TcpStream> = Vec::new();
    let mut words = Heard::new(spec.hosts.len());
    let mut forwarders = Vec::new();
    let result = run_watched(spec, &mut control, &mut words, &mut forwarders);
    // The nodes' last lines (a failing node's message among them) before dsmrun's verdict.
    finish_forwarding(forwarders);
    let node_stats = words.stats(&mut control);
    if words.refused() > 0 {
        log::warn!(
            "{} line(s) on the nodes' control connections were refused (not the job's words)",
            words.refused()
        );
    }
    JobEnd { result, node_stats }
}

fn run_watched(
    spec: &JobSpec,
    control: &mut Vec<std::net::TcpStream>,
    words: &mut Heard,
    forwarders: &mut Vec<std::thread::JoinHandle<()>>,
) -> Result<(), JobFailure> {
    let n = spec.hosts.len();
    let p = prepare(spec)?;
    log::info!(
        "starting {n} node{} of {} over {}",
        if n == 1 { "" } else { "s" },
        spec.program,
        spec.config.comm_type.name()
    );
    let interrupted = signals::catch_interrupts();
    note_oom_kills();
    let mut children: Vec<Child> = Vec::with_capacity(n);
    for i in 0..n {
        match spawn_node(spec, &p, i, true, forwarders) {
            Ok(c) => children.push(c),
            Err(e) => {
                end_all(&mut children);
                return Err(e);
            }
        }
    }
    let (rv, cookie, timeout) = (
        started_on(spec, p.rv, &p.local),
        p.cookie,
        spec.join_timeout,
    );
    // A one-node job has nobody to meet: its node never calls the rendezvous, and waiting for it
    // would end every run longer than the join timeout.
    let hellos = (n > 1).then(|| rv.hellos());
    let rv_thread = (n > 1)
        .then(|| std::thread::spawn(move || rv.serve(n as u16, cookie, timeout, Keep::Launcher)));
    let nodes: Vec<usize> = (0..n).collect();
    let remote: Vec<bool> = p.local.iter().map(|l| !l).collect();
    let watched = Watched {
        spec,
        nodes: &nodes,
        children: &mut children,
        remote: &remote,
        control,
        words,
        in_node0: false,
        hellos,
    };
    watch(watched, rv_thread, Some(interrupted))
}

/// A job as its watcher sees it: the nodes it started (`children[k]` runs node `nodes[k]`:
/// every node under dsmrun, the others in a node 0 that started its job itself), and every
/// node's control connection (after the rendezvous) with what came on it.
struct Watched<'a> {
    spec: &'a JobSpec,
    nodes: &'a [usize],
    children: &'a mut Vec<Child>,
    /// By node: it runs on another host, through ssh.
    remote: &'a [bool],
    control: &'a mut Vec<std::net::TcpStream>,
    words: &'a mut Heard,
    /// The watcher is node 0's own thread (a job node 0 started itself): node 0 ends with the
    /// job's status.
    in_node0: bool,
    /// The nodes that said hello to the rendezvous so far (none: no rendezvous).
    hellos: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

impl Watched<'_> {
    /// Node `k`: by its process if the watcher started it, else by its control connection (a
    /// connection read to its end after `DSM1 BYE` is a node that left the job).
    fn standing(&mut self, k: usize) -> Standing {
        if let Some(pos) = self.nodes.iter().position(|&i| i == k) {
            return match ended(&mut self.children[pos], self.remote[k]) {
                Ok(None) => Standing::Running,
                Ok(Some(e)) if e.success() => Standing::EndedWell,
                _ => Standing::Failed,
            };
        }
        self.words.standing(k)
    }

    /// Whether the job can no longer go on (see [`Heard::stuck`]). A node that ends is a change
    /// too: the others' reports are judged from then on.
    fn stuck(&mut self) -> Option<String> {
        let standing: Vec<Standing> = (0..self.words.waiting.len())
            .map(|k| self.standing(k))
            .collect();
        let ended = standing.iter().filter(|s| **s != Standing::Running).count();
        if ended != self.words.ended {
            self.words.ended = ended;
            self.words.changed = Instant::now();
            self.words.wait_changed();
        }
        if let Some(what) = self.words.spin_looks_stuck(&standing) {
            eprintln!("dsm: warning: {}", super::watch::spin_warning(&what));
        }
        for (k, line) in self.words.quiet_runners(&standing) {
            super::watch::tell_one(self.control, k, &line);
        }
        self.words.stuck(&standing)
    }
}

/// Watches a started job to its end: `Ok` once every node it started ended well; otherwise the
/// first failure, with the other nodes told (`DSM1 LOST`) and ended. Also ends a job that cannot
/// go on, and one whose launcher is `interrupted`.
fn watch(
    mut w: Watched<'_>,
    mut rv_thread: Option<std::thread::JoinHandle<Result<Vec<std::net::TcpStream>, String>>>,
    interrupted: Option<&std::sync::atomic::AtomicI32>,
) -> Result<(), JobFailure> {
    // A node that ended because another failed (status EXIT_PEER_FAILED) is reported only if the
    // failing node itself does not show up within a moment.
    let mut echo: Option<(JobFailure, Instant)> = None;
    // Descriptors that become readable when a node ends: the loop sleeps on them rather than
    // on a timer (none where the kernel lacks pidfd_open: then it looks every millisecond).
    let exits: Vec<Option<std::os::fd::OwnedFd>> = w
        .children
        .iter()
        .map(|c| crate::sys::pidfd_open(c.id()).ok())
        .collect();
    loop {
        if let Some((_, since)) = &echo {
            if since.elapsed() > Duration::from_secs(1) {
                end_all(w.children);
                return Err(echo.map(|(e, _)| e).unwrap_or(JobFailure::Interrupted(0)));
            }
        }
        let sig = interrupted.map_or(0, |i| i.load(Ordering::SeqCst));
        if sig != 0 {
            end_all(w.children);
            return Err(JobFailure::Interrupted(sig));
        }
        if rv_thread.as_ref().is_some_and(|t| t.is_finished()) {
            match rv_thread.take().map(|t| t.join()) {
                Some(Ok(Err(e))) => {
                    end_all(w.children);
                    return Err(JobFailure::Start(e));
                }
                Some(Ok(Ok(streams))) => *w.control = streams,
                _ => {}
            }
        }
        w.words.poll(w.control);
        if let Some(what) = w.stuck() {
            return Err(end_for(&mut w, JobFailure::Stuck(what)));
        }
        match poll_children(
            w.spec,
            w.nodes,
            w.children,
            w.remote,
            echo.as_ref().map(|(e, _)| e),
            w.control,
            w.words,
        ) {
            Ok(true) if echo.is_none() => {
                // Every node ended well, but the rendezvous still waits: some never joined. A
                // node that did (node 0 that started its job itself) waits for them; if none
                // did, a program that never calls jia_init ran as separate processes.
                let waiting = rv_thread.as_ref().is_some_and(|t| !t.is_finished());
                if let Some(f) = ended_before_joining(&mut w).filter(|_| waiting) {
                    return Err(end_for(&mut w, f));
                }
                if waiting {
                    log::warn!(
                        "the {} processes ended with status 0, but not all of them joined the \
                         job: the program never called jia_init (dsm_runtime::init), so they ran \
                         as separate processes, not as one DSM job",
                        w.children.len()
                    );
                }
                return Ok(());
            }
            Ok(_) if rv_thread.is_some() => {
                if let Some(f) = ended_before_joining(&mut w) {
                    return Err(end_for(&mut w, f));
                }
                wait_for_an_exit(w.children, &exits);
            }
            Ok(_) => wait_for_an_exit(w.children, &exits),
            Err(
                e @ JobFailure::Node {
                    peer_failed: true,
                    node,
                    ..
                },
            ) => {
                // A node that ended because it lost another says which: name that one (a node
                // stopped with SIGSTOP never ends by itself, and its survivors end first).
                if let Some(f) = first_failure(&mut w, node) {
                    return Err(end_for(&mut w, f));
                }
                if echo.is_none() {
                    echo = Some((e, Instant::now()));
                }
            }
            Err(e) => return Err(end_for(&mut w, e)),
        }
    }
}

/// While the rendezvous waits: a node that ended with status 0 before it joined, once another
/// node has joined (a program that never calls jia_init on any node runs as separate processes,
/// see `watch`). The others would wait for it until the join timeout, named as not started.
fn ended_before_joining(w: &mut Watched<'_>) -> Option<JobFailure> {
    // Node 0 that started its job itself is in jia_init: it joins, if it has not yet.
    let hellos = w.hellos.as_ref()?.load(Ordering::SeqCst);
    if hellos == 0 && !w.in_node0 {
        return None;
    }
    let k = (0..w.children.len()).find(|&k| {
        let node = w.nodes[k];
        matches!(ended(&mut w.children[k], w.remote[node]), Ok(Some(e)) if e.success())
    })?;
    let node = w.nodes[k];
    Some(JobFailure::Node {
        node,
        host: w.spec.hosts[node].address.clone(),
        how: "exited with status 0 before it joined the job (its program returned from main or \
              called exit before jia_init), while the other nodes meet in jia_init"
            .into(),
        peer_failed: false,
        code: 1,
    })
}

/// Ends the job for `failure`: tells every node, gives them a moment to end by themselves, then
/// ends those left.
fn end_for(w: &mut Watched<'_>, failure: JobFailure) -> JobFailure {
    let line = match &failure {
        JobFailure::Node { node, how, .. } => Line::Lost {
            node: *node as u16,
            how: how.clone(),
        }
        .encode(),
        // A node 0 that watches says it as its own end; under dsmrun, which says it itself, the
        // nodes end without a word (their output flushed: a printf before the hang is kept).
        JobFailure::Stuck(what) => Line::Stuck(what.clone()).encode(),
        _ => String::new(),
    };
    // A node 0 that watches its own job is told last, once the others have ended: it ends this
    // process, the watcher with it.
    let first = usize::from(w.in_node0).min(w.control.len());
    let (own, others) = w.control.split_at_mut(first);
    tell(others, &line);
    wait_a_moment(w.children, Duration::from_secs(2));
    end_all(w.children);
    if w.in_node0 {
        crate::door::end::end_peer_failure_with(i32::from(failure.exit_code()));
    }
    tell(own, &line);
    failure
}

/// How a node's process ended, as its watcher knows it.
#[derive(Clone, Copy, Debug)]
enum Exit {
    /// The node's own status. A remote node's is its remote shell's, through ssh: 128 + N
    /// there is a node killed by signal N, told as that signal.
    Node(ExitStatus),
    /// A remote node's ssh client was killed by this signal: how the node itself ended is not
    /// known here (ssh passes on a remote signal as a status, never as its own death).
    SshKilled(i32),
}

impl Exit {
    fn success(self) -> bool {
        matches!(self, Exit::Node(s) if s.success())
    }

    /// It ended because another node failed.
    fn for_another(self) -> bool {
        matches!(self, Exit::Node(s) if s.code() == Some(crate::door::end::EXIT_PEER_FAILED))
    }

    /// How it ended, in words; `local_pid`: the process, if it ran on this host.
    fn describe(self, local_pid: Option<u32>) -> String {
        match self {
            // ssh's own status when it fails (its host unreachable, or silent past its
            // keep-alives) is also a status a program may end with.
            Exit::Node(s) if local_pid.is_none() && s.code() == Some(255) => {
                "exited with status 255 (or its ssh gave up on the host: ssh's own status for a \
                 failure is 255 too)"
                    .into()
            }
            Exit::Node(s) => describe(s, local_pid),
            Exit::SshKilled(sig) => format!(
                "is out of reach: its ssh client was killed by signal {sig} ({}), so how the node \
                 ended is not known",
                signals::name(sig)
            ),
        }
    }

    /// Status 255: ssh's own for a failure of its (a remote node's).
    fn ssh_failure(self) -> bool {
        matches!(self, Exit::Node(s) if s.code() == Some(255))
    }

    /// dsmrun's exit status for it (a node out of reach is lost: 1).
    fn status_code(self) -> u8 {
        match self {
            Exit::Node(s) => status_code(s),
            Exit::SshKilled(_) => 1,
        }
    }
}

/// How a node's process ended, `Ok(None)` while it runs (see [`Exit`]).
fn ended(c: &mut Child, remote: bool) -> std::io::Result<Option<Exit>> {
    use std::os::unix::process::ExitStatusExt;
    let status = c.try_wait()?;
    Ok(status.map(|s| match (s.code(), s.signal()) {
        (Some(code @ 129..=192), _) if remote => Exit::Node(ExitStatus::from_raw(code - 128)),
        (None, Some(sig)) if remote => Exit::SshKilled(sig),
        _ => Exit::Node(s),
    }))
}

/// Sleeps until a running child ends, at most 50 ms (the loop also watches the rendezvous and
/// interrupts), or 1 ms where the kernel gave no exit descriptors.
fn wait_for_an_exit(children: &mut [Child], exits: &[Option<std::os::fd::OwnedFd>]) {
    use std::os::fd::AsFd;
    let mut running = Vec::new();
    for (c, fd) in children.iter_mut().zip(exits) {
        if matches!(c.try_wait(), Ok(None)) {
            match fd {
                Some(fd) => running.push(fd.as_fd()),
                None => return std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
    if !running.is_empty() {
        crate::sys::wait_readable(&running, Duration::from_millis(50));
    }
}

/// Checks the children (node ids `nodes`): `Ok(true)` when all ended well, an error naming the
/// first that failed. With the nodes' control connections (`control`, in node order; empty
/// before the rendezvous is done), a node that exits with status 0 must have said it left the job
/// (`DSM1 BYE`): one that returned from main or called exit without jia_exit is named at once.
fn poll_children(
    spec: &JobSpec,
    nodes: &[usize],
    children: &mut [Child],
    remote: &[bool],
    known: Option<&JobFailure>,
    control: &mut [std::net::TcpStream],
    words: &mut Heard,
) -> Result<bool, JobFailure> {
    let mut all_done = true;
    for (c, &i) in children.iter_mut().zip(nodes) {
        match ended(c, remote[i]) {
            Ok(Some(exit)) if exit.success() => {
                if i < control.len() && !words.said_goodbye(control, i) {
                    return Err(JobFailure::Node {
                        node: i,
                        host: spec.hosts[i].address.clone(),
                        how: "exited with status 0 without leaving the job (a C program \
                              called _exit, or replaced itself with exec, before jia_exit; a \
                              Rust program left main or called process::exit before Dsm::exit)"
                            .into(),
                        peer_failed: false,
                        code: 1,
                    });
                }
            }
            // Once one echo of another node's failure is known, look past the others.
            Ok(Some(exit)) if known.is_some() && exit.for_another() => {}
            // Before the job started (no control stream yet: not every node joined), a remote
            // node's 255 is its ssh failing to reach the host: a job that could not start.
            Ok(Some(exit)) if remote[i] && control.is_empty() && exit.ssh_failure() => {
                return Err(JobFailure::Node {
                    node: i,
                    host: spec.hosts[i].address.clone(),
                    how: "ended with status 255 before it joined the job: its ssh could not \
                          reach the host or log in (ssh's status for a failure of its own; its \
                          message is above)"
                        .into(),
                    peer_failed: false,
                    code: 2,
                });
            }
            Ok(Some(exit)) => {
                return Err(JobFailure::Node {
                    node: i,
                    host: spec.hosts[i].address.clone(),
                    how: exit.describe((!remote[i]).then(|| c.id())),
                    peer_failed: exit.for_another(),
                    code: exit.status_code(),
                });
            }
            Ok(None) => all_done = false,
            Err(e) => return Err(JobFailure::Start(format!("waiting for node {i}: {e}"))),
        }
    }
    Ok(all_done)
}

/// The node at the start of a chain of blame: node `first` ended because it lost another, which
/// may itself have ended for losing a third... The node found at the end (one that did not end
/// for another's sake: it was stopped, died, or its host is gone) is the one that failed.
fn first_failure(w: &mut Watched<'_>, first: usize) -> Option<JobFailure> {
    let (mut node, mut why) = w.words.blamed(w.control, first)?;
    let mut reporter = first;
    let mut seen = vec![first];
    let child_of = |node: usize| w.nodes.iter().position(|&i| i == node);
    'chain: loop {
        while node < w.spec.hosts.len() && !seen.contains(&node) {
            let ended_for_another = child_of(node).is_some_and(|c| {
                matches!(ended(&mut w.children[c], w.remote[node]), Ok(Some(e)) if e.for_another())
            });
            let Some((next, next_why)) = ended_for_another
                .then(|| w.words.blamed(w.control, node))
                .flatten()
            else {
                break;
            };
            seen.push(node);
            reporter = node;
            (node, why) = (next, next_why);
        }
        let spec = w.spec;
        if node >= spec.hosts.len() {
            return None;
        }
        // The node blamed may have died a moment ago and not be reaped yet (a survivor's word
        // can come first): how it ended says more than the survivor's "connection failed". One
        // that ended the job with an error is on its way out, after up to 500 ms waiting for the
        // others to acknowledge the error.
        let reaped_within = match why.starts_with("error: ") {
            true => Duration::from_secs(2),
            false => Duration::from_millis(500),
        };
        let started = Instant::now();
        let mut deadline = started + reaped_within;
        while let Some(c) = child_of(node) {
            // A node killed a moment ago closes its sockets before it has torn down its memory,
            // which on a busy machine can outlast the wait (a kill -9 was once told as "lost:
            // connection failed"): while it is visibly on its way out, wait for it, 10 s at most.
            if Instant::now() >= deadline
                && started.elapsed() < Duration::from_secs(10)
                && crate::sys::process_exiting(w.children[c].id())
            {
                deadline = Instant::now() + Duration::from_millis(50);
            }
            match ended(&mut w.children[c], w.remote[node]) {
                Ok(Some(exit)) if !exit.success() && !exit.for_another() => {
                    return Some(JobFailure::Node {
                        node,
                        host: spec.hosts[node].address.clone(),
                        how: exit.describe((!w.remote[node]).then(|| w.children[c].id())),
                        peer_failed: false,
                        code: exit.status_code(),
                    });
                }
                // It ended for another's sake after all (a node that left on hearing that a
                // third failed: its survivors saw only its connection close, on a busy machine
                // before it was reaped): its word names the one to blame.
                Ok(Some(exit)) if exit.for_another() && !seen.contains(&node) => {
                    if let Some((next, next_why)) = w.words.blamed(w.control, node) {
                        seen.push(node);
                        reporter = node;
                        (node, why) = (next, next_why);
                        continue 'chain;
                    }
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => break,
            }
        }
        let how = match why.strip_prefix("error: ") {
            Some(text) => {
                format!("ended the job with an error: {text} (reported by node {reporter})")
            }
            None => format!("was lost: {why}, reported by node {reporter}"),
        };
        return Some(JobFailure::Node {
            node,
            host: spec.hosts[node].address.clone(),
            how,
            peer_failed: false,
            code: 1,
        });
    }
}

/// A program started directly (no dsmrun, srun or mpirun) in a directory with a `.jiahosts` of
/// two hosts or more: the job it starts itself, as JIAJIA does (this process becomes node 0 and
/// starts the others, locally or over ssh, with the same program and arguments). `Ok(None)`:
/// no such file, or a launcher started this process.
pub fn job_from_jiahosts() -> Result<Option<JobEnv>, String> {
    if std::env::var_os("DSM_RANK").is_some() || super::cluster::cluster_rank_size().is_some() {
        return Ok(None);
    }
    let path = std::path::Path::new(".jiahosts");
    if !path.exists() {
        return Ok(None);
    }
    let text = crate::config::read_text(path).map_err(|e| e.to_string())?;
    let hosts = crate::config::parse_hosts(".jiahosts", &text, |w| eprintln!("dsm: warning: {w}"))
        .map_err(|e| e.to_string())?;
    if hosts.len() < 2 {
        return Ok(None);
    }
    let (config, stats) = super::node::local_config()?;
    let mut argv = std::env::args();
    let argv0 = argv.next().unwrap_or_default();
    let program = std::env::current_exe().map_or(argv0, |p| p.display().to_string());
    let spec = JobSpec {
        program,
        args: argv.collect(),
        remote_program: None,
        hosts,
        config,
        stats,
        stats_json: std::env::var("DSM_STATS_JSON").ok(),
        tag_output: false,
        output_dir: None,
        join_timeout: Duration::from_secs(60),
        env: Vec::new(),
    };
    start_as_node0(&spec).map(Some).map_err(|e| e.to_string())
}

/// JIAJIA's way: this process becomes node 0 and starts the other nodes of `spec` itself (same
/// program, same arguments). Returns node 0's job; a watcher thread ends this process, and the
/// others, if another node fails.
pub fn start_as_node0(spec: &JobSpec) -> Result<JobEnv, JobFailure> {
    let n = spec.hosts.len();
    let p = prepare(spec)?;
    let mut children = Vec::with_capacity(n.saturating_sub(1));
    note_oom_kills();
    crate::door::end::launcher_here();
    // Node 0 is this job's launcher: it adopts what the nodes it starts leave behind (its
    // program then waits on, and may see, those adopted children too), and its exit ends them.
    end_what_this_process_starts();
    adopt_what_the_nodes_leave();
    // Output is not forwarded here: the nodes share this process's terminal (node 0's own output
    // could not be kept apart from the forwarded lines anyway).
    let mut forwarders = Vec::new();
    for i in 1..n {
        match spawn_node(spec, &p, i, false, &mut forwarders) {
            Ok(c) => children.push(c),
            Err(e) => {
                end_all(&mut children);
                return Err(e);
            }
        }
    }
    let env = JobEnv {
        rank: 0,
        size: n as u16,
        cookie: p.cookie,
        rendezvous: p.rv_addr,
        bind: p.binds[0],
        config: spec.config.clone(),
        stats: spec.stats,
        on_host: Some(on_host(spec, &p, 0)),
    };
    let (rv, cookie, timeout) = (
        started_on(spec, p.rv, &p.local),
        p.cookie,
        spec.join_timeout,
    );
    let remote: Vec<bool> = p.local.iter().map(|l| !l).collect();
    let spec = spec.clone();
    // Its threads leave the program's asynchronous signals to the program's threads (they
    // inherit the mask), as the service thread does.
    let _held_off = crate::sys::signals::BlockedSignals::asynchronous();
    std::thread::Builder::new()
        .name("dsm-launcher".into())
        .spawn(move || {
            let _runtime = crate::door::threads::runtime_thread();
            let hellos = Some(rv.hellos());
            let rv_thread = std::thread::spawn(move || {
                let _runtime = crate::door::threads::runtime_thread();
                rv.serve(n as u16, cookie, timeout, Keep::Rank0)
            });
            let nodes: Vec<usize> = (1..n).collect();
            let (mut control, mut words) = (Vec::new(), Heard::new(n));
            let watched = Watched {
                spec: &spec,
                nodes: &nodes,
                children: &mut children,
                remote: &remote,
                control: &mut control,
                words: &mut words,
                in_node0: true,
                hellos,
            };
            match watch(watched, Some(rv_thread), None) {
                Ok(()) => {
                    crate::door::end::verdict_given();
                    OTHERS_ENDED.set(None)
                }
                // Node 0 has been told (DSM1 LOST or STUCK) and ends with the job's status. If
                // it has left the job already and waits in its exit for the others, that wait
                // ends the process (its output flushed first); if it no longer listens
                // otherwise, the process is ended here.
                Err(e) => {
                    let status = i32::from(e.exit_code());
                    OTHERS_ENDED.set(Some((e.to_string(), status)));
                    std::thread::sleep(Duration::from_secs(1));
                    crate::door::end::die(&e.to_string(), status)
                }
            }
        })
        .map_err(|e| JobFailure::Start(format!("launcher thread: {e}")))?;
    // As dsmrun, node 0's process (the job's launcher) ends after the others, with the job's
    // status.
    signals::at_exit(wait_for_the_other_nodes)
        .map_err(|e| JobFailure::Start(format!("atexit: {e}")))?;
    STARTED_ITS_JOB.store(true, Ordering::SeqCst);
    Ok(env)
}

/// The other nodes of a job node 0 started itself have all ended: well (`None`), or the job
/// failed (its verdict and status).
static OTHERS_ENDED: Latch = Latch::new();

/// How the job ended, as its watcher tells node 0's exit: `None` if well, else the verdict and
/// the job's status.
type Ending = Option<(String, i32)>;

/// A value one thread sets and others wait for, with a deadline.
struct Latch {
    set: std::sync::Mutex<Option<Ending>>,
    changed: std::sync::Condvar,
}

impl Latch {
    const fn new() -> Latch {
        Latch {
            set: std::sync::Mutex::new(None),
            changed: std::sync::Condvar::new(),
        }
    }

    fn set(&self, ending: Ending) {
        *self.set.lock().unwrap_or_else(|e| e.into_inner()) = Some(ending);
        self.changed.notify_all();
    }

    /// What was set within `within` (`None`: nothing yet).
    fn wait(&self, within: Duration) -> Option<Ending> {
        let set = self.set.lock().unwrap_or_else(|e| e.into_inner());
        let (set, _) = self
            .changed
            .wait_timeout_while(set, within, |set| set.is_none())
            .unwrap_or_else(|e| e.into_inner());
        set.clone()
    }
}

/// This process is a node 0 that started its job itself: its exit waits for the other nodes.
static STARTED_ITS_JOB: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For an exit that skips the process's exit handlers (`sys::exit_status_at_end`, the race
/// checker's status): a node 0 that started its job itself first waits for the nodes it
/// started, as its handler would, rather than end them mid-exit.
pub(crate) fn before_a_quick_exit() {
    if STARTED_ITS_JOB.load(Ordering::SeqCst) {
        wait_for_the_other_nodes();
    }
}

/// How long node 0, once it left the job, waits for the nodes it started to end.
const OTHERS_END_WITHIN: Duration = Duration::from_secs(60);

/// At the exit of a node 0 that started its job itself: waits for the nodes it started to end
/// (the launcher thread ends this process with the job's status if one fails). A node 0 that
/// ends with an error does not wait: the others learn of it from the transport.
extern "C" fn wait_for_the_other_nodes() {
    if crate::door::end::ending() || crate::door::flags::FORKED.load(Ordering::Relaxed) {
        return;
    }
    match OTHERS_ENDED.wait(OTHERS_END_WITHIN) {
        Some(None) => {}
        // Node 0's own output is flushed: it ran to its end, whatever the others did.
        Some(Some((verdict, status))) => crate::door::end::fatal_flushed(&verdict, status),
        None => crate::door::end::fatal_flushed(
            &format!(
                "the other nodes did not end within {} s of node 0's exit",
                OTHERS_END_WITHIN.as_secs()
            ),
            1,
        ),
    }
}

/// Gives the nodes `grace` to end on their own (after being told of a failure).
fn wait_a_moment(children: &mut [Child], grace: Duration) {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline
        && children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Ends every node still running: SIGTERM, then SIGKILL after a grace period.
fn end_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            signals::kill(c.id(), libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline
        && children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    for c in children.iter_mut() {
        if matches!(c.try_wait(), Ok(None)) {
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}
