//! cargo dsm-races: build a Rust DSM program for the race checker, so that it sees every load
//! and store the program's own code makes in shared memory (reads through slices and raw
//! pointers included), as `dsmcc --check-races` does for C.
//!
//! `cargo dsm-races build --release --bin app` runs `cargo build --release --bin app` with
//! the packages you build (cargo's primary packages: the workspace's members, or those named
//! by `-p`) compiled with LLVM's ThreadSanitizer instrumentation; the checker answers its calls
//! (`dsm_races::hooks`), and ThreadSanitizer's runtime is not linked. Dependencies, the DSM's own
//! crates and the standard library's compiled code are not instrumented; generic code they
//! lend, such as a slice's iterator, is compiled into the program's crate and is. The binaries
//! go to `target/dsm-races/` (the target directory's `dsm-races` folder, or
//! `$CARGO_TARGET_DIR/dsm-races`), apart from the plain build's. Run them with `dsmrun
//! --check-races`.
//!
//! The instrumentation is a nightly compiler flag (`-Zsanitizer=thread`); on a stable compiler
//! the tool sets `RUSTC_BOOTSTRAP=1` for the instrumented crates' compilation only.
//!
//! Cargo runs this binary again as the compiler's wrapper (`RUSTC_WORKSPACE_WRAPPER`); that
//! mode adds the flags to the crates it instruments and runs the compiler.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// Set in the environment of the cargo this tool runs: the wrapper's mode.
const WRAPPING: &str = "DSM_RACES_WRAPPING";

/// The DSM's own crates, never instrumented (the checker's hooks would call themselves, and the
/// runtime's code runs in signal handlers and on its service thread).
const RUNTIME_CRATES: &[&str] = &[
    "dsm_runtime",
    "dsm_races",
    "dsm_core",
    "dsm_transport",
    "jia",
];

/// The compiler flags of an instrumented crate: ThreadSanitizer's pass without its runtime,
/// without the function entry and exit calls (lines come from each access) and with atomics
/// left as they are (the DSM's atomics are its own types; the checker takes them as
/// synchronisation there); and without vectorising (a vector load of a row's even elements reads
/// its odd ones too, which another node may be writing: red-black SOR).
const FLAGS: &[&str] = &[
    "-Zsanitizer=thread",
    "-Zexternal-clangrt",
    "-Cunsafe-allow-abi-mismatch=sanitizer",
    "-Cllvm-args=-tsan-instrument-func-entry-exit=false",
    "-Cllvm-args=-tsan-instrument-atomics=false",
    "-Cno-vectorize-loops",
    "-Cno-vectorize-slp",
];

const USAGE: &str = "usage: cargo dsm-races <cargo command> [cargo options]
  e.g. cargo dsm-races build --release --bin app

Builds the packages named (or the workspace's) with every load and store of their own code seen
by the race checker, into target/dsm-races/; run the binaries with dsmrun --check-races.";

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if std::env::var_os(WRAPPING).is_some() {
        return wrap(args);
    }
    // `cargo dsm-races ...` runs this as `cargo-dsm-races dsm-races ...`.
    if args.first().is_some_and(|a| a == "dsm-races") {
        args.remove(0);
    }
    match args.first().and_then(|a| a.to_str()) {
        None | Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            return if args.is_empty() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
        _ => {}
    }
    drive(args)
}

/// Runs cargo with `args`, this binary as the compiler's wrapper, into the target directory's
/// `dsm-races` folder.
fn drive(args: Vec<OsString>) -> ExitCode {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let me = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cargo dsm-races: cannot find its own binary: {e}");
            return ExitCode::from(2);
        }
    };
    let target = match target_dir(&cargo) {
        Ok(t) => t.join("dsm-races"),
        Err(e) => {
            eprintln!("cargo dsm-races: {e}");
            return ExitCode::from(2);
        }
    };
    let status = Command::new(&cargo)
        .args(&args)
        .env("RUSTC_WORKSPACE_WRAPPER", &me)
        .env(WRAPPING, "1")
        .env("CARGO_TARGET_DIR", &target)
        .status();
    match status {
        Ok(s) if s.success() => {
            eprintln!(
                "cargo dsm-races: binaries built for the race checker are in {}; run them with \
                 dsmrun --check-races",
                target.display()
            );
            ExitCode::SUCCESS
        }
        Ok(s) => ExitCode::from(s.code().map_or(1, |c| c.clamp(1, 255) as u8)),
        Err(e) => {
            eprintln!(
                "cargo dsm-races: cannot run {}: {e}",
                cargo.to_string_lossy()
            );
            ExitCode::from(2)
        }
    }
}

/// The target directory cargo would build into here: `$CARGO_TARGET_DIR`, or the one `cargo
/// metadata` names.
fn target_dir(cargo: &OsString) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cargo metadata's output is not JSON: {e}"))?;
    json["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata names no target_directory".into())
}

/// The wrapper's mode: `args` are the compiler and its arguments.
fn wrap(args: Vec<OsString>) -> ExitCode {
    let Some((rustc, rest)) = args.split_first() else {
        eprintln!("cargo dsm-races: run as the compiler's wrapper without a compiler");
        return ExitCode::from(2);
    };
    let mut cmd = Command::new(rustc);
    cmd.args(rest);
    let text: Vec<&str> = rest.iter().filter_map(|a| a.to_str()).collect();
    if instrumented(&text, std::env::var_os("CARGO_PRIMARY_PACKAGE").is_some()) {
        cmd.args(FLAGS).env("RUSTC_BOOTSTRAP", "1");
        if !text.iter().any(|a| a.starts_with("debuginfo=")) {
            // The checker names each access's line.
            cmd.arg("-Cdebuginfo=line-tables-only");
        }
    }
    match cmd.status() {
        Ok(s) => ExitCode::from(s.code().map_or(1, |c| c.clamp(0, 255) as u8)),
        Err(e) => {
            eprintln!(
                "cargo dsm-races: cannot run {}: {e}",
                rustc.to_string_lossy()
            );
            ExitCode::from(2)
        }
    }
}

/// Whether the compilation with arguments `args` is instrumented: a crate of a package cargo
/// builds as asked (`primary`), not one of the DSM's, not a build script or procedural macro.
fn instrumented(args: &[&str], primary: bool) -> bool {
    let value = |flag: &str| {
        args.windows(2)
            .find(|w| w[0] == flag)
            .map(|w| w[1])
            .or_else(|| {
                args.iter()
                    .find_map(|a| a.strip_prefix(flag)?.strip_prefix('='))
            })
    };
    let Some(name) = value("--crate-name") else {
        return false; // `rustc -vV` and the like
    };
    primary
        && !RUNTIME_CRATES.contains(&name)
        && !name.starts_with("build_script_")
        && value("--crate-type") != Some("proc-macro")
}

#[cfg(test)]
mod tests {
    use super::instrumented;

    /// The program's crates are instrumented; the DSM's, dependencies', build scripts' and
    /// procedural macros' are not, nor are the compiler's queries.
    #[test]
    fn what_is_instrumented() {
        let crate_of = |name: &'static str, kind: &'static str| {
            vec!["--crate-name", name, "--edition=2021", "--crate-type", kind]
        };
        assert!(instrumented(&crate_of("racy", "bin"), true));
        assert!(instrumented(&["--crate-name=app", "src/main.rs"], true));
        assert!(!instrumented(&crate_of("racy", "bin"), false));
        assert!(!instrumented(&crate_of("dsm_runtime", "lib"), true));
        assert!(!instrumented(&crate_of("dsm_races", "lib"), true));
        assert!(!instrumented(&crate_of("build_script_build", "bin"), true));
        assert!(!instrumented(&crate_of("derive", "proc-macro"), true));
        assert!(!instrumented(&["-vV"], true));
    }
}
