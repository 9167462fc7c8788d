//! The machine's yardsticks for streaming remote pages: a TCP stream on loopback between two
//! processes, MB megabytes written in 1 MiB writes. The receiver is the calling process; the
//! sender is a second process the caller starts (the caller's own binary in sender mode:
//! [`send`]). The receiver either only reads ([`Receiver::Plain`], 1 MiB reads, as
//! `shared/scale/tcpstream.c` does), or does the least a page-based DSM does with what it
//! receives ([`Receiver::IntoFreshPages`]).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};

/// The environment variable that puts a binary in sender mode: `PORT:MB`.
pub const SENDER_ENV: &str = "DSM_TCP_STREAM_SEND";

/// The environment variable that puts a binary, started on two hosts as ranks 0 and 1 (by
/// `dsmrun --hosts`, which gives `DSM_RANK`), in the mode of [`between`]: `MB:PORT:NONCE:HOST`,
/// NONCE a hexadecimal u64 both ends show each other, HOST the receiving host (rank 1's) as the
/// hosts file names it (an IPv6 address with or without brackets).
pub const BETWEEN_ENV: &str = "DSM_TCP_STREAM_BETWEEN";

/// What rank 1 of [`between`] says when its port is taken (another port is worth a try).
pub const PORT_TAKEN: &str = "port taken";

/// What rank 1 of [`between`] prints before the rate.
pub const BETWEEN_PREFIX: &str = "plain_tcp_mbps=";

/// How long either end of [`between`] waits for the other.
const BETWEEN_WAIT: Duration = Duration::from_secs(60);

/// What the receiving end does with the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// Reads them into one buffer, 1 MiB at a time, and drops them.
    Plain,
    /// Reads them in runs of [`RUN_BYTES`] (a TCP grant's run of pages), writes each run into
    /// fresh pages of a memory file with one `pwrite`, as a node lands a run of received pages,
    /// and sums its u64 words through a mapping of the file, as the `stream` app reads them:
    /// the ceiling of any page-based DSM that delivers into fresh shared memory here, whatever
    /// its protocol.
    IntoFreshPages,
}

/// The run [`Receiver::IntoFreshPages`] reads and lands at once: 64 pages, TCP's grant run.
pub const RUN_BYTES: usize = 64 * 4096;

/// Megabytes per second a second process, `sender` (given [`SENDER_ENV`]), streams to this one
/// over TCP loopback: `mb` megabytes, timed from the first byte to the last, received as `how`
/// says.
pub fn receive_mbps(mut sender: Command, mb: usize, how: Receiver) -> io::Result<f64> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let port = listener.local_addr()?.port();
    let mut child = sender
        .env(SENDER_ENV, format!("{port}:{mb}"))
        .stdout(std::process::Stdio::null())
        .spawn()?;
    // The sender may fail before it connects: wait for it or for its end, never forever.
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if let Some(status) = child.try_wait()? {
            return Err(io::Error::other(format!(
                "the TCP stream's sender ended with {status} before it connected"
            )));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(
                "the TCP stream's sender did not connect within 30 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let total = mb << 20;
    let received = match how {
        Receiver::Plain => read_plain(&mut s, total),
        Receiver::IntoFreshPages => land(&mut s, total).map(|l| {
            // The sum is what a program would use: kept from being optimised away.
            std::hint::black_box(l.sum);
            (l.got, l.timed, l.secs)
        }),
    };
    // Closed before the wait: a sender blocked on a full socket ends instead of waiting forever;
    // after a failed receive, it is ended whatever it waits for.
    drop(s);
    if received.is_err() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    let (got, timed, secs) = received?;
    if got != total || !status.success() {
        return Err(io::Error::other(format!(
            "the TCP stream's sender ended with {status} after {got} of {total} bytes"
        )));
    }
    Ok(timed as f64 / (1 << 20) as f64 / secs.max(1e-9))
}

/// Reads up to `total` bytes, 1 MiB at a time: the bytes read, those timed (all but the first
/// read's: the connection and the sender's start are not the stream) and the seconds they took.
fn read_plain(s: &mut TcpStream, total: usize) -> io::Result<(usize, usize, f64)> {
    let mut buf = vec![0u8; 1 << 20];
    let first = s.read(&mut buf)?;
    let mut got = first;
    let t0 = Instant::now();
    while got < total {
        match s.read(&mut buf)? {
            0 => break,
            n => got += n,
        }
    }
    Ok((got, got - first, t0.elapsed().as_secs_f64()))
}

/// What [`land`] received.
struct Landed {
    /// Bytes read.
    got: usize,
    /// Bytes timed: all but the first run's.
    timed: usize,
    /// Seconds from the end of the first run to the end of the last.
    secs: f64,
    /// The wrapping sum of the u64 words read back through the mapping.
    sum: u64,
}

/// Reads up to `total` bytes in runs of [`RUN_BYTES`], each landed in fresh pages of a memory
/// file and summed through its mapping ([`Receiver::IntoFreshPages`]); timed from the end of the
/// first run.
fn land(s: &mut impl Read, total: usize) -> io::Result<Landed> {
    let mut file = crate::sys::FileView::new(c"dsm-landing-stream", total.next_multiple_of(4096))?;
    let mut run = vec![0u8; RUN_BYTES];
    let mut got = 0;
    let mut sum = 0u64;
    let mut t0 = None;
    while got < total {
        let want = RUN_BYTES.min(total - got);
        let mut have = 0;
        while have < want {
            match s.read(&mut run[have..want])? {
                0 => break,
                n => have += n,
            }
        }
        if have < want {
            got += have;
            break;
        }
        file.write_at(&run[..want], got)?;
        sum = sum.wrapping_add(file.sum_words(got, want - want % 8));
        got += want;
        t0.get_or_insert_with(Instant::now);
    }
    Ok(Landed {
        got,
        timed: got - RUN_BYTES.min(got),
        secs: t0.map_or(0.0, |t| t.elapsed().as_secs_f64()),
        sum,
    })
}

/// Sender mode: when [`SENDER_ENV`] is set, streams what it says to the receiver and returns
/// the exit status to end with; `None` otherwise.
pub fn send() -> Option<i32> {
    let spec = std::env::var(SENDER_ENV).ok()?;
    let parsed = spec
        .split_once(':')
        .and_then(|(p, m)| Some((p.parse::<u16>().ok()?, m.parse::<usize>().ok()?)));
    let Some((port, mb)) = parsed else {
        eprintln!("{SENDER_ENV}={spec}: expected PORT:MB");
        return Some(2);
    };
    let run = || -> io::Result<()> {
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        let buf = vec![7u8; 1 << 20];
        for _ in 0..mb {
            c.write_all(&buf)?;
        }
        Ok(())
    };
    Some(match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("TCP stream sender: {e}");
            1
        }
    })
}

/// The plain TCP stream between two hosts: when [`BETWEEN_ENV`] is set, rank 0 (`DSM_RANK`)
/// connects to HOST:PORT (retrying while rank 1 starts) and writes MB megabytes in 1 MiB writes;
/// rank 1 listens on PORT, reads them 1 MiB at a time and prints [`BETWEEN_PREFIX`] and the
/// MB/s; other ranks do nothing. Neither waits for the other longer than a minute. Returns the
/// exit status to end with; `None` without the variable.
pub fn between() -> Option<i32> {
    let spec = std::env::var(BETWEEN_ENV).ok()?;
    let parsed = spec.split_once(':').and_then(|(mb, rest)| {
        let (port, rest) = rest.split_once(':')?;
        let (nonce, host) = rest.split_once(':')?;
        Some((
            mb.parse::<usize>().ok()?,
            port.parse::<u16>().ok()?,
            u64::from_str_radix(nonce, 16).ok()?,
            host.trim_start_matches('[').trim_end_matches(']'),
        ))
    });
    let Some((mb, port, nonce, host)) = parsed else {
        eprintln!("{BETWEEN_ENV}={spec}: expected MB:PORT:NONCE:HOST");
        return Some(2);
    };
    let rank = std::env::var("DSM_RANK").unwrap_or_default();
    let deadline = Instant::now() + BETWEEN_WAIT;
    let run = match rank.as_str() {
        "0" => send_between(host, port, nonce, mb, deadline),
        "1" => receive_between(port, nonce, mb, deadline)
            .map(|mbps| println!("{BETWEEN_PREFIX}{mbps:.0}")),
        _ => Ok(()),
    };
    Some(match run {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("TCP stream between hosts, rank {rank}: {e}");
            1
        }
    })
}

/// Rank 0 of [`between`]: connects to `host:port` (trying again while rank 1 starts, each try
/// bounded by what is left before `deadline`), shows `nonce` and checks it comes back, then
/// writes `mb` MiB in 1 MiB writes.
fn send_between(host: &str, port: u16, nonce: u64, mb: usize, deadline: Instant) -> io::Result<()> {
    let left = || deadline.saturating_duration_since(Instant::now());
    let to: Vec<SocketAddr> = (host, port).to_socket_addrs()?.collect();
    let mut c = 'connected: loop {
        for a in &to {
            // A firewall that drops the SYN would hold a plain connect for minutes.
            match TcpStream::connect_timeout(a, left().max(Duration::from_millis(100))) {
                // No route there: rank 1 is not coming (its host is out of reach).
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable
                    ) =>
                {
                    return Err(io::Error::new(e.kind(), format!("{host}:{port}: {e}")));
                }
                Err(_) => {}
                Ok(mut c) => {
                    // The receiver's word first: a stranger on the port gets nothing.
                    c.set_read_timeout(Some(left().max(Duration::from_secs(1))))?;
                    c.write_all(&nonce.to_le_bytes())?;
                    let mut echo = [0u8; 8];
                    if c.read_exact(&mut echo).is_ok() && echo == nonce.to_le_bytes() {
                        break 'connected c;
                    }
                }
            }
        }
        if left().is_zero() {
            return Err(io::Error::other(format!(
                "rank 1 did not answer at {host}:{port} within {} s",
                BETWEEN_WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let buf = vec![7u8; 1 << 20];
    for _ in 0..mb {
        c.write_all(&buf)?;
    }
    Ok(())
}

/// Rank 1 of [`between`]: listens on `port` (both families where the host has IPv6), takes the
/// first connection that shows `nonce` (answering it back) before `deadline`, and reads `mb`
/// MiB 1 MiB at a time: the MB/s.
fn receive_between(port: u16, nonce: u64, mb: usize, deadline: Instant) -> io::Result<f64> {
    let listener = TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)))
        .map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => io::Error::other(format!("{PORT_TAKEN} ({port}): {e}")),
            _ => e,
        })?;
    listener.set_nonblocking(true)?;
    let mut s = loop {
        match listener.accept() {
            Ok((mut s, _)) => {
                // Rank 0 shows the nonce; anyone else is dropped, unanswered.
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                let mut shown = [0u8; 8];
                if s.read_exact(&mut shown).is_ok() && shown == nonce.to_le_bytes() {
                    s.write_all(&shown)?;
                    break s;
                }
            }
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            Err(_) if Instant::now() >= deadline => {
                return Err(io::Error::other(format!(
                    "rank 0 did not connect within {} s",
                    BETWEEN_WAIT.as_secs()
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    s.set_read_timeout(Some(BETWEEN_WAIT))?;
    let (got, timed, secs) = read_plain(&mut s, mb << 20)?;
    if got != mb << 20 {
        return Err(io::Error::other(format!(
            "{got} of {} bytes arrived",
            mb << 20
        )));
    }
    Ok(timed as f64 / (1 << 20) as f64 / secs.max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its bytes a few at a time, as a socket may.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(7_001);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn words(bytes: usize) -> Vec<u8> {
        (0..bytes as u64 / 8)
            .flat_map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_ne_bytes())
            .collect()
    }

    fn sum(bytes: &[u8]) -> u64 {
        bytes
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap()))
            .fold(0, u64::wrapping_add)
    }

    #[test]
    fn landed_runs_read_back_through_the_mapping_are_the_bytes_sent() {
        let sent = words(3 * RUN_BYTES + 4096);
        let landed = land(&mut Trickle(&sent), sent.len()).unwrap();
        assert_eq!(landed.got, sent.len());
        assert_eq!(landed.timed, sent.len() - RUN_BYTES);
        assert_eq!(landed.sum, sum(&sent));
    }

    #[test]
    fn a_stream_that_ends_early_is_counted_short() {
        let sent = words(RUN_BYTES + 100 * 8);
        let landed = land(&mut Trickle(&sent), 2 * RUN_BYTES).unwrap();
        assert_eq!(landed.got, sent.len());
        assert_eq!(landed.sum, sum(&sent[..RUN_BYTES]));
    }
}
