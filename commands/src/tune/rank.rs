//! Judging trials: whether each meets the profile's SLOs (and if not, why), the ranking table, the
//! best configuration, and the Pareto front of throughput against P99 latency (with its chart).

use std::path::{Path, PathBuf};

use comfy_table::{presets, CellAlignment, Table};
use plotters::chart::SeriesLabelPosition;
use plotters::style::RGBColor;

use super::journal::TrialRecord;
use super::search::Measured;
use super::space::Config;
use crate::plot::axis::Axis;
use crate::plot::figure::{Figure, Marker, Panel, PointLabel, Series, Style};
use crate::plot::fmt_ms;
use crate::profile::ProfileSlo;

/// Why `r` misses the SLOs; empty when it meets them.
pub fn misses(r: &TrialRecord, slo: &ProfileSlo) -> Vec<String> {
    if let Some(e) = &r.error {
        return vec![short_error(e)];
    }
    let m = &r.median;
    let mut why = Vec::new();
    for (name, got, limit) in [
        ("TTFT", m.ttft_ms.p99, slo.ttft_p99_ms),
        ("TPOT", m.tpot_ms.p99, slo.tpot_p99_ms),
        ("E2E", m.e2e_ms.p99, slo.e2e_p99_ms),
    ] {
        if got > limit {
            why.push(format!("{name} P99 {got:.0} ms > {limit:.0} ms"));
        }
    }
    if m.errors > 0 {
        why.push(format!("{} failed requests", m.errors));
    }
    why
}

/// The last line of an error chain (the child's own message, where there is one), shortened.
fn short_error(e: &str) -> String {
    let line = e.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(e).trim();
    let line = line.strip_prefix("error: ").unwrap_or(line);
    let mut s: String = line.chars().take(90).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    format!("failed: {s}")
}

/// Indices of `records` in rank order: those meeting the SLOs by goodput then throughput, then the rest by
/// throughput, failed trials last.
pub fn ranking(records: &[TrialRecord], slo: &ProfileSlo) -> Vec<usize> {
    let key = |r: &TrialRecord| {
        let ok = r.error.is_none();
        let meets = ok && misses(r, slo).is_empty();
        (meets, ok, r.median.goodput, r.median.output_tokens_per_s)
    };
    let mut idx: Vec<usize> = (0..records.len()).collect();
    idx.sort_by(|&a, &b| {
        let (ka, kb) = (key(&records[a]), key(&records[b]));
        kb.0.cmp(&ka.0).then(kb.1.cmp(&ka.1)).then(kb.2.total_cmp(&ka.2)).then(kb.3.total_cmp(&ka.3))
    });
    idx
}

/// The best trial: the first of the ranking when it meets the SLOs, unless it does not beat the baseline `base`
/// (serve's defaults) by more than the noise ([`Measured::beats`]): then the baseline, when it meets them.
pub fn best(records: &[TrialRecord], slo: &ProfileSlo, base: &Config) -> Option<usize> {
    let meets = |i: &usize| records[*i].error.is_none() && misses(&records[*i], slo).is_empty();
    let top = ranking(records, slo).into_iter().next().filter(meets)?;
    let measured = |r: &TrialRecord| Measured { score: r.median.goodput, spread: r.goodput_mad };
    let baseline = (0..records.len()).find(|i| records[*i].config == *base).filter(meets);
    match baseline {
        Some(b) if !measured(&records[top]).beats(&measured(&records[b])) => Some(b),
        _ => Some(top),
    }
}

/// Indices of the trials no other trial beats on both output throughput (higher) and E2E P99 (lower).
pub fn pareto(records: &[TrialRecord]) -> Vec<usize> {
    let pts: Vec<(usize, f64, f64)> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.error.is_none())
        .map(|(i, r)| (i, r.median.output_tokens_per_s, r.median.e2e_ms.p99))
        .collect();
    let mut front: Vec<(usize, f64)> = pts
        .iter()
        .filter(|&&(i, t, l)| !pts.iter().any(|&(j, t2, l2)| j != i && t2 >= t && l2 <= l && (t2 > t || l2 < l)))
        .map(|&(i, t, _)| (i, t))
        .collect();
    front.sort_by(|a, b| a.1.total_cmp(&b.1));
    front.into_iter().map(|(i, _)| i).collect()
}

/// The ranking as a table.
pub fn table(records: &[TrialRecord], slo: &ProfileSlo) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED);
    t.set_header([
        "#",
        "configuration",
        "goodput req/s",
        "req/s",
        "out tok/s",
        "TTFT P99",
        "TPOT P99",
        "E2E P99",
        "peak RSS",
        "verdict",
    ]);
    for (rank, i) in ranking(records, slo).into_iter().enumerate() {
        let r = &records[i];
        let m = &r.median;
        let why = misses(r, slo);
        let verdict = if why.is_empty() { "meets SLOs".to_string() } else { why.join("; ") };
        let spread = if r.repeats.len() > 1 { format!(" ±{:.2}", r.goodput_mad) } else { String::new() };
        let num = |ok: bool, s: String| if ok { s } else { "-".into() };
        let ok = r.error.is_none();
        t.add_row([
            (rank + 1).to_string(),
            r.config.to_string(),
            num(ok, format!("{:.2}{spread}", m.goodput)),
            num(ok, format!("{:.2}", m.requests_per_s)),
            num(ok, format!("{:.1}", m.output_tokens_per_s)),
            num(ok, fmt_ms(m.ttft_ms.p99)),
            num(ok, fmt_ms(m.tpot_ms.p99)),
            num(ok, fmt_ms(m.e2e_ms.p99)),
            r.peak_rss_mib.map_or("-".into(), |v| format!("{v:.0} MiB")),
            verdict,
        ]);
    }
    for c in 2..9 {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// Throughput against E2E P99 latency for every trial, the Pareto front joined, the best labelled. The axes
/// span the trials (not zero, nor an SLO far from them, which would squash the trials into a corner); the SLO
/// line is drawn when it falls near them, else its legend entry says where it is.
pub fn pareto_figure(records: &[TrialRecord], slo: &ProfileSlo, base: &Config, title: &str) -> Figure {
    let ok: Vec<usize> = (0..records.len()).filter(|&i| records[i].error.is_none()).collect();
    let point = |i: usize| (records[i].median.output_tokens_per_s, records[i].median.e2e_ms.p99);
    let (meet, miss): (Vec<usize>, Vec<usize>) = ok.iter().partition(|&&i| misses(&records[i], slo).is_empty());
    let front: Vec<(f64, f64)> = pareto(records).into_iter().map(point).collect();
    let latencies = ok.iter().map(|&i| point(i).1);
    let (lo, hi) = latencies.clone().fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let slo_near = slo.e2e_p99_ms >= lo / 2.0 && slo.e2e_p99_ms <= hi * 2.0;
    let x = Axis::fit(ok.iter().map(|&i| point(i).0), false, false);
    let y = Axis::fit(latencies.chain(slo_near.then_some(slo.e2e_p99_ms)), false, true)
        .with_headroom(crate::plot::figure::legend_share(4));
    let mut series = vec![
        Series {
            label: Some("Pareto front".into()),
            color: RGBColor(127, 127, 127),
            style: Style::Markers(Marker::Triangle),
            points: front,
        },
        Series {
            label: Some("meets the SLOs".into()),
            color: RGBColor(44, 160, 44),
            style: Style::Points(Marker::Circle),
            points: meet.iter().map(|&i| point(i)).collect(),
        },
        Series {
            label: Some("misses the SLOs".into()),
            color: RGBColor(214, 39, 40),
            style: Style::Points(Marker::Cross),
            points: miss.iter().map(|&i| point(i)).collect(),
        },
    ];
    if !ok.is_empty() {
        let span = plotters::coord::ranged1d::Ranged::range(&x);
        let side = if slo.e2e_p99_ms > hi { "above" } else { "below" };
        series.push(Series {
            label: Some(if slo_near {
                format!("E2E P99 SLO ({})", fmt_ms(slo.e2e_p99_ms))
            } else {
                format!("E2E P99 SLO ({}, far {side} the trials)", fmt_ms(slo.e2e_p99_ms))
            }),
            color: RGBColor(255, 127, 14),
            style: Style::Line,
            points: if slo_near { vec![(span.start, slo.e2e_p99_ms), (span.end, slo.e2e_p99_ms)] } else { Vec::new() },
        });
    }
    let labels = best(records, slo, base)
        .map(|i| PointLabel { at: point(i), text: "best".into(), color: RGBColor(0, 0, 0) })
        .into_iter()
        .collect();
    Figure {
        name: "tune-pareto",
        title: title.to_string(),
        cols: 1,
        panels: vec![Panel {
            title: "Output throughput vs end-to-end P99 latency".into(),
            x,
            y,
            x_desc: "output tokens/s".into(),
            y_desc: "E2E P99 (ms)".into(),
            series,
            labels,
            legend: Some(SeriesLabelPosition::UpperLeft),
            empty_note: "no trial completed".into(),
        }],
    }
}

/// Draws the Pareto chart into `dir`.
pub fn write_chart(
    records: &[TrialRecord],
    slo: &ProfileSlo,
    base: &Config,
    title: &str,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    crate::plot::write_figures(&[pareto_figure(records, slo, base, title)], dir)
}

#[cfg(test)]
mod tests {
    use super::super::journal::{Metrics, Percentiles};
    use super::super::space::{Config, Param, Value};
    use super::*;

    fn rec(threads: &str, tok_s: f64, e2e: f64, ttft: f64, goodput: f64) -> TrialRecord {
        let p = |v: f64| Percentiles { p50: v, p90: v, p99: v };
        TrialRecord {
            context: "c".into(),
            config: Config::default().with(Param::Threads, &Value::Set(threads.into())),
            model: "m".into(),
            error: None,
            repeats: vec![],
            median: Metrics {
                ttft_ms: p(ttft),
                tpot_ms: p(10.0),
                itl_ms: p(10.0),
                e2e_ms: p(e2e),
                output_tokens_per_s: tok_s,
                goodput,
                requests_ok: 4,
                ..Metrics::default()
            },
            goodput_mad: 0.0,
            peak_rss_mib: Some(10.0),
            server_pid: None,
            wall_s: 1.0,
        }
    }

    const SLO: ProfileSlo = ProfileSlo { ttft_p99_ms: 500.0, tpot_p99_ms: 50.0, e2e_p99_ms: 2000.0 };

    #[test]
    fn verdicts_ranking_and_front() {
        let mut failed = rec("8", 0.0, 0.0, 0.0, 0.0);
        failed.error = Some("tgi serve exited\nerror: cannot load x: bad file".into());
        let recs = vec![
            rec("1", 10.0, 1000.0, 100.0, 1.0),
            rec("2", 20.0, 1500.0, 812.0, 0.5),
            rec("3", 15.0, 900.0, 100.0, 1.5),
            rec("4", 12.0, 1200.0, 100.0, 1.2),
            failed,
        ];
        assert_eq!(misses(&recs[1], &SLO), ["TTFT P99 812 ms > 500 ms"]);
        assert_eq!(misses(&recs[4], &SLO), ["failed: cannot load x: bad file"]);
        assert_eq!(ranking(&recs, &SLO), [2, 3, 0, 1, 4]);
        let base = Config::default();
        assert_eq!(best(&recs, &SLO, &base), Some(2));
        // 3 (15 tok/s, 900 ms) dominates 1 and 4; 2 is faster but slower to finish.
        assert_eq!(pareto(&recs), [2, 1]);
        let t = table(&recs, &SLO).to_string();
        assert!(t.contains("TTFT P99 812 ms > 500 ms") && t.contains("meets SLOs"), "{t}");
        assert_eq!(best(&recs[1..2], &SLO, &base), None);
        let fig = pareto_figure(&recs, &SLO, &base, "t");
        assert_eq!(fig.panels[0].series[0].points, [(15.0, 900.0), (20.0, 1500.0)]);
        assert_eq!(fig.panels[0].labels.len(), 1);
        let dir = tempfile::tempdir().unwrap();
        let written = write_chart(&recs, &SLO, &base, "tune", dir.path()).unwrap();
        assert_eq!(written.len(), 2);
        assert!(std::fs::read_to_string(dir.path().join("tune-pareto.svg")).unwrap().contains("Pareto front"));
    }

    /// A difference within the noise does not replace serve's defaults: 3.5% more goodput with one repeat (as
    /// `max_batch_size = 1` once got installed on) keeps the baseline; 20% more does not.
    #[test]
    fn the_baseline_stays_unless_beaten_by_more_than_the_noise() {
        let base = Config::default().with(Param::Threads, &Value::Set("2".into()));
        let mut recs = vec![rec("2", 10.0, 1000.0, 100.0, 4.0), rec("1", 10.0, 1000.0, 100.0, 4.14)];
        assert_eq!(ranking(&recs, &SLO)[0], 1);
        assert_eq!(best(&recs, &SLO, &base), Some(0), "within noise: the defaults stay");
        recs[1].median.goodput = 4.8;
        assert_eq!(best(&recs, &SLO, &base), Some(1));
        // A baseline that misses the SLOs is no fallback.
        recs[0].median.ttft_ms.p99 = 900.0;
        recs[1].median.goodput = 4.14;
        assert_eq!(best(&recs, &SLO, &base), Some(1));
    }

    /// The axes span the trials: a far SLO and zero are left out, so that the points spread over the chart.
    #[test]
    fn the_pareto_chart_spans_the_trials() {
        use plotters::coord::ranged1d::Ranged;
        let recs = vec![rec("1", 4.0, 30000.0, 100.0, 0.0), rec("2", 4.6, 31000.0, 100.0, 0.0)];
        let fig = pareto_figure(&recs, &SLO, &Config::default(), "t");
        let p = &fig.panels[0];
        let (x, y) = (p.x.range(), p.y.range());
        assert!(x.start > 3.5 && x.end < 5.0, "{x:?}");
        assert!(y.start > 25000.0 && !y.contains(&SLO.e2e_p99_ms), "{y:?}");
        let slo_series =
            p.series.iter().find(|s| s.label.as_deref().is_some_and(|l| l.starts_with("E2E P99 SLO"))).unwrap();
        assert!(slo_series.points.is_empty() && slo_series.label.as_deref().unwrap().contains("far below"));
        // An SLO near the trials is drawn.
        let near = ProfileSlo { e2e_p99_ms: 40000.0, ..SLO };
        let fig = pareto_figure(&recs, &near, &Config::default(), "t");
        assert!(fig.panels[0].y.range().contains(&40000.0));
    }
}
