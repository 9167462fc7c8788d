//! How a job comes together and is watched until it ends.
//!
//! | module | side | what it does |
//! |---|---|---|
//! | [`job_env`] | every node | the job from the environment: dsmrun's (`node`) or srun's and mpirun's (`cluster`) |
//! | [`node`] | every node | reads the job dsmrun gave it (`DSM_RANK`...) and joins the rendezvous |
//! | [`rendezvous`] | the launcher | the TCP service nodes say hello to; the srun/mpirun rendezvous file, named by the cluster's job id |
//! | [`cluster`] | every node | rank and size from srun or mpirun; rank 0 starts the rendezvous |
//! | [`launcher`] | dsmrun, `jia_init` | starts the nodes (children or over ssh), forwards their output, watches them, ends the job on a failure or a hang |
//!
//! Every line the launcher, the rendezvous and the nodes say to each other is a
//! `wire::Line`, encoded and parsed in one place. The launcher's control channel to each node
//! carries them both ways (`LOST`, `STUCK` to nodes; `WAIT`, `RUN`, `BYE`, `BLAME`, `STATS`
//! from them): its node side is `crate::service::control`.

pub mod cluster;
pub mod launcher;
pub mod node;
pub mod rendezvous;
pub(crate) mod watch;
pub(crate) mod wire;

pub use launcher::{JobFailure, JobSpec};
pub use node::JobEnv;

/// Reads the job from the environment: the one dsmrun started (`DSM_RANK`...), or one srun or
/// mpirun started ([`cluster`]); `Ok(None)` when the process was not launched as a node.
pub fn job_env() -> Result<Option<JobEnv>, String> {
    if std::env::var_os("DSM_RANK").is_none() {
        return cluster::cluster_job_env();
    }
    node::launched_env()
}
