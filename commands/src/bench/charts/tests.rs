//! Chart tests on synthetic reports (also used by `compare`'s tests).

use super::*;
use crate::loadgen::report::{Distribution, ErrorKind, RequestRecord, RunReport, RunSummary, Target};

/// A deterministic report of `label` at the given concurrencies: 24 requests per level, 12
/// tokens each, latencies growing with load and scaled by `slowness`, every 7th gap a spike.
pub(crate) fn synthetic(label: &str, levels: &[usize], slowness: f64) -> BenchReport {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut noise = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        0.75 + 0.5 * (seed % 1000) as f64 / 1000.0
    };
    let runs = levels
        .iter()
        .map(|&c| {
            let load = 1.0 + c as f64 / 8.0;
            let requests: Vec<RequestRecord> = (0..24)
                .map(|id| {
                    let ttft = 20.0 * load * slowness * noise();
                    let itl: Vec<f64> = (0..11)
                        .map(|k| 8.0 * load * slowness * noise() * if (id + k) % 7 == 0 { 12.0 } else { 1.0 })
                        .collect();
                    let e2e = ttft + itl.iter().sum::<f64>();
                    record(id, Some(ttft), itl, Some(e2e), None)
                })
                .collect();
            run_of(Some(c), None, requests)
        })
        .collect();
    BenchReport { target: target(label), runs }
}

/// A target named `label`.
pub(crate) fn target(label: &str) -> Target {
    Target {
        url: "http://127.0.0.1:3000".into(),
        api: "tgi".into(),
        route: "/generate_stream".into(),
        model: None,
        label: label.into(),
    }
}

/// A request record with 12 output tokens.
pub(crate) fn record(
    id: usize,
    ttft: Option<f64>,
    itl: Vec<f64>,
    e2e: Option<f64>,
    error: Option<ErrorKind>,
) -> RequestRecord {
    RequestRecord {
        id,
        scheduled_s: 0.0,
        queue_ms: 0.0,
        ttft_ms: ttft,
        itl_ms: itl,
        e2e_ms: e2e,
        input_tokens: Some(8),
        output_tokens: 12,
        error,
        error_message: None,
    }
}

/// A run at `concurrency` or `rate` with its summary computed from `requests`.
pub(crate) fn run_of(concurrency: Option<usize>, rate: Option<f64>, requests: Vec<RequestRecord>) -> RunReport {
    let ok: Vec<&RequestRecord> = requests.iter().filter(|r| r.error.is_none()).collect();
    let dist = |f: &dyn Fn(&RequestRecord) -> Option<f64>| {
        Distribution::of(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    };
    let itl: Vec<f64> = ok.iter().flat_map(|r| r.itl_ms.iter().copied()).collect();
    let clients = concurrency.unwrap_or(1) as f64;
    let duration_s = ok.iter().filter_map(|r| r.e2e_ms).sum::<f64>() / 1000.0 / clients + 0.1;
    let tokens: u64 = ok.iter().map(|r| r.output_tokens).sum();
    let mut errors = std::collections::BTreeMap::new();
    for e in requests.iter().filter_map(|r| r.error) {
        *errors.entry(e).or_insert(0) += 1;
    }
    let summary = RunSummary {
        requests_ok: ok.len() as u64,
        errors,
        duration_s,
        ttft_ms: dist(&|r| r.ttft_ms),
        tpot_ms: dist(&|r| r.tpot_ms()),
        itl_ms: Distribution::of(&itl),
        e2e_ms: dist(&|r| r.e2e_ms),
        queue_ms: Distribution::of(&vec![0.0; requests.len()]),
        requests_per_s: ok.len() as f64 / duration_s,
        output_tokens_per_s: tokens as f64 / duration_s,
        total_tokens_per_s: (tokens + 8 * ok.len() as u64) as f64 / duration_s,
        goodput: None,
        slo_attainment: None,
        peak_concurrency: concurrency.unwrap_or(1),
        server: Default::default(),
    };
    RunReport { concurrency, rate, summary, requests }
}

fn names(files: &[PathBuf]) -> Vec<String> {
    let mut v: Vec<String> = files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

fn check_files(files: &[PathBuf]) {
    for f in files {
        let bytes = std::fs::read(f).unwrap();
        if f.extension().unwrap() == "png" {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display());
            assert!(bytes.len() > 5000, "{}: {} bytes", f.display(), bytes.len());
        } else {
            let s = String::from_utf8(bytes).unwrap();
            assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"), "{}", f.display());
            assert_eq!(s.matches("<text").count(), s.matches("</text>").count());
        }
    }
}

#[test]
fn a_sweep_gets_every_chart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("charts");
    let files = write_charts(&[synthetic("srv", &[1, 4, 16], 1.0)], &out).unwrap();
    let all =
        ["itl_distribution", "latency_vs_load", "latency_vs_throughput", "throughput_vs_load", "ttft_distribution"];
    let want: Vec<String> = all.iter().flat_map(|n| [format!("{n}.png"), format!("{n}.svg")]).collect();
    assert_eq!(names(&files), want);
    check_files(&files);
    let svg = |n: &str| std::fs::read_to_string(out.join(format!("{n}.svg"))).unwrap();
    assert!(svg("ttft_distribution").contains("Time to first token (TTFT): srv"));
    assert!(svg("ttft_distribution").contains("TTFT CDF, concurrency 16"));
    assert!(svg("latency_vs_load").contains("concurrency (clients)"));
    assert!(svg("latency_vs_load").contains("P99"));
    assert!(svg("throughput_vs_load").contains("output tokens/s"));
    assert!(svg("latency_vs_throughput").contains("c=16"));
    // Written again over the old ones, nothing else left in the directory.
    write_charts(&[synthetic("srv", &[1, 4, 16], 1.0)], &out).unwrap();
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 10);
}

#[test]
fn one_level_gets_the_distributions_only() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_charts(&[synthetic("srv", &[8], 1.0)], dir.path()).unwrap();
    let want = ["itl_distribution.png", "itl_distribution.svg", "ttft_distribution.png", "ttft_distribution.svg"];
    assert_eq!(names(&files), want);
    check_files(&files);
}

#[test]
fn two_reports_are_two_series() {
    let dir = tempfile::tempdir().unwrap();
    let reports = [synthetic("fast", &[1, 2, 4], 1.0), synthetic("slow", &[1, 2, 4, 8], 2.5)];
    let files = write_charts(&reports, dir.path()).unwrap();
    assert_eq!(files.len(), 10);
    let svg = std::fs::read_to_string(dir.path().join("latency_vs_load.svg")).unwrap();
    assert!(svg.contains("fast P50") && svg.contains("slow P99"));
    let svg = std::fs::read_to_string(dir.path().join("ttft_distribution.svg")).unwrap();
    assert!(svg.contains("fast vs slow"));
    // Level 8 ran only on "slow": its row has one series.
    assert!(svg.contains("slow: P50") && svg.contains("concurrency 8"));
}

#[test]
fn failed_runs_and_rates_still_draw() {
    let dir = tempfile::tempdir().unwrap();
    let failed = (0..3).map(|i| record(i, None, vec![], None, Some(ErrorKind::Overloaded))).collect();
    let ok = (0..5).map(|i| record(i, Some(10.0 + i as f64), vec![5.0; 11], Some(70.0), None)).collect();
    let report =
        BenchReport { target: target("r"), runs: vec![run_of(None, Some(2.0), failed), run_of(None, Some(4.0), ok)] };
    let files = write_charts(&[report], dir.path()).unwrap();
    assert_eq!(files.len(), 10);
    check_files(&files);
    let svg = std::fs::read_to_string(dir.path().join("ttft_distribution.svg")).unwrap();
    assert!(svg.contains("no successful requests") && svg.contains("rate 4 req/s"));
    let svg = std::fs::read_to_string(dir.path().join("latency_vs_throughput.svg")).unwrap();
    assert!(svg.contains("4/s"));
}

#[test]
fn bad_inputs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let code = |e: anyhow::Error| crate::exit_code(&e);
    let rate = BenchReport { target: target("b"), runs: vec![run_of(None, Some(1.0), vec![])] };
    let e = write_charts(&[synthetic("a", &[1], 1.0), rate], dir.path()).unwrap_err();
    assert!(e.to_string().contains("a measures concurrency but b measures rate"), "{e}");
    assert_eq!(code(e), 2);
    let empty = BenchReport { target: target("e"), runs: vec![] };
    assert_eq!(code(write_charts(&[empty], dir.path()).unwrap_err()), 2);
    assert_eq!(code(write_charts(&[], dir.path()).unwrap_err()), 2);
    let file = dir.path().join("f");
    std::fs::write(&file, "x").unwrap();
    assert_eq!(code(write_charts(&[synthetic("a", &[1], 1.0)], &file).unwrap_err()), 2);
}
