//! The C library's calls that libjia defines in place of the C library's own for programs linked
//! with it: system calls whose buffer may lie in shared memory (`read`, `write`, `pread`,
//! `pwrite`, `fread`, `fwrite`; `readv`, `writev`, `preadv`, `pwritev`, `recv`, `send`,
//! `recvfrom`, `sendto`, `recvmsg`, `sendmsg`, `recvmmsg`, `sendmmsg`), and the calls that would take shared memory away from the DSM
//! (`sigaction` and `signal` for SIGSEGV and SIGBUS, `mprotect`, `munmap`, `mremap`, `madvise`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::entry::__sigaction;

// ----- system calls on shared memory -----
//
// The kernel does not fault on a program's behalf: `read` into (or `write` from) a shared page
// this node does not hold fails with EFAULT, and `fread`/`fwrite` come back short, silently
// losing data (a JIAJIA program that reads its input into shared memory on node 0). These
// definitions take the place of the C library's for programs linked with libjia: the buffer's
// shared pages are brought in first with the access the call makes, a call that still meets
// EFAULT (a page taken away meanwhile) is retried, and the C library does the rest. A buffer
// outside shared memory costs one range check (the runtime's own sends and receives pass here
// too). The calls without another name in the C library (`readv`, `recv`...) reach its
// definitions past libjia's (`crate::cancellable`). Other calls that hand memory to the kernel
// (`stat`'s buffer, `sendfile`, io_uring, `preadv2`) are not covered: docs/c-programs.md.

unsafe extern "C-unwind" {
    fn __read(fd: c_int, buf: *mut c_void, n: usize) -> isize;
    fn __write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn __pread64(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize;
    fn __pwrite64(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize;
    fn _IO_fread(ptr: *mut c_void, size: usize, n: usize, f: *mut libc::FILE) -> usize;
    fn _IO_fwrite(ptr: *const c_void, size: usize, n: usize, f: *mut libc::FILE) -> usize;
}

/// Runs `call` on a buffer made ready for it; retries while it fails with EFAULT on shared
/// memory (each retry fetches the pages again), up to [`STALLS`] times (a receive into buffers
/// wholly in shared memory from anything but a file does not come here: [`private_receive`]).
/// Async-signal-safe for buffers outside shared memory (the runtime's own reads of its sockets
/// pass here).
fn on_shared(
    ptr: *const c_void,
    len: usize,
    kernel_writes: bool,
    beside: &[Beside],
    call: impl Fn() -> isize,
) -> isize {
    retried(
        || {
            // SAFETY: the buffer is about to be handed to the kernel by the C program's own
            // call: its threads do not write it meanwhile (that would race with the kernel's
            // access anyway). No more than the kernel moves in one call.
            let buffer = unsafe {
                dsm_runtime::prepare_for_io(ptr.cast(), len.min(KERNEL_MAX_RW), kernel_writes)
            };
            prepare_beside(beside) | buffer
        },
        STALLS,
        call,
    )
}

/// A range beside a call's data buffers that the kernel reads or writes in the program's memory
/// (a socket address and its length, a message header, ancillary data): brought in as the
/// buffers are, where it lies in shared memory (a peer table there, a header in an array of
/// them).
#[derive(Clone, Copy)]
struct Beside {
    at: *const c_void,
    len: usize,
    kernel_writes: bool,
}

impl Beside {
    fn read<T>(at: *const T, len: usize) -> Beside {
        Beside {
            at: at.cast(),
            len: if at.is_null() { 0 } else { len },
            kernel_writes: false,
        }
    }

    fn written<T>(at: *const T, len: usize) -> Beside {
        Beside {
            kernel_writes: true,
            ..Beside::read(at, len)
        }
    }

    /// A socket address the kernel writes, with its length (`*len` bytes at most), which it
    /// reads and writes.
    ///
    /// # Safety
    /// `len` is null or points to a `socklen_t`, as `recvfrom` asks.
    unsafe fn address_written(addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> [Beside; 2] {
        let bytes = if addr.is_null() || len.is_null() {
            0
        } else {
            // The length is read only where its page is ready: written (a read-only copy would
            // not take the kernel's write).
            prepare_beside(&[Beside::written(len, size_of::<libc::socklen_t>())]);
            // SAFETY: the caller's promise.
            unsafe { len.read() as usize }
        };
        [
            Beside::written(len, size_of::<libc::socklen_t>()),
            Beside::written(addr, bytes),
        ]
    }

    /// A message header the kernel reads (`sendmsg`) or also writes (`recvmsg`), with its
    /// address and ancillary data.
    ///
    /// # Safety
    /// `m` points to a message header, as `recvmsg` and `sendmsg` ask.
    unsafe fn message(m: *const libc::msghdr, kernel_writes: bool) -> [Beside; 3] {
        let at = |b: Beside| Beside { kernel_writes, ..b };
        let header = at(Beside::read(m, size_of::<libc::msghdr>()));
        if m.is_null() {
            // The kernel's EFAULT is the call's.
            return [header; 3];
        }
        // Read where its page is ready (written, for recvmsg's writes of its lengths).
        prepare_beside(&[header]);
        // SAFETY: the caller's promise.
        let h = unsafe { &*m };
        [
            header,
            at(Beside::read(h.msg_name, h.msg_namelen as usize)),
            at(Beside::read(h.msg_control, h.msg_controllen)),
        ]
    }
}

/// Brings in the ranges of `beside` that lie in shared memory; whether any does.
fn prepare_beside(beside: &[Beside]) -> bool {
    beside.iter().fold(false, |any, b| {
        // SAFETY: the range is about to be handed to the kernel by the program's own call (see
        // `on_shared`).
        any | unsafe { dsm_runtime::prepare_for_io(b.at.cast(), b.len, b.kernel_writes) }
    })
}

/// Calls in a row that meet EFAULT on shared memory (a page taken away between its preparation
/// and the kernel's copy) and move nothing before a call gives up and returns it. Another thread
/// of the node taking locks in a loop took pages away often enough that four were not enough
/// (an outside attack: a `read` into shared memory failed, a `write` of 1.5 MB came back after
/// 4 KB); from the third on, each waits for the other threads to run first.
const STALLS: u32 = 64;

/// The same for `recvmmsg` into shared memory, whose messages are not received through private
/// buffers: a socket that takes whole messages drops the one it could not copy, so a retry
/// costs one.
const RECEIVE_TRIES: u32 = 5;

/// After a call that met EFAULT on shared memory and moved nothing: whether to try again
/// (fewer than `most` in a row), yielding the CPU from the third on.
fn stalled_again(stalls: &mut u32, most: u32) -> bool {
    *stalls += 1;
    if *stalls > 2 {
        std::thread::yield_now();
    }
    *stalls < most
}

/// The bytes to move in one call after `stalls` calls in a row met EFAULT moving nothing:
/// `piece` halved at each, down to a page. The time between a piece's preparation and the
/// kernel's copy shrinks with it, and with it the chance that another thread takes a page away
/// in between: a thread taking a lock in a loop (each acquire takes pages away, each release
/// write-protects what a read made writable) met every retry of a 512 KB `read` in a row, 64
/// times (CI, 3 nodes on 2 CPUs).
fn piece_after(piece: usize, stalls: u32) -> usize {
    piece
        .checked_shr(stalls)
        .unwrap_or(0)
        .max(dsm_runtime::PAGE_SIZE)
}

/// Whether the last call failed with EFAULT.
fn efault() -> bool {
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
}

/// Moves `len` bytes at `ptr` with `call(offset, bytes)`, as [`vectored_in_pieces`] moves a
/// vectored call's buffers (`go_on()` asked only for a buffer in shared memory). A buffer
/// outside shared memory goes in one call, as the caller made it (async-signal-safe: the
/// runtime's own reads of its sockets pass here).
fn in_pieces(
    ptr: *const c_void,
    len: usize,
    kernel_writes: bool,
    go_on: impl Fn() -> bool,
    call: impl Fn(usize, usize) -> isize,
) -> isize {
    if len == 0 || !dsm_runtime::in_shared_region(ptr.cast(), len) {
        return call(0, len);
    }
    let buffer = [libc::iovec {
        iov_base: ptr.cast_mut(),
        iov_len: len,
    }];
    vectored_in_pieces(&buffer, kernel_writes, go_on(), |cut, done| {
        call(done, cut.iter().map(|c| c.iov_len).sum())
    })
}

/// The most a receive into shared memory through a private buffer asks of a descriptor that
/// does not take whole messages (a pipe, a stream socket, an event counter, a device): a read
/// may return fewer bytes than asked.
const PRIVATE_STREAM_BYTES: usize = 1 << 20;

/// The most one read moves (the kernel's `MAX_RW_COUNT`): it asks no more of any descriptor.
const KERNEL_MAX_RW: usize = 0x7fff_f000;

/// Whether all `len` bytes at `ptr` lie in the shared region (one range).
fn wholly_shared(ptr: *const u8, len: usize) -> bool {
    let last = (ptr as usize).checked_add(len.saturating_sub(1));
    len > 0
        && last.is_some()
        && dsm_runtime::in_shared_region(ptr, 1)
        && dsm_runtime::in_shared_region(ptr.wrapping_add(len - 1), 1)
}

/// What a descriptor's reads are, for a receive into shared memory.
#[derive(Clone, Copy, PartialEq)]
enum Descriptor {
    /// A regular file or a block device: a retry loses nothing; read in pieces, in place (in
    /// pieces it reads what one call would).
    File,
    /// A socket that takes whole messages (datagrams, sequenced packets, raw ones): the kernel
    /// drops a message it could not copy into the buffer.
    Messages,
    /// Anything else: may lose what it could not copy too (an event counter, a device).
    Stream,
}

/// What `fd` is ([`Descriptor`]); `None` where fstat fails (the call itself then says why).
/// errno is left as it was on a descriptor that exists.
fn descriptor_kind(fd: c_int) -> Option<Descriptor> {
    // SAFETY: fstat writes the zeroed stat it is given.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a plain fstat of the caller's descriptor into `st`.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some(match st.st_mode & libc::S_IFMT {
        // A block device loses nothing to a retry either.
        libc::S_IFREG | libc::S_IFBLK => Descriptor::File,
        libc::S_IFSOCK => {
            let mut kind: c_int = 0;
            let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
            // SAFETY: getsockopt writes at most `len` bytes into `kind`, and its length into
            // `len`; on a socket it does not fail.
            let ok = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_TYPE,
                    (&raw mut kind).cast(),
                    &mut len,
                )
            } == 0;
            let messages = matches!(
                kind,
                libc::SOCK_DGRAM | libc::SOCK_SEQPACKET | libc::SOCK_RAW | libc::SOCK_RDM
            );
            if ok && messages {
                Descriptor::Messages
            } else {
                Descriptor::Stream
            }
        }
        _ => Descriptor::Stream,
    })
}

/// How many bytes a receive into `bufs` asks through a private buffer (`kind`: what its
/// descriptor is, asked only for a buffer in shared memory), or `None` for
/// the call in place (made ready, retried at EFAULT): a private buffer where every buffer with
/// bytes lies wholly in shared memory and `fd` is not a regular file. There, a page taken away
/// between libjia's preparation and the kernel's copy cost what the kernel had taken (a
/// datagram, an event) at each try; received privately, it lands whole, copied in after the
/// pages are made ready. As much as asked of a socket that takes whole messages (up to the
/// kernel's cap, which it applies anyway), else [`PRIVATE_STREAM_BYTES`] at most, and in place
/// where `flags` ask a stream for all of it (`MSG_WAITALL`) or to drop what it would copy
/// (`MSG_TRUNC`: a private buffer would copy in bytes the kernel never wrote).
fn private_receive(
    kind: impl FnOnce() -> Option<Descriptor>,
    bufs: &[libc::iovec],
    flags: c_int,
) -> Option<usize> {
    let mut total = 0usize;
    for b in bufs.iter().filter(|b| b.iov_len > 0) {
        if !wholly_shared(b.iov_base.cast(), b.iov_len) {
            return None;
        }
        total = total.checked_add(b.iov_len)?;
    }
    if total == 0 {
        return None;
    }
    match kind()? {
        Descriptor::File => None,
        Descriptor::Messages => (total <= KERNEL_MAX_RW).then_some(total),
        Descriptor::Stream if flags & (libc::MSG_WAITALL | libc::MSG_TRUNC) != 0 => None,
        Descriptor::Stream => Some(total.min(PRIVATE_STREAM_BYTES)),
    }
}

/// As [`private_receive`] for one buffer of `n` bytes at `buf`.
fn private_receive_into(
    kind: impl FnOnce() -> Option<Descriptor>,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
) -> Option<usize> {
    private_receive(
        kind,
        &[libc::iovec {
            iov_base: buf,
            iov_len: n,
        }],
        flags,
    )
}

/// Receives into the first `len` bytes of the buffers `bufs` through private ones of the same
/// lengths: `call(private)` receives, and what it returns (at most `len` bytes) is copied into
/// `bufs` in order, their pages made ready first. `None`, calling nothing, where the private
/// buffers cannot be had (the caller makes the call in place). No allocation: `read` and `recv`
/// are async-signal-safe, and a program's signal handler may receive into shared memory
/// ([`PrivateBuffer`]).
///
/// # Safety
/// `bufs` are the caller's buffers, writable for their lengths, as the C library's receives
/// ask, and lie in shared memory ([`private_receive`]).
unsafe fn received_privately(
    bufs: &[libc::iovec],
    len: usize,
    call: impl FnOnce(&mut [libc::iovec]) -> isize,
) -> Option<isize> {
    // The bytes, then the private iovecs, then where each goes (read from `bufs` before the
    // call: the iovecs may lie in the memory received into, as the kernel, which copies them
    // first, allows).
    let iovecs_at = len.checked_next_multiple_of(16)?;
    let dests_at = iovecs_at.checked_add(bufs.len().checked_mul(size_of::<libc::iovec>())?)?;
    let size = dests_at.checked_add(bufs.len().checked_mul(size_of::<*mut u8>())?)?;
    let buffer = PrivateBuffer::take(size)?;
    let base = buffer.at;
    let iovecs = base.wrapping_add(iovecs_at).cast::<libc::iovec>();
    let dests = base.wrapping_add(dests_at).cast::<*mut u8>();
    let (mut count, mut at) = (0usize, 0usize);
    for b in bufs {
        let k = b.iov_len.min(len - at);
        if k > 0 {
            // SAFETY: slot `count` (< bufs.len()) of each array lies in the buffer, aligned
            // (the arrays start at multiples of 16 of a page-aligned mapping).
            unsafe {
                iovecs.add(count).write(libc::iovec {
                    iov_base: base.wrapping_add(at).cast(),
                    iov_len: k,
                });
                dests.add(count).write(b.iov_base.cast());
            }
            count += 1;
            at += k;
        }
    }
    // SAFETY: the `count` iovecs just written, in the buffer, which nothing else reaches while
    // this receive holds it.
    let r = call(unsafe { std::slice::from_raw_parts_mut(iovecs, count) });
    let got = usize::try_from(r).unwrap_or(0).min(len);
    let mut from = 0;
    for i in 0..count {
        // SAFETY: written above.
        let (m, to) = unsafe { (iovecs.add(i).read(), dests.add(i).read()) };
        let k = m.iov_len.min(got - from);
        if k == 0 {
            break;
        }
        // SAFETY: `to` lies in shared memory and is writable for `m.iov_len` bytes (the
        // caller's promise), made ready for the copy as for the kernel's; the private bytes'
        // first `got` are what the call wrote (a stream's MSG_TRUNC, which writes none, does
        // not come here), in this receive's own buffer (no overlap).
        unsafe {
            dsm_runtime::prepare_for_io(to, k, true);
            std::ptr::copy_nonoverlapping(base.add(from), to, k);
        }
        from += k;
    }
    buffer.give_back();
    Some(r)
}

/// The most bytes of private buffer a thread keeps between its receives.
const KEPT_PRIVATE_BYTES: usize = PRIVATE_STREAM_BYTES + (64 << 10);

thread_local! {
    /// The private buffer this thread keeps between receives (address and length; 0: none),
    /// and where the stack was in the receive that holds it now (0: none holds it): a signal
    /// handler's receive that interrupted that one maps a buffer of its own. Atomics, so that
    /// no access moves past another, as a handler may run between any two. No destructor of
    /// Rust's: reaching them registers nothing (which allocates); the thread's end unmaps the
    /// buffer ([`PrivateBuffer::thread_ended`]).
    static KEPT_AT: AtomicUsize = const { AtomicUsize::new(0) };
    static KEPT_LEN: AtomicUsize = const { AtomicUsize::new(0) };
    static HOLDER_SP: AtomicUsize = const { AtomicUsize::new(0) };
}

/// The key whose destructor unmaps a thread's kept buffer when the thread ends (made by
/// [`init`], before any receive into shared memory); `None` where no key could be had or its
/// values would not be kept in the thread's own descriptor (glibc allocates for keys past its
/// first 32), and buffers are then mapped for one receive each.
static KEY: std::sync::OnceLock<Option<libc::pthread_key_t>> = std::sync::OnceLock::new();

/// A receive's private buffer: an anonymous mapping (`mmap` and `munmap` are
/// async-signal-safe, where `malloc` is not: a signal handler's `read` into shared memory
/// deadlocked on the allocator's lock its thread held, and a `siglongjmp` out of a `read` left
/// the allocator locked). The thread keeps one up to [`KEPT_PRIVATE_BYTES`] for its next
/// receives; a larger one, or one a signal handler's receive needs while the thread's own holds
/// the kept one, is mapped for the receive alone. A receive left by `siglongjmp` holds the kept
/// buffer no more: the next receive on a shallower part of the thread's stack (or back on the
/// thread's stack from the alternate one) takes it back ([`holder_left`]). Nothing of it lives
/// in a frame's destructor: `read`, `recv` and the others are cancellation points, and a thread
/// cancelled there is unwound through libjia's frames (a forced unwind may cross only frames
/// with nothing to drop); a cancelled thread's kept buffer is unmapped as it ends.
struct PrivateBuffer {
    at: *mut u8,
    len: usize,
    kept: bool,
}

impl PrivateBuffer {
    /// A buffer of at least `size` bytes; `None` where none can be mapped.
    fn take(size: usize) -> Option<PrivateBuffer> {
        let key = *KEY.get()?;
        let marker = 0u8;
        let sp = std::hint::black_box(&raw const marker) as usize;
        let holder = HOLDER_SP.with(|h| h.load(Ordering::SeqCst));
        let keep =
            key.is_some() && size <= KEPT_PRIVATE_BYTES && (holder == 0 || holder_left(holder, sp));
        if keep {
            HOLDER_SP.with(|h| h.store(sp, Ordering::SeqCst));
            let at = KEPT_AT.with(|k| k.load(Ordering::SeqCst));
            let len = KEPT_LEN.with(|k| k.load(Ordering::SeqCst));
            if len >= size {
                return Some(PrivateBuffer {
                    at: at as *mut u8,
                    len,
                    kept: true,
                });
            }
            if len > 0 {
                KEPT_LEN.with(|k| k.store(0, Ordering::SeqCst));
                unmap(at as *mut u8, len);
            }
        }
        let Some(at) = map(size) else {
            if keep {
                HOLDER_SP.with(|h| h.store(0, Ordering::SeqCst));
            }
            return None;
        };
        if let (true, Some(key)) = (keep, key) {
            KEPT_AT.with(|k| k.store(at as usize, Ordering::SeqCst));
            KEPT_LEN.with(|k| k.store(size, Ordering::SeqCst));
            // The key's value only says that the thread has a buffer to unmap at its end.
            // SAFETY: a key made by `init`, one of glibc's first 32, whose values live in the
            // thread's own descriptor (no allocation).
            unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<u8>().cast()) };
        }
        Some(PrivateBuffer {
            at,
            len: size,
            kept: keep,
        })
    }

    /// Gives the buffer back: the kept one to the thread, another unmapped.
    fn give_back(self) {
        if self.kept {
            HOLDER_SP.with(|h| h.store(0, Ordering::SeqCst));
        } else {
            unmap(self.at, self.len);
        }
    }

    /// The key's destructor: unmaps the thread's kept buffer.
    extern "C" fn thread_ended(_value: *mut c_void) {
        let _ = KEPT_LEN.try_with(|k| {
            let len = k.swap(0, Ordering::SeqCst);
            let at = KEPT_AT.with(|a| a.load(Ordering::SeqCst));
            if len > 0 {
                unmap(at as *mut u8, len);
            }
        });
    }
}

/// Whether the receive that took the kept buffer with its stack at `holder` was left (by
/// `siglongjmp`) rather than interrupted by the signal handler whose receive, at `sp`, asks for
/// it now. A live holder's frame lies under this one: deeper on the same stack (a higher
/// address, stacks growing down), or on the thread's stack while this runs on the alternate
/// signal stack. Async-signal-safe (`sigaltstack`, asked only here).
fn holder_left(holder: usize, sp: usize) -> bool {
    // SAFETY: a zeroed stack_t is valid storage; sigaltstack only writes the current one into it.
    let mut alt: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: queries this thread's alternate stack into `alt`.
    let known = unsafe { libc::sigaltstack(std::ptr::null(), &mut alt) } == 0;
    let on_alt = |p: usize| {
        known
            && alt.ss_flags & libc::SS_DISABLE == 0
            && (alt.ss_sp as usize..alt.ss_sp as usize + alt.ss_size).contains(&p)
    };
    match (on_alt(holder), on_alt(sp)) {
        (true, false) => true,
        (false, true) => false,
        _ => sp >= holder,
    }
}

/// `len` bytes of fresh private memory, not touched (the kernel's receive writes it).
fn map(len: usize) -> Option<*mut u8> {
    // SAFETY: a fresh private anonymous mapping the kernel places; nothing refers to it yet.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p.cast())
}

/// Unmaps what [`map`] mapped.
fn unmap(at: *mut u8, len: usize) {
    // SAFETY: a mapping of `map`'s, which nothing refers to any more.
    unsafe { libc::munmap(at.cast(), len) };
}

/// Finds the C library's definitions libjia calls past its own (if its load did not) and makes
/// the key of the threads' kept private buffers. Called by `jia_init`, before shared memory and
/// the DSM's signal handlers exist (a receive into shared memory cannot come earlier; without
/// `init`, receives go in place).
pub(crate) fn init() {
    crate::cancellable::resolve();
    KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: writes the new key into `key`; the destructor is a plain function.
        let r = unsafe { libc::pthread_key_create(&mut key, Some(PrivateBuffer::thread_ended)) };
        (r == 0 && key < 32).then_some(key)
    });
}

/// As [`received_privately`] for one buffer of `n` bytes at `buf`, receiving `len` of them
/// with `call(private, len)`.
///
/// # Safety
/// As [`received_privately`].
unsafe fn received_privately_into(
    buf: *mut c_void,
    n: usize,
    len: usize,
    call: impl FnOnce(*mut c_void, usize) -> isize,
) -> Option<isize> {
    let bufs = [libc::iovec {
        iov_base: buf,
        iov_len: n,
    }];
    // SAFETY: the caller's promise. (A `len` of [`private_receive`], never 0, leaves one
    // private buffer: without one nothing is received.)
    unsafe {
        received_privately(&bufs, len, |mine| {
            mine.first().map_or(0, |m| call(m.iov_base, m.iov_len))
        })
    }
}

/// Runs `call` after `prepare` (which says whether any buffer is shared); while it fails with
/// EFAULT on shared memory, prepares again and retries, up to `most` times in a row.
fn retried(prepare: impl Fn() -> bool, most: u32, call: impl Fn() -> isize) -> isize {
    if !prepare() {
        return call();
    }
    let mut r = call();
    let mut stalls = 0;
    while r < 0 && efault() && stalled_again(&mut stalls, most) {
        prepare();
        r = call();
    }
    r
}

/// The bytes a call moved between the kernel and shared memory, for the race checker: `len`
/// bytes at `buf` written (`kernel_wrote`: the kernel wrote them, as `read` does) or read, by the
/// call made at `pc`. Nothing when the checker is off or the buffer is not shared.
fn record(buf: *const c_void, len: isize, kernel_wrote: bool, pc: usize) {
    if let Ok(len) = usize::try_from(len) {
        crate::races::touched(buf, len, kernel_wrote, pc);
    }
}

// `read` and the others, each with its caller's address (see `entry`): the checker names the
// call's line.
crate::entry::pc_entry! {
    read => read_at, "rcx", (fd: c_int, buf: *mut c_void, n: usize) -> isize;
    write => write_at, "rcx", (fd: c_int, buf: *const c_void, n: usize) -> isize;
    pread => pread_at, "r8", (fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize;
    pread64 => pread_at, "r8", (fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize;
    pwrite => pwrite_at, "r8", (fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize;
    pwrite64 => pwrite_at, "r8", (fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize;
    fread => fread_at, "r8",
        (ptr: *mut c_void, size: usize, n: usize, f: *mut libc::FILE) -> usize;
    fwrite => fwrite_at, "r8",
        (ptr: *const c_void, size: usize, n: usize, f: *mut libc::FILE) -> usize;
}

/// `ssize_t read(int fd, void *buf, size_t n)`, with `buf` in shared memory made ready first;
/// the bytes read are a write of the caller's for the race checker.
///
/// # Safety
/// As the C library's `read`.
unsafe extern "C-unwind" fn read_at(fd: c_int, buf: *mut c_void, n: usize, pc: usize) -> isize {
    // What `fd` is, asked once and only for a buffer in shared memory.
    let kind = std::cell::OnceCell::new();
    let kind_of = || *kind.get_or_init(|| descriptor_kind(fd));
    if let Some(len) = private_receive_into(kind_of, buf, n, 0) {
        // SAFETY: the C library's read into a private buffer for the caller's, in shared memory.
        let r = unsafe { received_privately_into(buf, n, len, |p, k| __read(fd, p, k)) };
        if let Some(r) = r {
            record(buf, r, true, pc);
            return r;
        }
    }
    // SAFETY: the C library's read with the caller's arguments.
    let r = in_pieces(
        buf,
        n,
        true,
        || kind_of() == Some(Descriptor::File),
        |at, k| unsafe { __read(fd, buf.cast::<u8>().add(at).cast(), k) },
    );
    record(buf, r, true, pc);
    r
}

/// `ssize_t write(int fd, const void *buf, size_t n)`, with `buf` in shared memory made ready;
/// the bytes written are a read of the caller's for the race checker.
///
/// # Safety
/// As the C library's `write`.
unsafe extern "C-unwind" fn write_at(fd: c_int, buf: *const c_void, n: usize, pc: usize) -> isize {
    // SAFETY: the C library's write with the caller's arguments.
    let r = in_pieces(
        buf,
        n,
        false,
        || true,
        |at, k| unsafe { __write(fd, buf.cast::<u8>().add(at).cast(), k) },
    );
    record(buf, r, false, pc);
    r
}

/// `pread` (and `pread64`), as [`read_at`].
///
/// # Safety
/// As the C library's `pread`.
unsafe extern "C-unwind" fn pread_at(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    off: i64,
    pc: usize,
) -> isize {
    // SAFETY: the C library's pread with the caller's arguments.
    let r = in_pieces(
        buf,
        n,
        true,
        || true,
        |at, k| unsafe { __pread64(fd, buf.cast::<u8>().add(at).cast(), k, off + at as i64) },
    );
    record(buf, r, true, pc);
    r
}

/// `pwrite` (and `pwrite64`), as [`write_at`].
///
/// # Safety
/// As the C library's `pwrite`.
unsafe extern "C-unwind" fn pwrite_at(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    off: i64,
    pc: usize,
) -> isize {
    // SAFETY: the C library's pwrite with the caller's arguments.
    let r = in_pieces(
        buf,
        n,
        false,
        || true,
        |at, k| unsafe { __pwrite64(fd, buf.cast::<u8>().add(at).cast(), k, off + at as i64) },
    );
    record(buf, r, false, pc);
    r
}

/// `size_t fread(void *ptr, size_t size, size_t n, FILE *f)`, with `ptr` in shared memory made
/// ready first (the C library reads large requests straight into it); the items read are a
/// write of the caller's for the race checker.
///
/// # Safety
/// As the C library's `fread`.
unsafe extern "C-unwind" fn fread_at(
    ptr: *mut c_void,
    size: usize,
    n: usize,
    f: *mut libc::FILE,
    pc: usize,
) -> usize {
    let got = stdio_in_pieces(ptr, (size, n), f, true, |at, k| {
        // SAFETY: the C library's fread of `k` bytes into the caller's buffer, at `at`.
        unsafe { _IO_fread(ptr.cast::<u8>().add(at).cast(), 1, k, f) }
    });
    record(ptr, got.saturating_mul(size) as isize, true, pc);
    got
}

/// `size_t fwrite(const void *ptr, size_t size, size_t n, FILE *f)`, with `ptr` in shared
/// memory made ready first; the items written are a read of the caller's for the race checker.
///
/// # Safety
/// As the C library's `fwrite`.
unsafe extern "C-unwind" fn fwrite_at(
    ptr: *const c_void,
    size: usize,
    n: usize,
    f: *mut libc::FILE,
    pc: usize,
) -> usize {
    let put = stdio_in_pieces(ptr, (size, n), f, false, |at, k| {
        // SAFETY: the C library's fwrite of `k` bytes of the caller's buffer, from `at`.
        unsafe { _IO_fwrite(ptr.cast::<u8>().add(at).cast(), 1, k, f) }
    });
    record(ptr, put.saturating_mul(size) as isize, false, pc);
    put
}

/// `fread`/`fwrite` of `n` items of `size` bytes at `ptr` on stream `f` with `call(offset,
/// bytes)`, in pieces as [`in_pieces`]: the stream moves the same bytes, and the count is of
/// whole items moved. A piece whose pages were taken away before the kernel reached them (the
/// stream's error is EFAULT) is made ready and moved again, a few times in a row without a
/// byte moved, the error cleared; a buffer the cache holds is one such piece. A buffer outside
/// shared memory goes in one call, as the caller made it.
fn stdio_in_pieces(
    ptr: *const c_void,
    (size, n): (usize, usize),
    f: *mut libc::FILE,
    kernel_writes: bool,
    call: impl Fn(usize, usize) -> usize,
) -> usize {
    let Some(len) = size.checked_mul(n).filter(|&l| l > 0) else {
        return call(0, 0);
    };
    if !dsm_runtime::in_shared_region(ptr.cast(), len) {
        return call(0, len) / size;
    }
    // A buffer the cache holds goes as one piece, retried as the others (its pages can be
    // taken away too: a home page written-protected to serve a reader's fault between its
    // preparation and the kernel's copy made fread come back short).
    let piece = match dsm_runtime::io_piece_bytes() {
        0 => len,
        p => p,
    };
    // A stream already in error keeps its flag (the caller's to see): retried without clearing
    // it.
    // SAFETY: the caller's stream, which the C library's call is about to use.
    let was_in_error = unsafe { libc::ferror(f) } != 0;
    let caller_errno = errno();
    let mut done = 0usize;
    let mut stalls = 0;
    while done < len {
        let k = piece_after(piece, stalls).min(len - done);
        let at = ptr.cast::<u8>().wrapping_add(done);
        // SAFETY: the buffer is the kernel's for the call (as above), this piece right before
        // its call.
        unsafe { dsm_runtime::prepare_for_io(at, k, kernel_writes) };
        // A short count sets errno only when a system call failed: cleared first, it says
        // whether this call met EFAULT (an earlier one's is not this one's).
        set_errno(0);
        let moved = call(done, k);
        done += moved;
        // Retries in a row that move nothing are counted, not those for the whole buffer:
        // under load, pieces far apart may each lose a page once.
        if moved > 0 {
            stalls = 0;
        }
        if moved < k {
            // SAFETY: the caller's stream, which the C library's call just used.
            let failed = unsafe { libc::ferror(f) } != 0;
            if !efault() || !failed || !stalled_again(&mut stalls, STALLS) {
                break;
            }
            if !was_in_error {
                // SAFETY: as above.
                unsafe { libc::clearerr(f) };
            }
        }
    }
    // What the calls left, if anything; else the caller's errno as it was.
    if errno() == 0 {
        set_errno(caller_errno);
    }
    done / size
}

/// This thread's errno.
fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Sets this thread's errno.
fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    unsafe { *libc::__errno_location() = value };
}

// The calls that hand buffers to the kernel beside `read` and the others above, each with its
// caller's address too (the checker names the call's line): the buffers' pages are brought in
// as for `read`, and the bytes moved are recorded for the checker.
crate::entry::pc_entry! {
    readv => readv_at, "rcx", (fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize;
    writev => writev_at, "rcx", (fd: c_int, iov: *const libc::iovec, cnt: c_int) -> isize;
    preadv => preadv_at, "r8",
        (fd: c_int, iov: *const libc::iovec, cnt: c_int, off: i64) -> isize;
    preadv64 => preadv_at, "r8",
        (fd: c_int, iov: *const libc::iovec, cnt: c_int, off: i64) -> isize;
    pwritev => pwritev_at, "r8",
        (fd: c_int, iov: *const libc::iovec, cnt: c_int, off: i64) -> isize;
    pwritev64 => pwritev_at, "r8",
        (fd: c_int, iov: *const libc::iovec, cnt: c_int, off: i64) -> isize;
    recv => recv_at, "r8", (fd: c_int, buf: *mut c_void, n: usize, flags: c_int) -> isize;
    send => send_at, "r8", (fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> isize;
    recvmsg => recvmsg_at, "rcx", (fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize;
    sendmsg => sendmsg_at, "rcx", (fd: c_int, msg: *const libc::msghdr, flags: c_int) -> isize;
    sendmmsg => sendmmsg_at, "r8",
        (fd: c_int, msgs: *mut libc::mmsghdr, n: libc::c_uint, flags: c_int) -> c_int;
    recvmmsg => recvmmsg_at, "r9", (
        fd: c_int,
        msgs: *mut libc::mmsghdr,
        n: libc::c_uint,
        flags: c_int,
        timeout: *mut libc::timespec
    ) -> c_int;
}

// Six arguments: the caller's address travels on the stack.
crate::entry::pc_entry_stacked! {
    recvfrom => recvfrom_at, (
        fd: c_int,
        buf: *mut c_void,
        n: usize,
        flags: c_int,
        from: *mut libc::sockaddr,
        len: *mut libc::socklen_t
    ) -> isize;
    sendto => sendto_at, (
        fd: c_int,
        buf: *const c_void,
        n: usize,
        flags: c_int,
        to: *const libc::sockaddr,
        len: libc::socklen_t
    ) -> isize;
}

// `fgets` copies from its stream's buffer in the program's own code (a fault there is the
// DSM's to serve): a checked object's calls come here (`dsmcc --check-races` renames them: its
// `CHECKED_IO_FUNCTIONS`) only for the checker to record the bytes at the caller's line.
crate::entry::pc_entry! {
    __dsm_checked_fgets => fgets_at, "rcx",
        (s: *mut libc::c_char, n: c_int, f: *mut libc::FILE) -> *mut libc::c_char;
}

/// The buffers of `cnt` iovecs at `iov`, as slices of (address, length); none for a bad count.
///
/// # Safety
/// `iov` points to `cnt` iovecs, as `readv` and `writev` ask.
unsafe fn iovecs<'a>(iov: *const libc::iovec, cnt: c_int) -> &'a [libc::iovec] {
    match usize::try_from(cnt) {
        Ok(n) if n > 0 && !iov.is_null() => {
            // SAFETY: the caller's promise.
            unsafe { std::slice::from_raw_parts(iov, n) }
        }
        _ => &[],
    }
}

/// `readv` and `writev`: each buffer's pages brought in, the call made (again after EFAULT, as
/// for one buffer), and the bytes moved recorded buffer by buffer in order.
///
/// # Safety
/// As the C library's `readv` (`kernel_writes`) or `writev`.
unsafe fn vectored(
    iov: *const libc::iovec,
    cnt: c_int,
    kernel_writes: bool,
    beside: &[Beside],
    pc: usize,
    call: impl Fn() -> isize,
) -> isize {
    // SAFETY: the caller's promise.
    let bufs = unsafe { iovecs(iov, cnt) };
    let r = retried(
        || prepare_iovecs(bufs, kernel_writes) | prepare_beside(beside),
        STALLS,
        call,
    );
    record_iovecs(bufs, r, kernel_writes, pc);
    r
}

/// Brings in the pages of `bufs` that lie in shared memory, up to what the kernel moves in one
/// call; whether any does. Nothing for iovecs the kernel refuses (`EINVAL`: more than
/// `IOV_MAX`, or lengths past `SSIZE_MAX` together), which it never touches.
fn prepare_iovecs(bufs: &[libc::iovec], kernel_writes: bool) -> bool {
    if !kernel_takes(bufs) {
        return false;
    }
    let mut left = KERNEL_MAX_RW;
    bufs.iter().fold(false, |shared, b| {
        let n = b.iov_len.min(left);
        left -= n;
        // SAFETY: the buffer is handed to the kernel by the program's own call.
        shared | unsafe { dsm_runtime::prepare_for_io(b.iov_base.cast(), n, kernel_writes) }
    })
}

/// Whether the kernel takes `bufs` (not more than `IOV_MAX` of them, whose lengths add up to
/// `SSIZE_MAX` at most).
fn kernel_takes(bufs: &[libc::iovec]) -> bool {
    const IOV_MAX: usize = 1024;
    bufs.len() <= IOV_MAX
        && bufs
            .iter()
            .try_fold(0usize, |sum, b| sum.checked_add(b.iov_len))
            .is_some_and(|sum| isize::try_from(sum).is_ok())
}

/// The most iovecs one piece of a vectored call takes ([`vectored_in_pieces`]): a piece that
/// spans more buffers ends at this many.
const PIECE_IOVECS: usize = 64;

/// Moves the bytes of a vectored call's buffers `bufs`, some of them in shared memory, with
/// `call(iovecs, done)`, a piece the cache holds at a time ([`dsm_runtime::io_piece_bytes`]):
/// bytes `done..` of the buffers, at most [`PIECE_IOVECS`] iovecs, cut from `bufs` on the
/// stack, made ready right before its call (a buffer larger than the cache lost its first pages
/// to its last ones before the kernel reached them: the call came back short). With `go_on`
/// (a file, or a write), after a whole piece moved the rest is moved too, and after a short
/// count that ends at a page of the shared region, the rest too: a page taken away before the
/// kernel reached it (another thread's acquire or release, or the cache making room) stops the
/// kernel's copy there, where a signal, a timeout, a full disk or a file's end stop it
/// anywhere, and those counts go back to the caller as they are. Otherwise the count so far is
/// returned (a short read, which a read of a pipe or a socket may give anyway: one that waited
/// for more could wait forever). A call that meets EFAULT moving nothing is made again, up to
/// [`STALLS`] in a row. Returns the bytes moved (at most what the kernel moves in one call), or
/// the failure of a call when none moved.
fn vectored_in_pieces(
    bufs: &[libc::iovec],
    kernel_writes: bool,
    go_on: bool,
    call: impl Fn(&[libc::iovec], usize) -> isize,
) -> isize {
    let total = bufs
        .iter()
        .map(|b| b.iov_len)
        .sum::<usize>()
        .min(KERNEL_MAX_RW);
    let piece = match dsm_runtime::io_piece_bytes() {
        0 => total,
        p => p,
    };
    let (mut done, mut stalls) = (0usize, 0);
    while done < total {
        let mut cut = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; PIECE_IOVECS];
        let (mut count, mut skip, mut want) =
            (0, done, piece_after(piece, stalls).min(total - done));
        for b in bufs {
            if count == PIECE_IOVECS || want == 0 {
                break;
            }
            if skip >= b.iov_len {
                skip -= b.iov_len;
                continue;
            }
            let k = (b.iov_len - skip).min(want);
            cut[count] = libc::iovec {
                iov_base: b.iov_base.cast::<u8>().wrapping_add(skip).cast(),
                iov_len: k,
            };
            (count, skip, want) = (count + 1, 0, want - k);
        }
        let cut = &cut[..count];
        let n: usize = cut.iter().map(|c| c.iov_len).sum();
        prepare_iovecs(cut, kernel_writes);
        let r = call(cut, done);
        if r < 0 {
            if efault() && stalled_again(&mut stalls, STALLS) {
                continue;
            }
            return if done > 0 { done as isize } else { r };
        }
        if r == 0 {
            break;
        }
        done += r as usize;
        stalls = 0;
        let next = byte_at(bufs, done);
        let at_a_page = (r as usize) == n
            || next.is_some_and(|p| {
                p as usize % dsm_runtime::PAGE_SIZE == 0 && dsm_runtime::in_shared_region(p, 1)
            });
        if !go_on || !at_a_page {
            break;
        }
    }
    done as isize
}

/// The address of byte `at` of the buffers `bufs` taken as one, if they hold so many.
fn byte_at(bufs: &[libc::iovec], mut at: usize) -> Option<*const u8> {
    for b in bufs {
        if at < b.iov_len {
            return Some(b.iov_base.cast::<u8>().wrapping_add(at));
        }
        at -= b.iov_len;
    }
    None
}

/// Whether any of `bufs` lies in shared memory.
fn any_shared(bufs: &[libc::iovec]) -> bool {
    bufs.iter()
        .any(|b| dsm_runtime::in_shared_region(b.iov_base.cast(), b.iov_len))
}

/// Records the `r` bytes a call moved through `bufs`, buffer by buffer in order.
fn record_iovecs(bufs: &[libc::iovec], r: isize, kernel_writes: bool, pc: usize) {
    let mut left = r.max(0) as usize;
    for b in bufs {
        let n = b.iov_len.min(left);
        record(b.iov_base, n as isize, kernel_writes, pc);
        left -= n;
    }
}

unsafe extern "C-unwind" fn readv_at(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    pc: usize,
) -> isize {
    // SAFETY: the caller's iovecs, as readv asks.
    let bufs = unsafe { iovecs(iov, cnt) };
    let kind = std::cell::OnceCell::new();
    let kind_of = || *kind.get_or_init(|| descriptor_kind(fd));
    if let Some(len) = private_receive(kind_of, bufs, 0) {
        // SAFETY: the C library's readv into private buffers for the caller's, in shared memory
        // (no more of them than the caller's count).
        let r = unsafe {
            received_privately(bufs, len, |mine| {
                crate::cancellable::readv(fd, mine.as_ptr(), mine.len() as c_int)
            })
        };
        if let Some(r) = r {
            record_iovecs(bufs, r, true, pc);
            return r;
        }
    }
    if kernel_takes(bufs) && any_shared(bufs) && kind_of() == Some(Descriptor::File) {
        // SAFETY: the C library's readv of the caller's file into the caller's buffers, a piece
        // at a time (successive reads at the file's offset).
        let r = vectored_in_pieces(bufs, true, true, |cut, _| unsafe {
            crate::cancellable::readv(fd, cut.as_ptr(), cut.len() as c_int)
        });
        record_iovecs(bufs, r, true, pc);
        return r;
    }
    // SAFETY: the C library's readv with the caller's arguments.
    unsafe {
        vectored(iov, cnt, true, &[], pc, || {
            crate::cancellable::readv(fd, iov, cnt)
        })
    }
}

/// Whether a write of `bufs` to `fd` goes in pieces ([`vectored_in_pieces`]): some of it is
/// shared memory, and `fd` takes a stream of bytes (a file, a pipe, a stream socket), not whole
/// messages, which a piece would cut.
fn written_in_pieces(fd: c_int, bufs: &[libc::iovec]) -> bool {
    kernel_takes(bufs)
        && any_shared(bufs)
        && !matches!(descriptor_kind(fd), Some(Descriptor::Messages) | None)
}

unsafe extern "C-unwind" fn writev_at(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    pc: usize,
) -> isize {
    // SAFETY: the caller's iovecs, as writev asks.
    let bufs = unsafe { iovecs(iov, cnt) };
    if written_in_pieces(fd, bufs) {
        // SAFETY: the C library's writev of the caller's buffers, a piece at a time.
        let r = vectored_in_pieces(bufs, false, true, |cut, _| unsafe {
            crate::cancellable::writev(fd, cut.as_ptr(), cut.len() as c_int)
        });
        record_iovecs(bufs, r, false, pc);
        return r;
    }
    // SAFETY: the C library's writev with the caller's arguments.
    unsafe {
        vectored(iov, cnt, false, &[], pc, || {
            crate::cancellable::writev(fd, iov, cnt)
        })
    }
}

unsafe extern "C-unwind" fn preadv_at(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    pc: usize,
) -> isize {
    // SAFETY: the C library's preadv with the caller's arguments, or pieces of them.
    unsafe {
        positioned(iov, cnt, off, true, pc, |iov, cnt, off| {
            crate::cancellable::preadv(fd, iov, cnt, off)
        })
    }
}

unsafe extern "C-unwind" fn pwritev_at(
    fd: c_int,
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    pc: usize,
) -> isize {
    // SAFETY: the C library's pwritev with the caller's arguments, or pieces of them.
    unsafe {
        positioned(iov, cnt, off, false, pc, |iov, cnt, off| {
            crate::cancellable::pwritev(fd, iov, cnt, off)
        })
    }
}

/// `preadv` (`kernel_writes`) and `pwritev`: `call(iovecs, count, offset)`, where a buffer is
/// shared memory a piece at a time, each at its own offset (a positioned call: a retry loses
/// nothing), and the bytes moved recorded.
///
/// # Safety
/// As the C library's `preadv` or `pwritev`, which `call` makes with its arguments.
unsafe fn positioned(
    iov: *const libc::iovec,
    cnt: c_int,
    off: i64,
    kernel_writes: bool,
    pc: usize,
    call: impl Fn(*const libc::iovec, c_int, i64) -> isize,
) -> isize {
    // SAFETY: the caller's iovecs, as the call asks.
    let bufs = unsafe { iovecs(iov, cnt) };
    if !(kernel_takes(bufs) && any_shared(bufs)) {
        return call(iov, cnt, off);
    }
    let r = vectored_in_pieces(bufs, kernel_writes, true, |cut, done| {
        call(cut.as_ptr(), cut.len() as c_int, off + done as i64)
    });
    record_iovecs(bufs, r, kernel_writes, pc);
    r
}

/// Whether a receive into `n` bytes at `buf` with `flags` goes in pieces: a stream asked for
/// all of it (`MSG_WAITALL`, which a private buffer does not take) into shared memory; each
/// piece asks for all of its bytes too, and a short one (the stream's end, a signal, an error)
/// ends the call as it would.
fn received_in_pieces(fd: c_int, buf: *const c_void, n: usize, flags: c_int) -> bool {
    flags & libc::MSG_WAITALL != 0
        && dsm_runtime::in_shared_region(buf.cast(), n)
        && descriptor_kind(fd) == Some(Descriptor::Stream)
}

/// Whether a send of `n` bytes at `buf` to `fd` goes in pieces: shared memory, to a stream.
fn sent_in_pieces(fd: c_int, buf: *const c_void, n: usize) -> bool {
    dsm_runtime::in_shared_region(buf.cast(), n)
        && !matches!(descriptor_kind(fd), Some(Descriptor::Messages) | None)
}

unsafe extern "C-unwind" fn recv_at(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    pc: usize,
) -> isize {
    let private = private_receive_into(|| descriptor_kind(fd), buf, n, flags).and_then(|len| {
        // SAFETY: the C library's recv into a private buffer for the caller's, in shared memory.
        unsafe {
            received_privately_into(buf, n, len, |p, k| {
                crate::cancellable::recv(fd, p, k, flags)
            })
        }
    });
    let r = private.unwrap_or_else(|| {
        if received_in_pieces(fd, buf, n, flags) {
            // SAFETY: the C library's recv into the caller's buffer, a piece at a time.
            return in_pieces(
                buf,
                n,
                true,
                || true,
                |at, k| unsafe {
                    crate::cancellable::recv(fd, buf.cast::<u8>().add(at).cast(), k, flags)
                },
            );
        }
        // SAFETY: the C library's recv with the caller's arguments.
        on_shared(buf, n, true, &[], || unsafe {
            crate::cancellable::recv(fd, buf, n, flags)
        })
    });
    // A truncated datagram's length (MSG_TRUNC) may exceed the bytes written.
    record(
        buf,
        r.min(isize::try_from(n).unwrap_or(isize::MAX)),
        true,
        pc,
    );
    r
}

unsafe extern "C-unwind" fn send_at(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    pc: usize,
) -> isize {
    let r = if sent_in_pieces(fd, buf, n) {
        // SAFETY: the C library's send of the caller's buffer, a piece at a time.
        in_pieces(
            buf,
            n,
            false,
            || true,
            |at, k| unsafe {
                crate::cancellable::send(fd, buf.cast::<u8>().add(at).cast(), k, flags)
            },
        )
    } else {
        // SAFETY: the C library's send with the caller's arguments.
        on_shared(buf, n, false, &[], || unsafe {
            crate::cancellable::send(fd, buf, n, flags)
        })
    };
    record(buf, r, false, pc);
    r
}

unsafe extern "C-unwind" fn recvfrom_at(
    fd: c_int,
    buf: *mut c_void,
    n: usize,
    flags: c_int,
    from: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    pc: usize,
) -> isize {
    // SAFETY: the caller's address arguments, as recvfrom asks.
    let beside = unsafe { Beside::address_written(from, len) };
    let private = private_receive_into(|| descriptor_kind(fd), buf, n, flags).and_then(|k| {
        // SAFETY: the C library's recvfrom into a private buffer for the caller's, in shared
        // memory, with the caller's address arguments, made ready right before.
        unsafe {
            received_privately_into(buf, n, k, |p, k| {
                prepare_beside(&beside);
                crate::cancellable::recvfrom(fd, p, k, flags, from, len)
            })
        }
    });
    let r = private.unwrap_or_else(|| {
        if received_in_pieces(fd, buf, n, flags) {
            // SAFETY: the C library's recvfrom into the caller's buffer, a piece at a time.
            return in_pieces(
                buf,
                n,
                true,
                || true,
                |at, k| unsafe {
                    prepare_beside(&beside);
                    let at = buf.cast::<u8>().add(at).cast();
                    crate::cancellable::recvfrom(fd, at, k, flags, from, len)
                },
            );
        }
        // SAFETY: the C library's recvfrom with the caller's arguments.
        on_shared(buf, n, true, &beside, || unsafe {
            crate::cancellable::recvfrom(fd, buf, n, flags, from, len)
        })
    });
    // A truncated datagram's length (MSG_TRUNC) may exceed the bytes written.
    record(
        buf,
        r.min(isize::try_from(n).unwrap_or(isize::MAX)),
        true,
        pc,
    );
    r
}

unsafe extern "C-unwind" fn sendto_at(
    fd: c_int,
    buf: *const c_void,
    n: usize,
    flags: c_int,
    to: *const libc::sockaddr,
    len: libc::socklen_t,
    pc: usize,
) -> isize {
    let beside = [Beside::read(to, len as usize)];
    let r = if sent_in_pieces(fd, buf, n) {
        // SAFETY: the C library's sendto of the caller's buffer, a piece at a time.
        in_pieces(
            buf,
            n,
            false,
            || true,
            |at, k| unsafe {
                prepare_beside(&beside);
                let at = buf.cast::<u8>().add(at).cast();
                crate::cancellable::sendto(fd, at, k, flags, to, len)
            },
        )
    } else {
        // SAFETY: the C library's sendto with the caller's arguments.
        on_shared(buf, n, false, &beside, || unsafe {
            crate::cancellable::sendto(fd, buf, n, flags, to, len)
        })
    };
    record(buf, r, false, pc);
    r
}

/// The iovecs of message `m`, as `vectored` takes them (none for a count past `c_int`).
///
/// # Safety
/// `m` points to a message header, as `recvmsg` and `sendmsg` ask.
unsafe fn message_iovecs(m: *const libc::msghdr) -> (*const libc::iovec, c_int) {
    if m.is_null() {
        // The kernel's EFAULT is the call's.
        return (std::ptr::null(), 0);
    }
    // SAFETY: the caller's promise.
    let m = unsafe { &*m };
    (m.msg_iov, c_int::try_from(m.msg_iovlen).unwrap_or(0))
}

unsafe extern "C-unwind" fn recvmsg_at(
    fd: c_int,
    msg: *mut libc::msghdr,
    flags: c_int,
    pc: usize,
) -> isize {
    // SAFETY: the caller's message header, as recvmsg asks.
    let (iov, cnt) = unsafe { message_iovecs(msg) };
    // SAFETY: the caller's iovecs, as recvmsg asks.
    let bufs = unsafe { iovecs(iov, cnt) };
    // SAFETY: as above.
    let beside = unsafe { Beside::message(msg, true) };
    if let Some(len) = private_receive(|| descriptor_kind(fd), bufs, flags) {
        // SAFETY: the C library's recvmsg with a copy of the caller's header whose iovecs are
        // private buffers for the caller's, in shared memory (no more of them than the
        // caller's count); what the call writes into the header (the lengths of the address
        // and the control data, the flags) goes back into the caller's. The address and the
        // control data are the caller's, made ready right before.
        let r = unsafe {
            received_privately(bufs, len, |mine| {
                let mut m = *msg;
                m.msg_iov = mine.as_mut_ptr();
                m.msg_iovlen = mine.len() as _;
                prepare_beside(&beside[1..]);
                let r = crate::cancellable::recvmsg(fd, &mut m, flags);
                (*msg).msg_namelen = m.msg_namelen;
                (*msg).msg_controllen = m.msg_controllen;
                (*msg).msg_flags = m.msg_flags;
                r
            })
        };
        if let Some(r) = r {
            record_iovecs(bufs, r, true, pc);
            return r;
        }
    }
    // SAFETY: the C library's recvmsg with the caller's arguments.
    unsafe {
        vectored(iov, cnt, true, &beside, pc, || {
            crate::cancellable::recvmsg(fd, msg, flags)
        })
    }
}

unsafe extern "C-unwind" fn sendmsg_at(
    fd: c_int,
    msg: *const libc::msghdr,
    flags: c_int,
    pc: usize,
) -> isize {
    // SAFETY: the caller's message header, as sendmsg asks.
    let (iov, cnt) = unsafe { message_iovecs(msg) };
    // SAFETY: as above.
    let beside = unsafe { Beside::message(msg, false) };
    // SAFETY: the caller's iovecs, as sendmsg asks.
    let bufs = unsafe { iovecs(iov, cnt) };
    // A stream's bytes go in pieces, as writev's, the ancillary data (descriptors passed) with
    // the first piece alone, as the kernel attaches it to the first byte.
    if written_in_pieces(fd, bufs) {
        let r = vectored_in_pieces(bufs, false, true, |cut, done| {
            prepare_beside(&beside);
            // SAFETY: the C library's sendmsg with a copy of the caller's header (not null
            // where it has buffers) whose iovecs are a piece of the caller's.
            unsafe {
                let mut m = *msg;
                m.msg_iov = cut.as_ptr().cast_mut();
                m.msg_iovlen = cut.len() as _;
                if done > 0 {
                    m.msg_control = std::ptr::null_mut();
                    m.msg_controllen = 0;
                }
                crate::cancellable::sendmsg(fd, &m, flags)
            }
        });
        record_iovecs(bufs, r, false, pc);
        return r;
    }
    // SAFETY: the C library's sendmsg with the caller's arguments.
    unsafe {
        vectored(iov, cnt, false, &beside, pc, || {
            crate::cancellable::sendmsg(fd, msg, flags)
        })
    }
}

/// `recvmmsg` and `sendmmsg`: each message's buffers brought in, the call made (again after
/// EFAULT), and, for each message it moved, the bytes moved (its `msg_len`) recorded buffer by
/// buffer in order.
///
/// # Safety
/// As the C library's `recvmmsg` (`kernel_writes`) or `sendmmsg`: `msgs` points to `n` headers.
unsafe fn vectored_messages(
    msgs: *mut libc::mmsghdr,
    n: libc::c_uint,
    kernel_writes: bool,
    pc: usize,
    call: impl Fn() -> c_int,
) -> c_int {
    let headers: &[libc::mmsghdr] = match usize::try_from(n) {
        // SAFETY: the caller's promise.
        Ok(n) if n > 0 && !msgs.is_null() => unsafe { std::slice::from_raw_parts(msgs, n) },
        _ => &[],
    };
    let bring_in = || {
        // The headers themselves: the kernel writes each message's length (`msg_len`), and,
        // receiving, its header's lengths and flags.
        let array = prepare_beside(&[Beside::written(msgs, size_of_val(headers))]);
        headers.iter().fold(array, |shared, h| {
            // SAFETY: each header's iovecs, as the call asks.
            let (iov, cnt) = unsafe { message_iovecs(&h.msg_hdr) };
            // SAFETY: as the caller's promise.
            let bufs = unsafe { iovecs(iov, cnt) };
            // SAFETY: as the caller's promise: each header's address and ancillary data.
            let beside = unsafe { Beside::message(&h.msg_hdr, kernel_writes) };
            shared | prepare_iovecs(bufs, kernel_writes) | prepare_beside(&beside[1..])
        })
    };
    let most = if kernel_writes { RECEIVE_TRIES } else { STALLS };
    let moved = retried(bring_in, most, || call() as isize) as c_int;
    let headers: &[libc::mmsghdr] = match usize::try_from(moved) {
        // SAFETY: the call has returned: the first `moved` headers are the program's again,
        // `msg_len` written by the kernel for each message moved.
        Ok(k) if k > 0 => unsafe { std::slice::from_raw_parts(msgs, k.min(n as usize)) },
        _ => &[],
    };
    for h in headers {
        // SAFETY: as above.
        let (iov, cnt) = unsafe { message_iovecs(&h.msg_hdr) };
        let mut left = h.msg_len as usize;
        // SAFETY: as above.
        let bufs = unsafe { iovecs(iov, cnt) };
        for b in bufs {
            let k = b.iov_len.min(left);
            record(b.iov_base, k as isize, kernel_writes, pc);
            left -= k;
        }
    }
    moved
}

unsafe extern "C-unwind" fn recvmmsg_at(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    n: libc::c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
    pc: usize,
) -> c_int {
    // SAFETY: the C library's recvmmsg with the caller's arguments.
    unsafe {
        vectored_messages(msgs, n, true, pc, || {
            crate::cancellable::recvmmsg(fd, msgs, n, flags, timeout)
        })
    }
}

unsafe extern "C-unwind" fn sendmmsg_at(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    n: libc::c_uint,
    flags: c_int,
    pc: usize,
) -> c_int {
    // SAFETY: the C library's sendmmsg with the caller's arguments.
    unsafe {
        vectored_messages(msgs, n, false, pc, || {
            crate::cancellable::sendmmsg(fd, msgs, n, flags)
        })
    }
}

unsafe extern "C-unwind" fn fgets_at(
    s: *mut libc::c_char,
    n: c_int,
    f: *mut libc::FILE,
    pc: usize,
) -> *mut libc::c_char {
    // SAFETY: the C library's fgets with the caller's arguments (it copies from the stream's
    // buffer: a fault on `s` is the DSM's to serve).
    let got = unsafe { crate::cancellable::fgets(s, n, f) };
    if !got.is_null() {
        // SAFETY: fgets stored a string at `s`.
        let len = unsafe { libc::strlen(s) } + 1;
        record(s.cast(), len as isize, true, pc);
    }
    got
}

// ----- signals and shared memory's mappings -----
//
// The DSM serves faults on shared memory from its SIGSEGV/SIGBUS handler, and sees reads and
// writes by the protection it gives each page. A program that installed its own SIGSEGV handler
// after jia_init (crash reporters, garbage collectors, libsigsegv do) took every fault on shared
// memory in its own handler and spun there forever; one that called mprotect on shared memory
// made its writes invisible to the DSM (lost without a word), and munmap ended the node at the
// DSM's next mprotect. These definitions take the place of the C library's for programs linked
// with libjia:
//
// - `sigaction`, `signal`, `bsd_signal`, `sysv_signal` and `sigset`, for SIGSEGV and SIGBUS once
//   jia_init installed the DSM's handler: the DSM's handler stays, and the program's becomes the
//   one it passes every fault outside shared memory to; the previous action the program gets back
//   is its own (what it would have seen without the DSM). Other signals, and every call before
//   jia_init, are the C library's.
// - `mprotect`, `munmap`, `mremap` and `madvise` (the advice that discards memory: DONTNEED,
//   FREE, REMOVE, DONTNEED_LOCKED, HWPOISON) on a range that overlaps shared memory: refused with
//   -1 and errno EPERM (Linux's answer for memory sealed by mseal(2), which shared memory is to
//   the program: valid arguments, an operation not permitted), with one line on standard error
//   naming the call and the range. Elsewhere they are the kernel's, made as system calls (glibc
//   exports no other name for them).
//
// The runtime inside this library makes its own calls through `__sigaction` and raw system
// calls, never through these symbols.

unsafe extern "C-unwind" {
    fn __sysv_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t;
    /// glibc's BSD `signal` under the one exported name libjia does not define.
    fn ssignal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t;
}

/// `int sigaction(int sig, const struct sigaction *act, struct sigaction *old)`: see the section
/// comment.
///
/// # Safety
/// As the C library's `sigaction`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    // SAFETY: the caller passes null or live structs, as to the C library's sigaction.
    let (a, o) = unsafe { (act.as_ref(), old.as_mut()) };
    if dsm_runtime::interpose::program_sigaction(sig, a, o) {
        return 0;
    }
    if dsm_races::on() {
        // SAFETY: the caller's arguments, as to the C library's sigaction.
        return unsafe { crate::races::checked_sigaction(sig, act, old) };
    }
    // SAFETY: the C library's sigaction with the caller's arguments.
    unsafe { __sigaction(sig, act, old) }
}

/// A handler installed the `signal` way (`flags`, and `sig` itself blocked while it runs unless
/// `SA_NODEFER`) for SIGSEGV or SIGBUS through [`sigaction`]; the previous handler, or
/// `SIG_ERR`.
fn signal_as(sig: c_int, handler: libc::sighandler_t, flags: c_int) -> libc::sighandler_t {
    // SAFETY: a zeroed sigaction is valid plain data.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    // SAFETY: sa_mask is a live sigset_t of `act`.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        if flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut act.sa_mask, sig);
        }
    }
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: live structs.
    if unsafe { sigaction(sig, &act, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Whether the DSM stands between the program and `sig`'s action now.
fn dsm_signal(sig: c_int) -> bool {
    // A query changes nothing; it says whether the DSM answers for `sig`.
    dsm_runtime::interpose::program_sigaction(sig, None, None)
}

/// Notes a handler installed the C library's way, for the DSM (see `note_handler`).
fn note_signal(sig: c_int, handler: libc::sighandler_t) {
    // SAFETY: a zeroed sigaction is valid plain data.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    dsm_runtime::interpose::note_handler(sig, &act);
}

/// `sighandler_t signal(int sig, sighandler_t handler)` (BSD semantics, as glibc's): see the
/// section comment.
///
/// # Safety
/// As the C library's `signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if dsm_signal(sig) || dsm_races::on() {
        return signal_as(sig, handler, libc::SA_RESTART);
    }
    note_signal(sig, handler);
    // SAFETY: the C library's signal with the caller's arguments.
    unsafe { ssignal(sig, handler) }
}

/// `bsd_signal`: [`signal`].
///
/// # Safety
/// As the C library's `bsd_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn bsd_signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: as signal.
    unsafe { signal(sig, handler) }
}

/// `sysv_signal` (System V semantics: reset to the default action on delivery, not blocked while
/// it runs).
///
/// # Safety
/// As the C library's `sysv_signal`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sysv_signal(
    sig: c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if dsm_signal(sig) || dsm_races::on() {
        return signal_as(sig, handler, libc::SA_RESETHAND | libc::SA_NODEFER);
    }
    note_signal(sig, handler);
    // SAFETY: the C library's sysv_signal with the caller's arguments.
    unsafe { __sysv_signal(sig, handler) }
}

/// glibc's `SIG_HOLD`.
const SIG_HOLD: libc::sighandler_t = 2;

/// `sighandler_t sigset(int sig, sighandler_t disp)` (System V), as glibc's, through
/// [`sigaction`].
///
/// # Safety
/// As the C library's `sigset`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn sigset(sig: c_int, disp: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: zeroed sigset_t and sigaction are valid plain data; every call below reads and
    // writes only these live locals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut was: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigemptyset(&mut set) != 0 || libc::sigaddset(&mut set, sig) != 0 {
            return libc::SIG_ERR;
        }
        if disp == SIG_HOLD {
            if libc::sigprocmask(libc::SIG_BLOCK, &set, &mut was) != 0 {
                return libc::SIG_ERR;
            }
            if libc::sigismember(&was, sig) == 1 {
                return SIG_HOLD;
            }
            if sigaction(sig, std::ptr::null(), &mut old) != 0 {
                return libc::SIG_ERR;
            }
            return old.sa_sigaction;
        }
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = disp;
        libc::sigemptyset(&mut act.sa_mask);
        if sigaction(sig, &act, &mut old) != 0
            || libc::sigprocmask(libc::SIG_UNBLOCK, &set, &mut was) != 0
        {
            return libc::SIG_ERR;
        }
        if libc::sigismember(&was, sig) == 1 {
            SIG_HOLD
        } else {
            old.sa_sigaction
        }
    }
}

/// `prot` as a C program writes it (for the message of a refused call).
fn prot_name(prot: c_int) -> &'static str {
    const R: c_int = libc::PROT_READ;
    const W: c_int = libc::PROT_WRITE;
    const X: c_int = libc::PROT_EXEC;
    match prot {
        libc::PROT_NONE => "PROT_NONE",
        R => "PROT_READ",
        W => "PROT_WRITE",
        X => "PROT_EXEC",
        0x3 => "PROT_READ|PROT_WRITE",
        0x5 => "PROT_READ|PROT_EXEC",
        0x6 => "PROT_WRITE|PROT_EXEC",
        0x7 => "PROT_READ|PROT_WRITE|PROT_EXEC",
        _ => "other protection",
    }
}

/// `int mprotect(void *addr, size_t len, int prot)`: refused on shared memory (see the section
/// comment).
///
/// # Safety
/// As the C library's `mprotect`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int {
    if dsm_runtime::interpose::refused_on_shared("mprotect", addr as usize, len, prot_name(prot)) {
        return -1;
    }
    // SAFETY: the kernel's mprotect with the caller's arguments, outside shared memory.
    unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as c_int }
}

/// `int munmap(void *addr, size_t len)`: refused on shared memory (see the section comment).
///
/// # Safety
/// As the C library's `munmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if dsm_runtime::interpose::refused_on_shared("munmap", addr as usize, len, "") {
        return -1;
    }
    // SAFETY: the kernel's munmap with the caller's arguments, outside shared memory.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// `void *mremap(void *old, size_t old_len, size_t new_len, int flags, ... /* void *new */)`:
/// refused when the old range, or with `MREMAP_FIXED` the new one, overlaps shared memory (see
/// the section comment). The fifth argument is read only with `MREMAP_FIXED`, as glibc does (on
/// x86-64 and AArch64 Linux a variadic pointer argument is passed as a fixed one would be).
///
/// # Safety
/// As the C library's `mremap`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new: *mut c_void,
) -> *mut c_void {
    let new = if flags & libc::MREMAP_FIXED != 0 {
        new
    } else {
        std::ptr::null_mut()
    };
    if dsm_runtime::interpose::refused_on_shared("mremap", old as usize, old_len, "")
        || (!new.is_null()
            && dsm_runtime::interpose::refused_on_shared("mremap to", new as usize, new_len, ""))
    {
        return libc::MAP_FAILED;
    }
    // SAFETY: the kernel's mremap with the caller's arguments, outside shared memory.
    unsafe { libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new) as *mut c_void }
}

/// `int madvise(void *addr, size_t len, int advice)`: advice that discards memory (or poisons
/// it) refused on shared memory (see the section comment); advice that asks for huge pages
/// (`MADV_HUGEPAGE`, `MADV_COLLAPSE`) taken and ignored on a range that overlaps it (the DSM
/// chooses the sizes of its pages: 4 KiB where a page is faulted alone, large folios where a
/// run lands); other advice is the kernel's.
///
/// # Safety
/// As the C library's `madvise`.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int {
    let discards = match advice {
        libc::MADV_DONTNEED => "MADV_DONTNEED",
        libc::MADV_FREE => "MADV_FREE",
        libc::MADV_REMOVE => "MADV_REMOVE",
        libc::MADV_DONTNEED_LOCKED => "MADV_DONTNEED_LOCKED",
        libc::MADV_HWPOISON => "MADV_HWPOISON",
        _ => "",
    };
    if !discards.is_empty()
        && dsm_runtime::interpose::refused_on_shared("madvise", addr as usize, len, discards)
    {
        return -1;
    }
    const MADV_COLLAPSE: c_int = 25;
    if matches!(advice, libc::MADV_HUGEPAGE | MADV_COLLAPSE)
        && dsm_runtime::in_shared_region(addr.cast_const().cast(), len)
    {
        return 0;
    }
    // SAFETY: the kernel's madvise with the caller's arguments.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of descriptor is told apart as a receive into shared memory needs: files (and
    /// block devices) read in place, sockets that take whole messages and everything else
    /// through a private buffer; no descriptor is left to the call.
    #[test]
    fn descriptors_are_told_apart_by_what_a_lost_copy_costs() {
        let pair = |kind: c_int| {
            let mut sv = [0 as c_int; 2];
            // SAFETY: socketpair writes two descriptors into `sv`.
            let r = unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, sv.as_mut_ptr()) };
            assert_eq!(r, 0, "socketpair");
            sv
        };
        let close = |fds: &[c_int]| {
            for &fd in fds {
                // SAFETY: closes a descriptor this test opened.
                unsafe { libc::close(fd) };
            }
        };
        for (kind, want) in [
            (libc::SOCK_DGRAM, Descriptor::Messages),
            (libc::SOCK_SEQPACKET, Descriptor::Messages),
            (libc::SOCK_STREAM, Descriptor::Stream),
        ] {
            let sv = pair(kind);
            assert!(descriptor_kind(sv[0]) == Some(want), "socket kind {kind}");
            close(&sv);
        }
        let mut p = [0 as c_int; 2];
        // SAFETY: pipe writes two descriptors into `p`.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        assert!(descriptor_kind(p[0]) == Some(Descriptor::Stream));
        close(&p);
        let file = std::fs::File::open("/proc/self/exe").expect("open this test's executable");
        assert!(descriptor_kind(std::os::fd::AsRawFd::as_raw_fd(&file)) == Some(Descriptor::File));
        drop(file);
        assert!(descriptor_kind(-1).is_none(), "no descriptor");
    }
}
