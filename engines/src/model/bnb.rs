//! bitsandbytes 4-bit linear weights (NF4, FP4) as transformers saves them (`P.weight` packed codes, its
//! absmax, quant maps and quant-state JSON; read and checked by [`tgi_formats::bnb::read_bnb4`]), in the
//! form the layer keeps: packed codes mapped from the checkpoint, absmax decoded to f32.

use std::collections::HashMap;
use std::sync::Arc;

use tgi_formats::bnb::{self, FourBitType};
use tgi_formats::{TensorMeta, TensorSource};

use super::bytes::WeightBytes;
use super::ModelError;

/// One 4-bit weight ready for the kernels.
pub struct Bnb4Tensor {
    /// NF4 or FP4.
    pub ty: FourBitType,
    /// Elements per absmax block.
    pub blocksize: usize,
    /// `rows · cols / 2` bytes of packed codes.
    pub packed: WeightBytes,
    /// One scale per block.
    pub absmax: Vec<f32>,
    /// The 16 code values.
    pub code: [f32; 16],
}

/// Whether stored weight `weight` (`P.weight`) is a bitsandbytes 4-bit weight (it has a quant state).
pub fn is_bnb4(metas: &HashMap<String, TensorMeta>, weight: &str) -> bool {
    FourBitType::ALL.into_iter().any(|ty| metas.contains_key(&bnb::quant_state_key(weight, ty)))
}

/// Whether any weight of the checkpoint is a bitsandbytes 4-bit weight.
pub fn any_bnb4(metas: &HashMap<String, TensorMeta>) -> bool {
    metas.keys().any(|k| k.contains(".quant_state.bitsandbytes__"))
}

/// Reads the 4-bit weight `weight` (`[rows, cols]`), keeping its packed codes mapped.
pub fn read(source: &Arc<dyn TensorSource>, weight: &str, rows: usize, cols: usize) -> Result<Bnb4Tensor, ModelError> {
    let w = bnb::read_bnb4(source.as_ref(), weight)?;
    if w.shape != [rows, cols] {
        return Err(ModelError::Shape {
            name: weight.to_string(),
            expected: vec![rows, cols],
            found: w.shape.to_vec(),
        });
    }
    Ok(Bnb4Tensor {
        ty: w.ty,
        blocksize: w.blocksize,
        packed: WeightBytes::mapped(source, weight)?,
        absmax: w.absmax,
        code: bnb::code(w.ty),
    })
}
