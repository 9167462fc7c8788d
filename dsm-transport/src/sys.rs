//! The few system calls the transports make beyond std: epoll, eventfd, writev, sendmsg and
//! recvmsg.
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

/// Reads one datagram from `fd`, its first `head.len()` bytes into `head` and the rest into
/// `body`'s spare capacity (at most `max_body` bytes, after reserving them; `body` is cleared
/// first), with one `recvmsg`: the datagram's payload lands in a buffer the caller can keep,
/// without a copy. Returns the datagram's length as read (`head` is filled up to it, `body`
/// holds the rest) and its sender. A longer datagram is cut short, as `recv_from` cuts it.
pub fn recv_split(
    fd: RawFd,
    head: &mut [u8],
    body: &mut Vec<u8>,
    max_body: usize,
) -> io::Result<(usize, std::net::SocketAddr)> {
    body.clear();
    body.reserve(max_body);
    let spare = body.spare_capacity_mut();
    let want = spare.len().min(max_body);
    let mut iov = [
        libc::iovec {
            iov_base: head.as_mut_ptr().cast(),
            iov_len: head.len(),
        },
        libc::iovec {
            iov_base: spare.as_mut_ptr().cast(),
            iov_len: want,
        },
    ];
    // SAFETY: zeroed sockaddr_storage and msghdr are valid plain data.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&raw mut storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    let n = loop {
        // SAFETY: msg points to the address storage and the two iovecs above (`head`, and
        // `want` bytes of `body`'s allocated, unaliased spare capacity), all alive for the
        // call; the kernel writes at most their lengths.
        let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let in_body = n.saturating_sub(head.len()).min(want);
    // SAFETY: the kernel initialized the first `in_body` (<= want) bytes of the spare capacity.
    unsafe { body.set_len(in_body) };
    let from = match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET) into the storage, which
            // is larger and suitably aligned.
            let a = unsafe { std::ptr::read((&raw const storage).cast::<libc::sockaddr_in>()) };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            std::net::SocketAddr::from((ip, u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6 (family AF_INET6).
            let a = unsafe { std::ptr::read((&raw const storage).cast::<libc::sockaddr_in6>()) };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            std::net::SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            ))
        }
        family => {
            return Err(io::Error::other(format!(
                "a datagram from an address of family {family}"
            )));
        }
    };
    Ok((n, from))
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

/// Sends one datagram made of `parts` (at most three), one after the other, to `to`, or to the
/// socket's connected peer if `to` is `None` (`sendmsg`: the kernel gathers them, no copy into
/// one buffer first). Never blocks on a non-blocking socket.
pub fn send_gathered(
    fd: RawFd,
    to: Option<&std::net::SocketAddr>,
    parts: &[&[u8]],
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
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 3];
    for (v, p) in iov.iter_mut().zip(parts) {
        *v = libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        };
    }
    debug_assert!(
        parts.len() <= iov.len(),
        "a datagram of {} parts",
        parts.len()
    );
    let used = parts.len().min(iov.len());
    // SAFETY: zeroed msghdr is valid plain data; the fields set below point to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if len > 0 {
        msg.msg_name = (&raw mut storage).cast();
        msg.msg_namelen = len as libc::socklen_t;
    }
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = used as _;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// One datagram of `len` bytes from `tx` read by `recv_split` on `rx`, with a 22-byte head
    /// and at most `max_body` bytes of body.
    fn split_one(tx: &UdpSocket, rx: &UdpSocket, len: usize, max_body: usize) -> [Vec<u8>; 3] {
        let sent: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        tx.send_to(&sent, rx.local_addr().unwrap()).unwrap();
        let mut head = [0u8; 22];
        let mut body = vec![9; 5];
        let (n, from) = recv_split(rx.as_raw_fd(), &mut head, &mut body, max_body).unwrap();
        assert_eq!(from, tx.local_addr().unwrap());
        assert_eq!(n, len.min(22 + max_body));
        [sent, head[..n.min(22)].to_vec(), body]
    }

    #[test]
    fn recv_split_puts_the_header_and_the_payload_apart_and_names_the_sender() {
        for any in ["127.0.0.1:0", "[::1]:0"] {
            let (Ok(tx), Ok(rx)) = (UdpSocket::bind(any), UdpSocket::bind(any)) else {
                eprintln!("skipped {any}: no such address here");
                continue;
            };
            rx.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            // A page run's datagram, one shorter than a header, one cut at the body's limit.
            let [sent, head, body] = split_one(&tx, &rx, 61_462, 65_000);
            assert_eq!((&head[..], &body[..]), sent.split_at(22), "{any}");
            let [sent, head, body] = split_one(&tx, &rx, 7, 65_000);
            assert_eq!((&head[..], body.len()), (&sent[..], 0), "{any}");
            let [sent, head, body] = split_one(&tx, &rx, 1_000, 100);
            assert_eq!(
                (&head[..], &body[..]),
                (&sent[..22], &sent[22..122]),
                "{any}"
            );
        }
    }
}
