//! Every application, in Rust and in C on jia.h, exact on 1, 2 and 4 local nodes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dsm_tests::{bin, bin_dir, dsmrun, run_with_deadline, text};

/// (program, small arguments, the start of its result line)
const APPS: &[(&str, &[&str], &str)] = dsm_tests::SMALL_APPS;

fn check(out: &std::process::Output, want: &str, nodes: usize) {
    let t = text(out);
    assert!(out.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(want), "no `{want}`:\n{t}");
    assert!(
        stdout.contains(&format!("nodes={nodes}")),
        "wrong node count:\n{t}"
    );
}

#[test]
fn every_rust_app_is_exact_on_one_two_and_four_nodes() {
    for (app, args, want) in APPS {
        for n in [1, 2, 4] {
            check(&dsmrun(n, &[], app, args), want, n);
        }
    }
}

#[test]
fn apps_stay_exact_with_prefetch_off_and_a_tiny_cache() {
    for (app, args, want) in APPS {
        check(
            &dsmrun(
                3,
                &["--set", "prefetch=off", "--set", "cache_pages=32"],
                app,
                args,
            ),
            want,
            3,
        );
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Compiles `apps/c/<name>.c` against jia.h and libjia, shared or static; returns the binary.
fn compile_c(name: &str, static_lib: bool) -> PathBuf {
    compile_c_flags(name, static_lib, &[])
}

/// [`compile_c`] against libjia.so with flags of the program's own (`-fopenmp`).
fn compile_c_with(name: &str, flags: &[&str]) -> PathBuf {
    compile_c_flags(name, false, flags)
}

fn compile_c_flags(name: &str, static_lib: bool, flags: &[&str]) -> PathBuf {
    let lib = bin_dir();
    assert!(
        lib.join("libjia.so").exists() && lib.join("libjia.a").exists(),
        "libjia not built in {}",
        lib.display()
    );
    let out = std::env::temp_dir().join(format!(
        "dsm-c-{name}-{}-{}",
        if static_lib { "static" } else { "shared" },
        std::process::id()
    ));
    let mut cc = Command::new("cc");
    cc.args(flags)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(repo().join(format!("apps/c/{name}.c")));
    cc.arg("-I")
        .arg(repo().join("jia/include"))
        .arg("-L")
        .arg(&lib);
    if static_lib {
        cc.args([
            "-l:libjia.a",
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
        ]);
    } else {
        cc.args(["-ljia", "-lpthread", "-ldl", "-lm"])
            .arg(format!("-Wl,-rpath,{}", lib.display()));
    }
    let r = cc.output().expect("run cc");
    assert!(r.status.success(), "cc failed:\n{}", text(&r));
    out
}

fn dsmrun_path(n: usize, program: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.arg("-n").arg(n.to_string()).arg(program).args(args);
    run_with_deadline(cmd, Duration::from_secs(120))
}

#[test]
fn jiajia_c_programs_compile_against_jia_h_and_are_exact() {
    for (name, args, want) in [
        ("matmul", ["128", ""], "c-matmul OK"),
        ("sor", ["64", "4"], "c-sor OK"),
        ("lu", ["96", "16"], "c-lu OK"),
    ] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let shared = compile_c(name, false);
        for n in [1, 2, 4] {
            check(&dsmrun_path(n, &shared, &args), want, n);
        }
        let stat = compile_c(name, true);
        check(&dsmrun_path(2, &stat, &args), want, 2);
        let _ = std::fs::remove_file(shared);
        let _ = std::fs::remove_file(stat);
    }
}

#[test]
fn a_c_program_started_directly_with_a_jiahosts_starts_the_other_nodes_itself() {
    let prog = compile_c("matmul", false);
    let dir = std::env::temp_dir().join(format!("dsm-selflaunch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(".jiahosts"),
        "# three local nodes\n127.0.0.1\n127.0.0.1\nlocalhost\n",
    )
    .unwrap();
    let mut cmd = Command::new(&prog);
    cmd.arg("96").current_dir(&dir).env("DSM_STATS", "1");
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    check(&out, "c-matmul OK n=96 nodes=3", 3);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("statistics"),
        "jia_exit prints statistics at node 0:\n{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_file(prog);
}

#[test]
fn jia_error_ends_the_whole_job_and_names_the_node() {
    let src = std::env::temp_dir().join(format!("dsm-err-{}.c", std::process::id()));
    std::fs::write(
        &src,
        "#include \"jia.h\"\nint main(int c, char **v) { jia_init(c, v); jia_barrier();\n if (jiapid == 2) jia_error(\"node %d: input %s is %.1f\", jiapid, \"x\", 2.5);\n jia_barrier(); jia_exit(); return 0; }\n",
    )
    .unwrap();
    let exe = src.with_extension("");
    dsm_tests::compile_jia_c(&src, &exe, &[]);
    let out = dsmrun_path(4, &exe, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("node 2: input x is 2.5"), "{}", text(&out));
    assert!(
        err.contains("dsmrun: node 2"),
        "dsmrun names the failing node:\n{}",
        text(&out)
    );
    let _ = std::fs::remove_file(src);
    let _ = std::fs::remove_file(exe);
}

#[test]
fn node_zero_prints_the_statistics_table_with_stats() {
    let out = dsmrun(2, &["--stats"], "matmul", &["128"]);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let row = |name: &str| err.lines().any(|l| l.starts_with(name));
    assert!(
        row("statistics ") && err.contains("node 1") && row("getp_sent ") && row("legend: "),
        "the table, a row of counters, the legend:\n{}",
        text(&out)
    );
}

#[test]
fn every_rust_app_is_exact_over_tcp() {
    for (app, args, want) in APPS {
        for n in [2, 4] {
            check(&dsmrun(n, &["--transport", "tcp"], app, args), want, n);
        }
    }
}

#[test]
fn stats_json_holds_the_jobs_metadata_and_every_nodes_counters() {
    let file = std::env::temp_dir().join(format!("dsm-stats-{}.json", std::process::id()));
    let out = dsmrun(
        3,
        &["--stats-json", file.to_str().unwrap()],
        "matmul",
        &["128"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let json = std::fs::read_to_string(&file).expect("stats file written");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let nodes = v["nodes"].as_array().expect("a nodes array");
    assert_eq!(nodes.len(), 3, "{json}");
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(node["node"], i, "{json}");
        for key in ["getp_sent", "retransmissions"] {
            assert!(node[key].is_u64(), "{key} missing: {json}");
        }
        assert!(
            node["msgs_sent"]["GETP"].is_u64(),
            "msgs_sent.GETP missing: {json}"
        );
        assert!(
            node["bytes_received"].is_object(),
            "bytes_received missing: {json}"
        );
    }
    let _ = std::fs::remove_file(file);
}

/// `dsm-bench --floors-only`: every floor measured, each a positive number, the minimal remote
/// fault (a forked home over plain UDP) dearer than the bare fault and the round trip it is made
/// of, backing a fresh page cheaper than the minimal fault (which does not pay it), the streams
/// beside their yardsticks, and the ratios computed from them.
#[test]
fn dsm_bench_measures_the_floors() {
    let mut cmd = Command::new(bin("dsm-bench"));
    cmd.args(["--floors-only", "--repeat", "1"]);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = |name: &str| -> f64 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row `{name}`:\n{t}"));
        let v: f64 = line[name.len()..]
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("row `{name}` has no number:\n{t}"));
        assert!(v.is_finite() && v > 0.0, "row `{name}` is {v}:\n{t}");
        v
    };
    let bare = row("bare fault + mprotect (us)");
    let minimal = row("minimal remote fault, plain UDP (us)");
    let udp = row("UDP round trip, busy (us)");
    let fault = row("remote read fault, UDP (us)");
    assert!(minimal > bare && minimal > udp, "{t}");
    assert!(row("back a fresh page, memfd (us)") < minimal, "{t}");
    let ratio = row("remote fault / minimal fault");
    assert!((ratio - fault / minimal).abs() < 0.01, "{t}");
    row("minimal fault / (fault floor + busy UDP round trip)");
    // The streams beside their two yardsticks, and the ratios taken from them.
    let plain = row("a plain TCP stream between two processes of this machine (MB/s)");
    let landed = row("the same stream landed in fresh pages of a memory file and read (MB/s)");
    let tcp = row("remote pages streamed, TCP, 2 nodes (MB/s)");
    row("remote pages streamed, UDP, 2 nodes (MB/s)");
    let in_place = row("remote pages streamed, in place, 2 nodes (MB/s)");
    let copied = row("remote pages streamed, copied in place, 2 nodes (MB/s)");
    let close = |name: &str, want: f64| {
        let got = row(name);
        assert!(
            (got - want).abs() < 0.01,
            "`{name}` is {got}, not {want}:\n{t}"
        );
    };
    close("landed stream / plain TCP stream", landed / plain);
    close("remote pages streamed, TCP / landed stream", tcp / landed);
    close("remote pages streamed, TCP / plain TCP stream", tcp / plain);
    close(
        "remote pages streamed, in place / plain TCP stream",
        in_place / plain,
    );
    close(
        "remote pages streamed, copied in place / plain TCP stream",
        copied / plain,
    );
    // How much of each stream landed in large folios: the reader's requests, one count per
    // sample (0 only where the node could not make its tmpfs and says so at debug level).
    for transport in ["UDP", "TCP"] {
        let name = format!("in remote pages streamed, {transport}, 2 nodes: ");
        let counts: Vec<u64> = stdout
            .lines()
            .find_map(|l| l.split_once(name.as_str()).map(|(_, v)| v))
            .unwrap_or_else(|| panic!("no large-folio line for {transport}:\n{t}"))
            .split_whitespace()
            .map(|v| v.parse().expect("a count"))
            .collect();
        assert_eq!(counts.len(), 1, "{transport}: {counts:?}\n{t}");
    }
}

/// `dsm-bench --json/--csv/--chart`: every run's raw samples and every floor sample in the files,
/// with the machine, date and commit; the chart's two files.
#[test]
fn dsm_bench_writes_every_sample_and_the_chart() {
    let dir = std::env::temp_dir().join(format!("dsm-bench-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, csv, chart) = (dir.join("b.json"), dir.join("b.csv"), dir.join("chart"));
    let mut cmd = Command::new(bin("dsm-bench"));
    cmd.args([
        "--apps",
        "pi:2000000,matmul:256",
        "--nodes",
        "1,2",
        "--transports",
        "udp",
        "--prefetch",
        "on",
        "--repeat",
        "2",
    ])
    .arg("--json")
    .arg(&json)
    .arg("--csv")
    .arg(&csv)
    .arg("--chart")
    .arg(&chart);
    let out = run_with_deadline(cmd, Duration::from_secs(300));
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).unwrap();
    for key in ["date", "commit", "machine", "kernel"] {
        assert!(v[key].as_str().is_some_and(|s| !s.is_empty()), "{key}: {v}");
    }
    let cells = v["cells"].as_array().expect("cells");
    // 2 apps x 2 node counts, and a pair per app.
    assert_eq!(cells.len(), 6, "{v}");
    for c in cells {
        assert_eq!(c["wall_s"].as_array().map(Vec::len), Some(2), "{c}");
        assert_eq!(c["compute_s"].as_array().map(Vec::len), Some(2), "{c}");
        let walls: Vec<f64> = c["wall_s"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_f64())
            .collect();
        let med = c["median_s"].as_f64().unwrap();
        // Two samples: their mean.
        assert!(
            walls.len() == 2
                && walls.iter().all(|&w| w > 0.0)
                && (med - (walls[0] + walls[1]) / 2.0).abs() < 1e-9,
            "{c}"
        );
    }
    let floors = v["floors"]["samples"].as_array().expect("floor samples");
    let bare = floors
        .iter()
        .find(|f| f["name"] == "bare fault + mprotect (us)")
        .expect("bare fault samples");
    assert!(
        bare["samples"].as_array().is_some_and(|s| s.len() >= 5),
        "{bare}"
    );
    let csv = std::fs::read_to_string(&csv).expect("csv written");
    assert_eq!(
        csv.lines().filter(|l| l.starts_with("run,")).count(),
        12,
        "{csv}"
    );
    assert!(csv.lines().any(|l| l.starts_with("floor,")), "{csv}");
    for ext in ["svg", "png"] {
        let f = dir.join(format!("chart.{ext}"));
        assert!(
            std::fs::metadata(&f).is_ok_and(|m| m.len() > 1000),
            "{}",
            f.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The MPI yardstick (bench/mpi, built here by scripts/build-mpi): `dsm-bench --mpi` runs matmul
/// and sor under mpirun beside the DSM, each checked once and timed without the check. Needs
/// mpicc, mpirun and libclang (`./scripts/test` installs them as root, or skips this test by
/// name saying what is missing); run without them, it fails saying so.
#[test]
fn mpi_yardstick_runs_beside_the_dsm_in_dsm_bench() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let have = |c: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    // Never passes without running: scripts/test installs what it needs or skips it by name,
    // saying why.
    assert!(
        have("mpicc") && have("mpirun"),
        "the MPI yardstick needs libopenmpi-dev, openmpi-bin and libclang-dev: install them, or \
         run ./scripts/test, which installs them as root and otherwise skips this test by name"
    );
    let mut build = Command::new(repo.join("scripts/build-mpi"));
    build.current_dir(repo);
    let out = run_with_deadline(build, Duration::from_secs(600));
    assert!(out.status.success(), "scripts/build-mpi: {}", text(&out));
    let json = std::env::temp_dir().join(format!("dsm-bench-mpi-{}.json", std::process::id()));
    let mut cmd = Command::new(bin("dsm-bench"));
    cmd.args([
        "--apps",
        "matmul:256,sor:128:4",
        "--nodes",
        "1,2",
        "--transports",
        "udp",
        "--prefetch",
        "on",
        "--repeat",
        "1",
        "--no-floors",
        "--no-chart",
        "--no-pairs",
        "--mpi",
        "--json",
    ])
    .arg(&json);
    let out = run_with_deadline(cmd, Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).unwrap();
    let mpi: Vec<&serde_json::Value> = v["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["transport"] == "mpi")
        .collect();
    assert_eq!(mpi.len(), 4, "matmul and sor on 1 and 2 ranks: {v}");
    for c in mpi {
        assert_eq!(c["failures"], 0, "{c}");
        assert_eq!(c["check_failed"], false, "{c}");
        assert!(c["compute_s"][0].as_f64().is_some_and(|t| t >= 0.0), "{c}");
        assert!(c["wall_s"][0].as_f64().is_some_and(|t| t > 0.0), "{c}");
    }
    let _ = std::fs::remove_file(json);
}

/// Every binary answers `--help` (usage, status 0) and `--version`, and refuses an unknown option
/// with status 2: `matmul --help` prints usage, not an error.
#[test]
fn every_binary_has_help_and_version() {
    for b in [
        "dsmrun",
        "dsm-bench",
        "fault-trace",
        "faultlat",
        "matmul",
        "sor",
        "lu",
        "jacobi",
        "pi",
        "tsp",
        "water",
        "is",
        "ep",
    ] {
        let out = Command::new(bin(b)).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && help.to_lowercase().contains("usage"),
            "{b} --help:\n{}",
            text(&out)
        );
        let out = Command::new(bin(b)).arg("--version").output().unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("0.1"),
            "{b} --version:\n{}",
            text(&out)
        );
        if b != "dsmrun" {
            let out = Command::new(bin(b))
                .arg("--no-such-option")
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(2), "{b}:\n{}", text(&out));
        }
    }
}

/// Output files that cannot be written are refused before any run, with status 2: dsm-bench's
/// `--csv` and `--json` (which ran the whole matrix, then said so and ended with 0), and a
/// node's fault trace (`DSM_FAULT_TRACE`, said after the run). An outside attack.
#[test]
fn output_files_that_cannot_be_written_are_refused_before_the_runs() {
    let missing = std::env::temp_dir().join(format!("dsm-no-such-dir-{}", std::process::id()));
    for flag in ["--csv", "--json"] {
        let out = Command::new(bin("dsm-bench"))
            .args(["--no-floors", "--no-chart", "--no-pairs", "--repeat", "1"])
            .args(["--apps", "pi", "--nodes", "1", flag])
            .arg(missing.join("out"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", text(&out));
        assert!(
            text(&out).contains(&format!("{flag} {}", missing.join("out").display()))
                && !String::from_utf8_lossy(&out.stdout).contains("median_s"),
            "{flag}: {}",
            text(&out)
        );
    }
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2"])
        .arg(bin("faultlat"))
        .arg("50")
        .env("DSM_FAULT_TRACE", &missing);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot write the fault trace")
            && !String::from_utf8_lossy(&out.stdout).contains("us"),
        "{}",
        text(&out)
    );
}

/// A value given twice in a dsm-bench list is refused before any run, named (`--nodes 1,1`
/// ran the cell twice and reported it twice).
#[test]
fn dsm_bench_refuses_a_value_given_twice() {
    for (flag, list, named) in [
        ("--nodes", "1,2,1", "--nodes: 1 is given twice"),
        ("--threads", "2,2", "--threads: 2 is given twice"),
        (
            "--transports",
            "tcp,udp,tcp",
            "--transports: tcp is given twice",
        ),
        ("--prefetch", "off,off", "--prefetch: off is given twice"),
    ] {
        let out = Command::new(bin("dsm-bench"))
            .args(["--no-floors", "--no-chart", "--no-pairs", "--repeat", "1"])
            .args(["--apps", "pi", flag, list])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag} {list}: {}", text(&out));
        assert!(
            text(&out).contains(named) && !text(&out).contains("checking"),
            "{flag} {list}: {}",
            text(&out)
        );
    }
}

/// A cell whose app fails: its self-check and its timed runs are counted apart (the check
/// counted as a third failed run of two), its times are `-` and null, and dsm-bench ends with 1.
#[test]
fn dsm_bench_counts_a_failed_check_apart_from_failed_runs() {
    let json = std::env::temp_dir().join(format!("dsm-bench-fail-{}.json", std::process::id()));
    let out = Command::new(bin("dsm-bench"))
        .args(["--no-floors", "--no-chart", "--no-pairs", "--repeat", "2"])
        .args(["--apps", "pi:0", "--transports", "udp", "--prefetch", "on"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(check FAILED, 2 of 2 runs FAILED)"),
        "{}",
        text(&out)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).unwrap();
    let c = &v["cells"][0];
    assert_eq!(c["check_failed"], true, "{c}");
    assert_eq!(c["failures"], 2, "{c}");
    assert!(c["median_s"].is_null(), "{c}");
    let _ = std::fs::remove_file(json);
}

/// A count of 0 is refused before the program joins a job, with the argument named.
#[test]
fn stream_refuses_a_count_of_zero() {
    for (args, name) in [
        (&["0"][..], "megabytes"),
        (&["16", "0"][..], "stride"),
        (&["16", "1", "0"][..], "passes"),
    ] {
        refused(
            "stream",
            args,
            &format!("{name} must be a whole number, 1 or more, got `0`"),
        );
    }
}

/// `app args` (started directly: one node) ends with status 2 and says `says`, before any
/// work.
fn refused(app: &str, args: &[&str], says: &str) {
    let out = Command::new(bin(app)).args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{app} {args:?}:\n{}",
        text(&out)
    );
    assert!(
        text(&out).contains(says),
        "{app} {args:?}: no `{says}`:\n{}",
        text(&out)
    );
}

/// A size, count or block of 0 is refused, naming the argument, where the apps took it as 1 or
/// ran a job of nothing and called it OK; tsp's cities outside 4 to 16 are refused, where it
/// took the nearest, and is' keys of 2^32 or more, which it cut to 32 bits. Iterations and
/// steps may be 0.
#[test]
fn the_apps_refuse_sizes_of_zero_and_cities_out_of_range() {
    for (app, args, name) in [
        ("matmul", &["0"][..], "matrix size"),
        ("lu", &["0"][..], "matrix size"),
        ("lu", &["64", "0"][..], "block size"),
        ("sor", &["0"][..], "grid size"),
        ("jacobi", &["0"][..], "grid size"),
        ("water", &["0"][..], "molecules"),
        ("is", &["0"][..], "keys"),
        ("pi", &["0"][..], "intervals"),
        ("ep", &["0"][..], "pairs"),
        ("workq", &["0"][..], "tasks"),
    ] {
        refused(
            app,
            args,
            &format!("{name} must be a whole number, 1 or more, got `0`"),
        );
    }
    for n in ["3", "17"] {
        refused(
            "tsp",
            &[n],
            &format!("cities must be a whole number, 4 to 16, got `{n}`"),
        );
    }
    // Not a number: the same message (a count's says 1 or more, not 0).
    refused(
        "matmul",
        &["abc"],
        "matrix size must be a whole number, 1 or more, got `abc`",
    );
    for n in ["0", "4294967297"] {
        refused(
            "is",
            &["1000", n],
            &format!("max key must be a whole number, 1 to 4294967296, got `{n}`"),
        );
    }
}

/// A `.jiahosts` in the working directory means the same job to every entry point: dsmrun
/// (which says it uses it), a Rust program started directly, and (above) a C program started
/// directly.
#[test]
fn a_jiahosts_here_is_the_job_for_dsmrun_and_for_a_rust_program_started_directly() {
    let dir = std::env::temp_dir().join(format!("dsm-jiahosts-here-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".jiahosts"), "127.0.0.1\nlocalhost\nlocalhost\n").unwrap();
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.arg(bin("matmul")).arg("96").current_dir(&dir);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    check(&out, "matmul OK f64 n=96", 3);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("dsmrun: 3 nodes on the hosts of .jiahosts"),
        "{}",
        text(&out)
    );
    let mut cmd = Command::new(bin("matmul"));
    cmd.arg("96").current_dir(&dir);
    let out = run_with_deadline(cmd, Duration::from_secs(60));
    check(&out, "matmul OK f64 n=96", 3);
    let _ = std::fs::remove_dir_all(dir);
}

/// Home migration end to end: jacobi with both grids on node 0 (`--on-node-0`) on 3 nodes is
/// exact with migration on (the default) and off. Off, every step sends the bands back to node 0
/// as diffs; on, the bands' pages moved to their writers at the first barrier (before the
/// statistics start), so only the pages two bands share are diffed.
#[test]
fn home_migration_moves_the_bands_of_a_program_that_allocates_on_node_0() {
    let mut diffs = Vec::new();
    for setting in ["home_migration=on", "home_migration=off"] {
        let file =
            std::env::temp_dir().join(format!("dsm-hmig-{}-{setting}.json", std::process::id()));
        let opts = ["--stats-json", file.to_str().unwrap(), "--set", setting];
        let out = dsmrun(3, &opts, "jacobi", &["--on-node-0", "200", "6"]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("jacobi OK nodes=3"),
            "{}",
            text(&out)
        );
        let json = std::fs::read_to_string(&file).expect("stats file written");
        let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        let sent: u64 = v["nodes"]
            .as_array()
            .expect("a nodes array")
            .iter()
            .map(|n| n["diffs_sent"].as_u64().expect("diffs_sent"))
            .sum();
        diffs.push(sent);
        let _ = std::fs::remove_file(file);
    }
    // 3 bands of 13 pages and 2 grids, 6 steps: off, about 13 pages x 2 nodes x 6 steps.
    assert!(
        diffs[1] > 100 && diffs[0] * 5 < diffs[1],
        "diffs sent with migration on, off: {diffs:?}"
    );
}

/// Threads inside nodes (`--threads T`, `jia_barrier_threads`): more threads than CPUs, 2 nodes x
/// 4 threads and 4 nodes x 2 threads, exact, in the Rust apps and in C with POSIX threads and
/// OpenMP.
#[test]
fn threads_inside_nodes_are_exact() {
    for (nodes, threads) in [(2, 4), (4, 2)] {
        let t = threads.to_string();
        for (app, args, want) in [
            ("sor", vec!["96", "6"], "sor OK"),
            ("matmul", vec!["128"], "matmul OK f64 n=128"),
            ("lu", vec!["128", "16"], "lu OK"),
            ("pi", vec!["1000000"], "pi OK"),
        ] {
            let mut a: Vec<&str> = args.clone();
            a.extend(["--threads", &t]);
            let out = dsm_tests::dsmrun(nodes, &[], app, &a);
            assert!(
                out.status.success() && text(&out).contains(want),
                "{app} {nodes} nodes x {threads} threads:\n{}",
                text(&out)
            );
            assert!(
                text(&out).contains(&format!("threads={threads}")) || app == "pi",
                "{app}: says its threads:\n{}",
                text(&out)
            );
        }
        let sor = compile_c_with("sor_pthreads", &[]);
        let out = dsmrun_path(nodes, &sor, &["64", "4", &t]);
        check(
            &out,
            &format!("c-sor-pthreads OK nodes={nodes} threads={threads}"),
            nodes,
        );
        let pi = compile_c_with("pi_openmp", &["-fopenmp"]);
        let mut cmd = Command::new(bin("dsmrun"));
        cmd.args([
            "-n",
            &nodes.to_string(),
            "-x",
            &format!("OMP_NUM_THREADS={threads}"),
        ])
        .arg(&pi)
        .arg("1000000");
        let out = run_with_deadline(cmd, Duration::from_secs(120));
        check(
            &out,
            &format!("c-pi-openmp OK nodes={nodes} threads={threads}"),
            nodes,
        );
        let _ = std::fs::remove_file(sor);
        let _ = std::fs::remove_file(pi);
    }
}

/// A barrier of T threads on N nodes puts one message up and one down per node on the wire:
/// 2(N - 1) per barrier, counted, for T = 1, 2, 4; and the threads that waited for the others
/// of their node are counted too.
#[test]
fn a_barrier_of_threads_is_two_messages_per_node_whatever_the_threads() {
    let nodes = 3;
    for threads in [1, 2, 4] {
        let json = std::env::temp_dir().join(format!(
            "dsm-barrier-threads-{threads}-{}.json",
            std::process::id()
        ));
        let t = threads.to_string();
        let j = json.display().to_string();
        let out = dsm_tests::dsmrun(
            nodes,
            &["--stats-json", &j],
            "sor",
            &["64", "5", "--threads", &t],
        );
        assert!(out.status.success(), "{}", text(&out));
        let stats: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        let per_node = stats["nodes"].as_array().unwrap();
        let sent = |n: usize, kind: &str| per_node[n]["msgs_sent"][kind].as_u64().unwrap_or(0);
        // sor's measured part: 5 iterations of 2 half-sweeps, a barrier each.
        let barriers = per_node[1]["barriers"].as_u64().unwrap();
        assert_eq!(barriers, 10, "T={threads}: {}", stats);
        for (n, node) in per_node.iter().enumerate().skip(1) {
            assert_eq!(
                sent(n, "BARR"),
                barriers,
                "T={threads}, node {n}: one arrival each"
            );
            let waits = node["thread_barrier_waits"].as_u64().unwrap();
            assert_eq!(
                waits,
                barriers * (threads as u64 - 1),
                "T={threads}, node {n}"
            );
        }
        assert_eq!(
            sent(0, "BARRGRANT"),
            barriers * (nodes as u64 - 1),
            "T={threads}: one grant per other node"
        );
    }
}

#[test]
fn each_of_dsmruns_options_given_after_an_app_is_named_as_dsmruns() {
    // Every option dsmrun's help shows (but those the apps take themselves), and the short
    // ones a user of mpirun types.
    let help = run_with_deadline(
        {
            let mut c = Command::new(bin("dsmrun"));
            c.arg("--help");
            c
        },
        Duration::from_secs(30),
    );
    assert!(help.status.success(), "{}", text(&help));
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let mut options: Vec<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .filter(|w| !["--help", "--version", "--threads"].contains(w))
        .map(str::to_owned)
        .collect();
    options.sort();
    options.dedup();
    assert!(
        options.len() >= 15,
        "too few options in dsmrun's help: {options:?}"
    );
    options.extend(["-n", "-np", "-x"].map(String::from));
    for option in &options {
        let mut c = Command::new(bin("matmul"));
        c.args([option.as_str(), "1"]);
        let out = run_with_deadline(c, Duration::from_secs(30));
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "matmul {option} 1: {t}");
        // clap reads `-np` as `-n` with `p` after it.
        let said = if option == "-np" {
            "-n"
        } else {
            option.as_str()
        };
        assert!(
            t.contains(&format!("`{said}")) && t.contains("is an option of dsmrun"),
            "matmul {option} 1 did not say it is dsmrun's:\n{t}"
        );
    }
}
