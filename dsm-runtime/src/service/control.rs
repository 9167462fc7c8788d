//! The launcher's control channel, seen from a node: `DSM1 LOST` in, `BYE`, `WAIT`/`RUN` and
//! `BLAME` out (the launcher's side is `crate::job::launcher`), and the node's own warnings.
//! Service thread only: these print and wait on a socket (never in signal context).

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::{RANK0_GRACE, Service};
use crate::door::end::{EXIT_PEER_FAILED, fatal, fatal_with};
use crate::job::watch::{
    NO_PROGRESS_FOR, SPIN_QUIET_FOR, SPIN_SAID_AFTER, TIMER_QUIET_FOR, spin_warning,
};
use crate::job::wire::Line;
use crate::sys;

impl Service {
    /// Reads the control channel: `DSM1 LOST <node> <how>` ends this node naming the lost one,
    /// `DSM1 STUCK <what>` ends it because the job cannot go on (rank 0 says what every node
    /// waits for). The channel closing means dsmrun is gone, or a self-launching node 0 that
    /// started this node died; when rank 0 watches under srun or mpirun, it means only that rank
    /// 0 ended, which the transport reports if it matters.
    pub(super) fn check_control(&mut self) {
        self.control_checked = Instant::now();
        let Some(c) = &mut self.control else { return };
        let mut buf = [0u8; 512];
        let (mut lines, refused) = (Vec::new(), self.control_lines.refused);
        let closed = loop {
            match std::io::Read::read(c, &mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => self.control_lines.feed(&buf[..n], |l| lines.push(l)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break Err(None),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(Some(e)),
            }
        };
        if self.control_lines.refused > refused {
            log::warn!(
                "{} line(s) on the launcher's control connection refused (not the job's words)",
                self.control_lines.refused - refused
            );
        }
        // What came before the end is acted on first: rank 0 closes right after its last word.
        self.act_on_control_lines(lines);
        let failed = match closed {
            Err(None) => return,
            Ok(()) => None,
            Err(Some(e)) => Some(e),
        };
        if self.exit_done_at.is_none() && self.launcher_outside {
            match failed {
                None => {
                    fatal("the launcher is gone (its control connection closed); ending this node")
                }
                Some(e) => fatal(&format!("the launcher's control connection failed: {e}")),
            }
        }
        // A node 0 that started this node waits for it at a normal exit, and tells it first of
        // any failure it ends with: the channel closing unannounced means node 0 died. Said
        // within `RANK0_GRACE`, not after the transport's `peer_timeout_ms` of silence (10 s
        // over UDP); the grace lets node 0's own last words, still on the transport (its error,
        // read behind another peer's close), be the ones reported.
        if self.exit_done_at.is_none() && self.started_by_rank0 && self.node.id().0 != 0 {
            self.rank0_gone_at.get_or_insert(Instant::now());
        }
        self.control = None;
    }

    /// Ends the node once [`RANK0_GRACE`] passed since the self-launching node 0 that started
    /// it was found gone (see `check_control`), unless the node left the job meanwhile.
    pub(super) fn check_rank0_gone(&self) {
        let Some(at) = self.rank0_gone_at else { return };
        if self.exit_done_at.is_none() && at.elapsed() >= RANK0_GRACE {
            fatal_with(
                "lost node 0: its process ended (the control connection of the node 0 that \
                 started this node closed before this node left the job)",
                EXIT_PEER_FAILED,
            );
        }
    }

    /// Acts on the lines that came on the control channel: the launcher's verdicts, and its
    /// word to the nodes of a job none of whose nodes works.
    fn act_on_control_lines(&mut self, lines: Vec<Line>) {
        for line in lines {
            match line {
                Line::Refresh { quiet_secs, what } => self.drop_copies(quiet_secs, what),
                Line::Flush => {
                    self.drain_fast_faults();
                    let now = self.now();
                    let sent = self.node.send_written_copies(now);
                    log::debug!("told to send its writes home: sent the diffs of {sent} pages");
                }
                // dsmrun says it: the node ends without a word, its output flushed.
                Line::Stuck(_) if self.launcher_outside => crate::door::end::end_quietly(1),
                // Said by rank 0's watch already.
                Line::Stuck(_) if crate::door::end::verdict_said() => {
                    crate::door::end::end_quietly(1)
                }
                Line::Stuck(what) if self.node.id().0 == 0 => {
                    fatal(&crate::job::JobFailure::Stuck(what).to_string());
                }
                Line::Stuck(_) => {
                    fatal("the job cannot go on (node 0 says what every node waits for)")
                }
                // The verdict may name this very node: its peers lost it (a network cut).
                Line::Lost { node, how } if node == self.node.id().0 => fatal_with(
                    &format!("the launcher ended the job: this node (node {node}) {how}"),
                    EXIT_PEER_FAILED,
                ),
                Line::Lost { node, how } => fatal_with(
                    &format!("lost node {node}: it {how} (reported by the launcher)"),
                    EXIT_PEER_FAILED,
                ),
                _ => {}
            }
        }
    }

    /// Ends the node if the program replaced the DSM's SIGSEGV or SIGBUS handler (looked at once
    /// a second, `fault::watch_handlers`): no fault on shared memory could be served again, and
    /// the thread that takes one would fault forever in the program's handler, at full speed and
    /// without a word.
    pub(super) fn check_fault_handlers(&mut self) {
        if let Some((name, now)) = crate::fault::watch_handlers() {
            let what = match now {
                libc::SIG_DFL => "the default action".to_string(),
                libc::SIG_IGN => "ignoring it".to_string(),
                f => format!("the handler at {f:#x}"),
            };
            fatal(&format!(
                "the program replaced the DSM's {name} handler (with {what}): faults on shared \
                 memory can no longer be served (a thread that takes one would fault forever); \
                 keep the DSM's handler, or install yours before jia_init / Dsm::init: the DSM \
                 then passes it every fault outside shared memory (a C program may also install \
                 it later, with sigaction or signal, through libjia)"
            ));
        }
    }

    /// POSIX ends a process with `exit(0)` when its last thread ends, and the service thread, a
    /// thread of the process too, kept one whose main thread called `pthread_exit` alive after
    /// its other threads ended (an outside attack: the node, and the job, hung; buffered output
    /// was lost). Once a second: when the main thread has ended (a zombie until the process
    /// ends) and no thread of the program's is left, a thread started for it calls `exit(0)`,
    /// as the last thread's end would have: the program's exit handlers run, C's stdio is
    /// flushed, and the node leaves the job as `exit(0)` without `jia_exit` does.
    pub(super) fn check_program_threads(&mut self) {
        if self.program_ended || self.threads_checked.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.threads_checked = Instant::now();
        let runtime = crate::door::threads::runtime_threads();
        if !sys::process::program_threads_ended(&runtime) {
            return;
        }
        self.program_ended = true;
        let started = std::thread::Builder::new()
            .name("dsm-last-exit".into())
            .spawn(|| sys::process::exit_as_the_last_thread());
        if let Err(e) = started {
            fatal(&format!(
                "every thread of the program has ended (its main thread by pthread_exit), and \
                 the thread that would end the process with status 0 could not start: {e}"
            ));
        }
    }

    /// Tells the launcher this node left the job properly (`DSM1 BYE`): a node that exits without
    /// it (the program returned from main, or called exit, without jia_exit) is named at once as
    /// the one that failed, not a survivor left waiting for it.
    pub(super) fn say_goodbye(&mut self) {
        if let Some(c) = &mut self.control {
            // The socket is non-blocking; a few bytes always fit. A launcher already gone is
            // found by check_control.
            let _ = std::io::Write::write_all(c, Line::Bye.encode().as_bytes());
        }
    }

    /// Warns once, on this node's standard error, when its page cache thrashes: as many pages
    /// faulted on again in the barrier epoch that evicted them as the cache holds. Such a job
    /// fetches its pages over and over and may run many times slower than with a larger cache,
    /// with no other sign. (Service thread only: it prints.)
    pub(super) fn warn_if_thrashing(&mut self) {
        if self.warned_thrashing {
            return;
        }
        // Refetches after eviction dominate: at least 64 pages, and a quarter of the remote
        // faults or more (whatever the cache's size: 32 pages and matmul 256 ran 15-30 times
        // slower with 255 refetches, under the old threshold of 1,024).
        let stats = self.node.stats();
        let again = stats.refetched_after_eviction;
        let faults = stats.read_faults_remote + stats.write_faults_remote;
        let cache = self.node.config().cache_pages;
        if again < 64 || again * 4 < faults {
            return;
        }
        self.warned_thrashing = true;
        // What the program allocated: a cache as large as every page it can touch never evicts.
        let allocated = self.node.pages_allocated();
        let suggest = allocated.clamp(cache * 2, 1 << 24);
        let why = if suggest == allocated {
            "that is every page the program allocated, so nothing is evicted; a smaller raise \
             may do"
        } else if suggest == cache * 2 {
            "twice the cache"
        } else {
            "the largest allowed"
        };
        // One write(2), not through stderr's lock: a thread of the program may hold it while
        // it formats shared memory and faults (see `crate::logging`).
        crate::sys::write_stderr(
            format!(
                "dsm node {}: warning: the page cache is too small for this program: {again} \
                 pages were fetched again in the barrier epoch that evicted them (cache_pages = \
                 {cache}, pages of 4 KiB); the job may run many times slower. Raise it: --set \
                 cache_pages={suggest} (or DSM_CACHE_PAGES, or cache_pages in .jiaconf); {why}\n",
                self.node.id().0,
            )
            .as_bytes(),
        );
    }

    /// The launcher found this node running quiet for `quiet_secs` seconds while every other
    /// node waited or ran quiet too (`what`; `crate::job::watch::Heard::quiet_runners`), and
    /// had every node send its writes home (`FLUSH`): its copies of other nodes' pages are
    /// dropped (`Node::drop_copies`), so that a thread reading one in a loop on plain loads
    /// reads its home's bytes.
    fn drop_copies(&mut self, quiet_secs: u64, what: String) {
        self.drain_fast_faults();
        let now = self.now();
        let dropped = self.node.drop_copies(now);
        self.node.take_dropped_changed();
        log::debug!("ran quiet {quiet_secs} s, nobody working: dropped {dropped} copies");
        self.refreshed = (dropped > 0).then_some(Refreshed {
            dropped,
            quiet_secs,
            what,
        });
    }

    /// Says, once per dropping, the first dropped page a read fault of this node brought again
    /// with another value in the byte it read than its copy's (see [`Service::drop_copies`]):
    /// where a thread of it waits on plain loads for another node's write. A byte read again
    /// with the same value (a node that computes, reading what nobody changed, or words beside
    /// those another node writes) is not said, nor a page written first, nor one read after the
    /// node's next acquire. Service thread only: it prints.
    pub(super) fn say_refreshed(&mut self) {
        if self.refreshed.is_none() {
            return;
        }
        let Some(&(page, offset)) = self.node.take_dropped_changed().first() else {
            return;
        };
        let Some(r) = self.refreshed.take() else {
            return;
        };
        let addr = crate::fault::region().0 + page.index() * dsm_core::PAGE_SIZE + offset;
        let place = crate::allocations::spelled_place(addr);
        crate::sys::write_stderr(
            format!(
                "dsm node {}: warning: this node ran for {} s on the pages it held while every \
                 other node waited or did the same ({}); it dropped its copies of other nodes' \
                 pages ({}), and a thread read the byte at {addr:#x}{place} again, which came \
                 back with a value another node wrote that its copy did not have. A loop \
                 that waits for another node's write on plain loads sees it only after an \
                 acquire of its own (jia_lock, jia_barrier, jia_wait, jia_waitcv) or through \
                 atomic loads (jia_atomic_load_32/64, or C11 atomics in a program built by \
                 dsmcc); until then it may read its own copy for ever (the copies are dropped \
                 again after 20 s, 40 s... while this lasts). dsmrun --check-races names such \
                 reads\n",
                self.node.id().0,
                r.quiet_secs,
                r.what,
                r.dropped,
            )
            .as_bytes(),
        );
    }

    /// Tells the launcher, every 250 ms while this node waits (every thread that uses the DSM is
    /// in a call that waits for other nodes: see [`crate::progress`]), what it waits for, the
    /// locks it holds, the messages it still has on their way and those it has received:
    /// `DSM1 WAIT <in flight> <received> <what>`; every 250 ms while it runs quiet (its threads
    /// took fewer than [`QUIET_FAULTS`] page faults in the last [`QUIET_AFTER`]: they compute
    /// on the pages they hold, or read one in a loop), `DSM1 QUIET`; and `DSM1 RUN` once it
    /// goes on. The launcher ends a job whose every node
    /// waits with nothing in flight and nothing received for a while, and tells the nodes of
    /// one none of whose nodes works to send their writes home and drop their copies
    /// (`crate::job::watch::Heard::quiet_runners`).
    ///
    /// A one-node job has no launcher watching it (none is needed to meet nobody): the node is
    /// its own judge, with the launcher's rule. Every thread waiting for another the same way
    /// for [`NO_PROGRESS_FOR`] ends it, naming the waits.
    pub(super) fn report_progress(&mut self) {
        let now = Instant::now();
        if now < self.progress_due || !self.reports_progress() {
            return;
        }
        // On a clock of its own: a report that followed whatever woke the service thread (the
        // answer to a spinning thread's poll) would see that thread run at every report. From
        // now: a late report is not followed by an early one (the in-flight rule below wants
        // samples over 200 ms apart).
        self.progress_due = now + report_interval();
        let faulted = self.count_faults();
        if self.control.is_none() {
            self.judge_alone(faulted);
            return;
        }
        // On its way in two samples in a row (219-281 ms apart): a TCP acknowledgement the peer
        // delays (up to 200 ms) does not count, bytes a cut-off peer never acknowledges do.
        let now: usize = match &self.transport {
            Some(t) => (0..self.node.nodes()).map(|p| t.in_flight(p)).sum(),
            None => 0,
        };
        let in_flight = now.min(std::mem::replace(&mut self.in_flight_sampled, now));
        let received: u64 = self.node.stats().msgs_received.iter().sum();
        let (line, reported) = match crate::progress::node_waits(faulted) {
            Some(crate::progress::NodeWaits { what, timer, spins }) => {
                let held = self.node.locks_held();
                let held = if held.is_empty() {
                    String::new()
                } else {
                    let l: Vec<String> = held.iter().map(|l| l.0.to_string()).collect();
                    format!(", holding lock {}", l.join(", "))
                };
                let line = Line::Wait {
                    in_flight: in_flight as u64,
                    received,
                    timer,
                    spins,
                    what: format!("waits in {what}{held}"),
                };
                (line, Reported::Waits)
            }
            None if self.few_faults => (Line::Quiet, Reported::Quiet),
            None if self.reported != Reported::Runs => (Line::Run, Reported::Runs),
            None => return,
        };
        self.reported = reported;
        if let Some(c) = &mut self.control {
            let _ = std::io::Write::write_all(c, line.encode().as_bytes());
        }
    }

    /// Whether this node reports its progress: to its launcher, or to itself alone. A node of a
    /// larger job started without a control channel (by hand, ssh without dsmrun) has nobody to
    /// tell, and its service thread no longer wakes four times a second for it.
    pub(super) fn reports_progress(&self) -> bool {
        self.control.is_some() || self.node.nodes() == 1
    }

    /// Counts the page faults of the node's threads at a report: whether any was taken since
    /// the last one, and, once every [`QUIET_AFTER`], whether fewer than [`QUIET_FAULTS`] were
    /// in that while (`few_faults`: the node runs quiet). What it serves, sends or synchronises
    /// does not count: it does not change what its threads read (a quiet node may serve a
    /// spinning node's atomic loads, or another thread of it take and release a lock), nor do
    /// a few faults (a spinner's node faulting once every 5 s was never quiet 10 s in a row).
    fn count_faults(&mut self) -> bool {
        // The pages fault handlers opened by themselves count too.
        self.drain_fast_faults();
        let stats = self.node.stats();
        let now = stats.read_faults_local
            + stats.read_faults_remote
            + stats.write_faults_local
            + stats.write_faults_remote
            + stats.faults_joined
            + stats.prefetch_used;
        let (mark, since) = self.faults_mark;
        if since.elapsed() >= QUIET_AFTER {
            self.few_faults = now.saturating_sub(mark) < QUIET_FAULTS;
            self.faults_mark = (now, Instant::now());
        }
        now != std::mem::replace(&mut self.faults_seen, now)
    }

    /// A one-node job's verdict (see `report_progress`): nothing else can wake a thread of it
    /// but a signal handler, as the launcher's verdict on a larger job assumes.
    fn judge_alone(&mut self, faulted: bool) {
        let Some(waits) = crate::progress::node_waits(faulted) else {
            self.alone_waiting = None;
            return;
        };
        let quiet_for = match (waits.timer, waits.spins) {
            (_, true) => SPIN_QUIET_FOR,
            (true, false) => TIMER_QUIET_FOR,
            (false, false) => NO_PROGRESS_FOR,
        };
        let what = waits.what;
        match &mut self.alone_waiting {
            Some((same, since, said)) if *same == what => {
                if since.elapsed() >= quiet_for {
                    fatal(&format!(
                        "the job cannot go on: every thread of this one-node job waits for \
                         another and nothing can wake it: node 0 waits in {what}"
                    ));
                }
                if waits.spins && !*said && since.elapsed() >= SPIN_SAID_AFTER {
                    *said = true;
                    log::warn!("{}", spin_warning(&format!("node 0 waits in {what}")));
                }
            }
            _ => self.alone_waiting = Some((what, Instant::now(), false)),
        }
    }

    /// Tells the launcher which node this one ends for (`DSM1 BLAME <node> <why>`): a node that
    /// stops answering (SIGSTOP, a dead host) never ends by itself, and its survivors end first;
    /// the launcher follows the blame to it. One non-blocking write: also for the core work
    /// (another node's error met in signal context).
    pub(super) fn blame(&mut self, peer: u16, why: &str) {
        if let Some(c) = &mut self.control {
            let line = Line::Blame {
                node: peer,
                why: why.to_owned(),
            }
            .encode();
            let _ = std::io::Write::write_all(c, line.as_bytes());
        }
    }

    /// A peer's connections closed: it died, or it ended because another node did (a node that
    /// fails closes its connections). The launcher knows which node failed first and tells every
    /// node (`DSM1 LOST`, which ends this one in [`Service::check_control`]): listen for it up
    /// to `within`, so every survivor names the same node, the one that failed. (A node whose
    /// fault handler was driving the node could see a second survivor's connections close
    /// before the victim's.)
    pub(super) fn hear_launcher(&mut self, within: Duration) {
        let deadline = Instant::now() + within;
        while let Some(c) = &self.control {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            sys::wait_readable(&[c.as_fd()], left.min(Duration::from_millis(10)));
            self.check_control();
        }
    }
}

/// What a node last told the launcher it does ([`Service::report_progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reported {
    Runs,
    Waits,
    Quiet,
}

/// How often a node tells the launcher what it does (`report_progress`), on average; the
/// launcher takes a waiting node's report older than a second as stale.
pub(super) const REPORT_EVERY: Duration = Duration::from_millis(250);

/// The time to the next report: [`REPORT_EVERY`], give or take an eighth at random. A report
/// looks at the node's threads at one instant; at a fixed pace it fell, every second, on the
/// instant a 200 ms periodic timer's handler ran (the thread seen running, the node said to
/// run, the verdict on a deadlock beside the timer put off for ever), and it would fall at
/// the same point of any loop with a period that divides it.
fn report_interval() -> Duration {
    use std::sync::atomic::{AtomicU64, Ordering};
    // xorshift64, seeded once from the kernel (never 0).
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        x = sys::random_u64() | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    let eighth = (REPORT_EVERY / 8).as_nanos() as u64;
    REPORT_EVERY - Duration::from_nanos(eighth) + Duration::from_nanos(x % (2 * eighth))
}

/// A running node whose threads took fewer than [`QUIET_FAULTS`] page faults in this while
/// says it runs quiet ([`Line::Quiet`]).
const QUIET_AFTER: Duration = Duration::from_secs(1);
const QUIET_FAULTS: u64 = 4;

/// The copies of other nodes' pages a node dropped at the launcher's word (`DSM1 REFRESH`, see
/// [`Service::drop_copies`]), until a page read again with other bytes is said
/// ([`Service::say_refreshed`]) or the next such word.
pub(super) struct Refreshed {
    /// How many.
    dropped: usize,
    /// How long the node had run, and what the others waited for, as the launcher said.
    quiet_secs: u64,
    what: String,
}
