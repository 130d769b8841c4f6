//! AWQ checkpoints (AutoAWQ's GEMM layout, as `tgi quantize --format awq`, AutoAWQ and llm-compressor write
//! them): each quantized linear `P` stored as `P.qweight` (int32 `[in, out/8]`), `P.qzeros` (int32
//! `[in/group, out/8]`) and `P.scales` (f16 `[in/group, out]`), checked against config.json's
//! `quantization_config` and repacked once into the kernels' layout ([`AwqMatrix`]).

use std::collections::HashMap;
use std::sync::Arc;

use tgi_formats::awq::AwqConfig;
use tgi_formats::{DType, TensorMeta, TensorSource};

use super::ModelError;
use crate::kernels::awq::AwqMatrix;

/// The stored name of part `part` (`qweight`, `qzeros`, `scales`) of linear `prefix`.
fn part(prefix: &str, part: &str) -> String {
    format!("{prefix}.{part}")
}

/// Whether linear `prefix` is stored packed (`P.qweight`).
pub fn is_packed(metas: &HashMap<String, TensorMeta>, prefix: &str) -> bool {
    metas.contains_key(&part(prefix, "qweight"))
}

/// Whether any linear of the checkpoint is stored packed.
pub fn any_packed(metas: &HashMap<String, TensorMeta>) -> bool {
    metas.keys().any(|k| k.ends_with(".qweight"))
}

/// Reads linear `prefix` (`rows` outputs, `cols` inputs) as the AWQ settings `cfg` describe it, checking
/// every tensor's dtype and shape, and repacks it; the mapped pages of the packed tensors are dropped after.
pub fn read(
    source: &Arc<dyn TensorSource>,
    metas: &HashMap<String, TensorMeta>,
    prefix: &str,
    rows: usize,
    cols: usize,
    cfg: &AwqConfig,
) -> Result<AwqMatrix, ModelError> {
    let group = cfg.group_size;
    if group == 0 || !group.is_multiple_of(32) {
        return Err(ModelError::Unsupported(format!(
            "AWQ group_size {group}: the engine runs groups that are a multiple of 32 (32, 64, 128, ...)"
        )));
    }
    if !cols.is_multiple_of(group) || !rows.is_multiple_of(8) {
        return Err(ModelError::Config(format!(
            "'{prefix}': a {rows}×{cols} layer does not divide into AWQ groups of {group} inputs and packs of 8 outputs"
        )));
    }
    let groups = cols / group;
    let mut bytes = Vec::with_capacity(3);
    for (name, dtype, shape) in [
        ("qweight", DType::I32, [cols, rows / 8]),
        ("qzeros", DType::I32, [groups, rows / 8]),
        ("scales", DType::F16, [groups, rows]),
    ] {
        let name = part(prefix, name);
        let m = metas.get(&name).ok_or_else(|| ModelError::MissingTensor(name.clone()))?;
        if m.dtype != dtype {
            return Err(ModelError::Unsupported(format!(
                "tensor '{name}' has dtype {}, AWQ GEMM checkpoints store it as {dtype}",
                m.dtype
            )));
        }
        if m.shape != shape {
            return Err(ModelError::Shape { name, expected: shape.to_vec(), found: m.shape.clone() });
        }
        bytes.push((name.clone(), source.raw_bytes(&name)?));
    }
    let matrix = AwqMatrix::from_gemm(rows, cols, group, bytes[0].1, bytes[1].1, bytes[2].1)
        .map_err(|e| ModelError::Config(format!("'{prefix}': {e}")))?;
    for (name, _) in &bytes {
        source.release(name);
    }
    Ok(matrix)
}
