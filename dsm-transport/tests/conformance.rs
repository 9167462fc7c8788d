//! One conformance suite for every transport: in-process loopback, UDP, TCP, and (built with the
//! `rdma` feature and run where a device exists, with `DSM_TEST_RDMA=1`: inside the Soft-RoCE VM)
//! RDMA RC and UD. Each scenario runs on each transport: order per peer, large messages, many
//! peers, bursts, back-pressure, and a peer that disappears; one-sided reads on RC.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use dsm_transport::reliable::{Event, ReliableConfig};
use dsm_transport::tcp::TcpConfig;
use dsm_transport::udp::{self, UdpTransport};
use dsm_transport::{Body, LentBytes, Transport, loopback};

mod support;

type Job = Vec<Option<Box<dyn Transport>>>;

const PEER_TIMEOUT: Duration = Duration::from_millis(600);
/// RDMA runs in an emulated VM, where this single-threaded harness can leave a node unpolled for
/// longer than [`PEER_TIMEOUT`]; a node that disappears is still seen at once (its TCP control
/// connection closes).
#[cfg(feature = "rdma")]
const RDMA_PEER_TIMEOUT: Duration = Duration::from_secs(10);

fn make(kind: &str, n: u16) -> Job {
    match kind {
        "loopback" => loopback::cluster(n)
            .unwrap()
            .into_iter()
            .map(|t| Some(Box::new(t) as Box<dyn Transport>))
            .collect(),
        "udp" => {
            let socks: Vec<_> = (0..n)
                .map(|_| udp::bind("127.0.0.1:0".parse().unwrap()).unwrap())
                .collect();
            let addrs: Vec<SocketAddr> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
            let cfg = ReliableConfig {
                peer_timeout: PEER_TIMEOUT,
                heartbeat: Duration::from_millis(50),
                ..Default::default()
            };
            socks
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    Some(Box::new(UdpTransport::new(
                        s,
                        i as u16,
                        addrs.clone(),
                        0xC0FFEE,
                        cfg.clone(),
                        Instant::now(),
                    )) as Box<dyn Transport>)
                })
                .collect()
        }
        "tcp" => {
            let cfg = TcpConfig {
                heartbeat: Duration::from_millis(50),
                peer_timeout: PEER_TIMEOUT,
                connect_timeout: Duration::from_secs(10),
            };
            support::tcp_job(n, &cfg)
                .0
                .into_iter()
                .map(|t| Some(Box::new(t) as Box<dyn Transport>))
                .collect()
        }
        #[cfg(feature = "rdma")]
        "rdma-rc" | "rdma-ud" => rdma_job(kind, n),
        _ => unreachable!(),
    }
}

#[cfg(feature = "rdma")]
fn rdma_job(kind: &str, n: u16) -> Job {
    use dsm_transport::rdma::{RdmaConfig, rc::RcTransport, ud::UdTransport};
    let listeners: Vec<_> = (0..n)
        .map(|_| dsm_transport::tcp::listen("127.0.0.1:0".parse().unwrap()).unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let cfg = RdmaConfig {
        device: None,
        port: 1,
        gid_index: None,
        tcp: TcpConfig {
            heartbeat: Duration::from_millis(50),
            peer_timeout: RDMA_PEER_TIMEOUT,
            connect_timeout: Duration::from_secs(20),
        },
    };
    let rel = ReliableConfig {
        peer_timeout: RDMA_PEER_TIMEOUT,
        heartbeat: Duration::from_millis(50),
        ..Default::default()
    };
    let rc = kind == "rdma-rc";
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let (addrs, cfg, rel) = (addrs.clone(), cfg.clone(), rel.clone());
            std::thread::spawn(move || -> Box<dyn Transport> {
                if rc {
                    Box::new(RcTransport::establish(l, i as u16, &addrs, 0xC0FFEE, &cfg).unwrap())
                } else {
                    Box::new(
                        UdTransport::establish(l, i as u16, &addrs, 0xC0FFEE, &cfg, rel).unwrap(),
                    )
                }
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| Some(h.join().unwrap()))
        .collect()
}

/// Drives every live transport until `done` says so; returns the events each node saw.
fn pump(
    job: &mut Job,
    mut done: impl FnMut(&[Vec<Event>]) -> bool,
    limit: Duration,
) -> Vec<Vec<Event>> {
    let mut seen: Vec<Vec<Event>> = vec![Vec::new(); job.len()];
    let start = Instant::now();
    while !done(&seen) {
        assert!(
            start.elapsed() < limit,
            "not done within {limit:?}; got {:?} events per node",
            seen.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let now = Instant::now();
        for (i, t) in job.iter_mut().enumerate() {
            if let Some(t) = t {
                step(t.as_mut(), now, &mut seen[i]);
            }
        }
        std::thread::yield_now();
    }
    seen
}

/// One pass of a node's loop: reads, runs what is due, collects the events, flushes.
fn step(t: &mut dyn Transport, now: Instant, seen: &mut Vec<Event>) {
    t.poll_recv(now);
    if t.poll_timeout().is_some_and(|d| d <= now) {
        t.handle_timeout(now);
    }
    while let Some(e) = t.poll_event() {
        seen.push(e);
    }
    t.flush(now);
}

fn messages(events: &[Event], from: u16) -> Vec<Vec<u8>> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Message { from: f, bytes } if *f == from => Some(bytes.clone()),
            _ => None,
        })
        .collect()
}

fn numbered(i: u32, len: usize) -> Vec<u8> {
    let mut v = i.to_le_bytes().to_vec();
    v.extend((0..len).map(|k| (k as u32 ^ i) as u8));
    v
}

/// The transports under test: RDMA ones where built in and asked for (`DSM_TEST_RDMA=1`, or
/// `only` for just them: inside the emulated VM the others are slow and already tested outside).
fn kinds() -> Vec<&'static str> {
    let rdma = std::env::var("DSM_TEST_RDMA").unwrap_or_default();
    let mut k = if rdma == "only" {
        Vec::new()
    } else {
        vec!["loopback", "udp", "tcp"]
    };
    if cfg!(feature = "rdma") && (rdma == "1" || rdma == "only") {
        k.extend(["rdma-rc", "rdma-ud"]);
    }
    k
}

#[test]
fn messages_arrive_in_order_per_peer() {
    for kind in kinds() {
        let mut job = make(kind, 2);
        let sent: Vec<Vec<u8>> = (0..3000)
            .map(|i| numbered(i, (i as usize * 7) % 300))
            .collect();
        for m in &sent {
            job[0].as_mut().unwrap().send(Instant::now(), 1, m);
        }
        let seen = pump(
            &mut job,
            |s| messages(&s[1], 0).len() == sent.len(),
            Duration::from_secs(20),
        );
        assert_eq!(messages(&seen[1], 0), sent, "{kind}");
    }
}

#[test]
fn a_receiver_that_polls_for_readiness_first_gets_everything_in_order() {
    for kind in kinds() {
        let mut job = make(kind, 2);
        let sent: Vec<Vec<u8>> = (0..2000)
            .map(|i| numbered(i, (i as usize * 13) % 5000))
            .collect();
        for m in &sent {
            job[0].as_mut().unwrap().send(Instant::now(), 1, m);
        }
        let start = Instant::now();
        let (mut seen, mut idle_polls) = (Vec::new(), 0u64);
        while messages(&seen, 0).len() < sent.len() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{kind}: {} of {}",
                messages(&seen, 0).len(),
                sent.len()
            );
            let now = Instant::now();
            step(job[0].as_mut().unwrap().as_mut(), now, &mut Vec::new());
            // The receiver takes a pass only when a poll finds something (twice: the second
            // must not lose what the first read ahead), or every 64 polls for its timers.
            let r = job[1].as_mut().unwrap();
            let ready = r.poll_ready() && r.poll_ready();
            idle_polls += u64::from(!ready);
            if ready || idle_polls % 64 == 0 {
                step(r.as_mut(), now, &mut seen);
            }
            std::thread::yield_now();
        }
        assert_eq!(messages(&seen, 0), sent, "{kind}");
    }
}

#[test]
fn large_messages_arrive_whole() {
    for kind in kinds() {
        let mut job = make(kind, 2);
        let sent = vec![
            numbered(1, 10),
            numbered(2, 3 << 20),
            numbered(3, 0),
            numbered(4, 200_000),
            numbered(5, 64 * 1024),
        ];
        for m in &sent {
            job[0].as_mut().unwrap().send(Instant::now(), 1, m);
        }
        let seen = pump(
            &mut job,
            |s| messages(&s[1], 0).len() == sent.len(),
            Duration::from_secs(20),
        );
        assert_eq!(messages(&seen[1], 0), sent, "{kind}");
    }
}

/// Bytes lent to a transport.
struct Lent(Vec<u8>);

impl LentBytes for Lent {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A message given as a head and a shared body (a grant's page run) arrives as one message, in
/// order with whole ones, whatever its size against the transport's reads and datagrams.
#[test]
fn messages_sent_in_parts_arrive_joined_and_in_order() {
    for kind in kinds() {
        let mut job = make(kind, 2);
        let mut sent = Vec::new();
        for (i, body_len) in [4096usize, 61_440, 262_144, 1, 20_000, 1 << 20]
            .into_iter()
            .enumerate()
        {
            let whole = numbered(100 + i as u32, 30);
            let joined = numbered(i as u32, 12 + body_len);
            let t = job[0].as_mut().unwrap();
            t.send(Instant::now(), 1, &whole);
            // Shared and lent bodies alike.
            let body = if i % 2 == 0 {
                Body::Shared(std::sync::Arc::from(&joined[12..]))
            } else {
                Body::Lent(std::sync::Arc::new(Lent(joined[12..].to_vec())))
            };
            t.send_parts(Instant::now(), 1, joined[..12].to_vec(), body);
            sent.push(whole);
            sent.push(joined);
        }
        let seen = pump(
            &mut job,
            |s| messages(&s[1], 0).len() == sent.len(),
            Duration::from_secs(20),
        );
        assert!(messages(&seen[1], 0) == sent, "{kind}");
    }
}

#[test]
fn many_peers_all_to_all() {
    for kind in kinds() {
        let n = 8u16;
        let mut job = make(kind, n);
        for from in 0..n {
            for to in (0..n).filter(|&t| t != from) {
                for k in 0..40 {
                    let m = numbered(u32::from(from) * 1000 + k, 100 + usize::from(to));
                    job[usize::from(from)]
                        .as_mut()
                        .unwrap()
                        .send(Instant::now(), to, &m);
                }
            }
        }
        let want = 40 * (usize::from(n) - 1);
        let seen = pump(
            &mut job,
            |s| s.iter().all(|e| e.len() >= want),
            Duration::from_secs(20),
        );
        for to in 0..n {
            for from in (0..n).filter(|&f| f != to) {
                let expect: Vec<Vec<u8>> = (0..40)
                    .map(|k| numbered(u32::from(from) * 1000 + k, 100 + usize::from(to)))
                    .collect();
                assert_eq!(
                    messages(&seen[usize::from(to)], from),
                    expect,
                    "{kind}: {from} -> {to}"
                );
            }
        }
    }
}

#[test]
fn a_burst_of_small_messages_is_delivered() {
    for kind in kinds() {
        let mut job = make(kind, 2);
        let count = 30_000;
        for i in 0..count {
            job[1]
                .as_mut()
                .unwrap()
                .send(Instant::now(), 0, &numbered(i, 20));
        }
        let seen = pump(
            &mut job,
            |s| messages(&s[0], 1).len() == count as usize,
            Duration::from_secs(30),
        );
        assert!(
            messages(&seen[0], 1)
                .iter()
                .enumerate()
                .all(|(i, m)| *m == numbered(i as u32, 20)),
            "{kind}"
        );
    }
}

#[test]
fn a_slow_receiver_gets_everything_once_it_reads() {
    for kind in kinds() {
        let mut job = make(kind, 2);
        let sent: Vec<Vec<u8>> = (0..48).map(|i| numbered(i, 1 << 20)).collect();
        let start = Instant::now();
        for m in &sent {
            job[0].as_mut().unwrap().send(Instant::now(), 1, m);
            // Only the sender runs while the receiver is busy elsewhere.
            let t = job[0].as_mut().unwrap();
            t.poll_recv(Instant::now());
            t.flush(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(200));
        let seen = pump(
            &mut job,
            |s| messages(&s[1], 0).len() == sent.len(),
            Duration::from_secs(60),
        );
        assert_eq!(messages(&seen[1], 0).len(), sent.len(), "{kind}");
        assert!(messages(&seen[1], 0) == sent, "{kind}: contents");
        eprintln!(
            "{kind}: {} MiB to a slow receiver in {:?}",
            sent.len(),
            start.elapsed()
        );
    }
}

/// A TCP node whose socket filled keeps the rest queued, and its descriptor becomes readable once
/// the peer has read enough (the runtime's service thread sleeps on it between passes): a node
/// that only looks when woken still sends everything.
#[test]
fn a_tcp_sender_whose_socket_filled_is_woken_to_send_the_rest() {
    if !kinds().contains(&"tcp") {
        // `DSM_TEST_RDMA=only`: inside the emulated VM, where TCP is tested outside.
        eprintln!("skipped: TCP is not among the transports under test (DSM_TEST_RDMA=only)");
        return;
    }
    let mut job = make("tcp", 2);
    let big = numbered(7, 32 << 20);
    {
        let t = job[0].as_mut().unwrap();
        t.send(Instant::now(), 1, &big);
        t.flush(Instant::now());
        assert!(t.pending(1) > 0, "the socket took 32 MiB at once");
    }
    let sleeper = dsm_transport::sys::Epoll::new().unwrap();
    sleeper
        .add(job[0].as_ref().unwrap().fd(), 0, false)
        .unwrap();
    let mut ready = Vec::new();
    let (mut sender_seen, mut receiver_seen) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while messages(&receiver_seen, 0).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "32 MiB not received in 30 s: {} bytes still queued at the sender",
            job[0].as_ref().unwrap().pending(1)
        );
        // The receiver reads, and sends nothing (no timeouts run: no heartbeat wakes the
        // sender).
        let r = job[1].as_mut().unwrap();
        r.poll_recv(Instant::now());
        while let Some(e) = r.poll_event() {
            receiver_seen.push(e);
        }
        r.flush(Instant::now());
        // The sender runs only when its descriptor says there is work.
        ready.clear();
        sleeper.ready(1, &mut ready).unwrap();
        if !ready.is_empty() {
            step(
                job[0].as_mut().unwrap().as_mut(),
                Instant::now(),
                &mut sender_seen,
            );
        }
    }
    assert!(messages(&receiver_seen, 0) == vec![big]);
}

#[test]
fn a_peer_that_disappears_is_reported_lost() {
    for kind in kinds().into_iter().filter(|&k| k != "loopback") {
        let mut job = make(kind, 3);
        job[0].as_mut().unwrap().send(Instant::now(), 2, b"hello");
        pump(
            &mut job,
            |s| !messages(&s[2], 0).is_empty(),
            Duration::from_secs(5),
        );
        job[2] = None;
        let seen = pump(
            &mut job,
            |s| {
                (0..2).all(|i| {
                    s[i].iter()
                        .any(|e| matches!(e, Event::PeerLost { peer: 2, .. }))
                })
            },
            // A generous deadline (pump fails past it): a loaded machine stretches the
            // heartbeats, not the rule.
            Duration::from_secs(30),
        );
        // Node 0 and 1 still talk to each other.
        assert!(
            !seen[0]
                .iter()
                .any(|e| matches!(e, Event::PeerLost { peer: 1, .. })),
            "{kind}"
        );
    }
}

#[cfg(feature = "rdma")]
#[test]
fn one_sided_reads_return_the_exported_bytes_and_unexported_ranges_are_refused() {
    if !kinds().contains(&"rdma-rc") {
        return;
    }
    // Node 1 exports 64 KiB as region bytes 1 MiB.., node 0 reads pieces of it. The memory is
    // made before the transports, so that it outlives them even when an assertion fails.
    let mut memory: Vec<u8> = (0..65536u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut job = make("rdma-rc", 2);
    let base = 1u64 << 20;
    // SAFETY: `memory` is a live allocation of `memory.len()` bytes, dropped after the
    // transports (declared before them, and dropped after them below), never reallocated; the
    // test only reads it meanwhile.
    let exported = unsafe {
        job[1]
            .as_mut()
            .unwrap()
            .export(base, memory.as_mut_ptr(), memory.len())
    };
    assert!(exported.unwrap());
    // The export is announced over the control mesh: wait until node 0 accepts a read.
    let start = Instant::now();
    loop {
        for t in job.iter_mut().flatten() {
            t.poll_recv(Instant::now());
            t.flush(Instant::now());
        }
        if job[0].as_ref().unwrap().can_read(1, base, 4096) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "export never announced"
        );
    }
    let t0 = job[0].as_mut().unwrap();
    assert!(!t0.can_read(1, base + 65536 - 100, 4096), "past the export");
    assert!(!t0.can_read(1, 0, 4096), "before the export");
    let range = |offset, len, token| dsm_transport::ReadRange { offset, len, token };
    assert!(
        !t0.read(
            Instant::now(),
            1,
            &[range(base, 100, 9), range(0, 4096, 10)]
        ),
        "all or none: one range outside the export refuses the batch"
    );
    assert!(t0.read(Instant::now(), 1, &[range(base + 4096, 8192, 7)]));
    assert!(t0.read(Instant::now(), 1, &[range(base, 100, 8)]));
    t0.flush(Instant::now());
    let seen = pump(
        &mut job,
        |s| {
            s[0].iter()
                .filter(|e| matches!(e, Event::Read { .. }))
                .count()
                == 2
        },
        Duration::from_secs(10),
    );
    let reads: Vec<(u64, Vec<u8>)> = seen[0]
        .iter()
        .filter_map(|e| match e {
            Event::Read {
                from: 1,
                token,
                bytes,
            } => Some((*token, bytes.clone())),
            _ => None,
        })
        .collect();
    assert!(reads.contains(&(7, memory[4096..12288].to_vec())));
    assert!(reads.contains(&(8, memory[..100].to_vec())));
    // Node 1's CPU took no part: it saw no event.
    assert!(seen[1].is_empty());
    drop(job);
    drop(memory);
}
