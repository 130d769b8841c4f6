//! The flags of `tgi bench` (a run): the target, when served in-process, and the files written; the load's
//! flags are [`LoadArgs`], shared with `tgi tune`.

use std::path::PathBuf;

use crate::loadgen::args::LoadArgs;

/// The measures, as `--help` states them (vLLM's definitions).
const DEFINITIONS: &str = "\
Measures (per request, from the client's side; times from the moment the request is written):\n  \
queue   client queue time: from when the request was due (its arrival, or its client becoming free) to \
when it was written, waiting for a free slot or a connection; kept out of TTFT\n  \
TTFT    time to first token: request written -> first chunk carrying a token\n  \
ITL     inter-token latency: every gap between consecutive token-carrying chunks\n  \
TPOT    time per output token: (E2E - TTFT) / (output tokens - 1)\n  \
E2E     end to end: request written -> last byte of the response\n\
Per load level: req/s, output tok/s and total tok/s over the level's wall time (first request due -> last \
response), mean/std/min/P50/P90/P95/P99/max of each measure, peak requests in flight, errors by kind (4xx, 429, \
5xx, timeout, connection, protocol); with --slo, goodput (req/s meeting every SLO) and SLO attainment (fraction of \
all requests meeting every SLO).\n\n\
Examples:\n  \
tgi bench --url http://127.0.0.1:3000 --concurrency 1,4,16 --requests 200\n  \
tgi bench -m model-q4_k_m.gguf -p 512 -n 128 -c 1,8\n  \
tgi bench --model model-q4_k_m.gguf --rate sweep --duration 60s \\\n    \
--json run.json --plot charts/\n  \
tgi bench --url localhost:8080 --api openai --ignore-eos \\\n    \
--input-tokens 512 --output-tokens 128:32 \\\n    \
--tokenizer TinyLlama/TinyLlama-1.1B-Chat-v1.0\n  \
tgi bench compare a.json b.json --plot charts/";

/// Arguments of `tgi bench` (a run).
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = DEFINITIONS)]
pub struct BenchArgs {
    /// The server to measure (http://host:port). Without it, `--model` is served in-process.
    #[arg(long, value_name = "URL", help_heading = "Target")]
    pub url: Option<String>,

    /// Serve this model in-process (a `tgi serve` child on a free loopback port) and measure it; a GGUF file,
    /// HF directory or hub id. Used when no --url is given [default: the bundled demo model].
    #[arg(short, long, value_name = "MODEL", help_heading = "Target")]
    pub model: Option<String>,

    /// An extra argument for the in-process `tgi serve` (repeatable), e.g. --serve-arg=--max-batch-size=8.
    #[arg(long = "serve-arg", value_name = "ARG", allow_hyphen_values = true, help_heading = "Target")]
    pub serve_args: Vec<String>,

    /// Seconds to wait for the in-process server to become healthy.
    #[arg(long, default_value_t = 300.0, value_name = "SECS", help_heading = "Target")]
    pub serve_timeout: f64,

    /// The load: API, levels, workload, measurement.
    #[command(flatten)]
    pub load: LoadArgs,

    /// Write the report (every request and each level's summary) as JSON.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub json: Option<PathBuf>,

    /// Write one row per request (with its load level) as CSV.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub csv: Option<PathBuf>,

    /// Draw charts of the run into this directory.
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub plot: Option<PathBuf>,

    /// Overwrite existing --json/--csv files.
    #[arg(long, help_heading = "Output")]
    pub force: bool,
}
