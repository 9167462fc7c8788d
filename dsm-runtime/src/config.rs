//! Configuration: `.jiaconf` (JIAJIA's keys and ours) and `.jiahosts`.
//!
//! Values come from four places, later ones winning: defaults, the `.jiaconf` file, the environment
//! (`DSM_<KEY>` in upper case, e.g. `DSM_PREFETCH=off`), the command line. Every error names where
//! the bad value came from (file and line, variable or flag), the key, the value and what is
//! allowed.

use std::fmt;
use std::path::Path;

/// How nodes of one host move pages between them (`same_host`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameHostMode {
    /// `memory`: read in place, from the home's memory file, each copied into the reader's.
    Memory,
    /// `map`: read in place, shown from the home's memory file (mapped), not copied.
    Map,
    /// `transport`: through `comm_type`, as between hosts.
    Transport,
}

impl SameHostMode {
    /// The name used in `.jiaconf`.
    pub fn name(self) -> &'static str {
        match self {
            SameHostMode::Memory => "memory",
            SameHostMode::Map => "map",
            SameHostMode::Transport => "transport",
        }
    }
}

/// The transports a job can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommType {
    /// UDP with our acknowledgements and retransmission.
    Udp,
    /// Epoll TCP.
    Tcp,
    /// RDMA reliable connection.
    RdmaRc,
    /// RDMA unreliable datagram, with our reliability layer.
    RdmaUd,
}

impl CommType {
    /// The name used in `.jiaconf` and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CommType::Udp => "udp",
            CommType::Tcp => "tcp",
            CommType::RdmaRc => "rdma-rc",
            CommType::RdmaUd => "rdma-ud",
        }
    }

    /// Parses a transport name (`rdma` means `rdma-rc`, as in JIAJIA 3.0).
    pub fn parse(s: &str) -> Option<CommType> {
        Some(match s {
            "udp" => CommType::Udp,
            "tcp" => CommType::Tcp,
            "rdma" | "rdma-rc" => CommType::RdmaRc,
            "rdma-ud" => CommType::RdmaUd,
            _ => return None,
        })
    }
}

/// Where a setting came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A line of a file.
    File {
        /// The file.
        path: String,
        /// The line, from 1; 0 for the file as a whole (it cannot be read, or lists nothing).
        line: usize,
    },
    /// An environment variable.
    Env(String),
    /// A command-line flag.
    Flag(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { path, line: 0 } => write!(f, "{path}"),
            Origin::File { path, line } => write!(f, "{path}:{line}"),
            Origin::Env(v) => write!(f, "environment variable {v}"),
            Origin::Flag(v) => write!(f, "command-line flag {v}"),
        }
    }
}

/// A bad configuration or hosts entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {what}")]
pub struct ConfigError {
    /// Where.
    pub origin: Origin,
    /// What was wrong and what is allowed.
    pub what: String,
}

/// A job's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `comm_type`.
    pub comm_type: CommType,
    /// `global_start_addr`.
    pub global_start_addr: u64,
    /// `msg_buffer_size`: the largest datagram.
    pub msg_buffer_size: usize,
    /// `msg_queue_size`: fragments in flight per peer.
    pub msg_queue_size: usize,
    /// `prefetch`.
    pub prefetch: bool,
    /// `prefetch_pages`.
    pub prefetch_pages: u32,
    /// `max_checking_pages`.
    pub max_checking_pages: u32,
    /// `read_ahead_max_kib`: the largest read-ahead window.
    pub read_ahead_max_kib: u32,
    /// `forward_within_us`: a home asked for pages it sent whole to another node this long ago
    /// or less, unchanged since, has that node send them (0: never; many readers of the same
    /// pages at once, like every node reading a panel after a barrier).
    pub forward_within_us: u32,
    /// `cache_pages` (0: `auto`, a share of the machine's memory: [`auto_cache_pages`]).
    pub cache_pages: usize,
    /// `region_gib`.
    pub region_gib: u64,
    /// `huge_pages`: `auto` lands fetched runs in large folios, in a tmpfs of the node's own
    /// where the system allows one (`region::Backing`); `off`: a memfd, 4 KiB pages only.
    pub huge_pages: bool,
    /// `same_host`.
    pub same_host: SameHostMode,
    /// `peer_timeout_ms`.
    pub peer_timeout_ms: u64,
    /// `base_port` (0: any).
    pub base_port: u16,
    /// `rdma_device` (`None`: the first device).
    pub rdma_device: Option<String>,
    /// `rdma_port`.
    pub rdma_port: u8,
    /// `rdma_gid_index` (`None`: the first IPv4-mapped GID, else 0).
    pub rdma_gid_index: Option<u8>,
    /// `one_sided_reads`: on rdma-rc, read faults fetch pages with RDMA READ.
    pub one_sided_reads: bool,
    /// `home_migration`: a page written by one node alone between two barriers moves its home
    /// there (JIAJIA 2.1's `jia_config(HMIG, ON)`).
    pub home_migration: bool,
    /// `lock_handoffs`: a lock released by a thread while another thread of its node waits
    /// passes to it with no message while no other node waits, and this many times more once
    /// one does (0: never).
    pub lock_handoffs: u32,
    /// `check_races`: record every node's accesses and synchronisations and, at the end, report
    /// the pairs of accesses no synchronisation orders (`dsmrun --check-races`, `races.rs`).
    pub check_races: bool,
    /// `bind_to`: `core` pins each node dsmrun starts to a CPU of its own (T CPUs with
    /// `dsmrun --threads T`) when a host runs
    /// between 2 and as many nodes as it has CPUs (`none`: the scheduler places them).
    pub bind_to_core: bool,
    /// How the runtime waits: spins, slices, and whether fault handlers drive the node.
    pub tuning: Tuning,
}

/// How the runtime waits (keys of their own in `.jiaconf`, `DSM_<KEY>` in the environment). The
/// defaults were measured on 2 CPUs shared by two nodes (see `docs/design.md`, "Waiting"); a
/// machine with a CPU per thread may gain from longer spins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// `spin_blocked_us`: how long the service thread spins while an application thread is
    /// blocked on it, before it sleeps.
    pub spin_blocked_us: u32,
    /// `spin_again_us`: how long it spins after resuming a thread that tends to ask again at once.
    pub spin_again_us: u32,
    /// `service_slice_us`: the time slice the service thread asks the scheduler for (0: keep the
    /// default).
    pub service_slice_us: u32,
    /// `service_priority`: `realtime` (the default) puts the service thread in `SCHED_FIFO` while
    /// it sleeps for messages, where the process may; `normal` leaves it to the time-sharing
    /// scheduler.
    pub service_realtime: bool,
    /// `wait_spin_us`: how long a blocked application thread spins before it sleeps.
    pub wait_spin_us: u32,
    /// `drive`: fault handlers may run the node themselves when it is free.
    pub drive: bool,
    /// `drive_spin_us`: how long a driving handler polls before it sleeps on the transport.
    pub drive_spin_us: u32,
    /// `drive_limit_us`: how long a handler drives before handing its wait to the service thread.
    pub drive_limit_us: u32,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            spin_blocked_us: 200,
            spin_again_us: 0,
            service_slice_us: 100,
            service_realtime: true,
            wait_spin_us: 0,
            drive: true,
            drive_spin_us: 30,
            drive_limit_us: 2000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            comm_type: CommType::Udp,
            global_start_addr: 0x2000_0000_0000,
            msg_buffer_size: 65_000,
            msg_queue_size: 64,
            prefetch: true,
            prefetch_pages: 8,
            max_checking_pages: 16,
            read_ahead_max_kib: 4096,
            forward_within_us: 5000,
            cache_pages: 0,
            region_gib: 64,
            huge_pages: true,
            same_host: SameHostMode::Map,
            peer_timeout_ms: 10_000,
            base_port: 0,
            rdma_device: None,
            rdma_port: 1,
            rdma_gid_index: None,
            one_sided_reads: true,
            home_migration: HOME_MIGRATION_DEFAULT,
            check_races: false,
            lock_handoffs: 16,
            bind_to_core: true,
            tuning: Tuning::default(),
        }
    }
}

/// Threads per node as the launcher set them (`DSM_THREADS`, dsmrun --threads; 1 without it),
/// from 1 to `most` (the runtime's thread limit, `MAX_THREADS`), or what is wrong with the value.
pub fn threads_per_node(most: usize) -> Result<usize, String> {
    match std::env::var("DSM_THREADS") {
        Err(std::env::VarError::NotPresent) => Ok(1),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|t| (1..=most).contains(t))
            .ok_or_else(|| {
                format!(
                    "DSM_THREADS={}: threads per node must be a whole number from 1 to {most}",
                    shown(&v)
                )
            }),
        Err(e) => Err(format!("DSM_THREADS: {e}")),
    }
}

/// The cache of a node with `cache_pages = auto`: a quarter of the machine's memory
/// (`/proc/meminfo`'s `MemTotal`), shared by the `nodes_here` nodes of the job on this host, in
/// pages; 128 MiB where the memory cannot be read. A bound, not a reservation: a node uses what
/// it fetches.
pub fn auto_cache_pages(nodes_here: usize) -> usize {
    let total_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    match total_kib {
        Some(kib) => {
            let pages = kib / 4 / (dsm_core::PAGE_SIZE as u64 / 1024) / nodes_here.max(1) as u64;
            (pages as usize).clamp(32 * 1024, 1 << 24)
        }
        None => 32 * 1024,
    }
}

/// Whether home migration is on when nothing says otherwise.
pub const HOME_MIGRATION_DEFAULT: bool = true;

/// Every key, with what it allows (for error messages and `--help`).
pub const KEYS: &[(&str, &str)] = &[
    ("comm_type", "udp, tcp, rdma-rc, rdma-ud (rdma = rdma-rc)"),
    (
        "global_start_addr",
        "a page-aligned hex address between 0x10000000 and 0x7f0000000000",
    ),
    ("msg_buffer_size", "bytes per datagram, 1024 to 65000"),
    ("msg_queue_size", "messages in flight per peer, 1 to 4096"),
    ("prefetch", "on or off"),
    ("prefetch_pages", "0 to 65536 (the first read-ahead window)"),
    ("max_checking_pages", "0 to 4096"),
    (
        "read_ahead_max_kib",
        "64 to 1048576 (KiB; the read-ahead window grows up to this, and a quarter of the cache)",
    ),
    (
        "forward_within_us",
        "0 to 1000000 (a home has a node it sent the same pages this long ago send them to the \
         next reader; 0: never)",
    ),
    (
        "cache_pages",
        "auto (a quarter of the machine's memory, shared by its nodes) or 32 to 16777216 (one \
         x86-64 instruction can touch 32 pages: fewer could evict a page an access needs while \
         it faults on the next)",
    ),
    ("region_gib", "1 to 16384"),
    (
        "huge_pages",
        "auto (fetched runs land in large folios where the system lets a node mount a tmpfs of \
         its own) or off",
    ),
    (
        "same_host",
        "memory (nodes of one host read each other's pages in place, on udp and tcp), map (the \
         same, the pages read mapped from their home's memory, not copied) or transport \
         (through comm_type, as between hosts)",
    ),
    ("peer_timeout_ms", "100 to 3600000"),
    ("base_port", "0 (any free port) or 1024 to 65000"),
    (
        "rdma_device",
        "auto (the first device) or a device name such as rxe0 or mlx5_0",
    ),
    ("rdma_port", "1 to 255"),
    (
        "rdma_gid_index",
        "auto (the first IPv4-mapped RoCE v2 GID, else 0) or 0 to 255",
    ),
    (
        "one_sided_reads",
        "on or off (rdma-rc: page reads by RDMA READ)",
    ),
    (
        "home_migration",
        "on or off (a page one node alone writes between barriers moves there)",
    ),
    (
        "check_races",
        "on or off (report the accesses to the same bytes no synchronisation orders)",
    ),
    (
        "lock_handoffs",
        "0 to 1000000 (hand-offs of a lock between threads of a node once another node waits \
         for it, before it goes back to its manager; 0: none at all)",
    ),
    (
        "bind_to",
        "core or none (core: each node dsmrun starts on a host gets a CPU of its own, when they \
         fit)",
    ),
    (
        "system_mode",
        "memory, compute or hybrid (accepted for JIAJIA compatibility, no effect)",
    ),
    ("spin_blocked_us", "0 to 100000"),
    ("spin_again_us", "0 to 100000"),
    (
        "service_slice_us",
        "0 (the scheduler's default) or 50 to 100000",
    ),
    (
        "service_priority",
        "realtime (while it sleeps for messages, where allowed) or normal",
    ),
    ("wait_spin_us", "0 to 100000"),
    (
        "drive",
        "on or off (fault handlers run the node themselves)",
    ),
    ("drive_spin_us", "0 to 100000"),
    ("drive_limit_us", "0 to 1000000"),
];

/// The fewest remote pages a node may cache: what one x86-64 instruction can touch (an AVX-512
/// gather of 16 elements, each straddling two pages). With fewer, caching the page an access
/// faults on next can evict one the same access needs, and the access faults forever.
pub const MIN_CACHE_PAGES: usize = 32;

/// JIAJIA 3.0's `msg_buffer_size` is a number of message slots (16 in its own file), ours the
/// bytes of a datagram (1024 and up): a value that can only be a slot count is JIAJIA's.
const JIAJIA_SLOTS_BELOW: u64 = 1024;

/// A `.jiaconf` line whose value has JIAJIA's meaning rather than ours: what to tell the user
/// (the line is then left out). `None`: the line means here what it says.
fn jiajia_meaning(key: &str, value: &str) -> Option<String> {
    match key {
        "msg_buffer_size" => parse_num(value)
            .filter(|&n| (1..JIAJIA_SLOTS_BELOW).contains(&n))
            .map(|n| {
                format!(
                    "msg_buffer_size = {n} read as JIAJIA 3.0's count of message slots, which has no \
                     meaning here (ours is bytes per datagram, 1024 to 65000): ignored, datagrams stay \
                     at {} bytes",
                    Config::default().msg_buffer_size
                )
            }),
        _ => None,
    }
}

/// `s` for an error message: whole if short, else its start and its length (a 10 MB value is not
/// echoed back).
fn shown(s: &str) -> String {
    const MAX: usize = 60;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}

/// Reads a configuration or hosts file as text: a file that is not text (a NUL byte, or bytes
/// that are not UTF-8) is refused naming the line and byte, and a UTF-8 byte-order mark is
/// dropped.
pub fn read_text(path: &Path) -> Result<String, ConfigError> {
    let name = path.display().to_string();
    let at = |line| Origin::File {
        path: name.clone(),
        line,
    };
    let bytes = std::fs::read(path).map_err(|e| ConfigError {
        origin: at(0),
        what: format!("cannot read: {e}"),
    })?;
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    let bad = match std::str::from_utf8(bytes) {
        Ok(t) => t.bytes().position(|b| b == 0),
        Err(e) => Some(e.valid_up_to()),
    };
    match bad {
        None => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Some(off) => {
            let line = 1 + bytes[..off].iter().filter(|&&b| b == b'\n').count();
            Err(ConfigError {
                origin: at(line),
                what: format!(
                    "not a text file (byte {:#04x} at offset {off}): expected UTF-8 text lines",
                    bytes[off]
                ),
            })
        }
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "on" | "yes" | "true" | "1" => Some(true),
        "off" | "no" | "false" | "0" => Some(false),
        _ => None,
    }
}

fn parse_num(v: &str) -> Option<u64> {
    let v = v.replace('_', "");
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else {
        v.parse().ok()
    }
}

impl Config {
    /// Sets `key` to `value`, or says what is wrong.
    pub fn set(&mut self, key: &str, value: &str, origin: &Origin) -> Result<(), ConfigError> {
        let allowed = KEYS.iter().find(|(k, _)| *k == key).map(|(_, a)| *a);
        let Some(allowed) = allowed else {
            let keys: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
            let guess = nearest(key, keys.iter().copied())
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(ConfigError {
                origin: origin.clone(),
                what: format!(
                    "unknown key `{}`{guess}; known keys: {}",
                    shown(key),
                    keys.join(", ")
                ),
            });
        };
        let bad = || ConfigError {
            origin: origin.clone(),
            what: format!("{key} = {}: allowed: {allowed}", shown(value)),
        };
        let range = |lo: u64, hi: u64| {
            parse_num(value)
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(bad)
        };
        match key {
            "comm_type" => self.comm_type = CommType::parse(value).ok_or_else(bad)?,
            "global_start_addr" => {
                let a = range(0x1000_0000, 0x7f00_0000_0000)?;
                if a % dsm_core::PAGE_SIZE as u64 != 0 {
                    return Err(bad());
                }
                self.global_start_addr = a;
            }
            "msg_buffer_size" => self.msg_buffer_size = range(1024, 65_000)? as usize,
            "msg_queue_size" => self.msg_queue_size = range(1, 4096)? as usize,
            "prefetch" => self.prefetch = parse_bool(value).ok_or_else(bad)?,
            "one_sided_reads" => self.one_sided_reads = parse_bool(value).ok_or_else(bad)?,
            "home_migration" => self.home_migration = parse_bool(value).ok_or_else(bad)?,
            "lock_handoffs" => self.lock_handoffs = range(0, 1_000_000)? as u32,
            "check_races" => self.check_races = parse_bool(value).ok_or_else(bad)?,
            "bind_to" => {
                self.bind_to_core = match value {
                    "core" => true,
                    "none" => false,
                    _ => return Err(bad()),
                }
            }
            "rdma_device" => {
                let ok = !value.is_empty()
                    && value.len() <= 64
                    && value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if !ok {
                    return Err(bad());
                }
                self.rdma_device = (value != "auto").then(|| value.to_string());
            }
            "rdma_port" => self.rdma_port = range(1, 255)? as u8,
            "rdma_gid_index" => {
                self.rdma_gid_index = if value == "auto" {
                    None
                } else {
                    Some(range(0, 255)? as u8)
                }
            }
            "prefetch_pages" => self.prefetch_pages = range(0, 65_536)? as u32,
            "max_checking_pages" => self.max_checking_pages = range(0, 4096)? as u32,
            "read_ahead_max_kib" => self.read_ahead_max_kib = range(64, 1 << 20)? as u32,
            "forward_within_us" => self.forward_within_us = range(0, 1_000_000)? as u32,
            "cache_pages" if value == "auto" => self.cache_pages = 0,
            "cache_pages" => self.cache_pages = range(MIN_CACHE_PAGES as u64, 1 << 24)? as usize,
            "region_gib" => self.region_gib = range(1, dsm_core::alloc::MAX_REGION_GIB)?,
            "huge_pages" => {
                self.huge_pages = match value {
                    "auto" => true,
                    "off" => false,
                    _ => return Err(bad()),
                }
            }
            "same_host" => {
                self.same_host = match value {
                    "memory" => SameHostMode::Memory,
                    "map" => SameHostMode::Map,
                    "transport" => SameHostMode::Transport,
                    _ => return Err(bad()),
                }
            }
            "peer_timeout_ms" => self.peer_timeout_ms = range(100, 3_600_000)?,
            "base_port" => {
                let p = parse_num(value).ok_or_else(bad)?;
                if p != 0 && !(1024..=65_000).contains(&p) {
                    return Err(bad());
                }
                self.base_port = p as u16;
            }
            "spin_blocked_us" => self.tuning.spin_blocked_us = range(0, 100_000)? as u32,
            "spin_again_us" => self.tuning.spin_again_us = range(0, 100_000)? as u32,
            "service_slice_us" => {
                let us = range(0, 100_000)?;
                if us != 0 && us < 50 {
                    return Err(bad());
                }
                self.tuning.service_slice_us = us as u32;
            }
            "service_priority" => {
                self.tuning.service_realtime = match value {
                    "realtime" => true,
                    "normal" => false,
                    _ => return Err(bad()),
                }
            }
            "wait_spin_us" => self.tuning.wait_spin_us = range(0, 100_000)? as u32,
            "drive" => self.tuning.drive = parse_bool(value).ok_or_else(bad)?,
            "drive_spin_us" => self.tuning.drive_spin_us = range(0, 100_000)? as u32,
            "drive_limit_us" => self.tuning.drive_limit_us = range(0, 1_000_000)? as u32,
            "system_mode" => {
                if !matches!(value, "memory" | "compute" | "hybrid") {
                    return Err(bad());
                }
            }
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// Applies a `.jiaconf` text read from `path`. Returns notices for the user: a JIAJIA 3.0
    /// file is accepted as it is, and where one of its keys means something else here (its
    /// `msg_buffer_size` counts message slots, ours is bytes per datagram) the value is left
    /// out with a notice naming the line.
    pub fn apply_file_text(&mut self, path: &str, text: &str) -> Result<Vec<String>, ConfigError> {
        let mut notices = Vec::new();
        // A UTF-8 byte-order mark (some editors write one) is not part of the first key.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        // Each key's first line: a key given twice is refused, not silently the last one's.
        let mut first_at: Vec<(&str, usize)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let origin = Origin::File {
                path: path.to_owned(),
                line: i + 1,
            };
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(ConfigError {
                    origin,
                    what: format!("`{}` is not `key = value`", shown(line)),
                });
            };
            let (k, v) = (k.trim(), v.trim());
            if let Some(&(_, first)) = first_at.iter().find(|(seen, _)| *seen == k) {
                return Err(ConfigError {
                    origin,
                    what: format!(
                        "`{}` given again (first at line {first}): give each key once",
                        shown(k)
                    ),
                });
            }
            first_at.push((k, i + 1));
            if let Some(n) = jiajia_meaning(k, v) {
                notices.push(format!("{origin}: {n}"));
                continue;
            }
            self.set(k, v, &origin)?;
        }
        Ok(notices)
    }

    /// Applies the `.jiaconf` at `path` if it exists; returns its notices
    /// ([`Config::apply_file_text`]).
    pub fn apply_file(
        &mut self,
        path: &Path,
        must_exist: bool,
    ) -> Result<Vec<String>, ConfigError> {
        if !must_exist && !path.exists() {
            return Ok(Vec::new());
        }
        let text = read_text(path)?;
        self.apply_file_text(&path.display().to_string(), &text)
    }

    /// Applies `DSM_<KEY>` variables from the environment.
    pub fn apply_env(&mut self) -> Result<(), ConfigError> {
        for (k, _) in KEYS {
            let var = format!("DSM_{}", k.to_uppercase());
            if let Ok(v) = std::env::var(&var) {
                self.set(k, v.trim(), &Origin::Env(var))?;
            }
        }
        Ok(())
    }

    /// The settings as `key=value;...`, how the launcher hands the resolved settings to nodes.
    pub fn to_wire(&self) -> String {
        [
            format!("comm_type={}", self.comm_type.name()),
            format!("global_start_addr={:#x}", self.global_start_addr),
            format!("msg_buffer_size={}", self.msg_buffer_size),
            format!("msg_queue_size={}", self.msg_queue_size),
            format!("prefetch={}", if self.prefetch { "on" } else { "off" }),
            format!("prefetch_pages={}", self.prefetch_pages),
            format!("max_checking_pages={}", self.max_checking_pages),
            format!("read_ahead_max_kib={}", self.read_ahead_max_kib),
            format!("forward_within_us={}", self.forward_within_us),
            match self.cache_pages {
                0 => "cache_pages=auto".to_string(),
                n => format!("cache_pages={n}"),
            },
            format!("region_gib={}", self.region_gib),
            format!(
                "huge_pages={}",
                if self.huge_pages { "auto" } else { "off" }
            ),
            format!("same_host={}", self.same_host.name()),
            format!("peer_timeout_ms={}", self.peer_timeout_ms),
            format!("base_port={}", self.base_port),
            format!(
                "rdma_device={}",
                self.rdma_device.as_deref().unwrap_or("auto")
            ),
            format!("rdma_port={}", self.rdma_port),
            format!(
                "rdma_gid_index={}",
                self.rdma_gid_index.map_or("auto".into(), |i| i.to_string())
            ),
            format!(
                "one_sided_reads={}",
                if self.one_sided_reads { "on" } else { "off" }
            ),
            format!(
                "home_migration={}",
                if self.home_migration { "on" } else { "off" }
            ),
            format!("lock_handoffs={}", self.lock_handoffs),
            format!(
                "check_races={}",
                if self.check_races { "on" } else { "off" }
            ),
            format!(
                "bind_to={}",
                if self.bind_to_core { "core" } else { "none" }
            ),
            format!("spin_blocked_us={}", self.tuning.spin_blocked_us),
            format!("spin_again_us={}", self.tuning.spin_again_us),
            format!("service_slice_us={}", self.tuning.service_slice_us),
            format!(
                "service_priority={}",
                if self.tuning.service_realtime {
                    "realtime"
                } else {
                    "normal"
                }
            ),
            format!("wait_spin_us={}", self.tuning.wait_spin_us),
            format!("drive={}", if self.tuning.drive { "on" } else { "off" }),
            format!("drive_spin_us={}", self.tuning.drive_spin_us),
            format!("drive_limit_us={}", self.tuning.drive_limit_us),
        ]
        .join(";")
    }

    /// Every setting as `(key, value)`, as `.jiaconf` spells them.
    pub fn settings(&self) -> Vec<(String, String)> {
        self.to_wire()
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The inverse of [`Config::to_wire`].
    pub fn from_wire(s: &str) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        for kv in s.split(';').filter(|kv| !kv.is_empty()) {
            let origin = Origin::Env("DSM_CONFIG".into());
            let (k, v) = kv.split_once('=').ok_or_else(|| ConfigError {
                origin: origin.clone(),
                what: format!("`{kv}` is not key=value"),
            })?;
            if !KEYS.iter().any(|&(known, _)| known == k) {
                // Only a launcher sets DSM_CONFIG, and it passes every key it knows.
                return Err(ConfigError {
                    origin,
                    what: format!(
                        "the launcher passed setting `{}`, which this program does not know: \
                         it was built with an older dsm-runtime ({} here) than the dsmrun that \
                         started it; rebuild the program, or start it with its own dsmrun",
                        shown(k),
                        env!("CARGO_PKG_VERSION")
                    ),
                });
            }
            c.set(k, v, &origin)?;
        }
        Ok(c)
    }
}

/// One line of `.jiahosts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Host name or address.
    pub address: String,
    /// The ssh user, if given.
    pub user: Option<String>,
    /// Where it was read.
    pub line: usize,
}

/// Parses a `.jiahosts` text; warnings (an ignored password) go to `warn`.
pub fn parse_hosts(
    path: &str,
    text: &str,
    mut warn: impl FnMut(String),
) -> Result<Vec<Host>, ConfigError> {
    let mut hosts = Vec::new();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let origin = Origin::File {
            path: path.to_owned(),
            line: i + 1,
        };
        // Open MPI's hostfile words: `slots=N` runs N nodes there, `max_slots=M` (at least N)
        // is accepted.
        let mut slots = 1;
        let mut max_slots = None;
        let mut fields: Vec<&str> = Vec::new();
        for word in line.split_whitespace() {
            match word.split_once('=') {
                Some(("slots", n)) => {
                    slots = match n.parse::<usize>() {
                        Ok(n) if (1..=usize::from(dsm_core::MAX_NODES)).contains(&n) => n,
                        _ => {
                            return Err(ConfigError {
                                origin,
                                what: format!(
                                    "`{}`: allowed: 1 to {}",
                                    shown(word),
                                    dsm_core::MAX_NODES
                                ),
                            });
                        }
                    }
                }
                Some(("max_slots", n)) if n.parse::<usize>().is_ok() => {
                    max_slots = n.parse::<usize>().ok();
                }
                Some(_) => {
                    return Err(ConfigError {
                        origin,
                        what: format!(
                            "`{}`: the words a host line may carry are slots=N and max_slots=N",
                            shown(word)
                        ),
                    });
                }
                None => fields.push(word),
            }
        }
        if let Some(max) = max_slots.filter(|&m| m < slots) {
            return Err(ConfigError {
                origin,
                what: format!(
                    "`max_slots={max}` is below `slots={slots}`: nodes past it would not fit"
                ),
            });
        }
        match fields.len() {
            1 | 2 => {}
            3 => warn(format!(
                "{origin}: the password field is ignored (use ssh keys)"
            )),
            _ => {
                return Err(ConfigError {
                    origin,
                    what: format!("`{}`: expected `address [user [password]]`", shown(line)),
                });
            }
        }
        let address = fields[0];
        if address.len() > 253
            || !address
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-_:[]".contains(c))
        {
            return Err(ConfigError {
                origin,
                what: format!("`{}` is not a host name or address", shown(address)),
            });
        }
        if let Some(port) = port_of(address) {
            return Err(ConfigError {
                origin,
                what: format!(
                    "`{}` carries a port ({port}): a host line names the host alone (the job's \
                     ports come from base_port; ssh's port goes in ~/.ssh/config or \
                     DSM_SSH=\"ssh -p {port}\")",
                    shown(address)
                ),
            });
        }
        if let Some(why) = not_a_host(address) {
            return Err(ConfigError {
                origin,
                what: format!(
                    "`{address}` is {why}, which names no one host: give the host's name or one \
                     of its addresses"
                ),
            });
        }
        for _ in 0..slots {
            hosts.push(Host {
                address: address.to_owned(),
                user: fields.get(1).map(|u| (*u).to_owned()),
                line: i + 1,
            });
        }
    }
    if hosts.is_empty() {
        return Err(ConfigError {
            origin: Origin::File {
                path: path.to_owned(),
                line: 0,
            },
            what: "no hosts listed".into(),
        });
    }
    Ok(hosts)
}

/// The port of a `host:port` (or `[v6]:port`) address, which a host line may not carry; `None`
/// for a host name or a plain IPv4 or IPv6 address.
fn port_of(address: &str) -> Option<&str> {
    if address.parse::<std::net::Ipv6Addr>().is_ok() {
        return None;
    }
    let (host, port) = address.rsplit_once(':')?;
    let bracketed = host.starts_with('[') && host.ends_with(']');
    (bracketed || !host.contains(':')).then_some(port)
}

/// Why `address` (a literal IP address) cannot be a host of a job: the unspecified address,
/// a broadcast or multicast address (a node would send to many hosts, or to none that answers).
fn not_a_host(address: &str) -> Option<&'static str> {
    use std::net::IpAddr;
    let ip: IpAddr = address.trim_matches(['[', ']']).parse().ok()?;
    match ip {
        _ if ip.is_unspecified() => Some("the unspecified address"),
        _ if ip.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        // The loopback network's broadcast (127.0.0.0/8).
        IpAddr::V4(v4) if v4.octets() == [127, 255, 255, 255] => Some("a broadcast address"),
        _ => None,
    }
}

/// The environment variables the runtime, its launcher and its tools read besides the settings'
/// `DSM_<KEY>`: what each is for.
pub const OTHER_VARIABLES: &[(&str, &str)] = &[
    ("DSM_RANK", "a node's id, set by dsmrun"),
    ("DSM_SIZE", "the job's node count, set by dsmrun"),
    ("DSM_COOKIE", "the job's cookie, set by dsmrun"),
    ("DSM_RENDEZVOUS", "the job's rendezvous, set by dsmrun"),
    (
        "DSM_RENDEZVOUS_FILE",
        "where rank 0 publishes the rendezvous under srun or mpirun",
    ),
    ("DSM_JOB_ID", "the job id naming the rendezvous file"),
    (
        "DSM_THREADS",
        "threads per node (dsmrun --threads): the apps' --threads, and CPUs per node for bind_to",
    ),
    ("DSM_CONFIG", "the settings a launcher hands its nodes"),
    ("DSM_BIND", "the address a node binds"),
    (
        "DSM_LOCAL_RANK",
        "a node's index among those of its host, set by dsmrun",
    ),
    (
        "DSM_LOCAL_SIZE",
        "the nodes on a node's host, set by dsmrun",
    ),
    ("DSM_STATS", "print the statistics table (dsmrun --stats)"),
    (
        "DSM_STATS_JSON",
        "write every node's statistics as JSON (dsmrun --stats-json)",
    ),
    ("DSM_SSH", "the command that reaches remote hosts"),
    ("DSM_IMPAIR", "fault injection on the UDP layer"),
    ("DSM_FAULT_TRACE", "the fault trace's directory"),
    ("DSM_SIM_CASES", "the simulator's random programs (tests)"),
    ("DSM_SIM_SEED", "one simulator case (tests)"),
    ("DSM_SIM_BASE", "the simulator's first seed (tests)"),
    (
        "DSM_SIM_SECOND_THREAD",
        "the simulator's threaded cases (tests)",
    ),
    ("DSM_FUZZ_FRAMES", "frames fed to the decoder (tests)"),
    ("DSM_BENCH_FONT", "dsm-bench's chart font"),
    ("DSM_MPI_BIN", "dsm-bench's MPI programs"),
    ("DSM_TEST_RDMA", "the RDMA tests (scripts/test-rdma)"),
];

/// The `DSM_*` variables of the environment that are neither a setting nor one of
/// [`OTHER_VARIABLES`], each with the nearest known name: a typo (`DSM_PREFTECH=off`) would
/// otherwise be ignored without a word.
pub fn unknown_env_vars() -> Vec<String> {
    let mut vars: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    vars.sort();
    vars.iter().filter_map(|v| unknown_variable(v)).collect()
}

/// The setting a `DSM_<KEY>` variable sets (`DSM_COMM_TYPE`: `comm_type`), if it names one.
pub fn setting_of_variable(var: &str) -> Option<&'static str> {
    let key = var.strip_prefix("DSM_")?;
    KEYS.iter()
        .map(|(k, _)| *k)
        .find(|k| k.to_uppercase() == key)
}

/// A warning for `var` if it looks like a misspelt setting or variable of the runtime.
pub fn unknown_variable(var: &str) -> Option<String> {
    if !var.starts_with("DSM_") {
        return None;
    }
    let known: Vec<String> = KEYS
        .iter()
        .map(|(k, _)| format!("DSM_{}", k.to_uppercase()))
        .chain(OTHER_VARIABLES.iter().map(|(v, _)| v.to_string()))
        .collect();
    if known.iter().any(|k| k == var) {
        return None;
    }
    // A program's own DSM_ variable (DSM_MAIN) is none of the runtime's business: only a name
    // close to one of the runtime's is a likely typo, and the names other tools use for a
    // setting point at ours.
    if let Some((_, ours)) = ALIASES.iter().find(|(a, _)| *a == var) {
        return Some(format!(
            "{var} is not a variable of the runtime (did you mean {ours}?): ignored"
        ));
    }
    let k = nearest(var, known.iter().map(String::as_str))?;
    Some(format!(
        "{var} is not a setting or a variable of the runtime (did you mean {k}?): ignored"
    ))
}

/// Names other tools give what a setting of ours does, and ours.
const ALIASES: &[(&str, &str)] = &[
    ("DSM_TRANSPORT", "DSM_COMM_TYPE, or dsmrun --transport"),
    ("DSM_NODES", "dsmrun -n"),
    ("DSM_HOSTS", "dsmrun --hosts"),
];

/// The name of `names` nearest `word` if it is close enough to be a typo of it: at most 2
/// edits, and fewer than a third of the word's letters.
fn nearest<'a>(word: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let bound = 2.min(word.len().saturating_sub(1) / 3).max(1);
    names
        .map(|k| {
            (
                edit_distance(&k.to_ascii_lowercase(), &word.to_ascii_lowercase()),
                k,
            )
        })
        .min()
        .filter(|&(d, _)| d <= bound)
        .map(|(_, k)| k)
}

/// Edits (insert, delete, substitute, swap two neighbours) between `a` and `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_typo_is_one_edit_from_its_variable() {
        assert_eq!(super::edit_distance("DSM_PREFETCH", "DSM_PREFTECH"), 1);
        assert_eq!(super::edit_distance("DSM_PREFETCH", "DSM_PREFETCH"), 0);
        assert_eq!(super::edit_distance("DSM_CACHE_PAGES", "DSM_CACHEPAGES"), 1);
        assert!(super::edit_distance("DSM_PREFETCH", "DSM_BIND") > 3);
    }

    use super::*;

    fn file_err(text: &str) -> String {
        Config::default()
            .apply_file_text(".jiaconf", text)
            .unwrap_err()
            .to_string()
    }

    /// JIAJIA 3.0's own `.jiaconf`, every key with its meaning there: accepted, the one key that
    /// means something else here left out with a notice naming its line.
    #[test]
    fn a_jiajia_3_jiaconf_is_accepted_as_it_is() {
        let text = "\u{feff}# JIAJIA 3.0 configuration\n\
                    system_mode = hybrid\n\
                    comm_type = tcp\n\
                    global_start_addr = 0x400000000\n\
                    msg_buffer_size = 16   # message slots\n\
                    msg_queue_size = 32\n\
                    prefetch = on\n\
                    prefetch_pages = 4\n\
                    max_checking_pages = 8\n";
        let mut c = Config::default();
        let notices = c.apply_file_text(".jiaconf", text).unwrap();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].starts_with(".jiaconf:5: msg_buffer_size = 16 read as JIAJIA 3.0's count"),
            "{}",
            notices[0]
        );
        assert_eq!(c.comm_type, CommType::Tcp);
        assert_eq!(c.global_start_addr, 0x4_0000_0000);
        assert_eq!(c.msg_buffer_size, Config::default().msg_buffer_size);
        assert_eq!(c.msg_queue_size, 32);
        assert_eq!((c.prefetch_pages, c.max_checking_pages), (4, 8));
        // Our strictness stays for everything else: a byte count out of range is still an error.
        assert!(file_err("msg_buffer_size = 70000").contains(".jiaconf:1:"));
        assert!(file_err("msg_buffer_size = 0").contains("allowed: bytes per datagram"));
        // From the environment or the command line the key keeps its own meaning only.
        assert!(
            Config::default()
                .set(
                    "msg_buffer_size",
                    "16",
                    &Origin::Env("DSM_MSG_BUFFER_SIZE".into())
                )
                .is_err()
        );
    }

    #[test]
    fn the_automatic_cache_is_a_share_of_the_machine_and_travels_as_auto() {
        let mut c = Config::default();
        c.set("cache_pages", "4096", &Origin::Flag("--set".into()))
            .unwrap();
        c.set("cache_pages", "auto", &Origin::Flag("--set".into()))
            .unwrap();
        assert_eq!(c.cache_pages, 0);
        assert!(c.to_wire().contains("cache_pages=auto"));
        assert_eq!(Config::from_wire(&c.to_wire()).unwrap(), c);
        let (one, four) = (auto_cache_pages(1), auto_cache_pages(4));
        assert!((32 * 1024..=1 << 24).contains(&one), "{one}");
        assert!(four <= one && four >= 32 * 1024, "{four} of {one}");
    }

    #[test]
    fn every_key_of_the_example_file_parses() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../.jiaconf.example"))
                .unwrap();
        let mut c = Config::default();
        c.apply_file_text(".jiaconf.example", &text).unwrap();
        assert_eq!(c, Config::default(), "the example documents the defaults");
        let missing: Vec<&str> = KEYS
            .iter()
            .map(|&(k, _)| k)
            .filter(|k| {
                !text
                    .lines()
                    .any(|l| l.split('=').next().map(str::trim) == Some(*k))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "keys the example leaves out: {missing:?}"
        );
    }

    #[test]
    fn bad_lines_name_file_line_key_value_and_what_is_allowed() {
        assert_eq!(
            file_err("# c\nprefetch = maybe\n"),
            ".jiaconf:2: prefetch = maybe: allowed: on or off"
        );
        assert!(
            file_err("colour = blue")
                .starts_with(".jiaconf:1: unknown key `colour`; known keys: comm_type")
        );
        assert_eq!(
            file_err("msg_queue_size = 0"),
            ".jiaconf:1: msg_queue_size = 0: allowed: messages in flight per peer, 1 to 4096"
        );
        assert!(file_err("global_start_addr = 0x1001").contains("page-aligned"));
        assert!(file_err("comm_type = carrier-pigeon").contains("udp, tcp, rdma-rc, rdma-ud"));
        assert!(file_err("just words").contains("is not `key = value`"));
        assert_eq!(
            file_err("cache_pages = 32\n# again\ncache_pages = 40\n"),
            ".jiaconf:3: `cache_pages` given again (first at line 1): give each key once"
        );
    }

    #[test]
    fn a_file_that_cannot_be_read_is_named_without_a_line() {
        let e = read_text(Path::new("/nonexistent/jiaconf")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/nonexistent/jiaconf: cannot read: "),
            "{e}"
        );
        let e = parse_hosts("hosts", "# nobody\n", |_| {}).unwrap_err();
        assert_eq!(e.to_string(), "hosts: no hosts listed");
    }

    #[test]
    fn a_setting_from_a_newer_launcher_is_named_as_version_skew() {
        let e = Config::from_wire("prefetch=on;shiny_new_key=7")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`shiny_new_key`"), "{e}");
        assert!(e.contains("older dsm-runtime"), "{e}");
    }

    #[test]
    fn values_round_trip_through_the_launcher_form() {
        let mut c = Config::default();
        c.set("prefetch", "off", &Origin::Flag("--prefetch".into()))
            .unwrap();
        c.set("comm_type", "rdma", &Origin::Flag("--transport".into()))
            .unwrap();
        c.set("cache_pages", "0x100", &Origin::Flag("-c".into()))
            .unwrap();
        assert_eq!(Config::from_wire(&c.to_wire()).unwrap(), c);
    }

    #[test]
    fn hosts_files_accept_open_mpi_slots() {
        let hosts = parse_hosts(
            "hostfile",
            "node1 slots=3\nnode2 slots=2 max_slots=4\nnode3\n",
            |_| {},
        )
        .unwrap();
        let names: Vec<&str> = hosts.iter().map(|h| h.address.as_str()).collect();
        assert_eq!(
            names,
            ["node1", "node1", "node1", "node2", "node2", "node3"]
        );
        let e = parse_hosts("hostfile", "node1 slots=0\n", |_| {}).unwrap_err();
        assert!(
            e.to_string()
                .contains("hostfile:1: `slots=0`: allowed: 1 to"),
            "{e}"
        );
        let e = parse_hosts("hostfile", "node1 cpus=2\n", |_| {}).unwrap_err();
        assert!(e.to_string().contains("slots=N and max_slots=N"), "{e}");
        let e = parse_hosts("hostfile", "node1\nnode2 max_slots=1 slots=2\n", |_| {}).unwrap_err();
        assert!(
            e.to_string()
                .contains("hostfile:2: `max_slots=1` is below `slots=2`"),
            "{e}"
        );
    }

    #[test]
    fn hosts_files_accept_jiajia_lines_and_warn_about_passwords() {
        let mut warnings = Vec::new();
        let hosts = parse_hosts(
            ".jiahosts",
            "# master\n10.0.0.1\n\nnode2 alice secret # old style\nnode2\n",
            |w| warnings.push(w),
        )
        .unwrap();
        assert_eq!(hosts.len(), 3);
        assert_eq!(hosts[1].user.as_deref(), Some("alice"));
        assert_eq!(
            warnings,
            vec![".jiahosts:4: the password field is ignored (use ssh keys)".to_string()]
        );
        assert!(
            parse_hosts("h", "a b c d\n", |_| {})
                .unwrap_err()
                .to_string()
                .starts_with("h:1:")
        );
        assert!(parse_hosts("h", "# nothing\n", |_| {}).is_err());
        assert!(
            parse_hosts("h", "bad/host\n", |_| {})
                .unwrap_err()
                .to_string()
                .contains("not a host name")
        );
    }
}
