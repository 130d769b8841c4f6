//! The NF4 and FP4 codes and blockwise 4-bit quantization, as bitsandbytes'
//! `quantize_4bit` / `dequantize_4bit` compute them on CPU (torch default backend).

use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;

use super::BnbError;

/// Block sizes bitsandbytes' `quantize_4bit` accepts.
pub const VALID_BLOCKSIZES: [usize; 8] = [32, 64, 128, 256, 512, 1024, 2048, 4096];

/// The two 4-bit data types of bitsandbytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FourBitType {
    /// 4-bit NormalFloat: 16 quantiles of N(0, 1), scaled to [-1, 1].
    Nf4,
    /// 4-bit float (1 sign, 2 exponent, 1 mantissa bit), scaled to [-1, 1].
    Fp4,
}

impl FourBitType {
    /// Both types.
    pub const ALL: [FourBitType; 2] = [FourBitType::Nf4, FourBitType::Fp4];

    /// The bitsandbytes name: `nf4` or `fp4`.
    pub fn name(self) -> &'static str {
        match self {
            FourBitType::Nf4 => "nf4",
            FourBitType::Fp4 => "fp4",
        }
    }
}

impl fmt::Display for FourBitType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FourBitType {
    type Err = BnbError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "nf4" => Ok(FourBitType::Nf4),
            "fp4" => Ok(FourBitType::Fp4),
            _ => Err(BnbError::UnknownQuantType(s.to_owned())),
        }
    }
}

/// The NF4 code (`functional.get_4bit_type("nf4")`, float32; sorted).
const NF4: [f32; 16] = [
    -1.0,
    -0.696_192_8,
    -0.525_073_05,
    -0.394_917_5,
    -0.284_441_38,
    -0.184_773_43,
    -0.091_050_036,
    0.0,
    0.079_580_3,
    0.160_930_2,
    0.246_112_3,
    0.337_915_24,
    0.440_709_83,
    0.562_617,
    0.722_956_84,
    1.0,
];

/// FP4 values before normalisation, in bit-pattern order (`get_4bit_type("fp4")`; its `-0` is an
/// integer literal, so entry 8 is +0.0).
const FP4_RAW: [f32; 16] =
    [0.0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, 0.0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0];

/// Code indices in ascending value order for FP4 (torch's stable `argsort`: of the two zeros,
/// index 0 sorts first). NF4 is already sorted.
const FP4_ORDER: [u8; 16] = [11, 10, 13, 12, 15, 14, 9, 0, 8, 1, 6, 7, 4, 5, 2, 3];

/// The code of `ty` (bitsandbytes' `quant_map`, float32): entry `i` is the value of 4-bit index `i`.
pub fn code(ty: FourBitType) -> [f32; 16] {
    match ty {
        FourBitType::Nf4 => NF4,
        // `data.div_(data.abs().max())`: an f32 division by 12.
        FourBitType::Fp4 => FP4_RAW.map(|x| x / 12.0),
    }
}

/// Code indices in ascending value order.
fn order(ty: FourBitType) -> [u8; 16] {
    match ty {
        FourBitType::Nf4 => std::array::from_fn(|i| i as u8),
        FourBitType::Fp4 => FP4_ORDER,
    }
}

/// The 15 decision boundaries between consecutive sorted code values, `(lo + hi) / 2` in f32.
fn midpoints(ty: FourBitType) -> [f32; 15] {
    let c = code(ty);
    let o = order(ty);
    std::array::from_fn(|k| (c[o[k] as usize] + c[o[k + 1] as usize]) / 2.0)
}

/// Checks a block size against bitsandbytes' list.
fn check_blocksize(blocksize: usize) -> Result<(), BnbError> {
    if VALID_BLOCKSIZES.contains(&blocksize) {
        Ok(())
    } else {
        Err(BnbError::BadBlocksize(blocksize))
    }
}

/// The smallest divisor torch's `absmax.clamp(min=1e-38)` allows (an f32 subnormal).
const MIN_ABSMAX: f32 = 1e-38;

/// Nearest-code lookup for one type: `torch.bucketize(scaled, midpoints, right=False)` (a value
/// on a midpoint takes the lower code) mapped back to code indices.
struct Encoder {
    mids: [f32; 15],
    order: [u8; 16],
}

impl Encoder {
    fn new(ty: FourBitType) -> Encoder {
        Encoder { mids: midpoints(ty), order: order(ty) }
    }

    /// The 4-bit index of a scaled value in [-1, 1].
    fn index(&self, v: f32) -> u8 {
        let below = self.mids.iter().filter(|&&m| m < v).count();
        self.order[below]
    }

    /// Quantizes one block into `packed` (high nibble first); returns the stored absmax.
    /// `last` marks a final partial block, which bitsandbytes scales by division and whose
    /// stored absmax is the clamped one.
    fn block(&self, x: &[f32], packed: &mut [u8], last: bool) -> f32 {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let clamped = amax.max(MIN_ABSMAX);
        let recip = 1.0 / clamped;
        let scaled = |v: f32| if last { v / clamped } else { v * recip }.clamp(-1.0, 1.0);
        // An odd count is padded with one scaled 0.0 (torch pads after scaling).
        let zero = self.index(0.0);
        for (byte, pair) in packed.iter_mut().zip(x.chunks(2)) {
            let hi = self.index(scaled(pair[0]));
            let lo = pair.get(1).map_or(zero, |&v| self.index(scaled(v)));
            *byte = (hi << 4) | lo;
        }
        if last {
            clamped
        } else {
            amax
        }
    }
}

/// Blockwise 4-bit quantization, bit-exact with bitsandbytes' `quantize_4bit` on CPU: `x` (the
/// flattened weight, row-major, as f32; F16/BF16 weights widened exactly) in blocks of
/// `blocksize`, each scaled by its absolute maximum and mapped to the nearest code value.
///
/// Returns the packed bytes (`(n + 1) / 2`: element `2t` in the high nibble of byte `t`) and the
/// f32 absmax of each of the `ceil(n / blocksize)` blocks.
pub fn quantize_4bit(ty: FourBitType, blocksize: usize, x: &[f32]) -> Result<(Vec<u8>, Vec<f32>), BnbError> {
    check_blocksize(blocksize)?;
    let n = x.len();
    let blocks = n.div_ceil(blocksize);
    let mut packed = vec![0u8; n.div_ceil(2)];
    let mut absmax = vec![0f32; blocks];
    let enc = Encoder::new(ty);
    let partial = !n.is_multiple_of(blocksize);
    // Block sizes are even, so every block starts on a byte boundary.
    x.par_chunks(blocksize)
        .zip(packed.par_chunks_mut(blocksize / 2))
        .zip(absmax.par_iter_mut())
        .enumerate()
        .for_each(|(b, ((xs, bytes), am))| *am = enc.block(xs, bytes, partial && b + 1 == blocks));
    Ok((packed, absmax))
}

/// Blockwise 4-bit dequantization as bitsandbytes computes it: `code[q] * absmax[block]` in f32
/// for the first `n` values of `packed` into `out[..n]`. bitsandbytes then rounds to the weight's
/// dtype (round to nearest even); for F16/BF16 weights, round these values the same way.
pub fn dequantize_4bit(
    ty: FourBitType,
    blocksize: usize,
    packed: &[u8],
    absmax: &[f32],
    n: usize,
    out: &mut [f32],
) -> Result<(), BnbError> {
    check_blocksize(blocksize)?;
    let need = |what: &'static str, expected: usize, actual: usize| {
        if actual < expected {
            Err(BnbError::ShortBuffer { what, expected, actual })
        } else {
            Ok(())
        }
    };
    need("packed bytes", n.div_ceil(2), packed.len())?;
    need("absmax values", n.div_ceil(blocksize), absmax.len())?;
    need("output values", n, out.len())?;
    let c = code(ty);
    out[..n].par_chunks_mut(blocksize).zip(packed.par_chunks(blocksize / 2)).zip(absmax.par_iter()).for_each(
        |((dst, bytes), &scale)| {
            for (pair, &byte) in dst.chunks_mut(2).zip(bytes) {
                pair[0] = c[(byte >> 4) as usize] * scale;
                if let Some(second) = pair.get_mut(1) {
                    *second = c[(byte & 0x0f) as usize] * scale;
                }
            }
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_bitsandbytes_maps() {
        let nf4 = code(FourBitType::Nf4);
        assert_eq!(nf4[1].to_bits(), (-0.6961928009986877f64 as f32).to_bits());
        assert!(nf4.windows(2).all(|w| w[0] < w[1]));
        let fp4 = code(FourBitType::Fp4);
        assert_eq!(fp4[1], 0.005_208_333_5);
        assert_eq!(fp4[2], 0.666_666_7);
        assert_eq!(fp4[11], -1.0);
        // The FP4 order sorts the code ascending.
        let o = order(FourBitType::Fp4);
        assert!(o.windows(2).all(|w| fp4[w[0] as usize] <= fp4[w[1] as usize]));
    }

    #[test]
    fn names_parse() {
        for ty in FourBitType::ALL {
            assert_eq!(ty.name().parse::<FourBitType>().unwrap(), ty);
        }
        assert_eq!("NF4".parse::<FourBitType>().unwrap(), FourBitType::Nf4);
        assert!("int4".parse::<FourBitType>().is_err());
    }

    #[test]
    fn midpoint_goes_to_lower_code() {
        let enc = Encoder::new(FourBitType::Nf4);
        let m = midpoints(FourBitType::Nf4);
        assert_eq!(enc.index(m[7]), 7);
        assert_eq!(enc.index(f32::from_bits(m[7].to_bits() + 1)), 8);
        assert_eq!(enc.index(-1.0), 0);
        assert_eq!(enc.index(1.0), 15);
    }

    #[test]
    fn round_trip_and_layout() {
        let x: Vec<f32> = (0..131).map(|i| ((i as f32) * 0.7).sin() * (1.0 + i as f32 / 50.0)).collect();
        let (packed, absmax) = quantize_4bit(FourBitType::Nf4, 64, &x).unwrap();
        assert_eq!((packed.len(), absmax.len()), (66, 3));
        // The odd tail is padded with the code of 0.0 (NF4 index 7) in the low nibble.
        assert_eq!(packed[65] & 0x0f, 7);
        let mut out = vec![0.0; 131];
        dequantize_4bit(FourBitType::Nf4, 64, &packed, &absmax, 131, &mut out).unwrap();
        for (b, chunk) in x.chunks(64).enumerate() {
            assert_eq!(absmax[b], chunk.iter().fold(0.0f32, |m, v| m.max(v.abs())));
        }
        for (a, b) in x.iter().zip(&out) {
            assert!((a - b).abs() <= 0.2 * absmax[0].max(absmax[2]), "{a} {b}");
        }
        // The exact maximum of each block is reproduced exactly.
        let i = x.iter().take(64).enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap().0;
        assert_eq!(out[i], x[i]);
    }

    #[test]
    fn zero_blocks() {
        let (packed, absmax) = quantize_4bit(FourBitType::Nf4, 32, &[0.0; 40]).unwrap();
        assert_eq!(absmax, vec![0.0, 1e-38]);
        assert!(packed.iter().all(|&b| b == 0x77));
        let (packed, _) = quantize_4bit(FourBitType::Fp4, 32, &[0.0; 32]).unwrap();
        assert!(packed.iter().all(|&b| b == 0));
    }

    #[test]
    fn bad_arguments() {
        assert!(matches!(quantize_4bit(FourBitType::Nf4, 48, &[1.0]), Err(BnbError::BadBlocksize(48))));
        let mut out = [0.0; 4];
        let e = dequantize_4bit(FourBitType::Nf4, 64, &[0], &[1.0], 4, &mut out).unwrap_err();
        assert!(e.to_string().contains("packed bytes"), "{e}");
    }
}
