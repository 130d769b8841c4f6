//! `/metrics`: TGI's request metrics (kept here, per HTTP request) and the engine's counters (from
//! [`Stats`]) in the Prometheus text format, under TGI's names and bucket layouts.

use super::lora::AdapterInfo;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tgi_engines::constraint::{CacheStats as GrammarCacheStats, Compiled};
use tgi_engines::scheduler::{Histogram, Stats};

use super::error::ApiError;
use super::limits::RequestLimits;
use super::response_cache::CacheStats;

/// TGI's duration buckets: 35 bounds growing by 1.5 from 0.00015 s.
fn duration_buckets() -> Histogram {
    Histogram::exponential(0.0001 * 1.5, 1.5, 35)
}

/// TGI's token-count buckets: 100 even steps up to `max`.
fn count_buckets(max: usize) -> Histogram {
    Histogram::new((1..=100).map(|x| max as f64 / 100.0 * x as f64).collect())
}

/// Request counters and histograms since start.
pub struct Metrics {
    /// Everything behind one lock: a request touches it a handful of times.
    inner: Mutex<Requests>,
}

/// The request metrics.
struct Requests {
    count: u64,
    success: u64,
    failure: BTreeMap<&'static str, u64>,
    duration: Histogram,
    validation: Histogram,
    queue: Histogram,
    inference: Histogram,
    time_per_token: Histogram,
    time_to_first_token: Histogram,
    inter_token_latency: Histogram,
    generated_tokens: Histogram,
    input_length: Histogram,
    max_new_tokens: Histogram,
    grammar_compile: Histogram,
    grammar_cache_hits: u64,
}

/// What the caches hold, for `/metrics`.
#[derive(Clone, Copy, Debug)]
pub struct Caches<'a> {
    /// The response cache, when on.
    pub response: Option<&'a CacheStats>,
    /// The compiled-grammar cache, once a grammar was compiled.
    pub grammar: Option<GrammarCacheStats>,
}

/// Where one request's time went, for the `x-*-time` headers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestTimings {
    /// From arrival to the end.
    pub total: Duration,
    /// From arrival to submission (parsing, templating, tokenizing).
    pub validation: Duration,
    /// Waiting in the engine's queue.
    pub queue: Duration,
    /// From leaving the queue to the last token.
    pub inference: Duration,
    /// Inference time per generated token.
    pub per_token: Duration,
}

impl Metrics {
    /// Empty metrics with TGI's buckets for these limits.
    pub fn new(limits: &RequestLimits) -> Self {
        Metrics {
            inner: Mutex::new(Requests {
                count: 0,
                success: 0,
                failure: BTreeMap::new(),
                duration: duration_buckets(),
                validation: duration_buckets(),
                queue: duration_buckets(),
                inference: duration_buckets(),
                time_per_token: duration_buckets(),
                time_to_first_token: duration_buckets(),
                inter_token_latency: duration_buckets(),
                generated_tokens: count_buckets(limits.max_total_tokens),
                input_length: count_buckets(limits.max_input_tokens),
                max_new_tokens: count_buckets(limits.max_total_tokens),
                grammar_compile: duration_buckets(),
                grammar_cache_hits: 0,
            }),
        }
    }

    /// Counts one grammar a request brought: the time compiling it (or finding it in the cache) took.
    pub fn grammar_compiled(&self, c: Compiled) {
        self.with(|r| {
            r.grammar_compile.observe(c.seconds);
            r.grammar_cache_hits += u64::from(c.cached);
        });
    }

    fn with<R>(&self, f: impl FnOnce(&mut Requests) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The Prometheus text exposition of the request metrics, the requests `in_flight` (holding a
    /// `--max-concurrent-requests` permit), the engine's `stats` and the caches'.
    pub fn render(&self, stats: &Stats, limits: &RequestLimits, in_flight: usize, caches: Caches<'_>) -> String {
        let mut out = Exposition::default();
        self.with(|r| {
            out.counter("tgi_request_count", "Total number of requests", &[], r.count as f64);
            out.counter("tgi_request_success", "Number of successful requests", &[], r.success as f64);
            out.header("tgi_request_failure", "Number of failed requests by cause", "counter");
            for (err, n) in &r.failure {
                out.sample("tgi_request_failure", &[("err", err)], *n as f64);
            }
            let durations = [
                ("tgi_request_duration", "Total time spent processing the request", &r.duration),
                ("tgi_request_validation_duration", "Time spent validating the request", &r.validation),
                ("tgi_request_queue_duration", "Time spent in the queue per request", &r.queue),
                ("tgi_request_inference_duration", "Request inference duration", &r.inference),
                ("tgi_request_mean_time_per_token_duration", "Mean time per token per request", &r.time_per_token),
                ("tgi_request_time_to_first_token_duration", "Time to the first token", &r.time_to_first_token),
                ("tgi_request_inter_token_latency_duration", "Time between tokens", &r.inter_token_latency),
                ("tgi_request_generated_tokens", "Generated tokens per request", &r.generated_tokens),
                ("tgi_request_input_length", "Input token length per request", &r.input_length),
                ("tgi_request_max_new_tokens", "Maximum new tokens per request", &r.max_new_tokens),
            ];
            for (name, help, h) in durations {
                out.header(name, help, "histogram");
                out.histogram(name, &[], h);
            }
            let name = "tgi_grammar_compile_duration_seconds";
            out.header(name, "Time to compile a request's grammar (a cache lookup on a hit)", "histogram");
            out.histogram(name, &[], &r.grammar_compile);
            let help = "Grammars found compiled in the cache";
            out.counter("tgi_grammar_cache_hits", help, &[], r.grammar_cache_hits as f64);
        });
        let grammars = caches.grammar.unwrap_or_default();
        out.gauge("tgi_grammar_cache_entries", "Compiled grammars kept for reuse", grammars.entries as f64);
        let help = "Estimated bytes of the compiled grammars kept (--grammar-cache-size bounds it)";
        out.gauge("tgi_grammar_cache_bytes", help, grammars.bytes as f64);
        out.gauge("tgi_request_in_flight", "Requests being served (queued or running)", in_flight as f64);
        out.gauge("tgi_queue_size", "Current queue size", stats.queue_size as f64);
        out.gauge("tgi_batch_current_size", "Current batch size", stats.batch_size as f64);
        out.gauge("tgi_batch_current_max_tokens", "Tokens the current batch holds", stats.batch_tokens as f64);
        out.gauge("tgi_batch_total_tokens", "Maximum amount of tokens in total", limits.max_batch_total_tokens as f64);
        out.header("tgi_batch_inference_count", "Inference calls per method (prefill or decode)", "counter");
        out.sample("tgi_batch_inference_count", &[("method", "prefill")], stats.steps_prefill as f64);
        out.sample("tgi_batch_inference_count", &[("method", "decode")], stats.steps_decode as f64);
        out.header("tgi_batch_inference_duration", "Batch inference duration", "histogram");
        let with_prefill = stats.step_duration_mixed.merged(&stats.step_duration_prefill);
        out.histogram("tgi_batch_inference_duration", &[("method", "prefill")], &with_prefill);
        out.histogram("tgi_batch_inference_duration", &[("method", "decode")], &stats.step_duration_decode);
        steps(&mut out, stats);
        out.header("tgi_batch_next_size", "Batch size of the next batch", "histogram");
        out.histogram("tgi_batch_next_size", &[], &stats.step_batch_size);
        out.counter("tgi_batch_prefill_tokens", "Prompt tokens computed", &[], stats.prefill_tokens as f64);
        out.counter("tgi_batch_generated_tokens", "Tokens generated", &[], stats.generated_tokens as f64);
        let free = stats.kv_blocks_total.saturating_sub(stats.kv_blocks_used);
        out.gauge("tgi_kv_blocks_total", "KV cache blocks in the pool", stats.kv_blocks_total as f64);
        out.gauge("tgi_kv_blocks_used", "KV cache blocks in use", stats.kv_blocks_used as f64);
        out.gauge("tgi_kv_blocks_free", "KV cache blocks free", free as f64);
        out.gauge("tgi_kv_block_size", "Tokens per KV cache block", stats.block_size as f64);
        let queries = stats.prefix_cache_queries as f64;
        out.counter("tgi_prefix_cache_queries", "Prompt tokens looked up in the prefix cache", &[], queries);
        out.counter(
            "tgi_prefix_cache_hits",
            "Prompt tokens found in the prefix cache",
            &[],
            stats.prefix_cache_hits as f64,
        );
        out.counter(
            "tgi_request_preemptions",
            "Sequences preempted for KV cache blocks",
            &[],
            stats.preemptions as f64,
        );
        out.counter(
            "tgi_request_cancelled",
            "Requests cancelled because the client went away",
            &[],
            stats.cancelled as f64,
        );
        speculation(&mut out, stats);
        if let Some(c) = caches.response {
            response_cache(&mut out, c);
        }
        out.text
    }
}

/// The response cache's lookups by outcome, size and evictions.
fn response_cache(out: &mut Exposition, c: &CacheStats) {
    out.counter("tgi_response_cache_hits", "Requests answered from the response cache", &[], c.hits as f64);
    let help = "Deterministic requests not in the response cache (computed and stored)";
    out.counter("tgi_response_cache_misses", help, &[], c.misses as f64);
    let help = "Requests that could not use the response cache (sampled without a seed, a grammar, Cache-Control)";
    out.counter("tgi_response_cache_skipped", help, &[], c.skipped as f64);
    out.gauge("tgi_response_cache_entries", "Answers in the response cache", c.entries as f64);
    out.gauge("tgi_response_cache_bytes", "Approximate bytes the response cache holds", c.bytes as f64);
    let help = "Answers evicted from the response cache to stay within its size";
    out.counter("tgi_response_cache_evictions", help, &[], c.evictions as f64);
}

/// Step durations by kind, prompt tokens per step and the per-step prompt-token cap beside decodes.
fn steps(out: &mut Exposition, stats: &Stats) {
    let name = "tgi_step_duration_seconds";
    out.header(
        name,
        "Step duration by kind: decode-only, mixed (decodes and prompt tokens), prefill-only",
        "histogram",
    );
    out.histogram(name, &[("kind", "decode")], &stats.step_duration_decode);
    out.histogram(name, &[("kind", "mixed")], &stats.step_duration_mixed);
    out.histogram(name, &[("kind", "prefill")], &stats.step_duration_prefill);
    out.header("tgi_step_prefill_tokens", "Prompt tokens per step with prompt tokens", "histogram");
    out.histogram("tgi_step_prefill_tokens", &[], &stats.step_prefill_tokens);
    let help = "Most prompt tokens a step takes beside decoding sequences";
    out.gauge("tgi_step_prefill_tokens_cap", help, stats.prefill_cap as f64);
    let name = "tgi_grammar_mask_duration_seconds";
    out.header(name, "Time to compute one constrained token's grammar mask (beside the forward pass)", "histogram");
    out.histogram(name, &[], &stats.grammar_mask_seconds);
}

/// Speculative decoding's counters: drafted and accepted tokens, in all and by draft position.
fn speculation(out: &mut Exposition, stats: &Stats) {
    let help = "Tokens drafted by speculative decoding and checked by the model";
    out.counter("tgi_speculated_tokens", help, &[], stats.speculated_tokens as f64);
    let help = "Drafted tokens the model accepted";
    out.counter("tgi_speculative_accepted_tokens", help, &[], stats.speculative_accepted_tokens as f64);
    let help = "Sequence steps that verified a draft";
    out.counter("tgi_speculative_verifications", help, &[], stats.speculative_verifications as f64);
    let help =
        "Cost of a drafted token relative to a sequence's share of a plain step, as the last depth choice used it";
    out.gauge("tgi_speculation_token_cost", help, stats.speculation_token_cost);
    let help = "Speed-up the adaptive rule predicted for the last step's drafts";
    out.gauge("tgi_speculation_predicted_speedup", help, stats.speculation_predicted_speedup);
    let help = "Decode steps in which the check of what drafting yields held the adaptive rule's drafting off";
    out.counter("tgi_speculation_held_steps", help, &[], stats.speculation_held_steps as f64);
    let by_position = [
        (
            "tgi_speculated_tokens_by_position",
            "Drafts that reached a position (1 = first drafted token)",
            &stats.speculated_by_position,
        ),
        (
            "tgi_speculative_accepted_tokens_by_position",
            "Drafted tokens accepted, by position",
            &stats.accepted_by_position,
        ),
    ];
    for (name, help, counts) in by_position {
        out.header(name, help, "counter");
        for (i, &n) in counts.iter().enumerate() {
            out.sample(name, &[("position", &(i + 1).to_string())], n as f64);
        }
    }
}

/// The LoRA adapters' metrics: how many are held, each one's load time and requests, and the evictions.
pub fn render_loras(adapters: &[AdapterInfo], evictions: u64) -> String {
    let mut out = Exposition::default();
    out.gauge("tgi_lora_loaded", "LoRA adapters held", adapters.len() as f64);
    out.header("tgi_lora_load_seconds", "Time loading each held LoRA adapter took", "gauge");
    for a in adapters {
        out.sample("tgi_lora_load_seconds", &[("adapter", &a.name)], a.load_seconds);
    }
    out.header("tgi_lora_requests", "Requests run on each held LoRA adapter", "counter");
    for a in adapters {
        out.sample("tgi_lora_requests", &[("adapter", &a.name)], a.requests as f64);
    }
    out.header("tgi_lora_bytes", "Memory each held LoRA adapter's factors take", "gauge");
    for a in adapters {
        out.sample("tgi_lora_bytes", &[("adapter", &a.name)], a.bytes as f64);
    }
    out.counter("tgi_lora_evictions", "LoRA adapters evicted to make room (--max-loras)", &[], evictions as f64);
    out.text
}

/// Prometheus text being written.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let body: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            let _ = write!(self.text, "{{{}}}", body.join(","));
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], value: f64) {
        self.header(name, help, "counter");
        self.sample(name, labels, value);
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "gauge");
        self.sample(name, &[], value);
    }

    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &Histogram) {
        let bucket = format!("{name}_bucket");
        for (bound, n) in h.cumulative() {
            let le = number(bound);
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample(&bucket, &with_le, n as f64);
        }
        self.sample(&format!("{name}_sum"), labels, h.sum);
        self.sample(&format!("{name}_count"), labels, h.count as f64);
    }
}

/// A sample value as Prometheus writes it.
fn number(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".into()
    } else {
        format!("{v}")
    }
}

/// One HTTP generation request's passage through the metrics: counted on creation, then exactly
/// one of success or failure (a request dropped before either counts as `cancelled`).
pub struct Tracker {
    metrics: Arc<Metrics>,
    start: Instant,
    queued: Option<Instant>,
    last_token: Vec<Option<Instant>>,
    done: bool,
}

impl Tracker {
    /// Counts a new request arriving now.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        metrics.with(|r| r.count += 1);
        Tracker { metrics, start: Instant::now(), queued: None, last_token: Vec::new(), done: false }
    }

    /// The request passed validation and goes to the engine as `candidates` sequences.
    pub fn queued(&mut self, input_length: usize, max_new_tokens: usize, candidates: usize) {
        self.queued = Some(Instant::now());
        self.last_token = vec![None; candidates];
        self.metrics.with(|r| {
            r.input_length.observe(input_length as f64);
            r.max_new_tokens.observe(max_new_tokens as f64);
        });
    }

    /// Candidate `index` produced a token now.
    pub fn token(&mut self, index: usize) {
        let now = Instant::now();
        let Some(slot) = self.last_token.get_mut(index) else { return };
        let gap = match slot.replace(now) {
            Some(prev) => (false, now - prev),
            None => (true, now - self.start),
        };
        self.metrics.with(|r| match gap {
            (true, d) => r.time_to_first_token.observe(d.as_secs_f64()),
            (false, d) => r.inter_token_latency.observe(d.as_secs_f64()),
        });
    }

    /// The request succeeded: records its timings and returns them.
    pub fn succeed(&mut self, queue: Duration, inference: Duration, generated: usize) -> RequestTimings {
        self.done = true;
        let total = self.start.elapsed();
        let validation = self.queued.map_or(total, |q| q - self.start);
        let per_token = inference / generated.max(1) as u32;
        self.metrics.with(|r| {
            r.success += 1;
            r.duration.observe(total.as_secs_f64());
            r.validation.observe(validation.as_secs_f64());
            r.queue.observe(queue.as_secs_f64());
            r.inference.observe(inference.as_secs_f64());
            r.time_per_token.observe(per_token.as_secs_f64());
            r.generated_tokens.observe(generated as f64);
        });
        RequestTimings { total, validation, queue, inference, per_token }
    }

    /// The request failed with `err`.
    pub fn fail(&mut self, err: &ApiError) {
        self.done = true;
        let label = err.class().metric;
        self.metrics.with(|r| *r.failure.entry(label).or_insert(0) += 1);
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if !self.done {
            self.metrics.with(|r| *r.failure.entry("cancelled").or_insert(0) += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::limits::tests::small;

    /// A step-duration histogram (one bucket at 0.1 s) holding `values`.
    fn duration(values: &[f64]) -> Histogram {
        let mut h = Histogram::new(vec![0.1]);
        values.iter().for_each(|&v| h.observe(v));
        h
    }

    pub(crate) fn empty_stats() -> Stats {
        Stats {
            queue_size: 1,
            batch_size: 2,
            batch_tokens: 30,
            kv_blocks_total: 8,
            kv_blocks_used: 3,
            block_size: 16,
            prefix_cache_queries: 10,
            prefix_cache_hits: 4,
            preemptions: 0,
            cancelled: 1,
            steps_prefill: 5,
            steps_decode: 7,
            prefill_tokens: 50,
            generated_tokens: 70,
            step_duration_decode: Histogram::new(vec![0.1]),
            step_duration_mixed: duration(&[0.05, 0.2]),
            step_duration_prefill: duration(&[0.3]),
            step_prefill_tokens: Histogram::new(vec![16.0, 32.0]),
            prefill_cap: 24,
            step_batch_size: Histogram::new(vec![1.0, 2.0]),
            speculated_tokens: 9,
            speculative_accepted_tokens: 5,
            speculative_verifications: 4,
            speculated_by_position: vec![4, 3, 2],
            accepted_by_position: vec![3, 2, 0],
            grammar_mask_seconds: Histogram::new(vec![0.001]),
            speculation_token_cost: 0.25,
            speculation_predicted_speedup: 1.5,
            speculation_held_steps: 6,
        }
    }

    #[test]
    fn renders_tgi_names() {
        let limits = small();
        let m = Arc::new(Metrics::new(&limits));
        let mut t = Tracker::new(m.clone());
        t.queued(3, 5, 1);
        t.token(0);
        t.token(0);
        let timings = t.succeed(Duration::from_millis(2), Duration::from_millis(10), 2);
        assert_eq!(timings.per_token, Duration::from_millis(5));
        drop(Tracker::new(m.clone()));
        let cache = CacheStats { hits: 3, ..CacheStats::default() };
        let grammar = Some(GrammarCacheStats { entries: 3, bytes: 4096 });
        let text = m.render(&empty_stats(), &limits, 2, Caches { response: Some(&cache), grammar });
        assert!(text.contains("tgi_grammar_cache_entries 3\n") && text.contains("tgi_grammar_cache_bytes 4096\n"));
        assert!(text.contains("tgi_request_count 2\n"), "{text}");
        assert!(text.contains("tgi_request_failure{err=\"cancelled\"} 1\n"));
        assert!(text.contains("tgi_request_input_length_bucket{le=\"0.12\"} 0\n"), "{text}");
        assert!(text.contains("tgi_request_input_length_bucket{le=\"+Inf\"} 1\n"));
        assert!(text.contains("tgi_request_input_length_sum 3\n"));
        assert!(text.contains("tgi_request_inter_token_latency_duration_count 1\n"));
        assert!(text.contains("tgi_batch_inference_duration_bucket{method=\"decode\",le=\"+Inf\"} 0\n"));
        assert!(text.contains("tgi_batch_inference_duration_bucket{method=\"prefill\",le=\"0.1\"} 1\n"), "{text}");
        assert!(text.contains("tgi_batch_inference_duration_count{method=\"prefill\"} 3\n"));
        assert!(text.contains("tgi_step_duration_seconds_bucket{kind=\"mixed\",le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("tgi_step_duration_seconds_count{kind=\"prefill\"} 1\n"));
        assert!(text.contains("tgi_step_duration_seconds_count{kind=\"decode\"} 0\n"));
        assert!(text.contains("tgi_step_prefill_tokens_bucket{le=\"16\"} 0\n"));
        assert!(text.contains("tgi_step_prefill_tokens_cap 24\n"));
        assert!(text.contains("tgi_kv_blocks_free 5\n"));
        assert!(text.contains("tgi_speculated_tokens 9\n"));
        assert!(text.contains("tgi_speculative_accepted_tokens 5\n"));
        assert!(text.contains("tgi_speculation_held_steps 6\n"), "{text}");
        assert!(text.contains("tgi_request_in_flight 2\n"));
        assert!(text.contains("tgi_response_cache_hits 3\n") && text.contains("tgi_response_cache_bytes 0\n"));
        assert!(text.contains("tgi_speculated_tokens_by_position{position=\"3\"} 2\n"), "{text}");
        assert!(text.contains("tgi_speculative_accepted_tokens_by_position{position=\"1\"} 3\n"));
    }
}
