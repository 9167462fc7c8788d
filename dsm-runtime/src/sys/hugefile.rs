//! A memory file whose written pages the kernel backs with large folios: a file of a private
//! tmpfs mounted with `huge=within_size`, made with the mount API (`fsopen`, `fsmount`) and never
//! attached anywhere.
//!
//! A memfd's memory comes a 4 KiB page at a time on most systems (`shmem_enabled = never`, which
//! only root may change). Landing a stream of fetched pages in such a file costs more than the
//! network does here (`docs/perf/2026-11-28-landed-stream.md`). A tmpfs of the process's own,
//! mounted `huge=within_size`, gives a write into a hole the largest folio (up to 2 MiB) that
//! fits around it among the pages already in memory, and a fault through a mapping marked
//! `MADV_NOHUGEPAGE` 4 KiB. Before Linux 6.14 its writes try a huge page first, then 4 KiB: no
//! file is made there (the caller falls back to a memfd). The region keeps the folios of
//! its writes inside the pages asked for and under 2 MiB ([`crate::region`]), and marks its
//! views.
//!
//! Mounting needs `CAP_SYS_ADMIN` over the mount namespace. Root has it; another user gets it in a
//! user namespace of its own, which a process with threads cannot enter, so a child made for the
//! purpose enters one, makes the file and passes it back over a socket (`SCM_RIGHTS`), then ends.
//! The child runs between a raw `clone` and its exit in a copy of a process that may have other
//! threads (holding the allocator's locks): it makes raw system calls only, on memory prepared
//! before the clone, as after `vfork`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const FSOPEN_CLOEXEC: libc::c_long = 1;
const FSMOUNT_CLOEXEC: libc::c_long = 1;
const FSCONFIG_SET_STRING: libc::c_long = 1;
const FSCONFIG_CMD_CREATE: libc::c_long = 6;

/// A file of `size` bytes (sparse) in a private tmpfs mounted with `huge=within_size`, or why
/// there is none (the caller falls back to a memfd).
pub fn large_folio_file(size: u64) -> io::Result<OwnedFd> {
    // `deny` (root's switch for every tmpfs) would leave the mount without large folios: a
    // memfd then, as the caller falls back to.
    let policy = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    if policy.is_ok_and(|p| p.contains("[deny]")) {
        return Err(io::Error::other(
            "huge pages of shared memory are denied (transparent_hugepage/shmem_enabled)",
        ));
    }
    // Before 6.14 a tmpfs write gets a 4 KiB page or a huge one, and tries the huge one first:
    // no gain over a memfd, and a failed 2 MiB allocation for every page landed.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if !large_folios_in_tmpfs_writes(&release) {
        return Err(io::Error::other(format!(
            "Linux {} gives tmpfs writes no large folios (6.14 or later does)",
            release.trim()
        )));
    }
    // SAFETY: geteuid has no preconditions.
    let fd = if unsafe { libc::geteuid() } == 0 {
        // Root without the capability (a container's root): a user namespace gives it one.
        match tmpfs_file() {
            Ok(fd) => fd,
            Err((_, libc::EPERM)) => in_a_user_namespace()?,
            Err((step, errno)) => return Err(failed(STEPS[step], errno)),
        }
    } else {
        in_a_user_namespace()?
    };
    // SAFETY: `fd` was just made and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a plain system call on a descriptor owned here.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Whether a kernel of this release (`6.18.44-fc`) gives tmpfs writes folios of every size
/// (Linux 6.14); an unreadable release is taken as too old.
fn large_folios_in_tmpfs_writes(release: &str) -> bool {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|v| v.parse::<u32>().ok());
    let minor = parts.next().and_then(|v| v.parse::<u32>().ok());
    matches!((major, minor), (Some(a), Some(b)) if (a, b) >= (6, 14))
}

fn failed(step: &str, errno: i32) -> io::Error {
    let e = io::Error::from_raw_os_error(errno);
    io::Error::new(e.kind(), format!("{step}: {e}"))
}

/// `close` as a raw system call (the child's contract).
fn close(fd: libc::c_long) {
    // SAFETY: closes a descriptor this function's caller made and no longer uses.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// The steps, as the errors name them.
const STEPS: [&str; 8] = [
    "fsopen(tmpfs)",
    "fsconfig(huge=within_size)",
    "fsconfig(create)",
    "fsmount",
    "open(O_TMPFILE)",
    "unshare(user, mount namespaces)",
    "writing the namespace's uid and gid maps",
    "passing the file back",
];

/// Makes the file in this process's mount namespace: `Err((step, errno))`, `step` an index of
/// [`STEPS`]. Raw system calls only, on static strings (the child's contract, see the module's
/// comment).
fn tmpfs_file() -> Result<RawFd, (usize, i32)> {
    let step = |i: usize| {
        // SAFETY: reading errno has no preconditions.
        (i, unsafe { *libc::__errno_location() })
    };
    // SAFETY: each call below takes NUL-terminated static strings and descriptors made here;
    // a descriptor no longer needed is closed on every path.
    unsafe {
        let fs = libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC);
        if fs < 0 {
            return Err(step(0));
        }
        let set = |key: &std::ffi::CStr, value: &std::ffi::CStr| {
            libc::syscall(
                libc::SYS_fsconfig,
                fs,
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        };
        // No size limit (a memfd has none), no access for others.
        if set(c"huge", c"within_size") < 0 || set(c"size", c"0") < 0 || set(c"mode", c"0700") < 0 {
            let e = step(1);
            close(fs);
            return Err(e);
        }
        let nothing = std::ptr::null::<libc::c_char>();
        if libc::syscall(
            libc::SYS_fsconfig,
            fs,
            FSCONFIG_CMD_CREATE,
            nothing,
            nothing,
            0,
        ) < 0
        {
            let e = step(2);
            close(fs);
            return Err(e);
        }
        let mnt = libc::syscall(libc::SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0);
        let e = step(3);
        close(fs);
        if mnt < 0 {
            return Err(e);
        }
        let fd = libc::syscall(
            libc::SYS_openat,
            mnt,
            c".".as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        );
        let e = step(4);
        // The file keeps the mount alive; the mount's descriptor is not needed.
        close(mnt);
        if fd < 0 {
            return Err(e);
        }
        Ok(fd as RawFd)
    }
}

/// For a user other than root: a child enters a user and a mount namespace of its own, makes the
/// file there and passes it back.
fn in_a_user_namespace() -> io::Result<RawFd> {
    // The namespace maps the ids the kernel checks its writer against: the effective ones.
    // SAFETY: geteuid and getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // Prepared before the clone: the child allocates nothing.
    let uid_map = format!("{uid} {uid} 1");
    let gid_map = format!("{gid} {gid} 1");
    let mut pair = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into `pair`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are owned here.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    // SAFETY: a raw clone with no new stack is a fork that runs no atfork handler (libjia's
    // would mark the child as a forked program), and with no exit signal: the program's own
    // SIGCHLD handling never sees this child (it is reaped below with __WALL). The child runs
    // `child` alone, which keeps the contract in the module's comment, and never returns.
    let pid = unsafe { libc::syscall(libc::SYS_clone, 0 as libc::c_long, 0, 0, 0, 0) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let status = child(theirs.as_raw_fd(), &uid_map, &gid_map);
        // SAFETY: the child ends here, without unwinding or running the parent's exit handlers.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
        unreachable!("exit_group returned");
    }
    drop(theirs);
    // A child that never answers (a kernel that hangs a mount) is not waited for for ever.
    let limit = libc::timeval {
        tv_sec: 10,
        tv_usec: 0,
    };
    // SAFETY: setsockopt reads the timeval built here, live for the call.
    unsafe {
        libc::setsockopt(
            ours.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&limit as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    let got = match receive(&ours) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            // SAFETY: signals the child made above, not yet reaped (the wait below reaps it).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            Err(io::Error::other(
                "the child that makes the file gave no answer in 10 s",
            ))
        }
        got => got,
    };
    let mut status = 0;
    // SAFETY: reaps the child made above, which ends right after its message (or at once if it
    // fails earlier: the receive above then saw its end); __WALL: a child without exit signal.
    while unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::__WALL) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
    got
}

/// The child's work: `Ok`: the file passed back; a failure passes back its step and errno.
fn child(sock: RawFd, uid_map: &str, gid_map: &str) -> libc::c_long {
    let result = (|| {
        // SAFETY: plain system calls on static strings, the maps prepared before the clone and
        // descriptors of this process.
        unsafe {
            if libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return Err((5, *libc::__errno_location()));
            }
            for (path, text) in [
                (c"/proc/self/setgroups", "deny"),
                (c"/proc/self/uid_map", uid_map),
                (c"/proc/self/gid_map", gid_map),
            ] {
                let f = libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC,
                );
                let written = if f >= 0 {
                    libc::syscall(libc::SYS_write, f, text.as_ptr(), text.len())
                } else {
                    -1
                };
                let ok = written == text.len() as libc::c_long;
                // A short write sets no errno of its own.
                let errno = if written >= 0 {
                    libc::EIO
                } else {
                    *libc::__errno_location()
                };
                if f >= 0 {
                    close(f);
                }
                if !ok {
                    return Err((6, errno));
                }
            }
        }
        tmpfs_file()
    })();
    let (message, fd) = match result {
        Ok(fd) => ([0u8; 5], Some(fd)),
        Err((step, errno)) => {
            let mut m = [0u8; 5];
            m[0] = step as u8 + 1;
            m[1..].copy_from_slice(&errno.to_ne_bytes());
            (m, None)
        }
    };
    // SAFETY: sendmsg reads `message` and, with a file, the control block built here, all live
    // for the call.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: message.as_ptr() as *mut libc::c_void,
            iov_len: message.len(),
        };
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if let Some(fd) = fd {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
        if libc::syscall(libc::SYS_sendmsg, sock, &msg as *const libc::msghdr, 0) < 0 {
            return 1;
        }
    }
    0
}

/// The parent's side: the file, or the child's step and errno.
fn receive(sock: &OwnedFd) -> io::Result<RawFd> {
    let mut message = [0u8; 5];
    let mut control = [0u64; 4];
    // SAFETY: recvmsg writes at most `message.len()` bytes and `control.len()` words into the
    // buffers built here, live for the call; a file passed comes as a descriptor of this process.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: message.as_mut_ptr().cast(),
            iov_len: message.len(),
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of_val(&control);
        let n = loop {
            let n = libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != message.len() {
            return Err(io::Error::other(
                "the child that makes the file ended without a word",
            ));
        }
        if message[0] != 0 {
            let step = STEPS.get(usize::from(message[0] - 1)).unwrap_or(&"?");
            let errno = i32::from_ne_bytes(message[1..].try_into().expect("4 bytes"));
            return Err(failed(step, errno));
        }
        let c = libc::CMSG_FIRSTHDR(&msg);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other(
                "the child that makes the file passed no file",
            ));
        }
        Ok(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_from_6_14_on_give_tmpfs_writes_large_folios() {
        for (release, large) in [
            ("6.18.44-fc-v595", true),
            ("6.14.0", true),
            ("7.0-rc1", true),
            ("6.13.12-200.fc41.x86_64", false),
            ("6.1.0-56-amd64", false),
            ("5.15.0", false),
            ("", false),
            ("junk", false),
        ] {
            assert_eq!(large_folios_in_tmpfs_writes(release), large, "{release:?}");
        }
    }

    #[test]
    fn a_large_folio_file_is_made_or_the_step_that_failed_is_named() {
        match large_folio_file(64 << 20) {
            Ok(fd) => {
                // SAFETY: fstat fills the struct for a descriptor owned here.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                assert_eq!(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) }, 0);
                assert_eq!(st.st_size, 64 << 20);
                assert_eq!(st.st_blocks, 0, "a new file holds no memory");
            }
            Err(e) => {
                let text = e.to_string();
                assert!(
                    STEPS.iter().any(|s| text.starts_with(s))
                        || ["child", "no large folios", "denied"]
                            .iter()
                            .any(|w| text.contains(w)),
                    "an error that names no step: {text}"
                );
                eprintln!("no large-folio file here: {text}");
            }
        }
    }
}
