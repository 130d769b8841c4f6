//! One bitsandbytes 4-bit weight as transformers saves it: the tensor group
//! `P.weight{,.absmax,.quant_map,.nested_absmax,.nested_quant_map,.quant_state.bitsandbytes__nf4}`
//! and its quant_state JSON (`QuantState.as_dict(packed=True)`).

use std::borrow::Cow;

use serde::Deserialize;

use super::codec::{code, FourBitType};
use super::nested::{decompress_absmax, NestedAbsmax};
use crate::source::{DType, SourceError, TensorMeta, TensorSource};

/// Errors of the bitsandbytes codec and checkpoint reader; messages name the tensor.
#[derive(Debug, thiserror::Error)]
pub enum BnbError {
    /// A quant type other than `nf4` / `fp4`.
    #[error("unknown 4-bit quant type '{0}'; expected nf4 or fp4")]
    UnknownQuantType(String),
    /// A block size bitsandbytes does not accept.
    #[error("block size {0} is not one of 32, 64, 128, 256, 512, 1024, 2048, 4096")]
    BadBlocksize(usize),
    /// A buffer shorter than the values it must hold.
    #[error("{what}: {expected} needed, {actual} given")]
    ShortBuffer {
        /// Which buffer.
        what: &'static str,
        /// Its required length.
        expected: usize,
        /// Its length.
        actual: usize,
    },
    /// A tensor could not be read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A weight without its `quant_state.bitsandbytes__nf4|fp4` tensor.
    #[error(
        "'{weight}' has no {weight}.quant_state.bitsandbytes__nf4 or __fp4 tensor; not a bitsandbytes 4-bit weight"
    )]
    NoQuantState {
        /// The weight.
        weight: String,
    },
    /// A tensor of the group that contradicts the quant_state or the format.
    #[error("bitsandbytes weight '{weight}': {reason}")]
    Invalid {
        /// The weight.
        weight: String,
        /// What is wrong.
        reason: String,
    },
}

/// The non-tensor quant state, stored as UTF-8 JSON bytes in `P.weight.quant_state.bitsandbytes__<type>`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct QuantStateJson {
    /// `nf4` or `fp4`.
    pub quant_type: String,
    /// Values per absmax block.
    pub blocksize: usize,
    /// The original weight dtype: `float16`, `bfloat16` or `float32`.
    pub dtype: String,
    /// The weight's shape, `[out, in]`.
    pub shape: Vec<usize>,
    /// Absmax values per nested block (double quantization only).
    #[serde(default)]
    pub nested_blocksize: Option<usize>,
    /// dtype of the nested absmax (`float32`; double quantization only).
    #[serde(default)]
    pub nested_dtype: Option<String>,
    /// Mean subtracted from the absmax values (double quantization only).
    #[serde(default)]
    pub nested_offset: Option<f64>,
}

impl QuantStateJson {
    /// The JSON exactly as bitsandbytes writes it (`json.dumps`: key order of `as_dict`, `", "` and
    /// `": "` separators, Python float repr).
    pub fn to_json(&self) -> String {
        let shape: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        let mut s = format!(
            "{{\"quant_type\": \"{}\", \"blocksize\": {}, \"dtype\": \"{}\", \"shape\": [{}]",
            self.quant_type,
            self.blocksize,
            self.dtype,
            shape.join(", ")
        );
        if let (Some(bs), Some(dt), Some(off)) = (self.nested_blocksize, &self.nested_dtype, self.nested_offset) {
            s.push_str(&format!(
                ", \"nested_blocksize\": {bs}, \"nested_dtype\": \"{dt}\", \"nested_offset\": {}",
                python_float_repr(off)
            ));
        }
        s.push('}');
        s
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation for exponents -4..15,
/// otherwise `d.ddde-05` style.
fn python_float_repr(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "NaN".into()
        } else if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let sci = format!("{x:e}"); // e.g. "-5.217937380075455e-2"
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{sign}{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            let (a, b) = digits.split_at(point as usize);
            format!("{sign}{a}.{b}")
        }
    } else {
        let (a, b) = digits.split_at(1);
        let frac = if b.is_empty() { String::new() } else { format!(".{b}") };
        format!("{sign}{a}{frac}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// Suffixes (after `P.weight`) of the tensors bitsandbytes stores for a 4-bit weight.
pub const BNB_WEIGHT_SUFFIXES: [&str; 6] = [
    ".absmax",
    ".quant_map",
    ".nested_absmax",
    ".nested_quant_map",
    ".quant_state.bitsandbytes__nf4",
    ".quant_state.bitsandbytes__fp4",
];

/// The name of a weight's quant_state tensor, e.g. `P.weight.quant_state.bitsandbytes__nf4`.
pub fn quant_state_key(weight: &str, ty: FourBitType) -> String {
    format!("{weight}.quant_state.bitsandbytes__{}", ty.name())
}

/// The names of a weight's tensor group, in the order transformers lists them.
pub fn weight_group(weight: &str, ty: FourBitType, double_quant: bool) -> Vec<String> {
    let mut names = vec![weight.to_owned(), format!("{weight}.absmax"), format!("{weight}.quant_map")];
    if double_quant {
        names.push(format!("{weight}.nested_absmax"));
        names.push(format!("{weight}.nested_quant_map"));
    }
    names.push(quant_state_key(weight, ty));
    names
}

/// One 4-bit weight read from a bitsandbytes checkpoint, absmax decoded to f32 per block.
#[derive(Clone, Debug)]
pub struct Bnb4Weight<'a> {
    /// NF4 or FP4.
    pub ty: FourBitType,
    /// Values per absmax block.
    pub blocksize: usize,
    /// `[rows (out), cols (in)]` of the weight.
    pub shape: [usize; 2],
    /// Packed 4-bit values, `(rows * cols + 1) / 2` bytes, row-major, element `2t` in the high nibble of byte `t`.
    pub packed: Cow<'a, [u8]>,
    /// One f32 scale per block of `blocksize` consecutive values (double quantization decoded).
    pub absmax: Vec<f32>,
    /// The original weight dtype named in the quant state: `float16`, `bfloat16` or `float32`.
    pub dtype: String,
    /// The stored double quantization, when the checkpoint has one.
    pub nested: Option<NestedAbsmax>,
}

impl Bnb4Weight<'_> {
    /// Number of values (`rows * cols`).
    pub fn numel(&self) -> usize {
        self.shape[0] * self.shape[1]
    }

    /// Dequantizes into `out` (`numel` f32 values, before the rounding to `dtype` bitsandbytes applies).
    pub fn dequantize_into(&self, out: &mut [f32]) -> Result<(), BnbError> {
        super::codec::dequantize_4bit(self.ty, self.blocksize, &self.packed, &self.absmax, self.numel(), out)
    }
}

/// Whether a checkpoint holds `weight` as a bitsandbytes 4-bit tensor group (it has a quant_state tensor).
pub fn is_bnb4_weight(src: &dyn TensorSource, weight: &str) -> bool {
    FourBitType::ALL.iter().any(|&ty| src.raw_bytes(&quant_state_key(weight, ty)).is_ok())
}

/// Reads the tensor group of `weight` (e.g. `model.layers.0.self_attn.q_proj.weight`) from a
/// bitsandbytes 4-bit checkpoint, checking every tensor against the quant state.
pub fn read_bnb4<'a>(src: &'a dyn TensorSource, weight: &str) -> Result<Bnb4Weight<'a>, BnbError> {
    let invalid = |reason: String| BnbError::Invalid { weight: weight.to_owned(), reason };
    let (ty, json) = FourBitType::ALL
        .iter()
        .find_map(|&ty| src.raw_bytes(&quant_state_key(weight, ty)).ok().map(|b| (ty, b)))
        .ok_or_else(|| BnbError::NoQuantState { weight: weight.to_owned() })?;
    let state: QuantStateJson =
        serde_json::from_slice(json).map_err(|e| invalid(format!("quant_state is not valid JSON: {e}")))?;
    if state.quant_type != ty.name() {
        return Err(invalid(format!("quant_state names type '{}' under the {ty} key", state.quant_type)));
    }
    super::codec::VALID_BLOCKSIZES
        .contains(&state.blocksize)
        .then_some(())
        .ok_or_else(|| invalid(format!("block size {} is not a bitsandbytes block size", state.blocksize)))?;
    let shape: [usize; 2] = match state.shape[..] {
        [rows, cols] => [rows, cols],
        _ => return Err(invalid(format!("shape {:?} is not 2-D", state.shape))),
    };
    if !matches!(state.dtype.as_str(), "float16" | "bfloat16" | "float32") {
        return Err(invalid(format!("dtype '{}' is not float16, bfloat16 or float32", state.dtype)));
    }
    let n = shape[0].checked_mul(shape[1]).ok_or_else(|| invalid(format!("shape {shape:?} overflows")))?;
    let blocks = n.div_ceil(state.blocksize);
    let metas = src.tensors();
    let meta = |name: &str| -> Result<&TensorMeta, BnbError> {
        metas.iter().find(|m| m.name == name).ok_or_else(|| {
            BnbError::Source(SourceError::NotFound {
                origin: std::path::PathBuf::from("checkpoint"),
                name: name.into(),
            })
        })
    };
    let expect = |name: &str, dtype: DType, numel: usize| -> Result<(), BnbError> {
        let m = meta(name)?;
        let got: usize = m.shape.iter().product();
        if m.dtype != dtype || got != numel {
            return Err(invalid(format!("{name} is {} {:?}, expected {dtype} with {numel} values", m.dtype, m.shape)));
        }
        Ok(())
    };
    expect(weight, DType::U8, n.div_ceil(2))?;
    let packed = src.raw_bytes(weight)?;
    expect(&format!("{weight}.quant_map"), DType::F32, 16)?;
    let map = src.read_f32(&format!("{weight}.quant_map"))?;
    if map.iter().zip(code(ty)).any(|(a, b)| a.to_bits() != b.to_bits()) {
        return Err(invalid(format!("quant_map is not bitsandbytes' {ty} code: {map:?}")));
    }
    let absmax_name = format!("{weight}.absmax");
    let (absmax, nested) = match (state.nested_blocksize, state.nested_offset) {
        (Some(nbs), Some(offset)) => {
            if nbs == 0 {
                return Err(invalid("nested_blocksize is 0".into()));
            }
            expect(&absmax_name, DType::U8, blocks)?;
            let nested_absmax_name = format!("{weight}.nested_absmax");
            expect(&nested_absmax_name, DType::F32, blocks.div_ceil(nbs))?;
            expect(&format!("{weight}.nested_quant_map"), DType::F32, 256)?;
            let nested = NestedAbsmax {
                codes: src.raw_bytes(&absmax_name)?.to_vec(),
                nested_absmax: src.read_f32(&nested_absmax_name)?,
                offset: offset as f32,
                nested_blocksize: nbs,
                nested_map: src.read_f32(&format!("{weight}.nested_quant_map"))?,
            };
            (decompress_absmax(&nested), Some(nested))
        }
        (None, None) => {
            expect(&absmax_name, DType::F32, blocks)?;
            (src.read_f32(&absmax_name)?, None)
        }
        _ => return Err(invalid("quant_state has only part of the nested_* keys".into())),
    };
    if let Some(bad) = absmax.iter().position(|a| !a.is_finite()) {
        return Err(invalid(format!("absmax of block {bad} is not finite")));
    }
    Ok(Bnb4Weight {
        ty,
        blocksize: state.blocksize,
        shape,
        packed: Cow::Borrowed(packed),
        absmax,
        dtype: state.dtype,
        nested,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_repr() {
        for (x, s) in [
            (0.05217937380075455, "0.05217937380075455"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (123.0, "123.0"),
            (1e16, "1e+16"),
            (0.0, "0.0"),
            (-2.5, "-2.5"),
            (1234567.125, "1234567.125"),
        ] {
            assert_eq!(python_float_repr(x), s);
        }
    }

    #[test]
    fn quant_state_json_matches_bitsandbytes() {
        let state = QuantStateJson {
            quant_type: "nf4".into(),
            blocksize: 64,
            dtype: "float16".into(),
            shape: vec![256, 512],
            nested_blocksize: Some(256),
            nested_dtype: Some("float32".into()),
            nested_offset: Some(0.05217937380075455),
        };
        let json = state.to_json();
        assert_eq!(
            json,
            "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float16\", \"shape\": [256, 512], \
\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": 0.05217937380075455}"
        );
        assert_eq!(serde_json::from_str::<QuantStateJson>(&json).unwrap(), state);
        let plain = QuantStateJson { nested_blocksize: None, nested_dtype: None, nested_offset: None, ..state };
        assert!(plain.to_json().ends_with("\"shape\": [256, 512]}"));
    }

    #[test]
    fn group_names() {
        assert_eq!(
            weight_group("p.weight", FourBitType::Fp4, false),
            vec!["p.weight", "p.weight.absmax", "p.weight.quant_map", "p.weight.quant_state.bitsandbytes__fp4"]
        );
        assert_eq!(weight_group("p.weight", FourBitType::Nf4, true).len(), 6);
    }
}
