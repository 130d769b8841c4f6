//! The AVX-512 VNNI kernels over one interleaved group of 16 weight rows. Legacy types: activation rows in tiles of
//! up to 8, each block's 8 weight vectors unpacked once per tile, 8 `vpdpbusd` and one FMA per block and
//! activation row (two for Q4_1 and Q5_1, whose min meets the activations' scaled sum). K-quants: tiles of up to 4, each sub-block's integer sums scaled by the rows' six-bit scales in
//! integers, the mins through `vpdpwssd` against the activations' 16-value sums, two FMAs per super-block.
//! F16/BF16: tiles of up to 12 activation rows against two groups, 24 f32 accumulators, each column's 32 weights
//! widened once and met by 12 broadcast activations (24 FMAs).

use std::arch::x86_64::*;

use super::layout::{q6_quants, q6_slices, K_QUANTS, K_SCALES, Q6_SCALES};
use super::{Kind, ROWS, X_LEGACY_BYTES};
use crate::kernels::act::Q8_K_BYTES;

/// Activation rows per tile of the legacy kernels.
const TILE: usize = 8;
/// Activation rows per tile of the K-quant kernels (their integer sums take four registers a row).
const TILE_K: usize = 4;
/// Activation rows per tile of the float kernels (two accumulators a row).
const TILE_F: usize = 12;
/// Blocks of 32 columns in one stretch of the float kernels (a pair's 128 KiB of weights widened to f32, on the
/// stack). `cargo bench --bench kernels`, F16 at 512 rows on an Intel Xeon (model 207): 8 blocks 5.27 ms (2048×640)
/// and 6.57 ms (640×2048), 16 blocks 4.60 and 5.05, 32 blocks 4.39 and 4.70; 64 no faster.
const WIDE_BLOCKS: usize = 32;
/// Activation rows from which the float kernels widen the weights into a scratch first: fewer (batched decode)
/// meet them as stored, in stretches of [`PACKED_BLOCKS`] blocks (a pair's 16 KiB, in L1).
const WIDE_FROM: usize = 48;
/// Blocks of 32 columns in one stretch of the float kernels below [`WIDE_FROM`] rows.
const PACKED_BLOCKS: usize = 8;

/// The 16 outputs of each group in `w` (one, or for the floats one or two) for each of the `n` activation rows:
/// `y` points at output `(0, first row)` of the n×`rows` result.
///
/// Safety: the CPU has AVX-512 F/BW/VL/VNNI; `w` is one group of `nb` blocks in `kind`'s layout (or two whole
/// groups of a float kind), `x` holds `n` activation rows of `xs` bytes (`nb` blocks each) and `y` has `n` rows of
/// `rows` floats from which 16 per group are written per row.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn group(kind: Kind, w: &[u8], x: &[u8], xs: usize, n: usize, nb: usize, y: *mut f32, rows: usize) {
    let pair = w.len() == 2 * nb * kind.group_block_bytes();
    assert!((pair && kind.is_float() || w.len() == nb * kind.group_block_bytes()) && x.len() >= n * xs);
    if kind.is_float() {
        return floats(kind == Kind::BF16, pair, w.as_ptr(), x.as_ptr(), xs, n, nb, y, rows);
    }
    let step = if kind.is_k() { TILE_K } else { TILE };
    let mut i = 0;
    while i < n {
        let (w, x, y) = (w.as_ptr(), x.as_ptr().add(i * xs), y.add(i * rows));
        let t = (n - i).min(step);
        match kind {
            Kind::F16 | Kind::BF16 => unreachable!("floats take their own loop"),
            Kind::Q8_0 => with_rows!(8, t, tile[Q8_0,](w, x, xs, nb, y, rows)),
            Kind::Q4_0 => with_rows!(8, t, tile[Q4<false>,](w, x, xs, nb, y, rows)),
            Kind::Q5_0 => with_rows!(8, t, tile[Q5<false>,](w, x, xs, nb, y, rows)),
            Kind::Q4_1 => with_rows!(8, t, tile[Q4<true>,](w, x, xs, nb, y, rows)),
            Kind::Q5_1 => with_rows!(8, t, tile[Q5<true>,](w, x, xs, nb, y, rows)),
            Kind::IQ4_NL => with_rows!(8, t, tile[Iq4Nl,](w, x, xs, nb, y, rows)),
            Kind::Q4_K => with_rows!(4, t, k_tile[false,](w, x, xs, nb, y, rows)),
            Kind::Q5_K => with_rows!(4, t, k_tile[true,](w, x, xs, nb, y, rows)),
            Kind::Q6_K => with_rows!(4, t, q6_tile[](w, x, xs, nb, y, rows)),
        }
        i += step;
    }
}

/// [`group`] for F16 (BF16 with `bf`) weights, one group or a `pair`. Under [`WIDE_FROM`] activation rows (decode,
/// a short batch) the tiles widen the weights as they meet them. More rows take the columns in stretches of
/// [`WIDE_BLOCKS`] blocks,
/// each stretch's weights widened once into f32 and passed over every tile of activation rows, the partial sums kept
/// in `y`: the tiles' inner loops are then loads and FMAs only, without the two conversion µops per weight vector
/// that compete with the FMAs for their ports on Intel's cores, and long stretches read and write `y` seldom.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn floats(
    bf: bool,
    pair: bool,
    w: *const u8,
    x: *const u8,
    xs: usize,
    n: usize,
    nb: usize,
    y: *mut f32,
    rows: usize,
) {
    let gb = Kind::F16.group_block_bytes();
    let packed = |g: usize, b: usize, k: usize| {
        let p = w.add((g * nb + b) * gb + 32 * k);
        if bf {
            widen::<true>(p)
        } else {
            widen::<false>(p)
        }
    };
    if n == 1 {
        // A single row (decode) reads each group's weights from end to end, and a pair's groups one after the other:
        // one stream for the prefetcher, not two 20-odd KiB apart (Gemma 3 270M F16 decode, one Zen 5 core: 29-35 ->
        // 51 tok/s).
        for g in 0..1 + pair as usize {
            float_tile::<1, 1>(|_, b, k| packed(g, b, k), x, xs, (0, nb), y.add(g * ROWS), rows);
        }
        return;
    }
    if n < WIDE_FROM {
        // A single tile reads each group's weights from end to end too.
        let stretch = if n <= TILE_F { nb } else { PACKED_BLOCKS };
        for b0 in (0..nb).step_by(stretch) {
            let blocks = (b0, (b0 + stretch).min(nb));
            for i in (0..n).step_by(TILE_F) {
                let (x, y, t) = (x.add(i * xs), y.add(i * rows), (n - i).min(TILE_F));
                match pair {
                    true => with_rows!(12, t, float_tile[2,](packed, x, xs, blocks, y, rows)),
                    false => with_rows!(12, t, float_tile[1,](packed, x, xs, blocks, y, rows)),
                }
            }
        }
        return;
    }
    let groups = 1 + pair as usize;
    // Each stretch writes the vectors it reads, so the scratch needs no zeroing (128 KiB, per call).
    let mut wide = std::mem::MaybeUninit::<[__m512; 2 * WIDE_BLOCKS * 32]>::uninit();
    let wide = wide.as_mut_ptr().cast::<__m512>();
    for b0 in (0..nb).step_by(WIDE_BLOCKS) {
        let blocks = (b0, (b0 + WIDE_BLOCKS).min(nb));
        let len = blocks.1 - b0;
        for g in 0..groups {
            for b in 0..len {
                for k in 0..32 {
                    wide.add((g * len + b) * 32 + k).write(packed(g, b0 + b, k));
                }
            }
        }
        let stretch = |g: usize, b: usize, k: usize| *wide.add((g * len + b - b0) * 32 + k);
        for i in (0..n).step_by(TILE_F) {
            let (x, y, t) = (x.add(i * xs), y.add(i * rows), (n - i).min(TILE_F));
            match pair {
                true => with_rows!(12, t, float_tile[2,](stretch, x, xs, blocks, y, rows)),
                false => with_rows!(12, t, float_tile[1,](stretch, x, xs, blocks, y, rows)),
            }
        }
    }
}

/// `N` activation rows (f32 values rounded to the weights' precision) against blocks `b0..b1` of `G` groups, whose
/// weights `load(g, b, k)` gives as f32 (column `k` of block `b` of group `g`, 16 rows): each column's weights met
/// by one FMA per activation row; the sums are added to what `y` holds unless `b0` is the first block. A single row
/// splits its sums between even and odd columns, so that two FMA chains per group run side by side.
#[inline(always)]
unsafe fn float_tile<const G: usize, const N: usize>(
    load: impl Fn(usize, usize, usize) -> __m512,
    x: *const u8,
    xs: usize,
    (b0, b1): (usize, usize),
    y: *mut f32,
    rows: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); G]; N];
    let mut odd = [[_mm512_setzero_ps(); G]; N];
    if b0 > 0 {
        for (j, acc) in acc.iter_mut().enumerate() {
            for (g, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_loadu_ps(y.add(j * rows + g * ROWS));
            }
        }
    }
    let xr: [*const f32; N] = std::array::from_fn(|j| x.add(j * xs) as *const f32);
    for b in b0..b1 {
        if N == 1 {
            // Two columns a step, into two sets of sums.
            let xp = xr[0].add(32 * b);
            for k in (0..32).step_by(2) {
                let (a, a_next) =
                    (_mm512_set1_ps(xp.add(k).read_unaligned()), _mm512_set1_ps(xp.add(k + 1).read_unaligned()));
                for g in 0..G {
                    acc[0][g] = _mm512_fmadd_ps(load(g, b, k), a, acc[0][g]);
                    odd[0][g] = _mm512_fmadd_ps(load(g, b, k + 1), a_next, odd[0][g]);
                }
            }
            continue;
        }
        for k in 0..32 {
            let wv: [__m512; G] = simd_array!(G, _mm512_setzero_ps(), |g| load(g, b, k));
            for j in 0..N {
                let a = _mm512_set1_ps(xr[j].add(32 * b + k).read_unaligned());
                for g in 0..G {
                    acc[j][g] = _mm512_fmadd_ps(wv[g], a, acc[j][g]);
                }
            }
        }
    }
    for j in 0..N {
        for g in 0..G {
            _mm512_storeu_ps(y.add(j * rows + g * ROWS), _mm512_add_ps(acc[j][g], odd[j][g]));
        }
    }
}

/// The 16 F16 (BF16 with `BF`) at `p` as f32.
#[inline(always)]
unsafe fn widen<const BF: bool>(p: *const u8) -> __m512 {
    let h = _mm256_loadu_si256(p.cast());
    if BF {
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    } else {
        _mm512_cvtph_ps(h)
    }
}

/// `N` activation rows (Q8_K) against a Q6_K group: the six-bit quants unsigned (nibble plus the two high bits
/// from the pair of chunks' byte slice, see `layout`), each 16-column sub-block's sum scaled by its i8 scale, and
/// 32·Σ scale·(sub-block sum of the activations) taken out through `vpdpwssd`.
#[inline(always)]
unsafe fn q6_tile<const N: usize>(w: *const u8, x: *const u8, xs: usize, nb: usize, y: *mut f32, rows: usize) {
    let gb = Kind::Q6_K.group_block_bytes();
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..nb {
        let wb = w.add(b * gb);
        let xb: [*const u8; N] = std::array::from_fn(|j| x.add(j * xs + b * Q8_K_BYTES));
        let scale = |s: usize| _mm512_cvtepi8_epi32(_mm_loadu_si128(wb.add(Q6_SCALES + ROWS * s).cast()));
        let mut isum = [zero; N];
        for h in 0..2 {
            for quad in 0..4 {
                let (mut lo, mut hi) = ([zero; N], [zero; N]);
                for k in (4 * quad..4 * quad + 4).step_by(2) {
                    // Chunk `k`'s two bits per column sit at 0..2 (low nibbles) and 2..4, chunk `k + 1`'s above.
                    let s = _mm512_loadu_si512(wb.add(q6_slices(h, k / 2)).cast());
                    let highs =
                        [(_mm512_slli_epi16::<4>(s), _mm512_slli_epi16::<2>(s)), (s, _mm512_srli_epi16::<2>(s))];
                    for (t, (hl, hh)) in highs.into_iter().enumerate() {
                        let v = _mm512_loadu_si512(wb.add(q6_quants(h, k + t)).cast());
                        let (wl, wh) = (six(v, hl), six(_mm512_srli_epi16::<4>(v), hh));
                        for j in 0..N {
                            let xq = xb[j].add(4 + 128 * h + 4 * (k + t));
                            lo[j] =
                                _mm512_dpbusd_epi32(lo[j], wl, _mm512_set1_epi32((xq as *const i32).read_unaligned()));
                            let xh = xq.add(64) as *const i32;
                            hi[j] = _mm512_dpbusd_epi32(hi[j], wh, _mm512_set1_epi32(xh.read_unaligned()));
                        }
                    }
                }
                let (sl, sh) = (scale(8 * h + quad), scale(8 * h + 4 + quad));
                for j in 0..N {
                    let scaled = _mm512_add_epi32(_mm512_mullo_epi32(lo[j], sl), _mm512_mullo_epi32(hi[j], sh));
                    isum[j] = _mm512_add_epi32(isum[j], scaled);
                }
            }
        }
        // The offset: 32·Σ scale·(16-column sum), scales paired as i16 against the sums' pairs.
        let mut offset = [zero; N];
        for k in 0..8 {
            let pair = _mm512_or_si512(
                _mm512_and_si512(scale(2 * k), _mm512_set1_epi32(0xFFFF)),
                _mm512_slli_epi32::<16>(scale(2 * k + 1)),
            );
            for j in 0..N {
                let sums = (xb[j].add(260 + 4 * k) as *const i32).read_unaligned();
                offset[j] = _mm512_dpwssd_epi32(offset[j], pair, _mm512_set1_epi32(sums));
            }
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(wb.cast()));
        for j in 0..N {
            let dx = _mm512_set1_ps((xb[j] as *const f32).read_unaligned());
            let total = _mm512_sub_epi32(isum[j], _mm512_slli_epi32::<5>(offset[j]));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, dx), acc[j]);
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        _mm512_storeu_ps(y.add(j * rows), *acc);
    }
}

/// The low nibbles of `v` with bits 4..6 of `high` above them: six-bit weights.
#[inline(always)]
unsafe fn six(v: __m512i, high: __m512i) -> __m512i {
    _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi8(0x0F)), _mm512_and_si512(high, _mm512_set1_epi8(0x30)))
}

/// `N` activation rows (Q8_K) against a Q4_K group (Q5_K with `HIGH`): 16 outputs per row into `y`.
#[inline(always)]
unsafe fn k_tile<const HIGH: bool, const N: usize>(
    w: *const u8,
    x: *const u8,
    xs: usize,
    nb: usize,
    y: *mut f32,
    rows: usize,
) {
    let gb = if HIGH { Kind::Q5_K } else { Kind::Q4_K }.group_block_bytes();
    let (m4, bit) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10));
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..nb {
        let wb = w.add(b * gb);
        let q = wb.add(K_QUANTS);
        let masks = q.add(4 * 8 * 64) as *const u64;
        let xb: [*const u8; N] = std::array::from_fn(|j| x.add(j * xs + b * Q8_K_BYTES));
        let mut isum = [zero; N];
        for p in 0..4 {
            let (mut lo, mut hi) = ([zero; N], [zero; N]);
            for c in 0..8 {
                let v = _mm512_loadu_si512(q.add(64 * (8 * p + c)).cast());
                let mut wl = _mm512_and_si512(v, m4);
                let mut wh = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
                if HIGH {
                    wl = _mm512_mask_add_epi8(wl, masks.add(8 * (2 * p) + c).read_unaligned(), wl, bit);
                    wh = _mm512_mask_add_epi8(wh, masks.add(8 * (2 * p + 1) + c).read_unaligned(), wh, bit);
                }
                for j in 0..N {
                    let xq = xb[j].add(4 + 64 * p + 4 * c);
                    lo[j] = _mm512_dpbusd_epi32(lo[j], wl, _mm512_set1_epi32((xq as *const i32).read_unaligned()));
                    let xh = xq.add(32) as *const i32;
                    hi[j] = _mm512_dpbusd_epi32(hi[j], wh, _mm512_set1_epi32(xh.read_unaligned()));
                }
            }
            let scale = |s: usize| _mm512_cvtepu8_epi32(_mm_loadu_si128(wb.add(K_SCALES + ROWS * s).cast()));
            let (sl, sh) = (scale(2 * p), scale(2 * p + 1));
            for j in 0..N {
                let scaled = _mm512_add_epi32(_mm512_mullo_epi32(lo[j], sl), _mm512_mullo_epi32(hi[j], sh));
                isum[j] = _mm512_add_epi32(isum[j], scaled);
            }
        }
        // Σ min·(sum of the sub-block's activations): each min twice in an i32 lane, against the two 16-value sums.
        let mut msum = [zero; N];
        for s in 0..8 {
            let m = _mm512_cvtepu8_epi32(_mm_loadu_si128(wb.add(K_SCALES + 8 * ROWS + ROWS * s).cast()));
            let mm = _mm512_or_si512(m, _mm512_slli_epi32::<16>(m));
            for j in 0..N {
                let sums = (xb[j].add(260 + 4 * s) as *const i32).read_unaligned();
                msum[j] = _mm512_dpwssd_epi32(msum[j], mm, _mm512_set1_epi32(sums));
            }
        }
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(wb.cast()));
        let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(wb.add(32).cast()));
        for j in 0..N {
            let dx = _mm512_set1_ps((xb[j] as *const f32).read_unaligned());
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(d, dx), acc[j]);
            acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[j]), _mm512_mul_ps(dmin, dx), acc[j]);
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        _mm512_storeu_ps(y.add(j * rows), *acc);
    }
}

/// How one packed type turns a group's block into 8 vectors of unsigned weight bytes (vector `g` columns
/// `4g..4g + 4` of the 16 rows).
trait Unpack {
    /// The layout's parameters.
    const KIND: Kind;
    /// The weight vectors of the block whose quants start at `q` (after the scales and mins).
    unsafe fn unpack(q: *const u8) -> [__m512i; 8];
}

/// Q8_0: the bytes as packed.
struct Q8_0;

impl Unpack for Q8_0 {
    const KIND: Kind = Kind::Q8_0;
    #[inline(always)]
    unsafe fn unpack(q: *const u8) -> [__m512i; 8] {
        simd_array!(8, _mm512_setzero_si512(), |g| _mm512_loadu_si512(q.add(64 * g).cast()))
    }
}

/// Q4_0 (Q4_1 with `MIN`): low and high nibbles.
struct Q4<const MIN: bool>;

impl<const MIN: bool> Unpack for Q4<MIN> {
    const KIND: Kind = if MIN { Kind::Q4_1 } else { Kind::Q4_0 };
    #[inline(always)]
    unsafe fn unpack(q: *const u8) -> [__m512i; 8] {
        nibbles(q)
    }
}

/// IQ4_NL: the nibbles looked up as their level plus 128 (`vpshufb` on the 16 levels in every 128-bit lane).
struct Iq4Nl;

impl Unpack for Iq4Nl {
    const KIND: Kind = Kind::IQ4_NL;
    #[inline(always)]
    unsafe fn unpack(q: *const u8) -> [__m512i; 8] {
        let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(super::IQ4_NL_UNSIGNED.as_ptr().cast()));
        let v = nibbles(q);
        simd_array!(8, _mm512_setzero_si512(), |g| _mm512_shuffle_epi8(lut, v[g]))
    }
}

/// The nibbles of the 4 chunks at `q`: low nibbles of chunk `c` as vector `c`, high ones as vector `4 + c`.
#[inline(always)]
unsafe fn nibbles(q: *const u8) -> [__m512i; 8] {
    let m4 = _mm512_set1_epi8(0x0F);
    let v: [__m512i; 4] = simd_array!(4, _mm512_setzero_si512(), |c| _mm512_loadu_si512(q.add(64 * c).cast()));
    simd_array!(8, _mm512_setzero_si512(), |g| {
        if g < 4 {
            _mm512_and_si512(v[g], m4)
        } else {
            _mm512_and_si512(_mm512_srli_epi16::<4>(v[g - 4]), m4)
        }
    })
}

/// Q5_0 (Q5_1 with `MIN`): the nibbles plus 16 where the fifth bit is set.
struct Q5<const MIN: bool>;

impl<const MIN: bool> Unpack for Q5<MIN> {
    const KIND: Kind = if MIN { Kind::Q5_1 } else { Kind::Q5_0 };
    #[inline(always)]
    unsafe fn unpack(q: *const u8) -> [__m512i; 8] {
        let masks = q.add(4 * 64) as *const u64;
        let bit = _mm512_set1_epi8(0x10);
        let v = nibbles(q);
        simd_array!(8, _mm512_setzero_si512(), |g| _mm512_mask_add_epi8(v[g], masks.add(g).read_unaligned(), v[g], bit))
    }
}

/// `N` activation rows against the group: 16 outputs per row into `y` (rows `rows` floats apart). A type with a
/// min adds min · (the activations' scaled sum) per block, one FMA more.
#[inline(always)]
unsafe fn tile<U: Unpack, const N: usize>(w: *const u8, x: *const u8, xs: usize, nb: usize, y: *mut f32, rows: usize) {
    let offset = -U::KIND.offset();
    let gb = U::KIND.group_block_bytes();
    let mut acc = [_mm512_setzero_ps(); N];
    for b in 0..nb {
        let wb = w.add(b * gb);
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(wb.cast()));
        let mw = _mm512_cvtph_ps(_mm256_loadu_si256(wb.add(32).cast()));
        let wq = U::unpack(wb.add(U::KIND.quants_at()));
        for (j, acc) in acc.iter_mut().enumerate() {
            let xb = x.add(j * xs + b * X_LEGACY_BYTES);
            let dx = (xb as *const f32).read_unaligned();
            let xq = xb.add(8) as *const i32;
            let mut s = if U::KIND.has_min() {
                _mm512_setzero_si512()
            } else {
                _mm512_set1_epi32(offset * (xb.add(4) as *const i32).read_unaligned())
            };
            for (g, &wq) in wq.iter().enumerate() {
                s = _mm512_dpbusd_epi32(s, wq, _mm512_set1_epi32(xq.add(g).read_unaligned()));
            }
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), *acc);
            if U::KIND.has_min() {
                *acc = _mm512_fmadd_ps(mw, _mm512_set1_ps((xb.add(4) as *const f32).read_unaligned()), *acc);
            }
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        _mm512_storeu_ps(y.add(j * rows), *acc);
    }
}

const _: () = assert!(ROWS == 16, "one 512-bit vector holds 4 columns of 16 rows");
