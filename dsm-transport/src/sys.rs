//! The few system calls the transports make beyond std: epoll, eventfd, writev, sendmsg and
//! recvmsg.
//! Every unsafe block of the crate is here.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `epoll_pwait2` is missing (a kernel before 5.11) or refused (a seccomp filter that does
/// not know it): waits round up to milliseconds.
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

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

    /// Ready tokens, waiting at most `timeout`, to the nanosecond (`epoll_pwait2`, called as a
    /// system call: glibc has its wrapper only from 2.35; rounded up to milliseconds where the
    /// kernel lacks it or a seccomp filter refuses it): a wait that must end at an instant, not
    /// at the next millisecond after it.
    pub fn ready_within(&self, timeout: Duration, out: &mut Vec<(u64, u32)>) -> io::Result<()> {
        if NO_PWAIT2.load(Ordering::Relaxed) {
            let ms = timeout.as_millis() + u128::from(timeout.subsec_nanos() % 1_000_000 != 0);
            return self.ready(ms.min(i32::MAX as u128) as i32, out);
        }
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: the buffer holds 64 events and we pass 64; `ts` is a live timespec; a null
        // signal mask (size 0) leaves the thread's as it is.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                64,
                &ts as *const libc::timespec,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EINTR) => Ok(()),
                Some(libc::ENOSYS | libc::EPERM) => {
                    NO_PWAIT2.store(true, Ordering::Relaxed);
                    self.ready_within(timeout, out)
                }
                _ => Err(e),
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

/// `setsockopt` level and options of UDP segmentation offload (`linux/udp.h`; not in `libc` for
/// glibc targets).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

/// Most datagrams one segmented send carries (Linux's `UDP_MAX_SEGMENTS` was 64 before 6.2).
pub const MAX_SEGMENTS: usize = 64;
/// Most bytes (headers of ours included) one segmented send carries: under the 65,507 bytes of
/// one IPv4 datagram, the most the kernel segments at once.
pub const MAX_SEGMENTED_BYTES: usize = 65_000;
/// Most parts [`send_gathered`] takes: [`MAX_SEGMENTS`] datagrams of three parts each.
pub const MAX_GATHER: usize = 3 * MAX_SEGMENTS;

/// An aligned control-message buffer, room for one `int` (or `u16`) message.
#[repr(C, align(8))]
struct Control([u8; 32]);

/// What [`recv_split`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes read (`head` is filled up to them, `body` holds the rest).
    pub len: usize,
    /// The sender.
    pub from: std::net::SocketAddr,
    /// Several datagrams coalesced by the kernel (`UDP_GRO`): each this many bytes, the last
    /// possibly shorter. `None`: one datagram.
    pub segment: Option<usize>,
    /// More was waiting than the buffers held (the rest is lost, as `recv_from` loses it), or
    /// than the control buffer held (a segment size may be lost).
    pub truncated: bool,
}

/// Reads one datagram from `fd`, its first `head.len()` bytes into `head` and the rest into
/// `body`'s spare capacity (at most `max_body` bytes, after reserving them; `body` is cleared
/// first), with one `recvmsg`: the datagram's payload lands in a buffer the caller can keep,
/// without a copy. A longer datagram is cut short, as `recv_from` cuts it. On a socket with
/// [`enable_udp_gro`] the read may be several datagrams of one sender back to back, which
/// `coalesce` reports ([`Received::segment`]).
pub fn recv_split(
    fd: RawFd,
    head: &mut [u8],
    body: &mut Vec<u8>,
    max_body: usize,
    coalesce: bool,
) -> io::Result<Received> {
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
    let mut control = Control([0; 32]);
    msg.msg_name = (&raw mut storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    if coalesce {
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len() as _;
    }
    let n = loop {
        // SAFETY: msg points to the address storage, the two iovecs above (`head`, and
        // `want` bytes of `body`'s allocated, unaliased spare capacity) and the control buffer,
        // all alive for the call; the kernel writes at most their lengths.
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
    let mut segment = None;
    // SAFETY: msg's control fields describe `control`, filled by the kernel up to the length it
    // set; CMSG_FIRSTHDR/CMSG_NXTHDR stay within it and return null past its end.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: a non-null cmsg points to a whole header inside `control`.
        let c = unsafe { &*cmsg };
        if c.cmsg_level == libc::SOL_UDP && c.cmsg_type == UDP_GRO {
            // SAFETY: the kernel's UDP_GRO message carries one int (the segment size);
            // read_unaligned, for CMSG_DATA's alignment is the header's.
            let size =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>()) };
            segment = usize::try_from(size).ok().filter(|&s| s > 0);
        }
        // SAFETY: as for CMSG_FIRSTHDR.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    let from = socket_addr(&storage)?;
    let truncated = msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0;
    Ok(Received {
        len: n,
        from,
        segment,
        truncated,
    })
}

/// The address the kernel wrote into `storage`.
fn socket_addr(storage: &libc::sockaddr_storage) -> io::Result<std::net::SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET) into the storage, which
            // is larger and suitably aligned.
            let a = unsafe {
                std::ptr::read(
                    (storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>(),
                )
            };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Ok(std::net::SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6 (family AF_INET6).
            let a = unsafe {
                std::ptr::read(
                    (storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>(),
                )
            };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Ok(std::net::SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        family => Err(io::Error::other(format!(
            "a datagram from an address of family {family}"
        ))),
    }
}

/// Asks the kernel to hand datagrams of one sender that arrive together to one read
/// (`UDP_GRO`, Linux 5.0): a segmented send ([`send_gathered`] with a segment size) arrives
/// whole, and a network card's GRO coalesces a burst of datagrams of a path's MTU.
pub fn enable_udp_gro(fd: RawFd) -> io::Result<()> {
    set_option(fd, libc::SOL_UDP, UDP_GRO, 1)
}

/// Whether the kernel segments a send ([`send_gathered`] with a segment size; `UDP_SEGMENT`,
/// Linux 4.18): asked by setting the socket's default segment size to 0 (none), which changes
/// nothing.
pub fn udp_segmentation(fd: RawFd) -> bool {
    set_option(fd, libc::SOL_UDP, UDP_SEGMENT, 0).is_ok()
}

/// The largest IP packet the route to `to` carries unfragmented, as the kernel knows it
/// (`IP_MTU`/`IPV6_MTU` of a socket connected there: the interface's MTU, or a lower one it
/// learned for that path). No packet is sent.
pub fn path_mtu(to: &std::net::SocketAddr) -> io::Result<usize> {
    let any: std::net::SocketAddr = if to.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let probe = std::net::UdpSocket::bind(any)?;
    probe.connect(to)?;
    let (level, opt) = if to.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into a live c_int and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            probe.as_raw_fd(),
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    usize::try_from(v).map_err(|_| io::Error::other(format!("path MTU {v}")))
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
    set_option(fd, libc::SOL_SOCKET, opt, value)
}

/// `setsockopt(fd, level, opt, &value)` of an `int` option.
fn set_option(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads size_of::<c_int>() bytes from a live c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
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

/// Sends `parts` (at most [`MAX_GATHER`]), one after the other, to `to`, or to the socket's
/// connected peer if `to` is `None` (`sendmsg`: the kernel gathers them, no copy into one buffer
/// first). Without `segment` they are one datagram; with it, the kernel cuts them into
/// datagrams of `segment` bytes each, the last possibly shorter (`UDP_SEGMENT`: one system call
/// and one trip down the stack for up to [`MAX_SEGMENTS`] datagrams of a path's MTU). Never
/// blocks on a non-blocking socket.
pub fn send_gathered(
    fd: RawFd,
    to: Option<&std::net::SocketAddr>,
    parts: &[&[u8]],
    segment: Option<u16>,
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
    if parts.len() > MAX_GATHER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a send of {} parts, over {MAX_GATHER}", parts.len()),
        ));
    }
    let to_iovec = |p: &&[u8]| libc::iovec {
        iov_base: p.as_ptr() as *mut libc::c_void,
        iov_len: p.len(),
    };
    // One datagram's parts on the stack; a segmented send's (once per 64 KB) in a vector.
    let mut one = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 3];
    let mut many = Vec::new();
    let iov: &mut [libc::iovec] = if parts.len() <= one.len() {
        for (v, p) in one.iter_mut().zip(parts) {
            *v = to_iovec(p);
        }
        &mut one[..parts.len()]
    } else {
        many.extend(parts.iter().map(to_iovec));
        &mut many
    };
    // SAFETY: zeroed msghdr is valid plain data; the fields set below point to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    if len > 0 {
        msg.msg_name = (&raw mut storage).cast();
        msg.msg_namelen = len as libc::socklen_t;
    }
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    let mut control = Control([0; 32]);
    if let Some(size) = segment {
        msg.msg_control = control.0.as_mut_ptr().cast();
        // SAFETY: CMSG_SPACE only computes a length.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as _;
        // SAFETY: msg_control points to `control`, 8-aligned and longer than msg_controllen,
        // which has room for one header and a u16: CMSG_FIRSTHDR returns its start.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
        }
    }
    loop {
        // SAFETY: msg points to the address, the iovecs and the control buffer above, all
        // alive for the call; the kernel only reads them.
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
        let r = recv_split(rx.as_raw_fd(), &mut head, &mut body, max_body, true).unwrap();
        let (n, from) = (r.len, r.from);
        assert_eq!(r.segment, None);
        assert_eq!(r.truncated, len > 22 + max_body);
        assert_eq!(from, tx.local_addr().unwrap());
        assert_eq!(n, len.min(22 + max_body));
        [sent, head[..n.min(22)].to_vec(), body]
    }

    /// A wait with nothing ready lasts its timeout, not less (2.5 ms: not rounded down to 2),
    /// nor a second; one with a socket readable returns its token at once; rounded up to
    /// milliseconds where `epoll_pwait2` is missing, the same.
    #[test]
    fn a_wait_within_a_timeout_ends_at_it_or_at_what_is_ready() {
        use std::time::{Duration, Instant};
        let epoll = Epoll::new().unwrap();
        let (tx, rx) = (
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpSocket::bind("127.0.0.1:0").unwrap(),
        );
        epoll.add(rx.as_raw_fd(), 7, false).unwrap();
        for missing in [false, true] {
            NO_PWAIT2.store(missing, Ordering::Relaxed);
            let mut out = Vec::new();
            let t = Instant::now();
            epoll
                .ready_within(Duration::from_micros(2_500), &mut out)
                .unwrap();
            let took = t.elapsed();
            assert!(out.is_empty(), "{out:?}");
            assert!(took >= Duration::from_micros(2_500), "{took:?}");
            assert!(took < Duration::from_secs(1), "{took:?}");
            tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
            out.clear();
            epoll
                .ready_within(Duration::from_secs(30), &mut out)
                .unwrap();
            assert_eq!(out.first().map(|e| e.0), Some(7));
            rx.recv(&mut [0u8; 8]).unwrap();
        }
        NO_PWAIT2.store(false, Ordering::Relaxed);
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

    #[test]
    fn a_segmented_send_is_datagrams_of_the_segment_size_read_at_once_where_reads_coalesce() {
        let any = "127.0.0.1:0";
        let (tx, plain, gro) = (
            UdpSocket::bind(any).unwrap(),
            UdpSocket::bind(any).unwrap(),
            UdpSocket::bind(any).unwrap(),
        );
        if !udp_segmentation(tx.as_raw_fd()) || enable_udp_gro(gro.as_raw_fd()).is_err() {
            eprintln!("skipped: this kernel segments no UDP send (UDP_SEGMENT, UDP_GRO)");
            return;
        }
        for s in [&plain, &gro] {
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
        }
        let sent: Vec<u8> = (0..3_500u32).map(|i| (i * 13 + 1) as u8).collect();
        let parts = [&sent[..700], &sent[700..2_100], &sent[2_100..]];
        // Read one by one: four datagrams, cut at every 1,000 bytes of the parts together.
        let to = plain.local_addr().unwrap();
        assert_eq!(
            send_gathered(tx.as_raw_fd(), Some(&to), &parts, Some(1_000)).unwrap(),
            3_500
        );
        let mut buf = [0u8; 4_096];
        for k in 0..4 {
            let n = plain.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &sent[k * 1_000..(k * 1_000 + 1_000).min(3_500)]);
        }
        // Read where reads coalesce: the four at once, and the segment size said.
        let to = gro.local_addr().unwrap();
        send_gathered(tx.as_raw_fd(), Some(&to), &parts, Some(1_000)).unwrap();
        let (mut head, mut body) = ([0u8; 22], Vec::new());
        let r = recv_split(gro.as_raw_fd(), &mut head, &mut body, 65_536, true).unwrap();
        assert_eq!((r.len, r.segment, r.truncated), (3_500, Some(1_000), false));
        assert_eq!([&head[..], &body[..]].concat(), sent);
        // Coalesced beyond the buffer: said to be cut.
        send_gathered(tx.as_raw_fd(), Some(&to), &parts, Some(1_000)).unwrap();
        let r = recv_split(gro.as_raw_fd(), &mut head, &mut body, 2_000, true).unwrap();
        assert_eq!((r.len, r.segment, r.truncated), (2_022, Some(1_000), true));
        // One datagram alone: no segment size.
        send_gathered(tx.as_raw_fd(), Some(&to), &[&sent[..900]], None).unwrap();
        let r = recv_split(gro.as_raw_fd(), &mut head, &mut body, 65_536, true).unwrap();
        assert_eq!((r.len, r.segment), (900, None));
    }

    #[test]
    fn the_path_mtu_to_loopback_is_its_interface_mtu() {
        let mtu = path_mtu(&"127.0.0.1:9".parse().unwrap()).unwrap();
        let lo = std::fs::read_to_string("/sys/class/net/lo/mtu").unwrap();
        // An IPv4 packet is at most 65,535 bytes, whatever the interface says.
        assert_eq!(mtu, lo.trim().parse::<usize>().unwrap().min(65_535));
    }
}
