//! GGUF v2/v3 container: a bounds-checked memory-mapped reader and a streaming v3 writer.
//!
//! Layout and limits follow llama.cpp's `gguf.cpp` (see `docs/formats.md` §1.1): little-endian only,
//! tensor names below 64 bytes, 1 to 4 dims in ggml order (`ne[0]` innermost), data offsets relative to
//! the aligned start of the data section.

pub mod lora;
pub mod pre;
mod reader;
mod value;
mod writer;

#[cfg(test)]
mod reader_tests;
#[cfg(test)]
mod testutil;

use std::io;
use std::path::PathBuf;

use crate::GgmlType;

pub use reader::GgufFile;
pub use value::{Array, Value, ValueType};
pub use writer::{GgufWriter, TensorSpec};

/// The four magic bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The version the writer emits.
pub const VERSION: u32 = 3;
/// Tensor data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that overrides the alignment (a u32 power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// Longest tensor name in bytes (ggml's `GGML_MAX_NAME` is 64 including the NUL).
pub const MAX_NAME_LEN: usize = 63;
/// Most dimensions a tensor may have.
pub const MAX_DIMS: usize = 4;
/// Deepest nesting of arrays inside arrays the reader accepts.
pub const MAX_ARRAY_DEPTH: usize = 8;

/// One tensor's entry: name, dims in ggml order (`ne[0]` innermost), type, offset relative to the data section, byte size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in ggml order: `dims[0]` is the contiguous (innermost) one.
    pub dims: Vec<u64>,
    /// Element encoding.
    pub ty: GgmlType,
    /// Byte offset of the data from the start of the data section.
    pub offset: u64,
    /// Byte size of the data (without padding).
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements (product of the dims).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The shape in PyTorch (row-major) order: the ggml dims reversed.
    pub fn torch_shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// Everything that can go wrong reading or writing a GGUF file; reader messages name the file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error("{}: not a GGUF file (magic bytes {found:02x?}, expected \"GGUF\")", path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// A version other than 2 or 3 (or a big-endian file).
    #[error("{}: unsupported GGUF version {version} (tgi reads little-endian v2 and v3)", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version field as read little-endian.
        version: u32,
    },
    /// The file ends inside a structure.
    #[error("{}: truncated: file ends at byte {file_size} while reading {what} at byte {at}", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was being read.
        what: String,
        /// Where it starts.
        at: u64,
        /// The file size.
        file_size: u64,
    },
    /// A count (tensors, keys, array elements) larger than the rest of the file could hold.
    #[error("{}: {what} {count} at byte {at} cannot fit in the {remaining} bytes left in the file", path.display())]
    CountTooLarge {
        /// The file.
        path: PathBuf,
        /// Which count.
        what: String,
        /// The count read.
        count: u64,
        /// Where it was read.
        at: u64,
        /// Bytes left after it.
        remaining: u64,
    },
    /// A string length beyond the end of the file.
    #[error("{}: string at byte {at} claims {len} bytes but only {remaining} remain", path.display())]
    StringTooLong {
        /// The file.
        path: PathBuf,
        /// Where the length field is.
        at: u64,
        /// The claimed length.
        len: u64,
        /// Bytes left after the length field.
        remaining: u64,
    },
    /// A string that is not UTF-8.
    #[error("{}: string at byte {at} is not valid UTF-8", path.display())]
    InvalidUtf8 {
        /// The file.
        path: PathBuf,
        /// Where the string's bytes start.
        at: u64,
    },
    /// A metadata value type id outside 0..=12.
    #[error("{}: key '{key}' has unknown value type {type_id}", path.display())]
    UnknownValueType {
        /// The file.
        path: PathBuf,
        /// The key holding it.
        key: String,
        /// The type id read.
        type_id: u32,
    },
    /// A bool byte other than 0 or 1.
    #[error("{}: key '{key}' has bool byte {byte} (expected 0 or 1)", path.display())]
    InvalidBool {
        /// The file.
        path: PathBuf,
        /// The key holding it.
        key: String,
        /// The byte read.
        byte: u8,
    },
    /// Arrays nested deeper than [`MAX_ARRAY_DEPTH`].
    #[error("{}: key '{key}' nests arrays deeper than {max} levels", path.display())]
    NestingTooDeep {
        /// The file.
        path: PathBuf,
        /// The key holding it.
        key: String,
        /// The limit.
        max: usize,
    },
    /// A metadata key that appears twice.
    #[error("{}: duplicate metadata key '{key}'", path.display())]
    DuplicateKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// `general.alignment` that is not a u32 power of two.
    #[error("{}: general.alignment must be a u32 power of two, found {found}", path.display())]
    BadAlignment {
        /// The file.
        path: PathBuf,
        /// The value found, printed.
        found: String,
    },
    /// A tensor name of [`MAX_NAME_LEN`]+1 bytes or more.
    #[error("{}: tensor name '{name}' is {len} bytes (max {MAX_NAME_LEN})", path.display())]
    NameTooLong {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A tensor name that appears twice.
    #[error("{}: duplicate tensor name '{name}'", path.display())]
    DuplicateTensor {
        /// The file.
        path: PathBuf,
        /// The name.
        name: String,
    },
    /// A tensor with 0 or more than [`MAX_DIMS`] dims.
    #[error("{}: tensor '{name}' has {n_dims} dims (must be 1..={MAX_DIMS})", path.display())]
    BadDimCount {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The count read.
        n_dims: u32,
    },
    /// Dims whose element count or byte size overflows.
    #[error("{}: tensor '{name}' dims {dims:?} overflow the element count or byte size", path.display())]
    ShapeOverflow {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The dims read.
        dims: Vec<u64>,
    },
    /// A tensor type id tgi does not know.
    #[error("{}: tensor '{name}' has unknown or unsupported ggml type id {type_id}", path.display())]
    UnknownTensorType {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The id read.
        type_id: u32,
    },
    /// `ne[0]` not a multiple of the type's block size.
    #[error("{}: tensor '{name}' ne[0] = {ne0} is not a multiple of the {ty} block size {block}", path.display())]
    BlockMisaligned {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The innermost dim.
        ne0: u64,
        /// The type.
        ty: GgmlType,
        /// Its block size.
        block: usize,
    },
    /// A data offset that is not a multiple of the alignment.
    #[error("{}: tensor '{name}' offset {offset} is not a multiple of the alignment {alignment}", path.display())]
    MisalignedOffset {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// The offset read.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// Tensor data past the end of the file.
    #[error(
        "{}: tensor '{name}' data [offset {offset}, {size} bytes] lies outside the file (size {file_size}, data section at byte {data_start})",
        path.display()
    )]
    TensorOutOfBounds {
        /// The file.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its offset in the data section.
        offset: u64,
        /// Its byte size.
        size: u64,
        /// Absolute start of the data section.
        data_start: u64,
        /// The file size.
        file_size: u64,
    },
    /// Two tensors whose data ranges overlap.
    #[error("{}: tensor '{name}' data overlaps tensor '{other}'", path.display())]
    TensorOverlap {
        /// The file.
        path: PathBuf,
        /// The later tensor.
        name: String,
        /// The tensor it overlaps.
        other: String,
    },
    /// Writer: the output failed.
    #[error("writing GGUF failed")]
    Write(#[source] io::Error),
    /// Writer: a metadata entry that cannot be written.
    #[error("writing GGUF: metadata key '{key}': {reason}")]
    BadMetadata {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Writer: a tensor spec that cannot be written.
    #[error("writing GGUF: tensor '{name}': {reason}")]
    BadTensorSpec {
        /// The tensor.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Writer: `write_tensor` called out of the planned order or with an unplanned name.
    #[error("writing GGUF: got tensor '{got}' but expected {}", expected.as_deref().map_or("no more tensors".to_string(), |e| format!("'{e}'")))]
    UnexpectedTensor {
        /// The next planned tensor, if any.
        expected: Option<String>,
        /// The name passed.
        got: String,
    },
    /// Writer: tensor bytes of the wrong length.
    #[error("writing GGUF: tensor '{name}' needs {expected} bytes, got {got}")]
    WrongTensorSize {
        /// The tensor.
        name: String,
        /// Bytes its dims and type call for.
        expected: u64,
        /// Bytes passed.
        got: u64,
    },
    /// Writer: `finish` called before every planned tensor was written.
    #[error("writing GGUF: {count} planned tensor(s) not written, first '{first}'")]
    MissingTensors {
        /// How many are missing.
        count: usize,
        /// The first missing one.
        first: String,
    },
}

/// Rounds `x` up to a multiple of `align` (a power of two), or None on overflow.
fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// Byte size of a tensor, checking ggml's limits: elements fit in i64, `ne[0]` a whole number of
/// blocks. Returns `Err(true)` for a block-size violation, `Err(false)` for an overflow.
fn tensor_size(dims: &[u64], ty: GgmlType) -> Result<u64, bool> {
    let n = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64 && dims.iter().all(|&d| d <= i64::MAX as u64))
        .ok_or(false)?;
    if dims.first().is_some_and(|&ne0| ne0 % ty.block_size() as u64 != 0) {
        return Err(true);
    }
    ty.bytes_for(n).ok_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_rounds() {
        assert_eq!(align_up(0, 32), Some(0));
        assert_eq!(align_up(1, 32), Some(32));
        assert_eq!(align_up(64, 32), Some(64));
        assert_eq!(align_up(u64::MAX - 3, 32), None);
    }

    #[test]
    fn tensor_size_checks() {
        assert_eq!(tensor_size(&[256, 2], GgmlType::Q4_K), Ok(288));
        assert_eq!(tensor_size(&[100, 2], GgmlType::Q4_K), Err(true));
        assert_eq!(tensor_size(&[u64::MAX, 2], GgmlType::F32), Err(false));
        assert_eq!(tensor_size(&[1 << 62, 1], GgmlType::F32), Err(false));
        assert_eq!(tensor_size(&[0, 7], GgmlType::F16), Ok(0));
    }

    #[test]
    fn torch_shape_reverses() {
        let t = TensorInfo { name: "w".into(), dims: vec![3, 5], ty: GgmlType::F32, offset: 0, size: 60 };
        assert_eq!(t.torch_shape(), vec![5, 3]);
        assert_eq!(t.n_elements(), 15);
    }

    #[test]
    fn out_of_bounds_message() {
        let e = GgufError::TensorOutOfBounds {
            path: "model.gguf".into(),
            name: "blk.0.attn_q.weight".into(),
            offset: 4096,
            size: 8192,
            data_start: 640,
            file_size: 6000,
        };
        assert_eq!(
            e.to_string(),
            "model.gguf: tensor 'blk.0.attn_q.weight' data [offset 4096, 8192 bytes] lies outside the file \
             (size 6000, data section at byte 640)"
        );
    }
}
