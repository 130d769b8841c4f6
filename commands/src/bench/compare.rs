//! `tgi bench compare A.json B.json`: two (or more) saved runs side by side, as a table and charts.
//!
//! Load levels are matched by value (concurrency 8 with concurrency 8); each measure is shown for
//! every report with its ratio to the first report (the baseline).

use std::path::{Path, PathBuf};

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, CellAlignment, Table};
use serde::Serialize;

use super::charts::levels::{all_levels, common_kind, fmt_level, run_at, LoadKind};
use super::charts::write_charts;
use crate::loadgen::report::{BenchReport, Distribution, RunSummary};
use crate::InputError;

/// Arguments of `tgi bench compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Reports written by `tgi bench --json` (two or more); the first is the baseline of the ratios.
    #[arg(required = true, num_args = 2..)]
    pub reports: Vec<PathBuf>,
    /// Directory to draw the comparison charts into (PNG and SVG), one series per report.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Print the comparison as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `tgi bench compare`.
pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    if args.reports.len() < 2 {
        return Err(InputError("compare needs two or more reports".into()).into());
    }
    let mut reports = args.reports.iter().map(|p| read_report(p)).collect::<Result<Vec<_>, _>>()?;
    let names: Vec<String> = args.reports.iter().map(|p| p.display().to_string()).collect();
    let kind = common_kind(&reports, &names)?;
    distinct_labels(&mut reports, &names);
    let cmp = Comparison::of(&reports, &names, kind);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&cmp)?);
    } else {
        println!("{}", cmp.to_table());
    }
    if let Some(dir) = &args.plot {
        let files = write_charts(&reports, dir)?;
        eprintln!("wrote {} chart files to {}", files.len(), dir.display());
    }
    Ok(())
}

/// Reads a `tgi bench --json` report.
fn read_report(path: &Path) -> Result<BenchReport, InputError> {
    let bytes = std::fs::read(path).map_err(|e| InputError(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| InputError(format!("{}: not a `tgi bench --json` report: {e}", path.display())))
}

/// Appends the file to labels that more than one report shares, so the series stay apart.
fn distinct_labels(reports: &mut [BenchReport], names: &[String]) {
    let labels: Vec<String> = reports.iter().map(|r| r.target.label.clone()).collect();
    for (report, name) in reports.iter_mut().zip(names) {
        if labels.iter().filter(|l| **l == report.target.label).count() > 1 {
            report.target.label = format!("{} ({name})", report.target.label);
        }
    }
}

/// A measure compared: JSON key, table name, unit, how to read it from a summary, and whether
/// a ratio makes sense.
struct Measure {
    key: &'static str,
    name: &'static str,
    unit: &'static str,
    value: fn(&RunSummary) -> Option<f64>,
    ratio: bool,
}

fn pct(d: &Distribution, p: fn(&Distribution) -> f64) -> Option<f64> {
    (d.count > 0).then(|| p(d))
}

const MEASURES: [Measure; 11] = [
    Measure {
        key: "output_tokens_per_s",
        name: "output tok/s",
        unit: "tokens/s",
        value: |s| Some(s.output_tokens_per_s),
        ratio: true,
    },
    Measure {
        key: "requests_per_s",
        name: "requests/s",
        unit: "requests/s",
        value: |s| Some(s.requests_per_s),
        ratio: true,
    },
    Measure {
        key: "ttft_p50_ms",
        name: "TTFT P50 (ms)",
        unit: "ms",
        value: |s| pct(&s.ttft_ms, |d| d.p50),
        ratio: true,
    },
    Measure {
        key: "ttft_p99_ms",
        name: "TTFT P99 (ms)",
        unit: "ms",
        value: |s| pct(&s.ttft_ms, |d| d.p99),
        ratio: true,
    },
    Measure {
        key: "tpot_p50_ms",
        name: "TPOT P50 (ms)",
        unit: "ms",
        value: |s| pct(&s.tpot_ms, |d| d.p50),
        ratio: true,
    },
    Measure {
        key: "tpot_p99_ms",
        name: "TPOT P99 (ms)",
        unit: "ms",
        value: |s| pct(&s.tpot_ms, |d| d.p99),
        ratio: true,
    },
    Measure { key: "itl_p50_ms", name: "ITL P50 (ms)", unit: "ms", value: |s| pct(&s.itl_ms, |d| d.p50), ratio: true },
    Measure { key: "itl_p99_ms", name: "ITL P99 (ms)", unit: "ms", value: |s| pct(&s.itl_ms, |d| d.p99), ratio: true },
    Measure { key: "e2e_p50_ms", name: "E2E P50 (ms)", unit: "ms", value: |s| pct(&s.e2e_ms, |d| d.p50), ratio: true },
    Measure { key: "e2e_p99_ms", name: "E2E P99 (ms)", unit: "ms", value: |s| pct(&s.e2e_ms, |d| d.p99), ratio: true },
    Measure {
        key: "errors",
        name: "errors",
        unit: "requests",
        value: |s| Some(s.errors.values().sum::<u64>() as f64),
        ratio: false,
    },
];

/// The comparison, as printed by `--json`.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// What the levels are: `concurrency` or `rate`.
    pub load: &'static str,
    /// The reports compared, the baseline first.
    pub reports: Vec<Compared>,
    /// One entry per load level that ran in any report, ascending.
    pub levels: Vec<LevelComparison>,
}

/// One report compared.
#[derive(Debug, Serialize)]
pub struct Compared {
    /// The file it was read from.
    pub path: String,
    /// Its label (made distinct when two reports share one).
    pub label: String,
    /// The server's URL.
    pub url: String,
    /// The model, when the server reported it.
    pub model: Option<String>,
}

/// The measures of every report at one load level.
#[derive(Debug, Serialize)]
pub struct LevelComparison {
    /// The concurrency or rate.
    pub level: f64,
    /// One entry per measure.
    pub measures: Vec<MeasureComparison>,
}

/// One measure at one level across the reports.
#[derive(Debug, Serialize)]
pub struct MeasureComparison {
    /// Key, e.g. `ttft_p99_ms`.
    pub name: &'static str,
    /// Unit of the values.
    pub unit: &'static str,
    /// Per report (in order); `null` where it did not run this level or had no samples.
    pub values: Vec<Option<f64>>,
    /// Per report, its value over the baseline's; `null` where either is missing or the baseline is 0.
    pub ratios: Vec<Option<f64>>,
}

impl Comparison {
    /// Compares `reports` (read from the files `names`) level by level.
    pub fn of(reports: &[BenchReport], names: &[String], kind: LoadKind) -> Comparison {
        let levels = all_levels(reports)
            .into_iter()
            .map(|level| {
                let summaries: Vec<Option<&RunSummary>> =
                    reports.iter().map(|r| run_at(r, level).map(|run| &run.summary)).collect();
                let measures = MEASURES
                    .iter()
                    .map(|m| {
                        let values: Vec<Option<f64>> = summaries.iter().map(|s| s.and_then(m.value)).collect();
                        let ratios = values
                            .iter()
                            .map(|v| match (m.ratio, values[0], v) {
                                (true, Some(base), Some(v)) if base != 0.0 => Some(v / base),
                                _ => None,
                            })
                            .collect();
                        MeasureComparison { name: m.key, unit: m.unit, values, ratios }
                    })
                    .collect();
                LevelComparison { level, measures }
            })
            .collect();
        let reports = reports
            .iter()
            .zip(names)
            .map(|(r, path)| Compared {
                path: path.clone(),
                label: r.target.label.clone(),
                url: r.target.url.clone(),
                model: r.target.model.clone(),
            })
            .collect();
        Comparison { load: kind.name(), reports, levels }
    }

    /// The side-by-side table: a block of rows per load level, a column per report, then each
    /// report's ratio to the baseline.
    pub fn to_table(&self) -> String {
        let base = &self.reports[0].label;
        let mut header = vec![self.load.to_string(), "measure".to_string()];
        header.extend(self.reports.iter().map(|r| r.label.clone()));
        header.extend(self.reports[1..].iter().map(|r| format!("{} / {base}", r.label)));
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED).set_header(header);
        let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
        for level in &self.levels {
            for (i, (m, def)) in level.measures.iter().zip(&MEASURES).enumerate() {
                let load = if i == 0 { fmt_level(level.level) } else { String::new() };
                let mut row = vec![Cell::new(load), Cell::new(def.name)];
                row.extend(m.values.iter().map(|v| right(v.map_or("-".into(), fmt_value))));
                row.extend(m.ratios[1..].iter().map(|r| right(r.map_or("-".into(), |r| format!("{r:.2}x")))));
                table.add_row(row);
            }
        }
        let note = "ratios over the first report: above 1 is more throughput or more latency";
        format!("{table}\n{note}")
    }
}

/// A value with about three significant figures, no exponent.
fn fmt_value(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::charts::tests::{run_of, synthetic, target};

    fn save(dir: &Path, name: &str, report: &BenchReport) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec(report).unwrap()).unwrap();
        path
    }

    fn args(reports: Vec<PathBuf>) -> CompareArgs {
        CompareArgs { reports, plot: None, json: false }
    }

    #[test]
    fn table_and_ratios() {
        let a = synthetic("fast", &[1, 4], 1.0);
        let b = synthetic("slow", &[1, 4, 8], 2.0);
        let names = vec!["a.json".to_string(), "b.json".to_string()];
        let cmp = Comparison::of(&[a.clone(), b.clone()], &names, LoadKind::Concurrency);
        assert_eq!(cmp.levels.iter().map(|l| l.level).collect::<Vec<_>>(), [1.0, 4.0, 8.0]);
        // Same random draws, latencies twice as long: every latency ratio is 2.
        let ttft = &cmp.levels[1].measures[3];
        assert_eq!(ttft.name, "ttft_p99_ms");
        assert_eq!(ttft.values, [Some(a.runs[1].summary.ttft_ms.p99), Some(b.runs[1].summary.ttft_ms.p99)]);
        assert!((ttft.ratios[1].unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(ttft.ratios[0], Some(1.0));
        // Level 8 ran only in b: no baseline, no ratio.
        assert_eq!(cmp.levels[2].measures[0].values[0], None);
        assert_eq!(cmp.levels[2].measures[0].ratios[1], None);
        assert_eq!(cmp.levels[0].measures[10].ratios, [None, None]);

        let table = cmp.to_table();
        assert!(table.contains("concurrency") && table.contains("slow / fast"), "{table}");
        assert!(table.contains("TTFT P99 (ms)") && table.contains("2.00x"), "{table}");
        let p99 = fmt_value(b.runs[2].summary.e2e_ms.p99);
        assert!(table.lines().any(|l| l.contains("E2E P99") && l.contains(&p99) && l.contains(" - ")), "{table}");
        let json: serde_json::Value = serde_json::to_value(&cmp).unwrap();
        assert_eq!(json["load"], "concurrency");
        assert_eq!(json["reports"][1]["label"], "slow");
        assert_eq!(json["levels"][2]["measures"][0]["values"][0], serde_json::Value::Null);
    }

    #[test]
    fn run_reads_files_and_draws() {
        let dir = tempfile::tempdir().unwrap();
        let a = save(dir.path(), "a.json", &synthetic("srv", &[1, 2], 1.0));
        let b = save(dir.path(), "b.json", &synthetic("srv", &[1, 2], 1.5));
        let charts = dir.path().join("charts");
        run(CompareArgs { reports: vec![a.clone(), b.clone()], plot: Some(charts.clone()), json: true }).unwrap();
        let svg = std::fs::read_to_string(charts.join("latency_vs_load.svg")).unwrap();
        // Both reports are labelled "srv": the file tells them apart.
        assert!(svg.contains(&format!("srv ({}) P50", b.display())), "labels not made distinct");
        assert_eq!(std::fs::read_dir(&charts).unwrap().count(), 10);
    }

    #[test]
    fn bad_inputs_exit_2() {
        let dir = tempfile::tempdir().unwrap();
        let ok = save(dir.path(), "ok.json", &synthetic("a", &[1], 1.0));
        let code = |reports: Vec<PathBuf>| {
            let e = run(args(reports)).unwrap_err();
            (crate::exit_code(&e), e.to_string())
        };
        let missing = dir.path().join("missing.json");
        let (c, msg) = code(vec![ok.clone(), missing.clone()]);
        assert_eq!(c, 2);
        assert!(msg.contains("missing.json"), "{msg}");
        let junk = dir.path().join("junk.json");
        std::fs::write(&junk, "{\"target\": 3}").unwrap();
        let (c, msg) = code(vec![ok.clone(), junk]);
        assert_eq!(c, 2);
        assert!(msg.contains("not a `tgi bench --json` report"), "{msg}");
        let rate = BenchReport { target: target("r"), runs: vec![run_of(None, Some(2.0), vec![])] };
        let rate = save(dir.path(), "rate.json", &rate);
        let (c, msg) = code(vec![ok.clone(), rate]);
        assert_eq!(c, 2);
        assert!(msg.contains("measures concurrency but") && msg.contains("rate.json measures rate"), "{msg}");
        assert_eq!(code(vec![ok]).0, 2);
    }
}
