//! The shared region: one memfd mapped twice.
//!
//! The application's view sits at the same fixed address on every node (`global_start_addr`) and
//! starts with no access at all; the core opens pages in it page by page (mprotect). The service
//! view is mapped wherever the kernel likes and is always read-write: the service thread installs
//! fetched pages, applies diffs and reads pages to serve through it, without ever opening the
//! application's view early. Both views share the same physical pages, so no copy is made between
//! them.

use std::os::fd::OwnedFd;

use dsm_core::{PAGE_SIZE, PageBuf, PageMemory, PageNum, Prot};

use crate::fatal;
use crate::sys::{self, Protection};

/// The region of one node.
pub(crate) struct Region {
    pub app_base: usize,
    pub len: usize,
    service_base: *mut u8,
    fd: OwnedFd,
}

// SAFETY: the region's raw pointers refer to mappings that live as long as the process (they are
// never unmapped); the one Region value is owned by the service thread.
unsafe impl Send for Region {}

impl Region {
    /// Reserves `len` bytes at `app_base` (application view, no access) and a service view.
    pub fn map(app_base: usize, len: usize) -> std::io::Result<Region> {
        let fd = sys::memfd("dsm-shared", len as u64)?;
        let app = sys::map_shared(&fd, len, Some(app_base), Protection::None)?;
        let service_base = sys::map_shared(&fd, len, None, Protection::ReadWrite)?;
        // One state byte per page for the home-write fast path (zeroed, lazily backed).
        let pages = len / PAGE_SIZE;
        let state = sys::map_anonymous(pages)?;
        crate::fastpath::init(state.cast(), pages);
        Ok(Region {
            app_base: app as usize,
            len,
            service_base,
            fd,
        })
    }

    /// The service view's address of region byte `off` (for registering home pages with an
    /// RDMA device: the mapping lives as long as the process).
    pub fn service_addr(&self, off: usize) -> *mut u8 {
        assert!(off <= self.len, "offset {off} outside the region");
        self.service_base.wrapping_add(off)
    }

    /// Backs `count` pages from `first` with memory before their bytes arrive (a GETP is on its
    /// way): one system call instead of a kernel page fault per page when they are written.
    pub fn prepare(&self, first: PageNum, count: usize) {
        if first.index() + count <= self.len / PAGE_SIZE {
            sys::populate_write(self.page_ptr(first), count * PAGE_SIZE);
        }
    }

    fn page_ptr(&self, page: PageNum) -> *mut u8 {
        let off = page.index() * PAGE_SIZE;
        if off + PAGE_SIZE > self.len {
            fatal(&format!(
                "{page} is outside the shared region of {} bytes",
                self.len
            ));
        }
        // In bounds: checked just above.
        self.service_base.wrapping_add(off)
    }
}

impl PageMemory for Region {
    fn read(&self, page: PageNum, out: &mut [u8; PAGE_SIZE]) {
        let src = self.page_ptr(page);
        // SAFETY: src points to PAGE_SIZE bytes of the service mapping (bounds checked); `out` is a
        // distinct Rust buffer. Application threads may store to the same physical page through
        // their view concurrently; those are plain byte copies of shared memory, as in any
        // mmap-based shared memory, and the protocol diffs only after downgrading the page.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), PAGE_SIZE) };
    }

    fn copy(&self, page: PageNum) -> PageBuf {
        // Straight into a new buffer: no zeroing first (a served page is copied at every GETP).
        let src = self.page_ptr(page);
        let mut buf = Box::<[u8; PAGE_SIZE]>::new_uninit();
        // SAFETY: as in `read`; the destination is the new buffer's PAGE_SIZE bytes, all of which
        // the copy initializes before `assume_init`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr().cast::<u8>(), PAGE_SIZE);
            PageBuf(buf.assume_init())
        }
    }

    fn write(&mut self, page: PageNum, offset: usize, data: &[u8]) {
        if offset + data.len() > PAGE_SIZE {
            fatal("write past the end of a page");
        }
        let dst = self.page_ptr(page).wrapping_add(offset);
        // SAFETY: dst..dst+len lies inside one page of the service mapping (checked above), and
        // `data` is a distinct Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
    }

    fn protect(&mut self, first: PageNum, count: u32, prot: Prot) {
        let addr = self.app_base + first.index() * PAGE_SIZE;
        let len = count as usize * PAGE_SIZE;
        if first.index() * PAGE_SIZE + len > self.len {
            fatal("protection change outside the shared region");
        }
        let p = match prot {
            Prot::None => Protection::None,
            Prot::Read => Protection::Read,
            Prot::ReadWrite => Protection::ReadWrite,
        };
        for page in first.index()..first.index() + count as usize {
            crate::fastpath::withdraw(page);
        }
        crate::trace::stamp(first.index() as u64, crate::trace::Step::ProtectStart);
        let r = sys::mprotect(addr, len, p);
        crate::trace::stamp(first.index() as u64, crate::trace::Step::ProtectEnd);
        if let Err(e) = r {
            fatal(&format!(
                "mprotect of {count} pages at {addr:#x} failed: {e} (for many scattered pages, raise vm.max_map_count)"
            ));
        }
    }

    fn allow_home_write(&mut self, page: PageNum) {
        crate::fastpath::allow_home_write(page.index());
    }

    fn allow_prefetch_open(&mut self, page: PageNum) {
        crate::fastpath::allow_prefetch_open(page.index());
    }

    fn discard(&mut self, page: PageNum) {
        let _ = sys::punch_hole(
            &self.fd,
            (page.index() * PAGE_SIZE) as u64,
            PAGE_SIZE as u64,
        );
    }
}
