//! Signals, thinly: installing a SIGSEGV/SIGBUS handler and chaining to the one it replaced,
//! reading the fault's address and access from its context, errno, and the launcher's
//! interrupt flag. What the DSM's handler does lives in `crate::fault`; nothing here knows of it.

use std::sync::atomic::Ordering;

/// The signature of an `SA_SIGINFO` handler.
pub type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// A handler that was installed before ours, to chain to.
#[derive(Clone, Copy)]
pub struct Previous(libc::sigaction);

// SAFETY: a sigaction is plain data (a function pointer, flags and a mask); it is written once
// before any handler can read it and only read afterwards.
unsafe impl Sync for Previous {}
// SAFETY: as above, plain data.
unsafe impl Send for Previous {}

/// Installs `handler` for `sig` with `SA_SIGINFO | SA_ONSTACK` and an empty mask (the signal
/// itself stays blocked while it runs: a second fault in the handler is a bug, and the kernel
/// then ends the process); returns the action it replaced.
pub fn install(sig: libc::c_int, handler: Handler) -> std::io::Result<Previous> {
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
    Ok(Previous(old))
}

/// Passes a signal on to `prev` (the handler installed before ours), or, if that was the default
/// action or ignoring, restores the default and returns: the access faults again and the kernel
/// ends the process the usual way (core dump included). Async-signal-safe.
///
/// # Safety
///
/// Called from a SIGSEGV/SIGBUS handler with the `info` and `ctx` the kernel passed it.
pub unsafe fn chain(
    prev: Option<&Previous>,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    let Some(Previous(prev)) = prev else {
        return reset_default(sig);
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        reset_default(sig);
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this signature.
        let f: Handler = unsafe { std::mem::transmute(h) };
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

/// The faulting address of a SIGSEGV/SIGBUS.
///
/// # Safety
///
/// `info` is what the kernel passed to an `SA_SIGINFO` handler.
pub unsafe fn fault_addr(info: *mut libc::siginfo_t) -> usize {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    unsafe { (*info).si_addr() as usize }
}

/// Whether the faulting access was a write, from the x86-64 page-fault error code.
///
/// # Safety
///
/// `ctx` is null or what the kernel passed to an `SA_SIGINFO` handler.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub unsafe fn fault_is_write(ctx: *mut libc::c_void) -> Option<bool> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid ucontext_t as the third argument.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    let err = uc.uc_mcontext.gregs[libc::REG_ERR as usize];
    Some(err & 2 != 0)
}

/// Whether the faulting access was a write: not known on this architecture.
///
/// # Safety
///
/// None needed; `unsafe` as on x86-64.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub unsafe fn fault_is_write(_ctx: *mut libc::c_void) -> Option<bool> {
    None
}

/// This thread's errno. Async-signal-safe.
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's errno. Async-signal-safe.
pub fn set_errno(value: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value };
}

/// Ends the process at once with `status` (`_exit`: no atexit handlers, no stdio flushing, no
/// lock). Async-signal-safe.
pub fn exit_now(status: i32) -> ! {
    // SAFETY: _exit(2) is async-signal-safe, touches no memory of ours and does not return.
    unsafe { libc::_exit(status) }
}

/// Calls `f` when the process exits (`exit`, or a return from `main`), before the handlers
/// registered earlier.
pub fn at_exit(f: extern "C" fn()) -> std::io::Result<()> {
    // SAFETY: registers a plain function with no arguments; atexit(3) copies the pointer.
    if unsafe { libc::atexit(f) } != 0 {
        return Err(std::io::Error::other("atexit: no room for another handler"));
    }
    Ok(())
}

/// Calls `child` in the child of every later fork, before fork returns there (only
/// async-signal-safe work is allowed in it).
pub fn at_fork_child(child: extern "C" fn()) -> std::io::Result<()> {
    // SAFETY: registers a child handler; the caller's `child` keeps to the rule above.
    let r = unsafe { libc::pthread_atfork(None, None, Some(child)) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
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
