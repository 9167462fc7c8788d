//! The bare cost of a page fault on this machine: SIGSEGV on a protected page, mprotect to
//! read-write in the handler, return. The floor a DSM fault is measured against (LIMITS.md:
//! 4.3-5.3 us here). For the bench, in a process that is not a DSM node.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

static PAGE: AtomicUsize = AtomicUsize::new(0);

extern "C" fn open_page(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let page = PAGE.load(Ordering::Relaxed);
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    if page == 0 || addr & !4095 != page {
        // Not our page: restore the default action; the fault repeats and kills the process.
        // SAFETY: zeroed sigaction with SIG_DFL is a valid default disposition.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut());
        }
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
    // SAFETY: zeroed sigaction is valid plain data; `open_page` has the SA_SIGINFO signature.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = open_page as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGSEGV, &act, &mut old);
    }
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
    // SAFETY: restores the saved action and unmaps our page.
    unsafe {
        libc::sigaction(libc::SIGSEGV, &old, std::ptr::null_mut());
        libc::munmap(p, 4096);
    }
    PAGE.store(0, Ordering::SeqCst);
    Ok(samples)
}
