//! The AVX-512 BF16 kernel of the F16/BF16 panels for many activation rows (prefill): `vdpbf16ps` multiplies 16
//! weight rows by two columns of one broadcast activation row, 32 products per instruction where an FMA does 16.
//! Each stretch of a task's groups is rounded to bf16 once, as pairs of columns (one 512-bit vector per group and
//! pair: row `r` in lane `r`, the even column in its low half), and sits in L2 while every tile of up to 12
//! activation rows (bf16 pairs, in L1) meets each pair of groups: 24 f32 accumulators.
//!
//! BF16 weights keep ggml's bf16 · bf16 products. F16 weights lose three bits of mantissa on the way (8 instead of
//! 11, the activations likewise): the price `docs/engine.md` measures in perplexity.

use std::arch::x86_64::*;
use std::mem::transmute;

use super::{Kind, ROWS};

/// Activation rows per tile (two accumulators a row).
const TILE: usize = 12;
/// Blocks of 32 columns in one stretch (8 KiB of bf16 pairs per group).
const BLOCKS: usize = 8;
/// Vectors of bf16 pairs per group and stretch.
const PER_GROUP: usize = 16 * BLOCKS;

/// Word `j` of a vector whose low half is one column of 16 rows and high half the next: word `2r` is row `r`'s
/// first column, word `2r + 1` its second.
const PAIRS: [u16; 32] = {
    let mut idx = [0u16; 32];
    let mut r = 0;
    while r < 16 {
        idx[2 * r] = r as u16;
        idx[2 * r + 1] = 16 + r as u16;
        r += 1;
    }
    idx
};

/// Whether this CPU has the instructions (AVX-512 F/BW and BF16).
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512bf16")
}

/// One activation row (`x.len()` a multiple of 32) as bf16, rounded to nearest even, into `dst`.
///
/// Safety: the CPU has AVX-512 F and BF16 (see [`available`]).
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn to_bf16(x: &[f32], dst: &mut [u8]) {
    assert!(x.len().is_multiple_of(32) && dst.len() >= 2 * x.len());
    for (i, c) in x.chunks_exact(32).enumerate() {
        let (lo, hi) = (_mm512_loadu_ps(c.as_ptr()), _mm512_loadu_ps(c.as_ptr().add(16)));
        // The second operand fills the low half.
        let v: __m512i = transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(dst.as_mut_ptr().add(64 * i).cast(), v);
    }
}

/// The 16 outputs of each group in `w` (whole groups of `nb` blocks of F16, BF16 with `bf`) for each of the `n`
/// activation rows in `x` (bf16, [`to_bf16`], `xs` bytes apart): `y` points at output `(0, first row)` of the
/// n×`rows` result.
///
/// Safety: the CPU has AVX-512 F/BW, BF16 and F16C; `x` holds `n` rows of `xs >= 64 · nb` bytes and `y` has `n`
/// rows of `rows` floats of which 16 per group are written per row.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16,avx2,fma,f16c")]
pub(super) unsafe fn groups(bf: bool, w: &[u8], x: &[u8], xs: usize, n: usize, nb: usize, y: *mut f32, rows: usize) {
    let gb = Kind::F16.group_block_bytes();
    let count = w.len() / (nb * gb);
    assert!(count > 0 && w.len() == count * nb * gb && xs >= 64 * nb && x.len() >= n * xs);
    let mut buf = vec![_mm512_setzero_si512(); count * PER_GROUP];
    let idx = _mm512_loadu_si512(PAIRS.as_ptr().cast());
    for b0 in (0..nb).step_by(BLOCKS) {
        let b1 = (b0 + BLOCKS).min(nb);
        for g0 in (0..count).step_by(2) {
            let out = buf.as_mut_ptr().add(g0 * PER_GROUP);
            match (bf, count - g0 >= 2) {
                (false, true) => pairs::<false, 2>(w.as_ptr().add(g0 * nb * gb), nb, (b0, b1), idx, out),
                (false, false) => pairs::<false, 1>(w.as_ptr().add(g0 * nb * gb), nb, (b0, b1), idx, out),
                (true, true) => pairs::<true, 2>(w.as_ptr().add(g0 * nb * gb), nb, (b0, b1), idx, out),
                (true, false) => pairs::<true, 1>(w.as_ptr().add(g0 * nb * gb), nb, (b0, b1), idx, out),
            }
        }
        let steps = 16 * (b1 - b0);
        for i in (0..n).step_by(TILE) {
            let t = (n - i).min(TILE);
            let (xt, yt) = (x.as_ptr().add(i * xs + 64 * b0), y.add(i * rows));
            for g0 in (0..count).step_by(2) {
                let (wp, yg) = (buf.as_ptr().add(g0 * PER_GROUP), yt.add(g0 * ROWS));
                if count - g0 >= 2 {
                    with_rows!(12, t, tile[2,](wp, steps, xt, xs, b0 == 0, yg, rows));
                } else {
                    with_rows!(12, t, tile[1,](wp, steps, xt, xs, b0 == 0, yg, rows));
                }
            }
        }
    }
}

/// Blocks `b0..b1` of the `G` groups at `w` (`nb` blocks each) as bf16 pairs of columns into `out`: vector
/// `p · G + g` holds group `g`'s columns `2p, 2p + 1` of the stretch (see [`PAIRS`]).
#[inline(always)]
unsafe fn pairs<const BF: bool, const G: usize>(
    w: *const u8,
    nb: usize,
    (b0, b1): (usize, usize),
    idx: __m512i,
    out: *mut __m512i,
) {
    let gb = Kind::F16.group_block_bytes();
    for b in b0..b1 {
        for g in 0..G {
            let src = w.add((g * nb + b) * gb);
            for p in 0..16 {
                let two = src.add(64 * p);
                let v: __m512i = if BF {
                    _mm512_loadu_si512(two.cast())
                } else {
                    let (even, odd) = (
                        _mm512_cvtph_ps(_mm256_loadu_si256(two.cast())),
                        _mm512_cvtph_ps(_mm256_loadu_si256(two.add(32).cast())),
                    );
                    transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(odd, even))
                };
                out.add((16 * (b - b0) + p) * G + g).write(_mm512_permutexvar_epi16(idx, v));
            }
        }
    }
}

/// `N` activation rows (bf16 pairs from `x`, rows `xs` bytes apart) against `steps` pairs of columns of `G`
/// groups (`w`, see [`pairs`]): the sums are added to what `y` holds unless `first`.
#[inline(always)]
unsafe fn tile<const G: usize, const N: usize>(
    w: *const __m512i,
    steps: usize,
    x: *const u8,
    xs: usize,
    first: bool,
    y: *mut f32,
    rows: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); G]; N];
    if !first {
        for (j, acc) in acc.iter_mut().enumerate() {
            for (g, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_loadu_ps(y.add(j * rows + g * ROWS));
            }
        }
    }
    let xr: [*const i32; N] = std::array::from_fn(|j| x.add(j * xs) as *const i32);
    for p in 0..steps {
        let wv: [__m512i; G] = simd_array!(G, _mm512_setzero_si512(), |g| w.add(p * G + g).read());
        for j in 0..N {
            let a: __m512bh = transmute(_mm512_set1_epi32(xr[j].add(p).read_unaligned()));
            for g in 0..G {
                acc[j][g] = _mm512_dpbf16_ps(acc[j][g], transmute::<__m512i, __m512bh>(wv[g]), a);
            }
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        for (g, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(y.add(j * rows + g * ROWS), *acc);
        }
    }
}
