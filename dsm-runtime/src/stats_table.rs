//! The statistics table node 0 prints at exit: one row per counter, one column per node.

use std::fmt::Write as _;

use dsm_core::{MsgKind, Stats};

/// Renders the table (counters that are zero on every node are left out).
pub fn render(nodes: &[Stats], extra: &[(String, u64)]) -> String {
    let mut rows: Vec<(String, Vec<u64>)> = Vec::new();
    let scalars: Vec<Vec<u64>> = nodes.iter().map(Stats::scalars).collect();
    for (i, name) in Stats::SCALAR_NAMES.iter().enumerate() {
        rows.push(((*name).to_string(), scalars.iter().map(|s| s[i]).collect()));
    }
    for k in MsgKind::ALL {
        let name = k.jiajia_name();
        rows.push((
            format!("msgs sent {name}"),
            nodes.iter().map(|s| s.msgs_sent[k.index()]).collect(),
        ));
        rows.push((
            format!("bytes sent {name}"),
            nodes.iter().map(|s| s.bytes_sent[k.index()]).collect(),
        ));
        rows.push((
            format!("msgs received {name}"),
            nodes.iter().map(|s| s.msgs_received[k.index()]).collect(),
        ));
        rows.push((
            format!("bytes received {name}"),
            nodes.iter().map(|s| s.bytes_received[k.index()]).collect(),
        ));
    }
    rows.push((
        "msgs sent total".into(),
        nodes.iter().map(Stats::total_msgs_sent).collect(),
    ));
    rows.push((
        "bytes sent total".into(),
        nodes.iter().map(Stats::total_bytes_sent).collect(),
    ));
    let mut out = String::new();
    let _ = write!(out, "{:<28}", "statistics");
    for n in 0..nodes.len() {
        let _ = write!(out, " {:>12}", format!("node {n}"));
    }
    out.push('\n');
    for (name, vals) in rows.into_iter().filter(|(_, v)| v.iter().any(|&x| x != 0)) {
        let _ = write!(out, "{name:<28}");
        for v in vals {
            let _ = write!(out, " {v:>12}");
        }
        out.push('\n');
    }
    for (name, v) in extra {
        let _ = writeln!(out, "{name:<28} {v:>12}");
    }
    out
}
