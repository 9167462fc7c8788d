//! The race checker (`dsmrun --check-races`): every racy program of `tests/src/bin/racy.rs` is
//! reported with its two marked lines and ends with status 66; the race-free ones and the apps
//! are not reported and end with 0.

use dsm_tests::{dsmrun, text};

const SOURCE: &str = include_str!("../src/bin/racy.rs");

/// The lines of `racy.rs` marked `// race: CASE`, as the report names them.
fn marked(case: &str) -> Vec<String> {
    SOURCE
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with(&format!("// race: {case}")))
        .map(|(i, _)| format!("tests/src/bin/racy.rs:{}", i + 1))
        .collect()
}

/// The racy cases: every `// race: CASE` in the source.
fn racy_cases() -> Vec<String> {
    let mut cases: Vec<String> = SOURCE
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter_map(|l| l.split("// race: ").nth(1))
        .map(|c| c.trim().to_string())
        .collect();
    cases.dedup();
    cases
}

#[test]
fn every_racy_program_is_reported_with_its_two_lines_and_ends_with_status_66() {
    let cases = racy_cases();
    assert!(cases.len() >= 8, "{cases:?}");
    for case in &cases {
        let out = dsmrun(2, &["--check-races"], "racy", &[case]);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(66), "{case}: {all}");
        let lines = marked(case);
        assert!(!lines.is_empty(), "{case}: no marked line");
        // One report names both marked lines (the same line twice where one line races with
        // itself on two nodes or threads).
        let stderr = String::from_utf8_lossy(&out.stderr);
        let reports: Vec<&str> = stderr.split("dsm: data race ").skip(1).collect();
        assert!(
            reports.iter().any(|r| {
                let named: Vec<&String> = lines.iter().filter(|l| r.contains(l.as_str())).collect();
                named.len() == lines.len()
                    && lines
                        .iter()
                        .all(|l| r.matches(l.as_str()).count() >= 3 - lines.len())
            }),
            "{case}: no report names {lines:?}: {all}"
        );
        assert!(
            stderr.contains("of the allocation at tests/src/bin/racy.rs:12"),
            "{case}: the allocation's line: {all}"
        );
    }
}

#[test]
fn race_free_programs_are_not_reported() {
    for case in ["free-lock", "free-cv", "free-false-sharing", "free-barrier"] {
        let out = dsmrun(2, &["--check-races"], "racy", &[case]);
        assert!(
            out.status.success() && text(&out).contains("check_races: no data race found"),
            "{case}: {}",
            text(&out)
        );
    }
}

/// The apps, race-free, on 1, 2 and 4 nodes: no report, status 0.
#[test]
fn the_apps_are_not_reported() {
    let apps: [(&str, &[&str]); 5] = [
        ("sor", &["64", "4"]),
        ("matmul", &["64"]),
        ("lu", &["64", "16"]),
        ("pi", &["100000"]),
        ("jacobi", &["64", "4"]),
    ];
    for nodes in [1, 2, 4] {
        for (app, args) in apps {
            let out = dsmrun(nodes, &["--check-races"], app, args);
            assert!(
                out.status.success() && text(&out).contains("check_races: no data race found"),
                "{app} on {nodes} nodes: {}",
                text(&out)
            );
        }
    }
}
