//! Importance matrices as llama.cpp's `llama-imatrix` writes them and `llama-quantize --imatrix` reads them: per
//! weight matrix, the per-column sums of the squared activations that met it and how many activation rows those
//! were. The GGUF form (`general.type = imatrix`) stores each entry as `NAME.in_sum2` (F32, `[cols, matrices]`, the
//! raw sums) and `NAME.counts` (F32, `[1, matrices]`), one matrix per expert of a mixture; the legacy `.dat` form
//! stores `sums / count · ncall` with one call count per entry.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::gguf::{GgufError, GgufFile, GgufWriter, TensorSpec, Value};
use crate::GgmlType;

/// The metadata key listing the texts a matrix was computed on.
pub const DATASETS_KEY: &str = "imatrix.datasets";
/// The metadata key with the number of chunks.
pub const CHUNK_COUNT_KEY: &str = "imatrix.chunk_count";
/// The metadata key with the tokens per chunk.
pub const CHUNK_SIZE_KEY: &str = "imatrix.chunk_size";
const SUMS_SUFFIX: &str = ".in_sum2";
const COUNTS_SUFFIX: &str = ".counts";

/// Errors reading or writing an importance matrix.
#[derive(Debug, thiserror::Error)]
pub enum ImatrixError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The GGUF container is malformed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The contents are not an importance matrix.
    #[error("{}: not an importance matrix: {reason}", path.display())]
    Malformed {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Writing failed.
    #[error("cannot write the importance matrix: {0}")]
    Write(std::io::Error),
}

/// One weight matrix's statistics (a mixture's experts: one matrix each).
#[derive(Clone, Debug, PartialEq)]
pub struct ImatrixEntry {
    /// Sums of squared activations, `cols` per matrix, matrix after matrix.
    pub sums: Vec<f32>,
    /// Activation rows summed, one per matrix.
    pub counts: Vec<u64>,
}

impl ImatrixEntry {
    /// An empty entry for `matrices` matrices of `cols` columns.
    pub fn new(cols: usize, matrices: usize) -> Self {
        ImatrixEntry { sums: vec![0.0; cols * matrices], counts: vec![0; matrices] }
    }

    /// Columns per matrix.
    pub fn cols(&self) -> usize {
        self.sums.len() / self.counts.len().max(1)
    }

    /// The importance of each column (per matrix): the mean squared activation, `1` for a matrix no row met, as
    /// llama-quantize derives it from a GGUF matrix.
    pub fn importance(&self) -> Vec<f32> {
        let cols = self.cols();
        let mut out = vec![1.0; self.sums.len()];
        for ((out, sums), &count) in out.chunks_mut(cols).zip(self.sums.chunks(cols)).zip(&self.counts) {
            if count > 0 {
                let count = count as f32;
                out.iter_mut().zip(sums).for_each(|(o, &s)| *o = s / count);
            }
        }
        out
    }

    /// Adds `other`'s sums and counts (same shape), as llama-imatrix combines files.
    fn add(&mut self, other: &ImatrixEntry) {
        self.sums.iter_mut().zip(&other.sums).for_each(|(a, b)| *a += b);
        self.counts.iter_mut().zip(&other.counts).for_each(|(a, b)| *a += b);
    }
}

/// An importance matrix: entries by weight name (`blk.0.attn_q.weight`), in name order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imatrix {
    /// The entries.
    pub entries: BTreeMap<String, ImatrixEntry>,
    /// The texts it was computed on.
    pub datasets: Vec<String>,
    /// Chunks of `chunk_size` tokens evaluated.
    pub chunk_count: u32,
    /// Tokens per chunk (0 in a legacy file, which does not say).
    pub chunk_size: u32,
}

impl Imatrix {
    /// Reads a GGUF importance matrix, or a legacy `.dat` one (whose sums are rescaled to raw sums with
    /// `legacy_chunk_size` tokens per call, as llama-imatrix does when it loads one).
    pub fn read(path: &Path, legacy_chunk_size: u32) -> Result<Imatrix, ImatrixError> {
        let bytes = std::fs::read(path).map_err(|source| ImatrixError::Io { path: path.into(), source })?;
        if bytes.starts_with(&crate::gguf::MAGIC) {
            Self::read_gguf(path)
        } else {
            read_legacy(path, &bytes, legacy_chunk_size)
        }
    }

    fn read_gguf(path: &Path) -> Result<Imatrix, ImatrixError> {
        let malformed = |reason: String| ImatrixError::Malformed { path: path.into(), reason };
        let file = GgufFile::open(path)?;
        let mut m = Imatrix {
            datasets: match file.get(DATASETS_KEY).and_then(Value::as_array) {
                Some(crate::gguf::Array::String(s)) => s.clone(),
                _ => Vec::new(),
            },
            chunk_count: file.get(CHUNK_COUNT_KEY).and_then(Value::as_u32).unwrap_or(0),
            chunk_size: file.get(CHUNK_SIZE_KEY).and_then(Value::as_u32).unwrap_or(0),
            ..Imatrix::default()
        };
        if file.get(CHUNK_COUNT_KEY).is_none() || file.get(CHUNK_SIZE_KEY).is_none() {
            return Err(malformed(format!("no {CHUNK_COUNT_KEY} / {CHUNK_SIZE_KEY} metadata")));
        }
        let floats = |name: &str| -> Result<Option<Vec<f32>>, ImatrixError> {
            let Some(t) = file.tensor(name) else { return Ok(None) };
            if t.ty != GgmlType::F32 {
                return Err(malformed(format!("{name} is {}, not F32", t.ty)));
            }
            let data = file.tensor_data(t);
            Ok(Some(data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()))
        };
        for t in file.tensors() {
            let Some(name) = t.name.strip_suffix(SUMS_SUFFIX) else { continue };
            let sums = floats(&t.name)?.expect("listed");
            let counts = floats(&format!("{name}{COUNTS_SUFFIX}"))?
                .ok_or_else(|| malformed(format!("{name} has sums and no counts")))?;
            if counts.is_empty() || !sums.len().is_multiple_of(counts.len()) {
                return Err(malformed(format!("{name}: {} sums for {} matrices", sums.len(), counts.len())));
            }
            if counts.iter().any(|c| !c.is_finite() || *c < 0.0) {
                return Err(malformed(format!("{name}: a count is negative or not finite")));
            }
            let counts = counts.iter().map(|&c| c.round() as u64).collect();
            m.entries.insert(name.to_string(), ImatrixEntry { sums, counts });
        }
        if m.entries.is_empty() {
            return Err(malformed("no entries".into()));
        }
        Ok(m)
    }

    /// Adds `other`'s entries (sums and counts of entries in both), datasets and chunks, as llama-imatrix's
    /// `--in-file` combines matrices; entries of different shapes are refused.
    pub fn merge(&mut self, other: Imatrix) -> Result<(), String> {
        for (name, e) in other.entries {
            match self.entries.get_mut(&name) {
                Some(mine) if mine.sums.len() != e.sums.len() || mine.counts.len() != e.counts.len() => {
                    return Err(format!(
                        "{name}: {} values for {} matrices against {} for {}",
                        e.sums.len(),
                        e.counts.len(),
                        mine.sums.len(),
                        mine.counts.len()
                    ));
                }
                Some(mine) => mine.add(&e),
                None => {
                    self.entries.insert(name, e);
                }
            }
        }
        self.datasets.extend(other.datasets);
        if self.chunk_size == 0 {
            self.chunk_size = other.chunk_size;
        }
        self.chunk_count = self.last_chunk();
        Ok(())
    }

    /// The chunks the largest count covers (llama-imatrix's `m_last_chunk`).
    pub fn last_chunk(&self) -> u32 {
        let max = self.entries.values().flat_map(|e| e.counts.iter().copied()).max().unwrap_or(0);
        (max / u64::from(self.chunk_size.max(1))) as u32
    }

    /// Writes the GGUF form: `general.type`, the datasets, chunk count and size, then each entry's sums and
    /// counts in name order (as llama-imatrix writes them).
    pub fn write_gguf<W: Write>(&self, out: W) -> Result<W, ImatrixError> {
        let metadata = vec![
            ("general.type".to_string(), Value::String("imatrix".into())),
            (DATASETS_KEY.to_string(), Value::strings(self.datasets.iter().cloned())),
            (CHUNK_COUNT_KEY.to_string(), Value::U32(self.chunk_count)),
            (CHUNK_SIZE_KEY.to_string(), Value::U32(self.chunk_size)),
        ];
        let written: Vec<(&String, &ImatrixEntry)> =
            self.entries.iter().filter(|(_, e)| !e.counts.is_empty()).collect();
        let mut specs = Vec::with_capacity(2 * written.len());
        for (name, e) in &written {
            let n = e.counts.len() as u64;
            specs.push(TensorSpec {
                name: format!("{name}{SUMS_SUFFIX}"),
                dims: vec![e.cols() as u64, n],
                ty: GgmlType::F32,
            });
            specs.push(TensorSpec { name: format!("{name}{COUNTS_SUFFIX}"), dims: vec![1, n], ty: GgmlType::F32 });
        }
        let mut w = GgufWriter::new(out, metadata, specs)?;
        for (name, e) in written {
            w.write_tensor(&format!("{name}{SUMS_SUFFIX}"), &le_bytes(e.sums.iter().copied()))?;
            w.write_tensor(&format!("{name}{COUNTS_SUFFIX}"), &le_bytes(e.counts.iter().map(|&c| c as f32)))?;
        }
        Ok(w.finish()?)
    }

    /// Writes the legacy `.dat` form: per entry its name, call count (`ceil(max count / chunk size)`) and
    /// `sums / count · calls`, then the chunk count and the last dataset (as llama-imatrix's `--output-format dat`).
    /// Entries no row met are left out.
    pub fn write_legacy<W: Write>(&self, mut out: W) -> Result<W, ImatrixError> {
        let chunk = u64::from(self.chunk_size.max(1));
        let stored: Vec<(&String, &ImatrixEntry)> =
            self.entries.iter().filter(|(_, e)| e.counts.iter().any(|&c| c > 0)).collect();
        let mut b = Vec::new();
        b.extend_from_slice(&(stored.len() as i32).to_le_bytes());
        for (name, e) in stored {
            b.extend_from_slice(&(name.len() as i32).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
            let calls = e.counts.iter().copied().max().unwrap_or(0).div_ceil(chunk) as i32;
            b.extend_from_slice(&calls.to_le_bytes());
            b.extend_from_slice(&(e.sums.len() as i32).to_le_bytes());
            let cols = e.cols();
            for (i, &s) in e.sums.iter().enumerate() {
                let (value, count) = match e.counts[i / cols] {
                    0 => (1.0, 1.0),
                    c => (s, c as f32),
                };
                b.extend_from_slice(&((value / count) * calls as f32).to_le_bytes());
            }
        }
        b.extend_from_slice(&(self.chunk_count as i32).to_le_bytes());
        let dataset = self.datasets.last().map_or("", String::as_str);
        b.extend_from_slice(&(dataset.len() as i32).to_le_bytes());
        b.extend_from_slice(dataset.as_bytes());
        out.write_all(&b).map_err(ImatrixError::Write)?;
        Ok(out)
    }
}

/// Little-endian bytes of `values`.
fn le_bytes(values: impl Iterator<Item = f32>) -> Vec<u8> {
    values.flat_map(f32::to_le_bytes).collect()
}

/// A legacy `.dat` matrix, its stored `sums / count · calls` turned back into raw sums of `chunk_size` tokens per
/// call (llama-imatrix's rule when it loads one).
fn read_legacy(path: &Path, bytes: &[u8], chunk_size: u32) -> Result<Imatrix, ImatrixError> {
    let malformed = |reason: &str| ImatrixError::Malformed { path: path.into(), reason: reason.into() };
    let mut r = Reader { bytes, at: 0 };
    let entries = r.i32().filter(|&n| n >= 1).ok_or_else(|| malformed("no entries"))?;
    let mut m = Imatrix { chunk_size, ..Imatrix::default() };
    for _ in 0..entries {
        let len = r.i32().and_then(|l| usize::try_from(l).ok()).ok_or_else(|| malformed("truncated entry name"))?;
        let name = r.take(len).ok_or_else(|| malformed("truncated entry name"))?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| malformed("an entry name is not UTF-8"))?;
        let calls = r.i32().ok_or_else(|| malformed("truncated call count"))?;
        let values = r.i32().filter(|&n| n >= 1).ok_or_else(|| malformed("an entry has no values"))? as usize;
        let data = r.take(values.checked_mul(4).ok_or_else(|| malformed("too many values"))?);
        let data = data.ok_or_else(|| malformed("truncated values"))?;
        let calls = u64::try_from(calls).unwrap_or(0);
        let sums = data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")) * chunk_size as f32)
            .collect();
        m.entries.insert(name, ImatrixEntry { sums, counts: vec![calls * u64::from(chunk_size)] });
    }
    if let Some(chunks) = r.i32() {
        m.chunk_count = u32::try_from(chunks).unwrap_or(0);
        let dataset = r.i32().and_then(|l| usize::try_from(l).ok()).filter(|&l| l > 0).and_then(|l| r.take(l));
        if let Some(d) = dataset {
            m.datasets.push(String::from_utf8_lossy(d).into_owned());
        }
    }
    Ok(m)
}

/// A cursor over a legacy file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len())?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Some(s)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4).map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Imatrix {
        let mut m = Imatrix { datasets: vec!["calibration.txt".into()], chunk_size: 4, ..Imatrix::default() };
        m.entries.insert("blk.0.attn_q.weight".into(), ImatrixEntry { sums: vec![4.0, 8.0, 12.0], counts: vec![8] });
        m.entries.insert(
            "blk.0.ffn_up_exps.weight".into(),
            ImatrixEntry { sums: vec![1.0, 2.0, 3.0, 4.0], counts: vec![2, 0] },
        );
        m.chunk_count = m.last_chunk();
        m
    }

    #[test]
    fn gguf_round_trips() {
        let m = sample();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, m.write_gguf(Vec::new()).unwrap()).unwrap();
        assert_eq!(Imatrix::read(&path, 512).unwrap(), m);
        let file = GgufFile::open(&path).unwrap();
        let t = file.tensor("blk.0.ffn_up_exps.weight.in_sum2").unwrap();
        assert_eq!(t.dims, vec![2, 2]);
        assert_eq!(file.tensor("blk.0.ffn_up_exps.weight.counts").unwrap().dims, vec![1, 2]);
    }

    #[test]
    fn importance_is_the_mean_square_and_one_where_no_row_came() {
        let m = sample();
        assert_eq!(m.entries["blk.0.attn_q.weight"].importance(), vec![0.5, 1.0, 1.5]);
        assert_eq!(m.entries["blk.0.ffn_up_exps.weight"].importance(), vec![0.5, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn legacy_round_trips_the_importance() {
        let m = sample();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.dat");
        std::fs::write(&path, m.write_legacy(Vec::new()).unwrap()).unwrap();
        let back = Imatrix::read(&path, 4).unwrap();
        assert_eq!(back.datasets, m.datasets);
        assert_eq!(back.chunk_count, 2);
        let q = &back.entries["blk.0.attn_q.weight"];
        assert_eq!(q.counts, vec![8]);
        assert_eq!(q.importance(), m.entries["blk.0.attn_q.weight"].importance());
    }

    #[test]
    fn merge_adds_and_refuses_other_shapes() {
        let mut a = sample();
        a.merge(sample()).unwrap();
        assert_eq!(a.entries["blk.0.attn_q.weight"].counts, vec![16]);
        assert_eq!(a.chunk_count, 4);
        let mut odd = Imatrix::default();
        odd.entries.insert("blk.0.attn_q.weight".into(), ImatrixEntry::new(2, 1));
        assert!(a.merge(odd).is_err());
    }

    #[test]
    fn garbage_is_refused_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.dat");
        for bytes in [&b""[..], &[1, 0, 0, 0, 255, 255, 255, 127][..], &[2, 0, 0, 0, 1, 0, 0, 0, b'a', 0, 0][..]] {
            std::fs::write(&path, bytes).unwrap();
            assert!(matches!(Imatrix::read(&path, 512), Err(ImatrixError::Malformed { .. })));
        }
    }
}
