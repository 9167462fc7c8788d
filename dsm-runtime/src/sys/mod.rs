//! Thin wrappers over the system calls the runtime needs: memfd, mmap, mprotect, fallocate,
//! eventfd, epoll, futex, and the stacks fault handlers drive the node on ([`stack`]). Every unsafe
//! block is here or in [`signals`], each with its reason.
//!
//! `mprotect`, `munmap` and `pwrite` are made as raw system calls ([`raw_mprotect`],
//! [`raw_munmap`], [`write_file_at`]), never through the C library's symbols: in `libjia` those
//! symbols are libjia's own, which refuse the program's calls on shared memory, and the runtime
//! is the one that may make them.

pub mod hugefile;
pub mod process;
pub mod signals;
pub mod stack;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;

/// Calls a libc function returning -1 on error, turning it into an `io::Result`.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        // SAFETY: the caller of the macro passes arguments valid for this call (each use site
        // below states why).
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 { Err(std::io::Error::last_os_error()) } else { Ok(res) }
    }};
}

// After the macro, which it uses.
pub mod host_socket;

/// Page protection of the application's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// PROT_NONE.
    None,
    /// PROT_READ.
    Read,
    /// PROT_READ | PROT_WRITE.
    ReadWrite,
}

impl Protection {
    fn bits(self) -> libc::c_int {
        match self {
            Protection::None => libc::PROT_NONE,
            Protection::Read => libc::PROT_READ,
            Protection::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// An anonymous memory file of `size` bytes (sparse).
pub fn memfd(name: &str, size: u64) -> io::Result<OwnedFd> {
    let cname =
        std::ffi::CString::new(name).map_err(|_| io::Error::other("memfd name has a NUL"))?;
    // cname is a valid NUL-terminated string for the call's duration.
    let fd = syscall!(memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC))?;
    // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // fd is a valid memfd.
    syscall!(ftruncate(fd.as_raw_fd(), size as libc::off_t))?;
    Ok(fd)
}

/// Maps `size` bytes of `fd` shared, at exactly `at` (failing if anything is there) or anywhere.
pub fn map_shared(
    fd: &OwnedFd,
    size: usize,
    at: Option<usize>,
    prot: Protection,
) -> io::Result<*mut u8> {
    let mut flags = libc::MAP_SHARED | libc::MAP_NORESERVE;
    let addr = match at {
        Some(a) => {
            flags |= libc::MAP_FIXED_NOREPLACE;
            a as *mut libc::c_void
        }
        None => std::ptr::null_mut(),
    };
    // SAFETY: mmap with MAP_FIXED_NOREPLACE never replaces an existing mapping; without an address
    // the kernel chooses a free range. The fd is a valid memfd at least `size` bytes long.
    let p = unsafe { libc::mmap(addr, size, prot.bits(), flags, fd.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    if let Some(a) = at {
        if p as usize != a {
            // An old kernel ignored MAP_FIXED_NOREPLACE and put the mapping elsewhere.
            // SAFETY: p..p+size is the mapping just created, not used by anyone yet.
            unsafe { raw_munmap(p as usize, size) };
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("address {a:#x} is taken"),
            ));
        }
    }
    Ok(p.cast())
}

/// Maps `len` bytes of `fd` from `offset` at exactly `addr`, shared, with no access, in place of
/// what was mapped there (a page of the application's view shown from another file, or given
/// back to its own). A raw system call: bounded, no allocation, async-signal-safe.
///
/// # Safety
///
/// `addr..addr + len` lies in a mapping of ours that no Rust reference points into (the shared
/// region's application view), and `fd` is at least `offset + len` bytes long.
pub unsafe fn map_file_fixed(fd: &OwnedFd, addr: usize, len: usize, offset: u64) -> io::Result<()> {
    let flags = libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_NORESERVE;
    // SAFETY: the caller's promise: the range replaced is ours and unreferenced; the system
    // call takes plain integers and a descriptor that lives across it.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            addr,
            len,
            libc::PROT_NONE,
            flags,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p as isize == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `madvise` as a raw system call (in libjia, `madvise` is libjia's own).
fn raw_madvise(addr: *mut u8, len: usize, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: the kernel checks the range; the caller passes a mapping of its own and advice
    // that changes none of its bytes.
    let r = unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Marks `len` bytes at `addr`, a shared mapping of the region's file, so that a page the kernel
/// backs on a fault through it gets 4 KiB and never a large folio (`MADV_NOHUGEPAGE`): the file
/// of [`hugefile`] gives large folios wherever nothing stops it, and a page a thread touches
/// must not back its neighbours with it.
pub fn small_pages_on_fault(addr: *mut u8, len: usize) -> io::Result<()> {
    raw_madvise(addr, len, libc::MADV_NOHUGEPAGE)
}

/// Whether transparent huge pages are switched off for this process (`PR_SET_THP_DISABLE`,
/// inherited from whoever started it).
pub fn huge_pages_disabled_here() -> bool {
    const PR_GET_THP_DISABLE: libc::c_int = 42;
    // SAFETY: prctl with PR_GET_THP_DISABLE reads a flag of this process.
    unsafe { libc::prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) > 0 }
}

/// Whether `len` bytes at exactly `at` can be reserved in this process (a launcher's check of a
/// region's settings before any node starts): reserves them without access and lets them go.
pub fn can_reserve(at: usize, len: usize) -> io::Result<()> {
    let flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the range is unmapped
    // again at once and never used.
    let p = unsafe { libc::mmap(at as *mut libc::c_void, len, libc::PROT_NONE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: p..p+len is the reservation just made.
    unsafe { raw_munmap(p as usize, len) };
    if p as usize != at {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("address {at:#x} is taken"),
        ));
    }
    Ok(())
}

/// Touches one byte of every page of `[start, end)` (addresses of the shared region's
/// application view, which is always mapped), as the access a system call is about to make: a
/// read, or, with `write`, an atomic compare-and-swap of the byte with itself (a write that
/// changes nothing, whatever other threads of this node write meanwhile; an atomic add of zero
/// would not do: the compiler turns it into a fenced load). A page not held here faults and is
/// fetched, as for any access of the program's.
///
/// # Safety
///
/// `[start, end)` lies in a live mapping, and with `write` no other thread writes the touched
/// bytes (the first of each page) non-atomically meanwhile.
pub unsafe fn touch_pages(start: usize, end: usize, write: bool) {
    use std::sync::atomic::{AtomicU8, Ordering};
    let page = dsm_core::PAGE_SIZE;
    let mut at = start;
    while at < end {
        if write {
            // SAFETY: `at` lies in a live mapping and nobody writes the byte non-atomically (the
            // caller's promise); swapping a value for itself leaves it as it is.
            let byte = unsafe { AtomicU8::from_ptr(at as *mut u8) };
            let mut v = byte.load(Ordering::Relaxed);
            while let Err(now) =
                byte.compare_exchange_weak(v, v, Ordering::Relaxed, Ordering::Relaxed)
            {
                v = now;
            }
        } else {
            // SAFETY: a read of a byte of a live mapping (the caller's promise).
            unsafe { std::ptr::read_volatile(at as *const u8) };
        }
        at = (at / page + 1) * page;
    }
}

/// Changes the protection of `len` bytes from `addr` (page aligned).
///
/// # Safety
///
/// The range lies in a mapping of ours that no Rust reference points into while the protection
/// forbids its access (the shared region's application view: the runtime holds none; the
/// program's own accesses fault and are served).
pub unsafe fn mprotect(addr: usize, len: usize, prot: Protection) -> io::Result<()> {
    // SAFETY: the caller's promise above.
    if unsafe { raw_mprotect(addr, len, prot.bits()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `mprotect(2)` as a raw system call (see the module doc): 0, or -1 with errno set.
/// Async-signal-safe.
///
/// # Safety
///
/// As `mprotect(2)`: no Rust reference points into a range whose protection then forbids its
/// access.
pub unsafe fn raw_mprotect(addr: usize, len: usize, prot: libc::c_int) -> libc::c_int {
    // SAFETY: the caller's promise; the system call takes plain integers.
    unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as libc::c_int }
}

/// `munmap(2)` as a raw system call (see the module doc): 0, or -1 with errno set.
///
/// # Safety
///
/// Nothing refers to the range any more.
pub unsafe fn raw_munmap(addr: usize, len: usize) -> libc::c_int {
    // SAFETY: the caller's promise; the system call takes plain integers.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as libc::c_int }
}

/// Frees the memory behind `len` bytes at `offset` of a memfd (the bytes read back as zeros).
pub fn punch_hole(fd: &OwnedFd, offset: u64, len: u64) -> io::Result<()> {
    // fd is a valid memfd; the range is inside it.
    syscall!(fallocate(
        fd.as_raw_fd(),
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        offset as libc::off_t,
        len as libc::off_t
    ))?;
    Ok(())
}

/// Writes `data` at `offset` of the memfd `fd`, all of it. `pwrite64` as a raw system call: in
/// libjia, `pwrite` is libjia's own. Whole pages written where the file has none are allocated
/// without being zeroed first, and need no page-table entry: the cheapest way to fill fresh
/// pages (about 1.3 us a page here, against 2 us for backing them through a mapping and
/// copying). Async-signal-safe (errno is the caller's to keep).
pub fn write_file_at(fd: &OwnedFd, mut data: &[u8], mut offset: u64) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: pwrite64 reads `data.len()` bytes of the live slice `data` and writes them to
        // the file; fd is a valid descriptor for the call.
        let n = unsafe {
            libc::syscall(
                libc::SYS_pwrite64,
                fd.as_raw_fd(),
                data.as_ptr(),
                data.len(),
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        data = &data[n as usize..];
        offset += n as u64;
    }
    Ok(())
}

// The eventfd and epoll helpers are the transport crate's (one copy for both crates).
pub use dsm_transport::sys::{Epoll, eventfd, eventfd_drain, eventfd_signal};

/// Sleeps while `*word == expected` (or until woken). Async-signal-safe.
pub fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: the futex word is a live, aligned u32 for the call's duration; a null timeout waits
    // until woken. Spurious returns are handled by the callers' loops.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
        )
    };
}

/// Wakes every thread sleeping on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: the futex word is a live, aligned u32; FUTEX_WAKE touches nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// This thread's kernel id. Async-signal-safe.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() }
}

/// Whether thread `tid` of this process still exists (`tgkill` with signal 0 sends nothing; it
/// only checks). A thread id can be reused by a later thread, so `true` is "maybe". Async-signal-
/// safe.
/// Keeps errno as it was (this may run in a signal handler).
pub fn thread_exists(tid: i32) -> bool {
    // SAFETY: __errno_location returns this thread's errno; tgkill with signal 0 is never
    // delivered, the call only looks the thread up; errno is put back as it was.
    unsafe {
        let errno = libc::__errno_location();
        let saved = *errno;
        let r = libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0);
        let gone = r != 0 && *errno == libc::ESRCH;
        *errno = saved;
        !gone
    }
}

/// Whether process `pid` is on its way out: a SIGKILL (or an exit) has begun tearing it down
/// (the kernel's `PF_EXITING` flag, field 9 of `/proc/PID/stat`), while it is not yet a zombie
/// its parent could reap. A process killed with a large mapping can spend a while there, its
/// sockets already closed.
pub fn process_exiting(pid: u32) -> bool {
    /// `PF_EXITING` in `include/linux/sched.h`.
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // After the command name, which is in parentheses and may hold spaces: state, ppid, pgrp,
    // session, tty_nr, tpgid, flags.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    let flags = fields.nth(5).and_then(|f| f.parse::<u64>().ok());
    state != Some("Z") && flags.is_some_and(|f| f & PF_EXITING != 0)
}

/// Writes `msg` to stderr with write(2), again after a partial write or an interrupted one,
/// and no more after any other failure. Takes no lock. Async-signal-safe (errno is changed:
/// signal-context callers keep it themselves).
pub fn write_stderr(mut msg: &[u8]) {
    while !msg.is_empty() {
        // SAFETY: writes from a live byte slice to fd 2.
        let n = unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        match n {
            n if n > 0 => msg = &msg[n as usize..],
            -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}

/// Opens `/dev/null` on each of descriptors 0, 1 and 2 that is closed, before the runtime opens
/// anything: a program that closed its standard error before joining (a daemon's habit, a
/// shell's `2>&-`) had the node's memory file opened as descriptor 2, and the runtime's own
/// messages, written to descriptor 2, landed at the start of shared memory and reached every
/// node. A descriptor the program opens later cannot be one of them either.
pub fn keep_standard_descriptors_taken() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD only asks about the descriptor.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1
            || io::Error::last_os_error().raw_os_error() != Some(libc::EBADF)
        {
            continue;
        }
        // SAFETY: opens a path given as a C string; the lowest free descriptor is `fd` (the
        // ones below it are open, by the order of this loop), where it stays for the process.
        let got = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if got >= 0 && got != fd {
            // SAFETY: the descriptor just opened, which nothing else holds.
            unsafe { libc::close(got) };
        }
    }
}

/// `bytes` of zeroed, private, lazily backed read-write memory that lives as long as the process.
pub fn map_anonymous(bytes: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh private anonymous mapping chosen by the kernel; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// `n` zeroed atomic bytes, lazily backed, that live as long as the process (one per page of the
/// shared region for the fault handler's fast paths: gigabytes of region, megabytes here, backed
/// only where touched).
pub fn atomic_bytes(n: usize) -> io::Result<&'static [std::sync::atomic::AtomicU8]> {
    let p = map_anonymous(n)?;
    // SAFETY: `p` is a fresh mapping of at least `n` zeroed bytes, never unmapped, which nothing
    // else refers to; AtomicU8 has the size and alignment of u8 and zero is a valid value.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<std::sync::atomic::AtomicU8>(), n) })
}

/// `n` zeroed atomic 32-bit counters, lazily backed, that live as long as the process (one per
/// page of the shared region).
pub fn atomic_counters(n: usize) -> io::Result<&'static [std::sync::atomic::AtomicU32]> {
    let p = map_anonymous(n * 4)?;
    // SAFETY: `p` is a fresh page-aligned mapping of at least `4 * n` zeroed bytes, never
    // unmapped, which nothing else refers to; AtomicU32 has the size of u32, its alignment (4)
    // divides the page's, and zero is a valid value.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<std::sync::atomic::AtomicU32>(), n) })
}

/// Applies `op` to the `width`-byte word (1, 2, 4 or 8) at `addr` as one sequentially consistent
/// atomic operation of the CPU (a `lock`ed instruction, or a compare-exchange loop); the value
/// before. A store is a swap, a load a plain atomic load.
///
/// # Safety
/// `width` is 1, 2, 4 or 8, `addr` is aligned to it and lies in a mapping that lives as long as the process (a view
/// of the shared region), readable and, for an operation that writes, writable or made so by
/// the fault handler (a home page whose writes are tracked).
pub unsafe fn atomic_rmw(addr: usize, width: u8, op: dsm_core::AtomicOp) -> u64 {
    use dsm_core::AtomicOp;
    use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU64, Ordering::SeqCst};
    macro_rules! apply {
        ($a:expr, $t:ty) => {{
            let a = $a;
            match op {
                AtomicOp::Load => u64::from(a.load(SeqCst)),
                AtomicOp::Store(v) | AtomicOp::Swap(v) => u64::from(a.swap(v as $t, SeqCst)),
                AtomicOp::CompareExchange { expected, new } => u64::from(
                    a.compare_exchange(expected as $t, new as $t, SeqCst, SeqCst)
                        .unwrap_or_else(|v| v),
                ),
                AtomicOp::FetchAdd(v) => u64::from(a.fetch_add(v as $t, SeqCst)),
                AtomicOp::FetchSub(v) => u64::from(a.fetch_sub(v as $t, SeqCst)),
                AtomicOp::FetchAnd(v) => u64::from(a.fetch_and(v as $t, SeqCst)),
                AtomicOp::FetchOr(v) => u64::from(a.fetch_or(v as $t, SeqCst)),
                AtomicOp::FetchXor(v) => u64::from(a.fetch_xor(v as $t, SeqCst)),
            }
        }};
    }
    match width {
        // SAFETY: the caller's contract: aligned, mapped for the process's life; AtomicU64 has
        // u64's size and alignment, and other threads reach the word only through atomics.
        8 => apply!(unsafe { AtomicU64::from_ptr(addr as *mut u64) }, u64),
        // SAFETY: as above, for a 4-byte word.
        4 => apply!(unsafe { AtomicU32::from_ptr(addr as *mut u32) }, u32),
        // SAFETY: as above, for a 2-byte word.
        2 => apply!(unsafe { AtomicU16::from_ptr(addr as *mut u16) }, u16),
        // SAFETY: as above, for a byte (any address is aligned to 1).
        1 => apply!(unsafe { AtomicU8::from_ptr(addr as *mut u8) }, u8),
        _ => panic!("an atomic word of {width} bytes (the callers take 1, 2, 4 or 8)"),
    }
}

/// Opens `path` for writing from its start, creating it (mode 0644, less the umask) if it is
/// not there, but only as a file of this user's: not through a symbolic link (`O_NOFOLLOW`), not
/// a file another user owns, not anything but a regular file. A file of ours that was there is
/// emptied. This is how the runtime writes files at paths the user names (statistics, output,
/// traces), so that a link another user planted in a shared directory (`/tmp`) cannot make it
/// overwrite a file there.
pub fn create_own_file(path: &std::path::Path) -> io::Result<std::fs::File> {
    let f = open_own_file(path)?;
    f.set_len(0)?;
    Ok(f)
}

/// Writes `bytes` to `path` through [`create_own_file`].
pub fn write_own_file(path: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    std::io::Write::write_all(&mut create_own_file(path)?, bytes)
}

/// Whether [`create_own_file`] would open `path`, without changing a file that is there (one
/// made for the check goes again).
pub fn check_own_file(path: &std::path::Path) -> io::Result<()> {
    let existed = std::fs::symlink_metadata(path).is_ok();
    open_own_file(path)?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

fn open_own_file(path: &std::path::Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::other("it is a symbolic link: refused")
            } else {
                e
            }
        })?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file: refused"));
    }
    if meta.uid() != euid() {
        return Err(io::Error::other(format!(
            "owned by uid {}, not by this user ({}): refused",
            meta.uid(),
            euid()
        )));
    }
    Ok(f)
}

/// Makes directory `path` if it is not there (mode 0755, less the umask), and checks that it
/// is a directory of this user's, not a symbolic link: the same rule as [`create_own_file`],
/// for each directory the runtime makes under a path the user names.
pub fn make_own_dir(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o755).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Err(io::Error::other(format!(
            "{} is a symbolic link: refused",
            path.display()
        )));
    }
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            path.display()
        )));
    }
    if meta.uid() != euid() {
        return Err(io::Error::other(format!(
            "{} is owned by uid {}, not by this user ({}): refused",
            path.display(),
            meta.uid(),
            euid()
        )));
    }
    Ok(())
}

/// 64 unpredictable bits (from `/dev/urandom`; without it, time and pid, still enough to keep
/// jobs apart), odd so that it is never 0: a job's cookie, a private file's name.
pub fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            return u64::from_le_bytes(b) | 1;
        }
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_nanos() as u64 ^ (u64::from(std::process::id()) << 32)) | 1
}

/// Makes a directory of this user's alone (mode 0700) with an unpredictable name,
/// `<prefix>-<16 hex digits>`, under the system's temporary directory (`TMPDIR`, else `/tmp`):
/// nobody can guess it beforehand, so nobody can block it or plant a link in its place.
pub fn private_temp_dir(prefix: &str) -> io::Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    let mut last = None;
    for _ in 0..16 {
        let dir = base.join(format!("{prefix}-{:016x}", random_u64()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no name left")))
}

/// Keeps up to `bytes` of freed heap memory in the process instead of giving it back to the
/// kernel (glibc's `M_TRIM_THRESHOLD`; elsewhere nothing). A node's heap swings by megabytes
/// with each burst of pages (buffers copied, sent, freed once acknowledged): trimmed, every burst
/// took its memory back from the kernel a page fault and a zeroed page at a time.
pub fn keep_freed_heap(bytes: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tuning parameter of the allocator.
    unsafe {
        let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        libc::mallopt(libc::M_TRIM_THRESHOLD, bytes);
        // Setting one threshold fixes the other at its default (128 KiB), which glibc otherwise
        // raises to the largest block freed so far: every large buffer would then be mapped and
        // unmapped (faulted in, zeroed) anew. Keep the largest it would raise it to.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = bytes;
}

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the machine (through the
/// vDSO, async-signal-safe).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Gives the CPU to another runnable thread, if any. A thread in the realtime class
/// ([`set_realtime`]) leaves it first: a yield of a `SCHED_FIFO` thread lets no time-sharing
/// thread run, and whatever it waits for (a thread between two steps, the state's holder) may be
/// one on its CPU. Async-signal-safe (errno is the caller's to keep).
pub fn sched_yield() {
    if REALTIME.get() && set_realtime(false).is_err() {
        // Still realtime: sleep instead, so that time-sharing threads run meanwhile.
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000,
        };
        // SAFETY: nanosleep reads the live local `ts`; no remainder is asked for.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
        return;
    }
    // SAFETY: no arguments, no memory touched.
    unsafe { libc::sched_yield() };
}

/// The CPU the calling thread runs on (as of the call), if the kernel says.
pub fn current_cpu() -> Option<i32> {
    // SAFETY: sched_getcpu takes no arguments and touches no memory.
    let cpu = unsafe { libc::sched_getcpu() };
    (cpu >= 0).then_some(cpu)
}

/// Moves the calling thread to another CPU it may run on (by taking its current CPU out of its
/// affinity for a moment), then gives it back the affinity it had. Nothing if it may run on one
/// CPU only or a call fails. Async-signal-safe (system calls only).
pub fn move_off_this_cpu() {
    let Some(cpu) = current_cpu() else { return };
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls read and write only the sets
    // passed with their size.
    unsafe {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return;
        }
        let mut elsewhere = allowed;
        libc::CPU_CLR(cpu as usize, &mut elsewhere);
        if libc::CPU_COUNT(&elsewhere) == 0 {
            return;
        }
        // The thread leaves this CPU before the call returns; the second call frees it again.
        if libc::sched_setaffinity(0, size, &elsewhere) == 0 {
            libc::sched_setaffinity(0, size, &allowed);
        }
    }
}

/// The CPUs the calling thread may run on, in order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most `size`
    // bytes into it, and CPU_ISSET reads it.
    unsafe {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Lets the calling thread, and the threads it starts from now on, run on `cpus` only.
pub fn bind_to_cpus(cpus: &[usize]) -> io::Result<()> {
    if let Some(&cpu) = cpus.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::other(format!("no CPU {cpu}")));
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it (every cpu is
    // below CPU_SETSIZE), and sched_setaffinity reads `size` bytes of it.
    let rc = unsafe {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, size, &set)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A descriptor that becomes readable when process `pid` (our child) ends (`pidfd_open`,
/// Linux 5.3).
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Waits until one of `fds` is readable or `timeout` passes (or a signal arrives).
pub fn wait_readable(fds: &[std::os::fd::BorrowedFd<'_>], timeout: std::time::Duration) {
    let mut polls: Vec<libc::pollfd> = fds.iter().map(|fd| readable(fd.as_raw_fd())).collect();
    poll_readable(&mut polls, timeout);
}

/// [`wait_readable`] on raw descriptors, allocating nothing: async-signal-safe.
pub fn wait_readable_raw<const N: usize>(fds: &[i32; N], timeout: std::time::Duration) {
    poll_readable(&mut fds.map(readable), timeout);
}

fn readable(fd: i32) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// `ppoll` on `polls` for at most `timeout`, to the nanosecond.
fn poll_readable(polls: &mut [libc::pollfd], timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `polls` holds `polls.len()` initialised pollfd structs and `ts` a valid timespec
    // for the call's duration; a null signal mask leaves the thread's mask as it is.
    unsafe {
        libc::ppoll(
            polls.as_mut_ptr(),
            polls.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
}

thread_local! {
    /// Whether the calling thread is in the realtime class ([`set_realtime`]).
    static REALTIME: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The time slice the calling thread asked for in the time-sharing class, in nanoseconds (0:
    /// the scheduler's default).
    static SLICE_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// `struct sched_attr` of `sched_setattr(2)`.
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
    util_min: u32,
    util_max: u32,
}

/// `SCHED_FLAG_RESET_ON_FORK`: a child the thread forks starts in the time-sharing class.
const SCHED_FLAG_RESET_ON_FORK: u64 = 1;

/// `sched_setattr` for the calling thread. Async-signal-safe.
fn set_sched_attr(realtime: bool) -> io::Result<()> {
    // SAFETY: getpriority reads the calling thread's nice value (0 = this thread).
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: if realtime {
            libc::SCHED_FIFO as u32
        } else {
            libc::SCHED_OTHER as u32
        },
        flags: SCHED_FLAG_RESET_ON_FORK,
        nice,
        priority: u32::from(realtime),
        runtime: if realtime { 0 } else { SLICE_NS.get() },
        deadline: 0,
        period: 0,
        util_min: 0,
        util_max: 0,
    };
    // SAFETY: sched_setattr reads `attr` (size given in it) for thread 0, the calling thread.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the scheduler for a time slice of `slice` for the calling thread, keeping its policy
/// (`SCHED_OTHER`) and nice value (`sched_setattr` with `sched_runtime`; honoured by the EEVDF
/// scheduler since Linux 6.12, 0.1 to 100 ms). A thread with a short slice that wakes up
/// preempts a thread with a longer one, and its yields cost it little standing. The slice holds
/// again whenever the thread leaves the realtime class.
pub fn request_time_slice(slice: std::time::Duration) -> io::Result<()> {
    let before = SLICE_NS.replace(slice.as_nanos() as u64);
    let r = set_sched_attr(REALTIME.get());
    if r.is_err() {
        SLICE_NS.set(before);
    }
    r
}

/// Puts the calling thread in the realtime class (`SCHED_FIFO`, the lowest priority) or back in
/// the time-sharing one (`SCHED_OTHER`, its nice value and the slice of
/// [`request_time_slice`]); for a thread started time-sharing, with asynchronous signals
/// blocked (not reentrant: the class changes before the thread's record of it).
///
/// Realtime, a wake-up of the thread preempts any time-sharing thread on its CPU at once, and no
/// time-sharing thread preempts it: it runs until it sleeps or leaves the class. It must not
/// spin for a time-sharing thread meanwhile (its yields leave the class first:
/// [`sched_yield`]). Needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of 1 or more (else `EPERM`, and
/// the thread stays as it was); children it forks start time-sharing. Async-signal-safe.
pub fn set_realtime(on: bool) -> io::Result<()> {
    if REALTIME.get() == on {
        return Ok(());
    }
    set_sched_attr(on)?;
    REALTIME.set(on);
    Ok(())
}

/// Whether the calling thread is in the realtime class ([`set_realtime`]).
pub fn is_realtime() -> bool {
    REALTIME.get()
}

/// How many times the calling thread has blocked (its voluntary context switches,
/// `getrusage(RUSAGE_THREAD)`); 0 if the kernel does not say.
pub fn blocked_count() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into the live local.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    if r != 0 {
        return 0;
    }
    usage.ru_nvcsw as u64
}

/// Whether the calling thread is in the default time-sharing class (`SCHED_OTHER`), not in one
/// it was started in (`chrt`: batch, idle, realtime, deadline).
pub fn is_time_sharing() -> bool {
    // SAFETY: sched_getscheduler takes a thread id (0: the calling thread) and touches no memory.
    let policy = unsafe { libc::sched_getscheduler(0) };
    policy & !libc::SCHED_RESET_ON_FORK == libc::SCHED_OTHER
}

/// Flushes every C stream (`fflush(NULL)`). Not for signal context.
pub fn flush_c_stdio() {
    // SAFETY: fflush(NULL) takes no pointer of ours; it flushes the C library's own streams.
    unsafe { libc::fflush(std::ptr::null_mut()) };
}

static EXIT_STATUS_AT_END: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static BEFORE_EXIT_AT_END: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Makes the process end with `status` when it exits normally with status 0 (`exit(0)`, or a
/// return of 0 from `main`); a failing status of the program's own is kept. `before` runs
/// first, then C's stdio is flushed.
pub fn exit_status_at_end(status: i32, before: fn()) {
    extern "C" fn end(exiting_with: libc::c_int, _: *mut libc::c_void) {
        let status = match exiting_with {
            0 => EXIT_STATUS_AT_END.load(std::sync::atomic::Ordering::Relaxed),
            own => own,
        };
        if let Some(before) = BEFORE_EXIT_AT_END.get() {
            before();
        }
        // `_exit` skips the handlers registered before this one (`before` does what matters
        // of them) but for the one that ends what the node started: ended here.
        flush_c_stdio();
        process::end_descendants();
        signals::exit_now(status);
    }
    EXIT_STATUS_AT_END.store(status, std::sync::atomic::Ordering::Relaxed);
    let _ = BEFORE_EXIT_AT_END.set(before);
    if process::on_exit(end).is_err() {
        signals::exit_now(status);
    }
}

#[cfg(test)]
mod tests {
    /// The calling thread's policy and, in the time-sharing class, its slice (`sched_getattr`).
    fn sched_of_this_thread() -> (u32, u64) {
        let mut attr = super::SchedAttr {
            size: 0,
            policy: 0,
            flags: 0,
            nice: 0,
            priority: 0,
            runtime: 0,
            deadline: 0,
            period: 0,
            util_min: 0,
            util_max: 0,
        };
        let size = std::mem::size_of::<super::SchedAttr>() as u32;
        // SAFETY: sched_getattr writes at most `size` bytes into the live local `attr`, for
        // thread 0, the calling thread.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                0,
                &mut attr as *mut super::SchedAttr,
                size,
                0,
            )
        };
        assert_eq!(r, 0, "sched_getattr: {}", std::io::Error::last_os_error());
        (attr.policy, attr.runtime)
    }

    /// A realtime thread is in SCHED_FIFO until it yields: then it is back in SCHED_OTHER with
    /// the slice it asked for.
    #[test]
    fn a_realtime_thread_leaves_the_class_when_it_yields() {
        std::thread::spawn(|| {
            let slice = std::time::Duration::from_micros(300);
            if let Err(e) = super::request_time_slice(slice) {
                eprintln!("skipped: this kernel refuses a time slice ({e}; Linux 6.12 or later)");
                return;
            }
            let kept_slice = sched_of_this_thread().1;
            match super::set_realtime(true) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    eprintln!(
                        "skipped: this process may not enter the realtime class (no CAP_SYS_NICE, RLIMIT_RTPRIO 0)"
                    );
                    return;
                }
                r => r.expect("set_realtime"),
            }
            assert!(super::is_realtime());
            assert!(!super::is_time_sharing());
            assert_eq!(sched_of_this_thread().0, libc::SCHED_FIFO as u32);
            super::sched_yield();
            assert!(!super::is_realtime());
            assert!(super::is_time_sharing());
            // What the kernel keeps of the slice (kernels before 6.12 keep none).
            assert_eq!(
                sched_of_this_thread(),
                (libc::SCHED_OTHER as u32, kept_slice),
                "back to time-sharing with the slice asked for"
            );
            // Leaving twice is no call at all; entering again works.
            super::set_realtime(false).expect("set_realtime(false)");
            super::set_realtime(true).expect("set_realtime(true) again");
            assert_eq!(sched_of_this_thread().0, libc::SCHED_FIFO as u32);
            super::set_realtime(false).expect("set_realtime(false)");
            assert_eq!(sched_of_this_thread().0, libc::SCHED_OTHER as u32);
        })
        .join()
        .expect("the test's thread");
    }

    /// A live process is not on its way out; a zombie or a pid that is gone is not either (a
    /// zombie is reaped, not waited for).
    #[test]
    fn only_a_process_being_torn_down_is_exiting() {
        assert!(!super::process_exiting(std::process::id()));
        let mut child = std::process::Command::new("sleep")
            .arg("0")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Exited, not reaped: a zombie until the wait below.
        let zombie = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !zombie() {
            assert!(
                std::time::Instant::now() < deadline,
                "sleep 0 did not end in 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!super::process_exiting(pid));
        child.wait().unwrap();
        assert!(!super::process_exiting(pid));
    }
}
