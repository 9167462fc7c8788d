//! # dsm-transport: moving whole messages between the nodes of a job
//!
//! Not built yet: the UDP, TCP and RDMA transports land with the runtime (see the issues).
