//! Where each stored bit goes in a group's block of 16 rows.
//!
//! Legacy types (blocks of 32 columns):
//! - the 16 rows' f16 scales (32 bytes), then for `Q4_1` and `Q5_1` their f16 mins (32 bytes);
//! - `Q8_0`: 8 chunks of 64 bytes, chunk `c` holding columns `4c..4c + 4` of each row (row `r` at bytes
//!   `4r..4r + 4`) as unsigned bytes, the quant plus 128;
//! - `Q4_0`, `Q5_0`, `Q4_1`, `Q5_1`, `IQ4_NL`: 4 chunks of 64 bytes, chunk `c` holding each row's quant bytes
//!   `4c..4c + 4` as stored (low nibbles columns `4c..4c + 4`, high nibbles `16 + 4c..`; IQ4_NL's index its levels);
//! - `Q5_0` and `Q5_1` also: 8 masks of 64 bits, mask `g` holding each row's fifth bits of columns `4g..4g + 4`
//!   (bit `4r + i`); or, kept as [`Bits::Slices`], byte `4r + i` of the 64 holding those bits of row `r`'s columns
//!   `i`, `4 + i`, ... in bits 0..8 (rows 8..16 in the second 32 bytes).
//!
//! K-quants (super-blocks of 256 columns, 8 sub-blocks of 32):
//! - the rows' f16 `d`, then their f16 `dmin` (32 bytes each);
//! - the six-bit scales unpacked to bytes, sub-block after sub-block, 16 rows each (128 bytes), then the mins;
//! - the quants of each pair of sub-blocks `p` as 8 chunks of 64 bytes, chunk `c` holding each row's quant bytes
//!   `32p + 4c..32p + 4c + 4` as stored (low nibbles sub-block `2p`, high nibbles `2p + 1`, columns `4c..4c + 4`);
//! - `Q5_K` also: for each sub-block `s` and chunk `c`, a 64-bit mask of the fifth bits of its columns
//!   `4c..4c + 4` (bit `4r + i`).
//!
//! Q6_K (super-blocks of 256 columns in two halves of 128, 16 sub-blocks of 16 with i8 scales):
//! - the rows' f16 `d` (32 bytes), then the scales, sub-block after sub-block, 16 rows each (256 bytes);
//! - then for each half `h` and pair of chunks `2j`, `2j + 1` (`j` in 0..8), 192 bytes in the order the kernels read
//!   them (one forward stream for the hardware prefetcher, see [`q6_slices`] and [`q6_quants`]): the pair's high
//!   bits (64 bytes), then chunk `2j`'s and chunk `2j + 1`'s low bits (64 bytes each);
//! - chunk `k` of half `h` holds each row's `ql` bytes `64h + 4k..64h + 4k + 4` (low nibbles columns `128h + 4k..`,
//!   high nibbles `128h + 64 + 4k..`);
//! - the high bits of a pair of chunks, on every level: byte `4r + i` holds chunk `2j`'s two bits of its low nibble's
//!   column `i` in bits 0..2 and of its high nibble's in bits 2..4, chunk `2j + 1`'s in bits 4..8 (bytes
//!   `32h'..32h' + 32` are the AVX2 kernels' slice of the half of rows `h'`).
//!
//! F16 and BF16 (blocks of 32 columns): the 16 rows' values of column 0, then of column 1, ... (32 bytes each).

use super::{Kind, ROWS};
use crate::kernels::scalar::k4_scales_mins;

/// Where a K-quant group block's quants start.
pub(super) const K_QUANTS: usize = 64 + 2 * 8 * ROWS;
/// Where a K-quant group block's unpacked scales start (the mins follow them).
pub(super) const K_SCALES: usize = 64;
/// Where a Q6_K group block's scales start.
pub(super) const Q6_SCALES: usize = 32;
/// Where a Q6_K group block's quants and high bits start.
const Q6_QUANTS: usize = 32 + 16 * ROWS;

/// Where, in a Q6_K group block, the high bits of half `h`'s pair of chunks `j` (64 bytes) start.
#[inline(always)]
pub(super) const fn q6_slices(h: usize, j: usize) -> usize {
    Q6_QUANTS + 192 * (8 * h + j)
}

/// Where, in a Q6_K group block, the low bits of half `h`'s chunk `k` (64 bytes) start.
#[inline(always)]
pub(super) const fn q6_quants(h: usize, k: usize) -> usize {
    q6_slices(h, k / 2) + 64 * (1 + k % 2)
}

/// How the high bits of `Q5_0`, `Q5_1` and `Q5_K` are kept (see the module documentation; Q6_K's are byte slices on every
/// level).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bits {
    /// One 64-bit mask per weight vector and bit (AVX-512 mask registers).
    Masks,
    /// Byte slices, several weight vectors' bits in each byte (AVX2).
    Slices,
}

/// Bytes of the high-bit slices of one half of a group.
const SLICE: usize = 32;

/// The little-endian u32 at `at` of `b`.
fn word(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Packs one block of each of the group's 16 rows (`blocks[r]`, as stored) into `out`, the high bits as `bits`.
pub(super) fn pack(kind: Kind, bits: Bits, blocks: &[&[u8]; ROWS], out: &mut [u8]) {
    if kind.is_float() {
        for (r, block) in blocks.iter().enumerate() {
            for (k, v) in block.chunks_exact(2).enumerate() {
                out[32 * k + 2 * r..][..2].copy_from_slice(v);
            }
        }
        return;
    }
    if kind == Kind::Q6_K {
        return pack_q6(blocks, out);
    }
    if kind.is_k() {
        return pack_k(kind, bits, blocks, out);
    }
    let (scales, rest) = out.split_at_mut(kind.quants_at());
    let quant_bytes = if kind == Kind::Q8_0 { 8 * 64 } else { 4 * 64 };
    let (quants, masks) = rest.split_at_mut(quant_bytes);
    let mut fifth = [0u64; 8];
    for (r, block) in blocks.iter().enumerate() {
        scales[2 * r..2 * r + 2].copy_from_slice(&block[0..2]);
        if kind.has_min() {
            scales[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&block[2..4]);
        }
        let mut put = |c: usize, v: u32| quants[64 * c + 4 * r..64 * c + 4 * r + 4].copy_from_slice(&v.to_le_bytes());
        match kind {
            // q + 128 is q with its top bit flipped.
            Kind::Q8_0 => (0..8).for_each(|c| put(c, word(block, 2 + 4 * c) ^ 0x8080_8080)),
            Kind::Q4_0 | Kind::Q4_1 | Kind::IQ4_NL => (0..4).for_each(|c| put(c, word(block, kind.head() + 4 * c))),
            _ => {
                (0..4).for_each(|c| put(c, word(block, kind.head() + 4 + 4 * c)));
                let qh = word(block, kind.head()) as u64;
                for (g, m) in fifth.iter_mut().enumerate() {
                    *m |= ((qh >> (4 * g)) & 0xF) << (4 * r);
                }
            }
        }
    }
    if matches!(kind, Kind::Q5_0 | Kind::Q5_1) {
        match bits {
            Bits::Masks => {
                for (mask, m) in masks.chunks_exact_mut(8).zip(fifth) {
                    mask.copy_from_slice(&m.to_le_bytes());
                }
            }
            Bits::Slices => {
                masks.fill(0);
                // Bit `4r + i` of a mask is byte `4r + i` of the two slices.
                for (g, m) in fifth.iter().enumerate() {
                    for (k, byte) in masks.iter_mut().enumerate() {
                        *byte |= (((m >> k) & 1) as u8) << g;
                    }
                }
            }
        }
    }
}

/// [`pack`] for the K-quants.
fn pack_k(kind: Kind, bits: Bits, blocks: &[&[u8]; ROWS], out: &mut [u8]) {
    let qs_at = if kind == Kind::Q4_K { 16 } else { 48 };
    let (head, rest) = out.split_at_mut(K_QUANTS);
    let (quants, masks) = rest.split_at_mut(4 * 8 * 64);
    let mut fifth = [[0u64; 8]; 8];
    for (r, block) in blocks.iter().enumerate() {
        head[2 * r..2 * r + 2].copy_from_slice(&block[0..2]);
        head[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&block[2..4]);
        let (sc, m) = k4_scales_mins(&block[4..16]);
        for s in 0..8 {
            head[K_SCALES + ROWS * s + r] = sc[s];
            head[K_SCALES + 8 * ROWS + ROWS * s + r] = m[s];
        }
        for p in 0..4 {
            for c in 0..8 {
                let at = 64 * (8 * p + c) + 4 * r;
                quants[at..at + 4].copy_from_slice(&block[qs_at + 32 * p + 4 * c..][..4]);
            }
        }
        if kind == Kind::Q5_K && bits == Bits::Slices {
            // Chunk `c`'s slice of row `r` is the row's `qh` bytes `4c..4c + 4`.
            for c in 0..8 {
                let at = SLICE * (2 * c + r / 8) + 4 * (r % 8);
                masks[at..at + 4].copy_from_slice(&block[16 + 4 * c..][..4]);
            }
        } else if kind == Kind::Q5_K {
            for (s, fifth) in fifth.iter_mut().enumerate() {
                for (c, m) in fifth.iter_mut().enumerate() {
                    for i in 0..4 {
                        *m |= (((block[16 + 4 * c + i] >> s) & 1) as u64) << (4 * r + i);
                    }
                }
            }
        }
    }
    if kind == Kind::Q5_K && bits == Bits::Masks {
        for (mask, m) in masks.chunks_exact_mut(8).zip(fifth.iter().flatten()) {
            mask.copy_from_slice(&m.to_le_bytes());
        }
    }
}

/// Writes row `r`'s stored block from a group's packed block (its high bits kept as `bits`).
pub(super) fn unpack(kind: Kind, bits: Bits, packed: &[u8], r: usize, out: &mut [u8]) {
    if kind.is_float() {
        for (k, v) in out.chunks_exact_mut(2).enumerate() {
            v.copy_from_slice(&packed[32 * k + 2 * r..][..2]);
        }
        return;
    }
    if kind == Kind::Q6_K {
        return unpack_q6(packed, r, out);
    }
    if kind.is_k() {
        return unpack_k(kind, bits, packed, r, out);
    }
    let (scales, rest) = packed.split_at(kind.quants_at());
    out[0..2].copy_from_slice(&scales[2 * r..2 * r + 2]);
    if kind.has_min() {
        out[2..4].copy_from_slice(&scales[32 + 2 * r..32 + 2 * r + 2]);
    }
    let quant = |c: usize| word(rest, 64 * c + 4 * r);
    let head = kind.head();
    match kind {
        Kind::Q8_0 => {
            (0..8).for_each(|c| out[2 + 4 * c..6 + 4 * c].copy_from_slice(&(quant(c) ^ 0x8080_8080).to_le_bytes()))
        }
        Kind::Q4_0 | Kind::Q4_1 | Kind::IQ4_NL => {
            (0..4).for_each(|c| out[head + 4 * c..head + 4 + 4 * c].copy_from_slice(&quant(c).to_le_bytes()))
        }
        _ => {
            (0..4).for_each(|c| out[head + 4 + 4 * c..head + 8 + 4 * c].copy_from_slice(&quant(c).to_le_bytes()));
            let mut qh = 0u32;
            let fifth = &rest[4 * 64..];
            for g in 0..8 {
                let nibble = match bits {
                    Bits::Masks => u64::from_le_bytes(fifth[8 * g..][..8].try_into().expect("8 bytes")) >> (4 * r),
                    Bits::Slices => {
                        (0..4).map(|i| (((fifth[SLICE * (r / 8) + 4 * (r % 8) + i] >> g) & 1) as u64) << i).sum()
                    }
                };
                qh |= ((nibble & 0xF) as u32) << (4 * g);
            }
            out[head..head + 4].copy_from_slice(&qh.to_le_bytes());
        }
    }
}

/// [`unpack`] for the K-quants.
fn unpack_k(kind: Kind, bits: Bits, packed: &[u8], r: usize, out: &mut [u8]) {
    let qs_at = if kind == Kind::Q4_K { 16 } else { 48 };
    out[0..2].copy_from_slice(&packed[2 * r..2 * r + 2]);
    out[2..4].copy_from_slice(&packed[32 + 2 * r..32 + 2 * r + 2]);
    let sc: [u8; 8] = std::array::from_fn(|s| packed[K_SCALES + ROWS * s + r]);
    let m: [u8; 8] = std::array::from_fn(|s| packed[K_SCALES + 8 * ROWS + ROWS * s + r]);
    // The inverse of `k4_scales_mins`: sub-blocks 4..8 keep their high two bits in the top of bytes 0..8.
    for j in 0..4 {
        out[4 + j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        out[8 + j] = m[j] | ((m[j + 4] >> 4) << 6);
        out[12 + j] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    let quants = &packed[K_QUANTS..];
    for p in 0..4 {
        for c in 0..8 {
            out[qs_at + 32 * p + 4 * c..][..4].copy_from_slice(&quants[64 * (8 * p + c) + 4 * r..][..4]);
        }
    }
    if kind == Kind::Q5_K && bits == Bits::Slices {
        let slices = &packed[K_QUANTS + 4 * 8 * 64..];
        for c in 0..8 {
            out[16 + 4 * c..][..4].copy_from_slice(&slices[SLICE * (2 * c + r / 8) + 4 * (r % 8)..][..4]);
        }
    } else if kind == Kind::Q5_K {
        let masks = &packed[K_QUANTS + 4 * 8 * 64..];
        let qh = &mut out[16..48];
        qh.fill(0);
        for s in 0..8 {
            for c in 0..8 {
                let m = u64::from_le_bytes(masks[8 * (8 * s + c)..][..8].try_into().expect("8 bytes"));
                for i in 0..4 {
                    qh[4 * c + i] |= (((m >> (4 * r + i)) & 1) as u8) << s;
                }
            }
        }
    }
}

/// The two high bits of a Q6_K half's column `e` (0..128) from its `qh` bytes.
fn q6_high(qh: &[u8], e: usize) -> u8 {
    (qh[e % 32] >> (2 * (e / 32))) & 3
}

/// [`pack`] for Q6_K.
fn pack_q6(blocks: &[&[u8]; ROWS], out: &mut [u8]) {
    out[Q6_QUANTS..].fill(0);
    for (r, block) in blocks.iter().enumerate() {
        out[2 * r..2 * r + 2].copy_from_slice(&block[208..210]);
        for s in 0..16 {
            out[Q6_SCALES + ROWS * s + r] = block[192 + s];
        }
        for h in 0..2 {
            let qh = &block[128 + 32 * h..128 + 32 * h + 32];
            for k in 0..16 {
                let at = q6_quants(h, k) + 4 * r;
                out[at..at + 4].copy_from_slice(&block[64 * h + 4 * k..][..4]);
                for i in 0..4 {
                    let (lo, hi) = (q6_high(qh, 4 * k + i), q6_high(qh, 64 + 4 * k + i));
                    out[q6_slice(h, k, r, i)] |= (lo | hi << 2) << (4 * (k % 2));
                }
            }
        }
    }
}

/// The byte of a Q6_K group block's high bits for half `h` of the super-block, chunk `k`, row `r` and column `i`.
fn q6_slice(h: usize, k: usize, r: usize, i: usize) -> usize {
    q6_slices(h, k / 2) + SLICE * (r / 8) + 4 * (r % 8) + i
}

/// [`unpack`] for Q6_K.
fn unpack_q6(packed: &[u8], r: usize, out: &mut [u8]) {
    out[208..210].copy_from_slice(&packed[2 * r..2 * r + 2]);
    for s in 0..16 {
        out[192 + s] = packed[Q6_SCALES + ROWS * s + r];
    }
    out[128..192].fill(0);
    for h in 0..2 {
        for k in 0..16 {
            out[64 * h + 4 * k..][..4].copy_from_slice(&packed[q6_quants(h, k) + 4 * r..][..4]);
            for i in 0..4 {
                let v = packed[q6_slice(h, k, r, i)] >> (4 * (k % 2));
                for (e, two) in [(4 * k + i, v & 3), (64 + 4 * k + i, (v >> 2) & 3)] {
                    out[128 + 32 * h + e % 32] |= two << (2 * (e / 32));
                }
            }
        }
    }
}
