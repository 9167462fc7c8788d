//! A hostile network, made by us: drops, duplicates, delays and reorders outgoing datagrams by
//! seed. This kernel has no netem, so loss tests on one machine need this (kernel loss with
//! nftables in network namespaces is tested too, but only drops).
//!
//! Configured by a string such as `drop=5,dup=1,reorder=10,delay_us=500,seed=7` (percentages;
//! `reorder` datagrams are held back a random time up to `delay_us`, so later ones overtake
//! them). The UDP transport reads it from `DSM_IMPAIR`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// The longest hold `delay_us` may ask for: 10 s, the default `peer_timeout_ms`.
pub const MAX_DELAY_US: u64 = 10_000_000;

/// How to mistreat datagrams.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImpairConfig {
    /// Percent of datagrams dropped.
    pub drop_pct: f64,
    /// Percent of datagrams sent twice.
    pub dup_pct: f64,
    /// Percent of datagrams held back (and so reordered).
    pub reorder_pct: f64,
    /// Longest hold.
    pub delay: Duration,
    /// The seed.
    pub seed: u64,
}

impl ImpairConfig {
    /// Parses `drop=5,dup=1,reorder=10,delay_us=500,seed=7` (any subset).
    pub fn parse(s: &str) -> Result<ImpairConfig, String> {
        let mut c = ImpairConfig {
            delay: Duration::from_micros(500),
            ..Default::default()
        };
        for kv in s.split(',').map(str::trim).filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("DSM_IMPAIR: `{kv}` is not key=value"))?;
            let pct = || match v.parse::<f64>() {
                Ok(n) if (0.0..=100.0).contains(&n) => Ok(n),
                _ => Err(format!(
                    "DSM_IMPAIR: {k}={v}: allowed a percentage, 0 to 100"
                )),
            };
            let whole = |most: u64| match v.parse::<u64>() {
                Ok(n) if n <= most => Ok(n),
                _ => Err(format!(
                    "DSM_IMPAIR: {k}={v}: allowed a whole number, 0 to {most}"
                )),
            };
            match k {
                "drop" => c.drop_pct = pct()?,
                "dup" => c.dup_pct = pct()?,
                "reorder" => c.reorder_pct = pct()?,
                "delay_us" => c.delay = Duration::from_micros(whole(MAX_DELAY_US)?),
                "seed" => c.seed = whole(u64::MAX)?,
                _ => {
                    return Err(format!(
                        "DSM_IMPAIR: unknown key `{k}`; known: drop, dup, reorder, delay_us, seed"
                    ));
                }
            }
        }
        Ok(c)
    }
}

/// Counters of what was done to the traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImpairStats {
    /// Datagrams dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Datagrams held back.
    pub delayed: u64,
}

/// A held datagram: (release time, order of holding, destination, bytes).
type Held = (Instant, u64, u16, Vec<u8>);

/// The impairment state of one sender.
#[derive(Debug)]
pub struct Impairment {
    cfg: ImpairConfig,
    rng: u64,
    held: BinaryHeap<Reverse<Held>>,
    order: u64,
    stats: ImpairStats,
    /// The sender is leaving ([`Impairment::leave`]).
    leaving: bool,
}

impl Impairment {
    /// A new impairment; `salt` (e.g. the node id) makes each sender's choices differ.
    pub fn new(cfg: ImpairConfig, salt: u64) -> Impairment {
        let rng = cfg.seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Impairment {
            cfg,
            rng,
            held: BinaryHeap::new(),
            order: 0,
            stats: ImpairStats::default(),
            leaving: false,
        }
    }

    fn roll(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64 * 100.0
    }

    /// What to send now of `dgram` for `to` (zero, one or two copies); held copies come out of
    /// [`Impairment::release`] later.
    pub fn outgoing(
        &mut self,
        now: Instant,
        to: u16,
        dgram: Vec<u8>,
        out: &mut Vec<(u16, Vec<u8>)>,
    ) {
        if self.roll() < self.cfg.drop_pct {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.roll() < self.cfg.dup_pct {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if !self.leaving && self.roll() < self.cfg.reorder_pct {
                let hold = self.cfg.delay.mul_f64(self.roll() / 100.0);
                self.order += 1;
                self.stats.delayed += 1;
                self.held
                    .push(Reverse((now + hold, self.order, to, dgram.clone())));
            } else {
                out.push((to, dgram.clone()));
            }
        }
    }

    /// Held datagrams whose time has come (all of them once the sender leaves).
    pub fn release(&mut self, now: Instant, out: &mut Vec<(u16, Vec<u8>)>) {
        while let Some(Reverse((t, ..))) = self.held.peek() {
            if *t > now && !self.leaving {
                break;
            }
            if let Some(Reverse((_, _, to, d))) = self.held.pop() {
                out.push((to, d));
            }
        }
    }

    /// The sender leaves: what is held is on the network, not lost with the sender, so the next
    /// [`Impairment::release`] gives it all, and nothing more is held back (drops and
    /// duplicates go on).
    pub fn leave(&mut self) {
        self.leaving = true;
    }

    /// When the next held datagram is due.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.peek().map(|Reverse((t, ..))| *t)
    }

    /// The counters.
    pub fn stats(&self) -> &ImpairStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_bad_settings() {
        let c = ImpairConfig::parse("drop=5, dup=1,reorder=10,delay_us=200,seed=3").unwrap();
        assert_eq!(
            (c.drop_pct, c.dup_pct, c.reorder_pct, c.delay, c.seed),
            (5.0, 1.0, 10.0, Duration::from_micros(200), 3)
        );
        assert!(
            ImpairConfig::parse("drop=500")
                .unwrap_err()
                .contains("0 to 100")
        );
        for bad in [
            "delay_us=-1",
            "delay_us=1e30",
            "delay_us=10000001",
            "seed=-5",
            "seed=1.5",
        ] {
            assert!(
                ImpairConfig::parse(bad)
                    .unwrap_err()
                    .contains("allowed a whole number"),
                "{bad}"
            );
        }
        assert!(
            ImpairConfig::parse("drop=x")
                .unwrap_err()
                .contains("0 to 100")
        );
        assert!(
            ImpairConfig::parse("jitter=5")
                .unwrap_err()
                .contains("unknown key")
        );
    }

    #[test]
    fn rates_match_the_settings_and_held_datagrams_come_back() {
        let cfg = ImpairConfig::parse("drop=5,dup=1,reorder=10,delay_us=1000,seed=9").unwrap();
        let mut imp = Impairment::new(cfg, 1);
        let t0 = Instant::now();
        let mut out = Vec::new();
        let n = 100_000;
        for i in 0..n {
            imp.outgoing(t0, 1, vec![i as u8], &mut out);
        }
        let s = imp.stats().clone();
        assert!((4_000..6_000).contains(&s.dropped), "{s:?}");
        assert!((500..1_500).contains(&s.duplicated), "{s:?}");
        assert!((8_000..12_000).contains(&s.delayed), "{s:?}");
        let now_sent = out.len() as u64;
        imp.release(t0 + Duration::from_millis(2), &mut out);
        assert_eq!(out.len() as u64, now_sent + s.delayed);
        assert_eq!(imp.next_release(), None);
    }
}
