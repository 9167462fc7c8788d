//! Collective allocation and home placement, with JIAJIA's policies.
//!
//! Every node makes the same allocation calls in the same order, so every node computes the same
//! addresses and homes without a message. A running digest of the calls travels with each barrier
//! so a program that allocates differently on two nodes is caught instead of corrupting memory.

use crate::types::{NodeId, PAGE_SIZE, PageNum};

/// How an allocation's pages are spread over homes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocPolicy {
    /// `jia_alloc3`: blocks of `block_bytes` (rounded up to pages, at least one byte) to each
    /// node in turn, from `start`.
    Cyclic {
        /// Bytes per block.
        block_bytes: u64,
        /// The first block's home.
        start: NodeId,
    },
    /// `jia_alloc4`: block `i` has `blocks_bytes[i]` bytes (rounded up to pages) and goes to node
    /// `start + i`; the list repeats if the allocation is longer.
    Blocks {
        /// The block sizes.
        blocks_bytes: Vec<u64>,
        /// The first block's home.
        start: NodeId,
    },
    /// `jia_alloc2p`: every page on one node.
    OnNode(NodeId),
    /// `jia_alloc`: every page on one node, chosen round-robin per call.
    RoundRobin,
}

/// The largest shared region, in GiB (`region_gib`'s most): 16 TiB of address space.
pub const MAX_REGION_GIB: u64 = 16384;

/// Why an allocation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Zero bytes asked.
    #[error("allocation of zero bytes")]
    Empty,
    /// Not enough address space left.
    #[error(
        "allocation of {asked_bytes} bytes exceeds the {left_bytes} bytes left in the shared \
         region: {}",
        if *asked_bytes > MAX_REGION_GIB << 30 {
            format!("more than the largest region holds (region_gib {MAX_REGION_GIB})")
        } else {
            "raise region_gib (in .jiaconf, --set region_gib=N or DSM_REGION_GIB)".to_owned()
        }
    )]
    OutOfSpace {
        /// Bytes asked.
        asked_bytes: u64,
        /// Bytes left.
        left_bytes: u64,
    },
    /// More bytes than an address holds (elements times element size overflows).
    #[error(
        "allocation of {elements} elements of {element_bytes} bytes each overflows the address space"
    )]
    Overflow {
        /// Elements asked.
        elements: u64,
        /// Bytes of one element.
        element_bytes: u64,
    },
    /// A node id past the job.
    #[error("node {node} is not in the job (nodes 0 to {last})", last = .nodes.saturating_sub(1))]
    BadHost {
        /// The id given.
        node: u16,
        /// Nodes in the job.
        nodes: u16,
    },
    /// A block size of zero, or no blocks.
    #[error("block sizes must be positive and at least one block given")]
    BadBlocks,
}

/// Pages needed for `bytes`.
pub fn pages_for(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE_SIZE as u64)
}

/// The homes of `page_count` pages under `policy` in a job of `nodes` nodes; `round_robin` is the
/// number of `RoundRobin` allocations made before this one.
pub fn homes(
    policy: &AllocPolicy,
    page_count: u64,
    nodes: u16,
    round_robin: u64,
) -> Result<Vec<NodeId>, AllocError> {
    let check = |n: NodeId| {
        if n.0 >= nodes {
            Err(AllocError::BadHost { node: n.0, nodes })
        } else {
            Ok(n)
        }
    };
    let wrap = |start: NodeId, i: u64| NodeId(((u64::from(start.0) + i) % u64::from(nodes)) as u16);
    let count = page_count as usize;
    Ok(match policy {
        AllocPolicy::OnNode(n) => vec![check(*n)?; count],
        AllocPolicy::RoundRobin => vec![NodeId((round_robin % u64::from(nodes)) as u16); count],
        AllocPolicy::Cyclic { block_bytes, start } => {
            check(*start)?;
            if *block_bytes == 0 {
                return Err(AllocError::BadBlocks);
            }
            let block_pages = pages_for(*block_bytes);
            (0..page_count)
                .map(|p| wrap(*start, p / block_pages))
                .collect()
        }
        AllocPolicy::Blocks {
            blocks_bytes,
            start,
        } => {
            check(*start)?;
            if blocks_bytes.is_empty() || blocks_bytes.contains(&0) {
                return Err(AllocError::BadBlocks);
            }
            let mut out = Vec::with_capacity(count);
            let mut block = 0u64;
            while out.len() < count {
                let size = pages_for(blocks_bytes[block as usize % blocks_bytes.len()]);
                let home = wrap(*start, block);
                for _ in 0..size.min((count - out.len()) as u64) {
                    out.push(home);
                }
                block += 1;
            }
            out
        }
    })
}

/// A node's allocation calls so far, as a barrier carries them: equal on every node of a correct
/// program (allocation is collective), and when not, what the job's end names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocs {
    /// The calls' digest ([`digest`]): their sizes, policies and order.
    pub digest: u64,
    /// How many calls.
    pub calls: u32,
    /// Their pages in all.
    pub pages: u32,
}

impl std::fmt::Display for Allocs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |n: u32| if n == 1 { "" } else { "s" };
        write!(
            f,
            "{} call{} of {} page{} in all",
            self.calls,
            s(self.calls),
            self.pages,
            s(self.pages)
        )
    }
}

/// Mixes an allocation call into a running digest (FNV-1a over the call's fields).
pub fn digest(prev: u64, first: PageNum, page_count: u64, homes: &[NodeId]) -> u64 {
    let mut h = prev ^ 0xcbf2_9ce4_8422_2325;
    let mut mix = |v: u64| {
        for b in v.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    mix(u64::from(first.0));
    mix(page_count);
    if let (Some(a), Some(b)) = (homes.first(), homes.last()) {
        mix(u64::from(a.0));
        mix(u64::from(b.0));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u16]) -> Vec<NodeId> {
        v.iter().map(|&n| NodeId(n)).collect()
    }

    #[test]
    fn cyclic_gives_blocks_in_turn_from_the_start_host() {
        let p = AllocPolicy::Cyclic {
            block_bytes: 2 * PAGE_SIZE as u64,
            start: NodeId(1),
        };
        assert_eq!(homes(&p, 7, 3, 0).unwrap(), ids(&[1, 1, 2, 2, 0, 0, 1]));
    }

    #[test]
    fn cyclic_rounds_small_blocks_up_to_a_page() {
        let p = AllocPolicy::Cyclic {
            block_bytes: 100,
            start: NodeId(0),
        };
        assert_eq!(homes(&p, 3, 2, 0).unwrap(), ids(&[0, 1, 0]));
    }

    #[test]
    fn blocks_follow_the_array_and_repeat() {
        let p = AllocPolicy::Blocks {
            blocks_bytes: vec![PAGE_SIZE as u64, 2 * PAGE_SIZE as u64],
            start: NodeId(0),
        };
        assert_eq!(homes(&p, 5, 4, 0).unwrap(), ids(&[0, 1, 1, 2, 3]));
    }

    #[test]
    fn round_robin_moves_per_call_and_on_node_stays() {
        assert_eq!(
            homes(&AllocPolicy::RoundRobin, 2, 3, 4).unwrap(),
            ids(&[1, 1])
        );
        assert_eq!(
            homes(&AllocPolicy::OnNode(NodeId(2)), 2, 3, 0).unwrap(),
            ids(&[2, 2])
        );
    }

    #[test]
    fn bad_hosts_and_blocks_are_errors() {
        assert_eq!(
            homes(&AllocPolicy::OnNode(NodeId(3)), 1, 3, 0),
            Err(AllocError::BadHost { node: 3, nodes: 3 })
        );
        // Ranges as a C user reads them: both ends included.
        assert_eq!(
            AllocError::BadHost { node: 3, nodes: 3 }.to_string(),
            "node 3 is not in the job (nodes 0 to 2)"
        );
        let p = AllocPolicy::Blocks {
            blocks_bytes: vec![0],
            start: NodeId(0),
        };
        assert_eq!(homes(&p, 1, 3, 0), Err(AllocError::BadBlocks));
        // A cyclic block of zero bytes is refused as a zero in the array is (it was taken as
        // a page per block), and as `jia_alloc3` refuses it.
        let p = AllocPolicy::Cyclic {
            block_bytes: 0,
            start: NodeId(0),
        };
        assert_eq!(homes(&p, 1, 3, 0), Err(AllocError::BadBlocks));
    }
}
