//! A hostile network: every application exact over UDP with 5% loss, 1% duplication and
//! reordering (our own impairment, by seed), and with real kernel loss (nftables in network
//! namespaces).

use std::process::Command;
use std::time::Duration;

use dsm_tests::{bin, run_with_deadline, text};

const APPS: &[(&str, &[&str], &str)] = dsm_tests::SMALL_APPS;

fn run(app: &str, args: &[&str], impair: &str, nodes: usize) -> std::process::Output {
    let mut cmd = Command::new(bin("dsmrun"));
    cmd.args(["-n", &nodes.to_string(), "--stats"])
        .arg(bin(app))
        .args(args)
        .env("DSM_IMPAIR", impair);
    run_with_deadline(cmd, Duration::from_secs(180))
}

#[test]
fn every_app_is_exact_with_loss_duplication_and_reordering() {
    for (i, (app, args, want)) in APPS.iter().enumerate() {
        let impair = format!("drop=5,dup=1,reorder=10,delay_us=500,seed={}", 11 + i);
        let out = run(app, args, &impair, 3);
        let t = text(&out);
        assert!(out.status.success(), "{app}: {t}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(want),
            "{app}: {t}"
        );
        // The impairment really happened.
        let err = String::from_utf8_lossy(&out.stderr);
        let dropped = err
            .lines()
            .find(|l| l.contains("impair: dropped"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse::<u64>().ok());
        assert!(dropped.is_some(), "{app}: no impairment counters:\n{t}");
    }
}

#[test]
fn heavy_loss_is_survived_too() {
    let out = run(
        "matmul",
        &["128"],
        "drop=25,dup=5,reorder=30,delay_us=2000,seed=5",
        2,
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("matmul OK"),
        "{}",
        text(&out)
    );
}
