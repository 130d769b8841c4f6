//! `--imatrix FILE`: the importance matrix of `tgi quantize`, as llama-quantize uses it. The file
//! (GGUF, or the legacy `.dat`) gives each weight matrix one importance value per column (per
//! expert for a mixture); `--exclude-weights` / `--include-weights` drop or keep entries whose name
//! contains a string; every tensor with an entry is then encoded with it, and the output records
//! the `quantize.imatrix.*` metadata.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use tgi_engines::convert::preset::requires_imatrix;
use tgi_engines::convert::{ExportPlan, TensorJob};
use tgi_formats::gguf::Value;
use tgi_formats::imatrix::Imatrix;

use super::QuantizeArgs;
use crate::error::InputError;

/// Metadata key: the importance matrix file, as given on the command line.
pub const FILE_KEY: &str = "quantize.imatrix.file";
/// Metadata key: the first dataset the matrix was computed on.
pub const DATASET_KEY: &str = "quantize.imatrix.dataset";
/// Metadata key: the entries used (after the filters).
pub const ENTRIES_KEY: &str = "quantize.imatrix.entries_count";
/// Metadata key: the chunks the matrix was computed on.
pub const CHUNKS_KEY: &str = "quantize.imatrix.chunks_count";

/// llama-quantize copies strings into 128-byte buffers: at most 127 bytes survive.
const MAX_STRING: usize = 127;

/// An importance matrix ready for quantization: per entry name, the importance of each column.
#[derive(Debug)]
pub struct Importance {
    file: String,
    dataset: Option<String>,
    chunks: u32,
    entries: BTreeMap<String, Vec<f32>>,
}

impl Importance {
    /// Loads `file` and keeps the entries `--exclude-weights` / `--include-weights` leave (at most one
    /// of the two lists may be given, as in llama-quantize).
    pub fn load(file: &str, include: &[String], exclude: &[String]) -> Result<Importance, InputError> {
        if !include.is_empty() && !exclude.is_empty() {
            return Err(InputError("--include-weights and --exclude-weights cannot be combined".into()));
        }
        let path = Path::new(file);
        let legacy = !starts_with_gguf_magic(path).map_err(|e| InputError(format!("--imatrix {file}: {e}")))?;
        // A legacy file stores sums / count · calls with the call count: read with one token per call, its sums
        // are the stored values and its counts the calls, so that stored / calls is what llama-quantize computes.
        let m = Imatrix::read(path, 1).map_err(|e| InputError(format!("--imatrix {file}: {e}")))?;
        let mut entries = BTreeMap::new();
        for (name, e) in m.entries {
            let importance = if legacy {
                let calls = e.counts.first().copied().unwrap_or(0);
                match calls {
                    0 => e.sums,
                    c => e.sums.iter().map(|&s| s / c as f32).collect(),
                }
            } else {
                e.importance()
            };
            entries.insert(name, importance);
        }
        if !exclude.is_empty() {
            entries.retain(|name, _| !exclude.iter().any(|x| name.contains(x.as_str())));
        }
        if !include.is_empty() {
            entries.retain(|name, _| include.iter().any(|x| name.contains(x.as_str())));
        }
        for (name, values) in &entries {
            if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                return Err(InputError(format!("--imatrix {file}: entry '{name}' holds a non-finite value ({v})")));
            }
        }
        Ok(Importance {
            file: file.to_string(),
            dataset: m.datasets.into_iter().next(),
            chunks: m.chunk_count,
            entries,
        })
    }

    /// Whether any entry is left (llama-quantize uses no matrix at all otherwise).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records the `quantize.imatrix.*` keys in the plan's metadata, after the file type, as llama-quantize
    /// writes them: the file and first dataset (cut to 127 bytes), the entries used, and the chunks when known.
    pub fn record(&self, plan: &mut ExportPlan) {
        plan.set_metadata(FILE_KEY, Value::String(truncate(&self.file)));
        if let Some(d) = &self.dataset {
            plan.set_metadata(DATASET_KEY, Value::String(truncate(d)));
        }
        plan.set_metadata(ENTRIES_KEY, Value::U32(self.entries.len() as u32));
        if self.chunks > 0 {
            plan.set_metadata(CHUNKS_KEY, Value::U32(self.chunks));
        }
    }

    /// The importance for one job (a row's worth per matrix), or None when the job is not encoded or the
    /// matrix has no entry for it. An entry whose size is not the tensor's columns times its matrices is
    /// refused, except for token_embd.weight, whose entry llama-quantize ignores.
    pub fn for_job(&self, job: &TensorJob) -> Result<Option<&[f32]>, InputError> {
        if !encodes(job) {
            return Ok(None);
        }
        let Some(values) = self.entries.get(&job.name) else { return Ok(None) };
        let cols = job.dims.first().copied().unwrap_or(1);
        let matrices = job.dims.get(2).copied().unwrap_or(1);
        if values.len() as u64 == cols * matrices {
            return Ok(Some(values));
        }
        if job.name == "token_embd.weight" {
            return Ok(None);
        }
        Err(InputError(format!(
            "--imatrix {}: the entry for '{}' has {} values, the tensor {cols} columns × {matrices} matrices = {}; \
             the matrix was made for another model",
            self.file,
            job.name,
            values.len(),
            cols * matrices
        )))
    }

    /// The block-quantized tensors the matrix has no entry for (encoded without it).
    pub fn missing<'a>(&self, plan: &'a ExportPlan) -> Vec<&'a str> {
        plan.jobs
            .iter()
            .filter(|j| encodes(j) && j.target.is_quantized() && !self.entries.contains_key(&j.name))
            .map(|j| j.name.as_str())
            .collect()
    }
}

/// Loads `--imatrix` with its filters; None without one, or when the filters leave no entry (then
/// llama-quantize uses no matrix either).
pub(super) fn from_args(args: &QuantizeArgs) -> Result<Option<Importance>, InputError> {
    let Some(file) = &args.imatrix else {
        if !args.include_weights.is_empty() || !args.exclude_weights.is_empty() {
            return Err(InputError("--include-weights and --exclude-weights apply with --imatrix only".into()));
        }
        return Ok(None);
    };
    let m = Importance::load(file, &args.include_weights, &args.exclude_weights)?;
    if m.is_empty() {
        if !args.quiet {
            eprintln!("warning: no entry of {file} is left after the filters: quantizing without an importance matrix");
        }
        return Ok(None);
    }
    Ok(Some(m))
}

/// Records the matrix's metadata in the plan, warns (unless `quiet`) about the quantized tensors it has
/// no entry for, and returns each job's importance (all None without a matrix).
pub(super) fn job_weights<'a>(
    m: Option<&'a Importance>,
    plan: &mut ExportPlan,
    quiet: bool,
) -> Result<Vec<Option<&'a [f32]>>, InputError> {
    let Some(m) = m else { return Ok(vec![None; plan.jobs.len()]) };
    m.record(plan);
    let missing = m.missing(plan);
    if let Some(j) =
        plan.jobs.iter().find(|j| missing.contains(&j.name.as_str()) && requires_imatrix(&j.name, j.target))
    {
        return Err(InputError(format!(
            "--imatrix {}: no entry for '{}', which llama-quantize writes as {} only with one",
            m.file, j.name, j.target
        )));
    }
    if !missing.is_empty() && !quiet {
        eprintln!(
            "warning: the importance matrix has no entry for {} tensors, quantized without it: {}",
            missing.len(),
            missing.join(", ")
        );
    }
    plan.jobs.iter().map(|j| m.for_job(j)).collect()
}

/// Whether a job encodes its values (rather than copying them as stored).
fn encodes(job: &TensorJob) -> bool {
    job.target != job.source_type
}

/// Whether the file begins with the GGUF magic.
fn starts_with_gguf_magic(path: &Path) -> std::io::Result<bool> {
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path)?;
    let n = f.read(&mut magic)?;
    Ok(n == 4 && magic == tgi_formats::gguf::MAGIC)
}

/// The first 127 bytes of `s` (cut back to a character boundary), as llama-quantize's `strncpy` keeps them.
fn truncate(s: &str) -> String {
    let mut end = s.len().min(MAX_STRING);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tgi_engines::convert::names::Transform;
    use tgi_engines::convert::JobInput;
    use tgi_formats::imatrix::ImatrixEntry;
    use tgi_formats::GgmlType;

    fn job(name: &str, dims: Vec<u64>, target: GgmlType) -> TensorJob {
        TensorJob {
            name: name.into(),
            input: JobInput::Tensor(name.into()),
            source_type: GgmlType::F32,
            dims,
            transform: Transform::None,
            target,
        }
    }

    fn write_matrix(dir: &Path) -> String {
        let mut m =
            Imatrix { datasets: vec!["calib.txt".into()], chunk_count: 3, chunk_size: 128, ..Default::default() };
        let mut e = ImatrixEntry::new(4, 1);
        e.sums = vec![2.0, 4.0, 6.0, 8.0];
        e.counts = vec![2];
        m.entries.insert("blk.0.attn_q.weight".into(), e.clone());
        m.entries.insert("blk.0.ffn_up.weight".into(), e.clone());
        let mut experts = ImatrixEntry::new(4, 2);
        experts.sums = vec![1.0; 8];
        experts.counts = vec![1, 0];
        m.entries.insert("blk.0.ffn_up_exps.weight".into(), experts);
        m.entries.insert("token_embd.weight".into(), e);
        let path = dir.join("m.gguf");
        m.write_gguf(std::fs::File::create(&path).unwrap()).unwrap();
        path.display().to_string()
    }

    #[test]
    fn entries_filters_and_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let file = write_matrix(dir.path());
        let m = Importance::load(&file, &[], &[]).unwrap();
        assert_eq!(m.entries.len(), 4);
        let q = job("blk.0.attn_q.weight", vec![4, 8], GgmlType::Q4_K);
        assert_eq!(m.for_job(&q).unwrap(), Some(&[1.0f32, 2.0, 3.0, 4.0][..]));
        // Experts: one row's worth per expert, 1 where no row met the expert.
        let x = job("blk.0.ffn_up_exps.weight", vec![4, 8, 2], GgmlType::Q4_K);
        assert_eq!(m.for_job(&x).unwrap(), Some(&[1.0f32, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0][..]));
        // A copied tensor is not encoded.
        let mut copied = q.clone();
        copied.source_type = GgmlType::Q4_K;
        assert_eq!(m.for_job(&copied).unwrap(), None);
        // Wrong size: refused, except token_embd.
        let wide = job("blk.0.attn_q.weight", vec![8, 8], GgmlType::Q4_K);
        assert!(m.for_job(&wide).unwrap_err().0.contains("another model"));
        assert_eq!(m.for_job(&job("token_embd.weight", vec![8, 8], GgmlType::Q4_K)).unwrap(), None);

        let ex = Importance::load(&file, &[], &["ffn_up".into()]).unwrap();
        assert_eq!(ex.entries.keys().collect::<Vec<_>>(), ["blk.0.attn_q.weight", "token_embd.weight"]);
        let inc = Importance::load(&file, &["attn".into(), "exps".into()], &[]).unwrap();
        assert_eq!(inc.entries.keys().collect::<Vec<_>>(), ["blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight"]);
        assert!(Importance::load(&file, &["a".into()], &["b".into()]).unwrap_err().0.contains("cannot be combined"));
        assert!(Importance::load(&file, &["nothing".into()], &[]).unwrap().is_empty());
    }

    #[test]
    fn metadata_as_llama_quantize_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = write_matrix(dir.path());
        let m = Importance::load(&file, &[], &["token_embd".into()]).unwrap();
        let mut plan = ExportPlan { metadata: vec![("general.file_type".into(), Value::U32(15))], jobs: vec![] };
        m.record(&mut plan);
        let keys: Vec<&str> = plan.metadata.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["general.file_type", FILE_KEY, DATASET_KEY, ENTRIES_KEY, CHUNKS_KEY]);
        assert_eq!(plan.metadata[1].1, Value::String(file));
        assert_eq!(plan.metadata[2].1, Value::String("calib.txt".into()));
        assert_eq!(plan.metadata[3].1, Value::U32(3));
        assert_eq!(plan.metadata[4].1, Value::U32(3));
        assert_eq!(truncate(&"é".repeat(100)).len(), 126);
    }

    #[test]
    fn legacy_files_divide_by_the_call_count() {
        // llama-quantize divides a .dat file's stored sums / count · calls by calls.
        let mut m = Imatrix { chunk_count: 3, chunk_size: 4, ..Default::default() };
        let mut e = ImatrixEntry::new(4, 1);
        e.sums = vec![2.0, 4.0, 6.0, 8.0];
        e.counts = vec![10];
        m.entries.insert("blk.0.attn_q.weight".into(), e);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.dat");
        m.write_legacy(std::fs::File::create(&path).unwrap()).unwrap();
        let loaded = Importance::load(&path.display().to_string(), &[], &[]).unwrap();
        // calls = ceil(10 / 4) = 3, stored = sums / 10 · 3, importance = stored / 3.
        let want: Vec<f32> = [2.0f32, 4.0, 6.0, 8.0].iter().map(|s| s / 10.0 * 3.0 / 3.0).collect();
        assert_eq!(loaded.entries["blk.0.attn_q.weight"], want);
        assert_eq!(loaded.chunks, 3);
    }

    #[test]
    fn bad_files_are_input_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Importance::load(&dir.path().join("none").display().to_string(), &[], &[]).is_err());
        let junk = dir.path().join("junk.dat");
        std::fs::write(&junk, b"\x01\x00").unwrap();
        assert!(Importance::load(&junk.display().to_string(), &[], &[]).unwrap_err().0.contains("--imatrix"));
    }
}
