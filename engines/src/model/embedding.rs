//! Token embeddings looked up row by row from the stored matrix, whatever its encoding.

use candle_core::{Device, Tensor};
use tgi_formats::GgmlType;

use super::bytes::WeightBytes;
use super::ModelError;

/// The `[vocab, hidden]` embedding matrix as stored.
pub struct Embedding {
    ty: GgmlType,
    bytes: WeightBytes,
    vocab: usize,
    hidden: usize,
}

impl Embedding {
    /// Wraps stored bytes of type `ty`.
    pub fn new(ty: GgmlType, bytes: WeightBytes, vocab: usize, hidden: usize) -> Self {
        Embedding { ty, bytes, vocab, hidden }
    }

    /// The rows of `ids` as a `[ids, hidden]` f32 tensor on `device`.
    pub fn lookup(&self, ids: &[u32], device: &Device) -> Result<Tensor, ModelError> {
        let row_bytes = self.ty.bytes_for(self.hidden as u64).expect("checked at load") as usize;
        let mut out = vec![0f32; ids.len() * self.hidden];
        for (&id, dst) in ids.iter().zip(out.chunks_exact_mut(self.hidden)) {
            if id as usize >= self.vocab {
                return Err(ModelError::TokenOutOfRange { id, vocab: self.vocab });
            }
            let src = &self.bytes.as_slice()[id as usize * row_bytes..][..row_bytes];
            tgi_formats::quant::dequantize_row(self.ty, src, dst).map_err(|e| ModelError::Config(e.to_string()))?;
        }
        Ok(Tensor::from_vec(out, (ids.len(), self.hidden), device)?)
    }

    /// Pins the bytes in RAM.
    pub fn lock(&self) -> std::io::Result<()> {
        self.bytes.lock()
    }
}
