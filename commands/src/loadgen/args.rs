//! The flags of a load run, shared by `tgi bench` (flattened into its own) and `tgi tune` (its trials), and the
//! small value types they parse into (lists, token counts, rates).

use std::path::PathBuf;
use std::time::Duration;

use crate::duration::parse_duration;
use crate::error::InputError;
use crate::profile::Slo;

/// What to send, how and how much: the target's API, the load levels, the workload and the measurement.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// The API to speak: tgi (/generate_stream), openai (/v1/completions or, with --endpoint chat,
    /// /v1/chat/completions), anthropic (/v1/messages), responses (/v1/responses) or auto (probe /info, then
    /// /v1/models). With anthropic and responses the prompt is one user message, and TTFT and ITL are measured from
    /// the text (or tool input) delta events.
    #[arg(long, value_enum, default_value_t = ApiChoice::Auto, help_heading = "Target")]
    pub api: ApiChoice,

    /// OpenAI endpoint: completions (raw prompt) or chat (/v1/chat/completions, the prompt as one user message).
    #[arg(long, value_enum, default_value_t = Endpoint::Completions, help_heading = "Target")]
    pub endpoint: Endpoint,

    /// The API key, sent as `Authorization: Bearer KEY` (as `x-api-key: KEY` with --api anthropic).
    #[arg(long, env = "TGI_API_KEY", value_name = "KEY", hide_env_values = true, help_heading = "Target")]
    pub api_key: Option<String>,

    /// The `model` field of OpenAI requests [default: the first model /v1/models lists].
    #[arg(long, value_name = "NAME", help_heading = "Target")]
    pub model_name: Option<String>,

    /// A label for this target in tables, charts and comparisons [default: the model or URL].
    #[arg(long, value_name = "TEXT", help_heading = "Target")]
    pub label: Option<String>,

    /// Closed loop: clients each sending their next request when the last ends; a list is a sweep (1,4,16).
    /// With --rate, the cap on requests in flight (one value).
    #[arg(short, long, value_name = "N[,N...]", value_delimiter = ',', help_heading = "Load")]
    pub concurrency: Vec<usize>,

    /// Open loop: mean requests per second, arrivals at random (Poisson, see --burstiness); a list is a sweep;
    /// `sweep` measures synchronous and maximum throughput and then --sweep-points rates between them.
    #[arg(long, value_name = "R[,R...]|sweep", help_heading = "Load")]
    pub rate: Option<RateSpec>,

    /// Rate sweep: number of load levels in all (synchronous, throughput, and evenly spaced rates between).
    #[arg(long, default_value_t = 10, value_name = "N", help_heading = "Load")]
    pub sweep_points: usize,

    /// Arrival burstiness: gaps are gamma-distributed with this shape (1 = Poisson, <1 burstier, >1 more even).
    #[arg(long, default_value_t = 1.0, value_name = "B", help_heading = "Load")]
    pub burstiness: f64,

    /// Requests measured per load level [default: 100 unless --duration].
    #[arg(long, value_name = "N", help_heading = "Load")]
    pub requests: Option<usize>,

    /// Length of each load level instead of a request count, e.g. 60s, 500ms, 2m (requests in flight at the end
    /// are waited for and counted).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Load")]
    pub duration: Option<Duration>,

    /// Requests sent (and not measured) before the first load level.
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Load")]
    pub warmup: usize,

    /// Seed of the arrival times and the synthetic prompts.
    #[arg(long, default_value_t = 0, help_heading = "Load")]
    pub seed: u64,

    /// Prompts: plain lines, JSONL ({"prompt": ..., "max_tokens": ...}) or a ShareGPT JSON file.
    #[arg(long, value_name = "FILE", help_heading = "Workload")]
    pub prompt_file: Option<PathBuf>,

    /// The format of --prompt-file.
    #[arg(long, value_enum, default_value_t = DatasetFormat::Auto, help_heading = "Workload")]
    pub dataset: DatasetFormat,

    /// Synthetic prompts of this many tokens: a count or MEAN:SPREAD (uniform in MEAN +- SPREAD); -p as
    /// llama-bench's prompt length.
    #[arg(
        short = 'p',
        long,
        visible_alias = "n-prompt",
        value_name = "N|MEAN:SPREAD",
        default_value = "128",
        help_heading = "Workload"
    )]
    pub input_tokens: TokenCount,

    /// Tokens to generate per request (overrides a prompt file's): a count or MEAN:SPREAD; -n as llama-bench's
    /// and llama-cli's generation length [default: 128, or the file's].
    #[arg(short = 'n', long, visible_alias = "n-gen", value_name = "N|MEAN:SPREAD", help_heading = "Workload")]
    pub output_tokens: Option<TokenCount>,

    /// Tokenizer for synthetic prompts and ShareGPT lengths: tokenizer.json, a model directory, a GGUF file or a
    /// hub id (from the local Hugging Face cache) [default: the in-process model's, else the server's /tokenize].
    #[arg(long, value_name = "PATH|ID", help_heading = "Workload")]
    pub tokenizer: Option<String>,

    /// Ask the server to ignore end-of-sequence so outputs have the requested length (OpenAI API: `ignore_eos`,
    /// which vLLM, llama.cpp and tgi accept; TGI's own API has no such parameter).
    #[arg(long, help_heading = "Workload")]
    pub ignore_eos: bool,

    /// Seconds to wait for a connection.
    #[arg(long, default_value_t = 10.0, value_name = "SECS", help_heading = "Measurement")]
    pub connect_timeout: f64,

    /// Seconds to wait for the response headers and for each chunk of the stream.
    #[arg(long, default_value_t = 60.0, value_name = "SECS", help_heading = "Measurement")]
    pub timeout: f64,

    /// Service-level objectives, e.g. ttft=200ms,tpot=50ms,e2e=2s: adds goodput and SLO attainment.
    #[arg(long, value_name = "SPEC", help_heading = "Measurement")]
    pub slo: Option<Slo>,

    /// Sample the server's /metrics during each level (batch size, queue, KV, speculation acceptance).
    #[arg(long, help_heading = "Measurement")]
    pub scrape_metrics: bool,

    /// No progress bar and no tables (only the files asked for, and errors).
    #[arg(short, long, help_heading = "Output")]
    pub quiet: bool,
}

impl LoadArgs {
    /// Checks flag combinations clap cannot express.
    pub fn validate(&self) -> Result<(), InputError> {
        let bad = |m: &str| Err(InputError(m.to_string()));
        if self.concurrency.contains(&0) {
            return bad("--concurrency must be at least 1");
        }
        if self.rate.is_some() && self.concurrency.len() > 1 {
            return bad("with --rate, --concurrency is the cap on requests in flight: give one value");
        }
        if self.requests.is_some() && self.duration.is_some() {
            return bad("give --requests or --duration, not both");
        }
        if self.requests == Some(0) {
            return bad("--requests must be at least 1");
        }
        if !(self.burstiness.is_finite() && self.burstiness > 0.0) {
            return bad("--burstiness must be a positive number (1 = Poisson)");
        }
        if self.rate == Some(RateSpec::Sweep) && self.sweep_points < 2 {
            return bad("--sweep-points must be at least 2");
        }
        for (name, v) in [("--timeout", self.timeout), ("--connect-timeout", self.connect_timeout)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(InputError(format!("{name} must be a positive number of seconds")));
            }
        }
        Ok(())
    }
}

/// Which API the target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiChoice {
    /// Probe /info (TGI) then /v1/models (OpenAI).
    Auto,
    /// TGI's /generate_stream.
    Tgi,
    /// OpenAI's /v1/completions or /v1/chat/completions.
    Openai,
    /// Anthropic's /v1/messages (the key sent as x-api-key, with anthropic-version).
    Anthropic,
    /// OpenAI's /v1/responses (nothing stored: store is false).
    Responses,
}

/// The OpenAI endpoint used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Endpoint {
    /// /v1/completions with the raw prompt.
    Completions,
    /// /v1/chat/completions with the prompt as a user message.
    Chat,
}

/// The format of a prompt file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DatasetFormat {
    /// ShareGPT when the file is a JSON array, JSONL when lines are JSON objects, else plain lines.
    Auto,
    /// One prompt per non-empty line.
    Lines,
    /// One JSON object per line: prompt (or text/inputs), optional max_tokens (or output_tokens).
    Jsonl,
    /// A JSON array of {"conversations": [{"value": prompt}, {"value": reply}, ...]}.
    Sharegpt,
}

/// `--rate`: a list of rates or a sweep.
#[derive(Debug, Clone, PartialEq)]
pub enum RateSpec {
    /// These rates (requests/s), in order.
    List(Vec<f64>),
    /// From synchronous to saturation.
    Sweep,
}

impl std::str::FromStr for RateSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "sweep" {
            return Ok(RateSpec::Sweep);
        }
        let rates = s
            .split(',')
            .map(|r| match r.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
                _ => Err(format!("'{r}' is not a positive request rate (requests/s) or 'sweep'")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RateSpec::List(rates))
    }
}

/// A token count, fixed or drawn uniformly from `mean - spread ..= mean + spread`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenCount {
    /// The mean.
    pub mean: u64,
    /// Half the range; 0 for a fixed count.
    pub spread: u64,
}

impl std::str::FromStr for TokenCount {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not a token count (N or MEAN:SPREAD, e.g. 128 or 128:32)");
        let (m, sp) = s.split_once(':').unwrap_or((s, "0"));
        let mean: u64 = m.trim().parse().map_err(|_| bad())?;
        let spread: u64 = sp.trim().parse().map_err(|_| bad())?;
        if mean == 0 || spread >= mean {
            return Err(format!("'{s}': the count must be at least 1 and the spread below the mean"));
        }
        Ok(TokenCount { mean, spread })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_values() {
        assert_eq!("128:32".parse::<TokenCount>().unwrap(), TokenCount { mean: 128, spread: 32 });
        assert_eq!("7".parse::<TokenCount>().unwrap(), TokenCount { mean: 7, spread: 0 });
        assert!("0".parse::<TokenCount>().is_err() && "8:8".parse::<TokenCount>().is_err());
        assert_eq!("sweep".parse::<RateSpec>().unwrap(), RateSpec::Sweep);
        assert_eq!("1,2.5".parse::<RateSpec>().unwrap(), RateSpec::List(vec![1.0, 2.5]));
        assert!("0".parse::<RateSpec>().is_err());
    }
}
