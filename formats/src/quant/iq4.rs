//! The 4-bit non-linear codecs IQ4_NL (blocks of 32, one fp16 scale) and IQ4_XS (super-blocks of
//! 256: an fp16 scale and eight 6-bit block scales), as ggml's `quantize_row_iq4_nl_impl` writes
//! them through `quantize_iq4_nl` / `quantize_iq4_xs` (what `ggml_quantize_chunk`, hence
//! llama-quantize, calls, with or without an importance matrix) and `dequantize_row_iq4_*` reads
//! them, and IQ4_NL also as its `from_float` (`quantize_row_iq4_nl_ref`, what ggml writes a KV cache
//! with) does: see [`Iq4Search`]. Every value is an index into [`IQ4_NL_VALUES`] times the block's scale.

use super::num::{fp16_value, load_fp16, nearest_int, store_fp16};

/// ggml's `kvalues_iq4nl`: the 16 levels an IQ4 nibble stands for.
pub const IQ4_NL_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Values per IQ4 block (the unit that shares one scale).
const QK: usize = 32;

/// Values per IQ4_XS super-block.
const QK_XS: usize = 256;

/// How an IQ4 block's scale is searched: ggml's `ntry` argument of `quantize_row_iq4_nl_impl`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Iq4Search {
    /// `quantize_iq4_nl` / `quantize_iq4_xs` (`ggml_quantize_chunk`, llama-quantize; ntry 7): a first guess
    /// at `max / 127`, then 7 scale steps either side, the levels picked again at the best scale.
    Full,
    /// `quantize_row_iq4_nl_ref` (IQ4_NL's `from_float`, what ggml's set_rows/cpy write a KV cache with;
    /// ntry -1): the levels nearest `x · -127 / max` and their least-squares scale, nothing else tried.
    FromFloat,
}

impl Iq4Search {
    /// ggml's `ntry`.
    fn ntry(self) -> i32 {
        match self {
            Iq4Search::Full => 7,
            Iq4Search::FromFloat => -1,
        }
    }
}

/// ggml's `GROUP_MAX_EPS`: blocks whose largest magnitude is below it get a zero scale.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `best_index_int8` over [`IQ4_NL_VALUES`]: the nearest level (ties to the upper one
/// only when strictly nearer), by bisection with the C comparisons.
#[inline(always)]
fn best_index(x: f32) -> u8 {
    let v = |i: usize| f32::from(IQ4_NL_VALUES[i]);
    if x <= v(0) {
        return 0;
    }
    if x >= v(15) {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < v(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - v(mu - 1) < v(mu) - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// The weighted sums `(Σ w·q·x, Σ w·q²)` of a block's values at the levels nearest `id·x`, the levels
/// written to `l` when given.
#[inline(always)]
fn level_sums(xb: &[f32], weight: &[f32; QK], id: f32, mut l: Option<&mut [u8]>) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
    for (j, (&x, &w)) in xb.iter().zip(weight).enumerate() {
        let index = best_index(id * x);
        if let Some(l) = l.as_deref_mut() {
            l[j] = index;
        }
        let q = f32::from(IQ4_NL_VALUES[usize::from(index)]);
        sumqx += w * q * x;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// The search weights of one block: its importance times `sqrt(sigma2 + x²)`, or `x²` without.
#[inline(always)]
pub(super) fn block_weights(xb: &[f32], qw: Option<&[f32]>, sigma2: f32) -> [f32; QK] {
    match qw {
        Some(qw) => std::array::from_fn(|j| qw[j] * (sigma2 + xb[j] * xb[j]).sqrt()),
        None => std::array::from_fn(|j| xb[j] * xb[j]),
    }
}

/// The best scale of one 32-value block (0 for an all-but-zero block, `lb` then untouched): the
/// least-squares scale of the levels of the first guess (written to `lb`), at `max / 127` for
/// [`Iq4Search::Full`] or `max / -127` for [`Iq4Search::FromFloat`], then for `Full` at
/// `(k - 127) / max` for `k` in `-7..=7`, keeping the best fit.
fn block_scale(xb: &[f32], weight: &[f32; QK], search: Iq4Search, lb: &mut [u8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &x in xb {
        if x.abs() > amax {
            amax = x.abs();
            max = x;
        }
    }
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let (v0, ntry) = (f32::from(IQ4_NL_VALUES[0]), search.ntry());
    let guess = if ntry > 0 { -max / v0 } else { max / v0 };
    let (sumqx, sumq2) = level_sums(xb, weight, 1.0 / guess, Some(lb));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -ntry..=ntry {
        let id = (itry + i32::from(IQ4_NL_VALUES[0])) as f32 / max;
        let (sumqx, sumq2) = level_sums(xb, weight, id, None);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// `sigma2` of a super-block: `Σx² · (2 / n)`, summed in order.
fn sigma2(x: &[f32]) -> f32 {
    let mut sum = 0.0f32;
    for &v in x {
        sum += v * v;
    }
    sum * (2.0 / x.len() as f32)
}

/// Packs 32-value blocks of levels as ggml does: the first 16 of each block in the low nibbles.
fn pack_levels(l: &[u8], qs: &mut [u8]) {
    for (lb, qb) in l.chunks_exact(QK).zip(qs.chunks_exact_mut(QK / 2)) {
        for j in 0..QK / 2 {
            qb[j] = lb[j] | (lb[j + QK / 2] << 4);
        }
    }
}

/// Writes the levels nearest `x[j] / d` (all the middle level when `d` is 0).
fn levels(x: &[f32], d: f32, l: &mut [u8]) {
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (lj, &xj) in l.iter_mut().zip(x) {
        *lj = best_index(id * xj);
    }
}

/// Encodes one IQ4_NL block with `search`, weighing it by `qw` when given. [`Iq4Search::Full`] picks the
/// levels again at the scale found; `FromFloat` keeps its first guess's (ggml leaves an all-but-zero
/// block's levels as the previous block's, here the middle level: both decode to zeros).
pub(crate) fn quantize_iq4_nl(x: &[f32; QK], qw: Option<&[f32; QK]>, search: Iq4Search, y: &mut [u8; 18]) {
    let weight = block_weights(x, qw.map(|w| &w[..]), if qw.is_some() { sigma2(x) } else { 0.0 });
    let mut l = [8u8; QK];
    let d = block_scale(x, &weight, search, &mut l);
    store_fp16(&mut y[0..2], d);
    if search == Iq4Search::Full {
        levels(x, d, &mut l);
    }
    pack_levels(&l, &mut y[2..]);
}

/// Encodes one IQ4_XS super-block, weighing the search by `qw` when given.
pub(crate) fn quantize_iq4_xs(x: &[f32; QK_XS], qw: Option<&[f32; QK_XS]>, y: &mut [u8; 136]) {
    let s2 = if qw.is_some() { sigma2(x) } else { 0.0 };
    let mut scales = [0.0f32; QK_XS / QK];
    let mut l = [0u8; QK_XS];
    let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
    for (ib, (xb, scale)) in x.chunks_exact(QK).zip(&mut scales).enumerate() {
        let weight = block_weights(xb, qw.map(|w| &w[ib * QK..(ib + 1) * QK]), s2);
        *scale = block_scale(xb, &weight, Iq4Search::Full, &mut l[ib * QK..(ib + 1) * QK]);
        if scale.abs() > amax_scale {
            amax_scale = scale.abs();
            max_scale = *scale;
        }
    }
    let d = -max_scale / 32.0;
    store_fp16(&mut y[0..2], d);
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let (mut scales_h, mut scales_l) = (0u16, [0u8; 4]);
    for (ib, (xb, lb)) in x.chunks_exact(QK).zip(l.chunks_exact_mut(QK)).enumerate() {
        let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
        levels(xb, d * ls as f32, lb);
        let ls = (ls + 32) as u8;
        scales_l[ib / 2] |= (ls & 0xf) << (4 * (ib % 2));
        scales_h |= u16::from(ls >> 4) << (2 * ib);
    }
    y[2..4].copy_from_slice(&scales_h.to_le_bytes());
    y[4..8].copy_from_slice(&scales_l);
    pack_levels(&l, &mut y[8..]);
}

/// Decodes 32-value blocks of packed levels at scale `d` each into `y`.
fn decode_levels(d: f32, qs: &[u8], y: &mut [f32]) {
    for j in 0..QK / 2 {
        y[j] = d * f32::from(IQ4_NL_VALUES[usize::from(qs[j] & 0xf)]);
        y[j + QK / 2] = d * f32::from(IQ4_NL_VALUES[usize::from(qs[j] >> 4)]);
    }
}

/// The 6-bit scale of block `ib` of an IQ4_XS super-block, minus its bias of 32.
#[inline(always)]
pub fn iq4_xs_block_scale(scales_h: u16, scales_l: &[u8], ib: usize) -> i32 {
    let lo = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
    let hi = ((scales_h >> (2 * ib)) & 3) as u8;
    i32::from(lo | (hi << 4)) - 32
}

/// Decodes one IQ4_NL block.
pub(crate) fn dequantize_iq4_nl(y: &[u8; 18], x: &mut [f32; QK]) {
    decode_levels(load_fp16(&y[0..2]), &y[2..], x);
}

/// Decodes one IQ4_XS super-block.
pub(crate) fn dequantize_iq4_xs(y: &[u8; 136], x: &mut [f32; QK_XS]) {
    let d = fp16_value(u16::from_le_bytes([y[0], y[1]]));
    let scales_h = u16::from_le_bytes([y[2], y[3]]);
    for (ib, (qs, xb)) in y[8..].chunks_exact(QK / 2).zip(x.chunks_exact_mut(QK)).enumerate() {
        decode_levels(d * iq4_xs_block_scale(scales_h, &y[4..8], ib) as f32, qs, xb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_index_is_nearest_level() {
        for i in -1300..1300 {
            let x = i as f32 / 10.0;
            let want = (0..16)
                .min_by(|&a, &b| {
                    let da = (x - f32::from(IQ4_NL_VALUES[a])).abs();
                    let db = (x - f32::from(IQ4_NL_VALUES[b])).abs();
                    da.partial_cmp(&db).unwrap().then(b.cmp(&a))
                })
                .unwrap();
            assert_eq!(usize::from(best_index(x)), want, "{x}");
        }
        assert_eq!(best_index(0.0), 8);
    }

    #[test]
    fn xs_scale_packing_round_trips() {
        let x: [f32; QK_XS] = std::array::from_fn(|i| ((i * 37 % 101) as f32 - 50.0) * (1 + i / 32) as f32);
        let mut y = [0u8; 136];
        quantize_iq4_xs(&x, None, &mut y);
        let mut back = [0.0f32; QK_XS];
        dequantize_iq4_xs(&y, &mut back);
        let err: f32 = x.iter().zip(&back).map(|(a, b)| (a - b) * (a - b)).sum();
        let norm: f32 = x.iter().map(|a| a * a).sum();
        assert!(err / norm < 0.01, "{}", err / norm);
        // The largest block carries the scale -32 (the super-block scale is -max/32).
        let scales_h = u16::from_le_bytes([y[2], y[3]]);
        assert!((0..8).any(|ib| iq4_xs_block_scale(scales_h, &y[4..8], ib) == -32));
    }

    #[test]
    fn zero_block_decodes_to_zero() {
        let mut y = [0xffu8; 18];
        for search in [Iq4Search::Full, Iq4Search::FromFloat] {
            quantize_iq4_nl(&[0.0; QK], None, search, &mut y);
            assert_eq!(&y[..2], &[0, 0]);
            assert!(y[2..].iter().all(|&b| b == 0x88));
        }
    }
}
