//! The settings of `tgi serve`, resolved and validated once at the edge: the flags, their `TGI_*`
//! environment variables, the `--config` file and the `--profile` layer (precedence in that order,
//! see [`super::config`]) become one [`ServeSettings`]. The HTTP limits, the scheduler's
//! configuration and the model's load options are derived from it; nothing after it reads the
//! command line or the environment again.

use super::speculation::{take_medusa_model, SpeculationPlan};
use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::time::Duration;

use anyhow::Result;
use tgi_engines::constraint::{GrammarConfig, GrammarLimits, NumberDigits};
use tgi_engines::pooling::Pooling;
use tgi_engines::scheduler::Batching;

use super::args::ServeArgs;
use super::config;
use super::grammar::GrammarSettings;
use super::log::LogFormat;
use super::lora::parse_adapters;
use super::openai::reasoning::ReasoningSettings;
use super::openai::tools::ToolCallFormat;
use super::response_cache::CacheConfig;
use super::responses::store::StoreConfig;
use super::state::Access;
use crate::error::InputError;
use crate::model_args::{ChatTemplateArg, ModelArgs};

/// Every setting of `tgi serve`, each checked on its own (the checks that need the model's context
/// length and the machine's memory are [`super::budget::size`]'s).
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Which model to load and how (device, dtype, threads, quantization, KV cache type).
    pub model: ModelArgs,
    /// The chat template replacing the model's.
    pub chat_template: ChatTemplateArg,
    /// The address to listen on.
    pub hostname: String,
    /// The port to listen on.
    pub port: u16,
    /// API key and CORS origins.
    pub access: Access,
    /// Whether `GET /` serves the web chat page to browsers.
    pub webui: bool,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// How long requests in flight get to finish after SIGTERM/SIGINT.
    pub shutdown_timeout: Duration,
    /// How long the server keeps accepting after SIGTERM/SIGINT, `/health` answering 503.
    pub drain_delay: Duration,
    /// The response cache, when on.
    pub response_cache: Option<CacheConfig>,
    /// The bounds of the Responses API's store.
    pub responses_store: StoreConfig,
    /// Requests in flight at once (at least 1).
    pub max_concurrent_requests: usize,
    /// Most `best_of` candidates (at least 1).
    pub max_best_of: usize,
    /// Most stop sequences per request.
    pub max_stop_sequences: usize,
    /// Most alternatives per token.
    pub max_top_n_tokens: u32,
    /// Most OpenAI `n` choices (at least 1).
    pub max_n: usize,
    /// Largest request body in bytes (at least 1).
    pub payload_limit: usize,
    /// Longest a request may take (positive), when limited.
    pub request_timeout: Option<Duration>,
    /// Longest a request body may take to arrive (positive).
    pub body_timeout: Duration,
    /// Most connections open at once (at least 1).
    pub max_connections: usize,
    /// Most prompt tokens per request (at least 1), when given.
    pub max_input_tokens: Option<usize>,
    /// Most prompt plus generated tokens per request (at least 2), when given.
    pub max_total_tokens: Option<usize>,
    /// Tokens the KV cache holds, when given.
    pub max_batch_total_tokens: Option<usize>,
    /// Most sequences per batch (at least 1), when given.
    pub max_batch_size: Option<usize>,
    /// How the scheduler fills each step (validated): prompt-token budgets, admission, prefix caching.
    pub batching: Batching,
    /// The tool-call format of chat answers, when set (else the chat template's family).
    pub tool_call_parser: Option<ToolCallFormat>,
    /// How chat answers' thinking is returned and bounded.
    pub reasoning: ReasoningSettings,
    /// How embeddings pool the final hidden states.
    pub pooling: Pooling,
    /// How grammars are bounded, compiled and cached.
    pub grammar: GrammarSettings,
    /// Speculative decoding, when on (validated; the draft model or heads load after the target).
    pub speculation: Option<SpeculationPlan>,
    /// LoRA adapters loaded at start (`name`, `path`) and the bounds on those held.
    pub lora: LoraSettings,
    /// How the settings were resolved (the profile applied, or its baseline), for the startup log.
    pub notes: Vec<String>,
}

/// Adapters held at once without --max-loras.
pub const DEFAULT_MAX_LORAS: usize = 16;

/// The LoRA flags, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoraSettings {
    /// Adapters to load at start, `(name, path)`.
    pub adapters: Vec<(String, String)>,
    /// `--max-loras`.
    pub max_loras: usize,
    /// `--max-lora-rank`.
    pub max_rank: usize,
    /// Whether memory is held back for adapters (with --lora-adapters or --max-loras, as vLLM with --enable-lora).
    pub reserve: bool,
}

impl ServeSettings {
    /// Resolves the settings of `tgi serve`: `args` as parsed from `argv` (the whole command line,
    /// `tgi serve ...`), with the `--config` file and the `--profile` layer filling in what the flags
    /// and the environment left unset, then validated.
    pub fn resolve(args: ServeArgs, argv: &[OsString]) -> Result<ServeSettings> {
        let (args, notes) = if config::has_layers(&args) { config::resolve(argv)? } else { (args, Vec::new()) };
        Ok(ServeSettings::validate(args, notes)?)
    }

    /// Checks every setting that can be checked without the model; errors name the flag at fault.
    pub fn validate(args: ServeArgs, notes: Vec<String>) -> Result<ServeSettings, InputError> {
        let bad = |msg: &str| Err(InputError(msg.to_string()));
        let positive = [
            ("--max-concurrent-requests", args.max_concurrent_requests),
            ("--max-connections", args.max_connections),
            ("--max-best-of", args.max_best_of),
            ("--max-n", args.max_n),
            ("--payload-limit", args.payload_limit),
            ("--max-batch-size", args.max_batch_size.unwrap_or(1)),
            ("--max-input-tokens", args.max_input_tokens.unwrap_or(1)),
            ("--grammar-max-depth", args.grammar_max_depth),
            ("--grammar-max-choices", args.grammar_max_choices),
            ("--grammar-compile-threads", args.grammar_compile_threads),
            ("--grammar-compile-queue", args.grammar_compile_queue),
            ("--max-loras", args.max_loras.unwrap_or(1)),
            ("--max-lora-rank", args.max_lora_rank),
        ];
        if let Some((flag, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(InputError(format!("{flag} must be at least 1")));
        }
        if args.max_total_tokens.is_some_and(|t| t < 2) {
            return bad("--max-total-tokens must be at least 2");
        }
        let request_timeout = match args.request_timeout {
            Some(t) if !(t.is_finite() && t > 0.0) => {
                return bad("--request-timeout must be a positive number of seconds")
            }
            Some(t) => Some(Duration::from_secs_f64(t)),
            None => None,
        };
        if !(args.body_timeout.is_finite() && args.body_timeout > 0.0) {
            return bad("--body-timeout must be a positive number of seconds");
        }
        if !(args.shutdown_timeout.is_finite() && args.shutdown_timeout >= 0.0) {
            return bad("--shutdown-timeout must be a non-negative number of seconds");
        }
        if !(args.drain_delay.is_finite() && args.drain_delay >= 0.0) {
            return bad("--drain-delay must be a non-negative number of seconds");
        }
        if !(args.response_cache_ttl.is_finite() && args.response_cache_ttl > 0.0) {
            return bad("--response-cache-ttl must be a positive number of seconds");
        }
        let response_cache = args
            .response_cache_size
            .map(|size| CacheConfig { size, ttl: Duration::from_secs_f64(args.response_cache_ttl) });
        if !(args.responses_store_ttl.is_finite() && args.responses_store_ttl > 0.0) {
            return bad("--responses-store-ttl must be a positive number of seconds");
        }
        let responses_store = StoreConfig {
            size: args.responses_store_size,
            ttl: Duration::try_from_secs_f64(args.responses_store_ttl).unwrap_or(Duration::MAX),
        };
        let batching = Batching {
            max_batch_prefill_tokens: args.max_batch_prefill_tokens,
            max_prefill_tokens_per_step: args.max_prefill_tokens_per_step.map(NonZeroUsize::get),
            prefill_itl_factor: args.prefill_itl_factor,
            waiting_served_ratio: args.waiting_served_ratio,
            max_waiting_tokens: args.max_waiting_tokens,
            prefix_caching: !args.no_prefix_caching,
        };
        batching.validate().map_err(|e| InputError(format!("--{} {}", e.field.replace('_', "-"), e.requirement)))?;
        let grammar = grammar_settings(&args)?;
        let adapters = args
            .lora_adapters
            .as_deref()
            .map(parse_adapters)
            .transpose()
            .map_err(|e| InputError(format!("--lora-adapters: {e}")))?;
        let lora = LoraSettings {
            adapters: adapters.clone().unwrap_or_default(),
            max_loras: args.max_loras.unwrap_or(DEFAULT_MAX_LORAS),
            max_rank: args.max_lora_rank,
            reserve: args.max_loras.is_some() || adapters.is_some(),
        };
        if lora.adapters.len() > lora.max_loras {
            return bad("--lora-adapters names more adapters than --max-loras holds");
        }
        let budget = match args.reasoning_budget {
            -1 => None,
            n if n >= 0 => Some(n as usize),
            _ => return bad("--reasoning-budget must be -1 (no limit) or a number of tokens"),
        };
        let reasoning = ReasoningSettings { format: args.reasoning_format, budget };
        let mut args = args;
        // --n-gpu-layers names the device once, here; everything after reads `device`.
        args.model.device = args.model.device()?;
        let medusa_model = take_medusa_model(&mut args.model)?;
        let speculation = SpeculationPlan::from_args(&args, medusa_model.as_deref())?;
        Ok(ServeSettings {
            model: args.model,
            chat_template: args.chat_template,
            hostname: args.hostname,
            port: args.port,
            access: Access { api_key: args.api_key, cors_allow_origin: args.cors_allow_origin },
            webui: !args.no_webui,
            log_format: args.log_format,
            shutdown_timeout: Duration::from_secs_f64(args.shutdown_timeout),
            drain_delay: Duration::from_secs_f64(args.drain_delay),
            response_cache,
            responses_store,
            max_concurrent_requests: args.max_concurrent_requests,
            max_best_of: args.max_best_of,
            max_stop_sequences: args.max_stop_sequences,
            max_top_n_tokens: args.max_top_n_tokens,
            max_n: args.max_n,
            payload_limit: args.payload_limit,
            request_timeout,
            body_timeout: Duration::from_secs_f64(args.body_timeout),
            max_connections: args.max_connections,
            max_input_tokens: args.max_input_tokens,
            max_total_tokens: args.max_total_tokens,
            max_batch_total_tokens: args.max_batch_total_tokens,
            max_batch_size: args.max_batch_size,
            batching,
            tool_call_parser: args.tool_call_parser,
            reasoning,
            pooling: args.pooling.into(),
            grammar,
            speculation,
            lora,
            notes,
        })
    }
}

/// The grammar flags, checked (the positive counts are checked with the others).
fn grammar_settings(args: &ServeArgs) -> Result<GrammarSettings, InputError> {
    if !(args.grammar_compile_timeout.is_finite() && args.grammar_compile_timeout > 0.0) {
        return Err(InputError("--grammar-compile-timeout must be a positive number of seconds".into()));
    }
    let digits = NumberDigits::new(args.grammar_integer_digits, args.grammar_fraction_digits)
        .map_err(|e| InputError(format!("--grammar-integer-digits, --grammar-fraction-digits: {e}")))?;
    let limits = GrammarLimits {
        max_bytes: args.grammar_max_bytes.0,
        max_depth: args.grammar_max_depth,
        max_choices: args.grammar_max_choices,
        ..GrammarLimits::default()
    };
    Ok(GrammarSettings {
        config: GrammarConfig { limits, digits, cache_bytes: args.grammar_cache_size.0 },
        threads: args.grammar_compile_threads,
        queue: args.grammar_compile_queue,
        timeout: Duration::from_secs_f64(args.grammar_compile_timeout),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use clap::Parser;

    use super::*;
    use crate::serve::response_cache::CacheSize;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// `tgi serve FLAGS` parsed, as the binary's parser does.
    pub(crate) fn args(flags: &[&str]) -> ServeArgs {
        Wrap::try_parse_from(std::iter::once("serve").chain(flags.iter().copied())).unwrap().args
    }

    /// `tgi serve FLAGS` validated.
    pub(crate) fn settings(flags: &[&str]) -> Result<ServeSettings, InputError> {
        ServeSettings::validate(args(flags), Vec::new())
    }

    fn argv(flags: &[&str]) -> Vec<OsString> {
        ["tgi", "serve"].iter().chain(flags).map(OsString::from).collect()
    }

    #[test]
    fn defaults_and_derived_values() {
        let s = settings(&[]).unwrap();
        assert_eq!((s.hostname.as_str(), s.port, s.log_format), ("127.0.0.1", 3000, LogFormat::Text));
        assert_eq!(s.shutdown_timeout, Duration::from_secs(30));
        assert_eq!((s.drain_delay, s.response_cache), (Duration::ZERO, None), "no drain delay, no response cache");
        assert_eq!((s.body_timeout, s.max_connections), (Duration::from_secs(30), 512));
        assert_eq!((s.request_timeout, s.max_total_tokens, s.max_batch_size), (None, None, None));
        assert_eq!(s.batching, Batching::default(), "the batching flags default to the scheduler's defaults");
        assert!(s.speculation.is_none() && s.notes.is_empty() && s.tool_call_parser.is_none());
        assert!(s.webui, "the web chat page is on by default");
        assert!(!settings(&["--no-webui"]).unwrap().webui);
        assert_eq!(s.grammar, GrammarSettings::default(), "the grammar flags default to the engine's defaults");
        let g = settings(&["--grammar-max-bytes=64KiB", "--grammar-cache-size=8MB", "--grammar-fraction-digits=3"])
            .unwrap()
            .grammar;
        assert_eq!((g.config.limits.max_bytes, g.config.cache_bytes), (64 << 10, 8_000_000));
        assert_eq!(g.config.digits, NumberDigits::new(15, 3).unwrap());
        let s = settings(&[
            "--no-prefix-caching",
            "--request-timeout=2.5",
            "--api-key=k",
            "--cors-allow-origin=http://a,http://b",
            "--speculate=3",
            "--log-format=json",
            "--body-timeout=0.2",
            "--max-connections=8",
            "--tool-call-parser=llama3_json",
            "--drain-delay=1.5",
            "--response-cache-size=64MiB",
            "--response-cache-ttl=60",
        ])
        .unwrap();
        assert_eq!(s.drain_delay, Duration::from_millis(1500));
        let cache = CacheConfig { size: CacheSize::Bytes(64 << 20), ttl: Duration::from_secs(60) };
        assert_eq!(s.response_cache, Some(cache));
        assert_eq!(s.responses_store, StoreConfig::default(), "the flags' defaults are the store's");
        let store = settings(&["--responses-store-size=2", "--responses-store-ttl=1.5"]).unwrap().responses_store;
        assert_eq!(store, StoreConfig { size: CacheSize::Entries(2), ttl: Duration::from_millis(1500) });
        assert!(settings(&["--responses-store-ttl=0"]).is_err() && settings(&["--responses-store-ttl=nan"]).is_err());
        assert_eq!(
            settings(&["--response-cache-size=100"]).unwrap().response_cache.unwrap().size,
            CacheSize::Entries(100)
        );
        assert_eq!(s.tool_call_parser, Some(ToolCallFormat::Llama3Json));
        assert!(!s.batching.prefix_caching);
        assert_eq!(s.request_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(s.access.api_key.as_deref(), Some("k"));
        assert_eq!(s.access.cors_allow_origin, ["http://a", "http://b"]);
        assert_eq!(s.speculation.map(|c| c.config.depth), Some(3));
        assert_eq!(s.log_format, LogFormat::Json);
        assert_eq!((s.body_timeout, s.max_connections), (Duration::from_millis(200), 8));
    }

    #[test]
    fn refuses_bad_values_naming_the_flag() {
        let err = |flags: &[&str]| settings(flags).unwrap_err().0;
        for flag in [
            "--max-concurrent-requests",
            "--max-connections",
            "--max-best-of",
            "--max-n",
            "--payload-limit",
            "--max-batch-size",
        ] {
            assert!(err(&[flag, "0"]).contains(&format!("{flag} must be at least 1")), "{flag}");
        }
        assert!(err(&["--max-batch-prefill-tokens", "0"]).contains("--max-batch-prefill-tokens must be at least 1"));
        assert!(err(&["--max-input-tokens", "0"]).contains("--max-input-tokens"));
        assert!(err(&["--max-total-tokens", "1"]).contains("--max-total-tokens must be at least 2"));
        assert!(err(&["--request-timeout", "0"]).contains("--request-timeout"));
        assert!(err(&["--request-timeout", "inf"]).contains("--request-timeout"));
        assert!(err(&["--shutdown-timeout=-1"]).contains("--shutdown-timeout"));
        assert!(err(&["--body-timeout=0"]).contains("--body-timeout"));
        assert!(err(&["--body-timeout=nan"]).contains("--body-timeout"));
        assert!(err(&["--waiting-served-ratio=-0.5"]).contains("--waiting-served-ratio must be a non-negative number"));
        assert!(err(&["--prefill-itl-factor=1"]).contains("--prefill-itl-factor must be a number greater than 1"));
        assert!(err(&["--prefill-itl-factor=inf"]).contains("--prefill-itl-factor"));
        assert!(err(&["--drain-delay=-1"]).contains("--drain-delay"));
        assert!(err(&["--response-cache-size=8", "--response-cache-ttl=0"]).contains("--response-cache-ttl"));
        assert!(err(&["--speculate=2", "--ngram-min=4"]).contains("--speculate"));
        assert!(err(&["--grammar-compile-timeout=0"]).contains("--grammar-compile-timeout"));
        assert!(err(&["--grammar-fraction-digits=11"]).contains("at most 10"));
        assert!(err(&["--grammar-integer-digits=0"]).contains("between 1 and 15"));
        for flag in
            ["--grammar-max-depth", "--grammar-max-choices", "--grammar-compile-threads", "--grammar-compile-queue"]
        {
            assert!(err(&[flag, "0"]).contains(&format!("{flag} must be at least 1")), "{flag}");
        }
    }

    #[test]
    fn resolve_layers_the_config_file_under_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("serve.toml");
        std::fs::write(
            &file,
            "port = 4000\nmax_best_of = 3\nlog_format = \"json\"\nno_prefix_caching = true\ntool_call_parser = \"mistral\"\n",
        )
        .unwrap();
        let flags = ["--config", file.to_str().unwrap(), "--max-best-of", "5"];
        let s = ServeSettings::resolve(args(&flags), &argv(&flags)).unwrap();
        assert_eq!((s.port, s.max_best_of, s.log_format), (4000, 5, LogFormat::Json));
        assert!(!s.batching.prefix_caching);
        assert_eq!(s.tool_call_parser, Some(ToolCallFormat::Mistral));
        // Without --config or --profile the parsed flags are the settings.
        let s = ServeSettings::resolve(args(&["--port", "5"]), &[]).unwrap();
        assert_eq!(s.port, 5);
        // The file's values are validated like flags.
        std::fs::write(&file, "max_n = 0\n").unwrap();
        let e = ServeSettings::resolve(args(&flags[..2]), &argv(&flags[..2])).unwrap_err().to_string();
        assert!(e.contains("--max-n must be at least 1"), "{e}");
    }
}
