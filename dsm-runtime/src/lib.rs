//! # dsm-runtime: one DSM node as an OS process
//!
//! Not built yet: memory mapping, the fault handler, the service thread and the launcher land with
//! the runtime issue.
