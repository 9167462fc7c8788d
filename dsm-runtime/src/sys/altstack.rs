//! A roomy alternate signal stack for the threads that use the DSM.
//!
//! The fault handler runs on the thread's alternate signal stack (`SA_ONSTACK`, so a stack
//! overflow can still be reported). Rust gives each thread one of a few KiB: enough to post a
//! fault and wait, not to drive the node's protocol and transport from the handler (see
//! `service::drive_fault`). [`ensure`] replaces it, once per thread and outside any handler, with
//! [`SIZE`] bytes of ours; [`room`] tells the handler how much of it is left below it.

use std::cell::Cell;

/// Size of the alternate stack given to DSM threads (lazily backed: only touched pages cost).
pub const SIZE: usize = 256 << 10;

thread_local! {
    /// Lowest usable address of this thread's alternate stack of ours (0: none).
    static BASE: Cell<usize> = const { Cell::new(0) };
    /// Unmaps our stack when the thread ends.
    static OWNED: Owned = const { Owned(Cell::new(0)) };
}

struct Owned(Cell<usize>);

impl Drop for Owned {
    fn drop(&mut self) {
        let base = self.0.get();
        if base == 0 {
            return;
        }
        // Rust's own thread teardown has usually disabled the alternate stack by now; if ours is
        // still the thread's, disable it before the memory goes.
        // SAFETY: zeroed stack_t is valid to receive the current alternate stack.
        let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: a null new stack only queries; `cur` is live.
        unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) };
        if cur.ss_sp as usize == base && cur.ss_flags & libc::SS_DISABLE == 0 {
            let off = libc::stack_t {
                ss_sp: std::ptr::null_mut(),
                ss_flags: libc::SS_DISABLE,
                ss_size: 0,
            };
            // SAFETY: disables this thread's alternate stack; we are not running on it (thread
            // teardown is not a signal handler).
            unsafe { libc::sigaltstack(&off, std::ptr::null_mut()) };
        }
        let guard = page_size();
        // SAFETY: [base - guard, base + SIZE) is the mapping `ensure` made for this thread, no
        // longer the thread's alternate stack.
        unsafe { libc::munmap((base - guard) as *mut libc::c_void, SIZE + guard) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Gives the calling thread an alternate signal stack of [`SIZE`] bytes, with a guard page below
/// it, unless it has one. Call outside signal handlers. Best effort: on failure the thread keeps
/// its stack and its faults are served by the service thread.
pub fn ensure() {
    if BASE.with(Cell::get) != 0 {
        return;
    }
    let guard = page_size();
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
        log::debug!(
            "no alternate signal stack: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    // SAFETY: the first page of the mapping just made; an overflow of the handler's stack then
    // faults on it instead of running into other memory.
    unsafe { libc::mprotect(p, guard, libc::PROT_NONE) };
    let base = p as usize + guard;
    let new = libc::stack_t {
        ss_sp: base as *mut libc::c_void,
        ss_flags: 0,
        ss_size: SIZE,
    };
    // SAFETY: `new` describes SIZE bytes of live memory owned by this thread until `Owned`
    // drops; we are not in a signal handler, so no alternate stack is in use.
    if unsafe { libc::sigaltstack(&new, std::ptr::null_mut()) } != 0 {
        log::debug!(
            "cannot set the alternate signal stack: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: the mapping made above, never used.
        unsafe { libc::munmap(p, SIZE + guard) };
        return;
    }
    OWNED.with(|o| o.0.set(base));
    BASE.with(|b| b.set(base));
}

/// In a signal handler: how many bytes of our alternate stack are left below the caller (0 when
/// the thread has none of ours, or the handler does not run on it). Async-signal-safe.
pub fn room() -> usize {
    let base = BASE.with(Cell::get);
    let here = &base as *const usize as usize;
    if base == 0 || here < base || here >= base + SIZE {
        return 0;
    }
    here - base
}
