//! LoRA adapters against transformers+peft (tests/reference/lora/, made by make_lora_refs.py): tgi's logits with
//! each adapter within 1e-4 of peft's, from the HF checkpoint and from the GGUF (whose Q/K rows llama.cpp
//! permutes); the same adapters converted by llama.cpp's convert_lora_to_gguf.py (make_gguf_lora_refs.py) give
//! the same logits; an adapter named by hub id loads from the Hugging Face cache; greedy text equal to the merged
//! model's; a step mixing adapters and the base gives each sequence what it gets alone; adapters that do not fit
//! are refused with the reason.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{model, root};
use serde_json::Value;
use tgi_engines::kv::BlockTable;
use tgi_engines::lora::{LoraAdapter, LoraUse};
use tgi_engines::model::{load, LoadOptions, LoadedModel, Logits, SeqInput};

fn refs() -> Value {
    let path = root().join("tests/reference/lora/lora_refs.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn adapter_dir(name: &str) -> PathBuf {
    root().join("tests/reference/lora").join(name)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn open(path: &Path) -> LoadedModel {
    load(path.to_str().unwrap(), &LoadOptions::default()).unwrap()
}

fn adapter(m: &LoadedModel, name: &str) -> Option<LoraUse> {
    Some(LoraUse::new(Arc::new(LoraAdapter::load(name, &adapter_dir(name), m.model.config(), 256).unwrap())))
}

/// Each prompt's last logits, all prompts in one step, each with its adapter.
fn last_logits(m: &LoadedModel, prompts: &[Vec<u32>], lora: &[Option<LoraUse>]) -> Vec<Vec<f32>> {
    let mut kv = m.model.new_cache(16, 64).unwrap();
    let tables: Vec<BlockTable> = prompts
        .iter()
        .map(|p| {
            let mut t = BlockTable::new();
            kv.reserve(&mut t, p.len()).unwrap();
            t
        })
        .collect();
    let batch: Vec<SeqInput<'_>> = prompts
        .iter()
        .zip(&tables)
        .map(|(p, t)| SeqInput { tokens: p, start: 0, table: t, logits: Logits::Last })
        .collect();
    m.model.run_lora(&mut kv, &batch, false, lora).unwrap().logits
}

/// `n` greedy tokens after `prompt` through the KV cache, with `lora`.
fn greedy(m: &LoadedModel, prompt: &[u32], n: usize, lora: &Option<LoraUse>) -> Vec<u32> {
    let mut kv = m.model.new_cache(16, 64).unwrap();
    let mut t = BlockTable::new();
    let (mut seq, mut start) = (prompt.to_vec(), 0);
    for _ in 0..n {
        kv.reserve(&mut t, seq.len()).unwrap();
        let input = SeqInput { tokens: &seq[start..], start, table: &t, logits: Logits::Last };
        let logits = m.model.run_lora(&mut kv, &[input], false, std::slice::from_ref(lora)).unwrap().logits.remove(0);
        start = seq.len();
        let best = logits.iter().enumerate().fold((0, f32::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b });
        seq.push(best.0 as u32);
    }
    seq[prompt.len()..].to_vec()
}

/// Asserts that `lora` on `m` gives peft's last logits (within 1e-4) on every prompt of adapter `name`.
fn assert_peft_logits(m: &LoadedModel, name: &str, lora: &Option<LoraUse>, what: &str) {
    let r = refs();
    for p in r["adapters"][name]["prompts"].as_array().unwrap() {
        let prompt = ids(&p["prompt_ids"]);
        let want: Vec<f32> = p["last_logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
        let got = last_logits(m, std::slice::from_ref(&prompt), std::slice::from_ref(lora)).remove(0);
        let d = max_diff(&got, &want);
        assert!(d < 1e-4, "{name} ({what}), {:?}: max |diff| {d}", p["prompt"]);
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn logits_match_peft_and_greedy_text_the_merged_model() {
    let r = refs();
    let hf = [
        ("stories260k", open(&model("stories260k/hf"))),
        ("stories-distill-4l", open(&model("stories-distill-4l/hf"))),
    ];
    let gguf = open(&model("stories260k/stories260k-f32.gguf"));
    for (name, a) in r["adapters"].as_object().unwrap() {
        let base = a["base"].as_str().unwrap();
        let m = &hf.iter().find(|(n, _)| *n == base).unwrap().1;
        let mut bases = vec![m];
        if base == "stories260k" {
            bases.push(&gguf);
        }
        for m in bases {
            let lora = adapter(m, name);
            assert_peft_logits(m, name, &lora, base);
            for p in a["prompts"].as_array().unwrap() {
                let prompt = ids(&p["prompt_ids"]);
                let want_ids = ids(&p["greedy_ids"]);
                assert_ne!(want_ids, ids(&p["base_greedy_ids"]), "the adapter changes the text");
                assert_eq!(greedy(m, &prompt, want_ids.len(), &lora), want_ids, "{name}, {:?}", p["prompt"]);
            }
        }
    }
}

/// The stories260k adapters convert_lora_to_gguf.py converted (the rsLoRA one is left out: the converter drops
/// `use_rslora`); together they cover all seven projections.
const GGUF_ADAPTERS: [&str; 3] = ["s260k-qv-r4", "s260k-mlp-r2", "s260k-kd-r16"];

#[test]
fn llama_cpp_gguf_adapters_give_peft_s_logits() {
    let hf = open(&model("stories260k/hf"));
    let gguf = open(&model("stories260k/stories260k-f32.gguf"));
    for name in GGUF_ADAPTERS {
        let path = adapter_dir(name).with_extension("gguf");
        // B's q/k rows come permuted as llama.cpp's converter stores them: undone for the HF base, kept for the GGUF.
        for (m, what) in [(&hf, "GGUF adapter, HF base"), (&gguf, "GGUF adapter, GGUF base")] {
            let a = LoraAdapter::load(name, &path, m.model.config(), 256).unwrap();
            assert_eq!(a.rank(), adapter(m, name).unwrap().adapter.rank());
            assert_peft_logits(m, name, &Some(LoraUse::new(Arc::new(a))), what);
        }
    }
    // A model is not an adapter; an adapter of another base, or of too high a rank, is refused.
    let err = |m: &LoadedModel, path: &Path, max: usize| {
        LoraAdapter::load("x", path, m.model.config(), max).unwrap_err().to_string()
    };
    let e = err(&hf, &model("stories260k/stories260k-f32.gguf"), 256);
    assert!(e.contains("no general.type: not an adapter"), "{e}");
    let big = open(&model("stories-distill-4l/hf"));
    let e = err(&big, &adapter_dir("s260k-qv-r4").with_extension("gguf"), 256);
    assert!(e.contains("has shape") && e.contains("another base"), "{e}");
    let e = err(&hf, &adapter_dir("s260k-kd-r16").with_extension("gguf"), 8);
    assert!(e.contains("rank 16 exceeds --max-lora-rank 8"), "{e}");
}

/// The only test here that touches HF_* variables (process-global).
#[test]
fn hub_ids_resolve_through_the_hugging_face_cache() {
    let cache = tempfile::tempdir().unwrap();
    let snapshot = cache.path().join("models--org--qv/snapshots/0123abcd");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(cache.path().join("models--org--qv/refs")).unwrap();
    std::fs::write(cache.path().join("models--org--qv/refs/main"), "0123abcd").unwrap();
    for f in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(adapter_dir("s260k-qv-r4").join(f), snapshot.join(f)).unwrap();
    }
    std::env::set_var("HF_HUB_CACHE", cache.path());
    std::env::set_var("HF_HUB_OFFLINE", "1");
    let dir = tgi_formats::hf::resolve_adapter("org/qv").unwrap();
    assert_eq!(dir, snapshot);
    let m = open(&model("stories260k/hf"));
    let a = LoraAdapter::load("org/qv", &dir, m.model.config(), 256).unwrap();
    assert_peft_logits(&m, "s260k-qv-r4", &Some(LoraUse::new(Arc::new(a))), "from the hub cache");
    let e = tgi_formats::hf::resolve_adapter("org/missing").unwrap_err().to_string();
    assert!(e.contains("HF_HUB_OFFLINE is set") && e.contains("adapter_config.json"), "{e}");
}

#[test]
fn one_step_mixes_adapters_and_the_base() {
    let m = open(&model("stories260k/hf"));
    let names = ["s260k-qv-r4", "s260k-all-r8-rs", "s260k-mlp-r2", "s260k-kd-r16"];
    let prompts: Vec<Vec<u32>> =
        (0..10).map(|i| (1..=3 + i % 4).map(|t| (t * 37 + i * 11) as u32 % 500 + 3).collect()).collect();
    let uses: Vec<Option<LoraUse>> =
        (0..prompts.len()).map(|i| names.get(i % 5).and_then(|n| adapter(&m, n))).collect();
    let mixed = last_logits(&m, &prompts, &uses);
    for (i, p) in prompts.iter().enumerate() {
        let alone = last_logits(&m, std::slice::from_ref(p), &uses[i..=i]).remove(0);
        let d = max_diff(&mixed[i], &alone);
        // The base kernels' sums may group differently over more rows: float32 rounding, relative to the logits.
        let scale = alone.iter().fold(1f32, |m, x| m.max(x.abs()));
        assert!(d < 1e-5 * scale, "sequence {i}: mixed step differs from alone by {d} (logits up to {scale})");
    }
    // A scale of 0 is the base; a scale of 2 doubles the adapter's product.
    let base = last_logits(&m, &prompts[..1], &[None]).remove(0);
    let zero = Some(LoraUse { scale: 0.0, ..uses[0].clone().unwrap() });
    assert!(max_diff(&last_logits(&m, &prompts[..1], &[zero]).remove(0), &base) < 1e-6);
}

#[test]
fn adapters_that_do_not_fit_are_refused_with_the_reason() {
    let small = open(&model("stories260k/hf"));
    let big = open(&model("stories-distill-4l/hf"));
    let err = |m: &LoadedModel, name: &str, max: usize| {
        LoraAdapter::load(name, &adapter_dir(name), m.model.config(), max).unwrap_err().to_string()
    };
    let e = err(&big, "s260k-qv-r4", 256);
    assert!(e.contains("has shape") && e.contains("another base"), "{e}");
    let e = err(&small, "d4l-all-r16", 256);
    assert!(e.contains("layers") || e.contains("has shape"), "{e}");
    let e = err(&small, "s260k-kd-r16", 8);
    assert!(e.contains("rank 16 exceeds --max-lora-rank 8"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    for f in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(adapter_dir("s260k-qv-r4").join(f), dir.path().join(f)).unwrap();
    }
    let cfg = dir.path().join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]");
    std::fs::write(&cfg, text).unwrap();
    let e = LoraAdapter::load("x", dir.path(), small.model.config(), 256).unwrap_err().to_string();
    assert!(e.contains("modules_to_save"), "{e}");
    let e = LoraAdapter::load("x", Path::new("/nonexistent"), small.model.config(), 256).unwrap_err().to_string();
    assert!(e.contains("adapter_config.json"), "{e}");
}
