//! What the program asks of the DSM's signals and shared memory through the C library's calls,
//! which libjia defines in its place (`sigaction`, `signal`, `mprotect`, `munmap`...): the DSM's
//! fault handler stays first, with the program's behind it, and shared memory's protection and
//! mapping stay the DSM's. Everything here is async-signal-safe, as the calls it stands for are.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{INSTALLED, chained, region};
use crate::door::end::{Line, rank};
use crate::door::flags;
use crate::sys::signals;

/// The program's `sigaction` for `sig` once the DSM's handler is installed (libjia's `sigaction`,
/// `signal`, `sigset`... call it): for SIGSEGV and SIGBUS the DSM's handler stays in place, and
/// `act` (if given) becomes the action it passes faults outside shared memory to; `old` (if
/// given) receives the action the program had before, as it would without the DSM (the one it
/// installed last, or what was there before `jia_init`). Returns whether it did so; `false` for
/// other signals, and before the DSM's handler is installed: the call is the C library's then.
/// Async-signal-safe, as `sigaction` is.
pub fn program_sigaction(
    sig: libc::c_int,
    act: Option<&libc::sigaction>,
    old: Option<&mut libc::sigaction>,
) -> bool {
    if let Some(a) = act {
        note_handler(sig, a);
    }
    if (sig != libc::SIGSEGV && sig != libc::SIGBUS) || !INSTALLED.load(Ordering::SeqCst) {
        return false;
    }
    let before = chained(sig).replace(act);
    if let Some(old) = old {
        *old = before;
    }
    true
}

/// The program is C, linked with libjia (its `jia_init` says so): a SIGSEGV handler chained to
/// is then the program's own. A Rust program's is the standard library's stack-overflow
/// reporter, installed before `main`, which takes no fault in the shared region.
static C_PROGRAM: AtomicBool = AtomicBool::new(false);

/// libjia's `jia_init`: the program is C.
pub fn note_c_program() {
    C_PROGRAM.store(true, Ordering::Relaxed);
}

/// Whether the program is C (see [`note_c_program`]). Async-signal-safe.
pub(crate) fn is_c() -> bool {
    C_PROGRAM.load(Ordering::Relaxed)
}

/// Notes a handler the program installs for `sig`: one for an asynchronous signal makes the
/// node's calls hold asynchronous signals off while they hold its state (see `crate::call`).
pub fn note_handler(sig: libc::c_int, action: &libc::sigaction) {
    if !signals::SYNCHRONOUS.contains(&sig)
        && signals::runs_a_function(action)
        && !signals::is_runtime_handler(action)
    {
        flags::ASYNC_HANDLERS.store(true, Ordering::Relaxed);
    }
}

/// Looks at every signal's action for a handler of an asynchronous signal (installed before
/// `init`, or by a program that libjia does not stand between: a Rust program, a raw system
/// call).
pub(super) fn note_async_handlers() {
    if flags::ASYNC_HANDLERS.load(Ordering::Relaxed) {
        return;
    }
    for sig in 1..=signals::MAX_SIGNAL {
        if let Some(action) = signals::current_action(sig) {
            note_handler(sig, &action);
        }
    }
}

/// The errno a refused call returns: `EPERM`, as Linux's own answer to `mprotect`, `munmap`,
/// `mremap` and discarding `madvise` on memory sealed by `mseal(2)`, which is what shared memory
/// is to the program: the arguments are valid (not `EINVAL`); the operation is not permitted.
pub const REFUSED_ERRNO: i32 = libc::EPERM;

/// Whether the program's `call` on `[addr, addr + len)` (with `detail`, its other arguments as
/// the program wrote them, if not empty) must be refused because the range overlaps the shared
/// region: the DSM sets its protection page by page (that is how it sees reads and writes) and
/// owns its mapping. If so, says so on standard error in one `write(2)`, naming the call, the
/// range and what to do instead, sets errno to [`REFUSED_ERRNO`] and returns `true`: the call is
/// to fail with -1 (or `MAP_FAILED`). Async-signal-safe.
pub fn refused_on_shared(call: &str, addr: usize, len: usize, detail: &str) -> bool {
    let (start, end) = region();
    let last = addr.saturating_add(len);
    if start == end || len == 0 || last <= start || addr >= end {
        return false;
    }
    let mut line = Line::default();
    line.push(b"dsm node ");
    line.push_decimal(rank());
    line.push(b": ");
    line.push(call.as_bytes());
    line.push(b"(");
    line.push_hex(addr);
    line.push(b", ");
    line.push_decimal_usize(len);
    if !detail.is_empty() {
        line.push(b", ");
        line.push(detail.as_bytes());
    }
    line.push(b") refused with EPERM: [");
    line.push_hex(addr);
    line.push(b", ");
    line.push_hex(last);
    line.push(b") overlaps the DSM's shared memory [");
    line.push_hex(start);
    line.push(b", ");
    line.push_hex(end);
    line.push(
        b"), whose protection and mapping only the DSM may change (that is how it sees reads \
          and writes); read and write shared memory as it is, and use memory of your own \
          (malloc, mmap) for anything else",
    );
    crate::sys::write_stderr(line.ended());
    signals::set_errno(REFUSED_ERRNO);
    true
}
