//! The paged KV cache: fixed-size blocks from one pool, a block table per sequence, and the attention
//! that reads each sequence's own blocks. Sequences join and leave at any step without copying.

mod attention;
mod blocks;
mod decode;
mod rotation;
mod simd;
#[cfg(target_arch = "x86_64")]
mod simd_avx512;

pub use attention::{AttentionPlan, SeqSpan};
pub use blocks::{BlockAllocator, BlockTable};
pub use rotation::{hadamard, KvRotation};

use candle_core::{DType, Device, Tensor};
use tgi_formats::GgmlType;

use decode::BLOCK;

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
    /// ggml's block_q4_0 (an f16 scale and 32 four-bit codes): 18 bytes per 32 values; host only.
    Q4_0,
    /// ggml's block_q4_1 (f16 scale and minimum, 32 four-bit codes): 20 bytes per 32 values; host only.
    Q4_1,
    /// ggml's block_q5_0 (an f16 scale and 32 five-bit codes): 22 bytes per 32 values; host only.
    Q5_0,
    /// ggml's block_q5_1 (f16 scale and minimum, 32 five-bit codes): 24 bytes per 32 values; host only.
    Q5_1,
    /// ggml's block_iq4_nl (an f16 scale and 32 four-bit indices into 16 non-uniform levels), written as ggml's
    /// `quantize_row_iq4_nl_ref` writes it: 18 bytes per 32 values; host only.
    IQ4_NL,
}

impl KvDType {
    /// Every type, in the order the flag lists them.
    pub const ALL: [KvDType; 9] = [
        KvDType::F32,
        KvDType::F16,
        KvDType::BF16,
        KvDType::Q8_0,
        KvDType::Q4_0,
        KvDType::Q4_1,
        KvDType::Q5_0,
        KvDType::Q5_1,
        KvDType::IQ4_NL,
    ];

    /// llama.cpp's name of the type (`--cache-type-k` values).
    pub fn name(self) -> &'static str {
        match self {
            KvDType::F32 => "f32",
            KvDType::F16 => "f16",
            KvDType::BF16 => "bf16",
            KvDType::Q8_0 => "q8_0",
            KvDType::Q4_0 => "q4_0",
            KvDType::Q4_1 => "q4_1",
            KvDType::Q5_0 => "q5_0",
            KvDType::Q5_1 => "q5_1",
            KvDType::IQ4_NL => "iq4_nl",
        }
    }

    /// The ggml block type of a block-quantized cache; `None` for the float types.
    pub fn block_type(self) -> Option<GgmlType> {
        match self {
            KvDType::F32 | KvDType::F16 | KvDType::BF16 => None,
            KvDType::Q8_0 => Some(GgmlType::Q8_0),
            KvDType::Q4_0 => Some(GgmlType::Q4_0),
            KvDType::Q4_1 => Some(GgmlType::Q4_1),
            KvDType::Q5_0 => Some(GgmlType::Q5_0),
            KvDType::Q5_1 => Some(GgmlType::Q5_1),
            KvDType::IQ4_NL => Some(GgmlType::IQ4_NL),
        }
    }

    /// Cache bytes per token of context: keys and values of every layer.
    pub fn bytes_per_token(self, layers: usize, kv_heads: usize, head_dim: usize) -> usize {
        let per_head = match (self, self.block_type()) {
            (_, Some(t)) => head_dim.div_ceil(BLOCK) * t.type_size(),
            (KvDType::F32, None) => head_dim * 4,
            (_, None) => head_dim * 2,
        };
        2 * layers * kv_heads * per_head
    }

    /// Whether a cache of this type can hold heads of `head_dim` values, on the host path (`host`) or the
    /// tensor path.
    pub fn check(self, head_dim: usize, host: bool) -> Result<(), KvError> {
        if !host {
            self.tensor_dtype()?;
        } else if self.block_type().is_some() && !head_dim.is_multiple_of(BLOCK) {
            return Err(KvError::Unsupported(format!(
                "{self} KV needs a head width that is a multiple of {BLOCK}; this model's is {head_dim}"
            )));
        }
        Ok(())
    }

    /// The tensor element type on the tensor path, which has no block-quantized types.
    fn tensor_dtype(self) -> Result<DType, KvError> {
        match self {
            KvDType::F32 => Ok(DType::F32),
            KvDType::F16 => Ok(DType::F16),
            KvDType::BF16 => Ok(DType::BF16),
            _ => Err(KvError::Unsupported(format!(
                "{self} KV runs on the CPU only (the GPU/tensor attention path has no {self}); use f16 or bf16"
            ))),
        }
    }
}

impl std::fmt::Display for KvDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvDType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.to_ascii_lowercase();
        KvDType::ALL.into_iter().find(|t| t.name() == lower).ok_or_else(|| {
            format!("unknown KV cache dtype '{s}': expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl")
        })
    }
}

/// Host storage of one layer's keys or values: `[slots, kv_heads * head_dim]` row-major.
pub(crate) enum HostBuf {
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<half::f16>),
    /// bf16 elements.
    BF16(Vec<half::bf16>),
    /// Blocks of a ggml type: each row is `kv_heads * head_dim / 32` blocks.
    Blocks(GgmlType, Vec<u8>),
}

impl HostBuf {
    /// `n` zero elements, allocated zeroed (calloc): the OS commits the pages only as blocks are written, so an
    /// unused cache costs address space, not memory or start-up time.
    fn zeros(n: usize, dtype: KvDType) -> Self {
        use half::vec::HalfBitsVecExt;
        match (dtype, dtype.block_type()) {
            (_, Some(t)) => HostBuf::Blocks(t, vec![0; n / BLOCK * t.type_size()]),
            (KvDType::F32, None) => HostBuf::F32(vec![0.0; n]),
            (KvDType::F16, None) => HostBuf::F16(vec![0u16; n].reinterpret_into()),
            (_, None) => HostBuf::BF16(vec![0u16; n].reinterpret_into()),
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
    /// The Hadamard rotation the host path applies (none on the tensor path).
    rotation: KvRotation,
}

impl KvCache {
    /// A cache of `shape` on `device`: host buffers on the CPU (committed by the OS only as blocks are
    /// written) with the tuned attention and, for block-quantized types, llama.cpp's Hadamard rotation of
    /// queries and keys (see [`KvRotation`]); device tensors elsewhere.
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
        let rotation = KvRotation::new(dtype, shape.head_dim, host);
        Ok(KvCache { allocator: BlockAllocator::new(shape.num_blocks, shape.block_size), layers, rotation })
    }

    /// The cache without its Hadamard rotation (`--no-kv-rotation`, llama.cpp's `LLAMA_ATTN_ROT_DISABLE=1`) when
    /// `on` is false; as made otherwise. Set it before the first step: cached keys are stored rotated or not.
    pub fn with_rotation(mut self, on: bool) -> Self {
        if !on {
            self.rotation = KvRotation::OFF;
        }
        self
    }

    /// The rotation this cache applies.
    pub fn rotation(&self) -> KvRotation {
        self.rotation
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
            LayerKv::Host { k: kc, v: vc } => attention::host(kc, vc, q, k, v, plan, self.rotation),
            LayerKv::Device { k: kc, v: vc } => attention::device(kc, vc, q, k, v, plan),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dtypes() {
        for (s, t) in [
            ("f32", KvDType::F32),
            ("F16", KvDType::F16),
            ("bf16", KvDType::BF16),
            ("Q4_1", KvDType::Q4_1),
            ("IQ4_NL", KvDType::IQ4_NL),
        ] {
            assert_eq!(s.parse::<KvDType>(), Ok(t));
        }
        for t in KvDType::ALL {
            assert_eq!(t.to_string().parse::<KvDType>(), Ok(t));
        }
        assert_eq!(
            "q4".parse::<KvDType>().unwrap_err(),
            "unknown KV cache dtype 'q4': expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or iq4_nl"
        );
    }

    /// TinyLlama's shape (22 layers, 4 KV heads of 64): 22 KiB per token in f16, 34/64 of that in q8_0.
    #[test]
    fn bytes_per_token() {
        assert_eq!(KvDType::F32.bytes_per_token(22, 4, 64), 2 * 22 * 4 * 64 * 4);
        assert_eq!(KvDType::F16.bytes_per_token(22, 4, 64), 22528);
        assert_eq!(KvDType::BF16.bytes_per_token(22, 4, 64), 22528);
        assert_eq!(KvDType::Q8_0.bytes_per_token(22, 4, 64), 22528 / 64 * 34);
        for (t, block) in
            [(KvDType::Q4_0, 18), (KvDType::Q4_1, 20), (KvDType::Q5_0, 22), (KvDType::Q5_1, 24), (KvDType::IQ4_NL, 18)]
        {
            assert_eq!(t.bytes_per_token(22, 4, 64), 22528 / 64 * block, "{t}");
        }
    }

    /// Block types are refused on the tensor path and for heads that are not whole blocks, when the cache is
    /// made; the host cache rotates them unless told not to.
    #[test]
    fn block_type_limits_are_clear_errors() {
        let shape = |head_dim| KvShape { layers: 1, kv_heads: 2, head_dim, block_size: 4, num_blocks: 2 };
        for t in KvDType::ALL.into_iter().filter(|t| t.block_type().is_some()) {
            let cache = KvCache::new(shape(64), &Device::Cpu, t).unwrap();
            assert!(cache.rotation().is_on(), "{t}");
            assert!(!cache.with_rotation(false).rotation().is_on(), "{t}");
            let err = KvCache::new(shape(8), &Device::Cpu, t).err().unwrap().to_string();
            assert!(err.contains(&format!("{t} KV needs a head width that is a multiple of 32; this model's is 8")));
            let err = KvCache::new_tensors(shape(64), &Device::Cpu, t).err().unwrap().to_string();
            assert!(err.contains(&format!("{t} KV runs on the CPU only")), "{err}");
        }
        assert!(KvCache::new_tensors(shape(8), &Device::Cpu, KvDType::BF16).is_ok());
        assert!(!KvCache::new(shape(64), &Device::Cpu, KvDType::F16).unwrap().rotation().is_on());
    }
}
