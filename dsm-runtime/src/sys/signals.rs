//! Signals, thinly: installing a SIGSEGV/SIGBUS handler and chaining to the program's, reading
//! the fault's address and access from its context, errno, signal masks, and the launcher's
//! interrupt flag. What the DSM's handler does lives in `crate::fault`; nothing here knows of it.
//!
//! The runtime's own `sigaction` calls go to the C library's `__sigaction`, never to the
//! `sigaction` symbol: in `libjia` that symbol is libjia's own (it keeps the DSM's handler first,
//! see `crate::fault`), and the runtime must reach the kernel's table itself.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// The signature of an `SA_SIGINFO` handler. It may unwind: a thread whose cancellation is
/// asynchronous is unwound from the handler when it puts its cancellation back
/// ([`CancellationHeld`], `crate::door::context::SignalContext`), through the handler's frames and the signal's into the code it
/// interrupted, as the C library's own cancellation handler does.
pub type Handler = extern "C-unwind" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// The signals a fault raises: never blocked by the runtime (a synchronous signal raised while
/// blocked ends the process without running any handler).
pub const SYNCHRONOUS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// The highest signal number (glibc's `NSIG - 1`).
pub const MAX_SIGNAL: libc::c_int = 64;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe extern "C" {
    /// glibc's `sigaction` under the name no program or library defines (libjia defines
    /// `sigaction` itself).
    fn __sigaction(
        sig: libc::c_int,
        act: *const libc::sigaction,
        old: *mut libc::sigaction,
    ) -> libc::c_int;
}

/// `sigaction(2)` through the C library's own entry (see the module doc).
///
/// # Safety
///
/// `act` and `old` are null or point to live sigaction structs; a handler in `act` has the
/// signature its flags say.
pub unsafe fn raw_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: the caller's promise; __sigaction is glibc's sigaction.
    return unsafe { __sigaction(sig, act, old) };
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    // SAFETY: the caller's promise.
    return unsafe { libc::sigaction(sig, act, old) };
}

/// The disposition of `sig` now (`None` for a signal the C library keeps to itself).
pub fn current_action(sig: libc::c_int) -> Option<libc::sigaction> {
    // SAFETY: a zeroed sigaction is valid plain data to receive the action.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (no new action) into a live struct.
    (unsafe { raw_sigaction(sig, std::ptr::null(), &mut now) } == 0).then_some(now)
}

/// The mask the DSM's handler runs with: every signal but the synchronous ones (and those the C
/// library keeps to itself, which `sigfillset` leaves out), so that no asynchronous signal's
/// handler runs in the middle of a fault.
pub fn asynchronous_signals() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is valid storage; sigfillset and sigdelset write within it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for s in SYNCHRONOUS {
            libc::sigdelset(&mut set, s);
        }
        set
    }
}

/// Adds glibc's cancellation signal (32), which `sigfillset` and `sigaddset` leave out, to `set`:
/// blocked while the DSM's handler runs, an asynchronous cancellation waits for the handler to
/// put it back ([`CancellationHeld`], which restores the interrupted code's mask before it acts)
/// or to return, instead of acting at the handler's first instructions, before it holds
/// cancellation off, and leaving the thread's cleanup handlers with the handler's mask (SIGSEGV
/// blocked: a touch of shared memory there ended the node).
fn add_cancellation_signal(set: &mut libc::sigset_t) {
    const SIGCANCEL: u32 = 32;
    let first = (set as *mut libc::sigset_t).cast::<libc::c_ulong>();
    // SAFETY: a sigset_t is an array of words, signal n at bit n - 1 counted from the first
    // word's lowest (the kernel's layout, which glibc's is); `set` is a live, exclusive borrow.
    unsafe { *first |= 1 << (SIGCANCEL - 1) };
}

/// Installs `handler` for `sig` with `SA_SIGINFO | SA_ONSTACK` and every asynchronous signal
/// blocked while it runs ([`asynchronous_signals`], and the C library's cancellation signal:
/// [`add_cancellation_signal`]; `sig` itself is blocked too, as without
/// `SA_NODEFER`: a second fault of the same kind in the handler is a bug, and the kernel then
/// ends the process); returns the action it replaced.
pub fn install(sig: libc::c_int, handler: Handler) -> std::io::Result<libc::sigaction> {
    // SAFETY: sigaction structs are plain data; zeroed is a valid starting value.
    let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
    new.sa_sigaction = handler as *const () as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    new.sa_mask = asynchronous_signals();
    add_cancellation_signal(&mut new.sa_mask);
    // SAFETY: as above, zeroed sigaction is valid plain data to receive the old action.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live sigaction structs; `handler` has the SA_SIGINFO signature.
    if unsafe { raw_sigaction(sig, &new, &mut old) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(old)
}

/// Whether `action` is `handler`.
pub fn is_handler(action: &libc::sigaction, handler: Handler) -> bool {
    action.sa_sigaction == handler as *const () as usize
}

/// Whether `action` runs a function (not the default action, not ignoring).
pub fn runs_a_function(action: &libc::sigaction) -> bool {
    action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN
}

/// Words of a sigaction, for [`Chained`].
const ACTION_WORDS: usize = std::mem::size_of::<libc::sigaction>().div_ceil(8);

/// The action a handler chains to, which the program may replace at any time (libjia's
/// `sigaction`) while handlers on other threads read it: a sequence lock over plain words, so a
/// reader in a signal handler neither locks nor allocates. A writer blocks every signal on its
/// thread while it writes (a handler there would otherwise wait for it forever), and writers take
/// turns on the sequence number. All zeros (the starting value) is the default action.
pub struct Chained {
    /// Even: stable; odd: a writer is at work.
    seq: AtomicU32,
    words: [AtomicU64; ACTION_WORDS],
}

impl Default for Chained {
    fn default() -> Chained {
        Chained::new()
    }
}

impl Chained {
    /// The default action.
    pub const fn new() -> Chained {
        Chained {
            seq: AtomicU32::new(0),
            words: [const { AtomicU64::new(0) }; ACTION_WORDS],
        }
    }

    /// The action now. Async-signal-safe (atomics; spins while a writer on another thread
    /// writes, a few stores).
    pub fn load(&self) -> libc::sigaction {
        let mut spins = 0u32;
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let mut buf = [0u64; ACTION_WORDS];
                for (b, w) in buf.iter_mut().zip(&self.words) {
                    *b = w.load(Ordering::Relaxed);
                }
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    return from_words(&buf);
                }
            }
            spins += 1;
            if spins % 64 == 0 {
                super::sched_yield();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Replaces the action with `new` (if given) and returns the one it replaces, as one step
    /// against other writers. Async-signal-safe (system calls and atomics).
    pub fn replace(&self, new: Option<&libc::sigaction>) -> libc::sigaction {
        let _blocked = BlockedSignals::all();
        let mut spins = 0u32;
        let start = loop {
            let s = self.seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && self
                    .seq
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                break s;
            }
            spins += 1;
            if spins % 64 == 0 {
                super::sched_yield();
            } else {
                std::hint::spin_loop();
            }
        };
        // The odd number is seen before any word changes.
        fence(Ordering::Release);
        let mut old = [0u64; ACTION_WORDS];
        for (o, w) in old.iter_mut().zip(&self.words) {
            *o = w.load(Ordering::Relaxed);
        }
        if let Some(new) = new {
            for (w, v) in self.words.iter().zip(to_words(new)) {
                w.store(v, Ordering::Relaxed);
            }
        }
        self.seq.store(start + 2, Ordering::Release);
        from_words(&old)
    }
}

fn to_words(action: &libc::sigaction) -> [u64; ACTION_WORDS] {
    let mut buf = [0u64; ACTION_WORDS];
    // SAFETY: the buffer has room for a whole sigaction (ACTION_WORDS rounds up); both are plain
    // data and do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (action as *const libc::sigaction).cast::<u8>(),
            buf.as_mut_ptr().cast::<u8>(),
            std::mem::size_of::<libc::sigaction>(),
        );
    }
    buf
}

fn from_words(buf: &[u64; ACTION_WORDS]) -> libc::sigaction {
    // SAFETY: the buffer holds at least a sigaction's bytes, copied from one (or zeros, the
    // default action); every bit pattern of its fields is valid (integers, a bit set, and an
    // optional function pointer, for which zero is `None`).
    unsafe { std::mem::transmute_copy::<[u64; ACTION_WORDS], libc::sigaction>(buf) }
}

/// Signals blocked on this thread until dropped (then the mask it had comes back).
pub struct BlockedSignals {
    old: libc::sigset_t,
}

impl BlockedSignals {
    /// Blocks every signal that can be blocked. Async-signal-safe.
    pub fn all() -> BlockedSignals {
        // SAFETY: a zeroed sigset_t is valid storage; sigfillset writes within it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::sigfillset(&mut set) };
        BlockedSignals::these(&set)
    }

    /// Blocks the asynchronous signals ([`asynchronous_signals`]). Async-signal-safe.
    pub fn asynchronous() -> BlockedSignals {
        BlockedSignals::these(&asynchronous_signals())
    }

    fn these(set: &libc::sigset_t) -> BlockedSignals {
        // SAFETY: a zeroed sigset_t is valid storage for the old mask.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both sets are live; SIG_BLOCK only adds to this thread's mask.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, set, &mut old) };
        BlockedSignals { old }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: puts back the mask saved at creation, a live set.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Whether the signal was sent (`kill`, `raise`, `sigqueue`) rather than raised by a fault.
///
/// # Safety
///
/// `info` is what the kernel passed to an `SA_SIGINFO` handler.
pub unsafe fn was_sent(info: *mut libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    unsafe { (*info).si_code <= 0 }
}

/// Passes a signal on to `action` (the program's handler, which the DSM's handler chains to), as
/// the kernel would have run it: with the mask it asks for added to the interrupted code's
/// (and the signal itself, unless `SA_NODEFER`), reset to the default action first if it asks
/// (`SA_RESETHAND`). If the action is the default or ignoring, restores the default (calling
/// `before_default` first) and returns: the access faults again and the kernel ends the process
/// the usual way (core dump included); a signal that was sent, not raised by a fault, is sent
/// again, to be delivered with the default action once the handler returns (or, ignored, is
/// dropped). Async-signal-safe.
///
/// # Safety
///
/// Called from a SIGSEGV/SIGBUS handler with the `info` and `ctx` the kernel passed it.
pub unsafe fn chain(
    store: &Chained,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    before_default: impl Fn(),
) {
    let action = store.load();
    let h = action.sa_sigaction;
    if !runs_a_function(&action) {
        // SAFETY: the caller's promise.
        let sent = unsafe { was_sent(info) };
        if h == libc::SIG_DFL || !sent {
            before_default();
            reset_default(sig);
            if sent {
                // SAFETY: raise(3) takes a plain signal number; blocked while this handler runs,
                // it is delivered when the handler returns.
                unsafe { libc::raise(sig) };
            }
        }
        return;
    }
    if action.sa_flags & libc::SA_RESETHAND != 0 {
        // SAFETY: zeroed is the default action.
        let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        store.replace(Some(&dfl));
    }
    // SAFETY: the caller's promise: `ctx` is null or the kernel's ucontext.
    let mut mask = unsafe { interrupted_mask(ctx) };
    for s in 1..=MAX_SIGNAL {
        // SAFETY: both sets are live; the calls read and write within them.
        unsafe {
            if libc::sigismember(&action.sa_mask, s) == 1 {
                libc::sigaddset(&mut mask, s);
            }
        }
    }
    if action.sa_flags & libc::SA_NODEFER == 0 {
        // SAFETY: as above.
        unsafe { libc::sigaddset(&mut mask, sig) };
    }
    // SAFETY: a live set; this thread's mask until the handler returns (sigreturn then puts back
    // the interrupted code's).
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut()) };
    if action.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the handler was installed with SA_SIGINFO, so it has this signature.
        let f: Handler = unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the handler was installed without SA_SIGINFO: a one-argument handler.
        let f: extern "C-unwind" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// The signal mask of the code a handler interrupted (this thread's mask now if unknown).
///
/// # Safety
///
/// `ctx` is null or what the kernel passed to an `SA_SIGINFO` handler.
unsafe fn interrupted_mask(ctx: *mut libc::c_void) -> libc::sigset_t {
    if ctx.is_null() {
        // SAFETY: a zeroed sigset_t is valid storage; a query of this thread's mask.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            return now;
        }
    }
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid ucontext_t, whose mask
    // `interrupted_mask_at` locates.
    unsafe { *interrupted_mask_at(ctx) }
}

fn reset_default(sig: libc::c_int) {
    // SAFETY: zeroed sigaction is valid; SIG_DFL as the handler restores the default action.
    unsafe {
        let dfl: libc::sigaction = std::mem::zeroed();
        raw_sigaction(sig, &dfl, std::ptr::null_mut());
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

pub use dsm_races::CancellationHeld;

/// Where the signal mask of the code a handler interrupted lies in its context `ctx` (the
/// `ucontext_t` an `SA_SIGINFO` handler is given; null for a null `ctx`): live until the
/// handler returns. Async-signal-safe.
pub fn interrupted_mask_at(ctx: *mut libc::c_void) -> *const libc::sigset_t {
    if ctx.is_null() {
        return std::ptr::null();
    }
    // The field's address, computed without reading or referencing anything.
    ctx.cast::<libc::ucontext_t>()
        .wrapping_byte_add(std::mem::offset_of!(libc::ucontext_t, uc_sigmask))
        .cast::<libc::sigset_t>()
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

/// The signals that end a launcher by default and that [`catch_interrupts`] catches instead.
pub const INTERRUPTS: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Records the signals that would end the process ([`INTERRUPTS`]: SIGINT, SIGTERM, SIGHUP,
/// SIGQUIT, SIGUSR1, SIGUSR2) instead of dying (for the launcher, which then ends its nodes and
/// says why), but those ignored already; returns the flag to poll: the signal number once one
/// arrived.
pub fn catch_interrupts() -> &'static std::sync::atomic::AtomicI32 {
    for sig in INTERRUPTS {
        // An ignored signal stays ignored (`nohup dsmrun ...`), for the nodes too.
        if current_action(sig).is_some_and(|a| a.sa_sigaction == libc::SIG_IGN) {
            continue;
        }
        // SAFETY: zeroed sigaction is valid plain data; the handler only stores to an atomic,
        // which is async-signal-safe.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_interrupt as *const () as usize;
            libc::sigemptyset(&mut act.sa_mask);
            raw_sigaction(sig, &act, std::ptr::null_mut());
        }
    }
    &INTERRUPTED
}

/// Runs `cleanup`, then ends the process by the signal, when one of `INTERRUPTS` (but those
/// ignored already: `nohup`) arrives, instead of dying at once: a tool's temporary files go with
/// it. The signals are blocked in the calling thread (and so in the threads it starts later; a
/// child process starts with none blocked) and a thread of its own waits for them. Call it once,
/// before starting other threads.
pub fn clean_up_on_interrupt(cleanup: fn()) -> std::io::Result<()> {
    // SAFETY: a zeroed sigset_t is valid storage, filled by sigemptyset/sigaddset; blocking
    // signals in this thread changes only its mask.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in INTERRUPTS {
            if current_action(sig).is_none_or(|a| a.sa_sigaction != libc::SIG_IGN) {
                libc::sigaddset(&mut set, sig);
            }
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::Builder::new()
        .name("interrupts".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is a valid signal set, blocked in every thread of the process but
            // for those started before this call (none, as documented); sigwait writes `sig`.
            while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
            cleanup();
            die_of(sig)
        })
        .map(|_| ())
}

/// Ends the process by `sig` with its default action (a tool that caught it with
/// `catch_interrupts` or `clean_up_on_interrupt` and has cleaned up), so that its parent sees
/// the signal; with status 128 + `sig` if the signal does not end it.
pub fn die_of(sig: libc::c_int) -> ! {
    reset_default(sig);
    // SAFETY: a zeroed sigset_t with `sig` added; unblocking it in this thread and sending it
    // to the process take plain integers and that set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    exit_now(128 + sig)
}

/// Whether `action` runs one of the runtime's own handlers for asynchronous signals (the
/// launcher's [`catch_interrupts`]), which never touch shared memory.
pub fn is_runtime_handler(action: &libc::sigaction) -> bool {
    action.sa_sigaction == on_interrupt as *const () as usize
}

/// The signal's name (`SIGHUP`), or `signal N` for one without a usual name.
pub fn name(sig: libc::c_int) -> String {
    let known = [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
    ];
    known
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| format!("signal {sig}"), |(_, name)| (*name).to_owned())
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
    // SAFETY: zeroed is the default action; setting the disposition of a plain signal.
    unsafe {
        let dfl: libc::sigaction = std::mem::zeroed();
        raw_sigaction(libc::SIGPIPE, &dfl, std::ptr::null_mut());
    }
}
