//! Memory-mapped GGUF reader, bounds-checked against hostile files: every length and count is checked
//! against the bytes left before anything is allocated, and no input makes it panic.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::value::{Array, Value, ValueType};
use super::{align_up, tensor_size, GgufError, TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC};
use super::{MAX_ARRAY_DEPTH, MAX_DIMS, MAX_NAME_LEN};
use crate::GgmlType;

/// Fewest bytes a metadata entry takes: key length, type id, one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Fewest bytes a tensor info takes: name length, n_dims, one dim, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// Most entries preallocated from a count read from the file.
const PREALLOC_CAP: usize = 4096;

/// An opened GGUF file, memory-mapped; metadata kept in file order.
pub struct GgufFile {
    path: PathBuf,
    mmap: Mmap,
    header: Header,
}

/// Everything parsed from the file apart from the tensor data.
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) alignment: u64,
    pub(crate) metadata: Vec<(String, Value)>,
    pub(crate) keys: HashMap<String, usize>,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) by_name: HashMap<String, usize>,
    pub(crate) data_start: u64,
}

impl GgufFile {
    /// Opens and validates a GGUF file; the file must not be modified while it is open (it is mmapped).
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; like every mmap-based model loader we rely on the file not being
        // truncated or rewritten while open, which the doc comment states.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse(&mmap, path)?;
        Ok(GgufFile { path: path.to_path_buf(), mmap, header })
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// All metadata entries in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.header.metadata
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.header.keys.get(key).map(|&i| &self.header.metadata[i].1)
    }

    /// Frees the array values of the metadata keys that start with `prefix`, which nothing will read again (the
    /// tokenizer's vocabulary, tens of MiB for a 262k-token vocabulary, once the tokenizer is built): the keys are
    /// gone from [`GgufFile::metadata`] and [`GgufFile::get`] after.
    pub fn drop_arrays(&mut self, prefix: &str) {
        let h = &mut self.header;
        h.metadata.retain(|(key, value)| !(key.starts_with(prefix) && matches!(value, Value::Array(_))));
        h.keys = h.metadata.iter().enumerate().map(|(i, (key, _))| (key.clone(), i)).collect();
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    /// The info of a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.header.by_name.get(name).map(|&i| &self.header.tensors[i])
    }

    /// A tensor's bytes, borrowed from the mmap (empty if `t` describes a range outside this file).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = self.header.data_start.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.size));
        match (start, end) {
            (Some(s), Some(e)) => self.mmap.get(s as usize..e as usize).unwrap_or(&[]),
            _ => &[],
        }
    }

    /// The memory map of the whole file.
    pub(crate) fn mmap(&self) -> &Mmap {
        &self.mmap
    }

    /// The data alignment (`general.alignment` or 32).
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Absolute file offset of the tensor data section.
    pub fn data_start(&self) -> u64 {
        self.header.data_start
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.header.version)
            .field("metadata", &self.header.metadata.len())
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

/// A cursor over the file bytes that reports errors against the file path.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn file_size(&self) -> u64 {
        self.buf.len() as u64
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        match self.pos.checked_add(n).and_then(|end| self.buf.get(self.pos..end)) {
            Some(bytes) => {
                self.pos += n;
                Ok(bytes)
            }
            None => Err(GgufError::Truncated {
                path: self.path.to_path_buf(),
                what: what(),
                at: self.pos as u64,
                file_size: self.file_size(),
            }),
        }
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Reads a count and checks that `count` items of at least `min_size` bytes fit in the rest of the file.
    fn count(&mut self, min_size: u64, what: &dyn Fn() -> String) -> Result<usize, GgufError> {
        let at = self.pos as u64;
        let count = self.u64(what)?;
        let remaining = self.remaining();
        if count.checked_mul(min_size).is_none_or(|need| need > remaining) {
            return Err(GgufError::CountTooLarge { path: self.path.to_path_buf(), what: what(), count, at, remaining });
        }
        Ok(count as usize)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let at = self.pos as u64;
        let len = self.u64(what)?;
        let remaining = self.remaining();
        if len > remaining {
            return Err(GgufError::StringTooLong { path: self.path.to_path_buf(), at, len, remaining });
        }
        let start = self.pos as u64;
        let bytes = self.take(len as usize, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { path: self.path.to_path_buf(), at: start }),
        }
    }

    fn value_type(&mut self, key: &str) -> Result<ValueType, GgufError> {
        let type_id = self.u32(&|| format!("the value type of key '{key}'"))?;
        ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            path: self.path.to_path_buf(),
            key: key.to_owned(),
            type_id,
        })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value, GgufError> {
        let what = || format!("the value of key '{key}'");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(&what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(self.u32(&what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => Value::Bool(self.bool(key)?),
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => Value::Array(self.array_value(key, depth + 1)?),
            ValueType::U64 => Value::U64(self.u64(&what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
        })
    }

    fn bool(&mut self, key: &str) -> Result<bool, GgufError> {
        match self.array::<1>(&|| format!("the value of key '{key}'"))?[0] {
            0 => Ok(false),
            1 => Ok(true),
            byte => Err(GgufError::InvalidBool { path: self.path.to_path_buf(), key: key.to_owned(), byte }),
        }
    }

    fn array_value(&mut self, key: &str, depth: usize) -> Result<Array, GgufError> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                path: self.path.to_path_buf(),
                key: key.to_owned(),
                max: MAX_ARRAY_DEPTH,
            });
        }
        let ty = self.value_type(key)?;
        let what = || format!("an element of array '{key}'");
        let n = self.count(ty.min_encoded_size(), &|| format!("length of array '{key}'"))?;
        macro_rules! read_all {
            ($variant:ident, $t:ty) => {{
                let bytes = self.take(n * size_of::<$t>(), &what)?;
                Array::$variant(
                    bytes
                        .chunks_exact(size_of::<$t>())
                        .map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            ValueType::U8 => Array::U8(self.take(n, &what)?.to_vec()),
            ValueType::I8 => read_all!(I8, i8),
            ValueType::U16 => read_all!(U16, u16),
            ValueType::I16 => read_all!(I16, i16),
            ValueType::U32 => read_all!(U32, u32),
            ValueType::I32 => read_all!(I32, i32),
            ValueType::F32 => read_all!(F32, f32),
            ValueType::U64 => read_all!(U64, u64),
            ValueType::I64 => read_all!(I64, i64),
            ValueType::F64 => read_all!(F64, f64),
            ValueType::Bool => Array::Bool((0..n).map(|_| self.bool(key)).collect::<Result<_, _>>()?),
            ValueType::String => Array::String((0..n).map(|_| self.string(&what)).collect::<Result<_, _>>()?),
            ValueType::Array => {
                Array::Array((0..n).map(|_| self.array_value(key, depth + 1)).collect::<Result<_, _>>()?)
            }
        })
    }
}

/// Parses and validates everything but the tensor bytes; `path` only labels errors.
pub(crate) fn parse(buf: &[u8], path: &Path) -> Result<Header, GgufError> {
    let mut c = Cursor { buf, pos: 0, path };
    let err_path = || path.to_path_buf();
    let magic = c
        .take(4, &|| "the magic bytes".into())
        .map_err(|_| GgufError::BadMagic { path: err_path(), found: buf.get(..4).unwrap_or(buf).to_vec() })?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { path: err_path(), found: magic.to_vec() });
    }
    let version = c.u32(&|| "the version".into())?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { path: err_path(), version });
    }
    let n_tensors = c.u64(&|| "the tensor count".into())?;
    let n_kv = c.count(MIN_KV_BYTES, &|| "metadata count".into())?;
    // Checked after the KV count was read, against the bytes after it.
    if n_tensors.checked_mul(MIN_TENSOR_INFO_BYTES).is_none_or(|need| need > c.remaining()) {
        return Err(GgufError::CountTooLarge {
            path: err_path(),
            what: "tensor count".into(),
            count: n_tensors,
            at: 8,
            remaining: c.remaining(),
        });
    }

    // Capacities are capped: memory grows only with entries actually parsed.
    let mut metadata = Vec::with_capacity(n_kv.min(PREALLOC_CAP));
    let mut keys = HashMap::with_capacity(n_kv.min(PREALLOC_CAP));
    for i in 0..n_kv {
        let key = c.string(&|| format!("metadata key #{i}"))?;
        let ty = c.value_type(&key)?;
        let value = c.value(ty, &key, 0)?;
        if keys.insert(key.clone(), metadata.len()).is_some() {
            return Err(GgufError::DuplicateKey { path: err_path(), key });
        }
        metadata.push((key, value));
    }
    let alignment = match keys.get(ALIGNMENT_KEY).map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(other) => return Err(GgufError::BadAlignment { path: err_path(), found: format!("{other:?}") }),
    };

    let n_tensors = n_tensors as usize;
    let mut tensors = Vec::with_capacity(n_tensors.min(PREALLOC_CAP));
    let mut by_name = HashMap::with_capacity(n_tensors.min(PREALLOC_CAP));
    for i in 0..n_tensors {
        let t = tensor_info(&mut c, i)?;
        if by_name.insert(t.name.clone(), tensors.len()).is_some() {
            return Err(GgufError::DuplicateTensor { path: err_path(), name: t.name });
        }
        tensors.push(t);
    }
    let data_start = align_up(c.pos as u64, alignment).unwrap_or(u64::MAX);
    check_data_ranges(&tensors, alignment, data_start, c.file_size(), path)?;
    Ok(Header { version, alignment, metadata, keys, tensors, by_name, data_start })
}

/// Reads one tensor info and checks its name, dims and type.
fn tensor_info(c: &mut Cursor<'_>, i: usize) -> Result<TensorInfo, GgufError> {
    let file = c.path;
    let path = || file.to_path_buf();
    let name = c.string(&|| format!("the name of tensor #{i}"))?;
    if name.len() > MAX_NAME_LEN {
        return Err(GgufError::NameTooLong { path: path(), len: name.len(), name });
    }
    let what = || format!("the info of tensor '{name}'");
    let n_dims = c.u32(&what)?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(GgufError::BadDimCount { path: path(), name, n_dims });
    }
    let dims = (0..n_dims).map(|_| c.u64(&what)).collect::<Result<Vec<_>, _>>()?;
    let type_id = c.u32(&what)?;
    let offset = c.u64(&what)?;
    let Some(ty) = GgmlType::from_id(type_id) else {
        return Err(GgufError::UnknownTensorType { path: path(), name, type_id });
    };
    let size = match tensor_size(&dims, ty) {
        Ok(size) => size,
        Err(true) => {
            return Err(GgufError::BlockMisaligned { path: path(), name, ne0: dims[0], ty, block: ty.block_size() })
        }
        Err(false) => return Err(GgufError::ShapeOverflow { path: path(), name, dims }),
    };
    Ok(TensorInfo { name, dims, ty, offset, size })
}

/// Checks offsets are aligned, inside the file, and that no two tensors overlap.
fn check_data_ranges(
    tensors: &[TensorInfo],
    alignment: u64,
    data_start: u64,
    file_size: u64,
    path: &Path,
) -> Result<(), GgufError> {
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedOffset {
                path: path.to_path_buf(),
                name: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = data_start.checked_add(t.offset).and_then(|s| s.checked_add(t.size));
        if end.is_none_or(|end| end > file_size) {
            return Err(GgufError::TensorOutOfBounds {
                path: path.to_path_buf(),
                name: t.name.clone(),
                offset: t.offset,
                size: t.size,
                data_start,
                file_size,
            });
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        // Offsets and sizes are in bounds, so the sum cannot overflow.
        if pair[0].offset + pair[0].size > pair[1].offset {
            return Err(GgufError::TensorOverlap {
                path: path.to_path_buf(),
                name: pair[1].name.clone(),
                other: pair[0].name.clone(),
            });
        }
    }
    Ok(())
}
