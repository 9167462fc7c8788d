//! The program's signals and the DSM's: a C program's own SIGSEGV and SIGBUS handlers installed
//! after `jia_init` sit behind the DSM's, which passes them every fault that is not its own; a
//! Rust program that replaces the DSM's handler (nothing stands between it and `sigaction`) has
//! its node ended with a message instead of faulting forever; a handler of a 1 kHz SIGALRM reads
//! shared memory while its thread waits in page faults and barriers; and `mprotect`, `munmap`,
//! `mremap` and discarding `madvise` on shared memory are refused with EPERM and a message,
//! instead of losing the writes that follow or ending the node later. Each a C program of
//! `tests/c` (or the `probe` binary), on 2 nodes, over UDP and TCP where the transport matters.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use dsm_tests::{bin, dsmrun, run_with_deadline, text};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `tests/c/<name>.c` compiled with the README's line, warnings as errors.
fn compile(name: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("dsm-signals-{name}-{}", std::process::id()));
    dsm_tests::compile_jia_c(
        &repo().join(format!("tests/c/{name}.c")),
        &out,
        &["-O2", "-Wall", "-Werror"],
    );
    out
}

fn run(program: &Path, flags: &[&str], args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2"]).args(flags).arg(program).args(args);
    run_with_deadline(cmd, Duration::from_secs(120))
}

fn assert_ok(out: &Output, want: &str) {
    let t = text(out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(want),
        "no `{want}`:\n{t}"
    );
}

/// A C program installs its own SIGSEGV handler (sigaction) and SIGBUS handler (signal) after
/// jia_init: it gets its own previous actions back (SIG_DFL, not the DSM's handler), shared
/// memory's faults are still served, and a write to a PROT_NONE page of its own and a read of
/// an unallocated address in the shared region reach its handler, which leaves by siglongjmp.
/// Before: the previous action given back was the DSM's handler, and the first fault on shared
/// memory went to the program's handler (which, like a crash reporter, ended the node with 3;
/// one that returns spun there forever).
#[test]
fn a_c_programs_own_segv_handler_sits_behind_the_dsms() {
    let exe = compile("segv_handler");
    for transport in ["udp", "tcp"] {
        let out = run(&exe, &["--transport", transport], &["8"]);
        assert_ok(&out, "c-segv-handler OK pages=8 nodes=2");
    }
    let _ = std::fs::remove_file(exe);
}

/// A Rust program replaces the DSM's SIGSEGV handler after init with one that returns, then
/// touches a page homed on the other node: the node ends with a message naming what happened and
/// what to do, status 1, within the test's deadline (the service thread looks every second).
/// Before: the faulting thread spun in the program's handler forever.
#[test]
fn a_rust_program_that_replaces_the_dsms_handler_is_ended_with_a_message() {
    let out = dsmrun(2, &[], "probe", &["replace-segv-handler"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the program replaced the DSM's SIGSEGV handler (with the handler at 0x")
            && err.contains("install yours before jia_init / Dsm::init"),
        "{t}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("read "),
        "{t}"
    );
}

/// A 1 kHz SIGALRM whose handler reads words of another node's block (often pages not held
/// here) while the main thread streams through remote pages with prefetch off and meets the
/// other node in two barriers a round, for 3 seconds: every word the handler reads is right,
/// every round's values are right, exit 0. Before: the node was killed by SIGSEGV (the handler
/// ran inside the fault handler, where SIGSEGV is blocked, and faulted), 3 runs in 3.
#[test]
fn a_signal_handler_reads_shared_memory_while_its_thread_waits_in_faults() {
    let exe = compile("alarm");
    for transport in ["udp", "tcp"] {
        let out = run(
            &exe,
            &["--transport", transport, "--set", "prefetch=off"],
            &["64", "3"],
        );
        assert_ok(&out, "c-alarm OK");
    }
    let _ = std::fs::remove_file(exe);
}

/// mprotect(PROT_READ|PROT_WRITE) on a shared page is refused (-1, EPERM, a line naming the
/// call and the range), and the 512 writes that follow reach node 0 after a barrier; munmap,
/// mremap, madvise(MADV_DONTNEED) and an mprotect that only ends in shared memory are refused
/// the same way; the same calls on the program's own memory, and MADV_WILLNEED on shared memory,
/// work as before. Before: mprotect returned 0 and all 512 writes were lost, exit 0 had the
/// program not counted them; munmap returned 0 and the node ended at the DSM's next mprotect
/// asking to raise vm.max_map_count.
#[test]
fn mprotect_and_munmap_on_shared_memory_are_refused_and_no_write_is_lost() {
    let exe = compile("protect");
    // The region where the addresses below say (the default, pinned).
    let out = run(&exe, &["--set", "global_start_addr=0x200000000000"], &[]);
    assert_ok(&out, "c-protect OK writes=512 nodes=2");
    let err = String::from_utf8_lossy(&out.stderr);
    for call in [
        "mprotect(0x200000000000, 4096, PROT_READ|PROT_WRITE) refused with EPERM: [0x200000000000, 0x200000001000) overlaps the DSM's shared memory [0x200000000000, ",
        "munmap(0x200000000000, 4096) refused with EPERM",
        "mremap(0x200000000000, 4096) refused with EPERM",
        "madvise(0x200000000000, 4096, MADV_DONTNEED) refused with EPERM",
        "mprotect(0x1ffffffff000, 8192, PROT_NONE) refused with EPERM",
    ] {
        let lines = err
            .lines()
            .filter(|l| l.starts_with("dsm node 1: ") && l.contains(call))
            .count();
        assert_eq!(lines, 1, "`{call}`:\n{}", text(&out));
    }
    assert_eq!(
        err.lines().filter(|l| l.contains("refused")).count(),
        5,
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_file(exe);
}
