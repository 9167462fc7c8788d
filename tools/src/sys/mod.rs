//! The tools' own system calls: the floors' signal handlers, sockets and mappings. Every unsafe
//! block of the crate is here, each with its SAFETY comment.

pub mod floor;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// SIGPIPE's default action (the process ends) in place of the ignoring Rust's runtime sets.
pub(crate) fn default_sigpipe() {
    // SAFETY: setting a plain signal's disposition to its default; no handler is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

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

/// A memory file mapped read-only: pages written into the file (`pwrite`, as the runtime lands a
/// run of received pages) are read back through the mapping, as a program reads them.
pub(crate) struct FileView {
    file: std::fs::File,
    view: *const u8,
    len: usize,
}

impl FileView {
    /// A fresh memory file of `len` bytes (no page backed yet), mapped whole.
    pub(crate) fn new(name: &std::ffi::CStr, len: usize) -> io::Result<FileView> {
        let fd = memfd(name, len as u64)?;
        let view = map_shared(&fd, len, libc::PROT_READ)?;
        Ok(FileView {
            file: fd.into(),
            view,
            len,
        })
    }

    /// Writes `bytes` into the file at `offset` (one `pwrite`).
    pub(crate) fn write_at(&mut self, bytes: &[u8], offset: usize) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, offset as u64)
    }

    /// The wrapping sum of the native-endian u64 words of `len` bytes at `offset`, read through
    /// the mapping. Panics outside the file or off an 8-byte boundary.
    pub(crate) fn sum_words(&self, offset: usize, len: usize) -> u64 {
        assert!(
            offset % 8 == 0
                && len % 8 == 0
                && offset.checked_add(len).is_some_and(|end| end <= self.len)
        );
        // SAFETY: the range lies inside the live read-only mapping (checked above) and is
        // 8-byte aligned (mappings are page-aligned); the file is ours alone, and nothing writes
        // it while the slice lives (`write_at` takes `&mut self`).
        let words = unsafe {
            std::slice::from_raw_parts(self.view.wrapping_add(offset).cast::<u64>(), len / 8)
        };
        words.iter().fold(0u64, |s, &w| s.wrapping_add(w))
    }
}

impl Drop for FileView {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes; no slice into it outlives `sum_words`.
        unsafe { libc::munmap(self.view.cast_mut().cast(), self.len) };
    }
}
