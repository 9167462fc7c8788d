//! Typed arrays in the shared region.

use std::marker::PhantomData;

/// Types that may live in shared memory: plain numbers, any bit pattern valid.
///
/// # Safety
/// Implementors must be `Copy`, have no padding and accept every bit pattern.
pub unsafe trait Shared: Copy + Send + Sync + 'static {}
macro_rules! shared {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive number: no padding, every bit pattern valid.
        unsafe impl Shared for $t {}
    )* };
}
shared!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);

/// An array in shared memory, at the same address on every node.
///
/// Loads and stores through it are plain memory accesses: they fault and fetch pages as needed,
/// and follow the DSM's memory model (writes travel at release, are seen after acquire).
pub struct SharedArray<T> {
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
// SAFETY: the array is shared memory by design; concurrent access is governed by the DSM's memory
// model and the program's synchronisation, exactly as for the shared region itself.
unsafe impl<T: Shared> Send for SharedArray<T> {}
// SAFETY: as above.
unsafe impl<T: Shared> Sync for SharedArray<T> {}

/// The private buffer [`SharedArray::read_from`] and [`SharedArray::write_to`] go through.
const IO_BOUNCE_BYTES: usize = 1 << 16;

impl<T: Shared> SharedArray<T> {
    pub(crate) fn new(ptr: *mut T, len: usize) -> SharedArray<T> {
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

    /// Element `i`. Panics (naming the caller's line) if `i` is out of the array.
    #[track_caller]
    pub fn get(&self, i: usize) -> T {
        assert!(
            i < self.len,
            "index {i} out of a shared array of {}",
            self.len
        );
        // SAFETY: i is in bounds of the allocation, which lives as long as the process.
        unsafe { self.ptr.add(i).read() }
    }

    /// Sets element `i`. Panics (naming the caller's line) if `i` is out of the array.
    #[track_caller]
    pub fn set(&self, i: usize, v: T) {
        assert!(
            i < self.len,
            "index {i} out of a shared array of {}",
            self.len
        );
        // SAFETY: i is in bounds of the allocation, which lives as long as the process.
        unsafe { self.ptr.add(i).write(v) }
    }

    /// Elements `range` as a slice.
    ///
    /// # Safety
    /// No thread of this node may write these elements while the slice lives, and no other node
    /// may write them without synchronisation ordering the write before this read (the program
    /// must be data-race free).
    #[track_caller]
    pub unsafe fn slice(&self, range: std::ops::Range<usize>) -> &[T] {
        self.check(&range);
        // SAFETY: in bounds (checked); aliasing is the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr.add(range.start), range.len()) }
    }

    /// Elements `range` as a mutable slice.
    ///
    /// # Safety
    /// No other thread of this node may access these elements while the slice lives, and the
    /// program must be data-race free across nodes.
    #[allow(clippy::mut_from_ref)]
    #[track_caller]
    pub unsafe fn slice_mut(&self, range: std::ops::Range<usize>) -> &mut [T] {
        self.check(&range);
        // SAFETY: in bounds (checked); exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
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

    /// Elements `range` (checked) as a byte offset from the first element and a byte count.
    #[track_caller]
    fn byte_range(&self, range: &std::ops::Range<usize>) -> (usize, usize) {
        self.check(range);
        let size = std::mem::size_of::<T>();
        (range.start * size, range.len() * size)
    }

    /// The first element's address.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Fills elements `range` with the bytes `r` gives (their in-memory form), up to the range's
    /// end or `r`'s; returns the bytes read. This is the safe way to read a file or a socket into
    /// shared memory: the kernel cannot fetch a page this node does not hold (a `read` straight
    /// into one fails with `EFAULT`), so the bytes go through a private buffer and are stored as
    /// the program's own writes. The caller must be the range's only writer until its next
    /// release, as for any write.
    pub fn read_from(
        &self,
        range: std::ops::Range<usize>,
        r: &mut impl std::io::Read,
    ) -> std::io::Result<usize> {
        let (start, total) = self.byte_range(&range);
        let mut buf = vec![0u8; total.min(IO_BOUNCE_BYTES)];
        let mut done = 0;
        while done < total {
            let want = (total - done).min(buf.len());
            let n = match r.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            // SAFETY: `start + done + n <= total` bytes past the range's start stay in the
            // array (checked above); T is plain data (Shared), so any bytes are a valid value.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    buf.as_ptr(),
                    self.ptr.cast::<u8>().add(start + done),
                    n,
                );
            }
            done += n;
        }
        Ok(done)
    }

    /// Writes elements `range` (their in-memory form) to `w`: the safe way to write shared
    /// memory to a file or a socket (see [`SharedArray::read_from`]).
    pub fn write_to(
        &self,
        range: std::ops::Range<usize>,
        w: &mut impl std::io::Write,
    ) -> std::io::Result<()> {
        let (start, total) = self.byte_range(&range);
        let mut buf = vec![0u8; total.min(IO_BOUNCE_BYTES)];
        let mut done = 0;
        while done < total {
            let n = (total - done).min(buf.len());
            // SAFETY: in bounds (checked above); the copy reads shared memory as the program's
            // own loads would (a page not held here faults and is fetched).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.cast::<u8>().add(start + done),
                    buf.as_mut_ptr(),
                    n,
                );
            }
            w.write_all(&buf[..n])?;
            done += n;
        }
        Ok(())
    }
}
