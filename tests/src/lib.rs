//! Helpers for the multi-process tests: find the workspace's binaries and run jobs with a
//! deadline, so a hang fails the test instead of the CI run.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The directory holding the workspace's binaries (`target/<profile>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target directory")
        .to_path_buf()
}

/// Whether this process runs as root (its effective user id, from `/proc/self/status`).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    })
}

/// The path of workspace binary `name`; panics with a hint when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run the tests through `cargo test --workspace`",
        p.display()
    );
    p
}

/// Lets the signals a test sends end `cmd` as they would from a terminal: a test run in the
/// background of a script (`cmd &`: SIGINT and SIGQUIT ignored) or under `nohup` (SIGHUP)
/// hands its children those signals ignored, and dsmrun and dsmcc leave an ignored signal
/// ignored, as `nohup` asks (an interrupt test then waited for a job that never ended).
pub fn interruptible(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: runs in the child between fork and exec, and only calls signal(2), which is
    // async-signal-safe, with plain integers.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// Runs `cmd`, killing it after `limit`; returns its output (status, stdout, stderr).
pub fn run_with_deadline(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    wait_with_deadline(cmd.spawn().expect("spawn"), limit)
}

/// Waits for `child` at most `limit`, then ends it (SIGTERM) and fails; returns its output
/// (what of it was piped and not taken).
pub fn wait_with_deadline(child: std::process::Child, limit: Duration) -> Output {
    let pid = child.id();
    let start = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output().expect("wait"));
    while !waiter.is_finished() {
        if start.elapsed() > limit {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let out = waiter.join().expect("join");
            panic!(
                "command still running after {limit:?}; killed.\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    waiter.join().expect("join")
}

/// `dsmrun -n <nodes> <flags...> <program> <args...>` with a 120 s deadline.
pub fn dsmrun(nodes: usize, flags: &[&str], program: &str, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.arg("-n")
        .arg(nodes.to_string())
        .args(flags)
        .arg(bin(program))
        .args(args);
    run_with_deadline(cmd, Duration::from_secs(120))
}

/// Files the test binary made for itself (programs it compiled), removed when it exits.
static MADE: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Removes every file of [`MADE`] (at the process's exit: registered with `atexit`).
extern "C" fn remove_made() {
    if let Ok(made) = MADE.lock() {
        for p in made.iter() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Removes `path` when the test binary exits, whether its tests passed or not (a compiled
/// program in the temporary directory was left there by every run).
pub fn remove_at_exit(path: &std::path::Path) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: atexit takes a function that takes nothing and returns nothing; `remove_made`
        // is one, and lives as long as the program. The test harness ends with `exit`, which
        // runs it after every test thread has finished.
        #[allow(unsafe_code)]
        unsafe {
            libc::atexit(remove_made);
        }
    });
    MADE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(path.to_path_buf());
}

/// Compiles the C program `src` against `jia.h` and `libjia.so` into `out` (with `flags`), as the
/// README says; panics with the compiler's words if it fails. `out` is removed when the test
/// binary exits.
pub fn compile_jia_c(src: &std::path::Path, out: &std::path::Path, flags: &[&str]) {
    remove_at_exit(out);
    let lib = bin_dir();
    let include = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("jia/include");
    let r = Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(src)
        .arg("-I")
        .arg(include)
        .arg("-L")
        .arg(&lib)
        .args(["-ljia", "-lpthread", "-ldl", "-lm"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .output()
        .expect("run cc");
    assert!(
        r.status.success(),
        "cc {} failed:\n{}",
        src.display(),
        text(&r)
    );
}

/// Stdout and stderr as text, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The values of row `name` of the `--stats` table in `out`'s stderr, one per node (node 0's
/// first); empty when the table has no such row (a counter that stayed zero on every node).
pub fn stats_row(out: &Output, name: &str) -> Vec<u64> {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| {
        l.strip_prefix(name).is_some_and(|rest| {
            rest.starts_with(' ') && !rest.trim_start().starts_with(char::is_alphabetic)
        })
    });
    line.map_or_else(Vec::new, |l| {
        l[name.len()..]
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect()
    })
}

/// Every application with small arguments and the start of its result line: the table the
/// application, TCP and loss tests run.
pub const SMALL_APPS: &[(&str, &[&str], &str)] = &[
    ("matmul", &["192", "f32"], "matmul OK f32 n=192"),
    ("sor", &["96", "6"], "sor OK"),
    ("lu", &["96", "16"], "lu OK"),
    ("jacobi", &["96", "6"], "jacobi OK"),
    ("pi", &["2000000"], "pi OK"),
    ("tsp", &["9"], "tsp OK"),
    ("water", &["256", "2"], "water OK"),
    ("is", &["200000", "4096"], "is OK"),
    ("ep", &["400000"], "ep OK"),
];

/// A run of `n` consecutive ports in `[from, to)` free on 127.0.0.1 for both UDP and TCP now,
/// for a job's `base_port`: tried from a point that differs between runs, so two test runs at
/// once (or a port some other program holds) do not meet. Below Linux's ephemeral range
/// (32768-60999) for the callers that need it: there, a connect to a port nobody listens on yet
/// can take that very port.
pub fn free_ports(n: u16, from: u16, to: u16) -> u16 {
    use std::net::{TcpListener, UdpSocket};
    let span = u32::from(to - from - n);
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for k in 0..span {
        let base = from + ((seed.wrapping_mul(2_654_435_761).wrapping_add(k * 7)) % span) as u16;
        let held: Option<Vec<(TcpListener, UdpSocket)>> = (base..base + n)
            .map(|p| {
                Some((
                    TcpListener::bind(("127.0.0.1", p)).ok()?,
                    UdpSocket::bind(("127.0.0.1", p)).ok()?,
                ))
            })
            .collect();
        if held.is_some() {
            return base;
        }
    }
    panic!("no {n} free ports in {from}..{to}");
}
