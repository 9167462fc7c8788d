//! Every outcome right, round 3: the ways a job with threads inside its nodes, forked children,
//! background processes and failing exit statuses used to end badly (hang, lose a status, leave
//! processes behind, blame the wrong call), each run as a user would, with the line and status
//! it must end with. The programs are `tests/c/outcomes.c`'s cases.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dsm_tests::{bin, interruptible, run_with_deadline, text};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `tests/c/outcomes.c` built with the README's line (and `-g`, for the lines of checked
/// builds), once per test binary.
fn outcomes() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = std::env::temp_dir().join(format!("dsm-outcomes-{}", std::process::id()));
            dsm_tests::compile_jia_c(
                &repo().join("tests/c/outcomes.c"),
                &out,
                &["-O2", "-g", "-Wall", "-Werror"],
            );
            out
        })
        .clone()
}

/// `dsmrun -n NODES --transport T FLAGS outcomes ARGS`, 120 s at most.
fn dsmrun(nodes: usize, transport: &str, flags: &[&str], args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.arg("-n")
        .arg(nodes.to_string())
        .args(["--transport", transport])
        .args(flags)
        .arg(outcomes())
        .args(args);
    run_with_deadline(cmd, Duration::from_secs(120))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_status(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
}

/// Row 1: node 0 holds lock 1 while its two threads wait in a barrier of threads (which waits
/// for node 1) and its main thread sits in pthread_join; node 1 waits for lock 1. The verdict
/// comes within seconds and names every thread's wait, the main thread's join included.
#[test]
fn a_deadlock_inside_a_threaded_node_is_named_thread_by_thread() {
    for transport in ["udp", "tcp"] {
        let start = Instant::now();
        let out = dsmrun(2, transport, &[], &["deadlock"]);
        assert_status(&out, 1);
        let e = stderr(&out);
        for want in [
            "the job cannot go on",
            "node 0 waits in",
            "jia_barrier_threads(2) (thread ",
            "jia_barrier (thread ",
            "a wait only another thread of its process or a signal handler can end \
             (pthread_join, a mutex, a condition variable, a semaphore) (main thread)",
            "holding lock 1",
            "node 1 waits in jia_lock(1)",
        ] {
            assert!(
                e.contains(want),
                "{transport}: no `{want}`:\n{}",
                text(&out)
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{transport}: too slow"
        );
    }
}

/// Node 1 waits on a semaphore its SIGALRM handler posts 6 s later (`alarm`), node 0 in a
/// barrier: the job runs to its end (a thread waiting for another thread of its process was
/// judged stuck after 4 s, the timer unseen, and the job ended as one that cannot go on).
#[test]
fn a_wait_a_timers_signal_handler_ends_is_not_a_deadlock() {
    let out = dsmrun(2, "udp", &[], &["alarm_posts"]);
    assert_status(&out, 0);
    assert!(stdout(&out).contains("alarm_posts OK"), "{}", text(&out));
}

/// Node 1 waits on a semaphore its periodic SIGALRM handler posts at the fifth tick, a second
/// apart, node 0 in a barrier: the job runs to its end (the verdict under a periodic timer waits
/// for its handler to have woken nobody for 30 s, not 3).
#[test]
fn a_wait_a_periodic_timers_handler_ends_is_not_a_deadlock() {
    let out = dsmrun(2, "udp", &[], &["ticks_post"]);
    assert_status(&out, 0);
    assert!(stdout(&out).contains("ticks_post OK"), "{}", text(&out));
}

/// Node 1 waits on a semaphore its SIGCHLD handler posts when its child, asleep for 8 s, ends,
/// node 0 in a barrier: the job runs to its end (it was ended at 3 s: a running child's end
/// runs the program's handler, as a timer's does).
#[test]
fn a_wait_a_childs_end_ends_is_not_a_deadlock() {
    let out = dsmrun(2, "udp", &[], &["child_posts", "8"]);
    assert_status(&out, 0);
    assert!(stdout(&out).contains("child_posts OK"), "{}", text(&out));
}

/// Node 0's threads deadlock on two mutexes while a periodic timer's handler ticks every 200
/// ms: the job ends, naming the timer (it ran for ever before: an armed real-time timer kept the
/// node running).
#[test]
fn a_deadlock_under_a_periodic_timer_ends_naming_the_timer() {
    let out = dsmrun(2, "udp", &[], &["ticking_mutexes"]);
    assert_status(&out, 1);
    let e = stderr(&out);
    for want in [
        "the job cannot go on",
        "node 1 waits in jia_barrier",
        "(main thread",
        "a periodic real-time timer is armed; its handler woke no thread",
    ] {
        assert!(e.contains(want), "no `{want}`:\n{}", text(&out));
    }
}

/// Node 1 spins on a word only node 0 changes, after a barrier node 1 never reaches, with
/// atomic loads (UDP) and with a spin lock's failing compare-exchanges (TCP), a test-and-set
/// lock's exchanges of the 1 it reads (UDP: ran for ever, an exchange was no poll), and with
/// atomic loads between which it sleeps (`usleep(1000)`, UDP; `sleep(1)`, TCP): the job says it
/// looks stuck after 10 s and ends after 60, naming the spin, the word's allocation by its
/// line, and node 0's wait (it ran for ever: a spinning thread runs, and its operations are
/// messages on their way; one that slept between its polls was not seen to spin). Beside them,
/// node 1 polls the word between lines a child writes on a pipe every 0.3 s for 75 s
/// (`stream`, UDP and TCP): a correct program, which ends well (it was ended as stuck at 61 s:
/// the reports came right after the answers to its polls, and saw it run, not read), and
/// between posts of a semaphore in memory it shares with a child (`stream_sem`, UDP: its wait
/// was taken for a sleep, and the job ended as stuck at 61 s). The jobs run side by side.
#[test]
fn a_spin_on_a_word_nobody_can_change_ends_naming_it() {
    let cases = [
        ("spin", "udp", "atomic loads reading 0 again and again"),
        (
            "spinlock",
            "tcp",
            "compare-exchanges that fail reading 1 again and again",
        ),
        (
            "taslock",
            "udp",
            "atomic writes that leave it as it was, reading 1 again and again",
        ),
        (
            "spin_usleep",
            "udp",
            "atomic loads reading 0 again and again",
        ),
        (
            "spin_sleep",
            "tcp",
            "atomic loads reading 0 again and again",
        ),
    ];
    let streams = [("stream", "udp"), ("stream", "tcp"), ("stream_sem", "udp")];
    let (outs, streamed): (Vec<Output>, Vec<Output>) = std::thread::scope(|s| {
        let jobs: Vec<_> = cases
            .iter()
            .map(|&(case, transport, _)| s.spawn(move || dsmrun(2, transport, &[], &[case])))
            .collect();
        let streams: Vec<_> = streams
            .iter()
            .map(|&(case, transport)| s.spawn(move || dsmrun(2, transport, &[], &[case, "75"])))
            .collect();
        let join = |j: std::thread::ScopedJoinHandle<'_, Output>| j.join().expect("a job");
        (
            jobs.into_iter().map(join).collect(),
            streams.into_iter().map(join).collect(),
        )
    });
    for ((case, _, how), out) in cases.iter().zip(&outs) {
        assert_status(out, 1);
        let e = stderr(out);
        for want in [
            "the job looks stuck: every node waits for another beside a spin",
            "the job cannot go on",
            "node 0 waits in jia_barrier",
            "node 1 waits in a spin on the 4-byte word at 0x",
            "(byte 0 of the allocation of 4096 bytes made at ",
            "outcomes.c:",
            how,
        ] {
            assert!(e.contains(want), "{case}: no `{want}`:\n{}", text(out));
        }
    }
    for ((case, transport), out) in streams.iter().zip(&streamed) {
        assert_status(out, 0);
        assert!(
            stdout(out).contains(&format!("{case} OK")),
            "{case}, {transport}: {}",
            text(out)
        );
        assert!(
            !stderr(out).contains("looks stuck"),
            "{case}, {transport}: {}",
            text(out)
        );
    }
}

/// Node 1 spins until the word changes or its SIGALRM handler, 12 s on, says to stop, node 0
/// in a barrier: the job ends well (an armed timer's handler may end a spin, as it may wake a
/// thread that waits; it was ended as stuck at 11 s).
#[test]
fn a_spin_a_timers_handler_ends_is_not_stuck() {
    let out = dsmrun(2, "udp", &[], &["spin_alarm", "12"]);
    assert_status(&out, 0);
    assert!(stdout(&out).contains("spin_alarm OK"), "{}", text(&out));
}

/// Node 1 polls a word between pieces of private work for 13 s (longer than a spin's verdict
/// waits) while node 0 waits in a barrier: a loop that computes between its polls is no spin,
/// and the job ends well.
#[test]
fn polling_a_word_between_pieces_of_work_is_not_a_spin() {
    let out = dsmrun(2, "udp", &[], &["poll", "13"]);
    assert_status(&out, 0);
    assert!(stdout(&out).contains("poll OK"), "{}", text(&out));
}

/// Runs `cases` (case, transport, nodes, argument) side by side.
fn side_by_side(cases: &[(&'static str, &'static str, usize, &'static str)]) -> Vec<Output> {
    std::thread::scope(|s| {
        let jobs: Vec<_> = cases
            .iter()
            .map(|&(case, transport, nodes, arg)| {
                s.spawn(move || dsmrun(nodes, transport, &[], &[case, arg]))
            })
            .collect();
        jobs.into_iter().map(|j| j.join().expect("a job")).collect()
    })
}

/// The start of the warning of a node that dropped its copies and read a word again changed.
fn refreshed(node: u32) -> String {
    format!("dsm node {node}: warning: this node ran for 1")
}

/// Asserts `out` ended well, printing `case OK`, and whether node 1 said it read a word again
/// changed, beside what the others did (`others`).
fn assert_ended_well(out: &Output, case: &str, said_beside: Option<&str>) {
    assert_status(out, 0);
    assert!(stdout(out).contains(&format!("{case} OK")), "{}", text(out));
    let e = stderr(out);
    match said_beside {
        Some(others) => {
            for want in [
                &refreshed(1),
                " s on the pages it held while every other node waited or did the same (",
                others,
            ] {
                assert!(e.contains(want), "{case}: no `{want}`:\n{}", text(out));
            }
        }
        None => assert!(!e.contains(&refreshed(1)), "{case}:\n{}", text(out)),
    }
}

/// Node 1 waits for node 0's write on plain loads of the copy it holds, node 0 in a barrier:
/// after 10 s, node 1 drops its copies of other nodes' pages, reads the home's bytes, and the
/// job ends well, saying where it waited (it ran for ever, silent: no acquire of node 1's would
/// ever bring the write). Beside it, over TCP, node 1 computes alone for 12 s reading a word
/// nobody changes, beside one node 0 wrote in its 64-byte line: its copy is dropped too, and
/// read again with the same word, which is not said. On 3 nodes, nodes 1 and 2 both spin so,
/// each having written a word of its own on the flag's page: both see the write, and every
/// node reads both words after. And node 1 spins on its own home page holding lock 1, which
/// node 0 asks for after writing the word, unreleased: node 0, waiting, is told to send its
/// writes to their homes, and the job ends well.
#[test]
fn a_plain_spin_on_another_nodes_word_sees_it_and_is_said() {
    let outs = side_by_side(&[
        ("plain_spin", "udp", 2, ""),
        ("alone", "tcp", 2, "12"),
        ("written_spin", "udp", 3, ""),
        ("unreleased_spin", "tcp", 2, ""),
    ]);
    let [spin, alone, written, unreleased] = &outs[..] else {
        unreachable!()
    };
    assert_ended_well(spin, "plain_spin", Some("(node 0 waits in jia_barrier)"));
    let e = stderr(spin);
    for want in [
        "it dropped its copies of other nodes' pages (1), and a thread read the byte at 0x",
        "(byte 0 of the allocation of 4096 bytes made at ",
        "outcomes.c:",
        "again, which came back with a value another node wrote that its copy did not have",
        "on plain loads sees it only after an acquire of its own",
    ] {
        assert!(e.contains(want), "plain_spin: no `{want}`:\n{}", text(spin));
    }
    assert_ended_well(alone, "alone", None);
    assert_ended_well(
        written,
        "written_spin",
        Some("(node 0 waits in jia_barrier"),
    );
    assert!(!stdout(written).contains("lost"), "{}", text(written));
    assert!(stderr(written).contains(&refreshed(2)), "{}", text(written));
    assert_ended_well(unreleased, "unreleased_spin", None);
}

/// Spins on plain loads that nobody waits beside, or that work beside them: two nodes that hand
/// a flag back and forth, neither in a DSM call (both words on node 0's page: node 1 says where
/// it waited; each word on its reader's home page: node 0's write is sent home while it runs;
/// the answer a word homed at node 1, which node 0 polls with atomic loads that node 1
/// serves), and a spin beside another thread of its node that takes and releases a lock node 0
/// manages every 0.5 s, node 0 in a barrier. Each ran for ever (the last where no lock grant
/// brought the barrier's notices); each ends well at 11-13 s.
#[test]
fn plain_spins_beside_running_nodes_or_threads_see_the_write() {
    let outs = side_by_side(&[
        ("handshake", "tcp", 2, ""),
        ("handshake_homes", "udp", 2, ""),
        ("handshake_served", "udp", 2, ""),
        ("locks_spin", "tcp", 2, ""),
    ]);
    let [handshake, homes, served, locks] = &outs[..] else {
        unreachable!()
    };
    assert_ended_well(
        handshake,
        "handshake",
        Some("(node 0 runs on the pages it holds)"),
    );
    assert_ended_well(homes, "handshake_homes", None);
    assert_ended_well(
        served,
        "handshake_served",
        Some("(node 0 waits in a spin on the 4-byte word at 0x"),
    );
    // Node 0's barrier's notices may come with a lock grant of node 0's (its manager) that
    // follows it: the spin then sees the write at once, unsaid; under load it did.
    assert_status(locks, 0);
    assert!(stdout(locks).contains("locks_spin OK"), "{}", text(locks));
}

/// Node 0's threads deadlock on two pthread mutexes, none in a DSM call, while node 1 waits
/// in `jia_barrier` for it: the verdict names node 0's three threads (it hung before: a node
/// with no thread in a DSM call was taken as running), and what each node printed before the
/// hang, still in its stdio buffer, is not lost (dsmrun killed the nodes at once).
#[test]
fn a_node_whose_threads_wait_for_each_other_outside_the_dsm_is_named() {
    let start = Instant::now();
    let out = dsmrun(2, "udp", &[], &["mutexes"]);
    assert_status(&out, 1);
    let e = stderr(&out);
    assert!(e.contains("the job cannot go on"), "{}", text(&out));
    assert!(e.contains("node 1 waits in jia_barrier"), "{}", text(&out));
    assert_eq!(
        e.matches("a wait only another thread of its process or a signal handler can end")
            .count(),
        1,
        "{}",
        text(&out)
    );
    assert!(e.contains("(main thread"), "{}", text(&out));
    for node in 0..2 {
        assert!(
            stdout(&out).contains(&format!("node {node} before the hang")),
            "{}",
            text(&out)
        );
    }
    assert!(start.elapsed() < Duration::from_secs(60), "too slow");
}

/// A signal handler's DSM call while its thread waits in another (jia_lock in a SIGALRM handler
/// that interrupted jia_barrier) ends the job naming it: it took the outer call's slot, and a
/// barrier so made hung the job with no word.
#[test]
fn a_dsm_call_in_a_handler_that_interrupted_one_is_refused_by_name() {
    let out = dsmrun(2, "udp", &[], &["nested"]);
    assert_status(&out, 1);
    assert!(
        stderr(&out).contains(
            "dsm node 0: error: jia_lock: called in a signal handler that interrupted another DSM \
             call of the same thread"
        ),
        "{}",
        text(&out)
    );
}

/// A one-node job has no launcher watching it (it meets nobody, run by dsmrun or alone): it
/// judges itself by the launcher's rule. It hung for ever before.
#[test]
fn a_one_node_job_that_cannot_go_on_ends_naming_its_waits() {
    let out = dsmrun(1, "udp", &[], &["team_short"]);
    assert_status(&out, 1);
    let e = stderr(&out);
    assert!(
        e.contains("the job cannot go on: every thread of this one-node job waits")
            && e.contains("jia_barrier_threads(3) (thread "),
        "{}",
        text(&out)
    );
    let mut alone = Command::new(outcomes());
    alone.arg("waitcv");
    let out = run_with_deadline(alone, Duration::from_secs(120));
    assert_status(&out, 1);
    assert!(
        stderr(&out).contains("node 0 waits in jia_waitcv(5)"),
        "{}",
        text(&out)
    );
}

/// Node 1 returns from main with status 0 before jia_init, while node 0 waits for it there: the
/// job ends at once naming it, under dsmrun and started from a `.jiahosts` (it waited for the
/// join timeout, 60 s, and then said node 1 had not been started or had not called jia_init).
#[test]
fn a_node_that_ends_well_before_joining_is_named_at_once() {
    let start = Instant::now();
    let out = dsmrun(2, "udp", &[], &["return_before_init"]);
    assert_status(&out, 1);
    let says = "node 1 (127.0.0.1) exited with status 0 before it joined the job";
    assert!(stderr(&out).contains(says), "{}", text(&out));

    let dir = std::env::temp_dir().join(format!("dsm-early-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".jiahosts"), "127.0.0.1\n127.0.0.1\n").unwrap();
    let mut cmd = Command::new(outcomes());
    cmd.arg("return_before_init").current_dir(&dir);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let _ = std::fs::remove_dir_all(&dir);
    assert_status(&out, 1);
    assert!(stderr(&out).contains(says), "{}", text(&out));
    assert!(start.elapsed() < Duration::from_secs(50), "too slow");
}

/// Row 2: a barrier of 3 threads that 2 threads of each node call; `jia_barrier` mixed with a
/// barrier of threads; a count over the thread limit.
#[test]
fn a_barrier_of_threads_misused_is_named() {
    let out = dsmrun(2, "udp", &[], &["team_short"]);
    assert_status(&out, 1);
    let e = stderr(&out);
    assert!(
        e.contains("the job cannot go on")
            && e.contains("jia_barrier_threads(3) (thread ")
            && e.contains("2 of the 3 threads jia_barrier_threads(3) waits for are there"),
        "{}",
        text(&out)
    );

    // Which comes first on a node decides the words: the misuse named at the call, or (the
    // plain barriers of both nodes done before the thread barrier is called) the barrier of
    // threads that waits forever.
    let out = dsmrun(2, "udp", &[], &["team_mixed"]);
    assert_status(&out, 1);
    let e = stderr(&out);
    assert!(
        e.contains("a node's threads meet in one kind of barrier at a time")
            || (e.contains("the job cannot go on") && e.contains("jia_barrier_threads(2)")),
        "{}",
        text(&out)
    );

    let out = dsmrun(2, "udp", &[], &["team_huge"]);
    assert_status(&out, 1);
    assert!(
        stderr(&out).contains(
            "jia_barrier_threads(100000): a node has at most 1024 threads that use the DSM"
        ),
        "{}",
        text(&out)
    );
}

/// Row 3: node 0 meets with 1 thread, node 1 with 2.
#[test]
fn nodes_that_give_different_thread_counts_are_refused_by_name() {
    for transport in ["udp", "tcp"] {
        let out = dsmrun(2, transport, &[], &["team_counts"]);
        assert_status(&out, 1);
        // In the order the nodes arrived.
        let e = stderr(&out);
        assert!(
            e.contains("a barrier met with different thread counts: ")
                && e.contains("node 0 gave 1")
                && e.contains("node 1 gave 2"),
            "{transport}:\n{}",
            text(&out)
        );
    }
}

/// Row 4: a child forked from node 0 makes a DSM call: the child is refused with a message and
/// ends with status 1; the parent's job is untouched. A child that just returns leaves nothing
/// behind it either.
#[test]
fn a_forked_childs_dsm_calls_are_refused_in_the_child_and_the_job_goes_on() {
    for (call, transport) in [
        ("lock", "udp"),
        ("send", "udp"),
        ("barrier", "tcp"),
        ("exit", "udp"),
        ("send", "tcp"),
    ] {
        let out = dsmrun(2, transport, &[], &["fork", call]);
        assert_status(&out, 0);
        let name = format!("jia_{call}");
        let (o, e) = (stdout(&out), stderr(&out));
        assert!(
            e.contains(&format!("{name} in a process forked from node 0")),
            "{call} {transport}:\n{}",
            text(&out)
        );
        assert!(
            o.contains("child status 1")
                && o.contains("fork OK node 0 value 7")
                && o.contains("fork OK node 1 value 7")
                && !o.contains("child went on"),
            "{call} {transport}:\n{}",
            text(&out)
        );
    }
    let out = dsmrun(2, "udp", &[], &["fork", "return"]);
    assert_status(&out, 0);
    assert!(
        stdout(&out).contains("child status 0") && !stderr(&out).contains("error"),
        "{}",
        text(&out)
    );
}

/// The pids a job's `orphan PID` lines name.
fn orphans(out: &Output) -> Vec<u32> {
    stdout(out)
        .lines()
        .filter_map(|l| l.strip_prefix("orphan ")?.trim().parse().ok())
        .collect()
}

/// Whether process `pid` runs (a zombie, ended but not yet reaped by whoever adopted it, does
/// not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Row 5: processes the nodes started (a forked child, the sleep its shell left behind) do not
/// outlive the job: ended by their node at its exit, or by dsmrun when their node was killed.
#[test]
fn nothing_a_node_started_outlives_the_job() {
    for (how, code) in [("exit", 0), ("kill", 137)] {
        let out = dsmrun(2, "udp", &[], &["orphans", how]);
        assert_status(&out, code);
        let pids = orphans(&out);
        assert!(pids.len() >= 2, "{how}: no orphans named:\n{}", text(&out));
        // Generous: the kernel tears a killed process down in its own time.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|&p| running(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let left: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
        for &p in &left {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
        assert!(
            left.is_empty(),
            "{how}: still running after the job: {left:?}"
        );
    }
}

/// A fake ssh that starts nothing and never ends, writing its pid to `$FAKE_SSH_PID_FILE` first.
fn hanging_ssh(dir: &Path) -> PathBuf {
    let ssh = dir.join("hanging-ssh");
    std::fs::write(
        &ssh,
        "#!/bin/sh\necho $$ > \"$FAKE_SSH_PID_FILE\"\nexec sleep 600\n",
    )
    .unwrap();
    let mut p = std::fs::metadata(&ssh).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(&ssh, p).unwrap();
    ssh
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dsm-outcomes-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Row 6: a host whose ssh never starts the node: refused with status 2 after the join
/// timeout, naming the host and ssh; and however dsmrun ends (SIGKILL), its ssh client ends
/// with it. The "remote" host is an address of a documentation range (TEST-NET-3) that no
/// traffic goes to: the fake ssh never connects anywhere, and no node joins to send it any.
#[test]
fn a_host_that_never_answers_is_named_after_the_join_timeout_and_no_ssh_outlives_dsmrun() {
    let dir = scratch("ssh");
    let ssh = hanging_ssh(&dir);
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1\n203.0.113.77\n").unwrap();
    let pid_file = dir.join("ssh.pid");
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["--join-timeout", "10", "--hosts"])
        .arg(&hosts)
        .arg(outcomes())
        .arg("exit")
        .arg("0")
        .env("DSM_SSH", &ssh)
        .env("FAKE_SSH_PID_FILE", &pid_file);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    assert_status(&out, 2);
    assert!(
        stderr(&out).contains("did not join within 10 s: ssh to 203.0.113.77 did not start"),
        "{}",
        text(&out)
    );

    // dsmrun killed with SIGKILL while its ssh hangs: the ssh client goes with it.
    let _ = std::fs::remove_file(&pid_file);
    let mut child = Command::new(bin("dsmrun"))
        .args(["--join-timeout", "60", "--hosts"])
        .arg(&hosts)
        .arg(outcomes())
        .args(["exit", "0"])
        .env("DSM_SSH", &ssh)
        .env("FAKE_SSH_PID_FILE", &pid_file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ssh_pid: u32 = loop {
        if let Some(p) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            break p;
        }
        assert!(Instant::now() < deadline, "the fake ssh never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    let _ = child.wait();
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(ssh_pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive = running(ssh_pid);
    if alive {
        let _ = Command::new("kill")
            .args(["-9", &ssh_pid.to_string()])
            .status();
    }
    // The local node 0, which waited for the rendezvous, ends when dsmrun's end closes it.
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!alive, "the ssh client outlived dsmrun killed with SIGKILL");
}

/// Row 7: node 1 calls exit(3), or returns 3 from main, without jia_exit while node 0 waits
/// for it in a barrier: node 1 is named with its status, which is the job's; `exit(0)` stays a
/// jia_exit (node 0's barrier then never completes: the job cannot go on); under
/// `--check-races` the node's own status is kept.
#[test]
fn a_node_that_exits_with_a_status_gives_the_job_that_status() {
    for (how, transport) in [("exit", "udp"), ("return", "tcp"), ("exit", "tcp")] {
        let out = dsmrun(2, transport, &[], &[how, "3"]);
        assert_status(&out, 3);
        let e = stderr(&out);
        assert!(
            e.contains("dsmrun: node 1 (127.0.0.1) exited with status 3")
                && e.contains("node 1 ended with status 3 without leaving the job")
                && !e.contains("waits in jia_exit"),
            "{how} {transport}:\n{}",
            text(&out)
        );
    }
    // 4 nodes over TCP: the others take the news and leave, closing their connections, while
    // node 1 still waits for the last acknowledgements; losing them must not end node 1 with
    // the peers' status (86) instead of its own (a soak saw it: 5 runs in 40 before the fix).
    for run in 0..20 {
        let out = dsmrun(4, "tcp", &[], &["exit", "3"]);
        assert_status(&out, 3);
        assert!(
            stderr(&out).contains("dsmrun: node 1 (127.0.0.1) exited with status 3"),
            "4 nodes, run {run}:\n{}",
            text(&out)
        );
    }
    let out = dsmrun(2, "udp", &["--check-races"], &["exit", "3"]);
    assert_status(&out, 3);
    // Started directly with a .jiahosts: node 0, the job's launcher, ends with the status too.
    let dir = scratch("exit3");
    std::fs::write(dir.join(".jiahosts"), "127.0.0.1\n127.0.0.1\n").unwrap();
    let mut cmd = Command::new(outcomes());
    cmd.args(["exit", "3"]).current_dir(&dir);
    let out = run_with_deadline(cmd, Duration::from_secs(90));
    let _ = std::fs::remove_dir_all(&dir);
    assert_status(&out, 3);
    assert!(
        stderr(&out).contains("node 1 ended with status 3 without leaving the job"),
        "{}",
        text(&out)
    );
    // exit(256) ends a process with status 0, as its parent sees it: it leaves the job as
    // exit(0) does (it was taken as status 256).
    for status in ["0", "256"] {
        let out = dsmrun(2, "udp", &[], &["exit", status]);
        assert_status(&out, 1);
        assert!(
            stderr(&out).contains("node 1 waits in jia_exit, reached by exit with status 0"),
            "exit({status}):\n{}",
            text(&out)
        );
    }
}

/// exit(0) on a thread of node 1 while its main thread is in jia_barrier: named as such (it
/// was named as a refused jia_exit, which the program never called).
#[test]
fn an_exit_on_a_thread_during_a_barrier_is_named_as_an_exit() {
    let out = dsmrun(2, "udp", &[], &["thread_exit"]);
    assert_status(&out, 1);
    assert!(
        stderr(&out).contains(
            "exit with status 0 (a return from main, or exit(0) on any thread) before jia_exit: \
             a barrier, wait or exit is already in progress on this node"
        ),
        "{}",
        text(&out)
    );
}

/// Every node names itself the root of one jia_bcast: no node waits, so nothing was stuck, and
/// each kept its own buffer, silently. A node that gets a letter of a broadcast it sent as root
/// (or sends one it has a letter of) ends the job naming both roots.
#[test]
fn a_broadcast_with_two_roots_is_named() {
    for nodes in [2, 3] {
        let out = dsmrun(nodes, "udp", &[], &["bcast_roots"]);
        assert_status(&out, 1);
        let e = stderr(&out);
        assert!(
            e.contains("jia_bcast number 1 of the job: node ")
                && e.contains("broadcast it as its root, as node ")
                && e.contains("(every node must name the same root)"),
            "{nodes} nodes:\n{}",
            text(&out)
        );
    }
}

/// A thread of node 1 keeps taking a lock while its main thread calls jia_exit (then waits
/// for it): the job ends with status 1 naming the call, made while the node leaves or after it
/// left, or the worker's touch of shared memory after the node left, by when the worker ran
/// (it ended with status 0 and a message, or after 10 s of silence: its lock requests went to
/// nodes that had left).
#[test]
fn a_call_made_while_another_thread_leaves_the_job_is_named() {
    for _ in 0..5 {
        let out = dsmrun(2, "udp", &[], &["exit_under_a_worker"]);
        assert_status(&out, 1);
        let e = stderr(&out);
        assert!(
            e.contains("on one thread while another makes this node leave the job")
                || e.contains("lock after jia_exit: this node has left the job")
                || e.contains("was touched after this node left the job")
                || e.contains("was written after this node left the job"),
            "{}",
            text(&out)
        );
    }
}

/// Misused calls are named as the program called them: `jia_free` of a stack address (taken
/// as shared: only addresses below the region were refused), `jia_alloc_array` without block
/// sizes (named `jia_alloc4`).
#[test]
fn misused_allocation_calls_are_named_as_called() {
    for (case, says) in [
        ("free_stack", "): not an address of shared memory"),
        ("array_none", "jia_alloc_array: no block sizes given"),
    ] {
        let out = dsmrun(2, "udp", &[], &[case]);
        assert_status(&out, 1);
        assert!(stderr(&out).contains(says), "{case}:\n{}", text(&out));
    }
}

/// Row 8: started directly with a 2-line `.jiahosts`, output to a pipe (fully buffered), node 1
/// returning 5 after jia_exit: node 0's own line is kept, and the job's status is 5.
#[test]
fn node_0s_own_output_is_kept_when_another_node_fails_after_jia_exit() {
    let dir = scratch("jiahosts");
    std::fs::write(dir.join(".jiahosts"), "127.0.0.1\n127.0.0.1\n").unwrap();
    for _ in 0..3 {
        let mut cmd = Command::new(outcomes());
        cmd.arg("after_exit").current_dir(&dir);
        let out = run_with_deadline(cmd, Duration::from_secs(90));
        assert_status(&out, 5);
        assert!(
            stdout(&out).contains("node 0 printed before jia_exit")
                && stderr(&out).contains("node 1 (127.0.0.1) exited with status 5"),
            "{}",
            text(&out)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Row 9: dsmcc --check-races while the names a pid-based scheme would pick are taken (by
/// another user, in a shared TMPDIR): the build goes on in a private directory of its own, and
/// leaves nothing behind.
#[test]
fn dsmcc_builds_in_a_private_directory_no_one_can_block() {
    let tmp = scratch("dsmcc");
    // What another user could plant: every name `dsmcc-<pid>` for the next pids.
    let me = std::process::id();
    for p in me..me + 2000 {
        std::fs::create_dir(tmp.join(format!("dsmcc-{p}"))).unwrap();
    }
    let exe = tmp.join("checked");
    let out = Command::new(bin("dsmcc"))
        .args(["--check-races", "-O1"])
        .arg(repo().join("tests/c/outcomes.c"))
        .arg("-o")
        .arg(&exe)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(exe.exists());
    let left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("dsmcc-") && n.len() > "dsmcc-".len() + 10)
        .collect();
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(left.is_empty(), "dsmcc left {left:?}");
}

/// Row 10: a write 10 pages past a one-page allocation, inside the shared region: the line
/// says so and names the nearest allocation, its range always, its source line in a checked
/// build.
#[test]
fn a_wild_write_in_the_shared_region_names_the_nearest_allocation() {
    // No core files: a node with a region of gigabytes would take long to dump one.
    let no_core = |args: &[&str]| {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ulimit -c 0 && exec \"$@\"", "sh"])
            .arg(bin("dsmrun"))
            .args(args);
        run_with_deadline(cmd, Duration::from_secs(120))
    };
    let program = outcomes().display().to_string();
    let out = no_core(&["-n", "2", &program, "overrun"]);
    assert_status(&out, 139);
    let e = stderr(&out);
    assert!(
        e.contains("dsm node 0: error: a write to 0x")
            && e.contains(
                "in the shared region but outside every allocation: the nearest allocation is 0x"
            )
            && e.contains("(4096 bytes, made at ")
            && e.contains("36872 bytes past its end"),
        "{}",
        text(&out)
    );
    let dir = scratch("overrun");
    let exe = dir.join("checked");
    let built = Command::new(bin("dsmcc"))
        .args(["--check-races", "-g", "-O1"])
        .arg(repo().join("tests/c/outcomes.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    let out = no_core(&[
        "-n",
        "2",
        "--check-races",
        &exe.display().to_string(),
        "overrun",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        stderr(&out).contains("made at ") && stderr(&out).contains("outcomes.c:"),
        "{}",
        text(&out)
    );
}

/// A node whose memory file shrinks under it (another process of its user truncates it) takes
/// a bus error in the shared region: named as such, and the node ends by it, where it once
/// faulted on the same page forever.
#[test]
fn a_bus_error_in_the_shared_region_is_named_and_ends_the_node() {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -c 0 && exec \"$@\"", "sh"])
        .arg(bin("dsmrun"))
        .args(["-n", "2"])
        .arg(outcomes())
        .arg("shrink");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    assert_status(&out, 135);
    let e = stderr(&out);
    assert!(
        e.contains("dsm node 0: error: a bus error (SIGBUS) at 0x")
            && e.contains("the node's memory file cannot give that page")
            && e.contains("node 0 (127.0.0.1) was killed by signal 7 (SIGBUS)"),
        "{}",
        text(&out)
    );
}

/// dsmrun on the `pi` app with `flags` and the environment `env`, its stderr.
fn dsmrun_pi(flags: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(flags).arg(bin("pi")).arg("1000");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_deadline(cmd, Duration::from_secs(60))
}

/// Row 11: a program's own DSM_ variable draws no warning; a near miss of a setting does, as
/// does another tool's name for one; a key typo in --set gets its nearest key.
#[test]
fn only_names_close_to_a_setting_are_warned_of_and_keys_get_did_you_mean() {
    let out = dsmrun_pi(&["-n", "1"], &[("DSM_MAIN", "1"), ("DSM_MY_APP_SIZE", "9")]);
    assert_status(&out, 0);
    assert!(
        !stderr(&out).contains("DSM_MAIN") && !stderr(&out).contains("DSM_MY_APP"),
        "{}",
        text(&out)
    );
    let out = dsmrun_pi(
        &["-n", "1"],
        &[("DSM_PREFTECH", "off"), ("DSM_TRANSPORT", "tcp")],
    );
    let e = stderr(&out);
    assert!(
        e.contains("DSM_PREFTECH is not a setting or a variable of the runtime (did you mean DSM_PREFETCH?)")
            && e.contains("DSM_TRANSPORT is not a variable of the runtime (did you mean DSM_COMM_TYPE, or dsmrun --transport?)"),
        "{}",
        text(&out)
    );
    let out = dsmrun_pi(&["-n", "1", "--set", "prefetch_pags=4"], &[]);
    assert_status(&out, 2);
    assert!(
        stderr(&out).contains("unknown key `prefetch_pags` (did you mean `prefetch_pages`?)"),
        "{}",
        text(&out)
    );
}

/// Row 12: more threads than CPUs, counted as nodes x threads: one node of more threads than
/// the CPUs this process may run on (`nproc`: its affinity, as dsmrun counts them).
#[test]
fn threads_count_in_the_oversubscription_warning() {
    let nproc = Command::new("nproc").output().expect("nproc (coreutils)");
    let cpus: usize = String::from_utf8_lossy(&nproc.stdout)
        .trim()
        .parse()
        .unwrap();
    let threads = (cpus + 1).to_string();
    let out = dsmrun_pi(&["-n", "1", "--threads", &threads], &[]);
    assert_status(&out, 0);
    assert!(
        stderr(&out).contains(&format!(
            "1 node(s) of {threads} threads on this machine ({threads} threads), which has \
             {cpus} CPU(s)"
        )),
        "{}",
        text(&out)
    );
}

/// dsmrun's --threads goes to the runtime's limit, 1,024 (it stopped at 128: a 256-CPU host
/// could not run one node of 256 threads), and a program with a lower one says so.
#[test]
fn dsmrun_threads_go_to_the_runtime_s_limit_and_a_program_names_its_own() {
    let out = dsmrun_pi(&["-n", "1", "--threads", "1025"], &[]);
    assert_status(&out, 2);
    assert!(stderr(&out).contains("1025"), "{}", text(&out));
    let out = dsmrun_pi(&["-n", "1", "--threads", "600"], &[]);
    assert_status(&out, 2);
    assert!(
        stderr(&out).contains("DSM_THREADS=600: threads per node must be 1 to 512"),
        "{}",
        text(&out)
    );
}

/// Row 13: jia_init twice, a DSM_THREADS that is no number, a port in a hosts file.
#[test]
fn a_second_jia_init_a_bad_thread_count_and_a_port_in_the_hosts_are_named() {
    let out = dsmrun(1, "udp", &[], &["init_twice"]);
    assert_status(&out, 0);
    assert!(
        stderr(&out).contains("jia_init called again"),
        "{}",
        text(&out)
    );
    let out = dsmrun_pi(&["-n", "2"], &[("DSM_THREADS", "abc")]);
    assert_status(&out, 2);
    assert!(
        stderr(&out)
            .contains("DSM_THREADS=abc: threads per node must be a whole number from 1 to 1024"),
        "{}",
        text(&out)
    );
    let mut cmd = Command::new(outcomes());
    cmd.arg("init_twice").env("DSM_THREADS", "abc");
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    // A job that cannot start: 2, as dsmrun's just above (jia_init said 1).
    assert_status(&out, 2);
    assert!(stderr(&out).contains("DSM_THREADS=abc"), "{}", text(&out));
    let dir = scratch("hostport");
    std::fs::write(dir.join("hosts"), "127.0.0.1\nnode1:2222\n").unwrap();
    let out = dsmrun_pi(&["--hosts", &dir.join("hosts").display().to_string()], &[]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_status(&out, 2);
    assert!(
        stderr(&out).contains("hosts:2: `node1:2222` carries a port (2222)"),
        "{}",
        text(&out)
    );
}

/// Misuse named by the call: a call before `jia_init`, an atomic on private memory (said to be
/// outside the shared region, where it was called an offset of it), a store with acquire order
/// (C11 has none; it was taken silently), a load with an order that is none.
#[test]
fn misused_calls_are_named_with_what_was_wrong() {
    for (case, want) in [
        ("lock_before_init", "jia_lock before jia_init"),
        ("atomic_private", "which is not in the shared region"),
        (
            "store_acquire",
            "jia_atomic_store_64: memory order 2 is not one for a store",
        ),
        // Only the orders a load may have are offered (release was among them).
        (
            "load_order_99",
            "jia_atomic_load_64: memory order 99 is not one for a load (allowed: 0 relaxed, 1 \
             consume, 2 acquire, 5 seq_cst)",
        ),
    ] {
        let out = dsmrun(2, "udp", &[], &[case]);
        assert_status(&out, 1);
        assert!(stderr(&out).contains(want), "{case}: {}", text(&out));
        assert!(!stderr(&out).contains("(at "), "{case}: {}", text(&out));
    }
}

/// Row 14: SIGHUP or SIGUSR1 to dsmrun ends the nodes with a word, as SIGTERM does.
#[test]
fn dsmrun_ends_its_nodes_and_says_why_on_hangup_and_user_signals() {
    for (sig, name, number) in [("HUP", "SIGHUP", 1), ("USR1", "SIGUSR1", 10)] {
        let mut child = interruptible(&mut Command::new(bin("dsmrun")))
            .args(["-n", "2"])
            .arg(outcomes())
            .arg("nap")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        // A watchdog: the job ends within 90 s whatever happens here.
        let watched = pid.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(90));
            let _ = Command::new("kill").args(["-9", &watched]).status();
        });
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let (mut napping, mut seen) = (0, String::new());
        while napping < 2 {
            match lines.next() {
                Some(Ok(l)) => {
                    napping += usize::from(l.starts_with("napping"));
                    seen.push_str(&l);
                    seen.push('\n');
                }
                _ => break,
            }
        }
        Command::new("kill")
            .args([&format!("-{sig}"), &pid])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            napping,
            2,
            "{sig}: the nodes never napped:\n{seen}{}",
            text(&out)
        );
        assert_eq!(
            out.status.code(),
            Some(128 + number),
            "{sig}: {}",
            text(&out)
        );
        assert!(
            stderr(&out).contains(&format!(
                "interrupted by {name} (signal {number}); all nodes ended"
            )),
            "{sig}: {}",
            text(&out)
        );
    }
}

/// The memory cgroup of this process, as a directory a child group can be made in: cgroup v1's
/// memory hierarchy, or v2's unified one.
fn memory_cgroup() -> Option<(PathBuf, bool)> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    groups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        if controllers.split(',').any(|c| c == "memory") {
            let d = PathBuf::from(format!("/sys/fs/cgroup/memory{path}"));
            return d.is_dir().then_some((d, true));
        }
        if controllers.is_empty() {
            let d = PathBuf::from(format!("/sys/fs/cgroup{path}"));
            return d.join("memory.max").exists().then_some((d, false));
        }
        None
    })
}

/// Row 14: a node that the kernel's out-of-memory killer ends (in a memory cgroup of 400 MB
/// without swap, made for the test) is said to be its victim. Needs root and a memory cgroup
/// (`scripts/test` skips it otherwise, saying so).
#[test]
fn a_node_killed_by_the_out_of_memory_killer_is_said_to_be() {
    let (parent, v1) = memory_cgroup().expect("no memory cgroup to make a test group in");
    let group = parent.join(format!("dsm-oom-test-{}", std::process::id()));
    std::fs::create_dir(&group).expect("make a memory cgroup (root needed)");
    if v1 {
        std::fs::write(group.join("memory.limit_in_bytes"), "400000000").unwrap();
        let memsw = group.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            std::fs::write(memsw, "400000000").unwrap();
        }
    } else {
        std::fs::write(group.join("memory.max"), "400000000").unwrap();
        let _ = std::fs::write(group.join("memory.swap.max"), "0");
    }
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} -n 2 {} oom",
        group.display(),
        bin("dsmrun").display(),
        outcomes().display()
    );
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &script]);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let _ = std::fs::remove_dir(&group);
    assert_status(&out, 137);
    let e = stderr(&out);
    assert!(
        e.contains("dsmrun: node 1 (127.0.0.1) was killed by signal 9 (SIGKILL: ")
            && e.contains("out-of-memory killer"),
        "{}",
        text(&out)
    );
}

/// Row 15: the README's pi_openmp lines, as written.
#[test]
fn the_readmes_openmp_example_builds_and_runs_as_written() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.contains("`target/release/dsmcc -O2 -fopenmp apps/c/pi_openmp.c -o pi_openmp -lm`"),
        "the README's line changed: update this test"
    );
    let dir = scratch("openmp");
    let out = Command::new(bin("dsmcc"))
        .args(["-O2", "-fopenmp"])
        .arg(repo().join("apps/c/pi_openmp.c"))
        .args(["-o", "pi_openmp", "-lm"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "-x", "OMP_NUM_THREADS=2", "./pi_openmp"])
        .current_dir(&dir);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
    assert_status(&out, 0);
    assert!(
        stdout(&out).contains("c-pi-openmp OK nodes=2 threads=2"),
        "{}",
        text(&out)
    );
}
