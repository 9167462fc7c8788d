//! A TCP node out of file descriptors when a stranger connects after setup: it cannot accept
//! the connection, which stays queued, and its listener stays readable. The node stops
//! listening for strangers instead of being woken by its level-triggered poll again and again
//! (its service thread spun at a full CPU until a descriptor was freed). Alone in its binary:
//! it lowers the process's descriptor limit for good.

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use dsm_transport::Transport;
use dsm_transport::tcp::TcpConfig;

mod support;

#[test]
fn a_node_out_of_descriptors_stops_listening_for_strangers_instead_of_spinning() {
    // No heartbeat comes during the test: node 0's poll has the listener alone to report.
    let cfg = TcpConfig {
        heartbeat: Duration::from_secs(60),
        peer_timeout: Duration::from_secs(120),
        connect_timeout: Duration::from_secs(10),
    };
    let (mut job, addrs) = support::tcp_job(2, &cfg);
    let node0 = &mut job[0];

    // The stranger's connection is complete in the kernel before the node can take it.
    let _stranger = TcpStream::connect(addrs[0]).unwrap();
    // No descriptor above 2 can be opened from now on (those open stay usable).
    let pid = std::process::id().to_string();
    let status = Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=3:"])
        .status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "prlimit (util-linux, essential on Debian) lowers this process's limit: {status:?}"
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    while !node0.poll_ready() {
        assert!(Instant::now() < deadline, "the stranger was never seen");
        std::thread::yield_now();
    }
    node0.poll_recv(Instant::now());
    assert!(
        !node0.poll_ready(),
        "the listener, whose stranger cannot be accepted, is still polled: the node would spin"
    );
    assert_eq!(node0.rejected(), 0, "nothing could be accepted");
}
