//! Distribution charts (TTFT, inter-token latency): per load level a histogram and a CDF, one
//! series per report.

use plotters::chart::SeriesLabelPosition;

use super::levels::{all_levels, run_at, LoadKind};
use crate::loadgen::report::{BenchReport, Distribution, RunReport};
use crate::plot::axis::Axis;
use crate::plot::figure::{Figure, Panel, Series, Style, PALETTE};
use crate::plot::fmt_ms;

/// Points of a CDF line at most (larger samples are drawn at evenly spaced ranks).
const CDF_POINTS: usize = 1000;

/// A per-request or per-gap measure whose distribution is drawn.
struct Measure {
    file: &'static str,
    title: &'static str,
    short: &'static str,
    unit_of: &'static str,
    samples: fn(&RunReport) -> Vec<f64>,
}

const MEASURES: [Measure; 2] = [
    Measure {
        file: "ttft_distribution",
        title: "Time to first token (TTFT)",
        short: "TTFT",
        unit_of: "requests",
        samples: ttft_samples,
    },
    Measure {
        file: "itl_distribution",
        title: "Inter-token latency (ITL)",
        short: "ITL",
        unit_of: "gaps",
        samples: itl_samples,
    },
];

fn ttft_samples(run: &RunReport) -> Vec<f64> {
    run.requests.iter().filter(|r| r.error.is_none()).filter_map(|r| r.ttft_ms).filter(|v| v.is_finite()).collect()
}

fn itl_samples(run: &RunReport) -> Vec<f64> {
    run.requests
        .iter()
        .filter(|r| r.error.is_none())
        .flat_map(|r| r.itl_ms.iter().copied())
        .filter(|v| v.is_finite())
        .collect()
}

/// The TTFT and ITL figures: a row per load level, histogram left and CDF right.
pub fn figures(reports: &[BenchReport], kind: LoadKind, what: &str) -> Vec<Figure> {
    let levels = all_levels(reports);
    MEASURES
        .iter()
        .map(|m| {
            let mut panels = Vec::new();
            for &level in &levels {
                let samples: Vec<Option<Vec<f64>>> =
                    reports.iter().map(|r| run_at(r, level).map(|run| (m.samples)(run))).collect();
                panels.extend(level_panels(m, reports, &samples, &kind.describe(level)));
            }
            Figure { name: m.file, title: format!("{}: {what}", m.title), cols: 2, panels }
        })
        .collect()
}

/// Histogram and CDF of one level; `samples[i]` is report i's (`None` if it did not run the level).
fn level_panels(m: &Measure, reports: &[BenchReport], samples: &[Option<Vec<f64>>], level: &str) -> [Panel; 2] {
    let all = || samples.iter().flatten().flatten().copied();
    let x = Axis::fit(all().filter(|v| *v > 0.0), false, true);
    let log_note = if x.is_log() { ", log scale" } else { "" };
    let x_desc = format!("{} (ms{log_note})", m.short);
    let (lo, hi) = data_span(all(), x.is_log());
    let edges = bin_edges(lo, hi, x.is_log(), samples.iter().flatten().map(Vec::len).max().unwrap_or(0));

    let mut hist_series = Vec::new();
    let mut cdf_series = Vec::new();
    let mut peak: f64 = 0.0;
    for (i, (report, s)) in reports.iter().zip(samples).enumerate() {
        let Some(s) = s.as_ref().filter(|s| !s.is_empty()) else { continue };
        let color = PALETTE[i % PALETTE.len()];
        let (outline, top) = histogram_outline(s, &edges);
        peak = peak.max(top);
        hist_series.push(Series {
            label: Some(report.target.label.clone()),
            color,
            style: Style::Filled,
            points: outline,
        });
        let d = Distribution::of(s);
        cdf_series.push(Series {
            label: Some(format!(
                "{}: P50 {}, P99 {} (n={})",
                report.target.label,
                fmt_ms(d.p50),
                fmt_ms(d.p99),
                d.count
            )),
            color,
            style: Style::Line,
            points: cdf_points(s),
        });
    }
    let empty_note = "no successful requests".to_string();
    let hist = Panel {
        title: format!("{} histogram, {level}", m.short),
        x: x.clone(),
        y: Axis::fit([0.0, peak], true, false),
        // The CDF's legend beside it names the colours.
        x_desc: x_desc.clone(),
        y_desc: format!("share of {} (%)", m.unit_of),
        series: hist_series,
        labels: Vec::new(),
        legend: None,
        empty_note: empty_note.clone(),
    };
    let cdf = Panel {
        title: format!("{} CDF, {level}", m.short),
        x,
        y: Axis::linear(0.0, 100.0).with_ticks(&[0.0, 25.0, 50.0, 75.0, 90.0, 100.0]),
        x_desc,
        y_desc: format!("{} at most x (%)", m.unit_of),
        series: cdf_series,
        labels: Vec::new(),
        legend: Some(SeriesLabelPosition::LowerRight),
        empty_note,
    };
    [hist, cdf]
}

/// Smallest and largest sample (smallest positive on a log axis), widened when equal.
fn data_span(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| !log || *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    if hi <= lo {
        let w = (lo.abs() * 0.02).max(1e-3);
        return if log { (lo / 1.02, hi * 1.02) } else { (lo - w, hi + w) };
    }
    (lo, hi)
}

/// Bin edges over `lo..=hi`: evenly spaced (geometrically on a log axis), about √n of them
/// within 10..=50.
fn bin_edges(lo: f64, hi: f64, log: bool, n: usize) -> Vec<f64> {
    let bins = ((n as f64).sqrt().round() as usize).clamp(10, 50);
    (0..=bins)
        .map(|i| {
            let t = i as f64 / bins as f64;
            if log {
                lo * (hi / lo).powf(t)
            } else {
                lo + (hi - lo) * t
            }
        })
        .collect()
}

/// The closed step outline of the histogram of `s` over `edges` (bar heights in percent of the
/// samples; values outside the edges go to the end bins) and its tallest bar.
fn histogram_outline(s: &[f64], edges: &[f64]) -> (Vec<(f64, f64)>, f64) {
    let bins = edges.len() - 1;
    let mut counts = vec![0usize; bins];
    for &v in s {
        let i = edges[1..].partition_point(|e| *e < v).min(bins - 1);
        counts[i] += 1;
    }
    let pct: Vec<f64> = counts.iter().map(|c| 100.0 * *c as f64 / s.len() as f64).collect();
    let mut pts = vec![(edges[0], 0.0)];
    for (i, h) in pct.iter().enumerate() {
        pts.push((edges[i], *h));
        pts.push((edges[i + 1], *h));
    }
    pts.push((edges[bins], 0.0));
    (pts, pct.iter().copied().fold(0.0, f64::max))
}

/// The empirical CDF of `s` as (value, percent of samples at most that value), as steps for
/// small samples and at most `CDF_POINTS` evenly spaced ranks for large ones.
fn cdf_points(s: &[f64]) -> Vec<(f64, f64)> {
    let mut v = s.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let pct = |rank: usize| 100.0 * rank as f64 / n as f64;
    if n <= CDF_POINTS {
        let mut pts = Vec::with_capacity(2 * n);
        for (i, x) in v.iter().enumerate() {
            pts.push((*x, pct(i)));
            pts.push((*x, pct(i + 1)));
        }
        return pts;
    }
    (0..=CDF_POINTS).map(|k| k * (n - 1) / CDF_POINTS).map(|i| (v[i], pct(i + 1))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_every_sample() {
        let s = [1.0, 2.0, 2.0, 3.0, 10.0];
        let edges = bin_edges(1.0, 10.0, false, s.len());
        assert_eq!(edges.len(), 11);
        let (pts, top) = histogram_outline(&s, &edges);
        // Heights sum to 100 % over the bins (every other point of the outline is a bar top).
        let total: f64 = pts[1..pts.len() - 1].iter().step_by(2).map(|p| p.1).sum();
        assert!((total - 100.0).abs() < 1e-9);
        assert_eq!(top, 40.0); // the bin (1.9, 2.8] holds 2 and 2
        let log = bin_edges(1.0, 1000.0, true, 100);
        assert!((log[5] - 1000f64.powf(0.5)).abs() < 1e-9);
    }

    #[test]
    fn cdf_steps_and_sampling() {
        assert_eq!(cdf_points(&[2.0, 1.0]), vec![(1.0, 0.0), (1.0, 50.0), (2.0, 50.0), (2.0, 100.0)]);
        let big: Vec<f64> = (0..5000).map(f64::from).collect();
        let pts = cdf_points(&big);
        assert_eq!(pts.len(), CDF_POINTS + 1);
        assert_eq!(pts[0], (0.0, 0.02));
        assert_eq!(*pts.last().unwrap(), (4999.0, 100.0));
    }
}
