//! # dsm-core: the coherence protocol of the DSM
//!
//! This crate is the protocol of a page-based software distributed shared memory in the line of
//! JIAJIA: home-based lazy release consistency with multiple writers, as a pure, deterministic
//! state machine. It opens no socket, reads no clock, spawns no thread and calls no mprotect:
//!
//! - **Inputs** take the time as an argument: [`Node::handle_fault`], [`Node::handle_message`],
//!   [`Node::handle_timeout`], and the application's calls [`Node::acquire`], [`Node::release`],
//!   [`Node::barrier`], [`Node::wait`], [`Node::setcv`], [`Node::resetcv`], [`Node::waitcv`],
//!   [`Node::exit`], [`Node::alloc`], [`Node::send_letter`], [`Node::receive`].
//! - **Outputs** are polled: [`Node::poll_transmit`] (messages), [`Node::poll_effect`] (resume a
//!   blocked thread, report statistics, end the job), [`Node::poll_timeout`].
//! - **Memory** is reached through [`PageMemory`]: the runtime maps it onto its shared region,
//!   the tests onto vectors.
//!
//! The runtime joins this crate to a transport: bytes from the network go through
//! [`codec::decode_frame`] (which rejects any malformed input without panicking) into
//! [`Node::handle_message`]; what [`Node::poll_transmit`] yields goes through
//! [`codec::encode_frame`] to the transport.
//!
//! ## The memory model
//!
//! A write by node A becomes visible to node B when B *acquires* something A *released* after the
//! write: a lock A unlocked (and B then locked), a condition variable A set (and B waited on), or a
//! barrier both passed. Between such points, nodes work on their own copies. Data-race-free
//! programs (every conflicting pair of accesses ordered by those operations) see sequentially
//! consistent memory. The [`sim`] module checks exactly that on random programs.
//!
//! ## Map
//! - [`types`]: ids, sizes, time. [`memory`]: the `PageMemory` trait.
//! - [`node`]: the state machine's shell; [`pages`](crate::node) faults, fetches, the cache,
//!   twins and diffs; `sync`: locks, barriers, condition variables and their managers.
//! - [`mailbox`]: message passing beside shared memory (`jia_send`/`jia_recv`, collectives).
//! - [`msg`], [`codec`], [`diff`]: messages and their wire form.
//! - [`alloc`]: JIAJIA's allocation policies. [`stats`]: counters.
//! - [`sim`]: the deterministic cluster simulator.

#![forbid(unsafe_code)]

pub mod alloc;
mod atomics;
pub mod codec;
pub mod diff;
pub mod error;
mod hooks;
mod local;
pub mod mailbox;
mod manager;
pub mod memory;
pub mod msg;
pub mod node;
mod pages;
pub mod sim;
pub mod stats;
mod streams;
mod sync;
mod table;
pub mod types;

pub use alloc::{AllocError, AllocPolicy, Allocs};
pub use error::{JobError, ProtocolError, UsageError};
pub use memory::{PageMemory, VecMemory};
pub use msg::{Msg, MsgKind, PageDiff, PageWrites, RunData, WriteId, WriteNotice};
pub use node::{CoreConfig, Effect, Node, Prefetch, Transmit};
pub use stats::Stats;
pub use types::*;
