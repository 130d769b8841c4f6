//! Charts against the load level: latency percentiles and throughput per concurrency or rate,
//! and the latency-throughput knee.

use plotters::chart::SeriesLabelPosition;
use plotters::style::RGBColor;

use super::levels::LoadKind;
use crate::loadgen::report::{BenchReport, Distribution, RunReport, RunSummary};
use crate::plot::axis::Axis;
use crate::plot::figure::{legend_share, Figure, Marker, Panel, PointLabel, Series, Style, PALETTE};

/// A latency measure of the summary.
struct Latency {
    short: &'static str,
    title: &'static str,
    of: fn(&RunSummary) -> &Distribution,
}

const LATENCIES: [Latency; 4] = [
    Latency { short: "TTFT", title: "Time to first token", of: |s| &s.ttft_ms },
    Latency { short: "TPOT", title: "Time per output token", of: |s| &s.tpot_ms },
    Latency { short: "ITL", title: "Inter-token latency", of: |s| &s.itl_ms },
    Latency { short: "E2E", title: "End-to-end latency", of: |s| &s.e2e_ms },
];

/// Reads one figure of a distribution.
type PickFn = fn(&Distribution) -> f64;
/// Reads one figure of a summary.
type SummaryFn = fn(&RunSummary) -> f64;

/// Percentiles drawn against load: name, value, marker, colour when there is one report.
const PERCENTILES: [(&str, PickFn, Marker, RGBColor); 3] = [
    ("P50", |d| d.p50, Marker::Circle, RGBColor(31, 119, 180)),
    ("P90", |d| d.p90, Marker::Triangle, RGBColor(255, 127, 14)),
    ("P99", |d| d.p99, Marker::Cross, RGBColor(214, 39, 40)),
];

/// Throughput measures: title, axis description, value.
const THROUGHPUTS: [(&str, &str, SummaryFn); 2] = [
    ("Output throughput", "output tokens/s", |s| s.output_tokens_per_s),
    ("Request throughput", "requests/s", |s| s.requests_per_s),
];

/// The runs of a report in ascending load order.
fn sorted_runs(report: &BenchReport) -> Vec<&RunReport> {
    let mut runs: Vec<&RunReport> = report.runs.iter().collect();
    runs.sort_by(|a, b| a.load().0.total_cmp(&b.load().0));
    runs
}

/// The load axis: logarithmic for a geometric sweep (largest at least 8 times the smallest),
/// labelled at the levels themselves when there are few.
fn load_axis(reports: &[BenchReport]) -> Axis {
    let levels = super::levels::all_levels(reports);
    let (lo, hi) = (levels[0], levels[levels.len() - 1]);
    let axis = if lo > 0.0 && hi / lo >= 8.0 {
        Axis::log(lo / 1.2, hi * 1.2)
    } else {
        Axis::fit(levels.iter().copied(), true, false)
    };
    if levels.len() <= 12 {
        axis.with_ticks(&levels)
    } else {
        axis
    }
}

/// Latency percentiles, throughput and the knee, against load.
pub fn figures(reports: &[BenchReport], kind: LoadKind, what: &str) -> Vec<Figure> {
    vec![latency_vs_load(reports, kind, what), throughput_vs_load(reports, kind, what), knee(reports, kind, what)]
}

fn latency_vs_load(reports: &[BenchReport], kind: LoadKind, what: &str) -> Figure {
    let x = load_axis(reports);
    let panels = LATENCIES
        .iter()
        .enumerate()
        .map(|(n, lat)| {
            let mut series = Vec::new();
            for (i, report) in reports.iter().enumerate() {
                for (name, pick, marker, pct_color) in PERCENTILES {
                    let points = sorted_runs(report)
                        .into_iter()
                        .map(|run| (run.load().0, (lat.of)(&run.summary)))
                        .filter(|(_, d)| d.count > 0)
                        .map(|(l, d)| (l, pick(d)))
                        .collect();
                    let (label, color) = if reports.len() == 1 {
                        (name.to_string(), pct_color)
                    } else {
                        (format!("{} {name}", report.target.label), PALETTE[i % PALETTE.len()])
                    };
                    series.push(Series { label: Some(label), color, style: Style::Markers(marker), points });
                }
            }
            // The legend only in the first panel, above the lines; the others share its key.
            let legend = (n == 0).then_some(SeriesLabelPosition::UpperLeft);
            let y = Axis::fit(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)), true, true);
            let y = if n == 0 { y.with_headroom(legend_share(series.len())) } else { y };
            let log_note = if y.is_log() { ", log scale" } else { "" };
            Panel {
                title: format!("{} ({}) percentiles", lat.title, lat.short),
                x: x.clone(),
                y,
                x_desc: kind.axis().into(),
                y_desc: format!("{} (ms{log_note})", lat.short),
                series,
                labels: Vec::new(),
                legend,
                empty_note: "no successful requests".into(),
            }
        })
        .collect();
    Figure { name: "latency_vs_load", title: format!("Latency against load: {what}"), cols: 2, panels }
}

fn throughput_vs_load(reports: &[BenchReport], kind: LoadKind, what: &str) -> Figure {
    let x = load_axis(reports);
    let panels = THROUGHPUTS
        .iter()
        .enumerate()
        .map(|(n, (title, unit, pick))| {
            let series: Vec<Series> = reports
                .iter()
                .enumerate()
                .map(|(i, report)| Series {
                    label: Some(report.target.label.clone()),
                    color: PALETTE[i % PALETTE.len()],
                    style: Style::Markers(Marker::Circle),
                    points: sorted_runs(report).into_iter().map(|run| (run.load().0, pick(&run.summary))).collect(),
                })
                .collect();
            Panel {
                title: format!("{title} ({unit})"),
                x: x.clone(),
                y: Axis::fit(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)), true, false),
                x_desc: kind.axis().into(),
                y_desc: unit.to_string(),
                series,
                labels: Vec::new(),
                legend: (n == 0).then_some(SeriesLabelPosition::LowerRight),
                empty_note: "no runs".into(),
            }
        })
        .collect();
    Figure { name: "throughput_vs_load", title: format!("Throughput against load: {what}"), cols: 2, panels }
}

/// P99 TTFT, TPOT and E2E against output tokens/s, a line per report through its load levels,
/// each point labelled with its level: where latency turns up is the knee.
fn knee(reports: &[BenchReport], kind: LoadKind, what: &str) -> Figure {
    let tput_all = reports.iter().flat_map(|r| r.runs.iter().map(|run| run.summary.output_tokens_per_s));
    let x = Axis::fit(tput_all, true, false);
    let panels = [&LATENCIES[0], &LATENCIES[1], &LATENCIES[3]]
        .into_iter()
        .enumerate()
        .map(|(n, lat)| {
            let mut series = Vec::new();
            let mut labels = Vec::new();
            for (i, report) in reports.iter().enumerate() {
                let color = PALETTE[i % PALETTE.len()];
                let mut points = Vec::new();
                for run in sorted_runs(report) {
                    let d = (lat.of)(&run.summary);
                    if d.count == 0 {
                        continue;
                    }
                    let at = (run.summary.output_tokens_per_s, d.p99);
                    points.push(at);
                    labels.push(PointLabel { at, text: kind.short(run.load().0), color });
                }
                series.push(Series {
                    label: Some(report.target.label.clone()),
                    color,
                    style: Style::Markers(Marker::Circle),
                    points,
                });
            }
            let legend = (n == 0).then_some(SeriesLabelPosition::UpperLeft);
            let y = Axis::fit(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)), true, true);
            // Room above the top point for its label, and in the first panel for the legend.
            let y = y.with_headroom(if n == 0 { legend_share(series.len()) } else { 0.06 });
            let log_note = if y.is_log() { ", log scale" } else { "" };
            Panel {
                title: format!("P99 {} against output throughput", lat.short),
                x: x.clone(),
                y,
                x_desc: "output tokens/s".into(),
                y_desc: format!("P99 {} (ms{log_note})", lat.short),
                series,
                labels,
                legend,
                empty_note: "no successful requests".into(),
            }
        })
        .collect();
    Figure { name: "latency_vs_throughput", title: format!("Latency against throughput: {what}"), cols: 3, panels }
}
