//! The seam that makes GGUF files and safetensors checkpoints look the same to a loader: named tensors
//! with PyTorch-order shapes, read as f32 or as raw bytes straight from the mmap.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::convert::{bf16_to_f32, f16_to_f32, f32_from_bytes};
use crate::gguf::{GgufError, GgufFile};
use crate::safetensors::{SafetensorsError, SafetensorsSet};
use crate::GgmlType;

/// Element type of a stored tensor: the safetensors dtypes, plus GGUF block-quantized types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit float.
    F64,
    /// Signed byte.
    I8,
    /// Unsigned byte.
    U8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
    /// Boolean (one byte).
    Bool,
    /// A GGUF block-quantized type (never F32/F16/BF16, which map to the plain variants).
    Ggml(GgmlType),
    /// A safetensors dtype tgi does not handle (FP8, FP4, complex...), by its safetensors name.
    Other(&'static str),
}

impl DType {
    /// The dtype of a GGUF tensor type.
    pub fn from_ggml(ty: GgmlType) -> DType {
        match ty {
            GgmlType::F32 => DType::F32,
            GgmlType::F16 => DType::F16,
            GgmlType::BF16 => DType::BF16,
            q => DType::Ggml(q),
        }
    }

    /// Whether `read_f32` can convert this dtype (F32, F16, BF16, and GGUF's block types, which it dequantizes).
    pub fn is_readable_as_f32(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::Ggml(_))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Ggml(t) => write!(f, "{t}"),
            DType::Other(name) => f.write_str(name),
            plain => write!(f, "{}", format!("{plain:?}").to_uppercase()),
        }
    }
}

/// A tensor's name, shape (row-major, PyTorch order) and dtype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    /// Tensor name as stored.
    pub name: String,
    /// Shape, outermost dimension first.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
}

/// Errors from opening or reading a tensor source; messages name the file.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A GGUF file could not be opened.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// A safetensors checkpoint could not be opened.
    #[error(transparent)]
    Safetensors(#[from] SafetensorsError),
    /// No tensor of that name.
    #[error("{}: no tensor named '{name}'", origin.display())]
    NotFound {
        /// The file or checkpoint directory.
        origin: PathBuf,
        /// The name asked for.
        name: String,
    },
    /// The tensor's dtype cannot be read as f32.
    #[error("{}: tensor '{name}' is {dtype}, which cannot be read as f32 (F32, F16 and BF16 can)", file.display())]
    NotFloat {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: DType,
    },
    /// A block-quantized tensor's bytes could not be decoded.
    #[error("{}: tensor '{name}': {message}", file.display())]
    Dequantize {
        /// The file holding the tensor.
        file: PathBuf,
        /// The tensor.
        name: String,
        /// What the decoder said.
        message: String,
    },
    /// A path that is neither a `.gguf` file, a `.safetensors` file nor a directory.
    #[error("{}: not a .gguf file, a .safetensors file or a checkpoint directory", path.display())]
    UnknownFormat {
        /// The path given.
        path: PathBuf,
    },
}

/// Anything that holds named tensors: lists them and reads one as f32 (converting F16/BF16) or as raw bytes.
pub trait TensorSource: Send + Sync {
    /// All tensors, in storage order.
    fn tensors(&self) -> Vec<TensorMeta>;
    /// A tensor's elements as f32 (row-major) into `out`, reusing its allocation; F32, F16 and BF16 only.
    fn read_f32_into(&self, name: &str, out: &mut Vec<f32>) -> Result<(), SourceError>;
    /// A tensor's elements as f32 (row-major); F32, F16 and BF16 only.
    fn read_f32(&self, name: &str) -> Result<Vec<f32>, SourceError> {
        let mut out = Vec::new();
        self.read_f32_into(name, &mut out)?;
        Ok(out)
    }
    /// A tensor's stored bytes, borrowed from the mmap.
    fn raw_bytes(&self, name: &str) -> Result<&[u8], SourceError>;
    /// Drops a tensor's pages from this process's resident memory once it has been consumed,
    /// so that streaming over a model keeps memory near one tensor (reading it again re-faults it).
    fn release(&self, name: &str);
}

/// Tells the kernel that `bytes`, a slice of `mmap`, is not needed for now.
pub(crate) fn release_pages(mmap: &memmap2::Mmap, bytes: &[u8]) {
    let offset = (bytes.as_ptr() as usize).wrapping_sub(mmap.as_ptr() as usize);
    if bytes.is_empty() || offset.checked_add(bytes.len()).is_none_or(|end| end > mmap.len()) {
        return;
    }
    // SAFETY: the map is a read-only private mapping of a file that is not modified while open:
    // after MADV_DONTNEED a later access re-reads the same bytes from the file, so slices that
    // are still borrowed keep their contents.
    let _ = unsafe { mmap.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, bytes.len()) };
}

/// Opens a `.gguf` file, a `.safetensors` file, or a checkpoint directory (see [`SafetensorsSet::open_dir`]).
pub fn open(path: &Path) -> Result<Box<dyn TensorSource>, SourceError> {
    if path.is_dir() {
        return Ok(Box::new(SafetensorsSet::open_dir(path)?));
    }
    match path.extension().and_then(|e| e.to_str()) {
        Some("gguf") => Ok(Box::new(GgufFile::open(path)?)),
        Some("safetensors") => Ok(Box::new(SafetensorsSet::open_files(&[path.to_path_buf()])?)),
        _ => Err(SourceError::UnknownFormat { path: path.to_path_buf() }),
    }
}

/// Converts stored bytes of `dtype` to f32, or reports that the dtype is not a float tgi reads.
/// Source bytes converted between two releases of their pages, so a tensor's mapped pages
/// never all sit in memory at once.
const SLAB: usize = 16 << 20;

/// Widens a slice of stored floats to f32.
type Converter = fn(&[u8], &mut [f32]);

/// Converts a tensor's stored bytes (a slice of `mmap`) to f32 into `out`, releasing the mapped
/// pages slab by slab as they are consumed.
pub(crate) fn bytes_to_f32(
    mmap: &memmap2::Mmap,
    bytes: &[u8],
    dtype: DType,
    file: &Path,
    name: &str,
    out: &mut Vec<f32>,
) -> Result<(), SourceError> {
    let (width, convert): (usize, Converter) = match dtype {
        DType::F32 => (4, f32_from_bytes),
        DType::F16 => (2, f16_to_f32),
        DType::BF16 => (2, bf16_to_f32),
        other => return Err(SourceError::NotFloat { file: file.to_path_buf(), name: name.to_owned(), dtype: other }),
    };
    out.resize(bytes.len() / width, 0.0); // every element is overwritten below
    for (src, dst) in bytes.chunks(SLAB).zip(out.chunks_mut(SLAB / width)) {
        convert(src, dst);
        release_pages(mmap, src);
    }
    Ok(())
}

impl TensorSource for GgufFile {
    fn tensors(&self) -> Vec<TensorMeta> {
        GgufFile::tensors(self)
            .iter()
            .map(|t| TensorMeta { name: t.name.clone(), shape: t.torch_shape(), dtype: DType::from_ggml(t.ty) })
            .collect()
    }

    /// Block-quantized tensors are dequantized as ggml's `dequantize_row_*` does.
    fn read_f32_into(&self, name: &str, out: &mut Vec<f32>) -> Result<(), SourceError> {
        let t = self.tensor(name).ok_or_else(|| not_found(self.path(), name))?;
        let bytes = self.tensor_data(t);
        if !t.ty.is_quantized() {
            return bytes_to_f32(self.mmap(), bytes, DType::from_ggml(t.ty), self.path(), name, out);
        }
        let (block, size) = (t.ty.block_size(), t.ty.type_size());
        out.resize(bytes.len() / size * block, 0.0); // every element is overwritten below
        let blocks_per_slab = (SLAB / size).max(1);
        for (src, dst) in bytes.chunks(blocks_per_slab * size).zip(out.chunks_mut(blocks_per_slab * block)) {
            crate::quant::dequantize_row(t.ty, src, dst).map_err(|e| SourceError::Dequantize {
                file: self.path().to_path_buf(),
                name: name.to_owned(),
                message: e.to_string(),
            })?;
            release_pages(self.mmap(), src);
        }
        Ok(())
    }

    fn raw_bytes(&self, name: &str) -> Result<&[u8], SourceError> {
        let t = self.tensor(name).ok_or_else(|| not_found(self.path(), name))?;
        Ok(self.tensor_data(t))
    }

    fn release(&self, name: &str) {
        if let Some(t) = self.tensor(name) {
            release_pages(self.mmap(), self.tensor_data(t));
        }
    }
}

/// The error for a missing tensor.
pub(crate) fn not_found(origin: &Path, name: &str) -> SourceError {
    SourceError::NotFound { origin: origin.to_path_buf(), name: name.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{GgufWriter, TensorSpec};

    fn stories() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k")
    }

    #[test]
    fn dtype_names() {
        assert_eq!(DType::BF16.to_string(), "BF16");
        assert_eq!(DType::Ggml(GgmlType::Q4_K).to_string(), "q4_K");
        assert_eq!(DType::Other("F8_E4M3").to_string(), "F8_E4M3");
        assert_eq!(DType::from_ggml(GgmlType::F16), DType::F16);
        assert!(!DType::I32.is_readable_as_f32());
    }

    #[test]
    fn gguf_source_reads_floats_and_dequantizes_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let f16s: Vec<u8> = [1.5f32, -2.0, 0.25].iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
        let specs = vec![
            TensorSpec::from_torch_shape("h", &[3, 1], GgmlType::F16),
            TensorSpec::from_torch_shape("q", &[2, 32], GgmlType::Q8_0),
        ];
        let mut w = GgufWriter::new(std::fs::File::create(&path).unwrap(), vec![], specs).unwrap();
        w.write_tensor("h", &f16s).unwrap();
        // Two Q8_0 blocks: scale 0.5 (f16 0x3800) with quants 0..32, then scale 0 with anything.
        let mut q = vec![0x00, 0x38];
        q.extend(0..32u8);
        q.extend([0, 0]);
        q.extend([7u8; 32]);
        w.write_tensor("q", &q).unwrap();
        w.finish().unwrap();

        let src = open(&path).unwrap();
        let metas = src.tensors();
        assert_eq!(metas[0], TensorMeta { name: "h".into(), shape: vec![3, 1], dtype: DType::F16 });
        assert_eq!(metas[1].shape, vec![2, 32]);
        assert_eq!(metas[1].dtype, DType::Ggml(GgmlType::Q8_0));
        assert_eq!(src.read_f32("h").unwrap(), vec![1.5, -2.0, 0.25]);
        assert_eq!(src.raw_bytes("q").unwrap().len(), 68);
        let q = src.read_f32("q").unwrap();
        assert_eq!(q.len(), 64);
        assert!(q[..32].iter().enumerate().all(|(i, &x)| x == i as f32 * 0.5), "{q:?}");
        assert!(q[32..].iter().all(|&x| x == 0.0));
        let e = src.raw_bytes("nope").unwrap_err();
        assert!(e.to_string().ends_with("m.gguf: no tensor named 'nope'"), "{e}");
    }

    #[test]
    fn gguf_and_safetensors_stories_agree() {
        let gguf = open(&stories().join("stories260k-f32.gguf")).unwrap();
        let st = open(&stories().join("hf")).unwrap();
        assert_eq!(gguf.tensors().len(), 48);
        // Norms are stored unpermuted by both converters.
        let a = gguf.read_f32("blk.0.attn_norm.weight").unwrap();
        let b = st.read_f32("model.layers.0.input_layernorm.weight").unwrap();
        assert_eq!(a, b);
        let emb = st.tensors().into_iter().find(|t| t.name == "model.embed_tokens.weight").unwrap();
        let gemb = gguf.tensors().into_iter().find(|t| t.name == "token_embd.weight").unwrap();
        assert_eq!((emb.shape.clone(), emb.dtype), (vec![512, 64], DType::F32));
        assert_eq!(gemb.shape, emb.shape);
        assert_eq!(gguf.read_f32("token_embd.weight").unwrap(), st.read_f32("model.embed_tokens.weight").unwrap());
        // Down projection: not permuted either; same row-major layout.
        assert_eq!(
            gguf.raw_bytes("blk.4.ffn_down.weight").unwrap(),
            st.raw_bytes("model.layers.4.mlp.down_proj.weight").unwrap()
        );
    }

    #[test]
    fn open_rejects_unknown_paths() {
        let e = open(Path::new("weights.bin")).err().unwrap();
        assert!(matches!(e, SourceError::UnknownFormat { .. }), "{e}");
        let e = open(Path::new("/nonexistent/m.gguf")).err().unwrap();
        assert!(matches!(e, SourceError::Gguf(GgufError::Io { .. })), "{e}");
    }
}
