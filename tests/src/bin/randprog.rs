//! Random programs free of data races, of the simulator's kind, run for real under the race
//! checker (`tests/tests/races.rs`): `randprog SEED [racy]`.
//!
//! Phase by phase, between barriers, every word of a shared array has a role: owned by one node
//! (only it reads and writes it), read-only, under one of a few locks (any node reads and writes
//! it holding that lock), or published by one node (it writes the word, then sets the phase's
//! condition variable; the others wait on it, then read). Every node draws the same roles from
//! the seed and its own operations from the seed and its number. With `racy`, in one phase one
//! node also writes a word another node owns, both after their last synchronisation of the
//! phase: that pair of lines must be reported, and nothing else.

use dsm_runtime::{AllocPolicy, SharedArray};

/// Words, spread over pages (one every `STRIDE` elements).
const WORDS: usize = 64;
const STRIDE: usize = 37;
const PHASES: u64 = 6;
const LOCKS: u64 = 4;

/// xorshift64*: the same sequence on every node for a seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Owned(usize),
    ReadOnly,
    Locked(u16),
    Published,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        eprintln!("usage: randprog SEED [racy]");
        std::process::exit(2)
    });
    let racy = args.next().as_deref() == Some("racy");
    let dsm = dsm_runtime::init().expect("join the job");
    let (me, nodes) = (dsm.id(), dsm.nodes());
    let a: SharedArray<u64> = dsm
        .alloc(WORDS * STRIDE, AllocPolicy::RoundRobin)
        .expect("allocate");
    let at = |w: usize| w * STRIDE;
    let mut shared = Rng::new(seed);
    // The racy phase and pair: a word owned by one node, written by another.
    let racy_phase = shared.below(PHASES);
    dsm.barrier();
    for phase in 0..PHASES {
        let producer = shared.below(nodes as u64) as usize;
        let cv = phase as u16;
        let roles: Vec<Role> = (0..WORDS)
            .map(|_| match shared.below(4) {
                0 => Role::Owned(shared.below(nodes as u64) as usize),
                1 => Role::ReadOnly,
                2 => Role::Locked(shared.below(LOCKS) as u16),
                _ => Role::Published,
            })
            .collect();
        let injected = (racy && nodes > 1 && phase == racy_phase)
            .then(|| {
                let owned: Vec<usize> = (0..WORDS)
                    .filter(|&w| matches!(roles[w], Role::Owned(_)))
                    .collect();
                let w = *owned.get(shared.below(owned.len().max(1) as u64) as usize)?;
                let Role::Owned(owner) = roles[w] else {
                    return None;
                };
                let intruder = (owner + 1 + shared.below(nodes as u64 - 1) as usize) % nodes;
                Some((w, owner, intruder))
            })
            .flatten();
        let mut mine = Rng::new(seed ^ (phase << 32) ^ (me as u64 + 1) << 48);
        // The producer publishes first.
        if me == producer {
            for w in (0..WORDS).filter(|&w| roles[w] == Role::Published) {
                a.set(at(w), phase * 1000 + w as u64);
            }
            dsm.setcv(cv);
        }
        for _ in 0..5 + mine.below(40) {
            let w = mine.below(WORDS as u64) as usize;
            let write = mine.below(2) == 0;
            match roles[w] {
                Role::Owned(o) if o == me => {
                    if write {
                        a.set(at(w), a.get(at(w)) + 1);
                    } else {
                        std::hint::black_box(a.get(at(w)));
                    }
                }
                Role::ReadOnly => {
                    std::hint::black_box(a.get(at(w)));
                }
                Role::Locked(l) => {
                    let _g = dsm.lock(l);
                    if write {
                        a.set(at(w), a.get(at(w)) + 1);
                    } else {
                        std::hint::black_box(a.get(at(w)));
                    }
                }
                Role::Owned(_) | Role::Published => {}
            }
        }
        if me != producer {
            dsm.waitcv(cv);
            for w in (0..WORDS).filter(|&w| roles[w] == Role::Published) {
                std::hint::black_box(a.get(at(w)));
            }
        }
        // The injected pair, each after its node's last synchronisation of the phase: no lock
        // or condition variable can order one before the other (one made earlier could: the
        // owner releasing a lock after its write that the intruder takes before its own).
        if let Some((w, owner, intruder)) = injected {
            if me == owner {
                a.set(at(w), 1); // race: owner
            }
            if me == intruder {
                a.set(at(w), 2); // race: intruder
            }
        }
        dsm.barrier();
    }
    dsm.exit();
}
