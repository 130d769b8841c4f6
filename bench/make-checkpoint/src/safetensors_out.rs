//! Streams random tensors into safetensors files (sharded like `save_pretrained` when large), never holding more
//! than one small chunk of data in memory.

use crate::json::{obj, J};
use crate::rng::{tensor_seed, SplitMix64};
use anyhow::Result;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Element type of the written tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dtype {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    F32,
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 => 4,
        }
    }
    /// The safetensors dtype name.
    pub fn safetensors_name(self) -> &'static str {
        match self {
            Dtype::F16 => "F16",
            Dtype::Bf16 => "BF16",
            Dtype::F32 => "F32",
        }
    }
    /// The torch dtype name as config.json spells it.
    pub fn torch_name(self) -> &'static str {
        match self {
            Dtype::F16 => "float16",
            Dtype::Bf16 => "bfloat16",
            Dtype::F32 => "float32",
        }
    }
}

/// How a tensor's values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Approximately normal with mean 0 and this standard deviation.
    Normal(f32),
    /// Approximately normal around 1.0 with this standard deviation (RMSNorm weights).
    AroundOne(f32),
}

/// One tensor to write.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    /// Hugging Face parameter name.
    pub name: String,
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Value distribution.
    pub init: Init,
}

impl TensorSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A written file and its size in bytes.
#[derive(Debug, Clone)]
pub struct Written {
    /// Path of the file.
    pub path: PathBuf,
    /// Size in bytes.
    pub bytes: u64,
}

/// Splits `specs` into consecutive shards of at most `max_bytes` of tensor data each, as transformers'
/// `split_torch_state_dict_into_shards` does (a tensor larger than the limit gets a shard of its own).
pub fn plan_shards(specs: &[TensorSpec], dtype: Dtype, max_bytes: u64) -> Vec<std::ops::Range<usize>> {
    let mut shards = Vec::new();
    let (mut start, mut size) = (0usize, 0u64);
    for (i, spec) in specs.iter().enumerate() {
        let bytes = (spec.numel() * dtype.size()) as u64;
        if i > start && size + bytes > max_bytes {
            shards.push(start..i);
            (start, size) = (i, 0);
        }
        size += bytes;
    }
    if start < specs.len() {
        shards.push(start..specs.len());
    }
    shards
}

/// Writes the checkpoint's weights into `dir`: `model.safetensors`, or `model-0000i-of-0000n.safetensors`
/// shards plus `model.safetensors.index.json` when the data exceeds `max_shard_bytes`.
pub fn write_weights(
    dir: &Path,
    specs: &[TensorSpec],
    dtype: Dtype,
    seed: u64,
    max_shard_bytes: u64,
) -> Result<Vec<Written>> {
    let shards = plan_shards(specs, dtype, max_shard_bytes);
    let mut written = Vec::new();
    let mut weight_map = Vec::new();
    for (k, range) in shards.iter().enumerate() {
        let file = if shards.len() == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", k + 1, shards.len())
        };
        let path = dir.join(&file);
        let bytes = write_file(&path, &specs[range.clone()], dtype, seed)?;
        weight_map.extend(specs[range.clone()].iter().map(|s| (s.name.clone(), file.clone())));
        written.push(Written { path, bytes });
    }
    if shards.len() > 1 {
        let total: usize = specs.iter().map(|s| s.numel() * dtype.size()).sum();
        weight_map.sort();
        let index = obj([
            ("metadata", obj([("total_size", J::from(total))])),
            ("weight_map", obj(weight_map.into_iter().map(|(n, f)| (n, J::Str(f))))),
        ]);
        let path = dir.join("model.safetensors.index.json");
        let bytes = crate::json::write_pretty(&path, &index, true)?;
        written.push(Written { path, bytes });
    }
    Ok(written)
}

/// The safetensors header for `specs` laid out back to back, padded with spaces to a multiple of 8 bytes.
pub fn header(specs: &[TensorSpec], dtype: Dtype) -> Vec<u8> {
    let mut entries = vec![("__metadata__".to_string(), obj([("format", J::from("pt"))]))];
    let mut offset = 0usize;
    for spec in specs {
        let end = offset + spec.numel() * dtype.size();
        let info = obj([
            ("dtype", J::from(dtype.safetensors_name())),
            ("shape", J::Arr(spec.shape.iter().map(|&d| J::from(d)).collect())),
            ("data_offsets", J::Arr(vec![J::from(offset), J::from(end)])),
        ]);
        entries.push((spec.name.clone(), info));
        offset = end;
    }
    let mut text = serde_json::to_vec(&J::Obj(entries)).expect("JSON of plain values");
    text.resize(text.len().next_multiple_of(8), b' ');
    text
}

/// Writes one safetensors file with random values for `specs`; returns its size.
fn write_file(path: &Path, specs: &[TensorSpec], dtype: Dtype, seed: u64) -> Result<u64> {
    const CHUNK: usize = 1 << 16;
    let mut out = BufWriter::with_capacity(1 << 22, std::fs::File::create(path)?);
    let head = header(specs, dtype);
    out.write_all(&(head.len() as u64).to_le_bytes())?;
    out.write_all(&head)?;
    let mut values = vec![0f32; CHUNK];
    let mut halves = vec![0u16; CHUNK];
    let mut bytes = Vec::with_capacity(CHUNK * 4);
    for spec in specs {
        let mut rng = SplitMix64::new(tensor_seed(seed, &spec.name));
        let (mean, std) = match spec.init {
            Init::Normal(std) => (0.0, std),
            Init::AroundOne(std) => (1.0, std),
        };
        let mut left = spec.numel();
        while left > 0 {
            let n = left.min(CHUNK);
            for v in &mut values[..n] {
                *v = mean + std * rng.next_normalish();
            }
            bytes.clear();
            match dtype {
                Dtype::F32 => values[..n].iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
                Dtype::F16 | Dtype::Bf16 => {
                    let h = &mut halves[..n];
                    if dtype == Dtype::F16 {
                        h.reinterpret_cast_mut::<f16>().convert_from_f32_slice(&values[..n]);
                    } else {
                        h.reinterpret_cast_mut::<bf16>().convert_from_f32_slice(&values[..n]);
                    }
                    h.iter().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes()));
                }
            }
            out.write_all(&bytes)?;
            left -= n;
        }
    }
    out.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, shape: &[usize]) -> TensorSpec {
        TensorSpec { name: name.into(), shape: shape.to_vec(), init: Init::Normal(0.02) }
    }

    #[test]
    fn shards_split_before_the_limit() {
        let specs = [spec("a", &[10]), spec("b", &[10]), spec("c", &[30]), spec("d", &[5])];
        // F32: 40, 40, 120, 20 bytes.
        assert_eq!(plan_shards(&specs, Dtype::F32, 100), vec![0..2, 2..3, 3..4]);
        assert_eq!(plan_shards(&specs, Dtype::F16, 100), vec![0..3, 3..4]);
        assert_eq!(plan_shards(&specs, Dtype::F16, 1 << 30), vec![0..4]);
    }

    #[test]
    fn header_is_aligned_and_contiguous() {
        let specs = [spec("x", &[2, 3]), spec("y", &[5])];
        let h = header(&specs, Dtype::Bf16);
        assert_eq!(h.len() % 8, 0);
        let v: serde_json::Value = serde_json::from_slice(&h).unwrap();
        assert_eq!(v["x"]["data_offsets"], serde_json::json!([0, 12]));
        assert_eq!(v["y"]["data_offsets"], serde_json::json!([12, 22]));
        assert_eq!(v["y"]["dtype"], "BF16");
    }

    #[test]
    fn files_are_deterministic() {
        let dir = std::env::temp_dir().join(format!("make-checkpoint-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let specs = [spec("w", &[300, 7]), TensorSpec { init: Init::AroundOne(0.02), ..spec("n", &[7]) }];
        let a = write_weights(&dir, &specs, Dtype::F16, 3, u64::MAX).unwrap();
        let first = std::fs::read(&a[0].path).unwrap();
        write_weights(&dir, &specs, Dtype::F16, 3, u64::MAX).unwrap();
        assert_eq!(first, std::fs::read(&a[0].path).unwrap());
        assert_eq!(a[0].bytes as usize, 8 + header(&specs, Dtype::F16).len() + (2100 + 7) * 2);
        write_weights(&dir, &specs, Dtype::F16, 4, u64::MAX).unwrap();
        assert_ne!(first, std::fs::read(&a[0].path).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
