//! Bad configuration, hosts and options: one line naming the file, line, key or value and what is
//! allowed; exit status 2; no node started.

use std::process::Command;
use std::time::Duration;

use dsm_tests::{bin, run_with_deadline, text};

struct Case {
    name: &'static str,
    jiaconf: Option<&'static str>,
    jiahosts: Option<&'static str>,
    env: &'static [(&'static str, &'static str)],
    args: &'static [&'static str],
    expect: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "unknown key",
        jiaconf: Some("# ok\ncolour = blue\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[
            ".jiaconf:2:",
            "unknown key `colour`",
            "known keys: comm_type",
        ],
    },
    Case {
        name: "bad value",
        jiaconf: Some("prefetch = maybe\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[".jiaconf:1:", "prefetch = maybe", "allowed: on or off"],
    },
    Case {
        name: "out of range",
        jiaconf: Some("prefetch = on\nmsg_queue_size = 100000\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[".jiaconf:2:", "msg_queue_size = 100000", "1 to 4096"],
    },
    Case {
        name: "not key = value",
        jiaconf: Some("prefetch on\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[".jiaconf:1:", "is not `key = value`"],
    },
    Case {
        name: "bad hex",
        jiaconf: Some("global_start_addr = 0xZZ\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[
            ".jiaconf:1:",
            "global_start_addr = 0xZZ",
            "page-aligned hex",
        ],
    },
    Case {
        name: "bad environment",
        jiaconf: None,
        jiahosts: None,
        env: &[("DSM_CACHE_PAGES", "0")],
        args: &["-n", "2"],
        expect: &[
            "environment variable DSM_CACHE_PAGES",
            "cache_pages = 0",
            "32 to 16777216",
        ],
    },
    Case {
        name: "bad flag",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["-n", "2", "--set", "region_gib=99999"],
        expect: &["--set region_gib=99999", "1 to 16384"],
    },
    Case {
        name: "bad transport",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["-n", "2", "--transport", "carrier-pigeon"],
        expect: &[
            "--transport",
            "comm_type = carrier-pigeon",
            "udp, tcp, rdma-rc, rdma-ud",
        ],
    },
    Case {
        name: "rdma not built",
        jiaconf: Some("comm_type = rdma\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[
            ".jiaconf:1: comm_type rdma-rc",
            "--features dsm-runtime/rdma",
        ],
    },
    Case {
        name: "rdma named in the environment",
        jiaconf: None,
        jiahosts: None,
        env: &[("DSM_COMM_TYPE", "rdma-ud")],
        args: &["-n", "2"],
        expect: &["environment variable DSM_COMM_TYPE: comm_type rdma-ud"],
    },
    Case {
        name: "rdma port out of range",
        jiaconf: Some("# RDMA\nrdma_port = 0\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[".jiaconf:2:", "rdma_port = 0", "1 to 255"],
    },
    Case {
        name: "rdma gid index not a number",
        jiaconf: None,
        jiahosts: None,
        env: &[("DSM_RDMA_GID_INDEX", "third")],
        args: &["-n", "2"],
        expect: &[
            "DSM_RDMA_GID_INDEX",
            "rdma_gid_index = third",
            "auto",
            "0 to 255",
        ],
    },
    Case {
        name: "one-sided reads neither on nor off",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["-n", "2", "--set", "one_sided_reads=sometimes"],
        expect: &["one_sided_reads = sometimes", "on or off"],
    },
    Case {
        name: "rdma device name with a space",
        jiaconf: Some("rdma_device = mlx5 0\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[".jiaconf:1:", "rdma_device = mlx5 0", "device name"],
    },
    Case {
        name: "unresolvable host",
        jiaconf: None,
        jiahosts: Some("127.0.0.1\nno-such-host.invalid\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[".jiahosts:2:", "cannot resolve host `no-such-host.invalid`"],
    },
    Case {
        name: "too few hosts",
        jiaconf: None,
        jiahosts: Some("127.0.0.1\n127.0.0.1\n"),
        env: &[],
        args: &["--hosts", ".jiahosts", "-n", "5"],
        expect: &["-n 5", "lists only 2 hosts"],
    },
    Case {
        name: "bad hosts line",
        jiaconf: None,
        jiahosts: Some("127.0.0.1 root secret extra\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[".jiahosts:1:", "expected `address [user [password]]`"],
    },
    Case {
        name: "unspecified address as a host",
        jiaconf: None,
        jiahosts: Some("127.0.0.1\n0.0.0.0\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[".jiahosts:2:", "`0.0.0.0` is the unspecified address"],
    },
    Case {
        name: "broadcast address as a host",
        jiaconf: None,
        jiahosts: Some("127.0.0.1\n255.255.255.255\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[".jiahosts:2:", "`255.255.255.255` is the broadcast address"],
    },
    Case {
        name: "loopback broadcast address as a host",
        jiaconf: None,
        jiahosts: Some("127.255.255.255\n127.0.0.1\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[".jiahosts:1:", "`127.255.255.255` is a broadcast address"],
    },
    Case {
        name: "multicast address as a host",
        jiaconf: None,
        jiahosts: Some("127.0.0.1\n224.0.0.1\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[".jiahosts:2:", "`224.0.0.1` is a multicast address"],
    },
    Case {
        name: "bad impairment",
        jiaconf: None,
        jiahosts: None,
        env: &[("DSM_IMPAIR", "drop=lots")],
        args: &["-n", "2"],
        expect: &["environment variable DSM_IMPAIR", "drop=lots"],
    },
    Case {
        name: "negative impairment delay",
        jiaconf: None,
        jiahosts: None,
        env: &[("DSM_IMPAIR", "reorder=10,delay_us=-1")],
        args: &["-n", "2"],
        expect: &[
            "DSM_IMPAIR",
            "delay_us=-1",
            "allowed a whole number, 0 to 10000000",
        ],
    },
    Case {
        name: "impairment of a transport without our datagrams",
        jiaconf: None,
        jiahosts: None,
        env: &[("DSM_IMPAIR", "drop=50")],
        args: &["-n", "2", "--transport", "tcp"],
        expect: &[
            "DSM_IMPAIR=drop=50",
            "comm_type = tcp sends no datagrams of ours",
            "allowed with udp or rdma-ud",
        ],
    },
    Case {
        name: "region that cannot be reserved",
        jiaconf: Some("global_start_addr = 0x7e0000000000\nregion_gib = 16384\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[
            "cannot reserve 16384 GiB of shared region at 0x7e0000000000",
            "change global_start_addr or region_gib",
        ],
    },
    Case {
        name: "binary configuration",
        jiaconf: Some("prefetch = on\n\u{7f}ELF\u{2}\u{1}\u{1}\0\0\0"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[".jiaconf:2:", "not a text file (byte 0x00 at offset 21)"],
    },
    Case {
        name: "binary hosts",
        jiaconf: None,
        jiahosts: Some("127.0.0.1\0\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[".jiahosts:1:", "not a text file"],
    },
    Case {
        name: "unwritable statistics file",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["-n", "2", "--stats-json", "/nonexistent-dir/stats.json"],
        expect: &[
            "--stats-json /nonexistent-dir/stats.json",
            "cannot be written",
        ],
    },
    Case {
        name: "a cache smaller than one instruction's pages",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["-n", "2", "--set", "cache_pages=1"],
        expect: &[
            "cache_pages = 1",
            "32 to 16777216",
            "one x86-64 instruction can touch 32 pages",
        ],
    },
    Case {
        // A setting handed to the nodes as a variable: checked as any other (it was passed on,
        // and ignored by nodes that take the settings dsmrun resolved).
        name: "bad -x setting",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["-n", "2", "-x", "DSM_PREFETCH=bad"],
        expect: &[
            "-x DSM_PREFETCH=bad",
            "prefetch = bad",
            "allowed: on or off",
        ],
    },
    Case {
        name: "missing config",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["--config", "/nonexistent/jiaconf", "-n", "2"],
        expect: &["/nonexistent/jiaconf", "cannot read"],
    },
];

fn run_case(c: &Case, extra: &[String]) -> (std::process::Output, bool) {
    let dir = std::env::temp_dir().join(format!(
        "dsm-bad-{}-{}",
        std::process::id(),
        c.name.replace(' ', "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(t) = c.jiaconf {
        std::fs::write(dir.join(".jiaconf"), t).unwrap();
    }
    if let Some(t) = c.jiahosts {
        std::fs::write(dir.join(".jiahosts"), t).unwrap();
    }
    let marker = dir.join("node-started");
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.current_dir(&dir)
        .args(c.args)
        .args(extra)
        .arg("touch")
        .arg(&marker);
    for (k, v) in c.env {
        cmd.env(k, v);
    }
    let out = run_with_deadline(cmd, Duration::from_secs(30));
    let started = marker.exists();
    let _ = std::fs::remove_dir_all(dir);
    (out, started)
}

fn check(c: &Case, out: &std::process::Output, started: bool) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}: {}", c.name, text(out));
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{}: one line expected:\n{}",
        c.name,
        text(out)
    );
    for e in c.expect {
        assert!(err.contains(e), "{}: `{e}` missing in: {err}", c.name);
    }
    assert!(!started, "{}: a node was started", c.name);
}

#[test]
fn bad_configuration_hosts_and_options_are_refused_before_any_node_starts() {
    for c in CASES {
        let (out, started) = run_case(c, &[]);
        check(c, &out, started);
    }
}

/// No time to join is not a timeout: refused with the range allowed (it started the nodes and
/// ended them with a stray rendezvous error).
#[test]
fn a_join_timeout_of_nothing_is_refused() {
    let c = Case {
        name: "no time to join",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["--join-timeout", "0", "-n", "2"],
        expect: &["--join-timeout", "0 is not in 1..=604800"],
    };
    let (out, started) = run_case(&c, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    for e in c.expect {
        assert!(err.contains(e), "`{e}` missing in: {err}");
    }
    assert!(!started, "a node was started");
}

#[test]
fn a_base_port_in_use_is_refused_before_any_node_starts() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let c = Case {
        name: "port in use",
        jiaconf: None,
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &["base_port", "is not free"],
    };
    let (out, started) = run_case(&c, &["--set".into(), format!("base_port={port}")]);
    check(&c, &out, started);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("port {port} for node 0")),
        "{}",
        text(&out)
    );
}

/// A 10 MB value is named, not echoed back whole.
#[test]
fn a_huge_value_is_not_echoed_whole() {
    let dir = std::env::temp_dir().join(format!("dsm-bad-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let value = "7".repeat(10 << 20);
    std::fs::write(
        dir.join(".jiaconf"),
        format!("# big\ncache_pages = {value}\n"),
    )
    .unwrap();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.current_dir(&dir).args(["-n", "2", "true"]);
    let out = run_with_deadline(cmd, Duration::from_secs(30));
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.len() < 400, "{} bytes of error", err.len());
    assert!(err.contains(".jiaconf:2: cache_pages = 777"), "{err}");
    assert!(err.contains("(10485760 bytes)"), "{err}");
}

/// A configuration and hosts file saved with a UTF-8 byte-order mark are read as without one.
#[test]
fn a_byte_order_mark_is_accepted() {
    let c = Case {
        name: "byte order mark",
        jiaconf: Some("\u{feff}prefetch = off\n"),
        jiahosts: Some("\u{feff}127.0.0.1\n127.0.0.1\n"),
        env: &[],
        args: &["--hosts", ".jiahosts"],
        expect: &[],
    };
    let (out, started) = run_case(&c, &[]);
    assert!(out.status.success() && started, "{}", text(&out));
}

#[test]
fn a_good_configuration_does_start_the_nodes() {
    // The same harness with nothing wrong: the marker appears, so the checks above can fail.
    let c = Case {
        name: "good",
        jiaconf: Some("prefetch = off\n"),
        jiahosts: None,
        env: &[],
        args: &["-n", "2"],
        expect: &[],
    };
    let (out, started) = run_case(&c, &[]);
    assert!(out.status.success() && started, "{}", text(&out));
}

/// A `DSM_*` variable that is no setting (a typo) is named with the nearest one, by dsmrun and by
/// a node started without it; a job runs as before.
#[test]
fn a_mistyped_dsm_variable_is_named_with_the_nearest_setting() {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2"])
        .arg(bin("matmul"))
        .arg("64")
        .env("DSM_PREFTECH", "off");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let err = String::from_utf8_lossy(&out.stderr);
    let want = "DSM_PREFTECH is not a setting or a variable of the runtime (did you mean DSM_PREFETCH?): ignored";
    assert_eq!(err.matches(want).count(), 1, "said once, by dsmrun:\n{t}");
    assert!(err.contains(&format!("dsmrun: warning: {want}")), "{t}");
    let mut alone = Command::new(bin("matmul"));
    alone.arg("64").env("DSM_PREFTECH", "off");
    let out = run_with_deadline(alone, Duration::from_secs(120));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("dsm node 0: warning: {want}")),
        "{t}"
    );
}

/// `-x DSM_<KEY>=VALUE` sets the job's setting, above the environment, below `--set` (it was
/// passed to the nodes, which take the settings dsmrun resolved, and so ignored).
#[test]
fn a_setting_given_with_x_is_the_jobs() {
    let json = std::env::temp_dir().join(format!("dsm-x-{}.json", std::process::id()));
    let j = json.display().to_string();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "-x", "DSM_COMM_TYPE=tcp", "--stats-json", &j])
        .arg(bin("matmul"))
        .arg("64")
        .env("DSM_COMM_TYPE", "udp");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out));
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(stats["job"]["transport"], "tcp", "{stats}");
    assert_eq!(
        stats["nodes"][0]["transport"]["frames sent"]
            .as_u64()
            .map(|n| n > 0),
        Some(true),
        "{stats}"
    );
}

/// A program that never calls jia_init runs, and dsmrun says that it never joined the job.
#[test]
fn a_program_that_never_joins_is_named_as_such() {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "/bin/true"]);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never called jia_init"),
        "{t}"
    );
}

/// More nodes than this machine's CPUs: said once; so many that starved nodes would time each
/// other out: refused before anything starts, with the setting that allows more.
#[test]
fn oversubscription_is_said_and_too_much_of_it_refused() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", &(cpus + 1).to_string()])
        .arg(bin("matmul"))
        .arg("64");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("they share CPUs").count(), 1, "{t}");
    let many = (cpus * 128 + 1).to_string();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", &many]).arg(bin("matmul")).arg("64");
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("raise peer_timeout_ms to"),
        "{t}"
    );
}

/// Nodes that take long to join are named while dsmrun waits for them (a host that does not
/// answer ssh gave half a minute of silence before).
#[test]
fn nodes_slow_to_join_are_named_while_dsmrun_waits() {
    let probe = bin("probe").display().to_string();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        "2",
        "/bin/sh",
        "-c",
        &format!("sleep 7; exec {probe} faults"),
    ]);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("dsmrun: warning: waiting for nodes 0, 1 to join the job"),
        "{t}"
    );
}
