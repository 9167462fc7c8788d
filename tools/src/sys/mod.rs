//! The tools' own system calls: the floors' signal handlers, sockets and mappings. Every unsafe
//! block of the crate is here, each with its SAFETY comment.

pub mod floor;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// An anonymous memory file of `size` bytes.
fn memfd(name: &std::ffi::CStr, size: u64) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid NUL-terminated string for the call's duration.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on the valid memfd just made.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Maps `size` bytes of `fd` shared, wherever the kernel chooses, with protection `prot`.
fn map_shared(fd: &OwnedFd, size: usize, prot: libc::c_int) -> io::Result<*mut u8> {
    // SAFETY: without an address the kernel chooses a free range; the fd is a valid memfd at
    // least `size` bytes long.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            prot,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// Backs `len` bytes at `addr` (one of our mappings) with memory now (`MADV_POPULATE_WRITE`,
/// Linux 5.14: an error before).
fn populate_write(addr: *mut u8, len: usize) -> io::Result<()> {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    // SAFETY: the caller passes a range inside one of our live mappings; populating does not
    // change its contents.
    if unsafe { libc::madvise(addr.cast(), len, MADV_POPULATE_WRITE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
