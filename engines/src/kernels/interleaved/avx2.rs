//! The AVX2 kernels over one interleaved group of 16 weight rows, for the AVX2 and AVX-VNNI levels. The group runs
//! as two halves of 8 rows (bytes `32h..32h + 32` of every 64-byte chunk): `vpmaddubsw` multiplies four columns of
//! 8 rows against four broadcast activation bytes, its i16 pair sums are added in i16 for as many columns as cannot
//! overflow, and one `vpmaddwd` then widens them to i32, applying a K-quant's sub-block scales on the way. The high
//! bits of Q5_0, Q5_1, Q5_K and Q6_K come from byte slices (see `layout`): one shift and one `and` put a vector's bits in
//! place. Q8_0's weights go back to signed bytes, and IQ4_NL's nibbles are looked up as their signed levels; both
//! meet the activations through the sign trick (`vpsignb`), as their unsigned form would overflow `vpmaddubsw`'s
//! i16 sums. F16/BF16: tiles of up to 6 activation rows against
//! one group, 12 f32 accumulators, each column's 16 weights widened once and met by 6 broadcast activations.

use std::arch::x86_64::*;

use tgi_formats::quant::IQ4_NL_VALUES;

use super::layout::{q6_quants, q6_slices, K_QUANTS, K_SCALES, Q6_SCALES};
use super::{Kind, ROWS, X_LEGACY_BYTES};
use crate::kernels::act::Q8_K_BYTES;

/// Rows of one half of a group.
const HALF: usize = ROWS / 2;
/// Activation rows per tile of the legacy kernels.
const TILE: usize = 8;
/// Activation rows per tile of the Q4_K and Q6_K kernels (measured: Q5_K, whose unpacking costs more, takes
/// [`TILE`]).
const TILE_K: usize = 4;
/// Activation rows per tile of the float kernels (two accumulators a row, 12 of the 16 registers).
const TILE_F: usize = 6;
/// Blocks of 32 columns in one stretch of the float kernels (a group's 32 KiB of weights). `cargo bench --bench
/// kernels`, F16 2048×640 at 512 rows on the AVX2 level of an Intel Xeon (model 207): 8 blocks 9.34 ms, 32 blocks 8.95.
const FLOAT_BLOCKS: usize = 32;

/// The 16 outputs of each group in `w` (one, or for the floats any number) for each of the `n` activation rows: `y`
/// points at output `(0, first row)` of the n×`rows` result.
///
/// Safety: the CPU has AVX2, FMA and F16C; `w` is one group of `nb` blocks of `kind` in its layout with the high
/// bits as slices (or whole groups of a float kind), `x` holds `n` activation rows of `xs` bytes (`nb` blocks
/// each) and `y` has `n` rows of `rows` floats from which 16 per group are written per row.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group(kind: Kind, w: &[u8], x: &[u8], xs: usize, n: usize, nb: usize, y: *mut f32, rows: usize) {
    let gbytes = nb * kind.group_block_bytes();
    let groups = w.len() / gbytes;
    assert!(groups * gbytes == w.len() && (groups == 1 || kind.is_float()) && x.len() >= n * xs);
    if kind.is_float() {
        return floats(kind == Kind::BF16, w.as_ptr(), groups, x.as_ptr(), xs, n, nb, y, rows);
    }
    let step = if matches!(kind, Kind::Q4_K | Kind::Q6_K) { TILE_K } else { TILE };
    for i in (0..n).step_by(step) {
        let t = (n - i).min(step);
        for h in 0..2 {
            let (w, x, y) = (w.as_ptr(), x.as_ptr().add(i * xs), y.add(i * rows + HALF * h));
            match kind {
                Kind::F16 | Kind::BF16 => unreachable!("floats take their own loop"),
                Kind::Q8_0 => with_rows!(8, t, tile[Q8_0,](w, x, xs, nb, y, rows, h)),
                Kind::Q4_0 => with_rows!(8, t, tile[Q4<false>,](w, x, xs, nb, y, rows, h)),
                Kind::Q5_0 => with_rows!(8, t, tile[Q5<false>,](w, x, xs, nb, y, rows, h)),
                Kind::Q4_1 => with_rows!(8, t, tile[Q4<true>,](w, x, xs, nb, y, rows, h)),
                Kind::Q5_1 => with_rows!(8, t, tile[Q5<true>,](w, x, xs, nb, y, rows, h)),
                Kind::IQ4_NL => with_rows!(8, t, tile[Iq4Nl,](w, x, xs, nb, y, rows, h)),
                Kind::Q4_K => with_rows!(4, t, k_tile[false,](w, x, xs, nb, y, rows, h)),
                Kind::Q5_K => with_rows!(8, t, k_tile[true,](w, x, xs, nb, y, rows, h)),
                Kind::Q6_K => with_rows!(4, t, q6_tile[](w, x, xs, nb, y, rows, h)),
            }
        }
    }
}

/// `groups` consecutive groups of F16 (BF16 with `bf`) weights: the columns in stretches of [`FLOAT_BLOCKS`]
/// blocks, and within a stretch each tile of activation rows (in L1) met by every group's weights (in L2), the
/// partial sums kept in `y`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn floats(
    bf: bool,
    w: *const u8,
    groups: usize,
    x: *const u8,
    xs: usize,
    n: usize,
    nb: usize,
    y: *mut f32,
    rows: usize,
) {
    let gbytes = nb * Kind::F16.group_block_bytes();
    // A single tile (decode) reads each group's weights from end to end instead, one stream for the prefetcher.
    let stretch = if n <= TILE_F { nb } else { FLOAT_BLOCKS };
    for b0 in (0..nb).step_by(stretch) {
        let blocks = (b0, (b0 + stretch).min(nb));
        for i in (0..n).step_by(TILE_F) {
            let (x, t) = (x.add(i * xs), (n - i).min(TILE_F));
            for g in 0..groups {
                let (w, y) = (w.add(g * gbytes), y.add(i * rows + g * ROWS));
                if bf {
                    with_rows!(6, t, float_tile[true,](w, x, xs, blocks, y, rows))
                } else {
                    with_rows!(6, t, float_tile[false,](w, x, xs, blocks, y, rows))
                }
            }
        }
    }
}

/// `N` activation rows (f32 values rounded to the weights' precision) against blocks `b0..b1` of one F16 group (BF16
/// with `BF`): each column's 16 weights widened to f32 once (two vectors), then two FMAs per activation row; the
/// sums are added to what `y` holds unless `b0` is the first block. A single row splits its sums between even and
/// odd columns, so that two FMA chains run side by side.
#[inline(always)]
unsafe fn float_tile<const BF: bool, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    (b0, b1): (usize, usize),
    y: *mut f32,
    rows: usize,
) {
    let gb = Kind::F16.group_block_bytes();
    let zero = _mm256_setzero_ps();
    let mut acc = [[zero; 2]; N];
    let mut odd = [[zero; 2]; N];
    if b0 > 0 {
        for (j, acc) in acc.iter_mut().enumerate() {
            for (h, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_loadu_ps(y.add(j * rows + HALF * h));
            }
        }
    }
    for b in b0..b1 {
        let wb = w.add(b * gb);
        if N == 1 {
            // Two columns a step, into two sets of sums.
            let xp = x.add(4 * 32 * b) as *const f32;
            for k in (0..32).step_by(2) {
                let (a, a_next) =
                    (_mm256_set1_ps(xp.add(k).read_unaligned()), _mm256_set1_ps(xp.add(k + 1).read_unaligned()));
                for h in 0..2 {
                    acc[0][h] = _mm256_fmadd_ps(widen::<BF>(wb.add(32 * k + 16 * h)), a, acc[0][h]);
                    odd[0][h] = _mm256_fmadd_ps(widen::<BF>(wb.add(32 * k + 32 + 16 * h)), a_next, odd[0][h]);
                }
            }
            continue;
        }
        let xb: [*const f32; N] = std::array::from_fn(|j| x.add(j * xs + 4 * 32 * b) as *const f32);
        for k in 0..32 {
            let wv = [widen::<BF>(wb.add(32 * k)), widen::<BF>(wb.add(32 * k + 16))];
            for j in 0..N {
                let a = _mm256_set1_ps(xb[j].add(k).read_unaligned());
                for h in 0..2 {
                    acc[j][h] = _mm256_fmadd_ps(wv[h], a, acc[j][h]);
                }
            }
        }
    }
    for j in 0..N {
        for h in 0..2 {
            _mm256_storeu_ps(y.add(j * rows + HALF * h), _mm256_add_ps(acc[j][h], odd[j][h]));
        }
    }
}

/// The 8 F16 (BF16 with `BF`) at `p` as f32.
#[inline(always)]
unsafe fn widen<const BF: bool>(p: *const u8) -> __m256 {
    let h = _mm_loadu_si128(p.cast());
    if BF {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    } else {
        _mm256_cvtph_ps(h)
    }
}

/// The four bytes at `p` in every i32 lane.
#[inline(always)]
unsafe fn bcast(p: *const u8) -> __m256i {
    _mm256_set1_epi32((p as *const i32).read_unaligned())
}

/// 32 bytes at `p`.
#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p.cast())
}

/// The 8 f16 at `p` as f32.
#[inline(always)]
unsafe fn f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
}

/// The bytes at `a` and `b` (8 each) as i16 lanes `a0 b0 a1 b1 ...`, widened as unsigned or (`SIGNED`) signed: one
/// i32 lane of `vpmaddwd` per row.
#[inline(always)]
unsafe fn pairs<const SIGNED: bool>(a: *const u8, b: *const u8) -> __m256i {
    let v = _mm_unpacklo_epi8(_mm_loadl_epi64(a.cast()), _mm_loadl_epi64(b.cast()));
    if SIGNED {
        _mm256_cvtepi8_epi16(v)
    } else {
        _mm256_cvtepu8_epi16(v)
    }
}

/// Each byte of `v` shifted so that its bit `from` lands on bit 4 (16-bit shifts: the caller masks the bits that
/// cross from the neighbouring byte, which never reach bits 4 and 5 here).
#[inline(always)]
unsafe fn to_bit4(v: __m256i, from: usize) -> __m256i {
    match from {
        0 => _mm256_slli_epi16::<4>(v),
        1 => _mm256_slli_epi16::<3>(v),
        2 => _mm256_slli_epi16::<2>(v),
        3 => _mm256_slli_epi16::<1>(v),
        4 => v,
        5 => _mm256_srli_epi16::<1>(v),
        6 => _mm256_srli_epi16::<2>(v),
        _ => _mm256_srli_epi16::<3>(v),
    }
}

/// How one legacy type turns a half of a group's block into 8 vectors of weight bytes (vector `g` columns
/// `4g..4g + 4` of the 8 rows).
trait Unpack {
    /// The layout's parameters.
    const KIND: Kind;
    /// How many `vpmaddubsw` results may be added in i16 without overflow.
    const RUN: usize;
    /// Whether the bytes are signed (multiplied through the sign trick) rather than unsigned.
    const SIGNED: bool;
    /// The weight vectors of half `h` of the block whose quants start at `q` (after the scales and mins).
    unsafe fn unpack(q: *const u8, h: usize) -> [__m256i; 8];
}

/// Q8_0: the packed bytes with their top bit flipped back, signed.
struct Q8_0;

impl Unpack for Q8_0 {
    const KIND: Kind = Kind::Q8_0;
    const RUN: usize = 1;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(q: *const u8, h: usize) -> [__m256i; 8] {
        let top = _mm256_set1_epi8(i8::MIN);
        simd_array!(8, _mm256_setzero_si256(), |g| _mm256_xor_si256(load(q.add(64 * g + 32 * h)), top))
    }
}

/// Q4_0 (Q4_1 with `MIN`): low and high nibbles.
struct Q4<const MIN: bool>;

impl<const MIN: bool> Unpack for Q4<MIN> {
    const KIND: Kind = if MIN { Kind::Q4_1 } else { Kind::Q4_0 };
    const RUN: usize = 8;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(q: *const u8, h: usize) -> [__m256i; 8] {
        nibbles(q, h)
    }
}

/// IQ4_NL: the nibbles looked up as their signed level (`vpshufb`), met through the sign trick as Q8_0's are
/// (their unsigned form, up to 241, would overflow `vpmaddubsw`'s i16 pair sums).
struct Iq4Nl;

impl Unpack for Iq4Nl {
    const KIND: Kind = Kind::IQ4_NL;
    const RUN: usize = 1;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(q: *const u8, h: usize) -> [__m256i; 8] {
        let lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(IQ4_NL_VALUES.as_ptr().cast()));
        let v = nibbles(q, h);
        simd_array!(8, _mm256_setzero_si256(), |g| _mm256_shuffle_epi8(lut, v[g]))
    }
}

/// The nibbles of half `h` of the 4 chunks at `q`: low nibbles of chunk `c` as vector `c`, high ones as `4 + c`.
#[inline(always)]
unsafe fn nibbles(q: *const u8, h: usize) -> [__m256i; 8] {
    let m4 = _mm256_set1_epi8(0x0F);
    let v: [__m256i; 4] = simd_array!(4, _mm256_setzero_si256(), |c| load(q.add(64 * c + 32 * h)));
    simd_array!(8, _mm256_setzero_si256(), |g| {
        if g < 4 {
            _mm256_and_si256(v[g], m4)
        } else {
            _mm256_and_si256(_mm256_srli_epi16::<4>(v[g - 4]), m4)
        }
    })
}

/// Q5_0 (Q5_1 with `MIN`): the nibbles plus 16 where the fifth bit (bit `g` of the half's slice) is set.
struct Q5<const MIN: bool>;

impl<const MIN: bool> Unpack for Q5<MIN> {
    const KIND: Kind = if MIN { Kind::Q5_1 } else { Kind::Q5_0 };
    const RUN: usize = 4;
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(q: *const u8, h: usize) -> [__m256i; 8] {
        let slice = load(q.add(4 * 64 + 32 * h));
        let bit = _mm256_set1_epi8(0x10);
        let v = nibbles(q, h);
        simd_array!(8, _mm256_setzero_si256(), |g| _mm256_or_si256(v[g], _mm256_and_si256(to_bit4(slice, g), bit)))
    }
}

/// `N` activation rows (Q8_0 as f32 scale, i32 sum, 32 quants) against half `h` of a legacy group: 8 outputs per
/// row into `y` (rows `rows` floats apart). A type with a min adds min · (the activations' scaled sum, the f32 in
/// place of the i32 sum) per block, one FMA more.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn tile<U: Unpack, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    nb: usize,
    y: *mut f32,
    rows: usize,
    h: usize,
) {
    let offset = if U::SIGNED { 0 } else { -U::KIND.offset() };
    let gb = U::KIND.group_block_bytes();
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        let wb = w.add(b * gb);
        let dw = f16x8(wb.add(16 * h));
        let mw = f16x8(wb.add(32 + 16 * h));
        let wq = U::unpack(wb.add(U::KIND.quants_at()), h);
        for (j, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(j * xs + b * X_LEGACY_BYTES);
            let dx = (xb as *const f32).read_unaligned();
            let xq = xb.add(8);
            let mut s = if U::KIND.has_min() {
                _mm256_setzero_si256()
            } else {
                _mm256_set1_epi32(offset * (xb.add(4) as *const i32).read_unaligned())
            };
            for run in (0..8).step_by(U::RUN) {
                let mut p = _mm256_setzero_si256();
                for (g, &v) in wq.iter().enumerate().skip(run).take(U::RUN) {
                    let xv = bcast(xq.add(4 * g));
                    let prod = if U::SIGNED {
                        _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(v, xv))
                    } else {
                        _mm256_maddubs_epi16(v, xv)
                    };
                    p = _mm256_add_epi16(p, prod);
                }
                s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
            }
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), *acc);
            if U::KIND.has_min() {
                *acc = _mm256_fmadd_ps(mw, _mm256_set1_ps((xb.add(4) as *const f32).read_unaligned()), *acc);
            }
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        _mm256_storeu_ps(y.add(j * rows), *acc);
    }
}

/// `N` activation rows (Q8_K) against half `h` of a Q4_K group (Q5_K with `HIGH`): each sub-block's i16 sums
/// widened by `vpmaddwd` against its six-bit scales, the mins through `vpmaddwd` against the activations' 16-value
/// sums, two FMAs per super-block.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn k_tile<const HIGH: bool, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    nb: usize,
    y: *mut f32,
    rows: usize,
    h: usize,
) {
    let gb = if HIGH { Kind::Q5_K } else { Kind::Q4_K }.group_block_bytes();
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        let wb = w.add(b * gb);
        let xb: [*const u8; N] = std::array::from_fn(|j| x.add(j * xs + b * Q8_K_BYTES));
        let mut isum = [zero; N];
        // Written out so that each pair's shifts of the fifth bits are constants.
        k_pair::<HIGH, N>(wb, &xb, h, 0, &mut isum);
        k_pair::<HIGH, N>(wb, &xb, h, 1, &mut isum);
        k_pair::<HIGH, N>(wb, &xb, h, 2, &mut isum);
        k_pair::<HIGH, N>(wb, &xb, h, 3, &mut isum);
        // Σ min·(sum of the sub-block's activations): each min twice in an i32 lane, against the two 16-value sums.
        let mut msum = [zero; N];
        for s in 0..8 {
            let m = wb.add(K_SCALES + 8 * ROWS + ROWS * s + HALF * h);
            let mm = pairs::<false>(m, m);
            for (j, msum) in msum.iter_mut().enumerate() {
                *msum = _mm256_add_epi32(*msum, _mm256_madd_epi16(mm, bcast(xb[j].add(260 + 4 * s))));
            }
        }
        let d = f16x8(wb.add(16 * h));
        let dmin = f16x8(wb.add(32 + 16 * h));
        for j in 0..N {
            let dx = _mm256_set1_ps((xb[j] as *const f32).read_unaligned());
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(d, dx), acc[j]);
            acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[j]), _mm256_mul_ps(dmin, dx), acc[j]);
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        _mm256_storeu_ps(y.add(j * rows), *acc);
    }
}

/// Sub-blocks `2p` (low nibbles) and `2p + 1` (high nibbles) of the K-quant super-block at `wb`, half `h`, against
/// the `N` activation blocks `xb`, scaled and added to `isum`: chunk after chunk, each unpacked once and met by every
/// activation row, the i16 sums widened every 8 chunks (4 with the fifth bit).
#[inline(always)]
unsafe fn k_pair<const HIGH: bool, const N: usize>(
    wb: *const u8,
    xb: &[*const u8; N],
    h: usize,
    p: usize,
    isum: &mut [__m256i; N],
) {
    let (m4, bit) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
    let zero = _mm256_setzero_si256();
    let q = wb.add(K_QUANTS);
    let slices = q.add(4 * 8 * 64);
    let scale = |s: usize| wb.add(K_SCALES + ROWS * s + HALF * h);
    let (sl, sh) = (pairs::<false>(scale(2 * p), scale(2 * p)), pairs::<false>(scale(2 * p + 1), scale(2 * p + 1)));
    // The low nibbles (sub-block `2p`), then the high ones (`2p + 1`): only `N` i16 sums live at a time.
    for (half_byte, sc) in [(0, sl), (1, sh)] {
        let mut sum = [zero; N];
        for c in 0..8 {
            let v = load(q.add(64 * (8 * p + c) + 32 * h));
            let mut wv = _mm256_and_si256(if half_byte == 0 { v } else { _mm256_srli_epi16::<4>(v) }, m4);
            if HIGH {
                let s = load(slices.add(32 * (2 * c + h)));
                wv = _mm256_or_si256(wv, _mm256_and_si256(to_bit4(s, 2 * p + half_byte), bit));
            }
            for j in 0..N {
                let xq = xb[j].add(4 + 64 * p + 32 * half_byte + 4 * c);
                sum[j] = _mm256_add_epi16(sum[j], _mm256_maddubs_epi16(wv, bcast(xq)));
            }
            // Four-bit weights against i8 activations fit 8 products' pair sums in i16, five-bit ones 4.
            if c == 7 || (HIGH && c == 3) {
                for j in 0..N {
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(sum[j], sc));
                    sum[j] = zero;
                }
            }
        }
    }
}

/// `N` activation rows (Q8_K) against half `h` of a Q6_K group: the six-bit quants unsigned (nibble plus the two
/// high bits from the slices), each 16-column sub-block's i16 sums widened against its i8 scale, and
/// 32·Σ scale·(sub-block sum of the activations) taken out through `vpmaddwd`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn q6_tile<const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    nb: usize,
    y: *mut f32,
    rows: usize,
    h: usize,
) {
    let gb = Kind::Q6_K.group_block_bytes();
    let (m4, m30) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); N];
    for b in 0..nb {
        let wb = w.add(b * gb);
        let xb: [*const u8; N] = std::array::from_fn(|j| x.add(j * xs + b * Q8_K_BYTES));
        let scale = |s: usize| wb.add(Q6_SCALES + ROWS * s + HALF * h);
        let mut isum = [zero; N];
        for part in 0..2 {
            for quad in 0..4 {
                let sl = pairs::<true>(scale(8 * part + quad), scale(8 * part + quad));
                let sh = pairs::<true>(scale(8 * part + 4 + quad), scale(8 * part + 4 + quad));
                // A pair of chunks shares one slice; six-bit weights fit two products' pair sums in i16. The low
                // nibbles' columns, then the high ones': only `N` i16 sums live at a time.
                for pair in 0..2 {
                    let k = 4 * quad + 2 * pair;
                    let s = load(wb.add(q6_slices(part, k / 2) + 32 * h));
                    for (high, sc) in [(0, sl), (1, sh)] {
                        let mut sum = [zero; N];
                        for t in 0..2 {
                            let v = load(wb.add(q6_quants(part, k + t) + 32 * h));
                            let nibble = _mm256_and_si256(if high == 0 { v } else { _mm256_srli_epi16::<4>(v) }, m4);
                            let wv = _mm256_or_si256(nibble, _mm256_and_si256(to_bit4(s, 4 * t + 2 * high), m30));
                            for j in 0..N {
                                let xq = xb[j].add(4 + 128 * part + 64 * high + 4 * (k + t));
                                sum[j] = _mm256_add_epi16(sum[j], _mm256_maddubs_epi16(wv, bcast(xq)));
                            }
                        }
                        for j in 0..N {
                            isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(sum[j], sc));
                        }
                    }
                }
            }
        }
        // The offset: 32·Σ scale·(16-column sum), scales paired as i16 against the sums' pairs.
        let mut offset = [zero; N];
        for k in 0..8 {
            let pair = pairs::<true>(scale(2 * k), scale(2 * k + 1));
            for (j, offset) in offset.iter_mut().enumerate() {
                *offset = _mm256_add_epi32(*offset, _mm256_madd_epi16(pair, bcast(xb[j].add(260 + 4 * k))));
            }
        }
        let d = f16x8(wb.add(16 * h));
        for j in 0..N {
            let dx = _mm256_set1_ps((xb[j] as *const f32).read_unaligned());
            let total = _mm256_sub_epi32(isum[j], _mm256_slli_epi32::<5>(offset[j]));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(d, dx), acc[j]);
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        _mm256_storeu_ps(y.add(j * rows), *acc);
    }
}

const _: () = assert!(ROWS == 16, "a half of a 64-byte chunk holds four columns of 8 rows");
