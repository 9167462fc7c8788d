//! Stacks for fault handlers that drive the node (`service::drive_fault`).
//!
//! The fault handler runs on the thread's alternate signal stack (`SA_ONSTACK`, so a stack
//! overflow can still be reported), which Rust makes 8 KiB: enough to post a fault and wait, too
//! tight to run the protocol core and the transport (a drive's high-water mark, the kernel's
//! signal frame included, measured 5.3-6.0 KiB after faultlat, matmul, sor and lu). So each
//! slot gets a stack of its own, [`SIZE`] bytes with a guard page below, mapped on its first
//! drive and kept (slots outlive threads), and the handler calls the drive on it ([`run_on`]).
//! Works for every thread that touches shared memory, whether it called the DSM or not.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::slots::MAX_THREADS;

/// Size of a slot's drive stack (lazily backed: only touched pages cost memory).
pub const SIZE: usize = 256 << 10;

/// Top (highest address, 16-byte aligned) of each slot's stack; 0: not mapped yet.
static TOPS: [AtomicUsize; MAX_THREADS] = [const { AtomicUsize::new(0) }; MAX_THREADS];

/// Whether this build can switch stacks (x86-64 only; elsewhere faults are posted).
pub const AVAILABLE: bool = cfg!(target_arch = "x86_64");

/// The top of a slot's stack (16-byte aligned), only made by [`top`]: [`run_on`] needs no
/// caller's promise about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Top(usize);

/// The top of slot `slot`'s stack, mapping it on first use; `None` if it cannot be mapped.
/// Async-signal-safe (mmap and mprotect are system calls). Only the slot's thread calls it.
pub fn top(slot: usize) -> Option<Top> {
    let cell = TOPS.get(slot)?;
    let t = cell.load(Ordering::Acquire);
    if t != 0 {
        return Some(Top(t));
    }
    // SAFETY: sysconf reads a constant of the system.
    let guard = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a fresh private anonymous mapping chosen by the kernel; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SIZE + guard,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the lowest page of the mapping just made: an overflow of the drive's stack faults
    // on it (inside the handler, where SIGSEGV is blocked: the kernel ends the process) instead
    // of running into other memory.
    unsafe { libc::mprotect(p, guard, libc::PROT_NONE) };
    let t = (p as usize + guard + SIZE) & !15;
    cell.store(t, Ordering::Release);
    Some(Top(t))
}

/// Calls `f` on the stack whose top is `top` (from [`top`]), then returns to the caller's
/// stack. A panic in `f` aborts the process (it cannot unwind across the switch).
pub fn run_on(top: Top, f: &mut dyn FnMut()) {
    let mut f = f;
    let arg = &mut f as *mut &mut dyn FnMut() as *mut libc::c_void;
    // SAFETY: `top.0` is the 16-byte-aligned top of a live mapping of SIZE bytes (made by `top`,
    // never unmapped) that only this thread uses while the call runs; `trampoline` has the C ABI and takes `arg`, a pointer to
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
        let slot = MAX_THREADS - 1;
        let t = top(slot).expect("map a stack");
        assert_eq!(top(slot), Some(t), "mapped once");
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
