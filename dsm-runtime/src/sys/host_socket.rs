//! The system calls behind nodes of one host reading each other's memory ([`crate::same_host`]):
//! a Unix datagram socket in the abstract namespace (which exists per network namespace, so only
//! processes of this host and network namespace reach it), a memory file's descriptor passed
//! over it (`SCM_RIGHTS`), the file reopened read-only, and its size.
//!
//! The calls used from a driving fault handler ([`recv_with_fd`], [`file_size`],
//! [`super::map_shared`]) are system calls only: async-signal-safe, errno the caller's to keep.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The longest name of an abstract socket (`sun_path` less its leading NUL).
pub const MAX_NAME: usize = 107;

/// `sockaddr_un` for the abstract name `name` (no NUL of its own), and its length.
fn abstract_addr(name: &[u8]) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "abstract socket name of {} bytes (1 to {MAX_NAME})",
                name.len()
            ),
        ));
    }
    // SAFETY: sockaddr_un is plain data; all zeros is a valid value of it.
    let mut addr: libc::sockaddr_un = unsafe { MaybeUninit::zeroed().assume_init() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    // sun_path[0] stays 0: the abstract namespace.
    for (dst, &b) in addr.sun_path[1..].iter_mut().zip(name) {
        *dst = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    Ok((addr, len as libc::socklen_t))
}

/// A non-blocking, close-on-exec Unix socket of ordered messages (`SOCK_SEQPACKET`), made.
fn seqpacket() -> io::Result<OwnedFd> {
    let fd = syscall!(socket(
        libc::AF_UNIX,
        libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        0
    ))?;
    // SAFETY: socket just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A non-blocking socket listening on the abstract name `name` (`EADDRINUSE`: another
/// socket of this network namespace has it).
pub fn listen_abstract(name: &[u8]) -> io::Result<OwnedFd> {
    let (addr, len) = abstract_addr(name)?;
    let fd = seqpacket()?;
    // addr is a valid sockaddr_un of `len` bytes; fd is the socket just made.
    syscall!(bind(
        fd.as_raw_fd(),
        (&raw const addr).cast::<libc::sockaddr>(),
        len
    ))?;
    // fd is a bound socket.
    // As many waiting connections as the system allows (net.core.somaxconn): every node of a
    // large host may ask at once.
    syscall!(listen(fd.as_raw_fd(), 4096))?;
    Ok(fd)
}

/// A connection to the socket listening on the abstract name `to`, made without waiting:
/// `ECONNREFUSED` where none has that name in this network namespace, `EAGAIN` where its
/// queue of connections is full. Async-signal-safe.
pub fn connect_abstract(to: &[u8]) -> io::Result<OwnedFd> {
    let (addr, len) = abstract_addr(to)?;
    let fd = seqpacket()?;
    // addr is a valid sockaddr_un of `len` bytes; fd is the socket just made.
    syscall!(connect(
        fd.as_raw_fd(),
        (&raw const addr).cast::<libc::sockaddr>(),
        len
    ))?;
    Ok(fd)
}

/// A connection waiting on the listening socket `sock`, accepted (non-blocking,
/// close-on-exec); `Ok(None)` when none waits. Async-signal-safe.
pub fn accept(sock: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    // sock is a listening socket; no address is asked for.
    match syscall!(accept4(
        sock.as_raw_fd(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
    )) {
        // SAFETY: accept4 just returned this descriptor; nothing else owns it.
        Ok(fd) => Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) })),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// The user id of the process at the other end of the connection `sock` (`SO_PEERCRED`: as
/// it was when that end connected or listened). Async-signal-safe.
pub fn peer_uid(sock: &OwnedFd) -> io::Result<u32> {
    // SAFETY: ucred is plain data; all zeros is a valid value of it.
    let mut cred: libc::ucred = unsafe { MaybeUninit::zeroed().assume_init() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // cred and len live across the call and len holds cred's size; sock is a socket.
    syscall!(getsockopt(
        sock.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_PEERCRED,
        (&raw mut cred).cast(),
        &raw mut len
    ))?;
    Ok(cred.uid)
}

/// Sends `payload` over the connection `sock`, without waiting. Async-signal-safe.
pub fn send(sock: &OwnedFd, payload: &[u8]) -> io::Result<()> {
    // payload lives across the call; sock is a connected socket.
    let sent = syscall!(send(
        sock.as_raw_fd(),
        payload.as_ptr().cast(),
        payload.len(),
        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL
    ))?;
    if sent as usize != payload.len() {
        return Err(io::Error::other("message sent short"));
    }
    Ok(())
}

/// Sends `payload` with the descriptor `fd` attached over the connection `sock`, without
/// waiting. Async-signal-safe.
pub fn send_with_fd(sock: &OwnedFd, payload: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // Room for one descriptor's control message, aligned as cmsghdr needs.
    let mut control = [0u64; 4];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    debug_assert!(space <= std::mem::size_of_val(&control));
    // SAFETY: msghdr is plain data; all zeros is a valid value of it.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points at `control`, at least `space` bytes, 8-aligned, so the first
    // header fits and its data holds one int.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        libc::CMSG_DATA(cmsg)
            .cast::<libc::c_int>()
            .write_unaligned(fd.as_raw_fd());
    }
    // msg and everything it points to live across the call; sock is a connected socket.
    let sent = syscall!(sendmsg(
        sock.as_raw_fd(),
        &raw const msg,
        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL
    ))?;
    if sent as usize != payload.len() {
        return Err(io::Error::other("message sent short"));
    }
    Ok(())
}

/// Receives one message waiting on the connection `sock` into `buf`: its length and the
/// descriptor it carried, if one; `Ok(None)` when nothing waits. A message cut short, or
/// carrying more than one descriptor, is received and its descriptors closed: its length is
/// then over `buf`'s, or no descriptor comes with it. Async-signal-safe.
pub fn recv_with_fd(
    sock: &OwnedFd,
    buf: &mut [u8],
) -> io::Result<Option<(usize, Option<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Room for a few descriptors' control message: more than one sent is closed below.
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all zeros is a valid value of it.
    let mut msg: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // msg points at live buffers for the call; sock is a valid socket.
    let n = match syscall!(recvmsg(
        sock.as_raw_fd(),
        &raw mut msg,
        libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC | libc::MSG_TRUNC
    )) {
        Ok(n) => n as usize,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut fds: [Option<OwnedFd>; 4] = Default::default();
    let mut count = 0;
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of well-formed control
    // messages; CMSG_FIRSTHDR / CMSG_NXTHDR walk them within that length.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<libc::c_int>();
                let bytes = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                for i in 0..bytes / std::mem::size_of::<libc::c_int>() {
                    let raw = data.add(i).read_unaligned();
                    // The kernel installed this descriptor for us: we own it.
                    let fd = OwnedFd::from_raw_fd(raw);
                    if count < fds.len() {
                        fds[count] = Some(fd);
                    }
                    count += 1;
                }
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    let one = if count == 1 { fds[0].take() } else { None };
    Ok(Some((n, one)))
}

/// `fd`'s file reopened read-only (a new open file of the same file, through
/// `/proc/self/fd`): what a process given it can map only to read.
pub fn reopen_read_only(fd: &OwnedFd) -> io::Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // path is NUL-terminated and lives across the call.
    let new = syscall!(open(
        path.as_ptr().cast::<libc::c_char>(),
        libc::O_RDONLY | libc::O_CLOEXEC
    ))?;
    // SAFETY: open just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// The size in bytes of `fd`'s file. Async-signal-safe.
pub fn file_size(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: stat is plain data, filled by fstat before it is read.
    let mut st: libc::stat = unsafe { MaybeUninit::zeroed().assume_init() };
    // st is a live stat for the call; fd is a valid descriptor.
    syscall!(fstat(fd.as_raw_fd(), &raw mut st))?;
    Ok(st.st_size as u64)
}

/// Another process's memory file mapped here read-only, shared, for as long as this lives;
/// with the file, which may be mapped again elsewhere ([`ReadOnlyMapping::file`]).
pub struct ReadOnlyMapping {
    base: *const u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is only read, as plain bytes, and lives until the value drops.
unsafe impl Send for ReadOnlyMapping {}
// SAFETY: as for Send: shared references only read the mapping.
unsafe impl Sync for ReadOnlyMapping {}

impl ReadOnlyMapping {
    /// Maps `len` bytes of `fd` (at least that long: the caller checked its size). Async-signal-
    /// safe.
    pub fn new(fd: OwnedFd, len: usize) -> io::Result<ReadOnlyMapping> {
        let base = super::map_shared(&fd, len, None, super::Protection::Read)?;
        Ok(ReadOnlyMapping {
            base: base.cast_const(),
            len,
            fd,
        })
    }

    /// The file mapped (opened read-only: what maps it can only read it).
    pub fn file(&self) -> &OwnedFd {
        &self.fd
    }

    /// The mapping's first byte.
    pub fn base(&self) -> *const u8 {
        self.base
    }

    /// `len` bytes at `off` (inside the mapping: checked), as they are now: the process whose
    /// memory it is may be storing to them meanwhile, as its threads store to pages a
    /// transport sends.
    pub fn bytes(&self, off: usize, len: usize) -> &[u8] {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "{len} bytes at {off} outside a mapping of {}",
            self.len
        );
        // SAFETY: off..off + len lies inside the mapping (checked), which lives as long as
        // `self` borrows; the bytes are read as plain bytes (concurrent stores by the other
        // process are plain copies of shared memory, as when its transport sends them), and the
        // file is at least `len` bytes long (checked before mapping), so no read past its end.
        unsafe { std::slice::from_raw_parts(self.base.add(off), len) }
    }
}

impl ReadOnlyMapping {
    /// Maps `len` bytes at `off` into this process's page tables ahead of their reading
    /// (`MADV_POPULATE_READ`, Linux 5.14; best effort). Async-signal-safe.
    pub fn populate(&self, off: usize, len: usize) {
        if off.checked_add(len).is_some_and(|end| end <= self.len) {
            let _ = super::raw_madvise(
                self.base.wrapping_add(off).cast_mut(),
                len,
                libc::MADV_POPULATE_READ,
            );
        }
    }
}

impl Drop for ReadOnlyMapping {
    fn drop(&mut self) {
        // SAFETY: base..base + len is this value's own mapping, and no slice of it outlives the
        // borrow of `self` that made it.
        unsafe { super::raw_munmap(self.base as usize, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn name(tag: &str) -> Vec<u8> {
        format!(
            "dsm-test-{tag}-{}-{}",
            std::process::id(),
            super::super::random_u64()
        )
        .into_bytes()
    }

    #[test]
    fn a_descriptor_passes_over_a_connection_and_maps_read_only() {
        let b_name = name("b");
        let listening = listen_abstract(&b_name).unwrap();
        assert!(
            accept(&listening).unwrap().is_none(),
            "nobody connected yet"
        );
        let file = super::super::memfd("host-socket-test", 8192).unwrap();
        super::super::write_file_at(&file, b"in place", 4096).unwrap();
        let ro = reopen_read_only(&file).unwrap();
        let a = connect_abstract(&b_name).unwrap();
        let me = super::super::euid();
        assert_eq!(peer_uid(&a).unwrap(), me, "the listener's user");
        send_with_fd(&a, b"hello", ro.as_fd()).unwrap();
        drop(a);
        let b = accept(&listening).unwrap().expect("a connection");
        assert_eq!(peer_uid(&b).unwrap(), me, "the connecting user");
        let mut buf = [0u8; 64];
        let (n, fd) = recv_with_fd(&b, &mut buf).unwrap().expect("a message");
        assert_eq!(&buf[..n], b"hello");
        assert!(
            recv_with_fd(&b, &mut buf)
                .unwrap()
                .is_none_or(|(n, fd)| n == 0 && fd.is_none())
        );
        let fd = fd.expect("its descriptor");
        assert_eq!(file_size(&fd).unwrap(), 8192);
        let m = ReadOnlyMapping::new(fd, 8192).unwrap();
        assert_eq!(&m.bytes(4096, 8), b"in place");
        m.populate(0, 8192);
        // The descriptor given is read-only: no mapping for writing.
        assert!(
            super::super::map_shared(m.file(), 8192, None, super::super::Protection::ReadWrite)
                .is_err()
        );
    }

    #[test]
    fn a_name_nobody_listens_on_is_refused_at_once_and_a_taken_name_is_told() {
        let e = connect_abstract(&name("nobody")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");
        let taken = name("taken");
        let _first = listen_abstract(&taken).unwrap();
        let e = listen_abstract(&taken).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{e}");
    }

    #[test]
    fn a_message_without_a_descriptor_or_cut_short_is_told_as_such() {
        let b_name = name("plain");
        let listening = listen_abstract(&b_name).unwrap();
        let a = connect_abstract(&b_name).unwrap();
        // SAFETY: the buffer lives across the call; a is a connected socket.
        let r = unsafe { libc::send(a.as_raw_fd(), b"no fd".as_ptr().cast(), 5, 0) };
        assert_eq!(r, 5);
        let b = accept(&listening).unwrap().unwrap();
        let mut buf = [0u8; 2];
        let (n, fd) = recv_with_fd(&b, &mut buf).unwrap().unwrap();
        assert_eq!(n, 5, "cut short, its length told");
        assert!(fd.is_none());
    }

    #[test]
    fn names_are_checked() {
        assert!(listen_abstract(b"").is_err());
        assert!(connect_abstract(&[b'x'; MAX_NAME + 1]).is_err());
    }
}
