//! The read-ahead's streams: the walks through remote memory a node's threads make at once.
//!
//! A node follows up to [`MAX_STREAMS`] walks, each with its own window, stride and position,
//! as a CPU's prefetcher follows several streams and the kernel keeps a read-ahead state per
//! open file. With one state per node, threads reading their own parts of an array (a parallel
//! loop), or one thread reading two arrays (`a[i] = b[i] + c[i]`), reset each other's window
//! at every demand fault, and a page opened by one walk was measured against another's
//! position. Each page asked for ahead carries the index of the stream that asked for it
//! ([`crate::table::PageEntry::stream`]); its first touch moves that stream only.
//!
//! A demand fault continues the stream it outran (the page right after the stream's last
//! request, or a little past it where the caller's rule allows: `Node::request_pages`),
//! restarts the stream whose pages it falls among, or starts a new one in the slot used least
//! recently. The stride of a walk comes from the faulting thread's own last demand faults, not
//! the node's: two threads walking two columns each see their own. A walk goes up through
//! memory or down (a loop from an array's end to its start, a backward substitution): its
//! stride's sign says which, and every step, distance and "before" below follows it.

use std::collections::BTreeMap;

use crate::types::{PageNum, WaiterId};

/// The most walks a node follows at once: a walk per thread of a 64-core node reading two
/// arrays each. Past it the least recently used walk gives its slot up, which threads taking
/// turns with more walks than slots defeat (the walk evicted is the next to fault: 20 threads
/// of a node reading their own parts, with 16 slots, fetched every page on demand).
pub(crate) const MAX_STREAMS: usize = 128;

/// The demand faults kept per thread: the stride of walks it takes in step (two or three
/// arrays read down together, `y[i] = f(x[i])` from the end) is found among them.
pub(crate) const DEMANDS_KEPT: usize = 6;

/// A walk whose window grew is live while it moved within this many moves of all walks
/// together ([`Streams::live`]): walks reading at once each ask for windows in turn.
const LIVE_MOVES: u64 = 64;

/// A page asked for by no stream (a demand page alone, a page fetched again at a barrier).
pub(crate) const NO_STREAM: u8 = u8::MAX;

const _: () = assert!(MAX_STREAMS < NO_STREAM as usize);

/// One walk the read-ahead follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stream {
    /// The demand fault that started the walk: the pages before it are not the walk's.
    pub start: PageNum,
    /// The walk's pages, from `low` up to `high` (not included): its start, the pages it asked
    /// for since and those between, to one stride past the furthest (a page of a slot since
    /// given to another walk is not).
    low: u64,
    high: u64,
    /// The read-ahead window, in pages (grows while prefetched pages are used).
    pub window: usize,
    /// Pages of the walk threads opened since it started or was carried into its allocation
    /// (what a window carried into the next allocation may be: see `Node::request_pages`).
    pub opened: usize,
    /// The last page the latest request asked for: a demand fault one stride after it
    /// ([`Stream::next`]) means the thread streams faster than the read-ahead, which then
    /// grows, not resets. Cleared when a page asked for ahead is dropped unread (see
    /// `Node::read_ahead_lost`).
    pub last: Option<PageNum>,
    /// The walk's step in pages: 1 for a sequential walk, more for a strided one; negative for
    /// a walk down through memory.
    pub stride: i32,
    /// After a scan from the first page found too few pages to ask for, the pages after it, up
    /// to the second, where another scan cannot find enough (see `Node::read_ahead`).
    pub quiet: Option<(PageNum, PageNum)>,
    /// The page whose first touch asks for the next window: opening it is reported at once.
    pub mark: Option<PageNum>,
    /// When the walk was last moved ([`Streams::tick`]), for giving its slot up.
    used: u64,
    /// The thread whose demand fault last started or continued the walk.
    pub by: WaiterId,
}

impl Stream {
    fn starting_at(page: PageNum, stride: i32, now: u64, by: WaiterId) -> Stream {
        Stream {
            start: page,
            low: u64::from(page.0),
            high: u64::from(page.0) + 1,
            window: 0,
            opened: 0,
            last: None,
            stride,
            quiet: None,
            mark: None,
            used: now,
            by,
        }
    }

    /// Whether `page` is among the walk's pages.
    pub fn holds(&self, page: PageNum) -> bool {
        (self.low..self.high).contains(&u64::from(page.0))
    }

    /// The walk's step in pages, whichever way it goes.
    pub fn step(&self) -> u32 {
        self.stride.unsigned_abs()
    }

    /// Whether the walk goes down through memory.
    pub fn down(&self) -> bool {
        self.stride < 0
    }

    /// The page `k` strides on from `page` along the walk, if there is one.
    pub fn on(&self, page: PageNum, k: u64) -> Option<PageNum> {
        let d = u64::from(self.step()).checked_mul(k)?;
        let p = if self.down() {
            u64::from(page.0).checked_sub(d)?
        } else {
            u64::from(page.0).checked_add(d)?
        };
        u32::try_from(p).ok().map(PageNum)
    }

    /// Whether `a` comes before `b` along the walk.
    pub fn before(&self, a: PageNum, b: PageNum) -> bool {
        if self.down() { a > b } else { a < b }
    }

    /// How many pages along the walk `to` lies past `from` (0 if not past it).
    pub fn pages_past(&self, from: PageNum, to: PageNum) -> u64 {
        u64::from(if self.down() {
            from.0.saturating_sub(to.0)
        } else {
            to.0.saturating_sub(from.0)
        })
    }

    /// The page one stride after the last one the latest request asked for.
    pub fn next(&self) -> Option<PageNum> {
        self.on(self.last?, 1)
    }

    /// How far past the walk's next page a demand fault on `page` falls, in strides, if at
    /// the walk's stride and less than a window (at least `least_window`) of them.
    fn just_past(&self, page: PageNum, least_window: usize) -> Option<u64> {
        let n = self.next()?;
        if self.before(page, n) {
            return None;
        }
        let d = self.pages_past(n, page);
        let strides = d / u64::from(self.step());
        (d % u64::from(self.step()) == 0 && strides < self.window.max(least_window) as u64)
            .then_some(strides)
    }

    /// The walk asked for pages up to `last`: the pages after it, at its stride, come next.
    pub fn asked_through(&mut self, last: PageNum) {
        self.last = Some(last);
        let (last, step) = (u64::from(last.0), u64::from(self.step()));
        if self.down() {
            self.low = self.low.min((last + 1).saturating_sub(step));
        } else {
            self.high = self.high.max(last + step);
        }
    }
}

/// A demand fault's place among the walks ([`Streams::for_demand`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Demand {
    /// It fell right after the stream's last request: the thread outran the read-ahead.
    Outran(u8),
    /// It starts the stream again, from the fault (a new walk, or a walk that left its path).
    Restart(u8),
}

/// The walks a node follows, and each thread's last demand faults.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    streams: Vec<Stream>,
    /// Per thread: the pages of its last [`DEMANDS_KEPT`] demand faults that asked a home,
    /// oldest first.
    demands: BTreeMap<WaiterId, [Option<PageNum>; DEMANDS_KEPT]>,
    tick: u64,
}

impl Streams {
    /// The stream numbered `i`, if it holds `page` (one asked for ahead by it, and its slot not
    /// given to another walk since).
    pub fn owning(&self, i: u8, page: PageNum) -> Option<&Stream> {
        self.streams.get(usize::from(i)).filter(|s| s.holds(page))
    }

    /// The stream numbered `i`.
    pub fn get(&self, i: u8) -> Stream {
        self.streams[usize::from(i)]
    }

    /// A thread opened a page stream `i` asked for (not a move: the walk's slot keeps its age).
    pub fn note_opened(&mut self, i: u8) {
        if let Some(s) = self.streams.get_mut(usize::from(i)) {
            s.opened = s.opened.saturating_add(1);
        }
    }

    /// Stores stream `i` back, moved now.
    pub fn put(&mut self, i: u8, mut stream: Stream) {
        self.tick += 1;
        stream.used = self.tick;
        self.streams[usize::from(i)] = stream;
    }

    /// Walks followed so far (at most [`MAX_STREAMS`]).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Walks that stream: their window grew, and they moved (asked for a window) among the
    /// last [`LIVE_MOVES`] moves of any walk (at least 1). The walks that share the cache now;
    /// a walk that ended a while ago leaves the count, and one demand fault alone (a random
    /// read, its first window) never enters it (after 16 scattered reads, a later stream's
    /// windows through a small cache were a sixteenth for the node's life: 23 -> 259 requests).
    pub fn live(&self) -> usize {
        self.streams
            .iter()
            .filter(|s| s.window > 0 && s.used + LIVE_MOVES > self.tick)
            .count()
            .max(1)
    }

    /// The last two demand faults of `waiter` that asked a home, oldest first.
    pub fn demands_of(&self, waiter: WaiterId) -> [Option<PageNum>; 2] {
        let [.., a, b] = self.recent_demands(waiter);
        [a, b]
    }

    /// The last [`DEMANDS_KEPT`] demand faults of `waiter` that asked a home, oldest first.
    pub fn recent_demands(&self, waiter: WaiterId) -> [Option<PageNum>; DEMANDS_KEPT] {
        self.demands
            .get(&waiter)
            .copied()
            .unwrap_or([None; DEMANDS_KEPT])
    }

    /// `waiter` faulted on `page`, which must be asked of its home; its walk's stride, from
    /// its demand faults, is `stride`. Returns the stream the fault continues or (re)starts:
    /// the stream whose next page it is (outran), else the nearest it fell a little past
    /// (less than a window of its strides) where `may_continue` lets it (outran too: the walk
    /// asks from its next page, the gap included), else the stream whose pages it falls among,
    /// or whose start was the thread's last demand fault when these now show a stride (the
    /// walk's first steps, taken as sequential), else a new one, in the slot used least
    /// recently once [`MAX_STREAMS`] are in use; `previous`: when `stride` is not 1, the
    /// thread's demand fault one stride back (the walk's step before this one). A walk down
    /// this thread started again among its pages goes down again.
    pub fn for_demand(
        &mut self,
        waiter: WaiterId,
        (page, stride, previous): (PageNum, i32, Option<PageNum>),
        least_window: usize,
        may_continue: impl Fn(&Stream) -> bool,
    ) -> Demand {
        let mut recent = self.recent_demands(waiter);
        recent.rotate_left(1);
        recent[DEMANDS_KEPT - 1] = Some(page);
        self.demands.insert(waiter, recent);
        let exact = self.streams.iter().position(|s| s.next() == Some(page));
        let near = || {
            self.streams
                .iter()
                .enumerate()
                .filter_map(|(i, s)| Some((s.just_past(page, least_window)?, i)))
                .filter(|&(_, i)| may_continue(&self.streams[i]))
                .min()
                .map(|(_, i)| i)
        };
        if let Some(i) = exact.or_else(near) {
            self.streams[i].by = waiter;
            return Demand::Outran(i as u8);
        }
        let restarted = self
            .streams
            .iter()
            .position(|s| s.holds(page) || (stride != 1 && previous.is_some_and(|b| s.start == b)));
        // A walk down this thread started again among its pages (the next pass over an array)
        // goes down again, unless the thread's own faults show a stride.
        let stride = match restarted {
            Some(i) if stride == 1 && self.streams[i].down() && self.streams[i].by == waiter => {
                self.streams[i].stride
            }
            _ => stride,
        };
        let i = match restarted {
            Some(i) => i,
            None if self.streams.len() < MAX_STREAMS => {
                self.streams
                    .push(Stream::starting_at(page, stride, self.tick, waiter));
                self.streams.len() - 1
            }
            None => self
                .streams
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.used)
                .map(|(i, _)| i)
                .expect("MAX_STREAMS streams in use"),
        };
        self.tick += 1;
        self.streams[i] = Stream::starting_at(page, stride, self.tick, waiter);
        Demand::Restart(i as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u32) -> PageNum {
        PageNum(n)
    }

    #[test]
    fn a_fault_after_the_last_request_continues_its_stream() {
        let mut s = Streams::default();
        let Demand::Restart(i) = s.for_demand(WaiterId(0), (p(10), 1, None), 4, |_| true) else {
            panic!("a first fault starts a stream")
        };
        let mut st = s.get(i);
        st.asked_through(p(17));
        s.put(i, st);
        assert_eq!(
            s.for_demand(WaiterId(1), (p(18), 1, None), 4, |_| true),
            Demand::Outran(i)
        );
    }

    #[test]
    fn a_walk_down_holds_the_pages_below_its_start_and_continues_under_its_last_request() {
        let mut s = Streams::default();
        let Demand::Restart(i) = s.for_demand(WaiterId(0), (p(100), -3, None), 4, |_| true) else {
            panic!("a first fault starts a stream")
        };
        let mut st = s.get(i);
        assert!(st.down() && st.step() == 3);
        assert_eq!(st.on(p(100), 2), Some(p(94)));
        assert_eq!(st.on(p(5), 2), None);
        assert!(st.before(p(100), p(97)) && !st.before(p(97), p(100)));
        st.asked_through(p(88));
        assert_eq!(st.next(), Some(p(85)));
        // Its pages: from one stride under the last asked (not included) up to its start.
        assert!(st.holds(p(100)) && st.holds(p(86)) && st.holds(p(90)));
        assert!(!st.holds(p(85)) && !st.holds(p(101)));
        s.put(i, st);
        // Right under the last request: the thread outran the walk; two strides further
        // down, within a window, it is just past it.
        assert_eq!(s.get(i).just_past(p(85), 4), Some(0));
        assert_eq!(s.get(i).just_past(p(79), 4), Some(2));
        assert_eq!(s.get(i).just_past(p(80), 4), None);
        assert_eq!(s.get(i).just_past(p(91), 4), None);
        assert_eq!(
            s.for_demand(WaiterId(1), (p(85), 1, None), 4, |_| true),
            Demand::Outran(i)
        );
        // A fault among its pages (a next pass) starts it again, down.
        assert_eq!(
            s.for_demand(WaiterId(1), (p(97), 1, None), 4, |_| true),
            Demand::Restart(i)
        );
        assert_eq!((s.get(i).start, s.get(i).stride), (p(97), -3));
    }

    #[test]
    fn threads_walking_apart_get_streams_of_their_own() {
        let mut s = Streams::default();
        let mut seen = Vec::new();
        for t in 0..4u32 {
            let page = p(t * 10_000);
            let Demand::Restart(i) =
                s.for_demand(WaiterId(u64::from(t)), (page, 1, None), 4, |_| true)
            else {
                panic!("a new walk")
            };
            let mut st = s.get(i);
            st.asked_through(p(page.0 + 8));
            s.put(i, st);
            seen.push(i);
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 4);
        // A fault among a stream's pages starts that stream again, no other.
        assert_eq!(
            s.for_demand(WaiterId(9), (p(20_004), 1, None), 4, |_| true),
            Demand::Restart(seen[2])
        );
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn the_least_recently_moved_stream_gives_its_slot_up() {
        let mut s = Streams::default();
        for k in 0..MAX_STREAMS as u32 {
            s.for_demand(WaiterId(0), (p(k * 1000), 1, None), 4, |_| true);
        }
        // Stream 0 moves; stream 1 is now the least recently moved.
        let st = s.get(0);
        s.put(0, st);
        assert_eq!(
            s.for_demand(WaiterId(0), (p(900_000), 1, None), 4, |_| true),
            Demand::Restart(1)
        );
        assert_eq!(s.len(), MAX_STREAMS);
        // The slot's old pages are no longer the stream's.
        assert!(s.owning(1, p(1000)).is_none());
        assert!(s.owning(1, p(900_000)).is_some());
    }

    #[test]
    fn walks_that_stopped_moving_leave_the_live_count() {
        let mut s = Streams::default();
        for k in 0..4u32 {
            let Demand::Restart(i) =
                s.for_demand(WaiterId(u64::from(k)), (p(k * 10_000), 1, None), 4, |_| {
                    true
                })
            else {
                panic!("a new walk")
            };
            // A scattered read: no window grown, not counted.
            assert_eq!(s.live(), (k as usize).max(1));
            let mut st = s.get(i);
            st.window = 8;
            s.put(i, st);
        }
        assert_eq!(s.live(), 4);
        // Walk 0 alone goes on asking for windows: the others stop counting.
        for _ in 0..LIVE_MOVES {
            let st = s.get(0);
            s.put(0, st);
        }
        assert_eq!(s.live(), 1);
        assert_eq!(s.len(), 4);
    }

    #[test]
    fn a_stride_found_restarts_the_walk_its_first_steps_began() {
        let mut s = Streams::default();
        let Demand::Restart(a) = s.for_demand(WaiterId(3), (p(100), 1, None), 4, |_| true) else {
            panic!()
        };
        let Demand::Restart(b) = s.for_demand(WaiterId(3), (p(164), 1, None), 4, |_| true) else {
            panic!()
        };
        assert_ne!(a, b);
        assert_eq!(s.demands_of(WaiterId(3)), [Some(p(100)), Some(p(164))]);
        // The third fault shows a stride of 64: the stream begun at the second takes the walk.
        assert_eq!(
            s.for_demand(WaiterId(3), (p(228), 64, Some(p(164))), 4, |_| true),
            Demand::Restart(b)
        );
        assert_eq!(s.get(b).stride, 64);
        // Another thread's demand faults are its own.
        assert_eq!(s.demands_of(WaiterId(4)), [None, None]);
    }
}
