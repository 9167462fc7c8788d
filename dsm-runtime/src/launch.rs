//! How a node learns its job: rank, size, cookie and the peers' addresses.
//!
//! The launcher (`dsmrun`, or `jia_init` starting a job itself) runs a small TCP *rendezvous*
//! service and starts every node with these environment variables:
//!
//! | variable | meaning |
//! |---|---|
//! | `DSM_RANK`, `DSM_SIZE` | this node's id and the number of nodes |
//! | `DSM_COOKIE` | the job's random cookie (hex); never printed or logged |
//! | `DSM_RENDEZVOUS` | `ip:port` of the rendezvous service |
//! | `DSM_BIND` | the IP address this node's socket binds to |
//! | `DSM_CONFIG` | the resolved settings, `key=value;...` |
//! | `DSM_STATS` | `1`: node 0 prints the statistics table at exit |
//! | `DSM_STATS_JSON` | a file where node 0 writes every node's statistics as JSON at exit |
//!
//! Each node binds its socket, connects to the rendezvous, says `DSM1 HELLO <cookie> <rank>
//! <addr>`, and once every node has said hello receives `DSM1 PEERS <addr0> <addr1> ...`. A hello
//! with the wrong cookie, a rank out of range or twice is refused.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::config::Config;

/// What a launched node is told.
#[derive(Clone, Debug)]
pub struct JobEnv {
    /// This node.
    pub rank: u16,
    /// Nodes in the job.
    pub size: u16,
    /// The job's cookie.
    pub cookie: u64,
    /// The rendezvous service.
    pub rendezvous: SocketAddr,
    /// Where to bind.
    pub bind: IpAddr,
    /// Settings.
    pub config: Config,
    /// Print statistics at exit.
    pub stats: bool,
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set (a node must be started by dsmrun or jia_init)"))
}

/// Reads the job from the environment; `Ok(None)` when the process was not launched as a node.
pub fn job_env() -> Result<Option<JobEnv>, String> {
    if std::env::var_os("DSM_RANK").is_none() {
        return cluster_job_env();
    }
    let num = |name: &str| -> Result<u16, String> {
        let v = var(name)?;
        v.parse().map_err(|_| format!("{name}={v} is not a number"))
    };
    let rank = num("DSM_RANK")?;
    let size = num("DSM_SIZE")?;
    if size == 0 || rank >= size || size > dsm_core::MAX_NODES {
        return Err(format!(
            "DSM_RANK={rank} DSM_SIZE={size}: need 0 <= rank < size <= {}",
            dsm_core::MAX_NODES
        ));
    }
    let cookie = u64::from_str_radix(&var("DSM_COOKIE")?, 16)
        .map_err(|_| "DSM_COOKIE is not hex".to_string())?;
    let rv = var("DSM_RENDEZVOUS")?;
    let rendezvous = rv
        .parse()
        .map_err(|_| format!("DSM_RENDEZVOUS={rv} is not ip:port"))?;
    let b = var("DSM_BIND")?;
    let bind = b
        .parse()
        .map_err(|_| format!("DSM_BIND={b} is not an IP address"))?;
    let config = Config::from_wire(&std::env::var("DSM_CONFIG").unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let stats = std::env::var("DSM_STATS").is_ok_and(|v| v == "1");
    Ok(Some(JobEnv {
        rank,
        size,
        cookie,
        rendezvous,
        bind,
        config,
        stats,
    }))
}

/// A node joins the job: sends its address, receives everyone's, and the launcher's control
/// channel if it keeps one.
pub fn join(
    env: &JobEnv,
    my_addr: SocketAddr,
    timeout: Duration,
) -> Result<(Vec<SocketAddr>, Option<TcpStream>), String> {
    let fail = |e: std::io::Error| format!("rendezvous with {} failed: {e}", env.rendezvous);
    let stream = TcpStream::connect_timeout(&env.rendezvous, timeout).map_err(fail)?;
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    let mut w = stream.try_clone().map_err(fail)?;
    writeln!(w, "DSM1 HELLO {:016x} {} {}", env.cookie, env.rank, my_addr).map_err(fail)?;
    // Byte by byte: the stream outlives this function as the control channel, so nothing past
    // the line may be buffered away.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut reader = &stream;
    while line.len() < 1 << 20 {
        match reader.read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => line.push(byte[0]),
            Err(e) => return Err(fail(e)),
        }
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let mut words = line.split_whitespace();
    let first = words.next();
    let second = words.next();
    let keep = second == Some("KEEP");
    match (first, second) {
        (Some("DSM1"), Some("PEERS" | "KEEP")) => {
            let peers: Result<Vec<SocketAddr>, _> = words.map(str::parse).collect();
            let peers = peers.map_err(|_| format!("bad peer list from the rendezvous: {line}"))?;
            if peers.len() != usize::from(env.size) {
                return Err(format!(
                    "the rendezvous sent {} peers for a job of {}",
                    peers.len(),
                    env.size
                ));
            }
            let control = if keep {
                stream.set_read_timeout(None).map_err(fail)?;
                stream.set_nonblocking(true).map_err(fail)?;
                Some(stream)
            } else {
                None
            };
            Ok((peers, control))
        }
        (Some("DSM1"), Some("ERROR")) => Err(format!(
            "the rendezvous refused node {}: {}",
            env.rank,
            words.collect::<Vec<_>>().join(" ")
        )),
        _ => Err(format!(
            "no answer from the rendezvous {} within {timeout:?}",
            env.rendezvous
        )),
    }
}

/// The launcher's side: a listening rendezvous service.
pub struct Rendezvous {
    listener: TcpListener,
}

impl Rendezvous {
    /// Listens on `ip` (any port).
    pub fn bind(ip: IpAddr) -> std::io::Result<Rendezvous> {
        Ok(Rendezvous {
            listener: TcpListener::bind(SocketAddr::new(ip, 0))?,
        })
    }

    /// Where nodes should connect.
    pub fn addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts the hellos of `size` nodes of the job with `cookie`, then sends each the peer list.
    /// Connections that are not valid hellos are answered with an error and forgotten.
    ///
    /// With `keep`, the connections stay open as the launcher's control channel and are returned
    /// (node order): the launcher tells the nodes through them which node was lost, and a node
    /// whose channel closes knows its launcher is gone. Without, they are closed.
    pub fn serve(
        self,
        size: u16,
        cookie: u64,
        timeout: Duration,
        keep: bool,
    ) -> Result<Vec<TcpStream>, String> {
        /// How long one connection may take to say its hello, from its accept.
        const HELLO_WITHIN: Duration = Duration::from_secs(5);
        /// The longest hello line.
        const HELLO_BYTES: usize = 256;
        struct Pending {
            stream: TcpStream,
            line: Vec<u8>,
            since: Instant,
        }
        let deadline = Instant::now() + timeout;
        self.listener
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let mut joined: Vec<Option<(SocketAddr, TcpStream)>> = (0..size).map(|_| None).collect();
        // Connections are served side by side, each with its own deadline: a stranger that
        // connects and trickles bytes (or says nothing) delays nobody.
        let mut pending: Vec<Pending> = Vec::new();
        while joined.iter().any(Option::is_none) {
            if Instant::now() > deadline {
                let missing: Vec<String> = joined
                    .iter()
                    .enumerate()
                    .filter(|(_, j)| j.is_none())
                    .map(|(i, _)| i.to_string())
                    .collect();
                return Err(format!(
                    "nodes {} did not join within {timeout:?}",
                    missing.join(", ")
                ));
            }
            let mut busy = false;
            loop {
                match self.listener.accept() {
                    Ok((stream, _)) => {
                        if stream.set_nonblocking(true).is_ok() {
                            pending.push(Pending {
                                stream,
                                line: Vec::new(),
                                since: Instant::now(),
                            });
                        }
                        busy = true;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    // A connection reset before it was accepted, descriptors short for a moment:
                    // the service goes on.
                    Err(_) => break,
                }
            }
            let mut i = 0;
            while i < pending.len() {
                let p = &mut pending[i];
                let mut buf = [0u8; 64];
                let done = loop {
                    match p.stream.read(&mut buf) {
                        Ok(0) => break Some(false),
                        Ok(n) => {
                            busy = true;
                            p.line.extend_from_slice(&buf[..n]);
                            if p.line.contains(&b'\n') {
                                break Some(true);
                            }
                            if p.line.len() > HELLO_BYTES {
                                break Some(false);
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break None,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(_) => break Some(false),
                    }
                };
                let done = match done {
                    None if p.since.elapsed() > HELLO_WITHIN => Some(false),
                    d => d,
                };
                let Some(complete) = done else {
                    i += 1;
                    continue;
                };
                let mut p = pending.swap_remove(i);
                let end = p
                    .line
                    .iter()
                    .position(|&b| b == b'\n')
                    .unwrap_or(p.line.len());
                let line = String::from_utf8_lossy(&p.line[..end]).into_owned();
                let w: Vec<&str> = line.split_whitespace().collect();
                let parsed = match (complete, w.as_slice()) {
                    (true, ["DSM1", "HELLO", c, r, a]) => (|| {
                        u64::from_str_radix(c, 16).ok().filter(|&c| c == cookie)?;
                        let r: u16 = r.parse().ok().filter(|&r| r < size)?;
                        let a: SocketAddr = a.parse().ok()?;
                        Some((r, a))
                    })(),
                    _ => None,
                };
                match parsed {
                    Some((r, a)) if joined[usize::from(r)].is_none() => {
                        let _ = p.stream.set_nonblocking(false);
                        joined[usize::from(r)] = Some((a, p.stream));
                    }
                    _ => {
                        let _ = p.stream.write_all(b"DSM1 ERROR bad hello\n");
                    }
                }
            }
            if !busy {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let list: Vec<String> = joined
            .iter()
            .flatten()
            .map(|(a, _)| a.to_string())
            .collect();
        let word = if keep { "KEEP" } else { "PEERS" };
        let msg = format!("DSM1 {word} {}\n", list.join(" "));
        let mut streams = Vec::with_capacity(joined.len());
        for (_, mut s) in joined.into_iter().flatten() {
            let _ = s.write_all(msg.as_bytes());
            if keep {
                streams.push(s);
            }
        }
        Ok(streams)
    }
}

/// Rank and size given by a cluster launcher: Slurm's `srun`, Open MPI's or MPICH's `mpirun`.
pub fn cluster_rank_size() -> Option<(u16, u16, &'static str)> {
    const PAIRS: [(&str, &str, &str); 3] = [
        ("SLURM_PROCID", "SLURM_NTASKS", "srun"),
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "mpirun (Open MPI)",
        ),
        ("PMI_RANK", "PMI_SIZE", "mpirun (PMI)"),
    ];
    PAIRS.iter().find_map(|(r, s, who)| {
        let rank = std::env::var(r).ok()?.parse().ok()?;
        let size = std::env::var(s).ok()?.parse().ok()?;
        Some((rank, size, *who))
    })
}

/// 64 unpredictable bits (from `/dev/urandom`; without it, time and pid, still enough to keep jobs
/// apart), odd so that it is never 0: a job's cookie, a private file's name.
pub(crate) fn random_cookie() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_le_bytes(b) | 1;
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)) | 1
}

/// The job's id as its cluster launcher gives it (`DSM_JOB_ID` first): Slurm's job and step,
/// Open MPI's PMIx namespace or job id, MPICH's (Hydra's) job id; `job` with none.
pub fn cluster_job_id() -> String {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    var("DSM_JOB_ID")
        .or_else(|| {
            var("SLURM_JOB_ID").map(|j| format!("{j}.{}", var("SLURM_STEP_ID").unwrap_or_default()))
        })
        .or_else(|| var("PMIX_NAMESPACE"))
        .or_else(|| var("OMPI_MCA_ess_base_jobid"))
        .or_else(|| var("PMI_JOBID"))
        .or_else(|| var("PMI_KVSNAME"))
        .unwrap_or_else(|| "job".into())
        // A file name part: keep it to characters that cannot climb out of the directory.
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The file through which rank 0 publishes the rendezvous address and cookie to the other ranks
/// (on a file system every rank sees, like the working directory of an `srun` job).
pub fn rendezvous_file() -> std::path::PathBuf {
    if let Ok(f) = std::env::var("DSM_RENDEZVOUS_FILE") {
        return f.into();
    }
    format!(".dsm-rendezvous-{}", cluster_job_id()).into()
}

/// Rank 0 publishes the rendezvous: the line goes to a new file of a name nobody else can guess
/// (created exclusively, without following links, mode 0600), which then replaces `file` in one
/// rename. Whatever stood at `file` (another user's file, a link to one of ours) is replaced, not
/// written through.
fn publish_rendezvous(file: &std::path::Path, line: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(format!(
        ".{}.{:016x}.tmp",
        std::process::id(),
        random_cookie()
    ));
    let tmp = std::path::PathBuf::from(tmp);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        // The mode whatever the umask.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        f.write_all(line.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reads a rendezvous file if it is this job's: a regular file (not a link) of this user's,
/// readable by nobody else, written within the last 5 minutes, naming job `job`. Returns the
/// rendezvous address and cookie, or why the file is not to be trusted.
fn read_rendezvous(file: &std::path::Path, job: &str) -> Result<(SocketAddr, u64), String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    let me = crate::sys::euid();
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.uid() != me {
        return Err(format!(
            "owned by uid {}, not by this job's user ({me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "mode {:o}: others may read it",
            meta.mode() & 0o777
        ));
    }
    let fresh = meta
        .modified()
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age < Duration::from_secs(300)));
    if !fresh {
        return Err("older than 5 minutes (a job before this one)".into());
    }
    let mut text = String::new();
    (&f).take(512)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let w: Vec<&str> = text.split_whitespace().collect();
    match w.as_slice() {
        ["DSM1", j, addr, cookie] if *j == job => {
            match (addr.parse(), u64::from_str_radix(cookie, 16)) {
                (Ok(a), Ok(c)) => Ok((a, c)),
                _ => Err("malformed".into()),
            }
        }
        ["DSM1", j, ..] => Err(format!("written for job {j}, not {job}")),
        _ => Err("malformed".into()),
    }
}

/// The settings of a job started without a launcher: `./.jiaconf`, then `DSM_<KEY>` variables;
/// and whether `DSM_STATS=1` asks for the statistics table.
pub fn local_config() -> Result<(Config, bool), String> {
    let mut c = Config::default();
    let notices = c
        .apply_file(std::path::Path::new(".jiaconf"), false)
        .map_err(|e| e.to_string())?;
    for n in notices {
        eprintln!("dsm: notice: {n}");
    }
    c.apply_env().map_err(|e| e.to_string())?;
    Ok((c, std::env::var("DSM_STATS").is_ok_and(|v| v == "1")))
}

/// This machine's address as others see it: `DSM_BIND`, else the host name's first non-loopback
/// IPv4 address, else loopback.
fn my_address() -> IpAddr {
    if let Some(ip) = std::env::var("DSM_BIND").ok().and_then(|b| b.parse().ok()) {
        return ip;
    }
    use std::net::ToSocketAddrs;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    (host, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(|a| a.is_ipv4() && !a.ip().is_loopback()))
        .map_or(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), |a| a.ip())
}

/// The IP address of this machine that routes to `to`.
pub fn route_to(to: IpAddr) -> Option<IpAddr> {
    let s = std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    s.connect((to, 9)).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// A job started by a cluster launcher: rank 0 runs the rendezvous and publishes it in
/// [`rendezvous_file`]; the other ranks read it.
fn cluster_job_env() -> Result<Option<JobEnv>, String> {
    let Some((rank, size, who)) = cluster_rank_size() else {
        return Ok(None);
    };
    if size <= 1 {
        return Ok(None);
    }
    if rank >= size || size > dsm_core::MAX_NODES {
        return Err(format!(
            "{who} gave rank {rank} of {size}: need rank < size <= {}",
            dsm_core::MAX_NODES
        ));
    }
    let (config, stats) = local_config()?;
    let file = rendezvous_file();
    let timeout = Duration::from_secs(120);
    let (rendezvous, cookie) = if rank == 0 {
        let cookie = random_cookie();
        let rv = Rendezvous::bind(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
            .map_err(|e| format!("rendezvous: {e}"))?;
        let addr = SocketAddr::new(my_address(), rv.addr().map_err(|e| e.to_string())?.port());
        let job = cluster_job_id();
        publish_rendezvous(&file, &format!("DSM1 {job} {addr} {cookie:016x}\n"))
            .map_err(|e| format!("writing {}: {e}", file.display()))?;
        let published = file.clone();
        std::thread::Builder::new()
            .name("dsm-rendezvous".into())
            .spawn(move || {
                let served = rv.serve(size, cookie, timeout, false);
                // Every rank has read it (or the job failed): it has served its purpose.
                let _ = std::fs::remove_file(&published);
                if let Err(e) = served {
                    eprintln!("dsm node 0: error: {e}");
                    std::process::exit(1);
                }
            })
            .map_err(|e| e.to_string())?;
        (addr, cookie)
    } else {
        read_rendezvous_file(&file, timeout)?
    };
    let bind = route_to(rendezvous.ip()).unwrap_or_else(my_address);
    Ok(Some(JobEnv {
        rank,
        size,
        cookie,
        rendezvous,
        bind,
        config,
        stats,
    }))
}

/// Waits for rank 0's rendezvous file of this job ([`read_rendezvous`]) and parses it.
fn read_rendezvous_file(
    file: &std::path::Path,
    timeout: Duration,
) -> Result<(SocketAddr, u64), String> {
    let deadline = Instant::now() + timeout;
    let job = cluster_job_id();
    loop {
        let why = match read_rendezvous(file, &job) {
            Ok(found) => return Ok(found),
            Err(why) => why,
        };
        if Instant::now() > deadline {
            return Err(format!(
                "rank 0 did not publish {} within {timeout:?} (the file there: {why})",
                file.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A rendezvous file is trusted only if it is this user's, private, a regular file, and
    /// this job's; publishing replaces a link instead of writing through it.
    #[test]
    fn only_this_jobs_private_rendezvous_file_is_trusted() {
        let dir = std::env::temp_dir().join(format!("dsm-rv-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(".dsm-rendezvous-j1");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, &file).unwrap();
        assert!(
            read_rendezvous(&file, "j1").is_err(),
            "a link is not trusted"
        );
        publish_rendezvous(&file, "DSM1 j1 127.0.0.1:5000 00000000000000ab\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let mode = std::fs::symlink_metadata(&file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            read_rendezvous(&file, "j1"),
            Ok(("127.0.0.1:5000".parse().unwrap(), 0xab))
        );
        let other_job = read_rendezvous(&file, "j2").unwrap_err();
        assert!(
            other_job.contains("written for job j1, not j2"),
            "{other_job}"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let open = read_rendezvous(&file, "j1").unwrap_err();
        assert!(open.contains("mode 644"), "{open}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        if crate::sys::euid() == 0 {
            // As root, hand the file to another user: no longer the job owner's.
            std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
            let foreign = read_rendezvous(&file, "j1").unwrap_err();
            assert!(foreign.contains("owned by uid 65534"), "{foreign}");
        }
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
