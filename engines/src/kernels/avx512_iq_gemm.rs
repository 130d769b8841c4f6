//! Prefill of the i-quants (IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_S, IQ1_M) on the AVX-512 VNNI
//! level: many activation rows against each group of 16 weight rows, whose super-blocks are expanded once, on the
//! fly, into a per-thread scratch in the interleaved layout of the K-quant GEMM (each 512-bit vector 4 columns of
//! the 16 rows), so that the decoding is paid once per group instead of once per activation row. Nothing is kept:
//! the weights stay as stored (decode's one row runs the row kernels of [`avx512_iq`](super::avx512_iq)).
//!
//! Every i-quant value is `d · ls · q` with small integers `ls` (per 16 or 32 values) and `q` (an i8), so the
//! expanded block is exact: the levels as i8, the multipliers as i32 lanes, `d` as f32, and each row's
//! `128 · Σ ls · Σ q`. The activations are ggml's Q8_K with their quants stored plus 128 (unsigned), so that each
//! sub-block's `vpdpbusd` sums of broadcast activations against 16 rows' levels, times the multipliers in
//! integers, less that precomputed `128 · Σ ls · Σ q`, is ggml's integer sum of the super-block: only the order of
//! the f32 accumulation differs from the row kernels.

use std::arch::x86_64::*;
use std::cell::Cell;

use rayon::prelude::*;
use tgi_formats::quant::iq::IqBlock;
use tgi_formats::GgmlType;

use super::act::{VecType, Q8_K_BYTES};
use super::avx2::f16_at;
use super::avx512_iq::{Iq2S, Iq3S, Iq3Xxs, Iq4Xs, Pairs};
use super::{with_quantized, SyncPtr, WeightView};

/// Activation rows from which a matmul expands the weights (fewer run the row kernels).
pub(super) const FROM_ROWS: usize = 8;
/// Weight rows expanded together.
const ROWS: usize = 16;
/// Activation rows per tile of the kernel.
const TILE: usize = 8;
/// Where an expanded super-block holds its rows' `d` (16 f32, the type's dot scale included).
const D: usize = 0;
/// Where it holds the multipliers: per 16 values, 16 rows' i32 lanes.
const SCALES: usize = 64;
/// Where it holds each row's `128 · Σ ls · Σ q` over the super-block (i32), what the activations' `+ 128` adds.
const OFFSET: usize = SCALES + 16 * 64;
/// Where it holds the levels: chunk `c` (64 bytes) columns `4c..4c + 4` of the 16 rows, row `r` at `4r`, as i8.
const QUANTS: usize = OFFSET + 64;
/// Bytes of one expanded super-block of 16 rows.
const BLOCK: usize = QUANTS + 64 * 64;

/// One weight super-block decoded: its levels, its multipliers per 16 values, and `d` (returned).
type Decode = unsafe fn(*const u8, &mut [i8; 256], &mut [i16; 16]) -> f32;

/// How the weights of `ty` are decoded, and whether its multipliers are per 32 values (else per 16), if it is an
/// i-quant expanded here.
fn decoder(ty: GgmlType) -> Option<(Decode, bool)> {
    Some(match ty {
        GgmlType::IQ4_XS => (decode_pairs::<Iq4Xs>, true),
        GgmlType::IQ3_S => (decode_pairs::<Iq3S>, true),
        GgmlType::IQ3_XXS => (decode_pairs::<Iq3Xxs>, true),
        GgmlType::IQ2_S => (decode_pairs::<Iq2S>, false),
        GgmlType::IQ2_XXS => (decode_codec::<16>, true),
        GgmlType::IQ2_XS => (decode_codec::<17>, false),
        GgmlType::IQ1_S => (decode_codec::<19>, true),
        GgmlType::IQ1_M => (decode_codec::<29>, false),
        _ => return None,
    })
}

/// Whether `n` activation rows against weights of `ty` take this path.
pub(super) fn applies(ty: GgmlType, n: usize) -> bool {
    n >= FROM_ROWS && decoder(ty).is_some()
}

/// [`Decode`] through the 512-bit row kernels' pair decoder: magnitudes and sign masks to signed levels.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn decode_pairs<T: Pairs>(wb: *const u8, q: &mut [i8; 256], ls: &mut [i16; 16]) -> f32 {
    let mut lanes = [0i16; 32];
    for p in 0..4 {
        let (m, neg, s) = T::pair(wb, p);
        let v = _mm512_mask_sub_epi8(m, neg, _mm512_setzero_si512(), m);
        _mm512_storeu_si512(q.as_mut_ptr().add(64 * p).cast(), v);
        // Lane `k` holds the multiplier of values `2k` and `2k + 1` of the pair.
        _mm512_storeu_si512(lanes.as_mut_ptr().cast(), s);
        for g in 0..4 {
            ls[4 * p + g] = lanes[8 * g];
        }
    }
    f16_at(wb) * T::DOT_SCALE
}

/// [`Decode`] through the portable unpacker of the i-quant whose ggml type id is `ID`.
unsafe fn decode_codec<const ID: u32>(wb: *const u8, q: &mut [i8; 256], ls: &mut [i16; 16]) -> f32 {
    let c = super::scalar::iq_codec::<ID>();
    let mut b = IqBlock::default();
    c.unpack(std::slice::from_raw_parts(wb, c.block_bytes), &mut b);
    *q = b.q;
    for (l, &v) in ls.iter_mut().zip(&b.ls) {
        *l = v as i16;
    }
    b.d * c.dot_scale
}

/// y[i, r] = Σ_c x[i, c] · W[r, c] for i in 0..n, `W` an i-quant [`applies`] takes, on the current rayon pool.
///
/// Panics unless the CPU has AVX-512 F/BW/VL/VNNI (the caller's level) and the type is one this path expands.
pub(super) fn matmul(w: WeightView<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    super::Backend::Avx512.assert_supported();
    let (decode, sub32) = decoder(w.ty).expect("an i-quant this path expands");
    let nb = w.cols / 256;
    let xs = nb * Q8_K_BYTES;
    thread_local! {
        static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }
    with_quantized(
        x,
        n,
        w.cols,
        xs,
        |s, d| {
            VecType::Q8K.quantize_row(s, d);
            for block in d.chunks_exact_mut(Q8_K_BYTES) {
                block[4..260].iter_mut().for_each(|q| *q ^= 0x80);
            }
        },
        |xq| {
            let yp = SyncPtr(y.as_mut_ptr());
            (0..w.rows.div_ceil(ROWS)).into_par_iter().for_each(|g| {
                let mut scratch = SCRATCH.with(Cell::take);
                scratch.resize(nb * BLOCK, 0);
                let valid = (w.rows - g * ROWS).min(ROWS);
                // SAFETY: the CPU has the level (asserted above); `scratch` holds `nb` expanded blocks, `xq` `n` rows
                // of `xs` bytes, and `y` is n×rows with this task the only writer of group `g`'s `valid` columns.
                unsafe {
                    expand(decode, w, g, &mut scratch);
                    run(sub32, &scratch, xq, xs, n, nb, yp.at(g * ROWS), w.rows, valid);
                }
                SCRATCH.with(|s| s.set(scratch));
            });
        },
    );
}

/// Expands weight rows `16g..16g + 16` of `w` (those past its end as zeros) into `out`, super-block after
/// super-block.
///
/// Safety: the CPU has what `decode` needs; `out` holds `cols / 256` expanded blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn expand(decode: Decode, w: WeightView<'_>, g: usize, out: &mut [u8]) {
    let (wb, bb, nb) = (w.row_bytes(), w.ty.type_size(), w.cols / 256);
    assert!(out.len() >= nb * BLOCK);
    let (mut q, mut ls) = ([[0i8; 256]; ROWS], [0i16; 16]);
    for (b, o) in out.chunks_exact_mut(BLOCK).take(nb).enumerate() {
        for (r, q) in q.iter_mut().enumerate() {
            let row = g * ROWS + r;
            let d = if row < w.rows {
                let at = row * wb + b * bb;
                assert!(at + bb <= w.data.len());
                decode(w.data.as_ptr().add(at), q, &mut ls)
            } else {
                (*q, ls) = ([0; 256], [0; 16]);
                0.0
            };
            o[D + 4 * r..][..4].copy_from_slice(&d.to_le_bytes());
            for (s, &l) in ls.iter().enumerate() {
                o[SCALES + 64 * s + 4 * r..][..4].copy_from_slice(&(l as i32).to_le_bytes());
            }
            o[OFFSET + 4 * r..][..4].copy_from_slice(&(128 * level_sums(q, &ls)).to_le_bytes());
        }
        // Each 64 values of the 16 rows, a 16×16 matrix of 4-value words, transposed into 16 chunks.
        let quants = o[QUANTS..QUANTS + 64 * 64].as_mut_ptr();
        for p in 0..4 {
            let mut rows = [_mm512_setzero_si512(); ROWS];
            for (v, q) in rows.iter_mut().zip(&q) {
                *v = _mm512_loadu_si512(q.as_ptr().add(64 * p).cast());
            }
            for (k, v) in transpose(rows).into_iter().enumerate() {
                _mm512_storeu_si512(quants.add(64 * (16 * p + k)).cast(), v);
            }
        }
    }
}

/// The 16×16 matrix of 32-bit words `r` (row `i` in `r[i]`) transposed: word `k` of every row in `out[k]`.
#[inline(always)]
unsafe fn transpose(r: [__m512i; 16]) -> [__m512i; 16] {
    let z = _mm512_setzero_si512();
    // Per 128-bit lane `l`: rows 2i and 2i + 1 interleaved (words 4l, 4l + 1, then 4l + 2, 4l + 3).
    let mut t = [z; 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // v[g][j], lane l: word 4l + j of rows 4g..4g + 4.
    let mut v = [[z; 4]; 4];
    for (g, v) in v.iter_mut().enumerate() {
        let (a_lo, a_hi, c_lo, c_hi) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        v[0] = _mm512_unpacklo_epi64(a_lo, c_lo);
        v[1] = _mm512_unpackhi_epi64(a_lo, c_lo);
        v[2] = _mm512_unpacklo_epi64(a_hi, c_hi);
        v[3] = _mm512_unpackhi_epi64(a_hi, c_hi);
    }
    // Lane l of v[0][j], ..., v[3][j] side by side: word 4l + j of all 16 rows.
    let mut out = [z; 16];
    for j in 0..4 {
        let x0 = _mm512_shuffle_i32x4::<0b10_00_10_00>(v[0][j], v[1][j]);
        let x1 = _mm512_shuffle_i32x4::<0b11_01_11_01>(v[0][j], v[1][j]);
        let y0 = _mm512_shuffle_i32x4::<0b10_00_10_00>(v[2][j], v[3][j]);
        let y1 = _mm512_shuffle_i32x4::<0b11_01_11_01>(v[2][j], v[3][j]);
        out[j] = _mm512_shuffle_i32x4::<0b10_00_10_00>(x0, y0);
        out[4 + j] = _mm512_shuffle_i32x4::<0b10_00_10_00>(x1, y1);
        out[8 + j] = _mm512_shuffle_i32x4::<0b11_01_11_01>(x0, y0);
        out[12 + j] = _mm512_shuffle_i32x4::<0b11_01_11_01>(x1, y1);
    }
    out
}

/// `Σ ls · Σ q` over the 16-value groups of a decoded super-block: each group's sum from `vpsadbw` of the levels
/// made unsigned.
#[inline(always)]
unsafe fn level_sums(q: &[i8; 256], ls: &[i16; 16]) -> i32 {
    let mut sums = [0u64; 32];
    for p in 0..4 {
        let v = _mm512_xor_si512(_mm512_loadu_si512(q.as_ptr().add(64 * p).cast()), _mm512_set1_epi8(-128));
        _mm512_storeu_si512(sums.as_mut_ptr().add(8 * p).cast(), _mm512_sad_epu8(v, _mm512_setzero_si512()));
    }
    ls.iter().zip(sums.chunks_exact(2)).map(|(&l, s)| l as i32 * ((s[0] + s[1]) as i32 - 16 * 128)).sum()
}

/// The `valid` (1..=16) outputs of one expanded group for each of the `n` activation rows, in tiles of [`TILE`]:
/// `y` points at output `(0, first row)` of the n×`rows` result.
///
/// Safety: the CPU has AVX-512 F/BW/VL/VNNI; `w` holds `nb` expanded blocks, `x` `n` Q8_K rows of `xs` bytes, and
/// `y` has `n` rows of `rows` floats from which `valid` are written per row.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn run(sub32: bool, w: &[u8], x: &[u8], xs: usize, n: usize, nb: usize, y: *mut f32, rows: usize, valid: usize) {
    assert!(w.len() >= nb * BLOCK && x.len() >= n * xs && (1..=ROWS).contains(&valid));
    let mask = (((1u32 << valid) - 1) & 0xFFFF) as __mmask16;
    for i in (0..n).step_by(TILE) {
        let (w, x, y) = (w.as_ptr(), x.as_ptr().add(i * xs), y.add(i * rows));
        let t = (n - i).min(TILE);
        if sub32 {
            with_rows!(8, t, tile[true,](w, x, xs, nb, y, rows, mask));
        } else {
            with_rows!(8, t, tile[false,](w, x, xs, nb, y, rows, mask));
        }
    }
}

/// `N` activation rows (Q8_K, quants plus 128) against an expanded group whose multipliers are per 32 values (`SUB32`) or 16: the
/// 16 outputs of each row, those in `mask` stored to `y`.
#[inline(always)]
unsafe fn tile<const SUB32: bool, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    nb: usize,
    y: *mut f32,
    rows: usize,
    mask: __mmask16,
) {
    let zero = _mm512_setzero_si512();
    let chunks = if SUB32 { 8 } else { 4 };
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..nb {
        let wb = w.add(b * BLOCK);
        let xb: [*const u8; N] = std::array::from_fn(|j| x.add(j * xs + b * Q8_K_BYTES));
        let mut isum = [zero; N];
        for s in (0..16).step_by(chunks / 4) {
            let mut raw = [zero; N];
            for c in 4 * s..4 * s + chunks {
                let v = _mm512_loadu_si512(wb.add(QUANTS + 64 * c).cast());
                for j in 0..N {
                    let a = _mm512_set1_epi32((xb[j].add(4 + 4 * c) as *const i32).read_unaligned());
                    raw[j] = _mm512_dpbusd_epi32(raw[j], a, v);
                }
            }
            let sc = _mm512_loadu_si512(wb.add(SCALES + 64 * s).cast());
            for j in 0..N {
                isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(raw[j], sc));
            }
        }
        let offset = _mm512_loadu_si512(wb.add(OFFSET).cast());
        let d = _mm512_loadu_ps(wb.add(D).cast());
        for j in 0..N {
            let dx = _mm512_set1_ps((xb[j] as *const f32).read_unaligned());
            let total = _mm512_sub_epi32(isum[j], offset);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, dx), acc[j]);
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(y.add(j * rows), mask, *acc);
    }
}

#[cfg(test)]
mod tests;
