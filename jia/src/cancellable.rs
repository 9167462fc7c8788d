//! The C library's functions that libjia's definitions call and that a thread may be unwound
//! from (a forced unwind: a cancellation acting at a cancellation point, or a thread's own
//! routine that is cancelled), declared as calls that may unwind. The libc crate declares them
//! `extern "C"`: a call the compiler takes for one that cannot unwind may have no entry in its
//! caller's unwind table, where Rust's personality answers "terminate", and the C library
//! aborted the node (a thread cancelled in `fread`, or in a checked build's `readv`, `recv`,
//! `recvfrom`). See `crate::entry`.
//!
//! The system calls libjia defines under their own names (`readv`, `recv` and the others of
//! [`next_definitions`]) are reached past libjia's definitions: by name they would be libjia's
//! own again.

use std::ffi::{CStr, c_char, c_int, c_long, c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{
    FILE, clockid_t, iovec, mmsghdr, msghdr, pthread_attr_t, pthread_barrier_t, pthread_cond_t,
    pthread_mutex_t, pthread_once_t, pthread_rwlock_t, pthread_spinlock_t, pthread_t, sem_t,
    sockaddr, socklen_t, timespec,
};

unsafe extern "C-unwind" {
    pub(crate) fn fgets(s: *mut c_char, n: c_int, f: *mut FILE) -> *mut c_char;

    pub(crate) fn pthread_create(
        thread: *mut pthread_t,
        attr: *const pthread_attr_t,
        run: extern "C-unwind" fn(*mut c_void) -> *mut c_void,
        arg: *mut c_void,
    ) -> c_int;
    pub(crate) fn pthread_join(thread: pthread_t, result: *mut *mut c_void) -> c_int;
    pub(crate) fn pthread_tryjoin_np(thread: pthread_t, result: *mut *mut c_void) -> c_int;
    pub(crate) fn pthread_timedjoin_np(
        thread: pthread_t,
        result: *mut *mut c_void,
        t: *const timespec,
    ) -> c_int;
    pub(crate) fn pthread_clockjoin_np(
        thread: pthread_t,
        result: *mut *mut c_void,
        clock: clockid_t,
        t: *const timespec,
    ) -> c_int;
    pub(crate) fn pthread_once(
        control: *mut pthread_once_t,
        routine: extern "C-unwind" fn(),
    ) -> c_int;
    pub(crate) fn pthread_cond_wait(c: *mut pthread_cond_t, m: *mut pthread_mutex_t) -> c_int;
    pub(crate) fn pthread_cond_timedwait(
        c: *mut pthread_cond_t,
        m: *mut pthread_mutex_t,
        t: *const timespec,
    ) -> c_int;
    pub(crate) fn pthread_barrier_wait(b: *mut pthread_barrier_t) -> c_int;
    pub(crate) fn pthread_mutex_lock(m: *mut pthread_mutex_t) -> c_int;
    pub(crate) fn pthread_mutex_trylock(m: *mut pthread_mutex_t) -> c_int;
    pub(crate) fn pthread_mutex_timedlock(m: *mut pthread_mutex_t, t: *const timespec) -> c_int;
    pub(crate) fn pthread_mutex_unlock(m: *mut pthread_mutex_t) -> c_int;
    pub(crate) fn sem_wait(s: *mut sem_t) -> c_int;
    pub(crate) fn sem_trywait(s: *mut sem_t) -> c_int;
    pub(crate) fn sem_timedwait(s: *mut sem_t, t: *const timespec) -> c_int;
    pub(crate) fn sem_post(s: *mut sem_t) -> c_int;
    pub(crate) fn pthread_rwlock_rdlock(l: *mut pthread_rwlock_t) -> c_int;
    pub(crate) fn pthread_rwlock_wrlock(l: *mut pthread_rwlock_t) -> c_int;
    pub(crate) fn pthread_rwlock_tryrdlock(l: *mut pthread_rwlock_t) -> c_int;
    pub(crate) fn pthread_rwlock_trywrlock(l: *mut pthread_rwlock_t) -> c_int;
    pub(crate) fn pthread_rwlock_timedrdlock(l: *mut pthread_rwlock_t, t: *const timespec)
    -> c_int;
    pub(crate) fn pthread_rwlock_timedwrlock(l: *mut pthread_rwlock_t, t: *const timespec)
    -> c_int;
    pub(crate) fn pthread_rwlock_clockrdlock(
        l: *mut pthread_rwlock_t,
        clock: clockid_t,
        t: *const timespec,
    ) -> c_int;
    pub(crate) fn pthread_rwlock_clockwrlock(
        l: *mut pthread_rwlock_t,
        clock: clockid_t,
        t: *const timespec,
    ) -> c_int;
    pub(crate) fn pthread_rwlock_unlock(l: *mut pthread_rwlock_t) -> c_int;
    pub(crate) fn pthread_mutex_clocklock(
        m: *mut pthread_mutex_t,
        clock: clockid_t,
        t: *const timespec,
    ) -> c_int;
    pub(crate) fn pthread_cond_clockwait(
        c: *mut pthread_cond_t,
        m: *mut pthread_mutex_t,
        clock: clockid_t,
        t: *const timespec,
    ) -> c_int;
    pub(crate) fn sem_clockwait(s: *mut sem_t, clock: clockid_t, t: *const timespec) -> c_int;

    // C11's threads (<threads.h>): glibc's call its own pthread functions directly, which a
    // program's renamed calls of the pthread ones do not see. `mtx_t` and `cnd_t` are opaque
    // here; `thrd_t` is a `pthread_t`, `once_flag` a `pthread_once_t`.
    pub(crate) fn mtx_lock(m: *mut c_void) -> c_int;
    pub(crate) fn mtx_trylock(m: *mut c_void) -> c_int;
    pub(crate) fn mtx_timedlock(m: *mut c_void, t: *const timespec) -> c_int;
    pub(crate) fn mtx_unlock(m: *mut c_void) -> c_int;
    pub(crate) fn cnd_wait(c: *mut c_void, m: *mut c_void) -> c_int;
    pub(crate) fn cnd_timedwait(c: *mut c_void, m: *mut c_void, t: *const timespec) -> c_int;
    pub(crate) fn thrd_create(
        thread: *mut pthread_t,
        run: extern "C-unwind" fn(*mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    pub(crate) fn thrd_join(thread: pthread_t, result: *mut c_int) -> c_int;
    pub(crate) fn call_once(flag: *mut pthread_once_t, routine: extern "C-unwind" fn());
    pub(crate) fn pthread_spin_lock(l: *mut pthread_spinlock_t) -> c_int;
    pub(crate) fn pthread_spin_trylock(l: *mut pthread_spinlock_t) -> c_int;
    pub(crate) fn pthread_spin_unlock(l: *mut pthread_spinlock_t) -> c_int;
    pub(crate) fn qsort(
        base: *mut c_void,
        n: usize,
        size: usize,
        cmp: Option<unsafe extern "C-unwind" fn(*const c_void, *const c_void) -> c_int>,
    );
}

/// The C library's definitions of calls libjia defines under the same names
/// ([`crate::interpose`]), reached past libjia's own: each is looked up once
/// (`dlsym(RTLD_NEXT)`: the next definition after the object libjia is linked into, the C
/// library's, or a preloaded library's that wraps it) and kept. The lookups are made when
/// libjia is loaded ([`RESOLVE_AT_LOAD`]) and again by `jia_init` ([`resolve`]), before any
/// signal handler of the DSM's: a call from signal context (the runtime's own sends in a fault
/// handler's drive) finds its definition there and makes no lookup, and stays async-signal-safe.
/// A call before either (a constructor of the program's that ran first) looks it up then. In a
/// program linked statically, where `dlsym` finds nothing, each is its system call, made
/// directly (`$syscall`: no cancellation point there).
macro_rules! next_definitions {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $syscall:expr;)*) => {
        /// Where each definition was found ([`NOT_LOOKED_UP`], [`NOT_FOUND`] or its address).
        #[allow(non_upper_case_globals)]
        mod found {
            use std::sync::atomic::AtomicUsize;
            $(pub(super) static $name: AtomicUsize = AtomicUsize::new(super::NOT_LOOKED_UP);)*
        }

        $(
            /// The C library's definition of this call (see [`next_definitions`]).
            ///
            /// # Safety
            /// As the C library's call of this name.
            pub(crate) unsafe fn $name($($arg: $ty),*) -> $ret {
                let Some(at) = look_up(
                    &found::$name,
                    // The name, NUL-terminated.
                    const { unwrap_c_str(concat!(stringify!($name), "\0").as_bytes()) },
                ) else {
                    // SAFETY: the call's own system call with the caller's arguments, as the C
                    // library makes it.
                    return unsafe { $syscall } as $ret;
                };
                type Call = unsafe extern "C-unwind" fn($($ty),*) -> $ret;
                // SAFETY: the definition found under this name is the C library's call (or a
                // wrapper of it), which has this signature.
                let f = unsafe { std::mem::transmute::<usize, Call>(at) };
                // SAFETY: the caller's promise.
                unsafe { f($($arg),*) }
            }
        )*

        /// Looks every definition up that is not yet.
        pub(crate) fn resolve() {
            $(look_up(
                &found::$name,
                const { unwrap_c_str(concat!(stringify!($name), "\0").as_bytes()) },
            );)*
        }
    };
}

use libc::{
    SYS_preadv, SYS_pwritev, SYS_readv, SYS_recvfrom, SYS_recvmmsg, SYS_recvmsg, SYS_sendmmsg,
    SYS_sendmsg, SYS_sendto, SYS_writev, syscall,
};

next_definitions! {
    readv(fd: c_int, iov: *const iovec, cnt: c_int) -> isize = syscall(SYS_readv, fd as c_long, iov as c_long, cnt as c_long);
    writev(fd: c_int, iov: *const iovec, cnt: c_int) -> isize =
        syscall(SYS_writev, fd as c_long, iov as c_long, cnt as c_long);
    // The kernel takes the offset as its low and high halves (the high one shifted out on a
    // 64-bit machine).
    preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: i64) -> isize =
        syscall(SYS_preadv, fd as c_long, iov as c_long, cnt as c_long, off as c_long, 0 as c_long);
    pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: i64) -> isize =
        syscall(SYS_pwritev, fd as c_long, iov as c_long, cnt as c_long, off as c_long, 0 as c_long);
    recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize =
        syscall(SYS_recvfrom, fd as c_long, buf as c_long, n as c_long, flags as c_long, 0 as c_long, 0 as c_long);
    send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize =
        syscall(SYS_sendto, fd as c_long, buf as c_long, n as c_long, flags as c_long, 0 as c_long, 0 as c_long);
    recvfrom(
        fd: c_int,
        buf: *mut c_void,
        n: usize,
        flags: c_int,
        from: *mut sockaddr,
        len: *mut socklen_t
    ) -> isize = syscall(SYS_recvfrom, fd as c_long, buf as c_long, n as c_long, flags as c_long, from as c_long, len as c_long);
    sendto(
        fd: c_int,
        buf: *const c_void,
        n: usize,
        flags: c_int,
        to: *const sockaddr,
        len: socklen_t
    ) -> isize = syscall(SYS_sendto, fd as c_long, buf as c_long, n as c_long, flags as c_long, to as c_long, len as c_long);
    recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> isize =
        syscall(SYS_recvmsg, fd as c_long, msg as c_long, flags as c_long);
    sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> isize =
        syscall(SYS_sendmsg, fd as c_long, msg as c_long, flags as c_long);
    recvmmsg(
        fd: c_int,
        msgs: *mut mmsghdr,
        n: c_uint,
        flags: c_int,
        timeout: *mut timespec
    ) -> c_int = syscall(SYS_recvmmsg, fd as c_long, msgs as c_long, n as c_long, flags as c_long, timeout as c_long);
    sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int =
        syscall(SYS_sendmmsg, fd as c_long, msgs as c_long, n as c_long, flags as c_long);
}

/// `bytes` (a literal ending in its only NUL) as a C string, at compile time.
const fn unwrap_c_str(bytes: &[u8]) -> &CStr {
    match CStr::from_bytes_with_nul(bytes) {
        Ok(s) => s,
        Err(_) => panic!("a name with a NUL inside"),
    }
}

/// A definition's slot before its lookup.
const NOT_LOOKED_UP: usize = 0;
/// A definition's slot where the lookup found none (a program linked statically).
const NOT_FOUND: usize = 1;

/// The address of the definition of `name` after libjia's, kept in `slot` (looked up the first
/// time); `None` where there is none. Async-signal-safe once `slot` is set.
fn look_up(slot: &AtomicUsize, name: &CStr) -> Option<usize> {
    let at = match slot.load(Ordering::Acquire) {
        NOT_LOOKED_UP => {
            // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks the symbol up.
            let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
            let at = if f == NOT_LOOKED_UP { NOT_FOUND } else { f };
            slot.store(at, Ordering::Release);
            at
        }
        at => at,
    };
    (at != NOT_FOUND).then_some(at)
}

/// Looks the definitions up when libjia is loaded (a constructor of the object it is linked
/// into), before any thread or signal handler of the program's or the DSM's.
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = {
    extern "C" fn resolve_at_load() {
        resolve();
    }
    resolve_at_load
};
