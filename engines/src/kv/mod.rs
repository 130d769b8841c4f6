//! The paged KV cache: fixed-size blocks from one pool, a block table per sequence, and the attention
//! that reads each sequence's own blocks. Sequences join and leave at any step without copying.

mod attention;
mod blocks;

pub use attention::{AttentionPlan, SeqSpan};
pub use blocks::{BlockAllocator, BlockTable};

use candle_core::{DType, Device, Tensor};

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDType {
    /// 32-bit floats: exact against float32 references.
    F32,
    /// IEEE halves: half the memory; llama.cpp's default, and its numerics (queries and attention weights
    /// are rounded to f16 for the products with the cache, as ggml does).
    F16,
}

impl std::str::FromStr for KvDType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvDType::F32),
            "f16" => Ok(KvDType::F16),
            _ => Err(format!("unknown KV cache dtype '{s}': expected f32 or f16")),
        }
    }
}

/// Host storage of one layer's keys or values: `[slots, kv_heads * head_dim]` row-major.
pub(crate) enum HostBuf {
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<half::f16>),
}

impl HostBuf {
    fn zeros(n: usize, dtype: KvDType) -> Self {
        match dtype {
            KvDType::F32 => HostBuf::F32(vec![0.0; n]),
            KvDType::F16 => HostBuf::F16(vec![half::f16::ZERO; n]),
        }
    }
}

/// One layer's keys and values: plain host memory on the CPU, tensors on a GPU.
enum LayerKv {
    /// Host buffers.
    Host { k: HostBuf, v: HostBuf },
    /// `[slots, kv_heads * head_dim]` tensors in the compute dtype.
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
        let slots = shape.num_blocks * shape.block_size;
        let width = shape.kv_heads * shape.head_dim;
        let dt = match dtype {
            KvDType::F32 => DType::F32,
            KvDType::F16 => DType::F16,
        };
        let layers = (0..shape.layers)
            .map(|_| {
                Ok(if host {
                    LayerKv::Host { k: HostBuf::zeros(slots * width, dtype), v: HostBuf::zeros(slots * width, dtype) }
                } else {
                    LayerKv::Device {
                        k: Tensor::zeros((slots, width), dt, device)?,
                        v: Tensor::zeros((slots, width), dt, device)?,
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
