//! AVX2 dot products of the ternary types TQ1_0 and TQ2_0 against Q8_K activations, with
//! [`avx2`](super::avx2)'s interface, generic over its [`Mac`] so that the VNNI levels reuse them. Each block is
//! unpacked once per group of activation rows into eight registers of 32 unsigned levels (0, 1, 2), which meet
//! the activations in `dpbusd`; the `-1` of every level is the block's activation sum, taken from the Q8_K
//! `bsums`, as ggml's AVX2 `ggml_vec_dot_tq{1,2}_0_q8_K` do.
//!
//! TQ1_0's trit `n` of a byte `q` is the top of `3 · (q · 3ⁿ mod 256)`: the products mod 256 are byte shifts and
//! adds (ggml's), and the top is two unsigned compares, `(p ≥ 86) + (p ≥ 171)`.
//!
//! The integer sums per block are the scalar kernel's; only the order of the f32 accumulation differs.

use std::arch::x86_64::*;

use tgi_formats::quant::ternary::{TQ1_0_BYTES, TQ2_0_BYTES};

use super::act::Q8_K_BYTES;
use super::avx2::{dispatch, f16_at, hsum_ps, load, Avx2, Mac};

dispatch!(
    "avx2,fma,f16c", Avx2, Tq1Block;
    /// TQ1_0 weights · Q8_K activations.
    tq1_0 => ternary_n
);
dispatch!(
    "avx2,fma,f16c", Avx2, Tq2Block;
    /// TQ2_0 weights · Q8_K activations.
    tq2_0 => ternary_n
);

/// A ternary block layout: its 256 levels as eight registers, register `k` against activations `32k..32k + 32`.
pub(super) trait TernaryBlock {
    /// Bytes per block (the f16 scale last).
    const BYTES: usize;
    /// The unsigned levels of the block at `wb`.
    unsafe fn levels(wb: *const u8) -> [__m256i; 8];
}

/// Every byte times 3, mod 256.
#[inline(always)]
unsafe fn mul3(v: __m256i) -> __m256i {
    _mm256_add_epi8(v, _mm256_add_epi8(v, v))
}

/// Every byte times 9, mod 256 (`8v + v`, the shift masked to stay in the byte).
#[inline(always)]
unsafe fn mul9(v: __m256i) -> __m256i {
    _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(v, 3), _mm256_set1_epi8(-8)), v)
}

/// The top trit of every byte `p`: `(3p) >> 8`, i.e. `(p ≥ 86) + (p ≥ 171)` (unsigned compares as signed
/// ones of `p ^ 0x80`).
#[inline(always)]
unsafe fn top_trit(p: __m256i) -> __m256i {
    let s = _mm256_xor_si256(p, _mm256_set1_epi8(i8::MIN));
    let ge86 = _mm256_cmpgt_epi8(s, _mm256_set1_epi8((85u8 ^ 0x80) as i8));
    let ge171 = _mm256_cmpgt_epi8(s, _mm256_set1_epi8((170u8 ^ 0x80) as i8));
    _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), ge86), ge171)
}

/// TQ1_0 (54 bytes: `qs[48]`, `qh[4]`, `d`).
pub(super) struct Tq1Block;

impl TernaryBlock for Tq1Block {
    const BYTES: usize = TQ1_0_BYTES;
    #[inline(always)]
    unsafe fn levels(wb: *const u8) -> [__m256i; 8] {
        // Bytes 0..32: trit n against activations 32n..32n + 32.
        let p0 = load(wb);
        let p1 = mul3(p0);
        let p2 = mul9(p0);
        let p3 = mul9(p1);
        let p4 = mul9(p2);
        // Bytes 32..48: trits (0, 1), (2, 3) and 4 in the low lane with qh beside it, against 160.., 192.., 224...
        let q = _mm_loadu_si128(wb.add(32).cast());
        let q01 = _mm256_set_m128i(_mm_add_epi8(q, _mm_add_epi8(q, q)), q);
        let q23 = mul9(q01);
        let q4 = _mm256_castsi256_si128(mul9(q23));
        // qh: byte 4n + j is qh[j] · 3ⁿ (values 240 + 4n + j).
        let h = _mm256_set1_epi32((wb.add(48) as *const i32).read_unaligned());
        let (h3, h9) = (mul3(h), mul9(h));
        let h = _mm256_blend_epi32(_mm256_blend_epi32(_mm256_blend_epi32(h, h3, 0b0010), h9, 0b0100), mul9(h3), 0b1000);
        let q45 = _mm256_set_m128i(_mm256_castsi256_si128(h), q4);
        [
            top_trit(p0),
            top_trit(p1),
            top_trit(p2),
            top_trit(p3),
            top_trit(p4),
            top_trit(q01),
            top_trit(q23),
            top_trit(q45),
        ]
    }
}

/// TQ2_0 (66 bytes: `qs[64]`, `d`): bit pair `l` of byte `32h + m` against activation `128h + 32l + m`.
pub(super) struct Tq2Block;

impl TernaryBlock for Tq2Block {
    const BYTES: usize = TQ2_0_BYTES;
    #[inline(always)]
    unsafe fn levels(wb: *const u8) -> [__m256i; 8] {
        let m3 = _mm256_set1_epi8(3);
        let (a, b) = (load(wb), load(wb.add(32)));
        [
            _mm256_and_si256(a, m3),
            _mm256_and_si256(_mm256_srli_epi16(a, 2), m3),
            _mm256_and_si256(_mm256_srli_epi16(a, 4), m3),
            _mm256_and_si256(_mm256_srli_epi16(a, 6), m3),
            _mm256_and_si256(b, m3),
            _mm256_and_si256(_mm256_srli_epi16(b, 2), m3),
            _mm256_and_si256(_mm256_srli_epi16(b, 4), m3),
            _mm256_and_si256(_mm256_srli_epi16(b, 6), m3),
        ]
    }
}

/// Ternary weights of layout `B` on the level `M`, for `N` activation rows: per block `Σ level · q − Σ q` in
/// i32 lanes, times the block's and the row's scales into f32 lanes.
#[inline(always)]
pub(super) unsafe fn ternary_n<M: Mac, B: TernaryBlock, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    cols: usize,
    out: &mut [f32],
) {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..cols / 256 {
        let wb = w.add(B::BYTES * b);
        let levels = B::levels(wb);
        let dw = f16_at(wb.add(B::BYTES - 2));
        for (j, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(j * xs + Q8_K_BYTES * b);
            // Four independent chains (a fused `dpbusd` waits for its accumulator), the first starting from the
            // activation sums of the block's 16-value groups, summed in pairs: the `-1` of every level.
            let mut sums = [_mm256_setzero_si256(); 4];
            sums[0] = _mm256_sub_epi32(sums[0], _mm256_madd_epi16(load(xb.add(260)), ones));
            for (k, &q) in levels.iter().enumerate() {
                sums[k % 4] = M::dpbusd(sums[k % 4], q, load(xb.add(4 + 32 * k)));
            }
            let sumi = _mm256_add_epi32(_mm256_add_epi32(sums[0], sums[1]), _mm256_add_epi32(sums[2], sums[3]));
            let xd = (xb as *const f32).read_unaligned();
            *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * xd), _mm256_cvtepi32_ps(sumi), *acc);
        }
    }
    for j in 0..N {
        out[j] = hsum_ps(acc[j]);
    }
}
