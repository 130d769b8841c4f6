//! The Hugging Face JSON files a checkpoint directory carries, on arbitrary text. The first byte
//! picks the file: `config.json`, `generation_config.json`, `tokenizer.json` (as the GGUF
//! vocabulary and as the engine's tokenizer), or `tokenizer_config.json` beside the bundled
//! model's `tokenizer.json`.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::hf::{GenerationConfig, GgufVocab, ModelConfig};

#[path = "scratch.rs"]
mod scratch;

/// The bundled model's vocabulary size, which its `tokenizer.json` fits.
const VOCAB_SIZE: usize = 512;

/// The bundled model's `tokenizer.json`.
fn bundled_tokenizer_json() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/hf/tokenizer.json");
        std::fs::read(path).expect("the bundled model's tokenizer.json")
    })
}

/// Loads a `tokenizer.json` both ways and runs a short text through the engine's tokenizer.
fn load_tokenizer(json: &Path, config: Option<&Path>) {
    let _ = GgufVocab::from_hf_files(json, config, VOCAB_SIZE);
    if let Ok(tok) = Tokenizer::from_tokenizer_json(json) {
        if let Ok(ids) = tok.encode("Once upon a time, <s> 12 é", true, true) {
            let _ = tok.decode(&ids, true);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let _ = ModelConfig::from_json_str(&String::from_utf8_lossy(rest));
        }
        1 => {
            let _ = GenerationConfig::from_json_str(&String::from_utf8_lossy(rest));
        }
        2 => {
            let json = scratch::write("tokenizer/tokenizer.json", rest);
            load_tokenizer(&json, None);
        }
        _ => {
            let json = scratch::write("tokenizer_config/tokenizer.json", bundled_tokenizer_json());
            let config = scratch::write("tokenizer_config/tokenizer_config.json", rest);
            load_tokenizer(&json, Some(&config));
        }
    }
});
