//! The fault path: everything that runs in signal context.
//!
//! A thread that touches a shared page it does not hold takes a SIGSEGV. [`handler`] classifies
//! the fault and does one of three things (a SIGBUS in the shared region, memory its file cannot
//! give, is said and passed on as in 1):
//!
//! 1. **Not ours** (sent by `kill` or `raise`, outside the shared region, or an address nothing
//!    was allocated at): chain to the program's handler ([`CHAINED`]: the one installed before
//!    ours, such as Rust's stack-overflow reporter, or the one a C program installed since
//!    through libjia's `sigaction` and `signal`, see [`program`]), run as the kernel would have
//!    run it, or to the default action.
//! 2. **Resolve** at once ([`fastpath`]): a write to a home page kept read-only only to see
//!    writes, or a read of a prefetched page. The handler opens the page (`mprotect`), queues a
//!    report for the service thread, and returns.
//! 3. **Drive** ([`drive`]) or **post** (the door's slots): if the node's service state is free, the
//!    handler runs the node itself on a stack of its own until its page is in (sends the GETP,
//!    polls the transport, handles whatever comes); otherwise it posts the fault in its slot and
//!    sleeps on a futex until the service thread completes it.
//!
//! The DSM's handler stays installed for the life of the process: a C program's `sigaction` and
//! `signal` for SIGSEGV and SIGBUS reach [`program::program_sigaction`] (libjia defines them),
//! and the service thread checks every second that nothing replaced it behind libjia's back (a
//! Rust program, a raw system call), ending the node with a message if something did
//! ([`watch_handlers`]): a thread would otherwise fault forever in the program's handler.
//!
//! # The contract of signal context
//!
//! Everything in this module runs in signal context. What runs from [`handler`] (this module,
//! the door, and the core work of `service` when a handler drives) keeps to these rules, which
//! make running it in a SIGSEGV handler sound:
//!
//! - **Synchronous only, asynchronous signals held off.** The signal is raised by the faulting
//!   instruction itself, an access to the shared region. The handler is installed with every
//!   asynchronous signal in its mask (all but SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP and
//!   SIGSYS), so no handler of the program's runs in the middle of a fault: a timer's SIGALRM
//!   waits until the fault is served (microseconds; a fault that waits for an unreachable home
//!   holds them up to `peer_timeout_ms`), and the runtime's threads block those signals
//!   throughout, so they go to the program's threads. The runtime's locks and the standard
//!   library never touch the region, so the handler never interrupts them half-way: it may
//!   allocate and take the service state's mutex (by `try_lock` only, never waiting on it).
//! - **A handler of the program's may fault too.** An asynchronous signal's handler that touches
//!   shared memory takes its fault between two of its thread's instructions, as any code does.
//!   If the thread was in a DSM call (`door::context::in_call`), the call holds its slot and
//!   may hold the allocator's locks: the fault is posted on a spare slot, never driven. A call
//!   that holds the node's state holds asynchronous signals off meanwhile once the program is
//!   known to have handlers for them (`flags::ASYNC_HANDLERS`: installed through libjia, found
//!   by the service thread's look every second, or met at such a fault); if one gets through
//!   anyway, its fault could never be served, and the handler ends the node with a message
//!   rather than wait. A handler of the program's that faults while its thread is inside the
//!   allocator can deadlock when the fault is driven (it allocates), as calling `malloc` from
//!   that handler would.
//! - **No exit.** `std::process::exit` runs atexit handlers and flushes stdio, whose lock the
//!   interrupted code may hold. A fatal error in signal context (`door::end`) writes its
//!   message with one `write(2)` and leaves with `_exit` and the status it chose: the launcher
//!   sees that status (86 for a node that ends because another failed), never a signal.
//! - **No logging, no file I/O.** The logger defers records made in signal context to the service
//!   thread ([`crate::logging`]); effects that write files (the job's statistics) and the launcher
//!   exchanges that follow a lost peer are always left to the service thread
//!   (`Service::deferred`), wherever the core work runs: a driving handler hands its wait back
//!   when it meets one.
//! - **No unbounded wait.** The handler waits for the state at most `HANDOFF_WAIT`, drives at most
//!   `drive_limit_us`, and otherwise sleeps on its slot's futex, which the service thread always
//!   completes or ends the node (a job that cannot progress is ended by the launcher).
//! - **errno kept.** [`SignalContext`] saves errno on entry and restores it on the way out: the
//!   handler's own system calls (`recvfrom` leaves `EAGAIN`) must not show through in the code it
//!   interrupted, which may be between a failing call and its read of errno.
//! - **No cancellation inside.** [`SignalContext`] holds the thread's cancellation off
//!   (`pthread_setcancelstate`, an atomic update of the thread's own flags in glibc) and puts it
//!   back last: the handler's system calls are the C library's cancellation points, and a
//!   cancellation acting at one unwound the thread through the handler's frames holding the
//!   node's state (the C library aborted the node). A thread whose cancellation is asynchronous
//!   and pending is unwound when it is put back, with nothing of the handler's left to undo:
//!   [`handler`] is `extern "C-unwind"`, and that last step puts back the interrupted code's
//!   signal mask first, for the unwind never returns through `sigreturn`, and acts through
//!   `pthread_testcancel`, which sets the thread's result (`dsm_races::CancellationHeld`).
//! - **SIGSEGV blocked only while handling** (the kernel's default for a handler without
//!   `SA_NODEFER`): a fault inside the handler is a runtime bug and ends the process. The
//!   program's handler, when one is chained to, runs with the mask the kernel would have given
//!   it (its own `sa_mask` added to the interrupted code's), outside [`SignalContext`], so it may
//!   leave by `longjmp`.
//!
//! Threads that have no alternate signal stack (those a C program starts) are given one on their
//! first fault, so every thread that uses shared memory has one, as Rust's own threads do.
//!
//! The Go-style alternative, rewriting the saved context so the handler returns into an ordinary
//! function that does the work, would leave signal context at once; it needs a trampoline that
//! saves and restores the whole register and vector state per architecture, and is not done (see
//! `docs/design.md`, "The fault path").

pub(crate) mod drive;
pub(crate) mod program;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use dsm_core::Access;

use crate::door::context::{self, SignalContext};
use crate::door::end::{Line, die};
use crate::door::request::{Fault, FaultOutcome};
use crate::door::{self, SLOTS, fastpath, flags};
use crate::service::STATE;
use crate::sys::signals::{self, Chained};
use crate::sys::{self, Protection, stack};

/// What a fault taken once the node has left the job says.
const LEFT: &str = "a shared page not held here was touched after this node left the job (after \
                    jia_exit / Dsm::exit)";
/// What a write fault taken once the node has left the job says (its pages are all read-only
/// then: see `Node::close_writes`).
const WRITTEN_AFTER_LEFT: &str = "shared memory was written after this node left the job (after \
                                  jia_exit / Dsm::exit): no other node would see the write (the \
                                  pages held here stay readable)";

/// Whether the node left the job: its service thread serves no fault any more.
fn node_left() -> bool {
    flags::EXITED.load(Ordering::SeqCst)
}

static REGION_START: AtomicUsize = AtomicUsize::new(0);
static REGION_END: AtomicUsize = AtomicUsize::new(0);
/// The region's service view (the runtime's threads read and write pages through it).
static SERVICE_VIEW: AtomicUsize = AtomicUsize::new(0);

/// The actions faults outside the shared region are passed to, for SIGSEGV and SIGBUS: the
/// handler installed before ours (Rust's stack-overflow reporter, a handler the program installed
/// before `jia_init`, or the default action), then whatever the program installs through libjia's
/// `sigaction` and `signal` ([`program_sigaction`]).
static CHAINED: [Chained; 2] = [Chained::new(), Chained::new()];

/// Our handler is in place for SIGSEGV and SIGBUS (from then on the program's `sigaction` for
/// them is [`program_sigaction`]'s).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// A fault is being passed on to the default action (the process is about to end by it): our
/// handler is not in place, and [`watch_handlers`] must not say the program replaced it.
static CRASHING: AtomicBool = AtomicBool::new(false);

/// When [`watch_handlers`] last looked, in `sys::monotonic_ns`.
static WATCHED_AT: AtomicU64 = AtomicU64::new(0);
/// [`watch_handlers`] saw a handler replaced at its last look.
static REPLACED_SEEN: AtomicBool = AtomicBool::new(false);
/// How long after a handler is first seen replaced [`watch_handlers`] looks again.
const RECHECK_NS: u64 = 100_000_000;

/// Alternate signal stacks given to threads that had none, by slot: a thread that takes over an
/// ended thread's slot reuses its stack.
static SIGNAL_STACKS: [AtomicUsize; door::MAX_THREADS] =
    [const { AtomicUsize::new(0) }; door::MAX_THREADS];

std::thread_local! {
    /// This thread's alternate signal stack has been checked (and given if it had none).
    static SIGNAL_STACK_CHECKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The shared region's application view, `[start, end)` (empty before `install`).
pub(crate) fn region() -> (usize, usize) {
    (
        REGION_START.load(Ordering::Relaxed),
        REGION_END.load(Ordering::Relaxed),
    )
}

fn chained(sig: libc::c_int) -> &'static Chained {
    &CHAINED[usize::from(sig == libc::SIGBUS)]
}

/// Installs the handler for faults in `[start, start + len)`, the region's application view
/// (the service view of the same memory file at `service`). Idempotent for the process.
pub(crate) fn install(start: usize, service: usize, len: usize) -> std::io::Result<()> {
    REGION_START.store(start, Ordering::SeqCst);
    REGION_END.store(start + len, Ordering::SeqCst);
    SERVICE_VIEW.store(service, Ordering::SeqCst);
    if INSTALLED.load(Ordering::SeqCst) {
        return Ok(());
    }
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        // What a fault outside the region meets while ours goes in: the handler there now.
        if let Some(now) = signals::current_action(sig) {
            chained(sig).replace(Some(&now));
        }
        let before = signals::install(sig, handler)?;
        chained(sig).replace(Some(&before));
    }
    INSTALLED.store(true, Ordering::SeqCst);
    program::note_async_handlers();
    signals::at_fork_child(in_forked_child)
}

/// In a child forked from the node (async-signal-safe, as the child of a threaded process must
/// be): the application's view maps the parent node's pages themselves (shared memory, not a
/// copy), so it is closed, and the child's first touch of it ends the child with a message
/// instead of reading pages the parent is changing or writing into the parent's.
extern "C" fn in_forked_child() {
    flags::FORKED.store(true, Ordering::Relaxed);
    let start = REGION_START.load(Ordering::Relaxed);
    let end = REGION_END.load(Ordering::Relaxed);
    // SAFETY: closes the application's view of the region (mapped for the process's life); the
    // child holds no reference into it, and a thread of it that touches it faults into
    // `handler`, which ends the child.
    let _ = unsafe { sys::mprotect(start, end - start, Protection::None) };
}

/// Service thread, at most once a second: whether the program replaced the DSM's SIGSEGV or
/// SIGBUS handler behind its back (a Rust program, which nothing stands between, or a raw system
/// call): then no fault on shared memory can be served again, and a thread that takes one faults
/// forever in the program's handler. Returns the signal's name and what is there now (its
/// handler's address, or `SIG_DFL`/`SIG_IGN`). A replacement counts once it is seen again
/// [`RECHECK_NS`] later: a program's handler that ends the process (Rust's own, on a fault that
/// is not a stack overflow) puts the default action back and returns, and the process dies of
/// the fault a moment later; seen in between, a crash was once reported as a replaced handler,
/// with status 1 instead of the signal. Also notes handlers of asynchronous signals installed
/// meanwhile.
pub(crate) fn watch_handlers() -> Option<(&'static str, usize)> {
    let now = sys::monotonic_ns();
    if now.saturating_sub(WATCHED_AT.load(Ordering::Relaxed)) < 1_000_000_000 {
        return None;
    }
    WATCHED_AT.store(now, Ordering::Relaxed);
    program::note_async_handlers();
    if !INSTALLED.load(Ordering::SeqCst) {
        return None;
    }
    let replaced = [(libc::SIGSEGV, "SIGSEGV"), (libc::SIGBUS, "SIGBUS")]
        .into_iter()
        .find_map(|(sig, name)| {
            let action = signals::current_action(sig)?;
            let replaced =
                !signals::is_handler(&action, handler) && !CRASHING.load(Ordering::SeqCst);
            replaced.then_some((name, action.sa_sigaction))
        });
    match replaced {
        None => {
            REPLACED_SEEN.store(false, Ordering::Relaxed);
            None
        }
        Some(_) if REPLACED_SEEN.load(Ordering::Relaxed) => replaced,
        Some(_) => {
            // Look again in RECHECK_NS rather than in a second.
            REPLACED_SEEN.store(true, Ordering::Relaxed);
            WATCHED_AT.store(
                now.saturating_sub(1_000_000_000 - RECHECK_NS),
                Ordering::Relaxed,
            );
            None
        }
    }
}

/// Passes the signal on to the program's handler (see [`CHAINED`]).
///
/// # Safety
///
/// Called from the handler with its own arguments.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the caller's promise.
    unsafe {
        signals::chain(chained(sig), sig, info, ctx, || {
            CRASHING.store(true, Ordering::SeqCst);
        })
    };
}

/// The SIGSEGV/SIGBUS handler. Signal context: see the module's contract. A thread whose
/// cancellation is asynchronous and pending is unwound from here as the handler puts its
/// cancellation back, after everything else of the handler's is done (`SignalContext`).
extern "C-unwind" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo, as passed to this SA_SIGINFO handler.
    if unsafe { signals::was_sent(info) } {
        // kill or raise, not an access: the program's.
        // SAFETY: this handler's own arguments.
        return unsafe { chain(sig, info, ctx) };
    }
    // SAFETY: the kernel's siginfo, as passed to this SA_SIGINFO handler.
    let addr = unsafe { signals::fault_addr(info) };
    let (start, end) = region();
    let service = SERVICE_VIEW.load(Ordering::Relaxed);
    if sig == libc::SIGBUS
        && ((start..end).contains(&addr) || (service..service + (end - start)).contains(&addr))
    {
        // The runtime's own faults are all SIGSEGV (a page's protection); a bus error in
        // either view of the region is memory its file cannot give (shrunk under the node, a
        // memory error): serving it would return to the same bus error forever.
        say_bus_error(addr);
        // SAFETY: this handler's own arguments.
        return unsafe { chain(sig, info, ctx) };
    }
    if addr < start || addr >= end {
        // SAFETY: this handler's own arguments.
        return unsafe { chain(sig, info, ctx) };
    }
    let outcome = {
        let _context = SignalContext::enter(ctx);
        serve(start, addr, ctx)
    };
    if outcome == Some(FaultOutcome::Unallocated) {
        // Not allocated: a wild access in the region. Behave as if we were not here (out of
        // signal context: the program's handler may leave by longjmp), but if nothing of the
        // program's handles it, first say where it was: the default action kills the node with
        // no word of its own. (A Rust program's handler is the standard library's, which
        // takes only stack overflows and then leaves the fault to the default action.)
        if !signals::runs_a_function(&chained(sig).load()) || !program::is_c() {
            say_wild_access(addr, ctx);
        }
        // SAFETY: this handler's own arguments.
        unsafe { chain(sig, info, ctx) };
    }
}

/// Says, in one write, that the access at `addr`, in either view of the shared region, met a
/// bus error.
/// Signal context.
fn say_bus_error(addr: usize) {
    let mut line = Line::default();
    line.push(b"dsm node ");
    line.push_decimal(crate::door::end::rank());
    line.push(b": error: a bus error (SIGBUS) at ");
    line.push_hex(addr);
    line.push(
        b", in the shared region's memory: the node's memory file cannot give that page (the file \
          shrank under the node, or a memory error); the node cannot go on",
    );
    write_keeping_errno(&mut line);
}

/// Writes `line` to stderr, leaving errno as it was: a handler of the program's chained to
/// after it sees the errno the fault interrupted. Signal context.
fn write_keeping_errno(line: &mut Line) {
    let errno = signals::errno();
    crate::sys::write_stderr(line.ended());
    signals::set_errno(errno);
}

/// Says, in one write, that the access at `addr` lies in the shared region outside every
/// allocation, and which allocation is nearest. Signal context.
fn say_wild_access(addr: usize, ctx: *mut libc::c_void) {
    let mut line = Line::default();
    line.push(b"dsm node ");
    line.push_decimal(crate::door::end::rank());
    // SAFETY: `ctx` is this handler's own third argument.
    line.push(match unsafe { signals::fault_is_write(ctx) } {
        Some(true) => b": error: a write to ",
        Some(false) => b": error: a read of ",
        None => b": error: an access to ",
    });
    line.push_hex(addr);
    line.push(b", in the shared region but outside every allocation");
    if let Some((start, bytes, site)) = crate::allocations::nearest(addr) {
        let end = start + bytes;
        line.push(b": the nearest allocation is ");
        line.push_hex(start);
        line.push(b"..");
        line.push_hex(end);
        line.push(b" (");
        line.push_decimal_usize(bytes);
        line.push(b" bytes");
        if !site.is_empty() {
            line.push(b", made at ");
            line.push(site.as_bytes());
        }
        line.push(b"), ");
        if addr >= end {
            line.push_decimal_usize(addr - end);
            line.push(b" bytes past its end");
        } else {
            line.push_decimal_usize(start - addr);
            line.push(b" bytes before its start");
        }
    }
    write_keeping_errno(&mut line);
}

/// Serves a fault at `addr` in the region starting at `start`; `None` when resolved on a fast
/// path.
fn serve(start: usize, addr: usize, ctx: *mut libc::c_void) -> Option<FaultOutcome> {
    if context::is_service_thread() {
        die(
            "the service thread faulted on shared memory (a runtime bug)",
            1,
        );
    }
    if flags::FORKED.load(Ordering::Relaxed) {
        // The protocol's state was copied into this child, but the service thread, the
        // connections and the homes' records of this node are the parent's: running it here
        // would drive the parent's protocol from a stale copy and hang both.
        die(
            "a process forked from a DSM node touched shared memory: its pages are the parent \
             node's own (shared, not copied), so a forked child may not read or write them \
             (exec another program, or copy what the child needs before the fork)",
            1,
        );
    }
    // SAFETY: the kernel's context, as passed to this SA_SIGINFO handler.
    let write = unsafe { signals::fault_is_write(ctx) };
    if node_left() {
        // Waiting would hang: no service thread, no connection to the homes.
        die(
            if write == Some(true) {
                WRITTEN_AFTER_LEFT
            } else {
                LEFT
            },
            1,
        );
    }
    let Some(slot) = door::my_slot() else {
        die(
            "more threads use shared memory than the runtime has slots for",
            1,
        );
    };
    give_signal_stack(slot, ctx);
    // A handler of an asynchronous signal of the program's, run while its thread was in a DSM
    // call (the fault handler itself holds asynchronous signals off): the call's slot is busy,
    // and the call may hold the node's state.
    let in_call = context::in_call();
    if in_call {
        flags::ASYNC_HANDLERS.store(true, Ordering::Relaxed);
        if context::may_hold_state() && !STATE.is_free() {
            die(
                "a signal handler touched a shared page not held here while its thread ran a DSM \
                 call on this node's state: that fault cannot be served before the call goes on, \
                 which it cannot while the handler runs (block the signal around DSM calls, or \
                 install the handler with sigaction or signal, through libjia, before the calls: \
                 the DSM then holds asynchronous signals off while a call holds its state)",
                1,
            );
        }
    }
    let page = (addr - start) / dsm_core::PAGE_SIZE;
    if let Some(write) = write {
        if resolve(start, page, write) {
            return None;
        }
    }
    // Without the error code (other architectures), ask for write access: always correct, at
    // worst a twin made early.
    let fault = Fault {
        page: page as u32,
        offset: ((addr - start) % dsm_core::PAGE_SIZE) as u16,
        access: match write {
            Some(false) => Access::Read,
            _ => Access::Write,
        },
    };
    crate::trace::fault(page as u64);
    if fault.access == Access::Write {
        crate::trace::stamp(page as u64, crate::trace::Step::Write);
    }
    let outcome = if in_call {
        // Posted on a slot of its own, never driven: the interrupted call may hold the
        // allocator's locks, and posting takes none.
        let Some(spare) = door::spare_slot() else {
            die(
                "more threads use shared memory than the runtime has slots for",
                1,
            );
        };
        let outcome = SLOTS.post_fault_unless(spare, fault, node_left);
        SLOTS.release(spare);
        outcome
    } else {
        drive::drive_fault(slot, fault)
            .unwrap_or_else(|| SLOTS.post_fault_unless(slot, fault, node_left))
    };
    if outcome == FaultOutcome::Left {
        die(
            if write == Some(true) {
                WRITTEN_AFTER_LEFT
            } else {
                LEFT
            },
            1,
        );
    }
    crate::trace::stamp(page as u64, crate::trace::Step::Resumed);
    Some(outcome)
}

/// The fast paths: a write to a home page kept read-only only to see writes, or a read of a
/// prefetched page. Opens it here and tells the service thread (no wait); returns whether it
/// did. A read opens the prefetched pages beside it too (after it, or, if none is, before it),
/// in the same mprotect: a thread walking through a prefetched window, up or down, takes one
/// fault, not one per page.
fn resolve(start: usize, page: usize, write: bool) -> bool {
    let Some(claimed) = fastpath::claim(page, write) else {
        return false;
    };
    let along = if write {
        fastpath::Neighbours::default()
    } else {
        fastpath::claim_neighbours(page)
    };
    let wake = write || claimed.wake || along.wake;
    let (first, run) = (page - along.before, 1 + along.before + along.after);
    let page_addr = start + first * dsm_core::PAGE_SIZE;
    let prot = if write {
        Protection::ReadWrite
    } else {
        Protection::Read
    };
    // SAFETY: the run lies in the application view of the shared region (the fast-path table
    // holds only its pages), into which the runtime holds no reference.
    if let Err(e) = unsafe { sys::mprotect(page_addr, run * dsm_core::PAGE_SIZE, prot) } {
        // Static words: no formatting in signal context.
        if e.raw_os_error() == Some(libc::ENOMEM) {
            die(
                "mprotect failed in the fault handler: out of mappings (each run of pages with a \
                 protection of its own is one; vm.max_map_count bounds them): this node holds \
                 scattered pages, cached (a column walk of an array homed elsewhere: bound them \
                 with --set cache_pages, below half of the limit) or homed here in small blocks \
                 (allocate larger ones). Raising the limit helps both (as root: sysctl -w \
                 vm.max_map_count=262144); see docs/running-jobs.md",
                1,
            );
        }
        die("mprotect failed in the fault handler", 1);
    }
    // The pages beside the faulting one were claimed only if the queue had room for them.
    for p in (first..first + run).filter(|&p| p != page) {
        fastpath::opened_along(p);
    }
    if fastpath::opened(page, write) {
        if wake || fastpath::crowded() {
            // Marked before the service thread's sleeping flag is looked at (see
            // `fastpath::wake_wanted`).
            fastpath::want_wake();
            SLOTS.wake_service();
        }
        return true;
    }
    // Queue full: the slow path does the same work again (harmlessly) and reports it.
    false
}

/// Gives this thread an alternate signal stack on its first fault if it has none.
fn give_signal_stack(slot: usize, ctx: *mut libc::c_void) {
    if SIGNAL_STACK_CHECKED.with(|c| c.replace(true)) {
        return;
    }
    // SAFETY: `ctx` is the handler's context, as the kernel passed it.
    unsafe { stack::ensure_signal_stack(&SIGNAL_STACKS[slot], ctx) };
}

#[cfg(test)]
mod contract {
    /// What the contract forbids in signal context, as it would be spelled in the source.
    const FORBIDDEN: &[(&str, &str)] = &[
        (
            "process::exit",
            "exit from signal context (use door::end::die: write, then _exit)",
        ),
        (
            "abort()",
            "abort: the launcher would see a signal, not the node's status",
        ),
        ("println!", "printing"),
        ("eprint", "printing"),
        ("log::", "logging"),
        ("std::fs", "file I/O"),
        (
            ".lock()",
            "a blocking lock (take the service state by try_lock only)",
        ),
        ("lock_service", "a blocking lock on the service state"),
        ("thread::sleep", "an unbounded or blind wait"),
    ];

    /// Keeps the module's contract: none of the fault path's own files, nor the door's that it
    /// uses, spells a forbidden call outside its tests and comments. Not scanned: `door/end.rs`
    /// (the one exit, which picks `_exit` in signal context), `door/state.rs` (its blocking
    /// `lock` is the service thread's), and the core work a drive reaches in `service`, which
    /// defers what signal context must not do to the service thread and logs through the logger
    /// (which queues records made here). `tests/c/threads.c` checks errno and the signal stacks,
    /// `tests/c/alarm.c` faults from a signal handler, `tests/c/segv_handler.c` the chaining.
    #[test]
    fn the_fault_path_spells_no_exit_logging_file_io_or_blocking_lock() {
        let files = [
            ("mod.rs", include_str!("mod.rs")),
            ("drive.rs", include_str!("drive.rs")),
            ("program.rs", include_str!("program.rs")),
            ("allocations.rs", include_str!("../allocations.rs")),
            ("door/fastpath.rs", include_str!("../door/fastpath.rs")),
            ("door/slots.rs", include_str!("../door/slots.rs")),
            ("door/context.rs", include_str!("../door/context.rs")),
            ("door/mod.rs", include_str!("../door/mod.rs")),
        ];
        for (name, text) in files {
            // Up to the test module at the end (`mod model;` near the top is not one).
            let end = ["#[cfg(test)]\nmod contract", "#[cfg(test)]\nmod tests"]
                .iter()
                .filter_map(|m| text.find(m))
                .min()
                .unwrap_or(text.len());
            let code = &text[..end];
            assert!(code.len() > 1000, "{name}: too little code read");
            for (n, line) in code.lines().enumerate() {
                let line = line.split("//").next().unwrap_or(line);
                for (pattern, what) in FORBIDDEN {
                    assert!(
                        !line.contains(pattern),
                        "{name}:{}: {what} in signal context: {line}",
                        n + 1
                    );
                }
            }
        }
    }
}
