//! The machine's yardstick for streaming remote pages: a plain TCP stream on loopback between two
//! processes, MB megabytes written in 1 MiB writes and read in 1 MiB reads, as
//! `shared/scale/tcpstream.c` does. The receiver is the calling process; the sender is a second
//! process the caller starts (the caller's own binary in sender mode: [`send`]).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// The environment variable that puts a binary in sender mode: `PORT:MB`.
pub const SENDER_ENV: &str = "DSM_TCP_STREAM_SEND";

/// Megabytes per second a second process, `sender` (given [`SENDER_ENV`]), streams to this one
/// over TCP loopback: `mb` megabytes, timed from the first byte to the last.
pub fn receive_mbps(mut sender: Command, mb: usize) -> io::Result<f64> {
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
    let mut buf = vec![0u8; 1 << 20];
    let total = mb << 20;
    // Timed from the first read on (the connection and the sender's start are not the stream).
    let first = s.read(&mut buf)?;
    let mut got = first;
    let t0 = Instant::now();
    while got < total {
        match s.read(&mut buf)? {
            0 => break,
            n => got += n,
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let status = child.wait()?;
    if got != total || !status.success() {
        return Err(io::Error::other(format!(
            "the TCP stream's sender ended with {status} after {got} of {total} bytes"
        )));
    }
    Ok((total - first) as f64 / (1 << 20) as f64 / secs.max(1e-9))
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
