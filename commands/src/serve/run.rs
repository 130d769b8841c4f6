//! `tgi serve` from start to exit: logs, model, sizes, scheduler, then serving until SIGTERM or
//! SIGINT, after which requests in flight get `--shutdown-timeout` to finish.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context, Result};
use tgi_engines::model::LoadedModel;
use tgi_engines::scheduler::{EngineWatch, Scheduler, SchedulerConfig};
use tgi_engines::speculative::Method;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::budget::{self, lora_reserve, Memory, Sizes, SizingInputs};
use super::connections;
use super::log;
use super::lora::Loras;
use super::response_cache::ResponseCache;
use super::responses::store::{ResponseStore, SystemClock};
use super::server::{self, ConnectionLimits, Stopped};
use super::settings::ServeSettings;
use super::speculation::describe;
use super::state::{AppState, ServedModel};
use crate::error::InputError;

/// How the log line that says the server is ready starts; the address follows.
const LISTENING: &str = "listening on http://";

/// The port in serve's `listening on http://HOST:PORT` log line, in text or JSON (for programs that start
/// `tgi serve --port 0` and need the port the kernel chose).
pub fn listening_port(line: &str) -> Option<u16> {
    let rest = line.split(LISTENING).nth(1)?;
    let authority: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || ".:[]-".contains(*c)).collect();
    authority.rsplit(':').next()?.parse().ok()
}

/// Runs `tgi serve` with its resolved settings; `rust_log` is the `RUST_LOG` log filter, when set.
/// The port is bound first and answers 503 (`/health` included) while the model loads.
pub fn run(settings: ServeSettings, rust_log: Option<&str>) -> Result<()> {
    log::init(settings.log_format, rust_log)?;
    for note in &settings.notes {
        tracing::info!("{note}");
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("tgi-http")
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    rt.block_on(async move {
        let (host, port, webui) = (settings.hostname.clone(), settings.port, settings.webui);
        let listener = TcpListener::bind((host.as_str(), port))
            .await
            .map_err(|e| InputError(format!("cannot listen on {host}:{port}: {e}")))?;
        let addr = listener.local_addr()?;
        tracing::info!("bound {addr}: every route answers 503 until the model is loaded");
        let load = tokio::task::spawn_blocking(move || start(&settings));
        let started = server::serve_loading(&listener, load).await.context("the model loading task failed")??;
        tracing::info!("{}", started.summary);
        tracing::info!("{LISTENING}{addr}");
        if webui {
            tracing::info!("web chat page at http://{addr}/ (--no-webui turns it off)");
        }
        serve_supervised(listener, started.state, server::signal(), started.engine_failed, started.limits).await
    })
}

/// A loaded model with its engine running: what serving needs.
struct Started {
    state: Arc<AppState>,
    engine_failed: oneshot::Receiver<String>,
    limits: ConnectionLimits,
    summary: String,
}

/// Loads the model, sizes the KV cache and batches, and starts the engine.
fn start(settings: &ServeSettings) -> Result<Started> {
    let mut loaded = settings.model.load()?;
    settings.chat_template.apply(&mut loaded)?;
    // The draft model first: its weights take memory before the KV cache is sized, and its keys and values
    // share the target's blocks, so each token of the pool holds both models'.
    let speculation = match &settings.speculation {
        Some(plan) => Some(plan.load(&loaded)?),
        None => None,
    };
    let draft_kv_bytes = match speculation.as_ref().map(|s| &s.method) {
        Some(Method::Draft(draft)) => kv_bytes_per_token(draft),
        _ => 0,
    };
    let c = loaded.model.config();
    let gpu_free =
        tgi_engines::device::free_device_memory(loaded.model.device()).context("cannot read the GPU's free memory")?;
    let inputs = SizingInputs {
        context: c.context,
        kv_bytes_per_token: kv_bytes_per_token(&loaded) + draft_kv_bytes,
        memory: Memory::of(settings.model.device, gpu_free),
        device: settings.model.device,
        lora_reserved: if settings.lora.reserve {
            lora_reserve(c, settings.lora.max_loras, settings.lora.max_rank)
        } else {
            0
        },
    };
    let sizes = budget::size(settings, &inputs)?;
    if inputs.lora_reserved > 0 {
        tracing::info!(
            "LoRA: {:.1} MiB held back from the KV cache for --max-loras {} adapters of --max-lora-rank {} on every \
             projection",
            inputs.lora_reserved as f64 / (1u64 << 20) as f64,
            settings.lora.max_loras,
            settings.lora.max_rank
        );
    }
    tracing::info!(
        "KV cache: allocating {} tokens ({:.1} MiB, from {})",
        sizes.limits.max_batch_total_tokens,
        mib(sizes.limits.max_batch_total_tokens, inputs.kv_bytes_per_token),
        sizes.kv_budget
    );
    let loras = Loras::new(Some(loaded.model.config().clone()), settings.lora.max_loras, settings.lora.max_rank)
        .with_reserved(inputs.lora_reserved);
    for (name, path) in &settings.lora.adapters {
        loras.load(name, path).map_err(|e| InputError(format!("--lora-adapters {name}={path}: {e}")))?;
    }
    let output_layer = loaded.model.output_layer().to_string();
    let repacked = loaded.model.repacked();
    let model = Arc::new(loaded);
    let cfg = SchedulerConfig {
        max_batch_size: sizes.max_batch_size,
        max_batch_total_tokens: sizes.limits.max_batch_total_tokens,
        batching: settings.batching.clone(),
        speculation,
    };
    let handle = Scheduler::start(model.clone(), cfg.clone()).context("cannot start the scheduler")?;
    let engine_failed = watch_engine(handle.watch())?;
    let served = ServedModel {
        id: settings.model.model.clone().unwrap_or_else(|| "stories260k".into()),
        compute_type: settings.model.device.to_string(),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        speculate: cfg.speculation.as_ref().map(|s| s.depth),
        tool_call_parser: settings.tool_call_parser,
        kv_budget: sizes.kv_budget.to_string(),
        kv_dtype: model.model.kv_dtype(),
        kv_rotation: model.model.kv_rotation(),
        reasoning: settings.reasoning,
        pooling: settings.pooling,
        embedding_size: model.model.config().hidden,
    };
    let mut summary = summary(&served, &settings.model.device.describe(), &sizes, &cfg, inputs.kv_bytes_per_token);
    if draft_kv_bytes > 0 {
        summary.push_str(&format!(
            "\nKV cache: {draft_kv_bytes} of each token's {} bytes are the draft model's, in the same blocks",
            inputs.kv_bytes_per_token
        ));
    }
    summary.push_str(&format!("\nKV cache type: {}, {}", served.kv_dtype, served.kv_rotation));
    summary.push_str(&format!("\n{output_layer}"));
    if repacked.matrices > 0 {
        summary.push_str(&format!("\n{repacked}"));
    }
    if let Some(c) = &settings.response_cache {
        summary.push_str(&format!("\nresponse cache: {}, entries served for {} s", c.size, c.ttl.as_secs_f64()));
    }
    let state = AppState::new(Arc::new(handle), model, sizes.limits, settings.access.clone(), served)
        .with_response_cache(settings.response_cache.map(ResponseCache::new))
        .with_responses_store(ResponseStore::new(settings.responses_store, Arc::new(SystemClock)))
        .with_grammars(settings.grammar)
        .with_webui(settings.webui)
        .with_loras(loras);
    let limits = ConnectionLimits {
        max_connections: connections::fit_open_files(settings.max_connections),
        grace: settings.shutdown_timeout,
        drain: settings.drain_delay,
    };
    Ok(Started { state: Arc::new(state), engine_failed, limits, summary })
}

/// Reports the end of the engine thread when it panicked (its message) on the returned channel.
fn watch_engine(watch: EngineWatch) -> Result<oneshot::Receiver<String>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name("tgi-engine-watch".into())
        .spawn(move || {
            if let Err(message) = watch.wait() {
                let _ = tx.send(message);
            }
        })
        .context("cannot start the engine watch thread")?;
    Ok(rx)
}

/// Serves until `shutdown`, or until the engine fails (`engine_failed` resolves with its panic): the
/// requests it held have failed by then, `/health` answers 503, the server stops as on SIGTERM, and
/// the error returned makes the process exit non-zero so that a supervisor restarts it.
pub(super) async fn serve_supervised(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
    engine_failed: oneshot::Receiver<String>,
    limits: ConnectionLimits,
) -> Result<()> {
    let mut failure = None;
    let stop = async {
        tokio::select! {
            _ = shutdown => {}
            Ok(message) = engine_failed => {
                tracing::error!(panic = %message, "the engine stopped; shutting down so that a supervisor can restart tgi");
                state.healthy.store(false, Ordering::Relaxed);
                failure = Some(message);
            }
        }
    };
    match server::serve(listener, state.clone(), stop, limits).await {
        Stopped::Drained => tracing::info!("stopped"),
        Stopped::GraceExpired => {
            tracing::warn!("stopped after {} s with requests still in flight", limits.grace.as_secs_f64())
        }
    }
    match failure {
        Some(message) => Err(anyhow!("the engine stopped: {message}")),
        None => Ok(()),
    }
}

/// KV cache bytes per token: keys and values of every layer, in the cache's element type.
fn kv_bytes_per_token(m: &LoadedModel) -> usize {
    let c = m.model.config();
    m.model.kv_dtype().bytes_per_token(c.layers, c.kv_heads, c.head_dim)
}

/// The size of `tokens` KV cache tokens in MiB.
fn mib(tokens: usize, bytes_per_token: usize) -> f64 {
    (tokens * bytes_per_token) as f64 / (1 << 20) as f64
}

/// The startup summary: model, KV budget, batch and request limits.
fn summary(model: &ServedModel, device: &str, sizes: &Sizes, cfg: &SchedulerConfig, kv_bytes: usize) -> String {
    let l = &sizes.limits;
    format!(
        "model {} on {}\nKV cache: {} tokens ({:.1} MiB, {kv_bytes} bytes per token, from {}), \
         prefix caching {}\n\
         batches: up to {} sequences, {} prefill tokens per step ({} beside decodes)\n\
         requests: up to {} in flight, {} input tokens, {} total tokens\n\
         speculation: {}",
        model.id,
        device,
        l.max_batch_total_tokens,
        mib(l.max_batch_total_tokens, kv_bytes),
        sizes.kv_budget,
        if cfg.batching.prefix_caching { "on" } else { "off" },
        cfg.max_batch_size,
        cfg.batching.max_batch_prefill_tokens,
        cfg.batching.max_prefill_tokens_per_step.map_or_else(
            || format!(
                "as many as keep a step within {}x a decode step, by fitted step times",
                cfg.batching.prefill_itl_factor
            ),
            |n| format!("at most {n}")
        ),
        l.max_concurrent_requests,
        l.max_input_tokens,
        l.max_total_tokens,
        cfg.speculation.as_ref().map_or_else(|| "off".to_string(), describe),
    )
}

#[cfg(test)]
mod tests {
    use super::listening_port;

    #[test]
    fn the_port_is_read_from_the_listening_line_in_text_and_json() {
        let text = "2026-12-01T23:40:00Z  INFO tgi_commands::serve::run: listening on http://127.0.0.1:40123";
        assert_eq!(listening_port(text), Some(40123));
        let json = r#"{"fields":{"message":"listening on http://[::1]:8080"},"target":"tgi_commands::serve::run"}"#;
        assert_eq!(listening_port(json), Some(8080));
        assert_eq!(listening_port("bound 127.0.0.1:1: every route answers 503"), None);
    }
}
