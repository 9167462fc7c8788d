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
    /// The most application threads that used the DSM (faulted or called) at once on this node.
    pub threads: u64,
    /// Arrivals in `jia_barrier_threads` that waited for other threads of their node (every one
    /// but the last of each round): waits that cost no message.
    pub thread_barrier_waits: u64,
    /// The service thread's sleeps for messages.
    pub service_sleeps: u64,
    /// Of them, sleeps in the realtime class (`service_priority`): 0 where the class is refused
    /// or not asked for.
    pub service_sleeps_realtime: u64,
    /// Requests of two pages or more whose runs land in large folios (`huge_pages`).
    pub large_folio_requests: u64,
    /// Pages this node granted in place to nodes of its host, which read them in its memory
    /// (`same_host = memory`).
    pub pages_granted_in_place: u64,
    /// Pages this node read in place, in the memory of their home on its host.
    pub pages_read_in_place: u64,
    /// Of them, pages shown from their home's memory, mapped there, not copied
    /// (`same_host = map`).
    pub pages_shown_in_place: u64,
    /// The transport's own counters (datagrams, acknowledgements, connections...), by name.
    pub transport: Vec<(String, u64)>,
}

impl RuntimeStats {
    /// How many counters [`RuntimeStats::NAMES`] names.
    pub const COUNT: usize = 12;

    /// The counters' names, in [`RuntimeStats::to_counters`] order.
    pub const NAMES: [&'static str; Self::COUNT] = [
        "retransmissions",
        "rejected_frames",
        "faults_driven",
        "drives_handed_back",
        "threads",
        "thread_barrier_waits",
        "service_sleeps",
        "service_sleeps_realtime",
        "large_folio_requests",
        "pages_granted_in_place",
        "pages_read_in_place",
        "pages_shown_in_place",
    ];

    /// The counters named in [`RuntimeStats::NAMES`], in that order.
    pub fn named(&self) -> [u64; Self::COUNT] {
        [
            self.retransmissions,
            self.rejected_frames,
            self.faults_driven,
            self.drives_handed_back,
            self.threads,
            self.thread_barrier_waits,
            self.service_sleeps,
            self.service_sleeps_realtime,
            self.large_folio_requests,
            self.pages_granted_in_place,
            self.pages_read_in_place,
            self.pages_shown_in_place,
        ]
    }

    /// The counters as numbers (what travels to node 0 beside the core's): the named ones, then
    /// the transport's values.
    pub fn to_counters(&self) -> Vec<u64> {
        let mut v = self.named().to_vec();
        v.extend(self.transport.iter().map(|(_, x)| *x));
        v
    }

    /// The inverse of [`RuntimeStats::to_counters`], with the transport's counter names (every
    /// node of a job runs the same transport); missing numbers are 0, extra ones ignored.
    pub fn from_counters(c: &[u64], transport_names: &[String]) -> RuntimeStats {
        let at = |i: usize| c.get(i).copied().unwrap_or(0);
        RuntimeStats {
            retransmissions: at(0),
            rejected_frames: at(1),
            faults_driven: at(2),
            drives_handed_back: at(3),
            threads: at(4),
            thread_barrier_waits: at(5),
            service_sleeps: at(6),
            service_sleeps_realtime: at(7),
            large_folio_requests: at(8),
            pages_granted_in_place: at(9),
            pages_read_in_place: at(10),
            pages_shown_in_place: at(11),
            transport: transport_names
                .iter()
                .enumerate()
                .map(|(i, name)| (name.clone(), at(RuntimeStats::NAMES.len() + i)))
                .collect(),
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

/// The legend printed under the table: a row label, the rows it stands for (a name ending in
/// `*` stands for every row it begins), and what they count. A line is printed when one of its
/// rows is.
const LEGEND: &[(&str, &[&str], &str)] = &[
    (
        "read/write_faults_*",
        &[
            "read_faults_local",
            "read_faults_remote",
            "write_faults_local",
            "write_faults_remote",
        ],
        "_local: resolved on this node; _remote: the page fetched from its home",
    ),
    (
        "faults_joined",
        &["faults_joined"],
        "faults that joined a fetch already in flight for their page",
    ),
    (
        "*_wait_ns",
        &["fault_wait_ns", "lock_wait_ns", "barrier_wait_ns"],
        "ns waited: remote faults for their pages, locks for grants, barriers",
    ),
    (
        "getp_sent, pages_*",
        &[
            "getp_sent",
            "pages_fetched",
            "pages_served",
            "pages_read_one_sided",
        ],
        "page requests; pages fetched on demand, served as home, read by RDMA",
    ),
    (
        "pages_lent",
        &["pages_lent"],
        "of the pages served, those the transport sent from memory, no copy made first",
    ),
    (
        "atomic*",
        &[
            "atomics_remote",
            "atomics_local",
            "atomics_served",
            "atomics_combined",
            "atomic_wait_ns",
        ],
        "atomic operations made here on words homed elsewhere / here (relaxed ones a thread applied with the CPU's atomics not counted), applied here as home; fetch-adds that waited for another of this node's on the same word and went combined in one operation; ns they waited",
    ),
    (
        "*forward*",
        &["requests_forwarded", "pages_forwarded", "forwards_refused"],
        "requests for pages homed here answered by a node holding them; pages sent from copies here on their home's behalf; forwards refused here (copies gone)",
    ),
    (
        "prefetch_*",
        &["prefetch_requested", "prefetch_used", "prefetch_unused"],
        "pages asked for ahead of a fault; of them, touched / dropped untouched (a program's start_stats or jia_startstat zeroes them: pages asked before it count only when touched or dropped)",
    ),
    (
        "homes_moved_here, home_moves_vetoed",
        &["homes_moved_here", "home_moves_vetoed"],
        "pages whose home moved here at a barrier; moves vetoed here (another thread wrote the page during it)",
    ),
    (
        "twins, diff*",
        &["twins", "diffs_sent", "diff_bytes_sent", "diffs_applied"],
        "twins made; diffs sent to homes (diff_bytes_sent: bytes), applied here",
    ),
    (
        "home_writes_found_at_settle",
        &["home_writes_found_at_settle"],
        "home pages written between being served and being tracked",
    ),
    (
        "invalidations .. refetched",
        &[
            "invalidations",
            "evictions",
            "dirty_evictions",
            "refetched_after_eviction",
        ],
        "copies invalidated by notices; evicted (dirty ones; faulted on again)",
    ),
    (
        "lock_acquires .. cv_waits",
        &[
            "lock_acquires",
            "lock_local_handoffs",
            "barriers",
            "waits",
            "cv_waits",
        ],
        "locks acquired (of them handed over by a thread of the node), barriers passed, jia_wait \
         calls, waitcv calls",
    ),
    ("protect_calls", &["protect_calls"], "mprotect calls"),
    (
        "retransmissions, rejected_*",
        &["retransmissions", "rejected_frames"],
        "datagrams or frames resent; frames dropped: foreign, forged, malformed",
    ),
    (
        "faults_driven, drives_*",
        &["faults_driven", "drives_handed_back"],
        "faults their own thread drove; of them, handed to the service thread",
    ),
    (
        "threads, thread_*",
        &["threads", "thread_barrier_waits"],
        "most application threads using the DSM at once; jia_barrier_threads arrivals that waited",
    ),
    (
        "service_sleeps*",
        &["service_sleeps", "service_sleeps_realtime"],
        "the service thread's sleeps for messages; of them, in the realtime class \
         (service_priority)",
    ),
    (
        "large_folio_requests",
        &["large_folio_requests"],
        "requests of two pages or more whose runs land in large folios of the node's own tmpfs \
         (huge_pages = auto); 0 where the node uses a memfd",
    ),
    (
        "pages_*_in_place",
        &[
            "pages_granted_in_place",
            "pages_read_in_place",
            "pages_shown_in_place",
        ],
        "pages granted to nodes of this host, which read them in this node's memory; pages \
         read so in their home's memory (same_host = memory or map); of them, pages shown \
         from it, mapped, not copied (same_host = map)",
    ),
    (
        "msgs/bytes sent/received",
        &["msgs *", "bytes *"],
        "messages and their bytes (whole frames) per message kind, and in all",
    ),
    (
        "udp .., tcp .., rdma-*",
        &["udp *", "tcp *", "rdma-rc *", "rdma-ud *", "loopback *"],
        "the transport's own counters (datagrams, frames, acknowledgements, resends)",
    ),
];

/// Whether the legend's `names` stand for row `row`.
fn legend_covers(names: &[&str], row: &str) -> bool {
    names.iter().any(|n| match n.strip_suffix('*') {
        Some(prefix) => row.starts_with(prefix),
        None => *n == row,
    })
}

/// Renders the table (counters that are zero on every node are left out), then a legend of the
/// rows it printed: what each counts, and in which unit. `transport`: the job's transport's
/// name, which heads the rows of its own counters.
pub fn render(nodes: &[NodeStats], transport: &str) -> String {
    let mut rows: Vec<(String, Vec<u64>)> = Vec::new();
    let scalars: Vec<Vec<u64>> = nodes.iter().map(|n| n.core.scalars()).collect();
    for (i, name) in Stats::SCALAR_NAMES.iter().enumerate() {
        rows.push(((*name).to_string(), scalars.iter().map(|s| s[i]).collect()));
    }
    let runtime: Vec<[u64; RuntimeStats::COUNT]> =
        nodes.iter().map(|n| n.runtime.named()).collect();
    for (i, name) in RuntimeStats::NAMES.iter().enumerate() {
        rows.push(((*name).to_string(), runtime.iter().map(|s| s[i]).collect()));
    }
    // The transport's counters, by name (every node runs the same transport; a node whose
    // report lacks one shows 0).
    let mut counters: Vec<&str> = Vec::new();
    for (name, _) in nodes.iter().flat_map(|n| &n.runtime.transport) {
        if !counters.contains(&name.as_str()) {
            counters.push(name);
        }
    }
    let transport_rows: Vec<(String, Vec<u64>)> = counters
        .iter()
        .map(|&c| {
            let of = |n: &NodeStats| {
                let found = n.runtime.transport.iter().find(|(k, _)| k == c);
                found.map_or(0, |&(_, v)| v)
            };
            (format!("{transport} {c}"), nodes.iter().map(of).collect())
        })
        .collect();
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
    rows.extend(transport_rows);
    rows.retain(|(_, v)| v.iter().any(|&x| x != 0));
    let width = rows.iter().map(|(name, _)| name.len()).fold(28, usize::max);
    let mut out = String::new();
    let _ = write!(out, "{:<width$}", "statistics");
    for n in 0..nodes.len() {
        let _ = write!(out, " {:>12}", format!("node {n}"));
    }
    out.push('\n');
    let mut printed: Vec<String> = Vec::new();
    for (name, vals) in rows {
        let _ = write!(out, "{name:<width$}");
        for v in vals {
            let _ = write!(out, " {v:>12}");
        }
        out.push('\n');
        printed.push(name);
    }
    out.push_str(
        "legend: per node since the start or jia_startstat; _ns: nanoseconds; bytes: bytes; else counts\n",
    );
    for (label, names, text) in LEGEND {
        if printed.iter().any(|row| legend_covers(names, row)) {
            let _ = writeln!(out, "  {label:<27} {text}");
        }
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
    for (name, v) in RuntimeStats::NAMES.iter().zip(n.runtime.named()) {
        o.insert((*name).into(), v.into());
    }
    let transport: serde_json::Map<String, serde_json::Value> = n
        .runtime
        .transport
        .iter()
        .map(|(k, v)| (k.clone(), (*v).into()))
        .collect();
    o.insert("transport".into(), transport.into());
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

/// What a statistics file says of the job besides its counters.
#[derive(Clone, Debug)]
pub struct JobMeta {
    /// Who started the job: `dsmrun`, `srun`, `mpirun`, `jia_init`...
    pub launcher: String,
    /// The program, as started.
    pub program: String,
    /// Its arguments.
    pub arguments: Vec<String>,
    /// Nodes in the job.
    pub nodes: usize,
    /// `comm_type`.
    pub transport: String,
    /// Every setting, `key -> value` (as `.jiaconf` spells them).
    pub settings: Vec<(String, String)>,
    /// When the job started.
    pub start: std::time::SystemTime,
    /// From start to end.
    pub wall: std::time::Duration,
    /// The launcher's exit status (`None` where nobody knows it: a node writes the file).
    pub exit_status: Option<i32>,
}

impl Default for JobMeta {
    fn default() -> Self {
        JobMeta {
            launcher: String::new(),
            program: String::new(),
            arguments: Vec::new(),
            nodes: 0,
            transport: String::new(),
            settings: Vec::new(),
            start: std::time::UNIX_EPOCH,
            wall: std::time::Duration::ZERO,
            exit_status: None,
        }
    }
}

/// The statistics file: `{"job": {metadata}, "nodes": [node_json(0), ...]}`.
pub fn job_json(meta: &JobMeta, nodes: serde_json::Value) -> String {
    let settings: serde_json::Map<String, serde_json::Value> = meta
        .settings
        .iter()
        .map(|(k, v)| (k.clone(), v.clone().into()))
        .collect();
    let job = serde_json::json!({
        "launcher": meta.launcher,
        "program": meta.program,
        "arguments": meta.arguments,
        "nodes": meta.nodes,
        "transport": meta.transport,
        "settings": settings,
        "start_time": rfc3339(meta.start),
        "wall_time_s": meta.wall.as_secs_f64(),
        "exit_status": meta.exit_status,
    });
    let mut text = serde_json::to_string_pretty(&serde_json::json!({ "job": job, "nodes": nodes }))
        .unwrap_or_default();
    text.push('\n');
    text
}

/// Every node's counters, as a JSON array of [`node_json`].
pub fn nodes_json(nodes: &[NodeStats]) -> serde_json::Value {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| node_json(i, n))
        .collect::<Vec<_>>()
        .into()
}

/// `t` as an RFC 3339 UTC time, to the second (`2026-11-24T12:00:00Z`).
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_in_rfc3339() {
        let at = |s: u64| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_795_521_600)), "2026-11-24T12:00:00Z");
    }

    #[test]
    fn the_legend_explains_every_row_the_table_can_print() {
        let mut rows: Vec<String> = Stats::SCALAR_NAMES
            .iter()
            .chain(RuntimeStats::NAMES.iter())
            .map(|n| n.to_string())
            .collect();
        for k in MsgKind::ALL {
            let name = k.jiajia_name();
            for what in ["msgs sent", "bytes sent", "msgs received", "bytes received"] {
                rows.push(format!("{what} {name}"));
            }
        }
        rows.extend(["msgs sent total".into(), "bytes sent total".into()]);
        rows.push("udp datagrams sent".into());
        for row in &rows {
            let lines = LEGEND
                .iter()
                .filter(|(_, names, _)| legend_covers(names, row));
            assert_eq!(lines.count(), 1, "{row}: one legend line");
        }
    }

    #[test]
    fn the_table_ends_with_the_legend_of_the_rows_it_printed() {
        let mut a = NodeStats::default();
        a.core.getp_sent = 3;
        a.core.lock_wait_ns = 1500;
        a.runtime.faults_driven = 2;
        let table = render(&[a, NodeStats::default()], "udp");
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("statistics") && lines[0].ends_with("node 1"));
        assert!(lines.iter().any(|l| l.starts_with("getp_sent ")));
        let legend = lines.iter().position(|l| l.starts_with("legend:")).unwrap();
        let explained: Vec<&str> = lines[legend + 1..]
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(explained, ["*_wait_ns", "getp_sent,", "faults_driven,"]);
        assert!(table.lines().all(|l| l.len() <= 100), "{table}");
    }

    #[test]
    fn each_nodes_transport_counters_have_its_column_and_long_names_keep_the_columns() {
        let mut a = NodeStats::default();
        a.runtime.transport = vec![
            ("datagrams sent".into(), 5),
            ("retransmissions from selective acks".into(), 0),
        ];
        let mut b = NodeStats::default();
        b.runtime.transport = vec![
            ("datagrams sent".into(), 7),
            ("retransmissions from selective acks".into(), 2),
        ];
        let table = render(&[a, b], "udp");
        let row = |name: &str| {
            let line = table.lines().find(|l| l.starts_with(name)).expect(name);
            let values: Vec<&str> = line[name.len()..].split_whitespace().collect();
            (line.len(), values)
        };
        let (len, values) = row("udp datagrams sent");
        assert_eq!(values, ["5", "7"]);
        let (long_len, values) = row("udp retransmissions from selective acks");
        assert_eq!(values, ["0", "2"]);
        assert_eq!(len, long_len, "{table}");
        assert_eq!(table.lines().next().unwrap().len(), len, "{table}");
        assert!(table.contains("  udp .., tcp .., rdma-*"), "{table}");
    }

    #[test]
    fn runtime_counters_round_trip_with_the_transports_names() {
        let r = RuntimeStats {
            retransmissions: 1,
            rejected_frames: 2,
            faults_driven: 3,
            drives_handed_back: 4,
            threads: 2,
            thread_barrier_waits: 7,
            service_sleeps: 9,
            service_sleeps_realtime: 8,
            large_folio_requests: 10,
            pages_granted_in_place: 11,
            pages_read_in_place: 12,
            pages_shown_in_place: 13,
            transport: vec![("datagrams sent".into(), 5), ("pure acks".into(), 6)],
        };
        let names: Vec<String> = r.transport.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(RuntimeStats::from_counters(&r.to_counters(), &names), r);
        let short = RuntimeStats::from_counters(&[1], &names);
        assert_eq!((short.retransmissions, short.transport[1].1), (1, 0));
    }
}
