//! The C library's functions that libjia's definitions call and that a thread may be unwound
//! from (a forced unwind: a cancellation acting at a cancellation point, or a thread's own
//! routine that is cancelled), declared as calls that may unwind. The libc crate declares them
//! `extern "C"`: a call the compiler takes for one that cannot unwind may have no entry in its
//! caller's unwind table, where Rust's personality answers "terminate", and the C library
//! aborted the node (a thread cancelled in `fread`, or in a checked build's `readv`, `recv`,
//! `recvfrom`). See `crate::entry`.

use std::ffi::{c_char, c_int, c_uint, c_void};

use libc::{
    FILE, clockid_t, iovec, mmsghdr, msghdr, pthread_attr_t, pthread_barrier_t, pthread_cond_t,
    pthread_mutex_t, pthread_once_t, pthread_rwlock_t, pthread_spinlock_t, pthread_t, sem_t,
    sockaddr, socklen_t, timespec,
};

unsafe extern "C-unwind" {
    pub(crate) fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> isize;
    pub(crate) fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> isize;
    pub(crate) fn recv(fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize;
    pub(crate) fn send(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize;
    pub(crate) fn recvfrom(
        fd: c_int,
        buf: *mut c_void,
        n: usize,
        flags: c_int,
        from: *mut sockaddr,
        len: *mut socklen_t,
    ) -> isize;
    pub(crate) fn sendto(
        fd: c_int,
        buf: *const c_void,
        n: usize,
        flags: c_int,
        to: *const sockaddr,
        len: socklen_t,
    ) -> isize;
    pub(crate) fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> isize;
    pub(crate) fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> isize;
    pub(crate) fn recvmmsg(
        fd: c_int,
        msgs: *mut mmsghdr,
        n: c_uint,
        flags: c_int,
        timeout: *mut timespec,
    ) -> c_int;
    pub(crate) fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int;
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
