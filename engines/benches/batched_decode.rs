//! Aggregate decode throughput of the batched step, as llama.cpp's `llama-batched-bench` measures it:
//! B sequences each prefill PP tokens (one batched step), then decode TG tokens together (one step per
//! token for all B).
//!
//! `cargo bench -p tgi-engines --bench batched_decode -- MODEL [PP TG B1,B2,...]`, e.g.
//! `-- bench/out/tinyllama-q4_k_m.gguf 16 32 1,4,16`. Threads: `RAYON_NUM_THREADS`.

use std::time::Instant;

use tgi_engines::kv::BlockTable;
use tgi_engines::model::{load, LoadOptions, Logits, SeqInput};

fn argmax(l: &[f32]) -> u32 {
    (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b]).then(b.cmp(&a))).unwrap_or(0) as u32
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let Some(model) = args.first() else {
        eprintln!("usage: cargo bench -p tgi-engines --bench batched_decode -- MODEL [PP TG B1,B2,...]");
        return;
    };
    let pp: usize = args.get(1).map_or(16, |s| s.parse().expect("PP"));
    let tg: usize = args.get(2).map_or(32, |s| s.parse().expect("TG"));
    let batches: Vec<usize> =
        args.get(3).map_or("1,4,16", String::as_str).split(',').map(|s| s.parse().expect("B")).collect();
    let m = load(model, &LoadOptions::default()).expect("load");
    let vocab = m.model.config().vocab as u32;
    println!(
        "| {:>5} | {:>5} | {:>4} | {:>8} | {:>8} | {:>8} | {:>8} |",
        "PP", "TG", "B", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s"
    );
    for &b in &batches {
        let mut kv = m.model.new_cache(16, b * (pp + tg).div_ceil(16)).expect("cache");
        let mut tables = vec![BlockTable::new(); b];
        for t in &mut tables {
            kv.reserve(t, pp + tg).expect("blocks");
        }
        let prompts: Vec<Vec<u32>> =
            (0..b).map(|s| (0..pp).map(|i| 1 + ((s * 7919 + i * 104729) as u32 % (vocab - 1))).collect()).collect();
        let start = Instant::now();
        let batch: Vec<SeqInput> = prompts
            .iter()
            .zip(&tables)
            .map(|(p, t)| SeqInput { tokens: p, start: 0, table: t, logits: Logits::Last })
            .collect();
        let mut next: Vec<u32> = m.model.forward(&mut kv, &batch).expect("prefill").iter().map(|l| argmax(l)).collect();
        let t_pp = start.elapsed().as_secs_f64();
        let start = Instant::now();
        for step in 0..tg {
            let batch: Vec<SeqInput> = next
                .iter()
                .zip(&tables)
                .map(|(tok, t)| SeqInput {
                    tokens: std::slice::from_ref(tok),
                    start: pp + step,
                    table: t,
                    logits: Logits::Last,
                })
                .collect();
            next = m.model.forward(&mut kv, &batch).expect("decode").iter().map(|l| argmax(l)).collect();
        }
        let t_tg = start.elapsed().as_secs_f64();
        println!(
            "| {pp:>5} | {tg:>5} | {b:>4} | {t_pp:>8.3} | {:>8.2} | {t_tg:>8.3} | {:>8.2} |",
            (b * pp) as f64 / t_pp,
            (b * tg) as f64 / t_tg
        );
    }
}
