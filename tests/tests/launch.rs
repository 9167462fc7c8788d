//! Launching anywhere: over ssh to hosts in network namespaces, and under srun or mpirun (their
//! environment variables emulated).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use dsm_tests::{bin, run_with_deadline, stats_row, text, wait_with_deadline};

/// Starts `size` ranks of `program` as a cluster launcher would, with `vars(rank)` set.
fn launch_like(
    size: usize,
    vars: impl Fn(usize) -> Vec<(String, String)>,
    program: &str,
    args: &[&str],
) -> Vec<std::process::Output> {
    launch_like_in(|_| {}, |_| {}, Duration::ZERO, size, vars, program, args)
}

/// [`launch_like`] in a fresh directory made ready by `prepare`, looked at by `after` once every
/// rank has ended, with rank 0 started `rank0_after` the others. No rendezvous file may be left
/// behind.
fn launch_like_in(
    prepare: impl Fn(&std::path::Path),
    after: impl Fn(&std::path::Path),
    rank0_after: Duration,
    size: usize,
    vars: impl Fn(usize) -> Vec<(String, String)>,
    program: &str,
    args: &[&str],
) -> Vec<std::process::Output> {
    let (var, value) = &vars(0)[0];
    let dir =
        std::env::temp_dir().join(format!("dsm-cluster-{}-{var}-{value}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    prepare(&dir);
    let mut children: Vec<_> = (0..size)
        .rev()
        .map(|r| {
            if r == 0 {
                std::thread::sleep(rank0_after);
            }
            let mut c = Command::new(bin(program));
            c.args(args)
                .current_dir(&dir)
                .envs(vars(r))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    children.reverse();
    let outs = children
        .into_iter()
        .map(|c| {
            let pid = c.id();
            let waiter = std::thread::spawn(move || c.wait_with_output().unwrap());
            let start = std::time::Instant::now();
            while !waiter.is_finished() {
                if start.elapsed() > Duration::from_secs(90) {
                    let _ = Command::new("kill").arg(pid.to_string()).status();
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            waiter.join().unwrap()
        })
        .collect();
    after(&dir);
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".dsm-rendezvous"))
        .collect();
    let _ = std::fs::remove_dir_all(dir);
    assert!(left.is_empty(), "rendezvous files left behind: {left:?}");
    outs
}

/// The rendezvous file under attack, as another local user could prepare it: the file's name is
/// a link to a file of the job owner's, and the temporary name rank 0 once used is a
/// world-readable file of someone else's. Rank 0 writes neither (its temporary file is new and
/// private, and replaces the link), the job runs, and nothing is left behind.
#[test]
fn the_rendezvous_file_is_private_new_and_removed() {
    let job = format!("attack{}", std::process::id());
    let victim = std::env::temp_dir().join(format!("dsm-victim-{}", std::process::id()));
    std::fs::write(&victim, "precious\n").unwrap();
    let name = format!(".dsm-rendezvous-{job}.0");
    let outs = launch_like_in(
        |dir| {
            std::os::unix::fs::symlink(&victim, dir.join(&name)).unwrap();
            std::fs::write(dir.join(format!("{name}.tmp")), "someone else's\n").unwrap();
        },
        |dir| {
            // The stranger's file is untouched; take it away before the no-leftovers check.
            let tmp = dir.join(format!("{name}.tmp"));
            assert_eq!(std::fs::read_to_string(&tmp).unwrap(), "someone else's\n");
            std::fs::remove_file(tmp).unwrap();
        },
        Duration::ZERO,
        2,
        |r| {
            vec![
                ("DSM_TEST_ATTACK".into(), "1".into()),
                ("SLURM_PROCID".into(), r.to_string()),
                ("SLURM_NTASKS".into(), "2".into()),
                ("SLURM_JOB_ID".into(), job.clone()),
                ("SLURM_STEP_ID".into(), "0".into()),
            ]
        },
        "matmul",
        &["96"],
    );
    all_ok(&outs, "matmul OK f64 n=96 nodes=2");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let _ = std::fs::remove_file(victim);
}

fn all_ok(outs: &[std::process::Output], want: &str) {
    for (r, o) in outs.iter().enumerate() {
        assert!(o.status.success(), "rank {r}:\n{}", text(o));
    }
    assert!(
        String::from_utf8_lossy(&outs[0].stdout).contains(want),
        "{}",
        text(&outs[0])
    );
}

/// The variables of `mpirun` (PMI) for rank `r` of `size`, with no job id (the rendezvous file
/// then has the default name), in a directory of the test's own (`case`).
fn pmi(case: &str, r: usize, size: usize) -> Vec<(String, String)> {
    vec![
        ("TEST_CASE".into(), case.into()),
        ("PMI_RANK".into(), r.to_string()),
        ("PMI_SIZE".into(), size.to_string()),
    ]
}

/// Mismatched synchronisation under a cluster launcher, which cannot see a node that waits
/// forever: rank 0 watches, as dsmrun does, and ends the job within seconds, saying what every
/// node waits for (it hung forever before).
#[test]
fn mismatched_synchronisation_under_a_cluster_launcher_is_named_by_rank_0() {
    for (case, says) in [
        (
            "stuck-barrier-vs-exit",
            "node 0 waits in jia_barrier; node 1 waits in jia_exit",
        ),
        (
            "stuck-exit-holding-lock",
            "node 0 waits in jia_exit, holding lock 3; node 1 waits in jia_lock(3)",
        ),
    ] {
        let start = std::time::Instant::now();
        let outs = launch_like_in(
            |_| {},
            |_| {},
            Duration::ZERO,
            2,
            |r| pmi(case, r, 2),
            "probe",
            &[case],
        );
        let all: String = outs.iter().map(text).collect();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{case}: ended only after {:?} (killed by the test):\n{all}",
            start.elapsed()
        );
        for (r, o) in outs.iter().enumerate() {
            assert_eq!(o.status.code(), Some(1), "{case}: rank {r}:\n{all}");
        }
        let rank0 = String::from_utf8_lossy(&outs[0].stderr);
        assert!(
            rank0.contains("the job cannot go on") && rank0.contains(says),
            "{case}: rank 0 says what every node waits for:\n{all}"
        );
    }
}

/// Writes at `file` a private rendezvous file of job `job` naming an address that refuses
/// connections (a port bound a moment ago and closed), as a rank 0 killed before every rank
/// joined leaves it.
fn dead_rendezvous(file: &std::path::Path, job: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .unwrap();
    std::io::Write::write_all(
        &mut f,
        format!("DSM1 RENDEZVOUS {job} 127.0.0.1:{port} 00000000000000ab\n").as_bytes(),
    )
    .unwrap();
}

/// A rendezvous file an earlier job left behind (its rank 0 killed before everyone joined), of
/// the same default name, fresh: a rank that reads it before this job's rank 0 replaces it finds
/// its address refusing and waits for the new one (it failed at once with "Connection refused").
#[test]
fn a_rendezvous_file_left_by_an_earlier_job_is_waited_past() {
    let outs = launch_like_in(
        |dir| dead_rendezvous(&dir.join(".dsm-rendezvous-job"), "job"),
        |_| {},
        Duration::from_millis(1500),
        2,
        |r| pmi("stale", r, 2),
        "pi",
        &["100000"],
    );
    all_ok(&outs, "pi OK nodes=2");
}

/// A rank whose rank 0 published this job's rendezvous and then ended (killed before every rank
/// joined) says so within seconds and removes the file; it waited its 120 s in silence, then
/// said only "Connection refused". A rank of a job whose rank 0 cannot publish (the directory
/// not writable) says where it looks while it waits.
#[test]
fn a_rank_whose_rank_0_ended_before_it_joined_says_so_and_removes_the_file() {
    let dir = std::env::temp_dir().join(format!("dsm-rank0-gone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(".dsm-rendezvous-gone");
    dead_rendezvous(&file, "gone");
    let mut c = Command::new(bin("pi"));
    c.arg("100000")
        .current_dir(&dir)
        .env("DSM_JOB_ID", "gone")
        .env("PMI_RANK", "1")
        .env("PMI_SIZE", "2");
    let out = run_with_deadline(c, Duration::from_secs(100));
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("has refused connections for 10 s since: it ended before every rank joined"),
        "{t}"
    );
    assert!(!file.exists(), "the dead file is removed: {t}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ranks_started_by_srun_find_each_other() {
    let outs = launch_like(
        3,
        |r| {
            vec![
                ("SLURM_PROCID".into(), r.to_string()),
                ("SLURM_NTASKS".into(), "3".into()),
                ("SLURM_JOB_ID".into(), format!("t{}", std::process::id())),
                ("SLURM_STEP_ID".into(), "0".into()),
            ]
        },
        "matmul",
        &["128"],
    );
    all_ok(&outs, "matmul OK f64 n=128 nodes=3");
}

#[test]
fn ranks_started_by_mpirun_find_each_other() {
    let outs = launch_like(
        2,
        |r| {
            vec![
                ("OMPI_COMM_WORLD_RANK".into(), r.to_string()),
                ("OMPI_COMM_WORLD_SIZE".into(), "2".into()),
            ]
        },
        "sor",
        &["64", "4"],
    );
    all_ok(&outs, "sor OK nodes=2");
    let outs = launch_like(
        2,
        |r| {
            vec![
                ("PMI_RANK".into(), r.to_string()),
                ("PMI_SIZE".into(), "2".into()),
            ]
        },
        "pi",
        &["100000"],
    );
    all_ok(&outs, "pi OK nodes=2");
}

/// Hosts in network namespaces with sshd, torn down on drop.
struct NetnsCluster {
    id: u32,
    hosts: usize,
    dir: PathBuf,
}

impl NetnsCluster {
    fn up(id: u32, hosts: usize) -> NetnsCluster {
        let dir = std::env::temp_dir().join(format!("dsm-netns-{id}-{}", std::process::id()));
        let c = NetnsCluster { id, hosts, dir };
        let out = c.script("up");
        assert!(
            out.status.success(),
            "netns cluster setup failed (root, iproute2 and openssh-server are needed):\n{}",
            text(&out)
        );
        c
    }

    fn script(&self, what: &str) -> std::process::Output {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("netns/cluster.sh");
        Command::new("bash")
            .arg(script)
            .args([what, &self.id.to_string(), &self.hosts.to_string()])
            .arg(&self.dir)
            .output()
            .unwrap()
    }

    fn addr(&self, h: usize) -> String {
        format!("10.213.{}.{}", self.id, 10 + h)
    }

    /// Runs `program` with one node per entry of `hosts` (1-based host numbers).
    fn run(&self, hosts: &[usize], program: &str, args: &[&str]) -> std::process::Output {
        self.run_with(hosts, &[], program, args)
    }

    /// [`NetnsCluster::run`] with extra dsmrun flags.
    fn run_with(
        &self,
        hosts: &[usize],
        flags: &[&str],
        program: &str,
        args: &[&str],
    ) -> std::process::Output {
        let file = self.dir.join("jiahosts");
        let lines: Vec<String> = hosts.iter().map(|&h| self.addr(h)).collect();
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let ssh = std::fs::read_to_string(self.dir.join("ssh")).unwrap();
        let mut cmd = Command::new(bin("dsmrun"));
        cmd.arg("--hosts")
            .arg(&file)
            .args(flags)
            .arg(bin(program))
            .args(args)
            .env("DSM_SSH", ssh.trim());
        run_with_deadline(cmd, Duration::from_secs(120))
    }
}

/// Loads nftables `rules` in network namespace `ns`.
fn nft(ns: &str, rules: &str) {
    let mut nft = Command::new("ip");
    nft.args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped());
    let mut child = nft.spawn().expect("nft (install nftables)");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), rules.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success(), "nft rules in {ns}");
}

impl Drop for NetnsCluster {
    fn drop(&mut self) {
        let _ = self.script("down");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Four hosts over ssh; the ssh command lines (what `ps` shows every user of a remote host)
/// carry no job cookie.
#[test]
fn matmul_is_exact_on_four_namespace_hosts_over_ssh() {
    let c = NetnsCluster::up(41 + (std::process::id() % 50), 4);
    // ssh through a wrapper that records its arguments.
    let log = c.dir.join("ssh-argv.log");
    let wrapper = c.dir.join("ssh-logged");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ssh = std::fs::read_to_string(c.dir.join("ssh")).unwrap();
    std::fs::write(
        c.dir.join("ssh"),
        format!("{} {}", wrapper.display(), ssh.trim()),
    )
    .unwrap();
    // DSM_ variables reach remote nodes as they reach local ones: DSM_IMPAIR (read by the
    // nodes only) makes the nodes, on remote hosts, drop datagrams (about 250 of them go while
    // the statistics count: at 5%, none dropped has odds of 1 in 300,000).
    let file = c.dir.join("jiahosts");
    let hosts: Vec<String> = (1..=4).map(|h| c.addr(h)).collect();
    std::fs::write(&file, hosts.join("\n") + "\n").unwrap();
    let ssh = std::fs::read_to_string(c.dir.join("ssh")).unwrap();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.arg("--hosts")
        .arg(&file)
        .arg("--stats")
        .arg(bin("matmul"))
        .arg("384")
        .env("DSM_SSH", ssh.trim())
        .env("DSM_IMPAIR", "drop=5,seed=5");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let dropped: u64 = stats_row(&out, "udp impair: dropped").iter().sum();
    assert!(
        dropped > 0,
        "DSM_IMPAIR did not reach the nodes:\n{}",
        text(&out)
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK f64 n=384 nodes=4"),
        "{}",
        text(&out)
    );
    let argv = std::fs::read_to_string(&log).unwrap();
    assert_eq!(argv.lines().count(), 4, "one ssh per node:\n{argv}");
    assert!(
        argv.contains("DSM_RANK=") && !argv.contains("DSM_COOKIE="),
        "the cookie is on the ssh command line:\n{argv}"
    );
}

#[test]
fn matmul_is_exact_on_two_namespace_hosts_with_two_nodes_each() {
    let c = NetnsCluster::up(101 + (std::process::id() % 50), 2);
    let out = c.run(&[1, 1, 2, 2], "matmul", &["256"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK f64 n=256 nodes=4"),
        "{}",
        text(&out)
    );
    let out = c.run(&[1, 2], "lu", &["128", "16"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("lu OK nodes=2"),
        "{}",
        text(&out)
    );
    // Another program path on the remote hosts: a wrapper that leaves a mark, then runs lu.
    let marker = c.dir.join("remote-program-ran");
    let wrapper = c.dir.join("installed-lu");
    let script = format!(
        "#!/bin/sh\ntouch '{}'\nexec '{}' \"$@\"\n",
        marker.display(),
        bin("lu").display()
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let flag = wrapper.display().to_string();
    let out = c.run_with(&[1, 2], &["--remote-program", &flag], "lu", &["128", "16"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("lu OK nodes=2"),
        "{}",
        text(&out)
    );
    assert!(
        marker.exists(),
        "the remote node did not run the given program path"
    );
    // A node started over ssh that crashes or exits is told as a local one is: the signal and
    // 128 + signal (ssh said 255), or its status.
    let out = c.run(&[1, 2], "probe", &["crash-node-1-late"]);
    assert_eq!(out.status.code(), Some(139), "{}", text(&out));
    assert!(
        text(&out).contains("was killed by signal 11"),
        "{}",
        text(&out)
    );
    let out = c.run(&[1, 2], "probe", &["fail-node-1"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    assert!(
        text(&out).contains("exited with status 7"),
        "{}",
        text(&out)
    );
}

#[test]
fn matmul_and_lu_are_exact_with_five_percent_kernel_udp_loss_between_hosts() {
    let c = NetnsCluster::up(151 + (std::process::id() % 50), 3);
    for h in 1..=3 {
        let ns = format!("dsm{}h{h}", c.id);
        // The first rule counts every datagram sent, the second drops one in twenty.
        let rules = "add table inet dsmloss\nadd chain inet dsmloss out { type filter hook output priority 0 ; }\nadd rule inet dsmloss out meta l4proto udp counter\nadd rule inet dsmloss out meta l4proto udp numgen random mod 100 < 5 counter drop\n";
        nft(&ns, rules);
    }
    let out = c.run(&[1, 2, 3], "matmul", &["256"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK f64 n=256 nodes=3"),
        "{}",
        text(&out)
    );
    let out = c.run(&[1, 2, 3], "lu", &["128", "16"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("lu OK nodes=3"),
        "{}",
        text(&out)
    );
    // The kernel did drop datagrams: summed over the hosts, as one host alone may send too few
    // for one in twenty to be sure to hit it (host 1 sent about 100 in a run: 0.95^100 is 0.6%).
    let (mut sent, mut dropped) = (0u64, 0u64);
    let mut listings = String::new();
    for h in 1..=3 {
        let ns = format!("dsm{}h{h}", c.id);
        let listed = Command::new("ip")
            .args([
                "netns", "exec", &ns, "nft", "list", "table", "inet", "dsmloss",
            ])
            .output()
            .unwrap();
        let rules = String::from_utf8_lossy(&listed.stdout).into_owned();
        let counts: Vec<u64> = rules
            .split("packets ")
            .skip(1)
            .filter_map(|r| r.split_whitespace().next()?.parse().ok())
            .collect();
        assert_eq!(counts.len(), 2, "two counters in {ns}:\n{rules}");
        sent += counts[0];
        dropped += counts[1];
        listings += &rules;
    }
    assert!(
        dropped > 0 && dropped < sent,
        "{dropped} of {sent} datagrams dropped:\n{listings}"
    );
}

/// Between hosts joined by a 1,500-byte Ethernet (veth and a bridge), UDP datagrams are cut to
/// the path's MTU and leave and arrive several at a time (one `sendmsg` segmented by the kernel,
/// one `recvmsg` of datagrams coalesced), instead of 64 KB datagrams in 45 IP fragments each:
/// a stream of 64 MB read across arrives exact, also when the kernel drops one send in fifty
/// (a segmented send crosses veth whole, so each drop loses up to 44 datagrams together).
#[test]
fn a_stream_between_hosts_goes_in_datagrams_of_the_path_mtu_and_arrives_exact_under_loss() {
    // (Cluster ids: each test its own range, so tests running at once never share one.)
    let c = NetnsCluster::up(91 + (std::process::id() % 5), 2);
    for loss in [0, 2] {
        if loss > 0 {
            let rules = format!(
                "add table inet dsmloss\nadd chain inet dsmloss out {{ type filter hook output priority 0 ; }}\nadd rule inet dsmloss out meta l4proto udp numgen random mod 100 < {loss} counter drop\n"
            );
            for h in 1..=2 {
                nft(&format!("dsm{}h{h}", c.id), &rules);
            }
        }
        let out = c.run_with(&[1, 2], &["--stats"], "stream", &["64"]);
        assert!(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("stream OK nodes=2 mb=64"),
            "loss {loss}%:\n{}",
            text(&out)
        );
        let sends = stats_row(&out, "udp segmented sends");
        let reads = stats_row(&out, "udp coalesced reads");
        assert!(
            sends.first().is_some_and(|&n| n > 500) && reads.get(1).is_some_and(|&n| n > 500),
            "loss {loss}%: the home's sends segmented {sends:?}, the reader's reads coalesced \
             {reads:?}:\n{}",
            text(&out)
        );
        if loss > 0 {
            let resent = stats_row(&out, "udp retransmissions");
            assert!(
                resent.iter().sum::<u64>() > 0,
                "loss {loss}%: nothing was resent:\n{}",
                text(&out)
            );
        }
    }
    // Host 1's interface and its end of the link at 1,280 bytes, host 2's at 1,500: host 2's
    // datagrams of 1,472 bytes are dropped on the way in, whatever its MTU says. Its probes of
    // that size go unanswered, and its datagrams are of 1,232 bytes instead (before, every
    // datagram over 1,280 bytes was resent until the peer was taken for lost: the job ended
    // after 10 s of silence). (A job long enough says so: probes go six times.)
    for h in 1..=2 {
        let _ = Command::new("ip")
            .args(["netns", "exec", &format!("dsm{}h{h}", c.id)])
            .args(["nft", "delete", "table", "inet", "dsmloss"])
            .status();
    }
    let set_mtu = |args: &[&str]| {
        let ok = Command::new("ip").args(args).status().unwrap().success();
        assert!(ok, "ip {args:?}");
    };
    let ns = format!("dsm{}h1", c.id);
    set_mtu(&["-n", &ns, "link", "set", "eth0", "mtu", "1280"]);
    set_mtu(&["link", "set", &format!("v{}h1", c.id), "mtu", "1280"]);
    let out = c.run(&[1, 2], "stream", &["16"]);
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("stream OK nodes=2 mb=16"),
        "interfaces of 1,280 and 1,500 bytes:\n{}",
        text(&out)
    );
    // A configured size below the path's MTU (1,450 < 1,472) is probed too: it was not, and
    // every job on that link ended after 10 s.
    let out = c.run_with(
        &[1, 2],
        &["--set", "msg_buffer_size=1450"],
        "pi",
        &["100000"],
    );
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("pi OK nodes=2"),
        "msg_buffer_size = 1450 over interfaces of 1,280 and 1,500 bytes:\n{}",
        text(&out)
    );
}

/// Every app is exact with two nodes on each of two hosts joined by a 1,500-byte Ethernet
/// (each node has a peer over loopback and two over the narrow path, whose datagrams are
/// segmented), over UDP with 2% of each host's sends dropped by the kernel: diffs, locks,
/// barriers, condition variables and forwarded pages cut to the path's MTU and reassembled.
#[test]
fn every_app_is_exact_on_two_hosts_of_a_narrow_path_with_kernel_loss() {
    let c = NetnsCluster::up(251 + (std::process::id() % 4), 2);
    let rules = "add table inet dsmloss\nadd chain inet dsmloss out { type filter hook output priority 0 ; }\nadd rule inet dsmloss out meta l4proto udp numgen random mod 100 < 2 counter drop\n";
    for h in 1..=2 {
        nft(&format!("dsm{}h{h}", c.id), rules);
    }
    for (app, args, want) in dsm_tests::SMALL_APPS {
        let out = c.run_with(&[1, 1, 2, 2], &["--stats"], app, args);
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains(want),
            "{app} {args:?}:\n{}",
            text(&out)
        );
    }
    // Node 0's array read by node 1 beside it in place (same_host = memory), by nodes 2 and 3
    // of the other host through the transport: a namespace's abstract sockets are its own.
    let out = c.run_with(&[1, 1, 2, 2], &["--stats"], "stream", &["16"]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("stream OK nodes=4"),
        "stream:\n{}",
        text(&out)
    );
    let read = stats_row(&out, "pages_read_in_place");
    assert!(
        read.len() == 4 && read[1] >= 4096 && read[2] == 0 && read[3] == 0,
        "pages read in place by node {read:?}:\n{}",
        text(&out)
    );
}

/// `dsm-bench --floors-only --hosts` measures between two hosts: the plain TCP stream between
/// them (dsm-bench on both, started by dsmrun), the DSM's streams over UDP and TCP and their
/// ratios to it, and faultlat's latencies; a file of one host, or `--hosts` without
/// `--floors-only`, is refused with status 2 and a reason.
#[test]
fn dsm_bench_measures_the_streams_between_two_hosts_beside_a_plain_tcp_stream() {
    let c = NetnsCluster::up(96 + (std::process::id() % 5), 2);
    let file = c.dir.join("jiahosts");
    std::fs::write(&file, format!("{}\n{}\n", c.addr(1), c.addr(2))).unwrap();
    let ssh = std::fs::read_to_string(c.dir.join("ssh")).unwrap();
    let bench = |args: &[&str], hosts: &std::path::Path| {
        let mut cmd = Command::new(bin("dsm-bench"));
        cmd.args(args)
            .arg("--hosts")
            .arg(hosts)
            .env("DSM_SSH", ssh.trim());
        run_with_deadline(cmd, Duration::from_secs(300))
    };
    let out = bench(&["--floors-only", "--repeat", "1"], &file);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    let row = |name: &str| {
        stdout.lines().find_map(|l| {
            l.strip_prefix(name)?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        })
    };
    for name in [
        "a plain TCP stream between the two hosts (MB/s)",
        "remote pages streamed, UDP, 2 nodes (MB/s)",
        "remote pages streamed, TCP, 2 nodes (MB/s)",
        "remote pages streamed, UDP / plain TCP stream",
        "remote pages streamed, TCP / plain TCP stream",
        "remote read fault, UDP (us)",
    ] {
        assert!(
            row(name).is_some_and(|v| v > 0.0),
            "no `{name}` row:\n{}",
            text(&out)
        );
    }
    assert!(
        stdout.contains(&format!("between {} (the streams' home)", c.addr(1))),
        "{}",
        text(&out)
    );
    // This machine's own floors are not what was asked.
    assert!(row("bare fault + mprotect (us)").is_none(), "{stdout}");
    // A host out of reach: every row missing, status 1, and nothing left running on the host
    // that was reached (its end of the plain stream gives up: no route to the other).
    let unreachable = c.dir.join("unreachable");
    std::fs::write(&unreachable, format!("{}\n10.213.{}.99\n", c.addr(1), c.id)).unwrap();
    let out = bench(&["--floors-only", "--repeat", "1"], &unreachable);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no sample of"), "{}", text(&out));
    let ns = format!("dsm{}h1", c.id);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pids = Command::new("ip")
            .args(["netns", "pids", &ns])
            .output()
            .unwrap();
        let left: Vec<String> = String::from_utf8_lossy(&pids.stdout)
            .split_whitespace()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "dsm-bench")
            })
            .map(str::to_string)
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "dsm-bench still runs on host 1: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let one = c.dir.join("one-host");
    std::fs::write(&one, format!("{}\n", c.addr(1))).unwrap();
    let twice = c.dir.join("one-host-twice");
    std::fs::write(&twice, format!("{0} slots=2\n{0}\n", c.addr(1))).unwrap();
    for (args, hosts, says) in [
        (
            &["--floors-only"][..],
            &one,
            "two different ones are needed",
        ),
        (
            &["--floors-only"][..],
            &twice,
            "two different ones are needed",
        ),
        (&[][..], &file, "--floors-only"),
    ] {
        let out = bench(args, hosts);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(says), "no `{says}`:\n{}", text(&out));
    }
}

/// A remote node's ssh client is the launcher's only view of how that node ends. Killed
/// (SIGKILL): the job ends at once, naming node 1 as out of reach, status 1 (it was told as
/// "killed by signal 9", though nothing signalled the node). Host 2 cut off from the launcher's
/// host (not from host 1) while its node runs: ssh's keep-alives give up and the job ends
/// naming node 1 (dsmrun waited for that ssh forever, its job finished). Both times the nodes
/// end too (node 1, unreachable, by its peer's silence).
#[test]
fn a_remote_node_whose_ssh_is_killed_or_cut_off_is_named() {
    use std::io::BufRead;
    use std::time::Instant;
    let c = NetnsCluster::up(1 + (std::process::id() % 40), 2);
    let hosts = c.dir.join("jiahosts");
    std::fs::write(&hosts, format!("{}\n{}\n", c.addr(1), c.addr(2))).unwrap();
    let ssh = std::fs::read_to_string(c.dir.join("ssh")).unwrap();
    // Starts `probe sleep` and returns once both nodes run, with dsmrun's ssh client of host 2.
    let start = || {
        let mut job = Command::new(bin("dsmrun"))
            .arg("--hosts")
            .arg(&hosts)
            .arg(bin("probe"))
            .arg("sleep")
            .env("DSM_SSH", ssh.trim())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read to its end by a thread of its own (dsmrun forwards the nodes' output there).
        let stdout = std::io::BufReader::new(job.stdout.take().unwrap());
        let (lines_tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in stdout.lines().map_while(Result::ok) {
                let _ = lines_tx.send(l);
            }
        });
        let mut running = 0;
        while running < 2 {
            let line = lines
                .recv_timeout(Duration::from_secs(60))
                .expect("both nodes running within 60 s");
            running += usize::from(line.starts_with("probe: node"));
        }
        let ssh2 = children_of(job.id())
            .into_iter()
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains(&c.addr(2)))
            })
            .expect("dsmrun's ssh client of host 2");
        (job, ssh2)
    };
    let end = |job: std::process::Child| {
        let out = wait_with_deadline(job, Duration::from_secs(90));
        let left = || {
            (1..=2)
                .flat_map(|h| {
                    let ns = format!("dsm{}h{h}", c.id);
                    let pids = Command::new("ip")
                        .args(["netns", "pids", &ns])
                        .output()
                        .unwrap();
                    String::from_utf8_lossy(&pids.stdout)
                        .into_owned()
                        .lines()
                        .filter_map(|p| p.trim().parse::<u32>().ok())
                        .collect::<Vec<_>>()
                })
                .filter(|pid| {
                    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == bin("probe"))
                })
                .collect::<Vec<_>>()
        };
        let deadline = Instant::now() + Duration::from_secs(40);
        while !left().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(
            left(),
            Vec::<u32>::new(),
            "nodes left running:\n{}",
            text(&out)
        );
        out
    };

    let (job, ssh2) = start();
    Command::new("kill")
        .args(["-9", &ssh2.to_string()])
        .status()
        .unwrap();
    let out = end(job);
    let want = format!(
        "node 1 ({}) is out of reach: its ssh client was killed by signal 9 (SIGKILL)",
        c.addr(2)
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains(&want), "{want}:\n{}", text(&out));

    let (job, _) = start();
    let launcher = format!("10.213.{}.1", c.id);
    nft(
        &format!("dsm{}h2", c.id),
        &format!(
            "add table inet dsmcut\n\
             add chain inet dsmcut in {{ type filter hook input priority 0 ; }}\n\
             add chain inet dsmcut out {{ type filter hook output priority 0 ; }}\n\
             add rule inet dsmcut in ip saddr {launcher} drop\n\
             add rule inet dsmcut out ip daddr {launcher} drop\n"
        ),
    );
    let cut = Instant::now();
    let out = end(job);
    assert!(!out.status.success(), "{}", text(&out));
    let want = format!("node 1 ({})", c.addr(2));
    assert!(text(&out).contains(&want), "{want}:\n{}", text(&out));
    assert!(
        cut.elapsed() < Duration::from_secs(80),
        "took {:?}",
        cut.elapsed()
    );
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// A one-node job never meets the rendezvous: it runs past the join timeout.
/// A host whose sshd never answers (its namespace drops every SYN to port 22, and ssh has no
/// connect timeout): dsmrun gives up after `--join-timeout` with status 2, naming the host and
/// ssh; and dsmrun killed with SIGKILL while that ssh hangs leaves no ssh client behind.
#[test]
fn a_host_that_never_answers_ssh_between_hosts_is_named_and_leaves_no_ssh_client() {
    let c = NetnsCluster::up(201 + (std::process::id() % 50), 2);
    let ns = format!("dsm{}h2", c.id);
    let rules = "add table inet dsmdeaf\nadd chain inet dsmdeaf in { type filter hook input priority 0 ; }\nadd rule inet dsmdeaf in tcp dport 22 drop\n";
    nft(&ns, rules);
    // ssh as the cluster gives it, without its connect timeout: it would wait minutes.
    let ssh = std::fs::read_to_string(c.dir.join("ssh")).unwrap();
    let ssh = ssh.trim().replace("-o ConnectTimeout=5", "");
    let hosts = c.dir.join("jiahosts");
    std::fs::write(&hosts, format!("{}\n{}\n", c.addr(1), c.addr(2))).unwrap();
    let dsmrun = |timeout: &str| {
        let mut cmd = Command::new(bin("dsmrun"));
        cmd.args(["--join-timeout", timeout, "--hosts"])
            .arg(&hosts)
            .arg(bin("pi"))
            .arg("1000")
            .env("DSM_SSH", &ssh);
        cmd
    };
    let out = run_with_deadline(dsmrun("5"), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "node 1 did not join within 5 s: ssh to {} did not start the program there",
            c.addr(2)
        )),
        "{}",
        text(&out)
    );

    // The ssh clients of a dsmrun killed with SIGKILL end with it.
    let mut job = dsmrun("60")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let clients = || -> Vec<String> {
        let out = Command::new("pgrep")
            .args(["-f", &format!("ssh .*{}", c.addr(2))])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while clients().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no ssh client to host 2 seen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    job.kill().unwrap();
    let _ = job.wait();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !clients().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = clients();
    for p in &left {
        let _ = Command::new("kill").args(["-9", p]).status();
    }
    assert!(left.is_empty(), "ssh clients outlived dsmrun: {left:?}");

    // A host that refuses ssh at once (a reset): its ssh ends with its own 255 before the node
    // joined, a job that could not start (it ended with 255, as a node's own status).
    nft(
        &ns,
        "flush chain inet dsmdeaf in\nadd rule inet dsmdeaf in tcp dport 22 reject with tcp reset\n",
    );
    let out = run_with_deadline(dsmrun("60"), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "node 1 ({}) ended with status 255 before it joined the job: its ssh could not reach \
             the host",
            c.addr(2)
        )),
        "{}",
        text(&out)
    );
}

#[test]
fn a_one_node_job_runs_longer_than_the_join_timeout() {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        "1",
        "--join-timeout",
        "1",
        "sh",
        "-c",
        "sleep 2; echo done",
    ]);
    let out = run_with_deadline(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "done\n",
        "{}",
        text(&out)
    );
}

/// A process with a job's variables whose rendezvous is gone (a node that replaced itself with
/// exec and joins again) says which node it is and why it joins nothing, status 2 (it said
/// only "rendezvous with ... failed: Connection refused").
#[test]
fn a_node_whose_rendezvous_is_gone_says_why_it_joins_nothing() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(bin("matmul"));
    cmd.arg("64")
        .env("DSM_RANK", "1")
        .env("DSM_SIZE", "2")
        .env("DSM_COOKIE", "1f")
        .env("DSM_RENDEZVOUS", format!("127.0.0.1:{port}"))
        .env("DSM_BIND", "127.0.0.1");
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "node 1: the job's rendezvous at 127.0.0.1:{port} refused the connection"
        )) && text(&out).contains("a node's process joins once"),
        "{}",
        text(&out)
    );
}

/// A node's output passes byte for byte: 1,000 bytes that do not end with a newline stay 1,000
/// (dsmrun added one).
#[test]
fn output_without_a_last_newline_passes_as_it_is() {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        "1",
        "sh",
        "-c",
        "head -c 1000 /dev/zero; printf 'a\\nb'",
    ]);
    let out = run_with_deadline(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out));
    let mut want = vec![0u8; 1000];
    want.extend_from_slice(b"a\nb");
    assert_eq!(out.stdout, want, "{}", text(&out));
}

/// `--tag-output` forwards bytes: a line that is not UTF-8 passes as it is, and so does every
/// line after it.
#[test]
fn tagged_output_forwards_lines_that_are_not_utf8() {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        "1",
        "--tag-output",
        "sh",
        "-c",
        "printf 'caf\\351 latin-1\\nnext line\\nno newline at the end'",
    ]);
    let out = run_with_deadline(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        out.stdout,
        b"[node 0] caf\xe9 latin-1\n[node 0] next line\n[node 0] no newline at the end\n",
        "{}",
        text(&out)
    );
}

/// `dsmrun --tag-output ... | head`: once the reader is gone the node's pipe is closed too, so
/// its next write ends it with SIGPIPE, as a program whose reader left ends, and the job with it
/// (status 141, as `seq 1 100000 | head -1` gives; mpirun aborts on SIGPIPE too), without a
/// panic. The node cannot have written everything first: its 20,000 lines are more than the two
/// pipes hold.
#[test]
fn a_closed_stdout_ends_the_job_as_sigpipe_ends_a_program() {
    let mut child = Command::new(bin("dsmrun"))
        .args([
            "-n",
            "1",
            "--tag-output",
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done; echo finished >&2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one line, then close our end, as `head -1` does.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    let _ = std::io::Read::read(&mut stdout, &mut first);
    drop(stdout);
    let out = wait_or_kill(child, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(
        err.contains("node 0 (127.0.0.1) was killed by signal 13 (SIGPIPE: its output was closed)"),
        "{err}"
    );
    assert!(!err.contains("finished"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // The same with dsmrun's standard error on that pipe too (`2>&1 | head -1`): its verdict
    // meets a closed pipe, and its status is still the job's (it was a panic's, 101).
    let script = format!(
        "{} -n 2 sh -c 'i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done' 2>&1 \
         | head -1; echo status=${{PIPESTATUS[0]}}",
        bin("dsmrun").display()
    );
    let child = Command::new("bash")
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_or_kill(child, Duration::from_secs(60));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.ends_with("status=141\n"), "{said}");
}

/// A write that fails otherwise (standard output a full disk: `/dev/full`) drops the node's
/// lines and nothing more: the node runs to its end and the job ends with its status.
#[test]
fn a_stdout_that_refuses_writes_drops_the_lines_and_the_job_goes_on() {
    let out = Command::new(bin("dsmrun"))
        .args([
            "-n",
            "1",
            "sh",
            "-c",
            "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; echo finished >&2",
        ])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_or_kill(out, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{err}", out.status);
    assert!(err.contains("finished"), "{err}");
}

/// mpirun's spellings: `-np N`, `--hostfile` with Open MPI's `host slots=N` lines, `-x VAR` and
/// `-x VAR=value`; standard input reaches node 0 only (the others read nothing).
#[test]
fn mpirun_spellings_and_stdin_to_node_zero() {
    let dir = std::env::temp_dir().join(format!("dsm-mpirun-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hostfile = dir.join("hostfile");
    std::fs::write(&hostfile, "127.0.0.1 slots=2 max_slots=8\nlocalhost\n").unwrap();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.arg("-np")
        .arg("3")
        .arg("--hostfile")
        .arg(&hostfile)
        .arg(bin("matmul"))
        .arg("64");
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK f64 n=64 nodes=3"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(dir);

    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        "1",
        "-x",
        "DSM_TEST_A=one two",
        "-x",
        "DSM_TEST_B",
        "sh",
        "-c",
    ])
    .arg("echo \"$DSM_TEST_A|$DSM_TEST_B\"")
    .env("DSM_TEST_B", "from here");
    let out = run_with_deadline(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one two|from here\n");

    let mut child = Command::new(bin("dsmrun"))
        .args(["-n", "3"])
        .arg(bin("probe"))
        .arg("stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"the input\n").unwrap();
    }
    let out = wait_or_kill(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stdin OK the input"),
        "{}",
        text(&out)
    );
}

/// Waits for `child`'s output, killing it after `limit` (a hang fails the test, not the run).
fn wait_or_kill(child: std::process::Child, limit: Duration) -> std::process::Output {
    let pid = child.id().to_string();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let finished = done.clone();
    std::thread::spawn(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if finished.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    out
}

/// `--output-filename DIR`: each node's standard output and error in `DIR/1/rank.N/`, as Open
/// MPI lays them out; nothing of the nodes' on dsmrun's own output.
#[test]
fn output_filename_gives_each_node_files_of_its_own() {
    let dir = std::env::temp_dir().join(format!("dsm-output-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dsm_tests::dsmrun(
        3,
        &["--output-filename", dir.to_str().unwrap()],
        "matmul",
        &["128"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("matmul OK"),
        "the result went to dsmrun's output: {}",
        text(&out)
    );
    let read = |rank: usize, which: &str| {
        std::fs::read_to_string(dir.join(format!("1/rank.{rank}/{which}")))
            .unwrap_or_else(|e| panic!("rank {rank} {which}: {e}"))
    };
    assert!(read(0, "stdout").contains("matmul OK f64 n=128 nodes=3"));
    for rank in 1..3 {
        assert_eq!(read(rank, "stdout"), "", "rank {rank} printed");
        let _ = read(rank, "stderr");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bind_to`: 2 nodes on a machine with 2 CPUs or more run on a CPU each (every thread of a
/// node); with `--bind-to none`, or more nodes than CPUs, they may run anywhere.
#[test]
fn nodes_get_a_cpu_each_when_they_fit() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let everywhere = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains(" cpus "))
            .map(|l| l.split_once(" cpus ").unwrap().1.to_string())
            .collect()
    };
    let run = |extra: &[&str], nodes: &str| {
        let mut cmd = Command::new(bin("dsmrun"));
        cmd.args(["-n", nodes])
            .args(extra)
            .arg(bin("probe"))
            .arg("cpus");
        let out = run_with_deadline(cmd, Duration::from_secs(60));
        assert!(out.status.success(), "{}", text(&out));
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        lines.sort();
        lines.join("\n")
    };
    let bound = run(&[], "2");
    let got = everywhere(&bound);
    assert_eq!(got.len(), 2, "{bound}");
    if cpus >= 2 {
        for g in &got {
            let (main, all) = g.split_once(' ').unwrap();
            let main = main.trim_start_matches("main=");
            assert!(main.parse::<usize>().is_ok(), "one CPU each: {bound}");
            assert_eq!(all, format!("all={main}"), "every thread: {bound}");
        }
        assert_ne!(got[0], got[1], "different CPUs: {bound}");
    }
    let free = run(&["--bind-to", "none"], "2");
    let got = everywhere(&free);
    assert_eq!(got.len(), 2, "{free}");
    assert_eq!(got[0], got[1], "the same CPUs as the launcher: {free}");
    if cpus >= 2 {
        assert!(got[0].contains('-') || got[0].contains(','), "{free}");
    }
    let crowded = run(&[], &(cpus + 1).to_string());
    let got = everywhere(&crowded);
    assert_eq!(got.len(), cpus + 1, "{crowded}");
    assert!(
        got.iter().all(|g| g == &got[0]),
        "more nodes than CPUs: none bound: {crowded}"
    );
}

/// A program started directly with a `.jiahosts` (JIAJIA's way) ends as under dsmrun: the same
/// status for each way a job can end, and the failing node named (a crash and `exit(3)` gave 86,
/// and a mismatched barrier hung).
#[test]
fn a_job_started_from_a_jiahosts_ends_with_the_status_dsmrun_gives() {
    let dir = std::env::temp_dir().join(format!("dsm-jiahosts-ends-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = bin("probe");
    for (case, nodes, status, says) in [
        ("counter", 2, 0, "counter OK"),
        ("fail-node-1", 2, 7, "node 1: it exited with status 7"),
        (
            "crash-node-1-late",
            2,
            139,
            "node 1: it was killed by signal 11",
        ),
        (
            "exit-without-leaving",
            3,
            1,
            "node 2: it exited with status 0 without leaving the job",
        ),
        (
            "stuck-barrier-vs-exit",
            2,
            1,
            "node 0 waits in jia_barrier; node 1 waits in jia_exit",
        ),
    ] {
        std::fs::write(dir.join(".jiahosts"), "127.0.0.1\n".repeat(nodes)).unwrap();
        let mut cmd = Command::new(&probe);
        cmd.arg(case).current_dir(&dir);
        let out = run_with_deadline(cmd, Duration::from_secs(90));
        assert_eq!(
            out.status.code(),
            Some(status),
            "{case} from .jiahosts:\n{}",
            text(&out)
        );
        assert!(
            text(&out).contains(says),
            "{case} from .jiahosts: no `{says}`:\n{}",
            text(&out)
        );
        let under_dsmrun = dsm_tests::dsmrun(nodes, &[], "probe", &[case]);
        assert_eq!(
            under_dsmrun.status.code(),
            Some(status),
            "{case} under dsmrun:\n{}",
            text(&under_dsmrun)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A self-launched job (a `.jiahosts`, UDP) whose node 0 is killed with SIGKILL mid-job: the
/// nodes it started end at once, naming node 0, not after the transport's silence
/// (`peer_timeout_ms`, 120 s here; 10 s by default).
#[test]
fn a_self_launched_job_whose_node_0_is_killed_ends_at_once_naming_it() {
    use std::io::{BufRead, Read};
    use std::sync::mpsc;
    use std::time::Instant;
    let dir = std::env::temp_dir().join(format!("dsm-jiahosts-kill0-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".jiahosts"), "127.0.0.1\n".repeat(3)).unwrap();
    let mut job = Command::new(bin("probe"))
        .arg("sleep")
        .current_dir(&dir)
        .env("DSM_PEER_TIMEOUT_MS", "120000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let node0 = job.id();
    // Every node's output goes to node 0's pipes (the nodes it starts inherit them).
    let (lines_tx, lines) = mpsc::channel();
    let stdout = job.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(l);
        }
    });
    let (err_tx, err) = mpsc::channel();
    let mut stderr = job.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        let _ = err_tx.send(s);
    });
    let mut running = 0;
    while running < 3 {
        let l = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("3 nodes running within 60 s");
        running += usize::from(l.contains("probe: node") && l.contains("running"));
    }
    let started: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(node0)
            })
        })
        .collect();
    assert!(!started.is_empty(), "no node started by node 0 found");
    let _ = job.kill();
    let _ = job.wait();
    let killed = Instant::now();
    // The pipe closes once every node holding it has ended.
    let said = err.recv_timeout(Duration::from_secs(60));
    if said.is_err() {
        // Still running (so these pids are still theirs): they must not outlive the test.
        for pid in &started {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let said = said.expect("the nodes node 0 started still ran 60 s after it was killed");
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "took {:?}:\n{said}",
        killed.elapsed()
    );
    assert!(
        said.contains("lost node 0: its process ended"),
        "no word of node 0:\n{said}"
    );
}
