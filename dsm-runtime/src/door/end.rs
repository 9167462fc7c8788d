//! How a node ends: a message on standard error written with one `write(2)` (whole, whatever
//! other threads and nodes print), then the exit status. From an ordinary thread the process
//! exits (`exit`: atexit handlers run, C's stdio is flushed); from signal context it leaves with
//! `_exit` and the same status (async-signal-safe: the interrupted code may hold stdio's locks).
//! So the launcher always sees the status the node chose, never a signal the runtime raised:
//! a node that ends because another failed says [`EXIT_PEER_FAILED`] wherever its threads were,
//! and the launcher names the node that failed first.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

use super::context::in_signal_context;
use crate::sys;

/// Exit status of a node that ends because another node failed (the launcher then names the
/// node that failed first, not this one).
pub const EXIT_PEER_FAILED: i32 = 86;

/// Exit status of a job whose race checker found data races.
pub const EXIT_RACES: i32 = dsm_races::EXIT_RACES;

/// This node's id, for its messages.
static RANK: AtomicU32 = AtomicU32::new(0);

/// The node is ending with an error (exit handlers must not start leaving the job meanwhile).
static ENDING: AtomicBool = AtomicBool::new(false);

/// The process is ending with the program's own status (`exit(3)` without `jia_exit`): its
/// exit handlers run on the thread that called `exit`, and no other thread may end it with
/// another status meanwhile (the peers' ends, which follow, would otherwise end it with 86).
static LEAVING: AtomicBool = AtomicBool::new(false);

/// The program's own status (`exit(3)` without `jia_exit`) while the node tells the others it
/// ends with it (0: none): a peer seen ending meanwhile (one that took the news and left, closing
/// its connection, before every other node acknowledged it) ends the process with this status,
/// not with [`EXIT_PEER_FAILED`], or the launcher would name the wrong cause.
static OWN_STATUS: AtomicI32 = AtomicI32::new(0);

/// The status this process ends with when it ends because another node failed: [`EXIT_PEER_FAILED`],
/// except in a node 0 that started its job itself (`.jiahosts`), which is also the job's launcher:
/// it ends with the failing node's status, as dsmrun would.
static PEER_FAILED_STATUS: AtomicI32 = AtomicI32::new(EXIT_PEER_FAILED);

/// The job's launcher runs in this process (a node 0 that started its job itself): a node that
/// ends because another failed waits for its verdict (the failing node's status), which may
/// come a moment after the failure's message.
static LAUNCHER_HERE: AtomicBool = AtomicBool::new(false);

/// Whether the launcher in this process has given its verdict, and the condition it is given on.
static VERDICT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
static VERDICT_GIVEN: std::sync::Condvar = std::sync::Condvar::new();

/// The job's launcher runs in this process (see [`LAUNCHER_HERE`]).
pub(crate) fn launcher_here() {
    LAUNCHER_HERE.store(true, Ordering::SeqCst);
}

/// From now on, ending because another node failed ends this process with `status` (the job's
/// launcher is in this process, and `status` is its verdict).
pub(crate) fn end_peer_failure_with(status: i32) {
    PEER_FAILED_STATUS.store(status, Ordering::SeqCst);
    verdict_given();
}

/// The launcher in this process has judged the job (it failed: [`end_peer_failure_with`]; or
/// every other node ended well): nobody waits for its verdict any more.
pub(crate) fn verdict_given() {
    *VERDICT.lock().unwrap_or_else(|p| p.into_inner()) = true;
    VERDICT_GIVEN.notify_all();
}

/// Thread context, ending because another node failed with the launcher in this process: waits
/// (5 s at most) for its verdict, so the process ends with the status the job ends with.
fn await_verdict() {
    if !LAUNCHER_HERE.load(Ordering::SeqCst) {
        return;
    }
    let given = VERDICT.lock().unwrap_or_else(|p| p.into_inner());
    let _ = VERDICT_GIVEN
        .wait_timeout_while(given, std::time::Duration::from_secs(5), |given| !*given)
        .unwrap_or_else(|p| p.into_inner());
}

/// `status`, or the verdict that replaces [`EXIT_PEER_FAILED`] in a self-launched node 0.
fn final_status(status: i32) -> i32 {
    if status == EXIT_PEER_FAILED {
        PEER_FAILED_STATUS.load(Ordering::SeqCst)
    } else {
        status
    }
}

/// The node ends with the program's own `status` (nonzero) from now on, once it has told the
/// others: whatever ends it first ends it with this status (see [`OWN_STATUS`]).
pub(crate) fn set_ending_with(status: i32) {
    OWN_STATUS.store(status, Ordering::SeqCst);
    ENDING.store(true, Ordering::SeqCst);
}

/// Ends the process from its exit handlers (where `exit` may not be called again) with
/// `status`: C's stdio flushed, what the node started ended (`_exit` skips the handler that
/// would), then `_exit`. Not `exit`'s remaining handlers: the service thread, which may see the
/// peers end meanwhile, must not race this thread to end the process with another status (it
/// parks, see [`LEAVING`]).
pub(crate) fn leave_with(status: i32) -> ! {
    ENDING.store(true, Ordering::SeqCst);
    LEAVING.store(true, Ordering::SeqCst);
    sys::flush_c_stdio();
    if !super::flags::FORKED.load(Ordering::Relaxed) {
        sys::process::end_descendants();
    }
    sys::signals::exit_now(status)
}

/// Whether the node is ending with an error.
pub(crate) fn ending() -> bool {
    ENDING.load(Ordering::SeqCst)
}

pub(crate) fn set_rank(rank: u16) {
    RANK.store(u32::from(rank), Ordering::Relaxed);
}

pub(crate) fn rank() -> u16 {
    RANK.load(Ordering::Relaxed) as u16
}

/// Ends the node with `dsm node N: error: MSG` and status 1.
pub(crate) fn fatal(msg: &str) -> ! {
    fatal_with(msg, 1)
}

/// Ends the node with `dsm node N: error: MSG` and `status`, from any context.
pub(crate) fn fatal_with(msg: &str, status: i32) -> ! {
    if in_signal_context() {
        die(msg, status);
    }
    end_with(Some(msg), status)
}

/// Rank 0's watch (under srun or mpirun) said why the job ends: its node, told, ends quietly.
static VERDICT_SAID: AtomicBool = AtomicBool::new(false);

/// Rank 0's watch says why the job ends, as `dsm node 0: error: MSG`, before it tells the
/// other ranks: mpirun ends every rank once one exits non-zero, and rank 0's own line, said
/// once the others had ended, was lost so (once in four deadlocked runs). Thread context.
pub(crate) fn say_verdict(msg: &str) {
    let line = format!("dsm node {}: error: {msg}\n", rank());
    sys::write_stderr(line.as_bytes());
    VERDICT_SAID.store(true, Ordering::SeqCst);
}

/// Whether [`say_verdict`] said it.
pub(crate) fn verdict_said() -> bool {
    VERDICT_SAID.load(Ordering::SeqCst)
}

/// Ends the node with `status` and no word of its own (its launcher says why), as
/// [`fatal_with`] does otherwise: the program's exit handlers run, C's stdio is flushed. Thread
/// context.
pub(crate) fn end_quietly(status: i32) -> ! {
    end_with(None, status)
}

fn end_with(msg: Option<&str>, status: i32) -> ! {
    // The line and `exit` must not be cut short by a cancellation of this thread.
    sys::signals::CancellationHeld::for_good();
    if LEAVING.load(Ordering::SeqCst) {
        // The process is in `exit` with the program's status on another thread: this one (the
        // service thread seeing its peers end, most likely) waits for that end.
        loop {
            std::thread::park();
        }
    }
    ENDING.store(true, Ordering::SeqCst);
    if let Some(msg) = msg {
        let line = format!("dsm node {}: error: {msg}\n", rank());
        sys::write_stderr(line.as_bytes());
    }
    let own = OWN_STATUS.load(Ordering::SeqCst);
    if own != 0 {
        // The program is ending with its own status on another thread, inside `exit`: this
        // thread (the service thread, which lost a peer that took the news first) ends the
        // process as that thread would, without calling `exit` a second time.
        leave_with(own);
    }
    if status == EXIT_PEER_FAILED {
        await_verdict();
    }
    std::process::exit(final_status(status));
}

/// Ends the node from its exit handlers with `dsm node N: error: MSG` and `status`
/// ([`leave_with`]).
pub(crate) fn fatal_flushed(msg: &str, status: i32) -> ! {
    sys::signals::CancellationHeld::for_good();
    let line = format!("dsm node {}: error: {msg}\n", rank());
    sys::write_stderr(line.as_bytes());
    leave_with(status)
}

/// Ends the node from any context without allocating or locking: `dsm node N: error: MSG` by
/// one `write(2)` (cut at 1 KiB), then `_exit(status)`. Async-signal-safe.
pub(crate) fn die(msg: &str, status: i32) -> ! {
    sys::signals::CancellationHeld::for_good();
    let mut line = Line::default();
    line.push(b"dsm node ");
    line.push_decimal(rank());
    line.push(b": error: ");
    line.push(msg.as_bytes());
    sys::write_stderr(line.ended());
    let own = OWN_STATUS.load(Ordering::SeqCst);
    sys::signals::exit_now(if own != 0 { own } else { final_status(status) })
}

/// A line built without allocating, for signal context.
pub(crate) struct Line {
    buf: [u8; 1024],
    len: usize,
}

impl Default for Line {
    fn default() -> Line {
        Line {
            buf: [0; 1024],
            len: 0,
        }
    }
}

impl Line {
    /// Appends `b`, cut to what fits with room for the final newline.
    pub(crate) fn push(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - 1 - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }

    pub(crate) fn push_decimal(&mut self, n: u16) {
        self.push_decimal_usize(usize::from(n));
    }

    pub(crate) fn push_decimal_usize(&mut self, n: usize) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }

    /// `n` as `0x` and lower-case hexadecimal digits.
    pub(crate) fn push_hex(&mut self, n: usize) {
        let mut digits = [0u8; 16];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            digits[at] = b"0123456789abcdef"[n % 16];
            n /= 16;
            if n == 0 {
                break;
            }
        }
        self.push(b"0x");
        self.push(&digits[at..]);
    }

    /// The line with its newline.
    pub(crate) fn ended(&mut self) -> &[u8] {
        self.buf[self.len] = b'\n';
        &self.buf[..=self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::Line;

    #[test]
    fn a_line_is_whole_and_ends_with_its_newline_however_long_the_message() {
        let mut l = Line::default();
        l.push(b"dsm node ");
        l.push_decimal(0);
        l.push_decimal(65_535);
        l.push(b": ");
        assert_eq!(l.ended(), b"dsm node 065535: \n");
        l.push(&[b'x'; 5000]);
        assert_eq!(l.ended().len(), 1024);
        assert_eq!(l.ended().last(), Some(&b'\n'));
    }
}
