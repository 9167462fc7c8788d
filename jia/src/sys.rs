//! Entry points that need the program's return address, which stable Rust cannot read: small
//! trampolines (x86-64) that pass it on as one more argument.
//!
//! - The race checker's hooks for C programs compiled with `-fsanitize=thread` (`dsmcc
//!   --check-races`): the compiler calls `__tsan_read4(addr)` and the like at every load and
//!   store; libjia defines them in place of ThreadSanitizer's runtime (never linked), and each
//!   passes the access and the return address (its source line) to
//!   `dsm_runtime::races::access`. Off (no `check_races`), that is one load and a branch.
//! - The allocation calls (`jia_alloc` ...): the race checker names an allocation by its line.
//!
//! A trampoline reads the return address at `[rsp]` (the call just pushed it), puts it in the
//! next free argument register and jumps to the Rust function, which returns to the program
//! directly. Nothing else is touched: no stack, no other register. On other architectures the
//! entry points are plain functions and the address is 0 (lines are then not known).

use std::ffi::{c_int, c_ulong};

/// One access from instrumented code: `size` bytes at `addr`, a write if `write` is nonzero,
/// made at the return address `pc`.
extern "C" fn access(addr: usize, pc: usize, size: usize, write: usize) {
    dsm_runtime::races::access(addr, size, write != 0, dsm_runtime::races::From::Code(pc));
}

/// `__tsan_<name>(addr)` for an access of `size` bytes.
macro_rules! access_hook {
    ($($name:ident: $size:literal, $write:literal;)*) => {$(
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(_addr: *const u8) {
            core::arch::naked_asm!(
                "mov rsi, [rsp]",
                concat!("mov edx, ", $size),
                concat!("mov ecx, ", $write),
                "jmp {hook}",
                hook = sym access,
            )
        }
    )*};
}

access_hook! {
    __tsan_read1: 1, 0; __tsan_read2: 2, 0; __tsan_read4: 4, 0; __tsan_read8: 8, 0;
    __tsan_read16: 16, 0;
    __tsan_write1: 1, 1; __tsan_write2: 2, 1; __tsan_write4: 4, 1; __tsan_write8: 8, 1;
    __tsan_write16: 16, 1;
    __tsan_unaligned_read2: 2, 0; __tsan_unaligned_read4: 4, 0; __tsan_unaligned_read8: 8, 0;
    __tsan_unaligned_read16: 16, 0;
    __tsan_unaligned_write2: 2, 1; __tsan_unaligned_write4: 4, 1;
    __tsan_unaligned_write8: 8, 1; __tsan_unaligned_write16: 16, 1;
}

/// `__tsan_<name>(addr, size)`.
macro_rules! range_hook {
    ($($name:ident: $write:literal;)*) => {$(
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(_addr: *const u8, _size: usize) {
            core::arch::naked_asm!(
                "mov rdx, rsi",
                "mov rsi, [rsp]",
                concat!("mov ecx, ", $write),
                "jmp {hook}",
                hook = sym access,
            )
        }
    )*};
}

range_hook! {
    __tsan_read_range: 0;
    __tsan_write_range: 1;
}

/// Whether an instrumented object called [`__tsan_init`] (its constructor does, before `main`).
static INSTRUMENTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the program has code built for the race checker.
pub(crate) fn instrumented() -> bool {
    INSTRUMENTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// ThreadSanitizer's start-up call, made by every instrumented object's constructor: noted (the
/// checker itself starts at `jia_init`).
#[unsafe(no_mangle)]
pub extern "C" fn __tsan_init() {
    INSTRUMENTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Called at every instrumented function's entry: not needed (lines come from each access).
#[unsafe(no_mangle)]
pub extern "C" fn __tsan_func_entry(_pc: *const u8) {}

/// Called at every instrumented function's exit.
#[unsafe(no_mangle)]
pub extern "C" fn __tsan_func_exit() {}

/// An exported allocation call: `$name(args)` calls `$imp(args, return address)`, the address
/// in the argument register after the last argument (`$reg`).
macro_rules! alloc_entry {
    ($($name:ident => $imp:path, $reg:literal, ($($arg:ident: $ty:ty),*);)*) => {$(
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_ulong {
            core::arch::naked_asm!(
                concat!("mov ", $reg, ", [rsp]"),
                "jmp {imp}",
                imp = sym $imp,
            )
        }

        #[cfg(not(target_arch = "x86_64"))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_ulong {
            // SAFETY: the caller's promise is the function's own (see its documentation).
            unsafe { $imp($($arg),*, 0) }
        }
    )*};
}

alloc_entry! {
    jia_alloc => crate::jia_alloc_at, "rsi", (totalsize: c_int);
    jia_alloc1 => crate::jia_alloc1_at, "rsi", (totalsize: c_int);
    jia_alloc_random => crate::jia_alloc_random_at, "rsi", (totalsize: c_int);
    jia_alloc2 => crate::jia_alloc2_at, "rdx", (totalsize: c_int, blocksize: c_int);
    jia_alloc2p => crate::jia_alloc2p_at, "rdx", (totalsize: c_int, starthost: c_int);
    jia_alloc3 => crate::jia_alloc3_at, "rcx",
        (totalsize: c_int, blocksize: c_int, starthost: c_int);
    jia_alloc_array => crate::jia_alloc_array_at, "rcx",
        (totalsize: c_int, blocks: *const c_int, n: c_int);
    jia_alloc4 => crate::jia_alloc4_at, "r8",
        (totalsize: c_int, blocks: *const c_int, n: c_int, starthost: c_int);
}
