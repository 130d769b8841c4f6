//! Importance matrices computed as llama.cpp's `llama-imatrix` computes them: the text in chunks of `ctx` tokens
//! (each starting with BOS), run through the engine's batched forward pass, and for every weight matrix of the
//! layers the per-column sums of the squared inputs it met, with the number of rows. As in llama-imatrix, a
//! dense matrix counts only steps of at least 16 rows, a mixture's experts count every row routed to them (one
//! matrix each), and the output layer counts only when asked (`--process-output`). The perplexity of the second
//! half of each chunk comes with it, as llama-imatrix prints it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use candle_core::{DType, Tensor};
use tgi_formats::imatrix::{Imatrix, ImatrixEntry};

use crate::model::{ActivationObserver, LoadedModel, ModelError};
use crate::perplexity::{perplexity_with, Perplexity, PerplexityOptions};

/// Fewest rows of a dense matrix's input that llama-imatrix keeps (smaller batches are skipped).
pub const MIN_ROWS: usize = 16;

/// How to compute a matrix.
#[derive(Clone, Copy, Debug)]
pub struct ImatrixOptions {
    /// Chunking, as for perplexity.
    pub chunks: PerplexityOptions,
    /// Whether the output layer's input is kept too.
    pub process_output: bool,
}

/// Collects the statistics of the matrices a forward pass shows it.
#[derive(Debug, Default)]
pub struct Collector {
    entries: Mutex<BTreeMap<String, ImatrixEntry>>,
    process_output: bool,
}

impl Collector {
    /// An empty collector (keeping the output layer's input with `process_output`).
    pub fn new(process_output: bool) -> Self {
        Collector { entries: Mutex::default(), process_output }
    }

    /// What was collected, by weight name.
    pub fn into_entries(self) -> BTreeMap<String, ImatrixEntry> {
        self.entries.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl ActivationObserver for Collector {
    fn observe(&self, name: &str, expert: Option<(usize, usize)>, x: &Tensor) -> candle_core::Result<()> {
        if name == "output.weight" && !self.process_output {
            return Ok(());
        }
        let (rows, cols) = x.dims2()?;
        if expert.is_none() && rows < MIN_ROWS {
            return Ok(());
        }
        let values = x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let (index, matrices) = expert.unwrap_or((0, 1));
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = entries.entry(name.to_string()).or_insert_with(|| ImatrixEntry::new(cols, matrices));
        if e.cols() != cols || e.counts.len() != matrices {
            candle_core::bail!(
                "{name}: inputs of {cols} columns for {matrices} matrices after {} for {}",
                e.cols(),
                e.counts.len()
            )
        }
        let acc = &mut e.sums[index * cols..(index + 1) * cols];
        // Row after row in f32, as llama-imatrix sums them.
        for row in values.chunks_exact(cols) {
            acc.iter_mut().zip(row).for_each(|(a, &v)| *a += v * v);
        }
        if acc.iter().any(|a| !a.is_finite()) {
            candle_core::bail!("non-finite activations reached {name}")
        }
        e.counts[index] += rows as u64;
        Ok(())
    }
}

/// The importance matrix of `m` over `tokens` (the whole text, tokenized with BOS as the model asks), with the
/// perplexity of the chunks' second halves; `progress` is called after each batch with (chunks done, chunks
/// total, perplexity so far). `datasets` names the text(s) in the result.
pub fn compute(
    m: &LoadedModel,
    tokens: &[u32],
    opts: ImatrixOptions,
    datasets: Vec<String>,
    progress: impl FnMut(usize, usize, f64),
) -> Result<(Imatrix, Perplexity), ModelError> {
    let collector = Collector::new(opts.process_output);
    let ppl = perplexity_with(m, tokens, opts.chunks, progress, |_, _| {}, Some((&collector, opts.process_output)))?;
    let mut imatrix = Imatrix {
        entries: collector.into_entries(),
        datasets,
        chunk_size: opts.chunks.ctx as u32,
        ..Imatrix::default()
    };
    imatrix.chunk_count = imatrix.last_chunk();
    Ok((imatrix, ppl))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn rows(n: usize, cols: usize, v: f32) -> Tensor {
        Tensor::full(v, (n, cols), &Device::Cpu).unwrap()
    }

    #[test]
    fn sums_squares_per_column_and_skips_small_dense_steps() {
        let c = Collector::new(false);
        c.observe("blk.0.attn_q.weight", None, &rows(16, 3, 2.0)).unwrap();
        c.observe("blk.0.attn_q.weight", None, &rows(15, 3, 5.0)).unwrap();
        c.observe("output.weight", None, &rows(16, 3, 1.0)).unwrap();
        let e = c.into_entries();
        assert_eq!(e.len(), 1);
        assert_eq!(e["blk.0.attn_q.weight"], ImatrixEntry { sums: vec![64.0; 3], counts: vec![16] });
    }

    #[test]
    fn experts_keep_one_matrix_each_and_every_row() {
        let c = Collector::new(true);
        c.observe("blk.1.ffn_up_exps.weight", Some((1, 3)), &rows(2, 2, 3.0)).unwrap();
        c.observe("output.weight", None, &rows(16, 2, 1.0)).unwrap();
        let e = c.into_entries();
        assert_eq!(
            e["blk.1.ffn_up_exps.weight"],
            ImatrixEntry { sums: vec![0.0, 0.0, 18.0, 18.0, 0.0, 0.0], counts: vec![0, 2, 0] }
        );
        assert_eq!(e["output.weight"].counts, vec![16]);
    }

    #[test]
    fn shape_changes_and_non_finite_inputs_are_errors() {
        let c = Collector::new(false);
        c.observe("blk.0.attn_q.weight", None, &rows(16, 3, 1.0)).unwrap();
        assert!(c.observe("blk.0.attn_q.weight", None, &rows(16, 4, 1.0)).is_err());
        assert!(c.observe("blk.0.attn_k.weight", None, &rows(16, 3, f32::INFINITY)).is_err());
    }
}
