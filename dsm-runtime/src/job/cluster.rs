//! Jobs started by a cluster launcher (Slurm's `srun`, Open MPI's or MPICH's `mpirun`): each rank
//! learns its rank and size from the launcher's variables; rank 0 starts the rendezvous and
//! publishes it in a file (see [`super::rendezvous`]), the others read it there.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::node::{JobEnv, local_config, my_address, route_to};
use super::rendezvous::{
    Keep, Rendezvous, cluster_job_id, publish_rendezvous, read_rendezvous_file, rendezvous_file,
};
use super::wire::Line;

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

/// A job started by a cluster launcher: rank 0 runs the rendezvous and publishes it in
/// [`rendezvous_file`]; the other ranks read it.
pub(crate) fn cluster_job_env() -> Result<Option<JobEnv>, String> {
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
    // A rendezvous file written since then is this job's (or, named for another job, that
    // of a job started with the same file at the same time); the slack covers ranks started
    // apart and clocks of a shared file system a little apart.
    let since = std::time::SystemTime::now() - Duration::from_secs(30);
    let file = rendezvous_file();
    let timeout = Duration::from_secs(120);
    let (rendezvous, cookie) = if rank == 0 {
        let cookie = crate::sys::random_u64();
        let rv = Rendezvous::bind(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
            .map_err(|e| format!("rendezvous: {e}"))?;
        let addr = SocketAddr::new(my_address(), rv.addr().map_err(|e| e.to_string())?.port());
        let job = cluster_job_id();
        let published = Line::Published {
            job: job.clone(),
            addr,
            cookie,
        };
        publish_rendezvous(&file, &published.encode()).map_err(|e| {
            format!(
                "writing {}, the rendezvous the other ranks read: {e} (every rank must see it: \
                 run in a directory rank 0 can write, or set DSM_RENDEZVOUS_FILE to a file of one)",
                file.display()
            )
        })?;
        let published = file.clone();
        // The program's asynchronous signals are for the program's threads (see `Dsm`).
        let held_off = crate::sys::signals::BlockedSignals::asynchronous();
        std::thread::Builder::new()
            .name("dsm-rendezvous".into())
            .spawn(move || {
                let _runtime = crate::door::threads::runtime_thread();
                let served = rv.serve(size, cookie, timeout, Keep::Rank0);
                // Every rank has read it (or the job failed): it has served its purpose.
                let _ = std::fs::remove_file(&published);
                match served {
                    Ok(control) => super::watch::watch_from_rank0(control),
                    Err(e) => crate::door::end::fatal(&e),
                }
            })
            .map_err(|e| e.to_string())?;
        drop(held_off);
        (addr, cookie)
    } else {
        live_rendezvous(&file, timeout, since)?
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
        on_host: None,
    }))
}

/// How long a rendezvous this job's rank 0 published (written since this rank started) may
/// refuse connections before the rank takes rank 0 for gone.
const RANK0_GONE_AFTER: Duration = Duration::from_secs(10);

/// Rank 0's rendezvous as published in `file`, once it answers: a file an earlier job's rank 0
/// left (killed before everyone joined, with the same job id) names an address that refuses
/// connections, and is waited past until this job's rank 0 replaces it. One written since
/// `since` that refuses connections for [`RANK0_GONE_AFTER`] is this job's rank 0 gone (it
/// ended before every rank joined): said, and the file removed.
fn live_rendezvous(
    file: &std::path::Path,
    timeout: Duration,
    since: std::time::SystemTime,
) -> Result<(SocketAddr, u64), String> {
    let deadline = Instant::now() + timeout;
    let mut said = false;
    let mut refused_since: Option<(SocketAddr, Instant)> = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let p = read_rendezvous_file(file, left, since)?;
        let (addr, cookie) = (p.addr, p.cookie);
        // A look, not a hello: the rendezvous forgets a connection that says nothing.
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(_) => return Ok((addr, cookie)),
            // A signal of the program's: looked at again.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted && Instant::now() < deadline => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < deadline =>
            {
                if p.written >= since {
                    let first = match refused_since {
                        Some((a, t)) if a == addr => t,
                        _ => Instant::now(),
                    };
                    refused_since = Some((addr, first));
                    if first.elapsed() > RANK0_GONE_AFTER {
                        // Removed unless rank 0 (or another) replaced it meanwhile.
                        if read_rendezvous_file(file, Duration::ZERO, since)
                            .is_ok_and(|again| again.addr == addr)
                        {
                            let _ = std::fs::remove_file(file);
                        }
                        return Err(format!(
                            "rank 0 published its rendezvous at {addr} in {} and has refused \
                             connections for {} s since: it ended before every rank joined (its \
                             own output, or the launcher's, says why)",
                            file.display(),
                            RANK0_GONE_AFTER.as_secs()
                        ));
                    }
                } else if !said {
                    said = true;
                    log::info!(
                        "{} names {addr}, which refuses connections: a file left by an earlier \
                         job; waiting for rank 0 to publish this job's",
                        file.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(format!(
                    "the rendezvous {addr} that {} names: {e}",
                    file.display()
                ));
            }
        }
    }
}
