//! Double quantization of the absmax values (`compress_statistics=True`): the absmax minus their
//! mean, quantized to 8 bits with the signed dynamic map in blocks of 256, as bitsandbytes' native
//! CPU kernel does it (a 65536-entry lookup table rather than exact nearest rounding).

use std::sync::OnceLock;

/// Values per block of the nested (8-bit) quantization.
pub const NESTED_BLOCKSIZE: usize = 256;

/// `create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)` as bitsandbytes 0.50.2
/// builds it (f32 bits, dumped from bitsandbytes; SHA-256 of the little-endian bytes is
/// e732639a65f497b4ad684bb166a4467708255edd5207757de8b8f0c7e1fda89c).
const DYNAMIC_MAP_BITS: [u32; 256] = [
    0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666, 0xbf6fcccd, 0xbf6c3333, 0xbf68999a, 0xbf650000, 0xbf616666,
    0xbf5dcccd, 0xbf5a3333, 0xbf56999a, 0xbf530000, 0xbf4f6666, 0xbf4bcccd, 0xbf483333, 0xbf44999a, 0xbf410000,
    0xbf3d6666, 0xbf39cccd, 0xbf363334, 0xbf32999a, 0xbf2f0000, 0xbf2b6666, 0xbf27cccd, 0xbf243334, 0xbf20999a,
    0xbf1d0000, 0xbf196666, 0xbf15cccd, 0xbf123334, 0xbf0e999a, 0xbf0b0000, 0xbf076666, 0xbf03cccc, 0xbf003333,
    0xbef93332, 0xbef20000, 0xbeeacccc, 0xbee3999a, 0xbedc6666, 0xbed53333, 0xbece0000, 0xbec6cccc, 0xbebf999a,
    0xbeb86666, 0xbeb13333, 0xbeaa0000, 0xbea2cccc, 0xbe9b999a, 0xbe946666, 0xbe8d3334, 0xbe860000, 0xbe7d9999,
    0xbe6f3333, 0xbe60cccd, 0xbe526666, 0xbe440000, 0xbe35999a, 0xbe273333, 0xbe18cccd, 0xbe0a6666, 0xbdf80000,
    0xbddb3334, 0xbdc9eb85, 0xbdc428f7, 0xbdbe6667, 0xbdb8a3d7, 0xbdb2e148, 0xbdad1eb8, 0xbda75c2a, 0xbda1999a,
    0xbd9bd70a, 0xbd96147b, 0xbd9051eb, 0xbd8a8f5d, 0xbd84cccd, 0xbd7e147b, 0xbd728f5d, 0xbd670a3d, 0xbd5b851f,
    0xbd500000, 0xbd447ae1, 0xbd38f5c3, 0xbd2d70a3, 0xbd21eb85, 0xbd166667, 0xbd0ae148, 0xbcfeb852, 0xbce7ae15,
    0xbcd0a3d7, 0xbcb9999a, 0xbca28f5d, 0xbc8b851f, 0xbc68f5c3, 0xbc3ae148, 0xbc1f3b64, 0xbc160418, 0xbc0ccccd,
    0xbc039581, 0xbbf4bc6a, 0xbbe24dd3, 0xbbcfdf3b, 0xbbbd70a4, 0xbbab020d, 0xbb989374, 0xbb8624dd, 0xbb676c8a,
    0xbb428f5c, 0xbb1db22d, 0xbaf1a9fc, 0xbaa7ef9d, 0xba7765ff, 0xba59e83e, 0xba3c6a80, 0xba1eecc1, 0xba016f01,
    0xb9c7e283, 0xb98ce705, 0xb923d70b, 0xb8ba1f4b, 0xb88aefb3, 0xb8378034, 0xb7b24206, 0xb70205ff, 0xb65a1a94,
    0xb513a3b7, 0x00000000, 0x3513a3b7, 0x365a1a94, 0x370205ff, 0x37b24206, 0x38378034, 0x388aefb3, 0x38ba1f4b,
    0x3923d70b, 0x398ce705, 0x39c7e283, 0x3a016f01, 0x3a1eecc1, 0x3a3c6a80, 0x3a59e83e, 0x3a7765ff, 0x3aa7ef9d,
    0x3af1a9fc, 0x3b1db22d, 0x3b428f5c, 0x3b676c8a, 0x3b8624dd, 0x3b989374, 0x3bab020d, 0x3bbd70a4, 0x3bcfdf3b,
    0x3be24dd3, 0x3bf4bc6a, 0x3c039581, 0x3c0ccccd, 0x3c160418, 0x3c1f3b64, 0x3c3ae148, 0x3c68f5c3, 0x3c8b851f,
    0x3ca28f5d, 0x3cb9999a, 0x3cd0a3d7, 0x3ce7ae15, 0x3cfeb852, 0x3d0ae148, 0x3d166667, 0x3d21eb85, 0x3d2d70a3,
    0x3d38f5c3, 0x3d447ae1, 0x3d500000, 0x3d5b851f, 0x3d670a3d, 0x3d728f5d, 0x3d7e147b, 0x3d84cccd, 0x3d8a8f5d,
    0x3d9051eb, 0x3d96147b, 0x3d9bd70a, 0x3da1999a, 0x3da75c2a, 0x3dad1eb8, 0x3db2e148, 0x3db8a3d7, 0x3dbe6667,
    0x3dc428f7, 0x3dc9eb85, 0x3ddb3334, 0x3df80000, 0x3e0a6666, 0x3e18cccd, 0x3e273333, 0x3e35999a, 0x3e440000,
    0x3e526666, 0x3e60cccd, 0x3e6f3333, 0x3e7d9999, 0x3e860000, 0x3e8d3334, 0x3e946666, 0x3e9b999a, 0x3ea2cccc,
    0x3eaa0000, 0x3eb13333, 0x3eb86666, 0x3ebf999a, 0x3ec6cccc, 0x3ece0000, 0x3ed53333, 0x3edc6666, 0x3ee3999a,
    0x3eeacccc, 0x3ef20000, 0x3ef93332, 0x3f003333, 0x3f03cccc, 0x3f076666, 0x3f0b0000, 0x3f0e999a, 0x3f123334,
    0x3f15cccd, 0x3f196666, 0x3f1d0000, 0x3f20999a, 0x3f243334, 0x3f27cccd, 0x3f2b6666, 0x3f2f0000, 0x3f32999a,
    0x3f363334, 0x3f39cccd, 0x3f3d6666, 0x3f410000, 0x3f44999a, 0x3f483333, 0x3f4bcccd, 0x3f4f6666, 0x3f530000,
    0x3f56999a, 0x3f5a3333, 0x3f5dcccd, 0x3f616666, 0x3f650000, 0x3f68999a, 0x3f6c3333, 0x3f6fcccd, 0x3f736666,
    0x3f770000, 0x3f7a999a, 0x3f7e3333, 0x3f800000,
];

/// The signed 8-bit dynamic map bitsandbytes uses for nested absmax codes (sorted, [-0.99296875, 1]).
pub fn dynamic_map() -> [f32; 256] {
    DYNAMIC_MAP_BITS.map(f32::from_bits)
}

/// Double-quantized absmax values: 8-bit codes, one f32 scale per 256 codes, and the offset.
#[derive(Clone, Debug, PartialEq)]
pub struct NestedAbsmax {
    /// One 8-bit code per 4-bit block (`P.weight.absmax`, uint8).
    pub codes: Vec<u8>,
    /// The absolute maximum of each block of `nested_blocksize` centred absmax values (`P.weight.nested_absmax`).
    pub nested_absmax: Vec<f32>,
    /// The mean subtracted before quantizing (`nested_offset` in the quant_state JSON).
    pub offset: f32,
    /// Codes per nested block (256).
    pub nested_blocksize: usize,
    /// The 256-entry code book (`P.weight.nested_quant_map`).
    pub nested_map: Vec<f32>,
}

/// Entries of the native kernel's lookup table from [-1, 1] to the nearest code.
const LUT_SIZE: usize = 65536;

/// bitsandbytes' `build_quantize_lut` for the dynamic map: entry `i` is the number of midpoints
/// below `-1 + 2i/65535` (so ties go to the lower code, as in bucketize).
fn lut() -> &'static [u8] {
    static LUT: OnceLock<Vec<u8>> = OnceLock::new();
    LUT.get_or_init(|| {
        let map = dynamic_map();
        let mids: Vec<f32> = map.windows(2).map(|w| 0.5 * (w[0] + w[1])).collect();
        let mut idx = 0usize;
        (0..LUT_SIZE)
            .map(|i| {
                let val = -1.0f32 + (2.0 * i as f32) / (LUT_SIZE - 1) as f32;
                while idx < mids.len() && mids[idx] < val {
                    idx += 1;
                }
                idx as u8
            })
            .collect()
    })
}

/// The lookup-table index of a scaled value: `(uint16)((clamp(v) + 1) * 0.5 * 65535 + 0.5)`, where
/// the compiled kernel fuses the last multiply-add (`vfmadd213ss` in libbitsandbytes_cpu.so).
fn lut_index(v: f32) -> usize {
    let t = (v.clamp(-1.0, 1.0) + 1.0) * 0.5;
    t.mul_add((LUT_SIZE - 1) as f32, 0.5) as u16 as usize
}

/// torch's float32 `Tensor.mean()` on CPU: a float32 cascade sum (`SumKernel.cpp`, 8-lane AVX2
/// vectors, four interleaved accumulators, four levels) divided by the count. Reproduces torch
/// single-threaded on AVX2 machines; torch splits tensors of more than 32768 values across threads.
pub fn torch_mean_f32(x: &[f32]) -> f32 {
    if x.is_empty() {
        return f32::NAN;
    }
    torch_sum_f32(x) / x.len() as f32
}

/// Lanes of torch's `Vectorized<float>` with AVX2.
const LANES: usize = 8;

/// torch's cascade sum of a contiguous float32 vector.
fn torch_sum_f32(x: &[f32]) -> f32 {
    let n = x.len();
    if n < LANES {
        return row_sum::<1>(&x.iter().map(|&v| [v]).collect::<Vec<_>>())[0];
    }
    let vecs: Vec<[f32; LANES]> = x.chunks_exact(LANES).map(|c| std::array::from_fn(|l| c[l])).collect();
    let acc = row_sum::<LANES>(&vecs);
    let mut total = 0.0f32;
    for &v in &x[vecs.len() * LANES..] {
        total += v;
    }
    for lane in acc {
        total += lane;
    }
    total
}

/// Lane-wise add.
fn add<const L: usize>(a: &mut [f32; L], b: &[f32; L]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// torch's `row_sum`: four interleaved partial sums (`multi_row_sum`), the leftovers into the
/// first, then the four combined in order.
fn row_sum<const L: usize>(items: &[[f32; L]]) -> [f32; L] {
    const ILP: usize = 4;
    let rows = items.len() / ILP;
    let mut partial = multi_row_sum::<L>(&items[..rows * ILP], rows);
    for item in &items[rows * ILP..] {
        add(&mut partial[0], item);
    }
    let [mut first, rest @ ..] = partial;
    for p in &rest {
        add(&mut first, p);
    }
    first
}

/// torch's `multi_row_sum` with 4 rows and 4 levels: `items` is `rows` groups of 4; each level
/// is flushed into the next every `2^level_power` groups.
fn multi_row_sum<const L: usize>(items: &[[f32; L]], rows: usize) -> [[f32; L]; 4] {
    const LEVELS: usize = 4;
    let ceil_log2 = if rows <= 2 { 1 } else { usize::BITS - (rows - 1).leading_zeros() } as usize;
    let level_power = (ceil_log2 / LEVELS).max(4);
    let level_step = 1usize << level_power;
    let level_mask = level_step - 1;
    let mut acc = [[[0.0f32; L]; 4]; LEVELS];
    let group = |i: usize| &items[i * 4..i * 4 + 4];
    let mut i = 0;
    while i + level_step <= rows {
        for _ in 0..level_step {
            for (a, item) in acc[0].iter_mut().zip(group(i)) {
                add(a, item);
            }
            i += 1;
        }
        for j in 1..LEVELS {
            let (lower, upper) = acc.split_at_mut(j);
            for (hi, lo) in upper[0].iter_mut().zip(lower[j - 1].iter_mut()) {
                add(hi, lo);
                *lo = [0.0; L];
            }
            if i & (level_mask << (j * level_power)) != 0 {
                break;
            }
        }
    }
    while i < rows {
        for (a, item) in acc[0].iter_mut().zip(group(i)) {
            add(a, item);
        }
        i += 1;
    }
    let [mut first, rest @ ..] = acc;
    for level in &rest {
        for (a, b) in first.iter_mut().zip(level) {
            add(a, b);
        }
    }
    first
}

/// Double-quantizes absmax values as bitsandbytes does: offset = torch's f32 mean, then
/// [`compress_absmax_with_offset`].
pub fn compress_absmax(absmax: &[f32]) -> NestedAbsmax {
    compress_absmax_with_offset(absmax, torch_mean_f32(absmax))
}

/// Double-quantizes absmax values around a given offset: `a = absmax - offset` (f32), per block of
/// 256 the absolute maximum, and each `a * (1 / max)` coded through the native lookup table.
pub fn compress_absmax_with_offset(absmax: &[f32], offset: f32) -> NestedAbsmax {
    let lut = lut();
    let mut codes = vec![0u8; absmax.len()];
    let mut nested_absmax = Vec::with_capacity(absmax.len().div_ceil(NESTED_BLOCKSIZE));
    for (src, dst) in absmax.chunks(NESTED_BLOCKSIZE).zip(codes.chunks_mut(NESTED_BLOCKSIZE)) {
        let centred: Vec<f32> = src.iter().map(|&a| a - offset).collect();
        let amax = centred.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        nested_absmax.push(amax);
        if amax == 0.0 {
            continue; // the kernel writes code 0 for an all-zero block
        }
        let inv = 1.0 / amax;
        for (d, &v) in dst.iter_mut().zip(&centred) {
            *d = lut[lut_index(v * inv)];
        }
    }
    NestedAbsmax {
        codes,
        nested_absmax,
        offset,
        nested_blocksize: NESTED_BLOCKSIZE,
        nested_map: dynamic_map().to_vec(),
    }
}

/// Decodes double-quantized absmax values: `map[code] * nested_absmax[i / nested_blocksize] + offset`,
/// rounded after the product and after the sum (as bitsandbytes' two torch operations).
/// Codes past the map or blocks past `nested_absmax` decode as NaN.
pub fn decompress_absmax(n: &NestedAbsmax) -> Vec<f32> {
    let bs = n.nested_blocksize.max(1);
    n.codes
        .iter()
        .enumerate()
        .map(|(i, &q)| match (n.nested_map.get(q as usize), n.nested_absmax.get(i / bs)) {
            (Some(&m), Some(&s)) => m * s + n.offset,
            _ => f32::NAN,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_map_is_sorted_and_bounded() {
        let m = dynamic_map();
        assert!(m.windows(2).all(|w| w[0] < w[1]));
        assert_eq!((m[0], m[255]), (-0.992_968_75, 1.0));
        assert!(m.contains(&0.0));
    }

    #[test]
    fn lut_rounds_to_nearest_mostly() {
        let m = dynamic_map();
        // Exact code values map to themselves.
        for (i, &v) in m.iter().enumerate().step_by(17) {
            let q = lut()[lut_index(v)] as usize;
            assert!(q.abs_diff(i) <= 1, "{i} -> {q}");
        }
        assert_eq!(lut()[lut_index(1.0)], 255);
        assert_eq!(lut()[lut_index(-1.0)], 0);
    }

    #[test]
    fn torch_sum_small_and_large() {
        assert_eq!(torch_mean_f32(&[1.0, 2.0, 3.0]), 2.0);
        let x: Vec<f32> = (0..10_000).map(|i| (i % 7) as f32).collect();
        let exact: f64 = x.iter().map(|&v| v as f64).sum();
        assert_eq!(torch_sum_f32(&x) as f64, exact);
        assert!(torch_mean_f32(&[]).is_nan());
    }

    #[test]
    fn compress_round_trip() {
        let absmax: Vec<f32> = (0..700).map(|i| 0.01 + ((i * 37) % 101) as f32 * 1e-3).collect();
        let n = compress_absmax(&absmax);
        assert_eq!((n.codes.len(), n.nested_absmax.len()), (700, 3));
        let back = decompress_absmax(&n);
        for (a, b) in absmax.iter().zip(&back) {
            assert!((a - b).abs() < 2e-3, "{a} {b}");
        }
        // A constant set centres to zero: all codes 0, decoded as the offset.
        let n = compress_absmax(&[0.5; 10]);
        assert_eq!(n.codes, vec![0; 10]);
        assert_eq!(decompress_absmax(&n), vec![0.5; 10]);
    }
}
