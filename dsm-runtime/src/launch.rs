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
//!
//! Each node binds its socket, connects to the rendezvous, says `DSM1 HELLO <cookie> <rank>
//! <addr>`, and once every node has said hello receives `DSM1 PEERS <addr0> <addr1> ...`. A hello
//! with the wrong cookie, a rank out of range or twice is refused.

use std::io::{BufRead, BufReader, Write};
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
        return Ok(None);
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

/// A node joins the job: sends its address, receives everyone's.
pub fn join(
    env: &JobEnv,
    my_addr: SocketAddr,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, String> {
    let fail = |e: std::io::Error| format!("rendezvous with {} failed: {e}", env.rendezvous);
    let stream = TcpStream::connect_timeout(&env.rendezvous, timeout).map_err(fail)?;
    stream.set_read_timeout(Some(timeout)).map_err(fail)?;
    let mut w = stream.try_clone().map_err(fail)?;
    writeln!(w, "DSM1 HELLO {:016x} {} {}", env.cookie, env.rank, my_addr).map_err(fail)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(fail)?;
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("DSM1"), Some("PEERS")) => {
            let peers: Result<Vec<SocketAddr>, _> = words.map(str::parse).collect();
            let peers = peers.map_err(|_| format!("bad peer list from the rendezvous: {line}"))?;
            if peers.len() != usize::from(env.size) {
                return Err(format!(
                    "the rendezvous sent {} peers for a job of {}",
                    peers.len(),
                    env.size
                ));
            }
            Ok(peers)
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
    pub fn serve(
        self,
        size: u16,
        cookie: u64,
        timeout: Duration,
    ) -> Result<Vec<SocketAddr>, String> {
        let deadline = Instant::now() + timeout;
        self.listener
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let mut joined: Vec<Option<(SocketAddr, TcpStream)>> = (0..size).map(|_| None).collect();
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
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
                Err(e) => return Err(format!("rendezvous accept failed: {e}")),
            };
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut line = String::new();
            let Ok(reader) = stream.try_clone() else {
                continue;
            };
            if BufReader::new(reader)
                .take(256)
                .read_line(&mut line)
                .is_err()
            {
                continue;
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            let parsed = match w.as_slice() {
                ["DSM1", "HELLO", c, r, a] => (|| {
                    let c = u64::from_str_radix(c, 16).ok().filter(|&c| c == cookie)?;
                    let r: u16 = r.parse().ok().filter(|&r| r < size)?;
                    let a: SocketAddr = a.parse().ok()?;
                    Some((c, r, a))
                })(),
                _ => None,
            };
            let mut s = stream;
            match parsed {
                Some((_, r, a)) if joined[usize::from(r)].is_none() => {
                    joined[usize::from(r)] = Some((a, s))
                }
                _ => {
                    let _ = writeln!(s, "DSM1 ERROR bad hello");
                }
            }
        }
        let peers: Vec<SocketAddr> = joined.iter().flatten().map(|(a, _)| *a).collect();
        let list: Vec<String> = peers.iter().map(ToString::to_string).collect();
        let msg = format!("DSM1 PEERS {}\n", list.join(" "));
        for (_, mut s) in joined.into_iter().flatten() {
            let _ = s.write_all(msg.as_bytes());
        }
        Ok(peers)
    }
}

use std::io::Read as _;
