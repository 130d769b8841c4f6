//! Round-to-nearest per group of input channels, and AutoAWQ's GEMM packing:
//! `qweight [in, out/8]`, `qzeros [in/group, out/8]` (int32, eight 4-bit values per word in
//! [`AWQ_ORDER`]) and `scales [in/group, out]` (f16), so that
//! `W[o, i] = (q[i, o] - z[i / group, o]) * scales[i / group, o]`.

use half::f16;

/// Nibble `k` of a packed word holds output channel `8c + AWQ_ORDER[k]`.
pub const AWQ_ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];

/// The group sizes `tgi quantize --format awq` writes (AutoAWQ's common choices).
pub const VALID_GROUP_SIZES: [usize; 3] = [32, 64, 128];

/// Errors building or reading AWQ weights.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AwqError {
    /// The input features do not divide into groups.
    #[error("{in_features} input features do not divide into groups of {group_size}")]
    GroupSize {
        /// Input features of the layer.
        in_features: usize,
        /// The group size asked for.
        group_size: usize,
    },
    /// The output features are not a multiple of 8 (one packed word holds 8 channels).
    #[error("{0} output features are not a multiple of 8")]
    OutFeatures(usize),
    /// Stored arrays disagree with the shape.
    #[error("{name} holds {found} values, expected {expected}")]
    Length {
        /// Which array.
        name: &'static str,
        /// Values implied by the shape.
        expected: usize,
        /// Values present.
        found: usize,
    },
    /// Something in config.json's `quantization_config` that tgi cannot read.
    #[error("quantization_config: {0}")]
    Config(String),
}

/// One group's quantization: `w ≈ (q - zero) * scale` with `q` in 0..=15.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupParams {
    /// The scale, as stored (f16).
    pub scale: f16,
    /// The zero point (8 for symmetric quantization).
    pub zero: u8,
}

impl GroupParams {
    /// The 4-bit code of `w`.
    pub fn code(&self, w: f32) -> u8 {
        code_f32(w, self.scale.to_f32(), f32::from(self.zero)) as u8
    }

    /// The value code `q` stands for.
    pub fn value(&self, q: u8) -> f32 {
        (f32::from(q) - f32::from(self.zero)) * self.scale.to_f32()
    }
}

/// AutoAWQ's `pseudo_quantize_tensor` parameters for one group: with a zero point,
/// `scale = max(max - min, 1e-5) / 15` and `zero = clamp(-round(min / scale), 0, 15)`; without,
/// `scale = max|w| / 7` and codes -8..=7 stored offset by 8. The scale is rounded to f16 first and
/// the zero derived from the stored scale, so packing and dequantizing agree exactly.
pub fn group_params(w: &[f32], zero_point: bool) -> GroupParams {
    if zero_point {
        let (lo, hi) = w.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)));
        let scale = f16::from_f32((hi - lo).max(1e-5) / 15.0);
        let zero = (-(lo / scale.to_f32()).round_ties_even()).clamp(0.0, 15.0) as u8;
        GroupParams { scale, zero }
    } else {
        let amax = w.iter().fold(0f32, |m, &x| m.max(x.abs()));
        GroupParams { scale: f16::from_f32(amax.max(1e-5) / 7.0), zero: 8 }
    }
}

/// Replaces one group's weights by their quantized values (what the scale and clip searches measure).
pub fn fake_quantize_group(w: &mut [f32], zero_point: bool) {
    let p = group_params(w, zero_point);
    let (s, z) = (p.scale.to_f32(), f32::from(p.zero));
    for x in w.iter_mut() {
        *x = (code_f32(*x, s, z) - z) * s;
    }
}

/// The code of `w` as an f32 in 0..=15: `round_ties_even(w / s) + z`, clamped (NaN gives 0, as `as u8` does).
/// The rounding adds and subtracts 1.5 * 2^23, exact ties-to-even for |v| < 2^22 and inlined where
/// `round_ties_even` is a libm call; larger values clamp to the same end either way.
#[inline]
#[allow(clippy::manual_clamp)] // clamp would keep a NaN
fn code_f32(w: f32, s: f32, z: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    let v = w / s;
    let r = if v.abs() < 4_194_304.0 { (v + MAGIC) - MAGIC } else { v };
    (r + z).max(0.0).min(15.0)
}

/// One linear layer's AWQ tensors, in the GEMM layout.
#[derive(Clone, Debug, PartialEq)]
pub struct AwqTensor {
    /// Input features (rows of `qweight`).
    pub in_features: usize,
    /// Output features.
    pub out_features: usize,
    /// Input channels per group.
    pub group_size: usize,
    /// `[in, out/8]` packed codes.
    pub qweight: Vec<i32>,
    /// `[in/group, out/8]` packed zero points.
    pub qzeros: Vec<i32>,
    /// `[in/group, out]` scales.
    pub scales: Vec<f16>,
}

/// Packs 8 consecutive output channels' 4-bit values into one word in AWQ order.
fn pack8(v: &[u8]) -> i32 {
    AWQ_ORDER.iter().enumerate().fold(0u32, |w, (k, &j)| w | (u32::from(v[j]) << (4 * k))) as i32
}

/// The 4-bit value of output channel `8c + j` in a packed word.
fn unpack(word: i32, j: usize) -> u8 {
    let k = AWQ_ORDER.iter().position(|&o| o == j).expect("j < 8");
    ((word as u32 >> (4 * k)) & 0xF) as u8
}

/// Checks that `[out, in]` can be stored with groups of `group_size`.
fn check_shape(out_features: usize, in_features: usize, group_size: usize) -> Result<(), AwqError> {
    if group_size == 0 || !in_features.is_multiple_of(group_size) {
        return Err(AwqError::GroupSize { in_features, group_size });
    }
    if !out_features.is_multiple_of(8) {
        return Err(AwqError::OutFeatures(out_features));
    }
    Ok(())
}

impl AwqTensor {
    /// Quantizes a weight `[out, in]` (row-major, as `nn.Linear` stores it) by round-to-nearest per
    /// group of `group_size` input channels.
    pub fn quantize(
        weight: &[f32],
        out_features: usize,
        in_features: usize,
        group_size: usize,
        zero_point: bool,
    ) -> Result<AwqTensor, AwqError> {
        check_shape(out_features, in_features, group_size)?;
        if weight.len() != out_features * in_features {
            return Err(AwqError::Length { name: "weight", expected: out_features * in_features, found: weight.len() });
        }
        let groups = in_features / group_size;
        let mut codes = vec![0u8; in_features * out_features]; // [in, out]
        let mut zeros = vec![0u8; groups * out_features]; // [groups, out]
        let mut scales = vec![f16::ZERO; groups * out_features];
        for (o, row) in weight.chunks_exact(in_features).enumerate() {
            for (g, w) in row.chunks_exact(group_size).enumerate() {
                let p = group_params(w, zero_point);
                zeros[g * out_features + o] = p.zero;
                scales[g * out_features + o] = p.scale;
                for (k, &x) in w.iter().enumerate() {
                    codes[(g * group_size + k) * out_features + o] = p.code(x);
                }
            }
        }
        Ok(AwqTensor {
            in_features,
            out_features,
            group_size,
            qweight: codes.chunks_exact(8).map(pack8).collect(),
            qzeros: zeros.chunks_exact(8).map(pack8).collect(),
            scales,
        })
    }

    /// Stored tensors of a layer, checked against its shape.
    pub fn from_parts(
        in_features: usize,
        out_features: usize,
        group_size: usize,
        qweight: Vec<i32>,
        qzeros: Vec<i32>,
        scales: Vec<f16>,
    ) -> Result<AwqTensor, AwqError> {
        check_shape(out_features, in_features, group_size)?;
        let groups = in_features / group_size;
        for (name, expected, found) in [
            ("qweight", in_features * out_features / 8, qweight.len()),
            ("qzeros", groups * out_features / 8, qzeros.len()),
            ("scales", groups * out_features, scales.len()),
        ] {
            if expected != found {
                return Err(AwqError::Length { name, expected, found });
            }
        }
        Ok(AwqTensor { in_features, out_features, group_size, qweight, qzeros, scales })
    }

    /// The 4-bit code of weight `[o, i]`.
    pub fn code(&self, o: usize, i: usize) -> u8 {
        unpack(self.qweight[(i * self.out_features + o) / 8], o % 8)
    }

    /// The zero point of output channel `o` in group `g`.
    pub fn zero(&self, g: usize, o: usize) -> u8 {
        unpack(self.qzeros[(g * self.out_features + o) / 8], o % 8)
    }

    /// The scale of output channel `o` in group `g`.
    pub fn scale(&self, g: usize, o: usize) -> f16 {
        self.scales[g * self.out_features + o]
    }

    /// The weight `[out, in]` the tensors stand for, as `dequantize_gemm` computes it.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0f32; self.out_features * self.in_features];
        for (o, row) in w.chunks_exact_mut(self.in_features).enumerate() {
            for (i, x) in row.iter_mut().enumerate() {
                let g = i / self.group_size;
                let p = GroupParams { scale: self.scale(g, o), zero: self.zero(g, o) };
                *x = p.value(self.code(o, i));
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(out: usize, inp: usize) -> Vec<f32> {
        (0..out * inp).map(|k| ((k * 7919 % 1000) as f32 / 500.0 - 1.0) * (1.0 + (k % 13) as f32 / 4.0)).collect()
    }

    #[test]
    fn the_inlined_rounding_is_round_ties_even() {
        let reference = |w: f32, s: f32, z: f32| ((w / s).round_ties_even() + z).clamp(0.0, 15.0) as u8;
        let mut values: Vec<f32> = (-4000..4000).map(|i| i as f32 * 0.25).collect();
        values.extend([0.5, 1.5, 2.5, -0.5, -2.5, 4_194_303.5, 4_194_304.5, 1e30, -1e30]);
        values.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, -0.0]);
        for &w in &values {
            for (s, z) in [(1.0, 8.0), (0.37, 0.0), (3.0, 15.0), (1e-5, 3.0)] {
                assert_eq!(code_f32(w, s, z) as u8, reference(w, s, z), "w {w} s {s} z {z}");
            }
        }
    }

    #[test]
    fn packs_in_awq_order() {
        // Channel j holds value j: nibble k holds AWQ_ORDER[k].
        let v: Vec<u8> = (0..8).collect();
        assert_eq!(pack8(&v) as u32, 0x7531_6420);
        for j in 0..8 {
            assert_eq!(unpack(pack8(&v), j), j as u8);
        }
    }

    #[test]
    fn dequantize_matches_fake_quantize() {
        for zp in [true, false] {
            let (out, inp, g) = (16, 64, 32);
            let w = weights(out, inp);
            let t = AwqTensor::quantize(&w, out, inp, g, zp).unwrap();
            let mut fake = w.clone();
            fake.chunks_exact_mut(g).for_each(|c| fake_quantize_group(c, zp));
            assert_eq!(t.dequantize(), fake);
            let back = AwqTensor::from_parts(inp, out, g, t.qweight.clone(), t.qzeros.clone(), t.scales.clone());
            assert_eq!(back.unwrap(), t);
            // Within half a step of the source.
            for (o, row) in w.chunks_exact(inp).enumerate() {
                for (i, &x) in row.iter().enumerate() {
                    let s = t.scale(i / g, o).to_f32();
                    assert!((t.dequantize()[o * inp + i] - x).abs() <= 0.5 * s * 1.01 + 1e-6, "zp {zp} [{o},{i}]");
                }
            }
        }
    }

    #[test]
    fn group_params_follow_autoawq() {
        let w = [-1.0f32, 0.5, 2.0, 0.0];
        let p = group_params(&w, true);
        assert_eq!(p.scale, f16::from_f32(0.2));
        assert_eq!(p.zero, 5);
        assert_eq!(p.code(-1.0), 0);
        assert_eq!(p.code(2.0), 15);
        let s = group_params(&w, false);
        assert_eq!((s.scale, s.zero), (f16::from_f32(2.0 / 7.0), 8));
        assert_eq!(s.code(-1.0), 8 - 4);
        // A constant group has a tiny positive scale, not zero.
        assert!(group_params(&[0.0; 4], true).scale.to_f32() > 0.0);
    }

    #[test]
    fn refuses_bad_shapes() {
        let e = AwqTensor::quantize(&[0.0; 8 * 172], 8, 172, 128, true).unwrap_err();
        assert_eq!(e, AwqError::GroupSize { in_features: 172, group_size: 128 });
        assert_eq!(AwqTensor::quantize(&[0.0; 4 * 128], 4, 128, 128, true).unwrap_err(), AwqError::OutFeatures(4));
        let e = AwqTensor::from_parts(128, 8, 128, vec![0; 3], vec![0; 1], vec![f16::ZERO; 8]).unwrap_err();
        assert_eq!(e, AwqError::Length { name: "qweight", expected: 128, found: 3 });
    }
}
