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
//! | `DSM_LOCAL_RANK`, `DSM_LOCAL_SIZE` | this node's index among the nodes on its host, and their number (for `bind_to`) |
//!
//! Each node binds its socket, connects to the rendezvous, says `DSM1 HELLO <cookie> <rank>
//! <addr> <transport>`, and once every node has said hello receives `DSM1 PEERS <addr0> <addr1>
//! ...`. A hello with the wrong cookie, a rank out of range or twice is refused; one of another
//! transport than the first node's ends the job, said to every node.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use super::wire::{Line, PeersWord};
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
    /// This node's index among the nodes its launcher started on its host, and their number
    /// (`None`: another launcher, such as Slurm or mpirun, placed it and binds it if asked).
    pub on_host: Option<(usize, usize)>,
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set (a node must be started by dsmrun or jia_init)"))
}

/// Reads the job dsmrun (or a self-launching node 0) gave this node from the environment
/// (`DSM_RANK`, `DSM_SIZE`...: see [`super::job_env`]).
pub(super) fn launched_env() -> Result<Option<JobEnv>, String> {
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
    let on_host = match (
        std::env::var("DSM_LOCAL_RANK"),
        std::env::var("DSM_LOCAL_SIZE"),
    ) {
        (Ok(r), Ok(s)) => match (r.parse::<usize>(), s.parse::<usize>()) {
            (Ok(r), Ok(s)) if r < s => Some((r, s)),
            _ => {
                return Err(format!(
                    "DSM_LOCAL_RANK={r} DSM_LOCAL_SIZE={s}: need 0 <= rank < size"
                ));
            }
        },
        _ => None,
    };
    Ok(Some(JobEnv {
        rank,
        size,
        cookie,
        rendezvous,
        bind,
        config,
        stats,
        on_host,
    }))
}

/// A node's channel to whoever watches its job (see [`super::rendezvous::Keep`]).
#[derive(Debug)]
pub struct Control {
    /// The connection, non-blocking.
    pub stream: TcpStream,
    /// A launcher outside the job watches (dsmrun): the channel closing means it is gone.
    /// Otherwise rank 0 does, and the channel closes when rank 0 ends.
    pub launcher_outside: bool,
    /// Rank 0 watches and started this node itself (a `.jiahosts` self-launch): it waits for
    /// the nodes it started at its normal exit, so the channel closing before this node left
    /// the job means node 0 died. (Under srun or mpirun, rank 0 may end first.)
    pub started_by_rank0: bool,
}

/// A node joins the job: sends its address, receives everyone's, and the control channel if
/// the rendezvous keeps one.
pub fn join(
    env: &JobEnv,
    my_addr: SocketAddr,
    timeout: Duration,
) -> Result<(Vec<SocketAddr>, Option<Control>), String> {
    let fail = |e: std::io::Error| format!("rendezvous with {} failed: {e}", env.rendezvous);
    // A signal of the program's (an interval timer started before jia_init) interrupts the
    // connect and the reads, which no SA_RESTART restarts (a socket with a timeout): they are
    // made again, within the one deadline.
    let deadline = std::time::Instant::now() + timeout;
    let interrupted = |e: &std::io::Error| {
        e.kind() == std::io::ErrorKind::Interrupted && std::time::Instant::now() < deadline
    };
    let stream = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match TcpStream::connect_timeout(&env.rendezvous, left.max(Duration::from_millis(1))) {
            Ok(s) => break s,
            Err(e) if interrupted(&e) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(format!(
                    "node {}: the job's rendezvous at {} refused the connection ({e}): the job's \
                     nodes have all joined, or its launcher is gone (a node that replaced itself \
                     with exec and called jia_init again, or a program started by hand with a \
                     job's DSM_ variables, joins nothing: a node's process joins once)",
                    env.rank, env.rendezvous
                ));
            }
            Err(e) => return Err(fail(e)),
        }
    };
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    let mut w = stream.try_clone().map_err(fail)?;
    let hello = Line::Hello {
        cookie: env.cookie,
        rank: env.rank,
        addr: my_addr,
        transport: env.config.comm_type.name().to_string(),
    };
    w.write_all(hello.encode().as_bytes()).map_err(fail)?;
    // Byte by byte: the stream outlives this function as the control channel, so nothing past
    // the line may be buffered away.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut reader = &stream;
    while line.len() < 1 << 20 {
        match reader.read(&mut byte) {
            Ok(0) if line.is_empty() => {
                return Err(format!(
                    "the rendezvous {} closed the connection before every node joined: its \
                     launcher gave up on the job (it says why) or ended",
                    env.rendezvous
                ));
            }
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => line.push(byte[0]),
            Err(e) if interrupted(&e) => {}
            // The socket's read timeout.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!(
                    "no answer from the rendezvous {} within {timeout:?}",
                    env.rendezvous
                ));
            }
            Err(e) => return Err(fail(e)),
        }
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    match Line::parse(&line) {
        Ok(Line::Peers { how, addrs: peers }) => {
            if peers.len() != usize::from(env.size) {
                return Err(format!(
                    "the rendezvous sent {} peers for a job of {}",
                    peers.len(),
                    env.size
                ));
            }
            let control = if how == PeersWord::Peers {
                None
            } else {
                stream.set_read_timeout(None).map_err(fail)?;
                stream.set_nonblocking(true).map_err(fail)?;
                Some(Control {
                    stream,
                    launcher_outside: how == PeersWord::Keep,
                    // Our launcher's code started it (srun and mpirun give no place on a host).
                    started_by_rank0: how == PeersWord::Watch && env.on_host.is_some(),
                })
            };
            Ok((peers, control))
        }
        Ok(Line::Error(why)) => Err(format!("the rendezvous refused node {}: {why}", env.rank)),
        Ok(other) => Err(format!(
            "the rendezvous answered {} with {other:?}, not the peers",
            env.rendezvous
        )),
        Err(e) if !line.is_empty() => Err(format!("bad answer from the rendezvous: {e}")),
        Err(_) => Err(format!(
            "bad answer from the rendezvous {}: an empty line",
            env.rendezvous
        )),
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
pub(crate) fn my_address() -> IpAddr {
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
