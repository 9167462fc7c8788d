//! The core's output applied: messages encoded and sent (or turned into one-sided reads), memory
//! prepared for the pages on their way, effects carried out (threads resumed, the job's
//! statistics written, the node ended).

use std::sync::Arc;
use std::time::Instant;

use dsm_core::{Effect, Msg, MsgKind, NodeId, PAGE_SIZE, PageNum, RunData, codec};
use dsm_transport::{Body, ReadRange};

use super::Service;
use crate::door::SLOTS;
use crate::door::end::{EXIT_PEER_FAILED, fatal, fatal_with};
use crate::door::request::FaultOutcome;
use crate::stats::{self, NodeStats, RuntimeStats};
use crate::trace::{self, Step};

/// Grant bytes queued in the transport that make it flush in the middle of a drain (see
/// `Service::drain_core`): about one UDP datagram's pages.
const FLUSH_GRANT_BYTES: usize = 32 << 10;

/// A grant in place that starts between two multiples of this many pages ends at the next.
const FIRST_IN_PLACE_PAGES: u64 = 16;

/// A grant in place: `count` pages from `page` of this node's memory, for node `to` to read
/// there (see `crate::same_host`).
struct InPlace {
    to: NodeId,
    page: PageNum,
    count: u16,
    forwarded: bool,
}

impl InPlace {
    /// Whether a run from `page` granted to `to` continues this grant.
    fn continued_by(&self, to: NodeId, page: PageNum, forwarded: bool) -> bool {
        self.to == to
            && self.forwarded == forwarded
            && self.page.0.checked_add(u32::from(self.count)) == Some(page.0)
    }

    /// The pages this grant may still take: it ends at the next multiple of the longest grant
    /// ([`codec::MAX_RUN_PAGES`], 1 MiB), or of [`FIRST_IN_PLACE_PAGES`] for one that starts
    /// between two (the first of a request, whose first page its reader may be waiting for:
    /// a short grant lands sooner). The reader writes each grant with one `pwrite`, and the
    /// large folios of its file never straddle such a boundary (they are aligned to their
    /// size, at most 1 MiB, and none holds the request's first page, which is in memory
    /// before: see `Region::prepare`): every folio is written whole by one grant, never zeroed
    /// first for the part another grant brings.
    fn room(&self) -> u16 {
        let page = u64::from(self.page.0);
        let step = if page % FIRST_IN_PLACE_PAGES == 0 {
            codec::MAX_RUN_PAGES as u64
        } else {
            FIRST_IN_PLACE_PAGES
        };
        let end = (page / step + 1) * step;
        (end - page - u64::from(self.count)) as u16
    }
}

impl Service {
    /// Sends a grant in place, if there is one; the first of a drain (`flushed` still false)
    /// leaves at once, as the first grant with its pages does.
    fn send_in_place(&mut self, grant: Option<InPlace>, flushed: &mut bool) {
        let Some(g) = grant else { return };
        let Some(t) = &mut self.transport else {
            fatal("a one-node job tried to send a message")
        };
        let mut frame = Vec::with_capacity(codec::HEADER_BYTES + codec::GRANT_HEADER_BYTES);
        codec::encode_grant_in_place(
            self.cookie,
            self.node.id(),
            (g.page, g.count),
            g.forwarded,
            &mut frame,
        );
        self.node.frame_sent(MsgKind::GetPageGrant, frame.len());
        t.send_owned(Instant::now(), g.to.0, frame);
        if !*flushed {
            t.flush(Instant::now());
            *flushed = true;
        }
        self.frames_sent += 1;
    }

    /// Turns a GETP into one-sided reads of the home's memory, one per run of consecutive
    /// pages; `false` (nothing issued) when the transport cannot take them all now.
    pub(super) fn read_one_sided(&mut self, home: NodeId, pages: &[PageNum]) -> bool {
        let Some(t) = self.transport.as_mut() else {
            return false;
        };
        let max_pages = (t.max_read() / PAGE_SIZE).max(1);
        let mut runs: Vec<(PageNum, usize)> = Vec::new();
        for &p in pages {
            match runs.last_mut() {
                Some((first, n)) if first.0 as usize + *n == p.0 as usize && *n < max_pages => {
                    *n += 1
                }
                _ => runs.push((p, 1)),
            }
        }
        let ranges: Vec<ReadRange> = runs
            .into_iter()
            .map(|(p, n)| ReadRange {
                offset: p.index() as u64 * PAGE_SIZE as u64,
                len: n * PAGE_SIZE,
                token: u64::from(p.0),
            })
            .collect();
        t.read(Instant::now(), home.0, &ranges)
    }

    pub(super) fn drain_core(&mut self) -> bool {
        let mut any = false;
        let one_sided = self.node.config().remote_reads;
        let mut fetching: Vec<PageNum> = Vec::new();
        // Grants sent, for the fault trace (stamped once they have left).
        let mut granted: Vec<PageNum> = Vec::new();
        // Grant bytes handed to the transport since it last flushed, and whether it has yet in
        // this drain.
        let (mut unflushed, mut flushed) = (0usize, false);
        // A grant in place being joined.
        let mut in_place: Option<InPlace> = None;
        while let Some(tx) = self.node.poll_transmit() {
            any = true;
            if let (true, Msg::GetPageGrant { page, .. }) = (trace::on(), &tx.msg) {
                granted.push(*page);
            }
            if let Msg::GetPage { pages, .. } = &tx.msg {
                fetching.extend_from_slice(pages);
                // A home of this host is asked for its memory before the first request.
                self.node.memory_mut().ask_in_place(tx.to);
            }
            // A run lent to a node of this host goes as the grant's header: the node reads the
            // pages in this node's memory. Consecutive runs to one node join into one grant,
            // sent before any other message (the order between two nodes is kept).
            if let Msg::GetPageGrant {
                page,
                data: RunData::Lent(pages),
                forwarded,
            } = tx.msg
                && self
                    .node
                    .memory_mut()
                    .grant_in_place(tx.to, page, usize::from(pages))
            {
                self.node.carried_otherwise(&tx.msg);
                let (mut page, mut pages) = (page, pages);
                while pages > 0 {
                    let joined = match &mut in_place {
                        Some(joined) if joined.continued_by(tx.to, page, forwarded) => joined,
                        _ => {
                            self.send_in_place(in_place.take(), &mut flushed);
                            in_place.insert(InPlace {
                                to: tx.to,
                                page,
                                count: 0,
                                forwarded,
                            })
                        }
                    };
                    let taken = joined.room().min(pages);
                    joined.count += taken;
                    (page, pages) = (PageNum(page.0 + u32::from(taken)), pages - taken);
                    if joined.room() == 0 {
                        self.send_in_place(in_place.take(), &mut flushed);
                    }
                }
                continue;
            }
            self.send_in_place(in_place.take(), &mut flushed);
            if let (true, Msg::GetPage { pages, .. }) = (one_sided, &tx.msg) {
                if self.node.may_read_one_sided(pages) && self.read_one_sided(tx.to, pages) {
                    self.node.carried_otherwise(&tx.msg);
                    self.frames_sent += 1;
                    continue;
                }
            }
            // Encoded into a buffer of its own, which the transport keeps (UDP and RDMA queue
            // it without copying it again); a grant's page bytes stay apart: a buffer of their
            // own, or the home's pages lent (read by the transport when it sends them), which
            // TCP writes as they are and UDP gathers into its datagrams (`send_parts`).
            let head_len = match &tx.msg {
                Msg::GetPageGrant { data, .. } => codec::frame_len(&tx.msg) - data.len(),
                _ => codec::frame_len(&tx.msg),
            };
            let mut frame = Vec::with_capacity(head_len);
            let run = codec::encode_frame_head(self.cookie, self.node.id(), &tx.msg, &mut frame);
            let body = match (&tx.msg, run) {
                (_, Some(RunData::Copied(bytes))) => Some(Body::Shared(Arc::clone(bytes))),
                (Msg::GetPageGrant { page, .. }, Some(&RunData::Lent(pages))) => {
                    let lent = self.node.memory_mut().lend(*page, usize::from(pages));
                    Some(Body::Lent(lent))
                }
                _ => None,
            };
            self.frames_sent += 1;
            let Some(t) = &mut self.transport else {
                fatal("a one-node job tried to send a message")
            };
            match body {
                Some(body) => {
                    let body_len = body.bytes().len();
                    t.send_parts(Instant::now(), tx.to.0, frame, body);
                    // The runs of a read-ahead window leave while the next are copied: UDP sends
                    // only at a flush, and a window of 1,024 pages copied whole first made its
                    // requester wait 1-2 ms for the first run, and again at every window. The
                    // first grant (a demand page's, as a rule) goes at once, then the grants
                    // queued since the last flush once they fill about a datagram: short runs (a
                    // strided window's single pages) still share datagrams.
                    unflushed += body_len;
                    if !flushed || unflushed >= FLUSH_GRANT_BYTES {
                        t.flush(Instant::now());
                        (unflushed, flushed) = (0, true);
                        for p in granted.drain(..) {
                            trace::stamp(u64::from(p.0), Step::GrantSent);
                        }
                    }
                }
                None => t.send_owned(Instant::now(), tx.to.0, frame),
            }
        }
        self.send_in_place(in_place, &mut flushed);
        if any {
            // The acknowledgements owed ride on these messages (those to other peers too, once
            // everything is read).
            self.acks_owed &= self.unread;
            if let Some(t) = &mut self.transport {
                t.flush(Instant::now());
            }
        }
        if trace::on() {
            for p in &fetching {
                trace::stamp(u64::from(p.0), Step::GetpSent);
            }
            for p in &granted {
                trace::stamp(u64::from(p.0), Step::GrantSent);
            }
        }
        // While the requests (messages or one-sided reads) travel: back the pages they will fill
        // with memory, by runs.
        let mut rest = fetching.as_slice();
        while let Some(&first) = rest.first() {
            let run = rest
                .iter()
                .enumerate()
                .take_while(|&(i, p)| p.0 == first.0 + i as u32)
                .count();
            // Pages shown from their home's memory (`same_host = map`) take none of this node's.
            // One home for the run (consecutive pages asked of two homes are readied).
            let home = self
                .node
                .home_of(first)
                .filter(|&h| self.node.home_of(PageNum(first.0 + run as u32 - 1)) == Some(h));
            let memory = self.node.memory_mut();
            if home.is_some_and(|h| memory.shows_from(h, run)) {
                memory.not_prepared(first, run);
            } else {
                memory.prepare(first, run);
            }
            rest = &rest[run..];
        }
        while let Some(effect) = self.node.poll_effect() {
            any = true;
            match effect {
                Effect::Resume { waiter } => {
                    let slot = waiter.0 as usize;
                    // The thread completing its own request (a driving fault handler, a call
                    // run inline) is not asleep: no wake-up.
                    let wake = self.driver != Some(slot);
                    if self.exit_waiter == Some(slot) {
                        self.exit_done_at = Some(Instant::now());
                        self.say_goodbye();
                    } else if SLOTS.is_call(slot) {
                        let reply = self.resumed_call(slot);
                        SLOTS.complete_call(slot, reply, wake);
                    } else {
                        // A thread resumed from a posted fault drives its next fault itself if it
                        // finds the state free, and a service thread spinning for it only stands
                        // in its way (see `door::state`): no prediction is kept for it.
                        SLOTS.complete_fault(slot, FaultOutcome::Open, wake);
                    }
                }
                Effect::JobStats { nodes, runtime } => {
                    // Every node runs this node's transport: its counters have these names.
                    let names: Vec<String> = self
                        .transport_counters_now()
                        .into_iter()
                        .map(|(k, _)| k)
                        .collect();
                    let nodes: Vec<NodeStats> = nodes
                        .into_iter()
                        .zip(runtime)
                        .map(|(core, r)| NodeStats {
                            core,
                            runtime: RuntimeStats::from_counters(&r, &names),
                        })
                        .collect();
                    // Writes a file and prints: the service thread's work, on its next pass.
                    self.deferred.push(super::Deferred::JobStats(nodes));
                    SLOTS.nudge_service();
                }
                // From any context: in a driving fault handler the node leaves by `_exit` with the
                // same status (`door::end`), so the launcher still names the node that failed.
                // A node already ending with its own error (it waits for its message to be
                // acknowledged) ends with it: every node making the same bad call at once must
                // not take each other's word and all end "because another failed".
                Effect::Abort {
                    error: dsm_core::JobError::Remote { .. },
                } if self.own_error => {}
                Effect::Abort { error } => match error {
                    dsm_core::JobError::Remote { from, ref text } => {
                        // The launcher names the node that erred, with its message, even when
                        // every node ends for another's error (all made the same bad call).
                        self.blame(from.0, &format!("error: {text}"));
                        // Acknowledge the error first: its sender waits for every node to have
                        // it before it ends (`jia_error`), and ends sooner.
                        self.acknowledge_what_came();
                        fatal_with(&error.to_string(), EXIT_PEER_FAILED)
                    }
                    _ => fatal(&error.to_string()),
                },
            }
        }
        // The home pages served untracked are tracked from now on (their grants are sent): the
        // protection this takes was kept off the requesters' wait.
        self.node.settle_serves();
        self.node.warm_ahead();
        // Pure acknowledgements last: after the threads they concern are running again.
        // A fault handler driving the node leaves them to the next message it sends (its next
        // GETP) or to the service thread, which wakes within [`DRIVEN_NAP`] of a drive: a
        // sendto here would delay the thread's return by its cost (3 us).
        if self.driver.is_none() && !self.unread && std::mem::take(&mut self.acks_owed) {
            if let Some(t) = &mut self.transport {
                t.flush(Instant::now());
            }
        }
        any
    }

    /// Writes the job's statistics where asked (`--stats-json`) and prints their table
    /// (`--stats`). Service thread only.
    pub(super) fn report_job_stats(&mut self, nodes: &[NodeStats]) {
        if let Some(path) = &self.stats_json {
            let json = stats::nodes_json(nodes);
            if let Some(c) = &mut self.control {
                // One line; the launcher adds the job's metadata and exit status.
                let line = crate::job::wire::Line::Stats(json.to_string()).encode();
                let _ = c.set_nonblocking(false);
                let _ = std::io::Write::write_all(c, line.as_bytes());
                let _ = c.set_nonblocking(true);
            } else {
                let mut meta = self.stats_meta.clone();
                meta.wall = self.t0.elapsed();
                let written = crate::sys::write_own_file(
                    std::path::Path::new(path),
                    stats::job_json(&meta, json).as_bytes(),
                );
                if let Err(e) = written {
                    crate::sys::write_stderr(
                        format!("dsm node 0: cannot write statistics to {path}: {e}\n").as_bytes(),
                    );
                }
            }
        }
        if self.print_stats {
            // One write(2), not through stderr's lock (see `crate::logging`).
            let transport = self.transport.as_ref().map_or("", |t| t.name());
            crate::sys::write_stderr(stats::render(nodes, transport).as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(page: u32, count: u16) -> InPlace {
        InPlace {
            to: NodeId(1),
            page: PageNum(page),
            count,
            forwarded: false,
        }
    }

    #[test]
    fn a_grant_in_place_ends_at_the_next_mebibyte_and_joins_only_what_continues_it() {
        assert_eq!(grant(0, 0).room(), 256);
        assert_eq!(grant(0, 15).room(), 241);
        assert_eq!(grant(240, 10).room(), 6);
        assert_eq!(grant(240, 16).room(), 0);
        // Starting between two multiples of 16 pages: to the next.
        assert_eq!(grant(250, 3).room(), 3);
        assert_eq!(grant(250, 6).room(), 0);
        assert_eq!(grant(256 * 7 + 1, 0).room(), 15);
        assert_eq!(grant(u32::MAX, 0).room(), 1);
        let g = grant(100, 15);
        assert!(g.continued_by(NodeId(1), PageNum(115), false));
        assert!(!g.continued_by(NodeId(1), PageNum(116), false), "a gap");
        assert!(
            !g.continued_by(NodeId(2), PageNum(115), false),
            "another node"
        );
        assert!(
            !g.continued_by(NodeId(1), PageNum(115), true),
            "on the home's behalf"
        );
        assert!(!grant(u32::MAX, 1).continued_by(NodeId(1), PageNum(0), false));
    }
}
