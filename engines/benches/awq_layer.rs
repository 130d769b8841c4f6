//! `cargo bench -p tgi-engines --bench awq_layer`: wall-clock seconds of each step of AWQ's search for one decoder
//! layer, and the layer's total (times the layer count for the whole search). `AWQ_MODEL` is the Hugging Face
//! directory [default: the bundled stories-distill-4l], `AWQ_SAMPLES` the calibration samples of 512 tokens
//! [default: 128, the search's own default], cut from the built-in text repeated until it fills them; threads:
//! `RAYON_NUM_THREADS`.

use std::path::PathBuf;
use std::time::Instant;

use tgi_engines::awq::{parse_texts, AwqOptions, AwqSearch, Calibration, Step, TextFormat, DEFAULT_NAME, DEFAULT_TEXT};
use tgi_engines::model::DecoderConfig;
use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::hf::ModelConfig;
use tgi_formats::SafetensorsSet;

fn main() {
    let hf = std::env::var_os("AWQ_MODEL").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories-distill-4l/hf"),
        PathBuf::from,
    );
    let samples: usize = std::env::var("AWQ_SAMPLES").map_or(128, |s| s.parse().expect("AWQ_SAMPLES: a count"));
    let cfg = DecoderConfig::from_hf(&ModelConfig::from_file(&hf.join("config.json")).unwrap()).unwrap();
    let layers = cfg.layers;
    let src = SafetensorsSet::open_dir(&hf).unwrap();
    let tok = Tokenizer::from_tokenizer_json(&hf.join("tokenizer.json")).unwrap();
    let texts = parse_texts(DEFAULT_NAME, DEFAULT_TEXT, TextFormat::Plain).unwrap();
    let texts: Vec<String> = std::iter::repeat_n(texts, samples.div_ceil(4)).flatten().collect();
    let calib = Calibration::from_texts(DEFAULT_NAME, &texts, &tok, samples, 512).unwrap();
    println!("{}: {samples} samples of 512 tokens, {} threads", hf.display(), rayon::current_num_threads());
    let mut search = AwqSearch::new(&src, cfg, None, &calib, AwqOptions::default()).unwrap();
    let mut last: Option<(Step, Instant)> = None;
    let t0 = Instant::now();
    search
        .next_layer(&mut |s| {
            if let Some((p, t)) = last.replace((s, Instant::now())) {
                println!("{p:?}: {:.2} s", t.elapsed().as_secs_f64());
            }
        })
        .unwrap();
    if let Some((p, t)) = last {
        println!("{p:?}: {:.2} s", t.elapsed().as_secs_f64());
    }
    let layer = t0.elapsed().as_secs_f64();
    println!("layer: {layer:.2} s; {layers} layers: about {:.1} min", layer * layers as f64 / 60.0);
}
