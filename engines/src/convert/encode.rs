//! Encoding one tensor into a GGML type, rows in parallel, with the error it introduced.

use rayon::prelude::*;
use tgi_formats::quant::{dequantize_row, quantize_row, quantize_row_weighted, uses_importance};
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

/// Encodes a row-major tensor of rows of `n_per_row` values into `ty`, replacing the contents
/// of `out`, and measures the error of the decoded result against `data`.
/// `importance`, when given, holds `n_per_row` values per matrix of the tensor (one matrix, or one
/// per expert of a stack, whose rows are split evenly): each row is encoded with its matrix's
/// values as llama-quantize does with an importance matrix.
/// `progress` is called with the number of values done, from worker threads.
pub fn encode(
    ty: GgmlType,
    data: &[f32],
    n_per_row: usize,
    importance: Option<&[f32]>,
    out: &mut Vec<u8>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ErrorStats, ConvertError> {
    if n_per_row == 0 || !data.len().is_multiple_of(n_per_row) || !n_per_row.is_multiple_of(ty.block_size()) {
        return Err(ConvertError::RowNotBlockAligned { row: n_per_row as u64, ty });
    }
    let row_bytes = n_per_row / ty.block_size() * ty.type_size();
    let rows = data.len() / n_per_row;
    let importance = importance.filter(|_| uses_importance(ty));
    let rows_per_matrix = match importance {
        Some(qw) => {
            let matrices = qw.len() / n_per_row;
            if matrices == 0 || !qw.len().is_multiple_of(n_per_row) || !rows.is_multiple_of(matrices) {
                return Err(ConvertError::ImportanceShape { values: qw.len() as u64, row: n_per_row as u64 });
            }
            (rows / matrices).max(1)
        }
        None => 1,
    };
    out.resize(rows * row_bytes, 0); // every byte is overwritten below
    if ty == GgmlType::F32 {
        for (o, v) in out.chunks_exact_mut(4).zip(data) {
            o.copy_from_slice(&v.to_le_bytes());
        }
        progress(data.len() as u64);
        return Ok(ErrorStats { count: data.len() as u64, ..Default::default() });
    }
    let rows_per_chunk = (CHUNK_VALUES / n_per_row).max(1);
    let stats = out
        .par_chunks_mut(rows_per_chunk * row_bytes)
        .zip(data.par_chunks(rows_per_chunk * n_per_row))
        .enumerate()
        .map(|(chunk, (dst, src))| -> Result<ErrorStats, ConvertError> {
            let mut decoded = vec![0f32; n_per_row];
            let mut stats = ErrorStats::default();
            let first_row = chunk * rows_per_chunk;
            for (r, (drow, srow)) in dst.chunks_exact_mut(row_bytes).zip(src.chunks_exact(n_per_row)).enumerate() {
                match importance {
                    Some(qw) => {
                        let m = (first_row + r) / rows_per_matrix;
                        quantize_row_weighted(ty, srow, drow, &qw[m * n_per_row..(m + 1) * n_per_row])?;
                    }
                    None => quantize_row(ty, srow, drow)?,
                }
                dequantize_row(ty, drow, &mut decoded)?;
                let row = row_error(srow, &decoded);
                stats = stats.merge(row);
            }
            progress(src.len() as u64);
            Ok(stats)
        })
        .try_reduce(ErrorStats::default, |a, b| Ok(a.merge(b)))?;
    Ok(stats)
}

/// Lanes of the error accumulators: independent sums the compiler can keep in one SIMD register.
const LANES: usize = 8;

/// The error of one decoded row, accumulated in f32 lanes (vectorisable) and summed in f64.
fn row_error(original: &[f32], decoded: &[f32]) -> ErrorStats {
    let mut sq_err = [0f32; LANES];
    let mut sq = [0f32; LANES];
    let mut max = [0f32; LANES];
    let mut a = original.chunks_exact(LANES);
    let mut b = decoded.chunks_exact(LANES);
    for (x, y) in (&mut a).zip(&mut b) {
        for l in 0..LANES {
            let e = x[l] - y[l];
            sq_err[l] += e * e;
            sq[l] += x[l] * x[l];
            max[l] = max[l].max(e.abs());
        }
    }
    for (&x, &y) in a.remainder().iter().zip(b.remainder()) {
        let e = x - y;
        sq_err[0] += e * e;
        sq[0] += x * x;
        max[0] = max[0].max(e.abs());
    }
    ErrorStats {
        sum_sq_err: sq_err.iter().map(|&v| v as f64).sum(),
        sum_sq: sq.iter().map(|&v| v as f64).sum(),
        max_abs_err: max.iter().fold(0f32, |m, &v| m.max(v)),
        count: original.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_is_exact_and_q8_0_is_close() {
        let data: Vec<f32> = (0..1024).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
        let mut bytes = Vec::new();
        let st = encode(GgmlType::F32, &data, 256, None, &mut bytes, &|_| {}).unwrap();
        assert_eq!(bytes.len(), 4096);
        assert_eq!(st.rmse(), 0.0);
        let st = encode(GgmlType::Q8_0, &data, 256, None, &mut bytes, &|_| {}).unwrap();
        assert_eq!(bytes.len(), 4 * 8 * 34);
        assert!(st.relative_rmse() < 0.01, "{st:?}");
        assert_eq!(st.count, 1024);
    }

    #[test]
    fn misaligned_rows_are_refused() {
        assert!(encode(GgmlType::Q4_K, &[0.0; 128], 128, None, &mut Vec::new(), &|_| {}).is_err());
    }

    #[test]
    fn importance_is_used_per_matrix() {
        // Two experts of 4 rows of 256; each expert's rows use its own importance.
        let data: Vec<f32> = (0..8 * 256).map(|i| ((i * 7919 % 613) as f32 - 306.0) / 100.0).collect();
        let qw: Vec<f32> =
            (0..2 * 256).map(|i| if i < 256 { 1.0 + (i % 5) as f32 } else { 0.1 + (i % 3) as f32 }).collect();
        let mut bytes = Vec::new();
        encode(GgmlType::Q4_K, &data, 256, Some(&qw), &mut bytes, &|_| {}).unwrap();
        for r in 0..8 {
            let mut row = vec![0u8; 144];
            let m = &qw[(r / 4) * 256..(r / 4 + 1) * 256];
            quantize_row_weighted(GgmlType::Q4_K, &data[r * 256..(r + 1) * 256], &mut row, m).unwrap();
            assert_eq!(&bytes[r * 144..(r + 1) * 144], &row[..], "row {r}");
        }
        // Q8_0 ignores it.
        let mut plain = Vec::new();
        encode(GgmlType::Q8_0, &data, 256, None, &mut plain, &|_| {}).unwrap();
        encode(GgmlType::Q8_0, &data, 256, Some(&qw), &mut bytes, &|_| {}).unwrap();
        assert_eq!(plain, bytes);
        // Three matrices do not split eight rows.
        let bad = vec![1.0; 3 * 256];
        assert!(matches!(
            encode(GgmlType::Q4_K, &data, 256, Some(&bad), &mut bytes, &|_| {}),
            Err(ConvertError::ImportanceShape { .. })
        ));
    }

    #[test]
    fn row_error_matches_a_plain_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = a.iter().enumerate().map(|(i, v)| v + (i % 5) as f32 * 0.01).collect();
        let st = row_error(&a, &b);
        let want: f64 = a.iter().zip(&b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        assert!((st.sum_sq_err - want).abs() < 1e-6, "{} vs {want}", st.sum_sq_err);
        assert!((st.max_abs_err - 0.04).abs() < 1e-5);
        assert_eq!(st.count, 37);
    }
}
