//! `tgi generate`: one prompt in, text streamed out, then a one-line summary (or one JSON object).

use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::json;
use tgi_engines::generate::{generate, GenerateError, GenerateRequest, Generated};
use tgi_engines::model::ModelError;
use tgi_engines::sampling::SamplingParams;
use tgi_engines::scheduler::Request;
use tgi_engines::text::chat::Message;

use crate::error::InputError;
use crate::model_args::{ChatTemplateArg, ModelArgs};
use tgi_engines::device::DeviceSpec;

/// Arguments of `tgi generate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  tgi generate \"Once upon a time\"\n  \
tgi generate -n 16 --temp 0 -p \"Once upon a time\"\n  \
tgi generate -m model-q4_k_m.gguf --temperature 0 --max-new-tokens 64 \\\n    \
\"The capital of France is\"\n  \
tgi generate -m TinyLlama/TinyLlama-1.1B-Chat-v1.0 --chat \\\n    \
--system \"Be brief.\" \"Why is the sky blue?\"\n  \
tgi generate --chat --chat-template chatml \"Tell me a story.\"\n  \
echo \"Once upon a time\" | tgi generate --json -")]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,

    /// The prompt; `-` reads it from standard input.
    #[arg(required_unless_present_any = ["prompt_text", "file"], conflicts_with_all = ["prompt_text", "file"])]
    pub prompt: Option<String>,

    /// The prompt, as llama-cli's -p (instead of the PROMPT argument).
    #[arg(short = 'p', long = "prompt", value_name = "TEXT", conflicts_with = "file")]
    pub prompt_text: Option<String>,

    /// Read the prompt from this file, as llama-cli's -f.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: Option<std::path::PathBuf>,

    /// Most tokens to generate (-n/--n-predict as llama-cli).
    #[arg(short = 'n', long, visible_aliases = ["n-predict", "predict"], default_value_t = 128, value_name = "N")]
    pub max_new_tokens: usize,

    /// Sampling temperature (--temp as llama-cli); 0 picks the most likely token every time (greedy).
    #[arg(long, visible_alias = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,

    /// Sample from the K most likely tokens only.
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,

    /// Sample from the smallest set of tokens whose probability reaches P.
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,

    /// Drop tokens less than P times as likely as the most likely one.
    #[arg(long, value_name = "P")]
    pub min_p: Option<f32>,

    /// Locally typical sampling mass.
    #[arg(long, value_name = "P")]
    pub typical_p: Option<f32>,

    /// Penalize tokens already in the prompt or output (1 = off; TGI/transformers semantics).
    #[arg(long, value_name = "R")]
    pub repetition_penalty: Option<f32>,

    /// Subtract this per earlier occurrence of a token in the output (OpenAI semantics).
    #[arg(long, default_value_t = 0.0, value_name = "F", allow_negative_numbers = true)]
    pub frequency_penalty: f32,

    /// Subtract this from every token already in the output (OpenAI semantics).
    #[arg(long, default_value_t = 0.0, value_name = "F", allow_negative_numbers = true)]
    pub presence_penalty: f32,

    /// Random seed: the same seed gives the same output [default: random].
    #[arg(short, long)]
    pub seed: Option<u64>,

    /// Stop when the output contains this text (repeatable); the stop text is not printed.
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,

    /// Keep generating after end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,

    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    pub chat: bool,

    #[command(flatten)]
    pub chat_template: ChatTemplateArg,

    /// System message for --chat.
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,

    /// With --json, report each token's log-probability and its N most likely alternatives.
    #[arg(long, value_name = "N")]
    pub logprobs: Option<usize>,

    /// Most prompt tokens per prefill step.
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub prefill_chunk: usize,

    /// Print one JSON object (ids, text, finish reason, timings, device and CPU kernels) instead of streaming text.
    #[arg(long)]
    pub json: bool,

    /// Print only the generated text, no summary line.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs `tgi generate`.
pub fn run(args: GenerateArgs) -> Result<()> {
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        typical_p: args.typical_p,
        repetition_penalty: args.repetition_penalty,
        frequency_penalty: args.frequency_penalty,
        presence_penalty: args.presence_penalty,
        seed: args.seed,
        logprobs: args.logprobs.is_some(),
        top_logprobs: args.logprobs.unwrap_or(0),
    };
    params.validate().map_err(|e| InputError(e.to_string()))?;
    if args.max_new_tokens == 0 {
        return Err(InputError("--max-new-tokens must be at least 1".into()).into());
    }
    if args.prefill_chunk == 0 {
        return Err(InputError("--prefill-chunk must be at least 1".into()).into());
    }
    let prompt = match (&args.prompt, &args.prompt_text, &args.file) {
        (Some(p), _, _) if p == "-" => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).context("cannot read the prompt from standard input")?;
            s
        }
        (Some(p), _, _) | (None, Some(p), _) => p.clone(),
        (None, None, Some(file)) => std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the prompt from {}", file.display()))
            .map_err(|e| InputError(format!("{e:#}")))?,
        (None, None, None) => return Err(InputError("no prompt: give PROMPT, -p TEXT or -f FILE".into()).into()),
    };
    let mut m = args.model.load()?;
    if args.model.lm_head_type.is_some() && !args.quiet && !args.json {
        eprintln!("{}", m.model.output_layer());
    }
    args.chat_template.apply(&mut m)?;
    let prompt_ids = if args.chat {
        let template = m.chat_templates.get(false).ok_or_else(|| {
            InputError(
                "--chat: the model has no chat template; give one with --chat-template NAME|FILE (chatml, llama3, \
                 gemma, ... or a Jinja file)"
                    .into(),
            )
        })?;
        let mut messages = Vec::new();
        if let Some(system) = &args.system {
            messages.push(Message::new("system", system));
        }
        messages.push(Message::new("user", &prompt));
        let messages = template.with_roles_it_knows(messages);
        let text = template.render(&messages, true, &serde_json::Value::Null).map_err(|e| InputError(e.to_string()))?;
        m.tokenizer.encode(&text, false, true)
    } else {
        m.tokenizer.encode(&prompt, true, true)
    }
    .map_err(|e| InputError(format!("cannot tokenize the prompt: {e}")))?;
    let request = Request {
        prompt_ids,
        params,
        max_new_tokens: args.max_new_tokens,
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        prompt_logprobs: false,
        cache_salt: 0,
        constraint: None,
        request_id: String::new(),
        thinking: None,
        pooling: None,
        lora: None,
    };
    let req = GenerateRequest { request, prefill_chunk: args.prefill_chunk };
    let m = Arc::new(m);
    let stream = !args.json;
    let mut out = std::io::stdout().lock();
    let g = generate(&m, &req, |piece| {
        if stream && !piece.is_empty() {
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
    })
    .map_err(|e| match e {
        GenerateError::Model(ModelError::ContextOverflow { .. }) => InputError(e.to_string()).into(),
        e => anyhow::Error::new(e),
    })?;
    if args.json {
        let mut v = report(&req, &g, args.logprobs.is_some());
        v["device"] = args.model.device()?.to_string().into();
        v["output_layer"] = m.model.output_layer().to_string().into();
        if args.model.device()? == DeviceSpec::Cpu {
            v["cpu_kernels"] = tgi_engines::kernels::backend().name().into();
            let r = m.model.repacked();
            v["repacked"] =
                serde_json::json!({"matrices": r.matrices, "bytes": r.bytes, "ms": r.took.as_secs_f64() * 1e3});
        }
        writeln!(out, "{v}")?;
    } else {
        writeln!(out)?;
        if !args.quiet {
            eprintln!("{}", summary(&req, &g));
        }
    }
    Ok(())
}

/// The one-line summary printed after the text.
fn summary(req: &GenerateRequest, g: &Generated) -> String {
    let t = &g.timings;
    format!(
        "prompt {} tokens | generated {} ({}) | TTFT {:.1} ms | prefill {:.1} tok/s | decode {:.1} tok/s",
        req.request.prompt_ids.len(),
        g.tokens.len(),
        g.finish.as_tgi(),
        t.ttft.as_secs_f64() * 1e3,
        t.prefill_rate(req.request.prompt_ids.len()),
        t.decode_rate(),
    )
}

/// The `--json` object.
fn report(req: &GenerateRequest, g: &Generated, logprobs: bool) -> serde_json::Value {
    let t = &g.timings;
    let mut v = json!({
        "prompt_token_ids": req.request.prompt_ids,
        "generated_token_ids": g.tokens,
        "text": g.text,
        "finish_reason": g.finish.as_tgi(),
        "seed": g.seed,
        "timings": {
            "ttft_ms": t.ttft.as_secs_f64() * 1e3,
            "prefill_ms": t.prefill.as_secs_f64() * 1e3,
            "prefill_tokens_per_second": t.prefill_rate(req.request.prompt_ids.len()),
            "decode_ms": t.decode.as_secs_f64() * 1e3,
            "decode_tokens_per_second": t.decode_rate(),
            "decode_steps": t.decode_steps,
        },
    });
    if logprobs {
        v["logprobs"] = g
            .sampled
            .iter()
            .map(|s| json!({"id": s.token, "logprob": s.logprob, "top": s.top.iter().map(|(id, lp)| json!({"id": id, "logprob": lp})).collect::<Vec<_>>()}))
            .collect();
    }
    v
}
