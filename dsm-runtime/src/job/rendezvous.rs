//! The rendezvous: the launcher's side of a job's start (a TCP service every node says hello to
//! and learns its peers from) and, for jobs started by srun or mpirun, the file through which rank
//! 0 publishes it to the other ranks.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::wire::{Line, PeersWord};

/// Whether the rendezvous keeps the nodes' connections as the job's control channels, and who
/// watches the job through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Closed once the peers are sent.
    No,
    /// Kept by a launcher outside the job (dsmrun): a node whose channel closes knows its
    /// launcher is gone.
    Launcher,
    /// Kept by rank 0, which watches the job from inside it (srun, mpirun, a `.jiahosts`
    /// self-launch): the channel closes when rank 0 ends, which the transport reports as such.
    Rank0,
}

/// The launcher's side: a listening rendezvous service.
pub struct Rendezvous {
    listener: TcpListener,
    /// Where each node was started, for the words on a node that does not join: `(host, through
    /// ssh)` (empty: not known here).
    hosts: Vec<(String, bool)>,
    /// The nodes that said hello so far.
    hellos: Arc<AtomicUsize>,
}

impl Rendezvous {
    /// Listens on `ip` (any port).
    pub fn bind(ip: IpAddr) -> std::io::Result<Rendezvous> {
        Ok(Rendezvous {
            listener: TcpListener::bind(SocketAddr::new(ip, 0))?,
            hosts: Vec::new(),
            hellos: Arc::default(),
        })
    }

    /// How many nodes have said hello, as [`Rendezvous::serve`] goes on: a watcher that sees a
    /// node end well before it joined knows by it that other nodes meant to meet it.
    pub fn hellos(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.hellos)
    }

    /// Names where each node was started (`(host, through ssh)` by node), for the words on a
    /// node that does not join.
    pub fn started_on(mut self, hosts: Vec<(String, bool)>) -> Rendezvous {
        self.hosts = hosts;
        self
    }

    /// Where nodes should connect.
    pub fn addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts the hellos of `size` nodes of the job with `cookie`, then sends each the peer list.
    /// Connections that are not valid hellos are answered with an error and forgotten.
    ///
    /// Unless `keep` is [`Keep::No`], the connections stay open as the job's control channels
    /// and are returned (node order): the watcher hears through them what every node waits for
    /// and how it ends, and tells the nodes which node was lost. Otherwise they are closed.
    pub fn serve(
        self,
        size: u16,
        cookie: u64,
        timeout: Duration,
        keep: Keep,
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
        // The first node's transport, and its rank.
        let mut transport: Option<(u16, String)> = None;
        let started = Instant::now();
        let missing = |joined: &[Option<(SocketAddr, TcpStream)>]| -> Vec<usize> {
            (0..joined.len()).filter(|&i| joined[i].is_none()).collect()
        };
        // While nodes are missing, say which, after a few seconds and then every ten: a host
        // that does not answer ssh would otherwise give half a minute of silence.
        let mut next_notice = started + Duration::from_secs(5);
        while joined.iter().any(Option::is_none) {
            if Instant::now() > next_notice {
                next_notice += Duration::from_secs(10);
                let waited = missing(&joined);
                log::warn!(
                    "waiting for {} to join the job ({:.0} s of the {} s allowed): {}",
                    node_list(&waited),
                    started.elapsed().as_secs_f64(),
                    timeout.as_secs(),
                    if waited.len() == 1 {
                        "its host may not answer (ssh), or its program has not called jia_init yet"
                    } else {
                        "their hosts may not answer (ssh), or their programs have not called \
                         jia_init yet"
                    }
                );
            }
            if Instant::now() > deadline {
                let late = missing(&joined);
                let through_ssh: Vec<&str> = late
                    .iter()
                    .filter_map(|&k| self.hosts.get(k))
                    .filter(|(_, ssh)| *ssh)
                    .map(|(h, _)| h.as_str())
                    .collect();
                let why = if through_ssh.is_empty() && late.len() == 1 {
                    "its host did not start it (ssh), or its program did not call jia_init in \
                     that time"
                        .to_owned()
                } else if through_ssh.is_empty() {
                    "their hosts did not start them (ssh), or their programs did not call \
                     jia_init in that time"
                        .to_owned()
                } else {
                    format!(
                        "ssh to {} did not start the program there (the host does not answer, \
                         or refuses ssh without a password), or the program did not call \
                         jia_init in that time",
                        through_ssh.join(", ")
                    )
                };
                return Err(format!(
                    "{} did not join within {} s: {why} (dsmrun --join-timeout SECONDS waits \
                     longer)",
                    node_list(&late),
                    timeout.as_secs()
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
                let parsed = match (complete, Line::parse(&line)) {
                    (
                        true,
                        Ok(Line::Hello {
                            cookie: c,
                            rank,
                            addr,
                            transport,
                        }),
                    ) if c == cookie && rank < size => Some((rank, addr, transport)),
                    _ => None,
                };
                match parsed {
                    Some((r, a, t)) if joined[usize::from(r)].is_none() => {
                        // Nodes that run different transports never reach each other: said
                        // to every node now, rather than as peers lost, or a connection
                        // refused, a minute later.
                        if let Some((first, theirs)) = &transport {
                            if *theirs != t {
                                let why = format!(
                                    "node {r} runs {t}, node {first} {theirs}: every node of a \
                                     job runs one transport (comm_type in .jiaconf, \
                                     DSM_COMM_TYPE, or dsmrun's --transport)"
                                );
                                let refusal = Line::Error(why.clone()).encode();
                                let _ = p.stream.write_all(refusal.as_bytes());
                                for (_, s) in joined.iter_mut().flatten() {
                                    let _ = s.write_all(refusal.as_bytes());
                                }
                                return Err(why);
                            }
                        } else {
                            transport = Some((r, t));
                        }
                        let _ = p.stream.set_nonblocking(false);
                        joined[usize::from(r)] = Some((a, p.stream));
                        self.hellos.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => {
                        let refusal = Line::Error("bad hello".into()).encode();
                        let _ = p.stream.write_all(refusal.as_bytes());
                    }
                }
            }
            if !busy {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let how = match keep {
            Keep::No => PeersWord::Peers,
            Keep::Launcher => PeersWord::Keep,
            Keep::Rank0 => PeersWord::Watch,
        };
        let addrs = joined.iter().flatten().map(|(a, _)| *a).collect();
        let msg = Line::Peers { how, addrs }.encode();
        let mut streams = Vec::with_capacity(joined.len());
        for (_, mut s) in joined.into_iter().flatten() {
            let _ = s.write_all(msg.as_bytes());
            if keep != Keep::No {
                streams.push(s);
            }
        }
        Ok(streams)
    }
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
pub(crate) fn publish_rendezvous(file: &std::path::Path, line: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(format!(
        ".{}.{:016x}.tmp",
        std::process::id(),
        crate::sys::random_u64()
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

/// A rendezvous file read: its address and cookie, and when it was written.
pub(crate) struct Published {
    pub addr: SocketAddr,
    pub cookie: u64,
    pub written: std::time::SystemTime,
}

/// Why a rendezvous file is not this job's, or not yet.
#[derive(Debug, PartialEq, Eq)]
enum NotYet {
    /// Another job's, written within the last 5 minutes (its job id).
    OtherJob(String),
    /// Anything else (missing, not to be trusted, malformed), said so.
    Other(String),
}

impl std::fmt::Display for NotYet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotYet::OtherJob(j) => write!(f, "written for job {j}"),
            NotYet::Other(why) => f.write_str(why),
        }
    }
}

/// Reads a rendezvous file if it is this job's: a regular file (not a link) of this user's,
/// readable by nobody else, written within the last 5 minutes, naming job `job`. Returns the
/// rendezvous address and cookie, or why the file is not to be trusted.
#[cfg(test)]
fn read_rendezvous(file: &std::path::Path, job: &str) -> Result<(SocketAddr, u64), String> {
    read_published(file, job)
        .map(|p| (p.addr, p.cookie))
        .map_err(|e| match e {
            NotYet::OtherJob(j) => format!("written for job {j}, not {job}"),
            NotYet::Other(why) => why,
        })
}

/// [`read_rendezvous`], with when the file was written, or why it is not this job's yet.
fn read_published(file: &std::path::Path, job: &str) -> Result<Published, NotYet> {
    let other = NotYet::Other;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .map_err(|e| other(e.to_string()))?;
    let meta = f.metadata().map_err(|e| other(e.to_string()))?;
    let me = crate::sys::euid();
    if !meta.is_file() {
        return Err(other("not a regular file".into()));
    }
    if meta.uid() != me {
        return Err(other(format!(
            "owned by uid {}, not by this job's user ({me})",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(other(format!(
            "mode {:o}: others may read it",
            meta.mode() & 0o777
        )));
    }
    let written = meta.modified().map_err(|e| other(e.to_string()))?;
    let fresh = written
        .elapsed()
        .is_ok_and(|age| age < Duration::from_secs(300));
    if !fresh {
        return Err(other("older than 5 minutes (a job before this one)".into()));
    }
    let mut text = String::new();
    (&f).take(512)
        .read_to_string(&mut text)
        .map_err(|e| other(e.to_string()))?;
    match Line::parse(text.lines().next().unwrap_or("")) {
        Ok(Line::Published {
            job: j,
            addr,
            cookie,
        }) if j == job => Ok(Published {
            addr,
            cookie,
            written,
        }),
        Ok(Line::Published { job: j, .. }) => Err(NotYet::OtherJob(j)),
        _ => Err(other("malformed".into())),
    }
}

/// Waits for rank 0's rendezvous file of this job ([`read_published`]) and parses it. Says,
/// once, a file of another job written since this rank started (two jobs given one
/// `DSM_RENDEZVOUS_FILE`), and every 10 s what it finds there, with whether this rank could
/// write in its directory (rank 0, which must, may not either).
pub(crate) fn read_rendezvous_file(
    file: &std::path::Path,
    timeout: Duration,
    since: std::time::SystemTime,
) -> Result<Published, String> {
    let start = Instant::now();
    let deadline = start + timeout;
    let job = cluster_job_id();
    let mut next_notice = start + Duration::from_secs(10);
    let mut said_other_job = false;
    loop {
        let why = match read_published(file, &job) {
            Ok(found) => return Ok(found),
            Err(why) => why,
        };
        if let NotYet::OtherJob(j) = &why
            && !said_other_job
            && std::fs::metadata(file)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since)
        {
            said_other_job = true;
            log::warn!(
                "{} holds job {j}'s rendezvous, not this job's ({job}): two jobs running at once \
                 with one DSM_RENDEZVOUS_FILE? Each needs its own (the default, \
                 .dsm-rendezvous-JOB, is)",
                file.display()
            );
        }
        let now = Instant::now();
        if now > deadline {
            let why = match why {
                NotYet::OtherJob(j) => format!("written for job {j}, not this job's ({job})"),
                NotYet::Other(why) => why,
            };
            return Err(format!(
                "rank 0 did not publish {} within {timeout:?} (the file there: {why}){}",
                file.display(),
                unwritable(file).map_or(String::new(), |e| format!("; {e}"))
            ));
        }
        if now > next_notice {
            next_notice += Duration::from_secs(10);
            log::warn!(
                "waiting for rank 0 to publish the rendezvous in {} ({:.0} s of {} s; the file \
                 there: {why}){}",
                file.display(),
                start.elapsed().as_secs_f64(),
                timeout.as_secs(),
                unwritable(file).map_or(String::new(), |e| format!("; {e}"))
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why `file` could not be made in its directory here, if it could not: a file of a name of
/// this process's own is made and removed there.
fn unwritable(file: &std::path::Path) -> Option<String> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let probe = dir.join(format!(".dsm-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        Err(e) => Some(format!(
            "this rank cannot write in {} ({e}): if rank 0 cannot either, it cannot publish \
             there; set DSM_RENDEZVOUS_FILE to a file of a directory every rank sees and rank 0 \
             can write",
            dir.display()
        )),
    }
}

/// `node 3`, `nodes 1, 2, 5`, `nodes 0, 1, ... and 490 more`.
fn node_list(nodes: &[usize]) -> String {
    let shown: Vec<String> = nodes.iter().take(8).map(usize::to_string).collect();
    let more = nodes.len().saturating_sub(8);
    match (nodes.len(), more) {
        (1, _) => format!("node {}", shown[0]),
        (_, 0) => format!("nodes {}", shown.join(", ")),
        _ => format!("nodes {} and {more} more", shown.join(", ")),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A node of another transport than the first ends the job at once, said to every node
    /// that joined (under srun it was seen as a peer lost 10 s later, and a connection refused
    /// a minute later, neither naming the transports).
    #[test]
    fn nodes_of_two_transports_are_refused_at_the_rendezvous_and_told_why() {
        use std::io::{BufRead, BufReader};
        let rv = Rendezvous::bind("127.0.0.1".parse().unwrap()).unwrap();
        let at = rv.addr().unwrap();
        let joined = rv.hellos();
        let serving =
            std::thread::spawn(move || rv.serve(3, 0xc0ffee, Duration::from_secs(30), Keep::No));
        let hello = |rank: u16, transport: &str| {
            let mut s = TcpStream::connect(at).unwrap();
            let line = Line::Hello {
                cookie: 0xc0ffee,
                rank,
                addr: "127.0.0.1:7000".parse().unwrap(),
                transport: transport.into(),
            };
            s.write_all(line.encode().as_bytes()).unwrap();
            s
        };
        let first = hello(0, "udp");
        // The first is joined before the other comes.
        let deadline = Instant::now() + Duration::from_secs(30);
        while joined.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the first hello was never taken");
            std::thread::yield_now();
        }
        let second = hello(2, "tcp");
        let why = serving.join().unwrap().unwrap_err();
        assert!(why.contains("node 2 runs tcp, node 0 udp"), "{why}");
        for s in [first, second] {
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).unwrap();
            assert!(
                line.contains("ERROR") && line.contains("node 2 runs tcp"),
                "{line}"
            );
        }
    }

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
        let line = Line::Published {
            job: "j1".into(),
            addr: "127.0.0.1:5000".parse().unwrap(),
            cookie: 0xab,
        };
        publish_rendezvous(&file, &line.encode()).unwrap();
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
