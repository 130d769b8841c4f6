//! Encoding one tensor into a GGML type, rows in parallel, with the error it introduced.

use rayon::prelude::*;
use tgi_formats::quant::{dequantize_row, quantize_row};
use tgi_formats::GgmlType;

use super::ConvertError;

/// How far a tensor's decoded values are from the originals.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ErrorStats {
    /// Sum of squared errors.
    pub sum_sq_err: f64,
    /// Sum of squared original values.
    pub sum_sq: f64,
    /// Largest absolute error.
    pub max_abs_err: f32,
    /// Number of values.
    pub count: u64,
}

impl ErrorStats {
    /// Root-mean-square error.
    pub fn rmse(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            (self.sum_sq_err / self.count as f64).sqrt()
        }
    }

    /// RMSE relative to the RMS of the original values.
    pub fn relative_rmse(&self) -> f64 {
        if self.sum_sq == 0.0 {
            0.0
        } else {
            (self.sum_sq_err / self.sum_sq).sqrt()
        }
    }

    fn merge(mut self, o: ErrorStats) -> ErrorStats {
        self.sum_sq_err += o.sum_sq_err;
        self.sum_sq += o.sum_sq;
        self.max_abs_err = self.max_abs_err.max(o.max_abs_err);
        self.count += o.count;
        self
    }
}

/// Rows handed to one rayon task: enough values to amortise scheduling (llama.cpp uses 16K).
const CHUNK_VALUES: usize = 32 * 1024;

/// Encodes a row-major tensor of rows of `n_per_row` values into `ty`, measuring the error
/// of the decoded result against `data`.
/// `progress` is called with the number of values done, from worker threads.
pub fn encode(
    ty: GgmlType,
    data: &[f32],
    n_per_row: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(Vec<u8>, ErrorStats), ConvertError> {
    if n_per_row == 0 || data.len() % n_per_row != 0 || n_per_row % ty.block_size() != 0 {
        return Err(ConvertError::RowNotBlockAligned { row: n_per_row as u64, ty });
    }
    let row_bytes = n_per_row / ty.block_size() * ty.type_size();
    let rows = data.len() / n_per_row;
    let mut out = vec![0u8; rows * row_bytes];
    if ty == GgmlType::F32 {
        for (o, v) in out.chunks_exact_mut(4).zip(data) {
            o.copy_from_slice(&v.to_le_bytes());
        }
        progress(data.len() as u64);
        return Ok((out, ErrorStats { count: data.len() as u64, ..Default::default() }));
    }
    let rows_per_chunk = (CHUNK_VALUES / n_per_row).max(1);
    let stats = out
        .par_chunks_mut(rows_per_chunk * row_bytes)
        .zip(data.par_chunks(rows_per_chunk * n_per_row))
        .map(|(dst, src)| -> Result<ErrorStats, ConvertError> {
            let mut decoded = vec![0f32; n_per_row];
            let mut stats = ErrorStats::default();
            for (drow, srow) in dst.chunks_exact_mut(row_bytes).zip(src.chunks_exact(n_per_row)) {
                quantize_row(ty, srow, drow)?;
                dequantize_row(ty, drow, &mut decoded)?;
                for (&a, &b) in srow.iter().zip(&decoded) {
                    let e = (a - b).abs();
                    stats.sum_sq_err += (e as f64) * (e as f64);
                    stats.sum_sq += (a as f64) * (a as f64);
                    stats.max_abs_err = stats.max_abs_err.max(e);
                }
                stats.count += n_per_row as u64;
            }
            progress(src.len() as u64);
            Ok(stats)
        })
        .try_reduce(ErrorStats::default, |a, b| Ok(a.merge(b)))?;
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_is_exact_and_q8_0_is_close() {
        let data: Vec<f32> = (0..1024).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let (bytes, st) = encode(GgmlType::F32, &data, 256, &|_| {}).unwrap();
        assert_eq!(bytes.len(), 4096);
        assert_eq!(st.rmse(), 0.0);
        let (bytes, st) = encode(GgmlType::Q8_0, &data, 256, &|_| {}).unwrap();
        assert_eq!(bytes.len(), 4 * 8 * 34);
        assert!(st.relative_rmse() < 0.01, "{st:?}");
        assert_eq!(st.count, 1024);
    }

    #[test]
    fn misaligned_rows_are_refused() {
        assert!(encode(GgmlType::Q4_K, &[0.0; 128], 128, &|_| {}).is_err());
    }
}
