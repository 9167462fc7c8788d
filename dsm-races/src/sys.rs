//! The checker's few contacts with the machine: the shared region's bytes as a slice (behind a
//! contract made once, at [`Region::new`]), the object file holding a code address, and the
//! vector compare of a slice's bytes with its snapshot.
//!
//! The recorder's fast path (`fast`), which writes the bits of a segment through pointers it
//! keeps. Every `unsafe` block of the crate is here, each with its `SAFETY` comment.

use std::ptr::NonNull;

use crate::PageBits;

/// A page's bits while a segment records them, owned through a raw pointer: the recorder writes
/// them through [`LiveBits::get_mut`], its fast path through copies of the pointer
/// ([`BitsPtr`]) while it does not hold them borrowed.
pub(crate) struct LiveBits(NonNull<PageBits>);

impl LiveBits {
    pub(crate) fn new(bits: Box<PageBits>) -> LiveBits {
        LiveBits(NonNull::from(Box::leak(bits)))
    }

    /// The bits, for this borrow.
    pub(crate) fn get_mut(&mut self) -> &mut PageBits {
        // SAFETY: the pointer is a leaked box's, owned by `self` until `into_box` or drop; the
        // fast path's copies write only while no reference to the bits lives (`BitsPtr::or`),
        // and this one lives as long as the borrow of `self`.
        unsafe { self.0.as_mut() }
    }

    /// A copy of the pointer, for the fast path.
    pub(crate) fn ptr(&self) -> BitsPtr {
        BitsPtr(self.0)
    }

    /// The bits, owned again (the segment ends).
    pub(crate) fn into_box(self) -> Box<PageBits> {
        let p = self.0;
        std::mem::forget(self);
        // SAFETY: a leaked box's pointer, given back once: `self` is forgotten, so its drop
        // does not free it too.
        unsafe { Box::from_raw(p.as_ptr()) }
    }
}

impl Drop for LiveBits {
    fn drop(&mut self) {
        // SAFETY: as in `into_box`: the box is freed once, here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// A copy of a [`LiveBits`]' pointer (the recorder's fast path: `fast.rs`).
#[derive(Clone, Copy)]
pub(crate) struct BitsPtr(NonNull<PageBits>);

impl BitsPtr {
    /// ORs `mask` into word `word` (below 64) of the bits.
    ///
    /// # Safety
    /// The [`LiveBits`] this was copied from is alive, and no reference to its bits is (the
    /// recorder that owns it is not borrowed meanwhile).
    #[inline]
    pub(crate) unsafe fn or(self, word: usize, mask: u64) {
        debug_assert!(word < 64);
        // SAFETY: the caller's promise; `word` lies inside the 64 words.
        unsafe { *self.0.as_ptr().cast::<u64>().add(word) |= mask };
    }
}

pub(crate) mod fast {
    //! The recorder's fast path: a thread's recent (site, page, read or write) with a pointer to
    //! their bits, so that most accesses are one OR, with no borrow of the recorder, no epoch
    //! catch-up and no memo hash.
    //!
    //! The entries hold for one segment of the thread's: the recorder empties the table
    //! ([`forget`]) before it ends a segment and lets its bits go; an entry also stands only in
    //! the node's barrier epoch it was made in (a barrier another thread of the node took ends
    //! this thread's segment at its next access, on the slow path). Signal context never comes
    //! here (a handler's accesses are kept apart: `handler.rs`).

    use std::cell::Cell;

    use super::BitsPtr;

    /// Entries, direct-mapped.
    const ENTRIES: usize = 64;

    /// The write bit of a key (above any site: code addresses and `Location`s of user space).
    const WRITE: usize = 1 << 63;

    /// One (site, page, read or write) in one epoch, and its bits. A hit compares two words.
    #[derive(Clone, Copy)]
    struct Entry {
        /// The site, with [`WRITE`] for a write; `usize::MAX` in an empty entry (no site).
        key: usize,
        /// The page, and the epoch in the high half.
        tag: u64,
        bits: Option<BitsPtr>,
    }

    const EMPTY: Entry = Entry {
        key: usize::MAX,
        tag: 0,
        bits: None,
    };

    thread_local! {
        // No destructor: reaching it registers none.
        static TABLE: [Cell<Entry>; ENTRIES] = const { [const { Cell::new(EMPTY) }; ENTRIES] };
    }

    /// The key and tag of (`from`, `page`, `write`) in `epoch`.
    #[inline(always)]
    fn key_tag(from: usize, page: u32, write: bool, epoch: u32) -> (usize, u64) {
        (
            from | if write { WRITE } else { 0 },
            u64::from(page) | u64::from(epoch) << 32,
        )
    }

    /// The entry of a key and tag: the product's top bits, which every bit of the key reaches
    /// (two sites a few bytes apart, a read and a write of one place, differ there).
    #[inline(always)]
    fn index(key: usize, tag: u64) -> usize {
        let mixed = (key as u64) ^ (tag << 32);
        (mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - ENTRIES.trailing_zeros())) as usize
    }

    /// Records the access (`mask` into word `word` of the page's bits) if the entry of (`from`,
    /// `page`, `write`) stands in node epoch `epoch`; whether it did.
    #[inline(always)]
    pub(crate) fn hit(
        page: u32,
        word: usize,
        mask: u64,
        write: bool,
        from: usize,
        epoch: u32,
    ) -> bool {
        let (key, tag) = key_tag(from, page, write, epoch);
        TABLE.with(|t| {
            let e = t[index(key, tag)].get();
            match e.bits {
                Some(bits) if e.key == key && e.tag == tag => {
                    // SAFETY: the entry was made in this segment (the recorder empties the
                    // table before any segment's bits go), so the recorder still owns these
                    // bits; and it is not borrowed: this is the thread's access, outside any
                    // recording (signal handlers do not come here), and word < 64.
                    unsafe { bits.or(word, mask) };
                    true
                }
                _ => false,
            }
        })
    }

    /// The recorder, in epoch `epoch`, keeps the bits of (`from`, `page`, `write`) at `bits`.
    pub(crate) fn remember(from: usize, page: u32, write: bool, bits: BitsPtr, epoch: u32) {
        let (key, tag) = key_tag(from, page, write, epoch);
        TABLE.with(|t| {
            let slot = &t[index(key, tag)];
            // Emptied first: an access made by a signal handler interrupting the write below
            // (one not run through `in_signal_handler`, against the contract) finds no site
            // (`key` is usize::MAX) or no bits in any half-written entry, never an old pointer
            // with a new key.
            slot.set(EMPTY);
            std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
            slot.set(Entry {
                key,
                tag,
                bits: Some(bits),
            });
        });
    }

    /// The recorder's segment ends (its bits go): the table is emptied.
    pub(crate) fn forget() {
        TABLE.with(|t| t.iter().for_each(|e| e.set(EMPTY)));
    }
}

/// This thread's cancellation (`pthread_cancel`) held off while the value lives, then put back
/// as it was. A thread of a C program cancelled while inside its node (a DSM call, a fault) was
/// unwound from a system call of the runtime's that the C library makes a cancellation point
/// (`write`, `sendmsg`, `epoll_wait`...), through frames that hold the node's state: the C
/// library aborted the node, or the unwind left the state held. Held off, a cancellation acts at
/// the thread's next cancellation point after the call or the fault, as POSIX has it for calls
/// that are not cancellation points. Async-signal-safe in glibc (an atomic update of the
/// thread's own flags; POSIX does not list it), which the runtime's fault handler relies on.
/// The checker holds it too while it works on a thread (`with_recorder`): it opens files,
/// allocates, draws random keys, all of them cancellation points.
#[must_use = "cancellation is held only while the value lives"]
pub struct CancellationHeld {
    was: libc::c_int,
    /// In a signal handler: the signal mask of the code it interrupted.
    interrupted_mask: *const libc::sigset_t,
}

impl CancellationHeld {
    /// Holds this thread's cancellation off.
    pub fn hold() -> CancellationHeld {
        Self::hold_in_handler(std::ptr::null())
    }

    /// Holds this thread's cancellation off in a signal handler that interrupted code whose
    /// signal mask is `*interrupted_mask` (its context's `uc_sigmask`), live while the value
    /// is: a cancellation that acts as the value is dropped leaves the handler without
    /// `sigreturn`, so the thread's cleanup handlers and thread-local destructors would run
    /// with the handler's mask (SIGSEGV blocked: a touch of shared memory there ended the
    /// process).
    pub fn hold_in_handler(interrupted_mask: *const libc::sigset_t) -> CancellationHeld {
        let mut was = PTHREAD_CANCEL_DISABLE;
        // SAFETY: sets the calling thread's own state; `was` is a live int it writes.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut was) };
        CancellationHeld {
            was,
            interrupted_mask,
        }
    }

    /// Holds this thread's cancellation off for good: it is ending the process.
    pub fn for_good() {
        std::mem::forget(Self::hold());
    }
}

impl Drop for CancellationHeld {
    fn drop(&mut self) {
        if self.was != PTHREAD_CANCEL_ENABLE {
            return;
        }
        // Enabled again with the thread's cancellation deferred, which acts at a cancellation
        // point only, then made asynchronous again if it was (so it is, too, inside the C
        // library's cancellation points, which a signal handler of the program's may have
        // interrupted).
        let mut kind = PTHREAD_CANCEL_DEFERRED;
        // SAFETY: the calling thread's own state; `kind` is a live int it writes.
        unsafe {
            pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &mut kind);
            pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, std::ptr::null_mut());
        }
        if kind != PTHREAD_CANCEL_ASYNCHRONOUS {
            return;
        }
        // A cancellation that came meanwhile acts here, and the thread is unwound from this
        // frame (the frames up to the code this interrupted must hold nothing to drop: see
        // the runtime's `Handler`): through `pthread_testcancel`, which acts only on one that
        // is pending and sets the thread's result (glibc 2.36 leaves it NULL where enabling an
        // asynchronous cancellation acts).
        if !self.interrupted_mask.is_null() {
            // SAFETY: the interrupted code's mask, live while this value is (the caller's
            // promise); sets this thread's mask only.
            unsafe {
                libc::pthread_sigmask(
                    libc::SIG_SETMASK,
                    self.interrupted_mask,
                    std::ptr::null_mut(),
                )
            };
        }
        // SAFETY: the calling thread's own state.
        unsafe {
            pthread_testcancel();
            pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, std::ptr::null_mut());
        }
    }
}

// Not in the libc crate: <pthread.h>'s values.
const PTHREAD_CANCEL_ENABLE: libc::c_int = 0;
const PTHREAD_CANCEL_DISABLE: libc::c_int = 1;
const PTHREAD_CANCEL_DEFERRED: libc::c_int = 0;
const PTHREAD_CANCEL_ASYNCHRONOUS: libc::c_int = 1;

unsafe extern "C-unwind" {
    /// Unwinds (a forced unwind, the thread's end) where it enables an asynchronous
    /// cancellation that is pending.
    fn pthread_setcancelstate(state: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
    /// The same where it makes a pending cancellation asynchronous.
    fn pthread_setcanceltype(kind: libc::c_int, old: *mut libc::c_int) -> libc::c_int;
    /// Unwinds where a cancellation is pending and enabled.
    fn pthread_testcancel();
}

/// Sleeps `us` microseconds through the system call itself: the C library's `nanosleep` (what
/// `std::thread::sleep` calls) is a cancellation point, and the checker runs on a C program's
/// threads, inside its synchronisations (a thread cancelled there, in the middle of `jia_lock`,
/// ended holding the lock).
pub(crate) fn nap_us(us: u64) {
    let ts = libc::timespec {
        tv_sec: (us / 1_000_000) as libc::time_t,
        tv_nsec: ((us % 1_000_000) * 1_000) as libc::c_long,
    };
    // SAFETY: nanosleep reads the live `ts` and, given no remainder pointer, writes nothing.
    unsafe {
        libc::syscall(
            libc::SYS_nanosleep,
            &ts,
            std::ptr::null_mut::<libc::timespec>(),
        )
    };
}

/// The object file (executable or shared library) whose code holds `pc`, and the address it is
/// loaded at. The executable is named by `/proc/self/exe` (the loader knows it by the name it
/// was started with, which may be relative).
pub(crate) fn object_of(pc: usize) -> (String, usize) {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr(3) only reads the loader's tables and fills `info`; it returns 0 (and
    // leaves nothing to read) when no object holds the address.
    let found = unsafe { libc::dladdr(pc as *const libc::c_void, info.as_mut_ptr()) } != 0;
    if !found {
        return ("?".into(), 0);
    }
    // SAFETY: dladdr succeeded: `info` is filled.
    let info = unsafe { info.assume_init() };
    let name = if info.dli_fname.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated name owned by the loader, alive while the object is loaded.
        unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned()
    };
    let exe = std::fs::read_link("/proc/self/exe").ok();
    let name = match exe {
        Some(exe) if !name.starts_with('/') => exe.display().to_string(),
        _ => name,
    };
    // A position-dependent executable (ELF type 2, ET_EXEC) is known by absolute addresses.
    let mut header = [0u8; 18];
    let fixed = std::fs::File::open(&name)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut header))
        .is_ok_and(|()| header[16..18] == [2, 0]);
    (name, if fixed { 0 } else { info.dli_fbase as usize })
}

/// The shared region whose accesses are checked: `len` bytes at `base`.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    base: usize,
    len: usize,
}

impl Region {
    /// The region of `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped for the process's life, its bytes readable as plain
    /// bytes by any thread of the process (a page the DSM has not brought in faults, and its
    /// fault handler brings it in, as for any read of the program's).
    pub unsafe fn new(base: usize, len: usize) -> Region {
        Region { base, len }
    }

    /// Its first byte's address.
    pub fn base(self) -> usize {
        self.base
    }

    /// Its length in bytes.
    pub fn len(self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// The `len` bytes at offset `off` as a slice, for `f` (a mutable slice's bytes compared
    /// with its snapshot). Panics if they reach past the region.
    pub(crate) fn with_bytes<R>(self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        assert!(
            off <= self.len && len <= self.len - off,
            "{len} bytes at offset {off} reach past the shared region of {} bytes",
            self.len
        );
        // SAFETY: `off..off + len` lies in the region (checked above), which `Region::new`'s
        // caller promised stays mapped and readable; the bytes are read as plain bytes, which
        // any value is. Their writer is the thread that holds the slice, which is this one.
        f(unsafe { std::slice::from_raw_parts((self.base + off) as *const u8, len) })
    }
}

/// Calls `f(k, mask)` for each 64-byte chunk `k` of `a` and `b` (as long as the shorter,
/// whole chunks only) where they differ: bit i of `mask` set when byte i of the chunk lies in
/// an `element`-byte element (1, 2, 4 or 8; chunks start on element boundaries) that differs.
/// AVX2 where the processor has it (two compares of whole elements and two mask moves per
/// chunk), SSE2 otherwise on x86-64 (four byte compares, then a fold to elements), a word at
/// a time elsewhere.
#[inline]
pub(crate) fn for_each_differing_chunk(
    a: &[u8],
    b: &[u8],
    element: usize,
    mut f: impl FnMut(usize, u64),
) {
    let chunks = a.len().min(b.len()) / 64;
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            let (a, b) = (&a[..chunks * 64], &b[..chunks * 64]);
            // SAFETY: the processor has AVX2 (detected just above).
            unsafe {
                match element {
                    8 => differing_chunks_avx2::<8>(a, b, &mut f),
                    4 => differing_chunks_avx2::<4>(a, b, &mut f),
                    2 => differing_chunks_avx2::<2>(a, b, &mut f),
                    _ => differing_chunks_avx2::<1>(a, b, &mut f),
                }
            }
            return;
        }
    }
    for (k, (x, y)) in a.chunks_exact(64).zip(b.chunks_exact(64)).enumerate() {
        let (Ok(x), Ok(y)) = (x.try_into(), y.try_into()) else {
            continue;
        };
        let m = differing_bytes(x, y);
        if m != 0 {
            f(k, whole_elements(m, element));
        }
    }
}

/// `m` (bits of 64 bytes) with every `element`-byte group that has a bit set set whole
/// (`element` 1, 2, 4 or 8).
#[inline]
pub(crate) fn whole_elements(m: u64, element: usize) -> u64 {
    // Each group's lowest bit becomes the OR of the group, then spreads over it.
    let fold = |m: u64, shifts: &[u32], low: u64, ones: u64| {
        let folded = shifts.iter().fold(m, |f, &s| f | (f >> s));
        (folded & low) * ones
    };
    match element {
        _ if m == u64::MAX => m,
        8 => fold(m, &[1, 2, 4], 0x0101_0101_0101_0101, 0xff),
        4 => fold(m, &[1, 2], 0x1111_1111_1111_1111, 0xf),
        2 => fold(m, &[1], 0x5555_5555_5555_5555, 0x3),
        _ => m,
    }
}

/// [`for_each_differing_chunk`] with AVX2, on slices of whole chunks of one length, for
/// `E`-byte elements: a compare of whole elements sets all of an element's bytes in the mask.
///
/// # Safety
/// The processor must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn differing_chunks_avx2<const E: usize>(
    a: &[u8],
    b: &[u8],
    f: &mut impl FnMut(usize, u64),
) {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_cmpeq_epi16, _mm256_cmpeq_epi32, _mm256_cmpeq_epi64,
        _mm256_loadu_si256, _mm256_movemask_epi8,
    };
    for k in 0..a.len().min(b.len()) / 64 {
        let mut equal = 0u64;
        for h in 0..2 {
            let at = 64 * k + 32 * h;
            // SAFETY: bytes at..at + 32 lie in both slices (k < their length / 64); unaligned
            // loads; AVX2 is the caller's promise.
            let m = unsafe {
                let x = _mm256_loadu_si256(a.as_ptr().add(at).cast::<__m256i>());
                let y = _mm256_loadu_si256(b.as_ptr().add(at).cast::<__m256i>());
                let same = match E {
                    8 => _mm256_cmpeq_epi64(x, y),
                    4 => _mm256_cmpeq_epi32(x, y),
                    2 => _mm256_cmpeq_epi16(x, y),
                    _ => _mm256_cmpeq_epi8(x, y),
                };
                _mm256_movemask_epi8(same)
            };
            equal |= u64::from(m as u32) << (32 * h);
        }
        if equal != u64::MAX {
            f(k, !equal);
        }
    }
}

/// The bytes where `a` and `b` differ: bit i set when `a[i] != b[i]`. SSE2 on x86-64 (a byte
/// compare and a mask move per sixteen bytes), a word at a time elsewhere.
#[inline]
pub(crate) fn differing_bytes(a: &[u8; 64], b: &[u8; 64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};
        let mut equal = 0u64;
        for k in 0..4 {
            // SAFETY: SSE2 is part of x86-64; bytes 16k..16k + 16 lie in both 64-byte arrays,
            // and the loads are unaligned ones.
            let m = unsafe {
                let x = _mm_loadu_si128(a.as_ptr().add(16 * k).cast::<__m128i>());
                let y = _mm_loadu_si128(b.as_ptr().add(16 * k).cast::<__m128i>());
                _mm_movemask_epi8(_mm_cmpeq_epi8(x, y))
            };
            equal |= u64::from(m as u16) << (16 * k);
        }
        !equal
    }
    #[cfg(not(target_arch = "x86_64"))]
    differing_bytes_by_words(a, b)
}

/// [`differing_bytes`] a word at a time, with no vector instructions.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn differing_bytes_by_words(a: &[u8; 64], b: &[u8; 64]) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let mut m = 0u64;
    for k in 0..8 {
        let x = u64::from_le_bytes(a[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
        let y = u64::from_le_bytes(b[8 * k..8 * k + 8].try_into().unwrap_or([0; 8]));
        let d = x ^ y;
        // The high bit of each byte of d that is not zero, gathered into 8 bits.
        let high = (((d & LOW7) + LOW7) | d) & !LOW7;
        m |= ((high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * k);
    }
    m
}

/// ThreadSanitizer's hooks, which code compiled for the checker calls (C through `dsmcc
/// --check-races`, Rust through `cargo dsm-races`; ThreadSanitizer's runtime is never linked):
/// `__tsan_read4(addr)` and the like at every load and store, each passing the access and its
/// return address (its source line) on to [`crate::access`]. Off (no `check_races`), that is
/// one load and a branch. Each is a trampoline that reads the return address at `[rsp]` (the
/// call just pushed it), puts the size and kind in the next argument registers and jumps to the
/// Rust function, which returns to the program directly: no stack, no other register touched.
///
/// A thread whose cancellation is asynchronous may be cancelled anywhere in them (they stand for
/// plain loads and stores): the trampolines carry unwind information of their own (`.cfi_*`:
/// without it the C library found no way up and aborted the node), and the Rust functions they
/// jump to may be unwound (`extern "C-unwind"`) and hold nothing to drop, but for the checker's
/// own work, during which cancellation is held off ([`super::CancellationHeld`]).
pub mod hooks {
    use std::sync::atomic::{AtomicBool, Ordering};

    /// One access from instrumented code: `size` bytes at `addr`, a write if `write` is
    /// nonzero, made at the return address `pc`.
    extern "C-unwind" fn access(addr: usize, pc: usize, size: usize, write: usize) {
        if !crate::recorded_fast(addr, size, write != 0, pc) {
            slow(addr, pc, size, write);
        }
    }

    /// [`access`] for an access of `SIZE` bytes, a write if `WRITE`: the mask and the kind are
    /// constants of each hook's copy, and the slow path's call a jump.
    extern "C-unwind" fn access_of<const SIZE: usize, const WRITE: bool>(addr: usize, pc: usize) {
        if !crate::recorded_fast(addr, SIZE, WRITE, pc) {
            slow_of::<SIZE, WRITE>(addr, pc);
        }
    }

    /// [`access_of`]'s slow path.
    #[cold]
    #[inline(never)]
    extern "C-unwind" fn slow_of<const SIZE: usize, const WRITE: bool>(addr: usize, pc: usize) {
        crate::access_slow(addr, SIZE, WRITE, crate::From::Code(pc));
    }

    /// The accesses the fast path did not record.
    #[cold]
    #[inline(never)]
    extern "C-unwind" fn slow(addr: usize, pc: usize, size: usize, write: usize) {
        crate::access_slow(addr, size, write != 0, crate::From::Code(pc));
    }

    /// `__tsan_<name>(addr)` for an access of `size` bytes. An address outside the shared
    /// region (the program's stack and heap; every address while the checker is off) returns at
    /// once, without the Rust function's prologue.
    macro_rules! access_hook {
        ($($name:ident: $size:literal, $write:literal;)*) => {$(
            #[doc = concat!("`", stringify!($name), "(addr)`: ", $size, " bytes at `addr`.")]
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the body reads two words of this crate's statics (the region's base and
            // length: plain loads, as Relaxed atomic loads are on x86-64) into rax, a register
            // the caller does not expect kept, and then returns, or puts the return address in
            // rsi and jumps to the Rust function, which returns to the caller (its address
            // still at [rsp]); the stack and the registers a callee keeps are untouched.
            #[unsafe(naked)]
            #[unsafe(no_mangle)]
            pub extern "C-unwind" fn $name(_addr: *const u8) {
                core::arch::naked_asm!(
                    ".cfi_startproc",
                    "mov rax, rdi",
                    "sub rax, qword ptr [rip + {base}]",
                    "cmp rax, qword ptr [rip + {len}]",
                    "jae 2f",
                    "mov rsi, [rsp]",
                    "jmp {hook}",
                    "2:",
                    "ret",
                    ".cfi_endproc",
                    base = sym crate::BASE,
                    len = sym crate::LEN,
                    hook = sym access_of::<$size, $write>,
                )
            }
        )*};
    }

    access_hook! {
        __tsan_read1: 1, false; __tsan_read2: 2, false; __tsan_read4: 4, false;
        __tsan_read8: 8, false; __tsan_read16: 16, false;
        __tsan_write1: 1, true; __tsan_write2: 2, true; __tsan_write4: 4, true;
        __tsan_write8: 8, true; __tsan_write16: 16, true;
        __tsan_unaligned_read2: 2, false; __tsan_unaligned_read4: 4, false;
        __tsan_unaligned_read8: 8, false; __tsan_unaligned_read16: 16, false;
        __tsan_unaligned_write2: 2, true; __tsan_unaligned_write4: 4, true;
        __tsan_unaligned_write8: 8, true; __tsan_unaligned_write16: 16, true;
        __tsan_volatile_read1: 1, false; __tsan_volatile_read2: 2, false;
        __tsan_volatile_read4: 4, false; __tsan_volatile_read8: 8, false;
        __tsan_volatile_read16: 16, false;
        __tsan_volatile_write1: 1, true; __tsan_volatile_write2: 2, true;
        __tsan_volatile_write4: 4, true; __tsan_volatile_write8: 8, true;
        __tsan_volatile_write16: 16, true;
    }

    /// `__tsan_<name>(addr, size)`.
    macro_rules! range_hook {
        ($($name:ident: $write:literal;)*) => {$(
            #[doc = concat!("`", stringify!($name), "(addr, size)`.")]
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as the hooks above.
            #[unsafe(naked)]
            #[unsafe(no_mangle)]
            pub extern "C-unwind" fn $name(_addr: *const u8, _size: usize) {
                core::arch::naked_asm!(
                    ".cfi_startproc",
                    "mov rdx, rsi",
                    "mov rsi, [rsp]",
                    concat!("mov ecx, ", $write),
                    "jmp {hook}",
                    ".cfi_endproc",
                    hook = sym access,
                )
            }
        )*};
    }

    range_hook! {
        __tsan_read_range: 0;
        __tsan_write_range: 1;
    }

    /// `__tsan_<name>(dst, src_or_byte, n)`, the compiler's copies and fills (LLVM's
    /// instrumentation calls these in place of `memcpy`, `memmove` and `memset`): `$imp(dst,
    /// src_or_byte, n, return address)`.
    macro_rules! copy_hook {
        ($($name:ident => $imp:ident, $second:ty;)*) => {$(
            #[doc = concat!("`", stringify!($name), "`: recorded, then done by the C library's.")]
            ///
            /// # Safety
            /// The C library function's contract (the instrumented code's own copy or fill).
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a move into the fourth argument register and a jump, as the hooks above.
            #[unsafe(naked)]
            #[unsafe(no_mangle)]
            pub unsafe extern "C-unwind" fn $name(
                _dst: *mut libc::c_void,
                _src: $second,
                _n: usize,
            ) -> *mut libc::c_void {
                core::arch::naked_asm!(
                    ".cfi_startproc",
                    "mov rcx, [rsp]",
                    "jmp {imp}",
                    ".cfi_endproc",
                    imp = sym $imp,
                )
            }
        )*};
    }

    copy_hook! {
        __tsan_memcpy => memcpy_at, *const libc::c_void;
        __tsan_memmove => memmove_at, *const libc::c_void;
        __tsan_memset => memset_at, libc::c_int;
    }

    /// The C library's copies, declared as calls that may unwind: the compiler's own copies
    /// (a structure's assignment) come here, and a thread whose cancellation is asynchronous may
    /// be cancelled inside one (see `jia`'s `entry` module).
    mod unwinding {
        unsafe extern "C-unwind" {
            pub(super) fn memcpy(
                dst: *mut libc::c_void,
                src: *const libc::c_void,
                n: usize,
            ) -> *mut libc::c_void;
            pub(super) fn memmove(
                dst: *mut libc::c_void,
                src: *const libc::c_void,
                n: usize,
            ) -> *mut libc::c_void;
            pub(super) fn memset(
                dst: *mut libc::c_void,
                c: libc::c_int,
                n: usize,
            ) -> *mut libc::c_void;
        }
    }

    /// `n` bytes at `addr` read (or written) from `pc`.
    pub fn touched(addr: *const libc::c_void, n: usize, write: bool, pc: usize) {
        crate::access(addr as usize, n, write, crate::From::Code(pc));
    }

    /// `memcpy(dst, src, n)` from `pc`: recorded, then made (also libjia's
    /// `__dsm_checked_memcpy`, which `dsmcc` renames a checked object's calls to).
    ///
    /// # Safety
    /// `memcpy`'s contract (the instrumented code's own copy).
    pub unsafe extern "C-unwind" fn memcpy_at(
        dst: *mut libc::c_void,
        src: *const libc::c_void,
        n: usize,
        pc: usize,
    ) -> *mut libc::c_void {
        touched(src, n, false, pc);
        touched(dst, n, true, pc);
        // SAFETY: the caller's promise: the compiler's copy, whose operands are valid.
        unsafe { unwinding::memcpy(dst, src, n) }
    }

    /// `memmove(dst, src, n)` from `pc`.
    ///
    /// # Safety
    /// `memmove`'s contract.
    pub unsafe extern "C-unwind" fn memmove_at(
        dst: *mut libc::c_void,
        src: *const libc::c_void,
        n: usize,
        pc: usize,
    ) -> *mut libc::c_void {
        touched(src, n, false, pc);
        touched(dst, n, true, pc);
        // SAFETY: as memcpy_at.
        unsafe { unwinding::memmove(dst, src, n) }
    }

    /// `memset(dst, byte, n)` from `pc`.
    ///
    /// # Safety
    /// `memset`'s contract.
    pub unsafe extern "C-unwind" fn memset_at(
        dst: *mut libc::c_void,
        byte: libc::c_int,
        n: usize,
        pc: usize,
    ) -> *mut libc::c_void {
        touched(dst, n, true, pc);
        // SAFETY: as memcpy_at.
        unsafe { unwinding::memset(dst, byte, n) }
    }

    /// Whether an instrumented object called [`__tsan_init`] (its constructor does, before
    /// `main`).
    static INSTRUMENTED: AtomicBool = AtomicBool::new(false);

    /// Whether the program has code built for the race checker.
    pub fn instrumented() -> bool {
        INSTRUMENTED.load(Ordering::Relaxed)
    }

    /// Whether the program is C (libjia's `jia_init` says so: [`program_is_c`]).
    static C_PROGRAM: AtomicBool = AtomicBool::new(false);

    /// The program is C: a build for the checker is `dsmcc --check-races`'s (libjia says so),
    /// not `cargo dsm-races`'.
    pub fn program_is_c() {
        C_PROGRAM.store(true, Ordering::Relaxed);
    }

    /// What to tell the user of a checked program not built for the checker, if anything: C's
    /// hint is libjia's (it prints it), a Rust program's this.
    pub fn rust_build_hint() -> Option<&'static str> {
        (crate::on() && !instrumented() && !C_PROGRAM.load(Ordering::Relaxed)).then_some(
            "dsm: check_races: reads through slices and raw pointers are not seen in this \
             build; build with `cargo dsm-races` to see them",
        )
    }

    /// ThreadSanitizer's start-up call, made by every instrumented object's constructor: noted
    /// (the checker itself starts with the DSM).
    #[unsafe(no_mangle)]
    pub extern "C" fn __tsan_init() {
        INSTRUMENTED.store(true, Ordering::Relaxed);
    }

    /// Called at every instrumented function's entry (C; `cargo dsm-races` turns it off): not
    /// needed, lines come from each access.
    #[unsafe(no_mangle)]
    pub extern "C" fn __tsan_func_entry(_pc: *const u8) {}

    /// Called at every instrumented function's exit.
    #[unsafe(no_mangle)]
    pub extern "C" fn __tsan_func_exit() {}
}

#[cfg(test)]
mod tests {
    /// The chunk walker (AVX2 here when the processor has it) finds what a comparison of
    /// elements finds, chunk by chunk, for each element size, and skips equal chunks.
    #[test]
    fn differing_chunks_are_found() {
        let a: Vec<u8> = (0..64 * 9 + 5).map(|i| (i * 131 % 251) as u8).collect();
        let mut b = a.clone();
        for i in [0, 63, 64, 100, 300, 301, 575, 64 * 9 + 2] {
            b[i] ^= 1;
        }
        for element in [1, 2, 4, 8] {
            let mut got = Vec::new();
            super::for_each_differing_chunk(&a, &b, element, |k, m| got.push((k, m)));
            let mut want = Vec::new();
            for k in 0..9 {
                let differs = |i: usize| {
                    let first = 64 * k + i - i % element;
                    a[first..first + element] != b[first..first + element]
                };
                let m = (0..64).fold(0u64, |m, i| m | u64::from(differs(i)) << i);
                if m != 0 {
                    want.push((k, m));
                }
            }
            assert_eq!(got, want, "element {element}");
            // The fold the other paths use agrees.
            for &(k, m) in &want {
                let x: &[u8; 64] = a[64 * k..64 * k + 64].try_into().unwrap();
                let y: &[u8; 64] = b[64 * k..64 * k + 64].try_into().unwrap();
                assert_eq!(
                    super::whole_elements(super::differing_bytes(x, y), element),
                    m
                );
            }
        }
    }

    /// Both ways of finding differing bytes agree with a byte-by-byte comparison.
    #[test]
    fn differing_bytes_are_found_both_ways() {
        let a: [u8; 64] = std::array::from_fn(|i| (i * 37) as u8);
        for flips in [
            vec![],
            vec![0],
            vec![63],
            vec![7, 8, 9],
            (0..64).step_by(3).collect(),
        ] {
            let mut b = a;
            for &i in &flips {
                b[i] ^= 0x80 >> (i % 8);
            }
            let want = flips.iter().fold(0u64, |m, &i| m | 1 << i);
            assert_eq!(super::differing_bytes(&a, &b), want, "{flips:?}");
            assert_eq!(super::differing_bytes_by_words(&a, &b), want, "{flips:?}");
        }
    }
}
