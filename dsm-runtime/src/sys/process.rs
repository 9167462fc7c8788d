//! Processes a job starts, and how they end with it: a node or a launcher adopts the orphans of
//! the processes it started (the kernel's child subreaper) and ends every descendant when it
//! ends, as mpirun and srun do; an ssh client dies with its launcher, however the launcher ends;
//! a program's exit status reaches the runtime's exit handler (`on_exit`).

use std::io;
use std::os::unix::process::CommandExt;

/// Makes this process the reaper of its orphaned descendants: a process that a child of ours
/// started and left behind (`system("... &")`, a double fork) becomes our child instead of
/// init's, so it stays among our descendants ([`end_descendants`]).
pub fn adopt_orphans() -> io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) takes plain integers and changes only this
    // process's attribute.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A process as `/proc/<pid>/stat` shows it.
struct Proc {
    pid: i32,
    parent: i32,
    /// It has ended and waits to be reaped (a zombie), or is being torn down.
    ended: bool,
}

/// Every process now, from `/proc/<pid>/stat` (processes that end meanwhile are left out).
fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses; it ends at the
        // last `)`.
        let ended = stat_ended(&stat)?;
        let parent = stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(Proc { pid, parent, ended })
    })
    .collect()
}

/// This process's id.
fn me() -> i32 {
    std::process::id() as i32
}

/// The processes of `all` descended from `root`, parents before their children.
fn descendants_of(root: i32, all: &[Proc]) -> Vec<&Proc> {
    let mut found: Vec<&Proc> = Vec::new();
    let mut k = 0;
    let mut parent = root;
    loop {
        found.extend(all.iter().filter(|p| p.parent == parent));
        let Some(next) = found.get(k) else {
            return found;
        };
        parent = next.pid;
        k += 1;
    }
}

/// Ends every descendant of this process still running with SIGKILL, and reaps those that were
/// (or became) its children. Returns how many were ended. All are stopped first (SIGSTOP), so
/// none forks a new one between the look and the kill; a second look finds any forked before
/// the stop.
pub fn end_descendants() -> usize {
    let mut ended = 0;
    for _ in 0..2 {
        let all = processes();
        let victims: Vec<i32> = descendants_of(me(), &all)
            .iter()
            .filter(|p| !p.ended)
            .map(|p| p.pid)
            .collect();
        if victims.is_empty() {
            break;
        }
        for &p in &victims {
            // SAFETY: kill(2) takes plain integers; a pid that ended meanwhile gets ESRCH.
            unsafe { libc::kill(p, libc::SIGSTOP) };
        }
        for &p in &victims {
            // SAFETY: as above.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        ended += victims.len();
    }
    if ended > 0 {
        reap_ended_children();
    }
    ended
}

/// Reaps this process's children that have ended (the adopted orphans among them), without
/// waiting for any that still run.
fn reap_ended_children() {
    // SIGKILL is delivered at once, but a child is reapable only once the kernel has torn it
    // down: a few tries, a millisecond apart.
    for _ in 0..50 {
        let mut status = 0;
        // SAFETY: waitpid(-1, .., WNOHANG | __WALL) writes only `status`. Children the
        // program still waits for itself are not among ours to reap: this runs at the
        // process's end.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) };
        match r {
            0 => std::thread::sleep(std::time::Duration::from_millis(1)),
            p if p > 0 => {}
            _ => return, // ECHILD: none left
        }
    }
}

/// The kernel ids of this process's threads now (`None`: `/proc` cannot say).
pub fn threads() -> Option<Vec<i32>> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

/// The CPU time thread `tid` of this process has used, in nanoseconds (`None`: no such thread
/// now). Its clock is the kernel's per-thread CPU clock, named by the tid as glibc's
/// `pthread_getcpuclockid` names it (`MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`): one system
/// call, no file.
pub fn cpu_ns(tid: i32) -> Option<u64> {
    const CPUCLOCK_SCHED: libc::clockid_t = 2;
    const CPUCLOCK_PERTHREAD: libc::clockid_t = 4;
    // A larger id would lose bits in the shift and name another clock (CLOCK_MONOTONIC_COARSE
    // for i32::MAX); the kernel's ids stay below 2^22.
    if !(1..1 << 28).contains(&tid) {
        return None;
    }
    let clock = (!tid << 3) | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local; a clock id naming no thread
    // of this process fails with EINVAL, writing nothing.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Whether every thread of the program has ended: the main thread is a zombie (it called
/// `pthread_exit`; the kernel keeps it until the process ends) and every other thread of the
/// process is one of `runtime` or has ended too. False where `/proc` cannot say.
pub fn program_threads_ended(runtime: &[i32]) -> bool {
    // SAFETY: getpid has no preconditions.
    let main = unsafe { libc::getpid() };
    if !ended(main) {
        return false;
    }
    // Listed again after the states are read: a thread the last one started after the first
    // listing, and before it ended, is in the second.
    let Some(first) = threads() else { return false };
    let all_ended = first
        .iter()
        .all(|&tid| tid == main || runtime.contains(&tid) || ended(tid));
    all_ended && threads().is_some_and(|second| second.iter().all(|tid| first.contains(tid)))
}

/// Whether thread `tid` of this process has ended: gone, or a zombie (`/proc/self/task/<tid>/stat`
/// state `Z` or `X`).
fn ended(tid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return !crate::sys::thread_exists(tid);
    };
    stat_ended(&stat).unwrap_or(false)
}

/// Whether the process or thread of a `/proc/.../stat` line has ended (its state `Z`, a zombie,
/// or `X`, being torn down); `None` for a line without a state.
fn stat_ended(stat: &str) -> Option<bool> {
    // The state follows the command's closing parenthesis (the command may hold any).
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().next()?.starts_with(['Z', 'X']))
}

/// Ends the process as its last thread's end does: `exit(0)`, with the asynchronous signals
/// the runtime's threads hold off open again (the program's exit handlers run here).
pub fn exit_as_the_last_thread() -> ! {
    let open = crate::sys::signals::asynchronous_signals();
    // SAFETY: a live set; unblocks signals on this thread only. exit(3): the exit handlers run
    // on this thread, which holds nothing of theirs.
    unsafe {
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &open, std::ptr::null_mut());
        libc::exit(0)
    }
}

/// What thread `tid` of this process does, from `/proc/self/task/<tid>/syscall`.
enum Doing {
    /// It runs or is runnable (`running`).
    Runs,
    /// It is blocked in a system call: its number, then its arguments.
    Blocked(Vec<u64>),
}

/// What thread `tid` of this process does (`None`: it ended, or `/proc` cannot say).
fn doing(tid: i32) -> Option<Doing> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
    if text.starts_with("running") {
        return Some(Doing::Runs);
    }
    let words = text
        .split_whitespace()
        .map_while(|w| match w.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => w.parse().ok(),
        })
        .collect();
    Some(Doing::Blocked(words))
}

/// Whether thread `tid` of this process runs or is runnable; a thread that ended does not.
pub fn runs(tid: i32) -> bool {
    matches!(doing(tid), Some(Doing::Runs))
}

/// What a thread is seen doing between two of its operations ([`rests`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    /// It runs or is runnable: that says nothing of what it does between them.
    Runs,
    /// It sleeps with nothing to wake it but time or another thread (`nanosleep`,
    /// `clock_nanosleep`, `sched_yield`, a wait on a futex of its process alone, `select` or
    /// `poll` on no descriptor).
    Sleeps,
    /// It is blocked on something else: a descriptor, a child, a signal, a futex another
    /// process may wake (a named semaphore's).
    Held,
}

/// What thread `tid` of this process does, as a loop that polls a word and rests between its
/// polls is seen ([`Rest`]); `None` where it ended or `/proc` cannot say.
pub fn rests(tid: i32) -> Option<Rest> {
    let words = match doing(tid)? {
        Doing::Runs => return Some(Rest::Runs),
        Doing::Blocked(words) => words,
    };
    let (Some(&nr), arg) = (words.first(), |i: usize| words.get(i + 1).copied()) else {
        return Some(Rest::Held);
    };
    let sleeps = [
        libc::SYS_clock_nanosleep,
        libc::SYS_sched_yield,
        #[cfg(target_arch = "x86_64")]
        libc::SYS_nanosleep,
    ];
    // A futex of the process alone: another process can post a semaphore in shared memory,
    // and a loop that waits for that between its polls waits for the world outside, as on a
    // descriptor.
    let private_futex = nr == libc::SYS_futex as u64
        && matches!((arg(0), arg(1)), (Some(addr), Some(op))
            if futex_of_the_process_alone(addr, op, &mut None));
    // select and pselect6 on no descriptor (their first argument), poll and ppoll on none
    // (their second).
    #[cfg(target_arch = "x86_64")]
    let (select, poll) = (
        [libc::SYS_select, libc::SYS_pselect6],
        [libc::SYS_poll, libc::SYS_ppoll],
    );
    #[cfg(not(target_arch = "x86_64"))]
    let (select, poll) = ([libc::SYS_pselect6], [libc::SYS_ppoll]);
    let sleeps = sleeps.iter().any(|&s| s as u64 == nr)
        || private_futex
        || (select.iter().any(|&s| s as u64 == nr) && arg(0) == Some(0))
        || (poll.iter().any(|&s| s as u64 == nr) && arg(1) == Some(0));
    Some(if sleeps { Rest::Sleeps } else { Rest::Held })
}

/// The ranges of this process's private mappings (`/proc/self/maps`: permissions ending in
/// `p`): a futex there is this process's alone, while one in a shared mapping (a process-shared
/// semaphore or mutex) may be woken by another process.
fn private_mappings() -> Vec<std::ops::Range<u64>> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (range, perms) = (w.next()?, w.next()?);
            let (a, b) = range.split_once('-')?;
            let range = u64::from_str_radix(a, 16).ok()?..u64::from_str_radix(b, 16).ok()?;
            perms.ends_with('p').then_some(range)
        })
        .collect()
}

/// A look at this process's threads: `/proc/self/maps` is read once, at the first wait on a
/// futex that is not marked private (`pthread_join`'s, for one).
#[derive(Default)]
pub struct ThreadLook {
    private: Option<Vec<std::ops::Range<u64>>>,
}

impl ThreadLook {
    /// Whether thread `tid` of this process sleeps in a futex wait with no timeout on a futex
    /// of its process alone (`pthread_join`, a mutex, a condition variable, a barrier): only
    /// another thread of its process can wake it (from the system call a blocked thread is in,
    /// and its arguments). A wait on a futex in shared memory (a process-shared semaphore) does
    /// not count: another process may end it.
    pub fn waits_for_a_thread(&mut self, tid: i32) -> bool {
        let Some(Doing::Blocked(words)) = doing(tid) else {
            return false;
        };
        if words.first() != Some(&(libc::SYS_futex as u64)) {
            return false;
        }
        let (Some(&addr), Some(&op), Some(&timeout)) = (words.get(1), words.get(2), words.get(4))
        else {
            return false;
        };
        let command =
            op & !u64::from((libc::FUTEX_PRIVATE_FLAG | libc::FUTEX_CLOCK_REALTIME) as u32);
        let waits = [
            libc::FUTEX_WAIT,
            libc::FUTEX_WAIT_BITSET,
            libc::FUTEX_LOCK_PI,
            libc::FUTEX_WAIT_REQUEUE_PI,
        ]
        .iter()
        .any(|&c| u64::from(c as u32) == command);
        waits && timeout == 0 && futex_of_the_process_alone(addr, op, &mut self.private)
    }
}

/// Whether the futex at `addr`, waited on with operation `op`, is this process's alone: marked
/// private, or in a private mapping (`maps`: `/proc/self/maps`'s, read at the first need). One
/// in shared memory (a process-shared semaphore) may be woken by another process.
fn futex_of_the_process_alone(
    addr: u64,
    op: u64,
    maps: &mut Option<Vec<std::ops::Range<u64>>>,
) -> bool {
    op & u64::from(libc::FUTEX_PRIVATE_FLAG as u32) != 0
        || maps
            .get_or_insert_with(private_mappings)
            .iter()
            .any(|r| r.contains(&addr))
}

/// Makes the process `cmd` starts receive `sig` when the thread that starts it ends (the
/// launcher, since it starts its nodes from its main thread), and end at once if that has
/// already happened: an ssh client never outlives its launcher, even one killed with SIGKILL.
pub fn dies_with_parent(cmd: &mut std::process::Command, sig: libc::c_int) {
    let parent = me();
    // SAFETY: the closure runs in the child between fork and exec and makes only
    // async-signal-safe system calls (prctl, getppid), touching no memory but its captures.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The launcher died before the prctl: nothing would signal us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Calls `f(status)` when the process exits (`exit(status)`, or a return of `status` from
/// `main`), before the handlers registered earlier; `arg` is passed on untouched.
pub fn on_exit(f: extern "C" fn(libc::c_int, *mut libc::c_void)) -> io::Result<()> {
    unsafe extern "C" {
        /// glibc's `on_exit(3)`: `atexit` with the exit status.
        fn on_exit(
            f: extern "C" fn(libc::c_int, *mut libc::c_void),
            arg: *mut libc::c_void,
        ) -> libc::c_int;
    }
    // SAFETY: registers a plain function and a null argument, which glibc copies.
    if unsafe { on_exit(f, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::other("on_exit: no room for another handler"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::Sender;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    /// Starts a thread running `f`; returns it with its kernel id.
    fn started(f: impl FnOnce() + Send + 'static) -> (JoinHandle<()>, i32) {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _ = tx.send(super::super::gettid());
            f()
        });
        (thread, rx.recv().expect("the thread's id"))
    }

    /// A thread that computes until `stop` is set.
    fn spinner(stop: &Arc<AtomicBool>) -> (JoinHandle<()>, i32) {
        let stop = Arc::clone(stop);
        started(move || {
            while !stop.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
        })
    }

    /// A thread asleep in a timed futex wait until the sender returned drops.
    fn sleeper() -> (JoinHandle<()>, i32, Sender<()>) {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (thread, tid) = started(move || {
            let _ = rx.recv_timeout(Duration::from_secs(60));
        });
        (thread, tid, tx)
    }

    /// Waits until `seen()`, 30 s at most (generous: a thread may take long to get there).
    fn wait_until(what: &str, seen: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !seen() {
            assert!(Instant::now() < deadline, "{what}: never seen so");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A thread waiting on a futex in shared memory, not marked private, as a named semaphore's
    /// `sem_wait`: another process may wake it. Its word's address, and the thread.
    fn shared_futex_waiter() -> (usize, JoinHandle<()>, i32) {
        // SAFETY: a fresh anonymous shared mapping of one page, checked; it is never unmapped
        // (the test's process ends soon), so the waiter's word stays valid.
        let word = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED, "a shared page");
            p as usize
        };
        let (thread, tid) = started(move || {
            let timeout = libc::timespec {
                tv_sec: 60,
                tv_nsec: 0,
            };
            // SAFETY: the word is a live, aligned u32 of the shared page (zero: the wait
            // sleeps until woken or 60 s pass); the timeout is a live local.
            unsafe {
                libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAIT, 0, &timeout, 0, 0);
            }
        });
        (word, thread, tid)
    }

    /// A thread asleep in `nanosleep` or a timed futex wait sleeps; one blocked reading a pipe,
    /// or waiting on a futex another process may wake, is held; one that computes runs.
    #[test]
    fn a_sleeping_thread_sleeps_and_one_reading_a_pipe_does_not() {
        let stop = Arc::new(AtomicBool::new(false));
        let (mut reader, mut writer) = std::io::pipe().expect("a pipe");
        let napping = Arc::clone(&stop);
        let (napper, naps) = started(move || {
            while !napping.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let (sleeper, sleeps, wake) = sleeper();
        let (reading, reads) = started(move || {
            let _ = std::io::Read::read(&mut reader, &mut [0u8; 1]);
        });
        let (spinner, spins) = spinner(&stop);
        let (word, shared, waits) = shared_futex_waiter();
        // Each is seen as it should be once it got there (the reader may not have reached
        // its read yet, the napper may be between two naps).
        use super::Rest::{Held, Runs, Sleeps};
        for (tid, want) in [
            (naps, Sleeps),
            (sleeps, Sleeps),
            (reads, Held),
            (waits, Held),
            (spins, Runs),
        ] {
            wait_until(&format!("thread {tid}"), || super::rests(tid) == Some(want));
        }
        stop.store(true, Ordering::SeqCst);
        drop(wake);
        std::io::Write::write_all(&mut writer, b"x").expect("a byte");
        // SAFETY: the word is the shared page's, live; a wake of a futex no one waits on is
        // harmless.
        unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE, 1) };
        for t in [napper, sleeper, reading, shared, spinner] {
            t.join().unwrap();
        }
        assert_eq!(super::rests(i32::MAX), None, "no such thread");
    }

    /// A thread's CPU clock grows while it computes, not while it sleeps; a tid that names no
    /// thread of the process has none.
    #[test]
    fn a_threads_cpu_time_grows_as_it_computes_not_as_it_sleeps() {
        let stop = Arc::new(AtomicBool::new(false));
        let (spinner, spins) = spinner(&stop);
        let (sleeper, sleeps, wake) = sleeper();
        let slept_from = super::cpu_ns(sleeps).expect("the sleeper's clock");
        wait_until("the spinner's 100 ms", || {
            super::cpu_ns(spins).expect("the spinner's clock") >= 100_000_000
        });
        let slept = super::cpu_ns(sleeps).expect("the sleeper's clock") - slept_from;
        assert!(slept < 20_000_000, "the sleeper used {slept} ns");
        stop.store(true, Ordering::SeqCst);
        drop(wake);
        spinner.join().unwrap();
        sleeper.join().unwrap();
        // Joined once the kernel cleared its id word, which comes before the thread is reaped:
        // its clock goes a moment later.
        wait_until("an ended thread has no clock", || {
            super::cpu_ns(spins).is_none()
        });
        for bad in [0, -1, i32::MAX] {
            assert_eq!(super::cpu_ns(bad), None, "tid {bad}");
        }
    }

    /// A thread in `join` waits for a thread; one that computes, or sleeps with a timeout, does
    /// not.
    #[test]
    fn a_joining_thread_waits_for_a_thread_and_a_timed_sleeper_does_not() {
        let stop = Arc::new(AtomicBool::new(false));
        let (spinner, spins) = spinner(&stop);
        let (sleeper, sleeps, wake) = sleeper();
        let (joiner, joins) = started(move || {
            let _ = spinner.join();
        });
        wait_until("the joiner waiting", || {
            super::ThreadLook::default().waits_for_a_thread(joins)
        });
        // The sleeper in its timed futex wait: blocked, but not for a thread alone.
        wait_until("the sleeper in its wait", || {
            matches!(super::doing(sleeps), Some(super::Doing::Blocked(w))
                if w.first() == Some(&(libc::SYS_futex as u64)))
        });
        assert!(!super::ThreadLook::default().waits_for_a_thread(sleeps));
        let threads = super::threads().expect("/proc/self/task");
        assert!(threads.contains(&joins));
        assert!(!super::ThreadLook::default().waits_for_a_thread(spins));
        assert!(!super::ThreadLook::default().waits_for_a_thread(super::super::gettid()));
        stop.store(true, Ordering::SeqCst);
        let _ = joiner.join();
        drop(wake);
        let _ = sleeper.join();
    }

    /// A child that runs is seen among the process's children; one that ended, not yet reaped
    /// (a zombie), has ended. (Other tests' children run beside: no test that none runs.)
    #[test]
    fn a_running_child_runs_and_a_zombie_has_ended() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        assert!(!super::process_ended(pid));
        assert!(super::a_child_runs());
        super::super::signals::kill(pid as u32, libc::SIGKILL);
        wait_until("the child's end", || super::process_ended(pid));
        let _ = child.wait();
        assert!(super::process_ended(pid), "reaped: gone");
    }

    /// A grandchild that a child left behind is among the child's descendants.
    #[test]
    fn a_grandchild_left_behind_is_a_descendant() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & echo $!; sleep 60"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let all = super::processes();
        let d: Vec<i32> = super::descendants_of(child.id() as i32, &all)
            .iter()
            .map(|p| p.pid)
            .collect();
        let mine: Vec<i32> = super::descendants_of(super::me(), &all)
            .iter()
            .map(|p| p.pid)
            .collect();
        super::super::signals::kill(grandchild as u32, libc::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
        assert!(d.contains(&grandchild), "{d:?}");
        assert!(
            mine.contains(&(child.id() as i32)) && mine.contains(&grandchild),
            "{mine:?}"
        );
    }
}

/// Whether a child of this process runs (has not ended), and the program handles SIGCHLD: the
/// child's end runs a handler of the program's, which may wake a thread that waits for another
/// (its `sem_post`) or end a spin (a flag it sets). The children from each thread's
/// `/proc/self/task/<tid>/children`, or the whole process table where the kernel lacks them.
pub fn a_child_may_signal() -> bool {
    let handled = super::signals::current_action(libc::SIGCHLD).is_some_and(|a| {
        super::signals::runs_a_function(&a) && !super::signals::is_runtime_handler(&a)
    });
    handled && a_child_runs()
}

/// Whether a child of this process runs (not a zombie).
fn a_child_runs() -> bool {
    let listed: Option<Vec<i32>> = threads().and_then(|tids| {
        let mut kids = Vec::new();
        for tid in tids {
            // A thread that ended meanwhile lists nothing; a kernel without the file, none.
            match std::fs::read_to_string(format!("/proc/self/task/{tid}/children")) {
                Ok(text) => kids.extend(
                    text.split_whitespace()
                        .filter_map(|w| w.parse::<i32>().ok()),
                ),
                Err(_) if !crate::sys::thread_exists(tid) => {}
                Err(_) => return None,
            }
        }
        Some(kids)
    });
    match listed {
        Some(kids) => kids.into_iter().any(|pid| !process_ended(pid)),
        None => {
            let me = me();
            processes().iter().any(|p| p.parent == me && !p.ended)
        }
    }
}

/// Whether process `pid` has ended: gone, or a zombie (or being torn down).
fn process_ended(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_ended(&stat))
        .unwrap_or(true)
}

/// The timers of this process that run while its threads sleep and are armed
/// ([`real_timers`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RealTimers {
    /// A timer that fires once more at most (`alarm`, a timer without an interval).
    pub once: bool,
    /// A timer that fires again and again (an interval).
    pub periodic: bool,
}

/// The armed timers of this process that run while its threads sleep: `alarm` or
/// `setitimer(ITIMER_REAL)`, and POSIX timers (`timer_create`) on a clock other than a CPU-time
/// one. Their signal (or thread) may wake a thread that waits for another thread (a handler's
/// `sem_post`). CPU-time timers (`ITIMER_PROF`, a profiler's) do not run while the process
/// sleeps. From `getitimer` and `/proc/self/timers` with `timer_gettime` on each timer's id.
pub fn real_timers() -> RealTimers {
    let mut found = RealTimers::default();
    let mut note = |value_set: bool, interval_set: bool| {
        if value_set {
            found.once |= !interval_set;
            found.periodic |= interval_set;
        }
    };
    let mut it = itimer(0);
    // SAFETY: getitimer writes one itimerval, a valid local here.
    if unsafe { libc::getitimer(libc::ITIMER_REAL, &mut it) } == 0 {
        note(
            it.it_value.tv_sec != 0 || it.it_value.tv_usec != 0,
            it.it_interval.tv_sec != 0 || it.it_interval.tv_usec != 0,
        );
    }
    let Ok(text) = std::fs::read_to_string("/proc/self/timers") else {
        return found;
    };
    for (id, _) in posix_timers(&text)
        .into_iter()
        .filter(|&(_, clock)| clock >= 0)
    {
        let mut spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        // SAFETY: the raw timer_gettime takes the kernel's timer id (as /proc lists it; an id
        // since deleted fails with EINVAL) and writes one itimerspec, a valid local.
        let r = unsafe {
            libc::syscall(
                libc::SYS_timer_gettime,
                libc::c_long::from(id),
                &mut spec as *mut libc::itimerspec,
            )
        };
        if r == 0 {
            note(
                spec.it_value.tv_sec != 0 || spec.it_value.tv_nsec != 0,
                spec.it_interval.tv_sec != 0 || spec.it_interval.tv_nsec != 0,
            );
        }
    }
    found
}

/// An interval timer's setting that fires in `secs` seconds and every `secs` after (0: off).
fn itimer(secs: libc::time_t) -> libc::itimerval {
    let every = libc::timeval {
        tv_sec: secs,
        tv_usec: 0,
    };
    libc::itimerval {
        it_interval: every,
        it_value: every,
    }
}

/// The POSIX timers `/proc/self/timers` lists that notify (a signal or a thread; not
/// `SIGEV_NONE`'s, which wake nothing): each one's kernel id and clock (a CPU-time clock is
/// negative).
fn posix_timers(text: &str) -> Vec<(i32, i32)> {
    let mut out = Vec::new();
    let mut id = None;
    let mut notifies = true;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("ID:") {
            id = v.trim().parse().ok();
            notifies = true;
        } else if let Some(v) = line.strip_prefix("notify:") {
            notifies = !v.trim().starts_with("none");
        } else if let Some(v) = line.strip_prefix("ClockID:") {
            if let (Some(i), Ok(c), true) = (id.take(), v.trim().parse(), notifies) {
                out.push((i, c));
            }
        }
    }
    out
}

#[cfg(test)]
mod timer_tests {
    #[test]
    fn posix_timers_are_read_from_procs_listing() {
        let text = "ID: 0\nsignal: 14/0000000000000000\nnotify: signal/pid.77\nClockID: 1\n\
                    ID: 3\nsignal: 12/0000000000000000\nnotify: thread/tid.78\nClockID: -6\n\
                    ID: 4\nsignal: 0/0000000000000000\nnotify: none/pid.77\nClockID: 1\n";
        assert_eq!(super::posix_timers(text), vec![(0, 1), (3, -6)]);
        assert_eq!(super::posix_timers(""), vec![]);
    }

    #[test]
    fn an_alarm_is_a_real_timer_armed_once_and_an_interval_periodic() {
        use super::RealTimers;
        // SAFETY: alarm only sets this process's timer; cancelled below before it can fire.
        unsafe { libc::alarm(100) };
        let armed = super::real_timers();
        // SAFETY: as above.
        unsafe { libc::alarm(0) };
        assert_eq!(
            armed,
            RealTimers {
                once: true,
                periodic: false
            }
        );
        assert_eq!(super::real_timers(), RealTimers::default());
        let (every_100_s, off) = (super::itimer(100), super::itimer(0));
        // SAFETY: setitimer sets this process's real timer from a valid local (no old value
        // asked); disarmed below before it can fire.
        unsafe { libc::setitimer(libc::ITIMER_REAL, &every_100_s, std::ptr::null_mut()) };
        let armed = super::real_timers();
        // SAFETY: as above.
        unsafe { libc::setitimer(libc::ITIMER_REAL, &off, std::ptr::null_mut()) };
        assert_eq!(
            armed,
            RealTimers {
                once: false,
                periodic: true
            }
        );
    }
}
