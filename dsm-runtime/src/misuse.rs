//! Misuses of the API that must not compile (doc tests only: `cargo test -p dsm-runtime --doc`).
//!
//! Each `compile_fail` test has a sibling that differs only by the misuse and compiles, so the
//! failure cannot come from anything else (a typo, a missing import, a changed signature). The
//! failing tests name the error they expect by its code where it has one (lints have none), but
//! stable rustdoc does not check the code (only nightly does): to see a test's errors, drop its
//! `compile_fail` and run it. Each gives one error, the one named.
//!
//! # A lock guard stays in the thread that took the lock
//!
//! The lock is held by that thread, and only that thread may release it: `LockGuard` is not
//! `Send`.
//!
//! ```compile_fail,E0277
//! fn misuse(dsm: &'static dsm_runtime::Dsm) {
//!     let guard = dsm.lock(3);
//!     std::thread::spawn(move || drop(guard));
//! }
//! ```
//!
//! Another thread takes the lock itself:
//!
//! ```
//! fn good(dsm: &'static dsm_runtime::Dsm) {
//!     let guard = dsm.lock(3);
//!     std::thread::spawn(move || drop(dsm.lock(3)));
//!     drop(guard);
//! }
//! ```
//!
//! # A lock guard must be bound
//!
//! `dsm.lock(3);` would take the lock and release it at once: `LockGuard` is `#[must_use]`.
//!
//! ```compile_fail
//! #![deny(unused_must_use)]
//! fn misuse(dsm: &dsm_runtime::Dsm) {
//!     dsm.lock(3);
//! }
//! ```
//!
//! ```
//! #![deny(unused_must_use)]
//! fn good(dsm: &dsm_runtime::Dsm) {
//!     let _guard = dsm.lock(3);
//! }
//! ```
//!
//! # A mutable slice of shared memory is `unsafe`
//!
//! `SharedArray` is `Copy` and `Sync`: two threads (or one, twice) could hold a `&mut [T]` of the
//! same elements, so `slice_mut` (and `slice`, whose plain reads may race with a writer) are
//! `unsafe`; `get` and `set` are the safe accessors. `slice_mut` gives a guard, which holds the
//! elements until it is dropped (at the end of its scope, or by `drop`).
//!
//! ```compile_fail,E0133
//! fn misuse(a: dsm_runtime::SharedArray<u64>) {
//!     let s = a.slice_mut(0..4);
//!     s[0] = 1;
//! }
//! ```
//!
//! ```
//! fn good(a: dsm_runtime::SharedArray<u64>) {
//!     // SAFETY: this thread alone accesses elements 0..4 while the slice lives.
//!     let mut s = unsafe { a.slice_mut(0..4) };
//!     s[0] = 1;
//!     drop(s);
//!     a.set(1, a.get(0));
//! }
//! ```
//!
//! ```compile_fail,E0133
//! fn misuse(a: dsm_runtime::SharedArray<u64>) -> u64 {
//!     let s = a.slice(0..4);
//!     s[0]
//! }
//! ```
//!
//! ```
//! fn good(a: dsm_runtime::SharedArray<u64>) -> u64 {
//!     // SAFETY: nothing writes elements 0..4 while the slice lives.
//!     let s = unsafe { a.slice(0..4) };
//!     s[0]
//! }
//! ```
//!
//! A mutable slice's guard stays on the thread that took it (the race checker's snapshot of it
//! is that thread's); the slice it holds may go to other threads.
//!
//! ```compile_fail,E0277
//! fn misuse(a: dsm_runtime::SharedArray<u64>) {
//!     // SAFETY: this thread's scope alone touches elements 0..4.
//!     let mut s = unsafe { a.slice_mut(0..4) };
//!     std::thread::scope(|t| {
//!         t.spawn(move || s[0] = 1);
//!     });
//! }
//! ```
//!
//! ```
//! fn good(a: dsm_runtime::SharedArray<u64>) {
//!     // SAFETY: this thread's scope alone touches elements 0..4.
//!     let mut s = unsafe { a.slice_mut(0..4) };
//!     let (x, y) = s.split_at_mut(2);
//!     std::thread::scope(|t| {
//!         t.spawn(move || x[0] = 1);
//!         t.spawn(move || y[0] = 2);
//!     });
//! }
//! ```
//!
//! # Registering memory for remote reads is `unsafe`
//!
//! `Transport::export` takes a raw address the device will read for as long as the transport
//! lives: the caller must promise it stays mapped.
//!
//! ```compile_fail,E0133
//! fn misuse(t: &mut dyn dsm_transport::Transport, addr: *mut u8) {
//!     let _ = t.export(0, addr, 4096);
//! }
//! ```
//!
//! ```
//! fn good(t: &mut dyn dsm_transport::Transport, addr: *mut u8) {
//!     // SAFETY: the caller of `good` keeps 4096 bytes at `addr` mapped while `t` lives.
//!     let _ = unsafe { t.export(0, addr, 4096) };
//! }
//! ```
