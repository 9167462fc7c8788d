//! fault-trace: where a remote page fault's time goes, from the stamps nodes write with
//! `DSM_FAULT_TRACE=DIR` (see the runtime's `trace` module).
//!
//! ```sh
//! mkdir -p /tmp/ft && DSM_FAULT_TRACE=/tmp/ft target/release/dsmrun -n 2 --set prefetch=off \
//!     target/release/faultlat 2000 && target/release/fault-trace /tmp/ft
//! ```
//!
//! Joins each requester's fault with the home's stamps for the same page (kept only where the
//! home's stamps fall inside the fault: with several requesters of one page the home stamps only
//! the first) and
//! prints the median, 10th and 90th percentile of each step, in microseconds, for read faults and
//! for write faults (whose install includes the twin). Where the trace has them (UDP), a second
//! table splits the steps around the system calls: each `sendto`, the `recvfrom` that brought
//! the GETP or the grant, the `mprotect` that opens the page.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use dsm_runtime::fault_trace::{STEP_NAMES, Step};

/// The columns this reads, by the runtime's names for them in the file's header (a row is kept
/// in the runtime's step order, whatever the file's).
const COLUMNS: usize = STEP_NAMES.len();
/// Columns from this one on (the finer steps, UDP only) may be missing (older traces): they read
/// as 0.
const FIRST_OPTIONAL: usize = Step::SendStart as usize;
const FAULT: usize = Step::Fault as usize;
const GETP_SENT: usize = Step::GetpSent as usize;
const GETP_IN: usize = Step::GetpIn as usize;
const GRANT_SENT: usize = Step::GrantSent as usize;
const GRANT_IN: usize = Step::GrantIn as usize;
const INSTALLED: usize = Step::Installed as usize;
const RESUMED: usize = Step::Resumed as usize;
const WRITE: usize = Step::Write as usize;
const SEND_START: usize = Step::SendStart as usize;
const READ: usize = Step::Read as usize;
const PROTECT_START: usize = Step::ProtectStart as usize;
const PROTECT_END: usize = Step::ProtectEnd as usize;
const PREPARED: usize = Step::Prepared as usize;

type Rows = HashMap<u64, [u64; COLUMNS]>;

fn read_node(path: &Path) -> Result<Rows, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    // Where each of the runtime's columns is in the file (None: an optional one, absent).
    let mut at = [None; COLUMNS];
    for (i, (slot, name)) in at.iter_mut().zip(STEP_NAMES).enumerate() {
        *slot = header.iter().position(|h| *h == name);
        if slot.is_none() && i < FIRST_OPTIONAL {
            return Err(format!(
                "{}:1: no `{name}` column in the header `{}` (a trace of another version?)",
                path.display(),
                header.join(" ")
            ));
        }
    }
    let mut rows = Rows::new();
    for (i, line) in lines.enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        let bad = || {
            format!(
                "{}:{}: expected {} tab-separated numbers, got `{line}`",
                path.display(),
                i + 2,
                header.len()
            )
        };
        if fields.len() != header.len() {
            return Err(bad());
        }
        let page = fields[0].parse().map_err(|_| bad())?;
        let mut v = [0u64; COLUMNS];
        for (slot, col) in v.iter_mut().zip(at) {
            if let Some(col) = col {
                *slot = fields[col].parse().map_err(|_| bad())?;
            }
        }
        rows.insert(page, v);
    }
    Ok(rows)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args = dsm_apps::args(
        "fault-trace",
        "A remote fault step by step, from the stamps of DSM_FAULT_TRACE",
        &[("DIR", "the DSM_FAULT_TRACE directory of a finished job")],
    );
    let Some(dir) = args.first().cloned() else {
        eprintln!("usage: fault-trace DIR   (the DSM_FAULT_TRACE directory of a finished job)");
        std::process::exit(2);
    };
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        eprintln!("fault-trace: cannot read {dir}: {e}");
        std::process::exit(2);
    });
    let mut nodes: Vec<Rows> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("fault-trace.") && name.ends_with(".tsv") {
            match read_node(&entry.path()) {
                Ok(rows) => nodes.push(rows),
                Err(e) => {
                    eprintln!("fault-trace: {e}");
                    std::process::exit(2);
                }
            }
        }
    }
    if nodes.len() < 2 {
        eprintln!(
            "fault-trace: {dir} holds {} node file(s) (fault-trace.<node>.tsv); a remote fault \
             needs a requester's and a home's",
            nodes.len()
        );
        std::process::exit(2);
    }
    // One requester's fault joined with the home's stamps: the step boundaries in order, and
    // whether it was a write.
    let mut faults: Vec<([u64; 7], bool)> = Vec::new();
    // The same faults' finer steps, where the trace has them (see `FINE`).
    let mut fine: Vec<([u64; 13], bool)> = Vec::new();
    // Read faults' GETP sent -> page prepared, and whether the grant was in the requester's
    // socket (the home's `sendto` returned) before that: then the preparation delayed it.
    let mut prepared: Vec<(f64, f64)> = Vec::new();
    for (r, req) in nodes.iter().enumerate() {
        for (page, v) in req {
            if [FAULT, GETP_SENT, GRANT_IN, INSTALLED, RESUMED]
                .iter()
                .any(|&c| v[c] == 0)
            {
                continue;
            }
            let home = nodes.iter().enumerate().find_map(|(h, rows)| {
                let hv = rows.get(page)?;
                (h != r && hv[GETP_IN] != 0 && hv[GRANT_SENT] != 0).then_some(hv)
            });
            let Some(hv) = home else { continue };
            let t = [
                v[FAULT],
                v[GETP_SENT],
                hv[GETP_IN],
                hv[GRANT_SENT],
                v[GRANT_IN],
                v[INSTALLED],
                v[RESUMED],
            ];
            // The requester's own steps in order, the home's after the fault began (an
            // earlier requester's otherwise). A step may still come out negative: a `sendto`
            // returns after the peer may already have read the datagram, or answered it.
            let own = [t[0], t[1], t[4], t[5], t[6]];
            if own.windows(2).all(|w| w[0] <= w[1]) && t[0] <= t[2] && t[2] <= t[3] {
                faults.push((t, v[WRITE] != 0));
                let f = [
                    v[FAULT],
                    v[SEND_START],
                    v[GETP_SENT],
                    hv[READ],
                    hv[GETP_IN],
                    hv[SEND_START],
                    hv[GRANT_SENT],
                    v[READ],
                    v[GRANT_IN],
                    v[PROTECT_START],
                    v[PROTECT_END],
                    v[INSTALLED],
                    v[RESUMED],
                ];
                if f.iter().all(|&x| x != 0) {
                    fine.push((f, v[WRITE] != 0));
                    if v[PREPARED] != 0 && v[WRITE] == 0 {
                        // How long after the grant was in the preparation ended (<= 0: before).
                        let late = (v[PREPARED] as f64 - hv[GRANT_SENT] as f64) / 1000.0;
                        prepared.push(((v[PREPARED] as f64 - v[GETP_SENT] as f64) / 1000.0, late));
                    }
                }
            }
        }
    }
    if faults.is_empty() {
        eprintln!(
            "fault-trace: no remote fault could be joined in {dir} (run with prefetch off, \
             so each fault sends its own GETP, and fault on pages below the first 65536)"
        );
        std::process::exit(1);
    }
    for (kind, write) in [("read faults", false), ("write faults", true)] {
        let of_kind: Vec<[u64; 7]> = faults
            .iter()
            .filter(|f| f.1 == write)
            .map(|f| f.0)
            .collect();
        if !of_kind.is_empty() {
            print_steps(kind, &STEPS, &of_kind);
        }
    }
    let reads: Vec<[u64; 13]> = fine.iter().filter(|f| !f.1).map(|f| f.0).collect();
    if !reads.is_empty() {
        print_steps("read faults, finer", &FINE, &reads);
    }
    if !prepared.is_empty() {
        // Concurrent with the home's steps: off the fault's path unless the grant was in the
        // requester's socket first (it is read only once the preparation is done).
        let mut late: Vec<f64> = prepared.iter().map(|p| p.1).filter(|&l| l > 0.0).collect();
        late.sort_by(f64::total_cmp);
        let mut d: Vec<f64> = prepared.iter().map(|p| p.0).collect();
        d.sort_by(f64::total_cmp);
        // The grant may never have been in first (its stamp is taken as it leaves the home).
        let first = match late.is_empty() {
            true => "never".to_string(),
            false => format!(
                "in {:.1}% of faults, by {:.2} us at the median",
                100.0 * late.len() as f64 / prepared.len() as f64,
                percentile(&late, 0.5)
            ),
        };
        println!(
            "{:<40} {:>8.2} {:>8.2} {:>8.2}   (while the GETP travels; the grant was in first {first})",
            "requester: GETP sent -> page prepared",
            percentile(&d, 0.5),
            percentile(&d, 0.1),
            percentile(&d, 0.9),
        );
    }
}

/// The joined stamps' steps: name, from, to (indices into a fault's stamps).
const STEPS: [(&str, usize, usize); 7] = [
    ("fault -> GETP sent (requester)", 0, 1),
    ("GETP sent -> read at the home", 1, 2),
    ("home: GETP read -> grant sent", 2, 3),
    ("grant sent -> read at the requester", 3, 4),
    ("grant read -> page installed", 4, 5),
    ("installed -> handler returns", 5, 6),
    ("in the fault handler", 0, 6),
];

/// The finer steps: fault, its `sendto` starts, returns, the home's `recvfrom` returns, GETP
/// decoded, the grant's `sendto` starts, returns, the requester's `recvfrom` returns, grant
/// decoded, `mprotect` starts, returns, installed, handler returns.
const FINE: [(&str, usize, usize); 13] = [
    ("fault -> GETP sendto starts", 0, 1),
    ("GETP sendto", 1, 2),
    ("-> home's recvfrom returns", 2, 3),
    ("home: decoded", 3, 4),
    ("home: served, encoded, queued", 4, 5),
    ("grant sendto", 5, 6),
    ("-> requester's recvfrom returns", 6, 7),
    ("requester: decoded", 7, 8),
    ("-> mprotect starts", 8, 9),
    ("mprotect", 9, 10),
    ("-> page installed", 10, 11),
    ("-> handler returns", 11, 12),
    ("in the fault handler", 0, 12),
];

fn print_steps<const N: usize>(kind: &str, steps: &[(&str, usize, usize)], faults: &[[u64; N]]) {
    // Written through a locked handle: a closed pipe (`| head`) ends the program quietly.
    let mut out = std::io::stdout().lock();
    let mut lines = vec![format!(
        "{:<40} {:>8} {:>8} {:>8}   ({} {kind}, microseconds)",
        "step",
        "median",
        "p10",
        "p90",
        faults.len()
    )];
    for &(name, a, b) in steps {
        let mut d: Vec<f64> = faults
            .iter()
            .map(|t| (t[b] as f64 - t[a] as f64) / 1000.0)
            .collect();
        d.sort_by(f64::total_cmp);
        lines.push(format!(
            "{name:<40} {:>8.2} {:>8.2} {:>8.2}",
            percentile(&d, 0.5),
            percentile(&d, 0.1),
            percentile(&d, 0.9)
        ));
    }
    for line in lines {
        if writeln!(out, "{line}").is_err() {
            std::process::exit(0);
        }
    }
}
