//! Safetensors checkpoints over memmap2: one `model.safetensors` or the shards named in
//! `model.safetensors.index.json`, validated by the `safetensors` crate plus checks of our own.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use ::safetensors::tensor::Metadata;
use ::safetensors::{Dtype, SafeTensorError, SafeTensors};
use memmap2::Mmap;

use crate::source::{bytes_to_f32, not_found, DType, SourceError, TensorMeta, TensorSource};

mod stream;
#[cfg(test)]
mod tests;
mod write;

pub use stream::{StreamError, StreamWriter};
pub use write::{write_file, TensorOut};

/// File name of a single-file checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";
/// File name of the shard index of a sharded checkpoint.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Errors opening a safetensors checkpoint; messages name the file.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// A file could not be opened, mapped or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A file too short to hold the 8-byte header length.
    #[error("{}: file is {file_size} bytes, too short for a safetensors header", path.display())]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Its size.
        file_size: u64,
    },
    /// A header length that runs past the end of the file.
    #[error("{}: header length {len} runs past the end of the file ({file_size} bytes)", path.display())]
    HeaderPastEnd {
        /// The file.
        path: PathBuf,
        /// The header length read.
        len: u64,
        /// The file size.
        file_size: u64,
    },
    /// A header or layout the `safetensors` crate rejects (bad JSON, offsets out of range or overlapping, ...).
    #[error("{}: invalid safetensors file: {source}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The crate's error.
        source: SafeTensorError,
    },
    /// The same tensor name in two files of one checkpoint.
    #[error("tensor '{name}' is in both {} and {}", first.display(), second.display())]
    DuplicateTensor {
        /// The tensor.
        name: String,
        /// The file that had it first.
        first: PathBuf,
        /// The file that has it again.
        second: PathBuf,
    },
    /// A shard index that is not valid JSON with a `weight_map` of strings.
    #[error("{}: invalid shard index: {source}", path.display())]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A shard name in the index that is not a plain file name.
    #[error("{}: shard name '{shard}' is not a plain file name", index.display())]
    BadShardName {
        /// The index file.
        index: PathBuf,
        /// The name.
        shard: String,
    },
    /// A shard named in the index that does not exist.
    #[error("{}: shard '{shard}' does not exist", index.display())]
    MissingShard {
        /// The index file.
        index: PathBuf,
        /// The shard file name.
        shard: String,
    },
    /// A tensor the index places in a shard that lacks it.
    #[error("{}: index places tensor '{name}' in '{shard}', which does not contain it", index.display())]
    NotInShard {
        /// The index file.
        index: PathBuf,
        /// The tensor.
        name: String,
        /// The shard file name.
        shard: String,
    },
    /// A directory with neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error("{}: no {SINGLE_FILE} or {INDEX_FILE}", dir.display())]
    NoCheckpoint {
        /// The directory.
        dir: PathBuf,
    },
    /// A tensor whose dtype safetensors cannot hold (a GGUF block type).
    #[error("{}: tensor '{name}' is {dtype}, which safetensors cannot store", path.display())]
    UnwritableDtype {
        /// The file being written.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: DType,
    },
    /// `open_files` called with no files.
    #[error("no safetensors files given")]
    NoFiles,
}

/// The `weight_map` of a shard index (other fields ignored).
#[derive(serde::Deserialize)]
struct Index {
    weight_map: HashMap<String, String>,
}

/// One mapped file.
struct Shard {
    path: PathBuf,
    mmap: Mmap,
}

/// One tensor: its metadata and absolute byte range in its shard.
struct Entry {
    meta: TensorMeta,
    shard: usize,
    start: usize,
    end: usize,
}

/// A set of safetensors files forming one checkpoint, each mmapped; tensor names unique across files.
pub struct SafetensorsSet {
    origin: PathBuf,
    shards: Vec<Shard>,
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
}

impl SafetensorsSet {
    /// Opens `dir/model.safetensors.index.json` and its shards if present, else `dir/model.safetensors`.
    pub fn open_dir(dir: &Path) -> Result<SafetensorsSet, SafetensorsError> {
        let index_path = dir.join(INDEX_FILE);
        if index_path.is_file() {
            let mut set = open_index(dir, &index_path)?;
            set.origin = dir.to_path_buf();
            return Ok(set);
        }
        let single = dir.join(SINGLE_FILE);
        if single.is_file() {
            let mut set = SafetensorsSet::open_files(&[single])?;
            set.origin = dir.to_path_buf();
            return Ok(set);
        }
        Err(SafetensorsError::NoCheckpoint { dir: dir.to_path_buf() })
    }

    /// Opens the given files as one checkpoint (tensors listed file by file, in data order).
    pub fn open_files(files: &[PathBuf]) -> Result<SafetensorsSet, SafetensorsError> {
        let origin = match files {
            [] => return Err(SafetensorsError::NoFiles),
            [one] => one.clone(),
            [first, ..] => first.parent().map_or_else(|| first.clone(), Path::to_path_buf),
        };
        let mut set = SafetensorsSet { origin, shards: Vec::new(), entries: Vec::new(), by_name: HashMap::new() };
        for path in files {
            set.add_file(path)?;
        }
        Ok(set)
    }

    /// The files of the checkpoint, in the order they were opened.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|s| s.path.as_path())
    }

    /// The file holding a tensor.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        let e = &self.entries[*self.by_name.get(name)?];
        Some(&self.shards[e.shard].path)
    }

    /// Maps one file, validates it and adds its tensors.
    fn add_file(&mut self, path: &Path) -> Result<(), SafetensorsError> {
        let mmap = map(path)?;
        let (header_len, metadata) = parse_header(&mmap, path)?;
        let data_start = 8 + header_len;
        let shard = self.shards.len();
        for name in metadata.offset_keys() {
            // `offset_keys` lists exactly the names `info` knows.
            let Some(info) = metadata.info(&name) else {
                continue;
            };
            if let Some(&prev) = self.by_name.get(&name) {
                return Err(SafetensorsError::DuplicateTensor {
                    first: self.shards[self.entries[prev].shard].path.clone(),
                    second: path.to_path_buf(),
                    name,
                });
            }
            let (start, end) = info.data_offsets;
            let meta = TensorMeta { name: name.clone(), shape: info.shape.clone(), dtype: dtype(info.dtype) };
            self.by_name.insert(name, self.entries.len());
            self.entries.push(Entry { meta, shard, start: data_start + start, end: data_start + end });
        }
        self.shards.push(Shard { path: path.to_path_buf(), mmap });
        Ok(())
    }

    fn entry(&self, name: &str) -> Result<&Entry, SourceError> {
        self.by_name.get(name).map(|&i| &self.entries[i]).ok_or_else(|| not_found(&self.origin, name))
    }

    fn bytes(&self, e: &Entry) -> &[u8] {
        // Ranges were validated against the file by the safetensors crate.
        self.shards[e.shard].mmap.get(e.start..e.end).unwrap_or(&[])
    }
}

/// Reads a shard index, opens its shards and checks the index against them.
fn open_index(dir: &Path, index_path: &Path) -> Result<SafetensorsSet, SafetensorsError> {
    let text =
        std::fs::read(index_path).map_err(|source| SafetensorsError::Io { path: index_path.to_path_buf(), source })?;
    let index: Index = serde_json::from_slice(&text)
        .map_err(|source| SafetensorsError::BadIndex { path: index_path.to_path_buf(), source })?;
    let shard_names: BTreeSet<&str> = index.weight_map.values().map(String::as_str).collect();
    let mut files = Vec::with_capacity(shard_names.len());
    for shard in &shard_names {
        let bad = || SafetensorsError::BadShardName { index: index_path.to_path_buf(), shard: shard.to_string() };
        if Path::new(shard).file_name().and_then(|n| n.to_str()) != Some(shard) {
            return Err(bad());
        }
        let file = dir.join(shard);
        if !file.is_file() {
            return Err(SafetensorsError::MissingShard { index: index_path.to_path_buf(), shard: shard.to_string() });
        }
        files.push(file);
    }
    let set = SafetensorsSet::open_files(&files)?;
    let mut wrong: Vec<(&String, &String)> = index
        .weight_map
        .iter()
        .filter(|(name, shard)| set.file_of(name).and_then(|p| p.file_name()) != Some(shard.as_ref()))
        .collect();
    wrong.sort();
    match wrong.first() {
        Some((name, shard)) => Err(SafetensorsError::NotInShard {
            index: index_path.to_path_buf(),
            name: name.to_string(),
            shard: shard.to_string(),
        }),
        None => Ok(set),
    }
}

/// Checks the header length against the file, then lets the `safetensors` crate validate the header
/// and the data layout; returns the header length and the parsed metadata.
fn parse_header(buf: &[u8], path: &Path) -> Result<(usize, Metadata), SafetensorsError> {
    let file_size = buf.len() as u64;
    let Some(len_bytes) = buf.first_chunk::<8>() else {
        return Err(SafetensorsError::TooShort { path: path.to_path_buf(), file_size });
    };
    let len = u64::from_le_bytes(*len_bytes);
    if len > file_size - 8 {
        return Err(SafetensorsError::HeaderPastEnd { path: path.to_path_buf(), len, file_size });
    }
    SafeTensors::read_metadata(buf).map_err(|source| SafetensorsError::Invalid { path: path.to_path_buf(), source })
}

/// Memory-maps a file read-only.
fn map(path: &Path) -> Result<Mmap, SafetensorsError> {
    let io = |source| SafetensorsError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    // SAFETY: read-only map; the checkpoint must not be modified while open (as for every mmap loader).
    unsafe { Mmap::map(&file) }.map_err(io)
}

/// Our dtype for a safetensors dtype.
fn dtype(d: Dtype) -> DType {
    match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F64 => DType::F64,
        Dtype::I8 => DType::I8,
        Dtype::U8 => DType::U8,
        Dtype::I16 => DType::I16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::BOOL => DType::Bool,
        Dtype::F4 => DType::Other("F4"),
        Dtype::F6_E2M3 => DType::Other("F6_E2M3"),
        Dtype::F6_E3M2 => DType::Other("F6_E3M2"),
        Dtype::F8_E5M2 => DType::Other("F8_E5M2"),
        Dtype::F8_E4M3 => DType::Other("F8_E4M3"),
        Dtype::F8_E8M0 => DType::Other("F8_E8M0"),
        Dtype::F8_E4M3FNUZ => DType::Other("F8_E4M3FNUZ"),
        Dtype::F8_E5M2FNUZ => DType::Other("F8_E5M2FNUZ"),
        Dtype::C64 => DType::Other("C64"),
        _ => DType::Other("unknown"),
    }
}

impl TensorSource for SafetensorsSet {
    fn tensors(&self) -> Vec<TensorMeta> {
        self.entries.iter().map(|e| e.meta.clone()).collect()
    }

    fn read_f32_into(&self, name: &str, out: &mut Vec<f32>) -> Result<(), SourceError> {
        let e = self.entry(name)?;
        bytes_to_f32(&self.shards[e.shard].mmap, self.bytes(e), e.meta.dtype, &self.shards[e.shard].path, name, out)
    }

    fn raw_bytes(&self, name: &str) -> Result<&[u8], SourceError> {
        self.entry(name).map(|e| self.bytes(e))
    }

    fn release(&self, name: &str) {
        if let Ok(e) = self.entry(name) {
            crate::source::release_pages(&self.shards[e.shard].mmap, self.bytes(e));
        }
    }
}
