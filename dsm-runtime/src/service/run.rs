//! The service thread's loop: a pass when there is work; otherwise spin for a bounded time while
//! an application thread waits on the node, then sleep in epoll.
//!
//! Why it waits as it does (each a key of [`crate::config::Tuning`]):
//!
//! - `spin_blocked_us`: while an application thread is blocked on the node (a fault, a lock, a
//!   barrier), the loop spins this long before it sleeps. A reply is usually tens of
//!   microseconds away, and a sleeping thread pays a wake-up (up to hundreds of microseconds when
//!   its CPU went idle). Longer spins cost more than they save where CPUs are shared: a spinning
//!   service thread takes time from the computing threads of the other nodes, and its yields
//!   cost it its standing with the scheduler.
//! - `spin_again_us` (0 by default): after resuming a thread from a call, the loop spins this
//!   long for its next request, but only if the last time a thread was resumed from the same
//!   call its next request came this soon (a lock's holder releases soon; a thread back from a
//!   release or a barrier computes). Off by default: the spins cost the service thread its
//!   standing with the scheduler (EEVDF lag), and its next wake-up, to serve another node while
//!   its own thread computes, then waited for a whole slice (tsp 14, 2 nodes on 2 CPUs: 0.440 s
//!   with 100 us, 0.394 s without).
//! - `service_slice_us`: the time slice the service thread asks the scheduler for
//!   (`sched_setattr`, Linux 6.12 and later). Under EEVDF, `sched_yield` moves the yielding
//!   thread's deadline a whole slice ahead: after spinning, a service thread preempted by a
//!   computing thread waited for that thread's slice to end, and a page request from another
//!   node waited with it. With a short slice each yield costs little, and a wake-up of the
//!   service thread preempts the computation it shares a CPU with.
//! - `service_priority` (`realtime` by default): the thread sleeps for messages in the realtime
//!   class (`SCHED_FIFO`) where the process may, and serves what wakes it there ([`Standing`]).
//!   Time-sharing alone, a service thread that had used up its slice was preempted by its
//!   node's computing thread at a scheduler tick, runnable but off the CPU: a message that came
//!   then woke nobody, and waited for the next tick (4 ms at 250 Hz). faultlat's remote read
//!   fault while the home computes: up to 4 ms, 4-9 faults in 500 over 100 us; realtime, 0.5 ms
//!   at most. It leaves the class before it spins or yields, while it naps with the launcher's
//!   channel unread, and once it has gone [`REALTIME_BUDGET`] without blocking (up to twice
//!   that: it looks once per budget); a node started in another class (`chrt`) keeps that
//!   class.
//!
//! Measurements behind the defaults: `docs/perf/`.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Driving, EXIT_GRACE, POLLS_PER_PASS, STATE, Service};
use crate::door::end::{EXIT_PEER_FAILED, fatal, fatal_with};
use crate::door::flags::{DRIVE, DRIVEN, DRIVEN_NAP, EXITED};
use crate::door::request::FaultOutcome;
use crate::door::{SLOTS, context, fastpath};
use crate::sys::{self, Epoll};

/// The longest the service thread sleeps (it looks at the fault handlers once a second).
const WATCH: Duration = Duration::from_secs(1);

/// The longest the service thread stays in the realtime class without blocking once: then it
/// goes back to time-sharing until it has blocked again (a flood of requests shares the CPU
/// with the node's computation as before).
const REALTIME_BUDGET: Duration = Duration::from_millis(1);

/// The service thread's sleeps for messages (`--stats`: `service_sleeps`).
pub(super) static SLEEPS: AtomicU64 = AtomicU64::new(0);
/// Of them, those in the realtime class (`service_sleeps_realtime`).
pub(super) static SLEEPS_REALTIME: AtomicU64 = AtomicU64::new(0);

/// The service thread's standing with the scheduler (`service_priority`): realtime from the
/// moment it sleeps for messages until it spins or yields ([`sys::sched_yield`] leaves the class
/// itself), naps with the launcher's channel unread while another thread drives the node, or has
/// gone [`REALTIME_BUDGET`] without blocking (looked at once per budget: up to twice as long).
/// After a yield or a nap it enters again at its next sleep for messages; after the budget, at
/// a sleep once it has blocked. Only the service thread changes its class, with asynchronous
/// signals blocked (`set_realtime` is not reentrant).
struct Standing {
    /// Realtime is asked for, the thread started time-sharing, and the kernel did not refuse.
    wanted: bool,
    /// Since when the budget runs.
    since: Instant,
    /// The thread's voluntary context switches then (`sys::blocked_count`): more now, and it has
    /// blocked since.
    blocked_then: u64,
    /// The budget is spent: time-sharing until the thread has blocked again.
    spent: bool,
}

impl Standing {
    fn new(wanted: bool) -> Standing {
        Standing {
            wanted,
            since: Instant::now(),
            blocked_then: sys::blocked_count(),
            spent: false,
        }
    }

    /// Whether the thread blocked since the budget started; if so, it starts again now.
    fn blocked_since(&mut self, now: Instant) -> bool {
        let blocked = sys::blocked_count();
        if blocked == self.blocked_then {
            return false;
        }
        self.blocked_then = blocked;
        self.since = now;
        true
    }

    /// The thread is about to sleep for messages: realtime, if asked for (and, once the budget
    /// was spent, after the thread has blocked again).
    fn before_sleep(&mut self) {
        if !self.wanted || sys::is_realtime() {
            return;
        }
        if self.spent {
            if !self.blocked_since(Instant::now()) {
                return;
            }
            self.spent = false;
        }
        if let Err(e) = sys::set_realtime(true) {
            log::debug!(
                "the service thread stays time-sharing ({e}): realtime needs CAP_SYS_NICE or an RLIMIT_RTPRIO of 1 or more"
            );
            self.wanted = false;
            return;
        }
        // The budget runs from here: blocks before do not count.
        self.since = Instant::now();
        self.blocked_then = sys::blocked_count();
    }

    /// The thread waits for another that drives the node and its nap returns at once (the
    /// launcher's channel is unread): realtime, it would keep that thread off a CPU they share.
    fn leave(&mut self) {
        let _ = sys::set_realtime(false);
    }

    /// A pass is done: back to time-sharing if the thread has not blocked for
    /// [`REALTIME_BUDGET`] (looked at once per budget: one system call).
    fn worked(&mut self, now: Instant) {
        if sys::is_realtime() && now - self.since > REALTIME_BUDGET && !self.blocked_since(now) {
            self.spent = true;
            let _ = sys::set_realtime(false);
        }
    }
}

/// The spinning service thread yields every this many polls (see the yield in [`run`]): a thread
/// woken on its CPU waits a microsecond at most, and the yields (0.2 us each) do not slow the
/// polling.
const POLLS_PER_YIELD: u32 = 4;

/// The longest the service thread goes without the node's state while other threads hold it
/// (see [`run`]): then it waits for it.
const STATE_AT_LEAST_EVERY: Duration = Duration::from_millis(50);

/// The service thread: runs the node until it has exited.
pub(crate) fn run(service: Service) {
    context::mark_service_thread();
    let tuning = service.tuning;
    DRIVE.store(tuning.drive, Ordering::SeqCst);
    let spin_again = Duration::from_micros(u64::from(tuning.spin_again_us));
    let spin_blocked = Duration::from_micros(u64::from(tuning.spin_blocked_us));
    let slice = Duration::from_micros(u64::from(tuning.service_slice_us));
    // A process started in another class (`chrt`) keeps it: no slice, no realtime.
    let time_sharing = sys::is_time_sharing();
    if !time_sharing {
        log::debug!("the service thread keeps the scheduling class the node was started in");
    }
    if time_sharing && !slice.is_zero() {
        if let Err(e) = sys::request_time_slice(slice) {
            log::debug!("cannot ask for a {slice:?} time slice: {e}");
        }
    }
    let mut standing = Standing::new(tuning.service_realtime && time_sharing);
    let epoll = service.epoll.clone();
    let quiet = service.quiet.clone();
    let evfd = service.evfd.as_raw_fd();
    *STATE.lock() = Some(service);
    let mut ready = Vec::with_capacity(64);
    let mut last_busy = Instant::now();
    let mut woke_for_control = false;
    let mut seen_driven = 0;
    // Polls since the last full pass while spinning (0: not spinning, a full pass is next).
    let mut polls = 0u32;
    // Since when this thread has gone without the state (`None`: it held it at its last pass;
    // the clock is read only when it does not get it).
    let mut without_state: Option<Instant> = None;
    loop {
        // The launcher's channel and the node's report wait for the state: a thread that runs
        // its own requests back to back (a spin on a word homed here, millions of atomic
        // operations a second) kept it from this thread for as long as it ran (the node never
        // reported its spin, nor read a verdict).
        let mut due =
            || without_state.get_or_insert_with(Instant::now).elapsed() > STATE_AT_LEAST_EVERY;
        // A thread waits for the state to run its own request (`door::state`): leave it to it,
        // and the CPU too if it shares ours.
        if STATE.wanted() && !due() {
            sys::sched_yield();
            continue;
        }
        let mut driving = match Driving::service() {
            Some(d) => d,
            // Requests wait (calls, which handlers do not run), or the state is due: take it
            // as soon as the thread holding it lets go of it (threads run their own requests
            // only while nothing is posted, so they do not take it back first).
            None if SLOTS.posted() > 0 || due() => Driving::service_waiting(),
            None => {
                // A fault handler drives the node and watches the network meanwhile (or a
                // thread runs its call).
                STATE.set_napping(true);
                // The launcher's channel, unread until the state is ours, keeps the nap from
                // sleeping at all.
                if woke_for_control {
                    standing.leave();
                }
                // Reports waiting do not end the nap: they wait for the state, which another
                // thread holds (looking at them, the nap ended at once, again and again).
                woke_for_control |= nap(&quiet, evfd, &mut ready, driven_nap());
                last_busy = Instant::now();
                // Naps that end at once (wake-ups for fast-path reports) are work too.
                standing.worked(last_busy);
                continue;
            }
        };
        without_state = None;
        let Some(s) = driving.state() else { return };
        // What the core work left for this thread (wherever it ran), before anything else.
        crate::logging::write_deferred();
        if !s.deferred.is_empty() {
            s.run_deferred();
        }
        // Spinning (see below): between full passes, only poll for work.
        if (1..POLLS_PER_PASS).contains(&polls) && !s.ready() {
            polls += 1;
            driving.let_go();
            if polls % POLLS_PER_YIELD == 0 {
                sys::sched_yield();
            }
            continue;
        }
        polls = 0;
        let busy = driving.poll(false);
        let Some(s) = driving.state() else { return };
        if std::mem::take(&mut woke_for_control)
            || s.control_checked.elapsed() > Duration::from_millis(10)
        {
            s.check_control();
            s.warn_if_thrashing();
            s.check_fault_handlers();
            s.check_program_threads();
        }
        s.report_progress();
        // What the pass left for this thread (the job's statistics at exit among it), before
        // the node may leave; a page read again after the launcher's word is said before too.
        if !s.deferred.is_empty() {
            s.run_deferred();
        }
        s.say_refreshed();
        s.error_sent();
        if s.exit_finished() {
            // What came last (the exit grant) is acknowledged before the transport closes, or
            // its sender waits out its linger for the acknowledgement.
            s.acknowledge_what_came();
            // Closing the transport tells the other nodes this one is done.
            crate::trace::write(s.node.id().0);
            // Before the state goes: a fault posted from here on finds the node gone, and one
            // posted before is answered so (see `Slots::post_fault_unless`).
            EXITED.store(true, Ordering::SeqCst);
            // Against the poster's store of its fault, fence, then look (`Slots::post`).
            std::sync::atomic::fence(Ordering::SeqCst);
            // A write from here on would reach no other node: it faults (the fault handler
            // opens nothing once the node left), and ends the node.
            s.node.close_writes();
            SLOTS.take_posted(true, |i, _| {
                SLOTS.complete_fault(i, FaultOutcome::Left, true);
            });
            driving.end();
            return;
        }
        if let Some((at, msg)) = &s.lost_in_exit {
            if at.elapsed() > EXIT_GRACE {
                fatal_with(msg, EXIT_PEER_FAILED);
            }
        }
        s.check_rank0_gone();
        let now = Instant::now();
        standing.worked(now);
        if busy {
            last_busy = now;
            continue;
        }
        // Spin while one of our application threads is blocked on us, or was just resumed and
        // tends to ask again at once: otherwise the CPU is better left to its computation, and a
        // message wakes us.
        let blocked = SLOTS.blocked() > 0;
        let asks_again = s.asks_again_within(now, spin_again);
        if (blocked && now - last_busy < spin_blocked) || asks_again {
            // Spinning, the service thread reads the transport itself: out of the epoll set
            // (see `set_transport_watched`) until it sleeps there again.
            s.set_transport_watched(false);
            driving.let_go();
            // Yield at every pass: a thread woken on this CPU (the application thread this loop
            // just resumed, another node's thread on a shared machine) runs at once. Spinning
            // without yielding left a resumed thread waiting 17 us in one run of two (remote
            // read fault 45-55 us instead of 30-32, 2 nodes on 2 CPUs).
            sys::sched_yield();
            polls = 1;
            continue;
        }
        // A second at most: the fault handlers are looked at every second (see
        // `check_fault_handlers`), in a one-node job too.
        // To the nanosecond: a report due at an instant is made then, not at whatever wakes
        // the thread in the millisecond after it (see `report_progress`).
        let mut timeout = s.next_deadline().map_or(WATCH, |d| {
            d.saturating_duration_since(Instant::now()).min(WATCH)
        });
        // Fault handlers drove the node since we last looked: they may have left
        // acknowledgements owed (within the peers' smallest retransmission timeout, 2 ms).
        let driven = DRIVEN.load(Ordering::Relaxed);
        if driven != seen_driven {
            seen_driven = driven;
            timeout = timeout.min(driven_nap());
        }
        s.set_transport_watched(true);
        // Set while the state is still ours: a handler that takes it next knows the transport
        // would wake us.
        STATE.set_sleeps_on_transport(true);
        driving.let_go();
        STATE.set_napping(timeout <= driven_nap());
        standing.before_sleep();
        // Counted before the realtime ones, which are read first (`Service::runtime_counters`):
        // never more realtime sleeps than sleeps.
        SLEEPS.fetch_add(1, Ordering::Release);
        if sys::is_realtime() {
            SLEEPS_REALTIME.fetch_add(1, Ordering::Release);
        }
        woke_for_control = sleep(&epoll, evfd, &mut ready, timeout);
        STATE.set_sleeps_on_transport(false);
        last_busy = Instant::now();
    }
}

/// [`DRIVEN_NAP`] as a duration.
fn driven_nap() -> Duration {
    Duration::from_millis(DRIVEN_NAP as u64)
}

/// Sleeps in `epoll` until a request, a message or the launcher wakes the service thread, or
/// `timeout` passes; returns whether the launcher's control channel is readable. Not at all
/// while a fast-path report that wants it awake waits (one queued as the thread fell asleep
/// did not wake it); the others wait for its next pass.
fn sleep(epoll: &Epoll, evfd: i32, ready: &mut Vec<(u64, u32)>, timeout: Duration) -> bool {
    wait_in_epoll(epoll, evfd, ready, timeout, fastpath::wake_wanted)
}

/// [`sleep`] while another thread holds the node's state: reports waiting do not keep it awake.
fn nap(epoll: &Epoll, evfd: i32, ready: &mut Vec<(u64, u32)>, timeout: Duration) -> bool {
    wait_in_epoll(epoll, evfd, ready, timeout, || false)
}

fn wait_in_epoll(
    epoll: &Epoll,
    evfd: i32,
    ready: &mut Vec<(u64, u32)>,
    timeout: Duration,
    reported: impl FnOnce() -> bool,
) -> bool {
    ready.clear();
    if let Some(Err(e)) = SLOTS.service_sleep(reported, || epoll.ready_within(timeout, ready)) {
        fatal(&format!("epoll_wait failed: {e}"));
    }
    sys::eventfd_drain(evfd);
    ready.iter().any(|&(token, _)| token == 2)
}

#[cfg(test)]
mod tests {
    use super::{REALTIME_BUDGET, Standing};
    use crate::sys;
    use std::time::{Duration, Instant};

    /// The budget: a thread that works in the realtime class without blocking goes back to
    /// time-sharing after [`REALTIME_BUDGET`] (twice at most), stays there at a sleep until it
    /// has blocked, and enters again at the sleep after a block.
    #[test]
    fn a_service_thread_that_never_blocks_leaves_the_realtime_class() {
        std::thread::spawn(|| {
            let mut standing = Standing::new(true);
            standing.before_sleep();
            if !standing.wanted {
                eprintln!(
                    "skipped: this process may not enter the realtime class (no CAP_SYS_NICE, RLIMIT_RTPRIO 0)"
                );
                return;
            }
            assert!(sys::is_realtime());
            // Work without blocking (a preemption is not a block).
            let start = Instant::now();
            while sys::is_realtime() {
                assert!(
                    start.elapsed() < REALTIME_BUDGET * 4,
                    "still realtime after {:?} without blocking",
                    start.elapsed()
                );
                standing.worked(Instant::now());
            }
            assert!(start.elapsed() >= REALTIME_BUDGET, "left before the budget");
            assert!(standing.spent);
            // Not blocked since: stays time-sharing at the next sleep.
            standing.before_sleep();
            assert!(!sys::is_realtime());
            std::thread::sleep(Duration::from_millis(1));
            standing.before_sleep();
            assert!(sys::is_realtime(), "blocked since, it enters again");
            sys::sched_yield();
            assert!(!sys::is_realtime(), "a yield leaves the class");
        })
        .join()
        .expect("the test's thread");
    }
}
