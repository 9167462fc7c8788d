//! A node's statistics: the protocol core's counters ([`Stats`]) and the runtime's own
//! ([`RuntimeStats`]), and the table node 0 prints at exit (one row per counter, one column per
//! node).

use std::fmt::Write as _;

use dsm_core::{MsgKind, Stats};

/// The runtime's own counters of one node (the core's are in [`Stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Datagrams or frames the transport sent again.
    pub retransmissions: u64,
    /// Frames dropped as foreign, forged or malformed (by the transport or the runtime).
    pub rejected_frames: u64,
    /// Faults whose own thread drove the node until the page came, without a hand-off to the
    /// service thread.
    pub faults_driven: u64,
    /// Of those, faults whose thread gave the wait back to the service thread (the reply was
    /// slow to come).
    pub drives_handed_back: u64,
}

impl RuntimeStats {
    /// The counters' names, in [`RuntimeStats::to_counters`] order.
    pub const NAMES: [&'static str; 4] = [
        "retransmissions",
        "rejected_frames",
        "faults_driven",
        "drives_handed_back",
    ];

    /// The counters as numbers (what travels to node 0 beside the core's).
    pub fn to_counters(&self) -> Vec<u64> {
        vec![
            self.retransmissions,
            self.rejected_frames,
            self.faults_driven,
            self.drives_handed_back,
        ]
    }

    /// The inverse of [`RuntimeStats::to_counters`]; missing numbers are 0 (a node of another
    /// build), extra ones ignored.
    pub fn from_counters(c: &[u64]) -> RuntimeStats {
        let at = |i: usize| c.get(i).copied().unwrap_or(0);
        RuntimeStats {
            retransmissions: at(0),
            rejected_frames: at(1),
            faults_driven: at(2),
            drives_handed_back: at(3),
        }
    }
}

/// One node's statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// The protocol's counters.
    pub core: Stats,
    /// The runtime's counters.
    pub runtime: RuntimeStats,
}

/// Renders the table (counters that are zero on every node are left out).
pub fn render(nodes: &[NodeStats], extra: &[(String, u64)]) -> String {
    let mut rows: Vec<(String, Vec<u64>)> = Vec::new();
    let scalars: Vec<Vec<u64>> = nodes.iter().map(|n| n.core.scalars()).collect();
    for (i, name) in Stats::SCALAR_NAMES.iter().enumerate() {
        rows.push(((*name).to_string(), scalars.iter().map(|s| s[i]).collect()));
    }
    let runtime: Vec<Vec<u64>> = nodes.iter().map(|n| n.runtime.to_counters()).collect();
    for (i, name) in RuntimeStats::NAMES.iter().enumerate() {
        rows.push(((*name).to_string(), runtime.iter().map(|s| s[i]).collect()));
    }
    let nodes: Vec<&Stats> = nodes.iter().map(|n| &n.core).collect();
    let nodes = nodes.as_slice();
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
        nodes.iter().map(|s| s.total_msgs_sent()).collect(),
    ));
    rows.push((
        "bytes sent total".into(),
        nodes.iter().map(|s| s.total_bytes_sent()).collect(),
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

/// One node's counters as a JSON object: `{"node": 0, "getp_sent": 3, ..., "retransmissions": 0,
/// ..., "msgs_sent": {"GETP": 3, ...}, "bytes_sent": {...}, ...}` (every counter, zero or not).
pub fn node_json(node: usize, n: &NodeStats) -> serde_json::Value {
    let mut o = serde_json::Map::new();
    o.insert("node".into(), node.into());
    for (name, v) in Stats::SCALAR_NAMES.iter().zip(n.core.scalars()) {
        o.insert((*name).into(), v.into());
    }
    for (name, v) in RuntimeStats::NAMES.iter().zip(n.runtime.to_counters()) {
        o.insert((*name).into(), v.into());
    }
    for (label, arr) in [
        ("msgs_sent", &n.core.msgs_sent),
        ("bytes_sent", &n.core.bytes_sent),
        ("msgs_received", &n.core.msgs_received),
        ("bytes_received", &n.core.bytes_received),
    ] {
        let kinds: serde_json::Map<String, serde_json::Value> = MsgKind::ALL
            .iter()
            .map(|k| (k.jiajia_name().to_string(), arr[k.index()].into()))
            .collect();
        o.insert(label.into(), kinds.into());
    }
    o.into()
}

/// Every node's counters: `{"nodes": [node_json(0), node_json(1), ...]}`.
pub fn to_json(nodes: &[NodeStats]) -> String {
    let nodes: Vec<serde_json::Value> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| node_json(i, n))
        .collect();
    let mut text =
        serde_json::to_string_pretty(&serde_json::json!({ "nodes": nodes })).unwrap_or_default();
    text.push('\n');
    text
}
