//! The race checker's entry points for C programs built with `dsmcc --check-races`, in place of
//! ThreadSanitizer's runtime (never linked):
//!
//! - the compiler's hooks: `__tsan_read4(addr)` and the like at every load and store, each
//!   passing the access and its return address (its source line) to
//!   `dsm_races::access`. Off (no `check_races`), that is one load and a branch;
//! - the C library's memory and string functions, which `dsmcc` renames a checked object's calls
//!   to;
//! - the program's signal handlers, when checking;
//! - pthread synchronisation and OpenMP (gcc's libgomp), which order the threads of a node.
//!
//! The entry points that need their caller's address are trampolines ([`crate::entry`]).

use std::ffi::{c_char, c_int, c_void};

use crate::entry::pc_entry;

/// Whether the program has code built for the checker (its hooks, `__tsan_read4` and the like,
/// are the checker's own: `dsm_races::hooks`).
pub(crate) fn instrumented() -> bool {
    dsm_races::hooks::instrumented()
}

/// What the hooks of plain accesses (and `__tsan_init`) of an object gcc instrumented for its
/// atomics are renamed to (dsmcc's `Renames::PlainAccesses`, `__tsan_X` to
/// `__dsm_unchecked_X`): functions that do nothing. Each takes whatever arguments its hook had
/// (in registers the caller does not expect kept) and ignores them.
macro_rules! unchecked_hooks {
    ($($name:ident),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub extern "C-unwind" fn $name() {}
    )*};
}

unchecked_hooks!(
    __dsm_unchecked_init,
    __dsm_unchecked_func_entry,
    __dsm_unchecked_func_exit,
    __dsm_unchecked_read1,
    __dsm_unchecked_read2,
    __dsm_unchecked_read4,
    __dsm_unchecked_read8,
    __dsm_unchecked_read16,
    __dsm_unchecked_write1,
    __dsm_unchecked_write2,
    __dsm_unchecked_write4,
    __dsm_unchecked_write8,
    __dsm_unchecked_write16,
    __dsm_unchecked_unaligned_read2,
    __dsm_unchecked_unaligned_read4,
    __dsm_unchecked_unaligned_read8,
    __dsm_unchecked_unaligned_read16,
    __dsm_unchecked_unaligned_write2,
    __dsm_unchecked_unaligned_write4,
    __dsm_unchecked_unaligned_write8,
    __dsm_unchecked_unaligned_write16,
    __dsm_unchecked_volatile_read1,
    __dsm_unchecked_volatile_read2,
    __dsm_unchecked_volatile_read4,
    __dsm_unchecked_volatile_read8,
    __dsm_unchecked_volatile_read16,
    __dsm_unchecked_volatile_write1,
    __dsm_unchecked_volatile_write2,
    __dsm_unchecked_volatile_write4,
    __dsm_unchecked_volatile_write8,
    __dsm_unchecked_volatile_write16,
    __dsm_unchecked_read_range,
    __dsm_unchecked_write_range,
    __dsm_unchecked_vptr_update,
    __dsm_unchecked_vptr_read,
);

// ----- The C library's memory and string functions, seen by the race checker -----
//
// `dsmcc --check-races` renames the calls of a checked object to these functions (`objcopy
// --redefine-sym memcpy=__dsm_checked_memcpy` ...), the compiler's own too (a loop made into a
// `memset`). Each records what the function reads and writes, from its caller's line, and then
// calls the C library's. Off (no `check_races`), the recording is one load and a branch.

pub(crate) use dsm_races::hooks::touched;
use dsm_races::hooks::{memcpy_at, memmove_at, memset_at};

/// How many bytes of `a` and `b` a comparison of at most `n` reads: up to the first that
/// differs, or (`strings`) the first NUL, included.
///
/// # Safety
/// `a` and `b` hold `n` bytes, or (`strings`) NUL-terminated strings.
unsafe fn compared(a: *const c_void, b: *const c_void, n: usize, strings: bool) -> usize {
    let (a, b) = (a.cast::<u8>(), b.cast::<u8>());
    let mut i = 0;
    while i < n {
        // SAFETY: byte i of each lies before the end the caller promises (i < n, and no NUL
        // before it for strings).
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y || (strings && x == 0) {
            return i + 1;
        }
        i += 1;
    }
    n
}

/// `n` bytes copied from `s` to `d` from `pc`: read at `s`, written at `d`.
fn bytes_copied(d: *mut c_void, s: *const c_void, n: usize, pc: usize) {
    touched(s, n, false, pc);
    touched(d, n, true, pc);
}

/// A string copied from `s` to `d` from `pc` (`strcpy`, `stpcpy`): its bytes and NUL read at
/// `s` and written at `d`.
///
/// # Safety
/// `s` is a string.
unsafe fn string_copied(d: *mut c_char, s: *const c_char, pc: usize) {
    // SAFETY: the caller's promise.
    let n = unsafe { libc::strlen(s) } + 1;
    touched(s.cast(), n, false, pc);
    touched(d.cast(), n, true, pc);
}

unsafe extern "C-unwind" fn strcpy_at(d: *mut c_char, s: *const c_char, pc: usize) -> *mut c_char {
    // SAFETY: `s` is a string (the caller's promise, as to strcpy).
    unsafe { string_copied(d, s, pc) };
    // SAFETY: the caller's arguments, as to strcpy.
    unsafe { libc::strcpy(d, s) }
}

unsafe extern "C-unwind" fn strncpy_at(
    d: *mut c_char,
    s: *const c_char,
    n: usize,
    pc: usize,
) -> *mut c_char {
    // SAFETY: `s` holds a string or n bytes (the caller's promise, as to strncpy).
    let read = (unsafe { libc::strnlen(s, n) } + 1).min(n);
    touched(s.cast(), read, false, pc);
    touched(d.cast(), n, true, pc);
    // SAFETY: the caller's arguments, as to strncpy.
    unsafe { libc::strncpy(d, s, n) }
}

unsafe extern "C-unwind" fn strcat_at(d: *mut c_char, s: *const c_char, pc: usize) -> *mut c_char {
    // SAFETY: both are strings (the caller's promise, as to strcat).
    let (dl, sl) = unsafe { (libc::strlen(d), libc::strlen(s)) };
    touched(d.cast(), dl, false, pc);
    touched(s.cast(), sl + 1, false, pc);
    // SAFETY: d's NUL and the bytes after it lie in d (room for the result: the caller's
    // promise).
    touched(unsafe { d.add(dl) }.cast(), sl + 1, true, pc);
    // SAFETY: the caller's arguments, as to strcat.
    unsafe { libc::strcat(d, s) }
}

unsafe extern "C-unwind" fn strlen_at(s: *const c_char, pc: usize) -> usize {
    // SAFETY: `s` is a string (the caller's promise, as to strlen).
    let n = unsafe { libc::strlen(s) };
    touched(s.cast(), n + 1, false, pc);
    n
}

unsafe extern "C-unwind" fn strcmp_at(a: *const c_char, b: *const c_char, pc: usize) -> c_int {
    // SAFETY: both are strings (the caller's promise, as to strcmp).
    let n = unsafe { compared(a.cast(), b.cast(), usize::MAX, true) };
    touched(a.cast(), n, false, pc);
    touched(b.cast(), n, false, pc);
    // SAFETY: the caller's arguments, as to strcmp.
    unsafe { libc::strcmp(a, b) }
}

unsafe extern "C-unwind" fn strncmp_at(
    a: *const c_char,
    b: *const c_char,
    n: usize,
    pc: usize,
) -> c_int {
    // SAFETY: strings or n bytes (the caller's promise, as to strncmp).
    let read = unsafe { compared(a.cast(), b.cast(), n, true) };
    touched(a.cast(), read, false, pc);
    touched(b.cast(), read, false, pc);
    // SAFETY: the caller's arguments, as to strncmp.
    unsafe { libc::strncmp(a, b, n) }
}

unsafe extern "C-unwind" fn memcmp_at(
    a: *const c_void,
    b: *const c_void,
    n: usize,
    pc: usize,
) -> c_int {
    // SAFETY: n bytes each (the caller's promise, as to memcmp).
    let read = unsafe { compared(a, b, n, false) };
    touched(a, read, false, pc);
    touched(b, read, false, pc);
    // SAFETY: the caller's arguments, as to memcmp.
    unsafe { libc::memcmp(a, b, n) }
}

unsafe extern "C-unwind" fn stpcpy_at(d: *mut c_char, s: *const c_char, pc: usize) -> *mut c_char {
    // SAFETY: `s` is a string (the caller's promise, as to stpcpy).
    unsafe { string_copied(d, s, pc) };
    // SAFETY: the caller's arguments, as to stpcpy.
    unsafe { libc::stpcpy(d, s) }
}

unsafe extern "C-unwind" fn strncat_at(
    d: *mut c_char,
    s: *const c_char,
    n: usize,
    pc: usize,
) -> *mut c_char {
    // SAFETY: `d` is a string, `s` a string or n bytes (the caller's promise, as to strncat).
    let (dl, sl) = unsafe { (libc::strlen(d), libc::strnlen(s, n)) };
    touched(d.cast(), dl, false, pc);
    touched(s.cast(), sl, false, pc);
    // SAFETY: d's NUL and the bytes after it lie in d (room for the result: the caller's
    // promise).
    touched(unsafe { d.add(dl) }.cast(), sl + 1, true, pc);
    // SAFETY: the caller's arguments, as to strncat.
    unsafe { libc::strncat(d, s, n) }
}

unsafe extern "C-unwind" fn strnlen_at(s: *const c_char, n: usize, pc: usize) -> usize {
    // SAFETY: `s` holds a string or n bytes (the caller's promise, as to strnlen).
    let len = unsafe { libc::strnlen(s, n) };
    touched(s.cast(), (len + 1).min(n), false, pc);
    len
}

unsafe extern "C-unwind" fn memchr_at(
    s: *const c_void,
    c: c_int,
    n: usize,
    pc: usize,
) -> *mut c_void {
    // SAFETY: `s` holds n bytes (the caller's promise, as to memchr).
    let found = unsafe { libc::memchr(s, c, n) };
    let read = if found.is_null() {
        n
    } else {
        found as usize - s as usize + 1
    };
    touched(s, read, false, pc);
    found
}

unsafe extern "C-unwind" fn strchr_at(s: *const c_char, c: c_int, pc: usize) -> *mut c_char {
    // SAFETY: `s` is a string (the caller's promise, as to strchr).
    let found = unsafe { libc::strchr(s, c) };
    let read = if found.is_null() {
        // SAFETY: as above.
        (unsafe { libc::strlen(s) }) + 1
    } else {
        found as usize - s as usize + 1
    };
    touched(s.cast(), read, false, pc);
    found
}

unsafe extern "C-unwind" fn strrchr_at(s: *const c_char, c: c_int, pc: usize) -> *mut c_char {
    // SAFETY: `s` is a string (the caller's promise, as to strrchr): all of it is read.
    let n = unsafe { libc::strlen(s) } + 1;
    touched(s.cast(), n, false, pc);
    // SAFETY: the caller's arguments, as to strrchr.
    unsafe { libc::strrchr(s, c) }
}

unsafe extern "C-unwind" fn strstr_at(
    h: *const c_char,
    needle: *const c_char,
    pc: usize,
) -> *mut c_char {
    // SAFETY: both are strings (the caller's promise, as to strstr).
    let (found, nl) = unsafe { (libc::strstr(h, needle), libc::strlen(needle)) };
    let read = if found.is_null() {
        // SAFETY: as above.
        (unsafe { libc::strlen(h) }) + 1
    } else {
        found as usize - h as usize + nl
    };
    touched(h.cast(), read, false, pc);
    touched(needle.cast(), nl + 1, false, pc);
    found
}

/// A C comparison function, as `qsort` and `bsearch` take it.
type Compare = unsafe extern "C-unwind" fn(*const c_void, *const c_void) -> c_int;

unsafe extern "C-unwind" fn qsort_at(
    base: *mut c_void,
    n: usize,
    size: usize,
    cmp: Option<Compare>,
    pc: usize,
) {
    // Sorting reads every element and may move any of them (the program's comparison is its
    // own code, instrumented: its reads are seen where it makes them).
    touched(base, n.saturating_mul(size), false, pc);
    touched(base, n.saturating_mul(size), true, pc);
    // SAFETY: the caller's arguments, as to qsort.
    unsafe { crate::cancellable::qsort(base, n, size, cmp) }
}

unsafe extern "C-unwind" fn mempcpy_at(
    d: *mut c_void,
    s: *const c_void,
    n: usize,
    pc: usize,
) -> *mut c_void {
    bytes_copied(d, s, n, pc);
    // SAFETY: the caller's arguments, as to mempcpy.
    unsafe { libc::mempcpy(d, s, n) }
}

unsafe extern "C-unwind" fn memccpy_at(
    d: *mut c_void,
    s: *const c_void,
    c: c_int,
    n: usize,
    pc: usize,
) -> *mut c_void {
    // SAFETY: `s` holds n bytes (the caller's promise, as to memccpy): up to `c`, included.
    let found = unsafe { libc::memchr(s, c, n) };
    let copied = if found.is_null() {
        n
    } else {
        found as usize - s as usize + 1
    };
    bytes_copied(d, s, copied, pc);
    // SAFETY: the caller's arguments, as to memccpy.
    unsafe { libc::memccpy(d, s, c, n) }
}

unsafe extern "C-unwind" {
    fn bzero(s: *mut c_void, n: usize);
    fn rawmemchr(s: *const c_void, c: c_int) -> *mut c_void;
}

unsafe extern "C-unwind" fn bzero_at(d: *mut c_void, n: usize, pc: usize) {
    touched(d, n, true, pc);
    // SAFETY: the caller's arguments, as to bzero.
    unsafe { bzero(d, n) }
}

unsafe extern "C-unwind" fn explicit_bzero_at(d: *mut c_void, n: usize, pc: usize) {
    touched(d, n, true, pc);
    // SAFETY: the caller's arguments, as to explicit_bzero.
    unsafe { libc::explicit_bzero(d, n) }
}

unsafe extern "C-unwind" fn stpncpy_at(
    d: *mut c_char,
    s: *const c_char,
    n: usize,
    pc: usize,
) -> *mut c_char {
    // SAFETY: `s` holds a string or n bytes (the caller's promise, as to stpncpy).
    let read = (unsafe { libc::strnlen(s, n) } + 1).min(n);
    touched(s.cast(), read, false, pc);
    touched(d.cast(), n, true, pc);
    // SAFETY: the caller's arguments, as to stpncpy.
    unsafe { libc::stpncpy(d, s, n) }
}

unsafe extern "C-unwind" fn strdup_at(s: *const c_char, pc: usize) -> *mut c_char {
    // SAFETY: `s` is a string (the caller's promise, as to strdup).
    let n = unsafe { libc::strlen(s) } + 1;
    touched(s.cast(), n, false, pc);
    // SAFETY: as above.
    unsafe { libc::strdup(s) }
}

unsafe extern "C-unwind" fn strndup_at(s: *const c_char, n: usize, pc: usize) -> *mut c_char {
    // SAFETY: `s` holds a string or n bytes (the caller's promise, as to strndup).
    let read = (unsafe { libc::strnlen(s, n) } + 1).min(n);
    touched(s.cast(), read, false, pc);
    // SAFETY: as above.
    unsafe { libc::strndup(s, n) }
}

/// A span function's reads: `s` up to the byte that stopped it (`stop` bytes in, the NUL if it
/// went to the end), included, and all of the set `set` with its NUL.
///
/// # Safety
/// `s` and `set` are strings, `stop` at most `s`'s length.
unsafe fn spanned(s: *const c_char, stop: usize, set: *const c_char, pc: usize) {
    touched(s.cast(), stop + 1, false, pc);
    // SAFETY: the caller's promise.
    let n = unsafe { libc::strlen(set) } + 1;
    touched(set.cast(), n, false, pc);
}

unsafe extern "C-unwind" fn strspn_at(s: *const c_char, accept: *const c_char, pc: usize) -> usize {
    // SAFETY: both are strings (the caller's promise, as to strspn).
    let n = unsafe { libc::strspn(s, accept) };
    // SAFETY: as above; n is at most s's length.
    unsafe { spanned(s, n, accept, pc) };
    n
}

unsafe extern "C-unwind" fn strcspn_at(
    s: *const c_char,
    reject: *const c_char,
    pc: usize,
) -> usize {
    // SAFETY: both are strings (the caller's promise, as to strcspn).
    let n = unsafe { libc::strcspn(s, reject) };
    // SAFETY: as above.
    unsafe { spanned(s, n, reject, pc) };
    n
}

unsafe extern "C-unwind" fn strpbrk_at(
    s: *const c_char,
    accept: *const c_char,
    pc: usize,
) -> *mut c_char {
    // SAFETY: both are strings (the caller's promise, as to strpbrk).
    let n = unsafe { libc::strcspn(s, accept) };
    // SAFETY: as above.
    unsafe { spanned(s, n, accept, pc) };
    // SAFETY: as above.
    unsafe { libc::strpbrk(s, accept) }
}

/// How many bytes of strings `a` and `b` a comparison that ignores case reads, at most `n`: up
/// to the first that differs, or the NUL, included.
///
/// # Safety
/// `a` and `b` are strings or hold `n` bytes.
unsafe fn compared_ignoring_case(a: *const c_char, b: *const c_char, n: usize) -> usize {
    let (a, b) = (a.cast::<u8>(), b.cast::<u8>());
    let mut i = 0;
    while i < n {
        // SAFETY: byte i of each lies before the end the caller promises.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x.eq_ignore_ascii_case(&y) && x != 0 {
            i += 1;
            continue;
        }
        return i + 1;
    }
    n
}

unsafe extern "C-unwind" fn strcasecmp_at(a: *const c_char, b: *const c_char, pc: usize) -> c_int {
    // SAFETY: both are strings (the caller's promise, as to strcasecmp).
    let n = unsafe { compared_ignoring_case(a, b, usize::MAX) };
    touched(a.cast(), n, false, pc);
    touched(b.cast(), n, false, pc);
    // SAFETY: as above.
    unsafe { libc::strcasecmp(a, b) }
}

unsafe extern "C-unwind" fn strncasecmp_at(
    a: *const c_char,
    b: *const c_char,
    n: usize,
    pc: usize,
) -> c_int {
    // SAFETY: both are strings or hold n bytes (the caller's promise, as to strncasecmp).
    let read = unsafe { compared_ignoring_case(a, b, n) };
    touched(a.cast(), read, false, pc);
    touched(b.cast(), read, false, pc);
    // SAFETY: as above.
    unsafe { libc::strncasecmp(a, b, n) }
}

unsafe extern "C-unwind" fn memrchr_at(
    s: *const c_void,
    c: c_int,
    n: usize,
    pc: usize,
) -> *mut c_void {
    // SAFETY: `s` holds n bytes (the caller's promise, as to memrchr): read from its end down
    // to what it found.
    let found = unsafe { libc::memrchr(s, c, n) };
    if found.is_null() {
        touched(s, n, false, pc);
    } else {
        touched(found, s as usize + n - found as usize, false, pc);
    }
    found
}

unsafe extern "C-unwind" fn rawmemchr_at(s: *const c_void, c: c_int, pc: usize) -> *mut c_void {
    // SAFETY: `s` holds `c` (the caller's promise, as to rawmemchr).
    let found = unsafe { rawmemchr(s, c) };
    touched(s, found as usize - s as usize + 1, false, pc);
    found
}

unsafe extern "C-unwind" fn strchrnul_at(s: *const c_char, c: c_int, pc: usize) -> *mut c_char {
    // SAFETY: `s` is a string (the caller's promise, as to strchrnul): up to what it found or
    // the NUL.
    let found = unsafe { libc::strchrnul(s, c) };
    touched(s.cast(), found as usize - s as usize + 1, false, pc);
    found
}

unsafe extern "C-unwind" fn memmem_at(
    h: *const c_void,
    hl: usize,
    needle: *const c_void,
    nl: usize,
    pc: usize,
) -> *mut c_void {
    // SAFETY: the caller's arguments, as to memmem.
    let found = unsafe { libc::memmem(h, hl, needle, nl) };
    let read = if found.is_null() {
        hl
    } else {
        found as usize - h as usize + nl
    };
    touched(h, read, false, pc);
    touched(needle, nl, false, pc);
    found
}

unsafe extern "C-unwind" fn strcasestr_at(
    h: *const c_char,
    needle: *const c_char,
    pc: usize,
) -> *mut c_char {
    // SAFETY: both are strings (the caller's promise, as to strcasestr).
    let (found, nl) = unsafe { (libc::strcasestr(h, needle), libc::strlen(needle)) };
    let read = if found.is_null() {
        // SAFETY: as above.
        (unsafe { libc::strlen(h) }) + 1
    } else {
        found as usize - h as usize + nl
    };
    touched(h.cast(), read, false, pc);
    touched(needle.cast(), nl + 1, false, pc);
    found
}

/// `strtok_r` on the string at `from` (`s`, or where `*save` left off): its bytes read up to
/// where the next call will start (or its end and NUL), the NUL it writes in place of the
/// delimiter that ends the token, and the delimiters read.
///
/// # Safety
/// As `strtok_r`: `from` and `delim` are strings, `save` points to a pointer.
unsafe fn tokenised(
    s: *mut c_char,
    delim: *const c_char,
    save: *mut *mut c_char,
    pc: usize,
) -> *mut c_char {
    // SAFETY: the caller's promise.
    let from = if s.is_null() { unsafe { *save } } else { s };
    if from.is_null() {
        // SAFETY: as above (glibc answers null).
        return unsafe { libc::strtok_r(s, delim, save) };
    }
    // SAFETY: as above.
    let (len, dl) = unsafe { (libc::strlen(from), libc::strlen(delim)) };
    // SAFETY: the caller's arguments, as to strtok_r.
    let token = unsafe { libc::strtok_r(s, delim, save) };
    // SAFETY: as above: strtok_r left `*save` inside the string, or at its end.
    let next = unsafe { *save } as usize;
    let end = from as usize + len;
    if token.is_null() || next < from as usize || next > end {
        touched(from.cast(), len + 1, false, pc);
    } else if next == end {
        // The token ran to the string's end: nothing written.
        touched(from.cast(), len + 1, false, pc);
    } else {
        // A delimiter ended it, now its NUL.
        touched(from.cast(), next - from as usize, false, pc);
        touched((next - 1) as *const c_void, 1, true, pc);
    }
    touched(delim.cast(), dl + 1, false, pc);
    token
}

unsafe extern "C-unwind" fn strtok_r_at(
    s: *mut c_char,
    delim: *const c_char,
    save: *mut *mut c_char,
    pc: usize,
) -> *mut c_char {
    // SAFETY: the caller's arguments, as to strtok_r.
    unsafe { tokenised(s, delim, save, pc) }
}

/// Where `strtok` goes on from: the checked objects' own (the C library's is not reachable;
/// like it, one for the whole process).
static STRTOK_SAVED: std::sync::atomic::AtomicPtr<c_char> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

unsafe extern "C-unwind" fn strtok_at(
    s: *mut c_char,
    delim: *const c_char,
    pc: usize,
) -> *mut c_char {
    use std::sync::atomic::Ordering::Relaxed;
    let mut save = STRTOK_SAVED.load(Relaxed);
    // SAFETY: the caller's arguments, as to strtok, with the saved place.
    let token = unsafe { tokenised(s, delim, &mut save, pc) };
    STRTOK_SAVED.store(save, Relaxed);
    token
}

/// A number parsed from string `s` (`strtol` and the others): its bytes read up to the first
/// not taken (`end`), included; where nothing was taken, up to the first byte that is neither
/// white space nor a sign, included.
///
/// # Safety
/// `s` is a string and `end` inside it, at or after `s`.
unsafe fn parsed(s: *const c_char, end: *const c_char, pc: usize) {
    let mut n = end as usize - s as usize;
    if n == 0 {
        loop {
            // SAFETY: the caller's promise: the scan stops at the NUL at the latest.
            let byte = unsafe { *s.add(n) } as u8;
            if !matches!(byte, b' ' | b'\t'..=b'\r' | b'+' | b'-') {
                break;
            }
            n += 1;
        }
    }
    touched(s.cast(), n + 1, false, pc);
}

/// `strtol`-like entry `$name` (`$imp`), of type `$t`, with a base or not.
macro_rules! parse_entry {
    ($imp:ident, $lib:path, $t:ty, base) => {
        unsafe extern "C-unwind" fn $imp(
            s: *const c_char,
            end: *mut *mut c_char,
            base: c_int,
            pc: usize,
        ) -> $t {
            let mut stop = std::ptr::null_mut();
            // SAFETY: the caller's arguments, as to the C library's function, with a place of
            // ours for the end when the caller gave none.
            let v = unsafe { $lib(s, &mut stop, base) };
            // SAFETY: `stop` is inside `s`, at or after it.
            unsafe { parsed(s, stop, pc) };
            if !end.is_null() {
                // SAFETY: the caller's pointer, as the C library's function writes it.
                unsafe { *end = stop };
            }
            v
        }
    };
    ($imp:ident, $lib:path, $t:ty) => {
        unsafe extern "C-unwind" fn $imp(s: *const c_char, end: *mut *mut c_char, pc: usize) -> $t {
            let mut stop = std::ptr::null_mut();
            // SAFETY: as above.
            let v = unsafe { $lib(s, &mut stop) };
            // SAFETY: as above.
            unsafe { parsed(s, stop, pc) };
            if !end.is_null() {
                // SAFETY: as above.
                unsafe { *end = stop };
            }
            v
        }
    };
}

parse_entry!(strtol_at, libc::strtol, libc::c_long, base);
parse_entry!(strtoul_at, libc::strtoul, libc::c_ulong, base);
parse_entry!(strtoll_at, libc::strtoll, libc::c_longlong, base);
parse_entry!(strtoull_at, libc::strtoull, libc::c_ulonglong, base);
parse_entry!(strtod_at, libc::strtod, f64);
parse_entry!(strtof_at, libc::strtof, f32);

unsafe extern "C-unwind" fn atoi_at(s: *const c_char, pc: usize) -> c_int {
    // SAFETY: `s` is a string (the caller's promise, as to atoi, which is strtol base 10).
    unsafe { strtol_at(s, std::ptr::null_mut(), 10, pc) as c_int }
}

unsafe extern "C-unwind" fn atol_at(s: *const c_char, pc: usize) -> libc::c_long {
    // SAFETY: as above.
    unsafe { strtol_at(s, std::ptr::null_mut(), 10, pc) }
}

unsafe extern "C-unwind" fn atoll_at(s: *const c_char, pc: usize) -> libc::c_longlong {
    // SAFETY: as above.
    unsafe { strtoll_at(s, std::ptr::null_mut(), 10, pc) }
}

unsafe extern "C-unwind" fn atof_at(s: *const c_char, pc: usize) -> f64 {
    // SAFETY: as above (atof is strtod).
    unsafe { strtod_at(s, std::ptr::null_mut(), pc) }
}

/// `n` bytes at `p` read (`write` 0) or written by a call of the printf or scanf family made at
/// `pc` (a return address in the program): what jia.h's wrappers of those calls found in their
/// arguments, in checked builds.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn __dsm_checked_range_at(
    p: *const c_void,
    n: usize,
    write: c_int,
    pc: *const c_void,
) {
    touched(p, n, write != 0, pc as usize);
}

/// The string at `s` read (`write` 0) or written by a call of the printf or scanf family made at
/// `pc`: up to its NUL, which is included, or `max` bytes (a precision).
///
/// # Safety
/// `s` is null, or holds a NUL or `max` readable bytes (as the call it comes from asked).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_string_at(
    s: *const c_char,
    max: usize,
    write: c_int,
    pc: *const c_void,
) {
    if s.is_null() {
        return;
    }
    // SAFETY: the caller's promise.
    let n = unsafe { libc::strnlen(s, max) };
    touched(
        s.cast(),
        if n < max { n + 1 } else { n },
        write != 0,
        pc as usize,
    );
}

// The names below are the ones `dsmcc` renames calls to (its `CHECKED_MEMORY_FUNCTIONS`).
pc_entry! {
    __dsm_checked_memcpy => memcpy_at, "rcx",
        (d: *mut c_void, s: *const c_void, n: usize) -> *mut c_void;
    __dsm_checked_memmove => memmove_at, "rcx",
        (d: *mut c_void, s: *const c_void, n: usize) -> *mut c_void;
    __dsm_checked_memset => memset_at, "rcx", (d: *mut c_void, c: c_int, n: usize) -> *mut c_void;
    __dsm_checked_strcpy => strcpy_at, "rdx", (d: *mut c_char, s: *const c_char) -> *mut c_char;
    __dsm_checked_strncpy => strncpy_at, "rcx",
        (d: *mut c_char, s: *const c_char, n: usize) -> *mut c_char;
    __dsm_checked_strcat => strcat_at, "rdx", (d: *mut c_char, s: *const c_char) -> *mut c_char;
    __dsm_checked_strlen => strlen_at, "rsi", (s: *const c_char) -> usize;
    __dsm_checked_strcmp => strcmp_at, "rdx", (a: *const c_char, b: *const c_char) -> c_int;
    __dsm_checked_strncmp => strncmp_at, "rcx",
        (a: *const c_char, b: *const c_char, n: usize) -> c_int;
    __dsm_checked_memcmp => memcmp_at, "rcx",
        (a: *const c_void, b: *const c_void, n: usize) -> c_int;
    __dsm_checked_bcmp => memcmp_at, "rcx",
        (a: *const c_void, b: *const c_void, n: usize) -> c_int;
    __dsm_checked_stpcpy => stpcpy_at, "rdx", (d: *mut c_char, s: *const c_char) -> *mut c_char;
    __dsm_checked_strncat => strncat_at, "rcx",
        (d: *mut c_char, s: *const c_char, n: usize) -> *mut c_char;
    __dsm_checked_strnlen => strnlen_at, "rdx", (s: *const c_char, n: usize) -> usize;
    __dsm_checked_memchr => memchr_at, "rcx", (s: *const c_void, c: c_int, n: usize) -> *mut c_void;
    __dsm_checked_strchr => strchr_at, "rdx", (s: *const c_char, c: c_int) -> *mut c_char;
    __dsm_checked_strrchr => strrchr_at, "rdx", (s: *const c_char, c: c_int) -> *mut c_char;
    __dsm_checked_strstr => strstr_at, "rdx",
        (h: *const c_char, needle: *const c_char) -> *mut c_char;
    __dsm_checked_qsort => qsort_at, "r8",
        (base: *mut c_void, n: usize, size: usize, cmp: Option<Compare>) -> ();
    __dsm_checked_mempcpy => mempcpy_at, "rcx",
        (d: *mut c_void, s: *const c_void, n: usize) -> *mut c_void;
    __dsm_checked_memccpy => memccpy_at, "r8",
        (d: *mut c_void, s: *const c_void, c: c_int, n: usize) -> *mut c_void;
    __dsm_checked_bzero => bzero_at, "rdx", (d: *mut c_void, n: usize) -> ();
    __dsm_checked_explicit_bzero => explicit_bzero_at, "rdx", (d: *mut c_void, n: usize) -> ();
    __dsm_checked_stpncpy => stpncpy_at, "rcx",
        (d: *mut c_char, s: *const c_char, n: usize) -> *mut c_char;
    __dsm_checked_strdup => strdup_at, "rsi", (s: *const c_char) -> *mut c_char;
    __dsm_checked_strndup => strndup_at, "rdx", (s: *const c_char, n: usize) -> *mut c_char;
    __dsm_checked_strspn => strspn_at, "rdx", (s: *const c_char, accept: *const c_char) -> usize;
    __dsm_checked_strcspn => strcspn_at, "rdx", (s: *const c_char, reject: *const c_char) -> usize;
    __dsm_checked_strpbrk => strpbrk_at, "rdx",
        (s: *const c_char, accept: *const c_char) -> *mut c_char;
    __dsm_checked_strcasecmp => strcasecmp_at, "rdx", (a: *const c_char, b: *const c_char) -> c_int;
    __dsm_checked_strncasecmp => strncasecmp_at, "rcx",
        (a: *const c_char, b: *const c_char, n: usize) -> c_int;
    __dsm_checked_memrchr => memrchr_at, "rcx",
        (s: *const c_void, c: c_int, n: usize) -> *mut c_void;
    __dsm_checked_rawmemchr => rawmemchr_at, "rdx", (s: *const c_void, c: c_int) -> *mut c_void;
    __dsm_checked_strchrnul => strchrnul_at, "rdx", (s: *const c_char, c: c_int) -> *mut c_char;
    __dsm_checked_memmem => memmem_at, "r8",
        (h: *const c_void, hl: usize, needle: *const c_void, nl: usize) -> *mut c_void;
    __dsm_checked_strcasestr => strcasestr_at, "rdx",
        (h: *const c_char, needle: *const c_char) -> *mut c_char;
    __dsm_checked_strtok => strtok_at, "rdx", (s: *mut c_char, delim: *const c_char) -> *mut c_char;
    __dsm_checked_strtok_r => strtok_r_at, "rcx",
        (s: *mut c_char, delim: *const c_char, save: *mut *mut c_char) -> *mut c_char;
    __dsm_checked_strtol => strtol_at, "rcx",
        (s: *const c_char, end: *mut *mut c_char, base: c_int) -> libc::c_long;
    __dsm_checked_strtoul => strtoul_at, "rcx",
        (s: *const c_char, end: *mut *mut c_char, base: c_int) -> libc::c_ulong;
    __dsm_checked_strtoll => strtoll_at, "rcx",
        (s: *const c_char, end: *mut *mut c_char, base: c_int) -> libc::c_longlong;
    __dsm_checked_strtoull => strtoull_at, "rcx",
        (s: *const c_char, end: *mut *mut c_char, base: c_int) -> libc::c_ulonglong;
    __dsm_checked_strtod => strtod_at, "rdx", (s: *const c_char, end: *mut *mut c_char) -> f64;
    __dsm_checked_strtof => strtof_at, "rdx", (s: *const c_char, end: *mut *mut c_char) -> f32;
    __dsm_checked_atoi => atoi_at, "rsi", (s: *const c_char) -> c_int;
    __dsm_checked_atol => atol_at, "rsi", (s: *const c_char) -> libc::c_long;
    __dsm_checked_atoll => atoll_at, "rsi", (s: *const c_char) -> libc::c_longlong;
    __dsm_checked_atof => atof_at, "rsi", (s: *const c_char) -> f64;
}

// ----- The program's signal handlers, when checking -----
//
// While the race checker runs, every handler the program installs (through libjia's
// `sigaction`, `signal`, `bsd_signal` and `sysv_signal`) is installed as [`checked_handler`],
// which runs it inside `dsm_races::in_signal_handler`: the accesses it makes are kept
// without allocating and recorded after it. The program asking for the action back gets its own.

/// Signals' numbers run from 1 to this.
const SIGNALS: usize = 64;

/// The program's handler for each signal whose handler runs through [`checked_handler`] (its
/// address; 0: none), and its flags (`SA_SIGINFO` says how to call it).
static PROGRAM_HANDLERS: [std::sync::atomic::AtomicUsize; SIGNALS + 1] =
    [const { std::sync::atomic::AtomicUsize::new(0) }; SIGNALS + 1];
static PROGRAM_FLAGS: [std::sync::atomic::AtomicI32; SIGNALS + 1] =
    [const { std::sync::atomic::AtomicI32::new(0) }; SIGNALS + 1];

/// Whether `handler` is a function (not `SIG_DFL`, `SIG_IGN` or `SIG_ERR`).
fn is_function(handler: libc::sighandler_t) -> bool {
    handler != libc::SIG_DFL && handler != libc::SIG_IGN && handler != libc::SIG_ERR
}

/// `sigaction(sig, act, old)` while checking: a handler is installed as [`checked_handler`],
/// the program's kept for it to call; `old` gets the program's own action back.
///
/// # Safety
/// As the C library's `sigaction`.
pub(crate) unsafe fn checked_sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    use std::sync::atomic::Ordering::SeqCst;
    let k = sig as usize;
    if sig <= 0 || k > SIGNALS {
        // SAFETY: the caller's arguments (the C library answers EINVAL).
        return unsafe { crate::entry::__sigaction(sig, act, old) };
    }
    // SAFETY: the caller passes null or a live struct.
    let asked = unsafe { act.as_ref() }.copied();
    let mut wrapped = asked;
    if let Some(w) = wrapped.as_mut().filter(|a| is_function(a.sa_sigaction)) {
        w.sa_sigaction = checked_handler as *const () as libc::sighandler_t;
        w.sa_flags |= libc::SA_SIGINFO;
    }
    // The program's handler is in place before the kernel may call the wrapper with it.
    let before = (
        PROGRAM_HANDLERS[k].load(SeqCst),
        PROGRAM_FLAGS[k].load(SeqCst),
    );
    if let Some(a) = asked {
        let handler = if is_function(a.sa_sigaction) {
            a.sa_sigaction
        } else {
            0
        };
        PROGRAM_HANDLERS[k].store(handler, SeqCst);
        PROGRAM_FLAGS[k].store(a.sa_flags, SeqCst);
    }
    let act = wrapped
        .as_ref()
        .map_or(std::ptr::null(), |w| w as *const libc::sigaction);
    // SAFETY: `act` is null or the live copy above; `old` is the caller's.
    let rc = unsafe { crate::entry::__sigaction(sig, act, old) };
    if rc != 0 {
        PROGRAM_HANDLERS[k].store(before.0, SeqCst);
        PROGRAM_FLAGS[k].store(before.1, SeqCst);
        return rc;
    }
    // SAFETY: the caller passes null or a live struct, which the C library has just filled.
    if let Some(o) = unsafe { old.as_mut() }
        && o.sa_sigaction == checked_handler as *const () as libc::sighandler_t
    {
        o.sa_sigaction = before.0;
        o.sa_flags = before.1;
    }
    0
}

/// At `jia_init`, when checking: the handlers installed before (by the program before
/// `jia_init`, or by a library's constructor) are installed again through
/// [`checked_sigaction`], so that they run wrapped as later ones do.
pub(crate) fn wrap_installed_handlers() {
    for sig in 1..=SIGNALS as c_int {
        if [libc::SIGSEGV, libc::SIGBUS, libc::SIGKILL, libc::SIGSTOP].contains(&sig) {
            continue;
        }
        // SAFETY: a zeroed sigaction is valid plain data for the C library to fill.
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a query (no new action) into the live struct above.
        if unsafe { crate::entry::__sigaction(sig, std::ptr::null(), &mut now) } != 0 {
            continue;
        }
        if is_function(now.sa_sigaction)
            && now.sa_sigaction != checked_handler as *const () as libc::sighandler_t
        {
            // SAFETY: the action just read, installed again (wrapped); no old action wanted.
            unsafe { checked_sigaction(sig, &now, std::ptr::null_mut()) };
        }
    }
}

/// The handler of every signal whose handler the program installed while checking: runs the
/// program's inside `dsm_races::in_signal_handler`.
///
/// Signal context: two atomic loads and the call (no lock, no allocation; errno is the
/// program's handler's to keep).
extern "C-unwind" fn checked_handler(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    use std::sync::atomic::Ordering::SeqCst;
    let k = sig as usize;
    let Some(handler) = PROGRAM_HANDLERS.get(k).map(|h| h.load(SeqCst)) else {
        return;
    };
    if handler == 0 {
        return;
    }
    let flags = PROGRAM_FLAGS[k].load(SeqCst);
    dsm_races::in_signal_handler(|| {
        if flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the program installed this address as an SA_SIGINFO handler.
            let f: extern "C-unwind" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                unsafe { std::mem::transmute(handler) };
            f(sig, info, ctx);
        } else {
            // SAFETY: the program installed this address as a one-argument handler.
            let f: extern "C-unwind" fn(c_int) = unsafe { std::mem::transmute(handler) };
            f(sig);
        }
    });
}

// ----- pthread synchronisation, seen by the race checker -----
//
// `dsmcc --check-races` renames a checked object's calls of these functions as it does the
// memory functions': mutexes, condition variables' waits, barriers and semaphores order the
// threads of a node (a release before the call, an acquire after it, through
// `dsm_races::local_release`/`local_acquire`, keyed by the object's address), a new
// thread starts from its creator's clock, and a join acquires the clock the thread ended with.
// Off, each is the C library's call and a load and a branch.

use dsm_races::Local;

fn object(p: *const c_void) -> Local {
    Local::Object(p as usize)
}

/// An entry for a call that acquires the object it is given (first) when it returns 0
/// (`$call(obj, args...)`); one marked `waits` may block for long (a semaphore's wait) and
/// ends the thread's segment first ([`dsm_races::about_to_wait`]).
macro_rules! acquired_on_success {
    ($($(#[$waits:ident])? $name:ident => $call:ident($ty:ty $(, $arg:ident: $aty:ty)*);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(obj: *mut $ty $(, $arg: $aty)*) -> c_int {
            $(acquired_on_success!(@$waits);)?
            // SAFETY: the caller's arguments, as to the C library's function.
            let rc = unsafe { crate::cancellable::$call(obj $(, $arg)*) };
            if rc == 0 {
                dsm_races::local_acquire(object(obj.cast()));
            }
            rc
        }
    )*};
    (@waits) => {
        dsm_races::about_to_wait()
    };
}

/// An entry for a call that releases the object it is given (`$call(obj)`).
macro_rules! released_before {
    ($($name:ident => $call:ident($ty:ty);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(obj: *mut $ty) -> c_int {
            dsm_races::local_release(object(obj.cast()));
            // SAFETY: the caller's argument, as to the C library's function.
            unsafe { crate::cancellable::$call(obj) }
        }
    )*};
}

acquired_on_success! {
    __dsm_checked_pthread_mutex_lock => pthread_mutex_lock(libc::pthread_mutex_t);
    __dsm_checked_pthread_mutex_trylock => pthread_mutex_trylock(libc::pthread_mutex_t);
    #[waits]
    __dsm_checked_sem_wait => sem_wait(libc::sem_t);
    __dsm_checked_sem_trywait => sem_trywait(libc::sem_t);
    __dsm_checked_pthread_spin_lock => pthread_spin_lock(libc::pthread_spinlock_t);
    __dsm_checked_pthread_spin_trylock => pthread_spin_trylock(libc::pthread_spinlock_t);
    __dsm_checked_pthread_mutex_timedlock =>
        pthread_mutex_timedlock(libc::pthread_mutex_t, t: *const libc::timespec);
    __dsm_checked_pthread_mutex_clocklock =>
        pthread_mutex_clocklock(libc::pthread_mutex_t, k: libc::clockid_t, t: *const libc::timespec);
    #[waits]
    __dsm_checked_sem_timedwait => sem_timedwait(libc::sem_t, t: *const libc::timespec);
    #[waits]
    __dsm_checked_sem_clockwait =>
        sem_clockwait(libc::sem_t, k: libc::clockid_t, t: *const libc::timespec);
    // C11's (`thrd_success` is 0).
    __dsm_checked_mtx_lock => mtx_lock(c_void);
    __dsm_checked_mtx_trylock => mtx_trylock(c_void);
    __dsm_checked_mtx_timedlock => mtx_timedlock(c_void, t: *const libc::timespec);
}

released_before! {
    __dsm_checked_pthread_mutex_unlock => pthread_mutex_unlock(libc::pthread_mutex_t);
    __dsm_checked_sem_post => sem_post(libc::sem_t);
    __dsm_checked_pthread_spin_unlock => pthread_spin_unlock(libc::pthread_spinlock_t);
    __dsm_checked_mtx_unlock => mtx_unlock(c_void);
}

/// An entry for a call that locks the read-write lock it is given (first) for writing
/// (`write`) or reading when it returns 0 (`$call(lock, args...)`): a writer has seen what
/// every earlier holder did, a reader what the earlier writers did.
macro_rules! rwlocked_on_success {
    ($($name:ident => $call:ident(write: $write:literal $(, $arg:ident: $aty:ty)*);)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            lock: *mut libc::pthread_rwlock_t $(, $arg: $aty)*
        ) -> c_int {
            // SAFETY: the caller's arguments, as to the C library's function.
            let rc = unsafe { crate::cancellable::$call(lock $(, $arg)*) };
            if rc == 0 {
                dsm_races::rwlock_acquired(lock as usize, $write);
            }
            rc
        }
    )*};
}

rwlocked_on_success! {
    __dsm_checked_pthread_rwlock_rdlock => pthread_rwlock_rdlock(write: false);
    __dsm_checked_pthread_rwlock_tryrdlock => pthread_rwlock_tryrdlock(write: false);
    __dsm_checked_pthread_rwlock_timedrdlock =>
        pthread_rwlock_timedrdlock(write: false, t: *const libc::timespec);
    __dsm_checked_pthread_rwlock_clockrdlock =>
        pthread_rwlock_clockrdlock(write: false, k: libc::clockid_t, t: *const libc::timespec);
    __dsm_checked_pthread_rwlock_wrlock => pthread_rwlock_wrlock(write: true);
    __dsm_checked_pthread_rwlock_trywrlock => pthread_rwlock_trywrlock(write: true);
    __dsm_checked_pthread_rwlock_timedwrlock =>
        pthread_rwlock_timedwrlock(write: true, t: *const libc::timespec);
    __dsm_checked_pthread_rwlock_clockwrlock =>
        pthread_rwlock_clockwrlock(write: true, k: libc::clockid_t, t: *const libc::timespec);
}

/// `pthread_rwlock_unlock`: a reader's release is for the lock's next writers only.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_rwlock_unlock(
    lock: *mut libc::pthread_rwlock_t,
) -> c_int {
    dsm_races::rwlock_releasing(lock as usize);
    // SAFETY: the caller's argument, as to pthread_rwlock_unlock.
    unsafe { crate::cancellable::pthread_rwlock_unlock(lock) }
}

thread_local! {
    /// The routine and control of the `pthread_once` this thread is in (the routine, if it
    /// runs, runs on this thread).
    static ONCE: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// The routine `pthread_once` runs: the program's, then a release of the control.
extern "C-unwind" fn checked_once_routine() {
    let (routine, control) = ONCE.with(std::cell::Cell::get);
    if routine != 0 {
        // SAFETY: the routine the program gave this thread's pthread_once, a `void (*)(void)`.
        let routine: extern "C-unwind" fn() = unsafe { std::mem::transmute(routine) };
        routine();
    }
    dsm_races::local_release(Local::Object(control));
}

/// A once-call (`pthread_once`, C11's `call_once`, made by `call` with this library's routine):
/// whoever returns from it has seen what the routine did (its runner releases the control when
/// the routine ends, every caller acquires it on return).
fn once<R>(
    control: *mut libc::pthread_once_t,
    routine: extern "C-unwind" fn(),
    call: impl FnOnce(extern "C-unwind" fn()) -> R,
) -> R {
    let outer = ONCE.with(|o| o.replace((routine as usize, control as usize)));
    let r = call(checked_once_routine);
    ONCE.with(|o| o.set(outer));
    dsm_races::local_acquire(object(control.cast()));
    r
}

/// `pthread_once`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_once(
    control: *mut libc::pthread_once_t,
    routine: extern "C-unwind" fn(),
) -> c_int {
    // SAFETY: the caller's control, as to pthread_once, with a routine that runs the caller's.
    once(control, routine, |r| unsafe {
        crate::cancellable::pthread_once(control, r)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_cond_wait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
) -> c_int {
    dsm_races::local_release(object(m.cast()));
    // SAFETY: the caller's arguments, as to pthread_cond_wait.
    let rc = unsafe { crate::cancellable::pthread_cond_wait(c, m) };
    dsm_races::local_acquire(object(m.cast()));
    rc
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_cond_timedwait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
    t: *const libc::timespec,
) -> c_int {
    dsm_races::local_release(object(m.cast()));
    // SAFETY: the caller's arguments, as to pthread_cond_timedwait.
    let rc = unsafe { crate::cancellable::pthread_cond_timedwait(c, m, t) };
    dsm_races::local_acquire(object(m.cast()));
    rc
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_cond_clockwait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
    k: libc::clockid_t,
    t: *const libc::timespec,
) -> c_int {
    dsm_races::local_release(object(m.cast()));
    // SAFETY: the caller's arguments, as to pthread_cond_clockwait.
    let rc = unsafe { crate::cancellable::pthread_cond_clockwait(c, m, k, t) };
    dsm_races::local_acquire(object(m.cast()));
    rc
}

/// C11's `cnd_wait`: as `pthread_cond_wait`, the mutex released and acquired.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_cnd_wait(c: *mut c_void, m: *mut c_void) -> c_int {
    dsm_races::local_release(object(m));
    // SAFETY: the caller's arguments, as to cnd_wait.
    let rc = unsafe { crate::cancellable::cnd_wait(c, m) };
    dsm_races::local_acquire(object(m));
    rc
}

/// C11's `cnd_timedwait`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_cnd_timedwait(
    c: *mut c_void,
    m: *mut c_void,
    t: *const libc::timespec,
) -> c_int {
    dsm_races::local_release(object(m));
    // SAFETY: the caller's arguments, as to cnd_timedwait.
    let rc = unsafe { crate::cancellable::cnd_timedwait(c, m, t) };
    dsm_races::local_acquire(object(m));
    rc
}

/// `pthread_barrier_init`: the checker counts the barrier's rounds from its count.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_barrier_init(
    b: *mut libc::pthread_barrier_t,
    attr: *const libc::pthread_barrierattr_t,
    count: std::ffi::c_uint,
) -> c_int {
    // SAFETY: the caller's arguments, as to pthread_barrier_init.
    let rc = unsafe { libc::pthread_barrier_init(b, attr, count) };
    if rc == 0 {
        dsm_races::local_barrier_init(b as usize, count);
    }
    rc
}

/// `pthread_barrier_destroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_barrier_destroy(
    b: *mut libc::pthread_barrier_t,
) -> c_int {
    // SAFETY: the caller's argument, as to pthread_barrier_destroy.
    let rc = unsafe { libc::pthread_barrier_destroy(b) };
    if rc == 0 {
        dsm_races::local_barrier_destroy(b as usize);
    }
    rc
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_barrier_wait(
    b: *mut libc::pthread_barrier_t,
) -> c_int {
    let round = dsm_races::local_barrier_enter(b as usize);
    // SAFETY: the caller's argument, as to pthread_barrier_wait.
    let rc = unsafe { crate::cancellable::pthread_barrier_wait(b) };
    dsm_races::local_barrier_leave(b as usize, round);
    rc
}

/// A thread's start, as `pthread_create` (`R`: `*mut c_void`) or C11's `thrd_create` (`R`:
/// `c_int`) was asked for it, with its creator's clock.
struct Start<R> {
    run: extern "C-unwind" fn(*mut c_void) -> R,
    arg: *mut c_void,
    creator: Option<(u32, dsm_races::Entries)>,
}

/// The start routine of a thread created through [`create`]: starts from its creator's clock,
/// runs the program's routine, and leaves its clock for the joiner.
extern "C-unwind" fn checked_start<R>(start: *mut c_void) -> R {
    // SAFETY: `start` is the Box that `create` leaked for this thread, taken back once.
    // Moved out of the Box, which is freed: nothing of this frame's is left to drop while the
    // routine runs (a cancelled thread is unwound through it).
    let Start { run, arg, creator } = *unsafe { Box::from_raw(start.cast::<Start<R>>()) };
    // SAFETY: pthread_self has no preconditions (a C11 thread is a pthread: `thrd_t` is its
    // `pthread_t`).
    let me = unsafe { libc::pthread_self() };
    if let Some(creator) = creator {
        // Its clock is left for the joiner when it ends, by returning or by pthread_exit.
        dsm_races::thread_started(creator, Some(me));
    }
    run(arg)
}

/// Creates a thread by `spawn` (given this library's start routine and its argument; 0 when the
/// thread was made) that runs `run(arg)` from its creator's clock.
fn create<R>(
    run: extern "C-unwind" fn(*mut c_void) -> R,
    arg: *mut c_void,
    spawn: impl FnOnce(extern "C-unwind" fn(*mut c_void) -> R, *mut c_void) -> c_int,
) -> c_int {
    let start = Box::into_raw(Box::new(Start {
        run,
        arg,
        creator: dsm_races::thread_spawning(),
    }));
    let rc = spawn(checked_start::<R>, start.cast());
    if rc != 0 {
        // SAFETY: the thread was not created: the Box is still this call's.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

/// A join (`pthread_join`, C11's `thrd_join`, made by `join`; 0 when it joined): the joiner has
/// seen what the thread did.
fn joined(thread: libc::pthread_t, join: impl FnOnce() -> c_int) -> c_int {
    dsm_races::about_to_wait();
    let rc = join();
    if rc == 0 {
        dsm_races::local_acquire(Local::Thread(thread));
    }
    rc
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    run: extern "C-unwind" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: the caller's arguments, as to pthread_create, with this library's start routine
    // and the Box it takes back.
    create(run, arg, |start, boxed| unsafe {
        crate::cancellable::pthread_create(thread, attr, start, boxed)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_join(
    thread: libc::pthread_t,
    result: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's arguments, as to pthread_join.
    joined(thread, || unsafe {
        crate::cancellable::pthread_join(thread, result)
    })
}

/// glibc's `pthread_tryjoin_np`: a join when it returns 0 (the thread had ended).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_tryjoin_np(
    thread: libc::pthread_t,
    result: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller's arguments, as to pthread_tryjoin_np.
    joined(thread, || unsafe {
        crate::cancellable::pthread_tryjoin_np(thread, result)
    })
}

/// glibc's `pthread_timedjoin_np`: a join when it returns 0 (not at its timeout).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_timedjoin_np(
    thread: libc::pthread_t,
    result: *mut *mut c_void,
    t: *const libc::timespec,
) -> c_int {
    // SAFETY: the caller's arguments, as to pthread_timedjoin_np.
    joined(thread, || unsafe {
        crate::cancellable::pthread_timedjoin_np(thread, result, t)
    })
}

/// glibc's `pthread_clockjoin_np`: a join when it returns 0.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_pthread_clockjoin_np(
    thread: libc::pthread_t,
    result: *mut *mut c_void,
    clock: libc::clockid_t,
    t: *const libc::timespec,
) -> c_int {
    // SAFETY: the caller's arguments, as to pthread_clockjoin_np.
    joined(thread, || unsafe {
        crate::cancellable::pthread_clockjoin_np(thread, result, clock, t)
    })
}

/// C11's `thrd_create` (`thrd_success` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_thrd_create(
    thread: *mut libc::pthread_t,
    run: extern "C-unwind" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: the caller's arguments, as to thrd_create, with this library's start routine and
    // the Box it takes back.
    create(run, arg, |start, boxed| unsafe {
        crate::cancellable::thrd_create(thread, start, boxed)
    })
}

/// C11's `thrd_join`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_thrd_join(
    thread: libc::pthread_t,
    result: *mut c_int,
) -> c_int {
    // SAFETY: the caller's arguments, as to thrd_join.
    joined(thread, || unsafe {
        crate::cancellable::thrd_join(thread, result)
    })
}

/// C11's `call_once`: as `pthread_once`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_call_once(
    flag: *mut libc::pthread_once_t,
    routine: extern "C-unwind" fn(),
) {
    // SAFETY: the caller's flag, as to call_once, with a routine that runs the caller's.
    once(flag, routine, |r| unsafe {
        crate::cancellable::call_once(flag, r)
    });
}

// ----- OpenMP (gcc's libgomp), seen by the race checker -----
//
// The same renaming for the calls gcc makes for OpenMP constructs: a parallel region's team
// starts from the clock of the thread that opens it and that thread goes on from all of theirs
// at its end; `omp barrier` orders the team; `omp critical` (named or not) and `omp atomic`
// (without hardware atomics) are locks. libgomp is found at run time (`dlsym`): programs
// without OpenMP link without it.

/// libgomp's function `name` (NUL-terminated), looked up once into `cache`; ends the node with a
/// message if the program has no OpenMP runtime (it called the function, so it must).
fn gomp(cache: &std::sync::atomic::AtomicUsize, name: &'static [u8]) -> usize {
    use std::sync::atomic::Ordering::Relaxed;
    let mut f = cache.load(Relaxed);
    if f == 0 {
        // SAFETY: `name` is a NUL-terminated string; RTLD_DEFAULT searches the program and
        // the libraries it loaded, in order (libjia defines none of these names).
        f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) } as usize;
        if f == 0 {
            crate::die(&format!(
                "check_races: {} is called but no OpenMP runtime (libgomp) is loaded",
                String::from_utf8_lossy(&name[..name.len() - 1])
            ));
        }
        cache.store(f, Relaxed);
    }
    f
}

/// A parallel region's work, as `GOMP_parallel` was asked for it, with the clock of the thread
/// that opens it.
struct Region {
    run: extern "C-unwind" fn(*mut c_void),
    data: *mut c_void,
    opener: Option<(u32, dsm_races::Entries)>,
}

/// Every team thread's part of a region opened through [`__dsm_checked_GOMP_parallel`].
extern "C-unwind" fn checked_region(region: *mut c_void) {
    // SAFETY: `region` is the Region on the opener's stack, alive until GOMP_parallel returns,
    // which is after every team thread has returned from here; only read.
    let region = unsafe { &*(region as *const Region) };
    if let Some(opener) = &region.opener {
        dsm_races::thread_started(opener.clone(), None);
    }
    // The team's barrier counts its rounds from this region's start.
    dsm_races::local_barrier_restart(OMP_BARRIER_ADDR);
    (region.run)(region.data);
    dsm_races::local_release(Local::Team(region as *const Region as usize));
}

/// libgomp's calls that open a parallel region: `$name(run, data, args...)` runs `run(data)`
/// on a team; wrapped, every team thread starts from the opener's clock and the opener goes on
/// from all of theirs.
macro_rules! gomp_region {
    ($($name:ident => $real:ident, $cache:ident, ($($arg:ident: $ty:ty),*);)*) => {$(
        static $cache: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            run: extern "C-unwind" fn(*mut c_void),
            data: *mut c_void,
            $($arg: $ty),*
        ) {
            type Real = extern "C-unwind" fn(extern "C-unwind" fn(*mut c_void), *mut c_void, $($ty),*);
            let real = gomp(&$cache, concat!(stringify!($real), "\0").as_bytes());
            // SAFETY: libgomp's function of that name, whose signature this is.
            let real: Real = unsafe { std::mem::transmute(real) };
            let region = Region {
                run,
                data,
                opener: dsm_races::thread_spawning(),
            };
            let key = Local::Team(&region as *const Region as usize);
            real(checked_region, (&region as *const Region).cast_mut().cast(), $($arg),*);
            dsm_races::local_acquire(key);
            // The region's tasks, run by its threads up to its end.
            dsm_races::local_acquire(Local::Tasks);
        }
    )*};
}

gomp_region! {
    __dsm_checked_GOMP_parallel => GOMP_parallel, GOMP_PARALLEL, (threads: u32, flags: u32);
    __dsm_checked_GOMP_parallel_sections => GOMP_parallel_sections, GOMP_PARALLEL_SECTIONS,
        (threads: u32, count: u32, flags: u32);
    __dsm_checked_GOMP_parallel_loop_static => GOMP_parallel_loop_static,
        GOMP_PARALLEL_LOOP_STATIC,
        (threads: u32, start: i64, end: i64, incr: i64, chunk: i64, flags: u32);
    __dsm_checked_GOMP_parallel_loop_dynamic => GOMP_parallel_loop_dynamic,
        GOMP_PARALLEL_LOOP_DYNAMIC,
        (threads: u32, start: i64, end: i64, incr: i64, chunk: i64, flags: u32);
    __dsm_checked_GOMP_parallel_loop_guided => GOMP_parallel_loop_guided,
        GOMP_PARALLEL_LOOP_GUIDED,
        (threads: u32, start: i64, end: i64, incr: i64, chunk: i64, flags: u32);
    __dsm_checked_GOMP_parallel_loop_nonmonotonic_dynamic =>
        GOMP_parallel_loop_nonmonotonic_dynamic, GOMP_PARALLEL_LOOP_NONMONOTONIC_DYNAMIC,
        (threads: u32, start: i64, end: i64, incr: i64, chunk: i64, flags: u32);
    __dsm_checked_GOMP_parallel_loop_nonmonotonic_guided =>
        GOMP_parallel_loop_nonmonotonic_guided, GOMP_PARALLEL_LOOP_NONMONOTONIC_GUIDED,
        (threads: u32, start: i64, end: i64, incr: i64, chunk: i64, flags: u32);
    __dsm_checked_GOMP_parallel_loop_runtime => GOMP_parallel_loop_runtime,
        GOMP_PARALLEL_LOOP_RUNTIME, (threads: u32, start: i64, end: i64, incr: i64, flags: u32);
    __dsm_checked_GOMP_parallel_loop_nonmonotonic_runtime =>
        GOMP_parallel_loop_nonmonotonic_runtime, GOMP_PARALLEL_LOOP_NONMONOTONIC_RUNTIME,
        (threads: u32, start: i64, end: i64, incr: i64, flags: u32);
    __dsm_checked_GOMP_parallel_loop_maybe_nonmonotonic_runtime =>
        GOMP_parallel_loop_maybe_nonmonotonic_runtime,
        GOMP_PARALLEL_LOOP_MAYBE_NONMONOTONIC_RUNTIME,
        (threads: u32, start: i64, end: i64, incr: i64, flags: u32);
}

/// A libgomp entry without arguments, seen as a release of `key` before it and an acquire
/// after it.
macro_rules! gomp_sync {
    ($($name:ident => $real:ident, $cache:ident, $key:expr, $release:expr, $acquire:expr;)*) => {$(
        static $cache: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        #[unsafe(no_mangle)]
        pub extern "C-unwind" fn $name() {
            let real = gomp(&$cache, concat!(stringify!($real), "\0").as_bytes());
            // SAFETY: libgomp's function of that name takes nothing and returns nothing.
            let real: extern "C-unwind" fn() = unsafe { std::mem::transmute(real) };
            if $release {
                dsm_races::local_release($key);
            }
            real();
            if $acquire {
                dsm_races::local_acquire($key);
            }
        }
    )*};
}

// ----- OpenMP tasks -----
//
// `GOMP_task` is given a task whose data carries, ahead of the program's, what the checker
// needs: the program's function and copy function, and its creator's clock. The task starts
// from that clock (and, with dependences, from every ended task's: its predecessors are among
// them) and ends with a release of `Local::Tasks`, which `taskwait`, a taskgroup's end, the
// team's barriers and the region's end acquire. The release ends the running thread's segment,
// so a task run by a pool thread idle at `jia_exit` is checked too.

/// What a checked task's data starts with (the program's data follows, `head` bytes in).
#[repr(C)]
struct TaskHead {
    run: extern "C-unwind" fn(*mut c_void),
    copy: Option<extern "C-unwind" fn(*mut c_void, *mut c_void)>,
    /// The program's data as given to `GOMP_task` (read by its copy function, during the call).
    data: *mut c_void,
    /// The creator's clock, a `Box` the task takes (none when not checking).
    creator: *mut (u32, dsm_races::Entries),
    /// Bytes from the head to the program's data.
    head: usize,
    depends: bool,
}

/// A checked task's function: the creator's clock, the program's function, the release.
extern "C-unwind" fn checked_task(arg: *mut c_void) {
    // SAFETY: libgomp calls this with the task's data, a copy of the block
    // __dsm_checked_GOMP_task made, which starts with a TaskHead.
    let head = unsafe { (arg as *const TaskHead).read() };
    if !head.creator.is_null() {
        // SAFETY: the Box __dsm_checked_GOMP_task leaked for this task, which runs once.
        let creator = *unsafe { Box::from_raw(head.creator) };
        dsm_races::thread_started(creator, None);
    }
    if head.depends {
        dsm_races::local_acquire(Local::Tasks);
    }
    // SAFETY: the program's data is `head.head` bytes in, inside the task's data.
    (head.run)(unsafe { arg.cast::<u8>().add(head.head) }.cast());
    dsm_races::local_release(Local::Tasks);
}

/// A checked task's copy function (libgomp calls it to fill the task's data from the block
/// given): the head, then the program's copy function from the program's data.
extern "C-unwind" fn checked_task_copy(to: *mut c_void, from: *mut c_void) {
    // SAFETY: `from` is the block __dsm_checked_GOMP_task gave, which starts with a TaskHead;
    // `to` has room for the whole block (libgomp sized it by the block's size).
    unsafe {
        let head = (from as *const TaskHead).read();
        (to as *mut TaskHead).write((from as *const TaskHead).read());
        if let Some(copy) = head.copy {
            copy(to.cast::<u8>().add(head.head).cast(), head.data);
        }
    }
}

static GOMP_TASK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `GOMP_task` (gcc 11 and later: with `detach`), the call gcc makes for `omp task`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments, reason = "libgomp's signature")]
pub unsafe extern "C-unwind" fn __dsm_checked_GOMP_task(
    run: extern "C-unwind" fn(*mut c_void),
    data: *mut c_void,
    copy: Option<extern "C-unwind" fn(*mut c_void, *mut c_void)>,
    size: std::ffi::c_long,
    align: std::ffi::c_long,
    if_clause: bool,
    flags: std::ffi::c_uint,
    depend: *mut *mut c_void,
    priority: c_int,
    detach: *mut c_void,
) {
    type Real = unsafe extern "C-unwind" fn(
        extern "C-unwind" fn(*mut c_void),
        *mut c_void,
        Option<extern "C-unwind" fn(*mut c_void, *mut c_void)>,
        std::ffi::c_long,
        std::ffi::c_long,
        bool,
        std::ffi::c_uint,
        *mut *mut c_void,
        c_int,
        *mut c_void,
    );
    let real = gomp(&GOMP_TASK, b"GOMP_task\0");
    // SAFETY: libgomp's GOMP_task, whose signature this is (gcc 11 and later).
    let real: Real = unsafe { std::mem::transmute(real) };
    let align = (align.max(1) as usize).max(std::mem::align_of::<TaskHead>());
    let head = std::mem::size_of::<TaskHead>().next_multiple_of(align);
    let size = size.max(0) as usize;
    let Ok(layout) = std::alloc::Layout::from_size_align(head + size, align) else {
        crate::die(&format!(
            "check_races: GOMP_task: a task of {size} bytes aligned to {align}"
        ));
    };
    // SAFETY: a layout of at least the head's size.
    let block = unsafe { std::alloc::alloc(layout) };
    if block.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    let creator =
        dsm_races::thread_spawning().map_or(std::ptr::null_mut(), |c| Box::into_raw(Box::new(c)));
    // SAFETY: `block` is `head + size` bytes aligned to `align`: the head first, then (without
    // a copy function) the program's data, `size` bytes the caller gave.
    unsafe {
        (block as *mut TaskHead).write(TaskHead {
            run,
            copy,
            data,
            creator,
            head,
            depends: !depend.is_null(),
        });
        if copy.is_none() && size > 0 {
            std::ptr::copy_nonoverlapping(data.cast::<u8>(), block.add(head), size);
        }
    }
    // Without a copy function libgomp copies the block as bytes; with one, ours copies the head
    // and calls the program's.
    let copy_fn: Option<extern "C-unwind" fn(*mut c_void, *mut c_void)> =
        copy.map(|_| checked_task_copy as extern "C-unwind" fn(*mut c_void, *mut c_void));
    // SAFETY: the program's arguments, with this library's function, block and copy function
    // in place of the program's (the block's size and alignment as laid out above).
    unsafe {
        real(
            checked_task,
            block.cast(),
            copy_fn,
            (head + size) as std::ffi::c_long,
            align as std::ffi::c_long,
            if_clause,
            flags,
            depend,
            priority,
            detach,
        );
        // libgomp has copied the block (or run the task) before it returns.
        std::alloc::dealloc(block, layout);
    }
}

static GOMP_TASKWAIT_DEPEND: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// `GOMP_taskwait_depend` (`omp taskwait depend(...)`): as `taskwait`, the waiter sees what
/// the ended tasks did.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_GOMP_taskwait_depend(depend: *mut *mut c_void) {
    let real = gomp(&GOMP_TASKWAIT_DEPEND, b"GOMP_taskwait_depend\0");
    // SAFETY: libgomp's function of that name takes the dependences and returns nothing.
    let real: unsafe extern "C-unwind" fn(*mut *mut c_void) = unsafe { std::mem::transmute(real) };
    // SAFETY: the program's argument.
    unsafe { real(depend) };
    dsm_races::local_acquire(Local::Tasks);
}

/// libgomp's lock functions (`omp_set_lock` ...), on the lock they are given: `$how` is
/// `acquire` (after the call; for a test, when it returns nonzero) or `release` (before).
macro_rules! omp_lock {
    ($($name:ident => $real:ident, $cache:ident, $how:ident -> $ret:ty;)*) => {$(
        static $cache: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(lock: *mut c_void) -> $ret {
            let real = gomp(&$cache, concat!(stringify!($real), "\0").as_bytes());
            // SAFETY: libgomp's function of that name takes the lock and returns $ret.
            let real: extern "C-unwind" fn(*mut c_void) -> $ret = unsafe { std::mem::transmute(real) };
            omp_lock!(@$how lock, real)
        }
    )*};
    (@acquire $lock:ident, $real:ident) => {{
        let r = $real($lock);
        dsm_races::local_acquire(object($lock));
        r
    }};
    (@test $lock:ident, $real:ident) => {{
        let r = $real($lock);
        if r != 0 {
            dsm_races::local_acquire(object($lock));
        }
        r
    }};
    (@release $lock:ident, $real:ident) => {{
        dsm_races::local_release(object($lock));
        $real($lock)
    }};
}

omp_lock! {
    __dsm_checked_omp_set_lock => omp_set_lock, OMP_SET_LOCK, acquire -> ();
    __dsm_checked_omp_unset_lock => omp_unset_lock, OMP_UNSET_LOCK, release -> ();
    __dsm_checked_omp_test_lock => omp_test_lock, OMP_TEST_LOCK, test -> c_int;
    __dsm_checked_omp_set_nest_lock => omp_set_nest_lock, OMP_SET_NEST_LOCK, acquire -> ();
    __dsm_checked_omp_unset_nest_lock => omp_unset_nest_lock, OMP_UNSET_NEST_LOCK, release -> ();
    __dsm_checked_omp_test_nest_lock => omp_test_nest_lock, OMP_TEST_NEST_LOCK, test -> c_int;
}

/// The address OpenMP's team barrier is counted under (not an object's: no object is at 1).
const OMP_BARRIER_ADDR: usize = 1;

/// libgomp's barriers of a team (`omp barrier`, and the ends of `omp for` and `omp sections`
/// without `nowait`): a round of the team's barrier.
macro_rules! gomp_barrier {
    ($($name:ident => $real:ident, $cache:ident -> $ret:ty;)*) => {$(
        static $cache: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        #[unsafe(no_mangle)]
        pub extern "C-unwind" fn $name() -> $ret {
            let real = gomp(&$cache, concat!(stringify!($real), "\0").as_bytes());
            // SAFETY: libgomp's function of that name takes nothing and returns $ret.
            let real: extern "C-unwind" fn() -> $ret = unsafe { std::mem::transmute(real) };
            let round = dsm_races::local_barrier_enter(OMP_BARRIER_ADDR);
            let r = real();
            dsm_races::local_barrier_leave(OMP_BARRIER_ADDR, round);
            // Every task of the team is done at its barrier (threads run them in it).
            dsm_races::local_acquire(Local::Tasks);
            r
        }
    )*};
}

gomp_barrier! {
    __dsm_checked_GOMP_barrier => GOMP_barrier, GOMP_BARRIER -> ();
    __dsm_checked_GOMP_loop_end => GOMP_loop_end, GOMP_LOOP_END -> ();
    __dsm_checked_GOMP_sections_end => GOMP_sections_end, GOMP_SECTIONS_END -> ();
    // The same in a region that may be cancelled (`omp cancel`): true when it was.
    __dsm_checked_GOMP_barrier_cancel => GOMP_barrier_cancel, GOMP_BARRIER_CANCEL -> bool;
    __dsm_checked_GOMP_loop_end_cancel => GOMP_loop_end_cancel, GOMP_LOOP_END_CANCEL -> bool;
    __dsm_checked_GOMP_sections_end_cancel => GOMP_sections_end_cancel,
        GOMP_SECTIONS_END_CANCEL -> bool;
}

/// The keys of OpenMP's process-wide synchronisation: the unnamed critical section, `omp
/// atomic`'s lock, and `omp ordered`.
const OMP_CRITICAL: Local = Local::Object(2);
const OMP_ATOMIC: Local = Local::Object(3);
const OMP_ORDERED: Local = Local::Object(4);

gomp_sync! {
    // Waits for tasks: what they did is seen after.
    __dsm_checked_GOMP_taskwait => GOMP_taskwait, GOMP_TASKWAIT, Local::Tasks, false, true;
    __dsm_checked_GOMP_taskgroup_end => GOMP_taskgroup_end, GOMP_TASKGROUP_END, Local::Tasks,
        false, true;
    __dsm_checked_GOMP_critical_start => GOMP_critical_start, GOMP_CRITICAL_START, OMP_CRITICAL,
        false, true;
    __dsm_checked_GOMP_critical_end => GOMP_critical_end, GOMP_CRITICAL_END, OMP_CRITICAL,
        true, false;
    __dsm_checked_GOMP_atomic_start => GOMP_atomic_start, GOMP_ATOMIC_START, OMP_ATOMIC,
        false, true;
    __dsm_checked_GOMP_atomic_end => GOMP_atomic_end, GOMP_ATOMIC_END, OMP_ATOMIC, true, false;
    // `omp ordered`: one thread at a time, in the loop's order.
    __dsm_checked_GOMP_ordered_start => GOMP_ordered_start, GOMP_ORDERED_START, OMP_ORDERED,
        false, true;
    __dsm_checked_GOMP_ordered_end => GOMP_ordered_end, GOMP_ORDERED_END, OMP_ORDERED,
        true, false;
}

static GOMP_CRITICAL_NAME_START: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
static GOMP_CRITICAL_NAME_END: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_GOMP_critical_name_start(name: *mut *mut c_void) {
    let real = gomp(&GOMP_CRITICAL_NAME_START, b"GOMP_critical_name_start\0");
    // SAFETY: libgomp's GOMP_critical_name_start, whose signature this is.
    let real: extern "C-unwind" fn(*mut *mut c_void) = unsafe { std::mem::transmute(real) };
    real(name);
    dsm_races::local_acquire(object(name.cast()));
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn __dsm_checked_GOMP_critical_name_end(name: *mut *mut c_void) {
    let real = gomp(&GOMP_CRITICAL_NAME_END, b"GOMP_critical_name_end\0");
    // SAFETY: libgomp's GOMP_critical_name_end, whose signature this is.
    let real: extern "C-unwind" fn(*mut *mut c_void) = unsafe { std::mem::transmute(real) };
    dsm_races::local_release(object(name.cast()));
    real(name);
}
