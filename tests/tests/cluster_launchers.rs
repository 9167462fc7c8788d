//! Real cluster launchers, not emulated: a one-machine Slurm cluster (munged, slurmctld, slurmd
//! from Debian's packages, started by `tests/slurm/cluster.sh`) runs DSM programs with `srun`,
//! `salloc` and `sbatch`; Open MPI's `mpirun` runs them too. Every result is exact, and the
//! rendezvous file is gone after each job. Needs root and the packages `slurm-wlm`, `munge` and
//! `openmpi-bin` (`./scripts/test` installs them as root); without them the test says what is
//! missing and passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use dsm_tests::{bin, run_with_deadline, text};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A fresh working directory (where the rendezvous file goes).
fn workdir_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dsm-launchers-{name}-{}", std::process::id()))
}

fn workdir(name: &str) -> PathBuf {
    let d = workdir_path(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("make a working directory");
    d
}

fn run_in(dir: &Path, program: &str, args: &[&str], slurm_conf: Option<&str>) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir);
    if let Some(c) = slurm_conf {
        cmd.env("SLURM_CONF", c);
    }
    run_with_deadline(cmd, Duration::from_secs(120))
}

fn assert_exact(out: &Output, want: &str, what: &str, dir: &Path) {
    let t = text(out);
    assert!(out.status.success(), "{what}: {t}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(want),
        "{what}: no `{want}`:\n{t}"
    );
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("read the working directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".dsm-rendezvous"))
        .collect();
    assert!(left.is_empty(), "{what}: rendezvous files left: {left:?}");
}

/// A job that cannot go on ended by its rank 0, which says what every node waits for.
fn assert_stuck(out: &Output, what: &str) {
    let t = text(out);
    assert!(!out.status.success(), "{what}: {t}");
    assert!(
        t.contains("the job cannot go on, every node waits for another"),
        "{what}: rank 0 names the wait:\n{t}"
    );
}

/// Open MPI's `mpirun -np N ARGS` in `dir`, as root (`--allow-run-as-root`) and with more
/// ranks than cores (`--oversubscribe`).
/// `outcomes deadlock`'s verdict names the main thread's join and the threads' barrier.
fn assert_threads_named(out: &Output, what: &str) {
    let t = text(out);
    assert!(
        t.contains("jia_barrier_threads(2) (thread ")
            && t.contains(
                "(pthread_join, a mutex, a condition variable, a semaphore) (main thread)"
            ),
        "{what}: the threads' waits not named:\n{t}"
    );
}

/// `outcomes exit 3`: the job fails, and node 1's status is named.
fn assert_exit_3_named(out: &Output, what: &str) {
    let t = text(out);
    assert!(!out.status.success(), "{what}: {t}");
    assert!(
        t.contains("node 1 ended with status 3 without leaving the job"),
        "{what}: node 1's status not named:\n{t}"
    );
}

/// A job of `racy write-write` under the checker: both nodes' writes named, status 66.
fn assert_races(out: &Output, what: &str) {
    let all = text(out);
    let line = include_str!("../src/bin/racy.rs")
        .lines()
        .position(|l| l.trim_end().ends_with("// race: write-write"))
        .expect("the marked line")
        + 1;
    assert!(
        out.status.code() == Some(66)
            && all.contains(&format!(
                "node 0 thread 0 write at tests/src/bin/racy.rs:{line}"
            ))
            && all.contains(&format!(
                "node 1 thread 0 write at tests/src/bin/racy.rs:{line}"
            )),
        "{what}: {all}"
    );
}

fn mpirun(dir: &Path, np: usize, args: &[&str]) -> Output {
    let np = np.to_string();
    let mut all = vec!["--allow-run-as-root", "--oversubscribe", "-np", &np];
    all.extend_from_slice(args);
    run_in(dir, "mpirun", &all, None)
}

struct Slurm {
    conf: String,
}

impl Slurm {
    fn start() -> Slurm {
        let script = repo().join("tests/slurm/cluster.sh");
        let out = run_with_deadline(
            {
                let mut c = Command::new(&script);
                c.arg("start");
                c
            },
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "start the Slurm cluster: {}",
            text(&out)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let conf = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export SLURM_CONF="))
            .expect("the cluster's SLURM_CONF")
            .to_string();
        Slurm { conf }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("tests/slurm/cluster.sh"))
            .arg("stop")
            .output();
    }
}

#[test]
fn srun_salloc_sbatch_and_mpirun_run_dsm_programs_exact() {
    let root = dsm_tests::is_root();
    let missing: Vec<&str> = [
        ("srun", "slurm-wlm"),
        ("slurmctld", "slurm-wlm"),
        ("munged", "munge"),
        ("mpirun", "openmpi-bin"),
    ]
    .iter()
    .filter(|(c, _)| !have(c))
    .map(|(_, p)| *p)
    .collect();
    // Never passes without running: scripts/test installs what it needs or skips it by name,
    // saying why.
    assert!(
        root && missing.is_empty(),
        "the real Slurm and Open MPI test needs root and {missing:?} (apt-get install slurm-wlm \
         munge openmpi-bin), or run ./scripts/test, which skips it by name without them"
    );
    let matmul = bin("matmul").display().to_string();
    let lu = bin("lu").display().to_string();

    let slurm = Slurm::start();
    let conf = Some(slurm.conf.as_str());

    let d = workdir("srun");
    let out = run_in(&d, "srun", &["-n", "4", &matmul, "256"], conf);
    assert_exact(&out, "matmul OK f64 n=256 nodes=4", "srun -n 4", &d);

    // Mismatched synchronisation: srun cannot see a node that waits forever; rank 0 watches.
    let probe = bin("probe").display().to_string();
    let d = workdir("srun-stuck");
    let out = run_in(
        &d,
        "srun",
        &["-n", "2", &probe, "stuck-barrier-vs-exit"],
        conf,
    );
    assert_stuck(&out, "srun -n 2");

    // Round 3's outcomes under srun: a deadlock inside a threaded node, named thread by thread;
    // a node's exit(3) without jia_exit, named with its status by every node.
    let outcomes = d.join("outcomes");
    dsm_tests::compile_jia_c(&repo().join("tests/c/outcomes.c"), &outcomes, &["-O2"]);
    let outcomes = outcomes.display().to_string();
    let out = run_in(&d, "srun", &["-n", "2", &outcomes, "deadlock"], conf);
    assert_stuck(&out, "srun -n 2 (threads)");
    assert_threads_named(&out, "srun -n 2");
    let out = run_in(&d, "srun", &["-n", "2", &outcomes, "exit", "3"], conf);
    assert_exit_3_named(&out, "srun -n 2");

    // The race checker, from .jiaconf: the report from rank 0, status 66 from srun.
    let racy = bin("racy").display().to_string();
    let d = workdir("srun-races");
    std::fs::write(d.join(".jiaconf"), "check_races = on\n").expect("write .jiaconf");
    let out = run_in(&d, "srun", &["-n", "2", &racy, "write-write"], conf);
    assert_races(&out, "srun -n 2");

    let d = workdir("salloc");
    let out = run_in(&d, "salloc", &["-n", "4", "srun", &lu, "128", "16"], conf);
    assert_exact(&out, "lu OK nodes=4 n=128", "salloc -n 4 srun", &d);

    let d = workdir("sbatch");
    let script = d.join("job.sh");
    let result = d.join("job.out");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n#SBATCH -n 3\n#SBATCH -o {}\nsrun {matmul} 192\n",
            result.display()
        ),
    )
    .expect("write the job script");
    let out = run_in(&d, "sbatch", &["--wait", script.to_str().unwrap()], conf);
    assert!(out.status.success(), "sbatch --wait: {}", text(&out));
    let printed = std::fs::read_to_string(&result).expect("the job's output file");
    assert!(
        printed.contains("matmul OK f64 n=192 nodes=3"),
        "sbatch job printed:\n{printed}"
    );
    let _ = std::fs::remove_file(&script);
    let _ = std::fs::remove_file(&result);
    assert_exact(&out, "Submitted batch job", "sbatch", &d);
    drop(slurm);

    let d = workdir("mpirun");
    let out = mpirun(&d, 4, &[&matmul, "256"]);
    assert_exact(&out, "matmul OK f64 n=256 nodes=4", "mpirun -np 4", &d);
    let d = workdir("mpirun-races");
    std::fs::write(d.join(".jiaconf"), "check_races = on\n").expect("write .jiaconf");
    let out = mpirun(&d, 2, &[&racy, "write-write"]);
    assert_races(&out, "mpirun -np 2");
    let d = workdir("mpirun-stuck");
    let out = mpirun(&d, 2, &[&probe, "stuck-exit-holding-lock"]);
    assert_stuck(&out, "mpirun -np 2");
    let out = mpirun(&d, 2, &[&outcomes, "deadlock"]);
    assert_stuck(&out, "mpirun -np 2 (threads)");
    assert_threads_named(&out, "mpirun -np 2");
    let out = mpirun(&d, 2, &[&outcomes, "exit", "3"]);
    assert_exit_3_named(&out, "mpirun -np 2");
    // Rank 0's watch tells a rank that spins on plain loads beside a waiting one to drop its
    // copies, as dsmrun does: the spin sees the write.
    let out = mpirun(&d, 2, &[&outcomes, "plain_spin"]);
    let said =
        String::from_utf8_lossy(&out.stderr).contains("dsm node 1: warning: this node ran for 1");
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("plain_spin OK")
            && said,
        "mpirun -np 2 plain_spin: {}",
        text(&out)
    );
    let _ = std::fs::remove_file(&outcomes);
    // A C program on jia.h, the same way.
    let exe = d.join("messages");
    dsm_tests::compile_jia_c(&repo().join("tests/c/messages.c"), &exe, &["-O2"]);
    let out = mpirun(&d, 3, &[exe.to_str().unwrap(), "10"]);
    let _ = std::fs::remove_file(&exe);
    assert_exact(&out, "c-messages OK rounds=10", "mpirun -np 3 (C)", &d);
    // Nothing left behind (a failed run keeps its directory, named in its message).
    for name in [
        "srun",
        "srun-stuck",
        "salloc",
        "sbatch",
        "mpirun",
        "mpirun-stuck",
        "srun-races",
        "mpirun-races",
    ] {
        let _ = std::fs::remove_dir_all(workdir_path(name));
    }
}
