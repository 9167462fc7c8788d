//! Micro-benchmark of the acknowledgement/retransmission machine and a real loopback round trip:
//! `cargo bench -p dsm-transport`.

use std::hint::black_box;
use std::time::Instant;

use dsm_transport::reliable::{Event, Reliable, ReliableConfig};
use dsm_transport::udp::{self, UdpTransport};

fn bench(n: u64, mut f: impl FnMut()) -> f64 {
    let mut batches: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    batches.sort_by(f64::total_cmp);
    batches[3]
}

fn main() {
    let t0 = Instant::now();
    let mut rows = Vec::new();
    for size in [64usize, 4160, 100_000] {
        let mut a = Reliable::new(0, 2, 1, ReliableConfig::default(), t0);
        let mut b = Reliable::new(1, 2, 1, ReliableConfig::default(), t0);
        let msg = vec![5u8; size];
        rows.push((
            format!("reliable: send + deliver + ack, {size} B message"),
            bench(20_000, || {
                let now = Instant::now();
                a.send(1, &msg);
                a.flush(now);
                while let Some((_, d)) = a.poll_transmit() {
                    b.handle_datagram(now, 0, &d).unwrap();
                }
                b.flush(now);
                while let Some(e) = b.poll_event() {
                    black_box(e);
                }
                while let Some((_, d)) = b.poll_transmit() {
                    a.handle_datagram(now, 1, &d).unwrap();
                }
            }),
        ));
    }
    // A real round trip through two UDP transports on loopback, page-shaped.
    let s0 = udp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let s1 = udp::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let peers = vec![s0.local_addr().unwrap(), s1.local_addr().unwrap()];
    let mut a = UdpTransport::new(s0, 0, peers.clone(), 9, ReliableConfig::default(), t0);
    let mut b = UdpTransport::new(s1, 1, peers, 9, ReliableConfig::default(), t0);
    let page = vec![1u8; 4096 + 64];
    let wait = |t: &mut UdpTransport| loop {
        t.poll_recv(Instant::now());
        if let Some(Event::Message { bytes, .. }) = t.poll_event() {
            return bytes;
        }
    };
    rows.push((
        "udp transport: 64 B request, 4 KiB reply (one thread)".into(),
        bench(2_000, || {
            a.send(1, &[0u8; 64]);
            a.flush(Instant::now());
            black_box(wait(&mut b));
            b.send(0, &page);
            b.flush(Instant::now());
            black_box(wait(&mut a));
        }),
    ));
    println!("{:<56} {:>12}", "dsm-transport micro-benchmark", "ns/op");
    for (name, ns) in rows {
        println!("{name:<56} {ns:>12.0}");
    }
}
