//! Cost of speculative verification steps against plain decode steps, and of their parts.
//!
//! B sequences each hold a CTX-token context; a step gives each T new tokens: T=1 with `Logits::Last` (plain
//! decode), T=1+K with `Logits::All` (verifying K drafted tokens) and with `Logits::Last` (the same rows without
//! the extra lm_head rows). Every step writes the same KV positions, so all repeats see the same context. Then the
//! parts of a step of n = B·T rows, timed alone: the matmuls of every layer (grouped by shape), attention of every
//! layer, lm_head over the rows whose logits are wanted, and the sampler's greedy verification of every row.
//! `c` is the implied cost of one drafted token as a fraction of a plain step: `verify = plain · (1 + c·K)`.
//!
//! `cargo bench -p tgi-engines --bench verify_step -- MODEL [CTX K B1,B2,... REPEATS wall|cpu]`, e.g.
//! `-- models/stories260k/stories260k-f32.gguf 200 4 1,4,16 100 cpu`. Threads: `RAYON_NUM_THREADS`. Times are the
//! fastest of REPEATS runs, by the wall clock or by the process's CPU time (steadier on a shared machine).

use std::time::Instant;

use candle_core::{Device, Tensor};
use tgi_engines::kv::{AttentionPlan, BlockTable, KvCache, SeqSpan};
use tgi_engines::model::{load, LoadOptions, LoadedModel, Logits, SeqInput};
use tgi_engines::sampling::{Sampler, SamplingParams};

/// CPU seconds used by this process so far (every thread).
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// How runs are timed.
#[derive(Clone, Copy)]
struct Timing {
    /// Runs per measurement.
    repeats: usize,
    /// The process's CPU time instead of wall-clock time: other jobs on a shared machine do not inflate it (with
    /// one rayon thread it is the work itself; with more it includes rayon's spinning).
    cpu: bool,
}

impl Timing {
    /// Fastest of `repeats` runs of `f` in seconds, after one warm-up run.
    fn fastest(self, mut f: impl FnMut()) -> f64 {
        f();
        (0..self.repeats)
            .map(|_| {
                let (wall, cpu) = (Instant::now(), cpu_seconds());
                f();
                if self.cpu {
                    cpu_seconds() - cpu
                } else {
                    wall.elapsed().as_secs_f64()
                }
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// Deterministic token ids in `1..vocab`.
fn tokens(n: usize, seed: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| 1 + ((seed * 7919 + i * 104729) % (vocab - 1)) as u32).collect()
}

/// Deterministic activations in [-1, 1).
fn activations(rows: usize, cols: usize, seed: u32) -> Tensor {
    let v: Vec<f32> =
        (0..rows * cols).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect();
    Tensor::from_vec(v, (rows, cols), &Device::Cpu).expect("activations")
}

/// One batch size's fixture: the cache with every sequence's context computed, and the block tables.
struct Fixture {
    kv: KvCache,
    tables: Vec<BlockTable>,
    inputs: Vec<Vec<u32>>,
}

impl Fixture {
    fn new(m: &LoadedModel, b: usize, ctx: usize, t_max: usize) -> Self {
        let vocab = m.model.config().vocab;
        let mut kv = m.model.new_cache(16, b * (ctx + t_max).div_ceil(16)).expect("cache");
        let mut tables = vec![BlockTable::new(); b];
        for t in &mut tables {
            kv.reserve(t, ctx + t_max).expect("blocks");
        }
        let prompts: Vec<Vec<u32>> = (0..b).map(|s| tokens(ctx, s, vocab)).collect();
        let batch: Vec<SeqInput> = prompts
            .iter()
            .zip(&tables)
            .map(|(p, t)| SeqInput { tokens: p, start: 0, table: t, logits: Logits::None })
            .collect();
        m.model.forward(&mut kv, &batch).expect("prefill");
        let inputs = (0..b).map(|s| tokens(t_max, 1000 + s, vocab)).collect();
        Fixture { kv, tables, inputs }
    }

    /// Fastest seconds of one step giving every sequence its first `t` inputs at position `ctx`.
    fn step(&mut self, m: &LoadedModel, ctx: usize, t: usize, logits: Logits, timing: Timing) -> f64 {
        let (kv, tables, inputs) = (&mut self.kv, &self.tables, &self.inputs);
        timing.fastest(|| {
            let batch: Vec<SeqInput> = inputs
                .iter()
                .zip(tables)
                .map(|(i, table)| SeqInput { tokens: &i[..t], start: ctx, table, logits })
                .collect();
            m.model.forward(kv, &batch).expect("step");
        })
    }

    /// Fastest seconds of every layer's attention for a step of `t` rows per sequence at position `ctx`.
    fn attention(&mut self, m: &LoadedModel, ctx: usize, t: usize, timing: Timing) -> f64 {
        let c = m.model.config();
        let spans = self
            .tables
            .iter()
            .enumerate()
            .map(|(i, table)| SeqSpan { rows: i * t..(i + 1) * t, start: ctx, table: table.clone() })
            .collect();
        let plan = AttentionPlan::new(spans, c.heads, c.kv_heads, c.head_dim, c.sliding_window);
        let n = plan.rows();
        let q = activations(n, c.heads * c.head_dim, 1);
        let (k, v) = (activations(n, c.kv_heads * c.head_dim, 2), activations(n, c.kv_heads * c.head_dim, 3));
        let kv = &mut self.kv;
        timing.fastest(|| {
            for layer in 0..c.layers {
                kv.attend(layer, &q, &k, &v, &plan).expect("attend");
            }
        })
    }
}

/// Fastest seconds of every layer's matmuls (lm_head excluded) over `n` rows, and of lm_head over `wanted` rows.
fn matmuls(m: &LoadedModel, n: usize, wanted: usize, timing: Timing) -> (f64, f64) {
    let linears: Vec<_> = m.model.linears().collect();
    let (head, layers) = linears.split_last().expect("an lm_head");
    let c = m.model.config();
    let x = |cols: usize, rows: usize| activations(rows, cols, cols as u32);
    // Inputs of q, k, v, o, gate, up, down: the order of `linears`.
    let (h, o, d) = (x(c.hidden, n), x(c.heads * c.head_dim, n), x(c.intermediate, n));
    let inputs = [&h, &h, &h, &o, &h, &h, &d];
    let body = timing.fastest(|| {
        for (l, x) in layers.iter().zip(inputs.iter().cycle()) {
            l.forward(x).expect("matmul");
        }
    });
    let hx = x(c.hidden, wanted);
    let lm = timing.fastest(|| {
        head.forward(&hx).expect("lm_head");
    });
    (body, lm)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let Some(model) = args.first() else {
        eprintln!("usage: cargo bench -p tgi-engines --bench verify_step -- MODEL [CTX K B1,B2,... REPEATS wall|cpu]");
        return;
    };
    let ctx: usize = args.get(1).map_or(64, |s| s.parse().expect("CTX"));
    let k: usize = args.get(2).map_or(4, |s| s.parse().expect("K"));
    let batches: Vec<usize> =
        args.get(3).map_or("1,4,16", String::as_str).split(',').map(|s| s.parse().expect("B")).collect();
    let repeats: usize = args.get(4).map_or(50, |s| s.parse().expect("REPEATS"));
    let cpu = match args.get(5).map_or("wall", String::as_str) {
        "wall" => false,
        "cpu" => true,
        other => panic!("CLOCK is wall or cpu, not {other}"),
    };
    let timing = Timing { repeats, cpu };
    let m = load(model, &LoadOptions::default()).expect("load");
    let vocab = m.model.config().vocab;
    let t = 1 + k;
    println!(
        "model {model}, context {ctx}, K {k}, {} threads, fastest of {repeats}, {} time (ms)",
        rayon::current_num_threads(),
        if cpu { "CPU" } else { "wall" }
    );
    println!(
        "| B | plain | verify All | verify Last | c (All) | c (Last) | matmuls 1·B | matmuls T·B | attn 1·B | attn T·B | lm_head B | lm_head T·B | sampler T·B |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &b in &batches {
        let mut f = Fixture::new(&m, b, ctx, t);
        let plain = f.step(&m, ctx, 1, Logits::Last, timing);
        let all = f.step(&m, ctx, t, Logits::All, timing);
        let last = f.step(&m, ctx, t, Logits::Last, timing);
        let (mm1, lm1) = matmuls(&m, b, b, timing);
        let (mmt, lmt) = matmuls(&m, b * t, b * t, timing);
        let (at1, att) = (f.attention(&m, ctx, 1, timing), f.attention(&m, ctx, t, timing));
        let rows: Vec<f32> = activations(b * t, vocab, 9).flatten_all().and_then(|x| x.to_vec1()).expect("rows");
        let mut samplers: Vec<Sampler> = (0..b).map(|_| Sampler::new(SamplingParams::greedy(), &[])).collect();
        let sampler = timing.fastest(|| {
            for (s, rows) in samplers.iter_mut().zip(rows.chunks(t * vocab)) {
                for (i, row) in rows.chunks(vocab).enumerate() {
                    std::hint::black_box(s.verify(row, i as u32, &[(i as u32, 1.0)]));
                }
            }
        });
        let c = |v: f64| (v / plain - 1.0) / k as f64;
        let ms = |s: f64| s * 1e3;
        println!(
            "| {b} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            ms(plain),
            ms(all),
            ms(last),
            c(all),
            c(last),
            ms(mm1),
            ms(mmt),
            ms(at1),
            ms(att),
            ms(lm1),
            ms(lmt),
            ms(sampler)
        );
    }
}
