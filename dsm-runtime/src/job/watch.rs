//! Watching a running job through its nodes' control connections: what each node says (it
//! waits, for what, with what on its way; it left the job; it blames another), and whether the
//! job can still go on. dsmrun and a node 0 that starts its job itself watch their children
//! with it (`super::launcher`); rank 0 under srun or mpirun watches with it alone
//! ([`watch_from_rank0`]).

use std::io::Read;
use std::time::{Duration, Instant};

use super::wire::{Line, Lines};

/// How a node stands, as its watcher knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Standing {
    Running,
    EndedWell,
    Failed,
}

/// What the nodes say on their control connections ([`super::wire::Line`]): while they run,
/// whether they wait (`WAIT <in flight> <received> <what>`, `RUN`: see `crate::progress`); last,
/// when they end, `BYE` (the node left the job properly, once its jia_exit was complete) or
/// `BLAME <node> <why>` (it ends because it lost that node). A node writes its last words
/// before it ends, so they are there, or on their way from a remote host, by the time its exit is
/// seen; reading them waits 0.5 s at most. A line that does not parse is refused and counted.
pub(super) struct Heard {
    /// Lines other than WAIT/RUN, per node.
    lines: Vec<Vec<Line>>,
    /// Each node's connection, cut into lines.
    readers: Vec<Lines>,
    /// The node's connection was read to its end.
    drained: Vec<bool>,
    /// Per node, its last WAIT report.
    pub(super) waiting: Vec<Option<Report>>,
    /// Per node, whether it runs quiet (`QUIET`: its threads took hardly a page fault).
    quiet: Vec<bool>,
    /// When what any node does last changed: its wait (its counts aside), whether it runs
    /// quiet, whether it runs ([`Heard::quiet_runners`]).
    calm_since: Instant,
    /// When any node's report last changed.
    pub(super) changed: Instant,
    /// When any node's wait last changed, its counts aside (or it went on).
    pub(super) wait_changed: Instant,
    /// The job was said to look stuck beside a spin since `wait_changed`.
    spin_said: bool,
    /// When the nodes that run quiet were last told to drop their copies, since `wait_changed`
    /// ([`Heard::quiet_runners`]), and how long before they are told again.
    quiet_told: Option<Instant>,
    quiet_every: Duration,
    /// The `REFRESH` lines due to the quiet running nodes once every node, told `FLUSH`, has
    /// had [`FLUSH_AHEAD`] to send its writes: when, and the lines by node.
    refresh_due: Option<(Instant, Vec<(usize, Line)>)>,
    /// When each node last reported (a waiting node reports every 250 ms).
    reported: Vec<Instant>,
    /// Nodes seen ended, by the watcher's last look.
    pub(super) ended: usize,
}

/// A node's WAIT report ([`Line::Wait`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Report {
    in_flight: u64,
    received: u64,
    /// A periodic timer's handler may wake it.
    timer: bool,
    /// A thread of it spins on a word: its counts move with the spin's messages.
    spins: bool,
    what: String,
}

/// A waiting node's report older than this is stale: the node is stopped, starved or cut off
/// (it reports every 250 ms while it waits), and its wait says nothing of now.
const REPORT_FRESH_FOR: Duration = Duration::from_secs(1);

/// How long every node must wait, with nothing in flight and nothing received anywhere, before
/// the job is declared unable to go on (a few retransmission timeouts: a reply that was lost is
/// in flight, counted, until it arrives). A one-node job judges itself by it too.
pub(crate) const NO_PROGRESS_FOR: Duration = Duration::from_secs(3);

/// As [`NO_PROGRESS_FOR`] where a node's threads could still be woken by the handler of a
/// periodic real-time timer of its (a progress line every second, a watchdog counting ticks):
/// the handler has fired again and again for this long and woken nobody.
pub(crate) const TIMER_QUIET_FOR: Duration = Duration::from_secs(30);

/// As [`NO_PROGRESS_FOR`] where a node's thread spins on a word of shared memory that every
/// other thread of the job waits beside ([`crate::progress`]): the spin's own operations are
/// messages in flight and received, so what each node waits for must stay the same this long,
/// whatever its counts. Long: a spin may also end for a reason no node can see (its own
/// deadline read from the clock, a byte on a pipe it polls between its loads), which a
/// minute's wait lets through; the job says what it sees after [`SPIN_SAID_AFTER`].
pub(crate) const SPIN_QUIET_FOR: Duration = Duration::from_secs(60);

/// When a job whose nodes wait beside a spin is said to look stuck, once, before the verdict
/// at [`SPIN_QUIET_FOR`].
pub(crate) const SPIN_SAID_AFTER: Duration = Duration::from_secs(10);

/// What a job that looks stuck beside a spin is told after [`SPIN_SAID_AFTER`].
pub(crate) fn spin_warning(what: &str) -> String {
    format!(
        "the job looks stuck: every node waits for another beside a spin ({what}); it ends in {} s \
         unless something changes",
        (SPIN_QUIET_FOR - SPIN_SAID_AFTER).as_secs()
    )
}

/// How long nodes must have run quiet while every other node waits or runs quiet too, what each
/// does unchanged, before they are told to drop their copies of other nodes' pages
/// ([`Heard::quiet_runners`]); told again after twice as long each time, up to
/// [`QUIET_RUNNERS_AT_MOST`] apart, until a node's wait changes.
pub(crate) const QUIET_RUNNERS_FOR: Duration = Duration::from_secs(10);
const QUIET_RUNNERS_AT_MOST: Duration = Duration::from_secs(640);

/// How long before the quiet running nodes are told `REFRESH` every node is told `FLUSH`
/// ([`Heard::quiet_runners`]): the diffs reach the homes first (milliseconds).
const FLUSH_AHEAD: Duration = Duration::from_millis(500);

/// The most lines other than WAIT/RUN kept per node (a node says a few: BYE, BLAME, STATS).
const KEPT_LINES: usize = 64;

impl Heard {
    pub(super) fn new(n: usize) -> Heard {
        Heard {
            lines: vec![Vec::new(); n],
            readers: (0..n).map(|_| Lines::default()).collect(),
            drained: vec![false; n],
            waiting: vec![None; n],
            quiet: vec![false; n],
            calm_since: Instant::now(),
            changed: Instant::now(),
            wait_changed: Instant::now(),
            spin_said: false,
            quiet_told: None,
            quiet_every: QUIET_RUNNERS_FOR,
            refresh_due: None,
            reported: vec![Instant::now(); n],
            ended: 0,
        }
    }

    fn take_lines(&mut self, k: usize, bytes: &[u8]) {
        let mut got = Vec::new();
        self.readers[k].feed(bytes, |l| got.push(l));
        for line in got {
            match line {
                Line::Wait {
                    in_flight,
                    received,
                    timer,
                    spins,
                    what,
                } => {
                    let report = Report {
                        in_flight,
                        received,
                        timer,
                        spins,
                        what,
                    };
                    self.reported[k] = Instant::now();
                    if std::mem::take(&mut self.quiet[k]) {
                        self.calm_since = Instant::now();
                    }
                    let before = self.waiting[k].replace(report.clone());
                    if before.as_ref() != Some(&report) {
                        self.changed = Instant::now();
                    }
                    if before
                        .is_none_or(|b| (b.timer, b.spins, b.what) != (timer, spins, report.what))
                    {
                        self.wait_changed();
                    }
                }
                // A node that stops waiting changes what the job waits for; one that was quiet
                // and faults again (its own refetches after a REFRESH) changes only the calm.
                Line::Run => {
                    self.reported[k] = Instant::now();
                    self.changed = Instant::now();
                    if std::mem::take(&mut self.quiet[k]) {
                        self.calm_since = Instant::now();
                    }
                    if self.waiting[k].take().is_some() {
                        self.wait_changed();
                    }
                }
                Line::Quiet => {
                    self.reported[k] = Instant::now();
                    if !std::mem::replace(&mut self.quiet[k], true) {
                        self.changed = Instant::now();
                        self.calm_since = Instant::now();
                    }
                    if self.waiting[k].take().is_some() {
                        self.wait_changed();
                    }
                }
                // A node that left the job waits for nothing, whatever it last reported: it may
                // have gone from a long wait through its last barrier and exit between two
                // reports (250 ms apart), and its report would stay fresh while it lingers
                // after the others ended (a job was once ended as stuck so, under load).
                Line::Bye => {
                    self.waiting[k] = None;
                    self.quiet[k] = false;
                    self.changed = Instant::now();
                    self.wait_changed();
                    self.keep(k, Line::Bye);
                }
                other => self.keep(k, other),
            }
        }
    }

    /// A node's wait changed, its counts aside (or it went on, or ended).
    pub(super) fn wait_changed(&mut self) {
        self.wait_changed = Instant::now();
        self.calm_since = Instant::now();
        self.spin_said = false;
        self.quiet_told = None;
        self.quiet_every = QUIET_RUNNERS_FOR;
    }

    fn keep(&mut self, k: usize, line: Line) {
        if self.lines[k].len() < KEPT_LINES {
            self.lines[k].push(line);
        }
    }

    /// Lines refused so far, over every node's connection.
    pub(super) fn refused(&self) -> u64 {
        self.readers.iter().map(|r| r.refused).sum()
    }

    /// Reads what the nodes said since the last look, without waiting.
    pub(super) fn poll(&mut self, control: &mut [std::net::TcpStream]) {
        for (k, stream) in control.iter_mut().enumerate().take(self.lines.len()) {
            if self.drained[k] {
                continue;
            }
            let _ = stream.set_nonblocking(true);
            let mut buf = [0u8; 1024];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => {
                        self.drained[k] = true;
                        break;
                    }
                    Ok(n) => self.take_lines(k, &buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
    }

    /// Node `k`'s lines, read to the end of its connection (`None`: no connection to read).
    pub(super) fn of(&mut self, control: &mut [std::net::TcpStream], k: usize) -> Option<&[Line]> {
        let stream = control.get_mut(k)?;
        if k >= self.lines.len() {
            return None;
        }
        if !self.drained[k] {
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut buf = [0u8; 1024];
            loop {
                match stream.read(&mut buf) {
                    Ok(n) if n > 0 && self.lines[k].len() < KEPT_LINES => {
                        self.take_lines(k, &buf[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    _ => break,
                }
            }
            self.drained[k] = true;
        }
        Some(&self.lines[k])
    }

    /// Node `k` by its control connection alone: one read to its end after `BYE` left the job,
    /// one read to its end without it failed.
    pub(super) fn standing(&self, k: usize) -> Standing {
        match self.drained.get(k) {
            Some(true) if self.lines[k].contains(&Line::Bye) => Standing::EndedWell,
            Some(true) => Standing::Failed,
            _ => Standing::Running,
        }
    }

    pub(super) fn said_goodbye(&mut self, control: &mut [std::net::TcpStream], k: usize) -> bool {
        self.of(control, k).is_some_and(|l| l.contains(&Line::Bye))
    }

    /// The node `k` blamed for its end, and why.
    pub(super) fn blamed(
        &mut self,
        control: &mut [std::net::TcpStream],
        k: usize,
    ) -> Option<(usize, String)> {
        self.of(control, k)?.iter().find_map(|l| match l {
            Line::Blame { node, why } => Some((usize::from(*node), why.clone())),
            _ => None,
        })
    }

    /// Node 0's statistics of every node (JSON), if it sent them.
    pub(super) fn stats(&mut self, control: &mut [std::net::TcpStream]) -> Option<String> {
        self.of(control, 0)?.iter().find_map(|l| match l {
            Line::Stats(json) => Some(json.clone()),
            _ => None,
        })
    }

    /// Whether the job can no longer go on: every node still running waits, none has anything
    /// in flight, and no report changed for [`NO_PROGRESS_FOR`] ([`TIMER_QUIET_FOR`] where a
    /// node's periodic timer may wake it). Where a node's thread spins on a word, the spin's
    /// messages are in flight and received: then every node's wait, its counts aside, must
    /// not have changed for [`SPIN_QUIET_FOR`]. Returns what each node waits for.
    /// `standing[k]` is how node `k` stands.
    pub(super) fn stuck(&self, standing: &[Standing]) -> Option<String> {
        let quiet_for = if self.spins() {
            SPIN_QUIET_FOR
        } else {
            NO_PROGRESS_FOR
        };
        self.all_wait(standing, quiet_for)
    }

    /// Whether node `k` reported within [`REPORT_FRESH_FOR`].
    fn fresh(&self, k: usize) -> bool {
        self.reported
            .get(k)
            .is_some_and(|t| t.elapsed() <= REPORT_FRESH_FOR)
    }

    /// Whether a waiting node says a thread of it spins.
    fn spins(&self) -> bool {
        self.waiting.iter().flatten().any(|r| r.spins)
    }

    /// Once a job has looked stuck beside a spin for [`SPIN_SAID_AFTER`] (and again after any
    /// change): what every node waits for, to be said before the verdict.
    pub(super) fn spin_looks_stuck(&mut self, standing: &[Standing]) -> Option<String> {
        if self.spin_said || !self.spins() {
            return None;
        }
        let what = self.all_wait(standing, SPIN_SAID_AFTER)?;
        self.spin_said = true;
        Some(what)
    }

    /// What to tell the nodes of a job none of whose running nodes works: each waits or runs
    /// quiet (`QUIET`: its threads took fewer than 4 page faults in the last second, whatever
    /// messages it serves or sends), at least one runs quiet beside another node, every report is fresh, and what
    /// each node does has not changed for [`QUIET_RUNNERS_FOR`] (their counts and what they
    /// have on its way aside: a quiet node may serve a spinning one's atomic loads, or another
    /// thread of it take and release a lock another node manages, whose acknowledgements wait
    /// for the next request). A thread of a quiet node may read another node's word in a loop on
    /// plain loads, which shows no write of that node before an acquire of its own, which may
    /// never come: beside a node that waits for it (in a barrier), or beside another such loop
    /// (two nodes that hand a flag back and forth), it ran for ever, silent. Every node is told
    /// `FLUSH` (its written copies' diffs go to the pages' homes: a write may not have been
    /// released, its writer waiting for a lock the spinner holds, or spinning itself), and
    /// [`FLUSH_AHEAD`] later the quiet ones `REFRESH` (they drop their copies of other nodes'
    /// pages, and read the homes' bytes), each with what the others do. Nodes that compute on
    /// what they hold pay a refetch of what they read, told again after twice as long each
    /// time. Returns the lines due now, by node.
    pub(super) fn quiet_runners(&mut self, standing: &[Standing]) -> Vec<(usize, Line)> {
        if let Some((_, lines)) = self
            .refresh_due
            .take_if(|(at, _)| at.elapsed() >= FLUSH_AHEAD)
        {
            return lines;
        }
        let quiet = self.calm_since.elapsed();
        if quiet < QUIET_RUNNERS_FOR
            || self
                .quiet_told
                .is_some_and(|t| t.elapsed() < self.quiet_every)
        {
            return Vec::new();
        }
        let mut nodes = Vec::new();
        for (k, s) in standing.iter().enumerate() {
            if *s != Standing::Running {
                continue;
            }
            if !self.fresh(k) {
                return Vec::new();
            }
            let doing = match self.waiting.get(k) {
                Some(Some(r)) => r.what.clone(),
                Some(None) if self.quiet[k] => "runs on the pages it holds".to_owned(),
                _ => return Vec::new(),
            };
            nodes.push((k, self.quiet[k], doing));
        }
        let runners = nodes.iter().filter(|(_, quiet, _)| *quiet).count();
        if runners == 0 || nodes.len() < 2 {
            return Vec::new();
        }
        // The next telling after twice as long (10, 30, 70 s...): the refetches that follow a
        // telling start the quiet over.
        self.quiet_every = (self.quiet_every * 2).min(QUIET_RUNNERS_AT_MOST);
        self.quiet_told = Some(Instant::now());
        let refreshes = nodes
            .iter()
            .filter(|(_, quiet, _)| *quiet)
            .map(|&(k, _, _)| {
                let others: Vec<String> = nodes
                    .iter()
                    .filter(|(o, _, _)| *o != k)
                    .map(|(o, _, doing)| format!("node {o} {doing}"))
                    .collect();
                let refresh = Line::Refresh {
                    quiet_secs: quiet.as_secs(),
                    what: others.join("; "),
                };
                (k, refresh)
            })
            .collect();
        self.refresh_due = Some((Instant::now(), refreshes));
        nodes
            .into_iter()
            .map(|(k, _, _)| (k, Line::Flush))
            .collect()
    }

    /// What every running node waits for, if each does, with fresh reports, and nothing
    /// changed for `quiet_for` (with a spin: no node's wait, its counts aside; without one,
    /// nothing in flight either; [`TIMER_QUIET_FOR`] at least where a node's periodic timer may
    /// wake it).
    fn all_wait(&self, standing: &[Standing], quiet_for: Duration) -> Option<String> {
        let spins = self.spins();
        let quiet = if spins {
            self.wait_changed.elapsed()
        } else {
            self.changed.elapsed()
        };
        if quiet < quiet_for {
            return None;
        }
        let mut what = Vec::new();
        for (k, s) in standing.iter().enumerate() {
            match s {
                Standing::Running => {}
                // A node that ended well (it left the job) may be what the others wait for.
                Standing::EndedWell => continue,
                // One that failed is the story, not the others' wait: it is named as such.
                Standing::Failed => return None,
            }
            // Every verdict rests on every running node's fresh word: a stopped node's last
            // report may be seconds old.
            if !self.fresh(k) {
                return None;
            }
            match self.waiting.get(k)? {
                Some(r)
                    if (r.in_flight == 0 || spins) && (!r.timer || quiet >= TIMER_QUIET_FOR) =>
                {
                    what.push(format!("node {k} {}", r.what))
                }
                _ => return None,
            }
        }
        (!what.is_empty()).then(|| what.join("; "))
    }
}

/// Rank 0 of a job started by srun or mpirun watches it as dsmrun does (those launchers cannot
/// see a node that waits forever): it reads every node's control connection, and when every
/// node waits for another with nothing on its way, tells them all (`STUCK`): each ends, rank 0
/// saying what every node waited for. Returns once every connection is closed.
pub(crate) fn watch_from_rank0(mut control: Vec<std::net::TcpStream>) {
    use std::os::fd::AsFd;
    let mut words = Heard::new(control.len());
    loop {
        words.poll(&mut control);
        if words.drained.iter().all(|&d| d) {
            return;
        }
        let standing: Vec<Standing> = (0..control.len()).map(|k| words.standing(k)).collect();
        if let Some(what) = words.spin_looks_stuck(&standing) {
            crate::sys::write_stderr(
                format!("dsm node 0: warning: {}\n", spin_warning(&what)).as_bytes(),
            );
        }
        for (k, line) in words.quiet_runners(&standing) {
            tell_one(&mut control, k, &line);
        }
        if let Some(what) = words.stuck(&standing) {
            // The other ranks first, rank 0 (connection 0) once they have read the line: rank
            // 0's node ends as soon as it is told, and this thread with it, and a connection
            // closed with a node's reports unread is reset, which may overtake the line (rank
            // 1 then waited 10 s and blamed rank 0, once in a full-suite run).
            // Said here first: mpirun ends every rank once one exits with its status.
            crate::door::end::say_verdict(&stuck_verdict(&what));
            let line = Line::Stuck(what).encode();
            let split = 1.min(control.len());
            tell(&mut control[split..], &line);
            let deadline = Instant::now() + Duration::from_secs(5);
            while !words.drained[split..].iter().all(|&d| d) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                words.poll(&mut control);
            }
            tell(&mut control[..split], &line);
            while !words.drained.iter().all(|&d| d) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                words.poll(&mut control);
            }
            return;
        }
        let open: Vec<_> = control
            .iter()
            .zip(&words.drained)
            .filter(|(_, d)| !**d)
            .map(|(c, _)| c.as_fd())
            .collect();
        crate::sys::wait_readable(&open, Duration::from_millis(100));
    }
}

/// Sends `line` to node `k` through its control channel.
pub(super) fn tell_one(control: &mut [std::net::TcpStream], k: usize, line: &Line) {
    if let Some(c) = control.get_mut(k..=k) {
        tell(c, &line.encode());
    }
}

/// Sends `line` to every node through its control channel.
pub(super) fn tell(control: &mut [std::net::TcpStream], line: &str) {
    if line.is_empty() {
        return;
    }
    for c in control.iter_mut() {
        let _ = c.set_nonblocking(false);
        let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = std::io::Write::write_all(c, line.as_bytes());
    }
}

/// The verdict on a job whose every node waits for another: what dsmrun and rank 0's watch say
/// (`JobFailure::Stuck`).
pub(crate) fn stuck_verdict(what: &str) -> String {
    format!("the job cannot go on, every node waits for another and nothing is on its way: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(what: &str, in_flight: u64) -> Vec<u8> {
        waits_counted(what, in_flight, 3, false)
    }

    fn waits_counted(what: &str, in_flight: u64, received: u64, spins: bool) -> Vec<u8> {
        Line::Wait {
            in_flight,
            received,
            timer: false,
            spins,
            what: what.into(),
        }
        .encode()
        .into_bytes()
    }

    /// Nodes 0 and 2 wait; node 1 runs quiet. `quiet`: how long ago the reports last changed.
    fn heard(quiet: Duration) -> Heard {
        let mut h = Heard::new(3);
        h.take_lines(0, &waits("waits in jia_barrier", 0));
        h.take_lines(1, &Line::Quiet.encode().into_bytes());
        h.take_lines(2, &waits("waits in jia_lock(1)", 0));
        h.calm_since = Instant::now() - quiet;
        h
    }

    /// Lines told, by node.
    type Told = Vec<(usize, Line)>;

    /// The lines due now, and, [`FLUSH_AHEAD`] on, the `REFRESH` lines due after them.
    fn told(h: &mut Heard, standing: &[Standing]) -> (Told, Told) {
        let now = h.quiet_runners(standing);
        if let Some((at, _)) = &mut h.refresh_due {
            *at -= FLUSH_AHEAD;
        }
        (now, h.quiet_runners(standing))
    }

    fn refresh(k: usize, what: &str) -> (usize, Line) {
        (
            k,
            Line::Refresh {
                quiet_secs: QUIET_RUNNERS_FOR.as_secs() + 1,
                what: what.into(),
            },
        )
    }

    fn flush(nodes: &[usize]) -> Told {
        nodes.iter().map(|&k| (k, Line::Flush)).collect()
    }

    #[test]
    fn quiet_nodes_are_told_after_a_quiet_while_then_less_and_less_often() {
        let all = [Standing::Running; 3];
        let mut h = heard(QUIET_RUNNERS_FOR - Duration::from_secs(1));
        assert_eq!(
            told(&mut h, &all),
            (vec![], vec![]),
            "not quiet long enough"
        );
        h.calm_since -= Duration::from_millis(2500);
        let both = "node 0 waits in jia_barrier; node 2 waits in jia_lock(1)";
        assert_eq!(
            told(&mut h, &all),
            (flush(&[0, 1, 2]), vec![refresh(1, both)]),
            "every node flushes, then the quiet one drops its copies"
        );
        assert_eq!(told(&mut h, &all), (vec![], vec![]), "just told");
        let told_ago = |h: &mut Heard, d: Duration| h.quiet_told = Some(Instant::now() - d);
        told_ago(&mut h, QUIET_RUNNERS_FOR + Duration::from_secs(1));
        assert_eq!(
            told(&mut h, &all),
            (vec![], vec![]),
            "again after twice as long"
        );
        told_ago(&mut h, 2 * QUIET_RUNNERS_FOR + Duration::from_secs(1));
        assert_eq!(told(&mut h, &all).1.len(), 1, "told again");
        told_ago(&mut h, 2 * QUIET_RUNNERS_FOR + Duration::from_secs(1));
        assert_eq!(
            told(&mut h, &all),
            (vec![], vec![]),
            "then after twice as long again"
        );
        told_ago(&mut h, 4 * QUIET_RUNNERS_FOR + Duration::from_secs(1));
        assert_eq!(told(&mut h, &all).1.len(), 1);
        // A wait that changes starts the calm and the pace over (a REFRESH due stays due: the
        // FLUSH may be what let a waiting node go on).
        h.wait_changed();
        assert_eq!(h.quiet_runners(&all), vec![], "calm again first");
        h.calm_since -= QUIET_RUNNERS_FOR;
        assert_eq!(h.quiet_runners(&all).len(), 3, "told at once, calm");
        h.wait_changed();
        assert!(h.refresh_due.is_some());
    }

    #[test]
    fn nobody_is_told_while_a_node_works_or_a_report_is_stale() {
        let quiet = QUIET_RUNNERS_FOR + Duration::from_millis(1500);
        let all = [Standing::Running; 3];
        let mut h = heard(quiet);
        h.take_lines(2, &Line::Quiet.encode().into_bytes());
        h.calm_since = Instant::now() - quiet;
        assert_eq!(
            told(&mut h, &all),
            (
                flush(&[0, 1, 2]),
                vec![
                    refresh(
                        1,
                        "node 0 waits in jia_barrier; node 2 runs on the pages it holds"
                    ),
                    refresh(
                        2,
                        "node 0 waits in jia_barrier; node 1 runs on the pages it holds"
                    ),
                ]
            ),
            "nodes 1 and 2 run quiet beside node 0"
        );
        let mut h = heard(quiet);
        h.take_lines(2, &Line::Run.encode().into_bytes());
        h.calm_since = Instant::now() - quiet;
        assert_eq!(told(&mut h, &all), (vec![], vec![]), "node 2 works");
        // A waiting node whose counts move, with bytes on their way (it manages a lock a quiet
        // node takes and releases; it spins on a word the quiet node serves) leaves the calm
        // as it is.
        let mut h = heard(quiet);
        h.take_lines(2, &waits_counted("waits in a spin on the word", 2, 7, true));
        h.calm_since = Instant::now() - quiet;
        h.take_lines(0, &waits_counted("waits in jia_barrier", 1, 99, false));
        h.take_lines(
            2,
            &waits_counted("waits in a spin on the word", 1, 70, true),
        );
        assert_eq!(
            told(&mut h, &all),
            (
                flush(&[0, 1, 2]),
                vec![refresh(
                    1,
                    "node 0 waits in jia_barrier; node 2 waits in a spin on the word"
                )]
            )
        );
        for stale in [0, 1] {
            let mut h = heard(quiet);
            h.reported[stale] = Instant::now() - 2 * REPORT_FRESH_FOR;
            assert_eq!(
                told(&mut h, &all),
                (vec![], vec![]),
                "node {stale}'s report is stale"
            );
        }
        // A node that ended well waits for nobody; one that runs quiet beside a waiting one is
        // told, and so are two that run quiet beside each other, nobody waiting.
        let mut h = heard(quiet);
        let ended = [Standing::Running, Standing::Running, Standing::EndedWell];
        assert_eq!(
            told(&mut h, &ended),
            (
                flush(&[0, 1]),
                vec![refresh(1, "node 0 waits in jia_barrier")]
            )
        );
        let mut h = heard(quiet);
        let nobody_waits = [Standing::EndedWell, Standing::Running, Standing::EndedWell];
        assert_eq!(
            told(&mut h, &nobody_waits),
            (vec![], vec![]),
            "nobody waits for node 1"
        );
        let mut h = heard(quiet);
        h.take_lines(0, &Line::Quiet.encode().into_bytes());
        h.calm_since = Instant::now() - quiet;
        assert_eq!(
            told(&mut h, &ended),
            (
                flush(&[0, 1]),
                vec![
                    refresh(0, "node 1 runs on the pages it holds"),
                    refresh(1, "node 0 runs on the pages it holds"),
                ]
            ),
            "nodes 0 and 1 run quiet beside each other"
        );
    }

    #[test]
    fn a_quiet_node_that_works_again_keeps_the_refresh_due_and_the_pace() {
        let quiet = QUIET_RUNNERS_FOR + Duration::from_millis(1500);
        let all = [Standing::Running; 3];
        let mut h = heard(quiet);
        assert_eq!(h.quiet_runners(&all).len(), 3, "told FLUSH");
        // The diffs the FLUSH sent reach node 1: it works, then runs quiet again.
        h.take_lines(1, &Line::Run.encode().into_bytes());
        h.take_lines(1, &Line::Quiet.encode().into_bytes());
        assert!(
            h.calm_since.elapsed() < QUIET_RUNNERS_FOR,
            "the calm starts over"
        );
        let (at, _) = h.refresh_due.as_mut().expect("the REFRESH is still due");
        *at -= FLUSH_AHEAD;
        assert_eq!(h.quiet_runners(&all).len(), 1, "told REFRESH");
        assert_eq!(h.quiet_every, 2 * QUIET_RUNNERS_FOR, "the pace is kept");
        // A node that stops waiting starts the pace over.
        h.take_lines(0, &Line::Run.encode().into_bytes());
        assert_eq!(h.quiet_every, QUIET_RUNNERS_FOR);
    }
}
