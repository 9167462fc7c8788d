//! `dsmcc`: the C compiler for JIAJIA programs, as `mpicc` is for MPI ones. From any directory,
//!
//! ```sh
//! /path/to/dsm/target/release/dsmcc prog.c -o prog
//! ```
//!
//! runs `cc` with every argument given, plus this checkout's `jia.h` and the `libjia` beside
//! `dsmcc`, all by absolute path:
//!
//! ```sh
//! cc -I<checkout>/jia/include prog.c -o prog -L<dir> -ljia -lpthread -ldl -lm -Wl,-rpath,<dir>
//! ```
//!
//! where `<dir>` is the directory `dsmcc` is in (`target/release`, holding `libjia.so`,
//! `libjia.a` and `dsmrun`; found through symbolic links) and `<checkout>` the checkout it was
//! built from. The rpath lets the program find `libjia.so` without `LD_LIBRARY_PATH`.
//! With `-c`, `-S`, `-E`, `-M`, `-MM` or `-fsyntax-only` nothing is linked and only `-I` is
//! added, so `make CC=dsmcc` works.
//!
//! Options of its own (taken out before `cc` sees the rest): `--show` prints the command instead
//! of running it; `--static-jia` links `libjia.a` instead of `libjia.so` (the program then runs
//! without the library beside it); `--check-races` builds the program for the race checker
//! (`dsmrun --check-races`): sources are compiled with `-fsanitize=thread -g`, whose calls at
//! every load and store libjia answers, and linked without it, against `libjia.a` (ThreadSanitizer's own runtime is
//! never linked: with `-c`, only the flags are added, and the objects are then linked by `dsmcc`
//! as usual); `dsmcc --help` alone says this. Everything else, `--version`
//! included (build systems ask the compiler its version), goes to the compiler: `cc`, or the
//! one `DSMCC_CC` names.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, exit};

/// `jia.h`, `setting.h` and `tools.h`, in the checkout this was built from.
const INCLUDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");

/// Arguments after which the compiler does not link.
const NO_LINK: &[&str] = &["-c", "-S", "-E", "-M", "-MM", "-fsyntax-only"];

fn fail(msg: &str) -> ! {
    eprintln!("dsmcc: {msg}");
    exit(1)
}

fn usage() -> String {
    format!(
        "usage: dsmcc [--show] [--static-jia] [--check-races] CC-ARGS...   (e.g. dsmcc prog.c -o prog)\n\
         Runs ${{DSMCC_CC:-cc}} CC-ARGS with -I{INCLUDE} and, when linking, libjia from the\n\
         directory dsmcc is in, with an rpath to it. --show prints the command instead;\n\
         --static-jia links libjia.a; --check-races builds for dsmrun --check-races (sources\n\
         compiled with -fsanitize=thread -g, linked without). C11 atomics and __atomic/__sync\n\
         builtins are instrumented so that they are exact across nodes on shared memory: with\n\
         clang (DSMCC_CC=clang) the atomics alone; with gcc, which cannot instrument them\n\
         alone, every access of the sources that use them (dsmcc names each). Other\n\
         arguments, --version included, go to the compiler."
    )
}

/// The directory holding `dsmcc`, `libjia.so` and `libjia.a`.
fn lib_dir() -> PathBuf {
    let exe =
        std::env::current_exe().unwrap_or_else(|e| fail(&format!("cannot find its own path: {e}")));
    let exe = exe.canonicalize().unwrap_or(exe);
    exe.parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| fail(&format!("{} has no directory", exe.display())))
}

fn main() {
    let mut show = false;
    let mut static_jia = false;
    let mut check_races = false;
    let mut args: Vec<OsString> = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.to_str() {
            Some("--show") => show = true,
            Some("--static-jia") => static_jia = true,
            Some("--check-races") => check_races = true,
            _ => args.push(a),
        }
    }
    if args.is_empty() {
        eprintln!("{}", usage());
        exit(2);
    }
    if args.len() == 1 && args[0] == "--help" {
        println!("{}", usage());
        return;
    }
    if !Path::new(INCLUDE).join("jia.h").exists() {
        fail(&format!(
            "{INCLUDE}/jia.h is missing: the checkout dsmcc was built from has moved; build it again \
             (cargo build --release) where it is now"
        ));
    }
    let links = !args.iter().any(|a| NO_LINK.iter().any(|n| a == n));
    let cc = std::env::var_os("DSMCC_CC").unwrap_or_else(|| "cc".into());
    if check_races
        && args
            .iter()
            .any(|a| a.to_string_lossy().starts_with("-flto"))
    {
        fail(
            "--check-races does not take -flto: the checker renames calls in the compiled \
             objects, which link-time optimisation leaves as compiler bitcode",
        );
    }
    let checking = check_races.then(|| instrument_flags(&cc));
    let mut objects_dir = None;
    // (Not for a command that makes no code: preprocessing, dependencies, a syntax check.)
    let makes_code = !args
        .iter()
        .any(|a| ["-E", "-M", "-MM", "-fsyntax-only"].iter().any(|n| a == n));
    if is_clang(&cc) && !show && makes_code {
        let final_flags: Vec<OsString> = match &checking {
            Some(flags) => flags.iter().map(OsString::from).collect(),
            None => ATOMICS_ONLY.iter().map(OsString::from).collect(),
        };
        args = rewrite_uninstrumented_atomics(&cc, &args, &final_flags);
        if args.iter().any(|a| a.to_string_lossy().ends_with(".ll")) {
            // The preprocessor's flags do nothing to LLVM's text: no warning for them.
            args.push("-Wno-unused-command-line-argument".into());
        }
    }
    if !check_races {
        if is_clang(&cc) {
            // Atomics alone instrumented: each C11 atomic and builtin calls libjia's hooks,
            // exact across nodes on shared memory (`jia/src/atomics.rs`).
            args.extend(ATOMICS_ONLY.iter().map(OsString::from));
        } else {
            let atomic = atomic_sources(&cc, &args);
            if !atomic.is_empty() {
                // gcc instruments every access or none: the sources with atomics get all of it,
                // their plain accesses' hooks then renamed to one that does nothing.
                let flags: Vec<String> = GCC_ATOMICS.iter().map(|f| f.to_string()).collect();
                let sources = |a: &OsString| atomic.contains(a);
                if links {
                    let (dir, linked) =
                        compile_apart(&cc, &args, &flags, sources, Renames::PlainAccesses, show);
                    args = linked;
                    objects_dir = Some(dir);
                } else {
                    args.extend(flags.iter().map(OsString::from));
                    compile_objects_renamed(&cc, &args, Renames::PlainAccesses, show);
                }
            }
        }
    }
    // The checker's hooks are called at every load and store: linked into the program, each
    // call is a direct one (through libjia.so, one more jump; matmul.c 512 on 2 nodes, checking
    // off: 0.56 s static, 0.75 s shared).
    static_jia |= check_races;
    if let Some(flags) = &checking {
        if links {
            // Compiled here with the flags, each source to an object; linked below without them.
            let (dir, linked) = compile_apart(&cc, &args, flags, is_source, Renames::Checked, show);
            args = linked;
            objects_dir = Some(dir);
        } else {
            args.extend(flags.iter().map(OsString::from));
            if args.iter().any(|a| a == "-c") {
                compile_objects_renamed(&cc, &args, Renames::Checked, show);
            }
        }
    }
    // A program's own libatomic goes after libjia, whose atomic entries (libatomic's names) are
    // the ones its calls must reach: before it, libatomic's took them (lost updates across
    // nodes), with the static libjia too.
    let wants_libatomic = links && args.iter().any(|a| a == "-latomic");
    if wants_libatomic {
        args.retain(|a| a != "-latomic");
    }
    let mut cmd = Command::new(&cc);
    cmd.arg(format!("-I{INCLUDE}"));
    if links && static_jia {
        // The static libjia's atomic entries taken in before any library of the program's
        // (`-Wl,-latomic`, a path to libatomic.so): a member of an archive is taken only for
        // what is undefined when the linker reaches it, so name them undefined first.
        let lib = lib_dir().join("libjia.a");
        cmd.args(libatomic_entries().iter().map(|e| format!("-Wl,-u,{e}")))
            .arg(lib);
    }
    if links && !static_jia {
        // libjia first among the libraries: its atomic entries (libatomic's names) are the
        // ones the program's calls reach, before a `-latomic` of the program's.
        cmd.arg(format!("-L{}", lib_dir().display())).args([
            "-Wl,--push-state,--no-as-needed",
            "-ljia",
            "-Wl,--pop-state",
        ]);
    }
    cmd.args(&args);
    if links {
        let dir = lib_dir();
        let lib = dir.join(if static_jia { "libjia.a" } else { "libjia.so" });
        if !lib.exists() {
            fail(&format!(
                "{} is missing: build it with cargo build --release -p jia",
                lib.display()
            ));
        }
        cmd.arg(format!("-L{}", dir.display()));
        if static_jia {
            // The Rust standard library's needs, which a static archive does not record.
            cmd.args(["-l:libjia.a", "-lgcc_s", "-lutil", "-lrt"]);
        } else {
            cmd.arg("-ljia");
        }
        cmd.args(["-lpthread", "-ldl", "-lm"]);
        if wants_libatomic {
            cmd.arg("-latomic");
        }
        if check_races && args.iter().any(|a| a == "-fopenmp") {
            // The checked objects call libjia's OpenMP entries, which find libgomp's at run
            // time: without a direct call left, the linker would drop libgomp.
            cmd.args([
                "-Wl,--push-state,--no-as-needed",
                "-lgomp",
                "-Wl,--pop-state",
            ]);
        }
        if !static_jia {
            cmd.arg(format!("-Wl,-rpath,{}", dir.display()));
        }
    }
    if show {
        show_command(&cmd);
        if let Some(dir) = objects_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        return;
    }
    // A build with files of its own runs the compiler and removes them after (exec would skip
    // the removal).
    let own_files = !TEMP_DIRS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .is_empty();
    if objects_dir.is_some() || own_files {
        let out = cmd
            .output()
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", cc.to_string_lossy())));
        if let Some(dir) = objects_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprint!("{stderr}");
        print!("{}", String::from_utf8_lossy(&out.stdout));
        if stderr.contains("__tsan_atomic128") {
            eprintln!(
                "dsmcc: 16-byte atomics are not taken: use 1-, 2-, 4- or 8-byte ones (or jia_atomic_*)"
            );
        }
        exit_as(out.status);
    }
    let err = cmd.exec();
    fail(&format!("cannot run {}: {err}", cc.to_string_lossy()))
}

/// libjia's definitions of libatomic's entries (`jia/src/atomics.rs`): the generic ones, and
/// every operation at each width.
fn libatomic_entries() -> Vec<String> {
    const GENERIC: &[&str] = &[
        "load",
        "store",
        "exchange",
        "compare_exchange",
        "is_lock_free",
        "feraiseexcept",
    ];
    const SIZED: &[&str] = &[
        "load",
        "store",
        "exchange",
        "compare_exchange",
        "fetch_add",
        "fetch_sub",
        "fetch_and",
        "fetch_or",
        "fetch_xor",
        "fetch_nand",
        "add_fetch",
        "sub_fetch",
        "and_fetch",
        "or_fetch",
        "xor_fetch",
        "nand_fetch",
    ];
    let generic = GENERIC.iter().map(|op| format!("__atomic_{op}"));
    let sized = SIZED
        .iter()
        .flat_map(|op| [1, 2, 4, 8].map(|n| format!("__atomic_{op}_{n}")));
    generic.chain(sized).collect()
}

/// `--show`: prints `cmd` as a shell would read it, words separated by spaces.
fn show_command(cmd: &Command) {
    let words: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    println!("{}", words.join(" "));
}

/// The compiler flags of `--check-races`: ThreadSanitizer's instrumentation (every load and
/// store calls libjia), line tables, no call at every function's entry and exit (not needed),
/// and, for clang, a read kept before a write to the same place; no tail calls (libjia's
/// entries take their caller's line from the return address, which a tail call would make the
/// caller's caller's); and no inline expansion of
/// [`CHECKED_MEMORY_FUNCTIONS`] (gcc expands a `memcpy` of a known size into moves it does not
/// instrument), whose calls then go to libjia.
fn instrument_flags(cc: &OsString) -> Vec<String> {
    let mut flags: Vec<String> = compiler_flags(cc).iter().map(|f| f.to_string()).collect();
    // jia.h then wraps the printf and scanf calls that write or read strings in memory.
    flags.push("-DJIA_CHECK_RACES".to_string());
    // Fortified string functions (`__strcpy_chk`, which Debian's and Fedora's build flags and
    // some compilers' defaults turn on) would go around the calls renamed to libjia's: off.
    flags.push("-U_FORTIFY_SOURCE".to_string());
    flags.extend(
        CHECKED_MEMORY_FUNCTIONS
            .iter()
            .map(|f| format!("-fno-builtin-{f}")),
    );
    flags
}

/// clang's flags that instrument atomic operations alone (C11 atomics, `__atomic_*` and
/// `__sync_*` builtins, OpenMP's atomics): each becomes a call of ThreadSanitizer's hooks,
/// which libjia defines; plain loads and stores, calls and `memcpy` stay as they are, and no
/// ThreadSanitizer runtime is linked.
const ATOMICS_ONLY: &[&str] = &[
    "-fsanitize=thread",
    "-fno-sanitize-link-runtime",
    "-mllvm",
    "-tsan-instrument-memory-accesses=0",
    "-mllvm",
    "-tsan-instrument-func-entry-exit=0",
    "-mllvm",
    "-tsan-instrument-memintrinsics=0",
];

/// Whether `cc` is clang (its `--version` says so).
fn is_clang(cc: &OsString) -> bool {
    Command::new(cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("clang"))
}

/// gcc's flags for a source with atomic operations: ThreadSanitizer's instrumentation (gcc's
/// cannot be limited to atomics), no call at every function's entry and exit. The atomics call
/// libjia's hooks, exact across nodes; the plain accesses' hooks are renamed to one that does
/// nothing ([`Renames::PlainAccesses`]).
/// `-fno-inline-atomics`: an atomic gcc builds itself, which ThreadSanitizer's pass does not
/// see (an OpenMP `atomic` on a `double` or `float`, or one that is no fetch-and-op: a
/// compare-exchange loop of its own), calls libatomic's `__atomic_compare_exchange_8`, which
/// libjia defines, instead of a `lock cmpxchg` that lost updates across nodes.
const GCC_ATOMICS: &[&str] = &[
    "-fsanitize=thread",
    "--param=tsan-instrument-func-entry-exit=0",
    "-fno-inline-atomics",
];

/// The C sources among `args` that use atomic operations (C11 atomics, `__atomic_*` and
/// `__sync_*` builtins, OpenMP's atomics); for gcc, which builds them apart: each said so.
fn atomic_sources(cc: &OsString, args: &[OsString]) -> Vec<OsString> {
    let atomic: Vec<OsString> = args
        .iter()
        .filter(|a| uses_atomics(cc, args, a))
        .cloned()
        .collect();
    for a in &atomic {
        eprintln!(
            "dsmcc: note: {} uses atomic operations: compiled with gcc's -fsanitize=thread so \
             that they are exact across nodes on shared memory; every load and store of it then \
             calls libjia too, and its loops run several times slower (DSMCC_CC=clang \
             instruments the atomics alone)",
            Path::new(a).display()
        );
    }
    atomic
}

/// Whether `a` is a C source that uses atomic operations, as the compiler sees it: its text
/// after the preprocessor (run with the preprocessor's flags among `args`), so that an atomic in
/// a header of the program's, behind a macro, or a pragma spelled with other spacing
/// (`#pragma   omp atomic`, `_Pragma("omp atomic")`) counts, and one in a comment does not.
/// Where the preprocessor fails, the source's own text (the compile then says what is wrong).
fn uses_atomics(cc: &OsString, args: &[OsString], a: &OsString) -> bool {
    let path = Path::new(a);
    if path.extension().is_none_or(|e| e != "c") {
        return false;
    }
    let out = Command::new(cc)
        .arg("-E")
        .arg(format!("-I{INCLUDE}"))
        .args(preprocessor_flags(args))
        .arg(a)
        .output();
    match out {
        Ok(out) if out.status.success() => has_atomics(&String::from_utf8_lossy(&out.stdout)),
        _ => std::fs::read_to_string(path).is_ok_and(|src| has_atomics(&src)),
    }
}

/// The flags among a compiler command's `args` that change what the preprocessor makes of a
/// source (include paths, macros, the language standard, `-f` and `-m` options), each with its
/// value when that is the next argument; not the ones that name outputs or make files
/// (`-o`, `-MD`, `-MF`...).
fn preprocessor_flags(args: &[OsString]) -> Vec<OsString> {
    const WITH_VALUE: &[&str] = &[
        "-I",
        "-D",
        "-U",
        "-include",
        "-imacros",
        "-isystem",
        "-iquote",
        "-idirafter",
        "-isysroot",
    ];
    const PREFIXES: &[&str] = &["-I", "-D", "-U", "-std=", "-f", "-m", "-O", "--sysroot="];
    let mut kept = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if WITH_VALUE.contains(&s.as_ref()) {
            kept.push(a.clone());
            kept.extend(it.next().cloned());
        } else if PREFIXES.iter().any(|p| s.starts_with(p))
            || ["-ansi", "-nostdinc", "-pthread"].contains(&s.as_ref())
        {
            kept.push(a.clone());
        }
    }
    kept
}

/// Whether C text (preprocessed, or a source) has atomic operations: `_Atomic`, a call of an
/// `__atomic_*`, `__sync_*` or `__c11_atomic_*` builtin, or OpenMP's `atomic` directive,
/// however spaced. (The system headers name such builtins only as types, as glibc's
/// `__atomic_wide_counter`, never as calls.)
fn has_atomics(text: &str) -> bool {
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && ident(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let word = &text[start..i];
        if word == "_Atomic" {
            return true;
        }
        if ["__atomic_", "__sync_", "__c11_atomic_"]
            .iter()
            .any(|p| word.starts_with(p))
            && text[i..].trim_start().starts_with('(')
        {
            return true;
        }
    }
    text.lines().any(|line| {
        let line = line.trim_start();
        let directive = match line.strip_prefix('#') {
            Some(rest) => rest.trim_start().strip_prefix("pragma"),
            None => line
                .find("_Pragma")
                .map(|at| line[at + "_Pragma".len()..].trim_start_matches(['(', ' ', '"'])),
        };
        let mut words = directive
            .unwrap_or("")
            .split(|c: char| c.is_whitespace() || c == '"' || c == ')');
        let mut words = words.by_ref().filter(|w| !w.is_empty());
        words.next() == Some("omp") && words.next() == Some("atomic")
    })
}

/// The compiler's own part of [`instrument_flags`].
fn compiler_flags(cc: &OsString) -> Vec<&'static str> {
    if is_clang(cc) {
        vec![
            "-fsanitize=thread",
            "-g",
            "-gdwarf-4",
            "-mllvm",
            "-tsan-instrument-func-entry-exit=0",
            "-mllvm",
            "-tsan-instrument-read-before-write",
            "-fno-optimize-sibling-calls",
            // Loops and neighbouring accesses not vectorised: clang's pass instruments a
            // vector load of 16 bytes as a read of all of them (a loop over a row's even
            // elements read its odd ones: a race reported that the source never makes), and
            // leaves one of 32 or 64 bytes (`-mavx2`, `-march=native`) unchecked (a race
            // missed). As `cargo dsm-races` builds Rust; an outside attack found both.
            "-fno-vectorize",
            "-fno-slp-vectorize",
        ]
    } else {
        vec![
            "-fsanitize=thread",
            "-g",
            "--param=tsan-instrument-func-entry-exit=0",
            "-fno-optimize-sibling-calls",
            // As for GCC_ATOMICS.
            "-fno-inline-atomics",
        ]
    }
}

/// The C library's memory and string functions whose calls a checked object makes to libjia's
/// entries instead (they record what the call reads and writes, then make it): `objcopy
/// --redefine-sym` on each checked object (`jia/src/races.rs` defines the entries). The
/// compiler must not expand them inline.
const CHECKED_MEMORY_FUNCTIONS: &[&str] = &[
    "memcpy",
    "memmove",
    "memset",
    "strcpy",
    "strncpy",
    "strcat",
    "strlen",
    "strcmp",
    "strncmp",
    "memcmp",
    "bcmp",
    "stpcpy",
    "strncat",
    "strnlen",
    "memchr",
    "strchr",
    "strrchr",
    "strstr",
    "qsort",
    "mempcpy",
    "memccpy",
    "bzero",
    "explicit_bzero",
    "stpncpy",
    "strdup",
    "strndup",
    "strspn",
    "strcspn",
    "strpbrk",
    "strcasecmp",
    "strncasecmp",
    "memrchr",
    "rawmemchr",
    "strchrnul",
    "memmem",
    "strcasestr",
    "strtok",
    "strtok_r",
    "strtol",
    "strtoul",
    "strtoll",
    "strtoull",
    "strtod",
    "strtof",
    "atoi",
    "atol",
    "atoll",
    "atof",
];

/// The C library calls that move bytes between a stream and a buffer in the program's own code,
/// whose calls a checked object makes to libjia's entries instead (they record the bytes moved:
/// `jia/src/interpose.rs`). The system calls that do (`read`, `readv`, `recv`, ...) are libjia's
/// own in every program.
const CHECKED_IO_FUNCTIONS: &[&str] = &["fgets"];

/// The synchronisation of a node's threads that the race checker sees the same way (each
/// ordering the threads as the DSM's own synchronisation does).
const CHECKED_SYNC_FUNCTIONS: &[&str] = &[
    "pthread_mutex_lock",
    "pthread_mutex_trylock",
    "pthread_mutex_unlock",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_barrier_wait",
    "pthread_barrier_init",
    "pthread_barrier_destroy",
    "sem_post",
    "sem_wait",
    "pthread_mutex_timedlock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "pthread_rwlock_tryrdlock",
    "pthread_rwlock_trywrlock",
    "pthread_rwlock_unlock",
    "pthread_rwlock_timedrdlock",
    "pthread_rwlock_timedwrlock",
    "pthread_rwlock_clockrdlock",
    "pthread_rwlock_clockwrlock",
    "pthread_mutex_clocklock",
    "pthread_cond_clockwait",
    "sem_clockwait",
    "mtx_lock",
    "mtx_trylock",
    "mtx_timedlock",
    "mtx_unlock",
    "cnd_wait",
    "cnd_timedwait",
    "thrd_create",
    "thrd_join",
    "call_once",
    "pthread_spin_lock",
    "pthread_spin_trylock",
    "pthread_spin_unlock",
    "sem_trywait",
    "sem_timedwait",
    "pthread_once",
    "pthread_create",
    "pthread_join",
    "pthread_tryjoin_np",
    "pthread_timedjoin_np",
    "pthread_clockjoin_np",
    "GOMP_parallel",
    "GOMP_parallel_sections",
    "GOMP_parallel_loop_static",
    "GOMP_parallel_loop_dynamic",
    "GOMP_parallel_loop_guided",
    "GOMP_parallel_loop_nonmonotonic_dynamic",
    "GOMP_parallel_loop_nonmonotonic_guided",
    "GOMP_parallel_loop_runtime",
    "GOMP_parallel_loop_nonmonotonic_runtime",
    "GOMP_parallel_loop_maybe_nonmonotonic_runtime",
    "GOMP_barrier",
    "GOMP_task",
    "GOMP_taskwait",
    "GOMP_taskwait_depend",
    "GOMP_taskgroup_end",
    "GOMP_loop_end",
    "GOMP_barrier_cancel",
    "GOMP_loop_end_cancel",
    "GOMP_sections_end_cancel",
    "GOMP_sections_end",
    "GOMP_critical_start",
    "GOMP_critical_end",
    "GOMP_critical_name_start",
    "GOMP_critical_name_end",
    "GOMP_atomic_start",
    "GOMP_atomic_end",
    "GOMP_ordered_start",
    "GOMP_ordered_end",
    "omp_set_lock",
    "omp_unset_lock",
    "omp_test_lock",
    "omp_set_nest_lock",
    "omp_unset_nest_lock",
    "omp_test_nest_lock",
];

/// The command that renames a checked object's calls of [`CHECKED_MEMORY_FUNCTIONS`],
/// [`CHECKED_IO_FUNCTIONS`] and [`CHECKED_SYNC_FUNCTIONS`] to libjia's entries
/// (`__dsm_checked_<name>`).
/// The renames a compiled object gets.
#[derive(Clone, Copy)]
enum Renames {
    /// `--check-races`: the calls of the C library's memory, I/O and pthread functions go to
    /// libjia's entries, which record what they touch.
    Checked,
    /// gcc's instrumentation of a source for its atomics: every hook of a plain access (and
    /// `__tsan_init`, which marks a program as built for the checker) goes to libjia's
    /// `__dsm_unchecked_*` of the same name, which does nothing: such an object's accesses are
    /// not the checker's, whose other calls it does not see.
    PlainAccesses,
}

/// ThreadSanitizer's hooks of gcc's instrumentation other than the atomics' (`__tsan_atomic*`).
const PLAIN_ACCESS_HOOKS: &[&str] = &[
    "__tsan_init",
    "__tsan_func_entry",
    "__tsan_func_exit",
    "__tsan_read1",
    "__tsan_read2",
    "__tsan_read4",
    "__tsan_read8",
    "__tsan_read16",
    "__tsan_write1",
    "__tsan_write2",
    "__tsan_write4",
    "__tsan_write8",
    "__tsan_write16",
    "__tsan_unaligned_read2",
    "__tsan_unaligned_read4",
    "__tsan_unaligned_read8",
    "__tsan_unaligned_read16",
    "__tsan_unaligned_write2",
    "__tsan_unaligned_write4",
    "__tsan_unaligned_write8",
    "__tsan_unaligned_write16",
    "__tsan_volatile_read1",
    "__tsan_volatile_read2",
    "__tsan_volatile_read4",
    "__tsan_volatile_read8",
    "__tsan_volatile_read16",
    "__tsan_volatile_write1",
    "__tsan_volatile_write2",
    "__tsan_volatile_write4",
    "__tsan_volatile_write8",
    "__tsan_volatile_write16",
    "__tsan_read_range",
    "__tsan_write_range",
    "__tsan_vptr_update",
    "__tsan_vptr_read",
];

/// `objcopy` renaming the symbols `renames` names in `object`.
fn rename_calls(object: &Path, renames: Renames) -> Command {
    let objcopy = std::env::var_os("DSMCC_OBJCOPY").unwrap_or_else(|| "objcopy".into());
    let mut cmd = Command::new(objcopy);
    match renames {
        Renames::Checked => {
            for f in CHECKED_MEMORY_FUNCTIONS
                .iter()
                .chain(CHECKED_IO_FUNCTIONS)
                .chain(CHECKED_SYNC_FUNCTIONS)
            {
                cmd.arg(format!("--redefine-sym={f}=__dsm_checked_{f}"));
            }
        }
        Renames::PlainAccesses => {
            for f in PLAIN_ACCESS_HOOKS {
                let hook = f.trim_start_matches("__tsan_");
                cmd.arg(format!("--redefine-sym={f}=__dsm_unchecked_{hook}"));
            }
        }
    }
    cmd.arg(object);
    cmd
}

/// Runs (or with `show`, prints) [`rename_calls`] on `object`; a failure ends dsmcc.
fn rename_calls_in(object: &Path, renames: Renames, show: bool) {
    let mut cmd = rename_calls(object, renames);
    if show {
        show_command(&cmd);
        return;
    }
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!(
            "objcopy failed on {} ({s}): the instrumented object's calls could not be renamed",
            object.display()
        )),
        Err(e) => fail(&format!(
            "cannot run objcopy (binutils) on {}: {e}",
            object.display()
        )),
    }
}

/// Whether `a` names a source file the compiler compiles.
fn is_source(a: &OsString) -> bool {
    let a = a.to_string_lossy();
    [".c", ".cc", ".cpp", ".cxx", ".C", ".ll"]
        .iter()
        .any(|ext| a.ends_with(ext) && !a.starts_with('-'))
}

/// Runs the compiler command `cmd` (with `show`, prints it); if it fails, `undo` and exit with
/// its status.
fn compile_or_show(cmd: &mut Command, cc: &OsString, show: bool, undo: impl FnOnce()) {
    if show {
        show_command(cmd);
        return;
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", cc.to_string_lossy())));
    if !status.success() {
        undo();
        exit_as(status);
    }
}

/// `-c` with instrumentation: compiles as asked, then renames the objects' calls
/// ([`rename_calls`]): the `-o` file, or each source's `.o` here. Exits.
fn compile_objects_renamed(cc: &OsString, args: &[OsString], renames: Renames, show: bool) -> ! {
    let mut cmd = Command::new(cc);
    cmd.arg(format!("-I{INCLUDE}")).args(args);
    let joined = args.iter().find_map(|a| {
        let a = a.to_str()?;
        (a.len() > 2 && a.starts_with("-o")).then(|| PathBuf::from(&a[2..]))
    });
    let objects: Vec<PathBuf> = match args.iter().position(|a| a == "-o") {
        Some(k) => args.get(k + 1).map(PathBuf::from).into_iter().collect(),
        None if joined.is_some() => joined.into_iter().collect(),
        None => args
            .iter()
            .filter(|a| is_source(a))
            .filter_map(|a| Path::new(a).file_stem())
            .map(|stem| PathBuf::from(stem).with_extension("o"))
            .collect(),
    };
    compile_or_show(&mut cmd, cc, show, || {});
    for object in &objects {
        rename_calls_in(object, renames, show);
    }
    exit(0);
}

/// The arguments of a compiler command `args` that compile one of its sources alone: all but the
/// sources, the output and what goes to the linker only.
fn compile_flags(args: &[OsString]) -> Vec<OsString> {
    let mut compile_args = Vec::new();
    let mut skip_next = false;
    let mut value_of_previous = false;
    for a in args {
        let s = a.to_string_lossy();
        if std::mem::take(&mut skip_next) {
            continue;
        }
        // The value of `-mllvm` or `-Xclang` (`-mllvm -opaque-pointers` is no output file).
        if std::mem::take(&mut value_of_previous) {
            compile_args.push(a.clone());
            continue;
        }
        if matches!(s.as_ref(), "-mllvm" | "-Xclang") {
            value_of_previous = true;
            compile_args.push(a.clone());
            continue;
        }
        if s == "-o" {
            skip_next = true;
            continue;
        }
        if s.starts_with("-o") {
            continue;
        }
        // Linker options, in one word or two (`-l m`, `-L dir`, `-Xlinker x`): their values
        // in a compile command would be taken for input files.
        if matches!(s.as_ref(), "-l" | "-L" | "-Xlinker" | "-u" | "-T") {
            skip_next = true;
            continue;
        }
        // Objects and libraries given by name go to the link only.
        let linked_file = !s.starts_with('-')
            && (s.ends_with(".o") || s.ends_with(".a") || s.ends_with(".so") || s.contains(".so."));
        if is_source(a)
            || linked_file
            || s.starts_with("-l")
            || s.starts_with("-L")
            || s.starts_with("-Wl,")
        {
            continue;
        }
        compile_args.push(a.clone());
    }
    compile_args
}

/// The read-modify-writes ThreadSanitizer's pass in clang leaves to the CPU, as LLVM names
/// them: floating-point ones (`__atomic_fetch_add` on a `float` or a `double`, clang's OpenMP
/// `atomic` on one) and integer maximum and minimum (`__atomic_fetch_max`): atomic among one
/// node's threads only, their updates from two nodes were lost without a word (246 of 10,000
/// float adds).
const UNINSTRUMENTED_RMW: &[&str] = &["fadd", "fsub", "fmax", "fmin", "max", "min", "umax", "umin"];

/// Private directories of the build's own files, removed when dsmcc exits, however it exits
/// (`atexit`: `fail`, the compile of objects apart, the end), or is interrupted (SIGINT,
/// SIGTERM...: removed, then dsmcc ends by the signal).
static TEMP_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

extern "C" fn remove_temp_dirs() {
    if let Ok(dirs) = TEMP_DIRS.lock() {
        for d in dirs.iter() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Ends dsmcc as its compiler ended: with its status, or by the signal that ended it (Ctrl-C:
/// the directories removed first, as an interrupt of dsmcc's own does).
fn exit_as(status: std::process::ExitStatus) -> ! {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(sig) => {
            remove_temp_dirs();
            dsm_runtime::files::die_of(sig)
        }
        None => exit(status.code().unwrap_or(1)),
    }
}

/// A private directory of the build's own (`what` it holds, for an error), removed when dsmcc
/// exits or is interrupted.
fn temp_dir(what: &str) -> PathBuf {
    // Before the directory exists: an interrupt from here on finds it listed.
    static CLEAN_UP: std::sync::Once = std::sync::Once::new();
    CLEAN_UP.call_once(|| {
        if let Err(e) = dsm_runtime::files::clean_up_on_interrupt(|| remove_temp_dirs()) {
            fail(&format!("cannot watch for interrupts: {e}"));
        }
        // SAFETY: registers a function of no arguments that touches only its own static.
        unsafe { libc::atexit(remove_temp_dirs) };
    });
    // Made and listed under the lock (an interrupt's clean-up waits for it); `fail` after it
    // is released (its exit removes what is listed).
    let made = {
        let mut dirs = TEMP_DIRS.lock().unwrap_or_else(|p| p.into_inner());
        let made = dsm_runtime::files::private_temp_dir("dsmcc");
        if let Ok(dir) = &made {
            dirs.push(dir.clone());
        }
        made
    };
    made.unwrap_or_else(|e| fail(&format!("cannot make a private directory {what}: {e}")))
}

/// The C sources among `args` whose code (clang's, with the build's flags `final_flags`) has an
/// operation of [`UNINSTRUMENTED_RMW`], each compiled by clang's front end to LLVM's text in
/// which every such operation is a call of libjia's entry for it (`__dsm_atomicrmw_fadd_f64`:
/// `jia/src/atomics.rs`, exact across nodes), instrumented then as the source would have been:
/// the arguments come back with that text in place of each such source, and the front end's
/// warnings shown. A source clang cannot compile is left to the build's compile, which says
/// why. The build stops, naming each source and line, where the text cannot stand for the
/// source: an operation on another type, a source read from standard input, a build that
/// writes dependency files (`-M...`) or names the language (`-x`).
fn rewrite_uninstrumented_atomics(
    cc: &OsString,
    args: &[OsString],
    final_flags: &[OsString],
) -> Vec<OsString> {
    // Dependency files are the build's own compile's to write.
    let flags = without_dependency_flags(compile_flags(args));
    let mut dir = None;
    let mut out = Vec::with_capacity(args.len());
    let mut refused = Vec::new();
    let language_or_deps = args.iter().any(|a| {
        let s = a.to_string_lossy();
        s == "-x"
            || (s.starts_with("-x") && s.len() > 2)
            || s.starts_with("-M")
            || s.starts_with("-Wp,-M")
    });
    for (k, a) in args.iter().enumerate() {
        if !uses_atomics(cc, args, a) {
            out.push(a.clone());
            continue;
        }
        let emitted = front_end_text(cc, &flags, final_flags, a)
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", cc.to_string_lossy())));
        if !emitted.status.success() {
            // The source's atomics cannot be looked at: its errors (the build's compile would
            // say the same), or flags the front end takes apart from the build, whose
            // operations could stay the CPU's.
            eprint!("{}", String::from_utf8_lossy(&emitted.stderr));
            fail(&format!(
                "{}: clang's front end could not write it as LLVM's text, where dsmcc looks for \
                 the atomic operations its instrumentation leaves to the CPU (above: why)",
                Path::new(a).display()
            ));
        }
        let ir = String::from_utf8_lossy(&emitted.stdout);
        let found = uninstrumented_rmw(&ir);
        if found.is_empty() {
            out.push(a.clone());
            continue;
        }
        let rewritten = (!language_or_deps).then(|| calls_for_rmw(&ir)).flatten();
        let Some(rewritten) = rewritten else {
            // Named by line: the front end's text again, with line tables, to a pipe.
            let line_tables = ["-w", "-gline-tables-only"].map(OsString::from);
            let lines = front_end_text(cc, &flags, &line_tables, a)
                .ok()
                .filter(|o| o.status.success())
                .map(|o| uninstrumented_rmw(&String::from_utf8_lossy(&o.stdout)));
            for (op, line) in lines.unwrap_or(found) {
                let at = line.map_or(String::new(), |l| format!(":{l}"));
                refused.push(format!("{}{at} ({op})", Path::new(a).display()));
            }
            out.push(a.clone());
            continue;
        };
        // The source's own name (`my.mod.c` -> `my.mod.ll`), in a directory of its own: `-c`
        // without `-o` names the object after it.
        let d: &PathBuf = dir.get_or_insert_with(|| temp_dir("for the rewritten sources"));
        let sub = d.join(k.to_string());
        let _ = std::fs::create_dir(&sub);
        let mut name = Path::new(a).file_stem().unwrap_or_default().to_os_string();
        name.push(".ll");
        let ir_path = sub.join(name);
        if let Err(e) = std::fs::write(&ir_path, rewritten) {
            fail(&format!("cannot write {}: {e}", ir_path.display()));
        }
        eprint!("{}", String::from_utf8_lossy(&emitted.stderr));
        out.push(ir_path.into_os_string());
    }
    if !refused.is_empty() {
        fail(&format!(
            "atomic operations clang's instrumentation leaves to the CPU, atomic among one \
             node's threads only, that dsmcc cannot make calls of libjia here (a floating-point \
             read-modify-write, or an integer maximum or minimum, on another type than float, \
             double and 1- to 8-byte integers, or in a build that writes dependency files or \
             names the language): {}; build these sources with DSMCC_CC=gcc (its atomics are \
             exact across nodes), or write the operation as a compare-exchange loop (an _Atomic \
             variable's compound assignment is one), or under a jia_lock",
            refused.join(", ")
        ));
    }
    out
}

/// clang's front end on source `a` with `flags` and `extra`: its LLVM text, before any of LLVM's
/// passes (instrumentation among them), on standard output.
fn front_end_text(
    cc: &OsString,
    flags: &[OsString],
    extra: &[OsString],
    a: &OsString,
) -> std::io::Result<std::process::Output> {
    Command::new(cc)
        .arg(format!("-I{INCLUDE}"))
        .args(flags)
        .args(extra)
        .args([
            "-Xclang",
            "-disable-llvm-passes",
            "-S",
            "-emit-llvm",
            "-o",
            "-",
        ])
        .arg(a)
        .output()
}

/// `flags` without those that make dependency files (`-MD`, `-MF file`...).
fn without_dependency_flags(flags: Vec<OsString>) -> Vec<OsString> {
    let mut kept = Vec::new();
    let mut skip_next = false;
    for f in flags {
        let s = f.to_string_lossy();
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if matches!(s.as_ref(), "-MF" | "-MT" | "-MQ") {
            skip_next = true;
            continue;
        }
        if s.starts_with("-M") || s.starts_with("-Wp,-M") {
            continue;
        }
        kept.push(f);
    }
    kept
}

/// LLVM text `ir` with each operation of [`UNINSTRUMENTED_RMW`] made a call of libjia's entry
/// for it (declared at the end), its `!dbg` kept; `None` if one is on a type libjia has no
/// entry for, or is written in a form this does not read.
fn calls_for_rmw(ir: &str) -> Option<String> {
    let mut text = String::with_capacity(ir.len() + 256);
    let mut declared = std::collections::BTreeSet::new();
    for l in ir.lines() {
        let Some((head, rest)) = rmw_instruction(l) else {
            text.push_str(l);
            text.push('\n');
            continue;
        };
        let rest = rest.strip_prefix("volatile ").unwrap_or(rest);
        let (op, rest) = rest.split_once(' ')?;
        if !UNINSTRUMENTED_RMW.contains(&op) {
            text.push_str(l);
            text.push('\n');
            continue;
        }
        // `<ptr type> <ptr>, <type> <value> [syncscope(..)] <order>, align N[, !dbg !M]...`
        let parts = split_top_level(rest);
        let value_part = parts.get(1)?.trim();
        let (ty, value_and_order) = value_part.split_once(' ')?;
        // The pointer's type: opaque (`ptr`), or the value's type's (`double*`); in another
        // address space, not taken.
        let pointer = parts.first()?.trim();
        let typed = format!("{ty}*");
        let (ptr_ty, ptr) = match pointer.strip_prefix("ptr ") {
            Some(p) => ("ptr", p),
            None => (typed.as_str(), pointer.strip_prefix(&format!("{typed} "))?),
        };
        let (value, order) = value_and_order.rsplit_once(' ')?;
        let value = match value.rsplit_once(" syncscope(") {
            Some((v, _)) => v,
            None => value,
        };
        let mo = match order {
            "monotonic" | "unordered" => 0,
            "acquire" => 2,
            "release" => 3,
            "acq_rel" => 4,
            "seq_cst" => 5,
            _ => return None,
        };
        let code = match (op.starts_with('f'), ty) {
            (true, "float") => "f32",
            (true, "double") => "f64",
            (false, "i8") => "i8",
            (false, "i16") => "i16",
            (false, "i32") => "i32",
            (false, "i64") => "i64",
            _ => return None,
        };
        let name = format!("__dsm_atomicrmw_{op}_{code}");
        // Rust's `u8` and `u16` arguments and results are zero-extended (as C's `unsigned char`).
        let ext = if matches!(code, "i8" | "i16") {
            "zeroext "
        } else {
            ""
        };
        let dbg: String = parts[2..]
            .iter()
            .filter(|p| p.trim_start().starts_with("!dbg"))
            .map(|p| format!(",{p}"))
            .collect();
        text.push_str(&format!(
            "{head}call {ext}{ty} @{name}({ptr_ty} {ptr}, {ty} {ext}{value}, i32 {mo}){dbg}\n"
        ));
        declared.insert(format!(
            "declare {ext}{ty} @{name}({ptr_ty}, {ty}{}, i32)",
            if ext.is_empty() { "" } else { " zeroext" }
        ));
    }
    for d in declared {
        text.push_str(&d);
        text.push('\n');
    }
    Some(text)
}

/// An `atomicrmw` instruction's line `l`: what comes before the word (`  %5 = `) and after it;
/// `None` for any other line (a string constant that spells the word among them).
fn rmw_instruction(l: &str) -> Option<(&str, &str)> {
    let t = l.trim_start();
    let at = if t.starts_with("atomicrmw ") {
        l.len() - t.len()
    } else if t.starts_with('%') {
        let (name, rest) = t.split_once(" = ")?;
        if name.contains(' ') || !rest.starts_with("atomicrmw ") {
            return None;
        }
        l.len() - rest.len()
    } else {
        return None;
    };
    Some((&l[..at], &l[at + "atomicrmw ".len()..]))
}

/// `s` split at its commas outside parentheses, brackets and braces.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' | '<' => depth += 1,
            ')' | ']' | '}' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The operations of [`UNINSTRUMENTED_RMW`] in LLVM text `ir`, each with its source line where
/// the text has line tables (`!dbg`).
fn uninstrumented_rmw(ir: &str) -> Vec<(String, Option<u64>)> {
    let line_of = |id: &str| {
        let head = format!("{id} = !DILocation(line: ");
        ir.lines()
            .find_map(|l| l.strip_prefix(&head))
            .and_then(|rest| {
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
    };
    ir.lines()
        .filter_map(|l| {
            let rest = rmw_instruction(l)?.1;
            let rest = rest.strip_prefix("volatile ").unwrap_or(rest);
            let op = rest.split(' ').next()?;
            if !UNINSTRUMENTED_RMW.contains(&op) {
                return None;
            }
            let line = l
                .split_once("!dbg ")
                .and_then(|(_, id)| line_of(id.split([',', ' ']).next()?));
            Some((op.to_owned(), line))
        })
        .collect()
}

/// Instrumentation with linking: compiles each source in `args` that `which` takes with `flags`
/// to an object in a directory of its own (the other arguments too, but for the output and the
/// linker's), renames its calls ([`rename_calls`]), and returns that directory and the
/// arguments with the objects in place of those sources.
fn compile_apart(
    cc: &OsString,
    args: &[OsString],
    flags: &[String],
    which: impl Fn(&OsString) -> bool,
    renames: Renames,
    show: bool,
) -> (PathBuf, Vec<OsString>) {
    // Private and unpredictable: another user cannot block the name or plant links in it.
    let dir = temp_dir("for the objects");
    let compile_args = compile_flags(args);
    let mut linked = Vec::new();
    for (k, a) in args.iter().enumerate() {
        if !is_source(a) || !which(a) {
            linked.push(a.clone());
            continue;
        }
        let object = dir.join(format!("{k}.o"));
        let mut cmd = Command::new(cc);
        cmd.arg(format!("-I{INCLUDE}"))
            .args(&compile_args)
            .args(flags)
            .arg("-c")
            .arg(a)
            .arg("-o")
            .arg(&object);
        compile_or_show(&mut cmd, cc, show, || {
            let _ = std::fs::remove_dir_all(&dir);
        });
        rename_calls_in(&object, renames, show);
        linked.push(object.into_os_string());
    }
    (dir, linked)
}

#[cfg(test)]
mod tests {
    use super::{calls_for_rmw, has_atomics, uninstrumented_rmw};

    /// clang's front-end text (typed and opaque pointers, a global's member, a result unused, a
    /// string that spells the word): each such operation a call, its `!dbg` kept, one
    /// declaration per entry; the integer add and the string left as they are.
    #[test]
    fn uninstrumented_operations_become_calls_and_nothing_else_changes() {
        let ir = "@.str = private constant [9 x i8] c\"atomicrmw max\\00\"\n\
                  %5 = atomicrmw fadd float* %4, float 1.000000e+00 seq_cst, align 4, !dbg !20\n\
                  %6 = atomicrmw volatile fadd double* getelementptr inbounds (%struct.S, %struct.S* @g, i32 0, i32 1), double 2.000000e+00 monotonic, align 8\n\
                  atomicrmw max ptr %p, i8 -5 acquire, align 1\n\
                  %8 = atomicrmw add i64* %7, i64 1 seq_cst, align 8\n\
                  !20 = !DILocation(line: 12, column: 3, scope: !5)\n";
        let found: Vec<_> = uninstrumented_rmw(ir).into_iter().collect();
        assert_eq!(
            found,
            [
                ("fadd".to_owned(), Some(12)),
                ("fadd".to_owned(), None),
                ("max".to_owned(), None)
            ]
        );
        let out = calls_for_rmw(ir).unwrap();
        for want in [
            "@.str = private constant [9 x i8] c\"atomicrmw max\\00\"",
            "%5 = call float @__dsm_atomicrmw_fadd_f32(float* %4, float 1.000000e+00, i32 5), !dbg !20",
            "%6 = call double @__dsm_atomicrmw_fadd_f64(double* getelementptr inbounds (%struct.S, %struct.S* @g, i32 0, i32 1), double 2.000000e+00, i32 0)",
            "call zeroext i8 @__dsm_atomicrmw_max_i8(ptr %p, i8 zeroext -5, i32 2)",
            "%8 = atomicrmw add i64* %7, i64 1 seq_cst, align 8",
            "declare double @__dsm_atomicrmw_fadd_f64(double*, double, i32)",
            "declare zeroext i8 @__dsm_atomicrmw_max_i8(ptr, i8 zeroext, i32)",
        ] {
            assert!(
                out.lines().any(|l| l.trim() == want),
                "no {want:?} in\n{out}"
            );
        }
        // A type libjia has no entry for: not rewritten.
        assert!(calls_for_rmw("%1 = atomicrmw fadd half* %0, half 1.0 seq_cst, align 2").is_none());
    }

    #[test]
    fn atomics_are_found_however_spelled_and_only_where_they_are() {
        for yes in [
            "_Atomic int x;",
            "__atomic_fetch_add(p, 1, 5);",
            "__atomic_fetch_add ((p), 1, 5);",
            "__sync_fetch_and_add(p, 1);",
            "__c11_atomic_load(p, 5);",
            "#pragma omp atomic\n(*p)++;",
            "  #  pragma   omp\tatomic update\n",
            "_Pragma(\"omp   atomic\") (*p)++;",
        ] {
            assert!(has_atomics(yes), "{yes:?}");
        }
        for no in [
            "typedef union { int x; } __atomic_wide_counter;",
            "__atomic_wide_counter __wseq;",
            "int my__atomic_fetch_add(int);",
            "#pragma omp parallel for\nfor (;;) {}",
            "#pragma omp critical\n",
            "int atomic = 1;",
        ] {
            assert!(!has_atomics(no), "{no:?}");
        }
    }
}
