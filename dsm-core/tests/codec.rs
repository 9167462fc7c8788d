//! The wire codec: every message round-trips, `frame_len` matches the encoding, and no input,
//! random or mutated, makes the decoder panic.
//!
//! `DSM_FUZZ_FRAMES=N` feeds N frames instead of the default 1,000,000.

use dsm_core::codec::{self, DecodeError, Frame, HEADER_BYTES};
use dsm_core::mailbox::Channel;
use dsm_core::sim::Rng;
use dsm_core::{
    Access, AtomicOp, CvId, LockId, MAX_GETP_PAGES, Msg, MsgKind, NodeId, PAGE_SIZE, PageDiff,
    PageNum, RunData, WriteId, WriteNotice, diff,
};
use proptest::prelude::*;

fn pages(rng: &mut Rng) -> Vec<PageNum> {
    (0..rng.below(6))
        .map(|_| PageNum(rng.next_u64() as u32))
        .collect()
}

fn writes(rng: &mut Rng) -> Vec<(PageNum, u64)> {
    (0..rng.below(6))
        .map(|_| {
            (
                PageNum(rng.next_u64() as u32),
                rng.next_u64() >> rng.below(64),
            )
        })
        .collect()
}

fn write_ids(rng: &mut Rng) -> Vec<WriteId> {
    (0..rng.below(6))
        .map(|_| WriteId {
            page: PageNum(rng.next_u64() as u32),
            writer: NodeId(rng.below(1000) as u16),
            // Varints of every length: small numbers (as they are), and any.
            interval: if rng.chance(50) {
                rng.below(300)
            } else {
                rng.next_u64()
            },
            epoch: rng.next_u64() >> rng.below(64),
        })
        .collect()
}

/// A random valid message of every kind in turn.
fn random_msg(rng: &mut Rng, i: u64) -> Msg {
    let lock = LockId(rng.below(64) as u16);
    let cv = CvId(rng.below(16) as u16);
    match i % MsgKind::COUNT as u64 {
        0 => Msg::GetPage {
            access: if rng.chance(50) {
                Access::Read
            } else {
                Access::Write
            },
            pages: (0..1 + rng.below(5))
                .map(|_| PageNum(rng.next_u64() as u32))
                .collect(),
            passed: rng.next_u64(),
        },
        1 => {
            // A run of 1 to 20 pages (a page or a datagram's worth, and beyond).
            let pages = 1 + rng.below(20) as usize;
            let mut data = vec![0u8; pages * PAGE_SIZE];
            for b in data.iter_mut().step_by(97) {
                *b = rng.next_u64() as u8;
            }
            Msg::GetPageGrant {
                page: PageNum(rng.next_u64() as u32 % (u32::MAX - 20)),
                data: RunData::Copied(data.into()),
                forwarded: rng.chance(50),
            }
        }
        2 => {
            let diffs = (0..rng.below(3))
                .map(|_| {
                    let twin = Box::new([0u8; 4096]);
                    let mut cur = twin.clone();
                    for _ in 0..rng.below(20) {
                        cur[rng.below(4096) as usize] = 1 + rng.below(255) as u8;
                    }
                    let mut runs = Vec::new();
                    diff::encode(&twin, &cur, &mut runs);
                    PageDiff {
                        page: PageNum(rng.next_u64() as u32),
                        runs,
                    }
                })
                .collect();
            Msg::Diff {
                id: rng.next_u64(),
                diffs,
            }
        }
        3 => Msg::DiffGrant { id: rng.next_u64() },
        4 => Msg::Acquire {
            lock,
            seen: rng.next_u64(),
            epoch: rng.next_u64(),
            cohort: rng.chance(50),
        },
        5 => Msg::AcquireGrant {
            lock,
            counter: rng.next_u64(),
            notices: pages(rng),
            earlier: pages(rng),
        },
        6 => Msg::Release {
            lock,
            epoch: rng.next_u64(),
            notices: pages(rng),
            earlier: pages(rng),
        },
        7 => Msg::Barrier {
            epoch: rng.next_u64(),
            allocs: dsm_core::Allocs {
                digest: rng.next_u64(),
                calls: rng.next_u64() as u32,
                pages: rng.next_u64() as u32,
            },
            threads: rng.next_u64() as u16,
            notices: pages(rng),
            claims: pages(rng),
        },
        8 => Msg::BarrierGrant {
            epoch: rng.next_u64(),
            notices: pages(rng)
                .into_iter()
                .map(|page| {
                    let writer = rng.chance(50).then(|| NodeId(rng.below(1000) as u16));
                    WriteNotice {
                        page,
                        writer,
                        moves: writer.is_some() && rng.chance(50),
                    }
                })
                .collect(),
        },
        9 => Msg::Wait {
            epoch: rng.next_u64(),
        },
        10 => Msg::WaitGrant {
            epoch: rng.next_u64(),
        },
        11 => Msg::SetCv {
            cv,
            epoch: rng.next_u64(),
            notices: pages(rng),
        },
        12 => Msg::ResetCv { cv },
        13 => Msg::WaitCv {
            cv,
            seen: rng.next_u64(),
        },
        14 => Msg::CvGrant {
            cv,
            counter: rng.next_u64(),
            notices: pages(rng),
        },
        15 => Msg::Exit {
            stats: (0..rng.below(10)).map(|_| rng.next_u64()).collect(),
        },
        16 => Msg::ExitGrant,
        18 => Msg::Migrated {
            epoch: rng.next_u64(),
            vetoes: pages(rng),
        },
        19 => Msg::MigrateGrant {
            epoch: rng.next_u64(),
            vetoed: pages(rng),
        },
        21 => Msg::LockWanted { lock },
        24 => {
            let width = [1, 2, 4, 8][rng.below(4) as usize];
            let op = match rng.below(9) {
                0 => AtomicOp::Load,
                1 => AtomicOp::Store(rng.next_u64()),
                2 => AtomicOp::Swap(rng.next_u64()),
                3 => AtomicOp::CompareExchange {
                    expected: rng.next_u64(),
                    new: rng.next_u64(),
                },
                4 => AtomicOp::FetchAdd(rng.next_u64()),
                5 => AtomicOp::FetchSub(rng.next_u64()),
                6 => AtomicOp::FetchAnd(rng.next_u64()),
                7 => AtomicOp::FetchOr(rng.next_u64()),
                _ => AtomicOp::FetchXor(rng.next_u64()),
            };
            let release = rng.chance(50);
            Msg::Atomic {
                id: rng.next_u64() as u32,
                addr: (rng.next_u64() >> 20) & !7,
                width,
                op,
                acquire: rng.chance(50),
                release,
                seen: rng.next_u64(),
                epoch: rng.next_u64(),
                in_barrier: rng.chance(50),
                passed: rng.next_u64(),
                notices: if release { writes(rng) } else { Vec::new() },
                earlier: if release { writes(rng) } else { Vec::new() },
                passed_on: if release { write_ids(rng) } else { Vec::new() },
            }
        }
        25 => Msg::AtomicGrant {
            id: rng.next_u64() as u32,
            old: rng.next_u64(),
            counter: rng.next_u64(),
            changes: rng.next_u64() as u32,
            notices: write_ids(rng),
        },
        22 | 23 => {
            let to = NodeId(rng.below(1000) as u16);
            let count = 1 + rng.below(MAX_GETP_PAGES as u64) as u16;
            let first = PageNum(rng.next_u64() as u32 % (u32::MAX - u32::from(count)));
            if i % MsgKind::COUNT as u64 == 22 {
                Msg::Forward { to, first, count }
            } else {
                Msg::ForwardRefused { to, first, count }
            }
        }
        17 => Msg::Send {
            channel: [
                Channel::Send,
                Channel::Bcast,
                Channel::Reduce,
                Channel::Races,
            ][rng.below(4) as usize],
            tag: rng.next_u64() as i32,
            data: (0..rng.below(300)).map(|_| rng.next_u64() as u8).collect(),
        },
        _ => Msg::Error {
            text: "node 3: jia_error: bad input é".repeat(rng.below(4) as usize),
        },
    }
}

fn encode(cookie: u64, from: u16, msg: &Msg) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode_frame(cookie, NodeId(from), msg, &mut out);
    out
}

#[test]
fn every_message_kind_round_trips_and_frame_len_is_exact() {
    let mut rng = Rng::new(1);
    for i in 0..MsgKind::COUNT as u64 * 200 {
        let msg = random_msg(&mut rng, i);
        let cookie = rng.next_u64();
        let frame = encode(cookie, 7, &msg);
        assert_eq!(frame.len(), codec::frame_len(&msg), "{msg:?}");
        let (header, back) = codec::decode_frame(&frame).unwrap();
        assert_eq!(
            (header.cookie, header.from, &back),
            (cookie, NodeId(7), &msg)
        );
    }
}

/// `encode_frame_head` writes a frame but for a grant's page bytes, which it hands back: head and
/// body joined are `encode_frame`'s frame, for every kind; only grants have a body.
#[test]
fn a_frame_head_and_its_body_are_the_whole_frame() {
    let mut rng = Rng::new(3);
    for i in 0..MsgKind::COUNT as u64 * 50 {
        let msg = random_msg(&mut rng, i);
        let mut head = Vec::new();
        let body = codec::encode_frame_head(5, NodeId(2), &msg, &mut head);
        assert_eq!(
            body.is_some(),
            matches!(msg, Msg::GetPageGrant { .. }),
            "{msg:?}"
        );
        if let Some(RunData::Copied(body)) = body {
            head.extend_from_slice(body);
        }
        assert_eq!(head, encode(5, 2, &msg), "{msg:?}");
    }
}

/// `decode_frame_ref` decodes what `decode_frame` does, a grant's page left in the frame.
#[test]
fn a_grant_decodes_in_place_and_everything_else_as_a_message() {
    let mut rng = Rng::new(2);
    for i in 0..MsgKind::COUNT as u64 * 50 {
        let msg = random_msg(&mut rng, i);
        let frame = encode(5, 2, &msg);
        let (header, back) = codec::decode_frame_ref(&frame).unwrap();
        assert_eq!((header.cookie, header.from), (5, NodeId(2)));
        match (&msg, back) {
            (
                Msg::GetPageGrant {
                    page,
                    data: RunData::Copied(data),
                    forwarded,
                },
                Frame::Grant {
                    page: p,
                    data: d,
                    forwarded: f,
                },
            ) => {
                assert_eq!((*page, &data[..], *forwarded), (p, d, f));
                assert!(std::ptr::eq(
                    d.as_ptr(),
                    frame[HEADER_BYTES + codec::GRANT_HEADER_BYTES..].as_ptr()
                ));
                // A grant cut short or with bytes after it is refused, as by decode_frame.
                assert!(matches!(
                    codec::decode_frame_ref(&frame[..frame.len() - 1]),
                    Err(DecodeError::Truncated { .. })
                ));
                let mut longer = frame.clone();
                longer.push(1);
                assert!(codec::decode_frame_ref(&longer).is_err());
            }
            (_, Frame::Msg(m)) => assert_eq!(m, msg),
            (_, other) => panic!("{msg:?} decoded as {other:?}"),
        }
    }
}

#[test]
fn small_messages_carry_only_their_payload() {
    let grant = Msg::AcquireGrant {
        lock: LockId(1),
        counter: 0,
        notices: vec![],
        earlier: vec![],
    };
    assert_eq!(codec::frame_len(&grant), HEADER_BYTES + 18);
    assert_eq!(
        codec::frame_len(&Msg::DiffGrant { id: 1 }),
        HEADER_BYTES + 8
    );
    let getp = Msg::GetPage {
        access: Access::Read,
        pages: vec![PageNum(3)],
        passed: 7,
    };
    assert_eq!(codec::frame_len(&getp), HEADER_BYTES + 17);
}

#[test]
fn malformed_frames_are_errors_naming_the_fault() {
    let good = encode(
        1,
        0,
        &Msg::Acquire {
            lock: LockId(3),
            seen: 0,
            epoch: 0,
            cohort: false,
        },
    );
    let mut bad_magic = good.clone();
    bad_magic[0] ^= 0xff;
    assert!(matches!(
        codec::decode_frame(&bad_magic),
        Err(DecodeError::BadMagic(_))
    ));
    let mut bad_version = good.clone();
    bad_version[2] = 8;
    assert_eq!(
        codec::decode_frame(&bad_version),
        Err(DecodeError::BadVersion(8))
    );
    let mut bad_kind = good.clone();
    bad_kind[3] = 200;
    assert_eq!(
        codec::decode_frame(&bad_kind),
        Err(DecodeError::BadKind(200))
    );
    assert!(matches!(
        codec::decode_frame(&good[..good.len() - 1]),
        Err(DecodeError::Truncated { .. })
    ));
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        codec::decode_frame(&trailing),
        Err(DecodeError::Trailing(1))
    );
    let bad_lock = encode(
        1,
        0,
        &Msg::Acquire {
            lock: LockId(64),
            seen: 0,
            epoch: 0,
            cohort: false,
        },
    );
    assert_eq!(
        codec::decode_frame(&bad_lock),
        Err(DecodeError::BadValue {
            field: "lock",
            value: 64
        })
    );
    // A count that promises more elements than the frame holds is refused before allocating.
    // A letter on a channel that does not exist, or longer than a letter may be.
    let letter = encode(
        1,
        0,
        &Msg::Send {
            channel: Channel::Send,
            tag: -1,
            data: vec![1, 2, 3],
        },
    );
    let mut bad_channel = letter.clone();
    bad_channel[HEADER_BYTES] = 4;
    assert_eq!(
        codec::decode_frame(&bad_channel),
        Err(DecodeError::BadValue {
            field: "letter channel",
            value: 4
        })
    );
    let mut too_long = letter.clone();
    let at = HEADER_BYTES + 5;
    too_long[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        codec::decode_frame(&too_long),
        Err(DecodeError::BadValue {
            field: "letter length",
            ..
        })
    ));
    let mut huge = encode(
        1,
        0,
        &Msg::Release {
            lock: LockId(0),
            epoch: 0,
            notices: vec![],
            earlier: vec![],
        },
    );
    // After the lock (2 bytes) and the epoch (8): the notices' count.
    let at = HEADER_BYTES + 10;
    huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        codec::decode_frame(&huge),
        Err(DecodeError::Truncated { .. })
    ));
    // A relaxed load of the `width`-byte word at `addr`, framed.
    let atomic_load = |addr: u64, width: u8| {
        encode(
            1,
            0,
            &Msg::Atomic {
                id: 0,
                addr,
                width,
                op: AtomicOp::Load,
                acquire: false,
                release: false,
                seen: 0,
                epoch: 0,
                in_barrier: false,
                passed: 0,
                notices: vec![],
                earlier: vec![],
                passed_on: vec![],
            },
        )
    };
    // An atomic word beyond every page number (it would be read as a low page).
    let far = 1u64 << 50;
    assert_eq!(
        codec::decode_frame(&atomic_load(far, 8)),
        Err(DecodeError::BadValue {
            field: "atomic word's address",
            value: far
        })
    );
    // A word of another width than 1, 2, 4 or 8 bytes, or off its alignment.
    for (addr, width) in [(64, 3), (64, 16), (65, 2), (66, 4)] {
        assert_eq!(
            codec::decode_frame(&atomic_load(addr, width)),
            Err(DecodeError::BadValue {
                field: "atomic word's width or alignment",
                value: addr | u64::from(width)
            }),
            "{width} bytes at {addr}"
        );
    }
}

#[test]
fn random_and_mutated_frames_never_panic_the_decoder() {
    let count: u64 = std::env::var("DSM_FUZZ_FRAMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut rng = Rng::new(0xF422);
    let mut accepted = 0u64;
    for i in 0..count {
        let frame = match i % 4 {
            // Pure noise, sometimes with a valid header prefix.
            0 => {
                let mut f: Vec<u8> = (0..rng.below(64)).map(|_| rng.next_u64() as u8).collect();
                if rng.chance(50) && f.len() >= 4 {
                    f[..4].copy_from_slice(&[0x44, 0x4A, codec::VERSION, 1 + rng.below(22) as u8]);
                }
                f
            }
            // A valid frame with bytes flipped, inserted, removed or truncated.
            _ => {
                let mut f = encode(
                    rng.next_u64(),
                    rng.below(100) as u16,
                    &random_msg(&mut rng, i),
                );
                for _ in 0..1 + rng.below(4) {
                    if f.is_empty() {
                        break;
                    }
                    let at = rng.below(f.len() as u64) as usize;
                    match rng.below(4) {
                        0 => f[at] ^= 1 << rng.below(8),
                        1 => f[at] = rng.next_u64() as u8,
                        2 => f.truncate(at),
                        _ => f.insert(at, rng.next_u64() as u8),
                    }
                }
                f
            }
        };
        if let Ok((_, msg)) = codec::decode_frame(&frame) {
            accepted += 1;
            // Whatever decodes must re-encode to the same bytes.
            let (header, _) = codec::decode_frame(&frame).unwrap();
            assert_eq!(encode(header.cookie, header.from.0, &msg), frame);
        }
    }
    eprintln!("{count} frames fed to the decoder, {accepted} decoded");
    // Some mutations (a flipped payload bit) still give valid frames: the check is not vacuous.
    assert!(
        accepted > count / 100,
        "only {accepted} of {count} frames decoded"
    );
}

proptest! {
    #[test]
    fn diff_of_any_two_pages_turns_the_twin_into_the_page(
        changes in proptest::collection::vec((0usize..4096, any::<u8>()), 0..300)
    ) {
        let twin = Box::new([7u8; 4096]);
        let mut cur = twin.clone();
        for (at, v) in changes {
            cur[at] = v;
        }
        let mut runs = Vec::new();
        diff::encode(&twin, &cur, &mut runs);
        let mut copy = twin.clone();
        diff::apply(&runs, &mut copy).unwrap();
        prop_assert_eq!(&copy[..], &cur[..]);
        // Byte-exact: every run covers only changed bytes.
        for run in diff::runs(&runs) {
            let (offset, bytes) = run.unwrap();
            for (i, b) in bytes.iter().enumerate() {
                prop_assert_ne!(*b, twin[offset + i]);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = codec::decode_frame(&bytes);
        let _ = diff::validate(&bytes);
    }
}

/// A grant in place is its header alone, and decodes as such (never as a message, whose pages
/// would be missing); its flags and bounds are checked as a grant's.
#[test]
fn a_grant_in_place_is_its_header_alone() {
    for (page, count, forwarded) in [
        (0u32, 1u16, false),
        (77, 256, true),
        (u32::MAX - 3, 3, false),
    ] {
        let mut frame = Vec::new();
        codec::encode_grant_in_place(9, NodeId(3), (PageNum(page), count), forwarded, &mut frame);
        assert_eq!(frame.len(), HEADER_BYTES + codec::GRANT_HEADER_BYTES);
        let (header, back) = codec::decode_frame_ref(&frame).unwrap();
        assert_eq!((header.cookie, header.from), (9, NodeId(3)));
        assert_eq!(
            back,
            Frame::GrantInPlace {
                page: PageNum(page),
                count,
                forwarded
            }
        );
        assert!(
            codec::decode_frame(&frame).is_err(),
            "a grant in place has no pages to make a message of"
        );
        let mut longer = frame.clone();
        longer.push(0);
        assert!(codec::decode_frame_ref(&longer).is_err());
    }
    // A count of 0 or past the longest run, or a run past the last page, is refused.
    for (page, count) in [(0u32, 0u16), (0, 257), (u32::MAX, 2)] {
        let mut frame = Vec::new();
        codec::encode_grant_in_place(9, NodeId(3), (PageNum(0), 1), false, &mut frame);
        let at = HEADER_BYTES;
        frame[at..at + 4].copy_from_slice(&page.to_le_bytes());
        let raw = u16::from_le_bytes([frame[at + 4], frame[at + 5]]) & !0x1ff | count;
        frame[at + 4..at + 6].copy_from_slice(&raw.to_le_bytes());
        assert!(
            matches!(
                codec::decode_frame_ref(&frame),
                Err(DecodeError::BadValue { .. })
            ),
            "page {page} count {count}"
        );
    }
}
