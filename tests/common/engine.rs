//! Running a loaded model in-process: every position's logits, greedy continuations, logit distances.

use std::path::Path;
use std::sync::Arc;

use tgi_engines::generate::{generate, GenerateRequest};
use tgi_engines::kv::BlockTable;
use tgi_engines::model::{load, LoadOptions, LoadedModel, Logits, SeqInput};
use tgi_engines::sampling::SamplingParams;
use tgi_engines::scheduler::Request;

/// Loads `path` with `opts`.
pub fn open(path: &Path, opts: LoadOptions) -> LoadedModel {
    load(path.to_str().unwrap(), &opts).unwrap()
}

/// Logits of every position after `tokens`.
pub fn logits(m: &LoadedModel, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut kv = m.model.new_cache(16, 64).unwrap();
    let mut t = BlockTable::new();
    kv.reserve(&mut t, tokens.len()).unwrap();
    let seq = SeqInput { tokens, start: 0, table: &t, logits: Logits::All };
    m.model.forward(&mut kv, &[seq]).unwrap().remove(0).chunks(m.model.config().vocab).map(<[f32]>::to_vec).collect()
}

/// The index of the largest value (the first on ties).
pub fn argmax(l: &[f32]) -> usize {
    (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b]).then(b.cmp(&a))).unwrap()
}

/// `n` greedy tokens after `prompt`.
pub fn greedy(m: &LoadedModel, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let l = logits(m, &seq).pop().unwrap();
        seq.push(argmax(&l) as u32);
    }
    seq[prompt.len()..].to_vec()
}

/// `n` greedy tokens after `prompt` through the engine's generation loop (KV cache, one-token decode steps),
/// never stopping at EOS.
pub fn decode_greedy(m: &Arc<LoadedModel>, prompt: &[u32], n: usize) -> Vec<u32> {
    let request = Request {
        prompt_ids: prompt.to_vec(),
        params: SamplingParams::greedy(),
        max_new_tokens: n,
        stop: vec![],
        ignore_eos: true,
        prompt_logprobs: false,
        cache_salt: 0,
        constraint: None,
        request_id: String::new(),
        thinking: None,
        pooling: None,
        lora: None,
    };
    generate(m, &GenerateRequest { request, prefill_chunk: 512 }, |_| {}).unwrap().tokens
}

/// The largest absolute difference between two equally long slices.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
