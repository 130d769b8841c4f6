//! The paged KV cache: fixed-size blocks from one pool, a block table per sequence, and the attention
//! that reads each sequence's own blocks. Sequences join and leave at any step without copying.

mod attention;
mod blocks;
mod simd;

pub use attention::{AttentionPlan, SeqSpan};
pub use blocks::{BlockAllocator, BlockTable};

use candle_core::{DType, Device, Tensor};

use crate::kernels::act::Q8_0_BYTES;

/// Tokens per KV block.
pub const BLOCK_SIZE: usize = 16;

/// Errors from the KV cache.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// Not enough free blocks for a sequence's next tokens.
    #[error("KV cache full: {needed} more blocks needed, {free} free (of {total})")]
    OutOfBlocks {
        /// Blocks the request needed.
        needed: usize,
        /// Blocks free.
        free: usize,
        /// Blocks in the pool.
        total: usize,
    },
    /// The cache element type cannot serve this model or device.
    #[error("unsupported KV cache: {0}")]
    Unsupported(String),
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The cache's shape: how many blocks of how many tokens, for which model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    /// Decoder layers.
    pub layers: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of each head.
    pub head_dim: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub num_blocks: usize,
}

/// The element type keys and values are cached in.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDType {
    /// 32-bit floats: exact against float32 references.
    F32,
    /// IEEE halves: half the memory; llama.cpp's default, and its numerics (queries and attention weights
    /// are rounded to f16 for the products with the cache, as ggml does).
    F16,
    /// bfloat16: half the memory with f32's range (8 significant bits); queries and weights stay f32.
    BF16,
    /// ggml's block_q8_0 (per 32 values of a head: an f16 scale and 32 int8), llama.cpp's `--cache-type-k/v
    /// q8_0`: 34 bytes per 32 values. Host (CPU) attention only; the head width must be a multiple of 32.
    Q8_0,
}

impl KvDType {
    /// Cache bytes per token of context: keys and values of every layer.
    pub fn bytes_per_token(self, layers: usize, kv_heads: usize, head_dim: usize) -> usize {
        let per_head = match self {
            KvDType::F32 => head_dim * 4,
            KvDType::F16 | KvDType::BF16 => head_dim * 2,
            KvDType::Q8_0 => head_dim.div_ceil(Q8_BLOCK) * Q8_0_BYTES,
        };
        2 * layers * kv_heads * per_head
    }

    /// Whether a cache of this type can hold heads of `head_dim` values, on the host path (`host`) or the
    /// tensor path.
    pub fn check(self, head_dim: usize, host: bool) -> Result<(), KvError> {
        if !host {
            self.tensor_dtype()?;
        } else if self == KvDType::Q8_0 && !head_dim.is_multiple_of(Q8_BLOCK) {
            return Err(KvError::Unsupported(format!(
                "q8_0 KV needs a head width that is a multiple of {Q8_BLOCK}; this model's is {head_dim}"
            )));
        }
        Ok(())
    }

    /// The tensor element type on the tensor path, which has no q8_0.
    fn tensor_dtype(self) -> Result<DType, KvError> {
        match self {
            KvDType::F32 => Ok(DType::F32),
            KvDType::F16 => Ok(DType::F16),
            KvDType::BF16 => Ok(DType::BF16),
            KvDType::Q8_0 => Err(KvError::Unsupported(
                "q8_0 KV runs on the CPU only (the GPU/tensor attention path has no q8_0); use f16 or bf16".into(),
            )),
        }
    }
}

impl std::str::FromStr for KvDType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvDType::F32),
            "f16" => Ok(KvDType::F16),
            "bf16" => Ok(KvDType::BF16),
            "q8_0" => Ok(KvDType::Q8_0),
            _ => Err(format!("unknown KV cache dtype '{s}': expected f32, f16, bf16 or q8_0")),
        }
    }
}

/// Values per q8_0 block.
const Q8_BLOCK: usize = 32;

/// Host storage of one layer's keys or values: `[slots, kv_heads * head_dim]` row-major.
pub(crate) enum HostBuf {
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<half::f16>),
    /// bf16 elements.
    BF16(Vec<half::bf16>),
    /// block_q8_0 bytes: each row is `kv_heads * head_dim / 32` blocks of 34 bytes.
    Q8_0(Vec<u8>),
}

impl HostBuf {
    /// `n` zero elements, allocated zeroed (calloc): the OS commits the pages only as blocks are written, so an
    /// unused cache costs address space, not memory or start-up time.
    fn zeros(n: usize, dtype: KvDType) -> Self {
        use half::vec::HalfBitsVecExt;
        match dtype {
            KvDType::F32 => HostBuf::F32(vec![0.0; n]),
            KvDType::F16 => HostBuf::F16(vec![0u16; n].reinterpret_into()),
            KvDType::BF16 => HostBuf::BF16(vec![0u16; n].reinterpret_into()),
            KvDType::Q8_0 => HostBuf::Q8_0(vec![0; n / Q8_BLOCK * Q8_0_BYTES]),
        }
    }
}

/// One layer's keys and values: plain host memory on the CPU, tensors on a GPU.
enum LayerKv {
    /// Host buffers.
    Host { k: HostBuf, v: HostBuf },
    /// `[slots, kv_heads * head_dim]` tensors in the cache dtype.
    Device { k: Tensor, v: Tensor },
}

/// The KV cache of every layer, with its block pool.
pub struct KvCache {
    allocator: BlockAllocator,
    layers: Vec<LayerKv>,
}

impl KvCache {
    /// A cache of `shape` on `device`: host buffers on the CPU (committed by the OS only as blocks are
    /// written) with the tuned attention, device tensors elsewhere.
    pub fn new(shape: KvShape, device: &Device, dtype: KvDType) -> Result<Self, KvError> {
        Self::build(shape, device, dtype, device.is_cpu())
    }

    /// A cache of device tensors with the tensor attention path, on any device (the CPU included).
    pub fn new_tensors(shape: KvShape, device: &Device, dtype: KvDType) -> Result<Self, KvError> {
        Self::build(shape, device, dtype, false)
    }

    fn build(shape: KvShape, device: &Device, dtype: KvDType, host: bool) -> Result<Self, KvError> {
        dtype.check(shape.head_dim, host)?;
        let slots = shape.num_blocks * shape.block_size;
        let width = shape.kv_heads * shape.head_dim;
        let layers = (0..shape.layers)
            .map(|_| {
                Ok(if host {
                    LayerKv::Host { k: HostBuf::zeros(slots * width, dtype), v: HostBuf::zeros(slots * width, dtype) }
                } else {
                    LayerKv::Device {
                        k: Tensor::zeros((slots, width), dtype.tensor_dtype()?, device)?,
                        v: Tensor::zeros((slots, width), dtype.tensor_dtype()?, device)?,
                    }
                })
            })
            .collect::<Result<_, KvError>>()?;
        Ok(KvCache { allocator: BlockAllocator::new(shape.num_blocks, shape.block_size), layers })
    }

    /// Grows `table` so it holds `tokens` tokens.
    pub fn reserve(&mut self, table: &mut BlockTable, tokens: usize) -> Result<(), KvError> {
        self.allocator.grow(table, tokens)
    }

    /// Returns `table`'s blocks to the pool.
    pub fn release(&mut self, table: &mut BlockTable) {
        self.allocator.release(table);
    }

    /// Drops `table`'s blocks past those holding `tokens` tokens (rejected speculative positions).
    pub fn truncate(&mut self, table: &mut BlockTable, tokens: usize) {
        self.allocator.truncate(table, tokens);
    }

    /// The block pool: usage and the prefix cache.
    pub fn allocator(&self) -> &BlockAllocator {
        &self.allocator
    }

    /// The block pool, to share and publish cached prefix blocks.
    pub fn allocator_mut(&mut self) -> &mut BlockAllocator {
        &mut self.allocator
    }

    /// Writes the step's new keys and values (`[tokens, kv_heads * head_dim]`) of `layer` into their slots and
    /// returns attention over each sequence's cached tokens: `[tokens, heads * head_dim]`.
    pub fn attend(
        &mut self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        plan: &AttentionPlan,
    ) -> Result<Tensor, KvError> {
        match &mut self.layers[layer] {
            LayerKv::Host { k: kc, v: vc } => attention::host(kc, vc, q, k, v, plan),
            LayerKv::Device { k: kc, v: vc } => attention::device(kc, vc, q, k, v, plan),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dtypes() {
        for (s, t) in [("f32", KvDType::F32), ("F16", KvDType::F16), ("bf16", KvDType::BF16), ("q8_0", KvDType::Q8_0)] {
            assert_eq!(s.parse::<KvDType>(), Ok(t));
        }
        assert_eq!(
            "q4_0".parse::<KvDType>().unwrap_err(),
            "unknown KV cache dtype 'q4_0': expected f32, f16, bf16 or q8_0"
        );
    }

    /// TinyLlama's shape (22 layers, 4 KV heads of 64): 22 KiB per token in f16, 34/64 of that in q8_0.
    #[test]
    fn bytes_per_token() {
        assert_eq!(KvDType::F32.bytes_per_token(22, 4, 64), 2 * 22 * 4 * 64 * 4);
        assert_eq!(KvDType::F16.bytes_per_token(22, 4, 64), 22528);
        assert_eq!(KvDType::BF16.bytes_per_token(22, 4, 64), 22528);
        assert_eq!(KvDType::Q8_0.bytes_per_token(22, 4, 64), 22528 / 64 * 34);
    }

    /// q8_0 is refused on the tensor path and for heads that are not whole blocks, when the cache is made.
    #[test]
    fn q8_0_limits_are_clear_errors() {
        let shape = |head_dim| KvShape { layers: 1, kv_heads: 2, head_dim, block_size: 4, num_blocks: 2 };
        assert!(KvCache::new(shape(64), &Device::Cpu, KvDType::Q8_0).is_ok());
        let err = KvCache::new(shape(8), &Device::Cpu, KvDType::Q8_0).err().unwrap().to_string();
        assert!(err.contains("multiple of 32; this model's is 8"), "{err}");
        let err = KvCache::new_tensors(shape(64), &Device::Cpu, KvDType::Q8_0).err().unwrap().to_string();
        assert!(err.contains("q8_0 KV runs on the CPU only"), "{err}");
        assert!(KvCache::new_tensors(shape(8), &Device::Cpu, KvDType::BF16).is_ok());
    }
}
