//! Fitting a profile to this machine: the thread and KV-cache limits tune enforces, the space swept
//! within them, and the plain notes on what is measured here and what does not transfer.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::args::TuneArgs;
use super::space::{parse_list, Config, Param, Space, Value};
use crate::error::InputError;
use crate::loadgen::spawn::LocalServer;
use crate::profile::{DeviceKind, LocalMachine, Profile, Workload, AUTO};

const GIB: f64 = (1u64 << 30) as f64;

/// The limits tune enforces on this machine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepLimits {
    /// Most threads: the profile's, within this machine's cores.
    pub threads: usize,
    /// This machine's cores (serve's default thread count).
    pub cores: usize,
    /// Most KV cache tokens, when the profile's memory is below what serve would take by default.
    pub kv_tokens: Option<usize>,
}

impl SweepLimits {
    /// Applies the limits to a swept value (`default` threads become the profile's when that is fewer).
    fn clamp(&self, p: Param, v: Value) -> Value {
        let cap = match p {
            Param::Threads if self.threads < self.cores => Some(self.threads),
            Param::Threads => Some(self.cores),
            Param::MaxBatchTotalTokens => self.kv_tokens,
            _ => None,
        };
        match (cap, &v) {
            (Some(c), Value::Default) if p == Param::Threads && c < self.cores => Value::Set(c.to_string()),
            (Some(c), Value::Default) if p == Param::MaxBatchTotalTokens => Value::Set(c.to_string()),
            (Some(c), Value::Set(s)) if s.parse::<usize>().is_ok_and(|n| n > c) => Value::Set(c.to_string()),
            _ => v,
        }
    }

    /// Serve's defaults within the limits: where every search starts.
    pub fn baseline(&self) -> Config {
        let mut c = Config::default();
        for p in [Param::Threads, Param::MaxBatchTotalTokens] {
            c = c.with(p, &self.clamp(p, Value::Default));
        }
        c
    }
}

/// The sweep lists given on the command line, by parameter.
fn given(args: &TuneArgs) -> [(Param, &Option<String>); 8] {
    [
        (Param::Threads, &args.threads),
        (Param::MaxBatchSize, &args.max_batch_size),
        (Param::MaxBatchPrefillTokens, &args.max_batch_prefill_tokens),
        (Param::MaxBatchTotalTokens, &args.max_batch_total_tokens),
        (Param::WaitingServedRatio, &args.waiting_served_ratio),
        (Param::KvCacheDtype, &args.kv_cache_dtype),
        (Param::Speculate, &args.speculate),
        (Param::Quantize, &args.quantize),
    ]
}

/// Checks the sweep lists before anything runs.
pub fn check_lists(args: &TuneArgs) -> Result<(), InputError> {
    for (p, list) in given(args) {
        if let Some(list) = list {
            parse_list(p, list).map_err(InputError)?;
        }
    }
    Ok(())
}

/// The space to sweep: the parameters given on the command line, else the default set; within `limits`.
pub fn space(args: &TuneArgs, limits: &SweepLimits, w: &Workload) -> Result<Space, InputError> {
    let given = given(args);
    let lists: Vec<(Param, String)> = if given.iter().any(|(_, v)| v.is_some()) {
        given.iter().filter_map(|(p, v)| v.as_ref().map(|v| (*p, v.clone()))).collect()
    } else {
        let t = limits.threads;
        let need = w.concurrency as u64 * (w.input_tokens + w.output_tokens);
        vec![
            (Param::Threads, format!("1,{},{t}", (t / 2).max(1))),
            (Param::MaxBatchSize, "1,4,16,64".into()),
            (Param::MaxBatchPrefillTokens, "256,1024,4096".into()),
            (Param::MaxBatchTotalTokens, format!("default,{need},{}", 4 * need)),
            (Param::WaitingServedRatio, "0,0.3,1.2".into()),
            (Param::KvCacheDtype, "f32,f16,q8_0".into()),
            (Param::Speculate, "none,ngram:2,ngram:4".into()),
        ]
    };
    let mut space = Vec::new();
    for (p, list) in lists {
        let mut values: Vec<Value> = Vec::new();
        for v in parse_list(p, &list).map_err(InputError)? {
            let v = limits.clamp(p, v);
            if !values.contains(&v) {
                values.push(v);
            }
        }
        space.push((p, values));
    }
    Ok(Space(space))
}

/// The limits for `profile` on `machine`; probes the model's KV bytes per token (a short `tgi serve`
/// start) when the profile has less memory than this machine.
pub fn limits(
    profile: &Profile,
    m: &LocalMachine,
    source: &str,
    wait: Duration,
    notes: &mut Vec<String>,
) -> Result<SweepLimits> {
    let threads = profile.threads.min(m.cores);
    let mut limits = SweepLimits { threads, cores: m.cores, kv_tokens: None };
    if profile.threads > m.cores {
        notes
            .push(format!("threads clamped to this machine's {} cores (the profile has {})", m.cores, profile.threads));
    } else if profile.threads < m.cores {
        notes.push(format!("threads at most the profile's {threads} (this machine has {} cores)", m.cores));
    }
    if profile.device != DeviceKind::Cpu || profile.memory_gib >= m.memory_gib {
        return Ok(limits);
    }
    let weights = weights_bytes(source);
    let budget = (profile.memory_gib * GIB - weights) / 2.0;
    if budget <= 0.0 {
        return Err(InputError(format!(
            "the model's weights ({:.2} GiB) do not fit the profile's {} GiB of memory",
            weights / GIB,
            profile.memory_gib
        ))
        .into());
    }
    let server = LocalServer::start(Some(source), &["--threads=1".into()], wait, true)?;
    let (default_tokens, bytes_per_token) = kv_summary(&server)?;
    drop(server);
    let cap = (budget / bytes_per_token as f64) as usize;
    if default_tokens > cap {
        limits.kv_tokens = Some(cap);
        notes.push(format!(
            "KV cache at most {cap} tokens ({:.0} MiB at {bytes_per_token} bytes per token): half of the profile's {} GiB \
             less the weights ({:.2} GiB); serve's default here would be {default_tokens}",
            cap as f64 * bytes_per_token as f64 / (1 << 20) as f64,
            profile.memory_gib,
            weights / GIB
        ));
    } else {
        notes.push(format!(
            "KV cache: serve's default ({default_tokens} tokens) fits the profile's {} GiB",
            profile.memory_gib
        ));
    }
    Ok(limits)
}

/// The KV tokens and bytes per token from the server's startup summary (on a loaded machine, the thread
/// reading its stderr may pass that line on well after the server answers).
fn kv_summary(server: &LocalServer) -> Result<(usize, usize)> {
    let re = regex::Regex::new(r"KV cache: (\d+) tokens \([0-9.]+ MiB, (\d+) bytes per token").expect("valid");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        if let Some(c) = re.captures(&server.log_tail()) {
            return Ok((c[1].parse()?, c[2].parse()?));
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    anyhow::bail!("tgi serve did not report its KV cache size in 120 s:\n{}", server.log_tail())
}

/// The size of the model's weight files (0 for a hub id).
fn weights_bytes(source: &str) -> f64 {
    let path = std::path::Path::new(source);
    if path.is_file() {
        return path.metadata().map_or(0.0, |m| m.len() as f64);
    }
    let Ok(dir) = std::fs::read_dir(path) else { return 0.0 };
    dir.filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors" || x == "gguf" || x == "bin"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len() as f64)
        .sum()
}

/// What the numbers mean here: measured on this machine, and what does not transfer to the profile's.
pub fn transfer_notes(profile: &Profile, m: &LocalMachine) -> Vec<String> {
    let mut notes = vec![format!(
        "measured here ({} cores, {:.1} GiB, CPU): latency, throughput, goodput against the profile's SLOs, peak RSS",
        m.cores, m.memory_gib
    )];
    if profile.name == AUTO {
        notes.push("profile auto is this machine: the figures and the best settings apply here as they are".into());
    } else if profile.device != DeviceKind::Cpu {
        notes.push(format!(
            "not transferable: the profile targets {} ({}); trials run on this machine's CPU, so absolute latencies \
             and throughput, and the best GPU-side batch settings, do not carry over",
            profile.device.name(),
            profile.gpu_memory_gib.map_or("GPU".into(), |g| format!("{g} GiB GPU memory"))
        ));
    } else {
        let bw = profile.memory_bandwidth_gbs.map_or(String::new(), |b| format!(" ({b} GB/s)"));
        notes.push(format!(
            "not transferable: per-core speed and memory bandwidth{bw} of the {} differ from this machine's; \
             absolute figures are this machine's, the ranking of settings is what carries over",
            profile.name
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: TuneArgs,
    }

    fn args(extra: &[&str]) -> TuneArgs {
        Cli::parse_from(["tune", "--profile", "auto"].iter().chain(extra)).a
    }

    const W: Workload = Workload { input_tokens: 16, output_tokens: 8, concurrency: 2, rate: None, requests: 4 };

    #[test]
    fn clamps_and_defaults() {
        let l = SweepLimits { threads: 2, cores: 4, kv_tokens: Some(1000) };
        let b = l.baseline();
        assert_eq!(b.to_string(), "threads=2 max_batch_total_tokens=1000");
        let s = space(&args(&["--threads", "1,2,8,default", "--max-batch-total-tokens", "48,5000"]), &l, &W).unwrap();
        assert_eq!(s.0.len(), 2, "only the parameters given");
        assert_eq!(s.0[0].1, [Value::Set("1".into()), Value::Set("2".into())]);
        assert_eq!(s.0[1].1, [Value::Set("48".into()), Value::Set("1000".into())]);
        let s = space(&args(&[]), &SweepLimits { threads: 4, cores: 4, kv_tokens: None }, &W).unwrap();
        assert_eq!(s.0.len(), 7);
        assert_eq!(s.0[0].1, [Value::Set("1".into()), Value::Set("2".into()), Value::Set("4".into())]);
        assert_eq!(s.0[3].1, [Value::Default, Value::Set("48".into()), Value::Set("192".into())]);
        assert_eq!(SweepLimits { threads: 4, cores: 4, kv_tokens: None }.baseline(), Config::default());
        assert!(space(&args(&["--speculate", "ngram:x"]), &l, &W).is_err());
    }

    #[test]
    fn notes_and_limits() {
        let m = LocalMachine { cores: 2, memory_gib: 24.0, available_gib: 20.0 };
        let mut notes = Vec::new();
        let h100 = Profile::named("h100").unwrap();
        let l = limits(&h100, &m, "m.gguf", Duration::from_secs(1), &mut notes).unwrap();
        assert_eq!((l.threads, l.kv_tokens), (2, None));
        assert!(notes[0].contains("clamped to this machine's 2 cores"), "{notes:?}");
        assert!(transfer_notes(&h100, &m)[1].contains("targets cuda"));
        let here = transfer_notes(&Profile::auto(&m), &m);
        assert!(here[1].contains("profile auto is this machine") && !here.join(" ").contains("not transferable"));
        let mut tiny = Profile::named("rpi5").unwrap();
        tiny.memory_gib = 1e-9;
        let e = limits(&tiny, &m, "Cargo.toml", Duration::from_secs(1), &mut notes).unwrap_err();
        assert!(e.to_string().contains("do not fit"), "{e}");
    }
}
