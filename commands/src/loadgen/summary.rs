//! A level's records -> its [`RunSummary`]: distributions, throughput, errors, goodput and SLO attainment.

use std::collections::BTreeMap;

use super::load::LevelResult;
use super::report::{Distribution, RequestRecord, RunSummary};
use crate::profile::Slo;

/// Whether `r` succeeded and meets every objective in `slo`.
pub fn meets(r: &RequestRecord, slo: &Slo) -> bool {
    let within = |limit: Option<f64>, value: Option<f64>| match limit {
        None => true,
        Some(l) => value.is_some_and(|v| v <= l),
    };
    // A one-token answer has no TPOT; it cannot miss a TPOT objective.
    let tpot = if r.output_tokens > 1 { r.tpot_ms() } else { Some(0.0) };
    r.error.is_none() && within(slo.ttft_ms, r.ttft_ms) && within(slo.tpot_ms, tpot) && within(slo.e2e_ms, r.e2e_ms)
}

/// Summarises one level.
pub fn summarize(level: &LevelResult, slo: Option<&Slo>) -> RunSummary {
    let recs = &level.records;
    let ok: Vec<&RequestRecord> = recs.iter().filter(|r| r.error.is_none()).collect();
    let mut errors = BTreeMap::new();
    for r in recs {
        if let Some(k) = r.error {
            *errors.entry(k).or_insert(0) += 1;
        }
    }
    let d = level.duration_s.max(1e-9);
    let out_tokens: u64 = ok.iter().map(|r| r.output_tokens).sum();
    let in_tokens: u64 = ok.iter().filter_map(|r| r.input_tokens).sum();
    let met = slo.map(|s| recs.iter().filter(|r| meets(r, s)).count());
    RunSummary {
        requests_ok: ok.len() as u64,
        errors,
        duration_s: level.duration_s,
        ttft_ms: Distribution::of(&ok.iter().filter_map(|r| r.ttft_ms).collect::<Vec<_>>()),
        tpot_ms: Distribution::of(&ok.iter().filter_map(|r| r.tpot_ms()).collect::<Vec<_>>()),
        itl_ms: Distribution::of(&ok.iter().flat_map(|r| r.itl_ms.iter().copied()).collect::<Vec<_>>()),
        e2e_ms: Distribution::of(&ok.iter().filter_map(|r| r.e2e_ms).collect::<Vec<_>>()),
        queue_ms: Distribution::of(&recs.iter().map(|r| r.queue_ms).collect::<Vec<_>>()),
        requests_per_s: ok.len() as f64 / d,
        output_tokens_per_s: out_tokens as f64 / d,
        total_tokens_per_s: (out_tokens + in_tokens) as f64 / d,
        goodput: met.map(|m| m as f64 / d),
        slo_attainment: met.map(|m| if recs.is_empty() { 0.0 } else { m as f64 / recs.len() as f64 }),
        peak_concurrency: level.peak_concurrency,
        server: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::report::ErrorKind;

    fn rec(id: usize, ttft: f64, e2e: f64, tokens: u64, error: Option<ErrorKind>) -> RequestRecord {
        RequestRecord {
            id,
            scheduled_s: 0.0,
            queue_ms: 1.0,
            ttft_ms: Some(ttft),
            itl_ms: vec![(e2e - ttft) / (tokens - 1) as f64; tokens as usize - 1],
            e2e_ms: error.is_none().then_some(e2e),
            input_tokens: Some(10),
            output_tokens: tokens,
            error,
            error_message: None,
        }
    }

    #[test]
    fn summary_and_slo() {
        let level = LevelResult {
            records: vec![
                rec(0, 100.0, 500.0, 5, None),
                rec(1, 300.0, 700.0, 5, None),
                rec(2, 100.0, 2100.0, 5, None),
                rec(3, 100.0, 200.0, 5, Some(ErrorKind::Server)),
            ],
            duration_s: 2.0,
            peak_concurrency: 3,
        };
        let slo: Slo = "ttft=200ms,e2e=1s".parse().unwrap();
        let s = summarize(&level, Some(&slo));
        assert_eq!((s.requests_ok, s.errors.get(&ErrorKind::Server).copied()), (3, Some(1)));
        assert_eq!((s.requests_per_s, s.output_tokens_per_s, s.total_tokens_per_s), (1.5, 7.5, 22.5));
        assert_eq!((s.goodput, s.slo_attainment), (Some(0.5), Some(0.25)));
        assert_eq!((s.ttft_ms.count, s.itl_ms.count, s.queue_ms.count), (3, 12, 4));
        assert_eq!(s.tpot_ms.min, 100.0);
        assert!(summarize(&level, None).goodput.is_none());
    }
}
