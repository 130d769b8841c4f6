//! The plain float encodings F32, F16 and BF16 (little-endian element by element).

use half::f16;

/// ggml's `GGML_FP32_TO_BF16`: round to nearest even on the bits; NaN becomes the quiet NaN
/// `(bits >> 16) | 64`.
#[inline(always)]
pub fn fp32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// ggml's `GGML_BF16_TO_FP32` (exact).
#[inline(always)]
pub fn bf16_to_fp32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Encodes f32 values as little-endian f32 bytes.
pub(crate) fn encode_f32(src: &[f32], dst: &mut [u8]) {
    for (d, &v) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

/// Decodes little-endian f32 bytes.
pub(crate) fn decode_f32(src: &[u8], dst: &mut [f32]) {
    for (v, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *v = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

/// Encodes f32 values as little-endian IEEE fp16 (round to nearest even).
pub(crate) fn encode_f16(src: &[f32], dst: &mut [u8]) {
    for (d, &v) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&f16::from_f32(v).to_le_bytes());
    }
}

/// Decodes little-endian IEEE fp16.
pub(crate) fn decode_f16(src: &[u8], dst: &mut [f32]) {
    for (v, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *v = f16::from_le_bytes([s[0], s[1]]).to_f32();
    }
}

/// Encodes f32 values as little-endian bfloat16 the way ggml does.
pub(crate) fn encode_bf16(src: &[f32], dst: &mut [u8]) {
    for (d, &v) in dst.chunks_exact_mut(2).zip(src) {
        d.copy_from_slice(&fp32_to_bf16(v).to_le_bytes());
    }
}

/// Decodes little-endian bfloat16.
pub(crate) fn decode_bf16(src: &[u8], dst: &mut [f32]) {
    for (v, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *v = bf16_to_fp32(u16::from_le_bytes([s[0], s[1]]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_and_nan() {
        assert_eq!(fp32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down).
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        // 1 + 3*2^-8: halfway, odd below -> rounds up.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(fp32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(fp32_to_bf16(f32::NEG_INFINITY), 0xff80);
        // Largest finite float rounds to infinity, as in ggml.
        assert_eq!(fp32_to_bf16(f32::MAX), 0x7f80);
        // Signalling NaN is made quiet; payload bits above 16 kept.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(fp32_to_bf16(f32::from_bits(0xffa0_0000)), 0xffe0);
        assert_eq!(bf16_to_fp32(0xc040), -3.0);
    }

    #[test]
    fn float_round_trips() {
        let x = [0.0f32, -0.0, 1.5, -2.25e-3, 65504.0, 1e-8, f32::INFINITY];
        let mut b4 = [0u8; 28];
        encode_f32(&x, &mut b4);
        let mut back = [0f32; 7];
        decode_f32(&b4, &mut back);
        assert_eq!(back.map(f32::to_bits), x.map(f32::to_bits));
        let mut b2 = [0u8; 14];
        encode_f16(&x, &mut b2);
        decode_f16(&b2, &mut back);
        assert_eq!(back[2], 1.5);
        assert_eq!(back[4], 65504.0);
        assert_eq!(back[6], f32::INFINITY);
        encode_bf16(&x, &mut b2);
        decode_bf16(&b2, &mut back);
        assert_eq!(back[2], 1.5);
        assert_eq!(back[1].to_bits(), (-0.0f32).to_bits());
    }
}
