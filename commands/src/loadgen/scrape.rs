//! The server's own view (`--scrape-metrics`): `/metrics` sampled through a level, reduced to the figures
//! that explain latency: batch size, queue, KV use, and speculative decoding acceptance. Works with tgi's and
//! TGI's names (`tgi_batch_current_size`, `tgi_queue_size`), vLLM's (`vllm:*`) and llama.cpp's (`llamacpp:*`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Method;

use super::client::http::Endpoint;

/// Substrings of the metric names kept.
const KEEP: [&str; 16] = [
    "batch",
    "queue",
    "running",
    "waiting",
    "processing",
    "deferred",
    "speculat",
    "accept",
    "draft",
    "kv",
    "busy",
    "preempt",
    "prefix_cache",
    "generated_tokens",
    "tokens_predicted",
    "prompt_tokens",
];

/// The kind of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One scrape: sample key (`name{labels}`) -> value, and family name -> kind.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    values: BTreeMap<String, f64>,
    kinds: BTreeMap<String, Kind>,
}

/// Parses the Prometheus text format, keeping the families whose names matter here.
pub fn parse(text: &str) -> Snapshot {
    let mut s = Snapshot::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (it.next(), it.next()) {
                let kind = match kind {
                    "counter" => Kind::Counter,
                    "histogram" | "summary" => Kind::Histogram,
                    _ => Kind::Gauge,
                };
                s.kinds.insert(name.to_string(), kind);
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = line.trim().rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<f64>() else { continue };
        let name = key.split('{').next().unwrap_or(key);
        if name.ends_with("_bucket") || !KEEP.iter().any(|k| name.contains(k)) {
            continue;
        }
        s.values.insert(key.to_string(), value);
    }
    s
}

impl Snapshot {
    /// The kind of sample `key`'s family (histogram parts by their base name; untyped `_total` as counters).
    fn kind(&self, key: &str) -> Kind {
        let name = key.split('{').next().unwrap_or(key);
        if let Some(k) = self.kinds.get(name) {
            return *k;
        }
        for suffix in ["_sum", "_count"] {
            if let Some(k) = name.strip_suffix(suffix).and_then(|b| self.kinds.get(b)) {
                return *k;
            }
        }
        if name.ends_with("_total") {
            Kind::Counter
        } else {
            Kind::Gauge
        }
    }
}

/// Reduces the snapshots of a level: gauges to `:mean` and `:max`, counters to `:delta`, histograms to `:mean`
/// (change of sum over change of count), and `speculative_acceptance` when accepted and draft counters exist.
pub fn reduce(snaps: &[Snapshot]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let (Some(first), Some(last)) = (snaps.first(), snaps.last()) else { return out };
    for (key, &end) in &last.values {
        match last.kind(key) {
            Kind::Gauge => {
                let vals: Vec<f64> = snaps.iter().filter_map(|s| s.values.get(key).copied()).collect();
                let mean = vals.iter().sum::<f64>() / vals.len() as f64;
                out.insert(format!("{key}:mean"), mean);
                out.insert(format!("{key}:max"), vals.iter().copied().fold(f64::MIN, f64::max));
            }
            Kind::Counter => {
                out.insert(format!("{key}:delta"), end - first.values.get(key).copied().unwrap_or(0.0));
            }
            Kind::Histogram => {
                let Some((name, labels)) = split_key(key) else { continue };
                let Some(base) = name.strip_suffix("_sum") else { continue };
                let count_key = format!("{base}_count{labels}");
                let delta = |s: &Snapshot, k: &str| s.values.get(k).copied().unwrap_or(0.0);
                let dc = delta(last, &count_key) - delta(first, &count_key);
                if dc > 0.0 {
                    out.insert(format!("{base}{labels}:mean"), (end - delta(first, key)) / dc);
                }
            }
        }
    }
    // Unlabelled counters only (per-position series are not totals).
    let find = |needle: &str| {
        out.iter().find(|(k, _)| k.ends_with(":delta") && !k.contains('{') && k.contains(needle)).map(|(_, &v)| v)
    };
    // tgi counts drafted tokens as `tgi_speculated_tokens`; vLLM and llama.cpp name them `draft`.
    if let (Some(acc), Some(draft)) = (find("accept"), find("draft").or_else(|| find("speculated_tokens"))) {
        if draft > 0.0 {
            out.insert("speculative_acceptance".into(), acc / draft);
        }
    }
    out
}

fn split_key(key: &str) -> Option<(&str, &str)> {
    match key.find('{') {
        Some(i) => Some((&key[..i], &key[i..])),
        None => Some((key, "")),
    }
}

/// Samples `/metrics` every `every` until stopped.
pub struct Sampler {
    snaps: Arc<Mutex<Vec<Snapshot>>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    endpoint: Arc<Endpoint>,
}

impl Sampler {
    /// Takes a first sample once the figures have settled (see [`settled`]), then keeps sampling in the
    /// background.
    pub async fn start(endpoint: Arc<Endpoint>, every: Duration) -> anyhow::Result<Sampler> {
        let first = settled(&endpoint).await?;
        let snaps = Arc::new(Mutex::new(vec![first]));
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (e, s) = (endpoint.clone(), snaps.clone());
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Ok(snap) = scrape(&e).await {
                    s.lock().expect("poisoned").push(snap);
                }
            }
        });
        Ok(Sampler { snaps, stop, task, endpoint })
    }

    /// Takes a last sample once the server's figures have settled (see [`settled`]), and reduces them all.
    pub async fn finish(self) -> BTreeMap<String, f64> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let mut snaps = std::mem::take(&mut *self.snaps.lock().expect("poisoned"));
        snaps.extend(settled(&self.endpoint).await.ok());
        reduce(&snaps)
    }
}

/// Gauges of requests in flight, by the names tgi and TGI, vLLM and llama.cpp give them.
const IN_FLIGHT: [&str; 6] = [
    "tgi_batch_current_size",
    "tgi_queue_size",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
];

impl Snapshot {
    /// Whether the server reports no request in flight (true when it reports none of [`IN_FLIGHT`]).
    fn idle(&self) -> bool {
        self.values
            .iter()
            .filter(|(k, _)| IN_FLIGHT.iter().any(|g| k.split('{').next() == Some(g)))
            .all(|(_, &v)| v == 0.0)
    }
}

/// A sample taken once the server's figures have settled: it reports no request in flight and two samples in
/// a row agree. A server may count a step's tokens after it has sent them (so a level's first sample could
/// miss the previous level's last token, and its last sample this level's), so the sample is retaken every
/// 50 ms, for at most a second; after that the last one is taken as it is.
async fn settled(e: &Endpoint) -> anyhow::Result<Snapshot> {
    let mut last = scrape(e).await?;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Ok(snap) = scrape(e).await else { break };
        let done = snap.idle() && snap.values == last.values;
        last = snap;
        if done {
            break;
        }
    }
    Ok(last)
}

async fn scrape(e: &Endpoint) -> anyhow::Result<Snapshot> {
    match e.call(Method::GET, "/metrics", Vec::new()).await {
        Ok((200, text)) => Ok(parse(&text)),
        Ok((status, _)) => {
            anyhow::bail!("--scrape-metrics: GET /metrics answered HTTP {status} (llama-server needs --metrics)")
        }
        Err((_, m)) => anyhow::bail!("--scrape-metrics: GET /metrics: {m}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduces_gauges_counters_histograms() {
        let at = |batch: f64, gen: f64, sum: f64, count: f64, acc: f64| {
            parse(&format!(
                "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size {batch}\n\
                 # TYPE tgi_batch_generated_tokens counter\ntgi_batch_generated_tokens {gen}\n\
                 # TYPE tgi_batch_next_size histogram\ntgi_batch_next_size_bucket{{le=\"1\"}} 0\n\
                 tgi_batch_next_size_sum {sum}\ntgi_batch_next_size_count {count}\n\
                 vllm:spec_decode_num_accepted_tokens_total {acc}\nvllm:spec_decode_num_draft_tokens_total {}\n\
                 tgi_request_count 5\n",
                acc * 2.0
            ))
        };
        let r =
            reduce(&[at(0.0, 10.0, 4.0, 2.0, 0.0), at(4.0, 50.0, 40.0, 12.0, 30.0), at(2.0, 70.0, 44.0, 14.0, 40.0)]);
        assert_eq!(r["tgi_batch_current_size:mean"], 2.0);
        assert_eq!(r["tgi_batch_current_size:max"], 4.0);
        assert_eq!(r["tgi_batch_generated_tokens:delta"], 60.0);
        assert_eq!(r["tgi_batch_next_size:mean"], 40.0 / 12.0);
        assert_eq!(r["speculative_acceptance"], 0.5);
        assert!(!r.keys().any(|k| k.contains("request_count") || k.contains("bucket")));
    }
    #[test]
    fn idle_means_no_request_running_or_queued_by_any_servers_names() {
        let gauges = |text: &str| parse(&text.replace(';', "\n"));
        assert!(gauges("tgi_batch_current_size 0;tgi_queue_size 0;tgi_batch_generated_tokens 7").idle());
        assert!(!gauges("tgi_batch_current_size 1;tgi_queue_size 0").idle());
        assert!(!gauges("vllm:num_requests_waiting{model_name=\"m\"} 2").idle());
        assert!(!gauges("llamacpp:requests_processing 1").idle());
        assert!(gauges("vllm:num_requests_running{model_name=\"m\"} 0;llamacpp:requests_deferred 0").idle());
        // A server that reports no such gauge is taken as idle (the samples' agreeing is what is left).
        assert!(gauges("some_kv_usage 0.5").idle());
    }

    #[test]
    fn acceptance_from_tgi_counters() {
        let at = |drafted: f64, accepted: f64| {
            parse(&format!(
                "# TYPE tgi_speculated_tokens counter\ntgi_speculated_tokens {drafted}\n\
                 # TYPE tgi_speculative_accepted_tokens counter\ntgi_speculative_accepted_tokens {accepted}\n\
                 # TYPE tgi_speculated_tokens_by_position counter\n\
                 tgi_speculated_tokens_by_position{{position=\"1\"}} 1\n"
            ))
        };
        let r = reduce(&[at(10.0, 5.0), at(50.0, 25.0)]);
        assert_eq!(r["speculative_acceptance"], 0.5);
    }
}
