//! A hostile network: every application exact over UDP with 5% loss, 1% duplication and
//! reordering (our own impairment, by seed), and with real kernel loss (nftables in network
//! namespaces).

use std::process::Command;
use std::time::Duration;

use dsm_tests::{bin, run_with_deadline, stats_row, text};

const APPS: &[(&str, &[&str], &str)] = dsm_tests::SMALL_APPS;

fn run(app: &str, args: &[&str], impair: &str, nodes: usize) -> std::process::Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", &nodes.to_string(), "--stats"])
        .arg(bin(app))
        .args(args)
        .env("DSM_IMPAIR", impair);
    run_with_deadline(cmd, Duration::from_secs(180))
}

#[test]
fn every_app_is_exact_with_loss_duplication_and_reordering() {
    let mut dropped = 0u64;
    for (i, (app, args, want)) in APPS.iter().enumerate() {
        let impair = format!("drop=5,dup=1,reorder=10,delay_us=500,seed={}", 11 + i);
        let out = run(app, args, &impair, 3);
        let t = text(&out);
        assert!(out.status.success(), "{app}: {t}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(want),
            "{app}: {t}"
        );
        dropped += stats_row(&out, "udp impair: dropped").iter().sum::<u64>();
    }
    // The impairment really happened: counted over every app, as the table counts from the
    // job's start, and a small job (`is`) may send too few datagrams for one in twenty to hit.
    assert!(dropped > 0, "no datagram dropped in any app");
}

#[test]
fn heavy_loss_is_survived_too() {
    let out = run(
        "matmul",
        &["128"],
        "drop=25,dup=5,reorder=30,delay_us=2000,seed=5",
        2,
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK"),
        "{}",
        text(&out)
    );
}

/// A job whose impairment drops every datagram cannot go on: it ends once a peer has been
/// silent for `peer_timeout_ms`, and the message names the impairment as a likely cause.
#[test]
fn a_job_that_drops_every_datagram_ends_naming_its_impairment() {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "--set", "peer_timeout_ms=1000"])
        .arg(bin("pi"))
        .env("DSM_IMPAIR", "drop=100,seed=3");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert!(
        !out.status.success(),
        "a job with every datagram dropped succeeded: {t}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("DSM_IMPAIR=drop=100,seed=3 drops"),
        "the impairment is not named: {t}"
    );
}

/// Sums a `--stats` row over the nodes (`msgs received GETPGRANT  0  4421 ...`).
fn stat(stderr: &str, row: &str) -> u64 {
    stderr
        .lines()
        .find(|l| l.starts_with(row) && l[row.len()..].starts_with(' '))
        .map_or(0, |l| {
            l[row.len()..]
                .split_whitespace()
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        })
}

/// Runs `dsmrun -n NODES --stats --transport TRANSPORT SETTINGS.. stream STREAM_ARGS..` with
/// `DSM_IMPAIR=impair` (none if empty) and `env`, and checks that it ends well with `expect` in
/// its output: its log and statistics (stderr), and all of its text for messages.
fn stream_job(
    nodes: usize,
    transport: &str,
    impair: &str,
    settings: &[&str],
    env: &[(&str, &str)],
    stream_args: &[&str],
    expect: &str,
) -> (String, String) {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        &nodes.to_string(),
        "--stats",
        "--transport",
        transport,
    ])
    .args(settings.iter().flat_map(|s| ["--set", s]))
    .envs(env.iter().copied())
    .arg(bin("stream"))
    .args(stream_args);
    if !impair.is_empty() {
        cmd.env("DSM_IMPAIR", impair);
    }
    let out = run_with_deadline(cmd, Duration::from_secs(180));
    let t = text(&out);
    let what = format!("{transport} {impair} {settings:?}");
    assert!(out.status.success(), "{what}: {t}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(expect),
        "{what}: {t}"
    );
    (String::from_utf8_lossy(&out.stderr).into_owned(), t)
}

/// Runs of pages (grants of many pages, read-ahead windows of megabytes, a cache smaller than
/// the stream, evicting in batches) arrive exact over UDP with loss, duplication and reordering,
/// with the default datagram and a small one (runs of two pages), and over TCP: through the
/// transport (`same_host = transport`: the nodes share this host, and would otherwise read each
/// other's pages in place).
#[test]
fn runs_of_pages_arrive_exact_under_loss_duplication_and_reordering() {
    for (transport, impair, settings) in [
        (
            "udp",
            "drop=3,dup=2,reorder=10,delay_us=300,seed=21",
            &[][..],
        ),
        (
            "udp",
            "drop=3,dup=2,reorder=10,delay_us=300,seed=22",
            &["msg_buffer_size=9000"][..],
        ),
        ("tcp", "", &[][..]),
    ] {
        let settings = [&["cache_pages=2048", "same_host=transport"][..], settings].concat();
        let (err, t) = stream_job(
            3,
            transport,
            impair,
            &settings,
            &[],
            &["24"],
            "stream OK nodes=3 mb=24",
        );
        let what = format!("{transport} {impair} {settings:?}");
        let (grants, bytes) = (
            stat(&err, "msgs received GETPGRANT"),
            stat(&err, "bytes received GETPGRANT"),
        );
        // Two readers of 6,144 pages each, through a cache of 2,048: runs, not single pages.
        assert!(grants > 0, "{what}: no grants counted:\n{t}");
        let pages_per_grant = bytes as f64 / grants as f64 / 4096.0;
        let least = if settings.len() == 2 { 4.0 } else { 1.5 };
        assert!(
            pages_per_grant >= least,
            "{what}: {pages_per_grant:.1} pages per grant ({grants} grants, {bytes} bytes)\n{t}"
        );
        assert!(
            stat(&err, "evictions") >= 2 * 4096,
            "{what}: the stream did not turn the cache over:\n{t}"
        );
        if !impair.is_empty() {
            assert!(
                err.lines().any(|l| l.contains("impair: dropped")),
                "{what}: no impairment counters:\n{t}"
            );
        }
    }
}

/// Four threads of each reader stream their own quarters of the array at once (a parallel
/// loop), over UDP with loss, duplication and reordering, and over TCP: every word arrives
/// exact, and each thread's walk is read ahead as a stream of its own (with one read-ahead per
/// node, the threads' demand faults restarted each other's windows: 74-160 pages fetched on
/// demand per reader of 6,144; 6 with a stream each).
#[test]
fn threads_streaming_their_own_parts_arrive_exact_under_loss() {
    for (transport, impair) in [
        ("udp", "drop=3,dup=2,reorder=10,delay_us=300,seed=25"),
        ("tcp", ""),
    ] {
        let (err, t) = stream_job(
            3,
            transport,
            impair,
            &["same_host=transport"],
            &[],
            &["24", "--threads", "4"],
            "stream OK nodes=3 mb=24",
        );
        let what = format!("{transport} {impair}");
        let demand = stat(&err, "pages_fetched");
        assert!(
            demand <= 2 * 16,
            "{what}: {demand} pages fetched on demand by two readers of 4 threads:\n{t}"
        );
    }
}

/// Read-ahead windows landed in large folios (`huge_pages = auto`, a tmpfs of the node's own)
/// arrive exact over UDP with loss, duplication and reordering, and over TCP, and again into the
/// same memory when node 0 writes the array again (two passes): each reader checks both sums.
/// Where the system lets no node mount its tmpfs, the nodes say why (a debug line) and the runs
/// are still checked, in 4 KiB pages.
#[test]
fn runs_landed_in_large_folios_arrive_exact_under_loss_and_again_in_place() {
    for (transport, impair) in [
        ("udp", "drop=3,dup=2,reorder=10,delay_us=300,seed=24"),
        ("tcp", ""),
    ] {
        let (err, t) = stream_job(
            2,
            transport,
            impair,
            &["huge_pages=auto", "same_host=transport"],
            &[("RUST_LOG", "dsm_runtime::api=debug")],
            &["24", "1", "2"],
            "stream OK nodes=2 mb=24 stride=1",
        );
        let what = format!("{transport} {impair}");
        if let Some(why) = err
            .lines()
            .find(|l| l.contains("shared memory in 4 KiB pages"))
        {
            eprintln!("{what}: no large folios here, checked in 4 KiB pages: {why}");
            continue;
        }
        // 24 MB twice in windows of up to 1,024 pages: dozens of requests.
        let large = stat(&err, "large_folio_requests");
        assert!(
            large >= 10,
            "{what}: {large} requests landed in large folios for 24 MB streamed twice:\n{t}"
        );
    }
}

/// Walks down through memory (each reader from the array's last page to its first, page by
/// page and one page in every 16), through a cache smaller than the stream, arrive exact over
/// UDP with loss, duplication and reordering and over TCP, through the transport and read in
/// place; the read-ahead follows them down: a few demand fetches per reader, not one per page.
#[test]
fn walks_down_arrive_exact_under_loss_duplication_and_reordering() {
    for (transport, impair, same_host) in [
        (
            "udp",
            "drop=3,dup=2,reorder=10,delay_us=300,seed=27",
            "transport",
        ),
        ("tcp", "", "transport"),
        (
            "udp",
            "drop=3,dup=2,reorder=10,delay_us=300,seed=28",
            "memory",
        ),
        ("tcp", "", "map"),
    ] {
        let setting = format!("same_host={same_host}");
        for (args, expect, pages) in [
            (&["24", "1", "2", "--down"][..], "stride=1 down", 6144),
            (&["24", "16", "1", "--down"][..], "stride=16 down", 384),
        ] {
            let (err, t) = stream_job(
                3,
                transport,
                impair,
                &["cache_pages=2048", &setting],
                &[],
                args,
                &format!("stream OK nodes=3 mb=24 {expect}"),
            );
            let what = format!("{transport} {impair} {same_host} {args:?}");
            // Two readers; a window lost to a dropped grant or to an eviction before it was
            // read is fetched again on demand, so some slack. One per page before.
            let demand = stat(&err, "pages_fetched");
            assert!(
                demand * 20 <= 2 * pages,
                "{what}: {demand} demand fetches for 2 readers of {pages} pages:\n{t}"
            );
        }
    }
}

/// Nodes of one host read each other's pages in place (`same_host = memory`, the default):
/// read-ahead windows in order and strided, through a cache smaller than the stream (evicting)
/// and twice over the same array rewritten by its home (invalidated, read again), over UDP with
/// loss, duplication and reordering of the grants, and over TCP; every reader checks its sums.
/// The pages went in place: the homes count them granted so, the readers read so, copied
/// (`same_host = memory`) or shown from the home's memory (`map`), and the message counts are
/// the wire's, without the pages.
#[test]
fn runs_read_in_place_arrive_exact_under_loss_duplication_and_reordering() {
    for (transport, impair, same_host) in [
        ("udp", "drop=3,dup=2,reorder=10,delay_us=300,seed=25", "map"),
        ("tcp", "", "map"),
        (
            "udp",
            "drop=3,dup=2,reorder=10,delay_us=300,seed=26",
            "memory",
        ),
        ("tcp", "", "memory"),
    ] {
        let setting = format!("same_host={same_host}");
        for (args, expect) in [
            (&["24", "1", "2"][..], "stream OK nodes=3 mb=24 stride=1"),
            (&["24", "16"][..], "stream OK nodes=3 mb=24 stride=16"),
        ] {
            let (err, t) = stream_job(
                3,
                transport,
                impair,
                &["cache_pages=2048", &setting],
                &[],
                args,
                expect,
            );
            let what = format!("{transport} {impair} {same_host} {args:?}");
            let granted = stat(&err, "pages_granted_in_place");
            let read = stat(&err, "pages_read_in_place");
            let shown = stat(&err, "pages_shown_in_place");
            // Two readers of 6,144 pages (384 at stride 16), twice for two passes.
            let least = if args[1] == "1" {
                2 * 2 * 6144
            } else {
                2 * 384
            };
            assert!(
                read >= least && granted >= least,
                "{what}: {granted} pages granted in place, {read} read so (at least {least}):\n{t}"
            );
            // Shown as read, but for runs too short to show, copied (a first window, an
            // allocation's tail, every page of a strided walk), and duplicated grants, read,
            // then dropped by the core.
            // The counts are the wire's: a grant in place is its header alone (and the few
            // pages granted alone go through the transport).
            for row in ["bytes sent GETPGRANT", "bytes received GETPGRANT"] {
                let bytes = stat(&err, row);
                assert!(
                    bytes < read * 4096 / 10,
                    "{what}: {row}: {bytes} for {read} pages read in place:\n{t}"
                );
            }
            let shows = if same_host == "map" && args[1] == "1" {
                read * 9 / 10..=read
            } else {
                0..=0
            };
            assert!(
                shows.contains(&shown),
                "{what}: {shown} pages shown from their home, {read} read in place:\n{t}"
            );
        }
    }
}

/// A node run by a user other than root makes its tmpfs in a user namespace of its own (a child
/// enters it and passes the file back): its stream lands in large folios, or the node says why
/// not and streams in 4 KiB pages. Run as user 65534 through `setpriv`, where this test is root.
/// (`same_host = memory`: pages shown from their home, as `map` does, land nowhere.)
#[test]
fn a_node_of_another_user_streams_in_large_folios_or_says_why_not() {
    let as_nobody = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let setpriv = dsm_tests::is_root()
        && Command::new("setpriv")
            .args(as_nobody)
            .arg("true")
            .status()
            .is_ok_and(|s| s.success());
    if !setpriv {
        eprintln!(
            "skipped: needs root and setpriv to run a job as another user (apt-get install util-linux)"
        );
        return;
    }
    let reachable = Command::new("setpriv")
        .args(as_nobody)
        .arg(bin("dsmrun"))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !reachable {
        eprintln!(
            "skipped: user 65534 cannot run {} (a directory above it is closed to others)",
            bin("dsmrun").display()
        );
        return;
    }
    let mut cmd = Command::new("setpriv");
    cmd.args(as_nobody)
        .arg(bin("dsmrun"))
        .args(["-n", "2", "--stats", "--transport", "tcp"])
        .args(["--set", "same_host=memory"])
        .env("RUST_LOG", "dsm_runtime::api=debug")
        .arg(bin("stream"))
        .arg("24");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("stream OK"),
        "as user 65534: {t}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    match err
        .lines()
        .find(|l| l.contains("shared memory in 4 KiB pages"))
    {
        Some(why) => eprintln!("as user 65534, no large folios: {why}"),
        None => assert!(
            stat(&err, "large_folio_requests") >= 5,
            "as user 65534: neither requests in large folios nor a reason:\n{t}"
        ),
    }
}

/// A strided walk (one page in every 16, read ahead at its stride once three demand faults find
/// it: a stride longer than the first window, `prefetch_pages`) arrives exact over UDP with loss, duplication and reordering, and over TCP: each reader
/// checks the sum of the pages it read.
#[test]
fn strided_read_ahead_arrives_exact_under_loss_duplication_and_reordering() {
    for (transport, impair) in [
        ("udp", "drop=3,dup=2,reorder=10,delay_us=300,seed=23"),
        ("tcp", ""),
    ] {
        let (err, t) = stream_job(
            3,
            transport,
            impair,
            &["same_host=transport"],
            &[],
            &["24", "16"],
            "stream OK nodes=3 mb=24 stride=16",
        );
        // 384 pages read per reader of 6,144: the read-ahead follows the stride, so the pages
        // asked for ahead are about those read, not the 6,144.
        let asked = stat(&err, "prefetch_requested");
        assert!(
            asked < 2 * 1000,
            "{transport} {impair}: {asked} pages asked for ahead by two readers of 384 pages each:\n{t}"
        );
    }
}

/// The work queue (tasks taken with an atomic fetch-add, results published by its release and
/// acquire) on 4 nodes is exact under loss, duplication and reordering, each run with its own
/// seed: every task taken once, every result right. Runs of even seeds take tasks with 3
/// threads a node, whose fetch-adds combine. `DSM_ATOMIC_RUNS` runs (default 5; the issue's
/// target is 100 of 100, `DSM_ATOMIC_RUNS=100`).
#[test]
fn a_work_queue_of_atomic_fetch_adds_is_exact_under_loss_and_reordering() {
    let runs: u64 = std::env::var("DSM_ATOMIC_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for seed in 1..=runs {
        let impair = format!("drop=5,dup=1,reorder=10,delay_us=300,seed={seed}");
        let threads: &[&str] = if seed % 2 == 0 {
            &["--threads", "3"]
        } else {
            &[]
        };
        let args: Vec<&str> = ["400", "2000"].iter().chain(threads).copied().collect();
        let out = run("workq", &args, &impair, 4);
        let t = text(&out);
        assert!(out.status.success(), "run {seed}: {t}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("workq OK nodes=4 tasks=400"),
            "run {seed}: {t}"
        );
        // Every node's fetch-adds reached the counter's home, alone or combined.
        let err = String::from_utf8_lossy(&out.stderr);
        let served = stat(&err, "atomics_served") + stat(&err, "atomics_combined");
        assert!(served >= 400 + 4, "run {seed}: {t}");
    }
}
