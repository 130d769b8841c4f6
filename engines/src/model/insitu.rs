//! In-situ quantization: a dense checkpoint (F32/F16/BF16) quantized tensor by tensor while it loads, so that
//! memory holds the quantized model plus one slab of f32 values, never the model in full precision.
//!
//! GGML types follow llama-quantize's presets exactly (the types `tgi quantize --type` writes, tensor by
//! tensor, embeddings and output included); NF4/FP4 quantize the decoder's linear layers only and leave
//! the embeddings, `lm_head` and norms as stored, as bitsandbytes does.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use rayon::prelude::*;
use tgi_formats::bnb::{self, FourBitType};
use tgi_formats::{DType, GgmlType, TensorMeta, TensorSource};

use super::bnb::Bnb4Tensor;
use super::bytes::{Part, WeightBytes};
use super::ModelError;
use crate::convert::names::map_name;
use crate::convert::preset::{ModelShape, Preset};
use crate::convert::preset_types;

/// What `--quantize` turns a dense checkpoint into, or (TGI's `awq`) says the checkpoint already is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantize {
    /// A llama-quantize preset (per-tensor GGML types).
    Ggml(Preset),
    /// bitsandbytes 4-bit codes for the linear layers.
    Bnb4(FourBitType),
    /// TGI's `--quantize awq`: the checkpoint is AWQ 4-bit and loads as stored (refused for any other).
    Awq,
}

/// TGI launcher `--quantize` values this engine has no counterpart for, with what to use instead.
const REFUSED: [(&str, &str); 7] = [
    ("bitsandbytes", "bitsandbytes 8-bit (LLM.int8) is not supported; for 8 bits use q8_0, for 4 bits nf4"),
    ("eetq", "EETQ's 8-bit kernels are not supported; q8_0 quantizes to 8 bits in place"),
    ("fp8", "FP8 is not supported; q8_0 quantizes to 8 bits in place"),
    ("gptq", "GPTQ checkpoints are not supported; AWQ checkpoints load as they are, and GGUF files too"),
    ("marlin", "Marlin (GPTQ) checkpoints are not supported; AWQ checkpoints load as they are, and GGUF files too"),
    ("exl2", "EXL2 checkpoints are not supported; GGUF files and AWQ checkpoints load as they are"),
    ("compressed-tensors", "compressed-tensors checkpoints are not supported; GGUF and AWQ load as they are"),
];

impl Quantize {
    /// Every accepted name, for help and errors.
    pub fn names() -> Vec<&'static str> {
        let mut v = vec!["nf4", "fp4"];
        v.extend(
            Preset::ALL.iter().filter(|p| p.default_type().is_quantized() && !p.needs_imatrix()).map(|p| p.name()),
        );
        v.extend(Preset::ALIASES.iter().map(|(n, _)| *n));
        v.extend(["bitsandbytes-nf4", "bitsandbytes-fp4", "awq"]);
        v
    }
}

impl FromStr for Quantize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        let found = match lower.as_str() {
            "nf4" | "bitsandbytes-nf4" => Some(Quantize::Bnb4(FourBitType::Nf4)),
            "fp4" | "bitsandbytes-fp4" => Some(Quantize::Bnb4(FourBitType::Fp4)),
            "awq" => Some(Quantize::Awq),
            name => match name.parse::<Preset>() {
                Ok(p) if p.needs_imatrix() => {
                    return Err(format!(
                        "--quantize {s}: llama-quantize writes {p} only with an importance matrix (--imatrix), which \
                         loading has none of; write the file with `tgi quantize --type {p} --imatrix FILE`"
                    ))
                }
                p => p.ok().filter(|p| p.default_type().is_quantized()).map(Quantize::Ggml),
            },
        };
        found.ok_or_else(|| {
            if let Some((_, why)) = REFUSED.iter().find(|(name, _)| *name == lower) {
                return format!("--quantize {s}: {why}");
            }
            let hint =
                if matches!(lower.as_str(), "f32" | "f16" | "bf16") { " (float types: use --dtype)" } else { "" };
            format!("unknown quantization '{s}'{hint}; expected one of: {}", Quantize::names().join(", "))
        })
    }
}

impl fmt::Display for Quantize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Quantize::Ggml(p) => f.write_str(p.name()),
            Quantize::Bnb4(k) => f.write_str(k.name()),
            Quantize::Awq => f.write_str("awq"),
        }
    }
}

/// What in-situ quantization does to a checkpoint's tensors.
pub enum Plan {
    /// The GGML type of every tensor a preset quantizes, by stored name.
    Ggml(HashMap<String, GgmlType>),
    /// The decoder's dense linear weights to bitsandbytes 4-bit codes (block 64, double-quantized absmax).
    Bnb4(FourBitType),
}

/// The target type of every tensor a preset changes, keyed by stored name. `gguf_names` stores tensors
/// under llama.cpp's names (else Hugging Face names, mapped to llama.cpp's to apply the rules).
pub fn ggml_plan(
    metas: &HashMap<String, TensorMeta>,
    preset: Preset,
    shape: ModelShape,
    arch: tgi_formats::hf::Architecture,
    gguf_names: bool,
) -> Result<HashMap<String, GgmlType>, ModelError> {
    // Stored names by GGUF name: several for a stack of experts stored one tensor each.
    let mut stored_of: HashMap<String, Vec<String>> = HashMap::new();
    let mut tensors = Vec::new();
    for m in metas.values() {
        let gguf = if gguf_names {
            m.name.clone()
        } else {
            match map_name(arch, shape.n_head, shape.n_head_kv, &m.name) {
                Ok(Some((g, _))) => g,
                _ => continue,
            }
        };
        if shape.tied_embeddings && gguf == "output.weight" {
            continue;
        }
        let stored = stored_of.entry(gguf.clone()).or_default();
        if stored.is_empty() {
            // An expert's rows stand for the stack's: the rules read the row length and the name.
            tensors.push((gguf, m.shape.iter().rev().map(|&d| d as u64).collect()));
        }
        stored.push(m.name.clone());
    }
    let types = preset_types(&tensors, preset, shape).map_err(|e| ModelError::Config(format!("--quantize: {e}")))?;
    Ok(types
        .into_iter()
        .filter(|(_, t)| *t != GgmlType::F32)
        .flat_map(|(g, t)| stored_of.remove(&g).unwrap_or_default().into_iter().map(move |s| (s, t)))
        .collect())
}

/// Values converted and encoded per step: bounds the f32 working memory of one tensor.
const SLAB_VALUES: usize = 4 << 20;

/// Encodes `part` of the dense tensor `m` (rows of `cols` values) into `target`, a slab of rows at a time, and
/// lets the source drop its pages.
pub fn encode_ggml(
    source: &dyn TensorSource,
    m: &TensorMeta,
    part: Option<Part>,
    cols: usize,
    target: GgmlType,
) -> Result<Vec<u8>, ModelError> {
    let stored = Part::of(part, source.raw_bytes(&m.name)?);
    let width = float_width(m)?;
    let n = stored.len() / width;
    if cols == 0 || !n.is_multiple_of(cols) || !cols.is_multiple_of(target.block_size()) {
        return Err(ModelError::Unsupported(format!(
            "--quantize: tensor '{}' has rows of {cols} values, not whole {target} blocks",
            m.name
        )));
    }
    let row_bytes = cols / target.block_size() * target.type_size();
    let rows_per_slab = (SLAB_VALUES / cols).max(1);
    let mut out = vec![0u8; n / cols * row_bytes];
    let mut values = Vec::new();
    for (src, dst) in stored.chunks(rows_per_slab * cols * width).zip(out.chunks_mut(rows_per_slab * row_bytes)) {
        widen(m.dtype, src, &mut values);
        dst.par_chunks_mut(row_bytes).zip(values.par_chunks(cols)).try_for_each(|(d, s)| {
            tgi_formats::quant::quantize_row(target, s, d).map_err(|e| ModelError::Config(e.to_string()))
        })?;
    }
    source.release(&m.name);
    Ok(out)
}

/// Quantizes `part` of the dense tensor `m` to bitsandbytes 4-bit codes exactly as `tgi quantize --format
/// nf4|fp4` writes them (block 64, absmax double-quantized and decoded back), a slab of blocks at a time.
pub fn encode_bnb4(
    source: &dyn TensorSource,
    m: &TensorMeta,
    part: Option<Part>,
    ty: FourBitType,
) -> Result<Bnb4Tensor, ModelError> {
    let stored = Part::of(part, source.raw_bytes(&m.name)?);
    let width = float_width(m)?;
    let blocksize = DEFAULT_BLOCKSIZE;
    let n = stored.len() / width;
    let mut packed = Vec::with_capacity(n.div_ceil(2));
    let mut absmax = Vec::with_capacity(n.div_ceil(blocksize));
    let mut values = Vec::new();
    // Slabs of whole blocks, so the blocks (and the packed bytes) are those of the whole tensor.
    for src in stored.chunks(SLAB_VALUES / blocksize * blocksize * width) {
        widen(m.dtype, src, &mut values);
        let (p, a) = bnb::quantize_4bit(ty, blocksize, &values).map_err(|e| ModelError::Config(e.to_string()))?;
        packed.extend_from_slice(&p);
        absmax.extend_from_slice(&a);
    }
    source.release(&m.name);
    let absmax = bnb::decompress_absmax(&bnb::compress_absmax(&absmax));
    Ok(Bnb4Tensor { ty, blocksize, packed: WeightBytes::Owned(packed), absmax, code: bnb::code(ty) })
}

/// bitsandbytes' default block size, which `tgi quantize --format nf4` also writes.
const DEFAULT_BLOCKSIZE: usize = 64;

/// Bytes per value of a dense stored tensor.
fn float_width(m: &TensorMeta) -> Result<usize, ModelError> {
    match m.dtype {
        DType::F32 => Ok(4),
        DType::F16 | DType::BF16 => Ok(2),
        other => Err(ModelError::Unsupported(format!(
            "--quantize: tensor '{}' is stored as {other}; only F32, F16 and BF16 checkpoints can be quantized",
            m.name
        ))),
    }
}

/// Widens stored F32/F16/BF16 bytes to f32 values (replacing `out`'s contents).
pub fn widen(dtype: DType, src: &[u8], out: &mut Vec<f32>) {
    out.clear();
    match dtype {
        DType::F16 => out.extend(src.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())),
        DType::BF16 => out.extend(src.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())),
        _ => out.extend(src.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!("NF4".parse::<Quantize>(), Ok(Quantize::Bnb4(FourBitType::Nf4)));
        assert_eq!("q4_k".parse::<Quantize>(), Ok(Quantize::Ggml(Preset::Q4_K_M)));
        assert_eq!("q8_0".parse::<Quantize>(), Ok(Quantize::Ggml(Preset::Q8_0)));
        assert!("f16".parse::<Quantize>().unwrap_err().contains("--dtype"));
        assert!("q9".parse::<Quantize>().unwrap_err().contains("nf4, fp4, q8_0"));
        // TGI's launcher values: bitsandbytes 4-bit by its names, AWQ as stored, the rest refused with a pointer.
        assert_eq!("bitsandbytes-nf4".parse::<Quantize>(), Ok(Quantize::Bnb4(FourBitType::Nf4)));
        assert_eq!("bitsandbytes-fp4".parse::<Quantize>(), Ok(Quantize::Bnb4(FourBitType::Fp4)));
        assert_eq!("AWQ".parse::<Quantize>(), Ok(Quantize::Awq));
        assert_eq!("Q4_K".parse::<Quantize>(), Ok(Quantize::Ggml(Preset::Q4_K_M)));
        // The presets that need an importance matrix cannot be written while loading.
        assert!("iq2_m".parse::<Quantize>().unwrap_err().contains("--imatrix"));
        assert!(!Quantize::names().contains(&"iq3_xxs"));
        for (name, needle) in [("eetq", "q8_0"), ("fp8", "q8_0"), ("bitsandbytes", "LLM.int8"), ("gptq", "AWQ")] {
            let e = name.parse::<Quantize>().unwrap_err();
            assert!(e.contains(&format!("--quantize {name}: ")) && e.contains(needle), "{e}");
        }
    }
}
