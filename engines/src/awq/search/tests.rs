//! Checks of the search on the bundled stories-distill-4l model: the dense calibration forward against the
//! engine's logits, scale folding preserving the layer, and the search never losing to round-to-nearest.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use candle_nn::ops::rms_norm;
use tgi_formats::hf::ModelConfig;
use tgi_formats::SafetensorsSet;

use super::*;
use crate::awq::calibration::{parse_texts, TextFormat};
use crate::awq::forward::{linear, matrix};
use crate::kv::BlockTable;
use crate::model::{load, LoadOptions, Logits, SeqInput};
use crate::text::tokenizer::Tokenizer;

fn dir(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models").join(model)
}

fn stories() -> (SafetensorsSet, DecoderConfig) {
    let hf = dir("stories-distill-4l/hf");
    let cfg = DecoderConfig::from_hf(&ModelConfig::from_file(&hf.join("config.json")).unwrap()).unwrap();
    (SafetensorsSet::open_dir(&hf).unwrap(), cfg)
}

fn calibration(samples: usize, seq: usize) -> Calibration {
    let d = dir("stories-distill-4l");
    let tok = Tokenizer::from_tokenizer_json(&d.join("hf/tokenizer.json")).unwrap();
    let text = std::fs::read_to_string(d.join("text/calibration.txt")).unwrap();
    let texts = parse_texts("calibration.txt", &text, TextFormat::Plain).unwrap();
    Calibration::from_texts("calibration.txt", &texts, &tok, samples, seq).unwrap()
}

/// The dense layer-by-layer forward gives the engine's logits (the engine runs tgi's own CPU kernels and a
/// paged KV cache; the calibration forward candle matmuls and whole-sample attention).
#[test]
fn dense_forward_matches_the_engine() {
    let (src, cfg) = stories();
    let calib = calibration(2, 48);
    let m = load(dir("stories-distill-4l/hf").to_str().unwrap(), &LoadOptions::default()).unwrap();
    let mut kv = m.model.new_cache(16, 8).unwrap();
    let mut engine = Vec::new();
    for b in &calib.blocks {
        let mut table = BlockTable::new();
        kv.reserve(&mut table, b.len()).unwrap();
        let input = SeqInput { tokens: b, start: 0, table: &table, logits: Logits::All };
        engine.extend(m.model.forward(&mut kv, &[input]).unwrap().remove(0));
        kv.release(&mut table);
    }
    let mut search = AwqSearch::new(&src, cfg.clone(), None, &calib, AwqOptions::default()).unwrap();
    let rope = Rope::new(&cfg, None);
    let ctx = Context { cfg: &cfg, rope: &rope, seq: calib.seq_len };
    for i in 0..cfg.layers {
        let layer = DenseLayer::new(&LayerWeights::read(&src, &cfg, i).unwrap(), &cfg).unwrap();
        search.x = layer.forward(&ctx, &search.x).unwrap().out;
    }
    let norm = Tensor::new(src.read_f32("model.norm.weight").unwrap(), &Device::Cpu).unwrap();
    let head = matrix(&src.read_f32("lm_head.weight").unwrap(), cfg.vocab, cfg.hidden).unwrap();
    let ours = linear(&rms_norm(&search.x, &norm, cfg.rms_eps).unwrap(), &head, None).unwrap();
    let ours = ours.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(ours.len(), engine.len());
    let max = ours.iter().zip(&engine).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let scale = engine.iter().fold(0f32, |m, v| m.max(v.abs()));
    eprintln!("max |dlogit| = {max:e} (max |logit| {scale})");
    assert!(max < 1e-3, "max |dlogit| {max}");
}

/// Folding scales into the norms and linears leaves the layer's output unchanged before quantization.
#[test]
fn folded_scales_preserve_the_layer() {
    let (src, cfg) = stories();
    let calib = calibration(2, 64);
    let search = AwqSearch::new(&src, cfg.clone(), None, &calib, AwqOptions::default()).unwrap();
    let ctx = search.ctx();
    let mut mha = cfg.clone();
    mha.kv_heads = mha.heads;
    assert_eq!(groups(&cfg).len(), 3, "GQA: no v -> o group");
    assert_eq!(groups(&mha).len(), 4);
    let lw = LayerWeights::read(&src, &cfg, 1).unwrap();
    let before = DenseLayer::new(&lw, &cfg).unwrap().forward(&ctx, &search.x).unwrap().out;
    let mut folded = lw.clone();
    for (n, g) in groups(&cfg).iter().enumerate() {
        let (_, i) = g.linears[0].shape(&cfg);
        let s: Vec<f32> = (0..i).map(|c| 0.5 + ((c * 7 + n * 3) % 13) as f32 / 8.0).collect();
        fold(&mut folded, g, &s);
    }
    assert_ne!(folded, lw);
    let after = DenseLayer::new(&folded, &cfg).unwrap().forward(&ctx, &search.x).unwrap().out;
    let max = (before - after).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    eprintln!("max |dout| = {max:e}");
    assert!(max < 1e-4, "{max}");
}

/// On every layer and group the searched loss is no worse than round-to-nearest's, and the weights handed
/// over are scaled and clipped.
#[test]
fn search_beats_round_to_nearest_on_stories() {
    let (src, cfg) = stories();
    let calib = calibration(8, 128);
    let opts = AwqOptions { search_samples: 4, ..AwqOptions::default() };
    let mut search = AwqSearch::new(&src, cfg.clone(), None, &calib, opts).unwrap();
    assert_eq!(search.steps_per_layer(), 1 + 3 + 5);
    let mut steps = Vec::new();
    let mut layers = 0;
    let mut lines = Vec::new();
    while let Some(l) = search.next_layer(&mut |s| steps.push(s)).unwrap() {
        lines.extend(reference_lines(&l));
        let orig = LayerWeights::read(&src, &cfg, layers).unwrap();
        assert_eq!(l.weights.index, layers);
        assert_eq!(l.groups.len(), 3);
        for g in &l.groups {
            eprintln!("layer {layers} {:?}: ratio {:?} loss {:e} rtn {:e}", g.linears, g.ratio, g.loss, g.rtn_loss);
            assert!(g.loss <= g.rtn_loss, "layer {layers} {:?}: {} > {}", g.linears, g.loss, g.rtn_loss);
        }
        assert!(l.groups.iter().any(|g| g.ratio.is_some() && g.loss < g.rtn_loss));
        assert_ne!(l.weights.input_norm, orig.input_norm);
        assert_ne!(l.weights.weight(Proj::Down), orig.weight(Proj::Down));
        layers += 1;
    }
    assert_eq!(layers, cfg.layers);
    assert_eq!(steps.len(), cfg.layers * 9);
    assert_eq!(steps[..2], [Step::Forward, Step::Scale(Proj::Q)]);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(REFERENCE);
    if std::env::var_os("TGI_UPDATE_AWQ_REFERENCE").is_some() {
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap();
    assert_eq!(want.lines().count(), lines.len());
    for (w, got) in want.lines().zip(&lines) {
        assert!(same_line(w, got), "reference {w}\n   search {got}");
    }
}

/// The search's outcome on stories-distill-4l, one line per group (`layer g<k> ratio loss rtn_loss`) and per
/// linear (`layer proj sum abs_sum` of the weights handed over), as `TGI_UPDATE_AWQ_REFERENCE=1` records it.
const REFERENCE: &str = "src/awq/search/stories_reference.txt";

/// The lines of [`REFERENCE`] for one searched layer.
fn reference_lines(l: &SearchedLayer) -> Vec<String> {
    let i = l.weights.index;
    let mut lines: Vec<String> = l
        .groups
        .iter()
        .enumerate()
        .map(|(k, g)| format!("{i} g{k} {:?} {:e} {:e}", g.ratio, g.loss, g.rtn_loss))
        .collect();
    for p in Proj::ALL {
        let w = l.weights.weight(p);
        let sum: f64 = w.iter().map(|&v| f64::from(v)).sum();
        let abs: f64 = w.iter().map(|&v| f64::from(v.abs())).sum();
        lines.push(format!("{i} {} {sum:e} {abs:e}", p.name()));
    }
    lines
}

/// Whether two reference lines agree: the same words, numbers within `1e-4` relative (or `1e-7` absolute). A
/// linear's signed sum (`layer proj sum abs_sum`) cancels, so it is held to `1e-4` of its absolute sum instead:
/// CPUs whose kernels add in another order (AVX2 against AVX-512) move it by about `1e-6` of that.
fn same_line(a: &str, b: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split(' ').collect(), b.split(' ').collect());
    let num = |s: &str| s.parse::<f64>().ok();
    let close = |x: f64, y: f64, scale: f64| (x - y).abs() <= 1e-4 * scale || (x - y).abs() < 1e-7;
    let linear = a.len() == 4 && !a[1].starts_with('g');
    if linear && b.len() == 4 && a[..2] == b[..2] {
        if let (Some(sa), Some(aa), Some(sb), Some(ab)) = (num(a[2]), num(a[3]), num(b[2]), num(b[3])) {
            return close(aa, ab, aa.max(ab)) && close(sa, sb, aa.max(ab));
        }
    }
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| match (num(x), num(y)) {
            (Some(x), Some(y)) => close(x, y, x.abs().max(y.abs())),
            _ => x == y,
        })
}

#[test]
fn groups_must_divide_the_inputs() {
    let hf = dir("stories260k/hf");
    let cfg = DecoderConfig::from_hf(&ModelConfig::from_file(&hf.join("config.json")).unwrap()).unwrap();
    let src = SafetensorsSet::open_dir(&hf).unwrap();
    let calib = Calibration { name: "t".into(), seq_len: 4, blocks: vec![vec![1; 4]], texts_used: 1, texts_skipped: 0 };
    let e = AwqSearch::new(&src, cfg, None, &calib, AwqOptions::default()).err().unwrap();
    assert_eq!(e.to_string(), "model.layers.N.self_attn.q_proj: 64 input features do not divide into groups of 128");
}

#[test]
fn other_families_are_refused() {
    let hf = dir("tiny-gemma2/hf");
    let cfg = DecoderConfig::from_hf(&ModelConfig::from_file(&hf.join("config.json")).unwrap()).unwrap();
    let src = SafetensorsSet::open_dir(&hf).unwrap();
    let calib = Calibration { name: "t".into(), seq_len: 4, blocks: vec![vec![1; 4]], texts_used: 1, texts_skipped: 0 };
    let e = AwqSearch::new(&src, cfg, None, &calib, AwqOptions::default()).err().unwrap();
    assert!(e.to_string().contains("Gemma2ForCausalLM is not one (supported: LlamaForCausalLM"), "{e}");
}
