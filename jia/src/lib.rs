//! # jia: JIAJIA's C interface on the DSM runtime
//!
//! Built as `libjia.a` and `libjia.so`, with `include/jia.h`, so that JIAJIA programs compile and
//! run unchanged: `target/release/dsmcc prog.c -o prog` (the `dsmcc` binary of this crate adds
//! the header and library by absolute path, so it works from any directory).
//!
//! `jia_init` joins the job the program was started in: by `dsmrun`, by `srun` or `mpirun`, or,
//! started directly with a `.jiahosts` in the working directory, by starting the other nodes
//! itself (as JIAJIA does); with none of these it is a one-node job. `jia_pid` and `hostc`
//! (JIAJIA 2.1's names; `jia.h` makes `jiapid` and `jiahosts` macros for them) are plain `int`
//! globals set by `jia_init`; `jiapid` and `jiahosts` are kept as symbols too, for binaries built
//! against the earlier header.
//!
//! Besides shared memory, JIAJIA's message passing (`jia_send`, `jia_recv`, `jia_bcast`,
//! `jia_reduce`) runs over the job's transport; the calls that steer features this runtime does
//! not have (`jia_config`, `jia_loadcheck`, `jia_free`) are accepted, do what keeps the program
//! right, and say once at node 0 what they ignored.
//!
//! Misuse that JIAJIA would silently get wrong (a lock number out of range, an allocation that
//! does not fit) ends the job with a message instead.

#![allow(unsafe_code)]
#![allow(non_upper_case_globals)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulong, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Instant;

use dsm_runtime::{AllocPolicy, Dsm, NodeId, ReduceOp, Reducible};

mod atomics;
mod cancellable;
mod entry;
mod interpose;
mod races;

/// The calls that name their caller's line: each hands its return address to its `_at` function
/// (see `entry`).
mod with_caller {
    use std::ffi::{c_char, c_int, c_ulong};

    use crate::{
        jia_alloc_array_at, jia_alloc_at, jia_alloc_random_at, jia_alloc1_at, jia_alloc2_at,
        jia_alloc2p_at, jia_alloc3_at, jia_alloc4_at, jia_bcast_at, jia_recv_at, jia_reduce_at,
        jia_send_at,
    };

    crate::entry::pc_entry! {
        jia_alloc => jia_alloc_at, "rsi", (totalsize: c_int) -> c_ulong;
        jia_alloc1 => jia_alloc1_at, "rsi", (totalsize: c_int) -> c_ulong;
        jia_alloc_random => jia_alloc_random_at, "rsi", (totalsize: c_int) -> c_ulong;
        jia_alloc2 => jia_alloc2_at, "rdx", (totalsize: c_int, blocksize: c_int) -> c_ulong;
        jia_alloc2p => jia_alloc2p_at, "rdx", (totalsize: c_int, starthost: c_int) -> c_ulong;
        jia_alloc3 => jia_alloc3_at, "rcx",
            (totalsize: c_int, blocksize: c_int, starthost: c_int) -> c_ulong;
        jia_alloc_array => jia_alloc_array_at, "rcx",
            (totalsize: c_int, blocks: *const c_int, n: c_int) -> c_ulong;
        jia_alloc4 => jia_alloc4_at, "r8",
            (totalsize: c_int, blocks: *const c_int, n: c_int, starthost: c_int) -> c_ulong;
        jia_send => jia_send_at, "r8",
            (buf: *const c_char, len: c_int, topid: c_int, tag: c_int) -> ();
        jia_recv => jia_recv_at, "r8",
            (buf: *mut c_char, len: c_int, frompid: c_int, tag: c_int) -> c_int;
        jia_bcast => jia_bcast_at, "rcx", (buf: *mut c_char, len: c_int, root: c_int) -> ();
        jia_reduce => jia_reduce_at, "r9",
            (snd: *const c_char, rcv: *mut c_char, cnt: c_int, op: c_int, root: c_int) -> ();
    }
}

static DSM: OnceLock<Dsm> = OnceLock::new();

/// This node's id (JIAJIA's `jiapid`), set by `jia_init`.
#[unsafe(no_mangle)]
pub static mut jiapid: c_int = 0;
/// Nodes in the job (JIAJIA's `jiahosts`), set by `jia_init`.
#[unsafe(no_mangle)]
pub static mut jiahosts: c_int = 1;
/// This node's id under JIAJIA 2.1's name (`jia.h` defines `jiapid` as `jia_pid`).
#[unsafe(no_mangle)]
pub static mut jia_pid: c_int = 0;
/// Nodes in the job under JIAJIA 2.1's name (`jia.h` defines `jiahosts` as `hostc`).
#[unsafe(no_mangle)]
pub static mut hostc: c_int = 1;
/// The next lock the ANL macros `LOCKINIT`/`ALOCKINIT` hand out (modulo `Maxlocks`).
#[unsafe(no_mangle)]
pub static mut jia_lock_index: c_int = 0;
/// The next condition variable the ANL macro `PAUSEINIT` hands out (modulo `Maxcvs`).
#[unsafe(no_mangle)]
pub static mut jia_cv_index: c_int = 0;

/// When `jia_clock` counts from: the first call of `jia_clock` or `jia_init`, whichever comes
/// first (a SPLASH-style `CLOCK(start)` may come before `jia_init`).
static CLOCK0: OnceLock<Instant> = OnceLock::new();

fn clock0() -> Instant {
    *CLOCK0.get_or_init(Instant::now)
}

fn die(msg: &str) -> ! {
    match DSM.get() {
        Some(d) => d.error(msg),
        None => {
            eprintln!("jia: error: {msg}");
            std::process::exit(1)
        }
    }
}

/// The node, once `jia_init` has made it.
fn dsm_if_joined() -> Option<&'static Dsm> {
    DSM.get()
}

/// The node, for the call `what`; before `jia_init`, the node ends naming the call.
fn dsm_for(what: &str) -> &'static Dsm {
    DSM.get().unwrap_or_else(|| {
        die(&format!(
            "{what} before jia_init: jia_init must be called before any other jia_ function"
        ))
    })
}

/// `void jia_init(int argc, char **argv)`: joins the job the program was started in. Started
/// directly with a `.jiahosts`, the other nodes are started with this process's own command line
/// (`argc`/`argv` as `main` received them; JIAJIA's programs pass them unchanged).
///
/// # Safety
/// None beyond the C signature: the arguments are not read.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jia_init(_argc: c_int, _argv: *const *const c_char) {
    if let Some(d) = DSM.get() {
        eprintln!(
            "dsm node {}: warning: jia_init called again: the node joined its job at the first \
             call, and this one does nothing",
            d.id()
        );
        return;
    }
    clock0();
    // The race checker's hints for a program not built for it are libjia's.
    dsm_races::hooks::program_is_c();
    // Its SIGSEGV handlers are its own (a fault the DSM passes on is the program's to take).
    dsm_runtime::interpose::note_c_program();
    // Private buffers for receives into shared memory.
    interpose::init();
    // The launcher's job, or (started directly with a .jiahosts) the job this process starts.
    let result = dsm_runtime::init();
    // A job that cannot start ends with status 2, as dsmrun and the Rust programs say it.
    let d = result.unwrap_or_else(|e| {
        eprintln!("jia: error: {e}");
        std::process::exit(2)
    });
    // SAFETY: written once here, before the program reads them (JIAJIA's contract: after
    // jia_init).
    unsafe {
        jiapid = d.id() as c_int;
        jiahosts = d.nodes() as c_int;
        jia_pid = d.id() as c_int;
        hostc = d.nodes() as c_int;
    }
    let _ = DSM.set(d);
    // Leaving main (or calling exit) without jia_exit: with status 0 the node leaves the job, as
    // in JIAJIA; with another, the job learns that this node failed with it. C's stdio is flushed
    // after the handler, so nothing printed is lost.
    unsafe extern "C" {
        /// glibc's `on_exit(3)`: `atexit` with the exit status.
        fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
    }
    // SAFETY: registers a plain extern "C" function and a null argument, which glibc copies.
    unsafe { on_exit(exit_at_process_end, std::ptr::null_mut()) };
    // Calls made before jia_init (jia_config is often the first line of main).
    apply_home_migration_asked();
    print_notices();
    if dsm_races::on() {
        races::wrap_installed_handlers();
    }
    if dsm_races::on() && !races::instrumented() && DSM.get().is_some_and(|d| d.id() == 0) {
        eprintln!(
            "dsm: check_races: this program was not built for the checker (dsmcc --check-races): \
             its loads and stores are not seen, so no race of its own can be found"
        );
    }
}

/// The exit handler: `jia_exit` for a program that did not call it and ends with status 0; the
/// node's failure with its status otherwise.
extern "C" fn exit_at_process_end(status: c_int, _: *mut c_void) {
    if let Some(d) = DSM.get() {
        d.exit_at_process_end(status);
    }
}

/// `void jia_exit(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_exit() {
    dsm_for("jia_exit").exit();
}

/// An allocation for the program's call at `pc` (its return address, for the race checker's
/// reports; see `sys`).
fn alloc(call: &str, total: c_int, policy: AllocPolicy, pc: usize) -> c_ulong {
    if total <= 0 {
        die(&format!("{call}: size {total} must be positive"));
    }
    let from = dsm_races::From::Code(pc);
    match dsm_for(call).alloc_from::<u8>(total as usize, policy, from) {
        Ok(a) => a.as_ptr() as c_ulong,
        Err(e) => die(&format!("{call} of {total} bytes: {e}")),
    }
}

fn host(h: c_int, what: &str) -> NodeId {
    if h < 0 || h >= dsm_for(what).nodes() as c_int {
        die(&format!(
            "{what}: start host {h} is not in the job (nodes 0 to {})",
            dsm_for(what).nodes() - 1
        ));
    }
    NodeId(h as u16)
}

/// `unsigned long jia_alloc3(int totalsize, int blocksize, int starthost)`
pub(crate) extern "C" fn jia_alloc3_at(
    totalsize: c_int,
    blocksize: c_int,
    starthost: c_int,
    pc: usize,
) -> c_ulong {
    alloc_cyclic("jia_alloc3", (totalsize, blocksize, starthost), pc)
}

/// Blocks of `blocksize` bytes homed on each node in turn from `starthost`, for `call`.
fn alloc_cyclic(
    call: &str,
    (totalsize, blocksize, starthost): (c_int, c_int, c_int),
    pc: usize,
) -> c_ulong {
    if blocksize <= 0 {
        die(&format!("{call}: block size {blocksize} must be positive"));
    }
    let start = host(starthost, call);
    alloc(
        call,
        totalsize,
        AllocPolicy::Cyclic {
            block_bytes: blocksize as u64,
            start,
        },
        pc,
    )
}

/// `unsigned long jia_alloc4(int totalsize, int *blocks, int n, int starthost)`
///
/// # Safety
/// `blocks` must point to `n` ints.
pub(crate) unsafe extern "C" fn jia_alloc4_at(
    totalsize: c_int,
    blocks: *const c_int,
    n: c_int,
    starthost: c_int,
    pc: usize,
) -> c_ulong {
    // SAFETY: the caller's promise.
    unsafe { alloc_blocks("jia_alloc4", (totalsize, blocks, n, starthost), pc) }
}

/// `jia_alloc4` and `jia_alloc_array` (named `call` in their errors).
///
/// # Safety
/// `blocks` must point to `n` ints.
unsafe fn alloc_blocks(
    call: &str,
    (totalsize, blocks, n, starthost): (c_int, *const c_int, c_int, c_int),
    pc: usize,
) -> c_ulong {
    if blocks.is_null() || n <= 0 {
        die(&format!("{call}: no block sizes given"));
    }
    // SAFETY: the caller passes n ints at blocks.
    let sizes = unsafe { std::slice::from_raw_parts(blocks, n as usize) };
    if sizes.iter().any(|&b| b <= 0) {
        die(&format!("{call}: block sizes must be positive"));
    }
    let start = host(starthost, call);
    alloc(
        call,
        totalsize,
        AllocPolicy::Blocks {
            blocks_bytes: sizes.iter().map(|&b| b as u64).collect(),
            start,
        },
        pc,
    )
}

/// `unsigned long jia_alloc2(int totalsize, int blocksize)`
pub(crate) extern "C" fn jia_alloc2_at(totalsize: c_int, blocksize: c_int, pc: usize) -> c_ulong {
    alloc_cyclic("jia_alloc2", (totalsize, blocksize, 0), pc)
}

/// `unsigned long jia_alloc2p(int totalsize, int starthost)`
pub(crate) extern "C" fn jia_alloc2p_at(totalsize: c_int, starthost: c_int, pc: usize) -> c_ulong {
    let h = host(starthost, "jia_alloc2p");
    alloc("jia_alloc2p", totalsize, AllocPolicy::OnNode(h), pc)
}

/// `unsigned long jia_alloc(int totalsize)`
pub(crate) extern "C" fn jia_alloc_at(totalsize: c_int, pc: usize) -> c_ulong {
    alloc("jia_alloc", totalsize, AllocPolicy::RoundRobin, pc)
}

fn id(v: c_int, count: u16, what: &str) -> u16 {
    if v < 0 || v >= c_int::from(count) {
        die(&format!("{what}({v}): allowed 0 to {}", count - 1));
    }
    v as u16
}

/// `void jia_lock(int lockid)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_lock(lockid: c_int) {
    let l = id(lockid, dsm_runtime::MAX_LOCKS, "jia_lock");
    if let Err(e) = dsm_for("jia_lock").lock_raw(l) {
        die(&format!("jia_lock({lockid}): {e}"));
    }
}

/// `void jia_unlock(int lockid)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_unlock(lockid: c_int) {
    let l = id(lockid, dsm_runtime::MAX_LOCKS, "jia_unlock");
    if let Err(e) = dsm_for("jia_unlock").unlock_raw(l) {
        die(&format!("jia_unlock({lockid}): {e}"));
    }
}

/// `void jia_barrier(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_barrier() {
    dsm_for("jia_barrier").barrier();
}

/// `void jia_barrier_threads(int threads)`: a barrier of `threads` threads of every node
/// ([`dsm_runtime::Dsm::barrier_threads`]).
#[unsafe(no_mangle)]
pub extern "C" fn jia_barrier_threads(threads: c_int) {
    match usize::try_from(threads) {
        Ok(t) if t > 0 => dsm_for("jia_barrier_threads").barrier_threads(t),
        _ => die(&format!(
            "jia_barrier_threads({threads}): the count of threads per node must be 1 or more"
        )),
    }
}

/// `void jia_wait(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_wait() {
    dsm_for("jia_wait").wait();
}

/// `void jia_setcv(int cvnum)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_setcv(cv: c_int) {
    dsm_for("jia_setcv").setcv(id(cv, dsm_runtime::MAX_CVS, "jia_setcv"));
}

/// `void jia_resetcv(int cvnum)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_resetcv(cv: c_int) {
    dsm_for("jia_resetcv").resetcv(id(cv, dsm_runtime::MAX_CVS, "jia_resetcv"));
}

/// `void jia_waitcv(int cvnum)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_waitcv(cv: c_int) {
    dsm_for("jia_waitcv").waitcv(id(cv, dsm_runtime::MAX_CVS, "jia_waitcv"));
}

/// `double jia_clock(void)`: seconds since `jia_init` (or since the first `jia_clock` call, if
/// that came first; it works before `jia_init`, as JIAJIA's does). JIAJIA 3.0's return type.
#[unsafe(no_mangle)]
pub extern "C" fn jia_clock() -> f64 {
    clock0().elapsed().as_secs_f64()
}

/// JIAJIA 2.1's `float jia_clock(void)`: `jia.h` binds `jia_clock` to this symbol when the
/// program is compiled with `-DJIA_FLOAT_CLOCK`.
#[unsafe(no_mangle)]
pub extern "C" fn jia_clock_float() -> f32 {
    jia_clock() as f32
}

/// `unsigned long jia_current_time(void)`: nanoseconds since the Unix epoch, from the real-time
/// clock (`CLOCK_REALTIME`). This is what JIAJIA 3.0's library returns under this name (its
/// `tools.h` declares it `unsigned long`; its comment says milliseconds, its code returns
/// `tv_sec * 1e9 + tv_nsec`), and what its programs expect: `mpitest` takes the difference of
/// two calls and divides by 10^6 to print milliseconds. Since the epoch rather than since
/// `jia_init`, so that readings on different nodes compare (as far as the hosts' clocks agree).
/// JIAJIA 2.1 counted milliseconds since the first call; its programs did not use it.
#[unsafe(no_mangle)]
pub extern "C" fn jia_current_time() -> c_ulong {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    since.as_nanos() as c_ulong
}

/// `unsigned int jia_startstat(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_startstat() -> c_uint {
    dsm_for("jia_startstat").start_stats();
    0
}

/// `unsigned int jia_stopstat(void)`
#[unsafe(no_mangle)]
pub extern "C" fn jia_stopstat() -> c_uint {
    dsm_for("jia_stopstat").stop_stats();
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

/// JIAJIA 2.1's `void assert(int cond, char *msg)`, which its library exported and programs
/// (`water`) call with two arguments: when `cond` is 0 the whole job ends as with `jia_error`,
/// with `assertion failed: MSG` naming this node. Not C's one-argument `assert` macro: `jia.h`
/// declares it as `void (assert)(int, char *)`, which the macro does not expand, so a program
/// with `<assert.h>` has both (`(assert)(cond, msg)` calls this one).
///
/// # Safety
/// `msg` must be null or a valid C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn assert(cond: c_int, msg: *const c_char) {
    if cond != 0 {
        return;
    }
    let text = if msg.is_null() {
        String::new()
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    die(&format!("assertion failed: {text}"))
}

// ----- JIAJIA 2.1 and 3.0's wider interface -----

/// `unsigned long jia_alloc1(int totalsize)`: JIAJIA 2.1, everything homed on node 0.
pub(crate) extern "C" fn jia_alloc1_at(totalsize: c_int, pc: usize) -> c_ulong {
    alloc("jia_alloc1", totalsize, AllocPolicy::OnNode(NodeId(0)), pc)
}

/// How many `jia_alloc_random` calls this node made: the seed of the next one's home, so that
/// every node (making the same calls, as allocation is collective) draws the same home.
static RANDOM_ALLOCS: AtomicU32 = AtomicU32::new(0);

/// `unsigned long jia_alloc_random(int totalsize)`: JIAJIA 3.0, the whole block homed on a node
/// drawn at random (the same draw on every node: a hash of the call's sequence number).
pub(crate) extern "C" fn jia_alloc_random_at(totalsize: c_int, pc: usize) -> c_ulong {
    let call = u64::from(RANDOM_ALLOCS.fetch_add(1, Ordering::Relaxed));
    // SplitMix64's finaliser: a well-spread draw from a counter.
    let mut z = call.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let home = (z % dsm_for("jia_alloc_random").nodes() as u64) as u16;
    alloc(
        "jia_alloc_random",
        totalsize,
        AllocPolicy::OnNode(NodeId(home)),
        pc,
    )
}

/// `unsigned long jia_alloc_array(int totalsize, int *blocks, int n)`: JIAJIA 3.0, block sizes
/// from an array, dealt to the nodes in turn from node 0 (`jia_alloc4` with start host 0).
///
/// # Safety
/// `blocks` must point to `n` ints.
pub(crate) unsafe extern "C" fn jia_alloc_array_at(
    totalsize: c_int,
    blocks: *const c_int,
    n: c_int,
    pc: usize,
) -> c_ulong {
    // SAFETY: the caller's promise is jia_alloc4's.
    unsafe { alloc_blocks("jia_alloc_array", (totalsize, blocks, n, 0), pc) }
}

/// `void jia_free(void *addr)`: JIAJIA 3.0. Shared memory is not reused within a job (every
/// node would have to free the same block at the same point), so this checks the address and
/// keeps the memory.
#[unsafe(no_mangle)]
pub extern "C" fn jia_free(addr: *mut c_void) {
    if addr.is_null() {
        return;
    }
    let _ = dsm_for("jia_free");
    if !dsm_runtime::in_shared_region(addr.cast::<u8>(), 1) {
        die(&format!(
            "jia_free({addr:p}): not an address of shared memory"
        ));
    }
    notice(Notice::Free);
}

/// `jia_config` features (JIAJIA's numbering).
const HMIG: c_int = 0;
const ADWD: c_int = 1;
const BROADCAST: c_int = 2;
const LOADBAL: c_int = 3;
const WVEC: c_int = 4;

/// What node 0 says once about a call whose feature has no meaning here.
#[derive(Clone, Copy)]
#[repr(u32)]
enum Notice {
    AdaptiveWrites = 1 << ADWD,
    Broadcast = 1 << BROADCAST,
    LoadBalance = 1 << LOADBAL,
    WriteVector = 1 << WVEC,
    Free = 1 << 8,
}

impl Notice {
    const ALL: [Notice; 5] = [
        Notice::AdaptiveWrites,
        Notice::Broadcast,
        Notice::LoadBalance,
        Notice::WriteVector,
        Notice::Free,
    ];

    fn text(self) -> &'static str {
        match self {
            Notice::AdaptiveWrites => {
                "jia_config(ADWD, ON) ignored: writes are always detected per page, with twins"
            }
            Notice::Broadcast => {
                "jia_config(BROADCAST, ON) ignored: barrier grants already go to every node"
            }
            Notice::LoadBalance => {
                "jia_config(LOADBAL, ON) ignored: jia_divtask divides work evenly, jia_loadcheck does nothing"
            }
            Notice::WriteVector => "jia_config(WVEC, ON) ignored: diffs are always word-granular",
            Notice::Free => "jia_free keeps the memory: shared memory is not reused within a job",
        }
    }
}

/// Notices asked for, and those already printed.
static NOTICES_ASKED: AtomicU32 = AtomicU32::new(0);
static NOTICES_PRINTED: AtomicU32 = AtomicU32::new(0);

fn notice(n: Notice) {
    NOTICES_ASKED.fetch_or(n as u32, Ordering::Relaxed);
    print_notices();
}

/// Prints, at node 0 and once each, the notices asked for so far (none before `jia_init`: the
/// node's id is not known yet).
fn print_notices() {
    let Some(d) = DSM.get() else {
        return;
    };
    if d.id() != 0 {
        return;
    }
    let asked = NOTICES_ASKED.load(Ordering::Relaxed);
    let new = asked & !NOTICES_PRINTED.fetch_or(asked, Ordering::Relaxed);
    for n in Notice::ALL {
        if new & n as u32 != 0 {
            eprintln!("jia: notice: {}", n.text());
        }
    }
}

/// Home migration asked for by `jia_config` before `jia_init` (-1: nothing asked), applied
/// by `jia_init`.
static HMIG_ASKED: AtomicI32 = AtomicI32::new(-1);

/// Applies a `jia_config(HMIG, ...)` made before `jia_init`.
fn apply_home_migration_asked() {
    match HMIG_ASKED.load(Ordering::Relaxed) {
        0 => dsm_for("jia_config").set_home_migration(false),
        1 => dsm_for("jia_config").set_home_migration(true),
        _ => {}
    }
}

/// `void jia_config(int feature, int on_off)`: JIAJIA's switches for its optional mechanisms.
/// `HMIG` turns home migration on or off (as JIAJIA 2.1's did: a page one node alone writes
/// between barriers moves its home there; on by default here, see `home_migration` in
/// `.jiaconf`). The others are not needed for a correct run here; turning one on is accepted
/// and node 0 says once what was ignored. Turning one off is what this runtime does anyway.
#[unsafe(no_mangle)]
pub extern "C" fn jia_config(feature: c_int, on_off: c_int) {
    if !(0..=1).contains(&on_off) {
        die(&format!(
            "jia_config({feature}, {on_off}): the second argument is ON (1) or OFF (0)"
        ));
    }
    if feature == HMIG {
        if DSM.get().is_some() {
            dsm_for("jia_config").set_home_migration(on_off == 1);
        } else {
            HMIG_ASKED.store(on_off, Ordering::Relaxed);
        }
        return;
    }
    let n = match feature {
        ADWD => Notice::AdaptiveWrites,
        BROADCAST => Notice::Broadcast,
        LOADBAL => Notice::LoadBalance,
        WVEC => Notice::WriteVector,
        _ => die(&format!(
            "jia_config({feature}, {on_off}): unknown feature {feature} (HMIG 0, ADWD 1, BROADCAST 2, LOADBAL 3, WVEC 4)"
        )),
    };
    match on_off {
        0 => {}
        1 => notice(n),
        _ => die(&format!(
            "jia_config({feature}, {on_off}): the second argument is ON (1) or OFF (0)"
        )),
    }
}

/// This node's contiguous share of `first..=last` among `nodes` (node `me`): an equal share each,
/// the last node the remainder. `None` when the range is empty.
fn share(first: i64, last: i64, me: i64, nodes: i64) -> Option<(i64, i64)> {
    let count = last - first + 1;
    if count <= 0 {
        return None;
    }
    let each = count / nodes;
    let begin = first + me * each;
    let end = if me == nodes - 1 {
        last
    } else {
        begin + each - 1
    };
    Some((begin, end))
}

/// `void jia_divtask(int *begin, int *end)`: JIAJIA 2.1's work division. On entry `*begin` and
/// `*end` bound the whole iteration space (both included); on return, this node's contiguous
/// share: `(end - begin + 1) / nodes` iterations each, the last node taking the remainder. A node
/// whose share is empty gets `*begin > *end`.
///
/// # Safety
/// `begin` and `end` must point to ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn jia_divtask(begin: *mut c_int, end: *mut c_int) {
    if begin.is_null() || end.is_null() {
        die("jia_divtask: begin and end must point to ints");
    }
    let d = dsm_for("jia_divtask");
    // SAFETY: the caller passes pointers to two ints.
    let (b, e) = unsafe { (i64::from(*begin), i64::from(*end)) };
    let (nb, ne) = share(b, e, d.id() as i64, d.nodes() as i64).unwrap_or((e + 1, e));
    // SAFETY: as above; the share lies within [b, e + 1], so it fits an int.
    unsafe {
        *begin = nb as c_int;
        *end = ne as c_int;
    }
}

/// `void jia_loadcheck(void)`: JIAJIA 2.1 measured each node's speed here to rebalance
/// `jia_divtask`; the division here is static, so there is nothing to measure.
#[unsafe(no_mangle)]
pub extern "C" fn jia_loadcheck() {
    let _ = dsm_for("jia_loadcheck");
}

/// JIAJIA's wildcards for `jia_recv`: any sender, any tag.
const MSG_PROC_ALL: c_int = -1;
const MSG_TAG_ALL: c_int = -1;

fn length(len: c_int, buf: *const c_char, what: &str) -> usize {
    if len < 0 {
        die(&format!("{what}: length {len} is negative"));
    }
    if len > 0 && buf.is_null() {
        die(&format!("{what}: a null buffer of {len} bytes"));
    }
    len as usize
}

fn node_arg(n: c_int, what: &str, role: &str) -> usize {
    let nodes = dsm_for(what).nodes();
    if n < 0 || n as usize >= nodes {
        die(&format!(
            "{what}: {role} {n} is not a node of the job (nodes 0 to {})",
            nodes - 1
        ));
    }
    n as usize
}

/// `void jia_send(char *buf, int len, int topid, int tag)`: sends `len` bytes to node `topid`
/// with `tag`; returns at once (the message waits at the receiver for a `jia_recv`). Exported
/// by `sys` with the caller's address as `pc` (the race checker's line for the read of `buf`).
///
/// # Safety
/// `buf` must hold `len` bytes.
pub(crate) unsafe extern "C" fn jia_send_at(
    buf: *const c_char,
    len: c_int,
    topid: c_int,
    tag: c_int,
    pc: usize,
) {
    let n = length(len, buf, "jia_send");
    dsm_races::access(buf as usize, n, false, dsm_races::From::Code(pc));
    let to = node_arg(topid, "jia_send", "destination");
    let data = if n == 0 {
        &[][..]
    } else {
        // SAFETY: the caller passes len readable bytes (a fault on shared memory is served here,
        // in this thread, like any other access).
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) }
    };
    dsm_for("jia_send").send(to, tag, data);
}

/// `int jia_recv(char *buf, int len, int frompid, int tag)`: waits for the oldest message from
/// `frompid` (`MSG_PROC_ALL`: any node) with `tag` (`MSG_TAG_ALL`: any tag), copies it into
/// `buf`, and returns its length. A message longer than `len` ends the job with a message.
/// Exported by `sys` with the caller's address as `pc` (the race checker's line for the write
/// of `buf`).
///
/// # Safety
/// `buf` must have room for `len` bytes.
pub(crate) unsafe extern "C" fn jia_recv_at(
    buf: *mut c_char,
    len: c_int,
    frompid: c_int,
    tag: c_int,
    pc: usize,
) -> c_int {
    let n = length(len, buf, "jia_recv");
    let from = (frompid != MSG_PROC_ALL).then(|| node_arg(frompid, "jia_recv", "source"));
    let tag = (tag != MSG_TAG_ALL).then_some(tag);
    let buf = if n == 0 {
        &mut [][..]
    } else {
        // SAFETY: the caller passes room for len bytes.
        unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) }
    };
    let got = dsm_for("jia_recv").recv_into(from, tag, buf).len;
    dsm_races::access(buf.as_ptr() as usize, got, true, dsm_races::From::Code(pc));
    got as c_int
}

/// `void jia_bcast(char *buf, int len, int root)`: every node calls it; node `root`'s `len`
/// bytes at `buf` are copied into every node's `buf`. Exported by `sys` with the caller's
/// address as `pc` (the race checker's line for the root's read of `buf`, the others' write).
///
/// # Safety
/// `buf` must hold `len` bytes.
pub(crate) unsafe extern "C" fn jia_bcast_at(buf: *mut c_char, len: c_int, root: c_int, pc: usize) {
    let n = length(len, buf, "jia_bcast");
    let root = node_arg(root, "jia_bcast", "root");
    let d = dsm_for("jia_bcast");
    let at = buf as usize;
    if d.id() == root {
        dsm_races::access(at, n, false, dsm_races::From::Code(pc));
    }
    let buf = if n == 0 {
        &mut [][..]
    } else {
        // SAFETY: the caller passes len bytes.
        unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) }
    };
    d.bcast(root, buf);
    if d.id() != root {
        dsm_races::access(at, n, true, dsm_races::From::Code(pc));
    }
}

/// `jia_reduce`'s operations (JIAJIA 2.1's numbering): the type and the combination.
fn reduce_op(op: c_int) -> Option<(char, ReduceOp)> {
    let how = match op % 10 {
        0 => ReduceOp::Sum,
        1 => ReduceOp::Max,
        2 => ReduceOp::Min,
        _ => return None,
    };
    let ty = match op / 10 {
        0 => 'i',
        1 => 'f',
        2 => 'd',
        _ => return None,
    };
    (op >= 0).then_some((ty, how))
}

/// Reduces `cnt` values of type `T` read from `snd` into `rcv` (at the root); the race checker
/// sees the read of `snd` and the root's write of `rcv` at the caller's `pc`.
///
/// # Safety
/// `snd` holds `cnt` values of `T`; at the root `rcv` has room for as many (no alignment needed).
unsafe fn reduce_as<T: Reducible + Default>(
    snd: *const c_char,
    rcv: *mut c_char,
    cnt: usize,
    op: ReduceOp,
    root: usize,
    pc: usize,
) {
    let bytes = cnt * T::BYTES;
    dsm_races::access(snd as usize, bytes, false, dsm_races::From::Code(pc));
    // SAFETY: the caller passes cnt values at snd.
    let input = unsafe { std::slice::from_raw_parts(snd.cast::<u8>(), bytes) };
    let values: Vec<T> = input.chunks_exact(T::BYTES).map(T::get).collect();
    let d = dsm_for("jia_reduce");
    let mut out = vec![T::default(); cnt];
    d.reduce(&values, &mut out, op, root);
    if d.id() == root {
        let mut result = Vec::with_capacity(bytes);
        for v in out {
            v.put(&mut result);
        }
        // SAFETY: the caller passes room for cnt values at rcv on the root.
        unsafe { std::ptr::copy_nonoverlapping(result.as_ptr(), rcv.cast::<u8>(), bytes) };
        dsm_races::access(rcv as usize, bytes, true, dsm_races::From::Code(pc));
    }
}

/// `void jia_reduce(char *snd, char *rcv, int cnt, int op, int root)`: every node calls it; the
/// `cnt` values at each node's `snd` are combined element by element with `op` (`SUM_INT`,
/// `MAX_FLOAT`, `MIN_DOUBLE`...: `jia.h`), in node order, into `rcv` at node `root`. Other nodes'
/// `rcv` is not touched. Exported by `sys` with the caller's address as `pc` (the race
/// checker's line for the read of `snd` and the root's write of `rcv`).
///
/// # Safety
/// `snd` must hold `cnt` values of the operation's type, and `rcv` at the root room for as many.
pub(crate) unsafe extern "C" fn jia_reduce_at(
    snd: *const c_char,
    rcv: *mut c_char,
    cnt: c_int,
    op: c_int,
    root: c_int,
    pc: usize,
) {
    let Some((ty, how)) = reduce_op(op) else {
        die(&format!(
            "jia_reduce: unknown operation {op} (SUM/MAX/MIN: _INT 0-2, _FLOAT 10-12, _DOUBLE 20-22)"
        ));
    };
    if cnt < 0 {
        die(&format!("jia_reduce: count {cnt} is negative"));
    }
    let root = node_arg(root, "jia_reduce", "root");
    if cnt > 0 && (snd.is_null() || (dsm_for("jia_reduce").id() == root && rcv.is_null())) {
        die("jia_reduce: a null buffer");
    }
    let cnt = cnt as usize;
    // SAFETY: the caller's promise, for the type its operation names.
    unsafe {
        match ty {
            'i' => reduce_as::<i32>(snd, rcv, cnt, how, root, pc),
            'f' => reduce_as::<f32>(snd, rcv, cnt, how, root, pc),
            _ => reduce_as::<f64>(snd, rcv, cnt, how, root, pc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divtask_shares_cover_the_range_once_with_the_remainder_last() {
        for (first, last) in [(0, 99), (1, 10), (5, 5), (-3, 4), (0, 2)] {
            for nodes in 1..=7 {
                let mut covered = Vec::new();
                for me in 0..nodes {
                    if let Some((b, e)) = share(first, last, me, nodes) {
                        covered.extend(b..=e);
                        if me < nodes - 1 {
                            assert_eq!(e - b + 1, (last - first + 1) / nodes);
                        }
                    }
                }
                assert_eq!(
                    covered,
                    (first..=last).collect::<Vec<_>>(),
                    "{first}..={last} over {nodes}"
                );
            }
        }
        assert_eq!(share(3, 2, 0, 2), None);
    }

    #[test]
    fn reduce_ops_are_jiajias_numbers() {
        assert_eq!(reduce_op(0), Some(('i', ReduceOp::Sum)));
        assert_eq!(reduce_op(11), Some(('f', ReduceOp::Max)));
        assert_eq!(reduce_op(22), Some(('d', ReduceOp::Min)));
        for bad in [-1, 3, 13, 30, 9] {
            assert_eq!(reduce_op(bad), None, "{bad}");
        }
    }
}
