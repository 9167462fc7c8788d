//! What the transport's test binaries share.

use std::net::SocketAddr;

use dsm_transport::tcp::{self, TcpConfig, TcpTransport};

/// A TCP job of `n` nodes on loopback with `cfg`, every node set up (each on its own thread, as
/// the nodes of a job connect to each other at once), in node order, with their addresses.
pub fn tcp_job(n: u16, cfg: &TcpConfig) -> (Vec<TcpTransport>, Vec<SocketAddr>) {
    let listeners: Vec<_> = (0..n)
        .map(|_| tcp::listen("127.0.0.1:0".parse().unwrap()).unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
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
    let job = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (job, addrs)
}
