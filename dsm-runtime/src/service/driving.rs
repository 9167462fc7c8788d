//! Driving the node: the one interface through which a thread runs the node's state, whichever
//! thread it is. The service thread drives it most of the time ([`Driving::service`],
//! [`Driving::service_waiting`]); a fault
//! handler that finds it free drives it until its page is in, and an application thread runs its
//! call on it ([`Driving::own`]). Each then runs requests ([`Driving::run`]), polls
//! ([`Driving::poll`], [`Driving::poll_until_done`]), and lets go ([`Driving::let_go`]), which
//! says what is left for the service thread and wakes it for that, after the state is free.
//!
//! Where it runs: wherever the state is held (signal context in a fault handler's drive: see
//! the contract in `crate::fault`).

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{POLLS_PER_CLOCK, POLLS_PER_PASS, STATE, Service};
use crate::door::SLOTS;
use crate::door::flags::DRIVE;
use crate::door::request::Request;
use crate::door::state::Held;
use crate::sys;

/// Who drives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Who {
    /// The service thread.
    Service,
    /// A fault handler or an application thread, for its own request.
    Own,
}

/// The node's state held by a thread to drive it.
pub(crate) struct Driving<'a> {
    held: Held<'a, Service>,
    who: Who,
    /// The slot whose request this thread runs on the state, once [`Driving::run`] took it.
    own: Option<usize>,
    /// Frames the node had sent when the own request was run.
    sent_before: u64,
    /// The own request's wait was polled here ([`Driving::poll_until_done`]): the transport
    /// was read until its answer came.
    polled: bool,
}

/// What a thread's drive left for the service thread, said when it let go.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Left {
    /// The own request is not done: its wait was handed back to the service thread.
    pub(crate) handed_back: bool,
}

/// How a fault handler's poll of its own request ended ([`Driving::poll_until_done`]).
pub(crate) struct Polled {
    /// The CPU the thread was on when it first slept for its answer, if it slept.
    pub(crate) slept_on: Option<i32>,
}

impl Driving<'static> {
    /// The state for the calling thread to run its own request on (`call`: an application
    /// thread's call, which marks the thread as perhaps holding it, see
    /// `NodeState::take_for_call`), if driving is on, the state is free or soon free, the node
    /// still takes own requests and nothing is posted before it. `None`: post the request.
    pub(crate) fn own(call: bool) -> Option<Driving<'static>> {
        if !DRIVE.load(Ordering::Relaxed) {
            return None;
        }
        let held = if call {
            STATE.take_for_call()?
        } else {
            STATE.take_for_own()?
        };
        // Requests waiting for the service thread go first: queue behind them.
        if !held.as_ref().is_some_and(Service::takes_own_requests) || SLOTS.posted() > 0 {
            return None;
        }
        Some(Driving {
            held,
            who: Who::Own,
            own: None,
            sent_before: 0,
            polled: false,
        })
    }

    /// The state for the service thread, if it is free (`None`: another thread drives it).
    pub(super) fn service() -> Option<Driving<'static>> {
        STATE.try_lock().map(Driving::for_service)
    }

    /// The state for the service thread, waited for while requests are posted (its holder is
    /// told: [`NodeState::lock_for_posted`]).
    pub(super) fn service_waiting() -> Driving<'static> {
        Driving::for_service(STATE.lock_for_posted(&SLOTS))
    }

    fn for_service(held: Held<'static, Service>) -> Driving<'static> {
        Driving {
            held,
            who: Who::Service,
            own: None,
            sent_before: 0,
            polled: false,
        }
    }
}

impl Driving<'_> {
    /// The node's state; `None` once the node has ended.
    pub(super) fn state(&mut self) -> Option<&mut Service> {
        self.held.as_mut()
    }

    /// The service thread at the node's end: the state goes (its transport closes).
    pub(super) fn end(mut self) {
        drop(self.held.take());
    }

    /// Runs the request of the thread in `slot`, this thread's own, on the state: the slot is
    /// taken by its own thread (a completion that comes later goes through it like any other),
    /// and what the request sends goes out.
    pub(crate) fn run(&mut self, slot: usize, request: Request) {
        let Some(s) = self.held.as_mut() else { return };
        SLOTS.take_own(slot, matches!(request, Request::Call(_)));
        s.driver = Some(slot);
        self.own = Some(slot);
        self.sent_before = s.frames_sent;
        s.handle_request(slot, request);
        s.drain_core();
    }

    /// One round of work ([`Service::pass`]); returns whether anything happened.
    pub(crate) fn poll(&mut self, faults_only: bool) -> bool {
        self.held.as_mut().is_some_and(|s| s.pass(faults_only))
    }

    /// A fault handler's wait for its own request: polls the node (the transport read here, out
    /// of the service thread's epoll) for `drive_spin_us`, then sleeps on the transport and the
    /// request eventfd (never yields: see below), until the request is done, `drive_limit_us`
    /// passed, calls were posted (handlers do not run them) or work was met that is not for
    /// signal context. [`Driving::let_go`] then hands back what is not done.
    pub(crate) fn poll_until_done(&mut self) -> Polled {
        let mut polled = Polled { slept_on: None };
        let (Some(slot), Some(s)) = (self.own, self.held.as_mut()) else {
            return polled;
        };
        self.polled = true;
        s.set_transport_watched(false);
        let start = Instant::now();
        let evfd = s.evfd.as_raw_fd();
        let drive_spin = Duration::from_micros(u64::from(s.tuning.drive_spin_us));
        let drive_limit = Duration::from_micros(u64::from(s.tuning.drive_limit_us));
        // Polls since the last full pass (0: a full pass is next).
        let mut polls = 0u32;
        loop {
            if polls == 0 || polls >= POLLS_PER_PASS || s.ready() {
                s.pass(true);
                polls = 0;
                if SLOTS.is_done(slot) {
                    // Nothing left unread behind us: the service thread, napping without the
                    // transport, would not see it for up to `DRIVEN_NAP` (another node's GETP
                    // among it). The read that stopped at our grant is followed by one that
                    // finds the socket empty, as a rule (a poll, which then clears `unread`);
                    // anything else is handled first.
                    while s.unread && s.ready() {
                        s.pass(true);
                    }
                    break;
                }
                // Calls were posted (handlers do not run them), or work was met that is not
                // for signal context: hand the wait back.
                if SLOTS.posted() > 0 || !s.deferred.is_empty() {
                    break;
                }
            }
            polls += 1;
            if polls % POLLS_PER_CLOCK != 0 {
                std::hint::spin_loop();
                continue;
            }
            // (Posted calls make `ready` say so: the pass above then hands the wait back.)
            let waited = start.elapsed();
            if waited >= drive_limit {
                break;
            }
            if waited < drive_spin {
                std::hint::spin_loop();
                continue;
            }
            // Then sleep until a message or a request comes (or a timer is due): the message
            // wakes this thread, and the wake-up preempts whatever runs on its CPU. A thread
            // that yields instead stays runnable: once another thread took its CPU it waited for
            // that thread's whole time slice (1-3 ms), deaf meanwhile (the service thread does
            // not read the transport while a handler drives): a sender resent its burst.
            let Some(fd) = s.transport.as_ref().map(|t| t.fd()) else {
                break;
            };
            let mut left = drive_limit - waited;
            if let Some(d) = s.next_deadline() {
                left = left.min(d.saturating_duration_since(Instant::now()));
            }
            if polled.slept_on.is_none() {
                polled.slept_on = sys::current_cpu();
            }
            sys::wait_readable_raw(&[fd, evfd], left);
            sys::eventfd_drain(evfd);
            polls = 0;
        }
        polled
    }

    /// Lets go of the state. A thread that ran its own request says what it left for the
    /// service thread, and wakes it for that once the state is free; the service thread lets
    /// go of it to spin or sleep.
    pub(crate) fn let_go(self) -> Left {
        self.let_go_then(|| {})
    }

    /// [`Driving::let_go`], running `then` once the state is free and before the service
    /// thread is woken (a call clears its mark and lets its held-off signals through: a
    /// handler's fault meanwhile must not find the mark with the state taken by the thread
    /// just woken).
    pub(crate) fn let_go_then(self, then: impl FnOnce()) -> Left {
        let Driving {
            mut held,
            who,
            own,
            sent_before,
            polled,
        } = self;
        let Some(s) = held.as_mut().filter(|_| who == Who::Own) else {
            drop(held);
            then();
            return Left::default();
        };
        s.driver = None;
        // Back in the epoll if the service thread still sleeps there (it may be waking, then it
        // sleeps in `quiet` and sets it right when it next takes the state).
        if polled && STATE.sleeps_on_transport() {
            s.set_transport_watched(true);
        }
        let handed_back = own.is_some_and(|slot| !SLOTS.is_done(slot));
        // A drive that polled its wait read the transport until its answer came: what it sent
        // is answered or acknowledged as far as the service thread needs (a service thread
        // asleep on the transport is woken by what comes; one that napped looks again within
        // `DRIVEN_NAP`). A call's messages leave their retransmission timers to it.
        let sent = s.frames_sent != sent_before && !polled;
        // What the service thread is woken for: the wait handed back, messages sent whose
        // retransmission timers are its, work deferred to it, requests posted meanwhile,
        // acknowledgements owed while it sleeps long.
        let work_left = handed_back
            || sent
            || !s.deferred.is_empty()
            || SLOTS.posted() > 0
            || (s.acks_owed && !STATE.napping());
        STATE.let_go(held, then, work_left, &SLOTS);
        Left { handed_back }
    }
}
