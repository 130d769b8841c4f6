//! The summary printed after a quantization: a table for people, JSON for scripts.

use std::collections::BTreeMap;

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use serde::Serialize;
use tgi_engines::convert::encode::ErrorStats;
use tgi_formats::GgmlType;

/// One tensor's outcome.
#[derive(Debug, Serialize)]
pub struct TensorReport {
    /// GGUF name.
    pub name: String,
    /// Type written.
    #[serde(rename = "type")]
    pub ty: String,
    /// GGML dims.
    pub dims: Vec<u64>,
    /// Bytes written.
    pub bytes: u64,
    /// RMSE of decoded vs original values.
    pub rmse: f64,
    /// RMSE relative to the tensor's RMS.
    pub relative_rmse: f64,
    /// Largest absolute error.
    pub max_abs_error: f32,
}

impl TensorReport {
    /// A report row from a finished tensor.
    pub fn new(name: &str, ty: GgmlType, dims: &[u64], bytes: u64, stats: &ErrorStats) -> Self {
        TensorReport {
            name: name.to_string(),
            ty: ty.ggml_name().to_string(),
            dims: dims.to_vec(),
            bytes,
            rmse: stats.rmse(),
            relative_rmse: stats.relative_rmse(),
            max_abs_error: stats.max_abs_err,
        }
    }
}

/// Tensors of one type, added up.
#[derive(Debug, Serialize)]
pub struct TypeTotal {
    /// Type name.
    #[serde(rename = "type")]
    pub ty: String,
    /// Number of tensors.
    pub tensors: usize,
    /// Parameters in them.
    pub parameters: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// The whole run's summary.
#[derive(Debug, Serialize)]
pub struct QuantizeSummary {
    /// Input path or id.
    pub input: String,
    /// Output file.
    pub output: String,
    /// Output format.
    pub format: String,
    /// Preset.
    pub preset: String,
    /// Number of tensors.
    pub tensors: usize,
    /// Number of parameters.
    pub parameters: u64,
    /// Bits per weight over all tensors.
    pub bits_per_weight: f64,
    /// Input size in bytes (checkpoint files).
    pub input_bytes: u64,
    /// Output file size in bytes.
    pub output_bytes: u64,
    /// Mean relative RMSE over the tensors whose type changed.
    pub mean_relative_rmse: f64,
    /// Worst relative RMSE and its tensor.
    pub worst_relative_rmse: f64,
    /// The tensor with the worst relative RMSE.
    pub worst_tensor: Option<String>,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Totals by type.
    pub by_type: Vec<TypeTotal>,
    /// Every tensor.
    pub per_tensor: Vec<TensorReport>,
}

impl QuantizeSummary {
    /// Builds the summary from per-tensor rows; `lossy` marks rows whose type changed.
    pub fn new(head: SummaryHead, rows: Vec<(TensorReport, bool)>) -> QuantizeSummary {
        let mut by_type: BTreeMap<String, TypeTotal> = BTreeMap::new();
        let mut parameters = 0u64;
        let mut tensor_bytes = 0u64;
        let (mut sum, mut n, mut worst, mut worst_tensor) = (0.0, 0usize, 0.0f64, None);
        for (r, lossy) in &rows {
            let params: u64 = r.dims.iter().product();
            parameters += params;
            tensor_bytes += r.bytes;
            let t = by_type.entry(r.ty.clone()).or_insert(TypeTotal {
                ty: r.ty.clone(),
                tensors: 0,
                parameters: 0,
                bytes: 0,
            });
            t.tensors += 1;
            t.parameters += params;
            t.bytes += r.bytes;
            if *lossy {
                sum += r.relative_rmse;
                n += 1;
                if r.relative_rmse >= worst {
                    worst = r.relative_rmse;
                    worst_tensor = Some(r.name.clone());
                }
            }
        }
        QuantizeSummary {
            input: head.input,
            output: head.output,
            format: "gguf".into(),
            preset: head.preset,
            tensors: rows.len(),
            parameters,
            bits_per_weight: if parameters == 0 { 0.0 } else { tensor_bytes as f64 * 8.0 / parameters as f64 },
            input_bytes: head.input_bytes,
            output_bytes: head.output_bytes,
            mean_relative_rmse: if n == 0 { 0.0 } else { sum / n as f64 },
            worst_relative_rmse: worst,
            worst_tensor,
            seconds: head.seconds,
            by_type: by_type.into_values().collect(),
            per_tensor: rows.into_iter().map(|(r, _)| r).collect(),
        }
    }

    /// The human-readable tables.
    pub fn to_table(&self) -> String {
        let mut types = Table::new();
        types.load_preset(UTF8_FULL_CONDENSED).set_header(vec!["type", "tensors", "parameters", "size", "share"]);
        for t in &self.by_type {
            let share = if self.parameters == 0 { 0.0 } else { 100.0 * t.parameters as f64 / self.parameters as f64 };
            types.add_row(vec![
                Cell::new(&t.ty),
                Cell::new(t.tensors).set_alignment(CellAlignment::Right),
                Cell::new(t.parameters).set_alignment(CellAlignment::Right),
                Cell::new(human_bytes(t.bytes)).set_alignment(CellAlignment::Right),
                Cell::new(format!("{share:.1}%")).set_alignment(CellAlignment::Right),
            ]);
        }
        let mut totals = Table::new();
        totals.load_preset(UTF8_FULL_CONDENSED);
        let worst = match &self.worst_tensor {
            Some(t) => format!("{:.5} ({t})", self.worst_relative_rmse),
            None => "-".into(),
        };
        for (k, v) in [
            ("preset", self.preset.clone()),
            ("tensors", self.tensors.to_string()),
            ("parameters", self.parameters.to_string()),
            ("bits per weight", format!("{:.3}", self.bits_per_weight)),
            ("input size", human_bytes(self.input_bytes)),
            ("output size", human_bytes(self.output_bytes)),
            ("relative RMSE, mean", format!("{:.5}", self.mean_relative_rmse)),
            ("relative RMSE, worst", worst),
            ("time", format!("{:.2} s", self.seconds)),
        ] {
            totals.add_row(vec![Cell::new(k), Cell::new(v)]);
        }
        format!("{types}\n{totals}\nwrote {}", self.output)
    }
}

/// The run-level facts a summary starts from.
pub struct SummaryHead {
    /// Input path or id.
    pub input: String,
    /// Output path.
    pub output: String,
    /// Preset name.
    pub preset: String,
    /// Input bytes.
    pub input_bytes: u64,
    /// Output bytes.
    pub output_bytes: u64,
    /// Wall seconds.
    pub seconds: f64,
}

/// `1.23 GiB`-style sizes.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_table() {
        let st = ErrorStats { sum_sq_err: 1.0, sum_sq: 100.0, max_abs_err: 0.5, count: 100 };
        let rows = vec![
            (TensorReport::new("a", GgmlType::Q4_K, &[256, 4], 576, &st), true),
            (TensorReport::new("b", GgmlType::F32, &[256], 1024, &ErrorStats::default()), false),
        ];
        let head = SummaryHead {
            input: "in".into(),
            output: "out.gguf".into(),
            preset: "q4_k_m".into(),
            input_bytes: 5120,
            output_bytes: 2000,
            seconds: 0.5,
        };
        let s = QuantizeSummary::new(head, rows);
        assert_eq!(s.parameters, 1280);
        assert_eq!(s.by_type.len(), 2);
        assert!((s.mean_relative_rmse - 0.1).abs() < 1e-12);
        assert_eq!(s.worst_tensor.as_deref(), Some("a"));
        let t = s.to_table();
        assert!(t.contains("q4_K") && t.contains("bits per weight"));
        assert_eq!(human_bytes(1536), "1.50 KiB");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["by_type"][0]["type"], "f32");
    }
}
