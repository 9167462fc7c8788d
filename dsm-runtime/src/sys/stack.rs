//! Stacks of our own: a mapped stack with a guard page, a call on it, and alternate signal
//! stacks for threads that have none.
//!
//! The fault handler runs on the thread's alternate signal stack when it has one (`SA_ONSTACK`:
//! Rust gives its threads 8 KiB ones so a stack overflow can still be reported; threads a C
//! program starts have none until [`ensure_signal_stack`] gives them one). That is enough to post
//! a fault and wait, too tight to run the protocol core and the transport (a drive's high-water
//! mark, the kernel's signal frame included, measured 5.3-6.0 KiB after faultlat, matmul, sor and
//! lu). So a driving handler calls the drive on a stack of [`SIZE`] bytes ([`map`], [`run_on`]).
//! Every function here is async-signal-safe (system calls and plain stores).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Size of a drive stack (lazily backed: only touched pages cost memory).
pub const SIZE: usize = 256 << 10;

/// Size of an alternate signal stack given to a thread that had none.
pub const SIGNAL_STACK_SIZE: usize = 64 << 10;

/// Whether this build can switch stacks (x86-64 only; elsewhere faults are posted).
pub const AVAILABLE: bool = cfg!(target_arch = "x86_64");

/// The top of a mapped stack (16-byte aligned), only made by [`map`] and [`kept`]: [`run_on`] needs no
/// caller's promise about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Top(usize);

/// The stack kept in `cell` (0: none yet), mapping one of `size` bytes into it on first use;
/// `None` if it cannot be mapped. For stacks kept per slot: only the slot's thread calls it.
/// Async-signal-safe.
pub fn kept(cell: &AtomicUsize, size: usize) -> Option<Top> {
    let t = cell.load(Ordering::Acquire);
    if t != 0 {
        return Some(Top(t));
    }
    let top = map(size)?;
    cell.store(top.0, Ordering::Release);
    Some(top)
}

/// Maps a stack of `size` bytes with a guard page below; `None` if it cannot be mapped. Kept for
/// the life of the process. Async-signal-safe (mmap and mprotect are system calls).
pub fn map(size: usize) -> Option<Top> {
    // SAFETY: sysconf reads a constant of the system.
    let guard = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a fresh private anonymous mapping chosen by the kernel; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size + guard,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the lowest page of the mapping just made: an overflow of the stack faults on it
    // (inside the handler, where SIGSEGV is blocked: the kernel ends the process) instead of
    // running into other memory.
    unsafe { super::raw_mprotect(p as usize, guard, libc::PROT_NONE) };
    Some(Top((p as usize + guard + size) & !15))
}

/// Gives the calling thread an alternate signal stack if it has none (a thread a C program
/// started): the one kept in `cell` (mapped for an earlier thread of the slot, which has ended),
/// or one of [`SIGNAL_STACK_SIZE`] bytes mapped into it; returns whether it gave one. Called from
/// a signal handler with its context `ctx`: `rt_sigreturn` puts back the signal stack saved in
/// the context, so the new one is written there (and set now for the rest of the handler).
/// Async-signal-safe.
///
/// # Safety
///
/// `ctx` is null or what the kernel passed to the running `SA_SIGINFO` handler.
pub unsafe fn ensure_signal_stack(cell: &AtomicUsize, ctx: *mut libc::c_void) -> bool {
    if ctx.is_null() {
        return false;
    }
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid ucontext_t as the third
    // argument, which the handler may change: sigreturn restores from it.
    let uc = unsafe { &mut *(ctx as *mut libc::ucontext_t) };
    if uc.uc_stack.ss_flags & libc::SS_DISABLE == 0 {
        return false;
    }
    let Some(top) = kept(cell, SIGNAL_STACK_SIZE) else {
        return false;
    };
    let new = libc::stack_t {
        ss_sp: (top.0 - SIGNAL_STACK_SIZE) as *mut libc::c_void,
        ss_flags: 0,
        ss_size: SIGNAL_STACK_SIZE,
    };
    // SAFETY: `new` describes SIGNAL_STACK_SIZE bytes below `top`, a live mapping never unmapped
    // and used by no other thread while this one lives; the handler does not run on an
    // alternate stack now (the context says the thread had none), so changing it is allowed.
    if unsafe { libc::sigaltstack(&new, std::ptr::null_mut()) } != 0 {
        return false;
    }
    uc.uc_stack = new;
    true
}

/// Calls `f` on the stack whose top is `top` (from [`map`]), then returns to the caller's
/// stack. A panic in `f` aborts the process (it cannot unwind across the switch).
pub fn run_on(top: Top, f: &mut dyn FnMut()) {
    let mut f = f;
    let arg = &mut f as *mut &mut dyn FnMut() as *mut libc::c_void;
    // SAFETY: `top.0` is the 16-byte-aligned top of a live mapping (made by `map`, never
    // unmapped) that only this thread uses while the call runs; `trampoline` has the C ABI and takes `arg`, a pointer to
    // a live `&mut dyn FnMut()` on the caller's stack, which stays valid across the call.
    unsafe { switch_and_call(top.0, trampoline, arg) };
}

extern "C" fn trampoline(arg: *mut libc::c_void) {
    // SAFETY: `run_on` passes a pointer to its `&mut dyn FnMut()`, alive until we return.
    let f = unsafe { &mut *(arg as *mut &mut dyn FnMut()) };
    f();
}

/// Switches `rsp` to `top`, calls `f(arg)`, switches back.
#[cfg(target_arch = "x86_64")]
unsafe fn switch_and_call(top: usize, f: extern "C" fn(*mut libc::c_void), arg: *mut libc::c_void) {
    // The old stack pointer is saved on the new stack: push it (rsp = top - 8), pad to keep
    // the System V alignment at the call (rsp a multiple of 16), call, then pop it back.
    // SAFETY: the caller guarantees `top` is a usable, aligned stack top; every register the C
    // ABI lets `f` clobber is declared clobbered, and rsp is restored before the block ends.
    unsafe {
        std::arch::asm!(
            "mov rax, rsp",
            "mov rsp, {top}",
            "push rax",
            "sub rsp, 8",
            "call {f}",
            "add rsp, 8",
            "pop rsp",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("rax") _,
            clobber_abi("C"),
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn switch_and_call(_: usize, f: extern "C" fn(*mut libc::c_void), arg: *mut libc::c_void) {
    // Not used (AVAILABLE is false): faults are posted to the service thread instead.
    f(arg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closure_runs_on_the_slot_stack_and_comes_back() {
        let t = map(SIZE).expect("map a stack");
        let outer = 0u8;
        let outer_addr = &outer as *const u8 as usize;
        let mut seen = 0usize;
        let mut sum = 0u64;
        run_on(t, &mut || {
            let local = 0u8;
            seen = &local as *const u8 as usize;
            // Deep enough to use more than a page of the new stack.
            let buf = std::hint::black_box([7u64; 1024]);
            sum = buf.iter().sum();
        });
        assert!(seen < t.0 && seen > t.0 - SIZE, "ran below the new top");
        assert!(
            outer_addr >= t.0 || outer_addr < t.0 - SIZE,
            "the test itself runs elsewhere"
        );
        assert_eq!(sum, 7 * 1024);
        // Back on our own stack: locals still good.
        assert_eq!(outer, 0);
    }
}
