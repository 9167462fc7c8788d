//! # jia: JIAJIA's C interface on the DSM runtime
//!
//! Built as `libjia.a` and `libjia.so`, with `include/jia.h`, so that JIAJIA programs compile and
//! run unchanged: `cc prog.c -Ijia/include -Ltarget/release -ljia -lpthread -ldl -lm`.
//!
//! `jia_init` joins the job the program was started in: by `dsmrun`, by `srun` or `mpirun`, or,
//! started directly with a `.jiahosts` in the working directory, by starting the other nodes
//! itself (as JIAJIA does); with none of these it is a one-node job. `jiapid` and `jiahosts` are
//! plain `int` globals set by `jia_init`.
//!
//! Misuse that JIAJIA would silently get wrong (a lock number out of range, an allocation that
//! does not fit) ends the job with a message instead.

#![allow(unsafe_code)]
#![allow(non_upper_case_globals)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulong};
use std::sync::OnceLock;

use dsm_runtime::config;
use dsm_runtime::launcher::{self, JobSpec};
use dsm_runtime::{AllocPolicy, Dsm, NodeId};

static DSM: OnceLock<Dsm> = OnceLock::new();

/// This node's id (JIAJIA's `jiapid`), set by `jia_init`.
#[unsafe(no_mangle)]
pub static mut jiapid: c_int = 0;
/// Nodes in the job (JIAJIA's `jiahosts`), set by `jia_init`.
#[unsafe(no_mangle)]
pub static mut jiahosts: c_int = 1;

fn die(msg: &str) -> ! {
    match DSM.get() {
        Some(d) => d.error(msg),
        None => {
            eprintln!("jia: error: {msg}");
            std::process::exit(1)
        }
    }
}

fn dsm() -> &'static Dsm {
    DSM.get()
        .unwrap_or_else(|| die("jia_init must be called before any other jia_ function"))
}

/// The job to start ourselves from `.jiahosts`, if there is one and no launcher started us.
fn self_launch(argv: &[String]) -> Option<dsm_runtime::launch::JobEnv> {
    if std::env::var_os("DSM_RANK").is_some() || dsm_runtime::launch::cluster_rank_size().is_some()
    {
        return None;
    }
    let text = std::fs::read_to_string(".jiahosts").ok()?;
    let hosts = config::parse_hosts(".jiahosts", &text, |w| eprintln!("jia: warning: {w}"))
        .unwrap_or_else(|e| die(&e.to_string()));
    if hosts.len() < 2 {
        return None;
    }
    let (cfg, stats) = dsm_runtime::launch::local_config().unwrap_or_else(|e| die(&e));
    let program =
        std::env::current_exe().map_or_else(|_| argv[0].clone(), |p| p.display().to_string());
    let spec = JobSpec {
        program,
        args: argv[1..].to_vec(),
        remote_program: None,
        hosts,
        config: cfg,
        stats,
        stats_json: std::env::var("DSM_STATS_JSON").ok(),
        tag_output: false,
        join_timeout: std::time::Duration::from_secs(60),
    };
    Some(launcher::start_as_node0(&spec).unwrap_or_else(|e| die(&e.to_string())))
}

/// `void jia_init(int argc, char **argv)`
///
/// # Safety
/// `argv` must hold `argc` valid C strings (as `main` receives them), or be null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jia_init(argc: c_int, argv: *const *const c_char) {
    let mut args = Vec::new();
    if !argv.is_null() {
        for i in 0..argc.max(0) as usize {
            // SAFETY: the caller passes argc valid, NUL-terminated strings.
            let p = unsafe { *argv.add(i) };
            if !p.is_null() {
                // SAFETY: as above.
                args.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
            }
        }
    }
    if args.is_empty() {
        args.push("jia-program".into());
    }
    if DSM.get().is_some() {
        return;
    }
    let result = match self_launch(&args) {
        Some(env) => dsm_runtime::init_job(Some(env)),
        None => dsm_runtime::init(),
    };
    let d = result.unwrap_or_else(|e| die(&e.to_string()));
    // SAFETY: written once here, before the program reads them (JIAJIA's contract: after
    // jia_init).
    unsafe {
        jiapid = d.id() as c_int;
        jiahosts = d.nodes() as c_int;
    }
    let _ = DSM.set(d);
}

/// `void jia_exit(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_exit() {
    dsm().exit();
}

fn alloc(total: c_int, policy: AllocPolicy) -> c_ulong {
    if total <= 0 {
        die(&format!("jia_alloc: size {total} must be positive"));
    }
    match dsm().alloc::<u8>(total as usize, policy) {
        Ok(a) => a.as_ptr() as c_ulong,
        Err(e) => die(&format!("jia_alloc of {total} bytes: {e}")),
    }
}

fn host(h: c_int, what: &str) -> NodeId {
    if h < 0 || h >= dsm().nodes() as c_int {
        die(&format!(
            "{what}: start host {h} is not in the job (0..{})",
            dsm().nodes()
        ));
    }
    NodeId(h as u16)
}

/// `unsigned long jia_alloc3(int totalsize, int blocksize, int starthost)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_alloc3(totalsize: c_int, blocksize: c_int, starthost: c_int) -> c_ulong {
    if blocksize <= 0 {
        die(&format!(
            "jia_alloc3: block size {blocksize} must be positive"
        ));
    }
    let start = host(starthost, "jia_alloc3");
    alloc(
        totalsize,
        AllocPolicy::Cyclic {
            block_bytes: blocksize as u64,
            start,
        },
    )
}

/// `unsigned long jia_alloc4(int totalsize, int *blocks, int n, int starthost)`
///
/// # Safety
/// `blocks` must point to `n` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jia_alloc4(
    totalsize: c_int,
    blocks: *const c_int,
    n: c_int,
    starthost: c_int,
) -> c_ulong {
    if blocks.is_null() || n <= 0 {
        die("jia_alloc4: no block sizes given");
    }
    // SAFETY: the caller passes n ints at blocks.
    let sizes = unsafe { std::slice::from_raw_parts(blocks, n as usize) };
    if sizes.iter().any(|&b| b <= 0) {
        die("jia_alloc4: block sizes must be positive");
    }
    let start = host(starthost, "jia_alloc4");
    alloc(
        totalsize,
        AllocPolicy::Blocks {
            blocks_bytes: sizes.iter().map(|&b| b as u64).collect(),
            start,
        },
    )
}

/// `unsigned long jia_alloc2(int totalsize, int blocksize)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_alloc2(totalsize: c_int, blocksize: c_int) -> c_ulong {
    jia_alloc3(totalsize, blocksize, 0)
}

/// `unsigned long jia_alloc2p(int totalsize, int starthost)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_alloc2p(totalsize: c_int, starthost: c_int) -> c_ulong {
    let h = host(starthost, "jia_alloc2p");
    alloc(totalsize, AllocPolicy::OnNode(h))
}

/// `unsigned long jia_alloc(int totalsize)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_alloc(totalsize: c_int) -> c_ulong {
    alloc(totalsize, AllocPolicy::RoundRobin)
}

fn id(v: c_int, max: u16, what: &str) -> u16 {
    if v < 0 || v >= c_int::from(max) {
        die(&format!("{what}({v}): allowed 0..{max}"));
    }
    v as u16
}

/// `void jia_lock(int lockid)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_lock(lockid: c_int) {
    dsm().lock_raw(id(lockid, 64, "jia_lock"));
}

/// `void jia_unlock(int lockid)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_unlock(lockid: c_int) {
    dsm().unlock_raw(id(lockid, 64, "jia_unlock"));
}

/// `void jia_barrier(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_barrier() {
    dsm().barrier();
}

/// `void jia_wait(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_wait() {
    dsm().wait();
}

/// `void jia_setcv(int cvnum)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_setcv(cv: c_int) {
    dsm().setcv(id(cv, 16, "jia_setcv"));
}

/// `void jia_resetcv(int cvnum)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_resetcv(cv: c_int) {
    dsm().resetcv(id(cv, 16, "jia_resetcv"));
}

/// `void jia_waitcv(int cvnum)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_waitcv(cv: c_int) {
    dsm().waitcv(id(cv, 16, "jia_waitcv"));
}

/// `double jia_clock(void)`: seconds since `jia_init`.
#[unsafe(no_mangle)]
pub extern "C" fn jia_clock() -> f64 {
    dsm().clock()
}

/// `unsigned int jia_startstat(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_startstat() -> c_uint {
    dsm().start_stats();
    0
}

/// `unsigned int jia_stopstat(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_stopstat() -> c_uint {
    dsm().stop_stats();
    0
}

/// The end of `jia_error` (whose formatting half is a static inline function in `jia.h`).
///
/// # Safety
/// `msg` must be a valid C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jia_error_message(msg: *const c_char) -> ! {
    let text = if msg.is_null() {
        "jia_error".to_string()
    } else {
        // SAFETY: the C side passes a NUL-terminated buffer.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    die(&text)
}
