//! `tgi serve` from start to exit: settings, model, sizes, scheduler, then serving until SIGTERM or
//! SIGINT, after which requests in flight get `--shutdown-timeout` to finish.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use tgi_engines::model::LoadedModel;
use tgi_engines::scheduler::{Scheduler, SchedulerConfig};
use tokio::net::TcpListener;

use super::args::ServeArgs;
use super::budget::{self, Machine, Sizes};
use super::config;
use super::server::{self, Stopped};
use super::state::{Access, AppState, ServedModel};
use crate::error::InputError;

/// Runs `tgi serve`.
pub fn run(args: ServeArgs) -> Result<()> {
    let args = if args.config.is_some() || args.profile.is_some() {
        config::resolve(std::env::args_os().collect())?
    } else {
        args
    };
    let speculation = args.speculation()?;
    let mut loaded = args.model.load()?;
    args.chat_template.apply(&mut loaded)?;
    let c = loaded.model.config();
    let machine = Machine {
        context: c.context,
        kv_bytes_per_token: kv_bytes_per_token(&loaded),
        mem_available: budget::mem_available(),
        default_max_batch_size: SchedulerConfig::default().max_batch_size,
    };
    let sizes = budget::size(&args, &machine)?;
    let model = Arc::new(loaded);
    let cfg = SchedulerConfig {
        max_batch_size: sizes.max_batch_size,
        max_batch_total_tokens: sizes.limits.max_batch_total_tokens,
        max_batch_prefill_tokens: args.max_batch_prefill_tokens,
        max_prefill_tokens_per_step: args.max_prefill_tokens_per_step.map(NonZeroUsize::get),
        waiting_served_ratio: args.waiting_served_ratio,
        max_waiting_tokens: args.max_waiting_tokens,
        prefix_caching: !args.no_prefix_caching,
        speculation,
    };
    let handle = Scheduler::start(model.clone(), cfg.clone()).context("cannot start the scheduler")?;
    let access = Access { api_key: args.api_key.clone(), cors_allow_origin: args.cors_allow_origin.clone() };
    let served = ServedModel {
        id: args.model.model.clone().unwrap_or_else(|| "stories260k".into()),
        compute_type: args.model.device.to_string(),
        created: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        speculate: cfg.speculation.as_ref().map(|s| s.depth),
    };
    let summary = summary(&served, &sizes, &cfg, machine.kv_bytes_per_token);
    let state = Arc::new(AppState::new(Arc::new(handle), model, sizes.limits, access, served));
    let grace = Duration::from_secs_f64(args.shutdown_timeout);
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("tgi-http")
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    rt.block_on(async move {
        let (host, port) = (args.hostname.as_str(), args.port);
        let listener = TcpListener::bind((host, port))
            .await
            .map_err(|e| InputError(format!("cannot listen on {host}:{port}: {e}")))?;
        let addr = listener.local_addr()?;
        eprintln!("{summary}");
        eprintln!("listening on http://{addr}");
        match server::serve(listener, state, server::signal(), grace).await {
            Stopped::Drained => eprintln!("stopped"),
            Stopped::GraceExpired => {
                eprintln!("stopped after {} s with requests still in flight", grace.as_secs_f64())
            }
        }
        Ok(())
    })
}

/// KV cache bytes per token: keys and values of every layer, in the cache's element type.
fn kv_bytes_per_token(m: &LoadedModel) -> usize {
    let c = m.model.config();
    m.model.kv_dtype().bytes_per_token(c.layers, c.kv_heads, c.head_dim)
}

/// The startup summary: model, KV budget, batch and request limits.
fn summary(model: &ServedModel, sizes: &Sizes, cfg: &SchedulerConfig, kv_bytes: usize) -> String {
    let l = &sizes.limits;
    let mib = (l.max_batch_total_tokens * kv_bytes) as f64 / (1 << 20) as f64;
    format!(
        "model {} on {}\nKV cache: {} tokens ({mib:.1} MiB, {kv_bytes} bytes per token), prefix caching {}\n\
         batches: up to {} sequences, {} prefill tokens per step ({} beside decodes)\n\
         requests: up to {} in flight, {} input tokens, {} total tokens\n\
         speculation: {}",
        model.id,
        model.compute_type,
        l.max_batch_total_tokens,
        if cfg.prefix_caching { "on" } else { "off" },
        cfg.max_batch_size,
        cfg.max_batch_prefill_tokens,
        cfg.max_prefill_tokens_per_step.map_or("derived from step times".into(), |n| format!("at most {n}")),
        l.max_concurrent_requests,
        l.max_input_tokens,
        l.max_total_tokens,
        match &cfg.speculation {
            None => "off".to_string(),
            Some(s) => format!(
                "n-gram ({}..{}-grams), up to {} tokens, {}, off in steps of more than {} sequences",
                s.ngram_min,
                s.ngram_max,
                s.depth,
                if s.adaptive { format!("adaptive (token cost {})", s.token_cost) } else { "fixed depth".into() },
                s.max_batch
            ),
        },
    )
}
