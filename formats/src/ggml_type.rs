//! GGML tensor element types: ids, block geometry and names as llama.cpp defines them.

use std::fmt;

/// A GGML tensor type that tgi can read or write (ids from ggml.h).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float.
    F16,
    /// 4-bit, block of 32, one f16 scale.
    Q4_0,
    /// 4-bit, block of 32, f16 scale and min.
    Q4_1,
    /// 5-bit, block of 32, one f16 scale.
    Q5_0,
    /// 5-bit, block of 32, f16 scale and min.
    Q5_1,
    /// 8-bit, block of 32, one f16 scale.
    Q8_0,
    /// 2-bit k-quant, super-block of 256.
    Q2_K,
    /// 3-bit k-quant, super-block of 256.
    Q3_K,
    /// 4-bit k-quant, super-block of 256.
    Q4_K,
    /// 5-bit k-quant, super-block of 256.
    Q5_K,
    /// 6-bit k-quant, super-block of 256.
    Q6_K,
    /// bfloat16.
    BF16,
    /// 4-bit non-linear (a 16-level table), block of 32, one f16 scale.
    IQ4_NL,
    /// 4-bit non-linear, super-block of 256, f16 scale and eight 6-bit block scales.
    IQ4_XS,
    /// 2.06-bit i-quant: 8-value codewords of 256, super-block of 256.
    IQ2_XXS,
    /// 2.31-bit i-quant: 8-value codewords of 512, super-block of 256.
    IQ2_XS,
    /// 3.06-bit i-quant: 4-value codewords of 256, super-block of 256.
    IQ3_XXS,
    /// 1.56-bit i-quant: ternary 8-value codewords of 2048, super-block of 256.
    IQ1_S,
    /// 3.44-bit i-quant: 4-value codewords of 512, super-block of 256.
    IQ3_S,
    /// 2.56-bit i-quant: 8-value codewords of 1024, super-block of 256.
    IQ2_S,
    /// 1.75-bit i-quant: ternary codewords with per-8 shifts, super-block of 256.
    IQ1_M,
    /// 1.69-bit ternary (BitNet b1.58, TriLMs): 5 trits per byte in base 3, block of 256, one f16 scale.
    TQ1_0,
    /// 2.06-bit ternary: 2 bits per value, block of 256, one f16 scale.
    TQ2_0,
}

impl GgmlType {
    /// Every type tgi handles, in ggml id order.
    pub const ALL: [GgmlType; 24] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ1_S,
        GgmlType::IQ4_NL,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_XS,
        GgmlType::IQ1_M,
        GgmlType::BF16,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
    ];

    /// The ggml type id stored in GGUF tensor infos.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q2_K => 10,
            GgmlType::Q3_K => 11,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::IQ4_NL => 20,
            GgmlType::IQ4_XS => 23,
            GgmlType::IQ2_XXS => 16,
            GgmlType::IQ2_XS => 17,
            GgmlType::IQ3_XXS => 18,
            GgmlType::IQ1_S => 19,
            GgmlType::IQ3_S => 21,
            GgmlType::IQ2_S => 22,
            GgmlType::IQ1_M => 29,
            GgmlType::BF16 => 30,
            GgmlType::TQ1_0 => 34,
            GgmlType::TQ2_0 => 35,
        }
    }

    /// The type for a ggml id, if tgi supports it.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// Elements per block (1 for plain float types).
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 | GgmlType::IQ4_NL => 32,
            GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::IQ4_XS => {
                256
            }
            GgmlType::IQ2_XXS
            | GgmlType::IQ2_XS
            | GgmlType::IQ3_XXS
            | GgmlType::IQ1_S
            | GgmlType::IQ3_S
            | GgmlType::IQ2_S
            | GgmlType::IQ1_M
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0 => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q2_K => 84,
            GgmlType::Q3_K => 110,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
            GgmlType::IQ4_NL => 18,
            GgmlType::IQ4_XS => 136,
            GgmlType::IQ2_XXS => 66,
            GgmlType::IQ2_XS => 74,
            GgmlType::IQ3_XXS => 98,
            GgmlType::IQ1_S => 50,
            GgmlType::IQ3_S => 110,
            GgmlType::IQ2_S => 82,
            GgmlType::IQ1_M => 56,
            GgmlType::TQ1_0 => 54,
            GgmlType::TQ2_0 => 66,
        }
    }

    /// Whether the type is block-quantized (not a plain float type).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by `n` elements, or None when `n` is not a whole number of blocks
    /// (or the size overflows).
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    /// Bits per weight of the encoding.
    pub fn bits_per_weight(self) -> f64 {
        self.type_size() as f64 * 8.0 / self.block_size() as f64
    }

    /// The name ggml prints (`q4_K`, `f16`, ...).
    pub fn ggml_name(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q2_K => "q2_K",
            GgmlType::Q3_K => "q3_K",
            GgmlType::Q4_K => "q4_K",
            GgmlType::Q5_K => "q5_K",
            GgmlType::Q6_K => "q6_K",
            GgmlType::IQ4_NL => "iq4_nl",
            GgmlType::IQ4_XS => "iq4_xs",
            GgmlType::BF16 => "bf16",
            GgmlType::IQ2_XXS => "iq2_xxs",
            GgmlType::IQ2_XS => "iq2_xs",
            GgmlType::IQ3_XXS => "iq3_xxs",
            GgmlType::IQ1_S => "iq1_s",
            GgmlType::IQ3_S => "iq3_s",
            GgmlType::IQ2_S => "iq2_s",
            GgmlType::IQ1_M => "iq1_m",
            GgmlType::TQ1_0 => "tq1_0",
            GgmlType::TQ2_0 => "tq2_0",
        }
    }

    /// Parses a type name, case-insensitively (`q4_k`, `Q8_0`, `f16`).
    pub fn parse(name: &str) -> Option<GgmlType> {
        let lower = name.to_ascii_lowercase();
        GgmlType::ALL.into_iter().find(|t| t.ggml_name().to_ascii_lowercase() == lower)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ggml_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::parse(&t.ggml_name().to_uppercase()), Some(t));
        }
        assert_eq!(GgmlType::from_id(4), None);
    }

    #[test]
    fn geometry() {
        assert_eq!(GgmlType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(GgmlType::Q4_K.bytes_for(100), None);
        assert_eq!(GgmlType::Q8_0.bits_per_weight(), 8.5);
        assert_eq!(GgmlType::Q6_K.bits_per_weight(), 6.5625);
        assert_eq!(GgmlType::IQ4_NL.bits_per_weight(), 4.5);
        assert_eq!(GgmlType::IQ4_XS.bits_per_weight(), 4.25);
        assert_eq!(GgmlType::from_id(23), Some(GgmlType::IQ4_XS));
        assert_eq!(GgmlType::IQ2_XXS.bits_per_weight(), 2.0625);
        assert_eq!(GgmlType::IQ3_S.bits_per_weight(), 3.4375);
        assert_eq!(GgmlType::IQ1_S.bits_per_weight(), 1.5625);
        assert_eq!(GgmlType::from_id(29), Some(GgmlType::IQ1_M));
        assert_eq!(GgmlType::from_id(34), Some(GgmlType::TQ1_0));
        assert_eq!(GgmlType::from_id(35), Some(GgmlType::TQ2_0));
        assert_eq!(GgmlType::TQ1_0.bits_per_weight(), 1.6875);
        assert_eq!(GgmlType::TQ2_0.bits_per_weight(), 2.0625);
    }
}
