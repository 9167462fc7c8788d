//! Peers that do not belong: while a job runs, a stranger floods every node with forged frames
//! (page requests and diffs that would overwrite memory, in every wrapping it could guess). They
//! are dropped and counted, and the job's result stays exact.

use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dsm_core::{Access, Msg, NodeId, PageDiff, PageNum, codec};
use dsm_tests::{bin, run_with_deadline, stats_row, text, wait_with_deadline};

/// Frames a forger would send: GETPs and DIFFs that would overwrite page 0.. with 0xFF.
fn forged_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for page in 0..64u32 {
        let mut runs = vec![0, 0, 0, 16];
        runs.extend(std::iter::repeat_n(0xFF, 4096));
        for cookie in [0u64, 1, 0xDEAD_BEEF] {
            for msg in [
                Msg::GetPage {
                    access: Access::Write,
                    pages: vec![PageNum(page)],
                    passed: 0,
                },
                Msg::Diff {
                    id: u64::from(page),
                    diffs: vec![PageDiff {
                        page: PageNum(page),
                        runs: runs.clone(),
                    }],
                },
            ] {
                let mut f = Vec::new();
                codec::encode_frame(cookie, NodeId(1), &msg, &mut f);
                frames.push(f);
            }
        }
    }
    frames
}

/// The first bytes of a UDP datagram of ours: magic, version, `flags`.
fn udp_header_start(flags: u8) -> Vec<u8> {
    use dsm_transport::reliable::{MAGIC, VERSION};
    let mut d = MAGIC.to_le_bytes().to_vec();
    d.extend([VERSION, flags]);
    d
}

/// Wraps a frame as the UDP reliability layer would (header with a guessed cookie).
fn as_datagram(frame: &[u8], seq: u32) -> Vec<u8> {
    let mut d = udp_header_start(1);
    d.extend_from_slice(&0u64.to_le_bytes());
    d.extend_from_slice(&1u16.to_le_bytes());
    d.extend_from_slice(&seq.to_le_bytes());
    d.extend_from_slice(&0u32.to_le_bytes());
    d.extend_from_slice(frame);
    d
}

fn run_under_attack(transport: &str, base: u16) {
    let stop = Arc::new(AtomicBool::new(false));
    let frames = forged_frames();
    let forger = {
        let stop = stop.clone();
        let transport = transport.to_string();
        std::thread::spawn(move || {
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for node in 0..3u16 {
                    let target = ("127.0.0.1", base + node);
                    if transport == "udp" {
                        for (i, f) in frames.iter().enumerate() {
                            let _ = sock.send_to(&as_datagram(f, i as u32), target);
                            let _ = sock.send_to(f, target);
                            sent += 2;
                        }
                    } else if let Ok(mut s) = TcpStream::connect(target) {
                        let mut hello = b"DSMT\x01".to_vec();
                        hello.extend_from_slice(&0u64.to_le_bytes());
                        hello.extend_from_slice(&1u16.to_le_bytes());
                        let _ = s.write_all(&hello);
                        for f in &frames {
                            let _ = s.write_all(&(f.len() as u32).to_le_bytes());
                            let _ = s.write_all(f);
                            sent += 1;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            sent
        })
    };
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        "3",
        "--stats",
        "--transport",
        transport,
        "--set",
        &format!("base_port={base}"),
    ])
    .arg(bin("matmul"))
    // --stats counts the compute only: long enough for many of the forger's rounds (512 took
    // 20 ms, and now and then none of them reached node 0 in that time).
    .args(["1024"]);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    stop.store(true, Ordering::Relaxed);
    let sent = forger.join().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{transport}: {t}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK f64 n=1024 nodes=3"),
        "{transport}: {t}"
    );
    assert!(sent > 0, "the forger sent nothing");
    let counter = if transport == "udp" {
        "udp rejected datagrams"
    } else {
        "tcp connections refused"
    };
    let rejected = stats_row(&out, counter).first().copied().unwrap_or(0);
    assert!(
        rejected > 0,
        "{transport}: node 0 counted no rejected traffic:\n{t}"
    );
}

// Ports below Linux's ephemeral range (32768-60999): there, the forger's own connects to a port
// nobody listens on yet can take that very port (a TCP self-connect) and dsmrun then finds it in
// use, as a CI run once did.
#[test]
fn forged_frames_over_udp_are_dropped_and_counted() {
    run_under_attack("udp", dsm_tests::free_ports(4, 20000, 32000));
}

#[test]
fn forged_connections_over_tcp_are_refused_and_counted() {
    run_under_attack("tcp", dsm_tests::free_ports(4, 20000, 32000));
}

/// Strangers at start-up, as an unprivileged local user could be: one connection to the
/// rendezvous that trickles a byte every 4 s, and connections to node 0's TCP listener that say
/// nothing. Connections are served side by side with a deadline each: the job starts at once and
/// ends exact (before, the rendezvous waited on the trickler and the job failed after 63 s, and
/// one silent connection to node 0's listener ended the job with "lost node 0").
#[test]
fn strangers_at_start_up_delay_nobody() {
    let base = dsm_tests::free_ports(4, 20000, 32000);
    let dir = std::env::temp_dir().join(format!("dsm-startup-strangers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rv_file = dir.join("rendezvous");
    let stop = Arc::new(AtomicBool::new(false));
    let stranger = {
        let (stop, rv_file) = (stop.clone(), rv_file.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            let mut trickler: Option<TcpStream> = None;
            let mut last_byte = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if trickler.is_none() {
                    if let Some(addr) = std::fs::read_to_string(&rv_file)
                        .ok()
                        .and_then(|a| a.trim().parse::<std::net::SocketAddr>().ok())
                    {
                        trickler = TcpStream::connect(addr).ok();
                        if let Some(t) = &mut trickler {
                            let _ = t.write_all(b"D");
                        }
                    }
                }
                if let Some(t) = &mut trickler {
                    if last_byte.elapsed() > Duration::from_secs(4) {
                        let _ = t.write_all(b"S");
                        last_byte = std::time::Instant::now();
                    }
                }
                if held.len() < 4 {
                    if let Ok(s) = TcpStream::connect(("127.0.0.1", base)) {
                        held.push(s);
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            trickler.is_some() && !held.is_empty()
        })
    };
    // Each node publishes the rendezvous address for the stranger, then waits a moment, so the
    // stranger's connections come first.
    let script = format!(
        "echo $DSM_RENDEZVOUS > {}; sleep 0.5; exec \"$0\" \"$@\"",
        rv_file.display()
    );
    let start = std::time::Instant::now();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        "3",
        "--transport",
        "tcp",
        "--set",
        &format!("base_port={base}"),
        "sh",
        "-c",
        &script,
    ])
    .arg(bin("matmul"))
    .arg("256");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let connected = stranger.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK f64 n=256 nodes=3"),
        "{t}"
    );
    assert!(connected, "the stranger never got in its connections");
    assert!(
        took < Duration::from_secs(20),
        "the job took {took:?}:\n{t}"
    );
}

/// The cookie of a running node, read from its environment (as root may), and its pid: the
/// node whose parent is `launcher` and whose rank is `rank`.
fn node_cookie(launcher: u32, rank: u16) -> Option<u64> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(launcher) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let vars: Vec<String> = env
            .split(|&b| b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if !vars.iter().any(|v| *v == format!("DSM_RANK={rank}")) {
            continue;
        }
        let cookie = vars.iter().find_map(|v| v.strip_prefix("DSM_COOKIE="))?;
        return u64::from_str_radix(cookie, 16).ok();
    }
    None
}

/// One UDP datagram from `src_port` to `dst_port` on 127.0.0.1, its source forged, through a
/// raw socket (root only).
struct Spoofer(i32);

impl Spoofer {
    fn new() -> Spoofer {
        // SAFETY: socket(2) with constant arguments.
        #[allow(unsafe_code)]
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
        assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
        Spoofer(fd)
    }

    fn send(&self, src_port: u16, dst_port: u16, payload: &[u8]) {
        let mut p = vec![0x45u8, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0];
        p.extend_from_slice(&[127, 0, 0, 1, 127, 0, 0, 1]);
        p.extend_from_slice(&src_port.to_be_bytes());
        p.extend_from_slice(&dst_port.to_be_bytes());
        p.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(payload);
        let total = p.len() as u16;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        let to = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: dst_port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: sendto from a live buffer to a sockaddr_in of the size given.
        #[allow(unsafe_code)]
        unsafe {
            libc::sendto(
                self.0,
                p.as_ptr().cast(),
                p.len(),
                0,
                (&to as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as u32,
            )
        };
    }
}

impl Drop for Spoofer {
    fn drop(&mut self) {
        // SAFETY: closes the socket this value owns.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(self.0)
        };
    }
}

/// An attacker with the cookie who can forge a peer's source address (root on a host of the
/// job) acknowledges, as node 1, sequence numbers node 0 never sent, all through a lossy job:
/// the acknowledgements are refused and counted, nothing in flight is dropped as delivered, and
/// the job ends exact (before, such an acknowledgement dropped node 0's unacknowledged messages
/// and a lossy job hung for good).
#[test]
fn forged_acknowledgements_from_a_spoofed_peer_are_refused() {
    let base = dsm_tests::free_ports(2, 20000, 32000);
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "--stats", "--set", &format!("base_port={base}")])
        .arg(bin("matmul"))
        .arg("512")
        .env("DSM_IMPAIR", "drop=5,seed=11")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let launcher = child.id();
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let spoofer = Spoofer::new();
            let mut sent = 0u64;
            let mut cookie = None;
            while !stop.load(Ordering::Relaxed) {
                cookie = cookie.or_else(|| node_cookie(launcher, 0));
                if let Some(c) = cookie {
                    // A pure acknowledgement from "node 1" of 2^30 sequence numbers.
                    let mut d = udp_header_start(0);
                    d.extend_from_slice(&c.to_le_bytes());
                    d.extend_from_slice(&1u16.to_le_bytes());
                    d.extend_from_slice(&0u32.to_le_bytes());
                    d.extend_from_slice(&(1u32 << 30).to_le_bytes());
                    spoofer.send(base + 1, base, &d);
                    sent += 1;
                }
                std::thread::sleep(Duration::from_micros(300));
            }
            sent
        })
    };
    let out = wait_with_deadline(child, Duration::from_secs(120));
    stop.store(true, Ordering::Relaxed);
    let sent = attacker.join().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK f64 n=512 nodes=2"),
        "{t}"
    );
    assert!(sent > 0, "the attacker never found the cookie");
    let forged = stats_row(&out, "udp forged acknowledgements")
        .first()
        .copied()
        .unwrap_or(0);
    assert!(
        forged > 0,
        "node 0 counted no forged acknowledgement ({sent} sent):\n{t}"
    );
}
