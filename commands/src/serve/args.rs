//! The flags of `tgi serve`. Each may also come from a `TGI_<NAME>` environment variable or from the
//! `--config` file (see [`super::config`]).

use std::num::NonZeroUsize;
use std::path::PathBuf;

use tgi_engines::constraint::{GrammarConfig, NumberDigits};
use tgi_engines::model::Quantize;

use super::byte_size::ByteSize;
use super::embed::PoolingFlag;
use super::grammar::{DEFAULT_QUEUE, DEFAULT_THREADS, DEFAULT_TIMEOUT_SECS};
use super::log::LogFormat;
use super::openai::reasoning::ReasoningFormat;
use super::openai::tools::ToolCallFormat;
use super::response_cache::CacheSize;
use crate::model_args::{ChatTemplateArg, ModelArgs};

/// Arguments of `tgi serve`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    group = clap::ArgGroup::new("speculation").multiple(true).args(["speculate", "draft_model", "medusa"]),
    mut_arg("model", |a| a.env("TGI_MODEL")),
    mut_arg("revision", |a| a.env("TGI_REVISION")),
    mut_arg("device", |a| a.env("TGI_DEVICE")),
    mut_arg("n_gpu_layers", |a| a.env("TGI_N_GPU_LAYERS")),
    mut_arg("dtype", |a| a.env("TGI_DTYPE")),
    mut_arg("threads", |a| a.env("TGI_THREADS")),
    mut_arg("cpu_kernels", |a| a.env("TGI_CPU_KERNELS")),
    mut_arg("mlock", |a| a.env("TGI_MLOCK")),
    mut_arg("quantize", |a| a.env("TGI_QUANTIZE")),
    mut_arg("lm_head_type", |a| a.env("TGI_LM_HEAD_TYPE")),
    mut_arg("kv_cache_dtype", |a| a.env("TGI_KV_CACHE_DTYPE")),
    mut_arg("no_kv_rotation", |a| a.env("TGI_NO_KV_ROTATION")),
    mut_arg("chat_template", |a| a.env("TGI_CHAT_TEMPLATE")),
    after_help = "Serves TGI's API (/generate, /generate_stream, /, /tokenize, /chat_tokenize, /embed, /info, /health, /metrics, \
and SageMaker's /invocations), OpenAI's (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /v1/responses) \
and Anthropic's (/v1/messages, /v1/messages/count_tokens; the key also as x-api-key); the OpenAPI description is at \
/api-doc/openapi.json, and a web chat page at / (open http://HOST:PORT/ in a browser; --no-webui turns it off).\n\n\
Every flag can also be set with a TGI_<FLAG> environment variable (TGI_PORT, TGI_MAX_BATCH_SIZE, TGI_API_KEY, ...) or \
in the --config TOML file under its long name with underscores (max_batch_size = 64); TGI's launcher variables \
(MODEL_ID, PORT, HOSTNAME, MAX_INPUT_TOKENS, MAX_TOTAL_TOKENS, MAX_BATCH_PREFILL_TOKENS, MAX_BATCH_TOTAL_TOKENS, \
MAX_CONCURRENT_REQUESTS, QUANTIZE, SPECULATE, DTYPE, REVISION, JSON_OUTPUT, API_KEY; HF_TOKEN for downloads) are \
read too, under the TGI_ ones (HOSTNAME only when it is not this machine's own name, which shells and containers set). \
A flag beats the environment, which beats the file, which beats the tuned --profile, which beats the default. The port answers 503 (/health included) while the model loads. \
SIGTERM or Ctrl-C makes /health answer 503, keeps serving for --drain-delay, then stops accepting requests and lets \
those in flight finish (up to --shutdown-timeout).\n\n\
Every request gets an id: the client's `x-request-id` header when it is printable ASCII of at most 128 bytes, else a \
generated one; it is returned in the response's `x-request-id` header and carried by every log line about the \
request.\n\nExamples:\n  \
tgi serve\n  \
tgi serve -m model-q4_k_m.gguf --port 8080 --max-concurrent-requests 64\n  \
TGI_API_KEY=secret tgi serve -m TinyLlama/TinyLlama-1.1B-Chat-v1.0 \\\n    \
--hostname 0.0.0.0\n  \
tgi serve -m gemma-3-270m.gguf -c 8192 --parallel 4 --chat-template gemma\n  \
tgi serve --config serve.toml\n  \
tgi serve --profile x86-4c8g\n  \
curl localhost:3000/generate -H 'Content-Type: application/json' \\\n    \
-d '{\"inputs\": \"Once upon a time\", \"parameters\": {\"max_new_tokens\": 20}}'\n  \
curl localhost:3000/v1/chat/completions \\\n    \
-H 'Content-Type: application/json' \\\n    \
-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'"
)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    #[command(flatten)]
    pub chat_template: ChatTemplateArg,

    /// Read settings from this TOML file (keys are the long flag names with underscores).
    #[arg(long, env = "TGI_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Apply the configuration `tgi tune --profile NAME` found for a hardware profile
    /// ($XDG_CONFIG_HOME/tgi/tuned/NAME.toml, else ~/.config/tgi/tuned/NAME.toml); without one, the profile's
    /// own baseline (its threads, within this machine). Flags, the environment and --config beat it.
    #[arg(long, env = "TGI_PROFILE", value_name = "NAME")]
    pub profile: Option<String>,

    /// The address to listen on (--host as llama-server).
    #[arg(long, visible_alias = "host", env = "TGI_HOSTNAME", default_value = "127.0.0.1", value_name = "HOST")]
    pub hostname: String,

    /// The port to listen on.
    #[arg(short, long, env = "TGI_PORT", default_value_t = 3000)]
    pub port: u16,

    /// How log lines on stderr are written: `text` for people, `json` (one object per line) for log collectors.
    /// The level comes from RUST_LOG (default `info`, e.g. RUST_LOG=debug or RUST_LOG=tgi_commands=debug).
    #[arg(long, env = "TGI_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Requests in flight at once; more are refused at once with 429.
    #[arg(long, env = "TGI_MAX_CONCURRENT_REQUESTS", default_value_t = 128, value_name = "N")]
    pub max_concurrent_requests: usize,

    /// Most `best_of` candidates a request may ask for.
    #[arg(long, env = "TGI_MAX_BEST_OF", default_value_t = 2, value_name = "N")]
    pub max_best_of: usize,

    /// Most stop sequences per request.
    #[arg(long, env = "TGI_MAX_STOP_SEQUENCES", default_value_t = 4, value_name = "N")]
    pub max_stop_sequences: usize,

    /// Most alternatives per token (`top_n_tokens`, completions' `logprobs`).
    #[arg(long, env = "TGI_MAX_TOP_N_TOKENS", default_value_t = 5, value_name = "N")]
    pub max_top_n_tokens: u32,

    /// Most OpenAI `n` choices per request.
    #[arg(long, env = "TGI_MAX_N", default_value_t = 4, value_name = "N")]
    pub max_n: usize,

    /// Most prompt tokens per request [default: --max-total-tokens minus 1].
    #[arg(long, env = "TGI_MAX_INPUT_TOKENS", value_name = "N")]
    pub max_input_tokens: Option<usize>,

    /// Most prompt plus generated tokens per request (-c/--ctx-size as llama-server's per-sequence context)
    /// [default: the model's context length; on the CPU at most 4096, unless --max-input-tokens asks for more].
    #[arg(short = 'c', long, visible_alias = "ctx-size", env = "TGI_MAX_TOTAL_TOKENS", value_name = "N")]
    pub max_total_tokens: Option<usize>,

    /// Tokens the KV cache holds for all running requests together [default: on the CPU, --max-batch-size times
    /// --max-total-tokens (as llama-server's -c times --parallel), at most half the available memory; on a GPU,
    /// 90% of its free memory after loading, at most --max-batch-size times the context length]. The size is
    /// logged before the cache is allocated.
    #[arg(long, env = "TGI_MAX_BATCH_TOTAL_TOKENS", value_name = "N")]
    pub max_batch_total_tokens: Option<usize>,

    /// Most sequences per batch (--parallel/-np as llama-server's slots) [default: 16 on the CPU, 128 on a GPU].
    #[arg(long, visible_alias = "parallel", env = "TGI_MAX_BATCH_SIZE", value_name = "N")]
    pub max_batch_size: Option<usize>,

    /// Most prompt tokens computed per step; longer prompts are prefilled in chunks.
    #[arg(long, env = "TGI_MAX_BATCH_PREFILL_TOKENS", default_value_t = 4096, value_name = "N")]
    pub max_batch_prefill_tokens: usize,

    /// Most prompt tokens a step takes while sequences are decoding (at most --max-batch-prefill-tokens, which
    /// a step with nothing decoding always gets). Short prompts (at most 1/8 of --max-batch-prefill-tokens) go
    /// in whole when they fit; long ones keep an equal share each and are prefilled oldest first, the next one
    /// starting when a step would finish those before it. Lower values keep streams flowing (inter-token
    /// latency) and make new prompts wait longer for their first token (TTFT); higher values the reverse
    /// [default: from step times fitted per batch size, as many as keep a step within --prefill-itl-factor
    /// decode-only steps, at least 16].
    #[arg(long, env = "TGI_MAX_PREFILL_TOKENS_PER_STEP", value_name = "N")]
    pub max_prefill_tokens_per_step: Option<NonZeroUsize>,

    /// When the per-step prefill cap is derived: what a step with prompt tokens beside decoding sequences may
    /// cost, as a multiple of a decode-only step of the same batch (greater than 1); the step takes an eighth of
    /// each waiting prompt's length when that is more (a prompt is prefilled in about eight steps), and the
    /// whole prefill budget when prompts are as many as the decoders or more. Lower keeps inter-token latency closer to a
    /// decode step's; higher gives new prompts their first token sooner.
    #[arg(long, env = "TGI_PREFILL_ITL_FACTOR", default_value_t = 1.25, value_name = "X")]
    pub prefill_itl_factor: f64,

    /// While prompts are prefilling beside decodes, waiting requests join the running batch once they are at
    /// least this many per running sequence (with nothing prefilling they join at the next step).
    #[arg(long, env = "TGI_WAITING_SERVED_RATIO", default_value_t = 0.3, value_name = "R")]
    pub waiting_served_ratio: f32,

    /// ...or once the oldest has waited this many steps.
    #[arg(long, env = "TGI_MAX_WAITING_TOKENS", default_value_t = 20, value_name = "N")]
    pub max_waiting_tokens: usize,

    /// Largest request body in bytes; larger ones get 413.
    #[arg(long, env = "TGI_PAYLOAD_LIMIT", default_value_t = 2_000_000, value_name = "BYTES")]
    pub payload_limit: usize,

    /// Cancel requests that take longer than this many seconds (504) [default: no limit].
    #[arg(long, env = "TGI_REQUEST_TIMEOUT", value_name = "SECS")]
    pub request_timeout: Option<f64>,

    /// Most seconds a request body may take to arrive once its headers are in; slower ones get 408 and their
    /// connection is closed (headers themselves must arrive within 30 s).
    #[arg(long, env = "TGI_BODY_TIMEOUT", default_value_t = 30.0, value_name = "SECS")]
    pub body_timeout: f64,

    /// Most connections served at once. Beyond it, a reserve of 16 more connections is answered at once: health
    /// checks (/health, /ping, GET / without the web page) as usual, anything else with 503 and Retry-After: 1. A full reserve evicts its
    /// oldest connection that has sent no request yet; failing that, new connections are closed unanswered. Each
    /// connection holds a file descriptor: the open-file limit (ulimit -n) is raised to fit when the hard limit
    /// allows, else fewer connections are served (with a warning).
    #[arg(long, env = "TGI_MAX_CONNECTIONS", default_value_t = 512, value_name = "N")]
    pub max_connections: usize,

    /// On SIGTERM/SIGINT, how many seconds requests in flight get to finish.
    #[arg(long, env = "TGI_SHUTDOWN_TIMEOUT", default_value_t = 30.0, value_name = "SECS")]
    pub shutdown_timeout: f64,

    /// On SIGTERM/SIGINT, keep serving for this many seconds with /health answering 503 before refusing new
    /// connections, so that routers and readiness probes take the replica out first; --shutdown-timeout follows.
    #[arg(long, env = "TGI_DRAIN_DELAY", default_value_t = 0.0, value_name = "SECS")]
    pub drain_delay: f64,

    /// Answer repeated deterministic requests (greedy, or sampled with a seed; no grammar) from a cache of this
    /// many entries, or of this size in bytes with a unit (64MB, 512MiB), least recently used out first. The key
    /// is the model, every generation parameter and the API key's salt; a cached stream replays as a stream;
    /// `Cache-Control: no-cache` computes a fresh answer, `no-store` one that is not kept [default: off].
    #[arg(long, env = "TGI_RESPONSE_CACHE_SIZE", value_name = "N|SIZE")]
    pub response_cache_size: Option<CacheSize>,

    /// Seconds a cached answer is served after it was computed.
    #[arg(
        long,
        env = "TGI_RESPONSE_CACHE_TTL",
        default_value_t = 300.0,
        value_name = "SECS",
        requires = "response_cache_size"
    )]
    pub response_cache_ttl: f64,

    /// How many responses of the Responses API (`POST /v1/responses` with `store`, the default) are kept for
    /// `GET /v1/responses/{id}` and `previous_response_id`: a number of responses, or a size in bytes with a unit
    /// (64MiB), least recently used out first.
    #[arg(long, env = "TGI_RESPONSES_STORE_SIZE", value_name = "N|SIZE", default_value = "64MiB")]
    pub responses_store_size: CacheSize,

    /// Seconds a stored response is kept after it was made.
    #[arg(long, env = "TGI_RESPONSES_STORE_TTL", value_name = "SECS", default_value_t = 3600.0)]
    pub responses_store_ttl: f64,

    /// Largest grammar a request may bring (`grammar`, `response_format`, a forced tool call), in bytes or with a
    /// unit: a JSON schema (about its size as compact JSON), a regular expression or a Lark grammar. Larger ones
    /// are refused with 422 before compiling.
    #[arg(long, env = "TGI_GRAMMAR_MAX_BYTES", value_name = "SIZE",
          default_value_t = ByteSize(GrammarConfig::default().limits.max_bytes))]
    pub grammar_max_bytes: ByteSize,

    /// Deepest nesting of a JSON schema in a grammar, counted in JSON levels (every object and array); deeper
    /// ones are refused with 422 before compiling.
    #[arg(long, env = "TGI_GRAMMAR_MAX_DEPTH", value_name = "N",
          default_value_t = GrammarConfig::default().limits.max_depth)]
    pub grammar_max_depth: usize,

    /// Most choices a grammar may offer in all: a JSON schema's properties, enum values, anyOf/oneOf/allOf
    /// branches (multiplied inside allOf), type lists and $refs, or a Lark grammar's `|` alternatives. It bounds
    /// the parser's work per token (up to 4 Earley items per choice in a row, and the row limit is set to fit),
    /// so that an admitted grammar never fails mid-generation on it; more are refused with 422 before compiling.
    #[arg(long, env = "TGI_GRAMMAR_MAX_CHOICES", value_name = "N",
          default_value_t = GrammarConfig::default().limits.max_choices)]
    pub grammar_max_choices: usize,

    /// Seconds a grammar may take to compile (a slower one is refused with 422; it still finishes on its thread,
    /// and is cached), and may wait for a free compile thread (a longer wait is refused with 429).
    #[arg(long, env = "TGI_GRAMMAR_COMPILE_TIMEOUT", value_name = "SECS", default_value_t = DEFAULT_TIMEOUT_SECS)]
    pub grammar_compile_timeout: f64,

    /// Threads that compile grammars, apart from the threads serving HTTP, each with a stack sized for the
    /// grammar bounds.
    #[arg(long, env = "TGI_GRAMMAR_COMPILE_THREADS", value_name = "N", default_value_t = DEFAULT_THREADS)]
    pub grammar_compile_threads: usize,

    /// Grammars that may wait for a compile thread; more are refused with 429.
    #[arg(long, env = "TGI_GRAMMAR_COMPILE_QUEUE", value_name = "N", default_value_t = DEFAULT_QUEUE)]
    pub grammar_compile_queue: usize,

    /// Memory for compiled grammars kept for reuse, in bytes or with a unit; least recently used out first. An
    /// entry counts as its lexer's automaton plus 128 bytes per byte of the grammar's text (an over-estimate);
    /// requests use copies, so evicting one never affects a request.
    #[arg(long, env = "TGI_GRAMMAR_CACHE_SIZE", value_name = "SIZE",
          default_value_t = ByteSize(GrammarConfig::default().cache_bytes))]
    pub grammar_cache_size: ByteSize,

    /// Most digits before the point of a JSON number a schema leaves unbounded (1 to 15), so that numbers always
    /// end; the schema's own minimum or maximum take precedence.
    #[arg(long, env = "TGI_GRAMMAR_INTEGER_DIGITS", value_name = "N",
          default_value_t = NumberDigits::default().integer())]
    pub grammar_integer_digits: u32,

    /// Most digits after the point of a JSON number a schema leaves unbounded (0 to 10, the most llguidance
    /// 1.9 can bound); the schema's own multipleOf takes precedence.
    #[arg(long, env = "TGI_GRAMMAR_FRACTION_DIGITS", value_name = "N",
          default_value_t = NumberDigits::default().fraction())]
    pub grammar_fraction_digits: u32,

    /// Do not share KV cache blocks between requests with a common prompt prefix.
    #[arg(long, env = "TGI_NO_PREFIX_CACHING")]
    pub no_prefix_caching: bool,

    /// Require `Authorization: Bearer KEY` on the generation routes.
    #[arg(long, env = "TGI_API_KEY", value_name = "KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// LoRA adapters to serve beside the model, as `name=path` pairs separated by commas (PEFT directories:
    /// adapter_config.json and adapter_model.safetensors; llama.cpp `.gguf` adapters; or hub ids); a request picks one by `model` (OpenAI),
    /// `parameters.adapter_id` (TGI) or `lora` (llama-server). TGI's LORA_ADAPTERS is read too.
    #[arg(long, env = "TGI_LORA_ADAPTERS", value_name = "NAME=PATH,...")]
    pub lora_adapters: Option<String>,

    /// Most LoRA adapters held at once (default 16): loading one more evicts the least recently used adapter no
    /// request is running on (or is refused with 503 when every one is in use). With this flag or
    /// --lora-adapters, memory for N adapters of --max-lora-rank on every projection is held back from the KV cache.
    #[arg(long, env = "TGI_MAX_LORAS", value_name = "N")]
    pub max_loras: Option<usize>,

    /// Highest LoRA rank an adapter may have (vLLM's default, 16); adapters of a higher rank are refused at load.
    #[arg(long, env = "TGI_MAX_LORA_RANK", default_value_t = 16, value_name = "R")]
    pub max_lora_rank: usize,

    /// Allow cross-origin browser requests from this origin (repeatable; `*` for any).
    #[arg(long, env = "TGI_CORS_ALLOW_ORIGIN", value_name = "ORIGIN", value_delimiter = ',')]
    pub cors_allow_origin: Vec<String>,

    /// Do not serve the web chat page: without this flag a browser opening `/` (a request whose Accept header
    /// names text/html) gets a chat page over /v1/chat/completions, and other clients the health check; with
    /// it, `GET /` is always the health check.
    #[arg(long, env = "TGI_NO_WEBUI")]
    pub no_webui: bool,

    /// How tool calls are read out of chat answers and written in the grammar they follow: `hermes` (`<tool_call>`
    /// tags), `llama3_json` (the answer is `{"name": ..., "parameters": ...}`) or `mistral` (`[TOOL_CALLS]`)
    /// [default: the family the chat template's markup shows; hermes, the default tool prompt's format, for a
    /// template that shows none].
    #[arg(long, env = "TGI_TOOL_CALL_PARSER", value_enum, value_name = "FORMAT")]
    pub tool_call_parser: Option<ToolCallFormat>,

    /// How chat answers' thinking is returned, for chat templates that think in `<think>…</think>` (Qwen3, QwQ,
    /// the DeepSeek-R1 distills): `deepseek` in the message's `reasoning_content` (and `reasoning`) apart from
    /// its `content`, streamed as deltas of their own; `none` left in `content` as the model wrote it.
    #[arg(long, env = "TGI_REASONING_FORMAT", value_enum, value_name = "FORMAT",
          default_value_t = ReasoningFormat::Deepseek)]
    pub reasoning_format: ReasoningFormat,

    /// Most tokens a chat answer may think for (in `<think>…</think>`, see --reasoning-format): then `</think>` is
    /// forced and the answer follows. -1: no limit; 0: no thinking (the template also gets `enable_thinking:
    /// false` unless the request's `chat_template_kwargs` set it). A grammar (`response_format`, tools) applies
    /// after the thinking.
    #[arg(long, env = "TGI_REASONING_BUDGET", value_name = "N", default_value_t = -1, allow_negative_numbers = true)]
    pub reasoning_budget: i64,

    /// How /v1/embeddings and /embed pool the decoder's final hidden states (after its final norm) into one
    /// vector per input: `mean` over every position, or the `last` position's (for models trained for it, such
    /// as Qwen3-Embedding).
    #[arg(long, env = "TGI_POOLING", value_enum, default_value_t = PoolingFlag::Mean)]
    pub pooling: PoolingFlag,

    /// Speculative decoding: draft up to N tokens per sequence and step, verified by the model in the batched
    /// step (greedy output unchanged, sampled output keeps its distribution) [default: off; 4 with
    /// --draft-model, the number of heads with Medusa].
    #[arg(long, env = "TGI_SPECULATE", value_name = "N")]
    pub speculate: Option<usize>,

    /// How drafts are proposed: `ngram` continues the latest earlier occurrence of the sequence's last tokens
    /// in its prompt and output (prompt lookup; no extra model), `draft` runs --draft-model, `medusa` the
    /// --medusa heads [default: what --draft-model or --medusa (or a Medusa directory as --model) imply, else
    /// ngram].
    #[arg(long, env = "TGI_SPECULATE_TYPE", value_enum)]
    pub speculate_type: Option<SpeculateType>,

    /// Draft model for `--speculate-type draft`: any model tgi loads (GGUF, Hugging Face, AWQ, NF4) with the
    /// target's tokenizer, run on the same device with its own KV cache; turns speculation on.
    #[arg(long, env = "TGI_DRAFT_MODEL", value_name = "MODEL")]
    pub draft_model: Option<String>,

    /// Quantize a dense draft model while loading it (the types of --quantize).
    #[arg(long, env = "TGI_DRAFT_QUANTIZE", value_name = "TYPE", requires = "draft_model",
          value_parser = |s: &str| s.parse::<Quantize>())]
    pub draft_quantize: Option<Quantize>,

    /// The draft model proposes among the first N token ids and the single-character tokens only: its output
    /// layer keeps those rows (the most frequent tokens in score-ordered vocabularies such as Gemma's), so each
    /// draft token reads a fraction of a large vocabulary's output layer. Verification is unchanged, so outputs
    /// are too [default: the whole vocabulary].
    #[arg(long, env = "TGI_DRAFT_VOCAB", value_name = "N", requires = "draft_model")]
    pub draft_vocab: Option<usize>,

    /// Medusa heads for `--speculate-type medusa`: a directory in TGI's layout (config.json with
    /// medusa_num_heads, medusa_lm_head.safetensors) trained for the model; turns speculation on. A Medusa
    /// directory given as --model serves its base_model_name_or_path with its heads.
    #[arg(long, env = "TGI_MEDUSA", value_name = "DIR")]
    pub medusa: Option<PathBuf>,

    /// Shortest n-gram looked up for n-gram drafts.
    #[arg(long, env = "TGI_NGRAM_MIN", default_value_t = 1, value_name = "N", requires = "speculation")]
    pub ngram_min: usize,

    /// Longest n-gram looked up for n-gram drafts (tried first).
    #[arg(long, env = "TGI_NGRAM_MAX", default_value_t = 3, value_name = "N", requires = "speculation")]
    pub ngram_max: usize,

    /// Steps with more sequences than this never speculate (a hard cap; below it, the measured cost of a
    /// drafted token already turns speculation off where it does not pay).
    #[arg(long, env = "TGI_SPECULATE_MAX_BATCH", default_value_t = 8, value_name = "N", requires = "speculation")]
    pub speculate_max_batch: usize,

    /// Fix the cost of one drafted token, relative to a sequence's share of a step without drafts, for the
    /// adaptive depth rule [default: measured online from the engine's own step times, per batch size].
    #[arg(long, env = "TGI_SPECULATE_TOKEN_COST", value_name = "C")]
    pub speculate_token_cost: Option<f32>,

    /// Always draft N tokens when a proposal exists, instead of following each sequence's acceptance.
    #[arg(long, env = "TGI_SPECULATE_FIXED")]
    pub speculate_fixed: bool,
}

/// How speculative drafts are proposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SpeculateType {
    /// Prompt lookup: n-grams of the sequence's own prompt and output.
    Ngram,
    /// A draft model (--draft-model).
    Draft,
    /// Medusa heads (--medusa).
    Medusa,
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::super::config::resolve;

    fn argv(extra: &[&str]) -> Vec<OsString> {
        ["tgi", "serve"].iter().chain(extra).map(OsString::from).collect()
    }

    /// What `--help` promises: every flag can be set with TGI_<FLAG> (TGI_QUANTIZE was missing once, and
    /// `TGI_QUANTIZE=bogus` went unnoticed); clap reads exactly these names.
    #[test]
    fn every_flag_has_its_tgi_variable() {
        let cmd = <super::ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"));
        let mut walked = 0;
        for arg in cmd.get_arguments().filter(|a| a.get_id() != "help") {
            let long = arg.get_long().expect("serve takes flags only");
            let want = format!("TGI_{}", long.to_ascii_uppercase().replace('-', "_"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(want.as_str()), "--{long}");
            walked += 1;
        }
        assert!(walked > 60, "{walked} flags");
    }

    #[test]
    fn prefill_cap_comes_from_the_flag_or_the_file_and_is_positive() {
        assert_eq!(resolve(&argv(&[])).unwrap().0.max_prefill_tokens_per_step, None);
        let (a, _) = resolve(&argv(&["--max-prefill-tokens-per-step", "48"])).unwrap();
        assert_eq!(a.max_prefill_tokens_per_step.map(|n| n.get()), Some(48));
        assert!(resolve(&argv(&["--max-prefill-tokens-per-step", "0"])).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("serve.toml");
        std::fs::write(&file, "max_prefill_tokens_per_step = 32\n").unwrap();
        let (a, _) = resolve(&argv(&["--config", file.to_str().unwrap()])).unwrap();
        assert_eq!(a.max_prefill_tokens_per_step.map(|n| n.get()), Some(32));
    }
}
