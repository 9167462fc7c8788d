//! cargo dsm-races: build a Rust DSM program for the race checker, so that it sees every load
//! and store the program's own code makes in shared memory (reads through slices and raw
//! pointers included), as `dsmcc --check-races` does for C.
//!
//! `cargo dsm-races build --release --bin app` runs `cargo build --release --bin app` with the
//! workspace's packages that use the DSM (those whose dependencies include `dsm-races`, through
//! `dsm-runtime`) compiled with LLVM's ThreadSanitizer instrumentation; the checker answers its
//! calls (`dsm_races::hooks`), and ThreadSanitizer's runtime is not linked. Dependencies, the
//! DSM's own crates and the standard library's compiled code are not instrumented; generic code
//! they lend, such as a slice's iterator, is compiled into the program's crate and is. The
//! binaries go to the target directory's `dsm-races` folder (`target/dsm-races/`,
//! `$CARGO_TARGET_DIR/dsm-races`, or `--target-dir X`'s `X/dsm-races`), apart from the plain
//! build's. Run them with `dsmrun --check-races`.
//!
//! The instrumentation is a nightly compiler flag (`-Zsanitizer=thread`); on a stable compiler
//! the tool sets `RUSTC_BOOTSTRAP=1` for the instrumented crates' compilation only.
//!
//! Cargo runs this binary again as the compiler's wrapper (`RUSTC_WORKSPACE_WRAPPER`, for the
//! workspace's members only); that mode adds the flags to the packages it was told to
//! instrument and runs the compiler.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Set in the environment of the cargo this tool runs, for the wrapper: the packages to
/// instrument, comma-separated.
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
/// synchronisation there); without vectorising (a vector load of a row's even elements reads
/// its odd ones too, which another node may be writing: red-black SOR).
const FLAGS: &[&str] = &[
    "-Zsanitizer=thread",
    "-Zexternal-clangrt",
    "-Cunsafe-allow-abi-mismatch=sanitizer",
    "-Cllvm-args=-tsan-instrument-func-entry-exit=false",
    "-Cllvm-args=-tsan-instrument-atomics=false",
    "-Cno-vectorize-loops",
    "-Cno-vectorize-slp",
    // Generic code the program uses is its own copy, instrumented, not one an upstream crate
    // compiled (at opt-levels 0, 1, s and z rustc shares those).
    "-Zshare-generics=no",
    // Lines for the reports: cargo strips debug information from profiles without it.
    "-Cstrip=none",
];

const USAGE: &str = "usage: cargo dsm-races <cargo command> [cargo options]
  e.g. cargo dsm-races build --release --bin app

Builds the workspace's packages that use the DSM with every load and store of their own code
seen by the race checker, into target/dsm-races/ (or --target-dir X's X/dsm-races/); run the
binaries with dsmrun --check-races.";

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // The wrapper's mode: cargo runs it with the compiler first. The variable alone is not
    // enough: it reaches whatever cargo runs (build scripts, `cargo dsm-races test`'s tests).
    let compiler_first = args.first().is_some_and(|a| {
        Path::new(a)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("rustc"))
    });
    if compiler_first && let Some(packages) = std::env::var_os(WRAPPING) {
        return wrap(args, &packages.to_string_lossy());
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
fn drive(mut args: Vec<OsString>) -> ExitCode {
    let fail = |e: String| {
        eprintln!("cargo dsm-races: {e}");
        ExitCode::from(2)
    };
    if !cfg!(target_arch = "x86_64")
        || option_value(&args, "--target").is_some_and(|t| !t.starts_with("x86_64"))
    {
        return fail(
            "the checker's hooks are x86-64 code: other architectures cannot be built for it"
                .into(),
        );
    }
    if option_value(&args, "--config").is_some_and(|c| c.contains("target-dir")) {
        return fail(
            "--config build.target-dir: give --target-dir instead (the tool builds into its \
             dsm-races folder)"
                .into(),
        );
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let me = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot find its own binary: {e}")),
    };
    let manifest = option_value(&args, "--manifest-path");
    let metadata = match metadata(&cargo, manifest.as_deref()) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    // `--target-dir X` builds into X's folder, as the target directory's own would.
    let target = match take_option(&mut args, "--target-dir") {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => match metadata["target_directory"].as_str() {
                Some(dir) => PathBuf::from(dir),
                None => return fail("cargo metadata names no target_directory".into()),
            },
        },
    }
    .join("dsm-races");
    let packages = using_the_dsm(&metadata);
    if packages.is_empty() {
        return fail("no package of this workspace depends on dsm-races (dsm-runtime)".into());
    }
    // Cargo's fingerprints do not see what the wrapper adds: a folder built with other flags or
    // for other packages is emptied first.
    let stamp = format!("{}\n{}\n", FLAGS.join(" "), packages.join(","));
    let stamp_file = target.join("dsm-races-flags");
    match std::fs::read_to_string(&stamp_file) {
        Ok(old) if old == stamp => {}
        _ if !target.exists() => {}
        _ => {
            eprintln!(
                "cargo dsm-races: {} was built with other flags or packages: built again",
                target.display()
            );
            if let Err(e) = std::fs::remove_dir_all(&target) {
                return fail(format!("cannot empty {}: {e}", target.display()));
            }
        }
    }
    if let Err(e) =
        std::fs::create_dir_all(&target).and_then(|()| std::fs::write(&stamp_file, &stamp))
    {
        return fail(format!("cannot write {}: {e}", stamp_file.display()));
    }
    let status = Command::new(&cargo)
        .args(&args)
        .env("RUSTC_WORKSPACE_WRAPPER", &me)
        .env(WRAPPING, packages.join(","))
        .env("CARGO_TARGET_DIR", &target)
        .status();
    match status {
        Ok(s) if s.success() => {
            let out = match option_value(&args, "--target") {
                Some(t) => target.join(t),
                None => target,
            };
            eprintln!(
                "cargo dsm-races: binaries built for the race checker are in {} (the packages \
                 instrumented where this build compiled them: {}); run them with dsmrun \
                 --check-races",
                out.display(),
                packages.join(", ")
            );
            ExitCode::SUCCESS
        }
        Ok(s) => ExitCode::from(s.code().map_or(1, |c| c.clamp(1, 255) as u8)),
        Err(e) => fail(format!("cannot run {}: {e}", cargo.to_string_lossy())),
    }
}

/// The value of option `name` in `args` (`name value` or `name=value`), the last one given.
fn option_value(args: &[OsString], name: &str) -> Option<String> {
    let text: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let mut found = None;
    for (i, a) in text.iter().enumerate() {
        if a == "--" {
            break;
        }
        if a == name {
            found = text.get(i + 1).cloned();
        } else if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            found = Some(v.to_string());
        }
    }
    found
}

/// Removes option `name` (and its value) from `args`; its value.
fn take_option(args: &mut Vec<OsString>, name: &str) -> Option<String> {
    let value = option_value(args, name)?;
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut kept = Vec::with_capacity(args.len());
    let mut skip_next = false;
    for (i, a) in args.drain(..).enumerate() {
        let text = a.to_string_lossy();
        if i < end && skip_next {
            skip_next = false;
        } else if i < end && text == name {
            skip_next = true;
        } else if !(i < end && text.starts_with(&format!("{name}="))) {
            kept.push(a);
        }
    }
    *args = kept;
    Some(value)
}

/// `cargo metadata` of the workspace (of `manifest`, if given), with the dependency graph.
fn metadata(cargo: &OsString, manifest: Option<&str>) -> Result<serde_json::Value, String> {
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1"]);
    if let Some(m) = manifest {
        cmd.args(["--manifest-path", m]);
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cargo metadata's output is not JSON: {e}"))
}

/// The names of the workspace's packages to instrument: those whose dependencies include
/// `dsm-races` (a member that does not use the DSM would not link: the hooks are the
/// checker's), the DSM's own crates left out. The same set whatever `-p` selects, so that
/// a crate built once is built the same way next time (cargo's fingerprints do not see it).
fn using_the_dsm(metadata: &serde_json::Value) -> Vec<String> {
    let name_of: std::collections::HashMap<&str, &str> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let deps: std::collections::HashMap<&str, Vec<&str>> = metadata["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            let deps = n["dependencies"].as_array()?;
            Some((
                n["id"].as_str()?,
                deps.iter().filter_map(|d| d.as_str()).collect(),
            ))
        })
        .collect();
    let uses = |member: &str| {
        let mut seen = std::collections::HashSet::new();
        let mut todo = vec![member];
        while let Some(id) = todo.pop() {
            if name_of.get(id) == Some(&"dsm-races") {
                return true;
            }
            if seen.insert(id) {
                todo.extend(deps.get(id).into_iter().flatten().copied());
            }
        }
        false
    };
    let mut names: Vec<String> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str())
        .filter(|&m| uses(m))
        .filter_map(|m| name_of.get(m).map(|n| n.to_string()))
        .filter(|n| !RUNTIME_CRATES.contains(&n.replace('-', "_").as_str()))
        .collect();
    names.sort();
    names
}

/// The wrapper's mode: `args` are the compiler and its arguments; `packages` (comma-separated)
/// those to instrument.
fn wrap(args: Vec<OsString>, packages: &str) -> ExitCode {
    let Some((rustc, rest)) = args.split_first() else {
        eprintln!("cargo dsm-races: run as the compiler's wrapper without a compiler");
        return ExitCode::from(2);
    };
    let mut cmd = Command::new(rustc);
    cmd.args(rest).env_remove(WRAPPING);
    let text: Vec<&str> = rest.iter().filter_map(|a| a.to_str()).collect();
    let package = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    if instrumented(&text, packages.split(',').any(|p| p == package)) {
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

/// Whether the compilation with arguments `args`, of a package to instrument or not (`chosen`),
/// is instrumented: not one of the DSM's crates, a build script or procedural macro, nor a
/// query of the compiler's.
fn instrumented(args: &[&str], chosen: bool) -> bool {
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
    chosen
        && !RUNTIME_CRATES.contains(&name)
        && !name.starts_with("build_script_")
        && value("--crate-type") != Some("proc-macro")
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::{instrumented, option_value, take_option, using_the_dsm};

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    /// Options are found spelled either way, the last one given, never past `--`; taking one
    /// leaves the rest as they were.
    #[test]
    fn options_are_found_and_taken() {
        let a = args(&[
            "build",
            "--target-dir",
            "/t",
            "--release",
            "--target=x86_64-unknown-linux-gnu",
        ]);
        assert_eq!(option_value(&a, "--target-dir").as_deref(), Some("/t"));
        assert_eq!(
            option_value(&a, "--target").as_deref(),
            Some("x86_64-unknown-linux-gnu")
        );
        assert_eq!(option_value(&a, "--manifest-path"), None);
        let mut b = a.clone();
        assert_eq!(take_option(&mut b, "--target-dir").as_deref(), Some("/t"));
        assert_eq!(
            b,
            args(&["build", "--release", "--target=x86_64-unknown-linux-gnu"])
        );
        let mut c = args(&["run", "--target-dir=/u", "--", "--target-dir", "kept"]);
        assert_eq!(take_option(&mut c, "--target-dir").as_deref(), Some("/u"));
        assert_eq!(c, args(&["run", "--", "--target-dir", "kept"]));
    }

    /// The members to instrument are those that reach dsm-races through their dependencies,
    /// not the DSM's own crates, not a member that does not use the DSM.
    #[test]
    fn members_using_the_dsm_are_instrumented() {
        let metadata: serde_json::Value = serde_json::from_str(
            r#"{
              "packages": [
                {"id": "app 1", "name": "app"}, {"id": "helper 1", "name": "helper"},
                {"id": "gen 1", "name": "gen"}, {"id": "dsm-runtime 1", "name": "dsm-runtime"},
                {"id": "dsm-races 1", "name": "dsm-races"}, {"id": "libc 1", "name": "libc"}
              ],
              "workspace_members": ["app 1", "helper 1", "gen 1", "dsm-runtime 1", "dsm-races 1"],
              "resolve": {"nodes": [
                {"id": "app 1", "dependencies": ["helper 1"]},
                {"id": "helper 1", "dependencies": ["dsm-runtime 1", "libc 1"]},
                {"id": "gen 1", "dependencies": ["libc 1"]},
                {"id": "dsm-runtime 1", "dependencies": ["dsm-races 1"]},
                {"id": "dsm-races 1", "dependencies": ["libc 1"]},
                {"id": "libc 1", "dependencies": []}
              ]}
            }"#,
        )
        .unwrap();
        assert_eq!(using_the_dsm(&metadata), vec!["app", "helper"]);
    }

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
