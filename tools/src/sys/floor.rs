//! The bare cost of a page fault on this machine: SIGSEGV on a protected page, mprotect to
//! read-write in the handler, return. The floor a DSM fault is measured against (LIMITS.md:
//! 4.3-5.3 us here). For the bench, in a process that is not a DSM node.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

static PAGE: AtomicUsize = AtomicUsize::new(0);

/// An SA_SIGINFO signal handler.
type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Makes `handler` this process's SIGSEGV handler; returns the action it replaces.
fn install_segv(handler: Handler) -> libc::sigaction {
    // SAFETY: zeroed sigaction structs are valid plain data; `handler` has the SA_SIGINFO
    // signature the flags announce; both pointers are to live structs.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGSEGV, &act, &mut old);
        old
    }
}

/// Puts back the SIGSEGV action `old` ([`install_segv`]'s), or the default one. Async-signal-safe.
fn restore_segv(old: Option<&libc::sigaction>) {
    // SAFETY: a saved action, or a zeroed sigaction with SIG_DFL (a valid default disposition);
    // sigaction is async-signal-safe.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGSEGV, old.unwrap_or(&dfl), std::ptr::null_mut());
    }
}

extern "C" fn open_page(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let page = PAGE.load(Ordering::Relaxed);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    if page == 0 || addr & !4095 != page {
        // Not our page: the fault repeats under the default action and kills the process.
        restore_segv(None);
        return;
    }
    // SAFETY: the page is our own anonymous mapping; mprotect is async-signal-safe.
    unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
}

/// Microseconds per fault (write to a PROT_NONE page, handler opens it), `iterations` samples.
/// Installs its own SIGSEGV handler for the duration (and restores the previous one): call it only
/// in a process that is not a DSM node.
pub fn bare_fault_us(iterations: usize) -> std::io::Result<Vec<f64>> {
    // SAFETY: a fresh private anonymous page; nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    PAGE.store(p as usize, Ordering::SeqCst);
    let old = install_segv(open_page);
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..iterations + 100 {
        // SAFETY: protects our own page.
        unsafe { libc::mprotect(p, 4096, libc::PROT_NONE) };
        let t = Instant::now();
        // SAFETY: writing our own page; the first write faults and the handler opens it.
        unsafe { std::ptr::write_volatile(p as *mut u64, i as u64) };
        if i >= 100 {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    restore_segv(Some(&old));
    // SAFETY: unmaps our own page; nothing refers to it.
    unsafe { libc::munmap(p, 4096) };
    PAGE.store(0, Ordering::SeqCst);
    Ok(samples)
}

/// The minimal remote read fault's shared state: the handler has only statics to go by.
struct Minimal {
    app: AtomicUsize,
    service: AtomicUsize,
    pages: AtomicUsize,
    sock: std::sync::atomic::AtomicI32,
    /// `/proc/self/mem` (-1: none), to map the page in the application view while the request
    /// travels, as the runtime does.
    mem: std::sync::atomic::AtomicI32,
}

static MINIMAL: Minimal = Minimal {
    app: AtomicUsize::new(0),
    service: AtomicUsize::new(0),
    pages: AtomicUsize::new(0),
    sock: std::sync::atomic::AtomicI32::new(-1),
    mem: std::sync::atomic::AtomicI32::new(-1),
};

/// A request: the page's number, then padding to the runtime's GETP size.
const REQUEST: usize = 64;
/// A reply: the page's number in a header of the runtime's size, then the page.
const HEADER: usize = 64;
const PAGE_BYTES: usize = 4096;

/// The handler of [`minimal_remote_fault_us`]: asks the home for the page, busy-polls for the
/// reply, copies it in through the service view, opens the page for reading.
extern "C" fn fetch_page(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let app = MINIMAL.app.load(Ordering::Relaxed);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let pages = MINIMAL.pages.load(Ordering::Relaxed);
    if app == 0 || addr < app || addr >= app + pages * PAGE_BYTES {
        // Not ours: the fault repeats under the default action and kills the process.
        restore_segv(None);
        return;
    }
    let index = (addr - app) / PAGE_BYTES;
    let sock = MINIMAL.sock.load(Ordering::Relaxed);
    let mut request = [0u8; REQUEST];
    request[..4].copy_from_slice(&(index as u32).to_le_bytes());
    let mut reply = [0u8; HEADER + PAGE_BYTES];
    let send = || {
        // SAFETY: our own (connected) socket, a buffer of the given size.
        unsafe { libc::send(sock, request.as_ptr().cast(), REQUEST, 0) }
    };
    send();
    let mem = MINIMAL.mem.load(Ordering::Relaxed);
    if mem >= 0 {
        // While the request travels: map the page in the application view, still closed (see
        // the runtime's `Region::prepare`). A failure only leaves it to the retried access.
        let mut byte = 0u8;
        // SAFETY: reads one byte of our own address space into a local.
        unsafe {
            libc::pread(
                mem,
                (&raw mut byte).cast(),
                1,
                (app + index * PAGE_BYTES) as i64,
            )
        };
    }
    let asked = Instant::now();
    let mut resent = 0;
    loop {
        // SAFETY: our own socket, a buffer of the given size.
        let n = unsafe {
            libc::recv(
                sock,
                reply.as_mut_ptr().cast(),
                reply.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n == (HEADER + PAGE_BYTES) as isize && reply[..4] == (index as u32).to_le_bytes() {
            break;
        }
        // A lost datagram (loopback drops only when a buffer is full) is asked for again; a
        // home that does not answer ends the process with a message rather than a hang.
        let waited = asked.elapsed().as_millis();
        if waited > 100 * (resent + 1) {
            resent += 1;
            send();
        }
        if waited > 5_000 {
            let msg = b"dsm-bench: the minimal remote fault's home does not answer\n";
            // SAFETY: write(2) and _exit(2) are async-signal-safe.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::_exit(70);
            }
        }
        std::hint::spin_loop();
    }
    // SAFETY: the copy writes one page of the service view (in bounds: `index < pages`), the
    // mprotect opens one page of the application view. Both async-signal-safe.
    unsafe {
        let service = MINIMAL.service.load(Ordering::Relaxed) as *mut u8;
        std::ptr::copy_nonoverlapping(
            reply.as_ptr().add(HEADER),
            service.add(index * PAGE_BYTES),
            PAGE_BYTES,
        );
        libc::mprotect(
            (app + index * PAGE_BYTES) as *mut libc::c_void,
            PAGE_BYTES,
            libc::PROT_READ,
        );
    }
}

/// The home of [`minimal_remote_fault_us`], in the forked child: answers each request with its
/// page until told to stop (page number `u32::MAX`) or 5 s pass without one. Only system calls
/// and copies into buffers allocated before the fork.
fn minimal_home(sock: i32, data: &[u8], reply: &mut [u8]) -> ! {
    let mut request = [0u8; REQUEST];
    let mut idle_since = Instant::now();
    let mut polls = 0u32;
    loop {
        // SAFETY: our socket, a buffer of the given size.
        let n = unsafe {
            libc::recv(
                sock,
                request.as_mut_ptr().cast(),
                REQUEST,
                libc::MSG_DONTWAIT,
            )
        };
        if n != REQUEST as isize {
            polls += 1;
            if polls % 4096 == 0 && idle_since.elapsed().as_secs() >= 5 {
                // SAFETY: ends the child without running the parent's destructors.
                unsafe { libc::_exit(0) };
            }
            std::hint::spin_loop();
            continue;
        }
        idle_since = Instant::now();
        let index = u32::from_le_bytes(request[..4].try_into().unwrap_or([0xff; 4]));
        if index == u32::MAX || (index as usize + 1) * PAGE_BYTES > data.len() {
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        reply[..4].copy_from_slice(&index.to_le_bytes());
        let page = &data[index as usize * PAGE_BYTES..(index as usize + 1) * PAGE_BYTES];
        reply[HEADER..HEADER + PAGE_BYTES].copy_from_slice(page);
        // SAFETY: our (connected) socket, a buffer of the given size.
        unsafe { libc::send(sock, reply.as_ptr().cast(), HEADER + PAGE_BYTES, 0) };
    }
}

/// The least a remote read fault costs here, as one measurement: microseconds per fault,
/// `pages` samples. A forked child is the home; this process reads `pages` fresh pages of a
/// memfd mapped twice (as the runtime maps its region), and its SIGSEGV handler sends a 64-byte
/// request over UDP (loopback), maps the page in the application view while the request
/// travels (as the runtime's `Region::prepare` does: without it the retried access faults
/// again to map the fresh page, 1.1 us more here), busy-polls for the 64-byte header + 4 KiB
/// reply, copies the page in through the service view and opens it for reading. No protocol, no
/// queues, no other thread: the bare fault and the busy UDP round trip composed, with what
/// composing them costs (caches and the CPU the handler and the socket calls take from each
/// other, the page's first mapping). Installs its own SIGSEGV handler for the duration: call it
/// only in a process that is not a DSM node.
pub fn minimal_remote_fault_us(pages: usize) -> std::io::Result<Vec<f64>> {
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    const WARMUP: usize = 100;
    let total = pages + WARMUP;
    let requester = UdpSocket::bind("127.0.0.1:0")?;
    let home = UdpSocket::bind("127.0.0.1:0")?;
    // Connected to each other, as the runtime's UDP transport connects two nodes.
    requester.connect(home.local_addr()?)?;
    home.connect(requester.local_addr()?)?;
    // The home's pages, and its reply buffer: allocated (and touched) before the fork.
    let data: Vec<u8> = (0..total * PAGE_BYTES)
        .map(|i| (i / PAGE_BYTES) as u8 ^ 0x5a)
        .collect();
    let mut reply = vec![0u8; HEADER + PAGE_BYTES];
    // SAFETY: the child runs only `minimal_home` (system calls and copies into memory it owns)
    // and leaves with _exit; nothing in it allocates or takes a lock another thread could hold.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if child == 0 {
        minimal_home(home.as_raw_fd(), &data, &mut reply);
    }
    drop(home);
    let result = minimal_requester(&requester, total, &data);
    // Stop the home (it also stops by itself after 5 s without a request), and reap it.
    let stop = [0xffu8; REQUEST];
    let _ = requester.send(&stop);
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    result.map(|mut v| v.split_off(WARMUP))
}

fn minimal_requester(
    sock: &std::net::UdpSocket,
    total: usize,
    data: &[u8],
) -> std::io::Result<Vec<f64>> {
    use std::os::fd::AsRawFd;
    let len = total * PAGE_BYTES;
    let fd = super::memfd(c"dsm-minimal-fault", len as u64)?;
    let app = super::map_shared(&fd, len, libc::PROT_NONE)?;
    let service = super::map_shared(&fd, len, libc::PROT_READ | libc::PROT_WRITE)?;
    // Backed before the faults, as the runtime backs a page while its GETP travels.
    // Best effort: an older kernel leaves the pages to be backed at their first copy.
    let _ = super::populate_write(service, len);
    MINIMAL.app.store(app as usize, Ordering::SeqCst);
    MINIMAL.service.store(service as usize, Ordering::SeqCst);
    MINIMAL.pages.store(total, Ordering::SeqCst);
    MINIMAL.sock.store(sock.as_raw_fd(), Ordering::SeqCst);
    let mem = std::fs::File::open("/proc/self/mem").ok();
    MINIMAL
        .mem
        .store(mem.as_ref().map_or(-1, |f| f.as_raw_fd()), Ordering::SeqCst);
    let old = install_segv(fetch_page);
    let mut samples = Vec::with_capacity(total);
    let mut wrong = None;
    for i in 0..total {
        let t = Instant::now();
        // SAFETY: page `i` of our application view: the first read faults and the handler
        // fetches and opens it.
        let byte = unsafe { std::ptr::read_volatile((app as *const u8).add(i * PAGE_BYTES)) };
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        if byte != data[i * PAGE_BYTES] {
            wrong = Some(i);
        }
    }
    restore_segv(Some(&old));
    MINIMAL.app.store(0, Ordering::SeqCst);
    MINIMAL.mem.store(-1, Ordering::SeqCst);
    drop(mem);
    // SAFETY: our own mappings, no references into them remain.
    unsafe {
        libc::munmap(app.cast(), len);
        libc::munmap(service.cast(), len);
    }
    match wrong {
        Some(i) => Err(std::io::Error::other(format!(
            "minimal remote fault: page {i} came with the wrong bytes"
        ))),
        None => Ok(samples),
    }
}

/// Microseconds to back one fresh page of a memory file with memory (`MADV_POPULATE_WRITE` on a
/// shared mapping, one page per call), `pages` samples: what a node pays for each page it
/// receives for the first time, before the bytes are copied in. The minimal remote fault backs
/// its pages before it starts the clock; the runtime backs a page while its GETP travels. Where
/// it is slow (3-4 us in this VM, whose guest hands freed memory back to the host), it weighs on
/// every transfer. An error where the kernel refuses the advice (before Linux 5.14).
pub fn backing_page_us(pages: usize) -> std::io::Result<Vec<f64>> {
    const WARMUP: usize = 100;
    let total = pages + WARMUP;
    let len = total * PAGE_BYTES;
    let fd = super::memfd(c"dsm-backing-floor", len as u64)?;
    let view = super::map_shared(&fd, len, libc::PROT_READ | libc::PROT_WRITE)?;
    let mut samples = Vec::with_capacity(total);
    let mut refused = None;
    for i in 0..total {
        let t = Instant::now();
        // In bounds: `i < total`, the mapping's length in pages.
        let r = super::populate_write(view.wrapping_add(i * PAGE_BYTES), PAGE_BYTES);
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        if let Err(e) = r {
            refused = Some(e);
            break;
        }
    }
    // SAFETY: our own mapping; no references into it remain.
    unsafe { libc::munmap(view.cast(), len) };
    match refused {
        Some(e) => Err(std::io::Error::other(format!(
            "MADV_POPULATE_WRITE refused ({e}): this kernel cannot back pages ahead"
        ))),
        None => Ok(samples.split_off(WARMUP)),
    }
}
