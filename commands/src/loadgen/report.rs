//! What a benchmark run records and writes (`--json`): every request's raw timings, and per load
//! level a summary of each measure. `tgi bench compare` and the charts read the same types back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A whole `tgi bench` invocation: the target, then one run per load level (sweep point).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// What was measured.
    pub target: Target,
    /// One entry per concurrency or rate, in the order they ran.
    pub runs: Vec<RunReport>,
}

/// The server under test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// Base URL, e.g. `http://127.0.0.1:3000`.
    pub url: String,
    /// The API spoken: `tgi` or `openai`.
    pub api: String,
    /// The route measured: `/generate_stream`, `/v1/completions` or `/v1/chat/completions` (absent in reports
    /// written before it was recorded).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub route: String,
    /// Model name as the server reports it, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A label for charts and comparisons (defaults to the model or URL).
    pub label: String,
}

/// One load level: closed loop at a fixed concurrency, or open loop at a request rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Closed loop: the number of clients, each sending its next request when the last ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// Open loop: the mean request rate (requests per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Aggregates over the measured requests (warm-up excluded).
    pub summary: RunSummary,
    /// Every measured request's raw timings.
    pub requests: Vec<RequestRecord>,
}

impl RunReport {
    /// The load level as a number for a chart's x axis (concurrency or rate) and its axis name.
    pub fn load(&self) -> (f64, &'static str) {
        match (self.concurrency, self.rate) {
            (Some(c), _) => (c as f64, "concurrency"),
            (None, Some(r)) => (r, "request rate (req/s)"),
            (None, None) => (0.0, "load"),
        }
    }
}

/// One request as the client saw it. Times are milliseconds unless the name says seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Index within the run, in order of scheduling.
    pub id: usize,
    /// When the request was due, seconds since the run started (open loop: its arrival time).
    pub scheduled_s: f64,
    /// Client queue time: from due to actually sent (a busy client or connection pool), kept out of TTFT.
    pub queue_ms: f64,
    /// Time to first token: from sent to the first token's bytes arriving; `None` when none came.
    pub ttft_ms: Option<f64>,
    /// Every gap between consecutive token-bearing chunks, in order.
    pub itl_ms: Vec<f64>,
    /// End to end: from sent to the last byte of the response; `None` on error.
    pub e2e_ms: Option<f64>,
    /// Prompt tokens (from the server's usage or details, else the workload's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Tokens generated (from usage/details when reported, else counted from the stream).
    pub output_tokens: u64,
    /// Why the request failed; `None` when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorKind>,
    /// The server's or transport's message for a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

impl RequestRecord {
    /// Time per output token after the first: (E2E - TTFT) / (output tokens - 1), as vLLM defines it.
    pub fn tpot_ms(&self) -> Option<f64> {
        match (self.e2e_ms, self.ttft_ms, self.error) {
            (Some(e2e), Some(ttft), None) if self.output_tokens > 1 => {
                Some((e2e - ttft) / (self.output_tokens - 1) as f64)
            }
            _ => None,
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ErrorKind {
    /// A 4xx status other than 429 (the request was refused as invalid).
    #[serde(rename = "4xx")]
    Client,
    /// 429 Too Many Requests (the server shed load).
    #[serde(rename = "429")]
    Overloaded,
    /// A 5xx status, or an error event inside a 200 stream.
    #[serde(rename = "5xx")]
    Server,
    /// No response (connect or a read) within the timeout.
    #[serde(rename = "timeout")]
    Timeout,
    /// The connection failed or was closed before the response ended.
    #[serde(rename = "connection")]
    Connection,
    /// The response could not be understood (not SSE, bad JSON, no tokens).
    #[serde(rename = "protocol")]
    Protocol,
}

impl ErrorKind {
    /// All kinds, in table order.
    pub const ALL: [ErrorKind; 6] = [
        ErrorKind::Client,
        ErrorKind::Overloaded,
        ErrorKind::Server,
        ErrorKind::Timeout,
        ErrorKind::Connection,
        ErrorKind::Protocol,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Client => "4xx",
            ErrorKind::Overloaded => "429",
            ErrorKind::Server => "5xx",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connection => "connection",
            ErrorKind::Protocol => "protocol",
        }
    }
}

/// Aggregates of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Requests that completed without error.
    pub requests_ok: u64,
    /// Failed requests by kind (only kinds that occurred).
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Wall time of the measured part of the run, seconds.
    pub duration_s: f64,
    /// Time to first token, ms (successful requests).
    pub ttft_ms: Distribution,
    /// Time per output token after the first, ms (successful requests with two or more tokens).
    pub tpot_ms: Distribution,
    /// Every inter-token gap of every successful request, ms.
    pub itl_ms: Distribution,
    /// End-to-end latency, ms (successful requests).
    pub e2e_ms: Distribution,
    /// Client queue time, ms (all requests).
    pub queue_ms: Distribution,
    /// Successful requests per second of wall time.
    pub requests_per_s: f64,
    /// Generated tokens per second of wall time.
    pub output_tokens_per_s: f64,
    /// Prompt plus generated tokens per second of wall time.
    pub total_tokens_per_s: f64,
    /// Requests per second that met every SLO (`None` without `--slo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// Fraction of all requests that met every SLO (`None` without `--slo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_attainment: Option<f64>,
    /// Most requests in flight at once.
    pub peak_concurrency: usize,
    /// Server-side figures scraped from `/metrics` (difference between before and after), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server: BTreeMap<String, f64>,
}

/// Summary statistics of one measure. Percentiles interpolate linearly between order statistics
/// (numpy's default, which vLLM's benchmark uses). All zero when there were no samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Smallest sample.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Distribution {
    /// Summarises `samples` (any order).
    pub fn of(samples: &[f64]) -> Distribution {
        if samples.is_empty() {
            return Distribution::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len() as f64;
        let mean = s.iter().sum::<f64>() / n;
        let var = s.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        Distribution {
            count: s.len(),
            mean,
            std: var.sqrt(),
            min: s[0],
            p50: percentile(&s, 50.0),
            p90: percentile(&s, 90.0),
            p95: percentile(&s, 95.0),
            p99: percentile(&s, 99.0),
            max: s[s.len() - 1],
        }
    }
}

/// The `q`th percentile of sorted, non-empty `s`, interpolating linearly (numpy's default).
pub fn percentile(s: &[f64], q: f64) -> f64 {
    let pos = q / 100.0 * (s.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_numpy() {
        // numpy.percentile([1..=10], [50, 90, 95, 99]) = 5.5, 9.1, 9.55, 9.91
        let s: Vec<f64> = (1..=10).map(f64::from).collect();
        let d = Distribution::of(&s);
        assert_eq!((d.count, d.min, d.max, d.mean), (10, 1.0, 10.0, 5.5));
        for (got, want) in [(d.p50, 5.5), (d.p90, 9.1), (d.p95, 9.55), (d.p99, 9.91)] {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        assert!((d.std - 8.25f64.sqrt()).abs() < 1e-12);
        assert_eq!(Distribution::of(&[]), Distribution::default());
    }

    #[test]
    fn tpot_is_vllms() {
        let r = RequestRecord {
            id: 0,
            scheduled_s: 0.0,
            queue_ms: 0.0,
            ttft_ms: Some(100.0),
            itl_ms: vec![10.0; 4],
            e2e_ms: Some(140.0),
            input_tokens: None,
            output_tokens: 5,
            error: None,
            error_message: None,
        };
        assert_eq!(r.tpot_ms(), Some(10.0));
        assert_eq!(RequestRecord { output_tokens: 1, ..r.clone() }.tpot_ms(), None);
        let json = serde_json::to_string(&ErrorKind::Overloaded).unwrap();
        assert_eq!(json, "\"429\"");
    }
}
