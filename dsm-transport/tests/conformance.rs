//! One conformance suite for every transport: in-process loopback, UDP and TCP. Each scenario runs
//! on each transport: order per peer, large messages, many peers, bursts, back-pressure, and a
//! peer that disappears.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use dsm_transport::reliable::{Event, ReliableConfig};
use dsm_transport::tcp::{self, TcpConfig, TcpTransport};
use dsm_transport::udp::{self, UdpTransport};
use dsm_transport::{Transport, loopback};

type Job = Vec<Option<Box<dyn Transport>>>;

const PEER_TIMEOUT: Duration = Duration::from_millis(600);

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
            let listeners: Vec<_> = (0..n)
                .map(|_| tcp::listen("127.0.0.1:0".parse().unwrap()).unwrap())
                .collect();
            let addrs: Vec<SocketAddr> =
                listeners.iter().map(|l| l.local_addr().unwrap()).collect();
            let cfg = TcpConfig {
                heartbeat: Duration::from_millis(50),
                peer_timeout: PEER_TIMEOUT,
                connect_timeout: Duration::from_secs(10),
            };
            let handles: Vec<_> = listeners
                .into_iter()
                .enumerate()
                .map(|(i, l)| {
                    let (addrs, cfg) = (addrs.clone(), cfg.clone());
                    std::thread::spawn(move || {
                        TcpTransport::establish(l, i as u16, &addrs, 0xC0FFEE, cfg).unwrap()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| Some(Box::new(h.join().unwrap()) as Box<dyn Transport>))
                .collect()
        }
        _ => unreachable!(),
    }
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
            let Some(t) = t else { continue };
            t.poll_recv(now);
            if t.poll_timeout().is_some_and(|d| d <= now) {
                t.handle_timeout(now);
            }
            while let Some(e) = t.poll_event() {
                seen[i].push(e);
            }
        }
        std::thread::yield_now();
    }
    seen
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

const KINDS: [&str; 3] = ["loopback", "udp", "tcp"];

#[test]
fn messages_arrive_in_order_per_peer() {
    for kind in KINDS {
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
fn large_messages_arrive_whole() {
    for kind in KINDS {
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

#[test]
fn many_peers_all_to_all() {
    for kind in KINDS {
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
    for kind in KINDS {
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
    for kind in KINDS {
        let mut job = make(kind, 2);
        let sent: Vec<Vec<u8>> = (0..48).map(|i| numbered(i, 1 << 20)).collect();
        for m in &sent {
            job[0].as_mut().unwrap().send(Instant::now(), 1, m);
            // Only the sender runs while the receiver is busy elsewhere.
            let t = job[0].as_mut().unwrap();
            t.poll_recv(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(200));
        let seen = pump(
            &mut job,
            |s| messages(&s[1], 0).len() == sent.len(),
            Duration::from_secs(60),
        );
        assert_eq!(messages(&seen[1], 0).len(), sent.len(), "{kind}");
        assert!(messages(&seen[1], 0) == sent, "{kind}: contents");
    }
}

#[test]
fn a_peer_that_disappears_is_reported_lost() {
    for kind in ["udp", "tcp"] {
        let mut job = make(kind, 3);
        job[0].as_mut().unwrap().send(Instant::now(), 2, b"hello");
        pump(
            &mut job,
            |s| !messages(&s[2], 0).is_empty(),
            Duration::from_secs(5),
        );
        let gone = Instant::now();
        job[2] = None;
        let seen = pump(
            &mut job,
            |s| {
                (0..2).all(|i| {
                    s[i].iter()
                        .any(|e| matches!(e, Event::PeerLost { peer: 2, .. }))
                })
            },
            Duration::from_secs(5),
        );
        let took = gone.elapsed();
        assert!(
            took < PEER_TIMEOUT + Duration::from_millis(900),
            "{kind}: noticed after {took:?}"
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
