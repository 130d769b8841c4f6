//! The batched step gives each sequence the logits it would get alone, in any batch composition,
//! chunking and block placement; and the tensor (GPU) attention path agrees with the host path.

use std::path::PathBuf;

use tgi_engines::kv::{BlockTable, KvCache};
use tgi_engines::model::{load, LoadOptions, LoadedModel, Logits, SeqInput};

fn stories() -> LoadedModel {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/hf");
    load(dir.to_str().unwrap(), &LoadOptions::default()).unwrap()
}

fn cache(m: &LoadedModel, blocks: usize) -> KvCache {
    m.model.new_cache(4, blocks).unwrap()
}

const PROMPTS: [&[u32]; 3] = [&[1, 403, 407, 261, 378], &[1, 17, 300, 87, 42, 99, 7, 311, 5], &[1, 200]];

/// Each prompt alone, all rows' logits.
fn alone(m: &LoadedModel, prompt: &[u32]) -> Vec<f32> {
    let mut kv = cache(m, 8);
    let mut t = BlockTable::new();
    kv.reserve(&mut t, prompt.len()).unwrap();
    m.model
        .forward(&mut kv, &[SeqInput { tokens: prompt, start: 0, table: &t, logits: Logits::All }])
        .unwrap()
        .remove(0)
}

fn close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(worst < 1e-4, "{what}: max |diff| {worst}");
}

#[test]
fn batched_equals_alone_in_any_composition() {
    let m = stories();
    let vocab = m.model.config().vocab;
    let refs: Vec<Vec<f32>> = PROMPTS.iter().map(|p| alone(&m, p)).collect();

    // All three prefilled together, in one step, with blocks interleaved by growing tables in turns.
    let mut kv = cache(&m, 16);
    let mut tables = vec![BlockTable::new(); 3];
    for n in [1, 4, 8, 12] {
        for (t, p) in tables.iter_mut().zip(PROMPTS) {
            kv.reserve(t, n.min(p.len())).unwrap();
        }
    }
    let batch: Vec<SeqInput> = PROMPTS
        .iter()
        .zip(&tables)
        .map(|(p, t)| SeqInput { tokens: p, start: 0, table: t, logits: Logits::All })
        .collect();
    let out = m.model.forward(&mut kv, &batch).unwrap();
    for (i, (o, r)) in out.iter().zip(&refs).enumerate() {
        close(o, r, &format!("prompt {i} in a batch of 3"));
    }

    // Prompt 1 in chunks of 2 beside prompt 0 decoding token by token, sequences joining and leaving.
    let mut kv = cache(&m, 16);
    let (mut t0, mut t1) = (BlockTable::new(), BlockTable::new());
    kv.reserve(&mut t0, PROMPTS[0].len()).unwrap();
    kv.reserve(&mut t1, PROMPTS[1].len()).unwrap();
    let (p0, p1) = (PROMPTS[0], PROMPTS[1]);
    let mut got1 = Vec::new();
    for step in 0..p1.len().div_ceil(2) {
        let chunk = &p1[step * 2..(step * 2 + 2).min(p1.len())];
        let mut batch = vec![SeqInput { tokens: chunk, start: step * 2, table: &t1, logits: Logits::All }];
        if step < p0.len() {
            batch.insert(0, SeqInput { tokens: &p0[step..step + 1], start: step, table: &t0, logits: Logits::Last });
        }
        let out = m.model.forward(&mut kv, &batch).unwrap();
        if step < p0.len() {
            close(&out[0], &refs[0][step * vocab..(step + 1) * vocab], &format!("prompt 0 decode step {step}"));
        }
        got1.extend_from_slice(out.last().unwrap());
    }
    close(&got1, &refs[1], "prompt 1 chunked beside a decode");
    // Released blocks are reused by a new sequence without stale state leaking in.
    kv.release(&mut t0);
    let mut t2 = BlockTable::new();
    kv.reserve(&mut t2, PROMPTS[2].len()).unwrap();
    let out = m.model.forward(&mut kv, &[SeqInput { tokens: PROMPTS[2], start: 0, table: &t2, logits: Logits::All }]);
    close(&out.unwrap()[0], &refs[2], "prompt 2 in reused blocks");
}

/// `Logits::From(k)` gives the rows of `Logits::All` from the `k`-th on, beside sequences that ask for others.
#[test]
fn logits_from_a_row_are_the_tail_of_all_rows() {
    let m = stories();
    let vocab = m.model.config().vocab;
    let full = alone(&m, PROMPTS[1]);
    let mut kv = cache(&m, 16);
    let mut tables = vec![BlockTable::new(); 2];
    kv.reserve(&mut tables[0], PROMPTS[1].len()).unwrap();
    kv.reserve(&mut tables[1], PROMPTS[0].len()).unwrap();
    for k in [0, 3, PROMPTS[1].len(), PROMPTS[1].len() + 2] {
        let batch = [
            SeqInput { tokens: PROMPTS[1], start: 0, table: &tables[0], logits: Logits::From(k) },
            SeqInput { tokens: PROMPTS[0], start: 0, table: &tables[1], logits: Logits::Last },
        ];
        let out = m.model.forward(&mut kv, &batch).unwrap();
        let from = k.min(PROMPTS[1].len());
        close(&out[0], &full[from * vocab..], &format!("rows from {k}"));
        assert_eq!(out[1].len(), vocab, "the other sequence's last row");
    }
}
