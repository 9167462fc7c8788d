//! The few system calls the transports make beyond std: epoll, eventfd, writev and sendmsg.
//! Every unsafe block of the crate is here.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain flags; a non-negative result is a descriptor we now own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created, owned by nobody else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: ev is a live epoll_event; both descriptors are valid.
        if unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for input (and output if `write`), reporting `token`.
    pub fn add(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        let ev = libc::EPOLLIN as u32 | if write { libc::EPOLLOUT as u32 } else { 0 };
        self.ctl(libc::EPOLL_CTL_ADD, fd, ev, token)
    }

    /// Changes whether `fd` is watched for output.
    pub fn modify(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        let ev = libc::EPOLLIN as u32 | if write { libc::EPOLLOUT as u32 } else { 0 };
        self.ctl(libc::EPOLL_CTL_MOD, fd, ev, token)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: RawFd) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    /// Ready tokens, waiting at most `timeout_ms` (0: do not wait).
    pub fn ready(&self, timeout_ms: i32, out: &mut Vec<(u64, u32)>) -> io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: the buffer holds 64 events and we pass 64.
        let n =
            unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), 64, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        out.extend(events[..n as usize].iter().map(|e| (e.u64, e.events)));
        Ok(())
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Reads from `fd` into `buf`'s spare capacity, at most `max` bytes (after reserving them),
/// with one `read`; returns the bytes read (0: end of file), which `buf` now ends with.
pub fn read_into_spare(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let spare = buf.spare_capacity_mut();
    let want = spare.len().min(max);
    // SAFETY: the kernel writes at most `want` bytes into the spare capacity, which is
    // allocated and not aliased for the call's duration.
    let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast::<libc::c_void>(), want) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the read initialized the first `n` (<= want) bytes after the current length.
    unsafe { buf.set_len(buf.len() + n as usize) };
    Ok(n as usize)
}

/// Bytes in a TCP socket's kernel send queue that the peer has not acknowledged yet, sent or
/// not (`SIOCOUTQ`); 0 if the kernel does not say.
pub fn tcp_unacknowledged(fd: RawFd) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int into `n`, a live local; a bad descriptor only
    // fails the call.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    if r < 0 { 0 } else { n.max(0) as usize }
}

/// A non-blocking eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain flags; the result is a new descriptor.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd. Async-signal-safe (one `write`): the runtime's fault handler uses it.
pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Empties an eventfd.
pub fn eventfd_drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// The receive buffer the kernel granted a socket, as it reports it (twice what it counts).
pub fn socket_receive_buffer(fd: RawFd) -> Option<usize> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into a live c_int and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && v > 0).then_some(v as usize)
}

/// Asks the kernel for `bytes` of receive and send buffer on a socket (it may grant less).
pub fn set_socket_buffers(fd: RawFd, bytes: libc::c_int) {
    // Past `net.core.rmem_max`/`wmem_max` where the process may (CAP_NET_ADMIN): a read-ahead
    // window of megabytes arrives at once; the plain options, capped by those limits, otherwise.
    for (forced, opt) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if let Err(e) =
            set_int_option(fd, forced, bytes).or_else(|_| set_int_option(fd, opt, bytes))
        {
            log::debug!("setsockopt({opt}) failed: {e}");
        }
    }
}

/// `setsockopt(fd, SOL_SOCKET, opt, &value)`.
fn set_int_option(fd: RawFd, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt reads size_of::<c_int>() bytes from a live c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts `fd` in non-blocking mode.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends one datagram made of `head` then `body` to `to`, or to the socket's connected peer if
/// `to` is `None` (`sendmsg`: the kernel gathers them, no copy into one buffer first). Never
/// blocks on a non-blocking socket.
pub fn send_gathered(
    fd: RawFd,
    to: Option<&std::net::SocketAddr>,
    head: &[u8],
    body: &[u8],
) -> io::Result<usize> {
    // SAFETY: zeroed sockaddr_storage is valid plain data.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        None => 0,
        Some(std::net::SocketAddr::V4(a)) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and suitably aligned.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in>(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        Some(std::net::SocketAddr::V6(a)) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and suitably aligned.
            unsafe { std::ptr::write((&raw mut storage).cast::<libc::sockaddr_in6>(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    let mut iov = [head, body].map(|p| libc::iovec {
        iov_base: p.as_ptr() as *mut libc::c_void,
        iov_len: p.len(),
    });
    // SAFETY: zeroed msghdr is valid plain data; the fields set below point to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if len > 0 {
        msg.msg_name = (&raw mut storage).cast();
        msg.msg_namelen = len as libc::socklen_t;
    }
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: msg points to the address and iovecs above, all alive for the call; the
        // kernel only reads the buffers.
        let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
