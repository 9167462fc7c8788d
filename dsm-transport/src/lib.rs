//! # dsm-transport: moving whole messages between the nodes of a job
//!
//! The contract every transport keeps: whole messages (any size up to the limit), delivered
//! reliably and in order per peer, between the nodes of one job; a peer that stops answering is
//! reported, never waited for forever.
//!
//! Transports do not own a thread here: the runtime's service thread drives them (it waits on
//! their file descriptors together with its fault requests, spins briefly, then blocks), so a
//! page request and its reply cross no extra thread hand-off.
//!
//! - [`reliable`]: the sans-IO sequencing, acknowledgement, retransmission and fragmentation
//!   machine, shared by UDP and (later) RDMA UD.
//! - [`udp`]: one UDP socket per node driving [`reliable`].
//! - [`impair`]: drops, duplicates and reorders datagrams by seed, for loss tests.

pub mod impair;
pub mod reliable;
pub mod udp;
