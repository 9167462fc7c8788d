//! Typed arrays in the shared region.

use std::marker::PhantomData;
use std::sync::atomic::Ordering::Relaxed;

/// Types that may live in shared memory: plain numbers, any bit pattern valid.
///
/// # Safety
/// Implementors must be `Copy`, have no padding and accept every bit pattern; their size must be
/// a power of two no larger than [`PAGE_SIZE`](dsm_core::PAGE_SIZE) (so that, in an allocation,
/// which starts on a page boundary, every element is aligned to its size), and their hidden
/// `load_relaxed`/`store_relaxed` must be single atomic accesses of the whole element.
pub unsafe trait Shared: Copy + Send + Sync + 'static {
    /// `*ptr`, read with one relaxed atomic load.
    ///
    /// # Safety
    /// `ptr` must be valid for reads of `Self` and aligned to `size_of::<Self>()`, and every
    /// access to `*ptr` that may run concurrently must be an atomic access of the same size (the
    /// conditions of `AtomicU64::from_ptr`).
    #[doc(hidden)]
    unsafe fn load_relaxed(ptr: *const Self) -> Self;

    /// Writes `v` to `*ptr` with one relaxed atomic store.
    ///
    /// # Safety
    /// As [`Shared::load_relaxed`], with `ptr` valid for writes.
    #[doc(hidden)]
    unsafe fn store_relaxed(ptr: *mut Self, v: Self);
}

macro_rules! shared_int {
    ($($t:ty: $atomic:ident),*) => { $(
        // SAFETY: a primitive integer: no padding, every bit pattern valid, its size (1 to 8
        // bytes) a power of two; the accesses below are one atomic access of its atomic twin,
        // which has its size and in-memory representation.
        unsafe impl Shared for $t {
            #[inline(always)]
            unsafe fn load_relaxed(ptr: *const $t) -> $t {
                // SAFETY: valid, aligned to the size (which is the atomic type's alignment) and
                // accessed only atomically meanwhile: the caller's promise, `from_ptr`'s
                // conditions. A load does not write through the `*mut`.
                unsafe { std::sync::atomic::$atomic::from_ptr(ptr.cast_mut()) }.load(Relaxed)
            }
            #[inline(always)]
            unsafe fn store_relaxed(ptr: *mut $t, v: $t) {
                // SAFETY: as in `load_relaxed`.
                unsafe { std::sync::atomic::$atomic::from_ptr(ptr) }.store(v, Relaxed)
            }
        }
    )* };
}
shared_int!(
    u8: AtomicU8, u16: AtomicU16, u32: AtomicU32, u64: AtomicU64, usize: AtomicUsize,
    i8: AtomicI8, i16: AtomicI16, i32: AtomicI32, i64: AtomicI64, isize: AtomicIsize
);

macro_rules! shared_float {
    ($($t:ty: $bits:ty, $atomic:ident),*) => { $(
        // SAFETY: a primitive float: no padding, every bit pattern valid, its size (4 or 8
        // bytes) a power of two; the accesses below are one atomic access of the unsigned
        // integer of its size and alignment, through its bits (`to_bits`/`from_bits`).
        unsafe impl Shared for $t {
            #[inline(always)]
            unsafe fn load_relaxed(ptr: *const $t) -> $t {
                let bits = ptr.cast::<$bits>().cast_mut();
                // SAFETY: as for the integers: the caller's promise is `from_ptr`'s conditions,
                // and the float and its bits have the same size and alignment.
                let atomic = unsafe { std::sync::atomic::$atomic::from_ptr(bits) };
                <$t>::from_bits(atomic.load(Relaxed))
            }
            #[inline(always)]
            unsafe fn store_relaxed(ptr: *mut $t, v: $t) {
                let bits = ptr.cast::<$bits>();
                // SAFETY: as in `load_relaxed`.
                let atomic = unsafe { std::sync::atomic::$atomic::from_ptr(bits) };
                atomic.store(v.to_bits(), Relaxed)
            }
        }
    )* };
}
shared_float!(f32: u32, AtomicU32, f64: u64, AtomicU64);

/// An array in shared memory, at the same address on every node.
///
/// Accesses fault and fetch pages as needed, and follow the DSM's memory model (writes travel
/// at release, are seen after acquire). The safe accessors are [`SharedArray::get`] and
/// [`SharedArray::set`], each one relaxed atomic access of one element (on x86-64 the same
/// `mov` as a plain load or store), and [`SharedArray::read_from`] and
/// [`SharedArray::write_to`], built on them: threads of one node racing on an element through
/// them get some value written, never undefined behaviour. [`SharedArray::slice`] and
/// [`SharedArray::slice_mut`] (plain slices, for inner loops) and dereferences of
/// [`SharedArray::as_ptr`] are non-atomic, hence `unsafe`: the program must keep them free of
/// data races.
pub struct SharedArray<T> {
    /// The first element: in the shared region, on a page boundary (checked by `new`).
    ptr: *mut T,
    len: usize,
    _t: PhantomData<T>,
}

impl<T> Clone for SharedArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedArray<T> {}
// SAFETY: the array is shared memory by design. Its safe accessors are atomic accesses of one
// element, so threads of a node may use them concurrently; the non-atomic ones are `unsafe`,
// their callers promising freedom from data races. Across nodes, the DSM's memory model and the
// program's synchronisation govern what is seen, as for the shared region itself.
unsafe impl<T: Shared> Send for SharedArray<T> {}
// SAFETY: as above.
unsafe impl<T: Shared> Sync for SharedArray<T> {}

impl SharedArray<u32> {
    /// The elements as atomics, for the process's life (the race checker's clock slots, which
    /// its threads read and write through the DSM like the program's own data).
    pub(crate) fn as_atomic_words(&self) -> &'static [std::sync::atomic::AtomicU32] {
        // SAFETY: the elements lie in the shared region (checked by `new`), mapped for the
        // process's life; `u32` elements are aligned for `AtomicU32`, which has their size, and
        // every bit pattern is a valid value. Other threads reach them through atomics too.
        unsafe { std::slice::from_raw_parts(self.ptr.cast_const().cast(), self.len) }
    }
}

/// The private buffer [`SharedArray::read_from`] and [`SharedArray::write_to`] go through.
const IO_BOUNCE_BYTES: usize = 1 << 16;

impl<T: Shared> SharedArray<T> {
    /// The array of `len` elements from `ptr`, an allocation of the shared region (mapped as
    /// long as the process lives, `len * size_of::<T>()` bytes in it).
    pub(crate) fn new(ptr: *mut T, len: usize) -> SharedArray<T> {
        // The atomic accesses of `get` and `set` rely on it (see `Shared`).
        assert!(
            (ptr as usize) % dsm_core::PAGE_SIZE == 0,
            "a shared allocation at {ptr:?} off a page boundary"
        );
        SharedArray {
            ptr,
            len,
            _t: PhantomData,
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Element `i`, read with one relaxed atomic load. Panics (naming the caller's line) if `i`
    /// is out of the array.
    #[inline]
    #[track_caller]
    pub fn get(&self, i: usize) -> T {
        let p = self.element(i, false);
        // SAFETY: element i is in bounds of the allocation (checked by `element`), which stays
        // mapped as long as the process; it is aligned to size_of::<T>(): the allocation starts
        // on a page boundary (`new`), element i lies i * size_of::<T>() bytes on, and that size
        // is a power of two no larger than a page (`Shared`). Safe code accesses it only
        // atomically with T's size (get, set, read_from, write_to); the non-atomic accesses
        // (slice, slice_mut, as_ptr) are unsafe, their callers promising no data race with this
        // one.
        unsafe { T::load_relaxed(p) }
    }

    /// Sets element `i` with one relaxed atomic store. Panics (naming the caller's line) if `i`
    /// is out of the array.
    #[inline]
    #[track_caller]
    pub fn set(&self, i: usize, v: T) {
        let p = self.element(i, true);
        // SAFETY: as in `get` (the region's application view is mapped for writing; a page not
        // writable yet faults and is made so).
        unsafe { T::store_relaxed(p, v) }
    }

    /// Element `i`'s address, once it is known to be in the array (else a panic naming the
    /// caller's line) and its access is recorded for the race checker (a write if `write`).
    #[inline]
    #[track_caller]
    fn element(&self, i: usize, write: bool) -> *mut T {
        assert!(
            i < self.len,
            "index {i} out of a shared array of {}",
            self.len
        );
        let p = self.ptr.wrapping_add(i);
        dsm_races::access(
            p as usize,
            std::mem::size_of::<T>(),
            write,
            dsm_races::From::Caller(std::panic::Location::caller()),
        );
        p
    }

    /// Elements `range` as a slice: plain loads, for inner loops.
    ///
    /// # Safety
    /// The slice's reads are not atomic, so nothing may write these elements while the slice
    /// lives: no thread of this node (through [`SharedArray::set`],
    /// [`SharedArray::read_from`], [`SharedArray::slice_mut`] or a pointer), and no other node
    /// whose write this node could see meanwhile (a write released by another node appears
    /// here at this node's next acquire: the slice must not live across an acquire that may
    /// bring writes to these elements). In short, the program must be data-race free.
    #[track_caller]
    pub unsafe fn slice(&self, range: std::ops::Range<usize>) -> &[T] {
        self.check(&range);
        // SAFETY: in bounds (checked); no writer while it lives is the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(range.start), range.len()) }
    }

    /// Elements `range` as a mutable slice (a guard that is a `&mut [T]` through `DerefMut`):
    /// plain loads and stores, for inner loops. Under the race checker, the bytes it changed
    /// are recorded as writes from the caller's line when the guard is dropped (and, for those
    /// changed by then, at each synchronisation of this thread while it lives).
    ///
    /// # Safety
    /// The slice is exclusive: nothing else may access these elements while it lives, neither
    /// another thread of this node nor this one (through [`SharedArray::get`],
    /// [`SharedArray::set`], [`SharedArray::read_from`], [`SharedArray::write_to`], another
    /// slice or a pointer), and no other node may write them without synchronisation ordering
    /// its write before this node's next acquire (the program must be data-race free across
    /// nodes).
    #[track_caller]
    pub unsafe fn slice_mut(&self, range: std::ops::Range<usize>) -> SliceMut<'_, T> {
        self.check(&range);
        let taken = if dsm_races::on() {
            let bytes = range.len() * std::mem::size_of::<T>();
            // SAFETY: in bounds (checked); read as bytes, which every value is.
            let now = unsafe {
                std::slice::from_raw_parts(self.ptr.add(range.start) as *const u8, bytes)
            };
            dsm_races::slice_taken(
                self.ptr.wrapping_add(range.start) as usize,
                now,
                std::mem::size_of::<T>(),
                dsm_races::From::Caller(std::panic::Location::caller()),
            )
        } else {
            None
        };
        SliceMut {
            // SAFETY: in bounds (checked); exclusivity is the caller's promise.
            slice: unsafe {
                std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len())
            },
            taken,
            _this_thread: std::marker::PhantomData,
        }
    }

    /// Panics unless `range` lies within the array.
    #[track_caller]
    fn check(&self, range: &std::ops::Range<usize>) {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "range {range:?} out of {}",
            self.len
        );
    }

    /// The first element's address. Reading or writing through it is `unsafe` and non-atomic:
    /// the rules of [`SharedArray::slice`] and [`SharedArray::slice_mut`] apply.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Element `i`'s address. Panics (naming the caller's line) if `i` is out of the array.
    #[track_caller]
    pub(crate) fn element_addr(&self, i: usize) -> usize {
        assert!(
            i < self.len,
            "index {i} out of a shared array of {}",
            self.len
        );
        self.ptr.wrapping_add(i) as usize
    }

    /// Fills elements `range` with the bytes `r` gives (their in-memory form), up to the range's
    /// end or `r`'s; returns the bytes read. This is the safe way to read a file or a socket into
    /// shared memory: the kernel cannot fetch a page this node does not hold (a `read` straight
    /// into one fails with `EFAULT`), so the bytes go through a private buffer and are stored
    /// element by element with [`SharedArray::set`], as the program's own writes. A last
    /// element `r` gives only part of keeps its other bytes. The caller must be the range's only
    /// writer until its next release, as for any write. On an error, the bytes read before it
    /// are stored.
    #[track_caller]
    pub fn read_from(
        &self,
        range: std::ops::Range<usize>,
        r: &mut impl std::io::Read,
    ) -> std::io::Result<usize> {
        self.check(&range);
        let size = std::mem::size_of::<T>();
        let total = range.len() * size;
        // A whole number of elements: the size is a power of two no larger than a page.
        let mut buf = vec![0u8; total.min(IO_BOUNCE_BYTES)];
        // Bytes stored (whole elements), and bytes at the front of `buf` not stored yet (less
        // than an element).
        let (mut done, mut held) = (0, 0);
        let mut failed = None;
        while done + held < total {
            // More than `held`: fewer than `size` are held, and `done + held < total`.
            let want = (total - done).min(buf.len());
            let n = match r.read(&mut buf[held..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            held += n;
            let whole = held / size;
            for k in 0..whole {
                // SAFETY: bytes k * size.. k * size + size lie in `buf` (k < held / size); T is
                // plain data (Shared), so any bytes are a valid value; unaligned read.
                let v = unsafe { buf.as_ptr().add(k * size).cast::<T>().read_unaligned() };
                self.set(range.start + done / size + k, v);
            }
            buf.copy_within(whole * size..held, 0);
            done += whole * size;
            held -= whole * size;
        }
        if held > 0 {
            // A part of the next element (which exists: done + held <= total).
            let i = range.start + done / size;
            let mut v = self.get(i);
            // SAFETY: `held < size` bytes from `buf` into the local `v`; T is plain data, so
            // any bytes are a valid value.
            unsafe {
                std::ptr::copy_nonoverlapping(buf.as_ptr(), (&raw mut v).cast::<u8>(), held);
            }
            self.set(i, v);
            done += held;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }

    /// Writes elements `range` (their in-memory form) to `w`: the safe way to write shared
    /// memory to a file or a socket (see [`SharedArray::read_from`]). The elements are read
    /// with [`SharedArray::get`] into a private buffer.
    #[track_caller]
    pub fn write_to(
        &self,
        range: std::ops::Range<usize>,
        w: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        self.check(&range);
        let size = std::mem::size_of::<T>();
        let per_buf = (IO_BOUNCE_BYTES / size).min(range.len());
        let mut buf = vec![0u8; per_buf * size];
        let mut i = range.start;
        while i < range.end {
            let k = (range.end - i).min(per_buf);
            for j in 0..k {
                // SAFETY: bytes j * size.. j * size + size lie in `buf` (j < per_buf); an
                // unaligned write of plain data (no padding: every byte is initialised).
                unsafe {
                    buf.as_mut_ptr()
                        .add(j * size)
                        .cast::<T>()
                        .write_unaligned(self.get(i + j));
                }
            }
            w.write_all(&buf[..k * size])?;
            i += k;
        }
        Ok(())
    }
}

/// Elements of a [`SharedArray`] taken by [`SharedArray::slice_mut`]: a `&mut [T]` (through
/// `Deref` and `DerefMut`: pass `&mut guard` where a `&mut [T]` is wanted). Under the race
/// checker, dropping it records the bytes it changed, while they are still in cache.
///
/// The guard stays on the thread that took it (it is not `Send`, as a `MutexGuard` is not):
/// its snapshot is that thread's. Hand the slice itself (`&mut *guard`, or parts of it) to
/// other threads; what they write through it is recorded as the taker's.
pub struct SliceMut<'a, T> {
    slice: &'a mut [T],
    taken: Option<dsm_races::Taken>,
    _this_thread: std::marker::PhantomData<*const ()>,
}

impl<T> std::ops::Deref for SliceMut<'_, T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        self.slice
    }
}

impl<T> std::ops::DerefMut for SliceMut<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        self.slice
    }
}

impl<T> Drop for SliceMut<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if let Some(taken) = self.taken.take() {
            dsm_races::slice_dropped(taken);
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.slice.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Page-aligned private memory standing in for an allocation (the accessors work on any
    /// memory of the process).
    #[repr(C, align(4096))]
    struct Pages([u8; 20 * dsm_core::PAGE_SIZE]);

    fn array<T: Shared>(pages: &mut Pages) -> SharedArray<T> {
        let len = pages.0.len() / std::mem::size_of::<T>();
        SharedArray::new(pages.0.as_mut_ptr().cast(), len)
    }

    /// Gives its bytes `chunk` at a time, then fails if `fail`, else ends.
    struct Dribble {
        bytes: Vec<u8>,
        at: usize,
        chunk: usize,
        fail: bool,
    }

    impl std::io::Read for Dribble {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.at == self.bytes.len() && self.fail {
                return Err(std::io::Error::other("broken"));
            }
            let n = self.chunk.min(buf.len()).min(self.bytes.len() - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn get_and_set_every_type() {
        let mut pages = Box::new(Pages([0; 20 * dsm_core::PAGE_SIZE]));
        let a = array::<f64>(&mut pages);
        a.set(3, -1.5);
        assert_eq!((a.get(3), a.get(2)), (-1.5, 0.0));
        let b = array::<i16>(&mut pages);
        b.set(1, -2);
        assert_eq!(b.get(1), -2);
        let c = array::<f32>(&mut pages);
        c.set(1, 0.25);
        assert_eq!(c.get(1), 0.25);
        let d = array::<u8>(&mut pages);
        assert_eq!(d.get(2), 0xfe, "i16 -2's low byte, little-endian");
    }

    #[test]
    fn read_from_stores_partial_chunks_and_a_partial_last_element() {
        let mut pages = Box::new(Pages([0; 20 * dsm_core::PAGE_SIZE]));
        let a = array::<u64>(&mut pages);
        for i in 0..12 {
            a.set(i, u64::MAX);
        }
        // 10 elements and 5 bytes of the 11th, 3 bytes per read.
        let bytes: Vec<u8> = (0..85u8).collect();
        let mut r = Dribble {
            bytes: bytes.clone(),
            at: 0,
            chunk: 3,
            fail: false,
        };
        assert_eq!(a.read_from(0..12, &mut r).unwrap(), 85);
        for i in 0..10 {
            let want = u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(a.get(i), want, "element {i}");
        }
        let mut part = [0xff; 8];
        part[..5].copy_from_slice(&bytes[80..]);
        assert_eq!(a.get(10), u64::from_le_bytes(part), "the partial element");
        assert_eq!(a.get(11), u64::MAX, "past the bytes read");
    }

    #[test]
    fn read_from_stores_what_came_before_an_error() {
        let mut pages = Box::new(Pages([0; 20 * dsm_core::PAGE_SIZE]));
        let a = array::<u32>(&mut pages);
        let mut r = Dribble {
            bytes: vec![1, 2, 3, 4, 5, 6],
            at: 0,
            chunk: 4,
            fail: true,
        };
        assert!(a.read_from(2..10, &mut r).is_err());
        assert_eq!(a.get(2), u32::from_le_bytes([1, 2, 3, 4]));
        assert_eq!(a.get(3), u32::from_le_bytes([5, 6, 0, 0]));
    }

    #[test]
    fn write_to_gives_the_bytes_across_several_buffers() {
        let mut pages = Box::new(Pages([0; 20 * dsm_core::PAGE_SIZE]));
        let a = array::<u16>(&mut pages);
        let len = a.len();
        assert!(len * 2 > IO_BOUNCE_BYTES);
        for i in 0..len {
            a.set(i, (i * 7) as u16);
        }
        let mut out = Vec::new();
        a.write_to(1..len, &mut out).unwrap();
        let want: Vec<u8> = (1..len)
            .flat_map(|i| ((i * 7) as u16).to_le_bytes())
            .collect();
        assert!(out == want);
        // And back: a whole file in one call, through several buffers.
        let mut other = Box::new(Pages([0; 20 * dsm_core::PAGE_SIZE]));
        let b = array::<u16>(&mut other);
        assert_eq!(b.read_from(1..len, &mut &out[..]).unwrap(), out.len());
        assert!((1..len).all(|i| b.get(i) == (i * 7) as u16));
    }
}
