//! The job's control wire: every line the launcher, the rendezvous and the nodes say to each
//! other, as one typed enum with one encoder ([`Line::encode`]) and one parser ([`Line::parse`]).
//! Lines are text, `DSM1 <WORD> <fields>`, one per `\n`: the hello a node says to the rendezvous
//! and its answer, the rendezvous file of srun and mpirun jobs, and what goes both ways on a
//! node's control connection while the job runs. A line that does not parse is refused with what
//! was wrong (never a panic), and its reader counts it.

use std::net::SocketAddr;

/// The protocol's version word, first on every line.
const VERSION: &str = "DSM1";

/// The longest line a reader takes (a `STATS` line carries every node's counters as JSON).
pub(crate) const MAX_LINE_BYTES: usize = 16 << 20;

/// In a WAIT line, before what the node waits for: a periodic real-time timer may wake it.
const TIMER_WORD: &str = "+timer ";

/// In a WAIT line, after the timer's word if any: a thread of the node spins on a word, and
/// its operations are messages on their way.
const SPIN_WORD: &str = "+spin ";

/// How the rendezvous keeps the connections it answers (see `super::rendezvous::Keep`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeersWord {
    /// Closed once the peers are sent.
    Peers,
    /// Kept by a launcher outside the job (dsmrun).
    Keep,
    /// Kept by rank 0, which watches the job from inside it.
    Watch,
}

impl PeersWord {
    fn word(self) -> &'static str {
        match self {
            PeersWord::Peers => "PEERS",
            PeersWord::Keep => "KEEP",
            PeersWord::Watch => "WATCH",
        }
    }
}

/// One line of the job's control wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// Node to rendezvous: this node of the job with `cookie` listens at `addr`, on
    /// `transport` (its `comm_type`: every node of a job must run the same).
    Hello {
        cookie: u64,
        rank: u16,
        addr: SocketAddr,
        transport: String,
    },
    /// Rendezvous to node: every node's address, in rank order, and who keeps the connection.
    Peers {
        how: PeersWord,
        addrs: Vec<SocketAddr>,
    },
    /// Rendezvous to node: its hello was refused.
    Error(String),
    /// The rendezvous file of an srun or mpirun job: where rank 0 listens, with the job's cookie.
    Published {
        job: String,
        addr: SocketAddr,
        cookie: u64,
    },
    /// Node to launcher: every thread of the node waits (for `what`), with `in_flight` bytes or
    /// messages on their way and `received` messages received so far; with `timer`, a periodic
    /// real-time timer of the node's may still wake one of them (its handler), and the verdict
    /// waits longer ([`crate::job::watch::TIMER_QUIET_FOR`]); `spins`: a thread of it spins on
    /// a word, and its operations are messages on their way
    /// ([`crate::job::watch::SPIN_QUIET_FOR`]). Spelled `WAIT IN_FLIGHT RECEIVED [+timer]
    /// [+spin] WHAT` (a node's `what` starts with `waits in`).
    Wait {
        in_flight: u64,
        received: u64,
        timer: bool,
        spins: bool,
        what: String,
    },
    /// Node to launcher: the node goes on again.
    Run,
    /// Node to launcher, every 250 ms while it lasts: the node runs (it does not wait), yet its
    /// threads took fewer than 4 page faults in the last second, whatever messages it serves or
    /// sends: they compute on the pages they hold, or wait for another node's word on plain
    /// loads of a copy (`crate::job::watch::Heard::quiet_runners`). `RUN` when it goes on.
    Quiet,
    /// Node to launcher: the node left the job properly.
    Bye,
    /// Node to launcher: the node ends because it lost `node`, for `why`.
    Blame { node: u16, why: String },
    /// Node 0 to launcher: every node's statistics, as JSON.
    Stats(String),
    /// Launcher to node: `node` was lost (it `how`: "was killed by signal 9"...).
    Lost { node: u16, how: String },
    /// Launcher (or rank 0) to node: the job cannot go on; what every node waits for.
    Stuck(String),
    /// Launcher (or rank 0) to node: this node has run quiet ([`Line::Quiet`]) for `quiet_secs`
    /// seconds while every other node waited or ran quiet too (`what`, as in [`Line::Stuck`]):
    /// drop the copies of other nodes' pages it holds (`crate::progress`). Spelled `REFRESH
    /// SECONDS WHAT`.
    Refresh { quiet_secs: u64, what: String },
    /// Launcher (or rank 0) to every node of a job whose running nodes are to be told
    /// [`Line::Refresh`], before them: send the diffs of the pages it wrote to their homes,
    /// dropping its written copies (`crate::progress`). Spelled `FLUSH`.
    Flush,
}

/// What was wrong with a line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a control line refused ({why}): {shown}")]
pub(crate) struct WireError {
    why: &'static str,
    /// The line, cut to 80 characters.
    shown: String,
}

/// A free-text field: one line, whatever it said (a newline would end the line early).
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

impl Line {
    /// The line, with its `\n`.
    pub(crate) fn encode(&self) -> String {
        let body = match self {
            Line::Hello {
                cookie,
                rank,
                addr,
                transport,
            } => format!("HELLO {cookie:016x} {rank} {addr} {transport}"),
            Line::Peers { how, addrs } => {
                let mut s = how.word().to_owned();
                for a in addrs {
                    s.push(' ');
                    s.push_str(&a.to_string());
                }
                s
            }
            Line::Error(why) => format!("ERROR {}", one_line(why)),
            Line::Published { job, addr, cookie } => {
                format!(
                    "RENDEZVOUS {} {addr} {cookie:016x}",
                    one_line(job).replace(' ', "_")
                )
            }
            Line::Wait {
                in_flight,
                received,
                timer,
                spins,
                what,
            } => {
                let timer = if *timer { TIMER_WORD } else { "" };
                let spins = if *spins { SPIN_WORD } else { "" };
                format!(
                    "WAIT {in_flight} {received} {timer}{spins}{}",
                    one_line(what)
                )
            }
            Line::Run => "RUN".into(),
            Line::Quiet => "QUIET".into(),
            Line::Bye => "BYE".into(),
            Line::Blame { node, why } => format!("BLAME {node} {}", one_line(why)),
            Line::Stats(json) => format!("STATS {}", one_line(json)),
            Line::Lost { node, how } => format!("LOST {node} {}", one_line(how)),
            Line::Stuck(what) => format!("STUCK {}", one_line(what)),
            Line::Refresh { quiet_secs, what } => {
                format!("REFRESH {quiet_secs} {}", one_line(what))
            }
            Line::Flush => "FLUSH".into(),
        };
        format!("{VERSION} {body}\n")
    }

    /// Parses one line (its `\n`, if any, and trailing spaces ignored).
    pub(crate) fn parse(line: &str) -> Result<Line, WireError> {
        let refuse = |why: &'static str| WireError {
            why,
            shown: line.chars().take(80).collect(),
        };
        if line.len() > MAX_LINE_BYTES {
            return Err(refuse("too long"));
        }
        let line = line.trim_end_matches(['\n', '\r', ' ']);
        let rest = line
            .strip_prefix(VERSION)
            .and_then(|r| r.strip_prefix(' ').or(r.is_empty().then_some("")))
            .ok_or_else(|| refuse("not DSM1"))?;
        let (word, text) = rest.split_once(' ').unwrap_or((rest, ""));
        let mut fields = text.split(' ');
        let mut next = |what: &'static str| fields.next().filter(|f| !f.is_empty()).ok_or(what);
        let hex = |f: &str| u64::from_str_radix(f, 16).ok().filter(|_| f.len() <= 16);
        let parsed = match word {
            "HELLO" => (|| {
                let cookie = hex(next("no cookie")?).ok_or("a cookie is 16 hex digits")?;
                let rank = next("no rank")?
                    .parse()
                    .map_err(|_| "a rank is 0 to 65535")?;
                let addr = next("no address")?.parse().map_err(|_| "not ip:port")?;
                let transport = next("no transport")?;
                if transport.len() > 16
                    || !transport
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b == b'-')
                {
                    return Err("a transport is a word of 16 letters or fewer");
                }
                match next("") {
                    Ok(_) => Err("words after the transport"),
                    Err(_) => Ok(Line::Hello {
                        cookie,
                        rank,
                        addr,
                        transport: transport.to_string(),
                    }),
                }
            })(),
            "PEERS" | "KEEP" | "WATCH" => {
                let how = match word {
                    "PEERS" => PeersWord::Peers,
                    "KEEP" => PeersWord::Keep,
                    _ => PeersWord::Watch,
                };
                text.split(' ')
                    .filter(|f| !f.is_empty())
                    .map(|a| a.parse().map_err(|_| "a peer is ip:port"))
                    .collect::<Result<Vec<SocketAddr>, _>>()
                    .map(|addrs| Line::Peers { how, addrs })
            }
            "ERROR" => Ok(Line::Error(text.to_owned())),
            "RENDEZVOUS" => (|| {
                let job = next("no job")?.to_owned();
                let addr = next("no address")?.parse().map_err(|_| "not ip:port")?;
                let cookie = hex(next("no cookie")?).ok_or("a cookie is 16 hex digits")?;
                Ok(Line::Published { job, addr, cookie })
            })(),
            "WAIT" => (|| {
                let in_flight = next("no count")?.parse().map_err(|_| "not a count")?;
                let received = next("no count")?.parse().map_err(|_| "not a count")?;
                let rest = text.splitn(3, ' ').nth(2).unwrap_or("");
                let (timer, rest) = match rest.strip_prefix(TIMER_WORD) {
                    Some(rest) => (true, rest),
                    None => (false, rest),
                };
                let (spins, what) = match rest.strip_prefix(SPIN_WORD) {
                    Some(what) => (true, what.to_owned()),
                    None => (false, rest.to_owned()),
                };
                Ok(Line::Wait {
                    in_flight,
                    received,
                    timer,
                    spins,
                    what,
                })
            })(),
            "RUN" if text.is_empty() => Ok(Line::Run),
            "QUIET" if text.is_empty() => Ok(Line::Quiet),
            "BYE" if text.is_empty() => Ok(Line::Bye),
            "FLUSH" if text.is_empty() => Ok(Line::Flush),
            "BLAME" | "LOST" => (|| {
                let node = next("no node")?
                    .parse()
                    .map_err(|_| "a node is 0 to 65535")?;
                let why = text.split_once(' ').map_or("", |(_, w)| w).to_owned();
                Ok(if word == "BLAME" {
                    Line::Blame { node, why }
                } else {
                    Line::Lost { node, how: why }
                })
            })(),
            "STATS" => Ok(Line::Stats(text.to_owned())),
            "STUCK" => Ok(Line::Stuck(text.to_owned())),
            "REFRESH" => (|| {
                let quiet_secs = next("no seconds")?
                    .parse()
                    .map_err(|_| "not a count of seconds")?;
                let what = text.split_once(' ').map_or("", |(_, w)| w).to_owned();
                Ok(Line::Refresh { quiet_secs, what })
            })(),
            _ => Err("unknown word"),
        };
        parsed.map_err(refuse)
    }
}

/// Whole lines out of a byte stream, as they complete: a connection's reader keeps one per
/// connection and feeds it what it reads. A line longer than [`MAX_LINE_BYTES`] is refused (and
/// skipped to its end) instead of growing without bound.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    partial: Vec<u8>,
    /// Bytes of an overlong line being skipped.
    skipping: bool,
    /// Lines refused so far (unparsable or overlong).
    pub(crate) refused: u64,
}

impl Lines {
    /// Feeds `bytes`; calls `line` with each line parsed, in order, and counts those refused.
    pub(crate) fn feed(&mut self, bytes: &[u8], mut line: impl FnMut(Line)) {
        for &b in bytes {
            if b != b'\n' {
                if self.skipping {
                    continue;
                }
                self.partial.push(b);
                if self.partial.len() > MAX_LINE_BYTES {
                    self.partial.clear();
                    self.skipping = true;
                    self.refused += 1;
                }
                continue;
            }
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            let text = String::from_utf8_lossy(&self.partial).into_owned();
            self.partial.clear();
            match Line::parse(&text) {
                Ok(l) => line(l),
                Err(e) => {
                    self.refused += 1;
                    log::debug!("{e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Line> {
        let a: SocketAddr = "10.1.2.3:4567".parse().unwrap();
        let b: SocketAddr = "[::1]:9".parse().unwrap();
        vec![
            Line::Hello {
                cookie: 0xab,
                rank: 7,
                addr: a,
                transport: "rdma-ud".into(),
            },
            Line::Peers {
                how: PeersWord::Keep,
                addrs: vec![a, b],
            },
            Line::Peers {
                how: PeersWord::Watch,
                addrs: vec![],
            },
            Line::Error("bad hello".into()),
            Line::Published {
                job: "17.0".into(),
                addr: a,
                cookie: u64::MAX,
            },
            Line::Wait {
                in_flight: 0,
                received: 12,
                timer: false,
                spins: false,
                what: "jia_barrier (thread 4), holding lock 1".into(),
            },
            Line::Wait {
                in_flight: 3,
                received: 0,
                timer: true,
                spins: false,
                what: "waits in a wait only another thread can end (main thread)".into(),
            },
            Line::Wait {
                in_flight: 1,
                received: 70,
                timer: false,
                spins: true,
                what: "waits in a spin on the 4-byte word at 0x7f0000001000".into(),
            },
            Line::Wait {
                in_flight: 0,
                received: 9,
                timer: true,
                spins: true,
                what: "waits in a spin on the 8-byte word at 0x7f0000002000".into(),
            },
            Line::Run,
            Line::Quiet,
            Line::Bye,
            Line::Blame {
                node: 3,
                why: "no answer for 2.0 s".into(),
            },
            Line::Stats("[{\"node\": 0}]".into()),
            Line::Lost {
                node: 1,
                how: "was killed by signal 9 (SIGKILL)".into(),
            },
            Line::Stuck("node 0 waits in jia_barrier; node 1 waits in jia_exit".into()),
            Line::Refresh {
                quiet_secs: 10,
                what: "node 0 waits in jia_barrier".into(),
            },
            Line::Flush,
        ]
    }

    #[test]
    fn every_line_round_trips_and_stays_one_line() {
        for l in every_kind() {
            let text = l.encode();
            assert_eq!(text.matches('\n').count(), 1, "{text:?}");
            assert_eq!(Line::parse(&text), Ok(l.clone()), "{text:?}");
        }
        let l = Line::Blame {
            node: 2,
            why: "two\nlines".into(),
        };
        assert_eq!(
            Line::parse(&l.encode()),
            Ok(Line::Blame {
                node: 2,
                why: "two lines".into()
            })
        );
    }

    #[test]
    fn the_lines_of_the_launcher_and_the_nodes_parse_as_they_always_read() {
        assert_eq!(
            Line::parse("DSM1 WAIT 0 5 waits in jia_lock(1)\n"),
            Ok(Line::Wait {
                in_flight: 0,
                received: 5,
                timer: false,
                spins: false,
                what: "waits in jia_lock(1)".into()
            })
        );
        assert_eq!(Line::parse("DSM1 BYE"), Ok(Line::Bye));
        assert!(Line::parse("DSM1 BYE now").is_err());
        assert!(Line::parse("DSM2 BYE").is_err());
        assert!(Line::parse("DSM1").is_err());
        assert!(Line::parse("DSM1 HELLO zz 1 1.2.3.4:5").is_err());
        assert!(Line::parse("DSM1 HELLO 00000000000000ab 70000 1.2.3.4:5").is_err());
        assert!(Line::parse("DSM1 HELLO 00000000000000ab 1 1.2.3.4:5 udp x").is_err());
        assert!(
            Line::parse("DSM1 HELLO 00000000000000ab 1 1.2.3.4:5").is_err(),
            "no transport"
        );
        assert!(Line::parse("DSM1 HELLO 00000000000000ab 1 1.2.3.4:5 UDP").is_err());
        assert_eq!(
            Line::parse("DSM1 HELLO 00000000000000ab 1 1.2.3.4:5 rdma-rc"),
            Ok(Line::Hello {
                cookie: 0xab,
                rank: 1,
                addr: "1.2.3.4:5".parse().unwrap(),
                transport: "rdma-rc".into()
            })
        );
        assert!(Line::parse("DSM1 LOST x how").is_err());
    }

    /// Random bytes, and mutated valid lines: refused or parsed, never a panic; the stream
    /// reader counts what it refuses and bounds what it keeps.
    #[test]
    fn fuzzed_lines_are_refused_or_parsed_never_a_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid: Vec<String> = every_kind().iter().map(Line::encode).collect();
        let mut reader = Lines::default();
        let (mut parsed, mut fed) = (0u64, 0u64);
        for _ in 0..20_000 {
            let mut bytes = valid[(rand() % valid.len() as u64) as usize]
                .clone()
                .into_bytes();
            for _ in 0..(rand() % 4) {
                let at = (rand() % bytes.len() as u64) as usize;
                match rand() % 3 {
                    0 => bytes[at] = rand() as u8,
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, rand() as u8),
                }
            }
            if rand() % 5 == 0 {
                bytes = (0..rand() % 64).map(|_| rand() as u8).collect();
            }
            let _ = Line::parse(&String::from_utf8_lossy(&bytes));
            fed += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
            reader.feed(&bytes, |_| parsed += 1);
        }
        assert_eq!(parsed + reader.refused, fed);
        assert!(reader.refused > 0 && parsed > 0);
    }

    #[test]
    fn an_overlong_line_is_refused_and_skipped_to_its_end() {
        let mut reader = Lines::default();
        let mut got = Vec::new();
        reader.feed(&vec![b'x'; MAX_LINE_BYTES + 10], |l| got.push(l));
        reader.feed(b"more\nDSM1 RUN\n", |l| got.push(l));
        assert_eq!(got, vec![Line::Run]);
        assert_eq!(reader.refused, 1);
    }
}
