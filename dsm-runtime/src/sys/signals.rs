//! The SIGSEGV/SIGBUS handler: classify, post, wait.
//!
//! Installed once with `SA_SIGINFO` (we need the faulting address and the register context) and
//! `SA_ONSTACK` (a stack overflow must still find a stack to run the chained handler on: Rust's
//! runtime gives every thread an alternate signal stack). `SA_NODEFER` is *not* set: a second fault
//! while handling one is a bug, and the kernel then kills the process as it should.
//!
//! A fault inside the shared region is resolved on this thread if the node's service state is
//! free (`service::drive_fault`: the handler runs the protocol and the transport itself until the
//! page is in); otherwise it is posted to the service thread through this thread's slot and the
//! thread sleeps until the page is accessible. Then the handler returns and the faulting
//! instruction runs again. A fault anywhere else goes to the handler that was installed before
//! ours (Rust's stack-overflow reporter, or the default action, which ends the process as usual).
//! Only the driving path allocates, takes a lock (by `try_lock`) or touches the network; see
//! `drive_fault` for why that is sound in this handler.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::slots;
use crate::sys::write_stderr;

static REGION_START: AtomicUsize = AtomicUsize::new(0);
static REGION_END: AtomicUsize = AtomicUsize::new(0);

/// The shared region's application view, `[start, end)` (empty before `install`).
pub fn region() -> (usize, usize) {
    (
        REGION_START.load(Ordering::Relaxed),
        REGION_END.load(Ordering::Relaxed),
    )
}

struct PrevActions {
    segv: libc::sigaction,
    bus: libc::sigaction,
}

// SAFETY: a sigaction is plain data (a function pointer, flags and a mask); it is written once
// before any handler can read it and only read afterwards.
unsafe impl Sync for PrevActions {}
// SAFETY: as above, plain data.
unsafe impl Send for PrevActions {}

static PREV: OnceLock<PrevActions> = OnceLock::new();

/// Result word of a completed fault: the page is accessible.
pub(crate) const FAULT_OK: u64 = 0;
/// Result word of a completed fault: the address is not allocated; behave like a plain segfault.
pub(crate) const FAULT_UNALLOCATED: u64 = 1;

/// Installs the handler for faults in `[start, start + len)`. Idempotent for the process.
pub fn install(start: usize, len: usize) -> std::io::Result<()> {
    REGION_START.store(start, Ordering::SeqCst);
    REGION_END.store(start + len, Ordering::SeqCst);
    if PREV.get().is_some() {
        return Ok(());
    }
    let segv = replace(libc::SIGSEGV)?;
    let bus = replace(libc::SIGBUS)?;
    let _ = PREV.set(PrevActions { segv, bus });
    // SAFETY: registers a child handler that only stores to an atomic (fork's child runs it
    // before fork returns, where only async-signal-safe work is allowed).
    let r = unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}

fn replace(sig: libc::c_int) -> std::io::Result<libc::sigaction> {
    // SAFETY: sigaction structs are plain data; zeroed is a valid starting value.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler as *const () as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: sa_mask is a live sigset_t owned by `new`.
    unsafe { libc::sigemptyset(&mut new.sa_mask) };
    // SAFETY: as above, zeroed sigaction is valid plain data to receive the old action.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live sigaction structs; `handler` has the SA_SIGINFO signature.
    if unsafe { libc::sigaction(sig, &new, &mut old) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(old)
}

/// Whether the faulting access was a write, from the x86-64 page-fault error code.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn is_write(ctx: *mut libc::c_void) -> Option<bool> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid ucontext_t as the third argument.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    let err = uc.uc_mcontext.gregs[libc::REG_ERR as usize];
    Some(err & 2 != 0)
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn is_write(_ctx: *mut libc::c_void) -> Option<bool> {
    None
}

/// Set in a child forked from a node (`pthread_atfork`): its faults are not served.
static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn in_forked_child() {
    FORKED.store(true, Ordering::Relaxed);
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let start = REGION_START.load(Ordering::Relaxed);
    let end = REGION_END.load(Ordering::Relaxed);
    if addr < start || addr >= end {
        chain(sig, info, ctx);
        return;
    }
    if slots::IS_SERVICE.with(|s| s.get()) {
        write_stderr(b"dsm: fatal: the service thread faulted on shared memory (a runtime bug)\n");
        std::process::abort();
    }
    if FORKED.load(Ordering::Relaxed) {
        // The protocol's state was copied into this child, but the service thread, the
        // connections and the homes' records of this node are the parent's: running it here
        // would drive the parent's protocol from a stale copy and hang both.
        write_stderr(
            b"dsm: fatal: a process forked from a DSM node touched a shared page it does not hold: \
              a forked child can read and write only what its parent held at the fork\n",
        );
        std::process::abort();
    }
    if crate::service::EXITED.load(Ordering::SeqCst) {
        // Waiting would hang: no service thread, no connection to the homes.
        write_stderr(
            b"dsm: fatal: a shared page not held here was touched after this node left the job \
              (after jia_exit / Dsm::exit)\n",
        );
        std::process::abort();
    }
    let Some(slot) = slots::my_slot() else {
        write_stderr(
            b"dsm: fatal: more threads use shared memory than the runtime has slots for\n",
        );
        std::process::abort();
    };
    // Without the error code (other architectures), ask for write access: always correct, at
    // worst a twin made early.
    let op = match is_write(ctx) {
        Some(false) => slots::OP_FAULT_READ,
        _ => slots::OP_FAULT_WRITE,
    };
    let page = ((addr - start) / dsm_core::PAGE_SIZE) as u64;
    // Fast paths: a write to a home page kept read-only only to see writes, or a read of a
    // prefetched page: open it here and tell the service thread (no wait). A read opens the
    // prefetched pages that follow it too, in the same mprotect: a thread walking through a
    // prefetched window takes one fault, not one per page.
    if let Some(write) = is_write(ctx) {
        if crate::fastpath::claim(page as usize, write) {
            let run = if write {
                1
            } else {
                1 + crate::fastpath::claim_following(page as usize)
            };
            let page_addr = start + page as usize * dsm_core::PAGE_SIZE;
            let prot = if write {
                crate::sys::Protection::ReadWrite
            } else {
                crate::sys::Protection::Read
            };
            if crate::sys::mprotect(page_addr, run * dsm_core::PAGE_SIZE, prot).is_err() {
                write_stderr(b"dsm: fatal: mprotect failed in the fault handler\n");
                std::process::abort();
            }
            // The pages after the first were claimed only if the queue had room for them.
            for p in page as usize + 1..page as usize + run {
                crate::fastpath::opened_along(p);
            }
            if crate::fastpath::opened(page as usize, write) {
                slots::wake_service();
                return;
            }
            // Queue full: the slow path does the same work again (harmlessly) and reports it.
        }
    }
    // Drive the node from here if we can (no hand-off to the service thread and back), else post.
    crate::trace::fault(page);
    if op == slots::OP_FAULT_WRITE {
        crate::trace::stamp(page, crate::trace::Step::Write);
    }
    let result = crate::service::drive_fault(slot, op, page)
        .unwrap_or_else(|| slots::post_and_wait(slot, op, page));
    crate::trace::stamp(page, crate::trace::Step::Resumed);
    if result != FAULT_OK {
        // Not allocated: a wild access in the region. Behave as if we were not here.
        chain(sig, info, ctx);
    }
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = PREV.get() else {
        return reset_default(sig);
    };
    let prev = if sig == libc::SIGBUS {
        &prev.bus
    } else {
        &prev.segv
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Restore the default action and return: the access faults again and the kernel ends the
        // process the usual way (core dump included).
        reset_default(sig);
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous handler was installed without SA_SIGINFO: a one-argument handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

fn reset_default(sig: libc::c_int) {
    // SAFETY: zeroed sigaction is valid; SIG_DFL as the handler restores the default action.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
    }
}

static INTERRUPTED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn on_interrupt(sig: libc::c_int) {
    INTERRUPTED.store(sig, Ordering::SeqCst);
}

/// Records SIGINT and SIGTERM instead of dying (for the launcher, which then ends its nodes);
/// returns the flag to poll: the signal number once one arrived.
pub fn catch_interrupts() -> &'static std::sync::atomic::AtomicI32 {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: zeroed sigaction is valid plain data; the handler only stores to an atomic,
        // which is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_interrupt as *const () as usize;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
    &INTERRUPTED
}

/// Sends `sig` to process `pid`.
pub fn kill(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) takes plain integers; a stale pid at worst gets ESRCH.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// Lets SIGPIPE end the process, as it does a C program: a node whose standard output is closed
/// (`dsmrun ... | head`) then ends quietly by that signal, which the launcher reports, instead of
/// failing its next print with a panic and a backtrace (Rust ignores SIGPIPE by default).
pub fn default_sigpipe() {
    // SAFETY: setting the default disposition of a plain signal.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}
