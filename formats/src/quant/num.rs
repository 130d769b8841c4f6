//! Scalar helpers that reproduce the C float semantics of ggml's reference quantizers.
//!
//! Everything here is plain IEEE f32 arithmetic (never `mul_add`), so results are bit-for-bit
//! those of `ggml-quants.c` compiled without fused multiply-add.

use half::f16;

/// ggml's `nearest_int`: round half to even through the `f + 1.5 * 2^23` trick.
///
/// Exactly `f.round_ties_even() as i32` for `|f| <= 4194303` (where ggml asserts); outside that
/// range it returns the same bit-pattern garbage as the C code, so output stays byte-identical
/// even on pathological data.
#[inline(always)]
pub(crate) fn nearest_int(f: f32) -> i32 {
    let bits = (f + 12_582_912.0f32).to_bits();
    (bits & 0x007f_ffff) as i32 - 0x0040_0000
}

/// C's float-to-integer conversion as x86-64 performs it (`cvttss2si`): truncation toward zero,
/// and `i32::MIN` for NaN or values out of range. Narrower C casts (`(int8_t)`, `(uint8_t)`) keep
/// the low byte of this result, i.e. `trunc_to_int(f) as i8` / `as u8`.
#[inline(always)]
pub(crate) fn trunc_to_int(f: f32) -> i32 {
    if (-2_147_483_648.0f32..2_147_483_648.0f32).contains(&f) {
        f as i32
    } else {
        i32::MIN
    }
}

/// C's `MAX(a, b)` macro (`a > b ? a : b`), including its NaN behaviour.
#[inline(always)]
pub(crate) fn c_max(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// `GGML_FP32_TO_FP16`: IEEE round-to-nearest-even, as raw bits.
#[inline(always)]
pub(crate) fn fp16_bits(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// `GGML_FP16_TO_FP32` of raw bits (exact).
#[inline(always)]
pub(crate) fn fp16_value(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// Writes `GGML_FP32_TO_FP16(x)` little-endian into `dst[0..2]` and returns the value re-read
/// as f32, which is what the C code uses from then on.
#[inline(always)]
pub(crate) fn store_fp16(dst: &mut [u8], x: f32) -> f32 {
    let bits = fp16_bits(x);
    dst[..2].copy_from_slice(&bits.to_le_bytes());
    fp16_value(bits)
}

/// Reads a little-endian fp16 from `src[0..2]` as f32.
#[inline(always)]
pub(crate) fn load_fp16(src: &[u8]) -> f32 {
    fp16_value(u16::from_le_bytes([src[0], src[1]]))
}

/// `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` packed in a Q4_K/Q5_K
/// `scales[12]` array.
#[inline(always)]
pub(crate) fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Views a slice of exactly `N` elements as an array reference.
#[inline(always)]
pub(crate) fn arr<T, const N: usize>(s: &[T]) -> &[T; N] {
    s.try_into().expect("slice length equals the block size")
}

/// Views a mutable slice of exactly `N` elements as an array reference.
#[inline(always)]
pub(crate) fn arr_mut<T, const N: usize>(s: &mut [T]) -> &mut [T; N] {
    s.try_into().expect("slice length equals the block size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_is_round_half_even_in_range() {
        let cases = [
            0.0f32, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1.4999999, 7.5, 8.5, -31.5, 63.49, 4194303.0,
            -4194303.0, 1e-30, -1e-30, 3.7, -3.7,
        ];
        for f in cases {
            assert_eq!(nearest_int(f), f.round_ties_even() as i32, "{f}");
        }
        let mut state = 0x1234_5678u32;
        for _ in 0..100_000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let f = (state as f32 / u32::MAX as f32 - 0.5) * 200.0;
            assert_eq!(nearest_int(f), f.round_ties_even() as i32, "{f}");
        }
        assert_eq!(nearest_int(f32::NAN), 0);
    }

    #[test]
    fn trunc_matches_x86_conversion() {
        assert_eq!(trunc_to_int(8.99), 8);
        assert_eq!(trunc_to_int(-0.99), 0);
        assert_eq!(trunc_to_int(-1.5), -1);
        assert_eq!(trunc_to_int(f32::NAN), i32::MIN);
        assert_eq!(trunc_to_int(3e9), i32::MIN);
        assert_eq!(trunc_to_int(-2_147_483_648.0), i32::MIN);
        assert_eq!(trunc_to_int(f32::NEG_INFINITY), i32::MIN);
    }

    #[test]
    fn fp16_round_trip() {
        let mut b = [0u8; 2];
        assert_eq!(store_fp16(&mut b, 1.0 / 3.0), 0.333_251_95);
        assert_eq!(b, [0x55, 0x35]);
        assert_eq!(load_fp16(&b), 0.333_251_95);
        // Ties go to even: 2049 is halfway between 2048 and 2050.
        assert_eq!(fp16_value(fp16_bits(2049.0)), 2048.0);
        assert_eq!(fp16_value(fp16_bits(2051.0)), 2052.0);
    }

    #[test]
    fn scale_min_unpacking() {
        // ls = 0..8 with high bits, lm = 63-j; pack as the encoders do and unpack again.
        let mut q = [0u8; 12];
        let ls: [u8; 8] = [1, 20, 33, 63, 17, 48, 5, 62];
        let lm: [u8; 8] = [63, 0, 31, 32, 16, 47, 60, 9];
        for j in 0..8 {
            if j < 4 {
                q[j] = ls[j];
                q[j + 4] = lm[j];
            } else {
                q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
                q[j - 4] |= (ls[j] >> 4) << 6;
                q[j] |= (lm[j] >> 4) << 6;
            }
        }
        for j in 0..8 {
            assert_eq!(get_scale_min_k4(j, &q), (ls[j], lm[j]));
        }
    }
}
