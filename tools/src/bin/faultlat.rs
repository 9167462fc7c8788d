//! faultlat: what a page fault costs, next to the network floor measured in the same run.
//!
//! `dsmrun -n 2 --set prefetch=off target/release/faultlat [PAGES]`
//!
//! 1. The network floors: node 1 sends 64 bytes, node 0 answers 4 KiB + 64 bytes (the shape of a
//!    page fetch), over plain sockets between the same two processes: UDP with both ends
//!    busy-polling, then both blocking; TCP (TCP_NODELAY) busy-polling.
//! 2. Remote read faults: node 1 touches PAGES pages homed at node 0, one fault each.
//! 3. Remote write faults (fetch and twin) on another PAGES pages.
//! 4. Remote read faults while the home computes (its service thread must be woken and get a
//!    CPU from the computation): up to 500 more pages.
//! 5. Local write faults: node 0 writes its own read-only home pages.
//! 6. A lock acquire + release by the last node (manager: node 0); a lock acquire + release and a
//!    `setcv` with nobody waiting at node 0, which manages both (no message); a barrier of all
//!    nodes.
//! 7. Atomic fetch-adds on a word homed at node 0: by the last node (relaxed, and acq_rel: a
//!    release and an acquire), beside its lock acquire + release above, and by 4 of its threads
//!    at once (the mean cost of an add when they contend); by node 0 itself, beside a plain
//!    atomic fetch-add of the CPU on private memory.
//!
//! Prints one table of medians, 99th percentiles and maxima, and the ratio of the remote read
//! fault to the busy-polling floor.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use dsm_runtime::{AllocPolicy, Dsm, NodeId, PAGE_SIZE, SharedArray};

const WORDS: usize = PAGE_SIZE / 8;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(name: &str, mut us: Vec<f64>) -> (String, f64) {
    us.sort_by(f64::total_cmp);
    let med = percentile(&us, 0.5);
    (
        format!(
            "{name:<44} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7}",
            med,
            percentile(&us, 0.99),
            percentile(&us, 1.0),
            percentile(&us, 0.0),
            us.len()
        ),
        med,
    )
}

/// Node 0 answers `count` pings with page-sized pongs; node 1 times them.
fn udp_floor(dsm: &Dsm, addr: SharedArray<u64>, count: usize, busy: bool) -> Option<Vec<f64>> {
    let bind_ip = std::env::var("DSM_BIND").unwrap_or_else(|_| "127.0.0.1".into());
    let sock = UdpSocket::bind((bind_ip.as_str(), 0)).expect("bind");
    sock.set_nonblocking(busy).expect("nonblocking");
    if !busy {
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
    }
    let me = sock.local_addr().expect("addr");
    if dsm.id() < 2 {
        let ip = match me {
            SocketAddr::V4(a) => u64::from(u32::from(*a.ip())),
            SocketAddr::V6(_) => 0,
        };
        addr.set(dsm.id() * 2, ip);
        addr.set(dsm.id() * 2 + 1, u64::from(me.port()));
    }
    dsm.barrier();
    let peer_of = |n: usize| {
        let ip = std::net::Ipv4Addr::from(addr.get(n * 2) as u32);
        SocketAddr::from((ip, addr.get(n * 2 + 1) as u16))
    };
    let recv = |buf: &mut [u8]| loop {
        match sock.recv_from(buf) {
            Ok(r) => return Some(r),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(_) => return None,
        }
    };
    let mut buf = vec![0u8; 8192];
    let mut out = None;
    match dsm.id() {
        // Both ends connect their sockets, as the runtime's UDP transport does between two
        // nodes (the kernel keeps the route instead of looking it up for every datagram).
        0 => {
            let pong = vec![7u8; PAGE_SIZE + 64];
            for i in 0..count + 10 {
                let Some((_, from)) = recv(&mut buf) else {
                    break;
                };
                if i == 0 {
                    sock.connect(from).expect("connect");
                }
                let _ = sock.send(&pong);
            }
        }
        1 => {
            sock.connect(peer_of(0)).expect("connect");
            let ping = [1u8; 64];
            let mut samples = Vec::with_capacity(count);
            for i in 0..count + 10 {
                let t = Instant::now();
                let _ = sock.send(&ping);
                if recv(&mut buf).is_none() {
                    break;
                }
                if i >= 10 {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            out = Some(samples);
        }
        _ => {}
    }
    dsm.barrier();
    out
}

/// The same exchange over TCP (TCP_NODELAY, both ends busy-polling).
fn tcp_floor(dsm: &Dsm, addr: SharedArray<u64>, count: usize) -> Option<Vec<f64>> {
    use std::io::{Read, Write};
    let bind_ip = std::env::var("DSM_BIND").unwrap_or_else(|_| "127.0.0.1".into());
    let spin_read = |s: &mut std::net::TcpStream, buf: &mut [u8]| -> bool {
        let mut got = 0;
        while got < buf.len() {
            match s.read(&mut buf[got..]) {
                Ok(0) => return false,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(_) => return false,
            }
        }
        true
    };
    let spin_write = |s: &mut std::net::TcpStream, buf: &[u8]| -> bool {
        let mut sent = 0;
        while sent < buf.len() {
            match s.write(&buf[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(_) => return false,
            }
        }
        true
    };
    let mut out = None;
    if dsm.id() == 0 {
        let l = std::net::TcpListener::bind((bind_ip.as_str(), 0)).expect("listen");
        let local = l.local_addr().expect("addr");
        if let SocketAddr::V4(a) = local {
            addr.set(4, u64::from(u32::from(*a.ip())));
        }
        addr.set(5, u64::from(local.port()));
        dsm.barrier();
        let (mut s, _) = l.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        s.set_nonblocking(true).expect("nonblocking");
        let pong = vec![7u8; PAGE_SIZE + 64];
        let mut ping = [0u8; 64];
        for _ in 0..count + 10 {
            if !spin_read(&mut s, &mut ping) || !spin_write(&mut s, &pong) {
                break;
            }
        }
    } else {
        dsm.barrier();
        if dsm.id() == 1 {
            let ip = std::net::Ipv4Addr::from(addr.get(4) as u32);
            let mut s = std::net::TcpStream::connect((ip, addr.get(5) as u16)).expect("connect");
            s.set_nodelay(true).expect("nodelay");
            s.set_nonblocking(true).expect("nonblocking");
            let mut pong = vec![0u8; PAGE_SIZE + 64];
            let mut samples = Vec::with_capacity(count);
            for i in 0..count + 10 {
                let t = Instant::now();
                if !spin_write(&mut s, &[1u8; 64]) || !spin_read(&mut s, &mut pong) {
                    break;
                }
                if i >= 10 {
                    samples.push(t.elapsed().as_secs_f64() * 1e6);
                }
            }
            out = Some(samples);
        }
    }
    dsm.barrier();
    out
}

fn main() {
    let args = dsm_apps::args(
        "faultlat",
        "Fault, lock and barrier latency next to the floors",
        &[("PAGES", "pages faulted per node (default 2000)")],
    );
    let pages = dsm_apps::arg_count(&args, 0, "pages", 2000);
    let dsm = dsm_runtime::init().unwrap_or_else(|e| {
        eprintln!("faultlat: {e}");
        std::process::exit(2)
    });
    if dsm.nodes() < 2 {
        eprintln!(
            "faultlat needs 2 nodes: dsmrun -n 2 --set prefetch=off {}",
            std::env::args().next().unwrap_or_default()
        );
        std::process::exit(2);
    }
    let me = dsm.id();
    let busy_pages = pages.min(500);
    let addr: SharedArray<u64> = dsm.alloc(6, AllocPolicy::OnNode(NodeId(1))).expect("alloc");
    let data: SharedArray<u64> = dsm
        .alloc(
            (2 * pages + busy_pages) * WORDS,
            AllocPolicy::OnNode(NodeId(0)),
        )
        .expect("alloc");
    if me == 0 {
        for p in 0..2 * pages + busy_pages {
            data.set(p * WORDS, p as u64 + 1);
        }
    }
    dsm.barrier();
    let busy = udp_floor(&dsm, addr, 2000, true);
    let blocking = udp_floor(&dsm, addr, 2000, false);
    let tcp = tcp_floor(&dsm, addr, 2000);
    dsm.start_stats();
    let mut rows = Vec::new();
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    if me == 1 {
        let mut sum = 0;
        for p in 0..pages {
            let t = Instant::now();
            sum += data.get(p * WORDS);
            reads.push(t.elapsed().as_secs_f64() * 1e6);
        }
        assert_eq!(sum, (1..=pages as u64).sum::<u64>(), "values read");
        for p in pages..2 * pages {
            let t = Instant::now();
            data.set(p * WORDS + 1, 5);
            writes.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    dsm.barrier();
    // The home computes (2 s at most) while node 1 faults.
    let mut busy_reads = Vec::new();
    if me == 0 {
        let end = Instant::now() + Duration::from_secs(2);
        let mut x = 1.0f64;
        while Instant::now() < end {
            for _ in 0..10_000 {
                x = std::hint::black_box(x * 1.000_000_1 + 1e-9);
            }
        }
        std::hint::black_box(x);
    } else if me == 1 {
        // Let node 0 start computing.
        std::thread::sleep(Duration::from_millis(20));
        for p in 2 * pages..2 * pages + busy_pages {
            let t = Instant::now();
            std::hint::black_box(data.get(p * WORDS));
            busy_reads.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    dsm.barrier();
    if me == 1 {
        let (b, busy_med) = summary(
            "UDP round trip 64 B / 4 KiB, busy-polling",
            busy.unwrap_or_default(),
        );
        rows.push(b);
        rows.push(
            summary(
                "UDP round trip 64 B / 4 KiB, blocking",
                blocking.unwrap_or_default(),
            )
            .0,
        );
        rows.push(
            summary(
                "TCP round trip 64 B / 4 KiB, busy-polling",
                tcp.unwrap_or_default(),
            )
            .0,
        );
        let (r, read_med) = summary("remote read fault (GETP)", reads);
        rows.push(r);
        rows.push(summary("remote write fault (GETP + twin)", writes).0);
        rows.push(summary("remote read fault, home computing", busy_reads).0);
        let s = dsm.stats().core;
        if s.prefetch_requested > 0 {
            eprintln!(
                "faultlat: prefetch is on; run with --set prefetch=off for one fetch per fault"
            );
        }
        println!(
            "{:<44} {:>9} {:>9} {:>9} {:>9} {:>7}",
            "what (microseconds)", "median", "p99", "max", "min", "samples"
        );
        for row in &rows {
            println!("{row}");
        }
        println!(
            "remote read fault / busy UDP round trip = {:.2}",
            read_med / busy_med
        );
    }
    dsm.barrier();
    if me == 0 {
        let mut local = Vec::with_capacity(pages);
        for p in 0..pages {
            let t = Instant::now();
            data.set(p * WORDS + 2, 9);
            local.push(t.elapsed().as_secs_f64() * 1e6);
        }
        // Printed after node 1's table (node 1 printed before the barrier).
        std::thread::sleep(Duration::from_millis(50));
        println!(
            "{}",
            summary("local write fault (home page, read-only)", local).0
        );
    }
    dsm.barrier();
    // Synchronisation: a lock managed by node 0, taken and released by the last node; then
    // barriers across all nodes (run with -n 4 or -n 8 to see them grow).
    let reps = 500;
    if me == dsm.nodes() - 1 {
        let mut lock = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            drop(dsm.lock(0));
            lock.push(t.elapsed().as_secs_f64() * 1e6);
        }
        println!(
            "{}",
            summary("lock acquire + release (manager on node 0)", lock).0
        );
    }
    dsm.barrier();
    // Calls that need no message: a lock whose manager is this node, taken and released with
    // nobody else asking (node 0 manages lock 0), and a condition variable set and cleared with
    // nobody waiting (node 0 manages variable 0).
    if me == 0 {
        let mut lock = Vec::with_capacity(reps * 10);
        for _ in 0..reps * 10 {
            let t = Instant::now();
            drop(dsm.lock(0));
            lock.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let mut cv = Vec::with_capacity(reps * 10);
        for _ in 0..reps * 10 {
            let t = Instant::now();
            dsm.setcv(0);
            cv.push(t.elapsed().as_secs_f64() * 1e6);
            dsm.resetcv(0);
        }
        println!(
            "{}",
            summary("lock acquire + release (manager here)", lock).0
        );
        println!("{}", summary("setcv, nobody waiting (manager here)", cv).0);
    }
    dsm.barrier();
    // Atomics on a word homed at node 0.
    let word: SharedArray<u64> = dsm
        .alloc(1, AllocPolicy::OnNode(NodeId(0)))
        .expect("alloc the atomic word");
    dsm.barrier();
    let timed = |n: usize, order: std::sync::atomic::Ordering| {
        let counter = dsm.atomic_u64(word, 0);
        (0..n)
            .map(|_| {
                let t = Instant::now();
                counter.fetch_add(1, order);
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect::<Vec<f64>>()
    };
    if me == dsm.nodes() - 1 && me != 0 {
        let relaxed = timed(reps, std::sync::atomic::Ordering::Relaxed);
        let acq_rel = timed(reps, std::sync::atomic::Ordering::AcqRel);
        println!("{}", summary("remote atomic fetch-add, relaxed", relaxed).0);
        println!("{}", summary("remote atomic fetch-add, acq_rel", acq_rel).0);
        // Threads of one node adding to the same remote word at once (a work queue's head):
        // what each add costs when they contend.
        const THREADS: usize = 4;
        let each = reps.max(THREADS) / THREADS;
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    let counter = dsm.atomic_u64(word, 0);
                    for _ in 0..each {
                        counter.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    }
                });
            }
        });
        let per_add = t.elapsed().as_secs_f64() * 1e6 / (THREADS * each) as f64;
        println!(
            "remote atomic fetch-add, acq_rel, {THREADS} threads of a node at once: {per_add:.2} us \
             per add (mean of {})",
            THREADS * each
        );
    }
    dsm.barrier();
    if me == 0 {
        let home = timed(reps * 10, std::sync::atomic::Ordering::Relaxed);
        let cpu = std::sync::atomic::AtomicU64::new(0);
        let plain: Vec<f64> = (0..reps * 10)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(&cpu).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        println!(
            "{}",
            summary("atomic fetch-add, home here, relaxed", home).0
        );
        println!(
            "{}",
            summary("CPU atomic fetch-add (private memory)", plain).0
        );
        // Below the clock's resolution: the mean of many in a row, in nanoseconds.
        let n = 200_000u32;
        let counter = dsm.atomic_u64(word, 0);
        let t = Instant::now();
        for _ in 0..n {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let home_ns = t.elapsed().as_secs_f64() * 1e9 / f64::from(n);
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(&cpu).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let cpu_ns = t.elapsed().as_secs_f64() * 1e9 / f64::from(n);
        println!(
            "atomic fetch-add, home here, relaxed: {home_ns:.1} ns; CPU atomic fetch-add: \
             {cpu_ns:.1} ns (means of {n} in a row)"
        );
    }
    dsm.barrier();
    let mut barrier = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        dsm.barrier();
        barrier.push(t.elapsed().as_secs_f64() * 1e6);
    }
    if me == 0 {
        println!(
            "{}",
            summary(&format!("barrier, {} nodes", dsm.nodes()), barrier).0
        );
    }
    dsm.barrier();
    dsm.exit();
}
