//! The non-Llama families against transformers (tests/reference/families/, made with their tiny random-weight
//! checkpoints by tests/reference/make_family_refs.py): float32 logits at every position within 1e-4 and 32
//! greedy tokens equal, from the Hugging Face directory and from `tgi quantize`'s F32 GGUF, on the host kernels
//! and on the tensor (GPU) path; and the KV-cache paths (chunked prefill, several sequences in one batch)
//! equal to one-shot. For the mixtures of experts also: the routing against transformers' own (every expert
//! chosen), and quantized expert stacks.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::engine::{decode_greedy, max_diff};
use common::server::{post_json, Server};
use common::{assert_ok, quantize, root, tgi};
use safetensors::SafeTensors;
use serde_json::{json, Value};
use tgi_engines::kv::{BlockTable, KvCache};
use tgi_engines::model::{load, route, LoadOptions, LoadedModel, Logits, SeqInput};

/// One prompt's reference: its ids, transformers' greedy ids and logits at every position of prompt + the
/// first 31 greedy tokens.
struct Case {
    prompt: String,
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
    logits: Vec<f32>,
}

impl Case {
    /// Prompt and greedy tokens but the last: the positions whose logits are recorded.
    fn sequence(&self) -> Vec<u32> {
        let mut s = self.prompt_ids.clone();
        s.extend_from_slice(&self.greedy_ids[..self.greedy_ids.len() - 1]);
        s
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// The family's reference cases and its checkpoint directory.
fn cases(family: &str) -> (Vec<Case>, std::path::PathBuf) {
    let dir = root().join("tests/reference/families");
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{family}.json"))).unwrap()).unwrap();
    let bytes = std::fs::read(dir.join(format!("{family}.safetensors"))).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let cases = meta["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let t = st.tensor(p["logits"].as_str().unwrap()).unwrap();
            let logits = t.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
            Case {
                prompt: p["prompt"].as_str().unwrap().to_string(),
                prompt_ids: ids(&p["prompt_ids"]),
                greedy_ids: ids(&p["greedy_ids"]),
                logits,
            }
        })
        .collect();
    (cases, root().join(meta["dir"].as_str().unwrap()))
}

fn open(path: &Path, tensor_ops: bool) -> Arc<LoadedModel> {
    let opts = LoadOptions { cpu_tensor_ops: tensor_ops, ..LoadOptions::default() };
    Arc::new(load(path.to_str().unwrap(), &opts).unwrap())
}

fn cache(m: &LoadedModel) -> KvCache {
    m.model.new_cache(16, 64).unwrap()
}

/// Every position's logits of `tokens`, in one step.
fn all_logits(m: &LoadedModel, tokens: &[u32]) -> Vec<f32> {
    let mut kv = cache(m);
    let mut t = BlockTable::new();
    kv.reserve(&mut t, tokens.len()).unwrap();
    m.model.forward(&mut kv, &[SeqInput { tokens, start: 0, table: &t, logits: Logits::All }]).unwrap().remove(0)
}

/// Logits at every position and 32 greedy tokens equal transformers', from HF and from the F32 GGUF, on the
/// host kernels and the tensor path.
fn matches_transformers(family: &str) {
    let (cases, hf) = cases(family);
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join(format!("{family}-f32.gguf"));
    quantize(&hf, "f32", &gguf);
    for (file, tensor_ops) in [(&hf, false), (&gguf, false), (&hf, true), (&gguf, true)] {
        let m = open(file, tensor_ops);
        for c in &cases {
            let what = format!("{family} from {} (tensor path: {tensor_ops}) on {:?}", file.display(), c.prompt);
            assert_eq!(m.tokenizer.encode(&c.prompt, true, false).unwrap(), c.prompt_ids, "{what}");
            let d = max_diff(&all_logits(&m, &c.sequence()), &c.logits);
            eprintln!("{what}: max |Δlogit| over every position {d:.2e}");
            assert!(d < 1e-4, "{what}: {d}");
            assert_eq!(decode_greedy(&m, &c.prompt_ids, c.greedy_ids.len()), c.greedy_ids, "{what}");
        }
    }
}

/// A prefill in chunks of 3 tokens, and every case's sequence in one batch (prefill, then a decode step of
/// all of them together), give the one-shot logits.
fn kv_paths_match_one_shot(family: &str) {
    let (cases, hf) = cases(family);
    let m = open(&hf, false);
    let vocab = m.model.config().vocab;
    let seqs: Vec<Vec<u32>> = cases.iter().map(Case::sequence).collect();
    let alone: Vec<Vec<f32>> = seqs.iter().map(|s| all_logits(&m, s)).collect();
    for (s, want) in seqs.iter().zip(&alone) {
        let mut kv = cache(&m);
        let mut t = BlockTable::new();
        kv.reserve(&mut t, s.len()).unwrap();
        let mut got = Vec::new();
        for (i, chunk) in s.chunks(3).enumerate() {
            let input = SeqInput { tokens: chunk, start: 3 * i, table: &t, logits: Logits::All };
            got.extend(m.model.forward(&mut kv, &[input]).unwrap().remove(0));
        }
        assert!(max_diff(&got, want) < 1e-5, "{family}: chunked prefill");
    }
    // All but the last token of each sequence prefilled together, then the last tokens in one decode step.
    let mut kv = cache(&m);
    let tables: Vec<BlockTable> = seqs
        .iter()
        .map(|s| {
            let mut t = BlockTable::new();
            kv.reserve(&mut t, s.len()).unwrap();
            t
        })
        .collect();
    let prefill: Vec<SeqInput> = seqs
        .iter()
        .zip(&tables)
        .map(|(s, t)| SeqInput { tokens: &s[..s.len() - 1], start: 0, table: t, logits: Logits::All })
        .collect();
    let first = m.model.forward(&mut kv, &prefill).unwrap();
    let step: Vec<SeqInput> = seqs
        .iter()
        .zip(&tables)
        .map(|(s, t)| SeqInput { tokens: &s[s.len() - 1..], start: s.len() - 1, table: t, logits: Logits::Last })
        .collect();
    let last = m.model.forward(&mut kv, &step).unwrap();
    for (i, want) in alone.iter().enumerate() {
        let split = want.len() - vocab;
        assert!(max_diff(&first[i], &want[..split]) < 1e-5, "{family}: batched prefill of sequence {i}");
        assert!(max_diff(&last[i], &want[split..]) < 1e-5, "{family}: batched decode of sequence {i}");
    }
}

#[test]
fn qwen3_matches_transformers() {
    matches_transformers("qwen3");
}

#[test]
fn qwen3_kv_paths_match_one_shot() {
    kv_paths_match_one_shot("qwen3");
}

#[test]
fn gemma2_matches_transformers() {
    matches_transformers("gemma2");
}

#[test]
fn gemma2_kv_paths_match_one_shot() {
    kv_paths_match_one_shot("gemma2");
}

#[test]
fn gemma3_matches_transformers() {
    matches_transformers("gemma3");
}

#[test]
fn gemma3_kv_paths_match_one_shot() {
    kv_paths_match_one_shot("gemma3");
}

/// The router's choices against transformers' on its recorded logits (every layer, every position of the
/// routing prompt): the same experts in the same order, weights within 1e-6; every expert is chosen.
fn routing_matches_transformers(family: &str, experts: usize, top_k: usize, norm: bool) {
    let bytes = std::fs::read(root().join(format!("tests/reference/families/{family}.safetensors"))).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let f32s = |name: &str| -> Vec<f32> {
        st.tensor(name).unwrap().data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    };
    let mut layers = 0;
    while let Ok(t) = st.tensor(&format!("routing.l{layers}.experts")) {
        let chosen: Vec<usize> =
            t.data().chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap()) as usize).collect();
        let logits = f32s(&format!("routing.l{layers}.logits"));
        let weights = f32s(&format!("routing.l{layers}.weights"));
        let mut counts = vec![0; experts];
        for (row, l) in logits.chunks_exact(experts).enumerate() {
            let r = route(l, top_k, norm);
            let want = &chosen[row * top_k..(row + 1) * top_k];
            assert_eq!(r.iter().map(|c| c.0).collect::<Vec<_>>(), want, "{family} layer {layers} row {row}");
            for (k, (e, w)) in r.into_iter().enumerate() {
                assert!((w - weights[row * top_k + k]).abs() < 1e-6, "{family} layer {layers} row {row}");
                counts[e] += 1;
            }
        }
        eprintln!("{family} layer {layers}: tokens per expert {counts:?}");
        assert!(counts.iter().all(|&c| c > 0), "{family} layer {layers}: an expert is never chosen: {counts:?}");
        layers += 1;
    }
    assert!(layers > 0, "{family}: no routing recorded");
}

/// Expert stacks quantized by `tgi quantize` (Q8_0 GGUF) and in situ at load (`--quantize q8_0`, from the
/// HF experts) give the same logits (the same bytes, sliced from the stack or encoded per expert), within
/// `gguf_tolerance` (Mixtral's GGUF rotates permuted Q/K rows: float rounding that can tip an activation across an
/// 8-bit quantization boundary), close to float32 at most positions (where 8-bit weights flip a near-tie
/// between two experts the logits move by more, from there on).
fn quantized_experts_run(family: &str, gguf_tolerance: f32) {
    let (cases, hf) = cases(family);
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join(format!("{family}-q8_0.gguf"));
    let summary = quantize(&hf, "q8_0", &gguf);
    let file = tgi_formats::GgufFile::open(&gguf).unwrap();
    let stack = file.tensor("blk.0.ffn_gate_exps.weight").unwrap();
    assert_eq!((stack.ty, stack.dims.len()), (tgi_formats::GgmlType::Q8_0, 3), "{summary}");
    let insitu = LoadOptions { quantize: Some("q8_0".parse().unwrap()), ..LoadOptions::default() };
    let insitu = Arc::new(load(hf.to_str().unwrap(), &insitu).unwrap());
    let m = open(&gguf, false);
    let vocab = m.model.config().vocab;
    let mut per_position = Vec::new();
    for c in &cases {
        let logits = all_logits(&m, &c.sequence());
        let d = max_diff(&logits, &all_logits(&insitu, &c.sequence()));
        assert!(d <= gguf_tolerance, "{family}: GGUF and in-situ Q8_0 differ by {d}");
        per_position.extend(logits.chunks_exact(vocab).zip(c.logits.chunks_exact(vocab)).map(|(q, f)| max_diff(q, f)));
    }
    per_position.sort_by(f32::total_cmp);
    let median = per_position[per_position.len() / 2];
    eprintln!("{family} q8_0: median over positions of max |Δlogit| against float32 {median:.3}");
    assert!(median < 0.15, "{family} q8_0: median {median}");
}

#[test]
fn phi3_matches_transformers() {
    matches_transformers("phi3");
}

#[test]
fn phi3_kv_paths_match_one_shot() {
    kv_paths_match_one_shot("phi3");
}

#[test]
fn qwen3moe_routing_matches_transformers() {
    routing_matches_transformers("qwen3moe", 4, 2, true);
}

#[test]
fn mixtral_routing_matches_transformers() {
    routing_matches_transformers("mixtral", 4, 2, true);
}

#[test]
fn qwen3moe_quantized_experts_run() {
    quantized_experts_run("qwen3moe", 0.0);
}

#[test]
fn mixtral_quantized_experts_run() {
    quantized_experts_run("mixtral", 0.1);
}

#[test]
fn qwen3moe_matches_transformers() {
    matches_transformers("qwen3moe");
}

#[test]
fn qwen3moe_kv_paths_match_one_shot() {
    kv_paths_match_one_shot("qwen3moe");
}

#[test]
fn mixtral_matches_transformers() {
    matches_transformers("mixtral");
}

#[test]
fn mixtral_kv_paths_match_one_shot() {
    kv_paths_match_one_shot("mixtral");
}

/// `tgi serve` on each family's checkpoint with its family's real chat template: the chat route's greedy reply
/// is `tgi generate --chat`'s; `tgi bench` drives the model in-process.
#[test]
fn serve_chat_and_bench() {
    let templates = root().join("engines/tests/data/chat-templates");
    let cases = [
        ("qwen3", "Qwen-Qwen3-0.6B"),
        ("gemma2", "google-gemma-2-2b-it"),
        ("gemma3", "google-gemma-2-2b-it"),
        ("mixtral", "mistralai-Mistral-Nemo-Instruct-2407"),
        ("qwen3moe", "Qwen-Qwen3-0.6B"),
        ("phi3", "microsoft-Phi-3.5-mini-instruct"),
    ];
    let prompt = "Tell me a story.";
    for (family, template) in cases {
        let m = root().join(format!("models/tiny-{family}/hf"));
        let (m, t) = (m.to_str().unwrap(), templates.join(format!("{template}.jinja")));
        let t = t.to_str().unwrap();
        let args = ["generate", "-m", m, "--temperature", "0", "-n", "12", "--json", "--chat", "--chat-template", t];
        let want: Value = serde_json::from_str(&assert_ok(&tgi(args.iter().chain([&prompt])))).unwrap();
        let server = Server::start(&["-m", m, "--chat-template", t]);
        let body = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 12, "temperature": 0});
        let r = post_json(&server.url("/v1/chat/completions"), &body, 200);
        assert_eq!(r["choices"][0]["message"]["content"], want["text"], "{family}");
        assert_eq!(r["usage"]["completion_tokens"], 12, "{family}");
    }
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.json");
    let m = root().join("models/tiny-qwen3moe/hf");
    let bench = ["bench", "-m", m.to_str().unwrap(), "--requests", "4", "-c", "2", "--output-tokens", "8"];
    let out = tgi(bench.iter().chain(&["--input-tokens", "16", "--quiet", "--json", run.to_str().unwrap()]));
    assert_eq!(assert_ok(&out), "");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&run).unwrap()).unwrap();
    assert_eq!(r["runs"][0]["summary"]["requests_ok"].as_u64(), Some(4));
}
