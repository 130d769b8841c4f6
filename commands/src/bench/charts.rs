//! Charts of benchmark reports, one series per report: TTFT and ITL distributions per load level,
//! and for sweeps latency and throughput against load and the latency-throughput knee (drawn by
//! [`crate::plot`]).

mod distribution;
pub mod levels;
mod load;

use std::path::{Path, PathBuf};

use crate::loadgen::report::BenchReport;
use crate::plot::write_figures;

/// Draws every chart of `reports` (one series per report) into `dir`; returns the files written.
///
/// The directory is created when missing; charts already there under the same names are
/// replaced. Each chart is written as `NAME.png` and `NAME.svg`, each atomically. The charts
/// against load need two or more load levels in some report and are skipped (with a note on
/// stderr) otherwise.
pub fn write_charts(reports: &[BenchReport], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let names: Vec<String> = reports.iter().map(|r| r.target.label.clone()).collect();
    let kind = levels::common_kind(reports, &names)?;
    let what = names.join(" vs ");
    let mut figures = distribution::figures(reports, kind, &what);
    if reports.iter().any(levels::is_sweep) {
        figures.extend(load::figures(reports, kind, &what));
    } else {
        eprintln!("charts: one load level, so the charts against load are skipped (sweep --concurrency or --rate to get them)");
    }
    write_figures(&figures, dir)
}

#[cfg(test)]
pub(crate) mod tests;
