//! How libjia's entry points are made. Those that need the program's return address, which
//! stable Rust cannot read, are small trampolines (x86-64) that pass it on as one more argument
//! ([`pc_entry`]): the allocation calls (`jia_alloc` ...) and the message calls (`jia_send`,
//! `jia_recv`, `jia_bcast`, `jia_reduce`: the race checker names an allocation, and a message's
//! buffer, by its line) and the race checker's own
//! entry points ([`crate::races`]). And the C library's own name for `sigaction`, which libjia
//! defines in its place ([`crate::interpose`]) and the race checker's handlers call.
//!
//! A trampoline reads the return address at `[rsp]` (the call just pushed it), puts it in the
//! next free argument register and jumps to the Rust function, which returns to the program
//! directly. Nothing else is touched: no stack, no other register. On other architectures the
//! entry points are plain functions and the address is 0 (lines are then not known).
//!
//! Entry points, and the functions they reach, may be unwound: a thread cancelled in a blocking
//! call (`read`, `pthread_cond_wait`: cancellation points) or, its cancellation asynchronous,
//! anywhere, is unwound through them (a forced unwind). So they are `extern "C-unwind"`, and
//! the C library's cancellation points they call are declared so ([`crate::cancellable`]): a
//! call the compiler took for one that cannot unwind has no entry in its function's unwind
//! table, where Rust's personality answers "terminate", and the C library aborted the node. The
//! trampolines carry unwind information of their own (`.cfi_*`). Their frames hold nothing to
//! drop while such a call blocks.

use std::ffi::c_int;

/// An exported call that wants its caller's address: `$name(args)` calls `$imp(args, return
/// address)`, the address in the argument register after the last argument (`$reg`).
macro_rules! pc_entry {
    ($($name:ident => $imp:path, $reg:literal, ($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(
                ".cfi_startproc",
                concat!("mov ", $reg, ", [rsp]"),
                "jmp {imp}",
                ".cfi_endproc",
                imp = sym $imp,
            )
        }

        #[cfg(not(target_arch = "x86_64"))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the caller's promise is the function's own (see its documentation).
            unsafe { $imp($($arg),*, 0) }
        }
    )*};
}
pub(crate) use pc_entry;

/// As [`pc_entry`] for a call of six arguments, which take every argument register: the
/// trampoline pushes the return address, calls `$imp` with it as a seventh argument on the
/// stack (the stack stays aligned: one push, one call), pops it and returns to the program.
macro_rules! pc_entry_stacked {
    ($($name:ident => $imp:path, ($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(
                ".cfi_startproc",
                "push qword ptr [rsp]",
                ".cfi_adjust_cfa_offset 8",
                "call {imp}",
                "add rsp, 8",
                ".cfi_adjust_cfa_offset -8",
                "ret",
                ".cfi_endproc",
                imp = sym $imp,
            )
        }
        #[cfg(not(target_arch = "x86_64"))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the caller's promise is the function's own (see its documentation).
            unsafe { $imp($($arg),*, 0) }
        }
    )*};
}
pub(crate) use pc_entry_stacked;

unsafe extern "C" {
    /// glibc's `sigaction` under its own name (libjia defines `sigaction`).
    pub(crate) fn __sigaction(
        sig: c_int,
        act: *const libc::sigaction,
        old: *mut libc::sigaction,
    ) -> c_int;
}
