//! The GGUF reader on arbitrary bytes, then everything a loader reads from an accepted file: every
//! metadata value, every tensor's bytes, and the `tokenizer.ggml.*` vocabulary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::GgufFile;

#[path = "scratch.rs"]
mod scratch;

fuzz_target!(|data: &[u8]| {
    let path = scratch::write("model.gguf", data);
    let Ok(file) = GgufFile::open(&path) else {
        return;
    };
    for (key, value) in file.metadata() {
        assert!(file.get(key).is_some());
        let _ = format!("{value:?}");
    }
    for t in file.tensors() {
        assert_eq!(file.tensor(&t.name), Some(t));
        let bytes = file.tensor_data(t);
        assert!(bytes.is_empty() || bytes.len() as u64 == t.size);
    }
    if let Ok(tok) = Tokenizer::from_gguf(&file) {
        if let Ok(ids) = tok.encode("Hello world <s> 123", true, true) {
            let _ = tok.decode(&ids, false);
        }
    }
});
