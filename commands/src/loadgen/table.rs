//! The tables printed after a run: one per load level (each measure's distribution, throughput, errors) and,
//! for a sweep, one row per level.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};

use super::report::{Distribution, ErrorKind, RunReport, RunSummary};

/// The load level's name, e.g. `concurrency 4` or `rate 2.50 req/s`.
pub fn level_name(concurrency: Option<usize>, rate: Option<f64>) -> String {
    match (concurrency, rate) {
        (Some(c), Some(r)) => format!("rate {r:.2} req/s, at most {c} in flight"),
        (Some(c), None) => format!("concurrency {c}"),
        (None, Some(r)) => format!("rate {r:.2} req/s"),
        (None, None) => "load".into(),
    }
}

/// The server metrics the table shows (batch, queue, KV in use, speculation).
const SERVER_SHOWN: [&str; 10] = [
    "batch_current_size",
    "queue_size",
    "kv_blocks_used",
    "num_requests_running",
    "num_requests_waiting",
    "requests_processing",
    "requests_deferred",
    "kv_cache_usage",
    "speculat",
    "accept",
];

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

/// Errors as `429: 3, 5xx: 1`, or `none`.
pub fn errors_text(s: &RunSummary) -> String {
    if s.errors.is_empty() {
        return "none".into();
    }
    ErrorKind::ALL
        .iter()
        .filter_map(|k| s.errors.get(k).map(|n| format!("{}: {n}", k.name())))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One level: a row per measure (mean, std, min, percentiles, max), then throughput and errors.
pub fn level_table(run: &RunReport) -> String {
    let s = &run.summary;
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["ms", "mean", "std", "min", "P50", "P90", "P95", "P99", "max", "n"]);
    let rows: [(&str, &Distribution); 5] =
        [("TTFT", &s.ttft_ms), ("TPOT", &s.tpot_ms), ("ITL", &s.itl_ms), ("E2E", &s.e2e_ms), ("queue", &s.queue_ms)];
    for (name, d) in rows {
        let mut row = vec![Cell::new(name)];
        for v in [d.mean, d.std, d.min, d.p50, d.p90, d.p95, d.p99, d.max] {
            row.push(right(format!("{v:.2}")));
        }
        row.push(right(d.count.to_string()));
        t.add_row(row);
    }
    let mut out = format!("{}\n{t}\n", level_name(run.concurrency, run.rate));
    let failed: u64 = s.errors.values().sum();
    out.push_str(&format!(
        "requests: {} ok, {failed} failed ({}) in {:.2} s; {:.2} req/s, {:.1} output tok/s, {:.1} total tok/s; \
         peak in flight {}\n",
        s.requests_ok,
        errors_text(s),
        s.duration_s,
        s.requests_per_s,
        s.output_tokens_per_s,
        s.total_tokens_per_s,
        s.peak_concurrency
    ));
    if let (Some(g), Some(a)) = (s.goodput, s.slo_attainment) {
        out.push_str(&format!("SLO: goodput {g:.2} req/s, attainment {:.1}%\n", a * 100.0));
    }
    let shown: Vec<String> = s
        .server
        .iter()
        .filter(|(k, _)| SERVER_SHOWN.iter().any(|n| k.contains(n)) && !k.ends_with(":delta"))
        .map(|(k, v)| format!("{k} = {v:.2}"))
        .collect();
    if !shown.is_empty() {
        out.push_str(&format!("server (all figures in --json): {}\n", shown.join(", ")));
    }
    out
}

/// A sweep: one row per level with the headline figures.
pub fn sweep_table(runs: &[RunReport]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let slo = runs.iter().any(|r| r.summary.goodput.is_some());
    let mut header = vec![
        "load",
        "req/s",
        "out tok/s",
        "TTFT P50",
        "TTFT P99",
        "TPOT P50",
        "TPOT P99",
        "ITL P50",
        "E2E P50",
        "E2E P99",
        "errors",
    ];
    if slo {
        header.extend(["goodput", "SLO %"]);
    }
    t.set_header(header);
    for r in runs {
        let s = &r.summary;
        let mut row = vec![Cell::new(level_name(r.concurrency, r.rate))];
        for v in [s.requests_per_s, s.output_tokens_per_s] {
            row.push(right(format!("{v:.2}")));
        }
        for v in [s.ttft_ms.p50, s.ttft_ms.p99, s.tpot_ms.p50, s.tpot_ms.p99, s.itl_ms.p50, s.e2e_ms.p50, s.e2e_ms.p99]
        {
            row.push(right(format!("{v:.1}")));
        }
        row.push(right(s.errors.values().sum::<u64>().to_string()));
        if slo {
            row.push(right(s.goodput.map_or("-".into(), |g| format!("{g:.2}"))));
            row.push(right(s.slo_attainment.map_or("-".into(), |a| format!("{:.1}", a * 100.0))));
        }
        t.add_row(row);
    }
    format!("{t}\n(times in ms)\n")
}
