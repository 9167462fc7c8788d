//! How a job comes together and is watched until it ends.
//!
//! | module | side | what it does |
//! |---|---|---|
//! | [`node`] | every node | reads its job from the environment (`DSM_RANK`...) and joins the rendezvous |
//! | [`rendezvous`] | the launcher | the TCP service nodes say hello to; the srun/mpirun rendezvous file |
//! | [`cluster`] | every node | rank, size and job id from srun or mpirun; rank 0 starts the rendezvous |
//! | [`launcher`] | dsmrun, `jia_init` | starts the nodes (children or over ssh), forwards their output, watches them, ends the job on a failure or a hang |
//!
//! The launcher's control channel to each node carries `DSM1` lines both ways (`LOST` to nodes;
//! `WAIT`, `RUN`, `BYE`, `BLAME` from them): its node side is `crate::service::control`.

pub mod cluster;
pub mod launcher;
pub mod node;
pub mod rendezvous;
mod watch;

pub use launcher::{JobFailure, JobSpec};
pub use node::JobEnv;
