//! Atomic operations on shared memory from C, exact across nodes (ours; JIAJIA has none):
//!
//! - `jia_atomic_*` (jia.h), with C11's memory orders;
//! - ThreadSanitizer's atomic hooks, `__tsan_atomic64_fetch_add(addr, v, order)` and the like,
//!   which instrumented code calls for every C11 atomic, `__atomic_*` and `__sync_*` builtin:
//!   objects built by `dsmcc --check-races`, and by `dsmcc` with clang, whose instrumentation
//!   it limits to atomics. On a 1-, 2-, 4- or 8-byte word of shared memory a hook is a DSM atomic
//!   operation, with acquire and release semantics whatever the order asked (stronger, so
//!   exact: a program's fences then need no more); elsewhere it is the CPU's atomic.

use std::ffi::c_int;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

use dsm_runtime::{AtomicOp, AtomicOrder};

use crate::{die, dsm_if_joined};

/// C11's memory order numbers (`__ATOMIC_RELAXED` = 0 to `__ATOMIC_SEQ_CST` = 5) as the
/// protocol's orderings; consume is taken as acquire. Another number ends the node naming it.
/// An order made as declared.
fn both(order: AtomicOrder) -> (AtomicOrder, AtomicOrder) {
    (order, order)
}

fn order_of(order: c_int, what: &str) -> AtomicOrder {
    match order {
        0 => AtomicOrder::RELAXED,
        1 | 2 => AtomicOrder::ACQUIRE,
        3 => AtomicOrder::RELEASE,
        4 | 5 => AtomicOrder::ACQ_REL,
        _ => die(&format!(
            "{what}: memory order {order} (allowed: 0 relaxed, 1 consume, 2 acquire, 3 release, \
             4 acq_rel, 5 seq_cst)"
        )),
    }
}

/// [`order_of`] for a load: C11 gives a load no release semantics (3 release, 4 acq_rel are
/// refused, as C11 leaves them undefined and Rust's atomics panic on them), and the message
/// for any other order names only those a load may have.
fn load_order(order: c_int, what: &str) -> AtomicOrder {
    if !matches!(order, 0 | 1 | 2 | 5) {
        die(&format!(
            "{what}: memory order {order} is not one for a load (allowed: 0 relaxed, 1 consume, \
             2 acquire, 5 seq_cst)"
        ));
    }
    order_of(order, what)
}

/// [`order_of`] for a store: C11 gives a store no acquire semantics (1 consume, 2 acquire, 4
/// acq_rel are refused), and the message for any other order names only those a store may
/// have.
fn store_order(order: c_int, what: &str) -> AtomicOrder {
    if !matches!(order, 0 | 3 | 5) {
        die(&format!(
            "{what}: memory order {order} is not one for a store (allowed: 0 relaxed, 3 release, \
             5 seq_cst)"
        ));
    }
    order_of(order, what)
}

/// Whether `bytes` bytes at `addr` are shared memory (after `jia_init`).
fn shared(addr: usize, bytes: usize) -> bool {
    dsm_if_joined().is_some_and(|d| d.in_region(addr, bytes))
}

/// Whether C11's memory order `mo` acquires (consume, acquire, acq_rel, seq_cst) and releases
/// (release, acq_rel, seq_cst).
fn acquires_releases(mo: c_int) -> (bool, bool) {
    (
        matches!(mo & 0xFFFF, 1 | 2 | 4 | 5),
        matches!(mo & 0xFFFF, 3..=5),
    )
}

/// `op` (the CPU's atomic operation at `addr` of the process's own memory, made with C11's
/// order `mo`), as the race checker sees it: synchronisation of the node's threads, as the
/// order asked (a fence's, for a relaxed one: [`__tsan_atomic_thread_fence`]).
fn private<R>(addr: usize, mo: c_int, (stores, reads): (bool, bool), op: impl FnOnce() -> R) -> R {
    use dsm_races::Word;
    let (acquire, release) = acquires_releases(mo);
    if stores {
        dsm_races::atomic_storing(Word::Private(addr), release);
    }
    let value = op();
    if reads {
        dsm_races::atomic_read(Word::Private(addr), acquire);
    }
    value
}

/// One DSM atomic operation on the `width`-byte word at `addr` of shared memory, made with
/// `order` for a program that asked `declared` (what the race checker goes by): the value
/// before, or the node ends naming the call and why.
fn on_shared(
    addr: usize,
    width: u8,
    op: AtomicOp,
    (order, declared): (AtomicOrder, AtomicOrder),
    what: &str,
) -> u64 {
    let Some(d) = dsm_if_joined() else {
        die(&format!("{what}: shared memory used before jia_init"));
    };
    // The runtime passes the checker's clocks for the orders declared, and a relaxed store's or
    // read's around fences.
    d.atomic_declared(addr, width, op, order, declared)
        .unwrap_or_else(|e| die(&format!("{what}({addr:#x}): {e}")))
}

// ----- jia.h's atomics -----

macro_rules! jia_atomics {
    ($t:ty, $width:literal, $load:ident, $store:ident, $xchg:ident, $cas:ident,
     [$(($name:ident, $op:ident)),*]) => {
        /// `jia_atomic_load_*`: the word's value.
        #[unsafe(no_mangle)]
        pub extern "C" fn $load(p: *mut $t, order: c_int) -> $t {
            let what = stringify!($load);
            on_shared(p as usize, $width, AtomicOp::Load, both(load_order(order, what)), what) as $t
        }

        /// `jia_atomic_store_*`.
        #[unsafe(no_mangle)]
        pub extern "C" fn $store(p: *mut $t, v: $t, order: c_int) {
            let what = stringify!($store);
            let op = AtomicOp::Store(v as u64);
            on_shared(p as usize, $width, op, both(store_order(order, what)), what);
        }

        /// `jia_atomic_exchange_*`: the value before.
        #[unsafe(no_mangle)]
        pub extern "C" fn $xchg(p: *mut $t, v: $t, order: c_int) -> $t {
            let what = stringify!($xchg);
            let op = AtomicOp::Swap(v as u64);
            on_shared(p as usize, $width, op, both(order_of(order, what)), what) as $t
        }

        /// `jia_atomic_compare_exchange_*`: 1 if the word held `*expected` (now `desired`);
        /// else 0, with the word's value stored in `*expected` (a private variable).
        ///
        /// # Safety
        /// `expected` is NULL (refused) or points to a variable of the word's type that this
        /// thread may read and write.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cas(
            p: *mut $t,
            expected: *mut $t,
            desired: $t,
            order: c_int,
        ) -> c_int {
            let what = stringify!($cas);
            if expected.is_null() {
                die(&format!("{what}: `expected` is NULL"));
            }
            // SAFETY: not null, and the caller's variable of this type (the C prototype's
            // contract), read and written here by this thread only.
            let want = unsafe { expected.read() };
            let op = AtomicOp::CompareExchange {
                expected: want as u64,
                new: desired as u64,
            };
            let old = on_shared(p as usize, $width, op, both(order_of(order, what)), what) as $t;
            if old == want {
                1
            } else {
                // SAFETY: as above.
                unsafe { expected.write(old) };
                0
            }
        }

        $(
            /// `jia_atomic_fetch_*`: the value before.
            #[unsafe(no_mangle)]
            pub extern "C" fn $name(p: *mut $t, v: $t, order: c_int) -> $t {
                let what = stringify!($name);
                let op = AtomicOp::$op(v as u64);
                on_shared(p as usize, $width, op, both(order_of(order, what)), what) as $t
            }
        )*
    };
}

jia_atomics!(
    u64,
    8,
    jia_atomic_load_64,
    jia_atomic_store_64,
    jia_atomic_exchange_64,
    jia_atomic_compare_exchange_64,
    [
        (jia_atomic_fetch_add_64, FetchAdd),
        (jia_atomic_fetch_sub_64, FetchSub),
        (jia_atomic_fetch_and_64, FetchAnd),
        (jia_atomic_fetch_or_64, FetchOr),
        (jia_atomic_fetch_xor_64, FetchXor)
    ]
);

jia_atomics!(
    u32,
    4,
    jia_atomic_load_32,
    jia_atomic_store_32,
    jia_atomic_exchange_32,
    jia_atomic_compare_exchange_32,
    [
        (jia_atomic_fetch_add_32, FetchAdd),
        (jia_atomic_fetch_sub_32, FetchSub),
        (jia_atomic_fetch_and_32, FetchAnd),
        (jia_atomic_fetch_or_32, FetchOr),
        (jia_atomic_fetch_xor_32, FetchXor)
    ]
);

jia_atomics!(
    u16,
    2,
    jia_atomic_load_16,
    jia_atomic_store_16,
    jia_atomic_exchange_16,
    jia_atomic_compare_exchange_16,
    [
        (jia_atomic_fetch_add_16, FetchAdd),
        (jia_atomic_fetch_sub_16, FetchSub),
        (jia_atomic_fetch_and_16, FetchAnd),
        (jia_atomic_fetch_or_16, FetchOr),
        (jia_atomic_fetch_xor_16, FetchXor)
    ]
);

jia_atomics!(
    u8,
    1,
    jia_atomic_load_8,
    jia_atomic_store_8,
    jia_atomic_exchange_8,
    jia_atomic_compare_exchange_8,
    [
        (jia_atomic_fetch_add_8, FetchAdd),
        (jia_atomic_fetch_sub_8, FetchSub),
        (jia_atomic_fetch_and_8, FetchAnd),
        (jia_atomic_fetch_or_8, FetchOr),
        (jia_atomic_fetch_xor_8, FetchXor)
    ]
);

// ----- ThreadSanitizer's atomic hooks: C11 atomics and the builtins in instrumented code -----

/// On shared memory every hooked operation acquires and releases: exact whatever the order the
/// program asked, fences included (which then need nothing of their own).
const HOOKED: AtomicOrder = AtomicOrder::ACQ_REL;

/// A hooked operation's orders: made acquire and release, declared as the program asked.
fn hooked(mo: c_int) -> (AtomicOrder, AtomicOrder) {
    (HOOKED, order_of(mo & 0xFFFF, "an atomic operation"))
}

/// `f(old)` on the `width`-byte word at `addr` of shared memory, by compare-exchange until no
/// other operation came between (each a hooked operation: acquire and release, declared with
/// C11's order `mo`). The value before.
fn cas_loop_on_shared(
    addr: usize,
    width: u8,
    mo: c_int,
    f: impl Fn(u64) -> u64,
    what: &str,
) -> u64 {
    let declared = order_of(mo, what);
    let mut old = on_shared(addr, width, AtomicOp::Load, (HOOKED, declared), what);
    loop {
        let op = AtomicOp::CompareExchange {
            expected: old,
            new: f(old),
        };
        let seen = on_shared(addr, width, op, (HOOKED, declared), what);
        if seen == old {
            return old;
        }
        old = seen;
    }
}

/// `!(old & v)` on shared memory ([`cas_loop_on_shared`]).
fn nand_on_shared(addr: usize, width: u8, v: u64, mo: c_int, what: &str) -> u64 {
    cas_loop_on_shared(addr, width, mo, |old| !(old & v), what)
}

/// `f(old)` on the `width`-byte word at `addr` as one atomic read-modify-write with C11's order
/// `mo`: [`cas_loop_on_shared`] on shared memory, the CPU's compare-exchange loop elsewhere
/// (`cpu_cas(expected, new)`: the value it found). The value before.
fn rmw_by_cas(
    addr: usize,
    width: u8,
    mo: c_int,
    f: impl Fn(u64) -> u64,
    cpu_load: impl Fn() -> u64,
    cpu_cas: impl Fn(u64, u64) -> u64,
    what: &str,
) -> u64 {
    if shared(addr, usize::from(width)) {
        return cas_loop_on_shared(addr, width, mo, f, what);
    }
    let mut old = cpu_load();
    loop {
        let new = f(old);
        let seen = private(addr, mo, (true, true), || cpu_cas(old, new));
        if seen == old {
            return old;
        }
        old = seen;
    }
}

/// The read-modify-writes clang's ThreadSanitizer pass leaves to the CPU (LLVM's `atomicrmw`
/// `fadd`, `fsub`, `fmax`, `fmin` on `float` and `double`; `max`, `min`, `umax`, `umin` on
/// integers): `dsmcc` rewrites each in clang's code into a call of the entry of its operation
/// and type here (`__dsm_atomicrmw_fadd_f64(p, v, order)`, the value before), exact across
/// nodes on shared memory, the CPU's elsewhere.
macro_rules! rmw_entries {
    ($t:ty, $bits:ty, $cpu:ty, $width:literal, $to:expr, $from:expr,
     [$(($name:ident, $apply:expr)),*]) => {
        $(
            /// See [`rmw_entries`].
            ///
            /// # Safety
            /// `p` is an aligned object of this type the caller may access atomically.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(p: *mut $t, v: $t, mo: c_int) -> $t {
                let to: fn($t) -> u64 = $to;
                let from: fn(u64) -> $t = $from;
                let apply: fn($t, $t) -> $t = $apply;
                // SAFETY: the function's contract; used only where the word is not shared.
                let cpu = || unsafe { <$cpu>::from_ptr(p.cast::<$bits>()) };
                let old = rmw_by_cas(
                    p as usize,
                    $width,
                    mo,
                    |old| to(apply(from(old), v)),
                    || u64::from(cpu().load(Ordering::SeqCst)),
                    |expected, new| {
                        let r = cpu().compare_exchange(
                            expected as $bits,
                            new as $bits,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                        u64::from(r.unwrap_or_else(|found| found))
                    },
                    stringify!($name),
                );
                from(old)
            }
        )*
    };
}

/// The floating-point and integer maximum/minimum read-modify-writes (see [`rmw_entries`]).
mod uninstrumented_rmw {
    use super::*;

    rmw_entries!(
        f32,
        u32,
        AtomicU32,
        4,
        |x| u64::from(x.to_bits()),
        |b| f32::from_bits(b as u32),
        [
            (__dsm_atomicrmw_fadd_f32, |a, b| a + b),
            (__dsm_atomicrmw_fsub_f32, |a, b| a - b),
            (__dsm_atomicrmw_fmax_f32, f32::max),
            (__dsm_atomicrmw_fmin_f32, f32::min)
        ]
    );
    rmw_entries!(
        f64,
        u64,
        AtomicU64,
        8,
        |x| x.to_bits(),
        f64::from_bits,
        [
            (__dsm_atomicrmw_fadd_f64, |a, b| a + b),
            (__dsm_atomicrmw_fsub_f64, |a, b| a - b),
            (__dsm_atomicrmw_fmax_f64, f64::max),
            (__dsm_atomicrmw_fmin_f64, f64::min)
        ]
    );
    rmw_entries!(
        u8,
        u8,
        AtomicU8,
        1,
        u64::from,
        |b| b as u8,
        [
            (__dsm_atomicrmw_max_i8, |a, b| (a as i8).max(b as i8) as u8),
            (__dsm_atomicrmw_min_i8, |a, b| (a as i8).min(b as i8) as u8),
            (__dsm_atomicrmw_umax_i8, u8::max),
            (__dsm_atomicrmw_umin_i8, u8::min)
        ]
    );
    rmw_entries!(
        u16,
        u16,
        AtomicU16,
        2,
        u64::from,
        |b| b as u16,
        [
            (__dsm_atomicrmw_max_i16, |a, b| (a as i16).max(b as i16)
                as u16),
            (__dsm_atomicrmw_min_i16, |a, b| (a as i16).min(b as i16)
                as u16),
            (__dsm_atomicrmw_umax_i16, u16::max),
            (__dsm_atomicrmw_umin_i16, u16::min)
        ]
    );
    rmw_entries!(
        u32,
        u32,
        AtomicU32,
        4,
        u64::from,
        |b| b as u32,
        [
            (__dsm_atomicrmw_max_i32, |a, b| (a as i32).max(b as i32)
                as u32),
            (__dsm_atomicrmw_min_i32, |a, b| (a as i32).min(b as i32)
                as u32),
            (__dsm_atomicrmw_umax_i32, u32::max),
            (__dsm_atomicrmw_umin_i32, u32::min)
        ]
    );
    rmw_entries!(
        u64,
        u64,
        AtomicU64,
        8,
        |x| x,
        |b| b,
        [
            (__dsm_atomicrmw_max_i64, |a, b| (a as i64).max(b as i64)
                as u64),
            (__dsm_atomicrmw_min_i64, |a, b| (a as i64).min(b as i64)
                as u64),
            (__dsm_atomicrmw_umax_i64, u64::max),
            (__dsm_atomicrmw_umin_i64, u64::min)
        ]
    );
}

macro_rules! tsan_atomics {
    ($t:ty, $cpu:ty, $width:literal, $load:ident, $store:ident, $xchg:ident, $nand:ident,
     $cas_strong:ident, $cas_weak:ident, $cas_val:ident,
     [$(($name:ident, $op:ident, $fetch:ident)),*]) => {
        /// The CPU's atomic at a private address.
        ///
        /// # Safety
        /// `p` is aligned and valid for atomic access (the instrumented program's own atomic
        /// object).
        unsafe fn cpu<'a>(p: *mut $t) -> &'a $cpu {
            // SAFETY: the caller's contract.
            unsafe { <$cpu>::from_ptr(p) }
        }

        /// `__tsan_atomic*_load`.
        ///
        /// # Safety
        /// `p` is the instrumented program's atomic object.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $load(p: *mut $t, mo: c_int) -> $t {
            if shared(p as usize, $width) {
                return on_shared(p as usize, $width, AtomicOp::Load, hooked(mo), "atomic load") as $t;
            }
            // SAFETY: the function's contract.
            private(p as usize, mo, (false, true), || unsafe { cpu(p) }.load(Ordering::SeqCst))
        }

        /// `__tsan_atomic*_store`.
        ///
        /// # Safety
        /// `p` is the instrumented program's atomic object.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $store(p: *mut $t, v: $t, mo: c_int) {
            if shared(p as usize, $width) {
                on_shared(p as usize, $width, AtomicOp::Store(v as u64), hooked(mo), "atomic store");
                return;
            }
            // SAFETY: the function's contract.
            private(p as usize, mo, (true, false), || unsafe { cpu(p) }.store(v, Ordering::SeqCst))
        }

        /// `__tsan_atomic*_exchange`.
        ///
        /// # Safety
        /// `p` is the instrumented program's atomic object.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $xchg(p: *mut $t, v: $t, mo: c_int) -> $t {
            if shared(p as usize, $width) {
                let op = AtomicOp::Swap(v as u64);
                return on_shared(p as usize, $width, op, hooked(mo), "atomic exchange") as $t;
            }
            // SAFETY: the function's contract.
            private(p as usize, mo, (true, true), || unsafe { cpu(p) }.swap(v, Ordering::SeqCst))
        }

        /// `__tsan_atomic*_fetch_nand`.
        ///
        /// # Safety
        /// `p` is the instrumented program's atomic object.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $nand(p: *mut $t, v: $t, mo: c_int) -> $t {
            if shared(p as usize, $width) {
                return nand_on_shared(p as usize, $width, v as u64, mo, "atomic fetch_nand") as $t;
            }
            // SAFETY: the function's contract.
            private(p as usize, mo, (true, true), || unsafe { cpu(p) }.fetch_nand(v, Ordering::SeqCst))
        }

        /// `__tsan_atomic*_compare_exchange_val`: the value before.
        ///
        /// # Safety
        /// `p` is the instrumented program's atomic object.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cas_val(p: *mut $t, c: $t, v: $t, mo: c_int, fmo: c_int) -> $t {
            if shared(p as usize, $width) {
                let op = AtomicOp::CompareExchange {
                    expected: c as u64,
                    new: v as u64,
                };
                let (order, mut declared) = hooked(mo);
                declared.acquire |= order_of(fmo, "atomic compare_exchange").acquire;
                return on_shared(p as usize, $width, op, (order, declared), "atomic compare_exchange") as $t;
            }
            // A failure's order acquires too where it does (what a failure read was stored):
            // acquire, or acq_rel where the success order releases.
            let mo = match (acquires_releases(mo), acquires_releases(fmo).0) {
                ((false, release), true) => if release { 4 } else { 2 },
                _ => mo,
            };
            private(p as usize, mo, (true, true), || {
                // SAFETY: the function's contract.
                match unsafe { cpu(p) }.compare_exchange(c, v, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(old) | Err(old) => old,
                }
            })
        }

        /// `__tsan_atomic*_compare_exchange_strong`: 1 on success, else 0 with `*c` updated.
        ///
        /// # Safety
        /// `p` is the instrumented program's atomic object, `c` its expected value's variable.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cas_strong(p: *mut $t, c: *mut $t, v: $t, mo: c_int, fmo: c_int) -> c_int {
            // SAFETY: the function's contract (`c` is the compiler's temporary).
            let want = unsafe { c.read() };
            // SAFETY: the function's contract.
            let old = unsafe { $cas_val(p, want, v, mo, fmo) };
            if old == want {
                1
            } else {
                // SAFETY: as above.
                unsafe { c.write(old) };
                0
            }
        }

        /// `__tsan_atomic*_compare_exchange_weak`: as strong (never fails spuriously).
        ///
        /// # Safety
        /// As `compare_exchange_strong`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $cas_weak(p: *mut $t, c: *mut $t, v: $t, mo: c_int, fmo: c_int) -> c_int {
            // SAFETY: the same contract.
            unsafe { $cas_strong(p, c, v, mo, fmo) }
        }

        $(
            /// `__tsan_atomic*_fetch_*`: the value before.
            ///
            /// # Safety
            /// `p` is the instrumented program's atomic object.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name(p: *mut $t, v: $t, mo: c_int) -> $t {
                if shared(p as usize, $width) {
                    let op = AtomicOp::$op(v as u64);
                    return on_shared(p as usize, $width, op, hooked(mo), stringify!($name)) as $t;
                }
                // SAFETY: the function's contract.
                private(p as usize, mo, (true, true), || unsafe { cpu(p) }.$fetch(v, Ordering::SeqCst))
            }
        )*
    };
}

/// The 1-byte hooks.
mod hooks8 {
    use super::*;

    tsan_atomics!(
        u8,
        AtomicU8,
        1,
        __tsan_atomic8_load,
        __tsan_atomic8_store,
        __tsan_atomic8_exchange,
        __tsan_atomic8_fetch_nand,
        __tsan_atomic8_compare_exchange_strong,
        __tsan_atomic8_compare_exchange_weak,
        __tsan_atomic8_compare_exchange_val,
        [
            (__tsan_atomic8_fetch_add, FetchAdd, fetch_add),
            (__tsan_atomic8_fetch_sub, FetchSub, fetch_sub),
            (__tsan_atomic8_fetch_and, FetchAnd, fetch_and),
            (__tsan_atomic8_fetch_or, FetchOr, fetch_or),
            (__tsan_atomic8_fetch_xor, FetchXor, fetch_xor)
        ]
    );
}

/// The 2-byte hooks.
mod hooks16 {
    use super::*;

    tsan_atomics!(
        u16,
        AtomicU16,
        2,
        __tsan_atomic16_load,
        __tsan_atomic16_store,
        __tsan_atomic16_exchange,
        __tsan_atomic16_fetch_nand,
        __tsan_atomic16_compare_exchange_strong,
        __tsan_atomic16_compare_exchange_weak,
        __tsan_atomic16_compare_exchange_val,
        [
            (__tsan_atomic16_fetch_add, FetchAdd, fetch_add),
            (__tsan_atomic16_fetch_sub, FetchSub, fetch_sub),
            (__tsan_atomic16_fetch_and, FetchAnd, fetch_and),
            (__tsan_atomic16_fetch_or, FetchOr, fetch_or),
            (__tsan_atomic16_fetch_xor, FetchXor, fetch_xor)
        ]
    );
}

/// The 4-byte hooks.
mod hooks32 {
    use super::*;

    tsan_atomics!(
        u32,
        AtomicU32,
        4,
        __tsan_atomic32_load,
        __tsan_atomic32_store,
        __tsan_atomic32_exchange,
        __tsan_atomic32_fetch_nand,
        __tsan_atomic32_compare_exchange_strong,
        __tsan_atomic32_compare_exchange_weak,
        __tsan_atomic32_compare_exchange_val,
        [
            (__tsan_atomic32_fetch_add, FetchAdd, fetch_add),
            (__tsan_atomic32_fetch_sub, FetchSub, fetch_sub),
            (__tsan_atomic32_fetch_and, FetchAnd, fetch_and),
            (__tsan_atomic32_fetch_or, FetchOr, fetch_or),
            (__tsan_atomic32_fetch_xor, FetchXor, fetch_xor)
        ]
    );
}

/// The 8-byte hooks.
mod hooks64 {
    use super::*;

    tsan_atomics!(
        u64,
        AtomicU64,
        8,
        __tsan_atomic64_load,
        __tsan_atomic64_store,
        __tsan_atomic64_exchange,
        __tsan_atomic64_fetch_nand,
        __tsan_atomic64_compare_exchange_strong,
        __tsan_atomic64_compare_exchange_weak,
        __tsan_atomic64_compare_exchange_val,
        [
            (__tsan_atomic64_fetch_add, FetchAdd, fetch_add),
            (__tsan_atomic64_fetch_sub, FetchSub, fetch_sub),
            (__tsan_atomic64_fetch_and, FetchAnd, fetch_and),
            (__tsan_atomic64_fetch_or, FetchOr, fetch_or),
            (__tsan_atomic64_fetch_xor, FetchXor, fetch_xor)
        ]
    );
}

/// C11's `atomic_thread_fence` with order `mo`: the CPU's fence; across nodes, the DSM's
/// (`Dsm::fence`) for the thread's relaxed `jia_atomic_*` operations on shared memory (every
/// hooked operation there acquires and releases already); and for the race checker C11's: an
/// acquire fence acquires what the thread's relaxed reads since its last one read, a release
/// fence's clock is what its later relaxed stores release.
fn thread_fence(mo: c_int) {
    std::sync::atomic::fence(Ordering::SeqCst);
    let (acquire, release) = acquires_releases(mo);
    let order = match (acquire, release) {
        (true, true) => Ordering::AcqRel,
        (true, false) => Ordering::Acquire,
        (false, true) => Ordering::Release,
        (false, false) => return,
    };
    match dsm_if_joined() {
        // The DSM's fence and the checker's.
        Some(d) => d.fence(order),
        None => {
            if acquire {
                dsm_races::acquire_fence();
            }
            if release {
                dsm_races::release_fence();
            }
        }
    }
}

/// `jia_atomic_thread_fence` (jia.h): C11's `atomic_thread_fence` for the thread's relaxed
/// `jia_atomic_*` operations, across nodes (see [`thread_fence`]). A relaxed order is no fence,
/// as in C11; another number than C11's ends the node naming it.
#[unsafe(no_mangle)]
pub extern "C" fn jia_atomic_thread_fence(order: c_int) {
    order_of(order, "jia_atomic_thread_fence");
    thread_fence(order);
}

/// `__tsan_atomic_thread_fence`: [`thread_fence`], for programs dsmcc instruments.
#[unsafe(no_mangle)]
pub extern "C" fn __tsan_atomic_thread_fence(mo: c_int) {
    thread_fence(mo);
}

/// `__tsan_atomic_signal_fence`: a compiler fence.
#[unsafe(no_mangle)]
pub extern "C" fn __tsan_atomic_signal_fence(_mo: c_int) {
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

// ----- libatomic's entries: the atomics a compiler leaves as calls -----
//
// gcc expands an OpenMP `atomic` on a `double` or a `float`, and one that is not a plain
// fetch-and-op (`x *= 3`), into a compare-exchange loop of its own, which ThreadSanitizer's pass
// never sees: its `lock cmpxchg` lost updates across nodes without a word. `dsmcc` compiles
// atomic sources with `-fno-inline-atomics`, so that loop calls `__atomic_compare_exchange_8`:
// defined here as the hooks above (a DSM atomic on shared memory, the CPU's elsewhere). The
// generic entries (an object of another size: a 12-byte struct) end the node on shared memory,
// where they were not atomic across nodes, and are libatomic's elsewhere.

/// One libatomic entry, the hook `$hook` of the same operation: `load`, `store`, `rmw` (the
/// value before), `after` (`__atomic_OP_fetch_N`: the value after, `$apply`'d to the value
/// before and the operand) or `cas`.
macro_rules! libatomic {
    (load $name:ident, $t:ty, $hook:path) => {
        /// libatomic's entry of this name (see the section's head).
        ///
        /// # Safety
        /// `p` is an aligned object of this width the caller may access atomically.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(p: *mut $t, mo: c_int) -> $t {
            // SAFETY: the same contract.
            unsafe { $hook(p, mo) }
        }
    };
    (store $name:ident, $t:ty, $hook:path) => {
        /// libatomic's entry of this name (see the section's head).
        ///
        /// # Safety
        /// `p` is an aligned object of this width the caller may access atomically.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(p: *mut $t, v: $t, mo: c_int) {
            // SAFETY: the same contract.
            unsafe { $hook(p, v, mo) }
        }
    };
    (rmw $name:ident, $t:ty, $hook:path) => {
        /// libatomic's entry of this name (see the section's head): the value before.
        ///
        /// # Safety
        /// `p` is an aligned object of this width the caller may access atomically.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(p: *mut $t, v: $t, mo: c_int) -> $t {
            // SAFETY: the same contract.
            unsafe { $hook(p, v, mo) }
        }
    };
    (after $name:ident, $t:ty, $hook:path, $apply:expr) => {
        /// libatomic's entry of this name (see the section's head): the value after.
        ///
        /// # Safety
        /// `p` is an aligned object of this width the caller may access atomically.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(p: *mut $t, v: $t, mo: c_int) -> $t {
            // SAFETY: the same contract.
            let old = unsafe { $hook(p, v, mo) };
            let apply: fn($t, $t) -> $t = $apply;
            apply(old, v)
        }
    };
    (cas $name:ident, $t:ty, $hook:path) => {
        /// libatomic's entry of this name (see the section's head): true if `*p` held
        /// `*expected` (now `desired`), else false with `*expected` set to what it held.
        ///
        /// # Safety
        /// `p` is an aligned object of this width the caller may access atomically, `expected`
        /// the caller's variable of the same type.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            p: *mut $t,
            expected: *mut $t,
            desired: $t,
            mo: c_int,
            fmo: c_int,
        ) -> bool {
            // SAFETY: the same contract.
            unsafe { $hook(p, expected, desired, mo, fmo) != 0 }
        }
    };
}

/// Every libatomic entry of one width: `$h` the module of its hooks, the entries' names, then
/// the hooks' they call.
macro_rules! libatomic_width {
    ($t:ty, $h:ident,
     $load:ident $store:ident $xchg:ident $cas:ident
     $fadd:ident $fsub:ident $fand:ident $for:ident $fxor:ident $fnand:ident
     $addf:ident $subf:ident $andf:ident $orf:ident $xorf:ident $nandf:ident,
     $hload:ident $hstore:ident $hxchg:ident $hcas:ident
     $hadd:ident $hsub:ident $hand:ident $hor:ident $hxor:ident $hnand:ident) => {
        libatomic!(load $load, $t, $h::$hload);
        libatomic!(store $store, $t, $h::$hstore);
        libatomic!(rmw $xchg, $t, $h::$hxchg);
        libatomic!(cas $cas, $t, $h::$hcas);
        libatomic!(rmw $fadd, $t, $h::$hadd);
        libatomic!(rmw $fsub, $t, $h::$hsub);
        libatomic!(rmw $fand, $t, $h::$hand);
        libatomic!(rmw $for, $t, $h::$hor);
        libatomic!(rmw $fxor, $t, $h::$hxor);
        libatomic!(rmw $fnand, $t, $h::$hnand);
        libatomic!(after $addf, $t, $h::$hadd, |a: $t, b: $t| a.wrapping_add(b));
        libatomic!(after $subf, $t, $h::$hsub, |a: $t, b: $t| a.wrapping_sub(b));
        libatomic!(after $andf, $t, $h::$hand, |a: $t, b: $t| a & b);
        libatomic!(after $orf, $t, $h::$hor, |a: $t, b: $t| a | b);
        libatomic!(after $xorf, $t, $h::$hxor, |a: $t, b: $t| a ^ b);
        libatomic!(after $nandf, $t, $h::$hnand, |a: $t, b: $t| !(a & b));
    };
}

/// libatomic's sized entries.
mod libatomic_sized {
    use super::*;

    libatomic_width!(u8, hooks8,
        __atomic_load_1 __atomic_store_1 __atomic_exchange_1 __atomic_compare_exchange_1
        __atomic_fetch_add_1 __atomic_fetch_sub_1 __atomic_fetch_and_1 __atomic_fetch_or_1
        __atomic_fetch_xor_1 __atomic_fetch_nand_1
        __atomic_add_fetch_1 __atomic_sub_fetch_1 __atomic_and_fetch_1 __atomic_or_fetch_1
        __atomic_xor_fetch_1 __atomic_nand_fetch_1,
        __tsan_atomic8_load __tsan_atomic8_store __tsan_atomic8_exchange
        __tsan_atomic8_compare_exchange_strong __tsan_atomic8_fetch_add __tsan_atomic8_fetch_sub
        __tsan_atomic8_fetch_and __tsan_atomic8_fetch_or __tsan_atomic8_fetch_xor
        __tsan_atomic8_fetch_nand);
    libatomic_width!(u16, hooks16,
        __atomic_load_2 __atomic_store_2 __atomic_exchange_2 __atomic_compare_exchange_2
        __atomic_fetch_add_2 __atomic_fetch_sub_2 __atomic_fetch_and_2 __atomic_fetch_or_2
        __atomic_fetch_xor_2 __atomic_fetch_nand_2
        __atomic_add_fetch_2 __atomic_sub_fetch_2 __atomic_and_fetch_2 __atomic_or_fetch_2
        __atomic_xor_fetch_2 __atomic_nand_fetch_2,
        __tsan_atomic16_load __tsan_atomic16_store __tsan_atomic16_exchange
        __tsan_atomic16_compare_exchange_strong __tsan_atomic16_fetch_add
        __tsan_atomic16_fetch_sub __tsan_atomic16_fetch_and __tsan_atomic16_fetch_or
        __tsan_atomic16_fetch_xor __tsan_atomic16_fetch_nand);
    libatomic_width!(u32, hooks32,
        __atomic_load_4 __atomic_store_4 __atomic_exchange_4 __atomic_compare_exchange_4
        __atomic_fetch_add_4 __atomic_fetch_sub_4 __atomic_fetch_and_4 __atomic_fetch_or_4
        __atomic_fetch_xor_4 __atomic_fetch_nand_4
        __atomic_add_fetch_4 __atomic_sub_fetch_4 __atomic_and_fetch_4 __atomic_or_fetch_4
        __atomic_xor_fetch_4 __atomic_nand_fetch_4,
        __tsan_atomic32_load __tsan_atomic32_store __tsan_atomic32_exchange
        __tsan_atomic32_compare_exchange_strong __tsan_atomic32_fetch_add
        __tsan_atomic32_fetch_sub __tsan_atomic32_fetch_and __tsan_atomic32_fetch_or
        __tsan_atomic32_fetch_xor __tsan_atomic32_fetch_nand);
    libatomic_width!(u64, hooks64,
        __atomic_load_8 __atomic_store_8 __atomic_exchange_8 __atomic_compare_exchange_8
        __atomic_fetch_add_8 __atomic_fetch_sub_8 __atomic_fetch_and_8 __atomic_fetch_or_8
        __atomic_fetch_xor_8 __atomic_fetch_nand_8
        __atomic_add_fetch_8 __atomic_sub_fetch_8 __atomic_and_fetch_8 __atomic_or_fetch_8
        __atomic_xor_fetch_8 __atomic_nand_fetch_8,
        __tsan_atomic64_load __tsan_atomic64_store __tsan_atomic64_exchange
        __tsan_atomic64_compare_exchange_strong __tsan_atomic64_fetch_add
        __tsan_atomic64_fetch_sub __tsan_atomic64_fetch_and __tsan_atomic64_fetch_or
        __tsan_atomic64_fetch_xor __tsan_atomic64_fetch_nand);
}

/// Ends the node for a generic atomic (`size` bytes, no width of its own) on shared memory.
fn generic_on_shared(what: &str, size: usize, addr: usize) {
    if shared(addr, 1) {
        die(&format!(
            "{what}({addr:#x}): a {size}-byte atomic on shared memory is atomic only among the \
             threads of one node; across nodes, atomics take 1-, 2-, 4- or 8-byte words (or a \
             jia_lock around the object)"
        ));
    }
}

/// The definition of libatomic's generic entry `name` after libjia's own (libatomic's, where
/// the program has it), or `None`.
fn next_definition(name: &std::ffi::CStr) -> Option<usize> {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks the symbol up.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    (!f.is_null()).then_some(f as usize)
}

/// The definition after libjia's own of libatomic's generic entry `$name` (see
/// [`next_definition`]), looked up once, as a function of type `$ty`.
macro_rules! libatomic_next {
    ($name:literal, $ty:ty) => {{
        static NEXT: OnceLock<Option<usize>> = OnceLock::new();
        NEXT.get_or_init(|| next_definition($name)).map(|f| {
            // SAFETY: libatomic's entry of this name has this signature (`$ty`, which each
            // caller writes as libatomic declares it).
            unsafe { std::mem::transmute::<usize, $ty>(f) }
        })
    }};
}

/// Locks for generic atomics on the process's own memory where no libatomic is loaded (a
/// program that links none reaches libjia's entries only), by the object's address.
static GENERIC_LOCKS: [std::sync::Mutex<()>; 64] = [const { std::sync::Mutex::new(()) }; 64];

fn generic_lock(addr: usize) -> std::sync::MutexGuard<'static, ()> {
    GENERIC_LOCKS[(addr >> 4) % GENERIC_LOCKS.len()]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// libatomic's `__atomic_load(size, src, dest, order)`.
///
/// # Safety
/// `src` and `dest` hold `size` bytes each, `src` an object the caller accesses atomically.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __atomic_load(size: usize, src: *mut u8, dest: *mut u8, mo: c_int) {
    generic_on_shared("__atomic_load", size, src as usize);
    if let Some(f) = libatomic_next!(
        c"__atomic_load",
        unsafe extern "C" fn(usize, *mut u8, *mut u8, c_int)
    ) {
        // SAFETY: the caller's contract, passed on.
        return unsafe { f(size, src, dest, mo) };
    }
    let _g = generic_lock(src as usize);
    // SAFETY: the caller's contract; every generic access to `src` holds this lock.
    unsafe { std::ptr::copy(src, dest, size) };
}

/// libatomic's `__atomic_store(size, dest, src, order)`.
///
/// # Safety
/// As `__atomic_load`, with `dest` the object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __atomic_store(size: usize, dest: *mut u8, src: *mut u8, mo: c_int) {
    generic_on_shared("__atomic_store", size, dest as usize);
    if let Some(f) = libatomic_next!(
        c"__atomic_store",
        unsafe extern "C" fn(usize, *mut u8, *mut u8, c_int)
    ) {
        // SAFETY: the caller's contract, passed on.
        return unsafe { f(size, dest, src, mo) };
    }
    let _g = generic_lock(dest as usize);
    // SAFETY: the caller's contract; every generic access to `dest` holds this lock.
    unsafe { std::ptr::copy(src, dest, size) };
}

/// libatomic's `__atomic_exchange(size, obj, val, ret, order)`.
///
/// # Safety
/// `obj`, `val` and `ret` hold `size` bytes each, `obj` the object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __atomic_exchange(
    size: usize,
    obj: *mut u8,
    val: *mut u8,
    ret: *mut u8,
    mo: c_int,
) {
    generic_on_shared("__atomic_exchange", size, obj as usize);
    if let Some(f) = libatomic_next!(
        c"__atomic_exchange",
        unsafe extern "C" fn(usize, *mut u8, *mut u8, *mut u8, c_int)
    ) {
        // SAFETY: the caller's contract, passed on.
        return unsafe { f(size, obj, val, ret, mo) };
    }
    let _g = generic_lock(obj as usize);
    // SAFETY: the caller's contract; every generic access to `obj` holds this lock.
    unsafe {
        std::ptr::copy(obj, ret, size);
        std::ptr::copy(val, obj, size);
    }
}

/// libatomic's `__atomic_compare_exchange(size, obj, expected, desired, success, failure)`.
///
/// # Safety
/// `obj`, `expected` and `desired` hold `size` bytes each, `obj` the object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __atomic_compare_exchange(
    size: usize,
    obj: *mut u8,
    expected: *mut u8,
    desired: *mut u8,
    mo: c_int,
    fmo: c_int,
) -> bool {
    generic_on_shared("__atomic_compare_exchange", size, obj as usize);
    if let Some(f) = libatomic_next!(
        c"__atomic_compare_exchange",
        unsafe extern "C" fn(usize, *mut u8, *mut u8, *mut u8, c_int, c_int) -> bool
    ) {
        // SAFETY: the caller's contract, passed on.
        return unsafe { f(size, obj, expected, desired, mo, fmo) };
    }
    let _g = generic_lock(obj as usize);
    // SAFETY: the caller's contract; every generic access to `obj` holds this lock.
    unsafe {
        let now = std::slice::from_raw_parts(obj.cast_const(), size);
        let want = std::slice::from_raw_parts(expected.cast_const(), size);
        if now == want {
            std::ptr::copy(desired, obj, size);
            true
        } else {
            std::ptr::copy(obj, expected, size);
            false
        }
    }
}

/// libatomic's `__atomic_is_lock_free(size, ptr)`: true for 1, 2, 4 and 8 bytes aligned to
/// their size (a null `ptr`: typically aligned), as the CPU's atomics are. gcc calls it for
/// `atomic_is_lock_free` once `-fno-inline-atomics` keeps it from answering itself.
#[unsafe(no_mangle)]
pub extern "C" fn __atomic_is_lock_free(size: usize, ptr: *const std::ffi::c_void) -> bool {
    matches!(size, 1 | 2 | 4 | 8) && (ptr as usize) % size == 0
}

/// libatomic's `__atomic_feraiseexcept(exceptions)`, which gcc calls after a compound
/// assignment to an `_Atomic double` or `float` (`*d += 1.0`): raises the floating-point
/// exceptions named (x86-64's `FE_*` bits) by operations that raise them, as libatomic does.
#[unsafe(no_mangle)]
pub extern "C" fn __atomic_feraiseexcept(exceptions: c_int) {
    use std::hint::black_box;
    const FE_INVALID: c_int = 0x01;
    const FE_DIVBYZERO: c_int = 0x04;
    const FE_OVERFLOW: c_int = 0x08;
    const FE_UNDERFLOW: c_int = 0x10;
    const FE_INEXACT: c_int = 0x20;
    if exceptions & FE_INVALID != 0 {
        black_box(black_box(0.0f64) / black_box(0.0f64));
    }
    if exceptions & FE_DIVBYZERO != 0 {
        black_box(black_box(1.0f64) / black_box(0.0f64));
    }
    if exceptions & FE_OVERFLOW != 0 {
        black_box(black_box(f64::MAX) * black_box(f64::MAX));
    }
    if exceptions & FE_UNDERFLOW != 0 {
        black_box(black_box(f64::MIN_POSITIVE) * black_box(f64::MIN_POSITIVE));
    }
    if exceptions & FE_INEXACT != 0 {
        black_box(black_box(1.0f64) / black_box(3.0f64));
    }
}
