//! The flags of `tgi tune`.

use std::path::PathBuf;

use crate::profile::Slo;

/// How tune works, for `--help`.
const ABOUT: &str = "\
Each trial starts `tgi serve` (this executable) with one configuration on a free loopback port, warms it up, runs \
the profile's workload through tgi bench's machinery --repeats times (closed loop of the profile's concurrency, \
synthetic prompts, end-of-sequence ignored), records TTFT/TPOT/ITL/E2E P50/P90/P99, throughput, goodput under the \
profile's SLOs and the server's peak RSS, then stops and reaps it. The whole grid runs when it has at most --budget \
configurations; otherwise coordinate descent from serve's defaults, one parameter at a time (in the order of the \
flags below), at most --budget trials. The search maximises goodput (requests per second meeting every SLO); \
differences within the median absolute deviation of the repeats are ties. The best configuration is the one with \
the highest goodput whose P99s meet the SLOs.\n\n\
Without sweep flags these are swept: --threads 1,N/2,N (N = the profile's threads within this machine), \
--max-batch-size 1,4,16,64, --max-batch-prefill-tokens 256,1024,4096, --max-batch-total-tokens default,C*(I+O),\
4*C*(I+O) (C clients, I+O tokens per request), --waiting-served-ratio 0,0.3,1.2, --kv-cache-dtype f32,f16,q8_0, \
--speculate none,ngram:2,ngram:4. With any sweep flag, only the parameters given are swept. `default` (or `none`) \
in a list is serve's own default.\n\n\
Every finished trial is appended to the journal (JSON lines); rerunning with the same journal skips the trials \
already there, so a killed sweep resumes. The best configuration is written to --out as the TOML `tgi serve \
--config` reads, and copied to $XDG_CONFIG_HOME/tgi/tuned/PROFILE.toml (~/.config/...), which `tgi serve --profile \
PROFILE` applies. Exits 1 when no configuration meets the SLOs (the journal is kept).\n\n\
Examples:\n  \
tgi tune --list-profiles\n  \
tgi tune --profile auto --dry-run\n  \
tgi tune -m model-q4_k_m.gguf --profile x86-4c8g --budget 12 --repeats 3 \\\n    \
--plot tune-charts/\n  \
tgi tune -m model.gguf --profile auto --threads 1,2 --max-batch-size 1,8 \\\n    \
--out best.toml\n  \
tgi tune -m model-f16.gguf --profile rpi5 --quantize none,q8_0,q4_k_m \\\n    \
--kv-cache-dtype f16,q8_0";

/// Arguments of `tgi tune`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = ABOUT)]
pub struct TuneArgs {
    /// List the shipped hardware profiles and exit.
    #[arg(long, help_heading = "Profile")]
    pub list_profiles: bool,

    /// Print the plan (the notes, the workload, the configurations the trials would run) and exit: no trial
    /// runs and no file is written (the model is still probed when the profile has less memory than this
    /// machine).
    #[arg(long, help_heading = "Search")]
    pub dry_run: bool,

    /// The target: a shipped profile's name (see --list-profiles), a profile TOML file, or `auto` (this
    /// machine's cores and memory, CPU, default SLOs).
    #[arg(
        long,
        value_name = "NAME|FILE.toml|auto",
        required_unless_present = "list_profiles",
        help_heading = "Profile"
    )]
    pub profile: Option<String>,

    /// The model to tune: a GGUF file, a Hugging Face directory or a hub id [default: the bundled demo model].
    #[arg(short, long, value_name = "MODEL", help_heading = "Profile")]
    pub model: Option<String>,

    /// Most trials (distinct configurations measured), journaled ones included.
    #[arg(long, default_value_t = 12, value_name = "N", help_heading = "Search")]
    pub budget: usize,

    /// Measured runs of the workload per trial (the median counts; 3 separates real differences from noise).
    #[arg(long, default_value_t = 1, value_name = "R", help_heading = "Search")]
    pub repeats: usize,

    /// Sweep these thread counts (clamped to this machine's cores and the profile's threads).
    #[arg(long, value_name = "N[,N...]", help_heading = "Sweep")]
    pub threads: Option<String>,

    /// Sweep these batch sizes.
    #[arg(long, value_name = "N[,N...]", help_heading = "Sweep")]
    pub max_batch_size: Option<String>,

    /// Sweep these prefill chunk sizes (prompt tokens computed per step).
    #[arg(long, value_name = "N[,N...]", help_heading = "Sweep")]
    pub max_batch_prefill_tokens: Option<String>,

    /// Sweep these KV cache budgets in tokens (clamped to what the profile's memory holds).
    #[arg(long, value_name = "N[,N...]", help_heading = "Sweep")]
    pub max_batch_total_tokens: Option<String>,

    /// Sweep these waiting-served ratios.
    #[arg(long, value_name = "R[,R...]", help_heading = "Sweep")]
    pub waiting_served_ratio: Option<String>,

    /// Sweep these KV cache types (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl).
    #[arg(long, value_name = "TYPE[,TYPE...]", help_heading = "Sweep")]
    pub kv_cache_dtype: Option<String>,

    /// Sweep speculative decoding: none, or ngram:N (n-gram drafts of up to N tokens).
    #[arg(long, value_name = "none|ngram:N[,...]", help_heading = "Sweep")]
    pub speculate: Option<String>,

    /// Sweep the model's quantization: none (as given), or a `tgi quantize --type` preset (q8_0, q4_k_m, ...);
    /// the quantized copies of a dense model are made once and cached under $XDG_CACHE_HOME/tgi/tune.
    #[arg(long, value_name = "none|TYPE[,...]", help_heading = "Sweep")]
    pub quantize: Option<String>,

    /// Replace the profile's objectives (P99s), e.g. ttft=500ms,tpot=50ms,e2e=10s.
    #[arg(long, value_name = "SPEC", help_heading = "Workload")]
    pub slo: Option<Slo>,

    /// Clients in the closed loop [default: the profile's].
    #[arg(short, long, value_name = "N", help_heading = "Workload")]
    pub concurrency: Option<usize>,

    /// Requests measured per repeat [default: the profile's].
    #[arg(long, value_name = "N", help_heading = "Workload")]
    pub requests: Option<usize>,

    /// Prompt tokens per request (-p as llama-bench) [default: the profile's].
    #[arg(short = 'p', long, value_name = "N", help_heading = "Workload")]
    pub input_tokens: Option<u64>,

    /// Generated tokens per request (-n as llama-bench) [default: the profile's].
    #[arg(short = 'n', long, value_name = "N", help_heading = "Workload")]
    pub output_tokens: Option<u64>,

    /// Requests sent to each server before measuring.
    #[arg(long, default_value_t = 2, value_name = "N", help_heading = "Workload")]
    pub warmup: usize,

    /// Seconds each server may take to become healthy.
    #[arg(long, default_value_t = 300.0, value_name = "SECS", help_heading = "Workload")]
    pub serve_timeout: f64,

    /// Seconds a request may wait for its response and each chunk.
    #[arg(long, default_value_t = 120.0, value_name = "SECS", help_heading = "Workload")]
    pub timeout: f64,

    /// Write the best configuration here (TOML for `tgi serve --config`) [default: tuned-PROFILE.toml].
    #[arg(short, long, value_name = "FILE", help_heading = "Output")]
    pub out: Option<PathBuf>,

    /// The trial journal (JSON lines; resumed when it exists) [default: --out with .jsonl].
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub journal: Option<PathBuf>,

    /// Draw the Pareto chart (throughput vs E2E P99) into this directory (PNG and SVG).
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub plot: Option<PathBuf>,

    /// Write every trial, the notes and the best configuration as JSON.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub json: Option<PathBuf>,

    /// Do not copy the best configuration to the tuned-profile directory read by `tgi serve --profile`.
    #[arg(long, help_heading = "Output")]
    pub no_install: bool,

    /// No progress bar and no tables (only the files, the notes and errors).
    #[arg(short, long, help_heading = "Output")]
    pub quiet: bool,
}
