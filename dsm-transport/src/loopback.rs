//! Nodes in one process: messages go through shared queues. For the transport conformance suite
//! (and any in-process test of the runtime's logic).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::reliable::Event;
use crate::{Transport, sys};

struct Inbox {
    queue: Mutex<VecDeque<(u16, Vec<u8>)>>,
    wake: OwnedFd,
}

/// One node of an in-process job.
pub struct LoopbackTransport {
    me: u16,
    inboxes: Arc<Vec<Inbox>>,
    events: VecDeque<Event>,
}

/// A job of `n` in-process nodes.
pub fn cluster(n: u16) -> std::io::Result<Vec<LoopbackTransport>> {
    let inboxes: Vec<Inbox> = (0..n)
        .map(|_| {
            Ok(Inbox {
                queue: Mutex::new(VecDeque::new()),
                wake: sys::eventfd()?,
            })
        })
        .collect::<std::io::Result<_>>()?;
    let inboxes = Arc::new(inboxes);
    Ok((0..n)
        .map(|me| LoopbackTransport {
            me,
            inboxes: inboxes.clone(),
            events: VecDeque::new(),
        })
        .collect())
}

impl Transport for LoopbackTransport {
    fn name(&self) -> &'static str {
        "loopback"
    }

    fn fd(&self) -> RawFd {
        self.inboxes[usize::from(self.me)].wake.as_raw_fd()
    }

    fn send(&mut self, now: Instant, to: u16, msg: &[u8]) {
        self.send_owned(now, to, msg.to_vec());
    }

    fn send_owned(&mut self, _now: Instant, to: u16, msg: Vec<u8>) {
        let inbox = &self.inboxes[usize::from(to)];
        inbox
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back((self.me, msg));
        sys::eventfd_signal(inbox.wake.as_raw_fd());
    }

    fn poll_recv(&mut self, _now: Instant) -> usize {
        let inbox = &self.inboxes[usize::from(self.me)];
        sys::eventfd_drain(inbox.wake.as_raw_fd());
        let mut q = inbox.queue.lock().unwrap_or_else(|p| p.into_inner());
        let n = q.len();
        self.events.extend(
            q.drain(..)
                .map(|(from, bytes)| Event::Message { from, bytes }),
        );
        n
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn pending(&self, _to: u16) -> usize {
        0
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
