//! Where the program's allocations lie, for the words on a wild access: a fault at an address
//! of the shared region that no allocation covers says which allocation is nearest (its range,
//! and the line that made it where that is known) before the program dies of it; the end of
//! the furthest, past which `prepare_for_io` touches nothing; the one a spun word lies in, for
//! the wait report (`progress`), or a page read again after the launcher had its node drop its
//! copies (`service`).
//!
//! Written from thread context at each allocation, read from signal context: a fixed table of
//! atomics, filled in order and published by its count; the site's text is a leaked string,
//! never freed, behind a `OnceLock` (whose `get` is one atomic load). Async-signal-safe to read.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations remembered (a program that makes more is told of the nearest among the first).
const KEPT: usize = 4096;

struct Entry {
    start: AtomicUsize,
    bytes: AtomicUsize,
    site: OnceLock<&'static str>,
}

static TABLE: [Entry; KEPT] = [const {
    Entry {
        start: AtomicUsize::new(0),
        bytes: AtomicUsize::new(0),
        site: OnceLock::new(),
    }
}; KEPT];

/// Entries written and published.
static COUNT: AtomicUsize = AtomicUsize::new(0);

/// The end of the furthest allocation made so far (every allocation's, also past [`KEPT`]).
static END: AtomicUsize = AtomicUsize::new(0);

/// The end of the furthest allocation made so far: no byte past it is allocated.
/// Async-signal-safe.
pub(crate) fn end() -> usize {
    END.load(Ordering::Acquire)
}

/// Remembers an allocation of `bytes` at `start`, made at `site` (a source line, or code's
/// module and offset). Thread context; allocations are collective calls, made by one thread of
/// a node at a time.
pub(crate) fn note(start: usize, bytes: usize, site: String) {
    END.fetch_max(start.saturating_add(bytes), Ordering::AcqRel);
    let k = COUNT.load(Ordering::Acquire);
    if k >= KEPT {
        return;
    }
    let e = &TABLE[k];
    e.start.store(start, Ordering::Relaxed);
    e.bytes.store(bytes, Ordering::Relaxed);
    let _ = e.site.set(Box::leak(site.into_boxed_str()));
    COUNT.store(k + 1, Ordering::Release);
}

/// Where the byte at `addr` lies, for a message: ` (byte B of the allocation of N bytes made at
/// FILE:LINE)` (the line from addr2line: thread context only), or nothing outside every
/// allocation kept.
pub(crate) fn spelled_place(addr: usize) -> String {
    match nearest(addr) {
        Some((start, bytes, site)) if (start..start + bytes).contains(&addr) => {
            let site = if site.is_empty() {
                String::new()
            } else {
                format!(" made at {}", dsm_races::site_line(site))
            };
            format!(
                " (byte {} of the allocation of {bytes} bytes{site})",
                addr - start
            )
        }
        _ => String::new(),
    }
}

/// The allocation nearest `addr`: (start, bytes, site). Signal context.
pub(crate) fn nearest(addr: usize) -> Option<(usize, usize, &'static str)> {
    let n = COUNT.load(Ordering::Acquire);
    let distance = |e: &Entry| {
        let (start, bytes) = (
            e.start.load(Ordering::Relaxed),
            e.bytes.load(Ordering::Relaxed),
        );
        if addr < start {
            start - addr
        } else {
            addr.saturating_sub((start + bytes).saturating_sub(1))
        }
    };
    let e = TABLE[..n].iter().min_by_key(|e| distance(e))?;
    let site = e.site.get().copied().unwrap_or("");
    Some((
        e.start.load(Ordering::Relaxed),
        e.bytes.load(Ordering::Relaxed),
        site,
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_nearest_allocation_is_the_one_whose_bytes_are_closest() {
        // The table is the process's: these tests' addresses are far from any real region.
        let base = 0x7700_0000_0000;
        super::note(base, 4096, "a.c:10".into());
        super::note(base + 65536, 100, "a.c:20".into());
        assert_eq!(
            super::nearest(base + 4096 + 8),
            Some((base, 4096, "a.c:10"))
        );
        assert_eq!(
            super::nearest(base + 65000),
            Some((base + 65536, 100, "a.c:20"))
        );
        assert_eq!(
            super::nearest(base + 65536 + 200),
            Some((base + 65536, 100, "a.c:20"))
        );
    }
}
