//! `cargo bench -p tgi-engines --bench attention`: host attention of one prefill over the paged KV cache, for
//! the TinyLlama-1.1B shape (32 query heads, 4 KV heads of 64, 16-token blocks): ms per layer and per 22-layer
//! prompt, best of several runs by the wall clock and by the process's CPU time (steadier on a shared machine).
//! `ATTN_TOKENS=512,2048` sets the prompt lengths, `ATTN_DTYPES=f16,f32` the cache types; threads:
//! `RAYON_NUM_THREADS`.

use std::time::{Duration, Instant};

use candle_core::{Device, Tensor};
use tgi_engines::kv::{AttentionPlan, BlockTable, KvCache, KvDType, KvShape, SeqSpan, BLOCK_SIZE};

/// Heads, KV heads, head width and layers of TinyLlama-1.1B.
const SHAPE: (usize, usize, usize, usize) = (32, 4, 64, 22);

/// CPU seconds used by this process so far (every thread).
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0).collect()
}

fn main() {
    let list = |var: &str, default: &str| -> Vec<String> {
        std::env::var(var).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
    };
    let (heads, kv_heads, hd, layers) = SHAPE;
    println!("{} threads; {heads} heads, {kv_heads} KV heads of {hd}", rayon::current_num_threads());
    println!("{:<5} {:>6} {:>13} {:>13} {:>15}", "cache", "tokens", "ms/layer wall", "ms/layer cpu", "ms/prompt wall");
    for dtype in list("ATTN_DTYPES", "f16,f32") {
        let kv = match dtype.as_str() {
            "f16" => KvDType::F16,
            "f32" => KvDType::F32,
            "bf16" => KvDType::BF16,
            "q8_0" => KvDType::Q8_0,
            other => panic!("unknown cache type {other}"),
        };
        for tokens in list("ATTN_TOKENS", "512").iter().map(|s| s.parse::<usize>().expect("tokens")) {
            let blocks = tokens.div_ceil(BLOCK_SIZE);
            let shape = KvShape { layers: 1, kv_heads, head_dim: hd, block_size: BLOCK_SIZE, num_blocks: blocks };
            let mut cache = KvCache::new(shape, &Device::Cpu, kv).expect("cache");
            let mut table = BlockTable::new();
            cache.reserve(&mut table, tokens).expect("blocks");
            let plan =
                AttentionPlan::new(vec![SeqSpan { rows: 0..tokens, start: 0, table }], heads, kv_heads, hd, None);
            let t = |w: usize, seed| Tensor::from_vec(values(tokens * w, seed), (tokens, w), &Device::Cpu).unwrap();
            let (q, k, v) = (t(heads * hd, 1), t(kv_heads * hd, 2), t(kv_heads * hd, 3));
            let mut run = || {
                std::hint::black_box(cache.attend(0, &q, &k, &v, &plan).expect("attend"));
            };
            run();
            let (mut wall, mut cpu) = (f64::MAX, f64::MAX);
            let start = Instant::now();
            let mut runs = 0;
            while runs < 3 || (start.elapsed() < Duration::from_secs(2) && runs < 50) {
                let (t0, c0) = (Instant::now(), cpu_seconds());
                run();
                wall = wall.min(t0.elapsed().as_secs_f64());
                cpu = cpu.min(cpu_seconds() - c0);
                runs += 1;
            }
            println!(
                "{:<5} {:>6} {:>13.2} {:>13.2} {:>15.1}",
                dtype,
                tokens,
                wall * 1e3,
                cpu * 1e3,
                wall * 1e3 * layers as f64
            );
        }
    }
}
