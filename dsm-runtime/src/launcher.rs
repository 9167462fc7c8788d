//! Starting a job: the nodes as child processes (local) or over ssh (remote hosts), the
//! rendezvous, and watching them until they all end.
//!
//! A node that exits non-zero or dies ends the job: the launcher names it, ends the others and
//! exits non-zero. An interrupt (Ctrl-C) ends every node.

use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::{Config, Host};
use crate::launch::Rendezvous;
use crate::sys::signals;

/// What to run, where.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// The program and its arguments.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// One host per node (node i runs on `hosts[i]`).
    pub hosts: Vec<Host>,
    /// Resolved settings.
    pub config: Config,
    /// Node 0 prints the statistics table at exit.
    pub stats: bool,
    /// Prefix each output line with `[node i]`.
    pub tag_output: bool,
    /// Give up if the nodes have not all joined after this long.
    pub join_timeout: Duration,
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
    },
    /// The launcher was interrupted.
    #[error("interrupted by signal {0}; all nodes ended")]
    Interrupted(i32),
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

fn resolve(host: &str) -> Result<IpAddr, String> {
    (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host `{host}`: {e}"))?
        .map(|a| a.ip())
        .find(IpAddr::is_ipv4)
        .ok_or_else(|| format!("host `{host}` has no IPv4 address"))
}

fn random_cookie() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_le_bytes(b) | 1;
        }
    }
    // No /dev/urandom: time and pid, still unpredictable enough to keep jobs apart.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)) | 1
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!(
            "was killed by signal {s}{}",
            if s == 9 { " (SIGKILL)" } else { "" }
        ),
        _ => "ended abnormally".into(),
    }
}

fn forward(stream: impl Read + Send + 'static, node: usize, to_stderr: bool) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if to_stderr {
                eprintln!("[node {node}] {line}");
            } else {
                println!("[node {node}] {line}");
            }
        }
    });
}

/// Runs the job to its end.
pub fn run(spec: &JobSpec) -> Result<(), JobFailure> {
    let n = spec.hosts.len();
    let local: Vec<bool> = spec.hosts.iter().map(|h| is_local(&h.address)).collect();
    let all_local = local.iter().all(|&l| l);
    let binds: Vec<IpAddr> = spec
        .hosts
        .iter()
        .map(|h| resolve(&h.address))
        .collect::<Result<_, _>>()
        .map_err(JobFailure::Start)?;
    // The rendezvous listens where every node can reach it.
    let (rv_bind, rv_advertise) = if all_local {
        (
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        )
    } else {
        let remote = binds
            .iter()
            .zip(&local)
            .find(|(_, l)| !**l)
            .map(|(a, _)| *a)
            .unwrap_or(binds[0]);
        let probe = UdpSocket::bind("0.0.0.0:0").and_then(|s| s.connect((remote, 9)).map(|_| s));
        let mine = probe
            .and_then(|s| s.local_addr())
            .map_err(|e| JobFailure::Start(format!("no route to {remote}: {e}")))?;
        (IpAddr::V4(Ipv4Addr::UNSPECIFIED), mine.ip())
    };
    let rv =
        Rendezvous::bind(rv_bind).map_err(|e| JobFailure::Start(format!("rendezvous: {e}")))?;
    let rv_addr = SocketAddr::new(
        rv_advertise,
        rv.addr()
            .map_err(|e| JobFailure::Start(e.to_string()))?
            .port(),
    );
    let cookie = random_cookie();
    let interrupted = signals::catch_interrupts();

    let cwd = std::env::current_dir()
        .map_err(|e| JobFailure::Start(format!("current directory: {e}")))?;
    let mut children: Vec<Child> = Vec::with_capacity(n);
    for i in 0..n {
        let env: Vec<(String, String)> = vec![
            ("DSM_RANK".into(), i.to_string()),
            ("DSM_SIZE".into(), n.to_string()),
            ("DSM_COOKIE".into(), format!("{cookie:016x}")),
            ("DSM_RENDEZVOUS".into(), rv_addr.to_string()),
            ("DSM_BIND".into(), binds[i].to_string()),
            ("DSM_CONFIG".into(), spec.config.to_wire()),
            (
                "DSM_STATS".into(),
                if spec.stats { "1".into() } else { "0".into() },
            ),
        ];
        let mut cmd = if local[i] {
            let mut c = Command::new(&spec.program);
            c.args(&spec.args).envs(env);
            c
        } else {
            let h = &spec.hosts[i];
            let mut remote = format!("cd '{}' && env", cwd.display());
            for (k, v) in &env {
                remote.push_str(&format!(" {k}='{v}'"));
            }
            remote.push_str(&format!(" '{}'", spec.program));
            for a in &spec.args {
                remote.push_str(&format!(" '{}'", a.replace('\'', "'\\''")));
            }
            let mut c = Command::new("ssh");
            c.args([
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=accept-new",
            ]);
            if let Some(u) = &h.user {
                c.args(["-l", u]);
            }
            c.arg(&h.address).arg(remote);
            c
        };
        if spec.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        match cmd.spawn() {
            Ok(mut child) => {
                if spec.tag_output {
                    if let Some(o) = child.stdout.take() {
                        forward(o, i, false);
                    }
                    if let Some(e) = child.stderr.take() {
                        forward(e, i, true);
                    }
                }
                children.push(child);
            }
            Err(e) => {
                end_all(&mut children);
                let what = if local[i] {
                    spec.program.clone()
                } else {
                    "ssh".into()
                };
                return Err(JobFailure::Start(format!(
                    "cannot start node {i} ({what}): {e}"
                )));
            }
        }
    }
    let rv_thread = {
        let timeout = spec.join_timeout;
        std::thread::spawn(move || rv.serve(n as u16, cookie, timeout))
    };
    let mut rv_thread = Some(rv_thread);
    let mut done = vec![false; n];
    loop {
        let sig = interrupted.load(Ordering::SeqCst);
        if sig != 0 {
            end_all(&mut children);
            return Err(JobFailure::Interrupted(sig));
        }
        if rv_thread.as_ref().is_some_and(|t| t.is_finished()) {
            if let Some(Ok(Err(e))) = rv_thread.take().map(|t| t.join()) {
                end_all(&mut children);
                return Err(JobFailure::Start(e));
            }
        }
        for i in 0..n {
            if done[i] {
                continue;
            }
            match children[i].try_wait() {
                Ok(Some(status)) if status.success() => done[i] = true,
                Ok(Some(status)) => {
                    end_all(&mut children);
                    return Err(JobFailure::Node {
                        node: i,
                        host: spec.hosts[i].address.clone(),
                        how: describe(status),
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    end_all(&mut children);
                    return Err(JobFailure::Start(format!("waiting for node {i}: {e}")));
                }
            }
        }
        if done.iter().all(|&d| d) {
            // Let the output threads print the last lines.
            std::thread::sleep(Duration::from_millis(20));
            return Ok(());
        }
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
