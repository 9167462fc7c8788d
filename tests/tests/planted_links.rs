//! Files at paths the user names (`--stats-json FILE`, `--output-filename DIR`,
//! `DSM_FAULT_TRACE=DIR`) are made only as the user's own: a symbolic link or a directory
//! another user planted in a shared sticky directory (as `/tmp` is) does not make root's job
//! truncate or overwrite a file elsewhere. Run as root, with `nobody` as the other user
//! (`./scripts/test` skips this file by name when not root; run without root it fails saying so).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use dsm_tests::{bin, run_with_deadline, text};

fn as_nobody(args: &[&str]) {
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .args(args)
        .output()
        .expect("runuser");
    assert!(out.status.success(), "as nobody: {args:?}: {out:?}");
}

/// A shared sticky directory (mode 1777, as /tmp), and a victim file of root's outside it.
fn setup(name: &str) -> (PathBuf, PathBuf) {
    assert!(
        dsm_tests::is_root(),
        "needs root (to be the victim, and to act as nobody): run ./scripts/test, which skips it \
         by name otherwise"
    );
    let base = std::env::temp_dir().join(format!("dsm-planted-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let shared = base.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = base.join("victim");
    std::fs::write(&victim, "root's secret\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    (shared, victim)
}

fn unchanged(victim: &Path) {
    assert_eq!(
        std::fs::read_to_string(victim).unwrap(),
        "root's secret\n",
        "the victim file was written"
    );
}

#[test]
fn stats_json_through_a_planted_link_is_refused() {
    let (shared, victim) = setup("stats");
    let link = shared.join("stats.json");
    as_nobody(&["ln", "-s", victim.to_str().unwrap(), link.to_str().unwrap()]);
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "--stats-json", link.to_str().unwrap()])
        .arg(bin("matmul"))
        .arg("64");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--stats-json"),
        "{}",
        text(&out)
    );
    unchanged(&victim);
    let _ = std::fs::remove_dir_all(shared.parent().unwrap());
}

#[test]
fn output_into_a_directory_another_user_planted_is_refused() {
    let (shared, victim) = setup("output");
    // nobody makes the output directory first, with `1` pointing into root's directory.
    let out_dir = shared.join("out");
    let target = victim.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&target).unwrap();
    as_nobody(&["mkdir", out_dir.to_str().unwrap()]);
    as_nobody(&[
        "ln",
        "-s",
        target.to_str().unwrap(),
        out_dir.join("1").to_str().unwrap(),
    ]);
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "--output-filename", out_dir.to_str().unwrap()])
        .arg(bin("matmul"))
        .arg("64");
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused"),
        "{t}"
    );
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing written through the link: {t}"
    );
    let _ = std::fs::remove_dir_all(shared.parent().unwrap());
}

#[test]
fn a_fault_trace_through_a_planted_link_is_refused() {
    let (shared, victim) = setup("trace");
    let dir = shared.join("trace");
    as_nobody(&["mkdir", dir.to_str().unwrap()]);
    as_nobody(&["chmod", "777", dir.to_str().unwrap()]);
    for node in 0..2 {
        as_nobody(&[
            "ln",
            "-s",
            victim.to_str().unwrap(),
            dir.join(format!("fault-trace.{node}.tsv"))
                .to_str()
                .unwrap(),
        ]);
    }
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", "2", "--set", "prefetch=off"])
        .arg(bin("faultlat"))
        .arg("50")
        .env("DSM_FAULT_TRACE", &dir);
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let t = text(&out);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot write the fault trace"),
        "{t}"
    );
    unchanged(&victim);
    let _ = std::fs::remove_dir_all(shared.parent().unwrap());
}
