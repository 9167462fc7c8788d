//! An exhaustive check of the hand-off between an application thread (or its fault handler) and
//! the service thread, over every interleaving of their steps.
//!
//! The model follows [`super::slots`] and the service thread's sleep (`service::run`) step by
//! step, one shared-memory access or system call per step, all sequentially consistent (the
//! hand-off's accesses are `SeqCst`): the slot's state word and its futex, the `posted` count,
//! the `service_sleeping` flag and the eventfd. The service thread's epoll wait is modelled
//! without its timeout, so a lost wake-up shows as a state where no thread can move while the
//! application still waits. Three requests of the application thread are explored: a posted one
//! ([`post_and_wait`](super::slots::post_and_wait)), a driven one completed by the driver
//! itself, and a driven one handed back to the service thread (`fault::drive`: `take_own`, then
//! the eventfd signal, then [`wait_done`](super::slots::wait_done)).
//!
//! A second test breaks the protocol on purpose (the service thread does not look at `posted`
//! before it sleeps, the application does not wake a sleeping service thread) and checks that the
//! search finds the hang: the check can fail.

use std::collections::HashSet;

use super::slots::{DONE, IDLE, POSTED, TAKEN};

/// The application thread's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Request {
    Posted,
    DrivenDone,
    DrivenHandedBack,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct World {
    // Shared memory.
    state: u32,
    posted: u32,
    service_sleeping: bool,
    eventfd: u32,
    /// A handed-back request the core will complete on a service pass (its reply came).
    core_owes: bool,
    // The application thread.
    app_pc: u8,
    /// The value `wait_done` last loaded, which its futex wait compares with.
    app_seen: u32,
    app_asleep: bool,
    // The service thread.
    svc_pc: u8,
    svc_took: bool,
    svc_asleep: bool,
    passes: u8,
}

/// Service passes explored: enough for the request to be taken late and the thread to sleep
/// again after it.
const PASSES: u8 = 3;
const APP_DONE: u8 = 99;

struct Flaws {
    service_skips_posted_check: bool,
    app_skips_wake: bool,
}

const SOUND: Flaws = Flaws {
    service_skips_posted_check: false,
    app_skips_wake: false,
};

fn futex_wake(w: &mut World) {
    w.app_asleep = false;
}

/// One step of the application thread; `None` if it cannot move (asleep, or done).
fn app_step(w: &World, req: Request, flaws: &Flaws) -> Option<World> {
    let mut n = w.clone();
    if w.app_asleep || w.app_pc == APP_DONE {
        return None;
    }
    match (req, w.app_pc) {
        // post_and_wait: state = POSTED; posted += 1; if service_sleeping { signal }.
        (Request::Posted, 0) => {
            n.state = POSTED;
            n.app_pc = 1;
        }
        (Request::Posted, 1) => {
            n.posted += 1;
            n.app_pc = 2;
        }
        (Request::Posted, 2) => {
            if w.service_sleeping && !flaws.app_skips_wake {
                n.eventfd += 1;
            }
            n.app_pc = 10;
        }
        // take_own (the driver holds the service state meanwhile: the service thread does not
        // pass; modelled by the driver finishing before it lets go, pc 3-4).
        (Request::DrivenDone | Request::DrivenHandedBack, 0) => {
            n.state = TAKEN;
            n.app_pc = 3;
        }
        (Request::DrivenDone, 3) => {
            // complete_quietly: the reply came while driving.
            n.state = DONE;
            n.app_pc = 10;
        }
        (Request::DrivenHandedBack, 3) => {
            // No reply within the limit: the core keeps the request; let go of the state.
            n.core_owes = true;
            n.app_pc = 4;
        }
        (Request::DrivenHandedBack, 4) => {
            // work_left: signal the eventfd (unconditionally, as `drive` does).
            if !flaws.app_skips_wake {
                n.eventfd += 1;
            }
            n.app_pc = 10;
        }
        // wait_done: loop { s = state; if s == DONE break; futex_wait(state, s) }.
        (_, 10) => {
            n.app_seen = w.state;
            n.app_pc = if w.state == DONE { 12 } else { 11 };
        }
        (_, 11) => {
            // futex_wait: sleeps only if the word still holds the value seen (atomically).
            if w.state == w.app_seen {
                n.app_asleep = true;
            }
            n.app_pc = 10;
        }
        (_, 12) => {
            n.state = IDLE;
            n.app_pc = APP_DONE;
        }
        _ => unreachable!("app pc {}", w.app_pc),
    }
    Some(n)
}

/// One step of the service thread's loop: a pass (take posted requests, let the core complete
/// what it owes), then `sleep`: service_sleeping = true; if posted == 0 { epoll_wait };
/// service_sleeping = false; drain the eventfd.
fn service_step(w: &World, flaws: &Flaws) -> Option<World> {
    let mut n = w.clone();
    if w.svc_asleep {
        if w.eventfd == 0 {
            return None;
        }
        n.svc_asleep = false;
        n.svc_pc = 5;
        return Some(n);
    }
    // The driver holds the service state between take_own and letting go.
    let driving = w.app_pc == 3;
    match w.svc_pc {
        0 if w.passes >= PASSES => return None,
        0 if driving => return None,
        0 => {
            // take_posted: if posted > 0 and state == POSTED, CAS to TAKEN.
            if w.posted > 0 && w.state == POSTED {
                n.state = TAKEN;
                n.posted -= 1;
                n.svc_took = true;
            }
            n.svc_pc = 1;
        }
        1 => {
            // The core resumes the waiter (at once, in this model): complete + futex_wake.
            if std::mem::take(&mut n.svc_took) || std::mem::take(&mut n.core_owes) {
                n.state = DONE;
                futex_wake(&mut n);
            }
            n.svc_pc = 2;
        }
        2 => {
            n.service_sleeping = true;
            n.svc_pc = 3;
        }
        3 => {
            if w.posted == 0 || flaws.service_skips_posted_check {
                n.svc_asleep = true;
            } else {
                n.svc_pc = 5;
            }
        }
        5 => {
            n.service_sleeping = false;
            n.eventfd = 0;
            n.passes += 1;
            n.svc_pc = 0;
        }
        _ => unreachable!("service pc {}", w.svc_pc),
    }
    Some(n)
}

/// Explores every interleaving; returns the first state where nothing can move while the
/// application thread still waits, if there is one, and how many states were seen.
fn find_hang(req: Request, flaws: &Flaws) -> (Option<World>, usize) {
    let start = World {
        state: IDLE,
        posted: 0,
        service_sleeping: false,
        eventfd: 0,
        core_owes: false,
        app_pc: 0,
        app_seen: 0,
        app_asleep: false,
        svc_pc: 0,
        svc_took: false,
        svc_asleep: false,
        passes: 0,
    };
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    while let Some(w) = stack.pop() {
        if !seen.insert(w.clone()) {
            continue;
        }
        let next: Vec<World> = [app_step(&w, req, flaws), service_step(&w, flaws)]
            .into_iter()
            .flatten()
            .collect();
        if next.is_empty() && w.app_pc != APP_DONE {
            // The service thread may only be out of passes: that is the model's bound, not a
            // hang, unless it sleeps.
            if w.svc_asleep || w.passes < PASSES {
                return (Some(w), seen.len());
            }
        }
        stack.extend(next);
    }
    (None, seen.len())
}

#[test]
fn every_interleaving_of_the_hand_off_completes_the_request() {
    for req in [
        Request::Posted,
        Request::DrivenDone,
        Request::DrivenHandedBack,
    ] {
        let (hang, states) = find_hang(req, &SOUND);
        assert!(hang.is_none(), "{req:?}: lost wake-up in {hang:?}");
        assert!(states > 20, "{req:?}: only {states} states explored");
    }
}

#[test]
fn the_search_finds_the_lost_wake_up_of_a_broken_hand_off() {
    let broken_service = Flaws {
        service_skips_posted_check: true,
        app_skips_wake: false,
    };
    let broken_app = Flaws {
        service_skips_posted_check: false,
        app_skips_wake: true,
    };
    // Each flaw alone is covered by the other side's check, except where it is not:
    // together they lose the request.
    let both = Flaws {
        service_skips_posted_check: true,
        app_skips_wake: true,
    };
    assert!(find_hang(Request::Posted, &both).0.is_some());
    assert!(
        find_hang(Request::DrivenHandedBack, &broken_app)
            .0
            .is_some()
    );
    // The service's check of `posted` is what saves a request posted before it set the flag.
    assert!(find_hang(Request::Posted, &broken_service).0.is_some());
}
