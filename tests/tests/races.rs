//! The race checker (`dsmrun --check-races`): every racy program of `tests/src/bin/racy.rs` is
//! reported with its two marked lines and ends with status 66; the race-free ones and the apps
//! are not reported and end with 0.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use dsm_tests::{bin, dsmrun, run_with_deadline, text};

const SOURCE: &str = include_str!("../src/bin/racy.rs");

/// The lines of `racy.rs` marked `// race: CASE`, as the report names them.
fn marked(case: &str) -> Vec<String> {
    marked_with("race", case)
}

/// The lines of `racy.rs` marked `// MARK: CASE`.
fn marked_with(mark: &str, case: &str) -> Vec<String> {
    SOURCE
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with(&format!("// {mark}: {case}")))
        .map(|(i, _)| format!("tests/src/bin/racy.rs:{}", i + 1))
        .collect()
}

/// The racy cases: every `// race: CASE` in the source.
fn racy_cases() -> Vec<String> {
    cases_marked("race")
}

/// Every case marked `// MARK: CASE` in the source.
fn cases_marked(mark: &str) -> Vec<String> {
    let mut cases: Vec<String> = SOURCE
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter_map(|l| l.split(&format!("// {mark}: ")).nth(1))
        .map(|c| c.trim().to_string())
        .collect();
    cases.dedup();
    cases
}

#[test]
fn every_racy_program_is_reported_with_its_two_lines_and_ends_with_status_66() {
    let cases = racy_cases();
    assert!(cases.len() >= 8, "{cases:?}");
    for case in &cases {
        let out = dsmrun(2, &["--check-races"], "racy", &[case]);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(66), "{case}: {all}");
        let lines = marked(case);
        assert!(!lines.is_empty(), "{case}: no marked line");
        // One report names both marked lines (the same line twice where one line races with
        // itself on two nodes or threads).
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reports: Vec<&str> = stderr.split("dsm: data race ").skip(1).collect();
        assert!(
            reports.iter().any(|r| {
                let named: Vec<&String> = lines.iter().filter(|l| r.contains(l.as_str())).collect();
                named.len() == lines.len()
                    && lines
                        .iter()
                        .all(|l| r.matches(l.as_str()).count() >= 3 - lines.len())
            }),
            "{case}: no report names {lines:?}: {all}"
        );
        assert!(
            stderr.contains("of the allocation at tests/src/bin/racy.rs:12"),
            "{case}: the allocation's line: {all}"
        );
    }
}

#[test]
fn race_free_programs_are_not_reported() {
    for (nodes, case) in [
        (2, "free-lock"),
        (2, "free-cv"),
        (2, "free-atomic-flag"),
        (3, "free-atomic-flag"),
        (2, "free-fences"),
        (3, "free-fences"),
        (2, "free-false-sharing"),
        (2, "free-barrier"),
        (2, "free-slices-of-one-row"),
        (2, "free-slices-while-diffs-come"),
        (2, "free-guard-across-barriers"),
        (2, "free-guard-home-incoming"),
        (2, "free-slices-home-last"),
        (2, "free-many-threads"),
        (2, "free-hundreds-of-threads"),
        (3, "free-helper-locks"),
        (4, "free-helper-locks"),
    ] {
        let out = dsmrun(nodes, &["--check-races"], "racy", &[case]);
        assert!(
            out.status.success() && text(&out).contains("check_races: no data race found"),
            "{case} on {nodes} nodes: {}",
            text(&out)
        );
    }
    // The runtime alone, without the checker's slots (and their writes) in the way.
    for case in ["free-atomic-chain", "free-lock-then-atomic-chain"] {
        let out = dsmrun(3, &[], "racy", &[case]);
        assert!(out.status.success(), "{case}: {}", text(&out));
    }
}

/// Orders that pass through a third node: scope consistency orders a write before a read only
/// through one lock or condition variable (a node that takes lock 1 and then releases lock 2
/// passes nothing of lock 1's on), so a chain that leaves a node through an unlock is a race,
/// reported with its two lines; a chain through one lock, through two inside one node, or one
/// that leaves each node through an atomic word (an atomic release passes on what the node's
/// acquires made it see, as C11 orders it) is not, and those chains read the value written.
#[test]
fn chains_through_two_objects_are_races_and_through_one_are_not() {
    let cases = cases_marked("race (3 nodes)");
    assert!(cases.len() >= 2, "{cases:?}");
    for case in &cases {
        let out = dsmrun(3, &["--check-races"], "racy", &[case]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(66), "{case}: {}", text(&out));
        for line in marked_with("race (3 nodes)", case) {
            assert!(stderr.contains(&line), "{case}: {line} not named: {stderr}");
        }
    }
    for (nodes, case) in [
        (3, "free-lock-chain"),
        (3, "free-atomic-chain"),
        (3, "free-lock-then-atomic-chain"),
        (2, "free-chain-in-a-node"),
    ] {
        let out = dsmrun(nodes, &["--check-races"], "racy", &[case]);
        assert!(
            out.status.success() && text(&out).contains("check_races: no data race found"),
            "{case} on {nodes} nodes: {}",
            text(&out)
        );
    }
    // The runtime alone, without the checker's slots (and their writes) in the way.
    for case in ["free-atomic-chain", "free-lock-then-atomic-chain"] {
        let out = dsmrun(3, &[], "racy", &[case]);
        assert!(out.status.success(), "{case}: {}", text(&out));
    }
}

/// The apps, race-free, on 1, 2 and 4 nodes, and on 2 nodes of 2 threads: no report, status 0.
/// (lu's threads, which Rust's scope joins, were reported on 2 nodes: a row updated by one
/// thread in one step and by another in the next; they now meet in barriers of threads.)
#[test]
fn the_apps_are_not_reported() {
    let apps: [(&str, &[&str]); 9] = [
        ("sor", &["64", "4"]),
        ("matmul", &["64"]),
        ("lu", &["64", "16"]),
        ("pi", &["100000"]),
        ("jacobi", &["64", "4"]),
        ("tsp", &[]),
        ("water", &["256", "2"]),
        ("is", &[]),
        ("ep", &[]),
    ];
    for (nodes, threads) in [(1, "1"), (2, "1"), (4, "1"), (2, "2")] {
        for (app, args) in apps {
            let flags = ["--check-races", "--threads", threads];
            let out = dsmrun(nodes, &flags, app, args);
            assert!(
                out.status.success() && text(&out).contains("check_races: no data race found"),
                "{app} on {nodes} nodes of {threads} threads: {}",
                text(&out)
            );
        }
    }
}

// ----- Rust programs built for the checker with `cargo dsm-races` -----

/// `racy` and `sor` built with `cargo dsm-races` (once per run of these tests, into
/// `target/dsm-races`, beside the plain build's directory).
fn built_for_the_checker() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let mut cmd = Command::new(bin("cargo-dsm-races"));
            cmd.current_dir(repo()).args([
                "build",
                "--release",
                "-p",
                "dsm-tests",
                "--bin",
                "racy",
                "-p",
                "dsm-apps",
                "--bin",
                "sor",
            ]);
            let out = run_with_deadline(cmd, Duration::from_secs(1200));
            assert!(out.status.success(), "cargo dsm-races: {}", text(&out));
            let dir = dsm_tests::bin_dir()
                .parent()
                .expect("the target directory")
                .join("dsm-races/release");
            assert!(dir.join("racy").exists(), "{}: no racy", dir.display());
            dir
        })
        .clone()
}

fn dsmrun_checked_build(nodes: usize, program: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", &nodes.to_string(), "--check-races"])
        .arg(built_for_the_checker().join(program))
        .args(args);
    run_with_deadline(cmd, Duration::from_secs(120))
}

/// Whether one report names every line of `lines` (a line racing with itself twice), each
/// followed by a space or the line's end (line 4 is not line 40).
fn one_report_names_rust(stderr: &str, lines: &[String]) -> bool {
    stderr.split("dsm: data race ").skip(1).any(|r| {
        let count =
            |l: &String| r.matches(&format!("{l} ")).count() + r.matches(&format!("{l}\n")).count();
        match lines {
            [one] => count(one) >= 2,
            many => many.iter().all(|l| count(l) >= 1),
        }
    })
}

/// Built with `cargo dsm-races`, a Rust program's reads through slices are seen: a read in a
/// slice's iterator racing with another node's write is reported at the program's line, and a
/// row whose even elements one node reads through a slice while another writes its odd ones
/// (red-black SOR, and the sor app itself) is not. Every case of the plain build is found, or
/// not, as there.
#[test]
fn reads_through_slices_are_seen_in_a_build_for_the_checker() {
    let seen_built = cases_marked("race (cargo dsm-races)");
    assert!(!seen_built.is_empty());
    for case in seen_built.iter().chain(&racy_cases()) {
        let lines = match marked(case) {
            l if l.is_empty() => marked_with("race (cargo dsm-races)", case),
            l => l,
        };
        let out = dsmrun_checked_build(2, "racy", &[case]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(66), "{case}: {}", text(&out));
        assert!(
            one_report_names_rust(&stderr, &lines),
            "{case}: no report names {lines:?}: {}",
            text(&out)
        );
        // Both sides by one name (a line found through the debug information was absolute).
        assert!(
            !stderr.contains("/tests/src/bin/racy.rs"),
            "{case}: a path named two ways: {}",
            text(&out)
        );
    }
    for (nodes, case) in [
        (2, "free-red-black-reads"),
        (2, "free-slices-of-one-row"),
        (2, "free-guard-across-barriers"),
        (2, "free-guard-home-incoming"),
        (2, "free-slices-home-last"),
        (2, "free-false-sharing"),
        (2, "free-lock"),
        (2, "free-cv"),
        (2, "free-atomic-flag"),
        (2, "free-barrier"),
        (2, "free-many-threads"),
        (3, "free-helper-locks"),
    ] {
        let out = dsmrun_checked_build(nodes, "racy", &[case]);
        assert!(
            out.status.success() && text(&out).contains("check_races: no data race found"),
            "{case} on {nodes} nodes: {}",
            text(&out)
        );
    }
    // A plain build is told how to see more; a build for the checker is not.
    let hint = "build with `cargo dsm-races` to see them";
    let plain = dsmrun(2, &["--check-races"], "racy", &["free-lock"]);
    assert!(text(&plain).contains(hint), "{}", text(&plain));
    let built = dsmrun_checked_build(2, "racy", &["free-lock"]);
    assert!(!text(&built).contains(hint), "{}", text(&built));
    for nodes in [2, 3] {
        let out = dsmrun_checked_build(nodes, "sor", &["64", "4"]);
        assert!(
            out.status.success() && text(&out).contains("check_races: no data race found"),
            "sor on {nodes} nodes: {}",
            text(&out)
        );
    }
}

// ----- C programs, built with `dsmcc --check-races` -----

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Builds `src` for the checker with `dsmcc --check-races` (and `cc`, or `DSMCC_CC=compiler`),
/// into a file of its own: tests that run side by side build the same source (two clang
/// tests wrote one file, and one ran the other's half-written program: "Text file busy").
fn build_checked(src: &Path, compiler: &str, flags: &[&str]) -> PathBuf {
    static BUILT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let out = std::env::temp_dir().join(format!(
        "dsm-races-{}-{compiler}-{}-{}",
        src.file_stem().unwrap().to_string_lossy(),
        std::process::id(),
        BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    dsm_tests::remove_at_exit(&out);
    let r = Command::new(bin("dsmcc"))
        .env("DSMCC_CC", compiler)
        .args(["--check-races", "-O2", "-Wall"])
        .args(flags)
        .arg(src)
        .arg("-o")
        .arg(&out)
        .args(["-lm", "-lpthread"])
        .output()
        .expect("run dsmcc");
    assert!(r.status.success(), "dsmcc {}: {}", src.display(), text(&r));
    out
}

fn run_checked(nodes: usize, program: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args([
        "-n",
        &nodes.to_string(),
        "--check-races",
        "-x",
        "OMP_NUM_THREADS=2",
    ])
    .arg(program)
    .args(args);
    run_with_deadline(cmd, Duration::from_secs(120))
}

/// The lines of `src` marked `/* race */`, as the report names them (`path:line`).
fn marked_c(src: &Path) -> Vec<String> {
    std::fs::read_to_string(src)
        .expect("read the source")
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("/* race */"))
        .map(|(i, _)| format!("{}:{}", src.display(), i + 1))
        .collect()
}

/// Whether one report of `stderr` names every line of `lines` (a line racing with itself twice).
fn one_report_names(stderr: &str, lines: &[String]) -> bool {
    stderr.split("dsm: data race ").skip(1).any(|r| {
        // `path:line` followed by a space: line 4 is not line 40.
        let count = |l: &String| r.matches(&format!("{l} ")).count();
        match lines {
            [one] => count(one) >= 2,
            many => many.iter().all(|l| count(l) >= 1),
        }
    })
}

/// The flags a corpus program needs: `-fopenmp` for the OpenMP ones.
fn openmp_flags(src: &Path) -> &'static [&'static str] {
    if src.to_string_lossy().contains("openmp") {
        &["-fopenmp"]
    } else {
        &[]
    }
}

fn c_corpus() -> Vec<PathBuf> {
    let dir = repo().join("tests/c/races");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    files.sort();
    files
}

fn is_free(p: &Path) -> bool {
    p.file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("free_")
}

/// Built with `-D_FORTIFY_SOURCE=2`, as Debian's and Fedora's build flags do, the string
/// functions' races are still reported: dsmcc turns fortification off for the checker (the
/// fortified `__strcpy_chk` went around libjia's entries, and the race went unreported).
#[test]
fn fortified_builds_are_checked_too() {
    for name in ["race_strcpy_name.c", "race_memcpy_row.c"] {
        let src = repo().join("tests/c/races").join(name);
        let prog = build_checked(&src, "cc", &["-D_FORTIFY_SOURCE=2"]);
        let out = run_checked(2, &prog, &[]);
        let _ = std::fs::remove_file(&prog);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(66), "{name}: {}", text(&out));
        assert!(
            one_report_names(&stderr, &marked_c(&src)),
            "{name}: {}",
            text(&out)
        );
    }
}

/// Every racy C program of `tests/c/races` is reported with its two marked lines and ends with
/// status 66; the race-free ones (`free_*.c`) are not reported.
#[test]
fn every_racy_c_program_is_reported_with_its_two_lines() {
    let files = c_corpus();
    assert!(
        files.iter().filter(|p| !is_free(p)).count() >= 8,
        "{files:?}"
    );
    for src in files {
        let prog = build_checked(&src, "cc", openmp_flags(&src));
        let out = run_checked(2, &prog, &[]);
        let _ = std::fs::remove_file(&prog);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if is_free(&src) {
            assert!(
                out.status.success() && stderr.contains("check_races: no data race found"),
                "{}: {}",
                src.display(),
                text(&out)
            );
            continue;
        }
        let lines = marked_c(&src);
        assert!(
            !lines.is_empty() && lines.len() <= 2,
            "{}: marks {lines:?}",
            src.display()
        );
        assert_eq!(
            out.status.code(),
            Some(66),
            "{}: {}",
            src.display(),
            text(&out)
        );
        assert!(
            one_report_names(&stderr, &lines),
            "{}: no report names {lines:?}: {}",
            src.display(),
            text(&out)
        );
        assert!(
            stderr.contains(&format!("of the allocation at {}:", src.display())),
            "{}: the allocation's line: {}",
            src.display(),
            text(&out)
        );
    }
}

/// The same with clang's instrumentation (other hook names for unaligned accesses, a read kept
/// before a write, memory intrinsics as calls, `bcmp` for a `memcmp` compared with 0), on two
/// programs, the ones using the C library's memory functions and their race-free control.
#[test]
fn clang_built_programs_are_checked_too() {
    if Command::new("clang").arg("--version").output().is_err() {
        eprintln!("skipped: clang is not installed (apt-get install clang)");
        return;
    }
    let by_library = |p: &PathBuf| {
        ["memcpy", "memset", "strcpy", "string_functions"]
            .iter()
            .any(|f| p.to_string_lossy().contains(f))
    };
    let corpus = c_corpus();
    // gcc's OpenMP (libgomp) alone is seen: clang's runtime is another.
    let first_two = corpus
        .iter()
        .filter(|p| !is_free(p) && !by_library(p) && openmp_flags(p).is_empty())
        .take(2);
    for src in first_two.chain(corpus.iter().filter(|p| by_library(p))) {
        let prog = build_checked(src, "clang", &[]);
        let out = run_checked(2, &prog, &[]);
        let _ = std::fs::remove_file(&prog);
        if is_free(src) {
            assert!(
                out.status.success() && text(&out).contains("check_races: no data race found"),
                "{}: {}",
                src.display(),
                text(&out)
            );
            continue;
        }
        let lines = marked_c(src);
        assert!(
            out.status.code() == Some(66)
                && one_report_names(&String::from_utf8_lossy(&out.stderr), &lines),
            "{}: {}",
            src.display(),
            text(&out)
        );
    }
}

/// clang's vectorising builds (`-O3 -march=native`: loops of 32- and 64-byte vector accesses,
/// which its ThreadSanitizer pass leaves unchecked, and 16-byte loads over a row's even
/// elements, which it checks as reads of the odd ones too): dsmcc builds checked sources without
/// vectorising, so the races of stencils and rows are reported and disjoint strides are not (an
/// outside attack: four of these went unreported, and the strided program was reported).
#[test]
fn clang_vectorising_builds_are_checked_as_written() {
    if Command::new("clang").arg("--version").output().is_err() {
        eprintln!("skipped: clang is not installed (apt-get install clang)");
        return;
    }
    for name in [
        "race_2d_row_column.c",
        "race_band_neighbour_first.c",
        "race_halo_no_barrier.c",
        "race_missing_init_barrier.c",
        "free_strided_halves.c",
    ] {
        let src = repo().join("tests/c/races").join(name);
        let prog = build_checked(&src, "clang", &["-O3", "-march=native"]);
        let out = run_checked(2, &prog, &[]);
        let _ = std::fs::remove_file(&prog);
        if is_free(&src) {
            assert!(
                out.status.success() && text(&out).contains("check_races: no data race found"),
                "{name}: {}",
                text(&out)
            );
        } else {
            assert!(
                out.status.code() == Some(66)
                    && one_report_names(&String::from_utf8_lossy(&out.stderr), &marked_c(&src)),
                "{name}: {}",
                text(&out)
            );
        }
    }
}

/// Every call dsmcc renames in a checked object (its `objcopy --redefine-sym` line, shown by
/// `--show`) has its entry in libjia: a name missing there would fail to link only the
/// programs that call it.
#[test]
fn every_call_dsmcc_renames_has_its_entry_in_libjia() {
    let show = Command::new(bin("dsmcc"))
        .args(["--show", "--check-races", "x.c", "-o", "x"])
        .output()
        .expect("run dsmcc --show");
    // With gcc, a source with atomics: its plain accesses' hooks renamed.
    let atomic = std::env::temp_dir().join(format!("dsm-renames-{}.c", std::process::id()));
    std::fs::write(&atomic, "#include <stdatomic.h>\n").unwrap();
    let show_atomic = Command::new(bin("dsmcc"))
        .env("DSMCC_CC", "gcc")
        .arg("--show")
        .arg(&atomic)
        .args(["-o", "x"])
        .output()
        .expect("run dsmcc --show");
    let _ = std::fs::remove_file(&atomic);
    let shown = String::from_utf8_lossy(&show.stdout).into_owned()
        + &String::from_utf8_lossy(&show_atomic.stdout);
    let renamed: Vec<&str> = shown
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--redefine-sym="))
        .filter_map(|w| w.split_once('=').map(|(_, to)| to))
        .collect();
    assert!(renamed.len() >= 20, "{shown}");
    assert!(
        renamed.contains(&"__dsm_unchecked_read8"),
        "gcc's atomics build renames no plain access hook: {shown}"
    );
    let lib = bin("dsmcc").with_file_name("libjia.a");
    let Ok(nm) = Command::new("nm").arg("--defined-only").arg(&lib).output() else {
        eprintln!("skipped: nm is not installed (apt-get install binutils)");
        return;
    };
    let defined = String::from_utf8_lossy(&nm.stdout);
    for name in renamed {
        assert!(
            defined.lines().any(|l| l.ends_with(&format!(" T {name}"))),
            "{name} is renamed to by dsmcc but not defined in {}",
            lib.display()
        );
    }
}

/// An object compiled on its own (`dsmcc --check-races -c`) and linked after: its calls of
/// the C library's memory functions are seen as well.
#[test]
fn an_object_compiled_alone_is_checked_when_linked() {
    let src = repo().join("tests/c/races/race_memset_vs_store.c");
    let object = std::env::temp_dir().join(format!("dsm-races-alone-{}.o", std::process::id()));
    let prog = object.with_extension("");
    let r = Command::new(bin("dsmcc"))
        .args(["--check-races", "-O2", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&object)
        .output()
        .expect("run dsmcc");
    assert!(r.status.success(), "dsmcc -c: {}", text(&r));
    let r = Command::new(bin("dsmcc"))
        .arg("--check-races")
        .arg(&object)
        .arg("-o")
        .arg(&prog)
        .output()
        .expect("run dsmcc");
    assert!(r.status.success(), "dsmcc link: {}", text(&r));
    let out = run_checked(2, &prog, &[]);
    let _ = std::fs::remove_file(&object);
    let _ = std::fs::remove_file(&prog);
    assert!(
        out.status.code() == Some(66)
            && one_report_names(&String::from_utf8_lossy(&out.stderr), &marked_c(&src)),
        "{}",
        text(&out)
    );
}

/// A 10 kHz timer's handler reading shared memory while its thread allocates without pause
/// (`tests/c/handler_malloc.c`): the job ends, and the handler's read races with a write
/// another node makes later, unordered, and is reported with its line; the same with the
/// handler installed before `jia_init`. Before: the handler's access, recorded with an
/// allocation inside the interrupted `malloc`, hung the node, 3 runs in 3.
#[test]
fn a_signal_handler_touching_shared_memory_is_checked_without_hanging() {
    let src = repo().join("tests/c/handler_malloc.c");
    let source = std::fs::read_to_string(&src).expect("read the source");
    let line = |mark: &str| {
        let n = source
            .lines()
            .position(|l| l.contains(mark))
            .expect("a marked line")
            + 1;
        format!("{}:{n}", src.display())
    };
    let lines = [line("/* handler read */"), line("/* late write */")];
    let prog = build_checked(&src, "cc", &[]);
    // Installed after jia_init, and before it.
    for when in [&["2"][..], &["2", "early"]] {
        let out = run_checked(2, &prog, when);
        assert!(
            out.status.code() == Some(66)
                && String::from_utf8_lossy(&out.stdout).contains("handler_malloc OK")
                && one_report_names(&String::from_utf8_lossy(&out.stderr), &lines),
            "{}",
            text(&out)
        );
    }
    let _ = std::fs::remove_file(&prog);
}

/// pthread and OpenMP synchronisation beyond mutexes and barriers (a review's programs):
/// `pthread_exit` before a join, read-write locks, spin locks, timed and try locks and
/// semaphores, `pthread_once`; OpenMP locks and `omp ordered`, `single copyprivate`, `omp for
/// nowait` then `omp barrier`. Race-free: no report.
#[test]
fn more_thread_synchronisation_is_seen() {
    let modes: [(&str, &[&str], &[&str]); 2] = [
        (
            "tests/c/races_pthread_modes.c",
            &["-lpthread"],
            &[
                "exit",
                "rwlock",
                "spin",
                "timedlock",
                "semtry",
                "semtimed",
                "once",
                "cancel",
            ],
        ),
        (
            "tests/c/races_omp_modes.c",
            &["-fopenmp"],
            &["ordered", "lock", "copyprivate", "loopnowait"],
        ),
    ];
    for (src, flags, cases) in modes {
        let prog = build_checked(&repo().join(src), "cc", flags);
        for case in cases {
            let out = run_checked(2, &prog, &[case]);
            assert!(
                out.status.success() && text(&out).contains("check_races: no data race found"),
                "{src} {case}: {}",
                text(&out)
            );
        }
        let _ = std::fs::remove_file(&prog);
    }
}

/// Two threads of a node meet at a reused barrier (pthread's, or OpenMP's), then both write
/// one element, in each of 5 rounds: the race is found in every round (one barrier clock for
/// all rounds let a fast thread's next round hide a slow thread's, 2 runs in 5).
#[test]
fn a_race_between_every_round_of_a_reused_barrier_is_found() {
    let prog = build_checked(
        &repo().join("tests/c/races_barrier_rounds.c"),
        "cc",
        &["-fopenmp", "-lpthread"],
    );
    for mode in ["pt", "omp"] {
        for _ in 0..2 {
            let out = run_checked(1, &prog, &[mode, "5"]);
            assert!(
                out.status.code() == Some(66) && text(&out).contains("(5 times)"),
                "{mode}: {}",
                text(&out)
            );
        }
    }
    let _ = std::fs::remove_file(&prog);
}

/// The C programs of the suite, race-free, under the checker on 1, 2 and 4 nodes: no report.
#[test]
fn the_c_programs_are_not_reported() {
    let programs: [(&str, &[&str], &[&str]); 12] = [
        ("apps/c/matmul.c", &[], &["64"]),
        ("tests/c/jia21.c", &["-DJIA_FLOAT_CLOCK"], &["50000", "3"]),
        ("tests/c/io.c", &[], &["256"]),
        ("tests/c/io_calls.c", &[], &["64"]),
        ("apps/c/sor.c", &[], &["64", "4"]),
        ("apps/c/lu.c", &[], &["64", "16"]),
        ("apps/c/sor_pthreads.c", &[], &["64", "4", "2"]),
        ("apps/c/pi_openmp.c", &["-fopenmp"], &["100000"]),
        ("tests/c/threads.c", &[], &[]),
        ("tests/c/messages.c", &[], &[]),
        ("tests/c/splash.c", &[], &[]),
        // Threads cancelled inside jia_lock, faults and the checker's own work (which opens
        // files and draws random keys, cancellation points: a worker ended holding its lock).
        ("tests/c/cancel.c", &["-pthread"], &["4"]),
    ];
    for (src, flags, args) in programs {
        let prog = build_checked(&repo().join(src), "cc", flags);
        for nodes in [1, 2, 4] {
            let out = run_checked(nodes, &prog, args);
            assert!(
                out.status.success() && text(&out).contains("check_races: no data race found"),
                "{src} on {nodes} nodes: {}",
                text(&out)
            );
        }
        let _ = std::fs::remove_file(&prog);
    }
}

// ----- Random programs (`randprog`) -----

const RANDPROG: &str = include_str!("../src/bin/randprog.rs");

fn randprog_line(mark: &str) -> String {
    let line = RANDPROG
        .lines()
        .position(|l| l.trim_end().ends_with(&format!("// race: {mark}")))
        .expect("a marked line")
        + 1;
    format!("tests/src/bin/randprog.rs:{line}")
}

/// Random race-free programs of the simulator's kind (owned, read-only, locked and published
/// words, phase by phase) on 1, 2 and 4 nodes: no report. The same programs with one
/// unsynchronised write to a word another node owns: reported, naming that write and the
/// owner's, and every report names the intruding write (nothing else is racy).
#[test]
fn random_race_free_programs_are_not_reported_and_one_injected_race_is() {
    let seeds: Vec<String> = (1..=6).map(|s| s.to_string()).collect();
    for nodes in [1, 2, 4] {
        for seed in &seeds {
            let out = dsmrun(nodes, &["--check-races"], "randprog", &[seed]);
            assert!(
                out.status.success() && text(&out).contains("check_races: no data race found"),
                "seed {seed} on {nodes} nodes: {}",
                text(&out)
            );
        }
    }
    let (owner, intruder) = (randprog_line("owner"), randprog_line("intruder"));
    for nodes in [2, 4] {
        for seed in &seeds {
            let out = dsmrun(nodes, &["--check-races"], "randprog", &[seed, "racy"]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let reports: Vec<&str> = stderr.split("dsm: data race ").skip(1).collect();
            assert!(
                out.status.code() == Some(66)
                    && reports
                        .iter()
                        .any(|r| r.contains(&owner) && r.contains(&intruder))
                    && reports.iter().all(|r| r.contains(&intruder)),
                "seed {seed} racy on {nodes} nodes: {}",
                text(&out)
            );
        }
    }
}
