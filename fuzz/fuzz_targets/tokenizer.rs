//! The tokenizers on arbitrary input: the GGUF vocabularies of `engines/tests/data/tokenizers/`
//! (SentencePiece and byte-level BPE with their pre-tokenizers) and the bundled model's
//! `tokenizer.json`, loaded once. Encodes arbitrary text, decodes arbitrary ids (in and out of the
//! vocabulary) at once and incrementally.
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tgi_engines::text::tokenizer::{IncrementalDecoder, Tokenizer};
use tgi_formats::GgufFile;

/// The GGUF vocabularies, by file name under `engines/tests/data/tokenizers/`.
const VOCABS: [&str; 5] = [
    "ggml-vocab-llama-spm.gguf",
    "ggml-vocab-llama-bpe.gguf",
    "ggml-vocab-qwen2.gguf",
    "ggml-vocab-gpt-2.gguf",
    "ggml-vocab-phi-3.gguf",
];

/// Every tokenizer, loaded once.
fn tokenizers() -> &'static [Tokenizer] {
    static ALL: OnceLock<Vec<Tokenizer>> = OnceLock::new();
    ALL.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let data = root.join("engines/tests/data/tokenizers");
        let mut all: Vec<Tokenizer> = VOCABS
            .iter()
            .map(|name| Tokenizer::from_gguf(&GgufFile::open(&data.join(name)).expect(name)).expect(name))
            .collect();
        let json = root.join("models/stories260k/hf/tokenizer.json");
        all.push(Tokenizer::from_tokenizer_json(&json).expect("bundled tokenizer.json"));
        all
    })
}

#[derive(Arbitrary, Debug)]
struct Input {
    vocab: u8,
    text: String,
    add_special: bool,
    parse_special: bool,
    /// Ids taken modulo a little more than the vocabulary, so most are in it.
    ids: Vec<u32>,
    skip_special: bool,
}

// Loaded before the first input, so that loading does not count against `-timeout`.
fuzz_target!(init: { tokenizers(); }, |input: Input| {
    let all = tokenizers();
    let tok = &all[input.vocab as usize % all.len()];
    let n = tok.vocab_size() as u32;
    if let Ok(ids) = tok.encode(&input.text, input.add_special, input.parse_special) {
        assert!(ids.iter().all(|&id| id < n), "encode gave an id outside the vocabulary");
        let _ = tok.decode(&ids, input.skip_special);
    }
    let ids: Vec<u32> = input.ids.iter().map(|&id| id % (n + 16)).collect();
    let _ = tok.decode(&ids, input.skip_special);
    let mut dec = IncrementalDecoder::new(tok);
    let mut streamed: String = ids.iter().filter_map(|&id| dec.push(id)).collect();
    streamed.push_str(&dec.finish());
    let pieces: Vec<u8> = ids.iter().flat_map(|&id| tok.token_to_piece(id)).collect();
    assert_eq!(streamed, String::from_utf8_lossy(&pieces), "incremental decoding differs from the pieces");
});
